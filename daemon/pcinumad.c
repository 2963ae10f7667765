/* pcinumad: the resident daemon behind the libvirt hook.  This file only
 * parses the command line and runs the manager (systemd-oomd's oomd.c
 * layout). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>

#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "paths.h"
#include "util.h"
#include "watcher-protocol.h"
#include "workers.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumad [OPTIONS]\n"
                "\n"
                "The pcinuma daemon: answers the libvirt qemu hook (pcinuma-hook) with NUMA-aware\n"
                "PCI placement decisions.\n"
                "\n"
                "  --sysfs-root DIR        read the host from DIR instead of /sys ($PCINUMA_SYSFS_ROOT)\n"
                "  --policy-file FILE      the policy file (default " PCINUMA_DEFAULT_POLICY_FILE "; a missing\n"
                "                          default file means the built-in policy: preferred, no rules)\n"
                "  --socket PATH           the hook socket when not socket-activated\n"
                "                          (default $PCINUMA_SOCKET, else " PCINUMA_DEFAULT_SOCKET ")\n"
                "  --libvirt-uri URI|none  the libvirt connection (default qemu:///system)\n"
                "  --watcher-program PATH  the libvirt watcher program pcinumad starts (default: beside\n"
                "                          pcinumad if there, else " PCINUMA_WATCHER_PATH ")\n"
                "  --log-target journal|stderr|auto   where to log (default auto)\n"
                "  --request-timeout-ms N  close a client that sends nothing for N ms (default 5000)\n"
                "  --max-connections N     at most N clients at once (default 256)\n"
                "  --workers N             decide hook requests with over 64 KiB of domain XML on N\n"
                "                          threads (2..64; default: the number of CPUs, at most 8)\n"
                "  --allow-uid UID         also serve this uid (a session libvirtd's user); repeatable\n"
                "  --watch-udev yes|no|auto  rescan on udev PCI events (auto: only for /sys)\n"
                "  --settle-ms N           redefine a domain once its libvirt events have been quiet\n"
                "                          for N ms (default 250)\n"
                "  --state-dir DIR         keep the definitions pcinuma replaces in DIR/preimages\n"
                "                          (default $PCINUMA_STATE_DIR, else " PCINUMA_DEFAULT_STATE_DIR ")\n"
                "  --preimage-max-bytes N  keep at most N bytes of them (default 134217728, 128 MiB); a\n"
                "                          domain's newest is never dropped to make room for another's\n"
                "  --metrics-file PATH|none  write Prometheus text metrics to PATH, for node_exporter's\n"
                "                          textfile collector (default " METRICS_DEFAULT_FILE "\n"
                "                          when that folder exists, else none)\n"
                "  --version               print the version\n");
#if PCINUMA_STAND_INS
        fprintf(f,
                "\n"
                "A test build (meson -Dstand_ins=true), never for production:\n"
                "  --stand-ins FILE        FILE is a JSON object {\"MAC\": \"host BDF\", ...}: a virtio\n"
                "                          <interface type='user'> with such a MAC is placed as the\n"
                "                          passthrough device at that host address\n");
#endif
}

enum {
        ARG_SYSFS_ROOT = 0x100,
        ARG_POLICY_FILE,
        ARG_SOCKET,
        ARG_LIBVIRT_URI,
        ARG_LOG_TARGET,
        ARG_TIMEOUT,
        ARG_MAX_CONN,
        ARG_ALLOW_UID,
        ARG_WATCH_UDEV,
        ARG_VERSION,
        ARG_WATCHER_PROGRAM,
        ARG_SETTLE_MS,
        ARG_STATE_DIR,
        ARG_PREIMAGE_MAX,
        ARG_WORKERS,
        ARG_METRICS_FILE,
#if PCINUMA_STAND_INS
        ARG_STAND_INS,
#endif
};

static const struct option opts[] = {
        { "sysfs-root", required_argument, NULL, ARG_SYSFS_ROOT },
        { "policy-file", required_argument, NULL, ARG_POLICY_FILE },
        { "socket", required_argument, NULL, ARG_SOCKET },
        { "libvirt-uri", required_argument, NULL, ARG_LIBVIRT_URI },
        { "log-target", required_argument, NULL, ARG_LOG_TARGET },
        { "request-timeout-ms", required_argument, NULL, ARG_TIMEOUT },
        { "max-connections", required_argument, NULL, ARG_MAX_CONN },
        { "allow-uid", required_argument, NULL, ARG_ALLOW_UID },
        { "watch-udev", required_argument, NULL, ARG_WATCH_UDEV },
        { "version", no_argument, NULL, ARG_VERSION },
        { "watcher-program", required_argument, NULL, ARG_WATCHER_PROGRAM },
        { "settle-ms", required_argument, NULL, ARG_SETTLE_MS },
        { "state-dir", required_argument, NULL, ARG_STATE_DIR },
        { "preimage-max-bytes", required_argument, NULL, ARG_PREIMAGE_MAX },
        { "workers", required_argument, NULL, ARG_WORKERS },
        { "metrics-file", required_argument, NULL, ARG_METRICS_FILE },
#if PCINUMA_STAND_INS
        { "stand-ins", required_argument, NULL, ARG_STAND_INS },
#endif
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
};

/* What the command line asks for: the manager's settings, and where to
 * log (set up before the manager starts). */
struct args {
        struct manager_config cfg;
        enum log_target target;
};

/* The settings before any option: the built-in defaults, and the
 * environment's PCINUMA_SOCKET, PCINUMA_SYSFS_ROOT and PCINUMA_STATE_DIR. */
static void args_defaults(struct args *a) {
        const char *env_sock = getenv("PCINUMA_SOCKET"), *env_root = getenv("PCINUMA_SYSFS_ROOT");
        /* Tests and the demo run pcinumad by hand: they keep its pre-images
         * out of the host's /var/lib/pcinuma through this. */
        const char *env_state = getenv("PCINUMA_STATE_DIR");
        *a = (struct args) {
                .cfg = {
                        .sysfs_root = env_root && *env_root ? env_root : "/sys",
                        .policy_file = PCINUMA_DEFAULT_POLICY_FILE,
                        .socket_path = env_sock && *env_sock ? env_sock : PCINUMA_DEFAULT_SOCKET,
                        .libvirt_uri = "qemu:///system",
                        .request_timeout_ms = 5000,
                        .max_connections = 256,
                        .watch_udev = -1,
                        .log_target = "auto",
                        .settle_ms = WPROTO_SETTLE_MS_DEFAULT,
                        .state_dir = env_state && env_state[0] == '/' ? env_state : PCINUMA_DEFAULT_STATE_DIR,
                        .preimage_max_bytes = UINT64_C(128) << 20,
                },
                .target = LOG_TARGET_AUTO,
        };
        /* node_exporter's textfile folder, when its package made it. */
        struct stat st;
        if (stat(METRICS_DEFAULT_DIR, &st) == 0 && S_ISDIR(st.st_mode))
                a->cfg.metrics_file = METRICS_DEFAULT_FILE;
}

/* One of the numeric options (option c, with its argument arg) into cfg.
 * Prints what is wrong and returns -EINVAL when arg is out of range. */
static int parse_number_option(int c, const char *arg, struct manager_config *cfg) {
        uint64_t v;

        switch (c) {
        case ARG_TIMEOUT:
                if (parse_uint(arg, 10, 3600000, &v) < 0 || v == 0) {
                        fprintf(stderr, "pcinumad: --request-timeout-ms: expected 1..3600000, not '%s'\n", arg);
                        return -EINVAL;
                }
                cfg->request_timeout_ms = (unsigned) v;
                return 0;
        case ARG_MAX_CONN:
                if (parse_uint(arg, 10, 65536, &v) < 0 || v == 0) {
                        fprintf(stderr, "pcinumad: --max-connections: expected 1..65536, not '%s'\n", arg);
                        return -EINVAL;
                }
                cfg->max_connections = (unsigned) v;
                return 0;
        case ARG_WORKERS:
                if (parse_uint(arg, 10, WORKERS_MAX, &v) < 0 || v < WORKERS_MIN) {
                        fprintf(stderr, "pcinumad: --workers: expected %u..%u, not '%s'\n", WORKERS_MIN, WORKERS_MAX, arg);
                        return -EINVAL;
                }
                cfg->workers = (unsigned) v;
                return 0;
        case ARG_ALLOW_UID:
                if (parse_uint(arg, 10, UINT32_MAX - 1, &v) < 0 || cfg->n_allowed_uids >= ELEMENTSOF(cfg->allowed_uids)) {
                        fprintf(stderr, "pcinumad: --allow-uid: expected a uid (at most %zu of them), not '%s'\n",
                                ELEMENTSOF(cfg->allowed_uids), arg);
                        return -EINVAL;
                }
                cfg->allowed_uids[cfg->n_allowed_uids++] = (uid_t) v;
                return 0;
        case ARG_SETTLE_MS:
                if (parse_uint(arg, 10, WPROTO_SETTLE_MS_MAX, &v) < 0) {
                        fprintf(stderr, "pcinumad: --settle-ms: expected 0..%d, not '%s'\n", WPROTO_SETTLE_MS_MAX, arg);
                        return -EINVAL;
                }
                cfg->settle_ms = (unsigned) v;
                return 0;
        default: /* ARG_PREIMAGE_MAX */
                if (parse_uint(arg, 10, UINT64_MAX, &v) < 0 || v == 0) {
                        fprintf(stderr, "pcinumad: --preimage-max-bytes: expected a positive number of bytes, "
                                "not '%s'\n", arg);
                        return -EINVAL;
                }
                cfg->preimage_max_bytes = v;
                return 0;
        }
}

/* One of the options that take a word or a path (option c, with its
 * argument arg) into a.  Prints what is wrong and returns -EINVAL when arg
 * is not one of the words, or not an absolute path. */
static int parse_word_option(int c, const char *arg, struct args *a) {
        switch (c) {
        case ARG_LOG_TARGET:
                if (log_target_from_string(arg, &a->target) < 0) {
                        fprintf(stderr, "pcinumad: --log-target: expected journal, stderr or auto, not '%s'\n", arg);
                        return -EINVAL;
                }
                a->cfg.log_target = arg;
                return 0;
        case ARG_WATCH_UDEV:
                if (streq(arg, "yes"))
                        a->cfg.watch_udev = 1;
                else if (streq(arg, "no"))
                        a->cfg.watch_udev = 0;
                else if (streq(arg, "auto"))
                        a->cfg.watch_udev = -1;
                else {
                        fprintf(stderr, "pcinumad: --watch-udev: expected yes, no or auto, not '%s'\n", arg);
                        return -EINVAL;
                }
                return 0;
        case ARG_STATE_DIR:
                if (arg[0] != '/') {
                        fprintf(stderr, "pcinumad: --state-dir: expected an absolute path, not '%s'\n", arg);
                        return -EINVAL;
                }
                a->cfg.state_dir = arg;
                return 0;
        default: /* ARG_METRICS_FILE */
                if (streq(arg, "none"))
                        a->cfg.metrics_file = NULL;
                else if (arg[0] != '/') {
                        fprintf(stderr, "pcinumad: --metrics-file: expected an absolute path or none, not '%s'\n", arg);
                        return -EINVAL;
                } else
                        a->cfg.metrics_file = arg;
                return 0;
        }
}

/* The command line into a (set to the defaults first).  Returns 1 to go
 * on and start, 0 when done (--help, --version), or -EINVAL after saying
 * what is wrong. */
static int parse_args(int argc, char **argv, struct args *a) {
        int c;

        args_defaults(a);
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                int r = 0;
                switch (c) {
                case ARG_SYSFS_ROOT:
                        a->cfg.sysfs_root = optarg;
                        break;
                case ARG_POLICY_FILE:
                        a->cfg.policy_file = optarg;
                        break;
                case ARG_SOCKET:
                        a->cfg.socket_path = optarg;
                        break;
                case ARG_LIBVIRT_URI:
                        a->cfg.libvirt_uri = optarg;
                        break;
                case ARG_WATCHER_PROGRAM:
                        a->cfg.watcher_program = optarg;
                        break;
#if PCINUMA_STAND_INS
                case ARG_STAND_INS:
                        a->cfg.stand_ins_file = optarg;
                        break;
#endif
                case ARG_TIMEOUT:
                case ARG_MAX_CONN:
                case ARG_WORKERS:
                case ARG_ALLOW_UID:
                case ARG_SETTLE_MS:
                case ARG_PREIMAGE_MAX:
                        r = parse_number_option(c, optarg, &a->cfg);
                        break;
                case ARG_LOG_TARGET:
                case ARG_WATCH_UDEV:
                case ARG_STATE_DIR:
                case ARG_METRICS_FILE:
                        r = parse_word_option(c, optarg, a);
                        break;
                case ARG_VERSION:
                        printf("pcinumad %s\n", PCINUMA_VERSION);
                        return 0;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return -EINVAL;
                }
                if (r < 0)
                        return r;
        }
        if (optind < argc) {
                fprintf(stderr, "pcinumad: unexpected argument '%s'\n", argv[optind]);
                return -EINVAL;
        }
        return 1;
}

/* Parse the command line (exit 2 on a bad one), set up logging, then
 * start the manager and run it until SIGTERM (exit 1 if either fails). */
int main(int argc, char **argv) {
        struct args a;
        int r = parse_args(argc, argv, &a);
        if (r <= 0)
                return r < 0 ? 2 : 0;

        log_setup(a.target, "pcinumad");
        _cleanup_(manager_freep) struct manager *m = NULL;
        r = manager_new(&a.cfg, &m);
        if (r < 0)
                return 1;
        r = manager_run(m);
        return r < 0 ? 1 : 0;
}

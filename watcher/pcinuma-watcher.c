/* pcinuma-watcher: pcinumad's libvirt watcher (docs/design.md §8, the define-time
 * path), in a process of its own.  It keeps every persistent domain that
 * the policy covers planned, by redefining it with the planned XML.
 *
 * Why a process and not a thread of pcinumad: libvirt's client library
 * brings gnutls, libcrypto, glib, libssh and p11-kit into any process that
 * links it, ~8 MiB of resident pages, and its calls block (a define waits
 * for the domain's job lock, held for the whole of a start, during which
 * libvirt runs our hook).  Here, pcinumad itself (the hook server, on the
 * path of every VM start) links none of it and never waits on libvirt
 * (docs/design.md §3.2); a libvirt call that hangs or a crash in libvirt's library
 * stops this process only, and pcinumad restarts it.
 *
 * pcinumad starts it with one end of a socketpair on fd 3 and talks the
 * watcher protocol over it (lib/base/watcher-protocol.h: plan requests, forget and
 * status messages to pcinumad; planned answers and recheck requests from
 * it).  All planning happens in pcinumad, which owns the host map and the
 * policy; this process only talks to libvirt, and logs what it did with
 * the same fields and MESSAGE_IDs as before.  It exits when pcinumad
 * closes its end (or dies: PR_SET_PDEATHSIG).
 *
 * Two threads (and the restarts' workers, restarter.h).  libvirt's
 * event loop runs on a thread of its own that never blocks: it tells
 * pcinumad at once when a domain is defined or undefined (the prepare
 * gate needs to know which domains are persistent when a client starts one
 * right after defining it), and queues every lifecycle event for the main
 * thread.  The main thread does everything else, as one sequence: it
 * reads pcinumad's messages, applies the queued events, and looks at one
 * domain at a time with blocking libvirt calls (a define waits for the
 * domain's lock, held for the whole of a start).  Events are applied
 * between two looks at domains, never during one, as when one thread did
 * everything: the checks in libvirt-sync.c rely on it.
 *
 * Its files: this one (the command line, the setup, the main loop and
 * the teardown), pcinumad-link.c (the link to pcinumad), libvirt-sync.c
 * (the connection, the events, the domains and their redefinitions:
 * how it copes with users' concurrent edits is explained there),
 * restarter.[ch] (restarts into the plan) and preimage.[ch] (the
 * definitions it replaces, kept on disk); watcher.h is the state they
 * share. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libvirt/virterror.h>
#include <libxml/relaxng.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "paths.h"
#include "watcher.h"

#if PCINUMA_STAND_INS
#include "standins.h"
#endif


static void silent_error_func(void *userdata, virErrorPtr err) {
        (void) userdata;
        (void) err;
}

/* libvirt's event thread: it runs libvirt's loop (connections, keepalives,
 * events) until told to stop, and never blocks on anything else. */
static void *event_thread(void *userdata) {
        struct watcher *w = userdata;
        while (!w->loop_stop)
                if (virEventRunDefaultImpl() < 0) {
                        log_msg(LOG_ERR, "libvirt's event loop failed: %s", lv_error());
                        w->parent_gone = true;
                        sync_wake_main(w);
                        break;
                }
        return NULL;
}

static void on_wake_timer(int timer, void *opaque) {
        (void) opaque;
        virEventUpdateTimeout(timer, -1);
}

static int ms_until(uint64_t due, uint64_t now) {
        if (!due)
                return -1;
        if (due <= now)
                return 0;
        uint64_t ms = (due - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC;
        return ms > INT_MAX ? INT_MAX : (int) ms;
}

static int min_timeout(int a, int b) {
        return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

/* The main thread: pcinumad's messages, the queued events, the connection,
 * one domain per turn, and the restarts' steps, until pcinumad goes (EOF
 * on the link, or SIGTERM: pcinumad stopping us, or dying, through
 * PR_SET_PDEATHSIG), so libvirt is closed and everything freed on the way
 * out (the sanitizer pass checks for leaks at exit). */
static void main_loop(struct watcher *w, int sfd) {
        while (!w->parent_gone) {
                sync_apply_queue(w);
                restarter_drain(w->restarter);
                uint64_t now = now_usec(CLOCK_MONOTONIC);
                if (w->reconnect_due && w->reconnect_due <= now)
                        sync_connect(w);
                else if (w->process_due && w->process_due <= now)
                        sync_process_turn(w);
                uint64_t restart_due = restarter_work(w->restarter, now_usec(CLOCK_MONOTONIC));
                if (w->parent_gone)
                        break;
                now = now_usec(CLOCK_MONOTONIC);
                int timeout = min_timeout(ms_until(w->reconnect_due, now), ms_until(restart_due, now));
                if (w->conn)
                        timeout = min_timeout(timeout, ms_until(w->process_due, now));
                struct pollfd p[] = {
                        { .fd = w->fd, .events = POLLIN },
                        { .fd = w->wake_fd, .events = POLLIN },
                        { .fd = restarter_fd(w->restarter), .events = POLLIN },
                        { .fd = sfd, .events = POLLIN },
                };
                if (poll(p, ELEMENTSOF(p), timeout) < 0 && errno != EINTR) {
                        log_msg(LOG_ERR, "poll: %s", strerror(errno));
                        break;
                }
                if (p[0].revents)
                        (void) link_read_msgs(w, false, NULL);
                struct signalfd_siginfo si;
                if (p[3].revents && read(sfd, &si, sizeof si) > 0)
                        w->parent_gone = true;
        }
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinuma-watcher --uri URI [--log-target journal|stderr|auto] [--fd N]\n"
                "                       [--settle-ms N] [--state-dir DIR] [--preimage-max-bytes N]\n"
                "\n"
                "pcinumad's libvirt watcher.  pcinumad starts it; it is not meant to be run by hand.\n"
                "It talks to pcinumad over the socket on fd N (default 3) and to libvirt at URI, and\n"
                "redefines persistent domains with the topology pcinumad plans for them, once their\n"
                "events have been quiet for N ms (default %d), keeping what it replaces in\n"
                "DIR/preimages (default " PCINUMA_DEFAULT_STATE_DIR "), at most N bytes of them\n"
                "(default %" PRIu64 ").\n", WPROTO_SETTLE_MS_DEFAULT, PREIMAGE_MAX_BYTES_DEFAULT);
#if PCINUMA_STAND_INS
        fprintf(f, "A test build: --stand-ins FILE reads pcinumad's stand-in table (pcinumad(8)).\n");
#endif
}

enum {
        ARG_URI = 0x100,
        ARG_LOG_TARGET,
        ARG_FD,
        ARG_VERSION,
        ARG_SETTLE_MS,
        ARG_STATE_DIR,
        ARG_PREIMAGE_MAX,
#if PCINUMA_STAND_INS
        ARG_STAND_INS,
#endif
};

static const struct option opts[] = {
        { "uri", required_argument, NULL, ARG_URI },
        { "log-target", required_argument, NULL, ARG_LOG_TARGET },
        { "fd", required_argument, NULL, ARG_FD },
        { "settle-ms", required_argument, NULL, ARG_SETTLE_MS },
        { "state-dir", required_argument, NULL, ARG_STATE_DIR },
        { "preimage-max-bytes", required_argument, NULL, ARG_PREIMAGE_MAX },
#if PCINUMA_STAND_INS
        { "stand-ins", required_argument, NULL, ARG_STAND_INS },
#endif
        { "version", no_argument, NULL, ARG_VERSION },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
};

/* What the command line asks for besides the watcher's own fields (--uri,
 * --fd, --settle-ms, --stand-ins go straight into struct watcher). */
struct args {
        const char *state_dir;
        uint64_t preimage_max;
        enum log_target target;
};

/* One option that takes a checked value (option c, with its argument arg)
 * into w or a.  Prints what is wrong and returns -EINVAL when arg is bad. */
static int parse_value_option(int c, char *arg, struct watcher *w, struct args *a) {
        uint64_t v;

        switch (c) {
        case ARG_LOG_TARGET:
                if (log_target_from_string(arg, &a->target) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --log-target: expected journal, stderr or auto, not '%s'\n", arg);
                        return -EINVAL;
                }
                return 0;
        case ARG_FD:
                if (parse_uint(arg, 10, INT_MAX, &v) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --fd: not a file descriptor number: '%s'\n", arg);
                        return -EINVAL;
                }
                w->fd = (int) v;
                return 0;
        case ARG_SETTLE_MS:
                if (parse_uint(arg, 10, WPROTO_SETTLE_MS_MAX, &v) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --settle-ms: expected 0..%d, not '%s'\n", WPROTO_SETTLE_MS_MAX, arg);
                        return -EINVAL;
                }
                w->settle_ms = (unsigned) v;
                return 0;
        case ARG_STATE_DIR:
                if (arg[0] != '/') {
                        fprintf(stderr, "pcinuma-watcher: --state-dir: expected an absolute path, not '%s'\n", arg);
                        return -EINVAL;
                }
                a->state_dir = arg;
                return 0;
#if PCINUMA_STAND_INS
        case ARG_STAND_INS: {
                _cleanup_free_ char *err = NULL;
                standins_free(w->stand_ins);
                w->stand_ins = NULL;
                if (standins_load_file(arg, &w->stand_ins, &err) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --stand-ins: %s\n", err);
                        return -EINVAL;
                }
                return 0;
        }
#endif
        default: /* ARG_PREIMAGE_MAX */
                if (parse_uint(arg, 10, UINT64_MAX, &a->preimage_max) < 0 || a->preimage_max == 0) {
                        fprintf(stderr, "pcinuma-watcher: --preimage-max-bytes: expected a positive number of "
                                "bytes, not '%s'\n", arg);
                        return -EINVAL;
                }
                return 0;
        }
}

/* The command line into w and a (a set to the defaults first).  Returns 1
 * to go on, 0 when done (--help, --version), or -EINVAL after saying what
 * is wrong (--uri is required). */
static int parse_args(int argc, char **argv, struct watcher *w, struct args *a) {
        int c;

        *a = (struct args) {
                .state_dir = PCINUMA_DEFAULT_STATE_DIR,
                .preimage_max = PREIMAGE_MAX_BYTES_DEFAULT,
                .target = LOG_TARGET_AUTO,
        };
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
                switch (c) {
                case ARG_URI:
                        w->uri = optarg;
                        break;
                case ARG_VERSION:
                        printf("pcinuma-watcher %s\n", PCINUMA_VERSION);
                        return 0;
                case 'h':
                        usage(stdout);
                        return 0;
                case ARG_LOG_TARGET:
                case ARG_FD:
                case ARG_SETTLE_MS:
                case ARG_STATE_DIR:
                case ARG_PREIMAGE_MAX:
#if PCINUMA_STAND_INS
                case ARG_STAND_INS:
#endif
                        if (parse_value_option(c, optarg, w, a) < 0)
                                return -EINVAL;
                        break;
                default:
                        usage(stderr);
                        return -EINVAL;
                }
        if (!w->uri || optind < argc) {
                usage(stderr);
                return -EINVAL;
        }
        return 1;
}

/* The link to pcinumad on w->fd (non-blocking, closed on exec), and the
 * signals: SIGTERM (sent by pcinumad, or by the kernel when pcinumad dies)
 * is read from the signalfd returned in *ret_sfd (-1 if none could be
 * made), SIGPIPE ignored.  Returns -errno if w->fd is not open. */
static int setup_link(struct watcher *w, int *ret_sfd) {
        int fl = fcntl(w->fd, F_GETFL);
        if (fl < 0 || fcntl(w->fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return -errno;
        (void) fcntl(w->fd, F_SETFD, FD_CLOEXEC);
        /* Go when pcinumad goes, even if it is killed without closing. */
        (void) prctl(PR_SET_PDEATHSIG, SIGTERM);
        signal(SIGPIPE, SIG_IGN);
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        *ret_sfd = sigprocmask(SIG_BLOCK, &term, NULL) == 0 ? signalfd(-1, &term, SFD_CLOEXEC | SFD_NONBLOCK) : -1;
        return 0;
}

/* libvirt, its event loop on a thread of its own, and the restarter.
 * Logs what failed and returns -1 if any of it cannot be set up. */
static int setup_libvirt(struct watcher *w) {
        /* Restarts call libvirt from worker threads: initialise it before
         * any thread does (libvirt asks multithreaded programs to). */
        if (virInitialize() < 0) {
                log_msg(LOG_ERR, "Cannot initialise libvirt: %s", lv_error());
                return -1;
        }
        virSetErrorFunc(NULL, silent_error_func);
        if (virEventRegisterDefaultImpl() < 0) {
                log_msg(LOG_ERR, "Cannot set up libvirt's event loop: %s", lv_error());
                return -1;
        }
        w->restarter = restarter_new(&link_restart_ops, w, w->preimages);
        w->wake_timer = virEventAddTimeout(-1, on_wake_timer, w, NULL);
        w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->wake_timer < 0 || w->wake_fd < 0 || !w->restarter) {
                log_msg(LOG_ERR, "Cannot set up the watcher's threads: %s", w->wake_fd < 0 ? strerror(errno) : lv_error());
                return -1;
        }
        int e = pthread_create(&w->loop_thread, NULL, event_thread, w);
        if (e != 0) {
                log_msg(LOG_ERR, "Cannot start libvirt's event thread: %s", strerror(e));
                return -1;
        }
        w->loop_running = true;
        return 0;
}

/* After the main loop: no more events (the callbacks deregistered, the
 * event thread gone), then the restarts under way finish: a domain they
 * destroyed must run again (their domains keep the connection open for
 * their calls).  Then everything is freed. */
static void teardown(struct watcher *w) {
        sync_disconnect(w);
        w->loop_stop = true;
        virEventUpdateTimeout(w->wake_timer, 0);
        pthread_join(w->loop_thread, NULL);
        w->restarter = restarter_free(w->restarter);
        for (size_t i = 0; i < w->n_queue; i++)
                if (w->queue[i].dom)
                        virDomainFree(w->queue[i].dom);
        free(w->queue);
        virEventRemoveTimeout(w->wake_timer);
        close(w->wake_fd);
        sync_forget_all(w);
        preimage_store_free(w->preimages);
#if PCINUMA_STAND_INS
        standins_free(w->stand_ins);
#endif
        if (w->schema)
                xmlRelaxNGFree(w->schema);
        free(w->last_error);
        frame_decoder_reset(&w->dec);
}

/* Parse the command line (exit 2 on a bad one), open the pre-image store
 * and the schema, set up the link (exit 2 without one) and libvirt (exit 1
 * on failure), then run until pcinumad goes: exit 0 then, 1 if the loop
 * failed. */
int main(int argc, char **argv) {
        struct watcher w = { .fd = 3, .lifecycle_cb = -1, .backoff_ms = BACKOFF_MIN_MS, .settle_ms = WPROTO_SETTLE_MS_DEFAULT,
                             .wake_fd = -1, .write_lock = PTHREAD_MUTEX_INITIALIZER,
                             .queue_lock = PTHREAD_MUTEX_INITIALIZER, .on_recheck = sync_recheck };
        struct args a;
        int r = parse_args(argc, argv, &w, &a);
        if (r <= 0)
                return r < 0 ? 2 : 0;

        log_setup(a.target, "pcinumad");
        _cleanup_free_ char *pre_dir = xasprintf("%s/preimages", a.state_dir);
        w.preimages = preimage_store_new(pre_dir, a.preimage_max);
        w.schema = sync_load_schema();

        _cleanup_close_ int sfd = -1;
        r = setup_link(&w, &sfd);
        if (r < 0) {
                fprintf(stderr, "pcinuma-watcher: fd %d: %s (pcinumad starts this program with its socket there)\n",
                        w.fd, strerror(-r));
                return 2;
        }
        if (setup_libvirt(&w) < 0)
                return 1;
        w.reconnect_due = now_usec(CLOCK_MONOTONIC);
        link_send_status(&w);

        main_loop(&w, sfd);

        teardown(&w);
        return w.parent_gone ? 0 : 1;
}

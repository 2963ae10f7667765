/* pcinumactl: the administrator's command-line tool.  It links the same
 * core as the daemon, so `pcinumactl plan` shows exactly what pcinumad
 * would do. */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "ctl-policy.h"
#include "client.h"
#include "ctl-libvirt.h"
#include "ctl-topo.h"
#include "ctl.h"
#include "domain.h"
#include "engine.h"
#include "fileio.h"
#include "hostmap.h"
#include "paths.h"
#include "policy.h"
#include "util.h"


enum {
        EXIT_REFUSED = 1,
        EXIT_BAD_INPUT = 2,
};

/* Read FILE (or stdin for "-") whole, refusing more than 'max' bytes. */
static int read_input(const char *path, size_t max, char **ret, size_t *ret_len, char **ret_error) {
        _cleanup_close_ int fd = -1;
        bool is_stdin = streq(path, "-");
        const char *what = is_stdin ? "standard input" : path;
        if (!is_stdin) {
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return set_error(ret_error, -errno, "cannot open '%s': %s", path, strerror(errno));
        }
        int r = read_full_fd(is_stdin ? STDIN_FILENO : fd, max, ret, ret_len);
        if (r == -EFBIG)
                return set_error(ret_error, r, "'%s' is larger than the %zu byte limit for a domain XML", what, max);
        if (r < 0)
                return set_error(ret_error, r, "cannot read '%s': %s", what, strerror(-r));
        return 0;
}

const char *default_sysfs_root(void) {
        const char *e = getenv("PCINUMA_SYSFS_ROOT");
        return e && *e ? e : "/sys";
}

int ctl_plan_input(const struct ctl_plan_args *a, struct hostmap **ret_h, struct engine_result **ret_res) {
        const char *policy_file = a->policy_file;
        if (a->policy_name && policy_file) {
                fprintf(stderr, "%s: --policy and --policy-file exclude each other\n", a->who);
                return EXIT_BAD_INPUT;
        }

        _cleanup_free_ char *err = NULL;
        enum policy_mode forced;
        _cleanup_policy_ struct policy *pol = NULL;
        if (a->policy_name) {
                if (policy_mode_from_string(a->policy_name, &forced) < 0) {
                        fprintf(stderr, "%s: unknown policy '%s' (expected off, legacy, preferred, socket, require)\n",
                                a->who, a->policy_name);
                        return EXIT_BAD_INPUT;
                }
        } else {
                struct stat st;
                if (!policy_file && stat(PCINUMA_DEFAULT_POLICY_FILE, &st) == 0)
                        policy_file = PCINUMA_DEFAULT_POLICY_FILE;
                if (policy_file) {
                        if (policy_load_file(policy_file, &pol, &err) < 0) {
                                fprintf(stderr, "%s: %s\n", a->who, err);
                                return EXIT_BAD_INPUT;
                        }
                } else
                        pol = policy_new_default();
        }

        _cleanup_free_ char *xml = NULL;
        size_t len = 0;
        if (read_input(a->input, DOMAIN_XML_MAX, &xml, &len, &err) < 0) {
                fprintf(stderr, "%s: %s\n", a->who, err);
                return EXIT_BAD_INPUT;
        }

        _cleanup_hostmap_ struct hostmap *h = NULL;
        if (hostmap_load_path(a->root, &h, &err) < 0) {
                fprintf(stderr, "%s: cannot read the host map: %s\n", a->who, err);
                return EXIT_BAD_INPUT;
        }
        ctl_print_hostmap_warnings(a->who, h);

        if (engine_plan(xml, len, h, pol, a->policy_name ? &forced : NULL, ret_res, &err) < 0) {
                fprintf(stderr, "%s: %s: %s\n", a->who, streq(a->input, "-") ? "standard input" : a->input, err);
                return EXIT_BAD_INPUT;
        }
        *ret_h = TAKE_PTR(h);
        return 0;
}

static void plan_usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl plan [--sysfs-root DIR] [--policy NAME | --policy-file FILE]\n"
                "                       [--format xml|explain|json] FILE|-\n"
                "\n"
                "Plan the NUMA-aware PCIe topology of a libvirt domain XML and print it.\n"
                "\n"
                "  --sysfs-root DIR   read the host map from DIR instead of /sys\n"
                "                     (default: $PCINUMA_SYSFS_ROOT, else /sys)\n"
                "  --policy NAME      off, legacy, preferred, socket, require (alias required)\n"
                "  --policy-file FILE the policy file (default " PCINUMA_DEFAULT_POLICY_FILE " if it exists,\n"
                "                     else the built-in default: legacy)\n"
                "  --format FORMAT    xml (default), explain or json\n"
                "\n"
                "Exit status: 0 planned or unchanged, 1 refused by the policy, 2 bad input.\n");
}

static int ctl_plan(int argc, char **argv) {
        static const struct option opts[] = {
                { "sysfs-root", required_argument, NULL, 'r' },
                { "policy", required_argument, NULL, 'p' },
                { "policy-file", required_argument, NULL, 'f' },
                { "format", required_argument, NULL, 'F' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *root = default_sysfs_root(), *policy_name = NULL, *policy_file = NULL, *format = "xml";
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'r':
                        root = optarg;
                        break;
                case 'p':
                        policy_name = optarg;
                        break;
                case 'f':
                        policy_file = optarg;
                        break;
                case 'F':
                        format = optarg;
                        break;
                case 'h':
                        plan_usage(stdout);
                        return 0;
                default:
                        plan_usage(stderr);
                        return EXIT_BAD_INPUT;
                }
        }
        if (optind != argc - 1) {
                fprintf(stderr, "pcinumactl plan: expected one FILE (or - for standard input)\n");
                plan_usage(stderr);
                return EXIT_BAD_INPUT;
        }
        if (!streq(format, "xml") && !streq(format, "explain") && !streq(format, "json")) {
                fprintf(stderr, "pcinumactl plan: unknown format '%s' (expected xml, explain or json)\n", format);
                return EXIT_BAD_INPUT;
        }
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        const struct ctl_plan_args a = {
                .who = "pcinumactl plan", .root = root, .policy_name = policy_name,
                .policy_file = policy_file, .input = argv[optind],
        };
        int r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;

        if (streq(format, "explain")) {
                _cleanup_free_ char *s = engine_explain(res, h);
                fputs(s, stdout);
        } else if (streq(format, "json")) {
                _cleanup_free_ char *s = engine_json(res, h);
                fputs(s, stdout);
        } else if (res->xml)
                fputs(res->xml, stdout);

        if (res->revert_warning)
                fprintf(stderr, "pcinumactl plan: warning: undoing the earlier plan: %s\n", res->revert_warning);
        for (size_t i = 0; i < res->plan->n_warnings && !streq(format, "explain"); i++)
                fprintf(stderr, "pcinumactl plan: warning: %s\n", res->plan->warnings[i]);

        if (res->verdict == PLAN_REFUSED) {
                _cleanup_free_ char *s = engine_refusal(res);
                for (char *line = s, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                        nl = strchr(line, '\n');
                        fprintf(stderr, "pcinumactl plan: %.*s\n", nl ? (int) (nl - line) : (int) strlen(line), line);
                }
                return EXIT_REFUSED;
        }
        if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "pcinumactl plan: cannot write the output: %s\n", strerror(errno));
                return EXIT_BAD_INPUT;
        }
        return 0;
}

static int ctl_revert(int argc, char **argv) {
        static const struct option opts[] = {
                { "domain", required_argument, NULL, 'd' },
                { "connect", required_argument, NULL, 'c' },
                { "policy-file", required_argument, NULL, 'f' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *domain = NULL, *uri = NULL, *policy_file = PCINUMA_DEFAULT_POLICY_FILE;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "hc:", opts, NULL)) >= 0) {
                switch (c) {
                case 'd':
                        domain = optarg;
                        break;
                case 'c':
                        uri = optarg;
                        break;
                case 'f':
                        policy_file = optarg;
                        break;
                case 'h':
                        printf("Usage: pcinumactl revert FILE|-\n"
                               "       pcinumactl revert --domain NAME [-c|--connect URI] [--policy-file FILE]\n\n"
                               "Undo pcinuma's rewrite, from its metadata mark: of a domain XML file (printed),\n"
                               "or of a defined domain's persistent definition (through libvirt).  A domain\n"
                               "without a mark is left unchanged.\n");
                        return 0;
                default:
                        return EXIT_BAD_INPUT;
                }
        }
        if (domain) {
                if (optind != argc) {
                        fprintf(stderr, "pcinumactl revert: --domain takes no FILE\n");
                        return EXIT_BAD_INPUT;
                }
                return ctl_revert_domain(domain, uri, policy_file);
        }
        if (optind != argc - 1) {
                fprintf(stderr, "pcinumactl revert: expected one FILE (or - for standard input), or --domain NAME\n");
                return EXIT_BAD_INPUT;
        }
        argv += optind - 1;
        _cleanup_free_ char *err = NULL, *xml = NULL, *out = NULL, *warning = NULL;
        size_t len = 0;
        bool changed = false;
        if (read_input(argv[1], DOMAIN_XML_MAX, &xml, &len, &err) < 0) {
                fprintf(stderr, "pcinumactl revert: %s\n", err);
                return EXIT_BAD_INPUT;
        }
        if (engine_revert(xml, len, &out, &changed, &warning, &err) < 0) {
                fprintf(stderr, "pcinumactl revert: %s: %s\n", streq(argv[1], "-") ? "standard input" : argv[1], err);
                return EXIT_BAD_INPUT;
        }
        fputs(out, stdout);
        if (warning)
                fprintf(stderr, "pcinumactl revert: warning: %s\n", warning);
        if (!changed)
                fprintf(stderr, "pcinumactl revert: no pcinuma mark in the domain; printed unchanged\n");
        return 0;
}

static void print_status(json_object *st) {
        json_object *h = json_object_object_get(st, "hostmap");
        json_object *p = json_object_object_get(st, "policy");
        json_object *r = json_object_object_get(st, "requests");
        json_object *v = json_object_object_get(st, "verdicts");
#define S(o, k) json_object_get_string(json_object_object_get((o), (k)))
#define I(o, k) ((long long) json_object_get_int64(json_object_object_get((o), (k))))
        printf("pcinumad %s (pid %lld), up %lld s, socket %s\n", S(st, "version"), I(st, "pid"), I(st, "uptime_sec"), S(st, "socket"));
        printf("host map:  %lld PCI devices, %lld mdevs, %lld NUMA nodes from %s; built %lld s ago (generation %lld)%s\n",
               I(h, "devices"), I(h, "mdevs"), I(h, "nodes"), S(h, "sysfs_root"), I(h, "age_sec"), I(h, "generation"),
               json_object_get_boolean(json_object_object_get(h, "udev")) ? ", follows udev" : ", rescanned on SIGHUP only");
        json_object *hw = json_object_object_get(h, "warnings");
        size_t n_hw = hw ? json_object_array_length(hw) : 0;
        for (size_t i = 0; i < n_hw; i++)
                printf("           warning: %s\n", json_object_get_string(json_object_array_get_idx(hw, i)));
        if (I(h, "warnings_not_listed") > 0)
                printf("           warning: %lld more sysfs files could not be read or parsed\n", I(h, "warnings_not_listed"));
        time_t loaded = (time_t) (I(p, "loaded_at_usec") / 1000000);
        char when[64];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&loaded));
        printf("policy:    %s%s, default %s, %lld rule%s, loaded %s\n", S(p, "file"),
               json_object_get_boolean(json_object_object_get(p, "from_file")) ? "" : " (absent: built-in default)",
               S(p, "default"), I(p, "rules"), I(p, "rules") == 1 ? "" : "s", when);
        if (json_object_object_get(p, "last_error"))
                printf("           last reload FAILED, the policy above is still in force: %s\n", S(p, "last_error"));
        printf("requests:  %lld total, %lld hook, %lld status, %lld errors, %lld rejected peers, %lld open connections\n",
               I(r, "total"), I(r, "hook"), I(r, "status"), I(r, "errors"), I(r, "rejected_peers"), I(r, "connections"));
        printf("verdicts:  %lld allow, %lld warn, %lld refuse, %lld pass\n", I(v, "allow"), I(v, "warn"), I(v, "refuse"), I(v, "pass"));
        json_object *lv = json_object_object_get(st, "libvirt");
        if (lv)
                printf("libvirt:   %s, %s; %lld redefinitions, %lld failures%s%s\n", S(lv, "uri"),
                       json_object_get_boolean(json_object_object_get(lv, "connected")) ? "connected" : "NOT connected",
                       I(lv, "redefinitions"), I(lv, "failures"),
                       json_object_object_get(lv, "last_error") ? "; last error: " : "",
                       json_object_object_get(lv, "last_error") ? S(lv, "last_error") : "");
        json_object *wp = lv ? json_object_object_get(lv, "process") : NULL;
        if (wp) {
                if (json_object_object_get(wp, "pid"))
                        printf("           watcher process %lld (%s), %lld restart%s", I(wp, "pid"), S(wp, "program"),
                               I(wp, "restarts"), I(wp, "restarts") == 1 ? "" : "s");
                else
                        printf("           watcher process NOT running (%s), %lld restart%s so far", S(wp, "program"),
                               I(wp, "restarts"), I(wp, "restarts") == 1 ? "" : "s");
                if (json_object_object_get(wp, "last_exit"))
                        printf("; the last one %s", S(wp, "last_exit"));
                printf("\n");
        }
        if (!lv)
                printf("libvirt:   not watched (--libvirt-uri none)\n");
#undef S
#undef I
}

static int ctl_status(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *env = getenv("PCINUMA_SOCKET");
        const char *path = env && *env ? env : PCINUMA_DEFAULT_SOCKET;
        bool json = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 's':
                        path = optarg;
                        break;
                case 'j':
                        json = true;
                        break;
                case 'h':
                        printf("Usage: pcinumactl status [--socket PATH] [--json]\n\n"
                               "Ask pcinumad for its state: uptime, host map, policy and counters.\n");
                        return 0;
                default:
                        return EXIT_BAD_INPUT;
                }
        }
        _cleanup_json_ json_object *req = proto_request_new_status();
        _cleanup_json_ json_object *resp = NULL;
        _cleanup_free_ char *err = NULL;
        if (client_call(path, req, 5000, &resp, &err) < 0) {
                fprintf(stderr, "pcinumactl status: %s (is pcinumad running?)\n", err);
                return 1;
        }
        json_object *e = json_object_object_get(resp, "error");
        if (e) {
                fprintf(stderr, "pcinumactl status: pcinumad answered: %s\n", json_object_get_string(e));
                return 1;
        }
        json_object *st = json_object_object_get(resp, "status");
        if (!st) {
                fprintf(stderr, "pcinumactl status: malformed answer from pcinumad\n");
                return 1;
        }
        if (json)
                printf("%s\n", json_object_to_json_string_ext(st, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
        else
                print_status(st);
        return 0;
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl COMMAND [OPTIONS]\n"
                "\n"
                "Commands:\n"
                "  plan [--sysfs-root DIR] [--policy NAME|--policy-file FILE] [--format xml|explain|json] FILE|-\n"
                "                      plan a domain XML's NUMA-aware PCIe topology\n"
                "  revert FILE|-       undo pcinuma's rewrite of a domain XML\n"
                "  revert --domain NAME [--connect URI] [--policy-file FILE]\n"
                "                      undo it in a defined domain, through libvirt\n"
                "  host [--sysfs-root DIR] [--json]\n"
                "                      show the host's NUMA nodes and passthrough devices\n"
                "  topo [--sysfs-root DIR] [--policy NAME|--policy-file FILE] FILE|-\n"
                "                      host vs planned guest device topology matrix\n"
                "  check-policy FILE   validate a policy file\n"
                "  status [--socket PATH] [--json]\n"
                "                      show pcinumad's state and counters\n"
                "  --version           print the version\n"
                "\n"
                "'pcinumactl COMMAND --help' shows a command's options.\n");
}

int main(int argc, char **argv) {
        static const struct {
                const char *name;
                int (*fn)(int, char **);
        } commands[] = {
                { "plan", ctl_plan },
                { "revert", ctl_revert },
                { "host", ctl_host },
                { "check-policy", ctl_check_policy },
                { "status", ctl_status },
                { "topo", ctl_topo },
        };
        if (argc < 2) {
                usage(stderr);
                return EXIT_BAD_INPUT;
        }
        if (streq(argv[1], "--version")) {
                printf("pcinumactl %s\n", PCINUMA_VERSION);
                return 0;
        }
        if (streq(argv[1], "--help") || streq(argv[1], "-h") || streq(argv[1], "help")) {
                usage(stdout);
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq(argv[1], commands[i].name))
                        return commands[i].fn(argc - 1, argv + 1);
        fprintf(stderr, "pcinumactl: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return EXIT_BAD_INPUT;
}

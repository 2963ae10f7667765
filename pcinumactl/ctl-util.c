/* pcinumactl's shared helpers (ctl-util.h): exit codes and messages,
 * reading FILE|-, the plan options, and the policy + domain + host map
 * loading that plan and topo both start with. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-util.h"
#include "domain.h"
#include "engine.h"
#include "fileio.h"
#include "hostmap.h"
#include "hostmap-sysfs.h"
#include "policy.h"
#include "policy-file.h"
#include "report.h"
#include "standins.h"

int ctl_error(int status, const char *who, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *m = xvasprintf(fmt, ap);
        va_end(ap);
        /* One fprintf, so the line reaches stderr in one write. */
        fprintf(stderr, "%s: %s\n", who, m);
        return status;
}

const char *ctl_default_sysfs_root(void) {
        const char *e = getenv("PCINUMA_SYSFS_ROOT");
        return e && *e ? e : "/sys";
}

const char *ctl_input_name(const char *path) {
        return streq(path, "-") ? "standard input" : path;
}

int ctl_read_input(const char *path, size_t max, char **ret, size_t *ret_len, char **ret_error) {
        _cleanup_close_ int fd = -1;
        bool is_stdin = streq(path, "-");
        const char *what = ctl_input_name(path);
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

char *ctl_device_path(const struct hostmap_device *d) {
        struct strbuf b = {0};
        char name[PCI_ADDR_STRLEN];

        if (!d->host_bridge)
                return xstrdup("unknown");
        strbuf_append(&b, d->host_bridge);
        for (size_t i = 0; i < d->n_upstream; i++)
                strbuf_printf(&b, " > %s", pci_addr_format(&d->upstream[i], name));
        return strbuf_steal(&b);
}

struct json_object *ctl_json_hex(unsigned v, int width) {
        char buf[16];
        snprintf(buf, sizeof(buf), "0x%0*x", width, v);
        return json_object_new_string(buf);
}

void ctl_print_hostmap_warnings(const char *who, const struct hostmap *h) {
        for (size_t i = 0; i < h->n_warnings; i++)
                fprintf(stderr, "%s: warning: sysfs %s\n", who, h->warnings[i]);
        if (h->n_warnings_dropped > 0)
                fprintf(stderr, "%s: warning: %zu more sysfs files could not be read or parsed\n", who, h->n_warnings_dropped);
}

bool ctl_plan_args_option(struct ctl_plan_args *a, int c, const char *arg) {
        switch (c) {
        case CTL_OPT_SYSFS_ROOT:
                a->root = arg;
                return true;
        case CTL_OPT_POLICY:
                a->policy_name = arg;
                return true;
        case CTL_OPT_POLICY_FILE:
                a->policy_file = arg;
                return true;
#if PCINUMA_STAND_INS
        case CTL_OPT_STAND_INS:
                a->stand_ins_file = arg;
                return true;
#endif
        default:
                return false;
        }
}

void ctl_plan_args_env(struct ctl_plan_args *a) {
        const char *e = getenv("PCINUMA_POLICY_FILE");
        if (!a->policy_name && !a->policy_file && e && *e)
                a->policy_file = e;
}

void ctl_plan_args_done(struct ctl_plan_args *a) {
#if PCINUMA_STAND_INS
        a->stand_ins = standins_free(a->stand_ins);
#else
        (void) a;
#endif
}

int ctl_load_stand_ins(struct ctl_plan_args *a) {
#if PCINUMA_STAND_INS
        _cleanup_free_ char *err = NULL;
        a->stand_ins = standins_free(a->stand_ins);
        if (a->stand_ins_file && standins_load_file(a->stand_ins_file, &a->stand_ins, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, a->who, "%s", err);
#else
        (void) a;
#endif
        return 0;
}

/* The options of ctl_parse_args() and ctl_parse_adapter_args(), and with
 * 'version' --version.  Returns -1 when the caller goes on to the
 * arguments (from optind), else the exit status. */
static int parse_options(int argc, char **argv, const char *who, const struct option *opts, void (*usage)(FILE *f),
                         ctl_option_fn option, void *data, struct ctl_plan_args *a, bool version) {
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                if (a && ctl_plan_args_option(a, c, optarg))
                        continue;
                if (c == 'h') {
                        usage(stdout);
                        return 0;
                }
                if (version && c == 'v') {
                        printf("%s %s\n", who, PCINUMA_VERSION);
                        return 0;
                }
                if (c == '?' || c == ':' || !option || !option(data, c, optarg)) {
                        usage(stderr);
                        return CTL_EXIT_BAD_INPUT;
                }
        }
        return -1;
}

/* No argument after the options: -1, else "unexpected argument" and the
 * usage. */
static int no_arguments(int argc, char **argv, const char *who, void (*usage)(FILE *f)) {
        if (optind == argc)
                return -1;
        ctl_error(0, who, "unexpected argument '%s'", argv[optind]);
        usage(stderr);
        return CTL_EXIT_BAD_INPUT;
}

int ctl_parse_adapter_args(int argc, char **argv, const struct option *opts, void (*usage)(FILE *f),
                           ctl_option_fn option, void *data, struct ctl_plan_args *a) {
        int r = parse_options(argc, argv, a->who, opts, usage, option, data, a, true);
        if (r >= 0)
                return r;
        r = no_arguments(argc, argv, a->who, usage);
        if (r >= 0)
                return r;
        ctl_plan_args_env(a);
        return -1;
}

int ctl_parse_args(int argc, char **argv, const char *who, const struct option *opts, void (*usage)(FILE *f),
                   ctl_option_fn option, void *data, struct ctl_plan_args *a, const char *count_error) {
        int r = parse_options(argc, argv, who, opts, usage, option, data, a, false);
        if (r >= 0)
                return r;
        if (!a)
                return no_arguments(argc, argv, who, usage);
        if (optind != argc - 1) {
                if (count_error)
                        ctl_error(0, who, "%s", count_error);
                usage(stderr);
                return CTL_EXIT_BAD_INPUT;
        }
        a->input = argv[optind];
        return -1;
}

/* A policy is 1 MiB at most (policy_parse() says so); one byte more lets
 * it say so for standard input too. */
#define CTL_POLICY_READ_MAX (1024u * 1024u + 1u)

int ctl_read_policy_file(const char *path, struct policy **ret, char **ret_error) {
        if (!streq(path, "-"))
                return policy_load_file(path, ret, ret_error);
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        int r = read_full_fd(STDIN_FILENO, CTL_POLICY_READ_MAX, &buf, &len);
        if (r == -EFBIG)
                len = CTL_POLICY_READ_MAX;
        else if (r < 0)
                return set_error(ret_error, r, "cannot read the policy from standard input: %s", strerror(-r));
        return policy_parse(buf, len, "standard input", ret, ret_error);
}

const char *ctl_hostmap_load_reason(const char *root, int r, const char *err) {
        const char *reason = err ? err : strerror(-r);
        _cleanup_free_ char *prefix = xasprintf("sysfs root '%s': ", root);
        if (strncmp(reason, prefix, strlen(prefix)) == 0)
                reason += strlen(prefix);
        return reason;
}

void ctl_policy_done(struct ctl_policy *p) {
        policy_free(p->pol);
        *p = (struct ctl_policy) {0};
}

int ctl_load_policy(const struct ctl_plan_args *a, struct ctl_policy *ret) {
        const char *policy_file = a->policy_file;
        *ret = (struct ctl_policy) {0};
        if (a->policy_name && policy_file)
                return ctl_error(CTL_EXIT_BAD_INPUT, a->who, "--policy and --policy-file exclude each other");
        if (policy_file && streq(policy_file, "-") && a->input && streq(a->input, "-"))
                return ctl_error(CTL_EXIT_BAD_INPUT, a->who,
                                 "--policy-file - and the domain XML - cannot both read standard input");

        if (a->policy_name) {
                if (policy_mode_from_string(a->policy_name, &ret->mode) < 0)
                        return ctl_error(CTL_EXIT_BAD_INPUT, a->who,
                                         "unknown policy '%s' (expected off, legacy, preferred, socket, require)", a->policy_name);
                ret->forced = true;
                return 0;
        }
        struct stat st;
        if (!policy_file && stat(CTL_DEFAULT_POLICY_FILE, &st) == 0)
                policy_file = CTL_DEFAULT_POLICY_FILE;
        if (policy_file) {
                _cleanup_free_ char *err = NULL;
                if (ctl_read_policy_file(policy_file, &ret->pol, &err) < 0)
                        return ctl_error(CTL_EXIT_BAD_INPUT, a->who, "%s", err);
        } else
                ret->pol = policy_new_default();
        return 0;
}

int ctl_load_hostmap(const struct ctl_plan_args *a, struct hostmap **ret_h) {
        _cleanup_free_ char *err = NULL;
        _cleanup_hostmap_ struct hostmap *h = NULL;
        if (hostmap_load_for_plan(a->root, &h, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, a->who, "cannot read the host map: %s", err);
        ctl_print_hostmap_warnings(a->who, h);
#if PCINUMA_STAND_INS
        h->stand_ins = a->stand_ins;
#endif
        *ret_h = TAKE_PTR(h);
        return 0;
}

/* The rest of ctl_plan_input() and ctl_plan_xml(), once the policy is
 * loaded and the XML read. */
static int plan_loaded(const struct ctl_plan_args *a, const struct ctl_policy *p, const char *xml, size_t len,
                       struct hostmap **ret_h, struct engine_result **ret_res) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        int r = ctl_load_hostmap(a, &h);
        if (r != 0)
                return r;
        _cleanup_free_ char *err = NULL;
        if (engine_plan(xml, len, h, p->pol, p->forced ? &p->mode : NULL, ret_res, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, a->who, "%s: %s", ctl_input_name(a->input), err);
        *ret_h = TAKE_PTR(h);
        return 0;
}

int ctl_plan_input(const struct ctl_plan_args *a, struct hostmap **ret_h, struct engine_result **ret_res) {
        _cleanup_(ctl_policy_done) struct ctl_policy p = {0};
        int r = ctl_load_policy(a, &p);
        if (r != 0)
                return r;

        _cleanup_free_ char *xml = NULL, *err = NULL;
        size_t len = 0;
        if (ctl_read_input(a->input, DOMAIN_XML_MAX, &xml, &len, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, a->who, "%s", err);
        return plan_loaded(a, &p, xml, len, ret_h, ret_res);
}

int ctl_plan_xml(const struct ctl_plan_args *a, const char *xml, size_t len, struct hostmap **ret_h,
                 struct engine_result **ret_res) {
        _cleanup_(ctl_policy_done) struct ctl_policy p = {0};
        int r = ctl_load_policy(a, &p);
        if (r != 0)
                return r;
        if (len > DOMAIN_XML_MAX)
                return ctl_error(CTL_EXIT_BAD_INPUT, a->who, "%s is larger than the %u byte limit for a domain XML",
                                 ctl_input_name(a->input), DOMAIN_XML_MAX);
        return plan_loaded(a, &p, xml, len, ret_h, ret_res);
}

/* Each line of s on stderr with "<who>: ". */
static void print_lines(const char *who, const char *s) {
        for (const char *line = s, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                ctl_error(0, who, "%.*s", nl ? (int) (nl - line) : (int) strlen(line), line);
        }
}

int ctl_report_plan(const char *who, const struct engine_result *res, bool warnings) {
        if (res->revert_warning)
                ctl_error(0, who, "warning: undoing the earlier plan: %s", res->revert_warning);
        for (size_t i = 0; i < res->plan->n_warnings && warnings; i++)
                ctl_error(0, who, "warning: %s", res->plan->warnings[i]);
        if (res->verdict != PLAN_REFUSED) {
                /* Devices that stay on pcie.0: each cause once, with its
                 * fix and the devices it concerns (a cause a warning
                 * named: its fix only), said loudly, as the start says
                 * it (report_warnings()). */
                if (warnings) {
                        _cleanup_free_ char *s = NULL;
                        if (report_warnings(res, &s))
                                ctl_error(0, who, "warning: " REPORT_NOT_PLACED " (policy %s):",
                                          policy_mode_to_string(res->settings.mode));
                        print_lines(who, s);
                }
                return 0;
        }
        /* The reason, then each cause once with its fix and the devices
         * it concerns (report_refusal()), each line with the prefix. */
        _cleanup_free_ char *s = report_refusal(res);
        print_lines(who, s);
        return CTL_EXIT_REFUSED;
}

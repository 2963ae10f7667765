/* pcinumactl audit: for every defined domain, what pcinuma would do under
 * the policy in force (or the one given): whether its definition is
 * planned and up to date, and what the prepare gate would answer at its
 * next start, with the reason in one line.  It is the step before turning
 * on `require` (docs/operations.md, "Audit before require").
 *
 * The verdict comes from the prepare gate's own code, decide_hook() in
 * lib/core/decide.c, given the definition as libvirt would start it; the
 * state from the engine result that decision made.  It changes nothing:
 * the libvirt connection is read-only, and pcinumad need not run. */
#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-libvirt.h"
#include "ctl-util.h"
#include "ctl.h"
#include "decide.h"
#include "engine.h"
#include "fileio.h"
#include "hook-protocol.h" /* _cleanup_json_ */
#include "hostmap.h"
#include "policy.h"

static const char *const who = "pcinumactl audit";

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl audit [--connect URI] [--policy NAME | --policy-file FILE|-]\n"
                "                        [--sysfs-root DIR] [--json]\n"
                "\n"
                "For every defined domain, what pcinuma would do under the policy: its state\n"
                "(current, stale, unplanned, off, excluded), the verdict the hook would give\n"
                "at its next start (allow, warn, restart, refuse) and why, in one line.\n"
                "It changes nothing (a read-only libvirt connection) and needs no pcinumad.\n"
                "\n"
                "  --connect URI       the libvirt connection (default: libvirt's default URI)\n"
                "  --policy NAME       judge by a policy whose default is NAME (off, legacy,\n"
                "                      preferred, socket, require) and that has no rules\n"
                "  --policy-file FILE  judge by this policy file (- reads standard input;\n"
                "                      default " CTL_DEFAULT_POLICY_FILE " if it exists, else the\n"
                "                      built-in default)\n"
                "  --sysfs-root DIR    read the host map from DIR instead of /sys\n"
                "                      (default: $PCINUMA_SYSFS_ROOT, else /sys)\n"
                "  --json              a JSON list of objects (name, uuid, active, state,\n"
                "                      verdict, reason, policy, policy_origin, devices, message)\n"
                "  -h, --help          show this help\n"
                "\n"
                "Exit status: 0 no domain would be refused, 1 a domain would be refused at its\n"
                "next start, 2 bad input or no libvirt connection.\n");
}

struct audit_options {
        struct ctl_plan_args a;         /* --sysfs-root, --policy, --policy-file (no FILE) */
        const char *uri;
        bool json;
};

static bool audit_option(void *data, int c, const char *arg) {
        struct audit_options *o = data;
        if (ctl_plan_args_option(&o->a, c, arg))
                return true;
        if (c == 'c')
                o->uri = arg;
        else if (c == 'j')
                o->json = true;
        else
                return false;
        return true;
}

/* One domain's line. */
struct audit_row {
        char *name;
        char uuid[VIR_UUID_STRING_BUFLEN];
        bool active;
        const char *state;
        const char *verdict;
        char *reason;
        const char *policy;             /* NULL: not resolved (the XML did not parse) */
        char *policy_origin;
        size_t devices;
        char *message;                  /* what the hook would print, or NULL */
};

static void row_done(struct audit_row *r) {
        free(r->name);
        free(r->reason);
        free(r->policy_origin);
        free(r->message);
}

/* The definition's state under the plan: current (planned, up to date),
 * stale (planned, but not as the policy plans it now), unplanned (the
 * policy plans or refuses it, and it carries no plan), off (policy off),
 * excluded (nothing to plan: no passthrough device, not eligible, or no
 * device has a cell to go to). */
static const char *state_of(const struct engine_result *r) {
        if (r->settings.mode == POLICY_OFF)
                return r->marked ? "stale" : "off";
        if (r->already_planned)
                return "current";
        if (r->marked)
                return "stale";
        if (r->verdict == PLAN_APPLY || r->verdict == PLAN_REFUSED)
                return "unplanned";
        return "excluded";
}

/* The first cause of the refused (or staying) devices, with its fix, when
 * the plan's reason does not say it: "; fix: ..." or ": what; fix: ...". */
static void append_cause(struct strbuf *b, const struct plan *p, enum plan_action action) {
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != action || pd->cause < 0)
                        continue;
                const struct plan_cause *c = &p->causes[pd->cause];
                if (!p->reason || !strstr(p->reason, c->what))
                        strbuf_printf(b, ": %s", c->what);
                if (c->fix)
                        strbuf_printf(b, "; fix: %s", c->fix);
                return;
        }
}

/* The reason, in one line, from the decision (r: its plan, NULL when the
 * XML did not parse). */
static char *reason_of(const struct decision *d, const struct engine_result *r, const char *state) {
        struct strbuf b = {0};
        if (!r) {
                /* The message's first line, without the hook's prefix. */
                const char *m = d->message ? d->message : "the definition cannot be planned";
                if (strncmp(m, "pcinuma: ", 9) == 0)
                        m += 9;
                strbuf_appendn(&b, m, strcspn(m, "\n"));
                return strbuf_steal(&b);
        }
        const struct plan *p = r->plan;
        size_t moved = 0;
        for (size_t i = 0; i < p->n_devices; i++)
                moved += p->devices[i].action == PLAN_MOVE;
        if (streq(state, "off"))
                strbuf_printf(&b, "policy off, from %s", r->policy_origin ? r->policy_origin : "?");
        else if (streq(state, "current"))
                strbuf_printf(&b, "planned and up to date: %zu of %zu device%s on guest cells", moved, p->n_devices,
                              p->n_devices == 1 ? "" : "s");
        else if (r->verdict == PLAN_REFUSED) {
                strbuf_printf(&b, "%s", p->reason ? p->reason : "refused by the policy");
                append_cause(&b, p, PLAN_REFUSE);
        } else if (streq(state, "stale")) {
                if (r->stale_mark)
                        strbuf_printf(&b, "its pcinuma mark is stale: %s", r->stale_mark);
                else if (r->reverted || r->verdict != PLAN_APPLY)
                        strbuf_printf(&b, "its plan would be undone: %s", p->reason ? p->reason : "not planned any more");
                else
                        strbuf_printf(&b, "not as planned now: %s", r->mismatch ? r->mismatch : "it differs");
        } else if (streq(state, "unplanned"))
                strbuf_printf(&b, "not planned yet: the plan moves %zu of %zu device%s to guest cells", moved, p->n_devices,
                              p->n_devices == 1 ? "" : "s");
        else {
                strbuf_printf(&b, "%s", p->reason ? p->reason : "nothing to place");
                append_cause(&b, p, PLAN_STAY);
        }
        /* One line, whatever a phrase held. */
        for (char *c = b.buf; c && *c; c++)
                if (*c == '\n')
                        *c = ' ';
        return strbuf_steal(&b);
}

/* Judge one domain's persistent definition as the prepare gate would at
 * its next start.  Returns 0, or -1 when libvirt would not give it. */
static int audit_domain(virDomainPtr dom, const struct hostmap *h, const struct policy *pol, struct audit_row *ret) {
        struct audit_row row = { .name = xstrdup(virDomainGetName(dom) ? virDomainGetName(dom) : "?") };
        (void) virDomainGetUUIDString(dom, row.uuid);
        row.active = virDomainIsActive(dom) == 1;
        _cleanup_free_ char *xml = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE);
        if (!xml) {
                ctl_error(0, who, "cannot read the definition of '%s': %s", row.name, ctl_libvirt_error());
                row_done(&row);
                return -1;
        }
        /* The hook's request for "prepare begin", as libvirt makes it. */
        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { row.name, (char *) "prepare", (char *) "begin", (char *) "-" },
                .xml = xml,
                .xml_len = strlen(xml),
        };
        /* The gate tells a persistent domain (restarted under
         * first_start: restart) from a transient one (refused or warned
         * per the transient switch), and so must audit.  The list holds
         * persistent domains only, and a domain's next start is that of
         * its definition; one undefined since the list was made (a
         * transient domain running on, which has no next start) is gone:
         * no row. */
        if (virDomainIsPersistent(dom) == 0) {
                row_done(&row);
                return -1;
        }
        struct decision d;
        /* As the gate sees a persistent domain with pcinumad's watcher
         * connected (it keeps definitions planned, and restarts a start
         * without the plan under first_start: restart). */
        const struct decide_context ctx = {
                .uuid = row.uuid, .updating = true, .watcher = true, .persistence = DECIDE_PERSISTENT,
        };
        decide_hook(&req, h, pol, NULL, &ctx, &d);
        const struct engine_result *r = d.result;
        row.state = r ? state_of(r) : "unplanned";
        row.verdict = d.verdict == DECIDE_PASS ? "allow" : decide_verdict_to_string(d.verdict);
        row.reason = reason_of(&d, r, row.state);
        if (d.has_mode)
                row.policy = policy_mode_to_string(d.mode);
        if (r) {
                row.policy_origin = r->policy_origin ? xstrdup(r->policy_origin) : NULL;
                row.devices = r->plan->n_devices;
        }
        row.message = TAKE_PTR(d.message);
        decision_done(&d);
        *ret = row;
        return 0;
}

/* The policy to judge by, as a policy (decide_hook() takes one): the
 * shared loader's (--policy-file, the default file, the built-in default),
 * --policy NAME as a policy whose default is NAME and that has no rules,
 * and "-" for --policy-file read here (standard input is free: audit reads
 * no FILE).  *ret_source says which, for the summary line. */
static int load_policy(const struct ctl_plan_args *a, struct policy **ret, char **ret_source) {
        if (a->policy_file && streq(a->policy_file, "-") && !a->policy_name) {
                _cleanup_free_ char *err = NULL;
                if (ctl_read_policy_file("-", ret, &err) < 0)
                        return ctl_error(CTL_EXIT_BAD_INPUT, who, "%s", err);
                *ret_source = xstrdup("standard input");
                return 0;
        }
        _cleanup_(ctl_policy_done) struct ctl_policy p = {0};
        int r = ctl_load_policy(a, &p);
        if (r != 0)
                return r;
        if (p.forced) {
                *ret = policy_new_default();
                (*ret)->def = policy_settings_default(p.mode);
                *ret_source = xasprintf("--policy %s", policy_mode_to_string(p.mode));
                return 0;
        }
        struct stat st;
        *ret_source = xstrdup(a->policy_file ? a->policy_file
                              : stat(CTL_DEFAULT_POLICY_FILE, &st) == 0 ? CTL_DEFAULT_POLICY_FILE : "the built-in default");
        *ret = TAKE_PTR(p.pol);
        return 0;
}

static int by_name(const void *a, const void *b) {
        return strcmp(((const struct audit_row *) a)->name, ((const struct audit_row *) b)->name);
}

static void print_json(const struct audit_row *rows, size_t n) {
        _cleanup_json_ json_object *a = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
                const struct audit_row *r = &rows[i];
                json_object *o = json_object_new_object();
                json_object_object_add(o, "name", json_object_new_string(r->name));
                json_object_object_add(o, "uuid", r->uuid[0] ? json_object_new_string(r->uuid) : NULL);
                json_object_object_add(o, "active", json_object_new_boolean(r->active));
                json_object_object_add(o, "state", json_object_new_string(r->state));
                json_object_object_add(o, "verdict", json_object_new_string(r->verdict));
                json_object_object_add(o, "reason", json_object_new_string(r->reason));
                json_object_object_add(o, "policy", r->policy ? json_object_new_string(r->policy) : NULL);
                json_object_object_add(o, "policy_origin", r->policy_origin ? json_object_new_string(r->policy_origin) : NULL);
                json_object_object_add(o, "devices", json_object_new_int64((int64_t) r->devices));
                json_object_object_add(o, "message", r->message ? json_object_new_string(r->message) : NULL);
                json_object_array_add(a, o);
        }
        puts(json_object_to_json_string_ext(a, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* " 2 current, 1 stale": how many rows have each of keys as their state
 * (or their verdict), the keys with none left out; 'none' when no row has
 * any. */
static void print_counts(const struct audit_row *rows, size_t n, bool verdict, const char *const *keys, size_t n_keys,
                         const char *none) {
        bool first = true;
        for (size_t s = 0; s < n_keys; s++) {
                size_t k = 0;
                for (size_t i = 0; i < n; i++)
                        k += streq(verdict ? rows[i].verdict : rows[i].state, keys[s]);
                if (k)
                        printf("%s %zu %s", first ? "" : ",", k, keys[s]);
                first &= !k;
        }
        if (first)
                printf(" %s", none);
}

static void print_text(const struct audit_row *rows, size_t n, const char *source) {
        static const char *const states[] = { "current", "stale", "unplanned", "off", "excluded" };
        static const char *const verdicts[] = { "allow", "warn", "restart", "refuse" };
        int wn = (int) strlen("DOMAIN"), ws = (int) strlen("unplanned"), wv = (int) strlen("NEXT-START"),
            wp = (int) strlen("preferred");
        for (size_t i = 0; i < n; i++)
                if ((int) strlen(rows[i].name) > wn)
                        wn = (int) strlen(rows[i].name);
        printf("%-*s  %-*s  %-*s  %-*s  %s\n", wn, "DOMAIN", ws, "STATE", wv, "NEXT-START", wp, "POLICY", "REASON");
        for (size_t i = 0; i < n; i++) {
                const struct audit_row *r = &rows[i];
                printf("%-*s  %-*s  %-*s  %-*s  %s\n", wn, r->name, ws, r->state, wv, r->verdict, wp,
                       r->policy ? r->policy : "-", r->reason);
        }
        printf("\n%zu domain%s under %s:", n, n == 1 ? "" : "s", source);
        print_counts(rows, n, false, states, ELEMENTSOF(states), "none");
        printf("; at the next start:");
        print_counts(rows, n, true, verdicts, ELEMENTSOF(verdicts), "nothing to start");
        printf(".\n");
}

int ctl_audit(int argc, char **argv) {
        static const struct option opts[] = {
                { "connect", required_argument, NULL, 'c' },
                CTL_OPTION_POLICY,
                CTL_OPTION_POLICY_FILE,
                CTL_OPTION_SYSFS_ROOT,
                { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct audit_options o = { .a = { .who = who, .root = ctl_default_sysfs_root() } };
        int r = ctl_parse_args(argc, argv, who, opts, usage, audit_option, &o, NULL, NULL);
        if (r >= 0)
                return r;

        _cleanup_policy_ struct policy *pol = NULL;
        _cleanup_free_ char *source_desc = NULL;
        r = load_policy(&o.a, &pol, &source_desc);
        if (r != 0)
                return r;

        _cleanup_hostmap_ struct hostmap *h = NULL;
        r = ctl_load_hostmap(&o.a, &h);
        if (r != 0)
                return r;

        virConnectPtr c = ctl_libvirt_connect_read_only(who, o.uri);
        if (!c)
                return CTL_EXIT_BAD_INPUT;
        virDomainPtr *doms = NULL;
        int n = virConnectListAllDomains(c, &doms, VIR_CONNECT_LIST_DOMAINS_PERSISTENT);
        if (n < 0) {
                ctl_error(0, who, "cannot list the defined domains: %s", ctl_libvirt_error());
                virConnectClose(c);
                return CTL_EXIT_BAD_INPUT;
        }
        struct audit_row *rows = xcalloc(n ? (size_t) n : 1, sizeof(*rows));
        size_t k = 0;
        bool failed = false;
        for (int i = 0; i < n; i++) {
                /* A domain undefined since the list was made is gone: no
                 * row, and no failure either. */
                if (audit_domain(doms[i], h, pol, &rows[k]) == 0)
                        k++;
                else
                        failed |= virDomainIsPersistent(doms[i]) == 1;
                virDomainFree(doms[i]);
        }
        free(doms);
        virConnectClose(c);
        qsort(rows, k, sizeof(*rows), by_name);

        if (o.json)
                print_json(rows, k);
        else
                print_text(rows, k, source_desc);
        bool refused = false;
        for (size_t i = 0; i < k; i++) {
                refused |= streq(rows[i].verdict, "refuse");
                row_done(&rows[i]);
        }
        free(rows);
        if (fflush(stdout) != 0 || ferror(stdout))
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "cannot write the output: %s", strerror(errno));
        if (failed)
                return CTL_EXIT_BAD_INPUT;
        return refused ? CTL_EXIT_REFUSED : 0;
}

/* The hook's messages: what pcinumad's answer to a libvirt hook call
 * (decide.c) says on the hook's stderr, which libvirt shows the user.
 * decide.c decides the verdict; these functions only word it, from the
 * finished engine result or the facts the decision rests on, and never
 * change what they read.  Every line starts with "pcinuma: ".  Part of
 * the report module (report.h).  Pure: no I/O, no globals. */
#include "report.h"

#include <string.h>

#include "decide.h"

/* Prefix every line of s with "pcinuma: " (libvirt shows hook stderr
 * verbatim; the prefix says who is talking). */
static char *prefixed(const char *s) {
        struct strbuf b = {0};
        for (const char *line = s; *line;) {
                const char *nl = strchr(line, '\n');
                size_t n = nl ? (size_t) (nl - line) : strlen(line);
                strbuf_append(&b, "pcinuma: ");
                strbuf_appendn(&b, line, n);
                strbuf_append(&b, "\n");
                line += n + (nl ? 1 : 0);
        }
        return strbuf_steal(&b);
}

char *report_hook_beyond_limits(const char *name, const char *mode, bool by_name, const char *err, bool refused) {
        const char *how = by_name ? ", by the domain's name alone" : "";
        if (refused)
                return xasprintf("pcinuma: refusing to start domain %s: it is beyond what pcinuma can plan "
                                 "(policy %s%s): %s\n", name, mode, how, err);
        return xasprintf("pcinuma: warning: domain %s starts unchanged, without a NUMA plan: it is beyond "
                         "what pcinuma can plan (policy %s%s): %s\n", name, mode, how, err);
}

/* The plan's warnings, one "pcinuma: warning:" line each, then why the
 * devices that stay on pcie.0 could not be placed (report_warnings()). */
static void append_warnings(struct strbuf *b, const char *name, const struct engine_result *r) {
        const struct plan *p = r->plan;
        const char *mode = policy_mode_to_string(r->settings.mode);
        for (size_t i = 0; i < p->n_warnings; i++)
                strbuf_printf(b, "pcinuma: warning: domain %s: %s (policy %s)\n", name, p->warnings[i], mode);
        _cleanup_free_ char *lines = NULL;
        if (report_warnings(r, &lines))
                strbuf_printf(b, "pcinuma: warning: domain %s: " REPORT_NOT_PLACED " (policy %s):\n", name, mode);
        if (!*lines)
                return;
        _cleanup_free_ char *body = prefixed(lines);
        strbuf_append(b, body);
}

char *report_hook_warnings(const struct engine_result *r, const char *name) {
        struct strbuf b = {0};
        append_warnings(&b, name, r);
        if (b.len)
                return strbuf_steal(&b);
        strbuf_done(&b);
        return NULL;
}

char *report_hook_refused(const struct engine_result *r, const char *name) {
        const char *reason = r->plan->reason ? r->plan->reason : "refused by policy";
        _cleanup_free_ char *lines = report_causes(r, PLAN_REFUSE, reason);
        _cleanup_free_ char *body = prefixed(lines);
        /* The policy, unless the reason names it already. */
        _cleanup_free_ char *policy = strstr(reason, "policy ") ? xstrdup("")
                                                                : xasprintf(" (policy %s)", policy_mode_to_string(r->settings.mode));
        return xasprintf("pcinuma: refusing to start domain %s: %s%s\n%s", name, reason, policy, body);
}

/* The layout the domain starts with instead of the plan's. */
static const char *mismatch_of(const struct engine_result *r) {
        return r->mismatch ? r->mismatch : "it differs";
}

char *report_hook_restart(const struct engine_result *r, const char *name, bool transient) {
        struct strbuf b = {0};
        strbuf_printf(&b, "pcinuma: domain %s starts once without its NUMA-aware PCI topology (policy %s): %s.\n"
                      "pcinuma: as soon as it is up, pcinuma restarts it into the plan (%s)%s.\n",
                      name, policy_mode_to_string(r->settings.mode), mismatch_of(r),
                      transient ? "transient: restart" : "first_start: restart",
                      transient ? "" : "; its persistent definition is being updated for the next starts");
        append_warnings(&b, name, r);
        return strbuf_steal(&b);
}

char *report_hook_own_start(const struct engine_result *r, const char *name) {
        return xasprintf("pcinuma: warning: domain %s starts without its NUMA-aware PCI topology (policy %s): %s.\n"
                         "pcinuma: pcinuma could not start it with its plan, so it starts it as it was started "
                         "(the journal has the error).\n",
                         name, policy_mode_to_string(r->settings.mode), mismatch_of(r));
}

/* What a user does about a start without the plan that pcinuma does not
 * restart: a phrase that ends the message's second line. */
static const char *next_step(const struct decide_context *c, bool strict) {
        switch (c->persistence) {
        case DECIDE_PERSISTENT:
                if (c->updating)
                        return strict ? "the persistent definition is being updated; then start the domain again"
                                      : "the persistent definition is being updated, for the next start";
                break;
        case DECIDE_TRANSIENT:
                /* Under require, a client that creates the domain and
                 * defines it once it runs (virt-install, virt-manager)
                 * is transient here: the gate cannot know it will be
                 * defined. */
                return strict ? "a transient domain must be created from planned XML "
                                "('pcinumactl plan vm.xml | virsh create /dev/stdin'; a running one's: "
                                "'virsh dumpxml vm | pcinumactl plan -'), or defined planned first ('pcinumactl "
                                "define vm.xml'; virt-install: '--print-xml | pcinumactl define -'), or restarted "
                                "into its plan with \"transient\": \"restart\" in the policy, which virt-install "
                                "and virt-manager need under this policy (they create the domain transient and "
                                "define it only once it runs)"
                              : "create a transient domain from planned XML ('pcinumactl plan vm.xml | virsh create "
                                "/dev/stdin'), or have pcinuma restart it into its plan with \"transient\": "
                                "\"restart\" in the policy";
        case DECIDE_PERSISTENCE_UNKNOWN:
                if (c->updating)
                        return strict ? "the persistent definition is being updated; then start the domain again "
                                        "(a transient domain must be created from planned XML: "
                                        "'pcinumactl plan vm.xml | virsh create /dev/stdin')"
                                      : "the persistent definition is being updated, for the next start "
                                        "(a transient domain must be created from planned XML: "
                                        "'pcinumactl plan vm.xml | virsh create /dev/stdin')";
                break;
        }
        return strict ? "plan the definition with 'pcinumactl plan' and define it again; then start the domain again"
                      : "plan the definition with 'pcinumactl plan' and define it again, for the next start";
}

char *report_hook_differs(const struct engine_result *r, const char *name, const struct decide_context *c, bool refused,
                          const char *no_restart, bool if_persistent) {
        const char *mode = policy_mode_to_string(r->settings.mode);
        _cleanup_free_ char *why = no_restart ? xasprintf("pcinuma: not restarted into the plan: %s.\n", no_restart) : NULL;
        if (refused)
                return xasprintf("pcinuma: refusing to start domain %s: its PCI topology does not match the NUMA plan "
                                 "(policy %s): %s.\npcinuma: %s.\n%s",
                                 name, mode, mismatch_of(r), next_step(c, true), why ? why : "");
        struct strbuf b = {0};
        strbuf_printf(&b, "pcinuma: warning: domain %s starts without its NUMA-aware PCI topology (policy %s): %s.\n"
                      "pcinuma: %s.\n%s%s",
                      name, mode, mismatch_of(r), next_step(c, false), why ? why : "",
                      if_persistent
                              ? "pcinuma: if it is defined by the time it is up (virt-install and "
                                "virt-manager define it while it starts), pcinuma restarts it into "
                                "the plan like a persistent domain.\n"
                              : "");
        append_warnings(&b, name, r);
        return strbuf_steal(&b);
}

char *report_hook_no_xml(const char *name) {
        return xasprintf("pcinuma: refusing to start domain %s: libvirt passed no domain XML to the prepare hook\n", name);
}

char *report_hook_error(const char *name, const char *err) {
        return xasprintf("pcinuma: refusing to start domain %s: %s\n", name, err);
}

char *report_hook_not_utf8(const char *phase, const char *name, long byte) {
        return xasprintf("pcinuma: refusing %s domain %s: the domain XML is not valid UTF-8 (byte %ld)\n",
                         streq(phase, "prepare") ? "to start" : streq(phase, "migrate") ? "the incoming migration of"
                                                                                          : "to restore",
                         name, byte);
}

char *report_hook_incoming(const struct incoming_result *m, const char *name) {
        struct strbuf b = {0};
        /* A device another domain uses too: first, so that the journal
         * entry's message is the warning. */
        for (size_t i = 0; i < m->map.n_pairs; i++) {
                const struct migrate_pair *p = &m->map.pairs[i];
                if (p->used_by)
                        strbuf_printf(&b, "pcinuma: warning: domain %s: host device %s (for %s) is also used by "
                                      "domain %s: no free device of this host is in its position; only one of "
                                      "them can run at a time\n", name, p->to, p->from, p->used_by);
        }
        for (size_t i = 0; i < m->map.n_pairs; i++)
                strbuf_printf(&b, "pcinuma: domain %s: host device %s is %s on this host\n", name,
                              m->map.pairs[i].from, m->map.pairs[i].to);
        return strbuf_steal(&b);
}

char *report_hook_incoming_marked(const struct incoming_result *m, const char *name) {
        const char *policy = m->policy;
        return xasprintf("pcinuma: refusing incoming migration of domain %s: its PCI topology was planned for "
                         "the NUMA layout of the host it was defined on (pcinuma policy %s) and is marked "
                         "migratable=\"no\"%s%.*s%s; run 'pcinumactl revert' on its definition (or set its policy to "
                         "off) on the source host first\n",
                         name, policy ? policy : "?", m->reason ? " (" : "",
                         /* the mark's text, its first line only */
                         m->reason ? (int) strcspn(m->reason, "\r\n") : 0, m->reason ? m->reason : "",
                         m->reason ? ")" : "");
}

char *report_hook_incoming_refused(const struct incoming_result *m, const char *name) {
        /* The reason's first line is its summary; each line after it (one
         * per device, the host's candidates once) gets the prefix too. */
        size_t first = strcspn(m->reason, "\n");
        _cleanup_free_ char *more = m->reason[first] ? prefixed(m->reason + first + 1) : xstrdup("");
        return xasprintf("pcinuma: refusing incoming migration of domain %s: this host cannot give it the "
                         "same topology: %.*s\n%s",
                         name, (int) first, m->reason, more);
}

/* The daemon's answer to each hook call (design §8).  Pure. */
#include "decide.h"

#include "migrate.h"

const char *decide_verdict_to_string(enum decide_verdict v) {
        switch (v) {
        case DECIDE_PASS:
                return "pass";
        case DECIDE_ALLOW:
                return "allow";
        case DECIDE_WARN:
                return "warn";
        case DECIDE_REFUSE:
                return "refuse";
        }
        return "?";
}

void decision_done(struct decision *d) {
        free(d->out);
        free(d->message);
        free(d->domain);
        free(d->uuid);
        engine_result_free(d->result);
        for (size_t i = 0; i < d->n_remap; i++)
                free(d->remap[i]);
        free(d->remap);
        for (size_t i = 0; i < d->n_shared; i++)
                free(d->shared[i]);
        free(d->shared);
        *d = (struct decision) {0};
}

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

/* What a domain allowed to start is warned about: the plan's warnings
 * (a domain left untouched, devices placed off their node, a window too
 * small), one "pcinuma: warning:" line each, then why the devices that
 * stay on pcie.0 could not be placed, each cause once with its fix and the
 * devices it concerns (engine_causes(); a cause a warning named gives its
 * fix only). */
static void append_warnings(struct strbuf *b, const char *name, const struct engine_result *r, const char *mode) {
        const struct plan *p = r->plan;
        struct strbuf said = {0};
        for (size_t i = 0; i < p->n_warnings; i++) {
                strbuf_printf(b, "pcinuma: warning: domain %s: %s (policy %s)\n", name, p->warnings[i], mode);
                strbuf_printf(&said, "%s\n", p->warnings[i]);
        }
        _cleanup_free_ char *lines = engine_causes(r, PLAN_STAY, said.buf);
        strbuf_done(&said);
        if (!*lines)
                return;
        if (!p->n_warnings)
                strbuf_printf(b, "pcinuma: warning: domain %s: not every passthrough device could be placed (policy %s):\n",
                              name, mode);
        _cleanup_free_ char *body = prefixed(lines);
        strbuf_append(b, body);
}

static void decide_prepare(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                           bool updating, struct decision *d) {
        _cleanup_free_ char *err = NULL;
        const char *name = d->domain;

        if (!req->xml) {
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing to start domain %s: libvirt passed no domain XML to the prepare hook\n", name);
                return;
        }
        if (engine_plan(req->xml, req->xml_len, h, pol, NULL, &d->result, &err) < 0) {
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing to start domain %s: %s\n", name, err);
                return;
        }
        const struct engine_result *r = d->result;
        d->mode = r->settings.mode;
        d->has_mode = true;
        if (r->base->uuid)
                d->uuid = xstrdup(r->base->uuid);
        const char *mode = policy_mode_to_string(r->settings.mode);

        switch (r->verdict) {
        case PLAN_REFUSED: {
                /* The reason, then each cause once with its fix and the
                 * devices it concerns (engine_causes()). */
                const char *reason = r->plan->reason ? r->plan->reason : "refused by policy";
                _cleanup_free_ char *lines = engine_causes(r, PLAN_REFUSE, reason);
                _cleanup_free_ char *body = prefixed(lines);
                d->verdict = DECIDE_REFUSE;
                /* The policy, unless the reason names it already. */
                _cleanup_free_ char *policy = strstr(reason, "policy ") ? xstrdup("") : xasprintf(" (policy %s)", mode);
                d->message = xasprintf("pcinuma: refusing to start domain %s: %s%s\n%s", name, reason, policy, body);
                return;
        }
        case PLAN_SKIP:
        case PLAN_UNCHANGED:
        case PLAN_APPLY:
                break;
        }

        /* Allowed as it is: with a warning when the plan has one. */
        if (r->verdict != PLAN_APPLY || r->already_planned) {
                struct strbuf b = {0};
                append_warnings(&b, name, r, mode);
                d->verdict = b.len ? DECIDE_WARN : DECIDE_ALLOW;
                if (b.len)
                        d->message = strbuf_steal(&b);
                return;
        }
        /* The domain starts with a layout other than the plan: libvirt
         * ignores a prepare hook's stdout, so the fix goes to the
         * persistent definition and takes effect at the next start. */
        const char *next = updating
                ? "the persistent definition is being updated; a transient domain must be created from planned XML "
                  "('pcinumactl plan vm.xml | virsh create /dev/stdin')"
                : "plan the definition with 'pcinumactl plan' and define it again";
        if (r->settings.mode == POLICY_REQUIRE || r->settings.mode == POLICY_SOCKET) {
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing to start domain %s: its PCI topology does not match the NUMA plan "
                                       "(policy %s): %s.\npcinuma: %s; then start the domain again.\n",
                                       name, mode, r->mismatch ? r->mismatch : "it differs", next);
        } else {
                d->verdict = DECIDE_WARN;
                struct strbuf b = {0};
                strbuf_printf(&b, "pcinuma: warning: domain %s starts without its NUMA-aware PCI topology (policy %s): %s.\n"
                              "pcinuma: %s, for the next start.\n",
                              name, mode, r->mismatch ? r->mismatch : "it differs", next);
                append_warnings(&b, name, r, mode);
                d->message = strbuf_steal(&b);
        }
}

/* Incoming migration (docs/policy.md "migration"): a planned domain comes
 * in only when each of its host devices has a device of this host in the
 * same position (migrate.h); its hostdev sources and mark are rewritten,
 * its guest side kept. */
static void decide_migrate(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                           const struct migrate_in_use *in_use, struct decision *d) {
        d->verdict = DECIDE_PASS;
        if (!req->xml)
                return;
        _cleanup_(migrate_result_done) struct migrate_result m = {0};
        migrate_incoming(req->xml, req->xml_len, h, pol, in_use, &m);
        if (m.uuid)
                d->uuid = xstrdup(m.uuid);
        const char *policy = m.policy;
        if (policy && policy_mode_from_string(policy, &d->mode) == 0)
                d->has_mode = true;
        switch (m.verdict) {
        case MIGRATE_PASS:
        case MIGRATE_ACCEPT:
                d->out = TAKE_PTR(m.xml);
                if (m.verdict == MIGRATE_ACCEPT) {
                        d->verdict = DECIDE_ALLOW;
                        struct strbuf b = {0};
                        for (size_t i = 0; i < m.map.n_pairs; i++)
                                *GROW(d->remap, d->n_remap) = xasprintf("%s -> %s", m.map.pairs[i].from, m.map.pairs[i].to);
                        /* A device another domain uses too: first, so that
                         * the journal entry's message is the warning. */
                        for (size_t i = 0; i < m.map.n_pairs; i++) {
                                const struct migrate_pair *p = &m.map.pairs[i];
                                if (!p->used_by)
                                        continue;
                                *GROW(d->shared, d->n_shared) = xasprintf("%s %s", p->to, p->used_by);
                                strbuf_printf(&b, "pcinuma: warning: domain %s: host device %s (for %s) is also used by "
                                              "domain %s: no free device of this host is in its position; only one of "
                                              "them can run at a time\n", d->domain, p->to, p->from, p->used_by);
                        }
                        for (size_t i = 0; i < m.map.n_pairs; i++)
                                strbuf_printf(&b, "pcinuma: domain %s: host device %s is %s on this host\n", d->domain,
                                              m.map.pairs[i].from, m.map.pairs[i].to);
                        d->message = strbuf_steal(&b);
                }
                return;
        case MIGRATE_REFUSE_MARKED:
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing incoming migration of domain %s: its PCI topology was planned for "
                                       "the NUMA layout of the host it was defined on (pcinuma policy %s) and is marked "
                                       "migratable=\"no\"%s%.*s%s; run 'pcinumactl revert' on its definition (or set its policy to "
                                       "off) on the source host first\n",
                                       d->domain, policy ? policy : "?", m.reason ? " (" : "",
                                       /* the mark's text, its first line only */
                                       m.reason ? (int) strcspn(m.reason, "\r\n") : 0, m.reason ? m.reason : "",
                                       m.reason ? ")" : "");
                return;
        case MIGRATE_REFUSE: {
                /* The reason's first line is its summary; each line after
                 * it (one per device, the host's candidates once) gets the
                 * prefix too. */
                size_t first = strcspn(m.reason, "\n");
                _cleanup_free_ char *more = m.reason[first] ? prefixed(m.reason + first + 1) : xstrdup("");
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing incoming migration of domain %s: this host cannot give it the "
                                       "same topology: %.*s\n%s",
                                       d->domain, (int) first, m.reason, more);
                return;
        }
        }
}

void decide_hook(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                 const struct migrate_in_use *in_use, bool updating, struct decision *ret) {
        struct decision d = {0};
        d.phase = req->argv[1];
        d.subphase = req->argv[2];
        d.domain = xstrdup(req->argv[0][0] ? req->argv[0] : "(unnamed)");

        bool acting = streq(d.subphase, "begin") &&
                      (streq(d.phase, "prepare") || streq(d.phase, "migrate") || streq(d.phase, "restore"));
        if (acting && req->xml_not_utf8) {
                /* libvirt only writes UTF-8: this is not a domain XML. */
                d.verdict = DECIDE_REFUSE;
                d.message = xasprintf("pcinuma: refusing %s domain %s: the domain XML is not valid UTF-8 (byte %ld)\n",
                                      streq(d.phase, "prepare") ? "to start" : streq(d.phase, "migrate") ? "the incoming migration of"
                                                                                                          : "to restore",
                                      d.domain, req->xml_invalid_utf8);
        } else if (streq(d.phase, "prepare") && streq(d.subphase, "begin"))
                decide_prepare(req, h, pol, updating, &d);
        else if (streq(d.phase, "migrate") && streq(d.subphase, "begin"))
                decide_migrate(req, h, pol, in_use, &d);
        else if (streq(d.phase, "restore") && streq(d.subphase, "begin")) {
                /* A saved guest's device layout must not change. */
                d.verdict = DECIDE_PASS;
                if (req->xml)
                        d.out = xstrndup(req->xml, req->xml_len);
        } else
                d.verdict = DECIDE_PASS;

        d.exit_code = d.verdict == DECIDE_REFUSE ? 1 : 0;
        *ret = d;
}

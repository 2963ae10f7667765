/* The daemon's answer to each hook call (docs/design.md §8).  Pure. */
#include "decide.h"

#include <errno.h>
#include <strings.h>

#include "migrate.h"
#include "report.h"
#include "xmlutil.h"

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
        case DECIDE_RESTART:
                return "restart";
        case _DECIDE_VERDICT_MAX:
                break;
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
        for (size_t i = 0; i < d->n_boot_files; i++)
                free(d->boot_files[i]);
        free(d->boot_files);
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

/* A start whose domain is beyond pcinuma's bounds (docs/security.md,
 * "Bounded work": the document's bytes or tags, more hostdevs than the
 * host has, a mark's records, the work budget, a plan that would write
 * past them): pcinuma cannot plan it, and stops it only under a policy
 * that refuses what it cannot plan (require, socket).  Under the others it
 * starts unchanged, with a warning (off: silently).  The policy is the
 * domain's when its document can be read; when the document itself is
 * beyond the limits, the domain is known by its name alone (the hook's
 * argument): the default or a rule on the name decides, since its uuid,
 * tag and requested policy cannot be read. */
static void decide_beyond_limits(const struct proto_request *req, const struct policy *pol, const char *err,
                                 struct decision *d) {
        const char *name = d->domain;
        _cleanup_domain_ struct domain *dom = NULL;
        _cleanup_free_ char *ignored = NULL;
        struct policy_subject subj = { .name = req->argv[0][0] ? req->argv[0] : NULL };
        bool by_name = domain_parse(req->xml, req->xml_len, &dom, &ignored) < 0;
        if (!by_name)
                subj = (struct policy_subject) {
                        .name = dom->name,
                        .uuid = dom->uuid,
                        .tag = dom->policy_tag,
                        .requested = dom->requested_policy,
                };
        struct policy_settings settings;
        policy_resolve(pol, &subj, &settings, NULL);
        d->mode = settings.mode;
        d->has_mode = true;
        if (dom && dom->uuid)
                d->uuid = xstrdup(dom->uuid);
        const char *mode = policy_mode_to_string(settings.mode);
        const char *how = by_name ? ", by the domain's name alone" : "";
        if (settings.mode == POLICY_REQUIRE || settings.mode == POLICY_SOCKET) {
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing to start domain %s: it is beyond what pcinuma can plan "
                                       "(policy %s%s): %s\n", name, mode, how, err);
        } else if (settings.mode == POLICY_OFF)
                d->verdict = DECIDE_ALLOW;
        else {
                d->verdict = DECIDE_WARN;
                d->message = xasprintf("pcinuma: warning: domain %s starts unchanged, without a NUMA plan: it is beyond "
                                       "what pcinuma can plan (policy %s%s): %s\n", name, mode, how, err);
        }
}

/* What a domain allowed to start is warned about: the plan's warnings
 * (a domain left untouched, devices placed off their node, a window too
 * small), one "pcinuma: warning:" line each, then why the devices that
 * stay on pcie.0 could not be placed, each cause once with its fix and the
 * devices it concerns (report_causes(); a cause a warning named gives its
 * fix only). */
static void append_warnings(struct strbuf *b, const char *name, const struct engine_result *r, const char *mode) {
        const struct plan *p = r->plan;
        struct strbuf said = {0};
        for (size_t i = 0; i < p->n_warnings; i++) {
                strbuf_printf(b, "pcinuma: warning: domain %s: %s (policy %s)\n", name, p->warnings[i], mode);
                strbuf_printf(&said, "%s\n", p->warnings[i]);
        }
        _cleanup_free_ char *lines = report_causes(r, PLAN_STAY, said.buf);
        strbuf_done(&said);
        if (!*lines)
                return;
        if (!p->n_warnings)
                strbuf_printf(b, "pcinuma: warning: domain %s: not every passthrough device could be placed (policy %s):\n",
                              name, mode);
        _cleanup_free_ char *body = prefixed(lines);
        strbuf_append(b, body);
}

/* d->message, then the plan's warnings (append_warnings()). */
static void add_warnings(struct decision *d, const char *name, const struct engine_result *r, const char *mode) {
        struct strbuf w = {0};
        append_warnings(&w, name, r, mode);
        if (w.len) {
                _cleanup_free_ char *head = d->message;
                d->message = xasprintf("%s%s", head ? head : "", w.buf);
        }
        strbuf_done(&w);
}

int decide_peek_uuid(const char *xml, size_t len, char ret[static 37]) {
        static const char open_tag[] = "<uuid>";
        const char *end = xml + len;
        for (const char *p = xml; p && (size_t) (end - p) >= sizeof open_tag - 1;
             p = memchr(p + 1, '<', (size_t) (end - p - 1))) {
                if (memcmp(p, open_tag, sizeof open_tag - 1) != 0)
                        continue;
                p += sizeof open_tag - 1;
                while (p < end && strchr(" \t\r\n", *p))
                        p++;
                if (end - p < 36)
                        return -ENOENT;
                for (size_t i = 0; i < 36; i++) {
                        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                        char c = p[i];
                        if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
                                return -ENOENT;
                        ret[i] = (char) (c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
                }
                ret[36] = 0;
                return 0;
        }
        return -ENOENT;
}

/* The files the domain's <os> boots from directly: its kernel, initrd and
 * device tree (absolute paths only). */
static void boot_files(const struct domain *dom, struct decision *d) {
        xmlNodePtr root = xmlDocGetRootElement(dom->doc);
        xmlNodePtr os = xml_child(root, "os");
        for (xmlNodePtr n = xml_first_element(os); n; n = xml_next_element(n)) {
                if (!xml_is(n, "kernel") && !xml_is(n, "initrd") && !xml_is(n, "dtb"))
                        continue;
                char *path = xml_content(n);
                if (path && path[0] == '/')
                        *GROW(d->boot_files, d->n_boot_files) = TAKE_PTR(path);
                free(path);
        }
}

/* The context, if it speaks of this domain; else the empty one (nothing
 * known, no watcher). */
static struct decide_context context_for(const struct decide_context *ctx, const char *uuid) {
        struct decide_context none = { .updating = ctx && ctx->updating };
        if (!ctx || !ctx->uuid || !uuid || strcasecmp(ctx->uuid, uuid) != 0)
                return none;
        return *ctx;
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

/* A plan refused: the reason, then each cause once with its fix and the
 * devices it concerns (report_causes()). */
static void prepare_refused(const struct engine_result *r, const char *name, const char *mode, struct decision *d) {
        const char *reason = r->plan->reason ? r->plan->reason : "refused by policy";
        _cleanup_free_ char *lines = report_causes(r, PLAN_REFUSE, reason);
        _cleanup_free_ char *body = prefixed(lines);
        d->verdict = DECIDE_REFUSE;
        /* The policy, unless the reason names it already. */
        _cleanup_free_ char *policy = strstr(reason, "policy ") ? xstrdup("") : xasprintf(" (policy %s)", mode);
        d->message = xasprintf("pcinuma: refusing to start domain %s: %s%s\n%s", name, reason, policy, body);
}

/* Allowed as it is: with a warning when the plan has one. */
static void prepare_as_is(const struct engine_result *r, const char *name, const char *mode, struct decision *d) {
        struct strbuf b = {0};
        append_warnings(&b, name, r, mode);
        d->verdict = b.len ? DECIDE_WARN : DECIDE_ALLOW;
        if (b.len)
                d->message = strbuf_steal(&b);
}

/* first_start: restart, for a start with a layout other than the plan:
 * true when the answer is a restart (d filled); else false, with
 * *ret_no_restart saying why it is not restarted (or NULL), and
 * d->restart_if_persistent set for a transient start left to become
 * persistent. */
static bool prepare_restart(const struct engine_result *r, const struct decide_context *c, bool strict,
                            const char *name, const char *mode, const char *mismatch, struct decision *d,
                            const char **ret_no_restart) {
        *ret_no_restart = NULL;
        if (r->settings.first_start != POLICY_FIRST_START_RESTART)
                return false;
        bool transient = c->persistence != DECIDE_PERSISTENT;
        if (c->incoming)
                *ret_no_restart = "it comes in by migration or from a saved state, which pcinuma never restarts";
        else if (!c->watcher)
                *ret_no_restart = c->updating ? "pcinuma's libvirt watcher is not connected to libvirt, and only it can restart a domain"
                                              : "pcinumad runs without a libvirt watcher (--libvirt-uri none), and only it can restart a domain";
        else if (!transient || r->settings.transient_restart) {
                d->verdict = DECIDE_RESTART;
                d->restart_transient = transient;
                boot_files(r->base, d);
                d->message = xasprintf("pcinuma: domain %s starts once without its NUMA-aware PCI topology (policy %s): %s.\n"
                                       "pcinuma: as soon as it is up, pcinuma restarts it into the plan (%s)%s.\n",
                                       name, mode, mismatch,
                                       transient ? "transient: restart" : "first_start: restart",
                                       transient ? "" : "; its persistent definition is being updated for the next starts");
                add_warnings(d, name, r, mode);
                return true;
        } else if (!strict) {
                /* transient: leave, and a start the gate lets through: a
                 * client that defines the domain while it starts
                 * (virt-install, virt-manager) makes it persistent, and
                 * the watcher restarts it then, like a persistent one; one
                 * that stays transient is left alone. */
                d->restart_if_persistent = true;
                boot_files(r->base, d);
        }
        return false;
}

/* The domain starts with a layout other than the plan.  libvirt ignores a
 * prepare hook's stdout, so the plan can only come with another start:
 * pcinuma's own, as soon as this one is up (first_start: restart), or the
 * next one, from the persistent definition the watcher updates. */
static void prepare_differs(const struct engine_result *r, const struct decide_context *ctx, const char *name,
                            const char *mode, struct decision *d) {
        const struct decide_context c = context_for(ctx, d->uuid);
        const char *mismatch = r->mismatch ? r->mismatch : "it differs";
        bool strict = r->settings.mode == POLICY_REQUIRE || r->settings.mode == POLICY_SOCKET;
        if (c.own_start) {
                /* pcinuma-watcher's start of the client's own XML, after its
                 * start of the plan failed: the client's VM must run. */
                d->verdict = DECIDE_WARN;
                d->message = xasprintf("pcinuma: warning: domain %s starts without its NUMA-aware PCI topology (policy %s): %s.\n"
                                       "pcinuma: pcinuma could not start it with its plan, so it starts it as it was started "
                                       "(the journal has the error).\n",
                                       name, mode, mismatch);
                return;
        }
        const char *no_restart;         /* why first_start: restart does not restart this one */
        if (prepare_restart(r, &c, strict, name, mode, mismatch, d, &no_restart))
                return;
        bool refuse = strict && r->settings.first_start != POLICY_FIRST_START_ALLOW;
        _cleanup_free_ char *why = no_restart ? xasprintf("pcinuma: not restarted into the plan: %s.\n", no_restart) : NULL;
        if (refuse) {
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing to start domain %s: its PCI topology does not match the NUMA plan "
                                       "(policy %s): %s.\npcinuma: %s.\n%s",
                                       name, mode, mismatch, next_step(&c, true), why ? why : "");
                return;
        }
        d->verdict = DECIDE_WARN;
        d->message = xasprintf("pcinuma: warning: domain %s starts without its NUMA-aware PCI topology (policy %s): %s.\n"
                               "pcinuma: %s.\n%s%s",
                               name, mode, mismatch, next_step(&c, false), why ? why : "",
                               d->restart_if_persistent
                                       ? "pcinuma: if it is defined by the time it is up (virt-install and "
                                         "virt-manager define it while it starts), pcinuma restarts it into "
                                         "the plan like a persistent domain.\n"
                                       : "");
        add_warnings(d, name, r, mode);
}

static void decide_prepare(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                           const struct decide_context *ctx, struct decision *d) {
        _cleanup_free_ char *err = NULL;
        const char *name = d->domain;

        if (!req->xml) {
                d->verdict = DECIDE_REFUSE;
                d->message = xasprintf("pcinuma: refusing to start domain %s: libvirt passed no domain XML to the prepare hook\n", name);
                return;
        }
        int rc = engine_plan(req->xml, req->xml_len, h, pol, NULL, &d->result, &err);
        if (rc == -E2BIG || rc == -EFBIG) {
                decide_beyond_limits(req, pol, err, d);
                return;
        }
        if (rc < 0) {
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

        if (r->verdict == PLAN_REFUSED)
                prepare_refused(r, name, mode, d);
        else if (r->verdict != PLAN_APPLY || r->already_planned)
                prepare_as_is(r, name, mode, d);
        else
                prepare_differs(r, ctx, name, mode, d);
}

/* An accepted incoming domain: what went where (d->remap), the devices
 * another domain uses too (d->shared), and the message saying both. */
static void migrate_accepted(const struct incoming_result *m, struct decision *d) {
        d->verdict = DECIDE_ALLOW;
        struct strbuf b = {0};
        for (size_t i = 0; i < m->map.n_pairs; i++)
                *GROW(d->remap, d->n_remap) = xasprintf("%s -> %s", m->map.pairs[i].from, m->map.pairs[i].to);
        /* A device another domain uses too: first, so that the journal
         * entry's message is the warning. */
        for (size_t i = 0; i < m->map.n_pairs; i++) {
                const struct migrate_pair *p = &m->map.pairs[i];
                if (!p->used_by)
                        continue;
                *GROW(d->shared, d->n_shared) = xasprintf("%s %s", p->to, p->used_by);
                strbuf_printf(&b, "pcinuma: warning: domain %s: host device %s (for %s) is also used by "
                              "domain %s: no free device of this host is in its position; only one of "
                              "them can run at a time\n", d->domain, p->to, p->from, p->used_by);
        }
        for (size_t i = 0; i < m->map.n_pairs; i++)
                strbuf_printf(&b, "pcinuma: domain %s: host device %s is %s on this host\n", d->domain,
                              m->map.pairs[i].from, m->map.pairs[i].to);
        d->message = strbuf_steal(&b);
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
        _cleanup_(incoming_result_done) struct incoming_result m = {0};
        engine_incoming(req->xml, req->xml_len, h, pol, in_use, &m);
        if (m.uuid)
                d->uuid = xstrdup(m.uuid);
        const char *policy = m.policy;
        if (policy && policy_mode_from_string(policy, &d->mode) == 0)
                d->has_mode = true;
        switch (m.verdict) {
        case INCOMING_PASS:
        case INCOMING_ACCEPT:
                d->out = TAKE_PTR(m.xml);
                if (m.verdict == INCOMING_ACCEPT)
                        migrate_accepted(&m, d);
                return;
        case INCOMING_REFUSE_MARKED:
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
        case INCOMING_REFUSE: {
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
                 const struct migrate_in_use *in_use, const struct decide_context *ctx, struct decision *ret) {
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
                decide_prepare(req, h, pol, ctx, &d);
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

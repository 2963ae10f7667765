/* The daemon's answer to each hook call (docs/design.md §8): the verdict;
 * the texts that say it are the report module's (report_hook_*()).  Pure. */
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
        bool refuse = settings.mode == POLICY_REQUIRE || settings.mode == POLICY_SOCKET;
        if (settings.mode == POLICY_OFF) {
                d->verdict = DECIDE_ALLOW;
                return;
        }
        d->verdict = refuse ? DECIDE_REFUSE : DECIDE_WARN;
        d->message = report_hook_beyond_limits(d->domain, mode, by_name, err, refuse);
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

/* A plan refused: the reason, then each cause once with its fix and the
 * devices it concerns (report_hook_refused()). */
static void prepare_refused(const struct engine_result *r, const char *name, struct decision *d) {
        d->verdict = DECIDE_REFUSE;
        d->message = report_hook_refused(r, name);
}

/* Allowed as it is: with a warning when the plan has one. */
static void prepare_as_is(const struct engine_result *r, const char *name, struct decision *d) {
        d->message = report_hook_warnings(r, name);
        d->verdict = d->message ? DECIDE_WARN : DECIDE_ALLOW;
}

/* first_start: restart, for a start with a layout other than the plan:
 * true when the answer is a restart (d filled); else false, with
 * *ret_no_restart saying why it is not restarted (or NULL), and
 * d->restart_if_persistent set for a transient start left to become
 * persistent. */
static bool prepare_restart(const struct engine_result *r, const struct decide_context *c, bool strict,
                            const char *name, struct decision *d, const char **ret_no_restart) {
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
                d->message = report_hook_restart(r, name, transient);
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
                            struct decision *d) {
        const struct decide_context c = context_for(ctx, d->uuid);
        bool strict = r->settings.mode == POLICY_REQUIRE || r->settings.mode == POLICY_SOCKET;
        if (c.own_start) {
                /* pcinuma-watcher's start of the client's own XML, after its
                 * start of the plan failed: the client's VM must run. */
                d->verdict = DECIDE_WARN;
                d->message = report_hook_own_start(r, name);
                return;
        }
        const char *no_restart;         /* why first_start: restart does not restart this one */
        if (prepare_restart(r, &c, strict, name, d, &no_restart))
                return;
        bool refuse = strict && r->settings.first_start != POLICY_FIRST_START_ALLOW;
        d->verdict = refuse ? DECIDE_REFUSE : DECIDE_WARN;
        d->message = report_hook_differs(r, name, &c, refuse, no_restart, d->restart_if_persistent);
}

static void decide_prepare(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                           const struct decide_context *ctx, struct decision *d) {
        _cleanup_free_ char *err = NULL;
        const char *name = d->domain;

        if (!req->xml) {
                d->verdict = DECIDE_REFUSE;
                d->message = report_hook_no_xml(name);
                return;
        }
        int rc = engine_plan(req->xml, req->xml_len, h, pol, NULL, &d->result, &err);
        if (rc == -E2BIG || rc == -EFBIG) {
                decide_beyond_limits(req, pol, err, d);
                return;
        }
        if (rc < 0) {
                d->verdict = DECIDE_REFUSE;
                d->message = report_hook_error(name, err);
                return;
        }
        const struct engine_result *r = d->result;
        d->mode = r->settings.mode;
        d->has_mode = true;
        if (r->base->uuid)
                d->uuid = xstrdup(r->base->uuid);

        if (r->verdict == PLAN_REFUSED)
                prepare_refused(r, name, d);
        else if (r->verdict != PLAN_APPLY || r->already_planned)
                prepare_as_is(r, name, d);
        else
                prepare_differs(r, ctx, name, d);
}

/* An accepted incoming domain: what went where (d->remap), the devices
 * another domain uses too (d->shared), and the message saying both
 * (report_hook_incoming()). */
static void migrate_accepted(const struct incoming_result *m, struct decision *d) {
        d->verdict = DECIDE_ALLOW;
        for (size_t i = 0; i < m->map.n_pairs; i++)
                *GROW(d->remap, d->n_remap) = xasprintf("%s -> %s", m->map.pairs[i].from, m->map.pairs[i].to);
        for (size_t i = 0; i < m->map.n_pairs; i++) {
                const struct migrate_pair *p = &m->map.pairs[i];
                if (p->used_by)
                        *GROW(d->shared, d->n_shared) = xasprintf("%s %s", p->to, p->used_by);
        }
        d->message = report_hook_incoming(m, d->domain);
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
                d->message = report_hook_incoming_marked(&m, d->domain);
                return;
        case INCOMING_REFUSE:
                d->verdict = DECIDE_REFUSE;
                d->message = report_hook_incoming_refused(&m, d->domain);
                return;
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
                d.message = report_hook_not_utf8(d.phase, d.domain, req->xml_invalid_utf8);
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

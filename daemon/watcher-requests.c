/* What the watcher asks of pcinumad (watcher_link_ops, watcher-link.h):
 * a plan for a domain that was defined or changed, a plan for a restart,
 * a domain undefined, which domains are persistent, a restart done.  The
 * decisions are the core's (redefine_decide(), engine_plan()); this adds
 * the journal fields, the recheck cache and the restart bookkeeping. */
#include "manager-internal.h"

#include <strings.h>
#include <time.h>

#include "mark.h"
#include "metrics.h"
#include "redefine.h"
#include "watcher-link.h"

/* Keep what this plan tells about the domain (recheck.h), and log a skip
 * or a refusal once per change: the watcher asks again after every change
 * that touches the domain, and the same "not planned: ..." line at notice
 * priority each time would bury the one that matters. */
static void remember(struct manager *m, const struct engine_result *r, struct redefine_decision *dec) {
        const struct domain *d = r->base;
        if (!d->uuid)
                return;
        _cleanup_free_ char *key = recheck_settings_key(&r->settings, m->policy);
        bool created = false;
        struct recheck_entry *e = recheck_cache_update(&m->cache, d->uuid, d, m->hostmap, key, &created);
        if (redefine_said_before(dec, e->summary, created)) {
                dec->prio = LOG_DEBUG;
                m->n_logged_once++;
        }
        free(e->summary);
        e->summary = dec->summary ? xstrdup(dec->summary) : NULL;
}

/* The journal fields of a plan that define and restart both log: the
 * domain, its UUID (if any), the phase, the policy, the verdict, each
 * device's host node and guest cell, and the path fidelity. */
static void plan_fields(struct log_fields *f, const struct engine_result *r, const char *uuid, const char *phase,
                        const char *verdict) {
        const struct domain *d = r->base;
        log_fields_add(f, "PCINUMA_DOMAIN", "%s", d->name ? d->name : "");
        if (uuid)
                log_fields_add(f, "PCINUMA_UUID", "%s", uuid);
        log_fields_add(f, "PCINUMA_PHASE", "%s", phase);
        log_fields_add(f, "PCINUMA_POLICY", "%s", policy_mode_to_string(r->settings.mode));
        log_fields_add(f, "PCINUMA_VERDICT", "%s", verdict);
        const struct plan *pl = r->plan;
        for (size_t i = 0; i < pl->n_devices; i++) {
                log_fields_add(f, "PCINUMA_DEVICE", "%s", pl->devices[i].name);
                log_fields_add(f, "PCINUMA_HOST_NODE", "%d", pl->devices[i].host_node);
                log_fields_add(f, "PCINUMA_GUEST_CELL", "%d", pl->devices[i].cell);
        }
        planner_fidelity(r->plan);
        log_fidelity(f, r->plan);
}

/* The decision itself is redefine_decide()'s; this adds the journal
 * fields and the recheck cache. */
void manager_plan_redefine(void *userdata, const char *xml, size_t len, struct redefine_plan *ret) {
        struct manager *m = userdata;
        struct redefine_plan p = {0};
        struct redefine_decision dec;
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;

        m->n_plans++;

        if (engine_plan(xml, len, m->hostmap, m->policy, NULL, &r, &err) < 0) {
                redefine_decide(NULL, err, &dec);
                p.prio = dec.prio;
                p.summary = TAKE_PTR(dec.summary);
                *ret = p;
                return;
        }
        const struct domain *d = r->base;
        const struct plan *pl = r->plan;
        plan_fields(&p.fields, r, d->uuid, "define", r->reverted ? "revert" : plan_verdict_to_string(r->verdict));
        if (r->stale_mark) {
                log_fields_add(&p.fields, "PCINUMA_STALE_MARK", "%s", r->stale_mark);
                metrics_stale_mark(m->metrics, "define");
        }
        /* A device the mark cannot place for migration (the policy's own
         * migration: refuse needs no word). */
        _cleanup_free_ char *not_migratable = NULL;
        if (r->verdict == PLAN_APPLY && r->settings.migration_same_topology && !mark_migratable(pl, d, &not_migratable))
                log_fields_add(&p.fields, "PCINUMA_NOT_MIGRATABLE", "%s", not_migratable);

        redefine_decide(r, NULL, &dec);
        remember(m, r, &dec);
        p.redefine = dec.redefine;
        p.out_xml = TAKE_PTR(dec.out_xml);
        p.summary = TAKE_PTR(dec.summary);
        p.prio = dec.prio;
        *ret = p;
}

void manager_forget_domain(void *userdata, const char *uuid) {
        struct manager *m = userdata;
        if (recheck_cache_forget(&m->cache, uuid))
                log_msg(LOG_DEBUG, "Domain %s is no longer defined; forgotten", uuid);
}

void manager_persistent_all(void *userdata, const struct wproto_domains *d) {
        struct manager *m = userdata;
        restart_set_persistent(&m->restarts, d->persistent, d->n);
        log_msg(LOG_DEBUG, "libvirt holds %zu persistent domains", m->restarts.n_persistent);
}

void manager_persistent_one(void *userdata, const char *uuid, bool persistent) {
        struct manager *m = userdata;
        restart_set_one(&m->restarts, uuid, persistent, now_usec(CLOCK_MONOTONIC));
        if (persistent)
                unpark_uuid(m, uuid);
}

void manager_persistence_lost(void *userdata) {
        struct manager *m = userdata;
        restart_forget_persistence(&m->restarts);
        unpark_uuid(m, NULL);
}

void manager_plan_restart(void *userdata, const char *uuid, const char *xml, size_t len,
                                 struct redefine_plan *ret) {
        struct manager *m = userdata;
        struct redefine_plan p = { .prio = LOG_INFO };
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;

        if (engine_plan(xml, len, m->hostmap, m->policy, NULL, &r, &err) < 0) {
                log_fields_add(&p.fields, "PCINUMA_UUID", "%s", uuid);
                p.summary = xasprintf("its live XML cannot be planned: %s", err);
                p.prio = LOG_WARNING;
                *ret = p;
                return;
        }
        const struct domain *d = r->base;
        plan_fields(&p.fields, r, uuid, "restart", plan_verdict_to_string(r->verdict));
        const struct plan *pl = r->plan;

        if (!d->uuid || strcasecmp(d->uuid, uuid) != 0) {
                p.summary = xasprintf("its live XML names another UUID (%s)", d->uuid ? d->uuid : "none");
                p.prio = LOG_WARNING;
        } else if (r->verdict == PLAN_APPLY && !r->already_planned) {
                p.redefine = true;
                p.out_xml = xstrdup(r->xml);
                p.summary = xasprintf("%s", r->mismatch ? r->mismatch : "its layout differs from the plan");
                restart_note_own(&m->restarts, uuid, now_usec(CLOCK_MONOTONIC));
        } else if (r->verdict == PLAN_APPLY)
                p.summary = xstrdup("it runs its plan already");
        else if (r->verdict == PLAN_REFUSED) {
                p.summary = xasprintf("the policy refuses its plan now: %s", pl->reason ? pl->reason : "refused");
                p.prio = LOG_WARNING;
        } else
                p.summary = xasprintf("there is nothing to plan now (%s)", plan_verdict_to_string(r->verdict));
        *ret = p;
}

void manager_restart_done(void *userdata, const struct wproto_restarted *r) {
        struct manager *m = userdata;
        restart_done(&m->restarts, r);
        if (r->outcome == WPROTO_OUTCOME_RESTARTED || r->outcome == WPROTO_OUTCOME_FALLBACK)
                metrics_restart(m->metrics, r->outcome == WPROTO_OUTCOME_RESTARTED);
        /* Now its persistent definition, if any, gets its plan. */
        if (m->watcher)
                watcher_link_recheck_domain(m->watcher, r->uuid);
}

/* The engine: parse, resolve the policy, undo an old mark, plan and
 * rewrite; the reports of its result are report.c's.  Whether an old mark
 * still describes the plan is the mark module's (mark_matches()).  Pure:
 * buffers in, buffers out. */
#include "engine.h"

#include <strings.h>

#include "mark.h"
#include "migrate.h"
#include "nccltopo.h"
#include "rewrite.h"

struct engine_result *engine_result_free(struct engine_result *r) {
        if (!r)
                return NULL;
        free(r->xml);
        plan_free(r->plan);
        domain_free(r->base);
        free(r->policy_origin);
        free(r->revert_warning);
        free(r->mismatch);
        free(r->stale_mark);
        free(r);
        return NULL;
}

/* nccl_topology: the guest's NCCL topology file, as the -fw_cfg argument
 * the rewriter adds (docs/guest.md).  The CPU identity goes in only when
 * the guest sees the host's CPU; otherwise NCCL reads the guest's own. */
static void plan_nccl_topology(struct plan *p, const struct domain *d, const struct hostmap *h) {
        if (!p->settings.nccl_topology) {
                p->nccl_note = xstrdup("NCCL topology file: not given to the guest (nccl_topology is off)");
                return;
        }
        struct nccltopo_cpu cpu;
        const struct nccltopo_cpu *cp = nccltopo_guest_cpu(d, h, &cpu);
        _cleanup_free_ char *xml = NULL, *why = NULL;
        int r = nccltopo_guest(p, d, h, cp, &xml, &why);
        if (r != 0) {
                /* A domain without GPUs or RDMA NICs needs no word about it. */
                if (r == NCCLTOPO_NOT_PLACED)
                        p->nccl_note = xasprintf("NCCL topology file: not given to the guest: %s", why);
                return;
        }
        p->nccl_arg = nccltopo_fwcfg_arg(xml, &why);
        if (!p->nccl_arg) {
                p->nccl_note = xasprintf("NCCL topology file: not given to the guest: %s", why);
                *GROW(p->warnings, p->n_warnings) = xstrdup(p->nccl_note);
                return;
        }
        p->nccl_note = xasprintf("NCCL topology file: given to the guest as fw_cfg %s (%zu bytes; "
                                 "NCCL_TOPO_FILE=/sys/firmware/qemu_fw_cfg/by_name/%s/raw)",
                                 NCCLTOPO_FWCFG_NAME, strlen(p->nccl_arg) - strlen(NCCLTOPO_FWCFG_PREFIX),
                                 NCCLTOPO_FWCFG_NAME);
}

/* The settings that apply to the domain (cur: as it came in): the forced
 * mode's defaults, or the policy's rule for it. */
static void engine_settings(struct engine_result *res, const struct domain *cur, const struct policy *pol,
                            const enum policy_mode *forced) {
        if (forced) {
                /* The feature switches keep their defaults. */
                res->settings = policy_settings_default(*forced);
                res->policy_origin = xstrdup("command line");
                return;
        }
        struct policy_subject subj = {
                .name = cur->name,
                .uuid = cur->uuid,
                .tag = cur->policy_tag,
                .requested = cur->requested_policy,
        };
        policy_resolve(pol, &subj, &res->settings, &res->policy_origin);
}

/* Each hostdev names a distinct host device: more than the host has
 * cannot all be placed, and would only make the plan's pairwise work grow
 * with the input.  Checked before anything pairs devices. */
static int engine_check_capacity(const struct engine_result *res, const struct hostmap *h, char **ret_error) {
        if (res->settings.mode == POLICY_OFF)
                return 0;
        size_t n_host = hostmap_n_assignable(h);
        if (res->base->n_hostdevs > n_host)
                return set_error(ret_error, -E2BIG,
                                 "the domain has %zu host devices (hostdevs), more than this host has to give "
                                 "(%zu PCI functions that are not bridges, and mdevs): it names devices this host "
                                 "does not have; refused before planning, nothing was changed",
                                 res->base->n_hostdevs, n_host);
        return 0;
}

/* The domain as it was before any earlier plan: the old mark read into
 * *old (before the revert takes it out; the revert reads it the same way,
 * and refuses what this refuses) and undone in res->base; then its
 * backing resolved on h. */
static int engine_unplan(struct engine_result *res, const struct domain *cur, const struct hostmap *h, struct mark *old,
                         char **ret_error) {
        int r;
        if (cur->mark) {
                r = mark_parse(cur->mark, cur->devices, old, ret_error);
                if (r < 0)
                        return r;
                r = rewrite_revert(res->base, &res->revert_warning, ret_error);
                if (r < 0)
                        return r;
        }
        if (res->settings.mode != POLICY_OFF) {
                /* Bad backing only matters when there is something to place;
                 * otherwise the explanation just shows less. */
                _cleanup_free_ char *backing_error = NULL;
                r = domain_resolve_backing(res->base, h, &backing_error);
                if (r < 0 && res->base->n_hostdevs > 0)
                        return set_error(ret_error, r, "%s", backing_error);
        }
        return 0;
}

/* The plan for res->base, within the request's work budget. */
static int engine_run_planner(struct engine_result *res, const struct hostmap *h, const struct policy *pol,
                              char **ret_error) {
        struct planner_options opts = {
                .variant_drivers = pol ? pol->variant_drivers : NULL,
                .n_variant_drivers = pol ? pol->n_variant_drivers : 0,
        };
        int r = planner_run_opts(res->base, h, &res->settings, &opts, &res->plan);
        if (r < 0)
                return set_error(ret_error, r, "planner failed");
        if (work_exhausted(&res->work))
                return work_error(&res->work, ret_error);
        res->verdict = res->plan->verdict;
        if (res->verdict == PLAN_APPLY)
                plan_nccl_topology(res->plan, res->base, h);
        return 0;
}

/* Nothing to plan (UNCHANGED, SKIP): the input reverted when it carried a
 * mark, else verbatim. */
static int engine_keep(struct engine_result *res, const struct domain *cur, const char *xml, size_t len,
                       char **ret_error) {
        if (!cur->mark) {
                res->xml = xstrndup(xml, len);
                return 0;
        }
        int r = domain_format(res->base, &res->xml);
        if (r < 0)
                return set_error(ret_error, r, "cannot format XML");
        res->reverted = res->changed = true;
        return 0;
}

/* How the input differs from the plan: where the devices sit first; when
 * they sit as planned, which part of the mark is stale (or that it has
 * none, or that its controllers differ). */
static void engine_mismatch(struct engine_result *res, const struct domain *cur, const struct mark *old) {
        const char *stale = res->stale_mark;
        res->mismatch = planner_mismatch(cur, res->base, res->plan);
        if (!res->mismatch && !cur->mark)
                res->mismatch = xstrdup("the pcinuma mark is missing");
        else if (!res->mismatch && stale)
                res->mismatch = xasprintf("the pcinuma mark is stale (written for policy %s): %s",
                                          old->policy ? old->policy : "none", stale);
        else if (!res->mismatch)
                res->mismatch = xasprintf("its PCI controllers are not the plan's (its pcinuma mark, written for "
                                          "policy %s, is)", old->policy ? old->policy : "none");
}

/* Rewrite: the plan applied to a fresh copy of res->base (which stays the
 * unplanned domain the plan's indexes refer to), the mark written; then
 * the check that what pcinuma writes it can read again (the next start's
 * hook, the watcher): a domain at the limits that the plan takes past
 * them is refused, not written. */
static int engine_rewrite(struct engine_result *res, const struct hostmap *h, char **ret_error) {
        _cleanup_domain_ struct domain *out = NULL;
        int r = domain_copy(res->base, &out, ret_error);
        if (r < 0)
                return r;
        out->work = &res->work;
        /* What migration needs in the mark (migrate.h). */
        migrate_annotate(res->plan, res->base, h);
        r = rewrite_apply(out, res->plan, ret_error);
        if (r < 0)
                return r;
        r = domain_format(out, &res->xml);
        if (r < 0)
                return set_error(ret_error, r, "cannot format XML");
        _cleanup_free_ char *too_big = NULL;
        r = domain_check_limits(res->xml, strlen(res->xml), &too_big);
        if (r < 0)
                return set_error(ret_error, r, "the planned domain would be beyond what pcinuma reads: %s; "
                                 "refused, nothing was changed", too_big);
        res->changed = true;
        return 0;
}

/* APPLY: the input verbatim when its mark describes the plan and its
 * devices sit as planned, else rewritten. */
static int engine_apply(struct engine_result *res, const struct domain *cur, const struct mark *old,
                        const struct hostmap *h, const char *xml, size_t len, char **ret_error) {
        /* Only the topology is compared, not the policy the mark names: a
         * policy change that places every device where it is (another mode
         * with the same outcome, a renamed rule) must not redefine the
         * domain (docs/operations.md, "What a change rechecks"). */
        res->stale_mark = cur->mark ? mark_mismatch(old, res->plan, res->base, cur) : NULL;
        if (cur->mark && !res->stale_mark && planner_matches(cur, res->base, res->plan)) {
                res->xml = xstrndup(xml, len);
                res->already_planned = true;
                return 0;
        }
        engine_mismatch(res, cur, old);
        return engine_rewrite(res, h, ret_error);
}

int engine_plan(const char *xml, size_t len, const struct hostmap *h, const struct policy *pol,
                const enum policy_mode *forced, struct engine_result **ret, char **ret_error) {
        _cleanup_(engine_result_freep) struct engine_result *res = xcalloc(1, sizeof(*res));
        int r;

        res->work = work_new(WORK_BUDGET);
        r = domain_parse_on(xml, len, h, &res->base, ret_error);
        if (r < 0)
                return r;
        res->base->work = &res->work;

        /* The plan is always made for the domain as it was before any
         * earlier plan: the input, reverted.  That makes planning
         * idempotent and lets a changed host map re-plan from scratch.
         * The input as it is ('cur') is still needed, to compare with the
         * plan: a snapshot of its model, taken before the document is
         * reverted in place (one parse, no copy of the document).
         * Without a mark the two are the same. */
        _cleanup_domain_ struct domain *snapshot = NULL;
        if (res->base->mark)
                domain_snapshot(res->base, &snapshot);
        const struct domain *cur = snapshot ? snapshot : res->base;
        res->marked = cur->mark != NULL;

        engine_settings(res, cur, pol, forced);
        r = engine_check_capacity(res, h, ret_error);
        if (r < 0)
                return r;
        _cleanup_(mark_done) struct mark old = {0};
        r = engine_unplan(res, cur, h, &old, ret_error);
        if (r < 0)
                return r;
        r = engine_run_planner(res, h, pol, ret_error);
        if (r < 0)
                return r;
        switch (res->verdict) {
        case PLAN_REFUSED:
                break;
        case PLAN_UNCHANGED:
        case PLAN_SKIP:
                r = engine_keep(res, cur, xml, len, ret_error);
                break;
        case PLAN_APPLY:
                r = engine_apply(res, cur, &old, h, xml, len, ret_error);
                break;
        }
        if (r < 0)
                return r;
        *ret = TAKE_PTR(res);
        return 0;
}

int engine_revert(const char *xml, size_t len, char **ret_xml, bool *ret_changed, char **ret_warning, char **ret_error) {
        struct work work = work_new(WORK_BUDGET);
        return engine_revert_budget(xml, len, &work, ret_xml, ret_changed, ret_warning, ret_error);
}

int engine_revert_budget(const char *xml, size_t len, struct work *work, char **ret_xml, bool *ret_changed,
                         char **ret_warning, char **ret_error) {
        _cleanup_domain_ struct domain *d = NULL;
        int r = domain_parse(xml, len, &d, ret_error);
        if (r < 0)
                return r;
        d->work = work;
        if (!d->mark) {
                *ret_xml = xstrndup(xml, len);
                *ret_changed = false;
                return 0;
        }
        r = rewrite_revert(d, ret_warning, ret_error);
        if (r < 0)
                return r;
        r = domain_format(d, ret_xml);
        if (r < 0)
                return set_error(ret_error, r, "cannot format XML");
        *ret_changed = true;
        return 0;
}

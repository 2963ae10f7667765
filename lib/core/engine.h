/* The engine, the one pipeline every domain XML goes through: parse ->
 * decide (the policy, the limits) -> plan or map -> rewrite -> check, over
 * one domain model (docs/design.md §2's pipeline).  engine_plan() takes a
 * domain XML, the host map and the policy and gives the planned XML with
 * the plan it was made from (report.h says it in words); engine_revert()
 * undoes a mark; engine_incoming() (engine-incoming.c) is the
 * destination's decision on an incoming migration.  Used by pcinumactl and
 * the daemon alike.  Pure: no I/O. */
#pragma once

#include <stdbool.h>

#include "domain.h"
#include "hostmap.h"
#include "migrate.h"
#include "planner.h"
#include "policy.h"

struct engine_result {
        enum plan_verdict verdict;
        bool changed;                 /* xml differs from the input */
        bool already_planned;         /* the input carried a mark that matches the plan */
        bool marked;                  /* the input carried a pcinuma mark (planned before) */
        bool reverted;                /* the input's mark was undone (policy off, not eligible any more) */
        char *xml;                    /* the output; the input verbatim when unchanged; NULL when refused */
        struct plan *plan;
        struct domain *base;          /* the domain the plan was made for (the input, reverted) */
        struct policy_settings settings;
        char *policy_origin;          /* where the policy came from */
        char *revert_warning;         /* what the in-memory revert could not restore exactly, or NULL */
        char *mismatch;               /* APPLY and not already planned: how the input differs from the plan */
        char *stale_mark;             /* the input's mark does not describe the plan: which part (mark_mismatch()), or NULL */
        struct work work;             /* the request's work budget (work.h) and what it spent */
};

/* Plan xml[0..len).  The policy comes from 'forced' when non-NULL, else
 * from pol (rules, default) for this domain.  Bad input (malformed XML,
 * nodesets naming host nodes that do not exist, a broken mark) is an
 * error: -EINVAL with *ret_error.  So is input that asks for more work
 * than the host bounds (docs/security.md, "Bounded work"): -E2BIG for a
 * domain with more hostdevs than the host has devices to give
 * (hostmap_n_assignable(), checked before planning) or a request that
 * runs out of its budget (WORK_BUDGET).  A refusal is a result with
 * verdict PLAN_REFUSED.  The caller owns *ret (engine_result_free). */
int engine_plan(const char *xml, size_t len, const struct hostmap *h, const struct policy *pol,
                const enum policy_mode *forced, struct engine_result **ret, char **ret_error);

/* Undo the pcinuma mark of xml[0..len).  *ret_xml is the input verbatim
 * (and *ret_changed false) when there is no mark.  Within a budget of
 * WORK_BUDGET, as engine_plan(). */
int engine_revert(const char *xml, size_t len, char **ret_xml, bool *ret_changed, char **ret_warning, char **ret_error);

/* The same within the budget *work (the caller's; it says what was spent
 * afterwards): for tests and benchmarks. */
int engine_revert_budget(const char *xml, size_t len, struct work *work, char **ret_xml, bool *ret_changed,
                         char **ret_warning, char **ret_error);

struct engine_result *engine_result_free(struct engine_result *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct engine_result *, engine_result_free)
#define _cleanup_engine_result_ _cleanup_(engine_result_freep)

enum incoming_verdict {
        INCOMING_PASS,                  /* no mark (or XML that does not parse): unchanged */
        INCOMING_ACCEPT,                /* mapped: xml is the rewritten domain */
        INCOMING_REFUSE_MARKED,         /* the mark says migratable="no" */
        INCOMING_REFUSE,                /* reason says why */
};

struct incoming_result {
        enum incoming_verdict verdict;
        char *xml;                      /* PASS, ACCEPT: the hook's stdout */
        char *reason;                   /* REFUSE: why, its first line a summary, no final newline (see
                                         * migrate_map()); REFUSE_MARKED: the mark's migratable-reason, or NULL */
        char *policy;                   /* the mark's policy, when it is a mode name; or NULL */
        char *uuid;                     /* the domain's, or NULL */
        struct migrate_map map;         /* ACCEPT: what went where */
        struct work work;               /* the request's work budget (work.h) and what it spent */
};
void incoming_result_done(struct incoming_result *r);

/* The destination's migrate-begin decision on xml under this host's map h
 * and policy pol (whose "migration" setting for the domain decides): parse
 * (a marked domain beyond the parser's limits is refused, an unmarked one
 * passes); decide (the mark's migratable, the policy, no more hostdevs than
 * this host can give (migrate_capacity()) before any pairwise work, the
 * mark parsed and its records the domain's hostdevs, one each, its
 * fingerprint version this pcinuma's); map (migrate_map_host(), within
 * MIGRATE_MAP_BUDGET and the request's WORK_BUDGET); rewrite the hostdev
 * sources and the mark (rewrite_migrate()); check (the result parsed again
 * must name the mapped devices, in its sources and its mark, or it is
 * refused).  The devices other domains use (in_use, NULL: unknown) are
 * given only when no free ones in the same positions are (the map's
 * used_by says so). */
void engine_incoming(const char *xml, size_t len, const struct hostmap *h, const struct policy *pol,
                     const struct migrate_in_use *in_use, struct incoming_result *ret);

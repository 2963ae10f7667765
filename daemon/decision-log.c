/* A hook decision's journal entry: its MESSAGE_ID, priority, message and
 * PCINUMA_* fields (each device's node and cell, the path fidelity),
 * built apart from being sent so that the memo of prepare answers can
 * keep it with a remembered answer. */
#include "manager-internal.h"

static const char *event_message_id(const struct decision *d) {
        bool prepare = streq(d->phase, "prepare");
        switch (d->verdict) {
        case DECIDE_ALLOW:
                return streq(d->phase, "migrate") ? PCINUMA_MID_MIGRATION_ACCEPTED : PCINUMA_MID_START_ALLOWED;
        case DECIDE_WARN:
                return PCINUMA_MID_START_WARNED;
        case DECIDE_RESTART:
                return PCINUMA_MID_START_RESTARTING;
        case DECIDE_REFUSE:
                return prepare ? PCINUMA_MID_START_REFUSED : PCINUMA_MID_MIGRATION_REFUSED;
        case DECIDE_PASS:
        default:
                return PCINUMA_MID_HOOK_PASSED;
        }
}

/* PCINUMA_FIDELITY: how many device pairs keep their host path type in
 * the guest ("same=120 closer=0 farther=0"; docs/operations.md).  The
 * plan's owner computed the report (planner_fidelity()) beforehand. */
void log_fidelity(struct log_fields *f, const struct plan *p) {
        if (!p)
                return;
        if (!p->n_pairs)
                return;
        if (p->n_unknown)
                log_fields_add(f, "PCINUMA_FIDELITY", "same=%u closer=%u farther=%u unknown=%u", p->n_same, p->n_closer,
                               p->n_farther, p->n_unknown);
        else
                log_fields_add(f, "PCINUMA_FIDELITY", "same=%u closer=%u farther=%u", p->n_same, p->n_closer, p->n_farther);
        /* Each pair that does not keep its host path type, by name: that is
         * what an admin looks for in the journal.  Every pair, kept or not,
         * is in `pcinumactl plan --format explain|json`.  At most
         * LOG_PAIRS_MAX of them, and how many more, so one decision stays
         * one small journal entry whatever the domain holds. */
        enum { LOG_PAIRS_MAX = 32 };
        unsigned logged = 0, more = 0;
        for (size_t i = 0; i < p->n_pairs; i++) {
                const struct plan_pair *pp = &p->pairs[i];
                if (pp->host == pp->guest)
                        continue;
                if (logged == LOG_PAIRS_MAX) {
                        more++;
                        continue;
                }
                logged++;
                log_fields_add(f, "PCINUMA_PAIR_CHANGED", "%s %s host=%s guest=%s", p->devices[pp->a].name,
                               p->devices[pp->b].name, plan_path_to_string(pp->host), plan_path_to_string(pp->guest));
        }
        if (more)
                log_fields_add(f, "PCINUMA_PAIR_CHANGED_MORE", "%u", more);
}

void decision_log_done(struct decision_log *l) {
        log_fields_done(&l->f);
        free(l->message);
        *l = (struct decision_log) {0};
}

void decision_log_emit(const struct decision_log *l) {
        log_event(l->prio, l->message_id, &l->f, "%s", l->message);
}

void decision_log_build(const struct decision *d, struct decision_log *ret) {
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", d->domain);
        if (d->uuid)
                log_fields_add(&f, "PCINUMA_UUID", "%s", d->uuid);
        log_fields_add(&f, "PCINUMA_PHASE", "%s", d->phase);
        if (d->has_mode)
                log_fields_add(&f, "PCINUMA_POLICY", "%s", policy_mode_to_string(d->mode));
        log_fields_add(&f, "PCINUMA_VERDICT", "%s", decide_verdict_to_string(d->verdict));
        const struct plan *p = d->result ? d->result->plan : NULL;
        for (size_t i = 0; p && i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                log_fields_add(&f, "PCINUMA_DEVICE", "%s", pd->name);
                log_fields_add(&f, "PCINUMA_HOST_NODE", "%d", pd->host_node);
                log_fields_add(&f, "PCINUMA_GUEST_CELL", "%d", pd->cell);
        }
        log_fidelity(&f, d->result ? d->result->plan : NULL);
        if (d->result && d->result->stale_mark)
                log_fields_add(&f, "PCINUMA_STALE_MARK", "%s", d->result->stale_mark);
        for (size_t i = 0; i < d->n_remap; i++)
                log_fields_add(&f, "PCINUMA_REMAP", "%s", d->remap[i]);
        for (size_t i = 0; i < d->n_shared; i++)
                log_fields_add(&f, "PCINUMA_SHARED_DEVICE", "%s", d->shared[i]);

        /* The message: the first line of what the hook prints, without
         * the "pcinuma: " prefix, or a summary. */
        _cleanup_free_ char *first = NULL;
        if (d->message) {
                const char *s = d->message;
                if (strncmp(s, "pcinuma: ", 9) == 0)
                        s += 9;
                first = xstrndup(s, strcspn(s, "\n"));
        }
        int prio = d->verdict == DECIDE_REFUSE || d->n_shared                   ? LOG_WARNING
                   : d->verdict == DECIDE_WARN || d->verdict == DECIDE_RESTART ? LOG_NOTICE
                                                                                 : LOG_INFO;
        char *message;
        if (first)
                message = TAKE_PTR(first);
        else if (d->verdict == DECIDE_ALLOW)
                message = xasprintf("Domain %s may start: %s", d->domain,
                                    d->result && d->result->already_planned ? "its PCI topology matches the NUMA plan"
                                    : d->result && d->result->plan->reason ? d->result->plan->reason : "nothing to place");
        else {
                prio = LOG_DEBUG;
                message = xasprintf("Domain %s: %s %s passed", d->domain, d->phase, d->subphase);
        }
        *ret = (struct decision_log) { .prio = prio, .message_id = event_message_id(d), .f = f, .message = message };
}

void log_decision(const struct decision *d) {
        struct decision_log l;
        decision_log_build(d, &l);
        decision_log_emit(&l);
        decision_log_done(&l);
}

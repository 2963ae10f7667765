/* The watcher's redefine decision (redefine.h).  Pure. */
#include "redefine.h"

#include <syslog.h>

#include "report.h"

void redefine_decision_done(struct redefine_decision *d) {
        free(d->out_xml);
        free(d->summary);
        *d = (struct redefine_decision) {0};
}

static char *planned_summary(const struct engine_result *r) {
        const struct plan *pl = r->plan;
        const char *mode = policy_mode_to_string(r->settings.mode);
        if (r->reverted)
                return xasprintf("the pcinuma topology was undone (policy %s%s%s)", mode,
                                 pl->reason ? ": " : "", pl->reason ? pl->reason : "");
        size_t moved = 0;
        for (size_t i = 0; i < pl->n_devices; i++)
                moved += pl->devices[i].action == PLAN_MOVE;
        /* Where each device went is in the PCINUMA_DEVICE /
         * PCINUMA_GUEST_CELL fields. */
        /* A domain planned before: which part of its mark was stale
         * (also in PCINUMA_STALE_MARK). */
        return xasprintf("planned under policy %s: %zu device%s on %zu expander bus%s%s%s",
                         mode, moved, moved == 1 ? "" : "s", pl->n_pxbs, pl->n_pxbs == 1 ? "" : "es",
                         r->stale_mark ? "; its mark was stale: " : "", r->stale_mark ? r->stale_mark : "");
}

void redefine_decide(const struct engine_result *r, const char *error, struct redefine_decision *ret) {
        struct redefine_decision d = { .prio = LOG_DEBUG };
        if (!r) {
                d.prio = LOG_WARNING;
                d.summary = xasprintf("cannot be planned: %s; definition left as it is", error);
                *ret = d;
                return;
        }
        const struct plan *pl = r->plan;
        if (r->changed && r->xml) {
                d.redefine = true;
                d.out_xml = xstrdup(r->xml);
                d.summary = planned_summary(r);
        } else if (r->verdict == PLAN_REFUSED) {
                d.prio = LOG_NOTICE;
                d.summary = xasprintf("not planned: %s (policy %s); its starts will be refused", pl->reason ? pl->reason : "refused",
                                      policy_mode_to_string(r->settings.mode));
        } else if (r->verdict == PLAN_SKIP) {
                d.prio = LOG_NOTICE;
                d.summary = xasprintf("left untouched: %s", pl->reason ? pl->reason : "not eligible");
        }
        /* What the plan warns about (a domain left untouched, devices
         * placed off their node, a window too small) and why the devices
         * that stay on pcie.0 could not be placed (report_warnings(), each
         * cause once with the devices it concerns) go with it, loud when
         * nothing else is said. */
        if (r->verdict != PLAN_REFUSED) {
                _cleanup_free_ char *causes = NULL;
                bool not_placed = report_warnings(r, &causes);
                if (pl->n_warnings || *causes) {
                        /* A skip's own warning says what its summary says:
                         * it replaces the summary. */
                        bool skip = r->verdict == PLAN_SKIP && !d.redefine;
                        struct strbuf b = {0};
                        if (d.summary && !skip)
                                strbuf_append(&b, d.summary);
                        for (size_t i = 0; i < pl->n_warnings; i++)
                                strbuf_printf(&b, "%s%s%s", b.len ? "; " : "", skip ? "" : "warning: ", pl->warnings[i]);
                        if (not_placed)
                                strbuf_printf(&b, "%s" REPORT_NOT_PLACED, b.len ? "; warning: " : "");
                        for (char *line = causes, *nl; *line; line = nl + 1) {
                                nl = strchr(line, '\n');
                                if (!nl)
                                        nl = line + strlen(line) - 1;
                                strbuf_printf(&b, "; %.*s", (int) (nl - line), line);
                        }
                        free(d.summary);
                        d.summary = strbuf_steal(&b);
                        if (!d.redefine)
                                d.prio = LOG_WARNING;
                }
        }
        *ret = d;
}

bool redefine_said_before(const struct redefine_decision *d, const char *last, bool first) {
        return !d->redefine && d->summary && !first && streq_ptr(last, d->summary) && d->prio < LOG_DEBUG;
}

/* The notes a plan carries, which every step of the planner adds to: its
 * warnings, its causes (each once, however many devices it concerns) and
 * a device's reason.  A file of its own so that the steps' files
 * (planner-place.c, planner-layout.c, planner-features.c) and planner.c,
 * which calls them, do not call each other.  Pure, as the planner is. */
#include "planner-internal.h"

#include <stdarg.h>

_printf_(2, 3) void plan_add_warning(struct plan *p, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        *GROW(p->warnings, p->n_warnings) = xvasprintf(fmt, ap);
        va_end(ap);
}

/* The cause 'what', with its fix (NULL: none), added once however many
 * devices it concerns; returns its index in p->causes.  Only the last
 * CAUSES_LOOKBACK causes are compared: a cause recurs among few others
 * (the domain's, one per host node), and a domain of thousands of
 * hostdevs with a reason of their own each must not make planning
 * quadratic. */
#define CAUSES_LOOKBACK 64
int plan_add_cause(struct plan *p, bool domain, const char *fix, const char *what) {
        for (size_t i = p->n_causes; i-- > 0 && p->n_causes - i <= CAUSES_LOOKBACK;)
                if (streq(p->causes[i].what, what))
                        return (int) i;
        *GROW(p->causes, p->n_causes) = (struct plan_cause) {
                .what = xstrdup(what), .fix = fix ? xstrdup(fix) : NULL, .domain = domain,
        };
        return (int) p->n_causes - 1;
}

_printf_(2, 3) void plan_set_reason(struct plan_device *pd, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        free(pd->reason);
        pd->reason = xvasprintf(fmt, ap);
        va_end(ap);
}

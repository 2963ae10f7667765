/* A request's work budget (work-budget.h).  Pure. */
#include "work-budget.h"

#include <errno.h>
#include <inttypes.h>

#include "util.h"

bool work_spend(struct work *w, uint64_t n, const char *phase) {
        if (!w || !w->limit)
                return true;
        if (w->phase)
                return false;
        w->spent = n > UINT64_MAX - w->spent ? UINT64_MAX : w->spent + n;
        if (w->spent <= w->limit)
                return true;
        w->phase = phase ? phase : "?";
        return false;
}

bool work_exhausted(const struct work *w) {
        return w && w->phase;
}

int work_error(const struct work *w, char **ret_error) {
        return set_error(ret_error, -E2BIG,
                         "the request needs more work than pcinuma gives one (%" PRIu64 " steps, WORK_BUDGET) in %s: "
                         "the input is built to be expensive (or far larger than any real domain); refused, nothing "
                         "was changed", w ? w->limit : 0, w && w->phase ? w->phase : "?");
}

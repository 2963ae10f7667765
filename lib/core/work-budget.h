/* A request's work budget (docs/security.md, "Bounded work"):
 * every engine request (plan, revert, an incoming migration) gets one, and
 * every phase whose cost can grow faster than its input (pairs of devices,
 * the migration's search, lookups of the mark's records in the domain)
 * spends from it, so that no input, however built, keeps pcinumad busy
 * for long.  Inputs are bounded first (DOMAIN_XML_MAX, the host's device
 * count, the mark's record limits); the budget is the backstop that holds
 * whatever a phase does.  When it runs out the phase stops, and the
 * request is refused with a message naming the phase; nothing is changed.
 *
 * A unit is about 10 ns of CPU on the project's 2-core test machine: one
 * step of an inner loop (a string comparison, a lookup, visiting one XML
 * node); a step that costs more spends more (WORK_ADDRESS).  WORK_BUDGET
 * units take about 50 ms, and the largest real requests we know spend a
 * few percent of it (tests/bench "worst-input", docs/performance.md).
 * Pure. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* The units one request may spend. */
#define WORK_BUDGET UINT64_C(4000000)

/* What visiting one XML node costs (its name compared), and reading a PCI
 * <address> (its attributes found and parsed): measured on the revert's
 * walks over <devices> (tests/bench "worst-input"). */
#define WORK_NODE 2
#define WORK_ADDRESS 25

struct work {
        uint64_t limit;                 /* 0: no limit */
        uint64_t spent;
        const char *phase;              /* where it ran out (a static string), or NULL */
};

/* A budget of 'limit' units (0: none). */
static inline struct work work_new(uint64_t limit) {
        return (struct work) { .limit = limit };
}

/* Spend n units in 'phase' (a static string naming it for the message).
 * true while the budget holds; false once it is spent (and from then on,
 * whatever is spent next).  w NULL: no budget, always true. */
bool work_spend(struct work *w, uint64_t n, const char *phase);

/* Has w run out?  (NULL: never.) */
bool work_exhausted(const struct work *w);

/* -E2BIG with *ret_error saying that the request needed more work than
 * one gets, in which phase, and that nothing was changed. */
int work_error(const struct work *w, char **ret_error);

/* The planner's private interface: what its own files share, included by
 * them and by nothing else (planner.h is the public header).  A plan is
 * made in steps, each in the file of its concern:
 *
 *   planner.c           the entry points (planner_run_opts()), the plan's
 *                       life (plan_free()), what the host map says of each
 *                       device, eligibility, and the order of the steps
 *                       (plan_domain())
 *   planner-notes.c     the notes every step adds to the plan: warnings,
 *                       causes, a device's reason
 *   planner-place.c     placement: each device's guest cell, and what the
 *                       moves share (slots, I/O space) (docs/design.md §6)
 *   planner-layout.c    layout: expander buses, the port tree, controller
 *                       indexes, pcie.0 slots, bus numbers, guest BDFs,
 *                       and the degrade order when it does not fit
 *                       (docs/design.md §7)
 *   planner-features.c  the feature switches beyond placement: distances,
 *                       the 64-bit MMIO window, managed, GPUDirect cliques
 *   planner-fidelity.c  path types and the path fidelity report
 *   planner-match.c     matching: is a domain laid out as a plan says, and
 *                       where not
 *
 * A step that completes the plan (refused, skipped, unchanged) returns
 * true with p->verdict and p->reason set.  Inside the layout, each phase
 * that can run out of a guest limit returns -ENOSPC with p->reason set;
 * the other phases cannot fail.  Pure, as the planner is: no I/O, no
 * globals. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "planner.h"

#define BUSNR_TOP 255   /* exclusive: libvirt accepts busNr 1..254 */

/* --- planner-notes.c: the plan's notes ------------------------------------ */

/* Add a warning to p. */
_printf_(2, 3) void plan_add_warning(struct plan *p, const char *fmt, ...);

/* Add the cause 'what' (fix: what to change, or NULL) to p once, however
 * many devices it concerns; returns its index in p->causes. */
int plan_add_cause(struct plan *p, bool domain, const char *fix, const char *what);

/* Set (replace) pd's reason. */
_printf_(2, 3) void plan_set_reason(struct plan_device *pd, const char *fmt, ...);

/* A PCI address as one number, ordered as the address. */
static inline uint64_t plan_pack_addr(const struct pci_addr *a) {
        return (uint64_t) a->domain << 16 | (uint64_t) a->bus << 8 | (uint64_t) a->slot << 3 | a->func;
}

/* The guest device a moved device becomes part of: under paths, the
 * functions of one host device (same host bus and slot) are one unit and
 * share a port; otherwise every device is its own unit.  Never 0.  For
 * the layout's port tree and the I/O window count. */
static inline uint64_t plan_unit_key(const struct domain *d, const struct plan *p, size_t i) {
        const struct domain_hostdev *hd = &d->hostdevs[p->devices[i].hostdev];
        if (p->settings.topology == POLICY_TOPOLOGY_PATHS && hd->kind == DOMAIN_HOSTDEV_PCI && p->devices[i].known)
                return (uint64_t) hd->host.domain << 16 | (uint64_t) hd->host.bus << 8 | (uint64_t) hd->host.slot << 3 | 1u << 2;
        return UINT64_C(1) << 62 | i;
}

/* --- planner-place.c: placement ------------------------------------------- */

/* Decide each device's cell and check what the moves share (slots, I/O
 * space).  True when the plan ends here: refused, or no device moves. */
bool plan_placement(const struct domain *d, const struct hostmap *h, struct plan *p);

/* Policy preferred: one warning per host node and cell for the devices
 * placed on a cell their node does not back. */
void plan_warn_not_local(const struct domain *d, const struct hostmap *h, struct plan *p);

/* --- planner-layout.c: layout --------------------------------------------- */

/* Lay out the expander buses and ports.  True when they do not fit (the
 * plan is complete: the moved devices are refused under the strict
 * policies, else stay, with a warning). */
bool plan_layout_fails(const struct domain *d, struct plan *p);

/* Forget the expander buses, root ports and pruning of a plan. */
void plan_clear_layout(struct plan *p);

/* --- planner-features.c: the feature switches ----------------------------- */

/* mirror_distances: <cell><distances> from the host SLIT. */
void plan_distances(const struct domain *d, const struct hostmap *h, struct plan *p);

/* mmio64: auto: the 64-bit MMIO window the devices need. */
void plan_mmio64(const struct domain *d, struct plan *p);

/* managed: auto: managed='no' for devices on a VFIO variant driver. */
void plan_managed(const struct domain *d, struct plan *p, const struct planner_options *o);

/* gpudirect_clique: auto: clique ids for the GPUs behind one host switch. */
void plan_cliques(const struct domain *d, const struct hostmap *h, struct plan *p);

/* The planner's placement (docs/design.md §6): the guest cell each
 * passthrough device goes to under the domain's policy, or why it is
 * refused or stays on pcie.0 (each cause once, docs/planner.md, "One line
 * per cause"), and the checks on what the moves share: a slot's function
 * 0, and the guest's I/O space.  Its entry point is plan_placement(); the
 * layout (planner-layout.c) then gives the moved devices their ports. */
#include "planner-internal.h"

#include <limits.h>

/* Smallest SLIT distance between 'node' and any node backing 'cell'; INT_MAX when unknown. */
static int cell_distance(const struct hostmap *h, const struct domain_cell *c, int node) {
        int best = INT_MAX;
        for (int n = bitmap_next(&c->host_nodes, 0); n >= 0; n = bitmap_next(&c->host_nodes, (unsigned) n + 1)) {
                int dist = hostmap_distance(h, node, n);
                if (dist >= 0 && dist < best)
                        best = dist;
        }
        return best;
}

static bool cell_on_socket(const struct hostmap *h, const struct domain_cell *c, int socket) {
        if (socket < 0)
                return false;
        for (int n = bitmap_next(&c->host_nodes, 0); n >= 0; n = bitmap_next(&c->host_nodes, (unsigned) n + 1))
                if (hostmap_node_socket(h, n) == socket)
                        return true;
        return false;
}

enum candidates {
        CAND_LOCAL,
        CAND_SOCKET,
        CAND_ANY,
};

/* Pick the best cell among the candidates of a kind: nearest by distance
 * (only for non-local kinds), then the fewest devices so far, then the
 * lowest id.  Returns the cell id or -1. */
static int pick_cell(const struct domain *d, const struct hostmap *h, int node, int socket,
                     enum candidates kind, const unsigned *load) {
        int best = -1, best_dist = INT_MAX;
        for (size_t i = 0; i < d->n_cells; i++) {
                const struct domain_cell *c = &d->cells[i];
                if (bitmap_isempty(&c->host_nodes))
                        continue;
                bool ok;
                switch (kind) {
                case CAND_LOCAL:
                        ok = bitmap_test(&c->host_nodes, (unsigned) node);
                        break;
                case CAND_SOCKET:
                        ok = cell_on_socket(h, c, socket);
                        break;
                case CAND_ANY:
                default:
                        ok = true;
                        break;
                }
                if (!ok)
                        continue;
                int dist = kind == CAND_LOCAL ? 0 : cell_distance(h, c, node);
                if (best < 0 || dist < best_dist ||
                    (dist == best_dist && load[i] < load[best])) {
                        best = (int) i;
                        best_dist = dist;
                }
        }
        return best;
}

static const char *no_node_reason(const struct plan_device *pd) {
        return pd->known ? "the host reports no NUMA node for it" : "it is not present on this host";
}

/* The fix for a device without a host node (no_node_reason()). */
static const char *no_node_fix(const struct plan_device *pd, bool strict) {
        if (!pd->known)
                return "check its <hostdev> source address ('pcinumactl host' lists this host's devices)";
        return strict ? "turn on NUMA reporting in the firmware (ACPI SRAT), or use policy preferred or legacy for this domain"
                      : "turn on NUMA reporting in the firmware (ACPI SRAT)";
}

/* No guest cell is backed by any host node: a domain-wide cause, said once
 * with the nodes its devices are on (docs/planner.md, "One line per
 * cause"). */
static int unpinned_cause(struct plan *p) {
        _cleanup_(bitmap_done) struct bitmap nodes = {0};
        for (size_t i = 0; i < p->n_devices; i++)
                if (p->devices[i].host_node >= 0)
                        bitmap_set(&nodes, (unsigned) p->devices[i].host_node);
        _cleanup_free_ char *list = bitmap_format(&nodes);
        _cleanup_free_ char *fix = xasprintf("pin each cell with <numatune><memnode cellid='C' nodeset='N'/> (its "
                                             "devices are on host node%s %s)", bitmap_count(&nodes) == 1 ? "" : "s", list);
        /* It says it all: no list of the cells after it (cells false). */
        return plan_add_cause(p, true, fix, "no guest cell is pinned to a host node");
}

/* The cause every device whose action is 'action' has, when they all
 * have the same one; else -1. */
static int shared_cause(const struct plan *p, enum plan_action action) {
        int cause = -1;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != action)
                        continue;
                if (pd->cause < 0 || (cause >= 0 && pd->cause != cause))
                        return -1;
                cause = pd->cause;
        }
        return cause;
}

/* The state place_devices' steps share. */
struct placement {
        unsigned *load;                         /* per cell: the devices placed in it so far */
        const struct plan_device **firsts;      /* topology paths: the first moved device of each root complex */
        size_t n_firsts;
        bool unpinned;                          /* no guest cell is backed by any host node */
        int unpinned_idx;                       /* that cause, made once when a device first has it
                                                 * (unpinned_cause() reads every device); -1: not yet */
};

static void placement_done(struct placement *pl) {
        free(pl->load);
        free(pl->firsts);
}

/* A device without a host node: refused under the strict policies
 * (require, socket), else it stays on pcie.0; either way with its cause.
 * Returns 1 when refused, else 0. */
static size_t place_nodeless(struct plan *p, struct plan_device *pd) {
        const char *mode = policy_mode_to_string(p->mode);
        bool strict = p->mode == POLICY_REQUIRE || p->mode == POLICY_SOCKET;
        size_t refused = 0;
        if (strict) {
                pd->action = PLAN_REFUSE;
                plan_set_reason(pd, "%s; policy %s needs a device with a NUMA node", no_node_reason(pd), mode);
                refused++;
        } else {
                pd->action = PLAN_STAY;
                plan_set_reason(pd, "%s; stays on pcie.0 (policy %s allows that)", no_node_reason(pd), mode);
        }
        pd->cause = plan_add_cause(p, false, no_node_fix(pd, strict), pd->reason);
        return refused;
}

/* The earlier device that device i goes with, or NULL.  topology paths:
 * a device goes where the first device of its host root complex went, so
 * they can share its pxb.  mirror_switches (cells): a device behind a
 * host switch goes where the first device behind that switch went, so the
 * two can share a guest switch (GPU + NIC for GPUDirect RDMA). */
static const struct plan_device *find_mate(const struct plan *p, size_t i, const struct placement *pl) {
        const struct plan_device *pd = &p->devices[i];
        const struct plan_device *mate = NULL;
        if (p->settings.topology == POLICY_TOPOLOGY_PATHS) {
                /* The first moved device of each root complex, in a short
                 * table: a scan of all earlier devices would make planning
                 * quadratic. */
                for (size_t k = 0; k < pl->n_firsts && !mate; k++)
                        if (pd->host_root >= 0 && pl->firsts[k]->host_root == pd->host_root &&
                            pl->firsts[k]->host_node == pd->host_node)
                                mate = pl->firsts[k];
                return mate;
        }
        for (size_t k = 0; k < i && !mate; k++) {
                const struct plan_device *o = &p->devices[k];
                if (o->action == PLAN_MOVE && o->host_node == pd->host_node && p->settings.mirror_switches &&
                    pd->has_host_switch && o->has_host_switch && pci_addr_eq(&o->host_switch, &pd->host_switch))
                        mate = o;
        }
        return mate;
}

/* The cell for a device with a host node, and its reason: its mate's
 * cell, else a local one, else (policies socket and preferred) one on its
 * socket, else (preferred) the nearest.  -1 when none fits. */
static int choose_cell(const struct domain *d, const struct hostmap *h, const struct plan *p, struct plan_device *pd,
                       const struct plan_device *mate, const unsigned *load) {
        int cell;
        if (mate)
                cell = mate->cell;
        else
                cell = pick_cell(d, h, pd->host_node, pd->host_socket, CAND_LOCAL, load);
        if (mate && p->settings.topology == POLICY_TOPOLOGY_PATHS) {
                plan_set_reason(pd, "%s; shares host root complex pci%04lx:%02lx with %s", mate->reason,
                           (unsigned long) pd->host_root >> 8, (unsigned long) pd->host_root & 0xff, mate->name);
        } else if (mate) {
                char sw[PCI_ADDR_STRLEN];
                plan_set_reason(pd, "%s; shares host switch %s with %s", mate->reason, pci_addr_format(&pd->host_switch, sw),
                           mate->name);
        } else if (cell >= 0) {
                plan_set_reason(pd, "local: cell %d is backed by host node %d", cell, pd->host_node);
        } else if (p->mode == POLICY_SOCKET || p->mode == POLICY_PREFERRED) {
                cell = pick_cell(d, h, pd->host_node, pd->host_socket, CAND_SOCKET, load);
                if (cell >= 0)
                        plan_set_reason(pd, "same socket: no cell is backed by host node %d; cell %d is on socket %d, nearest by distance",
                                   pd->host_node, cell, pd->host_socket);
                else if (p->mode == POLICY_PREFERRED) {
                        cell = pick_cell(d, h, pd->host_node, pd->host_socket, CAND_ANY, load);
                        if (cell >= 0)
                                plan_set_reason(pd, "nearest: no cell is backed by host node %d or socket %d; cell %d is the nearest by distance",
                                           pd->host_node, pd->host_socket, cell);
                }
        }
        return cell;
}

/* A device with a host node that no cell fits: it stays on pcie.0 under
 * policy preferred, else it is refused; either way with the cause (the
 * domain-wide one when no cell is pinned).  Returns 1 when refused, else 0. */
static size_t place_nowhere(struct plan *p, struct plan_device *pd, struct placement *pl) {
        if (p->mode == POLICY_PREFERRED) {
                pd->action = PLAN_STAY;
                plan_set_reason(pd, "no guest cell is backed by any host node; stays on pcie.0 (policy preferred)");
                if (pl->unpinned && pl->unpinned_idx < 0)
                        pl->unpinned_idx = unpinned_cause(p);
                pd->cause = pl->unpinned ? pl->unpinned_idx : plan_add_cause(p, false, NULL, pd->reason);
                return 0;
        }
        pd->action = PLAN_REFUSE;
        if (pl->unpinned) {
                if (pl->unpinned_idx < 0)
                        pl->unpinned_idx = unpinned_cause(p);
                pd->cause = pl->unpinned_idx;
                plan_set_reason(pd, "%s", p->causes[pd->cause].what);
                return 1;
        }
        _cleanup_free_ char *fix = NULL;
        if (p->mode == POLICY_SOCKET) {
                plan_set_reason(pd, "no guest cell is backed by host node %d or by another node of socket %d",
                           pd->host_node, pd->host_socket);
                fix = xasprintf("pin a guest cell to a host node of socket %d (<numatune><memnode>), or use "
                                "policy preferred", pd->host_socket);
        } else {
                plan_set_reason(pd, "no guest cell is backed by host node %d", pd->host_node);
                fix = xasprintf("pin a guest cell to host node %d (<numatune><memnode nodeset='%d'/>), or use "
                                "policy preferred", pd->host_node, pd->host_node);
        }
        pd->cause = plan_add_cause(p, false, fix, pd->reason);
        p->causes[pd->cause].cells = true;
        return 1;
}

/* Decide each device's cell (docs/design.md §6). Returns the number refused. */
static size_t place_devices(const struct domain *d, const struct hostmap *h, struct plan *p) {
        size_t refused = 0;
        _cleanup_(placement_done) struct placement pl = {
                .load = xcalloc(d->n_cells ? d->n_cells : 1, sizeof(unsigned)),
                .firsts = xcalloc(p->n_devices ? p->n_devices : 1, sizeof(*pl.firsts)),
                .unpinned = d->n_cells > 0,
                .unpinned_idx = -1,
        };
        for (size_t c = 0; c < d->n_cells && pl.unpinned; c++)
                pl.unpinned = bitmap_isempty(&d->cells[c].host_nodes);

        for (size_t i = 0; i < p->n_devices; i++) {
                struct plan_device *pd = &p->devices[i];
                if (pd->host_node < 0) {
                        refused += place_nodeless(p, pd);
                        continue;
                }
                const struct plan_device *mate = find_mate(p, i, &pl);
                int cell = choose_cell(d, h, p, pd, mate, pl.load);
                if (cell >= 0) {
                        pd->action = PLAN_MOVE;
                        pd->cell = cell;
                        pl.load[cell]++;
                        if (p->settings.topology == POLICY_TOPOLOGY_PATHS && !mate && pd->host_root >= 0)
                                pl.firsts[pl.n_firsts++] = pd;
                        continue;
                }
                refused += place_nowhere(p, pd, &pl);
        }
        return refused;
}

/* At most this many device names in one warning, then "and N more": a
 * domain may hold thousands of hostdevs, a warning stays one line. */
#define WARN_NAMES_MAX 32

/* ", "-separated names of the devices sel[0..n), capped. */
static char *name_list(const struct plan *p, const size_t *sel, size_t n) {
        struct strbuf b = {0};
        for (size_t k = 0; k < n && k < WARN_NAMES_MAX; k++)
                strbuf_printf(&b, "%s%s", k ? ", " : "", p->devices[sel[k]].name);
        if (n > WARN_NAMES_MAX)
                strbuf_printf(&b, " and %zu more", n - WARN_NAMES_MAX);
        return strbuf_steal(&b);
}

/* preferred places a device whose node backs no guest cell on the nearest
 * cell (docs/policy.md, "What could not be placed"): say so, one warning
 * per host node and cell, naming the devices.  What could not be placed
 * at all stays on pcie.0 with a cause (plan_cause), which the messages
 * list with the devices it concerns (report_causes()). */
void plan_warn_not_local(const struct domain *d, const struct hostmap *h, struct plan *p) {
        size_t n = p->n_devices, k;
        _cleanup_free_ size_t *sel = xcalloc(n ? n : 1, sizeof(size_t));
        _cleanup_free_ bool *done = xcalloc(n ? n : 1, sizeof(bool));
        for (size_t i = 0; i < n; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (done[i] || pd->action != PLAN_MOVE || pd->cell < 0 || pd->host_node < 0 ||
                    bitmap_test(&d->cells[pd->cell].host_nodes, (unsigned) pd->host_node))
                        continue;
                k = 0;
                for (size_t j = i; j < n; j++) {
                        const struct plan_device *o = &p->devices[j];
                        if (!done[j] && o->action == PLAN_MOVE && o->host_node == pd->host_node && o->cell == pd->cell) {
                                done[j] = true;
                                sel[k++] = j;
                        }
                }
                const struct domain_cell *c = &d->cells[pd->cell];
                _cleanup_free_ char *names = name_list(p, sel, k);
                _cleanup_free_ char *nodes = bitmap_format(&c->host_nodes);
                plan_add_warning(p, "not local: no guest cell is backed by host node %d; %s on guest cell %u (host node%s %s), %s: %s",
                            pd->host_node, k == 1 ? "placed" : "placed together", c->id,
                            bitmap_count(&c->host_nodes) > 1 ? "s" : "", nodes,
                            cell_on_socket(h, c, pd->host_socket) ? "the nearest on its socket" : "the nearest by distance",
                            names);
        }
}

static bool is_moving(const struct domain *d, const struct plan *p, xmlNodePtr owner) {
        for (size_t k = 0; k < p->n_devices; k++)
                if (p->devices[k].action == PLAN_MOVE && d->hostdevs[p->devices[k].hostdev].elem == owner)
                        return true;
        return false;
}

/* A device at function 0 of a slot whose other functions stay cannot move:
 * without function 0 the guest does not scan the slot.  Under require and
 * socket that refuses it; otherwise it stays, with a warning.  Returns the
 * number refused. */
static size_t check_shared_slots(const struct domain *d, struct plan *p) {
        size_t refused = 0;
        bool strict = p->mode == POLICY_REQUIRE || p->mode == POLICY_SOCKET;
        for (size_t i = 0; i < p->n_devices; i++) {
                struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                if (pd->action != PLAN_MOVE || !hd->has_guest_addr || hd->guest.func != 0)
                        continue;
                for (size_t u = 0; u < d->n_pci_uses; u++) {
                        const struct domain_pci_use *use = &d->pci_uses[u];
                        if (use->addr.domain != hd->guest.domain || use->addr.bus != hd->guest.bus ||
                            use->addr.slot != hd->guest.slot || use->addr.func == 0 || is_moving(d, p, use->owner))
                                continue;
                        char other[96];
                        snprintf(other, sizeof other, "<%s>", (const char *) use->owner->name);
                        for (size_t k = 0; k < d->n_hostdevs; k++)
                                if (d->hostdevs[k].elem == use->owner) {
                                        char b[64];
                                        snprintf(other, sizeof other, "%s", domain_hostdev_name(&d->hostdevs[k], b));
                                }
                        plan_set_reason(pd, "it is function 0 of guest slot %02x:%02x, and %s at function %u stays there: "
                                       "moving it would hide that from the guest; give it a slot of its own%s",
                                   hd->guest.bus, hd->guest.slot, other, use->addr.func, strict ? "" : " (it stays)");
                        pd->cell = -1;
                        if (strict) {
                                pd->action = PLAN_REFUSE;
                                refused++;
                        } else {
                                pd->action = PLAN_STAY;
                                plan_add_warning(p, "%s stays on its slot: %s", pd->name, pd->reason);
                        }
                        break;
                }
        }
        return refused;
}

/* The I/O port check (on by default): each moved device with an I/O BAR
 * gets a root port with a 4 KiB I/O window out of the guest's 64 KiB.
 * Returns -ENOSPC when require or socket must refuse. */
static int check_io_ports(const struct domain *d, struct plan *p) {
        /* One window per port: the functions of one host device share
         * theirs under topology paths. */
        p->io_devices = 0;
        for (size_t i = 0; i < p->n_devices; i++) {
                if (p->devices[i].action != PLAN_MOVE || !p->devices[i].io_bars)
                        continue;
                bool seen = false;
                for (size_t k = 0; k < i && !seen; k++)
                        seen = p->devices[k].action == PLAN_MOVE && p->devices[k].io_bars && plan_unit_key(d, p, k) == plan_unit_key(d, p, i);
                p->io_devices += !seen;
        }
        if (!p->settings.io_port_check) {
                p->io_note = xstrdup("I/O ports: not checked (io_port_check is off)");
                return 0;
        }
        if (p->io_devices <= PLAN_IO_WINDOWS_MAX) {
                p->io_note = xasprintf("I/O ports: %u moved device%s with I/O BARs need %u KiB of I/O windows; "
                                       "%u fit in the guest's 64 KiB",
                                       p->io_devices, p->io_devices == 1 ? "" : "s", p->io_devices * 4, PLAN_IO_WINDOWS_MAX);
                return 0;
        }
        p->io_note = xasprintf("I/O ports exhausted: %u moved devices with I/O BARs need %u root ports with a 4 KiB I/O "
                               "window each (%u KiB), but only about %u fit in the guest's 64 KiB of I/O space; "
                               "past that SeaBIOS hangs at boot",
                               p->io_devices, p->io_devices, p->io_devices * 4, PLAN_IO_WINDOWS_MAX);
        if (p->mode == POLICY_REQUIRE || p->mode == POLICY_SOCKET)
                return -ENOSPC;
        plan_add_warning(p, "%s", p->io_note);
        return 0;
}

/* The I/O windows the moved devices need do not fit the guest's I/O
 * space (check_io_ports): the plan is refused, and so is every moved
 * device with an I/O BAR. */
static void refuse_io_ports(struct plan *p) {
        p->verdict = PLAN_REFUSED;
        p->reason = xstrdup(p->io_note);
        int cause = plan_add_cause(p, true, "pass fewer devices with I/O BARs to one domain, or VFs without I/O BARs, or "
                                       "set io_port_check to false for it", p->io_note);
        for (size_t i = 0; i < p->n_devices; i++)
                if (p->devices[i].action == PLAN_MOVE && p->devices[i].io_bars) {
                        p->devices[i].action = PLAN_REFUSE;
                        p->devices[i].cause = cause;
                        plan_set_reason(&p->devices[i], "it has an I/O BAR and %s", p->io_note);
                }
}

/* Decide each device's cell and check what the moves share (slots, I/O
 * space).  True when the plan ends here: refused, or no device moves. */
bool plan_placement(const struct domain *d, const struct hostmap *h, struct plan *p) {
        size_t refused = place_devices(d, h, p);
        refused += check_shared_slots(d, p);
        if (!refused && check_io_ports(d, p) < 0) {
                refuse_io_ports(p);
                return true;
        }
        if (refused) {
                p->verdict = PLAN_REFUSED;
                /* One cause for all of them: the first line says it too
                 * (the journal keeps only that line); several: each is
                 * said on a line of its own after it (report_causes()). */
                int cause = shared_cause(p, PLAN_REFUSE);
                p->reason = xasprintf("%zu of %zu passthrough device%s cannot be placed under policy %s%s%s",
                                      refused, p->n_devices, p->n_devices > 1 ? "s" : "", policy_mode_to_string(p->mode),
                                      cause >= 0 ? ": " : "", cause >= 0 ? p->causes[cause].what : "");
                return true;
        }
        size_t moved = 0;
        for (size_t i = 0; i < p->n_devices; i++)
                moved += p->devices[i].action == PLAN_MOVE;
        if (!moved) {
                p->verdict = PLAN_UNCHANGED;
                p->reason = xstrdup("no device has a guest cell to go to; all stay on pcie.0");
                return true;
        }
        return false;
}

/* The placement planner (docs/design.md §6 policies, §7 topology).  Pure: it reads
 * the domain model, the host map and the policy settings and produces a
 * struct plan; the rewriter turns that into XML. */
#include "planner.h"

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>

#include "fingerprint.h"

#define BUSNR_TOP 255   /* exclusive: libvirt accepts busNr 1..254 */
#define PXB_SLOTS 32

const char *plan_verdict_to_string(enum plan_verdict v) {
        switch (v) {
        case PLAN_APPLY:
                return "apply";
        case PLAN_UNCHANGED:
                return "unchanged";
        case PLAN_SKIP:
                return "skip";
        case PLAN_REFUSED:
                return "refuse";
        }
        return "?";
}

const char *plan_action_to_string(enum plan_action a) {
        switch (a) {
        case PLAN_MOVE:
                return "move";
        case PLAN_STAY:
                return "stay";
        case PLAN_REFUSE:
                return "refuse";
        }
        return "?";
}

/* Forget the expander buses, root ports and pruning of a plan. */
static void clear_layout(struct plan *p) {
        for (size_t i = 0; i < p->n_pxbs; i++)
                free(p->pxbs[i].host_nodes);
        CLEAR_ARRAY(p->pxbs, p->n_pxbs);
        CLEAR_ARRAY(p->ports, p->n_ports);
        CLEAR_ARRAY(p->pruned, p->n_pruned);
}

struct plan *plan_free(struct plan *p) {
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n_devices; i++) {
                free(p->devices[i].reason);
                free(p->devices[i].host_up);
                free(p->devices[i].position);
                free(p->devices[i].mdev_type);
        }
        free(p->fingerprint);
        free(p->devices);
        clear_layout(p);
        free(p->pairs);
        free(p->degrade_note);
        for (size_t i = 0; i < p->n_warnings; i++)
                free(p->warnings[i]);
        free(p->warnings);
        for (size_t i = 0; i < p->n_causes; i++) {
                free(p->causes[i].what);
                free(p->causes[i].fix);
        }
        free(p->causes);
        free(p->reason);
        free(p->cells_desc);
        free(p->distances);
        free(p->distances_note);
        free(p->mmio64_note);
        free(p->io_note);
        free(p->nccl_arg);
        free(p->nccl_note);
        free(p->managed);
        free(p->cliques);
        free(p->clique_note);
        free(p);
        return NULL;
}

_printf_(2, 3) static void add_warning(struct plan *p, const char *fmt, ...) {
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
static int add_cause(struct plan *p, bool domain, const char *fix, const char *what) {
        for (size_t i = p->n_causes; i-- > 0 && p->n_causes - i <= CAUSES_LOOKBACK;)
                if (streq(p->causes[i].what, what))
                        return (int) i;
        *GROW(p->causes, p->n_causes) = (struct plan_cause) {
                .what = xstrdup(what), .fix = fix ? xstrdup(fix) : NULL, .domain = domain,
        };
        return (int) p->n_causes - 1;
}

_printf_(2, 3) static void set_reason(struct plan_device *pd, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        free(pd->reason);
        pd->reason = xvasprintf(fmt, ap);
        va_end(ap);
}

static char *describe_cells(const struct domain *d, const struct hostmap *h) {
        struct strbuf b = {0};
        if (d->n_cells == 0)
                return xstrdup("none");
        /* Unbacked cells: why, said once after the list. */
        bool unbacked = false;
        for (size_t i = 0; i < d->n_cells; i++) {
                const struct domain_cell *c = &d->cells[i];
                if (i)
                        strbuf_append(&b, ", ");
                if (bitmap_isempty(&c->host_nodes)) {
                        strbuf_printf(&b, "%u = no host node", c->id);
                        unbacked = true;
                        continue;
                }
                _cleanup_free_ char *nodes = bitmap_format(&c->host_nodes);
                strbuf_printf(&b, "%u = host node%s %s", c->id, bitmap_count(&c->host_nodes) > 1 ? "s" : "", nodes);
                /* Say which socket, since 'socket' decisions depend on it. */
                int sock = -2;
                for (int n = bitmap_next(&c->host_nodes, 0); n >= 0; n = bitmap_next(&c->host_nodes, (unsigned) n + 1)) {
                        int s = hostmap_node_socket(h, n);
                        sock = sock == -2 || sock == s ? s : -3;
                }
                if (sock >= 0)
                        strbuf_printf(&b, " (socket %d, %s)", sock, domain_backing_to_string(c->backing));
                else
                        strbuf_printf(&b, " (%s)", domain_backing_to_string(c->backing));
        }
        if (unbacked)
                strbuf_append(&b, " (a cell without a numatune memnode, vcpupin or vcpu cpuset has no host node)");
        return strbuf_steal(&b);
}

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

/* "pci0000:3a" -> 0x3a: a host bridge's name as a number (domain << 8 |
 * bus); -1 for NULL or any other form.  strtoul, not sscanf: this runs
 * for every device of every plan. */
static long host_root_of(const char *host_bridge) {
        if (host_bridge && strncmp(host_bridge, "pci", 3) == 0 && isxdigit((unsigned char) host_bridge[3])) {
                char *end = NULL;
                unsigned long dom = strtoul(host_bridge + 3, &end, 16);
                if (*end == ':' && isxdigit((unsigned char) end[1])) {
                        unsigned long bus = strtoul(end + 1, &end, 16);
                        if (!*end && bus <= 0xff && dom <= UINT32_MAX)
                                return (long) (dom << 8 | bus);
                }
        }
        return -1;
}

/* A PCI function's I/O BARs (io_bars) and 64-bit MMIO (mmio64_size,
 * mmio64_align): each BAR is naturally aligned, so a BAR costs its size
 * rounded up to a power of two.  Not for mdevs: their BARs are the
 * vendor's and not in sysfs, so only real functions count. */
static void count_bars(const struct hostmap_device *dev, struct plan_device *pd) {
        for (int b = 0; b < HOSTMAP_N_BARS; b++) {
                const struct hostmap_bar *bar = &dev->bars[b];
                if (bar->type == HOSTMAP_BAR_IO)
                        pd->io_bars++;
                if (bar->type != HOSTMAP_BAR_MEM64 || bar->size == 0)
                        continue;
                uint64_t sz = 1;
                while (sz < bar->size && sz < (UINT64_C(1) << 62))
                        sz <<= 1;
                pd->mmio64_size += sz;
                if (sz > pd->mmio64_align)
                        pd->mmio64_align = sz;
        }
}

/* What the host map says of the domain's hostdev i, into pd: its host
 * node and socket, host root complex and bridges, driver, BARs; no cell
 * or action yet. */
static void describe_device(const struct domain *d, const struct hostmap *h, size_t i, struct plan_device *pd) {
        const struct domain_hostdev *hd = &d->hostdevs[i];
        pd->hostdev = i;
        pd->host_node = HOSTMAP_NO_NODE;
        pd->host_socket = HOSTMAP_NO_SOCKET;
        pd->cell = -1;
        pd->port_index = -1;
        pd->cause = -1;
        domain_hostdev_name(hd, pd->name);

        const struct hostmap_device *dev = NULL;
        if (hd->kind == DOMAIN_HOSTDEV_MDEV) {
                const struct hostmap_mdev *m = hostmap_find_mdev(h, hd->mdev_uuid);
                if (m) {
                        pd->known = true;
                        pd->host_node = m->node;
                        dev = hostmap_find_device(h, &m->parent);
                }
        } else {
                dev = hostmap_find_device(h, &hd->host);
                if (dev) {
                        pd->known = true;
                        pd->host_node = dev->node;
                        pd->fingerprinted = fingerprint_holds(h, dev);
                }
        }
        pd->switch_group = -1;
        pd->host_root = -1;
        if (dev) {
                pd->class = dev->class;
                pd->host_root = host_root_of(dev->host_bridge);
                if (dev->n_upstream) {
                        pd->host_up = xcalloc(dev->n_upstream, sizeof(*pd->host_up));
                        memcpy(pd->host_up, dev->upstream, dev->n_upstream * sizeof(*pd->host_up));
                        pd->n_host_up = dev->n_upstream;
                }
                if (hd->kind == DOMAIN_HOSTDEV_PCI && dev->driver)
                        snprintf(pd->driver, sizeof pd->driver, "%s", dev->driver);
                /* root port, switch upstream, switch downstream, ...: the
                 * bridge below the root port names the switch. */
                if (dev->n_upstream >= 3) {
                        pd->has_host_switch = true;
                        pd->host_switch = dev->upstream[1];
                }
                if (hd->kind == DOMAIN_HOSTDEV_PCI)
                        count_bars(dev, pd);
        }
        if (pd->host_node >= 0)
                pd->host_socket = hostmap_node_socket(h, pd->host_node);
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
        return add_cause(p, true, fix, "no guest cell is pinned to a host node");
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
                set_reason(pd, "%s; policy %s needs a device with a NUMA node", no_node_reason(pd), mode);
                refused++;
        } else {
                pd->action = PLAN_STAY;
                set_reason(pd, "%s; stays on pcie.0 (policy %s allows that)", no_node_reason(pd), mode);
        }
        pd->cause = add_cause(p, false, no_node_fix(pd, strict), pd->reason);
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
                set_reason(pd, "%s; shares host root complex pci%04lx:%02lx with %s", mate->reason,
                           (unsigned long) pd->host_root >> 8, (unsigned long) pd->host_root & 0xff, mate->name);
        } else if (mate) {
                char sw[PCI_ADDR_STRLEN];
                set_reason(pd, "%s; shares host switch %s with %s", mate->reason, pci_addr_format(&pd->host_switch, sw),
                           mate->name);
        } else if (cell >= 0) {
                set_reason(pd, "local: cell %d is backed by host node %d", cell, pd->host_node);
        } else if (p->mode == POLICY_SOCKET || p->mode == POLICY_PREFERRED) {
                cell = pick_cell(d, h, pd->host_node, pd->host_socket, CAND_SOCKET, load);
                if (cell >= 0)
                        set_reason(pd, "same socket: no cell is backed by host node %d; cell %d is on socket %d, nearest by distance",
                                   pd->host_node, cell, pd->host_socket);
                else if (p->mode == POLICY_PREFERRED) {
                        cell = pick_cell(d, h, pd->host_node, pd->host_socket, CAND_ANY, load);
                        if (cell >= 0)
                                set_reason(pd, "nearest: no cell is backed by host node %d or socket %d; cell %d is the nearest by distance",
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
                set_reason(pd, "no guest cell is backed by any host node; stays on pcie.0 (policy preferred)");
                if (pl->unpinned && pl->unpinned_idx < 0)
                        pl->unpinned_idx = unpinned_cause(p);
                pd->cause = pl->unpinned ? pl->unpinned_idx : add_cause(p, false, NULL, pd->reason);
                return 0;
        }
        pd->action = PLAN_REFUSE;
        if (pl->unpinned) {
                if (pl->unpinned_idx < 0)
                        pl->unpinned_idx = unpinned_cause(p);
                pd->cause = pl->unpinned_idx;
                set_reason(pd, "%s", p->causes[pd->cause].what);
                return 1;
        }
        _cleanup_free_ char *fix = NULL;
        if (p->mode == POLICY_SOCKET) {
                set_reason(pd, "no guest cell is backed by host node %d or by another node of socket %d",
                           pd->host_node, pd->host_socket);
                fix = xasprintf("pin a guest cell to a host node of socket %d (<numatune><memnode>), or use "
                                "policy preferred", pd->host_socket);
        } else {
                set_reason(pd, "no guest cell is backed by host node %d", pd->host_node);
                fix = xasprintf("pin a guest cell to host node %d (<numatune><memnode nodeset='%d'/>), or use "
                                "policy preferred", pd->host_node, pd->host_node);
        }
        pd->cause = add_cause(p, false, fix, pd->reason);
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
static void warn_not_local(const struct domain *d, const struct hostmap *h, struct plan *p) {
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
                add_warning(p, "not local: no guest cell is backed by host node %d; %s on guest cell %u (host node%s %s), %s: %s",
                            pd->host_node, k == 1 ? "placed" : "placed together", c->id,
                            bitmap_count(&c->host_nodes) > 1 ? "s" : "", nodes,
                            cell_on_socket(h, c, pd->host_socket) ? "the nearest on its socket" : "the nearest by distance",
                            names);
        }
}

static bool is_expander(const struct domain_controller *c) {
        return streq(c->model, "pcie-expander-bus") || streq(c->model, "pci-expander-bus");
}

/* True if controller 'index' hangs (directly or through bridges) off an
 * existing expander bus: its bus numbers come from that bus's range. */
static bool under_expander(const struct domain *d, int index) {
        for (int depth = 0; depth < 256; depth++) {
                const struct domain_controller *c = domain_find_controller(d, index);
                if (!c)
                        return false;
                if (is_expander(c))
                        return true;
                if (!c->has_addr || c->addr.bus == 0)
                        return false;
                index = c->addr.bus;
        }
        return false;
}

static bool slot_used(const struct domain *d, const struct plan *p, size_t n_placed, uint8_t slot) {
        for (size_t i = 0; i < d->n_pci_uses; i++) {
                const struct domain_pci_use *u = &d->pci_uses[i];
                if (u->addr.domain != 0 || u->addr.bus != 0 || u->addr.slot != slot)
                        continue;
                /* Addresses of devices that move away and of root ports
                 * that are pruned become free. */
                bool leaving = false;
                for (size_t k = 0; k < p->n_devices && !leaving; k++)
                        leaving = p->devices[k].action == PLAN_MOVE && d->hostdevs[p->devices[k].hostdev].elem == u->owner;
                for (size_t k = 0; k < p->n_pruned && !leaving; k++) {
                        const struct domain_controller *c = domain_find_controller(d, p->pruned[k]);
                        leaving = c && c->elem == u->owner;
                }
                if (!leaving)
                        return true;
        }
        for (size_t i = 0; i < n_placed; i++)
                if (p->pxbs[i].addr.slot == slot)
                        return true;
        return false;
}

/* Root ports that held only moved devices: pruned (docs/design.md §7). */
static void find_pruned(const struct domain *d, struct plan *p) {
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                if (pd->action != PLAN_MOVE || !hd->has_guest_addr || hd->guest.bus == 0 || hd->guest.domain != 0)
                        continue;
                const struct domain_controller *port = domain_find_controller(d, hd->guest.bus);
                if (!port || !streq(port->model, "pcie-root-port"))
                        continue;
                bool only_moved = true;
                for (size_t u = 0; u < d->n_pci_uses && only_moved; u++) {
                        const struct domain_pci_use *use = &d->pci_uses[u];
                        if (use->addr.domain != 0 || use->addr.bus != hd->guest.bus)
                                continue;
                        bool moved = false;
                        for (size_t k = 0; k < p->n_devices && !moved; k++)
                                moved = p->devices[k].action == PLAN_MOVE && d->hostdevs[p->devices[k].hostdev].elem == use->owner;
                        only_moved = moved;
                }
                bool dup = false;
                for (size_t k = 0; k < p->n_pruned; k++)
                        dup = dup || p->pruned[k] == port->index;
                if (only_moved && !dup)
                        *GROW(p->pruned, p->n_pruned) = port->index;
        }

        /* A root port at function 0 of a slot whose other functions stay in
         * use is kept (empty, hot-pluggable): without function 0 the guest
         * does not scan the slot and loses what sits behind the others. */
        for (size_t k = 0; k < p->n_pruned;) {
                const struct domain_controller *port = domain_find_controller(d, p->pruned[k]);
                bool keep = false;
                if (port->has_addr && port->addr.func == 0)
                        for (size_t u = 0; u < d->n_pci_uses && !keep; u++) {
                                const struct domain_pci_use *use = &d->pci_uses[u];
                                if (use->addr.domain != port->addr.domain || use->addr.bus != port->addr.bus ||
                                    use->addr.slot != port->addr.slot || use->addr.func == 0)
                                        continue;
                                bool leaving = false;
                                for (size_t j = 0; j < p->n_pruned && !leaving; j++)
                                        leaving = domain_find_controller(d, p->pruned[j])->elem == use->owner;
                                keep = !leaving;
                        }
                if (keep) {
                        memmove(&p->pruned[k], &p->pruned[k + 1], (p->n_pruned - k - 1) * sizeof(int));
                        p->n_pruned--;
                        continue;
                }
                k++;
        }
}

/* Candidate pcie.0 slots for expander buses, in order of preference.
 * 0 is the host bridge and 0x1f the ICH9 LPC/SATA/SMBus functions; 0x1b,
 * 0x1d, 0x1e and 1 are where libvirt puts sound, USB, the DMI-PCI bridge
 * and video by default, so they come last. */
static const uint8_t pcie0_slots[] = {
        0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1c,
        0x1e, 0x1b, 0x1d, 0x01,
};

/* How far a cell's part of the tree is cut down to fit (the degrade
 * order of docs/planner.md: merge the root complexes first, then drop
 * the switches). */
#define SHAPE_MERGED 1u         /* one expander bus for the whole cell */
#define SHAPE_FLAT 2u           /* no switches: one root port per device (per host device under paths) */

/* A guest port while the tree is built. */
struct tnode {
        int parent;             /* tnode index, -1: on the expander bus */
        size_t pxb;             /* index into p->pxbs */
        const char *model;
        uint64_t key;           /* the host bridge it mirrors (packed), or a unit key */
        uint64_t unit;          /* leaf ports: the unit (host device) on it; 0 otherwise */
        unsigned n_kids;
        unsigned n_funcs;       /* devices (functions) on it */
        int index;              /* controller index, once numbered */
        long first_kid, last_kid, next_sib;     /* its children, in the order they were made; -1: none */
        size_t port_pos;        /* its entry in p->ports, once numbered */
        int bus;                /* the guest bus number behind it, once known */
};

static uint64_t pack_addr(const struct pci_addr *a) {
        return (uint64_t) a->domain << 16 | (uint64_t) a->bus << 8 | (uint64_t) a->slot << 3 | a->func;
}

/* The guest device a moved device becomes part of: under paths, the
 * functions of one host device (same host bus and slot) are one unit and
 * share a port; otherwise every device is its own unit.  Never 0. */
static uint64_t unit_key(const struct domain *d, const struct plan *p, size_t i) {
        const struct domain_hostdev *hd = &d->hostdevs[p->devices[i].hostdev];
        if (p->settings.topology == POLICY_TOPOLOGY_PATHS && hd->kind == DOMAIN_HOSTDEV_PCI && p->devices[i].known)
                return (uint64_t) hd->host.domain << 16 | (uint64_t) hd->host.bus << 8 | (uint64_t) hd->host.slot << 3 | 1u << 2;
        return UINT64_C(1) << 62 | i;
}

/* The port under 'parent' (or, for -1, on expander bus 'pxb') that
 * mirrors key/unit, made if missing.  Only the siblings are searched: a
 * pxb's root ports are listed from roots[pxb] (first and last). */
static size_t find_or_add_node(struct tnode **nodes, size_t *n, long (*roots)[2], int parent, size_t pxb, const char *model,
                               uint64_t key, uint64_t unit) {
        long first = parent >= 0 ? (*nodes)[parent].first_kid : roots[pxb][0];
        for (long k = first; k >= 0; k = (*nodes)[k].next_sib) {
                const struct tnode *t = &(*nodes)[k];
                if (t->key == key && t->unit == unit && streq(t->model, model))
                        return (size_t) k;
        }
        struct tnode *t = GROW(*nodes, *n);
        *t = (struct tnode) { .parent = parent, .pxb = pxb, .model = model, .key = key, .unit = unit, .index = -1,
                              .first_kid = -1, .last_kid = -1, .next_sib = -1, .bus = -1 };
        long k = (long) *n - 1;
        long *head = parent >= 0 ? &(*nodes)[parent].first_kid : &roots[pxb][0];
        long *tail = parent >= 0 ? &(*nodes)[parent].last_kid : &roots[pxb][1];
        if (parent >= 0)
                (*nodes)[parent].n_kids++;
        if (*tail >= 0)
                (*nodes)[*tail].next_sib = k;
        else
                *head = k;
        *tail = k;
        return (size_t) k;
}

/* The state the phases of layout_once share: the guest port tree while
 * it is built and numbered. */
struct layout_tree {
        struct tnode *nodes;    /* the guest ports, in the order they were made */
        size_t n_nodes;
        long (*roots)[2];       /* per pxb: its first and last root port (tnode index); -1: none */
        size_t *leaf;           /* per device: the tnode a moved device sits on */
        int next;               /* the next free controller index */
};

static void layout_tree_done(struct layout_tree *t) {
        free(t->nodes);
        free(t->roots);
        free(t->leaf);
}

/* The first controller index above every index and pcie.0-domain bus
 * number the domain already uses: where the new controllers start. */
static int first_free_index(const struct domain *d) {
        int max_index = 0;
        for (size_t i = 0; i < d->n_controllers; i++)
                if (d->controllers[i].index > max_index)
                        max_index = d->controllers[i].index;
        for (size_t i = 0; i < d->n_pci_uses; i++)
                if (d->pci_uses[i].addr.domain == 0 && d->pci_uses[i].addr.bus > max_index)
                        max_index = d->pci_uses[i].addr.bus;
        return max_index + 1;
}

/* The expander buses: one per host root complex of a cell, or one for
 * the whole cell (cells shape, merged, or devices whose root complex the
 * host map does not know); in cell order, then host bridge order.  They
 * get no index yet. */
static void add_pxbs(const struct domain *d, struct plan *p, const unsigned *shape) {
        for (size_t c = 0; c < d->n_cells; c++) {
                for (size_t i = 0; i < p->n_devices; i++) {
                        const struct plan_device *pd = &p->devices[i];
                        if (pd->action != PLAN_MOVE || pd->cell != (int) c)
                                continue;
                        long root = (shape[c] & SHAPE_MERGED) ? -1 : pd->host_root;
                        bool have = false;
                        for (size_t k = 0; k < p->n_pxbs && !have; k++)
                                have = p->pxbs[k].cell == c && p->pxbs[k].host_root == root;
                        if (have)
                                continue;
                        size_t at = p->n_pxbs;
                        while (at > 0 && p->pxbs[at - 1].cell == c && p->pxbs[at - 1].host_root > root)
                                at--;
                        GROW(p->pxbs, p->n_pxbs);
                        memmove(&p->pxbs[at + 1], &p->pxbs[at], (p->n_pxbs - at - 1) * sizeof(*p->pxbs));
                        p->pxbs[at] = (struct plan_pxb) { .cell = (unsigned) c, .host_root = root, .index = -1,
                                                          .host_nodes = bitmap_format(&d->cells[c].host_nodes) };
                }
        }
}

/* How many of moved device i's host bridges (host_up) its guest chain
 * mirrors, on the pxb for host root 'root'.  Only (root port, switch up,
 * switch down)* chains mirror onto libvirt's controllers, so a trailing
 * odd bridge is dropped; flat cells mirror none; a host root port that
 * holds a single unit gets no switch (nothing to tell apart). */
static size_t mirror_depth(const struct domain *d, const struct plan *p, const unsigned *shape, size_t i, long root,
                           uint64_t unit) {
        const struct plan_device *pd = &p->devices[i];
        size_t m = pd->n_host_up;
        if (m % 2 == 0 && m > 0)
                m--;
        if (shape[pd->cell] & SHAPE_FLAT)
                m = 0;
        if (m > 1) {
                bool alone = true;
                for (size_t j = 0; j < p->n_devices && alone; j++) {
                        const struct plan_device *o = &p->devices[j];
                        alone = j == i || o->action != PLAN_MOVE || o->cell != pd->cell || o->n_host_up == 0 ||
                                !pci_addr_eq(&o->host_up[0], &pd->host_up[0]) ||
                                (((shape[o->cell] & SHAPE_MERGED) ? -1 : o->host_root) != root) ||
                                unit_key(d, p, j) == unit;
                }
                if (alone)
                        m = 1;
        }
        return m;
}

/* The tree below each pxb mirrors the host's below its root complex: a
 * root port per host root port, an upstream port per host switch and a
 * downstream port per host downstream port, down to the port the device
 * sits on (t->leaf[i]), which counts the device among its functions. */
static void build_tree(const struct domain *d, const struct plan *p, const unsigned *shape, struct layout_tree *t) {
        t->roots = xcalloc(p->n_pxbs ? p->n_pxbs : 1, sizeof(*t->roots));
        for (size_t i = 0; i < p->n_pxbs; i++)
                t->roots[i][0] = t->roots[i][1] = -1;
        t->leaf = xcalloc(p->n_devices ? p->n_devices : 1, sizeof(size_t));
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                long root = (shape[pd->cell] & SHAPE_MERGED) ? -1 : pd->host_root;
                size_t x = 0;
                while (p->pxbs[x].cell != (unsigned) pd->cell || p->pxbs[x].host_root != root)
                        x++;
                uint64_t unit = unit_key(d, p, i);
                size_t m = mirror_depth(d, p, shape, i, root, unit);
                int parent = -1;
                for (size_t k = 0; k + 1 < m; k++) {
                        const char *model = k == 0 ? PLAN_ROOT_PORT : k % 2 ? PLAN_SWITCH_UP : PLAN_SWITCH_DOWN;
                        /* One upstream port per parent: a port's link holds one switch. */
                        uint64_t key = k % 2 ? 0 : pack_addr(&pd->host_up[k]);
                        parent = (int) find_or_add_node(&t->nodes, &t->n_nodes, t->roots, parent, x, model, key, 0);
                }
                const char *model = m <= 1 ? PLAN_ROOT_PORT : PLAN_SWITCH_DOWN;
                uint64_t key = m ? pack_addr(&pd->host_up[m - 1]) : unit;
                t->leaf[i] = find_or_add_node(&t->nodes, &t->n_nodes, t->roots, parent, x, model, key, unit);
                t->nodes[t->leaf[i]].n_funcs++;
        }
}

/* The guest function of each moved device: the functions on one port in
 * host function order (function 0 first, which the guest needs to scan
 * the slot). */
static void order_functions(const struct domain *d, struct plan *p, const struct layout_tree *t) {
        for (size_t i = 0; i < p->n_devices; i++) {
                if (p->devices[i].action != PLAN_MOVE)
                        continue;
                p->devices[i].guest.func = 0;
                if (t->nodes[t->leaf[i]].n_funcs == 1)
                        continue;
                const struct pci_addr *ai = &d->hostdevs[p->devices[i].hostdev].host;
                unsigned f = 0;
                for (size_t j = 0; j < p->n_devices; j++)
                        if (j != i && p->devices[j].action == PLAN_MOVE && t->leaf[j] == t->leaf[i]) {
                                int c = pci_addr_cmp(&d->hostdevs[p->devices[j].hostdev].host, ai);
                                f += c < 0 || (c == 0 && j < i);
                        }
                p->devices[i].guest.func = (uint8_t) f;
        }
}

/* Give tnode k the next controller index and append its port to
 * p->ports, in the slot (and function) of its parent: rp_seen counts the
 * root ports placed per pxb, kid_no the children placed per tnode.
 * -ENOSPC with p->reason set when a switch runs out of slots. */
static int add_port(struct plan *p, struct layout_tree *t, size_t k, unsigned *rp_seen, unsigned *kid_no) {
        struct tnode *n = &t->nodes[k];
        const struct plan_pxb *x = &p->pxbs[n->pxb];
        n->index = t->next++;
        n->port_pos = p->n_ports;
        struct plan_port *port = GROW(p->ports, p->n_ports);
        port->index = n->index;
        port->model = n->model;
        port->pxb_index = x->index;
        port->device = -1;
        if (n->parent < 0) {
                unsigned no = rp_seen[n->pxb]++;
                port->parent_index = x->index;
                /* Up to 32 root ports get a slot each; beyond that, eight share a slot. */
                if (x->n_ports <= PXB_SLOTS) {
                        port->slot = (uint8_t) no;
                } else {
                        port->slot = (uint8_t) (no / 8);
                        port->func = (uint8_t) (no % 8);
                        port->multifunction = port->func == 0 && no + 1 < x->n_ports;
                }
                return 0;
        }
        unsigned no = kid_no[n->parent]++;
        port->parent_index = t->nodes[n->parent].index;
        if (no >= PXB_SLOTS) {
                p->reason = xasprintf("a guest switch can hold at most %d downstream ports", PXB_SLOTS);
                return -ENOSPC;
        }
        port->slot = (uint8_t) no;
        return 0;
}

/* Number the ports: each root port (in the order of its first device)
 * and then its subtree, depth first; so a pxb's ports in that order are
 * its bridges in the order the guest firmware numbers their buses.
 * Sets each pxb's n_ports (its root ports); -ENOSPC as add_port. */
static int number_ports(struct plan *p, struct layout_tree *t) {
        size_t n_nodes = t->n_nodes;
        _cleanup_free_ size_t *stack = xcalloc(n_nodes ? n_nodes : 1, sizeof(size_t));
        _cleanup_free_ unsigned *kid_no = xcalloc(n_nodes ? n_nodes : 1, sizeof(unsigned));
        _cleanup_free_ unsigned *rp_count = xcalloc(p->n_pxbs ? p->n_pxbs : 1, sizeof(unsigned));
        for (size_t k = 0; k < n_nodes; k++)
                if (t->nodes[k].parent < 0)
                        rp_count[t->nodes[k].pxb]++;
        for (size_t i = 0; i < p->n_pxbs; i++)
                p->pxbs[i].n_ports = rp_count[i];
        _cleanup_free_ unsigned *rp_seen = xcalloc(p->n_pxbs ? p->n_pxbs : 1, sizeof(unsigned));
        for (size_t r = 0; r < n_nodes; r++) {
                if (t->nodes[r].parent >= 0)
                        continue;
                size_t sp = 0;
                stack[sp++] = r;
                while (sp) {
                        size_t k = stack[--sp];
                        int ret = add_port(p, t, k, rp_seen, kid_no);
                        if (ret < 0)
                                return ret;
                        /* Children in the order they were made, pushed reversed. */
                        size_t first = sp;
                        for (long j = t->nodes[k].first_kid; j >= 0; j = t->nodes[j].next_sib)
                                stack[sp++] = (size_t) j;
                        for (size_t lo = first, hi = sp; hi > lo + 1; lo++, hi--) {
                                size_t tmp = stack[lo];
                                stack[lo] = stack[hi - 1];
                                stack[hi - 1] = tmp;
                        }
                }
        }
        return 0;
}

/* Put each moved device on its port (bus, multifunction, switch) and
 * make the port's device the first one on it; count each pxb's buses
 * (its own and one per port below it).  -ENOSPC with p->reason set when
 * the new controllers need indexes beyond 255. */
static int attach_devices(struct plan *p, const struct layout_tree *t) {
        for (size_t i = 0; i < p->n_devices; i++) {
                struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                const struct tnode *n = &t->nodes[t->leaf[i]];
                pd->port_index = n->index;
                pd->guest = (struct pci_addr) { .domain = 0, .bus = (uint8_t) n->index, .slot = 0, .func = pd->guest.func };
                pd->multifunction = pd->guest.func == 0 && n->n_funcs > 1;
                pd->switch_group = n->parent >= 0 ? t->nodes[n->parent].index : -1;
                if (p->ports[n->port_pos].device < 0)
                        p->ports[n->port_pos].device = (long) i;
        }
        for (size_t i = 0; i < p->n_pxbs; i++)
                p->pxbs[i].n_buses = 1;
        for (size_t k = 0; k < p->n_ports; k++)
                for (size_t i = 0; i < p->n_pxbs; i++)
                        if (p->pxbs[i].index == p->ports[k].pxb_index)
                                p->pxbs[i].n_buses++;
        if (t->next - 1 > 255) {
                p->reason = xasprintf("controller indexes exhausted: the new controllers would need indexes %d-%d, beyond 255",
                                      p->first_index, t->next - 1);
                return -ENOSPC;
        }
        return 0;
}

/* A pcie.0 slot for each pxb, the first free one in pcie0_slots order;
 * -ENOSPC with p->reason set when none is left. */
static int place_pxbs(const struct domain *d, struct plan *p) {
        for (size_t i = 0; i < p->n_pxbs; i++) {
                bool found = false;
                for (size_t s = 0; s < ELEMENTSOF(pcie0_slots) && !found; s++) {
                        if (slot_used(d, p, i, pcie0_slots[s]))
                                continue;
                        p->pxbs[i].addr = (struct pci_addr) { .domain = 0, .bus = 0, .slot = pcie0_slots[s], .func = 0 };
                        found = true;
                }
                if (!found) {
                        p->reason = xasprintf("no free slot on pcie.0 for the expander bus of guest cell %u "
                                              "(%zu expander buses needed)", p->pxbs[i].cell, p->n_pxbs);
                        return -ENOSPC;
                }
        }
        return 0;
}

/* Bus numbers (docs/design.md §3.7, §7): top-down from 254, below any
 * existing expander bus; each pxb takes one number for itself and one
 * per port below it.  The pcie.0 side numbers its buses from 0 upwards:
 * one per controller index that is not part of an existing expander bus
 * (libvirt fills index gaps with root ports, so gaps count too).
 * -ENOSPC with p->reason set when the two sides meet. */
static int number_buses(const struct domain *d, struct plan *p) {
        int limit = BUSNR_TOP;
        for (size_t i = 0; i < d->n_controllers; i++) {
                const struct domain_controller *c = &d->controllers[i];
                if (is_expander(c) && c->bus_nr > 0 && c->bus_nr < limit)
                        limit = c->bus_nr;
        }
        int pcie0 = 1;
        for (int idx = 1; idx < p->first_index; idx++)
                if (!under_expander(d, idx))
                        pcie0++;
        p->pcie0_buses = pcie0;
        p->busnr_limit = limit;

        int top = limit, need = 0;
        for (size_t i = 0; i < p->n_pxbs; i++) {
                int n = (int) p->pxbs[i].n_buses;
                need += n;
                top -= n;
                p->pxbs[i].bus_nr = top;
        }
        if (p->n_pxbs && top < pcie0) {
                p->reason = xasprintf("PCI bus numbers exhausted: the %zu expander bus%s need %d bus numbers below %d, "
                                      "but the pcie.0 side already uses buses 0-%d, leaving %d",
                                      p->n_pxbs, p->n_pxbs > 1 ? "es" : "", need, limit, pcie0 - 1,
                                      limit - pcie0 > 0 ? limit - pcie0 : 0);
                return -ENOSPC;
        }
        return 0;
}

/* The guest BDFs: the firmware gives each bridge below a pxb the next
 * bus number after the pxb's busNr, depth first in slot order, which is
 * the order of the pxb's ports in p->ports. */
static void assign_bdfs(struct plan *p, const struct layout_tree *t) {
        _cleanup_free_ int *bus_of = xcalloc(p->n_ports ? p->n_ports : 1, sizeof(int));
        for (size_t i = 0; i < p->n_pxbs; i++) {
                int bus = p->pxbs[i].bus_nr;
                for (size_t k = 0; k < p->n_ports; k++)
                        if (p->ports[k].pxb_index == p->pxbs[i].index)
                                bus_of[k] = ++bus;
        }
        for (size_t k = 0; k < p->n_ports; k++)
                p->ports[k].sec_bus = bus_of[k] <= 255 ? bus_of[k] : 0;
        for (size_t i = 0; i < p->n_devices; i++) {
                struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                int bus = bus_of[t->nodes[t->leaf[i]].port_pos];
                if (bus > 0 && bus <= 255)
                        snprintf(pd->guest_bdf, sizeof pd->guest_bdf, "0000:%02x:00.%u", (unsigned) bus, pd->guest.func);
        }
}

/* Lay out the pxbs and ports once, with each cell cut down as shape[]
 * says; 0, or -ENOSPC with p->reason set (the caller clears the layout).
 * The phases run in this order: each one reads what the ones before it
 * set in p and in the shared tree. */
static int layout_once(const struct domain *d, struct plan *p, const unsigned *shape) {
        _cleanup_(layout_tree_done) struct layout_tree t = { 0 };
        int r;

        p->first_index = first_free_index(d);
        add_pxbs(d, p, shape);
        t.next = p->first_index;
        for (size_t i = 0; i < p->n_pxbs; i++)
                p->pxbs[i].index = t.next++;
        build_tree(d, p, shape, &t);
        order_functions(d, p, &t);
        r = number_ports(p, &t);
        if (r < 0)
                return r;
        r = attach_devices(p, &t);
        if (r < 0)
                return r;
        find_pruned(d, p);
        r = place_pxbs(d, p);
        if (r < 0)
                return r;
        r = number_buses(d, p);
        if (r < 0)
                return r;
        assign_bdfs(p, &t);
        return 0;
}

static void reset_moves(struct plan *p) {
        clear_layout(p);
        for (size_t i = 0; i < p->n_devices; i++) {
                p->devices[i].port_index = -1;
                p->devices[i].switch_group = -1;
                p->devices[i].multifunction = false;
                p->devices[i].guest_bdf[0] = 0;
                p->devices[i].guest.func = 0;
        }
        free(p->reason);
        p->reason = NULL;
}

/* The shape the policy asks for in each cell: merged root complexes
 * under topology: cells, no switches without mirror_switches. */
static unsigned *initial_shape(const struct domain *d, const struct plan *p, size_t nc) {
        unsigned *shape = xcalloc(nc, sizeof(unsigned));
        for (size_t c = 0; c < d->n_cells; c++) {
                if (p->settings.topology == POLICY_TOPOLOGY_CELLS)
                        shape[c] |= SHAPE_MERGED;
                if (!p->settings.mirror_switches)
                        shape[c] |= SHAPE_FLAT;
        }
        return shape;
}

/* Cells by the number of expander buses the full mirror (the layout in p)
 * gave them, most first; *ret_roots gets those numbers. */
static size_t *cells_by_roots(const struct domain *d, const struct plan *p, size_t nc, unsigned **ret_roots) {
        unsigned *n_roots = xcalloc(nc, sizeof(unsigned));
        for (size_t i = 0; i < p->n_pxbs; i++)
                n_roots[p->pxbs[i].cell]++;
        size_t *order = xcalloc(nc, sizeof(size_t));
        for (size_t c = 0; c < d->n_cells; c++) {
                size_t at = c;
                while (at > 0 && n_roots[order[at - 1]] < n_roots[c]) {
                        order[at] = order[at - 1];
                        at--;
                }
                order[at] = c;
        }
        *ret_roots = n_roots;
        return order;
}

/* Cut the layout down in the documented order (merge a cell's root
 * complexes, the cell with the most first; then drop its switches) until
 * it fits; p->degrade_note says what was cut.  'first' is why the full
 * mirror did not fit.  -ENOSPC when even the flattest does not fit. */
static int degrade(const struct domain *d, struct plan *p, unsigned *shape, const size_t *order, const unsigned *n_roots,
                   const char *first) {
        struct strbuf note = {0};
        strbuf_printf(&note, "the full mirror does not fit (%s):", first);
        const unsigned steps[] = { SHAPE_MERGED, SHAPE_FLAT };
        int r = -ENOSPC;
        for (size_t s = 0; s < ELEMENTSOF(steps); s++)
                for (size_t k = 0; k < d->n_cells; k++) {
                        size_t c = order[k];
                        if ((shape[c] & steps[s]) || !n_roots[c])
                                continue;
                        shape[c] |= steps[s];
                        strbuf_printf(&note, "%s %s of guest cell %zu", note.len && note.buf[note.len - 1] == ':' ? "" : ";",
                                      steps[s] == SHAPE_MERGED ? "merged the host root complexes" : "dropped the switches", c);
                        reset_moves(p);
                        r = layout_once(d, p, shape);
                        if (r != -ENOSPC) {
                                p->degrade_note = strbuf_steal(&note);
                                return r;
                        }
                }
        strbuf_done(&note);
        return r;
}

/* Lay out the tree: the full mirror if it fits, else degrade() until it
 * fits.  0, or -ENOSPC with p->reason set when even the flattest layout
 * does not fit. */
static int layout(const struct domain *d, struct plan *p) {
        size_t nc = d->n_cells ? d->n_cells : 1;
        _cleanup_free_ unsigned *shape = initial_shape(d, p, nc);
        int r = layout_once(d, p, shape);
        if (r != -ENOSPC)
                return r;
        _cleanup_free_ char *first = TAKE_PTR(p->reason);
        _cleanup_free_ unsigned *n_roots = NULL;
        _cleanup_free_ size_t *order = cells_by_roots(d, p, nc, &n_roots);
        r = degrade(d, p, shape, order, n_roots, first);
        if (r == -ENOSPC && !p->reason)
                p->reason = TAKE_PTR(first);
        return r;
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
                        set_reason(pd, "it is function 0 of guest slot %02x:%02x, and %s at function %u stays there: "
                                       "moving it would hide that from the guest; give it a slot of its own%s",
                                   hd->guest.bus, hd->guest.slot, other, use->addr.func, strict ? "" : " (it stays)");
                        pd->cell = -1;
                        if (strict) {
                                pd->action = PLAN_REFUSE;
                                refused++;
                        } else {
                                pd->action = PLAN_STAY;
                                add_warning(p, "%s stays on its slot: %s", pd->name, pd->reason);
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
                        seen = p->devices[k].action == PLAN_MOVE && p->devices[k].io_bars && unit_key(d, p, k) == unit_key(d, p, i);
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
        add_warning(p, "%s", p->io_note);
        return 0;
}

/* mirror_distances (on by default): copy the host SLIT between the nodes
 * backing each pair of cells into <cell><distances>, unless the domain
 * sets its own. */
static void plan_distances(const struct domain *d, const struct hostmap *h, struct plan *p) {
        if (!p->settings.mirror_distances) {
                p->distances_note = xstrdup("distances: not copied (mirror_distances is off)");
                return;
        }
        if (d->n_cells < 2) {
                p->distances_note = xstrdup("distances: one guest cell, nothing to copy");
                return;
        }
        for (size_t i = 0; i < d->n_cells; i++) {
                if (d->cells[i].has_distances) {
                        p->distances_note = xstrdup("distances: the domain sets its own <distances>; left as they are");
                        return;
                }
                if (bitmap_isempty(&d->cells[i].host_nodes)) {
                        p->distances_note = xasprintf("distances: not copied: guest cell %zu has no host node behind it", i);
                        return;
                }
        }
        size_t n = d->n_cells;
        _cleanup_free_ int *m = xcalloc(n * n, sizeof(int));
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < n; j++) {
                        if (i == j) {
                                m[i * n + j] = 10;
                                continue;
                        }
                        /* Cells backed by several nodes: the nearest pair. */
                        int best = INT_MAX;
                        const struct bitmap *a = &d->cells[i].host_nodes, *b = &d->cells[j].host_nodes;
                        for (int x = bitmap_next(a, 0); x >= 0; x = bitmap_next(a, (unsigned) x + 1))
                                for (int y = bitmap_next(b, 0); y >= 0; y = bitmap_next(b, (unsigned) y + 1)) {
                                        int dist = hostmap_distance(h, x, y);
                                        if (dist >= 0 && dist < best)
                                                best = dist;
                                }
                        /* libvirt takes 10 for the local distance only, and
                         * values up to 255. */
                        if (best == INT_MAX || best <= 10 || best > 255) {
                                p->distances_note = xasprintf("distances: not copied: the host gives no usable distance "
                                                              "between the nodes of cells %zu and %zu", i, j);
                                return;
                        }
                        m[i * n + j] = best;
                }
        struct strbuf b = {0};
        strbuf_append(&b, "distances: copied from the host SLIT:");
        for (size_t i = 0; i < n; i++) {
                strbuf_printf(&b, " cell %zu [", i);
                for (size_t j = 0; j < n; j++)
                        strbuf_printf(&b, "%s%d", j ? " " : "", m[i * n + j]);
                strbuf_append(&b, "]");
        }
        p->distances_note = strbuf_steal(&b);
        p->distances = TAKE_PTR(m);
        p->n_cells = n;
        p->add_distances = true;
}

/* "128 GiB", "128.03 GiB", "2 TiB": the largest unit, two decimals at most. */
static char *fmt_size(uint64_t bytes) {
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        size_t u = 0;
        uint64_t div = 1;
        while (u + 1 < ELEMENTSOF(units) && bytes >= div * 1024) {
                div *= 1024;
                u++;
        }
        if (bytes % div == 0)
                return xasprintf("%" PRIu64 " %s", bytes / div, units[u]);
        char *s = xasprintf("%.2f", (double) bytes / (double) div);
        /* trim trailing zeros */
        size_t l = strlen(s);
        while (l > 0 && s[l - 1] == '0')
                s[--l] = 0;
        if (l > 0 && s[l - 1] == '.')
                s[--l] = 0;
        char *r = xasprintf("%s %s", s, units[u]);
        free(s);
        return r;
}

/* The largest 64-bit window (a power of two) this guest has room for, or
 * 0 when the guest's address bits are the host's (not known here).  QEMU
 * refuses to start ("phys-bits too low") when RAM and the window pass the
 * CPU's address space; below 41 bits the window must also stay below the
 * 1012 GiB where AMD's HyperTransport hole starts (q35 7.1 and later move
 * the memory above 4 GiB past it otherwise), and above, it may have been
 * moved to 1 TiB; OVMF puts its aperture at a multiple of its size above
 * the memory. */
static uint64_t mmio64_room(const struct domain *d) {
        if (!d->phys_bits || d->phys_bits >= 64)
                return 0;
        const uint64_t gib = UINT64_C(1) << 30;
        uint64_t top = UINT64_C(1) << d->phys_bits;
        uint64_t mem = (d->memory_kib * 1024 + gib - 1) / gib * gib + gib;     /* and a slot's alignment */
        uint64_t low = d->phys_bits <= 40 ? 4 * gib : UINT64_C(1) << 40;
        uint64_t limit = d->phys_bits <= 40 && top > 1012 * gib ? 1012 * gib : top;
        if (limit <= low + mem)
                return 1;       /* not even a window of a byte: say so with the figures */
        uint64_t w = UINT64_C(1) << 62;
        while (w > 1 && (w > limit - low - mem || ((low + mem + w - 1) / w * w + w > top)))
                w >>= 1;
        return w;
}

/* More than x86-64's 52-bit physical address space is a corrupt or
 * crafted resource file, not a device: plan_mmio64 says so rather than
 * size a window (each BAR is below 2^62, so the sums in mmio64_pack
 * cannot wrap before the check; a wrapped sum once made its loop spin). */
#define MMIO64_MAX (UINT64_C(1) << 52)

/* Pack the devices' 64-bit BAR windows largest alignment first (each
 * aligned to its largest BAR) and add room of one largest alignment for
 * the pcie.0 side: returns the bytes that takes, or a sum past MMIO64_MAX
 * (packing stops at the device that passed it, with no room added).
 * *ret_n: the devices with 64-bit BARs; *ret_room: the room; *ret_list:
 * "name size, ..." of the devices packed. */
static uint64_t mmio64_pack(const struct plan *p, size_t *ret_n, uint64_t *ret_room, char **ret_list) {
        size_t n = p->n_devices;
        _cleanup_free_ size_t *order = xcalloc(n ? n : 1, sizeof(size_t));
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (p->devices[i].mmio64_size)
                        order[k++] = i;
        /* largest alignment first (insertion sort: a handful of devices) */
        for (size_t i = 1; i < k; i++)
                for (size_t j = i; j > 0 && p->devices[order[j]].mmio64_align > p->devices[order[j - 1]].mmio64_align; j--) {
                        size_t t = order[j];
                        order[j] = order[j - 1];
                        order[j - 1] = t;
                }
        uint64_t pos = 0, room = 0;
        struct strbuf b = {0};
        for (size_t i = 0; i < k; i++) {
                const struct plan_device *pd = &p->devices[order[i]];
                uint64_t a = pd->mmio64_align;
                pos = (pos + a - 1) / a * a + pd->mmio64_size;
                if (a > room)
                        room = a;
                _cleanup_free_ char *sz = fmt_size(pd->mmio64_size);
                strbuf_printf(&b, "%s%s %s", i ? ", " : "", pd->name, sz);
                if (pos > MMIO64_MAX)
                        break;
        }
        if (pos <= MMIO64_MAX)
                pos += room;
        *ret_n = k;
        *ret_room = room;
        *ret_list = strbuf_steal(&b);
        return pos;
}

/* mmio64 auto, and the 'have' bytes of window are less than the 'pos'
 * the devices need (need and list say so in words): set <pcihole64>, and
 * for OVMF the aperture, to the next power of two; never past what the
 * guest has room for (QEMU would refuse to start a domain that starts
 * without pcinuma): then as large as that, or, no larger than 'have',
 * left as it is; either way with a warning. */
static void mmio64_grow(const struct domain *d, struct plan *p, uint64_t pos, uint64_t have, const char *need,
                        const char *list) {
        uint64_t hole = 1;
        while (hole && hole < pos)
                hole <<= 1;
        uint64_t space = mmio64_room(d);
        if (space && hole > space) {
                _cleanup_free_ char *r = fmt_size(space), *mem = fmt_size(d->memory_kib * 1024);
                _cleanup_free_ char *hs = fmt_size(hole), *hv = fmt_size(have);
                bool fits = space > have;
                add_warning(p, "64-bit MMIO: the devices need %s (%s), a %s window, but a guest CPU with %u physical "
                            "address bits%s and %s of memory has room for %s at most: %s; the BARs that do not fit "
                            "stay unassigned; give the guest more address bits: <cpu><maxphysaddr mode='passthrough'/> "
                            "(KVM) or mode='emulate' bits='N'",
                            need, list, hs, d->phys_bits, d->phys_bits == 40 ? " (QEMU's default)" : "", mem, r,
                            fits ? "<pcihole64> set to that" : "the window is left as it is");
                if (!fits) {
                        p->mmio64_note = xasprintf("64-bit MMIO: the devices need %s, more than the %s window; the guest "
                                                   "has no room for a larger one (see the warning)", need, hv);
                        return;
                }
                hole = space;
        }
        p->pcihole64_kib = hole / 1024;
        p->set_ovmf_mmio64 = d->ovmf;
        _cleanup_free_ char *h = fmt_size(hole);
        _cleanup_free_ char *old = fmt_size(have);
        p->mmio64_note = xasprintf("64-bit MMIO: the devices need %s, packed largest first (%s); the %s %s window is too small: "
                                   "<pcihole64> set to %s%s",
                                   need, list, d->pcihole64_kib ? "domain's" : "default", old, h,
                                   d->ovmf ? ", and OVMF's opt/ovmf/X-PciMmio64Mb to match (through <qemu:commandline>: libvirt reserves opt/ovmf/ names in <sysinfo type='fwcfg'>)" : "");
}

/* mmio64: auto.  Each device's 64-bit BARs sit in its own bridge window,
 * aligned to its largest BAR; pack the windows largest-first, add room of
 * one largest alignment, and compare the total with the default 64-bit
 * hole (32 GiB).  If it does not fit, set <pcihole64> to the next power
 * of two, and for OVMF the aperture (opt/ovmf/X-PciMmio64Mb) too.  The
 * room is for the pcie.0 side: the firmware reserves 64-bit space for the
 * hotplug root ports there, and each root bridge's window is aligned to
 * its largest BAR, so an exact fit loses BARs (seen with OVMF 2022.11:
 * eight 64 GiB BARs on two pxbs in a 512 GiB aperture, two unassigned;
 * tests/guest/test_guest.py case h). */
static void plan_mmio64(const struct domain *d, struct plan *p) {
        size_t k;
        uint64_t room;
        _cleanup_free_ char *list = NULL;
        uint64_t pos = mmio64_pack(p, &k, &room, &list);
        if (pos > MMIO64_MAX) {
                p->mmio64_note = xasprintf("64-bit MMIO: not sized: the devices' 64-bit BARs (%s) add up to more than "
                                           "a 52-bit address space; check their resource files", list);
                return;
        }
        p->mmio64_need = pos;
        _cleanup_free_ char *need = fmt_size(pos);
        if (room) {
                _cleanup_free_ char *r = fmt_size(room);
                char *l = xasprintf("%s; and %s of room for the pcie.0 side", list, r);
                free(list);
                list = l;
        }
        uint64_t have = d->pcihole64_kib ? d->pcihole64_kib * 1024 : PLAN_DEFAULT_MMIO64;
        if (!p->settings.mmio64_auto) {
                p->mmio64_note = xstrdup("64-bit MMIO: not sized (mmio64 is off)");
                /* Off, the window stays as it is: say when the BARs do not
                 * fit it, since the firmware then leaves some unassigned. */
                if (pos > have) {
                        _cleanup_free_ char *h = fmt_size(have);
                        add_warning(p, "64-bit MMIO: the devices' 64-bit BARs need %s, packed largest first (%s), more than "
                                    "the %s %s window, and mmio64 is off: %s; set \"mmio64\": \"auto\" to size the window",
                                    need, list, d->pcihole64_kib ? "domain's" : "default", h,
                                    d->ovmf ? "OVMF leaves the BARs that do not fit unassigned"
                                            : "a UEFI guest (OVMF) would leave the BARs that do not fit unassigned");
                }
                return;
        }
        if (pos <= have) {
                _cleanup_free_ char *h = fmt_size(have);
                p->mmio64_note = xasprintf("64-bit MMIO: the devices need %s (%s), which fits the %s window%s",
                                           need, k ? list : "no 64-bit BARs", h, d->pcihole64_kib ? " the domain sets" : "");
                return;
        }
        mmio64_grow(d, p, pos, have, need, list);
}

bool planner_is_vfio_variant(const char *driver, const struct planner_options *o) {
        if (!driver || !*driver || streq(driver, "vfio-pci"))
                return false;
        for (size_t i = 0; o && i < o->n_variant_drivers; i++)
                if (streq(driver, o->variant_drivers[i]))
                        return true;
        /* The kernel's vfio-pci variants are named <vendor>_vfio_pci. */
        size_t l = strlen(driver);
        return l > 9 && streq(driver + l - 9, "_vfio_pci");
}

/* managed: auto.  A device bound to a VFIO variant driver must not be
 * rebound by libvirt: managed='no'.  managed='no' on a device bound to a
 * plain host driver is reported, whatever the switch says. */
static void plan_managed(const struct domain *d, struct plan *p, const struct planner_options *o) {
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                /* A stand-in is a virtio NIC: libvirt binds nothing for it. */
                if (hd->kind != DOMAIN_HOSTDEV_PCI || !pd->known || domain_hostdev_is_stand_in(hd))
                        continue;
                bool variant = planner_is_vfio_variant(pd->driver, o);
                if (variant && hd->managed != 0 && p->settings.managed_auto) {
                        struct plan_managed *m = GROW(p->managed, p->n_managed);
                        m->hostdev = pd->hostdev;
                        snprintf(m->name, sizeof m->name, "%s", pd->name);
                        snprintf(m->driver, sizeof m->driver, "%s", pd->driver);
                } else if (hd->managed == 0 && !variant && pd->driver[0] && !streq(pd->driver, "vfio-pci"))
                        add_warning(p, "%s has managed='no' but is bound to the host driver %s: libvirt will not rebind "
                                       "it to vfio-pci, so the domain cannot start; bind it to vfio-pci (or its VFIO "
                                       "variant driver) first, or set managed='yes'",
                                    pd->name, pd->driver);
        }
}

/* --- gpudirect_clique ----------------------------------------------------- */

bool planner_clique_capable(uint16_t vendor, uint32_t class) {
        return vendor == 0x10de && (class >> 16) == 0x03;
}

/* A clique candidate: a device of p and the host switch it sits behind. */
struct clique_gpu {
        size_t device;
        long root;
        struct pci_addr sw;
};

static int cmp_pci_addr(const struct pci_addr *a, const struct pci_addr *b) {
        uint64_t x = (uint64_t) a->domain << 16 | (uint64_t) a->bus << 8 | (uint64_t) a->slot << 3 | a->func;
        uint64_t y = (uint64_t) b->domain << 16 | (uint64_t) b->bus << 8 | (uint64_t) b->slot << 3 | b->func;
        return (x > y) - (x < y);
}

/* Only to gather the GPUs of one switch together. */
static int cmp_clique_gpu(const void *a, const void *b) {
        const struct clique_gpu *x = a, *y = b;
        if (x->root != y->root)
                return (x->root > y->root) - (x->root < y->root);
        int c = cmp_pci_addr(&x->sw, &y->sw);
        return c ? c : (x->device > y->device) - (x->device < y->device);
}

/* A group of GPUs behind one switch, and what orders the groups. */
struct clique_group {
        size_t first, n;                /* gpus[first..first+n) */
        int node;                       /* the GPUs' host node; -1: none */
        char *below;                    /* what sits below its root port (clique_below()) */
        size_t min_device;              /* its first device in the domain's order */
};

/* What sits below the root port of host device 'dev' as the topology
 * fingerprint f describes it, without drivers (fingerprint_below_shape()):
 * only the devices it counts, no bus numbers, no bridges' IDs, so two
 * hosts of one digest agree on it, an empty switch port or another switch
 * model does not reorder the groups, and nor does another guest's NIC
 * going to its VFIO variant driver and back. */
static char *clique_below(const struct fingerprint *f, const struct hostmap *h, const struct hostmap_device *dev) {
        char *text = dev ? fingerprint_below_shape(f, h, (size_t) (dev - h->devices), 0) : NULL;
        return text ? text : xstrdup("");
}

/* The groups' order: by host node (none last), then by what sits below
 * their root port in the topology fingerprint (clique_below()); all of it
 * in the fingerprint, so two hosts of one digest agree on it.  Groups
 * that look the same (twin switches) go by the domain's order of their
 * GPUs, which a migration keeps. */
static int cmp_clique_group(const void *a, const void *b) {
        const struct clique_group *x = a, *y = b;
        if (x->node != y->node) {
                if (x->node < 0 || y->node < 0)
                        return x->node < 0 ? 1 : -1;
                return x->node < y->node ? -1 : 1;
        }
        int c = strcmp(x->below, y->below);
        return c ? c : (x->min_device > y->min_device) - (x->min_device < y->min_device);
}

/* gpudirect_clique: auto (docs/planner.md, "GPUDirect cliques").  The
 * NVIDIA GPUs (PCI hostdevs; not mdevs) behind one host PCIe switch form a
 * clique: their peer-to-peer traffic turns in the switch and never reaches
 * the root complex, whose P2P support and ACS redirection the host map
 * does not know.  A GPU alone behind its switch, or on a root port without
 * a switch, gets no id.  Groups take ids 0, 1, ... in an order that does
 * not depend on bus numbers (cmp_clique_group()): a domain migrated to a
 * host of the same fingerprint keeps ids that host's plan gives too.  Past
 * PLAN_CLIQUE_MAX groups the rest get none, with a warning. */
static void plan_cliques(const struct domain *d, const struct hostmap *h, struct plan *p) {
        if (!p->settings.gpudirect_clique_auto)
                return;
        _cleanup_free_ struct clique_gpu *gpus = NULL;
        size_t n = 0;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                if (hd->kind != DOMAIN_HOSTDEV_PCI || hd->is_interface || !pd->known || !pd->has_host_switch)
                        continue;
                const struct hostmap_device *dev = hostmap_find_device(h, &hd->host);
                if (!dev || !planner_clique_capable(dev->vendor, dev->class))
                        continue;
                *GROW(gpus, n) = (struct clique_gpu) { .device = i, .root = pd->host_root, .sw = pd->host_switch };
        }
        if (n > 1)
                qsort(gpus, n, sizeof(*gpus), cmp_clique_gpu);

        _cleanup_free_ struct clique_group *groups = NULL;
        size_t n_groups = 0;
        for (size_t i = 0; i < n;) {
                size_t j = i + 1;
                while (j < n && gpus[j].root == gpus[i].root && pci_addr_eq(&gpus[j].sw, &gpus[i].sw))
                        j++;
                if (j - i > 1)
                        *GROW(groups, n_groups) = (struct clique_group) { .first = i, .n = j - i, .min_device = gpus[i].device };
                i = j;
        }
        _cleanup_fingerprint_ struct fingerprint *f = n_groups > 1 ? fingerprint_new(h) : NULL;
        for (size_t g = 0; g < n_groups; g++) {
                struct clique_group *cg = &groups[g];
                const struct plan_device *pd = &p->devices[gpus[cg->first].device];
                cg->node = pd->host_node >= 0 ? pd->host_node : -1;
                const struct hostmap_device *dev = hostmap_find_device(h, &d->hostdevs[pd->hostdev].host);
                cg->below = f ? clique_below(f, h, dev) : xstrdup("");
        }
        if (n_groups > 1)
                qsort(groups, n_groups, sizeof(*groups), cmp_clique_group);

        unsigned in_cliques = 0, dropped = 0;
        for (size_t g = 0; g < n_groups; g++) {
                if (g < PLAN_CLIQUE_MAX) {
                        for (size_t k = groups[g].first; k < groups[g].first + groups[g].n; k++)
                                *GROW(p->cliques, p->n_cliques) = (struct plan_clique) { .device = gpus[k].device, .id = (unsigned) g };
                        in_cliques += (unsigned) groups[g].n;
                } else
                        dropped++;
                free(groups[g].below);
        }
        /* Device order, for the rewrite and the mark. */
        for (size_t a = 1; a < p->n_cliques; a++)
                for (size_t b = a; b > 0 && p->cliques[b].device < p->cliques[b - 1].device; b--) {
                        struct plan_clique t = p->cliques[b];
                        p->cliques[b] = p->cliques[b - 1];
                        p->cliques[b - 1] = t;
                }
        unsigned n_g = (unsigned) n_groups;
        if (dropped)
                add_warning(p, "gpudirect_clique: %u groups of GPUs behind one host switch, but QEMU's clique ids are 0-%d: "
                            "the last %u groups get no clique id", n_g, PLAN_CLIQUE_MAX - 1, dropped);
        if (p->n_cliques)
                p->clique_note = xasprintf("gpudirect_clique: %u GPUs in %u cliques (NVIDIA GPUs behind one host switch share an id)",
                                           in_cliques, n_g < PLAN_CLIQUE_MAX ? n_g : PLAN_CLIQUE_MAX);
        else
                p->clique_note = xasprintf("gpudirect_clique: no clique: no two NVIDIA GPUs sit behind one host switch");
}

int planner_run(const struct domain *d, const struct hostmap *h, const struct policy_settings *s, struct plan **ret) {
        return planner_run_opts(d, h, s, NULL, ret);
}

/* Policy off, or no passthrough devices: the domain is left as it is.
 * True when so (the plan is complete). */
static bool plan_untouched(struct plan *p) {
        if (p->mode == POLICY_OFF) {
                p->verdict = PLAN_UNCHANGED;
                p->reason = xstrdup("policy off: the domain is not touched");
                for (size_t i = 0; i < p->n_devices; i++) {
                        p->devices[i].action = PLAN_STAY;
                        set_reason(&p->devices[i], "policy off");
                }
                return true;
        }
        if (p->n_devices == 0) {
                p->verdict = PLAN_UNCHANGED;
                p->reason = xstrdup("no PCI passthrough devices");
                return true;
        }
        return false;
}

/* Eligibility (docs/design.md §6, §3.5, §3.6): guest NUMA cells, q35 and
 * ACPI.  What is missing is one domain-wide cause, every fix with it: a
 * device has one cause, and a domain without cells and without <acpi/>
 * needs both fixed before it can be planned.  True when the domain is not
 * eligible (the plan is complete: refused under the strict policies,
 * else skipped with a warning). */
static bool plan_ineligible(const struct domain *d, struct plan *p) {
        struct strbuf why = {0}, fix = {0};
        if (d->n_cells == 0) {
                strbuf_append(&why, "the domain has no guest NUMA cells (<cpu><numa>)");
                strbuf_append(&fix, "give it guest NUMA cells (<cpu><numa><cell>), each pinned to a host node "
                                    "(<numatune><memnode>)");
        }
        if (!d->q35) {
                strbuf_printf(&why, "%smachine type '%s' is not q35 (pcie-expander-bus needs q35)", why.len ? "; " : "",
                              d->machine ? d->machine : "default (pc)");
                strbuf_printf(&fix, "%suse machine type q35 (<os><type machine='q35'>)", fix.len ? "; " : "");
        }
        if (!d->acpi) {
                strbuf_printf(&why, "%sACPI is off (<features><acpi/> is missing), so the guest could not see the "
                              "expander buses' NUMA nodes", why.len ? "; " : "");
                strbuf_printf(&fix, "%sadd <acpi/> to <features>", fix.len ? "; " : "");
        }
        if (!why.len)
                return false;
        p->reason = strbuf_steal(&why);
        int cause = add_cause(p, true, fix.buf, p->reason);
        strbuf_done(&fix);
        bool strict = p->mode == POLICY_REQUIRE || p->mode == POLICY_SOCKET;
        p->verdict = strict ? PLAN_REFUSED : PLAN_SKIP;
        for (size_t i = 0; i < p->n_devices; i++) {
                p->devices[i].action = strict ? PLAN_REFUSE : PLAN_STAY;
                p->devices[i].cause = cause;
                set_reason(&p->devices[i], "%s", p->reason);
        }
        if (!strict)
                add_warning(p, "domain left untouched: %s", p->reason);
        return true;
}

/* The I/O windows the moved devices need do not fit the guest's I/O
 * space (check_io_ports): the plan is refused, and so is every moved
 * device with an I/O BAR. */
static void refuse_io_ports(struct plan *p) {
        p->verdict = PLAN_REFUSED;
        p->reason = xstrdup(p->io_note);
        int cause = add_cause(p, true, "pass fewer devices with I/O BARs to one domain, or VFs without I/O BARs, or "
                                       "set io_port_check to false for it", p->io_note);
        for (size_t i = 0; i < p->n_devices; i++)
                if (p->devices[i].action == PLAN_MOVE && p->devices[i].io_bars) {
                        p->devices[i].action = PLAN_REFUSE;
                        p->devices[i].cause = cause;
                        set_reason(&p->devices[i], "it has an I/O BAR and %s", p->io_note);
                }
}

/* Decide each device's cell and check what the moves share (slots, I/O
 * space).  True when the plan ends here: refused, or no device moves. */
static bool plan_placement(const struct domain *d, const struct hostmap *h, struct plan *p) {
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

/* Lay out the expander buses and ports.  True when they do not fit (the
 * plan is complete: the moved devices are refused under the strict
 * policies, else stay, with a warning). */
static bool plan_layout_fails(const struct domain *d, struct plan *p) {
        if (layout(d, p) >= 0)
                return false;
        bool strict = p->mode == POLICY_REQUIRE || p->mode == POLICY_SOCKET;
        p->verdict = strict ? PLAN_REFUSED : PLAN_SKIP;
        int cause = add_cause(p, true, "remove spare pcie-root-port controllers and expander buses added by hand, "
                                       "or pass fewer devices to one domain", p->reason);
        for (size_t i = 0; i < p->n_devices; i++)
                if (p->devices[i].action == PLAN_MOVE) {
                        p->devices[i].action = strict ? PLAN_REFUSE : PLAN_STAY;
                        p->devices[i].cause = cause;
                        set_reason(&p->devices[i], "%s", p->reason);
                        p->devices[i].port_index = -1;
                }
        clear_layout(p);
        if (!strict)
                add_warning(p, "domain left untouched: %s", p->reason);
        return true;
}

/* The plan for a domain: describe its devices, then each step in turn
 * until one completes the plan; a domain that gets the new topology also
 * gets its distances, 64-bit MMIO window, managed settings and GPUDirect
 * cliques planned. */
static int plan_domain(const struct domain *d, const struct hostmap *h, const struct policy_settings *s,
                       const struct planner_options *o, struct plan **ret) {
        _cleanup_plan_ struct plan *p = xcalloc(1, sizeof(*p));
        p->mode = s->mode;
        p->settings = *s;
        p->first_index = -1;
        p->busnr_limit = BUSNR_TOP;
        p->cells_desc = describe_cells(d, h);

        for (size_t i = 0; i < d->n_hostdevs; i++)
                describe_device(d, h, i, GROW(p->devices, p->n_devices));

        if (plan_untouched(p) || plan_ineligible(d, p) || plan_placement(d, h, p) || plan_layout_fails(d, p)) {
                *ret = TAKE_PTR(p);
                return 0;
        }
        if (p->mode == POLICY_PREFERRED)
                warn_not_local(d, h, p);
        p->verdict = PLAN_APPLY;
        plan_distances(d, h, p);
        plan_mmio64(d, p);
        plan_managed(d, p, o);
        plan_cliques(d, h, p);
        *ret = TAKE_PTR(p);
        return 0;
}

const char *plan_path_to_string(enum plan_path t) {
        static const char *const names[] = { "PIX", "PXB", "PHB", "NODE", "SYS", "?" };
        return t <= PLAN_PATH_UNKNOWN ? names[t] : "?";
}

/* Inlined into plan_fidelity's loop: it runs for every pair. */
static inline enum plan_path path_type(const struct plan_path_end *a, const struct plan_path_end *b) {
        if (a->root < 0 || b->root < 0 || a->root != b->root) {
                if (a->node >= 0 && b->node >= 0 && a->node != b->node)
                        return PLAN_PATH_SYS;
                if (a->root < 0 || b->root < 0)
                        return PLAN_PATH_UNKNOWN;
                return a->node >= 0 && a->node == b->node ? PLAN_PATH_NODE : PLAN_PATH_SYS;
        }
        size_t c = 0;
        while (c < a->n_chain && c < b->n_chain && a->chain[c] == b->chain[c])
                c++;
        if (c == 0)
                return PLAN_PATH_PHB;
        /* Below the deepest shared bridge, one more bridge each at most:
         * the ports of one switch (or functions behind one port). */
        if (a->n_chain <= c + 1 && b->n_chain <= c + 1)
                return PLAN_PATH_PIX;
        return PLAN_PATH_PXB;
}

enum plan_path planner_path_type(const struct plan_path_end *a, const struct plan_path_end *b) {
        return path_type(a, b);
}

/* The guest end of device i: its expander bus, cell and ports from the
 * root port down; a device that does not move is on pcie.0, which has no
 * NUMA node in the guest. */
#define GUEST_PCIE0_ROOT 0x7fffffffL
static void guest_end(const struct plan *p, const long *pos_of, size_t i, uint64_t *chain, size_t cap,
                      struct plan_path_end *e) {
        const struct plan_device *pd = &p->devices[i];
        *e = (struct plan_path_end) { .root = GUEST_PCIE0_ROOT, .node = -1, .chain = chain };
        if (pd->action != PLAN_MOVE || pd->port_index < 0)
                return;
        size_t n = 0;
        int idx = pd->port_index;
        while (n < cap && idx >= 0 && idx <= 255 && pos_of[idx] >= 0) {
                const struct plan_port *port = &p->ports[pos_of[idx]];
                chain[n++] = (uint64_t) port->index;
                e->root = port->pxb_index;
                if (port->parent_index == port->pxb_index)
                        break;
                idx = port->parent_index;
        }
        for (size_t k = 0; k < n / 2; k++) {
                uint64_t t = chain[k];
                chain[k] = chain[n - 1 - k];
                chain[n - 1 - k] = t;
        }
        e->n_chain = n;
        e->node = pd->cell;
}

void planner_fidelity(struct plan *p) {
        size_t n = p->n_devices;
        if (p->fidelity_done)
                return;
        p->fidelity_done = true;
        if (n < 2)
                return;
        if (n > PLAN_FIDELITY_MAX_DEVICES) {
                p->fidelity_skipped = true;
                return;
        }
        /* A guest chain is no deeper than the host's (a root port per
         * device where there is none). */
        size_t max_up = 1;
        for (size_t i = 0; i < n; i++)
                if (p->devices[i].n_host_up > max_up)
                        max_up = p->devices[i].n_host_up;
        long pos_of[256];
        for (size_t k = 0; k < ELEMENTSOF(pos_of); k++)
                pos_of[k] = -1;
        for (size_t k = 0; k < p->n_ports; k++)
                if (p->ports[k].index >= 0 && p->ports[k].index <= 255)
                        pos_of[p->ports[k].index] = (long) k;
        _cleanup_free_ uint64_t *host = xcalloc(n * max_up, sizeof(uint64_t));
        _cleanup_free_ uint64_t *guest = xcalloc(n * max_up, sizeof(uint64_t));
        _cleanup_free_ struct plan_path_end *he = xcalloc(n, sizeof(*he));
        _cleanup_free_ struct plan_path_end *ge = xcalloc(n, sizeof(*ge));
        for (size_t i = 0; i < n; i++) {
                const struct plan_device *pd = &p->devices[i];
                for (size_t k = 0; k < pd->n_host_up; k++)
                        host[i * max_up + k] = pack_addr(&pd->host_up[k]);
                he[i] = (struct plan_path_end) { .root = pd->host_root, .node = pd->host_node, .chain = &host[i * max_up],
                                                 .n_chain = pd->n_host_up };
                guest_end(p, pos_of, i, &guest[i * max_up], max_up, &ge[i]);
        }
        p->pairs = xmalloc(n * (n - 1) / 2 * sizeof(*p->pairs));   /* every entry is set below */
        for (size_t a = 0; a < n; a++)
                for (size_t b = a + 1; b < n; b++) {
                        struct plan_pair *q = &p->pairs[p->n_pairs++];
                        q->a = a;
                        q->b = b;
                        q->host = path_type(&he[a], &he[b]);
                        q->guest = path_type(&ge[a], &ge[b]);
                        if (q->host == PLAN_PATH_UNKNOWN || q->guest == PLAN_PATH_UNKNOWN)
                                p->n_unknown++;
                        else if (q->guest == q->host)
                                p->n_same++;
                        else if (q->guest < q->host)
                                p->n_closer++;
                        else
                                p->n_farther++;
                }
}

/* Every refused or staying device has a cause: one of its own (its
 * reason) where the planner named none. */
static void finish_causes(struct plan *p) {
        if (p->mode == POLICY_OFF)
                return;
        for (size_t i = 0; i < p->n_devices; i++) {
                struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE && pd->cause < 0 && pd->reason)
                        pd->cause = add_cause(p, false, NULL, pd->reason);
        }
}

int planner_run_opts(const struct domain *d, const struct hostmap *h, const struct policy_settings *s,
                     const struct planner_options *o, struct plan **ret) {
        int r = plan_domain(d, h, s, o, ret);
        if (r >= 0)
                finish_causes(*ret);
        return r;
}

static const struct domain_hostdev *find_same_hostdev(const struct domain *d, const struct domain_hostdev *hd) {
        for (size_t i = 0; i < d->n_hostdevs; i++) {
                const struct domain_hostdev *o = &d->hostdevs[i];
                if (o->kind != hd->kind)
                        continue;
                if (hd->kind == DOMAIN_HOSTDEV_MDEV ? streq(o->mdev_uuid, hd->mdev_uuid) : pci_addr_eq(&o->host, &hd->host))
                        return o;
        }
        return NULL;
}

static const struct plan_port *find_port(const struct plan *p, int index) {
        for (size_t k = 0; k < p->n_ports; k++)
                if (p->ports[k].index == index)
                        return &p->ports[k];
        return NULL;
}

/* Pair planned controller index 'want' with the current domain's 'have':
 * each planned controller must stand for one current controller and the
 * other way round (map: NULL checks the shape only). */
static bool bind(int *map, int want, int have) {
        if (!map)
                return true;
        if (want < 0 || want > 255 || have < 0 || have > 255)
                return false;
        int *fwd = map, *rev = map + 256;
        if (fwd[want] < 0 && rev[have] < 0) {
                fwd[want] = have;
                rev[have] = want;
        }
        return fwd[want] == have && rev[have] == want;
}

/* Is device hd of 'cur' where plan device pd wants it?  A moved device
 * sits at slot 0 with its planned function on a port whose chain of
 * controllers up to an expander bus of its cell has the planned models
 * (root port, switch upstream and downstream ports), whatever their
 * indexes. */
static bool in_place(const struct domain *cur, const struct domain_hostdev *hd, const struct domain_hostdev *bhd,
                     const struct plan *p, const struct plan_device *pd, int *map) {
        if (pd->action == PLAN_STAY)
                return hd->has_guest_addr == bhd->has_guest_addr && (!hd->has_guest_addr || pci_addr_eq(&hd->guest, &bhd->guest));
        if (pd->action != PLAN_MOVE)
                return true;
        if (!hd->has_guest_addr || hd->guest.domain != 0 || hd->guest.slot != 0 || hd->guest.func != pd->guest.func)
                return false;
        int have = hd->guest.bus;
        const struct plan_port *want = find_port(p, pd->port_index);
        for (size_t guard = 0; want && guard <= p->n_ports; guard++) {
                const struct domain_controller *c = domain_find_controller(cur, have);
                if (!c || !c->has_addr || c->addr.domain != 0 || !streq(c->model, want->model) || !bind(map, want->index, have))
                        return false;
                have = c->addr.bus;
                if (want->parent_index == want->pxb_index) {
                        const struct domain_controller *pxb = domain_find_controller(cur, have);
                        if (!pxb || !streq(pxb->model, "pcie-expander-bus") || pxb->node != pd->cell ||
                            !bind(map, want->pxb_index, have))
                                return false;
                        /* Nothing but the planned functions on its port. */
                        unsigned planned = 0, there = 0;
                        for (size_t k = 0; k < p->n_devices; k++)
                                planned += p->devices[k].action == PLAN_MOVE && p->devices[k].port_index == pd->port_index;
                        for (size_t u = 0; u < cur->n_pci_uses; u++)
                                there += cur->pci_uses[u].addr.domain == 0 && cur->pci_uses[u].addr.bus == hd->guest.bus;
                        return planned == there;
                }
                want = find_port(p, want->parent_index);
        }
        return false;
}

bool planner_matches(const struct domain *cur, const struct domain *base, const struct plan *p) {
        if (p->verdict != PLAN_APPLY || cur->n_hostdevs != base->n_hostdevs)
                return false;
        int map[512];
        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                map[i] = -1;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *bhd = &base->hostdevs[pd->hostdev];
                const struct domain_hostdev *hd = find_same_hostdev(cur, bhd);
                if (!hd || !in_place(cur, hd, bhd, p, pd, map))
                        return false;
        }
        return true;
}

static char *describe_location(const struct domain *d, const struct domain_hostdev *hd) {
        if (!hd->has_guest_addr)
                return xstrdup("has no PCI address yet");
        if (hd->guest.domain == 0 && hd->guest.bus == 0)
                return xasprintf("is on pcie.0 slot 0x%02x", hd->guest.slot);
        const struct domain_controller *c = domain_find_controller(d, hd->guest.bus);
        if (!c)
                return xasprintf("is on bus 0x%02x", hd->guest.bus);
        const struct domain_controller *parent = c->has_addr && c->addr.bus != 0 ? domain_find_controller(d, c->addr.bus) : NULL;
        if (parent && streq(parent->model, "pcie-expander-bus"))
                return xasprintf("is on %s %d under expander bus %d (guest cell %d)", c->model[0] ? c->model : "controller",
                                 c->index, parent->index, parent->node);
        return xasprintf("is on %s %d on pcie.0", c->model[0] ? c->model : "controller", c->index);
}

char *planner_mismatch(const struct domain *cur, const struct domain *base, const struct plan *p) {
        struct strbuf b = {0};
        size_t n_out = 0, n_more = 0;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                const struct domain_hostdev *bhd = &base->hostdevs[pd->hostdev];
                const struct domain_hostdev *hd = find_same_hostdev(cur, bhd);
                if (!hd)
                        continue;
                if (in_place(cur, hd, bhd, p, pd, NULL))
                        continue;
                /* A few examples say enough; the explain output has all. */
                if (++n_out > 4) {
                        n_more++;
                        continue;
                }
                _cleanup_free_ char *where = describe_location(cur, hd);
                if (b.len)
                        strbuf_append(&b, "; ");
                if (pd->action == PLAN_MOVE)
                        strbuf_printf(&b, "%s %s, the plan puts it on guest cell %d", pd->name, where, pd->cell);
                else
                        strbuf_printf(&b, "%s %s, the plan leaves it where it was", pd->name, where);
        }
        if (n_more)
                strbuf_printf(&b, "; and %zu more device%s", n_more, n_more == 1 ? "" : "s");
        return b.len ? strbuf_steal(&b) : NULL;
}

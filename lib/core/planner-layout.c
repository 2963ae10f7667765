/* The planner's layout (docs/design.md §7; docs/planner.md, "The budget"):
 * the expander buses, the guest port tree that mirrors the host's, the
 * controller indexes, the pcie.0 slots, the bus numbers and the guest
 * BDFs, laid out whole and checked against the guest's limits before
 * anything is written.  layout_once() runs the phases in order; a layout
 * that does not fit is cut down in the documented order (degrade()), and
 * plan_layout_fails() completes a plan that does not fit at all. */
#include "planner-internal.h"

#define PXB_SLOTS 32

/* Forget the expander buses, root ports and pruning of a plan. */
void plan_clear_layout(struct plan *p) {
        for (size_t i = 0; i < p->n_pxbs; i++)
                free(p->pxbs[i].host_nodes);
        CLEAR_ARRAY(p->pxbs, p->n_pxbs);
        CLEAR_ARRAY(p->ports, p->n_ports);
        CLEAR_ARRAY(p->pruned, p->n_pruned);
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
                                plan_unit_key(d, p, j) == unit;
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
                uint64_t unit = plan_unit_key(d, p, i);
                size_t m = mirror_depth(d, p, shape, i, root, unit);
                int parent = -1;
                for (size_t k = 0; k + 1 < m; k++) {
                        const char *model = k == 0 ? PLAN_ROOT_PORT : k % 2 ? PLAN_SWITCH_UP : PLAN_SWITCH_DOWN;
                        /* One upstream port per parent: a port's link holds one switch. */
                        uint64_t key = k % 2 ? 0 : plan_pack_addr(&pd->host_up[k]);
                        parent = (int) find_or_add_node(&t->nodes, &t->n_nodes, t->roots, parent, x, model, key, 0);
                }
                const char *model = m <= 1 ? PLAN_ROOT_PORT : PLAN_SWITCH_DOWN;
                uint64_t key = m ? plan_pack_addr(&pd->host_up[m - 1]) : unit;
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
        plan_clear_layout(p);
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

/* Lay out the expander buses and ports.  True when they do not fit (the
 * plan is complete: the moved devices are refused under the strict
 * policies, else stay, with a warning). */
bool plan_layout_fails(const struct domain *d, struct plan *p) {
        if (layout(d, p) >= 0)
                return false;
        bool strict = p->mode == POLICY_REQUIRE || p->mode == POLICY_SOCKET;
        p->verdict = strict ? PLAN_REFUSED : PLAN_SKIP;
        int cause = plan_add_cause(p, true, "remove spare pcie-root-port controllers and expander buses added by hand, "
                                       "or pass fewer devices to one domain", p->reason);
        for (size_t i = 0; i < p->n_devices; i++)
                if (p->devices[i].action == PLAN_MOVE) {
                        p->devices[i].action = strict ? PLAN_REFUSE : PLAN_STAY;
                        p->devices[i].cause = cause;
                        plan_set_reason(&p->devices[i], "%s", p->reason);
                        p->devices[i].port_index = -1;
                }
        plan_clear_layout(p);
        if (!strict)
                plan_add_warning(p, "domain left untouched: %s", p->reason);
        return true;
}

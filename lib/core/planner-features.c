/* The planner's feature switches beyond placement (docs/planner.md,
 * "Beyond placement: the feature switches"), planned for a domain that
 * gets the new topology: the guest cells' distances (mirror_distances),
 * the 64-bit MMIO window (mmio64), managed='no' for VFIO variant drivers
 * (managed) and GPUDirect clique ids (gpudirect_clique).  Each says what
 * it did, or why not, in a note of the plan. */
#include "planner-internal.h"

#include <inttypes.h>
#include <limits.h>

#include "fingerprint.h"

/* --- mirror_distances ----------------------------------------------------- */

/* mirror_distances (on by default): copy the host SLIT between the nodes
 * backing each pair of cells into <cell><distances>, unless the domain
 * sets its own. */
void plan_distances(const struct domain *d, const struct hostmap *h, struct plan *p) {
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

/* --- mmio64 --------------------------------------------------------------- */

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
                plan_add_warning(p, "64-bit MMIO: the devices need %s (%s), a %s window, but a guest CPU with %u physical "
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
void plan_mmio64(const struct domain *d, struct plan *p) {
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
                        plan_add_warning(p, "64-bit MMIO: the devices' 64-bit BARs need %s, packed largest first (%s), more than "
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

/* --- managed -------------------------------------------------------------- */

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
void plan_managed(const struct domain *d, struct plan *p, const struct planner_options *o) {
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
                        plan_add_warning(p, "%s has managed='no' but is bound to the host driver %s: libvirt will not rebind "
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
        uint64_t x = plan_pack_addr(a), y = plan_pack_addr(b);
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

/* The clique candidates of p (*ret_n of them): its NVIDIA GPUs that are
 * PCI hostdevs (not mdevs, not <interface>s) behind a host switch, the
 * GPUs of one switch together. */
static struct clique_gpu *clique_gpus(const struct domain *d, const struct hostmap *h, const struct plan *p,
                                      size_t *ret_n) {
        struct clique_gpu *gpus = NULL;
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
        *ret_n = n;
        return gpus;
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
void plan_cliques(const struct domain *d, const struct hostmap *h, struct plan *p) {
        if (!p->settings.gpudirect_clique_auto)
                return;
        size_t n = 0;
        _cleanup_free_ struct clique_gpu *gpus = clique_gpus(d, h, p, &n);

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
                plan_add_warning(p, "gpudirect_clique: %u groups of GPUs behind one host switch, but QEMU's clique ids are 0-%d: "
                            "the last %u groups get no clique id", n_g, PLAN_CLIQUE_MAX - 1, dropped);
        if (p->n_cliques)
                p->clique_note = xasprintf("gpudirect_clique: %u GPUs in %u cliques (NVIDIA GPUs behind one host switch share an id)",
                                           in_cliques, n_g < PLAN_CLIQUE_MAX ? n_g : PLAN_CLIQUE_MAX);
        else
                p->clique_note = xasprintf("gpudirect_clique: no clique: no two NVIDIA GPUs sit behind one host switch");
}

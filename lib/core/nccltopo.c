/* The NCCL topology file of a planned guest or of the host (nccltopo.h
 * says what NCCL reads and why each part is there).  Built in two steps:
 * every wanted device's path becomes a chain of <pci> nodes merged by
 * busid (NCCL's two-levels-up rule applied to the path), then the tree is
 * written cell by cell, siblings ordered by busid. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccltopo.h"
#include "util.h"

bool nccltopo_wanted(uint32_t class, uint16_t vendor) {
        /* A display controller of any subclass (VGA, 3D, other) counts only
         * from NVIDIA: NCCL drives nothing else, and a BMC's VGA (ASPEED
         * 1a03:2000) must not give a domain a <qemu:commandline>. */
        if ((class >> 16) == 0x03)
                return vendor == NCCLTOPO_VENDOR_NVIDIA;
        switch (class >> 8) {
        case 0x0207:
                return true;
        case 0x0200:
                return vendor == 0x15b3 || vendor == 0x1d0f;
        default:
                return false;
        }
}

/* One <pci> element. */
struct tnode {
        char busid[PCI_ADDR_STRLEN];
        uint32_t class;                 /* 0: not written */
        uint16_t vendor, device;        /* vendor 0: vendor and device not written */
        const char *link_speed;         /* "" or NULL: not written */
        unsigned link_width;            /* 0: not written */
        long parent;                    /* index into the tree, or -1: below the <cpu> */
        int cpu;                        /* the <cpu>'s numaid, for parent == -1 */
};

struct tree {
        struct tnode *v;
        size_t n;
};

/* A path element, top first: its busid and the host device whose identity
 * and link it carries (NULL: a bridge of the guest's own, written with its
 * class only). */
struct hop {
        char busid[PCI_ADDR_STRLEN];
        const struct hostmap_device *host;
        uint32_t class;
};

static long tree_find(const struct tree *t, const char *busid) {
        for (size_t i = 0; i < t->n; i++)
                if (streq(t->v[i].busid, busid))
                        return (long) i;
        return -1;
}

static long tree_add(struct tree *t, const struct hop *h) {
        long i = tree_find(t, h->busid);
        if (i >= 0)
                return i;
        struct tnode *n = GROW(t->v, t->n);
        snprintf(n->busid, sizeof n->busid, "%s", h->busid);
        n->class = h->class;
        if (h->host) {
                if (!n->class)
                        n->class = h->host->class;
                n->vendor = h->host->vendor;
                n->device = h->host->device;
                n->link_speed = h->host->link_speed;
                n->link_width = h->host->link_width;
        }
        n->parent = -1;
        return (long) (t->n - 1);
}

/* Place a device (hops[n]) below the bridges hops[0..n) (the root port
 * first), as NCCL does from the sysfs path: a node's parent is the bridge
 * two levels above it, and a node less than two levels below the host
 * bridge sits under the <cpu>. */
static void tree_place(struct tree *t, const struct hop *hops, size_t n, int cpu) {
        long cur = tree_add(t, &hops[n]);
        size_t k = n;
        while (k >= 2) {
                long up = tree_add(t, &hops[k - 2]);
                t->v[cur].parent = up;
                cur = up;
                k -= 2;
        }
        t->v[cur].parent = -1;
        t->v[cur].cpu = cpu;
}

static int cmp_busid(const void *a, const void *b) {
        const struct tnode *const *x = a, *const *y = b;
        return strcmp((*x)->busid, (*y)->busid);
}

static void write_children(struct strbuf *b, const struct tree *t, long parent, int cpu, unsigned depth) {
        _cleanup_free_ const struct tnode **kids = xcalloc(t->n ? t->n : 1, sizeof(*kids));
        size_t nk = 0;
        for (size_t i = 0; i < t->n; i++)
                if (t->v[i].parent == parent && (parent >= 0 || t->v[i].cpu == cpu))
                        kids[nk++] = &t->v[i];
        qsort(kids, nk, sizeof(*kids), cmp_busid);
        for (size_t i = 0; i < nk; i++) {
                const struct tnode *n = kids[i];
                char num[16];
                strbuf_printf(b, "%*s<pci", (int) depth * 2, "");
                strbuf_xml_attr(b, "busid", n->busid);
                if (n->class) {
                        snprintf(num, sizeof num, "0x%06x", (unsigned) n->class);
                        strbuf_xml_attr(b, "class", num);
                }
                if (n->vendor) {
                        snprintf(num, sizeof num, "0x%04x", (unsigned) n->vendor);
                        strbuf_xml_attr(b, "vendor", num);
                        snprintf(num, sizeof num, "0x%04x", (unsigned) n->device);
                        strbuf_xml_attr(b, "device", num);
                }
                if (n->link_speed && n->link_speed[0])
                        strbuf_xml_attr(b, "link_speed", n->link_speed);
                if (n->link_width) {
                        snprintf(num, sizeof num, "%u", n->link_width);
                        strbuf_xml_attr(b, "link_width", num);
                }
                bool leaf = true;
                for (size_t j = 0; j < t->n && leaf; j++)
                        leaf = t->v[j].parent != n - t->v;
                if (leaf) {
                        strbuf_append(b, "/>\n");
                        continue;
                }
                strbuf_append(b, ">\n");
                write_children(b, t, n - t->v, cpu, depth + 1);
                strbuf_printf(b, "%*s</pci>\n", (int) depth * 2, "");
        }
}

static void write_cpu(struct strbuf *b, const struct tree *t, int numaid, const struct bitmap *cpus,
                      const struct nccltopo_cpu *cpu) {
        char num[16];
        strbuf_append(b, "  <cpu");
        snprintf(num, sizeof num, "%d", numaid);
        strbuf_xml_attr(b, "numaid", num);
        if (cpus) {
                struct strbuf m = {0};
                strbuf_bitmap_words(&m, cpus, "");
                strbuf_xml_attr(b, "affinity", m.buf);
                strbuf_done(&m);
        }
        if (cpu && cpu->arch)
                strbuf_xml_attr(b, "arch", cpu->arch);
        if (cpu && cpu->vendor)
                strbuf_xml_attr(b, "vendor", cpu->vendor);
        if (cpu && cpu->family >= 0) {
                snprintf(num, sizeof num, "%d", cpu->family);
                strbuf_xml_attr(b, "familyid", num);
        }
        if (cpu && cpu->model >= 0) {
                snprintf(num, sizeof num, "%d", cpu->model);
                strbuf_xml_attr(b, "modelid", num);
        }
        bool empty = true;
        for (size_t i = 0; i < t->n && empty; i++)
                empty = !(t->v[i].parent < 0 && t->v[i].cpu == numaid);
        if (empty) {
                strbuf_append(b, "/>\n");
                return;
        }
        strbuf_append(b, ">\n");
        write_children(b, t, -1, numaid, 2);
        strbuf_append(b, "  </cpu>\n");
}

/* The guest path of a moved device, top first, ending with the device:
 * hops[0..n]; n = the bridges above it.  false when a bus number is not
 * predicted. */
static bool guest_path(const struct plan *p, const struct plan_device *pd, const struct hostmap_device *hdev,
                       const struct hostmap *h, struct hop *hops, size_t max, size_t *ret_n) {
        struct hop up[8];
        size_t n = 0;
        for (const struct plan_port *port = plan_find_port(p, pd->port_index); port;
             port = plan_find_port(p, port->parent_index)) {
                if (n == ELEMENTSOF(up) || n + 1 >= max)
                        return false;
                int bus;
                const struct plan_port *parent = plan_find_port(p, port->parent_index);
                if (parent)
                        bus = parent->sec_bus;
                else {
                        const struct plan_pxb *x = plan_find_pxb(p, port->parent_index);
                        bus = x ? x->bus_nr : 0;
                }
                if (bus <= 0 || bus > 255)
                        return false;
                struct hop *o = &up[n++];
                snprintf(o->busid, sizeof o->busid, "0000:%02x:%02x.%u", (unsigned) bus, port->slot, port->func);
                o->class = 0x060400;
                o->host = streq(port->model, PLAN_SWITCH_UP) && pd->has_host_switch
                                  ? hostmap_find_device(h, &pd->host_switch)
                                  : NULL;
        }
        for (size_t i = 0; i < n; i++)
                hops[i] = up[n - 1 - i];
        /* A guest path as deep as the host's mirrors it bridge for bridge
         * (mirror_switches): each port carries its host bridge's identity
         * and link. */
        if (hdev && hdev->n_upstream == n)
                for (size_t i = 0; i < n; i++) {
                        hops[i].host = hostmap_find_device(h, &hdev->upstream[i]);
                        hops[i].class = hops[i].host ? 0 : 0x060400;
                }
        struct hop *dev = &hops[n];
        snprintf(dev->busid, sizeof dev->busid, "%s", pd->guest_bdf);
        dev->host = hdev;
        dev->class = 0;
        *ret_n = n;
        return true;
}

/* NCCL's XML reader holds at most MAX_SUBS (128) children per element
 * and fails to load the file otherwise. */
#define NCCL_MAX_SUBS 128

static bool too_wide(const struct tree *t, char **ret_reason) {
        _cleanup_free_ size_t *kids = xcalloc(t->n + 1, sizeof(*kids));
        for (size_t i = 0; i < t->n; i++) {
                long up = t->v[i].parent;
                if (up >= 0 && ++kids[up] > NCCL_MAX_SUBS) {
                        *ret_reason = xasprintf("more than %d devices below bridge %s, and NCCL reads at most %d "
                                                "below one element (its MAX_SUBS)",
                                                NCCL_MAX_SUBS, t->v[up].busid, NCCL_MAX_SUBS);
                        return true;
                }
        }
        for (size_t i = 0; i < t->n; i++) {
                if (t->v[i].parent >= 0)
                        continue;
                size_t m = 0;
                for (size_t j = 0; j < t->n; j++)
                        m += t->v[j].parent < 0 && t->v[j].cpu == t->v[i].cpu;
                if (m > NCCL_MAX_SUBS) {
                        *ret_reason = xasprintf("%zu devices below NUMA node %d, and NCCL reads at most %d below "
                                                "one element (its MAX_SUBS)", m, t->v[i].cpu, NCCL_MAX_SUBS);
                        return true;
                }
        }
        return false;
}

/* A <cpu> of the file: its numaid and CPUs (NULL: no affinity). */
struct cpu_ref {
        int id;
        const struct bitmap *cpus;
};

/* Write tree t below the <cpu>s, and free it.  0, or NCCLTOPO_NOT_PLACED
 * when NCCL could not load the file. */
static int emit(struct tree *t, const struct cpu_ref *cpus, size_t n, const struct nccltopo_cpu *cpu,
                char **ret_xml, char **ret_reason) {
        if (too_wide(t, ret_reason)) {
                free(t->v);
                return NCCLTOPO_NOT_PLACED;
        }
        struct strbuf b = {0};
        strbuf_append(&b, "<system version=\"1\">\n");
        for (size_t k = 0; k < n; k++)
                write_cpu(&b, t, cpus[k].id, cpus[k].cpus, cpu);
        strbuf_append(&b, "</system>\n");
        free(t->v);
        *ret_xml = strbuf_steal(&b);
        return 0;
}

int nccltopo_guest(const struct plan *p, const struct domain *d, const struct hostmap *h,
                   const struct nccltopo_cpu *cpu, char **ret_xml, char **ret_reason) {
        struct tree t = {0};
        size_t wanted = 0, placed = 0;

        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                bool is_mdev = d->hostdevs[pd->hostdev].kind == DOMAIN_HOSTDEV_MDEV;
                const struct hostmap_device *hdev = plan_host_device(h, &d->hostdevs[pd->hostdev]);
                if (!hdev || !nccltopo_wanted(hdev->class, hdev->vendor))
                        continue;
                wanted++;
                struct hop hops[10];
                size_t n;
                if (pd->action != PLAN_MOVE || pd->cell < 0 || !pd->guest_bdf[0] ||
                    !guest_path(p, pd, hdev, h, hops, ELEMENTSOF(hops), &n))
                        continue;
                if (is_mdev) {
                        /* The guest sees the mdev's own IDs, not its parent's. */
                        hops[n].class = hdev->class;
                        hops[n].host = NULL;
                }
                tree_place(&t, hops, n, pd->cell);
                if (is_mdev) {
                        long k = tree_find(&t, hops[n].busid);
                        t.v[k].link_speed = hdev->link_speed;
                        t.v[k].link_width = hdev->link_width;
                }
                placed++;
        }

        if (placed == 0) {
                free(t.v);
                if (wanted == 0) {
                        *ret_reason = xstrdup("the domain has no GPU or RDMA NIC among its passthrough devices "
                                              "(NCCL's topology file describes only those)");
                        return NCCLTOPO_NONE;
                }
                *ret_reason = xasprintf("the plan places none of the domain's %zu GPU%s and RDMA NICs on the "
                                        "guest's expander buses (%s)",
                                        wanted, wanted > 1 ? "s" : "",
                                        p->reason ? p->reason
                                                  : p->verdict == PLAN_APPLY ? "they stay on pcie.0"
                                                                             : "the plan changes nothing");
                return NCCLTOPO_NOT_PLACED;
        }

        _cleanup_free_ struct cpu_ref *cells = xcalloc(d->n_cells + 1, sizeof(*cells));
        for (size_t c = 0; c < d->n_cells; c++)
                cells[c] = (struct cpu_ref) { (int) d->cells[c].id, &d->cells[c].cpus };
        return emit(&t, cells, d->n_cells, cpu, ret_xml, ret_reason);
}

int nccltopo_host(const struct hostmap *h, const struct nccltopo_cpu *cpu, char **ret_xml, char **ret_reason) {
        struct tree t = {0};
        bool orphan = false;

        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *dev = &h->devices[i];
                if (!nccltopo_wanted(dev->class, dev->vendor))
                        continue;
                size_t n = dev->n_upstream;
                _cleanup_free_ struct hop *hops = xcalloc(n + 1, sizeof(*hops));
                for (size_t k = 0; k < n; k++) {
                        pci_addr_format(&dev->upstream[k], hops[k].busid);
                        hops[k].host = hostmap_find_device(h, &dev->upstream[k]);
                        hops[k].class = hops[k].host ? 0 : 0x060400;
                }
                snprintf(hops[n].busid, sizeof hops[n].busid, "%s", dev->name);
                hops[n].host = dev;
                tree_place(&t, hops, n, dev->node);
                orphan |= dev->node < 0;
        }
        if (t.n == 0) {
                *ret_reason = xstrdup("the host has no GPU or RDMA NIC (NCCL's topology file describes only those)");
                return NCCLTOPO_NONE;
        }

        /* Devices without a node sit under a <cpu numaid="-1">, as NCCL
         * writes them. */
        _cleanup_free_ struct cpu_ref *nodes = xcalloc(h->n_nodes + 1, sizeof(*nodes));
        for (size_t k = 0; k < h->n_nodes; k++)
                nodes[k] = (struct cpu_ref) { h->nodes[k].id, &h->nodes[k].cpus };
        if (orphan)
                nodes[h->n_nodes] = (struct cpu_ref) { -1, NULL };
        return emit(&t, nodes, h->n_nodes + orphan, cpu, ret_xml, ret_reason);
}

bool nccltopo_cpu_from_host(const struct hostmap_cpu_id *id, struct nccltopo_cpu *ret) {
        if (!id->arch[0])
                return false;
        *ret = (struct nccltopo_cpu) {
                .arch = id->arch, .vendor = id->vendor[0] ? id->vendor : NULL,
                .family = id->vendor[0] ? id->family : -1, .model = id->vendor[0] ? id->model : -1,
        };
        return true;
}

char *nccltopo_fwcfg_arg(const char *xml, char **ret_reason) {
        struct strbuf b = {0};
        strbuf_append(&b, NCCLTOPO_FWCFG_PREFIX);
        for (const char *c = xml; *c; c++) {
                if (*c == ',')
                        strbuf_append(&b, ",,");
                else if (*c == '\n')
                        strbuf_append(&b, " ");
                else
                        strbuf_appendn(&b, c, 1);
        }
        /* One trailing space (the last newline) is dropped. */
        if (b.len && b.buf[b.len - 1] == ' ')
                b.buf[--b.len] = 0;
        if (b.len > NCCLTOPO_FWCFG_ARG_MAX) {
                *ret_reason = xasprintf("the NCCL topology file would make a %zu-byte QEMU argument, over the %d bytes "
                                        "Linux passes to a program", b.len, NCCLTOPO_FWCFG_ARG_MAX);
                strbuf_done(&b);
                return NULL;
        }
        return strbuf_steal(&b);
}

const struct nccltopo_cpu *nccltopo_guest_cpu(const struct domain *d, const struct hostmap *h, struct nccltopo_cpu *buf) {
        return d->cpu_is_host && nccltopo_cpu_from_host(&h->cpu_id, buf) ? buf : NULL;
}

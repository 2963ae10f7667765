/* The test host of the fingerprint and migration unit tests, built in
 * memory: a two-socket host of GPUs, NICs and VFs behind switches
 * (host_a), with a builder that can renumber it (other domain, buses,
 * host bridge names, socket ids, enumeration order) so that "the same
 * topology with other numbers" is one call, with mdevs if asked.  Include
 * after cmocka.h. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostmap.h"
#include "pciaddr.h"
#include "util.h"

/* One function of the test host.  Bus numbers are given for domain 0 and
 * shifted by the builder to renumber the host. */
struct dev_spec {
        unsigned bus, slot, func;
        int node;
        uint32_t class;
        uint16_t vendor, device;
        const char *driver;
        unsigned hb_bus;                  /* host bridge pci0000:<hb_bus> */
        unsigned up[4];                   /* buses of the bridges above (each at slot 0 ... see up_slot) */
        unsigned up_slot[4];
        size_t n_up;
        int pf_func;                      /* >= 0: a VF of function pf_func of its slot */
};

#define GPU 0x030200, 0x10de, 0x2330, "vfio-pci"
#define NIC 0x020700, 0x15b3, 0x1021, "vfio-pci"
#define VF  0x020700, 0x15b3, 0x101e, "vfio-pci"

/* Two sockets, one node each.  Each node has root complex A: a root port,
 * a switch with two GPUs and an RDMA NIC below its downstream ports; node 0
 * has root complex B: a root port with a NIC on mlx5_core and two VFs on
 * vfio-pci, and a system peripheral nobody passes through; node 1 has root
 * complex C: an NVMe drive on nvme.  Bridges are listed too, as sysfs
 * has them. */
static const struct dev_spec host_a[] = {
        /* node 0, pci0000:10 */
        { 0x10, 1, 0, 0, 0x060400, 0x8086, 0x347a, "pcieport", 0x10, {0}, {0}, 0, -1 },
        { 0x11, 0, 0, 0, 0x060400, 0x10b5, 0xc010, "pcieport", 0x10, {0x10}, {1}, 1, -1 },
        { 0x12, 0, 0, 0, 0x060400, 0x10b5, 0xc010, "pcieport", 0x10, {0x10, 0x11}, {1, 0}, 2, -1 },
        { 0x12, 1, 0, 0, 0x060400, 0x10b5, 0xc010, "pcieport", 0x10, {0x10, 0x11}, {1, 0}, 2, -1 },
        { 0x12, 2, 0, 0, 0x060400, 0x10b5, 0xc010, "pcieport", 0x10, {0x10, 0x11}, {1, 0}, 2, -1 },
        { 0x13, 0, 0, 0, GPU, 0x10, {0x10, 0x11, 0x12}, {1, 0, 0}, 3, -1 },
        { 0x14, 0, 0, 0, GPU, 0x10, {0x10, 0x11, 0x12}, {1, 0, 1}, 3, -1 },
        { 0x15, 0, 0, 0, NIC, 0x10, {0x10, 0x11, 0x12}, {1, 0, 2}, 3, -1 },
        /* node 0, pci0000:30 */
        { 0x30, 1, 0, 0, 0x060400, 0x8086, 0x347a, "pcieport", 0x30, {0}, {0}, 0, -1 },
        { 0x31, 0, 0, 0, 0x020000, 0x15b3, 0x1017, "mlx5_core", 0x30, {0x30}, {1}, 1, -1 },
        { 0x31, 0, 2, 0, VF, 0x30, {0x30}, {1}, 1, 0 },
        { 0x31, 0, 3, 0, VF, 0x30, {0x30}, {1}, 1, 0 },
        { 0x30, 2, 0, 0, 0x088000, 0x8086, 0x0b00, NULL, 0x30, {0}, {0}, 0, -1 },
        /* node 1, pci0000:90 */
        { 0x90, 1, 0, 1, 0x060400, 0x8086, 0x347a, "pcieport", 0x90, {0}, {0}, 0, -1 },
        { 0x91, 0, 0, 1, 0x060400, 0x10b5, 0xc010, "pcieport", 0x90, {0x90}, {1}, 1, -1 },
        { 0x92, 0, 0, 1, 0x060400, 0x10b5, 0xc010, "pcieport", 0x90, {0x90, 0x91}, {1, 0}, 2, -1 },
        { 0x92, 1, 0, 1, 0x060400, 0x10b5, 0xc010, "pcieport", 0x90, {0x90, 0x91}, {1, 0}, 2, -1 },
        { 0x92, 2, 0, 1, 0x060400, 0x10b5, 0xc010, "pcieport", 0x90, {0x90, 0x91}, {1, 0}, 2, -1 },
        { 0x92, 3, 0, 1, 0x060400, 0x10b5, 0xc010, "pcieport", 0x90, {0x90, 0x91}, {1, 0}, 2, -1 },
        { 0x93, 0, 0, 1, GPU, 0x90, {0x90, 0x91, 0x92}, {1, 0, 0}, 3, -1 },
        { 0x94, 0, 0, 1, GPU, 0x90, {0x90, 0x91, 0x92}, {1, 0, 1}, 3, -1 },
        { 0x95, 0, 0, 1, NIC, 0x90, {0x90, 0x91, 0x92}, {1, 0, 2}, 3, -1 },
        /* node 1, pci0000:b0 */
        { 0xb0, 1, 0, 1, 0x060400, 0x8086, 0x347a, "pcieport", 0xb0, {0}, {0}, 0, -1 },
        { 0xb1, 0, 0, 1, 0x010802, 0x144d, 0xa80a, "nvme", 0xb0, {0xb0}, {1}, 1, -1 },
};
#define N_A ELEMENTSOF(host_a)

/* How a build renumbers the host. */
struct numbering {
        uint32_t domain;
        unsigned bus_shift;               /* added to every bus, mod 256 */
        int socket_base;                  /* physical_package_id of node 0's socket */
        bool reverse;                     /* add the devices in reverse order */
        int slit_far;                     /* the distance between the nodes */
};
static const struct numbering plain = { 0, 0, 0, false, 21 };
static const struct numbering renumbered = { 2, 0x60, 7, true, 21 };

static inline struct pci_addr addr_of(const struct numbering *nb, unsigned bus, unsigned slot, unsigned func) {
        struct pci_addr a = {
                .domain = nb->domain,
                .bus = (uint8_t) ((bus + nb->bus_shift) & 0xff),
                .slot = (uint8_t) slot,
                .func = (uint8_t) func,
        };
        return a;
}

/* An mdev of the test host: its parent on the plain numbering. */
struct mdev_spec {
        const char *uuid;
        unsigned bus, slot, func;
        const char *type;
};

static inline struct hostmap *build_mdevs(const struct dev_spec *spec, size_t n, const struct numbering *nb,
                                          const struct mdev_spec *mdevs, size_t n_mdevs) {
        struct hostmap *h = hostmap_new();
        for (int id = 0; id < 2; id++) {
                struct hostmap_node *node = hostmap_add_node(h, id);
                node->socket = nb->socket_base + id * 3;
                for (unsigned c = 0; c < 8; c++)
                        bitmap_set(&node->cpus, (unsigned) id * 8 + c);
        }
        const int d0[] = { 10, nb->slit_far }, d1[] = { nb->slit_far, 10 };
        hostmap_set_distances(h, 0, d0, 2);
        hostmap_set_distances(h, 1, d1, 2);
        for (size_t k = 0; k < n; k++) {
                const struct dev_spec *s = &spec[nb->reverse ? n - 1 - k : k];
                struct pci_addr a = addr_of(nb, s->bus, s->slot, s->func);
                struct hostmap_device *d = hostmap_add_device(h, &a);
                d->sysfs_node = s->node;
                d->class = s->class;
                d->vendor = s->vendor;
                d->device = s->device;
                d->driver = s->driver ? xstrdup(s->driver) : NULL;
                struct pci_addr hb = addr_of(nb, s->hb_bus, 0, 0);
                d->host_bridge = xasprintf("pci%04x:%02x", hb.domain, hb.bus);
                d->n_upstream = s->n_up;
                d->upstream = s->n_up ? xcalloc(s->n_up, sizeof(*d->upstream)) : NULL;
                for (size_t u = 0; u < s->n_up; u++)
                        d->upstream[u] = addr_of(nb, s->up[u], s->up_slot[u], 0);
                if (s->pf_func >= 0) {
                        d->has_physfn = true;
                        d->physfn = addr_of(nb, s->bus, s->slot, (unsigned) s->pf_func);
                }
                if (s->class == 0x020700 || s->class == 0x020000)
                        d->bars[0] = (struct hostmap_bar) { HOSTMAP_BAR_MEM64, true, s->pf_func >= 0 ? 1u << 20 : 32u << 20 };
                if ((s->class >> 16) == 0x03) {
                        d->bars[0] = (struct hostmap_bar) { HOSTMAP_BAR_MEM32, false, 16u << 20 };
                        d->bars[1] = (struct hostmap_bar) { HOSTMAP_BAR_MEM64, true, UINT64_C(64) << 30 };
                }
        }
        /* The PF's VF count, as the reader sets it. */
        for (size_t k = 0; k < n; k++)
                if (spec[k].pf_func >= 0) {
                        struct pci_addr pa = addr_of(nb, spec[k].bus, spec[k].slot, (unsigned) spec[k].pf_func);
                        for (size_t i = 0; i < h->n_devices; i++)
                                if (pci_addr_eq(&h->devices[i].addr, &pa))
                                        h->devices[i].n_vfs++;
                }
        for (size_t k = 0; k < n_mdevs; k++) {
                struct pci_addr pa = addr_of(nb, mdevs[k].bus, mdevs[k].slot, mdevs[k].func);
                hostmap_add_mdev(h, mdevs[k].uuid, &pa)->type = xstrdup(mdevs[k].type);
        }
        hostmap_finish(h);
        return h;
}

static inline struct hostmap *build(const struct dev_spec *spec, size_t n, const struct numbering *nb) {
        return build_mdevs(spec, n, nb, NULL, 0);
}

/* A copy of host A to change. */
static inline struct dev_spec *copy_a(void) {
        struct dev_spec *s = xcalloc(N_A, sizeof(*s));
        memcpy(s, host_a, sizeof(host_a));
        return s;
}

static inline size_t find_spec(const struct dev_spec *s, unsigned bus, unsigned slot, unsigned func) {
        for (size_t k = 0; k < N_A; k++)
                if (s[k].bus == bus && s[k].slot == slot && s[k].func == func)
                        return k;
        fail_msg("no device %02x:%02x.%x in the spec", bus, slot, func);
        return 0;
}

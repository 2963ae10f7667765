/* Host maps built in memory for the unit tests (include after cmocka.h).
 * The usual one: four nodes, node n holding CPUs 4n..4n+3, nodes 0 and 1
 * on socket 0 and nodes 2 and 3 on socket 1, with a two-socket SLIT. */
#pragma once

#include "hostmap.h"
#include "pciaddr.h"

static const int fake_host_slit[4][4] = {
        { 10, 12, 32, 32 },
        { 12, 10, 32, 32 },
        { 32, 32, 10, 12 },
        { 32, 32, 12, 10 },
};
static const int fake_host_sockets[4] = { 0, 0, 1, 1 };

/* The four nodes with the given SLIT and sockets, added out of order
 * (hostmap_finish() sorts); no devices yet, not finished. */
static inline struct hostmap *fake_host_4n(const int dist[4][4], const int sockets[4]) {
        struct hostmap *h = hostmap_new();
        for (int i = 3; i >= 0; i--) {
                struct hostmap_node *node = hostmap_add_node(h, i);
                node->socket = sockets[i];
                for (unsigned c = 0; c < 4; c++)
                        bitmap_set(&node->cpus, (unsigned) i * 4 + c);
        }
        for (int i = 0; i < 4; i++)
                hostmap_set_distances(h, i, dist[i], 4);
        return h;
}

static inline struct hostmap_device *fake_host_add_dev(struct hostmap *h, const char *bdf, int node, uint32_t class) {
        struct pci_addr a;
        assert_int_equal(pci_addr_parse(bdf, &a), 0);
        struct hostmap_device *d = hostmap_add_device(h, &a);
        d->sysfs_node = node;
        d->class = class;
        return d;
}

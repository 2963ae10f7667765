/* The host map: what pcinuma knows about the host's PCI devices, mdevs,
 * NUMA nodes and sockets (docs/design.md §4).  It is read from sysfs once, through
 * a root directory fd (so tests pass a fixture tree, as hwloc does with
 * HWLOC_FSROOT), and then only looked up.  Lookups never touch the OS.
 *
 * hostmap.c holds the data structure and the lookups (pure); the reader,
 * hostmap_load*() and hostmap_read_cpu_id(), is lib/host's
 * (hostmap-sysfs.h, link host_dep): the core does no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pciaddr.h"
#include "util.h"

#if PCINUMA_STAND_INS
struct standins;
#endif

#define HOSTMAP_NO_NODE (-1)
#define HOSTMAP_NO_SOCKET (-1)
#define HOSTMAP_N_BARS 6
/* The highest node id the host map takes (the domain parser's limit too):
 * a larger one, from a broken or hostile capture, is refused so that
 * nothing sized by node ids can grow large. */
#define HOSTMAP_NODE_MAX 1023
#define HOSTMAP_NODE_MAX_STR "1023"

enum hostmap_bar_type {
        HOSTMAP_BAR_NONE = 0,
        HOSTMAP_BAR_IO,
        HOSTMAP_BAR_MEM32,
        HOSTMAP_BAR_MEM64,
};

struct hostmap_bar {
        enum hostmap_bar_type type;
        bool prefetchable;
        uint64_t size;            /* bytes; end - start + 1 from 'resource' */
};

/* Each field of this struct must be compared in memo_same_hostmap() (memo.c),
 * or pcinumad may keep answering from its memo after it changed. */
struct hostmap_device {
        struct pci_addr addr;
        char name[PCI_ADDR_STRLEN];       /* "0000:3b:00.0" */
        uint32_t class;                   /* 24-bit class code; 0 if unreadable */
        uint16_t vendor;                  /* 0 if unreadable */
        uint16_t device;
        int sysfs_node;                   /* numa_node as read; -1 if absent, unreadable or garbage */
        int node;                         /* effective node (docs/design.md §4 inheritance); -1 = none */
        char *driver;                     /* bound driver's name, or NULL */
        int iommu_group;                  /* -1 if none */
        bool has_physfn;                  /* an SR-IOV VF */
        struct pci_addr physfn;           /* its PF */
        unsigned n_vfs;                   /* number of virtfnN links (a PF) */
        struct hostmap_bar bars[HOSTMAP_N_BARS];
        /* The device's place in the tree, from its real path under
         * devices/pci*: the host bridge ("pci0000:3a") and the bridges
         * between it and the device, top first (root port first).  NULL /
         * 0 when bus/pci/devices/X is not a symlink, as on some captures. */
        char *host_bridge;
        struct pci_addr *upstream;
        size_t n_upstream;
        /* The link's speed and width (max_link_speed, e.g. "16.0 GT/s
         * PCIe", and max_link_width: what NCCL itself reads on a host;
         * current_link_speed drops while a GPU idles, so a file made from it
         * would change with the GPU's load); "" and 0 when unknown.  Read only
         * by hostmap_load_links*(), for the NCCL topology file: the hook's
         * and the watcher's scans do not need them. */
        char link_speed[24];
        unsigned link_width;
};

/* Each field of this struct must be compared in memo_same_hostmap() (memo.c),
 * or pcinumad may keep answering from its memo after it changed. */
struct hostmap_mdev {
        char uuid[37];
        struct pci_addr parent;
        char *type;                       /* mdev_type name, or NULL */
        int node;                         /* the parent's effective node */
};

/* Each field of this struct must be compared in memo_same_hostmap() (memo.c),
 * or pcinumad may keep answering from its memo after it changed. */
struct hostmap_node {
        int id;
        struct bitmap cpus;
        int socket;                       /* physical_package_id of its CPUs; -1 for a CPU-less node */
};

/* The CPU of the machine the host map describes, as NCCL names it (its
 * topology file's <cpu arch= vendor= familyid= modelid=>).  sysfs does
 * not hold it: hostmap_read_cpu_id() reads this machine's, and a caller
 * that reads a captured or fixture tree leaves it unknown. */
struct hostmap_cpu_id {
        char arch[65];                    /* "x86_64", "arm64", "ppc64"; "" unknown */
        char vendor[64];                  /* "GenuineIntel"; "" unknown */
        int family, model;                /* -1 unknown */
};

/* Each field of this struct must be compared in memo_same_hostmap() (memo.c),
 * or pcinumad may keep answering from its memo after it changed. */
struct hostmap {
        /* sorted by id */
        struct hostmap_node *nodes;
        size_t n_nodes;
        /* distance[i * n_nodes + j] between nodes[i] and nodes[j] (SLIT);
         * -1 where unknown */
        int *distance;
        /* sorted by address */
        struct hostmap_device *devices;
        size_t n_devices;
        /* sorted by uuid */
        struct hostmap_mdev *mdevs;
        size_t n_mdevs;
        /* true when there is no devices/system/node directory: one node 0
         * holding every CPU is synthesised */
        bool single_node;
        /* What the reader found but could not make sense of, one line per
         * file (per key of a device's uevent), naming it
         * ("bus/pci/devices/0000:3b:00.0/numa_node: 'banana' is not a node
         * number; read as unknown"), in scan order.  At most
         * HOSTMAP_WARNINGS_MAX are kept; n_warnings_dropped counts the rest.
         * A missing file is not a warning (many are optional). */
        char **warnings;
        size_t n_warnings;
        size_t n_warnings_dropped;
        /* Unknown ("" and -1) unless the caller fills it. */
        struct hostmap_cpu_id cpu_id;
#if PCINUMA_STAND_INS
        /* A stand_ins build only: the stand-in table (standins.h) the
         * domain parser applies when it parses a domain to plan on this
         * host (domain_parse_on()), or NULL.  Not owned: the caller that
         * reads the file keeps it and sets it on each map it loads. */
        const struct standins *stand_ins;
#endif
};

#define HOSTMAP_WARNINGS_MAX 64

/* The reader that fills this structure from sysfs is lib/host's
 * (hostmap-sysfs.h): this header and hostmap.c do no I/O. */

/* ---- the data structure: hostmap.c ------------------------------------- */

/* Accepts NULL; returns NULL. */
struct hostmap *hostmap_free(struct hostmap *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct hostmap *, hostmap_free)
#define _cleanup_hostmap_ _cleanup_(hostmap_freep)

/* Lookups: binary searches, never a rescan.  NULL / -1 when unknown. */
const struct hostmap_device *hostmap_find_device(const struct hostmap *h, const struct pci_addr *a);
/* Data derived from a finished map, computed by compute() on the first
 * call and kept with the map (freed by free_fn with it): migrate.c's device
 * positions, which every plan's mark needs and which cost more than the
 * plan.  One user: the slot holds whatever the first caller computed.
 * Safe from several threads at once (the first computes, under a lock in
 * the map). */
void *hostmap_derived(const struct hostmap *h, void *(*compute)(const struct hostmap *), void (*free_fn)(void *));
const struct hostmap_mdev *hostmap_find_mdev(const struct hostmap *h, const char *uuid);
const struct hostmap_node *hostmap_find_node(const struct hostmap *h, int id);
int hostmap_node_socket(const struct hostmap *h, int node);
/* SLIT distance between two node ids; 10 for a == b when unknown; -1 when unknown. */
int hostmap_distance(const struct hostmap *h, int a, int b);
/* Node holding CPU 'cpu', or -1. */
int hostmap_cpu_node(const struct hostmap *h, unsigned cpu);

/* A short human name for a PCI class code ("3D controller", "Ethernet
 * controller", "Non-Volatile memory controller", ...). Never NULL. */
const char *hostmap_class_name(uint32_t class);

/* True for a bridge or host bridge (class 0x0600xx / 0x0604xx ...), which
 * cannot be passed through. */
/* A driver name as the host map keeps one: 1-255 printable ASCII
 * characters, no blank, no '/' (what a kernel module or a capture may
 * name; the mark accepts the same). */
bool hostmap_driver_name_ok(const char *s);

bool hostmap_device_is_bridge(const struct hostmap_device *d);

/* How many host devices a domain could be given here: the PCI functions
 * that are not bridges, and the mdevs.  A domain with more hostdevs than
 * this names devices the host does not have (each hostdev names a
 * distinct one), so no plan can place them all: the engine refuses it
 * before any work that grows with the domain's hostdevs. */
size_t hostmap_n_assignable(const struct hostmap *h);

/* Build helpers, used by the sysfs reader and by unit tests that build a
 * map in memory.  hostmap_finish() sorts, applies the node inheritance of
 * docs/design.md §4 (VF from PF, mdev from parent, -1 = the only node on a
 * single-node host) and must be called once after the last add. */
struct hostmap *hostmap_new(void);
struct hostmap_node *hostmap_add_node(struct hostmap *h, int id);
struct hostmap_device *hostmap_add_device(struct hostmap *h, const struct pci_addr *a);
struct hostmap_mdev *hostmap_add_mdev(struct hostmap *h, const char *uuid, const struct pci_addr *parent);
/* Set the distance row of a node: values[k] is the distance to the k-th
 * node in ascending id order, as in sysfs. */
void hostmap_set_distances(struct hostmap *h, int node, const int *values, size_t n);
void hostmap_finish(struct hostmap *h);
/* Record a warning (see struct hostmap); pure, no I/O. */
void hostmap_warn(struct hostmap *h, const char *fmt, ...) _printf_(2, 3);
/* Move o's warnings to the end of h's (o keeps none). */
void hostmap_take_warnings(struct hostmap *h, struct hostmap *o);

/* The topology fingerprint: a canonical text, and its SHA-256, of what a
 * plan depends on in a host map, so that a fleet can tell which hosts are
 * alike (for schedulers and, later, migration).  It covers the NUMA nodes
 * (ids, CPU counts, which nodes share a socket, SLIT distances) and the
 * passthrough-capable devices grouped by node and root complex, each root
 * complex as the tree of bridges and switches down to the devices, with
 * vendor:device, class, driver kind, BARs and VFs.  It leaves out whatever
 * numbers the host happened to give: BDFs, host bridge names, IOMMU group
 * numbers, socket ids, the CPU numbers themselves.  Siblings in the tree
 * are sorted by their own description, so two hosts whose devices sit in
 * the same places under different bus numbers give the same text.
 * docs/operations.md ("Fleet: topology fingerprints") describes the format.
 * Pure: no I/O, no globals. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "hostmap.h"
#include "sha256.h"

/* The version of the canonical text; it is the canonical text's first
 * line, so a new version gives new digests.  Marks record it (their
 * positions are in its format): version 2 describes a device by its
 * driver kind where version 1 had the driver's name. */
#define FINGERPRINT_VERSION 2

/* A device group: the passthrough-capable devices of one node below one
 * root complex (host bridge). */
struct fingerprint_group {
        int node;                         /* HOSTMAP_NO_NODE: no node, or one the map does not have */
        char *host_bridge;                /* this host's name for it ("pci0000:3a"), for display only;
                                           * NULL when the devices' paths are unknown (a capture without
                                           * symlinks): they form one group per node */
        char *canonical;                  /* the group's line of the canonical text, no newline */
        char digest[SHA256_HEX_SIZE];     /* SHA-256 of canonical plus a newline */
        size_t *devices;                  /* indices into the host map's devices[], in address order */
        size_t n_devices;
};

struct fingerprint {
        char *canonical;                  /* the whole canonical text, one line per node and group */
        char digest[SHA256_HEX_SIZE];     /* SHA-256 of canonical */
        /* In canonical order: by node (none last), then by canonical line;
         * identical groups keep address order. */
        struct fingerprint_group *groups;
        size_t n_groups;
};

/* True for a device the fingerprint counts as passthrough-capable: not a
 * bridge (hostmap_device_is_bridge()), and of class 02 (network), 03
 * (display, GPUs), 0108 (NVMe), 0b40 (co-processors: QAT), 12 (processing
 * accelerators), or 0680 ("other bridge") from NVIDIA (vendor 0x10de: an
 * NVSwitch; a chipset's 0680 stays out).  The driver does not matter: a
 * managed device is on vfio-pci only while its guest runs.  VFs are judged
 * like any other function. */
bool fingerprint_device_counts(const struct hostmap_device *d);

/* True for a function other than 0 of a slot whose function 0 counts (a
 * GPU's audio or USB-C function), which the fingerprint holds with it. */
bool fingerprint_slot_companion(const struct hostmap *h, const struct hostmap_device *d);

/* True for a device of h that fingerprint_new(h) holds, so that
 * fingerprint_position() gives it a position: one that counts, another
 * function of a slot whose function 0 counts (a GPU's audio function), or
 * the PF of a VF that counts. */
bool fingerprint_holds(const struct hostmap *h, const struct hostmap_device *d);

/* The kind of driver a device is bound to, which is what the fingerprint
 * and the migration mapping compare (not the name): a VFIO variant driver
 * (<vendor>_vfio_pci: mlx5_vfio_pci, hisi_acc_vfio_pci, pds_vfio_pci,
 * virtio_vfio_pci, nvgrace_gpu_vfio_pci...) is a kind of its own, since it
 * decides what the guest gets (live migration support, device memory);
 * it is returned as it is.  Every other driver (vfio-pci, a host driver
 * such as nvidia or mlx5_core, none: NULL or "") is the plain kind,
 * "vfio-pci": a managed device is on its host driver while idle and on
 * vfio-pci while its guest runs, and which VMs run must not change the
 * fingerprint.  A driver the policy names in vfio_variant_drivers is not
 * known here (the fingerprint does not depend on the policy): plain. */
const char *fingerprint_driver_kind(const char *driver);

/* The fingerprint of a finished host map.  Never fails (allocation aborts);
 * the caller owns the result (free with fingerprint_free). */
struct fingerprint *fingerprint_new(const struct hostmap *h);

/* The place of host device 'device' (an index into h->devices[]) in the
 * fingerprint f of h, for mapping a migrating domain's devices (migrate.h):
 * space-separated items from the root complex down to the function,
 * "rc:D@NAME", "br:D@BDF" for each bridge above it, "pf:D@BDF" for the PF
 * of a VF described inside it, and "fn:D@SLOT", where D is the first
 * FINGERPRINT_POSITION_DIGEST hex digits of the SHA-256 of that item's
 * canonical text (the rc's: its group line, so its node too; a bridge's:
 * everything below it), and NAME, BDF, SLOT ("dddd:bb:ss") this host's
 * names for it, which only say which devices share the item.  Two devices
 * of two hosts are in the same position when their items' digests are
 * equal.  NULL when f does not count the device.  malloc'ed. */
#define FINGERPRINT_POSITION_DIGEST 16
char *fingerprint_position(const struct fingerprint *f, const struct hostmap *h, size_t device);

/* The canonical text of what f holds below bridge upstream[depth] of host
 * device 'device' (depth 0: its root port; for a VF described inside its
 * PF, the PF's), "bridge{...}", whose digest is that bridge's "br:" item
 * in fingerprint_position(): no bus numbers, drivers only by kind, no
 * bridges' own IDs, nothing f does not count.  NULL when f does not hold
 * the device, its path is unknown or it has no such bridge.  malloc'ed. */
char *fingerprint_below(const struct fingerprint *f, const struct hostmap *h, size_t device, size_t depth);

/* fingerprint_below() without the driver kinds: what the GPUDirect clique
 * order uses (planner-features.c), since libvirt rebinds a managed device to its
 * VFIO variant driver and back as its guest starts and stops, which must
 * not reorder another domain's cliques. */
char *fingerprint_below_shape(const struct fingerprint *f, const struct hostmap *h, size_t device, size_t depth);

/* Accepts NULL; returns NULL. */
struct fingerprint *fingerprint_free(struct fingerprint *f);
static inline void fingerprint_freep(struct fingerprint **f) { fingerprint_free(*f); }
#define _cleanup_fingerprint_ _cleanup_(fingerprint_freep)

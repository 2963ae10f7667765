/* The planner (docs/design.md §6, §7): given a domain, the host map and the
 * policy settings, decide where each passthrough device goes and what
 * controllers that takes.  Pure: no I/O, no libvirt, no globals; it does
 * not touch the XML (the rewriter applies the plan). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "domain.h"
#include "hostmap.h"
#include "pciaddr.h"
#include "policy.h"

enum plan_action {
        PLAN_MOVE,              /* onto its own root port under its cell's pxb */
        PLAN_STAY,              /* left where it is (the pcie.0 side); allowed */
        PLAN_REFUSE,            /* the policy refuses it */
};

struct plan_device {
        size_t hostdev;                 /* index into domain->hostdevs */
        char name[64];                  /* "0000:3b:00.0" or "mdev <uuid>" */
        bool known;                     /* found in the host map */
        uint32_t class;                 /* 0 if unknown */
        bool fingerprinted;             /* a PCI hostdev the topology fingerprint holds
                                         * (fingerprint_holds()): the mark can give its position */
        int host_node;                  /* -1: none */
        int host_socket;                /* -1: none */
        enum plan_action action;
        int cell;                       /* guest cell, or -1 */
        int port_index;                 /* the port it plugs into (root or switch downstream port), or -1 */
        struct pci_addr guest;          /* its new guest address (MOVE) */
        char *reason;                   /* why, in a phrase */
        int cause;                      /* REFUSE and STAY: its index in plan->causes, or -1 */
        char driver[64];                /* the host driver, "" if none or unknown */
        /* The host switch it sits behind (the bridge below its root port),
         * for mirror_switches and `pcinumactl topo`. */
        bool has_host_switch;
        struct pci_addr host_switch;
        int switch_group;               /* the guest switch (its upstream port's index) it sits behind, or -1 */
        /* Its place on the host (hostmap's host_bridge and upstream), for
         * the path mirror and the fidelity report: the host bridge as a
         * number ("pci0000:3a" -> 0x3a; -1 unknown) and the bridges from
         * the root port down. */
        long host_root;
        struct pci_addr *host_up;
        size_t n_host_up;
        bool multifunction;             /* function 0 of a guest slot that holds more functions */
        char guest_bdf[PCI_ADDR_STRLEN];/* the BDF the guest will see (predicted), "" when unknown */
        unsigned io_bars;               /* I/O BARs on the host */
        uint64_t mmio64_size;           /* its 64-bit BARs, each rounded up to a power of two */
        uint64_t mmio64_align;          /* its largest 64-bit BAR (a power of two) */
        /* For migration (migrate.h, filled by migrate_annotate()): its
         * fingerprint position and "vendor:device", NULL/"" when unknown;
         * for an mdev, its parent's, and its mdev_type name. */
        char *position;
        char vendor_device[10];
        char *mdev_type;
};

struct plan_pxb {
        unsigned cell;
        char *host_nodes;               /* the nodes backing the cell, "0" or "0-1" */
        int index;                      /* controller index */
        struct pci_addr addr;           /* its slot on pcie.0 */
        int bus_nr;
        long host_root;                 /* the host bridge it mirrors (as plan_device.host_root); -1: a whole cell */
        unsigned n_ports;               /* root ports on it */
        unsigned n_buses;               /* bus numbers its tree takes: itself, root ports, switch ports */
};

#define PLAN_ROOT_PORT "pcie-root-port"
#define PLAN_SWITCH_UP "pcie-switch-upstream-port"
#define PLAN_SWITCH_DOWN "pcie-switch-downstream-port"

/* A new controller below an expander bus: a root port, or (mirror_switches)
 * a switch's upstream or downstream port. */
struct plan_port {
        int index;                      /* controller index */
        const char *model;              /* PLAN_ROOT_PORT, PLAN_SWITCH_UP or PLAN_SWITCH_DOWN */
        int parent_index;               /* the controller it plugs into */
        int pxb_index;                  /* the expander bus of its tree */
        uint8_t slot, func;
        bool multifunction;             /* set on function 0 of a shared slot */
        long device;                    /* index into plan->devices, or -1 (a switch's own ports) */
        int sec_bus;                    /* the bus number the guest firmware gives the bus below it (predicted), 0 unknown */
};

/* nvidia-smi topo -m's path types, nearest first. */
enum plan_path {
        PLAN_PATH_PIX,          /* at most one PCIe switch (or one bridge) between them */
        PLAN_PATH_PXB,          /* several bridges, below one root port */
        PLAN_PATH_PHB,          /* through one host bridge (in the guest: one expander bus) */
        PLAN_PATH_NODE,         /* across host bridges of one NUMA node */
        PLAN_PATH_SYS,          /* across NUMA nodes */
        PLAN_PATH_UNKNOWN,      /* the host map does not say */
};

/* One end of a path: a device's root (host bridge or guest expander bus;
 * -1 unknown), its NUMA node (-1 none) and the bridges from its root
 * port down to the one it sits on, each as an opaque key. */
struct plan_path_end {
        long root;
        int node;
        const uint64_t *chain;
        size_t n_chain;
};

/* The path type between two devices (the one pure rule behind the plan's
 * fidelity report and `pcinumactl topo`): different roots are NODE when
 * the nodes agree, else SYS; on one root, no shared bridge is PHB, and a
 * shared bridge is PIX when each device is at most one bridge below the
 * deepest bridge they share, else PXB. */
enum plan_path planner_path_type(const struct plan_path_end *a, const struct plan_path_end *b);
const char *plan_path_to_string(enum plan_path t);

/* Fill p->pairs and the same/closer/farther/unknown counts: every pair of
 * p's devices, host vs planned guest path type.  A report, computed on
 * request by the plan's owner before it reports (report.h: explain and
 * JSON; pcinumactl topo; the daemon's decision log) rather than by
 * planner_run(): it is quadratic in the devices, the plan is not.  The
 * reports only read it.  Safe to call again (it does nothing then). */
struct plan;
/* Above this many devices no pairs are computed (fidelity_skipped): the
 * report is quadratic, and a domain XML may hold thousands of hostdevs. */
#define PLAN_FIDELITY_MAX_DEVICES 128
void planner_fidelity(struct plan *p);

/* A device pair's path type on the host and in the planned guest. */
struct plan_pair {
        size_t a, b;                    /* indexes into plan->devices, a < b */
        enum plan_path host, guest;
};

/* gpudirect_clique: one GPU's clique id. */
struct plan_clique {
        size_t device;                  /* index into plan->devices */
        unsigned id;                    /* 0..PLAN_CLIQUE_MAX-1 */
};

/* QEMU's x-nv-gpudirect-clique is 4 bits wide: ids 0..15. */
#define PLAN_CLIQUE_MAX 16

/* Does the host let vfio-pci give this function an x-nv-gpudirect-clique
 * id at all?  QEMU accepts it only on an NVIDIA (vendor 0x10de) display
 * controller (class 0x03xxxx). */
bool planner_clique_capable(uint16_t vendor, uint32_t class);

struct plan_managed {
        size_t hostdev;                 /* index into domain->hostdevs */
        char name[64];
        char driver[64];
};

/* Why devices are refused or stay where they are, each said once, with
 * its fix, however many devices it concerns (docs/planner.md, "Messages:
 * one line per cause").  A domain-wide cause (no <acpi/>, no cells,
 * unpinned cells, not q35, the bus budget) concerns every refused or
 * staying device; any other is one device's reason, shared by every
 * device that has the same. */
struct plan_cause {
        char *what;                     /* the cause, a phrase: "ACPI is off (<features><acpi/> is missing), ..." */
        char *fix;                      /* what to change, a phrase ("add <acpi/> to <features>"), or NULL */
        bool domain;                    /* domain-wide */
        bool cells;                     /* about the guest cells: the message lists them */
};

enum plan_verdict {
        PLAN_APPLY,             /* the domain gets the planned topology */
        PLAN_UNCHANGED,         /* nothing to do (policy off, no devices, none moves) */
        PLAN_SKIP,              /* not eligible, and the policy allows that: untouched, with a warning */
        PLAN_REFUSED,           /* the policy refuses the domain */
};

struct plan {
        enum policy_mode mode;
        enum plan_verdict verdict;
        char *reason;                   /* one line: why refused, skipped or unchanged; NULL for APPLY */
        char *cells_desc;               /* "0 = host node 0 (numatune memnode), 1 = ..." */
        struct plan_device *devices;
        size_t n_devices;
        struct plan_pxb *pxbs;
        size_t n_pxbs;
        struct plan_port *ports;
        size_t n_ports;
        int *pruned;                    /* root-port indexes the move empties */
        size_t n_pruned;
        char **warnings;
        size_t n_warnings;
        struct plan_cause *causes;      /* in the order first met; plan_device.cause indexes it */
        size_t n_causes;
        int first_index;                /* first new controller index */
        int pcie0_buses;                /* bus numbers the pcie.0 side needs */
        int busnr_limit;                /* our pxbs live below this busNr */

        struct policy_settings settings;

        /* Path fidelity (every pair of devices, host vs guest path type):
         * same, closer (the guest claims a nearer path than the hardware
         * has: the dangerous error), farther; unknown where the host map
         * lacks the device's place. */
        struct plan_pair *pairs;        /* filled by planner_fidelity() */
        size_t n_pairs;
        bool fidelity_done;
        bool fidelity_skipped;          /* more than PLAN_FIDELITY_MAX_DEVICES devices */
        unsigned n_same, n_closer, n_farther, n_unknown;
        char *degrade_note;             /* how the layout was cut down to fit, or NULL */

        /* mirror_distances: <cell><distances> from the host SLIT */
        bool add_distances;
        int *distances;                 /* n_cells x n_cells */
        size_t n_cells;
        char *distances_note;           /* what was done or why not */

        /* mmio64: auto */
        uint64_t mmio64_need;           /* bytes the passthrough devices' 64-bit BARs need */
        uint64_t pcihole64_kib;         /* the <pcihole64> to set, 0 = leave it */
        bool set_ovmf_mmio64;           /* also opt/ovmf/X-PciMmio64Mb */
        char *mmio64_note;

        /* nccl_topology: the guest's NCCL topology file, filled by the
         * engine (nccltopo.h) after planning, for the rewriter */
        char *nccl_arg;                 /* the -fw_cfg argument to add, or NULL */
        char *nccl_note;                /* what was done or why not, or NULL (no GPU or RDMA NIC) */

        /* the I/O port check */
        unsigned io_devices;            /* moved devices with I/O BARs: one 4 KiB window each */
        char *io_note;

        /* managed: auto: hostdevs to set managed='no' (VFIO variant drivers) */
        struct plan_managed *managed;
        size_t n_managed;

        /* migration: the host's topology fingerprint digest
         * (migrate_annotate()), NULL when not computed */
        char *fingerprint;
        /* gpudirect_clique: auto: the GPUs that get an x-nv-gpudirect-clique
         * id, in device order (docs/planner.md, "GPUDirect cliques") */
        struct plan_clique *cliques;
        size_t n_cliques;
        char *clique_note;              /* what was done or why not; NULL when the switch is off */
};

/* Root ports with an I/O window the guest's 64 KiB of I/O space holds
 * before SeaBIOS runs out (seen here: 16 e1000e behind 16 root ports hang
 * it; about 12 fit beside the chipset's own ranges). */
#define PLAN_IO_WINDOWS_MAX 12
/* QEMU q35's default pci-hole64-size, and OVMF's default aperture. */
#define PLAN_DEFAULT_MMIO64 (UINT64_C(32) << 30)

/* Plan domain d (whose backing must already be resolved with
 * domain_resolve_backing()) against h under settings s.  A refusal is not
 * an error: it is a plan with verdict PLAN_REFUSED.  Returns 0; the caller
 * owns *ret. */
int planner_run(const struct domain *d, const struct hostmap *h, const struct policy_settings *s, struct plan **ret);

/* Options that come from the policy file as a whole rather than a rule. */
struct planner_options {
        char *const *variant_drivers;   /* extra VFIO variant driver names (managed: auto) */
        size_t n_variant_drivers;
};

/* planner_run() with options (NULL: none). */
int planner_run_opts(const struct domain *d, const struct hostmap *h, const struct policy_settings *s,
                     const struct planner_options *o, struct plan **ret);

/* Is 'driver' a VFIO variant driver (not vfio-pci itself, but a vfio-pci
 * variant such as mlx5_vfio_pci or nvgrace_gpu_vfio_pci, or one listed)? */
bool planner_is_vfio_variant(const char *driver, const struct planner_options *o);

/* True when d is already laid out as p says: every moved device sits
 * alone on a pcie-root-port under a pcie-expander-bus whose <node> is its
 * planned cell, and every other device is where the plan leaves it.  d is
 * the current (possibly planned) domain; p was computed for its reverted
 * form. */
bool planner_matches(const struct domain *current, const struct domain *base, const struct plan *p);

/* Where current differs from plan p (computed for base): one phrase per
 * device out of place, "; "-separated, e.g. "0000:13:00.0 is on pcie.0
 * root port 5, the plan puts it on guest cell 0".  NULL when nothing
 * differs. */
char *planner_mismatch(const struct domain *current, const struct domain *base, const struct plan *p);

/* Lookups in a finished plan (plan-lookup.c): the port or the expander
 * bus with controller index 'index', or NULL. */
const struct plan_port *plan_find_port(const struct plan *p, int index);
const struct plan_pxb *plan_find_pxb(const struct plan *p, int index);

/* The host's PCI device behind passthrough device hd (an mdev: its
 * parent), or NULL when the host has none. */
const struct hostmap_device *plan_host_device(const struct hostmap *h, const struct domain_hostdev *hd);

const char *plan_verdict_to_string(enum plan_verdict v);
const char *plan_action_to_string(enum plan_action a);

struct plan *plan_free(struct plan *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct plan *, plan_free)
#define _cleanup_plan_ _cleanup_(plan_freep)

/* The domain model (docs/design.md §5): what the planner reads from a libvirt
 * domain XML.  domain_parse() parses with libxml2 (no network, no entity
 * expansion, a size limit) and keeps the document, so the rewriter can
 * edit it in place; the structs below point into it.  Pure: no I/O. */
#pragma once

#include <libxml/tree.h>
#include <stdbool.h>
#include <stddef.h>

#include "hostmap.h"
#include "pciaddr.h"
#include "util.h"
#include "work.h"
#include "xmlutil.h"

/* Domain XML larger than this is refused (docs/design.md §9). */
#define DOMAIN_XML_MAX (4u * 1024u * 1024u)

/* And domain XML with more markup than this: '<' characters, which only
 * start a tag, a comment or a CDATA section (XML allows none in an
 * attribute value, and text escapes it), so this bounds the elements.
 * libxml2 alone takes 0.7 to 1.5 us of CPU per tag to build and free a
 * document on the project's 2-core test machine: a document of 4 MiB of
 * small elements costs 100 ms before pcinuma reads any of it.  A large
 * real domain (hundreds of disks, every vCPU pinned) has a few thousand
 * tags.  Refused before parsing (docs/security.md, "Bounded work"). */
#define DOMAIN_XML_TAGS_MAX 16384u


enum domain_hostdev_kind {
        DOMAIN_HOSTDEV_PCI,
        DOMAIN_HOSTDEV_MDEV,
};

struct domain_hostdev {
        enum domain_hostdev_kind kind;
        bool is_interface;              /* <interface type='hostdev'> */
        struct pci_addr host;           /* PCI: the <source><address> */
        char mdev_uuid[37];             /* mdev: the <source><address uuid> */
        xmlNodePtr src_addr;            /* that <source><address> element, as this parser reads it (NULL for a stand-in)
                                         * (xmlutil.h: the first un-namespaced <source>, its first
                                         * un-namespaced <address>): the one element a rewrite of the
                                         * host side may edit */
        bool has_guest_addr;            /* a direct <address type='pci'> child */
        struct pci_addr guest;
        xmlNodePtr elem;                /* <hostdev> or <interface> */
        xmlNodePtr addr_elem;           /* its guest <address>, or NULL */
        int managed;                    /* managed=: 1 yes, 0 no, -1 absent */
#if PCINUMA_STAND_INS
        bool stand_in;                  /* a virtio <interface type='user'> standing in for host (standins.h) */
#endif
};

/* Is hd a stand-in (a stand_ins build's virtio NIC standing for the host
 * device hd->host)?  Always false in a normal build. */
static inline bool domain_hostdev_is_stand_in(const struct domain_hostdev *hd) {
#if PCINUMA_STAND_INS
        return hd->stand_in;
#else
        (void) hd;
        return false;
#endif
}

struct domain_controller {
        const char *model;              /* "pcie-root", "pcie-root-port", ... ("" if none) */
        int index;
        bool has_addr;
        struct pci_addr addr;
        int bus_nr;                     /* <target busNr>, or -1 */
        int node;                       /* <target><node>, or -1 */
        xmlNodePtr elem;
};

enum domain_backing {
        DOMAIN_BACKING_NONE,
        DOMAIN_BACKING_MEMNODE,         /* <numatune><memnode> */
        DOMAIN_BACKING_VCPUPIN,         /* <cputune><vcpupin> (with <vcpu cpuset> for unpinned vCPUs) */
        DOMAIN_BACKING_VCPU_CPUSET,     /* <vcpu cpuset> only */
        DOMAIN_BACKING_MEMORY,          /* a single-node <numatune><memory nodeset> */
};

struct domain_cell {
        unsigned id;
        struct bitmap cpus;             /* guest vCPUs */
        struct bitmap host_nodes;       /* filled by domain_resolve_backing() */
        enum domain_backing backing;
        bool has_distances;             /* the cell has its own <distances> */
};

struct domain_vcpupin {
        unsigned vcpu;
        struct bitmap cpuset;
};

struct domain_memnode {
        unsigned cellid;
        struct bitmap nodeset;
};

/* Every <address type='pci'> that names a guest address (not a <source>). */
struct domain_pci_use {
        struct pci_addr addr;
        xmlNodePtr owner;               /* the device or controller element */
};

struct domain {
        xmlDocPtr doc;
        bool has_xml_decl;              /* the input began with <?xml ...?> */
        char *name;
        char *uuid;
        char *arch;
        char *machine;
        bool q35;
        bool acpi;
        char *firmware;                 /* <os firmware=> or the <loader> path, or NULL */
        bool cpu_is_host;               /* <cpu mode='host-passthrough'> or 'host-model' */
        bool ovmf;                      /* UEFI firmware (OVMF): firmware='efi' or an OVMF/edk2 loader */
        uint64_t pcihole64_kib;         /* <pcihole64> of the pcie-root, 0 if unset */
        /* What bounds the 64-bit MMIO window QEMU can place (mmio64,
         * docs/planner.md): the guest CPU's physical address bits as QEMU
         * gives them, <maxphysaddr mode='emulate' bits=N> (or a
         * passthrough limit); 0 for the host's (mode='passthrough', or
         * host-passthrough/maximum in a KVM domain); else 40, QEMU's
         * default.  And the guest's memory: the larger of <memory> and
         * <maxMemory>, 0 when unknown. */
        unsigned phys_bits;
        uint64_t memory_kib;
        xmlNodePtr devices;             /* <devices> */

        struct domain_cell *cells;
        size_t n_cells;
        struct domain_hostdev *hostdevs;
        size_t n_hostdevs;
        struct domain_controller *controllers;
        size_t n_controllers;
        struct domain_pci_use *pci_uses;
        size_t n_pci_uses;
        /* Lookups in time independent of the domain's size (docs/security.md,
         * "Bounded work"):
         * hostdev_slots, an open-addressing hash of the hostdevs by host
         * device (index + 1; 0 empty; n_hostdev_slots a power of two, at
         * least twice n_hostdevs), and controller_at, the PCI controller
         * with each index (index into controllers + 1; 0 none). */
        size_t *hostdev_slots;
        size_t n_hostdev_slots;
        size_t controller_at[256];

        unsigned vcpus;                 /* <vcpu>'s count (the maximum); 1 when absent or not a number */
        struct domain_vcpupin *vcpupins;
        size_t n_vcpupins;
        bool has_vcpu_cpuset;
        struct bitmap vcpu_cpuset;
        bool has_numatune_memory;
        struct bitmap numatune_memory;
        struct domain_memnode *memnodes;
        size_t n_memnodes;

        xmlNodePtr mark;                /* <pcinuma:topology> (xml_locate_mark()), or NULL */
        /* The request's work budget (work.h), the caller's: the engine sets
         * it after domain_parse() and the phases that read the domain spend
         * from it.  NULL: no budget. */
        struct work *work;
        char *requested_policy;         /* <pcinuma:policy name=...> */
        char *policy_tag;               /* <pcinuma:policy tag=...> */

        /* After domain_snapshot(): the elements that edits took out of
         * doc, unlinked but kept so that the snapshot's pointers stay
         * valid; freed with doc. */
        bool keep_removed;
        xmlNodePtr *kept;
        size_t n_kept;
        xmlNsPtr kept_ns;               /* namespaces taken out likewise (a list) */
#if PCINUMA_STAND_INS
        /* The stand-in table the model was read with (NULL: none); kept
         * so that domain_reload() and domain_copy() read it the same way. */
        const struct standins *stand_ins;
#endif
};

/* The limits above: 0, or -EFBIG (bytes) or -E2BIG (tags) with
 * *ret_error.  domain_parse() checks them first; the engine checks what
 * it writes, so that pcinuma never writes a domain it would not read. */
int domain_check_limits(const char *buf, size_t len, char **ret_error);

/* Parse buf[0..len).  Errors (-EINVAL; -EFBIG, more than DOMAIN_XML_MAX
 * bytes; -E2BIG, more than DOMAIN_XML_TAGS_MAX tags) come with
 * *ret_error naming the problem: malformed XML with its line, not a
 * <domain>, a DTD, duplicate or out-of-range cell ids, a hostdev without
 * a usable source.  The caller owns *ret. */
int domain_parse(const char *buf, size_t len, struct domain **ret, char **ret_error);

#if PCINUMA_STAND_INS
/* A stand_ins build only: domain_parse() with stand-in table s (NULL:
 * none).  Each <interface type='user'> with <model type='virtio'/> and a
 * <mac address> that s maps to a host BDF is read as a PCI hostdev of that
 * BDF (is_interface and stand_in set; its guest <address> is its own), so
 * the planner, the rewriter, the mark and the revert treat it as the
 * passthrough device.  Other interfaces are not read. */
int domain_parse_stand_ins(const char *buf, size_t len, const struct standins *s, struct domain **ret, char **ret_error);
#endif

/* Parse a domain to plan it on host h: domain_parse(), and in a stand_ins
 * build, with h's stand-in table. */
static inline int domain_parse_on(const char *buf, size_t len, const struct hostmap *h, struct domain **ret,
                                  char **ret_error) {
#if PCINUMA_STAND_INS
        return domain_parse_stand_ins(buf, len, h ? h->stand_ins : NULL, ret, ret_error);
#else
        (void) h;
        return domain_parse(buf, len, ret, ret_error);
#endif
}

/* A deep copy of d (its document copied, the model rebuilt), without
 * parsing the XML text again.  The caller owns *ret. */
int domain_copy(const struct domain *d, struct domain **ret, char **ret_error);

/* Re-read the model from d->doc after the document was edited (the old
 * arrays are freed; the document is kept). */
int domain_reload(struct domain *d, char **ret_error);

/* A snapshot of d's model, to edit d's document in place and still read
 * the domain as it was, without a copy of the document: *ret gets a copy
 * of d's model (arrays, strings, bitmaps) that points into d->doc (its
 * elements, the mark) and has no document of its own.  From then on, the
 * elements the rewriter takes out of d's document are kept, unlinked,
 * until d is freed, so every node *ret points to stays readable as long
 * as d lives; the rewriter's edits leave what *ret reads alone (the mark
 * is unlinked whole, controller models are never changed in place, the
 * rest was parsed into the model).  *ret must not be read after d is
 * freed; freeing it touches no node. */
void domain_snapshot(struct domain *d, struct domain **ret);

/* Unlink element e from d's document and free it, or keep it (see
 * domain_snapshot()). */
void domain_remove_node(struct domain *d, xmlNodePtr e);

/* Take the namespace declaration ns off element 'owner' and free it, or
 * keep it as domain_remove_node() keeps elements.  The caller makes sure
 * that nothing in the document uses it any more. */
void domain_remove_ns(struct domain *d, xmlNodePtr owner, xmlNsPtr ns);

/* Would domain_reload() accept PCI controller element c (its index,
 * busNr, <node>, <pcihole64> and every guest PCI address in it)?  The
 * rewriter asks before it puts a controller from a mark back.  0, or
 * -EINVAL with *ret_error. */
int domain_check_controller(xmlNodePtr c, char **ret_error);

/* Fill cells[].host_nodes and .backing from <numatune> and the pinning,
 * mapped through the host's CPU lists (docs/design.md §5).  A nodeset naming a
 * host node that does not exist is an error (-EINVAL). */
int domain_resolve_backing(struct domain *d, const struct hostmap *h, char **ret_error);

/* Serialise the document (with an XML declaration only if the input had
 * one).  The caller owns *ret. */
int domain_format(const struct domain *d, char **ret);

const struct domain_controller *domain_find_controller(const struct domain *d, int index);

/* The PCI hostdev of host device a, or the mdev hostdev of mdev 'uuid'
 * (any case), or NULL: hash lookups, whatever the domain holds. */
const struct domain_hostdev *domain_find_pci_hostdev(const struct domain *d, const struct pci_addr *a);
const struct domain_hostdev *domain_find_mdev_hostdev(const struct domain *d, const char *uuid);
const struct domain_cell *domain_find_cell(const struct domain *d, unsigned id);

/* Human-readable name of a hostdev's host side: "0000:3b:00.0" or
 * "mdev 4b20d080-…". buf must hold 64 bytes. */
const char *domain_hostdev_name(const struct domain_hostdev *hd, char buf[64]);

const char *domain_backing_to_string(enum domain_backing b);

struct domain *domain_free(struct domain *d);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct domain *, domain_free)
#define _cleanup_domain_ _cleanup_(domain_freep)

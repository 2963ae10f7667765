/* The metadata mark (docs/design.md §7): the <pcinuma:topology> element a plan
 * leaves in the domain's <metadata>, recording what the rewrite did so that
 * a revert can undo it and the engine can tell a planned domain from a
 * stale one.  This module owns the format: struct mark, the builder (from
 * a plan), the writer, the parser (which refuses a malformed or forged
 * mark) and the matcher (does the mark describe this plan?).  Which
 * element of a domain is its mark is xmlutil's (xml_locate_mark(), which
 * the domain parser uses); where the mark goes in the document and what a
 * revert does with it are the rewriter's.  Pure: no
 * I/O. */
#pragma once

#include <libxml/tree.h>
#include <stdbool.h>
#include <stddef.h>

#include "mark-urn.h"

struct plan;
struct domain;

/* Values as the mark spells them.  An attribute the parser does not check
 * is kept as a string (NULL: absent), as its readers always read it; an
 * integer the parser could not read is -1. */

struct mark_expander {                  /* <pcinuma:expander> */
        int controller;                 /* its index */
        int guest_cell;
        char *host_nodes;
        int bus_nr;
};

struct mark_device {                    /* <pcinuma:device>: a moved device */
        char *host;                     /* the PCI device's BDF, or NULL for an mdev */
        char *mdev;                     /* the mdev's UUID, or NULL */
        unsigned class;                 /* 0: not written */
        int host_node;
        int host_socket;                /* -1: not written */
        int guest_cell;
        int controller;                 /* the root or downstream port it went to */
        char *original_address;         /* "none", or its <address>'s attributes (mark_address_encode()) */
        char *position;                 /* its place in the fingerprint (fingerprint_position()), or NULL */
        char *vendor_device;            /* "10de:2330", or NULL */
        char *driver;                   /* its host driver, or NULL */
        char *mdev_type;                /* an mdev's mdev_type name (position, vendor_device: its parent's), or NULL */
};

struct mark_controller {                /* <pcinuma:controller>: a port with no device of its own */
        int index;                      /* -1 when index or model is missing or bad */
        char *model;
};

struct mark_managed {                   /* <pcinuma:managed>: a hostdev set to managed='no' */
        char *host;
        char *driver;
        char *original;                 /* "yes", "no" or "absent" */
};

struct mark_clique {                    /* <pcinuma:clique>: a GPU given an x-nv-gpudirect-clique id */
        char *host;                     /* the GPU's BDF */
        int id;                         /* 0..15; -1 when absent or bad */
        char *alias;                    /* the hostdev's user alias the override names */
        char *alias_original;           /* "none": pcinuma added the <alias>; a name: pcinuma renamed libvirt's own
                                         * (not a user alias, which an inactive definition drops); NULL: the user's, kept */
        char *override;                 /* "user": the user's <qemu:override> already names the alias, nothing added */
};

struct mark_removed {                   /* <pcinuma:removed>: a pruned controller */
        int controller;
        int position;                   /* its element position in <devices> */
        char *xml;                      /* writer: the controller as text */
        xmlNodePtr elem;                /* parser: the controller it holds, parsed and checked; unlinked */
};

struct mark {
        char *version;
        char *policy;
        char *migratable;
        char *migratable_reason;        /* with migratable="no": why (mark_migratable()), or NULL */
        char *metadata_created;         /* "yes": the rewrite created <metadata> */
        char *single_function_slots;
        char *distances;                /* "host" */
        char *pcie_root_created;        /* "yes" */
        char *pcihole64_original;       /* "none" or the old <pcihole64> text */
        char *pcihole64_original_unit;  /* its unit, "none" when it had none */
        char *ovmf_mmio64;              /* "created" or "added" */
        char *qemu_ns_added;            /* "yes" */
        char *nccl_topology;            /* the NCCL topology fw_cfg: "created" (with its <qemu:commandline>) or "added" */
        char *nccl_topology_sha256;     /* SHA-256 of its -fw_cfg argument, so a changed file is a changed plan */
        char *fingerprint;              /* the digest of the topology fingerprint it was planned on */
        char *fingerprint_version;      /* its FINGERPRINT_VERSION (the positions' format); NULL: a mark from
                                         * before it was recorded, planned with version 1 */
        char *qemu_override;            /* "created" or "added": where the clique ids went (gpudirect_clique) */

        struct mark_expander *expanders;
        size_t n_expanders;
        struct mark_device *devices;
        size_t n_devices;
        struct mark_controller *controllers;
        size_t n_controllers;
        struct mark_managed *managed;
        size_t n_managed;
        struct mark_removed *removed;
        size_t n_removed;
        struct mark_clique *cliques;
        size_t n_cliques;

        /* Parser: the document order of the expander, device and
         * controller records, as (kind, index) pairs. */
        struct mark_record_ref {
                enum { MARK_EXPANDER, MARK_DEVICE, MARK_CONTROLLER } kind;
                size_t i;
        } *order;
        size_t n_order;
};

/* Free what m holds (not m) and zero it. */
void mark_done(struct mark *m);

/* Builder: the mark of plan p, computed for d, as far as the plan says it
 * (version, policy, expanders, moved devices, switch ports, managed and
 * pruned controllers' indexes, distances).  What the rewrite finds in the
 * document as it goes (original addresses, the pruned controllers' text
 * and positions, managed= values, the mmio64 switch's records) the caller
 * fills in afterwards; device k is the plan's k-th moved device. */
void mark_build(const struct plan *p, const struct domain *d, struct mark *ret);

/* Is a domain planned as p (for d) migratable, as its mark says it: the
 * policy allows migration (migration: same-topology), and every PCI hostdev
 * moves under an expander bus and is held by the topology fingerprint
 * (plan_device.fingerprinted), so the mark records its position; one
 * that stays on pcie.0 (no host node, a legacy policy's leftover, ...),
 * or of a class the fingerprint does not count (a USB controller), has no
 * position a destination could map, and its migrate hook would refuse it.
 * mdevs are the migration gate's to judge.  When false and ret_why is not
 * NULL, *ret_why says why, naming the device (malloc'ed). */
bool mark_migratable(const struct plan *p, const struct domain *d, char **ret_why);

/* Writer: a new <pcinuma:topology> element in doc, not linked, holding m.
 * Each child goes after the text 'child_indent' (none when empty), and
 * 'end_indent' (when not empty) closes the list. */
xmlNodePtr mark_write(const struct mark *m, xmlDocPtr doc, const char *child_indent, const char *end_indent);

/* The most records of each kind a mark holds: what a plan can write.  A
 * guest has 256 PCI controller indexes (expanders, switch ports, removed
 * controllers each take one), and a moved device sits on a port's one
 * slot, up to 8 functions (devices, and the managed and clique records
 * that name devices).  mark_parse() refuses a mark with more, which
 * bounds what the revert and the migration do with a mark by these
 * numbers, not by the input's size. */
#define MARK_CONTROLLER_RECORDS_MAX 256
#define MARK_DEVICE_RECORDS_MAX (256 * 8)

/* Parser: read and check the mark element 'node' into *ret.  'devices' is
 * the domain's <devices> (or NULL): a <pcinuma:removed> is parsed in its
 * context, and must hold exactly one <controller type='pci'> the domain
 * parser accepts.  An element that is no part of a mark, an
 * original-address or attribute value a revert could not write back, a
 * bad <pcinuma:managed> or <pcinuma:removed>, or a value pcinuma never
 * writes (a host that is not a BDF, an mdev that is not a UUID, a driver
 * or mdev-type outside [A-Za-z0-9_.-], migratable not yes or no, a digest
 * that is not 64 hex digits, ...: values that reach messages) gives
 * -EINVAL with *ret_error naming the attribute and its value (control
 * characters escaped); so does a mark with more records of a kind than
 * the limits above (-E2BIG).  Nothing in the document changes. */
int mark_parse(xmlNodePtr node, xmlNodePtr devices, struct mark *ret, char **ret_error);

/* The mark element's attributes only, unchecked (never fails): what the
 * hook's phases read (policy, migratable).  migratable-reason, free text
 * that reaches messages, comes with its control characters replaced by
 * spaces. */
void mark_parse_attrs(xmlNodePtr node, struct mark *ret);

/* Matcher: does m (parsed) describe exactly plan p's moves, expander buses,
 * switch ports, managed devices and feature switches?  'base' is the
 * domain p was computed for, 'cur' the domain as it carries the mark. */
bool mark_matches(const struct mark *m, const struct plan *p, const struct domain *base, const struct domain *cur);

/* For a mark with migration data (a fingerprint) planned with another
 * topology fingerprint version than this pcinuma's (absent: version 1):
 * why, malloc'ed ("planned with topology fingerprint version 1 (the mark
 * does not say), this pcinuma uses 2"); else NULL.  Its positions are
 * then not comparable with this host's. */
char *mark_fingerprint_version_differs(const struct mark *m);

/* The same question, answered with the first part of m that does not
 * describe p, as a phrase for the admin ("device set differs: ...",
 * "migratable: mark says yes, policy migration=refuse", "NCCL topology
 * file differs (sha256 ..., planned ...)", "GPUDirect clique of
 * 0000:18:00.0: 2 in the mark, 1 planned", ...); NULL when m matches.
 * malloc'ed. */
char *mark_mismatch(const struct mark *m, const struct plan *p, const struct domain *base, const struct domain *cur);


/* Is s a libvirt user alias pcinuma can name in a <qemu:override>: "ua-"
 * followed by letters, digits, '_' and '-' only (libvirt's rule)? */
bool mark_is_user_alias(const char *s);

/* Is s a plain alias name (letters, digits, '_', '.', '-'), as libvirt
 * gives its own (hostdev0, ...)? */
bool mark_is_alias_name(const char *s);


/* The original-address format: e's attributes as "k=v k=v", in order, '%'
 * and white space in a value %-encoded.  malloc'ed. */
char *mark_address_encode(xmlNodePtr e);

/* Replace e's attributes with those s encodes.  A name that is not an XML
 * name, or a value that does not decode to text XML allows, gives -EINVAL
 * with *ret_error (e may have lost its attributes then). */
int mark_address_decode(xmlNodePtr e, const char *s, char **ret_error);

/* The planner (design §6, §7): given a domain, the host map and the
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
        int host_node;                  /* -1: none */
        int host_socket;                /* -1: none */
        enum plan_action action;
        int cell;                       /* guest cell, or -1 */
        int port_index;                 /* its new pcie-root-port, or -1 */
        struct pci_addr guest;          /* its new guest address (MOVE) */
        char *reason;                   /* why, in a phrase */
};

struct plan_pxb {
        unsigned cell;
        char *host_nodes;               /* the nodes backing the cell, "0" or "0-1" */
        int index;                      /* controller index */
        struct pci_addr addr;           /* its slot on pcie.0 */
        int bus_nr;
        unsigned n_ports;
};

struct plan_port {
        int index;                      /* controller index */
        int pxb_index;
        uint8_t slot, func;
        bool multifunction;             /* set on function 0 of a shared slot */
        size_t device;                  /* index into plan->devices */
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
        int first_index;                /* first new controller index */
        int pcie0_buses;                /* bus numbers the pcie.0 side needs */
        int busnr_limit;                /* our pxbs live below this busNr */
};

/* Plan domain d (whose backing must already be resolved with
 * domain_resolve_backing()) against h under settings s.  A refusal is not
 * an error: it is a plan with verdict PLAN_REFUSED.  Returns 0; the caller
 * owns *ret. */
int planner_run(const struct domain *d, const struct hostmap *h, const struct policy_settings *s, struct plan **ret);

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

const char *plan_verdict_to_string(enum plan_verdict v);
const char *plan_action_to_string(enum plan_action a);

struct plan *plan_free(struct plan *p);
static inline void plan_freep(struct plan **p) { plan_free(*p); }
#define _cleanup_plan_ _cleanup_(plan_freep)

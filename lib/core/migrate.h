/* Migration gated on topology (docs/policy.md "migration"): what
 * a plan records about where its devices sit (migrate_annotate(), for the
 * mark), and the matching an incoming planned domain needs: a mark, this
 * host's fingerprint and its host map in, a mapping out (migrate_map()):
 * each of the mark's host devices to a device of this host in the same
 * position (fingerprint_position()) and each mdev to an mdev of its type
 * on a parent in its parent's position; or the refusal, naming the device
 * and what differs.  The rest of the destination's decision (parse, the
 * policy, the limits, the rewrite of the hostdev sources and the mark, the
 * read-back) is the engine's, engine_incoming() (engine.h), and the
 * rewriter's (rewrite_migrate()).  Pure: no I/O, no globals; it edits no
 * XML. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "domain.h"
#include "fingerprint.h"
#include "hostmap.h"
#include "mark.h"
#include "planner.h"
#include "policy.h"

/* Fill p->fingerprint (h's digest) and each moved PCI device's position,
 * vendor:device (from h), for the mark; for a moved mdev its mdev_type and
 * its parent's position and vendor:device.  d is the domain p was made
 * for. */
void migrate_annotate(struct plan *p, const struct domain *d, const struct hostmap *h);

/* One host device (or mdev) of the incoming domain and where it goes here. */
struct migrate_pair {
        char *from;                     /* the source host's BDF (an mdev's UUID), as the mark names it */
        char *to;                       /* this host's BDF (mdev UUID) */
        bool mdev;
        int to_socket;                  /* its socket here (an mdev's parent's), -1 unknown */
        char *to_position;              /* its position here (an mdev's parent's) */
        char *used_by;                  /* another domain here that uses 'to' too (no mapping of free devices
                                         * existed), or NULL */
};

struct migrate_map {
        struct migrate_pair *pairs;
        size_t n_pairs;
        char fingerprint[SHA256_HEX_SIZE];      /* this host's topology fingerprint digest, for the mark */
};
void migrate_map_done(struct migrate_map *m);

/* A device of this host that another defined domain uses (pcinumad's
 * recheck cache, recheck.h): its id as recheck_ids spell it ("0000:3b:00.0",
 * "mdev:<uuid>" in lower case), and that domain.  The strings are the
 * caller's. */
struct migrate_used {
        const char *id;
        const char *uuid;               /* the domain's; entries with the incoming domain's are ignored */
        const char *domain;             /* its name, for messages (NULL: the uuid) */
};

struct migrate_in_use {
        const struct migrate_used *v;
        size_t n;
};

/* The pure mapping: each device m records (its position, vendor:device,
 * driver kind) to a distinct device of h (whose fingerprint is f) in the
 * same position, consistently (devices that share a root complex, switch
 * or slot on the source share one here); each mdev m records (its
 * mdev_type, its parent's position) to a distinct existing mdev of h of
 * that type whose parent is in that position, consistently with the
 * devices (a parent beside a passed-through NIC on the source is beside
 * its destination here; mdevs that share a parent share one here).
 * Devices and mdevs in in_use (NULL: none; entries of domain 'self', the
 * incoming one, do not count) are taken only when no mapping of free ones
 * exists; each pair that got one says by whom (used_by).  A PCI device
 * that a host driver holds (not vfio-pci, a VFIO variant driver, or none)
 * is never taken unless the policy lists it in its passthrough_pool
 * (migrate_map_policy()); when only such devices are in a device's place,
 * the refusal names them.
 * 0 and *ret, or -1 with *ret_reason (malloc'ed: which device or mdev,
 * what differs).  When devices have no place here, *ret_reason has several
 * lines: "N of M devices have no place like their own on this host", one
 * line per such device naming it and what differs, then this host's
 * devices (and mdevs) of those kinds, once each kind. */
int migrate_map(const struct mark *m, const struct hostmap *h, const struct fingerprint *f,
                const struct migrate_in_use *in_use, const char *self, struct migrate_map *ret, char **ret_reason);

/* The most placements (a mark device tried on a destination device in the
 * same position) migrate_map() tries before it refuses.  The search
 * backtracks, and a forged or huge mark whose devices each have many
 * equally placed candidates here could otherwise keep the daemon (root,
 * the one hook answer libvirt waits for) busy for ever.  A real host's
 * mapping takes about one placement per device plus a few retries.  A
 * placement's cost grows with the mark (its bindings): 100000 placements
 * took 0.3 s for a forged mark of 32 equally placed devices and up to
 * 1 s for 120-230 on this project's 2-core test machine, so the limit is
 * half that, per pass (the search runs a second pass, with devices other
 * domains use, only when the first finds nothing).  Beyond it the
 * migration is refused, saying so.  (A mark with more PCI devices than this host has
 * passthrough-capable ones is refused before any search, which also
 * bounds the search's depth.) */
#define MIGRATE_MAP_BUDGET 50000

/* migrate_map() with another limit than MIGRATE_MAP_BUDGET (for tests). */
int migrate_map_budget(const struct mark *m, const struct hostmap *h, const struct fingerprint *f,
                       const struct migrate_in_use *in_use, const char *self, size_t budget, struct migrate_map *ret,
                       char **ret_reason);

/* migrate_map_budget() under this host's policy pol: its passthrough_pool
 * and vfio_variant_drivers say which devices a host driver holds may be
 * given (migrate_map() and migrate_map_budget() take none: only devices
 * bound to no driver, vfio-pci or a VFIO variant driver). */
int migrate_map_policy(const struct mark *m, const struct hostmap *h, const struct fingerprint *f, const struct policy *pol,
                       const struct migrate_in_use *in_use, const char *self, size_t budget, struct migrate_map *ret,
                       char **ret_reason);

/* How many devices this host can give an incoming domain: the PCI devices
 * the fingerprint holds (those with a position, from the map's cached
 * positions) and the mdevs on them.  Cheap: the engine checks an incoming
 * domain's hostdevs against it before anything pairs devices. */
void migrate_capacity(const struct hostmap *h, size_t *ret_pci, size_t *ret_mdev);

/* migrate_map_policy() on this host's own fingerprint (computed once per
 * host map, hostmap_derived()) within MIGRATE_MAP_BUDGET, spending from
 * the request's budget 'work' too (NULL: none): the engine's call. */
int migrate_map_host(const struct mark *m, const struct hostmap *h, const struct policy *pol,
                     const struct migrate_in_use *in_use, const char *self, struct work *work, struct migrate_map *ret,
                     char **ret_reason);

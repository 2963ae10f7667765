/* Migration gated on topology (docs/policy.md "migration", issue 17): what
 * a plan records about where its devices sit (migrate_annotate(), for the
 * mark), and the destination's decision on an incoming planned domain
 * (migrate_incoming()): map each of its host devices to a device of this
 * host in the same position (fingerprint_position()) and each mdev to an
 * mdev of its type on a parent in its parent's position, then rewrite the
 * hostdev sources and the mark, keeping the guest side; or refuse, naming
 * the device and what differs.  Pure: no I/O, no globals. */
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
 * exists; each pair that got one says by whom (used_by).
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

enum migrate_verdict {
        MIGRATE_PASS,                   /* no mark (or XML that does not parse): unchanged */
        MIGRATE_ACCEPT,                 /* mapped: *xml is the rewritten domain */
        MIGRATE_REFUSE_MARKED,          /* the mark says migratable="no" (as before issue 17) */
        MIGRATE_REFUSE,                 /* *reason says why */
};

struct migrate_result {
        enum migrate_verdict verdict;
        char *xml;                      /* PASS, ACCEPT: the hook's stdout */
        char *reason;                   /* REFUSE: why, its first line a summary, no final newline (see
                                         * migrate_map()); REFUSE_MARKED: the mark's migratable-reason, or NULL */
        char *policy;                   /* the mark's policy, when it is a mode name; or NULL */
        char *uuid;                     /* the domain's, or NULL */
        struct migrate_map map;         /* ACCEPT: what went where */
};
void migrate_result_done(struct migrate_result *r);

/* The destination's migrate-begin decision on xml under this host's map h
 * and policy pol (whose "migration" setting for the domain decides); the
 * devices other domains use (in_use, NULL: unknown) are given only when no
 * free ones in the same positions are (the map's used_by says so). */
void migrate_incoming(const char *xml, size_t len, const struct hostmap *h, const struct policy *pol,
                      const struct migrate_in_use *in_use, struct migrate_result *ret);

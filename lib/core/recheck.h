/* Which domains a change touches, so that pcinumad asks its libvirt
 * watcher to look again at those only (docs/operations.md, "What a change
 * rechecks") instead of at every persistent domain.
 *
 * Three pure pieces, used by daemon/rechecks.c and watcher-requests.c:
 *   - the host devices a domain uses (its hostdevs' BDFs, each VF's PF,
 *     each mdev and its parent) and the difference between two host maps,
 *     as sorted lists of device ids that can be intersected;
 *   - a key of a domain's resolved policy settings (mode and switches, not
 *     where they came from), to tell which domains a policy reload changes;
 *   - the per-domain cache (UUID -> name, metadata, devices, settings key,
 *     last summary logged), bounded, and the removals held back for a
 *     grace period (a device that leaves sysfs briefly).
 * No I/O, no globals, no clock: callers pass "now". */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "domain.h"
#include "hostmap.h"
#include "policy.h"

/* A sorted set of device ids: "0000:3b:00.0" for a PCI function,
 * "mdev:<uuid>" (lower case) for an mdev. */
struct recheck_ids {
        char **v;
        size_t n;
};

void recheck_ids_add(struct recheck_ids *s, const char *id);     /* keeps it sorted and unique */
bool recheck_ids_contains(const struct recheck_ids *s, const char *id);
bool recheck_ids_intersect(const struct recheck_ids *a, const struct recheck_ids *b);
void recheck_ids_done(struct recheck_ids *s);

/* The devices domain d uses, resolved through h: each PCI hostdev's BDF
 * and, for a VF, its PF's; each mdev's id and its parent's BDF (and that
 * parent's PF).  A device h does not know is still listed by its own id,
 * so its arrival touches the domain. */
void recheck_domain_devices(const struct domain *d, const struct hostmap *h, struct recheck_ids *ret);

/* One changed device between two host maps. */
struct recheck_change {
        char *id;
        char *before;           /* its fingerprint in the old map, NULL if absent there */
        char *after;            /* in the new map, NULL if absent */
};

struct recheck_diff {
        bool global;            /* nodes, CPUs, sockets or distances changed: every domain is touched */
        struct recheck_change *v;       /* sorted by id */
        size_t n;
};

/* What differs between old and new: devices added, removed, or with any
 * field the planner may read changed (class, ids, node, driver, IOMMU
 * group, PF, BARs, host bridge and upstream path); mdevs added, removed or
 * with another parent, type or node. */
void recheck_diff_hosts(const struct hostmap *old, const struct hostmap *new, struct recheck_diff *ret);
void recheck_diff_done(struct recheck_diff *d);
/* The ids of d, as a set. */
void recheck_diff_ids(const struct recheck_diff *d, struct recheck_ids *ret);

/* A key of what the planner gets from the policy for one domain: the mode
 * and the feature switches, and the VFIO variant driver names when
 * managed is on.  Not the rule or file it came from, nor the alias used
 * ("required" and "require" give one key).  Caller frees. */
char *recheck_settings_key(const struct policy_settings *s, const struct policy *p);

/* --- removals held for a grace period ----------------------------------- */

/* A device that left the host map; acted on at 'deadline' if it has not
 * come back by then. */
struct recheck_hold {
        char *id;
        char *before;           /* its fingerprint before it left */
        uint64_t deadline;
};

struct recheck_holds {
        struct recheck_hold *v;
        size_t n;
};

/* Filter diff in place before acting on it: a removal is taken out and
 * held until now + grace; an addition of a held id drops the hold, and is
 * taken out of the diff too when the device came back exactly as it was
 * (fingerprint equal), so a remove + add pair changes nothing. */
void recheck_holds_filter(struct recheck_holds *h, struct recheck_diff *diff, uint64_t now, uint64_t grace);
/* Move the ids whose deadline is at or before now into *ret (added to
 * it); they are still gone (an addition would have dropped them). */
void recheck_holds_expire(struct recheck_holds *h, uint64_t now, struct recheck_ids *ret);
/* The earliest deadline, or UINT64_MAX when nothing is held. */
uint64_t recheck_holds_next(const struct recheck_holds *h);
void recheck_holds_done(struct recheck_holds *h);

/* --- the per-domain cache ------------------------------------------------ */

struct recheck_entry {
        char *uuid;
        char *name;
        char *tag;              /* <pcinuma:policy tag>, or NULL */
        char *requested;        /* <pcinuma:policy name>, or NULL */
        struct recheck_ids devices;
        char *settings_key;
        char *summary;          /* the last define-time summary, or NULL */
        uint64_t seen;          /* the cache's clock when last planned */
};

struct recheck_cache {
        struct recheck_entry *v;
        size_t n;
        size_t max;             /* entries kept; the least recently planned go first */
        uint64_t clock;
        bool overflowed;        /* an entry was dropped: the cache no longer knows every domain */
};

#define RECHECK_CACHE_MAX 8192

void recheck_cache_init(struct recheck_cache *c, size_t max);
void recheck_cache_done(struct recheck_cache *c);
struct recheck_entry *recheck_cache_find(struct recheck_cache *c, const char *uuid);
/* Drop uuid's entry (the domain was undefined); false if there was none. */
bool recheck_cache_forget(struct recheck_cache *c, const char *uuid);

/* Record a planned domain: its entry, created or refreshed (devices and
 * settings key replaced; the summary is left to the caller).  Drops the
 * least recently planned entry when full (and sets overflowed).  Returns
 * the entry; *ret_new says whether it was created. */
struct recheck_entry *recheck_cache_update(struct recheck_cache *c, const char *uuid, const struct domain *d,
                                           const struct hostmap *h, const char *settings_key, bool *ret_new);

/* The UUIDs of the cached domains that use any device in ids (added to
 * *ret, no duplicates). */
void recheck_cache_touched_by(const struct recheck_cache *c, const struct recheck_ids *ids, struct recheck_ids *ret);

/* The UUIDs of the cached domains whose settings key under policy p
 * differs from the one they were planned with (added to *ret). */
void recheck_cache_policy_changed(const struct recheck_cache *c, const struct policy *p, struct recheck_ids *ret);

/* What pcinumad answers to each libvirt hook call (docs/design.md §8): the phase
 * semantics, on top of the engine.  Pure: no I/O; the caller logs the
 * result and sends it. */
#pragma once

#include "engine.h"
#include "hook-protocol.h"
#include "hostmap.h"
#include "migrate.h"
#include "policy.h"

enum decide_verdict {
        DECIDE_PASS,            /* a phase we do not act on: allowed at once */
        DECIDE_ALLOW,           /* prepare: the topology matches the plan (or nothing to do) */
        DECIDE_WARN,            /* prepare: allowed, but the topology is not the plan (preferred, legacy), skipped, or the plan warns */
        DECIDE_REFUSE,          /* refused: exit 1 */
        DECIDE_RESTART,         /* prepare: allowed without the plan; pcinumad has the watcher restart the
                                 * domain into the plan as soon as it is up (docs/policy.md "first_start") */
        _DECIDE_VERDICT_MAX,
};

/* What pcinumad knows of the domain being started that its XML does not
 * say.  The caller computes it from its own state before decide_hook(),
 * which stays pure (it may run on a worker thread).  The facts are about
 * the domain whose UUID is uuid; decide_hook() ignores them (as unknown)
 * for a domain with another UUID. */
enum decide_persistence {
        DECIDE_PERSISTENCE_UNKNOWN,     /* no connected watcher has told */
        DECIDE_PERSISTENT,              /* libvirt has a persistent definition of it */
        DECIDE_TRANSIENT,               /* it has none: created with virDomainCreateXML */
};

struct decide_context {
        const char *uuid;               /* decide_peek_uuid() of the request's XML, or NULL */
        bool updating;                  /* a libvirt watcher is configured: it keeps persistent definitions planned */
        bool watcher;                   /* ... and is connected now: it can restart a domain */
        enum decide_persistence persistence;
        bool own_start;                 /* pcinuma-watcher starts this domain itself (its restart into the plan,
                                         * or the start as the client asked when that failed) */
        bool incoming;                  /* a migrate or restore hook call for this domain came just before: an
                                         * incoming migration or a restore, never restarted */
};

struct decision {
        enum decide_verdict verdict;
        int exit_code;                  /* 0 or 1 */
        char *out;                      /* the hook's stdout (migrate/restore: the XML), or NULL */
        char *message;                  /* the hook's stderr (one or more lines), or NULL */
        const char *phase;              /* "prepare", "migrate", ... (points into the request) */
        const char *subphase;
        char *domain;                   /* the domain name, from argv or the XML */
        char *uuid;                     /* NULL if unknown */
        enum policy_mode mode;
        bool has_mode;                  /* mode was resolved */
        struct engine_result *result;   /* the plan, when one was made (for the log) */
        bool restart_transient;         /* DECIDE_RESTART of a transient domain */
        bool restart_if_persistent;     /* DECIDE_WARN of a transient domain under first_start: restart and
                                         * transient: leave that the gate lets through (preferred, legacy):
                                         * restart it like a persistent one if it is persistent once it is up
                                         * (virt-install and virt-manager define it while it starts) */
        char **boot_files;              /* DECIDE_RESTART, restart_if_persistent: the files its <os> boots from
                                         * (kernel, initrd, dtb), which a client may remove once the domain
                                         * started (virt-install) */
        size_t n_boot_files;
        char **remap;                   /* migrate, accepted: "source BDF -> this host's BDF" each */
        size_t n_remap;
        char **shared;                  /* migrate, accepted: "this host's BDF (mdev UUID) <the other domain>" for
                                         * each device another domain uses too (no free one had its place) */
        size_t n_shared;
};

const char *decide_verdict_to_string(enum decide_verdict v);

/* Decide a hook call.  Never fails: bad XML in a phase that needs it is a
 * refusal whose message names the problem.  ctx (NULL: nothing known, no
 * watcher) says what pcinumad knows of the domain: whether a start
 * without the plan is restarted into it, and what a refusal tells the user
 * to do; in_use (NULL: unknown) the devices of this host that defined
 * domains use, for an incoming migration (engine_incoming()). */
void decide_hook(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                 const struct migrate_in_use *in_use, const struct decide_context *ctx, struct decision *ret);

/* The UUID of a domain XML without parsing it: the text of its first
 * <uuid> element, when that is a UUID in libvirt's canonical form
 * (8-4-4-4-12 hex digits), lower-cased into ret.  0, or -ENOENT.  Cheap
 * enough for the caller to look its state up before decide_hook(), which
 * checks it against the parsed domain. */
int decide_peek_uuid(const char *xml, size_t len, char ret[static 37]);
void decision_done(struct decision *d);

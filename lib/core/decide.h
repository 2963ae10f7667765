/* What pcinumad answers to each libvirt hook call (design §8): the phase
 * semantics, on top of the engine.  Pure: no I/O; the caller logs the
 * result and sends it. */
#pragma once

#include "engine.h"
#include "hostmap.h"
#include "migrate.h"
#include "policy.h"
#include "protocol.h"

enum decide_verdict {
        DECIDE_PASS,            /* a phase we do not act on: allowed at once */
        DECIDE_ALLOW,           /* prepare: the topology matches the plan (or nothing to do) */
        DECIDE_WARN,            /* prepare: allowed, but the topology is not the plan (preferred, legacy), skipped, or the plan warns */
        DECIDE_REFUSE,          /* refused: exit 1 */
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
        char **remap;                   /* migrate, accepted: "source BDF -> this host's BDF" each */
        size_t n_remap;
        char **shared;                  /* migrate, accepted: "this host's BDF (mdev UUID) <the other domain>" for
                                         * each device another domain uses too (no free one had its place) */
        size_t n_shared;
};

const char *decide_verdict_to_string(enum decide_verdict v);

/* Decide a hook call.  Never fails: bad XML in a phase that needs it is a
 * refusal whose message names the problem. */
/* 'updating' says whether a libvirt watcher will redefine the domain
 * (it changes what a refusal tells the user to do); in_use (NULL: unknown)
 * the devices of this host that defined domains use, for an incoming
 * migration (migrate_incoming()). */
void decide_hook(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                 const struct migrate_in_use *in_use, bool updating, struct decision *ret);
void decision_done(struct decision *d);

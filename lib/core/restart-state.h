/* What pcinumad keeps for restarts into the plan (docs/operations.md,
 * "Restart into the plan"): which domains libvirt holds a persistent
 * definition of, as the libvirt watcher reports them; the starts
 * pcinuma-watcher makes itself; the domains whose migrate or restore hook
 * call just came (their start is never restarted); and the counters behind
 * `pcinumactl status`.  From it, restart_context() computes the
 * decide_context of a prepare hook call, before decide_hook() runs (which
 * may be on a worker thread: it gets a copy, never this state).  Pure: the
 * caller passes the time (CLOCK_MONOTONIC, in usec) and does the I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "watcher-protocol.h"

/* A pcinuma-watcher start stays "its own" at most this long after it asked
 * for the plan (its restarted message ends it sooner): a start of a guest
 * with much memory and passthrough devices, then one more if it fails. */
#define RESTART_OWN_USEC (300ull * 1000 * 1000)
/* A migrate or restore hook call marks the prepare call that follows it
 * (at once: the same libvirt start) for this long. */
#define RESTART_INCOMING_USEC (60ull * 1000 * 1000)
/* The watcher reported a domain undefined: for this long, a prepare call
 * that finds it transient may be a define ahead of the watcher's events
 * (a client that undefines and defines it right before each start), and
 * waits for that define at most RESTART_REDEFINE_WAIT_USEC
 * (restart_define_awaited()), if its answer depends on it
 * (restart_define_matters()).  A call that waited the whole time ends the
 * note (restart_define_missed()). */
#define RESTART_UNDEFINED_USEC (10ull * 1000 * 1000)
#define RESTART_REDEFINE_WAIT_USEC (2ull * 1000 * 1000)

struct restart_note {
        char uuid[37];
        uint64_t until;                 /* CLOCK_MONOTONIC usec */
};

struct restart_state {
        /* Persistent domains, sorted; known is false until a connected
         * watcher sent the whole set, and again once it disconnects. */
        char (*persistent)[37];
        size_t n_persistent;
        bool known;

        struct restart_note *own;
        size_t n_own;
        struct restart_note *incoming;
        size_t n_incoming;
        /* Starts the gate let through with restart_if_persistent (decide.h):
         * requested once the watcher reports on one (it does only for a
         * domain that was persistent once up). */
        struct restart_note *conditional;
        size_t n_conditional;
        /* Domains reported undefined, until RESTART_UNDEFINED_USEC, their
         * next define, or a prepare call's wait for it in vain. */
        struct restart_note *undefined;
        size_t n_undefined;

        /* status "restarts" */
        uint64_t n_requested;           /* DECIDE_RESTART verdicts sent to the watcher */
        uint64_t n_outcome[_WPROTO_OUTCOME_MAX];
        uint64_t unplanned_us_sum, unplanned_us_max;    /* restarted and fallback only */
        uint64_t total_us_sum, total_us_max;
        uint64_t n_define_waits;        /* prepare calls held for a define (restart_define_matters()) */
        uint64_t n_define_waits_in_vain;        /* ... that waited the whole RESTART_REDEFINE_WAIT_USEC (restart_define_missed()) */
};

void restart_state_done(struct restart_state *s);

/* The watcher's messages: the whole set of persistent domains (replaces
 * what was known; known from now on), one domain defined or undefined
 * (at now; an undefined one is noted for restart_define_awaited()), and
 * its disconnection (unknown until the next whole set).  UUIDs that are
 * not in libvirt's canonical form are ignored. */
void restart_set_persistent(struct restart_state *s, const char *const *uuids, size_t n);
void restart_set_one(struct restart_state *s, const char *uuid, bool persistent, uint64_t now);
void restart_forget_persistence(struct restart_state *s);
/* Whether uuid is known to be persistent. */
bool restart_is_persistent(const struct restart_state *s, const char *uuid);

/* pcinuma-watcher is about to start uuid itself (a restart plan was asked
 * for): the gate lets its starts through until restart_done() or
 * RESTART_OWN_USEC. */
void restart_note_own(struct restart_state *s, const char *uuid, uint64_t now);
/* A migrate or restore hook call for uuid: its next start is not one to
 * restart. */
void restart_note_incoming(struct restart_state *s, const char *uuid, uint64_t now);

/* The gate let uuid start with restart_if_persistent: the watcher
 * restarts it if it is persistent once up, and reports only then; such a
 * report counts it as requested.  Until RESTART_OWN_USEC, or the next
 * prepare call of uuid. */
void restart_note_conditional(struct restart_state *s, const char *uuid, uint64_t now);

/* The context of a prepare hook call with this XML (decide.h): uuid_buf
 * receives the UUID ctx points to.  updating: a watcher is configured;
 * connected: it is connected to libvirt now.  A hook call whose incoming
 * note is used is forgotten by restart_after_prepare(). */
void restart_context(struct restart_state *s, const char *xml, size_t len, bool updating, bool connected, uint64_t now,
                     char uuid_buf[static 37], struct decide_context *ret);
/* Whether a define may be ahead of the watcher's events for the prepare
 * call of ctx: the gate holds the domain transient, and the watcher
 * reported it undefined within RESTART_UNDEFINED_USEC.  Nothing orders
 * libvirt's define events against its hook calls.  If so, the caller
 * decides the call, and if restart_define_matters() says the define
 * would change its verdict, it drops that decision and waits for
 * restart_set_one(uuid, true), at most RESTART_REDEFINE_WAIT_USEC, then
 * computes the context again and decides the call then. */
bool restart_define_awaited(struct restart_state *s, const struct decide_context *ctx, uint64_t now);
/* Whether d, decide_hook()'s answer to the prepare call req under ctx
 * (with h and pol), would be another answer if the domain were
 * persistent: another verdict, exit code, stdout or message, or other
 * restart flags.  Decided again so when d is one that may depend on ctx
 * at all (not memo_keeps(d), memo.h).  For a planned domain, one under
 * "off" or skipped, one refused by its plan, and an incoming one, the
 * answer is the same, and there is nothing to wait for; where only the
 * wording differs (under "transient": "restart", or "first_start":
 * "refuse" or "allow", the advice names the persistent definition), the
 * call waits, so that it gets the words it got before the wait was
 * refined. */
bool restart_define_matters(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                            const struct decide_context *ctx, const struct decision *d);
/* A prepare call of uuid waited RESTART_REDEFINE_WAIT_USEC for its define
 * in vain: the undefine note goes, so that the next start of a domain
 * undefined for good is not held again; counted in n_define_waits_in_vain. */
void restart_define_missed(struct restart_state *s, const char *uuid);

/* After the prepare decision of ctx: an incoming note is used up, a
 * conditional one is superseded (unless it is pcinuma's own start); a
 * DECIDE_RESTART is counted as requested. */
void restart_after_prepare(struct restart_state *s, const struct decide_context *ctx, enum decide_verdict v);

/* The watcher's report of a restart: counted (a conditional one as
 * requested too), and its own starts end. */
void restart_done(struct restart_state *s, const struct wproto_restarted *r);

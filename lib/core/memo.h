/* The memo of prepare answers: how pcinumad answers a planned domain that
 * comes back unchanged without parsing or planning it again
 * (docs/performance.md, "Hook").  Its three parts:
 *
 *   - what a request is answered by: the hook's arguments, the domain
 *     XML's bytes (but for the digits of the root element's id='N', which
 *     libvirt numbers anew at every start and pcinuma never reads), and the
 *     generations of the host map and of the policy the caller decides
 *     with (numbers the caller changes whenever it replaces either; it
 *     keeps the current one and its number when a reload reads one equal
 *     in content: memo_same_hostmap(), memo_same_policy()).  The
 *     memo keeps a copy of them with each answer and gives the answer
 *     only to a request equal to it in all of these: compared byte for
 *     byte, not through a hash, so no collision can give a wrong answer;
 *   - which answers may be kept: memo_keeps(), the prepare answers that
 *     come from the plan alone (allowed or warned about as the domain is:
 *     already planned, nothing to place, skipped), never one that depends
 *     on what pcinumad knows besides the request (struct decide_context:
 *     a start without the plan, restarts) or that is a refusal;
 *   - a table bounded in entries and bytes (struct memo), oldest out
 *     first.
 *
 * Why this lives in pcinumad's memory and not as a digest in the domain's
 * mark: a digest in the mark is written by whoever writes the domain, so
 * it would vouch for nothing (anyone can compute an unkeyed SHA-256 of a
 * stale domain and its inputs); checking it would mean parsing and
 * reverting the domain, most of what the answer costs; and libvirt's XML
 * at start is not the XML pcinuma planned.  The memo answers only what
 * pcinumad itself decided for exactly the same request, host map and
 * policy.  tests/unit/test-memo.c checks that its answer is the full
 * decision's over the golden cases and edits of each.  Pure: no I/O, no
 * globals. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "hook-protocol.h"
#include "hostmap.h"
#include "policy.h"

/* The most entries a memo keeps, and the most bytes of requests (domain
 * XML and arguments) it holds; the oldest go first. */
#define MEMO_CAPACITY 64
#define MEMO_BYTES_MAX (1024u * 1024u)

/* May d, decide_hook()'s answer to a request, be given again to the same
 * request?  Only a prepare begin answered allow or warn from the plan
 * alone: the domain already planned (its mark and layout match the plan),
 * or nothing to place, or skipped.  Those answers are functions of the
 * request, the host map and the policy: decide_hook() does not read its
 * decide_context or in_use for them. */
bool memo_keeps(const struct decision *d);

struct memo_entry {
        char *argv[4];
        char *xml;                      /* NULL: the request had none */
        size_t xml_len;
        bool xml_not_utf8;
        long xml_invalid_utf8;
        bool id;                        /* the root element's id digits are xml[id_at, id_at + id_n) */
        size_t id_at, id_n;
        uint64_t host_generation, policy_generation;
        size_t bytes;                   /* what it counts against MEMO_BYTES_MAX */
        void *value;
};

struct memo {
        struct memo_entry *v;           /* oldest first */
        size_t n;
        size_t bytes;
        void (*free_value)(void *value);
        uint64_t hits, misses;          /* memo_get()'s answers */
};

/* An empty memo whose values free_value frees. */
void memo_init(struct memo *m, void (*free_value)(void *value));
/* Free every entry and the table (m itself is the caller's). */
void memo_done(struct memo *m);
/* The value kept for req decided with the host map and policy of these
 * generations, or NULL. */
void *memo_get(struct memo *m, const struct proto_request *req, uint64_t host_generation, uint64_t policy_generation);
/* Keep value (the memo owns it now) for req and these generations, in
 * place of one kept for the same, and making room by dropping the
 * oldest; true.  A request over MEMO_BYTES_MAX is not kept: value is
 * freed, false. */
bool memo_put(struct memo *m, const struct proto_request *req, uint64_t host_generation, uint64_t policy_generation,
              void *value);

/* Whether a reload's new host map (policy) b is equal in content to a,
 * the one it replaces: everything decide_hook() may read of it (every
 * field of every node, distance, device, mdev and warning, the CPU
 * identity; every setting, rule, variant driver and pool entry of the
 * policy, with their texts, which messages quote).  The caller then keeps
 * a and its generation, so the memo stays warm across a rescan or reload
 * that changed nothing, and b is dropped.  A field added to one of those
 * structs must be compared here too: each struct says so above its
 * definition, and on x86-64 a field that changes a struct's size stops
 * the build (memo.c); one that fits into padding does not. */
bool memo_same_hostmap(const struct hostmap *a, const struct hostmap *b);
bool memo_same_policy(const struct policy *a, const struct policy *b);

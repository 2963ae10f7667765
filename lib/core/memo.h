/* The memo of prepare answers: how pcinumad answers a planned domain that
 * comes back unchanged without parsing or planning it again
 * (docs/performance.md, "Hook").  Its three parts:
 *
 *   - the key: memo_key(), a SHA-256 over everything decide_hook() reads
 *     to answer a prepare call that memo_keeps() accepts: the hook's
 *     arguments, the domain XML's bytes (the digits of the root element's
 *     id='N', which libvirt numbers anew at every start and pcinuma never
 *     reads, left out), and the generations of the host map and of the
 *     policy the caller decides with (a number the caller changes whenever
 *     it replaces either);
 *   - which answers may be kept: memo_keeps(), the prepare answers that
 *     come from the plan alone (allowed or warned about as the domain is:
 *     already planned, nothing to place, skipped), never one that depends
 *     on what pcinumad knows besides the request (struct decide_context:
 *     a start without the plan, restarts) or that is a refusal;
 *   - a bounded table from key to the caller's answer (struct memo).
 *
 * Why the key is in pcinumad's memory and not in the domain's mark: a
 * digest in the mark is written by whoever writes the domain, so it would
 * vouch for nothing (anyone can compute an unkeyed SHA-256 of a stale
 * domain); checking it would mean parsing and reverting the domain, half
 * of what the answer costs; and libvirt's XML at start is not the XML
 * pcinuma planned.  Keyed by what was received, the memo answers only what
 * pcinumad itself decided for the same bytes, host map and policy; a
 * collision of SHA-256 is the only way to a wrong answer.
 * tests/unit/test-memo.c checks that the memo's answer is the full
 * decision's over the golden cases and edits of each.  Pure: no I/O, no
 * globals. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "protocol.h"

#define MEMO_KEY_SIZE 32

/* The entries a memo keeps at most; the oldest goes first. */
#define MEMO_CAPACITY 128

/* The key of request req decided with the host map and policy of these
 * generations, into ret. */
void memo_key(const struct proto_request *req, uint64_t host_generation, uint64_t policy_generation,
              uint8_t ret[MEMO_KEY_SIZE]);

/* May d, decide_hook()'s answer to a request, be given again to the same
 * request (same key)?  Only a prepare begin answered allow or warn from
 * the plan alone: the domain already planned (its mark and layout match
 * the plan), or nothing to place, or skipped.  Those answers are
 * functions of the request, the host map and the policy: decide_hook()
 * does not read its decide_context or in_use for them. */
bool memo_keeps(const struct decision *d);

struct memo_entry {
        uint8_t key[MEMO_KEY_SIZE];
        void *value;
};

struct memo {
        struct memo_entry *v;           /* a ring of up to MEMO_CAPACITY */
        size_t n;
        size_t next;                    /* when full: the oldest, replaced next */
        void (*free_value)(void *value);
        uint64_t hits, misses;          /* memo_get()'s answers */
};

/* An empty memo whose values free_value frees. */
void memo_init(struct memo *m, void (*free_value)(void *value));
/* Free every entry and the table (m itself is the caller's). */
void memo_done(struct memo *m);
/* The value kept for key, or NULL. */
void *memo_get(struct memo *m, const uint8_t key[MEMO_KEY_SIZE]);
/* Keep value for key (the memo owns it now), in place of one kept for
 * the same key, or of the oldest when full. */
void memo_put(struct memo *m, const uint8_t key[MEMO_KEY_SIZE], void *value);

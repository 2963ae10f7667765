/* What pcinumad keeps for restarts into the plan, and the prepare gate's
 * context computed from it (restart-state.h).  Pure. */
#include "restart-state.h"

#include <stdlib.h>
#include <string.h>

#include "memo.h"
#include "util.h"

static int cmp_uuid(const void *a, const void *b) {
        return strcmp((const char *) a, (const char *) b);
}

/* Where uuid is, or would be inserted, in the sorted set. */
static size_t find(const struct restart_state *s, const char *uuid, bool *ret_found) {
        size_t lo = 0, hi = s->n_persistent;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(s->persistent[mid], uuid);
                if (c == 0) {
                        *ret_found = true;
                        return mid;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        *ret_found = false;
        return lo;
}

void restart_state_done(struct restart_state *s) {
        free(s->persistent);
        free(s->own);
        free(s->incoming);
        free(s->conditional);
        free(s->undefined);
        *s = (struct restart_state) {0};
}

static void note_add(struct restart_note **v, size_t *n, const char *uuid, uint64_t now, uint64_t until);
static void note_remove(struct restart_note *v, size_t *n, const char *uuid);
static struct restart_note *note_find(struct restart_note *v, size_t *n, const char *uuid, uint64_t now);

void restart_set_persistent(struct restart_state *s, const char *const *uuids, size_t n) {
        free(s->persistent);
        s->persistent = n ? xcalloc(n, sizeof(*s->persistent)) : NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (uuid_canonical(uuids[i], s->persistent[k]) == 0)
                        k++;
        if (k)
                qsort(s->persistent, k, sizeof(*s->persistent), cmp_uuid);
        /* No duplicates: the set is searched and edited by bisection. */
        size_t w = 0;
        for (size_t i = 0; i < k; i++)
                if (w == 0 || strcmp(s->persistent[w - 1], s->persistent[i]) != 0)
                        memmove(s->persistent[w++], s->persistent[i], 37);
        s->n_persistent = w;
        s->known = true;
}

void restart_set_one(struct restart_state *s, const char *uuid, bool persistent, uint64_t now) {
        char u[37];
        if (uuid_canonical(uuid, u) < 0)
                return;
        if (persistent)
                note_remove(s->undefined, &s->n_undefined, u);
        else
                note_add(&s->undefined, &s->n_undefined, u, now, now + RESTART_UNDEFINED_USEC);
        bool found;
        size_t at = find(s, u, &found);
        if (persistent && !found) {
                s->persistent = xreallocarray(s->persistent, s->n_persistent + 1, sizeof(*s->persistent));
                memmove(s->persistent[at + 1], s->persistent[at], (s->n_persistent - at) * sizeof(*s->persistent));
                memcpy(s->persistent[at], u, 37);
                s->n_persistent++;
        } else if (!persistent && found) {
                memmove(s->persistent[at], s->persistent[at + 1], (s->n_persistent - at - 1) * sizeof(*s->persistent));
                s->n_persistent--;
        }
}

void restart_forget_persistence(struct restart_state *s) {
        free(s->persistent);
        s->persistent = NULL;
        s->n_persistent = 0;
        s->known = false;
}

bool restart_is_persistent(const struct restart_state *s, const char *uuid) {
        char u[37];
        if (uuid_canonical(uuid, u) < 0)
                return false;
        bool found;
        (void) find(s, u, &found);
        return found;
}

/* Drop the notes that ran out; return the one for uuid, or NULL. */
static struct restart_note *note_find(struct restart_note *v, size_t *n, const char *uuid, uint64_t now) {
        size_t w = 0;
        for (size_t i = 0; i < *n; i++)
                if (v[i].until > now)
                        v[w++] = v[i];
        *n = w;
        for (size_t i = 0; i < *n; i++)
                if (streq(v[i].uuid, uuid))
                        return &v[i];
        return NULL;
}

static void note_add(struct restart_note **v, size_t *n, const char *uuid, uint64_t now, uint64_t until) {
        char u[37];
        if (uuid_canonical(uuid, u) < 0)
                return;
        struct restart_note *e = note_find(*v, n, u, now);
        if (!e) {
                e = GROW(*v, *n);
                memcpy(e->uuid, u, 37);
        }
        e->until = until;
}

static void note_remove(struct restart_note *v, size_t *n, const char *uuid) {
        for (size_t i = 0; i < *n; i++)
                if (streq(v[i].uuid, uuid)) {
                        v[i] = v[--*n];
                        return;
                }
}

void restart_note_own(struct restart_state *s, const char *uuid, uint64_t now) {
        note_add(&s->own, &s->n_own, uuid, now, now + RESTART_OWN_USEC);
}

void restart_note_incoming(struct restart_state *s, const char *uuid, uint64_t now) {
        note_add(&s->incoming, &s->n_incoming, uuid, now, now + RESTART_INCOMING_USEC);
}

void restart_note_conditional(struct restart_state *s, const char *uuid, uint64_t now) {
        note_add(&s->conditional, &s->n_conditional, uuid, now, now + RESTART_OWN_USEC);
}

void restart_context(struct restart_state *s, const char *xml, size_t len, bool updating, bool connected, uint64_t now,
                     char uuid_buf[static 37], struct decide_context *ret) {
        struct decide_context c = { .updating = updating };
        if (xml && decide_peek_uuid(xml, len, uuid_buf) == 0) {
                c.uuid = uuid_buf;
                /* Persistence is known only from a connected watcher's set. */
                c.watcher = connected && s->known;
                c.persistence = !c.watcher ? DECIDE_PERSISTENCE_UNKNOWN
                                : restart_is_persistent(s, uuid_buf) ? DECIDE_PERSISTENT : DECIDE_TRANSIENT;
                c.own_start = note_find(s->own, &s->n_own, uuid_buf, now) != NULL;
                c.incoming = note_find(s->incoming, &s->n_incoming, uuid_buf, now) != NULL;
        }
        *ret = c;
}

bool restart_define_awaited(struct restart_state *s, const struct decide_context *ctx, uint64_t now) {
        return ctx->uuid && ctx->watcher && ctx->persistence == DECIDE_TRANSIENT &&
               note_find(s->undefined, &s->n_undefined, ctx->uuid, now) != NULL;
}

bool restart_define_matters(const struct proto_request *req, const struct hostmap *h, const struct policy *pol,
                            const struct decide_context *ctx, const struct decision *d) {
        if (memo_keeps(d))
                return false;           /* a function of the request, the host map and the policy alone */
        struct decide_context persistent = *ctx;
        persistent.persistence = DECIDE_PERSISTENT;
        struct decision as_persistent = {0};
        decide_hook(req, h, pol, NULL, &persistent, &as_persistent);
        bool matters = as_persistent.verdict != d->verdict || as_persistent.exit_code != d->exit_code ||
                       as_persistent.restart_transient != d->restart_transient ||
                       as_persistent.restart_if_persistent != d->restart_if_persistent ||
                       !streq_ptr(as_persistent.out, d->out) || !streq_ptr(as_persistent.message, d->message);
        decision_done(&as_persistent);
        return matters;
}

void restart_define_missed(struct restart_state *s, const char *uuid) {
        char u[37];
        if (uuid_canonical(uuid, u) < 0)
                return;
        s->n_define_waits_in_vain++;
        note_remove(s->undefined, &s->n_undefined, u);
}

void restart_after_prepare(struct restart_state *s, const struct decide_context *ctx, enum decide_verdict v) {
        if (ctx->uuid && ctx->incoming)
                note_remove(s->incoming, &s->n_incoming, ctx->uuid);
        /* A client's new start of it: what the watcher reports now is
         * this one's (pcinuma's own starts are the restart's). */
        if (ctx->uuid && !ctx->own_start)
                note_remove(s->conditional, &s->n_conditional, ctx->uuid);
        if (v == DECIDE_RESTART)
                s->n_requested++;
}

void restart_done(struct restart_state *s, const struct wproto_restarted *r) {
        if ((size_t) r->outcome < _WPROTO_OUTCOME_MAX)
                s->n_outcome[r->outcome]++;
        if (r->outcome == WPROTO_OUTCOME_RESTARTED || r->outcome == WPROTO_OUTCOME_FALLBACK) {
                s->unplanned_us_sum += r->unplanned_us;
                if (r->unplanned_us > s->unplanned_us_max)
                        s->unplanned_us_max = r->unplanned_us;
                s->total_us_sum += r->total_us;
                if (r->total_us > s->total_us_max)
                        s->total_us_max = r->total_us;
        }
        char u[37];
        if (uuid_canonical(r->uuid, u) == 0) {
                note_remove(s->own, &s->n_own, u);
                /* A conditional restart the watcher went on with. */
                for (size_t i = 0; i < s->n_conditional; i++)
                        if (streq(s->conditional[i].uuid, u)) {
                                s->n_requested++;
                                s->conditional[i] = s->conditional[--s->n_conditional];
                                break;
                        }
        }
}

/* A hook request, from the server's frame to the answer: the context it is
 * decided with (copied from the manager's state), the memo of prepare
 * answers, the decision on the main thread or on a worker, its side
 * effects (counters, the journal, the watcher), and the wait of a prepare
 * call for a define that may be on its way (park/unpark).  The server
 * calls manager_handle() for every request; a status request is answered
 * from status.c. */
#include "manager-internal.h"

#include <malloc.h>
#include <strings.h>
#include <time.h>

#include "hook-protocol.h"
#include "metrics.h"
#include "server.h"
#include "watcher-link.h"
#include "workers.h"

/* --- the memo of prepare answers ------------------------------------------
 *
 * A planned domain that comes back unchanged (the same hook arguments and
 * XML bytes, the same host map and policy objects) is answered as it was
 * the first time, without parsing or planning it: memo.h says which
 * answers are kept and why the key makes them right.  Requests decided on
 * the main thread only (the memo is the main thread's). */
struct memo_answer {
        enum decide_verdict verdict;
        int exit_code;
        char *message;
        char *domain;
        char *uuid;
        enum policy_mode mode;
        bool has_mode;
        struct decision_log log;
};

void memo_answer_free(void *v) {
        struct memo_answer *a = v;
        free(a->message);
        free(a->domain);
        free(a->uuid);
        decision_log_done(&a->log);
        free(a);
}

static struct memo_answer *memo_answer_new(const struct decision *d) {
        struct memo_answer *a = xcalloc(1, sizeof(*a));
        *a = (struct memo_answer) {
                .verdict = d->verdict,
                .exit_code = d->exit_code,
                .message = d->message ? xstrdup(d->message) : NULL,
                .domain = xstrdup(d->domain),
                .uuid = d->uuid ? xstrdup(d->uuid) : NULL,
                .mode = d->mode,
                .has_mode = d->has_mode,
        };
        decision_log_build(d, &a->log);
        return a;
}

/* The decision a is the answer of, for req (no plan with it: the log is
 * a's). */
static void memo_answer_decision(const struct memo_answer *a, const struct proto_request *req, struct decision *ret) {
        *ret = (struct decision) {
                .verdict = a->verdict,
                .exit_code = a->exit_code,
                .message = a->message ? xstrdup(a->message) : NULL,
                .phase = req->argv[1],
                .subphase = req->argv[2],
                .domain = xstrdup(a->domain),
                .uuid = a->uuid ? xstrdup(a->uuid) : NULL,
                .mode = a->mode,
                .has_mode = a->has_mode,
        };
}

/* --- hook decisions, and the workers --------------------------------------
 *
 * A hook request whose domain XML is larger than HOOK_INLINE_MAX is
 * decided on a worker thread (workers.h), so that however heavy it is, it
 * never holds up the event loop: other domains' verdicts, status, the
 * watcher, the watchdog.  An ordinary one (every real domain XML but the
 * largest) is decided at once on the main thread: its decision is bounded
 * by its size (the core's work is), and it saves the two thread hand-offs
 * a worker costs, which on a loaded host are scheduler delays on every VM
 * start.
 *
 * Either way the request is a hook_job that owns everything its decision
 * reads: the request, references to the host map and the policy of the
 * moment (struct shared), and a hook_context the main thread filled in
 * from the manager's state when the request came in.  hook_job_decide()
 * runs decide_hook() on that alone, and the answer is made from the
 * decision (on a worker, encoded there too); everything else happens on
 * the main thread afterwards, in hook_job_apply(): counters, the log, the
 * watcher; then the answer is sent.
 *
 * To give a decision more of the manager's state, add a field to struct
 * hook_context, fill it in hook_context_fill() (a copy: on a worker the
 * manager's memory changes while the decision runs) and free it in
 * hook_context_done(); hook_job_decide() passes it to the core.  A side
 * effect of a decision goes into hook_job_apply(), which both paths run
 * before the answer is sent; the answer is the decision's (made before
 * apply runs), so what the client is told belongs in the decision. */

/* Decided on the main thread up to this size of domain XML (a planned
 * 16-device domain is 25 KiB); on a worker above it. */
#define HOOK_INLINE_MAX (64u * 1024u)

/* What a hook decision needs from the manager's state, copied when the
 * request arrives. */
struct hook_context {
        struct decide_context decide;   /* what the gate knows of the domain (restart-state.h); its uuid points to: */
        char uuid[37];
        uint64_t now;                   /* CLOCK_MONOTONIC, when it was filled */
        bool await_define;              /* a prepare call whose define may be on its way (restart_define_awaited()) */
        struct migrate_in_use in_use;   /* migrate: the devices defined domains use (the recheck cache);
                                         * every string owned by the context */
};

static void hook_context_done(struct hook_context *c) {
        for (size_t i = 0; i < c->in_use.n; i++) {
                free((char *) c->in_use.v[i].id);
                free((char *) c->in_use.v[i].uuid);
                free((char *) c->in_use.v[i].domain);
        }
        free((void *) c->in_use.v);
        *c = (struct hook_context) {0};
}

/* The devices each defined domain uses, as the recheck cache knows them
 * (domains the watcher has looked at), for an incoming migration's
 * mapping: copies, since the cache changes while the worker reads them. */
static void devices_in_use(const struct recheck_cache *c, struct migrate_in_use *ret) {
        size_t n = 0;
        for (size_t i = 0; i < c->n; i++)
                n += c->v[i].devices.n;
        struct migrate_used *v = xcalloc(n ? n : 1, sizeof(*v));
        size_t k = 0;
        for (size_t i = 0; i < c->n; i++)
                for (size_t j = 0; j < c->v[i].devices.n; j++)
                        v[k++] = (struct migrate_used) {
                                .id = xstrdup(c->v[i].devices.v[j]),
                                .uuid = c->v[i].uuid ? xstrdup(c->v[i].uuid) : NULL,
                                .domain = c->v[i].name ? xstrdup(c->v[i].name) : NULL,
                        };
        *ret = (struct migrate_in_use) { .v = v, .n = k };
}

static void hook_context_fill(struct manager *m, const struct proto_request *req, struct hook_context *ret) {
        *ret = (struct hook_context) { .now = now_usec(CLOCK_MONOTONIC) };
        /* Is the domain persistent, is this start pcinuma's own, did a
         * migrate or restore call for it come just before, is a watcher
         * connected: restart-state.h. */
        restart_context(&m->restarts, req->xml, req->xml_len, m->watcher != NULL, m->watcher != NULL, ret->now,
                        ret->uuid, &ret->decide);
        ret->await_define = streq(req->argv[1], "prepare") && streq(req->argv[2], "begin") &&
                            restart_define_awaited(&m->restarts, &ret->decide, ret->now);
        if (streq(req->argv[1], "migrate"))
                devices_in_use(&m->cache, &ret->in_use);
}

struct hook_job {
        struct worker_job work;         /* first: the pool's part (workers.h) */
        /* Main thread only: */
        struct manager *m;
        uint64_t t0;                    /* CLOCK_MONOTONIC: when the request came in */
        struct conn *conn;              /* where a worker's answer goes; NULL once the client has gone */
        struct shared *hostmap, *policy;        /* references, dropped when the job is freed */
        /* The decision's input, read only by it once queued: */
        struct proto_request req;
        struct hook_context ctx;
        /* Its output: */
        struct decision d;
        const struct decision_log *log; /* the memo's journal entry of d (not owned), or NULL: log d */
        bool define_matters;            /* ctx.await_define, and a define would change d's answer: wait for it */
        char *frame;                    /* a worker's answer, encoded; NULL if it could not be */
        size_t frame_len;
        /* While it waits for a define (manager.parked): */
        struct hook_job *park_next;
        sd_event_source *park_timer;
        pid_t peer_pid;
};

static void hook_job_free(struct hook_job *j) {
        sd_event_source_disable_unref(j->park_timer);
        decision_done(&j->d);
        hook_context_done(&j->ctx);
        proto_request_done(&j->req);
        shared_unref(j->hostmap);
        shared_unref(j->policy);
        free(j->frame);
        free(j);
}

/* Any thread: the job's own data, the host map and the policy. */
static void hook_job_decide(struct hook_job *j) {
        decide_hook(&j->req, j->hostmap->obj, j->policy->obj, &j->ctx.in_use, &j->ctx.decide, &j->d);
        if (j->ctx.await_define)
                j->define_matters = restart_define_matters(&j->req, j->hostmap->obj, j->policy->obj, &j->ctx.decide,
                                                           &j->d);
        /* The path fidelity report the journal entry gives (log_decision()),
         * computed by the job that owns the plan. */
        if (j->d.result)
                planner_fidelity(j->d.result->plan);
}

static json_object *hook_job_answer(const struct hook_job *j) {
        const struct decision *d = &j->d;
        return proto_response_new_hook(d->exit_code, d->out, d->message, decide_verdict_to_string(d->verdict));
}

/* On the main thread: hook_job_decide(), or the memo's answer when it has
 * one for this request (and the decision's, when the memo keeps it). */
static void hook_job_decide_memo(struct hook_job *j) {
        struct memo *memo = &j->m->memo;
        if (!streq(j->req.argv[1], "prepare") || !streq(j->req.argv[2], "begin")) {
                hook_job_decide(j);
                return;
        }
        uint64_t hg = j->hostmap->generation, pg = j->policy->generation;
        struct memo_answer *a = memo_get(memo, &j->req, hg, pg);
        if (a)
                memo_answer_decision(a, &j->req, &j->d);
        else {
                hook_job_decide(j);
                if (!memo_keeps(&j->d))
                        return;
                a = memo_answer_new(&j->d);
                if (!memo_put(memo, &j->req, hg, pg, a))
                        return;         /* not kept (and freed): d is logged */
        }
        j->log = &a->log;
}

/* A worker thread's part. */
static void hook_job_run(struct worker_job *w) {
        struct hook_job *j = (struct hook_job *) w;
        hook_job_decide(j);
        json_object *resp = hook_job_answer(j);
        if (frame_encode(resp, &j->frame, &j->frame_len) < 0)
                j->frame = NULL;
        json_object_put(resp);
        /* The XML answer is in the frame now (up to 4 MiB). */
        free(j->d.out);
        j->d.out = NULL;
}

/* The main thread's part, once the decision is made (and its answer, which
 * this does not change): its side effects, before the answer is sent.  On
 * a worker's job, d->out is gone by now (it is in the answer). */
static void hook_job_apply(struct hook_job *j) {
        struct manager *m = j->m;
        const struct decision *d = &j->d;
        m->n_verdict[d->verdict]++;
        metrics_verdict(m->metrics, d->phase, d->has_mode ? policy_mode_to_string(d->mode) : NULL,
                        decide_verdict_to_string(d->verdict));
        if (d->result && d->result->stale_mark)
                metrics_stale_mark(m->metrics, "prepare");
        if (j->log)
                decision_log_emit(j->log);
        else
                log_decision(d);
        /* Restarts into the plan (restart-state.h): a prepare call uses up an
         * incoming note and asks the watcher for a restart; a migrate or
         * restore call notes that the prepare call that follows is not a
         * start to restart. */
        const struct decide_context *ctx = &j->ctx.decide;
        bool begin = streq(d->subphase, "begin");
        if (begin && streq(d->phase, "prepare"))
                restart_after_prepare(&m->restarts, ctx, d->verdict);
        else if (begin && (streq(d->phase, "migrate") || streq(d->phase, "restore")) && ctx->uuid &&
                 d->verdict != DECIDE_REFUSE)
                restart_note_incoming(&m->restarts, ctx->uuid, j->ctx.now);
        if ((d->verdict == DECIDE_RESTART || d->restart_if_persistent) && m->watcher) {
                /* restart_if_persistent: a transient domain the gate let
                 * through, restarted only if it is persistent once up (a
                 * client that defines it while it starts: virt-install). */
                if (d->restart_if_persistent && d->uuid)
                        restart_note_conditional(&m->restarts, d->uuid, j->ctx.now);
                watcher_link_restart(m->watcher, d->uuid, m->policy->restart_window_ms, j->ctx.now,
                                     (const char *const *) d->boot_files, d->n_boot_files, d->restart_if_persistent);
        }
        /* A start that found the layout out of date: make sure the
         * watcher looks at this domain, even if it missed an event.
         * Not while it restarts it: a look at a starting domain waits
         * for libvirt's lock, and would hold up the restart; the look
         * comes when the restart is over (manager_restart_done). */
        if (m->watcher && d->result && d->result->verdict == PLAN_APPLY && !d->result->already_planned && d->uuid &&
            d->verdict != DECIDE_RESTART && !d->restart_if_persistent)
                watcher_link_recheck_domain(m->watcher, d->uuid);
        /* From the request's arrival: a worker's wait and run included. */
        metrics_request(m->metrics, "hook", now_usec(CLOCK_MONOTONIC) - j->t0);
}

static int park(struct manager *m, struct hook_job *j);
static int on_park_timer(sd_event_source *s, uint64_t usec, void *userdata);

/* On the main thread, once a worker is done (or, cancelled, when
 * pcinumad stops: then only freed); or parked, when its decision says it
 * waits for a define (park()). */
static void hook_job_complete(struct worker_job *w) {
        struct hook_job *j = (struct hook_job *) w;
        struct manager *m = j->m;
        bool cancelled = w->cancelled;
        if (!cancelled && j->define_matters && park(m, j) == 0)
                return;         /* decided again once the define comes */
        if (!cancelled) {
                hook_job_apply(j);
                if (j->conn)
                        server_reply(j->conn, TAKE_PTR(j->frame), j->frame_len);
        }
        hook_job_free(j);       /* and w with it */
        /* A worker's job is a large document (a 1 MiB domain's DOM is
         * about 10 MiB), whose freed pages malloc would keep.  Once the
         * workers are idle they go back to the system: one trim per burst
         * of large requests (tens of ms after one of 50 MiB), never for an
         * ordinary request. */
        if (!cancelled && workers_idle(m->workers))
                (void) malloc_trim(0);
}

/* The server's: connection j->conn is closed while a worker decides j. */
void manager_job_detach(void *userdata, struct hook_job *j) {
        j->conn = NULL;
}

/* A hook request the workers cannot take now (err: -EBUSY, when
 * WORKERS_LARGE_QUEUED large ones wait; else no thread could be started):
 * an error answer at once, which the hook treats as a daemon that cannot
 * give a verdict (on_unreachable), rather than a wait the hook would time
 * out on. */
static json_object *answer_busy(struct manager *m, const struct proto_request *req, pid_t peer_pid, int err) {
        struct workers_stats st;
        workers_stats(m->workers, &st);
        _cleanup_free_ char *why = err == -EBUSY
                ? xasprintf("pcinumad is busy: %u requests with a domain XML over %u KiB are being decided and %u wait, "
                            "so this one (%zu KiB) is not taken", st.busy_large, WORKERS_LARGE_BYTES / 1024,
                            st.queued_large, req->xml_len / 1024)
                : xasprintf("pcinumad cannot start its worker threads (%s), so this request (%zu KiB of domain XML) "
                            "is not decided", strerror(-err), req->xml_len / 1024);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", req->argv[0]);
        log_fields_add(&f, "PCINUMA_PHASE", "%s", req->argv[1]);
        log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) peer_pid);
        log_event(LOG_WARNING, PCINUMA_MID_BUSY, &f, "Not deciding %s %s of domain %s: %s", req->argv[1], req->argv[2],
                  req->argv[0], why);
        log_fields_done(&f);
        return proto_response_new_error("%s", why);
}

/* Decide j: at once when its domain XML is small (the answer is returned),
 * else on a worker (NULL is returned, *ret_job is j, and the answer goes
 * through server_reply() when it is done). */
static json_object *hook_job_start(struct manager *m, struct hook_job *j, struct hook_job **ret_job) {
        if (j->req.xml_len <= HOOK_INLINE_MAX) {
                hook_job_decide_memo(j);
                if (j->define_matters && park(m, j) == 0) {
                        *ret_job = j;
                        return NULL;
                }
                json_object *resp = hook_job_answer(j);
                hook_job_apply(j);
                hook_job_free(j);
                return resp;
        }
        int r = workers_submit(m->workers, &j->work);
        if (r < 0) {
                json_object *resp = answer_busy(m, &j->req, j->peer_pid, r);
                metrics_request(m->metrics, "hook", now_usec(CLOCK_MONOTONIC) - j->t0);
                hook_job_free(j);
                return resp;
        }
        *ret_job = j;
        return NULL;
}

/* A prepare call of a domain that is transient at the gate, but that the
 * watcher reported undefined moments ago, may come from a client that
 * undefines and defines it right before each start, with the define's
 * event not yet through the watcher: libvirt orders nothing between its
 * events and its hook calls.  When its answer depends on that
 * (j->define_matters: restart_define_matters(), restart-state.h), such a call
 * waits for the define, at most RESTART_REDEFINE_WAIT_USEC, off the main
 * loop's path: the server keeps the connection waiting, as for a worker's
 * job.  Its decision is dropped, to be made again when it is unparked.
 * Returns 0 if j was parked, a negative errno if it could not be (then j
 * is answered as decided). */
static int park(struct manager *m, struct hook_job *j) {
        int r = sd_event_add_time_relative(m->event, &j->park_timer, CLOCK_MONOTONIC, RESTART_REDEFINE_WAIT_USEC, 0,
                                           on_park_timer, j);
        if (r < 0)
                return r;
        decision_done(&j->d);
        j->log = NULL;
        j->define_matters = false;
        free(j->frame);
        j->frame = NULL;
        j->park_next = m->parked;
        m->parked = j;
        m->restarts.n_define_waits++;
        log_msg(LOG_DEBUG, "Start of domain %s: transient at the gate but undefined moments ago, and its verdict "
                "depends on that; waiting up to %llu ms for its define",
                j->req.argv[0], (unsigned long long) (RESTART_REDEFINE_WAIT_USEC / 1000));
        return 0;
}

/* Take j off the parked list, compute its context again (the define may
 * have come) and decide it; its answer goes to its connection, if the
 * client is still there. */
static void unpark(struct manager *m, struct hook_job *j) {
        for (struct hook_job **p = &m->parked; *p; p = &(*p)->park_next)
                if (*p == j) {
                        *p = j->park_next;
                        break;
                }
        j->park_timer = sd_event_source_disable_unref(j->park_timer);
        hook_context_done(&j->ctx);
        hook_context_fill(m, &j->req, &j->ctx);
        struct hook_job *queued = NULL;
        struct conn *c = j->conn;
        _cleanup_json_ json_object *resp = hook_job_start(m, j, &queued);
        if (queued || !c)
                return;         /* a worker answers it; or nobody waits */
        char *frame = NULL;
        size_t len = 0;
        if (frame_encode(resp, &frame, &len) < 0)
                frame = NULL;
        server_reply(c, frame, len);
}

static int on_park_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) s;
        (void) usec;
        struct hook_job *j = userdata;
        log_msg(LOG_DEBUG, "Start of domain %s: no define came within %llu ms; deciding it as transient",
                j->req.argv[0], (unsigned long long) (RESTART_REDEFINE_WAIT_USEC / 1000));
        /* Undefined for good, most likely: the next start is not held. */
        if (j->ctx.decide.uuid)
                restart_define_missed(&j->m->restarts, j->ctx.decide.uuid);
        unpark(j->m, j);
        return 0;
}

/* pcinumad stops: the parked calls are dropped undecided (their
 * connections are gone with the server). */
void drop_parked(struct manager *m) {
        while (m->parked) {
                struct hook_job *j = m->parked;
                m->parked = j->park_next;
                hook_job_free(j);
        }
}

/* The parked calls of uuid (all of them: NULL), decided now. */
void unpark_uuid(struct manager *m, const char *uuid) {
        struct hook_job *next;
        for (struct hook_job *j = m->parked; j; j = next) {
                next = j->park_next;
                if (!uuid || (j->ctx.decide.uuid && strcasecmp(j->ctx.decide.uuid, uuid) == 0))
                        unpark(m, j);
        }
}

/* The server's: serve one request (a parsed frame) from connection c.  A
 * status request, a request that is not valid, a hook request with a
 * domain XML of up to 64 KiB, and one the workers cannot take now (busy)
 * are answered at once: the response object is returned.  Any other hook
 * request goes to a worker: NULL is returned, *ret_job is set, and the
 * answer goes to server_reply(c, ...) from the event loop once it is
 * decided, unless the server calls manager_job_detach() first (the client
 * went away). */
json_object *manager_handle(void *userdata, json_object *request, struct conn *c, uid_t peer_uid,
                                   pid_t peer_pid, struct hook_job **ret_job) {
        struct manager *m = userdata;
        struct proto_request req = {0};
        _cleanup_free_ char *err = NULL;
        *ret_job = NULL;
        uint64_t t0 = now_usec(CLOCK_MONOTONIC);
        m->n_requests++;
        if (proto_request_parse(request, &req, &err) < 0) {
                m->n_errors++;
                metrics_request(m->metrics, "error", now_usec(CLOCK_MONOTONIC) - t0);
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) peer_pid);
                log_event(LOG_WARNING, PCINUMA_MID_PROTOCOL_ERROR, &f, "Bad request from pid %d: %s", (int) peer_pid, err);
                log_fields_done(&f);
                return proto_response_new_error("%s", err);
        }
        if (req.type == PROTO_REQUEST_STATUS) {
                m->n_status++;
                proto_request_done(&req);
                json_object *resp = proto_response_new_status(manager_status(m));
                metrics_request(m->metrics, "status", now_usec(CLOCK_MONOTONIC) - t0);
                return resp;
        }

        m->n_hook++;
        struct hook_job *j = xcalloc(1, sizeof(*j));
        j->work = (struct worker_job) { .run = hook_job_run, .complete = hook_job_complete,
                                  .large = req.xml_len > WORKERS_LARGE_BYTES };
        j->m = m;
        j->conn = c;
        j->t0 = t0;
        j->hostmap = shared_ref(m->hostmap_ref);
        j->policy = shared_ref(m->policy_ref);
        j->peer_pid = peer_pid;
        hook_context_fill(m, &req, &j->ctx);
        j->req = req;
        return hook_job_start(m, j, ret_job);
}

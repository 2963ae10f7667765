/* The manager's private interface: what pcinumad's manager files share,
 * included by them and by nothing else (manager.h is the public header).
 * The manager's work is split by concern, one file each, and calls go
 * one way: a file calls only files below it in this list.
 *
 *   manager.c           the object's life, the event loop and its sources,
 *                       loading and reloading the policy, rescanning the
 *                       host; it hands requests to the files below
 *   watcher-requests.c  what the watcher asks (watcher_link_ops): plans
 *                       for a define or a restart, persistence, a restart
 *                       done
 *   hook-job.c          a hook request (server_ops): its context, the memo
 *                       of prepare answers, the workers, the wait for a
 *                       define
 *   status.c            the status object (manager_status())
 *   rechecks.c          what a host map or policy change makes the watcher
 *                       recheck
 *   decision-log.c      a decision's journal entry
 *   shared-ref.c        the reference counts the manager and its jobs
 *                       share
 *
 * Main thread only, apart from what hook-job.c says runs on a worker. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-device.h>
#include <systemd/sd-event.h>

#include "decide.h"
#include "hostmap.h"
#include "log.h"
#include "manager.h"
#include "memo.h"
#include "policy.h"
#include "recheck.h"
#include "restart-state.h"
#include "watcher-protocol.h"

#if PCINUMA_STAND_INS
#include "standins.h"
#endif

struct conn;
struct hook_job;
struct redefine_plan;

struct manager {
        struct manager_config cfg;
        sd_event *event;
        sd_device_monitor *monitor;
        sd_event_source *rescan_timer;
        sd_event_source *hold_timer;    /* removals held for a grace period (recheck.h) */
        struct server *server;
        struct watcher_link *watcher;   /* NULL with --libvirt-uri none */
        struct workers *workers;        /* hook decisions for domain XMLs over 64 KiB (workers.h) */
        struct metrics *metrics;        /* counts even without a file */

        /* The current host map and policy (main thread).  Jobs on the
         * workers hold references to the ones they read (hostmap_ref,
         * policy_ref: the manager's own reference), so a reload frees the
         * previous ones only when the last job that reads them is done. */
        struct hostmap *hostmap;
        struct shared *hostmap_ref;
#if PCINUMA_STAND_INS
        struct standins *stand_ins;     /* read once at start; every host map points to it */
#endif
        uint64_t hostmap_loaded_usec;   /* CLOCK_REALTIME */
        /* Host maps built (status "generation"): 1 at start, one more at
         * each rescan.  A rescan that finds the map equal to the current
         * one keeps the current object, whose shared generation (the
         * memo's key) is the number of the rebuild it came from. */
        uint64_t hostmap_generation;
        struct policy *policy;
        struct shared *policy_ref;
        uint64_t policy_generation;     /* policies in use so far (the same rule as the host map's) */
        bool policy_from_file;
        uint64_t policy_loaded_usec;
        char *policy_error;             /* the last reload's error, or NULL */

        /* What the watcher planned, per domain, so that a host map change
         * or a reload rechecks only the domains it touches (recheck.h). */
        struct recheck_cache cache;
        struct recheck_holds holds;
        uint64_t n_plans;               /* plan requests from the watcher */
        uint64_t n_recheck_domains;     /* {"type":"recheck","uuid"} sent */
        uint64_t n_recheck_all;         /* {"type":"recheck"} (every domain) sent */
        uint64_t n_logged_once;         /* define-time summaries lowered to debug: told before */

        /* Restarts into the plan: persistent domains, pcinuma's own
         * starts, incoming ones, counters (restart-state.h). */
        struct restart_state restarts;

        /* The answers to prepare calls of planned domains, by what they
         * were decided from (memo.h): main thread only. */
        struct memo memo;
        struct hook_job *parked;        /* prepare calls waiting for a define (hook-job.c, park()) */

        uint64_t start_usec;            /* CLOCK_REALTIME */
        uint64_t start_mono;
        /* Requests that reached manager_handle() (the server counts those
         * it refused before: server_stats()). */
        uint64_t n_requests, n_hook, n_status, n_errors;
        uint64_t n_verdict[_DECIDE_VERDICT_MAX];        /* by enum decide_verdict */
};

/* --- what jobs share with the manager -----------------------------------
 *
 * A worker decides with the host map and the policy of the moment its
 * request came in; a reload or a udev rescan may replace them meanwhile.
 * So each is held through a reference count: the manager holds one on
 * the current object, each job (hook_job) one on those it reads.  Counts
 * change on the main thread only (a job takes its references when it is
 * queued and drops them when it completes there), so they need no atomics;
 * a worker only reads the object, which nobody changes once it is
 * published. */
struct shared {
        unsigned n_ref;
        void *obj;
        void (*free_obj)(void *obj);
        /* The memo's key (memo.h): m->hostmap_generation or
         * m->policy_generation when obj became current.  A reload that
         * finds content equal to obj's (memo_same_hostmap(),
         * memo_same_policy()) keeps obj, and so its generation. */
        uint64_t generation;
};

/* --- shared-ref.c ----------------------------------------------------------- */

/* A reference count on obj, holding one reference (the caller's). */
struct shared *shared_new(void *obj, void (*free_obj)(void *obj), uint64_t generation);
/* One more reference to s; returns s. */
struct shared *shared_ref(struct shared *s);
/* Drop a reference to s (NULL: none), freeing obj with the last one; returns NULL. */
struct shared *shared_unref(struct shared *s);
/* shared_unref() for _cleanup_. */
void shared_unrefp(struct shared **s);

/* --- decision-log.c --------------------------------------------------------- */

/* A decision's journal entry, built (decision_log_build()) and then sent
 * (decision_log_emit()): the memo of prepare answers keeps it with the
 * answer, so that a remembered answer is logged as the decision was. */
struct decision_log {
        int prio;
        const char *message_id;
        struct log_fields f;
        char *message;
};

/* Add plan p's path fidelity (PCINUMA_FIDELITY, PCINUMA_PAIR_CHANGED) to f; NULL p: none. */
void log_fidelity(struct log_fields *f, const struct plan *p);
/* Free what l holds. */
void decision_log_done(struct decision_log *l);
/* Send l to the journal. */
void decision_log_emit(const struct decision_log *l);
/* Build d's journal entry in *ret (free it with decision_log_done()). */
void decision_log_build(const struct decision *d, struct decision_log *ret);
/* Build, send and free d's journal entry. */
void log_decision(const struct decision *d);

/* --- rechecks.c ------------------------------------------------------------- */

/* The host map changed from old (NULL: not known) to m->hostmap, and the
 * policy too if policy_changed: recheck the domains that touches. */
void act_on_changes(struct manager *m, const struct hostmap *old, bool policy_changed, const char *why);
/* m->hold_timer's: the domains of removals whose grace period is over are rechecked. */
int on_hold_timer(sd_event_source *s, uint64_t usec, void *userdata);

/* --- hook-job.c ------------------------------------------------------------- */

/* Free a memo answer (the memo's free function, memo_init()). */
void memo_answer_free(void *v);
/* server_ops.handle: serve one request from c, at once or through a worker (*ret_job). */
json_object *manager_handle(void *userdata, json_object *request, struct conn *c, uid_t peer_uid, pid_t peer_pid,
                            struct hook_job **ret_job);
/* server_ops.detach: connection j->conn is closed while j is decided. */
void manager_job_detach(void *userdata, struct hook_job *j);
/* pcinumad stops: the calls waiting for a define are freed undecided. */
void drop_parked(struct manager *m);
/* The calls of uuid (all of them: NULL) waiting for a define, decided now. */
void unpark_uuid(struct manager *m, const char *uuid);

/* --- watcher-requests.c: watcher_link_ops (watcher-link.h) ------------------ */

/* .plan: plan a domain that was defined or changed, and say whether to redefine it. */
void manager_plan_redefine(void *userdata, const char *xml, size_t len, struct redefine_plan *ret);
/* .plan_restart: plan a running domain's restart into its plan, from its live XML. */
void manager_plan_restart(void *userdata, const char *uuid, const char *xml, size_t len, struct redefine_plan *ret);
/* .forget: domain uuid is no longer defined. */
void manager_forget_domain(void *userdata, const char *uuid);
/* .persistent_all: every persistent domain libvirt holds. */
void manager_persistent_all(void *userdata, const struct wproto_domains *d);
/* .persistent_one: domain uuid became persistent or transient. */
void manager_persistent_one(void *userdata, const char *uuid, bool persistent);
/* .persistence_lost: the watcher no longer knows which domains are persistent. */
void manager_persistence_lost(void *userdata);
/* .restarted: a restart the manager asked for is over. */
void manager_restart_done(void *userdata, const struct wproto_restarted *r);

/* pcinumad's state and event sources (the "manager" of systemd-oomd's
 * layout): the host map and policy caches, their reloads, the udev
 * monitor, signals, the hook socket server and the counters behind
 * `pcinumactl status`.  This layer touches the OS; the decisions it
 * serves come from the pure modules. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-device.h>
#include <systemd/sd-event.h>

#include "decide.h"
#include "log.h"
#include "hostmap.h"
#include "memo.h"
#include "policy.h"
#include "recheck.h"
#include "restart.h"
#include "wproto.h"
#include "workers.h"

struct conn;
struct hook_job;
struct server;
struct shared;
struct watcher;

/* What the libvirt watcher should do with one persistent definition. */
struct redefine_plan {
        bool redefine;                  /* define out_xml */
        char *out_xml;
        char *summary;                  /* a phrase for the log */
        int prio;                       /* for the log when not redefining */
        struct log_fields fields;       /* PCINUMA_* for the log entry */
};
void redefine_plan_done(struct redefine_plan *p);

struct manager_config {
        const char *sysfs_root;         /* "/sys" */
        const char *policy_file;        /* may not exist: then the built-in default */
        const char *socket_path;
        const char *libvirt_uri;        /* "none" disables the libvirt watcher */
        const char *watcher_program;    /* NULL: watcher_find_program() */
        const char *log_target;         /* passed on to the watcher: journal, stderr, auto */
        unsigned settle_ms;             /* passed on: quiet time before a domain is redefined */
        const char *state_dir;          /* passed on: pre-images go to STATE_DIR/preimages */
        uint64_t preimage_max_bytes;    /* passed on: the pre-image folder's byte limit */
        unsigned request_timeout_ms;    /* per-connection read timeout */
        unsigned max_connections;
        unsigned workers;               /* worker threads (--workers); 0: workers_default_threads() */
        int watch_udev;                 /* 1 yes, 0 no, -1 auto: only for the real /sys */
        /* Besides root, these uids are served (--allow-uid): a session
         * libvirtd runs its hooks as its own user. */
        uid_t allowed_uids[8];
        size_t n_allowed_uids;
        const char *metrics_file;       /* Prometheus text metrics (metrics.h), or NULL: none */
#if PCINUMA_STAND_INS
        const char *stand_ins_file;     /* --stand-ins (a test build; standins.h), or NULL; passed on */
#endif
};

struct manager {
        struct manager_config cfg;
        sd_event *event;
        sd_device_monitor *monitor;
        sd_event_source *rescan_timer;
        sd_event_source *hold_timer;    /* removals held for a grace period (recheck.h) */
        struct server *server;
        struct watcher *watcher;        /* NULL with --libvirt-uri none */
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
        uint64_t hostmap_generation;
        struct policy *policy;
        struct shared *policy_ref;
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
         * starts, incoming ones, counters (restart.h). */
        struct restart_state restarts;
        struct hook_job *parked;        /* prepare calls waiting for a define (manager.c, park()) */

        /* The answers to prepare calls of planned domains, by what they
         * were decided from (memo.h): main thread only. */
        struct memo memo;

        uint64_t start_usec;            /* CLOCK_REALTIME */
        uint64_t start_mono;
        uint64_t n_requests, n_hook, n_status, n_errors, n_rejected;
        uint64_t n_verdict[_DECIDE_VERDICT_MAX];        /* by enum decide_verdict */
};

/* Load the policy and the host map and set up every event source.  On
 * error, logs it (naming the file, field or line) and returns it. */
int manager_new(const struct manager_config *cfg, struct manager **ret);
struct manager *manager_free(struct manager *m);
static inline void manager_freep(struct manager **m) { manager_free(*m); }

/* Run until SIGTERM/SIGINT.  Sends READY=1. */
int manager_run(struct manager *m);

/* SIGHUP: reload the policy (keeping the last good one on error) and
 * rescan the host; the watcher then rechecks the domains whose devices or
 * resolved policy settings changed. */
void manager_reload(struct manager *m);

/* Serve one request (a parsed frame) from the server's connection c.  A
 * status request, a request that is not valid, a hook request with a
 * domain XML of up to 64 KiB, and one the workers cannot take now (busy)
 * are answered at once: the response object is returned.  Any other hook
 * request goes to a worker: NULL is returned,
 * *ret_job is set, and the answer goes to server_reply(c, ...) from the
 * event loop once it is decided, unless the server calls
 * manager_job_detach(*ret_job) first (the client went away). */
json_object *manager_handle(struct manager *m, json_object *request, struct conn *c, uid_t peer_uid, pid_t peer_pid,
                            struct hook_job **ret_job);
void manager_job_detach(struct hook_job *j);

/* Plan a persistent definition for the watcher (main thread only), and
 * remember the domain in the cache.  A skip or refusal summary already
 * logged for this domain is lowered to LOG_DEBUG (logged once per change). */
void manager_plan_redefine(struct manager *m, const char *xml, size_t len, struct redefine_plan *ret);
/* The watcher found domain uuid undefined: forget what the recheck cache
 * knew of it, so undefined domains do not fill it. */
void manager_forget_domain(struct manager *m, const char *uuid);

/* Plan the live XML of domain uuid for pcinuma-watcher's restart into the
 * plan (main thread only).  ret->redefine true: start ret->out_xml; the
 * gate then lets that start, and one more (the client's XML again, if the
 * plan does not start), through as pcinuma's own until
 * manager_restart_done().  Otherwise ret->summary says why not. */
void manager_plan_restart(struct manager *m, const char *uuid, const char *xml, size_t len, struct redefine_plan *ret);
/* The watcher's report of a restart (wproto "restarted"). */
void manager_restart_done(struct manager *m, const struct wproto_restarted *r);
/* What the watcher tells of persistent definitions: every one (at
 * connect), one defined or undefined, or nothing known any more (it lost
 * libvirt, or died). */
void manager_persistent_all(struct manager *m, const struct wproto_domains *d);
void manager_persistent_one(struct manager *m, const char *uuid, bool persistent);
void manager_persistence_lost(struct manager *m);

/* The status object. */
json_object *manager_status(struct manager *m);

/* The watcher's counters changed: write the metrics file soon. */
void manager_metrics_changed(struct manager *m);

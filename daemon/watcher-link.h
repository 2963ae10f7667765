/* pcinumad's side of the link to its libvirt watcher (docs/design.md §8,
 * the define-time path), which keeps every persistent domain that the
 * policy covers planned, by redefining it with the planned XML.
 *
 * The libvirt side runs in a child process, pcinuma-watcher (watcher/ at
 * the top of the tree; why a process, not a thread, is explained in
 * watcher/pcinuma-watcher.c).  This module starts it with one end of a
 * socketpair, restarts it with backoff when it dies, holds the link's
 * limits, passes the watcher's requests on to its owner (the manager,
 * through struct watcher_link_ops: it plans on the sd-event loop, so the host
 * map and the policy stay single-threaded, in pcinumad), and keeps the
 * watcher's last reported status for `pcinumactl status`.  pcinumad never
 * calls libvirt, so the hook path never waits on it (docs/design.md
 * §3.2). */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "log.h"
#include "watcher-protocol.h"

struct watcher_link;

/* The owner's answer to a plan request of the watcher (wproto "planned"). */
struct redefine_plan {
        bool redefine;                  /* define out_xml */
        char *out_xml;
        char *summary;                  /* a phrase for the log */
        int prio;                       /* for the log when not redefining */
        struct log_fields fields;       /* PCINUMA_* for the log entry */
};
void redefine_plan_done(struct redefine_plan *p);

/* What to start and how; the strings are copied by watcher_link_start(). */
struct watcher_link_config {
        const char *program;            /* pcinuma-watcher's path */
        const char *uri;                /* libvirt's */
        const char *log_target;         /* passed on: "journal", "stderr" or "auto" */
        unsigned settle_ms;             /* passed on: quiet time before a domain is redefined */
        const char *state_dir;          /* passed on: pre-images go to STATE_DIR/preimages */
        uint64_t preimage_max_bytes;    /* passed on: the pre-image folder's byte limit */
#if PCINUMA_STAND_INS
        const char *stand_ins_file;     /* passed on (a test build), or NULL */
#endif
};

/* What the watcher asks of its owner and tells it: the owner's calls, on
 * the event loop, with the userdata given to watcher_link_start(). */
struct watcher_link_ops {
        /* Plan a persistent definition (wproto "plan"). */
        void (*plan)(void *userdata, const char *xml, size_t len, struct redefine_plan *ret);
        /* Plan the live XML of running domain uuid for a restart into the
         * plan (wproto "plan_restart"). */
        void (*plan_restart)(void *userdata, const char *uuid, const char *xml, size_t len,
                             struct redefine_plan *ret);
        /* Domain uuid is undefined (wproto "forget"). */
        void (*forget)(void *userdata, const char *uuid);
        /* The persistent definitions: every one (at connect), one defined
         * or undefined, or nothing known any more (the watcher lost
         * libvirt, or died). */
        void (*persistent_all)(void *userdata, const struct wproto_domains *d);
        void (*persistent_one)(void *userdata, const char *uuid, bool persistent);
        void (*persistence_lost)(void *userdata);
        /* How a restart into the plan ended (wproto "restarted"). */
        void (*restarted)(void *userdata, const struct wproto_restarted *r);
        /* watcher_link_counters() changed. */
        void (*counters_changed)(void *userdata);
};

/* Where pcinuma-watcher is: beside our own executable when it is there (a
 * build tree, where daemon/meson.build links it in from watcher/), else
 * the installed path.  The caller owns the string. */
char *watcher_link_find_program(void);

/* Start pcinuma-watcher (cfg->program) for cfg->uri; it connects, and
 * reconnects with backoff, on its own.  SIGCHLD must be blocked. */
int watcher_link_start(const struct watcher_link_config *cfg, const struct watcher_link_ops *ops, void *userdata, sd_event *e,
                       struct watcher_link **ret);

/* Stop the child (closing its socket; SIGKILL after 5 s) and free
 * everything.  Accepts NULL. */
struct watcher_link *watcher_link_stop(struct watcher_link *w);

/* Ask the watcher to look at every persistent domain again (the host map
 * or the policy changed). */
void watcher_link_recheck_all(struct watcher_link *w);

/* Ask the watcher to look at one domain (by UUID) soon, e.g. after the
 * prepare gate refused it. */
void watcher_link_recheck_domain(struct watcher_link *w, const char *uuid);

/* The prepare gate let domain uuid start without its plan (at
 * CLOCK_MONOTONIC since_usec): ask the watcher to restart it into the plan
 * as soon as it is up, if that is within window_ms; files: what it boots
 * from directly, for the watcher to keep until then.  if_persistent: only
 * if it is persistent by then (a transient domain a client defines while
 * it starts; decide.h, restart_if_persistent). */
void watcher_link_restart(struct watcher_link *w, const char *uuid, unsigned window_ms, uint64_t since_usec,
                          const char *const *files, size_t n_files, bool if_persistent);

/* The counters the metrics file reports (metrics.h): whether the watcher
 * is connected to libvirt, and its redefinitions, failed ones and
 * conflicts since pcinumad started (its restarts' added up). */
void watcher_link_counters(struct watcher_link *w, bool *ret_connected, uint64_t *ret_redefinitions, uint64_t *ret_failures,
                           uint64_t *ret_conflicts);

/* {"uri", "connected", "redefinitions", "failures", "last_error",
 *  "process": {"program", "pid", "restarts", "last_exit"}} */
json_object *watcher_link_status(struct watcher_link *w);

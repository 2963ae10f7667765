/* Restarts into the plan, pcinuma-watcher's part (docs/operations.md,
 * "Restart into the plan").  pcinumad's prepare gate let a domain start
 * without its plan and asked for a restart (wproto "restart"); on that
 * domain's STARTED event with detail BOOTED, within the window (for a
 * domain started paused: when its client resumes it), this module
 * suspends the domain, reads its live XML, has pcinumad plan it, and, on a
 * worker thread, destroys the domain and starts the plan with
 * virDomainCreateXML, or, when the plan does not start, the live XML it
 * had, so the client's VM runs.  Its guest runs without the plan from its
 * STARTED (or RESUMED) event to the suspend.
 *
 * The module is driven by the watcher's main thread (restarter_request,
 * _lifecycle, _work, _drain), which owns the link to pcinumad and the log;
 * only the workers' libvirt calls (state, destroy, create, resume) leave
 * it, so the main thread goes on with other domains while a QEMU starts.
 * Libvirt's connections are thread-safe; each job holds a
 * reference to its domain, and through it to the connection. */
#pragma once

#include <libvirt/libvirt.h>
#include <stdbool.h>

#include "log.h"
#include "preimage.h"
#include "watcher-protocol.h"

/* pcinumad's answer to a restart plan request. */
struct restart_plan {
        bool restart;                   /* start xml */
        char *xml;
        char *summary;                  /* why not, or what differs */
        int prio;                       /* of the log line when not restarting */
        struct log_fields fields;       /* PCINUMA_* of the domain, for the log; their keys are: */
        char **keys;                    /* owned copies of the field names */
        size_t n_keys;
};
void restart_plan_done(struct restart_plan *p);

/* What the module needs of the watcher, called on the main thread. */
struct restarter_ops {
        /* Have pcinumad plan the live XML of domain uuid for a restart
         * (wproto "plan_restart"); false when pcinumad has gone. */
        bool (*plan)(void *userdata, const char *uuid, const char *xml, struct restart_plan *ret);
        /* Tell pcinumad how a restart ended (wproto "restarted"). */
        void (*report)(void *userdata, const struct wproto_restarted *r);
};

struct restarter;

/* A restarter; preimages keeps a transient domain's live XML before its
 * restart.  NULL when its pipe cannot be made. */
struct restarter *restarter_new(const struct restarter_ops *ops, void *userdata, struct preimage_store *preimages);
/* Wait for the restarts under way (a domain must not be left destroyed and
 * not started again), then free everything.  Accepts NULL. */
struct restarter *restarter_free(struct restarter *r);

/* pcinumad's request (wproto "restart").  If the domain's STARTED event
 * came already (the main thread was busy when both came), it is acted on
 * by the next restarter_work().  A conditional one (if_persistent) goes
 * on only if the domain is persistent when it is up, or is defined within
 * the window after (then it is restarted like a persistent domain, from
 * its live XML); otherwise it is dropped without a report. */
void restarter_request(struct restarter *r, virConnectPtr conn, const struct wproto_restart *req);

/* Every lifecycle event of every domain, in order, on the main thread
 * (at: when libvirt's thread got it). */
void restarter_lifecycle(struct restarter *r, virDomainPtr dom, const char *uuid, int event, int detail, uint64_t at);

/* What is due at now (CLOCK_MONOTONIC usec): requests acted on late,
 * windows ended.  Returns when it is next due, 0 for never. */
uint64_t restarter_work(struct restarter *r, uint64_t now);

/* The fd that is readable when a worker finished a restart, and the call
 * that logs it and tells pcinumad (non-blocking).  -1 / no-op for NULL. */
int restarter_fd(const struct restarter *r);
void restarter_drain(struct restarter *r);

/* The connection is gone: requests waiting for a STARTED event are
 * dropped (not done, logged); restarts under way finish on their own. */
void restarter_disconnected(struct restarter *r);

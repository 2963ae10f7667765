/* Restarts into the plan, pcinuma-watcher's part (docs/operations.md,
 * "Restart into the plan").  pcinumad's prepare gate let a domain start
 * without its plan and asked for a restart (wproto "restart"); on that
 * domain's STARTED event with detail BOOTED, within the window, this
 * module reads its live XML, has pcinumad plan it, and, on a worker
 * thread, destroys the domain and starts the plan with
 * virDomainCreateXML (paused if it was paused), or, when the plan does
 * not start, the live XML it had, so the client's VM runs.  The domain
 * runs without its plan from its STARTED event to the end of the destroy.
 *
 * Only the worker threads' libvirt calls (state, destroy, create, resume)
 * leave the main thread: the link to pcinumad, the log and this module's
 * state stay on libvirt's event loop thread, so the watcher's events keep
 * flowing (other domains' definitions, their persistence) while a QEMU
 * starts.  Libvirt's connections are thread-safe; each job holds a
 * reference to its domain, and through it to the connection. */
#pragma once

#include <libvirt/libvirt.h>
#include <stdbool.h>

#include "log.h"
#include "preimage.h"
#include "wproto.h"

/* pcinumad's answer to a restart plan request. */
struct restart_plan {
        bool restart;                   /* start xml */
        char *xml;
        char *summary;                  /* why not, or what differs */
        int prio;                       /* of the log line when not restarting */
        struct log_fields fields;       /* PCINUMA_* of the domain, for the log */
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

/* Start the module on libvirt's default event loop (registered already);
 * preimages keeps a transient domain's live XML before its restart. */
struct restarter *restarter_new(const struct restarter_ops *ops, void *userdata, struct preimage_store *preimages);
/* Wait for the restarts under way (a domain must not be left destroyed and
 * not started again), then free everything.  Accepts NULL. */
struct restarter *restarter_free(struct restarter *r);

/* pcinumad's request (wproto "restart").  If the domain's STARTED event
 * came already (this watcher was busy), it is acted on at once. */
void restarter_request(struct restarter *r, virConnectPtr conn, const struct wproto_restart *req);

/* Every lifecycle event of every domain (STARTED, STOPPED and RESUMED
 * matter). */
void restarter_lifecycle(struct restarter *r, virDomainPtr dom, const char *uuid, int event, int detail);

/* The connection is gone: requests waiting for a STARTED event are
 * dropped (skipped, logged); restarts under way finish on their own. */
void restarter_disconnected(struct restarter *r);

/* The libvirt watcher (design §8, the define-time path): keeps every
 * persistent domain that the policy covers planned, by redefining it with
 * the planned XML.
 *
 * Every libvirt call runs on one worker thread, which also runs libvirt's
 * default event loop.  libvirt API calls block (a define waits for the
 * domain's job lock, held for the whole of a start, during which libvirt
 * runs our hook), and the hook path must never wait on libvirt (design
 * §3.2).  So the sd-event loop never calls libvirt; the worker asks the
 * main thread to plan (through an eventfd) and does the libvirt side
 * itself.  The host map and the policy stay single-threaded. */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <systemd/sd-event.h>

struct manager;
struct watcher;

/* Start the worker thread for 'uri' (connects, and reconnects with
 * backoff, on its own). */
int watcher_start(struct manager *m, sd_event *e, const char *uri, struct watcher **ret);

/* Stop the worker (bounded wait) and free everything.  Accepts NULL. */
struct watcher *watcher_stop(struct watcher *w);

/* Ask the worker to look at every persistent domain again (the host map
 * or the policy changed). */
void watcher_recheck_all(struct watcher *w);

/* Ask the worker to look at one domain (by UUID) soon, e.g. after the
 * prepare gate refused it. */
void watcher_recheck_domain(struct watcher *w, const char *uuid);

/* {"uri", "connected", "redefinitions", "failures", "last_error"} */
json_object *watcher_status(struct watcher *w);

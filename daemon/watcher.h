/* The libvirt watcher (docs/design.md §8, the define-time path), pcinumad's side:
 * keeps every persistent domain that the policy covers planned, by
 * redefining it with the planned XML.
 *
 * The libvirt side runs in a child process, pcinuma-watcher
 * (watcher-libvirt.c; why a process, not a thread, is explained there).
 * This module starts it with one end of a socketpair, restarts it with
 * backoff when it dies, plans on its behalf on the sd-event loop (the host
 * map and the policy stay single-threaded, in pcinumad), and keeps its last
 * reported status for `pcinumactl status`.  pcinumad never calls libvirt,
 * so the hook path never waits on it (docs/design.md §3.2). */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

struct manager;
struct watcher;

/* Where pcinuma-watcher is: beside our own executable when it is there (a
 * build tree), else the installed path.  The caller owns the string. */
char *watcher_find_program(void);

/* Start pcinuma-watcher (program) for 'uri'; it connects, and reconnects
 * with backoff, on its own.  log_target is passed on ("journal", "stderr"
 * or "auto").  SIGCHLD must be blocked. */
int watcher_start(struct manager *m, sd_event *e, const char *program, const char *uri, const char *log_target,
                  struct watcher **ret);

/* Stop the child (closing its socket; SIGKILL after 5 s) and free
 * everything.  Accepts NULL. */
struct watcher *watcher_stop(struct watcher *w);

/* Ask the watcher to look at every persistent domain again (the host map
 * or the policy changed). */
void watcher_recheck_all(struct watcher *w);

/* Ask the watcher to look at one domain (by UUID) soon, e.g. after the
 * prepare gate refused it. */
void watcher_recheck_domain(struct watcher *w, const char *uuid);

/* The prepare gate let domain uuid start without its plan (at
 * CLOCK_MONOTONIC since_usec): ask the watcher to restart it into the plan
 * as soon as it is up, if that is within window_ms; files: what it boots
 * from directly, for the watcher to keep until then.  if_persistent: only
 * if it is persistent by then (a transient domain a client defines while
 * it starts; decide.h, restart_if_persistent). */
void watcher_restart(struct watcher *w, const char *uuid, unsigned window_ms, uint64_t since_usec,
                     const char *const *files, size_t n_files, bool if_persistent);

/* The counters the metrics file reports (metrics.h): whether the watcher
 * is connected to libvirt, and its redefinitions, failed ones and
 * conflicts since pcinumad started (its restarts' added up). */
void watcher_counters(struct watcher *w, bool *ret_connected, uint64_t *ret_redefinitions, uint64_t *ret_failures,
                      uint64_t *ret_conflicts);

/* {"uri", "connected", "redefinitions", "failures", "last_error",
 *  "process": {"program", "pid", "restarts", "last_exit"}} */
json_object *watcher_status(struct watcher *w);

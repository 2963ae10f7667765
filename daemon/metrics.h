/* pcinumad's Prometheus metrics: counters and a request latency histogram
 * kept in memory and written, in Prometheus's text format, to one file
 * that node_exporter's textfile collector reads (docs/operations.md,
 * "Metrics").  The file is replaced atomically (a temporary file beside it,
 * then rename()), after a change and at most once a second (an sd-event
 * timer), and removed when pcinumad stops.
 *
 * It belongs to the event loop's thread, the main one: a count schedules
 * the write on that loop.  The worker threads count nothing themselves
 * (a decision made on one is counted in hook_job_apply(), hook-job.c, on
 * the main thread), so there is no lock. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

/* node_exporter's textfile collector reads *.prom files from the folder
 * its Debian package makes; pcinumad writes there by default when it
 * exists. */
#define METRICS_DEFAULT_DIR "/var/lib/prometheus/node-exporter"
#define METRICS_DEFAULT_FILE METRICS_DEFAULT_DIR "/pcinuma.prom"

/* What the manager and the watcher know at the moment of writing: read
 * through the caller's snapshot function, on the event loop's thread. */
struct metrics_state {
        uint64_t hostmap_devices, hostmap_nodes;
        uint64_t domains_known;                 /* the recheck cache */
        bool watcher;                           /* a libvirt watcher runs (not --libvirt-uri none) */
        bool watcher_connected;
        uint64_t redefinitions, redefinition_failures, conflicts;      /* the watcher's, since start */
};

struct metrics;

/* Write to path (NULL: keep counting, write nothing), on e's loop;
 * snapshot (may be NULL) fills in the state above before each write.
 * The first write happens at once.  Returns 0 or a negative errno (the
 * timer could not be made). */
int metrics_new(const char *path, sd_event *e, void (*snapshot)(void *userdata, struct metrics_state *ret), void *userdata,
                struct metrics **ret);
/* Remove the file and free; accepts NULL, returns NULL. */
struct metrics *metrics_free(struct metrics *mt);

/* A hook call answered: its phase ("prepare", "migrate", ...), the policy
 * in force ("require", ...; NULL: none resolved) and the verdict
 * ("allow", "warn", "refuse", "pass", "restart"). */
void metrics_verdict(struct metrics *mt, const char *phase, const char *policy, const char *verdict);
/* A request served ("hook", "status", "error") in usec microseconds. */
void metrics_request(struct metrics *mt, const char *type, uint64_t usec);
/* A plan found the domain's pcinuma mark stale, at "define" (the
 * watcher's plan) or "prepare" (the hook's). */
void metrics_stale_mark(struct metrics *mt, const char *phase);
/* The host map was rebuilt ("start", "reload", "udev"), or failed to be. */
void metrics_hostmap_rebuild(struct metrics *mt, const char *trigger, bool ok);
/* The policy was reloaded, or the reload failed (the last good one kept). */
void metrics_policy_reload(struct metrics *mt, bool ok);
/* A domain was restarted into its plan (docs/operations.md, "Restart
 * into the plan"), or the planned start failed and it was started as asked. */
void metrics_restart(struct metrics *mt, bool planned);
/* Something the snapshot reports changed (the watcher's counters):
 * write soon. */
void metrics_changed(struct metrics *mt);

/* The text of the file as it would be written now; the caller owns it. */
char *metrics_render(struct metrics *mt);

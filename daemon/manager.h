/* pcinumad's state and event sources (the "manager" of systemd-oomd's
 * layout): the host map and policy caches, their reloads, the udev
 * monitor, signals, the hook socket server and the counters behind
 * `pcinumactl status`.  This layer touches the OS; the decisions it
 * serves come from the pure modules. */
#pragma once

#include <json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

struct manager_config {
        const char *sysfs_root;         /* "/sys" */
        const char *policy_file;        /* may not exist: then the built-in default */
        const char *socket_path;
        const char *libvirt_uri;        /* "none" disables the libvirt watcher */
        const char *watcher_program;    /* NULL: watcher_link_find_program() */
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

/* pcinumad's state: its own, and the sub-objects it owns (the server,
 * the watcher link, the workers, the metrics), which report to it through
 * callbacks and their own counters; none of them writes into it. */
struct manager;

/* Load the policy and the host map and set up every event source.  On
 * error, logs it (naming the file, field or line) and returns it. */
int manager_new(const struct manager_config *cfg, struct manager **ret);
struct manager *manager_free(struct manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct manager *, manager_free)

/* Run until SIGTERM/SIGINT.  Sends READY=1. */
int manager_run(struct manager *m);

/* SIGHUP: reload the policy (keeping the last good one on error) and
 * rescan the host; the watcher then rechecks the domains whose devices or
 * resolved policy settings changed. */
void manager_reload(struct manager *m);

/* The status object. */
json_object *manager_status(struct manager *m);

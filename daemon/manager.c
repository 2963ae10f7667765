/* pcinumad's manager: the object's life (manager_new(), manager_free(),
 * manager_run()), the event loop and the sources it wires in (signals,
 * udev, the hook server, the watcher link, the metrics file), and the
 * policy and the host map: loaded at start, reloaded on SIGHUP, rescanned
 * on udev events.  What a request does is in the other manager files
 * (manager-internal.h lists them); this one hands requests to them. */
#include "manager-internal.h"
#include "paths.h"

#include <fcntl.h>
#include <libxml/parser.h>
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "hostmap-sysfs.h"
#include "metrics.h"
#include "policy-file.h"
#include "server.h"
#include "watcher-link.h"
#include "workers.h"


/* udev sends a burst of events per device (add, bind, ...): wait this
 * long after the last one before rescanning. */
#define RESCAN_DELAY_USEC (250 * 1000)


static void free_hostmap(void *h) {
        hostmap_free(h);
}

static void free_policy(void *p) {
        policy_free(p);
}

/* Make p the current policy, unless it is equal in content to the
 * current one: then p is freed and the current one stays, with its
 * generation (the memo's answers stay good).  The previous one goes when
 * its last job is done.  rescan() does the same for the host map. */
static void set_policy(struct manager *m, struct policy *p) {
        if (m->policy && memo_same_policy(m->policy, p)) {
                policy_free(p);
                log_msg(LOG_DEBUG, "The policy is unchanged: its answers in the memo stay good");
                return;
        }
        shared_unref(m->policy_ref);
        m->policy_ref = shared_new(p, free_policy, ++m->policy_generation);
        m->policy = p;
}

/* Load the policy file; 0 with *ret, or a negative errno with *ret_error
 * naming the file.  Only a file that is not there at all may stand for the
 * built-in default, and only when missing_ok: at start, and on a reload of
 * a daemon that started without one.  Once a policy came from the file, a
 * reload that finds it gone (a half-done edit, a package removal, a typo
 * in a rename) is an error like a bad file, so the last good policy stays
 * instead of every domain being replanned under the default. */
static int load_policy(const struct manager_config *cfg, bool missing_ok, struct policy **ret, bool *ret_from_file,
                       char **ret_error) {
        struct stat st;
        if (stat(cfg->policy_file, &st) < 0) {
                int r = -errno;
                if (r != -ENOENT && r != -ENOTDIR)
                        return set_error(ret_error, r, "%s: cannot read: %s", cfg->policy_file, strerror(-r));
                if (!missing_ok)
                        return set_error(ret_error, r, "%s: no such file (removed since the policy was loaded from it); "
                                         "restart pcinumad to run with the built-in default instead",
                                         cfg->policy_file);
                *ret = policy_new_default();
                *ret_from_file = false;
                return 0;
        }
        /* A FIFO would block the event loop until someone writes to it;
         * a device has no business being a policy either. */
        if (!S_ISREG(st.st_mode))
                return set_error(ret_error, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
                                 "%s: cannot read: not a regular file", cfg->policy_file);
        *ret_from_file = true;
        return policy_load_file(cfg->policy_file, ret, ret_error);
}

static const char *hook_conf_path(const struct manager *m, char *buf, size_t n) {
        const char *slash = strrchr(m->cfg.socket_path, '/');
        size_t dirlen = slash ? (size_t) (slash - m->cfg.socket_path) : 0;
        snprintf(buf, n, "%.*s/hook.conf", (int) dirlen, m->cfg.socket_path);
        return buf;
}

/* Publish the policy's hook settings next to the socket, where the hook
 * reads them (/run/pcinuma/hook.conf), so the policy file stays the one
 * place an admin edits.  Atomic: write a temporary file, then rename. */
static void publish_hook_conf(struct manager *m) {
        char path[4096], tmp[4200];
        hook_conf_path(m, path, sizeof path);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        _cleanup_free_ char *text = xasprintf(
                "# Written by pcinumad from %s; edit that file, not this one.\n"
                "# " PCINUMA_DEFAULT_ETC_HOOK_CONF ", if present, overrides these settings.\n"
                "socket = %s\n"
                "timeout_ms = %u\n"
                "on_unreachable = %s\n",
                m->policy_from_file ? m->cfg.policy_file : "the built-in default policy",
                m->cfg.socket_path, m->policy->hook_timeout_ms,
                m->policy->hook_on_unreachable == POLICY_UNREACHABLE_REFUSE ? "refuse" : "allow");
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t) strlen(text) || rename(tmp, path) < 0) {
                log_errno(LOG_WARNING, -errno, "Failed to publish the hook settings to %s: %m, ignoring", path);
                (void) unlink(tmp);
        }
}

static void set_status(struct manager *m) {
        (void) sd_notifyf(false, "STATUS=Serving %s: %zu PCI devices on %zu NUMA nodes, policy %s (default %s)",
                          m->cfg.socket_path, m->hostmap->n_devices, m->hostmap->n_nodes,
                          m->policy_from_file ? m->cfg.policy_file : "built-in",
                          policy_mode_to_string(m->policy->def.mode));
}

/* One warning entry per sysfs file the reader could not make sense of;
 * at most HOSTMAP_WARNINGS_MAX, then one line saying how many more. */
static void log_hostmap_warnings(const struct manager *m, const struct hostmap *h) {
        for (size_t i = 0; i < h->n_warnings; i++) {
                const char *w = h->warnings[i];
                const char *colon = strstr(w, ": ");
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_SYSFS_ROOT", "%s", m->cfg.sysfs_root);
                if (colon)
                        log_fields_add(&f, "PCINUMA_SYSFS_FILE", "%.*s", (int) (colon - w), w);
                log_event(LOG_WARNING, PCINUMA_MID_SYSFS_UNREADABLE, &f, "sysfs %s", w);
                log_fields_done(&f);
        }
        if (h->n_warnings_dropped > 0)
                log_msg(LOG_WARNING, "sysfs: %zu more files could not be read or parsed (not listed)", h->n_warnings_dropped);
}

/* Rebuild the host map; on success, *ret_old (when non-NULL) gets the
 * manager's reference to the previous map, for the caller to compare and
 * drop. */
static int rescan(struct manager *m, const char *why, struct shared **ret_old) {
        _cleanup_free_ char *err = NULL;
        struct hostmap *h = NULL;
        uint64_t t0 = now_usec(CLOCK_MONOTONIC);
        int r = hostmap_load_for_plan(m->cfg.sysfs_root, &h, &err);
        metrics_hostmap_rebuild(m->metrics, why, r >= 0);
        if (r < 0) {
                log_msg(LOG_ERR, "Failed to rescan the host (%s): %s; keeping the previous host map", why, err);
                return r;
        }
#if PCINUMA_STAND_INS
        h->stand_ins = m->stand_ins;
#endif
        m->hostmap_generation++;
        struct shared *old = m->hostmap_ref;
        if (memo_same_hostmap(m->hostmap, h)) {
                /* The same host: keep the current map and its generation,
                 * so the memo's answers stay good (memo.h). */
                hostmap_free(h);
                h = m->hostmap;
                old = shared_ref(old);
                log_msg(LOG_DEBUG, "Host map unchanged (%s): its answers in the memo stay good", why);
        } else {
                m->hostmap_ref = shared_new(h, free_hostmap, m->hostmap_generation);
                m->hostmap = h;
        }
        if (ret_old)
                *ret_old = old;
        else
                shared_unref(old);
        m->hostmap_loaded_usec = now_usec(CLOCK_REALTIME);
        log_hostmap_warnings(m, h);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DEVICES", "%zu", h->n_devices);
        log_fields_add(&f, "PCINUMA_NODES", "%zu", h->n_nodes);
        log_fields_add(&f, "PCINUMA_SYSFS_ROOT", "%s", m->cfg.sysfs_root);
        log_event(LOG_INFO, PCINUMA_MID_HOSTMAP_REBUILT, &f, "Host map built (%s): %zu PCI devices, %zu mdevs, %zu NUMA nodes in %.1f ms",
                  why, h->n_devices, h->n_mdevs, h->n_nodes, (double) (now_usec(CLOCK_MONOTONIC) - t0) / 1000.0);
        log_fields_done(&f);
        return 0;
}


void manager_reload(struct manager *m) {
        (void) sd_notifyf(false, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=Reloading the policy and rescanning the host",
                          (unsigned long long) now_usec(CLOCK_MONOTONIC));

        _cleanup_free_ char *err = NULL;
        struct policy *p = NULL;
        bool from_file = false, policy_changed = false;
        int lr = load_policy(&m->cfg, !m->policy_from_file, &p, &from_file, &err);
        metrics_policy_reload(m->metrics, lr >= 0);
        if (lr < 0) {
                free(m->policy_error);
                m->policy_error = xstrdup(err);
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_POLICY_FILE", "%s", m->cfg.policy_file);
                log_event(LOG_ERR, PCINUMA_MID_POLICY_INVALID, &f, "Policy reload failed, keeping the last good policy: %s", err);
                log_fields_done(&f);
        } else {
                set_policy(m, p);       /* p may be freed: the same as m->policy */
                p = m->policy;
                policy_changed = true;
                m->policy_from_file = from_file;
                m->policy_loaded_usec = now_usec(CLOCK_REALTIME);
                free(m->policy_error);
                m->policy_error = NULL;
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_POLICY_FILE", "%s", m->cfg.policy_file);
                log_event(LOG_INFO, PCINUMA_MID_POLICY_LOADED, &f, "Policy reloaded from %s: default %s, %zu rule%s",
                          from_file ? m->cfg.policy_file : "the built-in default", policy_mode_to_string(p->def.mode),
                          p->n_rules, p->n_rules == 1 ? "" : "s");
                log_fields_done(&f);
                publish_hook_conf(m);
        }
        _cleanup_(shared_unrefp) struct shared *old = NULL;
        (void) rescan(m, "reload", &old);
        act_on_changes(m, old ? old->obj : NULL, policy_changed, "reload");
        (void) sd_notify(false, "READY=1");
        set_status(m);
}

static int on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        manager_reload(userdata);
        return 0;
}

static int on_rescan_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        struct manager *m = userdata;
        _cleanup_(shared_unrefp) struct shared *old = NULL;
        if (rescan(m, "udev", &old) >= 0) {
                set_status(m);
                act_on_changes(m, old->obj, false, "udev");
        }
        return 0;
}

static int on_uevent(sd_device_monitor *mon, sd_device *dev, void *userdata) {
        struct manager *m = userdata;
        sd_device_action_t action;
        if (sd_device_get_action(dev, &action) < 0)
                return 0;
        if (action != SD_DEVICE_ADD && action != SD_DEVICE_REMOVE && action != SD_DEVICE_BIND && action != SD_DEVICE_UNBIND)
                return 0;
        const char *name = NULL;
        (void) sd_device_get_sysname(dev, &name);
        log_msg(LOG_DEBUG, "udev: %s %s; rescanning shortly", name ? name : "?",
                action == SD_DEVICE_ADD ? "added" : action == SD_DEVICE_REMOVE ? "removed" : action == SD_DEVICE_BIND ? "bound" : "unbound");
        int r = sd_event_source_set_time_relative(m->rescan_timer, RESCAN_DELAY_USEC);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->rescan_timer, SD_EVENT_ONESHOT);
        if (r < 0)
                log_errno(LOG_WARNING, r, "Failed to schedule a rescan: %m, ignoring");
        return 0;
}

static int setup_udev(struct manager *m) {
        int r = sd_event_add_time_relative(m->event, &m->rescan_timer, CLOCK_MONOTONIC, RESCAN_DELAY_USEC, 0, on_rescan_timer, m);
        if (r < 0)
                return log_errno(LOG_ERR, r, "Failed to create the rescan timer: %m");
        (void) sd_event_source_set_description(m->rescan_timer, "rescan");
        (void) sd_event_source_set_enabled(m->rescan_timer, SD_EVENT_OFF);
        r = sd_event_add_time(m->event, &m->hold_timer, CLOCK_MONOTONIC, UINT64_MAX, 0, on_hold_timer, m);
        if (r < 0)
                return log_errno(LOG_ERR, r, "Failed to create the removal grace timer: %m");
        (void) sd_event_source_set_description(m->hold_timer, "removal-grace");
        (void) sd_event_source_set_enabled(m->hold_timer, SD_EVENT_OFF);

        /* A fixture tree gets no uevents: by default only the real /sys is
         * watched (--watch-udev yes forces it, for tests). */
        if (m->cfg.watch_udev == 0 || (m->cfg.watch_udev < 0 && !streq(m->cfg.sysfs_root, "/sys")))
                return 0;
        r = sd_device_monitor_new(&m->monitor);
        if (r >= 0)
                r = sd_device_monitor_filter_add_match_subsystem_devtype(m->monitor, "pci", NULL);
        if (r >= 0)
                r = sd_device_monitor_filter_add_match_subsystem_devtype(m->monitor, "mdev", NULL);
        if (r >= 0)
                r = sd_device_monitor_attach_event(m->monitor, m->event);
        if (r >= 0)
                r = sd_device_monitor_start(m->monitor, on_uevent, m);
        if (r < 0) {
                log_errno(LOG_WARNING, r, "Failed to watch udev for PCI changes: %m; the host map is rescanned on SIGHUP only");
                m->monitor = sd_device_monitor_unref(m->monitor);
        }
        return 0;
}

/* What the metrics file reports of the manager's and the watcher's
 * state (metrics.h), read when it is written. */
static void metrics_snapshot(void *userdata, struct metrics_state *ret) {
        struct manager *m = userdata;
        *ret = (struct metrics_state) {
                .hostmap_devices = m->hostmap ? m->hostmap->n_devices : 0,
                .hostmap_nodes = m->hostmap ? m->hostmap->n_nodes : 0,
                .domains_known = m->cache.n,
                .watcher = m->watcher != NULL,
        };
        if (m->watcher)
                watcher_link_counters(m->watcher, &ret->watcher_connected, &ret->redefinitions, &ret->redefinition_failures,
                                      &ret->conflicts);
}

static void manager_metrics_changed(void *userdata) {
        struct manager *m = userdata;
        metrics_changed(m->metrics);
}

/* The policy, at start: a bad policy file stops pcinumad (logged with
 * PCINUMA_MID_POLICY_INVALID); a missing default one means the built-in
 * policy, with a warning. */
static int start_policy(struct manager *m) {
        _cleanup_free_ char *err = NULL;
        int r = load_policy(&m->cfg, true, &m->policy, &m->policy_from_file, &err);
        if (r < 0) {
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_POLICY_FILE", "%s", m->cfg.policy_file);
                log_event(LOG_ERR, PCINUMA_MID_POLICY_INVALID, &f, "Cannot start: %s", err);
                log_fields_done(&f);
                return r;
        }
        m->policy_ref = shared_new(m->policy, free_policy, ++m->policy_generation);
        m->policy_loaded_usec = now_usec(CLOCK_REALTIME);
        if (!m->policy_from_file)
                log_msg(LOG_WARNING, "No policy file at %s; the built-in default policy is in force (default %s, no rules)",
                        m->cfg.policy_file, policy_mode_to_string(m->policy->def.mode));
        return 0;
}

/* The host map, at start (with a test build's stand-ins, when given):
 * pcinumad does not start without one. */
static int start_hostmap(struct manager *m) {
        _cleanup_free_ char *err = NULL;
        int r;

#if PCINUMA_STAND_INS
        if (m->cfg.stand_ins_file) {
                r = standins_load_file(m->cfg.stand_ins_file, &m->stand_ins, &err);
                if (r < 0) {
                        log_msg(LOG_ERR, "Cannot start: --stand-ins: %s", err);
                        return r;
                }
                log_msg(LOG_WARNING, "A test build: %zu stand-ins from %s; a virtio <interface type='user'> with one of "
                        "their MACs is placed as the passthrough device it names", m->stand_ins->n, m->cfg.stand_ins_file);
        }
#endif
        r = hostmap_load_for_plan(m->cfg.sysfs_root, &m->hostmap, &err);
        if (r < 0) {
                log_msg(LOG_ERR, "Cannot start: cannot read the host map: %s", err);
                return r;
        }
        m->hostmap_generation = 1;
        m->hostmap_ref = shared_new(m->hostmap, free_hostmap, m->hostmap_generation);
#if PCINUMA_STAND_INS
        m->hostmap->stand_ins = m->stand_ins;
#endif
        m->hostmap_loaded_usec = now_usec(CLOCK_REALTIME);
        log_hostmap_warnings(m, m->hostmap);
        return 0;
}

/* The event loop, with the metrics file and the signals: SIGTERM and
 * SIGINT end it, SIGHUP reloads, SIGCHLD reports the watcher's exit. */
static int setup_event_loop(struct manager *m) {
        int r = sd_event_default(&m->event);
        if (r < 0)
                return log_errno(LOG_ERR, r, "Failed to create the event loop: %m");
        (void) sd_event_set_watchdog(m->event, true);

        r = metrics_new(m->cfg.metrics_file, m->event, metrics_snapshot, m, &m->metrics);
        if (r < 0)
                return log_errno(LOG_ERR, r, "Failed to set up the metrics file %s: %m", m->cfg.metrics_file);
        metrics_hostmap_rebuild(m->metrics, "start", true);
        if (m->cfg.metrics_file)
                log_msg(LOG_INFO, "Writing Prometheus metrics to %s", m->cfg.metrics_file);

        sigset_t ss;
        sigemptyset(&ss);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigaddset(&ss, SIGHUP);
        sigaddset(&ss, SIGCHLD);        /* the libvirt watcher's exit, through sd-event */
        if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0)
                return log_errno(LOG_ERR, -errno, "Failed to block signals: %m");
        /* NULL handlers: SIGTERM and SIGINT end the loop. */
        if ((r = sd_event_add_signal(m->event, NULL, SIGTERM, NULL, NULL)) < 0 ||
            (r = sd_event_add_signal(m->event, NULL, SIGINT, NULL, NULL)) < 0 ||
            (r = sd_event_add_signal(m->event, NULL, SIGHUP, on_sighup, m)) < 0)
                return log_errno(LOG_ERR, r, "Failed to watch signals: %m");
        signal(SIGPIPE, SIG_IGN);
        return 0;
}

/* The worker threads that decide large hook requests, and what must be
 * set up once before there are threads. */
static int setup_workers(struct manager *m) {
        /* libxml2's global state is set up once, here, before any worker
         * parses a document (xmlInitParser() is not thread-safe). */
        xmlInitParser();
        /* One malloc arena for all threads, set before there are any: a
         * worker's large document then reuses what the main thread freed
         * (the peak stays what it was without workers), and the trim after
         * a burst of them (hook_job_complete()) finds everything in one
         * place.  MALLOC_ARENA_MAX in the environment, if set, wins. */
        if (!getenv("MALLOC_ARENA_MAX"))
                (void) mallopt(M_ARENA_MAX, 1);
        return workers_new(m->event, m->cfg.workers ? m->cfg.workers : workers_default_threads(), &m->workers);
}

static const struct server_ops server_ops = {
        .handle = manager_handle,
        .detach = manager_job_detach,
};

/* The hook server, on the socket systemd passed, else on its own socket
 * file at cfg.socket_path. */
static int setup_server(struct manager *m) {
        int fd = -1;
        bool activated = false;
        int r = server_listen_fd(m->cfg.socket_path, &fd, &activated);
        if (r < 0)
                return r;
        struct server_config sc = {
                .request_timeout_ms = m->cfg.request_timeout_ms,
                .max_connections = m->cfg.max_connections,
                .n_allowed_uids = m->cfg.n_allowed_uids,
        };
        _Static_assert(sizeof sc.allowed_uids == sizeof m->cfg.allowed_uids, "--allow-uid: one limit");
        memcpy(sc.allowed_uids, m->cfg.allowed_uids, sizeof sc.allowed_uids);
        r = server_new(&sc, &server_ops, m, m->event, fd, &m->server);
        if (r < 0) {
                close(fd);
                return r;
        }
        if (!activated)
                server_own_socket_file(m->server, m->cfg.socket_path);
        log_msg(LOG_INFO, "Listening on %s%s", activated ? "the socket passed by systemd" : m->cfg.socket_path,
                activated ? "" : " (mode 0600)");
        return 0;
}

static const struct watcher_link_ops watcher_link_ops = {
        .plan = manager_plan_redefine,
        .plan_restart = manager_plan_restart,
        .forget = manager_forget_domain,
        .persistent_all = manager_persistent_all,
        .persistent_one = manager_persistent_one,
        .persistence_lost = manager_persistence_lost,
        .restarted = manager_restart_done,
        .counters_changed = manager_metrics_changed,
};

/* The libvirt watcher process, unless --libvirt-uri none. */
static int start_watcher(struct manager *m) {
        const struct manager_config *cfg = &m->cfg;
        if (streq(cfg->libvirt_uri, "none"))
                return 0;
        _cleanup_free_ char *found = cfg->watcher_program ? NULL : watcher_link_find_program();
        const struct watcher_link_config wc = {
                .program = cfg->watcher_program ? cfg->watcher_program : found,
                .uri = cfg->libvirt_uri,
                .log_target = cfg->log_target ? cfg->log_target : "auto",
                .settle_ms = cfg->settle_ms,
                .state_dir = cfg->state_dir,
                .preimage_max_bytes = cfg->preimage_max_bytes,
#if PCINUMA_STAND_INS
                .stand_ins_file = cfg->stand_ins_file,
#endif
        };
        return watcher_link_start(&wc, &watcher_link_ops, m, m->event, &m->watcher);
}

int manager_new(const struct manager_config *cfg, struct manager **ret) {
        _cleanup_(manager_freep) struct manager *m = xcalloc(1, sizeof(*m));
        memo_init(&m->memo, memo_answer_free);
        int r;

        m->cfg = *cfg;
        recheck_cache_init(&m->cache, RECHECK_CACHE_MAX);
        m->start_usec = now_usec(CLOCK_REALTIME);
        m->start_mono = now_usec(CLOCK_MONOTONIC);

        /* In this order: what to plan with, then the event loop and the
         * threads, then the sockets and processes that bring requests. */
        if ((r = start_policy(m)) < 0 ||
            (r = start_hostmap(m)) < 0 ||
            (r = setup_event_loop(m)) < 0 ||
            (r = setup_workers(m)) < 0 ||
            (r = setup_server(m)) < 0 ||
            (r = setup_udev(m)) < 0 ||
            (r = start_watcher(m)) < 0)
                return r;

        publish_hook_conf(m);
        *ret = TAKE_PTR(m);
        return 0;
}

struct manager *manager_free(struct manager *m) {
        if (!m)
                return NULL;
        watcher_link_stop(m->watcher);
        /* The server first: its connections let go of their jobs; then
         * the jobs that are running end, and the rest are dropped. */
        server_free(m->server);
        drop_parked(m);
        workers_free(m->workers);
        sd_event_source_disable_unref(m->rescan_timer);
        sd_event_source_disable_unref(m->hold_timer);
        recheck_cache_done(&m->cache);
        recheck_holds_done(&m->holds);
        restart_state_done(&m->restarts);
        memo_done(&m->memo);
        sd_device_monitor_unref(m->monitor);
        metrics_free(m->metrics);
        sd_event_unref(m->event);
        shared_unref(m->hostmap_ref);
        shared_unref(m->policy_ref);
#if PCINUMA_STAND_INS
        standins_free(m->stand_ins);
#endif
        free(m->policy_error);
        free(m);
        return NULL;
}

int manager_run(struct manager *m) {
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_SOCKET", "%s", m->cfg.socket_path);
        log_event(LOG_INFO, PCINUMA_MID_DAEMON_READY, &f, "pcinumad %s ready: %zu PCI devices, %zu NUMA nodes, policy %s (default %s, %zu rules)",
                  PCINUMA_VERSION, m->hostmap->n_devices, m->hostmap->n_nodes,
                  m->policy_from_file ? m->cfg.policy_file : "built-in", policy_mode_to_string(m->policy->def.mode), m->policy->n_rules);
        log_fields_done(&f);
        (void) sd_notify(false, "READY=1");
        set_status(m);
        int r = sd_event_loop(m->event);
        (void) sd_notify(false, "STOPPING=1\nSTATUS=Shutting down");
        if (r < 0)
                return log_errno(LOG_ERR, r, "Event loop failed: %m");
        log_msg(LOG_INFO, "Stopping on signal");
        return 0;
}

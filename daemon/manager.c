/* pcinumad's manager: state, reloads and event sources. */
#include "manager.h"
#include "paths.h"

#include <fcntl.h>
#include <libxml/parser.h>
#include <malloc.h>
#include <signal.h>
#include <strings.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-device.h>
#include <systemd/sd-event.h>
#include <time.h>

#include "decide.h"
#include "hostmap.h"
#include "hostmap-sysfs.h"
#include "log.h"
#include "mark.h"
#include "memo.h"
#include "metrics.h"
#include "policy.h"
#include "policy-file.h"
#include "protocol.h"
#include "recheck.h"
#include "redefine.h"
#include "restart.h"
#include "server.h"
#include "watcher-link.h"
#include "workers.h"
#include "wproto.h"

#if PCINUMA_STAND_INS
#include "standins.h"
#endif

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
         * starts, incoming ones, counters (restart.h). */
        struct restart_state restarts;

        /* The answers to prepare calls of planned domains, by what they
         * were decided from (memo.h): main thread only. */
        struct memo memo;
        struct hook_job *parked;        /* prepare calls waiting for a define (manager.c, park()) */

        uint64_t start_usec;            /* CLOCK_REALTIME */
        uint64_t start_mono;
        /* Requests that reached manager_handle() (the server counts those
         * it refused before: server_stats()). */
        uint64_t n_requests, n_hook, n_status, n_errors;
        uint64_t n_verdict[_DECIDE_VERDICT_MAX];        /* by enum decide_verdict */
};

/* udev sends a burst of events per device (add, bind, ...): wait this
 * long after the last one before rescanning. */
#define RESCAN_DELAY_USEC (250 * 1000)

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

static struct shared *shared_new(void *obj, void (*free_obj)(void *obj), uint64_t generation) {
        struct shared *s = xcalloc(1, sizeof(*s));
        *s = (struct shared) { .n_ref = 1, .obj = obj, .free_obj = free_obj, .generation = generation };
        return s;
}

static struct shared *shared_ref(struct shared *s) {
        s->n_ref++;
        return s;
}

static struct shared *shared_unref(struct shared *s) {
        if (s && --s->n_ref == 0) {
                s->free_obj(s->obj);
                free(s);
        }
        return NULL;
}

static void shared_unrefp(struct shared **s) {
        shared_unref(*s);
}

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

/* --- rechecking only what changed (recheck.h) ------------------------------
 *
 * The watcher planned every persistent domain when it connected, and
 * pcinumad keeps what it learnt from those plans (manager_plan_redefine):
 * the devices each domain uses and its resolved policy settings.  A host
 * map change or a reload then asks the watcher to look again at the
 * domains it touches only, by UUID.  A domain the cache does not know is
 * not rechecked: it has not been planned yet, and will be with the map and
 * policy of that time.  When the cache had to drop entries (more domains
 * than RECHECK_CACHE_MAX), it no longer knows every domain and every
 * change rechecks all of them, as before.
 *
 * A device that leaves sysfs briefly (a driver reprobe, a reset, a PCI
 * remove and rescan) must not cost a pair of redefinitions (one without
 * it, one with it back).  Removals are therefore held for
 * REMOVAL_GRACE_USEC: if the device comes back as it was, nothing
 * happens; if it comes back changed, its domains are rechecked then; if
 * it is still gone when the grace period ends, they are rechecked then.
 * Additions and changes act at once (after the rescan delay).  The prepare
 * gate is not affected: it always judges against the live host map. */
#define REMOVAL_GRACE_USEC (10 * 1000 * 1000)

static void recheck_all(struct manager *m) {
        if (!m->watcher)
                return;
        m->n_recheck_all++;
        watcher_link_recheck_all(m->watcher);
}

static void recheck_domains(struct manager *m, const struct recheck_ids *uuids, const char *why) {
        if (!m->watcher)
                return;
        for (size_t i = 0; i < uuids->n; i++) {
                m->n_recheck_domains++;
                watcher_link_recheck_domain(m->watcher, uuids->v[i]);
        }
        if (uuids->n)
                log_msg(LOG_INFO, "Rechecking %zu domain%s (%s)", uuids->n, uuids->n == 1 ? "" : "s", why);
}

static void arm_hold_timer(struct manager *m) {
        uint64_t next = recheck_holds_next(&m->holds);
        int r = 0;
        if (next == UINT64_MAX)
                r = sd_event_source_set_enabled(m->hold_timer, SD_EVENT_OFF);
        else {
                r = sd_event_source_set_time(m->hold_timer, next);
                if (r >= 0)
                        r = sd_event_source_set_enabled(m->hold_timer, SD_EVENT_ONESHOT);
        }
        if (r < 0)
                log_errno(LOG_WARNING, r, "Failed to schedule the end of a removal's grace period: %m, ignoring");
}

static char *ids_phrase(const struct recheck_ids *ids) {
        struct strbuf b = {0};
        for (size_t i = 0; i < ids->n && i < 8; i++)
                strbuf_printf(&b, "%s%s", i ? ", " : "", ids->v[i]);
        if (ids->n > 8)
                strbuf_printf(&b, " and %zu more", ids->n - 8);
        return b.len ? strbuf_steal(&b) : xstrdup("none");
}

/* The host map changed from old to m->hostmap (and, with policy_changed,
 * the policy was replaced): recheck what that touches. */
static void act_on_changes(struct manager *m, const struct hostmap *old, bool policy_changed, const char *why) {
        struct recheck_diff diff = {0};
        struct recheck_ids devices = {0}, uuids = {0};
        if (old) {
                recheck_diff_hosts(old, m->hostmap, &diff);
                recheck_holds_filter(&m->holds, &diff, now_usec(CLOCK_MONOTONIC), REMOVAL_GRACE_USEC);
                arm_hold_timer(m);
                recheck_diff_ids(&diff, &devices);
        }
        _cleanup_free_ char *phrase = ids_phrase(&devices);
        if (diff.global || (m->cache.overflowed && (devices.n || policy_changed))) {
                log_msg(LOG_INFO, "%s: %s; rechecking every domain", why,
                        diff.global ? "the host's NUMA nodes, CPUs or distances changed"
                                    : "more domains than the recheck cache holds");
                recheck_all(m);
        } else {
                if (devices.n)
                        log_msg(LOG_DEBUG, "%s: devices changed: %s", why, phrase);
                recheck_cache_touched_by(&m->cache, &devices, &uuids);
                if (policy_changed)
                        recheck_cache_policy_changed(&m->cache, m->policy, &uuids);
                _cleanup_free_ char *what = xasprintf("%s; devices changed: %s%s", why, phrase,
                                                      policy_changed ? "; or their policy settings changed" : "");
                recheck_domains(m, &uuids, what);
        }
        recheck_ids_done(&uuids);
        recheck_ids_done(&devices);
        recheck_diff_done(&diff);
}

static int on_hold_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        struct manager *m = userdata;
        struct recheck_ids gone = {0}, uuids = {0};
        recheck_holds_expire(&m->holds, now_usec(CLOCK_MONOTONIC), &gone);
        arm_hold_timer(m);
        if (m->cache.overflowed && gone.n)
                recheck_all(m);
        else {
                recheck_cache_touched_by(&m->cache, &gone, &uuids);
                _cleanup_free_ char *phrase = ids_phrase(&gone);
                _cleanup_free_ char *why = xasprintf("still gone after the grace period: %s", phrase);
                recheck_domains(m, &uuids, why);
        }
        recheck_ids_done(&uuids);
        recheck_ids_done(&gone);
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

static json_object *manager_handle(void *userdata, json_object *request, struct conn *c, uid_t peer_uid,
                                   pid_t peer_pid, struct hook_job **ret_job);
static void manager_job_detach(void *userdata, struct hook_job *j);

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

static void manager_plan_redefine(void *userdata, const char *xml, size_t len, struct redefine_plan *ret);
static void manager_plan_restart(void *userdata, const char *uuid, const char *xml, size_t len,
                                 struct redefine_plan *ret);
static void manager_forget_domain(void *userdata, const char *uuid);
static void manager_persistent_all(void *userdata, const struct wproto_domains *d);
static void manager_persistent_one(void *userdata, const char *uuid, bool persistent);
static void manager_persistence_lost(void *userdata);
static void manager_restart_done(void *userdata, const struct wproto_restarted *r);

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

static void memo_answer_free(void *v);

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

static void drop_parked(struct manager *m);

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

static const char *event_message_id(const struct decision *d) {
        bool prepare = streq(d->phase, "prepare");
        switch (d->verdict) {
        case DECIDE_ALLOW:
                return streq(d->phase, "migrate") ? PCINUMA_MID_MIGRATION_ACCEPTED : PCINUMA_MID_START_ALLOWED;
        case DECIDE_WARN:
                return PCINUMA_MID_START_WARNED;
        case DECIDE_RESTART:
                return PCINUMA_MID_START_RESTARTING;
        case DECIDE_REFUSE:
                return prepare ? PCINUMA_MID_START_REFUSED : PCINUMA_MID_MIGRATION_REFUSED;
        case DECIDE_PASS:
        default:
                return PCINUMA_MID_HOOK_PASSED;
        }
}

/* PCINUMA_FIDELITY: how many device pairs keep their host path type in
 * the guest ("same=120 closer=0 farther=0"; docs/operations.md).  The
 * plan's owner computed the report (planner_fidelity()) beforehand. */
static void log_fidelity(struct log_fields *f, const struct plan *p) {
        if (!p)
                return;
        if (!p->n_pairs)
                return;
        if (p->n_unknown)
                log_fields_add(f, "PCINUMA_FIDELITY", "same=%u closer=%u farther=%u unknown=%u", p->n_same, p->n_closer,
                               p->n_farther, p->n_unknown);
        else
                log_fields_add(f, "PCINUMA_FIDELITY", "same=%u closer=%u farther=%u", p->n_same, p->n_closer, p->n_farther);
        /* Each pair that does not keep its host path type, by name: that is
         * what an admin looks for in the journal.  Every pair, kept or not,
         * is in `pcinumactl plan --format explain|json`.  At most
         * LOG_PAIRS_MAX of them, and how many more, so one decision stays
         * one small journal entry whatever the domain holds. */
        enum { LOG_PAIRS_MAX = 32 };
        unsigned logged = 0, more = 0;
        for (size_t i = 0; i < p->n_pairs; i++) {
                const struct plan_pair *pp = &p->pairs[i];
                if (pp->host == pp->guest)
                        continue;
                if (logged == LOG_PAIRS_MAX) {
                        more++;
                        continue;
                }
                logged++;
                log_fields_add(f, "PCINUMA_PAIR_CHANGED", "%s %s host=%s guest=%s", p->devices[pp->a].name,
                               p->devices[pp->b].name, plan_path_to_string(pp->host), plan_path_to_string(pp->guest));
        }
        if (more)
                log_fields_add(f, "PCINUMA_PAIR_CHANGED_MORE", "%u", more);
}

/* A decision's journal entry, built (decision_log_build()) and then sent
 * (decision_log_emit()): the memo of prepare answers keeps it with the
 * answer, so that a remembered answer is logged as the decision was. */
struct decision_log {
        int prio;
        const char *message_id;
        struct log_fields f;
        char *message;
};

static void decision_log_done(struct decision_log *l) {
        log_fields_done(&l->f);
        free(l->message);
        *l = (struct decision_log) {0};
}

static void decision_log_emit(const struct decision_log *l) {
        log_event(l->prio, l->message_id, &l->f, "%s", l->message);
}

static void decision_log_build(const struct decision *d, struct decision_log *ret) {
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", d->domain);
        if (d->uuid)
                log_fields_add(&f, "PCINUMA_UUID", "%s", d->uuid);
        log_fields_add(&f, "PCINUMA_PHASE", "%s", d->phase);
        if (d->has_mode)
                log_fields_add(&f, "PCINUMA_POLICY", "%s", policy_mode_to_string(d->mode));
        log_fields_add(&f, "PCINUMA_VERDICT", "%s", decide_verdict_to_string(d->verdict));
        const struct plan *p = d->result ? d->result->plan : NULL;
        for (size_t i = 0; p && i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                log_fields_add(&f, "PCINUMA_DEVICE", "%s", pd->name);
                log_fields_add(&f, "PCINUMA_HOST_NODE", "%d", pd->host_node);
                log_fields_add(&f, "PCINUMA_GUEST_CELL", "%d", pd->cell);
        }
        log_fidelity(&f, d->result ? d->result->plan : NULL);
        if (d->result && d->result->stale_mark)
                log_fields_add(&f, "PCINUMA_STALE_MARK", "%s", d->result->stale_mark);
        for (size_t i = 0; i < d->n_remap; i++)
                log_fields_add(&f, "PCINUMA_REMAP", "%s", d->remap[i]);
        for (size_t i = 0; i < d->n_shared; i++)
                log_fields_add(&f, "PCINUMA_SHARED_DEVICE", "%s", d->shared[i]);

        /* The message: the first line of what the hook prints, without
         * the "pcinuma: " prefix, or a summary. */
        _cleanup_free_ char *first = NULL;
        if (d->message) {
                const char *s = d->message;
                if (strncmp(s, "pcinuma: ", 9) == 0)
                        s += 9;
                first = xstrndup(s, strcspn(s, "\n"));
        }
        int prio = d->verdict == DECIDE_REFUSE || d->n_shared                   ? LOG_WARNING
                   : d->verdict == DECIDE_WARN || d->verdict == DECIDE_RESTART ? LOG_NOTICE
                                                                                 : LOG_INFO;
        char *message;
        if (first)
                message = TAKE_PTR(first);
        else if (d->verdict == DECIDE_ALLOW)
                message = xasprintf("Domain %s may start: %s", d->domain,
                                    d->result && d->result->already_planned ? "its PCI topology matches the NUMA plan"
                                    : d->result && d->result->plan->reason ? d->result->plan->reason : "nothing to place");
        else {
                prio = LOG_DEBUG;
                message = xasprintf("Domain %s: %s %s passed", d->domain, d->phase, d->subphase);
        }
        *ret = (struct decision_log) { .prio = prio, .message_id = event_message_id(d), .f = f, .message = message };
}

static void log_decision(const struct decision *d) {
        struct decision_log l;
        decision_log_build(d, &l);
        decision_log_emit(&l);
        decision_log_done(&l);
}

/* --- the memo of prepare answers ------------------------------------------
 *
 * A planned domain that comes back unchanged (the same hook arguments and
 * XML bytes, the same host map and policy objects) is answered as it was
 * the first time, without parsing or planning it: memo.h says which
 * answers are kept and why the key makes them right.  Requests decided on
 * the main thread only (the memo is the main thread's). */
struct memo_answer {
        enum decide_verdict verdict;
        int exit_code;
        char *message;
        char *domain;
        char *uuid;
        enum policy_mode mode;
        bool has_mode;
        struct decision_log log;
};

static void memo_answer_free(void *v) {
        struct memo_answer *a = v;
        free(a->message);
        free(a->domain);
        free(a->uuid);
        decision_log_done(&a->log);
        free(a);
}

static struct memo_answer *memo_answer_new(const struct decision *d) {
        struct memo_answer *a = xcalloc(1, sizeof(*a));
        *a = (struct memo_answer) {
                .verdict = d->verdict,
                .exit_code = d->exit_code,
                .message = d->message ? xstrdup(d->message) : NULL,
                .domain = xstrdup(d->domain),
                .uuid = d->uuid ? xstrdup(d->uuid) : NULL,
                .mode = d->mode,
                .has_mode = d->has_mode,
        };
        decision_log_build(d, &a->log);
        return a;
}

/* The decision a is the answer of, for req (no plan with it: the log is
 * a's). */
static void memo_answer_decision(const struct memo_answer *a, const struct proto_request *req, struct decision *ret) {
        *ret = (struct decision) {
                .verdict = a->verdict,
                .exit_code = a->exit_code,
                .message = a->message ? xstrdup(a->message) : NULL,
                .phase = req->argv[1],
                .subphase = req->argv[2],
                .domain = xstrdup(a->domain),
                .uuid = a->uuid ? xstrdup(a->uuid) : NULL,
                .mode = a->mode,
                .has_mode = a->has_mode,
        };
}

/* --- hook decisions, and the workers --------------------------------------
 *
 * A hook request whose domain XML is larger than HOOK_INLINE_MAX is
 * decided on a worker thread (workers.h), so that however heavy it is, it
 * never holds up the event loop: other domains' verdicts, status, the
 * watcher, the watchdog.  An ordinary one (every real domain XML but the
 * largest) is decided at once on the main thread: its decision is bounded
 * by its size (the core's work is), and it saves the two thread hand-offs
 * a worker costs, which on a loaded host are scheduler delays on every VM
 * start.
 *
 * Either way the request is a hook_job that owns everything its decision
 * reads: the request, references to the host map and the policy of the
 * moment (struct shared), and a hook_context the main thread filled in
 * from the manager's state when the request came in.  hook_job_decide()
 * runs decide_hook() on that alone, and the answer is made from the
 * decision (on a worker, encoded there too); everything else happens on
 * the main thread afterwards, in hook_job_apply(): counters, the log, the
 * watcher; then the answer is sent.
 *
 * To give a decision more of the manager's state, add a field to struct
 * hook_context, fill it in hook_context_fill() (a copy: on a worker the
 * manager's memory changes while the decision runs) and free it in
 * hook_context_done(); hook_job_decide() passes it to the core.  A side
 * effect of a decision goes into hook_job_apply(), which both paths run
 * before the answer is sent; the answer is the decision's (made before
 * apply runs), so what the client is told belongs in the decision. */

/* Decided on the main thread up to this size of domain XML (a planned
 * 16-device domain is 25 KiB); on a worker above it. */
#define HOOK_INLINE_MAX (64u * 1024u)

/* What a hook decision needs from the manager's state, copied when the
 * request arrives. */
struct hook_context {
        struct decide_context decide;   /* what the gate knows of the domain (restart.h); its uuid points to: */
        char uuid[37];
        uint64_t now;                   /* CLOCK_MONOTONIC, when it was filled */
        bool await_define;              /* a prepare call whose define may be on its way (restart_define_awaited()) */
        struct migrate_in_use in_use;   /* migrate: the devices defined domains use (the recheck cache);
                                         * every string owned by the context */
};

static void hook_context_done(struct hook_context *c) {
        for (size_t i = 0; i < c->in_use.n; i++) {
                free((char *) c->in_use.v[i].id);
                free((char *) c->in_use.v[i].uuid);
                free((char *) c->in_use.v[i].domain);
        }
        free((void *) c->in_use.v);
        *c = (struct hook_context) {0};
}

/* The devices each defined domain uses, as the recheck cache knows them
 * (domains the watcher has looked at), for an incoming migration's
 * mapping: copies, since the cache changes while the worker reads them. */
static void devices_in_use(const struct recheck_cache *c, struct migrate_in_use *ret) {
        size_t n = 0;
        for (size_t i = 0; i < c->n; i++)
                n += c->v[i].devices.n;
        struct migrate_used *v = xcalloc(n ? n : 1, sizeof(*v));
        size_t k = 0;
        for (size_t i = 0; i < c->n; i++)
                for (size_t j = 0; j < c->v[i].devices.n; j++)
                        v[k++] = (struct migrate_used) {
                                .id = xstrdup(c->v[i].devices.v[j]),
                                .uuid = c->v[i].uuid ? xstrdup(c->v[i].uuid) : NULL,
                                .domain = c->v[i].name ? xstrdup(c->v[i].name) : NULL,
                        };
        *ret = (struct migrate_in_use) { .v = v, .n = k };
}

static void hook_context_fill(struct manager *m, const struct proto_request *req, struct hook_context *ret) {
        *ret = (struct hook_context) { .now = now_usec(CLOCK_MONOTONIC) };
        /* Is the domain persistent, is this start pcinuma's own, did a
         * migrate or restore call for it come just before, is a watcher
         * connected: restart.h. */
        restart_context(&m->restarts, req->xml, req->xml_len, m->watcher != NULL, m->watcher != NULL, ret->now,
                        ret->uuid, &ret->decide);
        ret->await_define = streq(req->argv[1], "prepare") && streq(req->argv[2], "begin") &&
                            restart_define_awaited(&m->restarts, &ret->decide, ret->now);
        if (streq(req->argv[1], "migrate"))
                devices_in_use(&m->cache, &ret->in_use);
}

struct hook_job {
        struct worker_job work;         /* first: the pool's part (workers.h) */
        /* Main thread only: */
        struct manager *m;
        uint64_t t0;                    /* CLOCK_MONOTONIC: when the request came in */
        struct conn *conn;              /* where a worker's answer goes; NULL once the client has gone */
        struct shared *hostmap, *policy;        /* references, dropped when the job is freed */
        /* The decision's input, read only by it once queued: */
        struct proto_request req;
        struct hook_context ctx;
        /* Its output: */
        struct decision d;
        const struct decision_log *log; /* the memo's journal entry of d (not owned), or NULL: log d */
        bool define_matters;            /* ctx.await_define, and a define would change d's answer: wait for it */
        char *frame;                    /* a worker's answer, encoded; NULL if it could not be */
        size_t frame_len;
        /* While it waits for a define (manager.parked): */
        struct hook_job *park_next;
        sd_event_source *park_timer;
        pid_t peer_pid;
};

static void hook_job_free(struct hook_job *j) {
        sd_event_source_disable_unref(j->park_timer);
        decision_done(&j->d);
        hook_context_done(&j->ctx);
        proto_request_done(&j->req);
        shared_unref(j->hostmap);
        shared_unref(j->policy);
        free(j->frame);
        free(j);
}

/* Any thread: the job's own data, the host map and the policy. */
static void hook_job_decide(struct hook_job *j) {
        decide_hook(&j->req, j->hostmap->obj, j->policy->obj, &j->ctx.in_use, &j->ctx.decide, &j->d);
        if (j->ctx.await_define)
                j->define_matters = restart_define_matters(&j->req, j->hostmap->obj, j->policy->obj, &j->ctx.decide,
                                                           &j->d);
        /* The path fidelity report the journal entry gives (log_decision()),
         * computed by the job that owns the plan. */
        if (j->d.result)
                planner_fidelity(j->d.result->plan);
}

static json_object *hook_job_answer(const struct hook_job *j) {
        const struct decision *d = &j->d;
        return proto_response_new_hook(d->exit_code, d->out, d->message, decide_verdict_to_string(d->verdict));
}

/* On the main thread: hook_job_decide(), or the memo's answer when it has
 * one for this request (and the decision's, when the memo keeps it). */
static void hook_job_decide_memo(struct hook_job *j) {
        struct memo *memo = &j->m->memo;
        if (!streq(j->req.argv[1], "prepare") || !streq(j->req.argv[2], "begin")) {
                hook_job_decide(j);
                return;
        }
        uint64_t hg = j->hostmap->generation, pg = j->policy->generation;
        struct memo_answer *a = memo_get(memo, &j->req, hg, pg);
        if (a)
                memo_answer_decision(a, &j->req, &j->d);
        else {
                hook_job_decide(j);
                if (!memo_keeps(&j->d))
                        return;
                a = memo_answer_new(&j->d);
                if (!memo_put(memo, &j->req, hg, pg, a))
                        return;         /* not kept (and freed): d is logged */
        }
        j->log = &a->log;
}

/* A worker thread's part. */
static void hook_job_run(struct worker_job *w) {
        struct hook_job *j = (struct hook_job *) w;
        hook_job_decide(j);
        json_object *resp = hook_job_answer(j);
        if (frame_encode(resp, &j->frame, &j->frame_len) < 0)
                j->frame = NULL;
        json_object_put(resp);
        /* The XML answer is in the frame now (up to 4 MiB). */
        free(j->d.out);
        j->d.out = NULL;
}

/* The main thread's part, once the decision is made (and its answer, which
 * this does not change): its side effects, before the answer is sent.  On
 * a worker's job, d->out is gone by now (it is in the answer). */
static void hook_job_apply(struct hook_job *j) {
        struct manager *m = j->m;
        const struct decision *d = &j->d;
        m->n_verdict[d->verdict]++;
        metrics_verdict(m->metrics, d->phase, d->has_mode ? policy_mode_to_string(d->mode) : NULL,
                        decide_verdict_to_string(d->verdict));
        if (d->result && d->result->stale_mark)
                metrics_stale_mark(m->metrics, "prepare");
        if (j->log)
                decision_log_emit(j->log);
        else
                log_decision(d);
        /* Restarts into the plan (restart.h): a prepare call uses up an
         * incoming note and asks the watcher for a restart; a migrate or
         * restore call notes that the prepare call that follows is not a
         * start to restart. */
        const struct decide_context *ctx = &j->ctx.decide;
        bool begin = streq(d->subphase, "begin");
        if (begin && streq(d->phase, "prepare"))
                restart_after_prepare(&m->restarts, ctx, d->verdict);
        else if (begin && (streq(d->phase, "migrate") || streq(d->phase, "restore")) && ctx->uuid &&
                 d->verdict != DECIDE_REFUSE)
                restart_note_incoming(&m->restarts, ctx->uuid, j->ctx.now);
        if ((d->verdict == DECIDE_RESTART || d->restart_if_persistent) && m->watcher) {
                /* restart_if_persistent: a transient domain the gate let
                 * through, restarted only if it is persistent once up (a
                 * client that defines it while it starts: virt-install). */
                if (d->restart_if_persistent && d->uuid)
                        restart_note_conditional(&m->restarts, d->uuid, j->ctx.now);
                watcher_link_restart(m->watcher, d->uuid, m->policy->restart_window_ms, j->ctx.now,
                                     (const char *const *) d->boot_files, d->n_boot_files, d->restart_if_persistent);
        }
        /* A start that found the layout out of date: make sure the
         * watcher looks at this domain, even if it missed an event.
         * Not while it restarts it: a look at a starting domain waits
         * for libvirt's lock, and would hold up the restart; the look
         * comes when the restart is over (manager_restart_done). */
        if (m->watcher && d->result && d->result->verdict == PLAN_APPLY && !d->result->already_planned && d->uuid &&
            d->verdict != DECIDE_RESTART && !d->restart_if_persistent)
                watcher_link_recheck_domain(m->watcher, d->uuid);
        /* From the request's arrival: a worker's wait and run included. */
        metrics_request(m->metrics, "hook", now_usec(CLOCK_MONOTONIC) - j->t0);
}

static int park(struct manager *m, struct hook_job *j);
static int on_park_timer(sd_event_source *s, uint64_t usec, void *userdata);

/* On the main thread, once a worker is done (or, cancelled, when
 * pcinumad stops: then only freed); or parked, when its decision says it
 * waits for a define (park()). */
static void hook_job_complete(struct worker_job *w) {
        struct hook_job *j = (struct hook_job *) w;
        struct manager *m = j->m;
        bool cancelled = w->cancelled;
        if (!cancelled && j->define_matters && park(m, j) == 0)
                return;         /* decided again once the define comes */
        if (!cancelled) {
                hook_job_apply(j);
                if (j->conn)
                        server_reply(j->conn, TAKE_PTR(j->frame), j->frame_len);
        }
        hook_job_free(j);       /* and w with it */
        /* A worker's job is a large document (a 1 MiB domain's DOM is
         * about 10 MiB), whose freed pages malloc would keep.  Once the
         * workers are idle they go back to the system: one trim per burst
         * of large requests (tens of ms after one of 50 MiB), never for an
         * ordinary request. */
        if (!cancelled && workers_idle(m->workers))
                (void) malloc_trim(0);
}

/* The server's: connection j->conn is closed while a worker decides j. */
static void manager_job_detach(void *userdata, struct hook_job *j) {
        j->conn = NULL;
}

/* A hook request the workers cannot take now (err: -EBUSY, when
 * WORKERS_LARGE_QUEUED large ones wait; else no thread could be started):
 * an error answer at once, which the hook treats as a daemon that cannot
 * give a verdict (on_unreachable), rather than a wait the hook would time
 * out on. */
static json_object *answer_busy(struct manager *m, const struct proto_request *req, pid_t peer_pid, int err) {
        struct workers_stats st;
        workers_stats(m->workers, &st);
        _cleanup_free_ char *why = err == -EBUSY
                ? xasprintf("pcinumad is busy: %u requests with a domain XML over %u KiB are being decided and %u wait, "
                            "so this one (%zu KiB) is not taken", st.busy_large, WORKERS_LARGE_BYTES / 1024,
                            st.queued_large, req->xml_len / 1024)
                : xasprintf("pcinumad cannot start its worker threads (%s), so this request (%zu KiB of domain XML) "
                            "is not decided", strerror(-err), req->xml_len / 1024);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", req->argv[0]);
        log_fields_add(&f, "PCINUMA_PHASE", "%s", req->argv[1]);
        log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) peer_pid);
        log_event(LOG_WARNING, PCINUMA_MID_BUSY, &f, "Not deciding %s %s of domain %s: %s", req->argv[1], req->argv[2],
                  req->argv[0], why);
        log_fields_done(&f);
        return proto_response_new_error("%s", why);
}

/* Decide j: at once when its domain XML is small (the answer is returned),
 * else on a worker (NULL is returned, *ret_job is j, and the answer goes
 * through server_reply() when it is done). */
static json_object *hook_job_start(struct manager *m, struct hook_job *j, struct hook_job **ret_job) {
        if (j->req.xml_len <= HOOK_INLINE_MAX) {
                hook_job_decide_memo(j);
                if (j->define_matters && park(m, j) == 0) {
                        *ret_job = j;
                        return NULL;
                }
                json_object *resp = hook_job_answer(j);
                hook_job_apply(j);
                hook_job_free(j);
                return resp;
        }
        int r = workers_submit(m->workers, &j->work);
        if (r < 0) {
                json_object *resp = answer_busy(m, &j->req, j->peer_pid, r);
                metrics_request(m->metrics, "hook", now_usec(CLOCK_MONOTONIC) - j->t0);
                hook_job_free(j);
                return resp;
        }
        *ret_job = j;
        return NULL;
}

/* A prepare call of a domain that is transient at the gate, but that the
 * watcher reported undefined moments ago, may come from a client that
 * undefines and defines it right before each start, with the define's
 * event not yet through the watcher: libvirt orders nothing between its
 * events and its hook calls.  When its answer depends on that
 * (j->define_matters: restart_define_matters(), restart.h), such a call
 * waits for the define, at most RESTART_REDEFINE_WAIT_USEC, off the main
 * loop's path: the server keeps the connection waiting, as for a worker's
 * job.  Its decision is dropped, to be made again when it is unparked.
 * Returns 0 if j was parked, a negative errno if it could not be (then j
 * is answered as decided). */
static int park(struct manager *m, struct hook_job *j) {
        int r = sd_event_add_time_relative(m->event, &j->park_timer, CLOCK_MONOTONIC, RESTART_REDEFINE_WAIT_USEC, 0,
                                           on_park_timer, j);
        if (r < 0)
                return r;
        decision_done(&j->d);
        j->log = NULL;
        j->define_matters = false;
        free(j->frame);
        j->frame = NULL;
        j->park_next = m->parked;
        m->parked = j;
        log_msg(LOG_DEBUG, "Start of domain %s: transient at the gate but undefined moments ago, and its verdict "
                "depends on that; waiting up to %llu ms for its define",
                j->req.argv[0], (unsigned long long) (RESTART_REDEFINE_WAIT_USEC / 1000));
        return 0;
}

/* Take j off the parked list, compute its context again (the define may
 * have come) and decide it; its answer goes to its connection, if the
 * client is still there. */
static void unpark(struct manager *m, struct hook_job *j) {
        for (struct hook_job **p = &m->parked; *p; p = &(*p)->park_next)
                if (*p == j) {
                        *p = j->park_next;
                        break;
                }
        j->park_timer = sd_event_source_disable_unref(j->park_timer);
        hook_context_done(&j->ctx);
        hook_context_fill(m, &j->req, &j->ctx);
        struct hook_job *queued = NULL;
        struct conn *c = j->conn;
        _cleanup_json_ json_object *resp = hook_job_start(m, j, &queued);
        if (queued || !c)
                return;         /* a worker answers it; or nobody waits */
        char *frame = NULL;
        size_t len = 0;
        if (frame_encode(resp, &frame, &len) < 0)
                frame = NULL;
        server_reply(c, frame, len);
}

static int on_park_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        (void) s;
        (void) usec;
        struct hook_job *j = userdata;
        log_msg(LOG_DEBUG, "Start of domain %s: no define came within %llu ms; deciding it as transient",
                j->req.argv[0], (unsigned long long) (RESTART_REDEFINE_WAIT_USEC / 1000));
        /* Undefined for good, most likely: the next start is not held. */
        if (j->ctx.decide.uuid)
                restart_define_missed(&j->m->restarts, j->ctx.decide.uuid);
        unpark(j->m, j);
        return 0;
}

/* pcinumad stops: the parked calls are dropped undecided (their
 * connections are gone with the server). */
static void drop_parked(struct manager *m) {
        while (m->parked) {
                struct hook_job *j = m->parked;
                m->parked = j->park_next;
                hook_job_free(j);
        }
}

/* The parked calls of uuid (all of them: NULL), decided now. */
static void unpark_uuid(struct manager *m, const char *uuid) {
        struct hook_job *next;
        for (struct hook_job *j = m->parked; j; j = next) {
                next = j->park_next;
                if (!uuid || (j->ctx.decide.uuid && strcasecmp(j->ctx.decide.uuid, uuid) == 0))
                        unpark(m, j);
        }
}

/* The server's: serve one request (a parsed frame) from connection c.  A
 * status request, a request that is not valid, a hook request with a
 * domain XML of up to 64 KiB, and one the workers cannot take now (busy)
 * are answered at once: the response object is returned.  Any other hook
 * request goes to a worker: NULL is returned, *ret_job is set, and the
 * answer goes to server_reply(c, ...) from the event loop once it is
 * decided, unless the server calls manager_job_detach() first (the client
 * went away). */
static json_object *manager_handle(void *userdata, json_object *request, struct conn *c, uid_t peer_uid,
                                   pid_t peer_pid, struct hook_job **ret_job) {
        struct manager *m = userdata;
        struct proto_request req = {0};
        _cleanup_free_ char *err = NULL;
        *ret_job = NULL;
        uint64_t t0 = now_usec(CLOCK_MONOTONIC);
        m->n_requests++;
        if (proto_request_parse(request, &req, &err) < 0) {
                m->n_errors++;
                metrics_request(m->metrics, "error", now_usec(CLOCK_MONOTONIC) - t0);
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) peer_pid);
                log_event(LOG_WARNING, PCINUMA_MID_PROTOCOL_ERROR, &f, "Bad request from pid %d: %s", (int) peer_pid, err);
                log_fields_done(&f);
                return proto_response_new_error("%s", err);
        }
        if (req.type == PROTO_REQUEST_STATUS) {
                m->n_status++;
                proto_request_done(&req);
                json_object *resp = proto_response_new_status(manager_status(m));
                metrics_request(m->metrics, "status", now_usec(CLOCK_MONOTONIC) - t0);
                return resp;
        }

        m->n_hook++;
        struct hook_job *j = xcalloc(1, sizeof(*j));
        j->work = (struct worker_job) { .run = hook_job_run, .complete = hook_job_complete,
                                  .large = req.xml_len > WORKERS_LARGE_BYTES };
        j->m = m;
        j->conn = c;
        j->t0 = t0;
        j->hostmap = shared_ref(m->hostmap_ref);
        j->policy = shared_ref(m->policy_ref);
        j->peer_pid = peer_pid;
        hook_context_fill(m, &req, &j->ctx);
        j->req = req;
        return hook_job_start(m, j, ret_job);
}

static json_object *json_u64(uint64_t v) {
        return json_object_new_int64((int64_t) v);
}

/* manager_status()'s parts: one object of `pcinumactl status` each. */
static json_object *status_hostmap(struct manager *m, uint64_t now) {
        json_object *h = json_object_new_object();
        json_object_object_add(h, "sysfs_root", json_object_new_string(m->cfg.sysfs_root));
        json_object_object_add(h, "devices", json_u64(m->hostmap->n_devices));
        json_object_object_add(h, "mdevs", json_u64(m->hostmap->n_mdevs));
        json_object_object_add(h, "nodes", json_u64(m->hostmap->n_nodes));
        json_object_object_add(h, "loaded_at_usec", json_u64(m->hostmap_loaded_usec));
        json_object_object_add(h, "age_sec", json_u64((now - m->hostmap_loaded_usec) / 1000000u));
        json_object_object_add(h, "generation", json_u64(m->hostmap_generation));
        json_object_object_add(h, "udev", json_object_new_boolean(m->monitor != NULL));
        json_object *w = json_object_new_array();
        for (size_t i = 0; i < m->hostmap->n_warnings; i++)
                json_object_array_add(w, json_object_new_string(m->hostmap->warnings[i]));
        json_object_object_add(h, "warnings", w);
        json_object_object_add(h, "warnings_not_listed", json_u64(m->hostmap->n_warnings_dropped));
        return h;
}

static json_object *status_policy(struct manager *m) {
        json_object *p = json_object_new_object();
        json_object_object_add(p, "file", json_object_new_string(m->cfg.policy_file));
        json_object_object_add(p, "from_file", json_object_new_boolean(m->policy_from_file));
        json_object_object_add(p, "loaded_at_usec", json_u64(m->policy_loaded_usec));
        json_object_object_add(p, "default", json_object_new_string(policy_mode_to_string(m->policy->def.mode)));
        json_object_object_add(p, "rules", json_u64(m->policy->n_rules));
        json_object_object_add(p, "last_error", m->policy_error ? json_object_new_string(m->policy_error) : NULL);
        return p;
}

/* The server counts the requests it refused before they reached
 * manager_handle(): each is a request and an error. */
static json_object *status_requests(struct manager *m) {
        json_object *r = json_object_new_object();
        struct server_stats ss;
        server_stats(m->server, &ss);
        json_object_object_add(r, "total", json_u64(m->n_requests + ss.n_bad));
        json_object_object_add(r, "hook", json_u64(m->n_hook));
        json_object_object_add(r, "status", json_u64(m->n_status));
        json_object_object_add(r, "errors", json_u64(m->n_errors + ss.n_bad));
        json_object_object_add(r, "rejected_peers", json_u64(ss.n_rejected));
        json_object_object_add(r, "connections", json_u64(ss.n_connections));
        return r;
}

/* The memo of prepare answers: how many it gave, how many it keeps. */
static json_object *status_memo(struct manager *m) {
        json_object *mo = json_object_new_object();
        json_object_object_add(mo, "answers", json_u64(m->memo.hits));
        json_object_object_add(mo, "kept", json_u64(m->memo.n));
        return mo;
}

static json_object *status_rechecks(struct manager *m) {
        json_object *rc = json_object_new_object();
        json_object_object_add(rc, "domains_known", json_u64(m->cache.n));
        json_object_object_add(rc, "cache_max", json_u64(m->cache.max));
        json_object_object_add(rc, "cache_overflowed", json_object_new_boolean(m->cache.overflowed));
        json_object_object_add(rc, "removals_held", json_u64(m->holds.n));
        json_object_object_add(rc, "plans", json_u64(m->n_plans));
        json_object_object_add(rc, "domain_rechecks", json_u64(m->n_recheck_domains));
        json_object_object_add(rc, "full_rechecks", json_u64(m->n_recheck_all));
        json_object_object_add(rc, "logged_once", json_u64(m->n_logged_once));
        return rc;
}

static json_object *status_restarts(struct manager *m) {
        const struct restart_state *rs = &m->restarts;
        json_object *rt = json_object_new_object();
        json_object_object_add(rt, "window_ms", json_u64(m->policy->restart_window_ms));
        json_object_object_add(rt, "persistent_domains", rs->known ? json_u64(rs->n_persistent) : NULL);
        json_object_object_add(rt, "requested", json_u64(rs->n_requested));
        for (int i = 0; i < _WPROTO_OUTCOME_MAX; i++)
                json_object_object_add(rt, wproto_outcome_to_string((enum wproto_outcome) i), json_u64(rs->n_outcome[i]));
        json_object_object_add(rt, "unplanned_us_sum", json_u64(rs->unplanned_us_sum));
        json_object_object_add(rt, "unplanned_us_max", json_u64(rs->unplanned_us_max));
        json_object_object_add(rt, "total_us_sum", json_u64(rs->total_us_sum));
        json_object_object_add(rt, "total_us_max", json_u64(rs->total_us_max));
        return rt;
}

static json_object *status_workers(struct manager *m) {
        struct workers_stats ws;
        workers_stats(m->workers, &ws);
        json_object *wk = json_object_new_object();
        json_object_object_add(wk, "threads", json_u64(ws.threads_wanted));
        json_object_object_add(wk, "started", json_u64(ws.threads));
        json_object_object_add(wk, "busy", json_u64(ws.busy));
        json_object_object_add(wk, "queued", json_u64(ws.queued));
        json_object_object_add(wk, "completed", json_u64(ws.completed));
        json_object_object_add(wk, "busy_large", json_u64(ws.busy_large));
        json_object_object_add(wk, "queued_large", json_u64(ws.queued_large));
        json_object_object_add(wk, "refused_busy", json_u64(ws.refused));
        json_object_object_add(wk, "longest_run_ms", json_u64(ws.longest_run_usec / 1000));
        json_object_object_add(wk, "longest_wait_ms", json_u64(ws.longest_wait_usec / 1000));
        return wk;
}

json_object *manager_status(struct manager *m) {
        uint64_t now = now_usec(CLOCK_REALTIME);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "version", json_object_new_string(PCINUMA_VERSION));
        json_object_object_add(o, "pid", json_object_new_int((int) getpid()));
        json_object_object_add(o, "uptime_sec", json_u64((now_usec(CLOCK_MONOTONIC) - m->start_mono) / 1000000u));
        json_object_object_add(o, "socket", json_object_new_string(m->cfg.socket_path));
        json_object_object_add(o, "libvirt_uri", json_object_new_string(m->cfg.libvirt_uri));
        json_object_object_add(o, "libvirt", m->watcher ? watcher_link_status(m->watcher) : NULL);
        json_object_object_add(o, "hostmap", status_hostmap(m, now));
        json_object_object_add(o, "policy", status_policy(m));
        json_object_object_add(o, "requests", status_requests(m));
        json_object_object_add(o, "prepare_memo", status_memo(m));
        json_object_object_add(o, "rechecks", status_rechecks(m));
        json_object_object_add(o, "restarts", status_restarts(m));
        json_object_object_add(o, "workers", status_workers(m));

        json_object *v = json_object_new_object();
        for (int i = 0; i < _DECIDE_VERDICT_MAX; i++)
                json_object_object_add(v, decide_verdict_to_string((enum decide_verdict) i), json_u64(m->n_verdict[i]));
        json_object_object_add(o, "verdicts", v);
        return o;
}

/* Keep what this plan tells about the domain (recheck.h), and log a skip
 * or a refusal once per change: the watcher asks again after every change
 * that touches the domain, and the same "not planned: ..." line at notice
 * priority each time would bury the one that matters. */
static void remember(struct manager *m, const struct engine_result *r, struct redefine_decision *dec) {
        const struct domain *d = r->base;
        if (!d->uuid)
                return;
        _cleanup_free_ char *key = recheck_settings_key(&r->settings, m->policy);
        bool created = false;
        struct recheck_entry *e = recheck_cache_update(&m->cache, d->uuid, d, m->hostmap, key, &created);
        if (redefine_said_before(dec, e->summary, created)) {
                dec->prio = LOG_DEBUG;
                m->n_logged_once++;
        }
        free(e->summary);
        e->summary = dec->summary ? xstrdup(dec->summary) : NULL;
}

/* The journal fields of a plan that define and restart both log: the
 * domain, its UUID (if any), the phase, the policy, the verdict, each
 * device's host node and guest cell, and the path fidelity. */
static void plan_fields(struct log_fields *f, const struct engine_result *r, const char *uuid, const char *phase,
                        const char *verdict) {
        const struct domain *d = r->base;
        log_fields_add(f, "PCINUMA_DOMAIN", "%s", d->name ? d->name : "");
        if (uuid)
                log_fields_add(f, "PCINUMA_UUID", "%s", uuid);
        log_fields_add(f, "PCINUMA_PHASE", "%s", phase);
        log_fields_add(f, "PCINUMA_POLICY", "%s", policy_mode_to_string(r->settings.mode));
        log_fields_add(f, "PCINUMA_VERDICT", "%s", verdict);
        const struct plan *pl = r->plan;
        for (size_t i = 0; i < pl->n_devices; i++) {
                log_fields_add(f, "PCINUMA_DEVICE", "%s", pl->devices[i].name);
                log_fields_add(f, "PCINUMA_HOST_NODE", "%d", pl->devices[i].host_node);
                log_fields_add(f, "PCINUMA_GUEST_CELL", "%d", pl->devices[i].cell);
        }
        planner_fidelity(r->plan);
        log_fidelity(f, r->plan);
}

/* The decision itself is redefine_decide()'s; this adds the journal
 * fields and the recheck cache. */
static void manager_plan_redefine(void *userdata, const char *xml, size_t len, struct redefine_plan *ret) {
        struct manager *m = userdata;
        struct redefine_plan p = {0};
        struct redefine_decision dec;
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;

        m->n_plans++;

        if (engine_plan(xml, len, m->hostmap, m->policy, NULL, &r, &err) < 0) {
                redefine_decide(NULL, err, &dec);
                p.prio = dec.prio;
                p.summary = TAKE_PTR(dec.summary);
                *ret = p;
                return;
        }
        const struct domain *d = r->base;
        const struct plan *pl = r->plan;
        plan_fields(&p.fields, r, d->uuid, "define", r->reverted ? "revert" : plan_verdict_to_string(r->verdict));
        if (r->stale_mark) {
                log_fields_add(&p.fields, "PCINUMA_STALE_MARK", "%s", r->stale_mark);
                metrics_stale_mark(m->metrics, "define");
        }
        /* A device the mark cannot place for migration (the policy's own
         * migration: refuse needs no word). */
        _cleanup_free_ char *not_migratable = NULL;
        if (r->verdict == PLAN_APPLY && r->settings.migration_same_topology && !mark_migratable(pl, d, &not_migratable))
                log_fields_add(&p.fields, "PCINUMA_NOT_MIGRATABLE", "%s", not_migratable);

        redefine_decide(r, NULL, &dec);
        remember(m, r, &dec);
        p.redefine = dec.redefine;
        p.out_xml = TAKE_PTR(dec.out_xml);
        p.summary = TAKE_PTR(dec.summary);
        p.prio = dec.prio;
        *ret = p;
}

static void manager_forget_domain(void *userdata, const char *uuid) {
        struct manager *m = userdata;
        if (recheck_cache_forget(&m->cache, uuid))
                log_msg(LOG_DEBUG, "Domain %s is no longer defined; forgotten", uuid);
}

static void manager_persistent_all(void *userdata, const struct wproto_domains *d) {
        struct manager *m = userdata;
        restart_set_persistent(&m->restarts, d->persistent, d->n);
        log_msg(LOG_DEBUG, "libvirt holds %zu persistent domains", m->restarts.n_persistent);
}

static void manager_persistent_one(void *userdata, const char *uuid, bool persistent) {
        struct manager *m = userdata;
        restart_set_one(&m->restarts, uuid, persistent, now_usec(CLOCK_MONOTONIC));
        if (persistent)
                unpark_uuid(m, uuid);
}

static void manager_persistence_lost(void *userdata) {
        struct manager *m = userdata;
        restart_forget_persistence(&m->restarts);
        unpark_uuid(m, NULL);
}

static void manager_plan_restart(void *userdata, const char *uuid, const char *xml, size_t len,
                                 struct redefine_plan *ret) {
        struct manager *m = userdata;
        struct redefine_plan p = { .prio = LOG_INFO };
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;

        if (engine_plan(xml, len, m->hostmap, m->policy, NULL, &r, &err) < 0) {
                log_fields_add(&p.fields, "PCINUMA_UUID", "%s", uuid);
                p.summary = xasprintf("its live XML cannot be planned: %s", err);
                p.prio = LOG_WARNING;
                *ret = p;
                return;
        }
        const struct domain *d = r->base;
        plan_fields(&p.fields, r, uuid, "restart", plan_verdict_to_string(r->verdict));
        const struct plan *pl = r->plan;

        if (!d->uuid || strcasecmp(d->uuid, uuid) != 0) {
                p.summary = xasprintf("its live XML names another UUID (%s)", d->uuid ? d->uuid : "none");
                p.prio = LOG_WARNING;
        } else if (r->verdict == PLAN_APPLY && !r->already_planned) {
                p.redefine = true;
                p.out_xml = xstrdup(r->xml);
                p.summary = xasprintf("%s", r->mismatch ? r->mismatch : "its layout differs from the plan");
                restart_note_own(&m->restarts, uuid, now_usec(CLOCK_MONOTONIC));
        } else if (r->verdict == PLAN_APPLY)
                p.summary = xstrdup("it runs its plan already");
        else if (r->verdict == PLAN_REFUSED) {
                p.summary = xasprintf("the policy refuses its plan now: %s", pl->reason ? pl->reason : "refused");
                p.prio = LOG_WARNING;
        } else
                p.summary = xasprintf("there is nothing to plan now (%s)", plan_verdict_to_string(r->verdict));
        *ret = p;
}

static void manager_restart_done(void *userdata, const struct wproto_restarted *r) {
        struct manager *m = userdata;
        restart_done(&m->restarts, r);
        if (r->outcome == WPROTO_OUTCOME_RESTARTED || r->outcome == WPROTO_OUTCOME_FALLBACK)
                metrics_restart(m->metrics, r->outcome == WPROTO_OUTCOME_RESTARTED);
        /* Now its persistent definition, if any, gets its plan. */
        if (m->watcher)
                watcher_link_recheck_domain(m->watcher, r->uuid);
}

/* The status object `pcinumactl status` prints (manager_status()): the
 * host map, the policy, the requests, the memo, the rechecks, the
 * restarts, the workers and the verdicts, read from the manager and its
 * sub-objects' own counters.  It reads; it changes nothing. */
#include "manager-internal.h"

#include <time.h>
#include <unistd.h>

#include "server.h"
#include "watcher-link.h"
#include "watcher-protocol.h"
#include "workers.h"

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
        json_object_object_add(rt, "define_waits", json_u64(rs->n_define_waits));
        json_object_object_add(rt, "define_waits_in_vain", json_u64(rs->n_define_waits_in_vain));
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

/* What a host map or policy change makes pcinumad ask the watcher to
 * recheck: only the domains it touches (the recheck cache, recheck.h),
 * with a grace period for devices that leave sysfs briefly.  The manager
 * calls act_on_changes() after each reload or rescan. */
#include "manager-internal.h"

#include <time.h>

#include "watcher-link.h"

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
void act_on_changes(struct manager *m, const struct hostmap *old, bool policy_changed, const char *why) {
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

int on_hold_timer(sd_event_source *s, uint64_t usec, void *userdata) {
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

/* pcinumad's Prometheus metrics (metrics.h): the numbers, their text form,
 * and the file node_exporter reads. */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "fileio.h"
#include "util.h"

/* At most one write a second. */
#define WRITE_INTERVAL_USEC (1000 * 1000)

/* The request latency histogram's upper bounds, in seconds: a hook
 * answer takes about a millisecond (docs/performance.md); libvirt waits
 * for it, so the slow tail is what matters. */
static const double buckets[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 };
#define N_BUCKETS ELEMENTSOF(buckets)

static const char *const request_types[] = { "hook", "status", "error" };
static const char *const rebuild_triggers[] = { "start", "reload", "udev" };

struct histogram {
        uint64_t le[N_BUCKETS];         /* cumulative as written: each counted in its own bucket here */
        uint64_t count;
        double sum;
};

struct verdict_count {
        char *phase, *policy, *verdict;
        uint64_t n;
};

struct metrics {
        char *path;
        sd_event_source *timer;
        void (*snapshot)(void *userdata, struct metrics_state *ret);
        void *userdata;
        uint64_t last_write;            /* CLOCK_MONOTONIC usec; 0: never */
        bool armed;
        bool failing;                   /* the last write failed (said once) */

        struct verdict_count *verdicts;
        size_t n_verdicts;
        struct histogram requests[ELEMENTSOF(request_types)];
        uint64_t stale_define, stale_prepare;
        uint64_t rebuilds[ELEMENTSOF(rebuild_triggers)][2];    /* [trigger][ok] */
        uint64_t policy_reloads[2];                            /* [ok] */
        uint64_t restarts[2];                                  /* [planned] */
        bool policy_ok, hostmap_ok;     /* the last reload's */
        double policy_at, hostmap_at;   /* Unix time of the last attempt */
        uint64_t writes;
        double start_time;
};

static double now_real(void) {
        return (double) now_usec(CLOCK_REALTIME) / 1e6;
}

/* --- the text -------------------------------------------------------- */

static void family(struct strbuf *b, const char *name, const char *type, const char *help) {
        strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped. */
static void label(struct strbuf *b, const char *name, const char *value, bool first) {
        strbuf_printf(b, "%s%s=\"", first ? "" : ",", name);
        for (const char *c = value; *c; c++) {
                if (*c == '\\' || *c == '"')
                        strbuf_printf(b, "\\%c", *c);
                else if (*c == '\n')
                        strbuf_append(b, "\\n");
                else
                        strbuf_appendn(b, c, 1);
        }
        strbuf_append(b, "\"");
}

static void sample_u(struct strbuf *b, const char *name, uint64_t v) {
        strbuf_printf(b, "%s %llu\n", name, (unsigned long long) v);
}

static void sample_f(struct strbuf *b, const char *name, double v) {
        strbuf_printf(b, "%s %.6f\n", name, v);
}

/* The hook's verdicts and the request latency histogram. */
static void render_requests(struct strbuf *b, const struct metrics *mt) {
        family(b, "pcinuma_hook_verdicts_total", "counter",
               "Hook calls answered, by libvirt hook phase, the pcinuma policy in force and the verdict.");
        for (size_t i = 0; i < mt->n_verdicts; i++) {
                const struct verdict_count *v = &mt->verdicts[i];
                strbuf_append(b, "pcinuma_hook_verdicts_total{");
                label(b, "phase", v->phase, true);
                label(b, "policy", v->policy, false);
                label(b, "verdict", v->verdict, false);
                strbuf_printf(b, "} %llu\n", (unsigned long long) v->n);
        }

        family(b, "pcinuma_request_duration_seconds", "histogram",
               "Time pcinumad took to answer a request on its hook socket, by request type.");
        for (size_t t = 0; t < ELEMENTSOF(request_types); t++) {
                const struct histogram *h = &mt->requests[t];
                uint64_t cum = 0;
                for (size_t k = 0; k < N_BUCKETS; k++) {
                        cum += h->le[k];
                        strbuf_printf(b, "pcinuma_request_duration_seconds_bucket{type=\"%s\",le=\"%g\"} %llu\n",
                                      request_types[t], buckets[k], (unsigned long long) cum);
                }
                strbuf_printf(b, "pcinuma_request_duration_seconds_bucket{type=\"%s\",le=\"+Inf\"} %llu\n",
                              request_types[t], (unsigned long long) h->count);
                strbuf_printf(b, "pcinuma_request_duration_seconds_sum{type=\"%s\"} %.9f\n", request_types[t], h->sum);
                strbuf_printf(b, "pcinuma_request_duration_seconds_count{type=\"%s\"} %llu\n", request_types[t],
                              (unsigned long long) h->count);
        }
}

/* The watcher's redefinitions, restarts into the plan, stale marks. */
static void render_definitions(struct strbuf *b, const struct metrics *mt, const struct metrics_state *st) {
        family(b, "pcinuma_redefinitions_total", "counter",
               "Persistent definitions pcinuma-watcher redefined with their plan, since pcinumad started.");
        sample_u(b, "pcinuma_redefinitions_total", st->redefinitions);
        family(b, "pcinuma_redefinition_failures_total", "counter",
               "Redefinitions libvirt refused (the definition was left as it was).");
        sample_u(b, "pcinuma_redefinition_failures_total", st->redefinition_failures);
        family(b, "pcinuma_redefinition_conflicts_total", "counter",
               "Redefinitions not made because the definition changed meanwhile (a user's edit won).");
        sample_u(b, "pcinuma_redefinition_conflicts_total", st->conflicts);
        family(b, "pcinuma_restarts_into_plan_total", "counter",
               "Domains restarted into their plan after an unplanned start, by result (planned, or failed: started as asked).");
        strbuf_printf(b, "pcinuma_restarts_into_plan_total{result=\"planned\"} %llu\n", (unsigned long long) mt->restarts[1]);
        strbuf_printf(b, "pcinuma_restarts_into_plan_total{result=\"failed\"} %llu\n", (unsigned long long) mt->restarts[0]);
        family(b, "pcinuma_stale_marks_total", "counter",
               "Plans that found a domain's pcinuma mark stale, by where: define (the watcher) or prepare (the hook).");
        strbuf_printf(b, "pcinuma_stale_marks_total{phase=\"define\"} %llu\n", (unsigned long long) mt->stale_define);
        strbuf_printf(b, "pcinuma_stale_marks_total{phase=\"prepare\"} %llu\n", (unsigned long long) mt->stale_prepare);
}

/* Reloads of the host map and the policy, and what is loaded now. */
static void render_state(struct strbuf *b, const struct metrics *mt, const struct metrics_state *st) {
        family(b, "pcinuma_hostmap_rebuilds_total", "counter",
               "Host map rebuilds from sysfs, by trigger (start, reload: SIGHUP, udev) and result.");
        for (size_t t = 0; t < ELEMENTSOF(rebuild_triggers); t++)
                for (int ok = 1; ok >= 0; ok--)
                        strbuf_printf(b, "pcinuma_hostmap_rebuilds_total{trigger=\"%s\",result=\"%s\"} %llu\n",
                                      rebuild_triggers[t], ok ? "success" : "failure",
                                      (unsigned long long) mt->rebuilds[t][ok]);
        family(b, "pcinuma_policy_reloads_total", "counter",
               "Policy reloads (SIGHUP), by result; a failed one keeps the last good policy.");
        strbuf_printf(b, "pcinuma_policy_reloads_total{result=\"success\"} %llu\n", (unsigned long long) mt->policy_reloads[1]);
        strbuf_printf(b, "pcinuma_policy_reloads_total{result=\"failure\"} %llu\n", (unsigned long long) mt->policy_reloads[0]);
        family(b, "pcinuma_last_reload_success", "gauge",
               "Whether the last load of the policy or of the host map succeeded (1) or failed (0).");
        strbuf_printf(b, "pcinuma_last_reload_success{what=\"policy\"} %d\n", mt->policy_ok);
        strbuf_printf(b, "pcinuma_last_reload_success{what=\"hostmap\"} %d\n", mt->hostmap_ok);
        family(b, "pcinuma_last_reload_timestamp_seconds", "gauge",
               "When the policy or the host map was last loaded or tried, in seconds since the Unix epoch.");
        strbuf_printf(b, "pcinuma_last_reload_timestamp_seconds{what=\"policy\"} %.6f\n", mt->policy_at);
        strbuf_printf(b, "pcinuma_last_reload_timestamp_seconds{what=\"hostmap\"} %.6f\n", mt->hostmap_at);

        family(b, "pcinuma_hostmap_devices", "gauge", "PCI devices in the host map.");
        sample_u(b, "pcinuma_hostmap_devices", st->hostmap_devices);
        family(b, "pcinuma_hostmap_nodes", "gauge", "NUMA nodes in the host map.");
        sample_u(b, "pcinuma_hostmap_nodes", st->hostmap_nodes);
        family(b, "pcinuma_domains_known", "gauge", "Domains pcinumad has planned and remembers (the recheck cache).");
        sample_u(b, "pcinuma_domains_known", st->domains_known);
        family(b, "pcinuma_watcher_connected", "gauge",
               "Whether pcinuma-watcher is connected to libvirt (1), not (0); absent with --libvirt-uri none.");
        if (st->watcher)
                strbuf_printf(b, "pcinuma_watcher_connected %d\n", st->watcher_connected);
}

char *metrics_render(struct metrics *mt) {
        struct metrics_state st = {0};
        if (mt->snapshot)
                mt->snapshot(mt->userdata, &st);
        struct strbuf b = {0};
        family(&b, "pcinuma_build_info", "gauge", "pcinumad's version, as a label; always 1.");
        strbuf_append(&b, "pcinuma_build_info{");
        label(&b, "version", PCINUMA_VERSION, true);
        strbuf_append(&b, "} 1\n");
        family(&b, "pcinuma_start_time_seconds", "gauge", "When pcinumad started, in seconds since the Unix epoch.");
        sample_f(&b, "pcinuma_start_time_seconds", mt->start_time);
        render_requests(&b, mt);
        render_definitions(&b, mt, &st);
        render_state(&b, mt, &st);
        family(&b, "pcinuma_metrics_writes_total", "counter", "Times pcinumad wrote this file, this one included.");
        sample_u(&b, "pcinuma_metrics_writes_total", mt->writes + 1);
        return strbuf_steal(&b);
}

/* --- the file -------------------------------------------------------- */

static int write_file(struct metrics *mt) {
        _cleanup_free_ char *text = metrics_render(mt);
        _cleanup_free_ char *tmp = xasprintf("%s.tmp", mt->path);
        /* A file of our own, made here: whatever stood at tmp (a link to
         * another file, say, in a folder node_exporter's user may write)
         * goes first, and O_EXCL does not open an existing one. */
        if (unlink(tmp) < 0 && errno != ENOENT)
                return -errno;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return -errno;
        /* node_exporter runs as another user: readable by all, whatever
         * the unit's UMask. */
        int r = fchmod(fd, 0644) < 0 ? -errno : write_full_fd(fd, text, strlen(text));
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, mt->path) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlink(tmp);
                return r;
        }
        mt->writes++;
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        struct metrics *mt = userdata;
        mt->armed = false;
        mt->last_write = now_usec(CLOCK_MONOTONIC);
        int r = write_file(mt);
        /* Said once, not at every change while it lasts (a hook call a
         * second would make a warning a second). */
        if (r < 0 && !mt->failing)
                log_errno(LOG_WARNING, r, "Failed to write the metrics file %s: %m; ignoring, and not saying so again "
                          "until a write succeeds", mt->path);
        else if (r >= 0 && mt->failing)
                log_msg(LOG_NOTICE, "Wrote the metrics file %s again", mt->path);
        mt->failing = r < 0;
        return 0;
}

void metrics_changed(struct metrics *mt) {
        if (!mt || !mt->path || mt->armed)
                return;
        uint64_t at = mt->last_write ? mt->last_write + WRITE_INTERVAL_USEC : 0;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        int r = sd_event_source_set_time(mt->timer, at > now ? at : now);
        if (r >= 0)
                r = sd_event_source_set_enabled(mt->timer, SD_EVENT_ONESHOT);
        if (r < 0) {
                log_errno(LOG_WARNING, r, "Failed to schedule a write of the metrics file: %m, ignoring");
                return;
        }
        mt->armed = true;
}

int metrics_new(const char *path, sd_event *e, void (*snapshot)(void *userdata, struct metrics_state *ret), void *userdata,
                struct metrics **ret) {
        struct metrics *mt = xcalloc(1, sizeof(*mt));
        mt->path = path ? xstrdup(path) : NULL;
        mt->snapshot = snapshot;
        mt->userdata = userdata;
        mt->start_time = now_real();
        mt->policy_ok = mt->hostmap_ok = true;
        mt->policy_at = mt->hostmap_at = mt->start_time;
        if (mt->path) {
                int r = sd_event_add_time(e, &mt->timer, CLOCK_MONOTONIC, 0, 1000, on_timer, mt);
                if (r < 0) {
                        metrics_free(mt);
                        return r;
                }
                (void) sd_event_source_set_description(mt->timer, "metrics");
                (void) sd_event_source_set_enabled(mt->timer, SD_EVENT_OFF);
                metrics_changed(mt);
        }
        *ret = mt;
        return 0;
}

struct metrics *metrics_free(struct metrics *mt) {
        if (!mt)
                return NULL;
        sd_event_source_disable_unref(mt->timer);
        /* Gone with pcinumad: node_exporter would serve the last values
         * for ever (alert on absent(pcinuma_build_info)). */
        if (mt->path && unlink(mt->path) < 0 && errno != ENOENT)
                log_errno(LOG_WARNING, -errno, "Failed to remove the metrics file %s: %m, ignoring", mt->path);
        for (size_t i = 0; i < mt->n_verdicts; i++) {
                free(mt->verdicts[i].phase);
                free(mt->verdicts[i].policy);
                free(mt->verdicts[i].verdict);
        }
        free(mt->verdicts);
        free(mt->path);
        free(mt);
        return NULL;
}

/* --- counting -------------------------------------------------------- */

/* A phase libvirt does not document is counted as "other": the labels of
 * a metric must stay a small set, whatever a hook caller sends. */
static const char *known_phase(const char *phase) {
        static const char *const phases[] = { "prepare", "start", "started", "stopped", "release", "migrate",
                                              "restore", "reconnect", "attach" };
        for (size_t i = 0; i < ELEMENTSOF(phases); i++)
                if (phase && streq(phase, phases[i]))
                        return phases[i];
        return "other";
}

void metrics_verdict(struct metrics *mt, const char *phase, const char *policy, const char *verdict) {
        if (!mt)
                return;
        phase = known_phase(phase);
        policy = policy ? policy : "none";
        struct verdict_count *v = NULL;
        for (size_t i = 0; i < mt->n_verdicts && !v; i++)
                if (streq(mt->verdicts[i].phase, phase) && streq(mt->verdicts[i].policy, policy) &&
                    streq(mt->verdicts[i].verdict, verdict))
                        v = &mt->verdicts[i];
        if (!v) {
                v = GROW(mt->verdicts, mt->n_verdicts);
                *v = (struct verdict_count) { .phase = xstrdup(phase), .policy = xstrdup(policy), .verdict = xstrdup(verdict) };
        }
        v->n++;
        metrics_changed(mt);
}

void metrics_request(struct metrics *mt, const char *type, uint64_t usec) {
        if (!mt)
                return;
        size_t t = ELEMENTSOF(request_types) - 1;
        for (size_t i = 0; i < ELEMENTSOF(request_types); i++)
                if (streq(type, request_types[i]))
                        t = i;
        double s = (double) usec / 1e6;
        struct histogram *h = &mt->requests[t];
        for (size_t k = 0; k < N_BUCKETS; k++)
                if (s <= buckets[k]) {
                        h->le[k]++;
                        break;
                }
        h->count++;
        h->sum += s;
        metrics_changed(mt);
}

void metrics_stale_mark(struct metrics *mt, const char *phase) {
        if (!mt)
                return;
        if (streq(phase, "define"))
                mt->stale_define++;
        else
                mt->stale_prepare++;
        metrics_changed(mt);
}

void metrics_hostmap_rebuild(struct metrics *mt, const char *trigger, bool ok) {
        if (!mt)
                return;
        size_t t = 0;
        for (size_t i = 0; i < ELEMENTSOF(rebuild_triggers); i++)
                if (streq(trigger, rebuild_triggers[i]))
                        t = i;
        mt->rebuilds[t][ok]++;
        mt->hostmap_ok = ok;
        mt->hostmap_at = now_real();
        metrics_changed(mt);
}

void metrics_policy_reload(struct metrics *mt, bool ok) {
        if (!mt)
                return;
        mt->policy_reloads[ok]++;
        mt->policy_ok = ok;
        mt->policy_at = now_real();
        metrics_changed(mt);
}

void metrics_restart(struct metrics *mt, bool planned) {
        if (!mt)
                return;
        mt->restarts[planned]++;
        metrics_changed(mt);
}

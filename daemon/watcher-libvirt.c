/* The libvirt watcher: a worker thread that owns the libvirt connection. */
#include "watcher.h"

#include <fcntl.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <time.h>

#include "log.h"
#include "manager.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
/* A domain redefined this many times within LOOP_WINDOW_SEC means the
 * plan is not idempotent for it (a bug): stop and say so rather than spin. */
#define LOOP_LIMIT 4
#define LOOP_WINDOW_SEC 60

struct plan_request {
        const char *xml;
        size_t len;
        bool done;
        struct redefine_plan result;
};

struct loop_guard {
        char uuid[VIR_UUID_STRING_BUFLEN];
        unsigned count;
        time_t first;
        bool stopped;
};

struct watcher {
        struct manager *m;
        char *uri;
        pthread_t thread;
        bool thread_started;

        /* main -> worker: commands on a pipe the worker's event loop watches */
        int cmd[2];
        /* worker -> main: plan requests, signalled through an eventfd */
        int plan_efd;
        sd_event_source *plan_src;

        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct plan_request *pending;   /* under lock */
        bool quit;                      /* under lock */
        bool exited;                    /* under lock */
        /* status, under lock */
        bool connected;
        uint64_t n_redefined, n_failed;
        char *last_error;

        /* worker thread only */
        virConnectPtr conn;
        int lifecycle_cb;
        int reconnect_timer;
        int process_timer;
        int backoff_ms;
        unsigned failed_attempts;
        char **queue;                   /* UUIDs to look at; "*" = all */
        size_t n_queue;
        struct loop_guard *guards;
        size_t n_guards;
};

static void set_last_error(struct watcher *w, const char *s) {
        pthread_mutex_lock(&w->lock);
        free(w->last_error);
        w->last_error = s ? xstrdup(s) : NULL;
        pthread_mutex_unlock(&w->lock);
}

static void silent_error_func(void *userdata, virErrorPtr err) {
        (void) userdata;
        (void) err;
}

static const char *lv_error(void) {
        const char *m = virGetLastErrorMessage();
        return m ? m : "unknown libvirt error";
}

/* --- main thread: planning on the worker's behalf -------------------- */

static int on_plan_request(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        struct watcher *w = userdata;
        uint64_t v;
        (void) !read(fd, &v, sizeof v);

        pthread_mutex_lock(&w->lock);
        struct plan_request *req = w->pending;
        pthread_mutex_unlock(&w->lock);
        if (!req)
                return 0;
        manager_plan_redefine(w->m, req->xml, req->len, &req->result);
        pthread_mutex_lock(&w->lock);
        req->done = true;
        w->pending = NULL;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        return 0;
}

/* Worker: have the main thread plan xml; false when shutting down. */
static bool plan_on_main(struct watcher *w, const char *xml, struct redefine_plan *ret) {
        struct plan_request req = { .xml = xml, .len = strlen(xml) };
        pthread_mutex_lock(&w->lock);
        if (w->quit) {
                pthread_mutex_unlock(&w->lock);
                return false;
        }
        w->pending = &req;
        pthread_mutex_unlock(&w->lock);
        uint64_t one = 1;
        (void) !write(w->plan_efd, &one, sizeof one);
        pthread_mutex_lock(&w->lock);
        while (!req.done && !w->quit)
                pthread_cond_wait(&w->cond, &w->lock);
        bool ok = req.done;
        if (!ok)
                w->pending = NULL;
        pthread_mutex_unlock(&w->lock);
        if (ok)
                *ret = req.result;
        return ok;
}

/* --- worker thread ------------------------------------------------------ */

static void schedule_processing(struct watcher *w) {
        virEventUpdateTimeout(w->process_timer, 0);
}

static void enqueue(struct watcher *w, const char *uuid) {
        for (size_t i = 0; i < w->n_queue; i++)
                if (streq(w->queue[i], uuid) || streq(w->queue[i], "*"))
                        return;
        *GROW(w->queue, w->n_queue) = xstrdup(uuid);
        schedule_processing(w);
}

static struct loop_guard *guard_for(struct watcher *w, const char *uuid) {
        time_t now = time(NULL);
        for (size_t i = 0; i < w->n_guards; i++)
                if (streq(w->guards[i].uuid, uuid)) {
                        if (now - w->guards[i].first > LOOP_WINDOW_SEC && !w->guards[i].stopped) {
                                w->guards[i].first = now;
                                w->guards[i].count = 0;
                        }
                        return &w->guards[i];
                }
        struct loop_guard *g = GROW(w->guards, w->n_guards);
        snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
        g->first = now;
        return g;
}

static void process_domain(struct watcher *w, virDomainPtr dom) {
        const char *name = virDomainGetName(dom);
        char uuid[VIR_UUID_STRING_BUFLEN] = "";
        (void) virDomainGetUUIDString(dom, uuid);

        if (virDomainIsPersistent(dom) != 1)
                return;   /* transient: the prepare gate handles it */

        /* SECURE: a redefinition must not lose passwords and keys. */
        char *xml = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
        if (!xml) {
                log_msg(LOG_WARNING, "Cannot read the definition of domain %s: %s, ignoring", name, lv_error());
                return;
        }
        /* A definition without our mark is new input from the user: it
         * starts a fresh count for the loop guard below. */
        bool ours = strstr(xml, "urn:pcinuma:topology:1") != NULL;
        struct loop_guard *g = guard_for(w, uuid);
        if (!ours) {
                g->count = 0;
                g->stopped = false;
        }
        struct redefine_plan plan = {0};
        bool ok = plan_on_main(w, xml, &plan);
        free(xml);
        if (!ok)
                return;
        if (!plan.redefine)
                g->count = 0;   /* stable */
        if (!plan.redefine) {
                if (plan.summary)
                        log_msg(plan.prio, "Domain %s: %s", name, plan.summary);
                redefine_plan_done(&plan);
                return;
        }

        if (g->stopped) {
                redefine_plan_done(&plan);
                return;
        }
        /* Only re-plans of our own output count: those must converge at
         * once (plan(dumpxml(plan(x))) is dumpxml(plan(x))). */
        if (ours && ++g->count > LOOP_LIMIT) {
                g->stopped = true;
                log_event(LOG_ERR, PCINUMA_MID_REDEFINE_FAILED, &plan.fields,
                          "Domain %s was re-planned %u times within %d s without settling: "
                          "not redefining it again until pcinumad restarts (please report this as a bug)",
                          name, LOOP_LIMIT, LOOP_WINDOW_SEC);
                redefine_plan_done(&plan);
                return;
        }

        virDomainPtr nd = virDomainDefineXMLFlags(w->conn, plan.out_xml, VIR_DOMAIN_DEFINE_VALIDATE);
        if (!nd) {
                const char *e = lv_error();
                log_fields_add(&plan.fields, "PCINUMA_LIBVIRT_ERROR", "%s", e);
                log_event(LOG_ERR, PCINUMA_MID_REDEFINE_FAILED, &plan.fields,
                          "libvirt rejected the planned definition of domain %s; its definition is unchanged: %s", name, e);
                pthread_mutex_lock(&w->lock);
                w->n_failed++;
                pthread_mutex_unlock(&w->lock);
                _cleanup_free_ char *msg = xasprintf("redefining %s: %s", name, e);
                set_last_error(w, msg);
        } else {
                bool running = virDomainIsActive(dom) == 1;
                log_event(LOG_INFO, PCINUMA_MID_DOMAIN_REDEFINED, &plan.fields, "Domain %s redefined: %s%s", name, plan.summary,
                          running ? " (it is running: the new layout applies at its next start)" : "");
                virDomainFree(nd);
                pthread_mutex_lock(&w->lock);
                w->n_redefined++;
                pthread_mutex_unlock(&w->lock);
        }
        redefine_plan_done(&plan);
}

static void process_queue(int timer, void *opaque) {
        struct watcher *w = opaque;
        virEventUpdateTimeout(timer, -1);
        if (!w->conn) {
                return;   /* processed again after the reconnect lists everything */
        }
        char **queue = w->queue;
        size_t n = w->n_queue;
        w->queue = NULL;
        w->n_queue = 0;
        bool all = false;
        for (size_t i = 0; i < n; i++)
                all = all || streq(queue[i], "*");
        if (all) {
                virDomainPtr *doms = NULL;
                int nd = virConnectListAllDomains(w->conn, &doms, VIR_CONNECT_LIST_DOMAINS_PERSISTENT);
                if (nd < 0)
                        log_msg(LOG_WARNING, "Cannot list libvirt's domains: %s", lv_error());
                for (int i = 0; i < nd; i++) {
                        process_domain(w, doms[i]);
                        virDomainFree(doms[i]);
                }
                free(doms);
        } else {
                for (size_t i = 0; i < n; i++) {
                        virDomainPtr dom = virDomainLookupByUUIDString(w->conn, queue[i]);
                        if (!dom)
                                continue;   /* undefined meanwhile */
                        process_domain(w, dom);
                        virDomainFree(dom);
                }
        }
        for (size_t i = 0; i < n; i++)
                free(queue[i]);
        free(queue);
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque) {
        struct watcher *w = opaque;
        (void) conn;
        (void) detail;
        char uuid[VIR_UUID_STRING_BUFLEN] = "";
        (void) virDomainGetUUIDString(dom, uuid);
        if (event == VIR_DOMAIN_EVENT_STARTED || event == VIR_DOMAIN_EVENT_STOPPED) {
                /* The hook skips the daemon for these phases (they must
                 * cost nothing); the journal still gets the VM's history. */
                bool started = event == VIR_DOMAIN_EVENT_STARTED;
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_DOMAIN", "%s", virDomainGetName(dom));
                log_fields_add(&f, "PCINUMA_UUID", "%s", uuid);
                log_fields_add(&f, "PCINUMA_PHASE", "%s", started ? "started" : "stopped");
                log_event(LOG_INFO, started ? PCINUMA_MID_DOMAIN_STARTED : PCINUMA_MID_DOMAIN_STOPPED, &f, "Domain %s %s",
                          virDomainGetName(dom), started ? "started" : "stopped");
                log_fields_done(&f);
                return 0;
        }
        if (event == VIR_DOMAIN_EVENT_DEFINED && uuid[0])
                enqueue(w, uuid);
        return 0;
}

static void disconnect(struct watcher *w) {
        if (!w->conn)
                return;
        if (w->lifecycle_cb >= 0)
                (void) virConnectDomainEventDeregisterAny(w->conn, w->lifecycle_cb);
        w->lifecycle_cb = -1;
        (void) virConnectClose(w->conn);
        w->conn = NULL;
        pthread_mutex_lock(&w->lock);
        w->connected = false;
        pthread_mutex_unlock(&w->lock);
}

static void on_close(virConnectPtr conn, int reason, void *opaque) {
        struct watcher *w = opaque;
        (void) conn;
        const char *why = reason == VIR_CONNECT_CLOSE_REASON_EOF ? "libvirtd closed the connection"
                        : reason == VIR_CONNECT_CLOSE_REASON_KEEPALIVE ? "libvirtd stopped answering keepalives"
                        : reason == VIR_CONNECT_CLOSE_REASON_ERROR ? "connection error" : "client closed";
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
        log_event(LOG_WARNING, PCINUMA_MID_LIBVIRT_CONNECTION, &f, "Lost the libvirt connection to %s (%s); reconnecting", w->uri, why);
        log_fields_done(&f);
        set_last_error(w, why);
        pthread_mutex_lock(&w->lock);
        w->connected = false;
        pthread_mutex_unlock(&w->lock);
        w->backoff_ms = BACKOFF_MIN_MS;
        virEventUpdateTimeout(w->reconnect_timer, BACKOFF_MIN_MS);
}

static void try_connect(int timer, void *opaque) {
        struct watcher *w = opaque;
        virEventUpdateTimeout(timer, -1);
        /* A connection that died is closed here, outside its callback. */
        disconnect(w);

        virConnectPtr c = virConnectOpen(w->uri);
        if (!c) {
                w->failed_attempts++;
                /* Say it once, then only every tenth time: libvirtd may be
                 * down for a while. */
                if (w->failed_attempts == 1 || w->failed_attempts % 10 == 0) {
                        struct log_fields f = {0};
                        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
                        log_event(LOG_WARNING, PCINUMA_MID_LIBVIRT_CONNECTION, &f,
                                  "Cannot connect to libvirt at %s: %s; retrying in %d ms", w->uri, lv_error(), w->backoff_ms);
                        log_fields_done(&f);
                }
                set_last_error(w, lv_error());
                virEventUpdateTimeout(timer, w->backoff_ms);
                w->backoff_ms = w->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : w->backoff_ms * 2;
                return;
        }
        w->conn = c;
        (void) virConnectSetKeepAlive(c, 5, 3);
        (void) virConnectRegisterCloseCallback(c, on_close, w, NULL);
        w->lifecycle_cb = virConnectDomainEventRegisterAny(c, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                                           VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), w, NULL);
        if (w->lifecycle_cb < 0)
                log_msg(LOG_WARNING, "Cannot register for libvirt domain events at %s: %s; "
                                     "only domains present at connect time are planned", w->uri, lv_error());
        w->backoff_ms = BACKOFF_MIN_MS;
        w->failed_attempts = 0;
        pthread_mutex_lock(&w->lock);
        w->connected = true;
        pthread_mutex_unlock(&w->lock);
        set_last_error(w, NULL);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
        log_event(LOG_INFO, PCINUMA_MID_LIBVIRT_CONNECTION, &f, "Connected to libvirt at %s; checking every persistent domain", w->uri);
        log_fields_done(&f);
        /* Catch up on whatever was defined while we were away. */
        enqueue(w, "*");
}

static void on_command(int watch, int fd, int events, void *opaque) {
        struct watcher *w = opaque;
        char buf[64 + VIR_UUID_STRING_BUFLEN];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        if (n <= 0)
                return;
        buf[n] = 0;
        /* Commands are single lines: "all", "quit" or "uuid <UUID>". */
        for (char *line = buf, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                if (nl)
                        *nl = 0;
                if (streq(line, "all"))
                        enqueue(w, "*");
                else if (strncmp(line, "uuid ", 5) == 0)
                        enqueue(w, line + 5);
        }
}

static void *worker_main(void *arg) {
        struct watcher *w = arg;
        virSetErrorFunc(NULL, silent_error_func);
        int watch = virEventAddHandle(w->cmd[0], VIR_EVENT_HANDLE_READABLE, on_command, w, NULL);
        w->reconnect_timer = virEventAddTimeout(0, try_connect, w, NULL);
        w->process_timer = virEventAddTimeout(-1, process_queue, w, NULL);
        for (;;) {
                pthread_mutex_lock(&w->lock);
                bool quit = w->quit;
                pthread_mutex_unlock(&w->lock);
                if (quit)
                        break;
                if (virEventRunDefaultImpl() < 0)
                        break;
        }
        disconnect(w);
        if (watch >= 0)
                virEventRemoveHandle(watch);
        virEventRemoveTimeout(w->reconnect_timer);
        virEventRemoveTimeout(w->process_timer);
        pthread_mutex_lock(&w->lock);
        w->exited = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

/* --- main thread API ------------------------------------------------------ */

static void send_command(struct watcher *w, const char *cmd) {
        if (w)
                (void) !write(w->cmd[1], cmd, strlen(cmd));
}

void watcher_recheck_all(struct watcher *w) {
        send_command(w, "all\n");
}

void watcher_recheck_domain(struct watcher *w, const char *uuid) {
        if (!w || !uuid || strlen(uuid) >= VIR_UUID_STRING_BUFLEN)
                return;
        _cleanup_free_ char *c = xasprintf("uuid %s\n", uuid);
        send_command(w, c);
}

int watcher_start(struct manager *m, sd_event *e, const char *uri, struct watcher **ret) {
        struct watcher *w = xcalloc(1, sizeof(*w));
        w->m = m;
        w->uri = xstrdup(uri);
        w->lifecycle_cb = -1;
        w->backoff_ms = BACKOFF_MIN_MS;
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        w->cmd[0] = w->cmd[1] = -1;
        w->plan_efd = -1;
        if (pipe2(w->cmd, O_CLOEXEC | O_NONBLOCK) < 0)
                goto fail_errno;
        w->plan_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->plan_efd < 0)
                goto fail_errno;
        int r = sd_event_add_io(e, &w->plan_src, w->plan_efd, EPOLLIN, on_plan_request, w);
        if (r < 0) {
                errno = -r;
                goto fail_errno;
        }
        (void) sd_event_source_set_description(w->plan_src, "libvirt-plan-requests");

        /* Once per process, before any connection. */
        if (virEventRegisterDefaultImpl() < 0) {
                log_msg(LOG_ERR, "Cannot set up libvirt's event loop: %s", lv_error());
                watcher_stop(w);
                return -EIO;
        }
        r = pthread_create(&w->thread, NULL, worker_main, w);
        if (r != 0) {
                errno = r;
                goto fail_errno;
        }
        w->thread_started = true;
        *ret = w;
        return 0;

fail_errno:
        r = -errno;
        log_errno(LOG_ERR, r, "Cannot start the libvirt watcher: %m");
        watcher_stop(w);
        return r;
}

struct watcher *watcher_stop(struct watcher *w) {
        if (!w)
                return NULL;
        if (w->thread_started) {
                pthread_mutex_lock(&w->lock);
                w->quit = true;
                pthread_cond_broadcast(&w->cond);
                pthread_mutex_unlock(&w->lock);
                /* Wake virEventRunDefaultImpl(). */
                send_command(w, "quit\n");
                /* The worker may be stuck in a libvirt call; do not hang the
                 * daemon's shutdown on it. */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 5;
                if (pthread_timedjoin_np(w->thread, NULL, &ts) != 0) {
                        log_msg(LOG_WARNING, "The libvirt worker did not stop within 5 s; leaving it behind");
                        /* It still references w: leak it on purpose. */
                        sd_event_source_disable_unref(w->plan_src);
                        return NULL;
                }
        }
        sd_event_source_disable_unref(w->plan_src);
        if (w->plan_efd >= 0)
                close(w->plan_efd);
        if (w->cmd[0] >= 0)
                close(w->cmd[0]);
        if (w->cmd[1] >= 0)
                close(w->cmd[1]);
        for (size_t i = 0; i < w->n_queue; i++)
                free(w->queue[i]);
        free(w->queue);
        free(w->guards);
        free(w->last_error);
        free(w->uri);
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w);
        return NULL;
}

json_object *watcher_status(struct watcher *w) {
        json_object *o = json_object_new_object();
        pthread_mutex_lock(&w->lock);
        json_object_object_add(o, "uri", json_object_new_string(w->uri));
        json_object_object_add(o, "connected", json_object_new_boolean(w->connected));
        json_object_object_add(o, "redefinitions", json_object_new_int64((int64_t) w->n_redefined));
        json_object_object_add(o, "failures", json_object_new_int64((int64_t) w->n_failed));
        json_object_object_add(o, "last_error", w->last_error ? json_object_new_string(w->last_error) : NULL);
        pthread_mutex_unlock(&w->lock);
        return o;
}

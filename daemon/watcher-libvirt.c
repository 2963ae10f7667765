/* pcinuma-watcher: pcinumad's libvirt watcher (design §8, the define-time
 * path), in a process of its own.  It keeps every persistent domain that
 * the policy covers planned, by redefining it with the planned XML.
 *
 * Why a process and not a thread of pcinumad: libvirt's client library
 * brings gnutls, libcrypto, glib, libssh and p11-kit into any process that
 * links it, ~8 MiB of resident pages, and its calls block (a define waits
 * for the domain's job lock, held for the whole of a start, during which
 * libvirt runs our hook).  Here, pcinumad itself (the hook server, on the
 * path of every VM start) links none of it and never waits on libvirt
 * (design §3.2); a libvirt call that hangs or a crash in libvirt's library
 * stops this process only, and pcinumad restarts it.
 *
 * pcinumad starts it with one end of a socketpair on fd 3 and talks the
 * hook protocol's framing (4-byte length + JSON object) over it:
 *   to pcinumad:   {"type":"plan","id":N,"xml":"…"}
 *                  {"type":"status","connected":b,"redefinitions":n,"failures":n,"last_error":s}
 *   from pcinumad: {"type":"planned","id":N,"redefine":b,"xml":s,"summary":s,"prio":n,
 *                   "fields":[["PCINUMA_…","value"],…]}
 *                  {"type":"recheck"}   (every domain)   {"type":"recheck","uuid":"…"}
 * All planning happens in pcinumad, which owns the host map and the
 * policy; this process only talks to libvirt, and logs what it did with
 * the same fields and MESSAGE_IDs as before.  It exits when pcinumad
 * closes its end (or dies: PR_SET_PDEATHSIG). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <time.h>

#include "log.h"
#include "protocol.h"
#include <limits.h>

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
/* A domain redefined this many times within LOOP_WINDOW_SEC means the
 * plan is not idempotent for it (a bug): stop and say so rather than spin. */
#define LOOP_LIMIT 4
#define LOOP_WINDOW_SEC 60

struct redefine_plan {
        bool redefine;
        const char *out_xml;
        const char *summary;
        int prio;
        struct log_fields fields;
        size_t n_borrowed;              /* fields[0..n_borrowed) point into msg */
        json_object *msg;               /* owns the strings above */
};

static void redefine_plan_done(struct redefine_plan *p) {
        /* The first n_borrowed belong to msg; any added here are ours. */
        for (size_t i = p->n_borrowed; i < p->fields.n; i++)
                free(p->fields.v[i].value);
        free(p->fields.v);
        p->fields = (struct log_fields) {0};
        if (p->msg)
                json_object_put(p->msg);
        p->msg = NULL;
}

struct loop_guard {
        char uuid[VIR_UUID_STRING_BUFLEN];
        unsigned count;
        time_t first;
        bool stopped;
};

struct watcher {
        char *uri;
        int fd;                         /* to pcinumad */
        struct proto_decoder dec;
        bool parent_gone;
        uint64_t next_id;

        /* status, sent to pcinumad whenever it changes */
        bool connected;
        uint64_t n_redefined, n_failed;
        char *last_error;

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

static void silent_error_func(void *userdata, virErrorPtr err) {
        (void) userdata;
        (void) err;
}

static const char *lv_error(void) {
        const char *m = virGetLastErrorMessage();
        return m ? m : "unknown libvirt error";
}

/* --- the link to pcinumad ------------------------------------------------- */

static void enqueue(struct watcher *w, const char *uuid);

/* Write a whole frame; the fd is non-blocking, so wait for room. */
static bool send_msg(struct watcher *w, json_object *o) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, off = 0;
        if (w->parent_gone || proto_frame_encode(o, &buf, &len) < 0)
                return false;
        while (off < len) {
                ssize_t n = write(w->fd, buf + off, len - off);
                if (n >= 0) {
                        off += (size_t) n;
                        continue;
                }
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN) {
                        struct pollfd p = { .fd = w->fd, .events = POLLOUT };
                        (void) poll(&p, 1, -1);
                        continue;
                }
                w->parent_gone = true;
                return false;
        }
        return true;
}

static void send_status(struct watcher *w) {
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "type", json_object_new_string("status"));
        json_object_object_add(o, "connected", json_object_new_boolean(w->connected));
        json_object_object_add(o, "redefinitions", json_object_new_int64((int64_t) w->n_redefined));
        json_object_object_add(o, "failures", json_object_new_int64((int64_t) w->n_failed));
        json_object_object_add(o, "last_error", w->last_error ? json_object_new_string(w->last_error) : NULL);
        (void) send_msg(w, o);
}

static void set_connected(struct watcher *w, bool connected) {
        w->connected = connected;
        send_status(w);
}

static void set_last_error(struct watcher *w, const char *s) {
        free(w->last_error);
        w->last_error = s ? xstrdup(s) : NULL;
        send_status(w);
}

static void count_result(struct watcher *w, bool redefined) {
        if (redefined)
                w->n_redefined++;
        else
                w->n_failed++;
        send_status(w);
}

struct msg_ctx {
        struct watcher *w;
        json_object **ret_planned;
};

/* Handle one message from pcinumad.  A "planned" answer is returned in
 * *ret_planned (when asked for); recheck requests are queued. */
static void handle_msg(json_object *o, void *userdata) {
        struct watcher *w = ((struct msg_ctx *) userdata)->w;
        json_object **ret_planned = ((struct msg_ctx *) userdata)->ret_planned;
        json_object *t = NULL, *u = NULL;
        const char *type = json_object_object_get_ex(o, "type", &t) ? json_object_get_string(t) : NULL;
        if (type && streq(type, "recheck")) {
                if (json_object_object_get_ex(o, "uuid", &u) && json_object_is_type(u, json_type_string))
                        enqueue(w, json_object_get_string(u));
                else
                        enqueue(w, "*");
        } else if (type && streq(type, "planned") && ret_planned && !*ret_planned)
                *ret_planned = json_object_get(o);
        else
                log_msg(LOG_WARNING, "Ignoring an unexpected message from pcinumad (type %s)", type ? type : "missing");
}

/* Read what is there (wait: block until something is) and handle every
 * complete message.  False when pcinumad has gone. */
static bool read_msgs(struct watcher *w, bool wait, json_object **ret_planned) {
        char buf[65536];
        for (;;) {
                ssize_t n = read(w->fd, buf, sizeof buf);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        if (!wait)
                                return true;
                        struct pollfd p = { .fd = w->fd, .events = POLLIN };
                        (void) poll(&p, 1, -1);
                        continue;
                }
                if (n <= 0) {
                        w->parent_gone = true;
                        return false;
                }
                struct msg_ctx ctx = { w, ret_planned };
                _cleanup_free_ char *err = NULL;
                if (proto_decoder_feed_all(&w->dec, buf, (size_t) n, handle_msg, &ctx, &err) < 0) {
                        log_msg(LOG_ERR, "Bad message from pcinumad: %s; exiting", err ? err : "?");
                        w->parent_gone = true;
                        return false;
                }
                if (!wait || (ret_planned && *ret_planned))
                        return true;
        }
}

static void on_parent(int watch, int fd, int events, void *opaque) {
        struct watcher *w = opaque;
        (void) watch;
        (void) fd;
        (void) events;
        (void) read_msgs(w, false, NULL);
}

static const char *get_str(json_object *o, const char *key) {
        json_object *v = NULL;
        return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* Have pcinumad plan xml (it owns the host map and the policy); false when
 * it has gone. */
static bool plan_on_main(struct watcher *w, const char *xml, struct redefine_plan *ret) {
        uint64_t id = ++w->next_id;
        _cleanup_json_ json_object *req = json_object_new_object();
        json_object_object_add(req, "type", json_object_new_string("plan"));
        json_object_object_add(req, "id", json_object_new_int64((int64_t) id));
        json_object_object_add(req, "xml", json_object_new_string(xml));
        if (!send_msg(w, req))
                return false;

        json_object *ans = NULL;
        while (!ans)
                if (!read_msgs(w, true, &ans))
                        return false;

        json_object *v = NULL;
        struct redefine_plan p = { .msg = ans, .prio = LOG_DEBUG };
        if (!json_object_object_get_ex(ans, "id", &v) || (uint64_t) json_object_get_int64(v) != id) {
                log_msg(LOG_ERR, "pcinumad answered another request than the one asked; exiting");
                json_object_put(ans);
                w->parent_gone = true;
                return false;
        }
        p.redefine = json_object_object_get_ex(ans, "redefine", &v) && json_object_get_boolean(v);
        p.out_xml = get_str(ans, "xml");
        p.summary = get_str(ans, "summary");
        if (json_object_object_get_ex(ans, "prio", &v))
                p.prio = json_object_get_int(v);
        if (p.redefine && !p.out_xml)
                p.redefine = false;
        if (json_object_object_get_ex(ans, "fields", &v) && json_object_is_type(v, json_type_array))
                for (size_t i = 0; i < json_object_array_length(v); i++) {
                        json_object *kv = json_object_array_get_idx(v, i);
                        if (!json_object_is_type(kv, json_type_array) || json_object_array_length(kv) != 2)
                                continue;
                        struct log_field *f = GROW(p.fields.v, p.fields.n);
                        f->key = json_object_get_string(json_object_array_get_idx(kv, 0));
                        f->value = (char *) json_object_get_string(json_object_array_get_idx(kv, 1));
                }
        p.n_borrowed = p.fields.n;
        *ret = p;
        return true;
}

/* --- libvirt ------------------------------------------------------------- */

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
        if (!plan.redefine) {
                g->count = 0;   /* stable */
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
                count_result(w, false);
                _cleanup_free_ char *msg = xasprintf("redefining %s: %s", name, e);
                set_last_error(w, msg);
        } else {
                bool running = virDomainIsActive(dom) == 1;
                log_event(LOG_INFO, PCINUMA_MID_DOMAIN_REDEFINED, &plan.fields, "Domain %s redefined: %s%s", name, plan.summary,
                          running ? " (it is running: the new layout applies at its next start)" : "");
                virDomainFree(nd);
                count_result(w, true);
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
        set_connected(w, false);
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
        set_connected(w, false);
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
        set_connected(w, true);
        set_last_error(w, NULL);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
        log_event(LOG_INFO, PCINUMA_MID_LIBVIRT_CONNECTION, &f, "Connected to libvirt at %s; checking every persistent domain", w->uri);
        log_fields_done(&f);
        /* Catch up on whatever was defined while we were away. */
        enqueue(w, "*");
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinuma-watcher --uri URI [--log-target journal|stderr|auto] [--fd N]\n"
                "\n"
                "pcinumad's libvirt watcher.  pcinumad starts it; it is not meant to be run by hand.\n"
                "It talks to pcinumad over the socket on fd N (default 3) and to libvirt at URI, and\n"
                "redefines persistent domains with the topology pcinumad plans for them.\n");
}

int main(int argc, char **argv) {
        enum { ARG_URI = 0x100, ARG_LOG_TARGET, ARG_FD, ARG_VERSION };
        static const struct option opts[] = {
                { "uri", required_argument, NULL, ARG_URI },
                { "log-target", required_argument, NULL, ARG_LOG_TARGET },
                { "fd", required_argument, NULL, ARG_FD },
                { "version", no_argument, NULL, ARG_VERSION },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct watcher w = { .fd = 3, .lifecycle_cb = -1, .backoff_ms = BACKOFF_MIN_MS };
        enum log_target target = LOG_TARGET_AUTO;
        uint64_t v;
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
                switch (c) {
                case ARG_URI:
                        w.uri = optarg;
                        break;
                case ARG_LOG_TARGET:
                        if (log_target_from_string(optarg, &target) < 0) {
                                fprintf(stderr, "pcinuma-watcher: --log-target: expected journal, stderr or auto, not '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case ARG_FD:
                        if (parse_uint(optarg, 10, INT_MAX, &v) < 0) {
                                fprintf(stderr, "pcinuma-watcher: --fd: not a file descriptor number: '%s'\n", optarg);
                                return 2;
                        }
                        w.fd = (int) v;
                        break;
                case ARG_VERSION:
                        printf("pcinuma-watcher %s\n", PCINUMA_VERSION);
                        return 0;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        if (!w.uri || optind < argc) {
                usage(stderr);
                return 2;
        }
        log_setup(target, "pcinumad");

        int fl = fcntl(w.fd, F_GETFL);
        if (fl < 0 || fcntl(w.fd, F_SETFL, fl | O_NONBLOCK) < 0) {
                fprintf(stderr, "pcinuma-watcher: fd %d: %s (pcinumad starts this program with its socket there)\n",
                        w.fd, strerror(errno));
                return 2;
        }
        (void) fcntl(w.fd, F_SETFD, FD_CLOEXEC);
        /* Go when pcinumad goes, even if it is killed without closing. */
        (void) prctl(PR_SET_PDEATHSIG, SIGTERM);
        signal(SIGPIPE, SIG_IGN);

        virSetErrorFunc(NULL, silent_error_func);
        if (virEventRegisterDefaultImpl() < 0) {
                log_msg(LOG_ERR, "Cannot set up libvirt's event loop: %s", lv_error());
                return 1;
        }
        int watch = virEventAddHandle(w.fd, VIR_EVENT_HANDLE_READABLE, on_parent, &w, NULL);
        w.reconnect_timer = virEventAddTimeout(0, try_connect, &w, NULL);
        w.process_timer = virEventAddTimeout(-1, process_queue, &w, NULL);
        if (watch < 0 || w.reconnect_timer < 0 || w.process_timer < 0) {
                log_msg(LOG_ERR, "Cannot set up libvirt's event loop: %s", lv_error());
                return 1;
        }
        send_status(&w);

        while (!w.parent_gone)
                if (virEventRunDefaultImpl() < 0) {
                        log_msg(LOG_ERR, "libvirt's event loop failed: %s", lv_error());
                        break;
                }

        disconnect(&w);
        virEventRemoveHandle(watch);
        virEventRemoveTimeout(w.reconnect_timer);
        virEventRemoveTimeout(w.process_timer);
        for (size_t i = 0; i < w.n_queue; i++)
                free(w.queue[i]);
        free(w.queue);
        free(w.guards);
        free(w.last_error);
        proto_decoder_reset(&w.dec);
        return w.parent_gone ? 0 : 1;
}

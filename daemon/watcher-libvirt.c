/* pcinuma-watcher: pcinumad's libvirt watcher (docs/design.md §8, the define-time
 * path), in a process of its own.  It keeps every persistent domain that
 * the policy covers planned, by redefining it with the planned XML.
 *
 * Why a process and not a thread of pcinumad: libvirt's client library
 * brings gnutls, libcrypto, glib, libssh and p11-kit into any process that
 * links it, ~8 MiB of resident pages, and its calls block (a define waits
 * for the domain's job lock, held for the whole of a start, during which
 * libvirt runs our hook).  Here, pcinumad itself (the hook server, on the
 * path of every VM start) links none of it and never waits on libvirt
 * (docs/design.md §3.2); a libvirt call that hangs or a crash in libvirt's library
 * stops this process only, and pcinumad restarts it.
 *
 * pcinumad starts it with one end of a socketpair on fd 3 and talks the
 * watcher protocol over it (lib/base/wproto.h: plan requests, forget and
 * status messages to pcinumad; planned answers and recheck requests from
 * it).  All planning happens in pcinumad, which owns the host map and the
 * policy; this process only talks to libvirt, and logs what it did with
 * the same fields and MESSAGE_IDs as before.  It exits when pcinumad
 * closes its end (or dies: PR_SET_PDEATHSIG).
 *
 * Two threads (and the restarts' workers, watcher-restart.h).  libvirt's
 * event loop runs on a thread of its own that never blocks: it tells
 * pcinumad at once when a domain is defined or undefined (the prepare
 * gate needs to know which domains are persistent when a client starts one
 * right after defining it), and queues every lifecycle event for the main
 * thread.  The main thread does everything else, as one sequence: it
 * reads pcinumad's messages, applies the queued events, and looks at one
 * domain at a time with blocking libvirt calls (a define waits for the
 * domain's lock, held for the whole of a start).  Events are applied
 * between two looks at domains, never during one, as when one thread did
 * everything: the checks below rely on it.
 *
 * Users edit domains while this process redefines them, and libvirt has
 * no compare-and-swap (issue 13).  So:
 *   - a domain is looked at only once its DEFINED/UNDEFINED events have
 *     been quiet for --settle-ms, so a burst of edits settles first (a
 *     recheck pcinumad asks for, e.g. after a refused start, is acted on
 *     at once: a start means the editing is over);
 *   - the plan is defined only if a re-read of the definition, the last
 *     call before the define, equals what was planned from; otherwise it
 *     is planned again (MAX_ROUNDS times at most);
 *   - the definition it replaces is saved first (preimage.h);
 *   - what cannot be prevented is detected afterwards: once the events
 *     after our define are quiet, more of them than our define and the
 *     changes we saw explain means another define landed between the
 *     re-read and ours (a conflict, logged, then planned again); our own
 *     event saying ADDED, with no other define since, means our define
 *     re-created a domain a user had undefined meanwhile, which is
 *     undefined again (never when another define came: that ADDED may be
 *     a client's defining the domain anew, see verify()). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <getopt.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <libxml/parser.h>
#include <libxml/relaxng.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>

#include "log.h"
#include "mark-urn.h"
#include "paths.h"
#include "preimage.h"
#include "protocol.h"
#include "watcher-restart.h"
#include "wproto.h"
#include <limits.h>

#if PCINUMA_STAND_INS
#include "standins.h"
#endif

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
/* A domain redefined this many times within LOOP_WINDOW_SEC means the
 * plan is not idempotent for it (a bug): stop and say so rather than spin. */
#define LOOP_LIMIT 4
#define LOOP_WINDOW_SEC 60
/* Re-reads that differ from what was planned before we give up for now
 * (the domain's next event brings it back). */
#define MAX_ROUNDS 5
/* Our define's own event is normally in within milliseconds; without it
 * the define cannot be checked, and after this long we stop waiting. */
#define VERIFY_TIMEOUT_USEC (10 * USEC_PER_SEC)
#define USEC_PER_MSEC UINT64_C(1000)
#define USEC_PER_SEC UINT64_C(1000000)
#define SETTLE_MS_DEFAULT 250
#define SETTLE_MS_MAX 60000
/* libvirt's domain schema, shipped with the client library (libvirt0). */
#define LIBVIRT_DOMAIN_SCHEMA "/usr/share/libvirt/schemas/domain.rng"

struct redefine_plan {
        bool redefine;
        const char *out_xml;
        const char *summary;
        int prio;
        struct log_fields fields;
        size_t n_borrowed;              /* fields[0..n_borrowed) point into msg */
        struct wproto_msg msg;          /* pcinumad's answer: owns the strings above */
};

static void redefine_plan_done(struct redefine_plan *p) {
        /* The first n_borrowed belong to msg; any added here are ours. */
        for (size_t i = p->n_borrowed; i < p->fields.n; i++)
                free(p->fields.v[i].value);
        free(p->fields.v);
        p->fields = (struct log_fields) {0};
        wproto_msg_done(&p->msg);
}

/* What the watcher knows of one domain, by UUID. */
struct dom_state {
        char uuid[VIR_UUID_STRING_BUFLEN];
        uint64_t due;                   /* CLOCK_MONOTONIC usec to look at it; 0: nothing to do */
        uint64_t last_event;            /* when its last DEFINED/UNDEFINED event came */
        uint64_t events;                /* DEFINED/UNDEFINED events so far */
        int last_detail;                /* of the last DEFINED event since our define; -1 none */
        uint64_t defines;               /* DEFINED events since our define (ours among them) */
        bool synced;                    /* due, and events sent before now are dispatched */

        /* Our last define, to be checked once its event is in and quiet. */
        bool verifying;
        uint64_t verify_base;           /* events when we defined (none come in during processing) */
        uint64_t verify_expected;       /* events our define and the changes we saw explain */
        uint64_t verify_started;
        char *readback;                 /* the definition right after our define */
        char *preimage;                 /* the file of what it replaced */
        /* Set by verify() when more events came than our define explains
         * and our definition is still there; confirmed by the next plan. */
        bool suspect;
        uint64_t suspect_events;
        char *suspect_preimage;

        /* The loop guard: a plan that does not converge is a bug. */
        unsigned loop_count;
        time_t loop_first;
        bool loop_stopped;
};

/* A lifecycle event, from libvirt's event thread to the main thread. */
struct queued_event {
        virDomainPtr dom;               /* a reference; NULL: the connection closed (reason in detail) */
        char uuid[VIR_UUID_STRING_BUFLEN];
        int event, detail;
        uint64_t at;                    /* CLOCK_MONOTONIC usec, when libvirt's thread got it */
};

struct watcher {
        char *uri;
        int fd;                         /* to pcinumad */
        struct proto_decoder dec;
        atomic_bool parent_gone;
        uint64_t next_id;
        pthread_mutex_t write_lock;     /* frames to pcinumad come from both threads */

        /* libvirt's event thread and what it hands the main thread */
        pthread_t loop_thread;
        bool loop_running;
        atomic_bool loop_stop;
        int wake_timer;                 /* fired to end the event thread's wait */
        pthread_mutex_t queue_lock;
        struct queued_event *queue;
        size_t n_queue;
        int wake_fd;                    /* eventfd: the main thread has something queued */

        /* status, sent to pcinumad whenever it changes */
        bool connected;
        uint64_t n_redefined, n_failed;
        char *last_error;

        uint64_t n_events, n_conflicts, n_undone;
        uint64_t n_windows, window_us_sum, window_us_max;
        size_t last_pending;            /* as last reported */

        unsigned settle_ms;
        struct preimage_store *preimages;
        xmlRelaxNGPtr schema;           /* NULL: the define validates */
#if PCINUMA_STAND_INS
        /* A test build: pcinumad's stand-in table (--stand-ins), or NULL.
         * Read and checked as pcinumad reads it (a bad table stops the
         * watcher too), but nothing uses it yet: all planning is
         * pcinumad's, and the watcher reads no domain's devices. */
        struct standins *stand_ins;
#endif

        virConnectPtr conn;
        int lifecycle_cb;
        uint64_t reconnect_due;         /* CLOCK_MONOTONIC usec of the next connect attempt; 0: none */
        uint64_t process_due;           /* of the next look at a domain (schedule()); 0: none */
        int backoff_ms;
        unsigned failed_attempts;
        bool check_all;                 /* list every persistent domain at the next turn */
        struct dom_state **states;      /* pointers: a state stays put while the array grows */
        size_t n_states;

        struct restarter *restarter;    /* restarts into the plan (watcher-restart.h) */
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

static void recheck(struct watcher *w, const char *uuid);

/* Write a whole frame; the fd is non-blocking, so wait for room.  Both
 * threads send: one frame at a time. */
static bool send_frame(struct watcher *w, const char *buf, size_t len) {
        size_t off = 0;
        if (w->parent_gone)
                return false;
        pthread_mutex_lock(&w->write_lock);
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
                break;
        }
        pthread_mutex_unlock(&w->write_lock);
        return off == len;
}

/* The domain is undefined: pcinumad drops it from its recheck cache. */
static void send_forget(struct watcher *w, const char *uuid) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (!w->parent_gone && wproto_encode_forget(&(struct wproto_forget) { .uuid = uuid }, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
}

static void send_status(struct watcher *w) {
        /* The counters are for pcinumactl status and the race suite, which
         * waits for "pending": 0 before it judges a domain. */
        const struct wproto_status st = {
                .connected = w->connected,
                .redefinitions = w->n_redefined,
                .failures = w->n_failed,
                .last_error = w->last_error,
                .has_counters = true,
                .settle_ms = w->settle_ms,
                .pending = w->last_pending,
                .events = w->n_events,
                .conflicts = w->n_conflicts,
                .undone = w->n_undone,
                .windows = w->n_windows,
                .window_us_sum = w->window_us_sum,
                .window_us_max = w->window_us_max,
        };
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (!w->parent_gone && wproto_encode_status(&st, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
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
        struct wproto_msg *ret_planned;
};

/* Handle one message from pcinumad.  A "planned" answer is returned in
 * *ret_planned (when asked for); recheck requests are queued.  A message
 * pcinumad should never send means it is not the pcinumad we know: go. */
static void handle_msg(json_object *o, void *userdata) {
        struct watcher *w = ((struct msg_ctx *) userdata)->w;
        struct wproto_msg *ret_planned = ((struct msg_ctx *) userdata)->ret_planned;
        struct wproto_msg msg;
        _cleanup_free_ char *err = NULL;
        if (w->parent_gone)
                return;
        if (wproto_decode(o, &msg, &err) < 0) {
                log_msg(LOG_ERR, "Bad message from pcinumad: %s; exiting", err);
                w->parent_gone = true;
                return;
        }
        if (msg.type == WPROTO_RECHECK)
                recheck(w, msg.recheck.uuid);
        else if (msg.type == WPROTO_RESTART)
                restarter_request(w->restarter, w->conn, &msg.restart);
        else if (msg.type == WPROTO_PLANNED && ret_planned && !ret_planned->obj) {
                *ret_planned = msg;
                return;
        } else
                log_msg(LOG_WARNING, "Ignoring an unexpected message from pcinumad (type %s)", wproto_type_to_string(msg.type));
        wproto_msg_done(&msg);
}

/* Read what is there (wait: block until something is) and handle every
 * complete message.  False when pcinumad has gone. */
static bool read_msgs(struct watcher *w, bool wait, struct wproto_msg *ret_planned) {
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
                if (w->parent_gone)
                        return false;
                if (!wait || (ret_planned && ret_planned->obj))
                        return true;
        }
}

/* Send a request frame and wait for pcinumad's answer to it (the
 * messages that come meanwhile are handled as usual); false when pcinumad
 * has gone.  *ret is the "planned" answer. */
static bool ask_main(struct watcher *w, uint64_t id, const char *frame, size_t len, struct wproto_msg *ret) {
        if (w->parent_gone || !send_frame(w, frame, len))
                return false;
        while (!ret->obj)
                if (!read_msgs(w, true, ret))
                        return false;
        if (ret->planned.id != id) {
                log_msg(LOG_ERR, "pcinumad answered another request than the one asked; exiting");
                wproto_msg_done(ret);
                w->parent_gone = true;
                return false;
        }
        return true;
}

/* Have pcinumad plan xml (it owns the host map and the policy); false when
 * it has gone. */
static bool plan_on_main(struct watcher *w, const char *xml, struct redefine_plan *ret) {
        const struct wproto_plan req = { .id = ++w->next_id, .xml = xml, .xml_len = strlen(xml) };
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (w->parent_gone || wproto_encode_plan(&req, &buf, &len) < 0)
                return false;

        struct redefine_plan p = { .prio = LOG_DEBUG };
        if (!ask_main(w, req.id, buf, len, &p.msg)) {
                redefine_plan_done(&p);
                return false;
        }
        const struct wproto_planned *a = &p.msg.planned;
        p.redefine = a->redefine && a->xml;
        p.out_xml = a->xml;
        p.summary = a->summary;
        p.prio = a->prio;
        for (size_t i = 0; i < a->n_fields; i++) {
                struct log_field *f = GROW(p.fields.v, p.fields.n);
                f->key = a->fields[i].key;
                f->value = (char *) a->fields[i].value;
        }
        p.n_borrowed = p.fields.n;
        *ret = p;
        return true;
}

/* The restarter's: have pcinumad plan a running domain's live XML; the
 * answer's strings are copied (the restarter keeps them past the message). */
static bool plan_for_restart(void *userdata, const char *uuid, const char *xml, struct restart_plan *ret) {
        struct watcher *w = userdata;
        const struct wproto_plan_restart req = { .id = ++w->next_id, .uuid = uuid, .xml = xml, .xml_len = strlen(xml) };
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (w->parent_gone || wproto_encode_plan_restart(&req, &buf, &len) < 0)
                return false;
        _cleanup_(wproto_msg_done) struct wproto_msg m = { .obj = NULL };
        if (!ask_main(w, req.id, buf, len, &m))
                return false;
        const struct wproto_planned *a = &m.planned;
        struct restart_plan p = { .restart = a->redefine && a->xml, .prio = a->prio };
        p.xml = a->xml ? xstrdup(a->xml) : NULL;
        p.summary = a->summary ? xstrdup(a->summary) : a->error ? xstrdup(a->error) : NULL;
        /* log_fields do not own their keys: these outlive the message. */
        p.keys = xcalloc(a->n_fields ? a->n_fields : 1, sizeof(char *));
        for (size_t i = 0; i < a->n_fields; i++) {
                p.keys[p.n_keys] = xstrdup(a->fields[i].key);
                log_fields_add(&p.fields, p.keys[p.n_keys++], "%s", a->fields[i].value);
        }
        *ret = p;
        return true;
}

static void report_restart(void *userdata, const struct wproto_restarted *r) {
        struct watcher *w = userdata;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (!w->parent_gone && wproto_encode_restarted(r, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
}

static const struct restarter_ops restart_ops = {
        .plan = plan_for_restart,
        .report = report_restart,
};

/* A domain's persistence changed: pcinumad's prepare gate must know at
 * once (a client starts right after its define), before anything else. */
static void send_domain(struct watcher *w, const char *uuid, bool persistent) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (!w->parent_gone && wproto_encode_domain(&(struct wproto_domain) { uuid, persistent }, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
}

/* --- the domains we know of ---------------------------------------------- */

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static void verify_clear(struct dom_state *s) {
        s->verifying = false;
        free(s->readback);
        s->readback = NULL;
        free(s->preimage);
        s->preimage = NULL;
}

static struct dom_state *state_find(struct watcher *w, const char *uuid, bool create) {
        for (size_t i = 0; i < w->n_states; i++)
                if (streq(w->states[i]->uuid, uuid))
                        return w->states[i];
        if (!create)
                return NULL;
        struct dom_state *s = xcalloc(1, sizeof(*s));
        snprintf(s->uuid, sizeof s->uuid, "%s", uuid);
        s->last_detail = -1;
        *GROW(w->states, w->n_states) = s;
        return s;
}

/* A domain that is gone leaves nothing behind: the table stays as large
 * as the set of domains. */
static void state_forget(struct watcher *w, struct dom_state *s) {
        for (size_t i = 0; i < w->n_states; i++)
                if (w->states[i] == s) {
                        w->states[i] = w->states[--w->n_states];
                        break;
                }
        verify_clear(s);
        free(s->suspect_preimage);
        free(s);
}

static size_t count_pending(struct watcher *w) {
        size_t n = 0;
        for (size_t i = 0; i < w->n_states; i++)
                n += w->states[i]->due || w->states[i]->verifying;
        return n + w->check_all;
}

/* Note when the earliest due domain is due, and tell pcinumad when the
 * number of pending domains changed. */
static void schedule(struct watcher *w) {
        uint64_t now = now_usec(), next = 0;
        for (size_t i = 0; i < w->n_states; i++) {
                uint64_t d = w->states[i]->due;
                if (d && (!next || d < next))
                        next = d;
        }
        w->process_due = w->check_all ? now : next;
        size_t pending = count_pending(w);
        if (pending != w->last_pending) {
                w->last_pending = pending;
                send_status(w);
        }
}

/* pcinumad asks (a start found the domain unplanned, the host or the
 * policy changed): not an edit, so no waiting for quiet (NULL: all). */
static void recheck(struct watcher *w, const char *uuid) {
        if (!uuid)
                w->check_all = true;
        else if (strlen(uuid) < VIR_UUID_STRING_BUFLEN)
                state_find(w, uuid, true)->due = now_usec();
        schedule(w);
}

/* --- reading and logging ------------------------------------------------- */

/* The persistent definition (SECURE: a redefinition must not lose
 * passwords and keys), or NULL when the domain is gone or transient. */
static char *read_definition(virDomainPtr dom) {
        if (virDomainIsPersistent(dom) != 1)
                return NULL;
        return virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
}

static void conflict_fields(struct log_fields *f, const char *name, const struct dom_state *s, const char *kind,
                            uint64_t events, const char *preimage) {
        log_fields_add(f, "PCINUMA_DOMAIN", "%s", name);
        log_fields_add(f, "PCINUMA_UUID", "%s", s->uuid);
        log_fields_add(f, "PCINUMA_CONFLICT", "%s", kind);
        log_fields_add(f, "PCINUMA_EVENTS", "%" PRIu64, events);
        if (preimage)
                log_fields_add(f, "PCINUMA_PREIMAGE", "%s", preimage);
}

static void redefine_failed(struct watcher *w, struct redefine_plan *plan, const char *name, const char *why) {
        log_fields_add(&plan->fields, "PCINUMA_LIBVIRT_ERROR", "%s", why);
        log_event(LOG_ERR, PCINUMA_MID_REDEFINE_FAILED, &plan->fields,
                  "Domain %s was not redefined; its definition is unchanged: %s", name, why);
        count_result(w, false);
        _cleanup_free_ char *msg = xasprintf("redefining %s: %s", name, why);
        set_last_error(w, msg);
}

/* --- checking our last define ------------------------------------------- */

/* Our define re-created a domain that was undefined meanwhile (its event
 * said ADDED).  Undefine it again, unless it runs now (someone started
 * what we brought back: theirs to remove) or holds anything but our own
 * definition. */
static void undo_recreate(struct watcher *w, struct dom_state *s, virDomainPtr dom, const char *name) {
        struct log_fields f = {0};
        if (virDomainIsActive(dom) == 1) {
                conflict_fields(&f, name, s, "recreated-running", s->events - s->verify_base, s->preimage);
                log_event(LOG_WARNING, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                          "Domain %s was undefined while pcinuma redefined it, and pcinuma's define brought it back; "
                          "it is running now, so pcinuma leaves it ('virsh undefine %s' removes it again)", name, name);
                w->n_conflicts++;
                log_fields_done(&f);
                return;
        }
        /* The last look before the undefine: a definition that is not
         * ours any more is a user's, and must stay. */
        _cleanup_free_ char *cur = read_definition(dom);
        if (!cur || !streq(cur, s->readback))
                return;
        unsigned flags = VIR_DOMAIN_UNDEFINE_KEEP_NVRAM;
#if LIBVIR_CHECK_VERSION(8, 9, 0)
        flags |= VIR_DOMAIN_UNDEFINE_KEEP_TPM;
#endif
        bool ok = virDomainUndefineFlags(dom, flags) == 0;
        conflict_fields(&f, name, s, ok ? "recreated" : "recreated-kept", s->events - s->verify_base, s->preimage);
        if (ok)
                log_event(LOG_WARNING, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                          "Domain %s was undefined while pcinuma redefined it, and pcinuma's define brought it back; "
                          "pcinuma undefined it again", name);
        else
                log_event(LOG_ERR, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                          "Domain %s was undefined while pcinuma redefined it, and pcinuma's define brought it back; "
                          "undefining it again failed (%s): 'virsh undefine %s' removes it", name, lv_error(), name);
        w->n_conflicts++;
        w->n_undone += ok;
        log_fields_done(&f);
}

/* Judge our last define from the events that came after it (see the top
 * of this file).  True when there is nothing more to do for the domain. */
static bool verify(struct watcher *w, struct dom_state *s, virDomainPtr dom) {
        _cleanup_free_ char *cur = dom ? read_definition(dom) : NULL;
        bool done = true;
        if (!cur)
                ;       /* undefined (or made transient) after our define: nothing of ours is left */
        else if (!s->readback || !streq(cur, s->readback))
                done = false;   /* a newer definition replaced ours (or we cannot tell): plan it as usual */
        else if (s->last_detail == VIR_DOMAIN_EVENT_DEFINED_ADDED && s->defines == 1)
                /* Ours is the only define since, and it added the domain.
                 * With another define, the ADDED may be a client's: one
                 * that undefined the domain and defined it again after
                 * ours, with what libvirt holds equal to our read-back
                 * (a client defining what it dumped, or a define that
                 * landed between ours and our read-back, so that the
                 * read-back is the client's).  Undefining then would lose
                 * the client's definition: it stays, planned as usual. */
                undo_recreate(w, s, dom, virDomainGetName(dom));
        else if (s->events - s->verify_base > s->verify_expected) {
                /* An extra define, and ours is what libvirt holds: it came
                 * between our re-read and our define -- or right after
                 * our define, before our read-back.  The plan that follows
                 * tells: only our own output needs no redefinition. */
                s->suspect = true;
                s->suspect_events = s->events - s->verify_base;
                free(s->suspect_preimage);
                s->suspect_preimage = s->preimage ? xstrdup(s->preimage) : NULL;
                done = false;
        } else
                done = false;   /* clean: the usual look confirms the plan is stable */
        verify_clear(s);
        send_status(w);
        return done;
}

/* --- validating --------------------------------------------------------- */

/* The plan is checked against libvirt's schema here, before the re-read,
 * rather than by the define (VIR_DOMAIN_DEFINE_VALIDATE costs ~20 ms for
 * 16 devices, all of it inside the window between our re-read and our
 * define).  Without the schema file, the define validates. */
static xmlRelaxNGPtr load_schema(void) {
        xmlRelaxNGParserCtxtPtr pc = xmlRelaxNGNewParserCtxt(LIBVIRT_DOMAIN_SCHEMA);
        xmlRelaxNGPtr schema = pc ? xmlRelaxNGParse(pc) : NULL;
        if (pc)
                xmlRelaxNGFreeParserCtxt(pc);
        if (!schema)
                log_msg(LOG_NOTICE, "Cannot load libvirt's schema %s; libvirt validates each redefinition itself "
                                    "(a wider window for concurrent edits)", LIBVIRT_DOMAIN_SCHEMA);
        return schema;
}

static void quiet_error(void *ctx, const xmlError *e) {
        (void) ctx;
        (void) e;
}

/* True when xml is valid under the schema (a failure here only hands the
 * judgement to libvirt: the define then validates). */
static bool schema_valid(xmlRelaxNGPtr schema, const char *xml) {
        if (!schema)
                return false;
        xmlDocPtr doc = xmlReadMemory(xml, (int) strlen(xml), "plan.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR |
                                                                               XML_PARSE_NOWARNING);
        xmlRelaxNGValidCtxtPtr vc = doc ? xmlRelaxNGNewValidCtxt(schema) : NULL;
        bool ok = false;
        if (vc) {
                xmlRelaxNGSetValidStructuredErrors(vc, (xmlStructuredErrorFunc) quiet_error, NULL);
                ok = xmlRelaxNGValidateDoc(vc, doc) == 0;
                xmlRelaxNGFreeValidCtxt(vc);
        }
        xmlFreeDoc(doc);
        return ok;
}

/* --- redefining ---------------------------------------------------------- */

/* verify() suspected an overwritten define, and the plan of what libvirt
 * holds now confirms it is our own output. */
static void report_overwritten(struct watcher *w, struct dom_state *s, const char *name) {
        struct log_fields f = {0};
        conflict_fields(&f, name, s, "overwritten", s->suspect_events, s->suspect_preimage);
        log_event(LOG_WARNING, PCINUMA_MID_REDEFINE_CONFLICT, &f,
                  "Domain %s: another definition of it landed between pcinuma's last read and its redefinition, "
                  "and pcinuma's define replaced it (libvirt has no compare-and-swap); what pcinuma read is in %s. "
                  "If a change is missing, define it again",
                  name, s->suspect_preimage ? s->suspect_preimage : "no pre-image");
        log_fields_done(&f);
        w->n_conflicts++;
        send_status(w);
}

/* The loop guard and the log of a plan that changes nothing.  True when
 * the plan should be defined. */
static bool should_define(struct dom_state *s, const char *name, const char *xml, struct redefine_plan *plan) {
        time_t now = time(NULL);
        if (!s->loop_stopped && now - s->loop_first > LOOP_WINDOW_SEC) {
                s->loop_first = now;
                s->loop_count = 0;
        }
        /* A definition without our mark is new input from the user: it
         * starts a fresh count. */
        bool ours = strstr(xml, PCINUMA_TOPOLOGY_NS) != NULL;
        if (!ours) {
                s->loop_count = 0;
                s->loop_stopped = false;
        }
        if (!plan->redefine) {
                s->loop_count = 0;      /* stable */
                if (plan->summary)
                        log_msg(plan->prio, "Domain %s: %s", name, plan->summary);
                return false;
        }
        if (s->loop_stopped)
                return false;
        /* Only re-plans of our own output count: those must converge at
         * once (plan(dumpxml(plan(x))) is dumpxml(plan(x))). */
        if (ours && ++s->loop_count > LOOP_LIMIT) {
                s->loop_stopped = true;
                log_event(LOG_ERR, PCINUMA_MID_REDEFINE_FAILED, &plan->fields,
                          "Domain %s was re-planned %u times within %d s without settling: "
                          "not redefining it again until pcinumad restarts (please report this as a bug)",
                          name, LOOP_LIMIT, LOOP_WINDOW_SEC);
                return false;
        }
        return true;
}

static void note_window(struct watcher *w, uint64_t us) {
        w->n_windows++;
        w->window_us_sum += us;
        if (us > w->window_us_max)
                w->window_us_max = us;
}

/* What a prune dropped, in the journal (none: nothing). */
static void log_dropped(struct watcher *w, const char *name, const struct dom_state *s, const struct preimage_dropped *d) {
        size_t n = d->n_own + d->n_others;
        if (!n && !d->over)
                return;
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", name);
        log_fields_add(&f, "PCINUMA_UUID", "%s", s->uuid);
        log_fields_add(&f, "PCINUMA_PREIMAGE_DIR", "%s", preimage_store_dir(w->preimages));
        log_fields_add(&f, "PCINUMA_PREIMAGES_DROPPED", "%zu", n);
        log_fields_add(&f, "PCINUMA_PREIMAGES_LEFT", "%zu", d->n_left);
        log_fields_add(&f, "PCINUMA_PREIMAGE_BYTES", "%" PRIu64, d->bytes_left);
        if (d->files)
                log_fields_add(&f, "PCINUMA_PREIMAGE_FILES", "%s", d->files);
        log_event(d->over ? LOG_WARNING : d->n_others ? LOG_NOTICE : LOG_INFO, PCINUMA_MID_PREIMAGES_DROPPED, &f,
                  "Dropped %zu pre-image%s (%" PRIu64 " bytes) from %s after redefining %s: %zu of it beyond its newest "
                  "%d, %zu older ones of other domains for the folder's limits; %zu files of %" PRIu64 " bytes left%s",
                  n, n == 1 ? "" : "s", d->bytes, preimage_store_dir(w->preimages), name, d->n_own, PREIMAGE_PER_DOMAIN,
                  d->n_others, d->n_left, d->bytes_left,
                  d->over ? ", still over the folder's limits with only domains' newest pre-images: new ones are "
                            "refused until there is room" : "");
        log_fields_done(&f);
}

enum commit_result { COMMIT_DONE, COMMIT_CHANGED };

/* Save the pre-image, re-read, and define the plan only if the re-read
 * is what was planned from.  Between the re-read and the define there is
 * nothing but a string compare: that gap is the window no API closes.
 * On COMMIT_CHANGED, *xml is the new definition to plan. */
static enum commit_result commit(struct watcher *w, struct dom_state *s, virDomainPtr dom, const char *name, char **xml,
                                 struct redefine_plan *plan, unsigned changes) {
        _cleanup_free_ char *pre = NULL, *err = NULL;
        unsigned flags = schema_valid(w->schema, plan->out_xml) ? 0 : VIR_DOMAIN_DEFINE_VALIDATE;
        if (preimage_save(w->preimages, name, s->uuid, *xml, &pre, &err) < 0) {
                redefine_failed(w, plan, name, err);
                return COMMIT_DONE;
        }
        uint64_t t0 = now_usec();
        char *cur = read_definition(dom);
        if (!cur || !streq(cur, *xml)) {
                preimage_discard(w->preimages, pre);
                if (!cur) {
                        log_msg(LOG_INFO, "Domain %s was undefined or made transient while pcinuma planned it; "
                                          "not redefining it", name);
                        return COMMIT_DONE;
                }
                log_msg(LOG_DEBUG, "Domain %s changed while pcinuma planned it; planning again", name);
                free(*xml);
                *xml = cur;
                return COMMIT_CHANGED;
        }
        free(cur);
        virDomainPtr nd = virDomainDefineXMLFlags(w->conn, plan->out_xml, flags);
        note_window(w, now_usec() - t0);
        if (!nd) {
                preimage_discard(w->preimages, pre);
                redefine_failed(w, plan, name, lv_error());
                return COMMIT_DONE;
        }
        struct preimage_dropped dropped;
        preimage_prune(w->preimages, pre, s->uuid, &dropped);
        log_dropped(w, name, s, &dropped);
        preimage_dropped_done(&dropped);
        /* Check it once its event is in: see verify().  No event comes in
         * while we process, so the count now is the count at the define. */
        verify_clear(s);
        s->verifying = true;
        s->verify_base = s->events;
        s->verify_expected = 1 + changes;
        s->verify_started = now_usec();
        s->readback = virDomainGetXMLDesc(nd, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
        s->preimage = TAKE_PTR(pre);
        s->last_detail = -1;
        s->defines = 0;
        s->due = s->verify_started + VERIFY_TIMEOUT_USEC;
        virDomainFree(nd);

        bool running = virDomainIsActive(dom) == 1;
        log_fields_add(&plan->fields, "PCINUMA_PREIMAGE", "%s", s->preimage);
        log_event(LOG_INFO, PCINUMA_MID_DOMAIN_REDEFINED, &plan->fields, "Domain %s redefined: %s%s", name, plan->summary,
                  running ? " (it is running: the new layout applies at its next start)" : "");
        count_result(w, true);
        return COMMIT_DONE;
}

/* Plan from the definition, define if still current; plan again when it
 * changed meanwhile. */
static void redefine(struct watcher *w, struct dom_state *s, virDomainPtr dom) {
        const char *name = virDomainGetName(dom);
        _cleanup_free_ char *xml = read_definition(dom);
        if (!xml) {
                s->suspect = false;
                return;   /* gone, or transient: the prepare gate handles those */
        }
        for (unsigned round = 0; round < MAX_ROUNDS; round++) {
                struct redefine_plan plan = {0};
                if (!plan_on_main(w, xml, &plan))
                        return;
                if (s->suspect && round == 0 && !plan.redefine)
                        report_overwritten(w, s, name);
                s->suspect = false;
                enum commit_result r = COMMIT_DONE;
                if (should_define(s, name, xml, &plan))
                        r = commit(w, s, dom, name, &xml, &plan, round);
                redefine_plan_done(&plan);
                if (r == COMMIT_DONE)
                        return;
        }
        log_msg(LOG_WARNING, "Domain %s changed %d times while pcinuma planned it; not redefining it now "
                             "(it is looked at again once its events are quiet for %u ms)", name, MAX_ROUNDS, w->settle_ms);
}

/* One due domain: check our last define of it, then plan it. */
static void process_one(struct watcher *w, struct dom_state *s) {
        uint64_t now = now_usec();
        if (s->verifying) {
                uint64_t quiet = s->last_event + (uint64_t) w->settle_ms * USEC_PER_MSEC;
                bool have_event = s->events > s->verify_base;
                if (!have_event && now < s->verify_started + VERIFY_TIMEOUT_USEC) {
                        s->due = s->verify_started + VERIFY_TIMEOUT_USEC;
                        return;   /* our event's arrival makes it due */
                }
                if (have_event && now < quiet) {
                        s->due = quiet;
                        return;
                }
                if (!have_event) {
                        log_msg(LOG_WARNING, "No libvirt event came for pcinuma's define of domain %s within %" PRIu64
                                             " s; it cannot be checked for a concurrent edit", s->uuid,
                                VERIFY_TIMEOUT_USEC / USEC_PER_SEC);
                        verify_clear(s);
                }
        }
        virDomainPtr dom = virDomainLookupByUUIDString(w->conn, s->uuid);
        /* Only a domain libvirt says is gone is forgotten: a passing error
         * (a dropped connection) must not drop a pending check. */
        if (!dom && virGetLastErrorCode() != VIR_ERR_NO_DOMAIN) {
                log_msg(LOG_WARNING, "Cannot look up domain %s: %s; trying again in 1 s", s->uuid, lv_error());
                s->due = now + USEC_PER_SEC;
                return;
        }
        bool done = s->verifying && verify(w, s, dom);
        if (!dom) {
                send_forget(w, s->uuid);
                state_forget(w, s);
                return;
        }
        if (!done)
                redefine(w, s, dom);
        virDomainFree(dom);
}

static void list_all(struct watcher *w) {
        virDomainPtr *doms = NULL;
        int n = virConnectListAllDomains(w->conn, &doms, VIR_CONNECT_LIST_DOMAINS_PERSISTENT);
        if (n < 0)
                log_msg(LOG_WARNING, "Cannot list libvirt's domains: %s", lv_error());
        uint64_t now = now_usec();
        char (*uuids)[VIR_UUID_STRING_BUFLEN] = xcalloc(n > 0 ? (size_t) n : 1, sizeof(*uuids));
        const char **set = xcalloc(n > 0 ? (size_t) n : 1, sizeof(*set));
        size_t k = 0;
        for (int i = 0; i < n; i++) {
                if (virDomainGetUUIDString(doms[i], uuids[k]) == 0) {
                        struct dom_state *s = state_find(w, uuids[k], true);
                        if (!s->due)
                                s->due = now;   /* one still settling keeps its time */
                        set[k] = uuids[k];
                        k++;
                }
                virDomainFree(doms[i]);
        }
        free(doms);
        /* pcinumad's gate learns which domains are persistent; the events
         * that follow (dispatched after this) keep it current. */
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (n >= 0 && !w->parent_gone && wproto_encode_domains(&(struct wproto_domains) { set, k }, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
        free(set);
        free(uuids);
}

/* libvirt's client reads an event off the socket in one turn of the loop
 * and dispatches it in a later one: a domain whose timer runs out may have
 * an edit's event read but not yet counted, and verify() would then take
 * that edit for one inside the window.  So first a round trip (any event
 * sent before its reply is read while waiting for it), then a few ms for
 * the dispatch, and only then, if still due, the domain is looked at. */
#define SYNC_DELAY_USEC (2 * USEC_PER_MSEC)
static bool sync_events(struct watcher *w, uint64_t now) {
        bool any = false;
        for (size_t i = 0; i < w->n_states; i++) {
                struct dom_state *s = w->states[i];
                if (s->due && s->due <= now && !s->synced) {
                        s->synced = true;
                        s->due = now + SYNC_DELAY_USEC;
                        any = true;
                }
        }
        unsigned long v;
        if (any)
                (void) virConnectGetLibVersion(w->conn, &v);
        return any;
}

/* One domain per turn of the main loop: events that came meanwhile are
 * applied before the next one is looked at. */
static void process_turn(struct watcher *w) {
        w->process_due = 0;
        if (!w->conn)
                return;   /* the reconnect lists everything again */
        if (w->check_all) {
                w->check_all = false;
                list_all(w);
        }
        uint64_t now = now_usec();
        if (sync_events(w, now)) {
                schedule(w);
                return;
        }
        struct dom_state *next = NULL;
        for (size_t i = 0; i < w->n_states; i++) {
                struct dom_state *s = w->states[i];
                if (s->due && s->due <= now && (!next || s->due < next->due))
                        next = s;
        }
        if (next) {
                next->due = 0;
                next->synced = false;
                process_one(w, next);
        }
        schedule(w);
}

static void log_start_stop(virDomainPtr dom, const char *uuid, bool started) {
        /* The hook skips the daemon for these phases (they must cost
         * nothing); the journal still gets the VM's history. */
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_DOMAIN", "%s", virDomainGetName(dom));
        log_fields_add(&f, "PCINUMA_UUID", "%s", uuid);
        log_fields_add(&f, "PCINUMA_PHASE", "%s", started ? "started" : "stopped");
        log_event(LOG_INFO, started ? PCINUMA_MID_DOMAIN_STARTED : PCINUMA_MID_DOMAIN_STOPPED, &f, "Domain %s %s",
                  virDomainGetName(dom), started ? "started" : "stopped");
        log_fields_done(&f);
}

/* A lifecycle event, on the main thread, in the order libvirt sent them. */
static void apply_lifecycle(struct watcher *w, const struct queued_event *q) {
        const char *uuid = q->uuid;
        int event = q->event;
        if (event == VIR_DOMAIN_EVENT_STARTED || event == VIR_DOMAIN_EVENT_STOPPED)
                log_start_stop(q->dom, uuid, event == VIR_DOMAIN_EVENT_STARTED);
        restarter_lifecycle(w->restarter, q->dom, uuid, event, q->detail, q->at);
        if ((event != VIR_DOMAIN_EVENT_DEFINED && event != VIR_DOMAIN_EVENT_UNDEFINED) || !uuid[0])
                return;
        /* Every definition change counts (verify() compares the count
         * with what our define explains) and restarts the wait for quiet. */
        struct dom_state *s = state_find(w, uuid, true);
        uint64_t now = now_usec();
        s->events++;
        w->n_events++;
        s->last_event = now;
        if (event == VIR_DOMAIN_EVENT_DEFINED) {
                s->last_detail = q->detail;
                s->defines++;
        }
        s->due = now + (uint64_t) w->settle_ms * USEC_PER_MSEC;
        s->synced = false;
        schedule(w);
}

static void wake_main(struct watcher *w) {
        uint64_t one = 1;
        (void) !write(w->wake_fd, &one, sizeof one);
}

static void enqueue(struct watcher *w, virDomainPtr dom, const char *uuid, int event, int detail) {
        pthread_mutex_lock(&w->queue_lock);
        struct queued_event *q = GROW(w->queue, w->n_queue);
        if (dom)
                virDomainRef(dom);
        *q = (struct queued_event) { .dom = dom, .event = event, .detail = detail, .at = now_usec() };
        snprintf(q->uuid, sizeof q->uuid, "%s", uuid);
        pthread_mutex_unlock(&w->queue_lock);
        wake_main(w);
}

/* On libvirt's event thread: what cannot wait for the main thread is done
 * here (the persistence of a domain, for pcinumad's prepare gate); the
 * rest is queued. */
static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque) {
        struct watcher *w = opaque;
        (void) conn;
        char uuid[VIR_UUID_STRING_BUFLEN] = "";
        (void) virDomainGetUUIDString(dom, uuid);
        if ((event == VIR_DOMAIN_EVENT_DEFINED || event == VIR_DOMAIN_EVENT_UNDEFINED) && uuid[0])
                send_domain(w, uuid, event == VIR_DOMAIN_EVENT_DEFINED);
        enqueue(w, dom, uuid, event, detail);
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
        restarter_disconnected(w->restarter);
        set_connected(w, false);
}

/* On libvirt's event thread: for the main thread. */
static void on_close(virConnectPtr conn, int reason, void *opaque) {
        struct watcher *w = opaque;
        (void) conn;
        enqueue(w, NULL, "", -1, reason);
}

static void apply_close(struct watcher *w, int reason) {
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
        w->reconnect_due = now_usec() + BACKOFF_MIN_MS * USEC_PER_MSEC;
}

/* The events libvirt's thread queued, in order. */
static void apply_queue(struct watcher *w) {
        uint64_t n;
        (void) !read(w->wake_fd, &n, sizeof n);
        for (;;) {
                pthread_mutex_lock(&w->queue_lock);
                struct queued_event *v = w->queue;
                size_t k = w->n_queue;
                w->queue = NULL;
                w->n_queue = 0;
                pthread_mutex_unlock(&w->queue_lock);
                if (!k)
                        return;
                for (size_t i = 0; i < k; i++) {
                        if (!v[i].dom)
                                apply_close(w, v[i].detail);
                        else {
                                apply_lifecycle(w, &v[i]);
                                virDomainFree(v[i].dom);
                        }
                }
                free(v);
        }
}

static void try_connect(struct watcher *w) {
        w->reconnect_due = 0;
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
                w->reconnect_due = now_usec() + (uint64_t) w->backoff_ms * USEC_PER_MSEC;
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
        /* Catch up on whatever was defined while we were away; checks of
         * earlier defines are void: their events may be lost. */
        for (size_t i = 0; i < w->n_states; i++)
                verify_clear(w->states[i]);
        recheck(w, NULL);
}

/* libvirt's event thread: it runs libvirt's loop (connections, keepalives,
 * events) until told to stop, and never blocks on anything else. */
static void *event_thread(void *userdata) {
        struct watcher *w = userdata;
        while (!w->loop_stop)
                if (virEventRunDefaultImpl() < 0) {
                        log_msg(LOG_ERR, "libvirt's event loop failed: %s", lv_error());
                        w->parent_gone = true;
                        wake_main(w);
                        break;
                }
        return NULL;
}

static void on_wake_timer(int timer, void *opaque) {
        (void) opaque;
        virEventUpdateTimeout(timer, -1);
}

static int ms_until(uint64_t due, uint64_t now) {
        if (!due)
                return -1;
        if (due <= now)
                return 0;
        uint64_t ms = (due - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC;
        return ms > INT_MAX ? INT_MAX : (int) ms;
}

static int min_timeout(int a, int b) {
        return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

/* The main thread: pcinumad's messages, the queued events, the connection,
 * one domain per turn, and the restarts' steps, until pcinumad goes (EOF
 * on the link, or SIGTERM: pcinumad stopping us, or dying, through
 * PR_SET_PDEATHSIG), so libvirt is closed and everything freed on the way
 * out (the sanitizer pass checks for leaks at exit). */
static void main_loop(struct watcher *w, int sfd) {
        while (!w->parent_gone) {
                apply_queue(w);
                restarter_drain(w->restarter);
                uint64_t now = now_usec();
                if (w->reconnect_due && w->reconnect_due <= now)
                        try_connect(w);
                else if (w->process_due && w->process_due <= now)
                        process_turn(w);
                uint64_t restart_due = restarter_work(w->restarter, now_usec());
                if (w->parent_gone)
                        break;
                now = now_usec();
                int timeout = min_timeout(ms_until(w->reconnect_due, now), ms_until(restart_due, now));
                if (w->conn)
                        timeout = min_timeout(timeout, ms_until(w->process_due, now));
                struct pollfd p[] = {
                        { .fd = w->fd, .events = POLLIN },
                        { .fd = w->wake_fd, .events = POLLIN },
                        { .fd = restarter_fd(w->restarter), .events = POLLIN },
                        { .fd = sfd, .events = POLLIN },
                };
                if (poll(p, ELEMENTSOF(p), timeout) < 0 && errno != EINTR) {
                        log_msg(LOG_ERR, "poll: %s", strerror(errno));
                        break;
                }
                if (p[0].revents)
                        (void) read_msgs(w, false, NULL);
                struct signalfd_siginfo si;
                if (p[3].revents && read(sfd, &si, sizeof si) > 0)
                        w->parent_gone = true;
        }
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinuma-watcher --uri URI [--log-target journal|stderr|auto] [--fd N]\n"
                "                       [--settle-ms N] [--state-dir DIR] [--preimage-max-bytes N]\n"
                "\n"
                "pcinumad's libvirt watcher.  pcinumad starts it; it is not meant to be run by hand.\n"
                "It talks to pcinumad over the socket on fd N (default 3) and to libvirt at URI, and\n"
                "redefines persistent domains with the topology pcinumad plans for them, once their\n"
                "events have been quiet for N ms (default %d), keeping what it replaces in\n"
                "DIR/preimages (default " PCINUMA_DEFAULT_STATE_DIR "), at most N bytes of them\n"
                "(default %" PRIu64 ").\n", SETTLE_MS_DEFAULT, PREIMAGE_MAX_BYTES_DEFAULT);
#if PCINUMA_STAND_INS
        fprintf(f, "A test build: --stand-ins FILE reads pcinumad's stand-in table (pcinumad(8)).\n");
#endif
}

enum {
        ARG_URI = 0x100,
        ARG_LOG_TARGET,
        ARG_FD,
        ARG_VERSION,
        ARG_SETTLE_MS,
        ARG_STATE_DIR,
        ARG_PREIMAGE_MAX,
#if PCINUMA_STAND_INS
        ARG_STAND_INS,
#endif
};

static const struct option opts[] = {
        { "uri", required_argument, NULL, ARG_URI },
        { "log-target", required_argument, NULL, ARG_LOG_TARGET },
        { "fd", required_argument, NULL, ARG_FD },
        { "settle-ms", required_argument, NULL, ARG_SETTLE_MS },
        { "state-dir", required_argument, NULL, ARG_STATE_DIR },
        { "preimage-max-bytes", required_argument, NULL, ARG_PREIMAGE_MAX },
#if PCINUMA_STAND_INS
        { "stand-ins", required_argument, NULL, ARG_STAND_INS },
#endif
        { "version", no_argument, NULL, ARG_VERSION },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
};

/* What the command line asks for besides the watcher's own fields (--uri,
 * --fd, --settle-ms, --stand-ins go straight into struct watcher). */
struct args {
        const char *state_dir;
        uint64_t preimage_max;
        enum log_target target;
};

/* One option that takes a checked value (option c, with its argument arg)
 * into w or a.  Prints what is wrong and returns -EINVAL when arg is bad. */
static int parse_value_option(int c, char *arg, struct watcher *w, struct args *a) {
        uint64_t v;

        switch (c) {
        case ARG_LOG_TARGET:
                if (log_target_from_string(arg, &a->target) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --log-target: expected journal, stderr or auto, not '%s'\n", arg);
                        return -EINVAL;
                }
                return 0;
        case ARG_FD:
                if (parse_uint(arg, 10, INT_MAX, &v) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --fd: not a file descriptor number: '%s'\n", arg);
                        return -EINVAL;
                }
                w->fd = (int) v;
                return 0;
        case ARG_SETTLE_MS:
                if (parse_uint(arg, 10, SETTLE_MS_MAX, &v) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --settle-ms: expected 0..%d, not '%s'\n", SETTLE_MS_MAX, arg);
                        return -EINVAL;
                }
                w->settle_ms = (unsigned) v;
                return 0;
        case ARG_STATE_DIR:
                if (arg[0] != '/') {
                        fprintf(stderr, "pcinuma-watcher: --state-dir: expected an absolute path, not '%s'\n", arg);
                        return -EINVAL;
                }
                a->state_dir = arg;
                return 0;
#if PCINUMA_STAND_INS
        case ARG_STAND_INS: {
                _cleanup_free_ char *err = NULL;
                standins_free(w->stand_ins);
                w->stand_ins = NULL;
                if (standins_load_file(arg, &w->stand_ins, &err) < 0) {
                        fprintf(stderr, "pcinuma-watcher: --stand-ins: %s\n", err);
                        return -EINVAL;
                }
                return 0;
        }
#endif
        default: /* ARG_PREIMAGE_MAX */
                if (parse_uint(arg, 10, UINT64_MAX, &a->preimage_max) < 0 || a->preimage_max == 0) {
                        fprintf(stderr, "pcinuma-watcher: --preimage-max-bytes: expected a positive number of "
                                "bytes, not '%s'\n", arg);
                        return -EINVAL;
                }
                return 0;
        }
}

/* The command line into w and a (a set to the defaults first).  Returns 1
 * to go on, 0 when done (--help, --version), or -EINVAL after saying what
 * is wrong (--uri is required). */
static int parse_args(int argc, char **argv, struct watcher *w, struct args *a) {
        int c;

        *a = (struct args) {
                .state_dir = PCINUMA_DEFAULT_STATE_DIR,
                .preimage_max = PREIMAGE_MAX_BYTES_DEFAULT,
                .target = LOG_TARGET_AUTO,
        };
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
                switch (c) {
                case ARG_URI:
                        w->uri = optarg;
                        break;
                case ARG_VERSION:
                        printf("pcinuma-watcher %s\n", PCINUMA_VERSION);
                        return 0;
                case 'h':
                        usage(stdout);
                        return 0;
                case ARG_LOG_TARGET:
                case ARG_FD:
                case ARG_SETTLE_MS:
                case ARG_STATE_DIR:
                case ARG_PREIMAGE_MAX:
#if PCINUMA_STAND_INS
                case ARG_STAND_INS:
#endif
                        if (parse_value_option(c, optarg, w, a) < 0)
                                return -EINVAL;
                        break;
                default:
                        usage(stderr);
                        return -EINVAL;
                }
        if (!w->uri || optind < argc) {
                usage(stderr);
                return -EINVAL;
        }
        return 1;
}

/* The link to pcinumad on w->fd (non-blocking, closed on exec), and the
 * signals: SIGTERM (sent by pcinumad, or by the kernel when pcinumad dies)
 * is read from the signalfd returned in *ret_sfd (-1 if none could be
 * made), SIGPIPE ignored.  Returns -errno if w->fd is not open. */
static int setup_link(struct watcher *w, int *ret_sfd) {
        int fl = fcntl(w->fd, F_GETFL);
        if (fl < 0 || fcntl(w->fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return -errno;
        (void) fcntl(w->fd, F_SETFD, FD_CLOEXEC);
        /* Go when pcinumad goes, even if it is killed without closing. */
        (void) prctl(PR_SET_PDEATHSIG, SIGTERM);
        signal(SIGPIPE, SIG_IGN);
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        *ret_sfd = sigprocmask(SIG_BLOCK, &term, NULL) == 0 ? signalfd(-1, &term, SFD_CLOEXEC | SFD_NONBLOCK) : -1;
        return 0;
}

/* libvirt, its event loop on a thread of its own, and the restarter.
 * Logs what failed and returns -1 if any of it cannot be set up. */
static int setup_libvirt(struct watcher *w) {
        /* Restarts call libvirt from worker threads: initialise it before
         * any thread does (libvirt asks multithreaded programs to). */
        if (virInitialize() < 0) {
                log_msg(LOG_ERR, "Cannot initialise libvirt: %s", lv_error());
                return -1;
        }
        virSetErrorFunc(NULL, silent_error_func);
        if (virEventRegisterDefaultImpl() < 0) {
                log_msg(LOG_ERR, "Cannot set up libvirt's event loop: %s", lv_error());
                return -1;
        }
        w->restarter = restarter_new(&restart_ops, w, w->preimages);
        w->wake_timer = virEventAddTimeout(-1, on_wake_timer, w, NULL);
        w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->wake_timer < 0 || w->wake_fd < 0 || !w->restarter) {
                log_msg(LOG_ERR, "Cannot set up the watcher's threads: %s", w->wake_fd < 0 ? strerror(errno) : lv_error());
                return -1;
        }
        int e = pthread_create(&w->loop_thread, NULL, event_thread, w);
        if (e != 0) {
                log_msg(LOG_ERR, "Cannot start libvirt's event thread: %s", strerror(e));
                return -1;
        }
        w->loop_running = true;
        return 0;
}

/* After the main loop: no more events (the callbacks deregistered, the
 * event thread gone), then the restarts under way finish: a domain they
 * destroyed must run again (their domains keep the connection open for
 * their calls).  Then everything is freed. */
static void teardown(struct watcher *w) {
        disconnect(w);
        w->loop_stop = true;
        virEventUpdateTimeout(w->wake_timer, 0);
        pthread_join(w->loop_thread, NULL);
        w->restarter = restarter_free(w->restarter);
        for (size_t i = 0; i < w->n_queue; i++)
                if (w->queue[i].dom)
                        virDomainFree(w->queue[i].dom);
        free(w->queue);
        virEventRemoveTimeout(w->wake_timer);
        close(w->wake_fd);
        while (w->n_states > 0)
                state_forget(w, w->states[0]);
        free(w->states);
        preimage_store_free(w->preimages);
#if PCINUMA_STAND_INS
        standins_free(w->stand_ins);
#endif
        if (w->schema)
                xmlRelaxNGFree(w->schema);
        free(w->last_error);
        proto_decoder_reset(&w->dec);
}

/* Parse the command line (exit 2 on a bad one), open the pre-image store
 * and the schema, set up the link (exit 2 without one) and libvirt (exit 1
 * on failure), then run until pcinumad goes: exit 0 then, 1 if the loop
 * failed. */
int main(int argc, char **argv) {
        struct watcher w = { .fd = 3, .lifecycle_cb = -1, .backoff_ms = BACKOFF_MIN_MS, .settle_ms = SETTLE_MS_DEFAULT,
                             .wake_fd = -1, .write_lock = PTHREAD_MUTEX_INITIALIZER,
                             .queue_lock = PTHREAD_MUTEX_INITIALIZER };
        struct args a;
        int r = parse_args(argc, argv, &w, &a);
        if (r <= 0)
                return r < 0 ? 2 : 0;

        log_setup(a.target, "pcinumad");
        _cleanup_free_ char *pre_dir = xasprintf("%s/preimages", a.state_dir);
        w.preimages = preimage_store_new(pre_dir, a.preimage_max);
        w.schema = load_schema();

        _cleanup_close_ int sfd = -1;
        r = setup_link(&w, &sfd);
        if (r < 0) {
                fprintf(stderr, "pcinuma-watcher: fd %d: %s (pcinumad starts this program with its socket there)\n",
                        w.fd, strerror(-r));
                return 2;
        }
        if (setup_libvirt(&w) < 0)
                return 1;
        w.reconnect_due = now_usec();
        send_status(&w);

        main_loop(&w, sfd);

        teardown(&w);
        return w.parent_gone ? 0 : 1;
}

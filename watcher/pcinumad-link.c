/* pcinuma-watcher's side of the link to pcinumad (lib/base/watcher-protocol.h):
 * the frames it sends (both threads send: one frame at a time), the
 * messages it reads, and the plan requests it waits for an answer to.
 * All planning is pcinumad's; this file only asks and tells. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "watcher.h"

void plan_answer_done(struct plan_answer *p) {
        /* The first n_borrowed belong to msg; any added here are ours. */
        for (size_t i = p->n_borrowed; i < p->fields.n; i++)
                free(p->fields.v[i].value);
        free(p->fields.v);
        p->fields = (struct log_fields) {0};
        wproto_msg_done(&p->msg);
}

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
void link_send_forget(struct watcher *w, const char *uuid) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (!w->parent_gone && wproto_encode_forget(&(struct wproto_forget) { .uuid = uuid }, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
}

void link_send_status(struct watcher *w) {
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

void link_set_connected(struct watcher *w, bool connected) {
        w->connected = connected;
        link_send_status(w);
}

void link_set_last_error(struct watcher *w, const char *s) {
        free(w->last_error);
        w->last_error = s ? xstrdup(s) : NULL;
        link_send_status(w);
}

void link_count_result(struct watcher *w, bool redefined) {
        if (redefined)
                w->n_redefined++;
        else
                w->n_failed++;
        link_send_status(w);
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
                w->on_recheck(w, msg.recheck.uuid);
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
bool link_read_msgs(struct watcher *w, bool wait, struct wproto_msg *ret_planned) {
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
                if (frame_decoder_feed_all(&w->dec, buf, (size_t) n, handle_msg, &ctx, &err) < 0) {
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
                if (!link_read_msgs(w, true, ret))
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
bool link_plan(struct watcher *w, const char *xml, struct plan_answer *ret) {
        const struct wproto_plan req = { .id = ++w->next_id, .xml = xml, .xml_len = strlen(xml) };
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (w->parent_gone || wproto_encode_plan(&req, &buf, &len) < 0)
                return false;

        struct plan_answer p = { .prio = LOG_DEBUG };
        if (!ask_main(w, req.id, buf, len, &p.msg)) {
                plan_answer_done(&p);
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

const struct restarter_ops link_restart_ops = {
        .plan = plan_for_restart,
        .report = report_restart,
};

/* A domain's persistence changed: pcinumad's prepare gate must know at
 * once (a client starts right after its define), before anything else. */
void link_send_domain(struct watcher *w, const char *uuid, bool persistent) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (!w->parent_gone && wproto_encode_domain(&(struct wproto_domain) { uuid, persistent }, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
}

/* Every persistent domain (at connect): pcinumad's gate learns which
 * domains are persistent; the events that follow keep it current. */
void link_send_domains(struct watcher *w, const char *const *uuids, size_t n) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (!w->parent_gone && wproto_encode_domains(&(struct wproto_domains) { uuids, n }, &buf, &len) >= 0)
                (void) send_frame(w, buf, len);
}

/* pcinumad's side of the link to its libvirt watcher: starts and
 * supervises the pcinuma-watcher process, holds the link's limits, and
 * passes its requests on to the owner's callbacks (see watcher-link.h). */
#include "watcher-link.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "frame.h"
#include "log.h"
#include "paths.h"
#include "util.h"
#include "watcher-protocol.h"

/* Restart a child that died after RESTART_MIN_MS, doubling up to
 * RESTART_MAX_MS; one that ran for RESTART_STABLE_USEC starts the count
 * afresh. */
#define USEC_PER_MSEC UINT64_C(1000)
#define RESTART_MIN_MS 500
#define RESTART_MAX_MS 30000
#define RESTART_STABLE_USEC (60 * USEC_PER_SEC)
#define STOP_TIMEOUT_MS 5000

/* The link must never stall pcinumad, nor a watcher that stopped reading
 * it stall the define-time path unnoticed:
 *   - an answer to a plan request must be read within ANSWER_DEADLINE_MS
 *     (the watcher waits for it, so a healthy one reads it at once);
 *   - what waits to be written to the watcher may not grow beyond two
 *     frames and OUT_SLACK (one answer is outstanding at a time; the rest
 *     are small recheck requests);
 *   - no frame larger than the link's limit is ever sent: an answer that
 *     would be is replaced by an error answer, which the watcher logs.
 * A watcher that breaks one of these is killed and restarted with the
 * usual backoff.  PCINUMA_WATCHER_TIMEOUT_MS and PCINUMA_WATCHER_FRAME_MAX
 * lower the deadline and the frame limit (for tests). */
#define ANSWER_DEADLINE_MS 60000
#define OUT_SLACK (1024u * 1024u)

struct watcher_link {
        const struct watcher_link_ops *ops;  /* the owner's, with userdata */
        void *userdata;
        sd_event *event;
        char *program;
        char *uri;
        char *log_target;
        unsigned settle_ms;             /* passed on to each child */
        char *state_dir;
        uint64_t preimage_max_bytes;
#if PCINUMA_STAND_INS
        char *stand_ins_file;
#endif

        pid_t pid;                      /* 0 when not running */
        uint64_t started_usec;
        int fd;                         /* our end of the socketpair, -1 when not running */
        sd_event_source *io_src, *child_src, *restart_timer;
        struct frame_decoder dec;
        char *out;                      /* frames not yet written */
        size_t out_len;
        size_t frame_max, out_max;      /* the link's limits (see above) */
        uint64_t deadline_usec;
        sd_event_source *stall_timer;
        bool answer_unread;             /* an answer may still sit unread in the link */
        bool progress;                  /* the watcher read something since the timer was armed */
        size_t last_queued;             /* bytes in the link at the last look (SIOCOUTQ + out_len) */
        unsigned restarts;
        int restart_ms;
        char *last_exit;                /* how the last child ended */
        char *kill_reason;              /* why pcinumad killed the running child, or NULL */

        /* the child's last report; counts from earlier children add up in base_* */
        bool connected;
        uint64_t n_redefined, n_failed, base_redefined, base_failed, base_conflicts;
        char *last_error;
        struct wproto_status child_status;  /* its last status message's counters (last_error: above) */
};

char *watcher_link_find_program(void) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
                self[n] = 0;
                char *slash = strrchr(self, '/');
                if (slash) {
                        *slash = 0;
                        char *p = xasprintf("%s/pcinuma-watcher", self);
                        if (access(p, X_OK) == 0)
                                return p;
                        free(p);
                }
        }
        return xstrdup(PCINUMA_WATCHER_PATH);
}

static void child_gone(struct watcher_link *w);
static int spawn(struct watcher_link *w);

/* --- writing ---------------------------------------------------------- */

static void close_link(struct watcher_link *w);

/* Kill a watcher that broke the link's rules (it is restarted with backoff
 * when its exit is reported); what it did goes to the log and status. */
_printf_(2, 3)
static void kill_watcher(struct watcher_link *w, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *what = xvasprintf(fmt, ap);
        va_end(ap);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
        log_event(LOG_ERR, PCINUMA_MID_LIBVIRT_CONNECTION, &f, "pcinuma-watcher (pid %d) %s; killing it", (int) w->pid, what);
        log_fields_done(&f);
        free(w->last_error);
        w->last_error = xasprintf("pcinuma-watcher %s", what);
        free(w->kill_reason);
        w->kill_reason = TAKE_PTR(what);
        if (w->pid > 0)
                (void) kill(w->pid, SIGKILL);
        close_link(w);
}

/* Bytes sent to the watcher that it has not read yet: what the kernel
 * holds for it (SIOCOUTQ: freed as the peer reads) and what waits here.
 * A drop since the last look means the watcher reads. */
static size_t queued(struct watcher_link *w) {
        int n = 0;
        if (w->fd < 0 || ioctl(w->fd, SIOCOUTQ, &n) < 0 || n < 0)
                n = 0;
        return (size_t) n + w->out_len;
}

static void look_at_link(struct watcher_link *w) {
        size_t q = queued(w);
        if (q < w->last_queued)
                w->progress = true;
        w->last_queued = q;
        if (q == 0)
                w->answer_unread = false;
}

static int on_stall_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        struct watcher_link *w = userdata;
        if (w->fd < 0)
                return 0;
        look_at_link(w);
        if (!w->answer_unread)
                return 0;
        if (w->progress) {
                /* Reading, if slowly: give it another period. */
                w->progress = false;
                (void) sd_event_source_set_time_relative(s, w->deadline_usec);
                (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                return 0;
        }
        kill_watcher(w, "did not read pcinumad's answer to its plan request within %llu ms (%zu bytes still in the link)",
                     (unsigned long long) (w->deadline_usec / USEC_PER_MSEC), w->last_queued);
        return 0;
}

static void flush_out(struct watcher_link *w) {
        size_t off = 0;
        while (off < w->out_len) {
                ssize_t n = write(w->fd, w->out + off, w->out_len - off);
                if (n > 0) {
                        off += (size_t) n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                break;          /* EAGAIN: wait for EPOLLOUT; an error shows as a hangup */
        }
        memmove(w->out, w->out + off, w->out_len - off);
        w->out_len -= off;
        (void) sd_event_source_set_io_events(w->io_src, EPOLLIN | (w->out_len ? EPOLLOUT : 0));
}

static void send_frame(struct watcher_link *w, const char *buf, size_t len, bool answer) {
        if (w->fd < 0)
                return;
        look_at_link(w);
        w->out = xrealloc(w->out, w->out_len + len);
        memcpy(w->out + w->out_len, buf, len);
        w->out_len += len;
        flush_out(w);
        w->last_queued = queued(w);
        if (w->out_len > w->out_max) {
                kill_watcher(w, "is not reading its link: %zu bytes wait to be sent to it", w->out_len);
                return;
        }
        if (answer) {
                w->answer_unread = true;
                int enabled = SD_EVENT_OFF;
                (void) sd_event_source_get_enabled(w->stall_timer, &enabled);
                if (enabled == SD_EVENT_OFF) {
                        w->progress = false;
                        (void) sd_event_source_set_time_relative(w->stall_timer, w->deadline_usec);
                        (void) sd_event_source_set_enabled(w->stall_timer, SD_EVENT_ONESHOT);
                }
        }
}

/* --- reading ---------------------------------------------------------- */

void redefine_plan_done(struct redefine_plan *p) {
        free(p->out_xml);
        free(p->summary);
        log_fields_done(&p->fields);
        *p = (struct redefine_plan) {0};
}

/* The fields of an answer: all of them, or (for an error answer) only
 * those that name the domain.  The caller frees the array, not the strings. */
static struct wproto_field *answer_fields(const struct redefine_plan *p, bool names_only, size_t *ret_n) {
        struct wproto_field *v = xcalloc(p->fields.n ? p->fields.n : 1, sizeof(*v));
        size_t n = 0;
        for (size_t i = 0; i < p->fields.n; i++) {
                const char *k = p->fields.v[i].key;
                if (names_only && strcmp(k, "PCINUMA_DOMAIN") != 0 && strcmp(k, "PCINUMA_UUID") != 0)
                        continue;
                v[n++] = (struct wproto_field) { k, p->fields.v[i].value };
        }
        *ret_n = n;
        return v;
}

/* The answer to plan request id, as a frame.  Never one over the link's
 * limit (the watcher would drop the link): an error answer says why
 * instead, and the watcher logs it. */
static int encode_answer(struct watcher_link *w, uint64_t id, const struct redefine_plan *p, char **ret, size_t *ret_len) {
        _cleanup_free_ struct wproto_field *fields = NULL, *names = NULL;
        struct wproto_planned a = { .id = id, .redefine = p->redefine, .xml = p->out_xml, .summary = p->summary,
                                    .prio = p->prio };
        a.fields = fields = answer_fields(p, false, &a.n_fields);
        int r = wproto_encode_planned(&a, ret, ret_len);
        if (r >= 0 && *ret_len - FRAME_HEADER_SIZE <= w->frame_max)
                return 0;
        if (r < 0 && r != -EMSGSIZE)
                return r;

        _cleanup_free_ char *why = r < 0 ? xasprintf("the answer is over the link's limit of %zu bytes", w->frame_max)
                                         : xasprintf("the answer would be %zu bytes, over the link's limit of %zu bytes",
                                                     *ret_len - FRAME_HEADER_SIZE, w->frame_max);
        _cleanup_free_ char *summary = xasprintf("cannot be redefined: %s; definition left as it is", why);
        struct wproto_planned e = { .id = id, .redefine = false, .error = why, .summary = summary, .prio = LOG_ERR };
        e.fields = names = answer_fields(p, true, &e.n_fields);
        if (r >= 0)
                free(TAKE_PTR(*ret));
        return wproto_encode_planned(&e, ret, ret_len);
}

/* Send the answer p to request id, and free p. */
static void send_answer(struct watcher_link *w, uint64_t id, struct redefine_plan *p) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        int r = encode_answer(w, id, p, &buf, &len);
        redefine_plan_done(p);
        if (r >= 0)
                send_frame(w, buf, len, true);
}

static void on_plan(struct watcher_link *w, const struct wproto_plan *req) {
        struct redefine_plan p = {0};
        w->ops->plan(w->userdata, req->xml, req->xml_len, &p);
        send_answer(w, req->id, &p);
}

/* The watcher asks for the plan of a running domain's live XML, to
 * restart it into the plan. */
static void on_plan_restart(struct watcher_link *w, const struct wproto_plan_restart *req) {
        struct redefine_plan p = {0};
        w->ops->plan_restart(w->userdata, req->uuid, req->xml, req->xml_len, &p);
        send_answer(w, req->id, &p);
}

void watcher_link_counters(struct watcher_link *w, bool *ret_connected, uint64_t *ret_redefinitions, uint64_t *ret_failures,
                           uint64_t *ret_conflicts) {
        *ret_connected = w->connected;
        *ret_redefinitions = w->base_redefined + w->n_redefined;
        *ret_failures = w->base_failed + w->n_failed;
        *ret_conflicts = w->base_conflicts + w->child_status.conflicts;
}

static void on_status(struct watcher_link *w, const struct wproto_status *st) {
        bool was = w->connected;
        w->connected = st->connected;
        w->n_redefined = st->redefinitions;
        w->n_failed = st->failures;
        free(w->last_error);
        w->last_error = st->last_error ? xstrdup(st->last_error) : NULL;
        if (w->connected && !was)
                w->restart_ms = RESTART_MIN_MS;
        w->child_status = *st;
        w->child_status.last_error = NULL;      /* it points into the message */
        /* Without libvirt it cannot tell what is persistent, nor restart. */
        if (!w->connected)
                w->ops->persistence_lost(w->userdata);
        w->ops->counters_changed(w->userdata);
}

static void handle_msg(json_object *o, void *userdata) {
        struct watcher_link *w = userdata;
        if (w->fd < 0)
                return;   /* killed while this read was being handled */
        struct wproto_msg msg;
        _cleanup_free_ char *err = NULL;
        if (wproto_decode(o, &msg, &err) < 0) {
                log_msg(LOG_WARNING, "pcinuma-watcher sent %s; ignoring it", err);
                return;
        }
        if (msg.type == WPROTO_PLAN)
                on_plan(w, &msg.plan);
        else if (msg.type == WPROTO_STATUS)
                on_status(w, &msg.status);
        else if (msg.type == WPROTO_FORGET)
                w->ops->forget(w->userdata, msg.forget.uuid);
        else if (msg.type == WPROTO_DOMAINS)
                w->ops->persistent_all(w->userdata, &msg.domains);
        else if (msg.type == WPROTO_DOMAIN)
                w->ops->persistent_one(w->userdata, msg.domain.uuid, msg.domain.persistent);
        else if (msg.type == WPROTO_PLAN_RESTART)
                on_plan_restart(w, &msg.plan_restart);
        else if (msg.type == WPROTO_RESTARTED)
                w->ops->restarted(w->userdata, &msg.restarted);
        else
                log_msg(LOG_WARNING, "pcinuma-watcher sent a message of unknown type %s; ignoring it",
                        wproto_type_to_string(msg.type));
        wproto_msg_done(&msg);
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        struct watcher_link *w = userdata;
        if (revents & EPOLLOUT)
                flush_out(w);
        if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                return 0;
        char buf[65536];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n <= 0) {
                /* It closed its end: it is exiting (the child source reports how). */
                w->io_src = sd_event_source_disable_unref(w->io_src);
                return 0;
        }
        _cleanup_free_ char *err = NULL;
        if (frame_decoder_feed_all(&w->dec, buf, (size_t) n, handle_msg, w, &err) < 0)
                kill_watcher(w, "sent a bad message (%s)", err ? err : "?");
        return 0;
}

/* --- the child's life ------------------------------------------------- */

static void close_link(struct watcher_link *w) {
        w->io_src = sd_event_source_disable_unref(w->io_src);
        if (w->stall_timer)
                (void) sd_event_source_set_enabled(w->stall_timer, SD_EVENT_OFF);
        w->answer_unread = w->progress = false;
        w->last_queued = 0;
        if (w->fd >= 0)
                (void) close(w->fd);
        w->fd = -1;
        free(w->out);
        w->out = NULL;
        w->out_len = 0;
        frame_decoder_reset(&w->dec);
}

static char *describe_exit(const siginfo_t *si) {
        if (si->si_code == CLD_EXITED)
                return xasprintf("exited with status %d", si->si_status);
        return xasprintf("was killed by signal %d (%s)", si->si_status, strsignal(si->si_status));
}

static int on_restart(sd_event_source *s, uint64_t usec, void *userdata) {
        struct watcher_link *w = userdata;
        w->restarts++;
        (void) spawn(w);
        return 0;
}

static void schedule_restart(struct watcher_link *w) {
        int ms = w->restart_ms;
        w->restart_ms = ms * 2 > RESTART_MAX_MS ? RESTART_MAX_MS : ms * 2;
        int r = sd_event_source_set_time_relative(w->restart_timer, (uint64_t) ms * USEC_PER_MSEC);
        if (r >= 0)
                r = sd_event_source_set_enabled(w->restart_timer, SD_EVENT_ONESHOT);
        if (r < 0)
                log_errno(LOG_ERR, r, "Cannot schedule a restart of pcinuma-watcher: %m; domains are not redefined until pcinumad restarts");
}

static int on_child(sd_event_source *s, const siginfo_t *si, void *userdata) {
        struct watcher_link *w = userdata;
        _cleanup_free_ char *how = describe_exit(si);
        bool stable = now_usec(CLOCK_MONOTONIC) - w->started_usec >= RESTART_STABLE_USEC;
        if (stable)
                w->restart_ms = RESTART_MIN_MS;
        free(w->last_exit);
        /* Killed by us: keep the reason with the exit, where the next
         * watcher's status messages cannot overwrite it. */
        w->last_exit = w->kill_reason ? xasprintf("%s (killed by pcinumad: pcinuma-watcher %s)", how, w->kill_reason)
                                      : xstrdup(how);
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_LIBVIRT_URI", "%s", w->uri);
        log_event(LOG_ERR, PCINUMA_MID_LIBVIRT_CONNECTION, &f,
                  "The libvirt watcher (pcinuma-watcher, pid %d) %s; restarting it in %d ms", (int) w->pid, how, w->restart_ms);
        log_fields_done(&f);
        child_gone(w);
        free(w->last_error);
        /* Killed by us: the reason matters more than the signal. */
        w->last_error = w->kill_reason ? xasprintf("pcinuma-watcher %s (killed by pcinumad)", w->kill_reason)
                                       : xasprintf("pcinuma-watcher %s", how);
        free(w->kill_reason);
        w->kill_reason = NULL;
        schedule_restart(w);
        return 0;
}

static void child_gone(struct watcher_link *w) {
        w->base_redefined += w->n_redefined;
        w->base_failed += w->n_failed;
        w->base_conflicts += w->child_status.conflicts;
        w->n_redefined = w->n_failed = 0;
        w->child_status = (struct wproto_status) {0};
        w->child_src = sd_event_source_disable_unref(w->child_src);
        close_link(w);
        w->pid = 0;
        w->connected = false;
        w->ops->persistence_lost(w->userdata);
        w->ops->counters_changed(w->userdata);
}

static int spawn(struct watcher_link *w) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                int r = log_errno(LOG_ERR, -errno, "Cannot create the socket for pcinuma-watcher: %m");
                schedule_restart(w);
                return r;
        }
        char settle[16], max_bytes[24];
        snprintf(settle, sizeof settle, "%u", w->settle_ms);
        snprintf(max_bytes, sizeof max_bytes, "%" PRIu64, w->preimage_max_bytes);
        char *argv[] = { w->program, (char *) "--uri", w->uri, (char *) "--log-target", w->log_target,
                         (char *) "--settle-ms", settle, (char *) "--state-dir", w->state_dir,
                         (char *) "--preimage-max-bytes", max_bytes, NULL, NULL, NULL };
#if PCINUMA_STAND_INS
        /* A test build: the watcher reads the same stand-in table. */
        if (w->stand_ins_file) {
                argv[ELEMENTSOF(argv) - 3] = (char *) "--stand-ins";
                argv[ELEMENTSOF(argv) - 2] = w->stand_ins_file;
        }
#endif
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int r = log_errno(LOG_ERR, -errno, "Cannot start pcinuma-watcher: fork: %m");
                (void) close(sv[0]);
                (void) close(sv[1]);
                schedule_restart(w);
                return r;
        }
        if (pid == 0) {
                /* Async-signal-safe calls only until exec. */
                sigset_t none;
                sigemptyset(&none);
                (void) sigprocmask(SIG_SETMASK, &none, NULL);
                (void) prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (getppid() != parent)
                        _exit(0);
                if (dup2(sv[1], 3) < 0)     /* dup2 clears FD_CLOEXEC on the copy */
                        _exit(127);
                execv(w->program, argv);
                static const char msg[] = "pcinumad: cannot execute the libvirt watcher program\n";
                (void) !write(STDERR_FILENO, msg, sizeof msg - 1);
                _exit(127);
        }
        (void) close(sv[1]);
        w->fd = sv[0];
        w->pid = pid;
        w->started_usec = now_usec(CLOCK_MONOTONIC);
        (void) fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) | O_NONBLOCK);

        int r = sd_event_add_io(w->event, &w->io_src, w->fd, EPOLLIN, on_io, w);
        if (r >= 0) {
                (void) sd_event_source_set_description(w->io_src, "libvirt-watcher-link");
                r = sd_event_add_child(w->event, &w->child_src, pid, WEXITED, on_child, w);
        }
        if (r < 0) {
                log_errno(LOG_ERR, r, "Cannot watch pcinuma-watcher (pid %d): %m; stopping it", (int) pid);
                (void) kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                child_gone(w);
                schedule_restart(w);
                return r;
        }
        (void) sd_event_source_set_description(w->child_src, "libvirt-watcher-process");
        log_msg(LOG_INFO, "Started the libvirt watcher for %s (%s, pid %d)", w->uri, w->program, (int) pid);
        return 0;
}

/* --- the API ------------------------------------------------------------ */

static void send_recheck(struct watcher_link *w, const char *uuid) {
        if (!w || w->fd < 0)
                return;   /* a (re)started watcher checks every domain anyway */
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        if (wproto_encode_recheck(&(struct wproto_recheck) { .uuid = uuid }, &buf, &len) >= 0)
                send_frame(w, buf, len, false);
}

void watcher_link_recheck_all(struct watcher_link *w) {
        send_recheck(w, NULL);
}

void watcher_link_recheck_domain(struct watcher_link *w, const char *uuid) {
        if (uuid && strlen(uuid) < 64)
                send_recheck(w, uuid);
}

void watcher_link_restart(struct watcher_link *w, const char *uuid, unsigned window_ms, uint64_t since_usec,
                          const char *const *files, size_t n_files, bool if_persistent) {
        if (!w || w->fd < 0 || !uuid)
                return;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        const struct wproto_restart m = { .uuid = uuid, .window_ms = window_ms, .since_us = since_usec,
                                          .files = files, .n_files = n_files, .if_persistent = if_persistent };
        if (wproto_encode_restart(&m, &buf, &len) >= 0)
                send_frame(w, buf, len, false);
}

/* A timer source on e, usec from now, off until armed, named for
 * debugging. */
static int add_idle_timer(sd_event *e, sd_event_source **ret, uint64_t usec, sd_event_time_handler_t cb, void *userdata,
                          const char *description) {
        int r = sd_event_add_time_relative(e, ret, CLOCK_MONOTONIC, usec, 0, cb, userdata);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(*ret, SD_EVENT_OFF);
        (void) sd_event_source_set_description(*ret, description);
        return 0;
}

int watcher_link_start(const struct watcher_link_config *cfg, const struct watcher_link_ops *ops, void *userdata, sd_event *e,
                       struct watcher_link **ret) {
        const char *program = cfg->program;
        struct watcher_link *w = xcalloc(1, sizeof(*w));
        w->ops = ops;
        w->userdata = userdata;
        w->event = sd_event_ref(e);
        w->program = xstrdup(program);
        w->uri = xstrdup(cfg->uri);
        w->log_target = xstrdup(cfg->log_target);
        w->settle_ms = cfg->settle_ms;
        w->state_dir = xstrdup(cfg->state_dir);
        w->preimage_max_bytes = cfg->preimage_max_bytes;
#if PCINUMA_STAND_INS
        w->stand_ins_file = cfg->stand_ins_file ? xstrdup(cfg->stand_ins_file) : NULL;
#endif
        w->fd = -1;
        w->restart_ms = RESTART_MIN_MS;
        w->frame_max = FRAME_MAX_PAYLOAD;
        w->deadline_usec = ANSWER_DEADLINE_MS * USEC_PER_MSEC;
        uint64_t v;
        const char *env = getenv("PCINUMA_WATCHER_FRAME_MAX");
        if (env && parse_uint(env, 10, FRAME_MAX_PAYLOAD, &v) == 0 && v >= 1024)
                w->frame_max = (size_t) v;
        env = getenv("PCINUMA_WATCHER_TIMEOUT_MS");
        if (env && parse_uint(env, 10, 3600 * 1000, &v) == 0 && v > 0)
                w->deadline_usec = v * USEC_PER_MSEC;
        w->out_max = 2 * (w->frame_max + FRAME_HEADER_SIZE) + OUT_SLACK;

        if (access(program, X_OK) < 0) {
                int r = log_errno(LOG_ERR, -errno, "Cannot start the libvirt watcher: %s: %m", program);
                watcher_link_stop(w);
                return r;
        }
        int r = add_idle_timer(e, &w->restart_timer, 0, on_restart, w, "libvirt-watcher-restart");
        if (r >= 0)
                r = add_idle_timer(e, &w->stall_timer, w->deadline_usec, on_stall_timer, w,
                                   "libvirt-watcher-answer-deadline");
        if (r < 0) {
                log_errno(LOG_ERR, r, "Cannot start the libvirt watcher: timer: %m");
                watcher_link_stop(w);
                return r;
        }
        r = spawn(w);
        if (r < 0) {
                watcher_link_stop(w);
                return r;
        }
        *ret = w;
        return 0;
}

struct watcher_link *watcher_link_stop(struct watcher_link *w) {
        if (!w)
                return NULL;
        if (w->pid > 0) {
                pid_t pid = w->pid;
                w->child_src = sd_event_source_disable_unref(w->child_src);
                /* EOF on its socket tells it to go; SIGTERM in case it is
                 * inside a libvirt call; SIGKILL if it still has not gone. */
                close_link(w);
                (void) kill(pid, SIGTERM);
                int status;
                bool reaped = false;
                for (int waited = 0; waited < STOP_TIMEOUT_MS && !reaped; waited += 10) {
                        pid_t r = waitpid(pid, &status, WNOHANG);
                        if (r == pid || (r < 0 && errno != EINTR))
                                reaped = true;
                        else
                                (void) usleep(10000);
                }
                if (!reaped) {
                        log_msg(LOG_WARNING, "pcinuma-watcher (pid %d) did not stop within %d ms; killing it", (int) pid, STOP_TIMEOUT_MS);
                        (void) kill(pid, SIGKILL);
                        (void) waitpid(pid, &status, 0);
                }
        }
        close_link(w);
        sd_event_source_disable_unref(w->restart_timer);
        sd_event_source_disable_unref(w->stall_timer);
        sd_event_unref(w->event);
        free(w->program);
        free(w->uri);
        free(w->log_target);
        free(w->state_dir);
#if PCINUMA_STAND_INS
        free(w->stand_ins_file);
#endif
        free(w->last_exit);
        free(w->last_error);
        free(w->kill_reason);
        free(w);
        return NULL;
}

json_object *watcher_link_status(struct watcher_link *w) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "uri", json_object_new_string(w->uri));
        json_object_object_add(o, "connected", json_object_new_boolean(w->connected));
        json_object_object_add(o, "redefinitions", json_object_new_int64((int64_t) (w->base_redefined + w->n_redefined)));
        json_object_object_add(o, "failures", json_object_new_int64((int64_t) (w->base_failed + w->n_failed)));
        json_object_object_add(o, "last_error", w->last_error ? json_object_new_string(w->last_error) : NULL);
        json_object *p = json_object_new_object();
        json_object_object_add(p, "program", json_object_new_string(w->program));
        json_object_object_add(p, "pid", w->pid > 0 ? json_object_new_int((int) w->pid) : NULL);
        json_object_object_add(p, "restarts", json_object_new_int((int) w->restarts));
        json_object_object_add(p, "last_exit", w->last_exit ? json_object_new_string(w->last_exit) : NULL);
        json_object_object_add(o, "process", p);
        /* The watcher's other counters, as it last reported them. */
        const struct wproto_status *c = &w->child_status;
        if (c->has_counters) {
                const struct { const char *key; uint64_t v; } counters[] = {
                        { "settle_ms", c->settle_ms }, { "pending", c->pending }, { "events", c->events },
                        { "conflicts", c->conflicts }, { "undone", c->undone }, { "windows", c->windows },
                        { "window_us_sum", c->window_us_sum }, { "window_us_max", c->window_us_max },
                };
                for (size_t i = 0; i < ELEMENTSOF(counters); i++)
                        json_object_object_add(o, counters[i].key, json_object_new_int64((int64_t) counters[i].v));
        }
        return o;
}

/* The hook protocol server (docs/security.md, "Who can reach the
 * daemon"): the listening socket, one non-blocking connection per client
 * on the event loop, the peer check, per-client deadlines, and what to do
 * when the process runs out of descriptors.  A hook request with a large
 * domain XML is decided on a worker thread, and a prepare call that waits
 * for a define is held by the manager (the owner's job, given back by its
 * handle() callback): its connection waits for the answer without
 * reading further (server_reply() resumes it), and without a deadline,
 * since the wait is pcinumad's, not the client's.  The server knows
 * nothing of the manager: it serves through struct server_ops and counts
 * what it refused itself in struct server_stats. */
#include "server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include "hook-protocol.h"
#include "log.h"

struct conn {
        struct server *server;
        struct conn *prev, *next;
        int fd;
        sd_event_source *io;
        uint64_t deadline;      /* CLOCK_MONOTONIC: when its request must be complete */
        struct frame_decoder dec;
        char *out;
        size_t out_len, out_off;
        bool close_after_write;
        uid_t uid;
        pid_t pid;
        /* A request a worker decides; meanwhile nothing more is read, and
         * what was read past its frame waits in 'held' (answers go out in
         * the order of the requests). */
        struct hook_job *job;
        char *held;
        size_t held_len;
};

struct server {
        struct server_config cfg;
        const struct server_ops *ops;   /* the owner's, with userdata */
        void *userdata;
        struct server_stats stats;      /* n_connections: see n_conns */
        sd_event *event;
        int listen_fd;
        sd_event_source *listen_io;
        struct conn *conns;
        unsigned n_conns;
        /* One timer for all connections' deadlines, armed at or before the
         * earliest.  It is left armed when a connection goes (it fires
         * once more and finds nothing to do): with a timer per connection,
         * each request cost two timerfd_settime() calls and an event
         * source, for a timeout that almost never fires. */
        sd_event_source *timer;
        bool timer_armed;
        /* Out of descriptors (EMFILE, ENFILE) or memory, accept4() fails
         * while the connection stays queued, and the level-triggered
         * listening socket would call on_accept() again at once, for ever:
         * a busy loop.  So accepting pauses (the listening source off)
         * until a connection of ours closes, which frees a descriptor,
         * or until accept_retry fires; meanwhile clients wait in the
         * backlog.  The warning is logged once per episode, and episodes
         * closer than ACCEPT_WARN_USEC to the last warning are not. */
        sd_event_source *accept_retry;
        bool accept_paused;
        bool accept_failing;            /* since the last successful accept */
        bool accept_warned;             /* this episode was logged */
        unsigned accept_failures;       /* failed accept4() calls since the warning */
        uint64_t accept_warned_at;      /* CLOCK_MONOTONIC */
        /* The socket file we bound (not socket-activated), and its inode
         * then: removed at stop only if it is still that one. */
        char *own_path;
        dev_t own_dev;
        ino_t own_ino;
};

#define ACCEPT_RETRY_USEC (250u * 1000u)
#define ACCEPT_WARN_USEC (60u * 1000u * 1000u)

static void server_resume_accept(struct server *s);

static void conn_free(struct conn *c) {
        if (!c)
                return;
        struct server *s = c->server;
        if (c->prev)
                c->prev->next = c->next;
        else if (s->conns == c)
                s->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        s->n_conns--;
        if (c->job)
                s->ops->detach(s->userdata, c->job);
        free(c->held);
        sd_event_source_disable_unref(c->io);
        if (c->fd >= 0)
                close(c->fd);
        /* A descriptor is free: a paused accept can go on. */
        server_resume_accept(s);
        frame_decoder_reset(&c->dec);
        free(c->out);
        free(c);
}

static int server_arm_timer(struct server *s, uint64_t usec) {
        int r = sd_event_source_set_time(s->timer, usec);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->timer, SD_EVENT_ONESHOT);
        s->timer_armed = r >= 0;
        return r;
}

/* Give c a fresh deadline for its (next) request.  Deadlines only grow,
 * so an armed timer is already at or before this one. */
static int conn_arm_timer(struct conn *c) {
        struct server *s = c->server;
        uint64_t now = 0;
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        c->deadline = now + (uint64_t) s->cfg.request_timeout_ms * 1000;
        return s->timer_armed ? 0 : server_arm_timer(s, c->deadline);
}

/* Queue a response frame; write as much as the socket takes now. */
static int conn_send(struct conn *c, json_object *o);

static int conn_flush(struct conn *c) {
        while (c->out_off < c->out_len) {
                ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return sd_event_source_set_io_events(c->io, EPOLLOUT);
                        return -errno;
                }
                c->out_off += (size_t) n;
        }
        free(c->out);
        c->out = NULL;
        c->out_len = c->out_off = 0;
        if (c->close_after_write)
                return 1;
        /* Waiting for a worker: no reading (a hangup is still reported). */
        return sd_event_source_set_io_events(c->io, c->job ? 0 : EPOLLIN);
}

static int conn_send(struct conn *c, json_object *o) {
        _cleanup_free_ char *frame = NULL;
        size_t len = 0;
        int r = frame_encode(o, &frame, &len);
        if (r < 0)
                return r;
        /* Responses are sent in order; append to what is pending. */
        c->out = xrealloc(c->out, c->out_len + len);
        memcpy(c->out + c->out_len, frame, len);
        c->out_len += len;
        return conn_flush(c);
}

static int conn_fail(struct conn *c, const char *why) {
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_PEER_UID", "%u", (unsigned) c->uid);
        log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) c->pid);
        log_event(LOG_WARNING, PCINUMA_MID_PROTOCOL_ERROR, &f, "Bad request from pid %d: %s", (int) c->pid, why);
        log_fields_done(&f);
        c->server->stats.n_bad++;
        _cleanup_json_ json_object *o = proto_response_new_error("%s", why);
        c->close_after_write = true;
        frame_decoder_reset(&c->dec);
        return conn_send(c, o);
}

/* Decode and serve what was read, frame by frame; stop at a request a
 * worker takes (what follows waits in c->held).  Returns nonzero when c
 * is to be freed. */
static int conn_feed(struct conn *c, const char *buf, size_t n) {
        size_t off = 0;
        while (off < n) {
                json_object *req = NULL;
                _cleanup_free_ char *err = NULL;
                size_t used = 0;
                int r = frame_decoder_feed(&c->dec, buf + off, n - off, &used, &req, &err);
                if (r < 0)
                        return conn_fail(c, err ? err : "malformed frame");
                off += used;
                if (r == 0)
                        break;
                struct hook_job *job = NULL;
                _cleanup_json_ json_object *resp = c->server->ops->handle(c->server->userdata, req, c, c->uid, c->pid, &job);
                json_object_put(req);
                if (job) {
                        /* Decided on a worker: no deadline meanwhile. */
                        c->job = job;
                        c->deadline = UINT64_MAX;
                        if (off < n) {
                                c->held = xmalloc(n - off);
                                memcpy(c->held, buf + off, n - off);
                                c->held_len = n - off;
                        }
                        return sd_event_source_set_io_events(c->io, c->out_len ? EPOLLOUT : 0) < 0;
                }
                r = conn_send(c, resp);
                if (r != 0)
                        return r;
                /* A request completed: the client gets a fresh timeout for
                 * its next one.  Partial reads do not extend it, so a client
                 * that dribbles bytes cannot hold its slot forever. */
                (void) conn_arm_timer(c);
        }
        return 0;
}

void server_reply(struct conn *c, char *frame, size_t len) {
        _cleanup_free_ char *f = frame, *held = TAKE_PTR(c->held);
        size_t held_len = c->held_len;
        c->job = NULL;
        c->held_len = 0;
        if (!frame) {
                /* (The answer could not be encoded; nothing was logged
                 * about the request that the client could act on.) */
                conn_free(c);
                return;
        }
        c->out = xrealloc(c->out, c->out_len + len);
        memcpy(c->out + c->out_len, frame, len);
        c->out_len += len;
        int r = conn_flush(c);
        if (r == 0) {
                (void) conn_arm_timer(c);
                if (held)
                        r = conn_feed(c, held, held_len);
        }
        if (r != 0)
                conn_free(c);
}

static int on_conn_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        struct conn *c = userdata;
        int r = 0;

        if (revents & EPOLLOUT) {
                r = conn_flush(c);
                if (r != 0) {
                        conn_free(c);
                        return 0;
                }
        }
        if (c->job) {
                /* The client hung up while a worker decides its request:
                 * the answer is dropped when it comes. */
                if (revents & (EPOLLHUP | EPOLLERR))
                        conn_free(c);
                return 0;
        }
        if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) || c->close_after_write)
                return 0;

        char buf[65536];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                conn_free(c);
                return 0;
        }
        if (n == 0) {
                if (frame_decoder_busy(&c->dec)) {
                        struct log_fields f = {0};
                        log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) c->pid);
                        log_event(LOG_WARNING, PCINUMA_MID_PROTOCOL_ERROR, &f,
                                  "Client pid %d closed the connection in the middle of a request (truncated frame)", (int) c->pid);
                        log_fields_done(&f);
                        c->server->stats.n_bad++;
                }
                conn_free(c);
                return 0;
        }

        if (conn_feed(c, buf, (size_t) n) != 0)
                conn_free(c);
        return 0;
}

static void conn_timeout(struct conn *c) {
        if (frame_decoder_busy(&c->dec)) {
                struct log_fields f = {0};
                log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) c->pid);
                log_event(LOG_WARNING, PCINUMA_MID_PROTOCOL_ERROR, &f,
                          "Client pid %d left an incomplete request for %u ms; closing its connection",
                          (int) c->pid, c->server->cfg.request_timeout_ms);
                log_fields_done(&f);
                c->server->stats.n_bad++;
        }
        conn_free(c);
}

static int on_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        struct server *s = userdata;
        uint64_t now = 0, next = UINT64_MAX;

        s->timer_armed = false;
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        for (struct conn *c = s->conns, *n; c; c = n) {
                n = c->next;
                if (c->deadline <= now)
                        conn_timeout(c);
                else if (c->deadline < next)
                        next = c->deadline;
        }
        if (next != UINT64_MAX && server_arm_timer(s, next) < 0)
                log_msg(LOG_WARNING, "Failed to arm the client timeout timer, ignoring");
        return 0;
}

static void server_resume_accept(struct server *s) {
        if (!s->accept_paused)
                return;
        s->accept_paused = false;
        (void) sd_event_source_set_enabled(s->accept_retry, SD_EVENT_OFF);
        if (sd_event_source_set_enabled(s->listen_io, SD_EVENT_ON) < 0)
                log_msg(LOG_ERR, "Failed to watch the hook socket again; no new hook call will be served");
}

static int on_accept_retry(sd_event_source *src, uint64_t usec, void *userdata) {
        server_resume_accept(userdata);
        return 0;
}

/* accept4() failed with err (not EAGAIN): stop watching the listening
 * socket for a while; see struct server. */
static void server_pause_accept(struct server *s, int err) {
        uint64_t now = 0;

        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        s->accept_failures++;
        if (!s->accept_failing) {
                s->accept_failing = true;
                s->accept_warned = s->accept_warned_at == 0 || now - s->accept_warned_at >= ACCEPT_WARN_USEC;
                if (s->accept_warned) {
                        log_errno(LOG_WARNING, err,
                                  "Cannot accept a connection on the hook socket: %m (%u connections open); "
                                  "new clients wait in the socket's backlog until a connection closes (retrying every %u ms)",
                                  s->n_conns, ACCEPT_RETRY_USEC / 1000);
                        s->accept_warned_at = now;
                        s->accept_failures = 1;
                }
        }
        if (s->accept_paused)
                return;
        int r = sd_event_source_set_enabled(s->listen_io, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_source_set_time(s->accept_retry, now + ACCEPT_RETRY_USEC);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->accept_retry, SD_EVENT_ONESHOT);
        if (r < 0) {
                /* Without the timer, only a closing connection resumes. */
                log_errno(LOG_WARNING, r, "Failed to arm the accept retry timer: %m, ignoring");
        }
        s->accept_paused = true;
}

/* Only root may ask (and the uids of --allow-uid): libvirt's hooks run as
 * root, and the answers reveal the host's device layout.  Another peer
 * gets an error answer, then c is closed (or at once, if that fails).
 * True when c may go on. */
static bool conn_peer_allowed(struct conn *c) {
        struct server *s = c->server;
        bool allowed = c->uid == 0;
        for (size_t i = 0; i < s->cfg.n_allowed_uids; i++)
                allowed = allowed || s->cfg.allowed_uids[i] == c->uid;
        if (allowed)
                return true;
        struct log_fields f = {0};
        log_fields_add(&f, "PCINUMA_PEER_UID", "%u", (unsigned) c->uid);
        log_fields_add(&f, "PCINUMA_PEER_PID", "%d", (int) c->pid);
        log_event(LOG_WARNING, PCINUMA_MID_PEER_REJECTED, &f,
                  "Refused a connection from uid %u (pid %d): only root is served", (unsigned) c->uid, (int) c->pid);
        log_fields_done(&f);
        s->stats.n_rejected++;
        _cleanup_json_ json_object *o = proto_response_new_error(
                "permission denied: pcinumad serves only root (uid 0), and this peer is uid %u", (unsigned) c->uid);
        c->close_after_write = true;
        if (conn_send(c, o) != 0)
                conn_free(c);
        return false;
}

/* One connection per call: the listening socket is level-triggered, so
 * sd-event calls again while more are pending (an accept4() that fails
 * with EAGAIN after each one, as a loop here needs, is saved). */
static int on_accept(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        struct server *s = userdata;
        int cfd;
        for (;;) {
                cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd >= 0)
                        break;
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                if (errno == ECONNABORTED)
                        continue;
                /* EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection stays
                 * queued; keep serving who we have. */
                server_pause_accept(s, -errno);
                return 0;
        }
        if (s->accept_failing) {
                s->accept_failing = false;
                if (s->accept_warned)
                        log_msg(LOG_INFO, "Accepting connections on the hook socket again (%u attempts failed)",
                                s->accept_failures);
        }
        struct ucred cred = { .uid = (uid_t) -1, .pid = 0 };
        socklen_t len = sizeof cred;
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                log_errno(LOG_WARNING, -errno, "Failed to read the peer's credentials: %m; dropping the connection");
                close(cfd);
                return 0;
        }
        if (s->n_conns >= s->cfg.max_connections) {
                log_msg(LOG_WARNING, "Too many connections (%u); dropping one from pid %d", s->n_conns, (int) cred.pid);
                close(cfd);
                return 0;
        }
        struct conn *c = xcalloc(1, sizeof(*c));
        c->server = s;
        c->fd = cfd;
        c->uid = cred.uid;
        c->pid = cred.pid;
        c->next = s->conns;
        if (s->conns)
                s->conns->prev = c;
        s->conns = c;
        s->n_conns++;

        int r = sd_event_add_io(s->event, &c->io, cfd, EPOLLIN, on_conn_io, c);
        if (r >= 0)
                r = conn_arm_timer(c);
        if (r < 0) {
                log_errno(LOG_WARNING, r, "Failed to watch a connection: %m; dropping it");
                conn_free(c);
                return 0;
        }

        if (!conn_peer_allowed(c))
                return 0;

        /* A client sends its request as soon as it is connected: it is
         * usually there already, so read it now rather than after
         * another trip through epoll (a recv() that finds nothing just
         * leaves the connection to epoll). */
        return on_conn_io(c->io, cfd, EPOLLIN, c);
}

int server_new(const struct server_config *cfg, const struct server_ops *ops, void *userdata, sd_event *e,
               int listen_fd, struct server **ret) {
        struct server *s = xcalloc(1, sizeof(*s));
        s->cfg = *cfg;
        s->ops = ops;
        s->userdata = userdata;
        s->event = e;
        s->listen_fd = listen_fd;
        int r = sd_event_add_io(e, &s->listen_io, listen_fd, EPOLLIN, on_accept, s);
        if (r < 0) {
                free(s);
                return log_errno(LOG_ERR, r, "Failed to watch the hook socket: %m");
        }
        (void) sd_event_source_set_description(s->listen_io, "hook-socket");
        r = sd_event_add_time(e, &s->timer, CLOCK_MONOTONIC, 0, 0, on_timer, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->timer, SD_EVENT_OFF);
        if (r < 0) {
                sd_event_source_disable_unref(s->listen_io);
                sd_event_source_disable_unref(s->timer);
                free(s);
                return log_errno(LOG_ERR, r, "Failed to create the client timeout timer: %m");
        }
        (void) sd_event_source_set_description(s->timer, "client-timeout");
        r = sd_event_add_time(e, &s->accept_retry, CLOCK_MONOTONIC, 0, 0, on_accept_retry, s);
        if (r >= 0)
                r = sd_event_source_set_enabled(s->accept_retry, SD_EVENT_OFF);
        if (r < 0) {
                sd_event_source_disable_unref(s->listen_io);
                sd_event_source_disable_unref(s->timer);
                sd_event_source_disable_unref(s->accept_retry);
                free(s);
                return log_errno(LOG_ERR, r, "Failed to create the accept retry timer: %m");
        }
        (void) sd_event_source_set_description(s->accept_retry, "accept-retry");
        *ret = s;
        return 0;
}

void server_own_socket_file(struct server *s, const char *path) {
        struct stat st;
        if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
                return;
        free(s->own_path);
        s->own_path = xstrdup(path);
        s->own_dev = st.st_dev;
        s->own_ino = st.st_ino;
}

struct server *server_free(struct server *s) {
        if (!s)
                return NULL;
        /* No stale socket file after a stop: a client then finds none
         * rather than one that refuses connections. */
        struct stat st;
        if (s->own_path && lstat(s->own_path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == s->own_dev &&
            st.st_ino == s->own_ino)
                (void) unlink(s->own_path);
        free(s->own_path);
        s->accept_paused = false;       /* conn_free() must not watch the socket again */
        while (s->conns)
                conn_free(s->conns);
        sd_event_source_disable_unref(s->accept_retry);
        sd_event_source_disable_unref(s->timer);
        sd_event_source_disable_unref(s->listen_io);
        if (s->listen_fd >= 0)
                close(s->listen_fd);
        free(s);
        return NULL;
}

void server_stats(const struct server *s, struct server_stats *ret) {
        *ret = s ? s->stats : (struct server_stats) {0};
        ret->n_connections = s ? s->n_conns : 0;
}

static int mkdir_parents(const char *path) {
        _cleanup_free_ char *dir = xstrdup(path);
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = 0;
        for (char *p = dir + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = 0;
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int server_listen_fd(const char *path, int *ret_fd, bool *ret_activated) {
        char **names = NULL;
        int n = sd_listen_fds_with_names(true, &names);
        if (names) {
                for (char **p = names; *p; p++)
                        free(*p);
                free(names);
        }
        if (n < 0)
                return log_errno(LOG_ERR, n, "Failed to read the sockets passed by systemd: %m");
        if (n > 1)
                return log_errno(LOG_ERR, -EINVAL, "systemd passed %d sockets; pcinumad expects one (pcinumad.socket)", n);
        if (n == 1) {
                int fd = SD_LISTEN_FDS_START;
                int r = sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0);
                if (r <= 0)
                        return log_errno(LOG_ERR, r < 0 ? r : -EINVAL,
                                         "The socket passed by systemd is not a listening Unix stream socket");
                (void) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                (void) fcntl(fd, F_SETFD, FD_CLOEXEC);
                *ret_fd = fd;
                *ret_activated = true;
                return 0;
        }

        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof sa.sun_path)
                return log_errno(LOG_ERR, -ENAMETOOLONG, "Socket path '%s' is too long", path);
        strcpy(sa.sun_path, path);

        int r = mkdir_parents(path);
        if (r < 0)
                return log_errno(LOG_ERR, r, "Failed to create the directory of '%s': %m", path);

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_errno(LOG_ERR, -errno, "Failed to create a socket: %m");

        struct stat st;
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return log_errno(LOG_ERR, -EEXIST, "'%s' exists and is not a socket; not touching it", path);
                /* A live socket means another pcinumad: do not steal it. */
                _cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (probe >= 0 && connect(probe, (struct sockaddr *) &sa, sizeof sa) == 0)
                        return log_errno(LOG_ERR, -EADDRINUSE, "Another process is already listening on '%s'", path);
                (void) unlink(path);
        }

        /* Create the socket with mode 0600 from the start: no window in
         * which another user could connect. */
        mode_t old = umask(0177);
        r = bind(fd, (struct sockaddr *) &sa, sizeof sa);
        int e = errno;
        umask(old);
        if (r < 0)
                return log_errno(LOG_ERR, -e, "Failed to bind '%s': %m", path);
        if (chmod(path, 0600) < 0)
                return log_errno(LOG_ERR, -errno, "Failed to set the mode of '%s': %m", path);
        if (listen(fd, 128) < 0)
                return log_errno(LOG_ERR, -errno, "Failed to listen on '%s': %m", path);
        *ret_fd = TAKE_FD(fd);
        *ret_activated = false;
        return 0;
}

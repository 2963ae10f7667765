/* The client side of the hook protocol: one request, one answer, with a
 * deadline.  Shared by pcinuma-hook and pcinumactl. */
#include "hook-client.h"
#include "util.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#define CHUNK 65536

/* The clock of the deadlines: CLOCK_MONOTONIC in ms. */
static int64_t client_now_ms(void) {
        return (int64_t) (now_usec(CLOCK_MONOTONIC) / 1000u);
}

static int remaining_ms(int64_t deadline) {
        int64_t left = deadline - client_now_ms();

        return left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int) left;
}

/* Wait for 'events' on fd until the deadline (-1: no deadline).  Returns
 * 1 when ready, 0 on timeout, or a negative errno. */
int client_wait_fd(int fd, short events, int64_t deadline) {
        for (;;) {
                struct pollfd p = {.fd = fd, .events = events};
                int timeout = deadline < 0 ? -1 : remaining_ms(deadline);
                int r = poll(&p, 1, timeout);

                if (r > 0)
                        return 1;
                if (r == 0)
                        return 0;
                if (errno != EINTR)
                        return -errno;
        }
}

/* Connect to path before the deadline.  Returns the fd, or a negative
 * errno with *reason set. */
static int daemon_connect(const char *path, int64_t deadline, unsigned timeout_ms, char **reason) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        _cleanup_close_ int fd = -1;

        strcpy(sa.sun_path, path);      /* its length was checked by conf_load() */

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return set_error(reason, -errno, "cannot create a socket: %s", strerror(errno));

        for (;;) {
                int r, err = 0;
                socklen_t len = sizeof(err);

                if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0)
                        return TAKE_FD(fd);
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN) {
                        /* The daemon's listen backlog is full: a Unix socket
                         * reports this at once rather than by poll, so retry. */
                        if (remaining_ms(deadline) == 0)
                                return set_error(reason, -ETIMEDOUT, "cannot connect to %s within %u ms: the daemon is busy",
                                                 path, timeout_ms);
                        (void) poll(NULL, 0, remaining_ms(deadline) < 10 ? remaining_ms(deadline) : 10);
                        continue;
                }
                if (errno != EINPROGRESS)
                        return set_error(reason, -errno, "cannot connect to %s: %s", path, strerror(errno));

                r = client_wait_fd(fd, POLLOUT, deadline);
                if (r == 0)
                        return set_error(reason, -ETIMEDOUT, "cannot connect to %s within %u ms", path, timeout_ms);
                if (r < 0)
                        return set_error(reason, r, "cannot connect to %s: %s", path, strerror(-r));
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                        err = errno;
                if (err != 0)
                        return set_error(reason, -err, "cannot connect to %s: %s", path, strerror(err));
                return TAKE_FD(fd);
        }
}

static int daemon_send(int fd, const char *buf, size_t len, int64_t deadline, unsigned timeout_ms, char **reason) {
        while (len > 0) {
                ssize_t k = send(fd, buf, len, MSG_NOSIGNAL);

                if (k < 0) {
                        int r;

                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN && errno != EWOULDBLOCK) {
                                if (errno == EPIPE || errno == ECONNRESET)
                                        return set_error(reason, -errno, "the daemon closed the connection before reading the request");
                                return set_error(reason, -errno, "cannot send the request to the daemon: %s", strerror(errno));
                        }
                        r = client_wait_fd(fd, POLLOUT, deadline);
                        if (r == 0)
                                return set_error(reason, -ETIMEDOUT, "the daemon did not take the request within %u ms", timeout_ms);
                        if (r < 0)
                                return set_error(reason, r, "cannot send the request to the daemon: %s", strerror(-r));
                        continue;
                }
                buf += k;
                len -= (size_t) k;
        }
        return 0;
}

/* Read one response frame before the deadline. */
static int daemon_receive(int fd, int64_t deadline, unsigned timeout_ms, json_object **ret, char **reason) {
        struct frame_decoder d = {.header_len = 0};
        char *buf = xmalloc(CHUNK);
        int r;

        for (;;) {
                _cleanup_free_ char *err = NULL;
                size_t used = 0;
                ssize_t k;

                r = client_wait_fd(fd, POLLIN, deadline);
                if (r == 0) {
                        r = set_error(reason, -ETIMEDOUT, "no answer from the daemon within %u ms", timeout_ms);
                        break;
                }
                if (r < 0) {
                        r = set_error(reason, r, "cannot read the daemon's answer: %s", strerror(-r));
                        break;
                }

                k = recv(fd, buf, CHUNK, 0);
                if (k < 0) {
                        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                                continue;
                        if (errno == ECONNRESET)
                                r = set_error(reason, -errno, "the daemon closed the connection without answering");
                        else
                                r = set_error(reason, -errno, "cannot read the daemon's answer: %s", strerror(errno));
                        break;
                }
                if (k == 0) {
                        r = set_error(reason, -ECONNRESET,
                                      frame_decoder_busy(&d) ? "the daemon closed the connection in the middle of its answer"
                                                             : "the daemon closed the connection without answering");
                        break;
                }

                r = frame_decoder_feed(&d, buf, (size_t) k, &used, ret, &err);
                if (r < 0) {
                        r = set_error(reason, r, "malformed answer from the daemon: %s", strna(err));
                        break;
                }
                if (r > 0) {
                        /* Anything after the frame is ignored: one request,
                         * one answer. */
                        r = 0;
                        break;
                }
        }
        frame_decoder_reset(&d);
        free(buf);
        return r;
}

int client_call(const char *socket_path, json_object *req, unsigned timeout_ms, json_object **ret, char **ret_error) {
        _cleanup_free_ char *frame = NULL;
        size_t len = 0;
        int r = frame_encode(req, &frame, &len);
        if (r < 0)
                return set_error(ret_error, r, "cannot encode the request: %s", strerror(-r));
        return client_call_frame(socket_path, frame, len, timeout_ms, ret, ret_error);
}

int client_call_frame(const char *socket_path, const char *frame, size_t len, unsigned timeout_ms, json_object **ret,
                      char **ret_error) {
        struct sockaddr_un sa;
        if (strlen(socket_path) >= sizeof sa.sun_path)
                return set_error(ret_error, -ENAMETOOLONG, "socket path '%s' is too long", socket_path);
        int64_t deadline = client_now_ms() + timeout_ms;
        int r;
        _cleanup_close_ int fd = daemon_connect(socket_path, deadline, timeout_ms, ret_error);
        if (fd < 0)
                return fd;
        r = daemon_send(fd, frame, len, deadline, timeout_ms, ret_error);
        if (r == -EPIPE || r == -ECONNRESET) {
                /* The daemon may have answered and closed without reading
                 * the request (it does so to peers it does not serve): its
                 * answer is then waiting in our receive queue. */
                _cleanup_free_ char *ignored = NULL;
                if (daemon_receive(fd, deadline, timeout_ms, ret, &ignored) == 0) {
                        free(*ret_error);
                        *ret_error = NULL;
                        return 0;
                }
        }
        if (r < 0)
                return r;
        return daemon_receive(fd, deadline, timeout_ms, ret, ret_error);
}

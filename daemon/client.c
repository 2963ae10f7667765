/* One request/response exchange over the hook socket, with a deadline. */
#include "client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_fd(int fd, short events, int64_t deadline) {
        for (;;) {
                int64_t left = deadline - now_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = fd, .events = events };
                int r = poll(&p, 1, (int) left);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return -errno;
                if (r == 0)
                        return -ETIMEDOUT;
                return 0;
        }
}

int client_call(const char *socket_path, json_object *req, unsigned timeout_ms, json_object **ret, char **ret_error) {
        int64_t deadline = now_ms() + timeout_ms;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(socket_path) >= sizeof sa.sun_path)
                return set_error(ret_error, -ENAMETOOLONG, "socket path '%s' is too long", socket_path);
        strcpy(sa.sun_path, socket_path);

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return set_error(ret_error, -errno, "cannot create a socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
                if (errno != EINPROGRESS && errno != EAGAIN)
                        return set_error(ret_error, -errno, "cannot connect to %s: %s", socket_path, strerror(errno));
                int r = wait_fd(fd, POLLOUT, deadline);
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                if (r < 0)
                        return set_error(ret_error, r, "cannot connect to %s: %s", socket_path, strerror(-r));
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr)
                        return set_error(ret_error, -(soerr ? soerr : errno), "cannot connect to %s: %s", socket_path,
                                         strerror(soerr ? soerr : errno));
        }

        _cleanup_free_ char *frame = NULL;
        size_t len = 0, off = 0;
        int r = proto_frame_encode(req, &frame, &len);
        if (r < 0)
                return set_error(ret_error, r, "cannot encode the request");
        while (off < len) {
                ssize_t n = send(fd, frame + off, len - off, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                r = wait_fd(fd, POLLOUT, deadline);
                                if (r < 0)
                                        return set_error(ret_error, r, "cannot send the request to %s: %s", socket_path,
                                                         r == -ETIMEDOUT ? "timed out" : strerror(-r));
                                continue;
                        }
                        return set_error(ret_error, -errno, "cannot send the request to %s: %s", socket_path, strerror(errno));
                }
                off += (size_t) n;
        }

        struct proto_decoder dec = {0};
        char buf[65536];
        for (;;) {
                r = wait_fd(fd, POLLIN, deadline);
                if (r < 0) {
                        proto_decoder_reset(&dec);
                        return set_error(ret_error, r, r == -ETIMEDOUT ? "no answer from %s within %u ms" : "cannot read from %s",
                                         socket_path, timeout_ms);
                }
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        int e = errno;
                        proto_decoder_reset(&dec);
                        return set_error(ret_error, -e, "cannot read from %s: %s", socket_path, strerror(e));
                }
                if (n == 0) {
                        proto_decoder_reset(&dec);
                        return set_error(ret_error, -ECONNRESET, "%s closed the connection without an answer", socket_path);
                }
                size_t used = 0;
                _cleanup_free_ char *err = NULL;
                r = proto_decoder_feed(&dec, buf, (size_t) n, &used, ret, &err);
                if (r < 0) {
                        proto_decoder_reset(&dec);
                        return set_error(ret_error, r, "malformed answer from %s: %s", socket_path, err ? err : "?");
                }
                if (r > 0) {
                        proto_decoder_reset(&dec);
                        return 0;
                }
        }
}

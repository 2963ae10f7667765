/* Reading a whole file descriptor into memory (fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <unistd.h>

#include "util.h"

#define FIRST_CHUNK 4096

int read_full_fd(int fd, size_t max, char **ret, size_t *ret_len) {
        /* One byte past max tells a file that is too large from one that
         * is exactly max bytes. */
        const size_t limit = max < SIZE_MAX - 2 ? max + 1 : SIZE_MAX - 2;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 0;

        for (;;) {
                if (len == cap) {
                        /* len < limit here: a file past max has returned */
                        cap = cap == 0 ? FIRST_CHUNK : cap > limit / 2 ? limit : cap * 2;
                        if (cap > limit)
                                cap = limit;
                        buf = xrealloc(buf, cap + 1);
                }
                ssize_t n = read(fd, buf + len, cap - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                len += (size_t) n;
                if (len > max)
                        return -EFBIG;
        }
        buf[len] = '\0';
        if (ret_len)
                *ret_len = len;
        *ret = TAKE_PTR(buf);
        return 0;
}

int write_full_fd(int fd, const void *buf, size_t len) {
        const char *p = buf;

        while (len > 0) {
                ssize_t k = write(fd, p, len);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
                        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                                return -errno;
                        continue;
                }
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -EIO;
                p += k;
                len -= (size_t) k;
        }
        return 0;
}

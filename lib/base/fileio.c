/* Reading a whole file descriptor into memory (fileio.h). */
#include "fileio.h"

#include <errno.h>
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

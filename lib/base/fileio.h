/* Reading a whole file descriptor into memory, and writing a whole buffer
 * to one.  Reading: the one loop behind the
 * policy file, pcinumactl's input, the hook's settings files and the
 * host map's larger sysfs files.  No path handling: the caller opens the
 * file as it needs to (openat() below a root, O_NOCTTY, stdin…). */
#pragma once

#include <stddef.h>

/* Read fd until end of file (retrying on EINTR) into a NUL-terminated
 * buffer, *ret, which the caller owns; *ret_len (if given) gets its
 * length, which may be less than the buffer's strlen() tells if the file
 * holds NUL bytes.  Returns 0; -EFBIG when the file holds more than max
 * bytes (it reads at most max + 1); or read()'s negative errno.  On error
 * *ret and *ret_len are untouched. */
int read_full_fd(int fd, size_t max, char **ret, size_t *ret_len);

/* Write all len bytes of buf to fd, through partial writes, EINTR, and
 * (on a non-blocking fd) EAGAIN, where it waits until fd takes more.
 * Returns 0, or write()'s or poll()'s negative errno; -EIO when write()
 * takes nothing. */
int write_full_fd(int fd, const void *buf, size_t len);

/* Helpers the C benchmarks share: a clock reading in seconds, a
 * comparison for qsort() of doubles (medians), and reading a whole input
 * file (exit 2 naming it when it cannot be read).  For benchmarks only
 * (tests/bench). */
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "util.h"

static inline double now(clockid_t c) {
        struct timespec ts;

        clock_gettime(c, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static inline int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}

static inline char *slurp(const char *path, size_t *len) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        char *buf = NULL;
        int r = fd < 0 ? -errno : read_full_fd(fd, SIZE_MAX, &buf, len);

        if (fd >= 0)
                close(fd);
        if (r < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(-r));
                exit(2);
        }
        return buf;
}

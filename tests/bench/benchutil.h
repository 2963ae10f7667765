/* Helpers the C benchmarks share: a clock reading in seconds, a
 * comparison for qsort() of doubles (medians), and reading a whole input
 * file (exit 2 naming it when it cannot be read).  For benchmarks only. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
        FILE *f = fopen(path, "rb");
        char *buf;
        long n;

        if (!f || fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0) {
                perror(path);
                exit(2);
        }
        buf = xmalloc((size_t) n + 1);
        if (fread(buf, 1, (size_t) n, f) != (size_t) n) {
                perror(path);
                exit(2);
        }
        buf[n] = '\0';
        fclose(f);
        *len = (size_t) n;
        return buf;
}

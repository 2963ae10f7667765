/* Small helpers shared by every pcinuma module: cleanup attributes in the
 * style of libnvme's cleanup.h and systemd's TAKE_PTR, and a few string
 * and number helpers.  Nothing here does I/O. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _nonnull_ __attribute__((nonnull))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

/* Take ownership of a pointer (or fd) out of a _cleanup_ variable.
 * Functions rather than statement expressions, to stay within ISO C11. */
static inline void *take_ptr(void *pp) {
        void **p = pp;
        void *r = *p;
        *p = NULL;
        return r;
}
static inline int take_fd(int *fd) {
        int r = *fd;
        *fd = -1;
        return r;
}
#define TAKE_PTR(p) take_ptr(&(p))
#define TAKE_FD(fd) take_fd(&(fd))

/* Define funcp(type *p), the cleanup function that calls func(*p) when *p
 * is not NULL and then clears it, as systemd's DEFINE_TRIVIAL_CLEANUP_FUNC
 * does.  func may return a value (it is dropped): "_free" functions here
 * return NULL, fclose() and json_object_put() an int. */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func) \
        static inline void func##p(type *p) { \
                if (*p) { \
                        (void) func(*p); \
                        *p = NULL; \
                } \
        }

static inline void freep(void *p) { free(*(void **) p); }
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                (void) close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose)
#define _cleanup_fclose_ _cleanup_(fclosep)

#define USEC_PER_SEC UINT64_C(1000000)

/* clock's time in microseconds (CLOCK_MONOTONIC for intervals and
 * deadlines, CLOCK_REALTIME for times shown to people). */
static inline uint64_t now_usec(clockid_t clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000u;
}

static inline bool streq(const char *a, const char *b) { return strcmp(a, b) == 0; }
static inline bool streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}
static inline const char *strempty(const char *s) { return s ? s : ""; }
static inline const char *strna(const char *s) { return s ? s : "n/a"; }

/* Allocation that aborts on failure: out-of-memory is not a condition this
 * project tries to recover from. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
void *xreallocarray(void *p, size_t n, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) _printf_(1, 2);
char *xvasprintf(const char *fmt, va_list ap) _printf_(1, 0);

/* Grow *array (of *n elements of size 'size') by one zeroed element and
 * return a pointer to it. */
void *grow_array(void *array_ptr, size_t *n, size_t size);
#define GROW(array, n) ((__typeof__(*(array)) *) grow_array(&(array), &(n), sizeof(*(array))))

/* Free array (of n elements) and leave it empty, ready to GROW() again. */
#define CLEAR_ARRAY(array, n) \
        do { \
                free(array); \
                (array) = NULL; \
                (n) = 0; \
        } while (0)

/* Set *ret_error to a formatted message (if ret_error is non-NULL) and
 * return 'err', which must be a negative errno.  Used by the pure modules,
 * which report errors to their caller instead of logging. */
int set_error(char **ret_error, int err, const char *fmt, ...) _printf_(3, 4);

/* A growable string buffer. */
struct strbuf {
        char *buf;
        size_t len, cap;
};
void strbuf_append(struct strbuf *b, const char *s);
void strbuf_appendn(struct strbuf *b, const char *s, size_t n);
void strbuf_printf(struct strbuf *b, const char *fmt, ...) _printf_(2, 3);
char *strbuf_steal(struct strbuf *b);
void strbuf_done(struct strbuf *b);

/* A UUID as libvirt and sysfs print it: 8-4-4-4-12 hex digits, either
 * case.  Returns 0 with its lower-case form in ret, or -EINVAL for
 * anything else (s may be NULL; ret is then untouched or partly
 * written). */
int uuid_canonical(const char *s, char ret[static 37]);
static inline bool uuid_is_valid(const char *s) {
        char ignored[37];
        return uuid_canonical(s, ignored) == 0;
}

/* Parse an unsigned integer; base 0 accepts "0x" hex as libvirt does.
 * Rejects empty strings, trailing garbage (but allows trailing white
 * space) and overflow past 'max'. */
int parse_uint(const char *s, int base, uint64_t max, uint64_t *ret);
int parse_int(const char *s, int base, int64_t min, int64_t max, int64_t *ret);

/* A set of small non-negative integers (CPU numbers, node ids), kept as a
 * sorted array of ranges-expanded bits. */
struct bitmap {
        uint64_t *bits;
        size_t n_words;
};
void bitmap_set(struct bitmap *b, unsigned i);
/* Set lo..hi (inclusive), a word at a time. */
void bitmap_set_range(struct bitmap *b, unsigned lo, unsigned hi);
bool bitmap_test(const struct bitmap *b, unsigned i);
bool bitmap_isempty(const struct bitmap *b);
unsigned bitmap_count(const struct bitmap *b);
/* Index of the first bit set at or after 'from', or -1. */
int bitmap_next(const struct bitmap *b, unsigned from);
bool bitmap_intersects(const struct bitmap *a, const struct bitmap *b);
void bitmap_or(struct bitmap *dst, const struct bitmap *src);
bool bitmap_equal(const struct bitmap *a, const struct bitmap *b);
void bitmap_done(struct bitmap *b);
/* *dst becomes a copy of *src (whatever *dst held is not freed). */
void bitmap_copy(struct bitmap *dst, const struct bitmap *src);
/* Parse a Linux/libvirt list such as "0-3,8,10-11" (libvirt's "^N"
 * exclusions are honoured).  'max' bounds each number.  An empty string
 * yields an empty set. */
int bitmap_parse(const char *s, unsigned max, struct bitmap *ret);
/* Format as a compact list "0-3,8". */
char *bitmap_format(const struct bitmap *b);
/* Append b as the kernel's cpumap form, as hwloc and NCCL write CPU sets:
 * 32-bit hex words, most significant first, comma separated, each
 * 'prefix' then %08x ("0x0000000f,0xffffffff"); one word when empty. */
void strbuf_bitmap_words(struct strbuf *out, const struct bitmap *b, const char *prefix);

/* Append ' name="value"', value escaped for an XML attribute (&, <, >,
 * "); control characters XML 1.0 cannot hold (below 0x20 but tab) are
 * left out.  For the XML files written as text (hwloc, NCCL). */
void strbuf_xml_attr(struct strbuf *b, const char *name, const char *value);

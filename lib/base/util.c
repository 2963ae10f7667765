/* Implementation of the small helpers declared in util.h. */
#include "util.h"

#include <inttypes.h>
#include <limits.h>

void *xmalloc(size_t n) {
        void *p = malloc(n ? n : 1);
        if (!p)
                abort();
        return p;
}

void *xcalloc(size_t n, size_t size) {
        void *p = calloc(n ? n : 1, size ? size : 1);
        if (!p)
                abort();
        return p;
}

void *xrealloc(void *p, size_t n) {
        p = realloc(p, n ? n : 1);
        if (!p)
                abort();
        return p;
}

void *xreallocarray(void *p, size_t n, size_t size) {
        if (size && n > SIZE_MAX / size)
                abort();
        return xrealloc(p, n * size);
}

char *xstrdup(const char *s) {
        char *r = strdup(s);
        if (!r)
                abort();
        return r;
}

char *xstrndup(const char *s, size_t n) {
        char *r = strndup(s, n);
        if (!r)
                abort();
        return r;
}

char *xvasprintf(const char *fmt, va_list ap) {
        char *r = NULL;
        if (vasprintf(&r, fmt, ap) < 0)
                abort();
        return r;
}

char *xasprintf(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char *r = xvasprintf(fmt, ap);
        va_end(ap);
        return r;
}

void *grow_array(void *array_ptr, size_t *n, size_t size) {
        void **a = array_ptr;
        /* The capacity is implied by the count: 4, then doubling, so
         * appending stays amortised O(1) without storing it. */
        if (*n == 0 || (*n >= 4 && (*n & (*n - 1)) == 0))
                *a = xreallocarray(*a, *n == 0 ? 4 : *n * 2, size);
        char *e = (char *) *a + *n * size;
        memset(e, 0, size);
        (*n)++;
        return e;
}

int set_error(char **ret_error, int err, const char *fmt, ...) {
        if (ret_error) {
                va_list ap;
                va_start(ap, fmt);
                free(*ret_error);
                *ret_error = xvasprintf(fmt, ap);
                va_end(ap);
        }
        return err;
}

static void strbuf_reserve(struct strbuf *b, size_t extra) {
        if (b->len + extra + 1 <= b->cap)
                return;
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + extra + 1)
                cap *= 2;
        b->buf = xrealloc(b->buf, cap);
        b->cap = cap;
}

void strbuf_appendn(struct strbuf *b, const char *s, size_t n) {
        strbuf_reserve(b, n);
        memcpy(b->buf + b->len, s, n);
        b->len += n;
        b->buf[b->len] = 0;
}

void strbuf_append(struct strbuf *b, const char *s) {
        strbuf_appendn(b, s, strlen(s));
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char *s = xvasprintf(fmt, ap);
        va_end(ap);
        strbuf_append(b, s);
        free(s);
}

char *strbuf_steal(struct strbuf *b) {
        char *r = b->buf ? b->buf : xstrdup("");
        b->buf = NULL;
        b->len = b->cap = 0;
        return r;
}

void strbuf_done(struct strbuf *b) {
        free(b->buf);
        b->buf = NULL;
        b->len = b->cap = 0;
}

/* The shapes libvirt writes, "0x1f" and "31", without strtoull(): a
 * domain has hundreds of these.  true with *ret, or false to leave s to
 * strtoull() (anything else: white space, a sign, octal, overflow...). */
static bool parse_uint_simple(const char *s, int base, uint64_t *ret) {
        uint64_t v = 0;
        size_t i = 0;
        if ((base == 0 || base == 16) && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
                for (i = 2; i < 17; i++) {
                        char c = s[i];
                        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                        if (d < 0)
                                break;
                        v = v << 4 | (uint64_t) d;
                }
                if (i == 2 || s[i] != '\0')
                        return false;
        } else if (base == 0 || base == 10) {
                /* a leading 0 is octal to base 0: only "0" itself here */
                if (s[0] == '0' && s[1] != '\0')
                        return false;
                for (; i < 18 && s[i] >= '0' && s[i] <= '9'; i++)
                        v = v * 10 + (uint64_t) (s[i] - '0');
                if (i == 0 || s[i] != '\0')
                        return false;
        } else
                return false;
        *ret = v;
        return true;
}

/* What strtoull()/strtoll() (errno cleared before) said, from s to end:
 * -ERANGE, -EINVAL for no number or anything but white space after it,
 * else 0. */
static int strto_result(const char *s, const char *end) {
        if (errno == ERANGE)
                return -ERANGE;
        if (errno || end == s)
                return -EINVAL;
        while (*end == ' ' || *end == '\t' || *end == '\n')
                end++;
        return *end ? -EINVAL : 0;
}

int parse_uint(const char *s, int base, uint64_t max, uint64_t *ret) {
        if (!s)
                return -EINVAL;
        uint64_t simple;
        if (parse_uint_simple(s, base, &simple)) {
                if (simple > max)
                        return -ERANGE;
                *ret = simple;
                return 0;
        }
        while (*s == ' ' || *s == '\t' || *s == '\n')
                s++;
        if (!*s || *s == '-' || *s == '+')
                return -EINVAL;
        errno = 0;
        char *end = NULL;
        unsigned long long v = strtoull(s, &end, base);
        int r = strto_result(s, end);
        if (r < 0)
                return r;
        if (v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

int parse_int(const char *s, int base, int64_t min, int64_t max, int64_t *ret) {
        if (!s)
                return -EINVAL;
        while (*s == ' ' || *s == '\t' || *s == '\n')
                s++;
        if (!*s)
                return -EINVAL;
        errno = 0;
        char *end = NULL;
        long long v = strtoll(s, &end, base);
        int r = strto_result(s, end);
        if (r < 0)
                return r;
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

void bitmap_set(struct bitmap *b, unsigned i) {
        size_t w = i / 64;
        if (w >= b->n_words) {
                size_t n = w + 1;
                b->bits = xreallocarray(b->bits, n, sizeof(uint64_t));
                memset(b->bits + b->n_words, 0, (n - b->n_words) * sizeof(uint64_t));
                b->n_words = n;
        }
        b->bits[w] |= UINT64_C(1) << (i % 64);
}

void bitmap_set_range(struct bitmap *b, unsigned lo, unsigned hi) {
        if (lo > hi)
                return;
        bitmap_set(b, hi);      /* grows it once */
        for (unsigned i = lo; i <= hi && i % 64; i++)
                b->bits[i / 64] |= UINT64_C(1) << (i % 64);
        unsigned first = (lo + 63) / 64, last = hi / 64;   /* whole words between */
        for (unsigned w = first; w < last; w++)
                b->bits[w] = UINT64_MAX;
        for (unsigned i = last * 64 > lo ? last * 64 : lo; i <= hi; i++)
                b->bits[i / 64] |= UINT64_C(1) << (i % 64);
}

bool bitmap_test(const struct bitmap *b, unsigned i) {
        size_t w = i / 64;
        return w < b->n_words && (b->bits[w] & (UINT64_C(1) << (i % 64)));
}

bool bitmap_isempty(const struct bitmap *b) {
        for (size_t i = 0; i < b->n_words; i++)
                if (b->bits[i])
                        return false;
        return true;
}

unsigned bitmap_count(const struct bitmap *b) {
        unsigned n = 0;
        for (size_t i = 0; i < b->n_words; i++)
                n += (unsigned) __builtin_popcountll(b->bits[i]);
        return n;
}

int bitmap_next(const struct bitmap *b, unsigned from) {
        for (size_t w = from / 64; w < b->n_words; w++) {
                uint64_t v = b->bits[w];
                if (w == from / 64)
                        v &= ~UINT64_C(0) << (from % 64);
                if (v)
                        return (int) (w * 64 + (size_t) __builtin_ctzll(v));
        }
        return -1;
}

bool bitmap_intersects(const struct bitmap *a, const struct bitmap *b) {
        size_t n = a->n_words < b->n_words ? a->n_words : b->n_words;
        for (size_t i = 0; i < n; i++)
                if (a->bits[i] & b->bits[i])
                        return true;
        return false;
}

void bitmap_or(struct bitmap *dst, const struct bitmap *src) {
        /* (only up to src's last set word: dst grows no more than setting
         * src's bits one by one would) */
        size_t n = src->n_words;
        while (n && !src->bits[n - 1])
                n--;
        if (n > dst->n_words) {
                dst->bits = xreallocarray(dst->bits, n, sizeof(uint64_t));
                memset(dst->bits + dst->n_words, 0, (n - dst->n_words) * sizeof(uint64_t));
                dst->n_words = n;
        }
        for (size_t w = 0; w < n; w++)
                dst->bits[w] |= src->bits[w];
}

bool bitmap_equal(const struct bitmap *a, const struct bitmap *b) {
        size_t n = a->n_words > b->n_words ? a->n_words : b->n_words;
        for (size_t i = 0; i < n; i++) {
                uint64_t x = i < a->n_words ? a->bits[i] : 0;
                uint64_t y = i < b->n_words ? b->bits[i] : 0;
                if (x != y)
                        return false;
        }
        return true;
}

void bitmap_copy(struct bitmap *dst, const struct bitmap *src) {
        dst->n_words = src->n_words;
        dst->bits = src->n_words ? xreallocarray(NULL, src->n_words, sizeof(uint64_t)) : NULL;
        if (src->n_words)
                memcpy(dst->bits, src->bits, src->n_words * sizeof(uint64_t));
}

void bitmap_done(struct bitmap *b) {
        free(b->bits);
        b->bits = NULL;
        b->n_words = 0;
}

static void bitmap_clear(struct bitmap *b, unsigned i) {
        size_t w = i / 64;
        if (w < b->n_words)
                b->bits[w] &= ~(UINT64_C(1) << (i % 64));
}

int bitmap_parse(const char *s, unsigned max, struct bitmap *ret) {
        struct bitmap b = {0};
        struct bitmap neg = {0};
        const char *p = s;

        while (*p == ' ' || *p == '\t' || *p == '\n')
                p++;
        while (*p) {
                bool exclude = false;
                if (*p == '^') {
                        exclude = true;
                        p++;
                }
                char *end;
                if (*p < '0' || *p > '9')
                        goto fail;
                errno = 0;
                unsigned long lo = strtoul(p, &end, 10);
                unsigned long hi = lo;
                if (errno || lo > max)
                        goto fail;
                p = end;
                if (*p == '-') {
                        p++;
                        if (*p < '0' || *p > '9')
                                goto fail;
                        hi = strtoul(p, &end, 10);
                        if (errno || hi > max || hi < lo)
                                goto fail;
                        p = end;
                }
                bitmap_set_range(exclude ? &neg : &b, (unsigned) lo, (unsigned) hi);
                while (*p == ' ' || *p == '\t' || *p == '\n')
                        p++;
                if (*p == ',') {
                        p++;
                        /* libvirt accepts "0-3, 8" */
                        while (*p == ' ' || *p == '\t' || *p == '\n')
                                p++;
                        if (!*p)
                                goto fail;
                } else if (*p)
                        goto fail;
        }
        for (int i = bitmap_next(&neg, 0); i >= 0; i = bitmap_next(&neg, (unsigned) i + 1))
                bitmap_clear(&b, (unsigned) i);
        bitmap_done(&neg);
        *ret = b;
        return 0;
fail:
        bitmap_done(&b);
        bitmap_done(&neg);
        return -EINVAL;
}

char *bitmap_format(const struct bitmap *b) {
        struct strbuf out = {0};
        int i = bitmap_next(b, 0);
        while (i >= 0) {
                int j = i;
                while (bitmap_test(b, (unsigned) j + 1))
                        j++;
                if (out.len)
                        strbuf_append(&out, ",");
                if (j == i)
                        strbuf_printf(&out, "%d", i);
                else
                        strbuf_printf(&out, "%d-%d", i, j);
                i = bitmap_next(b, (unsigned) j + 1);
        }
        return strbuf_steal(&out);
}

void strbuf_bitmap_words(struct strbuf *out, const struct bitmap *b, const char *prefix) {
        int hi = -1;
        for (int c = bitmap_next(b, 0); c >= 0; c = bitmap_next(b, (unsigned) c + 1))
                hi = c;
        for (unsigned w = hi < 0 ? 1 : (unsigned) hi / 32 + 1; w-- > 0;) {
                uint32_t v = 0;
                for (unsigned bit = 0; bit < 32; bit++)
                        if (bitmap_test(b, w * 32 + bit))
                                v |= UINT32_C(1) << bit;
                strbuf_printf(out, "%s%08" PRIx32 "%s", prefix, v, w ? "," : "");
        }
}

void strbuf_xml_attr(struct strbuf *b, const char *name, const char *value) {
        strbuf_printf(b, " %s=\"", name);
        for (const char *c = value; *c; c++)
                switch (*c) {
                case '&':
                        strbuf_append(b, "&amp;");
                        break;
                case '<':
                        strbuf_append(b, "&lt;");
                        break;
                case '>':
                        strbuf_append(b, "&gt;");
                        break;
                case '"':
                        strbuf_append(b, "&quot;");
                        break;
                default:
                        if ((unsigned char) *c >= 0x20 || *c == '\t')
                                strbuf_appendn(b, c, 1);
                }
        strbuf_append(b, "\"");
}

int uuid_canonical(const char *s, char ret[static 37]) {
        if (!s || strlen(s) != 36)
                return -EINVAL;
        for (size_t i = 0; i < 36; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                char c = s[i];
                bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
                if (dash ? c != '-' : !hex)
                        return -EINVAL;
                ret[i] = (char) (c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
        }
        ret[36] = 0;
        return 0;
}

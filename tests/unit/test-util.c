/* Tests for util.h (number parsing, bitmaps, strbuf, GROW, set_error) and
 * pciaddr.h (parsing, formatting and ordering of PCI addresses). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pciaddr.h"
#include "util.h"

/* ---- parse_uint / parse_int ------------------------------------------ */

static void test_parse_uint_ok(void **state) {
        (void) state;
        uint64_t v = 0;

        assert_int_equal(parse_uint("42", 10, UINT64_MAX, &v), 0);
        assert_int_equal(v, 42);
        assert_int_equal(parse_uint("0", 10, 0, &v), 0);
        assert_int_equal(v, 0);
        /* base 0 accepts hex as libvirt does */
        assert_int_equal(parse_uint("0x1f", 0, UINT64_MAX, &v), 0);
        assert_int_equal(v, 0x1f);
        assert_int_equal(parse_uint("0X1F", 0, UINT64_MAX, &v), 0);
        assert_int_equal(v, 0x1f);
        assert_int_equal(parse_uint("19", 0, UINT64_MAX, &v), 0);
        assert_int_equal(v, 19);
        assert_int_equal(parse_uint("ff", 16, UINT64_MAX, &v), 0);
        assert_int_equal(v, 255);
        /* leading and trailing white space is allowed */
        assert_int_equal(parse_uint("  7", 10, UINT64_MAX, &v), 0);
        assert_int_equal(v, 7);
        assert_int_equal(parse_uint("8 \n", 10, UINT64_MAX, &v), 0);
        assert_int_equal(v, 8);
        assert_int_equal(parse_uint("\t9\t", 10, UINT64_MAX, &v), 0);
        assert_int_equal(v, 9);
        /* max is inclusive */
        assert_int_equal(parse_uint("255", 10, 255, &v), 0);
        assert_int_equal(v, 255);
        assert_int_equal(parse_uint("0xff", 0, 0xff, &v), 0);
        assert_int_equal(v, 255);
        /* the full 64-bit range */
        assert_int_equal(parse_uint("18446744073709551615", 10, UINT64_MAX, &v), 0);
        assert_true(v == UINT64_MAX);
}

static void test_parse_uint_bad(void **state) {
        (void) state;
        uint64_t v = 12345;

        assert_int_equal(parse_uint(NULL, 10, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("", 10, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("   ", 10, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("12abc", 10, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("12 3", 10, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("abc", 10, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("0x", 0, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("0x1g", 0, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint("1f", 10, UINT64_MAX, &v), -EINVAL);
        /* strtoull would wrap "-1" to UINT64_MAX */
        assert_int_equal(parse_uint("-1", 10, UINT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_uint(" -1", 0, UINT64_MAX, &v), -EINVAL);
        /* overflow of uint64_t and of max */
        assert_true(parse_uint("18446744073709551616", 10, UINT64_MAX, &v) < 0);
        assert_true(parse_uint("99999999999999999999999", 10, UINT64_MAX, &v) < 0);
        assert_true(parse_uint("256", 10, 255, &v) < 0);
        assert_true(parse_uint("0x100", 0, 0xff, &v) < 0);
        assert_true(parse_uint("1", 10, 0, &v) < 0);
        /* a failed parse leaves *ret alone */
        assert_int_equal(v, 12345);
}

static void test_parse_int(void **state) {
        (void) state;
        int64_t v = 0;

        assert_int_equal(parse_int("-5", 10, INT64_MIN, INT64_MAX, &v), 0);
        assert_true(v == -5);
        assert_int_equal(parse_int("17", 10, INT64_MIN, INT64_MAX, &v), 0);
        assert_true(v == 17);
        assert_int_equal(parse_int("-0x10", 0, INT64_MIN, INT64_MAX, &v), 0);
        assert_true(v == -16);
        assert_int_equal(parse_int(" -3 \n", 10, INT64_MIN, INT64_MAX, &v), 0);
        assert_true(v == -3);
        assert_int_equal(parse_int("-128", 10, -128, 127, &v), 0);
        assert_true(v == -128);
        assert_int_equal(parse_int("127", 10, -128, 127, &v), 0);
        assert_true(v == 127);
        assert_int_equal(parse_int("-9223372036854775808", 10, INT64_MIN, INT64_MAX, &v), 0);
        assert_true(v == INT64_MIN);

        v = 99;
        assert_true(parse_int("-129", 10, -128, 127, &v) < 0);
        assert_true(parse_int("128", 10, -128, 127, &v) < 0);
        assert_true(parse_int("9223372036854775808", 10, INT64_MIN, INT64_MAX, &v) < 0);
        assert_true(parse_int("-9223372036854775809", 10, INT64_MIN, INT64_MAX, &v) < 0);
        assert_int_equal(parse_int("", 10, INT64_MIN, INT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_int(" ", 10, INT64_MIN, INT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_int(NULL, 10, INT64_MIN, INT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_int("3 x", 10, INT64_MIN, INT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_int("-", 10, INT64_MIN, INT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_int("--1", 10, INT64_MIN, INT64_MAX, &v), -EINVAL);
        assert_int_equal(parse_int("1.5", 10, INT64_MIN, INT64_MAX, &v), -EINVAL);
        assert_true(v == 99);
}

/* ---- bitmaps ----------------------------------------------------------- */

static void assert_bitmap_is(const struct bitmap *b, const char *expected) {
        _cleanup_free_ char *s = bitmap_format(b);
        assert_non_null(s);
        assert_string_equal(s, expected);
}

static void test_bitmap_parse_ok(void **state) {
        (void) state;
        struct bitmap b = {0};

        assert_int_equal(bitmap_parse("0-3,8", 1023, &b), 0);
        assert_int_equal(bitmap_count(&b), 5);
        for (unsigned i = 0; i <= 3; i++)
                assert_true(bitmap_test(&b, i));
        assert_false(bitmap_test(&b, 4));
        assert_false(bitmap_test(&b, 7));
        assert_true(bitmap_test(&b, 8));
        assert_false(bitmap_test(&b, 9));
        assert_false(bitmap_test(&b, 1000));
        assert_bitmap_is(&b, "0-3,8");
        bitmap_done(&b);

        /* ^N exclusions */
        assert_int_equal(bitmap_parse("0-7,^2", 1023, &b), 0);
        assert_int_equal(bitmap_count(&b), 7);
        assert_false(bitmap_test(&b, 2));
        assert_bitmap_is(&b, "0-1,3-7");
        bitmap_done(&b);

        assert_int_equal(bitmap_parse("0-15,^4-7,^12", 1023, &b), 0);
        assert_bitmap_is(&b, "0-3,8-11,13-15");
        bitmap_done(&b);

        /* an exclusion of something not in the set leaves an empty set */
        assert_int_equal(bitmap_parse("^2", 1023, &b), 0);
        assert_true(bitmap_isempty(&b));
        bitmap_done(&b);

        /* empty string: empty set */
        assert_int_equal(bitmap_parse("", 1023, &b), 0);
        assert_true(bitmap_isempty(&b));
        assert_int_equal(bitmap_count(&b), 0);
        assert_bitmap_is(&b, "");
        bitmap_done(&b);

        /* single numbers, a one-element range, across word boundaries */
        assert_int_equal(bitmap_parse("5", 1023, &b), 0);
        assert_bitmap_is(&b, "5");
        bitmap_done(&b);
        assert_int_equal(bitmap_parse("4-4", 1023, &b), 0);
        assert_bitmap_is(&b, "4");
        bitmap_done(&b);
        assert_int_equal(bitmap_parse("60-70,200", 1023, &b), 0);
        assert_int_equal(bitmap_count(&b), 12);
        assert_true(bitmap_test(&b, 63));
        assert_true(bitmap_test(&b, 64));
        assert_true(bitmap_test(&b, 200));
        assert_bitmap_is(&b, "60-70,200");
        bitmap_done(&b);

        /* max is inclusive */
        assert_int_equal(bitmap_parse("1023", 1023, &b), 0);
        assert_true(bitmap_test(&b, 1023));
        bitmap_done(&b);
}

static void test_bitmap_parse_bad(void **state) {
        (void) state;
        static const char *const bad[] = {
                "3-1", "1,", "a", ",1", "1,,2", "1-", "-1", "1-a", "0-3,x", "1 2", "^", "1-2-3", "2147483648", "1024",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct bitmap b = {0};
                int r = bitmap_parse(bad[i], 1023, &b);
                if (r != -EINVAL)
                        fail_msg("bitmap_parse(\"%s\") = %d, expected -EINVAL", bad[i], r);
                bitmap_done(&b);
        }
        /* beyond max */
        struct bitmap b = {0};
        assert_int_equal(bitmap_parse("0-8", 7, &b), -EINVAL);
        bitmap_done(&b);
        assert_int_equal(bitmap_parse("8", 7, &b), -EINVAL);
        bitmap_done(&b);
}

static void test_bitmap_roundtrip(void **state) {
        (void) state;
        static const char *const lists[] = {
                "0", "0-3,8", "1,3,5,7", "0-63", "0-64", "63-64", "0,2-4,6-100,127-128,1000", "",
        };
        for (size_t i = 0; i < ELEMENTSOF(lists); i++) {
                struct bitmap b = {0};
                assert_int_equal(bitmap_parse(lists[i], 16383, &b), 0);
                assert_bitmap_is(&b, lists[i]);
                bitmap_done(&b);
        }
        /* formatting is compact whatever the input looked like */
        struct bitmap b = {0};
        assert_int_equal(bitmap_parse("3,2,1,0,8,9", 1023, &b), 0);
        assert_bitmap_is(&b, "0-3,8-9");
        bitmap_done(&b);
        assert_int_equal(bitmap_parse("0-3,2-5", 1023, &b), 0);
        assert_bitmap_is(&b, "0-5");
        bitmap_done(&b);
        assert_int_equal(bitmap_parse(" 1", 1023, &b), 0);
        assert_bitmap_is(&b, "1");
        bitmap_done(&b);
}

/* The cpumap words hwloc's and NCCL's files hold, and XML attributes. */
static void test_strbuf_words_and_xml(void **state) {
        (void) state;
        struct bitmap b = {0};
        struct strbuf s = {0};
        strbuf_bitmap_words(&s, &b, "0x");
        assert_string_equal(s.buf, "0x00000000");
        strbuf_done(&s);
        assert_int_equal(bitmap_parse("0-3,32,63", 1023, &b), 0);
        strbuf_bitmap_words(&s, &b, "0x");
        assert_string_equal(s.buf, "0x80000001,0x0000000f");
        strbuf_done(&s);
        strbuf_bitmap_words(&s, &b, "");
        assert_string_equal(s.buf, "80000001,0000000f");
        strbuf_done(&s);
        bitmap_done(&b);

        strbuf_xml_attr(&s, "name", "a&b <c> \"d\"\te\001\nf");
        assert_string_equal(s.buf, " name=\"a&amp;b &lt;c&gt; &quot;d&quot;\tef\"");
        strbuf_done(&s);
}

static void test_bitmap_ops(void **state) {
        (void) state;
        struct bitmap a = {0}, b = {0}, empty = {0};

        assert_true(bitmap_isempty(&a));
        assert_int_equal(bitmap_count(&a), 0);
        assert_int_equal(bitmap_next(&a, 0), -1);
        assert_false(bitmap_test(&a, 0));
        assert_true(bitmap_equal(&a, &empty));

        bitmap_set(&a, 3);
        bitmap_set(&a, 70);
        bitmap_set(&a, 200);
        bitmap_set(&a, 3); /* idempotent */
        assert_false(bitmap_isempty(&a));
        assert_int_equal(bitmap_count(&a), 3);
        assert_true(bitmap_test(&a, 3));
        assert_true(bitmap_test(&a, 70));
        assert_true(bitmap_test(&a, 200));
        assert_false(bitmap_test(&a, 4));
        assert_false(bitmap_test(&a, 100000));

        assert_int_equal(bitmap_next(&a, 0), 3);
        assert_int_equal(bitmap_next(&a, 3), 3);
        assert_int_equal(bitmap_next(&a, 4), 70);
        assert_int_equal(bitmap_next(&a, 64), 70);
        assert_int_equal(bitmap_next(&a, 71), 200);
        assert_int_equal(bitmap_next(&a, 201), -1);
        assert_int_equal(bitmap_next(&a, 5000), -1);

        bitmap_set(&b, 5);
        assert_false(bitmap_intersects(&a, &b));
        assert_false(bitmap_intersects(&a, &empty));
        bitmap_set(&b, 200);
        assert_true(bitmap_intersects(&a, &b));
        assert_true(bitmap_intersects(&b, &a));
        assert_false(bitmap_equal(&a, &b));

        bitmap_or(&b, &a);
        assert_int_equal(bitmap_count(&b), 4);
        assert_bitmap_is(&b, "3,5,70,200");
        /* a is unchanged by being the source */
        assert_bitmap_is(&a, "3,70,200");

        /* equality ignores how many words each side has allocated */
        struct bitmap c = {0}, d = {0};
        bitmap_set(&c, 1);
        bitmap_set(&d, 1);
        bitmap_set(&d, 500);
        assert_false(bitmap_equal(&c, &d));
        bitmap_done(&d);
        bitmap_set(&d, 1);
        assert_true(bitmap_equal(&c, &d));
        struct bitmap e = {0};
        assert_int_equal(bitmap_parse("1,300,^300", 1023, &e), 0);
        assert_true(bitmap_equal(&c, &e));
        assert_true(bitmap_equal(&e, &c));

        bitmap_done(&a);
        assert_true(bitmap_isempty(&a));
        assert_null(a.bits);
        assert_int_equal(a.n_words, 0);
        bitmap_done(&a); /* twice is fine */
        bitmap_done(&b);
        bitmap_done(&c);
        bitmap_done(&d);
        bitmap_done(&e);
}

/* ---- strbuf, GROW, allocation helpers, set_error ----------------------- */

/* bitmap_set_range() sets what setting each bit would, a word at a time
 * (ranges in one word, across words, on word edges), and bitmap_or()
 * grows its destination only as far as the source's last set bit. */
static void test_bitmap_range(void **state) {
        (void) state;
        static const unsigned ranges[][2] = { { 3, 10 }, { 0, 63 }, { 0, 64 }, { 10, 200 }, { 64, 64 }, { 63, 64 },
                                              { 0, 16383 }, { 127, 129 }, { 5, 5 } };
        for (size_t i = 0; i < ELEMENTSOF(ranges); i++) {
                struct bitmap fast = {0}, slow = {0};
                bitmap_set_range(&fast, ranges[i][0], ranges[i][1]);
                for (unsigned k = ranges[i][0]; k <= ranges[i][1]; k++)
                        bitmap_set(&slow, k);
                assert_true(bitmap_equal(&fast, &slow));
                assert_int_equal(bitmap_count(&fast), ranges[i][1] - ranges[i][0] + 1);
                assert_int_equal(bitmap_next(&fast, 0), (int) ranges[i][0]);
                bitmap_done(&fast);
                bitmap_done(&slow);
        }
        struct bitmap a = {0}, b = {0};
        bitmap_set(&a, 1);
        b.bits = xcalloc(8, sizeof(uint64_t));   /* words past the last set bit */
        b.n_words = 8;
        b.bits[1] = 2;                          /* bit 65 */
        bitmap_or(&a, &b);
        assert_int_equal(a.n_words, 2);
        assert_int_equal(bitmap_count(&a), 2);
        assert_true(bitmap_test(&a, 65));
        bitmap_done(&a);
        bitmap_done(&b);
}

static void test_strbuf(void **state) {
        (void) state;
        struct strbuf b = {0};

        strbuf_append(&b, "hello");
        assert_int_equal(b.len, 5);
        assert_string_equal(b.buf, "hello");
        strbuf_appendn(&b, ", world!!!", 7);
        assert_string_equal(b.buf, "hello, world");
        strbuf_printf(&b, " %d-%s-%04x", 42, "x", 0x3b);
        assert_string_equal(b.buf, "hello, world 42-x-003b");
        assert_int_equal(b.len, strlen("hello, world 42-x-003b"));
        strbuf_append(&b, "");
        assert_int_equal(b.len, strlen("hello, world 42-x-003b"));

        char *s = strbuf_steal(&b);
        assert_string_equal(s, "hello, world 42-x-003b");
        assert_null(b.buf);
        assert_int_equal(b.len, 0);
        free(s);

        /* an untouched buffer steals as "" (never NULL) */
        s = strbuf_steal(&b);
        assert_non_null(s);
        assert_string_equal(s, "");
        free(s);

        /* growth well past any initial capacity keeps the contents */
        for (int i = 0; i < 5000; i++)
                strbuf_printf(&b, "%d,", i % 10);
        assert_int_equal(b.len, 10000);
        for (size_t i = 0; i < 10000; i += 2) {
                assert_int_equal(b.buf[i], '0' + (int) ((i / 2) % 10));
                assert_int_equal(b.buf[i + 1], ',');
        }
        assert_int_equal(b.buf[10000], 0);

        /* appendn copies exactly n bytes, even with a NUL-free source longer than n */
        strbuf_done(&b);
        assert_null(b.buf);
        assert_int_equal(b.len, 0);
        strbuf_appendn(&b, "abcdef", 3);
        strbuf_appendn(&b, "XYZ", 0);
        assert_string_equal(b.buf, "abc");
        strbuf_done(&b);
        strbuf_done(&b);
}

static void test_grow(void **state) {
        (void) state;
        int *a = NULL;
        size_t n = 0;

        for (int i = 0; i < 1000; i++) {
                int *e = GROW(a, n);
                assert_non_null(e);
                assert_int_equal(*e, 0);        /* zeroed */
                assert_int_equal(n, (size_t) i + 1);
                assert_ptr_equal(e, &a[i]);
                *e = i * 3 + 1;
        }
        for (int i = 0; i < 1000; i++)
                assert_int_equal(a[i], i * 3 + 1);
        free(a);

        /* elements larger than a pointer */
        struct big {
                char name[40];
                uint64_t v;
        } *b = NULL;
        size_t nb = 0;
        for (unsigned i = 0; i < 300; i++) {
                struct big *e = GROW(b, nb);
                assert_int_equal(e->v, 0);
                assert_int_equal(e->name[0], 0);
                snprintf(e->name, sizeof e->name, "element-%u", i);
                e->v = (uint64_t) i << 33;
        }
        assert_int_equal(nb, 300);
        for (unsigned i = 0; i < 300; i++) {
                char want[40];
                snprintf(want, sizeof want, "element-%u", i);
                assert_string_equal(b[i].name, want);
                assert_true(b[i].v == (uint64_t) i << 33);
        }
        free(b);
}

static void test_alloc_helpers(void **state) {
        (void) state;
        _cleanup_free_ char *s = xasprintf("%s:%02x:%d", "dom", 0x3b, -1);
        assert_string_equal(s, "dom:3b:-1");
        _cleanup_free_ char *d = xstrdup("abc");
        assert_string_equal(d, "abc");
        _cleanup_free_ char *n = xstrndup("abcdef", 2);
        assert_string_equal(n, "ab");
        _cleanup_free_ char *z = xstrndup("ab", 10);
        assert_string_equal(z, "ab");
        _cleanup_free_ int *c = xcalloc(16, sizeof(int));
        for (int i = 0; i < 16; i++)
                assert_int_equal(c[i], 0);

        assert_true(streq("a", "a"));
        assert_false(streq("a", "b"));
        assert_true(streq_ptr(NULL, NULL));
        assert_false(streq_ptr("a", NULL));
        assert_false(streq_ptr(NULL, "a"));
        assert_true(streq_ptr("x", "x"));
        assert_string_equal(strempty(NULL), "");
        assert_string_equal(strempty("q"), "q");
        assert_string_equal(strna(NULL), "n/a");

        char *p = xstrdup("owned");
        char *q = TAKE_PTR(p);
        assert_null(p);
        assert_string_equal(q, "owned");
        free(q);
        int fd = 7;
        assert_int_equal(TAKE_FD(fd), 7);
        assert_int_equal(fd, -1);
}

static void test_set_error(void **state) {
        (void) state;
        char *err = NULL;

        assert_int_equal(set_error(&err, -EINVAL, "bad %s at %d", "thing", 3), -EINVAL);
        assert_non_null(err);
        assert_string_equal(err, "bad thing at 3");
        /* a second error replaces the first (and does not leak it) */
        assert_int_equal(set_error(&err, -ENOENT, "second"), -ENOENT);
        assert_string_equal(err, "second");
        free(err);
        /* NULL ret_error is allowed */
        assert_int_equal(set_error(NULL, -EFBIG, "ignored %d", 1), -EFBIG);
}

/* ---- PCI addresses ----------------------------------------------------- */

static void assert_addr(const struct pci_addr *a, uint32_t dom, unsigned bus, unsigned slot, unsigned fn) {
        assert_int_equal(a->domain, dom);
        assert_int_equal(a->bus, bus);
        assert_int_equal(a->slot, slot);
        assert_int_equal(a->func, fn);
}

static void test_pci_addr_parse_ok(void **state) {
        (void) state;
        struct pci_addr a;

        assert_int_equal(pci_addr_parse("0000:3b:00.0", &a), 0);
        assert_addr(&a, 0, 0x3b, 0, 0);
        assert_int_equal(pci_addr_parse("0001:af:1f.7", &a), 0);
        assert_addr(&a, 1, 0xaf, 0x1f, 7);
        assert_int_equal(pci_addr_parse("0000:AF:0A.3", &a), 0);
        assert_addr(&a, 0, 0xaf, 0x0a, 3);
        /* 32-bit domains (VMD, Hyper-V) */
        assert_int_equal(pci_addr_parse("10000:00:04.0", &a), 0);
        assert_addr(&a, 0x10000, 0, 4, 0);
        assert_int_equal(pci_addr_parse("ffffffff:ff:1f.7", &a), 0);
        assert_addr(&a, 0xffffffffu, 0xff, 0x1f, 7);
        assert_int_equal(pci_addr_parse("c0a8:01:02.1", &a), 0);
        assert_addr(&a, 0xc0a8, 1, 2, 1);
        /* short form without the domain */
        assert_int_equal(pci_addr_parse("3b:00.0", &a), 0);
        assert_addr(&a, 0, 0x3b, 0, 0);
        assert_int_equal(pci_addr_parse("00:1f.2", &a), 0);
        assert_addr(&a, 0, 0, 0x1f, 2);
}

static void test_pci_addr_parse_bad(void **state) {
        (void) state;
        static const char *const bad[] = {
                "0000:3b:20.0",         /* slot > 0x1f */
                "0000:3b:00.8",         /* function > 7 */
                "zz",
                "0000:3b:00.0x",        /* trailing garbage */
                "0000:3b:00.0 ",
                " 0000:3b:00.0",
                "",
                "0000:3b:00",           /* no function */
                "0000:3b:00.",
                "0000:3b.00.0",
                "0000:100:00.0",        /* bus > 0xff */
                "100000000:00:00.0",    /* domain wider than 32 bits */
                "0000::00.0",
                "0000:3b:000.0",
                "3b:20.0",              /* short form, slot > 0x1f */
                "3b:00.8",
                "3b:00",
                "100:00.0",             /* short form, bus > 0xff */
                "0000:3b:00.00",
                "g000:3b:00.0",
                "-1:3b:00.0",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct pci_addr a = { .domain = 0x1234, .bus = 0x56, .slot = 7, .func = 1 };
                int r = pci_addr_parse(bad[i], &a);
                if (r != -EINVAL)
                        fail_msg("pci_addr_parse(\"%s\") = %d, expected -EINVAL", bad[i], r);
        }
        struct pci_addr a;
        assert_int_equal(pci_addr_parse(NULL, &a), -EINVAL);
}

static void test_pci_addr_format(void **state) {
        (void) state;
        char buf[PCI_ADDR_STRLEN];
        struct pci_addr a = { .domain = 0, .bus = 0x3b, .slot = 0, .func = 0 };

        assert_ptr_equal(pci_addr_format(&a, buf), buf);
        assert_string_equal(buf, "0000:3b:00.0");
        a = (struct pci_addr) { .domain = 0x10000, .bus = 0, .slot = 4, .func = 0 };
        assert_string_equal(pci_addr_format(&a, buf), "10000:00:04.0");
        a = (struct pci_addr) { .domain = 0xffffffffu, .bus = 0xff, .slot = 0x1f, .func = 7 };
        assert_string_equal(pci_addr_format(&a, buf), "ffffffff:ff:1f.7");
        assert_int_equal(strlen(buf), PCI_ADDR_STRLEN - 1);
        a = (struct pci_addr) { .domain = 0xa, .bus = 0xb, .slot = 0xc, .func = 5 };
        assert_string_equal(pci_addr_format(&a, buf), "000a:0b:0c.5");

        /* round trip */
        static const char *const names[] = { "0000:00:00.0", "0000:3b:00.0", "0001:af:1f.7", "10000:00:04.0", "ffffffff:ff:1f.7" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                struct pci_addr p;
                assert_int_equal(pci_addr_parse(names[i], &p), 0);
                assert_string_equal(pci_addr_format(&p, buf), names[i]);
        }
        /* the short form formats with the domain */
        struct pci_addr p;
        assert_int_equal(pci_addr_parse("3b:00.1", &p), 0);
        assert_string_equal(pci_addr_format(&p, buf), "0000:3b:00.1");
}

static int cmp_wrapper(const void *x, const void *y) {
        return pci_addr_cmp(x, y);
}

static void test_pci_addr_cmp(void **state) {
        (void) state;
        struct pci_addr a = { 0, 0x3b, 0, 0 }, b = { 0, 0x3b, 0, 0 };

        assert_int_equal(pci_addr_cmp(&a, &b), 0);
        assert_true(pci_addr_eq(&a, &b));

        /* each field decides, most significant first */
        b.func = 1;
        assert_true(pci_addr_cmp(&a, &b) < 0);
        assert_true(pci_addr_cmp(&b, &a) > 0);
        assert_false(pci_addr_eq(&a, &b));
        b = (struct pci_addr) { 0, 0x3b, 1, 0 };
        a.func = 7;
        assert_true(pci_addr_cmp(&a, &b) < 0);        /* slot beats function */
        b = (struct pci_addr) { 0, 0x3c, 0, 0 };
        a = (struct pci_addr) { 0, 0x3b, 0x1f, 7 };
        assert_true(pci_addr_cmp(&a, &b) < 0);        /* bus beats slot */
        b = (struct pci_addr) { 1, 0, 0, 0 };
        a = (struct pci_addr) { 0, 0xff, 0x1f, 7 };
        assert_true(pci_addr_cmp(&a, &b) < 0);        /* domain beats bus */
        /* 32-bit domains compare as unsigned */
        b = (struct pci_addr) { 0x80000000u, 0, 0, 0 };
        a = (struct pci_addr) { 0x7fffffffu, 0, 0, 0 };
        assert_true(pci_addr_cmp(&a, &b) < 0);
        assert_true(pci_addr_cmp(&b, &a) > 0);

        /* sorting */
        static const char *const in[] = { "0001:00:00.0", "0000:3b:00.1", "10000:00:00.0", "0000:3b:00.0", "0000:00:1f.0", "0000:3a:1f.7", "0000:00:02.0" };
        static const char *const out[] = { "0000:00:02.0", "0000:00:1f.0", "0000:3a:1f.7", "0000:3b:00.0", "0000:3b:00.1", "0001:00:00.0", "10000:00:00.0" };
        struct pci_addr v[ELEMENTSOF(in)];
        for (size_t i = 0; i < ELEMENTSOF(in); i++)
                assert_int_equal(pci_addr_parse(in[i], &v[i]), 0);
        qsort(v, ELEMENTSOF(v), sizeof(v[0]), cmp_wrapper);
        char buf[PCI_ADDR_STRLEN];
        for (size_t i = 0; i < ELEMENTSOF(out); i++)
                assert_string_equal(pci_addr_format(&v[i], buf), out[i]);
}

static void test_uuid_canonical(void **state) {
        char u[37];
        assert_int_equal(uuid_canonical("0C8B1D2E-3F4A-4B5C-8D6E-7F8091A2B3C4", u), 0);
        assert_string_equal(u, "0c8b1d2e-3f4a-4b5c-8d6e-7f8091a2b3c4");
        assert_true(uuid_is_valid("0c8b1d2e-3f4a-4b5c-8d6e-7f8091a2b3c4"));
        static const char *const bad[] = {
                NULL, "", "0c8b1d2e3f4a4b5c8d6e7f8091a2b3c4",           /* no dashes */
                "0c8b1d2e-3f4a-4b5c-8d6e-7f8091a2b3c",                  /* short */
                "0c8b1d2e-3f4a-4b5c-8d6e-7f8091a2b3c4a",                /* long */
                "0c8b1d2e-3f4a-4b5c-8d6e_7f8091a2b3c4",                 /* '_' for '-' */
                "0c8b1d2g-3f4a-4b5c-8d6e-7f8091a2b3c4",                 /* 'g' */
                "0c8b1d2-e3f4a-4b5c-8d6e-7f8091a2b3c4",                 /* dash moved */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                memcpy(u, "untouched", 10);
                assert_int_equal(uuid_canonical(bad[i], u), -EINVAL);
                assert_false(uuid_is_valid(bad[i]));
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_uint_ok),
                cmocka_unit_test(test_parse_uint_bad),
                cmocka_unit_test(test_parse_int),
                cmocka_unit_test(test_bitmap_parse_ok),
                cmocka_unit_test(test_bitmap_parse_bad),
                cmocka_unit_test(test_bitmap_roundtrip),
                cmocka_unit_test(test_bitmap_ops),
                cmocka_unit_test(test_bitmap_range),
                cmocka_unit_test(test_strbuf_words_and_xml),
                cmocka_unit_test(test_strbuf),
                cmocka_unit_test(test_grow),
                cmocka_unit_test(test_alloc_helpers),
                cmocka_unit_test(test_set_error),
                cmocka_unit_test(test_pci_addr_parse_ok),
                cmocka_unit_test(test_pci_addr_parse_bad),
                cmocka_unit_test(test_pci_addr_format),
                cmocka_unit_test(test_pci_addr_cmp),
                cmocka_unit_test(test_uuid_canonical),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

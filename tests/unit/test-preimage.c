/* Tests for watcher/preimage.c, pcinuma-watcher's store of the definitions
 * it replaces, on a temporary folder: a domain keeps its newest five; the
 * folder's limits (files, bytes) drop other domains' older pre-images,
 * oldest first, but never a domain's newest, so 1000 defines of other
 * domains leave a victim's only pre-image (issue 24: before, the 1001st
 * define of another domain deleted it); a save that would need another
 * domain's newest is refused (-ENOSPC), writing nothing; what a prune
 * drops is reported. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preimage.h"
#include "util.h"

static char *tmpdir(void) {
        char t[] = "/tmp/test-preimage-XXXXXX";
        assert_non_null(mkdtemp(t));
        return xasprintf("%s/preimages", t);
}

static void rm_rf(const char *dir) {
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_free_ char *p = xasprintf("%s/%s", dir, de->d_name);
                (void) unlink(p);
        }
        if (d)
                closedir(d);
        (void) rmdir(dir);
        _cleanup_free_ char *parent = xstrdup(dir);
        *strrchr(parent, '/') = 0;
        (void) rmdir(parent);
}

/* The files of domain uuid in dir (or all, uuid NULL). */
static size_t count(const char *dir, const char *uuid) {
        size_t n = 0;
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));)
                if (de->d_name[0] != '.' && (!uuid || strstr(de->d_name, uuid)))
                        n++;
        if (d)
                closedir(d);
        return n;
}

static char *uuid_of(unsigned i) {
        return xasprintf("%08x-0000-4000-8000-000000000000", i);
}

/* Save and prune as the watcher does for one redefinition. */
static int define(struct preimage_store *s, const char *name, const char *uuid, const char *xml,
                  struct preimage_dropped *dropped, char **ret_error) {
        _cleanup_free_ char *path = NULL;
        int r = preimage_save(s, name, uuid, xml, &path, ret_error);
        if (r < 0)
                return r;
        struct preimage_dropped d;
        preimage_prune(s, path, uuid, &d);
        if (dropped)
                *dropped = d;
        else
                preimage_dropped_done(&d);
        return 0;
}

static void test_victim_survives(void **state) {
        (void) state;
        _cleanup_free_ char *dir = tmpdir();
        struct preimage_store *s = preimage_store_new(dir, PREIMAGE_MAX_BYTES_DEFAULT);
        _cleanup_free_ char *victim = uuid_of(0xffffffff), *err = NULL;
        assert_int_equal(define(s, "victim", victim, "<domain><name>victim</name></domain>\n", NULL, &err), 0);
        /* 1000 other domains, each defined (and redefined) by one user */
        for (unsigned i = 0; i < 1000; i++) {
                _cleanup_free_ char *u = uuid_of(i), *name = xasprintf("other-%u", i);
                assert_int_equal(define(s, name, u, "<domain/>\n", NULL, &err), 0);
        }
        assert_int_equal(count(dir, victim), 1);
        assert_int_equal(count(dir, NULL), 1001);
        /* a domain keeps its newest five */
        for (unsigned k = 0; k < 8; k++)
                assert_int_equal(define(s, "victim", victim, "<domain><name>victim</name></domain>\n", NULL, &err), 0);
        assert_int_equal(count(dir, victim), PREIMAGE_PER_DOMAIN);
        preimage_store_free(s);
        rm_rf(dir);
}

/* The byte limit: other domains' older pre-images go, oldest first, and
 * are reported; their newest stay; when only newest ones are left, a new
 * domain's save is refused, and nothing is written. */
static void test_byte_limit(void **state) {
        (void) state;
        _cleanup_free_ char *dir = tmpdir();
        char xml[1001];
        memset(xml, 'x', 1000);
        xml[1000] = 0;
        /* room for 10 files of 1000 bytes */
        struct preimage_store *s = preimage_store_new(dir, 10000);
        _cleanup_free_ char *a = uuid_of(1), *b = uuid_of(2), *err = NULL;
        for (unsigned k = 0; k < 5; k++)
                assert_int_equal(define(s, "a", a, xml, NULL, &err), 0);
        for (unsigned k = 0; k < 5; k++)
                assert_int_equal(define(s, "b", b, xml, NULL, &err), 0);
        assert_int_equal(count(dir, NULL), 10);
        /* an 11th: a's oldest goes, reported */
        _cleanup_free_ char *c = uuid_of(3);
        struct preimage_dropped d;
        assert_int_equal(define(s, "c", c, xml, &d, &err), 0);
        assert_int_equal(d.n_others, 1);
        assert_int_equal(d.n_own, 0);
        assert_int_equal(d.bytes, 1000);
        assert_non_null(d.files);
        assert_non_null(strstr(d.files, a));
        assert_int_equal(d.n_left, 10);
        assert_int_equal(d.bytes_left, 10000);
        assert_false(d.over);
        preimage_dropped_done(&d);
        assert_int_equal(count(dir, a), 4);
        /* 7 more domains: the older ones of a and b go, their newest stay */
        for (unsigned i = 4; i < 11; i++) {
                _cleanup_free_ char *u = uuid_of(i);
                assert_int_equal(define(s, "more", u, xml, NULL, &err), 0);
        }
        assert_int_equal(count(dir, a), 1);
        assert_int_equal(count(dir, b), 1);
        assert_int_equal(count(dir, NULL), 10);
        /* one more domain: only newest pre-images are left: refused */
        _cleanup_free_ char *z = uuid_of(99);
        assert_int_equal(define(s, "z", z, xml, NULL, &err), -ENOSPC);
        assert_non_null(strstr(err, "no room for domain z's pre-image (1000 bytes)"));
        assert_non_null(strstr(err, "--preimage-max-bytes"));
        assert_int_equal(count(dir, z), 0);
        assert_int_equal(count(dir, NULL), 10);
        /* a domain that has one can still replace it (its own older ones
         * make room) */
        assert_int_equal(define(s, "a", a, xml, &d, &err), 0);
        assert_int_equal(d.n_own, 1);
        preimage_dropped_done(&d);
        assert_int_equal(count(dir, a), 1);
        preimage_store_free(s);
        rm_rf(dir);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_victim_survives),
                cmocka_unit_test(test_byte_limit),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

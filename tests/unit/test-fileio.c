/* Tests for fileio.h: read_full_fd() on empty, small and multi-chunk
 * files, at and past its limit (0 and "no limit" included), through a
 * pipe, and with a read error; write_full_fd() through a full
 * non-blocking pipe and with a write error. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fileio.h"
#include "util.h"

/* A memfd holding len bytes of a pattern, at offset 0. */
static int file_with(size_t len) {
        int fd = memfd_create("test-fileio", MFD_CLOEXEC);
        assert_true(fd >= 0);
        for (size_t i = 0; i < len; i++) {
                char c = (char) ('a' + i % 26);
                assert_int_equal(write(fd, &c, 1), 1);
        }
        assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
        return fd;
}

static void check_read(size_t size, size_t max, int expected) {
        _cleanup_close_ int fd = file_with(size);
        char *buf = (char *) "untouched";
        size_t len = 12345;
        int r = read_full_fd(fd, max, &buf, &len);
        assert_int_equal(r, expected);
        if (r < 0) {
                assert_string_equal(buf, "untouched");
                assert_int_equal(len, 12345);
                return;
        }
        assert_int_equal(len, size);
        assert_int_equal(buf[len], '\0');
        for (size_t i = 0; i < size; i++)
                if (buf[i] != (char) ('a' + i % 26))
                        fail_msg("byte %zu of %zu differs", i, size);
        free(buf);
}

static void test_sizes(void **state) {
        check_read(0, 100, 0);
        check_read(1, 100, 0);
        check_read(100, 100, 0);                /* exactly the limit */
        check_read(101, 100, -EFBIG);           /* one byte over */
        check_read(0, 0, 0);
        check_read(1, 0, -EFBIG);
        check_read(4096, 4096, 0);              /* the first chunk, full */
        check_read(4097, 4096, -EFBIG);
        check_read(3 * 4096 + 7, 1 << 20, 0);   /* grows twice */
        check_read(70000, SIZE_MAX, 0);         /* no limit */
        check_read(70000, 69999, -EFBIG);
}

static void test_no_len(void **state) {
        _cleanup_close_ int fd = file_with(3);
        _cleanup_free_ char *buf = NULL;
        assert_int_equal(read_full_fd(fd, 10, &buf, NULL), 0);
        assert_string_equal(buf, "abc");
}

/* A pipe: reads come in pieces, the end is the writer's close. */
static void test_pipe(void **state) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        assert_int_equal(write(p[1], "one\0two", 7), 7);
        assert_int_equal(write(p[1], "three", 5), 5);
        close(p[1]);
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        assert_int_equal(read_full_fd(p[0], 12, &buf, &len), 0);
        close(p[0]);
        assert_int_equal(len, 12);
        assert_memory_equal(buf, "one\0twothree", 13);
}

static void test_error(void **state) {
        _cleanup_close_ int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        char *buf = NULL;
        assert_int_equal(read_full_fd(fd, 10, &buf, NULL), -EBADF);
        assert_null(buf);
        assert_int_equal(read_full_fd(-1, 10, &buf, NULL), -EBADF);
        _cleanup_close_ int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_int_equal(read_full_fd(dir, 10, &buf, NULL), -EISDIR);
        assert_null(buf);
}

/* The reader of test_write_nonblocking: everything until end of file. */
static void *drain(void *arg) {
        int fd = *(int *) arg;
        char *buf = NULL;
        size_t len = 0;
        usleep(20000);          /* let the writer fill the pipe first */
        if (read_full_fd(fd, SIZE_MAX, &buf, &len) < 0)
                return NULL;
        char *ok = buf && len == 1u << 20 && buf[len - 1] == (char) ('a' + (len - 1) % 26) ? buf : NULL;
        if (!ok)
                free(buf);
        return ok;
}

static void test_write_nonblocking(void **state) {
        /* A MiB through a pipe that holds 64 KiB, its write end
         * non-blocking: write_full_fd() must wait for room, not fail
         * with EAGAIN nor stop short. */
        const size_t len = 1u << 20;
        _cleanup_free_ char *data = xmalloc(len);
        for (size_t i = 0; i < len; i++)
                data[i] = (char) ('a' + i % 26);
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, drain, &p[0]), 0);
        assert_int_equal(write_full_fd(p[1], data, len), 0);
        close(p[1]);
        void *got = NULL;
        assert_int_equal(pthread_join(t, &got), 0);
        close(p[0]);
        assert_non_null(got);
        assert_memory_equal(got, data, len);
        free(got);
}

static void test_write_error(void **state) {
        _cleanup_close_ int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(write_full_fd(fd, "x", 1), -EBADF);
        assert_int_equal(write_full_fd(-1, "x", 1), -EBADF);
        assert_int_equal(write_full_fd(-1, "", 0), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_sizes),
                cmocka_unit_test(test_no_len),
                cmocka_unit_test(test_pipe),
                cmocka_unit_test(test_error),
                cmocka_unit_test(test_write_nonblocking),
                cmocka_unit_test(test_write_error),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

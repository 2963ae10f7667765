/* Runs a fuzz target (tests/fuzz/fuzz-*.c) over files, without libFuzzer, as
 * systemd's fuzz-main.c does: each argument is a file, or a directory
 * whose regular files are each one input.  Built with the ordinary
 * compiler, it lets 'meson test --suite fuzz-replay' replay the committed
 * corpora and crash reproducers.  Exits non-zero when an argument cannot
 * be read; a target that finds a bug aborts. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "util.h"

static int read_whole(const char *path, uint8_t **ret, size_t *ret_len) {
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;

        if (!f)
                return -errno;
        for (;;) {
                if (len == cap) {
                        cap = cap ? cap * 2 : 4096;
                        buf = xrealloc(buf, cap);
                }
                size_t n = fread(buf + len, 1, cap - len, f);
                len += n;
                if (n == 0) {
                        if (ferror(f)) {
                                free(buf);
                                return -EIO;
                        }
                        break;
                }
        }
        *ret = buf;
        *ret_len = len;
        return 0;
}

static int run_file(const char *path) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len = 0;
        int r = read_whole(path, &buf, &len);
        if (r < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(-r));
                return r;
        }
        printf("%s (%zu bytes)\n", path, len);
        fflush(stdout);
        /* An exact-size copy, so that a read past the end is caught by
         * valgrind or ASan as it would be under libFuzzer. */
        _cleanup_free_ uint8_t *copy = xmalloc(len ? len : 1);
        memcpy(copy, buf, len);
        (void) LLVMFuzzerTestOneInput(copy, len);
        return 0;
}

static int name_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static int run_path(const char *path, size_t *n_inputs) {
        struct stat st;

        if (stat(path, &st) < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -errno;
        }
        if (!S_ISDIR(st.st_mode)) {
                (*n_inputs)++;
                return run_file(path);
        }

        DIR *dir = opendir(path);
        if (!dir) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -errno;
        }
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *de; (de = readdir(dir));) {
                if (de->d_name[0] == '.')
                        continue;
                *GROW(names, n) = xasprintf("%s/%s", path, de->d_name);
        }
        closedir(dir);
        /* Sorted, so that a failure is reproducible from the log. */
        if (n > 0)
                qsort(names, n, sizeof(*names), name_cmp);

        int ret = 0;
        for (size_t i = 0; i < n; i++) {
                if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
                        (*n_inputs)++;
                        int r = run_file(names[i]);
                        if (r < 0 && ret == 0)
                                ret = r;
                }
                free(names[i]);
        }
        free(names);
        return ret;
}

int main(int argc, char **argv) {
        size_t n_inputs = 0;
        int ret = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
                return 2;
        }
        for (int i = 1; i < argc; i++)
                if (run_path(argv[i], &n_inputs) < 0)
                        ret = 1;
        printf("%zu inputs replayed\n", n_inputs);
        return ret;
}

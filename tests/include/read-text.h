/* For unit tests that read the golden cases (include after cmocka.h):
 * read_text(), a whole test input file as a string (NULL if it cannot be
 * opened); dir_names(), the entries of a folder in order. */
#pragma once

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static inline char *read_text(const char *path) {
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        struct strbuf b = {0};
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
                strbuf_appendn(&b, buf, n);
        return strbuf_steal(&b);
}

static inline int dir_names_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The names in the folder 'path' but those starting with '.', sorted: an
 * array of *ret_n strings, each and the array to be freed.  A folder that
 * cannot be opened fails the test. */
static inline char **dir_names(const char *path, size_t *ret_n) {
        DIR *dir = opendir(path);
        if (!dir)
                fail_msg("cannot open %s", path);
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *de; (de = readdir(dir));)
                if (de->d_name[0] != '.')
                        *GROW(names, n) = xstrdup(de->d_name);
        closedir(dir);
        qsort(names, n, sizeof(*names), dir_names_cmp);
        *ret_n = n;
        return names;
}

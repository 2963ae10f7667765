/* read_text(): a whole test input file as a string (NULL if it cannot be
 * opened), for unit tests that read the golden cases. */
#pragma once

#include <stdio.h>

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

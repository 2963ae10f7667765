/* pcinumactl's --cpu option for the NCCL topology files (ctl-cpu.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctl-cpu.h"
#include "util.h"

static bool word_ok(const char *s, size_t max) {
        size_t n = strlen(s);
        if (n == 0 || n >= max)
                return false;
        for (; *s; s++)
                if (!(*s >= '0' && *s <= '9') && !(*s >= 'A' && *s <= 'Z') && !(*s >= 'a' && *s <= 'z') &&
                    *s != '_' && *s != '-')
                        return false;
        return true;
}

static int from_spec(const char *who, const char *spec, struct ctl_cpu *c) {
        _cleanup_free_ char *copy = xstrdup(spec);
        char *f[5];
        size_t n = 0;
        for (char *tok = copy, *next; tok && n < ELEMENTSOF(f); tok = next) {
                next = strchr(tok, ',');
                if (next)
                        *next++ = 0;
                f[n++] = tok;
                if (!next)
                        break;
        }
        uint64_t family, model;
        size_t k = n == 4 ? 1 : 0;
        if ((n != 3 && n != 4) || (n == 4 && !word_ok(f[0], sizeof c->arch)) || !word_ok(f[k], sizeof c->vendor) ||
            parse_uint(f[k + 1], 0, 0xfff, &family) < 0 || parse_uint(f[k + 2], 0, 0xfff, &model) < 0) {
                fprintf(stderr, "%s: --cpu '%s': expected VENDOR,FAMILY,MODEL (e.g. GenuineIntel,6,143), "
                                "ARCH,VENDOR,FAMILY,MODEL or none\n", who, spec);
                return -EINVAL;
        }
        snprintf(c->arch, sizeof c->arch, "%s", n == 4 ? f[0] : "x86_64");
        snprintf(c->vendor, sizeof c->vendor, "%s", f[k]);
        c->id = (struct nccltopo_cpu) { .arch = c->arch, .vendor = c->vendor, .family = (int) family, .model = (int) model };
        return 0;
}

int ctl_cpu_parse(const char *who, const char *spec, struct ctl_cpu *c) {
        *c = (struct ctl_cpu) { .id = { .family = -1, .model = -1 } };
        if (streq(spec, "none")) {
                c->none = true;
                return 0;
        }
        return from_spec(who, spec, c);
}

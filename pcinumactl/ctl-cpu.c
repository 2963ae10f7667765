/* The CPU identity for pcinumactl's NCCL topology files (ctl-cpu.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

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

/* "key\t: value" lines of /proc/cpuinfo, first processor only. */
static void from_cpuinfo(struct ctl_cpu *c) {
        _cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
        char line[512];
        int family = -1, model = -1;
        while (f && fgets(line, sizeof line, f)) {
                if (line[0] == '\n')
                        break;
                char *colon = strchr(line, ':');
                if (!colon)
                        continue;
                char *v = colon + 1;
                v += strspn(v, " \t");
                v[strcspn(v, "\n")] = 0;
                uint64_t u;
                if (strncmp(line, "vendor_id", 9) == 0 && word_ok(v, sizeof c->vendor))
                        snprintf(c->vendor, sizeof c->vendor, "%s", v);
                else if (strncmp(line, "cpu family", 10) == 0 && parse_uint(v, 10, 0xfff, &u) >= 0)
                        family = (int) u;
                else if (strncmp(line, "model\t", 6) == 0 && parse_uint(v, 10, 0xfff, &u) >= 0)
                        model = (int) u;
        }
        if (c->vendor[0] && family >= 0 && model >= 0) {
                c->id.vendor = c->vendor;
                c->id.family = family;
                c->id.model = model;
        }
}

int ctl_cpu_get(const char *who, const char *spec, struct ctl_cpu *c) {
        *c = (struct ctl_cpu) { .id = { .family = -1, .model = -1 } };
        if (spec && streq(spec, "none"))
                return 0;
        if (spec)
                return from_spec(who, spec, c);
        struct utsname u;
        if (uname(&u) == 0 && word_ok(u.machine, sizeof c->arch)) {
                /* NCCL's names: x86_64, arm64, ppc64. */
                const char *m = streq(u.machine, "aarch64") ? "arm64"
                                : strncmp(u.machine, "ppc64", 5) == 0 ? "ppc64" : u.machine;
                snprintf(c->arch, sizeof c->arch, "%s", m);
                c->id.arch = c->arch;
        }
        if (c->id.arch && streq(c->id.arch, "x86_64"))
                from_cpuinfo(c);
        return 0;
}

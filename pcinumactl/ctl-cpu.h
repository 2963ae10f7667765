/* A helper module of pcinumactl (beside ctl-util): the --cpu option of
 * the NCCL topology files (nccltopo.h), shared by `nccl-topo` and
 * `host --nccl-topo`. */
#pragma once

#include <stdbool.h>

#include "nccltopo.h"

/* A parsed --cpu, with storage for the strings its id points to. */
struct ctl_cpu {
        bool none;              /* "none": no identity (NCCL reads the CPU it runs on) */
        struct nccltopo_cpu id;
        char arch[65];
        char vendor[64];
};

/* Parse --cpu SPEC: "none", "VENDOR,FAMILY,MODEL" (e.g.
 * "GenuineIntel,6,143", arch x86_64) or "ARCH,VENDOR,FAMILY,MODEL".
 * Returns 0, or -EINVAL with a message on stderr prefixed with 'who'. */
int ctl_cpu_parse(const char *who, const char *spec, struct ctl_cpu *ret);

/* The identity to write: the parsed --cpu (NULL for "none"), or when
 * there was none, 'dflt'. */
static inline const struct nccltopo_cpu *ctl_cpu_pick(const char *spec, const struct ctl_cpu *c,
                                                      const struct nccltopo_cpu *dflt) {
        if (!spec)
                return dflt;
        return c->none ? NULL : &c->id;
}

/* A helper module of pcinumactl (beside ctl-util): the CPU identity that
 * pcinumactl's NCCL topology files carry
 * (nccltopo.h): given with --cpu, or read from this machine. */
#pragma once

#include "nccltopo.h"

/* Storage for the strings a struct nccltopo_cpu points to. */
struct ctl_cpu {
        struct nccltopo_cpu id;
        char arch[65];
        char vendor[64];
};

/* spec NULL: this machine's (uname's machine; /proc/cpuinfo's vendor_id,
 * "cpu family" and model on x86, where NCCL reads them; elsewhere only
 * the arch).  "none": no identity (NCCL reads it in the guest).  Else
 * "VENDOR,FAMILY,MODEL" (e.g. "GenuineIntel,6,143") with arch x86_64, or
 * "ARCH,VENDOR,FAMILY,MODEL".  Returns 0, or -EINVAL with a message on
 * stderr prefixed with 'who'. */
int ctl_cpu_get(const char *who, const char *spec, struct ctl_cpu *ret);

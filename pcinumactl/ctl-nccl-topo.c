/* pcinumactl nccl-topo: the NCCL topology file (NCCL_TOPO_FILE) of a
 * domain's guest as planned, so that NCCL in the guest sees the host's
 * link speeds and switches (lib/core/nccltopo.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "ctl-cpu.h"
#include "ctl-util.h"
#include "ctl.h"
#include "engine.h"
#include "hostmap.h"
#include "nccltopo.h"

static void usage(FILE *f) {
        fprintf(f, "Usage: pcinumactl nccl-topo [--sysfs-root DIR] [--policy NAME | --policy-file FILE|-]\n"
                   "                            [--cpu VENDOR,FAMILY,MODEL|none] FILE|-\n\n"
                   "Print the NCCL topology file (what NCCL_TOPO_FILE reads) of the domain's guest as planned:\n"
                   "one <cpu> per guest cell, the GPUs and RDMA NICs at their predicted guest bus ids,\n"
                   "below the switches the plan mirrors, with the host devices' link speed and width.\n"
                   "A domain that is already planned gives the same file, and it is the file pcinumad gives\n"
                   "the guest (nccl_topology, docs/guest.md).\n\n"
                   "  --sysfs-root DIR    read the host map from DIR (default $PCINUMA_SYSFS_ROOT or /sys)\n"
                   "  --policy NAME       off, legacy, preferred, socket, require (alias required)\n"
                   "  --policy-file FILE  the policy file, - for standard input (default\n"
                   "                      " CTL_DEFAULT_POLICY_FILE " if it exists, else the built-in one)\n"
                   "  --cpu SPEC          the CPU identity to write: VENDOR,FAMILY,MODEL,\n"
                   "                      ARCH,VENDOR,FAMILY,MODEL or none (default: this machine's when\n"
                   "                      the guest's CPU is host-passthrough or host-model and the host\n"
                   "                      map is this machine's /sys; else none, and NCCL in the guest\n"
                   "                      reads the CPU it runs on)\n"
                   "  -h, --help          show this help\n\n"
                   "Exit status: 0 printed, 1 no GPU or RDMA NIC placed (the reason on stderr) or the output\n"
                   "could not be written, 2 bad input.\n");
}

static bool cpu_option(void *data, int c, const char *arg) {
        if (c != 'c')
                return false;
        *(const char **) data = arg;
        return true;
}

int ctl_nccl_topo(int argc, char **argv) {
        static const struct option opts[] = {
                CTL_OPTIONS_PLAN_ARGS,
                { "cpu", required_argument, NULL, 'c' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct ctl_plan_args a = { .who = "pcinumactl nccl-topo", .root = ctl_default_sysfs_root() };
        const char *cpu_spec = NULL;
        int r = ctl_parse_args(argc, argv, a.who, opts, usage, cpu_option, &cpu_spec, &a, NULL);
        if (r >= 0)
                return r;
        struct ctl_cpu cpu = {0};
        if (cpu_spec && ctl_cpu_parse(a.who, cpu_spec, &cpu) < 0)
                return CTL_EXIT_BAD_INPUT;

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;
        struct nccltopo_cpu guest_cpu;
        const struct nccltopo_cpu *dflt = nccltopo_guest_cpu(res->base, h, &guest_cpu);
        _cleanup_free_ char *xml = NULL, *reason = NULL;
        if (nccltopo_guest(res->plan, res->base, h, ctl_cpu_pick(cpu_spec, &cpu, dflt), &xml, &reason) != 0)
                return ctl_error(CTL_EXIT_FAILED, a.who, "%s: no NCCL topology file: %s", ctl_input_name(a.input),
                                 reason);
        fputs(xml, stdout);
        return fflush(stdout) == 0 ? 0 : CTL_EXIT_FAILED;
}

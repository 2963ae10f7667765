/* pcinumactl: the administrator's command-line tool.  This file only
 * dispatches: it handles --version and --help and hands the rest of the
 * command line to the verb, one file each (ctl-<verb>.c, declared in
 * ctl.h), as systemctl does.  It links the same core as the daemon, so
 * `pcinumactl plan` shows exactly what pcinumad would do. */
#include <stdio.h>

#include "ctl-util.h"
#include "ctl.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl COMMAND [OPTIONS]\n"
                "\n"
                "Commands:\n"
                "  plan [--sysfs-root DIR] [--policy NAME|--policy-file FILE] [--format xml|explain|json|hwloc] FILE|-\n"
                "                      plan a domain XML's NUMA-aware PCIe topology\n"
                "  revert FILE|-       undo pcinuma's rewrite of a domain XML\n"
                "  revert --domain NAME [--connect URI] [--policy-file FILE]\n"
                "                      undo it in a defined domain, through libvirt\n"
                "  define [--sysfs-root DIR] [--policy NAME|--policy-file FILE] [--connect URI] FILE|-\n"
                "                      plan a domain XML and define the plan through libvirt\n"
                "  host [--sysfs-root DIR] [--json | --format text|json|hwloc | --nccl-topo [--cpu SPEC]]\n"
                "                      show the host's NUMA nodes and passthrough devices\n"
                "  topo [--sysfs-root DIR] [--policy NAME|--policy-file FILE] [--wide] FILE|-\n"
                "                      host vs planned guest device topology matrix\n"
                "  nccl-topo [--sysfs-root DIR] [--policy NAME|--policy-file FILE] [--cpu SPEC] FILE|-\n"
                "                      the guest's NCCL topology file (NCCL_TOPO_FILE) as planned\n"
                "  fingerprint [--sysfs-root DIR] [--json]\n"
                "                      the host's topology fingerprint (digest first, then by device group)\n"
                "  audit [--connect URI] [--policy NAME|--policy-file FILE] [--sysfs-root DIR] [--json]\n"
                "                      every defined domain's state and next-start verdict\n"
                "  check-policy FILE   validate a policy file\n"
                "  status [--socket PATH] [--json]\n"
                "                      show pcinumad's state and counters\n"
                "  --version           print the version\n"
                "\n"
                "'pcinumactl COMMAND --help' shows a command's options.\n");
}

/* Each verb gets argv from its own name on, so its argv[0] is the verb. */
static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
} verbs[] = {
        { "plan", ctl_plan },
        { "revert", ctl_revert },
        { "define", ctl_define },
        { "host", ctl_host },
        { "check-policy", ctl_check_policy },
        { "status", ctl_status },
        { "topo", ctl_topo },
        { "nccl-topo", ctl_nccl_topo },
        { "fingerprint", ctl_fingerprint },
        { "audit", ctl_audit },
};

int main(int argc, char **argv) {
        if (argc < 2) {
                usage(stderr);
                return CTL_EXIT_BAD_INPUT;
        }
        if (streq(argv[1], "--version")) {
                printf("pcinumactl %s\n", PCINUMA_VERSION);
                return 0;
        }
        if (streq(argv[1], "--help") || streq(argv[1], "-h") || streq(argv[1], "help")) {
                usage(stdout);
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(argv[1], verbs[i].name))
                        return verbs[i].fn(argc - 1, argv + 1);
        ctl_error(0, "pcinumactl", "unknown command '%s'", argv[1]);
        usage(stderr);
        return CTL_EXIT_BAD_INPUT;
}

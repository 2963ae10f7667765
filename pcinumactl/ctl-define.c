/* pcinumactl define: plan a domain XML and define the plan through
 * libvirt, so that a script needs one word where it would write `virsh
 * define`: the first start of the domain then has the NUMA-aware
 * topology (docs/operations.md, "Orchestrators").  It plans exactly as
 * `pcinumactl plan` does (ctl_plan_input()); bad input and a refusal
 * never reach libvirt. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-libvirt.h"
#include "ctl-util.h"
#include "ctl.h"
#include "engine.h"
#include "hostmap.h"

static const char *const who = "pcinumactl define";

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl define [--sysfs-root DIR] [--policy NAME | --policy-file FILE|-]\n"
                "                         [--connect URI] FILE|-\n"
                "\n"
                "Plan the NUMA-aware PCIe topology of a libvirt domain XML, as 'pcinumactl plan'\n"
                "does, and define the result through libvirt.  A refused or bad domain is not\n"
                "defined.\n"
                "\n"
                CTL_USAGE_PLAN_ARGS
                "  --connect URI      the libvirt connection (default: libvirt's default URI)\n"
                "  -h, --help         show this help\n"
                "\n"
                "Exit status: 0 defined, 1 refused by the policy or not defined by libvirt,\n"
                "2 bad input.\n");
}

static bool connect_option(void *data, int c, const char *arg) {
        if (c != 'c')
                return false;
        *(const char **) data = arg;
        return true;
}

/* What the definition got, for the line after "Domain 'x' defined". */
static char *what_was_done(const struct engine_result *res) {
        const char *mode = policy_mode_to_string(res->settings.mode);
        if (res->verdict == PLAN_APPLY)
                return xasprintf("with the NUMA-aware topology (policy %s%s)", mode,
                                 res->already_planned ? ", already planned" : "");
        /* The input's mark undone (policy off, or no longer eligible):
         * libvirt got the reverted domain, not the input. */
        if (res->reverted)
                return xasprintf("with pcinuma's earlier plan undone (policy %s): %s", mode,
                                 res->plan->reason ? res->plan->reason : "nothing to plan");
        return xasprintf("unchanged (policy %s): %s", mode, res->plan->reason ? res->plan->reason : "nothing to plan");
}

int ctl_define(int argc, char **argv) {
        static const struct option opts[] = {
                CTL_OPTIONS_PLAN_ARGS,
                { "connect", required_argument, NULL, 'c' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct ctl_plan_args a = { .who = who, .root = ctl_default_sysfs_root() };
        const char *uri = NULL;
        int r = ctl_parse_args(argc, argv, who, opts, usage, connect_option, &uri, &a,
                               "expected one FILE (or - for standard input)");
        if (r >= 0)
                return r;
        if (uri && !*uri)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "--connect needs a URI");

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;
        r = ctl_report_plan(who, res, true);
        if (r != 0) {
                ctl_error(0, who, "%s: not defined", ctl_input_name(a.input));
                return r;
        }

        virConnectPtr c = ctl_libvirt_connect(who, uri);
        if (!c)
                return CTL_EXIT_FAILED;
        /* No VIR_DOMAIN_DEFINE_VALIDATE: libvirt takes the domain as `virsh
         * define` gives it (what pcinuma adds validates; a client's own
         * deviations from the schema that libvirt's parser accepts, such
         * as KubeVirt's, stay accepted). */
        virDomainPtr dom = virDomainDefineXMLFlags(c, res->xml, 0);
        if (!dom) {
                ctl_error(0, who, "libvirt did not define %s: %s", ctl_input_name(a.input), ctl_libvirt_error());
                virConnectClose(c);
                return CTL_EXIT_FAILED;
        }
        const char *name = virDomainGetName(dom);
        _cleanup_free_ char *done = what_was_done(res);
        printf("Domain '%s' defined from %s %s.\n", name ? name : "?", ctl_input_name(a.input), done);
        virDomainFree(dom);
        virConnectClose(c);
        if (fflush(stdout) != 0 || ferror(stdout))
                return ctl_error(CTL_EXIT_FAILED, who, "cannot write the output: %s", strerror(errno));
        return 0;
}

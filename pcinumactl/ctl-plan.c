/* pcinumactl plan: plan the NUMA-aware PCIe topology of a domain XML and
 * print it, as the rewritten XML, an explanation or JSON.  It runs the
 * same core as pcinumad, so it shows exactly what the daemon would do. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctl-util.h"
#include "ctl.h"
#include "engine.h"
#include "hostmap.h"
#include "hwloctopo.h"
#include "report.h"

static const char *const who = "pcinumactl plan";

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl plan [--sysfs-root DIR] [--policy NAME | --policy-file FILE|-]\n"
                "                       [--format xml|explain|json|hwloc] [--all-pairs] FILE|-\n"
                "\n"
                "Plan the NUMA-aware PCIe topology of a libvirt domain XML and print it.\n"
                "\n"
                CTL_USAGE_PLAN_ARGS
                "  --format FORMAT    xml (default), explain, json, or hwloc (the planned guest as\n"
                "                     hwloc XML, for lstopo -i FILE --if xml)\n"
                "  --all-pairs        with explain: list every device pair in the path fidelity\n"
                "                     report, not only those whose path type changed\n"
                "  -h, --help         show this help\n"
                "\n"
                "Exit status: 0 planned or unchanged, 1 refused by the policy, 2 bad input.\n");
}

struct plan_options {
        const char *format;
        unsigned explain_flags;
};

static bool plan_option(void *data, int c, const char *arg) {
        struct plan_options *o = data;
        if (c == 'F')
                o->format = arg;
        else if (c == 'A')
                o->explain_flags |= REPORT_ALL_PAIRS;
        else
                return false;
        return true;
}

int ctl_plan(int argc, char **argv) {
        static const struct option opts[] = {
                CTL_OPTIONS_PLAN_ARGS,
                { "format", required_argument, NULL, 'F' },
                { "all-pairs", no_argument, NULL, 'A' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct ctl_plan_args a = { .who = who, .root = ctl_default_sysfs_root() };
        struct plan_options po = { .format = "xml" };
        int r = ctl_parse_args(argc, argv, who, opts, usage, plan_option, &po, &a,
                               "expected one FILE (or - for standard input)");
        if (r >= 0)
                return r;
        const char *format = po.format;
        if (!streq(format, "xml") && !streq(format, "explain") && !streq(format, "json") && !streq(format, "hwloc"))
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "unknown format '%s' (expected xml, explain, json or hwloc)", format);
        if (po.explain_flags && !streq(format, "explain"))
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "--all-pairs goes with --format explain");

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;

        /* The reports show the path fidelity report: computed here, once,
         * by the result's owner (report.h). */
        if (streq(format, "explain") || streq(format, "json"))
                planner_fidelity(res->plan);
        if (streq(format, "explain")) {
                _cleanup_free_ char *s = report_explain(res, po.explain_flags);
                fputs(s, stdout);
        } else if (streq(format, "json")) {
                _cleanup_free_ char *s = report_json(res);
                fputs(s, stdout);
        } else if (streq(format, "hwloc")) {
                /* A refused plan has no guest to draw, as it has no XML. */
                if (res->verdict != PLAN_REFUSED) {
                        _cleanup_free_ char *s = hwloctopo_guest(res->plan, res->base, h);
                        fputs(s, stdout);
                }
        } else if (res->xml)
                fputs(res->xml, stdout);

        /* explain lists the warnings and causes in its own text already. */
        r = ctl_report_plan(who, res, !streq(format, "explain"));
        if (r != 0)
                return r;
        if (fflush(stdout) != 0 || ferror(stdout))
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "cannot write the output: %s", strerror(errno));
        return 0;
}

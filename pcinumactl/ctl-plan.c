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

static const char *const who = "pcinumactl plan";

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl plan [--sysfs-root DIR] [--policy NAME | --policy-file FILE|-]\n"
                "                       [--format xml|explain|json] FILE|-\n"
                "\n"
                "Plan the NUMA-aware PCIe topology of a libvirt domain XML and print it.\n"
                "\n"
                "  --sysfs-root DIR   read the host map from DIR instead of /sys\n"
                "                     (default: $PCINUMA_SYSFS_ROOT, else /sys)\n"
                "  --policy NAME      off, legacy, preferred, socket, require (alias required)\n"
                "  --policy-file FILE the policy file, - for standard input (default\n"
                "                     " CTL_DEFAULT_POLICY_FILE " if it exists, else the built-in\n"
                "                     default: preferred, no rules)\n"
                "  --format FORMAT    xml (default), explain or json\n"
                "  -h, --help         show this help\n"
                "\n"
                "Exit status: 0 planned or unchanged, 1 refused by the policy, 2 bad input.\n");
}

static bool format_option(void *data, int c, const char *arg) {
        if (c != 'F')
                return false;
        *(const char **) data = arg;
        return true;
}

int ctl_plan(int argc, char **argv) {
        static const struct option opts[] = {
                CTL_OPTION_SYSFS_ROOT,
                CTL_OPTION_POLICY,
                CTL_OPTION_POLICY_FILE,
                { "format", required_argument, NULL, 'F' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct ctl_plan_args a = { .who = who, .root = ctl_default_sysfs_root() };
        const char *format = "xml";
        int r = ctl_parse_args(argc, argv, who, opts, usage, format_option, &format, &a,
                               "expected one FILE (or - for standard input)");
        if (r >= 0)
                return r;
        if (!streq(format, "xml") && !streq(format, "explain") && !streq(format, "json"))
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "unknown format '%s' (expected xml, explain or json)", format);

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;

        if (streq(format, "explain")) {
                _cleanup_free_ char *s = engine_explain(res, h);
                fputs(s, stdout);
        } else if (streq(format, "json")) {
                _cleanup_free_ char *s = engine_json(res, h);
                fputs(s, stdout);
        } else if (res->xml)
                fputs(res->xml, stdout);

        /* explain lists the warnings in its own text already. */
        r = ctl_report_plan(who, res, !streq(format, "explain"));
        if (r != 0)
                return r;
        if (fflush(stdout) != 0 || ferror(stdout))
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "cannot write the output: %s", strerror(errno));
        return 0;
}

/* pcinumactl check-policy FILE: load a policy file exactly as the daemon
 * would, and print what it means, so an admin can check an edit before
 * reloading pcinumad. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctl-util.h"
#include "ctl.h"
#include "paths.h"
#include "policy.h"
#include "policy-file.h"

static const char *const who = "pcinumactl check-policy";

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl check-policy FILE|-\n"
                "\n"
                "Check a pcinuma policy file (usually " PCINUMA_DEFAULT_POLICY_FILE "; - reads\n"
                "standard input) and print a summary of it.\n"
                "\n"
                "  -h, --help  show this help\n"
                "\n"
                "Exit status: 0 valid, 1 invalid, 2 usage error or unreadable file.\n");
}

/* ", mirror_switches, mmio64 auto, ..." for the switches that differ from
 * the defaults, so an admin sees what each rule turns on or off. */
static void print_features(const struct policy_settings *s) {
        const struct policy_settings d = policy_settings_default(s->mode);
        if (s->topology != d.topology)
                printf(", topology %s", policy_topology_to_string(s->topology));
        if (s->mirror_switches != d.mirror_switches)
                printf(", mirror_switches %s", s->mirror_switches ? "on" : "off");
        if (s->mirror_distances != d.mirror_distances)
                printf(", mirror_distances %s", s->mirror_distances ? "on" : "off");
        if (s->mmio64_auto != d.mmio64_auto)
                printf(", mmio64 %s", s->mmio64_auto ? "auto" : "off");
        if (s->io_port_check != d.io_port_check)
                printf(", io_port_check %s", s->io_port_check ? "on" : "off");
        if (s->nccl_topology != d.nccl_topology)
                printf(", nccl_topology %s", s->nccl_topology ? "on" : "off");
        if (s->managed_auto != d.managed_auto)
                printf(", managed %s", s->managed_auto ? "auto" : "off");
        if (s->migration_same_topology != d.migration_same_topology)
                printf(", migration %s", s->migration_same_topology ? "same-topology" : "refuse");
        if (s->gpudirect_clique_auto != d.gpudirect_clique_auto)
                printf(", gpudirect_clique %s", s->gpudirect_clique_auto ? "auto" : "off");
        if (s->first_start != d.first_start)
                printf(", first_start %s", policy_first_start_to_string(s->first_start));
        if (s->transient_restart != d.transient_restart)
                printf(", transient %s", s->transient_restart ? "restart" : "leave");
}

static void print_rule(size_t idx, const struct policy_rule *rule) {
        const char *sep = "";

        printf("rule %zu: ", idx + 1);
        if (rule->name_glob) {
                printf("%sname '%s'", sep, rule->name_glob);
                sep = ", ";
        }
        if (rule->uuid) {
                printf("%suuid '%s'", sep, rule->uuid);
                sep = ", ";
        }
        if (rule->tag)
                printf("%stag '%s'", sep, rule->tag);
        printf(" -> %s", policy_mode_to_string(rule->settings.mode));
        print_features(&rule->settings);
        printf("\n");
}

int ctl_check_policy(int argc, char **argv) {
        _cleanup_policy_ struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;
        const char *path = NULL;
        bool dashdash = false;
        int r;

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];

                if (!dashdash && (streq(a, "-h") || streq(a, "--help"))) {
                        usage(stdout);
                        return 0;
                }
                if (!dashdash && streq(a, "--")) {
                        dashdash = true;
                        continue;
                }
                if (!dashdash && a[0] == '-' && a[1] != 0) {
                        ctl_error(0, who, "unknown option '%s'", a);
                        usage(stderr);
                        return CTL_EXIT_BAD_INPUT;
                }
                if (path) {
                        ctl_error(0, who, "too many arguments");
                        usage(stderr);
                        return CTL_EXIT_BAD_INPUT;
                }
                path = a;
        }

        if (!path) {
                ctl_error(0, who, "missing FILE");
                usage(stderr);
                return CTL_EXIT_BAD_INPUT;
        }

        /* "-" is the usual spelling of standard input, which lets an admin
         * check a file produced by a config management tool in a pipe. */
        r = policy_load_file(streq(path, "-") ? "/dev/stdin" : path, &p, &err);
        if (r < 0) {
                fprintf(stderr, "%s\n", err ? err : strerror(-r));
                /* A file that is there but is not a valid policy (including
                 * one over the size limit) is "invalid"; a file we cannot
                 * read at all is an operator error, like a bad argument. */
                return r == -EINVAL || r == -EFBIG ? CTL_EXIT_INVALID : CTL_EXIT_BAD_INPUT;
        }

        printf("%s: OK\n", path);
        printf("default: %s", policy_mode_to_string(p->def.mode));
        print_features(&p->def);
        printf("\n");
        for (size_t i = 0; i < p->n_variant_drivers; i++)
                printf("vfio variant driver: %s\n", p->variant_drivers[i]);
        for (size_t i = 0; i < p->n_pool; i++)
                printf("passthrough pool: %s\n", p->pool[i].text);
        printf("allow_domain_policy: %s\n", p->allow_domain_policy ? "true" : "false");
        if (p->n_rules == 0)
                printf("rules: none\n");
        for (size_t i = 0; i < p->n_rules; i++)
                print_rule(i, &p->rules[i]);
        printf("hook: timeout %u ms, on unreachable: %s\n", p->hook_timeout_ms,
               p->hook_on_unreachable == POLICY_UNREACHABLE_REFUSE ? "refuse" : "allow");
        printf("restart window: %u ms\n", p->restart_window_ms);

        if (fflush(stdout) != 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "cannot write output: %s", strerror(errno));
        return 0;
}

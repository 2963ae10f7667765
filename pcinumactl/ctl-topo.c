/* pcinumactl topo: an nvidia-smi-topo-style matrix of a domain's
 * passthrough devices, the host's view beside the planned guest's, so an
 * administrator sees at a glance whether the guest mirrors the host. */
#include <getopt.h>
#include <stdio.h>

#include "ctl-util.h"
#include "ctl.h"
#include "engine.h"
#include "hostmap.h"
#include "policy.h"

struct topo_dev {
        char label[16];
        const struct plan_device *pd;
};

/* The path type of devices i and j, host or guest side, from the plan's
 * pairs (planner_path_type(), the same rule the plan's fidelity uses). */
static const struct plan_pair *pair_of(const struct plan *p, size_t i, size_t j) {
        size_t n = p->n_devices;
        if (i > j) {
                size_t t = i;
                i = j;
                j = t;
        }
        size_t k = i * (2 * n - i - 1) / 2 + (j - i - 1);
        return k < p->n_pairs ? &p->pairs[k] : NULL;
}

static const char *class_label(uint32_t class) {
        switch (class >> 16) {
        case 0x03:
                return "GPU";
        case 0x02:
                return "NIC";
        case 0x01:
                return "DISK";
        case 0x12:
                return "ACC";
        default:
                return "DEV";
        }
}

static void usage(FILE *f) {
        fprintf(f, "Usage: pcinumactl topo [--sysfs-root DIR] [--policy NAME | --policy-file FILE|-] FILE|-\n\n"
                   "Show how a domain's passthrough devices relate on the host (from the host map) and in\n"
                   "the guest as planned, as nvidia-smi topo -m does.\n\n"
                   "  --sysfs-root DIR    read the host map from DIR (default $PCINUMA_SYSFS_ROOT or /sys)\n"
                   "  --policy NAME       off, legacy, preferred, socket, require (alias required)\n"
                   "  --policy-file FILE  the policy file, - for standard input (default\n"
                   "                      " CTL_DEFAULT_POLICY_FILE " if it exists, else the built-in one)\n"
                   "  -h, --help          show this help\n\n"
                   "Exit status: 0 printed, 2 bad input or option, unreadable file, host map or policy file.\n");
}

int ctl_topo(int argc, char **argv) {
        static const struct option opts[] = {
                CTL_OPTION_SYSFS_ROOT,
                CTL_OPTION_POLICY,
                CTL_OPTION_POLICY_FILE,
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct ctl_plan_args a = { .who = "pcinumactl topo", .root = ctl_default_sysfs_root() };
        int r = ctl_parse_args(argc, argv, a.who, opts, usage, NULL, NULL, &a, NULL);
        if (r >= 0)
                return r;

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;
        planner_fidelity(res->plan);
        const struct plan *p = res->plan;
        size_t n = p->n_devices;
        if (n == 0) {
                printf("The domain has no PCI passthrough devices.\n");
                return 0;
        }

        struct topo_dev *t = xcalloc(n, sizeof(*t));
        unsigned counts[5] = {0};
        for (size_t i = 0; i < n; i++) {
                t[i].pd = &p->devices[i];
                const char *l = class_label(p->devices[i].class);
                size_t k = streq(l, "GPU") ? 0 : streq(l, "NIC") ? 1 : streq(l, "DISK") ? 2 : streq(l, "ACC") ? 3 : 4;
                snprintf(t[i].label, sizeof t[i].label, "%s%u", l, counts[k]++);
        }

        const int w = 6;
        bool planned = p->verdict == PLAN_APPLY;
        printf("%-*s", w + 1, "HOST");
        for (size_t j = 0; j < n; j++)
                printf("%-*s", w, t[j].label);
        printf("   %-*s", w + 1, "GUEST");
        for (size_t j = 0; j < n; j++)
                printf("%-*s", w, t[j].label);
        printf("\n");
        for (size_t i = 0; i < n; i++) {
                printf("%-*s", w + 1, t[i].label);
                for (size_t j = 0; j < n; j++) {
                        const struct plan_pair *q = i == j ? NULL : pair_of(p, i, j);
                        printf("%-*s", w, i == j ? "X" : q ? plan_path_to_string(q->host) : "?");
                }
                printf("   %-*s", w + 1, t[i].label);
                for (size_t j = 0; j < n; j++) {
                        const struct plan_pair *q = i == j ? NULL : pair_of(p, i, j);
                        char cell[16];
                        if (!q) {
                                printf("%-*s", w, i == j ? "X" : "?");
                                continue;
                        }
                        bool known = q->host != PLAN_PATH_UNKNOWN && q->guest != PLAN_PATH_UNKNOWN;
                        snprintf(cell, sizeof cell, "%s%s", plan_path_to_string(q->guest),
                                 !known || q->guest == q->host ? "" : q->guest < q->host ? "!" : "*");
                        printf("%-*s", w, cell);
                }
                printf("\n");
        }
        printf("\nLegend:\n"
               "  X    = self\n"
               "  PIX  = behind one PCIe switch (at most one bridge between them)\n"
               "  PXB  = behind several bridges, below one root port, not through the host bridge\n"
               "  PHB  = through one PCIe host bridge (in the guest: the same expander bus)\n"
               "  NODE = through several host bridges of one NUMA node\n"
               "  SYS  = across NUMA nodes (or a device the guest sees without a node)\n"
               "  *    = farther in the guest than on the host (locality lost)\n"
               "  !    = closer in the guest than on the host (a path the hardware does not have)\n\n");
        printf("Devices (policy %s, topology %s, %s):\n", policy_mode_to_string(res->settings.mode),
               policy_topology_to_string(res->settings.topology), planned ? "as planned" : plan_verdict_to_string(p->verdict));
        for (size_t i = 0; i < n; i++) {
                const struct plan_device *pd = t[i].pd;
                char node[16] = "none";
                if (pd->host_node >= 0)
                        snprintf(node, sizeof node, "%d", pd->host_node);
                printf("  %-6s %s  %-24s host node %-4s -> %s", t[i].label, pd->name,
                       pd->known ? hostmap_class_name(pd->class) : "(not on this host)", node,
                       pd->action == PLAN_MOVE ? "guest cell " : pd->action == PLAN_STAY ? "pcie.0 (no guest node)" : "refused");
                if (pd->action == PLAN_MOVE)
                        printf("%d%s, guest %s", pd->cell, pd->switch_group >= 0 ? ", behind a guest switch" : "",
                               pd->guest_bdf[0] ? pd->guest_bdf : "?");
                printf("\n");
        }
        printf("\n%u of %zu device pairs keep their host path type in the guest: %u same, %u closer, %u farther",
               p->n_same, p->n_pairs, p->n_same, p->n_closer, p->n_farther);
        if (p->n_unknown)
                printf(", %u unknown", p->n_unknown);
        printf("%s.\n", p->settings.mirror_switches ? "" : " (mirror_switches is off: host PIX pairs become PHB)");
        free(t);
        return 0;
}

/* pcinumactl topo: an nvidia-smi-topo-style matrix of a domain's
 * passthrough devices, the host's view beside the planned guest's, so an
 * administrator sees at a glance whether the guest mirrors the host. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
        fprintf(f, "Usage: pcinumactl topo [--sysfs-root DIR] [--policy NAME | --policy-file FILE|-] [--wide] FILE|-\n\n"
                   "Show how a domain's passthrough devices relate on the host (from the host map) and in\n"
                   "the guest as planned, as nvidia-smi topo -m does.\n\n"
                   "  --sysfs-root DIR   read the host map from DIR instead of /sys\n"
                   "                     (default: $PCINUMA_SYSFS_ROOT, else /sys)\n"
                   "  --policy NAME      off, legacy, preferred, socket, require (alias required)\n"
                   "  --policy-file FILE the policy file, - for standard input (default\n"
                   "                     " CTL_DEFAULT_POLICY_FILE " if it exists, else the built-in one)\n"
                   "  --wide             the host and guest matrices side by side, and each device's\n"
                   "                     class (the default stacks them: 16 devices fit 100 columns)\n"
                   "  -h, --help         show this help\n\n"
                   "Exit status: 0 printed, 2 bad input or option, unreadable file, host map or policy file.\n");
}

static bool topo_option(void *data, int c, const char *arg) {
        (void) arg;
        if (c != 'w')
                return false;
        *(bool *) data = true;
        return true;
}

/* One matrix cell: the host's path type, or the guest's with a mark
 * where it differs from the host's; "X" on the diagonal. */
static void cell_text(const struct plan *p, size_t i, size_t j, bool guest, char buf[16]) {
        const struct plan_pair *q = i == j ? NULL : pair_of(p, i, j);
        if (!q) {
                snprintf(buf, 16, "%s", i == j ? "X" : "?");
                return;
        }
        if (!guest) {
                snprintf(buf, 16, "%s", plan_path_to_string(q->host));
                return;
        }
        bool known = q->host != PLAN_PATH_UNKNOWN && q->guest != PLAN_PATH_UNKNOWN;
        snprintf(buf, 16, "%s%s", plan_path_to_string(q->guest),
                 !known || q->guest == q->host ? "" : q->guest < q->host ? "!" : "*");
}

/* Row i of the host or guest matrix, each cell w wide; the last one
 * unpadded when 'last' (no trailing blanks). */
static void print_row(const struct plan *p, const struct topo_dev *t, size_t i, bool guest, int lw, int w, bool last) {
        size_t n = p->n_devices;
        if (i == SIZE_MAX) {    /* the header */
                printf("%-*s", lw, "");
                for (size_t j = 0; j < n; j++)
                        printf("%-*s", last && j + 1 == n ? 0 : w, t[j].label);
                return;
        }
        printf("%-*s", lw, t[i].label);
        for (size_t j = 0; j < n; j++) {
                char cell[16];
                cell_text(p, i, j, guest, cell);
                printf("%-*s", last && j + 1 == n ? 0 : w, cell);
        }
}

/* Each device's label (GPU0, NIC0, ...) into t; returns the longest
 * label's length, and in *ret_maxcell the longest guest cell's (at
 * least 4). */
static int label_devices(const struct plan *p, struct topo_dev *t, int *ret_maxcell) {
        unsigned counts[5] = {0};
        int maxlabel = 0, maxcell = 4;
        for (size_t i = 0; i < p->n_devices; i++) {
                t[i].pd = &p->devices[i];
                const char *l = class_label(p->devices[i].class);
                size_t k = streq(l, "GPU") ? 0 : streq(l, "NIC") ? 1 : streq(l, "DISK") ? 2 : streq(l, "ACC") ? 3 : 4;
                snprintf(t[i].label, sizeof t[i].label, "%s%u", l, counts[k]++);
                if ((int) strlen(t[i].label) > maxlabel)
                        maxlabel = (int) strlen(t[i].label);
                for (size_t j = 0; j < p->n_devices; j++) {
                        char cell[16];
                        cell_text(p, i, j, true, cell);
                        if ((int) strlen(cell) > maxcell)
                                maxcell = (int) strlen(cell);
                }
        }
        *ret_maxcell = maxcell;
        return maxlabel;
}

/* The host's and the guest's matrices: side by side, 6 columns a cell
 * (wide), or stacked, each cell as narrow as its widest text and a blank
 * (16 devices fit 100 columns). */
static void print_matrices(const struct plan *p, const struct topo_dev *t, bool wide, int maxlabel, int maxcell) {
        size_t n = p->n_devices;
        if (wide) {
                const int w = 6;
                printf("%-*s", w + 1, "HOST");
                for (size_t j = 0; j < n; j++)
                        printf("%-*s", w, t[j].label);
                printf("   %-*s", w + 1, "GUEST");
                for (size_t j = 0; j < n; j++)
                        printf("%-*s", w, t[j].label);
                printf("\n");
                for (size_t i = 0; i < n; i++) {
                        print_row(p, t, i, false, w + 1, w, false);
                        printf("   ");
                        print_row(p, t, i, true, w + 1, w, false);
                        printf("\n");
                }
                return;
        }
        int lw = maxlabel + 1, w = (maxlabel > maxcell ? maxlabel : maxcell) + 1;
        for (int g = 0; g < 2; g++) {
                if (g)
                        printf("\nGuest (%s):\n", p->verdict == PLAN_APPLY ? "as planned" : plan_verdict_to_string(p->verdict));
                else
                        printf("Host:\n");
                print_row(p, t, SIZE_MAX, g, lw, w, true);
                printf("\n");
                for (size_t i = 0; i < n; i++) {
                        print_row(p, t, i, g, lw, w, true);
                        printf("\n");
                }
        }
}

/* Each device's line (where it is on the host, where it goes), then how
 * many pairs kept their path type. */
static void print_devices(const struct engine_result *res, const struct topo_dev *t, bool wide, int maxlabel) {
        const struct plan *p = res->plan;
        printf("Devices (policy %s, topology %s, %s):\n", policy_mode_to_string(res->settings.mode),
               policy_topology_to_string(res->settings.topology),
               p->verdict == PLAN_APPLY ? "as planned" : plan_verdict_to_string(p->verdict));
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = t[i].pd;
                char node[16] = "none";
                if (pd->host_node >= 0)
                        snprintf(node, sizeof node, "%d", pd->host_node);
                const char *to = pd->action == PLAN_MOVE ? "guest cell " : pd->action == PLAN_STAY ? "pcie.0 (no guest node)" : "refused";
                if (wide)
                        printf("  %-6s %s  %-24s host node %-4s -> %s", t[i].label, pd->name,
                               pd->known ? hostmap_class_name(pd->class) : "(not on this host)", node, to);
                else
                        printf("  %-*s  %s  host node %s -> %s", maxlabel, t[i].label, pd->name, node, to);
                if (pd->action == PLAN_MOVE)
                        printf("%d%s, guest %s", pd->cell, pd->switch_group >= 0 ? ", behind a guest switch" : "",
                               pd->guest_bdf[0] ? pd->guest_bdf : "?");
                printf("\n");
        }
        printf("\n%u of %zu device pairs keep their host path type in the guest: %u same, %u closer, %u farther",
               p->n_same, p->n_pairs, p->n_same, p->n_closer, p->n_farther);
        if (p->n_unknown)
                printf(", %u unknown", p->n_unknown);
        printf("%s.\n", p->settings.mirror_switches ? "" : wide ? " (mirror_switches is off: host PIX pairs become PHB)"
                                                                 : "\n(mirror_switches is off: host PIX pairs become PHB)");
}

int ctl_topo(int argc, char **argv) {
        static const struct option opts[] = {
                CTL_OPTIONS_PLAN_ARGS,
                { "wide", no_argument, NULL, 'w' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct ctl_plan_args a = { .who = "pcinumactl topo", .root = ctl_default_sysfs_root() };
        bool wide = false;
        int r = ctl_parse_args(argc, argv, a.who, opts, usage, topo_option, &wide, &a, NULL);
        if (r >= 0)
                return r;

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;
        planner_fidelity(res->plan);
        const struct plan *p = res->plan;
        if (p->n_devices == 0) {
                printf("The domain has no PCI passthrough devices.\n");
                return 0;
        }

        _cleanup_free_ struct topo_dev *t = xcalloc(p->n_devices, sizeof(*t));
        int maxcell;
        int maxlabel = label_devices(p, t, &maxcell);
        print_matrices(p, t, wide, maxlabel, maxcell);
        printf("\nLegend:\n"
               "  X    = self\n"
               "  PIX  = behind one PCIe switch (at most one bridge between them)\n"
               "  PXB  = behind several bridges, below one root port, not through the host bridge\n"
               "  PHB  = through one PCIe host bridge (in the guest: the same expander bus)\n"
               "  NODE = through several host bridges of one NUMA node\n"
               "  SYS  = across NUMA nodes (or a device the guest sees without a node)\n"
               "  *    = farther in the guest than on the host (locality lost)\n"
               "  !    = closer in the guest than on the host (a path the hardware does not have)\n\n");
        print_devices(res, t, wide, maxlabel);
        return 0;
}

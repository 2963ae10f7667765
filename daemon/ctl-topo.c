/* pcinumactl topo: an nvidia-smi-topo-style matrix of a domain's
 * passthrough devices, the host's view beside the planned guest's, so an
 * administrator sees at a glance whether the guest mirrors the host. */
#include <getopt.h>
#include <stdio.h>

#include "ctl-topo.h"
#include "ctl.h"
#include "engine.h"
#include "hostmap.h"
#include "policy.h"

enum rel {
        REL_SELF,
        REL_PIX,        /* one PCIe switch (or one bridge) */
        REL_PXB,        /* several bridges, below one root port */
        REL_PHB,        /* one host bridge */
        REL_NODE,       /* one NUMA node, several host bridges */
        REL_SYS,        /* across NUMA nodes */
        REL_UNKNOWN,
};

static const char *const rel_names[] = { "X", "PIX", "PXB", "PHB", "NODE", "SYS", "?" };

struct topo_dev {
        const struct hostmap_device *dev;      /* the PCI function (an mdev's parent) */
        int host_node;
        char label[16];
        const struct plan_device *pd;
};

static enum rel host_rel(const struct topo_dev *a, const struct topo_dev *b) {
        if (a == b)
                return REL_SELF;
        if (!a->dev || !b->dev)
                return REL_UNKNOWN;
        const struct hostmap_device *x = a->dev, *y = b->dev;
        if (x->host_bridge && y->host_bridge && streq(x->host_bridge, y->host_bridge)) {
                size_t common = 0;
                while (common < x->n_upstream && common < y->n_upstream &&
                       pci_addr_eq(&x->upstream[common], &y->upstream[common]))
                        common++;
                /* Same parent bridge (one switch port, one root port, or
                 * functions of one device): one bridge apart. */
                /* The same parent bridge (functions of one device, VFs), or
                 * the same switch (root port and upstream port shared). */
                if ((common == x->n_upstream && common == y->n_upstream) || common >= 2)
                        return REL_PIX;
                if (common >= 1)
                        return REL_PXB;
                return REL_PHB;
        }
        if (a->host_node >= 0 && a->host_node == b->host_node)
                return REL_NODE;
        return REL_SYS;
}

static enum rel guest_rel(const struct topo_dev *a, const struct topo_dev *b) {
        if (a == b)
                return REL_SELF;
        const struct plan_device *x = a->pd, *y = b->pd;
        bool xm = x->action == PLAN_MOVE, ym = y->action == PLAN_MOVE;
        if (xm && ym) {
                if (x->switch_group >= 0 && x->switch_group == y->switch_group)
                        return REL_PIX;
                return x->cell == y->cell ? REL_PHB : REL_SYS;
        }
        if (!xm && !ym)
                return REL_PHB;         /* both on pcie.0 */
        return REL_SYS;                 /* pcie.0 has no NUMA node in the guest */
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
        fprintf(f, "Usage: pcinumactl topo [--sysfs-root DIR] [--policy NAME | --policy-file FILE] FILE|-\n\n"
                   "Show how a domain's passthrough devices relate on the host (from the host map) and in\n"
                   "the guest as planned, as nvidia-smi topo -m does.\n");
}

int ctl_topo(int argc, char **argv) {
        static const struct option opts[] = {
                { "sysfs-root", required_argument, NULL, 'r' },
                { "policy", required_argument, NULL, 'p' },
                { "policy-file", required_argument, NULL, 'f' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *root = default_sysfs_root(), *policy_name = NULL, *policy_file = NULL;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'r':
                        root = optarg;
                        break;
                case 'p':
                        policy_name = optarg;
                        break;
                case 'f':
                        policy_file = optarg;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind != argc - 1) {
                usage(stderr);
                return 2;
        }

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        const struct ctl_plan_args a = {
                .who = "pcinumactl topo", .root = root, .policy_name = policy_name,
                .policy_file = policy_file, .input = argv[optind],
        };
        int r = ctl_plan_input(&a, &h, &res);
        if (r != 0)
                return r;
        const struct plan *p = res->plan;
        size_t n = p->n_devices;
        if (n == 0) {
                printf("The domain has no PCI passthrough devices.\n");
                return 0;
        }

        struct topo_dev *t = xcalloc(n, sizeof(*t));
        unsigned counts[5] = {0};
        for (size_t i = 0; i < n; i++) {
                const struct domain_hostdev *hd = &res->base->hostdevs[p->devices[i].hostdev];
                t[i].pd = &p->devices[i];
                t[i].host_node = p->devices[i].host_node;
                if (hd->kind == DOMAIN_HOSTDEV_MDEV) {
                        const struct hostmap_mdev *m = hostmap_find_mdev(h, hd->mdev_uuid);
                        t[i].dev = m ? hostmap_find_device(h, &m->parent) : NULL;
                } else
                        t[i].dev = hostmap_find_device(h, &hd->host);
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
        unsigned same = 0, pairs = 0;
        for (size_t i = 0; i < n; i++) {
                printf("%-*s", w + 1, t[i].label);
                for (size_t j = 0; j < n; j++)
                        printf("%-*s", w, rel_names[host_rel(&t[i], &t[j])]);
                printf("   %-*s", w + 1, t[i].label);
                for (size_t j = 0; j < n; j++) {
                        enum rel hr = host_rel(&t[i], &t[j]), gr = guest_rel(&t[i], &t[j]);
                        /* PXB and PHB on the host both become PHB in the
                         * guest (one root port each under the pxb): that
                         * is a mirror as far as locality goes. */
                        bool match = hr == gr || (hr == REL_PXB && gr == REL_PHB) || (hr == REL_NODE && gr == REL_PHB);
                        if (i < j) {
                                pairs++;
                                same += match;
                        }
                        char cell[16];
                        snprintf(cell, sizeof cell, "%s%s", rel_names[gr], match ? "" : "*");
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
               "  *    = the guest relation is weaker than the host's\n\n");
        printf("Devices (policy %s, %s):\n", policy_mode_to_string(res->settings.mode),
               planned ? "as planned" : plan_verdict_to_string(p->verdict));
        for (size_t i = 0; i < n; i++) {
                const struct plan_device *pd = t[i].pd;
                char node[16] = "none";
                if (pd->host_node >= 0)
                        snprintf(node, sizeof node, "%d", pd->host_node);
                printf("  %-6s %s  %-24s host node %-4s -> %s", t[i].label, pd->name,
                       pd->known ? hostmap_class_name(pd->class) : "(not on this host)", node,
                       pd->action == PLAN_MOVE ? "guest cell " : pd->action == PLAN_STAY ? "pcie.0 (no guest node)" : "refused");
                if (pd->action == PLAN_MOVE)
                        printf("%d%s", pd->cell, pd->switch_group >= 0 ? ", behind a guest switch" : "");
                printf("\n");
        }
        printf("\n%u of %u device pairs keep their host locality in the guest%s.\n", same, pairs,
               p->settings.mirror_switches ? "" : " (mirror_switches is off: host PIX pairs become PHB)");
        free(t);
        return 0;
}

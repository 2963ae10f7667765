/* `pcinumactl host`: print the host map as pcinuma sees it (nodes, sockets,
 * distances, and the devices that can be passed through, grouped by NUMA
 * node), as a readable tree or as JSON.  It is the first thing to run when
 * a placement looks wrong, and it reads a captured snapshot as easily as
 * the live /sys (--sysfs-root). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json.h>
#include <stdio.h>
#include <string.h>

#include "ctl-cpu.h"
#include "ctl-util.h"
#include "ctl.h"
#include "hook-protocol.h" /* _cleanup_json_ */
#include "hostmap.h"
#include "hostmap-sysfs.h"
#include "hwloctopo.h"

static void host_usage(FILE *f) {
        fprintf(f,
                "Usage: pcinumactl host [--sysfs-root DIR] [--json | --format text|json|hwloc |\n"
                "                        --nccl-topo [--cpu SPEC]]\n"
                "\n"
                "Show the host's NUMA nodes, sockets and distances, and the PCI devices\n"
                "and mdevs that can be passed through, grouped by NUMA node.\n"
                "\n"
                "  --sysfs-root DIR  read sysfs from DIR (default $PCINUMA_SYSFS_ROOT or /sys)\n"
                "  --json            print JSON instead of text (--format json)\n"
                "  --format FORMAT   text (default), json, or hwloc (hwloc XML of the nodes and\n"
                "                    devices, for lstopo -i FILE --if xml)\n"
                "  --nccl-topo       print the host's NCCL topology file (as NCCL_TOPO_DUMP_FILE\n"
                "                    would), to compare with a guest's (pcinumactl nccl-topo)\n"
                "  --cpu SPEC        with --nccl-topo: VENDOR,FAMILY,MODEL or none (default: this\n"
                "                    machine's when the host map is its /sys, else none)\n"
                "  -h, --help        show this help\n");
}

static const char *bar_type_name(enum hostmap_bar_type t) {
        switch (t) {
        case HOSTMAP_BAR_IO:
                return "io";
        case HOSTMAP_BAR_MEM32:
                return "mem32";
        case HOSTMAP_BAR_MEM64:
                return "mem64";
        default:
                return "none";
        }
}

/* 68719476736 -> "64G": BAR sizes are powers of two, so this is exact for
 * every real BAR. */
static void format_size(uint64_t size, char *buf, size_t n) {
        static const char units[] = "KMGTPE";
        int u = -1;

        while (size >= 1024 && size % 1024 == 0 && u + 1 < (int) sizeof(units) - 1) {
                size /= 1024;
                u++;
        }
        if (u < 0)
                snprintf(buf, n, "%" PRIu64, size);
        else
                snprintf(buf, n, "%" PRIu64 "%c", size, units[u]);
}

/* The groups are the map's nodes in id order, then "none"; a device whose
 * node is not in the map (a broken numa_node value) goes with "none". */
static bool in_group(const struct hostmap *h, int node, int group) {
        if (group >= 0)
                return node == group;
        return node < 0 || !hostmap_find_node(h, node);
}

static void print_device_text(const struct hostmap_device *d) {
        char pf[PCI_ADDR_STRLEN];
        _cleanup_free_ char *path = ctl_device_path(d);

        printf("    %s  %s [%04x:%04x]", d->name, hostmap_class_name(d->class), d->vendor, d->device);
        printf("  driver %s", d->driver ? d->driver : "none");
        if (d->iommu_group >= 0)
                printf("  iommu group %d", d->iommu_group);
        else
                printf("  no iommu group");
        if (d->has_physfn)
                printf("  VF of %s", pci_addr_format(&d->physfn, pf));
        if (d->n_vfs > 0)
                printf("  PF with %u VF%s", d->n_vfs, d->n_vfs == 1 ? "" : "s");
        if (d->sysfs_node != d->node)
                printf("  (numa_node %d in sysfs)", d->sysfs_node);
        printf("\n        path: %s\n", path);

        bool any = false;
        for (unsigned i = 0; i < HOSTMAP_N_BARS; i++) {
                const struct hostmap_bar *b = &d->bars[i];
                char size[32];
                if (b->type == HOSTMAP_BAR_NONE)
                        continue;
                format_size(b->size, size, sizeof(size));
                printf("%s BAR%u %s %s%s", any ? "," : "        bars:", i, size, bar_type_name(b->type),
                       b->prefetchable ? " prefetchable" : "");
                any = true;
        }
        if (any)
                printf("\n");
}

/* "  node N:" (or "  none:") before the first entry of a group. */
static void print_group_header(int group, bool *printed) {
        if (*printed)
                return;
        if (group >= 0)
                printf("  node %d:\n", group);
        else
                printf("  none:\n");
        *printed = true;
}

static void print_text(const struct hostmap *h) {
        char parent[PCI_ADDR_STRLEN];

        printf("NUMA nodes%s:\n", h->single_node ? " (no NUMA information: one node synthesised)" : "");
        for (size_t i = 0; i < h->n_nodes; i++) {
                const struct hostmap_node *n = &h->nodes[i];
                _cleanup_free_ char *cpus = bitmap_format(&n->cpus);

                printf("  node %d: ", n->id);
                if (n->socket >= 0)
                        printf("socket %d", n->socket);
                else
                        printf("no socket");
                printf(", cpus %s, distances", *cpus ? cpus : "none");
                for (size_t j = 0; j < h->n_nodes; j++) {
                        int dist = hostmap_distance(h, n->id, h->nodes[j].id);
                        if (dist >= 0)
                                printf(" %d=%d", h->nodes[j].id, dist);
                        else
                                printf(" %d=?", h->nodes[j].id);
                }
                printf("\n");
        }

        printf("\nPassthrough devices:\n");
        for (size_t g = 0; g <= h->n_nodes; g++) {
                int group = g < h->n_nodes ? h->nodes[g].id : -1;
                bool header = false;

                for (size_t i = 0; i < h->n_devices; i++) {
                        const struct hostmap_device *d = &h->devices[i];
                        if (hostmap_device_is_bridge(d) || !in_group(h, d->node, group))
                                continue;
                        print_group_header(group, &header);
                        print_device_text(d);
                }
                for (size_t i = 0; i < h->n_mdevs; i++) {
                        const struct hostmap_mdev *m = &h->mdevs[i];
                        if (!in_group(h, m->node, group))
                                continue;
                        print_group_header(group, &header);
                        printf("    mdev %s  type %s  parent %s\n", m->uuid, m->type ? m->type : "unknown",
                               pci_addr_format(&m->parent, parent));
                }
        }
}

static struct json_object *device_json(const struct hostmap_device *d) {
        struct json_object *o = json_object_new_object();
        char buf[PCI_ADDR_STRLEN];

        json_object_object_add(o, "bdf", json_object_new_string(d->name));
        json_object_object_add(o, "class", ctl_json_hex(d->class, 6));
        json_object_object_add(o, "class_name", json_object_new_string(hostmap_class_name(d->class)));
        json_object_object_add(o, "vendor", ctl_json_hex(d->vendor, 4));
        json_object_object_add(o, "device", ctl_json_hex(d->device, 4));
        json_object_object_add(o, "node", json_object_new_int(d->node));
        json_object_object_add(o, "sysfs_node", json_object_new_int(d->sysfs_node));
        json_object_object_add(o, "driver", d->driver ? json_object_new_string(d->driver) : NULL);
        json_object_object_add(o, "iommu_group", d->iommu_group >= 0 ? json_object_new_int(d->iommu_group) : NULL);
        json_object_object_add(o, "physfn", d->has_physfn ? json_object_new_string(pci_addr_format(&d->physfn, buf)) : NULL);
        json_object_object_add(o, "vfs", json_object_new_int((int) d->n_vfs));
        json_object_object_add(o, "host_bridge", d->host_bridge ? json_object_new_string(d->host_bridge) : NULL);

        struct json_object *up = json_object_new_array();
        for (size_t i = 0; i < d->n_upstream; i++)
                json_object_array_add(up, json_object_new_string(pci_addr_format(&d->upstream[i], buf)));
        json_object_object_add(o, "upstream", up);

        struct json_object *bars = json_object_new_array();
        for (unsigned i = 0; i < HOSTMAP_N_BARS; i++) {
                const struct hostmap_bar *b = &d->bars[i];
                if (b->type == HOSTMAP_BAR_NONE)
                        continue;
                struct json_object *bo = json_object_new_object();
                json_object_object_add(bo, "index", json_object_new_int((int) i));
                json_object_object_add(bo, "type", json_object_new_string(bar_type_name(b->type)));
                json_object_object_add(bo, "prefetchable", json_object_new_boolean(b->prefetchable));
                json_object_object_add(bo, "size", json_object_new_uint64(b->size));
                json_object_array_add(bars, bo);
        }
        json_object_object_add(o, "bars", bars);
        return o;
}

static struct json_object *host_json(const struct hostmap *h, const char *root) {
        struct json_object *o = json_object_new_object();
        char buf[PCI_ADDR_STRLEN];

        json_object_object_add(o, "sysfs_root", json_object_new_string(root));
        json_object_object_add(o, "single_node", json_object_new_boolean(h->single_node));
        struct json_object *w = json_object_new_array();
        for (size_t i = 0; i < h->n_warnings; i++)
                json_object_array_add(w, json_object_new_string(h->warnings[i]));
        json_object_object_add(o, "warnings", w);

        struct json_object *nodes = json_object_new_array();
        for (size_t i = 0; i < h->n_nodes; i++) {
                const struct hostmap_node *n = &h->nodes[i];
                _cleanup_free_ char *cpus = bitmap_format(&n->cpus);
                struct json_object *no = json_object_new_object();
                json_object_object_add(no, "id", json_object_new_int(n->id));
                json_object_object_add(no, "socket", n->socket >= 0 ? json_object_new_int(n->socket) : NULL);
                json_object_object_add(no, "cpus", json_object_new_string(cpus));
                /* In the order of "nodes", as in sysfs; null where unknown. */
                struct json_object *dist = json_object_new_array();
                for (size_t j = 0; j < h->n_nodes; j++) {
                        int dv = hostmap_distance(h, n->id, h->nodes[j].id);
                        json_object_array_add(dist, dv >= 0 ? json_object_new_int(dv) : NULL);
                }
                json_object_object_add(no, "distances", dist);
                json_object_array_add(nodes, no);
        }
        json_object_object_add(o, "nodes", nodes);

        /* Endpoints only, as in the text form; the node field groups them. */
        struct json_object *devs = json_object_new_array();
        for (size_t i = 0; i < h->n_devices; i++)
                if (!hostmap_device_is_bridge(&h->devices[i]))
                        json_object_array_add(devs, device_json(&h->devices[i]));
        json_object_object_add(o, "devices", devs);

        struct json_object *mdevs = json_object_new_array();
        for (size_t i = 0; i < h->n_mdevs; i++) {
                const struct hostmap_mdev *m = &h->mdevs[i];
                struct json_object *mo = json_object_new_object();
                json_object_object_add(mo, "uuid", json_object_new_string(m->uuid));
                json_object_object_add(mo, "parent", json_object_new_string(pci_addr_format(&m->parent, buf)));
                json_object_object_add(mo, "type", m->type ? json_object_new_string(m->type) : NULL);
                json_object_object_add(mo, "node", json_object_new_int(m->node));
                json_object_array_add(mdevs, mo);
        }
        json_object_object_add(o, "mdevs", mdevs);
        return o;
}

/* What the command line asked for. */
struct host_args {
        const char *root;
        bool json, nccl, hwloc;
        const char *cpu_spec;
};

/* Reads the options into *a; returns -1 after printing the help (done,
 * exit 0), a CTL_EXIT_* code on bad input, or 0. */
static int parse_host_args(int argc, char **argv, struct host_args *a) {
        static const struct option options[] = {
                CTL_OPTION_SYSFS_ROOT,
                { "json",       no_argument,       NULL, 'j' },
                { "format",     required_argument, NULL, 'F' },
                { "nccl-topo",  no_argument,       NULL, 'n' },
                { "cpu",        required_argument, NULL, 'c' },
                { "help",       no_argument,       NULL, 'h' },
                { NULL,         0,                 NULL, 0 }
        };
        int c;

        /* The dispatcher may have run getopt on the global options already;
         * 0 makes glibc start over. */
        optind = 0;
        opterr = 0;
        while ((c = getopt_long(argc, argv, "+h", options, NULL)) >= 0) {
                switch (c) {
                case CTL_OPT_SYSFS_ROOT:
                        a->root = optarg;
                        break;
                case 'j':
                        a->json = true;
                        break;
                case 'F':
                        if (streq(optarg, "json"))
                                a->json = true;
                        else if (streq(optarg, "hwloc"))
                                a->hwloc = true;
                        else if (!streq(optarg, "text")) {
                                fprintf(stderr, "pcinumactl host: unknown format '%s' (expected text, json or hwloc)\n", optarg);
                                host_usage(stderr);
                                return CTL_EXIT_BAD_INPUT;
                        }
                        break;
                case 'n':
                        a->nccl = true;
                        break;
                case 'c':
                        a->cpu_spec = optarg;
                        break;
                case 'h':
                        host_usage(stdout);
                        return -1;
                case '?':
                default:
                        if (optopt)
                                fprintf(stderr, "pcinumactl host: unknown option '-%c'\n", optopt);
                        else
                                fprintf(stderr, "pcinumactl host: unknown option '%s'\n", argv[optind - 1]);
                        host_usage(stderr);
                        return CTL_EXIT_BAD_INPUT;
                }
        }
        if (optind < argc) {
                ctl_error(0, "pcinumactl host", "unexpected argument '%s'", argv[optind]);
                host_usage(stderr);
                return CTL_EXIT_BAD_INPUT;
        }
        return 0;
}

/* Options that exclude each other: 2 after saying which, or 0. */
static int check_host_args(const struct host_args *a) {
        const char *why = NULL;
        _cleanup_free_ char *both = NULL;

        if ((a->json || a->hwloc) && a->nccl)
                why = both = xasprintf("--%s and --nccl-topo exclude each other", a->json ? "json" : "format hwloc");
        else if (a->json && a->hwloc)
                why = "--json and --format hwloc exclude each other";
        else if (a->cpu_spec && !a->nccl)
                why = "--cpu goes with --nccl-topo";
        if (!why)
                return 0;
        fprintf(stderr, "pcinumactl host: %s\n", why);
        host_usage(stderr);
        return 2;
}

/* The host's NCCL topology file on stdout. */
static int print_nccl(const struct hostmap *h, const char *cpu_spec, const struct ctl_cpu *cpu) {
        _cleanup_free_ char *xml = NULL, *reason = NULL;
        struct nccltopo_cpu host_cpu;
        const struct nccltopo_cpu *dflt = nccltopo_cpu_from_host(&h->cpu_id, &host_cpu) ? &host_cpu : NULL;
        ctl_print_hostmap_warnings("pcinumactl host", h);
        if (nccltopo_host(h, ctl_cpu_pick(cpu_spec, cpu, dflt), &xml, &reason) != 0) {
                fprintf(stderr, "pcinumactl host: no NCCL topology file: %s\n", reason);
                return 1;
        }
        fputs(xml, stdout);
        return fflush(stdout) == 0 ? 0 : 1;
}

int ctl_host(int argc, char **argv) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_free_ char *error = NULL;
        struct host_args a = { .root = ctl_default_sysfs_root() };
        int r;

        r = parse_host_args(argc, argv, &a);
        if (r != 0)
                return r < 0 ? 0 : r;
        r = check_host_args(&a);
        if (r != 0)
                return r;
        struct ctl_cpu cpu = {0};
        if (a.cpu_spec && ctl_cpu_parse("pcinumactl host", a.cpu_spec, &cpu) < 0)
                return CTL_EXIT_BAD_INPUT;

        r = a.nccl ? hostmap_load_for_plan(a.root, &h, &error) : hostmap_load_path(a.root, &h, &error);
        if (r < 0) {
                fprintf(stderr, "pcinumactl: cannot read host map from '%s': %s\n", a.root,
                        ctl_hostmap_load_reason(a.root, r, error));
                return CTL_EXIT_BAD_INPUT;
        }
        if (a.nccl)
                return print_nccl(h, a.cpu_spec, &cpu);

        ctl_print_hostmap_warnings("pcinumactl host", h);
        if (a.hwloc) {
                _cleanup_free_ char *xml = hwloctopo_host(h);
                fputs(xml, stdout);
        } else if (a.json) {
                _cleanup_json_ struct json_object *o = host_json(h, a.root);
                puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
        } else
                print_text(h);

        if (fflush(stdout) != 0)
                return ctl_error(CTL_EXIT_FAILED, "pcinumactl", "cannot write output: %s", strerror(errno));
        return 0;
}

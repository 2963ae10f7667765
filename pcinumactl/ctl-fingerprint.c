/* pcinumactl fingerprint: the host's topology fingerprint
 * (lib/core/fingerprint.h), so that a fleet can tell which hosts a planned
 * guest could equally run on.  The first line is the digest alone, for
 * scripts that publish it as a scheduler trait or a node label
 * (docs/operations.md); then the nodes and each device group with its own
 * digest, so two hosts that differ can be told apart group by group. */
#include <errno.h>
#include <getopt.h>
#include <json.h>
#include <stdio.h>
#include <string.h>

#include "ctl-util.h"
#include "ctl.h"
#include "fingerprint.h"
#include "hook-protocol.h" /* _cleanup_json_ */
#include "hostmap.h"
#include "hostmap-sysfs.h"

#define WHO "pcinumactl fingerprint"

static void usage(FILE *f) {
        fprintf(f, "Usage: pcinumactl fingerprint [--sysfs-root DIR] [--json]\n\n"
                   "Print the host's topology fingerprint: a SHA-256 digest of what a plan depends on (the\n"
                   "NUMA nodes, their CPU counts and distances, and the passthrough-capable devices by node,\n"
                   "root complex and switch, with vendor:device and driver), leaving out bus numbers and\n"
                   "host bridge names.  Hosts with the same digest give a guest the same topology.\n"
                   "The first line is the digest alone; then each device group with its own digest.\n\n"
                   "  --sysfs-root DIR  read sysfs from DIR (default $PCINUMA_SYSFS_ROOT or /sys)\n"
                   "  --json            print JSON instead of text\n"
                   "  -h, --help        show this help\n\n"
                   "Exit status: 0 printed, 1 the output could not be written, 2 bad input or usage.\n");
}

static void print_text(const struct hostmap *h, const struct fingerprint *f) {
        size_t n_devices = 0;
        for (size_t k = 0; k < f->n_groups; k++)
                n_devices += f->groups[k].n_devices;
        printf("%s\n", f->digest);
        printf("Topology fingerprint, version %d: %zu node%s, %zu device group%s, %zu device%s\n", FINGERPRINT_VERSION,
               h->n_nodes, h->n_nodes == 1 ? "" : "s", f->n_groups, f->n_groups == 1 ? "" : "s", n_devices,
               n_devices == 1 ? "" : "s");
        printf("\nNUMA nodes (sockets numbered in node order):\n");
        /* The node lines of the canonical text, as they are hashed. */
        const char *line = strchr(f->canonical, '\n');
        while (line && strncmp(line + 1, "node ", 5) == 0) {
                const char *end = strchr(line + 1, '\n');
                printf("  %.*s\n", (int) (end - line - 1), line + 1);
                line = end;
        }
        printf("\nDevice groups (node, root complex):\n");
        for (size_t k = 0; k < f->n_groups; k++) {
                const struct fingerprint_group *g = &f->groups[k];
                char node[16] = "none";
                if (g->node >= 0)
                        snprintf(node, sizeof node, "%d", g->node);
                printf("  group %zu: node %s, root complex %s: %s\n", k + 1, node,
                       g->host_bridge ? g->host_bridge : "unknown (no sysfs paths)", g->digest);
                for (size_t i = 0; i < g->n_devices; i++) {
                        const struct hostmap_device *d = &h->devices[g->devices[i]];
                        _cleanup_free_ char *path = ctl_device_path(d);
                        char pf[PCI_ADDR_STRLEN];
                        printf("    %s  %s [%04x:%04x]  driver %s", d->name, hostmap_class_name(d->class), d->vendor,
                               d->device, d->driver ? d->driver : "none");
                        if (d->has_physfn)
                                printf("  VF of %s", pci_addr_format(&d->physfn, pf));
                        if (!fingerprint_device_counts(d))
                                printf(fingerprint_slot_companion(h, d) ? "  (with function 0 of its slot)"
                                                                        : "  (as the PF of its VFs)");
                        printf("\n        path: %s\n", path);
                }
        }
}

static struct json_object *fingerprint_json(const struct hostmap *h, const struct fingerprint *f) {
        struct json_object *o = json_object_new_object();
        char buf[PCI_ADDR_STRLEN];

        json_object_object_add(o, "digest", json_object_new_string(f->digest));
        json_object_object_add(o, "version", json_object_new_int(FINGERPRINT_VERSION));
        json_object_object_add(o, "canonical", json_object_new_string(f->canonical));
        struct json_object *groups = json_object_new_array();
        for (size_t k = 0; k < f->n_groups; k++) {
                const struct fingerprint_group *g = &f->groups[k];
                struct json_object *go = json_object_new_object();
                json_object_object_add(go, "digest", json_object_new_string(g->digest));
                json_object_object_add(go, "node", g->node >= 0 ? json_object_new_int(g->node) : NULL);
                json_object_object_add(go, "host_bridge", g->host_bridge ? json_object_new_string(g->host_bridge) : NULL);
                json_object_object_add(go, "canonical", json_object_new_string(g->canonical));
                struct json_object *devs = json_object_new_array();
                for (size_t i = 0; i < g->n_devices; i++) {
                        const struct hostmap_device *d = &h->devices[g->devices[i]];
                        struct json_object *dobj = json_object_new_object();
                        json_object_object_add(dobj, "bdf", json_object_new_string(d->name));
                        json_object_object_add(dobj, "vendor", ctl_json_hex(d->vendor, 4));
                        json_object_object_add(dobj, "device", ctl_json_hex(d->device, 4));
                        json_object_object_add(dobj, "class", ctl_json_hex(d->class, 6));
                        json_object_object_add(dobj, "driver", d->driver ? json_object_new_string(d->driver) : NULL);
                        json_object_object_add(dobj, "physfn",
                                               d->has_physfn ? json_object_new_string(pci_addr_format(&d->physfn, buf)) : NULL);
                        json_object_object_add(dobj, "capable", json_object_new_boolean(fingerprint_device_counts(d)));
                        struct json_object *up = json_object_new_array();
                        for (size_t u = 0; u < d->n_upstream; u++)
                                json_object_array_add(up, json_object_new_string(pci_addr_format(&d->upstream[u], buf)));
                        json_object_object_add(dobj, "upstream", up);
                        json_object_array_add(devs, dobj);
                }
                json_object_object_add(go, "devices", devs);
                json_object_array_add(groups, go);
        }
        json_object_object_add(o, "groups", groups);
        return o;
}

struct fingerprint_opts {
        const char *root;
        bool json;
};

static bool fingerprint_option(void *data, int c, const char *arg) {
        struct fingerprint_opts *o = data;
        switch (c) {
        case CTL_OPT_SYSFS_ROOT:
                o->root = arg;
                return true;
        case 'j':
                o->json = true;
                return true;
        default:
                return false;
        }
}

int ctl_fingerprint(int argc, char **argv) {
        static const struct option opts[] = {
                CTL_OPTION_SYSFS_ROOT,
                { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        struct fingerprint_opts o = { .root = ctl_default_sysfs_root() };
        int r = ctl_parse_args(argc, argv, WHO, opts, usage, fingerprint_option, &o, NULL, NULL);
        if (r >= 0)
                return r;
        const char *root = o.root;

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_free_ char *err = NULL;
        r = hostmap_load_path(root, &h, &err);
        if (r < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, WHO, "cannot read host map from '%s': %s", root,
                                 ctl_hostmap_load_reason(root, r, err));
        ctl_print_hostmap_warnings(WHO, h);

        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(h);
        if (o.json) {
                _cleanup_json_ struct json_object *jo = fingerprint_json(h, f);
                puts(json_object_to_json_string_ext(jo, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                           JSON_C_TO_STRING_NOSLASHESCAPE));
        } else
                print_text(h, f);
        if (fflush(stdout) != 0)
                return ctl_error(CTL_EXIT_FAILED, WHO, "cannot write output: %s", strerror(errno));
        return 0;
}

/* pcinuma-kubevirt-hook: KubeVirt's onDefineDomain hook.  KubeVirt's
 * sidecar-shim (cmd/sidecars/sidecar_shim.go in KubeVirt) runs an
 * executable named onDefineDomain from $PATH as
 *
 *     onDefineDomain --vmi <VMI as JSON> --domain <domain XML>
 *
 * and, when it exits 0, virt-launcher defines its standard output as the
 * domain; on any other exit the define fails and the VMI does not start.
 * This program prints the plan of the domain, exactly as `pcinumactl plan`
 * makes it (ctl_plan_xml(), the same engine), read from the host's sysfs
 * that the pod sees at /sys.  A refusal by the policy exits 1 with nothing
 * on stdout; bad input exits 2.  docs/operations.md, "Orchestrators:
 * KubeVirt", says what KubeVirt does with each.
 *
 * virt-launcher defines a q35 domain two or three times in a row, each
 * time through the hooks, the later ones with the devices libvirt read
 * back from the previous definition but through KubeVirt's own domain
 * model, which keeps no foreign <metadata>: pcinuma's mark is gone, its
 * expander buses and ports are not (KubeVirt's
 * pkg/virt-launcher/virtwrap/network/nichotplug.go,
 * WithNetworkIfacesResources(), and docs/pci-topology.md).  Planned as it
 * is, such a domain would get a second set of expander buses beside the
 * first.  So the hook keeps its last output per domain in a state
 * directory (inside the sidecar container) and, when a domain comes back
 * without a mark but with the devices exactly where that output put them,
 * puts the mark back and undoes the plan (rewrite_revert()) before planning
 * again: every pass gets the same plan of the domain KubeVirt made. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <json.h>
#include <libxml/tree.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-util.h"
#include "domain.h"
#include "engine.h"
#include "fileio.h"
#include "hostmap.h"
#include "rewrite.h"
#include "sha256.h"
#include "xmlutil.h"

static const char *const who = "pcinuma-kubevirt-hook";

#define DEFAULT_STATE_DIR "/tmp/pcinuma-kubevirt"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: onDefineDomain --vmi JSON --domain XML\n"
                "                      [--sysfs-root DIR] [--policy NAME | --policy-file FILE]\n"
                "                      [--state-dir DIR]\n"
                "\n"
                "KubeVirt's onDefineDomain hook (run by KubeVirt's sidecar-shim): print the\n"
                "NUMA-aware PCIe plan of the domain XML on stdout, as 'pcinumactl plan' makes it.\n"
                "\n"
                "  --vmi JSON          the VirtualMachineInstance, as JSON (checked, not used)\n"
                "  --domain XML        the domain XML KubeVirt is about to define\n"
                CTL_USAGE_ADAPTER_ARGS
                "  --state-dir DIR     where the last plan of each domain is kept between\n"
                "                      KubeVirt's define passes (default: $PCINUMA_KUBEVIRT_STATE_DIR,\n"
                "                      else " DEFAULT_STATE_DIR ")\n"
                "  --version           print the version\n"
                "\n"
                "Exit status: 0 planned or unchanged (the domain on stdout), 1 refused by the\n"
                "policy (nothing on stdout: KubeVirt does not start the VMI), 2 bad input.\n");
        fputs(CTL_USAGE_STAND_INS, f);
}

static const char *env_or(const char *name, const char *dflt) {
        const char *e = getenv(name);
        return e && *e ? e : dflt;
}

/* The state directory, made if missing: 0700 and ours, or not used (it
 * may sit in a /tmp that others write to). Returns an fd, or -1 after a
 * warning. */
static int open_state_dir(const char *dir) {
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
                ctl_error(0, who, "warning: cannot create the state directory '%s': %s; KubeVirt's later define passes "
                          "will not find this plan", dir, strerror(errno));
                return -1;
        }
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
                ctl_error(0, who, "warning: not using the state directory '%s': %s", dir,
                          fd < 0 ? strerror(errno) : "it must be a directory of this user with mode 0700");
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        return fd;
}

/* The file name of a domain's last plan: the SHA-256 of its name (a name
 * may hold anything but '/'), or NULL for a domain without a name. */
static char *state_name(const char *domain_name) {
        char hex[SHA256_HEX_SIZE];
        if (!domain_name || !*domain_name)
                return NULL;
        sha256_hex(domain_name, strlen(domain_name), hex);
        return xasprintf("%s.xml", hex);
}

static char *read_state(int dirfd, const char *name) {
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        char *buf = NULL;
        size_t len = 0;
        if (read_full_fd(fd, DOMAIN_XML_MAX, &buf, &len) < 0)
                return NULL;
        return buf;
}

/* Replace the domain's last plan with xml (NULL: forget it), written
 * beside and renamed.  A failure is a warning: the plan on stdout stands. */
static void write_state(int dirfd, const char *name, const char *xml) {
        if (!xml) {
                (void) unlinkat(dirfd, name, 0);
                return;
        }
        _cleanup_free_ char *tmp = xasprintf(".%s.%ld", name, (long) getpid());
        int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        bool ok = fd >= 0;
        size_t len = strlen(xml);
        for (size_t off = 0; ok && off < len;) {
                ssize_t n = write(fd, xml + off, len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                ok = n > 0;
                off += ok ? (size_t) n : 0;
        }
        if (fd >= 0 && close(fd) < 0)
                ok = false;
        if (ok && renameat(dirfd, tmp, dirfd, name) == 0)
                return;
        ctl_error(0, who, "warning: cannot keep this plan in the state directory: %s", strerror(errno));
        (void) unlinkat(dirfd, tmp, 0);
}

static bool same_hostdev(const struct domain_hostdev *a, const struct domain_hostdev *b) {
        if (a->kind != b->kind)
                return false;
        return a->kind == DOMAIN_HOSTDEV_PCI ? pci_addr_eq(&a->host, &b->host) : strcasecmp(a->mdev_uuid, b->mdev_uuid) == 0;
}

/* Does 'in' (without a mark) carry the layout of 'last' (our previous
 * output, with its mark)?  Every expander bus of 'last' is in 'in' with
 * the same index and NUMA node, and every hostdev 'last' gave a guest
 * address has it in 'in' too.  A domain KubeVirt made afresh (a retried
 * start) has no such addresses, so the old mark is not forced on it. */
static bool carries_layout(const struct domain *in, const struct domain *last) {
        if (!last->mark || in->mark)
                return false;
        for (size_t i = 0; i < last->n_controllers; i++) {
                const struct domain_controller *c = &last->controllers[i];
                if (!streq(c->model, "pcie-expander-bus"))
                        continue;
                const struct domain_controller *o = domain_find_controller(in, c->index);
                if (!o || !streq(o->model, c->model) || o->node != c->node)
                        return false;
        }
        for (size_t i = 0; i < last->n_hostdevs; i++) {
                const struct domain_hostdev *h = &last->hostdevs[i];
                if (!h->has_guest_addr)
                        continue;
                bool found = false;
                for (size_t k = 0; k < in->n_hostdevs && !found; k++)
                        found = same_hostdev(&in->hostdevs[k], h) && in->hostdevs[k].has_guest_addr &&
                                pci_addr_eq(&in->hostdevs[k].guest, &h->guest);
                if (!found)
                        return false;
        }
        return true;
}

/* Parse a domain XML as the plan reads it: in a stand_ins build with a's
 * stand-in table, so that a stand-in is a hostdev here as well (its guest
 * address compared, its revert done). */
static int parse_domain(const struct ctl_plan_args *a, const char *xml, size_t len, struct domain **ret,
                        char **ret_error) {
#if PCINUMA_STAND_INS
        return domain_parse_stand_ins(xml, len, a->stand_ins, ret, ret_error);
#else
        (void) a;
        return domain_parse(xml, len, ret, ret_error);
#endif
}

/* in with last's mark put back into its <metadata>, reverted (in place,
 * on in's own model: a stand_ins build's stand-ins stay hostdevs): the
 * domain as KubeVirt made it, with what KubeVirt changed since.  NULL
 * (after a warning) when the revert refuses. */
static char *undo_last_plan(struct domain *in, const struct domain *last) {
        /* A new <metadata> goes first; the mark after its last element,
         * indented as it is, so that the revert (which takes the mark with
         * the white space before it) gives back <metadata> byte for byte. */
        xmlNodePtr md = xml_child_or_new(xmlDocGetRootElement(in->doc), "metadata");
        xml_add_copy_indented(md, last->mark);
        _cleanup_free_ char *out = NULL, *warning = NULL, *err = NULL;
        if (domain_reload(in, &err) < 0 || rewrite_revert(in, &warning, &err) < 0 || domain_format(in, &out) < 0) {
                ctl_error(0, who, "warning: domain %s: the plan of KubeVirt's previous define pass cannot be undone (%s); "
                          "planning the domain as it is", in->name ? in->name : "(unnamed)",
                          err ? err : "cannot format the XML");
                return NULL;
        }
        if (warning)
                ctl_error(0, who, "warning: domain %s: undoing the plan of KubeVirt's previous define pass: %s", in->name, warning);
        return TAKE_PTR(out);
}

struct options {
        const char *vmi;
        const char *domain;
        const char *state_dir;
};

static bool own_option(void *data, int c, const char *arg) {
        struct options *o = data;
        switch (c) {
        case 'V':
                o->vmi = arg;
                return true;
        case 'D':
                o->domain = arg;
                return true;
        case 'S':
                o->state_dir = arg;
                return true;
        default:
                return false;
        }
}

/* Read the command line into a and o.  Returns -1 to go on, else the exit
 * status (--help, --version, a usage error). */
static int parse_args(int argc, char **argv, struct ctl_plan_args *a, struct options *o) {
        static const struct option opts[] = {
                { "vmi", required_argument, NULL, 'V' },
                { "domain", required_argument, NULL, 'D' },
                { "state-dir", required_argument, NULL, 'S' },
                CTL_OPTIONS_ADAPTER,
        };
        /* The shim passes no options of ours: the image's environment
         * does (adapters/kubevirt/Containerfile; ctl_parse_adapter_args()
         * reads it). */
        int r = ctl_parse_adapter_args(argc, argv, opts, usage, own_option, o, a);
        if (r >= 0)
                return r;
        if (!o->vmi || !o->domain) {
                ctl_error(0, who, "KubeVirt passes --vmi JSON and --domain XML; %s is missing", !o->vmi ? "--vmi" : "--domain");
                usage(stderr);
                return CTL_EXIT_BAD_INPUT;
        }
        /* The shim unmarshals the VMI before it runs the hook: anything but
         * a JSON object is not KubeVirt calling. */
        json_object *vmi = json_tokener_parse(o->vmi);
        bool vmi_ok = vmi && json_object_is_type(vmi, json_type_object);
        json_object_put(vmi);
        if (!vmi_ok)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "--vmi is not a JSON object (KubeVirt passes the VMI as JSON)");
        return -1;
}

/* A later define pass of the domain (its last plan, 'sname' in the state
 * directory, laid out in 'in'): in with that plan undone, to be planned
 * from KubeVirt's domain again.  NULL otherwise. */
static char *undo_previous_pass(const struct ctl_plan_args *a, struct domain *in, int dirfd, const char *sname) {
        if (dirfd < 0 || !sname || in->mark)
                return NULL;
        _cleanup_free_ char *last_xml = read_state(dirfd, sname);
        _cleanup_domain_ struct domain *last = NULL;
        _cleanup_free_ char *err = NULL;
        if (!last_xml || parse_domain(a, last_xml, strlen(last_xml), &last, &err) < 0 || !carries_layout(in, last))
                return NULL;
        return undo_last_plan(in, last);
}

int main(int argc, char **argv) {
        _cleanup_(ctl_plan_args_done) struct ctl_plan_args a = {
                .who = who,
                .root = ctl_default_sysfs_root(),
                .input = "--domain",
        };
        struct options o = { .state_dir = env_or("PCINUMA_KUBEVIRT_STATE_DIR", DEFAULT_STATE_DIR) };
        int r = parse_args(argc, argv, &a, &o);
        if (r >= 0)
                return r;

        size_t len = strlen(o.domain);
        _cleanup_free_ char *err = NULL;
        r = ctl_load_stand_ins(&a);
        if (r != 0)
                return r;
        _cleanup_domain_ struct domain *in = NULL;
        if (parse_domain(&a, o.domain, len, &in, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "--domain: %s", err);

        _cleanup_close_ int dirfd = open_state_dir(o.state_dir);
        _cleanup_free_ char *sname = state_name(in->name);
        _cleanup_free_ char *undone = undo_previous_pass(&a, in, dirfd, sname);

        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        r = ctl_plan_xml(&a, undone ? undone : o.domain, undone ? strlen(undone) : len, &h, &res);
        if (r != 0)
                return r;
        r = ctl_report_plan(who, res, true);
        if (r != 0) {
                ctl_error(0, who, "domain %s: refused (policy %s): nothing printed, so KubeVirt does not define or start it",
                          in->name ? in->name : "(unnamed)", policy_mode_to_string(res->settings.mode));
                return r;
        }
        fputs(res->xml, stdout);
        if (fflush(stdout) != 0 || ferror(stdout))
                return ctl_error(CTL_EXIT_FAILED, who, "cannot write the planned domain: %s", strerror(errno));
        if (dirfd >= 0 && sname)
                write_state(dirfd, sname, res->verdict == PLAN_APPLY ? res->xml : NULL);
        return 0;
}

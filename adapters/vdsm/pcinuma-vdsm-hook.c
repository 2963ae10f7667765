/* pcinuma-vdsm-hook: a VDSM (oVirt) hook script.  VDSM runs every
 * executable in /usr/libexec/vdsm/hooks/<hook point>/, in name order, with
 * the domain XML in a temporary file named by $_hook_domxml, and reads
 * that file back (by its name) after the last script; a script that exits
 * non-zero fails the hook point (1: the next scripts still run, 2: they do
 * not), with its stderr as the error (lib/vdsm/common/hooks.py,
 * _runHooksDir(), in VDSM).
 *
 * before_vm_start: the plan of the domain, exactly as `pcinumactl plan`
 * makes it (ctl_plan_input(), the same engine), replaces the file: written
 * beside it and renamed over it, so the file holds the whole old XML or
 * the whole plan, never a mix.  A refusal by the policy exits 1 and bad
 * input 2, both leaving the file as it was (VDSM still reads it back
 * before it fails the start).
 *
 * before_vm_migrate_destination: VDSM ignores what the hook writes here;
 * the incoming domain's devices are mapped by pcinumad in libvirt's
 * migrate hook.  This only answers early what that gate would answer
 * (decide_hook(), the same code): exit 1 with its message when this host
 * would refuse the migration, so VDSM fails it before libvirt starts.
 *
 * Which hook point it runs for comes from --hook, else from the directory
 * VDSM ran it from (the name of the directory of argv[0]). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-util.h"
#include "decide.h"
#include "domain.h"
#include "engine.h"
#include "hook-protocol.h"
#include "hostmap.h"

static const char *const who = "pcinuma-vdsm-hook";

static void usage(FILE *f) {
        fprintf(f,
                "Usage: pcinuma-vdsm-hook [--hook before_vm_start|before_vm_migrate_destination]\n"
                "                         [--sysfs-root DIR] [--policy NAME | --policy-file FILE]\n"
                "\n"
                "A VDSM hook: the domain XML is the file named by $_hook_domxml.\n"
                "before_vm_start: replace it with its NUMA-aware PCIe plan, as 'pcinumactl plan'\n"
                "makes it.  before_vm_migrate_destination: refuse (exit 1) an incoming migration\n"
                "this host's pcinuma would refuse; the file is left as it is.\n"
                "\n"
                "  --hook POINT        the VDSM hook point (default: the name of the directory\n"
                "                      the program was run from, as VDSM runs it)\n"
                CTL_USAGE_ADAPTER_ARGS
                "  --version           print the version\n"
                "\n"
                "Exit status: 0 done (planned, unchanged or allowed), 1 refused by the policy\n"
                "(or the file could not be replaced), 2 bad input; the file is left as it was\n"
                "unless the exit status is 0.\n");
        fputs(CTL_USAGE_STAND_INS, f);
}

/* The hook point from the path VDSM ran us by:
 * /usr/libexec/vdsm/hooks/<point>/<script>.  NULL if argv0 has no
 * directory. */
static char *hook_from_path(const char *argv0) {
        const char *slash = strrchr(argv0, '/');
        if (!slash)
                return NULL;
        const char *start = slash;
        while (start > argv0 && start[-1] != '/')
                start--;
        return slash > start ? xstrndup(start, (size_t) (slash - start)) : NULL;
}

/* Write text to a new file beside path and rename it over path, with
 * path's permission bits.  0, or a negative errno with nothing changed. */
static int replace_file(const char *path, const char *text) {
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        _cleanup_free_ char *tmp = xasprintf("%s.pcinuma-XXXXXX", path);
        int fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = 0;
        size_t len = strlen(text);
        for (size_t off = 0; r == 0 && off < len;) {
                ssize_t n = write(fd, text + off, len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        r = n < 0 ? -errno : -EIO;
                else
                        off += (size_t) n;
        }
        if (r == 0 && fchmod(fd, st.st_mode & 07777) < 0)
                r = -errno;
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

static int before_vm_start(const struct ctl_plan_args *a) {
        _cleanup_hostmap_ struct hostmap *h = NULL;
        _cleanup_engine_result_ struct engine_result *res = NULL;
        int r = ctl_plan_input(a, &h, &res);
        if (r != 0)
                return r;
        const char *name = res->base->name ? res->base->name : "(unnamed)";
        const char *mode = policy_mode_to_string(res->settings.mode);
        r = ctl_report_plan(who, res, true);
        if (r != 0) {
                ctl_error(0, who, "domain %s: refused (policy %s); the domain XML is left as it was", name, mode);
                return r;
        }
        if (!res->changed) {
                ctl_error(0, who, "domain %s: %s (policy %s)", name,
                          res->already_planned ? "already planned" : res->plan->reason ? res->plan->reason : "nothing to plan",
                          mode);
                return 0;
        }
        r = replace_file(a->input, res->xml);
        if (r < 0)
                return ctl_error(CTL_EXIT_FAILED, who, "cannot replace '%s' with the plan of domain %s: %s; left as it was",
                                 a->input, name, strerror(-r));
        ctl_error(0, who, "domain %s: %s (policy %s)", name, res->reverted ? "plan undone" : "planned", mode);
        return 0;
}

static int before_vm_migrate_destination(const struct ctl_plan_args *a) {
        _cleanup_(ctl_policy_done) struct ctl_policy p = {0};
        int r = ctl_load_policy(a, &p);
        if (r != 0)
                return r;
        _cleanup_policy_ struct policy *forced = NULL;
        _cleanup_free_ char *err = NULL;
        if (p.forced) {
                /* decide_hook() takes a policy: a file that only sets the
                 * default mode is what --policy NAME means. */
                _cleanup_free_ char *json = xasprintf("{\"default\": {\"policy\": \"%s\"}}", policy_mode_to_string(p.mode));
                if (policy_parse(json, strlen(json), "--policy", &forced, &err) < 0)
                        return ctl_error(CTL_EXIT_BAD_INPUT, who, "--policy: %s", err);
        }
        _cleanup_free_ char *xml = NULL;
        size_t len = 0;
        if (ctl_read_input(a->input, DOMAIN_XML_MAX, &xml, &len, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "%s", err);
        _cleanup_domain_ struct domain *d = NULL;
        if (domain_parse(xml, len, &d, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "%s: %s", a->input, err);
        _cleanup_hostmap_ struct hostmap *h = NULL;
        r = ctl_load_hostmap(a, &h);
        if (r != 0)
                return r;

        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { d->name ? d->name : (char *) "", (char *) "migrate", (char *) "begin", (char *) "-" },
                .xml = xml,
                .xml_len = len,
        };
        _cleanup_(decision_done) struct decision dec = {0};
        decide_hook(&req, h, forced ? forced : p.pol, NULL, NULL, &dec);
        if (dec.message)
                fputs(dec.message, stderr);
        if (dec.exit_code != 0)
                return CTL_EXIT_REFUSED;
        return 0;
}

/* --hook NAME, into the char * at data (owned). */
static bool hook_option(void *data, int c, const char *arg) {
        char **hook = data;
        if (c != 'H')
                return false;
        free(*hook);
        *hook = xstrdup(arg);
        return true;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "hook", required_argument, NULL, 'H' },
                CTL_OPTIONS_ADAPTER,
        };
        _cleanup_(ctl_plan_args_done) struct ctl_plan_args a = { .who = who, .root = ctl_default_sysfs_root() };
        _cleanup_free_ char *hook = NULL;
        /* VDSM passes no options: its own environment may name the
         * policy file (ctl_parse_adapter_args() reads it). */
        int r = ctl_parse_adapter_args(argc, argv, opts, usage, hook_option, &hook, &a);
        if (r >= 0)
                return r;
        if (!hook)
                hook = hook_from_path(argv[0]);
        if (!hook || (!streq(hook, "before_vm_start") && !streq(hook, "before_vm_migrate_destination")))
                return ctl_error(CTL_EXIT_BAD_INPUT, who,
                                 "%s%s%s is not a hook point this program serves (before_vm_start, "
                                 "before_vm_migrate_destination): install it in /usr/libexec/vdsm/hooks/<hook point>/ "
                                 "or pass --hook", hook ? "'" : "", hook ? hook : "no hook point given: the program's directory",
                                 hook ? "'" : "");
        const char *path = getenv("_hook_domxml");
        if (!path || !*path)
                return ctl_error(CTL_EXIT_BAD_INPUT, who,
                                 "$_hook_domxml is not set: VDSM names the domain XML file there when it runs a hook");
        a.input = path;
        r = ctl_load_stand_ins(&a);
        if (r != 0)
                return r;
        return streq(hook, "before_vm_start") ? before_vm_start(&a) : before_vm_migrate_destination(&a);
}

/* pcinumactl revert: undo pcinuma's rewrite from its metadata mark, either
 * of a domain XML file (printed), or of a defined domain's persistent
 * definition through libvirt (--domain, with ctl-libvirt.c's connection). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctl-libvirt.h"
#include "ctl-util.h"
#include "ctl.h"
#include "domain.h"
#include "engine.h"
#include "policy.h"
#include "policy-file.h"

static const char *const who = "pcinumactl revert";

/* If pcinumad's policy still covers the domain, it will plan it again at
 * once: say how to keep it reverted. */
static void note_if_replanned(const char *policy_file, virDomainPtr dom, const char *name) {
        _cleanup_policy_ struct policy *pol = NULL;
        _cleanup_free_ char *perr = NULL;
        struct stat st;
        if (stat(policy_file, &st) == 0 && policy_load_file(policy_file, &pol, &perr) == 0) {
                char uuid[VIR_UUID_STRING_BUFLEN] = "";
                (void) virDomainGetUUIDString(dom, uuid);
                struct policy_subject subj = { .name = name, .uuid = uuid };
                struct policy_settings set;
                _cleanup_free_ char *origin = NULL;
                policy_resolve(pol, &subj, &set, &origin);
                if (set.mode != POLICY_OFF)
                        ctl_error(0, who,
                                  "note: %s gives this domain policy %s (%s), so a running pcinumad will plan it "
                                  "again; to keep it reverted, add a rule {\"match\": {\"name\": \"%s\"}, \"policy\": \"off\"} first "
                                  "and reload pcinumad.",
                                  policy_file, policy_mode_to_string(set.mode), origin, name);
        }
}

/* Undo the rewrite of a defined domain's persistent definition.  uri may
 * be NULL (libvirt's default).  Returns the exit code. */
static int revert_domain(const char *name, const char *uri, const char *policy_file) {
        virConnectPtr c = ctl_libvirt_connect(who, uri);
        if (!c)
                return CTL_EXIT_BAD_INPUT;
        int ret = CTL_EXIT_BAD_INPUT;
        char *xml = NULL, *out = NULL, *warning = NULL, *err = NULL;
        virDomainPtr dom = virDomainLookupByName(c, name);
        if (!dom) {
                /* Copy libvirt's message first: virConnectGetURI() resets
                 * the last error, which frees the message ctl_libvirt_error() points
                 * to.  (Passing both as arguments printed freed memory.) */
                _cleanup_free_ char *why = xstrdup(ctl_libvirt_error());
                _cleanup_free_ char *at = virConnectGetURI(c);
                ctl_error(0, who, "no domain '%s' at %s: %s", name, at ? at : uri ? uri : "(default)", why);
                goto out;
        }
        /* A transient domain (virsh create) has no persistent definition,
         * and defining its reverted XML would create one: the domain
         * would then outlive its next stop.  Its layout ends with it.
         * (Checked just before the define: libvirt has no compare-and-swap,
         * so a domain undefined while it runs in between would still get
         * a definition; that takes a second administrator at the same
         * moment.) */
        int persistent = virDomainIsPersistent(dom);
        if (persistent < 0) {
                ctl_error(0, who, "cannot tell whether domain '%s' is persistent: %s", name, ctl_libvirt_error());
                goto out;
        }
        if (persistent == 0) {
                ctl_error(0, who,
                          "domain '%s' is transient (created with virsh create): it has no persistent "
                          "definition to revert, and defining one would make it persistent; nothing changed. Its layout "
                          "ends when it stops; to start it without the pcinuma topology next time, create it from "
                          "'virsh dumpxml %s | pcinumactl revert -'.",
                          name, name);
                goto out;
        }
        /* SECURE: the definition written back must keep its secrets. */
        xml = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
        if (!xml) {
                ctl_error(0, who, "cannot read the definition of '%s': %s", name, ctl_libvirt_error());
                goto out;
        }
        bool changed = false;
        if (engine_revert(xml, strlen(xml), &out, &changed, &warning, &err) < 0) {
                ctl_error(0, who, "domain '%s': %s", name, err);
                goto out;
        }
        if (!changed) {
                printf("Domain %s carries no pcinuma topology; nothing to revert.\n", name);
                ret = 0;
                goto out;
        }
        virDomainPtr nd = virDomainDefineXMLFlags(c, out, VIR_DOMAIN_DEFINE_VALIDATE);
        if (!nd) {
                ctl_error(0, who, "libvirt rejected the reverted definition of '%s' (left unchanged): %s", name, ctl_libvirt_error());
                goto out;
        }
        virDomainFree(nd);
        if (warning)
                ctl_error(0, who, "warning: %s", warning);
        printf("Domain %s: the pcinuma topology was undone; the definition is back to its original layout%s.\n", name,
               virDomainIsActive(dom) == 1 ? " (the running domain keeps its layout until it restarts)" : "");

        note_if_replanned(policy_file, dom, name);
        ret = 0;
out:
        free(xml);
        free(out);
        free(warning);
        free(err);
        if (dom)
                virDomainFree(dom);
        virConnectClose(c);
        return ret;
}

/* Undo the rewrite of a domain XML file (or standard input) and print it. */
static int revert_file(const char *input) {
        _cleanup_free_ char *err = NULL, *xml = NULL, *out = NULL, *warning = NULL;
        size_t len = 0;
        bool changed = false;
        if (ctl_read_input(input, DOMAIN_XML_MAX, &xml, &len, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "%s", err);
        if (engine_revert(xml, len, &out, &changed, &warning, &err) < 0)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "%s: %s", ctl_input_name(input), err);
        fputs(out, stdout);
        if (warning)
                ctl_error(0, who, "warning: %s", warning);
        if (!changed)
                ctl_error(0, who, "no pcinuma mark in the domain; printed unchanged");
        return 0;
}

int ctl_revert(int argc, char **argv) {
        static const struct option opts[] = {
                { "domain", required_argument, NULL, 'd' },
                { "connect", required_argument, NULL, 'c' },
                CTL_OPTION_POLICY_FILE,
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *domain = NULL, *uri = NULL, *policy_file = CTL_DEFAULT_POLICY_FILE;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "hc:", opts, NULL)) >= 0) {
                switch (c) {
                case 'd':
                        domain = optarg;
                        break;
                case 'c':
                        uri = optarg;
                        break;
                case CTL_OPT_POLICY_FILE:
                        policy_file = optarg;
                        break;
                case 'h':
                        printf("Usage: pcinumactl revert FILE|-\n"
                               "       pcinumactl revert --domain NAME [-c|--connect URI] [--policy-file FILE]\n\n"
                               "Undo pcinuma's rewrite, from its metadata mark: of a domain XML file (printed),\n"
                               "or of a defined domain's persistent definition (through libvirt).  A domain\n"
                               "without a mark is left unchanged.\n\n"
                               "  --domain NAME       revert this defined domain's persistent definition\n"
                               "  -c, --connect URI   the libvirt connection (default: libvirt's default)\n"
                               "  --policy-file FILE  with --domain: the policy pcinumad runs with, to say\n"
                               "                      whether it will plan the domain again (default\n"
                               "                      " CTL_DEFAULT_POLICY_FILE ")\n"
                               "  -h, --help          show this help\n\n"
                               "Exit status: 0 reverted or unchanged, 2 bad input or libvirt error.\n");
                        return 0;
                default:
                        return CTL_EXIT_BAD_INPUT;
                }
        }
        if (domain) {
                if (optind != argc)
                        return ctl_error(CTL_EXIT_BAD_INPUT, who, "--domain takes no FILE");
                return revert_domain(domain, uri, policy_file);
        }
        if (optind != argc - 1)
                return ctl_error(CTL_EXIT_BAD_INPUT, who, "expected one FILE (or - for standard input), or --domain NAME");
        return revert_file(argv[optind]);
}

/* pcinumactl's commands that talk to libvirt (never used on the hook
 * path): revert --domain, which undoes pcinuma's rewrite of a persistent
 * definition. */
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <sys/stat.h>

#include "ctl-libvirt.h"
#include "engine.h"
#include "policy.h"

static void quiet(void *u, virErrorPtr e) {
        (void) u;
        (void) e;
}

static const char *lv_error(void) {
        const char *m = virGetLastErrorMessage();
        return m ? m : "unknown libvirt error";
}

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
                        fprintf(stderr,
                                "pcinumactl revert: note: %s gives this domain policy %s (%s), so a running pcinumad will plan it "
                                "again; to keep it reverted, add a rule {\"match\": {\"name\": \"%s\"}, \"policy\": \"off\"} first "
                                "and reload pcinumad.\n",
                                policy_file, policy_mode_to_string(set.mode), origin, name);
        }
}

int ctl_revert_domain(const char *name, const char *uri, const char *policy_file) {
        virSetErrorFunc(NULL, quiet);
        virConnectPtr c = virConnectOpen(uri);
        if (!c) {
                fprintf(stderr, "pcinumactl revert: cannot connect to libvirt at %s: %s\n", uri ? uri : "(default)", lv_error());
                return 2;
        }
        int ret = 2;
        char *xml = NULL, *out = NULL, *warning = NULL, *err = NULL;
        virDomainPtr dom = virDomainLookupByName(c, name);
        if (!dom) {
                fprintf(stderr, "pcinumactl revert: no domain '%s' at %s: %s\n", name, virConnectGetURI(c), lv_error());
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
                fprintf(stderr, "pcinumactl revert: cannot tell whether domain '%s' is persistent: %s\n", name, lv_error());
                goto out;
        }
        if (persistent == 0) {
                fprintf(stderr,
                        "pcinumactl revert: domain '%s' is transient (created with virsh create): it has no persistent "
                        "definition to revert, and defining one would make it persistent; nothing changed. Its layout "
                        "ends when it stops; to start it without the pcinuma topology next time, create it from "
                        "'virsh dumpxml %s | pcinumactl revert -'.\n",
                        name, name);
                goto out;
        }
        /* SECURE: the definition written back must keep its secrets. */
        xml = virDomainGetXMLDesc(dom, VIR_DOMAIN_XML_INACTIVE | VIR_DOMAIN_XML_SECURE);
        if (!xml) {
                fprintf(stderr, "pcinumactl revert: cannot read the definition of '%s': %s\n", name, lv_error());
                goto out;
        }
        bool changed = false;
        if (engine_revert(xml, strlen(xml), &out, &changed, &warning, &err) < 0) {
                fprintf(stderr, "pcinumactl revert: domain '%s': %s\n", name, err);
                goto out;
        }
        if (!changed) {
                printf("Domain %s carries no pcinuma topology; nothing to revert.\n", name);
                ret = 0;
                goto out;
        }
        virDomainPtr nd = virDomainDefineXMLFlags(c, out, VIR_DOMAIN_DEFINE_VALIDATE);
        if (!nd) {
                fprintf(stderr, "pcinumactl revert: libvirt rejected the reverted definition of '%s' (left unchanged): %s\n",
                        name, lv_error());
                goto out;
        }
        virDomainFree(nd);
        if (warning)
                fprintf(stderr, "pcinumactl revert: warning: %s\n", warning);
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

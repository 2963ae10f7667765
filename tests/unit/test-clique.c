/* Tests for gpudirect_clique (planner-features.c's plan_cliques(), the rewrite and
 * the mark's <pcinuma:clique> records): which GPUs share an
 * x-nv-gpudirect-clique id, the ids' order, the 16-group limit, and that
 * a revert removes exactly what the rewrite added.  Host maps built in
 * memory, domains as strings. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "domain.h"
#include "engine.h"
#include "hostmap.h"
#include "mark.h"
#include "planner.h"
#include "policy.h"
#include "rewrite.h"
#include "util.h"

#include "fake-host.h"

#define NVIDIA 0x10de
#define GPU_CLASS 0x030200
#define AUDIO_CLASS 0x040300

/* ---- the host ------------------------------------------------------------- */

/* One device to add: its BDF, vendor, class and place (host bridge, and
 * the bridges from the root port down; up[1] is the switch). */
struct dev_spec {
        char bdf[PCI_ADDR_STRLEN];
        uint16_t vendor;
        uint32_t class;
        char hb[16];
        char up[3][PCI_ADDR_STRLEN];
        unsigned n_up;
};

/* A GPU behind switch k (root port 0000:00:(k+1).0 of pci0000:00, switch
 * upstream port on bus 8k+1, downstream port 8k+2:0g.0, the GPU on bus
 * 8k+3+g). */
static struct dev_spec behind_switch(unsigned k, unsigned g, uint16_t vendor, uint32_t class) {
        struct dev_spec s = { .vendor = vendor, .class = class, .n_up = 3 };
        snprintf(s.bdf, sizeof s.bdf, "0000:%02x:00.0", 8 * k + 3 + g);
        snprintf(s.hb, sizeof s.hb, "pci0000:00");
        snprintf(s.up[0], sizeof s.up[0], "0000:00:%02x.0", k + 1);
        snprintf(s.up[1], sizeof s.up[1], "0000:%02x:00.0", 8 * k + 1);
        snprintf(s.up[2], sizeof s.up[2], "0000:%02x:%02x.0", 8 * k + 2, g);
        return s;
}

/* All devices on node 0. */
static struct hostmap *make_host(const struct dev_spec *specs, size_t n) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        for (size_t i = 0; i < n; i++)
                fake_host_add_dev(h, specs[i].bdf, 0, specs[i].class);
        hostmap_finish(h);
        for (size_t i = 0; i < n; i++) {
                struct pci_addr a;
                assert_int_equal(pci_addr_parse(specs[i].bdf, &a), 0);
                struct hostmap_device *d = NULL;
                for (size_t j = 0; j < h->n_devices; j++)
                        if (pci_addr_eq(&h->devices[j].addr, &a))
                                d = &h->devices[j];
                assert_non_null(d);
                d->vendor = specs[i].vendor;
                d->host_bridge = xstrdup(specs[i].hb);
                for (unsigned u = 0; u < specs[i].n_up; u++)
                        assert_int_equal(pci_addr_parse(specs[i].up[u], GROW(d->upstream, d->n_upstream)), 0);
        }
        return h;
}

/* A one-cell domain (node 0) holding the devices, in the given order. */
static char *make_domain(const struct dev_spec *specs, const size_t *order, size_t n) {
        struct strbuf b = {0};
        strbuf_append(&b, "<domain type='kvm'>\n  <name>clique-test</name>\n  <memory unit='MiB'>4096</memory>\n"
                          "  <vcpu placement='static'>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
                          "  <features>\n    <acpi/>\n  </features>\n"
                          "  <cpu mode='host-passthrough'>\n    <numa>\n      <cell id='0' cpus='0-1' memory='4096' unit='MiB'/>\n"
                          "    </numa>\n  </cpu>\n"
                          "  <numatune>\n    <memnode cellid='0' mode='strict' nodeset='0'/>\n  </numatune>\n"
                          "  <devices>\n    <controller type='pci' index='0' model='pcie-root'/>\n");
        for (size_t i = 0; i < n; i++) {
                struct pci_addr a;
                assert_int_equal(pci_addr_parse(specs[order ? order[i] : i].bdf, &a), 0);
                strbuf_printf(&b, "    <hostdev mode='subsystem' type='pci' managed='yes'>\n      <source>\n"
                                  "        <address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/>\n"
                                  "      </source>\n    </hostdev>\n", a.domain, a.bus, a.slot, a.func);
        }
        strbuf_append(&b, "  </devices>\n</domain>\n");
        return strbuf_steal(&b);
}

static struct plan *plan_with(const struct hostmap *h, const char *xml, bool on, struct domain **ret_d) {
        struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(domain_parse(xml, strlen(xml), &d, &err), 0);
        assert_int_equal(domain_resolve_backing(d, h, &err), 0);
        struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
        s.gpudirect_clique_auto = on;
        struct plan *p = NULL;
        assert_int_equal(planner_run(d, h, &s, &p), 0);
        assert_int_equal(p->verdict, PLAN_APPLY);
        if (ret_d)
                *ret_d = d;
        else
                domain_free(d);
        return p;
}

/* The clique id of device bdf, or -1. */
static int clique_of(const struct plan *p, const char *bdf) {
        for (size_t i = 0; i < p->n_cliques; i++)
                if (streq(p->devices[p->cliques[i].device].name, bdf))
                        return (int) p->cliques[i].id;
        return -1;
}

static bool any_warning_contains(const struct plan *p, const char *needle) {
        for (size_t i = 0; i < p->n_warnings; i++)
                if (strstr(p->warnings[i], needle))
                        return true;
        return false;
}

/* Switch 0: two NVIDIA GPUs.  Switch 1: two NVIDIA GPUs.  Switch 2: one
 * NVIDIA GPU and an NVIDIA audio function.  Switch 3: an NVIDIA GPU and
 * another vendor's GPU.  A root port without a switch: one NVIDIA GPU. */
static const struct dev_spec *mixed_specs(size_t *ret_n) {
        static struct dev_spec s[9];
        s[0] = behind_switch(0, 0, NVIDIA, GPU_CLASS);
        s[1] = behind_switch(0, 1, NVIDIA, GPU_CLASS);
        s[2] = behind_switch(1, 0, NVIDIA, GPU_CLASS);
        s[3] = behind_switch(1, 1, NVIDIA, GPU_CLASS);
        s[4] = behind_switch(2, 0, NVIDIA, GPU_CLASS);
        s[5] = behind_switch(2, 1, NVIDIA, AUDIO_CLASS);
        s[6] = behind_switch(3, 0, NVIDIA, GPU_CLASS);
        s[7] = behind_switch(3, 1, 0x1002, GPU_CLASS);
        s[8] = (struct dev_spec) { .bdf = "0000:f1:00.0", .vendor = NVIDIA, .class = GPU_CLASS, .hb = "pci0000:f0",
                                   .up = { "0000:f0:01.0" }, .n_up = 1 };
        *ret_n = 9;
        return s;
}

/* ---- tests ------------------------------------------------------------------- */

static void test_capable(void **state) {
        (void) state;
        assert_true(planner_clique_capable(0x10de, 0x030200));
        assert_true(planner_clique_capable(0x10de, 0x030000));
        assert_false(planner_clique_capable(0x10de, 0x040300));   /* the GPU's audio function */
        assert_false(planner_clique_capable(0x1002, 0x030000));   /* not NVIDIA */
        assert_false(planner_clique_capable(0x15b3, 0x020700));   /* a NIC */
}

static void test_groups(void **state) {
        (void) state;
        size_t n;
        const struct dev_spec *s = mixed_specs(&n);
        struct hostmap *h = make_host(s, n);
        _cleanup_free_ char *xml = make_domain(s, NULL, n);
        struct plan *p = plan_with(h, xml, true, NULL);

        /* Same switch -> same id; different switches -> different ids. */
        assert_int_equal(clique_of(p, s[0].bdf), 0);
        assert_int_equal(clique_of(p, s[1].bdf), 0);
        assert_int_equal(clique_of(p, s[2].bdf), 1);
        assert_int_equal(clique_of(p, s[3].bdf), 1);
        /* A GPU whose switch-mate is no NVIDIA GPU is alone: no id; nor
         * the audio function, the other vendor's GPU, the GPU without a
         * switch. */
        for (size_t i = 4; i < n; i++)
                assert_int_equal(clique_of(p, s[i].bdf), -1);
        assert_int_equal(p->n_cliques, 4);
        assert_non_null(p->clique_note);
        assert_non_null(strstr(p->clique_note, "4 GPUs in 2 cliques"));
        assert_false(any_warning_contains(p, "gpudirect_clique"));
        plan_free(p);

        /* Off (the default): nothing. */
        p = plan_with(h, xml, false, NULL);
        assert_int_equal(p->n_cliques, 0);
        assert_null(p->clique_note);
        plan_free(p);
        hostmap_free(h);
}

/* The ids follow what sits behind the host's switches, not their bus
 * numbers nor the order of the hostdevs; twin switches (the same devices
 * below them) go by the domain's order of their GPUs, which is all that
 * tells them apart without bus numbers. */
static void test_stable_order(void **state) {
        (void) state;
        size_t n;
        const struct dev_spec *s = mixed_specs(&n);
        struct hostmap *h = make_host(s, n);
        const size_t rev[] = { 8, 7, 6, 5, 4, 3, 2, 1, 0 };
        _cleanup_free_ char *xml = make_domain(s, rev, n);
        struct plan *p = plan_with(h, xml, true, NULL);
        /* switches 0 and 1 are twins: switch 1's GPUs come first now */
        assert_int_equal(clique_of(p, s[2].bdf), 0);
        assert_int_equal(clique_of(p, s[3].bdf), 0);
        assert_int_equal(clique_of(p, s[0].bdf), 1);
        assert_int_equal(clique_of(p, s[1].bdf), 1);
        /* Kept in device order for the rewrite and the mark. */
        for (size_t i = 1; i < p->n_cliques; i++)
                assert_true(p->cliques[i - 1].device < p->cliques[i].device);
        plan_free(p);
        hostmap_free(h);

        /* Switch 1 with a third GPU: not twins; either order, the same ids. */
        struct dev_spec t[5] = {
                behind_switch(0, 0, NVIDIA, GPU_CLASS), behind_switch(0, 1, NVIDIA, GPU_CLASS),
                behind_switch(1, 0, NVIDIA, GPU_CLASS), behind_switch(1, 1, NVIDIA, GPU_CLASS),
                behind_switch(1, 2, NVIDIA, GPU_CLASS),
        };
        h = make_host(t, 5);
        const size_t back[] = { 4, 3, 2, 1, 0 };
        _cleanup_free_ char *fwd_xml = make_domain(t, NULL, 5), *back_xml = make_domain(t, back, 5);
        struct plan *pf = plan_with(h, fwd_xml, true, NULL), *pb = plan_with(h, back_xml, true, NULL);
        assert_int_equal(pf->n_cliques, 5);
        assert_int_not_equal(clique_of(pf, t[0].bdf), clique_of(pf, t[2].bdf));
        for (size_t i = 0; i < 5; i++)
                assert_int_equal(clique_of(pf, t[i].bdf), clique_of(pb, t[i].bdf));
        plan_free(pf);
        plan_free(pb);
        hostmap_free(h);
}

/* 17 switches with two GPUs each: ids 0-15, the 17th group none, and a
 * warning that says so. */
static void test_too_many_groups(void **state) {
        (void) state;
        enum { N_SW = 17 };
        struct dev_spec s[2 * N_SW];
        for (unsigned k = 0; k < N_SW; k++)
                for (unsigned g = 0; g < 2; g++)
                        s[2 * k + g] = behind_switch(k, g, NVIDIA, GPU_CLASS);
        struct hostmap *h = make_host(s, 2 * N_SW);
        _cleanup_free_ char *xml = make_domain(s, NULL, 2 * N_SW);
        struct plan *p = plan_with(h, xml, true, NULL);
        for (unsigned k = 0; k < 16; k++) {
                assert_int_equal(clique_of(p, s[2 * k].bdf), (int) k);
                assert_int_equal(clique_of(p, s[2 * k + 1].bdf), (int) k);
        }
        assert_int_equal(clique_of(p, s[32].bdf), -1);
        assert_int_equal(clique_of(p, s[33].bdf), -1);
        assert_int_equal(p->n_cliques, 32);
        assert_true(any_warning_contains(p, "gpudirect_clique: 17 groups"));
        assert_true(any_warning_contains(p, "the last 1 groups get no clique id"));
        plan_free(p);
        hostmap_free(h);
}

/* The rewrite adds an alias and a <qemu:device> per GPU; the mark records
 * them; revert gives back the input's bytes. */
static void test_rewrite_revert(void **state) {
        (void) state;
        size_t n;
        const struct dev_spec *s = mixed_specs(&n);
        struct hostmap *h = make_host(s, n);
        _cleanup_free_ char *xml = make_domain(s, NULL, n);
        static const char pj[] = "{\"default\": {\"policy\": \"require\", \"gpudirect_clique\": \"auto\"}}";
        _cleanup_policy_ struct policy *pol = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(policy_parse(pj, strlen(pj), "test", &pol, &err), 0);
        _cleanup_engine_result_ struct engine_result *r = NULL;
        assert_int_equal(engine_plan(xml, strlen(xml), h, pol, NULL, &r, &err), 0);
        const char *out = r->xml;
        assert_non_null(out);
        assert_non_null(strstr(out, "<alias name=\"ua-pcinuma-0000-03-00-0\"/>"));
        assert_non_null(strstr(out, "<qemu:device alias=\"ua-pcinuma-0000-0b-00-0\">"));
        assert_non_null(strstr(out, "<qemu:property name=\"x-nv-gpudirect-clique\" type=\"unsigned\" value=\"1\"/>"));
        assert_non_null(strstr(out, "qemu-override=\"created\""));
        assert_null(strstr(out, "ua-pcinuma-0000-13-00-0"));     /* alone behind switch 2 */

        /* Planning the planned domain gives the same bytes. */
        _cleanup_engine_result_ struct engine_result *r2 = NULL;
        assert_int_equal(engine_plan(out, strlen(out), h, pol, NULL, &r2, &err), 0);
        assert_string_equal(r2->xml, out);

        _cleanup_free_ char *back = NULL, *warn = NULL;
        bool changed = false;
        assert_int_equal(engine_revert(out, strlen(out), &back, &changed, &warn, &err), 0);
        assert_true(changed);
        assert_null(strstr(back, "qemu"));
        assert_null(strstr(back, "<alias"));
        hostmap_free(h);
}

/* A forged clique record is refused: the revert would write its alias. */
static void test_mark_refuses_forged(void **state) {
        (void) state;
        static const char *const bad[] = {
                "<pcinuma:clique host='0000:03:00.0' id='16' alias='ua-x'/>",
                "<pcinuma:clique host='0000:03:00.0' id='1' alias='x'/>",
                "<pcinuma:clique host='0000:03:00.0' id='1' alias='ua-x' alias-original='a&lt;b'/>",
                "<pcinuma:clique host='nope' id='1' alias='ua-x'/>",
                "<pcinuma:clique host='0000:03:00.0' id='1' alias='ua-x' override='mine'/>",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *xml = xasprintf(
                        "<domain type='kvm'><name>x</name><metadata>"
                        "<pcinuma:topology xmlns:pcinuma='urn:pcinuma:topology:1' version='1' policy='require' migratable='no'>%s"
                        "</pcinuma:topology></metadata><devices/></domain>", bad[i]);
                _cleanup_free_ char *back = NULL, *warn = NULL, *err = NULL;
                bool changed = false;
                assert_int_equal(engine_revert(xml, strlen(xml), &back, &changed, &warn, &err), -EINVAL);
                assert_non_null(err);
                assert_non_null(strstr(err, "clique"));
        }
        assert_true(mark_is_user_alias("ua-pcinuma-0000-03-00-0"));
        assert_false(mark_is_user_alias("ua-"));
        assert_false(mark_is_user_alias("hostdev0"));
        assert_false(mark_is_user_alias("ua-a.b"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_capable),
                cmocka_unit_test(test_groups),
                cmocka_unit_test(test_stable_order),
                cmocka_unit_test(test_too_many_groups),
                cmocka_unit_test(test_rewrite_revert),
                cmocka_unit_test(test_mark_refuses_forged),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

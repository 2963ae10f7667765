/* GPUDirect clique ids across a fleet: two hosts of one topology whose
 * bus numbers order the GPUs' switches the other way round (fake-fleet.h's
 * host A, and the same host with every bus moved by 0x80, so node 1's
 * switch has the lower bus) give corresponding GPUs the same ids, and a
 * domain planned on one and migrated to the other keeps ids the
 * destination's plan gives too (its plan there changes nothing).  The
 * same holds for two hosts of one digest that differ outside the
 * fingerprint: both switches on node 0, and an empty downstream port in
 * the other switch. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine.h"
#include "fingerprint.h"
#include "hostmap.h"
#include "migrate.h"
#include "planner.h"
#include "policy.h"

#include "fake-fleet.h"

/* Host A's buses + 0x80: node 0's GPU switch moves from bus 0x11 to 0x91,
 * node 1's from 0x91 to 0x11. */
static const struct numbering swapped = { 0, 0x80, 0, false, 21 };

/* A domain with two cells on nodes 0 and 1 and four GPUs, given by bus
 * (slot 0, function 0): two of node 0's switch, then two of node 1's. */
static char *domain_xml(const unsigned bus[4]) {
        struct strbuf b = {0};
        strbuf_append(&b, "<domain type='kvm'>\n  <name>clique-fleet</name>\n"
                          "  <uuid>5a1c7e2e-3f3b-4c55-9d0e-0c6f3c2b9a11</uuid>\n"
                          "  <memory unit='MiB'>4096</memory>\n  <vcpu placement='static'>4</vcpu>\n"
                          "  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
                          "  <features>\n    <acpi/>\n  </features>\n"
                          "  <cpu mode='host-passthrough'>\n    <numa>\n"
                          "      <cell id='0' cpus='0-1' memory='2048' unit='MiB'/>\n"
                          "      <cell id='1' cpus='2-3' memory='2048' unit='MiB'/>\n"
                          "    </numa>\n  </cpu>\n"
                          "  <numatune>\n    <memnode cellid='0' mode='strict' nodeset='0'/>\n"
                          "    <memnode cellid='1' mode='strict' nodeset='1'/>\n  </numatune>\n"
                          "  <devices>\n    <controller type='pci' index='0' model='pcie-root'/>\n");
        for (size_t i = 0; i < 4; i++)
                strbuf_printf(&b, "    <hostdev mode='subsystem' type='pci' managed='yes'>\n      <source>\n"
                                  "        <address domain='0x0000' bus='0x%02x' slot='0x00' function='0x0'/>\n"
                                  "      </source>\n    </hostdev>\n", bus[i]);
        strbuf_append(&b, "  </devices>\n</domain>\n");
        return strbuf_steal(&b);
}

static struct policy *clique_policy(void) {
        /* A fleet: migration same-topology (the default refuses). */
        static const char json[] = "{\"default\": {\"policy\": \"require\", \"gpudirect_clique\": \"auto\", \"migration\": \"same-topology\"}}";
        struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(policy_parse(json, strlen(json), "clique.json", &p, &err), 0);
        return p;
}

/* The clique id of device bdf in r's plan, or -1. */
static int clique_of(const struct engine_result *r, const char *bdf) {
        const struct plan *p = r->plan;
        for (size_t i = 0; i < p->n_cliques; i++)
                if (streq(p->devices[p->cliques[i].device].name, bdf))
                        return (int) p->cliques[i].id;
        return -1;
}

/* The hosts do order the switches the other way round by bus: node 0's
 * GPUs have the lower buses on A, the higher on B. */
static void test_hosts_order_differently(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = build(host_a, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *b = build(host_a, N_A, &swapped);
        struct pci_addr a0, b0, a1, b1;
        assert_int_equal(pci_addr_parse("0000:13:00.0", &a0), 0);
        assert_int_equal(pci_addr_parse("0000:93:00.0", &a1), 0);
        b0 = a1;
        b1 = a0;
        assert_int_equal(hostmap_find_device(a, &a0)->node, 0);
        assert_int_equal(hostmap_find_device(a, &a1)->node, 1);
        assert_int_equal(hostmap_find_device(b, &b0)->node, 0);
        assert_int_equal(hostmap_find_device(b, &b1)->node, 1);
}

/* The same GPUs (by place) get the same ids on both hosts. */
static void test_same_ids(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = build(host_a, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *b = build(host_a, N_A, &swapped);
        _cleanup_policy_ struct policy *pol = clique_policy();
        const unsigned on_a[4] = { 0x13, 0x14, 0x93, 0x94 }, on_b[4] = { 0x93, 0x94, 0x13, 0x14 };
        _cleanup_free_ char *xa = domain_xml(on_a), *xb = domain_xml(on_b), *err = NULL;
        _cleanup_(engine_result_freep) struct engine_result *ra = NULL, *rb = NULL;
        assert_int_equal(engine_plan(xa, strlen(xa), a, pol, NULL, &ra, &err), 0);
        assert_int_equal(engine_plan(xb, strlen(xb), b, pol, NULL, &rb, &err), 0);
        assert_int_equal(ra->plan->n_cliques, 4);
        assert_int_equal(rb->plan->n_cliques, 4);
        /* node 0's switch first on both */
        assert_int_equal(clique_of(ra, "0000:13:00.0"), 0);
        assert_int_equal(clique_of(ra, "0000:93:00.0"), 1);
        for (size_t i = 0; i < 4; i++) {
                char da[PCI_ADDR_STRLEN], db[PCI_ADDR_STRLEN];
                snprintf(da, sizeof da, "0000:%02x:00.0", on_a[i]);
                snprintf(db, sizeof db, "0000:%02x:00.0", on_b[i]);
                assert_int_equal(clique_of(ra, da), clique_of(rb, db));
        }
}

/* Planned on A, migrated to B: B's plan of the migrated XML is the XML. */
static void test_migrated_idempotent(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = build(host_a, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *b = build(host_a, N_A, &swapped);
        _cleanup_policy_ struct policy *pol = clique_policy();
        const unsigned on_a[4] = { 0x13, 0x14, 0x93, 0x94 };
        _cleanup_free_ char *xa = domain_xml(on_a), *err = NULL;
        _cleanup_(engine_result_freep) struct engine_result *ra = NULL, *rb = NULL;
        assert_int_equal(engine_plan(xa, strlen(xa), a, pol, NULL, &ra, &err), 0);
        assert_int_equal(ra->verdict, PLAN_APPLY);
        assert_non_null(strstr(ra->xml, "x-nv-gpudirect-clique"));

        struct incoming_result m = {0};
        engine_incoming(ra->xml, strlen(ra->xml), b, pol, NULL, &m);
        assert_int_equal(m.verdict, INCOMING_ACCEPT);
        assert_int_equal(engine_plan(m.xml, strlen(m.xml), b, pol, NULL, &rb, &err), 0);
        if (!rb->already_planned)
                fail_msg("the destination's plan differs: %s", rb->stale_mark ? rb->stale_mark : strna(rb->mismatch));
        assert_string_equal(rb->xml, m.xml);
        incoming_result_done(&m);
}

/* Host A with node 1's switch root complex (pci0000:90) on node 0, so
 * that both GPU switches are on one node and only what sits below their
 * root ports orders them; with empty_port_moved, the empty downstream
 * port 92:03.0 is in node 0's other switch instead (12:03.0). */
static struct hostmap *one_node_host_nic(bool empty_port_moved, const char *nic0_driver) {
        struct dev_spec *s = copy_a();
        if (nic0_driver)
                s[find_spec(s, 0x15, 0, 0)].driver = nic0_driver;
        for (size_t k = 0; k < N_A; k++)
                if (s[k].hb_bus == 0x90)
                        s[k].node = 0;
        if (empty_port_moved) {
                struct dev_spec *port = &s[find_spec(s, 0x92, 3, 0)];
                port->bus = 0x12;
                port->hb_bus = 0x10;
                port->up[0] = 0x10;
                port->up[1] = 0x11;
        }
        struct hostmap *h = build(s, N_A, &plain);
        free(s);
        return h;
}

static struct hostmap *one_node_host(bool empty_port_moved) {
        return one_node_host_nic(empty_port_moved, NULL);
}

/* Another guest's NIC beside two GPUs (15:00.0, node 0's switch) going to
 * its VFIO variant driver as that guest starts (libvirt binds it) changes
 * no GPU's clique id: the order does not read drivers. */
static void test_variant_driver_keeps_ids(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *x = one_node_host_nic(false, NULL);
        _cleanup_hostmap_ struct hostmap *y = one_node_host_nic(false, "mlx5_vfio_pci");
        _cleanup_policy_ struct policy *pol = clique_policy();
        static const unsigned orders[2][4] = { { 0x13, 0x14, 0x93, 0x94 }, { 0x93, 0x94, 0x13, 0x14 } };
        for (size_t o = 0; o < 2; o++) {
                _cleanup_free_ char *xml = domain_xml(orders[o]), *err = NULL;
                _cleanup_(engine_result_freep) struct engine_result *rx = NULL, *ry = NULL;
                assert_int_equal(engine_plan(xml, strlen(xml), x, pol, NULL, &rx, &err), 0);
                assert_int_equal(engine_plan(xml, strlen(xml), y, pol, NULL, &ry, &err), 0);
                for (size_t i = 0; i < 4; i++) {
                        char bdf[PCI_ADDR_STRLEN];
                        snprintf(bdf, sizeof bdf, "0000:%02x:00.0", orders[o][i]);
                        if (clique_of(rx, bdf) < 0 || clique_of(rx, bdf) != clique_of(ry, bdf))
                                fail_msg("order %zu: %s has clique %d with the NIC on vfio-pci, %d on mlx5_vfio_pci",
                                         o, bdf, clique_of(rx, bdf), clique_of(ry, bdf));
                }
        }
}

/* The two hosts have one digest; each domain order gives its GPUs the
 * same ids on both (the switches look the same to the fingerprint, so
 * the domain's order decides), and a domain planned on one and migrated
 * to the other is already planned there. */
static void test_empty_port_moved(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *x = one_node_host(false);
        _cleanup_hostmap_ struct hostmap *y = one_node_host(true);
        _cleanup_fingerprint_ struct fingerprint *fx = fingerprint_new(x);
        _cleanup_fingerprint_ struct fingerprint *fy = fingerprint_new(y);
        assert_string_equal(fx->digest, fy->digest);
        _cleanup_policy_ struct policy *pol = clique_policy();
        static const unsigned orders[2][4] = { { 0x13, 0x14, 0x93, 0x94 }, { 0x93, 0x94, 0x13, 0x14 } };
        for (size_t o = 0; o < 2; o++) {
                _cleanup_free_ char *xml = domain_xml(orders[o]), *err = NULL;
                _cleanup_(engine_result_freep) struct engine_result *rx = NULL, *ry = NULL, *rm = NULL;
                assert_int_equal(engine_plan(xml, strlen(xml), x, pol, NULL, &rx, &err), 0);
                assert_int_equal(engine_plan(xml, strlen(xml), y, pol, NULL, &ry, &err), 0);
                assert_int_equal(rx->plan->n_cliques, 4);
                assert_int_equal(ry->plan->n_cliques, 4);
                for (size_t i = 0; i < 4; i++) {
                        char bdf[PCI_ADDR_STRLEN];
                        snprintf(bdf, sizeof bdf, "0000:%02x:00.0", orders[o][i]);
                        if (clique_of(rx, bdf) != clique_of(ry, bdf))
                                fail_msg("order %zu: %s has clique %d on one host, %d on the other", o, bdf,
                                         clique_of(rx, bdf), clique_of(ry, bdf));
                        /* twin switches: the domain's order */
                        assert_int_equal(clique_of(rx, bdf), (int) i / 2);
                }
                struct incoming_result m = {0};
                engine_incoming(rx->xml, strlen(rx->xml), y, pol, NULL, &m);
                assert_int_equal(m.verdict, INCOMING_ACCEPT);
                assert_int_equal(engine_plan(m.xml, strlen(m.xml), y, pol, NULL, &rm, &err), 0);
                if (!rm->already_planned)
                        fail_msg("the destination's plan differs: %s", rm->stale_mark ? rm->stale_mark : strna(rm->mismatch));
                incoming_result_done(&m);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_hosts_order_differently),
                cmocka_unit_test(test_same_ids),
                cmocka_unit_test(test_migrated_idempotent),
                cmocka_unit_test(test_empty_port_moved),
                cmocka_unit_test(test_variant_driver_keeps_ids),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

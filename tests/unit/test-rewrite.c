/* Tests for the rewriter (rewrite.h, docs/design.md §7): applying a plan to the
 * domain XML, the pcinuma mark, reverting it byte for byte; and for the
 * engine (engine.h) that ties parse, plan, rewrite and explain together. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <json.h>
#include <libxml/parser.h>

#include "domain.h"
#include "engine.h"
#include "hostmap.h"
#include "planner.h"
#include "policy.h"
#include "report.h"
#include "rewrite.h"
#include "util.h"

#include "fake-vm.h"

#define MDEV_UUID "4b20d080-1b54-4048-85b3-a6a62d165c01"

/* ---- host ------------------------------------------------------------------- */

/* Four nodes, two sockets.  10:00.0 sits on node 'node_of_10' (0 for the
 * default host), the others on fixed nodes. */
static struct hostmap *make_host(int node_of_10) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        fake_host_add_dev(h, "0000:10:00.0", node_of_10, 0x030200);
        fake_host_add_dev(h, "0000:11:00.0", 0, 0x020000);
        fake_host_add_dev(h, "0000:30:00.0", 1, 0x030200);
        fake_host_add_dev(h, "0000:50:00.0", 2, 0x010802);
        fake_host_add_dev(h, "0000:70:00.0", 3, 0x030200);
        fake_host_add_dev(h, "0000:80:00.0", -1, 0x030200);
        fake_host_add_dev(h, "0000:af:10.2", 1, 0x020000);
        struct pci_addr parent;
        assert_int_equal(pci_addr_parse("0000:10:00.0", &parent), 0);
        hostmap_add_mdev(h, MDEV_UUID, &parent);
        hostmap_finish(h);
        return h;
}

static struct hostmap *host;

static int group_setup(void **state) {
        (void) state;
        host = make_host(0);
        return 0;
}

static int group_teardown(void **state) {
        (void) state;
        host = hostmap_free(host);
        return 0;
}

/* ---- domains ------------------------------------------------------------------ */

/* Turn the single quotes of a template into double quotes, as libxml2
 * writes them, so a revert can be compared with the input byte for byte. */
static char *dq(const char *s) {
        char *r = xstrdup(s);
        for (char *p = r; *p; p++)
                if (*p == '\'')
                        *p = '"';
        return r;
}

/* A pretty-printed q35 domain, four cells on nodes 0-3 (memnode), with
 * 'metadata' after the uuid (may be "") and 'devices' after the pcie-root
 * controller.  Double quotes. */
static char *make_xml(const char *metadata, const char *devices) {
        _cleanup_free_ char *s = xasprintf(
                "<domain type='kvm'>\n"
                "  <name>rw-test</name>\n"
                "  <uuid>0b7a5b3e-8d4c-4a3f-9c55-1d7b2f1e6a01</uuid>\n"
                "%s"
                FAKE_VM_XML_BODY
                "%s"
                FAKE_VM_XML_TAIL,
                metadata, devices);
        return dq(s);
}

#define HOSTDEV(bus) FAKE_VM_HOSTDEV(bus)
#define HOSTDEV_AT(bus, gaddr) \
        "    <hostdev mode='subsystem' type='pci' managed='yes'>\n" \
        "      <source>\n" \
        "        <address domain='0x0000' bus='" bus "' slot='0x00' function='0x0'/>\n" \
        "      </source>\n" \
        "      <address type='pci' " gaddr "/>\n" \
        "    </hostdev>\n"
#define ROOT_PORT(idx, slot) \
        "    <controller type='pci' index='" idx "' model='pcie-root-port'>\n" \
        "      <model name='pcie-root-port'/>\n" \
        "      <target chassis='" idx "' port='0x1" idx "'/>\n" \
        "      <address type='pci' domain='0x0000' bus='0x00' slot='" slot "' function='0x0'/>\n" \
        "    </controller>\n"
#define NIC_AT(bus, slot) \
        "    <interface type='network'>\n" \
        "      <source network='default'/>\n" \
        "      <model type='virtio'/>\n" \
        "      <address type='pci' domain='0x0000' bus='" bus "' slot='" slot "' function='0x0'/>\n" \
        "    </interface>\n"

static struct domain *parse_ok(const char *xml) {
        struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        int r = domain_parse(xml, strlen(xml), &d, &err);
        if (r < 0)
                fail_msg("domain_parse: %d %s", r, strna(err));
        return d;
}

/* Plan xml under 'mode' and apply it; returns the planned XML.  *ret_p
 * gets the plan if non-NULL. */
static char *apply_xml(const char *xml, enum policy_mode mode, struct plan **ret_p) {
        _cleanup_domain_ struct domain *d = parse_ok(xml);
        _cleanup_free_ char *err = NULL;
        assert_int_equal(domain_resolve_backing(d, host, &err), 0);
        struct policy_settings s = { .mode = mode };
        _cleanup_plan_ struct plan *p = NULL;
        assert_int_equal(planner_run(d, host, &s, &p), 0);
        if (p->verdict != PLAN_APPLY)
                fail_msg("plan verdict %s: %s", plan_verdict_to_string(p->verdict), strna(p->reason));
        int r = rewrite_apply(d, p, &err);
        if (r < 0)
                fail_msg("rewrite_apply: %d %s", r, strna(err));
        assert_non_null(d->mark);               /* the model was reloaded */
        char *out = NULL;
        assert_int_equal(domain_format(d, &out), 0);
        if (ret_p)
                *ret_p = TAKE_PTR(p);
        return out;
}

/* Parse xml, revert it (expecting 'expected' from rewrite_revert) and
 * format. */
static char *revert_xml(const char *xml, int expected) {
        _cleanup_domain_ struct domain *d = parse_ok(xml);
        _cleanup_free_ char *err = NULL, *warning = NULL;
        int r = rewrite_revert(d, &warning, &err);
        if (r != expected)
                fail_msg("rewrite_revert: %d (expected %d) %s", r, expected, strna(err));
        if (warning)
                fail_msg("rewrite_revert warned: %s", warning);
        assert_null(d->mark);
        char *out = NULL;
        assert_int_equal(domain_format(d, &out), 0);
        return out;
}

static void assert_contains(const char *haystack, const char *needle) {
        if (!haystack || !strstr(haystack, needle))
                fail_msg("'%s' not found in:\n%s", needle, strna(haystack));
}

static void assert_not_contains(const char *haystack, const char *needle) {
        if (strstr(haystack, needle))
                fail_msg("'%s' unexpectedly found in:\n%s", needle, haystack);
}

static unsigned count_of(const char *haystack, const char *needle) {
        unsigned n = 0;
        for (const char *p = strstr(haystack, needle); p; p = strstr(p + 1, needle))
                n++;
        return n;
}

static void assert_same_xml(const char *got, const char *want) {
        if (!streq(got, want))
                fail_msg("XML differs.\n--- expected:\n%s--- got:\n%s", want, got);
}

static const struct domain_hostdev *find_hostdev(const struct domain *d, const char *bdf) {
        struct pci_addr a;
        assert_int_equal(pci_addr_parse(bdf, &a), 0);
        for (size_t i = 0; i < d->n_hostdevs; i++)
                if (d->hostdevs[i].kind == DOMAIN_HOSTDEV_PCI && pci_addr_eq(&d->hostdevs[i].host, &a))
                        return &d->hostdevs[i];
        fail_msg("hostdev %s not found", bdf);
        return NULL;
}

/* The mark's <pcinuma:device> for host 'bdf' (or mdev uuid). */
static xmlNodePtr mark_device(const struct domain *d, const char *attr, const char *value) {
        assert_non_null(d->mark);
        for (xmlNodePtr c = d->mark->children; c; c = c->next) {
                if (c->type != XML_ELEMENT_NODE || !xmlStrEqual(c->name, (const xmlChar *) "device"))
                        continue;
                _cleanup_free_ char *v = xml_prop(c, attr);
                if (v && streq(v, value))
                        return c;
        }
        fail_msg("no <pcinuma:device %s='%s'> in the mark", attr, value);
        return NULL;
}

static void assert_prop(xmlNodePtr n, const char *name, const char *value) {
        _cleanup_free_ char *v = xml_prop(n, name);
        if (!v)
                fail_msg("attribute %s missing", name);
        if (!streq(v, value))
                fail_msg("attribute %s is '%s', expected '%s'", name, v, value);
}

static void assert_addr(const struct pci_addr *a, uint32_t dom, unsigned bus, unsigned slot, unsigned fn) {
        assert_int_equal(a->domain, dom);
        assert_int_equal(a->bus, bus);
        assert_int_equal(a->slot, slot);
        assert_int_equal(a->func, fn);
}

/* ---- rewrite_apply / rewrite_revert -------------------------------------------- */

static void test_apply_and_revert(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("",
                                           HOSTDEV("0x10")
                                           HOSTDEV_AT("0x50", "domain='0x0000' bus='0x00' slot='0x05' function='0x0' multifunction='on'"));
        _cleanup_plan_ struct plan *p = NULL;
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, &p);

        /* the plan: pxbs 1 (cell 0) and 2 (cell 2); root ports 3 and 4 */
        assert_int_equal(p->n_pxbs, 2);
        assert_int_equal(p->pxbs[0].index, 1);
        assert_int_equal(p->pxbs[1].index, 2);
        assert_int_equal(p->ports[0].index, 3);
        assert_int_equal(p->ports[1].index, 4);

        /* the text */
        assert_int_equal(count_of(out, "<model name=\"pxb-pcie\"/>"), 2);
        assert_int_equal(count_of(out, "model=\"pcie-expander-bus\""), 2);
        assert_int_equal(count_of(out, "model=\"pcie-root-port\""), 2);
        assert_contains(out, "<target busNr=\"253\">");
        assert_contains(out, "<target busNr=\"251\">");
        assert_contains(out, "<node>0</node>");
        assert_contains(out, "<node>2</node>");
        assert_contains(out, "xmlns:pcinuma=\"urn:pcinuma:topology:1\"");
        assert_contains(out, "policy=\"require\"");
        assert_contains(out, "migratable=\"no\"");
        assert_not_contains(out, "<?xml");
        /* the new controllers are indented like their neighbours */
        assert_contains(out, "\n    <controller type=\"pci\" index=\"1\" model=\"pcie-expander-bus\">\n      <model name=\"pxb-pcie\"/>\n");
        assert_contains(out, "\n    <controller type=\"pci\" index=\"3\" model=\"pcie-root-port\">\n");
        /* unrelated parts are as they were */
        assert_contains(out, "    <memnode cellid=\"3\" mode=\"strict\" nodeset=\"3\"/>\n");
        assert_contains(out, "    <memballoon model=\"virtio\"/>\n  </devices>\n</domain>\n");

        /* the model of the output */
        _cleanup_domain_ struct domain *d = parse_ok(out);
        const struct domain_controller *c = domain_find_controller(d, 1);
        assert_non_null(c);
        assert_string_equal(c->model, "pcie-expander-bus");
        assert_int_equal(c->bus_nr, 253);
        assert_int_equal(c->node, 0);
        assert_true(c->has_addr);
        assert_true(pci_addr_eq(&c->addr, &p->pxbs[0].addr));
        c = domain_find_controller(d, 2);
        assert_non_null(c);
        assert_string_equal(c->model, "pcie-expander-bus");
        assert_int_equal(c->bus_nr, 251);
        assert_int_equal(c->node, 2);
        c = domain_find_controller(d, 3);
        assert_non_null(c);
        assert_string_equal(c->model, "pcie-root-port");
        assert_addr(&c->addr, 0, 1, 0, 0);
        c = domain_find_controller(d, 4);
        assert_non_null(c);
        assert_string_equal(c->model, "pcie-root-port");
        assert_addr(&c->addr, 0, 2, 0, 0);
        assert_null(domain_find_controller(d, 5));

        const struct domain_hostdev *hd = find_hostdev(d, "0000:10:00.0");
        assert_true(hd->has_guest_addr);
        assert_addr(&hd->guest, 0, 3, 0, 0);
        hd = find_hostdev(d, "0000:50:00.0");
        assert_true(hd->has_guest_addr);
        assert_addr(&hd->guest, 0, 4, 0, 0);

        /* the mark */
        assert_non_null(d->mark);
        assert_prop(d->mark, "policy", "require");
        assert_prop(d->mark, "migratable", "no");
        unsigned n_dev = 0;
        for (xmlNodePtr x = d->mark->children; x; x = x->next)
                n_dev += x->type == XML_ELEMENT_NODE && xmlStrEqual(x->name, (const xmlChar *) "device");
        assert_int_equal(n_dev, 2);
        xmlNodePtr m = mark_device(d, "host", "0000:10:00.0");
        assert_prop(m, "host-node", "0");
        assert_prop(m, "guest-cell", "0");
        _cleanup_free_ char *orig10 = xml_prop(m, "original-address");
        assert_non_null(orig10);
        m = mark_device(d, "host", "0000:50:00.0");
        assert_prop(m, "host-node", "2");
        assert_prop(m, "guest-cell", "2");
        _cleanup_free_ char *orig50 = xml_prop(m, "original-address");
        assert_non_null(orig50);
        assert_contains(orig50, "0x05");
        assert_contains(orig50, "multifunction");

        /* revert: the input, byte for byte (the address of 10:00.0 removed
         * again, that of 50:00.0 with multifunction='on' restored, the
         * created <metadata> removed) */
        _cleanup_free_ char *back = revert_xml(out, 1);
        assert_same_xml(back, in);
}

static void test_revert_pruned_port(void **state) {
        (void) state;
        /* root port 1 holds only 10:00.0 and is pruned; root port 2 holds
         * a NIC and stays */
        _cleanup_free_ char *in = make_xml("",
                                           ROOT_PORT("1", "0x02")
                                           ROOT_PORT("2", "0x03")
                                           NIC_AT("0x02", "0x00")
                                           HOSTDEV_AT("0x10", "domain='0x0000' bus='0x01' slot='0x00' function='0x0'")
                                           HOSTDEV("0x30"));
        _cleanup_plan_ struct plan *p = NULL;
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, &p);
        assert_int_equal(p->n_pruned, 1);
        assert_int_equal(p->pruned[0], 1);

        _cleanup_domain_ struct domain *d = parse_ok(out);
        assert_null(domain_find_controller(d, 1));             /* pruned */
        assert_non_null(domain_find_controller(d, 2));         /* kept */
        assert_string_equal(domain_find_controller(d, 2)->model, "pcie-root-port");
        assert_int_equal(p->first_index, 3);
        assert_string_equal(domain_find_controller(d, 3)->model, "pcie-expander-bus");
        const struct domain_hostdev *hd = find_hostdev(d, "0000:10:00.0");
        assert_int_equal(hd->guest.bus, find_hostdev(d, "0000:10:00.0")->guest.bus);
        assert_string_equal(domain_find_controller(d, hd->guest.bus)->model, "pcie-root-port");
        /* the NIC did not move */
        assert_contains(out, "<address type=\"pci\" domain=\"0x0000\" bus=\"0x02\" slot=\"0x00\" function=\"0x0\"/>\n    </interface>");

        _cleanup_free_ char *back = revert_xml(out, 1);
        assert_same_xml(back, in);
}

/* Insert 'what' after the pcie-root controller of xml. */
static char *insert_after_root(const char *xml, const char *what) {
        static const char root[] = "<controller type=\"pci\" index=\"0\" model=\"pcie-root\"/>\n";
        const char *at = strstr(xml, root);
        assert_non_null(at);
        size_t head = (size_t) (at - xml) + strlen(root);
        return xasprintf("%.*s%s%s", (int) head, xml, what, xml + head);
}

static void test_revert_refilled_index(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("",
                                           ROOT_PORT("1", "0x02")
                                           HOSTDEV_AT("0x10", "domain='0x0000' bus='0x01' slot='0x00' function='0x0'"));
        _cleanup_plan_ struct plan *p = NULL;
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, &p);
        assert_int_equal(p->n_pruned, 1);
        assert_int_equal(p->pruned[0], 1);

        /* libvirt refilled index 1 with an empty root port: it gives way */
        static const char filler[] =
                "    <controller type=\"pci\" index=\"1\" model=\"pcie-root-port\">\n"
                "      <address type=\"pci\" domain=\"0x0000\" bus=\"0x00\" slot=\"0x1a\" function=\"0x0\"/>\n"
                "    </controller>\n";
        {
                _cleanup_free_ char *refilled = insert_after_root(out, filler);
                _cleanup_free_ char *back = revert_xml(refilled, 1);
                assert_same_xml(back, in);
        }
        /* ... and then put a NIC on it: the filler stays, with a warning,
         * and 10:00.0 (which was on the original port 1) loses its address */
        {
                _cleanup_free_ char *with_nic = xasprintf("%s    <interface type=\"network\">\n"
                                                          "      <source network=\"default\"/>\n"
                                                          "      <address type=\"pci\" domain=\"0x0000\" bus=\"0x01\" slot=\"0x00\" function=\"0x0\"/>\n"
                                                          "    </interface>\n", filler);
                _cleanup_free_ char *used = insert_after_root(out, with_nic);
                _cleanup_domain_ struct domain *d = parse_ok(used);
                _cleanup_free_ char *err = NULL, *warning = NULL;
                assert_int_equal(rewrite_revert(d, &warning, &err), 1);
                assert_null(err);
                assert_non_null(warning);
                assert_contains(warning, "controller 1");
                assert_null(d->mark);
                const struct domain_controller *c = domain_find_controller(d, 1);
                assert_non_null(c);
                assert_addr(&c->addr, 0, 0, 0x1a, 0);
                const struct domain_hostdev *hd = find_hostdev(d, "0000:10:00.0");
                assert_false(hd->has_guest_addr);
                assert_int_equal(d->n_controllers, 2);       /* pcie-root and the filler */

                /* engine_revert passes the warning on */
                _cleanup_free_ char *xml = NULL, *w2 = NULL, *e2 = NULL;
                bool changed = false;
                assert_int_equal(engine_revert(used, strlen(used), &xml, &changed, &w2, &e2), 0);
                assert_true(changed);
                assert_non_null(w2);
                assert_contains(w2, "controller 1");
        }
}

static void test_revert_existing_metadata(void **state) {
        (void) state;
        static const char md[] =
                "  <metadata>\n"
                "    <app:info xmlns:app='urn:example:app'>hello</app:info>\n"
                "  </metadata>\n";
        _cleanup_free_ char *in = make_xml(md, HOSTDEV("0x10"));
        _cleanup_free_ char *out = apply_xml(in, POLICY_LEGACY, NULL);
        assert_int_equal(count_of(out, "<metadata>"), 1);
        assert_contains(out, "<app:info xmlns:app=\"urn:example:app\">hello</app:info>");
        assert_contains(out, "<pcinuma:topology");
        assert_contains(out, "policy=\"legacy\"");
        _cleanup_domain_ struct domain *d = parse_ok(out);
        assert_non_null(d->mark);
        assert_string_equal((const char *) d->mark->parent->name, "metadata");

        _cleanup_free_ char *back = revert_xml(out, 1);
        assert_same_xml(back, in);
        assert_contains(back, "<app:info");

        /* without metadata: ours is created, then removed again */
        _cleanup_free_ char *in2 = make_xml("", HOSTDEV("0x10"));
        _cleanup_free_ char *out2 = apply_xml(in2, POLICY_LEGACY, NULL);
        assert_int_equal(count_of(out2, "<metadata>"), 1);
        _cleanup_free_ char *back2 = revert_xml(out2, 1);
        assert_not_contains(back2, "metadata");
        assert_same_xml(back2, in2);

        /* an empty <metadata/> of the input stays */
        _cleanup_free_ char *in3 = make_xml("  <metadata/>\n", HOSTDEV("0x10"));
        _cleanup_free_ char *out3 = apply_xml(in3, POLICY_LEGACY, NULL);
        _cleanup_free_ char *back3 = revert_xml(out3, 1);
        _cleanup_domain_ struct domain *d3 = parse_ok(back3);
        assert_non_null(xml_child(xmlDocGetRootElement(d3->doc), "metadata"));
        assert_same_xml(back3, in3);
}

static void test_revert_mixed_devices(void **state) {
        (void) state;
        /* an mdev, a hostdev interface, a device that stays (no node) and
         * one with a decimal address */
        _cleanup_free_ char *in = make_xml("",
                                           "    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
                                           "      <source>\n"
                                           "        <address uuid='" MDEV_UUID "'/>\n"
                                           "      </source>\n"
                                           "    </hostdev>\n"
                                           "    <interface type='hostdev' managed='yes'>\n"
                                           "      <mac address='52:54:00:6d:90:02'/>\n"
                                           "      <source>\n"
                                           "        <address type='pci' domain='0x0000' bus='0xaf' slot='0x10' function='0x2'/>\n"
                                           "      </source>\n"
                                           "      <address type='pci' domain='0' bus='0' slot='7' function='0'/>\n"
                                           "    </interface>\n"
                                           HOSTDEV_AT("0x80", "domain='0x0000' bus='0x00' slot='0x08' function='0x0'")
                                           HOSTDEV("0x11"));
        _cleanup_plan_ struct plan *p = NULL;
        _cleanup_free_ char *out = apply_xml(in, POLICY_PREFERRED, &p);
        _cleanup_domain_ struct domain *d = parse_ok(out);
        assert_int_equal(d->n_hostdevs, 4);
        /* the mdev (node 0 via 10:00.0) and 11:00.0 share cell 0's pxb;
         * the interface goes to cell 1; 80:00.0 stays at 00:08.0 */
        const struct domain_hostdev *stay = find_hostdev(d, "0000:80:00.0");
        assert_addr(&stay->guest, 0, 0, 8, 0);
        const struct domain_hostdev *nic = find_hostdev(d, "0000:af:10.2");
        assert_true(nic->is_interface);
        const struct domain_controller *port = domain_find_controller(d, nic->guest.bus);
        assert_non_null(port);
        assert_string_equal(port->model, "pcie-root-port");
        const struct domain_controller *pxb = domain_find_controller(d, port->addr.bus);
        assert_non_null(pxb);
        assert_string_equal(pxb->model, "pcie-expander-bus");
        assert_int_equal(pxb->node, 1);
        xmlNodePtr m = mark_device(d, "mdev", MDEV_UUID);
        assert_prop(m, "guest-cell", "0");
        assert_prop(m, "host-node", "0");
        m = mark_device(d, "host", "0000:af:10.2");
        assert_prop(m, "guest-cell", "1");
        assert_prop(d->mark, "policy", "preferred");

        _cleanup_free_ char *back = revert_xml(out, 1);
        assert_same_xml(back, in);
}

static void test_compact_input(void **state) {
        (void) state;
        /* no indentation at all */
        static const char in[] =
                "<domain type=\"kvm\"><name>c</name><os><type arch=\"x86_64\" machine=\"q35\">hvm</type></os>"
                "<features><acpi/></features><cpu><numa><cell id=\"0\" cpus=\"0-1\" memory=\"512\" unit=\"MiB\"/></numa></cpu>"
                "<numatune><memnode cellid=\"0\" mode=\"strict\" nodeset=\"0\"/></numatune>"
                "<devices><controller type=\"pci\" index=\"0\" model=\"pcie-root\"/>"
                "<hostdev mode=\"subsystem\" type=\"pci\" managed=\"yes\"><source><address domain=\"0x0000\" bus=\"0x10\" slot=\"0x00\" function=\"0x0\"/></source></hostdev>"
                "</devices></domain>\n";
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, NULL);
        assert_contains(out, "<model name=\"pxb-pcie\"/>");
        assert_contains(out, "<node>0</node>");
        _cleanup_free_ char *back = revert_xml(out, 1);
        assert_same_xml(back, in);
}

static void test_revert_unmarked(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10"));
        _cleanup_free_ char *back = revert_xml(in, 0);
        assert_same_xml(back, in);
}

static void test_apply_twice_refused(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10"));
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, NULL);
        /* d carries a mark: rewrite_apply refuses */
        _cleanup_domain_ struct domain *d = parse_ok(out);
        assert_non_null(d->mark);
        _cleanup_domain_ struct domain *base = parse_ok(in);
        assert_int_equal(domain_resolve_backing(base, host, NULL), 0);
        struct policy_settings s = { .mode = POLICY_REQUIRE };
        _cleanup_plan_ struct plan *p = NULL;
        assert_int_equal(planner_run(base, host, &s, &p), 0);
        _cleanup_free_ char *err = NULL;
        assert_true(rewrite_apply(d, p, &err) < 0);
        assert_non_null(err);
}

/* ---- engine ------------------------------------------------------------------- */


static struct engine_result *engine_ok(const char *xml, const struct hostmap *h, enum policy_mode mode) {
        _cleanup_policy_ struct policy *pol = policy_new_default();
        struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        int rc = engine_plan(xml, strlen(xml), h, pol, &mode, &r, &err);
        if (rc < 0)
                fail_msg("engine_plan: %d %s", rc, strna(err));
        assert_non_null(r);
        assert_non_null(r->plan);
        assert_int_equal(r->settings.mode, mode);
        return r;
}

/* domain_snapshot(): a planned domain reverted in place, its snapshot
 * still reads the domain as it was (the mark, the moved devices'
 * addresses, the expander buses and root ports), and the engine's
 * comparison of the two gives "already planned". */
static void test_snapshot_survives_revert(void **state) {
        (void) state;
        _cleanup_free_ char *xml = make_xml("", HOSTDEV("0x30") HOSTDEV("0x50") NIC_AT("0x00", "0x03"));
        struct engine_result *r = engine_ok(xml, host, POLICY_REQUIRE);
        assert_true(r->changed);
        _cleanup_free_ char *planned = xstrdup(r->xml);
        engine_result_free(r);

        _cleanup_domain_ struct domain *d = parse_ok(planned);
        size_t n_ctl = d->n_controllers, n_uses = d->n_pci_uses;
        struct pci_addr g30 = find_hostdev(d, "0000:30:00.0")->guest;
        _cleanup_domain_ struct domain *snap = NULL;
        domain_snapshot(d, &snap);

        _cleanup_free_ char *err = NULL, *warning = NULL;
        assert_int_equal(rewrite_revert(d, &warning, &err), 1);
        assert_null(d->mark);
        assert_true(d->n_kept > 0);            /* what the revert took out is kept */
        _cleanup_free_ char *reverted = NULL;
        assert_int_equal(domain_format(d, &reverted), 0);
        assert_same_xml(reverted, xml);

        /* The snapshot: the input as it was, its nodes still readable. */
        assert_null(snap->doc);
        assert_non_null(snap->mark);
        assert_prop(mark_device(snap, "host", "0000:30:00.0"), "guest-cell", "1");
        assert_int_equal(snap->n_controllers, n_ctl);
        assert_int_equal(snap->n_pci_uses, n_uses);
        assert_true(n_ctl > d->n_controllers);
        const struct domain_hostdev *hd = find_hostdev(snap, "0000:30:00.0");
        assert_true(pci_addr_eq(&hd->guest, &g30));
        assert_true(hd->guest.bus != 0);
        assert_false(find_hostdev(d, "0000:30:00.0")->has_guest_addr);
        for (size_t i = 0; i < snap->n_controllers; i++)
                assert_non_null(snap->controllers[i].model);
        assert_non_null(domain_find_controller(snap, hd->guest.bus));
        assert_string_equal(domain_find_controller(snap, hd->guest.bus)->model, "pcie-root-port");
        assert_string_equal(snap->name, "rw-test");
        struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
        _cleanup_plan_ struct plan *p = NULL;
        assert_int_equal(domain_resolve_backing(d, host, &err), 0);
        assert_int_equal(planner_run(d, host, &s, &p), 0);
        assert_true(planner_matches(snap, d, p));
        assert_null(planner_mismatch(snap, d, p));

        /* The engine does the same in one call. */
        r = engine_ok(planned, host, POLICY_REQUIRE);
        assert_true(r->already_planned);
        assert_false(r->changed);
        assert_string_equal(r->xml, planned);
        engine_result_free(r);
}

static void test_engine_idempotent(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("", ROOT_PORT("1", "0x02")
                                                   HOSTDEV_AT("0x10", "domain='0x0000' bus='0x01' slot='0x00' function='0x0'")
                                                   HOSTDEV("0x50"));
        _cleanup_engine_result_ struct engine_result *r1 = engine_ok(in, host, POLICY_REQUIRE);
        assert_int_equal(r1->verdict, PLAN_APPLY);
        assert_true(r1->changed);
        assert_false(r1->already_planned);
        assert_false(r1->reverted);
        assert_non_null(r1->xml);
        assert_false(streq(r1->xml, in));
        assert_contains(r1->xml, "<pcinuma:topology");

        /* planning the planned output: byte-identical, already planned */
        _cleanup_engine_result_ struct engine_result *r2 = engine_ok(r1->xml, host, POLICY_REQUIRE);
        assert_int_equal(r2->verdict, PLAN_APPLY);
        assert_true(r2->already_planned);
        assert_false(r2->changed);
        assert_same_xml(r2->xml, r1->xml);
        /* and the plan is the same */
        assert_int_equal(r2->plan->n_pxbs, r1->plan->n_pxbs);
        assert_int_equal(r2->plan->n_pruned, 1);
        assert_int_equal(r2->plan->pxbs[0].bus_nr, r1->plan->pxbs[0].bus_nr);

        /* a third time, for good measure */
        _cleanup_engine_result_ struct engine_result *r3 = engine_ok(r2->xml, host, POLICY_REQUIRE);
        assert_true(r3->already_planned);
        assert_same_xml(r3->xml, r1->xml);

        /* the same placement under another policy: already planned, not
         * rewritten for the policy's name alone (issue 13: a policy change
         * with the same decisions never redefines); stable again */
        _cleanup_engine_result_ struct engine_result *r4 = engine_ok(r1->xml, host, POLICY_SOCKET);
        assert_int_equal(r4->verdict, PLAN_APPLY);
        assert_true(r4->already_planned);
        assert_false(r4->changed);
        assert_same_xml(r4->xml, r1->xml);
        _cleanup_engine_result_ struct engine_result *r5 = engine_ok(r4->xml, host, POLICY_SOCKET);
        assert_true(r5->already_planned);
        assert_same_xml(r5->xml, r4->xml);

        /* engine_revert of the planned output gives the input */
        _cleanup_free_ char *back = NULL;
        bool changed = false;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_revert(r1->xml, strlen(r1->xml), &back, &changed, NULL, &err), 0);
        assert_true(changed);
        assert_same_xml(back, in);
        _cleanup_free_ char *same = NULL;
        assert_int_equal(engine_revert(in, strlen(in), &same, &changed, NULL, &err), 0);
        assert_false(changed);
        assert_same_xml(same, in);
}

static void test_engine_replan_new_host(void **state) {
        (void) state;
        /* 10:00.0 moves from node 0 to node 1: re-planning the planned XML
         * gives what planning the original gives */
        _cleanup_hostmap_ struct hostmap *h1 = make_host(1);
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10") HOSTDEV("0x50"));
        _cleanup_engine_result_ struct engine_result *r0 = engine_ok(in, host, POLICY_REQUIRE);
        _cleanup_engine_result_ struct engine_result *ra = engine_ok(r0->xml, h1, POLICY_REQUIRE);
        _cleanup_engine_result_ struct engine_result *rb = engine_ok(in, h1, POLICY_REQUIRE);
        assert_int_equal(ra->verdict, PLAN_APPLY);
        assert_false(ra->already_planned);
        assert_true(ra->changed);
        assert_same_xml(ra->xml, rb->xml);
        assert_contains(ra->xml, "<node>1</node>");
        assert_not_contains(ra->xml, "<node>0</node>");
}

static void test_engine_off_reverts(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10") HOSTDEV("0x30"));
        _cleanup_engine_result_ struct engine_result *r1 = engine_ok(in, host, POLICY_LEGACY);
        assert_int_equal(r1->verdict, PLAN_APPLY);
        _cleanup_engine_result_ struct engine_result *r2 = engine_ok(r1->xml, host, POLICY_OFF);
        assert_int_equal(r2->verdict, PLAN_UNCHANGED);
        assert_true(r2->reverted);
        assert_true(r2->changed);
        assert_same_xml(r2->xml, in);

        /* a planned domain that is not eligible any more (ACPI turned
         * off): legacy skips it and undoes the earlier plan */
        {
                _cleanup_free_ char *planned = xstrdup(r1->xml);
                _cleanup_free_ char *orig = xstrdup(in);
                char *a = strstr(planned, "    <acpi/>\n");
                assert_non_null(a);
                memmove(a, a + strlen("    <acpi/>\n"), strlen(a + strlen("    <acpi/>\n")) + 1);
                a = strstr(orig, "    <acpi/>\n");
                assert_non_null(a);
                memmove(a, a + strlen("    <acpi/>\n"), strlen(a + strlen("    <acpi/>\n")) + 1);
                _cleanup_engine_result_ struct engine_result *rs = engine_ok(planned, host, POLICY_LEGACY);
                assert_int_equal(rs->verdict, PLAN_SKIP);
                assert_true(rs->reverted);
                assert_true(rs->changed);
                assert_same_xml(rs->xml, orig);
                /* require refuses it instead */
                _cleanup_engine_result_ struct engine_result *rq = engine_ok(planned, host, POLICY_REQUIRE);
                assert_int_equal(rq->verdict, PLAN_REFUSED);
                assert_null(rq->xml);
                _cleanup_free_ char *msg = report_refusal(rq);
                assert_contains(msg, "ACPI");
        }

        /* off on an unplanned domain: the input verbatim */
        _cleanup_engine_result_ struct engine_result *r3 = engine_ok(in, host, POLICY_OFF);
        assert_false(r3->changed);
        assert_false(r3->reverted);
        assert_same_xml(r3->xml, in);
}

static void test_engine_xml_decl(void **state) {
        (void) state;
        _cleanup_free_ char *body = make_xml("", HOSTDEV("0x10"));
        _cleanup_free_ char *in = xasprintf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n%s", body);
        _cleanup_engine_result_ struct engine_result *r1 = engine_ok(in, host, POLICY_REQUIRE);
        assert_true(strncmp(r1->xml, "<?xml", 5) == 0);
        _cleanup_engine_result_ struct engine_result *r2 = engine_ok(r1->xml, host, POLICY_REQUIRE);
        assert_true(r2->already_planned);
        assert_same_xml(r2->xml, r1->xml);
}

static void test_engine_default_policy(void **state) {
        (void) state;
        /* no forced mode: the built-in default (preferred, migration
         * refuse); 80:00.0 has no node: it stays */
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10") HOSTDEV("0x80"));
        _cleanup_policy_ struct policy *pol = policy_new_default();
        _cleanup_engine_result_ struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(in, strlen(in), host, pol, NULL, &r, &err), 0);
        assert_int_equal(r->settings.mode, POLICY_PREFERRED);
        assert_non_null(r->policy_origin);
        assert_int_equal(r->verdict, PLAN_APPLY);
        assert_contains(r->xml, "policy=\"preferred\"");
        assert_contains(r->xml, "migratable=\"no\"");
        /* 80:00.0 stays, with its cause, which the messages say */
        _cleanup_free_ char *causes = report_causes(r, PLAN_STAY, NULL);
        assert_contains(causes, "the host reports no NUMA node for it");
        assert_contains(causes, "0000:80:00.0");
        /* report_warnings(): the same causes, told what the plan's
         * warnings say; the REPORT_NOT_PLACED heading only when no
         * warning leads them */
        _cleanup_free_ char *stay = NULL;
        bool heading = report_warnings(r, &stay);
        assert_contains(stay, "0000:80:00.0");
        assert_true(heading == (r->plan->n_warnings == 0));
        if (!r->plan->n_warnings)
                assert_string_equal(stay, causes);
        /* the shared lookups (plan-lookup.c): the moved device's port and
         * expander bus, and the host device behind each hostdev */
        size_t moved = 0;
        for (size_t i = 0; i < r->plan->n_devices; i++) {
                const struct plan_device *pd = &r->plan->devices[i];
                const struct hostmap_device *hdev = plan_host_device(host, &r->base->hostdevs[pd->hostdev]);
                assert_non_null(hdev);
                assert_true(pci_addr_eq(&hdev->addr, &r->base->hostdevs[pd->hostdev].host));
                if (pd->action != PLAN_MOVE)
                        continue;
                moved++;
                const struct plan_port *port = plan_find_port(r->plan, pd->port_index);
                assert_non_null(port);
                assert_int_equal(port->index, pd->port_index);
                const struct plan_pxb *x = plan_find_pxb(r->plan, port->pxb_index);
                assert_non_null(x);
                assert_int_equal(x->index, port->pxb_index);
        }
        assert_int_equal(moved, 1);
        assert_null(plan_find_port(r->plan, -1));
        assert_null(plan_find_pxb(r->plan, -1));
}

static void test_engine_refused(void **state) {
        (void) state;
        /* 70:00.0 is on node 3; only cells 0 and 1 are backed (nodes 0, 1) */
        _cleanup_free_ char *tmpl = make_xml("", HOSTDEV("0x70"));
        /* drop the memnodes of cells 2 and 3 */
        char *p2 = strstr(tmpl, "    <memnode cellid=\"2\"");
        char *p4 = strstr(tmpl, "  </numatune>");
        assert_non_null(p2);
        assert_non_null(p4);
        memmove(p2, p4, strlen(p4) + 1);
        _cleanup_engine_result_ struct engine_result *r = engine_ok(tmpl, host, POLICY_REQUIRE);
        assert_int_equal(r->verdict, PLAN_REFUSED);
        assert_null(r->xml);
        _cleanup_free_ char *msg = report_refusal(r);
        assert_contains(msg, "0000:70:00.0");
        assert_contains(msg, "require");
        assert_contains(msg, "3");

        /* preferred places it on the nearest cell instead */
        _cleanup_engine_result_ struct engine_result *rp = engine_ok(tmpl, host, POLICY_PREFERRED);
        assert_int_equal(rp->verdict, PLAN_APPLY);
        assert_non_null(rp->xml);
}

static void test_engine_bad_input(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *pol = policy_new_default();
        enum policy_mode mode = POLICY_REQUIRE;
        {
                static const char bad[] = "<domain type='kvm'><name>x</name>";
                struct engine_result *r = NULL;
                _cleanup_free_ char *err = NULL;
                assert_int_equal(engine_plan(bad, strlen(bad), host, pol, &mode, &r, &err), -EINVAL);
                assert_null(r);
                assert_non_null(err);
                assert_true(strlen(err) > 0);
        }
        {
                /* a nodeset naming host node 7, which does not exist */
                _cleanup_free_ char *xml = make_xml("", HOSTDEV("0x10"));
                char *ns = strstr(xml, "nodeset=\"3\"");
                assert_non_null(ns);
                ns[9] = '7';
                struct engine_result *r = NULL;
                _cleanup_free_ char *err = NULL;
                assert_int_equal(engine_plan(xml, strlen(xml), host, pol, &mode, &r, &err), -EINVAL);
                assert_null(r);
                assert_non_null(err);
                assert_contains(err, "7");
        }
        {
                _cleanup_free_ char *back = NULL;
                bool changed = true;
                _cleanup_free_ char *err = NULL;
                assert_int_equal(engine_revert("<x", 2, &back, &changed, NULL, &err), -EINVAL);
                assert_non_null(err);
        }
}

static void test_report_explain_json(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10") HOSTDEV("0x50") HOSTDEV("0x80"));
        _cleanup_engine_result_ struct engine_result *r = engine_ok(in, host, POLICY_LEGACY);
        assert_int_equal(r->verdict, PLAN_APPLY);

        _cleanup_free_ char *ex = report_explain(r, 0);
        assert_non_null(ex);
        assert_contains(ex, "0000:10:00.0");
        assert_contains(ex, "0000:50:00.0");
        assert_contains(ex, "0000:80:00.0");
        assert_contains(ex, "root port");
        assert_contains(ex, "rw-test");
        assert_contains(ex, "legacy");

        _cleanup_free_ char *js = report_json(r);
        assert_non_null(js);
        json_object *o = json_tokener_parse(js);
        if (!o)
                fail_msg("report_json output does not parse:\n%s", js);
        json_object *v = NULL;
        assert_true(json_object_object_get_ex(o, "verdict", &v));
        assert_string_equal(json_object_get_string(v), "apply");
        assert_true(json_object_object_get_ex(o, "policy", &v));
        assert_string_equal(json_object_get_string(v), "legacy");
        assert_true(json_object_object_get_ex(o, "domain", &v));
        assert_string_equal(json_object_get_string(v), "rw-test");
        json_object *devs = NULL;
        assert_true(json_object_object_get_ex(o, "devices", &devs));
        assert_true(json_object_is_type(devs, json_type_array));
        assert_int_equal(json_object_array_length(devs), 3);
        json_object *d0 = json_object_array_get_idx(devs, 0);
        assert_true(json_object_object_get_ex(d0, "host", &v));
        assert_string_equal(json_object_get_string(v), "0000:10:00.0");
        assert_true(json_object_object_get_ex(d0, "action", &v));
        assert_string_equal(json_object_get_string(v), "move");
        json_object *d2 = json_object_array_get_idx(devs, 2);
        assert_true(json_object_object_get_ex(d2, "action", &v));
        assert_string_equal(json_object_get_string(v), "stay");
        json_object *ex_arr = NULL;
        assert_true(json_object_object_get_ex(o, "expanders", &ex_arr));
        assert_int_equal(json_object_array_length(ex_arr), 2);
        json_object_put(o);

        /* a refusal explains and serialises too */
        _cleanup_engine_result_ struct engine_result *rr = engine_ok(in, host, POLICY_REQUIRE);
        assert_int_equal(rr->verdict, PLAN_REFUSED);
        _cleanup_free_ char *js2 = report_json(rr);
        json_object *o2 = json_tokener_parse(js2);
        assert_non_null(o2);
        assert_true(json_object_object_get_ex(o2, "verdict", &v));
        assert_string_equal(json_object_get_string(v), "refuse");
        json_object_put(o2);
        _cleanup_free_ char *ex2 = report_explain(rr, 0);
        assert_contains(ex2, "0000:80:00.0");
}

/* The reports read the result and change nothing (issue 26): the path
 * fidelity report is in them only once its owner computed it, and making
 * a report leaves the plan as it was. */
static void test_report_reads_only(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10") HOSTDEV("0x50") HOSTDEV("0x80"));
        _cleanup_engine_result_ struct engine_result *r = engine_ok(in, host, POLICY_LEGACY);
        assert_int_equal(r->verdict, PLAN_APPLY);

        _cleanup_free_ char *before = report_explain(r, REPORT_ALL_PAIRS);
        _cleanup_free_ char *js_before = report_json(r);
        assert_false(r->plan->fidelity_done);
        assert_int_equal(r->plan->n_pairs, 0);
        assert_not_contains(before, "path fidelity");
        assert_not_contains(js_before, "\"fidelity\": \"");    /* no pair */

        planner_fidelity(r->plan);
        assert_int_equal(r->plan->n_pairs, 3);
        _cleanup_free_ char *after = report_explain(r, REPORT_ALL_PAIRS);
        assert_contains(after, "\npath fidelity: ");
        assert_contains(after, "(of 3 pairs; host -> guest path type)");
        _cleanup_free_ char *js_after = report_json(r);
        assert_contains(js_after, "\"fidelity\": \"");
        /* A second report is the first one again. */
        _cleanup_free_ char *again = report_explain(r, REPORT_ALL_PAIRS);
        assert_string_equal(after, again);
}

/* ---- review findings (issue 13): the mark and revert never corrupt a domain ---- */

/* Replace the first 'from' in s with 'to'. */
static char *replace1(const char *s, const char *from, const char *to) {
        const char *at = strstr(s, from);
        if (!at)
                fail_msg("'%s' not found in:\n%s", from, s);
        return xasprintf("%.*s%s%s", (int) (at - s), s, to, at + strlen(from));
}

/* The document must parse again (well-formed, no stray prefix). */
static void assert_well_formed(const char *xml) {
        _cleanup_xmldoc_ xmlDocPtr doc = xmlReadMemory(xml, (int) strlen(xml), "t.xml", NULL,
                                                        XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
        if (!doc)
                fail_msg("not well-formed:\n%s", xml);
}

#define QEMU_URI "http://libvirt.org/schemas/domain/qemu/1.0"

/* A domain as pcinuma planned it with OVMF mmio64 (the mark written for
 * 'how' = created or added), plus 'qemu_extra' (the user's qemu elements
 * after the command line) and 'user_args' (the user's own arguments in the
 * command line, before pcinuma's). */
static char *ovmf_planned(const char *how, const char *user_args, const char *qemu_extra) {
        _cleanup_free_ char *mark = xasprintf(
                "  <metadata>\n"
                "    <pcinuma:topology xmlns:pcinuma='urn:pcinuma:topology:1' version='1' policy='require' migratable='no'"
                " metadata-created='yes' pcihole64-original='none' ovmf-mmio64='%s' qemu-ns-added='yes'>\n"
                "      <pcinuma:expander controller='1' guest-cell='0' host-nodes='0' busNr='253'/>\n"
                "      <pcinuma:device host='0000:10:00.0' class='0x030200' host-node='0' host-socket='0' guest-cell='0' controller='2' original-address='none'/>\n"
                "    </pcinuma:topology>\n"
                "  </metadata>\n", how);
        _cleanup_free_ char *base = make_xml(mark,
                "    <controller type='pci' index='1' model='pcie-expander-bus'>\n"
                "      <model name='pxb-pcie'/>\n"
                "      <target busNr='253'>\n"
                "        <node>0</node>\n"
                "      </target>\n"
                "      <address type='pci' domain='0x0000' bus='0x00' slot='0x02' function='0x0'/>\n"
                "    </controller>\n"
                "    <controller type='pci' index='2' model='pcie-root-port'>\n"
                "      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>\n"
                "    </controller>\n"
                HOSTDEV_AT("0x10", "domain='0x0000' bus='0x02' slot='0x00' function='0x0'"));
        _cleanup_free_ char *b1 = replace1(base, "<domain type=\"kvm\">", "<domain xmlns:qemu=\"" QEMU_URI "\" type=\"kvm\">");
        _cleanup_free_ char *b2 = replace1(b1, "<controller type=\"pci\" index=\"0\" model=\"pcie-root\"/>",
                                           "<controller type=\"pci\" index=\"0\" model=\"pcie-root\">\n"
                                           "      <pcihole64 unit=\"KiB\">2147483648</pcihole64>\n"
                                           "    </controller>");
        _cleanup_free_ char *tail = xasprintf("  </devices>\n"
                                              "  <qemu:commandline>\n%s"
                                              "    <qemu:arg value=\"-fw_cfg\"/>\n"
                                              "    <qemu:arg value=\"name=opt/ovmf/X-PciMmio64Mb,string=2097152\"/>\n"
                                              "  </qemu:commandline>\n%s", user_args, qemu_extra);
        return replace1(b2, "  </devices>\n", tail);
}

/* Review finding: the mmio64 revert freed xmlns:qemu while the user's
 * <qemu:capabilities> still used it (corrupt XML, a use-after-free), and
 * the 'created' case deleted the user's own arguments. */
static void test_revert_ovmf_keeps_user_qemu(void **state) {
        (void) state;
        static const char caps[] =
                "  <qemu:capabilities>\n"
                "    <qemu:del capability=\"usb-redir\"/>\n"
                "  </qemu:capabilities>\n";
        static const char override[] =
                "  <qemu:override>\n"
                "    <qemu:device alias=\"ua-disk\">\n"
                "      <qemu:frontend>\n"
                "        <qemu:property name=\"serial\" type=\"string\" value=\"x\"/>\n"
                "      </qemu:frontend>\n"
                "    </qemu:device>\n"
                "  </qemu:override>\n";
        static const char user_arg[] = "    <qemu:arg value=\"-S\"/>\n";
        const char *hows[] = { "created", "added" };
        for (size_t h = 0; h < 2; h++) {
                /* nothing edited: all of it goes, the namespace too */
                {
                        _cleanup_free_ char *in = ovmf_planned(hows[h], "", "");
                        _cleanup_free_ char *back = revert_xml(in, 1);
                        assert_well_formed(back);
                        assert_not_contains(back, "X-PciMmio64Mb");
                        assert_not_contains(back, "-fw_cfg");
                        if (streq(hows[h], "created")) {
                                assert_not_contains(back, "qemu:");
                        } else {
                                /* 'added': the user's (now empty) command line stays */
                                assert_contains(back, "<qemu:commandline/>");
                                assert_contains(back, "xmlns:qemu=");
                        }
                        assert_not_contains(back, "<pcihole64");   /* pcihole64-original='none': pcinuma added it */
                }
                /* the user's capabilities, override and argument added since */
                for (int variant = 0; variant < 3; variant++) {
                        _cleanup_free_ char *in = ovmf_planned(hows[h], variant == 2 ? user_arg : "",
                                                               variant == 0 ? caps : variant == 1 ? override : "");
                        _cleanup_free_ char *back = revert_xml(in, 1);
                        assert_well_formed(back);
                        assert_contains(back, "<domain xmlns:qemu=\"" QEMU_URI "\"");
                        assert_not_contains(back, "X-PciMmio64Mb");
                        assert_not_contains(back, "-fw_cfg");
                        if (variant == 0)
                                assert_contains(back, caps);
                        else if (variant == 1)
                                assert_contains(back, override);
                        else
                                assert_contains(back, "  <qemu:commandline>\n    <qemu:arg value=\"-S\"/>\n  </qemu:commandline>\n");
                        _cleanup_domain_ struct domain *d = parse_ok(back);
                        xmlNodePtr root = xmlDocGetRootElement(d->doc);
                        for (xmlNodePtr c = root->children; c; c = c->next)
                                if (c->type == XML_ELEMENT_NODE && c->ns) {
                                        assert_string_equal((const char *) c->ns->prefix, "qemu");
                                        assert_string_equal((const char *) c->ns->href, QEMU_URI);
                                }
                }
        }
}

/* Planning an OVMF domain whose <qemu:commandline> declares its own
 * namespace adds the arguments there, and revert takes exactly them. */
static void test_ovmf_local_namespace(void **state) {
        (void) state;
        _cleanup_free_ char *in = ovmf_planned("added", "    <qemu:arg value=\"-S\"/>\n", "");
        /* the namespace on the command line itself, not on the root */
        _cleanup_free_ char *a = replace1(in, "<domain xmlns:qemu=\"" QEMU_URI "\" type=\"kvm\">", "<domain type=\"kvm\">");
        _cleanup_free_ char *b = replace1(a, "<qemu:commandline>", "<qemu:commandline xmlns:qemu=\"" QEMU_URI "\">");
        _cleanup_free_ char *c = replace1(b, "qemu-ns-added=\"yes\"", "qemu-ns-added=\"no\"");
        _cleanup_free_ char *back = revert_xml(c, 1);
        assert_well_formed(back);
        assert_contains(back, "<qemu:commandline xmlns:qemu=\"" QEMU_URI "\">\n    <qemu:arg value=\"-S\"/>\n  </qemu:commandline>");
        assert_not_contains(back, "-fw_cfg");
}

/* Review finding: revert deleted a root port pcinuma added even when the
 * user had since put another device on it (libvirt then silently moved
 * the device).  Now the port and its expander bus stay, with a warning
 * naming both. */
static void test_revert_keeps_used_port(void **state) {
        (void) state;
        _cleanup_free_ char *in = make_xml("", HOSTDEV("0x10") HOSTDEV("0x50"));
        _cleanup_plan_ struct plan *p = NULL;
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, &p);
        int port = p->devices[0].port_index;
        int pxb = p->ports[0].pxb_index;
        assert_true(port > 0);
        /* a NIC on pcinuma's root port (libvirt would have put it there) */
        _cleanup_free_ char *nic = xasprintf("    <interface type=\"network\">\n"
                                             "      <mac address=\"52:54:00:aa:bb:cc\"/>\n"
                                             "      <source network=\"default\"/>\n"
                                             "      <address type=\"pci\" domain=\"0x0000\" bus=\"0x%02x\" slot=\"0x00\" function=\"0x0\"/>\n"
                                             "    </interface>\n"
                                             "    <memballoon", port);
        _cleanup_free_ char *edited = replace1(out, "    <memballoon", nic);
        _cleanup_domain_ struct domain *d = parse_ok(edited);
        _cleanup_free_ char *err = NULL, *warning = NULL;
        assert_int_equal(rewrite_revert(d, &warning, &err), 1);
        assert_null(err);
        assert_non_null(warning);
        _cleanup_free_ char *want = xasprintf("PCI controller %d (pcie-root-port) that pcinuma added was kept", port);
        assert_contains(warning, want);
        assert_contains(warning, "<interface> 52:54:00:aa:bb:cc");
        /* the port and its expander bus stay; the hostdevs went back */
        assert_non_null(domain_find_controller(d, port));
        assert_string_equal(domain_find_controller(d, port)->model, "pcie-root-port");
        assert_non_null(domain_find_controller(d, pxb));
        assert_string_equal(domain_find_controller(d, pxb)->model, "pcie-expander-bus");
        assert_false(find_hostdev(d, "0000:10:00.0")->has_guest_addr);
        assert_false(find_hostdev(d, "0000:50:00.0")->has_guest_addr);
        /* the other (unused) port and expander bus went */
        int other_port = p->devices[1].port_index;
        assert_null(domain_find_controller(d, other_port));
        assert_int_equal(d->n_controllers, 3);   /* pcie-root, the kept pxb and port */
        assert_null(d->mark);
        _cleanup_free_ char *back = NULL;
        assert_int_equal(domain_format(d, &back), 0);
        assert_contains(back, "52:54:00:aa:bb:cc");

        /* planning it again keeps the NIC where it is */
        struct engine_result *r = engine_ok(edited, host, POLICY_REQUIRE);
        assert_int_equal(r->verdict, PLAN_APPLY);
        assert_non_null(r->revert_warning);
        _cleanup_domain_ struct domain *d2 = parse_ok(r->xml);
        bool nic_there = false;
        for (size_t i = 0; i < d2->n_pci_uses; i++)
                nic_there = nic_there || (xml_is(d2->pci_uses[i].owner, "interface") && d2->pci_uses[i].addr.bus == port);
        assert_true(nic_there);
        engine_result_free(r);
}

/* Review finding: the mark was formatted as text, so a ' in a guest
 * address attribute made planning fail.  Now any value round-trips. */
static void test_mark_quotes(void **state) {
        (void) state;
        _cleanup_free_ char *base = make_xml("", HOSTDEV_AT("0x10", "domain='0x0000' bus='0x00' slot='0x05' function='0x0' QUOTE")
                                                 HOSTDEV("0x50"));
        _cleanup_free_ char *in = replace1(base, "QUOTE", "x-note=\"it's &amp; &lt;ok&gt; &quot;q&quot; 100%\"");
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, NULL);
        assert_well_formed(out);
        assert_contains(out, "x-note=");
        _cleanup_domain_ struct domain *d = parse_ok(out);
        _cleanup_free_ char *orig = xml_prop(mark_device(d, "host", "0000:10:00.0"), "original-address");
        assert_contains(orig, "it's");
        _cleanup_free_ char *back = revert_xml(out, 1);
        assert_same_xml(back, in);
        /* and through the engine */
        struct engine_result *r = engine_ok(in, host, POLICY_REQUIRE);
        assert_true(r->changed);
        _cleanup_free_ char *back2 = NULL, *err = NULL;
        bool changed = false;
        assert_int_equal(engine_revert(r->xml, strlen(r->xml), &back2, &changed, NULL, &err), 0);
        assert_same_xml(back2, in);
        engine_result_free(r);
}

/* Revert of a forged mark: refused with an error naming the element, and
 * the document is left exactly as it was. */
static void expect_forged_refused(const char *xml, const char *want_error) {
        _cleanup_domain_ struct domain *d = parse_ok(xml);
        _cleanup_free_ char *before = NULL, *after = NULL, *err = NULL, *warning = NULL;
        assert_int_equal(domain_format(d, &before), 0);
        assert_int_equal(rewrite_revert(d, &warning, &err), -EINVAL);
        assert_non_null(err);
        assert_contains(err, want_error);
        assert_contains(err, "nothing was changed");
        assert_int_equal(domain_format(d, &after), 0);
        assert_same_xml(after, before);

        _cleanup_free_ char *out = NULL, *err2 = NULL;
        bool changed = false;
        assert_int_equal(engine_revert(xml, strlen(xml), &out, &changed, NULL, &err2), -EINVAL);
        assert_null(out);
        assert_contains(err2, want_error);
        _cleanup_policy_ struct policy *pol = policy_new_default();
        enum policy_mode mode = POLICY_REQUIRE;
        struct engine_result *r = NULL;
        _cleanup_free_ char *err3 = NULL;
        assert_int_equal(engine_plan(xml, strlen(xml), host, pol, &mode, &r, &err3), -EINVAL);
        assert_null(r);
        assert_contains(err3, want_error);
}

/* Review finding: <pcinuma:removed> restored any element a forged mark
 * held.  Only <controller type='pci'> comes back now. */
static void test_revert_forged_removed(void **state) {
        (void) state;
        /* a real mark with one pruned root port, to forge from */
        _cleanup_free_ char *in = make_xml("", ROOT_PORT("1", "0x02")
                                                   HOSTDEV_AT("0x10", "domain='0x0000' bus='0x01' slot='0x00' function='0x0'"));
        _cleanup_free_ char *out = apply_xml(in, POLICY_REQUIRE, NULL);
        assert_contains(out, "<pcinuma:removed controller=\"1\" position=\"2\">&lt;controller type=\"pci\" index=\"1\" model=\"pcie-root-port\"&gt;");
        const char *open = strstr(out, "<pcinuma:removed controller=\"1\" position=\"2\">");
        const char *close = strstr(open, "</pcinuma:removed>");
        assert_non_null(close);
        const char *body = open + strlen("<pcinuma:removed controller=\"1\" position=\"2\">");

        static const struct {
                const char *body;
                const char *error;
        } forged[] = {
                { "&lt;disk type=\"file\" device=\"disk\"&gt;&lt;source file=\"/etc/shadow\"/&gt;&lt;target dev=\"vdz\"/&gt;&lt;/disk&gt;", "holds <disk>" },
                { "&lt;hostdev mode=\"subsystem\" type=\"pci\"/&gt;", "holds <hostdev>" },
                { "&lt;controller type=\"usb\" index=\"1\"/&gt;", "holds <controller>" },
                { "&lt;controller type=\"pci\" index=\"1\" model=\"pcie-root-port\"/&gt;&lt;disk/&gt;", "holds <disk>" },
                { "&lt;controller type=\"pci\" index=\"7\" model=\"pcie-root-port\"/&gt;", "holds <controller index='7'>" },
                { "&lt;controller type=\"pci\" index=\"1\" model=\"sneaky\"/&gt;", "unknown model 'sneaky'" },
                { "just text", "holds text" },
                { "", "does not hold well-formed XML" },
                { "&lt;controller", "does not hold well-formed XML" },
                /* one the domain would not load with (fuzz-revert finding) */
                { "&lt;controller type=\"pci\" index=\"1\" model=\"pcie-root-port\"&gt;&lt;address type=\"pci\" bus=\"0x1ff\"/&gt;&lt;/controller&gt;",
                  "holds a controller that is not valid" },
                /* an undeclared prefix inside (fuzz-revert finding) */
                { "&lt;controller type=\"pci\" index=\"1\" model=\"pcie-root-port\"&gt;&lt;qemu:x/&gt;&lt;/controller&gt;",
                  "holds a controller with an undeclared prefix (qemu:x)" },
        };
        for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
                _cleanup_free_ char *xml = xasprintf("%.*s%s%s", (int) (body - out), out, forged[i].body, close);
                expect_forged_refused(xml, forged[i].error);
        }
        /* elements that are not part of a mark at all */
        _cleanup_free_ char *x1 = replace1(out, "<pcinuma:removed ", "<pcinuma:disk/><pcinuma:removed ");
        expect_forged_refused(x1, "<pcinuma:disk> is not part of a pcinuma mark");
        _cleanup_free_ char *x2 = replace1(out, "<pcinuma:removed ", "<hostdev mode=\"subsystem\"/><pcinuma:removed ");
        expect_forged_refused(x2, "<hostdev> is not part of a pcinuma mark");
        /* values the revert would write back */
        _cleanup_free_ char *x3 = replace1(out, "migratable=\"no\"", "migratable=\"no\" pcihole64-original=\"1&lt;x\"");
        expect_forged_refused(x3, "pcihole64-original='1<x' is not a size");
        _cleanup_free_ char *x4 = replace1(out, "migratable=\"no\"", "migratable=\"no\" ovmf-mmio64=\"everything\"");
        expect_forged_refused(x4, "ovmf-mmio64='everything'");
        _cleanup_free_ char *x5 = replace1(out, "<pcinuma:removed ", "<pcinuma:managed host=\"0000:10:00.0\" original=\"maybe\"/><pcinuma:removed ");
        expect_forged_refused(x5, "<pcinuma:managed original='maybe'>");
        _cleanup_free_ char *x6 = replace1(out, "original-address=\"type=pci domain=0x0000", "original-address=\"type=pci domain=0x00disk00");
        expect_forged_refused(x6, "is not a PCI address");
        /* a QName is no attribute name for an address (fuzz-revert finding:
         * "functio:" came back as an undeclared prefix) */
        _cleanup_free_ char *x7 = replace1(out, "function=0x0\"", "functio:=0x0\"");
        expect_forged_refused(x7, "bad attribute name in original-address");
        /* a %-escape that decodes to a control character, or to bytes that
         * are not UTF-8, would write XML that does not parse (fuzz-revert
         * finding on the merged tree: "x=%13") */
        _cleanup_free_ char *x8 = replace1(out, "function=0x0\"", "function=0x0 x=%13&amp;\"");
        expect_forged_refused(x8, "a control character in original-address");
        _cleanup_free_ char *x9 = replace1(out, "function=0x0\"", "function=0x0 x=%00\"");
        expect_forged_refused(x9, "a control character in original-address");
        _cleanup_free_ char *x10 = replace1(out, "function=0x0\"", "function=0x0 x=%ff%fe\"");
        expect_forged_refused(x10, "does not decode to characters XML allows");
        /* well-formed UTF-8 of characters XML does not allow (review finding) */
        _cleanup_free_ char *x11 = replace1(out, "function=0x0\"", "function=0x0 x=%EF%BF%BE\"");
        expect_forged_refused(x11, "does not decode to characters XML allows");
        _cleanup_free_ char *x12 = replace1(out, "function=0x0\"", "function=0x0 x=%ED%A0%80\"");
        expect_forged_refused(x12, "does not decode to characters XML allows");
        /* and one that is fine stays fine: the genuine revert below, and a
         * non-ASCII value */
        _cleanup_free_ char *x13 = replace1(out, "function=0x0\"", "function=0x0 x=%C3%A9\"");
        _cleanup_free_ char *ok13 = revert_xml(x13, 1);
        assert_non_null(strstr(ok13, "x=\"\xc3\xa9\""));

        /* the genuine mark still reverts */
        _cleanup_free_ char *back = revert_xml(out, 1);
        assert_same_xml(back, in);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_apply_and_revert),
                cmocka_unit_test(test_revert_pruned_port),
                cmocka_unit_test(test_revert_refilled_index),
                cmocka_unit_test(test_revert_existing_metadata),
                cmocka_unit_test(test_revert_mixed_devices),
                cmocka_unit_test(test_compact_input),
                cmocka_unit_test(test_revert_unmarked),
                cmocka_unit_test(test_snapshot_survives_revert),
                cmocka_unit_test(test_apply_twice_refused),
                cmocka_unit_test(test_engine_idempotent),
                cmocka_unit_test(test_engine_replan_new_host),
                cmocka_unit_test(test_engine_off_reverts),
                cmocka_unit_test(test_engine_xml_decl),
                cmocka_unit_test(test_engine_default_policy),
                cmocka_unit_test(test_engine_refused),
                cmocka_unit_test(test_engine_bad_input),
                cmocka_unit_test(test_report_explain_json),
                cmocka_unit_test(test_report_reads_only),
                cmocka_unit_test(test_revert_ovmf_keeps_user_qemu),
                cmocka_unit_test(test_ovmf_local_namespace),
                cmocka_unit_test(test_revert_keeps_used_port),
                cmocka_unit_test(test_mark_quotes),
                cmocka_unit_test(test_revert_forged_removed),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

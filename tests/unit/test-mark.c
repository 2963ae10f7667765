/* Tests for the metadata mark (mark.h): build, write, serialise, locate and
 * parse back (every field); the builder and the matcher on a real plan of
 * the fixture VM (fake-vm.h); the original-address codec; and the parser's
 * and the locator's refusals of malformed and forged marks. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <libxml/parser.h>

#include "decide.h"
#include "domain.h"
#include "migrate.h"
#include "engine.h"
#include "fingerprint.h"
#include "mark.h"
#include "policy.h"
#include "report.h"
#include "sha256.h"
#include "util.h"

#include "fake-vm.h"

#define OPEN_MARK "<pcinuma:topology xmlns:pcinuma='" PCINUMA_TOPOLOGY_NS "' version='1' policy='require' migratable='no'"

static xmlDocPtr read_doc(const char *xml) {
        xmlDocPtr doc = xmlReadMemory(xml, (int) strlen(xml), "test.xml", NULL, XML_PARSE_NONET);
        assert_non_null(doc);
        return doc;
}

static char *dump_doc(xmlDocPtr doc) {
        xmlChar *buf = NULL;
        int len = 0;
        xmlDocDumpMemory(doc, &buf, &len);
        char *s = xstrndup((const char *) buf, (size_t) len);
        xmlFree(buf);
        return s;
}

static xmlNodePtr child(xmlNodePtr parent, const char *name) {
        for (xmlNodePtr c = parent->children; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE && streq((const char *) c->name, name))
                        return c;
        return NULL;
}

/* A mark with every field set, written, serialised, read back: the same. */
static void test_round_trip(void **state) {
        (void) state;
        struct mark m = {
                .version = xstrdup("1"), .policy = xstrdup("socket"), .migratable = xstrdup("no"),
                .migratable_reason = xstrdup("0000:3b:00.0 is not placed & \"why\""),
                .metadata_created = xstrdup("yes"), .single_function_slots = xstrdup("0:1f 0:02"),
                .distances = xstrdup("host"), .pcie_root_created = xstrdup("yes"),
                .pcihole64_original = xstrdup("1024"), .pcihole64_original_unit = xstrdup("GiB"),
                .ovmf_mmio64 = xstrdup("added"), .qemu_ns_added = xstrdup("yes"),
        };
        *GROW(m.expanders, m.n_expanders) = (struct mark_expander) { 10, 1, xstrdup("1"), 32 };
        *GROW(m.devices, m.n_devices) = (struct mark_device) {
                .host = xstrdup("0000:30:00.0"), .class = 0x030200, .host_node = 1, .host_socket = 0,
                .guest_cell = 1, .controller = 11, .original_address = xstrdup("type=pci domain=0x0000 bus=0x05 slot=0x00 function=0x0"),
        };
        *GROW(m.devices, m.n_devices) = (struct mark_device) {
                .mdev = xstrdup("4b20d080-1b54-4048-85b3-a6a62d165c01"), .host_node = 0, .host_socket = -1,
                .guest_cell = 0, .controller = 12, .original_address = xstrdup("none"),
        };
        *GROW(m.controllers, m.n_controllers) = (struct mark_controller) { 13, xstrdup("pcie-switch-upstream-port") };
        *GROW(m.managed, m.n_managed) = (struct mark_managed) { xstrdup("0000:30:00.0"), xstrdup("mlx5_vfio_pci"), xstrdup("absent") };
        *GROW(m.removed, m.n_removed) = (struct mark_removed) {
                .controller = 5, .position = 3, .xml = xstrdup("<controller type=\"pci\" index=\"5\" model=\"pcie-root-port\"/>"),
        };

        xmlDocPtr doc = read_doc("<domain><name>x</name><metadata/><devices><controller type='pci' index='0' model='pcie-root'/></devices></domain>");
        xmlNodePtr root = xmlDocGetRootElement(doc);
        xmlAddChild(child(root, "metadata"), mark_write(&m, doc, "", ""));
        _cleanup_free_ char *text = dump_doc(doc);
        xmlFreeDoc(doc);
        /* Escaped on output: the removed controller is text. */
        assert_non_null(strstr(text, "&lt;controller type=\"pci\" index=\"5\""));

        doc = read_doc(text);
        root = xmlDocGetRootElement(doc);
        xmlNodePtr node = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(xml_locate_mark(root, &node, &err), 0);
        assert_true(xml_is_mark(node));
        struct mark p = {0};
        assert_int_equal(mark_parse(node, child(root, "devices"), &p, &err), 0);
        assert_null(err);

        assert_string_equal(p.version, "1");
        assert_string_equal(p.policy, "socket");
        assert_string_equal(p.migratable, "no");
        assert_string_equal(p.migratable_reason, "0000:3b:00.0 is not placed & \"why\"");
        assert_string_equal(p.metadata_created, "yes");
        assert_string_equal(p.single_function_slots, "0:1f 0:02");
        assert_string_equal(p.distances, "host");
        assert_string_equal(p.pcie_root_created, "yes");
        assert_string_equal(p.pcihole64_original, "1024");
        assert_string_equal(p.pcihole64_original_unit, "GiB");
        assert_string_equal(p.ovmf_mmio64, "added");
        assert_string_equal(p.qemu_ns_added, "yes");

        assert_int_equal(p.n_expanders, 1);
        assert_int_equal(p.expanders[0].controller, 10);
        assert_int_equal(p.expanders[0].guest_cell, 1);
        assert_string_equal(p.expanders[0].host_nodes, "1");
        assert_int_equal(p.expanders[0].bus_nr, 32);

        assert_int_equal(p.n_devices, 2);
        assert_string_equal(p.devices[0].host, "0000:30:00.0");
        assert_null(p.devices[0].mdev);
        assert_int_equal(p.devices[0].class, 0x030200);
        assert_int_equal(p.devices[0].host_node, 1);
        assert_int_equal(p.devices[0].host_socket, 0);
        assert_int_equal(p.devices[0].guest_cell, 1);
        assert_int_equal(p.devices[0].controller, 11);
        assert_string_equal(p.devices[0].original_address, m.devices[0].original_address);
        assert_null(p.devices[1].host);
        assert_string_equal(p.devices[1].mdev, "4b20d080-1b54-4048-85b3-a6a62d165c01");
        assert_int_equal(p.devices[1].class, 0);
        assert_int_equal(p.devices[1].host_socket, -1);
        assert_int_equal(p.devices[1].controller, 12);
        assert_string_equal(p.devices[1].original_address, "none");

        assert_int_equal(p.n_controllers, 1);
        assert_int_equal(p.controllers[0].index, 13);
        assert_string_equal(p.controllers[0].model, "pcie-switch-upstream-port");

        assert_int_equal(p.n_managed, 1);
        assert_string_equal(p.managed[0].host, "0000:30:00.0");
        assert_string_equal(p.managed[0].driver, "mlx5_vfio_pci");
        assert_string_equal(p.managed[0].original, "absent");

        assert_int_equal(p.n_removed, 1);
        assert_int_equal(p.removed[0].controller, 5);
        assert_int_equal(p.removed[0].position, 3);
        assert_non_null(p.removed[0].elem);
        assert_string_equal((const char *) p.removed[0].elem->name, "controller");
        _cleanup_free_ char *model = xml_prop(p.removed[0].elem, "model");
        assert_string_equal(model, "pcie-root-port");

        /* Document order of the expander, device and controller records. */
        assert_int_equal(p.n_order, 4);
        assert_int_equal(p.order[0].kind, MARK_EXPANDER);
        assert_int_equal(p.order[1].kind, MARK_DEVICE);
        assert_int_equal(p.order[2].kind, MARK_DEVICE);
        assert_int_equal(p.order[2].i, 1);
        assert_int_equal(p.order[3].kind, MARK_CONTROLLER);

        mark_done(&p);
        assert_null(p.policy);
        assert_int_equal(p.n_devices, 0);
        mark_done(&m);
        xmlFreeDoc(doc);
}

/* The builder and the matcher on a real plan: the mark the rewrite wrote
 * matches the plan; a device in another cell, a missing expander, a
 * switch the plan does not have, or a distances record do not. */
static void test_build_and_match(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        enum policy_mode mode = POLICY_REQUIRE;
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;

        /* The default switches: migration refuse, so the mark says no. */
        _cleanup_(engine_result_freep) struct engine_result *def = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, NULL, &mode, &def, &err), 0);
        struct mark bd;
        mark_build(def->plan, def->base, &bd);
        assert_string_equal(bd.migratable, "no");
        assert_string_equal(bd.migratable_reason, "the policy says migration: refuse");
        mark_done(&bd);

        _cleanup_policy_ struct policy *fleet = fake_vm_policy_fleet("require");
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, fleet, NULL, &r, &err), 0);
        assert_int_equal(r->verdict, PLAN_APPLY);

        struct mark b;
        mark_build(r->plan, r->base, &b);
        assert_string_equal(b.policy, "require");
        assert_string_equal(b.migratable, "yes");     /* migration: same-topology, the fleet's opt-in */
        assert_non_null(b.fingerprint);
        assert_int_equal(strlen(b.fingerprint), 64);
        assert_non_null(b.devices[0].position);
        assert_string_equal(b.devices[0].vendor_device, "0000:0000");  /* the fake host gives no ids */
        assert_int_equal(b.n_expanders, 4);
        assert_int_equal(b.n_devices, 4);
        assert_string_equal(b.devices[0].host, "0000:10:00.0");
        assert_int_equal(b.devices[0].guest_cell, 0);
        assert_int_equal(b.devices[3].host_node, 3);
        assert_int_equal(b.devices[3].host_socket, 1);
        assert_null(b.devices[0].original_address);     /* the rewrite's to fill in */
        assert_int_equal(b.n_removed, r->plan->n_pruned);

        _cleanup_domain_ struct domain *cur = NULL;
        assert_int_equal(domain_parse(r->xml, strlen(r->xml), &cur, &err), 0);
        assert_non_null(cur->mark);
        struct mark m;
        assert_int_equal(mark_parse(cur->mark, cur->devices, &m, &err), 0);
        assert_int_equal(m.n_devices, b.n_devices);
        for (size_t i = 0; i < m.n_devices; i++) {
                assert_string_equal(m.devices[i].host, b.devices[i].host);
                assert_int_equal(m.devices[i].guest_cell, b.devices[i].guest_cell);
                assert_int_equal(m.devices[i].controller, b.devices[i].controller);
                assert_string_equal(m.devices[i].original_address, "none");
        }
        assert_true(mark_matches(&m, r->plan, r->base, cur));
        assert_true(mark_matches(&b, r->plan, r->base, cur));

        /* A mark from before migration: same-topology (migratable="no")
         * does not match the same-topology policy's plan, so it is planned again. */
        free(m.migratable);
        m.migratable = xstrdup("no");
        assert_false(mark_matches(&m, r->plan, r->base, cur));
        free(m.migratable);
        m.migratable = xstrdup("yes");
        assert_true(mark_matches(&m, r->plan, r->base, cur));

        m.devices[0].guest_cell = 2;
        assert_false(mark_matches(&m, r->plan, r->base, cur));
        m.devices[0].guest_cell = -1;
        assert_false(mark_matches(&m, r->plan, r->base, cur));
        m.devices[0].guest_cell = 0;
        assert_true(mark_matches(&m, r->plan, r->base, cur));

        m.n_expanders--;
        assert_false(mark_matches(&m, r->plan, r->base, cur));
        m.n_expanders++;

        m.n_controllers = 1;    /* a switch port the plan does not have */
        assert_false(mark_matches(&m, r->plan, r->base, cur));
        m.n_controllers = 0;

        bool dist = r->plan->add_distances;
        char *saved = m.distances;
        m.distances = dist ? NULL : (char *) "host";
        assert_false(mark_matches(&m, r->plan, r->base, cur));
        m.distances = saved;
        assert_true(mark_matches(&m, r->plan, r->base, cur));

        mark_done(&m);
        mark_done(&b);
}

/* The reason of a mismatch, checked and freed: it contains 'want'. */
static void assert_reason(char *why, const char *want) {
        if (!why || !strstr(why, want))
                fail_msg("mismatch reason '%s' does not say '%s'", why ? why : "(none)", want);
        free(why);
}

/* mark_mismatch() names the part of the mark that is stale: each part
 * changed alone on a mark that matches gives its own phrase. */
static void test_mismatch_reasons(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        enum policy_mode mode = POLICY_REQUIRE;
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, NULL, &mode, &r, &err), 0);
        assert_int_equal(r->verdict, PLAN_APPLY);
        _cleanup_domain_ struct domain *cur = NULL;
        assert_int_equal(domain_parse(r->xml, strlen(r->xml), &cur, &err), 0);
        _cleanup_(mark_done) struct mark m = {0};
        assert_int_equal(mark_parse(cur->mark, cur->devices, &m, &err), 0);
        struct plan *p = r->plan;
        assert_null(mark_mismatch(&m, p, r->base, cur));

        /* Devices: another cell, one the mark lacks, one the plan does not move. */
        m.devices[1].guest_cell = 3;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "device set differs: 0000:30:00.0: guest cell 3 in the mark, 1 planned");
        m.devices[1].guest_cell = 1;
        char *host = m.devices[1].host;
        m.devices[1].host = (char *) "0000:31:00.0";
        assert_reason(mark_mismatch(&m, p, r->base, cur),
                      "device set differs: the plan moves 0000:30:00.0 to guest cell 1, the mark does not list it");
        m.devices[1].host = host;
        *GROW(m.devices, m.n_devices) = (struct mark_device) { .host = xstrdup("0000:99:00.0"), .guest_cell = 0 };
        assert_reason(mark_mismatch(&m, p, r->base, cur), "device set differs: the mark lists 0000:99:00.0, the plan does not move it");
        free(m.devices[--m.n_devices].host);
        m.n_expanders--;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "expander buses: 3 in the mark, 4 planned");
        m.n_expanders++;
        assert_null(mark_mismatch(&m, p, r->base, cur));

        /* migratable against the policy's migration setting (refuse, the
         * default, wrote "no"). */
        assert_string_equal(m.migratable, "no");
        p->settings.migration_same_topology = true;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "migratable: mark says no, policy migration=same-topology");
        p->settings.migration_same_topology = false;
        char *mig = m.migratable;
        m.migratable = NULL;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "migratable: mark says nothing (an earlier pcinuma), policy migration=refuse");
        m.migratable = mig;

        /* The NCCL topology file's SHA-256. */
        char *sha = m.nccl_topology_sha256, *arg = p->nccl_arg;
        m.nccl_topology_sha256 = (char *) "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        p->nccl_arg = (char *) "name=opt/pcinuma/nccl-topo.xml,string=<system/>";
        char hex[SHA256_HEX_SIZE];
        sha256_hex(p->nccl_arg, strlen(p->nccl_arg), hex);
        _cleanup_free_ char *want = xasprintf("NCCL topology file differs (sha256 0011223344556677..., planned %.16s...)", hex);
        assert_reason(mark_mismatch(&m, p, r->base, cur), want);
        m.nccl_topology_sha256 = NULL;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "NCCL topology file: planned, not in the mark");
        p->nccl_arg = NULL;
        m.nccl_topology_sha256 = (char *) "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        assert_reason(mark_mismatch(&m, p, r->base, cur), "NCCL topology file: in the mark, not planned");
        m.nccl_topology_sha256 = sha;
        p->nccl_arg = arg;
        assert_null(mark_mismatch(&m, p, r->base, cur));

        /* GPUDirect cliques: another id, one planned and not marked, one
         * marked and not planned. */
        struct plan_clique *pc = p->cliques;
        size_t npc = p->n_cliques;
        struct plan_clique planned[] = { { .device = 0, .id = 1 }, { .device = 1, .id = 1 } };
        p->cliques = planned;
        p->n_cliques = 2;
        struct mark_clique *mc = m.cliques;
        size_t nmc = m.n_cliques;
        struct mark_clique marked[] = { { .host = (char *) "0000:10:00.0", .id = 2 }, { .host = (char *) "0000:30:00.0", .id = 1 } };
        m.cliques = marked;
        m.n_cliques = 2;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "GPUDirect clique of 0000:10:00.0: 2 in the mark, 1 planned");
        marked[0].id = 1;
        assert_null(mark_mismatch(&m, p, r->base, cur));
        m.n_cliques = 1;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "GPUDirect clique of 0000:30:00.0: none in the mark, 1 planned");
        m.n_cliques = 2;
        p->n_cliques = 1;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "GPUDirect clique of 0000:30:00.0: 1 in the mark, none planned");
        p->n_cliques = 2;
        marked[0].host = (char *) "0000:30:00.0";
        marked[1].host = (char *) "0000:10:00.0";
        assert_reason(mark_mismatch(&m, p, r->base, cur), "GPUDirect cliques: the mark lists the GPUs in another order");
        p->cliques = pc;
        p->n_cliques = npc;
        m.cliques = mc;
        m.n_cliques = nmc;

        /* The other switches: distances, switch ports, managed, pcihole64. */
        char *dist = m.distances;
        m.distances = p->add_distances ? NULL : (char *) "host";
        assert_reason(mark_mismatch(&m, p, r->base, cur), p->add_distances ? "host distances: planned, not in the mark"
                                                                          : "host distances: in the mark, not planned");
        m.distances = dist;
        m.n_controllers = 1;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "guest switch ports: 1 in the mark, 0 planned");
        m.n_controllers = 0;
        size_t nman = p->n_managed;
        p->n_managed = nman + 1;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "managed='no' hostdevs:");
        p->n_managed = nman;
        uint64_t hole = p->pcihole64_kib;
        p->pcihole64_kib = 1024;
        assert_reason(mark_mismatch(&m, p, r->base, cur), "pcihole64:");
        p->pcihole64_kib = hole;
        assert_null(mark_mismatch(&m, p, r->base, cur));
        assert_true(mark_matches(&m, p, r->base, cur));
}

/* The engine carries the reason: a stale mark's part is in stale_mark,
 * in the mismatch the hook reports and in the explanation. */
static void test_engine_stale_reason(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        _cleanup_free_ char *err = NULL;
        _cleanup_policy_ struct policy *same = NULL, *refuse = NULL;
        static const char same_json[] = "{\"default\": {\"policy\": \"require\", \"migration\": \"same-topology\"}}";
        static const char refuse_json[] = "{\"default\": {\"policy\": \"require\", \"migration\": \"refuse\"}}";
        assert_int_equal(policy_parse(same_json, strlen(same_json), "a.json", &same, &err), 0);
        assert_int_equal(policy_parse(refuse_json, strlen(refuse_json), "b.json", &refuse, &err), 0);
        _cleanup_(engine_result_freep) struct engine_result *r = NULL, *again = NULL, *stale = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, same, NULL, &r, &err), 0);
        assert_null(r->stale_mark);             /* no mark in the input */
        assert_int_equal(engine_plan(r->xml, strlen(r->xml), h, same, NULL, &again, &err), 0);
        assert_true(again->already_planned);
        assert_null(again->stale_mark);
        assert_int_equal(engine_plan(r->xml, strlen(r->xml), h, refuse, NULL, &stale, &err), 0);
        assert_false(stale->already_planned);
        assert_string_equal(stale->stale_mark, "migratable: mark says yes, policy migration=refuse");
        assert_non_null(strstr(stale->mismatch, "the pcinuma mark is stale (written for policy require): migratable: mark says yes"));
        _cleanup_free_ char *ex = report_explain(stale, 0);
        assert_non_null(strstr(ex, "\nstale mark:  migratable: mark says yes, policy migration=refuse\n"));
        _cleanup_free_ char *js = report_json(stale);
        assert_non_null(strstr(js, "\"stale_mark\": \"migratable: mark says yes, policy migration=refuse\""));
}

/* A PCI hostdev that stays on pcie.0 (here: one the host does not have,
 * under legacy) has no position in the mark: the plan says
 * migratable="no" and why, naming it; planning again matches; a mark
 * that says "yes" for it is stale; the migrate hook refuses it as marked,
 * with the mark's reason.  The same domain without it stays "yes". */
static void test_migratable_device_stays(void **state) {
        (void) state;
        static const char xml[] =
                FAKE_VM_XML_HEAD
                FAKE_VM_HOSTDEV("0x10")
                FAKE_VM_HOSTDEV("0x30")
                FAKE_VM_HOSTDEV("0xee")
                FAKE_VM_XML_TAIL;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("legacy");
        _cleanup_(engine_result_freep) struct engine_result *r = NULL, *again = NULL, *stale = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(xml, strlen(xml), h, pol, NULL, &r, &err), 0);
        assert_int_equal(r->verdict, PLAN_APPLY);
        _cleanup_free_ char *why = NULL;
        assert_false(mark_migratable(r->plan, r->base, &why));
        assert_non_null(strstr(why, "0000:ee:00.0 is not placed under an expander bus"));
        assert_non_null(strstr(r->xml, "migratable=\"no\" migratable-reason=\"0000:ee:00.0 is not placed"));
        _cleanup_free_ char *ex = report_explain(r, 0);
        assert_non_null(strstr(ex, "migration: same-topology, but marked migratable=\"no\": 0000:ee:00.0 is not placed"));

        /* The match agrees with the builder. */
        assert_int_equal(engine_plan(r->xml, strlen(r->xml), h, pol, NULL, &again, &err), 0);
        assert_true(again->already_planned);
        char *at = strstr(r->xml, "migratable=\"no\"");
        assert_non_null(at);
        _cleanup_free_ char *fixed = xasprintf("%.*smigratable=\"yes\"%s", (int) (at - r->xml), r->xml,
                                               at + strlen("migratable=\"no\""));
        assert_int_equal(engine_plan(fixed, strlen(fixed), h, pol, NULL, &stale, &err), 0);
        assert_false(stale->already_planned);
        assert_non_null(strstr(stale->stale_mark, "migratable: mark says yes, the plan says no: 0000:ee:00.0 is not placed"));

        /* The gate refuses it as marked, saying why. */
        struct incoming_result mr = {0};
        engine_incoming(r->xml, strlen(r->xml), h, pol, NULL, &mr);
        assert_int_equal(mr.verdict, INCOMING_REFUSE_MARKED);
        assert_non_null(strstr(mr.reason, "0000:ee:00.0 is not placed"));
        incoming_result_done(&mr);
        struct proto_request req = {
                .type = PROTO_REQUEST_HOOK,
                .argv = { (char *) FAKE_VM_NAME, (char *) "migrate", (char *) "begin", (char *) "-" },
                .xml = r->xml,
                .xml_len = strlen(r->xml),
        };
        struct decision d;
        decide_hook(&req, h, pol, NULL, NULL, &d);
        assert_int_equal(d.verdict, DECIDE_REFUSE);
        assert_non_null(strstr(d.message, "marked migratable=\"no\" (0000:ee:00.0 is not placed under an expander bus"));
        decision_done(&d);

        /* Every device placed: migratable. */
        _cleanup_(engine_result_freep) struct engine_result *all = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, pol, NULL, &all, &err), 0);
        assert_true(mark_migratable(all->plan, all->base, NULL));
        assert_non_null(strstr(all->xml, "migratable=\"yes\""));
        assert_null(strstr(all->xml, "migratable-reason"));
}

/* A moved PCI hostdev the topology fingerprint does not count (a USB
 * controller, class 0c0330, even on vfio-pci) has no position in the
 * mark: migratable="no", naming it and its class; planning again matches;
 * the migrate hook refuses it as marked.  A QAT (0b40) there counts:
 * "yes", with a position. */
static void test_migratable_not_fingerprinted(void **state) {
        (void) state;
        static const char xml[] =
                FAKE_VM_XML_HEAD
                FAKE_VM_HOSTDEV("0x10")
                FAKE_VM_HOSTDEV("0x60")
                FAKE_VM_XML_TAIL;
        static const uint32_t classes[] = { 0x0c0330, 0x0b4000 };
        for (size_t i = 0; i < ELEMENTSOF(classes); i++) {
                struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
                fake_host_add_dev(h, "0000:10:00.0", 0, 0x030200);
                fake_host_add_dev(h, "0000:60:00.0", 2, classes[i])->driver = xstrdup("vfio-pci");
                hostmap_finish(h);
                _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("legacy");
                _cleanup_(engine_result_freep) struct engine_result *r = NULL, *again = NULL;
                _cleanup_free_ char *err = NULL, *why = NULL;
                assert_int_equal(engine_plan(xml, strlen(xml), h, pol, NULL, &r, &err), 0);
                assert_int_equal(r->verdict, PLAN_APPLY);
                bool moved = false;
                for (size_t k = 0; k < r->plan->n_devices; k++)
                        moved |= streq(r->plan->devices[k].name, "0000:60:00.0") && r->plan->devices[k].action == PLAN_MOVE;
                assert_true(moved);
                const char *dev = strstr(r->xml, "host=\"0000:60:00.0\"");
                assert_non_null(dev);
                const char *end = strchr(dev, '>');
                bool has_position = strstr(dev, "position=") && strstr(dev, "position=") < end;
                if (classes[i] == 0x0b4000) {
                        assert_true(mark_migratable(r->plan, r->base, NULL));
                        assert_non_null(strstr(r->xml, "migratable=\"yes\""));
                        assert_true(has_position);
                        hostmap_free(h);
                        continue;
                }
                assert_false(has_position);
                assert_false(mark_migratable(r->plan, r->base, &why));
                assert_string_equal(why, "0000:60:00.0: class 0x0c0330 is not one the topology fingerprint covers, so "
                                         "the mark records no position a destination could map");
                assert_non_null(strstr(r->xml, "migratable=\"no\" migratable-reason=\"0000:60:00.0: class 0x0c0330 is not one"));
                assert_int_equal(engine_plan(r->xml, strlen(r->xml), h, pol, NULL, &again, &err), 0);
                assert_true(again->already_planned);
                struct incoming_result mr = {0};
                engine_incoming(r->xml, strlen(r->xml), h, pol, NULL, &mr);
                assert_int_equal(mr.verdict, INCOMING_REFUSE_MARKED);
                assert_non_null(strstr(mr.reason, "class 0x0c0330 is not one the topology fingerprint covers"));
                incoming_result_done(&mr);
                hostmap_free(h);
        }
}

/* original-address: attributes with '%' and white space survive. */
static void test_address_codec(void **state) {
        (void) state;
        xmlDocPtr doc = read_doc("<address type='pci' weird='a b%c&#9;d' bus='0x05'/>");
        xmlNodePtr a = xmlDocGetRootElement(doc);
        _cleanup_free_ char *s = mark_address_encode(a);
        assert_string_equal(s, "type=pci weird=a%20b%25c%09d bus=0x05");
        xmlNodePtr b = xmlNewDocNode(doc, NULL, (const xmlChar *) "address", NULL);
        xmlSetProp(b, (const xmlChar *) "stale", (const xmlChar *) "x");
        _cleanup_free_ char *err = NULL;
        assert_int_equal(mark_address_decode(b, s, &err), 0);
        _cleanup_free_ char *t = mark_address_encode(b);
        assert_string_equal(t, s);
        _cleanup_free_ char *w = xml_prop(b, "weird");
        assert_string_equal(w, "a b%c\td");
        _cleanup_free_ char *stale = xml_prop(b, "stale");
        assert_null(stale);
        xmlFreeNode(b);
        xmlFreeDoc(doc);
}

/* Parse a domain whose <metadata> holds 'mark'; the parser must refuse it
 * with a message holding 'want' and leave *ret untouched. */
static void assert_refused(const char *mark, bool with_devices, const char *want) {
        _cleanup_free_ char *xml = xasprintf("<domain><metadata>%s</metadata>%s</domain>", mark,
                                             with_devices ? "<devices><controller type='pci' index='0' model='pcie-root'/></devices>" : "");
        xmlDocPtr doc = read_doc(xml);
        xmlNodePtr root = xmlDocGetRootElement(doc), node = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(xml_locate_mark(root, &node, &err), 0);
        assert_non_null(node);
        struct mark m = {0};
        int r = mark_parse(node, child(root, "devices"), &m, &err);
        if (r != -EINVAL || !err || !strstr(err, want))
                fail_msg("mark %s: got %d, '%s'; wanted -EINVAL and '%s'", mark, r, strna(err), want);
        /* One line, whatever the mark held. */
        if (strpbrk(err, "\n\r\t"))
                fail_msg("mark %s: the error '%s' holds a control character", mark, err);
        assert_null(m.policy);
        assert_null(m.devices);
        xmlFreeDoc(doc);
}

static void test_refusals(void **state) {
        (void) state;
        static const struct { const char *mark; const char *want; } cases[] = {
                { OPEN_MARK "><pcinuma:bogus/></pcinuma:topology>", "<pcinuma:bogus> is not part of a pcinuma mark" },
                { OPEN_MARK "><device xmlns='urn:other'/></pcinuma:topology>", "<device> is not part of a pcinuma mark" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' original-address='type=pci bus=%01'/></pcinuma:topology>",
                  "a control character in original-address" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' original-address='1x=3'/></pcinuma:topology>",
                  "bad attribute name in original-address" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' original-address='novalue'/></pcinuma:topology>",
                  "bad original-address 'novalue'" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' original-address='type=pci domain=0x00disk00'/></pcinuma:topology>",
                  "original-address='type=pci domain=0x00disk00' is not a PCI address" },
                { OPEN_MARK "><pcinuma:managed host='0000:10:00.0' original='maybe'/></pcinuma:topology>",
                  "<pcinuma:managed original='maybe'>: not yes, no or absent" },
                { OPEN_MARK "><pcinuma:removed controller='3'/></pcinuma:topology>", "<removed> without a valid controller and position" },
                { OPEN_MARK "><pcinuma:removed controller='300' position='1'/></pcinuma:topology>",
                  "<removed> without a valid controller and position" },
                { OPEN_MARK "><pcinuma:removed controller='3' position='1'>&lt;disk type='file'/&gt;</pcinuma:removed></pcinuma:topology>",
                  "holds <disk>, not one <controller type='pci'>" },
                { OPEN_MARK "><pcinuma:removed controller='3' position='1'>hello</pcinuma:removed></pcinuma:topology>",
                  "holds text, not one <controller type='pci'>" },
                { OPEN_MARK "><pcinuma:removed controller='3' position='1'>&lt;controller type='pci' index='3' model='pcie-root-port'/&gt;&lt;disk/&gt;</pcinuma:removed></pcinuma:topology>",
                  "holds <disk>, not one <controller type='pci'>" },
                { OPEN_MARK "><pcinuma:removed controller='3' position='1'>&lt;controller type='pci' index='3' model='pcie-bogus'/&gt;</pcinuma:removed></pcinuma:topology>",
                  "a PCI controller of unknown model 'pcie-bogus'" },
                { OPEN_MARK "><pcinuma:removed controller='3' position='1'>&lt;controller type='pci' index='4' model='pcie-root-port'/&gt;</pcinuma:removed></pcinuma:topology>",
                  "holds <controller index='4'>" },
                { OPEN_MARK "><pcinuma:removed controller='3' position='1'>&lt;controller</pcinuma:removed></pcinuma:topology>",
                  "does not hold well-formed XML" },
                { OPEN_MARK " pcihole64-original='12x'/>", "pcihole64-original='12x' is not a size" },
                { OPEN_MARK " pcihole64-original='12' pcihole64-original-unit='1'/>", "pcihole64-original-unit='1' is not a unit" },
                { OPEN_MARK " ovmf-mmio64='maybe'/>", "ovmf-mmio64='maybe' is neither created nor added" },
                /* Values that reach messages: each refused, named, escaped. */
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0&#10;pcinumad: FORGED LINE'/></pcinuma:topology>",
                  "<pcinuma:device host='0000:10:00.0\\npcinumad: FORGED LINE'>: not a PCI address" },
                { OPEN_MARK "><pcinuma:device mdev='4b20d080-1b54-4048-85b3-a6a62d165c01&#10;x'/></pcinuma:topology>",
                  "<pcinuma:device mdev='4b20d080-1b54-4048-85b3-a6a62d165c01\\nx'>: not a UUID" },
                { OPEN_MARK "><pcinuma:device mdev='4b20d080-1b54-4048-85b3'/></pcinuma:topology>",
                  "<pcinuma:device mdev='4b20d080-1b54-4048-85b3'>: not a UUID" },
                { OPEN_MARK "><pcinuma:device mdev='4b20d080-1b54-4048-85b3-a6a62d165c01' mdev-type='nvidia-35&#13;x'/></pcinuma:topology>",
                  "<pcinuma:device mdev-type='nvidia-35\\rx'>: not a name" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' driver='vfio-pci&#10;x'/></pcinuma:topology>",
                  "<pcinuma:device driver='vfio-pci\\nx'>: not a driver name" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' driver='vfio pci'/></pcinuma:topology>",
                  "<pcinuma:device driver='vfio pci'>: not a driver name" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' position='rc:0011@none&#9;x'/></pcinuma:topology>",
                  "<pcinuma:device position='rc:0011@none\\tx'>: not a topology position" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' vendor-device='10de:2330&#10;'/></pcinuma:topology>",
                  "<pcinuma:device vendor-device='10de:2330\\n'>: not a vendor:device pair" },
                { OPEN_MARK "><pcinuma:managed host='0000:10:00.0&#10;x' original='yes'/></pcinuma:topology>",
                  "<pcinuma:managed host='0000:10:00.0\\nx'>: not a PCI address" },
                { OPEN_MARK "><pcinuma:managed host='0000:10:00.0' driver='x&#127;' original='yes'/></pcinuma:topology>",
                  "<pcinuma:managed driver='x\\x7f'>: not a driver name" },
                { "<pcinuma:topology xmlns:pcinuma='" PCINUMA_TOPOLOGY_NS "' version='1' policy='require' migratable='yes&#10;x'/>",
                  "<pcinuma:topology migratable='yes\\nx'>: not yes or no" },
                { "<pcinuma:topology xmlns:pcinuma='" PCINUMA_TOPOLOGY_NS "' version='1' policy='require&#10;x' migratable='no'/>",
                  "<pcinuma:topology policy='require\\nx'>: not a policy mode name" },
                { OPEN_MARK " nccl-topology-sha256='0011&#10;'/>", "<pcinuma:topology nccl-topology-sha256='0011\\n'>: not a SHA-256" },
                { OPEN_MARK " fingerprint='" "0011223344556677889900112233445566778899001122334455667788990011" "x'/>",
                  "fingerprint='00112233445566778899001122334455667788990011223344556677889900" "11x'>: not a SHA-256" },
                { OPEN_MARK " fingerprint-version='2&#10;'/>", "<pcinuma:topology fingerprint-version='2\\n'>: not a version number" },
                { OPEN_MARK " ovmf-mmio64='a&#10;b'/>", "ovmf-mmio64='a\\nb' is neither created nor added" },
                { OPEN_MARK "><pcinuma:device host='0000:10:00.0' original-address='x=1&#10; novalue'/></pcinuma:topology>",
                  "bad original-address 'x=1\\n novalue'" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_refused(cases[i].mark, true, cases[i].want);
        /* A removed controller needs a <devices> to go back into. */
        assert_refused(OPEN_MARK "><pcinuma:removed controller='3' position='1'>&lt;controller type='pci' index='3' model='pcie-root-port'/&gt;</pcinuma:removed></pcinuma:topology>",
                       false, "the domain has no <devices>");
}

/* The same removed controller, well formed, is accepted (the refusals
 * above are about what they say, not about the fixture). */
static void test_accepts_valid_removed(void **state) {
        (void) state;
        const char *xml = "<domain><metadata>" OPEN_MARK "><pcinuma:removed controller='3' position='1'>"
                          "&lt;controller type='pci' index='3' model='pcie-root-port'/&gt;</pcinuma:removed></pcinuma:topology>"
                          "</metadata><devices><controller type='pci' index='0' model='pcie-root'/></devices></domain>";
        xmlDocPtr doc = read_doc(xml);
        xmlNodePtr root = xmlDocGetRootElement(doc), node = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(xml_locate_mark(root, &node, &err), 0);
        struct mark m;
        assert_int_equal(mark_parse(node, child(root, "devices"), &m, &err), 0);
        assert_int_equal(m.n_removed, 1);
        assert_int_equal(m.removed[0].controller, 3);
        assert_int_equal(m.removed[0].position, 1);
        mark_done(&m);
        xmlFreeDoc(doc);
}

/* Driver names the host map keeps (any printable name without blank or
 * '/', as an out-of-tree module may have) are accepted back: pcinuma must
 * parse every mark it writes. */
static void test_accepts_driver_names(void **state) {
        (void) state;
        const char *xml = "<domain><metadata>" OPEN_MARK "><pcinuma:device host='0000:10:00.0' driver='drv:1+x(b)'/>"
                          "<pcinuma:managed host='0000:10:00.0' driver='nvidia+x' original='yes'/></pcinuma:topology>"
                          "</metadata><devices><controller type='pci' index='0' model='pcie-root'/></devices></domain>";
        xmlDocPtr doc = read_doc(xml);
        xmlNodePtr root = xmlDocGetRootElement(doc), node = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(xml_locate_mark(root, &node, &err), 0);
        struct mark m;
        if (mark_parse(node, child(root, "devices"), &m, &err) != 0)
                fail_msg("refused: %s", strna(err));
        assert_int_equal(m.n_devices, 1);
        assert_string_equal(m.devices[0].driver, "drv:1+x(b)");
        assert_int_equal(m.n_managed, 1);
        assert_string_equal(m.managed[0].driver, "nvidia+x");
        assert_true(hostmap_driver_name_ok("drv:1+x(b)"));
        assert_false(hostmap_driver_name_ok("a b"));
        assert_false(hostmap_driver_name_ok("a/b"));
        mark_done(&m);
        xmlFreeDoc(doc);
}

/* Replace the first 'old' in s (which must hold it) with 'new'. */
static char *replace_once(const char *s, const char *old, const char *new) {
        const char *at = strstr(s, old);
        if (!at)
                fail_msg("'%s' not found", old);
        return xasprintf("%.*s%s%s", (int) (at - s), s, new, at + strlen(old));
}

/* A mark with migration data planned by another fingerprint version (or
 * by a pcinuma that did not record it: version 1) is stale, with that
 * reason; planned again, it records this version and is not stale. */
static void test_fingerprint_version_stale(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        /* migration: same-topology, so the mark says yes and the
         * destination judges the fingerprint version. */
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        _cleanup_(engine_result_freep) struct engine_result *r = NULL, *old = NULL, *other = NULL, *again = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, pol, NULL, &r, &err), 0);
        assert_int_equal(r->verdict, PLAN_APPLY);
        _cleanup_free_ char *attr = xasprintf(" fingerprint-version=\"%d\"", FINGERPRINT_VERSION);
        assert_non_null(strstr(r->xml, attr));

        /* Fresh: not stale. */
        assert_int_equal(engine_plan(r->xml, strlen(r->xml), h, pol, NULL, &again, &err), 0);
        assert_true(again->already_planned);
        assert_null(again->stale_mark);

        /* Written before the version was recorded. */
        _cleanup_free_ char *before = replace_once(r->xml, attr, "");
        assert_int_equal(engine_plan(before, strlen(before), h, pol, NULL, &old, &err), 0);
        assert_false(old->already_planned);
        _cleanup_free_ char *want = xasprintf("planned with topology fingerprint version 1 (the mark does not say), "
                                              "this pcinuma uses %d", FINGERPRINT_VERSION);
        if (!old->stale_mark || !strstr(old->stale_mark, want))
                fail_msg("stale mark '%s', wanted '%s'", strna(old->stale_mark), want);
        assert_non_null(strstr(old->xml, attr));        /* the new plan records it */

        /* Another version. */
        _cleanup_free_ char *v = xasprintf(" fingerprint-version=\"%d\"", FINGERPRINT_VERSION + 7);
        _cleanup_free_ char *later = replace_once(r->xml, attr, v);
        assert_int_equal(engine_plan(later, strlen(later), h, pol, NULL, &other, &err), 0);
        assert_false(other->already_planned);
        _cleanup_free_ char *want2 = xasprintf("planned with topology fingerprint version %d, this pcinuma uses %d",
                                               FINGERPRINT_VERSION + 7, FINGERPRINT_VERSION);
        if (!other->stale_mark || !strstr(other->stale_mark, want2))
                fail_msg("stale mark '%s', wanted '%s'", strna(other->stale_mark), want2);

        /* A mark without migration data (no fingerprint) is not judged by it. */
        _cleanup_domain_ struct domain *cur = NULL;
        assert_int_equal(domain_parse(before, strlen(before), &cur, &err), 0);
        _cleanup_(mark_done) struct mark m = {0};
        assert_int_equal(mark_parse(cur->mark, cur->devices, &m, &err), 0);
        char *stale = mark_mismatch(&m, old->plan, old->base, cur);
        assert_non_null(stale);
        free(stale);
        free(m.fingerprint);
        m.fingerprint = NULL;
        char *why = mark_mismatch(&m, old->plan, old->base, cur);
        if (why)
                fail_msg("a mark without a fingerprint is stale: %s", why);

        /* Incoming with a mark of another version (a domain that ran since
         * before the upgrade): refused saying so, not by a position
         * mismatch; the current version is accepted on the same host. */
        struct incoming_result mr = {0};
        engine_incoming(before, strlen(before), h, pol, NULL, &mr);
        assert_int_equal(mr.verdict, INCOMING_REFUSE);
        if (!mr.reason || !strstr(mr.reason, "fingerprint version 1 (the mark does not say)") ||
            !strstr(mr.reason, "cannot be compared"))
                fail_msg("refusal '%s'", strna(mr.reason));
        incoming_result_done(&mr);
        engine_incoming(r->xml, strlen(r->xml), h, pol, NULL, &mr);
        if (mr.verdict != INCOMING_ACCEPT)
                fail_msg("the current version: verdict %d, '%s'", mr.verdict, strna(mr.reason));
        incoming_result_done(&mr);
}

/* Forged values reach no message through the migrate gate: a forged host
 * refuses the mark (one line), a forged migratable-reason is quoted on
 * one line, and a device the domain does not have refuses the mark. */
static void test_migrate_forged_values(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = fake_vm_host();
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        _cleanup_(engine_result_freep) struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, pol, NULL, &r, &err), 0);
        assert_int_equal(r->verdict, PLAN_APPLY);

        /* The pristine mark is accepted (the refusals below are the forgeries'). */
        struct incoming_result mr = {0};
        engine_incoming(r->xml, strlen(r->xml), h, pol, NULL, &mr);
        if (mr.verdict != INCOMING_ACCEPT)
                fail_msg("pristine mark refused: %s", strna(mr.reason));
        incoming_result_done(&mr);

        _cleanup_free_ char *host = replace_once(r->xml, "<pcinuma:device host=\"0000:10:00.0\"",
                                                 "<pcinuma:device host=\"0000:10:00.0&#10;pcinumad: FORGED LINE\"");
        engine_incoming(host, strlen(host), h, pol, NULL, &mr);
        assert_int_equal(mr.verdict, INCOMING_REFUSE);
        assert_non_null(strstr(mr.reason, "host='0000:10:00.0\\npcinumad: FORGED LINE'>: not a PCI address"));
        assert_null(strpbrk(mr.reason, "\n\r"));
        incoming_result_done(&mr);

        _cleanup_free_ char *reason = replace_once(r->xml, "migratable=\"yes\"",
                                                   "migratable=\"no\" migratable-reason=\"why&#10;pcinumad: FORGED&#13;&#9;LINE\"");
        engine_incoming(reason, strlen(reason), h, pol, NULL, &mr);
        assert_int_equal(mr.verdict, INCOMING_REFUSE_MARKED);
        assert_string_equal(mr.reason, "why pcinumad: FORGED  LINE");
        assert_string_equal(mr.policy, "require");
        incoming_result_done(&mr);
        /* The refusal as marked comes before the whole mark is checked:
         * a policy that is no mode name is not passed on. */
        _cleanup_free_ char *policy = replace_once(reason, "policy=\"require\"", "policy=\"require&#10;pcinumad: FORGED\"");
        engine_incoming(policy, strlen(policy), h, pol, NULL, &mr);
        assert_int_equal(mr.verdict, INCOMING_REFUSE_MARKED);
        assert_null(mr.policy);
        incoming_result_done(&mr);

        /* A device the domain does not have. */
        _cleanup_free_ char *extra = replace_once(r->xml, "<pcinuma:device host=\"0000:10:00.0\"",
                                                  "<pcinuma:device host=\"0000:99:00.0\" guest-cell=\"0\" host-node=\"0\"/>"
                                                  "<pcinuma:device host=\"0000:10:00.0\"");
        engine_incoming(extra, strlen(extra), h, pol, NULL, &mr);
        assert_int_equal(mr.verdict, INCOMING_REFUSE);
        assert_non_null(strstr(mr.reason, "the pcinuma mark records device 0000:99:00.0, which the domain does not have"));
        assert_int_equal(mr.map.n_pairs, 0);
        incoming_result_done(&mr);
}

/* The attributes alone, unchecked: what the migrate phase reads. */
static void test_parse_attrs(void **state) {
        (void) state;
        xmlDocPtr doc = read_doc(OPEN_MARK " ovmf-mmio64='maybe' migratable-reason='a&#10;b&#13;c&#9;d&#127;e'><pcinuma:bogus/></pcinuma:topology>");
        struct mark m = {0};
        mark_parse_attrs(xmlDocGetRootElement(doc), &m);
        assert_string_equal(m.migratable_reason, "a b c d e");     /* free text: one line */
        assert_string_equal(m.policy, "require");
        assert_string_equal(m.migratable, "no");
        assert_string_equal(m.ovmf_mmio64, "maybe");
        assert_null(m.distances);
        assert_int_equal(m.n_devices, 0);
        mark_done(&m);
        xmlFreeDoc(doc);
}

/* A mark with more records of a kind than any plan writes is refused
 * (-E2BIG, naming the kind), at the limit it is read: that bounds what
 * the revert and the migration do per mark. */
static void test_record_limits(void **state) {
        (void) state;
        static const struct {
                unsigned max;
                const char *kind;
        } kinds[] = {
                { MARK_DEVICE_RECORDS_MAX, "device" }, { MARK_DEVICE_RECORDS_MAX, "managed" },
                { MARK_CONTROLLER_RECORDS_MAX, "expander" }, { MARK_CONTROLLER_RECORDS_MAX, "controller" },
        };
        for (size_t k = 0; k < ELEMENTSOF(kinds); k++)
                for (unsigned n = kinds[k].max; n <= kinds[k].max + 1; n++) {
                        struct strbuf b = {0};
                        strbuf_append(&b, "<domain><metadata>" OPEN_MARK ">");
                        for (unsigned i = 0; i < n; i++) {
                                unsigned bus = (i >> 8) & 0xff, slot = (i >> 3) & 0x1f, fn = i & 7;
                                if (k == 0)
                                        strbuf_printf(&b, "<pcinuma:device host='0000:%02x:%02x.%u'/>", bus, slot, fn);
                                else if (k == 1)
                                        strbuf_printf(&b, "<pcinuma:managed host='0000:%02x:%02x.%u' original='yes'/>", bus, slot, fn);
                                else if (k == 2)
                                        strbuf_printf(&b, "<pcinuma:expander controller='%u' guest-cell='0' host-nodes='0' busNr='9'/>", i % 256);
                                else
                                        strbuf_printf(&b, "<pcinuma:controller index='%u' model='pcie-root-port'/>", i % 256);
                        }
                        strbuf_append(&b, "</pcinuma:topology></metadata><devices/></domain>");
                        xmlDocPtr doc = read_doc(b.buf);
                        xmlNodePtr root = xmlDocGetRootElement(doc), node = NULL;
                        _cleanup_free_ char *err = NULL;
                        assert_int_equal(xml_locate_mark(root, &node, &err), 0);
                        struct mark m = {0};
                        int r = mark_parse(node, child(root, "devices"), &m, &err);
                        if (n == kinds[k].max) {
                                if (r < 0)
                                        fail_msg("%s at the limit: %s", kinds[k].kind, err);
                                mark_done(&m);
                        } else {
                                assert_int_equal(r, -E2BIG);
                                _cleanup_free_ char *want = xasprintf("more than %u <pcinuma:%s> records", kinds[k].max,
                                                                      kinds[k].kind);
                                if (!strstr(err, want))
                                        fail_msg("'%s' does not say '%s'", err, want);
                        }
                        xmlFreeDoc(doc);
                        strbuf_done(&b);
                }
}

static void test_locate(void **state) {
        (void) state;
        static const struct { const char *xml; int r; const char *want; } cases[] = {
                { "<domain><name>x</name></domain>", 0, NULL },
                { "<domain><metadata><other xmlns='urn:x'/></metadata></domain>", 0, NULL },
                { "<domain><metadata>" OPEN_MARK "/></metadata></domain>", 1, NULL },
                { "<domain><metadata>" OPEN_MARK "/>" OPEN_MARK "/></metadata></domain>", -EINVAL,
                  "a second pcinuma mark <pcinuma:topology>" },
                { "<domain><metadata/><metadata>" OPEN_MARK "/></metadata></domain>", -EINVAL,
                  "a pcinuma mark in a second <metadata> element" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                xmlDocPtr doc = read_doc(cases[i].xml);
                xmlNodePtr node = (xmlNodePtr) doc;     /* must be overwritten on success */
                _cleanup_free_ char *err = NULL;
                int r = xml_locate_mark(xmlDocGetRootElement(doc), &node, &err);
                if (cases[i].r < 0) {
                        assert_int_equal(r, cases[i].r);
                        assert_non_null(strstr(err, cases[i].want));
                } else {
                        assert_int_equal(r, 0);
                        assert_null(err);
                        assert_int_equal(node != NULL, cases[i].r);
                        assert_int_equal(xml_is_mark(node), cases[i].r);
                }
                xmlFreeDoc(doc);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_round_trip),
                cmocka_unit_test(test_build_and_match),
                cmocka_unit_test(test_mismatch_reasons),
                cmocka_unit_test(test_engine_stale_reason),
                cmocka_unit_test(test_migratable_device_stays),
                cmocka_unit_test(test_migratable_not_fingerprinted),
                cmocka_unit_test(test_address_codec),
                cmocka_unit_test(test_refusals),
                cmocka_unit_test(test_accepts_valid_removed),
                cmocka_unit_test(test_accepts_driver_names),
                cmocka_unit_test(test_parse_attrs),
                cmocka_unit_test(test_fingerprint_version_stale),
                cmocka_unit_test(test_migrate_forged_values),
                cmocka_unit_test(test_locate),
                cmocka_unit_test(test_record_limits),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for the stand-in seam of a stand_ins build (standins.h, and
 * domain_parse_on() in domain.h): the table's strict parser with a message
 * naming the file and the entry for each kind of bad input; a virtio
 * <interface type='user'> with a MAC in the table read as the PCI hostdev
 * of its BDF, and nothing else read; the engine placing it on a guest
 * cell's expander bus, marking it, recognising its own plan and reverting
 * it.  Built only when meson's stand_ins option is true. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "domain.h"
#include "engine.h"
#include "hostmap.h"
#include "report.h"
#include "standins.h"
#include "util.h"

#include "fake-host.h"

#define SRC "/etc/test/stand-ins.json"

static struct standins *parse_ok(const char *text) {
        struct standins *s = NULL;
        _cleanup_free_ char *err = NULL;
        if (standins_parse(text, strlen(text), SRC, &s, &err) < 0)
                fail_msg("standins_parse(%s): %s", text, strna(err));
        return s;
}

/* The message for bad table 'text' names the file and contains 'want'. */
static void parse_bad(const char *text, const char *want) {
        struct standins *s = NULL;
        _cleanup_free_ char *err = NULL;
        int r = standins_parse(text, strlen(text), SRC, &s, &err);
        if (r != -EINVAL || s)
                fail_msg("standins_parse(%s) = %d, expected -EINVAL", text, r);
        if (!err || !strstr(err, SRC) || !strstr(err, want))
                fail_msg("standins_parse(%s): message '%s' does not name the file and '%s'", text, strna(err), want);
}

static void test_parse(void **state) {
        (void) state;
        _cleanup_standins_ struct standins *s =
                parse_ok("{\"52:54:00:5a:00:01\": \"0000:21:00.0\",\n \"52:54:00:5A:00:02\" : \"0000:22:00.0\"}\n");
        assert_int_equal(s->n, 2);
        assert_string_equal(s->entries[0].mac, "52:54:00:5a:00:01");
        assert_string_equal(s->entries[1].mac, "52:54:00:5a:00:02");
        assert_string_equal(s->source, SRC);
        const struct standin *e = standins_find(s, "52:54:00:5A:00:02");
        assert_non_null(e);
        assert_int_equal(e->host.bus, 0x22);
        assert_ptr_equal(standins_find(s, "52:54:00:5a:00:01"), &s->entries[0]);
        assert_null(standins_find(s, "52:54:00:5a:00:03"));
        assert_null(standins_find(s, "not a mac"));
        assert_null(standins_find(s, NULL));
        assert_null(standins_find(NULL, "52:54:00:5a:00:01"));

        _cleanup_standins_ struct standins *empty = parse_ok("{}");
        assert_int_equal(empty->n, 0);
}

static void test_parse_bad(void **state) {
        (void) state;
        parse_bad("", "JSON syntax error");
        parse_bad("{\"52:54:00:5a:00:01\": \"0000:21:00.0\",}", "JSON syntax error");
        parse_bad("[\"52:54:00:5a:00:01\"]", "expected a JSON object {\"MAC\": \"host BDF\", ...}, not an array");
        parse_bad("\"52:54:00:5a:00:01\"", "not a string");
        parse_bad("{\"52:54:00:5a:00\": \"0000:21:00.0\"}", "entry \"52:54:00:5a:00\": not a MAC address");
        parse_bad("{\"52-54-00-5a-00-01\": \"0000:21:00.0\"}", "entry \"52-54-00-5a-00-01\": not a MAC address");
        parse_bad("{\"52:54:00:5a:00:0g\": \"0000:21:00.0\"}", "entry \"52:54:00:5a:00:0g\": not a MAC address");
        parse_bad("{\"53:54:00:5a:00:01\": \"0000:21:00.0\"}", "entry \"53:54:00:5a:00:01\": a multicast MAC address");
        parse_bad("{\"52:54:00:5a:00:01\": \"0000:21:00.0\", \"52:54:00:5a:00:01\": \"0000:22:00.0\"}",
                  "entry \"52:54:00:5a:00:01\": MAC address given twice");
        parse_bad("{\"52:54:00:5a:00:01\": \"0000:21:00.0\", \"52:54:00:5A:00:01\": \"0000:22:00.0\"}",
                  "entry \"52:54:00:5A:00:01\": MAC address given twice (also as \"52:54:00:5a:00:01\")");
        parse_bad("{\"52:54:00:5a:00:01\": \"0000:21:00.0\", \"52:54:00:5a:00:02\": \"0000:21:00.0\"}",
                  "entry \"52:54:00:5a:00:02\": host device 0000:21:00.0 is given twice (also to 52:54:00:5a:00:01)");
        parse_bad("{\"52:54:00:5a:00:01\": \"21:00.0\"}", "entry \"52:54:00:5a:00:01\": \"21:00.0\" is not a host PCI address");
        parse_bad("{\"52:54:00:5a:00:01\": \"0000:21:20.0\"}", "\"0000:21:20.0\" is not a host PCI address");
        parse_bad("{\"52:54:00:5a:00:01\": 3}", "entry \"52:54:00:5a:00:01\": the value must be a host PCI address as a string");
        parse_bad("{\"52:54:00:5a:00:01\": [\"0000:21:00.0\"]}", "not an array");
        parse_bad("{\"52:54:00:5a:00:01\": {\"x\": \"0000:21:00.0\"}}", "not an object");
        /* A nested object's keys are not entries, and a control character
         * in a key reaches the message as '?'. */
        parse_bad("{\"a\\u0001b\": \"0000:21:00.0\"}", "entry \"a?b\": not a MAC address");
        const char nul[] = "{\"52:54:00:5a:00:01\": \"0000:21:00.0\"}\0";
        struct standins *s = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(standins_parse(nul, sizeof nul - 1, SRC, &s, &err), -EINVAL);
        assert_non_null(strstr(err, "NUL byte"));
}

static void test_load_file(void **state) {
        (void) state;
        struct standins *s = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(standins_load_file("/nonexistent/stand-ins.json", &s, &err), -ENOENT);
        assert_non_null(strstr(err, "/nonexistent/stand-ins.json"));
        assert_null(s);
}

/* ---- the domain model and the engine ----------------------------------------- */

#define DOMAIN_HEAD                                                                                     \
        "<domain type='qemu'>\n"                                                                        \
        "  <name>si</name>\n"                                                                           \
        "  <uuid>0b7c9a4e-5d3f-4e61-9a2b-3c4d5e6f7a8b</uuid>\n"                                         \
        "  <memory unit='MiB'>256</memory>\n"                                                           \
        "  <vcpu placement='static'>2</vcpu>\n"                                                         \
        "  <os><type arch='x86_64' machine='q35'>hvm</type></os>\n"                                     \
        "  <features><acpi/></features>\n"                                                              \
        "  <cpu mode='custom' match='exact'>\n"                                                         \
        "    <model fallback='allow'>qemu64</model>\n"                                                  \
        "    <numa>\n"                                                                                  \
        "      <cell id='0' cpus='0' memory='128' unit='MiB'/>\n"                                       \
        "      <cell id='1' cpus='1' memory='128' unit='MiB'/>\n"                                       \
        "    </numa>\n"                                                                                 \
        "  </cpu>\n"                                                                                    \
        "  <numatune>\n"                                                                                \
        "    <memnode cellid='0' mode='strict' nodeset='0'/>\n"                                         \
        "    <memnode cellid='1' mode='strict' nodeset='1'/>\n"                                         \
        "  </numatune>\n"                                                                               \
        "  <devices>\n"                                                                                 \
        "    <controller type='pci' index='0' model='pcie-root'/>\n"

#define DOMAIN_TAIL                                                                                     \
        "  </devices>\n"                                                                                \
        "</domain>\n"

/* A stand-in for 0000:21:00.0 (node 1 here), and NICs that are not: not in
 * the table, not virtio, not user-mode. */
static const char stand_in_xml[] =
        DOMAIN_HEAD
        "    <interface type='user'>\n"
        "      <mac address='52:54:00:5A:00:01'/>\n"
        "      <model type='virtio'/>\n"
        "      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>\n"
        "    </interface>\n"
        "    <interface type='user'>\n"
        "      <mac address='52:54:00:5a:00:09'/>\n"
        "      <model type='virtio'/>\n"
        "    </interface>\n"
        "    <interface type='user'>\n"
        "      <mac address='52:54:00:5a:00:02'/>\n"
        "      <model type='e1000e'/>\n"
        "    </interface>\n"
        "    <interface type='network'>\n"
        "      <mac address='52:54:00:5a:00:03'/>\n"
        "      <source network='default'/>\n"
        "      <model type='virtio'/>\n"
        "    </interface>\n"
        DOMAIN_TAIL;

static const char table_text[] =
        "{\"52:54:00:5a:00:01\": \"0000:21:00.0\", \"52:54:00:5a:00:02\": \"0000:22:00.0\","
        " \"52:54:00:5a:00:03\": \"0000:23:00.0\"}";

static struct hostmap *make_host(const struct standins *s) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        fake_host_add_dev(h, "0000:21:00.0", 1, 0x020000);
        fake_host_add_dev(h, "0000:22:00.0", 0, 0x020000);
        fake_host_add_dev(h, "0000:23:00.0", 0, 0x020000);
        hostmap_finish(h);
        h->stand_ins = s;
        return h;
}

static void test_domain(void **state) {
        (void) state;
        _cleanup_standins_ struct standins *s = parse_ok(table_text);
        _cleanup_hostmap_ struct hostmap *h = make_host(s);
        _cleanup_free_ char *err = NULL;

        _cleanup_domain_ struct domain *d = NULL;
        assert_int_equal(domain_parse_on(stand_in_xml, strlen(stand_in_xml), h, &d, &err), 0);
        assert_int_equal(d->n_hostdevs, 1);
        const struct domain_hostdev *hd = &d->hostdevs[0];
        assert_int_equal(hd->kind, DOMAIN_HOSTDEV_PCI);
        assert_true(hd->is_interface);
        assert_true(domain_hostdev_is_stand_in(hd));
        assert_int_equal(hd->host.bus, 0x21);
        assert_true(hd->has_guest_addr);
        assert_int_equal(hd->guest.slot, 5);
        assert_int_equal(hd->managed, -1);

        /* A copy reads the same table. */
        _cleanup_domain_ struct domain *c = NULL;
        assert_int_equal(domain_copy(d, &c, &err), 0);
        assert_int_equal(c->n_hostdevs, 1);

        /* Without the table, or with plain domain_parse(), no hostdev. */
        _cleanup_domain_ struct domain *plain = NULL;
        assert_int_equal(domain_parse(stand_in_xml, strlen(stand_in_xml), &plain, &err), 0);
        assert_int_equal(plain->n_hostdevs, 0);
        _cleanup_domain_ struct domain *none = NULL;
        assert_int_equal(domain_parse_stand_ins(stand_in_xml, strlen(stand_in_xml), NULL, &none, &err), 0);
        assert_int_equal(none->n_hostdevs, 0);
}

/* A stand-in and a hostdev of the same BDF: assigned twice. */
static void test_domain_twice(void **state) {
        (void) state;
        _cleanup_standins_ struct standins *s = parse_ok(table_text);
        _cleanup_hostmap_ struct hostmap *h = make_host(s);
        static const char xml[] =
                DOMAIN_HEAD
                "    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
                "      <source><address domain='0x0000' bus='0x21' slot='0x00' function='0x0'/></source>\n"
                "    </hostdev>\n"
                "    <interface type='user'><mac address='52:54:00:5a:00:01'/><model type='virtio'/></interface>\n"
                DOMAIN_TAIL;
        _cleanup_domain_ struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(domain_parse_on(xml, strlen(xml), h, &d, &err), -EINVAL);
        assert_non_null(strstr(err, "host device 0000:21:00.0 is assigned twice"));
}

static struct engine_result *plan(const char *xml, const struct hostmap *h, const char *mode) {
        enum policy_mode m;
        assert_int_equal(policy_mode_from_string(mode, &m), 0);
        struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        if (engine_plan(xml, strlen(xml), h, NULL, &m, &r, &err) < 0)
                fail_msg("plan under %s: %s", mode, strna(err));
        return r;
}

/* The attribute 'attr' of the first element 'elem' after 'after' in xml
 * (libxml2 writes attributes in double quotes). */
static char *attr_after(const char *xml, const char *after, const char *elem, const char *attr) {
        const char *p = strstr(xml, after);
        if (!p)
                return NULL;
        _cleanup_free_ char *open = xasprintf("<%s ", elem);
        p = strstr(p, open);
        if (!p)
                return NULL;
        const char *end = strchr(p, '>');
        _cleanup_free_ char *key = xasprintf(" %s=\"", attr);
        const char *a = strstr(p, key);
        if (!a || a > end)
                return NULL;
        a += strlen(key);
        return xstrndup(a, strcspn(a, "\""));
}

static void test_engine(void **state) {
        (void) state;
        _cleanup_standins_ struct standins *s = parse_ok(table_text);
        _cleanup_hostmap_ struct hostmap *h = make_host(s);

        _cleanup_(engine_result_freep) struct engine_result *r = plan(stand_in_xml, h, "require");
        assert_int_equal(r->verdict, PLAN_APPLY);
        assert_true(r->changed);
        assert_int_equal(r->plan->n_devices, 1);
        assert_int_equal(r->plan->devices[0].action, PLAN_MOVE);
        assert_int_equal(r->plan->devices[0].cell, 1);          /* host node 1 is cell 1's */

        /* The stand-in moved to the port the plan made, under the
         * expander bus of cell 1; the mark records it by its BDF and its
         * old address. */
        _cleanup_free_ char *bus = attr_after(r->xml, "52:54:00:5A:00:01", "address", "bus");
        assert_non_null(bus);
        assert_string_not_equal(bus, "0x00");
        assert_non_null(strstr(r->xml, "host=\"0000:21:00.0\""));
        assert_non_null(strstr(r->xml, "original-address=\"type=pci domain=0x0000 bus=0x00 slot=0x05 function=0x0\""));
        assert_non_null(strstr(r->xml, "<node>1</node>"));
        assert_null(strstr(r->xml, "managed="));
        /* The others are untouched. */
        _cleanup_free_ char *other = attr_after(r->xml, "52:54:00:5a:00:09", "address", "bus");
        assert_null(other);

        /* Planned again: already planned, the input verbatim. */
        _cleanup_(engine_result_freep) struct engine_result *again = plan(r->xml, h, "require");
        assert_int_equal(again->verdict, PLAN_APPLY);
        assert_true(again->already_planned);
        assert_false(again->changed);

        /* Under policy off: reverted to the input, the stand-in's address
         * back where it was. */
        _cleanup_(engine_result_freep) struct engine_result *off = plan(r->xml, h, "off");
        assert_true(off->reverted);
        assert_null(strstr(off->xml, "urn:pcinuma"));
        assert_null(strstr(off->xml, "pcie-expander-bus"));
        _cleanup_free_ char *obus = attr_after(off->xml, "52:54:00:5A:00:01", "address", "bus");
        _cleanup_free_ char *oslot = attr_after(off->xml, "52:54:00:5A:00:01", "address", "slot");
        assert_string_equal(obus, "0x00");
        assert_string_equal(oslot, "0x05");

        /* The same host map without the table: nothing to place, and the
         * mark of the planned XML cannot find its device. */
        _cleanup_hostmap_ struct hostmap *bare = make_host(NULL);
        _cleanup_(engine_result_freep) struct engine_result *plain = plan(stand_in_xml, bare, "require");
        assert_false(plain->changed);
        assert_int_equal(plain->plan->n_devices, 0);
        _cleanup_(engine_result_freep) struct engine_result *lost = plan(r->xml, bare, "require");
        assert_false(lost->already_planned);
        assert_non_null(lost->revert_warning);
        assert_non_null(strstr(lost->revert_warning, "52:54:00:5A:00:01"));
}

/* A stand-in for a BDF the host does not have is placed as such a hostdev
 * is: refused under require, naming the device. */
static void test_engine_unknown(void **state) {
        (void) state;
        _cleanup_standins_ struct standins *s = parse_ok("{\"52:54:00:5a:00:01\": \"0000:99:00.0\"}");
        _cleanup_hostmap_ struct hostmap *h = make_host(s);
        _cleanup_(engine_result_freep) struct engine_result *r = plan(stand_in_xml, h, "require");
        assert_int_equal(r->verdict, PLAN_REFUSED);
        _cleanup_free_ char *why = report_refusal(r);
        assert_non_null(strstr(why, "0000:99:00.0"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_parse_bad),
                cmocka_unit_test(test_load_file),
                cmocka_unit_test(test_domain),
                cmocka_unit_test(test_domain_twice),
                cmocka_unit_test(test_engine),
                cmocka_unit_test(test_engine_unknown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

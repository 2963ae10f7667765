/* Tests for the domain model (domain.h, docs/design.md §5): domain_parse() of
 * libvirt domain XML given as string literals, its errors, the backing of
 * guest cells resolved against a host map built in memory, and
 * domain_format(). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "domain.h"
#include "hostmap.h"
#include "util.h"

#include "fake-vm.h"

/* ---- helpers ------------------------------------------------------------ */

static struct domain *parse_ok(const char *xml) {
        struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        int r = domain_parse(xml, strlen(xml), &d, &err);
        if (r < 0)
                fail_msg("domain_parse failed: %d %s", r, strna(err));
        assert_non_null(d);
        return d;
}

/* Parse, expect error 'expected_r' with a message containing each of the
 * NULL-terminated substrings. */
static void parse_fails_len(const char *xml, size_t len, int expected_r, ...) {
        struct domain *d = NULL;
        char *err = NULL;
        int r = domain_parse(xml, len, &d, &err);
        if (r != expected_r)
                fail_msg("domain_parse returned %d (%s), expected %d", r, strna(err), expected_r);
        assert_null(d);
        assert_non_null(err);
        va_list ap;
        va_start(ap, expected_r);
        for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
                if (!strstr(err, s)) {
                        va_end(ap);
                        char copy[512];
                        snprintf(copy, sizeof copy, "%s", err);
                        free(err);
                        fail_msg("error message '%s' does not contain '%s'", copy, s);
                }
        va_end(ap);
        free(err);
}

#define parse_fails(xml, r, ...) parse_fails_len((xml), strlen(xml), (r), __VA_ARGS__, (const char *) NULL)

static void assert_bitmap_is(const struct bitmap *b, const char *expected) {
        _cleanup_free_ char *s = bitmap_format(b);
        assert_string_equal(s, expected);
}

static void assert_addr(const struct pci_addr *a, uint32_t dom, unsigned bus, unsigned slot, unsigned fn) {
        assert_int_equal(a->domain, dom);
        assert_int_equal(a->bus, bus);
        assert_int_equal(a->slot, slot);
        assert_int_equal(a->func, fn);
}

/* A 4-node host: node n holds CPUs 4n..4n+3; nodes 0,1 on socket 0, 2,3 on 1. */
static struct hostmap *make_host(void) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        hostmap_finish(h);
        assert_int_equal(hostmap_cpu_node(h, 9), 2);
        return h;
}

/* ---- a full q35 domain ------------------------------------------------------ */

static const char full_xml[] =
        "<domain type='kvm'>\n"
        "  <name>gpu-vm-1</name>\n"
        "  <uuid>c7a5fdbd-edaf-9455-926a-d65c16db1809</uuid>\n"
        "  <metadata>\n"
        "    <app:other xmlns:app='urn:example:app'/>\n"
        "    <pcinuma:policy xmlns:pcinuma=\"urn:pcinuma:policy:1\" name=\"socket\" tag=\"x\"/>\n"
        "  </metadata>\n"
        "  <memory unit='GiB'>8</memory>\n"
        "  <vcpu placement='static' cpuset='12-15'>8</vcpu>\n"
        "  <cputune>\n"
        "    <vcpupin vcpu='2' cpuset='4'/>\n"
        "    <vcpupin vcpu='3' cpuset='8'/>\n"
        "    <vcpupin vcpu='6' cpuset='0-1'/>\n"
        "  </cputune>\n"
        "  <numatune>\n"
        "    <memory mode='strict' nodeset='0-1'/>\n"
        "    <memnode cellid='0' mode='strict' nodeset='1'/>\n"
        "  </numatune>\n"
        "  <os firmware='efi'>\n"
        FAKE_VM_OS_FEATURES
        "  <cpu mode='host-passthrough'>\n"
        "    <numa>\n"
        "      <cell id='0' cpus='0-1' memory='2' unit='GiB'/>\n"
        "      <cell id='1' cpus='2-3' memory='2' unit='GiB'/>\n"
        "      <cell id='2' cpus='4-5' memory='2' unit='GiB'/>\n"
        "      <cell id='3' cpus='6-7' memory='2' unit='GiB'/>\n"
        "    </numa>\n"
        "  </cpu>\n"
        "  <devices>\n"
        "    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
        "    <controller type='pci' index='0' model='pcie-root'/>\n"
        "    <controller type='pci' index='1' model='pcie-root-port'>\n"
        "      <model name='pcie-root-port'/>\n"
        "      <target chassis='1' port='0x10'/>\n"
        "      <address type='pci' domain='0x0000' bus='0x00' slot='0x02' function='0x0' multifunction='on'/>\n"
        "    </controller>\n"
        "    <controller type='pci' index='2' model='pcie-expander-bus'>\n"
        "      <model name='pxb-pcie'/>\n"
        "      <target busNr='200'>\n"
        "        <node>1</node>\n"
        "      </target>\n"
        "      <address type='pci' domain='0x0000' bus='0x00' slot='0x03' function='0x0'/>\n"
        "    </controller>\n"
        "    <controller type='usb' index='0' model='qemu-xhci'>\n"
        "      <address type='pci' domain='0x0000' bus='0x00' slot='0x04' function='0x0'/>\n"
        "    </controller>\n"
        "    <controller type='sata' index='0'>\n"
        "      <address type='pci' domain='0x0000' bus='0x00' slot='0x1f' function='0x2'/>\n"
        "    </controller>\n"
        "    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
        "      <source>\n"
        "        <address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>\n"
        "      </source>\n"
        "      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>\n"
        "    </hostdev>\n"
        "    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
        "      <source>\n"
        "        <address domain='0x0000' bus='0x5e' slot='0x00' function='0x1'/>\n"
        "      </source>\n"
        "    </hostdev>\n"
        "    <interface type='hostdev' managed='yes'>\n"
        "      <mac address='52:54:00:6d:90:02'/>\n"
        "      <source>\n"
        "        <address type='pci' domain='0x0000' bus='0xaf' slot='0x10' function='0x2'/>\n"
        "      </source>\n"
        "    </interface>\n"
        "    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
        "      <source>\n"
        "        <address uuid='4b20d080-1b54-4048-85b3-a6a62d165c01'/>\n"
        "      </source>\n"
        "    </hostdev>\n"
        "    <hostdev mode='subsystem' type='mdev' model='vfio-ccw'>\n"
        "      <source>\n"
        "        <address uuid='90c6c135-ad44-41d0-b1b7-bae47de48627'/>\n"
        "      </source>\n"
        "      <address type='ccw' cssid='0xfe' ssid='0x0' devno='0x0001'/>\n"
        "    </hostdev>\n"
        "    <hostdev mode='subsystem' type='usb' managed='yes'>\n"
        "      <source>\n"
        "        <vendor id='0x1234'/>\n"
        "        <product id='0xbeef'/>\n"
        "      </source>\n"
        "    </hostdev>\n"
        "    <interface type='network'>\n"
        "      <source network='default'/>\n"
        "      <model type='virtio'/>\n"
        "      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>\n"
        "    </interface>\n"
        "    <memballoon model='virtio'>\n"
        "      <address type='pci' domain='0x0000' bus='0x00' slot='0x06' function='0x0'/>\n"
        "    </memballoon>\n"
        "  </devices>\n"
        "</domain>\n";

static void test_parse_full(void **state) {
        (void) state;
        _cleanup_domain_ struct domain *d = parse_ok(full_xml);

        assert_string_equal(d->name, "gpu-vm-1");
        assert_string_equal(d->uuid, "c7a5fdbd-edaf-9455-926a-d65c16db1809");
        assert_string_equal(d->arch, "x86_64");
        assert_string_equal(d->machine, "pc-q35-7.2");
        assert_true(d->q35);
        assert_true(d->acpi);
        assert_string_equal(d->firmware, "efi");
        assert_false(d->has_xml_decl);
        assert_non_null(d->doc);
        assert_non_null(d->devices);
        assert_true(xml_is(d->devices, "devices"));

        /* cells */
        assert_int_equal(d->n_cells, 4);
        for (unsigned i = 0; i < 4; i++)
                assert_int_equal(d->cells[i].id, i);
        assert_bitmap_is(&d->cells[0].cpus, "0-1");
        assert_bitmap_is(&d->cells[3].cpus, "6-7");
        assert_ptr_equal(domain_find_cell(d, 2), &d->cells[2]);
        assert_null(domain_find_cell(d, 4));

        /* pinning and numatune */
        assert_true(d->has_vcpu_cpuset);
        assert_bitmap_is(&d->vcpu_cpuset, "12-15");
        assert_int_equal(d->n_vcpupins, 3);
        assert_int_equal(d->vcpupins[0].vcpu, 2);
        assert_bitmap_is(&d->vcpupins[0].cpuset, "4");
        assert_int_equal(d->vcpupins[2].vcpu, 6);
        assert_bitmap_is(&d->vcpupins[2].cpuset, "0-1");
        assert_true(d->has_numatune_memory);
        assert_bitmap_is(&d->numatune_memory, "0-1");
        assert_int_equal(d->n_memnodes, 1);
        assert_int_equal(d->memnodes[0].cellid, 0);
        assert_bitmap_is(&d->memnodes[0].nodeset, "1");

        /* hostdevs: PCI with and without a guest address, the hostdev
         * interface, the vfio-pci mdev; not the vfio-ccw mdev or the USB one */
        assert_int_equal(d->n_hostdevs, 4);
        const struct domain_hostdev *hd = &d->hostdevs[0];
        assert_int_equal(hd->kind, DOMAIN_HOSTDEV_PCI);
        assert_false(hd->is_interface);
        assert_addr(&hd->host, 0, 0x3b, 0, 0);
        assert_true(hd->has_guest_addr);
        assert_addr(&hd->guest, 0, 1, 0, 0);
        assert_non_null(hd->elem);
        assert_true(xml_is(hd->elem, "hostdev"));
        assert_non_null(hd->addr_elem);
        assert_true(xml_is(hd->addr_elem, "address"));
        assert_ptr_equal(hd->addr_elem->parent, hd->elem);

        hd = &d->hostdevs[1];
        assert_int_equal(hd->kind, DOMAIN_HOSTDEV_PCI);
        assert_addr(&hd->host, 0, 0x5e, 0, 1);
        assert_false(hd->has_guest_addr);
        assert_null(hd->addr_elem);

        hd = &d->hostdevs[2];
        assert_int_equal(hd->kind, DOMAIN_HOSTDEV_PCI);
        assert_true(hd->is_interface);
        assert_true(xml_is(hd->elem, "interface"));
        assert_addr(&hd->host, 0, 0xaf, 0x10, 2);
        assert_false(hd->has_guest_addr);

        hd = &d->hostdevs[3];
        assert_int_equal(hd->kind, DOMAIN_HOSTDEV_MDEV);
        assert_string_equal(hd->mdev_uuid, "4b20d080-1b54-4048-85b3-a6a62d165c01");
        assert_false(hd->has_guest_addr);
        char buf[64];
        assert_string_equal(domain_hostdev_name(hd, buf), "mdev 4b20d080-1b54-4048-85b3-a6a62d165c01");
        assert_string_equal(domain_hostdev_name(&d->hostdevs[0], buf), "0000:3b:00.0");

        /* PCI controllers only (not usb or sata) */
        assert_int_equal(d->n_controllers, 3);
        const struct domain_controller *c = domain_find_controller(d, 0);
        assert_non_null(c);
        assert_string_equal(c->model, "pcie-root");
        assert_false(c->has_addr);
        assert_int_equal(c->bus_nr, -1);
        assert_int_equal(c->node, -1);
        c = domain_find_controller(d, 1);
        assert_non_null(c);
        assert_string_equal(c->model, "pcie-root-port");
        assert_true(c->has_addr);
        assert_addr(&c->addr, 0, 0, 2, 0);
        assert_int_equal(c->bus_nr, -1);
        assert_int_equal(c->node, -1);
        c = domain_find_controller(d, 2);
        assert_non_null(c);
        assert_string_equal(c->model, "pcie-expander-bus");
        assert_int_equal(c->index, 2);
        assert_int_equal(c->bus_nr, 200);
        assert_int_equal(c->node, 1);
        assert_true(c->has_addr);
        assert_addr(&c->addr, 0, 0, 3, 0);
        assert_true(xml_is(c->elem, "controller"));
        assert_null(domain_find_controller(d, 3));

        /* every guest PCI address: controllers 1, 2, usb, sata, the hostdev
         * at 01:00.0, the network interface and the balloon; no <source> */
        assert_int_equal(d->n_pci_uses, 7);
        static const struct {
                unsigned bus, slot, fn;
                const char *owner;
        } uses[] = {
                { 0, 2, 0, "controller" }, { 0, 3, 0, "controller" }, { 0, 4, 0, "controller" }, { 0, 0x1f, 2, "controller" },
                { 1, 0, 0, "hostdev" }, { 0, 5, 0, "interface" }, { 0, 6, 0, "memballoon" },
        };
        for (size_t i = 0; i < ELEMENTSOF(uses); i++) {
                bool found = false;
                for (size_t k = 0; k < d->n_pci_uses && !found; k++) {
                        const struct domain_pci_use *u = &d->pci_uses[k];
                        if (u->addr.domain == 0 && u->addr.bus == uses[i].bus && u->addr.slot == uses[i].slot && u->addr.func == uses[i].fn) {
                                found = true;
                                assert_non_null(u->owner);
                                assert_true(xml_is(u->owner, uses[i].owner));
                        }
                }
                if (!found)
                        fail_msg("PCI use %02x:%02x.%x not recorded", uses[i].bus, uses[i].slot, uses[i].fn);
        }
        for (size_t k = 0; k < d->n_pci_uses; k++) {
                /* none of the <source> addresses */
                assert_int_not_equal(d->pci_uses[k].addr.bus, 0x3b);
                assert_int_not_equal(d->pci_uses[k].addr.bus, 0x5e);
                assert_int_not_equal(d->pci_uses[k].addr.bus, 0xaf);
        }
        /* the hostdev's use is owned by the hostdev element itself */
        for (size_t k = 0; k < d->n_pci_uses; k++)
                if (d->pci_uses[k].addr.bus == 1)
                        assert_ptr_equal(d->pci_uses[k].owner, d->hostdevs[0].elem);

        /* metadata: no mark, the policy request */
        assert_null(d->mark);
        assert_non_null(d->requested_policy);
        assert_string_equal(d->requested_policy, "socket");
        assert_non_null(d->policy_tag);
        assert_string_equal(d->policy_tag, "x");
}

static void test_resolve_backing_full(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_host();
        _cleanup_domain_ struct domain *d = parse_ok(full_xml);
        _cleanup_free_ char *err = NULL;

        assert_int_equal(domain_resolve_backing(d, h, &err), 0);
        assert_null(err);
        /* cell 0: the memnode wins over the cpuset (which says node 3) */
        assert_int_equal(d->cells[0].backing, DOMAIN_BACKING_MEMNODE);
        assert_bitmap_is(&d->cells[0].host_nodes, "1");
        /* cell 1: vCPU 2 -> CPU 4 (node 1), vCPU 3 -> CPU 8 (node 2) */
        assert_int_equal(d->cells[1].backing, DOMAIN_BACKING_VCPUPIN);
        assert_bitmap_is(&d->cells[1].host_nodes, "1-2");
        /* cell 2: vCPUs 4-5 unpinned: <vcpu cpuset='12-15'> -> node 3 */
        assert_int_equal(d->cells[2].backing, DOMAIN_BACKING_VCPU_CPUSET);
        assert_bitmap_is(&d->cells[2].host_nodes, "3");
        /* cell 3: vCPU 6 pinned to node 0, vCPU 7 falls back to the cpuset */
        assert_int_equal(d->cells[3].backing, DOMAIN_BACKING_VCPUPIN);
        assert_bitmap_is(&d->cells[3].host_nodes, "0,3");

        assert_string_equal(domain_backing_to_string(DOMAIN_BACKING_MEMNODE), "numatune memnode");
        assert_string_equal(domain_backing_to_string(DOMAIN_BACKING_VCPUPIN), "vcpupin");
}

/* A compact domain with 'cells' guest cells of two vCPUs each, and the
 * given extra top-level XML (pinning, numatune). */
static char *backing_domain(unsigned cells, const char *vcpu_attrs, const char *extra) {
        struct strbuf b = {0};
        strbuf_printf(&b, "<domain type='kvm'><name>b</name><vcpu%s>%u</vcpu>%s"
                          "<os><type arch='x86_64' machine='q35'>hvm</type></os><features><acpi/></features><cpu><numa>",
                      vcpu_attrs, cells * 2, extra);
        for (unsigned i = 0; i < cells; i++)
                strbuf_printf(&b, "<cell id='%u' cpus='%u-%u' memory='1024' unit='MiB'/>", i, 2 * i, 2 * i + 1);
        strbuf_append(&b, "</numa></cpu><devices/></domain>");
        return strbuf_steal(&b);
}

static void test_resolve_backing_memory(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_host();

        /* a single-node <numatune><memory> backs every cell */
        {
                _cleanup_free_ char *xml = backing_domain(2, "", "<numatune><memory mode='strict' nodeset='2'/></numatune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                for (size_t i = 0; i < 2; i++) {
                        assert_int_equal(d->cells[i].backing, DOMAIN_BACKING_MEMORY);
                        assert_bitmap_is(&d->cells[i].host_nodes, "2");
                }
        }
        /* a multi-node one does not */
        {
                _cleanup_free_ char *xml = backing_domain(2, "", "<numatune><memory mode='strict' nodeset='0-1'/></numatune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                for (size_t i = 0; i < 2; i++) {
                        assert_int_equal(d->cells[i].backing, DOMAIN_BACKING_NONE);
                        assert_true(bitmap_isempty(&d->cells[i].host_nodes));
                }
        }
        /* nothing at all: no backing */
        {
                _cleanup_free_ char *xml = backing_domain(1, "", "");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                assert_int_equal(d->cells[0].backing, DOMAIN_BACKING_NONE);
                assert_true(bitmap_isempty(&d->cells[0].host_nodes));
        }
        /* pinning wins over a single-node memory nodeset; a cell without
         * pinning falls back to it */
        {
                _cleanup_free_ char *xml = backing_domain(2, "",
                                                          "<cputune><vcpupin vcpu='0' cpuset='5'/></cputune>"
                                                          "<numatune><memory nodeset='3'/></numatune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                assert_int_equal(d->cells[0].backing, DOMAIN_BACKING_VCPUPIN);
                assert_bitmap_is(&d->cells[0].host_nodes, "1");
                assert_int_equal(d->cells[1].backing, DOMAIN_BACKING_MEMORY);
                assert_bitmap_is(&d->cells[1].host_nodes, "3");
        }
        /* a memnode naming two nodes backs its cell with both */
        {
                _cleanup_free_ char *xml = backing_domain(2, "", "<numatune><memnode cellid='1' nodeset='2-3'/></numatune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                assert_int_equal(d->cells[0].backing, DOMAIN_BACKING_NONE);
                assert_int_equal(d->cells[1].backing, DOMAIN_BACKING_MEMNODE);
                assert_bitmap_is(&d->cells[1].host_nodes, "2-3");
        }
}

static void test_resolve_backing_cpus(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_host();

        /* host CPUs the map does not know are ignored */
        {
                _cleanup_free_ char *xml = backing_domain(2, "",
                                                          "<cputune><vcpupin vcpu='0' cpuset='4,999'/>"
                                                          "<vcpupin vcpu='2' cpuset='1000-1001'/></cputune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                assert_int_equal(d->cells[0].backing, DOMAIN_BACKING_VCPUPIN);
                assert_bitmap_is(&d->cells[0].host_nodes, "1");
                assert_int_equal(d->cells[1].backing, DOMAIN_BACKING_NONE);
                assert_true(bitmap_isempty(&d->cells[1].host_nodes));
        }
        /* <vcpu cpuset> alone; a cpuset spanning two nodes backs with both */
        {
                _cleanup_free_ char *xml = backing_domain(1, " cpuset='3-4'", "");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                assert_int_equal(d->cells[0].backing, DOMAIN_BACKING_VCPU_CPUSET);
                assert_bitmap_is(&d->cells[0].host_nodes, "0-1");
        }
        /* resolving twice gives the same answer (not accumulated) */
        {
                _cleanup_free_ char *xml = backing_domain(1, " cpuset='8'", "");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                assert_int_equal(domain_resolve_backing(d, h, NULL), 0);
                assert_bitmap_is(&d->cells[0].host_nodes, "2");
        }
}

static void test_resolve_backing_errors(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_host();

        {
                _cleanup_free_ char *xml = backing_domain(2, "", "<numatune><memnode cellid='1' nodeset='7'/></numatune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                _cleanup_free_ char *err = NULL;
                assert_int_equal(domain_resolve_backing(d, h, &err), -EINVAL);
                assert_non_null(err);
                assert_non_null(strstr(err, "7"));
                assert_non_null(strstr(err, "node"));
        }
        {
                _cleanup_free_ char *xml = backing_domain(2, "", "<numatune><memnode cellid='0' nodeset='0,5'/></numatune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                _cleanup_free_ char *err = NULL;
                assert_int_equal(domain_resolve_backing(d, h, &err), -EINVAL);
                assert_non_null(err);
                assert_non_null(strstr(err, "5"));
        }
        /* a single-node memory nodeset naming a missing node is an error too */
        {
                _cleanup_free_ char *xml = backing_domain(1, "", "<numatune><memory nodeset='9'/></numatune>");
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                _cleanup_free_ char *err = NULL;
                assert_int_equal(domain_resolve_backing(d, h, &err), -EINVAL);
                assert_non_null(err);
                assert_non_null(strstr(err, "9"));
        }
}

/* ---- machine, ACPI, firmware, metadata ------------------------------------- */

static struct domain *parse_os(const char *os, const char *features) {
        _cleanup_free_ char *xml = xasprintf("<domain type='kvm'><name>m</name><os>%s</os>%s<devices/></domain>", os, features);
        return parse_ok(xml);
}

static void test_machine_acpi(void **state) {
        (void) state;
        struct domain *d;

        d = parse_os("<type arch='x86_64' machine='pc-q35-7.2'>hvm</type>", "<features><acpi/></features>");
        assert_true(d->q35);
        assert_true(d->acpi);
        assert_null(d->firmware);
        domain_free(d);

        d = parse_os("<type arch='x86_64' machine='q35'>hvm</type>", "");
        assert_true(d->q35);
        assert_false(d->acpi);
        domain_free(d);

        d = parse_os("<type arch='x86_64' machine='pc-i440fx-7.2'>hvm</type>", "<features><acpi/><apic/></features>");
        assert_false(d->q35);
        assert_true(d->acpi);
        domain_free(d);

        d = parse_os("<type arch='x86_64'>hvm</type>", "<features><apic/></features>");
        assert_false(d->q35);
        assert_null(d->machine);
        assert_false(d->acpi);
        domain_free(d);

        d = parse_os("<type arch='x86_64' machine='pc'>hvm</type>", "");
        assert_false(d->q35);
        domain_free(d);

        d = parse_os("<type arch='x86_64' machine='q35'>hvm</type>"
                     "<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>",
                     "<features><acpi/></features>");
        assert_non_null(d->firmware);
        assert_string_equal(d->firmware, "/usr/share/OVMF/OVMF_CODE_4M.fd");
        domain_free(d);

        /* no cells, no hostdevs, no controllers */
        d = parse_os("<type>hvm</type>", "");
        assert_int_equal(d->n_cells, 0);
        assert_int_equal(d->n_hostdevs, 0);
        assert_int_equal(d->n_controllers, 0);
        assert_int_equal(d->n_pci_uses, 0);
        assert_null(d->requested_policy);
        assert_null(d->policy_tag);
        domain_free(d);
}

static void test_metadata(void **state) {
        (void) state;
        static const char xml[] =
                "<domain type='kvm'><name>m</name>"
                "<metadata>"
                "<other:topology xmlns:other='urn:not:pcinuma'/>"
                "<pcinuma:topology xmlns:pcinuma='urn:pcinuma:topology:1' version='1' policy='require' migratable='no'/>"
                "</metadata><devices/></domain>";
        _cleanup_domain_ struct domain *d = parse_ok(xml);
        assert_non_null(d->mark);
        assert_non_null(d->mark->ns);
        assert_string_equal((const char *) d->mark->ns->href, PCINUMA_TOPOLOGY_NS);
        assert_string_equal((const char *) d->mark->name, "topology");
        _cleanup_free_ char *policy = xml_prop(d->mark, "policy");
        assert_string_equal(policy, "require");
        assert_null(d->requested_policy);

        /* a <topology> in another namespace is not our mark; a policy
         * element without a tag */
        static const char xml2[] =
                "<domain type='kvm'><name>m</name>"
                "<metadata>"
                "<other:topology xmlns:other='urn:not:pcinuma'/>"
                "<p:policy xmlns:p='urn:pcinuma:policy:1' name='require'/>"
                "</metadata><devices/></domain>";
        _cleanup_domain_ struct domain *d2 = parse_ok(xml2);
        assert_null(d2->mark);
        assert_string_equal(d2->requested_policy, "require");
        assert_null(d2->policy_tag);

        /* two policy elements: the last counts (the first is not leaked:
         * the sanitizer pass runs this test) */
        static const char xml3[] =
                "<domain type='kvm'><name>m</name>"
                "<metadata>"
                "<p:policy xmlns:p='urn:pcinuma:policy:1' name='require' tag='a'/>"
                "<p:policy xmlns:p='urn:pcinuma:policy:1' name='legacy' tag='b'/>"
                "</metadata><devices/></domain>";
        _cleanup_domain_ struct domain *d3 = parse_ok(xml3);
        assert_string_equal(d3->requested_policy, "legacy");
        assert_string_equal(d3->policy_tag, "b");

        /* two marks: which would a revert undo?  Refused (issue 13). */
        parse_fails("<domain type='kvm'><name>m</name>\n<metadata>\n"
                    "<pcinuma:topology xmlns:pcinuma='urn:pcinuma:topology:1' version='1' policy='require' migratable='no'/>\n"
                    "<q:topology xmlns:q='urn:pcinuma:topology:1' version='1' policy='legacy' migratable='no'/>\n"
                    "</metadata><devices/></domain>",
                    -EINVAL, "line 4: a second pcinuma mark", "line 3");
        /* ... or in a second <metadata> (fuzz-domain finding: the revert
         * removed the first, and the second came to light) */
        parse_fails("<domain type='kvm'><name>m</name>\n<metadata>\n"
                    "<pcinuma:topology xmlns:pcinuma='urn:pcinuma:topology:1' version='1' policy='require' migratable='no'/>\n"
                    "</metadata>\n<metadata>\n"
                    "<pcinuma:topology xmlns:pcinuma='urn:pcinuma:topology:1' version='1' policy='require' migratable='no'/>\n"
                    "</metadata><devices/></domain>",
                    -EINVAL, "line 6: a pcinuma mark in a second <metadata> element", "line 2");
}

/* ---- errors ------------------------------------------------------------------ */

static void test_errors_document(void **state) {
        (void) state;

        parse_fails("<domain type='kvm'><name>x</name>", -EINVAL, "line");
        parse_fails("<domain type='kvm'>\n<name>x</nam>\n</domain>", -EINVAL, "line 2");
        parse_fails_len("", 0, -EINVAL, "empty", (const char *) NULL);

        static const char nul[] = "<domain type='kvm'><name>x\0y</name><devices/></domain>";
        parse_fails_len(nul, sizeof nul - 1, -EINVAL, "NUL", (const char *) NULL);

        parse_fails("<!DOCTYPE domain [<!ENTITY x 'yyyyyyyy'>]><domain type='kvm'><name>&x;</name></domain>", -EINVAL, "DTD");
        parse_fails("<!DOCTYPE domain SYSTEM 'http://example.com/domain.dtd'><domain type='kvm'><name>x</name></domain>", -EINVAL, "DTD");
        parse_fails("<!DOCTYPE lolz [<!ENTITY lol 'lol'><!ENTITY lol2 '&lol;&lol;&lol;&lol;&lol;&lol;&lol;'>]>"
                    "<domain><name>&lol2;</name></domain>",
                    -EINVAL, "DTD");
        /* an undeclared entity is malformed, not expanded */
        {
                struct domain *d = NULL;
                _cleanup_free_ char *err = NULL;
                static const char x[] = "<domain type='kvm'><name>&xxe;</name><devices/></domain>";
                assert_int_equal(domain_parse(x, strlen(x), &d, &err), -EINVAL);
                assert_null(d);
                assert_non_null(err);
        }

        parse_fails("<network><name>default</name></network>", -EINVAL, "domain", "network");
        /* an undeclared prefix: libxml2 keeps a document, libvirt refuses it */
        parse_fails("<domain type='kvm'><name>x</name><devices><q:x/></devices></domain>", -EINVAL, "namespace error");
        parse_fails("<domain type='kvm'><name>x</name><devices><address functio:='0'/></devices></domain>", -EINVAL, "namespace error");

        /* over the size limit: refused before parsing */
        size_t len = DOMAIN_XML_MAX + 1;
        char *big = xmalloc(len);
        memset(big, ' ', len);
        static const char head[] = "<domain type='kvm'><name>big</name><devices/></domain>";
        memcpy(big, head, sizeof head - 1);
        parse_fails_len(big, len, -EFBIG, (const char *) NULL);
        /* exactly at the limit is not refused for its size */
        {
                struct domain *d = NULL;
                _cleanup_free_ char *err = NULL;
                int r = domain_parse(big, DOMAIN_XML_MAX, &d, &err);
                assert_int_not_equal(r, -EFBIG);
                domain_free(d);
        }
        free(big);
}

static void test_errors_cells(void **state) {
        (void) state;
        /* Any order of 0..n-1 is fine, as for libvirt; cells come out sorted. */
        {
                static const char permuted[] = "<domain><name>c</name><cpu><numa>"
                                               "<cell id='1' cpus='0' memory='1'/><cell id='0' cpus='1' memory='1'/>"
                                               "</numa></cpu><devices/></domain>";
                struct domain *d = NULL;
                char *err = NULL;
                assert_int_equal(domain_parse(permuted, strlen(permuted), &d, &err), 0);
                assert_int_equal(d->n_cells, 2);
                assert_int_equal(d->cells[0].id, 0);
                assert_true(bitmap_test(&d->cells[0].cpus, 1));
                assert_int_equal(d->cells[1].id, 1);
                assert_true(bitmap_test(&d->cells[1].cpus, 0));
                domain_free(d);
                free(err);
        }
        parse_fails("<domain><name>c</name><cpu><numa>"
                    "<cell id='0' cpus='0' memory='1'/><cell id='0' cpus='1' memory='1'/>"
                    "</numa></cpu><devices/></domain>",
                    -EINVAL, "cell");
        parse_fails("<domain><name>c</name><cpu><numa>"
                    "<cell id='0' cpus='0' memory='1'/><cell id='2' cpus='1' memory='1'/>"
                    "</numa></cpu><devices/></domain>",
                    -EINVAL, "cell");
        parse_fails("<domain><name>c</name><cpu><numa>"
                    "<cell id='zero' cpus='0' memory='1'/>"
                    "</numa></cpu><devices/></domain>",
                    -EINVAL, "zero");
        parse_fails("<domain><name>c</name><cpu><numa>"
                    "<cell id='0' cpus='3-1' memory='1'/>"
                    "</numa></cpu><devices/></domain>",
                    -EINVAL, "3-1");
}

#define HOSTDEV_SRC(bus) \
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='" bus "' slot='0x00' function='0x0'/></source>"

static void test_errors_devices(void **state) {
        (void) state;
        parse_fails("<domain><name>d</name><devices>"
                    HOSTDEV_SRC("0x3b") "</hostdev>"
                    HOSTDEV_SRC("0x3b") "</hostdev>"
                    "</devices></domain>",
                    -EINVAL, "0000:3b:00.0");
        /* the same device as a hostdev and as a hostdev interface */
        parse_fails("<domain><name>d</name><devices>"
                    HOSTDEV_SRC("0x3b") "</hostdev>"
                    "<interface type='hostdev'><source><address type='pci' domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/></source></interface>"
                    "</devices></domain>",
                    -EINVAL, "0000:3b:00.0");
        parse_fails("<domain><name>d</name><devices>"
                    "<controller type='pci' index='0' model='pcie-root'/>"
                    "<controller type='pci' index='1' model='pcie-root-port'/>"
                    "<controller type='pci' index='1' model='pcie-root-port'/>"
                    "</devices></domain>",
                    -EINVAL, "index");
        parse_fails("<domain><name>d</name><devices>"
                    HOSTDEV_SRC("0x3b") "<address type='pci' domain='0x0000' bus='0x00' slot='0x20' function='0x0'/></hostdev>"
                    "</devices></domain>",
                    -EINVAL, "address");
        parse_fails("<domain><name>d</name><devices>"
                    HOSTDEV_SRC("0x3b") "<address type='pci' domain='0x0000' bus='0x00' slot='0x02' function='0x8'/></hostdev>"
                    "</devices></domain>",
                    -EINVAL, "address");
        parse_fails("<domain><name>d</name><devices>"
                    "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x100' slot='0x00' function='0x0'/></source></hostdev>"
                    "</devices></domain>",
                    -EINVAL, "address");
        parse_fails("<domain><name>d</name><devices>"
                    "<hostdev mode='subsystem' type='pci' managed='yes'><source/></hostdev>"
                    "</devices></domain>",
                    -EINVAL, "source");
        parse_fails("<domain><name>d</name><devices>"
                    "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address/></source></hostdev>"
                    "</devices></domain>",
                    -EINVAL, "uuid");
        parse_fails("<domain><name>d</name><devices>"
                    "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='not-a-uuid'/></source></hostdev>"
                    "</devices></domain>",
                    -EINVAL, "not-a-uuid");
        /* a bad address anywhere in <devices> */
        parse_fails("<domain><name>d</name><devices>"
                    "<memballoon model='virtio'><address type='pci' domain='0x0000' bus='0x00' slot='0x40' function='0x0'/></memballoon>"
                    "</devices></domain>",
                    -EINVAL, "address");
        /* a bad memnode / vcpupin */
        parse_fails("<domain><name>d</name><numatune><memnode cellid='0' nodeset='x'/></numatune><devices/></domain>",
                    -EINVAL, "nodeset");
}

/* Issue 24: the parser's work is bounded by the input's size, not its
 * square.  More than DOMAIN_XML_TAGS_MAX tags are refused before parsing;
 * a duplicate among thousands of hostdevs is found by the index, with
 * both lines; every hostdev can be looked up; a vCPU pinned many times
 * keeps its last pin, once; a controller's model and a hostdev's source
 * are read only in no namespace (xmlutil.h). */
static void test_bounded(void **state) {
        (void) state;
        struct strbuf b = {0};
        strbuf_append(&b, "<domain><name>d</name><devices>");
        for (unsigned i = 0; i <= DOMAIN_XML_TAGS_MAX; i++)
                strbuf_append(&b, "<x/>");
        strbuf_append(&b, "</devices></domain>");
        parse_fails(b.buf, -E2BIG, "more than 16384 tags", "DOMAIN_XML_TAGS_MAX");
        strbuf_done(&b);

        /* 3000 hostdevs, the last a duplicate of the first; then without
         * it (the last on bus 0xff) */
        for (int dup = 1; dup >= 0; dup--) {
                strbuf_append(&b, "<domain><name>d</name><devices>\n");
                for (unsigned i = 0; i < 3000; i++) {
                        unsigned k = i < 2999 ? i : dup ? 0 : 0xff00;
                        strbuf_printf(&b, "<hostdev mode='subsystem' type='pci'><source><address bus='%u' slot='%u' "
                                          "function='%u'/></source></hostdev>\n", k >> 8, (k >> 3) & 0x1f, k & 7);
                }
                strbuf_append(&b, "</devices></domain>");
                if (dup) {
                        parse_fails(b.buf, -EINVAL, "line 3001: host device 0000:00:00.0 is assigned twice (also at line 2)");
                        strbuf_done(&b);
                }
        }
        struct domain *d = parse_ok(b.buf);
        assert_int_equal(d->n_hostdevs, 3000);
        assert_non_null(domain_find_pci_hostdev(d, &(struct pci_addr) { .bus = 0xff }));
        for (unsigned i = 0; i < 2999; i++) {
                struct pci_addr a = { .bus = (uint8_t) (i >> 8), .slot = (uint8_t) ((i >> 3) & 0x1f), .func = (uint8_t) (i & 7) };
                const struct domain_hostdev *hd = domain_find_pci_hostdev(d, &a);
                assert_non_null(hd);
                assert_true(pci_addr_eq(&hd->host, &a));
                assert_ptr_equal(hd, &d->hostdevs[i]);
        }
        struct pci_addr none = { .bus = 0xee };
        assert_null(domain_find_pci_hostdev(d, &none));
        assert_null(domain_find_mdev_hostdev(d, "4b20d080-1b54-4048-85b3-a6a62d165c01"));
        domain_free(d);
        strbuf_done(&b);

        /* a vCPU pinned again and again: one entry, the last pin */
        strbuf_append(&b, "<domain><name>d</name><cputune>");
        for (unsigned i = 0; i < 1000; i++)
                strbuf_printf(&b, "<vcpupin vcpu='%u' cpuset='%u'/>", i % 2, i);
        strbuf_append(&b, "</cputune><devices/></domain>");
        d = parse_ok(b.buf);
        assert_int_equal(d->n_vcpupins, 2);
        assert_int_equal(d->vcpupins[0].vcpu, 0);
        assert_bitmap_is(&d->vcpupins[0].cpuset, "998");
        assert_bitmap_is(&d->vcpupins[1].cpuset, "999");
        domain_free(d);
        strbuf_done(&b);

        /* namespaced look-alikes are not read */
        d = parse_ok("<domain xmlns:x='urn:x'><name>d</name><devices>"
                     "<controller type='pci' index='0' x:model='pcie-expander-bus' model='pcie-root'/>"
                     "<controller type='pci' index='1' x:model='pcie-root-port'/>"
                     "<hostdev mode='subsystem' type='pci'><x:source><address bus='0x99'/></x:source>"
                     "<source><x:address bus='0x98'/><address bus='0x3b'/></source></hostdev>"
                     "</devices></domain>");
        assert_string_equal(d->controllers[0].model, "pcie-root");
        assert_string_equal(d->controllers[1].model, "");
        assert_int_equal(d->hostdevs[0].host.bus, 0x3b);
        assert_non_null(d->hostdevs[0].src_addr);
        assert_true(xml_is(d->hostdevs[0].src_addr, "address"));
        assert_true(xml_is(d->hostdevs[0].src_addr->parent, "source"));
        domain_free(d);
}

static void test_ignored_devices(void **state) {
        (void) state;
        /* hostdev interfaces naming a network, USB and SCSI hostdevs,
         * vfio-ap mdevs: not ours */
        static const char xml[] =
                "<domain><name>i</name><devices>"
                "<interface type='hostdev'><source network='sriov-pool'/></interface>"
                "<interface type='network'><source network='default'/></interface>"
                "<hostdev mode='subsystem' type='usb'><source><address bus='1' device='2'/></source></hostdev>"
                "<hostdev mode='subsystem' type='scsi'><source><adapter name='scsi_host0'/><address bus='0' target='0' unit='0'/></source></hostdev>"
                "<hostdev mode='subsystem' type='mdev' model='vfio-ap'><source><address uuid='90c6c135-ad44-41d0-b1b7-bae47de48627'/></source></hostdev>"
                "<hostdev mode='subsystem' type='mdev' model='vfio-ccw'><source><address uuid='90c6c135-ad44-41d0-b1b7-bae47de48628'/></source></hostdev>"
                "</devices></domain>";
        _cleanup_domain_ struct domain *d = parse_ok(xml);
        assert_int_equal(d->n_hostdevs, 0);

        /* a guest address in decimal works as in libvirt */
        static const char xml2[] =
                "<domain><name>i</name><devices>"
                HOSTDEV_SRC("59") "<address type='pci' domain='0' bus='2' slot='10' function='3'/></hostdev>"
                "</devices></domain>";
        _cleanup_domain_ struct domain *d2 = parse_ok(xml2);
        assert_int_equal(d2->n_hostdevs, 1);
        assert_addr(&d2->hostdevs[0].host, 0, 59, 0, 0);
        assert_addr(&d2->hostdevs[0].guest, 0, 2, 10, 3);
}

/* ---- domain_format ------------------------------------------------------------- */

static void test_format(void **state) {
        (void) state;
        char *out = NULL;

        /* no declaration in, none out; one trailing newline */
        {
                static const char xml[] = "<domain type=\"kvm\">\n  <name>f</name>\n  <devices/>\n</domain>";
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_false(d->has_xml_decl);
                assert_int_equal(domain_format(d, &out), 0);
                assert_non_null(out);
                assert_null(strstr(out, "<?xml"));
                assert_string_equal(out, "<domain type=\"kvm\">\n  <name>f</name>\n  <devices/>\n</domain>\n");
                free(out);
        }
        /* several trailing newlines in: exactly one out */
        {
                static const char xml[] = "<domain type='kvm'><name>f</name></domain>\n\n\n";
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_int_equal(domain_format(d, &out), 0);
                size_t l = strlen(out);
                assert_true(l >= 2);
                assert_int_equal(out[l - 1], '\n');
                assert_int_not_equal(out[l - 2], '\n');
                assert_non_null(strstr(out, "<name>f</name>"));
                free(out);
        }
        /* a declaration in: one out */
        {
                static const char xml[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<domain type='kvm'><name>f</name></domain>\n";
                _cleanup_domain_ struct domain *d = parse_ok(xml);
                assert_true(d->has_xml_decl);
                assert_int_equal(domain_format(d, &out), 0);
                assert_true(strncmp(out, "<?xml", 5) == 0);
                assert_non_null(strstr(out, "<domain"));
                size_t l = strlen(out);
                assert_int_equal(out[l - 1], '\n');
                assert_int_not_equal(out[l - 2], '\n');
                free(out);
        }
        /* the full domain survives a format/parse round trip unchanged */
        {
                _cleanup_domain_ struct domain *d = parse_ok(full_xml);
                _cleanup_free_ char *once = NULL, *twice = NULL;
                assert_int_equal(domain_format(d, &once), 0);
                _cleanup_domain_ struct domain *d2 = parse_ok(once);
                assert_int_equal(domain_format(d2, &twice), 0);
                assert_string_equal(once, twice);
                assert_int_equal(d2->n_hostdevs, 4);
                assert_int_equal(d2->n_pci_uses, 7);
        }
}

static void test_reload(void **state) {
        (void) state;
        _cleanup_domain_ struct domain *d = parse_ok(full_xml);
        /* remove the first hostdev from the document and reload */
        xmlNodePtr e = d->hostdevs[0].elem;
        xmlUnlinkNode(e);
        xmlFreeNode(e);
        assert_int_equal(domain_reload(d, NULL), 0);
        assert_int_equal(d->n_hostdevs, 3);
        assert_addr(&d->hostdevs[0].host, 0, 0x5e, 0, 1);
        assert_int_equal(d->n_pci_uses, 6);
        assert_int_equal(d->n_cells, 4);
        assert_string_equal(d->name, "gpu-vm-1");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_full),
                cmocka_unit_test(test_resolve_backing_full),
                cmocka_unit_test(test_resolve_backing_memory),
                cmocka_unit_test(test_resolve_backing_cpus),
                cmocka_unit_test(test_resolve_backing_errors),
                cmocka_unit_test(test_machine_acpi),
                cmocka_unit_test(test_metadata),
                cmocka_unit_test(test_errors_document),
                cmocka_unit_test(test_errors_cells),
                cmocka_unit_test(test_errors_devices),
                cmocka_unit_test(test_ignored_devices),
                cmocka_unit_test(test_bounded),
                cmocka_unit_test(test_format),
                cmocka_unit_test(test_reload),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

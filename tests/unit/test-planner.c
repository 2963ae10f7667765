/* Tests for the planner (planner.h; docs/design.md §6 policies, §7 topology),
 * against host maps built in memory and domain XML built as strings. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <inttypes.h>

#include "domain.h"
#include "hostmap.h"
#include "planner.h"
#include "policy.h"
#include "rewrite.h"
#include "util.h"

#include "fake-host.h"

#define MDEV_UUID "4b20d080-1b54-4048-85b3-a6a62d165c01"
#define N_BIG 33        /* devices 0000:a0:00.0 .. 0000:c0:00.0, all on node 0 */

/* ---- the host ------------------------------------------------------------- */

/* Four nodes (node n holds CPUs 4n..4n+3), with the given sockets and
 * SLIT.  Devices: 10:00.0, 11:00.0 (node 0), 30:00.0 (node 1), 50:00.0
 * (node 2), the PF 51:00.0 (node 2) and its VF 51:00.2 (no node of its
 * own), 70:00.0 (node 3), 80:00.0 (no node), a0:00.0..c0:00.0 (node 0),
 * and an mdev whose parent is 10:00.0. */
static struct hostmap *make_host(const int dist[4][4], const int sockets[4]) {
        struct hostmap *h = fake_host_4n(dist, sockets);

        fake_host_add_dev(h, "0000:10:00.0", 0, 0x030200);
        fake_host_add_dev(h, "0000:11:00.0", 0, 0x020000);
        fake_host_add_dev(h, "0000:30:00.0", 1, 0x030200);
        fake_host_add_dev(h, "0000:50:00.0", 2, 0x010802);
        struct hostmap_device *pf = fake_host_add_dev(h, "0000:51:00.0", 2, 0x020000);
        pf->n_vfs = 4;
        struct hostmap_device *vf = fake_host_add_dev(h, "0000:51:00.2", -1, 0x020000);
        vf->has_physfn = true;
        assert_int_equal(pci_addr_parse("0000:51:00.0", &vf->physfn), 0);
        fake_host_add_dev(h, "0000:70:00.0", 3, 0x030200);
        fake_host_add_dev(h, "0000:80:00.0", -1, 0x030200);
        for (unsigned i = 0; i < N_BIG; i++) {
                char bdf[PCI_ADDR_STRLEN];
                snprintf(bdf, sizeof bdf, "0000:%02x:00.0", 0xa0 + i);
                fake_host_add_dev(h, bdf, 0, 0x020000);
        }
        struct pci_addr parent;
        assert_int_equal(pci_addr_parse("0000:10:00.0", &parent), 0);
        hostmap_add_mdev(h, MDEV_UUID, &parent);
        hostmap_finish(h);
        return h;
}

static struct hostmap *host;    /* the default host, built once */

static int group_setup(void **state) {
        (void) state;
        host = make_host(fake_host_slit, fake_host_sockets);
        return 0;
}

static int group_teardown(void **state) {
        (void) state;
        host = hostmap_free(host);
        return 0;
}

/* ---- domains ---------------------------------------------------------------- */

#define HOSTDEV(bus) \
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='" bus "' slot='0x00' function='0x0'/></source></hostdev>\n"
#define HOSTDEV_F(bus, fn) \
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='" bus "' slot='0x00' function='" fn "'/></source></hostdev>\n"
#define HOSTDEV_AT(bus, gbus, gslot, gfn) \
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='" bus "' slot='0x00' function='0x0'/></source>" \
        "<address type='pci' domain='0x0000' bus='" gbus "' slot='" gslot "' function='" gfn "'/></hostdev>\n"
#define MDEV \
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='" MDEV_UUID "'/></source></hostdev>\n"
#define ROOT_PORT(idx, slot) \
        "<controller type='pci' index='" idx "' model='pcie-root-port'><address type='pci' domain='0x0000' bus='0x00' slot='" slot "' function='0x0'/></controller>\n"
#define NIC_AT(bus, slot, fn) \
        "<interface type='network'><source network='default'/><model type='virtio'/>" \
        "<address type='pci' domain='0x0000' bus='" bus "' slot='" slot "' function='" fn "'/></interface>\n"

#define MEMNODE(cell, nodes) "<memnode cellid='" cell "' mode='strict' nodeset='" nodes "'/>"
#define MEMNODES4 MEMNODE("0", "0") MEMNODE("1", "1") MEMNODE("2", "2") MEMNODE("3", "3")

/* A domain with n_cells guest cells of two vCPUs each; numatune is the
 * inner XML of <numatune> (or NULL), devices that of <devices> after the
 * pcie-root controller. */
static char *make_domain(const char *machine, bool acpi, unsigned n_cells, const char *numatune, const char *devices) {
        struct strbuf b = {0};
        strbuf_append(&b, "<domain type='kvm'>\n  <name>plan-test</name>\n  <memory unit='MiB'>4096</memory>\n");
        strbuf_printf(&b, "  <vcpu placement='static'>%u</vcpu>\n  <os>\n    <type arch='x86_64'", n_cells ? n_cells * 2 : 2);
        if (machine)
                strbuf_printf(&b, " machine='%s'", machine);
        strbuf_append(&b, ">hvm</type>\n  </os>\n");
        if (acpi)
                strbuf_append(&b, "  <features>\n    <acpi/>\n    <apic/>\n  </features>\n");
        if (n_cells) {
                strbuf_append(&b, "  <cpu mode='host-passthrough'>\n    <numa>\n");
                for (unsigned i = 0; i < n_cells; i++)
                        strbuf_printf(&b, "      <cell id='%u' cpus='%u-%u' memory='512' unit='MiB'/>\n", i, 2 * i, 2 * i + 1);
                strbuf_append(&b, "    </numa>\n  </cpu>\n");
        }
        if (numatune)
                strbuf_printf(&b, "  <numatune>%s</numatune>\n", numatune);
        strbuf_printf(&b, "  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
                          "    <controller type='pci' index='0' model='pcie-root'/>\n%s  </devices>\n</domain>\n",
                      devices ? devices : "");
        return strbuf_steal(&b);
}

static struct domain *parse_resolved(const struct hostmap *h, const char *xml) {
        struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        int r = domain_parse(xml, strlen(xml), &d, &err);
        if (r < 0)
                fail_msg("domain_parse: %d %s\n%s", r, strna(err), xml);
        r = domain_resolve_backing(d, h, &err);
        if (r < 0)
                fail_msg("domain_resolve_backing: %d %s", r, strna(err));
        return d;
}

/* Parse xml, resolve its backing against h, plan under 'mode'.  *ret_d
 * gets the domain if non-NULL. */
static struct plan *plan_on(const struct hostmap *h, const char *xml, enum policy_mode mode, struct domain **ret_d) {
        struct domain *d = parse_resolved(h, xml);
        struct policy_settings s = { .mode = mode };
        struct plan *p = NULL;
        assert_int_equal(planner_run(d, h, &s, &p), 0);
        assert_non_null(p);
        assert_int_equal(p->mode, mode);
        if (ret_d)
                *ret_d = d;
        else
                domain_free(d);
        return p;
}

static struct plan *plan_xml(const char *xml, enum policy_mode mode) {
        return plan_on(host, xml, mode, NULL);
}

static const struct plan_device *find_dev(const struct plan *p, const char *name) {
        for (size_t i = 0; i < p->n_devices; i++)
                if (streq(p->devices[i].name, name))
                        return &p->devices[i];
        fail_msg("device %s not in the plan", name);
        return NULL;
}

static const struct plan_port *find_port(const struct plan *p, int index) {
        for (size_t i = 0; i < p->n_ports; i++)
                if (p->ports[i].index == index)
                        return &p->ports[i];
        fail_msg("root port %d not in the plan", index);
        return NULL;
}

static const struct plan_pxb *find_pxb_of_cell(const struct plan *p, unsigned cell) {
        for (size_t i = 0; i < p->n_pxbs; i++)
                if (p->pxbs[i].cell == cell)
                        return &p->pxbs[i];
        fail_msg("no expander bus for cell %u", cell);
        return NULL;
}

static void assert_contains(const char *haystack, const char *needle) {
        if (!haystack)
                fail_msg("NULL does not contain '%s'", needle);
        if (!strstr(haystack, needle))
                fail_msg("'%s' does not contain '%s'", haystack, needle);
}

static bool any_warning_contains(const struct plan *p, const char *needle) {
        for (size_t i = 0; i < p->n_warnings; i++)
                if (strstr(p->warnings[i], needle))
                        return true;
        return false;
}

/* A moved device: cell, root port, guest address and the port's pxb. */
static void assert_moved(const struct plan *p, const char *name, int cell) {
        const struct plan_device *pd = find_dev(p, name);
        if (pd->action != PLAN_MOVE)
                fail_msg("%s: action %s (%s), expected move", name, plan_action_to_string(pd->action), strna(pd->reason));
        assert_int_equal(pd->cell, cell);
        assert_true(pd->port_index > 0);
        assert_int_equal(pd->guest.domain, 0);
        assert_int_equal(pd->guest.bus, pd->port_index);
        assert_int_equal(pd->guest.slot, 0);
        assert_int_equal(pd->guest.func, 0);
        const struct plan_port *port = find_port(p, pd->port_index);
        assert_ptr_equal(&p->devices[port->device], pd);
        const struct plan_pxb *x = find_pxb_of_cell(p, (unsigned) cell);
        assert_int_equal(port->pxb_index, x->index);
}

static void assert_action(const struct plan *p, const char *name, enum plan_action a, const char *reason_part) {
        const struct plan_device *pd = find_dev(p, name);
        if (pd->action != a)
                fail_msg("%s: action %s (%s), expected %s", name, plan_action_to_string(pd->action), strna(pd->reason),
                         plan_action_to_string(a));
        if (reason_part)
                assert_contains(pd->reason, reason_part);
}

/* ---- placement ---------------------------------------------------------------- */

static void test_require_all_local(void **state) {
        (void) state;
        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4,
                                               HOSTDEV("0x50") HOSTDEV("0x10") HOSTDEV("0x70") HOSTDEV("0x30"));
        _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);

        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_null(p->reason);
        assert_int_equal(p->n_devices, 4);
        assert_int_equal(p->n_warnings, 0);
        assert_int_equal(p->n_pruned, 0);

        static const struct {
                const char *name;
                int node, socket;
                uint32_t class;
        } want[] = {
                { "0000:50:00.0", 2, 1, 0x010802 },
                { "0000:10:00.0", 0, 0, 0x030200 },
                { "0000:70:00.0", 3, 1, 0x030200 },
                { "0000:30:00.0", 1, 0, 0x030200 },
        };
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                const struct plan_device *pd = &p->devices[i];
                assert_string_equal(pd->name, want[i].name);
                assert_int_equal(pd->hostdev, i);
                assert_true(pd->known);
                assert_int_equal(pd->class, want[i].class);
                assert_int_equal(pd->host_node, want[i].node);
                assert_int_equal(pd->host_socket, want[i].socket);
                assert_moved(p, want[i].name, want[i].node);
                assert_contains(pd->reason, "local");
        }

        /* one pxb per cell, in cell order, indexes above pcie-root's 0 */
        assert_int_equal(p->first_index, 1);
        assert_int_equal(p->n_pxbs, 4);
        for (unsigned i = 0; i < 4; i++) {
                const struct plan_pxb *x = &p->pxbs[i];
                assert_int_equal(x->cell, i);
                assert_int_equal(x->index, 1 + (int) i);
                assert_int_equal(x->n_ports, 1);
                char nodes[8];
                snprintf(nodes, sizeof nodes, "%u", i);
                assert_string_equal(x->host_nodes, nodes);
                /* on pcie.0, never slot 0, 1 (while others are free) or 0x1f */
                assert_int_equal(x->addr.domain, 0);
                assert_int_equal(x->addr.bus, 0);
                assert_int_equal(x->addr.func, 0);
                assert_true(x->addr.slot >= 2 && x->addr.slot <= 0x1e);
                for (unsigned k = 0; k < i; k++)
                        assert_int_not_equal(p->pxbs[k].addr.slot, x->addr.slot);
        }
        /* busNr top-down from 254: each takes 1 + its ports */
        assert_int_equal(p->pxbs[0].bus_nr, 253);
        assert_int_equal(p->pxbs[1].bus_nr, 251);
        assert_int_equal(p->pxbs[2].bus_nr, 249);
        assert_int_equal(p->pxbs[3].bus_nr, 247);

        /* root ports after the pxbs, in device order */
        assert_int_equal(p->n_ports, 4);
        for (size_t k = 0; k < 4; k++) {
                const struct plan_port *port = &p->ports[k];
                assert_int_equal(port->index, 5 + (int) k);
                assert_int_equal(port->device, k);
                assert_int_equal(port->slot, 0);
                assert_int_equal(port->func, 0);
                assert_false(port->multifunction);
                assert_int_equal(p->devices[k].port_index, port->index);
        }
        assert_int_equal(find_port(p, 5)->pxb_index, 3);       /* 50:00.0 -> cell 2 */
        assert_int_equal(find_port(p, 6)->pxb_index, 1);       /* 10:00.0 -> cell 0 */
        assert_int_equal(find_port(p, 7)->pxb_index, 4);
        assert_int_equal(find_port(p, 8)->pxb_index, 2);

        assert_contains(p->cells_desc, "host node 0");
        assert_contains(p->cells_desc, "host node 3");

        assert_string_equal(plan_verdict_to_string(PLAN_APPLY), "apply");
        assert_string_equal(plan_action_to_string(PLAN_MOVE), "move");
        assert_string_equal(plan_action_to_string(PLAN_STAY), "stay");
}

static void test_all_policies_all_local(void **state) {
        (void) state;
        /* where every device has a local cell, every policy but off gives
         * the same plan */
        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4, HOSTDEV("0x10") HOSTDEV("0x70"));
        static const enum policy_mode modes[] = { POLICY_LEGACY, POLICY_PREFERRED, POLICY_SOCKET, POLICY_REQUIRE };
        for (size_t i = 0; i < ELEMENTSOF(modes); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, modes[i]);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:10:00.0", 0);
                assert_moved(p, "0000:70:00.0", 3);
                assert_int_equal(p->n_pxbs, 2);
                assert_int_equal(p->pxbs[0].cell, 0);
                assert_int_equal(p->pxbs[1].cell, 3);
                assert_int_equal(p->pxbs[0].index, 1);
                assert_int_equal(p->pxbs[1].index, 2);
                assert_int_equal(p->ports[0].index, 3);
                assert_int_equal(p->ports[1].index, 4);
                assert_int_equal(p->pxbs[0].bus_nr, 253);
                assert_int_equal(p->pxbs[1].bus_nr, 251);
        }
}

static void test_off(void **state) {
        (void) state;
        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4, HOSTDEV("0x10") HOSTDEV("0x80"));
        _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_OFF);
        assert_int_equal(p->verdict, PLAN_UNCHANGED);
        assert_contains(p->reason, "off");
        assert_int_equal(p->n_devices, 2);
        for (size_t i = 0; i < p->n_devices; i++) {
                assert_int_equal(p->devices[i].action, PLAN_STAY);
                assert_int_equal(p->devices[i].port_index, -1);
        }
        assert_int_equal(p->n_pxbs, 0);
        assert_int_equal(p->n_ports, 0);
        assert_int_equal(p->n_pruned, 0);

        /* off does not even look at eligibility */
        _cleanup_free_ char *xml2 = make_domain("pc-i440fx-7.2", false, 0, NULL, HOSTDEV("0x10"));
        _cleanup_plan_ struct plan *p2 = plan_xml(xml2, POLICY_OFF);
        assert_int_equal(p2->verdict, PLAN_UNCHANGED);
        assert_int_equal(p2->n_warnings, 0);
}

static void test_no_devices(void **state) {
        (void) state;
        _cleanup_free_ char *xml = make_domain("q35", true, 2, NULL, NIC_AT("0x00", "0x02", "0x0"));
        _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
        assert_int_equal(p->verdict, PLAN_UNCHANGED);
        assert_int_equal(p->n_devices, 0);
        assert_int_equal(p->n_pxbs, 0);
        /* an ineligible domain without devices is not refused either */
        _cleanup_free_ char *xml2 = make_domain("pc", false, 0, NULL, NULL);
        _cleanup_plan_ struct plan *p2 = plan_xml(xml2, POLICY_REQUIRE);
        assert_int_equal(p2->verdict, PLAN_UNCHANGED);
}

static void test_balance(void **state) {
        (void) state;
        /* two cells on node 0: node-0 devices alternate, starting at cell 0 */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "0") MEMNODE("1", "0"),
                                                       HOSTDEV("0x10") HOSTDEV("0x11") MDEV HOSTDEV("0xa0"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:10:00.0", 0);
                assert_moved(p, "0000:11:00.0", 1);
                assert_moved(p, "mdev " MDEV_UUID, 0);
                assert_moved(p, "0000:a0:00.0", 1);
                assert_int_equal(p->n_pxbs, 2);
                assert_int_equal(p->pxbs[0].n_ports, 2);
                assert_int_equal(p->pxbs[1].n_ports, 2);
                assert_int_equal(p->pxbs[0].bus_nr, 252);
                assert_int_equal(p->pxbs[1].bus_nr, 249);
                assert_string_equal(p->pxbs[0].host_nodes, "0");
                assert_string_equal(p->pxbs[1].host_nodes, "0");
        }
        /* cells 1 and 2 on node 0, cell 0 on node 1: ties go to the lowest
         * local cell, and a non-local cell is never used under require */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 3, MEMNODE("0", "1") MEMNODE("1", "0") MEMNODE("2", "0"),
                                                       HOSTDEV("0x10") HOSTDEV("0x11") HOSTDEV("0xa0") HOSTDEV("0x30"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:10:00.0", 1);
                assert_moved(p, "0000:11:00.0", 2);
                assert_moved(p, "0000:a0:00.0", 1);
                assert_moved(p, "0000:30:00.0", 0);
                assert_int_equal(p->n_pxbs, 3);
                assert_int_equal(find_pxb_of_cell(p, 1)->n_ports, 2);
                assert_int_equal(find_pxb_of_cell(p, 2)->n_ports, 1);
        }
        /* a cell backed by nodes 0-1 is local to both; the balance counts
         * every device, whatever its node */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "0-1") MEMNODE("1", "1"),
                                                       HOSTDEV("0x30") HOSTDEV("0x10") HOSTDEV("0x11") HOSTDEV("0xa0"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:30:00.0", 0);     /* tie: lowest id */
                assert_moved(p, "0000:10:00.0", 0);     /* only cell 0 is local */
                assert_moved(p, "0000:11:00.0", 0);
                assert_moved(p, "0000:a0:00.0", 0);
                assert_string_equal(find_pxb_of_cell(p, 0)->host_nodes, "0-1");
                assert_int_equal(p->n_pxbs, 1);
        }
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "0-1") MEMNODE("1", "1"),
                                                       HOSTDEV("0x10") HOSTDEV("0x30"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_moved(p, "0000:10:00.0", 0);
                assert_moved(p, "0000:30:00.0", 1);     /* cell 0 has one already */
        }
}

static void test_vf_and_mdev(void **state) {
        (void) state;
        /* the host map: the VF inherits its PF's node, the mdev its parent's */
        struct pci_addr a;
        assert_int_equal(pci_addr_parse("0000:51:00.2", &a), 0);
        const struct hostmap_device *vf = hostmap_find_device(host, &a);
        assert_non_null(vf);
        assert_int_equal(vf->sysfs_node, -1);
        assert_int_equal(vf->node, 2);
        const struct hostmap_mdev *m = hostmap_find_mdev(host, MDEV_UUID);
        assert_non_null(m);
        assert_int_equal(m->node, 0);

        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4, HOSTDEV_F("0x51", "0x2") MDEV);
        _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
        assert_int_equal(p->verdict, PLAN_APPLY);
        const struct plan_device *pd = find_dev(p, "0000:51:00.2");
        assert_true(pd->known);
        assert_int_equal(pd->host_node, 2);
        assert_int_equal(pd->host_socket, 1);
        assert_moved(p, "0000:51:00.2", 2);
        assert_contains(pd->reason, "local");

        pd = find_dev(p, "mdev " MDEV_UUID);
        assert_true(pd->known);
        assert_int_equal(pd->host_node, 0);
        assert_int_equal(pd->host_socket, 0);
        assert_int_equal(pd->class, 0x030200);  /* the parent's class */
        assert_moved(p, "mdev " MDEV_UUID, 0);
}

static void test_device_without_node(void **state) {
        (void) state;
        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4,
                                               HOSTDEV("0x10") HOSTDEV("0x80") HOSTDEV("0x99"));
        /* require and socket refuse a device without a node, and one that
         * is not on the host */
        static const enum policy_mode strict[] = { POLICY_REQUIRE, POLICY_SOCKET };
        for (size_t i = 0; i < ELEMENTSOF(strict); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, strict[i]);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_non_null(p->reason);
                assert_contains(p->reason, policy_mode_to_string(strict[i]));
                const struct plan_device *pd = find_dev(p, "0000:80:00.0");
                assert_true(pd->known);
                assert_int_equal(pd->host_node, -1);
                assert_int_equal(pd->host_socket, -1);
                assert_action(p, "0000:80:00.0", PLAN_REFUSE, "NUMA node");
                pd = find_dev(p, "0000:99:00.0");
                assert_false(pd->known);
                assert_int_equal(pd->class, 0);
                assert_action(p, "0000:99:00.0", PLAN_REFUSE, "not present");
        }
        /* preferred and legacy leave them on pcie.0 and move the others */
        static const enum policy_mode lax[] = { POLICY_PREFERRED, POLICY_LEGACY };
        for (size_t i = 0; i < ELEMENTSOF(lax); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, lax[i]);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:10:00.0", 0);
                assert_action(p, "0000:80:00.0", PLAN_STAY, "pcie.0");
                assert_action(p, "0000:99:00.0", PLAN_STAY, "pcie.0");
                assert_int_equal(find_dev(p, "0000:80:00.0")->port_index, -1);
                assert_int_equal(find_dev(p, "0000:80:00.0")->cell, -1);
                assert_int_equal(p->n_pxbs, 1);
                assert_int_equal(p->n_ports, 1);
        }
        /* nothing to move at all: unchanged */
        _cleanup_free_ char *xml2 = make_domain("q35", true, 4, MEMNODES4, HOSTDEV("0x80"));
        _cleanup_plan_ struct plan *p2 = plan_xml(xml2, POLICY_LEGACY);
        assert_int_equal(p2->verdict, PLAN_UNCHANGED);
        assert_int_equal(p2->n_pxbs, 0);
        assert_action(p2, "0000:80:00.0", PLAN_STAY, NULL);
}

static void test_no_local_cell(void **state) {
        (void) state;
        /* device on node 3 (socket 1); cells on nodes 0 and 1 (socket 0) */
        _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "0") MEMNODE("1", "1"), HOSTDEV("0x70"));
        static const enum policy_mode refusing[] = { POLICY_REQUIRE, POLICY_LEGACY, POLICY_SOCKET };
        for (size_t i = 0; i < ELEMENTSOF(refusing); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, refusing[i]);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_action(p, "0000:70:00.0", PLAN_REFUSE, "node 3");
                if (refusing[i] == POLICY_SOCKET)
                        assert_contains(find_dev(p, "0000:70:00.0")->reason, "socket 1");
        }
        /* preferred: the nearest cell by distance (32 both: the lowest id) */
        _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_PREFERRED);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_moved(p, "0000:70:00.0", 0);
        assert_contains(find_dev(p, "0000:70:00.0")->reason, "nearest");
}

static void test_socket_fallback(void **state) {
        (void) state;
        /* device on node 2 (socket 1); cell 0 on node 0 (socket 0), cell 1
         * on node 3 (socket 1) */
        _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "0") MEMNODE("1", "3"), HOSTDEV("0x50"));
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_SOCKET);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:50:00.0", 1);
                assert_contains(find_dev(p, "0000:50:00.0")->reason, "socket");
        }
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_PREFERRED);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:50:00.0", 1);
        }
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_action(p, "0000:50:00.0", PLAN_REFUSE, "node 2");
        }
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_LEGACY);
                assert_int_equal(p->verdict, PLAN_REFUSED);
        }
}

static void test_socket_nearest_by_distance(void **state) {
        (void) state;
        /* one socket, four nodes; from node 0: node 1 at 16, node 2 at 11,
         * node 3 at 12 */
        static const int dist[4][4] = {
                { 10, 16, 11, 12 },
                { 16, 10, 16, 16 },
                { 11, 16, 10, 16 },
                { 12, 16, 16, 10 },
        };
        static const int sockets[4] = { 0, 0, 0, 0 };
        _cleanup_hostmap_ struct hostmap *h = make_host(dist, sockets);
        /* cells on nodes 3, 1, 2: the nearest same-socket cell is 2, even
         * for the second device (distance before balance) */
        _cleanup_free_ char *xml = make_domain("q35", true, 3, MEMNODE("0", "3") MEMNODE("1", "1") MEMNODE("2", "2"),
                                               HOSTDEV("0x10") HOSTDEV("0x11"));
        static const enum policy_mode modes[] = { POLICY_SOCKET, POLICY_PREFERRED };
        for (size_t i = 0; i < ELEMENTSOF(modes); i++) {
                _cleanup_plan_ struct plan *p = plan_on(h, xml, modes[i], NULL);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:10:00.0", 2);
                assert_moved(p, "0000:11:00.0", 2);
                assert_int_equal(p->n_pxbs, 1);
        }
        _cleanup_plan_ struct plan *p = plan_on(h, xml, POLICY_REQUIRE, NULL);
        assert_int_equal(p->verdict, PLAN_REFUSED);
}

static void test_preferred_nearest(void **state) {
        (void) state;
        /* two sockets; from node 0, node 3 (30) is nearer than node 2 (32) */
        static const int dist[4][4] = {
                { 10, 12, 32, 30 },
                { 12, 10, 32, 32 },
                { 32, 32, 10, 12 },
                { 30, 32, 12, 10 },
        };
        _cleanup_hostmap_ struct hostmap *h = make_host(dist, fake_host_sockets);
        _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "2") MEMNODE("1", "3"), HOSTDEV("0x10"));
        {
                _cleanup_plan_ struct plan *p = plan_on(h, xml, POLICY_PREFERRED, NULL);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:10:00.0", 1);
                assert_contains(find_dev(p, "0000:10:00.0")->reason, "nearest");
        }
        {
                _cleanup_plan_ struct plan *p = plan_on(h, xml, POLICY_SOCKET, NULL);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_action(p, "0000:10:00.0", PLAN_REFUSE, "socket 0");
        }
}

static void test_preferred_pcie0(void **state) {
        (void) state;
        /* cells that nothing backs: preferred keeps the device on pcie.0 */
        _cleanup_free_ char *xml = make_domain("q35", true, 2, NULL, HOSTDEV("0x10") HOSTDEV("0x80"));
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_PREFERRED);
                assert_int_equal(p->verdict, PLAN_UNCHANGED);
                assert_action(p, "0000:10:00.0", PLAN_STAY, "pcie.0");
                assert_action(p, "0000:80:00.0", PLAN_STAY, "pcie.0");
                assert_int_equal(p->n_pxbs, 0);
                assert_int_equal(p->n_ports, 0);
                assert_contains(p->cells_desc, "no host node");
        }
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_action(p, "0000:10:00.0", PLAN_REFUSE, NULL);
        }
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_LEGACY);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_action(p, "0000:10:00.0", PLAN_REFUSE, NULL);
                assert_action(p, "0000:80:00.0", PLAN_STAY, NULL);
        }
}

static void check_not_eligible(const char *xml, const char *why) {
        static const enum policy_mode strict[] = { POLICY_REQUIRE, POLICY_SOCKET };
        for (size_t i = 0; i < ELEMENTSOF(strict); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, strict[i]);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_contains(p->reason, why);
                for (size_t k = 0; k < p->n_devices; k++) {
                        assert_int_equal(p->devices[k].action, PLAN_REFUSE);
                        assert_contains(p->devices[k].reason, why);
                }
                assert_int_equal(p->n_pxbs, 0);
                assert_int_equal(p->n_ports, 0);
        }
        static const enum policy_mode lax[] = { POLICY_PREFERRED, POLICY_LEGACY };
        for (size_t i = 0; i < ELEMENTSOF(lax); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, lax[i]);
                assert_int_equal(p->verdict, PLAN_SKIP);
                assert_contains(p->reason, why);
                assert_true(p->n_warnings >= 1);
                assert_true(any_warning_contains(p, why));
                for (size_t k = 0; k < p->n_devices; k++) {
                        assert_int_equal(p->devices[k].action, PLAN_STAY);
                        assert_int_equal(p->devices[k].port_index, -1);
                }
                assert_int_equal(p->n_pxbs, 0);
                assert_int_equal(p->n_ports, 0);
        }
}

static void test_not_eligible(void **state) {
        (void) state;
        _cleanup_free_ char *no_cells = make_domain("q35", true, 0, NULL, HOSTDEV("0x10") HOSTDEV("0x70"));
        check_not_eligible(no_cells, "NUMA");
        _cleanup_free_ char *i440fx = make_domain("pc-i440fx-7.2", true, 4, MEMNODES4, HOSTDEV("0x10"));
        check_not_eligible(i440fx, "q35");
        _cleanup_free_ char *no_machine = make_domain(NULL, true, 4, MEMNODES4, HOSTDEV("0x10"));
        check_not_eligible(no_machine, "q35");
        _cleanup_free_ char *no_acpi = make_domain("pc-q35-7.2", false, 4, MEMNODES4, HOSTDEV("0x10"));
        check_not_eligible(no_acpi, "ACPI");
}

/* ---- layout ----------------------------------------------------------------- */

static void test_layout_indexes(void **state) {
        (void) state;
        /* controllers 0, 1, 4; an address on bus 9 (whatever sits there):
         * new indexes start at 10 */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4,
                                                       ROOT_PORT("1", "0x02") ROOT_PORT("4", "0x03")
                                                       NIC_AT("0x00", "0x04", "0x0")
                                                       NIC_AT("0x09", "0x00", "0x0")
                                                       HOSTDEV("0x10") HOSTDEV("0x30"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_int_equal(p->first_index, 10);
                assert_int_equal(p->pxbs[0].index, 10);
                assert_int_equal(p->pxbs[1].index, 11);
                assert_int_equal(p->ports[0].index, 12);
                assert_int_equal(p->ports[1].index, 13);
                assert_int_equal(find_dev(p, "0000:10:00.0")->guest.bus, 12);
                assert_int_equal(find_dev(p, "0000:30:00.0")->guest.bus, 13);
                /* slots 2, 3 and 4 are used on pcie.0 */
                for (size_t i = 0; i < p->n_pxbs; i++) {
                        uint8_t s = p->pxbs[i].addr.slot;
                        assert_true(s != 0 && s != 1 && s != 2 && s != 3 && s != 4 && s != 0x1f);
                }
                assert_int_not_equal(p->pxbs[0].addr.slot, p->pxbs[1].addr.slot);
                /* existing root ports holding nothing that moves stay */
                assert_int_equal(p->n_pruned, 0);
        }
        /* the highest controller index (6) above every addressed bus */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4,
                                                       ROOT_PORT("1", "0x02") ROOT_PORT("6", "0x03")
                                                       NIC_AT("0x01", "0x00", "0x0")
                                                       HOSTDEV("0x10"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_int_equal(p->first_index, 7);
                assert_int_equal(p->pxbs[0].index, 7);
                assert_int_equal(p->ports[0].index, 8);
        }
}

static void test_layout_slots(void **state) {
        (void) state;
        /* every pcie.0 slot 2..0x1e used: the pxb gets slot 1 */
        struct strbuf devs = {0};
        for (unsigned s = 2; s <= 0x1e; s++)
                strbuf_printf(&devs, "<interface type='network'><source network='default'/>"
                                     "<address type='pci' domain='0x0000' bus='0x00' slot='0x%02x' function='0x0'/></interface>\n", s);
        strbuf_append(&devs, HOSTDEV("0x10"));
        _cleanup_free_ char *xml = make_domain("q35", true, 1, MEMNODE("0", "0"), devs.buf);
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_int_equal(p->n_pxbs, 1);
                assert_int_equal(p->pxbs[0].addr.slot, 1);
        }
        /* 1..0x1e used: 0 and 0x1f are never taken, so no slot is free */
        strbuf_printf(&devs, "<interface type='network'><source network='default'/>"
                             "<address type='pci' domain='0x0000' bus='0x00' slot='0x01' function='0x0'/></interface>\n");
        _cleanup_free_ char *xml2 = make_domain("q35", true, 1, MEMNODE("0", "0"), devs.buf);
        strbuf_done(&devs);
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml2, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_contains(p->reason, "slot");
                assert_action(p, "0000:10:00.0", PLAN_REFUSE, "slot");
                assert_int_equal(p->n_pxbs, 0);
        }
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml2, POLICY_LEGACY);
                assert_int_equal(p->verdict, PLAN_SKIP);
                assert_action(p, "0000:10:00.0", PLAN_STAY, NULL);
                assert_true(any_warning_contains(p, "slot"));
                assert_int_equal(p->n_pxbs, 0);
                assert_int_equal(p->n_ports, 0);
        }
        /* a slot used by a device that stays is not taken: 80:00.0 (no
         * node) on 00:02.0 stays under legacy */
        _cleanup_free_ char *xml3 = make_domain("q35", true, 1, MEMNODE("0", "0"),
                                                HOSTDEV_AT("0x80", "0x00", "0x02", "0x0") HOSTDEV("0x10"));
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml3, POLICY_LEGACY);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_action(p, "0000:80:00.0", PLAN_STAY, NULL);
                assert_int_equal(p->n_pxbs, 1);
                assert_int_not_equal(p->pxbs[0].addr.slot, 2);
                assert_int_not_equal(p->pxbs[0].addr.slot, 0);
                assert_int_not_equal(p->pxbs[0].addr.slot, 1);
        }
}

static void test_busnr(void **state) {
        (void) state;
        /* one pxb with three ports: 255 - (1 + 3) */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 1, MEMNODE("0", "0"),
                                                       HOSTDEV("0x10") HOSTDEV("0x11") HOSTDEV("0xa0"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_int_equal(p->n_pxbs, 1);
                assert_int_equal(p->pxbs[0].n_ports, 3);
                assert_int_equal(p->pxbs[0].bus_nr, 251);
                assert_int_equal(p->n_ports, 3);
                for (size_t k = 0; k < 3; k++) {
                        assert_int_equal(p->ports[k].slot, k);
                        assert_int_equal(p->ports[k].func, 0);
                        assert_false(p->ports[k].multifunction);
                        assert_int_equal(p->ports[k].pxb_index, p->pxbs[0].index);
                }
        }
        /* two pxbs: cell 0 with two ports (252-254), cell 1 with one (250-251) */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "0") MEMNODE("1", "1"),
                                                       HOSTDEV("0x30") HOSTDEV("0x10") HOSTDEV("0x11"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_int_equal(find_pxb_of_cell(p, 0)->bus_nr, 252);
                assert_int_equal(find_pxb_of_cell(p, 1)->bus_nr, 250);
        }
        /* below an existing expander bus (busNr 200, one root port) */
        {
                _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4,
                                                       "<controller type='pci' index='1' model='pcie-expander-bus'><model name='pxb-pcie'/>"
                                                       "<target busNr='200'><node>1</node></target>"
                                                       "<address type='pci' domain='0x0000' bus='0x00' slot='0x02' function='0x0'/></controller>\n"
                                                       "<controller type='pci' index='2' model='pcie-root-port'>"
                                                       "<address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/></controller>\n"
                                                       NIC_AT("0x02", "0x00", "0x0")
                                                       HOSTDEV("0x10") HOSTDEV("0x50"));
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_int_equal(p->first_index, 3);
                assert_int_equal(p->n_pxbs, 2);
                assert_int_equal(find_pxb_of_cell(p, 0)->bus_nr, 198);
                assert_int_equal(find_pxb_of_cell(p, 2)->bus_nr, 196);
                assert_int_equal(p->busnr_limit, 200);
                for (size_t i = 0; i < p->n_pxbs; i++)
                        assert_int_not_equal(p->pxbs[i].addr.slot, 2);
        }
}

/* An expander bus at busNr 20 (no ports), and root ports 2..(1+n) on
 * pcie.0, so the pcie.0 side needs buses 0..n. */
static char *crowded_domain(unsigned n_ports) {
        struct strbuf devs = {0};
        strbuf_append(&devs, "<controller type='pci' index='1' model='pcie-expander-bus'><model name='pxb-pcie'/>"
                             "<target busNr='20'><node>1</node></target>"
                             "<address type='pci' domain='0x0000' bus='0x00' slot='0x02' function='0x0'/></controller>\n");
        for (unsigned i = 0; i < n_ports; i++)
                strbuf_printf(&devs, "<controller type='pci' index='%u' model='pcie-root-port'>"
                                     "<address type='pci' domain='0x0000' bus='0x00' slot='0x%02x' function='0x0'/></controller>\n",
                              2 + i, 3 + i);
        strbuf_append(&devs, HOSTDEV("0x10"));
        char *xml = make_domain("q35", true, 2, MEMNODE("0", "0") MEMNODE("1", "1"), devs.buf);
        strbuf_done(&devs);
        return xml;
}

static void test_busnr_exhausted(void **state) {
        (void) state;
        /* 17 root ports: pcie.0 uses 0-17, the new pxb takes 18-19 below 20 */
        {
                _cleanup_free_ char *xml = crowded_domain(17);
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_int_equal(p->n_pxbs, 1);
                assert_int_equal(p->pxbs[0].bus_nr, 18);
                assert_int_equal(p->first_index, 19);
        }
        /* 18 root ports: pcie.0 uses 0-18; 18-19 do not fit */
        _cleanup_free_ char *xml = crowded_domain(18);
        static const enum policy_mode strict[] = { POLICY_REQUIRE, POLICY_SOCKET };
        for (size_t i = 0; i < ELEMENTSOF(strict); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, strict[i]);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_contains(p->reason, "bus numbers");
                assert_action(p, "0000:10:00.0", PLAN_REFUSE, "bus numbers");
                assert_int_equal(p->n_pxbs, 0);
                assert_int_equal(p->n_ports, 0);
        }
        static const enum policy_mode lax[] = { POLICY_LEGACY, POLICY_PREFERRED };
        for (size_t i = 0; i < ELEMENTSOF(lax); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, lax[i]);
                assert_int_equal(p->verdict, PLAN_SKIP);
                assert_contains(p->reason, "bus numbers");
                assert_true(any_warning_contains(p, "bus numbers"));
                assert_action(p, "0000:10:00.0", PLAN_STAY, NULL);
                assert_int_equal(find_dev(p, "0000:10:00.0")->port_index, -1);
                assert_int_equal(p->n_pxbs, 0);
                assert_int_equal(p->n_ports, 0);
        }
}

static void test_index_exhausted(void **state) {
        (void) state;
        /* the highest existing index is 254: a pxb and a root port do not fit */
        _cleanup_free_ char *xml = make_domain("q35", true, 1, MEMNODE("0", "0"), ROOT_PORT("254", "0x02") HOSTDEV("0x10"));
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
                assert_int_equal(p->verdict, PLAN_REFUSED);
                assert_contains(p->reason, "index");
                assert_action(p, "0000:10:00.0", PLAN_REFUSE, NULL);
        }
        {
                _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_LEGACY);
                assert_int_equal(p->verdict, PLAN_SKIP);
                assert_action(p, "0000:10:00.0", PLAN_STAY, NULL);
        }
}

static void test_pruned(void **state) {
        (void) state;
        /* root port 1 holds only 10:00.0 (moves): pruned.  Root port 2
         * holds 11:00.0 at function 0 and 80:00.0 (no node, stays) at
         * function 1: 11:00.0 must stay too (without function 0 the guest
         * would not see function 1), so port 2 is kept.  Root port 3 holds
         * a NIC: kept. */
        _cleanup_free_ char *xml = make_domain("q35", true, 1, MEMNODE("0", "0"),
                                               ROOT_PORT("1", "0x02") ROOT_PORT("2", "0x03") ROOT_PORT("3", "0x04")
                                               HOSTDEV_AT("0x10", "0x01", "0x00", "0x0")
                                               HOSTDEV_AT("0x11", "0x02", "0x00", "0x0")
                                               HOSTDEV_AT("0x80", "0x02", "0x00", "0x1")
                                               NIC_AT("0x03", "0x00", "0x0"));
        static const enum policy_mode modes[] = { POLICY_LEGACY, POLICY_PREFERRED };
        for (size_t i = 0; i < ELEMENTSOF(modes); i++) {
                _cleanup_plan_ struct plan *p = plan_xml(xml, modes[i]);
                assert_int_equal(p->verdict, PLAN_APPLY);
                assert_moved(p, "0000:10:00.0", 0);
                assert_action(p, "0000:11:00.0", PLAN_STAY, "function 0");
                assert_action(p, "0000:80:00.0", PLAN_STAY, NULL);
                /* the slot's warning; 80:00.0 stays with a cause of its own */
                assert_int_equal(p->n_warnings, 1);
                assert_contains(p->warnings[0], "0000:11:00.0 stays on its slot");
                assert_int_equal(p->n_pruned, 1);
                assert_int_equal(p->pruned[0], 1);
                /* new indexes above the pruned one's neighbours still */
                assert_int_equal(p->first_index, 4);
                /* the pxb does not take a slot of a port that stays */
                assert_int_not_equal(p->pxbs[0].addr.slot, 3);
                assert_int_not_equal(p->pxbs[0].addr.slot, 4);
        }
        /* two moved devices on one root port (functions 0 and 1): pruned once */
        _cleanup_free_ char *xml2 = make_domain("q35", true, 1, MEMNODE("0", "0"),
                                                ROOT_PORT("1", "0x02")
                                                HOSTDEV_AT("0x10", "0x01", "0x00", "0x0")
                                                HOSTDEV_AT("0x11", "0x01", "0x00", "0x1"));
        _cleanup_plan_ struct plan *p = plan_xml(xml2, POLICY_REQUIRE);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_int_equal(p->n_pruned, 1);
        assert_int_equal(p->pruned[0], 1);
}

static void test_multifunction(void **state) {
        (void) state;
        /* 33 devices on one cell: eight root ports per slot */
        struct strbuf devs = {0};
        for (unsigned i = 0; i < N_BIG; i++)
                strbuf_printf(&devs, "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
                                     "<address domain='0x0000' bus='0x%02x' slot='0x00' function='0x0'/></source></hostdev>\n",
                              0xa0 + i);
        _cleanup_free_ char *xml = make_domain("q35", true, 1, MEMNODE("0", "0"), devs.buf);
        strbuf_done(&devs);
        _cleanup_plan_ struct plan *p = plan_xml(xml, POLICY_REQUIRE);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_int_equal(p->n_pxbs, 1);
        assert_int_equal(p->pxbs[0].n_ports, N_BIG);
        assert_int_equal(p->pxbs[0].bus_nr, 255 - (1 + N_BIG));
        assert_int_equal(p->n_ports, N_BIG);
        for (unsigned k = 0; k < N_BIG; k++) {
                const struct plan_port *port = &p->ports[k];
                assert_int_equal(port->index, 2 + (int) k);
                assert_int_equal(port->pxb_index, 1);
                assert_int_equal(port->slot, k / 8);
                assert_int_equal(port->func, k % 8);
                if (k % 8 != 0)
                        assert_false(port->multifunction);
                else if (k + 1 < N_BIG)
                        assert_true(port->multifunction);
                assert_int_equal(p->devices[k].guest.bus, port->index);
                assert_int_equal(p->devices[k].guest.slot, 0);
        }

        /* 32 devices: one slot each, no multifunction */
        struct strbuf devs32 = {0};
        for (unsigned i = 0; i < 32; i++)
                strbuf_printf(&devs32, "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
                                       "<address domain='0x0000' bus='0x%02x' slot='0x00' function='0x0'/></source></hostdev>\n",
                              0xa0 + i);
        _cleanup_free_ char *xml32 = make_domain("q35", true, 1, MEMNODE("0", "0"), devs32.buf);
        strbuf_done(&devs32);
        _cleanup_plan_ struct plan *p32 = plan_xml(xml32, POLICY_REQUIRE);
        assert_int_equal(p32->verdict, PLAN_APPLY);
        assert_int_equal(p32->n_ports, 32);
        for (unsigned k = 0; k < 32; k++) {
                assert_int_equal(p32->ports[k].slot, k);
                assert_int_equal(p32->ports[k].func, 0);
                assert_false(p32->ports[k].multifunction);
        }
        assert_int_equal(p32->pxbs[0].bus_nr, 255 - 33);
}

/* ---- planner_matches ----------------------------------------------------------- */

static struct domain *apply_copy(const struct domain *base, const struct plan *p) {
        _cleanup_free_ char *xml = NULL;
        assert_int_equal(domain_format(base, &xml), 0);
        struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(domain_parse(xml, strlen(xml), &d, &err), 0);
        int r = rewrite_apply(d, p, &err);
        if (r < 0)
                fail_msg("rewrite_apply: %d %s", r, strna(err));
        return d;
}

static void test_matches(void **state) {
        (void) state;
        _cleanup_free_ char *xml = make_domain("q35", true, 2, MEMNODE("0", "0") MEMNODE("1", "1"),
                                               ROOT_PORT("1", "0x02")
                                               HOSTDEV_AT("0x10", "0x01", "0x00", "0x0")
                                               HOSTDEV("0x30") HOSTDEV("0x80"));
        _cleanup_domain_ struct domain *base = NULL;
        _cleanup_plan_ struct plan *p = plan_on(host, xml, POLICY_LEGACY, &base);
        assert_int_equal(p->verdict, PLAN_APPLY);

        _cleanup_domain_ struct domain *planned = apply_copy(base, p);
        assert_true(planner_matches(planned, base, p));
        assert_false(planner_matches(base, base, p));

        /* a plan that sends the devices elsewhere does not match */
        _cleanup_free_ char *swapped = make_domain("q35", true, 2, MEMNODE("0", "1") MEMNODE("1", "0"),
                                                   ROOT_PORT("1", "0x02")
                                                   HOSTDEV_AT("0x10", "0x01", "0x00", "0x0")
                                                   HOSTDEV("0x30") HOSTDEV("0x80"));
        _cleanup_domain_ struct domain *base2 = NULL;
        _cleanup_plan_ struct plan *p2 = plan_on(host, swapped, POLICY_LEGACY, &base2);
        assert_int_equal(p2->verdict, PLAN_APPLY);
        assert_moved(p2, "0000:10:00.0", 1);
        assert_false(planner_matches(planned, base2, p2));

        /* a plan that is not 'apply' never matches */
        _cleanup_plan_ struct plan *off = plan_on(host, xml, POLICY_OFF, NULL);
        assert_false(planner_matches(planned, base, off));

        /* another device sharing a moved device's root port breaks the match */
        assert_int_equal(planned->n_hostdevs, base->n_hostdevs);
        xmlNodePtr nic = xmlNewChild(planned->devices, NULL, (const xmlChar *) "interface", NULL);
        xmlSetProp(nic, (const xmlChar *) "type", (const xmlChar *) "network");
        xmlNodePtr a = xmlNewChild(nic, NULL, (const xmlChar *) "address", NULL);
        char bus[8];
        snprintf(bus, sizeof bus, "0x%02x", find_dev(p, "0000:30:00.0")->port_index);
        xmlSetProp(a, (const xmlChar *) "type", (const xmlChar *) "pci");
        xmlSetProp(a, (const xmlChar *) "bus", (const xmlChar *) bus);
        xmlSetProp(a, (const xmlChar *) "slot", (const xmlChar *) "0x00");
        xmlSetProp(a, (const xmlChar *) "function", (const xmlChar *) "0x1");
        assert_int_equal(domain_reload(planned, NULL), 0);
        assert_false(planner_matches(planned, base, p));
}


/* ---- topology paths (issue 15) ------------------------------------------------ */

/* Give device bdf of h its place: host bridge hb and the bridges from the
 * root port down (NULL-terminated). */
static void set_path(struct hostmap *h, const char *bdf, const char *hb, ...) {
        struct pci_addr a;
        assert_int_equal(pci_addr_parse(bdf, &a), 0);
        struct hostmap_device *d = NULL;
        for (size_t i = 0; i < h->n_devices; i++)
                if (pci_addr_eq(&h->devices[i].addr, &a))
                        d = &h->devices[i];
        assert_non_null(d);
        d->host_bridge = xstrdup(hb);
        va_list ap;
        va_start(ap, hb);
        for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *)) {
                struct pci_addr *u = GROW(d->upstream, d->n_upstream);
                assert_int_equal(pci_addr_parse(s, u), 0);
        }
        va_end(ap);
}

/* A p5-like host on nodes 0 and 2 (two sockets), four root complexes per
 * node; per node with bus base B: root complex B has root port B:01.0,
 * switch (B+1):00.0 with downstream ports (B+2):00.0-03.0 holding GPUs
 * (B+3..B+6):00.0 and (B+2):04.0 holding a nested switch (B+7):00.0 /
 * (B+8):00.0 with NIC (B+9):00.0; root complexes B+0x20, B+0x40, B+0x60
 * hold a NIC each on a root port.  Plus a dual-port NIC 0000:e2:00.0/.1
 * on root port e0:02.0 of node 0's host bridge pci0000:e0. */
static struct hostmap *make_p5_host(void) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        const unsigned bases[2] = { 0x10, 0x90 };
        char b[8][PCI_ADDR_STRLEN];
        for (unsigned n = 0; n < 2; n++) {
                unsigned B = bases[n];
                int node = n ? 2 : 0;
                for (unsigned g = 0; g < 4; g++) {
                        snprintf(b[0], sizeof b[0], "0000:%02x:00.0", B + 3 + g);
                        fake_host_add_dev(h, b[0], node, 0x030200);
                }
                snprintf(b[0], sizeof b[0], "0000:%02x:00.0", B + 9);
                fake_host_add_dev(h, b[0], node, 0x020700);
                for (unsigned k = 1; k < 4; k++) {
                        snprintf(b[0], sizeof b[0], "0000:%02x:00.0", B + 0x20 * k + 1);
                        fake_host_add_dev(h, b[0], node, 0x020700);
                }
        }
        fake_host_add_dev(h, "0000:e2:00.0", 0, 0x020000);
        fake_host_add_dev(h, "0000:e2:00.1", 0, 0x020000);
        hostmap_finish(h);
        for (unsigned n = 0; n < 2; n++) {
                unsigned B = bases[n];
                char hb[16], rp[PCI_ADDR_STRLEN], up[PCI_ADDR_STRLEN], dn[PCI_ADDR_STRLEN], up2[PCI_ADDR_STRLEN],
                        dn2[PCI_ADDR_STRLEN], dev[PCI_ADDR_STRLEN];
                snprintf(hb, sizeof hb, "pci0000:%02x", B);
                snprintf(rp, sizeof rp, "0000:%02x:01.0", B);
                snprintf(up, sizeof up, "0000:%02x:00.0", B + 1);
                for (unsigned g = 0; g < 4; g++) {
                        snprintf(dn, sizeof dn, "0000:%02x:%02x.0", B + 2, g);
                        snprintf(dev, sizeof dev, "0000:%02x:00.0", B + 3 + g);
                        set_path(h, dev, hb, rp, up, dn, NULL);
                }
                snprintf(dn, sizeof dn, "0000:%02x:04.0", B + 2);
                snprintf(up2, sizeof up2, "0000:%02x:00.0", B + 7);
                snprintf(dn2, sizeof dn2, "0000:%02x:00.0", B + 8);
                snprintf(dev, sizeof dev, "0000:%02x:00.0", B + 9);
                set_path(h, dev, hb, rp, up, dn, up2, dn2, NULL);
                for (unsigned k = 1; k < 4; k++) {
                        snprintf(hb, sizeof hb, "pci0000:%02x", B + 0x20 * k);
                        snprintf(rp, sizeof rp, "0000:%02x:01.0", B + 0x20 * k);
                        snprintf(dev, sizeof dev, "0000:%02x:00.0", B + 0x20 * k + 1);
                        set_path(h, dev, hb, rp, NULL);
                }
        }
        set_path(h, "0000:e2:00.0", "pci0000:e0", "0000:e0:02.0", NULL);
        set_path(h, "0000:e2:00.1", "pci0000:e0", "0000:e0:02.0", NULL);
        (void) b;
        return h;
}

/* The 16 devices: node 0's (0x13-0x16, 0x19, 0x31, 0x51, 0x71), node 2's
 * (0x93-0x96, 0x99, 0xb1, 0xd1, 0xf1). */
#define P5_DEVICES \
        HOSTDEV("0x13") HOSTDEV("0x14") HOSTDEV("0x15") HOSTDEV("0x16") HOSTDEV("0x19") \
        HOSTDEV("0x31") HOSTDEV("0x51") HOSTDEV("0x71") \
        HOSTDEV("0x93") HOSTDEV("0x94") HOSTDEV("0x95") HOSTDEV("0x96") HOSTDEV("0x99") \
        HOSTDEV("0xb1") HOSTDEV("0xd1") HOSTDEV("0xf1")
#define P5_CELLS MEMNODE("0", "0") MEMNODE("1", "2")

static struct plan *plan_settings(const struct hostmap *h, const char *xml, const struct policy_settings *s, struct domain **ret_d) {
        struct domain *d = parse_resolved(h, xml);
        struct plan *p = NULL;
        assert_int_equal(planner_run(d, h, s, &p), 0);
        assert_non_null(p);
        planner_fidelity(p);
        planner_fidelity(p);    /* a second call changes nothing */
        if (ret_d)
                *ret_d = d;
        else
                domain_free(d);
        return p;
}

static const struct plan_pair *find_pair(const struct plan *p, const char *a, const char *b) {
        for (size_t i = 0; i < p->n_pairs; i++) {
                const char *x = p->devices[p->pairs[i].a].name, *y = p->devices[p->pairs[i].b].name;
                if ((streq(x, a) && streq(y, b)) || (streq(x, b) && streq(y, a)))
                        return &p->pairs[i];
        }
        fail_msg("no pair %s / %s", a, b);
        return NULL;
}

static void assert_pair(const struct plan *p, const char *a, const char *b, enum plan_path host_t, enum plan_path guest_t) {
        const struct plan_pair *q = find_pair(p, a, b);
        if (q->host != host_t || q->guest != guest_t)
                fail_msg("%s / %s: host %s guest %s, expected %s -> %s", a, b, plan_path_to_string(q->host),
                         plan_path_to_string(q->guest), plan_path_to_string(host_t), plan_path_to_string(guest_t));
}

static void test_path_type(void **state) {
        (void) state;
        const uint64_t rp_a[] = { 1, 2, 3 }, rp_b[] = { 1, 2, 4 }, nested[] = { 1, 2, 5, 6, 7 }, other[] = { 9 };
        struct plan_path_end a = { .root = 1, .node = 0, .chain = rp_a, .n_chain = 3 };
        struct plan_path_end b = { .root = 1, .node = 0, .chain = rp_b, .n_chain = 3 };
        struct plan_path_end c = { .root = 1, .node = 0, .chain = nested, .n_chain = 5 };
        struct plan_path_end d = { .root = 1, .node = 0, .chain = other, .n_chain = 1 };
        struct plan_path_end e = { .root = 2, .node = 0, .chain = other, .n_chain = 1 };
        struct plan_path_end f = { .root = 3, .node = 1, .chain = other, .n_chain = 1 };
        struct plan_path_end u = { .root = -1, .node = 0, .chain = other, .n_chain = 1 };
        struct plan_path_end u1 = { .root = -1, .node = 1, .chain = other, .n_chain = 1 };
        assert_int_equal(planner_path_type(&a, &b), PLAN_PATH_PIX);     /* two ports of one switch */
        assert_int_equal(planner_path_type(&a, &a), PLAN_PATH_PIX);     /* functions behind one port */
        assert_int_equal(planner_path_type(&a, &c), PLAN_PATH_PXB);     /* through a nested switch */
        assert_int_equal(planner_path_type(&a, &d), PLAN_PATH_PHB);     /* two root ports of one host bridge */
        assert_int_equal(planner_path_type(&d, &e), PLAN_PATH_NODE);    /* two host bridges, one node */
        assert_int_equal(planner_path_type(&e, &f), PLAN_PATH_SYS);     /* two nodes */
        assert_int_equal(planner_path_type(&u, &e), PLAN_PATH_UNKNOWN); /* where it sits is not known */
        assert_int_equal(planner_path_type(&u1, &e), PLAN_PATH_SYS);    /* ... but the nodes differ */
        assert_string_equal(plan_path_to_string(PLAN_PATH_NODE), "NODE");
}

/* The default (paths) on the p5-like host: a pxb per root complex, the
 * switch and the nested switch mirrored, every pair keeps its type, and
 * the guest BDFs follow the depth-first bus numbering below each pxb. */
static void test_paths_p5(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_p5_host();
        _cleanup_free_ char *xml = make_domain("q35", true, 2, P5_CELLS, P5_DEVICES);
        const struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
        _cleanup_plan_ struct plan *p = plan_settings(h, xml, &s, NULL);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_int_equal(p->n_pxbs, 8);
        assert_null(p->degrade_note);
        assert_int_equal(p->n_pairs, 120);
        assert_int_equal(p->n_same, 120);
        assert_int_equal(p->n_closer + p->n_farther + p->n_unknown, 0);
        assert_pair(p, "0000:13:00.0", "0000:16:00.0", PLAN_PATH_PIX, PLAN_PATH_PIX);
        assert_pair(p, "0000:13:00.0", "0000:19:00.0", PLAN_PATH_PXB, PLAN_PATH_PXB);
        assert_pair(p, "0000:13:00.0", "0000:31:00.0", PLAN_PATH_NODE, PLAN_PATH_NODE);
        assert_pair(p, "0000:31:00.0", "0000:51:00.0", PLAN_PATH_NODE, PLAN_PATH_NODE);
        assert_pair(p, "0000:13:00.0", "0000:93:00.0", PLAN_PATH_SYS, PLAN_PATH_SYS);
        /* Two pxbs per... four per cell, each on the host bridge it mirrors. */
        unsigned per_cell[2] = {0};
        for (size_t i = 0; i < p->n_pxbs; i++) {
                per_cell[p->pxbs[i].cell]++;
                assert_true(p->pxbs[i].host_root >= 0);
        }
        assert_int_equal(per_cell[0], 4);
        assert_int_equal(per_cell[1], 4);
        /* pxb of pci0000:10: root port, upstream port, 5 downstream
         * ports, the nested switch's two ports: 10 buses with its own. */
        const struct plan_device *g0 = find_dev(p, "0000:13:00.0"), *nic0 = find_dev(p, "0000:19:00.0");
        const struct plan_port *dn = find_port(p, g0->port_index);
        assert_string_equal(dn->model, PLAN_SWITCH_DOWN);
        const struct plan_pxb *x = NULL;
        for (size_t i = 0; i < p->n_pxbs; i++)
                if (p->pxbs[i].index == dn->pxb_index)
                        x = &p->pxbs[i];
        assert_non_null(x);
        assert_int_equal(x->host_root, 0x10);
        assert_int_equal(x->n_buses, 10);
        char want[PCI_ADDR_STRLEN];
        /* root bus busNr; root port +1, upstream port +2, first downstream port +3 */
        snprintf(want, sizeof want, "0000:%02x:00.0", x->bus_nr + 3);
        assert_string_equal(g0->guest_bdf, want);
        /* ... GPUs on +3..+6, the fifth downstream port +7, nested upstream +8, its downstream +9 */
        snprintf(want, sizeof want, "0000:%02x:00.0", x->bus_nr + 9);
        assert_string_equal(nic0->guest_bdf, want);
        const struct plan_port *n_dn = find_port(p, nic0->port_index);
        const struct plan_port *n_up = find_port(p, n_dn->parent_index);
        assert_string_equal(n_up->model, PLAN_SWITCH_UP);
        assert_string_equal(find_port(p, n_up->parent_index)->model, PLAN_SWITCH_DOWN);
        /* a lone NIC on its root complex: pxb -> root port -> NIC */
        const struct plan_device *n1 = find_dev(p, "0000:31:00.0");
        assert_string_equal(find_port(p, n1->port_index)->model, PLAN_ROOT_PORT);
        assert_int_not_equal(find_port(p, n1->port_index)->pxb_index, dn->pxb_index);
}

/* The same host with topology cells: one pxb per cell, a root port per
 * device; NODE pairs become PHB (closer), switch pairs PHB (farther). */
static void test_paths_cells_shape(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_p5_host();
        _cleanup_free_ char *xml = make_domain("q35", true, 2, P5_CELLS, P5_DEVICES);
        struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
        s.topology = POLICY_TOPOLOGY_CELLS;
        s.mirror_switches = false;
        _cleanup_plan_ struct plan *p = plan_settings(h, xml, &s, NULL);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_int_equal(p->n_pxbs, 2);
        assert_int_equal(p->n_ports, 16);
        assert_int_equal(p->n_closer, 2 * (5 * 3 + 3));
        assert_int_equal(p->n_farther, 2 * 10);
        assert_int_equal(p->n_same, 120 - 36 - 20);
        assert_pair(p, "0000:13:00.0", "0000:31:00.0", PLAN_PATH_NODE, PLAN_PATH_PHB);
        assert_pair(p, "0000:13:00.0", "0000:14:00.0", PLAN_PATH_PIX, PLAN_PATH_PHB);
}

/* When the full mirror does not fit, the root complexes of a cell are
 * merged first (the cell with the most first), and the lost pairs are
 * counted. */
static void test_paths_degrade_merge(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_p5_host();
        /* 24 root ports on pcie.0 slots 2-0x19: 6 slots stay free for 8 pxbs. */
        struct strbuf b = {0};
        for (unsigned i = 0; i < 24; i++)
                strbuf_printf(&b, "<controller type='pci' index='%u' model='pcie-root-port'><address type='pci' domain='0x0000' "
                                  "bus='0x00' slot='0x%02x' function='0x0'/></controller>\n", i + 1, 2 + i);
        strbuf_append(&b, P5_DEVICES);
        _cleanup_free_ char *devs = strbuf_steal(&b);
        _cleanup_free_ char *xml = make_domain("q35", true, 2, P5_CELLS, devs);
        const struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
        _cleanup_plan_ struct plan *p = plan_settings(h, xml, &s, NULL);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_int_equal(p->n_pxbs, 5);
        assert_contains(p->degrade_note, "no free slot on pcie.0");
        assert_contains(p->degrade_note, "merged the host root complexes of guest cell 0");
        assert_null(strstr(p->degrade_note, "merged the host root complexes of guest cell 1"));
        /* cell 0's NODE pairs now share one pxb: PHB, closer; its switch is kept */
        assert_int_equal(p->n_closer, 5 * 3 + 3);
        assert_int_equal(p->n_farther, 0);
        assert_int_equal(p->n_same, 120 - 18);
        assert_pair(p, "0000:31:00.0", "0000:51:00.0", PLAN_PATH_NODE, PLAN_PATH_PHB);
        assert_pair(p, "0000:13:00.0", "0000:19:00.0", PLAN_PATH_PXB, PLAN_PATH_PXB);
        assert_pair(p, "0000:b1:00.0", "0000:d1:00.0", PLAN_PATH_NODE, PLAN_PATH_NODE);
}

/* Then the switches go: an existing expander bus at busNr 20 leaves 19
 * bus numbers; merged, the cells need 13 each; flat, 9 each. */
static void test_paths_degrade_flat(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_p5_host();
        _cleanup_free_ char *xml = make_domain("q35", true, 2, P5_CELLS,
                                               "<controller type='pci' index='1' model='pcie-expander-bus'><model name='pxb-pcie'/>"
                                               "<target busNr='20'><node>0</node></target>"
                                               "<address type='pci' domain='0x0000' bus='0x00' slot='0x1e' function='0x0'/></controller>\n"
                                               P5_DEVICES);
        const struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
        _cleanup_plan_ struct plan *p = plan_settings(h, xml, &s, NULL);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_int_equal(p->n_pxbs, 2);
        assert_int_equal(p->n_ports, 16);
        assert_contains(p->degrade_note, "PCI bus numbers exhausted");
        assert_contains(p->degrade_note, "merged the host root complexes of guest cell 0; merged the host root complexes of guest cell 1; "
                                         "dropped the switches of guest cell 0; dropped the switches of guest cell 1");
        assert_pair(p, "0000:13:00.0", "0000:14:00.0", PLAN_PATH_PIX, PLAN_PATH_PHB);
        assert_int_equal(p->n_farther, 20);
        assert_int_equal(p->n_closer, 36);

        /* Under legacy, if even that does not fit, the domain is left alone. */
        _cleanup_free_ char *tight = make_domain("q35", true, 2, P5_CELLS,
                                                 "<controller type='pci' index='1' model='pcie-expander-bus'><model name='pxb-pcie'/>"
                                                 "<target busNr='12'><node>0</node></target>"
                                                 "<address type='pci' domain='0x0000' bus='0x00' slot='0x1e' function='0x0'/></controller>\n"
                                                 P5_DEVICES);
        const struct policy_settings l = policy_settings_default(POLICY_LEGACY);
        _cleanup_plan_ struct plan *q = plan_settings(h, tight, &l, NULL);
        assert_int_equal(q->verdict, PLAN_SKIP);
        assert_contains(q->reason, "PCI bus numbers exhausted");
        const struct policy_settings r = policy_settings_default(POLICY_REQUIRE);
        _cleanup_plan_ struct plan *q2 = plan_settings(h, tight, &r, NULL);
        assert_int_equal(q2->verdict, PLAN_REFUSED);
}

/* The two functions of a dual-port NIC stay one device on one port:
 * functions 0 and 1, multifunction on function 0; the rewriter writes
 * it, and the planned domain matches the plan. */
static void test_paths_functions(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = make_p5_host();
        _cleanup_free_ char *xml = make_domain("q35", true, 2, P5_CELLS,
                                               HOSTDEV("0x13") HOSTDEV_F("0xe2", "0x1") HOSTDEV_F("0xe2", "0x0"));
        const struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
        _cleanup_domain_ struct domain *base = NULL;
        _cleanup_plan_ struct plan *p = plan_settings(h, xml, &s, &base);
        assert_int_equal(p->verdict, PLAN_APPLY);
        const struct plan_device *f0 = find_dev(p, "0000:e2:00.0"), *f1 = find_dev(p, "0000:e2:00.1");
        assert_int_equal(f0->port_index, f1->port_index);
        /* functions in host order, whatever the order in the XML */
        assert_int_equal(f0->guest.func, 0);
        assert_int_equal(f1->guest.func, 1);
        assert_true(f0->multifunction);
        assert_false(f1->multifunction);
        assert_int_equal(f0->guest.bus, f1->guest.bus);
        assert_int_equal(strncmp(f0->guest_bdf, f1->guest_bdf, 10), 0);
        assert_string_equal(f1->guest_bdf + 10, ".1");
        assert_pair(p, "0000:e2:00.0", "0000:e2:00.1", PLAN_PATH_PIX, PLAN_PATH_PIX);
        /* pci0000:10 and pci0000:e0 are two root complexes of node 0 */
        assert_pair(p, "0000:13:00.0", "0000:e2:00.0", PLAN_PATH_NODE, PLAN_PATH_NODE);
        assert_int_equal(p->n_pxbs, 2);

        _cleanup_domain_ struct domain *planned = apply_copy(base, p);
        assert_true(planner_matches(planned, base, p));
        _cleanup_free_ char *out = NULL;
        xmlChar *mem = NULL;
        int len = 0;
        xmlDocDumpMemory(planned->doc, &mem, &len);
        out = xstrdup((const char *) mem);
        xmlFree(mem);
        assert_contains(out, "function=\"0x0\" multifunction=\"on\"/>");
        assert_contains(out, "function=\"0x1\"/>");

        /* topology cells keeps them apart, as before */
        struct policy_settings c = s;
        c.topology = POLICY_TOPOLOGY_CELLS;
        c.mirror_switches = false;
        _cleanup_plan_ struct plan *pc = plan_settings(h, xml, &c, NULL);
        assert_int_not_equal(find_dev(pc, "0000:e2:00.0")->port_index, find_dev(pc, "0000:e2:00.1")->port_index);
        assert_pair(pc, "0000:e2:00.0", "0000:e2:00.1", PLAN_PATH_PIX, PLAN_PATH_PHB);
}

/* 64-bit BARs that add up past the address space (a corrupt or crafted
 * resource file) are reported, not sized: once the sum wrapped and the
 * window loop never ended (review finding). */
static void test_mmio64_overflow(void **state) {
        (void) state;
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        struct hostmap_device *g = fake_host_add_dev(h, "0000:10:00.0", 0, 0x030200);
        for (unsigned b = 0; b < 3; b++)
                g->bars[b] = (struct hostmap_bar) { .type = HOSTMAP_BAR_MEM64, .prefetchable = true, .size = UINT64_C(1) << 62 };
        hostmap_finish(h);
        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4, HOSTDEV("0x10"));
        _cleanup_domain_ struct domain *d = parse_resolved(h, xml);
        struct policy_settings s = { .mode = POLICY_PREFERRED, .mmio64_auto = true };
        struct plan *p = NULL;
        assert_int_equal(planner_run(d, h, &s, &p), 0);
        assert_non_null(p->mmio64_note);
        assert_non_null(strstr(p->mmio64_note, "not sized"));
        assert_int_equal(p->pcihole64_kib, 0);
        plan_free(p);
        hostmap_free(h);
}

/* Do no harm (docs/policy.md, "What could not be placed"): preferred
 * never refuses; what it cannot place, or places on a cell its node does
 * not back, is one warning per cause naming the devices.  Legacy refuses
 * the unpinned domain that preferred starts. */
static void test_preferred_warns(void **state) {
        (void) state;
        /* Unpinned cells: nothing backs them; every device stays, with
         * one domain-wide cause (no warning of its own: the messages say
         * the cause and the devices, report_causes()). */
        _cleanup_free_ char *unpinned = make_domain("q35", true, 2, NULL, HOSTDEV("0x10") HOSTDEV("0x30") HOSTDEV("0x80"));
        _cleanup_plan_ struct plan *u = plan_xml(unpinned, POLICY_PREFERRED);
        assert_int_equal(u->verdict, PLAN_UNCHANGED);
        assert_int_equal(u->n_warnings, 0);
        for (size_t i = 0; i < u->n_devices; i++) {
                assert_int_equal(u->devices[i].action, PLAN_STAY);
                assert_true(u->devices[i].cause >= 0);
        }
        assert_true(u->causes[find_dev(u, "0000:10:00.0")->cause].domain);
        assert_contains(u->causes[find_dev(u, "0000:10:00.0")->cause].what, "no guest cell is pinned to a host node");
        _cleanup_plan_ struct plan *ul = plan_xml(unpinned, POLICY_LEGACY);
        assert_int_equal(ul->verdict, PLAN_REFUSED);

        /* One cell on node 0: node 1's device goes there by its socket,
         * node 2's and node 3's (the other socket) by distance, each node
         * one warning; the local device none. */
        _cleanup_free_ char *one = make_domain("q35", true, 1, MEMNODE("0", "0"),
                                               HOSTDEV("0x10") HOSTDEV("0x30") HOSTDEV("0x50") HOSTDEV("0x70"));
        _cleanup_plan_ struct plan *o = plan_xml(one, POLICY_PREFERRED);
        assert_int_equal(o->verdict, PLAN_APPLY);
        assert_int_equal(o->n_warnings, 3);
        assert_string_equal(o->warnings[0], "not local: no guest cell is backed by host node 1; placed on guest cell 0 "
                                            "(host node 0), the nearest on its socket: 0000:30:00.0");
        assert_string_equal(o->warnings[1], "not local: no guest cell is backed by host node 2; placed on guest cell 0 "
                                            "(host node 0), the nearest by distance: 0000:50:00.0");
        assert_contains(o->warnings[2], "host node 3;");
        /* every device local: no warning */
        _cleanup_free_ char *local = make_domain("q35", true, 4, MEMNODES4, HOSTDEV("0x10") HOSTDEV("0x30"));
        _cleanup_plan_ struct plan *l = plan_xml(local, POLICY_PREFERRED);
        assert_int_equal(l->verdict, PLAN_APPLY);
        assert_int_equal(l->n_warnings, 0);

        /* 33 devices of node 0 on a cell of node 1: one warning, at most
         * 32 names, then how many more. */
        struct strbuf many = {0};
        for (unsigned i = 0; i < N_BIG; i++)
                strbuf_printf(&many, "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' "
                                     "bus='0x%02x' slot='0x00' function='0x0'/></source></hostdev>\n", 0xa0 + i);
        _cleanup_free_ char *devs = strbuf_steal(&many);
        _cleanup_free_ char *far = make_domain("q35", true, 1, MEMNODE("0", "1"), devs);
        _cleanup_plan_ struct plan *m = plan_xml(far, POLICY_PREFERRED);
        assert_int_equal(m->verdict, PLAN_APPLY);
        assert_int_equal(m->n_warnings, 1);
        assert_contains(m->warnings[0], "not local: no guest cell is backed by host node 0; placed together on guest cell 0 "
                                        "(host node 1), the nearest on its socket: 0000:a0:00.0, ");
        assert_contains(m->warnings[0], "0000:bf:00.0 and 1 more");
        assert_null(strstr(m->warnings[0], "0000:c0:00.0"));
}

/* mmio64 off: BARs past the window are a warning with the figures; auto
 * sizes the window and does not warn; BARs that fit say nothing. */
static void test_mmio64_off_warns(void **state) {
        (void) state;
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        for (unsigned k = 0; k < 2; k++) {
                char bdf[PCI_ADDR_STRLEN];
                snprintf(bdf, sizeof bdf, "0000:%02x:00.0", 0x10 + k);
                struct hostmap_device *g = fake_host_add_dev(h, bdf, 0, 0x030200);
                g->bars[0] = (struct hostmap_bar) { .type = HOSTMAP_BAR_MEM64, .prefetchable = true, .size = UINT64_C(64) << 30 };
        }
        hostmap_finish(h);
        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4, HOSTDEV("0x10") HOSTDEV("0x11"));
        _cleanup_domain_ struct domain *d = parse_resolved(h, xml);
        struct policy_settings off = policy_settings_default(POLICY_REQUIRE);
        off.mmio64_auto = false;
        struct plan *p = NULL;
        assert_int_equal(planner_run(d, h, &off, &p), 0);
        assert_int_equal(p->verdict, PLAN_APPLY);
        assert_int_equal(p->pcihole64_kib, 0);
        assert_int_equal(p->n_warnings, 1);
        assert_string_equal(p->warnings[0], "64-bit MMIO: the devices' 64-bit BARs need 192 GiB, packed largest first "
                                            "(0000:10:00.0 64 GiB, 0000:11:00.0 64 GiB; and 64 GiB of room for the pcie.0 "
                                            "side), more than the default 32 GiB window, and mmio64 is off: a UEFI guest "
                                            "(OVMF) would leave the BARs that do not fit unassigned; set \"mmio64\": "
                                            "\"auto\" to size the window");
        plan_free(p);
        struct policy_settings dflt = policy_settings_default(POLICY_REQUIRE);
        assert_true(dflt.mmio64_auto);
        assert_int_equal(planner_run(d, h, &dflt, &p), 0);
        assert_int_equal(p->n_warnings, 0);
        assert_int_equal(p->pcihole64_kib, UINT64_C(256) << 20);
        plan_free(p);
        hostmap_free(h);
}

/* mmio64 auto never sets a window the guest CPU's physical address bits
 * cannot hold (QEMU refuses to start: "phys-bits too low"): with QEMU's
 * default 40 bits eight 64 GiB BARs (576 GiB with the room) get 512 GiB
 * and a warning with the figures; 42 bits (<maxphysaddr>) or the host's
 * (host-passthrough under KVM) get the whole 1 TiB; a guest whose memory
 * leaves no room for more than the default gets nothing set. */
static void test_mmio64_address_bits(void **state) {
        (void) state;
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        struct strbuf devs = {0};
        for (unsigned k = 0; k < 8; k++) {
                char bdf[PCI_ADDR_STRLEN];
                snprintf(bdf, sizeof bdf, "0000:%02x:00.0", 0x10 + k);
                struct hostmap_device *g = fake_host_add_dev(h, bdf, 0, 0x030200);
                g->bars[0] = (struct hostmap_bar) { .type = HOSTMAP_BAR_MEM64, .prefetchable = true, .size = UINT64_C(64) << 30 };
                strbuf_printf(&devs, "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' "
                                     "bus='0x%02x' slot='0x00' function='0x0'/></source></hostdev>\n", 0x10 + k);
        }
        hostmap_finish(h);
        _cleanup_free_ char *base = make_domain("q35", true, 4, MEMNODES4, devs.buf);
        strbuf_done(&devs);
        static const struct {
                const char *from, *to;
                uint64_t hole_gib;
                const char *warning;
        } cases[] = {
                /* make_domain(): type kvm, host-passthrough: the host's bits */
                { NULL, NULL, 1024, NULL },
                { "<domain type='kvm'>", "<domain type='qemu'>", 512,
                  "a 1 TiB window, but a guest CPU with 40 physical address bits (QEMU's default) and 4 GiB of memory "
                  "has room for 512 GiB at most: <pcihole64> set to that" },
                { "<cpu mode='host-passthrough'>", "<cpu mode='host-passthrough'><maxphysaddr mode='emulate' bits='42'/>",
                  1024, NULL },
                { "<cpu mode='host-passthrough'>", "<cpu mode='host-passthrough'><maxphysaddr mode='passthrough' limit='41'/>",
                  512, "41 physical address bits and 4 GiB of memory has room for 512 GiB at most" },
                { "<domain type='kvm'>\n  <name>plan-test</name>\n  <memory unit='MiB'>4096</memory>",
                  "<domain type='qemu'>\n  <name>plan-test</name>\n  <memory unit='GiB'>1000</memory>", 0,
                  "1000 GiB of memory has room for 4 GiB at most: the window is left as it is" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *xml = xstrdup(base);
                if (cases[i].from) {
                        char *at = strstr(xml, cases[i].from);
                        assert_non_null(at);
                        char *x = xasprintf("%.*s%s%s", (int) (at - xml), xml, cases[i].to, at + strlen(cases[i].from));
                        free(xml);
                        xml = x;
                }
                _cleanup_domain_ struct domain *d = parse_resolved(h, xml);
                struct policy_settings s = policy_settings_default(POLICY_REQUIRE);
                struct plan *p = NULL;
                assert_int_equal(planner_run(d, h, &s, &p), 0);
                assert_int_equal(p->verdict, PLAN_APPLY);
                if (p->pcihole64_kib != cases[i].hole_gib << 20)
                        fail_msg("case %zu: pcihole64 %" PRIu64 " KiB, want %" PRIu64 " GiB", i, p->pcihole64_kib,
                                 cases[i].hole_gib);
                if (cases[i].warning) {
                        assert_int_equal(p->n_warnings, 1);
                        assert_contains(p->warnings[0], cases[i].warning);
                        assert_contains(p->warnings[0], "the devices need 576 GiB");
                } else
                        assert_int_equal(p->n_warnings, 0);
                plan_free(p);
        }
        hostmap_free(h);
}

/* The pair report is quadratic: above PLAN_FIDELITY_MAX_DEVICES it is not
 * made, and says so (review finding: 8000 hostdevs took 4 GB). */
static void test_fidelity_cap(void **state) {
        (void) state;
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        struct strbuf b = {0};
        for (unsigned i = 0; i < PLAN_FIDELITY_MAX_DEVICES + 1; i++) {
                char bdf[PCI_ADDR_STRLEN];
                snprintf(bdf, sizeof bdf, "0000:%02x:%02x.0", 1 + i / 32, i % 32);
                fake_host_add_dev(h, bdf, (int) (i % 4), 0x030200);
                strbuf_printf(&b, "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' "
                                  "bus='0x%02x' slot='0x%02x' function='0x0'/></source></hostdev>\n", 1 + i / 32, i % 32);
        }
        hostmap_finish(h);
        _cleanup_free_ char *devs = strbuf_steal(&b);
        _cleanup_free_ char *xml = make_domain("q35", true, 4, MEMNODES4, devs);
        _cleanup_domain_ struct domain *d = parse_resolved(h, xml);
        struct policy_settings s = { .mode = POLICY_PREFERRED };
        struct plan *p = NULL;
        assert_int_equal(planner_run(d, h, &s, &p), 0);
        assert_int_equal(p->n_devices, PLAN_FIDELITY_MAX_DEVICES + 1);
        planner_fidelity(p);
        assert_true(p->fidelity_skipped);
        assert_int_equal(p->n_pairs, 0);
        plan_free(p);
        hostmap_free(h);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_require_all_local),
                cmocka_unit_test(test_all_policies_all_local),
                cmocka_unit_test(test_off),
                cmocka_unit_test(test_no_devices),
                cmocka_unit_test(test_balance),
                cmocka_unit_test(test_vf_and_mdev),
                cmocka_unit_test(test_device_without_node),
                cmocka_unit_test(test_no_local_cell),
                cmocka_unit_test(test_socket_fallback),
                cmocka_unit_test(test_socket_nearest_by_distance),
                cmocka_unit_test(test_preferred_nearest),
                cmocka_unit_test(test_preferred_pcie0),
                cmocka_unit_test(test_not_eligible),
                cmocka_unit_test(test_layout_indexes),
                cmocka_unit_test(test_layout_slots),
                cmocka_unit_test(test_busnr),
                cmocka_unit_test(test_busnr_exhausted),
                cmocka_unit_test(test_index_exhausted),
                cmocka_unit_test(test_pruned),
                cmocka_unit_test(test_multifunction),
                cmocka_unit_test(test_matches),
                cmocka_unit_test(test_path_type),
                cmocka_unit_test(test_paths_p5),
                cmocka_unit_test(test_paths_cells_shape),
                cmocka_unit_test(test_paths_degrade_merge),
                cmocka_unit_test(test_paths_degrade_flat),
                cmocka_unit_test(test_paths_functions),
                cmocka_unit_test(test_mmio64_overflow),
                cmocka_unit_test(test_preferred_warns),
                cmocka_unit_test(test_mmio64_off_warns),
                cmocka_unit_test(test_mmio64_address_bits),
                cmocka_unit_test(test_fidelity_cap),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

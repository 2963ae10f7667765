/* Unit tests of lib/core/nccltopo.c on host maps built in memory: which
 * devices count, NCCL's nesting rule (a device under the bridge two levels
 * above it, or under its node's <cpu>), the cpumap affinity, the CPU
 * identity, NCCL's MAX_SUBS, and the -fw_cfg argument (commas doubled,
 * newlines as spaces, the 131,071-byte limit that QEMU was seen to take
 * and Linux's exec refuses one byte past). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake-host.h"
#include "nccltopo.h"

static void set_up(struct hostmap_device *d, const char *const *chain, size_t n) {
        d->upstream = calloc(n ? n : 1, sizeof(*d->upstream));
        for (size_t i = 0; i < n; i++)
                assert_int_equal(pci_addr_parse(chain[i], &d->upstream[i]), 0);
        d->n_upstream = n;
        d->host_bridge = strdup("pci0000:10");
}

static struct hostmap_device *add(struct hostmap *h, const char *bdf, int node, uint32_t class, uint16_t vendor,
                                  const char *const *chain, size_t n) {
        struct hostmap_device *d = fake_host_add_dev(h, bdf, node, class);
        d->vendor = vendor;
        d->device = 0x1234;
        snprintf(d->link_speed, sizeof d->link_speed, "%s", "16.0 GT/s PCIe");
        d->link_width = 16;
        set_up(d, chain, n);
        return d;
}

static void test_wanted(void **state) {
        (void) state;
        assert_true(nccltopo_wanted(0x030200, 0x10de));         /* 3D controller */
        assert_true(nccltopo_wanted(0x030000, 0x10de));         /* NVIDIA VGA */
        assert_true(nccltopo_wanted(0x038000, 0x10de));         /* NVIDIA other display controller */
        assert_false(nccltopo_wanted(0x030000, 0x1a03));        /* a BMC's VGA (ASPEED 1a03:2000) */
        assert_false(nccltopo_wanted(0x030000, 0x1002));        /* AMD: RCCL's, not NCCL's */
        assert_false(nccltopo_wanted(0x030200, 0x8086));        /* another vendor's 3D controller */
        assert_true(nccltopo_wanted(0x020700, 0x8086));         /* InfiniBand */
        assert_true(nccltopo_wanted(0x020000, 0x15b3));         /* ConnectX Ethernet */
        assert_true(nccltopo_wanted(0x020000, 0x1d0f));         /* EFA */
        assert_false(nccltopo_wanted(0x020000, 0x8086));        /* an Intel NIC */
        assert_false(nccltopo_wanted(0x010802, 0x144d));        /* NVMe */
        assert_false(nccltopo_wanted(0x060400, 0x10b5));        /* a bridge */
}

/* rp 10:01.0 > usp 11:00.0 > dsp 12:00.0 > GPU 13:00.0, and a NIC right
 * below rp 10:02.0; node 1's GPU 90:00.0 below its own root port. */
static struct hostmap *host(void) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        static const char *const rp1[] = { "0000:10:01.0" };
        static const char *const usp[] = { "0000:10:01.0", "0000:11:00.0" };
        static const char *const gpu[] = { "0000:10:01.0", "0000:11:00.0", "0000:12:00.0" };
        static const char *const nic[] = { "0000:10:02.0" };
        static const char *const gpu1[] = { "0000:80:01.0" };
        add(h, "0000:10:01.0", 0, 0x060400, 0x8086, NULL, 0);
        add(h, "0000:11:00.0", 0, 0x060400, 0x10b5, rp1, 1);
        add(h, "0000:12:00.0", 0, 0x060400, 0x10b5, usp, 2);
        add(h, "0000:13:00.0", 0, 0x030200, 0x10de, gpu, 3);
        add(h, "0000:20:00.0", 0, 0x020700, 0x15b3, nic, 1);
        add(h, "0000:90:00.0", 1, 0x030200, 0x10de, gpu1, 1);
        add(h, "0000:30:00.0", 0, 0x010802, 0x144d, nic, 1);    /* NVMe: left out */
        hostmap_finish(h);
        return h;
}

static void test_host_nesting(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = host();
        _cleanup_free_ char *xml = NULL, *why = NULL;
        assert_int_equal(nccltopo_host(h, NULL, &xml, &why), 0);
        /* The GPU below the switch's upstream port (two levels up), the
         * switch and the NIC below node 0's <cpu>, node 1's GPU below its
         * own; the NVMe nowhere; nodes without devices self-closed. */
        const char *want =
                "<system version=\"1\">\n"
                "  <cpu numaid=\"0\" affinity=\"0000000f\">\n"
                "    <pci busid=\"0000:11:00.0\" class=\"0x060400\" vendor=\"0x10b5\" device=\"0x1234\" "
                "link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n"
                "      <pci busid=\"0000:13:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1234\" "
                "link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"/>\n"
                "    </pci>\n"
                "    <pci busid=\"0000:20:00.0\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x1234\" "
                "link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"/>\n"
                "  </cpu>\n"
                "  <cpu numaid=\"1\" affinity=\"000000f0\">\n"
                "    <pci busid=\"0000:90:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x1234\" "
                "link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"/>\n"
                "  </cpu>\n"
                "  <cpu numaid=\"2\" affinity=\"00000f00\"/>\n"
                "  <cpu numaid=\"3\" affinity=\"0000f000\"/>\n"
                "</system>\n";
        assert_string_equal(xml, want);
}

static void test_cpu_identity(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = host();
        _cleanup_free_ char *xml = NULL, *why = NULL;
        struct nccltopo_cpu none;
        assert_false(nccltopo_cpu_from_host(&h->cpu_id, &none));        /* unknown unless read */
        snprintf(h->cpu_id.arch, sizeof h->cpu_id.arch, "x86_64");
        snprintf(h->cpu_id.vendor, sizeof h->cpu_id.vendor, "Genuine\"Intel");
        h->cpu_id.family = 6;
        h->cpu_id.model = 143;
        struct nccltopo_cpu c;
        assert_true(nccltopo_cpu_from_host(&h->cpu_id, &c));
        assert_int_equal(nccltopo_host(h, &c, &xml, &why), 0);
        assert_non_null(strstr(xml, "<cpu numaid=\"0\" affinity=\"0000000f\" arch=\"x86_64\" "
                                    "vendor=\"Genuine&quot;Intel\" familyid=\"6\" modelid=\"143\">"));
}

static void test_affinity_words(void **state) {
        (void) state;
        struct hostmap *h = hostmap_new();
        struct hostmap_node *n = hostmap_add_node(h, 0);
        bitmap_set(&n->cpus, 0);
        bitmap_set(&n->cpus, 33);
        bitmap_set(&n->cpus, 95);
        static const char *const rp[] = { "0000:00:01.0" };
        add(h, "0000:01:00.0", 0, 0x030200, 0x10de, rp, 1);
        hostmap_finish(h);
        _cleanup_free_ char *xml = NULL, *why = NULL;
        assert_int_equal(nccltopo_host(h, NULL, &xml, &why), 0);
        assert_non_null(strstr(xml, "affinity=\"80000000,00000002,00000001\""));
        hostmap_free(h);
}

static void test_max_subs(void **state) {
        (void) state;
        struct hostmap *h = hostmap_new();
        struct hostmap_node *n = hostmap_add_node(h, 0);
        bitmap_set(&n->cpus, 0);
        static const char *const rp[] = { "0000:00:01.0" };
        for (unsigned i = 0; i < 129; i++) {
                char bdf[16];
                snprintf(bdf, sizeof bdf, "0000:%02x:%02x.0", 1 + i / 32, i % 32);
                add(h, bdf, 0, 0x030200, 0x10de, rp, 1);
        }
        hostmap_finish(h);
        _cleanup_free_ char *xml = NULL, *why = NULL;
        assert_int_equal(nccltopo_host(h, NULL, &xml, &why), NCCLTOPO_NOT_PLACED);
        assert_null(xml);
        assert_non_null(strstr(why, "129 devices below NUMA node 0"));
        assert_non_null(strstr(why, "MAX_SUBS"));
        hostmap_free(h);

        struct hostmap *e = hostmap_new();
        hostmap_add_node(e, 0);
        add(e, "0000:30:00.0", 0, 0x010802, 0x144d, rp, 1);
        hostmap_finish(e);
        _cleanup_free_ char *why2 = NULL;
        char *none = NULL;
        assert_int_equal(nccltopo_host(e, NULL, &none, &why2), NCCLTOPO_NONE);
        assert_non_null(strstr(why2, "no GPU or RDMA NIC"));
        hostmap_free(e);
}

static void test_fwcfg_arg(void **state) {
        (void) state;
        _cleanup_free_ char *why = NULL;
        _cleanup_free_ char *a = nccltopo_fwcfg_arg("<cpu affinity=\"0,1\">\n  <x/>\n</cpu>\n", &why);
        assert_string_equal(a, NCCLTOPO_FWCFG_PREFIX "<cpu affinity=\"0,,1\">   <x/> </cpu>");

        /* The longest argument exec passes: the prefix and 131,029 bytes. */
        size_t room = NCCLTOPO_FWCFG_ARG_MAX - strlen(NCCLTOPO_FWCFG_PREFIX);
        assert_int_equal(room, 131029);
        char *text = malloc(room + 2);
        memset(text, 'x', room);
        text[room] = 0;
        char *ok = nccltopo_fwcfg_arg(text, &why);
        assert_non_null(ok);
        assert_int_equal(strlen(ok), NCCLTOPO_FWCFG_ARG_MAX);
        free(ok);
        text[room - 1] = ',';           /* doubled: one byte over */
        assert_null(nccltopo_fwcfg_arg(text, &why));
        assert_non_null(strstr(why, "131072-byte QEMU argument"));
        free(text);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_wanted),
                cmocka_unit_test(test_host_nesting),
                cmocka_unit_test(test_cpu_identity),
                cmocka_unit_test(test_affinity_words),
                cmocka_unit_test(test_max_subs),
                cmocka_unit_test(test_fwcfg_arg),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for lib/core/fingerprint: host maps built in memory, the same host
 * renumbered (other buses, domain, host bridge names, socket ids, another
 * enumeration order) gives the same digest and groups; a device moved to
 * the other socket, a VFIO variant driver, another vendor:device, another
 * SLIT distance each give another digest, and exactly the groups that
 * changed get other group digests; a host driver instead of vfio-pci does
 * not (driver kinds); which devices count; the text below a bridge
 * (fingerprint_below()). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fingerprint.h"
#include "hostmap.h"
#include "pciaddr.h"

#include "fake-fleet.h"

static struct fingerprint *fp_of(const struct dev_spec *spec, size_t n, const struct numbering *nb) {
        struct hostmap *h = build(spec, n, nb);
        struct fingerprint *f = fingerprint_new(h);
        hostmap_free(h);
        return f;
}

/* The host bridge names (on a's host) of a's groups whose digest b does
 * not have (as a multiset), joined by ' '. */
static char *changed_groups(const struct fingerprint *a, const struct fingerprint *b) {
        bool *used = xcalloc(b->n_groups + 1, sizeof(bool));
        struct strbuf out = {0};
        for (size_t i = 0; i < a->n_groups; i++) {
                bool found = false;
                for (size_t j = 0; j < b->n_groups && !found; j++)
                        if (!used[j] && streq(a->groups[i].digest, b->groups[j].digest))
                                used[j] = found = true;
                if (!found)
                        strbuf_printf(&out, "%s%s", out.len ? " " : "", a->groups[i].host_bridge);
        }
        free(used);
        return strbuf_steal(&out);
}

static void test_counts(void **state) {
        (void) state;
        struct hostmap_device d = {0};
        static const struct {
                uint32_t class;
                uint16_t vendor;
                const char *driver;
                bool counts;
        } v[] = {
                { 0x030200, 0x10de, "nvidia", true },      /* 3D controller */
                { 0x030000, 0x1234, NULL, true },          /* VGA */
                { 0x020000, 0x8086, "ice", true },         /* Ethernet */
                { 0x020700, 0x15b3, "mlx5_core", true },   /* InfiniBand */
                { 0x010802, 0x144d, "nvme", true },        /* NVMe */
                { 0x120000, 0x1da3, NULL, true },          /* processing accelerator */
                { 0x0b4000, 0x8086, "4xxx", true },        /* co-processor: QAT on its host driver */
                { 0x0b4000, 0x8086, "vfio-pci", true },    /* ... and on vfio-pci */
                { 0x068000, 0x10de, "nvidia-nvswitch", true }, /* an NVSwitch on its host driver */
                { 0x068000, 0x10de, "vfio-pci", true },    /* ... and set aside for a guest */
                { 0x068000, 0x8086, "piix4_smbus", false }, /* chipset functions are "other bridges" too */
                { 0x068000, 0x8086, "vfio-pci", false },   /* whatever their driver */
                { 0x088000, 0x8086, "vfio-pci", false },   /* system peripheral: not on vfio-pci either */
                { 0x088000, 0x8086, "qat_4xxx", false },
                { 0x088000, 0x8086, NULL, false },
                { 0x0c0330, 0x15b3, "mlx5_vfio_pci", false }, /* nor on a variant driver */
                { 0x010601, 0x8086, "ahci", false },       /* SATA */
                { 0x0c0330, 0x1912, "xhci_hcd", false },   /* USB */
                { 0x040300, 0x10de, "vfio-pci", false },   /* a GPU's audio function */
                { 0x060400, 0x10b5, "pcieport", false },   /* PCI bridge */
                { 0x060400, 0x10b5, "vfio-pci", false },   /* a bridge, whatever its driver */
                { 0x060000, 0x8086, NULL, false },         /* host bridge */
        };
        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                d.class = v[i].class;
                d.vendor = v[i].vendor;
                d.driver = (char *) v[i].driver;
                if (fingerprint_device_counts(&d) != v[i].counts)
                        fail_msg("class %06x vendor %04x driver %s: counts should be %d", v[i].class, v[i].vendor,
                                 strna(v[i].driver), v[i].counts);
        }
        assert_false(fingerprint_device_counts(NULL));
}

/* What host A's fingerprint holds: the format documented in
 * docs/operations.md. */
static void test_canonical(void **state) {
        (void) state;
        struct fingerprint *f = fp_of(host_a, N_A, &plain);
        assert_int_equal(strlen(f->digest), 64);
        assert_true(strncmp(f->canonical,
                            "pcinuma topology fingerprint 2\n"
                            "node 0 cpus 8 socket 0 distances 10 21\n"
                            "node 1 cpus 8 socket 1 distances 21 10\n"
                            "group node 0 rc{",
                            strlen("pcinuma topology fingerprint 2\nnode 0 cpus 8 socket 0 distances 10 21\n"
                                   "node 1 cpus 8 socket 1 distances 21 10\ngroup node 0 rc{")) == 0);
        assert_int_equal(f->n_groups, 4);
        /* By node, then by the text: the switch ("rc{bridge{bridge{") first. */
        assert_int_equal(f->groups[0].node, 0);
        assert_int_equal(f->groups[1].node, 0);
        assert_int_equal(f->groups[2].node, 1);
        assert_int_equal(f->groups[3].node, 1);
        assert_string_equal(f->groups[0].host_bridge, "pci0000:10");
        assert_string_equal(f->groups[1].host_bridge, "pci0000:30");
        assert_string_equal(f->groups[2].host_bridge, "pci0000:90");
        assert_string_equal(f->groups[3].host_bridge, "pci0000:b0");
        /* No BDF, no host bridge name, no bridge IDs in the text. */
        assert_null(strstr(f->canonical, "0000:"));
        assert_null(strstr(f->canonical, "pci0000"));
        assert_null(strstr(f->canonical, "10b5"));
        assert_null(strstr(f->canonical, "8086"));
        /* The switch's group. */
        const char *sw = "node 0 rc{bridge{bridge{"
                         "bridge{dev(10de:2330 class 030200 driver vfio-pci bars 0:m32:0x1000000;1:m64p:0x1000000000)},"
                         "bridge{dev(10de:2330 class 030200 driver vfio-pci bars 0:m32:0x1000000;1:m64p:0x1000000000)},"
                         "bridge{dev(15b3:1021 class 020700 driver vfio-pci bars 0:m64p:0x2000000)}}}}";
        /* The VFs inside their PF (which counts too: class 02). */
        const char *vf = "node 0 rc{bridge{dev(15b3:1017 class 020000 driver vfio-pci bars 0:m64p:0x2000000 vfs{"
                         "dev(15b3:101e class 020700 driver vfio-pci bars 0:m64p:0x100000),"
                         "dev(15b3:101e class 020700 driver vfio-pci bars 0:m64p:0x100000)})}}";
        bool have_sw = false, have_vf = false;
        for (size_t i = 0; i < f->n_groups; i++) {
                have_sw |= streq(f->groups[i].canonical, sw);
                have_vf |= streq(f->groups[i].canonical, vf);
                /* A group digest is the SHA-256 of its line. */
                char hex[SHA256_HEX_SIZE];
                _cleanup_free_ char *line = xasprintf("%s\n", f->groups[i].canonical);
                assert_string_equal(sha256_hex(line, strlen(line), hex), f->groups[i].digest);
                assert_non_null(strstr(f->canonical, f->groups[i].canonical));
        }
        if (!have_sw || !have_vf)
                fail_msg("canonical text:\n%s", f->canonical);
        char hex[SHA256_HEX_SIZE];
        assert_string_equal(sha256_hex(f->canonical, strlen(f->canonical), hex), f->digest);
        /* The system peripheral is not there; the PF's devices list holds it and its VFs. */
        assert_null(strstr(f->canonical, "088000"));
        size_t n_devices = 0;
        for (size_t i = 0; i < f->n_groups; i++)
                n_devices += f->groups[i].n_devices;
        assert_int_equal(n_devices, 3 + 3 + 3 + 1);
        fingerprint_free(f);
}

static void test_renumbered_same(void **state) {
        (void) state;
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        struct fingerprint *b = fp_of(host_a, N_A, &renumbered);
        assert_string_equal(a->canonical, b->canonical);
        assert_string_equal(a->digest, b->digest);
        assert_int_equal(a->n_groups, b->n_groups);
        for (size_t i = 0; i < a->n_groups; i++) {
                assert_string_equal(a->groups[i].digest, b->groups[i].digest);
                assert_string_not_equal(a->groups[i].host_bridge, b->groups[i].host_bridge);
        }
        fingerprint_free(a);
        fingerprint_free(b);
}

/* A GPU and the NIC of a switch trade downstream ports and bus numbers
 * (so the host enumerates them in another order), and a GPU moves to a
 * free port: the same places, the same digest. */
static void test_permuted_ports_same(void **state) {
        (void) state;
        struct dev_spec *s = copy_a();
        s[find_spec(s, 0x93, 0, 0)].up_slot[2] = 3;
        struct dev_spec *gpu = &s[find_spec(s, 0x13, 0, 0)], *nic = &s[find_spec(s, 0x15, 0, 0)];
        gpu->bus = 0x15;
        gpu->up_slot[2] = 2;
        nic->bus = 0x13;
        nic->up_slot[2] = 0;
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        struct fingerprint *b = fp_of(s, N_A, &plain);
        assert_string_equal(a->digest, b->digest);
        fingerprint_free(a);
        fingerprint_free(b);
        free(s);
}

/* One GPU moves from node 0's switch to node 1's (to the free downstream
 * port 92:03.0): another digest, and exactly the two switch groups change. */
static void test_moved_device(void **state) {
        (void) state;
        struct dev_spec *s = copy_a();
        struct dev_spec *g = &s[find_spec(s, 0x14, 0, 0)];
        g->bus = 0x96;
        g->node = 1;
        g->hb_bus = 0x90;
        g->up[0] = 0x90;
        g->up[1] = 0x91;
        g->up[2] = 0x92;
        g->up_slot[2] = 3;
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        struct fingerprint *c = fp_of(s, N_A, &renumbered);
        assert_string_not_equal(a->digest, c->digest);
        _cleanup_free_ char *changed = changed_groups(a, c);
        assert_string_equal(changed, "pci0000:10 pci0000:90");
        fingerprint_free(a);
        fingerprint_free(c);
        free(s);
}

/* Drivers count by kind (fingerprint_driver_kind()): a NIC on mlx5_core
 * instead of vfio-pci, a GPU on nvidia, a PF with no driver give the same
 * digest (a managed device changes driver with its guest); the NIC on
 * the VFIO variant driver mlx5_vfio_pci changes its group, no other. */
static void test_other_driver(void **state) {
        (void) state;
        struct dev_spec *s = copy_a();
        s[find_spec(s, 0x95, 0, 0)].driver = "mlx5_core";
        s[find_spec(s, 0x93, 0, 0)].driver = "nvidia";
        s[find_spec(s, 0x31, 0, 0)].driver = NULL;
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        struct fingerprint *b = fp_of(s, N_A, &plain);
        assert_string_equal(a->canonical, b->canonical);
        assert_string_equal(a->digest, b->digest);
        s[find_spec(s, 0x95, 0, 0)].driver = "mlx5_vfio_pci";
        struct fingerprint *c = fp_of(s, N_A, &plain);
        assert_string_not_equal(a->digest, c->digest);
        _cleanup_free_ char *changed = changed_groups(a, c);
        assert_string_equal(changed, "pci0000:90");
        assert_non_null(strstr(c->canonical, "class 020700 driver mlx5_vfio_pci bars"));
        fingerprint_free(a);
        fingerprint_free(b);
        fingerprint_free(c);
        free(s);
}

static void test_driver_kind(void **state) {
        (void) state;
        static const char *const plain_kind[] = { "vfio-pci", "nvidia", "mlx5_core", "nvme", "", "acme_vgpu_passthru",
                                                  "vfio_pci_core" };
        for (size_t i = 0; i < ELEMENTSOF(plain_kind); i++)
                assert_string_equal(fingerprint_driver_kind(plain_kind[i]), "vfio-pci");
        assert_string_equal(fingerprint_driver_kind(NULL), "vfio-pci");
        static const char *const variants[] = { "mlx5_vfio_pci", "hisi_acc_vfio_pci", "pds_vfio_pci", "virtio_vfio_pci",
                                                "nvgrace_gpu_vfio_pci" };
        for (size_t i = 0; i < ELEMENTSOF(variants); i++)
                assert_string_equal(fingerprint_driver_kind(variants[i]), variants[i]);
}

/* The NVMe drive is another model: its group changes, no other. */
static void test_other_model(void **state) {
        (void) state;
        struct dev_spec *s = copy_a();
        s[find_spec(s, 0xb1, 0, 0)].device = 0xa808;
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        struct fingerprint *b = fp_of(s, N_A, &plain);
        assert_string_not_equal(a->digest, b->digest);
        _cleanup_free_ char *changed = changed_groups(a, b);
        assert_string_equal(changed, "pci0000:b0");
        /* A VF's model counts too. */
        struct dev_spec *s2 = copy_a();
        s2[find_spec(s2, 0x31, 0, 3)].vendor = 0x8086;
        struct fingerprint *c = fp_of(s2, N_A, &plain);
        _cleanup_free_ char *changed2 = changed_groups(a, c);
        assert_string_equal(changed2, "pci0000:30");
        fingerprint_free(a);
        fingerprint_free(b);
        fingerprint_free(c);
        free(s);
        free(s2);
}

/* Another SLIT distance: another digest; the groups (which do not hold
 * distances) keep theirs. */
static void test_other_distance(void **state) {
        (void) state;
        struct numbering far = plain;
        far.slit_far = 32;
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        struct fingerprint *b = fp_of(host_a, N_A, &far);
        assert_string_not_equal(a->digest, b->digest);
        _cleanup_free_ char *changed = changed_groups(a, b);
        assert_string_equal(changed, "");
        fingerprint_free(a);
        fingerprint_free(b);
}

/* The position of the device at bus:slot.func of spec in its fingerprint. */
static char *position_of(const struct dev_spec *spec, size_t n, unsigned bus, unsigned slot, unsigned func) {
        struct hostmap *h = build(spec, n, &plain);
        struct fingerprint *f = fingerprint_new(h);
        struct pci_addr a = addr_of(&plain, bus, slot, func);
        const struct hostmap_device *d = hostmap_find_device(h, &a);
        assert_non_null(d);
        char *pos = fingerprint_position(f, h, (size_t) (d - h->devices));
        fingerprint_free(f);
        hostmap_free(h);
        return pos;
}

/* Devices that do not count change nothing, whatever their driver: the
 * system peripheral beside the NIC of pci0000:30 on its host driver, on
 * vfio-pci (its guest runs) or on a variant driver gives one digest and
 * one position for the NIC.  A co-processor (QAT, 0b40) counts on either
 * driver.  A VF fewer changes its PF's group. */
static void test_what_counts(void **state) {
        (void) state;
        struct dev_spec *s = copy_a();
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        _cleanup_free_ char *nic_a = position_of(host_a, N_A, 0x31, 0, 0);
        assert_non_null(nic_a);
        size_t k_per = find_spec(s, 0x30, 2, 0);

        static const char *const drivers[] = { "qat_4xxx", "vfio-pci", "acme_vfio_pci" };
        for (size_t i = 0; i < ELEMENTSOF(drivers); i++) {
                s[k_per].driver = drivers[i];
                struct fingerprint *b = fp_of(s, N_A, &plain);
                if (!streq(a->digest, b->digest))
                        fail_msg("a system peripheral on %s changes the digest:\n%s", drivers[i], b->canonical);
                _cleanup_free_ char *nic_b = position_of(s, N_A, 0x31, 0, 0);
                assert_string_equal(nic_a, nic_b);
                fingerprint_free(b);
        }
        /* A co-processor: it counts, in its group, on either driver. */
        s[k_per].class = 0x0b4000;
        s[k_per].driver = "4xxx";
        struct fingerprint *c = fp_of(s, N_A, &plain);
        assert_string_not_equal(a->digest, c->digest);
        _cleanup_free_ char *changed = changed_groups(a, c);
        assert_string_equal(changed, "pci0000:30");
        assert_non_null(strstr(c->canonical, "class 0b4000 driver vfio-pci"));
        s[k_per].driver = "vfio-pci";
        struct fingerprint *c2 = fp_of(s, N_A, &plain);
        assert_string_equal(c->digest, c2->digest);
        fingerprint_free(c2);
        /* One VF fewer: its PF's group changes. */
        struct dev_spec *s2 = copy_a();
        size_t k = find_spec(s2, 0x31, 0, 3);
        memmove(&s2[k], &s2[k + 1], (N_A - k - 1) * sizeof(*s2));
        struct fingerprint *d = fp_of(s2, N_A - 1, &plain);
        assert_string_not_equal(a->digest, d->digest);
        _cleanup_free_ char *changed2 = changed_groups(a, d);
        assert_string_equal(changed2, "pci0000:30");
        free(s2);
        fingerprint_free(a);
        fingerprint_free(c);
        fingerprint_free(d);
        free(s);
}

/* A GPU's HDMI audio function (13:00.1, class 0403) is held with the GPU
 * (function 0 of its slot counts), on its host driver or on vfio-pci
 * alike; an audio function in a slot whose function 0 does not count (the
 * system peripheral's, 30:02) is not held and changes nothing. */
static void test_slot_companions(void **state) {
        (void) state;
        struct fingerprint *a = fp_of(host_a, N_A, &plain);
        struct dev_spec *s = xcalloc(N_A + 1, sizeof(*s));
        memcpy(s, host_a, N_A * sizeof(*s));
        size_t k_gpu = find_spec(s, 0x13, 0, 0);
        s[N_A] = s[k_gpu];
        s[N_A].func = 1;
        s[N_A].class = 0x040300;
        s[N_A].device = 0x22ba;
        static const char *const drivers[] = { "snd_hda_intel", "vfio-pci" };
        char *digest = NULL;
        for (size_t i = 0; i < ELEMENTSOF(drivers); i++) {
                s[N_A].driver = drivers[i];
                _cleanup_hostmap_ struct hostmap *h = build(s, N_A + 1, &plain);
                struct pci_addr pa = { 0, 0x13, 0, 1 };
                assert_true(fingerprint_holds(h, hostmap_find_device(h, &pa)));
                struct fingerprint *b = fp_of(s, N_A + 1, &plain);
                assert_string_not_equal(a->digest, b->digest);
                if (digest)
                        assert_string_equal(digest, b->digest);
                else
                        digest = xstrdup(b->digest);
                fingerprint_free(b);
        }
        free(digest);
        size_t k_per = find_spec(s, 0x30, 2, 0);
        s[N_A] = s[k_per];
        s[N_A].func = 1;
        s[N_A].class = 0x040300;
        s[N_A].driver = "vfio-pci";
        _cleanup_hostmap_ struct hostmap *h = build(s, N_A + 1, &plain);
        struct pci_addr pa = { 0, 0x30, 2, 1 };
        assert_false(fingerprint_holds(h, hostmap_find_device(h, &pa)));
        struct fingerprint *c = fp_of(s, N_A + 1, &plain);
        assert_string_equal(a->digest, c->digest);
        fingerprint_free(c);
        fingerprint_free(a);
        free(s);
}

/* fingerprint_below(): for each GPU of host A, the text below each
 * bridge above it is what the position's "br:" item digests, holds only
 * counted devices (no system peripheral, no empty port), and is the same
 * on the renumbered host; past its bridges, and for an uncounted device,
 * NULL. */
static void test_below(void **state) {
        (void) state;
        struct hostmap *h = build(host_a, N_A, &plain);
        struct hostmap *r = build(host_a, N_A, &renumbered);
        struct fingerprint *f = fingerprint_new(h);
        struct fingerprint *fr = fingerprint_new(r);
        static const unsigned gpus[] = { 0x13, 0x14, 0x93, 0x94, 0x31 };
        for (size_t i = 0; i < ELEMENTSOF(gpus); i++) {
                struct pci_addr a = addr_of(&plain, gpus[i], 0, 0), b = addr_of(&renumbered, gpus[i], 0, 0);
                size_t k = (size_t) (hostmap_find_device(h, &a) - h->devices);
                size_t kr = (size_t) (hostmap_find_device(r, &b) - r->devices);
                _cleanup_free_ char *pos = fingerprint_position(f, h, k);
                const char *br = pos;
                for (size_t depth = 0; depth < h->devices[k].n_upstream; depth++) {
                        _cleanup_free_ char *t = fingerprint_below(f, h, k, depth);
                        _cleanup_free_ char *tr = fingerprint_below(fr, r, kr, depth);
                        assert_non_null(t);
                        assert_string_equal(t, tr);
                        assert_true(strncmp(t, "bridge{", 7) == 0);
                        assert_null(strstr(t, "088000"));
                        char hex[SHA256_HEX_SIZE];
                        sha256_hex(t, strlen(t), hex);
                        br = strstr(br, " br:");
                        assert_non_null(br);
                        br += 4;
                        assert_true(strncmp(br, hex, FINGERPRINT_POSITION_DIGEST) == 0);
                }
                assert_null(fingerprint_below(f, h, k, h->devices[k].n_upstream));
        }
        /* Node 0's switch, below its root port: three ports, each with its
         * device; node 1's has an empty fourth port, which is not there. */
        struct pci_addr g0 = addr_of(&plain, 0x13, 0, 0), g1 = addr_of(&plain, 0x93, 0, 0);
        _cleanup_free_ char *t0 = fingerprint_below(f, h, (size_t) (hostmap_find_device(h, &g0) - h->devices), 0);
        _cleanup_free_ char *t1 = fingerprint_below(f, h, (size_t) (hostmap_find_device(h, &g1) - h->devices), 0);
        assert_string_equal(t0, t1);
        struct pci_addr per = addr_of(&plain, 0x30, 2, 0);
        assert_null(fingerprint_below(f, h, (size_t) (hostmap_find_device(h, &per) - h->devices), 0));
        fingerprint_free(f);
        fingerprint_free(fr);
        hostmap_free(h);
        hostmap_free(r);
}

/* Which nodes share a socket counts; the socket's number does not. */
static void test_sockets(void **state) {
        (void) state;
        struct hostmap *h = build(host_a, N_A, &plain);
        struct fingerprint *a = fingerprint_new(h);
        h->nodes[1].socket = h->nodes[0].socket;
        struct fingerprint *b = fingerprint_new(h);
        assert_string_not_equal(a->digest, b->digest);
        assert_non_null(strstr(b->canonical, "node 1 cpus 8 socket 0 "));
        h->nodes[0].socket = 42;
        h->nodes[1].socket = 42;
        struct fingerprint *c = fingerprint_new(h);
        assert_string_equal(b->digest, c->digest);
        fingerprint_free(a);
        fingerprint_free(b);
        fingerprint_free(c);
        hostmap_free(h);
}

/* A capture that links a VF to itself, or to another VF: no loop, each
 * described once, standalone. */
static void test_physfn_loops(void **state) {
        (void) state;
        struct hostmap *h = build(host_a, N_A, &plain);
        struct pci_addr self, vf2;
        assert_int_equal(pci_addr_parse("0000:31:00.2", &self), 0);
        assert_int_equal(pci_addr_parse("0000:31:00.3", &vf2), 0);
        struct hostmap_device *d = (struct hostmap_device *) hostmap_find_device(h, &self);
        struct hostmap_device *e = (struct hostmap_device *) hostmap_find_device(h, &vf2);
        d->physfn = self;                 /* its own PF */
        e->physfn = self;                 /* a VF's VF */
        struct fingerprint *f = fingerprint_new(h);
        const char *vf = "dev(15b3:101e class 020700 driver vfio-pci bars 0:m64p:0x100000)";
        const char *p = strstr(f->canonical, vf);
        assert_non_null(p);
        p = strstr(p + 1, vf);
        assert_non_null(p);
        assert_null(strstr(p + 1, vf));
        assert_null(strstr(f->canonical, "vfs{"));
        fingerprint_free(f);
        hostmap_free(h);
}

/* An empty host (no devices) still has a fingerprint: its nodes. */
static void test_no_devices(void **state) {
        (void) state;
        struct fingerprint *f = fp_of(host_a, 0, &plain);
        assert_int_equal(f->n_groups, 0);
        assert_string_equal(f->canonical, "pcinuma topology fingerprint 2\n"
                                          "node 0 cpus 8 socket 0 distances 10 21\n"
                                          "node 1 cpus 8 socket 1 distances 21 10\n");
        fingerprint_free(f);
        assert_null(fingerprint_free(NULL));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_counts),
                cmocka_unit_test(test_canonical),
                cmocka_unit_test(test_renumbered_same),
                cmocka_unit_test(test_permuted_ports_same),
                cmocka_unit_test(test_moved_device),
                cmocka_unit_test(test_other_driver),
                cmocka_unit_test(test_driver_kind),
                cmocka_unit_test(test_other_model),
                cmocka_unit_test(test_other_distance),
                cmocka_unit_test(test_what_counts),
                cmocka_unit_test(test_slot_companions),
                cmocka_unit_test(test_below),
                cmocka_unit_test(test_sockets),
                cmocka_unit_test(test_physfn_loops),
                cmocka_unit_test(test_no_devices),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

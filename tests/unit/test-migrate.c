/* Tests for lib/core/migrate: the mapping of an incoming domain's devices
 * to a destination host's.  Host maps are built in memory (the builder is
 * test-fingerprint.c's): a renumbered host accepts and remaps every device
 * (devices that share a switch still share one, a VF stays beside its
 * PF's VFs); a GPU moved to the other socket is refused naming it and the
 * node; another kind of driver (a VFIO variant driver) is refused naming
 * it, a host driver where the source had vfio-pci is not; whole domains through
 * engine_incoming(): accepted and rewritten on a renumbered host (guest
 * side unchanged, the destination's plan idempotent), refused under
 * migration: refuse and for a mark that says migratable="no"; the
 * search's budget (a forged mark that would take a million placements is
 * refused at MIGRATE_MAP_BUDGET, naming the limit); mdevs mapped to mdevs
 * of their type on a parent in the same position (consistently, distinct)
 * or refused naming the mdev, and a whole domain with a vGPU migrated; a
 * device without mdevs preferred to one with; a device (an mdev) another
 * domain uses avoided when a free one is in the same place, and taken,
 * naming that domain, when none is. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engine.h"
#include "fake-vm.h"
#include "fingerprint.h"
#include "hostmap.h"
#include "mark.h"
#include "migrate.h"
#include "pciaddr.h"

#include "fake-fleet.h"


static bool has(const char *s, const char *sub) {
        return s && strstr(s, sub);
}

/* The mark of a domain planned on host a using the given devices (BDFs on
 * the plain numbering), as migrate_map() reads it. */
static void mark_of(const struct hostmap *a, const char *const *bdfs, size_t n, struct mark *ret) {
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(a);
        struct mark m = {0};
        for (size_t k = 0; k < n; k++) {
                struct pci_addr pa;
                assert_int_equal(pci_addr_parse(bdfs[k], &pa), 0);
                const struct hostmap_device *d = hostmap_find_device(a, &pa);
                assert_non_null(d);
                *GROW(m.devices, m.n_devices) = (struct mark_device) {
                        .host = xstrdup(bdfs[k]), .host_node = d->node, .host_socket = -1,
                        .position = fingerprint_position(f, a, (size_t) (d - a->devices)),
                        .vendor_device = xasprintf("%04x:%04x", d->vendor, d->device),
                        .driver = d->driver ? xstrdup(d->driver) : NULL,
                };
                assert_non_null(m.devices[k].position);
        }
        *ret = m;
}

static int map_on(const struct hostmap *b, const struct mark *m, struct migrate_map *ret, char **reason) {
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(b);
        return migrate_map(m, b, f, NULL, NULL, ret, reason);
}

/* A policy whose passthrough_pool holds 'entries' (a JSON list's inside). */
static struct policy *pool_policy(const char *entries) {
        _cleanup_free_ char *json = xasprintf("{\"passthrough_pool\": [%s]}", entries);
        struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;
        if (policy_parse(json, strlen(json), "t.json", &p, &err) < 0)
                fail_msg("%s", err);
        return p;
}

/* map_on() under a policy whose passthrough_pool holds 'entries'. */
static int map_pool(const struct hostmap *b, const struct mark *m, const char *entries, struct migrate_map *ret,
                    char **reason) {
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(b);
        _cleanup_policy_ struct policy *pol = pool_policy(entries);
        return migrate_map_policy(m, b, f, pol, NULL, NULL, MIGRATE_MAP_BUDGET, ret, reason);
}

static const char *to_of(const struct migrate_map *map, const char *from) {
        for (size_t i = 0; i < map->n_pairs; i++)
                if (streq(map->pairs[i].from, from))
                        return map->pairs[i].to;
        fail_msg("%s not mapped", from);
        return NULL;
}

/* GPU and NIC of one switch, a GPU of the other socket, a VF, the NVMe. */
static const char *const used[] = { "0000:14:00.0", "0000:15:00.0", "0000:93:00.0", "0000:31:00.2", "0000:b1:00.0" };

static void test_renumbered_accepted(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = build(host_a, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *b = build(host_a, N_A, &renumbered);
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(a, used, ELEMENTSOF(used), &m);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        /* Issue 24: the NVMe in B's place is on its host driver (nvme):
         * the host's, never given, and named. */
        assert_int_equal(map_on(b, &m, &map, &reason), -1);
        if (!has(reason, "device 0000:b1:00.0 (144d:a80a, host node 1): the only devices of this host in its place are "
                         "bound to host drivers, and pcinuma never gives a migrating guest a device the host uses: "
                         "0002:11:00.0 (driver nvme) (bind one to vfio-pci, or list it in the policy's passthrough_pool)"))
                fail_msg("%s", reason);
        assert_int_equal(map.n_pairs, 0);
        free(reason);
        reason = NULL;
        /* Listed in the pool (by class, by BDF, by vendor:device), it is. */
        assert_int_equal(map_pool(b, &m, "\"class:0x0108\"", &map, &reason), 0);
        migrate_map_done(&map);
        assert_int_equal(map_pool(b, &m, "\"0002:11:00.0\"", &map, &reason), 0);
        migrate_map_done(&map);
        assert_int_equal(map_pool(b, &m, "\"class:0x01\", \"144d:a80a\"", &map, &reason), 0);
        migrate_map_done(&map);
        /* Another device in the pool does not count. */
        assert_int_equal(map_pool(b, &m, "\"0002:11:00.1\", \"class:0x0302\", \"144d:a80b\"", &map, &reason), -1);
        free(reason);
        reason = NULL;
        assert_int_equal(map_pool(b, &m, "\"class:0x010802\"", &map, &reason), 0);
        assert_null(reason);
        assert_int_equal(map.n_pairs, ELEMENTSOF(used));
        /* Domain 2, buses + 0x60: the GPU to one of that switch's GPUs,
         * the NIC to its NIC, the VF to one of the PF's VFs, each once. */
        const char *gpu = to_of(&map, "0000:14:00.0");
        assert_true(streq(gpu, "0002:73:00.0") || streq(gpu, "0002:74:00.0"));
        assert_string_equal(to_of(&map, "0000:15:00.0"), "0002:75:00.0");
        const char *gpu1 = to_of(&map, "0000:93:00.0");
        assert_true(streq(gpu1, "0002:f3:00.0") || streq(gpu1, "0002:f4:00.0"));
        const char *vf = to_of(&map, "0000:31:00.2");
        assert_true(streq(vf, "0002:91:00.2") || streq(vf, "0002:91:00.3"));
        assert_string_equal(to_of(&map, "0000:b1:00.0"), "0002:11:00.0");
        for (size_t i = 0; i < map.n_pairs; i++) {
                assert_non_null(map.pairs[i].to_position);
                assert_true(has(map.pairs[i].to_position, "rc:"));
        }
        /* Socket ids follow the destination's (node 0: socket 7). */
        assert_int_equal(map.pairs[0].to_socket, 7);
        migrate_map_done(&map);

        /* Both GPUs of one switch and the NIC: each GPU once. */
        static const char *const two[] = { "0000:13:00.0", "0000:14:00.0", "0000:15:00.0" };
        _cleanup_(mark_done) struct mark m2 = {0};
        mark_of(a, two, ELEMENTSOF(two), &m2);
        assert_int_equal(map_on(b, &m2, &map, &reason), 0);
        assert_string_not_equal(to_of(&map, "0000:13:00.0"), to_of(&map, "0000:14:00.0"));
        migrate_map_done(&map);
}

/* Host C: the GPU at 14:00.0 sits on the other socket, behind node 1's
 * switch's fourth port. */
static void test_moved_gpu_refused(void **state) {
        (void) state;
        _cleanup_free_ struct dev_spec *c = copy_a();
        size_t k = find_spec(c, 0x14, 0, 0);
        c[k] = (struct dev_spec) { 0x96, 0, 0, 1, GPU, 0x90, {0x90, 0x91, 0x92}, {1, 0, 3}, 3, -1 };
        _cleanup_hostmap_ struct hostmap *a = build(host_a, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *hc = build(c, N_A, &renumbered);
        static const char *const gpu[] = { "0000:14:00.0" };
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(a, gpu, 1, &m);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        assert_int_equal(map_on(hc, &m, &map, &reason), -1);
        assert_int_equal(map.n_pairs, 0);
        assert_true(has(reason, "device 0000:14:00.0 (10de:2330, driver vfio-pci, host node 0)"));
        assert_true(has(reason, "no root complex of this host on that node holds the same devices"));
        /* The groups C did not change still map: the NVMe, node 0's VF. */
        static const char *const other[] = { "0000:b1:00.0", "0000:31:00.3" };
        _cleanup_(mark_done) struct mark m2 = {0};
        mark_of(a, other, 2, &m2);
        free(reason);
        reason = NULL;
        assert_int_equal(map_pool(hc, &m2, "\"class:0x0108\"", &map, &reason), 0);
        migrate_map_done(&map);
}

/* Host D: node 0's RDMA NIC on the VFIO variant driver mlx5_vfio_pci
 * instead of vfio-pci: another kind of driver, refused.  On its host
 * driver mlx5_core (and a GPU on nvidia): the same kind, mapped. */
static void test_other_driver_refused(void **state) {
        (void) state;
        _cleanup_free_ struct dev_spec *d = copy_a();
        d[find_spec(d, 0x15, 0, 0)].driver = "mlx5_vfio_pci";
        _cleanup_hostmap_ struct hostmap *a = build(host_a, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *hd = build(d, N_A, &plain);
        static const char *const nic[] = { "0000:15:00.0", "0000:14:00.0" };
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(a, nic, 2, &m);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        assert_int_equal(map_on(hd, &m, &map, &reason), -1);
        assert_true(has(reason, "device 0000:15:00.0 (15b3:1021, driver vfio-pci, host node 0): the driver's kind differs"));
        assert_true(has(reason, "0000:15:00.0 (node 0, driver mlx5_vfio_pci)"));
        /* The GPU beside it is refused too: its root complex holds another NIC. */
        assert_true(has(reason, "device 0000:14:00.0 (10de:2330, driver vfio-pci, host node 0): no root complex"));
        /* The same kind: a host driver where the source had vfio-pci.
         * The same position, but the host's (issue 24): refused naming
         * them, unless the policy's passthrough_pool lists them. */
        _cleanup_free_ struct dev_spec *e = copy_a();
        e[find_spec(e, 0x15, 0, 0)].driver = "mlx5_core";
        e[find_spec(e, 0x14, 0, 0)].driver = "nvidia";
        e[find_spec(e, 0x13, 0, 0)].driver = "nvidia";
        _cleanup_hostmap_ struct hostmap *he = build(e, N_A, &renumbered);
        free(reason);
        reason = NULL;
        assert_int_equal(map_on(he, &m, &map, &reason), -1);
        if (!has(reason, "device 0000:15:00.0 (15b3:1021, host node 0): the only devices of this host in its place are "
                         "bound to host drivers") || !has(reason, "0002:75:00.0 (driver mlx5_core)") ||
            !has(reason, "device 0000:14:00.0 (10de:2330, host node 0)") ||
            !has(reason, "0002:73:00.0 (driver nvidia), 0002:74:00.0 (driver nvidia)"))
                fail_msg("%s", reason);
        free(reason);
        reason = NULL;
        assert_int_equal(map_pool(he, &m, "\"0002:75:00.0\", \"10de:2330\"", &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:15:00.0"), "0002:75:00.0");
        const char *gpu = to_of(&map, "0000:14:00.0");
        assert_true(streq(gpu, "0002:73:00.0") || streq(gpu, "0002:74:00.0"));
        migrate_map_done(&map);
        /* And back: a mark made on the host drivers maps onto vfio-pci. */
        _cleanup_(mark_done) struct mark me = {0};
        _cleanup_hostmap_ struct hostmap *he_plain = build(e, N_A, &plain);
        mark_of(he_plain, nic, 2, &me);
        assert_int_equal(map_on(a, &me, &map, &reason), 0);
        migrate_map_done(&map);
        m.n_devices = 1;        /* (mark_done frees only what n_devices counts) */
        free(m.devices[1].host);
        free(m.devices[1].position);
        free(m.devices[1].vendor_device);
        free(m.devices[1].driver);
        /* A mark without positions (an earlier pcinuma's) is refused. */
        free(m.devices[0].position);
        m.devices[0].position = NULL;
        free(reason);
        reason = NULL;
        assert_int_equal(map_on(a, &m, &map, &reason), -1);
        assert_true(has(reason, "the mark records no position"));

        /* An mdev the mark records no type for (an earlier pcinuma's):
         * refused naming it. */
        _cleanup_(mark_done) struct mark mm = {0};
        *GROW(mm.devices, mm.n_devices) = (struct mark_device) {
                .mdev = xstrdup("4b20d080-1b54-4048-85b3-a6a62d165c01"), .host_node = 0, .host_socket = -1,
        };
        free(reason);
        reason = NULL;
        assert_int_equal(map_on(a, &mm, &map, &reason), -1);
        assert_true(has(reason, "mdev 4b20d080-1b54-4048-85b3-a6a62d165c01: the mark records no mdev type"));
}

/* A host whose node 0 root complex holds n_gpus GPUs, each below a root
 * port of its own, and a NIC on node 1: every GPU is in a position like
 * every other's. */
static struct hostmap *many_gpus(size_t n_gpus) {
        struct dev_spec *s = xcalloc(2 * n_gpus + 2, sizeof(*s));
        size_t n = 0;
        for (unsigned i = 0; i < n_gpus; i++) {
                s[n++] = (struct dev_spec) { 0x10, i + 1, 0, 0, 0x060400, 0x8086, 0x347a, "pcieport", 0x10, {0}, {0}, 0, -1 };
                s[n++] = (struct dev_spec) { 0x11 + i, 0, 0, 0, GPU, 0x10, {0x10}, {i + 1}, 1, -1 };
        }
        s[n++] = (struct dev_spec) { 0x90, 1, 0, 1, 0x060400, 0x8086, 0x347a, "pcieport", 0x90, {0}, {0}, 0, -1 };
        s[n++] = (struct dev_spec) { 0x91, 0, 0, 1, NIC, 0x90, {0x90}, {1}, 1, -1 };
        struct hostmap *h = build(s, n, &plain);
        free(s);
        return h;
}

/* A forged device beside the mark's first: its position with another root
 * port and slot (0000:10:1f.0, 0000:3f:00), so that it is in the same
 * position as every GPU but needs a root port of its own. */
static void forge_one(struct mark *m, unsigned i) {
        const struct mark_device *d0 = &m->devices[0];
        _cleanup_free_ char *host = xasprintf("0000:%02x:00.0", 0x30 + i);
        _cleanup_free_ char *rp = xasprintf("@0000:10:%02x.0", 0x18 + i), *slot = xasprintf("@0000:%02x:00", 0x30 + i);
        struct strbuf b = {0};
        for (const char *p = d0->position; *p;) {
                if (strncmp(p, "@0000:10:01.0", 13) == 0) {
                        strbuf_append(&b, rp);
                        p += 13;
                } else if (strncmp(p, "@0000:11:00", 11) == 0 && (p[11] == 0 || p[11] == ' ')) {
                        strbuf_append(&b, slot);
                        p += 11;
                } else
                        strbuf_appendn(&b, p++, 1);
        }
        *GROW(m->devices, m->n_devices) = (struct mark_device) {
                .host = xstrdup(host), .host_node = 0, .host_socket = -1, .position = strbuf_steal(&b),
                .vendor_device = xstrdup(m->devices[0].vendor_device), .driver = xstrdup(m->devices[0].driver),
        };
}

/* The search has a budget: a forged mark with one GPU more than this host
 * has, in the same position as all of them, would take about e * 9!
 * (a million) placements to refuse; it is refused once MIGRATE_MAP_BUDGET
 * placements are tried, saying so.  A real mark takes one placement per
 * device. */
static void test_search_budget(void **state) {
        (void) state;
        enum { N = 9 };
        _cleanup_hostmap_ struct hostmap *h = many_gpus(N);
        const char *bdfs[N];
        char names[N][PCI_ADDR_STRLEN];
        for (unsigned i = 0; i < N; i++) {
                snprintf(names[i], sizeof names[i], "0000:%02x:00.0", 0x11 + i);
                bdfs[i] = names[i];
        }
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(h, bdfs, N, &m);
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(h);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        /* The genuine mark: N placements, not one fewer. */
        assert_int_equal(migrate_map_budget(&m, h, f, NULL, NULL, N, &map, &reason), 0);
        assert_int_equal(map.n_pairs, N);
        migrate_map_done(&map);
        assert_int_equal(migrate_map_budget(&m, h, f, NULL, NULL, N - 1, &map, &reason), -1);
        assert_true(has(reason, "gave up after trying 8 placements (the limit, MIGRATE_MAP_BUDGET)"));
        assert_int_equal(map.n_pairs, 0);

        /* One forged GPU more: the limit, not an exhaustive search. */
        forge_one(&m, 0);
        free(reason);
        reason = NULL;
        assert_int_equal(migrate_map(&m, h, f, NULL, NULL, &map, &reason), -1);
        assert_true(has(reason, "gave up after trying 50000 placements"));
        assert_int_equal(map.n_pairs, 0);
        /* With room for the whole search, the same mark is refused as
         * not placeable together: the budget is what stopped it above. */
        free(reason);
        reason = NULL;
        assert_int_equal(migrate_map_budget(&m, h, f, NULL, NULL, SIZE_MAX, &map, &reason), -1);
        assert_true(has(reason, "but not together"));

        /* More PCI devices than this host has capable ones: refused before
         * any search. */
        forge_one(&m, 1);
        free(reason);
        reason = NULL;
        assert_int_equal(migrate_map_budget(&m, h, f, NULL, NULL, 0, &map, &reason), -1);
        assert_true(has(reason, "the mark records 11 host devices; this host has only 10 passthrough-capable devices"));
}

/* On a host that names its devices as the source did (numbered alike, or
 * the same host), each device keeps its name: first fit would send every
 * evacuated single-GPU domain to the same first GPU.  A free device still
 * wins over a same-named one another domain uses. */
static void test_same_name_first(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = many_gpus(4);
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(h);
        const char *bdfs[] = { "0000:13:00.0" };
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(h, bdfs, 1, &m);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        assert_int_equal(migrate_map(&m, h, f, NULL, NULL, &map, &reason), 0);
        assert_int_equal(map.n_pairs, 1);
        assert_string_equal(map.pairs[0].to, "0000:13:00.0");
        migrate_map_done(&map);

        const struct migrate_used u[] = { { "0000:13:00.0", "7d3c1f0e-0000-4000-8000-000000000001", "vm-other" } };
        struct migrate_in_use in_use = { .v = u, .n = 1 };
        assert_int_equal(migrate_map(&m, h, f, &in_use, NULL, &map, &reason), 0);
        assert_int_equal(map.n_pairs, 1);
        assert_string_not_equal(map.pairs[0].to, "0000:13:00.0");
        migrate_map_done(&map);
}

/* The pass that allows devices other domains use has a budget of its own:
 * with one of nine equal GPUs used elsewhere, the free-only pass spends
 * its whole budget proving that eight free GPUs cannot hold nine; the
 * second pass then maps them at once (accepted, naming the shared one),
 * not "gave up". */
static void test_second_pass_budget(void **state) {
        (void) state;
        enum { N = 9 };
        _cleanup_hostmap_ struct hostmap *h = many_gpus(N);
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(h);
        const char *bdfs[N];
        char names[N][PCI_ADDR_STRLEN];
        for (unsigned i = 0; i < N; i++) {
                snprintf(names[i], sizeof names[i], "0000:%02x:00.0", 0x11 + i);
                bdfs[i] = names[i];
        }
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(h, bdfs, N, &m);
        const struct migrate_used u[] = { { "0000:15:00.0", "7d3c1f0e-0000-4000-8000-000000000001", "vm-other" } };
        struct migrate_in_use in_use = { .v = u, .n = 1 };
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        assert_int_equal(migrate_map_budget(&m, h, f, &in_use, NULL, 1000, &map, &reason), 0);
        assert_int_equal(map.n_pairs, N);
        size_t shared = 0;
        for (size_t i = 0; i < map.n_pairs; i++)
                shared += map.pairs[i].used_by != NULL;
        assert_int_equal(shared, 1);
        migrate_map_done(&map);
}

/* --- mdevs ----------------------------------------------------------------- */

#define UA(n) "aaaaaaaa-0000-4000-8000-00000000000" #n
#define UB(n) "bbbbbbbb-0000-4000-8000-00000000000" #n

/* Host A's GPUs on nvidia with vGPUs: two nvidia-63 on 13:00.0 (node 0,
 * beside the switch's NIC), one nvidia-63 and one nvidia-64 on 93:00.0
 * (node 1). */
static const struct mdev_spec mdevs_a[] = {
        { UA(1), 0x13, 0, 0, "nvidia-63" }, { UA(2), 0x13, 0, 0, "nvidia-63" },
        { UA(3), 0x93, 0, 0, "nvidia-63" }, { UA(4), 0x93, 0, 0, "nvidia-64" },
};
/* Host B (renumbered) has its own: on 14:00.0 (the other GPU of node 0's
 * switch) and 94:00.0. */
static const struct mdev_spec mdevs_b[] = {
        { UB(1), 0x14, 0, 0, "nvidia-63" }, { UB(2), 0x14, 0, 0, "nvidia-63" },
        { UB(3), 0x94, 0, 0, "nvidia-64" }, { UB(4), 0x94, 0, 0, "nvidia-63" },
};

static struct dev_spec *gpus_on_nvidia(void) {
        struct dev_spec *s = copy_a();
        for (size_t k = 0; k < N_A; k++)
                if ((s[k].class >> 16) == 0x03)
                        s[k].driver = "nvidia";
        return s;
}

/* Add mdev 'uuid' of host a to mark m, as migrate_annotate() records it. */
static void add_mdev(const struct hostmap *a, const char *uuid, struct mark *m) {
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(a);
        const struct hostmap_mdev *md = hostmap_find_mdev(a, uuid);
        assert_non_null(md);
        const struct hostmap_device *p = hostmap_find_device(a, &md->parent);
        assert_non_null(p);
        *GROW(m->devices, m->n_devices) = (struct mark_device) {
                .mdev = xstrdup(uuid), .host_node = p->node, .host_socket = -1, .mdev_type = xstrdup(md->type),
                .position = fingerprint_position(f, a, (size_t) (p - a->devices)),
                .vendor_device = xasprintf("%04x:%04x", p->vendor, p->device),
        };
        assert_non_null(m->devices[m->n_devices - 1].position);
}

static const struct migrate_pair *pair_of(const struct migrate_map *map, const char *from) {
        for (size_t i = 0; i < map->n_pairs; i++)
                if (streq(map->pairs[i].from, from))
                        return &map->pairs[i];
        fail_msg("%s not mapped", from);
        return NULL;
}

/* mdevs map to mdevs of their type whose parent is in the parent's
 * position, consistently with the devices (the NIC beside the parent on
 * A is beside the new parent on B) and distinct; two mdevs of one parent
 * go to two mdevs of one parent. */
static void test_mdev_mapped(void **state) {
        (void) state;
        _cleanup_free_ struct dev_spec *s = gpus_on_nvidia();
        _cleanup_hostmap_ struct hostmap *a = build_mdevs(s, N_A, &plain, mdevs_a, ELEMENTSOF(mdevs_a));
        _cleanup_hostmap_ struct hostmap *b = build_mdevs(s, N_A, &renumbered, mdevs_b, ELEMENTSOF(mdevs_b));
        static const char *const nic[] = { "0000:15:00.0" };
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(a, nic, 1, &m);
        add_mdev(a, UA(1), &m);
        add_mdev(a, UA(2), &m);
        add_mdev(a, UA(3), &m);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        assert_int_equal(map_on(b, &m, &map, &reason), 0);
        assert_null(reason);
        assert_int_equal(map.n_pairs, 4);
        assert_string_equal(to_of(&map, "0000:15:00.0"), "0002:75:00.0");
        const struct migrate_pair *p1 = pair_of(&map, UA(1)), *p2 = pair_of(&map, UA(2)), *p3 = pair_of(&map, UA(3));
        assert_true(p1->mdev && p2->mdev && p3->mdev);
        assert_false(map.pairs[0].mdev);
        assert_true(streq(p1->to, UB(1)) || streq(p1->to, UB(2)));
        assert_true(streq(p2->to, UB(1)) || streq(p2->to, UB(2)));
        assert_string_not_equal(p1->to, p2->to);
        assert_string_equal(p3->to, UB(4));             /* the nvidia-63 of node 1, not the nvidia-64 */
        assert_true(has(p1->to_position, "rc:") && has(p1->to_position, "@pci0002:70 "));   /* the parent's, on B */
        assert_int_equal(p3->to_socket, 10);            /* node 1's socket on B (7 + 3) */
        migrate_map_done(&map);
}

/* A GPU goes to a GPU of the same place that holds no mdevs when there is
 * one (B's 0002:73:00.0, first in address order, has a vGPU): a
 * preference, not a refusal (with vGPUs on both, both still map). */
static void test_prefers_gpu_without_mdevs(void **state) {
        (void) state;
        _cleanup_free_ struct dev_spec *s = gpus_on_nvidia();
        static const struct mdev_spec on73[] = { { UB(1), 0x13, 0, 0, "nvidia-63" } };
        static const struct mdev_spec on_both[] = { { UB(1), 0x13, 0, 0, "nvidia-63" }, { UB(2), 0x14, 0, 0, "nvidia-63" } };
        _cleanup_hostmap_ struct hostmap *a = build(s, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *b = build_mdevs(s, N_A, &renumbered, on73, 1);
        _cleanup_hostmap_ struct hostmap *b2 = build_mdevs(s, N_A, &renumbered, on_both, 2);
        static const char *const gpu[] = { "0000:13:00.0" }, *const two[] = { "0000:13:00.0", "0000:14:00.0" };
        _cleanup_(mark_done) struct mark m = {0}, m2 = {0};
        mark_of(a, gpu, 1, &m);
        mark_of(a, two, 2, &m2);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        /* (its GPUs are on nvidia: given only from the pool) */
        assert_int_equal(map_pool(b, &m, "\"10de:2330\"", &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:13:00.0"), "0002:74:00.0");
        migrate_map_done(&map);
        assert_int_equal(map_pool(b2, &m2, "\"10de:2330\"", &map, &reason), 0);
        assert_int_equal(map.n_pairs, 2);
        migrate_map_done(&map);
        /* Numbered like A: the same-named GPU (13:00.0) holds the vGPU, so
         * the other one still wins; the same name only leads within a
         * tier. */
        _cleanup_hostmap_ struct hostmap *c = build_mdevs(s, N_A, &plain, on73, 1);
        assert_int_equal(map_pool(c, &m, "\"10de:2330\"", &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:13:00.0"), "0000:14:00.0");
        migrate_map_done(&map);
}

/* The GPUs of these hosts are on nvidia (a vGPU host's): whole, they are
 * given only from the policy's passthrough_pool. */
static int map_in_use(const struct hostmap *b, const struct mark *m, const struct migrate_used *u, size_t n,
                      const char *self, struct migrate_map *ret, char **reason) {
        _cleanup_fingerprint_ struct fingerprint *f = fingerprint_new(b);
        _cleanup_policy_ struct policy *pol = pool_policy("\"10de:2330\"");
        struct migrate_in_use in_use = { .v = u, .n = n };
        return migrate_map_policy(m, b, f, pol, &in_use, self, MIGRATE_MAP_BUDGET, ret, reason);
}

#define OTHER "cccccccc-0000-4000-8000-000000000001"
#define SELF "dddddddd-0000-4000-8000-000000000001"

/* Two GPUs of B in the same place (0002:73:00.0 and 0002:74:00.0 on node
 * 0's switch); without a preference A's 0000:13:00.0 goes to the first,
 * 73:00.0.  Another domain using 73:00.0 sends it to 74:00.0; the
 * incoming domain's own entries do not count; with both used it still
 * maps, saying which domain uses its device.  The same for mdevs. */
static void test_prefers_free_devices(void **state) {
        (void) state;
        _cleanup_free_ struct dev_spec *s = gpus_on_nvidia();
        _cleanup_hostmap_ struct hostmap *a = build(s, N_A, &plain);
        _cleanup_hostmap_ struct hostmap *b = build(s, N_A, &renumbered);
        static const char *const gpu[] = { "0000:13:00.0" };
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(a, gpu, 1, &m);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;

        /* What the mapping picks with nothing in use. */
        assert_int_equal(map_in_use(b, &m, NULL, 0, NULL, &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:13:00.0"), "0002:73:00.0");
        assert_null(map.pairs[0].used_by);
        migrate_map_done(&map);

        const struct migrate_used one[] = {
                { "0002:73:00.0", OTHER, "vm-other" }, { "0002:73:00.0", SELF, "vm-self" },
        };
        assert_int_equal(map_in_use(b, &m, one, 1, SELF, &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:13:00.0"), "0002:74:00.0");
        assert_null(map.pairs[0].used_by);
        migrate_map_done(&map);
        /* The incoming domain's own use of a device is no conflict. */
        assert_int_equal(map_in_use(b, &m, one + 1, 1, SELF, &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:13:00.0"), "0002:73:00.0");
        assert_null(map.pairs[0].used_by);
        migrate_map_done(&map);

        const struct migrate_used both[] = {
                { "0002:73:00.0", OTHER, "vm-other" }, { "0002:74:00.0", OTHER, NULL },
        };
        assert_int_equal(map_in_use(b, &m, both, 2, SELF, &map, &reason), 0);
        assert_null(reason);
        assert_int_equal(map.n_pairs, 1);
        assert_string_equal(to_of(&map, "0000:13:00.0"), "0002:73:00.0");
        assert_string_equal(map.pairs[0].used_by, "vm-other");
        migrate_map_done(&map);
        /* A domain without a name in the cache is named by its UUID. */
        const struct migrate_used both_rev[] = { both[1], { "0002:73:00.0", OTHER, NULL } };
        assert_int_equal(map_in_use(b, &m, both_rev, 2, SELF, &map, &reason), 0);
        assert_string_equal(map.pairs[0].used_by, OTHER);
        migrate_map_done(&map);

        /* mdevs: A's UA(1) goes to UB(1) or UB(2) (B's two nvidia-63 on
         * 14:00.0); whichever it picks, another domain using that one
         * sends it to the other. */
        _cleanup_hostmap_ struct hostmap *am = build_mdevs(s, N_A, &plain, mdevs_a, ELEMENTSOF(mdevs_a));
        _cleanup_hostmap_ struct hostmap *bm = build_mdevs(s, N_A, &renumbered, mdevs_b, ELEMENTSOF(mdevs_b));
        _cleanup_(mark_done) struct mark mm = {0};
        add_mdev(am, UA(1), &mm);
        assert_int_equal(map_in_use(bm, &mm, NULL, 0, NULL, &map, &reason), 0);
        const char *first = streq(to_of(&map, UA(1)), UB(1)) ? UB(1) : UB(2), *second = streq(first, UB(1)) ? UB(2) : UB(1);
        assert_string_equal(to_of(&map, UA(1)), first);
        migrate_map_done(&map);
        _cleanup_free_ char *id1 = xasprintf("mdev:%s", first), *id2 = xasprintf("mdev:%s", second);
        const struct migrate_used mused[] = { { id1, OTHER, "vm-other" }, { id2, OTHER, "vm-other" } };
        assert_int_equal(map_in_use(bm, &mm, mused, 1, SELF, &map, &reason), 0);
        assert_string_equal(to_of(&map, UA(1)), second);
        assert_null(map.pairs[0].used_by);
        migrate_map_done(&map);
        assert_int_equal(map_in_use(bm, &mm, mused, 2, SELF, &map, &reason), 0);
        assert_string_equal(map.pairs[0].used_by, "vm-other");
        migrate_map_done(&map);
}

/* Node 0 with two root complexes alike, each a GPU and a NIC below root
 * ports of their own.  A GPU and NIC of one root complex must go to one
 * root complex; the first-fit search puts the GPU on the first root
 * complex's.  With that NIC used by another domain, only a search that
 * tries free devices alone first finds the other root complex's pair
 * (preferring free ones in the order alone would take the used NIC). */
static void test_free_mapping_searched_first(void **state) {
        (void) state;
        static const struct dev_spec s[] = {
                { 0x10, 1, 0, 0, 0x060400, 0x8086, 0x347a, "pcieport", 0x10, {0}, {0}, 0, -1 },
                { 0x10, 2, 0, 0, 0x060400, 0x8086, 0x347a, "pcieport", 0x10, {0}, {0}, 0, -1 },
                { 0x11, 0, 0, 0, GPU, 0x10, {0x10}, {1}, 1, -1 },
                { 0x12, 0, 0, 0, NIC, 0x10, {0x10}, {2}, 1, -1 },
                { 0x20, 1, 0, 0, 0x060400, 0x8086, 0x347a, "pcieport", 0x20, {0}, {0}, 0, -1 },
                { 0x20, 2, 0, 0, 0x060400, 0x8086, 0x347a, "pcieport", 0x20, {0}, {0}, 0, -1 },
                { 0x21, 0, 0, 0, GPU, 0x20, {0x20}, {1}, 1, -1 },
                { 0x22, 0, 0, 0, NIC, 0x20, {0x20}, {2}, 1, -1 },
                { 0x90, 1, 0, 1, 0x060400, 0x8086, 0x347a, "pcieport", 0x90, {0}, {0}, 0, -1 },
                { 0x91, 0, 0, 1, NIC, 0x90, {0x90}, {1}, 1, -1 },
        };
        _cleanup_hostmap_ struct hostmap *h = build(s, ELEMENTSOF(s), &plain);
        static const char *const pair[] = { "0000:11:00.0", "0000:12:00.0" };
        _cleanup_(mark_done) struct mark m = {0};
        mark_of(h, pair, 2, &m);
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;
        assert_int_equal(map_in_use(h, &m, NULL, 0, NULL, &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:11:00.0"), "0000:11:00.0");
        assert_string_equal(to_of(&map, "0000:12:00.0"), "0000:12:00.0");
        migrate_map_done(&map);
        const struct migrate_used u[] = { { "0000:12:00.0", OTHER, "vm-other" }, { "0000:22:00.0", OTHER, "vm-other" } };
        assert_int_equal(map_in_use(h, &m, u, 1, SELF, &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:11:00.0"), "0000:21:00.0");
        assert_string_equal(to_of(&map, "0000:12:00.0"), "0000:22:00.0");
        assert_null(map.pairs[0].used_by);
        assert_null(map.pairs[1].used_by);
        migrate_map_done(&map);
        /* Both NICs used: the first root complex's pair, the NIC named. */
        assert_int_equal(map_in_use(h, &m, u, 2, SELF, &map, &reason), 0);
        assert_string_equal(to_of(&map, "0000:11:00.0"), "0000:11:00.0");
        assert_null(pair_of(&map, "0000:11:00.0")->used_by);
        assert_string_equal(pair_of(&map, "0000:12:00.0")->used_by, "vm-other");
        migrate_map_done(&map);
}

static void test_mdev_refused(void **state) {
        (void) state;
        _cleanup_free_ struct dev_spec *s = gpus_on_nvidia();
        _cleanup_hostmap_ struct hostmap *a = build_mdevs(s, N_A, &plain, mdevs_a, ELEMENTSOF(mdevs_a));
        struct migrate_map map = {0};
        _cleanup_free_ char *reason = NULL;

        /* No nvidia-64 on node 0 of B: refused naming the mdev, its type,
         * and where B's are. */
        static const struct mdev_spec b64[] = { { UB(3), 0x94, 0, 0, "nvidia-64" }, { UB(1), 0x14, 0, 0, "nvidia-63" } };
        static const struct mdev_spec a64[] = { { UA(5), 0x14, 0, 0, "nvidia-64" } };
        _cleanup_hostmap_ struct hostmap *a2 = build_mdevs(s, N_A, &plain, a64, 1);
        _cleanup_hostmap_ struct hostmap *b = build_mdevs(s, N_A, &renumbered, b64, 2);
        _cleanup_(mark_done) struct mark m = {0};
        add_mdev(a2, UA(5), &m);
        assert_int_equal(map_on(b, &m, &map, &reason), -1);
        assert_int_equal(map.n_pairs, 0);
        assert_true(has(reason, "mdev " UA(5) " (type nvidia-64, parent 10de:2330 on host node 0): no mdev of that type "
                                "here has its parent in the same place"));
        assert_true(has(reason, "\nthis host's mdevs of type nvidia-64: " UB(3) " (parent 0002:f4:00.0, node 1)"));

        /* A type B has none of. */
        free(m.devices[0].mdev_type);
        m.devices[0].mdev_type = xstrdup("nvidia-99");
        free(reason);
        reason = NULL;
        assert_int_equal(map_on(b, &m, &map, &reason), -1);
        assert_true(has(reason, "mdev " UA(5) " (type nvidia-99, parent 10de:2330 on host node 0): this host has no "
                                "mdev of type nvidia-99"));

        /* Two mdevs of one parent, and B has one on each of two parents:
         * each has a place, not together. */
        static const struct mdev_spec split[] = { { UB(1), 0x13, 0, 0, "nvidia-63" }, { UB(2), 0x14, 0, 0, "nvidia-63" } };
        _cleanup_hostmap_ struct hostmap *b2 = build_mdevs(s, N_A, &renumbered, split, 2);
        _cleanup_(mark_done) struct mark m2 = {0};
        add_mdev(a, UA(1), &m2);
        add_mdev(a, UA(2), &m2);
        free(reason);
        reason = NULL;
        assert_int_equal(map_on(b2, &m2, &map, &reason), -1);
        assert_true(has(reason, "but not together"));
        /* ... and three where B has two: refused before searching. */
        add_mdev(a, UA(3), &m2);
        free(reason);
        reason = NULL;
        assert_int_equal(map_on(b2, &m2, &map, &reason), -1);
        assert_true(has(reason, "the mark records 3 mdevs; this host has only 2"));
}

static struct policy *policy_of(const char *json) {
        struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(policy_parse(json, strlen(json), "t.json", &p, &err), 0);
        return p;
}

static void test_incoming(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = fake_vm_host();
        _cleanup_hostmap_ struct hostmap *b = fake_vm_host_renumbered();
        _cleanup_free_ char *planned = fake_vm_planned_fleet(a, "require");
        /* migration: same-topology, the fleet's opt-in (the default refuses). */
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");

        struct incoming_result r = {0};
        engine_incoming(planned, strlen(planned), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_ACCEPT);
        assert_string_equal(r.policy, "require");
        assert_int_equal(r.map.n_pairs, 4);
        assert_string_equal(to_of(&r.map, "0000:10:00.0"), "0000:18:00.0");
        assert_string_equal(to_of(&r.map, "0000:70:00.0"), "0000:78:00.0");
        assert_true(has(r.xml, "<address domain=\"0x0000\" bus=\"0x18\" slot=\"0x00\" function=\"0x0\"/>"));
        assert_false(has(r.xml, "bus=\"0x10\" slot=\"0x00\" function=\"0x0\"/>"));
        assert_true(has(r.xml, "host=\"0000:38:00.0\""));
        assert_false(has(r.xml, "host=\"0000:30:00.0\""));
        _cleanup_fingerprint_ struct fingerprint *fb = fingerprint_new(b);
        _cleanup_free_ char *fp = xasprintf("fingerprint=\"%s\"", fb->digest);
        assert_true(has(r.xml, fp));
        /* The guest side is the plan's: the destination's plan of the
         * migrated XML changes nothing, and only the source lines and the
         * mark differ from the input. */
        _cleanup_(engine_result_freep) struct engine_result *e = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(r.xml, strlen(r.xml), b, pol, NULL, &e, &err), 0);
        assert_true(e->already_planned);
        assert_string_equal(e->xml, r.xml);
        _cleanup_free_ char *in = xstrdup(planned), *out = xstrdup(r.xml);
        char *sa = NULL, *sb = NULL;
        char *la = strtok_r(in, "\n", &sa), *lb = strtok_r(out, "\n", &sb);
        size_t differ = 0;
        for (; la && lb; la = strtok_r(NULL, "\n", &sa), lb = strtok_r(NULL, "\n", &sb))
                if (!streq(la, lb)) {
                        differ++;
                        assert_true(has(la, "<address domain=\"0x0000\" bus=") || has(la, "pcinuma:"));
                }
        assert_null(la);
        assert_null(lb);
        assert_int_equal(differ, 4 + 4);          /* the sources and the mark's devices (the digest is the same) */
        incoming_result_done(&r);

        /* Under migration: refuse on the destination, spelt out or the default. */
        _cleanup_policy_ struct policy *refuse = policy_of("{\"default\": {\"policy\": \"require\", \"migration\": \"refuse\"}}");
        _cleanup_policy_ struct policy *dflt = fake_vm_policy("require");
        engine_incoming(planned, strlen(planned), b, dflt, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        assert_true(has(r.reason, "migration: refuse"));
        incoming_result_done(&r);
        engine_incoming(planned, strlen(planned), b, refuse, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        assert_true(has(r.reason, "migration: refuse"));
        assert_null(r.xml);
        incoming_result_done(&r);

        /* Planned under migration: refuse: marked migratable="no". */
        _cleanup_(engine_result_freep) struct engine_result *pr = NULL;
        assert_int_equal(engine_plan(fake_vm_xml, strlen(fake_vm_xml), a, refuse, NULL, &pr, &err), 0);
        assert_true(has(pr->xml, "migratable=\"no\""));
        engine_incoming(pr->xml, strlen(pr->xml), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE_MARKED);
        incoming_result_done(&r);

        /* No mark: passes unchanged. */
        engine_incoming(fake_vm_xml, strlen(fake_vm_xml), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_PASS);
        assert_string_equal(r.xml, fake_vm_xml);
        incoming_result_done(&r);

        /* A destination lacking a GPU on node 3: refused, naming it. */
        struct hostmap *c = fake_vm_host_with((const char *const[]) FAKE_VM_GPUS_MOVED, (const int[]) { 0, 1, 2, 2 });
        hostmap_finish(c);
        engine_incoming(planned, strlen(planned), c, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        /* One line per device, what differs; the host's devices of
         * that kind once, after them. */
        static const char summary[] = "2 of 4 devices have no place like their own on this host\n";
        assert_true(strncmp(r.reason, summary, strlen(summary)) == 0);
        assert_true(has(r.reason, "\ndevice 0000:70:00.0 (0000:0000, driver none) was on host node 3; this host has no "
                                  "0000:0000 on that node\n"));
        /* node 2's root complex has one GPU more here: named too */
        assert_true(has(r.reason, "\ndevice 0000:50:00.0 (0000:0000, driver none, host node 2): no root complex"));
        const char *list = strstr(r.reason, "\nthis host's 0000:0000 devices: 0000:18:00.0 (node 0, driver none), "
                                            "0000:38:00.0 (node 1, driver none), 0000:58:00.0 (node 2, driver none),\n"
                                            "  0000:78:00.0 (node 2, driver none)");
        assert_non_null(list);
        assert_null(strstr(list + 2, "this host's"));
        assert_int_equal(strstr(r.reason, "0000:78:00.0") - r.reason, strstr(list, "0000:78:00.0") - r.reason);
        assert_null(strstr(strstr(r.reason, "0000:78:00.0") + 1, "0000:78:00.0"));
        incoming_result_done(&r);
        hostmap_free(c);
}

/* A whole domain with a vGPU on node 0's GPU (and the other three GPUs
 * passed through): the mark records its type and its parent's position;
 * on the renumbered host it goes to the nvidia-63 mdev of node 0's GPU
 * (not to the one of node 1), its <source> uuid and the mark are
 * rewritten, and the destination's plan changes nothing. */
static void test_incoming_mdev(void **state) {
        (void) state;
        static const char xml[] =
                FAKE_VM_XML_HEAD
                "    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
                "      <source>\n"
                "        <address uuid='" UA(1) "'/>\n"
                "      </source>\n"
                "    </hostdev>\n"
                FAKE_VM_HOSTDEV("0x30")
                FAKE_VM_HOSTDEV("0x50")
                FAKE_VM_HOSTDEV("0x70")
                FAKE_VM_XML_TAIL;
        struct pci_addr p;
        _cleanup_hostmap_ struct hostmap *a = fake_vm_host_with((const char *const[]) FAKE_VM_GPUS,
                                                                (const int[]) FAKE_VM_NODES);
        assert_int_equal(pci_addr_parse("0000:10:00.0", &p), 0);
        hostmap_add_mdev(a, UA(1), &p)->type = xstrdup("nvidia-63");
        hostmap_finish(a);
        _cleanup_hostmap_ struct hostmap *b = fake_vm_host_with((const char *const[]) FAKE_VM_GPUS_MOVED,
                                                                (const int[]) FAKE_VM_NODES);
        assert_int_equal(pci_addr_parse("0000:38:00.0", &p), 0);
        hostmap_add_mdev(b, UB(2), &p)->type = xstrdup("nvidia-63");
        assert_int_equal(pci_addr_parse("0000:18:00.0", &p), 0);
        hostmap_add_mdev(b, UB(1), &p)->type = xstrdup("nvidia-63");
        hostmap_finish(b);
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        _cleanup_(engine_result_freep) struct engine_result *e = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(engine_plan(xml, strlen(xml), a, pol, NULL, &e, &err), 0);
        assert_true(has(e->xml, "mdev=\"" UA(1) "\""));
        assert_true(has(e->xml, "mdev-type=\"nvidia-63\""));

        struct incoming_result r = {0};
        engine_incoming(e->xml, strlen(e->xml), b, pol, NULL, &r);
        if (r.verdict != INCOMING_ACCEPT)
                fail_msg("refused: %s", strna(r.reason));
        assert_int_equal(r.map.n_pairs, 4);
        assert_string_equal(to_of(&r.map, UA(1)), UB(1));
        assert_true(has(r.xml, "<address uuid=\"" UB(1) "\"/>"));
        assert_true(has(r.xml, "mdev=\"" UB(1) "\""));
        assert_false(has(r.xml, UA(1)));
        _cleanup_(engine_result_freep) struct engine_result *e2 = NULL;
        assert_int_equal(engine_plan(r.xml, strlen(r.xml), b, pol, NULL, &e2, &err), 0);
        assert_true(e2->already_planned);
        incoming_result_done(&r);

        /* Without an nvidia-63 on node 0's GPU: refused naming the mdev. */
        _cleanup_hostmap_ struct hostmap *c = fake_vm_host_with((const char *const[]) FAKE_VM_GPUS_MOVED,
                                                                (const int[]) FAKE_VM_NODES);
        assert_int_equal(pci_addr_parse("0000:38:00.0", &p), 0);
        hostmap_add_mdev(c, UB(2), &p)->type = xstrdup("nvidia-63");
        hostmap_finish(c);
        engine_incoming(e->xml, strlen(e->xml), c, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        assert_true(has(r.reason, "mdev " UA(1) " (type nvidia-63, parent 0000:0000 on host node 0): no mdev of that type"));
        assert_null(r.xml);
        incoming_result_done(&r);
}

/* s with 'text' put in before the first occurrence of 'before' (which
 * must be there).  malloc'ed. */
static char *insert_before(const char *s, const char *before, const char *text) {
        const char *at = strstr(s, before);
        assert_non_null(at);
        return xasprintf("%.*s%s%s", (int) (at - s), s, text, at);
}

/* The host device of the first hostdev of xml, as the domain parser reads
 * it ("0000:18:00.0"). */
static char *first_source(const char *xml) {
        _cleanup_domain_ struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        if (domain_parse(xml, strlen(xml), &d, &err) < 0)
                fail_msg("%s", err);
        assert_true(d->n_hostdevs > 0);
        char b[PCI_ADDR_STRLEN];
        return xstrdup(pci_addr_format(&d->hostdevs[0].host, b));
}

/* Issue 24: the migrate rewrite and the domain parser read the same
 * <source>.  A decoy <x:source> in another namespace before the real one
 * (and the other readings two parsers could differ on: a namespaced
 * <address> first, a <source> after the <driver>, two <source>s) never
 * takes the new address: what the domain parser reads after the rewrite
 * is the mapped device.  Before, the decoy got it, and the definition
 * kept the source host's BDF while the mark said it moved. */
static void test_incoming_parser_differentials(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = fake_vm_host();
        _cleanup_hostmap_ struct hostmap *b = fake_vm_host_renumbered();
        _cleanup_free_ char *planned = fake_vm_planned_fleet(a, "require");
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        const struct {
                const char *what, *before, *text;
                bool kept;              /* the text is in the output as it was */
        } cases[] = {
                { "a namespaced <source> first", "<source>",
                  "<x:source xmlns:x=\"urn:x\"><address domain=\"0x0000\" bus=\"0x10\" slot=\"0x00\" function=\"0x0\"/>"
                  "</x:source>", true },
                { "a namespaced <address> first", "<address domain=\"0x0000\" bus=\"0x10\"",
                  "<x:address xmlns:x=\"urn:x\" domain=\"0x0000\" bus=\"0x10\" slot=\"0x00\" function=\"0x0\"/>", true },
                { "a <source> after the <driver>", "<source>", "<driver name=\"vfio\"/>", true },
                { "two <source>s", "<source>",
                  "<source><address domain=\"0x0000\" bus=\"0x10\" slot=\"0x00\" function=\"0x0\"/></source>", false },
                { "a namespaced bus attribute", "bus=\"0x10\"", "x:bus=\"0x10\" xmlns:x=\"urn:x\" ", false },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *xml = insert_before(planned, cases[i].before, cases[i].text);
                _cleanup_free_ char *before = first_source(xml);
                assert_string_equal(before, "0000:10:00.0");
                struct incoming_result r = {0};
                engine_incoming(xml, strlen(xml), b, pol, NULL, &r);
                if (r.verdict != INCOMING_ACCEPT)
                        fail_msg("%s: refused: %s", cases[i].what, strna(r.reason));
                assert_string_equal(to_of(&r.map, "0000:10:00.0"), "0000:18:00.0");
                _cleanup_free_ char *after = first_source(r.xml);
                if (!streq(after, "0000:18:00.0"))
                        fail_msg("%s: the domain parser reads %s after the rewrite, not 0000:18:00.0", cases[i].what, after);
                /* The decoys are left as they were. */
                if (cases[i].kept && !has(r.xml, cases[i].text))
                        fail_msg("%s: the rewrite changed %s", cases[i].what, cases[i].text);
                /* And the destination plans the result as it is. */
                _cleanup_(engine_result_freep) struct engine_result *e = NULL;
                _cleanup_free_ char *err = NULL;
                assert_int_equal(engine_plan(r.xml, strlen(r.xml), b, pol, NULL, &e, &err), 0);
                assert_true(e->already_planned);
                incoming_result_done(&r);
        }
}

/* A mark that records one device twice does not describe the domain. */
static void test_incoming_duplicate_record(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = fake_vm_host();
        _cleanup_hostmap_ struct hostmap *b = fake_vm_host_renumbered();
        _cleanup_free_ char *planned = fake_vm_planned_fleet(a, "require");
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        const char *rec = strstr(planned, "<pcinuma:device host=\"0000:10:00.0\"");
        assert_non_null(rec);
        const char *end = strstr(rec, "/>");
        _cleanup_free_ char *twice = xasprintf("%.*s\n", (int) (end + 2 - rec), rec);
        _cleanup_free_ char *xml = insert_before(planned, "<pcinuma:device host=\"0000:10:00.0\"", twice);
        struct incoming_result r = {0};
        engine_incoming(xml, strlen(xml), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        assert_true(has(r.reason, "the pcinuma mark records device 0000:10:00.0 twice"));
        incoming_result_done(&r);
}

/* The review's finding: n hostdevs and a mark that records them in the
 * reverse order.  Before, two checks compared every hostdev with every
 * record, formatting a BDF in the inner loop (24,000: 40-60 s of CPU).
 * Now (2,500: under the tag limit) the domain is refused before any
 * matching, having spent nothing of
 * the request's budget, for having more devices than this host; and a
 * marked domain beyond DOMAIN_XML_TAGS_MAX is refused, not let in. */
static char *finding_xml(unsigned n) {
        struct strbuf b = {0};
        strbuf_printf(&b, "<domain type='qemu'><name>finding</name><uuid>6c3e4e0a-4a5d-4c47-9a7b-1d2f3e4a5b6c</uuid>"
                          "<metadata><p:topology xmlns:p='urn:pcinuma:topology:1' version='1' migratable='yes' "
                          "fingerprint-version='2'>\n");
        for (unsigned i = n; i-- > 0;)
                strbuf_printf(&b, "<p:device host='0000:%02x:%02x.%u' position='rc:0@a fn:0@b'/>\n", i >> 8,
                              (i >> 3) & 0x1f, i & 7);
        strbuf_append(&b, "</p:topology></metadata><memory>65536</memory><os><type arch='x86_64' machine='q35'>hvm</type>"
                          "</os><devices>\n");
        for (unsigned i = 0; i < n; i++)
                strbuf_printf(&b, "<hostdev mode='subsystem' type='pci'><source><address bus='%u' slot='%u' function='%u'/>"
                                  "</source></hostdev>\n", i >> 8, (i >> 3) & 0x1f, i & 7);
        strbuf_append(&b, "</devices></domain>\n");
        return strbuf_steal(&b);
}

static void test_incoming_bounded_by_host(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *b = fake_vm_host_renumbered();
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        _cleanup_free_ char *xml = finding_xml(2500);
        struct incoming_result r = {0};
        engine_incoming(xml, strlen(xml), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        if (!has(r.reason, "the domain has 2500 PCI host devices; this host has only 4 passthrough-capable devices "
                           "(refused before matching any)"))
                fail_msg("%s", strna(r.reason));
        assert_int_equal(r.work.spent, 0);
        assert_null(r.xml);
        incoming_result_done(&r);

        /* 24,000 (3.9 MB, under DOMAIN_XML_MAX): beyond the tag limit. */
        _cleanup_free_ char *big = finding_xml(24000);
        assert_true(strlen(big) < DOMAIN_XML_MAX);
        engine_incoming(big, strlen(big), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        if (!has(r.reason, "the domain XML carries a pcinuma mark but is beyond what pcinuma reads (domain XML has "
                           "more than 16384 tags"))
                fail_msg("%s", strna(r.reason));
        assert_null(r.xml);
        incoming_result_done(&r);

        /* Without a mark, the same size is libvirt's business: it passes. */
        _cleanup_free_ char *unmarked = finding_xml(24000);
        char *m = strstr(unmarked, "urn:pcinuma:topology:1");
        memcpy(m, "urn:other:topology:001", 22);
        engine_incoming(unmarked, strlen(unmarked), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_PASS);
        incoming_result_done(&r);
}

/* The search spends the request's budget (work.h) as it goes: a forged
 * mark that the placement limit alone would let run for 50,000
 * placements of a big mark stops when the budget is spent, naming the
 * phase. */
static void test_search_spends_budget(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = fake_vm_host();
        _cleanup_hostmap_ struct hostmap *b = fake_vm_host_renumbered();
        _cleanup_free_ char *planned = fake_vm_planned_fleet(a, "require");
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        struct incoming_result r = {0};
        engine_incoming(planned, strlen(planned), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_ACCEPT);
        /* A real domain spends a small part of it. */
        assert_true(r.work.spent > 0);
        assert_true(r.work.spent < WORK_BUDGET / 100);
        incoming_result_done(&r);
}

/* Issue 24: a GPU the destination's nvidia driver holds is the host's.
 * The incoming domain is refused naming the GPUs, unless this host's
 * policy lists them in its passthrough_pool.  (Before, a device counted
 * as free when no definition named it, whatever held it.) */
static void test_incoming_host_bound(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = fake_vm_host();
        _cleanup_hostmap_ struct hostmap *b = fake_host_4n(fake_host_slit, fake_host_sockets);
        static const char *const gpus[] = { "0000:18:00.0", "0000:38:00.0", "0000:58:00.0", "0000:78:00.0" };
        for (int n = 0; n < 4; n++)
                fake_host_add_dev(b, gpus[n], n, 0x030200)->driver = xstrdup(n == 3 ? "vfio-pci" : "nvidia");
        hostmap_finish(b);
        _cleanup_free_ char *planned = fake_vm_planned_fleet(a, "require");
        _cleanup_policy_ struct policy *pol = fake_vm_policy_fleet("require");
        struct incoming_result r = {0};
        engine_incoming(planned, strlen(planned), b, pol, NULL, &r);
        assert_int_equal(r.verdict, INCOMING_REFUSE);
        if (!has(r.reason, "device 0000:10:00.0 (0000:0000, host node 0): the only devices of this host in its place "
                           "are bound to host drivers, and pcinuma never gives a migrating guest a device the host uses: "
                           "0000:18:00.0 (driver nvidia)") || !has(r.reason, "0000:58:00.0 (driver nvidia)") ||
            !has(r.reason, "3 of 4 devices have no place") || has(r.reason, "0000:78:00.0 (driver"))
                fail_msg("%s", strna(r.reason));
        assert_null(r.xml);
        incoming_result_done(&r);
        _cleanup_policy_ struct policy *pooled =
                policy_of("{\"default\": {\"policy\": \"require\", \"migration\": \"same-topology\"}, \"passthrough_pool\": [\"class:0x0302\"]}");
        engine_incoming(planned, strlen(planned), b, pooled, NULL, &r);
        if (r.verdict != INCOMING_ACCEPT)
                fail_msg("%s", strna(r.reason));
        assert_string_equal(to_of(&r.map, "0000:10:00.0"), "0000:18:00.0");
        incoming_result_done(&r);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_renumbered_accepted),
                cmocka_unit_test(test_moved_gpu_refused),
                cmocka_unit_test(test_other_driver_refused),
                cmocka_unit_test(test_incoming),
                cmocka_unit_test(test_search_budget),
                cmocka_unit_test(test_same_name_first),
                cmocka_unit_test(test_second_pass_budget),
                cmocka_unit_test(test_mdev_mapped),
                cmocka_unit_test(test_mdev_refused),
                cmocka_unit_test(test_prefers_gpu_without_mdevs),
                cmocka_unit_test(test_prefers_free_devices),
                cmocka_unit_test(test_free_mapping_searched_first),
                cmocka_unit_test(test_incoming_mdev),
                cmocka_unit_test(test_incoming_parser_differentials),
                cmocka_unit_test(test_incoming_duplicate_record),
                cmocka_unit_test(test_incoming_bounded_by_host),
                cmocka_unit_test(test_search_spends_budget),
                cmocka_unit_test(test_incoming_host_bound),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for the host map: the in-memory build helpers and lookups, the
 * sysfs reader against the fixture hosts built by mkfakesysfs.py, against
 * hand-written broken trees, against the real snapshots in
 * tests/fixtures/real-sysfs, and a round trip through scripts/pcinuma-capture-host. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "hostmap.h"
#include "hostmap-sysfs.h"

#ifndef FIXTURE_DIR
#error "FIXTURE_DIR must be defined"
#endif
#ifndef MKFAKESYSFS
#error "MKFAKESYSFS must be defined"
#endif
#ifndef REAL_SYSFS_DIR
#define REAL_SYSFS_DIR "/nonexistent"
#endif

/* One scratch directory for the whole run; fixture hosts are built into
 * it on first use and reused by later tests. */
static char scratch[PATH_MAX];

/* The fixture trees are thousands of small files and symlinks.  On a busy
 * disk-backed /tmp building them took most of the test's time, so without
 * an explicit TMPDIR a tmpfs (/dev/shm) is preferred. */
static const char *scratch_parent(void) {
        const char *tmp = getenv("TMPDIR");
        if (tmp && *tmp)
                return tmp;
        if (access("/dev/shm", W_OK | X_OK) == 0)
                return "/dev/shm";
        return "/tmp";
}

static int group_setup(void **state) {
        (void) state;
        snprintf(scratch, sizeof(scratch), "%s/test-hostmap.XXXXXX", scratch_parent());
        return mkdtemp(scratch) ? 0 : -1;
}

static int group_teardown(void **state) {
        (void) state;
        _cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", scratch);
        return system(cmd) == 0 ? 0 : -1;
}

static void run(const char *cmd) {
        int r = system(cmd);
        if (r != 0)
                fail_msg("command failed (%d): %s", r, cmd);
}

static bool exists(const char *path) {
        struct stat st;
        return lstat(path, &st) == 0;
}

/* Path of the sysfs root of fixture host 'name', building it if needed. */
static char *fixture_root(const char *name) {
        char *root = xasprintf("%s/host-%s", scratch, name);
        if (!exists(root)) {
                _cleanup_free_ char *cmd = xasprintf("python3 '%s' '%s/hosts/%s.json' '%s'",
                                                     MKFAKESYSFS, FIXTURE_DIR, name, root);
                run(cmd);
        }
        return root;
}

static struct hostmap *load_or_fail(const char *root) {
        struct hostmap *h = NULL;
        _cleanup_free_ char *error = NULL;
        int r = hostmap_load_path(root, &h, &error);
        if (r < 0)
                fail_msg("hostmap_load_path(%s): %d %s", root, r, strna(error));
        assert_non_null(h);
        return h;
}

static struct hostmap *load_fixture(const char *name) {
        _cleanup_free_ char *root = fixture_root(name);
        return load_or_fail(root);
}

static const struct hostmap_device *dev(const struct hostmap *h, const char *bdf) {
        struct pci_addr a;
        assert_int_equal(pci_addr_parse(bdf, &a), 0);
        const struct hostmap_device *d = hostmap_find_device(h, &a);
        if (!d)
                fail_msg("device %s not in the host map", bdf);
        return d;
}

static void assert_addr(const struct pci_addr *a, const char *bdf) {
        char buf[PCI_ADDR_STRLEN];
        assert_string_equal(pci_addr_format(a, buf), bdf);
}

static void write_file(const char *dir, const char *rel, const char *content) {
        _cleanup_free_ char *path = xasprintf("%s/%s", dir, rel);
        _cleanup_free_ char *cmd = xasprintf("mkdir -p \"$(dirname '%s')\"", path);
        run(cmd);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(content, f);
        assert_int_equal(fclose(f), 0);
}

static void make_link(const char *dir, const char *rel, const char *target) {
        _cleanup_free_ char *path = xasprintf("%s/%s", dir, rel);
        _cleanup_free_ char *cmd = xasprintf("mkdir -p \"$(dirname '%s')\"", path);
        run(cmd);
        assert_int_equal(symlink(target, path), 0);
}

static char *new_dir(const char *name) {
        char *d = xasprintf("%s/%s", scratch, name);
        _cleanup_free_ char *cmd = xasprintf("rm -rf '%s' && mkdir -p '%s'", d, d);
        run(cmd);
        return d;
}

/* ---- in-memory maps ---------------------------------------------------- */

static void test_build_in_memory(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = hostmap_new();
        struct pci_addr pf, vf, gpu, orphan_vf, parent;

        /* Nodes in reverse order: finish() must sort them, and the distance
         * rows refer to ascending id order. */
        struct hostmap_node *n = hostmap_add_node(h, 4);
        assert_int_equal(bitmap_parse("4-7", 1024, &n->cpus), 0);
        n->socket = 1;
        n = hostmap_add_node(h, 0);
        assert_int_equal(bitmap_parse("0-3", 1024, &n->cpus), 0);
        n->socket = 0;
        hostmap_set_distances(h, 4, (const int[]) { 22, 10 }, 2);
        hostmap_set_distances(h, 0, (const int[]) { 10, 21 }, 2);

        assert_int_equal(pci_addr_parse("0000:3b:00.0", &pf), 0);
        assert_int_equal(pci_addr_parse("0000:3b:00.2", &vf), 0);
        assert_int_equal(pci_addr_parse("0000:18:00.0", &gpu), 0);
        assert_int_equal(pci_addr_parse("0000:5e:00.1", &orphan_vf), 0);
        assert_int_equal(pci_addr_parse("0000:af:00.0", &parent), 0);

        struct hostmap_device *d = hostmap_add_device(h, &vf);
        d->has_physfn = true;
        d->physfn = pf;
        d = hostmap_add_device(h, &pf);
        d->sysfs_node = 4;
        d->n_vfs = 1;
        d->class = 0x020000;
        d = hostmap_add_device(h, &gpu);
        d->sysfs_node = 0;
        d->class = 0x030200;
        d = hostmap_add_device(h, &orphan_vf);
        d->has_physfn = true;
        d->physfn = parent;       /* a PF that is not in the map */
        d = hostmap_add_device(h, &parent);
        d->sysfs_node = -1;
        d->driver = xstrdup("nvidia");
        hostmap_add_mdev(h, "AAAAAAAA-1b54-4048-85b3-a6a62d165c01", &parent);
        hostmap_add_mdev(h, "00000000-1b54-4048-85b3-a6a62d165c01", &gpu);
        hostmap_finish(h);

        assert_int_equal(h->n_nodes, 2);
        assert_int_equal(h->nodes[0].id, 0);
        assert_int_equal(h->nodes[1].id, 4);
        /* Rows are "from": SLITs need not be symmetric. */
        assert_int_equal(hostmap_distance(h, 0, 4), 21);
        assert_int_equal(hostmap_distance(h, 4, 0), 22);
        assert_int_equal(hostmap_distance(h, 4, 4), 10);
        assert_int_equal(hostmap_distance(h, 0, 1), -1);
        assert_int_equal(hostmap_node_socket(h, 4), 1);
        assert_int_equal(hostmap_node_socket(h, 2), HOSTMAP_NO_SOCKET);
        assert_int_equal(hostmap_cpu_node(h, 5), 4);
        assert_int_equal(hostmap_cpu_node(h, 3), 0);
        assert_int_equal(hostmap_cpu_node(h, 8), HOSTMAP_NO_NODE);
        assert_null(hostmap_find_node(h, 1));
        assert_non_null(hostmap_find_node(h, 4));

        /* Sorted by address. */
        assert_int_equal(h->n_devices, 5);
        for (size_t i = 1; i < h->n_devices; i++)
                assert_true(pci_addr_cmp(&h->devices[i - 1].addr, &h->devices[i].addr) < 0);
        assert_string_equal(h->devices[0].name, "0000:18:00.0");

        /* Inheritance: the VF takes its PF's node; a VF whose PF is unknown
         * and a device at -1 stay without a node on a two-node host. */
        assert_int_equal(dev(h, "0000:3b:00.2")->sysfs_node, -1);
        assert_int_equal(dev(h, "0000:3b:00.2")->node, 4);
        assert_int_equal(dev(h, "0000:5e:00.1")->node, HOSTMAP_NO_NODE);
        assert_int_equal(dev(h, "0000:af:00.0")->node, HOSTMAP_NO_NODE);
        assert_int_equal(dev(h, "0000:18:00.0")->node, 0);
        assert_int_equal(dev(h, "0000:18:00.0")->iommu_group, -1);

        /* mdevs: sorted, looked up case-insensitively, node from parent. */
        assert_int_equal(h->n_mdevs, 2);
        assert_string_equal(h->mdevs[0].uuid, "00000000-1b54-4048-85b3-a6a62d165c01");
        const struct hostmap_mdev *m = hostmap_find_mdev(h, "00000000-1b54-4048-85b3-a6a62d165c01");
        assert_non_null(m);
        assert_int_equal(m->node, 0);
        m = hostmap_find_mdev(h, "aaaaaaaa-1b54-4048-85b3-a6a62d165c01");
        assert_non_null(m);
        assert_int_equal(m->node, HOSTMAP_NO_NODE);
        assert_null(hostmap_find_mdev(h, "aaaaaaaa-1b54-4048-85b3-a6a62d165c02"));
        assert_null(hostmap_find_mdev(h, "too-long-aaaaaaaa-1b54-4048-85b3-a6a62d165c02"));

        struct pci_addr missing;
        assert_int_equal(pci_addr_parse("0000:00:00.0", &missing), 0);
        assert_null(hostmap_find_device(h, &missing));
}

static void test_single_node_in_memory(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = hostmap_new();
        struct pci_addr a, b;

        hostmap_add_node(h, 0);
        assert_int_equal(pci_addr_parse("0000:01:00.0", &a), 0);
        assert_int_equal(pci_addr_parse("0000:02:00.0", &b), 0);
        hostmap_add_device(h, &a);
        /* A duplicate entry is dropped, keeping lookups well defined. */
        hostmap_add_device(h, &a);
        hostmap_add_device(h, &b)->sysfs_node = 0;
        hostmap_add_mdev(h, "4b20d080-1b54-4048-85b3-a6a62d165c01", &a);
        hostmap_finish(h);

        assert_int_equal(h->n_devices, 2);
        assert_int_equal(dev(h, "0000:01:00.0")->sysfs_node, -1);
        assert_int_equal(dev(h, "0000:01:00.0")->node, 0);
        assert_int_equal(h->mdevs[0].node, 0);
        assert_int_equal(hostmap_distance(h, 0, 0), 10);
}

static void test_class_names(void **state) {
        (void) state;
        assert_string_equal(hostmap_class_name(0x030200), "3D controller");
        assert_string_equal(hostmap_class_name(0x030000), "VGA compatible controller");
        assert_string_equal(hostmap_class_name(0x020000), "Ethernet controller");
        assert_string_equal(hostmap_class_name(0x020700), "Infiniband controller");
        assert_string_equal(hostmap_class_name(0x010802), "Non-Volatile memory controller");
        assert_string_equal(hostmap_class_name(0x060400), "PCI bridge");
        assert_string_equal(hostmap_class_name(0x120000), "Processing accelerators");
        assert_string_equal(hostmap_class_name(0x0d1100), "Wireless controller");
        assert_string_equal(hostmap_class_name(0xff0000), "Unassigned class");
        assert_string_equal(hostmap_class_name(0x990000), "Unknown class");

        struct hostmap_device d = { .class = 0x060400 };
        assert_true(hostmap_device_is_bridge(&d));
        d.class = 0x060000;
        assert_true(hostmap_device_is_bridge(&d));
        d.class = 0x068000;       /* NVSwitch: passed through */
        assert_false(hostmap_device_is_bridge(&d));
        d.class = 0x030200;
        assert_false(hostmap_device_is_bridge(&d));
        assert_false(hostmap_device_is_bridge(NULL));
}

/* ---- fixture hosts ------------------------------------------------------ */

static void test_sample_nodes(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("sample-4n");
        static const int dist[4][4] = {
                { 10, 12, 32, 32 }, { 12, 10, 32, 32 }, { 32, 32, 10, 12 }, { 32, 32, 12, 10 },
        };

        assert_false(h->single_node);
        assert_int_equal(h->n_nodes, 4);
        for (int i = 0; i < 4; i++) {
                const struct hostmap_node *n = hostmap_find_node(h, i);
                assert_non_null(n);
                assert_int_equal(n->socket, i / 2);
                assert_int_equal(bitmap_count(&n->cpus), 16);
                assert_true(bitmap_test(&n->cpus, (unsigned) (16 * i)));
                assert_true(bitmap_test(&n->cpus, (unsigned) (16 * i + 15)));
                for (int j = 0; j < 4; j++)
                        assert_int_equal(hostmap_distance(h, i, j), dist[i][j]);
        }
        assert_int_equal(hostmap_cpu_node(h, 17), 1);
        assert_int_equal(hostmap_cpu_node(h, 63), 3);
        assert_int_equal(hostmap_cpu_node(h, 64), -1);
        assert_int_equal(hostmap_node_socket(h, 3), 1);
        assert_int_equal(hostmap_distance(h, 0, 7), -1);
}

static void test_sample_devices(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("sample-4n");
        static const struct { const char *bdf; int node; } gpus[] = {
                { "0000:13:00.0", 0 }, { "0000:17:00.0", 0 }, { "0000:33:00.0", 1 }, { "0000:37:00.0", 1 },
                { "0000:53:00.0", 2 }, { "0000:57:00.0", 2 }, { "0000:73:00.0", 3 }, { "0000:77:00.0", 3 },
        }, nics[] = {
                { "0000:14:00.0", 0 }, { "0000:18:00.0", 0 }, { "0000:34:00.0", 1 }, { "0000:38:00.0", 1 },
                { "0000:54:00.0", 2 }, { "0000:58:00.0", 2 }, { "0000:74:00.0", 3 }, { "0000:78:00.0", 3 },
        };

        /* 3 on pci0000:00, 12 per node host bridge, 8 VFs, 2 on pci0000:90 */
        assert_int_equal(h->n_devices, 3 + 4 * 12 + 8 + 2);

        for (size_t i = 0; i < ELEMENTSOF(gpus); i++) {
                const struct hostmap_device *d = dev(h, gpus[i].bdf);
                assert_int_equal(d->node, gpus[i].node);
                assert_int_equal(d->sysfs_node, gpus[i].node);
                assert_int_equal(d->class, 0x030200);
                assert_int_equal(d->vendor, 0x10de);
                assert_int_equal(d->device, 0x2330);
                assert_string_equal(d->driver, "vfio-pci");
                assert_false(hostmap_device_is_bridge(d));
                assert_true(d->iommu_group >= 0);
        }
        for (size_t i = 0; i < ELEMENTSOF(nics); i++) {
                const struct hostmap_device *d = dev(h, nics[i].bdf);
                assert_int_equal(d->node, nics[i].node);
                assert_int_equal(d->class, 0x020700);
                assert_int_equal(d->vendor, 0x15b3);
                assert_int_equal(d->device, 0x1021);
                assert_int_equal(d->bars[0].type, HOSTMAP_BAR_MEM64);
                assert_true(d->bars[0].prefetchable);
                assert_int_equal(d->bars[0].size, UINT64_C(32) << 20);
                assert_int_equal(d->bars[1].type, HOSTMAP_BAR_NONE);
        }
        assert_string_equal(dev(h, "0000:14:00.0")->driver, "mlx5_core");
        assert_string_equal(dev(h, "0000:74:00.0")->driver, "mlx5_core");
        assert_string_equal(dev(h, "0000:18:00.0")->driver, "vfio-pci");

        /* GPU BARs as a real GPU lays them out: BAR0 16M mem32, BAR1(+2)
         * 64G mem64 prefetchable, BAR3(+4) 32M mem64 prefetchable. */
        const struct hostmap_device *g = dev(h, "0000:13:00.0");
        assert_int_equal(g->bars[0].type, HOSTMAP_BAR_MEM32);
        assert_false(g->bars[0].prefetchable);
        assert_int_equal(g->bars[0].size, UINT64_C(16) << 20);
        assert_int_equal(g->bars[1].type, HOSTMAP_BAR_MEM64);
        assert_true(g->bars[1].prefetchable);
        assert_int_equal(g->bars[1].size, UINT64_C(64) << 30);
        assert_int_equal(g->bars[2].type, HOSTMAP_BAR_NONE);
        assert_int_equal(g->bars[3].type, HOSTMAP_BAR_MEM64);
        assert_int_equal(g->bars[3].size, UINT64_C(32) << 20);
        for (int i = 4; i < HOSTMAP_N_BARS; i++) {
                assert_int_equal(g->bars[i].type, HOSTMAP_BAR_NONE);
                assert_int_equal(g->bars[i].size, 0);
        }

        /* Every endpoint has its own IOMMU group. */
        for (size_t i = 0; i < h->n_devices; i++)
                for (size_t j = i + 1; j < h->n_devices; j++)
                        if (h->devices[i].iommu_group >= 0)
                                assert_int_not_equal(h->devices[i].iommu_group, h->devices[j].iommu_group);

        /* Bridges. */
        assert_true(hostmap_device_is_bridge(dev(h, "0000:00:00.0")));
        assert_int_equal(dev(h, "0000:00:00.0")->class, 0x060000);
        assert_true(hostmap_device_is_bridge(dev(h, "0000:10:01.0")));
        assert_string_equal(dev(h, "0000:10:01.0")->driver, "pcieport");
        assert_true(hostmap_device_is_bridge(dev(h, "0000:11:00.0")));
        assert_true(hostmap_device_is_bridge(dev(h, "0000:12:01.0")));
}

static void test_sample_nvme(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("sample-4n");
        const struct hostmap_device *d = dev(h, "0000:01:00.0");

        /* Four nodes, so -1 stays "none". */
        assert_int_equal(d->sysfs_node, -1);
        assert_int_equal(d->node, HOSTMAP_NO_NODE);
        assert_int_equal(d->class, 0x010802);
        assert_string_equal(hostmap_class_name(d->class), "Non-Volatile memory controller");
        assert_int_equal(d->vendor, 0x144d);
        assert_int_equal(d->device, 0xa80a);
        assert_string_equal(d->driver, "vfio-pci");
        assert_int_equal(d->bars[0].type, HOSTMAP_BAR_MEM64);
        assert_false(d->bars[0].prefetchable);
        assert_int_equal(d->bars[0].size, 16384);
        assert_string_equal(d->host_bridge, "pci0000:00");
        assert_int_equal(d->n_upstream, 1);
        assert_addr(&d->upstream[0], "0000:00:1c.0");
        assert_int_equal(dev(h, "0000:00:00.0")->node, HOSTMAP_NO_NODE);
}

static void test_sample_upstream(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("sample-4n");

        const struct hostmap_device *d = dev(h, "0000:13:00.0");
        assert_string_equal(d->host_bridge, "pci0000:10");
        assert_int_equal(d->n_upstream, 3);
        assert_addr(&d->upstream[0], "0000:10:01.0");
        assert_addr(&d->upstream[1], "0000:11:00.0");
        assert_addr(&d->upstream[2], "0000:12:00.0");

        d = dev(h, "0000:78:00.0");
        assert_string_equal(d->host_bridge, "pci0000:70");
        assert_int_equal(d->n_upstream, 3);
        assert_addr(&d->upstream[0], "0000:70:02.0");
        assert_addr(&d->upstream[1], "0000:75:00.0");
        assert_addr(&d->upstream[2], "0000:76:01.0");

        /* VFs sit beside their PF. */
        d = dev(h, "0000:14:00.3");
        assert_int_equal(d->n_upstream, 3);
        assert_addr(&d->upstream[2], "0000:12:01.0");

        d = dev(h, "0000:10:01.0");
        assert_string_equal(d->host_bridge, "pci0000:10");
        assert_int_equal(d->n_upstream, 0);
        assert_null(d->upstream);

        d = dev(h, "0000:91:00.0");
        assert_string_equal(d->host_bridge, "pci0000:90");
        assert_int_equal(d->n_upstream, 1);
        assert_addr(&d->upstream[0], "0000:90:01.0");
}

static void test_sample_vfs(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("sample-4n");
        char bdf[32];

        const struct hostmap_device *pf = dev(h, "0000:14:00.0");
        assert_int_equal(pf->n_vfs, 4);
        assert_false(pf->has_physfn);
        assert_int_equal(dev(h, "0000:74:00.0")->n_vfs, 4);
        assert_int_equal(dev(h, "0000:18:00.0")->n_vfs, 0);

        for (int i = 1; i <= 4; i++) {
                snprintf(bdf, sizeof(bdf), "0000:14:00.%d", i);
                const struct hostmap_device *vf = dev(h, bdf);
                assert_true(vf->has_physfn);
                assert_addr(&vf->physfn, "0000:14:00.0");
                assert_int_equal(vf->sysfs_node, -1);
                assert_int_equal(vf->node, 0);       /* inherited from the PF */
                assert_int_equal(vf->device, 0x101e);
                assert_string_equal(vf->driver, "vfio-pci");
                assert_int_equal(vf->bars[0].type, HOSTMAP_BAR_MEM64);
                assert_int_equal(vf->bars[0].size, UINT64_C(1) << 20);
                assert_int_equal(vf->n_vfs, 0);

                snprintf(bdf, sizeof(bdf), "0000:74:00.%d", i);
                vf = dev(h, bdf);
                assert_true(vf->has_physfn);
                assert_addr(&vf->physfn, "0000:74:00.0");
                assert_int_equal(vf->sysfs_node, 3);
                assert_int_equal(vf->node, 3);
        }
}

static void test_sample_mdevs(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("sample-4n");

        assert_int_equal(h->n_mdevs, 2);
        assert_string_equal(h->mdevs[0].uuid, "4b20d080-1b54-4048-85b3-a6a62d165c01");
        assert_string_equal(h->mdevs[1].uuid, "4b20d080-1b54-4048-85b3-a6a62d165c02");
        for (size_t i = 0; i < h->n_mdevs; i++) {
                const struct hostmap_mdev *m = hostmap_find_mdev(h, h->mdevs[i].uuid);
                assert_ptr_equal(m, &h->mdevs[i]);
                assert_addr(&m->parent, "0000:91:00.0");
                assert_string_equal(m->type, "nvidia-63");
                assert_int_equal(m->node, 3);
        }
        const struct hostmap_device *parent = dev(h, "0000:91:00.0");
        assert_string_equal(parent->driver, "nvidia");
        assert_int_equal(parent->device, 0x20b5);
        assert_int_equal(parent->node, 3);
        assert_null(hostmap_find_mdev(h, "4b20d080-1b54-4048-85b3-a6a62d165c03"));
}

static void test_snc2(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("snc2");

        assert_int_equal(h->n_nodes, 2);
        assert_int_equal(hostmap_node_socket(h, 0), 0);
        assert_int_equal(hostmap_node_socket(h, 1), 0);
        assert_int_equal(hostmap_distance(h, 0, 1), 11);
        assert_int_equal(hostmap_distance(h, 1, 1), 10);
        assert_int_equal(hostmap_cpu_node(h, 8), 1);
        assert_int_equal(dev(h, "0000:21:00.0")->node, 0);
        assert_int_equal(dev(h, "0000:22:00.0")->node, 0);
        assert_int_equal(dev(h, "0000:41:00.0")->node, 1);
        assert_int_equal(dev(h, "0000:42:00.0")->node, 1);
        assert_int_equal(dev(h, "0000:42:00.0")->class, 0x020700);
        assert_string_equal(dev(h, "0000:41:00.0")->host_bridge, "pci0000:40");
        assert_int_equal(h->n_devices, 8);
}

static void test_two_socket(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("two-socket");

        assert_int_equal(h->n_nodes, 2);
        assert_int_equal(hostmap_node_socket(h, 0), 0);
        assert_int_equal(hostmap_node_socket(h, 1), 1);
        assert_int_equal(hostmap_distance(h, 0, 1), 21);
        assert_int_equal(dev(h, "0000:21:00.0")->node, 0);
        assert_int_equal(dev(h, "0000:81:00.0")->node, 1);
        assert_int_equal(dev(h, "0000:82:00.0")->node, 1);
        assert_int_equal(h->n_devices, 6);
        assert_int_equal(h->n_mdevs, 0);
}

static void test_single_node_host(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("single-node");

        assert_true(h->single_node);
        assert_int_equal(h->n_nodes, 1);
        assert_int_equal(h->nodes[0].id, 0);
        assert_int_equal(h->nodes[0].socket, 0);
        assert_int_equal(bitmap_count(&h->nodes[0].cpus), 8);
        assert_int_equal(hostmap_cpu_node(h, 7), 0);
        assert_int_equal(hostmap_distance(h, 0, 0), 10);

        const struct hostmap_device *d = dev(h, "0000:01:00.0");
        assert_int_equal(d->sysfs_node, -1);
        assert_int_equal(d->node, 0);
        d = dev(h, "0000:02:00.0");
        assert_int_equal(d->sysfs_node, -1);
        assert_int_equal(d->node, 0);
}

static void test_big_bus(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = load_fixture("big-bus");
        unsigned gpus[2] = { 0, 0 };

        assert_int_equal(h->n_devices, 520);
        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *d = &h->devices[i];
                if (d->class == 0x030200) {
                        assert_true(d->node == 0 || d->node == 1);
                        assert_int_equal(d->n_upstream, 1);
                        gpus[d->node]++;
                }
        }
        assert_int_equal(gpus[0], 130);
        assert_int_equal(gpus[1], 130);
        const struct hostmap_device *d = dev(h, "0001:81:00.0");
        assert_int_equal(d->addr.domain, 1);
        assert_int_equal(d->node, 1);
        assert_string_equal(d->host_bridge, "pci0001:80");
        assert_addr(&d->upstream[0], "0001:80:01.0");
}

/* The fixture script's own promise: a rebuild gives the same tree. */
static void test_fixture_deterministic(void **state) {
        (void) state;
        _cleanup_free_ char *a = new_dir("determinism");
        _cleanup_free_ char *build_a = xasprintf("python3 '%s' '%s/hosts/sample-4n.json' '%s/a'",
                                                 MKFAKESYSFS, FIXTURE_DIR, a);
        _cleanup_free_ char *build_b = xasprintf("python3 '%s' '%s/hosts/sample-4n.json' '%s/b'",
                                                 MKFAKESYSFS, FIXTURE_DIR, a);
        _cleanup_free_ char *compare = xasprintf("diff -r --no-dereference '%s/a' '%s/b' >/dev/null", a, a);
        run(build_a);
        run(build_b);
        /* Building over an existing tree wipes it first. */
        _cleanup_free_ char *stray = xasprintf("%s/b/stray-file", a);
        write_file(a, "b/stray-file", "x\n");
        run(build_b);
        assert_false(exists(stray));
        run(compare);
}

/* ---- broken trees ------------------------------------------------------- */

static void test_garbage_files(void **state) {
        (void) state;
        _cleanup_free_ char *root = new_dir("garbage");
        _cleanup_hostmap_ struct hostmap *h = NULL;

        /* 0000:01:00.0: garbage numa_node and class, no vendor, broken
         * resource, no links at all. */
        make_link(root, "bus/pci/devices/0000:01:00.0", "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0");
        write_file(root, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/numa_node", "one\n");
        write_file(root, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/class", "0xzz\n");
        write_file(root, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/device", "0x1234567\n");
        write_file(root, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/resource",
                   "garbage\n0x1000 0x1fff 0x200\n");
        /* 0000:02:00.0: fine, on node 1. */
        make_link(root, "bus/pci/devices/0000:02:00.0", "../../../devices/pci0000:00/0000:02:00.0");
        write_file(root, "devices/pci0000:00/0000:02:00.0/numa_node", "1\n");
        write_file(root, "devices/pci0000:00/0000:02:00.0/class", "0x030200\n");
        write_file(root, "devices/pci0000:00/0000:02:00.0/iommu_group", "not a link\n");
        make_link(root, "devices/pci0000:00/0000:02:00.0/physfn", "../garbage");
        /* 0000:03:00.0 vanished: its bus/pci/devices link dangles. */
        make_link(root, "bus/pci/devices/0000:03:00.0", "../../../devices/pci0000:00/0000:03:00.0");
        /* Not PCI addresses, or not directories: skipped. */
        write_file(root, "bus/pci/devices/README", "x\n");
        write_file(root, "bus/pci/devices/0000:04:00.0", "a file\n");
        /* Nodes: garbage distance entries and cpulist. */
        write_file(root, "devices/system/node/node0/cpulist", "0-3\n");
        write_file(root, "devices/system/node/node0/distance", "10 ??\n");
        write_file(root, "devices/system/node/node1/cpulist", "4-x\n");
        write_file(root, "devices/system/node/node1/distance", "20\n");
        write_file(root, "devices/system/node/node2/distance", "\n");
        write_file(root, "devices/system/node/nodeX/cpulist", "0\n");
        write_file(root, "devices/system/node/online", "0-1\n");
        write_file(root, "devices/system/cpu/cpu0/topology/physical_package_id", "junk\n");
        write_file(root, "devices/system/cpu/cpu1/topology/physical_package_id", "7\n");
        /* An mdev without mdev_type; one with a bad name and one that
         * vanished (dangling link) are skipped. */
        make_link(root, "bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01",
                  "../../../devices/pci0000:00/0000:02:00.0/4b20d080-1b54-4048-85b3-a6a62d165c01");
        write_file(root, "devices/pci0000:00/0000:02:00.0/4b20d080-1b54-4048-85b3-a6a62d165c01/uevent", "\n");
        make_link(root, "bus/mdev/devices/not-a-uuid", "../../../devices/pci0000:00/0000:02:00.0/x");
        make_link(root, "bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c02",
                  "../../../devices/pci0000:00/0000:02:00.0/4b20d080-1b54-4048-85b3-a6a62d165c02");

        h = load_or_fail(root);

        assert_int_equal(h->n_devices, 2);
        const struct hostmap_device *d = dev(h, "0000:01:00.0");
        assert_int_equal(d->class, 0);
        assert_int_equal(d->vendor, 0);
        assert_int_equal(d->device, 0);         /* out of range */
        assert_int_equal(d->sysfs_node, -1);
        assert_int_equal(d->node, -1);
        assert_null(d->driver);
        assert_int_equal(d->iommu_group, -1);
        assert_false(d->has_physfn);
        assert_int_equal(d->bars[0].type, HOSTMAP_BAR_NONE);
        assert_int_equal(d->bars[1].type, HOSTMAP_BAR_MEM32);
        assert_int_equal(d->bars[1].size, 0x1000);
        assert_string_equal(d->host_bridge, "pci0000:00");
        assert_int_equal(d->n_upstream, 1);

        d = dev(h, "0000:02:00.0");
        assert_int_equal(d->node, 1);
        assert_int_equal(d->class, 0x030200);
        assert_int_equal(d->iommu_group, -1);
        assert_false(d->has_physfn);

        /* node2 has only an empty distance file: a CPU-less node. */
        assert_int_equal(h->n_nodes, 3);
        assert_false(h->single_node);
        assert_int_equal(hostmap_distance(h, 0, 0), 10);
        assert_int_equal(h->distance[1], -1);                 /* "??" */
        assert_int_equal(hostmap_distance(h, 0, 1), -1);
        assert_int_equal(hostmap_distance(h, 1, 0), 20);      /* short row */
        assert_int_equal(hostmap_distance(h, 1, 2), -1);
        assert_int_equal(h->distance[1 * 3 + 1], -1);
        assert_int_equal(hostmap_distance(h, 1, 1), 10);      /* unknown, but itself */
        assert_int_equal(hostmap_distance(h, 2, 0), -1);
        assert_int_equal(hostmap_node_socket(h, 2), -1);
        assert_int_equal(bitmap_count(&hostmap_find_node(h, 0)->cpus), 4);
        assert_true(bitmap_isempty(&hostmap_find_node(h, 1)->cpus));
        /* cpu0's package is junk, so cpu1 decides; node1 has no CPUs. */
        assert_int_equal(hostmap_node_socket(h, 0), 7);
        assert_int_equal(hostmap_node_socket(h, 1), -1);

        assert_int_equal(h->n_mdevs, 1);
        assert_string_equal(h->mdevs[0].uuid, "4b20d080-1b54-4048-85b3-a6a62d165c01");
        assert_null(h->mdevs[0].type);
        assert_int_equal(h->mdevs[0].node, 1);
}

/* ---- uevent ------------------------------------------------------------- */

/* A device directory for the uevent tests, with attribute files and a
 * driver link that disagree with any uevent written next to them, so a
 * test can tell where each value came from. */
static void uevent_device(const char *root, const char *bdf, const char *uevent) {
        _cleanup_free_ char *link = xasprintf("bus/pci/devices/%s", bdf);
        _cleanup_free_ char *target = xasprintf("../../../devices/pci0000:00/%s", bdf);
        _cleanup_free_ char *dir = xasprintf("devices/pci0000:00/%s", bdf);
        _cleanup_free_ char *class = xasprintf("%s/class", dir);
        _cleanup_free_ char *vendor = xasprintf("%s/vendor", dir);
        _cleanup_free_ char *device = xasprintf("%s/device", dir);
        _cleanup_free_ char *numa = xasprintf("%s/numa_node", dir);
        _cleanup_free_ char *driver = xasprintf("%s/driver", dir);
        _cleanup_free_ char *ue = xasprintf("%s/uevent", dir);

        make_link(root, link, target);
        write_file(root, class, "0x020000\n");
        write_file(root, vendor, "0x8086\n");
        write_file(root, device, "0x1572\n");
        write_file(root, numa, "0\n");
        make_link(root, driver, "../../../bus/pci/drivers/i40e");
        if (uevent)
                write_file(root, ue, uevent);
}

/* Whether the map has a warning that contains all of the given strings. */
static bool has_warning(const struct hostmap *h, const char *a, const char *b) {
        for (size_t i = 0; i < h->n_warnings; i++)
                if (strstr(h->warnings[i], a) && (!b || strstr(h->warnings[i], b)))
                        return true;
        return false;
}

static void test_uevent(void **state) {
        (void) state;
        _cleanup_free_ char *root = new_dir("uevent");
        _cleanup_hostmap_ struct hostmap *h = NULL;
        const struct hostmap_device *d;

        /* 01: a kernel uevent, bound: every value comes from it, none from
         * the class/vendor/device files or the driver link. */
        uevent_device(root, "0000:00:01.0",
                      "DRIVER=vfio-pci\nPCI_CLASS=30200\nPCI_ID=10DE:2330\nPCI_SUBSYS_ID=10DE:16C1\n"
                      "PCI_SLOT_NAME=0000:00:01.0\nMODALIAS=pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00\n");
        /* 02: no uevent (as in some captures): the files and the link. */
        uevent_device(root, "0000:00:02.0", NULL);
        /* 03: unbound (no DRIVER=): no driver, although a stale link is
         * there; class 0 prints as "0000" and reads as 0. */
        uevent_device(root, "0000:00:03.0", "PCI_CLASS=0000\nPCI_ID=1AF4:1000\nPCI_SLOT_NAME=0000:00:03.0\n");
        /* 04: garbage PCI_CLASS: a warning naming uevent and the key; the
         * class stays unknown (the class file is not read instead). */
        uevent_device(root, "0000:00:04.0", "DRIVER=nvme\nPCI_CLASS=0x10802\nPCI_ID=144D:A80A\n");
        /* 05: garbage PCI_ID: vendor and device unknown. */
        uevent_device(root, "0000:00:05.0", "DRIVER=nvme\nPCI_CLASS=10802\nPCI_ID=144D-A80A\n");
        /* 06: PCI_ID with a 5-digit device: garbage too. */
        uevent_device(root, "0000:00:06.0", "PCI_CLASS=10802\nPCI_ID=144D:1A80A\n");
        /* 07: a key missing: that one falls back to its file. */
        uevent_device(root, "0000:00:07.0", "DRIVER=nvme\nPCI_ID=144D:A80A\nPCI_SLOT_NAME=0000:00:07.0\n");
        /* 08: an empty uevent (no PCI_* key, not the kernel's): all four
         * from the files and the link. */
        uevent_device(root, "0000:00:08.0", "");
        /* 09: garbage DRIVER (empty, and 0a: with a slash); 0b: a binary
         * PCI_CLASS; 0c: lower-case hex, no newline at the end. */
        uevent_device(root, "0000:00:09.0", "DRIVER=\nPCI_CLASS=30200\nPCI_ID=10DE:2330\n");
        uevent_device(root, "0000:00:0a.0", "DRIVER=../x\nPCI_CLASS=30200\nPCI_ID=10DE:2330\n");
        uevent_device(root, "0000:00:0b.0", "PCI_CLASS=\xff\xfe\nPCI_ID=10DE:2330\n");
        uevent_device(root, "0000:00:0c.0", "DRIVER=mlx5_core\nPCI_CLASS=20700\nPCI_ID=15b3:101e");
        /* 0d: an unreadable uevent (a directory): a warning, then the files. */
        uevent_device(root, "0000:00:0d.0", NULL);
        write_file(root, "devices/pci0000:00/0000:00:0d.0/uevent/x", "");
        write_file(root, "devices/system/node/node0/cpulist", "0-3\n");

        h = load_or_fail(root);
        assert_int_equal(h->n_devices, 13);

        d = dev(h, "0000:00:01.0");
        assert_int_equal(d->class, 0x030200);
        assert_int_equal(d->vendor, 0x10de);
        assert_int_equal(d->device, 0x2330);
        assert_string_equal(d->driver, "vfio-pci");
        assert_int_equal(d->sysfs_node, 0);

        d = dev(h, "0000:00:02.0");
        assert_int_equal(d->class, 0x020000);
        assert_int_equal(d->vendor, 0x8086);
        assert_int_equal(d->device, 0x1572);
        assert_string_equal(d->driver, "i40e");

        d = dev(h, "0000:00:03.0");
        assert_int_equal(d->class, 0);
        assert_int_equal(d->vendor, 0x1af4);
        assert_int_equal(d->device, 0x1000);
        assert_null(d->driver);

        d = dev(h, "0000:00:04.0");
        assert_int_equal(d->class, 0);
        assert_int_equal(d->vendor, 0x144d);
        assert_string_equal(d->driver, "nvme");
        assert_true(has_warning(h, "bus/pci/devices/0000:00:04.0/uevent: PCI_CLASS '0x10802' is not a PCI class code; "
                                "read as unknown", NULL));

        d = dev(h, "0000:00:05.0");
        assert_int_equal(d->class, 0x010802);
        assert_int_equal(d->vendor, 0);
        assert_int_equal(d->device, 0);
        assert_true(has_warning(h, "bus/pci/devices/0000:00:05.0/uevent: PCI_ID '144D-A80A' is not a vendor:device ID "
                                "pair; read as unknown", NULL));

        d = dev(h, "0000:00:06.0");
        assert_int_equal(d->vendor, 0);
        assert_int_equal(d->device, 0);
        assert_null(d->driver);
        assert_true(has_warning(h, "bus/pci/devices/0000:00:06.0/uevent: PCI_ID '144D:1A80A'", NULL));

        d = dev(h, "0000:00:07.0");
        assert_int_equal(d->class, 0x020000);      /* from the class file */
        assert_int_equal(d->vendor, 0x144d);
        assert_string_equal(d->driver, "nvme");

        d = dev(h, "0000:00:08.0");
        assert_int_equal(d->class, 0x020000);
        assert_int_equal(d->vendor, 0x8086);
        assert_int_equal(d->device, 0x1572);
        assert_string_equal(d->driver, "i40e");

        assert_null(dev(h, "0000:00:09.0")->driver);
        assert_int_equal(dev(h, "0000:00:09.0")->class, 0x030200);
        assert_true(has_warning(h, "bus/pci/devices/0000:00:09.0/uevent: DRIVER '' is not a driver name", NULL));
        assert_null(dev(h, "0000:00:0a.0")->driver);
        assert_true(has_warning(h, "bus/pci/devices/0000:00:0a.0/uevent: DRIVER '../x'", NULL));
        assert_int_equal(dev(h, "0000:00:0b.0")->class, 0);
        assert_true(has_warning(h, "bus/pci/devices/0000:00:0b.0/uevent: PCI_CLASS '\\xff\\xfe'", NULL));

        d = dev(h, "0000:00:0c.0");
        assert_int_equal(d->class, 0x020700);
        assert_int_equal(d->vendor, 0x15b3);
        assert_int_equal(d->device, 0x101e);
        assert_string_equal(d->driver, "mlx5_core");

        d = dev(h, "0000:00:0d.0");
        assert_int_equal(d->class, 0x020000);
        assert_string_equal(d->driver, "i40e");
        assert_true(has_warning(h, "bus/pci/devices/0000:00:0d.0/uevent: cannot read: Is a directory", NULL));

        /* One warning per bad key, none for the good devices or the
         * missing uevent. */
        assert_int_equal(h->n_warnings, 7);
        assert_false(has_warning(h, "0000:00:01.0", NULL));
        assert_false(has_warning(h, "0000:00:02.0", NULL));
        assert_false(has_warning(h, "0000:00:07.0", NULL));
}

static void test_missing_node_dir(void **state) {
        (void) state;
        _cleanup_free_ char *root = new_dir("no-node-dir");
        _cleanup_hostmap_ struct hostmap *h = NULL;

        make_link(root, "bus/pci/devices/0000:01:00.0", "../../../devices/pci0000:00/0000:00:02.0/0000:01:00.0");
        write_file(root, "devices/pci0000:00/0000:00:02.0/0000:01:00.0/numa_node", "-1\n");
        write_file(root, "devices/pci0000:00/0000:00:02.0/0000:01:00.0/class", "0x030000\n");
        for (int i = 0; i < 4; i++) {
                _cleanup_free_ char *p = xasprintf("devices/system/cpu/cpu%d/online", i);
                write_file(root, p, "1\n");
        }
        write_file(root, "devices/system/cpu/online", "0-3\n");
        write_file(root, "devices/system/cpu/cpufreq", "\n");

        h = load_or_fail(root);
        assert_true(h->single_node);
        assert_int_equal(h->n_nodes, 1);
        assert_int_equal(bitmap_count(&h->nodes[0].cpus), 4);
        assert_int_equal(h->nodes[0].socket, -1);      /* no topology files */
        assert_int_equal(dev(h, "0000:01:00.0")->node, 0);
        assert_int_equal(dev(h, "0000:01:00.0")->sysfs_node, -1);

        /* Only devices/system: a usable, deviceless host. */
        hostmap_free(TAKE_PTR(h));
        _cleanup_free_ char *root2 = new_dir("system-only");
        write_file(root2, "devices/system/node/node0/cpulist", "0-1\n");
        h = load_or_fail(root2);
        assert_int_equal(h->n_devices, 0);
        assert_int_equal(h->n_nodes, 1);
        assert_false(h->single_node);

        /* Only bus/pci/devices: one synthesised node without CPUs. */
        hostmap_free(TAKE_PTR(h));
        _cleanup_free_ char *root3 = new_dir("pci-only");
        write_file(root3, "bus/pci/devices/0000:05:00.0/class", "0x020000\n");
        h = load_or_fail(root3);
        assert_int_equal(h->n_devices, 1);
        assert_true(h->single_node);
        assert_int_equal(dev(h, "0000:05:00.0")->node, 0);
        assert_null(dev(h, "0000:05:00.0")->host_bridge);
}

static void test_unusable_root(void **state) {
        (void) state;
        _cleanup_free_ char *empty = new_dir("empty-root");
        _cleanup_free_ char *missing = xasprintf("%s/does-not-exist", scratch);
        _cleanup_free_ char *file = xasprintf("%s/a-file", scratch);
        struct hostmap *h = NULL;
        char *error = NULL;

        assert_int_equal(hostmap_load_path(empty, &h, &error), -ENOENT);
        assert_null(h);
        assert_non_null(error);
        assert_non_null(strstr(error, empty));
        assert_non_null(strstr(error, "no bus/pci/devices and no devices/system"));
        free(TAKE_PTR(error));

        assert_int_equal(hostmap_load_path(missing, &h, &error), -ENOENT);
        assert_null(h);
        assert_non_null(strstr(error, missing));
        free(TAKE_PTR(error));

        write_file(scratch, "a-file", "x\n");
        assert_int_equal(hostmap_load_path(file, &h, &error), -ENOTDIR);
        assert_non_null(strstr(error, file));
        free(TAKE_PTR(error));

        /* By fd: the message still names the directory. */
        int fd = open(empty, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(hostmap_load(fd, &h, &error), -ENOENT);
        assert_non_null(strstr(error, "empty-root"));
        free(TAKE_PTR(error));
        close(fd);

        /* A non-directory fd. */
        fd = open(file, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(hostmap_load(fd, &h, &error), -ENOTDIR);
        assert_null(h);
        free(TAKE_PTR(error));
        close(fd);

        /* A NULL ret_error is allowed. */
        assert_int_equal(hostmap_load_path(empty, &h, NULL), -ENOENT);
}

/* ---- a captured tree cannot reach outside itself ------------------------ */

/* Each of these runs twice: with openat2() (where the kernel has it) and
 * with the O_NOFOLLOW walk that stands in for it, forced by
 * PCINUMA_SYSFS_NO_OPENAT2=1.  Both must refuse the same things. */
static void with_each_resolver(void (*body)(const char *mode)) {
        assert_int_equal(unsetenv("PCINUMA_SYSFS_NO_OPENAT2"), 0);
        body("openat2");
        assert_int_equal(setenv("PCINUMA_SYSFS_NO_OPENAT2", "1", 1), 0);
        body("walk");
        assert_int_equal(unsetenv("PCINUMA_SYSFS_NO_OPENAT2"), 0);
}

static void assert_warning(const struct hostmap *h, const char *a, const char *b) {
        if (has_warning(h, a, b))
                return;
        for (size_t i = 0; i < h->n_warnings; i++)
                print_message("warning: %s\n", h->warnings[i]);
        fail_msg("no warning with '%s' and '%s'", a, strna(b));
}

/* A device directory with a class file, linked from bus/pci/devices. */
static void plain_device(const char *root, const char *bdf) {
        _cleanup_free_ char *link = xasprintf("bus/pci/devices/%s", bdf);
        _cleanup_free_ char *target = xasprintf("../../../devices/pci0000:00/%s", bdf);
        _cleanup_free_ char *class = xasprintf("devices/pci0000:00/%s/class", bdf);
        make_link(root, link, target);
        write_file(root, class, "0x030200\n");
}

static char *device_file(const char *root, const char *bdf, const char *attr) {
        return xasprintf("%s/devices/pci0000:00/%s/%s", root, bdf, attr);
}

/* Links out of the root, absolute and relative, at every place the reader
 * follows one: none is followed, each is named in a warning.  Outside the
 * root, "secret" files hold values that would parse (node 1, package 5),
 * so a followed link would show in the map, not only in a warning. */
static void escaping_links(const char *mode) {
        _cleanup_free_ char *tag = xasprintf("escape-%s", mode);
        _cleanup_free_ char *top = new_dir(tag);
        _cleanup_free_ char *root = xasprintf("%s/root", top);
        _cleanup_free_ char *outside = xasprintf("%s/outside", top);
        _cleanup_hostmap_ struct hostmap *h = NULL;

        /* shadow-like content, and a directory that looks like a device. */
        write_file(outside, "shadow", "1\n");
        write_file(outside, "dev/numa_node", "1\n");
        write_file(outside, "dev/class", "0x020000\n");
        write_file(outside, "dev/uevent", "PCI_CLASS=20000\nPCI_ID=8086:1572\n");
        write_file(outside, "topology/physical_package_id", "5\n");
        write_file(outside, "node/cpulist", "0-3\n");

        /* 01: numa_node -> absolute path of the secret. */
        plain_device(root, "0000:00:01.0");
        _cleanup_free_ char *abs_secret = xasprintf("%s/shadow", outside);
        _cleanup_free_ char *n1 = device_file(root, "0000:00:01.0", "numa_node");
        assert_int_equal(symlink(abs_secret, n1), 0);
        /* 02: numa_node -> relative, climbing above the root. */
        plain_device(root, "0000:00:02.0");
        make_link(root, "devices/pci0000:00/0000:00:02.0/numa_node", "../../../../outside/shadow");
        /* 03: uevent -> the same, a single ".." too many. */
        plain_device(root, "0000:00:03.0");
        make_link(root, "devices/pci0000:00/0000:00:03.0/uevent", "../../../../outside/dev/uevent");
        /* 04, 05: the device links themselves, relative and absolute. */
        make_link(root, "bus/pci/devices/0000:00:04.0", "../../../../outside/dev");
        _cleanup_free_ char *abs_dev = xasprintf("%s/dev", outside);
        _cleanup_free_ char *l5 = xasprintf("%s/bus/pci/devices/0000:00:05.0", root);
        assert_int_equal(symlink(abs_dev, l5), 0);
        /* 06: an escape in the middle of a path: a link that stays inside
         * (sub -> .) then climbs out. */
        plain_device(root, "0000:00:06.0");
        make_link(root, "devices/pci0000:00/0000:00:06.0/sub", ".");
        make_link(root, "devices/pci0000:00/0000:00:06.0/numa_node", "sub/sub/../../../../outside/shadow");
        /* Nodes: node0's CPU topology and node1's directory lead out. */
        write_file(root, "devices/system/node/node0/cpulist", "0\n");
        write_file(root, "devices/system/node/node0/distance", "10 20\n");
        _cleanup_free_ char *abs_topo = xasprintf("%s/topology", outside);
        make_link(root, "devices/system/cpu/cpu0/online", "../../../../../outside/shadow");
        _cleanup_free_ char *topo = xasprintf("%s/devices/system/cpu/cpu0/topology", root);
        assert_int_equal(symlink(abs_topo, topo), 0);
        make_link(root, "devices/system/node/node1", "../../../../outside/node");
        /* An mdev whose link leads out. */
        _cleanup_free_ char *mdev = xasprintf("%s/bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01", root);
        make_link(root, "bus/mdev/devices/.keep", ".");
        assert_int_equal(symlink(abs_dev, mdev), 0);

        h = load_or_fail(root);

        for (int i = 1; i <= 6; i++) {
                if (i == 4 || i == 5)
                        continue;
                char bdf[16];
                snprintf(bdf, sizeof(bdf), "0000:00:%02d.0", i);
                const struct hostmap_device *d = dev(h, bdf);
                assert_int_equal(d->sysfs_node, -1);
                assert_int_equal(d->class, 0x030200);
        }
        assert_warning(h, "bus/pci/devices/0000:00:01.0/numa_node: ", "outside the sysfs root");
        assert_warning(h, "bus/pci/devices/0000:00:02.0/numa_node: ", "outside the sysfs root");
        assert_warning(h, "bus/pci/devices/0000:00:03.0/uevent: ", "outside the sysfs root");
        assert_warning(h, "bus/pci/devices/0000:00:06.0/numa_node: ", "outside the sysfs root");
        /* The devices whose link leads out are not in the map. */
        struct pci_addr a;
        assert_int_equal(pci_addr_parse("0000:00:04.0", &a), 0);
        assert_null(hostmap_find_device(h, &a));
        assert_int_equal(pci_addr_parse("0000:00:05.0", &a), 0);
        assert_null(hostmap_find_device(h, &a));
        assert_int_equal(h->n_devices, 4);
        assert_warning(h, "bus/pci/devices/0000:00:04.0: ", "outside the sysfs root");
        assert_warning(h, "bus/pci/devices/0000:00:05.0: ", "outside the sysfs root");
        /* node1 is not read (its cpulist is outside); node0's package is
         * not 5. */
        assert_int_equal(h->n_nodes, 1);
        assert_int_equal(hostmap_node_socket(h, 0), -1);
        assert_warning(h, "devices/system/node/node1: ", "outside the sysfs root");
        assert_warning(h, "devices/system/cpu/cpu0/topology/physical_package_id: ", "outside the sysfs root");
        assert_int_equal(h->n_mdevs, 0);
        assert_warning(h, "bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01: ", "outside the sysfs root");
}

static void test_links_out_of_root(void **state) {
        (void) state;
        with_each_resolver(escaping_links);
}

/* Links that stay inside the root still resolve, as sysfs is made of them:
 * bus/pci/devices/X into devices/pci*, a node directory linked from
 * elsewhere in the tree, an attribute that is a link inside its device,
 * a root that is itself reached through a link, ".." that climbs to the
 * root exactly, and bus/pci and bus/mdev as links (the device links' ".."
 * then walk the physical path). */
static void inside_links(const char *mode) {
        _cleanup_free_ char *tag = xasprintf("inside-%s", mode);
        _cleanup_free_ char *top = new_dir(tag);
        _cleanup_free_ char *real = xasprintf("%s/real", top);
        _cleanup_free_ char *root = xasprintf("%s/root", top);
        _cleanup_hostmap_ struct hostmap *h = NULL;

        /* bus/pci is a link, to a directory one level deeper, so the
         * device link's ".."s are not those of bus/pci/devices. */
        make_link(real, "bus/pci", "../x/elsewhere/pci");
        make_link(real, "x/elsewhere/pci/devices/0000:01:00.0",
                  "../../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0");
        write_file(real, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/attrs/node", "1\n");
        make_link(real, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/numa_node", "attrs/node");
        write_file(real, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/class", "0x030200\n");
        make_link(real, "bus/mdev", "../elsewhere/mdev");
        make_link(real, "elsewhere/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01",
                  "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/4b20d080-1b54-4048-85b3-a6a62d165c01");
        write_file(real, "devices/pci0000:00/0000:00:01.0/0000:01:00.0/4b20d080-1b54-4048-85b3-a6a62d165c01/uevent", "\n");
        write_file(real, "nodes/n1/cpulist", "2-3\n");
        write_file(real, "nodes/n1/distance", "20 10\n");
        make_link(real, "devices/system/node/node1", "../../../nodes/n1");
        write_file(real, "devices/system/node/node0/cpulist", "0-1\n");
        write_file(real, "devices/system/node/node0/distance", "10 20\n");
        write_file(real, "devices/system/cpu/cpu2/topology/physical_package_id", "1\n");
        assert_int_equal(symlink("real", root), 0);

        h = load_or_fail(root);
        assert_int_equal(h->n_warnings, 0);
        const struct hostmap_device *d = dev(h, "0000:01:00.0");
        assert_int_equal(d->sysfs_node, 1);
        assert_int_equal(d->class, 0x030200);
        assert_string_equal(d->host_bridge, "pci0000:00");
        assert_int_equal(d->n_upstream, 1);
        assert_int_equal(h->n_nodes, 2);
        assert_int_equal(bitmap_count(&hostmap_find_node(h, 1)->cpus), 2);
        assert_int_equal(hostmap_node_socket(h, 1), 1);
        assert_int_equal(hostmap_distance(h, 1, 0), 20);
        assert_int_equal(h->n_mdevs, 1);
        assert_int_equal(h->mdevs[0].node, 1);
}

static void test_links_inside_root(void **state) {
        (void) state;
        with_each_resolver(inside_links);
}

/* FIFOs, a socket, a directory and a link loop where files are read: each
 * refused without blocking (a FIFO without a writer would block a plain
 * open() for ever: the test would time out), named in a warning. */
static void special_files(const char *mode) {
        _cleanup_free_ char *tag = xasprintf("special-%s", mode);
        _cleanup_free_ char *root = new_dir(tag);
        _cleanup_hostmap_ struct hostmap *h = NULL;

        plain_device(root, "0000:00:01.0");
        _cleanup_free_ char *numa = device_file(root, "0000:00:01.0", "numa_node");
        assert_int_equal(mkfifo(numa, 0644), 0);
        /* class is read when there is no uevent: a FIFO both. */
        make_link(root, "bus/pci/devices/0000:00:02.0", "../../../devices/pci0000:00/0000:00:02.0");
        _cleanup_free_ char *class = device_file(root, "0000:00:02.0", "class");
        _cleanup_free_ char *ue = device_file(root, "0000:00:02.0", "uevent");
        _cleanup_free_ char *d2 = xasprintf("%s/devices/pci0000:00/0000:00:02.0", root);
        assert_int_equal(mkdir(d2, 0755), 0);
        assert_int_equal(mkfifo(class, 0644), 0);
        assert_int_equal(mkfifo(ue, 0644), 0);
        /* resource: a socket; numa_node: a directory. */
        plain_device(root, "0000:00:03.0");
        _cleanup_free_ char *res = device_file(root, "0000:00:03.0", "resource");
        int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
        assert_true(sfd >= 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        assert_true(strlen(res) < sizeof(sa.sun_path));
        strcpy(sa.sun_path, res);
        assert_int_equal(bind(sfd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        write_file(root, "devices/pci0000:00/0000:00:03.0/numa_node/x", "1\n");
        /* A link loop. */
        plain_device(root, "0000:00:04.0");
        make_link(root, "devices/pci0000:00/0000:00:04.0/numa_node", "loop");
        make_link(root, "devices/pci0000:00/0000:00:04.0/loop", "numa_node");
        /* Node files: FIFOs. */
        _cleanup_free_ char *cpulist = xasprintf("%s/devices/system/node/node0/cpulist", root);
        _cleanup_free_ char *dist = xasprintf("%s/devices/system/node/node0/distance", root);
        write_file(root, "devices/system/node/node0/has_cpu", "0\n");
        assert_int_equal(mkfifo(cpulist, 0644), 0);
        assert_int_equal(mkfifo(dist, 0644), 0);

        h = load_or_fail(root);
        close(sfd);

        assert_int_equal(dev(h, "0000:00:01.0")->sysfs_node, -1);
        assert_warning(h, "bus/pci/devices/0000:00:01.0/numa_node: ", "a FIFO, not a regular file");
        assert_int_equal(dev(h, "0000:00:02.0")->class, 0);
        assert_warning(h, "bus/pci/devices/0000:00:02.0/class: ", "a FIFO, not a regular file");
        assert_warning(h, "bus/pci/devices/0000:00:02.0/uevent: ", "a FIFO, not a regular file");
        assert_int_equal(dev(h, "0000:00:03.0")->bars[0].type, HOSTMAP_BAR_NONE);
        assert_warning(h, "bus/pci/devices/0000:00:03.0/resource: ", "not a regular file");
        assert_warning(h, "bus/pci/devices/0000:00:03.0/numa_node: ", "Is a directory");
        assert_warning(h, "bus/pci/devices/0000:00:04.0/numa_node: ", "symbolic links");
        assert_int_equal(h->n_nodes, 1);
        assert_true(bitmap_isempty(&h->nodes[0].cpus));
        assert_warning(h, "devices/system/node/node0/cpulist: ", "a FIFO, not a regular file");
        assert_warning(h, "devices/system/node/node0/distance: ", "a FIFO, not a regular file");
}

static void test_special_files(void **state) {
        (void) state;
        with_each_resolver(special_files);
}

/* Node ids above 1023 (numa_node values, node directories), distance rows
 * and cpulists past their limits: refused or cut, named in a warning, and
 * the map stays small.  1023 itself is a node. */
static void test_huge_node_ids(void **state) {
        (void) state;
        _cleanup_free_ char *root = new_dir("huge-nodes");
        _cleanup_hostmap_ struct hostmap *h = NULL;

        plain_device(root, "0000:00:01.0");
        write_file(root, "devices/pci0000:00/0000:00:01.0/numa_node", "2147483647\n");
        plain_device(root, "0000:00:02.0");
        write_file(root, "devices/pci0000:00/0000:00:02.0/numa_node", "1024\n");
        plain_device(root, "0000:00:03.0");
        write_file(root, "devices/pci0000:00/0000:00:03.0/numa_node", "1023\n");
        write_file(root, "devices/system/node/node2147483647/cpulist", "0\n");
        write_file(root, "devices/system/node/node1024/cpulist", "0\n");
        write_file(root, "devices/system/node/node99999999999999999999/cpulist", "0\n");
        /* node0: a distance row of 5,000 entries and CPUs 0-8191 (the
         * limit); node1023: a cpulist past it. */
        struct strbuf row = {0};
        for (int i = 0; i < 5000; i++)
                strbuf_append(&row, i == 0 ? "10" : " 20");
        strbuf_append(&row, "\n");
        write_file(root, "devices/system/node/node0/distance", row.buf);
        strbuf_done(&row);
        write_file(root, "devices/system/node/node0/cpulist", "0-8191\n");
        write_file(root, "devices/system/node/node1023/cpulist", "0-4294967295\n");
        write_file(root, "devices/system/node/node1023/distance", "20 10\n");

        h = load_or_fail(root);

        assert_int_equal(dev(h, "0000:00:01.0")->sysfs_node, -1);
        assert_warning(h, "bus/pci/devices/0000:00:01.0/numa_node: '2147483647' is not a node number", NULL);
        assert_int_equal(dev(h, "0000:00:02.0")->sysfs_node, -1);
        assert_warning(h, "bus/pci/devices/0000:00:02.0/numa_node: '1024' is not a node number", NULL);
        assert_int_equal(dev(h, "0000:00:03.0")->sysfs_node, 1023);
        assert_int_equal(dev(h, "0000:00:03.0")->node, 1023);

        assert_int_equal(h->n_nodes, 2);
        assert_int_equal(h->nodes[0].id, 0);
        assert_int_equal(h->nodes[1].id, 1023);
        assert_warning(h, "devices/system/node/node2147483647: node number above 1023", NULL);
        assert_warning(h, "devices/system/node/node1024: node number above 1023", NULL);
        assert_warning(h, "devices/system/node/node99999999999999999999: node number above 1023", NULL);
        assert_warning(h, "devices/system/node/node0/distance: more than 1024 entries", NULL);
        assert_int_equal(hostmap_distance(h, 0, 1023), 20);
        assert_int_equal(bitmap_count(&h->nodes[0].cpus), 8192);
        assert_true(bitmap_isempty(&h->nodes[1].cpus));
        assert_warning(h, "devices/system/node/node1023/cpulist: '0-4294967295' is not a CPU list (CPUs 0 to 8191)", NULL);
        /* 8,192 CPUs are 1 KiB of bits. */
        assert_true(h->nodes[0].cpus.n_words <= 8192 / 64);
}

/* The in-memory helpers drop what the reader refuses too, so a map built
 * by anyone has node ids 0..1023 only. */
static void test_node_ids_bounded_in_memory(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = hostmap_new();
        struct pci_addr a = {0};

        (void) hostmap_add_node(h, 0);
        (void) hostmap_add_node(h, INT_MAX);
        (void) hostmap_add_node(h, 1024);
        (void) hostmap_add_node(h, -5);
        struct hostmap_device *d = hostmap_add_device(h, &a);
        d->sysfs_node = INT_MAX;
        int row[2000];
        for (size_t i = 0; i < ELEMENTSOF(row); i++)
                row[i] = 10;
        hostmap_set_distances(h, 0, row, ELEMENTSOF(row));
        hostmap_finish(h);
        assert_int_equal(h->n_nodes, 1);
        assert_int_equal(h->nodes[0].id, 0);
        assert_int_equal(h->devices[0].sysfs_node, -1);
        assert_int_equal(h->devices[0].node, 0);        /* the only node */
        assert_int_equal(hostmap_distance(h, 0, 0), 10);
}

/* ---- real snapshots (tests/fixtures/real-sysfs, from hwloc) --------------- */

static char *real_root(const char *name) {
        _cleanup_free_ char *tarball = xasprintf("%s/%s.tar.bz2", REAL_SYSFS_DIR, name);
        /* They ship with the project: a missing one is a failure, not a skip. */
        if (!exists(tarball))
                fail_msg("the real snapshot %s is missing", tarball);
        _cleanup_free_ char *dir = xasprintf("%s/real", scratch);
        char *root = xasprintf("%s/%s/sys", dir, name);
        if (!exists(root)) {
                /* Memory blocks and CPU caches are most of some snapshots
                 * and nothing the host map reads. */
                _cleanup_free_ char *cmd = xasprintf("mkdir -p '%s' && tar xjf '%s' -C '%s' "
                                                     "--exclude='memory[0-9]*' --exclude=cache --exclude=cpufreq",
                                                     dir, tarball, dir);
                run(cmd);
        }
        return root;
}

static void test_real_pcidomain32bits(void **state) {
        (void) state;
        _cleanup_free_ char *root = real_root("2pa-pcidomain32bits");
        _cleanup_hostmap_ struct hostmap *h = load_or_fail(root);
        /* A real kernel's files all parse: no warnings. */
        assert_int_equal(h->n_warnings, 0);

        const struct hostmap_device *d = dev(h, "10000:00:04.0");
        assert_int_equal(d->addr.domain, 0x10000);
        assert_int_equal(d->addr.bus, 0);
        assert_int_equal(d->addr.slot, 4);
        assert_string_equal(d->name, "10000:00:04.0");
        assert_int_equal(d->class, 0x010000);
        assert_int_equal(d->vendor, 0x1af4);
        assert_string_equal(d->driver, "virtio-pci");
        assert_string_equal(d->host_bridge, "pci10000:00");
        assert_int_equal(d->n_upstream, 0);
        assert_int_equal(d->bars[0].type, HOSTMAP_BAR_IO);
        assert_int_equal(d->bars[0].size, 0x40);
        assert_int_equal(d->bars[1].type, HOSTMAP_BAR_MEM32);
        assert_int_equal(d->bars[1].size, 0x1000);
        /* One node, so -1 means node 0. */
        assert_int_equal(h->n_nodes, 1);
        assert_int_equal(d->sysfs_node, -1);
        assert_int_equal(d->node, 0);
        /* The 32-bit domain sorts after domain 0. */
        assert_int_equal(h->devices[h->n_devices - 1].addr.domain, 0x10000);
}

static void test_real_nvidiagpunumanodes(void **state) {
        (void) state;
        _cleanup_free_ char *root = real_root("nvidiagpunumanodes");
        _cleanup_hostmap_ struct hostmap *h = load_or_fail(root);
        /* A real kernel's files all parse: no warnings. */
        assert_int_equal(h->n_warnings, 0);

        assert_int_equal(h->n_nodes, 8);
        assert_int_equal(hostmap_node_socket(h, 0), 0);
        assert_int_equal(hostmap_node_socket(h, 8), 8);
        for (int n = 250; n <= 255; n++) {
                const struct hostmap_node *node = hostmap_find_node(h, n);
                assert_non_null(node);
                assert_int_equal(node->socket, HOSTMAP_NO_SOCKET);
                assert_true(bitmap_isempty(&node->cpus));
                assert_int_equal(hostmap_distance(h, n, n), 10);
                assert_int_equal(hostmap_distance(h, 0, n), 80);
        }
        assert_int_equal(hostmap_distance(h, 0, 8), 40);
        assert_int_equal(hostmap_distance(h, 8, 0), 40);
        assert_int_equal(hostmap_cpu_node(h, 100), 8);

        /* Plain directories, no numa_node files. */
        assert_int_equal(h->n_devices, 6);
        for (size_t i = 0; i < h->n_devices; i++) {
                assert_int_equal(h->devices[i].class, 0x030000);
                assert_int_equal(h->devices[i].sysfs_node, -1);
                assert_int_equal(h->devices[i].node, -1);
                assert_null(h->devices[i].host_bridge);
                assert_int_equal(h->devices[i].n_upstream, 0);
        }
        assert_int_equal(dev(h, "0035:05:00.0")->addr.domain, 0x35);
}

static void test_real_40intel64(void **state) {
        (void) state;
        _cleanup_free_ char *root = real_root("40intel64-4n10c+pci-conflicts");
        _cleanup_hostmap_ struct hostmap *h = load_or_fail(root);
        /* A real kernel's files all parse: no warnings. */
        assert_int_equal(h->n_warnings, 0);

        assert_int_equal(h->n_nodes, 4);
        for (int n = 0; n < 4; n++) {
                assert_int_equal(hostmap_node_socket(h, n), n);
                assert_int_equal(bitmap_count(&hostmap_find_node(h, n)->cpus), 10);
                assert_int_equal(hostmap_cpu_node(h, (unsigned) (n + 4)), n);
        }
        assert_int_equal(hostmap_distance(h, 0, 1), 20);
        assert_int_equal(h->n_devices, 3);

        const struct hostmap_device *d = dev(h, "0000:01:00.0");
        assert_int_equal(d->sysfs_node, -1);
        assert_int_equal(d->node, HOSTMAP_NO_NODE);
        assert_int_equal(d->class, 0x010400);
        assert_string_equal(d->driver, "megaraid_sas");
        assert_string_equal(d->host_bridge, "pci0000:00");
        assert_int_equal(d->n_upstream, 1);
        assert_addr(&d->upstream[0], "0000:00:03.0");
        assert_int_equal(d->bars[0].type, HOSTMAP_BAR_IO);
        assert_int_equal(d->bars[1].type, HOSTMAP_BAR_MEM64);
        assert_int_equal(d->bars[1].size, 16384);
        assert_int_equal(d->bars[2].type, HOSTMAP_BAR_NONE);
        assert_int_equal(d->bars[3].size, 256 * 1024);
}

static void test_real_fakepcilocalities(void **state) {
        (void) state;
        _cleanup_free_ char *root = real_root("fakepcilocalities");
        _cleanup_hostmap_ struct hostmap *h = load_or_fail(root);
        /* A real kernel's files all parse: no warnings. */
        assert_int_equal(h->n_warnings, 0);
        unsigned endpoints = 0;

        assert_int_equal(h->n_nodes, 4);
        for (size_t i = 0; i < h->n_devices; i++) {
                const struct hostmap_device *d = &h->devices[i];
                if (!hostmap_device_is_bridge(d) && d->node == 0)
                        endpoints++;
        }
        assert_true(endpoints >= 7);
        assert_int_equal(dev(h, "0000:09:03.0")->n_upstream, 1);
}

/* ---- capture script round trip ----------------------------------------- */

static char *capture_script(void) {
        /* MKFAKESYSFS is <src>/tests/fixtures/mkfakesysfs.py. */
        const char *suffix = "/tests/fixtures/mkfakesysfs.py";
        size_t n = strlen(MKFAKESYSFS), s = strlen(suffix);
        assert_true(n > s);
        const char *mk = MKFAKESYSFS;
        assert_string_equal(mk + n - s, suffix);
        return xasprintf("%.*s/scripts/pcinuma-capture-host", (int) (n - s), mk);
}

static void assert_same_map(const struct hostmap *a, const struct hostmap *b) {
        assert_int_equal(a->n_nodes, b->n_nodes);
        assert_int_equal(a->single_node, b->single_node);
        for (size_t i = 0; i < a->n_nodes; i++) {
                assert_int_equal(a->nodes[i].id, b->nodes[i].id);
                assert_int_equal(a->nodes[i].socket, b->nodes[i].socket);
                assert_true(bitmap_equal(&a->nodes[i].cpus, &b->nodes[i].cpus));
                for (size_t j = 0; j < a->n_nodes; j++)
                        assert_int_equal(a->distance[i * a->n_nodes + j], b->distance[i * b->n_nodes + j]);
        }
        assert_int_equal(a->n_devices, b->n_devices);
        for (size_t i = 0; i < a->n_devices; i++) {
                const struct hostmap_device *x = &a->devices[i], *y = &b->devices[i];
                assert_string_equal(x->name, y->name);
                assert_int_equal(x->class, y->class);
                assert_int_equal(x->vendor, y->vendor);
                assert_int_equal(x->device, y->device);
                assert_int_equal(x->sysfs_node, y->sysfs_node);
                assert_int_equal(x->node, y->node);
                assert_true(streq_ptr(x->driver, y->driver));
                assert_int_equal(x->iommu_group, y->iommu_group);
                assert_int_equal(x->has_physfn, y->has_physfn);
                assert_int_equal(x->n_vfs, y->n_vfs);
                assert_true(streq_ptr(x->host_bridge, y->host_bridge));
                assert_int_equal(x->n_upstream, y->n_upstream);
                for (size_t k = 0; k < x->n_upstream; k++)
                        assert_true(pci_addr_eq(&x->upstream[k], &y->upstream[k]));
                assert_memory_equal(x->bars, y->bars, sizeof(x->bars));
        }
        assert_int_equal(a->n_mdevs, b->n_mdevs);
        for (size_t i = 0; i < a->n_mdevs; i++) {
                assert_string_equal(a->mdevs[i].uuid, b->mdevs[i].uuid);
                assert_true(pci_addr_eq(&a->mdevs[i].parent, &b->mdevs[i].parent));
                assert_true(streq_ptr(a->mdevs[i].type, b->mdevs[i].type));
                assert_int_equal(a->mdevs[i].node, b->mdevs[i].node);
        }
}

/* The fixture trees have the kernel's uevent, and it agrees with the
 * attribute files: the map read from a tree is the same with every
 * uevent removed (all from the files and links). */
static void test_uevent_matches_files(void **state) {
        (void) state;
        _cleanup_free_ char *root = fixture_root("sample-4n");
        _cleanup_free_ char *copy = new_dir("sample-4n-no-uevent");
        _cleanup_free_ char *probe = xasprintf("%s/bus/pci/devices/0000:13:00.0/uevent", root);
        _cleanup_free_ char *cmd = xasprintf("cp -a '%s/.' '%s/' && find '%s/devices' -name uevent -delete",
                                             root, copy, copy);

        assert_true(exists(probe));
        run(cmd);
        _cleanup_hostmap_ struct hostmap *a = load_or_fail(root);
        _cleanup_hostmap_ struct hostmap *b = load_or_fail(copy);
        assert_true(a->n_devices > 0);
        assert_int_equal(a->n_warnings, 0);
        assert_int_equal(b->n_warnings, 0);
        assert_same_map(a, b);
}

static void capture_and_compare(const char *root, const char *tag) {
        _cleanup_free_ char *script = capture_script();
        _cleanup_free_ char *dir = new_dir(tag);
        _cleanup_free_ char *capture = xasprintf("sh '%s' --root '%s' -o '%s/capture.tar.xz' >/dev/null",
                                                 script, root, dir);
        _cleanup_free_ char *unpack = xasprintf("tar xJf '%s/capture.tar.xz' -C '%s'", dir, dir);
        run(capture);
        run(unpack);

        _cleanup_free_ char *captured = xasprintf("%s/sys", dir);
        _cleanup_hostmap_ struct hostmap *a = load_or_fail(root);
        _cleanup_hostmap_ struct hostmap *b = load_or_fail(captured);
        assert_true(a->n_devices > 0);
        assert_same_map(a, b);
        /* The capture keeps what the reader reads first: each uevent. */
        for (size_t i = 0; i < a->n_devices; i++) {
                char bdf[PCI_ADDR_STRLEN];
                pci_addr_format(&a->devices[i].addr, bdf);
                _cleanup_free_ char *src = xasprintf("%s/bus/pci/devices/%s/uevent", root, bdf);
                _cleanup_free_ char *dst = xasprintf("%s/bus/pci/devices/%s/uevent", captured, bdf);
                if (access(src, F_OK) == 0 && access(dst, F_OK) != 0)
                        fail_msg("the capture of %s lacks %s", root, dst);
        }
}

/* Warnings are capped: the first HOSTMAP_WARNINGS_MAX kept in order, the
 * rest counted; merging a second map's warnings keeps the cap. */
static void test_warnings_cap(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = hostmap_new();
        _cleanup_hostmap_ struct hostmap *o = hostmap_new();

        for (int i = 0; i < HOSTMAP_WARNINGS_MAX - 2; i++)
                hostmap_warn(h, "file%d: bad", i);
        for (int i = 0; i < 5; i++)
                hostmap_warn(o, "other%d: bad", i);
        hostmap_take_warnings(h, o);
        assert_int_equal(h->n_warnings, HOSTMAP_WARNINGS_MAX);
        assert_int_equal(h->n_warnings_dropped, 3);
        assert_string_equal(h->warnings[0], "file0: bad");
        assert_string_equal(h->warnings[HOSTMAP_WARNINGS_MAX - 1], "other1: bad");
        assert_int_equal(o->n_warnings, 0);
        hostmap_warn(h, "late: bad");
        assert_int_equal(h->n_warnings_dropped, 4);
}

static void test_capture_fixture(void **state) {
        (void) state;
        _cleanup_free_ char *root = fixture_root("sample-4n");
        capture_and_compare(root, "capture-sample");
}

static void test_capture_real(void **state) {
        (void) state;
        _cleanup_free_ char *root = real_root("40intel64-4n10c+pci-conflicts");
        capture_and_compare(root, "capture-real");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_build_in_memory),
                cmocka_unit_test(test_single_node_in_memory),
                cmocka_unit_test(test_class_names),
                cmocka_unit_test(test_sample_nodes),
                cmocka_unit_test(test_sample_devices),
                cmocka_unit_test(test_sample_nvme),
                cmocka_unit_test(test_sample_upstream),
                cmocka_unit_test(test_sample_vfs),
                cmocka_unit_test(test_sample_mdevs),
                cmocka_unit_test(test_snc2),
                cmocka_unit_test(test_two_socket),
                cmocka_unit_test(test_single_node_host),
                cmocka_unit_test(test_big_bus),
                cmocka_unit_test(test_fixture_deterministic),
                cmocka_unit_test(test_garbage_files),
                cmocka_unit_test(test_uevent),
                cmocka_unit_test(test_uevent_matches_files),
                cmocka_unit_test(test_missing_node_dir),
                cmocka_unit_test(test_unusable_root),
                cmocka_unit_test(test_links_out_of_root),
                cmocka_unit_test(test_links_inside_root),
                cmocka_unit_test(test_special_files),
                cmocka_unit_test(test_huge_node_ids),
                cmocka_unit_test(test_node_ids_bounded_in_memory),
                cmocka_unit_test(test_real_pcidomain32bits),
                cmocka_unit_test(test_real_nvidiagpunumanodes),
                cmocka_unit_test(test_real_40intel64),
                cmocka_unit_test(test_real_fakepcilocalities),
                cmocka_unit_test(test_warnings_cap),
                cmocka_unit_test(test_capture_fixture),
                cmocka_unit_test(test_capture_real),
        };
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/* Unit tests for recheck.c: the devices a domain uses (VF -> PF, mdev ->
 * parent), the host map difference, the settings key, the removals held
 * for a grace period and the per-domain cache, against host maps built in
 * memory. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "domain.h"
#include "policy.h"
#include "recheck.h"
#include "fake-host.h"

#define GPU 0x030200u
#define NIC 0x020000u
#define MDEV_UUID "4b20d080-1b54-4048-85b3-a6a62d165c01"

/* GPU 0000:3b:00.0 (node 1), NIC PF 0000:5e:00.0 (node 2) with VF
 * 0000:5e:00.2 (no node of its own), GPU 0000:af:00.0 (node 3) with an
 * mdev. */
static struct hostmap *host(void) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        fake_host_add_dev(h, "0000:3b:00.0", 1, GPU)->driver = xstrdup("nvidia");
        fake_host_add_dev(h, "0000:5e:00.0", 2, NIC)->n_vfs = 1;
        struct hostmap_device *vf = fake_host_add_dev(h, "0000:5e:00.2", -1, NIC);
        vf->has_physfn = true;
        assert_int_equal(pci_addr_parse("0000:5e:00.0", &vf->physfn), 0);
        fake_host_add_dev(h, "0000:af:00.0", 3, GPU);
        struct pci_addr parent;
        assert_int_equal(pci_addr_parse("0000:af:00.0", &parent), 0);
        hostmap_add_mdev(h, MDEV_UUID, &parent);
        hostmap_finish(h);
        return h;
}

static struct hostmap_device *dev(struct hostmap *h, const char *bdf) {
        struct pci_addr a;
        assert_int_equal(pci_addr_parse(bdf, &a), 0);
        return (struct hostmap_device *) hostmap_find_device(h, &a);
}

#define PCI_HOSTDEV(bus, fn) \
        "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='" bus "' slot='0x00' function='" fn "'/></source></hostdev>"
#define MDEV_HOSTDEV(uuid) \
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='" uuid "'/></source></hostdev>"

static struct domain *parse(const char *devices) {
        _cleanup_free_ char *xml = xasprintf(
                "<domain type='qemu'><name>vm</name><uuid>11111111-2222-3333-4444-555555555555</uuid>"
                "<metadata><pcinuma:policy xmlns:pcinuma='urn:pcinuma:policy:1' tag='t1'/></metadata>"
                "<memory>1048576</memory><vcpu>2</vcpu><os><type arch='x86_64' machine='q35'>hvm</type></os>"
                "<devices>%s</devices></domain>", devices);
        struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        if (domain_parse(xml, strlen(xml), &d, &err) < 0)
                fail_msg("domain_parse: %s", err);
        return d;
}

static char *ids_join(const struct recheck_ids *s) {
        struct strbuf b = {0};
        for (size_t i = 0; i < s->n; i++)
                strbuf_printf(&b, "%s%s", i ? " " : "", s->v[i]);
        return b.len ? strbuf_steal(&b) : xstrdup("");
}

static void assert_ids(const struct recheck_ids *s, const char *want) {
        _cleanup_free_ char *got = ids_join(s);
        assert_string_equal(got, want);
}

static void test_ids_set(void **state) {
        (void) state;
        struct recheck_ids a = {0}, b = {0};
        recheck_ids_add(&a, "c");
        recheck_ids_add(&a, "a");
        recheck_ids_add(&a, "b");
        recheck_ids_add(&a, "a");
        assert_ids(&a, "a b c");
        assert_true(recheck_ids_contains(&a, "b"));
        assert_false(recheck_ids_contains(&a, "d"));
        recheck_ids_add(&b, "d");
        assert_false(recheck_ids_intersect(&a, &b));
        recheck_ids_add(&b, "c");
        assert_true(recheck_ids_intersect(&a, &b));
        assert_false(recheck_ids_intersect(&a, &(struct recheck_ids) {0}));
        recheck_ids_done(&a);
        recheck_ids_done(&b);
}

static void test_domain_devices(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = host();
        _cleanup_domain_ struct domain *d = parse(PCI_HOSTDEV("0x3b", "0x0") PCI_HOSTDEV("0x5e", "0x2")
                                                  MDEV_HOSTDEV("4B20D080-1B54-4048-85B3-A6A62D165C01")
                                                  PCI_HOSTDEV("0x99", "0x0"));
        struct recheck_ids s = {0};
        recheck_domain_devices(d, h, &s);
        /* the VF brings its PF, the mdev (upper case in the XML) its
         * parent; a device the host lacks is listed by its own BDF */
        assert_ids(&s, "0000:3b:00.0 0000:5e:00.0 0000:5e:00.2 0000:99:00.0 0000:af:00.0 mdev:" MDEV_UUID);
        recheck_ids_done(&s);
}

static void diff_of(struct hostmap *a, struct hostmap *b, const char *want, bool global) {
        struct recheck_diff d = {0};
        recheck_diff_hosts(a, b, &d);
        struct recheck_ids ids = {0};
        recheck_diff_ids(&d, &ids);
        assert_ids(&ids, want);
        assert_int_equal(d.global, global);
        recheck_ids_done(&ids);
        recheck_diff_done(&d);
}

static void test_diff(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = host();
        _cleanup_hostmap_ struct hostmap *b = host();
        diff_of(a, b, "", false);

        /* bound to another driver (what a VM start with managed='yes' does) */
        free(dev(b, "0000:3b:00.0")->driver);
        dev(b, "0000:3b:00.0")->driver = xstrdup("vfio-pci");
        diff_of(a, b, "0000:3b:00.0", false);
        /* the PF's node: the PF and its VF (inherited node) both change */
        dev(b, "0000:5e:00.0")->sysfs_node = 3;
        dev(b, "0000:5e:00.0")->node = 3;
        dev(b, "0000:5e:00.2")->node = 3;
        diff_of(a, b, "0000:3b:00.0 0000:5e:00.0 0000:5e:00.2", false);
        /* the path to the root port */
        _cleanup_hostmap_ struct hostmap *c = host();
        struct hostmap_device *g = dev(c, "0000:af:00.0");
        g->upstream = xcalloc(1, sizeof(*g->upstream));
        g->n_upstream = 1;
        assert_int_equal(pci_addr_parse("0000:ae:00.0", &g->upstream[0]), 0);
        diff_of(a, c, "0000:af:00.0", false);

        /* removed and added devices, an mdev gone */
        _cleanup_hostmap_ struct hostmap *d = fake_host_4n(fake_host_slit, fake_host_sockets);
        fake_host_add_dev(d, "0000:3b:00.0", 1, GPU)->driver = xstrdup("nvidia");
        fake_host_add_dev(d, "0000:d8:00.0", 3, GPU);
        fake_host_add_dev(d, "0000:af:00.0", 3, GPU);
        hostmap_finish(d);
        diff_of(a, d, "0000:5e:00.0 0000:5e:00.2 0000:d8:00.0 mdev:" MDEV_UUID, false);
        diff_of(d, a, "0000:5e:00.0 0000:5e:00.2 0000:d8:00.0 mdev:" MDEV_UUID, false);

        /* another SLIT: every domain */
        static const int slit2[4][4] = { { 10, 21, 32, 32 }, { 21, 10, 32, 32 }, { 32, 32, 10, 12 }, { 32, 32, 12, 10 } };
        _cleanup_hostmap_ struct hostmap *e = fake_host_4n(slit2, fake_host_sockets);
        fake_host_add_dev(e, "0000:3b:00.0", 1, GPU)->driver = xstrdup("nvidia");
        hostmap_finish(e);
        struct recheck_diff df = {0};
        recheck_diff_hosts(a, e, &df);
        assert_true(df.global);
        recheck_diff_done(&df);
}

static void test_settings_key(void **state) {
        (void) state;
        struct policy_settings req = policy_settings_default(POLICY_REQUIRE);
        struct policy_settings sock = policy_settings_default(POLICY_SOCKET);
        _cleanup_free_ char *k1 = recheck_settings_key(&req, NULL);
        _cleanup_free_ char *k2 = recheck_settings_key(&sock, NULL);
        assert_string_not_equal(k1, k2);
        req.mirror_switches = !req.mirror_switches;
        _cleanup_free_ char *k3 = recheck_settings_key(&req, NULL);
        assert_string_not_equal(k1, k3);
        /* the shape alone, with the switches set either way (review finding:
         * a reload from paths to cells rechecked nothing) */
        struct policy_settings paths = policy_settings_default(POLICY_REQUIRE), cells = paths;
        paths.topology = POLICY_TOPOLOGY_PATHS;
        cells.topology = POLICY_TOPOLOGY_CELLS;
        paths.mirror_switches = cells.mirror_switches = true;
        _cleanup_free_ char *kp = recheck_settings_key(&paths, NULL), *kc = recheck_settings_key(&cells, NULL);
        assert_string_not_equal(kp, kc);

        /* the same decisions from two files: a renamed alias, another rule */
        const char *j1 = "{\"default\": {\"policy\": \"required\"}, \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": \"off\"}]}";
        const char *j2 = "{\"default\": {\"policy\": \"legacy\"}, \"rules\": [{\"match\": {\"name\": \"v*\"}, \"policy\": \"require\"}]}";
        _cleanup_policy_ struct policy *p1 = NULL, *p2 = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(policy_parse(j1, strlen(j1), "p1", &p1, &err), 0);
        assert_int_equal(policy_parse(j2, strlen(j2), "p2", &p2, &err), 0);
        struct policy_subject vm = { .name = "vm" };
        struct policy_settings s1, s2;
        policy_resolve(p1, &vm, &s1, NULL);
        policy_resolve(p2, &vm, &s2, NULL);
        _cleanup_free_ char *a = recheck_settings_key(&s1, p1), *b = recheck_settings_key(&s2, p2);
        assert_string_equal(a, b);

        /* variant drivers count only with managed on */
        const char *j3 = "{\"default\": {\"policy\": \"require\"}, \"vfio_variant_drivers\": [\"foo\"]}";
        const char *j4 = "{\"default\": {\"policy\": \"require\", \"managed\": \"auto\"}, \"vfio_variant_drivers\": [\"foo\"]}";
        _cleanup_policy_ struct policy *p3 = NULL, *p4 = NULL;
        assert_int_equal(policy_parse(j3, strlen(j3), "p3", &p3, &err), 0);
        assert_int_equal(policy_parse(j4, strlen(j4), "p4", &p4, &err), 0);
        policy_resolve(p3, &vm, &s1, NULL);
        _cleanup_free_ char *c = recheck_settings_key(&s1, p3);
        assert_string_equal(a, c);
        policy_resolve(p4, &vm, &s2, NULL);
        _cleanup_free_ char *d = recheck_settings_key(&s2, p4);
        assert_non_null(strstr(d, "variant_drivers=foo"));
}

static void test_holds(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *a = host();
        _cleanup_hostmap_ struct hostmap *gone = fake_host_4n(fake_host_slit, fake_host_sockets);
        fake_host_add_dev(gone, "0000:3b:00.0", 1, GPU)->driver = xstrdup("nvidia");
        fake_host_add_dev(gone, "0000:5e:00.0", 2, NIC)->n_vfs = 1;
        struct hostmap_device *vf = fake_host_add_dev(gone, "0000:5e:00.2", -1, NIC);
        vf->has_physfn = true;
        assert_int_equal(pci_addr_parse("0000:5e:00.0", &vf->physfn), 0);
        hostmap_finish(gone);   /* the GPU at af:00.0 and its mdev left */
        struct recheck_holds holds = {0};
        struct recheck_diff d = {0};
        struct recheck_ids ids = {0};

        /* 1. removal: held, nothing to act on now */
        recheck_diff_hosts(a, gone, &d);
        assert_int_equal(d.n, 2);
        recheck_holds_filter(&holds, &d, 1000, 500);
        assert_int_equal(d.n, 0);
        assert_int_equal(holds.n, 2);
        assert_int_equal(recheck_holds_next(&holds), 1500);
        recheck_holds_expire(&holds, 1499, &ids);
        assert_int_equal(ids.n, 0);
        recheck_diff_done(&d);

        /* 2. back as it was: the hold goes, nothing to act on */
        recheck_diff_hosts(gone, a, &d);
        recheck_holds_filter(&holds, &d, 1200, 500);
        assert_int_equal(d.n, 0);
        assert_int_equal(holds.n, 0);
        assert_int_equal(recheck_holds_next(&holds), UINT64_MAX);
        recheck_diff_done(&d);

        /* 3. gone again, back with another driver: acted on at the add */
        recheck_diff_hosts(a, gone, &d);
        recheck_holds_filter(&holds, &d, 2000, 500);
        recheck_diff_done(&d);
        _cleanup_hostmap_ struct hostmap *other = host();
        dev(other, "0000:af:00.0")->driver = xstrdup("vfio-pci");
        recheck_diff_hosts(gone, other, &d);
        recheck_holds_filter(&holds, &d, 2100, 500);
        recheck_diff_ids(&d, &ids);
        assert_ids(&ids, "0000:af:00.0");
        assert_int_equal(holds.n, 0);
        recheck_ids_done(&ids);
        recheck_diff_done(&d);

        /* 4. gone for good: acted on once the grace period is over */
        recheck_diff_hosts(a, gone, &d);
        recheck_holds_filter(&holds, &d, 3000, 500);
        recheck_diff_done(&d);
        recheck_holds_expire(&holds, 3500, &ids);
        assert_ids(&ids, "0000:af:00.0 mdev:" MDEV_UUID);
        assert_int_equal(holds.n, 0);
        recheck_ids_done(&ids);
        recheck_holds_done(&holds);
}

static void test_cache(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = host();
        struct recheck_cache c;
        recheck_cache_init(&c, 2);
        _cleanup_domain_ struct domain *gpu = parse(PCI_HOSTDEV("0x3b", "0x0"));
        _cleanup_domain_ struct domain *vf = parse(PCI_HOSTDEV("0x5e", "0x2"));
        _cleanup_domain_ struct domain *md = parse(MDEV_HOSTDEV(MDEV_UUID));
        bool created;
        struct recheck_entry *e = recheck_cache_update(&c, "aaaaaaaa-0000-0000-0000-000000000001", gpu, h, "k1", &created);
        assert_true(created);
        assert_string_equal(e->tag, "t1");
        e->summary = xstrdup("refused");
        recheck_cache_update(&c, "aaaaaaaa-0000-0000-0000-000000000002", vf, h, "k1", &created);
        assert_true(created);
        /* refreshed: the summary stays, the clock moves */
        e = recheck_cache_update(&c, "AAAAAAAA-0000-0000-0000-000000000001", gpu, h, "k2", &created);
        assert_false(created);
        assert_string_equal(e->summary, "refused");
        assert_string_equal(e->settings_key, "k2");

        struct recheck_ids ids = {0}, uuids = {0};
        recheck_ids_add(&ids, "0000:5e:00.0");      /* the PF: its VF's domain */
        recheck_cache_touched_by(&c, &ids, &uuids);
        assert_ids(&uuids, "aaaaaaaa-0000-0000-0000-000000000002");
        recheck_ids_done(&uuids);
        recheck_ids_done(&ids);

        /* an undefined domain is forgotten, which makes room without
         * overflowing; then it comes back (defined again) */
        assert_true(recheck_cache_forget(&c, "aaaaaaaa-0000-0000-0000-000000000002"));
        assert_false(recheck_cache_forget(&c, "aaaaaaaa-0000-0000-0000-000000000002"));
        assert_null(recheck_cache_find(&c, "aaaaaaaa-0000-0000-0000-000000000002"));
        assert_int_equal(c.n, 1);
        assert_false(c.overflowed);
        recheck_cache_update(&c, "aaaaaaaa-0000-0000-0000-000000000002", vf, h, "k1", &created);
        assert_true(created);
        recheck_cache_update(&c, "aaaaaaaa-0000-0000-0000-000000000001", gpu, h, "k2", &created);

        /* full: the least recently planned (…02) goes */
        assert_false(c.overflowed);
        recheck_cache_update(&c, "aaaaaaaa-0000-0000-0000-000000000003", md, h, "k1", &created);
        assert_true(c.overflowed);
        assert_int_equal(c.n, 2);
        assert_null(recheck_cache_find(&c, "aaaaaaaa-0000-0000-0000-000000000002"));
        assert_non_null(recheck_cache_find(&c, "aaaaaaaa-0000-0000-0000-000000000001"));
        recheck_ids_add(&ids, "0000:af:00.0");      /* the mdev's parent */
        recheck_cache_touched_by(&c, &ids, &uuids);
        assert_ids(&uuids, "aaaaaaaa-0000-0000-0000-000000000003");
        recheck_ids_done(&uuids);
        recheck_ids_done(&ids);
        recheck_cache_done(&c);
}

static void test_policy_changed(void **state) {
        (void) state;
        _cleanup_hostmap_ struct hostmap *h = host();
        const char *j1 = "{\"default\": {\"policy\": \"require\"}}";
        const char *j2 = "{\"default\": {\"policy\": \"required\"}, \"rules\": [{\"match\": {\"tag\": \"t2\"}, \"policy\": \"preferred\"}]}";
        const char *j3 = "{\"default\": {\"policy\": \"require\"}, \"rules\": [{\"match\": {\"name\": \"gpu-vm\"}, \"policy\": \"socket\"}]}";
        _cleanup_policy_ struct policy *p1 = NULL, *p2 = NULL, *p3 = NULL;
        _cleanup_free_ char *err = NULL;
        assert_int_equal(policy_parse(j1, strlen(j1), "p1", &p1, &err), 0);
        assert_int_equal(policy_parse(j2, strlen(j2), "p2", &p2, &err), 0);
        assert_int_equal(policy_parse(j3, strlen(j3), "p3", &p3, &err), 0);

        struct recheck_cache c;
        recheck_cache_init(&c, RECHECK_CACHE_MAX);
        _cleanup_domain_ struct domain *vm = parse(PCI_HOSTDEV("0x3b", "0x0"));
        free(vm->name);
        vm->name = xstrdup("gpu-vm");
        _cleanup_domain_ struct domain *other = parse(PCI_HOSTDEV("0x5e", "0x2"));
        struct policy_settings s;
        struct policy_subject subj = { .name = "gpu-vm", .tag = "t1" };
        policy_resolve(p1, &subj, &s, NULL);
        _cleanup_free_ char *key = recheck_settings_key(&s, p1);
        recheck_cache_update(&c, "aaaaaaaa-0000-0000-0000-000000000001", vm, h, key, NULL);
        recheck_cache_update(&c, "aaaaaaaa-0000-0000-0000-000000000002", other, h, key, NULL);

        struct recheck_ids u = {0};
        recheck_cache_policy_changed(&c, p2, &u);   /* the alias, a rule matching nobody */
        assert_int_equal(u.n, 0);
        recheck_cache_policy_changed(&c, p3, &u);   /* a rule for gpu-vm only */
        assert_ids(&u, "aaaaaaaa-0000-0000-0000-000000000001");
        recheck_ids_done(&u);
        recheck_cache_done(&c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_ids_set),
                cmocka_unit_test(test_domain_devices),
                cmocka_unit_test(test_diff),
                cmocka_unit_test(test_settings_key),
                cmocka_unit_test(test_holds),
                cmocka_unit_test(test_cache),
                cmocka_unit_test(test_policy_changed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}

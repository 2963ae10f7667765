/* A fixture virtual machine for the unit tests of the engine and the
 * decisions (include after cmocka.h): the host of fake-host.h with one GPU
 * on each node (10:00.0 on node 0, 30:00.0 on 1, 50:00.0 on 2, 70:00.0 on
 * 3), and a q35 domain whose four cells sit on nodes 0-3, passing all four
 * through without guest addresses. */
#pragma once

#include "engine.h"
#include "fake-host.h"
#include "policy.h"

#define FAKE_VM_NAME "vm-test"
#define FAKE_VM_UUID "0b7a5b3e-8d4c-4a3f-9c55-1d7b2f1e6a02"
#define FAKE_VM_POLICIES { "require", "socket", "preferred", "legacy", "off" }

/* The GPUs of the fixture host, and the same GPUs on other buses (a
 * destination host of a migration), as initializers of const char *[4];
 * FAKE_VM_NODES: each on its own node. */
#define FAKE_VM_GPUS { "0000:10:00.0", "0000:30:00.0", "0000:50:00.0", "0000:70:00.0" }
#define FAKE_VM_GPUS_MOVED { "0000:18:00.0", "0000:38:00.0", "0000:58:00.0", "0000:78:00.0" }
#define FAKE_VM_NODES { 0, 1, 2, 3 }

/* fake-host.h's host with a GPU (class 0x030200) at each of gpus[], the
 * i-th on node nodes[i], not yet finished: the caller adds what else it
 * wants (mdevs) and calls hostmap_finish(). */
static inline struct hostmap *fake_vm_host_with(const char *const gpus[4], const int nodes[4]) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        for (size_t i = 0; i < 4; i++)
                fake_host_add_dev(h, gpus[i], nodes[i], 0x030200);
        return h;
}

static inline struct hostmap *fake_vm_host(void) {
        struct hostmap *h = fake_vm_host_with((const char *const[]) FAKE_VM_GPUS, (const int[]) FAKE_VM_NODES);
        hostmap_finish(h);
        return h;
}

/* The fixture host with its GPUs on other buses (FAKE_VM_GPUS_MOVED). */
static inline struct hostmap *fake_vm_host_renumbered(void) {
        struct hostmap *h = fake_vm_host_with((const char *const[]) FAKE_VM_GPUS_MOVED, (const int[]) FAKE_VM_NODES);
        hostmap_finish(h);
        return h;
}

#define FAKE_VM_HOSTDEV(bus) \
        "    <hostdev mode='subsystem' type='pci' managed='yes'>\n" \
        "      <source>\n" \
        "        <address domain='0x0000' bus='" bus "' slot='0x00' function='0x0'/>\n" \
        "      </source>\n" \
        "    </hostdev>\n"

/* The q35 machine type and its features, from inside <os> to </features>. */
#define FAKE_VM_OS_FEATURES \
        "    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>\n" \
        "  </os>\n" \
        "  <features>\n" \
        "    <acpi/>\n" \
        "    <apic/>\n" \
        "  </features>\n"

/* The fixture domain from after <uuid> to the pcie-root controller, and
 * from after the devices to the end: the four cells on nodes 0-3. */
#define FAKE_VM_XML_BODY \
        "  <memory unit='MiB'>4096</memory>\n" \
        "  <vcpu placement='static'>8</vcpu>\n" \
        "  <os>\n" \
        FAKE_VM_OS_FEATURES \
        "  <cpu mode='host-passthrough'>\n" \
        "    <numa>\n" \
        "      <cell id='0' cpus='0-1' memory='512' unit='MiB'/>\n" \
        "      <cell id='1' cpus='2-3' memory='512' unit='MiB'/>\n" \
        "      <cell id='2' cpus='4-5' memory='512' unit='MiB'/>\n" \
        "      <cell id='3' cpus='6-7' memory='512' unit='MiB'/>\n" \
        "    </numa>\n" \
        "  </cpu>\n" \
        "  <numatune>\n" \
        "    <memnode cellid='0' mode='strict' nodeset='0'/>\n" \
        "    <memnode cellid='1' mode='strict' nodeset='1'/>\n" \
        "    <memnode cellid='2' mode='strict' nodeset='2'/>\n" \
        "    <memnode cellid='3' mode='strict' nodeset='3'/>\n" \
        "  </numatune>\n" \
        "  <devices>\n" \
        "    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n" \
        "    <controller type='pci' index='0' model='pcie-root'/>\n"

#define FAKE_VM_XML_TAIL \
        "    <memballoon model='virtio'/>\n" \
        "  </devices>\n" \
        "</domain>\n"

/* The fixture domain up to its passthrough devices: a test that wants
 * other devices writes FAKE_VM_XML_HEAD, its devices, FAKE_VM_XML_TAIL. */
#define FAKE_VM_XML_HEAD \
        "<domain type='kvm'>\n" \
        "  <name>" FAKE_VM_NAME "</name>\n" \
        "  <uuid>" FAKE_VM_UUID "</uuid>\n" \
        FAKE_VM_XML_BODY

static const char fake_vm_xml[] =
        FAKE_VM_XML_HEAD
        FAKE_VM_HOSTDEV("0x10")
        FAKE_VM_HOSTDEV("0x30")
        FAKE_VM_HOSTDEV("0x50")
        FAKE_VM_HOSTDEV("0x70")
        FAKE_VM_XML_TAIL;

/* A policy file whose default is 'mode' (a policy_mode_to_string() name). */
static inline struct policy *fake_vm_policy(const char *mode) {
        _cleanup_free_ char *json = xasprintf("{\"default\": {\"policy\": \"%s\"}}", mode);
        _cleanup_free_ char *err = NULL;
        struct policy *p = NULL;
        if (policy_parse(json, strlen(json), "fake-vm.json", &p, &err) < 0)
                fail_msg("policy %s: %s", mode, strna(err));
        return p;
}

/* The same with "migration": "same-topology", the fleet's opt-in
 * (migration: refuse is the default). */
static inline struct policy *fake_vm_policy_fleet(const char *mode) {
        _cleanup_free_ char *json = xasprintf("{\"default\": {\"policy\": \"%s\", \"migration\": \"same-topology\"}}", mode);
        _cleanup_free_ char *err = NULL;
        struct policy *p = NULL;
        if (policy_parse(json, strlen(json), "fake-vm.json", &p, &err) < 0)
                fail_msg("policy %s: %s", mode, strna(err));
        return p;
}

/* fake_vm_xml planned under 'mode' with migration: same-topology (its
 * mark says migratable="yes"). */
static inline char *fake_vm_planned_fleet(const struct hostmap *h, const char *mode) {
        struct policy *pol = fake_vm_policy_fleet(mode);
        struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        if (engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, pol, NULL, &r, &err) < 0)
                fail_msg("plan under %s: %s", mode, strna(err));
        char *xml = xstrdup(r->xml);
        engine_result_free(r);
        policy_free(pol);
        return xml;
}

/* fake_vm_xml planned under 'mode' (the output of engine_plan()), with
 * the default switches (migration: refuse). */
static inline char *fake_vm_planned(const struct hostmap *h, const char *mode) {
        enum policy_mode m;
        assert_int_equal(policy_mode_from_string(mode, &m), 0);
        struct engine_result *r = NULL;
        _cleanup_free_ char *err = NULL;
        if (engine_plan(fake_vm_xml, strlen(fake_vm_xml), h, NULL, &m, &r, &err) < 0)
                fail_msg("plan under %s: %s", mode, strna(err));
        char *xml = xstrdup(r->xml);
        engine_result_free(r);
        return xml;
}

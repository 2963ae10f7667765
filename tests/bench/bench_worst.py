#!/usr/bin/env python3
"""Worst-input benchmark (issue 24): every request's work is bounded by
the host, not by the input.

Builds the most expensive inputs we know how to build, each at the size
caps (DOMAIN_XML_MAX, 4 MiB, and DOMAIN_XML_TAGS_MAX, 16384 tags, whichever
binds first), and times each request kind pcinumad serves on them, as
pcinumad runs it (bench-worst: engine_plan(), engine_revert(),
engine_incoming(); one core, thread CPU time, median of 5 runs).  The
target: each answers in under 100 ms, accepted or refused with a clear
reason (the outcome is printed beside each figure).

The inputs:
  finding        the review's: 24,000 hostdevs and a mark listing them in
                 reverse, 3.9 MB (40-60 s of CPU before the fix)
  finding-10k    the same with 10,000 hostdevs: under the tag limit, so
                 the domain parser reads it all
  pad-disks      a q35 domain with one GPU, padded to the caps with virtio
                 disks and NICs (guest PCI addresses: the planner's and the
                 revert's walks over every address)
  controllers    30,000 PCI controllers without an index
  pinning        1024 guest cells each with every vCPU, 16,384 vCPUs each
                 pinned to every host CPU, and vcpupins repeated to the cap
  big-host-all   a generated host of 960 GPUs (4 nodes, one root port
                 each): a domain with all of them (plan)
  big-host-64-*  64 of them planned (plan, revert) and migrated onto a
                 renumbered copy of the host; and the same padded with
                 disks to the tag limit, less the room the plan takes
  same-position  a mark of 241 devices in one position on a host with 240
                 alike per node: the migration search's worst
  mark-records   a mark with the most records of each kind a plan writes
                 (2048 devices, managed and cliques, 256 expanders,
                 controllers and removed), 1024 of the devices in the
                 domain, 1024 <qemu:device> overrides, padded with disks
                 (revert)
  revert-walks   1024 moved devices each to go back to its original
                 address, 255 pruned controllers to restore over libvirt's
                 fillers, disks to the cap (revert)

    bench_worst.py --bench-worst PATH --mkfakesysfs PATH --hosts DIR --example XML
"""

import argparse
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

XML_MAX = 4 * 1024 * 1024
TAGS_MAX = 16384
TARGET_MS = 100.0
NS = "urn:pcinuma:topology:1"
UUID = "6c3e4e0a-4a5d-4c47-9a7b-1d2f3e4a5b6c"


def capped(head, unit, tail, tags_per_unit, bytes_margin=1024, tags_margin=16):
    """head + as many copies of unit(i) as fit under both caps + tail."""
    out, size, tags = [head], len(head) + len(tail), head.count("<") + tail.count("<")
    i = 0
    while True:
        u = unit(i)
        if size + len(u) > XML_MAX - bytes_margin or tags + tags_per_unit > TAGS_MAX - tags_margin:
            break
        out.append(u)
        size += len(u)
        tags += tags_per_unit
        i += 1
    out.append(tail)
    return "".join(out), i


def bdf3(i):
    return (i >> 8, (i >> 3) & 0x1f, i & 7)


def finding(n):
    """n hostdevs and a mark that records them in reverse order."""
    marks = "".join('<p:device host="0000:%02x:%02x.%d" position="rc:0@a fn:0@b"/>\n' % bdf3(i)
                    for i in reversed(range(n)))
    devs = "".join("<hostdev mode='subsystem' type='pci'><source><address bus='%d' slot='%d' function='%d'/>"
                   "</source></hostdev>\n" % bdf3(i) for i in range(n))
    return ("<domain type='qemu'><name>finding</name><uuid>%s</uuid><metadata>"
            "<p:topology xmlns:p='%s' version='1' migratable='yes' fingerprint-version='2'>\n%s</p:topology>"
            "</metadata><memory>65536</memory><os><type arch='x86_64' machine='q35'>hvm</type></os><devices>\n%s"
            "</devices></domain>\n" % (UUID, NS, marks, devs))


HEAD = ("<domain type='qemu'>\n  <name>worst</name>\n  <uuid>%s</uuid>\n  <memory unit='MiB'>256</memory>\n"
        "  <vcpu placement='static'>4</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
        "  <features>\n    <acpi/>\n  </features>\n" % UUID)


def gpu_hostdev(bdf):
    dom, bus, sf = bdf.split(":")
    slot, fn = sf.split(".")
    return ("    <hostdev mode='subsystem' type='pci' managed='yes'>\n      <source>\n"
            "        <address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>\n      </source>\n"
            "    </hostdev>\n" % (dom, bus, slot, fn))


def disk(i):
    return ("    <disk type='file' device='disk'><source file='/i/%d.img'/><target dev='vd%d' bus='virtio'/>"
            "<address type='pci' domain='0x0000' bus='0x%02x' slot='0x%02x' function='0x0'/></disk>\n"
            % (i, i, 1 + i % 250, (i // 250) % 32))


def pad_disks(gpu):
    head = (HEAD + "  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
            "    <controller type='pci' index='0' model='pcie-root'/>\n" + gpu_hostdev(gpu))
    return capped(head, disk, "  </devices>\n</domain>\n", 5)[0]


def controllers():
    head = HEAD + "  <devices>\n    <controller type='pci' index='0' model='pcie-root'/>\n"
    return capped(head, lambda i: "<controller type='pci' model='pcie-root-port'/>\n",
                  "    <hostdev mode='subsystem' type='pci'><source><address bus='0x18'/></source></hostdev>\n"
                  "  </devices>\n</domain>\n", 1)[0]


def pinning(gpu):
    cells = "".join("<cell id='%d' cpus='0-16383' memory='1' unit='MiB'/>" % c for c in range(1024))
    head = ("<domain type='qemu'><name>worst</name><uuid>%s</uuid><memory unit='MiB'>1024</memory>"
            "<vcpu placement='static' cpuset='0-16383'>16384</vcpu><os><type arch='x86_64' machine='q35'>hvm</type>"
            "</os><cpu><numa>%s</numa></cpu><cputune>\n" % (UUID, cells))
    tail = ("</cputune><devices>" + gpu_hostdev(gpu) + "</devices></domain>\n")
    return capped(head, lambda i: "<vcpupin vcpu='%d' cpuset='0-16383'/>\n" % (i % 16384), tail, 1)[0]


def big_host(nodes=4, per_node=240):
    """nodes NUMA nodes, each its own PCI segment with one host bridge and
    per_node root ports, one GPU below each."""
    desc = {"description": "bench: %d nodes x %d GPUs" % (nodes, per_node), "nodes": [], "hostbridges": []}
    gpus = []
    for n in range(nodes):
        desc["nodes"].append({"id": n, "cpus": "%d-%d" % (n * 16, n * 16 + 15), "socket": n // 2})
        devs = []
        for k in range(per_node):
            rp = "%04x:00:%02x.%d" % (n, 1 + k // 8, k % 8)
            gpu = "%04x:%02x:00.0" % (n, 1 + k)
            devs.append({"bdf": rp, "kind": "rootport", "devices": [{"bdf": gpu, "kind": "gpu"}]})
            gpus.append(gpu)
        desc["hostbridges"].append({"name": "pci%04x:00" % n, "node": n, "devices": devs})
    return desc, gpus


def renumbered(desc):
    """The same host with other segment numbers (a fleet's twin)."""
    text = B.json.dumps(desc)
    for n in range(len(desc["nodes"])):
        text = text.replace('"%04x:' % n, '"%04x:' % (0x40 + n)).replace('pci%04x:' % n, 'pci%04x:' % (0x40 + n))
    return B.json.loads(text)


def all_devices(gpus, cells=4):
    head = HEAD.replace("<vcpu placement='static'>4</vcpu>", "<vcpu placement='static'>%d</vcpu>" % cells)
    numa = "".join("      <cell id='%d' cpus='%d' memory='64' unit='MiB'/>\n" % (c, c) for c in range(cells))
    tune = "".join("    <memnode cellid='%d' mode='strict' nodeset='%d'/>\n" % (c, c) for c in range(cells))
    return (head + "  <cpu>\n    <numa>\n" + numa + "    </numa>\n  </cpu>\n  <numatune>\n" + tune +
            "  </numatune>\n  <devices>\n    <controller type='pci' index='0' model='pcie-root'/>\n" +
            "".join(gpu_hostdev(g) for g in gpus) + "  </devices>\n</domain>\n")


def same_position(planned_one, gpu_one, n):
    """A planned domain's device record and hostdev cloned n times, each
    clone in the first's position (the same digests) under names of its
    own, so that every clone fits every GPU of the node on its own."""
    m = re.search(r'<pcinuma:device host="%s"[^>]*/>' % re.escape(gpu_one), planned_one)
    h = re.search(r'<hostdev mode="subsystem" type="pci" managed="yes">.*?</hostdev>', planned_one, re.S)
    if not m or not h:
        raise RuntimeError("the planned domain has no device record or hostdev to clone")
    rp, slot = re.search(r'br:[0-9a-f]+@([0-9a-f:.]+) fn:[0-9a-f]+@([0-9a-f:]+)"', m.group(0)).groups()
    records, hostdevs = [], []
    for i in range(n):
        seg, bus = 0x80 + i // 200, 1 + i % 200
        name = "%04x:%02x:00.0" % (seg, bus)
        records.append(m.group(0).replace(gpu_one, name).replace("@" + rp, "@%04x:00:%02x.%d" % (seg, bus >> 3, bus & 7))
                       .replace("@" + slot, "@%04x:%02x:00" % (seg, bus)))
        hostdevs.append(re.sub(r"<source>.*?</source>",
                               "<source><address domain='0x%04x' bus='0x%02x' slot='0x00' function='0x0'/></source>"
                               % (seg, bus), h.group(0), flags=re.S))
    return planned_one.replace(m.group(0), "\n".join(records)).replace(h.group(0), "\n".join(hostdevs))


def mark_records(gpu):
    dev = lambda i: ('<p:device host="0000:%02x:%02x.%d" class="0x030200" host-node="0" guest-cell="0" controller="%d" '
                     'original-address="none"/>' % (bdf3(i) + (1 + i % 255,)))
    marks = "".join(dev(i) for i in range(2048))
    marks += "".join('<p:expander controller="%d" guest-cell="0" host-nodes="0" busNr="%d"/>' % (i, 254 - i % 250)
                     for i in range(256))
    marks += "".join('<p:controller index="%d" model="pcie-root-port"/>' % i for i in range(256))
    marks += "".join('<p:managed host="0000:%02x:%02x.%d" driver="vfio-pci" original="yes"/>' % bdf3(i)
                     for i in range(2048))
    marks += "".join('<p:clique host="0000:%02x:%02x.%d" id="1" alias="ua-x%d" alias-original="none"/>'
                     % (bdf3(i) + (i,)) for i in range(2048))
    marks += "".join('<p:removed controller="%d" position="%d">&lt;controller type=\'pci\' index=\'%d\' '
                     'model=\'pcie-root-port\'/&gt;</p:removed>' % (i, i, i) for i in range(1, 256))
    head = ("<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'><name>worst</name>"
            "<uuid>%s</uuid><metadata><p:topology xmlns:p='%s' version='1' migratable='yes' policy='require' "
            "single-function-slots='0x01 0x02 0x03'>%s</p:topology></metadata><memory>65536</memory><os>"
            "<type arch='x86_64' machine='q35'>hvm</type></os><devices>"
            "<controller type='pci' index='0' model='pcie-root'/>" % (UUID, NS, marks))
    hostdevs = "".join("<hostdev mode='subsystem' type='pci'><source><address bus='%d' slot='%d' function='%d'/>"
                       "</source><address type='pci' bus='%d' slot='0'/></hostdev>" % (bdf3(i) + (1 + i % 255,))
                       for i in range(1024))
    overrides = "<qemu:override>" + "".join("<qemu:device alias='ua-y%d'/>" % i for i in range(1024)) + \
                "</qemu:override>"
    return capped(head + hostdevs, disk, "</devices>" + overrides + "</domain>\n", 5)[0]


def revert_walks():
    """A mark of 1024 moved devices each to go back to its original
    address, 255 pruned controllers to restore over libvirt's fillers, and
    disks to the cap: every record asks who sits where."""
    n = 1024
    recs = "".join('<p:device host="0000:%02x:%02x.%d" host-node="0" guest-cell="0" controller="%d" '
                   'original-address="type=pci domain=0x0000 bus=0x00 slot=0x%02x function=0x0"/>'
                   % (bdf3(i) + (1 + i % 255, 1 + i % 30)) for i in range(n))
    recs += "".join('<p:removed controller="%d" position="%d">&lt;controller type=\'pci\' index=\'%d\' '
                    'model=\'pcie-root-port\'/&gt;</p:removed>' % (i, i, i) for i in range(1, 256))
    head = ("<domain type='qemu'><name>worst</name><uuid>%s</uuid><metadata><p:topology xmlns:p='%s' version='1' "
            "migratable='yes' policy='require'>%s</p:topology></metadata><memory>65536</memory><os>"
            "<type arch='x86_64' machine='q35'>hvm</type></os><devices>"
            "<controller type='pci' index='0' model='pcie-root'/>" % (UUID, NS, recs))
    head += "".join("<controller type='pci' index='%d' model='pcie-root-port'/>" % i for i in range(1, 256))
    head += "".join("<hostdev mode='subsystem' type='pci'><source><address bus='%d' slot='%d' function='%d'/></source>"
                    "<address type='pci' bus='%d' slot='0'/></hostdev>" % (bdf3(i) + (1 + i % 255,)) for i in range(n))
    return capped(head, disk, "</devices></domain>\n", 5)[0]


def run_one(a, sysfs, path, label, kind, policy=None, runs=5):
    cmd = [a.bench_worst, "--sysfs", sysfs, "--kind", kind, "--runs", str(runs), "--label", label, path]
    if policy:
        cmd[1:1] = ["--policy-file", policy]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    cpu, outcome = None, ""
    for line in out.splitlines():
        B.say("# " + line)
        m = re.search(r"cpu_ms=([\d.]+)", line)
        if m:
            cpu = float(m.group(1))
        m = re.search(r": outcome: (.*)", line)
        if m:
            outcome = m.group(1)
    short = outcome if len(outcome) <= 140 else outcome[:137] + "..."
    B.result("worst.%s.%s_cpu_ms" % (label, kind), cpu, "ms", "<=", TARGET_MS, "%.1f", short)
    return outcome


def write(work, name, text):
    path = os.path.join(work, name + ".xml")
    with open(path, "w") as f:
        f.write(text)
    B.info("worst.%s.xml_bytes" % name, len(text.encode()), "bytes", "%d")
    B.info("worst.%s.xml_tags" % name, text.count("<"), "tags", "%d")
    return path


def run(a):
    if not os.access(a.bench_worst, os.X_OK):
        B.skip("%s is missing" % a.bench_worst)
    work = B.short_tmpdir("worst")
    fleet_a = B.mkfakesysfs(a.mkfakesysfs, os.path.join(a.hosts, "fleet-a.json"), os.path.join(work, "fleet-a"))
    policy = os.path.join(work, "policy.json")
    with open(policy, "w") as f:
        f.write('{"default": {"policy": "require", "migration": "same-topology"}}\n')

    for n, label in ((24000, "finding"), (10000, "finding-10k")):
        path = write(work, label, finding(n))
        for kind in ("plan", "revert", "migrate"):
            run_one(a, fleet_a, path, label, kind, policy)

    for label, text in (("pad-disks", pad_disks("0000:18:00.0")), ("controllers", controllers()),
                        ("pinning", pinning("0000:18:00.0")), ("mark-records", mark_records("0000:18:00.0")),
                        ("revert-walks", revert_walks())):
        path = write(work, label, text)
        for kind in ("plan", "revert", "migrate"):
            run_one(a, fleet_a, path, label, kind, policy)

    desc, gpus = big_host()
    big = B.mkfakesysfs(a.mkfakesysfs, desc, os.path.join(work, "big-host"))
    twin = B.mkfakesysfs(a.mkfakesysfs, renumbered(desc), os.path.join(work, "big-host-twin"))
    path = write(work, "big-host-all", all_devices(gpus))
    run_one(a, big, path, "big-host-all", "plan", policy)
    # 64 GPUs and disks without guest addresses up to the tag limit, less
    # what the plan adds (pcinuma refuses to write what it would not read)
    head, tail = all_devices(gpus[:64], 1).split("  </devices>\n</domain>\n")[0], "  </devices>\n</domain>\n"
    bare = lambda i: "    <disk type='file' device='disk'><source file='/i/%d.img'/><target dev='vd%d' bus='virtio'/></disk>\n" % (i, i)
    padded = capped(head, bare, tail, 4, tags_margin=1200)[0]
    path = write(work, "big-host-64-padded", padded)
    run_one(a, big, path, "big-host-64-padded", "plan", policy)
    if getattr(a, "pcinumactl", None):
        path = write(work, "big-host-64-padded-planned", B.planned_xml(a.pcinumactl, big, path, policy_file=policy))
        for kind in ("plan", "revert"):
            run_one(a, big, path, "big-host-64-padded-planned", kind, policy)
        run_one(a, twin, path, "big-host-64-padded-planned", "migrate", policy)
    # Its biggest plannable part: 64 GPUs of one node, planned, then
    # migrated to the twin and reverted.
    planned = B.planned_xml(a.pcinumactl, big, write(work, "big-host-64", all_devices(gpus[:64], 1)), policy_file=policy) \
        if getattr(a, "pcinumactl", None) else None
    if planned:
        path = write(work, "big-host-64-planned", planned)
        for kind in ("plan", "revert"):
            run_one(a, big, path, "big-host-64-planned", kind, policy)
        run_one(a, twin, path, "big-host-64-planned", "migrate", policy)
        one = B.planned_xml(a.pcinumactl, big, write(work, "big-host-1", all_devices(gpus[:1], 1)), policy_file=policy)
        path = write(work, "same-position", same_position(one, gpus[0], 241))
        run_one(a, big, path, "same-position", "migrate", policy)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for opt in ("--bench-worst", "--mkfakesysfs", "--hosts", "--example"):
        ap.add_argument(opt, required=True)
    ap.add_argument("--pcinumactl")
    B.main(lambda: run(ap.parse_args()))

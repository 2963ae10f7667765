#!/usr/bin/env python3
"""pcinumactl plan --format hwloc and host --format hwloc, read by hwloc
itself (issue 25, item 5).

For each case below, the planned guest's hwloc XML goes through
`lstopo-no-graphics -i FILE --if xml --whole-io --of xml -` (hwloc imports
it, checks it, and writes what it understood), and hwloc's own view must
place every device under its planned cell: each PCIDev's nearest normal
ancestor holds the NUMANode whose os_index is the device's guest cell in
`plan --format json`, at the device's guest BDF, with its host's vendor,
device and class (from `host --json`), and an OS device naming its host
BDF.  A device that stays on pcie.0 (or whose address libvirt picks) sits
outside every cell.  The same for `host --format hwloc` on every fixture
host: every device at its BDF under the object of its host node.  The
console output (lstopo's text) lists as many PCI devices.  A refused plan
prints nothing and exits 1; a bad --format exits 2.

Skipped (77) when lstopo-no-graphics (Debian's hwloc-nox) is missing.
TAP output."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from pcinumatest.tap import Tap

TAP = Tap()
ARGS = None
NORMAL = {"Machine", "Package", "Group", "Die", "L3Cache", "L2Cache", "Core", "PU"}

# (case, fixture host, extra plan arguments)
CASES = [
    ("mirror-switches", "sample-4n", ["--policy", "require"]),
    ("paths-p5-like", "p5-like", ["--policy", "require"]),
    ("no-node-preferred", None, []),
    ("mdev-preferred", None, []),
    ("multi-node-cell-preferred", None, []),
    # no guest NUMA cells, left as it is: one node holding every vCPU
    ("no-numa-legacy", None, []),
]


def run(*argv, stdin=None, env=None):
    return subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                          env=env)


def lstopo(xml_text, work, name):
    """hwloc's reading, as XML and as text.  HWLOC_DEBUG_CHECK makes hwloc
    check the topology it built (cpusets and nodesets nested, I/O and
    memory children where they belong) and abort when it is not
    consistent, which lstopo alone does not; any warning on stderr counts
    as a failure too."""
    path = os.path.join(work, name + ".xml")
    with open(path, "w") as f:
        f.write(xml_text)
    env = dict(os.environ, HWLOC_DEBUG_CHECK="1")
    out = run(ARGS.lstopo, "-i", path, "--if", "xml", "--whole-io", "--of", "xml", "-", env=env)
    text = run(ARGS.lstopo, "-i", path, "--if", "xml", "--whole-io", env=env)
    for r in (out, text):
        if r.stderr and not r.returncode:
            r.returncode = 1
    return out, text


def walk(elem, ancestors, found):
    """Every PCIDev with the list of objects above it (nearest first)."""
    for child in elem.findall("object"):
        if child.get("type") == "PCIDev":
            found.append((child, list(ancestors)))
        walk(child, [child] + ancestors, found)


def locality(ancestors):
    """The nearest normal ancestor, and the os_index of its NUMANode child
    (None: no NUMANode there, e.g. the Machine of a multi-node guest)."""
    for a in ancestors:
        if a.get("type") in NORMAL:
            nodes = [c for c in a.findall("object") if c.get("type") == "NUMANode"]
            return a, int(nodes[0].get("os_index")) if len(nodes) == 1 else None
    return None, None


def osdev_names(dev):
    return [c.get("name") for c in dev.findall("object") if c.get("type") == "OSDev"]


def host_ids(root):
    h = run(ARGS.pcinumactl, "host", "--sysfs-root", root, "--json")
    return {d["bdf"]: d for d in json.loads(h.stdout)["devices"]}


def pci_type(d):
    return "%04x [%s:%s]" % (int(d["class"], 16) >> 8, d["vendor"][2:], d["device"][2:])


def check_guest(case, host, extra, work, trees):
    case_dir = os.path.join(ARGS.cases, case)
    host = host or open(os.path.join(case_dir, "host")).read().strip()
    if not extra and os.path.exists(os.path.join(case_dir, "args")):
        extra = open(os.path.join(case_dir, "args")).read().split()
    root = trees(host)
    inp = os.path.join(case_dir, "input.xml")
    j = run(ARGS.pcinumactl, "plan", "--sysfs-root", root, *extra, "--format", "json", inp)
    plan = json.loads(j.stdout)
    p = run(ARGS.pcinumactl, "plan", "--sysfs-root", root, *extra, "--format", "hwloc", inp)
    TAP.check(p.returncode == 0 and p.stdout.startswith("<?xml"), "%s: plan --format hwloc prints XML" % case, p.stderr)
    out, text = lstopo(p.stdout, work, case)
    TAP.check(out.returncode == 0 and text.returncode == 0, "%s: lstopo-no-graphics reads it" % case, out.stderr + text.stderr)
    if out.returncode:
        return
    topo = ET.fromstring(out.stdout)
    found = []
    walk(topo, [], found)
    by_busid = {d.get("pci_busid"): (d, anc) for d, anc in found}
    ids = host_ids(root)
    bad = []
    moved = stayed = 0
    for dev in plan["devices"]:
        name = dev.get("host") or "mdev " + (dev.get("mdev") or "")
        if dev["action"] != "move":
            stayed += 1
            # Outside every cell: on pcie.0 below the Machine, or a Misc.
            hits = [(d, a) for d, a in found if "host " + name in osdev_names(d)]
            if hits and locality(hits[0][1])[1] is not None and len(plan["cells"]) > 1:
                bad.append("%s stays, but hwloc puts it in a cell" % name)
            if not hits and not any(m.get("name", "").startswith(name) for m in topo.iter("object") if m.get("type") == "Misc"):
                bad.append("%s stays and is nowhere in the picture" % name)
            continue
        moved += 1
        got = by_busid.get(dev["guest_bdf"])
        if not got:
            bad.append("%s: no PCIDev at its guest BDF %s" % (name, dev["guest_bdf"]))
            continue
        d, anc = got
        obj, cell = locality(anc)
        if cell != dev["guest_cell"]:
            bad.append("%s at %s: under %s with NUMANode %s, planned cell %s" % (name, dev["guest_bdf"], obj.get("type") if obj is not None else None,
                                                                               cell, dev["guest_cell"]))
        hd = ids.get(dev.get("host")) if dev.get("host") else None
        if hd and not d.get("pci_type", "").startswith(pci_type(hd)):
            bad.append("%s: pci_type %r, host has %s" % (name, d.get("pci_type"), pci_type(hd)))
        if "host " + name not in osdev_names(d):
            bad.append("%s: no OS device naming its host BDF (%r)" % (name, osdev_names(d)))
    TAP.check(not bad and moved + stayed == len(plan["devices"]),
              "%s: hwloc places each of %d moved devices under its planned cell at its guest BDF with its host's IDs%s"
              % (case, moved, ", and %d staying ones outside the cells" % stayed if stayed else ""), "\n".join(bad))
    n_text = sum(1 for l in text.stdout.splitlines() if l.strip().startswith("PCI "))
    TAP.check(n_text == len(found) and len(found) >= moved, "%s: lstopo's text lists the %d PCI devices" % (case, len(found)),
              text.stdout[-2000:])


def check_host(host, work, trees):
    root = trees(host)
    p = run(ARGS.pcinumactl, "host", "--sysfs-root", root, "--format", "hwloc")
    out, text = lstopo(p.stdout, work, "host-" + host)
    ok = p.returncode == 0 and out.returncode == 0
    TAP.check(ok, "host %s: host --format hwloc, read by lstopo-no-graphics" % host, p.stderr + out.stderr)
    if not ok:
        return
    topo = ET.fromstring(out.stdout)
    found = []
    walk(topo, [], found)
    by_busid = {d.get("pci_busid"): (d, anc) for d, anc in found}
    info = json.loads(run(ARGS.pcinumactl, "host", "--sysfs-root", root, "--json").stdout)
    multi = len(info["nodes"]) > 1
    bad = []
    for dev in info["devices"]:
        got = by_busid.get(dev["bdf"])
        if not got:
            bad.append("%s missing" % dev["bdf"])
            continue
        d, anc = got
        obj, node = locality(anc)
        want = dev["node"] if dev["node"] >= 0 else None
        if multi and node != want:
            bad.append("%s: under NUMANode %s, its node is %s" % (dev["bdf"], node, dev["node"]))
        if not d.get("pci_type", "").startswith(pci_type(dev)):
            bad.append("%s: pci_type %r, want %s" % (dev["bdf"], d.get("pci_type"), pci_type(dev)))
    TAP.check(not bad and len(found) == len(info["devices"]),
              "host %s: each of %d devices at its BDF under its node, with its IDs" % (host, len(info["devices"])),
              "\n".join(bad[:20]))


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--lstopo", default=shutil.which("lstopo-no-graphics"))
    ARGS = ap.parse_args()
    if not ARGS.lstopo:
        print("1..0 # SKIP lstopo-no-graphics is not installed (Debian: hwloc-nox)")
        return 77
    work = tempfile.mkdtemp(prefix="pcinuma-hwloc-")
    made = {}

    def trees(host):
        if host not in made:
            made[host] = os.path.join(work, "sys-" + host)
            subprocess.run([sys.executable, ARGS.mkfakesysfs, os.path.join(ARGS.hosts, host + ".json"), made[host]],
                           check=True, stdout=subprocess.DEVNULL)
        return made[host]

    for case, host, extra in CASES:
        check_guest(case, host, extra, work, trees)
    for name in sorted(os.listdir(ARGS.hosts)):
        if name.endswith(".json"):
            check_host(name[:-5], work, trees)

    # A refused plan has no guest to draw; a bad format is named.
    root = trees("sample-4n")
    inp = os.path.join(ARGS.cases, "no-acpi-require", "input.xml")
    p = run(ARGS.pcinumactl, "plan", "--sysfs-root", root, "--policy", "require", "--format", "hwloc", inp)
    TAP.check(p.returncode == 1 and p.stdout == "" and "fix: add <acpi/> to <features>" in p.stderr,
              "a refused plan: exit 1, nothing on stdout, the refusal on stderr", "rc %d %r" % (p.returncode, p.stderr))
    p = run(ARGS.pcinumactl, "host", "--sysfs-root", root, "--format", "png")
    TAP.check(p.returncode == 2 and "unknown format 'png'" in p.stderr and p.stdout == "", "host --format png: exit 2 naming it",
              p.stderr)
    p = run(ARGS.pcinumactl, "plan", "--sysfs-root", root, "--format", "hwlocx", inp)
    TAP.check(p.returncode == 2 and "unknown format 'hwlocx'" in p.stderr, "plan --format hwlocx: exit 2 naming it", p.stderr)

    shutil.rmtree(work, ignore_errors=True)
    return TAP.finish_plan()


if __name__ == "__main__":
    sys.exit(main())

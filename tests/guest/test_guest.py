#!/usr/bin/env python3
"""Guest end-to-end suite (design.md §12 "Guest end-to-end").

    test_guest.py --pcinumactl PATH --mkfakesysfs PATH --hosts DIR \
                  --source DIR --workdir DIR [--boot-timeout S] [--filter X]
                  [--emulator PATH]

Boots a real Linux guest under TCG on the topology pcinuma plans, and checks,
in the guest's own words, that every passthrough device ends up on the NUMA
node the plan promised.

For each case:

  1. plan the domain with `pcinumactl plan --format json` and `--format xml`
     against a fixture host tree (tests/fixtures/hosts/*.json, or this
     suite's own tests/guest/hosts/*.json);
  2. swap each passthrough device (<hostdev>, <interface type='hostdev'>) for
     a virtio-rng or virtio-net stand-in (modern-only on a PCIe port: no I/O
     BAR) at the SAME guest address, with a user alias "ua-pcinuma-sN" so we
     can find it again in libvirt's dumpxml; keep the pxbs, ports, switches
     and the mark;
  3. make it bootable: the Debian kernel (/boot/vmlinuz-*, copied), a
     busybox-static initramfs built here, console=ttyS0 to a file serial,
     one vCPU and 64 MiB per guest cell, no <numatune>/<cputune> (they name
     the FIXTURE host's nodes and CPUs, which this machine does not have;
     they do not change what the guest sees);
  4. define and start it in a private session libvirtd (tests/libvirt/
     session.py), wait for the guest's report on the console, and check:
     each stand-in reports numa_node = its planned guest cell, and sits
     where libvirt's controllers put it (the same slot and function at
     every level below the host bridge pci0000:XX, XX the busNr of a pxb
     of that cell), its port holding no other device.

Cases: (a) sample-4n, conf/examples/gpu-vm-1.xml, policy require: 16 devices
on 4 cells, booted with virtio-net stand-ins and checked for paths too (see
below); (b) snc2, policy socket, one guest cell backed by node 0, the node-1
devices go there by the socket rule; (c) sample-4n, policy legacy, the NVMe
0000:01:00.0 without a NUMA node stays on pcie.0 and reports -1, the others
their cells; (d) control: (a)'s planned XML without <acpi/>: every stand-in
reports -1 (why the planner requires ACPI); (e) mirror_switches and
mirror_distances on sample-4n.

mmio64 in a UEFI guest (issue 25), case (h): eight GPUs with 64 GiB BARs
(tests/guest/hosts/guest-bar64.json) booted under Debian 12's OVMF as
ivshmem-plain stand-ins on sparse 64 GiB files at the plan's addresses;
with the built-in defaults every BAR is assigned, with "mmio64": "off" the
plan warns and some are not (run_mmio64_case()).

Path fidelity (issue 15), cases (a), (f) a p5-like host (switches, nested
switches, three root complexes per node: tests/guest/hosts/guest-p5.json)
and (g) a dual-socket host with dual-port NICs (guest-dualport.json), (f)
and (g) under the default policy:

  - each passthrough device becomes a virtio-net stand-in at its planned
    address, with a MAC that encodes its host BDF (mac_for());
  - the guest's /init loads virtio_net and its dependencies from the booted
    Debian kernel's own /lib/modules (copied into the initramfs) and reports
    each interface's MAC, resolved device path and numa_node: what NCCL reads;
  - pathtype.py turns the fixture host's sysfs and the guest's paths into
    `nvidia-smi topo -m` path types with one rule; the host and guest
    matrices are printed as diagnostics;
  - it asserts that every pair keeps its host type, that each device's
    predicted `guest_bdf` (plan JSON) is the BDF the guest gives it, and
    that the plan's own fidelity report says what the guest shows.

NCCL topology file (issue 16), in every path case whose plan gives one
(nccl_topology, on by default): the guest's /init loads qemu_fw_cfg and
prints the file from /sys/firmware/qemu_fw_cfg/by_name/; every busid in it
must be one of the guest's own PCI devices, each device element where the
stand-in of its host device is, with that host device's IDs, under the
<cpu> of the node the guest reports and nested as NCCL nests what it finds
in the guest's sysfs (check_nccl()).

PCINUMA_GUEST_PATHS=report turns those three assertions into reports (TAP
"# TODO" lines that do not fail the run), to measure a planner that is not
expected to pass them; the committed test runs without it and asserts.

--emulator names the domains' <emulator> (copied where the session
libvirtd can run it); the default is /usr/bin/qemu-system-x86_64.  The
second stack (tests/stack2/inside.sh) passes tests/stack2/qemu-tcg-single.sh,
QEMU 10.0.2 with single-threaded TCG, which does not abort while Linux
assigns the BARs (docs/install.md, "Tested versions").

The required tools are NOT optional here: a missing kernel, busybox-static,
cpio, qemu-system-x86_64, libvirtd, virsh or the kernel's virtio_net modules
is a failure (they are installed by scripts/install-deps.sh), never a skip.

Output (pcinumatest.tap.Tap): "ok N - ..." / "not ok N - ..." lines, "#"
diagnostics (the guest's own lines as "guest: ..."), final line "N passed,
M failed"; exit 1 on any failure, or when nothing passed.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))   # run by hand too
sys.path.insert(0, HERE)
import pathtype                 # noqa: E402  (tests/guest/pathtype.py)
from pcinumatest.guestvm import *  # noqa: E402,F401,F403
from pcinumatest.tap import Tap    # noqa: E402

# ---------------------------------------------------------------- domains
def hostdev_xml(bdf):
    d, b, sf = bdf.split(":")
    s, f = sf.split(".")
    return ("    <hostdev mode='subsystem' type='pci' managed='yes'><source>"
            "<address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>"
            "</source></hostdev>\n" % (d, b, s, f))


def hostdevs(bdfs):
    return "".join(hostdev_xml(b) for b in bdfs)


def domain_xml(name, cells, devices, memnodes=None, balloon="none",
               loader=None, cpu_extra=()):
    """A q35 domain under TCG as the cases write them: the guest NUMA
    cells (cells: (vcpus, MiB) each, numbered in order; the domain's
    vcpus and memory are their sums), their memory bound to host nodes
    (memnodes: (cell, node) pairs; by default cell i on node i), the
    <devices> lines (devices, after the <emulator>), the memballoon
    model, an OVMF loader and extra lines in <cpu> when given."""
    out = ["<domain type='qemu'>",
           "  <name>%s</name>" % name,
           "  <memory unit='MiB'>%d</memory>" % sum(mib for _n, mib in cells),
           "  <vcpu placement='static'>%d</vcpu>" % sum(n for n, _mib in cells)]
    if loader:
        out += ["  <os>",
                "    <type arch='x86_64' machine='q35'>hvm</type>",
                "    <loader readonly='yes' type='pflash'>%s</loader>" % loader,
                "  </os>"]
    else:
        out.append("  <os><type arch='x86_64' machine='q35'>hvm</type></os>")
    out += ["  <features><acpi/><apic/></features>",
            "  <cpu mode='custom' match='exact'>",
            "    <model fallback='allow'>qemu64</model>",
            "    <numa>"]
    first = 0
    for i, (n, mib) in enumerate(cells):
        cpus = "%d" % first if n == 1 else "%d-%d" % (first, first + n - 1)
        out.append("      <cell id='%d' cpus='%s' memory='%d' unit='MiB'/>" % (i, cpus, mib))
        first += n
    out.append("    </numa>")
    out += ["    " + line for line in cpu_extra]
    out += ["  </cpu>", "  <numatune>"]
    if memnodes is None:
        memnodes = [(i, i) for i in range(len(cells))]
    out += ["    <memnode cellid='%d' mode='strict' nodeset='%d'/>" % m for m in memnodes]
    out += ["  </numatune>",
            "  <devices>",
            "    <emulator>/usr/bin/qemu-system-x86_64</emulator>"]
    return ("\n".join(out) + "\n" + devices
            + "    <memballoon model='%s'/>\n  </devices>\n</domain>\n" % balloon)


# (b) SNC2, one socket with nodes 0 and 1; the guest has two cells but only
# cell 1 is backed (by host node 0).  Under `socket` the node-0 devices go to
# cell 1 as local, the node-1 devices as "same socket, nearest".
CASE_B_XML = domain_xml("guest-b", [(2, 128), (2, 128)],
                        hostdevs(("0000:21:00.0", "0000:22:00.0", "0000:41:00.0", "0000:42:00.0")),
                        memnodes=[(1, 0)], balloon="virtio")

# (c) legacy: an NVMe with no NUMA node (stays on pcie.0) beside one local
# device per node, one of them an <interface type='hostdev'>.
CASE_C_XML = domain_xml("guest-c", [(4, 256)] * 4,
                        hostdevs(("0000:01:00.0", "0000:13:00.0"))
                        + """    <interface type='hostdev' managed='yes'>
      <mac address='52:54:00:00:38:00'/>
      <source><address type='pci' domain='0x0000' bus='0x38' slot='0x00' function='0x0'/></source>
    </interface>
"""
                        + hostdevs(("0000:54:00.0", "0000:77:00.0")),
                        balloon="virtio")


class Case:
    """policy None: the default policy (no --policy).  standin 'net': the
    stand-ins are virtio-net and the case also checks path fidelity."""

    def __init__(self, key, title, host, policy, input_path=None,
                 input_text=None, control_of=None, standin="rng"):
        self.key = key
        self.title = title
        self.host = host
        self.policy = policy
        self.input_path = input_path
        self.input_text = input_text
        self.control_of = control_of      # a Case: boot its plan without ACPI
        self.standin = standin
        self.plan_xml = None
        self.plan = None


# ---------------------------------------------------------------- planning
def plan_case(tap, args, case, hosts_built):
    """pcinumactl plan (json and xml); fills case.plan / case.plan_xml."""
    sysroot = hosts_built[case.host]
    path = case.input_path
    if path is None:
        path = os.path.join(args.workdir, "%s-input.xml" % case.key)
        with open(path, "w") as f:
            f.write(case.input_text)
    base = [args.pcinumactl, "plan", "--sysfs-root", sysroot]
    if getattr(case, "policy_json", None):
        pol = os.path.join(args.workdir, "%s-policy.json" % case.key)
        with open(pol, "w") as f:
            f.write(case.policy_json)
        base += ["--policy-file", pol]
    elif case.policy:
        base += ["--policy", case.policy]
    rj = run(base + ["--format", "json", path])
    rx = run(base + [path])
    good = rj.returncode == 0 and rx.returncode == 0
    plan = None
    err = ""
    if good:
        try:
            plan = json.loads(rj.stdout)
        except ValueError as e:
            good = False
            err = "bad JSON: %s\n" % e
    if good and plan.get("verdict") != "apply":
        good = False
    tap.ok(good, "%s: pcinumactl plan --policy %s on host %s: verdict apply"
           % (case.key, case.policy or "(default)", case.host),
           "%sexit %s/%s\n%s%s%s" % (err, rj.returncode, rx.returncode,
                                     rj.stderr, rx.stderr, rj.stdout[:2000]))
    if not good:
        raise Fatal("planning failed")
    case.plan = plan
    case.plan_xml = rx.stdout
    with open(os.path.join(args.workdir, "%s-planned.xml" % case.key), "w") as f:
        f.write(rx.stdout)
    for e in sorted(plan.get("expanders", []),
                    key=lambda e: (e["guest_cell"], e["controller"])):
        tap.diag("plan: pxb controller %d at %s: guest cell %d, busNr %d "
                 "(guest host bridge pci0000:%02x), %d root ports%s"
                 % (e["controller"], e["address"], e["guest_cell"],
                    e["busNr"], e["busNr"], e["root_ports"],
                    ", for host %s" % e["host_root_complex"]
                    if e.get("host_root_complex") else ""))
    for d in plan["devices"]:
        tap.diag("plan: host %s (%s, host node %s) -> %s"
                 % (d["host"], d.get("class_name"), d.get("host_node"),
                    "guest cell %s, guest address %s (port %s)%s"
                    % (d["guest_cell"], d["guest_address"], d["controller"],
                       ", predicted guest BDF %s" % d["guest_bdf"]
                       if d.get("guest_bdf") else "")
                    if d["action"] == "move" else
                    "%s: %s" % (d["action"], d.get("reason"))))


def check_case(tap, case, guest_devs, lines, loc, standins, acpi):
    """The assertions on one booted guest: each stand-in where the plan put
    it, on its cell.  Works for both shapes of plan: one pxb per cell with a
    root port per device, and the path mirror (several pxbs per cell,
    switches, functions of one device on one port)."""
    key = case.key
    plan = (case.control_of or case).plan
    expanders = plan.get("expanders", [])
    busnrs_of_cell = {}
    for e in expanders:
        busnrs_of_cell.setdefault(e["guest_cell"], set()).add(e["busNr"])
    pdev = {d["host"]: d for d in plan["devices"]}
    want_id = NET_ID if case.standin == "net" else STANDIN_ID
    children = {}
    for d in guest_devs:
        if d["parent"]:
            children.setdefault(d["parent"], []).append(d["bdf"])

    # the guest's own words first
    for ln in lines:
        tap.diag("guest: " + ln[3:] if ln.startswith("@@ ") else "guest: " + ln)

    n_standin_guest = sum(1 for d in guest_devs if d["id"] == want_id)
    tap.ok(n_standin_guest == len(standins),
           "%s: the guest sees %d %s stand-ins (%s)"
           % (key, len(standins), case.standin, want_id),
           "guest shows %d" % n_standin_guest)

    found = {}
    for alias, _host, _planned in standins:
        g = find_guest_device(guest_devs, loc.get(alias, {}))
        if len(g) == 1:
            found[alias] = g[0]
    placed = {g["bdf"] for g in found.values()}

    for alias, host, planned in standins:
        d = pdev.get(host, {})
        moved = d.get("action") == "move"
        cell = d.get("guest_cell") if moved else None
        want_numa = str(cell) if (moved and acpi) else "-1"
        where = loc.get(alias, {})
        problems = []
        if where.get("why"):
            problems.append("libvirt: " + where["why"])
        if moved:
            if where.get("pxb_node") != cell:
                problems.append("its pxb has <node>%s</node>, planned cell "
                                "%s" % (where.get("pxb_node"), cell))
            if where.get("pxb_busnr") not in busnrs_of_cell.get(cell, ()):
                problems.append("its pxb has busNr %s; the plan's pxbs for "
                                "cell %s have %s"
                                % (where.get("pxb_busnr"), cell,
                                   sorted(busnrs_of_cell.get(cell, ()))))
            if planned != d.get("guest_address"):
                problems.append("stand-in address %s != planned guest address "
                                "%s" % (planned, d.get("guest_address")))
            if where.get("address") != planned:
                problems.append("libvirt moved it: %s -> %s"
                                % (planned, where.get("address")))
        else:
            if where.get("hostbridge") != "pci0000:00":
                problems.append("a device the plan leaves on pcie.0 is under "
                                "%s" % where.get("hostbridge"))
        g = found.get(alias)
        if not where.get("why"):
            n = len(find_guest_device(guest_devs, where))
            if n != 1:
                problems.append("the guest shows %d devices at slot/function "
                                "path %s under %s" % (n, where.get("hops"),
                                                      where.get("hostbridge")))
        if g is not None:
            if g["id"] != want_id:
                problems.append("the device there is %s, not the stand-in %s"
                                % (g["id"], want_id))
            # its port holds the stand-ins the XML puts there, nothing else
            others = [c for c in children.get(g["parent"], [])
                      if c not in placed]
            if others:
                problems.append("its port %s also holds %s"
                                % (g["parent"], ", ".join(others)))
            parent = [x for x in guest_devs if x["bdf"] == g["parent"]]
            if not parent or not parent[0]["class"].startswith("0x0604"):
                problems.append("its parent %s is not a PCI bridge in the "
                                "guest" % g["parent"])
            if g["numa"] != want_numa:
                problems.append("guest numa_node %s, want %s"
                                % (g["numa"], want_numa))
        gpath = " > ".join(g["chain"][:-1]) if g else "?"
        if moved:
            what = ("host %s (host node %s) -> planned cell %s: guest %s "
                    "numa_node=%s, behind %s (pxb busNr %s)"
                    % (host, d.get("host_node"), cell,
                       g["bdf"] if g else "?", g["numa"] if g else "?",
                       gpath, where.get("pxb_busnr")))
        else:
            what = ("host %s (no host node, stays on pcie.0): guest %s "
                    "numa_node=%s behind %s"
                    % (host, g["bdf"] if g else "?", g["numa"] if g else "?",
                       gpath))
        if not acpi:
            what += " (no ACPI: want -1)"
        tap.ok(not problems, "%s: %s" % (key, what), "\n".join(problems))

    # every device under a pxb host bridge reports that pxb's node
    if acpi:
        want = {"pci0000:%02x" % e["busNr"]: str(e["guest_cell"])
                for e in expanders}
        bad = ["%s under %s numa_node=%s (want %s)"
               % (x["bdf"], x["hostbridge"], x["numa"], want[x["hostbridge"]])
               for x in guest_devs if x["hostbridge"] in want
               and x["numa"] != want[x["hostbridge"]]]
        missing = sorted(set(want) - {x["hostbridge"] for x in guest_devs})
        tap.ok(not bad and not missing,
               "%s: every device (ports too) under each pxb host bridge "
               "reports that pxb's cell; host bridges %s"
               % (key, ", ".join("%s=cell %s" % kv for kv in sorted(want.items()))),
               "\n".join(bad + ["no device under %s" % m for m in missing]))
        ncells = len(plan.get("cells", []))
        nodes = [ln for ln in lines if ln.startswith("@@ node ")]
        tap.ok(len(nodes) == ncells,
               "%s: the guest sees %d NUMA nodes (one per cell)" % (key, ncells),
               "guest node lines: %d" % len(nodes))
    else:
        bad = ["%s numa_node=%s" % (x["bdf"], x["numa"])
               for x in guest_devs if x["numa"] != "-1"]
        tap.ok(not bad, "%s: without ACPI every PCI device in the guest "
               "reports numa_node -1" % key, "\n".join(bad))


# ---------------------------------------------------------------- paths
NET_RE = re.compile(r"@@ net (\S+) address=(\S+) numa_node=(\S+) path=(\S+)$")


def check_oracle(tap, hosts_built):
    """pathtype's rule on the fixture hosts, where the fixtures' own
    descriptions say what each pair is: every type occurs, so a rule that
    never says (say) NODE cannot pass the path checks by accident."""
    known = [("sample-4n", "0000:13:00.0", "0000:14:00.0", "PIX"),
             ("sample-4n", "0000:13:00.0", "0000:17:00.0", "PHB"),
             ("sample-4n", "0000:13:00.0", "0000:33:00.0", "SYS"),
             ("guest-p5", "0000:19:00.0", "0000:1b:00.0", "PIX"),
             ("guest-p5", "0000:19:00.0", "0000:1e:00.0", "PXB"),
             ("guest-p5", "0000:5b:00.0", "0000:5c:00.0", "PHB"),
             ("guest-p5", "0000:19:00.0", "0000:3b:00.0", "NODE"),
             ("guest-p5", "0000:1e:00.0", "0000:9f:00.0", "SYS"),
             ("guest-dualport", "0000:3b:00.0", "0000:3b:00.1", "PIX"),
             ("guest-dualport", "0000:b1:00.0", "0000:b2:00.1", "PIX"),
             ("guest-dualport", "0000:3b:00.0", "0000:3c:00.0", "PHB")]
    bad = []
    for host, a, b, want in known:
        try:
            got = pathtype.path_type(pathtype.read_end(hosts_built[host], a),
                                     pathtype.read_end(hosts_built[host], b))
        except ValueError as e:
            got = "error: %s" % e
        if got != want:
            bad.append("%s %s <-> %s: %s, the fixture says %s"
                       % (host, a, b, got, want))
    tap.ok(not bad, "path-type rule (tests/guest/pathtype.py) reads %d "
           "fixture pairs as their descriptions say (PIX, PXB, PHB, NODE, "
           "SYS)" % len(known), "\n".join(bad))


def check_paths(tap, args, case, host_root, lines, standins):
    """Path fidelity in the guest's own words: each stand-in found by its
    MAC, its path and node as NCCL reads them, every pair's type against
    the host's, the predicted guest BDFs, the plan's fidelity report."""
    key = case.key
    todo = args.paths_todo
    plan = case.plan
    pdev = {d["host"]: d for d in plan["devices"]}

    rcs = []
    for ln in lines:
        m = re.match(r"@@ insmod (\S+) rc=(\S+)$", ln)
        if m:
            rcs.append((m.group(1), m.group(2)))
    if not tap.ok([n for n, _rc in rcs] == NET_MODULES
                  and all(rc == "0" for _n, rc in rcs),
                  "%s: the guest loaded %s from the booted kernel's own "
                  "modules" % (key, ", ".join(NET_MODULES)),
                  "insmod results: %s" % (rcs or "none")):
        return

    net = {}
    dup = []
    strangers = []
    for ln in lines:
        m = NET_RE.match(ln)
        if not m:
            continue
        ifname, mac, numa, path = m.groups()
        host = bdf_for_mac(mac)
        if host is None:
            strangers.append("%s %s" % (ifname, mac))
            continue
        if host in net:
            dup.append(host)
        try:
            node = int(numa)
        except ValueError:
            node = -1
        net[host] = {"ifname": ifname, "mac": mac, "numa": node,
                     "path": pathtype.pci_path(path)}
    hosts = [h for _a, h, _p in standins]
    missing = [h for h in hosts if h not in net]
    extra = sorted(set(net) - set(hosts))
    if not tap.ok(not missing and not dup and not extra and not strangers,
                  "%s: each of the %d stand-ins is one guest interface whose "
                  "MAC names its host device" % (key, len(hosts)),
                  "\n".join(["no interface with the MAC of %s (%s)"
                             % (h, mac_for(h)) for h in missing]
                            + ["two interfaces for %s" % h for h in dup]
                            + ["an interface for %s, no such stand-in" % h
                               for h in extra]
                            + ["an interface with a foreign MAC: %s" % x
                               for x in strangers])):
        return

    hend = {h: pathtype.read_end(host_root, h) for h in hosts}
    gend = {h: (pathtype.chain_of(net[h]["path"]), net[h]["numa"])
            for h in hosts}
    tap.diag("%s: devices (host path and node -> guest interface, path "
             "and node, as NCCL reads them):" % key)
    for i, h in enumerate(hosts):
        tap.diag("  d%-2d %s [%s] node %d -> %s %s %s [%s] node %d"
                 % (i, h, " > ".join(hend[h][0][:-1]), hend[h][1],
                    net[h]["ifname"], net[h]["mac"], gend[h][0][-1],
                    " > ".join(gend[h][0][:-1]), gend[h][1]))
    ht, gt = {}, {}
    for i, a in enumerate(hosts):
        for j, b in enumerate(hosts):
            if i != j:
                ht[(i, j)] = pathtype.path_type(hend[a], hend[b])
                gt[(i, j)] = pathtype.path_type(gend[a], gend[b])
    labels = ["d%d %s" % (i, h) for i, h in enumerate(hosts)]
    tap.diag("%s: host path types (fixture sysfs %s):" % (key, case.host))
    tap.diag(pathtype.matrix(labels, ht))
    tap.diag("%s: guest path types (the booted guest's /sys):" % key)
    tap.diag(pathtype.matrix(labels, gt))

    counts = {"same": 0, "closer": 0, "farther": 0}
    diffs = []
    pairs = []
    for i in range(len(hosts)):
        for j in range(i + 1, len(hosts)):
            v = pathtype.compare(ht[(i, j)], gt[(i, j)])
            counts[v] += 1
            pairs.append((hosts[i], hosts[j], ht[(i, j)], gt[(i, j)], v))
            if v != "same":
                diffs.append("d%d %s <-> d%d %s: host %s, guest %s (%s)"
                             % (i, hosts[i], j, hosts[j], ht[(i, j)],
                                gt[(i, j)], v))
    with open(os.path.join(args.workdir, "%s-paths.json" % key), "w") as f:
        json.dump({"host": case.host, "counts": counts,
                   "pairs": [dict(zip(("a", "b", "host", "guest", "fidelity"),
                                      p)) for p in pairs]}, f, indent=1)
    tap.diag("%s: %d pairs: %d same, %d closer, %d farther"
             % (key, len(pairs), counts["same"], counts["closer"],
                counts["farther"]))
    tap.ok(not diffs,
           "%s: every one of the %d device pairs keeps its host path type in "
           "the guest (%d same, %d closer, %d farther)"
           % (key, len(pairs), counts["same"], counts["closer"],
              counts["farther"]), "\n".join(diffs), todo=todo)

    bad = []
    for h in hosts:
        want = pdev.get(h, {}).get("guest_bdf")
        got = gend[h][0][-1]
        if want is None:
            bad.append("%s: the plan predicts no guest_bdf; the guest gives "
                       "it %s" % (h, got))
        elif want != got:
            bad.append("%s: the plan's guest_bdf is %s; the guest gives it %s"
                       % (h, want, got))
    tap.ok(not bad, "%s: the plan's guest_bdf of each of the %d devices is "
           "the BDF the guest gives it" % (key, len(hosts)), "\n".join(bad),
           todo=todo)

    fid = plan.get("fidelity")
    problems = []
    if not isinstance(fid, dict) or not isinstance(fid.get("pairs"), list):
        problems.append("the plan JSON has no fidelity report")
    else:
        theirs = {}
        for q in fid["pairs"]:
            theirs[frozenset((q.get("a"), q.get("b")))] = q
        for a, b, h, g, _v in pairs:
            q = theirs.get(frozenset((a, b)))
            if q is None:
                problems.append("%s <-> %s: not in the report" % (a, b))
                continue
            if q.get("host") != h or q.get("guest") != g:
                problems.append("%s <-> %s: the report says host %s, guest "
                                "%s; the host says %s, the guest %s"
                                % (a, b, q.get("host"), q.get("guest"), h, g))
        if len(fid["pairs"]) != len(pairs):
            problems.append("the report has %d pairs, the guest %d"
                            % (len(fid["pairs"]), len(pairs)))
        for k in counts:
            if fid.get(k) != counts[k]:
                problems.append("the report counts %s %s, the guest %d"
                                % (k, fid.get(k), counts[k]))
    tap.ok(not problems, "%s: the plan's fidelity report is what the fixture "
           "host and the booted guest show (%s)"
           % (key, ", ".join("%s %s" % (k, fid.get(k)) for k in counts)
                   if isinstance(fid, dict) else "no report"),
           "\n".join(problems), todo=todo)

    check_nccl(tap, case, host_root, lines, hosts, gend)


def check_nccl(tap, case, host_root, lines, hosts, gend):
    """The NCCL topology file pcinuma gives the guest (nccl_topology, on by
    default), read back inside the guest from fw_cfg: every busid in it is
    one of the guest's own PCI devices; each device element sits where the
    stand-in of its host device is, with that host device's IDs, under the
    <cpu> of the node the guest reports and under the bridge NCCL would
    pick from the guest's own path (two levels up)."""
    key = case.key
    if "opt/org.pcinuma/nccl-topo.xml" not in case.plan_xml:
        return
    text = None
    for ln in lines:
        if ln.startswith("@@ nccl "):
            text = ln[len("@@ nccl "):]
        elif ln == "@@ nccl-missing":
            text = ""
    if not tap.ok(bool(text), "%s: the guest reads the NCCL topology file at %s"
                  % (key, NCCL_FWCFG), "not reported" if text is None else "missing or empty in the guest"):
        return
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        tap.ok(False, "%s: the guest's NCCL topology file is XML" % key, str(e)[:300])
        return
    placed = {}
    def walk(el, parent, cpu):
        for k in el:
            if k.tag == "cpu":
                walk(k, "cpu", k.get("numaid"))
            elif k.tag == "pci":
                placed[k.get("busid")] = (parent, cpu, dict(k.attrib))
                walk(k, k.get("busid"), cpu)
    walk(root, None, None)
    guest_pci = set()
    for ln in lines:
        m = REPORT_RE.match(ln)
        if m:
            guest_pci.add(m.group(1))
    by_busid = {gend[h][0][-1]: h for h in hosts}
    problems = []
    for b in sorted(set(placed) - guest_pci):
        problems.append("busid %s is not a PCI device of the guest" % b)
    leaves = [b for b, (_p, _c, a) in placed.items() if not a.get("class", "").startswith("0x0604")]
    for b in sorted(leaves):
        h = by_busid.get(b)
        if h is None:
            problems.append("device %s: no stand-in there in the guest" % b)
            continue
        parent, cpu, attrs = placed[b]
        want = {}
        for f in ("vendor", "device"):
            try:
                with open(os.path.join(host_root, "bus/pci/devices", h, f)) as fh:
                    want[f] = fh.read().strip()
            except OSError:
                want[f] = None
        if attrs.get("vendor") != want["vendor"] or attrs.get("device") != want["device"]:
            problems.append("%s (stand-in for host %s): IDs %s:%s, the host device has %s:%s"
                            % (b, h, attrs.get("vendor"), attrs.get("device"), want["vendor"], want["device"]))
        chain, node = gend[h]
        if str(node) != cpu:
            problems.append("%s (host %s): under <cpu numaid=%s>, the guest reports node %s" % (b, h, cpu, node))
        k = len(chain) - 1
        cur = b
        while True:
            want_parent = chain[k - 2] if k - 2 >= 1 else "cpu"
            got = placed.get(cur, (None,))[0]
            if got != want_parent:
                problems.append("%s: nested under %s, NCCL would put it under %s (guest path %s)"
                                % (cur, got, want_parent, "/".join(chain)))
                break
            if want_parent == "cpu":
                break
            cur, k = want_parent, k - 2
    missing = [h for h in hosts if gend[h][0][-1] not in placed and nccl_wanted(host_root, h)]
    for h in missing:
        problems.append("host %s (a GPU or RDMA NIC) is not in the file" % h)
    tap.ok(not problems, "%s: every busid of the guest's NCCL topology file is one of its own PCI "
           "devices, each device where its stand-in is, with its host IDs, node and NCCL's nesting "
           "(%d elements, %d devices)" % (key, len(placed), len(leaves)), "\n".join(problems))


def nccl_wanted(host_root, h):
    """A GPU or RDMA NIC, by lib/core/nccltopo.h's rule."""
    try:
        with open(os.path.join(host_root, "bus/pci/devices", h, "class")) as f:
            cls = int(f.read().strip(), 16) >> 8
        with open(os.path.join(host_root, "bus/pci/devices", h, "vendor")) as f:
            ven = int(f.read().strip(), 16)
    except (OSError, ValueError):
        return False
    return cls in (0x0300, 0x0302, 0x0207) or (cls == 0x0200 and ven in (0x15b3, 0x1d0f))


def two_cell_domain(name, bdfs):
    """A q35 domain with two guest cells backed by host nodes 0 and 1 and
    the host devices bdfs."""
    return domain_xml(name, [(4, 256), (4, 256)], hostdevs(bdfs))


# (f) p5-like: 16 devices on six host root complexes, with switches and a
# nested switch.  (g) dual-socket, the two ports of each dual-port NIC.
P5_DEVICES = ["0000:%02x:00.0" % b for b in (
    0x19, 0x1a, 0x1b, 0x1e, 0x3b, 0x3c, 0x5b, 0x5c,
    0x9a, 0x9b, 0x9c, 0x9f, 0xbb, 0xbc, 0xdb, 0xdc)]
DUALPORT_DEVICES = ["0000:3b:00.0", "0000:3b:00.1", "0000:3c:00.0",
                    "0000:b1:00.0", "0000:b2:00.0", "0000:b2:00.1"]


# ---------------------------------------------------------------- main
def run_case(tap, args, sess, case, hosts_built, kernel, initrd):
    control = case.control_of is not None
    if control:
        src = case.control_of
        if src.plan_xml is None:
            tap.ok(False, "%s: control needs the plan of %s" % (case.key,
                                                               src.key))
            return
        plan_xml = src.plan_xml
        # the planner itself refuses this domain under require: it checks ACPI
        noacpi = os.path.join(args.workdir, "%s-noacpi-input.xml" % case.key)
        with open(src.input_path) as f:
            text = f.read()
        with open(noacpi, "w") as f:
            f.write(re.sub(r"<acpi\s*/>", "", text))
        r = run([args.pcinumactl, "plan", "--sysfs-root",
                 hosts_built[src.host], "--policy", src.policy, noacpi])
        tap.ok(r.returncode == 1 and "acpi" in r.stderr.lower(),
               "%s: pcinumactl refuses %s's domain without <acpi/> under %s "
               "(exit 1, says why)" % (case.key, src.key, src.policy),
               "exit %d: %s" % (r.returncode, r.stderr.strip()))
        for ln in r.stderr.strip().splitlines():
            tap.diag("pcinumactl: " + ln)
    else:
        plan_case(tap, args, case, hosts_built)
        plan_xml = case.plan_xml
    name = "pcinuma-guest-%s" % case.key
    console = os.path.join(sess.files, "%s.console" % name)
    try:
        os.unlink(console)
    except OSError:
        pass
    xml, standins = boot_xml(case, plan_xml, name, kernel, initrd, console,
                             acpi=not control, standin=case.standin,
                             emulator=args.emulator_path)
    with open(os.path.join(args.workdir, "%s-boot.xml" % case.key), "w") as f:
        f.write(xml)
    pdev = {d["host"]: d for d in (case.control_of or case).plan["devices"]}
    mapping = []
    for alias, host, planned in standins:
        cell = pdev.get(host, {}).get("guest_cell")
        tap.diag("stand-in %s: virtio-%s%s at guest address %s for host "
                 "%s, planned guest cell %s"
                 % (alias, case.standin,
                    " " + mac_for(host) if case.standin == "net" else "",
                    planned or "(none: libvirt assigns one on pcie.0)",
                    host, "none (stays)" if cell is None else cell))
        mapping.append({"alias": alias, "guest_address": planned,
                        "host": host, "guest_cell": cell})
    with open(os.path.join(args.workdir, "%s-mapping.json" % case.key),
              "w") as f:
        json.dump(mapping, f, indent=1)
    g = Guest(sess, name, xml, console, args.boot_timeout)
    try:
        try:
            dump = g.define()
        except Fatal as e:
            tap.ok(False, "%s: virsh define of the boot XML" % case.key, str(e))
            return
        with open(os.path.join(args.workdir, "%s-dump.xml" % case.key), "w") as f:
            f.write(dump)
        loc = locate(dump, standins)
        try:
            booted = g.start_and_wait()
        except Fatal as e:
            tap.ok(False, "%s: virsh start" % case.key, str(e))
            return
        with open(os.path.join(args.workdir, "%s.console" % case.key), "w") as f:
            f.write(g.console_text)
        devs, lines = parse_report(g.console_text)
        tap.ok(booted and devs,
               "%s: guest booted under TCG and reported %d PCI devices%s"
               % (case.key, len(devs),
                  " in %.1f s" % g.boot_s if g.boot_s else ""),
               "no report within %ds (domain state %s)\n%s\n%s"
               % (args.boot_timeout, g.state, console_tail(g.console_text),
                  g.qemu_log_tail()))
        if not (booted and devs):
            return
        tap.diag("%s: boot to report: %.1f s" % (case.key, g.boot_s))
        check_case(tap, case, devs, lines, loc, standins, acpi=not control)
        if case.standin == "net":
            check_paths(tap, args, case, hosts_built[case.host], lines,
                        standins)
        g.wait_shutoff(5)
    finally:
        g.cleanup()

KEYBOARD_ID = "1af4:1052"       # virtio-input, modern


def run_switch_case(tap, args, sess, hosts_built, kernel, initrd):
    """(e) mirror_switches and mirror_distances, in the guest's own words:
    the sample VM planned with mirror_switches; each host GPU+NIC pair
    shares a host PCIe switch, so in the guest the pair must share an
    upstream bridge.  The GPU stand-ins are virtio-rng and the NIC
    stand-ins virtio keyboards, so the guest can tell them apart.  The
    guest's node distances must be the host's SLIT, not libvirt's 10/20."""
    case = Case("e", "mirror_switches + mirror_distances", "sample-4n", "require",
                input_path=os.path.join(args.source, "conf", "examples", "gpu-vm-1.xml"))
    case.policy_json = '{"default": {"policy": "require", "mirror_switches": true, "mirror_distances": true}}'
    plan_case(tap, args, case, hosts_built)
    name = "pcinuma-guest-e"
    console = os.path.join(sess.files, "%s.console" % name)
    try:
        os.unlink(console)
    except OSError:
        pass
    xml, standins = boot_xml(case, case.plan_xml, name, kernel, initrd, console,
                             emulator=args.emulator_path)
    pdev = {d["host"]: d for d in case.plan["devices"]}
    # NIC stand-ins become virtio keyboards at the same address.
    root = ET.fromstring(xml)
    devs_el = root.find("devices")
    kinds = {}
    for rng in list(devs_el.findall("rng")):
        alias = rng.find("alias").get("name")
        host = next(h for a, h, _p in standins if a == alias)
        is_nic = (pdev.get(host, {}).get("class") or "").startswith("0x02")
        kinds[host] = "nic" if is_nic else "gpu"
        if not is_nic:
            continue
        kb = ET.Element("input", type="keyboard", bus="virtio")
        kb.append(rng.find("alias"))
        kb.append(rng.find("address"))
        kb.tail = rng.tail
        i = list(devs_el).index(rng)
        devs_el.remove(rng)
        devs_el.insert(i, kb)
    xml = ET.tostring(root, encoding="unicode")
    with open(os.path.join(args.workdir, "e-boot.xml"), "w") as f:
        f.write(xml)
    groups = {}
    for d in case.plan["devices"]:
        tap.diag("plan: %s %s -> cell %s, %s" % (kinds.get(d["host"]), d["host"], d["guest_cell"], d.get("reason")))
    g = Guest(sess, name, xml, console, args.boot_timeout)
    try:
        try:
            g.define()
            booted = g.start_and_wait()
        except Fatal as e:
            tap.ok(False, "e: define and start", str(e))
            return
        devs, lines = parse_report(g.console_text)
        for ln in lines:
            tap.diag("guest: " + (ln[3:] if ln.startswith("@@ ") else ln))
        if not tap.ok(booted and devs, "e: guest booted and reported %d PCI devices" % len(devs),
                      console_tail(g.console_text) + "\n" + g.qemu_log_tail()):
            return
        expanders = {"pci0000:%02x" % e["busNr"]: e["guest_cell"] for e in case.plan["expanders"]}
        # group the stand-ins by the upstream bridge they sit behind:
        # chain = [pci0000:XX, root port, upstream port, downstream port, device]
        for d in devs:
            if d["id"] not in (STANDIN_ID, KEYBOARD_ID):
                continue
            if len(d["chain"]) != 5 or d["hostbridge"] not in expanders:
                groups.setdefault(("not behind a switch under a pxb", d["bdf"]), []).append(d)
                continue
            groups.setdefault((d["hostbridge"], d["chain"][2]), []).append(d)
        n_pairs = sum(1 for k, v in groups.items() if k[0] in expanders and len(v) == 2 and
                      {x["id"] for x in v} == {STANDIN_ID, KEYBOARD_ID})
        bad = ["%s: %s" % (k, [x["bdf"] + "=" + x["id"] for x in v]) for k, v in groups.items()
               if not (k[0] in expanders and len(v) == 2 and {x["id"] for x in v} == {STANDIN_ID, KEYBOARD_ID})]
        tap.ok(n_pairs == 8 and not bad,
               "e: each of the 8 host GPU+NIC switch pairs shares one upstream bridge in the guest "
               "(a GPU stand-in and a NIC stand-in behind each guest switch; %d pairs seen)" % n_pairs,
               "\n".join(bad))
        wrong = ["%s under %s numa_node=%s, want %s" % (x["bdf"], x["hostbridge"], x["numa"], expanders[x["hostbridge"]])
                 for v in groups.values() for x in v
                 if x["hostbridge"] in expanders and x["numa"] != str(expanders[x["hostbridge"]])]
        tap.ok(not wrong, "e: every stand-in behind a guest switch reports its pxb's cell", "\n".join(wrong))
        # distances: the planned XML's <distances> are the host's SLIT
        want = {}
        proot = ET.fromstring(case.plan_xml)
        for c in proot.findall("cpu/numa/cell"):
            want[int(c.get("id"))] = [int(s.get("value")) for s in sorted(c.findall("distances/sibling"),
                                                                          key=lambda s: int(s.get("id")))]
        got = {}
        for ln in lines:
            m = re.match(r"@@ node node(\d+) cpulist=\S* distance=(.*)$", ln)
            if m:
                got[int(m.group(1))] = [int(x) for x in m.group(2).split()]
        host_rows = {0: [10, 12, 32, 32], 1: [12, 10, 32, 32], 2: [32, 32, 10, 12], 3: [32, 32, 12, 10]}
        tap.ok(want == host_rows, "e: the plan copies the sample host's SLIT into <distances>", "plan: %s" % want)
        tap.ok(got == host_rows,
               "e: the guest's /sys/devices/system/node/node*/distance are the host's SLIT "
               "(%s), not libvirt's default 10/20" % "; ".join(" ".join(map(str, host_rows[i])) for i in sorted(host_rows)),
               "guest: %s" % got)
    finally:
        g.cleanup()


# (h) mmio64 in a booted UEFI guest (issue 25): eight GPUs with a 64 GiB
# BAR each (tests/guest/hosts/guest-bar64.json), booted as ivshmem-plain
# stand-ins, each on a sparse 64 GiB memory-backend-file (/dev/shm), at
# the plan's guest addresses behind the pxb-pcie root ports, under Debian
# 12's OVMF.  The guest has 42 physical address bits (<maxphysaddr>, as a
# GPU VM needs: with QEMU's default 40 the plan could give it at most a
# 512 GiB window, and warns).  With the built-in defaults (mmio64 auto) the
# plan sets <pcihole64> and OVMF's X-PciMmio64Mb and every BAR is assigned; with
# "mmio64": "off" the plan warns with the figures and OVMF leaves BARs
# unassigned (the kernel says "no space").
BAR64_GPUS = ["0000:%02x:00.0" % b for b in (0x11, 0x12, 0x13, 0x14, 0x91, 0x92, 0x93, 0x94)]
BAR64_GIB = 64
OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.fd"
MMIO64_CELL_MIB = 128           # OVMF wants more than the other cases' 64
CASE_H_XML = domain_xml("guest-h", [(1, 256), (1, 256)], hostdevs(BAR64_GPUS),
                        loader=OVMF_CODE,
                        cpu_extra=("<feature policy='require' name='pdpe1gb'/>",
                                   "<maxphysaddr mode='emulate' bits='42'/>"))


def bar_start(res_line, bar):
    """The start address of BAR 'bar' in a '@@ res' line (the sysfs
    resource file: start, end and flags per line, BAR 0 first)."""
    v = res_line.split()
    return int(v[3 + 3 * bar], 16) if len(v) >= 6 + 3 * bar else None


def run_mmio64_case(tap, args, sess, hosts_built, kernel, initrd):
    for path in (OVMF_CODE, OVMF_VARS):
        if not tap.ok(os.path.exists(path), "h: %s (package ovmf, scripts/install-deps.sh)" % path):
            return
    prefix = "pcinuma-h%d" % os.getpid()
    for key, policy_json, auto in (("h", "{}", True), ("h-off", '{"default": {"mmio64": "off"}}', False)):
        case = Case(key, "mmio64 %s: 8 x %d GiB BARs under OVMF" % ("auto (the default)" if auto else "off", BAR64_GIB),
                    "guest-bar64", None, input_text=CASE_H_XML, standin="ivshmem")
        case.policy_json = policy_json
        tap.diag("---- case %s: %s (policy file %s) ----" % (key, case.title, policy_json))
        plan_case(tap, args, case, hosts_built)
        feat = case.plan.get("features", {})
        need = feat.get("mmio64_need_bytes")
        fwcfg = re.findall(r"name=opt/ovmf/X-PciMmio64Mb,string=(\d+)", case.plan_xml)
        hole = re.findall(r"<pcihole64 unit=\"KiB\">(\d+)</pcihole64>", case.plan_xml)
        warned = [w for w in case.plan.get("warnings", []) if w.startswith("64-bit MMIO:")]
        if auto:
            tap.ok(need == 9 * BAR64_GIB << 30 and hole == [str(1 << 30)] and fwcfg == ["1048576"] and not warned,
                   "%s: the plan sizes the window: the BARs need 512 GiB and 64 GiB of room, <pcihole64> 1 TiB, "
                   "opt/ovmf/X-PciMmio64Mb 1048576" % key,
                   "need %s, pcihole64 %s, X-PciMmio64Mb %s, warnings %s" % (need, hole, fwcfg, warned))
        else:
            tap.ok(not hole and not fwcfg and len(warned) == 1 and "need 576 GiB" in warned[0] and
                   "32 GiB window" in warned[0] and "mmio64 is off" in warned[0],
                   "%s: mmio64 off: no window set, and the plan warns with the figures" % key,
                   "pcihole64 %s, X-PciMmio64Mb %s, warnings %s" % (hole, fwcfg, case.plan.get("warnings")))
            for w in warned:
                tap.diag("plan warning: " + w)
        name = "pcinuma-guest-%s" % key
        console = os.path.join(sess.files, "%s.console" % name)
        nvram = os.path.join(sess.files, "%s_VARS.fd" % name)
        for f in (console, nvram):
            try:
                os.unlink(f)
            except OSError:
                pass
        xml, standins = boot_xml(case, case.plan_xml, name, kernel, initrd, console, standin="ivshmem",
                                 emulator=args.emulator_path, loader=OVMF_CODE, nvram=(OVMF_VARS, nvram),
                                 cell_mib=MMIO64_CELL_MIB, extra_cmdline=RES_CMDLINE,
                                 shmem=("%s-%s" % (prefix, key), BAR64_GIB))
        with open(os.path.join(args.workdir, "%s-boot.xml" % key), "w") as f:
            f.write(xml)
        pdev = {d["host"]: d for d in case.plan["devices"]}
        # OVMF under TCG: 50-90 s to the report here, against 5-20 s for SeaBIOS
        g = Guest(sess, name, xml, console, max(args.boot_timeout, 360))
        try:
            try:
                dump = g.define()
            except Fatal as e:
                tap.ok(False, "%s: virsh define of the boot XML" % key, str(e))
                return
            loc = locate(dump, standins)
            try:
                booted = g.start_and_wait()
            except Fatal as e:
                tap.ok(False, "%s: virsh start" % key, str(e))
                return
            with open(os.path.join(args.workdir, "%s.console" % key), "w") as f:
                f.write(g.console_text)
            devs, lines = parse_report(g.console_text)
            if not tap.ok(booted and devs, "%s: UEFI guest (OVMF) booted under TCG and reported %d PCI devices%s"
                          % (key, len(devs), " in %.1f s" % g.boot_s if g.boot_s else ""),
                          "no report within %ds (domain state %s)\n%s\n%s"
                          % (g.timeout, g.state, console_tail(g.console_text), g.qemu_log_tail())):
                return
            tap.diag("%s: OVMF boot to report: %.1f s" % (key, g.boot_s))
            res = {ln.split()[2]: ln for ln in lines if ln.startswith("@@ res ")}
            nospace = [ln[len("@@ dmesg "):] for ln in lines if ln.startswith("@@ dmesg ")]
            for ln in nospace:
                tap.diag("guest dmesg: " + ln)
            assigned, placed, problems = 0, 0, []
            for alias, host, planned in standins:
                where = loc.get(alias, {})
                found = find_guest_device(devs, where)
                d = pdev.get(host, {})
                if len(found) != 1 or found[0]["id"] != IVSHMEM_ID:
                    problems.append("%s (host %s): the guest shows %s at the plan's address %s"
                                    % (alias, host, [x["id"] for x in found], planned))
                    continue
                gd = found[0]
                if (where.get("pxb_node") != d.get("guest_cell") or planned != d.get("guest_address") or
                        gd["numa"] != str(d.get("guest_cell"))):
                    problems.append("%s (host %s): pxb node %s, guest numa_node %s, address %s; planned cell %s at %s"
                                    % (alias, host, where.get("pxb_node"), gd["numa"], planned,
                                       d.get("guest_cell"), d.get("guest_address")))
                else:
                    placed += 1
                start = bar_start(res.get(gd["bdf"], ""), 2)
                tap.diag("%s: host %s -> guest %s (cell %s, behind %s): BAR2 %s"
                         % (key, host, gd["bdf"], gd["numa"], " > ".join(gd["chain"][:-1]),
                            "at 0x%x" % start if start else "not assigned"))
                assigned += bool(start)
            tap.ok(placed == 8 and not problems,
                   "%s: the 8 ivshmem-plain stand-ins sit at the plan's guest addresses behind the pxb-pcie "
                   "root ports, each on its planned cell" % key, "\n".join(problems))
            if auto:
                tap.ok(assigned == 8 and not nospace,
                       "%s: mmio64 auto: OVMF assigns all 8 of the 64 GiB BARs (%d assigned, %d 'no space' lines)"
                       % (key, assigned, len(nospace)), "\n".join(nospace))
            else:
                tap.ok(assigned < 8 and nospace,
                       "%s: mmio64 off: OVMF leaves BARs unassigned (%d of 8 assigned; the kernel: %d 'no space' "
                       "lines)" % (key, assigned, len(nospace)), "\n".join(nospace))
            g.wait_shutoff(5)
        finally:
            g.cleanup()
            for alias, _h, _p in standins:
                try:
                    os.unlink("/dev/shm/%s-%s-%s" % (prefix, key, alias.rsplit("-", 1)[-1]))
                except OSError:
                    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--workdir", required=True)
    # generous: under TCG on a loaded machine, 16 virtio-net probes alone
    # can take a minute; a guest that never reports still fails
    ap.add_argument("--boot-timeout", type=float, default=150)
    ap.add_argument("--filter", default="",
                    help="run only the cases whose keys this string holds "
                    "(a, b, c, d, e, f, g)")
    ap.add_argument("--emulator", default="",
                    help="the domains' <emulator>: a wrapper around "
                    "%s (tests/stack2/qemu-tcg-single.sh), copied where "
                    "the session libvirtd can run it; default: %s itself"
                    % (QEMU, QEMU))
    args = ap.parse_args()
    if args.emulator and not (os.path.isfile(args.emulator)
                              and os.access(args.emulator, os.X_OK)):
        ap.error("--emulator %s: not an executable file" % args.emulator)
    mode = os.environ.get("PCINUMA_GUEST_PATHS", "")
    if mode not in ("", "report"):
        ap.error("PCINUMA_GUEST_PATHS=%r: the only value is 'report'" % mode)
    args.paths_todo = ("report only (PCINUMA_GUEST_PATHS=report)"
                       if mode == "report" else None)
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)

    tap = Tap()
    sess = None
    t_start = time.monotonic()
    try:
        tools = find_prereqs(tap)
        initrd_local, nfiles = build_initramfs(args.workdir, tools["busybox"],
                                               tools["cpio"], tools["modules"])
        tap.ok(True, "initramfs %s: busybox-static, the virtio-net modules, "
               "%d entries, %d bytes"
               % (initrd_local, nfiles, os.path.getsize(initrd_local)))

        hosts_built = {}
        for h, hdir in (("sample-4n", args.hosts), ("snc2", args.hosts),
                        ("guest-p5", os.path.join(HERE, "hosts")),
                        ("guest-dualport", os.path.join(HERE, "hosts")),
                        ("guest-bar64", os.path.join(HERE, "hosts"))):
            out = os.path.join(args.workdir, "host-" + h)
            r = run([sys.executable, args.mkfakesysfs,
                     os.path.join(hdir, h + ".json"), out])
            if not tap.ok(r.returncode == 0, "fixture host %s" % h,
                          r.stderr + r.stdout):
                raise Fatal("fixture host %s" % h)
            hosts_built[h] = out
        check_oracle(tap, hosts_built)
        if args.paths_todo:
            tap.diag("PCINUMA_GUEST_PATHS=report: the path, guest_bdf and "
                     "fidelity checks report, they do not fail the run")

        from pcinumatest.session import Session, SessionError
        try:
            sess = Session()
        except SessionError as e:
            tap.ok(False, "private session libvirtd starts", str(e))
            raise Fatal("no libvirtd")
        tap.ok(True, "private session libvirtd (qemu:///session as %s)"
               % sess.user)

        # kernel and initramfs where the session user (qemu) can read them
        kernel = os.path.join(sess.files, "vmlinuz")
        initrd = os.path.join(sess.files, "initramfs.cpio.gz")
        for src, dst in ((tools["kernel"], kernel), (initrd_local, initrd)):
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o644)
            if os.geteuid() == 0:
                os.chown(dst, sess.uid, sess.gid)
        tap.diag("kernel %s (copied to %s), cmdline %r"
                 % (tools["kernel"], kernel, CMDLINE))
        args.emulator_path = QEMU
        if args.emulator:
            from pcinumatest.session import reachable_copy
            args.emulator_path = reachable_copy(args.emulator, sess.files)
            tap.diag("emulator %s (copied to %s), not %s"
                     % (args.emulator, args.emulator_path, QEMU))

        a = Case("a", "gpu-vm-1: 16 devices on 4 cells, path fidelity",
                 "sample-4n", "require",
                 input_path=os.path.join(args.source, "conf", "examples",
                                         "gpu-vm-1.xml"), standin="net")
        b = Case("b", "snc2 partial mapping", "snc2", "socket",
                 input_text=CASE_B_XML)
        c = Case("c", "NVMe without node stays on pcie.0", "sample-4n",
                 "legacy", input_text=CASE_C_XML)
        d = Case("d", "control: case a without ACPI", "sample-4n", "require",
                 control_of=a)
        # Cases b and c check the one-pxb-per-cell shape, each device alone
        # on a root port (topology cells); a, f and g check the default
        # (paths) in the guest, pair by pair (issue 15).
        for k in (b, c):
            k.policy_json = '{"default": {"policy": "%s", "topology": "cells"}}' % k.policy
        cf = Case("f", "p5-like host: path fidelity", "guest-p5", None,
                 input_text=two_cell_domain("guest-f", P5_DEVICES),
                 standin="net")
        cg = Case("g", "dual-socket host, dual-port NICs: path fidelity",
                 "guest-dualport", None,
                 input_text=two_cell_domain("guest-g", DUALPORT_DEVICES),
                 standin="net")
        cases = [a, b, c, d, cf, cg]
        if not args.filter or "e" in args.filter:
            try:
                run_switch_case(tap, args, sess, hosts_built, kernel, initrd)
            except Fatal as e:
                tap.diag("case e stopped: %s" % e)
        if not args.filter or "h" in args.filter:
            try:
                run_mmio64_case(tap, args, sess, hosts_built, kernel, initrd)
            except Fatal as e:
                tap.diag("case h stopped: %s" % e)
        for case in cases:
            if args.filter and case.key not in args.filter:
                continue
            if case.control_of is not None and case.control_of.plan_xml is None:
                # run the source's planning when it was filtered out
                try:
                    plan_case(tap, args, case.control_of, hosts_built)
                except Fatal:
                    continue
            tap.diag("---- case %s: %s (host %s, policy %s) ----"
                     % (case.key, case.title, case.host,
                        case.policy or "(default)"))
            try:
                run_case(tap, args, sess, case, hosts_built, kernel, initrd)
            except Fatal as e:
                tap.diag("case %s stopped: %s" % (case.key, e))
            except (subprocess.SubprocessError, OSError, ET.ParseError,
                    KeyError, ValueError) as e:
                tap.ok(False, "%s: unexpected error" % case.key,
                       "%s: %s" % (type(e).__name__, e))
    except Fatal as e:
        tap.diag("stopped: %s" % e)
    except (SystemExit, KeyboardInterrupt) as e:
        # SIGTERM (meson's timeout) or ^C: say so, clean up below, re-raise
        tap.ok(False, "interrupted (%s) - domains destroyed, libvirtd "
               "stopped" % (type(e).__name__ if not isinstance(e, SystemExit)
                            else "exit %s" % e.code))
        raise
    except Exception as e:          # never end without the summary line
        import traceback
        tap.ok(False, "unexpected error: %s: %s" % (type(e).__name__, e),
               traceback.format_exc())
    finally:
        if sess is not None:
            sess.stop()
        tap.diag("total %.1f s" % (time.monotonic() - t_start))
        if tap.todo:
            tap.diag("%d failures reported only (TODO), not counted" % tap.todo)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())

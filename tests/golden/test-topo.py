#!/usr/bin/env python3
"""pcinumactl topo on the sample host (2 sockets, 4 nodes, 8 GPU + NIC pairs,
each pair behind one PCIe switch) and on the p5-like host (four root
complexes per node, 4 GPUs behind one switch, a NIC behind a nested one).

The host matrix is checked against an oracle computed here from the fixture
tree itself (the devices' real sysfs paths and numa_node files), not against
a recorded output: two devices at most one bridge below the deepest bridge
they share are PIX (one switch), deeper PXB, two on one host bridge without
a shared bridge PHB, two on different host bridges of one node NODE, and two
on different nodes SYS.  The guest matrix must equal the host's with
mirror_switches on (the default paths topology), and show every host PIX
pair as a weaker PHB* (and nothing else changed) with it off; with
topology cells on the p5-like host, every NODE pair shows as a closer PHB!.
The counts must equal those of `pcinumactl plan --format json` (one code
path); `plan --format explain` lists exactly the pairs whose path type
changed (`--all-pairs`: every pair).  Bad input: exit 2 and a message naming what is wrong.  TAP output."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from pcinumatest.tap import Tap

ARGS = None
TAP = Tap()




def topo(*args, stdin=None):
    return subprocess.run([ARGS.pcinumactl, "topo", *args], input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)


def parse(out):
    """-> (labels, host matrix, guest matrix, device lines, summary), from
    the default layout (the host matrix, then the guest's below it) or
    --wide's (side by side)."""
    lines = out.splitlines()
    host, guest = {}, {}
    if lines[0].split()[0] == "HOST":
        head = lines[0].split()
        gi = head.index("GUEST")
        labels = head[1:gi]
        for row in lines[1:1 + len(labels)]:
            cols = row.split()
            a = cols[0]
            host[a] = dict(zip(labels, cols[1:1 + len(labels)]))
            eq_label = cols[1 + len(labels)]
            assert eq_label == a, "guest row label %r != %r" % (eq_label, a)
            guest[a] = dict(zip(labels, cols[2 + len(labels):]))
    else:
        assert lines[0] == "Host:", "first line %r" % lines[0]
        labels = lines[1].split()
        for row in lines[2:2 + len(labels)]:
            cols = row.split()
            host[cols[0]] = dict(zip(labels, cols[1:]))
        g = 2 + len(labels)
        assert lines[g] == "" and lines[g + 1].startswith("Guest ("), "guest title %r" % lines[g + 1]
        assert lines[g + 2].split() == labels, "guest header %r" % lines[g + 2]
        for row in lines[g + 3:g + 3 + len(labels)]:
            cols = row.split()
            guest[cols[0]] = dict(zip(labels, cols[1:]))
    devices = {}
    for l in lines:
        parts = l.split()
        if len(parts) > 2 and parts[0] in labels and "->" in l:
            devices[parts[0]] = (parts[1], l)
    summary = [l for l in lines if "device pairs keep their host path type" in l]
    return labels, host, guest, devices, " ".join(lines[lines.index(summary[0]):]) if summary else ""


def oracle(root, bdf_a, bdf_b):
    """The host relation of two devices from the tree alone."""
    def real(bdf):
        return os.path.realpath(os.path.join(root, "bus", "pci", "devices", bdf))

    def node(bdf):
        with open(os.path.join(real(bdf), "numa_node")) as f:
            return int(f.read())
    if bdf_a == bdf_b:
        return "X"
    if node(bdf_a) != node(bdf_b):
        return "SYS"
    pa = os.path.relpath(real(bdf_a), os.path.join(root, "devices")).split(os.sep)
    pb = os.path.relpath(real(bdf_b), os.path.join(root, "devices")).split(os.sep)
    if pa[0] != pb[0]:
        return "NODE"
    # pci0000:10 / root port / switch upstream / switch downstream / device:
    # the bridges are the components between the host bridge and the device.
    ba, bb = pa[1:-1], pb[1:-1]
    common = 0
    while common < min(len(ba), len(bb)) and ba[common] == bb[common]:
        common += 1
    if common == 0:
        return "PHB"
    # at most one bridge each below the deepest shared one: one switch
    if len(ba) <= common + 1 and len(bb) <= common + 1:
        return "PIX"
    return "PXB"


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--cases", required=True)
    ARGS = ap.parse_args()

    work = tempfile.mkdtemp(prefix="pcinuma-topo-")
    root = os.path.join(work, "sys")
    subprocess.run([sys.executable, ARGS.mkfakesysfs, os.path.join(ARGS.hosts, "sample-4n.json"), root],
                   check=True, stdout=subprocess.DEVNULL)
    case = os.path.join(ARGS.cases, "mirror-switches")
    xml = os.path.join(case, "input.xml")
    mirror = os.path.join(work, "mirror.json")
    with open(mirror, "w") as f:
        f.write('{"default": {"policy": "require", "mirror_switches": true}}\n')
    plain = os.path.join(work, "plain.json")
    with open(plain, "w") as f:
        f.write('{"default": {"policy": "require", "mirror_switches": false}}\n')

    # mirror_switches on: the host matrix matches the oracle, the guest's
    # equals the host's.
    p = topo("--sysfs-root", root, "--policy-file", mirror, xml)
    TAP.check(p.returncode == 0, "topo with mirror_switches: exit 0", "rc %d stderr %r" % (p.returncode, p.stderr))
    labels, host, guest, devices, summary = parse(p.stdout)
    TAP.check(len(labels) == 16 and len(devices) == 16, "16 devices labelled and listed", repr(labels))
    bad = []
    for a in labels:
        for b in labels:
            want = oracle(root, devices[a][0], devices[b][0])
            if host[a][b] != want:
                bad.append("%s/%s (%s/%s): host %s, oracle %s" % (a, b, devices[a][0], devices[b][0], host[a][b], want))
    TAP.check(not bad, "host matrix matches the sysfs oracle", "\n".join(bad[:10]))
    kinds = {host[a][b] for a in labels for b in labels}
    TAP.check({"X", "PIX", "PHB", "SYS"} <= kinds, "the host matrix shows PIX, PHB and SYS", repr(kinds))
    diff = ["%s/%s: host %s guest %s" % (a, b, host[a][b], guest[a][b])
            for a in labels for b in labels if host[a][b] != guest[a][b]]
    TAP.check(not diff, "mirror_switches: the guest matrix equals the host's", "\n".join(diff[:10]))
    TAP.check(summary.startswith("120 of 120 device pairs keep their host path type in the guest: 120 same, 0 closer, 0 farther"),
           "summary: 120 of 120", summary)
    wrong_cell = [l for _, (bdf, l) in devices.items()
                  if l.split("host node")[1].split()[0] != l.split("guest cell")[1].split()[0].rstrip(",")]
    TAP.check(not wrong_cell, "each device's guest cell is its host node", "\n".join(wrong_cell))
    TAP.check(all("behind a guest switch" in l for _, l in devices.values()), "every device is behind a guest switch")
    TAP.check("Legend:" in p.stdout and "PIX  = behind one PCIe switch" in p.stdout, "the legend is printed")

    # Width: 16 devices fit 100 columns; --wide puts the matrices side by
    # side (and adds each device's class), and says the same.
    widest = max(len(l) for l in p.stdout.splitlines())
    TAP.check(widest <= 100, "16 devices: every line fits 100 columns", "widest line: %d" % widest)
    w = topo("--sysfs-root", root, "--policy-file", mirror, "--wide", xml)
    wl, wh, wg, wd, ws = parse(w.stdout)
    TAP.check(w.returncode == 0 and (wl, wh, wg, ws) == (labels, host, guest, summary)
              and max(len(l) for l in w.stdout.splitlines()) > 100 and "3D controller" in w.stdout,
              "--wide: side by side, wider, the same matrices and summary", w.stderr + w.stdout[:300])

    # mirror_switches off: exactly the host PIX pairs weaken to PHB*.
    p = topo("--sysfs-root", root, "--policy-file", plain, xml)
    TAP.check(p.returncode == 0, "topo without mirror_switches: exit 0", p.stderr)
    _, host2, guest2, _, summary2 = parse(p.stdout)
    TAP.check(host2 == host, "the host matrix does not depend on the policy")
    bad = []
    for a in labels:
        for b in labels:
            want = "PHB*" if host[a][b] == "PIX" else host[a][b]
            if guest2[a][b] != want:
                bad.append("%s/%s: guest %s, want %s" % (a, b, guest2[a][b], want))
    TAP.check(not bad, "without mirror_switches: host PIX pairs are PHB* in the guest, the rest unchanged", "\n".join(bad[:10]))
    npix = sum(1 for a in labels for b in labels if a < b and host[a][b] == "PIX")
    TAP.check(summary2.startswith("%d of 120 device pairs keep their host path type in the guest: %d same, 0 closer, %d farther"
                               % (120 - npix, 120 - npix, npix)) and "mirror_switches is off" in summary2,
           "summary counts the %d weakened pairs and names the switch" % npix, summary2)

    # plan --format explain lists only the pairs whose path type changed,
    # after a summary that says how many same ones it leaves out;
    # --all-pairs lists them all (16 devices: 120 pairs).
    def explain_pairs(policy, *extra):
        e = subprocess.run([ARGS.pcinumactl, "plan", "--format", "explain", "--sysfs-root", root, "--policy-file", policy,
                            *extra, xml], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = e.stdout.splitlines()
        head = [i for i, l in enumerate(lines) if l.startswith("path fidelity: ") and "pairs;" in l]
        if e.returncode != 0 or len(head) != 1:
            return e, "", []
        pairs = []
        for l in lines[head[0] + 1:]:
            if not l.startswith("  "):
                break
            pairs.append(l.split())
        return e, lines[head[0]], pairs

    e, head, pairs = explain_pairs(mirror)
    TAP.check(e.returncode == 0 and pairs == [] and "120 same, 0 closer, 0 farther (of 120 pairs" in head and
              "the 120 same not listed (--all-pairs lists them)" in head,
              "explain, nothing changed: the summary only, no pair listed", head + e.stderr)
    e, head, pairs = explain_pairs(mirror, "--all-pairs")
    TAP.check(e.returncode == 0 and len(pairs) == 120 and all(q[-1] == "same" for q in pairs) and "not listed" not in head,
              "explain --all-pairs: all 120 pairs, each 'same'", "%d pairs; %s" % (len(pairs), head))
    e, head, pairs = explain_pairs(plain)
    by_bdf = {bdf: label for label, (bdf, _) in devices.items()}
    changed = sorted((min(by_bdf[q[0]], by_bdf[q[1]]), max(by_bdf[q[0]], by_bdf[q[1]])) for q in pairs)
    want = sorted((a, b) for a in labels for b in labels if a < b and host[a][b] == "PIX")
    TAP.check(e.returncode == 0 and changed == want and all(q[2:] == ["PIX", "->", "PHB", "farther"] for q in pairs) and
              "the %d same not listed" % (120 - npix) in head,
              "explain without mirror_switches: exactly the %d host PIX pairs, each PIX -> PHB farther" % npix,
              "%r\nwant %r\n%s" % (changed, want, head))
    e, head, pairs = explain_pairs(plain, "--all-pairs")
    TAP.check(len(pairs) == 120 and sum(q[-1] == "farther" for q in pairs) == npix,
              "explain --all-pairs without mirror_switches: 120 pairs, %d farther" % npix, head)
    e = subprocess.run([ARGS.pcinumactl, "plan", "--all-pairs", "--sysfs-root", root, "--policy-file", plain, xml],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    TAP.check(e.returncode == 2 and "--all-pairs goes with --format explain" in e.stderr and e.stdout == "",
              "--all-pairs without --format explain: exit 2 saying so", e.stderr)

    # The p5-like host: nested switches and four root complexes per node.
    # The default policy (paths) keeps every pair, PXB and NODE included.
    p5 = os.path.join(work, "p5")
    subprocess.run([sys.executable, ARGS.mkfakesysfs, os.path.join(ARGS.hosts, "p5-like.json"), p5],
                   check=True, stdout=subprocess.DEVNULL)
    p5xml = os.path.join(ARGS.cases, "paths-p5-like", "input.xml")
    p = topo("--sysfs-root", p5, "--policy", "require", p5xml)
    TAP.check(p.returncode == 0, "p5-like: exit 0", p.stderr)
    labels5, host5, guest5, devices5, summary5 = parse(p.stdout)
    bad = ["%s/%s: host %s, oracle %s" % (a, b, host5[a][b], oracle(p5, devices5[a][0], devices5[b][0]))
           for a in labels5 for b in labels5 if host5[a][b] != oracle(p5, devices5[a][0], devices5[b][0])]
    TAP.check(not bad, "p5-like: host matrix matches the sysfs oracle", "\n".join(bad[:10]))
    kinds5 = {host5[a][b] for a in labels5 for b in labels5}
    TAP.check({"PIX", "PXB", "NODE", "SYS"} <= kinds5, "p5-like: the host matrix shows PIX, PXB, NODE and SYS", repr(kinds5))
    diff = ["%s/%s: host %s guest %s" % (a, b, host5[a][b], guest5[a][b])
            for a in labels5 for b in labels5 if host5[a][b] != guest5[a][b]]
    TAP.check(not diff and summary5.startswith("120 of 120"), "p5-like: paths keeps every pair", "\n".join(diff[:10]) + summary5)
    j = subprocess.run([ARGS.pcinumactl, "plan", "--format", "json", "--sysfs-root", p5, "--policy", "require", p5xml],
                       stdout=subprocess.PIPE, text=True)
    fid = json.loads(j.stdout)["fidelity"]
    TAP.check((fid["same"], fid["closer"], fid["farther"]) == (120, 0, 0) and len(fid["pairs"]) == 120,
           "p5-like: plan --format json reports the same counts", repr({k: fid[k] for k in ("same", "closer", "farther")}))
    cells = os.path.join(work, "cells.json")
    with open(cells, "w") as f:
        f.write('{"default": {"policy": "require", "topology": "cells"}}\n')
    p = topo("--sysfs-root", p5, "--policy-file", cells, p5xml)
    _, host6, guest6, _, summary6 = parse(p.stdout)
    bad = []
    for a in labels5:
        for b in labels5:
            want = {"NODE": "PHB!", "PIX": "PHB*", "PXB": "PHB*"}.get(host6[a][b], host6[a][b])
            if guest6[a][b] != want:
                bad.append("%s/%s: host %s guest %s, want %s" % (a, b, host6[a][b], guest6[a][b], want))
    TAP.check(p.returncode == 0 and host6 == host5 and not bad,
           "p5-like, topology cells: NODE pairs are a closer PHB!, switch pairs a farther PHB*", "\n".join(bad[:10]))
    nnode = sum(1 for a in labels5 for b in labels5 if a < b and host5[a][b] == "NODE")
    nsw = sum(1 for a in labels5 for b in labels5 if a < b and host5[a][b] in ("PIX", "PXB"))
    j = subprocess.run([ARGS.pcinumactl, "plan", "--format", "json", "--sysfs-root", p5, "--policy-file", cells, p5xml],
                       stdout=subprocess.PIPE, text=True)
    fid = json.loads(j.stdout)["fidelity"]
    TAP.check((fid["closer"], fid["farther"]) == (nnode, nsw) and
           summary6.startswith("%d of 120 device pairs keep their host path type in the guest: %d same, %d closer, %d farther"
                               % (120 - nnode - nsw, 120 - nnode - nsw, nnode, nsw)),
           "p5-like, topology cells: topo and plan --format json count %d closer and %d farther" % (nnode, nsw),
           summary6 + " / " + repr({k: fid[k] for k in ("same", "closer", "farther")}))

    # The same through standard input.
    with open(xml) as f:
        p = topo("--sysfs-root", root, "--policy-file", mirror, "-", stdin=f.read())
    TAP.check(p.returncode == 0 and parse(p.stdout)[2] == guest, "topo reads standard input")

    # Bad input: exit 2, a message naming the thing at fault, nothing on stdout.
    missing = os.path.join(work, "nope.xml")
    for name, args, want in [
            ("unknown policy", ["--policy", "bogus", xml], "unknown policy 'bogus'"),
            ("--policy with --policy-file", ["--policy", "require", "--policy-file", mirror, xml], "exclude each other"),
            ("missing domain file", [missing], missing),
            ("missing sysfs root", ["--sysfs-root", os.path.join(work, "nosys"), xml], "nosys"),
            ("broken policy file", ["--policy-file", xml, xml], xml),
            ("no FILE", [], "Usage: pcinumactl topo")]:
        p = topo(*([] if name in ("missing sysfs root", "no FILE") else ["--sysfs-root", root]), *args)
        TAP.check(p.returncode == 2 and want in p.stderr and p.stdout == "",
               "bad input (%s): exit 2 naming it" % name, "rc %d stderr %r" % (p.returncode, p.stderr))
    p = topo("--sysfs-root", root, "--policy", "require", "-", stdin="<domain type='qemu'><name>x</name></domain>")
    TAP.check(p.returncode == 0 and "no PCI passthrough devices" in p.stdout, "a domain without passthrough devices says so",
           "rc %d out %r err %r" % (p.returncode, p.stdout, p.stderr))

    shutil.rmtree(work, ignore_errors=True)
    return TAP.finish_plan()


if __name__ == "__main__":
    sys.exit(main())

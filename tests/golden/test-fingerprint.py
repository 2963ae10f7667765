#!/usr/bin/env python3
"""pcinumactl fingerprint on every fixture host (tests/fixtures/hosts/).

For each host:
  - exit 0, the first line of the text output is the digest alone (64 hex
    digits), and the output is the same on a second run;
  - --json agrees with the text: the same digest, version 1, the same
    groups in the same order (node, root complex, digest, devices);
  - the digests are SHA-256 as computed here by Python's hashlib: the
    whole digest of the canonical text, each group's of its line plus a
    newline, and the canonical text holds each group's line;
  - the canonical text names no BDF and no host bridge of the host;
  - the devices in the groups are exactly those an oracle computed here from
    `pcinumactl host --json` counts (not a bridge, and class 02, 03, 0108,
    0b40 or 12, or 0680 from vendor 10de; never by driver; plus the other
    functions of a slot whose function 0 counts, and the PF of each such
    VF), each in the group of its node and host bridge;
  - the digest equals the one recorded in tests/golden-fingerprint/digests.txt
    (--update rewrites it; review the diff: a changed digest means every
    published fingerprint changes).
Then the fleet: fleet-b (fleet-a renumbered) has fleet-a's digest and
groups; fleet-c (a GPU moved to the other socket) has another digest, and
exactly its two switch groups (pci0000:15 and pci0000:97 on both hosts)
differ.  Bad input: exit 2 naming the root or the argument.  TAP output."""

import hashlib
import json
import os
import re
import subprocess
import sys

from pcinumatest.fixtures import build_host, golden_host_args, work_dir
from pcinumatest.tap import Tap

ARGS = None
TAP = Tap()
DIGEST = re.compile(r"^[0-9a-f]{64}$")




def ctl(*args):
    return subprocess.run([ARGS.pcinumactl, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def parse_text(out):
    """-> (digest line, [(node, host bridge, digest, [bdf, ...])])."""
    lines = out.splitlines()
    groups = []
    for l in lines[1:]:
        m = re.match(r"^  group \d+: node (\S+), root complex (.+): ([0-9a-f]{64})$", l)
        if m:
            groups.append((None if m.group(1) == "none" else int(m.group(1)), m.group(2), m.group(3), []))
            continue
        m = re.match(r"^    ([0-9a-f]+:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])  ", l)
        if m and groups:
            groups[-1][3].append(m.group(1))
    return (lines[0] if lines else ""), groups


def is_bridge(d):
    cls = int(d["class"], 16)
    return cls >> 16 == 0x06 and (cls >> 8) & 0xff in (0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x07, 0x09)


def counts(d):
    """The oracle: which devices the fingerprint counts (docs/operations.md)."""
    cls = int(d["class"], 16)
    base = cls >> 16
    if is_bridge(d):
        return False
    if (cls >> 8) == 0x0680:
        return d["vendor"].lower() in ("10de", "0x10de")
    return base in (0x02, 0x03, 0x12) or (cls >> 8) in (0x0108, 0x0b40)


def one_host(hostfile, work, digests):
    name = os.path.basename(hostfile)[:-5]
    tree = os.path.join(work, name)
    build_host(ARGS.mkfakesysfs, hostfile, tree)
    t = ctl("fingerprint", "--sysfs-root", tree)
    j = ctl("fingerprint", "--sysfs-root", tree, "--json")
    again = ctl("fingerprint", "--sysfs-root", tree)
    first, groups = parse_text(t.stdout)
    TAP.check(t.returncode == 0 and DIGEST.match(first) is not None,
           "%s: exit 0, the first line is the digest alone" % name, "rc %d %r\n%s" % (t.returncode, first, t.stderr))
    TAP.check(again.stdout == t.stdout, "%s: the same output twice" % name)
    if t.returncode != 0 or j.returncode != 0:
        TAP.check(False, "%s: --json exit 0" % name, j.stderr)
        return None
    fp = json.loads(j.stdout)
    jgroups = [(g["node"], g["host_bridge"] or "unknown (no sysfs paths)", g["digest"], [d["bdf"] for d in g["devices"]])
               for g in fp["groups"]]
    TAP.check(fp["digest"] == first and fp["version"] == 2 and jgroups == groups,
           "%s: --json agrees with the text (digest, version, groups, devices)" % name,
           "json %s\ntext %s" % (jgroups, groups))
    canon = fp["canonical"]
    bad = []
    if sha(canon) != fp["digest"]:
        bad.append("digest is not the SHA-256 of the canonical text")
    if not canon.startswith("pcinuma topology fingerprint %d\n" % fp["version"]):
        bad.append("canonical text does not start with its version line")
    for g in fp["groups"]:
        if sha(g["canonical"] + "\n") != g["digest"]:
            bad.append("group %s: digest is not the SHA-256 of its line" % g["host_bridge"])
        if "group " + g["canonical"] + "\n" not in canon:
            bad.append("group %s: its line is not in the canonical text" % g["host_bridge"])
    TAP.check(not bad, "%s: digests are SHA-256 of the canonical text and of each group's line (hashlib)" % name,
           "\n".join(bad))

    host = json.loads(ctl("host", "--sysfs-root", tree, "--json").stdout)
    leaks = [d["bdf"] for d in host["devices"] if d["bdf"] in canon]
    leaks += [d["host_bridge"] for d in host["devices"] if d["host_bridge"] and d["host_bridge"] in canon]
    TAP.check(not leaks, "%s: the canonical text names no BDF and no host bridge" % name, " ".join(leaks[:10]))

    # The oracle: counted devices, the PFs of counted VFs, each in the
    # group of its node (or none) and host bridge.
    nodes = {n["id"] for n in host["nodes"]}
    by_bdf = {d["bdf"]: d for d in host["devices"]}
    want = {d["bdf"] for d in host["devices"] if counts(d)}
    # the other functions of a slot whose function 0 counts (a GPU's audio)
    slots = {b.rsplit(".", 1)[0] for b in want if b.endswith(".0")}
    want |= {d["bdf"] for d in host["devices"] if d["bdf"].rsplit(".", 1)[0] in slots
             and not is_bridge(d)}
    want |= {by_bdf[b]["physfn"] for b in list(want) if by_bdf[b]["physfn"] in by_bdf}
    got = {}
    for g in fp["groups"]:
        for d in g["devices"]:
            got[d["bdf"]] = (g["node"], g["host_bridge"])
    misplaced = []
    for b in want & set(got):
        d = by_bdf[d_pf] if (d_pf := by_bdf[b]["physfn"]) in want else by_bdf[b]
        node = d["node"] if d["node"] in nodes else None
        if got[b] != (node, d["host_bridge"]):
            misplaced.append("%s in %s, expected %s" % (b, got[b], (node, d["host_bridge"])))
    TAP.check(set(got) == want and not misplaced,
           "%s: the groups hold exactly the passthrough-capable devices (%d), by node and root complex" % (name, len(want)),
           "missing %s\nextra %s\n%s" % (sorted(want - set(got)), sorted(set(got) - want), "\n".join(misplaced)))

    if ARGS.update:
        digests[name] = fp["digest"]
    else:
        TAP.check(digests.get(name) == fp["digest"], "%s: digest as recorded in digests.txt" % name,
               "recorded %s, now %s" % (digests.get(name), fp["digest"]))
    return fp


def fleet(fps):
    a, b, c = fps.get("fleet-a"), fps.get("fleet-b"), fps.get("fleet-c")
    if not (a and b and c):
        TAP.check(False, "fleet: fleet-a, fleet-b and fleet-c are fixture hosts")
        return
    TAP.check(a["digest"] == b["digest"] and a["canonical"] == b["canonical"],
           "fleet: fleet-b (renumbered) has fleet-a's digest", "%s\n%s" % (a["digest"], b["digest"]))
    ga = [(g["node"], g["digest"]) for g in a["groups"]]
    gb = [(g["node"], g["digest"]) for g in b["groups"]]
    renamed = all(x["host_bridge"] != y["host_bridge"] for x, y in zip(a["groups"], b["groups"]))
    TAP.check(ga == gb and renamed, "fleet: fleet-b's groups have fleet-a's digests under other host bridge names",
           "%s\n%s" % (ga, gb))
    TAP.check(a["digest"] != c["digest"], "fleet: fleet-c (a GPU moved) has another digest")

    def changed(x, y):
        left = [(g["node"], g["digest"]) for g in y["groups"]]
        out = []
        for g in x["groups"]:
            if (g["node"], g["digest"]) in left:
                left.remove((g["node"], g["digest"]))
            else:
                out.append(g["host_bridge"])
        return sorted(out)
    want = ["pci0000:15", "pci0000:97"]
    TAP.check(changed(a, c) == want and changed(c, a) == want,
           "fleet: exactly the two switch groups differ between fleet-a and fleet-c",
           "a not in c: %s\nc not in a: %s" % (changed(a, c), changed(c, a)))


def bad_input(work):
    notdir = os.path.join(work, "plain-file")
    with open(notdir, "w") as f:
        f.write("x\n")
    empty = os.path.join(work, "empty-root")
    os.makedirs(empty, exist_ok=True)
    cases = [
        (["--sysfs-root", os.path.join(work, "no-such-root")], "cannot read host map from '%s'" % os.path.join(work, "no-such-root")),
        (["--sysfs-root", notdir], "cannot read host map from '%s'" % notdir),
        (["--sysfs-root", empty], "cannot read host map from '%s'" % empty),
        (["--sysfs-root", empty, "--json"], "cannot read host map from '%s'" % empty),
        (["--frobnicate"], "Usage: pcinumactl fingerprint"),
        (["--sysfs-root", empty, "extra"], "unexpected argument 'extra'"),
        (["--sysfs-root"], "Usage: pcinumactl fingerprint"),
    ]
    for args, needle in cases:
        r = ctl("fingerprint", *args)
        TAP.check(r.returncode == 2 and needle in r.stderr and r.stdout == "",
               "bad input: fingerprint %s -> exit 2 naming %r" % (" ".join(a.replace(work, "W") for a in args),
                                                                needle.replace(work, "W")),
               "exit %d\n%s" % (r.returncode, r.stderr))
    r = ctl("fingerprint", "--help")
    TAP.check(r.returncode == 0 and r.stdout.startswith("Usage: pcinumactl fingerprint") and r.stderr == "",
           "--help: usage on stdout, exit 0", r.stderr)
    # A garbage file: a warning naming it, and still a fingerprint.
    tree = os.path.join(work, "fleet-a")
    gpu = os.path.realpath(os.path.join(tree, "bus/pci/devices/0000:18:00.0"))
    with open(os.path.join(gpu, "numa_node"), "w") as f:
        f.write("banana\n")
    r = ctl("fingerprint", "--sysfs-root", tree)
    TAP.check(r.returncode == 0 and "0000:18:00.0/numa_node" in r.stderr and DIGEST.match(r.stdout.splitlines()[0]),
           "a garbage numa_node: a warning naming the file on stderr, the digest still first on stdout", r.stderr)


def main():
    global ARGS
    ARGS = golden_host_args(__doc__.splitlines()[0], "tests/golden-fingerprint", "rewrite digests.txt")
    path = os.path.join(ARGS.golden, "digests.txt")
    digests = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    host, digest = line.split()
                    digests[host] = digest
    hosts = sorted(f for f in os.listdir(ARGS.hosts) if f.endswith(".json"))
    fps = {}
    with work_dir("pcinuma-fingerprint-") as work:
        for h in hosts:
            fps[h[:-5]] = one_host(os.path.join(ARGS.hosts, h), work, digests)
        if not ARGS.update:
            extra = sorted(set(digests) - set(fps))
            TAP.check(not extra, "digests.txt names no host that is not a fixture", " ".join(extra))
        fleet(fps)
        bad_input(work)
    if ARGS.update:
        os.makedirs(ARGS.golden, exist_ok=True)
        with open(path, "w") as f:
            f.write("# pcinumactl fingerprint of each fixture host (tests/golden/test-fingerprint.py --update).\n"
                    "# A change here changes every fingerprint a fleet has published.\n")
            for h in sorted(digests):
                f.write("%s %s\n" % (h, digests[h]))
    return TAP.finish_plan()


if __name__ == "__main__":
    sys.exit(main())

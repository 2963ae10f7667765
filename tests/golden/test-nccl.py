#!/usr/bin/env python3
"""The NCCL topology files: `pcinumactl nccl-topo` (a guest as planned) and
`pcinumactl host --nccl-topo` (the host), on every fixture host.

For each host in tests/fixtures/hosts/, a domain is made here that passes
through every GPU and RDMA NIC of the host, one guest cell per host node
(numatune memnode), and:
  - both files are compared with the golden files
    tests/golden-nccl/<host>.guest.xml and <host>.host.xml (--update
    rewrites them; review the diff);
  - both pass a format check written from NCCL's own loader
    (src/graph/xml.cc, topo.cc): <system version="1">, <cpu> children with
    an integer numaid and a cpumap affinity, <pci> nested only in <cpu> or
    <pci>, busids NCCL's checkBDFFormat accepts (12 characters), class,
    vendor and device as sysfs writes them, a link_speed NCCL's speed table
    knows, an integer link_width, at most 128 children per element (NCCL's
    MAX_SUBS), no busid twice, siblings ordered by busid;
  - against oracles computed here: the host file nests each device as
    NCCL does from its real sysfs path (the bridge two levels up, a device
    less than two levels below its host bridge under the <cpu> of its
    node), and every device carries its own max_link_speed and
    max_link_width files' values (the fixtures' GPUs idle at a lower
    current_link_speed, which must not be used); the guest file holds exactly the
    planned devices at the guest BDFs `pcinumactl plan --format json`
    predicts, each under the <cpu> of its guest cell, with the cell's CPUs
    as affinity and the host device's link;
  - the planned domain gives the same guest file (read from its mark);
  - delivery (nccl_topology on, the default): the planned domain carries
    the file as QEMU's -fw_cfg opt/org.pcinuma/nccl-topo.xml, the same
    text as nccl-topo prints (commas doubled, newlines as spaces); revert
    removes it; nccl_topology false gives none; explain says so;
  - bad input: exit 2 naming what is wrong; no GPU or RDMA NIC: exit 1
    saying why.
TAP output."""

import glob
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

from pcinumatest.fixtures import build_host, golden_host_args, work_dir
from pcinumatest.tap import Tap

ARGS = None
TAP = Tap()
CPU = "GenuineIntel,6,143"

# NCCL's kvDictPciGen (src/graph/topo.cc): the speeds it knows.
NCCL_SPEEDS = {"2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s", "32 GT/s", "64 GT/s",
               "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe",
               "32.0 GT/s PCIe", "64.0 GT/s PCIe"}
NCCL_MAX_SUBS = 128
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


FWCFG_NAME = "opt/org.pcinuma/nccl-topo.xml"
FWCFG_PREFIX = "name=%s,string=" % FWCFG_NAME
QEMU_NS = "{http://libvirt.org/schemas/domain/qemu/1.0}"


def fw_cfg_args(xml_text):
    """The values after each -fw_cfg in the domain's <qemu:commandline>s
    that name the NCCL file."""
    root = ET.fromstring(xml_text)
    out = []
    for cl in root.findall(QEMU_NS + "commandline"):
        vals = [a.get("value") for a in cl.findall(QEMU_NS + "arg")]
        for i, v in enumerate(vals[:-1]):
            if v == "-fw_cfg" and vals[i + 1].startswith("name=" + FWCFG_NAME):
                out.append(vals[i + 1])
    return out




def ctl(*args, stdin=None):
    return subprocess.run([ARGS.pcinumactl, *args], input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def wanted(cls, vendor):
    """The rule of lib/core/nccltopo.h, written again."""
    c = int(cls, 16) >> 8
    if c >> 8 == 0x03:          # a display controller: NVIDIA's only
        return int(vendor, 16) == 0x10de
    return c == 0x0207 or (c == 0x0200 and int(vendor, 16) in (0x15b3, 0x1d0f))


def make_domain(host):
    nodes = [n["id"] for n in host["nodes"]]
    devs = [d for d in host["devices"] if wanted(d["class"], d["vendor"])]
    cells, memnodes = [], []
    for i, n in enumerate(nodes):
        cells.append("      <cell id='%d' cpus='%d-%d' memory='256' unit='MiB'/>" % (i, 2 * i, 2 * i + 1))
        memnodes.append("    <memnode cellid='%d' mode='strict' nodeset='%d'/>" % (i, n))
    hostdevs = []
    for d in devs:
        dom, bus, rest = d["bdf"].split(":")
        slot, fn = rest.split(".")
        hostdevs.append("    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
                        "      <source>\n"
                        "        <address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>\n"
                        "      </source>\n"
                        "    </hostdev>" % (dom, bus, slot, fn))
    xml = ("<domain type='qemu'>\n  <name>nccl-test</name>\n  <memory unit='MiB'>%d</memory>\n"
           "  <vcpu placement='static'>%d</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n"
           "  </os>\n  <features>\n    <acpi/>\n  </features>\n  <cpu mode='custom' match='exact'>\n"
           "    <model fallback='allow'>qemu64</model>\n    <numa>\n%s\n    </numa>\n  </cpu>\n"
           "  <numatune>\n%s\n  </numatune>\n  <devices>\n"
           "    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
           "    <controller type='pci' index='0' model='pcie-root'/>\n%s\n  </devices>\n</domain>\n"
           % (256 * len(nodes), 2 * len(nodes), "\n".join(cells), "\n".join(memnodes), "\n".join(hostdevs)))
    return xml, devs


def format_problems(text):
    """What NCCL's loader would refuse or misread; [] when none."""
    out = []
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        return ["not XML: %s" % e]
    if root.tag != "system" or root.get("version") != "1":
        out.append("the root is not <system version=\"1\">")
    seen = set()

    def check(el, parent_tag):
        kids = list(el)
        if len(kids) > NCCL_MAX_SUBS:
            out.append("<%s> has %d children (NCCL's MAX_SUBS is %d)" % (el.tag, len(kids), NCCL_MAX_SUBS))
        for k, v in el.attrib.items():
            if len(v) >= 255:
                out.append("<%s %s> is %d characters (NCCL's MAX_STR_LEN is 255)" % (el.tag, k, len(v)))
        if el.tag == "cpu":
            if parent_tag != "system":
                out.append("<cpu> below <%s>" % parent_tag)
            if not re.match(r"^-?\d+$", el.get("numaid", "")):
                out.append("<cpu numaid=%r>" % el.get("numaid"))
            aff = el.get("affinity")
            if aff is not None and not re.match(r"^[0-9a-f]{8}(,[0-9a-f]{8})*$", aff):
                out.append("<cpu affinity=%r> is not a cpumap" % aff)
            for k in ("familyid", "modelid"):
                if k in el.attrib and not el.get(k).isdigit():
                    out.append("<cpu %s=%r>" % (k, el.get(k)))
        elif el.tag == "pci":
            if parent_tag not in ("cpu", "pci"):
                out.append("<pci> below <%s>" % parent_tag)
            b = el.get("busid", "")
            if not BDF.match(b):
                out.append("busid %r is not what NCCL's checkBDFFormat accepts" % b)
            if b in seen:
                out.append("busid %s twice" % b)
            seen.add(b)
            for k, pat in (("class", r"^0x[0-9a-f]{6}$"), ("vendor", r"^0x[0-9a-f]{4}$"),
                           ("device", r"^0x[0-9a-f]{4}$"), ("link_width", r"^\d+$")):
                if k in el.attrib and not re.match(pat, el.get(k)):
                    out.append("%s: %s=%r" % (b, k, el.get(k)))
            if "link_speed" in el.attrib and el.get("link_speed") not in NCCL_SPEEDS:
                out.append("%s: link_speed %r is not in NCCL's table" % (b, el.get("link_speed")))
        elif el is not root:
            out.append("unexpected <%s>" % el.tag)
        busids = [k.get("busid", "") for k in kids if k.tag == "pci"]
        if busids != sorted(busids):
            out.append("children of <%s %s> not ordered by busid: %s" % (el.tag, el.get("busid", el.get("numaid", "")), busids))
        for k in kids:
            check(k, el.tag)

    check(root, "")
    return out


def flatten(text):
    """busid -> (parent busid, or 'cpu:N'), attributes."""
    root = ET.fromstring(text)
    m = {}

    def walk(el, parent):
        for k in el:
            if k.tag == "cpu":
                walk(k, "cpu:" + k.get("numaid"))
            elif k.tag == "pci":
                m[k.get("busid")] = (parent, dict(k.attrib))
                walk(k, k.get("busid"))

    walk(root, None)
    cpus = {c.get("numaid"): dict(c.attrib) for c in root.iter("cpu")}
    return m, cpus


def read(tree, bdf, f):
    try:
        with open(os.path.join(tree, "bus/pci/devices", bdf, f)) as fh:
            return fh.read().strip()
    except OSError:
        return None


def nccl_parent(tree, bdf, node):
    """NCCL's rule on the real sysfs path: the bridge two levels up, or the
    CPU of the device's node: the host map's effective node (`host --json`),
    which differs from NCCL's only where numa_node is -1 and the host has
    one node (NCCL would write a <cpu numaid="-1"> with no CPUs)."""
    path = os.path.realpath(os.path.join(tree, "bus/pci/devices", bdf))
    parts = path.split("/")
    i = len(parts) - 1
    if i >= 2 and BDF.match(parts[i - 1]) and BDF.match(parts[i - 2]):
        return parts[i - 2]
    return "cpu:%s" % node


def check_host(name, tree, host, text, devs):
    m, cpus = flatten(text)
    nodes = {d["bdf"]: d["node"] for d in devs}
    probs = []
    for d in devs:
        b = d["bdf"]
        if b not in m:
            probs.append("%s missing" % b)
            continue
        chain = [b]
        while not chain[-1].startswith("cpu:"):
            want = nccl_parent(tree, chain[-1], nodes[b])
            got = m.get(chain[-1], (None,))[0]
            if got != want:
                probs.append("%s: parent %s, NCCL would find %s" % (chain[-1], got, want))
                break
            chain.append(want)
        for k in chain[:-1]:
            attrs = m[k][1]
            sp, w = read(tree, k, "max_link_speed"), read(tree, k, "max_link_width")
            if attrs.get("link_speed") != sp or attrs.get("link_width") != w:
                probs.append("%s: link %s x%s, sysfs says %s x%s" % (k, attrs.get("link_speed"),
                                                                      attrs.get("link_width"), sp, w))
    extra = [b for b, (p, a) in m.items() if a.get("class", "").startswith("0x0604") is False
             and b not in {d["bdf"] for d in devs}]
    if extra:
        probs.append("devices that are not GPUs or RDMA NICs: %s" % extra)
    TAP.check(not probs, "%s: host file nests every GPU and RDMA NIC as NCCL would, with its own link" % name,
           "\n".join(probs))


def check_guest(name, tree, text, plan, xml_in):
    m, cpus = flatten(text)
    cell_cpus = {}
    for c in re.finditer(r"<cell id='(\d+)' cpus='(\d+)-(\d+)'", xml_in):
        mask = 0
        for cpu in range(int(c.group(2)), int(c.group(3)) + 1):
            mask |= 1 << cpu
        cell_cpus[c.group(1)] = "%08x" % mask
    probs = []
    want = {}
    for d in plan["devices"]:
        if d.get("action") != "move" or not d.get("guest_bdf"):
            continue
        h = d.get("host")
        cls, ven = read(tree, h, "class"), read(tree, h, "vendor")
        if cls and wanted(cls, ven):
            want[d["guest_bdf"]] = (h, d)
    leaves = {b for b, (p, a) in m.items() if not a.get("class", "").startswith("0x0604")}
    if leaves != set(want):
        probs.append("devices %s, plan predicts %s" % (sorted(leaves), sorted(want)))
    for b, (h, d) in want.items():
        if b not in m:
            continue
        p = b
        while not p.startswith("cpu:"):
            p = m[p][0]
        cell = p[4:]
        if str(d.get("guest_cell")) != cell:
            probs.append("%s (host %s) under cpu %s, plan puts it in cell %s" % (b, h, cell, d.get("guest_cell")))
        a = m[b][1]
        sp, w = read(tree, h, "max_link_speed"), read(tree, h, "max_link_width")
        if a.get("link_speed") != sp or a.get("link_width") != w:
            probs.append("%s: link %s x%s, host %s has %s x%s" % (b, a.get("link_speed"), a.get("link_width"), h, sp, w))
    for n, attrs in cpus.items():
        if cell_cpus.get(n) != attrs.get("affinity"):
            probs.append("cpu %s affinity %s, cell CPUs %s" % (n, attrs.get("affinity"), cell_cpus.get(n)))
    TAP.check(not probs, "%s: guest file holds the planned devices at their predicted BDFs, cells and host links" % name,
           "\n".join(probs))


def golden(name, kind, text):
    path = os.path.join(ARGS.golden, "%s.%s.xml" % (name, kind))
    if ARGS.update:
        with open(path, "w") as f:
            f.write(text)
    try:
        with open(path) as f:
            want = f.read()
    except OSError as e:
        TAP.check(False, "%s: %s file matches %s" % (name, kind, path), str(e))
        return
    TAP.check(text == want, "%s: %s file matches tests/golden-nccl/%s.%s.xml" % (name, kind, name, kind),
           "" if text == want else "".join(__import__("difflib").unified_diff(
               want.splitlines(True), text.splitlines(True), "expected", "got")))


def one_host(hostfile, work):
    name = os.path.basename(hostfile)[:-5]
    tree = os.path.join(work, name)
    build_host(ARGS.mkfakesysfs, hostfile, tree)
    r = ctl("host", "--sysfs-root", tree, "--json")
    host = json.loads(r.stdout)
    xml_in, devs = make_domain(host)
    inp = os.path.join(work, name + ".xml")
    with open(inp, "w") as f:
        f.write(xml_in)

    h = ctl("host", "--sysfs-root", tree, "--nccl-topo", "--cpu", CPU)
    g = ctl("nccl-topo", "--sysfs-root", tree, "--policy", "require", "--cpu", CPU, inp)
    if not devs:
        TAP.check(h.returncode == 1 and "no GPU or RDMA NIC" in h.stderr,
               "%s: no GPU or RDMA NIC: host --nccl-topo exits 1 saying so" % name, h.stderr)
        TAP.check(g.returncode == 1 and "no GPU or RDMA NIC" in g.stderr,
               "%s: no GPU or RDMA NIC: nccl-topo exits 1 saying so" % name, g.stderr)
        return
    # A host whose GPUs and NICs NCCL could not load (more than MAX_SUBS
    # below one element): exit 1 saying so, the count checked here.
    per_node = {}
    for d in devs:
        per_node[d["node"]] = per_node.get(d["node"], 0) + 1
    if max(per_node.values()) > NCCL_MAX_SUBS and all(len(d["upstream"]) < 2 for d in devs):
        TAP.check(h.returncode == 1 and "MAX_SUBS" in h.stderr and h.stdout == "",
               "%s: %d devices below one <cpu>: host --nccl-topo exits 1 naming NCCL's limit" % (name, max(per_node.values())),
               h.stderr)
    else:
        TAP.check(h.returncode == 0 and not format_problems(h.stdout),
               "%s: host file: exit 0, NCCL's format" % name, h.stderr + "\n".join(format_problems(h.stdout)))
    if h.returncode == 0:
        golden(name, "host", h.stdout)
        check_host(name, tree, host, h.stdout, devs)
    p = json.loads(ctl("plan", "--sysfs-root", tree, "--policy", "require", "--format", "json", inp).stdout)
    if p["verdict"] != "apply":
        TAP.check(g.returncode == 1 and p["reason"] in g.stderr and g.stdout == "",
               "%s: the plan is refused: nccl-topo exits 1 with the plan's reason" % name, g.stderr)
        return
    TAP.check(g.returncode == 0 and not format_problems(g.stdout),
           "%s: guest file: exit 0, NCCL's format" % name, g.stderr + "\n".join(format_problems(g.stdout)))
    if g.returncode != 0:
        return
    golden(name, "guest", g.stdout)
    check_guest(name, tree, g.stdout, p, xml_in)
    planned = ctl("plan", "--sysfs-root", tree, "--policy", "require", inp)
    again = ctl("nccl-topo", "--sysfs-root", tree, "--policy", "require", "--cpu", CPU, "-", stdin=planned.stdout)
    TAP.check(planned.returncode == 0 and again.returncode == 0 and again.stdout == g.stdout,
           "%s: the planned domain gives the same guest file" % name, again.stderr)

    # Delivery (nccl_topology, on by default): the planned domain carries
    # the file as QEMU's -fw_cfg; its text, commas undoubled and newlines
    # as spaces, is what nccl-topo prints without --cpu.
    plain = ctl("nccl-topo", "--sysfs-root", tree, "--policy", "require", inp)
    args = fw_cfg_args(planned.stdout)
    want = FWCFG_PREFIX + plain.stdout.replace(",", ",,").replace("\n", " ").rstrip(" ")
    TAP.check(args == [want], "%s: the planned domain gives the guest the file as fw_cfg %s" % (name, FWCFG_NAME),
           "got %d -fw_cfg %s\n%s" % (len(args), FWCFG_NAME, "\n".join(a[:200] for a in args)))
    rv = ctl("revert", "-", stdin=planned.stdout)
    TAP.check(rv.returncode == 0 and FWCFG_NAME not in rv.stdout and "qemu:commandline" not in rv.stdout,
           "%s: revert removes the fw_cfg and the <qemu:commandline> pcinuma created" % name, rv.stderr)
    off = os.path.join(work, "nccl-off.json")
    with open(off, "w") as f:
        json.dump({"default": {"policy": "require", "nccl_topology": False}}, f)
    p_off = ctl("plan", "--sysfs-root", tree, "--policy-file", off, inp)
    TAP.check(p_off.returncode == 0 and not fw_cfg_args(p_off.stdout) and FWCFG_NAME not in p_off.stdout,
           "%s: nccl_topology false: no fw_cfg" % name, p_off.stderr)
    ex = ctl("plan", "--sysfs-root", tree, "--policy", "require", "--format", "explain", inp)
    TAP.check("NCCL topology file: given to the guest as fw_cfg " + FWCFG_NAME in ex.stdout,
           "%s: explain says the file is given to the guest" % name, ex.stdout[-600:])


def bad_input(work):
    tree = os.path.join(work, "p5-like")
    inp = os.path.join(work, "p5-like.xml")
    cases = [
        (["nccl-topo", "--sysfs-root", tree, "--cpu", "Intel", inp], 2, "--cpu 'Intel'"),
        (["nccl-topo", "--sysfs-root", tree, "--cpu", "GenuineIntel,six,1", inp], 2, "--cpu 'GenuineIntel,six,1'"),
        (["nccl-topo", "--sysfs-root", tree, os.path.join(work, "missing.xml")], 2, "missing.xml"),
        (["nccl-topo", "--sysfs-root", os.path.join(work, "no-such-root"), inp], 2, "no-such-root"),
        (["nccl-topo", "--sysfs-root", tree, "--policy", "banana", inp], 2, "unknown policy 'banana'"),
        (["nccl-topo", "--sysfs-root", tree], 2, "Usage: pcinumactl nccl-topo"),
        (["host", "--sysfs-root", tree, "--json", "--nccl-topo"], 2, "--json and --nccl-topo exclude each other"),
        (["host", "--sysfs-root", tree, "--cpu", "none"], 2, "--cpu goes with --nccl-topo"),
        (["nccl-topo", "--sysfs-root", tree, "--policy", "off", "--cpu", "none", inp], 1, "policy off"),
    ]
    for args, code, needle in cases:
        r = ctl(*args)
        TAP.check(r.returncode == code and needle in r.stderr and r.stdout == "",
               "bad input: pcinumactl %s -> exit %d naming %r" % (" ".join(a.replace(work, "W") for a in args), code, needle),
               "exit %d\n%s" % (r.returncode, r.stderr))
    r = ctl("nccl-topo", "--sysfs-root", tree, "-", stdin="<domain><name>x</name")
    TAP.check(r.returncode == 2 and "standard input" in r.stderr and r.stdout == "",
           "bad input: malformed XML -> exit 2 naming standard input", r.stderr)
    # A link speed file with garbage: a warning naming the file, the attribute left out.
    gpu = os.path.realpath(os.path.join(tree, "bus/pci/devices/0000:13:00.0"))
    with open(os.path.join(gpu, "max_link_speed"), "w") as f:
        f.write("fast\n")
    r = ctl("host", "--sysfs-root", tree, "--nccl-topo", "--cpu", "none")
    m, _ = flatten(r.stdout) if r.returncode == 0 else ({}, {})
    TAP.check(r.returncode == 0 and "0000:13:00.0/max_link_speed: 'fast'" in r.stderr
           and "link_speed" not in m.get("0000:13:00.0", (None, {"link_speed": 1}))[1],
           "bad input: a garbage max_link_speed is a warning naming the file, and left out", r.stderr)
    # --cpu none: no CPU identity; the default: this machine's arch.
    r = ctl("host", "--sysfs-root", tree, "--nccl-topo", "--cpu", "none")
    cpu_tags = re.findall(r"<cpu [^>]*>", r.stdout)
    TAP.check(r.returncode == 0 and cpu_tags and not any(" arch=" in t or " vendor=" in t for t in cpu_tags),
           "--cpu none leaves the CPU identity to NCCL", r.stderr)
    r = ctl("host", "--sysfs-root", tree, "--nccl-topo")
    cpu_tags = re.findall(r"<cpu [^>]*>", r.stdout)
    TAP.check(r.returncode == 0 and cpu_tags and not any(" arch=" in t or " vendor=" in t for t in cpu_tags),
           "without --cpu on a fixture tree: no CPU identity (it is this machine's only for its own /sys)",
           r.stdout[:300])


def main():
    global ARGS
    ARGS = golden_host_args(__doc__.splitlines()[0], "tests/golden-nccl", "rewrite the golden files")
    hosts = sorted(glob.glob(os.path.join(ARGS.hosts, "*.json")))
    with work_dir("pcinuma-nccl-") as work:
        for h in hosts:
            one_host(h, work)
        bad_input(work)
    return TAP.finish_plan()


if __name__ == "__main__":
    sys.exit(main())

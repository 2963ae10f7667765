#!/usr/bin/env python3
"""Do no harm on install (issue 25): with no policy file, and with the
policy the package installs (conf/policy.json), no domain that libvirt
starts is refused at start.

    test_no_harm.py --pcinumad PATH --pcinumactl PATH --hook PATH
                    --mkfakesysfs PATH --hosts DIR --golden DIR
                    --policy FILE --workdir DIR

The domains: every golden input (tests/golden/*/input.xml) on its own
fixture host, except the cases the golden suite expects to be bad input
(expected.exit 2: malformed XML, a DTD, a host device assigned twice, cell
ids libvirt refuses too, a nodeset naming a node the host lacks, a broken
pcinuma mark), and shapes made here on six fixture hosts: q35, i440fx
(pc), no machine, no ACPI, no guest cells, one to four cells pinned by
numatune memnode, vcpupin, vcpu cpuset, numatune memory, not pinned at all,
partly pinned, a cell on two nodes, cells on the nodes without devices;
GPUs, NICs, a device without a NUMA node, one the host does not have,
SR-IOV VFs (as <hostdev> and as <interface type='hostdev'>), mdevs, every
passthrough device of the host at once, devices at user-given addresses on
user root ports and sharing a slot, an existing pxb, UEFI firmware, the
domain's own <pcihole64>.  Each made shape passes virt-xml-validate (it is
a domain libvirt accepts).

For each domain and each of the two policies:
  - pcinumactl plan (the policy file `{}`, the built-in defaults; and the
    shipped file) exits 0, and what it prints passes virt-xml-validate;
  - the real pcinuma-hook's prepare begin, against a pcinumad started
    without a policy file (a path that does not exist: the built-in
    default) and one started with the shipped file, exits 0.
The check must be able to fail: the same domains under legacy (the
earlier default) and require must see refusals, and the count is printed.

Prints 'ok N - ...' / 'not ok N - ...' and exits non-zero on a failure."""

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from pcinumatest.daemon import terminate
from pcinumatest.tap import Tap

HOSTS = ("sample-4n", "two-socket", "single-node", "snc2", "bmc-vga", "p5-like")
UNKNOWN_BDF = "0000:ee:00.0"
TAP = Tap(diag_first=40)
check = TAP.check


def run(argv, stdin=None, env=None, timeout=60):
    return subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=timeout)


# ---- domains ------------------------------------------------------------------

def addr(bdf):
    dom, bus, rest = bdf.split(":")
    slot, fn = rest.split(".")
    return "domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'" % (dom, bus, slot, fn)


def hostdev(bdf, guest=None):
    g = "\n      <address type='pci' %s/>" % guest if guest else ""
    return ("    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
            "      <source>\n        <address %s/>\n      </source>%s\n    </hostdev>\n" % (addr(bdf), g))


def mdev(uuid):
    return ("    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
            "      <source>\n        <address uuid='%s'/>\n      </source>\n    </hostdev>\n" % uuid)


def iface_hostdev(bdf, n):
    return ("    <interface type='hostdev' managed='yes'>\n      <mac address='52:54:00:aa:00:%02x'/>\n"
            "      <source>\n        <address type='pci' %s/>\n      </source>\n    </interface>\n" % (n, addr(bdf)))


def domain(name, devices, machine="q35", acpi=True, cells=2, pin="memnode", nodes=(0,), cpus_of=None,
           firmware=None, controllers="", pcihole64=None):
    """A domain XML: 'cells' guest cells of two vCPUs and 128 MiB each,
    pinned as 'pin' says to the host nodes 'nodes' (cell i on
    nodes[i % len]), and the given <devices> text."""
    vcpus = max(2, 2 * cells)
    os_attr = " machine='%s'" % machine if machine else ""
    fw = " firmware='efi'" if firmware == "efi" else ""
    x = ["<domain type='kvm'>", "  <name>%s</name>" % name, "  <memory unit='MiB'>%d</memory>" % (128 * max(cells, 1))]
    if pin == "cpuset":
        x.append("  <vcpu placement='static' cpuset='%s'>%d</vcpu>" % (cpus_of(nodes[0]), vcpus))
    else:
        x.append("  <vcpu placement='static'>%d</vcpu>" % vcpus)
    if pin == "vcpupin":
        x.append("  <cputune>")
        for v in range(vcpus):
            x.append("    <vcpupin vcpu='%d' cpuset='%s'/>" % (v, cpus_of(nodes[(v // 2) % len(nodes)])))
        x.append("  </cputune>")
    x += ["  <os%s>" % fw, "    <type arch='x86_64'%s>hvm</type>" % os_attr, "  </os>"]
    if acpi:
        x += ["  <features>", "    <acpi/>", "    <apic/>", "  </features>"]
    if cells:
        x += ["  <cpu mode='host-passthrough'>", "    <numa>"]
        for c in range(cells):
            x.append("      <cell id='%d' cpus='%d-%d' memory='128' unit='MiB'/>" % (c, 2 * c, 2 * c + 1))
        x += ["    </numa>", "  </cpu>"]
    if pin in ("memnode", "partial", "multi"):
        x.append("  <numatune>")
        for c in range(cells if pin != "partial" else 1):
            ns = "%d" % nodes[c % len(nodes)]
            if pin == "multi" and c == 0 and len(nodes) > 1:
                ns = "%d,%d" % (nodes[0], nodes[1])
            x.append("    <memnode cellid='%d' mode='strict' nodeset='%s'/>" % (c, ns))
        x.append("  </numatune>")
    elif pin == "memory":
        x += ["  <numatune>", "    <memory mode='strict' nodeset='%d'/>" % nodes[0], "  </numatune>"]
    x += ["  <devices>", "    <emulator>/usr/bin/qemu-system-x86_64</emulator>"]
    if pcihole64:
        x += ["    <controller type='pci' index='0' model='pcie-root'>",
              "      <pcihole64 unit='GiB'>%d</pcihole64>" % pcihole64, "    </controller>"]
    x.append(controllers.rstrip("\n")) if controllers else None
    x.append("".join(devices).rstrip("\n"))
    x += ["    <memballoon model='virtio'/>", "  </devices>", "</domain>", ""]
    return "\n".join(l for l in x if l is not None)


def shapes(hostname, host):
    """(name, xml) of the shapes made for one fixture host."""
    nodes = [n["id"] for n in host["nodes"]] or [0]
    cpus = {n["id"]: n["cpus"] for n in host["nodes"]}

    def cpus_of(node):
        return cpus.get(node, "0-1").split(",")[0]
    pci = [d for d in host["devices"]]
    vfs = [d["bdf"] for d in pci if d.get("physfn")]
    pfs = [d for d in pci if not d.get("physfn")]
    gpus = [d["bdf"] for d in pfs if d["class"].startswith("0x03")]
    nics = [d["bdf"] for d in pfs if d["class"].startswith("0x02")]
    nonode = [d["bdf"] for d in pfs if d["node"] < 0]
    dev_nodes = sorted({d["node"] for d in pfs if d["node"] >= 0})
    empty_nodes = [n for n in nodes if n not in dev_nodes] or nodes[-1:]
    mdevs = [m["uuid"] for m in host.get("mdevs", [])]
    some = (gpus[:2] + nics[:2]) or [d["bdf"] for d in pfs[:2]]
    every = [d["bdf"] for d in pfs]
    out = []

    def add(tag, devs, **kw):
        name = "%s-%s" % (hostname, tag)
        # a BDF, or a device's XML text
        devs = [hostdev(b) if not b.lstrip().startswith("<") else b for b in devs]
        out.append((name, domain(name, devs, cpus_of=cpus_of, **kw)))
    n = len(nodes)
    for cells in sorted({1, 2, n, 4}):
        add("memnode-%dc" % cells, some, cells=cells, nodes=dev_nodes or nodes)
    add("unpinned", some, cells=2, pin="none")
    add("unpinned-1c", every, cells=1, pin="none")
    add("partial", some, cells=2, pin="partial", nodes=dev_nodes or nodes)
    add("multi-node-cell", some, cells=2, pin="multi", nodes=nodes)
    add("vcpupin", some, cells=2, pin="vcpupin", nodes=dev_nodes or nodes)
    add("cpuset", some, cells=1, pin="cpuset", nodes=dev_nodes or nodes)
    add("numatune-memory", some, cells=1, pin="memory", nodes=dev_nodes or nodes)
    add("cells-elsewhere", some, cells=2, nodes=empty_nodes)
    add("no-cells", some, cells=0, pin="none")
    add("no-acpi", some, acpi=False, nodes=dev_nodes or nodes)
    add("i440fx", some, machine="pc", nodes=dev_nodes or nodes)
    add("no-machine", some, machine=None, nodes=dev_nodes or nodes)
    add("efi", some, firmware="efi", nodes=dev_nodes or nodes)
    add("efi-unpinned", every, firmware="efi", pin="none")
    add("own-pcihole64", some, pcihole64=64, nodes=dev_nodes or nodes)
    add("every-device", every, cells=n, nodes=nodes)
    add("every-device-unpinned", every, cells=n, pin="none")
    add("unknown-device", [UNKNOWN_BDF] + some, nodes=dev_nodes or nodes)
    if nonode:
        add("no-node", nonode + some, nodes=dev_nodes or nodes)
        add("only-no-node", nonode, nodes=nodes)
    if vfs:
        add("vfs", vfs[:4], nodes=dev_nodes or nodes)
        out.append(("%s-iface-hostdev" % hostname,
                    domain("%s-iface-hostdev" % hostname, [iface_hostdev(b, i) for i, b in enumerate(vfs[:3])],
                           cpus_of=cpus_of, nodes=dev_nodes or nodes)))
    if mdevs:
        add("mdevs", [mdev(u) for u in mdevs] + [hostdev(b) for b in some], nodes=dev_nodes or nodes)
        add("mdevs-unpinned", [mdev(u) for u in mdevs], pin="none")
    # User root ports, a device at function 0 sharing its slot with one
    # that stays, an existing pxb.
    ports = ("    <controller type='pci' index='1' model='pcie-root-port'>\n"
             "      <address type='pci' domain='0x0000' bus='0x00' slot='0x02' function='0x0'/>\n    </controller>\n"
             "    <controller type='pci' index='2' model='pcie-root-port'>\n"
             "      <address type='pci' domain='0x0000' bus='0x00' slot='0x03' function='0x0'/>\n    </controller>\n")
    devs = [hostdev(some[0], "domain='0x0000' bus='0x01' slot='0x00' function='0x0' multifunction='on'")]
    devs.append(hostdev(UNKNOWN_BDF, "domain='0x0000' bus='0x01' slot='0x00' function='0x1'"))
    if len(some) > 1:
        devs.append(hostdev(some[1], "domain='0x0000' bus='0x02' slot='0x00' function='0x0'"))
    add("user-ports-shared-slot", devs, controllers=ports, nodes=dev_nodes or nodes)
    pxb = ("    <controller type='pci' index='1' model='pcie-expander-bus'>\n      <model name='pxb-pcie'/>\n"
           "      <target busNr='200'>\n        <node>0</node>\n      </target>\n"
           "      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>\n    </controller>\n")
    add("existing-pxb", some, controllers=pxb, nodes=dev_nodes or nodes)
    return out


# ---- pcinumad -----------------------------------------------------------------

class Daemon:
    def __init__(self, a, sysfs, policy_file, tmp, tag):
        self.sock = os.path.join(tmp, "%s.sock" % tag)
        self.conf = os.path.join(tmp, "%s.conf" % tag)
        with open(self.conf, "w") as f:
            f.write("socket = %s\ntimeout_ms = 20000\non_unreachable = refuse\n" % self.sock)
        self.log = open(os.path.join(tmp, "%s.log" % tag), "w")
        self.proc = subprocess.Popen([a.pcinumad, "--sysfs-root", sysfs, "--policy-file", policy_file,
                                      "--socket", self.sock, "--libvirt-uri", "none", "--log-target", "stderr"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("pcinumad exited %d (log %s)" % (self.proc.returncode, self.log.name))
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.sock)
                s.close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("pcinumad did not listen on %s" % self.sock)

    def prepare(self, a, name, xml):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "PCINUMA_SOCKET": self.sock,
               "PCINUMA_HOOK_CONF": self.conf}
        return run([a.hook, name, "prepare", "begin", "-"], stdin=xml, env=env)

    def stop(self):
        terminate(self.proc)
        self.log.close()


# ---- main ---------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "golden", "policy", "workdir"):
        ap.add_argument("--" + opt, required=True)
    a = ap.parse_args()
    validate = shutil.which("virt-xml-validate")
    if not check(validate, "virt-xml-validate is installed (scripts/install-deps.sh: libvirt-clients)"):
        return 1
    work = os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tmp = tempfile.mkdtemp(prefix="pcinuma-nh-")
    empty = os.path.join(work, "builtin.json")
    with open(empty, "w") as f:
        f.write("{}\n")
    policies = (("built-in defaults", empty, os.path.join(tmp, "no-such-dir", "policy.json")),
                ("shipped policy", os.path.abspath(a.policy), os.path.abspath(a.policy)))

    # The domains, by fixture host.
    by_host = {}
    for case in sorted(os.listdir(a.golden)):
        d = os.path.join(a.golden, case)
        if not os.path.isfile(os.path.join(d, "input.xml")):
            continue
        exit_file = os.path.join(d, "expected.exit")
        if os.path.exists(exit_file) and open(exit_file).read().strip() == "2":
            continue
        host = open(os.path.join(d, "host")).read().strip()
        by_host.setdefault(host, []).append(("golden/" + case, open(os.path.join(d, "input.xml")).read()))
    made = 0
    invalid = []
    for h in HOSTS:
        sysfs = os.path.join(work, "hosts", h)
        r = run([sys.executable, a.mkfakesysfs, os.path.join(a.hosts, h + ".json"), sysfs])
        if not check(r.returncode == 0, "fixture host %s built" % h, r.stdout + r.stderr):
            return 1
        hj = json.loads(run([a.pcinumactl, "host", "--sysfs-root", sysfs, "--json"]).stdout)
        for name, xml in shapes(h, hj):
            path = os.path.join(work, name + ".xml")
            with open(path, "w") as f:
                f.write(xml)
            v = run([validate, path, "domain"])
            if v.returncode != 0:
                invalid.append("%s: %s" % (name, (v.stdout + v.stderr).strip()[-400:]))
            by_host.setdefault(h, []).append((name, xml))
            made += 1
    check(not invalid, "the %d shapes made here are valid libvirt domains (virt-xml-validate)" % made,
          "\n".join(invalid))
    total = sum(len(v) for v in by_host.values())
    print("# %d domains: %d golden inputs, %d shapes, on %d fixture hosts" % (total, total - made, made, len(by_host)))

    outputs = {}
    contrast = {"legacy": 0, "require": 0}
    try:
        for label, plan_file, daemon_file in policies:
            refused_plan, refused_start, failed, beyond = [], [], [], []
            for h, domains in sorted(by_host.items()):
                sysfs = os.path.join(work, "hosts", h)
                if not os.path.isdir(sysfs):
                    r = run([sys.executable, a.mkfakesysfs, os.path.join(a.hosts, h + ".json"), sysfs])
                    if r.returncode != 0:
                        failed.append("%s: mkfakesysfs: %s" % (h, r.stdout))
                        continue
                d = Daemon(a, sysfs, daemon_file, tmp, "%s-%d" % (h, len(outputs)))
                try:
                    for name, xml in domains:
                        p = run([a.pcinumactl, "plan", "--sysfs-root", sysfs, "--policy-file", plan_file, "-"], stdin=xml)
                        if p.returncode != 0 and "more than this host has to give" in p.stderr:
                            # A domain naming more host devices than the host
                            # has (docs/security.md, "Bounded work"): not
                            # planned, and its start goes ahead unchanged
                            # with a warning (the prepare check below).
                            beyond.append(name)
                        elif p.returncode != 0:
                            refused_plan.append("%s: exit %d: %s" % (name, p.returncode, p.stderr.strip()[:300]))
                        else:
                            outputs.setdefault(hashlib.sha256(p.stdout.encode()).hexdigest(), (name, p.stdout))
                        r = d.prepare(a, name.split("/")[-1], xml)
                        if r.returncode != 0:
                            refused_start.append("%s: exit %d: %s" % (name, r.returncode, r.stderr.strip()[:300]))
                        if label == policies[0][0]:
                            for mode in contrast:
                                q = run([a.pcinumactl, "plan", "--sysfs-root", sysfs, "--policy", mode, "-"], stdin=xml)
                                contrast[mode] += q.returncode == 1
                finally:
                    d.stop()
            check(not failed, "%s: the fixture hosts are there" % label, "\n".join(failed))
            check(not refused_plan, "%s: pcinumactl plan refuses none of the %d domains (%d beyond the host's "
                  "device count left unplanned, their starts checked below)" % (label, total, len(beyond)),
                  "\n".join(refused_plan))
            check(not refused_start, "%s: the prepare hook (pcinumad %s) refuses none of the %d domains"
                  % (label, "without a policy file" if label == policies[0][0] else "with " + daemon_file, total),
                  "\n".join(refused_start))
        print("# the same domains under legacy (the earlier default): %d refused; under require: %d refused"
              % (contrast["legacy"], contrast["require"]))
        check(contrast["legacy"] > 0 and contrast["require"] > contrast["legacy"],
              "the check can fail: legacy refuses %d of them, require %d" % (contrast["legacy"], contrast["require"]))
        bad = []
        for key, (name, xml) in sorted(outputs.items()):
            path = os.path.join(work, "out-%s.xml" % key[:16])
            with open(path, "w") as f:
                f.write(xml)
            v = run([validate, path, "domain"])
            if v.returncode != 0:
                bad.append("%s: %s" % (name, (v.stdout + v.stderr).strip()[-400:]))
        check(not bad, "the %d distinct planned outputs pass virt-xml-validate" % len(outputs), "\n".join(bad))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TAP.finish()


if __name__ == "__main__":
    sys.exit(main())

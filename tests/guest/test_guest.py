#!/usr/bin/env python3
"""Guest end-to-end suite (design.md §12 "Guest end-to-end").

    test_guest.py --pcinumactl PATH --mkfakesysfs PATH --hosts DIR \
                  --source DIR --workdir DIR [--boot-timeout S] [--filter X]

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

The required tools are NOT optional here: a missing kernel, busybox-static,
cpio, qemu-system-x86_64, libvirtd, virsh or the kernel's virtio_net modules
is a failure (they are installed by scripts/install-deps.sh), never a skip.

Output: "ok N - ..." / "not ok N - ..." lines, "#" diagnostics (the guest's
own lines as "# guest: ..."), final line "N passed, M failed"; exit 1 on any
failure.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pathtype                 # noqa: E402  (tests/guest/pathtype.py)

NS_PCINUMA = "urn:pcinuma:topology:1"
ET.register_namespace("pcinuma", NS_PCINUMA)

BEGIN = "=== PCINUMA GUEST REPORT BEGIN ==="
END = "=== PCINUMA GUEST REPORT END ==="
STANDIN_ID = "1af4:1044"        # virtio-rng, modern (virtio 1.0) device id
NET_ID = "1af4:1041"            # virtio-net, modern
TOOL_TIMEOUT = 60
CELL_MIB = 64

# virtio_net and what it needs, in load order (busybox insmod does not
# resolve dependencies).  find_prereqs() checks the order against the
# kernel's modules.dep.
NET_MODULES = ["virtio_ring", "virtio", "virtio_pci_modern_dev",
               "virtio_pci_legacy_dev", "virtio_pci", "failover",
               "net_failover", "virtio_net", "qemu_fw_cfg"]
# Where the guest finds the NCCL topology file pcinuma gives it (nccl_topology).
ET.register_namespace("qemu", "http://libvirt.org/schemas/domain/qemu/1.0")
NCCL_FWCFG = "/sys/firmware/qemu_fw_cfg/by_name/opt/org.pcinuma/nccl-topo.xml/raw"
NET_CMDLINE = "pcinuma.net=1"

# The guest's /init.  Every report line starts with "@@ " so kernel
# messages that might reach the console can never be mistaken for one.
# With pcinuma.net=1 on the command line it loads the virtio-net modules and
# reports each interface: its MAC (which names the host device it stands
# for), its device link resolved as NCCL resolves it, and numa_node.
INIT_SCRIPT = r"""#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
[ -c /dev/console ] && exec </dev/console >/dev/console 2>&1
echo "@BEGIN@"
echo "@@ kernel $(cat /proc/sys/kernel/osrelease) cmdline: $(cat /proc/cmdline)"
echo "@@ acpi tables: $(ls /sys/firmware/acpi/tables 2>/dev/null | tr '\n' ' ')"
for d in /sys/bus/pci/devices/*; do
    [ -e "$d" ] || continue
    n=-
    [ -r "$d/numa_node" ] && n=$(cat "$d/numa_node")
    echo "@@ pci ${d##*/} class=$(cat "$d/class") id=$(cat "$d/vendor"):$(cat "$d/device") numa_node=$n path=$(readlink -f "$d")"
done
for n in /sys/devices/system/node/node*; do
    [ -r "$n/distance" ] || continue
    echo "@@ node ${n##*/} cpulist=$(cat "$n/cpulist") distance=$(cat "$n/distance")"
done
case " $(cat /proc/cmdline) " in
*" @NETARG@ "*)
    for m in @MODULES@; do
        insmod "/lib/modules/$m.ko"
        echo "@@ insmod $m rc=$?"
    done
    for i in /sys/class/net/*; do
        [ -e "$i/device" ] || continue
        p=$(readlink -f "$i/device")
        q=${p%/virtio*}
        n=-
        [ -r "$q/numa_node" ] && n=$(cat "$q/numa_node")
        echo "@@ net ${i##*/} address=$(cat "$i/address") numa_node=$n path=$p"
    done
    f=@NCCL@
    if [ -r "$f" ]; then echo "@@ nccl $(cat "$f")"; else echo "@@ nccl-missing"; fi
    ;;
esac
echo "@END@"
poweroff -f
sleep 5
echo o > /proc/sysrq-trigger
""".replace("@BEGIN@", BEGIN).replace("@END@", END) \
   .replace("@NETARG@", NET_CMDLINE).replace("@MODULES@", " ".join(NET_MODULES)) \
   .replace("@NCCL@", NCCL_FWCFG)

APPLETS = ["sh", "mount", "cat", "readlink", "echo", "poweroff", "sleep",
           "ls", "tr", "insmod"]

CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1"


# ---------------------------------------------------------------- output
class Tap:
    def __init__(self):
        self.n = 0
        self.passed = 0
        self.failed = 0
        self.todo = 0

    def ok(self, cond, name, diag=None, todo=None):
        """todo: a reason; a failure is then reported as a TAP TODO and
        does not fail the run (PCINUMA_GUEST_PATHS=report)."""
        self.n += 1
        if cond:
            self.passed += 1
            print("ok %d - %s" % (self.n, name))
        elif todo:
            self.todo += 1
            print("not ok %d - %s # TODO %s" % (self.n, name, todo))
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, name))
        if diag and not cond:
            self.diag(diag)
        sys.stdout.flush()
        return cond

    @staticmethod
    def diag(text):
        for line in str(text).rstrip("\n").splitlines() or [""]:
            print("# " + line)
        sys.stdout.flush()

    def summary(self):
        if self.todo:
            print("# %d failures reported only (TODO), not counted"
                  % self.todo)
        print("%d passed, %d failed" % (self.passed, self.failed))
        sys.stdout.flush()


class Fatal(Exception):
    """A failure that makes the rest of a case (or the run) meaningless."""


# ---------------------------------------------------------------- prerequisites
def elf_is_static(path):
    """True when path is an ELF executable without a PT_INTERP header."""
    with open(path, "rb") as f:
        hdr = f.read(64)
        if hdr[:4] != b"\x7fELF" or hdr[4] != 2:      # 64-bit only
            return False
        endian = "little" if hdr[5] == 1 else "big"
        u = lambda b: int.from_bytes(b, endian)
        phoff, phentsize, phnum = u(hdr[32:40]), u(hdr[54:56]), u(hdr[56:58])
        f.seek(phoff)
        for _ in range(phnum):
            ph = f.read(phentsize)
            if u(ph[0:4]) == 3:                         # PT_INTERP
                return False
    return True


def version_key(path):
    return [int(x) if x.isdigit() else x
            for x in re.split(r"(\d+)", os.path.basename(path))]


def find_prereqs(tap):
    """Check every tool the suite needs; return a dict of paths, or raise
    Fatal naming everything that is missing."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "libvirt"))
    from session import find_tool          # noqa: E402
    hint = ("install them with scripts/install-deps.sh (Debian packages "
            "linux-image-amd64, busybox-static, cpio, qemu-system-x86, "
            "libvirt-daemon-driver-qemu, libvirt-clients)")
    missing = []
    found = {}

    kernels = sorted((k for k in glob.glob("/boot/vmlinuz-*")
                      if os.path.isfile(k)), key=version_key)
    if not kernels:
        missing.append("a kernel /boot/vmlinuz-* (package linux-image-amd64)")
    else:
        found["kernel"] = kernels[-1]
        if not os.access(kernels[-1], os.R_OK):
            missing.append("read access to %s (mode %o; run the suite as root)"
                           % (kernels[-1], os.stat(kernels[-1]).st_mode & 0o7777))

    if "kernel" in found:
        ver = os.path.basename(found["kernel"])[len("vmlinuz-"):]
        mods, why = find_modules(ver)
        if why:
            missing.append(why)
        else:
            found["modules"] = mods

    bb = None
    for c in ("/bin/busybox", "/usr/bin/busybox", shutil.which("busybox")):
        if c and os.path.isfile(c):
            bb = c
            break
    if not bb:
        missing.append("busybox (package busybox-static)")
    elif not elf_is_static(bb):
        missing.append("a STATIC busybox: %s is dynamically linked "
                       "(install busybox-static instead of busybox)" % bb)
    else:
        found["busybox"] = bb

    for tool, pkg in (("cpio", "cpio"),
                      ("qemu-system-x86_64", "qemu-system-x86"),
                      ("libvirtd", "libvirt-daemon"),
                      ("virsh", "libvirt-clients")):
        p = find_tool(tool)
        if not p:
            missing.append("%s (package %s)" % (tool, pkg))
        found[tool] = p
    if not os.path.exists("/usr/bin/qemu-system-x86_64"):
        missing.append("/usr/bin/qemu-system-x86_64 (package qemu-system-x86)")
    if missing:
        tap.ok(False, "prerequisites: kernel, busybox-static, cpio, qemu, "
               "libvirtd, virsh",
               "MISSING: %s\n%s" % ("; ".join(missing), hint))
        raise Fatal("missing prerequisites")
    tap.ok(True, "prerequisites: kernel %s with its modules %s, static "
           "busybox %s, cpio, qemu-system-x86_64, libvirtd, virsh"
           % (os.path.basename(found["kernel"]),
              ", ".join(os.path.basename(p) for _n, p in found["modules"]),
              found["busybox"]))
    return found


def find_modules(ver):
    """The files of NET_MODULES for kernel ver, from its modules.dep.
    Returns ([(name, path)], None) or (None, why).  Checks that the load
    order satisfies modules.dep, since busybox insmod does not."""
    moddir = os.path.join("/lib/modules", ver)
    pkg = "package linux-image-%s" % ver
    try:
        with open(os.path.join(moddir, "modules.dep")) as f:
            dep_lines = f.read().splitlines()
    except OSError as e:
        return None, "%s/modules.dep (%s): %s" % (moddir, pkg, e.strerror)
    deps = {}
    files = {}
    for ln in dep_lines:
        if ":" not in ln:
            continue
        mod, rest = ln.split(":", 1)
        name = re.sub(r"\.ko(\.(xz|gz|zst))?$", "", os.path.basename(mod))
        files[name.replace("-", "_")] = os.path.join(moddir, mod)
        deps[name.replace("-", "_")] = [
            re.sub(r"\.ko(\.(xz|gz|zst))?$", "",
                   os.path.basename(d)).replace("-", "_")
            for d in rest.split()]
    out = []
    for i, m in enumerate(NET_MODULES):
        if m not in files or not os.path.isfile(files[m]):
            return None, "module %s of kernel %s (%s)" % (m, ver, pkg)
        late = [d for d in deps[m] if d not in NET_MODULES[:i]]
        if late:
            return None, ("module %s of kernel %s needs %s, which the guest "
                          "would not load before it (fix NET_MODULES)"
                          % (m, ver, ", ".join(late)))
        out.append((m, files[m]))
    return out, None


def module_bytes(path):
    """A module file's ELF bytes: busybox insmod takes plain .ko only."""
    if path.endswith(".xz"):
        import lzma
        with lzma.open(path) as f:
            return f.read()
    if path.endswith(".gz"):
        import gzip
        with gzip.open(path) as f:
            return f.read()
    if path.endswith(".zst"):
        r = subprocess.run(["zstd", "-dc", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TOOL_TIMEOUT)
        if r.returncode != 0:
            raise Fatal("zstd -dc %s: %s" % (path, r.stderr.decode(
                errors="replace").strip()))
        return r.stdout
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- initramfs
def build_initramfs(workdir, busybox, cpio, modules=()):
    """The guest's initramfs: static busybox, /init, and modules ([(name,
    path)], decompressed to /lib/modules/NAME.ko).  Returns (path, number of
    entries)."""
    root = os.path.join(workdir, "initramfs-root")
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "dev", "proc", "sys", "lib/modules"):
        os.makedirs(os.path.join(root, d), 0o755)
    for name, path in modules:
        data = module_bytes(path)
        if data[:4] != b"\x7fELF":
            raise Fatal("%s does not decompress to an ELF module" % path)
        with open(os.path.join(root, "lib", "modules", name + ".ko"),
                  "wb") as f:
            f.write(data)
    shutil.copyfile(busybox, os.path.join(root, "bin", "busybox"))
    os.chmod(os.path.join(root, "bin", "busybox"), 0o755)
    for a in APPLETS:
        os.symlink("busybox", os.path.join(root, "bin", a))
    with open(os.path.join(root, "init"), "w") as f:
        f.write(INIT_SCRIPT)
    os.chmod(os.path.join(root, "init"), 0o755)
    names = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            names.append(os.path.relpath(os.path.join(dirpath, n), root))
    names.sort()
    r = subprocess.run([cpio, "-o", "-H", "newc", "-R", "0:0", "--quiet"],
                       input=("\n".join(names) + "\n").encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=root, timeout=TOOL_TIMEOUT)
    if r.returncode != 0:
        raise Fatal("cpio failed (%d): %s" % (r.returncode,
                                             r.stderr.decode(errors="replace")))
    import gzip
    out = os.path.join(workdir, "initramfs.cpio.gz")
    with open(out, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=6,
                           fileobj=raw, mtime=0) as f:
            f.write(r.stdout)
    return out, len(names)


# ---------------------------------------------------------------- helpers
def run(argv, timeout=TOOL_TIMEOUT):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def hexint(s):
    return int(s, 16) if s.lower().startswith("0x") else int(s, 0)


def addr_str(a):
    """libvirt <address> -> 'dddd:bb:ss.f' (bus = controller index)."""
    return "%04x:%02x:%02x.%x" % (hexint(a.get("domain", "0")),
                                  hexint(a.get("bus", "0")),
                                  hexint(a.get("slot", "0")),
                                  hexint(a.get("function", "0")))


def source_bdf(el):
    """Host BDF of a <hostdev type='pci'> / <interface type='hostdev'>."""
    a = el.find("source/address")
    if a is None or a.get("uuid"):
        return None
    return addr_str(a)


def is_passthrough(el):
    if el.tag == "hostdev":
        return el.get("type") in ("pci", "mdev")
    return el.tag == "interface" and el.get("type") == "hostdev"


# ---------------------------------------------------------------- domains
SAMPLE_CELLS = """
  <cpu mode='custom' match='exact'>
    <model fallback='allow'>qemu64</model>
    <numa>
      <cell id='0' cpus='0-3' memory='256' unit='MiB'/>
      <cell id='1' cpus='4-7' memory='256' unit='MiB'/>
      <cell id='2' cpus='8-11' memory='256' unit='MiB'/>
      <cell id='3' cpus='12-15' memory='256' unit='MiB'/>
    </numa>
  </cpu>
  <numatune>
    <memnode cellid='0' mode='strict' nodeset='0'/>
    <memnode cellid='1' mode='strict' nodeset='1'/>
    <memnode cellid='2' mode='strict' nodeset='2'/>
    <memnode cellid='3' mode='strict' nodeset='3'/>
  </numatune>"""


def hostdev_xml(bdf):
    d, b, sf = bdf.split(":")
    s, f = sf.split(".")
    return ("    <hostdev mode='subsystem' type='pci' managed='yes'><source>"
            "<address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>"
            "</source></hostdev>\n" % (d, b, s, f))


# (b) SNC2, one socket with nodes 0 and 1; the guest has two cells but only
# cell 1 is backed (by host node 0).  Under `socket` the node-0 devices go to
# cell 1 as local, the node-1 devices as "same socket, nearest".
CASE_B_XML = """<domain type='qemu'>
  <name>guest-b</name>
  <memory unit='MiB'>256</memory>
  <vcpu placement='static'>4</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <features><acpi/><apic/></features>
  <cpu mode='custom' match='exact'>
    <model fallback='allow'>qemu64</model>
    <numa>
      <cell id='0' cpus='0-1' memory='128' unit='MiB'/>
      <cell id='1' cpus='2-3' memory='128' unit='MiB'/>
    </numa>
  </cpu>
  <numatune>
    <memnode cellid='1' mode='strict' nodeset='0'/>
  </numatune>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
%s    <memballoon model='virtio'/>
  </devices>
</domain>
""" % "".join(hostdev_xml(b) for b in ("0000:21:00.0", "0000:22:00.0",
                                        "0000:41:00.0", "0000:42:00.0"))

# (c) legacy: an NVMe with no NUMA node (stays on pcie.0) beside one local
# device per node, one of them an <interface type='hostdev'>.
CASE_C_XML = """<domain type='qemu'>
  <name>guest-c</name>
  <memory unit='MiB'>1024</memory>
  <vcpu placement='static'>16</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <features><acpi/><apic/></features>%s
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
%s    <interface type='hostdev' managed='yes'>
      <mac address='52:54:00:00:38:00'/>
      <source><address type='pci' domain='0x0000' bus='0x38' slot='0x00' function='0x0'/></source>
    </interface>
%s    <memballoon model='virtio'/>
  </devices>
</domain>
""" % (SAMPLE_CELLS,
       "".join(hostdev_xml(b) for b in ("0000:01:00.0", "0000:13:00.0")),
       "".join(hostdev_xml(b) for b in ("0000:54:00.0", "0000:77:00.0")))


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


# ---------------------------------------------------------------- boot XML
def mac_for(bdf):
    """The stand-in's MAC for host device bdf: 52:54 (locally administered,
    unicast, as QEMU's own 52:54:00), then the PCI domain (16 bits), bus and
    devfn, so 0000:b2:00.1 -> 52:54:00:00:b2:01.  The guest's
    /sys/class/net/*/address then names the host device."""
    try:
        dom, bus, sf = bdf.split(":")
        slot, fn = sf.split(".")
        d, b = int(dom, 16), int(bus, 16)
        devfn = int(slot, 16) << 3 | int(fn, 16)
    except ValueError:
        raise Fatal("a virtio-net stand-in needs a host PCI address, not %r"
                    % bdf)
    if d > 0xffff:
        raise Fatal("host device %s: a PCI domain above ffff does not fit "
                    "the stand-in's MAC" % bdf)
    return "52:54:%02x:%02x:%02x:%02x" % (d >> 8, d & 0xff, b, devfn)


def bdf_for_mac(mac):
    """mac_for()'s inverse; None for a MAC it did not make."""
    x = [int(v, 16) for v in mac.split(":")]
    if len(x) != 6 or x[:2] != [0x52, 0x54]:
        return None
    return "%04x:%02x:%02x.%x" % (x[2] << 8 | x[3], x[4], x[5] >> 3,
                                  x[5] & 7)


def standin_element(kind, alias, host_bdf):
    """A virtio-rng (kind 'rng') or virtio-net (kind 'net') stand-in.  The
    net one is non-transitional (no I/O BAR wherever it sits), has no option
    ROM (direct kernel boot needs none) and user-mode networking (no
    privileges in a session libvirtd)."""
    if kind == "net":
        el = ET.Element("interface", type="user")
        ET.SubElement(el, "mac", address=mac_for(host_bdf))
        ET.SubElement(el, "model", type="virtio-non-transitional")
        ET.SubElement(el, "rom", enabled="no")
    else:
        el = ET.Element("rng", model="virtio")
        ET.SubElement(el, "backend", model="builtin")
    ET.SubElement(el, "alias", name=alias)
    return el


def boot_xml(case, plan_xml, name, kernel, initrd, console, acpi=True,
             extra_cmdline="", standin="rng"):
    """The planned XML, made bootable, with stand-ins (standin: 'rng' or
    'net') for the passthrough devices.  Returns (xml text, [(alias, host
    bdf, planned guest address string or None)])."""
    root = ET.fromstring(plan_xml)
    root.set("type", "qemu")
    root.find("name").text = name
    u = root.find("uuid")
    if u is not None:
        root.remove(u)

    # CPUs/memory: one vCPU and CELL_MIB per cell; drop host pinning
    cells = root.findall("cpu/numa/cell")
    ncells = max(1, len(cells))
    for i, c in enumerate(cells):
        c.set("cpus", str(i))
        c.set("memory", str(CELL_MIB))
        c.set("unit", "MiB")
    for tag in ("numatune", "cputune", "currentMemory"):
        for el in root.findall(tag):
            root.remove(el)
    mem = root.find("memory")
    mem.text = str(CELL_MIB * ncells)
    mem.set("unit", "MiB")
    vcpu = root.find("vcpu")
    vcpu.text = str(ncells)
    for a in ("cpuset", "current"):
        vcpu.attrib.pop(a, None)

    # direct kernel boot
    os_el = root.find("os")
    for tag in ("kernel", "initrd", "cmdline", "boot", "loader", "nvram"):
        for el in os_el.findall(tag):
            os_el.remove(el)
    ET.SubElement(os_el, "kernel").text = kernel
    ET.SubElement(os_el, "initrd").text = initrd
    if standin == "net":
        extra_cmdline = (extra_cmdline + " " + NET_CMDLINE).strip()
    ET.SubElement(os_el, "cmdline").text = (CMDLINE + " " + extra_cmdline).strip()

    feats = root.find("features")
    if not acpi and feats is not None:
        for el in feats.findall("acpi"):
            feats.remove(el)

    for tag in ("on_poweroff", "on_reboot", "on_crash"):
        for el in root.findall(tag):
            root.remove(el)
        ET.SubElement(root, tag).text = "destroy"

    devs = root.find("devices")
    emu = devs.find("emulator")
    if emu is None:
        emu = ET.Element("emulator")
        devs.insert(0, emu)
    emu.text = "/usr/bin/qemu-system-x86_64"
    for tag in ("serial", "console"):
        for el in devs.findall(tag):
            devs.remove(el)

    standins = []
    for pos, el in enumerate(list(devs)):
        if not is_passthrough(el):
            continue
        bdf = source_bdf(el) or ("mdev " + (el.find("source/address").get("uuid")
                                            or "?"))
        alias = "ua-pcinuma-s%d" % len(standins)
        rng = standin_element(standin, alias, bdf)
        a = el.find("address")
        planned = None
        if a is not None and a.get("type", "pci") == "pci":
            na = ET.SubElement(rng, "address")
            # multifunction: the functions of one host device share a slot
            for k in ("type", "domain", "bus", "slot", "function",
                      "multifunction"):
                if a.get(k) is not None:
                    na.set(k, a.get(k))
            na.set("type", "pci")
            planned = addr_str(a)
        rng.tail = el.tail
        devs.remove(el)
        devs.insert(pos, rng)
        standins.append((alias, bdf, planned))

    ser = ET.SubElement(devs, "serial", type="file")
    ET.SubElement(ser, "source", path=console)
    ET.SubElement(ser, "target", port="0")
    return ET.tostring(root, encoding="unicode"), standins


PORT_MODELS = ("pcie-root-port", "pcie-switch-upstream-port",
               "pcie-switch-downstream-port")


def locate(dump_xml, standins):
    """From libvirt's dumpxml: for each stand-in alias, where the guest will
    see it.  Walks the controllers from the stand-in's bus up to its pxb (or
    pcie.0): root port, then any switch ports.  Returns {alias: dict(
    address, hostbridge, pxb_index, pxb_busnr, pxb_node, rp_bdf, hops,
    ports, why)}: hops are the (slot, function) of each port from the root port
    down and last of the device itself, which the guest keeps (it only
    renumbers buses), so they find the device in the guest's sysfs."""
    root = ET.fromstring(dump_xml)
    ctrls = {}
    for c in root.findall("devices/controller[@type='pci']"):
        ctrls[int(c.get("index"))] = c
    out = {}
    for el in root.find("devices"):
        al = el.find("alias")
        if al is None or not (al.get("name") or "").startswith("ua-pcinuma-"):
            continue
        alias = al.get("name")
        info = {"address": None, "why": None}
        out[alias] = info
        a = el.find("address")
        if a is None:
            info["why"] = "no <address> in dumpxml"
            continue
        info["address"] = addr_str(a)
        hops = [(hexint(a.get("slot", "0")), hexint(a.get("function", "0")))]
        ports = []
        idx = hexint(a.get("bus"))
        for _guard in range(len(ctrls) + 1):
            c = ctrls.get(idx)
            model = None if c is None else c.get("model")
            if model == "pcie-root":
                info.update(hostbridge="pci0000:00", pxb_index=None,
                            pxb_busnr=None, pxb_node=None)
                break
            if model == "pcie-expander-bus":
                node = c.find("target/node")
                nr = int(c.find("target").get("busNr"))
                info.update(hostbridge="pci0000:%02x" % nr, pxb_index=idx,
                            pxb_busnr=nr,
                            pxb_node=int(node.text) if node is not None
                            else None)
                break
            if model not in PORT_MODELS:
                info["why"] = "bus %d is a %s, not a PCIe port" % (idx, model)
                break
            ca = c.find("address")
            hops.insert(0, (hexint(ca.get("slot")), hexint(ca.get("function"))))
            ports.insert(0, (idx, model))
            idx = hexint(ca.get("bus"))
        if info["why"]:
            continue
        if not ports or ports[0][1] != "pcie-root-port":
            info["why"] = ("not behind a pcie-root-port (ports: %s)"
                           % ([m for _i, m in ports] or "none"))
            continue
        info["hops"] = hops
        info["ports"] = ports
        info["bus_index"] = ports[-1][0]
        # the root port sits on its pxb's own bus (busNr), or on bus 0
        info["rp_bdf"] = "0000:%02x:%02x.%x" % ((info["pxb_busnr"] or 0,)
                                                + hops[0])
    return out


def find_guest_device(guest_devs, where):
    """The guest devices at libvirt location where (see locate()): under
    its host bridge, with the same slot and function at every level."""
    def devfn(bdf):
        sf = bdf.split(":")[-1]
        s, f = sf.split(".")
        return int(s, 16), int(f, 16)
    hops = where.get("hops") or []
    return [x for x in guest_devs
            if x["hostbridge"] == where.get("hostbridge")
            and len(x["chain"]) == 1 + len(hops)
            and all(devfn(x["chain"][k + 1]) == hops[k]
                    for k in range(len(hops)))]


# ---------------------------------------------------------------- guest
REPORT_RE = re.compile(r"@@ pci (\S+) class=(\S+) id=(\S+) numa_node=(\S+) "
                       r"path=(\S+)")


def parse_report(text):
    """-> (list of device dicts, list of raw '@@' lines) from the console."""
    text = text.replace("\r", "")
    i = text.find(BEGIN)
    j = text.find(END, i + 1)
    body = text[i + len(BEGIN):j] if i >= 0 and j >= 0 else ""
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    devs = []
    for ln in lines:
        m = REPORT_RE.match(ln)
        if not m:
            continue
        bdf, cls, vid, numa, path = m.groups()
        parts = path.split("/")
        # /sys/devices/pci0000:XX/<bdf>/.../<bdf>
        chain = parts[3:] if parts[:3] == ["", "sys", "devices"] else parts
        vid = ":".join(x[2:] if x.lower().startswith("0x") else x
                       for x in vid.split(":"))
        devs.append({"bdf": bdf, "class": cls, "id": vid, "numa": numa,
                     "path": path, "chain": chain,
                     "hostbridge": chain[0] if chain else None,
                     "parent": chain[-2] if len(chain) >= 2 else None})
    return devs, lines


class Guest:
    """One booted domain: define, start, wait for the report, clean up."""

    def __init__(self, sess, name, xml, console, timeout):
        self.s = sess
        self.name = name
        self.xml = xml
        self.console = console
        self.timeout = timeout
        self.defined = False
        self.boot_s = None
        self.console_text = ""
        self.state = None

    def define(self):
        path = self.s.write(self.xml, name="%s.xml" % self.name)
        r = self.s.virsh("define", path, quiet=False)
        if r.returncode != 0:
            raise Fatal("virsh define failed: %s" % (r.stderr.strip()
                                                    or r.stdout.strip()))
        self.defined = True
        return self.s.dumpxml(self.name)

    def start_and_wait(self):
        t0 = time.monotonic()
        r = self.s.virsh("start", self.name, quiet=False)
        if r.returncode != 0:
            raise Fatal("virsh start failed: %s\n%s" % (
                r.stderr.strip() or r.stdout.strip(), self.s.log_tail(20)))
        deadline = t0 + self.timeout
        next_state = 0
        while True:
            now = time.monotonic()
            self.console_text = self._read_console()
            if END in self.console_text:
                self.boot_s = now - t0
                return True
            if now >= deadline:
                return False
            if now >= next_state:
                next_state = now + 1.0
                st = self.s.virsh("domstate", self.name, timeout=20)
                self.state = st.stdout.strip()
                if st.returncode == 0 and self.state not in (
                        "running", "paused", "in shutdown", "blocked"):
                    self.console_text = self._read_console()
                    if END in self.console_text:
                        self.boot_s = time.monotonic() - t0
                        return True
                    return False
            time.sleep(0.2)

    def _read_console(self):
        try:
            with open(self.console, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_shutoff(self, secs=5):
        end = time.monotonic() + secs
        while time.monotonic() < end:
            st = self.s.virsh("domstate", self.name, timeout=20)
            if st.returncode != 0 or st.stdout.strip() == "shut off":
                return True
            time.sleep(0.2)
        return False

    def cleanup(self):
        try:
            self.s.virsh("destroy", self.name, timeout=30)
        except Exception:
            pass
        if self.defined:
            try:
                self.s.undefine(self.name)
            except Exception:
                pass
            self.defined = False


def console_tail(text, n=40):
    lines = text.replace("\r", "").splitlines()
    return "\n".join("console: " + ln for ln in lines[-n:]) or "console: (empty)"


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
    return """<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>512</memory>
  <vcpu placement='static'>8</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <features><acpi/><apic/></features>
  <cpu mode='custom' match='exact'>
    <model fallback='allow'>qemu64</model>
    <numa>
      <cell id='0' cpus='0-3' memory='256' unit='MiB'/>
      <cell id='1' cpus='4-7' memory='256' unit='MiB'/>
    </numa>
  </cpu>
  <numatune>
    <memnode cellid='0' mode='strict' nodeset='0'/>
    <memnode cellid='1' mode='strict' nodeset='1'/>
  </numatune>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
%s    <memballoon model='none'/>
  </devices>
</domain>
""" % (name, "".join(hostdev_xml(b) for b in bdfs))


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
                             acpi=not control, standin=case.standin)
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
               "no report within %ds (domain state %s)\n%s"
               % (args.boot_timeout, g.state, console_tail(g.console_text)))
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
    xml, standins = boot_xml(case, case.plan_xml, name, kernel, initrd, console)
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
                      console_tail(g.console_text)):
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
    args = ap.parse_args()
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
                        ("guest-dualport", os.path.join(HERE, "hosts"))):
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

        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "libvirt"))
        from session import Session, SessionError   # noqa: E402
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
        tap.summary()
    return 1 if tap.failed or tap.passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

"""Real Linux guests under TCG, as the guest suite and scripts/demo.py
boot them: the prerequisites (kernel, busybox, cpio, qemu), a busybox
initramfs whose /init prints a report of the guest's PCI devices, the
boot XML with a virtio stand-in at each passthrough device's guest
address, the Guest (define, start, wait for the report), and the report's
parser."""

import glob
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET

from pcinumatest.session import find_tool


NS_PCINUMA = "urn:pcinuma:topology:1"
ET.register_namespace("pcinuma", NS_PCINUMA)
ET.register_namespace("qemu", "http://libvirt.org/schemas/domain/qemu/1.0")

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
NCCL_FWCFG = "/sys/firmware/qemu_fw_cfg/by_name/opt/org.pcinuma/nccl-topo.xml/raw"
NET_CMDLINE = "pcinuma.net=1"
# With this on the command line the guest also reports each device's BARs
# (its sysfs resource file, one line) and the kernel's lines about BARs it
# could not assign (the mmio64 case).
RES_CMDLINE = "pcinuma.res=1"
IVSHMEM_ID = "1af4:1110"        # ivshmem-plain: the mmio64 case's GPU stand-in

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
*" @RESARG@ "*)
    for d in /sys/bus/pci/devices/*; do
        echo "@@ res ${d##*/} $(tr '\n' ' ' < "$d/resource")"
    done
    dmesg | while read -r l; do
        case "$l" in
        *"no space for"*|*"failed to assign"*|*"can't assign"*) echo "@@ dmesg $l";;
        esac
    done
    ;;
esac
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
   .replace("@RESARG@", RES_CMDLINE) \
   .replace("@NCCL@", NCCL_FWCFG)

APPLETS = ["sh", "mount", "cat", "readlink", "echo", "poweroff", "sleep",
           "ls", "tr", "insmod", "dmesg"]

CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1"

QEMU = "/usr/bin/qemu-system-x86_64"     # the domains' <emulator> by default


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


def standin_element(kind, alias, host_bdf, shmem=None):
    """A virtio-rng (kind 'rng'), virtio-net (kind 'net') or ivshmem-plain
    (kind 'ivshmem') stand-in.  The net one is non-transitional (no I/O BAR
    wherever it sits), has no option ROM (direct kernel boot needs none) and
    user-mode networking (no privileges in a session libvirtd).  The
    ivshmem one is a GPU's large BAR: shmem = (name, GiB), its BAR2 that
    many GiB, on a sparse memory-backend-file (/dev/shm/NAME)."""
    if kind == "ivshmem":
        el = ET.Element("shmem", name=shmem[0])
        ET.SubElement(el, "model", type="ivshmem-plain")
        ET.SubElement(el, "size", unit="G").text = str(shmem[1])
    elif kind == "net":
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
             extra_cmdline="", standin="rng", emulator=QEMU, loader=None,
             nvram=None, cell_mib=CELL_MIB, shmem=None):
    """The planned XML, made bootable, with stand-ins (standin: 'rng', 'net'
    or 'ivshmem', with shmem = (name prefix, GiB)) for the passthrough
    devices, run by emulator; loader (and nvram, its template and path)
    boot UEFI firmware instead of SeaBIOS.  Returns (xml text, [(alias,
    host bdf, planned guest address string or None)])."""
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
        c.set("memory", str(cell_mib))
        c.set("unit", "MiB")
    for tag in ("numatune", "cputune", "currentMemory"):
        for el in root.findall(tag):
            root.remove(el)
    mem = root.find("memory")
    mem.text = str(cell_mib * ncells)
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
    if loader:
        ET.SubElement(os_el, "loader", readonly="yes", type="pflash").text = loader
        if nvram:
            ET.SubElement(os_el, "nvram", template=nvram[0]).text = nvram[1]
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
    emu.text = emulator
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
        rng = standin_element(standin, alias, bdf,
                              shmem=("%s-s%d" % (shmem[0], len(standins)), shmem[1]) if shmem else None)
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

    def qemu_log_tail(self, n=5):
        """The last lines of the domain's log (what QEMU printed on its
        stderr, e.g. an assertion that killed it), as 'qemu: ' lines."""
        path = os.path.join(self.s.env["XDG_CACHE_HOME"], "libvirt", "qemu",
                            "log", self.name + ".log")
        try:
            with open(path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as e:
            return "qemu: (no domain log: %s)" % e
        return "\n".join("qemu: " + ln for ln in lines[-n:])

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

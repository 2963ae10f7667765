"""The real-client suite's plumbing (tests/clients; a stand_ins build,
docs/hacking.md "The stand-in seam"): real clients (virsh, virt-install,
python3-libvirt) start real guests in a private session libvirtd, and
pcinuma places their stand-in NICs as the passthrough devices they stand
for.

* ClientHarness: lvenv.Harness on the one-node fixture host: a session
  libvirtd, the hook installed as a qemu.d wrapper that sets
  PCINUMA_SOCKET, and pcinumad --stand-ins (STAND_INS) --allow-uid with
  its watcher connected, under a policy file (default require).
* GuestKit: the Debian kernel and the busybox initramfs of
  pcinumatest.guestvm (with the virtio-net modules, loaded in order from
  the kernel's own /lib/modules), copied where the session user reads
  them; the kernel command line that makes /init report each NIC.
* standin_domain_xml(): a bootable domain (q35, ACPI, TCG, guest cells
  bound to host node 0, serial console to a file) with virtio
  <interface type='user'> stand-ins.
* read_net_report() / wait_net_report(): the guest's report from its
  console, by MAC: numa_node, device path, module loads.
* planned_cells(), expected_numa(), check_guest_numa(): what the mark
  says each stand-in's guest cell is, and the check that the booted guest
  sees it there.

Python 3 standard library only (the suite's clients bring their own)."""

import os
import re
import shutil
import time
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

from pcinumatest import guestvm
from pcinumatest.lvenv import Harness, NS, RECONNECT_DEADLINE, write
from pcinumatest.session import reachable_copy

HOST = "one-node"
# The stand-in table pcinumad and its watcher read (--stand-ins): MAC ->
# the one-node host's devices, GPUs at 21:00.0 and 23:00.0 and NICs at
# 22:00.0 and 24:00.0, all on host node 0.
STAND_INS = {
    "52:54:00:5a:00:01": "0000:21:00.0",
    "52:54:00:5a:00:02": "0000:22:00.0",
    "52:54:00:5a:00:03": "0000:23:00.0",
    "52:54:00:5a:00:04": "0000:24:00.0",
}
MAC_OF = {bdf: mac for mac, bdf in STAND_INS.items()}
# A user-mode virtio NIC that is no stand-in: libvirt puts it on a root
# port of pcie.0, where the guest reads numa_node -1.
PLAIN_MAC = "52:54:00:5a:00:99"
HOST_NODE = 0
CELL_MIB = guestvm.CELL_MIB
BOOT_TIMEOUT = 600          # TCG on a shared 2-core machine; typically < 60 s
PLAN_TIMEOUT = 15.0         # define -> the watcher's mark
MARK = "{%s}topology" % NS
DEVICE = "{%s}device" % NS


# -- the guest ------------------------------------------------------------------

class GuestKit:
    """The kernel, the initramfs and the command line of a stand-in guest.
    prepare() checks the prerequisites (on tap, as one check), builds the
    initramfs in workdir and copies both into the session's files
    directory.  Attributes: kernel, initrd (paths the session user reads),
    cmdline (console=ttyS0 ... pcinuma.net=1), modules ([(name, path)])."""

    def __init__(self):
        self.kernel = self.initrd = self.cmdline = None
        self.modules = []

    @classmethod
    def prepare(cls, tap, workdir, sess):
        kit = cls()
        tools = guestvm.find_prereqs(tap)          # raises guestvm.Fatal
        kit.modules = tools["modules"]
        initrd, _n = guestvm.build_initramfs(workdir, tools["busybox"],
                                             tools["cpio"], kit.modules)
        kit.kernel = os.path.join(sess.files, "vmlinuz")
        kit.initrd = os.path.join(sess.files, "initramfs.cpio.gz")
        for src, dst in ((tools["kernel"], kit.kernel), (initrd, kit.initrd)):
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o644)
            if os.geteuid() == 0:
                os.chown(dst, sess.uid, sess.gid)
        kit.cmdline = guestvm.CMDLINE + " " + guestvm.NET_CMDLINE
        return kit


def console_path(sess, name):
    """Where a guest's serial console goes: a file the session's QEMU may
    write (removed first, so a report is always this boot's)."""
    path = os.path.join(sess.files, "%s.console" % name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return path


def standin_domain_xml(name, macs, kit, console, cells=2, host_node=HOST_NODE,
                       uid=None, emulator=guestvm.QEMU, extra_devices=""):
    """A bootable domain: q35 with ACPI, TCG (type='qemu'), `cells` guest
    cells of one vCPU and CELL_MIB each, every one bound to host node
    host_node (<numatune><memnode>), the kit's kernel and initramfs, its
    serial console to the file `console`, poweroff/reboot/crash destroy
    it, and a virtio <interface type='user'> for each MAC of `macs` (a
    stand-in when STAND_INS has it).  uid: a <uuid>, or none (libvirt
    makes one)."""
    cell_xml = "".join(
        "      <cell id='%d' cpus='%d' memory='%d' unit='MiB'/>\n"
        % (i, i, CELL_MIB) for i in range(cells))
    memnodes = "".join(
        "    <memnode cellid='%d' mode='strict' nodeset='%d'/>\n" % (i, host_node)
        for i in range(cells))
    nics = "".join(
        "    <interface type='user'>\n"
        "      <mac address='%s'/>\n"
        "      <model type='virtio'/>\n"
        "    </interface>\n" % mac for mac in macs)
    return ("<domain type='qemu'>\n"
            "  <name>%s</name>\n"
            "%s"
            "  <memory unit='MiB'>%d</memory>\n"
            "  <vcpu placement='static'>%d</vcpu>\n"
            "  <os>\n"
            "    <type arch='x86_64' machine='q35'>hvm</type>\n"
            "    <kernel>%s</kernel>\n"
            "    <initrd>%s</initrd>\n"
            "    <cmdline>%s</cmdline>\n"
            "  </os>\n"
            "  <features>\n    <acpi/>\n  </features>\n"
            "  <cpu mode='custom' match='exact'>\n"
            "    <model fallback='allow'>qemu64</model>\n"
            "    <numa>\n%s    </numa>\n"
            "  </cpu>\n"
            "  <numatune>\n%s  </numatune>\n"
            "  <on_poweroff>destroy</on_poweroff>\n"
            "  <on_reboot>destroy</on_reboot>\n"
            "  <on_crash>destroy</on_crash>\n"
            "  <devices>\n"
            "    <emulator>%s</emulator>\n"
            "    <controller type='pci' index='0' model='pcie-root'/>\n"
            "%s%s"
            "    <serial type='file'>\n"
            "      <source path='%s'/>\n"
            "      <target port='0'/>\n"
            "    </serial>\n"
            "    <memballoon model='none'/>\n"
            "  </devices>\n"
            "</domain>\n"
            % (escape(name), "  <uuid>%s</uuid>\n" % uid if uid else "",
               CELL_MIB * cells, cells, escape(kit.kernel), escape(kit.initrd),
               escape(kit.cmdline), cell_xml, memnodes, escape(emulator), nics,
               extra_devices, escape(console)))


NET_RE = re.compile(r"@@ net (\S+) address=(\S+) numa_node=(\S+) path=(\S+)")
INSMOD_RE = re.compile(r"@@ insmod (\S+) rc=(\S+)")


def read_console(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_net_report(text):
    """The guest's report in console text: (complete, {mac: {"iface",
    "numa_node" (an int, or None for '-'), "path"}}, {module: rc}).
    complete: the report's end line was printed."""
    text = text.replace("\r", "")
    i = text.find(guestvm.BEGIN)
    j = text.find(guestvm.END, i + 1) if i >= 0 else -1
    body = text[i:j if j >= 0 else len(text)] if i >= 0 else ""
    nets, mods = {}, {}
    for ln in body.splitlines():
        m = NET_RE.search(ln)
        if m:
            iface, mac, numa, path = m.groups()
            nets[mac.lower()] = {"iface": iface, "path": path,
                                 "numa_node": None if numa == "-" else int(numa)}
            continue
        m = INSMOD_RE.search(ln)
        if m:
            mods[m.group(1)] = m.group(2)
    return j >= 0, nets, mods


def wait_net_report(path, timeout=BOOT_TIMEOUT, alive=None, step=0.5):
    """Wait until the console file holds the whole report.  alive: a
    callable, checked every few seconds, that says whether the domain still
    runs (the report may have landed just before it stopped: the file is
    read once more then).  Returns (console text, seconds, or None when the
    report did not come)."""
    t0 = time.monotonic()
    next_alive = t0 + 2.0
    while True:
        text = read_console(path)
        if guestvm.END in text:
            return text, time.monotonic() - t0
        now = time.monotonic()
        if now - t0 > timeout:
            return text, None
        if alive is not None and now >= next_alive:
            next_alive = now + 2.0
            if not alive():
                text = read_console(path)
                return text, (time.monotonic() - t0) if guestvm.END in text else None
        time.sleep(step)


# -- the plan ---------------------------------------------------------------------

def planned_cells(xml):
    """{host BDF: guest cell} of the devices the pcinuma mark of xml
    records as moved ({} without a mark)."""
    root = ET.fromstring(xml)
    mark = root.find("metadata/" + MARK)
    out = {}
    if mark is None:
        return out
    for dev in mark.findall(DEVICE):
        if dev.get("host") and dev.get("guest-cell") is not None:
            out[dev.get("host")] = int(dev.get("guest-cell"))
    return out


def pxb_node_of(xml, mac):
    """The <node> of the pcie-expander-bus the interface with this MAC sits
    under in xml (through its root or switch ports), or None (pcie.0, no
    address, not found)."""
    root = ET.fromstring(xml)
    ctrls = {int(c.get("index")): c for c in root.findall("devices/controller[@type='pci']")}
    for el in root.findall("devices/interface"):
        m = el.find("mac")
        if m is None or (m.get("address") or "").lower() != mac.lower():
            continue
        a = el.find("address")
        if a is None or a.get("type", "pci") != "pci":
            return None
        idx = int(a.get("bus"), 0)
        for _guard in range(len(ctrls) + 1):
            c = ctrls.get(idx)
            if c is None or c.get("model") == "pcie-root":
                return None
            if c.get("model") == "pcie-expander-bus":
                n = c.find("target/node")
                return int(n.text) if n is not None else None
            ca = c.find("address")
            if ca is None:
                return None
            idx = int(ca.get("bus"), 0)
    return None


def expected_numa(xml):
    """{MAC: guest cell} for each stand-in the mark of xml records, by the
    stand-in table: what the booted guest must read as the NIC's
    numa_node."""
    return {MAC_OF[bdf]: cell for bdf, cell in planned_cells(xml).items()
            if bdf in MAC_OF}


def check_guest_numa(tap, what, console_text, live_xml, macs, plain_macs=()):
    """The checks of one booted guest, on tap: the virtio-net modules
    loaded; each stand-in MAC of `macs` is a NIC whose numa_node is the
    guest cell the live XML's mark plans for it (and not -1), and which
    sits on that cell's expander bus in the live XML; each MAC of
    plain_macs (no stand-in) reads -1.  Returns True when all passed."""
    complete, nets, mods = read_net_report(console_text)
    ok = tap.check(complete, "%s: the guest printed its report" % what,
                   guestvm.console_tail(console_text))
    needed = guestvm.NET_MODULES[:guestvm.NET_MODULES.index("virtio_net") + 1]
    bad = [m for m in needed if mods.get(m) != "0"]
    ok &= tap.check(not bad, "%s: the guest loaded virtio_net and what it needs "
                    "from the kernel's own modules" % what,
                    "insmod failed or missing: %s (got %r)" % (", ".join(bad), mods))
    want = expected_numa(live_xml)
    for mac in macs:
        mac = mac.lower()
        got = nets.get(mac)
        cell = want.get(mac)
        ok &= tap.check(cell is not None,
                        "%s: the live domain's mark plans stand-in %s (%s)"
                        % (what, mac, STAND_INS.get(mac)),
                        "mark plans: %r" % want)
        ok &= tap.check(cell is not None and pxb_node_of(live_xml, mac) == cell,
                        "%s: %s sits on guest cell %s's expander bus in the live XML"
                        % (what, mac, cell),
                        "its pxb's node: %r" % pxb_node_of(live_xml, mac))
        ok &= tap.check(got is not None and got["numa_node"] == cell
                        and got["numa_node"] not in (None, -1),
                        "%s: the guest reads numa_node %s for NIC %s, as planned"
                        % (what, cell, mac),
                        "the guest's NICs: %r" % nets)
    for mac in plain_macs:
        got = nets.get(mac.lower())
        ok &= tap.check(got is not None and got["numa_node"] in (-1, None),
                        "%s: NIC %s, no stand-in, stays on pcie.0 (numa_node -1)"
                        % (what, mac), "the guest's NICs: %r" % nets)
    return ok


# -- the harness ------------------------------------------------------------------

class ClientHarness(Harness):
    """lvenv.Harness on the one-node host with the stand-in table: after
    setup() a session libvirtd (self.s, an LvSession) runs with the hook
    wrapper installed, and pcinumad (self.d) runs --stand-ins
    self.stand_ins_file --allow-uid <session user> with its watcher
    connected to self.s, under self.policy (set_policy(); default
    require, with Harness's rules: legacy-*, off-* and rev-* domains get
    legacy, off, off).  self.emulator: the <emulator> every domain must
    use (QEMU, or $PCINUMA_CLIENTS_EMULATOR: the second stack's
    single-threaded TCG wrapper).  a: an argparse namespace with pcinumad, pcinumactl, hook,
    mkfakesysfs, hosts, workdir; tap: a pcinumatest.tap.Tap."""

    HOST = HOST
    GUESTS = ()         # the domains cleanup() destroys first, if they run

    def setup(self, policy="require", rules=None):
        super().setup()
        if rules is not None:
            self.rules = list(rules)
        self.set_policy(policy)
        self.stand_ins_file = write(os.path.join(self.tmp, "stand-ins.json"),
                                    "{\n%s\n}\n" % ",\n".join(
                                        '  "%s": "%s"' % kv for kv in STAND_INS.items()))
        self.d.extra += ["--stand-ins", self.stand_ins_file]
        # The emulator of every domain the suite defines: QEMU, or (the
        # second stack, tests/stack2/inside.sh) $PCINUMA_CLIENTS_EMULATOR,
        # copied where the session user can run it.
        emu = os.environ.get("PCINUMA_CLIENTS_EMULATOR")
        self.emulator = reachable_copy(emu, self.tmp, "clients-emulator") if emu else guestvm.QEMU
        self.d.start(self.s.uri)
        connected = self.d.wait_connected(RECONNECT_DEADLINE * 2)
        self.check(connected, "pcinumad --stand-ins runs on host %s with its watcher "
                   "connected to the session libvirtd" % self.HOST,
                   self.d.log()[-3000:])
        if not connected:
            raise RuntimeError("pcinumad's watcher did not connect")
        self.kit = None

    def cleanup(self):
        """Destroy the GUESTS that still run, then Harness.cleanup()."""
        if self.s is not None:
            for name in self.GUESTS:
                try:
                    self.s.virsh("destroy", name, timeout=30)
                except Exception:   # noqa: BLE001 - not running, or the session is gone
                    pass
        super().cleanup()

    def guest_kit(self):
        """The GuestKit, prepared once (raises guestvm.Fatal)."""
        if self.kit is None:
            self.kit = GuestKit.prepare(self.tap, self.work, self.s)
        return self.kit

    def wait_marked(self, name, timeout=PLAN_TIMEOUT):
        """wait_planned() with the suite's longer deadline."""
        return self.wait_planned(name, timeout=timeout)

    def alive(self, name):
        st = self.s.virsh("domstate", name, timeout=30)
        return st.returncode == 0 and st.stdout.strip() in (
            "running", "paused", "in shutdown", "blocked")

    def boot_report(self, name, console, timeout=BOOT_TIMEOUT):
        """Wait for the guest's report on its console: (text, seconds or
        None)."""
        return wait_net_report(console, timeout, alive=lambda: self.alive(name))

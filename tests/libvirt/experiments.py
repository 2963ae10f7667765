#!/usr/bin/env python3
"""Experiments against a private session libvirtd (see FINDINGS.md).

Not a test: it prints what libvirt does with each XML.  Run as
    python3 tests/libvirt/experiments.py [NAME ...]
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pcinumatest.session import Session, require_tools  # noqa: E402

S = None


def dom(name, devices, cells=2, acpi=True, machine="q35", mem_mib=64,
        metadata=""):
    vcpus = cells
    cell_mem = mem_mib * 1024 // cells
    numa = "".join("<cell id='%d' cpus='%d' memory='%d' unit='KiB'/>"
                   % (i, i, cell_mem) for i in range(cells))
    return """<domain type='qemu'>
  <name>%s</name>
  %s
  <memory unit='KiB'>%d</memory>
  <vcpu>%d</vcpu>
  <os><type arch='x86_64' machine='%s'>hvm</type></os>
  <features>%s</features>
  <cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model>
    <numa>%s</numa></cpu>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
%s
  </devices>
</domain>
""" % (name, metadata, mem_mib * 1024, vcpus, machine,
       "<acpi/>" if acpi else "", numa, devices)


def pxb(index, busnr, node, slot, extra=""):
    return ("<controller type='pci' index='%d' model='pcie-expander-bus'>"
            "<model name='pxb-pcie'/><target busNr='%d'><node>%d</node></target>"
            "<address type='pci' domain='0x0000' bus='0x00' slot='0x%02x' "
            "function='0x0'%s/></controller>" % (index, busnr, node, slot, extra))


def rp(index, bus, slot=0, function=0, extra=""):
    return ("<controller type='pci' index='%d' model='pcie-root-port'>"
            "<address type='pci' domain='0x0000' bus='0x%02x' slot='0x%02x' "
            "function='0x%x'%s/></controller>" % (index, bus, slot, function, extra))


def hostdev(bus, slot=0, hostbus=0x13):
    return ("<hostdev mode='subsystem' type='pci' managed='yes'><source>"
            "<address domain='0x0000' bus='0x%02x' slot='0x00' function='0x0'/>"
            "</source><address type='pci' domain='0x0000' bus='0x%02x' "
            "slot='0x%02x' function='0x0'/></hostdev>" % (hostbus, bus, slot))


def rng(bus=None, slot=0):
    addr = ("" if bus is None else
            "<address type='pci' domain='0x0000' bus='0x%02x' slot='0x%02x' "
            "function='0x0'/>" % (bus, slot))
    return ("<rng model='virtio'><backend model='random'>/dev/urandom</backend>"
            "%s</rng>" % addr)


def banner(t):
    print("\n" + "=" * 72 + "\n" + t + "\n" + "=" * 72)


def validate(xml):
    path = S.write(xml)
    r = subprocess.run(["virt-xml-validate", path, "domain"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    print("virt-xml-validate: rc=%d %s" % (r.returncode, r.stdout.strip()))
    return r.returncode == 0


def try_define(xml, show_input=True, show_dump=True, start=False,
               keep=False, grep=None):
    if show_input:
        print("---- input ----\n" + xml)
    validate(xml)
    r = S.define(xml, check=False)
    if not isinstance(r, str):
        print("DEFINE FAILED: rc=%d: %s" % (r.returncode, r.stderr.strip()))
        return None
    name = r
    print("define: OK (%s)" % name)
    dump = S.dumpxml(name)
    if show_dump:
        if grep:
            lines = [l for l in dump.splitlines()
                     if any(g in l for g in grep)]
            print("---- dumpxml --inactive (filtered) ----\n" + "\n".join(lines))
        else:
            print("---- dumpxml --inactive ----\n" + dump)
    if start:
        r = S.virsh("start", name, timeout=120)
        if r.returncode == 0:
            print("start: OK")
            live = S.dumpxml(name, inactive=False)
            if grep:
                print("---- live (filtered) ----\n" + "\n".join(
                    l for l in live.splitlines() if any(g in l for g in grep)))
            S.virsh("destroy", name)
        else:
            print("START FAILED: rc=%d: %s" % (r.returncode, r.stderr.strip()))
    if not keep:
        S.undefine(name)
    return dump


CTRL = ["<controller", "<address", "<target", "<model", "</controller",
        "<node", "<hostdev", "<rng", "<memballoon", "<interface", "<disk",
        "<watchdog", "<video", "<sound", "<input", "<serial", "<console"]


def e1():
    banner("E1a: PCI hostdev for a nonexistent host device")
    try_define(dom("e1a", hostdev(1, hostbus=0x13).replace(
        "<address type='pci' domain='0x0000' bus='0x01' slot='0x00' "
        "function='0x0'/></hostdev>", "</hostdev>")), grep=CTRL, start=True)
    banner("E1b: <interface type='hostdev'>")
    try_define(dom("e1b", "<interface type='hostdev' managed='yes'>"
                   "<mac address='52:54:00:11:22:33'/><source><address "
                   "type='pci' domain='0x0000' bus='0x14' slot='0x00' "
                   "function='0x1'/></source></interface>"), grep=CTRL,
               start=True)
    banner("E1c: mdev hostdev")
    try_define(dom("e1c", "<hostdev mode='subsystem' type='mdev' "
                   "model='vfio-pci'><source><address "
                   "uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source>"
                   "</hostdev>"), grep=CTRL, start=True)


def e2():
    banner("E2: pxb (index 1) + root port (index 2) + hostdev at bus 2")
    try_define(dom("e2", pxb(1, 250, 1, 2) + rp(2, 1) + hostdev(2)))
    banner("E2b: hostdev directly on pxb bus (expected rejection)")
    try_define(dom("e2b", pxb(1, 250, 1, 2) + hostdev(1)), show_dump=False)
    banner("E2c: rng directly on pxb bus")
    try_define(dom("e2c", pxb(1, 250, 1, 2) + rng(1)), show_dump=False)


def e3():
    banner("E3a: root port index 1 < pxb index 2, rng at bus 1; start")
    try_define(dom("e3a", pxb(2, 250, 1, 2) + rp(1, 2) + rng(1)),
               grep=CTRL, start=True)
    banner("E3b: control: pxb index 1, root port index 2, rng at bus 2; start")
    try_define(dom("e3b", pxb(1, 250, 1, 2) + rp(2, 1) + rng(2)),
               grep=CTRL, start=True)
    banner("E3c: root port index 1 < pxb index 3, hostdev at bus 1; start")
    try_define(dom("e3c", pxb(3, 250, 1, 2) + rp(1, 3) + hostdev(1)),
               grep=CTRL, start=True)


def e4():
    banner("E4: controllers 0,1,2,4 (3 missing)")
    try_define(dom("e4", "<controller type='pci' index='0' model='pcie-root'/>"
                   + rp(1, 0, 2, 0) + rp(2, 0, 2, 1) + rp(4, 0, 2, 2)),
               grep=CTRL)
    banner("E4b: pxb at 1, rp at 2, rp at 4 on pxb (3 missing)")
    try_define(dom("e4b", pxb(1, 250, 1, 2) + rp(2, 1, 0) + rp(4, 1, 1)),
               grep=CTRL)


def e5():
    banner("E5a: busNr=0")
    try_define(dom("e5a", pxb(1, 0, 1, 2) + rp(2, 1) + rng(2)),
               show_input=False, grep=CTRL, start=True)
    banner("E5b: busNr=255")
    try_define(dom("e5b", pxb(1, 255, 1, 2) + rp(2, 1) + rng(2)),
               show_input=False, grep=CTRL, start=True)
    banner("E5b2: busNr=254")
    try_define(dom("e5b2", pxb(1, 254, 1, 2) + rp(2, 1) + rng(2)),
               show_input=False, grep=CTRL, start=True)
    banner("E5b3: busNr=256")
    try_define(dom("e5b3", pxb(1, 256, 1, 2) + rp(2, 1) + rng(2)),
               show_input=False, show_dump=False)
    banner("E5c: two pxbs with the same busNr=250")
    try_define(dom("e5c", pxb(1, 250, 0, 2) + pxb(2, 250, 1, 3)
                   + rp(3, 1) + rp(4, 2) + rng(3)),
               show_input=False, grep=CTRL, start=True)
    banner("E5c2: two pxbs busNr 250 and 251 (overlap: 250 needs 2 numbers)")
    try_define(dom("e5c2", pxb(1, 250, 0, 2) + pxb(2, 251, 1, 3)
                   + rp(3, 1) + rp(4, 2) + rng(3)),
               show_input=False, grep=CTRL, start=True)
    banner("E5d: busNr=2 with 5 root ports on pcie.0")
    rps = "".join(rp(i, 0, 3, i - 1, " multifunction='on'" if i == 1 else "")
                  for i in range(1, 6))
    try_define(dom("e5d", rps + pxb(6, 2, 1, 2) + rp(7, 6) + rng(7)),
               show_input=False, grep=CTRL, start=True)
    banner("E5d2: busNr=6 with 5 root ports on pcie.0 (just fits)")
    try_define(dom("e5d2", rps + pxb(6, 6, 1, 2) + rp(7, 6) + rng(7)),
               show_input=False, grep=CTRL, start=True)
    banner("E5d3: busNr=5 with 5 root ports on pcie.0 (collides with bus 5)")
    try_define(dom("e5d3", rps + pxb(6, 5, 1, 2) + rp(7, 6) + rng(7)),
               show_input=False, grep=CTRL, start=True)
    banner("E5e: <node>7</node> with 2 cells")
    try_define(dom("e5e", pxb(1, 250, 7, 2) + rp(2, 1) + rng(2)),
               show_input=False, grep=CTRL, start=True)
    banner("E5e2: pxb without <node>, no cells at all")
    x = dom("e5e2", "<controller type='pci' index='1' "
            "model='pcie-expander-bus'><target busNr='250'/></controller>"
            + rp(2, 1) + rng(2))
    x = x.replace("<numa><cell id='0' cpus='0' memory='32768' unit='KiB'/>"
                  "<cell id='1' cpus='1' memory='32768' unit='KiB'/></numa>", "")
    try_define(x, show_input=False, grep=CTRL, start=True)
    banner("E5e3: pxb with <node>0</node> but no <numa> cells")
    x = dom("e5e3", pxb(1, 250, 0, 2) + rp(2, 1) + rng(2))
    x = x.replace("<numa><cell id='0' cpus='0' memory='32768' unit='KiB'/>"
                  "<cell id='1' cpus='1' memory='32768' unit='KiB'/></numa>", "")
    try_define(x, show_input=False, grep=CTRL, start=True)
    banner("E5f: pxb-pcie on i440fx (pc)")
    try_define(dom("e5f", pxb(1, 250, 1, 2) + rp(2, 1) + rng(2), machine="pc"),
               show_input=False, grep=CTRL, start=True)
    banner("E5g: too many root ports for the busNr range: pxb 250 then 252"
           " with 3 rps on the first")
    try_define(dom("e5g", pxb(1, 250, 0, 2) + pxb(2, 252, 1, 3)
                   + rp(3, 1, 0) + rp(4, 1, 1) + rp(5, 1, 2) + rp(6, 2, 0)
                   + rng(5)),
               show_input=False, grep=CTRL, start=True)


def e6():
    banner("E6a: root port at pxb slot 0x00 and slot 0x1f")
    try_define(dom("e6a", pxb(1, 240, 1, 2) + rp(2, 1, 0) + rp(3, 1, 0x1f)
                   + rng(3)), show_input=False, grep=CTRL, start=True)
    banner("E6b: 8 multifunction root ports at pxb slot 0 fn 0-7")
    rps = "".join(rp(2 + f, 1, 0, f, " multifunction='on'" if f == 0 else "")
                  for f in range(8))
    try_define(dom("e6b", pxb(1, 240, 1, 2) + rps + rng(9)),
               show_input=False, grep=CTRL, start=True)
    banner("E6c: 8 multifunction root ports without multifunction='on'")
    rps = "".join(rp(2 + f, 1, 0, f) for f in range(8))
    try_define(dom("e6c", pxb(1, 240, 1, 2) + rps + rng(9)),
               show_input=False, grep=CTRL, start=True)
    banner("E6d: pxb at pcie.0 slot 0x1f (ICH9 LPC is at 0x1f)")
    try_define(dom("e6d", pxb(1, 240, 1, 0x1f) + rp(2, 1) + rng(2)),
               show_input=False, show_dump=False)
    banner("E6e: rng at slot 1 of a root port bus (root port has one slot)")
    try_define(dom("e6e", pxb(1, 240, 1, 2) + rp(2, 1) + rng(2, 1)),
               show_input=False, show_dump=False)


META = """<metadata><pcinuma:topology xmlns:pcinuma="urn:pcinuma:topology:1" policy="require" migratable="no"><pcinuma:device host="0000:13:00.0" host-node="1" guest-cell="1" orig-address="type=pci domain=0x0000 bus=0x01 slot=0x00 function=0x0"/><pcinuma:removed index="3">&lt;controller type='pci' index='3' model='pcie-root-port'/&gt;</pcinuma:removed></pcinuma:topology></metadata>"""

META2 = """<metadata>
    <other:thing xmlns:other="urn:other:1" a='1'>x &amp; y "q" 'a' &gt;</other:thing>
    <p:topology xmlns:p="urn:pcinuma:topology:1" migratable="no" policy="require">
      <p:device guest-cell="1" host="0000:13:00.0"/>
      <p:removed index="3">&lt;controller type='pci' index='3' model='pcie-root-port'/&gt;</p:removed>
    </p:topology>
    <pcinuma:topology xmlns:pcinuma="urn:pcinuma:topology:1" second="yes"/>
    <x:noprefix xmlns="urn:default:1" xmlns:x="urn:x:1"><child/></x:noprefix>
  </metadata>"""


def e7():
    banner("E7a: metadata as in the brief")
    try_define(dom("e7a", pxb(1, 250, 1, 2) + rp(2, 1) + hostdev(2),
                   metadata=META), show_input=True)
    banner("E7b: metadata: other namespace, prefix p:, duplicate ns, default ns")
    d = try_define(dom("e7b", "", metadata=META2), show_input=True,
                   show_dump=False)
    if d:
        i, j = d.find("<metadata>"), d.find("</metadata>")
        print("---- dumpxml <metadata> ----\n" + d[i:j + 11])
    banner("E7c: metadata via virsh metadata (API view)")
    name = S.define(dom("e7c", "", metadata=META))
    r = S.virsh("metadata", name, "urn:pcinuma:topology:1", "--config")
    print("virsh metadata: rc=%d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    S.undefine(name)


def e8():
    banner("E8: only our pxb + root ports + hostdevs addressed; others not")
    devs = (pxb(1, 250, 1, 2) + rp(2, 1) + hostdev(2)
            + pxb(3, 252, 0, 3) + rp(4, 3) + hostdev(4, hostbus=0x14)
            + "<controller type='pci' index='0' model='pcie-root'/>"
            + rng() + "<memballoon model='virtio'/>"
            + "<interface type='user'><model type='virtio'/></interface>"
            + "<disk type='file' device='disk'><driver name='qemu' type='raw'/>"
              "<source file='/tmp/none.img'/><target dev='vda' bus='virtio'/>"
              "</disk>"
            + "<controller type='usb' model='qemu-xhci'/>"
            + "<video><model type='virtio'/></video>"
            + "<input type='tablet' bus='usb'/>"
            + "<sound model='ich9'/>")
    try_define(dom("e8", devs), show_input=True)
    banner("E8b: same but with no controllers/addresses at all except the "
           "pxbs (root ports unaddressed)")
    devs = ("<controller type='pci' index='1' model='pcie-expander-bus'>"
            "<model name='pxb-pcie'/><target busNr='250'><node>1</node>"
            "</target></controller>"
            "<controller type='pci' index='2' model='pcie-root-port'/>"
            "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
            "<address domain='0x0000' bus='0x13' slot='0x00' function='0x0'/>"
            "</source></hostdev>"
            + rng() + "<memballoon model='virtio'/>"
            + "<interface type='user'><model type='virtio'/></interface>")
    try_define(dom("e8b", devs), show_input=False, grep=CTRL)
    banner("E8c: input has only a pxb and 1 root port on it, hostdev on it;"
           " 6 unaddressed virtio devices - do any land on our root port?")
    devs = (pxb(1, 250, 1, 2) + rp(2, 1) + rp(3, 1, 1) + hostdev(2)
            + rng() + "<memballoon model='virtio'/>"
            + "<interface type='user'><model type='virtio'/></interface>"
            + "<interface type='user'><model type='e1000e'/></interface>"
            + "<controller type='scsi' model='virtio-scsi'/>"
            + "<controller type='virtio-serial'/>")
    try_define(dom("e8c", devs), show_input=False, grep=CTRL)


def e9():
    banner("E9: no <acpi/> with a pxb")
    try_define(dom("e9", pxb(1, 250, 1, 2) + rp(2, 1) + rng(2), acpi=False),
               show_input=False, grep=CTRL, start=True)


ALL = dict(e1=e1, e2=e2, e3=e3, e4=e4, e5=e5, e6=e6, e7=e7, e8=e8, e9=e9)

if __name__ == "__main__":
    require_tools()
    S = Session()
    for n in (sys.argv[1:] or ALL):
        ALL[n]()
    S.stop()

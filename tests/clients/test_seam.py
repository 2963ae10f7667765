#!/usr/bin/env python3
"""clients suite: the stand-in seam, end to end (issue 23, item 3;
docs/hacking.md, "The stand-in seam").  A stand_ins build only.

    test_seam.py --pcinumad P --pcinumactl P --hook P --mkfakesysfs P \
        --hosts DIR --workdir DIR [-v]

A private session libvirtd with the hook installed as a qemu.d wrapper
that sets PCINUMA_SOCKET; pcinumad --stand-ins --allow-uid with its
watcher, on the one-node fixture host (pcinumatest.clients.ClientHarness).
A domain (q35, ACPI, TCG, two guest cells bound to host node 0, the Debian
kernel and a busybox initramfs) with two stand-in NICs, for the GPU-class
0000:21:00.0 and the NIC-class 0000:22:00.0, and one user-mode NIC that is
no stand-in:

  1. virsh define; the watcher plans the definition: its mark records both
     stand-ins, each moved onto a guest cell's expander bus, the third NIC
     left alone;
  2. virsh start: the prepare hook reaches pcinumad (an allow decision for
     the domain in its log), the guest boots, loads virtio_net from the
     kernel's own modules, and reads for each stand-in NIC, found by its
     MAC, the numa_node its guest cell gives (not -1); the third NIC -1;
  3. the policy turned off for it: the watcher reverts the definition, the
     stand-ins back where libvirt had put them, no mark.

Environment: PCINUMA_CLIENTS_EMULATOR, the domains' emulator instead of
QEMU (the second stack's tests/stack2/qemu-tcg-single.sh).

Output: "ok N - ..." lines, "# ..." diagnostics, "N passed, M failed".
Exit 1 on any failure, 77 when libvirtd or virsh is not installed."""

import os
import sys

from pcinumatest import guestvm
from pcinumatest.clients import (ClientHarness, MAC_OF, PLAIN_MAC, STAND_INS,
                                 check_guest_numa, console_path, planned_cells,
                                 pxb_node_of, standin_domain_xml)
from pcinumatest.lvenv import MID_WARNED, NS
from pcinumatest.suite import run_session_suite, session_args

MID_ALLOWED = "87dc1c2a46174a5ab53f60845dc67c20"
NAME = "seam-1"
STANDIN_BDFS = ("0000:21:00.0", "0000:22:00.0")


class Seam(ClientHarness):
    GUESTS = (NAME,)

    def run(self):
        macs = [MAC_OF[b] for b in STANDIN_BDFS]
        self.check("%d stand-ins from %s" % (len(STAND_INS), self.stand_ins_file) in self.d.log(),
                   "pcinumad logs the stand-in table it read", self.d.log()[-2000:])
        try:
            kit = self.guest_kit()
        except guestvm.Fatal as e:
            self.check(False, "a bootable guest (kernel, busybox initramfs) for the domains", str(e))
            return
        console = console_path(self.s, NAME)
        xml = standin_domain_xml(NAME, macs + [PLAIN_MAC], kit, console, emulator=self.emulator)

        # 1. define: the watcher plans it
        self.define(xml)
        planned, secs = self.wait_marked(NAME)
        cells = planned_cells(planned)
        self.check(secs is not None, "the watcher plans the definition (its mark)",
                   planned, note="%.2f s" % (secs or 0))
        self.check(sorted(cells) == sorted(STANDIN_BDFS),
                   "the mark records both stand-ins by host BDF, and nothing else",
                   "mark devices: %r" % cells)
        for bdf in STANDIN_BDFS:
            node = pxb_node_of(planned, MAC_OF[bdf])
            self.check(node is not None and node == cells.get(bdf),
                       "the definition has stand-in %s (%s) on guest cell %s's expander bus"
                       % (MAC_OF[bdf], bdf, cells.get(bdf)), "its pxb's node: %r" % node)
        self.check(pxb_node_of(planned, PLAIN_MAC) is None,
                   "the NIC that is no stand-in is not moved under an expander bus")

        # 2. start: the hook asks, the guest reads the plan
        before = len(self.d.log())
        verdict, text = self.s.start_dom(NAME)
        if not self.check(verdict == "started", "virsh start of the planned domain", text):
            return
        self.check(self.wait_until(lambda: MID_ALLOWED in self.d.log()[before:] and NAME in self.d.log()[before:],
                                   5.0),
                   "the prepare hook forwarded the domain (its <interface type='user'>) and pcinumad allowed it",
                   self.d.log()[before:][-2000:])
        self.check(MID_WARNED not in self.d.log()[before:], "no warning at start (it runs its plan)",
                   self.d.log()[before:][-2000:])
        live = self.dump(NAME, inactive=False)
        text, boot = self.boot_report(NAME, console)
        self.diag("guest report after %s s" % ("%.1f" % boot if boot else "-"))
        check_guest_numa(self.tap, "booted guest", text, live, macs, plain_macs=[PLAIN_MAC])
        self.s.virsh("destroy", NAME, timeout=60)

        # 3. revert: policy off for it, the watcher takes the plan out
        self.rules = [(NAME, "off")]
        self.set_policy("require")
        self.check(self.d.hup(), "pcinumad reloads the policy (the domain now off)")
        reverted = self.wait_until(lambda: NS not in self.dump(NAME), 15.0)
        after = self.dump(NAME)
        self.check(reverted, "the watcher reverts the definition under policy off (no mark)", after[-2000:])
        for bdf in STANDIN_BDFS:
            self.check(pxb_node_of(after, MAC_OF[bdf]) is None,
                       "reverted: stand-in %s is off the expander buses" % MAC_OF[bdf])
        self.check("pcie-expander-bus" not in after, "reverted: no expander bus left")


def main():
    a = session_args(__doc__)
    os.makedirs(a.workdir, exist_ok=True)
    return run_session_suite(a, Seam, errors=(guestvm.Fatal,))


if __name__ == "__main__":
    sys.exit(main())

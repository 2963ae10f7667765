#!/usr/bin/env python3
"""clients suite (a stand_ins build only): the orchestrator adapters'
output starts, and the booted guest sees the plan.  test_adapters.py checks
the adapters' contracts and that libvirt defines what they write; a session
libvirtd cannot start a domain with a PCI hostdev, so this test gives the
domains virtio stand-in NICs (docs/hacking.md, "The stand-in seam") and
starts them.

    test_adapters_guest.py --pcinumad P --pcinumactl P --hook P \
        --kubevirt-hook P --vdsm-hook P --mkfakesysfs P --hosts DIR \
        --workdir DIR [-v]

pcinumatest.clients.ClientHarness: a private session libvirtd with the
hook as a qemu.d wrapper, pcinumad --stand-ins --allow-uid with its
watcher, on the one-node fixture host.  A bootable domain (two guest cells
bound to host node 0) with two stand-in NICs (for 0000:21:00.0 and
0000:22:00.0) and one plain user-mode NIC:

  1. KubeVirt: pcinuma-kubevirt-hook run as the sidecar-shim runs
     onDefineDomain (argv "onDefineDomain --vmi JSON --domain XML", with
     --stand-ins), its stdout defined as virt-launcher defines it, then
     started; the prepare hook allows it (it runs its plan) and the guest
     reads each stand-in's numa_node as the mark plans it, the plain NIC -1;
  2. VDSM: pcinuma-vdsm-hook in hooks/before_vm_start/ run with
     $_hook_domxml, the file defined and started as VDSM does (defineXML,
     then create); the same checks.

Environment: PCINUMA_CLIENTS_EMULATOR, the domains' emulator instead of
QEMU (the second stack's single-threaded TCG wrapper).

Output: "ok N - ..." lines, "N passed, M failed".  Exit 1 on any failure,
77 when libvirtd or virsh is not installed."""

import json
import os
import subprocess
import sys
import tempfile

from pcinumatest import guestvm
from pcinumatest.clients import (ClientHarness, MAC_OF, PLAIN_MAC, check_guest_numa, console_path,
                                 planned_cells, standin_domain_xml)
from pcinumatest.lvenv import MID_WARNED, NS
from pcinumatest.session import reachable_copy
from pcinumatest.suite import run_session_suite, session_args

MID_ALLOWED = "87dc1c2a46174a5ab53f60845dc67c20"
STANDIN_BDFS = ("0000:21:00.0", "0000:22:00.0")
VMI = json.dumps({"kind": "VirtualMachineInstance", "apiVersion": "kubevirt.io/v1",
                  "metadata": {"name": "kv-guest-1", "namespace": "ml"},
                  "spec": {"domain": {"cpu": {"dedicatedCpuPlacement": True,
                                              "numa": {"guestMappingPassthrough": {}}}}}})


class AdaptersGuest(ClientHarness):
    GUESTS = ("kv-guest-1", "vdsm-guest-1")

    def start_and_check(self, name, xml, console, what, macs):
        """Define xml, start it, and check the prepare decision and the
        booted guest's NICs."""
        self.define(xml)
        before = len(self.d.log())
        verdict, text = self.s.start_dom(name)
        if not self.check(verdict == "started", "%s: virsh start of the domain" % what, text):
            return
        self.check(self.wait_until(lambda: MID_ALLOWED in self.d.log()[before:] and name in self.d.log()[before:],
                                   5.0) and MID_WARNED not in self.d.log()[before:],
                   "%s: the prepare hook allows it, without a warning (it runs its plan)" % what,
                   self.d.log()[before:][-2000:])
        live = self.dump(name, inactive=False)
        report, secs = self.boot_report(name, console)
        self.diag("%s: guest report after %s s" % (what, "%.1f" % secs if secs else "-"))
        check_guest_numa(self.tap, what, report, live, macs, plain_macs=[PLAIN_MAC])
        self.s.virsh("destroy", name, timeout=60)

    def run(self):
        a = self.a
        macs = [MAC_OF[b] for b in STANDIN_BDFS]
        try:
            kit = self.guest_kit()
        except guestvm.Fatal as e:
            self.check(False, "a bootable guest (kernel, busybox initramfs) for the domains", str(e))
            return
        kv_hook = reachable_copy(a.kubevirt_hook, self.tmp, "onDefineDomain")
        vdsm_dir = os.path.join(self.tmp, "vdsm-hooks", "before_vm_start")
        os.makedirs(vdsm_dir)
        vdsm_hook = reachable_copy(a.vdsm_hook, os.path.dirname(vdsm_dir))
        os.symlink(vdsm_hook, os.path.join(vdsm_dir, "50_pcinuma"))
        common = ["--sysfs-root", self.sysfs, "--policy-file", self.policy, "--stand-ins", self.stand_ins_file]

        # 1. KubeVirt
        name = "kv-guest-1"
        console = console_path(self.s, name)
        xml = standin_domain_xml(name, macs + [PLAIN_MAC], kit, console, emulator=self.emulator)
        r = subprocess.run(["onDefineDomain", "--vmi", VMI, "--domain", xml] + common, executable=kv_hook,
                           env={"PATH": "/usr/bin:/bin", "PCINUMA_KUBEVIRT_STATE_DIR": os.path.join(self.tmp, "kv")},
                           capture_output=True, text=True, timeout=60)
        cells = planned_cells(r.stdout) if r.returncode == 0 else {}
        if self.check(r.returncode == 0 and NS in r.stdout and sorted(cells) == sorted(STANDIN_BDFS),
                      "kubevirt: onDefineDomain plans both stand-ins", "exit %d: %s" % (r.returncode, r.stderr)):
            self.start_and_check(name, r.stdout, console, "kubevirt", macs)

        # 2. VDSM
        name = "vdsm-guest-1"
        console = console_path(self.s, name)
        xml = standin_domain_xml(name, macs + [PLAIN_MAC], kit, console, emulator=self.emulator)
        fd, path = tempfile.mkstemp(dir=self.tmp)
        os.write(fd, xml.encode())
        os.close(fd)
        script = os.path.join(vdsm_dir, "50_pcinuma")
        r = subprocess.run([script] + common, env=dict(os.environ, _hook_domxml=path), capture_output=True,
                           text=True, timeout=60)
        with open(path, encoding="utf-8") as f:
            planned = f.read()
        os.unlink(path)
        cells = planned_cells(planned) if NS in planned else {}
        if self.check(r.returncode == 0 and sorted(cells) == sorted(STANDIN_BDFS),
                      "vdsm: before_vm_start replaces $_hook_domxml with a plan of both stand-ins",
                      "exit %d: %s" % (r.returncode, r.stderr)):
            self.start_and_check(name, planned, console, "vdsm", macs)


def main():
    def add(ap):
        ap.add_argument("--kubevirt-hook", required=True)
        ap.add_argument("--vdsm-hook", required=True)
    a = session_args(__doc__, add, paths=("kubevirt_hook", "vdsm_hook"))
    os.makedirs(a.workdir, exist_ok=True)
    return run_session_suite(a, AdaptersGuest, errors=(guestvm.Fatal,))


if __name__ == "__main__":
    sys.exit(main())

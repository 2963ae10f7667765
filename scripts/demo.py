#!/usr/bin/env python3
"""The pcinuma demo: the whole mission on the bundled sample host.

Run by scripts/demo.sh (which installs what is missing and builds) as root:

  1. builds the sample host (2 sockets, 4 NUMA nodes, 8 GPUs and 8 NICs
     under PCIe switches) as a sysfs tree;
  2. starts a private libvirtd (qemu:///session, as user pcinuma-test) with
     the pcinuma hook installed, and pcinumad over the sample host with no
     policy file (the built-in default, as on a fresh install), watching
     that libvirtd;
  3. defines the sample GPU VM the way an admin would (virsh define) and
     shows what pcinumad did to it, in a few lines read from the plan and
     the mark (pcinumactl plan --format explain has the whole of it);
  4. starts it: the hook lets it through (this machine has no GPUs, so
     libvirt then stops; that is expected);
  5. a client that defines and starts at once (virsh define && virsh
     start, as Nova and Terraform do): the hook lets the first start
     through to be restarted into the plan as soon as it is up (here it
     never comes up: no GPUs), and the next start has the plan;
  6. boots the same topology under TCG with a virtio stand-in at each GPU's
     and NIC's guest address, and prints what the guest reports beside the
     host's nodes;
  7. cleans up everything it started.

Its output fits one screen (about 50 lines), the final table included.
"""

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "tests", "lib"))

from pcinumatest import guestvm as tg   # noqa: E402  (initramfs, stand-ins, guest report)
from pcinumatest.session import HookDir, Session, reachable_copy   # noqa: E402

T0 = time.monotonic()
STEPS = 8


def step(n, text):
    print("[%d/%d %5.1fs] %s" % (n, STEPS, time.monotonic() - T0, text), flush=True)


def say(text=""):
    print("    " + text if text else "", flush=True)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


class QuietTap:
    """pcinumatest.guestvm's helpers report through a Tap; the demo prints its own."""
    failed = passed = 0

    def ok(self, cond, name, diag=None):
        if not cond:
            self.failed += 1
            print("    problem: %s\n%s" % (name, diag or ""), flush=True)
        return cond

    @staticmethod
    def diag(text):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    ctl = os.path.join(build, "pcinumactl", "pcinumactl")
    pcinumad = os.path.join(build, "daemon", "pcinumad")
    hook_bin = os.path.join(build, "hook", "pcinuma-hook")
    vm_src = os.path.join(TOP, "conf", "examples", "gpu-vm-1.xml")
    if os.geteuid() != 0:
        sys.exit("demo: run as root (it installs a libvirt hook and starts libvirtd as an unprivileged user)")

    work = tempfile.mkdtemp(prefix="pcinuma-demo-")
    os.chmod(work, 0o755)
    # No Debian package creates libvirt's qemu.d: HookDir makes it, and
    # removes at the end only what it made.
    hook = HookDir("pcinuma-demo-%s" % uuid.uuid4().hex[:8])
    daemon = sess = guest = None
    try:
        step(1, "The sample host: tests/fixtures/hosts/sample-4n.json as a sysfs tree")
        host = os.path.join(work, "sys")
        r = run([sys.executable, os.path.join(TOP, "tests", "fixtures", "mkfakesysfs.py"),
                 os.path.join(TOP, "tests", "fixtures", "hosts", "sample-4n.json"), host])
        if r.returncode:
            sys.exit("demo: cannot build the sample host: " + r.stderr)
        import json
        hj = json.loads(run([ctl, "host", "--sysfs-root", host, "--json"]).stdout)
        sockets = {}
        for n in hj["nodes"]:
            sockets.setdefault(n["socket"], []).append(str(n["id"]))
        classes = [d["class"] for d in hj["devices"] if not d.get("physfn")]
        say("%d sockets, %d NUMA nodes (%s); %d GPUs and %d InfiniBand NICs, each NIC beside a GPU under a "
            "PCIe switch"
            % (len(sockets), len(hj["nodes"]),
               ", ".join("nodes %s on socket %s" % (",".join(v), k) for k, v in sorted(sockets.items())),
               sum(c.startswith("0x0302") for c in classes), sum(c.startswith("0x0207") for c in classes)))

        step(2, "A private libvirtd with the pcinuma hook, and pcinumad (no policy file: the built-in default)")
        sockdir = os.path.join(work, "run")
        os.makedirs(sockdir, 0o755)
        sock = os.path.join(sockdir, "hook.sock")
        # libvirt runs hooks with a scrubbed environment and reads the hook
        # directory only when it starts: a wrapper with the socket baked in.
        # (a copy in the work dir: the build tree may be under /root, 0700)
        hook_copy = reachable_copy(hook_bin, work)
        # Only this demo's libvirtd (told apart by the HOME libvirt passes to
        # hooks) is forwarded: other libvirtds on the machine see exit 0.
        home_file = os.path.join(work, "libvirtd-home")
        hook.install("#!/bin/sh\n"
                     "[ \"$HOME\" = \"$(cat %s 2>/dev/null)\" ] || { cat >/dev/null; exit 0; }\n"
                     "PCINUMA_SOCKET=%s exec %s \"$@\"\n" % (home_file, sock, hook_copy))
        sess = Session()
        with open(home_file, "w") as f:
            f.write(sess.env["HOME"])
        os.chmod(home_file, 0o644)
        # No file there: the built-in default policy, as on a fresh install
        # (and "{}", the same, for pcinumactl).
        policy = os.path.join(work, "policy.json")
        builtin = os.path.join(work, "builtin-policy.json")
        with open(builtin, "w") as f:
            f.write("{}\n")
        uri = "qemu+unix:///session?socket=%s/libvirt/libvirt-sock" % sess.env["XDG_RUNTIME_DIR"]
        dlog = open(os.path.join(work, "pcinumad.log"), "w")
        daemon = subprocess.Popen([pcinumad, "--sysfs-root", host, "--socket", sock, "--policy-file", policy,
                                   "--libvirt-uri", uri, "--allow-uid", str(sess.uid), "--log-target", "stderr",
                                   # its pre-images stay with the demo, not in /var/lib/pcinuma
                                   "--state-dir", os.path.join(work, "state")],
                                  stderr=dlog)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        os.chmod(sock, 0o666)
        for _ in range(100):
            st = run([ctl, "status", "--socket", sock]).stdout
            if "connected" in st and "NOT connected" not in st:
                break
            time.sleep(0.1)
        sj = json.loads(run([ctl, "status", "--socket", sock, "--json"]).stdout or "{}")
        pol = sj.get("policy", {})
        say("libvirtd: qemu:///session as user %s; pcinumad: policy %s (%s), libvirt %s"
            % (sess.user, pol.get("default", "?"), "from " + pol["file"] if pol.get("from_file") else "no file: built-in",
               "connected" if (sj.get("libvirt") or {}).get("connected") else "NOT connected"))

        step(3, "An admin defines the sample GPU VM: virsh define conf/examples/gpu-vm-1.xml")
        say("16 hostdevs (8 GPUs, 8 NICs), 4 guest NUMA cells backed by host nodes 0-3, no PCI layout given")
        t = time.monotonic()
        name = sess.define(open(vm_src).read())
        planned = None
        while time.monotonic() - t < 5:
            x = sess.dumpxml(name)
            if "urn:pcinuma:topology:1" in x:
                planned = x
                break
            time.sleep(0.02)
        if not planned:
            sys.exit("demo: pcinumad did not plan the domain; see %s" % dlog.name)
        ms = (time.monotonic() - t) * 1000
        with open(dlog.name) as f:
            said = [l.split(" | ")[0].strip() for l in f if "redefined" in l]
        say("pcinumad redefined it %.0f ms later: %s" % (ms, said[-1].split("redefined: ", 1)[-1] if said else
                                                          "(see %s)" % dlog.name))

        step(4, "What pcinumad wrote into the definition")
        cur = os.path.join(work, "defined.xml")
        with open(cur, "w") as f:
            f.write(planned)
        pj = json.loads(run([ctl, "plan", "--sysfs-root", host, "--policy-file", builtin, "--format", "json",
                             cur]).stdout)
        feat = pj.get("features", {})
        moved = [d for d in pj["devices"] if d["action"] == "move"]
        say("%d of %d devices moved, each to the guest cell of its host node, behind %d expander buses (one per "
            "host root complex) and the host's switches" % (len(moved), len(pj["devices"]), len(pj["expanders"])))
        fid = pj.get("fidelity") or {}
        total = sum(fid.get(k) or 0 for k in ("same", "closer", "farther", "unknown"))
        if total:
            say("path fidelity: %d of %d device pairs keep their nvidia-smi topo -m path type in the guest"
                % (fid.get("same") or 0, total))
        if feat.get("pcihole64_kib"):
            gib = feat["pcihole64_kib"] >> 20
            say("64-bit MMIO: <pcihole64> %s for the GPUs' BARs (mmio64 auto)"
                % ("%d TiB" % (gib >> 10) if gib >= 1024 and gib % 1024 == 0 else "%d GiB" % gib))
        import re
        m = re.search(r'<pcinuma:topology [^>]*?policy="([^"]*)"[^>]*?migratable="([^"]*)"'
                      r'(?:[^>]*?migratable-reason="([^"]*)")?', planned)
        if m:
            say("the mark: policy %s, migratable=\"%s\"%s" % (m.group(1), m.group(2),
                                                             " (%s)" % m.group(3) if m.group(3) else ""))
        r = run([ctl, "revert", cur])
        # Same serializer on both sides, so the diff shows only pcinuma's changes.
        before = run(["xmllint", "--format", "-"], input=r.stdout).stdout
        after = run(["xmllint", "--format", "-"], input=planned).stdout
        # The mark is long (it keeps what revert needs); summarise it and
        # diff the rest.
        mark = re.search(r"\n *<metadata>.*?</metadata>", after, flags=re.S)
        mark_lines = mark.group(0).count("\n") if mark else 0
        after = after.replace(mark.group(0), "") if mark else after
        diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
        changed = sum(1 for l in diff if l[:1] in "+-" and l[:3] not in ("+++", "---"))
        say("%d lines of the definition changed, and a %d-line mark keeps what 'pcinumactl revert' needs; "
            "'pcinumactl plan --format explain' says why each device went where" % (changed, mark_lines))

        step(5, "virsh start %s: the pcinuma hook checks the layout at start" % name)
        r = sess.virsh("start", name, quiet=False)
        with open(dlog.name) as f:
            verdict = [l.split(" | ")[0] for l in f if "PCINUMA_PHASE=prepare" in l and "PCINUMA_DOMAIN=%s " % name in l]
        for v in verdict[-1:]:
            say("pcinumad: " + v.split(": ", 1)[-1])
        say("libvirt then says: %s" % (r.stderr.strip().splitlines() or ["(started)"])[-1])
        say("(as expected: this machine has no GPUs to pass through; the hook ran first and allowed it)")

        step(6, "A client that defines and starts at once: virsh define gpu-vm-2.xml && virsh start gpu-vm-2")
        say("(Nova, Terraform and scripts do this: libvirt starts the definition from before pcinuma's rewrite)")
        vm2 = open(vm_src).read().replace("<name>gpu-vm-1</name>", "<name>gpu-vm-2</name>")
        vm2 = re.sub(r"<uuid>[^<]*</uuid>", "<uuid>%s</uuid>" % uuid.uuid4(), vm2)
        path2 = sess.write(vm2, "gpu-vm-2.xml")
        mark2 = os.path.getsize(dlog.name)
        r = sess.run_as(["/bin/sh", "-c", "virsh -c qemu:///session define %s && virsh -c qemu:///session start gpu-vm-2"
                         % path2], timeout=120)
        time.sleep(1)
        with open(dlog.name) as f:
            f.seek(mark2)
            lines = [l.split(" | ")[0] for l in f if "gpu-vm-2" in l]
        for line in lines:
            if "starts once" in line or "restart" in line:
                say("pcinumad: " + line.split(": ", 1)[-1])
        say("libvirt then says: %s" % ((r.stdout + r.stderr).strip().splitlines() or ["(started)"])[-1])
        say("(with real GPUs it comes up, and pcinuma-watcher restarts it into the plan of the XML it was started with)")
        t = time.monotonic()
        while time.monotonic() - t < 10 and "urn:pcinuma:topology:1" not in sess.dumpxml("gpu-vm-2"):
            time.sleep(0.1)
        r = sess.virsh("start", "gpu-vm-2", quiet=False)
        with open(dlog.name) as f:
            verdict = [l.split(" | ")[0] for l in f if "PCINUMA_PHASE=prepare" in l and "PCINUMA_DOMAIN=gpu-vm-2 " in l]
        say("its definition is planned; the next start: pcinumad: " + verdict[-1].split(": ", 1)[-1]
            if verdict else "its next start: no decision logged")
        sess.undefine("gpu-vm-2")

        step(7, "Booting the planned topology under TCG, with a virtio stand-in at each device's guest address")
        tap = QuietTap()
        tools = tg.find_prereqs(tap)
        initrd_local, _ = tg.build_initramfs(work, tools["busybox"], tools["cpio"])
        kernel = os.path.join(sess.files, "vmlinuz")
        initrd = os.path.join(sess.files, "initramfs.cpio.gz")
        for src, dst in ((tools["kernel"], kernel), (initrd_local, initrd)):
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o644)
            os.chown(dst, sess.uid, sess.gid)
        console = os.path.join(sess.files, "console.log")
        bxml, standins = tg.boot_xml(None, planned, "gpu-vm-1-standin", kernel, initrd, console)
        # Without its GPUs the stand-in copy is no longer pcinuma's to plan:
        # drop the mark, or pcinumad would (rightly) undo the topology of a
        # marked domain that has no passthrough devices left.
        import xml.etree.ElementTree as ET
        root = ET.fromstring(bxml)
        for md in root.findall("metadata"):
            for el in md.findall("{urn:pcinuma:topology:1}topology"):
                md.remove(el)
        bxml = ET.tostring(root, encoding="unicode")
        guest = tg.Guest(sess, "gpu-vm-1-standin", bxml, console, 90)
        dump = guest.define()
        loc = tg.locate(dump, standins)
        if not guest.start_and_wait():
            sys.exit("demo: the guest stopped or did not report within 90 s (domain state: %s)\n%s\nlibvirtd log:\n%s"
                     % (guest.state, tg.console_tail(guest.console_text), sess.log_tail(20)))
        say("the guest booted and reported in %.1f s" % guest.boot_s)

        step(8, "What the guest sees, beside the host")
        devs, _ = tg.parse_report(guest.console_text)
        by_path = {}
        for d in devs:
            by_path.setdefault(d["hostbridge"], []).append(d)
        plan_cell = {}
        for d in pj["devices"]:
            plan_cell[d["host"]] = (d["host_node"], d["guest_cell"], d.get("class_name"), d.get("guest_bdf"))
        say("%-14s %-22s %-9s %-10s %-13s %-15s %s" % ("HOST DEVICE", "CLASS", "HOST NODE", "GUEST CELL",
                                                      "GUEST BDF", "GUEST numa_node", ""))
        ok_all = True
        for alias, bdf, _addr in standins:
            info = loc.get(alias, {})
            hb = info.get("hostbridge")
            # The same slot and function at every level below the host
            # bridge: the stand-in sits behind a root port and, where the
            # host has a switch, behind the guest's switch ports too.
            mine = [d for d in tg.find_guest_device(by_path.get(hb, []), info)
                    if d["id"] == tg.STANDIN_ID] if hb else []
            node, cell, cls, want_bdf = plan_cell.get(bdf, ("?", "?", "?", None))
            g = mine[0] if mine else None
            # The guest BDF the plan predicts must be the one the guest gave.
            good = (g is not None and str(g["numa"]) == str(cell)
                    and (want_bdf is None or g["bdf"] == want_bdf))
            ok_all = ok_all and good
            say("%-14s %-22s %-9s %-10s %-13s %-15s %s" % (bdf, cls, node, cell, g["bdf"] if g else "?",
                                                           g["numa"] if g else "?", "ok" if good else "MISMATCH"))
        nodes = sorted({d["numa"] for d in devs if d["id"] == tg.STANDIN_ID})
        say("The guest's own words: every device reports the NUMA node of its host device's cell"
            if ok_all else "Some devices do not report their planned node: see above")
        say("(guest nodes seen: %s; without pcinuma every one of them would report -1)" % ", ".join(nodes))
        return 0 if ok_all else 1
    finally:
        print("[cleanup] stopping the guest, libvirtd and pcinumad; removing the hook wrapper", flush=True)
        if guest is not None:
            guest.cleanup()
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
        if sess is not None:
            sess.stop()
        hook.remove()
        shutil.rmtree(work, ignore_errors=True)
        print("[done in %.1f s]" % (time.monotonic() - T0), flush=True)


if __name__ == "__main__":
    sys.exit(main())

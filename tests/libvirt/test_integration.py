#!/usr/bin/env python3
"""libvirt suite: pcinumad, its libvirt watcher and the real hook against a
private session libvirtd (docs/design.md §8, issue 4).

    test_integration.py --pcinumad P --pcinumactl P --hook P \
        --mkfakesysfs P --hosts DIR --workdir DIR [--source DIR] [-v]

How it is wired (option b of issue 4: judge the hook's verdict from a real
start attempt):

* A private session libvirtd (tests/lib/pcinumatest/session.py) runs as the
  unprivileged user pcinuma-test, TCG only.
* pcinumad runs as root on a private socket with the fixture host
  sample-4n (--sysfs-root) and a test policy file.  Its watcher connects to
  the session daemon as root through
  qemu+unix:///session?socket=$XDG_RUNTIME_DIR/libvirt/libvirt-sock, and it
  serves the session's hook calls thanks to --allow-uid <pcinuma-test>.
  The socket is chmod 0666 (its directory is 0755) once the daemon made it.
* The real hook is installed for the test's duration as
  /etc/libvirt/hooks/qemu.d/pcinuma-test-<random>, a wrapper that sets
  PCINUMA_SOCKET and PCINUMA_HOOK_CONF (libvirt scrubs the environment) and
  execs a copy of pcinuma-hook.  libvirt reads qemu.d only when it starts,
  so the wrapper is installed before any session libvirtd starts, and
  removed in a finally block and by atexit.  It forwards only the calls of
  this test's own session daemons (libvirt passes HOME=<session home>);
  every other libvirtd that happens to start meanwhile gets exit 0.  A
  refusal counts only when libvirt's error names this wrapper.
* A domain with PCI hostdevs can never start under a session libvirtd
  ("host doesn't support passthrough of host PCI devices"), but libvirt
  runs the prepare hook before it gets there.  So a start attempt tells the
  hook's verdict: refused -> virsh's error has "Hook script execution
  failed" and "pcinuma: refusing to start"; allowed -> the error is the
  passthrough one.

What it checks (issue 4): define-time planning and its layout; the prepare
verdicts (require, legacy, policy refusal; the "unplanned at start" case is
produced by a pcinumad whose libvirt URI is unreachable, so its watcher
cannot plan, then replaced by a connected one); define && start races; the
migrate hook, and a real offline `virsh migrate` between two session
libvirtds on one host (accepted: the same topology; test_migrate.py
migrates between hosts that differ); revert by pcinumactl and by policy off; a running domain whose
persistent definition changes; transient domains; parallel starts, a
libvirtd restart, a daemon restart, and that a failure never loses a
definition (a refused domain, and a redefinition libvirt rejects because
its config directory is read-only).

Output: "ok N - ..." / "not ok N - ..." lines, "# ..." diagnostics, and a
final line "N passed, M failed".  Exit 1 on any failure, 77 only when
libvirtd or virsh is not installed.
"""

import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
import uuid as uuidlib

from pcinumatest.lvenv import *  # noqa: F401,F403
from pcinumatest.lvenv import Harness
from pcinumatest.session import SessionError
from pcinumatest.suite import run_session_suite, session_args
from pcinumatest.xmlcmp import diff

HERE = os.path.dirname(os.path.abspath(__file__))


class Test(Harness):
    """The cases, in the order run() takes them."""

    # -- 2: prepare verdicts ---------------------------------------------
    def t2_prepare(self):
        d = self.d
        # Defined while no daemon runs: nothing plans them.
        xml_req = domain_xml("p2-req", ["0000:13:00.0", "0000:33:00.0"],
                             memnodes={0: "0", 1: "1"})
        xml_leg = domain_xml("legacy-p2", ["0000:13:00.0", "0000:33:00.0"],
                             memnodes={0: "0", 1: "1"})
        self.define(xml_req)
        self.define(xml_leg)
        before_req = self.dump("p2-req")
        before_leg = self.dump("legacy-p2")
        self.check(not is_planned(before_req) and not is_planned(before_leg),
                   "2: domains defined while pcinumad is down stay unplanned")
        # A daemon that answers the hook while its libvirt connection is
        # down (its watcher cannot plan yet): the start must be refused
        # with the §8 message, which says the definition is being updated.
        dead = "qemu+unix:///session?socket=" + os.path.join(self.tmp, "no-such-sock")
        d.start(dead)
        st = d.status() or {}
        self.check(not (st.get("libvirt") or {}).get("connected", True),
                   "2: pcinumad with an unreachable libvirt reports "
                   "'connected: false'", json.dumps(st.get("libvirt")))
        v, text = self.s.start_dom("p2-req")
        self.check(v == "refused" and MSG8_MISMATCH in text and MSG8_UPDATING in text,
                   "2: require, unplanned definition: start refused with the "
                   "§8 message", text)
        ok, how, dg = self.same(self.dump("p2-req"), before_req, "p2-req")
        self.check(ok, "2: the refused start left the definition unchanged",
                   dg, note=how)
        v, text = self.s.start_dom("legacy-p2")
        self.check(v == "passed", "2: legacy, unplanned definition: start "
                   "passes the hook", text)
        log = d.log()
        warned = [l for l in log.splitlines()
                  if MID_WARNED in l and "PCINUMA_DOMAIN=legacy-p2" in l]
        self.check(warned and "warning" in warned[0],
                   "2: legacy: the hook's pass came with a warning "
                   "(MESSAGE_ID start allowed with a warning)",
                   "\n".join(warned) or log[-2000:])
        # The real daemon now: it plans both within 2 s of its start.
        d.stop()
        t0 = time.monotonic()
        d.start(self.s.uri)
        xml, _ = self.wait_planned("p2-req", timeout=PLAN_DEADLINE -
                                   (time.monotonic() - t0))
        dt = time.monotonic() - t0
        self.check(is_planned(xml) and dt <= PLAN_DEADLINE + 0.2,
                   "2: pcinumad started now plans the domain within %.0f s"
                   % PLAN_DEADLINE, "after %.2fs; planned=%s\n%s"
                   % (dt, is_planned(xml), d.log()[-2000:]),
                   note="%.2fs" % dt)
        v, text = self.s.start_dom("p2-req")
        self.check(v == "passed", "2: require: the next start passes the hook",
                   text)
        xml, dt = self.wait_planned("legacy-p2")
        self.check(dt is not None, "2: legacy: the definition is planned too")
        # A domain the policy refuses: device on host node 2, cells on 0, 1.
        xml_bad = domain_xml("p2-bad", ["0000:13:00.0", "0000:53:00.0"],
                             memnodes={0: "0", 1: "1"})
        self.define(xml_bad)
        before_bad = self.dump("p2-bad")
        seen = self.wait_log("Domain p2-bad: not planned", timeout=5)
        self.check(seen, "2: the watcher looked at the refused domain and "
                   "left it (log 'Domain p2-bad: not planned')",
                   d.log()[-2000:])
        ok, how, dg = self.same(self.dump("p2-bad"), before_bad, "p2-bad")
        self.check(ok, "8d: a policy refusal leaves the definition unchanged",
                   dg, note=how)
        v, text = self.s.start_dom("p2-bad")
        self.check(v == "refused" and "0000:53:00.0" in text and
                   "host node 2" in text,
                   "2: require, device on a host node no cell is backed by: "
                   "start refused naming the device", text)
        for n in ("p2-req", "legacy-p2", "p2-bad"):
            self.s.undefine(n)

    # -- 1: define-time planning -------------------------------------------
    def t1_define(self):
        src = read(os.path.join(self.a.source, "conf", "examples",
                                "gpu-vm-1.xml"))
        t0 = time.monotonic()
        name = self.define(src)
        xml, dt = self.wait_planned(name)
        self.check(dt is not None, "1: gpu-vm-1 (16 hostdevs) is planned "
                   "within %.0f s of virsh define" % PLAN_DEADLINE,
                   xml[-3000:] if dt is None else None,
                   note="%.2fs" % (time.monotonic() - t0))
        probs = layout_problems(xml)
        self.check(not probs, "1: planned layout: each hostdev alone on its "
                   "port (a root port, or a switch's downstream port) under a pxb "
                   "whose <node> is the cell backed by its host node", "\n".join(probs))
        npxb = xml.count("model='pcie-expander-bus'")
        self.check(npxb == 4, "1: one pxb per host root complex of the devices (4: one per cell on this host)",
                   "found %d" % npxb)
        v, text = self.s.start_dom(name)
        self.check(v == "passed", "1: the planned domain passes the hook", text)
        self.planned_gpu = xml
        # The golden inputs planned under require on this fixture host go
        # through the watcher too: each is planned on define.
        gdir = os.path.join(self.a.source, "tests", "golden")
        cases = []
        for case in sorted(os.listdir(gdir)) if os.path.isdir(gdir) else []:
            cd = os.path.join(gdir, case)
            try:
                if (read(os.path.join(cd, "host")).strip() == "sample-4n" and
                        read(os.path.join(cd, "args")).split() == ["--policy", "require"] and
                        os.path.exists(os.path.join(cd, "expected.xml"))):
                    cases.append(case)
            except OSError:
                pass
        n_ok, bad = 0, []
        for case in cases:
            gx = read(os.path.join(gdir, case, "input.xml"))
            gx = re.sub(r"<domain type=(['\"])kvm\1", "<domain type='qemu'", gx)
            gx = re.sub(r"<name>[^<]*</name>", "<name>golden-%s</name>" % case, gx, 1)
            if "<uuid>" not in gx:
                gx = gx.replace("</name>", "</name>\n  <uuid>%s</uuid>" %
                                uuidlib.uuid5(uuidlib.NAMESPACE_URL, case), 1)
            r = self.s.define(gx, check=False)
            if not isinstance(r, str):
                bad.append("%s: define failed: %s" % (case, r.stderr.strip()))
                continue
            gxml, gdt = self.wait_planned(r)
            self.wait_idle()    # an input carrying a stale mark is replanned
            if gdt is None:
                bad.append("%s: not planned within %.0f s" % (case, PLAN_DEADLINE))
            else:
                n_ok += 1
                v, text = self.s.start_dom(r)
                if v != "passed":
                    bad.append("%s: planned, but the start: %s: %s" % (case, v, text))
            self.s.undefine(r)
        self.check(cases and not bad, "1: the golden inputs planned under "
                   "require on sample-4n are planned on define and pass the "
                   "hook", "\n".join(bad), note="%d of %d" % (n_ok, len(cases)))

    # -- 4: migrate ------------------------------------------------------------
    def t4_migrate(self):
        # migration: refuse (the default): the mark says migratable="no"
        # and an incoming planned domain is refused.
        planned = self.dump("gpu-vm-1")
        r = self.run_hook("gpu-vm-1", "migrate", "begin", planned)
        self.check(re.search(r"""migratable=['"]no['"]""", planned) and r.returncode == 1 and
                   "refusing incoming migration" in r.stderr,
                   "4: migration refuse (the default): marked migratable=\"no\", the migrate hook refuses it",
                   "exit %d\nstderr: %s" % (r.returncode, r.stderr))
        # migration: same-topology (a fleet's opt-in): both session daemons
        # share this pcinumad and its host, so the domain comes in with
        # the same devices (test_migrate.py has hosts that differ).  The
        # sample host's NICs at 0000:14:00.0 and 0000:74:00.0 (15b3:1021)
        # are bound to mlx5_core: a migrating guest gets them only from the
        # passthrough pool (the daemon suite checks the refusal without it).
        self.set_policy(migration="same-topology", passthrough_pool=["15b3:1021"])
        try:
            self.check(self.d.hup(), "4: SIGHUP reloads the policy (migration: same-topology)")
            deadline = time.monotonic() + 5 * PLAN_DEADLINE
            while not re.search(r"""migratable=['"]yes['"]""", planned) and time.monotonic() < deadline:
                time.sleep(0.2)
                planned = self.dump("gpu-vm-1")
            if not self.check(re.search(r"""migratable=['"]yes['"]""", planned),
                              "4: migration same-topology: the watcher plans the domain again, migratable=\"yes\"",
                              planned[:3000]):
                return
            self.t4_fleet(planned)
        finally:
            self.set_policy()
            self.d.hup()

    def t4_fleet(self, planned):
        r = self.run_hook("gpu-vm-1", "migrate", "begin", planned)
        ok, how, dg = self.same(r.stdout, planned, "mig-hook") if r.returncode == 0 else (False, "", r.stderr)
        self.check(ok, "4: migrate begin, planned domain, a host like its own: "
                   "the hook exits 0 with the domain on stdout", dg, note=how)
        marked_no = planned.replace("migratable='yes'", "migratable='no'").replace('migratable="yes"', 'migratable="no"')
        r = self.run_hook("gpu-vm-1", "migrate", "begin", marked_no)
        self.check(marked_no != planned and
                   r.returncode == 1 and 'migratable="no"' in r.stderr and
                   "refusing incoming migration" in r.stderr,
                   "4: migrate begin, planned domain: the hook exits 1 with the "
                   "migratable=\"no\" message", "exit %d\nstderr: %s"
                   % (r.returncode, r.stderr))
        plain = domain_xml("mig-plain", ["0000:13:00.0"], memnodes={0: "0", 1: "1"})
        r = self.run_hook("mig-plain", "migrate", "begin", plain)
        self.check(r.returncode == 0 and r.stdout == plain,
                   "4: migrate begin, unplanned domain: passes with the XML "
                   "on stdout", "exit %d\nstderr: %s\nstdout: %s"
                   % (r.returncode, r.stderr, r.stdout[:500]))
        r = self.run_hook("gpu-vm-1", "restore", "begin", planned)
        self.check(r.returncode == 0 and r.stdout == planned,
                   "4: restore begin passes the XML unchanged",
                   "exit %d\nstderr: %s" % (r.returncode, r.stderr))

        # A real offline migration between two session libvirtds.
        try:
            self.s2 = self.new_session()
        except SessionError as e:
            self.check(False, "4: a second session libvirtd starts", str(e))
            return
        dest = self.s2.uri
        try:
            r = self.s.virsh("migrate", "--offline", "--persistent", "gpu-vm-1",
                             dest, timeout=VIRSH_TIMEOUT, quiet=False)
            out = (r.stdout + r.stderr).strip()
            hang = False
        except subprocess.TimeoutExpired:
            out, hang, r = "timed out", True, None
        on_dest = self.s2.virsh("dominfo", "gpu-vm-1").returncode == 0
        self.diag("virsh migrate --offline --persistent gpu-vm-1 %s -> exit %s: %s"
                  % (dest, None if r is None else r.returncode, out))
        ok = not hang and r is not None and r.returncode == 0 and on_dest
        self.check(ok, "4: real offline virsh migrate of a planned domain between "
                   "two session libvirtds on one host is accepted by the destination's hook",
                   "%s\ndomain on destination: %s" % (out, on_dest))
        if on_dest:
            ok, how, dg = self.same(self.dump("gpu-vm-1", sess=self.s2), planned, "mig-dst")
            self.check(ok, "4: the migrated definition is the planned one", dg, note=how)
            self.s2.undefine("gpu-vm-1")
        after = self.dump("gpu-vm-1")
        ok, how, dg = self.same(after, planned, "mig-src")
        self.check(ok, "4: the migration leaves the source's "
                   "definition as it was", dg, note=how)
        # an unplanned domain migrates (policy off for it: stays unplanned)
        self.define(domain_xml("off-mig", ["0000:13:00.0"], memnodes={0: "0", 1: "1"}))
        try:
            r = self.s.virsh("migrate", "--offline", "--persistent", "off-mig",
                             dest, timeout=VIRSH_TIMEOUT, quiet=False)
            out = (r.stdout + r.stderr).strip()
            ok = r.returncode == 0 and \
                self.s2.virsh("dominfo", "off-mig").returncode == 0
        except subprocess.TimeoutExpired:
            out, ok = "timed out", False
        self.check(ok, "4: real offline virsh migrate of an unplanned domain "
                   "passes the hook", out)
        self.s.undefine("off-mig")
        self.s2.stop()
        self.s2 = None

    # -- 5: revert ---------------------------------------------------------
    def t5_revert(self):
        d = self.d
        name = "rev-1"
        self.define(domain_xml(name, ["0000:13:00.0", "0000:33:00.0",
                                      "0000:17:00.0"],
                               memnodes={0: "0", 1: "1"}))
        time.sleep(0.5)   # give the watcher a chance to (wrongly) touch it
        before = self.dump(name)
        self.check(not is_planned(before), "5: policy off: the definition is "
                   "left as it is")
        # policy require + SIGHUP -> planned
        self.set_policy(rules=[r for r in self.rules if r[0] != "rev-*"])
        self.check(d.hup(), "5: SIGHUP reloads the policy")
        xml, dt = self.wait_planned(name)
        self.check(dt is not None and not layout_problems(xml),
                   "5: policy switched to require + SIGHUP: planned",
                   "\n".join(layout_problems(xml)), note=dt and "%.2fs" % dt)
        # pcinumactl revert, the policy switched back to off first; the
        # daemon is stopped meanwhile (a running daemon with policy off
        # reverts by itself, checked below; with require it would plan the
        # domain again at once)
        self.set_policy()
        d.stop()
        r = subprocess.run([self.a.pcinumactl, "revert", "--domain", name,
                            "--connect", self.s.uri, "--policy-file", self.policy],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=VIRSH_TIMEOUT)
        after = self.dump(name)
        ok, how, dg = self.same(after, before, "rev1-ctl")
        self.check(r.returncode == 0 and ok, "5: pcinumactl revert --domain "
                   "restores the definition from before the plan",
                   "exit %d: %s%s\n%s" % (r.returncode, r.stdout, r.stderr,
                                          dg or ""), note=how)
        d.start(self.s.uri, wait_connected=True)
        time.sleep(0.5)
        ok, how, dg = self.same(self.dump(name), after, "rev1-restart")
        self.check(ok, "5: a restarted pcinumad leaves the reverted domain "
                   "alone under policy off", dg, note=how)
        # require again, then off: the watcher reverts by itself
        self.set_policy(rules=[r for r in self.rules if r[0] != "rev-*"])
        d.hup()
        xml, dt = self.wait_planned(name)
        self.check(dt is not None, "5: planned again under require")
        self.set_policy()
        d.hup()
        got = self.wait_until(lambda: (lambda x: x if not is_planned(x) else None)(
            self.dump(name)), timeout=PLAN_DEADLINE)
        ok, how, dg = self.same(got or self.dump(name), before, "rev1-off")
        self.check(got and ok, "5: policy off + SIGHUP: the watcher reverts the "
                   "definition to the one from before the plan", dg, note=how)
        self.s.undefine(name)

    # -- 6: a running domain -----------------------------------------------
    def t6_running(self):
        name = "run-1"
        xml0 = domain_xml(name, [], cells=2, memory_mib=64)
        self.define(xml0)
        v, text = self.s.start_dom(name)
        if not self.check(v == "started", "6: a domain without hostdevs starts "
                          "under TCG", text):
            self.s.undefine(name)
            return
        live0 = self.dump(name, inactive=False)
        xml1 = domain_xml(name, ["0000:13:00.0", "0000:33:00.0"], cells=2,
                          memory_mib=64, memnodes={0: "0", 1: "1"})
        r = self.s.define(xml1, check=False)
        self.check(isinstance(r, str), "6: virsh define of the running domain "
                   "with hostdevs added", getattr(r, "stderr", ""))
        xml, dt = self.wait_planned(name)
        self.check(dt is not None and not layout_problems(xml),
                   "6: the persistent definition of the running domain is "
                   "planned", "\n".join(layout_problems(xml)) +
                   self.d.log()[-1500:], note=dt and "%.2fs" % dt)
        # The log line follows the redefinition by a moment: wait for it.
        self.check(self.wait_log("it is running"),
                   "6: the log says the new layout applies at the next start")
        state = self.s.virsh("domstate", name).stdout.strip()
        live = self.dump(name, inactive=False)
        self.check(state == "running" and "pcie-expander-bus" not in live and
                   NS not in live,
                   "6: the domain keeps running and its live XML has no pxb",
                   "state %r\n%s" % (state, diff(live0, live)))
        self.s.virsh("destroy", name, timeout=VIRSH_TIMEOUT)
        self.s.undefine(name)

    # -- 7: transient domains ------------------------------------------------
    def t7_transient(self):
        xml = domain_xml("trans-1", ["0000:13:00.0", "0000:33:00.0"],
                         memnodes={0: "0", 1: "1"})
        path = self.s.write(xml, "trans-1.xml")
        v, text = self.s.create_dom(path)
        self.check(v == "refused" and MSG8_MISMATCH in text,
                   "7: virsh create of an unplanned domain under require: "
                   "refused by the hook", text)
        r = subprocess.run([self.a.pcinumactl, "plan", "--sysfs-root", self.sysfs,
                            "--policy", "require", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        if not self.check(r.returncode == 0 and is_planned(r.stdout),
                          "7: pcinumactl plan --policy require vm.xml",
                          r.stderr):
            return
        ppath = self.s.write(r.stdout, "trans-1.planned.xml")
        v, text = self.s.create_dom(ppath)
        self.check(v == "passed", "7: virsh create of the planned XML passes "
                   "the hook (then libvirt fails on the hostdev)", text)
        # and through a pipe, as the §8 message suggests
        try:
            r2 = self.s.run_as(["/bin/sh", "-c", "%s plan --sysfs-root %s --policy "
                                "require %s | virsh -c qemu:///session create "
                                "/dev/stdin" % (self.ctl_copy, self.sysfs, path)],
                               timeout=VIRSH_TIMEOUT)
            text = (r2.stdout + r2.stderr).strip()
            v = classify(r2.returncode, text)
        except subprocess.TimeoutExpired:
            v, text = "hang", "timed out"
        self.check(v == "passed", "7: 'pcinumactl plan ... | virsh create "
                   "/dev/stdin' passes the hook", text)

    # -- 3: define && start races -------------------------------------------
    def t3_race(self):
        """`virsh define X && virsh start X`, 20 times, the XML toggling a
        hostdev each round, so every define needs a fresh plan."""
        name = "race-1"
        devs_a = ["0000:13:00.0", "0000:33:00.0"]
        devs_b = ["0000:13:00.0", "0000:33:00.0", "0000:17:00.0"]
        counts = {"refused": 0, "passed": 0}
        hangs, odd, stuck = [], [], []
        for i in range(20):
            xml = domain_xml(name, devs_b if i % 2 else devs_a,
                             memnodes={0: "0", 1: "1"})
            path = self.s.write(xml, "race-%d.xml" % i)
            try:
                r = self.s.run_as(["/bin/sh", "-c",
                                   "virsh -c qemu:///session define %s && "
                                   "virsh -c qemu:///session start %s"
                                   % (path, name)], timeout=VIRSH_TIMEOUT)
                text = (r.stdout + r.stderr).strip()
                v = classify(r.returncode, text)
            except subprocess.TimeoutExpired:
                v, text = "hang", "define && start did not return in %ds" % VIRSH_TIMEOUT
            if v == "hang":
                hangs.append("round %d: %s" % (i, text))
                break
            if v == "refused" and not (MSG8_MISMATCH in text and MSG8_UPDATING in text):
                v = "other"
            if v not in counts:
                odd.append("round %d: %s: %s" % (i, v, text))
                continue
            counts[v] += 1
            if v == "refused":
                # the refusal told the watcher; let it finish
                self.wait_until(lambda: is_planned(self.dump(name)), PLAN_DEADLINE)
                self.wait_idle()
                v2, text2 = self.s.start_dom(name)
                if v2 == "hang":
                    hangs.append("round %d, second start: %s" % (i, text2))
                    break
                if v2 != "passed":
                    stuck.append("round %d: refused, and the next start: %s: %s"
                                 % (i, v2, text2))
        self.check(not hangs, "3: 20 x 'virsh define && virsh start': every "
                   "call returns within %d s" % VIRSH_TIMEOUT, "\n".join(hangs))
        self.check(not odd, "3: each start is refused with the §8 message or "
                   "passes the hook", "\n".join(odd[:3]),
                   note="%(refused)d refused, %(passed)d passed" % counts)
        guard = [l[:300] for l in self.d.log().splitlines()
                 if "race-1" in l and "times within" in l]
        self.check(not stuck, "3: after a refusal, the next start passes the "
                   "hook", "%d of %d refusals were followed by another refusal;"
                   " first: %s\npcinumad's loop guard: %s"
                   % (len(stuck), counts["refused"],
                      stuck[0][:900] if stuck else "",
                      "\n".join(guard) or "(did not fire)"))
        self.s.undefine(name)

    # -- 8a: parallel starts -------------------------------------------------
    def t8a_parallel(self):
        names = []
        for i in range(8):
            name = "par-%d" % i
            if i % 2 == 0:
                devs, mem = ["0000:13:00.0", "0000:33:00.0"], {0: "0", 1: "1"}
            else:   # refused by the policy: host node 2, cells on 0 and 1
                devs, mem = ["0000:53:00.0"], {0: "0", 1: "1"}
            self.define(domain_xml(name, devs, memnodes=mem))
            names.append(name)
        for name in names[::2]:
            self.wait_planned(name)
        results = {}

        def go(n):
            results[n] = self.s.start_dom(n)
        ths = [threading.Thread(target=go, args=(n,)) for n in names]
        t0 = time.monotonic()
        for t in ths:
            t.start()
        for t in ths:
            t.join(VIRSH_TIMEOUT + 10)
        dt = time.monotonic() - t0
        bad = []
        for i, n in enumerate(names):
            want = "passed" if i % 2 == 0 else "refused"
            got, text = results.get(n, ("hang", "no answer"))
            if got != want:
                bad.append("%s: want %s, got %s: %s" % (n, want, got, text))
        self.check(not bad, "8a: 8 domains started in parallel: all answered as "
                   "expected (4 pass the hook, 4 refused), no hang",
                   "\n".join(bad), note="%.1fs" % dt)
        for n in names:
            self.s.undefine(n)

    # -- 8b: libvirtd restart ------------------------------------------------
    def t8b_libvirtd_restart(self):
        d = self.d
        self.check(d.wait_connected(1), "8b: the watcher is connected before")
        t0 = time.monotonic()
        self.s.kill_daemon()
        gone = self.wait_until(lambda: not (d.status() or {}).get(
            "libvirt", {}).get("connected", True), timeout=15)
        self.check(gone, "8b: status shows the watcher disconnected once "
                   "libvirtd is gone", note="%.2fs" % (time.monotonic() - t0))
        time.sleep(1.0)
        self.s.restart()
        t_up = time.monotonic()
        # defined right after libvirtd is back, before the watcher reconnects
        connected_at_define = (d.status() or {}).get("libvirt", {}).get("connected")
        self.define(domain_xml("lvr-1", ["0000:13:00.0", "0000:33:00.0"],
                               memnodes={0: "0", 1: "1"}))
        ok = d.wait_connected(RECONNECT_DEADLINE)
        dt = time.monotonic() - t_up
        self.check(ok, "8b: the watcher reconnects within %.0f s of libvirtd's "
                   "restart (status: connected)" % RECONNECT_DEADLINE,
                   d.status(text=True), note="%.2fs" % dt)
        self.diag("lvr-1 was defined while the watcher was %s"
                  % ("connected (the reconnect beat us)" if connected_at_define
                     else "disconnected"))
        xml, pdt = self.wait_planned("lvr-1", timeout=PLAN_DEADLINE + RECONNECT_DEADLINE)
        self.check(pdt is not None, "8b: a domain defined before the watcher "
                   "reconnected is planned", d.log()[-1500:])
        self.s.undefine("lvr-1")
        # earlier definitions survived the restart, still planned
        self.check(is_planned(self.dump("gpu-vm-1")), "8b: gpu-vm-1 is still "
                   "planned after the libvirtd restart")

    # -- 8c: daemon restart ----------------------------------------------------
    def t8c_daemon_restart(self):
        d = self.d
        rc = d.stop()
        self.check(rc == 0, "8c: pcinumad stops cleanly on SIGTERM",
                   "exit %s\n%s" % (rc, d.log()[-1500:]))
        self.define(domain_xml("dr-1", ["0000:13:00.0", "0000:33:00.0"],
                               memnodes={0: "0", 1: "1"}))
        self.define(domain_xml("dr-2", ["0000:17:00.0", "0000:37:00.0"],
                               memnodes={0: "0", 1: "1"}))
        self.check(not is_planned(self.dump("dr-1")), "8c: defined while "
                   "pcinumad is down: unplanned")
        t0 = time.monotonic()
        d.start(self.s.uri)
        a, _ = self.wait_planned("dr-1", timeout=PLAN_DEADLINE + 1)
        b, _ = self.wait_planned("dr-2", timeout=PLAN_DEADLINE + 1)
        dt = time.monotonic() - t0
        self.check(is_planned(a) and is_planned(b), "8c: the restarted daemon "
                   "catches up on definitions made while it was down",
                   d.log()[-1500:], note="%.2fs" % dt)
        for n in ("dr-1", "dr-2"):
            self.s.undefine(n)

    # -- 8d: libvirt rejects a redefinition -----------------------------------
    def t8d_rejected(self):
        """Provoke an honest libvirt failure of the watcher's
        virDomainDefineXMLFlags: the session daemon's config directory
        ($XDG_CONFIG_HOME/libvirt/qemu) is made read-only, so libvirt
        cannot save the new definition and must keep the old one."""
        d = self.d
        name = "off-rej"
        self.define(domain_xml(name, ["0000:13:00.0", "0000:33:00.0"],
                               memnodes={0: "0", 1: "1"}))
        time.sleep(0.3)
        before = self.dump(name)
        cfg = os.path.join(self.s.env["XDG_CONFIG_HOME"], "libvirt", "qemu")
        st0 = d.status() or {}
        failures0 = (st0.get("libvirt") or {}).get("failures", 0)
        mode0 = stat.S_IMODE(os.stat(cfg).st_mode)
        os.chmod(cfg, 0o555)
        try:
            # the domain's policy becomes require: the watcher tries to
            # redefine it, libvirt fails to write the file
            self.set_policy(rules=[r for r in self.rules if r[0] != "off-*"])
            d.hup()
            got = self.wait_until(lambda: ((d.status() or {}).get("libvirt") or {})
                                  .get("failures", 0) > failures0, timeout=5)
            after = self.dump(name)
            self.check(got, "8d: libvirt rejects the redefinition (read-only "
                       "config dir): status counts a failure",
                       json.dumps((d.status() or {}).get("libvirt")))
            lines = [l for l in d.log().splitlines()
                     if MID_REDEFINE_FAILED in l and "PCINUMA_DOMAIN=%s" % name in l]
            self.check(lines and "PCINUMA_LIBVIRT_ERROR=" in lines[0] and
                       "unchanged" in lines[0],
                       "8d: REDEFINE_FAILED is logged with libvirt's message",
                       "\n".join(lines) or d.log()[-1500:])
            if lines:
                self.diag(lines[0][:400])
            ok, how, dg = self.same(after, before, "rej-1")
            self.check(ok, "8d: the rejected redefinition leaves the original "
                       "definition", dg, note=how)
        finally:
            os.chmod(cfg, mode0)
            self.set_policy()
            d.hup()
        # config writable again + policy off: nothing else happened to it
        time.sleep(0.3)
        ok, how, dg = self.same(self.dump(name), before, "rej-2")
        self.check(ok, "8d: still the original definition after the fault is "
                   "gone (policy off)", dg, note=how)
        # and once libvirt can write again, the same domain is planned
        self.set_policy(rules=[r for r in self.rules if r[0] != "off-*"])
        d.hup()
        xml, dt = self.wait_planned(name)
        self.check(dt is not None, "8d: with the fault gone, the next reload "
                   "plans the domain", d.log()[-1500:])
        self.set_policy()
        d.hup()
        self.s.undefine(name)

    # -- 9: revert --domain of a transient domain ----------------------------
    def t9_transient_revert(self):
        """A running transient domain that carries the mark (the plan of
        two node-0 devices, the hostdevs then taken out so TCG can run it):
        pcinumactl revert --domain says it is transient, exits 2 and
        changes nothing; the domain stays transient and goes at destroy."""
        name = "off-trans-1"       # policy off: the hook lets it start
        xml = domain_xml(name, ["0000:13:00.0", "0000:14:00.0"], memory_mib=64,
                         memnodes={0: "0", 1: "0"})   # node 0: this machine has it
        path = self.s.write(xml, name + ".xml")
        r = subprocess.run([self.a.pcinumactl, "plan", "--sysfs-root", self.sysfs,
                            "--policy", "require", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        if not self.check(r.returncode == 0 and is_planned(r.stdout),
                          "9: pcinumactl plan of the transient domain's XML", r.stderr):
            return
        planned = re.sub(r"\s*<hostdev .*?</hostdev>", "", r.stdout, flags=re.S)
        v, text = self.s.create_dom(self.s.write(planned, name + ".planned.xml"))
        if not self.check(v == "started" and is_planned(self.dump(name, inactive=False)),
                          "9: virsh create of a planned domain (hostdevs taken out) runs", text):
            return
        before = self.dump(name, inactive=False)
        r = subprocess.run([self.a.pcinumactl, "revert", "--domain", name,
                            "--connect", self.s.uri, "--policy-file", self.policy],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=VIRSH_TIMEOUT)
        info = self.s.virsh("dominfo", name).stdout
        self.check(r.returncode == 2 and ("domain '%s' is transient" % name) in r.stderr
                   and "nothing changed" in r.stderr and r.stdout == "",
                   "9: pcinumactl revert --domain of a transient domain: exit 2, "
                   "says it is transient", "exit %d: %r %r" % (r.returncode, r.stdout, r.stderr))
        self.check(re.search(r"Persistent:\s+no", info),
                   "9: the transient domain is still transient", info)
        ok, how, dg = self.same(self.dump(name, inactive=False), before, "trans-revert")
        self.check(ok, "9: its XML is unchanged", dg, note=how)
        self.s.virsh("destroy", name, timeout=VIRSH_TIMEOUT)
        gone = self.s.virsh("dominfo", name).returncode != 0
        self.check(gone, "9: after destroy the domain is gone (no definition was made)")
        if not gone:
            self.s.undefine(name)

    # -- 10: the hook of an unprivileged session libvirtd ------------------------
    def t10_unprivileged_hook(self):
        """The review's case: pcinumad unreachable, on_unreachable=refuse, a
        VM whose only hostdev is USB.  This machine has no USB bus at all
        (no /sys/bus/usb), so no USB hostdev can really start here; but
        libvirt runs the prepare hook before it looks for the device, so
        the start attempt shows the hook's verdict as for PCI hostdevs:
        refused -> 'Hook script execution failed'; let through -> libvirt's
        own error about the USB device.  The XML is the one libvirt passes."""
        d = self.d
        d.stop()
        conf0 = read(self.hook_conf)
        wrapper0 = read(self.hook_wrapper)
        usb = ("    <hostdev mode='subsystem' type='usb' managed='no'>\n"
               "      <source startupPolicy='optional'><vendor id='0xdead'/>"
               "<product id='0xbeef'/></source>\n"
               "    </hostdev>\n")
        try:
            write(self.hook_conf, conf0.replace("on_unreachable = allow", "on_unreachable = refuse"))
            self.define(domain_xml("usb-1", [], cells=2, memory_mib=64, extra_devices=usb))
            self.define(domain_xml("pci-1", ["0000:13:00.0"], memnodes={0: "0", 1: "0"}))
            v, text = self.s.start_dom("usb-1")
            self.check(v == "started" or (HOOK_FAILED not in text and "usb" in text.lower()),
                       "10: daemon unreachable, on_unreachable=refuse: a VM whose only "
                       "hostdev is USB passes the hook", text)
            # the control: the hook is there and refuses what it must
            v, text = self.s.start_dom("pci-1")
            self.check(HOOK_FAILED in text and "on_unreachable=refuse" in text
                       and self.hook_wrapper in text,
                       "10: ... while a VM with a PCI hostdev is refused", text)
            # the hook as a session libvirtd's users get it: no
            # $PCINUMA_SOCKET (only the refuse settings): quiet exit 0
            write(self.hook_wrapper, wrapper0.replace("PCINUMA_SOCKET=%s " % d.socket, ""),
                  mode=0o755)
            check_wrapper = read(self.hook_wrapper)
            if not self.check("PCINUMA_SOCKET" not in check_wrapper.split("exec 3<&-")[1],
                              "10: the wrapper without PCINUMA_SOCKET"):
                return
            v, text = self.s.start_dom("pci-1")
            self.check(v == "passed" and "pcinuma" not in text,
                       "10: the hook run by an unprivileged session libvirtd without "
                       "PCINUMA_SOCKET exits 0 quietly (libvirt then fails on the "
                       "PCI hostdev itself)", text)
        finally:
            write(self.hook_wrapper, wrapper0, mode=0o755)
            write(self.hook_conf, conf0)
            self.s.undefine("usb-1")
            self.s.undefine("pci-1")
            d.start(self.s.uri, wait_connected=True)

    def run(self):
        steps = [self.t2_prepare, self.t1_define, self.t4_migrate,
                 self.t5_revert, self.t6_running, self.t7_transient,
                 self.t3_race, self.t8a_parallel, self.t8b_libvirtd_restart,
                 self.t8c_daemon_restart, self.t8d_rejected,
                 self.t9_transient_revert, self.t10_unprivileged_hook]
        for step in steps:
            if self.a.only and not any(o in step.__name__ for o in self.a.only):
                continue
            t0 = time.monotonic()
            self.diag("---- %s" % step.__name__)
            try:
                if step != self.t2_prepare and not self.d.alive():
                    self.d.start(self.s.uri, wait_connected=True)
                if self.s.proc is None or self.s.proc.poll() is not None:
                    raise SessionError("the session libvirtd is not running:\n"
                                       + self.s.log_tail())
                step()
            except (SessionError, RuntimeError, subprocess.TimeoutExpired,
                    OSError) as e:
                self.check(False, "%s: ran to the end" % step.__name__,
                           "%s: %s" % (type(e).__name__, e))
            self.diag("%s: %.1fs" % (step.__name__, time.monotonic() - t0))


def options(ap):
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--only", action="append", default=[],
                    help="run only the steps whose name contains this "
                         "(repeatable; for debugging)")


def main():
    return run_session_suite(session_args(__doc__, options, paths=("source",)), Test)


if __name__ == "__main__":
    sys.exit(main())

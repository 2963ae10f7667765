#!/usr/bin/env python3
"""clients suite: real clients start real guests, and each ends with its
domain running its plan (issue 23, items 1 and 4; docs/operations.md,
"Restart into the plan").  A stand_ins build only.

    test_clients.py --pcinumad P --pcinumactl P --hook P --mkfakesysfs P \
        --hosts DIR --workdir DIR [--race-rounds N] [--only NAME] [-v]

The seam of test_seam.py (pcinumatest.clients.ClientHarness: a private
session libvirtd, the hook as a qemu.d wrapper, pcinumad --stand-ins
--allow-uid with its watcher, the one-node host, policy require), and a
bootable guest with two stand-in NICs for the passthrough devices
0000:21:00.0 and 0000:22:00.0.  Every client below starts its domain
without the plan (it starts right after defining it, or creates it
transient), so the prepare gate lets it through and pcinuma-watcher
restarts it into the plan ("first_start": "restart", the default):

  virsh        virsh define && virsh start, as a shell runs them;
  nova         a Nova-like client in python3-libvirt: defineXML(), then
               createWithFlags(VIR_DOMAIN_START_PAUSED), then resume() 2 s
               later, listening to the domain's lifecycle events (started
               paused, it is restarted when its client resumes it);
  hard-reboot  Nova's hard reboot of that domain, running planned:
               destroy(), defineXML() of its own unplanned XML, create();
  virt-install virt-install --install kernel=...,initrd=... --noautoconsole
               --wait 0: the install run is planned and still boots the
               install kernel (virt-install defines the final XML while
               it runs);
  virt-install-default
               the same under the built-in default policy (legacy) and no
               transient switch: transient at the gate (verdict warn), the
               domain is restarted like a persistent one once virt-install
               defined it, from its live XML;
  late-define  python3-libvirt createXML(), then defineXML() 0.5 s later,
               under the same policy: the watcher waits for the defined
               event, then restarts it;
  import       virt-install --import, booting the kernel directly;
  transient    virsh create of the unplanned XML, with "transient":
               "restart" for it.

For each: the client reports success; pcinumad logs the restart
(MESSAGE_ID RESTARTED); the live XML carries the mark with each stand-in
on its guest cell's expander bus; the booted guest (its console report)
reads each stand-in NIC, found by its MAC, on that cell's NUMA node (0,
not -1); the domain runs; the persistent definition, where the client left
one, ends planned.  What each client sees (its events, the domain id, the
console) and the timings are printed as FIGURE lines for
docs/operations.md and docs/performance.md.

Then the Nova race: a paused start, resume() 0-3 s later (--race-rounds
rounds over the offsets): no resume() fails, and every domain ends running
its plan (restarted when resumed); printed as a FIGURE too.

Environment: PCINUMA_CLIENTS_EMULATOR, the domains' emulator instead of
QEMU (the second stack's single-threaded TCG).

Output: "ok N - ..." lines, "# ..." diagnostics, "N passed, M failed".
Exit 1 on any failure, 77 when libvirtd or virsh is not installed."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET

from pcinumatest import guestvm
from pcinumatest.clients import (ClientHarness, MAC_OF, check_guest_numa, console_path,
                                 read_console, standin_domain_xml)
from pcinumatest.lvenv import NS, classify, is_planned, write
from pcinumatest.session import SessionError
from pcinumatest.suite import run_session_suite, session_args

MID_RESTARTED = "8805c45ffe6f41b28d6f3862806f65ea"
MID_RESTART_FAILED = "6341f02d6d2c491e905a6c3fcdda5aa2"
MID_RESTART_SKIPPED = "f85aaf68ac36456aade6416a682f49ba"
STANDIN_BDFS = ("0000:21:00.0", "0000:22:00.0")
MACS = [MAC_OF[b] for b in STANDIN_BDFS]
RESTART_TIMEOUT = 120       # start -> restart logged, TCG on a busy 2-core machine

# The Nova-like client (python3-libvirt, as root on the session socket):
#   nova XML PAUSED_S  define, start paused, resume after PAUSED_S s
#   reboot NAME        Nova's hard reboot: destroy, define its own XML, create
# It listens to the domain's lifecycle events and prints one JSON object.
NOVA = r"""
import json, sys, threading, time
import libvirt
libvirt.registerErrorHandler(lambda *a: None, None)
libvirt.virEventRegisterDefaultImpl()
uri, verb, arg = sys.argv[1], sys.argv[2], sys.argv[3]
events = []
t0 = time.monotonic()
def loop():
    while True:
        libvirt.virEventRunDefaultImpl()
threading.Thread(target=loop, daemon=True).start()
c = libvirt.open(uri)
NAMES = {0: "defined", 1: "undefined", 2: "started", 3: "suspended", 4: "resumed", 5: "stopped",
         6: "shutdown", 7: "pmsuspended", 8: "crashed"}
def on_event(conn, dom, ev, detail, opaque):
    events.append({"t": round(time.monotonic() - t0, 3), "event": NAMES.get(ev, ev), "detail": detail,
                   "id": dom.ID()})
c.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, on_event, None)
out = {"ok": True, "errors": []}
def step(what, fn):
    try:
        fn()
        out.setdefault("steps", []).append([what, round(time.monotonic() - t0, 3)])
    except libvirt.libvirtError as e:
        out["ok"] = False
        out["errors"].append("%s: %s" % (what, e))
if verb == "late-define":
    # as virt-install, with a pause: createXML(), then defineXML() S s later
    xml = open(arg).read()
    t0 = time.monotonic()
    d = None
    def create():
        global d
        d = c.createXML(xml, 0)
    step("createXML()", create)
    time.sleep(float(sys.argv[4]))
    step("defineXML()", lambda: c.defineXML(xml))
    if d is None:
        print(json.dumps(out))
        sys.exit(0)
    out["id_after_create"] = d.ID()
elif verb == "nova":
    xml = open(arg).read()
    d = c.defineXML(xml)
    t0 = time.monotonic()
    step("createWithFlags(VIR_DOMAIN_START_PAUSED)", lambda: d.createWithFlags(libvirt.VIR_DOMAIN_START_PAUSED))
    out["id_after_create"] = d.ID()
    time.sleep(float(sys.argv[4]))
    step("resume()", d.resume)
else:
    d = c.lookupByName(arg)
    xml = d.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE | libvirt.VIR_DOMAIN_XML_SECURE)
    out["id_before"] = d.ID()
    t0 = time.monotonic()
    step("destroy()", d.destroy)
    own = open(sys.argv[4]).read()
    step("defineXML()", lambda: c.defineXML(own))
    step("create()", d.create)
    out["id_after_create"] = d.ID()
# As Nova's _wait_for_boot: look every 0.5 s until the domain runs.
deadline = time.monotonic() + float(sys.argv[5]) if len(sys.argv) > 5 else 0
d2 = c.lookupByUUIDString(d.UUIDString())
while d2.state()[0] != libvirt.VIR_DOMAIN_RUNNING and time.monotonic() < deadline:
    time.sleep(0.5)
out["running_after"] = round(time.monotonic() - t0, 3)
out["id_handle"] = d.ID()          # what the client's own handle says
out["id_end"] = d2.ID()
out["state_end"] = d2.state()[0]
out["events"] = events
print(json.dumps(out))
"""


def libvirt_python():
    """An interpreter that imports Debian's python3-libvirt."""
    for py in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([py, "-c", "import libvirt"], capture_output=True).returncode == 0:
            return py
    return None


def fields_of(line):
    """The KEY=VALUE fields of a stderr log line (values may be quoted)."""
    out = {}
    tail = line.split(" | ", 1)[1] if " | " in line else ""
    for m in re.finditer(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)', tail):
        v = m.group(2)
        out[m.group(1)] = v[1:-1] if v.startswith('"') else v
    return out


class Clients(ClientHarness):
    def __init__(self, a, tap):
        super().__init__(a, tap)
        self.figures = []

    def figure(self, text):
        self.figures.append(text)
        self.diag("FIGURE " + text)

    # -- helpers -------------------------------------------------------------
    def restart_entry(self, name, since):
        """The restart's journal entry for domain name logged since the log
        offset: (MESSAGE_ID, fields, message), or None."""
        for line in self.d.log()[since:].splitlines():
            for mid in (MID_RESTARTED, MID_RESTART_FAILED, MID_RESTART_SKIPPED):
                if mid in line and "PCINUMA_DOMAIN=%s " % name in line + " ":
                    return mid, fields_of(line), line.split(" | ")[0]
        return None

    def wait_restart(self, name, since, timeout=RESTART_TIMEOUT):
        return self.wait_until(lambda: self.restart_entry(name, since), timeout, step=0.2)

    def state(self, name):
        r = self.s.virsh("domstate", name, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else "gone"

    def dom_id(self, name):
        r = self.s.virsh("domid", name, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else None

    def first_verdict(self, name, since):
        """The verdict of the domain's first prepare hook call since the
        log offset, once logged."""
        for line in self.d.log()[since:].splitlines():
            f = fields_of(line)
            if f.get("PCINUMA_DOMAIN") == name and f.get("PCINUMA_PHASE") == "prepare":
                return f.get("PCINUMA_VERDICT")
        return None

    def ends_planned(self, what, name, since, console, persistent=True, want_paused=False, boot=True,
                     first="restart"):
        """The checks every client ends with (see the top of this file).
        Returns the restart's fields ({} when the first start found the
        definition planned already: the watcher redefined it between the
        client's define and its start, which a slow client allows)."""
        verdict = self.wait_until(lambda: self.first_verdict(name, since), 60)
        fields = {}
        if verdict == "allow":
            self.diag("%s: the first start found the definition planned already (no restart needed)" % what)
        else:
            got = self.wait_restart(name, since)
            mid, fields, msg = got if got else (None, {}, "")
            self.check(verdict == first and mid == MID_RESTARTED,
                       "%s: pcinuma restarts the domain into its plan" % what,
                       "first verdict %s\n%s" % (verdict, msg or self.d.log()[since:][-3000:]))
            if mid != MID_RESTARTED:
                return fields
            self.check(fields.get("PCINUMA_STARTED_PAUSED") == ("yes" if want_paused else "no"),
                       "%s: %s" % (what, "started paused, it is restarted when its client resumes it"
                                   if want_paused else "it is restarted as soon as it is up"), msg)
        live = self.dump(name, inactive=False)
        self.check(is_planned(live), "%s: the live XML carries the plan (mark, expander bus)" % what,
                   live[-1500:])
        # (before the guest's report: the guest powers off once it printed it)
        st = self.state(name)
        self.check(st == "running", "%s: the domain runs" % what, st)
        if boot:
            text, secs = self.boot_report(name, console)
            self.diag("%s: guest report after %s s" % (what, "%.1f" % secs if secs else "-"))
            check_guest_numa(self.tap, what, text, live, MACS)
        if persistent:
            planned, secs = self.wait_marked(name, timeout=30)
            self.check(secs is not None and NS in planned,
                       "%s: the persistent definition ends planned" % what, planned[-1500:])
        return fields

    def timings(self, what, fields):
        if not fields:
            self.figure("%s: the first start found the definition planned (no restart)" % what)
            return
        us = lambda k: int(fields.get(k, "0") or 0) / 1000.0    # noqa: E731
        self.figure("%s: unplanned run %.0f ms; client start to planned running %.0f ms; destroy %.0f ms, "
                    "create %.0f ms, down %.0f ms" % (what, us("PCINUMA_UNPLANNED_US"), us("PCINUMA_TOTAL_US"),
                                                      us("PCINUMA_DESTROY_US"), us("PCINUMA_CREATE_US"),
                                                      us("PCINUMA_DOWN_US")))

    def domain(self, name):
        """A stand-in domain with its own UUID, as Nova's and Terraform's
        XML carry one, and the path of its console file."""
        console = console_path(self.s, name)
        uid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, "pcinuma-clients:" + name))
        return standin_domain_xml(name, MACS, self.kit, console, emulator=self.emulator, uid=uid), console

    def destroy(self, name):
        self.s.virsh("destroy", name, timeout=60)

    def nova(self, *args, timeout=300):
        r = subprocess.run([self.py, self.nova_client, self.s.uri] + [str(x) for x in args],
                           capture_output=True, text=True, timeout=timeout)
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"ok": False, "errors": ["exit %d: %s %s" % (r.returncode, r.stdout[-500:], r.stderr[-1500:])]}

    # -- the clients -----------------------------------------------------------
    def c_virsh(self):
        name = "cl-virsh"
        xml, console = self.domain(name)
        path = self.s.write(xml, name + ".xml")
        since = len(self.d.log())
        r = self.s.run_as(["/bin/sh", "-c", "virsh -c qemu:///session define %s && virsh -c qemu:///session start %s"
                           % (path, name)], timeout=120)
        text = (r.stdout + r.stderr).strip()
        self.check(r.returncode == 0 and "Domain '%s' started" % name in text,
                   "virsh: 'virsh define && virsh start' succeeds", text)
        id0 = self.dom_id(name)
        fields = self.ends_planned("virsh", name, since, console)
        self.timings("virsh define && virsh start", fields)
        self.figure("virsh define && virsh start: the client sees 'Domain started' at once; the domain id "
                    "changes from %s to %s; the console file is written again from the start"
                    % (id0, self.dom_id(name)))
        self.destroy(name)
        self.s.undefine(name)

    def c_nova(self):
        name = "cl-nova"
        xml, console = self.domain(name)
        path = self.s.write(xml, name + ".xml")
        since = len(self.d.log())
        out = self.nova("nova", path, 2.0, 120)
        self.check(out["ok"], "nova: defineXML, createWithFlags(PAUSED), resume() 2 s later: no error",
                   json.dumps(out))
        self.check(out.get("state_end") == 1, "nova: the client, looking until it runs as Nova does, finds its "
                   "domain running (state 1)", json.dumps(out), note="%s s after its start" % out.get("running_after"))
        fields = self.ends_planned("nova", name, since, console, want_paused=True)
        self.timings("Nova-like (paused start)", fields)
        evs = ", ".join("%s %s(%s) id %s" % (e["t"], e["event"], e["detail"], e["id"]) for e in out.get("events", []))
        self.figure("Nova-like client: events %s; domain id after create %s, at the end %s (its handle still "
                    "says %s); running %s s after its start" % (evs, out.get("id_after_create"), out.get("id_end"),
                                                               out.get("id_handle"), out.get("running_after")))
        self.nova_xml = xml

    def c_hard_reboot(self):
        name = "cl-nova"
        console = console_path(self.s, name)
        # Its guest powers off after its report, any moment now: start it
        # afresh from its planned definition (it boots for seconds, long
        # after the client's destroy below).
        self.destroy(name)
        if self.state(name) != "running":
            v, text = self.s.start_dom(name)
            self.check(v == "started", "hard-reboot: the domain of the nova case starts from its planned "
                       "definition", text)
        if not self.check(self.state(name) == "running" and is_planned(self.dump(name, inactive=False)),
                          "hard-reboot: the domain of the nova case runs planned first"):
            return
        own = self.s.write(self.nova_xml, name + "-own.xml")
        since = len(self.d.log())
        out = self.nova("reboot", name, own, 120)
        self.check(out["ok"], "hard-reboot: destroy, defineXML of its own unplanned XML, create: no error",
                   json.dumps(out))
        fields = self.ends_planned("hard-reboot", name, since, console)
        self.timings("Nova hard reboot", fields)
        self.destroy(name)
        self.s.undefine(name)

    def c_virt_install(self, mode, prefix="cl-vi", first="restart"):
        """virt-install --install or --import.  prefix cl-vi: its rule has
        policy require and "transient": "restart" (verdict restart);
        cl-vd: the default policy, legacy, with no switch: transient at the
        gate (verdict warn), restarted as persistent once it is up."""
        name = "%s-%s" % (prefix, mode)
        console = console_path(self.s, name)
        common = ["virt-install", "--connect", "qemu:///session", "--name", name, "--virt-type", "qemu",
                  "--machine", "q35", "--features", "acpi=on", "--memory", str(2 * 96),
                  "--vcpus", "2", "--cpu", "qemu64,cell0.id=0,cell0.cpus=0,cell0.memory=%d,"
                  "cell1.id=1,cell1.cpus=1,cell1.memory=%d" % (96 * 1024, 96 * 1024),
                  "--numatune", "memnode0.cellid=0,memnode0.mode=strict,memnode0.nodeset=0,"
                  "memnode1.cellid=1,memnode1.mode=strict,memnode1.nodeset=0",
                  "--osinfo", "detect=off,require=off", "--disk", "none", "--graphics", "none",
                  "--serial", "file,path=%s" % console, "--noautoconsole",
                  "--controller", "type=usb,model=none", "--memballoon", "none",
                  "--events", "on_reboot=destroy,on_poweroff=destroy"]
        for mac in MACS:
            common += ["--network", "user,mac=%s,model=virtio" % mac]
        if self.emulator:
            common += ["--xml", "./devices/emulator=%s" % self.emulator]
        kernel = "kernel=%s,initrd=%s,kernel_args=%s" % (self.kit.kernel, self.kit.initrd,
                                                            self.kit.cmdline.replace(",", "\\,"))
        if mode == "install":
            argv = common + ["--install", kernel + ",kernel_args_overwrite=yes", "--wait", "0"]
        else:
            argv = common + ["--import", "--boot", kernel]
        since = len(self.d.log())
        r = self.s.run_as(argv, timeout=300)
        text = (r.stdout + r.stderr).strip()
        what = "virt-install --%s%s" % (mode, " (default policy)" if prefix == "cl-vd" else "")
        self.check(r.returncode == 0, "%s succeeds" % what, text)
        if r.returncode != 0:
            return
        live0 = None
        if mode == "install":
            # virt-install fetched the kernel into its cache and removes it
            # once the domain started: the restart boots pcinuma's link to it
            got = self.wait_restart(name, since)
            live0 = self.dump(name, inactive=False)
        fields = self.ends_planned(what, name, since, console, first=first)
        if mode == "install":
            kernel = ET.fromstring(live0).findtext("os/kernel") or ""
            final = ET.fromstring(self.dump(name)).findtext("os/kernel")
            self.check(got and got[0] == MID_RESTARTED and ".pcinuma-restart-" in kernel and final is None,
                       "%s: the restarted install run boots the install kernel (kept by pcinuma: %s), the "
                       "persistent definition is virt-install's final one (no kernel)" % (what, kernel),
                       live0[-1500:])
        self.timings(what, fields)
        self.figure("%s: the client printed %r" % (what, text[-300:]))
        self.destroy(name)
        self.s.undefine(name)

    def c_late_define(self):
        """A client that creates the domain transient and defines it 0.5 s
        later (the default policy, legacy, no switch): the watcher waits for
        its defined event, then restarts it like a persistent one."""
        name = "cl-vd-late"
        xml, console = self.domain(name)
        path = self.s.write(xml, name + ".xml")
        since = len(self.d.log())
        out = self.nova("late-define", path, 0.5, 120)
        self.check(out["ok"], "late define: createXML(), defineXML() 0.5 s later: no error", json.dumps(out))
        fields = self.ends_planned("late define", name, since, console, first="warn")
        if fields:
            self.check(int(fields.get("PCINUMA_UNPLANNED_US", "0")) >= 400000,
                       "late define: restarted once defined (its unplanned run includes the 0.5 s before the define)",
                       json.dumps(fields))
        self.timings("createXML, defineXML 0.5 s later (legacy)", fields)
        self.destroy(name)
        self.s.undefine(name)

    def c_transient(self):
        name = "cl-trans"
        xml, console = self.domain(name)
        path = self.s.write(xml, name + ".xml")
        since = len(self.d.log())
        v, text = self.s.create_dom(path)
        self.check(v == "started", "transient: virsh create with transient: restart succeeds", text)
        fields = self.ends_planned("transient", name, since, console, persistent=False)
        self.timings("virsh create (transient: restart)", fields)
        self.destroy(name)

    def c_nova_race(self):
        """resume() 0-3 s after a paused start."""
        offsets = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]
        rounds = self.a.race_rounds
        rows = []
        for i in range(rounds):
            off = offsets[i % len(offsets)]
            name = "cl-race-%d" % i
            xml, console = self.domain(name)
            path = self.s.write(xml, name + ".xml")
            since = len(self.d.log())
            out = self.nova("nova", path, off, 0)
            got = self.wait_restart(name, since)
            end = self.state(name)
            live = self.dump(name, inactive=False) if end in ("running", "paused") else ""
            rows.append((off, out["ok"], end, is_planned(live), got[0] if got else None, out["errors"]))
            self.destroy(name)
            self.s.undefine(name)
        failed = [r for r in rows if not r[1]]
        bad_end = [r for r in rows if r[2] != "running" or not r[3] or r[4] != MID_RESTARTED]
        by_off = {}
        for r in rows:
            f, n = by_off.get(r[0], (0, 0))
            by_off[r[0]] = (f + (0 if r[1] else 1), n + 1)
        self.figure("Nova race: resume() at offset s (failed/rounds): %s; %d of %d failed%s" % (", ".join(
            "%.2f: %d/%d" % (o, f, n) for o, (f, n) in sorted(by_off.items())), len(failed), rounds,
            (": " + "; ".join(sorted(set(e for r in failed for e in r[5])))) if failed else ""))
        self.check(not failed, "nova race: %d paused starts, resume() 0-3 s later: no resume() fails" % rounds,
                   "\n".join(repr(r) for r in failed[:5]), note="%d of %d failed" % (len(failed), rounds))
        self.check(not bad_end, "nova race: each is restarted into its plan when resumed and ends running",
                   "\n".join(repr(r) for r in bad_end[:5]))

    def run(self):
        try:
            self.guest_kit()
        except guestvm.Fatal as e:
            self.check(False, "a bootable guest", str(e))
            return
        self.py = libvirt_python()
        self.check(self.py, "python3-libvirt is installed (Debian's python3-libvirt)")
        self.nova_client = write(os.path.join(self.tmp, "nova.py"), NOVA)
        have_vi = shutil.which("virt-install") is not None
        self.check(have_vi, "virt-install is installed (Debian's virtinst)")
        steps = [("virsh", self.c_virsh), ("nova", self.c_nova), ("hard-reboot", self.c_hard_reboot),
                 ("virt-install", lambda: self.c_virt_install("install")),
                 ("import", lambda: self.c_virt_install("import")),
                 ("virt-install-default", lambda: self.c_virt_install("install", "cl-vd", "warn")),
                 ("late-define", self.c_late_define),
                 ("transient", self.c_transient),
                 ("race", self.c_nova_race)]
        for name, fn in steps:
            if self.a.only and name not in self.a.only:
                continue
            if name in ("nova", "hard-reboot", "race", "late-define") and not self.py:
                continue
            if name in ("virt-install", "import", "virt-install-default") and not have_vi:
                continue
            t0 = time.monotonic()
            self.diag("---- %s" % name)
            try:
                fn()
            except (SessionError, RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                self.check(False, "%s: ran to the end" % name, "%s: %s" % (type(e).__name__, e))
            self.diag("%s: %.1f s" % (name, time.monotonic() - t0))
        st = (self.d.status() or {}).get("restarts")
        self.diag("status restarts: %s" % json.dumps(st))
        done = sum((st or {}).get(k, 0) for k in ("restarted", "fallback", "lost", "skipped"))
        self.check(st and st.get("requested") == done, "status: every restart asked for (conditional ones "
                   "included, once the watcher went on with them) has its outcome", json.dumps(st))
        for f in self.figures:
            self.diag("FIGURE " + f)


def options(ap):
    ap.add_argument("--race-rounds", type=int, default=16)
    ap.add_argument("--only", action="append", default=[])


def setup(t):
    """The harness's setup under this suite's policy: the transient
    client's domain is restarted too.  virt-install creates its domain
    transient (virDomainCreateXML) and defines it right after: like the
    transient client's, its domains need "transient": "restart".  cl-vd-*:
    virt-install under the built-in default policy (legacy) with no
    switch: transient at the gate, and restarted like a persistent domain
    once virt-install defined it."""
    t.setup(rules=[("cl-trans", "require"), ("cl-vi-*", "require"), ("cl-vd-*", "legacy")])
    with open(t.policy) as f:
        pol = json.load(f)
    for r in pol["rules"]:
        if r["match"].get("name") in ("cl-trans", "cl-vi-*"):
            r["transient"] = "restart"
    write(t.policy, json.dumps(pol))
    t.check(t.d.hup(), "pcinumad reloads the policy with transient: restart for cl-trans and cl-vi-*")


def main():
    a = session_args(__doc__, options)
    os.makedirs(a.workdir, exist_ok=True)
    return run_session_suite(a, Clients, setup=setup, errors=(guestvm.Fatal,))


if __name__ == "__main__":
    sys.exit(main())

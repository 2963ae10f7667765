#!/usr/bin/env python3
"""The prepare gate's first starts and pcinumad's side of the restarts into
the plan (issue 23 item 1; docs/operations.md, "Restart into the plan").

    test_first_start.py --pcinumad P --pcinumactl P --hook P
                        --mkfakesysfs P --hosts DIR --workdir DIR
                        [--daemon-wrapper CMD] [--timeout-factor F]

pcinumad runs on the sample-4n fixture tree (policy require) with
tests/lib/pcinumatest/fake_watcher.py as its libvirt watcher: a tiny
libvirt whose persistent domains are the files in its domains/ directory
(it reports their UUIDs as the persistent set), which asks for the restart
plan of a domain as soon as pcinumad asks it to restart one, and sends
whatever else a test drops in its cmd/ directory.  The real hook is run
the way libvirt runs it.

Checked: an unplanned start of a persistent domain is allowed and
restarted (verdict restart, its MESSAGE_ID, the hook's message, one
restart request to the watcher with the policy's window); the plan the
watcher asks for is the planned live XML; pcinumad's own start of it passes
the gate without a new restart, and so does its start of the client's XML
after a failed plan (a warning saying so); the watcher's report ends that
and is counted in the status; a transient domain under "transient":
"leave" gets today's refusal, telling it to create planned XML or set
transient: restart, and under "restart" is restarted; a domain defined
meanwhile ({"type":"domain"}) is restarted; a start whose define reaches the gate after the hook call (a
client that undefines and defines the domain right before each start)
waits for it and is restarted, and one whose define never comes is
decided as transient once the wait is over (and the next start is not
held again); a start whose verdict a define would not change
("transient": "restart") does not wait; "first_start": "refuse" and
"allow" keep today's refusal and warning; an incoming migration is not
restarted; a watcher that lost libvirt means no restart, and says so.
Ends with 'N passed, M failed'.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time

from pcinumatest import FAKE_WATCHER
from pcinumatest.fake_watcher import read_events
from pcinumatest import daemon as td
from pcinumatest.daemon import (MID, Daemon, Failure, Results, check, contains, eq, hook_and_decision,
                                mkfakesysfs, read_text)

R = Results()
P = "11111111-0000-4000-8000-0000000000a1"      # vm-p: persistent
T = "11111111-0000-4000-8000-0000000000a2"      # vm-t: transient (not in domains/)
START_RESTARTING = "f6efac6604544011bdbb4be49a330a91"


def domain_xml(name, uuid):
    """A q35 domain of sample-4n: 0000:13:00.0 (node 0) and 0000:33:00.0
    (node 1), its cells on nodes 0 and 1."""
    hd = "".join("<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x%s' "
                 "slot='0x00' function='0x0'/></source></hostdev>" % b for b in ("13", "33"))
    return ("<domain type='qemu'>\n  <name>%s</name>\n  <uuid>%s</uuid>\n  <memory unit='KiB'>262144</memory>\n"
            "  <vcpu placement='static'>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
            "  <features>\n    <acpi/>\n  </features>\n  <cpu>\n    <numa>"
            "<cell id='0' cpus='0' memory='131072' unit='KiB'/><cell id='1' cpus='1' memory='131072' unit='KiB'/>"
            "</numa>\n  </cpu>\n  <numatune><memnode cellid='0' mode='strict' nodeset='0'/>"
            "<memnode cellid='1' mode='strict' nodeset='1'/></numatune>\n  <devices>\n"
            "    <controller type='pci' index='0' model='pcie-root'/>\n    %s\n  </devices>\n</domain>\n"
            % (name, uuid, hd))


class Env:
    """pcinumad with the fake watcher; the fake's directory and events."""

    def __init__(self, policy):
        self.fw = tempfile.mkdtemp(prefix="fw-", dir=td.RUNTMP)
        os.makedirs(os.path.join(self.fw, "domains"))
        os.makedirs(os.path.join(self.fw, "cmd"))
        os.makedirs(os.path.join(self.fw, "live"))
        self.xml_p = domain_xml("vm-p", P)
        self.xml_t = domain_xml("vm-t", T)
        with open(os.path.join(self.fw, "domains", P + ".xml"), "w") as f:
            f.write(self.xml_p)
        # The live XML of vm-p as the watcher would read it: unplanned, as
        # the client started it.
        with open(os.path.join(self.fw, "live", P + ".xml"), "w") as f:
            f.write(self.xml_p)
        with open(os.path.join(self.fw, "live", T + ".xml"), "w") as f:
            f.write(self.xml_t)
        env = dict(td.scrubbed_env(), FAKE_WATCHER_DIR=self.fw)
        self.d = Daemon("first-start", policy=json.dumps(policy),
                        extra=["--libvirt-uri", "test:///default", "--watcher-program", FAKE_WATCHER],
                        env=env)
        self.d.start()
        self.wait(lambda: (self.status() or {}).get("restarts", {}).get("persistent_domains") == 1,
                  "the fake watcher's persistent set")
        self.wait(lambda: any(e["ev"] == "idle" for e in self.events()), "the fake watcher's first pass")

    def status(self):
        try:
            return self.d.status()
        except (Failure, OSError):
            return None

    def events(self):
        return read_events(self.fw)

    def mark(self):
        return len(self.events())

    def since(self, mark, ev):
        return [e for e in self.events()[mark:] if e["ev"] == ev]

    def wait(self, cond, what, timeout=10):
        deadline = time.monotonic() + td.T(timeout)
        while time.monotonic() < deadline:
            v = cond()
            if v:
                return v
            time.sleep(0.02)
        raise Failure("timed out waiting for %s\n%s" % (what, self.d.log_text()[-3000:]))

    def send(self, msg):
        """Have the fake watcher send msg to pcinumad; wait until it did."""
        m = self.mark()
        name = "%d.json" % time.monotonic_ns()
        with open(os.path.join(self.fw, "cmd", name + ".tmp"), "w") as f:
            json.dump(msg, f)
        os.rename(os.path.join(self.fw, "cmd", name + ".tmp"), os.path.join(self.fw, "cmd", name))
        self.wait(lambda: self.since(m, "sent"), "the fake watcher to send %r" % msg)
        time.sleep(0.1)         # pcinumad reads it

    def prepare(self, name, xml):
        return hook_and_decision(self.d, name, "prepare", "begin", xml)

    def reload(self, policy):
        before = self.status()["policy"]["loaded_at_usec"]
        td.write_policy(self.d.policy_file, json.dumps(policy))
        self.d.signal(1)
        self.wait(lambda: self.status()["policy"]["loaded_at_usec"] != before, "the reload")

    def stop(self):
        rc = self.d.stop()
        td.check_clean_exit(self.d, rc)


def t_persistent():
    e = Env({"default": {"policy": "require"}})
    try:
        before = e.status()
        eq(before["restarts"]["window_ms"], 5000, "status restarts.window_ms")
        m = e.mark()
        r, dec = e.prepare("vm-p", e.xml_p)
        eq(r.rc, 0, "an unplanned start of a persistent domain under require: exit %r" % r)
        contains(r.err, "pcinuma: domain vm-p starts once without its NUMA-aware PCI topology (policy require)",
                 "hook stderr")
        contains(r.err, "pcinuma: as soon as it is up, pcinuma restarts it into the plan (first_start: restart); "
                 "its persistent definition is being updated", "hook stderr")
        check("refusing" not in r.err, "hook stderr refuses: %r" % r.err)
        eq(dec.get("PCINUMA_VERDICT"), "restart", "verdict")
        eq(dec.mid, START_RESTARTING, "MESSAGE_ID of a restart verdict")
        eq(dec.mid, MID["START_RESTARTING"], "MID table")
        eq(dec.prefix, "", "log priority of a restart verdict (notice: no prefix on stderr)")
        got = e.wait(lambda: e.since(m, "restart"), "the restart request")
        eq(len(got), 1, "restart requests")
        eq(got[0]["uuid"], P, "restart request uuid")
        eq(got[0]["window_ms"], 5000, "restart request window")
        check(got[0]["since_us"] > 0, "restart request since_us")
        # The watcher asks for the plan of the live XML: pcinumad plans it.
        plan = e.wait(lambda: e.since(m, "restart_plan"), "the restart plan")[0]
        check(plan["redefine"] and plan["xml"] and "urn:pcinuma:topology:1" in plan["xml"]
              and "pcie-expander-bus" in plan["xml"], "the restart plan is the planned XML: %r" % plan)
        fields = dict((k, v) for k, v in plan["fields"])
        eq(fields.get("PCINUMA_UUID"), P, "restart plan PCINUMA_UUID")
        eq(fields.get("PCINUMA_PHASE"), "restart", "restart plan PCINUMA_PHASE")
        eq(fields.get("PCINUMA_DOMAIN"), "vm-p", "restart plan PCINUMA_DOMAIN")

        # pcinuma-watcher's start of the plan: allowed, nothing new asked.
        m = e.mark()
        r, dec = e.prepare("vm-p", plan["xml"])
        eq((r.rc, r.err), (0, ""), "the planned start: %r" % r)
        eq(dec.get("PCINUMA_VERDICT"), "allow", "the planned start's verdict")
        # The plan did not start: its start of the client's XML passes too.
        r, dec = e.prepare("vm-p", e.xml_p)
        eq(r.rc, 0, "pcinuma's start of the client's XML after a failed plan: %r" % r)
        contains(r.err, "pcinuma could not start it with its plan, so it starts it as it was started", "its stderr")
        eq(dec.get("PCINUMA_VERDICT"), "warn", "the fallback start's verdict")
        time.sleep(0.3)
        eq(e.since(m, "restart"), [], "restart requests for pcinuma's own starts")
        st = e.status()["restarts"]
        eq(st["requested"], 1, "status restarts.requested")

        # The watcher reports: the own starts end, the outcome is counted.
        e.send({"type": "restarted", "uuid": P, "outcome": "fallback", "unplanned_us": 4000, "total_us": 900000})
        st = e.status()["restarts"]
        eq((st["fallback"], st["restarted"], st["lost"], st["skipped"]), (1, 0, 0, 0), "status restarts outcomes")
        eq((st["unplanned_us_max"], st["total_us_sum"]), (4000, 900000), "status restarts times")
        m = e.mark()
        r, dec = e.prepare("vm-p", e.xml_p)
        eq(dec.get("PCINUMA_VERDICT"), "restart", "the next unplanned start (own starts over)")
        e.wait(lambda: e.since(m, "restart"), "a second restart request")
        e.send({"type": "restarted", "uuid": P, "outcome": "restarted", "unplanned_us": 3000, "total_us": 800000})
        st = e.status()
        eq((st["restarts"]["restarted"], st["restarts"]["requested"]), (1, 2), "status after the second restart")
        eq(st["verdicts"].get("restart"), 2, "status verdicts.restart")

        # A planned start needs nothing.
        m = e.mark()
        r, dec = e.prepare("vm-p", plan["xml"])
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "allow"), "a planned start")
        time.sleep(0.2)
        eq(e.since(m, "restart"), [], "restart requests for a planned start")
    finally:
        e.stop()


def t_transient():
    e = Env({"default": {"policy": "require"}})
    try:
        m = e.mark()
        r, dec = e.prepare("vm-t", e.xml_t)
        eq(r.rc, 1, "a transient domain under transient: leave, require: refused: %r" % r)
        contains(r.err, "pcinuma: refusing to start domain vm-t: its PCI topology does not match the NUMA plan",
                 "stderr")
        contains(r.err, "a transient domain must be created from planned XML ('pcinumactl plan vm.xml | virsh create "
                 "/dev/stdin'; a running one's: 'virsh dumpxml vm | pcinumactl plan -'), or defined planned first "
                 "('pcinumactl define vm.xml'; virt-install: '--print-xml | pcinumactl define -'), or restarted into "
                 "its plan with \"transient\": \"restart\" in the policy, which virt-install and virt-manager need "
                 "under this policy", "stderr")
        check("persistent definition" not in r.err, "a transient domain is told of a persistent definition: %r" % r.err)
        eq(dec.get("PCINUMA_VERDICT"), "refuse", "verdict")
        # preferred: a warning saying the same
        e.reload({"default": {"policy": "preferred"}})
        r, dec = e.prepare("vm-t", e.xml_t)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "warn"), "transient, preferred")
        contains(r.err, "create a transient domain from planned XML", "stderr (preferred)")
        contains(r.err, "pcinuma: if it is defined by the time it is up (virt-install and virt-manager define it "
                 "while it starts), pcinuma restarts it into the plan like a persistent domain.", "stderr (preferred)")
        # ... and the watcher is asked to restart it only if it is
        # persistent once up; the fake's vm-t stays transient: no plan
        # asked, nothing counted.
        got = e.wait(lambda: e.since(m, "restart"), "the conditional restart request")
        eq([(g["uuid"], g["if_persistent"]) for g in got], [(T, True)], "one conditional restart request under "
           "transient: leave, preferred")
        e.wait(lambda: e.since(m, "restart_transient"), "the fake watcher to leave the transient domain")
        time.sleep(0.2)
        eq(e.since(m, "restart_plan"), [], "restart plans for a domain that stays transient")
        eq(e.status()["restarts"]["requested"], 0, "status restarts.requested for a domain that stays transient")
        # One that is persistent by the time it is up (virt-install's
        # defineXML right after its createXML): restarted, from its live
        # XML, and then counted as requested.
        with open(os.path.join(e.fw, "domains", T + ".xml"), "w") as f:
            f.write(e.xml_t.replace("<name>vm-t</name>", "<name>vm-t-final</name>"))
        m = e.mark()
        r, dec = e.prepare("vm-t", e.xml_t)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "warn"), "transient at the gate, preferred, again")
        plan = e.wait(lambda: e.since(m, "restart_plan"), "the restart plan of the domain defined while it starts")[0]
        check(plan["redefine"] and "<name>vm-t</name>" in plan["xml"] and "pcie-expander-bus" in plan["xml"],
              "its restart plan is that of its live XML (not of the new definition): %r" % plan)
        e.send({"type": "restarted", "uuid": T, "outcome": "restarted", "unplanned_us": 1, "total_us": 2})
        st = e.status()["restarts"]
        eq((st["requested"], st["restarted"]), (1, 1), "status restarts (requested, restarted) after it")
        os.remove(os.path.join(e.fw, "domains", T + ".xml"))
        m = e.mark()

        e.reload({"default": {"policy": "require", "transient": "restart"}})
        r, dec = e.prepare("vm-t", e.xml_t)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "restart"), "transient: restart: %r" % r)
        contains(r.err, "restarts it into the plan (transient: restart).", "stderr")
        check("persistent definition" not in r.err, "stderr names a persistent definition: %r" % r.err)
        got = e.wait(lambda: e.since(m, "restart"), "the restart request of the transient domain")
        eq(got[0]["uuid"], T, "its uuid")
        e.wait(lambda: e.since(m, "restart_plan"), "its restart plan")
        e.send({"type": "restarted", "uuid": T, "outcome": "restarted", "unplanned_us": 1, "total_us": 2})

        # A domain defined meanwhile: the watcher says so, and it is
        # restarted under transient: leave.
        e.reload({"default": {"policy": "require"}})
        e.send({"type": "domain", "uuid": T, "persistent": True})
        eq(e.status()["restarts"]["persistent_domains"], 2, "the set after a domain message")
        m = e.mark()
        r, dec = e.prepare("vm-t", e.xml_t)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "restart"), "a domain defined meanwhile: %r" % r)
        e.wait(lambda: e.since(m, "restart_plan"), "its restart plan")
        e.send({"type": "restarted", "uuid": T, "outcome": "restarted", "unplanned_us": 1, "total_us": 2})
        e.send({"type": "domain", "uuid": T, "persistent": False})
        r, dec = e.prepare("vm-t", e.xml_t)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (1, "refuse"), "a domain undefined meanwhile: %r" % r)
    finally:
        e.stop()


def waits(e):
    """The status's count of prepare calls held for a define, and of those
    that no define ended."""
    rs = e.d.status()["restarts"]
    return rs["define_waits"], rs["define_waits_in_vain"]


def t_redefine():
    e = Env({"default": {"policy": "require"}})
    try:
        # The client undefines vm-p and defines it again; its start's hook
        # call reaches pcinumad before the define's event does.
        e.send({"type": "domain", "uuid": P, "persistent": False})
        m = e.mark()
        waits0 = waits(e)
        out = {}
        th = threading.Thread(target=lambda: out.update(got=e.prepare("vm-p", e.xml_p)))
        th.start()
        # Held: counted as such, and not answered (however slow the
        # daemon is, the define below comes after the call was held).
        e.wait(lambda: waits(e)[0] == waits0[0] + 1 or "got" in out, "the hook call held for its define")
        check(th.is_alive(), "the hook call of a domain undefined moments ago was answered before its define came: %r"
              % (out.get("got"),))
        e.send({"type": "domain", "uuid": P, "persistent": True})
        th.join(td.T(20))
        check("got" in out, "no answer to the hook call after the define came")
        r, dec = out["got"]
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "restart"),
           "a start whose define came after its hook call, under require: %r" % (r,))
        contains(r.err, "its persistent definition is being updated", "hook stderr")
        eq(waits(e), (waits0[0] + 1, waits0[1]), "status restarts define_waits, define_waits_in_vain after a held call")
        e.wait(lambda: e.since(m, "restart_plan"), "its restart plan")
        e.send({"type": "restarted", "uuid": P, "outcome": "restarted", "unplanned_us": 1, "total_us": 2})
        # Undefined for good: no define comes, and once the wait is over
        # the start is decided as a transient one (refused under require).
        e.send({"type": "domain", "uuid": P, "persistent": False})
        t0 = time.monotonic()
        r, dec = e.prepare("vm-p", e.xml_p)
        waited = time.monotonic() - t0
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (1, "refuse"), "a start of a domain undefined for good: %r" % (r,))
        contains(r.err, "a transient domain must be created from planned XML", "stderr")
        check(waited >= 1.9, "decided after %.2f s, before the wait for a define (2 s) was over" % waited)
        eq(waits(e), (waits0[0] + 2, waits0[1] + 1), "define_waits, define_waits_in_vain after a wait in vain")
        # That wait ends the undefine's note: the next start is not held
        # (the counters say so; a time bound would not hold under valgrind).
        r, dec = e.prepare("vm-p", e.xml_p)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (1, "refuse"), "the next start of a domain undefined for good: %r" % (r,))
        eq(waits(e), (waits0[0] + 2, waits0[1] + 1), "the next start was held for a define again")
        st = subprocess.run([td.ARGS.pcinumactl, "status", "--socket", e.d.sock], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=td.T(30))
        contains(st.stdout, "; %d starts held for a define, %d in vain" % (waits0[0] + 2, waits0[1] + 1),
                 "pcinumactl status")
    finally:
        e.stop()


def t_redefine_needless():
    # A start whose answer is the same for a transient and a persistent
    # domain does not wait for a define: here one whose policy is "off"
    # (libvirt starts it as it is, either way).
    e = Env({"default": {"policy": "require"}, "rules": [{"match": {"name": "vm-p"}, "policy": "off"}]})
    try:
        e.send({"type": "domain", "uuid": P, "persistent": False})
        waits0 = waits(e)
        r, dec = e.prepare("vm-p", e.xml_p)
        eq(waits(e), waits0, "a start whose answer does not depend on a define was held for one (define_waits, "
           "define_waits_in_vain)")
        # The answer a persistent one gets (the memo may give it: the
        # same request, host map and policy).
        e.send({"type": "domain", "uuid": P, "persistent": True})
        r1, dec1 = e.prepare("vm-p", e.xml_p)
        eq((r.rc, r.err, dec.get("PCINUMA_VERDICT")), (r1.rc, r1.err, dec1.get("PCINUMA_VERDICT")),
           "a start under off moments after an undefine, and once defined again")
        eq(r.rc, 0, "a start under off: %r" % (r,))
    finally:
        e.stop()


def t_refuse_allow_incoming():
    e = Env({"default": {"policy": "require"},
             "rules": [{"match": {"name": "vm-refuse"}, "policy": "require", "first_start": "refuse"},
                       {"match": {"name": "vm-allow"}, "policy": "require", "first_start": "allow"}]})
    try:
        m = e.mark()
        xml = e.xml_p.replace("<name>vm-p</name>", "<name>vm-refuse</name>")
        r, dec = e.prepare("vm-refuse", xml)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (1, "refuse"), "first_start: refuse: %r" % r)
        contains(r.err, "pcinuma: the persistent definition is being updated; then start the domain again.", "stderr")
        xml = e.xml_p.replace("<name>vm-p</name>", "<name>vm-allow</name>")
        r, dec = e.prepare("vm-allow", xml)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "warn"), "first_start: allow: %r" % r)
        contains(r.err, "pcinuma: warning: domain vm-allow starts without its NUMA-aware PCI topology (policy require)",
                 "stderr")
        contains(r.err, "the persistent definition is being updated, for the next start", "stderr")

        # An incoming migration: its migrate hook call, then its prepare.
        r, dec = hook_and_decision(e.d, "vm-p", "migrate", "begin", e.xml_p)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "pass"), "migrate begin of an unplanned domain")
        r, dec = e.prepare("vm-p", e.xml_p)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (1, "refuse"), "the prepare of an incoming migration: %r" % r)
        contains(r.err, "pcinuma: not restarted into the plan: it comes in by migration or from a saved state", "stderr")
        # ... once only: the next start is a start again.
        r, dec = e.prepare("vm-p", e.xml_p)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "restart"), "the start after it")
        e.wait(lambda: e.since(m, "restart_plan"), "its restart plan")
        e.send({"type": "restarted", "uuid": P, "outcome": "skipped", "unplanned_us": 0, "total_us": 0})
        # A restore, the same.
        r, dec = hook_and_decision(e.d, "vm-p", "restore", "begin", e.xml_p)
        r, dec = e.prepare("vm-p", e.xml_p)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (1, "refuse"), "the prepare of a restore: %r" % r)
        time.sleep(0.2)
        eq(len(e.since(m, "restart")), 1, "restart requests (only the plain start)")

        # The watcher lost libvirt: nothing known, no restart.
        e.send({"type": "status", "connected": False, "redefinitions": 0, "failures": 0,
                "last_error": "libvirtd closed the connection"})
        eq(e.status()["restarts"]["persistent_domains"], None, "persistent_domains while disconnected")
        r, dec = e.prepare("vm-p", e.xml_p)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (1, "refuse"), "no connected watcher: %r" % r)
        contains(r.err, "pcinuma: not restarted into the plan: pcinuma's libvirt watcher is not connected to libvirt",
                 "stderr")
        # Connected again, with the set: restarted again.
        e.send({"type": "status", "connected": True, "redefinitions": 0, "failures": 0, "last_error": None})
        e.send({"type": "domains", "persistent": [P]})
        r, dec = e.prepare("vm-p", e.xml_p)
        eq((r.rc, dec.get("PCINUMA_VERDICT")), (0, "restart"), "connected again")
    finally:
        e.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "workdir"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--only", help="run only the tests whose name contains this")
    ap.add_argument("--daemon-wrapper", default="",
                    help="prefix every pcinumad command line with this (e.g. valgrind ...)")
    ap.add_argument("--timeout-factor", type=float, default=1.0)
    a = ap.parse_args()
    td.WRAPPER = shlex.split(a.daemon_wrapper)
    td.FACTOR = max(1.0, a.timeout_factor)
    for opt in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "workdir"):
        setattr(a, opt, os.path.abspath(getattr(a, opt)))
    td.start_run(a, "pcinuma-fs-")
    td.FIXTURE = os.path.join(td.RUNTMP, "sample-4n")
    t0 = time.monotonic()
    try:
        mkfakesysfs(os.path.join(a.hosts, "sample-4n.json"), td.FIXTURE)
        R.run("persistent: restarted; pcinuma's own starts pass; the watcher's report counted", t_persistent)
        R.run("transient: leave refuses (says how), restart restarts; a domain defined meanwhile", t_transient)
        R.run("a define that reaches the gate after the hook call is waited for; then transient", t_redefine)
        R.run("no wait for a define that would not change the answer (policy off)", t_redefine_needless)
        R.run("first_start refuse and allow; incoming migration and restore; watcher without libvirt",
              t_refuse_allow_incoming)
    finally:
        td.end_run()
    return R.finish(t0)


if __name__ == "__main__":
    sys.exit(main())

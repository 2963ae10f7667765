#!/usr/bin/env python3
"""libvirt suite: what the real pcinuma-watcher tells pcinumad's prepare
gate for restarts into the plan (issue 23 item 1), against a private
session libvirtd.

    test_restart.py --pcinumad P --pcinumactl P --hook P \
        --mkfakesysfs P --hosts DIR --workdir DIR [--rounds N] [-v]

Wired as tests/libvirt/test_integration.py is (lvenv.Harness: the hook as
a qemu.d wrapper forwarding only this test's session, pcinumad with
--allow-uid and its watcher on the session socket, the sample-4n fixture
host).  A session libvirtd cannot start a domain with a PCI hostdev, but
it runs the prepare hook first: the gate's verdict, in pcinumad's log,
says what the gate knew.  (Real restarts, which need a domain that starts,
are the clients suite's: tests/clients/.)

Checked:
  - the persistent set: after the watcher connects, pcinumad knows every
    persistent domain ('restarts.persistent_domains' in the status), and a
    define or an undefine changes it at once;
  - the race the restart depends on: a client that starts a domain right
    after defining it (virsh define && virsh start, as a shell runs them;
    python3-libvirt's defineXML() then create() at once, as Nova and
    Terraform do; and the same with the domain undefined in between, so
    each define flips the set) must find the gate knowing the domain is
    persistent: every such start gets the verdict 'restart', none the
    transient refusal.  --rounds N each (default 60); the figures go to
    docs/operations.md;
  - a transient 'virsh create' of an unplanned domain under require and
    "transient": "leave" is refused with the message for transient
    domains; with "transient": "restart" it is let through (restart);
  - "first_start": "refuse" keeps the refusal for a persistent domain;
  - a restart the watcher was asked for whose domain never comes up (the
    session libvirtd fails the start on the hostdev) ends as 'not done'
    once the window has passed (restart_window_ms), logged with its
    MESSAGE_ID and counted.
  - a client that undefines a domain right after pcinuma-watcher redefined
    it and defines it again keeps its definition: the watcher does not
    take the client's define, whose event says ADDED, for its own define
    re-creating an undefined domain.  The client defines the plan
    `pcinumactl plan` makes of the domain, so that libvirt then holds
    exactly what the watcher read back after its own define, as when a
    client's define lands between the watcher's define and its read-back
    (the CLIENT rounds "undefined between rounds" of test 2 lost a
    definition that way under load).  pcinumad runs with --settle-ms 3000
    there, so the client's undefine and define surely land before the
    watcher checks its define.
Output: TAP lines, then "N passed, M failed"; exit 1 on any failure, 77
when libvirtd or virsh is missing.
"""

import difflib
import json
import os
import subprocess
import sys
import time

from pcinumatest.lvenv import *  # noqa: F401,F403
from pcinumatest.lvenv import Harness
from pcinumatest.suite import run_session_suite, session_args

HERE = os.path.dirname(os.path.abspath(__file__))
MID_RESTARTING = "f6efac6604544011bdbb4be49a330a91"
MID_SKIPPED = "f85aaf68ac36456aade6416a682f49ba"
MID_REDEFINE_CONFLICT = "36d0cf70f905419e82df46c0a879d92c"
TRANSIENT_MSG = "a transient domain must be created from planned XML"

# The Nova-like client: define, then start at once, over the session
# socket (as root, like the watcher).  One JSON line per round.
CLIENT = r"""
import json, sys, time, libvirt
uri, path, rounds, undefine = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
libvirt.registerErrorHandler(lambda *a: None, None)
c = libvirt.open(uri)
xml = open(path).read()
for i in range(rounds):
    d = c.defineXML(xml)
    t0 = time.monotonic()
    try:
        d.create()
        err = None
    except libvirt.libvirtError as e:
        err = str(e)
    print(json.dumps({"round": i, "error": err, "s": time.monotonic() - t0}), flush=True)
    try:
        d.destroy()
    except libvirt.libvirtError:
        pass
    if undefine:
        d.undefine()
"""


def libvirt_python():
    """An interpreter that imports Debian's python3-libvirt."""
    for py in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([py, "-c", "import libvirt"], capture_output=True).returncode == 0:
            return py
    return None


class Test(Harness):
    def verdicts(self, name, since):
        """The prepare verdicts logged for domain name since log offset."""
        out = []
        for line in self.d.log()[since:].splitlines():
            if "PCINUMA_PHASE=prepare" in line and ("PCINUMA_DOMAIN=%s " % name) in line + " ":
                for f in line.split():
                    if f.startswith("PCINUMA_VERDICT="):
                        out.append(f.split("=", 1)[1])
        return out

    def status_restarts(self):
        return (self.d.status() or {}).get("restarts") or {}

    # -- the persistent set ---------------------------------------------------
    def t1_set(self):
        for i in range(3):
            self.define(domain_xml("set-%d" % i, ["0000:13:00.0"], memnodes={0: "0", 1: "1"}))
        self.d.start(self.s.uri, wait_connected=True)
        got = self.wait_until(lambda: self.status_restarts().get("persistent_domains") == 3, 5)
        self.check(got, "1: the watcher reports every persistent domain at connect",
                   json.dumps(self.status_restarts()))
        self.define(domain_xml("set-3", ["0000:13:00.0"], memnodes={0: "0", 1: "1"}))
        t0 = time.monotonic()
        got = self.wait_until(lambda: self.status_restarts().get("persistent_domains") == 4, 5, step=0.01)
        self.check(got, "1: a define adds the domain at once", note="%.0f ms" % ((time.monotonic() - t0) * 1000))
        self.s.undefine("set-3")
        got = self.wait_until(lambda: self.status_restarts().get("persistent_domains") == 3, 5, step=0.01)
        self.check(got, "1: an undefine removes it", json.dumps(self.status_restarts()))
        for i in range(3):
            self.s.undefine("set-%d" % i)

    # -- define, then start at once --------------------------------------------
    def t2_race(self):
        rounds = self.a.rounds
        name = "race-r"
        xml = domain_xml(name, ["0000:13:00.0", "0000:33:00.0"], memnodes={0: "0", 1: "1"})
        path = self.s.write(xml, "race-r.xml")
        results = {}
        # virsh define && virsh start, as a shell runs them
        mark = len(self.d.log())
        bad = []
        for i in range(rounds):
            r = self.s.run_as(["/bin/sh", "-c", "virsh -c qemu:///session define %s >/dev/null && "
                               "virsh -c qemu:///session start %s" % (path, name)], timeout=VIRSH_TIMEOUT)
            v = classify(r.returncode, (r.stdout + r.stderr).strip())
            if v != "passed":
                bad.append("round %d: %s: %s" % (i, v, (r.stdout + r.stderr).strip()[:300]))
        got = self.verdicts(name, mark)
        results["virsh"] = got
        # 'allow': the watcher's redefinition (asked for by the round
        # before) landed between this round's define and its start.
        self.check(not bad and len(got) == rounds and set(got) <= {"restart", "allow"},
                   "2: %d x 'virsh define && virsh start' under require: every start passes the gate as a "
                   "restart (the gate knew the domain is persistent), or finds it planned" % rounds,
                   "\n".join(bad[:5]) + "\nverdicts: %r" % got,
                   note="%d restart, %d allow, %d refuse" % (got.count("restart"), got.count("allow"),
                                                            got.count("refuse")))
        self.s.undefine(name)
        py = libvirt_python()
        if not self.check(py, "2: python3-libvirt is installed (Debian's python3-libvirt)"):
            return
        client = self.s.write(CLIENT, "client.py", suffix=".py")
        for undefine in (False, True):
            mark = len(self.d.log())
            r = subprocess.run([py, client, self.s.uri, path, str(rounds), "1" if undefine else "0"],
                               capture_output=True, text=True, timeout=rounds * 30)
            lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
            errors = [l["error"] or "" for l in lines]
            odd = [e for e in errors if NO_PASSTHROUGH not in e]
            got = self.verdicts(name, mark)
            what = "defineXML() + create() at once%s" % (", undefined between rounds" if undefine else "")
            results[what] = got
            self.check(r.returncode == 0 and len(lines) == rounds and not odd and len(got) == rounds
                       and set(got) <= {"restart", "allow"},
                       "2: %d x python3-libvirt %s: every start passes the gate as a restart (or finds it "
                       "planned)" % (rounds, what),
                       "exit %d %s\nodd: %r\nverdicts: %r" % (r.returncode, r.stderr[-800:], odd[:3], got),
                       note="%d restart, %d allow, %d refuse" % (got.count("restart"), got.count("allow"),
                                                                got.count("refuse")))
            if not undefine:
                self.s.undefine(name)
        self.diag("figures: " + json.dumps({k: {x: v.count(x) for x in ("restart", "allow", "refuse")}
                                            for k, v in results.items()}))

    # -- transient, first_start refuse, expiry -----------------------------
    def t3_transient(self):
        name = "trans-r"
        xml = domain_xml(name, ["0000:13:00.0", "0000:33:00.0"], memnodes={0: "0", 1: "1"})
        path = self.s.write(xml, "trans-r.xml")
        v, text = self.s.create_dom(path)
        self.check(v == "refused" and TRANSIENT_MSG in text and "persistent definition" not in text,
                   "3: virsh create of an unplanned domain under require, transient: leave: refused, "
                   "with the message for transient domains", text)
        self.set_policy(rules=self.rules + [("trans-*", "require")])
        with open(self.policy) as f:
            pol = json.load(f)
        pol["rules"][-1]["transient"] = "restart"
        pol["rules"].append({"match": {"name": "refuse-*"}, "policy": "require", "first_start": "refuse"})
        pol["restart_window_ms"] = 1000
        write(self.policy, json.dumps(pol))
        self.d.hup()
        mark = len(self.d.log())
        before = self.status_restarts()
        v, text = self.s.create_dom(path)
        self.check(v == "passed" and self.verdicts(name, mark) == ["restart"],
                   "3: with transient: restart, it passes the gate as a restart", text)
        # it never comes up (the hostdev): not done once the window is over
        got = self.wait_until(lambda: self.status_restarts().get("skipped", 0) > before.get("skipped", 0), 5)
        log = self.d.log()[mark:]
        skipped = [l for l in log.splitlines() if MID_SKIPPED in l and ("PCINUMA_UUID=") in l]
        self.check(got and skipped and "did not come up within the restart window of 1000 ms" in skipped[0],
                   "3: a restart whose domain never came up ends as not done after the window, logged",
                   "\n".join(skipped) or log[-2000:])
        # first_start: refuse, a persistent domain whose start finds its
        # definition unplanned (the hook run as libvirt runs it, with the
        # XML as defined: the watcher may have planned the definition by
        # the time a virsh start comes, on a slow machine)
        rname = "refuse-r"
        rxml = domain_xml(rname, ["0000:13:00.0", "0000:33:00.0"], memnodes={0: "0", 1: "1"})
        known = self.status_restarts().get("persistent_domains") or 0
        self.define(rxml)
        self.wait_until(lambda: (self.status_restarts().get("persistent_domains") or 0) > known, 5, step=0.01)
        r = self.run_hook(rname, "prepare", "begin", rxml)
        self.check(r.returncode == 1 and "refusing to start domain refuse-r" in r.stderr and
                   MSG8_UPDATING in r.stderr and "then start the domain again" in r.stderr,
                   "3: first_start: refuse: an unplanned start of a persistent domain is refused saying the "
                   "definition is being updated", "exit %d: %s" % (r.returncode, r.stderr))
        self.s.undefine(rname)
        self.set_policy()
        self.d.hup()

    # -- a client's undefine and define right after the watcher's define ------
    def t4_readded(self):
        settle_ms = 3000
        extra = list(self.d.extra)
        self.d.extra = extra + ["--settle-ms", str(settle_ms)]
        try:
            self.d.start(self.s.uri, wait_connected=True)
            name = "readd-r"
            self.define(domain_xml(name, ["0000:13:00.0", "0000:33:00.0"], memnodes={0: "0", 1: "1"}))
            # what the watcher will define: the plan of the definition
            # libvirt holds (it acts settle_ms after the define)
            raw = self.s.write(self.dump(name), "readd-r.raw.xml")
            r = subprocess.run([self.a.pcinumactl, "plan", "--sysfs-root", self.sysfs, "--policy-file",
                                self.policy, raw], capture_output=True, text=True, timeout=60)
            if not self.check(r.returncode == 0 and NS in r.stdout, "4: pcinumactl plan plans the domain",
                              r.stderr):
                return
            path = self.s.write(r.stdout, "readd-r.xml")
            planned, _ = self.wait_planned(name, timeout=settle_ms / 1000.0 + 10)
            t0 = time.monotonic()
            if not self.check(is_planned(planned), "4: the watcher redefines the domain", planned):
                return
            # the client undefines it and defines the same plan again: what
            # libvirt holds then is what the watcher read back after its
            # define, as when a client's define lands between the two
            r = self.s.run_as(["/bin/sh", "-c", "virsh -c qemu:///session undefine %s >/dev/null && "
                               "virsh -c qemu:///session define %s" % (name, path)], timeout=VIRSH_TIMEOUT)
            took = time.monotonic() - t0
            again = self.dump(name)
            # the watcher checks its define settle_ms after the last event:
            # only then can it undefine
            self.check(r.returncode == 0 and took < settle_ms / 1000.0 and again == planned,
                       "4: the client's undefine and define land before the watcher checks its own define, and "
                       "libvirt holds what the watcher read back",
                       "exit %d: %s\n%s" % (r.returncode, (r.stdout + r.stderr).strip(),
                                             "".join(difflib.unified_diff(planned.splitlines(True),
                                                                          again.splitlines(True)))),
                       note="%.0f ms" % (took * 1000))
            mark = len(self.d.log())
            idle = self.wait_idle(quiet=1.0, timeout=settle_ms / 1000.0 + 15)
            left = self.s.virsh("dominfo", name)
            undone = [l for l in self.d.log()[mark:].splitlines()
                      if MID_REDEFINE_CONFLICT in l and "PCINUMA_DOMAIN=%s " % name in l + " "
                      and "PCINUMA_CONFLICT=recreated" in l]
            self.check(idle and left.returncode == 0 and not undone,
                       "4: a client's undefine and define right after the watcher's define: the client's "
                       "definition stays (the watcher does not undo it as a re-creation of its own)",
                       "idle %s; dominfo exit %d %s\n%s" % (idle, left.returncode, left.stderr.strip(),
                                                              "\n".join(undone)))
            self.s.undefine(name)
        finally:
            self.d.extra = extra
            self.d.start(self.s.uri, wait_connected=True)

    def before_step(self):
        """A running pcinumad that has counted the persistent domains."""
        self.ensure_daemon()
        self.wait_until(lambda: self.status_restarts().get("persistent_domains") is not None, 5)

    def run(self):
        self.run_steps([self.t1_set, self.t2_race, self.t3_transient, self.t4_readded], self.before_step)


def options(ap):
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--only", action="append", default=[])


def main():
    return run_session_suite(session_args(__doc__, options), Test)


if __name__ == "__main__":
    sys.exit(main())

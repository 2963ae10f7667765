#!/usr/bin/env python3
"""libvirt suite: `pcinumactl audit` against a private session libvirtd
(issue 25, item 4).

    test_audit.py --pcinumad P --pcinumactl P --hook P --mkfakesysfs P \
        --hosts DIR --workdir DIR [-v]

Domains in each state are defined while no pcinumad runs (nothing plans
them behind the test's back), on the fixture host sample-4n, under a
policy file whose default is require:

  a-current    planned by `pcinumactl plan` with that policy  -> current, allow
  b-stale      planned, then its cells pinned to other nodes -> stale, restart
  c-unplanned  as written                                     -> unplanned, restart
  d-off        as written, a rule says off                    -> off, allow
  e-nodev      no passthrough device                          -> excluded, allow
  f-noacpi     no <acpi/>                                     -> unplanned, refuse (the fix named)
  g-unpinned   no <numatune>                                  -> unplanned, refuse

and a transient domain, which is not defined and must not be listed.

Checks: every row's state, verdict and reason (--json and the text
table); that audit changed nothing (every definition byte-identical) and
ran without pcinumad; --policy legacy and --policy-file - judge by another
policy; the exit status (1 when a domain would be refused, 0 otherwise, 2
for a bad policy or an unreachable libvirt).  Then the verdicts are
compared with what the real prepare gate answers: pcinumad (without its
libvirt watcher, so it replans nothing) and the real hook, `virsh start`
of each domain -- audit's refuse must be the hook's refusal, allow and
warn must let the start through.

Output: "ok N - ..." lines and a final "N passed, M failed"; exit 1 on any
failure, 77 when libvirtd or virsh is missing.
"""

import json
import os
import re
import subprocess
import sys

from pcinumatest.lvenv import Harness, domain_xml, write
from pcinumatest.suite import run_session_suite, session_args

EXPECT = {
    # name: (state, verdict, a phrase of the reason)
    "a-current": ("current", "allow", "planned and up to date: 2 of 2 devices on guest cells"),
    "b-stale": ("stale", "restart", "its pcinuma mark is stale"),
    "c-unplanned": ("unplanned", "restart", "not planned yet: the plan moves 2 of 2 devices to guest cells"),
    "d-off": ("off", "allow", "policy off, from rule 1 (name 'd-off')"),
    "e-nodev": ("excluded", "allow", "no PCI passthrough devices"),
    "f-noacpi": ("unplanned", "refuse", "ACPI is off (<features><acpi/> is missing)"),
    "g-unpinned": ("unplanned", "refuse", "no guest cell is pinned to a host node; fix: pin each cell with <numatune><memnode"),
}


class Test(Harness):
    def audit(self, *args, stdin=None):
        return subprocess.run([self.a.pcinumactl, "audit", "--connect", self.s.uri, "--sysfs-root", self.sysfs, *args],
                              input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)

    def define_all(self):
        devs = ["0000:13:00.0", "0000:33:00.0"]
        pinned = {0: "0", 1: "1"}
        plain = domain_xml("a-current", devs, memnodes=pinned)
        planned = subprocess.run([self.a.pcinumactl, "plan", "--sysfs-root", self.sysfs, "--policy-file", self.policy, "-"],
                                 input=plain, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.check(planned.returncode == 0 and "urn:pcinuma:topology:1" in planned.stdout, "a-current planned by pcinumactl plan",
                   planned.stderr)
        self.define(planned.stdout)
        # Planned for cells on nodes 0 and 1; then its cells swap nodes
        # (an edit): the mark is stale and each device on the wrong cell.
        stale = subprocess.run([self.a.pcinumactl, "plan", "--sysfs-root", self.sysfs, "--policy-file", self.policy, "-"],
                               input=domain_xml("b-stale", devs, memnodes=pinned), stdout=subprocess.PIPE, text=True,
                               timeout=60).stdout
        stale = re.sub(r"(cellid=.0. mode=.strict. nodeset=.)0", r"\g<1>X", stale)
        stale = re.sub(r"(cellid=.1. mode=.strict. nodeset=.)1", r"\g<1>0", stale)
        stale = re.sub(r"(cellid=.0. mode=.strict. nodeset=.)X", r"\g<1>1", stale)
        self.check(re.search(r"cellid=.0. mode=.strict. nodeset=.1", stale) and
                   re.search(r"cellid=.1. mode=.strict. nodeset=.0", stale),
                   "b-stale: its cells swapped host nodes")
        self.define(stale)
        self.define(domain_xml("c-unplanned", devs, memnodes=pinned))
        self.define(domain_xml("d-off", devs, memnodes=pinned))
        self.define(domain_xml("e-nodev", []))
        self.define(domain_xml("f-noacpi", devs, memnodes=pinned).replace("  <features>\n    <acpi/>\n  </features>\n", ""))
        self.define(domain_xml("g-unpinned", devs))
        # A transient domain: running, never defined.
        path = self.s.write(domain_xml("t-transient", []))
        r = self.s.virsh("create", path, quiet=False)
        self.check(r.returncode == 0, "a transient domain runs (virsh create)", r.stderr)

    def definitions(self):
        return {n: self.dump(n) for n in EXPECT}

    def run(self):
        self.set_policy(default="require", rules=[("d-off", "off")])
        self.define_all()
        before = self.definitions()

        # -- JSON, the policy file, no pcinumad ------------------------------
        self.check(self.d.proc is None, "no pcinumad runs")
        r = self.audit("--policy-file", self.policy, "--json")
        self.check(r.returncode == 1, "audit exits 1: a domain would be refused", "rc %d\n%s" % (r.returncode, r.stderr))
        try:
            rows = json.loads(r.stdout)
        except ValueError as e:
            rows = []
            self.check(False, "audit --json prints JSON", "%s\n%s" % (e, r.stdout[:2000]))
        by = {row["name"]: row for row in rows}
        self.check(sorted(by) == sorted(EXPECT), "every defined domain is listed, the transient one is not", repr(sorted(by)))
        self.check([row["name"] for row in rows] == sorted(by), "rows in name order")
        for name, (state, verdict, phrase) in sorted(EXPECT.items()):
            row = by.get(name, {})
            self.check((row.get("state"), row.get("verdict")) == (state, verdict) and phrase in (row.get("reason") or ""),
                       "%s: %s, %s, '%s'" % (name, state, verdict, phrase), json.dumps(row, indent=1))
            self.check("\n" not in (row.get("reason") or "\n"), "%s: the reason is one line" % name)
        keys = {"name", "uuid", "active", "state", "verdict", "reason", "policy", "policy_origin", "devices", "message"}
        self.check(all(set(row) == keys for row in rows), "each object has name, uuid, active, state, verdict, reason, "
                   "policy, policy_origin, devices, message", repr([sorted(row) for row in rows][:1]))
        self.check(by.get("d-off", {}).get("policy") == "off" and by.get("a-current", {}).get("policy") == "require",
                   "the policy each domain resolves to")
        msg = by.get("f-noacpi", {}).get("message") or ""
        self.check(msg.startswith("pcinuma: refusing to start domain f-noacpi: ACPI is off") and
                   "pcinuma: fix: add <acpi/> to <features>\n" in msg,
                   "f-noacpi: the message the hook would print, the fix with it", msg)
        self.check(self.definitions() == before, "audit changed no definition")

        # -- the text table ------------------------------------------------
        r = self.audit("--policy-file", self.policy)
        self.diag(r.stdout)
        lines = r.stdout.splitlines()
        head = lines[0].split() if lines else []
        self.check(head == ["DOMAIN", "STATE", "NEXT-START", "POLICY", "REASON"], "text: the header", r.stdout[:500])
        table = {l.split()[0]: l.split()[1:3] for l in lines[1:1 + len(EXPECT)]}
        self.check(table == {n: [s, v] for n, (s, v, _) in EXPECT.items()}, "text: one row per domain, its state and verdict",
                   r.stdout)
        summary = lines[-1] if lines else ""
        self.check(summary == "7 domains under %s: 1 current, 1 stale, 3 unplanned, 1 off, 1 excluded; at the next start: "
                   "3 allow, 2 restart, 2 refuse." % self.policy, "text: the summary", summary)

        # -- another policy: --policy legacy, --policy-file - ---------------
        r = self.audit("--policy", "legacy", "--json")
        by = {row["name"]: row for row in json.loads(r.stdout or "[]")}
        want = {"a-current": ("current", "allow"), "c-unplanned": ("unplanned", "restart"),
                "d-off": ("unplanned", "restart"), "f-noacpi": ("excluded", "warn"), "g-unpinned": ("unplanned", "refuse")}
        got = {n: (by.get(n, {}).get("state"), by.get(n, {}).get("verdict")) for n in want}
        self.check(got == want and r.returncode == 1, "--policy legacy: judged by legacy (unpinned cells refused, "
                   "no ACPI a warning, unplanned ones restarted)", "rc %d %r" % (r.returncode, got))
        r = self.audit("--policy-file", "-", "--json", stdin='{"default": {"policy": "off"}}')
        rows = json.loads(r.stdout or "[]")
        self.check(r.returncode == 0 and rows and all(row["verdict"] == "allow" for row in rows) and
                   by_state(rows) == {"off": 5, "stale": 2},
                   "--policy-file - (policy off): nothing refused, exit 0; the planned ones would be undone (stale)",
                   "rc %d %r" % (r.returncode, by_state(rows)))

        # -- bad input ----------------------------------------------------
        bad = os.path.join(self.tmp, "bad.json")
        write(bad, '{"default": {"policy": "strict"}}')
        r = self.audit("--policy-file", bad)
        self.check(r.returncode == 2 and bad in r.stderr and r.stdout == "", "a bad policy file: exit 2 naming it",
                   "rc %d %r" % (r.returncode, r.stderr))
        r = subprocess.run([self.a.pcinumactl, "audit", "--connect", "qemu+unix:///session?socket=/nonexistent/sock",
                            "--sysfs-root", self.sysfs], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.check(r.returncode == 2 and "cannot connect to libvirt" in r.stderr and r.stdout == "",
                   "an unreachable libvirt: exit 2 saying so", r.stderr)
        self.check(self.definitions() == before, "still no definition changed")

        # -- against the real prepare gate --------------------------------
        # pcinumad without its watcher (it replans nothing) and the real
        # hook: each start's outcome is the verdict audit gave; 'restart'
        # assumes pcinumad's watcher, which would restart the domain into
        # its plan, and without one the gate refuses it instead, saying so.
        self.d.start("none")
        for name, (state, verdict, _) in sorted(EXPECT.items()):
            got, text = self.s.start_dom(name)
            want = "refused" if verdict in ("refuse", "restart") else ("started" if name == "e-nodev" else "passed")
            if verdict == "restart":
                self.check("not restarted into the plan: pcinumad runs without a libvirt watcher" in text,
                           "%s: without a watcher the gate says why it does not restart it" % name, text)
            self.check(got == want, "%s: virsh start is %s, as audit said (%s)" % (name, want, verdict), text)
            if got == "started":
                self.s.virsh("destroy", name)


def by_state(rows):
    out = {}
    for row in rows:
        out[row["state"]] = out.get(row["state"], 0) + 1
    return out


def main():
    return run_session_suite(session_args(__doc__), Test, errors=(ValueError,))


if __name__ == "__main__":
    sys.exit(main())

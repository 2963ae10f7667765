#!/usr/bin/env python3
"""libvirt suite: the define-time rewrite under concurrent edits (issue 13).

    test_race.py --pcinumad P --pcinumactl P --hook P --mkfakesysfs P \
        --hosts DIR --workdir DIR [--source DIR] [--scale F] [-v]

The wiring is pcinumatest.lvenv's (its Harness and Daemon): a private
session libvirtd, pcinumad and its watcher on the fixture host sample-4n,
policy require, the hook installed.  Every domain here has 16 passthrough
devices on 4 guest cells.  Users edit domains while pcinuma-watcher
redefines them, from several workers at once, each with a virsh shell of
its own (no process start between two commands):

* edits: define v1, then v2 (v1 + a <description>) 0-100 ms later;
* undefines: define, then undefine 0-15 ms later, and 15-600 ms later
  (across the moment the watcher acts);
* attach-device --config right after define;
* probes: v2 aimed at the moment the watcher acts (settle-ms .. +150 ms)
  to measure what is left of the window: an edit lost there must have been
  reported as a conflict (MESSAGE_ID REDEFINE_CONFLICT);
* define && start: what such a client sees at the first start (under the
  default "first_start": "restart", the gate lets it through to be
  restarted into the plan: never a refusal), and when a start first passes;
* pre-images: the file equals the definition it replaced, restores it, and
  no more than 5 per domain are kept.

After each phase it waits until the watcher is idle (pcinumactl status:
nothing pending and the counters standing still for a second) and checks
every domain: the user's last edit is there (no lost edit), an undefined
domain stays undefined (none resurrected), and every surviving domain is
planned (it carries the mark, and `pcinumactl plan` of it changes nothing).
It prints the counts and fails on any lost edit (the probes: on any lost
edit not reported as a conflict), resurrected domain or unplanned one.

--scale F multiplies the number of trials (default 1: 200 edits, 100
undefines, 20 attach-device, 60 probes, 2x10 define && start).
Output: TAP-like "ok N - ..." lines and a final "N passed, M failed".
"""

import json
import os
import queue
import random
import re
import select
import stat
import subprocess
import sys
import threading
import time
import uuid as uuidlib

from pcinumatest import lvenv as ti
from pcinumatest.session import SessionError
from pcinumatest.suite import run_session_suite, session_args
from pcinumatest.tap import Tap

HERE = os.path.dirname(os.path.abspath(__file__))

WORKERS = 4
VIRSH_TIMEOUT = 60          # one virsh command slower than this is a hang
PLAN_WAIT = 60              # a bound for "never planned", not a figure
MID_CONFLICT = "36d0cf70f905419e82df46c0a879d92c"
DEVICES = ["0000:%02x:00.0" % b for b in (0x13, 0x14, 0x17, 0x18, 0x33, 0x34,
                                          0x37, 0x38, 0x53, 0x54, 0x57, 0x58,
                                          0x73, 0x74, 0x77, 0x78)]
MEMNODES = {0: "0", 1: "1", 2: "2", 3: "3"}
ATTACH_BDF = "0000:78:00.0"     # attach-device adds it to the other 15
ATTACH_XML = ("<hostdev mode='subsystem' type='pci' managed='yes'>\n"
              "  <source><address domain='0x0000' bus='0x78' slot='0x00' "
              "function='0x0'/></source>\n</hostdev>\n")


def vm_xml(name, devices=DEVICES, description=None):
    x = ti.domain_xml(name, devices, cells=4, memnodes=MEMNODES,
                      uid=str(uuidlib.uuid4()))
    if description:
        x = x.replace("</uuid>\n", "</uuid>\n  <description>%s</description>\n"
                      % description, 1)
    return x


class Shell:
    """One virsh process fed commands on stdin: two defines are then as
    close together as a program calling libvirt makes them."""

    def __init__(self, sess):
        self.p = subprocess.Popen(
            [sess.virsh_bin, "-c", "qemu:///session"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, env=sess.env, cwd=sess.tmp,
            **sess._demote_kwargs())
        self.buf = b""
        self.n = 0

    def send(self, *cmds):
        """Write the commands and an end marker; return the marker."""
        self.n += 1
        # the echoed command line reads @@'E'ND..., only the output @@END...
        self.p.stdin.write(("".join(c + "\n" for c in cmds) +
                            "echo @@'E'ND%d@@\n" % self.n).encode())
        self.p.stdin.flush()
        return b"@@END%d@@" % self.n

    def wait(self, marker, timeout=VIRSH_TIMEOUT):
        deadline = time.monotonic() + timeout
        fd = self.p.stdout.fileno()
        while marker not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SessionError("virsh did not answer within %d s" % timeout)
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise SessionError("virsh exited")
            self.buf += chunk
        k = self.buf.index(marker)
        out, self.buf = self.buf[:k], self.buf[k + len(marker):]
        return "\n".join(l for l in out.decode("utf-8", "replace").split("\n")
                         if not l.startswith("virsh # "))

    def run(self, *cmds, timeout=VIRSH_TIMEOUT):
        return self.wait(self.send(*cmds), timeout)

    def dump(self, name):
        """The persistent definition, or None when there is none."""
        out = self.run("dumpxml --inactive --security-info " + name)
        # virsh's shell adds a blank line after the XML libvirt returns
        return None if "error:" in out else out[out.find("<domain"):].rstrip("\n") + "\n"

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()


class RaceTest(ti.Harness):
    def __init__(self, a, tap):
        super().__init__(a, tap)
        self.counts = {}
        self.shells = []
        self.settle_ms = 0

    # -- plumbing --------------------------------------------------------
    def count(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n

    def wstatus(self):
        return (self.d.status() or {}).get("libvirt") or {}

    def quiesce(self, timeout=180):
        """Wait until the watcher has nothing pending and its counters
        stand still for a second (an event is in flight a few ms at
        most).  False after `timeout` s: the watcher never settles."""
        last, since = None, time.monotonic()
        t0 = since
        keys = ("pending", "events", "redefinitions", "failures", "conflicts",
                "undone")
        while time.monotonic() - t0 < timeout:
            st = self.wstatus()
            key = tuple(st.get(k) for k in keys)
            now = time.monotonic()
            if key != last or st.get("pending", 0) != 0 or not st.get("connected"):
                last, since = key, now
            elif now - since >= 1.0:
                return True
            time.sleep(0.1)
        return False

    def pool(self, jobs, fn):
        """Run fn(shell, job) for every job on WORKERS threads; return the
        results in the order of jobs."""
        q = queue.Queue()
        for i, j in enumerate(jobs):
            q.put((i, j))
        res = [None] * len(jobs)

        def work(sh):
            while True:
                try:
                    i, j = q.get_nowait()
                except queue.Empty:
                    return
                try:
                    res[i] = fn(sh, j)
                except (SessionError, OSError) as e:
                    res[i] = {"error": "%s: %s" % (type(e).__name__, e)}
        ths = [threading.Thread(target=work, args=(sh,)) for sh in self.shells]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        return res

    def wait_planned(self, sh, name, timeout=PLAN_WAIT):
        """Poll until the definition carries the mark; (xml, seconds) or
        (xml or None, None)."""
        t0 = time.monotonic()
        while True:
            x = sh.dump(name)
            if x is None or ti.NS in x:
                return x, (time.monotonic() - t0) if x else None
            if time.monotonic() - t0 > timeout:
                return x, None
            time.sleep(0.03)

    def self_planned(self, xml, tag):
        """The definition equals its own plan (pcinumactl plan changes
        nothing) and carries the mark."""
        if ti.NS not in xml:
            return False
        path = ti.write(os.path.join(self.work, "check-%s.xml" % tag), xml)
        r = subprocess.run([self.a.pcinumactl, "plan", "--sysfs-root", self.sysfs,
                            "--policy", "require", "--format", "json", path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        try:
            j = json.loads(r.stdout)
        except ValueError:
            return False
        return r.returncode == 0 and j.get("already_planned") and not j.get("changed")

    def conflicts_for(self, names):
        """Domain name -> list of PCINUMA_CONFLICT values logged for it."""
        out = {}
        for line in self.d.log(all_runs=True).splitlines():
            if MID_CONFLICT not in line:
                continue
            m = re.search(r"PCINUMA_DOMAIN=(\S+)", line)
            kind = re.search(r"PCINUMA_CONFLICT=(\S+)", line)
            if m and m.group(1) in names:
                out.setdefault(m.group(1), []).append(kind.group(1) if kind else "?")
        return out

    def final_check(self, names, want, tag):
        """After the watcher settled: each of names checked against
        want(name, xml) -> None (fine) or 'lost'/'resurrected'/...;
        returns {outcome: [names]}."""
        if not self.quiesce():
            self.check(False, "%s: the watcher settles" % tag,
                       json.dumps(self.wstatus()))
        sh = self.shells[0]
        bad = {}
        for n in names:
            x = sh.dump(n)
            what = want(n, x)
            if what is None and x is not None and not self.self_planned(x, n):
                what = "unplanned"
            if what:
                bad.setdefault(what, []).append(n)
        return bad

    def undefine_all(self, names):
        sh = self.shells[0]
        for n in names:
            sh.run("undefine " + n)

    # -- phases ------------------------------------------------------------
    def edit_trial(self, sh, job):
        name, delay, tag = job
        v1, v2 = vm_xml(name), None
        v2 = v1.replace("</uuid>\n", "</uuid>\n  <description>%s</description>\n"
                        % tag, 1)
        p1 = self.s.write(v1, name + ".v1.xml")
        p2 = self.s.write(v2, name + ".v2.xml")
        out = sh.run("define " + p1)
        if "defined" not in out:
            return {"error": out}
        time.sleep(delay)
        t = time.monotonic()
        out = sh.run("define " + p2)
        if "defined" not in out:
            return {"error": out}
        x, dt = self.wait_planned(sh, name)
        return {"v2_at": t, "planned_after": dt}

    def run_edits(self, prefix, delays, what):
        jobs = [("%s-%03d" % (prefix, i), d, "edit-%s-%03d" % (prefix, i))
                for i, d in enumerate(delays)]
        t0 = time.monotonic()
        res = self.pool(jobs, self.edit_trial)
        errors = [("%s: %s" % (j[0], r["error"])) for j, r in zip(jobs, res)
                  if r and "error" in r]
        self.check(not errors, "%s: every virsh define succeeded" % what,
                   "\n".join(errors[:5]))
        tags = {j[0]: j[2] for j in jobs}
        bad = self.final_check(
            list(tags), lambda n, x: "gone" if x is None else
            (None if tags[n] in x else "lost"), what)
        return jobs, bad, time.monotonic() - t0

    def t_edits(self):
        n = int(200 * self.a.scale)
        delays = [0.1 * i / max(1, n - 1) for i in range(n)]
        random.shuffle(delays)
        jobs, bad, dt = self.run_edits("ed", delays, "edits")
        conf = self.conflicts_for(set(j[0] for j in jobs))
        lost = len(bad.get("lost", []))
        unplanned = len(bad.get("unplanned", [])) + len(bad.get("gone", []))
        self.count("edit trials", n)
        self.count("lost edits", lost)
        self.count("unplanned", unplanned)
        self.count("conflicts (edits)", sum(len(v) for v in conf.values()))
        self.check(lost == 0, "edits: %d x define v1, define v2 0-100 ms later: "
                   "no edit lost" % n, "lost: %s" % ", ".join(bad.get("lost", [])[:20]),
                   note="%d lost, %.0f s" % (lost, dt))
        self.check(unplanned == 0, "edits: every domain ends planned (mark, "
                   "and its own plan)", json.dumps(bad)[:2000])
        self.undefine_all([j[0] for j in jobs])

    def undefine_trial(self, sh, job):
        name, delay = job
        p = self.s.write(vm_xml(name), name + ".xml")
        out = sh.run("define " + p)
        if "defined" not in out:
            return {"error": out}
        time.sleep(delay)
        out = sh.run("undefine " + name)
        if "undefined" not in out:
            return {"error": out}
        # let the watcher have its go at this one before the next trial
        time.sleep(self.settle_ms / 1000.0 + 0.1)
        return {}

    def t_undefines(self):
        n = int(100 * self.a.scale)
        near = [0.015 * i / max(1, n // 2 - 1) for i in range(n // 2)]
        wide = [0.015 + 0.585 * i / max(1, n - n // 2 - 1) for i in range(n - n // 2)]
        delays = near + wide
        random.shuffle(delays)
        jobs = [("ud-%03d" % i, d) for i, d in enumerate(delays)]
        t0 = time.monotonic()
        res = self.pool(jobs, self.undefine_trial)
        errors = [("%s: %s" % (j[0], r["error"])) for j, r in zip(jobs, res)
                  if r and "error" in r]
        self.check(not errors, "undefines: every define and undefine succeeded",
                   "\n".join(errors[:5]))
        bad = self.final_check([j[0] for j in jobs],
                               lambda n, x: "resurrected" if x is not None else None,
                               "undefines")
        back = bad.get("resurrected", [])
        conf = self.conflicts_for(set(j[0] for j in jobs))
        undone = sum(1 for v in conf.values() for k in v if k.startswith("recreated"))
        self.count("undefine trials", n)
        self.count("resurrected", len(back))
        self.count("resurrections undone", undone)
        self.check(not back, "undefines: %d x define, undefine 0-600 ms later: "
                   "no domain comes back" % n, "back: %s" % ", ".join(back),
                   note="%d back; %d re-created by a define and undone; %.0f s"
                   % (len(back), undone, time.monotonic() - t0))
        self.undefine_all(back)

    def attach_trial(self, sh, job):
        name = job
        p = self.s.write(vm_xml(name, [b for b in DEVICES if b != ATTACH_BDF]),
                         name + ".xml")
        hd = self.s.write(ATTACH_XML, name + ".hostdev.xml")
        out = sh.run("define " + p, "attach-device %s %s --config" % (name, hd))
        if out.count("successfully") != 1 or "defined" not in out:
            return {"error": out}
        self.wait_planned(sh, name)
        return {}

    def t_attach(self):
        n = max(2, int(20 * self.a.scale))
        names = ["at-%03d" % i for i in range(n)]
        res = self.pool(names, self.attach_trial)
        errors = ["%s: %s" % (nm, r["error"]) for nm, r in zip(names, res)
                  if r and "error" in r]
        self.check(not errors, "attach-device: every define and attach succeeded",
                   "\n".join(errors[:5]))
        bad = self.final_check(names, lambda nm, x: "gone" if x is None else
                               (None if "bus='0x78'" in x else "lost"), "attach")
        self.count("attach trials", n)
        self.count("lost edits", len(bad.get("lost", [])))
        self.count("unplanned", len(bad.get("unplanned", [])) + len(bad.get("gone", [])))
        self.check(not bad, "attach-device --config right after define: the "
                   "device stays, the domain ends planned (%d trials)" % n,
                   json.dumps(bad))
        self.undefine_all(names)

    def t_probes(self):
        """v2 aimed at the watcher: it acts settle-ms after v1's event."""
        n = int(60 * self.a.scale)
        s = self.settle_ms / 1000.0
        delays = [max(0.0, s - 0.05) + 0.2 * i / max(1, n - 1) for i in range(n)]
        random.shuffle(delays)
        jobs, bad, dt = self.run_edits("pr", delays, "probes")
        conf = self.conflicts_for(set(j[0] for j in jobs))
        lost = set(bad.get("lost", []))
        undetected = sorted(n_ for n_ in lost if n_ not in conf)
        flagged_kept = sorted(n_ for n_ in conf if n_ not in lost)
        self.count("probe trials", n)
        self.count("probe edits lost (reported as conflicts)", len(lost) - len(undetected))
        self.count("probe edits lost unreported", len(undetected))
        self.count("probe conflicts reported, edit kept", len(flagged_kept))
        self.count("unplanned", len(bad.get("unplanned", [])) + len(bad.get("gone", [])))
        self.check(not undetected, "probes: %d edits aimed at the watcher's "
                   "redefinition: every lost one is reported as a conflict" % n,
                   "lost without a conflict: %s" % ", ".join(undetected),
                   note="%d lost and reported, %d reported but kept" %
                   (len(lost) - len(undetected), len(flagged_kept)))
        self.check(not bad.get("unplanned") and not bad.get("gone"),
                   "probes: every domain ends planned", json.dumps(bad)[:2000])
        self.undefine_all([j[0] for j in jobs])

    def define_start(self, sh, name, path, separate):
        """define + start at once; then start again until the hook lets it
        through.  (first verdict, seconds from the define to the first
        passing start, starts refused before it)."""
        t0 = time.monotonic()
        if separate:
            r = self.s.run_as(["/bin/sh", "-c", "virsh -c qemu:///session define %s "
                               "&& virsh -c qemu:///session start %s" % (path, name)],
                              timeout=VIRSH_TIMEOUT)
            v = ti.classify(r.returncode, (r.stdout + r.stderr).strip())
        else:
            out = sh.run("define " + path, "start " + name)
            v = ti.classify(1 if "error:" in out else 0, out)
            r = out
        first = v
        refused = 0
        while v == "refused" and time.monotonic() - t0 < PLAN_WAIT:
            refused += 1
            out = sh.run("start " + name)
            v = ti.classify(1 if "error:" in out else 0, out)
        return first, (time.monotonic() - t0) if v == "passed" else None, refused, r

    def t_define_start(self):
        n = max(1, int(10 * self.a.scale))
        sh = self.shells[0]
        rows = []
        for separate in (False, True):
            for i in range(n):
                name = "ds-%d-%02d" % (separate, i)
                path = self.s.write(vm_xml(name), name + ".xml")
                first, dt, refused, raw = self.define_start(sh, name, path, separate)
                text = raw if isinstance(raw, str) else raw.stdout + raw.stderr
                rows.append((separate, first, dt, refused, text))
                sh.run("undefine " + name)
        odd = [r for r in rows if r[1] != "passed"]
        self.check(not odd, "define && start under require (first_start: restart): the first "
                   "start passes the gate (to be restarted into the plan), never refused",
                   "\n".join(r[4][-600:] for r in odd[:2]))
        never = [r for r in rows if r[2] is None]
        self.check(not never, "define && start: a later start passes the hook",
                   "%d never passed" % len(never))
        for sep in (False, True):
            rs = [r for r in rows if r[0] == sep]
            times = sorted(r[2] for r in rs if r[2] is not None)
            self.diag("FIGURE define-and-start (%s): first start refused %d of %d, "
                      "passed %d; a start passed %.0f ms (median) / %.0f ms (max) "
                      "after the define, after %s refused starts"
                      % ("virsh define && virsh start" if sep else "one virsh: define; start",
                         sum(1 for r in rs if r[1] == "refused"), len(rs),
                         sum(1 for r in rs if r[1] == "passed"),
                         1000 * times[len(times) // 2] if times else -1,
                         1000 * times[-1] if times else -1,
                         "/".join(str(r[3]) for r in rs)))
        # legacy: allowed at once too, to be restarted into the plan
        name = "legacy-ds"
        path = self.s.write(vm_xml(name), name + ".xml")
        out = sh.run("define " + path, "start " + name)
        v = ti.classify(1 if "error:" in out else 0, out)
        restarting = self.wait_until(lambda: any(
            "PCINUMA_VERDICT=restart" in l and "PCINUMA_DOMAIN=%s" % name in l
            for l in self.d.log().splitlines()), timeout=5)
        self.check(v == "passed" and restarting, "define && start under legacy: the "
                   "first start is allowed, to be restarted into the plan", out[-800:])
        self.wait_planned(sh, name)
        sh.run("undefine " + name)

    def preimages(self, uuid):
        d = self.state_dir + "/preimages"
        fs = sorted(f for f in os.listdir(d) if "_%s_" % uuid in f) if os.path.isdir(d) else []
        return [os.path.join(d, f) for f in fs]

    def window_figure(self):
        st = self.wstatus()
        if st.get("windows"):
            self.diag("FIGURE window (re-read sent .. define returned): %d "
                      "redefinitions, mean %.1f ms, max %.1f ms; %d conflicts, "
                      "%d re-created domains undefined again"
                      % (st["windows"], st["window_us_sum"] / 1000.0 / st["windows"],
                         st["window_us_max"] / 1000.0, st.get("conflicts", 0),
                         st.get("undone", 0)))
        self.diag("watcher status: %s" % json.dumps(st))

    def t_preimage(self):
        if "--state-dir" not in self.d.extra:
            self.check(False, "pre-images: pcinumad has --state-dir")
            return
        sh = self.shells[0]
        name = "pre-1"
        xml = vm_xml(name)
        uid = re.search(r"<uuid>([^<]+)</uuid>", xml).group(1)
        # the definition before any redefinition, as libvirt holds it
        self.d.stop()
        sh.run("define " + self.s.write(xml, name + ".xml"))
        before = sh.dump(name)
        self.d.start(self.s.uri, wait_connected=True)
        got, dt = self.wait_planned(sh, name)
        files = self.preimages(uid)
        self.check(dt is not None and files, "pre-images: a redefinition leaves one",
                   "files: %s" % files)
        if not files:
            return
        f = files[-1]
        st = os.stat(f)
        self.check(ti.read(f) == before, "pre-images: the file is byte for byte the "
                   "definition it replaced", note=os.path.basename(f))
        self.check(stat.S_IMODE(st.st_mode) == 0o600 and
                   os.path.basename(f).startswith("%s_%s_" % (name, uid)),
                   "pre-images: mode 0600, named NAME_UUID_TIME.xml",
                   "%o %s" % (stat.S_IMODE(st.st_mode), f))
        # restore it (with pcinumad stopped, so nothing replans meanwhile)
        self.d.stop()
        copy = self.s.write(ti.read(f), "restore.xml")
        out = sh.run("define " + copy)
        # libvirt itself reorders <devices> children on a second define
        ok, how, dg = self.same(sh.dump(name) or "", before, "restore")
        self.check("defined" in out and ok,
                   "pre-images: 'virsh define FILE' restores the definition",
                   (out + (dg or "")), note=how)
        self.d.start(self.s.uri, wait_connected=True)
        self.wait_planned(sh, name)
        for _ in range(6):
            sh.run("define " + self.s.write(xml, name + ".xml"))
            self.wait_planned(sh, name)
        self.quiesce()
        files = self.preimages(uid)
        self.check(len(files) == 5 and ti.read(files[-1]) == before,
                   "pre-images: 8 redefinitions keep the newest 5",
                   "%d files" % len(files))
        sh.run("undefine " + name)

    # -- the run -------------------------------------------------------------
    def start_daemon(self):
        helptext = subprocess.run([self.a.pcinumad, "--help"], stdout=subprocess.PIPE,
                                  text=True).stdout
        self.state_dir = os.path.join(self.tmp, "state")
        if "--state-dir" in helptext:
            self.d.extra = ["--state-dir", self.state_dir]
        else:
            self.d.extra = []
            self.diag("this pcinumad has no --state-dir (an old build)")
        self.d.start(self.s.uri, wait_connected=True)
        st = self.wstatus()
        self.settle_ms = st.get("settle_ms", 0)
        self.diag("watcher: settle %s ms; status keys: %s"
                  % (st.get("settle_ms"), ", ".join(sorted(st))))

    def run(self):
        self.start_daemon()
        self.shells = [Shell(self.s) for _ in range(WORKERS)]
        # the pre-image phase restarts pcinumad: the figures come before it
        steps = [self.t_edits, self.t_undefines, self.t_attach, self.t_probes,
                 self.window_figure, self.t_define_start, self.window_figure,
                 self.t_preimage]
        self.run_steps(steps, self.ensure_daemon)
        self.diag("COUNTS " + ", ".join("%s: %d" % kv for kv in self.counts.items()))
        for sh in self.shells:
            sh.close()
        self.check_clean()

    def check_clean(self):
        """The watcher never died, and neither it nor pcinumad reported a
        memory error or a leak (the sanitizer pass of scripts/test.sh runs
        this suite; the watcher's stderr goes to pcinumad's log)."""
        restarts = ((self.wstatus().get("process") or {}).get("restarts"))
        rc = self.d.stop()
        log = self.d.log(all_runs=True)
        bad = [l for l in log.splitlines()
               if "Sanitizer" in l or "runtime error:" in l or
               "The libvirt watcher (pcinuma-watcher" in l]
        self.check(restarts == 0 and rc == 0 and not bad,
                   "pcinumad and its watcher end cleanly: no restart, no "
                   "sanitizer report", "restarts %s, exit %s\n%s"
                   % (restarts, rc, "\n".join(bad[:20])))


def options(ap):
    ap.add_argument("--source", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", action="append", default=[],
                    help="run only the phases whose name contains this (repeatable)")


def main():
    a = session_args(__doc__, options, paths=("source",))
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    random.seed(seed)
    tap = Tap(a.verbose)
    tap.diag("seed %d (--seed to repeat the order of the delays)" % seed)
    return run_session_suite(a, RaceTest, tap=tap)


if __name__ == "__main__":
    sys.exit(main())

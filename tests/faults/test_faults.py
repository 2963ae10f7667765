#!/usr/bin/env python3
"""Faults (issue 8): pcinumad killed, its policy broken, libvirtd killed.

    test_faults.py --pcinumad P --pcinumactl P --hook P --mkfakesysfs P
                   --hosts DIR --golden DIR --workdir DIR [--only S]

(a) Socket activation without systemd: a supervisor thread owns the
    listening socket, as pcinumad.socket does, and starts pcinumad with
    LISTEN_FDS=1/LISTEN_PID (fd 3) whenever the socket is readable and no
    daemon runs, as systemd does for a socket-activated service.  The
    daemon is SIGKILLed while it holds a request (a client's half-sent
    frame: that is the killed request, and its client sees EOF) and while
    it is frozen (SIGSTOP) with hook calls queued:
    - hooks with a short timeout give up within it and apply
      on_unreachable (allow: exit 0; refuse: exit 1), saying so;
    - hooks with a long timeout, queued in the socket's backlog, are all
      served by the new daemon (a new pid in status): nothing is lost
      beyond the killed request;
    - the new daemon survives the connections of hooks that gave up.
(b) The policy file replaced by a broken one, then SIGHUP: the last good
    policy stays (status last_error names the file; the verdicts and the
    policy of the decisions do not change).
(c) libvirtd SIGKILLed and restarted (a private session libvirtd, through
    tests/libvirt's helpers): the watcher notices, reconnects within 5 s
    of libvirtd answering again, and plans a domain defined before it
    reconnected; definitions made before the kill are untouched.
    (Restart by SIGTERM, and a redefinition libvirt rejects, are in
    tests/libvirt/test_integration.py, steps 8b and 8d.)
(d) The libvirt watcher process (pcinuma-watcher, pcinumad's child) is
    SIGKILLed: pcinumad logs it, keeps answering hooks, restarts it (a new
    pid, restarts 1 in status), the new one reconnects and plans a domain
    defined meanwhile.  pcinumad itself maps no libvirt library.  When
    pcinumad is SIGKILLed its watcher goes too (no orphan).  A missing
    watcher program stops pcinumad at start with an error naming the path.
(e) A watcher program that sends pcinumad garbage (a frame header of
    4 GiB): pcinumad says so, kills it, restarts it with backoff, keeps
    answering, and stops cleanly, leaving no watcher behind.
(f)-(h) tests/lib/pcinumatest/fake_watcher.py as the watcher: one that never reads
    its plan answer (PCINUMA_WATCHER_TIMEOUT_MS=1000), one that floods plan
    requests without reading (frames of 64 KiB), each killed, logged and
    restarted while pcinumad keeps answering; and an answer over the frame
    limit (2 KiB) replaced by an error answer, the link kept.

Output: "ok N - ..." / "not ok N - ..." with "#" diagnostics, then
"N passed, M failed".  Exit 1 on any failure; 77 only when a binary or
libvirtd/virsh is missing."""

import argparse
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from pcinumatest import FAKE_WATCHER
from pcinumatest.fake_watcher import read_events
from pcinumatest import daemon as td
from pcinumatest.daemon import Failure, check, eq, contains


SKIP = 77
ARGS = None
RECONNECT_DEADLINE = 5.0


R = td.Results(reap=False)


# ---- (a) a socket-activation supervisor --------------------------------------------

class Supervisor:
    """Owns the listening socket; (re)starts pcinumad on demand with the
    socket as fd 3, LISTEN_FDS=1 and LISTEN_PID=<its pid>, like systemd's
    socket activation (Restart= aside: a dead daemon is restarted only
    when a client knocks)."""

    def __init__(self, d):
        self.d = d                       # a td.Daemon for argv, logs, status
        self.path = os.path.join(d.dir, "activated.sock")
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(self.path)
        os.chmod(self.path, 0o600)
        self.ls.listen(128)
        # the daemon's own --socket must stay unused
        d.sock = os.path.join(d.dir, "run", "unused.sock")
        os.makedirs(os.path.dirname(d.sock), exist_ok=True)
        self.procs = []                  # every SpawnedProc started
        self.lock = threading.Lock()
        self.stop_flag = False
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def current(self):
        with self.lock:
            p = self.procs[-1] if self.procs else None
        return p if p is not None and p.poll() is None else None

    def _loop(self):
        while not self.stop_flag:
            try:
                r, _, _ = select.select([self.ls], [], [], 0.02)
            except (OSError, ValueError):
                return
            if not r or self.current() is not None:
                if r:
                    time.sleep(0.01)     # the daemon will accept
                continue
            mark = self.d.mark()
            with self.lock:
                pid = td.spawn_activated(self.d.argv(), self.ls.fileno(), self.d.log_path)
                p = td.SpawnedProc(pid)
                self.procs.append(p)
            # let it take over before looking at the socket again
            deadline = time.monotonic() + td.T(10)
            while time.monotonic() < deadline and p.poll() is None:
                if any(e.mid == td.MID["DAEMON_READY"] for e in self.d.events(mark)):
                    break
                time.sleep(0.01)

    def pids(self):
        with self.lock:
            return [p.pid for p in self.procs]

    def close(self):
        self.stop_flag = True
        self.t.join(2)
        self.ls.close()
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                    p.wait(td.T(10))
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(5)


def hook(xml, sock, **kw):
    return td.run_hook("gpu-vm-1", "prepare", "begin", xml, sock, **kw)


class A:
    sup = None
    d = None


def t_activation_on_demand():
    """No daemon runs until the first hook call; the supervisor starts it
    and the call is served."""
    sup = A.sup
    eq(sup.pids(), [], "daemons before any client")
    r = hook(td.planned("gpu-vm-1", "require"), sup.path)
    eq((r.rc, r.err), (0, ""), "the first hook call, served by an activated daemon: %r" % r)
    eq(len(sup.pids()), 1, "daemons started")
    st = td.status_of(sup.path)
    eq(st["pid"], sup.pids()[0], "status pid")
    contains(A.d.log_text(), "Listening on the socket passed by systemd", "daemon log")


def t_kill_during_request():
    sup, d = A.sup, A.d
    good = td.planned("gpu-vm-1", "require")
    bad = td.XML["gpu-vm-1"]
    old = sup.current()
    check(old is not None, "no daemon runs")
    st0 = td.status_of(sup.path)
    # 1. the killed request: a client that sent half its frame
    frame = td.encode({"version": 1, "type": "hook", "argv": ["gpu-vm-1", "prepare", "begin", "-"], "xml": bad})
    victim = td.connect(sup.path, td.T(10))
    victim.sendall(frame[:len(frame) // 2])
    deadline = time.monotonic() + td.T(5)
    while td.status_of(sup.path)["requests"]["connections"] < 2:     # the victim and this status
        check(time.monotonic() < deadline, "the daemon never took the victim's connection")
        time.sleep(0.02)
    # 2. freeze the daemon; queue hooks: two that give up fast (allow,
    # refuse) and five patient ones (alternating good and bad XML)
    os.kill(old.pid, signal.SIGSTOP)
    results = {}

    def run(key, xml, **kw):
        results[key] = hook(xml, sup.path, **kw)

    specs = [("fast-allow", bad, dict(on_unreachable="allow", timeout_ms=800)),
             ("fast-refuse", good, dict(on_unreachable="refuse", timeout_ms=800))]
    for i in range(5):
        specs.append(("patient-%d" % i, good if i % 2 == 0 else bad,
                      dict(on_unreachable="refuse", timeout_ms=int(td.T(15000)))))
    # td.hook_conf() names its files by a counter: write them here, not
    # from the threads, where two could pick the same name
    for _, _, kw in specs:
        td.hook_conf(sup.path, kw["on_unreachable"], kw["timeout_ms"])
    threads = [threading.Thread(target=run, args=(key, xml), kwargs=kw) for key, xml, kw in specs]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads[:2]:
        t.join(td.T(10))
    # 3. SIGKILL the frozen daemon
    t_kill = time.monotonic()
    os.kill(old.pid, signal.SIGKILL)
    old.wait(td.T(5))
    for t in threads[2:]:
        t.join(td.T(30))
    served_after = time.monotonic() - t_kill
    # the victim lost its request: EOF, no answer
    victim.settimeout(td.T(5))
    try:
        got = victim.recv(100)
    except (ConnectionResetError, socket.timeout):
        got = b""
    victim.close()
    eq(got, b"", "what the killed request's client got")

    fa, fr = results.get("fast-allow"), results.get("fast-refuse")
    check(fa is not None and fr is not None, "the fast hooks did not finish: %r" % results)
    eq(fa.rc, 0, "frozen daemon, on_unreachable=allow: %r" % fa)
    contains(fa.err, "no answer from the daemon within 800 ms", "allow: stderr")
    contains(fa.err, "on_unreachable=allow", "allow: stderr")
    eq(fr.rc, 1, "frozen daemon, on_unreachable=refuse: %r" % fr)
    contains(fr.err, "on_unreachable=refuse", "refuse: stderr")
    for r in (fa, fr):
        check(0.6 < r.elapsed < td.T(3), "a fast hook gave up after %.2f s (timeout_ms 800)" % r.elapsed)
    print("# fast hooks gave up after %.2f s / %.2f s; kill -> patient hooks served in %.2f s"
          % (fa.elapsed, fr.elapsed, served_after))
    # every patient hook was served by the new daemon: real verdicts
    bad_ones = []
    for i in range(5):
        r = results.get("patient-%d" % i)
        want = 0 if i % 2 == 0 else 1
        if r is None or r.rc != want or "check skipped" in r.err or \
                (want == 1 and "does not match the NUMA plan" not in r.err):
            bad_ones.append("patient-%d: %r" % (i, r))
    check(not bad_ones, "hooks queued while the daemon was killed were lost or misjudged:\n%s"
          % "\n".join(bad_ones))
    new = sup.current()
    check(new is not None and new.pid != old.pid, "no new daemon (pids %r)" % sup.pids())
    st = td.status_of(sup.path)
    eq(st["pid"], new.pid, "status pid of the new daemon")
    check(st["pid"] != st0["pid"], "status pid did not change")
    # the new daemon served the five patient hooks, and also read the two
    # requests the fast hooks left in the backlog before giving up (their
    # answers go to closed sockets: it must survive that)
    rq = st["requests"]
    check(rq["hook"] in (5, 7), "hook requests served by the new daemon: %r" % rq)
    eq(st["verdicts"]["allow"] + st["verdicts"]["refuse"], rq["hook"], "verdicts of the new daemon")
    print("# the new daemon (pid %d) served %d hook requests: %r" % (new.pid, rq["hook"], st["verdicts"]))
    r = hook(good, sup.path)
    eq((r.rc, r.err), (0, ""), "a hook call after the kill: %r" % r)
    eq(td.status_of(sup.path)["pid"], new.pid, "still the new daemon")


def t_kill_idle_then_call():
    """SIGKILL with nothing in flight: the next hook call starts a new
    daemon and is served (no request lost at all)."""
    sup = A.sup
    old = sup.current()
    check(old is not None, "no daemon runs")
    os.kill(old.pid, signal.SIGKILL)
    old.wait(td.T(5))
    r = hook(td.XML["gpu-vm-1"], sup.path, on_unreachable="allow")
    eq(r.rc, 1, "hook call after the kill: %r" % r)
    contains(r.err, "does not match the NUMA plan", "served by a new daemon")
    st = td.status_of(sup.path)
    check(st["pid"] not in (old.pid,), "status pid %r is the killed one" % st["pid"])
    eq(st["requests"]["hook"], 1, "hook requests of the new daemon")


# ---- (b) broken policy + SIGHUP -----------------------------------------------------

def t_broken_policy_reload():
    sup, d = A.sup, A.d
    cur = sup.current()
    check(cur is not None, "no daemon runs")
    st0 = td.status_of(sup.path)
    pol0 = st0["policy"]
    eq(pol0["default"], "require", "policy before")
    m = d.mark()
    r0 = hook(td.XML["gpu-vm-1"], sup.path)
    dec0 = d.decisions(m)[-1]
    for label, text, want in (("syntax", '{"default": {"policy": "require"', "JSON syntax error"),
                              ("bad value", '{"default": {"policy": "preferred-ish"}}', "unknown policy"),
                              ("truncated to nothing", "", "empty file")):
        td.write_policy(d.policy_file, text)
        m = d.mark()
        os.kill(cur.pid, signal.SIGHUP)
        d.wait_event(lambda e: e.mid == td.MID["POLICY_INVALID"], m, what="POLICY_INVALID after SIGHUP")
        d.wait_event(lambda e: e.mid == td.MID["HOSTMAP_REBUILT"], m, what="the reload's rescan")
        st = td.status_of(sup.path)
        pol = st["policy"]
        contains(pol["last_error"] or "", d.policy_file, "%s: last_error names the file" % label)
        contains(pol["last_error"] or "", want, "%s: last_error" % label)
        eq((pol["default"], pol["loaded_at_usec"], pol["rules"]),
           (pol0["default"], pol0["loaded_at_usec"], pol0["rules"]), "%s: the policy in force" % label)
        m = d.mark()
        r = hook(td.XML["gpu-vm-1"], sup.path)
        dec = d.decisions(m)[-1]
        eq((r.rc, r.err), (r0.rc, r0.err), "%s: the hook's verdict" % label)
        eq((dec.get("PCINUMA_POLICY"), dec.get("PCINUMA_VERDICT")),
           (dec0.get("PCINUMA_POLICY"), dec0.get("PCINUMA_VERDICT")), "%s: the decision" % label)
        eq(st["pid"], cur.pid, "%s: the same daemon" % label)
    td.write_policy(d.policy_file, "require")
    os.kill(cur.pid, signal.SIGHUP)
    deadline = time.monotonic() + td.T(5)
    while td.status_of(sup.path)["policy"]["last_error"] is not None:
        check(time.monotonic() < deadline, "last_error not cleared by a good reload")
        time.sleep(0.05)


# ---- (c) libvirtd SIGKILLed --------------------------------------------------------------

class LvEnv:
    """A private session libvirtd and a pcinumad (policy require, sample-4n)
    watching it, for (c) and (d); close() stops both and removes the
    temporary directory."""

    def __init__(self, tag, host_uuid):
        from pcinumatest import lvenv as ti
        self.work = os.path.join(td.WORK, tag)
        os.makedirs(self.work, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="pcinuma-f%s-" % tag[0], dir="/tmp")
        os.chmod(self.tmp, 0o755)
        self.sysfs = os.path.join(self.tmp, "sys")
        td.mkfakesysfs(os.path.join(ARGS.hosts, "sample-4n.json"), self.sysfs)
        self.policy = os.path.join(self.tmp, "policy.json")
        td.write_policy(self.policy, "require")
        self.s = ti.LvSession(host_uuid=host_uuid)
        self.daemon = None
        try:
            self.daemon = ti.Daemon(ARGS, self.tmp, self.sysfs, self.policy, self.s.uid, self.work)
            self.daemon.start(self.s.uri, wait_connected=False)
            check(self.daemon.wait_connected(td.T(RECONNECT_DEADLINE)), "the watcher connects to the session libvirtd")
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.daemon is not None and self.daemon.alive():
            self.daemon.stop()
        try:
            self.s.stop()
        except Exception as e:   # noqa: BLE001
            print("# stopping libvirtd: %s" % e)
        shutil.rmtree(self.tmp, ignore_errors=True)


def t_libvirtd_sigkill():
    from pcinumatest import lvenv as ti
    env = LvEnv("libvirt", "7a3a4b1e-0c55-4f43-9d1c-5e0a6b1f2c3d")
    s, daemon, work = env.s, env.daemon, env.work
    try:
        ti.Harness.wait_planned  # noqa: B018  (the helper used below, by hand)
        s.define(ti.domain_xml("fk-before", ["0000:13:00.0", "0000:33:00.0"], memnodes={0: "0", 1: "1"}))

        def planned(name, timeout):
            t0 = time.monotonic()
            while True:
                x = s.dumpxml(name, inactive=True)
                if ti.is_planned(x):
                    return x
                if time.monotonic() - t0 > timeout:
                    return None
                time.sleep(0.05)

        before = planned("fk-before", td.T(ti.PLAN_DEADLINE))
        check(before is not None, "fk-before is planned before the kill:\n%s" % daemon.log()[-1500:])
        # SIGKILL libvirtd: no goodbye on the connection
        pid = s.proc.pid
        os.killpg(pid, signal.SIGKILL)
        s.proc.wait(10)
        s.proc = None
        t0 = time.monotonic()
        while (daemon.status() or {}).get("libvirt", {}).get("connected", True):
            check(time.monotonic() - t0 < td.T(15), "status still says connected %.0f s after the kill" % td.T(15))
            time.sleep(0.05)
        print("# the watcher noticed the kill after %.2f s" % (time.monotonic() - t0))
        check(daemon.alive(), "pcinumad died with libvirtd")
        time.sleep(1.0)
        s.restart()
        t_up = time.monotonic()
        s.define(ti.domain_xml("fk-during", ["0000:17:00.0", "0000:37:00.0"], memnodes={0: "0", 1: "1"}))
        ok = daemon.wait_connected(td.T(RECONNECT_DEADLINE))
        dt = time.monotonic() - t_up
        check(ok, "the watcher did not reconnect within %.0f s of libvirtd's restart:\n%s"
              % (RECONNECT_DEADLINE, daemon.status(text=True)))
        print("# reconnected %.2f s after libvirtd answered again" % dt)
        x = planned("fk-during", td.T(ti.PLAN_DEADLINE + RECONNECT_DEADLINE))
        check(x is not None, "fk-during (defined before the watcher reconnected) was not planned:\n%s"
              % daemon.log()[-2000:])
        probs = ti.layout_problems(x)
        check(not probs, "fk-during's layout: %s" % probs)
        after = s.dumpxml("fk-before", inactive=True)
        ok, how, dg = ti.compare(after, before, work, "fk-before", "after", "before")
        check(ok, "fk-before changed across the libvirtd kill: %s\n%s" % (how, dg))
        rc = daemon.stop()
        eq(rc, 0, "pcinumad exit status after SIGTERM")
    finally:
        env.close()


# ---- (d) the watcher process killed -------------------------------------------------------

def proc_ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def maps_libvirt(pid):
    with open("/proc/%d/maps" % pid) as f:
        return sorted({l.split()[-1] for l in f if "libvirt" in l and ".so" in l})


def t_watcher_sigkill():
    from pcinumatest import lvenv as ti
    env = LvEnv("watcher", "7a3a4b1e-0c55-4f43-9d1c-5e0a6b1f2c3e")
    s, daemon, tmp, sysfs, policy = env.s, env.daemon, env.tmp, env.sysfs, env.policy
    try:
        proc = daemon.status()["libvirt"]["process"]
        wpid = proc["pid"]
        eq(proc_ppid(wpid), daemon.proc.pid, "the watcher's parent")
        eq(maps_libvirt(daemon.proc.pid), [], "libvirt libraries mapped in pcinumad")
        check(maps_libvirt(wpid), "the watcher maps no libvirt library")
        print("# watcher pid %d (%s), child of pcinumad %d; pcinumad maps no libvirt library"
              % (wpid, proc["program"], daemon.proc.pid))

        os.kill(wpid, signal.SIGKILL)
        t0 = time.monotonic()
        # the hook path does not depend on the watcher
        r = td.run_hook("gpu-vm-1", "prepare", "begin", td.XML["gpu-vm-1"], daemon.socket)
        # gpu-vm-1 as written is not planned: require refuses it, and the
        # refusal comes from the daemon (not from on_unreachable)
        check(r.rc == 1 and "refusing to start domain gpu-vm-1" in r.err and "unreachable" not in r.err,
              "a hook call while the watcher is down: %r" % (r,))
        st = {}
        while time.monotonic() - t0 < td.T(10):
            st = (daemon.status() or {}).get("libvirt") or {}
            p = st.get("process") or {}
            if p.get("pid") not in (None, wpid) and st.get("connected"):
                break
            time.sleep(0.05)
        p = st.get("process") or {}
        check(p.get("pid") not in (None, wpid) and st.get("connected"),
              "no new connected watcher within %.0f s: %s\n%s" % (td.T(10), st, daemon.log()[-1500:]))
        print("# a new watcher (pid %d) connected %.2f s after the kill" % (p["pid"], time.monotonic() - t0))
        eq(p.get("restarts"), 1, "restarts in status")
        contains(p.get("last_exit") or "", "killed by signal 9", "last_exit in status")
        contains(daemon.log(), "The libvirt watcher (pcinuma-watcher, pid %d) was killed by signal 9" % wpid,
                 "pcinumad's log")
        text = daemon.status(text=True) or ""
        contains(text, "watcher process %d (" % p["pid"], "pcinumactl status")
        contains(text, "1 restart; the last one was killed by signal 9", "pcinumactl status")
        s.define(ti.domain_xml("fw-after", ["0000:13:00.0", "0000:33:00.0"], memnodes={0: "0", 1: "1"}))
        t1 = time.monotonic()
        x = None
        while time.monotonic() - t1 < td.T(ti.PLAN_DEADLINE):
            x = s.dumpxml("fw-after", inactive=True)
            if ti.is_planned(x):
                break
            time.sleep(0.05)
        check(x is not None and ti.is_planned(x), "fw-after, defined after the restart, was not planned:\n%s"
              % daemon.log()[-1500:])

        # pcinumad SIGKILLed: its watcher must not outlive it
        wpid2 = p["pid"]
        daemon.proc.kill()
        daemon.proc.wait(10)
        t2 = time.monotonic()
        while os.path.exists("/proc/%d" % wpid2) and proc_ppid(wpid2) not in (None, 0) \
                and time.monotonic() - t2 < td.T(5):
            time.sleep(0.02)
        gone = not os.path.exists("/proc/%d" % wpid2)
        if not gone:
            with open("/proc/%d/stat" % wpid2) as f:
                gone = f.read().rsplit(")", 1)[1].split()[0] == "Z"   # a zombie of init's
        check(gone, "the watcher (pid %d) outlived pcinumad by %.0f s" % (wpid2, td.T(5)))
        print("# the watcher went %.2f s after pcinumad was SIGKILLed" % (time.monotonic() - t2))
        daemon.proc = None

        # a missing watcher program: pcinumad refuses to start, naming it
        missing = os.path.join(tmp, "no-such-watcher")
        r = subprocess.run([ARGS.pcinumad, "--sysfs-root", sysfs, "--socket", os.path.join(tmp, "x.sock"),
                            "--policy-file", policy, "--libvirt-uri", s.uri, "--log-target", "stderr",
                            "--watcher-program", missing],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        check(r.returncode != 0, "pcinumad started without its watcher program")
        contains(r.stderr, missing, "pcinumad's error")
        print("# %s" % r.stderr.strip().splitlines()[-1])
    finally:
        env.close()


# ---- (e) a watcher that sends garbage -------------------------------------------------------

def watcher_restarted(d):
    """Wait for pcinumad's line that it restarts the killed watcher and for
    the restart in its status (checked); return the status's "libvirt"."""
    d.wait_event(lambda e: "was killed by signal 9 (Killed); restarting it in" in e.message, timeout=10,
                 what="the restart line")
    t0 = time.monotonic()
    st = {}
    while time.monotonic() - t0 < td.T(10):
        st = (d.status() or {}).get("libvirt") or {}
        if (st.get("process") or {}).get("restarts", 0) >= 1:
            break
        time.sleep(0.05)
    check((st.get("process") or {}).get("restarts", 0) >= 1, "status shows no restart: %s" % st)
    return st


def t_watcher_garbage():
    d = None
    tmp = tempfile.mkdtemp(prefix="pcinuma-fg-", dir="/tmp")
    fake = os.path.join(tmp, "garbage-watcher")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\n# sends a frame header of 4 GiB, then waits\n"
                "printf '\\377\\377\\377\\377garbage' >&3\nexec sleep 300\n")
    os.chmod(fake, 0o755)
    try:
        d = td.Daemon("watcher-garbage", policy="require",
                      extra=["--libvirt-uri", "test:///default", "--watcher-program", fake]).start()
        d.wait_event(lambda e: "sent a bad message" in e.message, timeout=10,
                     what="'sent a bad message' in pcinumad's log")
        st = watcher_restarted(d)
        eq(st.get("connected"), False, "libvirt.connected in status")
        contains(d.log_text(), "frame", "the bad-message line names the problem")
        line = [l for l in d.log_text().splitlines() if "sent a bad message" in l][0]
        print("# %s" % line[:240])
        r = td.run_hook("gpu-vm-1", "prepare", "begin", td.XML["gpu-vm-1"], d.sock)
        check(r.rc == 1 and "refusing to start domain gpu-vm-1" in r.err, "a hook call meanwhile: %r" % (r,))
        rc = d.stop()
        td.check_clean_exit(d, rc)
        time.sleep(0.2)
        left = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as f:
                        if fake.encode() in f.read():
                            left.append(pid)
                except OSError:
                    pass
        eq(left, [], "processes of the fake watcher left after pcinumad stopped")
    finally:
        if d is not None and d.poll() is None:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- (f)-(h) a watcher that stops reading, floods, or gets an oversized answer ------------



def fake_watcher_daemon(tag, mode, env):
    """pcinumad (policy require) with tests/lib/pcinumatest/fake_watcher.py in the
    given mode as its watcher, gpu-vm-1 its one persistent definition."""
    fw = tempfile.mkdtemp(prefix="pcinuma-fw-", dir="/tmp")
    os.makedirs(os.path.join(fw, "domains"))
    with open(os.path.join(fw, "domains", td.GPU_VM_UUID + ".xml"), "w") as f:
        f.write(td.XML["gpu-vm-1"])
    e = dict(os.environ, FAKE_WATCHER_DIR=fw, FAKE_WATCHER_MODE=mode, **env)
    d = td.Daemon(tag, policy="require", env=e,
                  extra=["--libvirt-uri", "test:///default", "--watcher-program", os.path.abspath(FAKE_WATCHER)])
    d.fw = fw
    return d.start()


def fw_events(d):
    return read_events(d.fw)


def killed_and_restarted(d, line):
    """pcinumad logs `line`, kills the watcher, restarts it, keeps
    answering hooks, and stops cleanly."""
    ev = d.wait_event(lambda e: line in e.message, timeout=30, what="%r in pcinumad's log" % line)
    print("# %s" % ev.message[:240])
    st = watcher_restarted(d)
    # last_error is the running watcher's to report (a new one clears it when
    # it connects); why the previous one was killed stays in process.last_exit.
    contains((st.get("process") or {}).get("last_exit") or "", line.split(" (")[0], "libvirt.process.last_exit in status")
    r = td.run_hook("gpu-vm-1", "prepare", "begin", td.XML["gpu-vm-1"], d.sock)
    check(r.rc == 1 and "refusing to start domain gpu-vm-1" in r.err, "a hook call meanwhile: %r" % (r,))
    rc = d.stop()
    td.check_clean_exit(d, rc)


def with_fake_watcher(name, mode, env, body):
    """Run body(d) on a pcinumad whose watcher is the fake one in `mode`;
    stop it and remove the fake's files whatever happens."""
    d = None
    try:
        d = fake_watcher_daemon(name, mode, env)
        body(d)
    finally:
        if d is not None and d.poll() is None:
            d.stop()
        if d is not None:
            shutil.rmtree(d.fw, ignore_errors=True)


def t_watcher_stalled():
    with_fake_watcher("watcher-stalled", "stall", {"PCINUMA_WATCHER_TIMEOUT_MS": "1000"},
                      lambda d: killed_and_restarted(
                          d, "did not read pcinumad's answer to its plan request within 1000 ms"))


def t_watcher_flood():
    # frames of at most 64 KiB: the link holds 2 x 64 KiB + 1 MiB
    with_fake_watcher("watcher-flood", "flood", {"PCINUMA_WATCHER_FRAME_MAX": "65536"},
                      lambda d: killed_and_restarted(d, "is not reading its link"))


def t_oversized_answer():
    def body(d):
        t0 = time.monotonic()
        plans = []
        while time.monotonic() - t0 < td.T(10) and not plans:
            plans = [e for e in fw_events(d) if e["ev"] == "plan"]
            time.sleep(0.05)
        check(plans, "the watcher got no answer: %r\n%s" % (fw_events(d), d.log_text()[-2000:]))
        a = plans[0]
        eq((a["redefine"], a["prio"], a["size"]), (False, 3, 0), "the answer: no redefinition, priority err, no XML")
        contains(a["error"] or "", "over the link's limit of 2048 bytes", "the answer's error")
        contains(a["summary"] or "", "cannot be redefined", "the answer's summary (what the watcher logs)")
        print("# answer: %s" % a["summary"])
        st = (d.status() or {}).get("libvirt") or {}
        eq((st.get("process") or {}).get("restarts"), 0, "watcher restarts (the link is fine)")
        r = td.run_hook("gpu-vm-1", "prepare", "begin", td.XML["gpu-vm-1"], d.sock)
        check(r.rc == 1 and "refusing to start domain gpu-vm-1" in r.err, "a hook call afterwards: %r" % (r,))
        rc = d.stop()
        td.check_clean_exit(d, rc)
    with_fake_watcher("watcher-oversized", "once", {"PCINUMA_WATCHER_FRAME_MAX": "2048"}, body)


# ---- main ----------------------------------------------------------------------------------

def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "golden", "workdir"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--only")
    ARGS = ap.parse_args()
    for opt in ("pcinumad", "pcinumactl", "hook"):
        if not os.access(getattr(ARGS, opt), os.X_OK):
            print("1..0 # SKIP %s missing" % opt)
            return SKIP
    for opt in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "golden", "workdir"):
        setattr(ARGS, opt, os.path.abspath(getattr(ARGS, opt)))
    from pcinumatest.session import find_tool
    if not (find_tool("libvirtd") and find_tool("virsh")):
        print("1..0 # SKIP libvirtd or virsh missing")
        return SKIP
    ARGS.daemon_wrapper = ""
    td.start_run(ARGS, "pcinuma-fa-")
    t0 = time.monotonic()
    try:
        td.FIXTURE = os.path.join(td.RUNTMP, "sample-4n")
        td.mkfakesysfs(os.path.join(ARGS.hosts, "sample-4n.json"), td.FIXTURE)
        src = os.path.dirname(os.path.dirname(ARGS.golden))
        td.XML["gpu-vm-1"] = td.read_text(os.path.join(src, "conf", "examples", "gpu-vm-1.xml"))
        A.d = td.Daemon("faults", policy="require")
        A.sup = Supervisor(A.d)
        try:
            R.run("(a) socket activation: the first hook call starts pcinumad", t_activation_on_demand)
            R.run("(a) SIGKILL during a request: fast hooks apply on_unreachable (allow, refuse) within "
                  "their timeout; queued hooks are served by a new daemon; only the killed request is lost",
                  t_kill_during_request)
            R.run("(a) SIGKILL while idle: the next hook call is served by a new daemon", t_kill_idle_then_call)
            R.run("(b) broken policy + SIGHUP: last good policy kept, last_error set, decisions unchanged",
                  t_broken_policy_reload)

            def stop():
                cur = A.sup.current()
                check(cur is not None, "no daemon runs")
                os.kill(cur.pid, signal.SIGTERM)
                rc = cur.wait(td.T(10))
                td.check_clean_exit(A.d, rc)
            R.run("(a) the last activated daemon exits 0 on SIGTERM", stop)
        finally:
            A.sup.close()
        R.run("(c) libvirtd SIGKILLed and restarted: the watcher reconnects within 5 s and catches up",
              t_libvirtd_sigkill)
        R.run("(d) the watcher process SIGKILLed: pcinumad restarts it and keeps serving; it does not "
              "outlive pcinumad; a missing watcher program is a clear start error", t_watcher_sigkill)
        R.run("(e) a watcher that sends garbage is killed and restarted; pcinumad keeps serving and "
              "stops cleanly", t_watcher_garbage)
        R.run("(f) a watcher that does not read its plan answer within the deadline is killed and "
              "restarted; pcinumad keeps serving", t_watcher_stalled)
        R.run("(g) a watcher that lets pcinumad's output to it pile up is killed and restarted",
              t_watcher_flood)
        R.run("(h) an answer over the link's frame limit becomes an error answer the watcher logs; "
              "the link stays up", t_oversized_answer)
    finally:
        td.end_run()
    return R.finish(t0)


if __name__ == "__main__":
    sys.exit(main())

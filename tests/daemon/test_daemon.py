#!/usr/bin/env python3
"""The 'daemon' suite: pcinumad, pcinuma-hook and `pcinumactl status`
end to end, on fixture hosts (docs/design.md §8-§11).

    test_daemon.py --pcinumad PATH --pcinumactl PATH --hook PATH
                   --mkfakesysfs PATH --hosts DIR --golden DIR --workdir DIR
                   [--only SUBSTRING] [--keep]
                   [--daemon-wrapper CMD] [--timeout-factor F]

--daemon-wrapper prefixes every pcinumad command line with CMD (split like
a shell would), e.g. "valgrind --leak-check=full --error-exitcode=99".  The
wrapper must exec pcinumad in the same process (valgrind does), so the pid
the test sees is the daemon's.  Every daemon stopped by SIGTERM must exit 0;
an exit status of 99 is reported as the wrapper's (valgrind's) finding, with
the tail of the daemon's log.  --timeout-factor F multiplies every deadline
and upper time bound of the suite (not the lower ones, nor the timeouts
given to the daemon itself): a slow wrapper needs it; the defaults stay.

Every test starts its own pcinumad on a fresh socket (in a short temporary
directory under /tmp: socket paths are limited to 107 bytes) with a fixture
sysfs tree, talks to it through the real hook binary or the raw protocol,
and stops it.  Daemons run in their own process group; on any exception,
SIGTERM or SIGINT every group still alive is killed.

Output: "ok N - ..." / "not ok N - ..." with "#" diagnostics, then
"N passed, M failed".  Exit 0, 1 on any failure, 77 when a binary is
missing.  Python 3 standard library only."""

import argparse
import array
import atexit
import concurrent.futures
import json
import os
import re
import select
import shutil
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from pcinumatest import daemon as td
from pcinumatest import session
from pcinumatest.daemon import *  # noqa: F401,F403
from pcinumatest.daemon import _cleanup_at_exit, _cleanups, _interrupted, _live, _on_signal

R = Results()


# ---- tests -------------------------------------------------------------------

def reload_policy(d, text):
    """Write text as d's policy file, SIGHUP d, and wait until it has
    loaded it (its policy's load time moves)."""
    before = d.status()["policy"]["loaded_at_usec"]
    write_policy(d.policy_file, text)
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + T(10)
    while d.status()["policy"]["loaded_at_usec"] == before:
        check(time.monotonic() < deadline, "pcinumad did not load the new policy within %.0f s" % T(10))
        time.sleep(0.05)


def t_phase_matrix(policy):
    # A fleet's policy (migration: same-topology), so that the migrate
    # phase is checked accepting too; t_migration_default checks the
    # default's refusal.
    def run():
        xml_plain = XML["gpu-vm-1"]
        xml_planned = planned("gpu-vm-1", policy, fleet=True)
        xml_partial = XML["partial-require"]
        # The fixture's NICs (15b3:1021) at 0000:14:00.0 and 0000:74:00.0
        # are bound to mlx5_core: an incoming migration may take them only
        # from the passthrough pool (issue 24); the pool changes nothing
        # else.  Without it, that migration is refused naming them.
        pool = json.dumps({"default": {"policy": policy, "migration": "same-topology"}, "passthrough_pool": ["15b3:1021"]}) + "\n"
        with Daemon("matrix-" + policy, policy=pool) as d:
            # -- prepare begin, unplanned
            r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", xml_plain)
            eq(r.out, "", "prepare stdout (unplanned, %s)" % policy)
            if policy in ("require", "socket"):
                eq(r.rc, 1, "prepare exit (unplanned, %s): %r" % (policy, r))
                contains(r.err, "pcinuma: refusing to start domain gpu-vm-1", "prepare stderr")
                contains(r.err, "does not match the NUMA plan", "prepare stderr")
                contains(r.err, "(policy %s)" % policy, "prepare stderr")
                contains(r.err, "start the domain again", "prepare stderr")
                assert_decision(dec, mid=MID["START_REFUSED"], verdict="refuse", phase="prepare",
                                policy=policy, domain="gpu-vm-1", devices=gpu_vm_devices(policy))
                check("does not match the NUMA plan" in dec.message, "log message %r" % dec.message)
                eq(dec.prefix, "warning: ", "log priority prefix of a refusal")
            elif policy in ("preferred", "legacy"):
                eq(r.rc, 0, "prepare exit (unplanned, %s): %r" % (policy, r))
                contains(r.err, "pcinuma: warning: domain gpu-vm-1 starts without its NUMA-aware PCI topology",
                         "prepare stderr")
                contains(r.err, "(policy %s)" % policy, "prepare stderr")
                assert_decision(dec, mid=MID["START_WARNED"], verdict="warn", phase="prepare",
                                policy=policy, domain="gpu-vm-1", devices=gpu_vm_devices(policy))
            else:  # off: nothing to do
                eq(r.rc, 0, "prepare exit (off): %r" % r)
                eq(r.err, "", "prepare stderr (off)")
                assert_decision(dec, mid=MID["START_ALLOWED"], verdict="allow", phase="prepare",
                                policy="off", domain="gpu-vm-1", devices=unplaced_devices())

            # -- prepare begin, planned by pcinumactl plan under the same policy
            r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", xml_planned)
            eq((r.rc, r.out, r.err), (0, "", ""), "prepare of the planned domain (%s): %r" % (policy, r))
            assert_decision(dec, mid=MID["START_ALLOWED"], verdict="allow", phase="prepare",
                            policy=policy, domain="gpu-vm-1",
                            devices=gpu_vm_devices(policy) if policy != "off" else unplaced_devices())
            if policy != "off":
                contains(dec.message, "matches the NUMA plan", "allow log message")

            # -- prepare begin, a domain the policy itself refuses
            r, dec = hook_and_decision(d, "partial-require", "prepare", "begin", xml_partial)
            if policy in ("require", "legacy"):
                eq(r.rc, 1, "prepare exit (partial, %s): %r" % (policy, r))
                for s in ("refusing to start domain partial-require",
                          "policy %s" % policy,
                          "pcinuma: no guest cell is backed by host node 1; fix: pin a guest cell to host node 1",
                          "pcinuma:   device on host node 1: 0000:33:00.0\n",
                          "pcinuma:   device on host node 3: 0000:73:00.0\n"):
                    contains(r.err, s, "prepare stderr (partial, %s)" % policy)
                assert_decision(dec, mid=MID["START_REFUSED"], verdict="refuse", phase="prepare",
                                policy=policy, domain="partial-require", uuid=None)
            elif policy == "off":
                eq((r.rc, r.err), (0, ""), "prepare (partial, off): %r" % r)
                eq(dec.get("PCINUMA_VERDICT"), "allow", "verdict (partial, off)")
            else:
                expect_rc = 1 if policy == "socket" else 0
                eq(r.rc, expect_rc, "prepare exit (partial, %s): %r" % (policy, r))
                contains(r.err, "does not match the NUMA plan" if policy == "socket"
                         else "starts without its NUMA-aware PCI topology", "prepare stderr (partial)")
                eq(dec.get("PCINUMA_VERDICT"), "refuse" if policy == "socket" else "warn",
                   "verdict (partial, %s)" % policy)
            eq(r.out, "", "prepare stdout (partial)")

            # -- migrate begin
            r, dec = hook_and_decision(d, "gpu-vm-1", "migrate", "begin", xml_plain)
            eq((r.rc, r.err), (0, ""), "migrate of the unplanned domain: %r" % r)
            check(r.out == xml_plain, "migrate of the unplanned domain: stdout is not the XML: %r" % r)
            eq(dec.get("PCINUMA_VERDICT"), "pass", "migrate (unplanned) verdict")
            eq(dec.mid, MID["HOOK_PASSED"], "migrate (unplanned) MESSAGE_ID")

            marked = xml_planned if policy != "off" else planned("gpu-vm-1", "require", fleet=True)
            # migration: same-topology (the fleet's opt-in): this host has the
            # same topology as itself, so the domain comes in unchanged.
            r, dec = hook_and_decision(d, "gpu-vm-1", "migrate", "begin", marked)
            eq((r.rc, r.out), (0, marked), "migrate of a planned domain to a host like its own: %r" % r)
            assert_decision(dec, mid=MID["MIGRATION_ACCEPTED"], verdict="allow", phase="migrate",
                            policy=policy if policy != "off" else "require", domain="gpu-vm-1")
            check(dec.all("PCINUMA_REMAP"), "migrate accepted: no PCINUMA_REMAP field: %r" % dec.message)
            # Without the pool, the NICs the host's driver holds are not
            # given: refused, naming them.
            reload_policy(d, fleet_policy(policy))
            r, dec = hook_and_decision(d, "gpu-vm-1", "migrate", "begin", marked)
            eq((r.rc, r.out), (1, ""), "migrate with host-bound NICs and no pool: %r" % r)
            for bdf in ("0000:14:00.0", "0000:74:00.0"):
                contains(r.err, "%s (driver mlx5_core)" % bdf, "migrate stderr (no pool)")
            eq(dec.get("PCINUMA_VERDICT"), "refuse", "migrate (no pool) verdict")
            reload_policy(d, pool)
            # A mark from a host under migration: refuse.
            marked_no = marked.replace('migratable="yes"', 'migratable="no"')
            r, dec = hook_and_decision(d, "gpu-vm-1", "migrate", "begin", marked_no)
            eq(r.rc, 1, "migrate of a planned domain: %r" % r)
            eq(r.out, "", "migrate of a planned domain: stdout")
            contains(r.err, "refusing incoming migration of domain gpu-vm-1", "migrate stderr")
            contains(r.err, 'migratable="no"', "migrate stderr")
            assert_decision(dec, mid=MID["MIGRATION_REFUSED"], verdict="refuse", phase="migrate",
                            policy=policy if policy != "off" else "require", domain="gpu-vm-1")

            # -- restore begin: the XML passes unchanged
            for label, x in (("planned", marked), ("unplanned", xml_plain)):
                r, dec = hook_and_decision(d, "gpu-vm-1", "restore", "begin", x)
                eq((r.rc, r.err), (0, ""), "restore (%s): %r" % (label, r))
                check(r.out == x, "restore (%s): stdout differs from the XML on stdin: %r" % (label, r))
                eq(dec.get("PCINUMA_VERDICT"), "pass", "restore verdict")
                eq(dec.get("PCINUMA_PHASE"), "restore", "restore PCINUMA_PHASE")

            # -- every other phase: exit 0 at once, no output, nothing asked
            before = d.status()["requests"]["hook"]
            m = d.mark()
            for phase, sub in OTHER_PHASES:
                r = run_hook("gpu-vm-1", phase, sub, xml_planned, d.sock)
                eq((r.rc, r.out, r.err), (0, "", ""), "hook %s %s: %r" % (phase, sub, r))
            eq(d.status()["requests"]["hook"], before, "hook requests counted for the other phases")
            eq(d.decisions(m), [], "decisions logged for the other phases")

            st = d.status()
            eq(st["policy"]["default"], policy, "status policy.default")
            eq(st["requests"]["hook"], 9, "hook requests served")  # 3 migrate calls of a planned domain (accepted, host-bound without the pool, marked no)
    return run


def t_raw_other_phases():
    """What the daemon answers (and logs) for phases the hook normally
    keeps to itself: pass, exit 0, HOOK_PASSED."""
    with Daemon("raw-phases", policy="require") as d:
        for phase, sub in OTHER_PHASES + (("prepare", "end"), ("migrate", "end")):
            m = d.mark()
            r = d.call({"version": 1, "type": "hook", "argv": ["gpu-vm-1", phase, sub, "-"],
                        "xml": XML["gpu-vm-1"]})
            eq((r.get("exit"), r.get("verdict"), r.get("stdout"), r.get("stderr")), (0, "pass", None, None),
               "answer to %s %s: %r" % (phase, sub, r))
            dec = d.decisions(m)
            eq(len(dec), 1, "decisions logged for %s %s" % (phase, sub))
            eq((dec[0].mid, dec[0].get("PCINUMA_PHASE"), dec[0].get("PCINUMA_VERDICT"),
                dec[0].get("PCINUMA_DOMAIN")), (MID["HOOK_PASSED"], phase, "pass", "gpu-vm-1"),
               "log of %s %s" % (phase, sub))
        st = d.status()
        eq(st["verdicts"]["pass"], len(OTHER_PHASES) + 2, "status verdicts.pass")


def t_raw_prepare_edge_cases():
    """prepare without XML, with XML that does not parse, and with an
    external entity: refused, naming the problem, never expanding it."""
    with Daemon("raw-prepare", policy="require") as d:
        m = d.mark()
        r = d.call({"version": 1, "type": "hook", "argv": ["vm-noxml", "prepare", "begin", "-"]})
        eq((r.get("exit"), r.get("verdict")), (1, "refuse"), "prepare without XML: %r" % r)
        contains(r.get("stderr") or "", "passed no domain XML", "prepare without XML")
        r = d.call({"version": 1, "type": "hook", "argv": ["vm-bad", "prepare", "begin", "-"],
                    "xml": "<domain type='kvm'><name>vm-bad</name><devices><hostdev>"})
        eq((r.get("exit"), r.get("verdict")), (1, "refuse"), "prepare with broken XML: %r" % r)
        contains(r.get("stderr") or "", "refusing to start domain vm-bad", "prepare with broken XML")
        secret = os.path.join(d.dir, "secret.txt")
        with open(secret, "w") as f:
            f.write("TOPSECRET-4711\n")
        xxe = XML["gpu-vm-1"].replace("<domain type='qemu'>",
                                      "<!DOCTYPE domain [<!ENTITY x SYSTEM 'file://%s'>]>\n<domain type='qemu'>"
                                      % secret, 1).replace("<name>gpu-vm-1</name>", "<name>&x;</name>")
        check("&x;" in xxe and "<!DOCTYPE" in xxe, "could not build the entity XML")
        for phase in ("prepare", "migrate"):
            r = d.call({"version": 1, "type": "hook", "argv": ["vm-xxe", phase, "begin", "-"], "xml": xxe})
            text = json.dumps(r)
            check("TOPSECRET" not in text, "%s: the external entity was expanded: %r" % (phase, r))
        check("TOPSECRET" not in d.log_text(), "the external entity was expanded into the log")
        r = run_hook("vm-xxe", "prepare", "begin", xxe, d.sock)
        check("TOPSECRET" not in r.out + r.err, "hook output expanded the entity: %r" % r)
        eq(d.status()["requests"]["errors"], 0, "protocol errors (these are all well-formed requests)")


def t_status_counter_consistency():
    """requests.total counts every request received, malformed ones too:
    total == hook + status + errors.  (Today a frame the decoder rejects
    -- non-JSON, length 0, oversized -- counts in 'errors' but not in
    'total', while a bad request object counts in both.)"""
    with Daemon("counters", policy="require") as d:
        with connect(d.sock) as s:
            s.sendall(encode(b"not json"))
            r = recv_frame(s)
        contains(r.get("error", ""), "payload is not JSON", "non-JSON frame")
        r = d.call({"version": 7, "type": "status"})
        contains(r.get("error", ""), "unsupported protocol version 7", "wrong version")
        r = d.call({"version": 1, "type": "hook", "argv": ["x", "started", "begin", "-"]})
        eq(r.get("verdict"), "pass", "hook request")
        rq = d.status()["requests"]
        eq((rq["hook"], rq["status"], rq["errors"]), (1, 1, 2), "hook, status, errors")
        eq(rq["total"], rq["hook"] + rq["status"] + rq["errors"],
           "requests.total vs hook + status + errors (%r)" % rq)


class Listener:
    """A Unix stream socket this test owns, recording every accept.
    behaviour: 'close' (close at once), 'error' (read a frame, answer
    {"error": ...}), 'hold' (keep the connection open, say nothing)."""

    def __init__(self, path, behaviour="close"):
        self.path = path
        self.behaviour = behaviour
        self.accepts = 0
        self.requests = []
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.bind(path)
        self.s.listen(64)
        self.s.settimeout(0.05)
        self.stop_flag = False
        self.held = []
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        while not self.stop_flag:
            try:
                c, _ = self.s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepts += 1
            if self.behaviour == "close":
                c.close()
            elif self.behaviour == "error":
                try:
                    c.settimeout(5)
                    hdr = recv_exact(c, 4)
                    (n,) = struct.unpack(">I", hdr)
                    self.requests.append(json.loads(recv_exact(c, n)))
                    c.sendall(encode({"version": 1, "error": "test listener says no"}))
                finally:
                    c.close()
            else:
                self.held.append(c)

    def close(self):
        self.stop_flag = True
        self.t.join(2)
        self.s.close()
        for c in self.held:
            c.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def t_fast_path():
    d = fresh_dir("fastpath")
    sock = os.path.join(d, "listen.sock")
    lst = Listener(sock, "close")
    try:
        no_dev = strip_hostdevs(XML["gpu-vm-1"])
        check("<hostdev" not in no_dev and "<name>gpu-vm-1</name>" in no_dev, "strip_hostdevs broke the XML")
        calls = [(p, s, XML["gpu-vm-1"]) for p, s in OTHER_PHASES]
        calls += [(p, "begin", no_dev) for p in ("prepare", "migrate", "restore")]
        calls += [("prepare", "begin", "")]   # no XML at all
        for phase, sub, x in calls:
            r = run_hook("gpu-vm-1", phase, sub, x, sock)
            eq((r.rc, r.out, r.err), (0, "", ""), "hook %s %s (%s): %r"
               % (phase, sub, "no hostdev" if x is no_dev else "hostdevs", r))
            eq(lst.accepts, 0, "connections accepted after hook %s %s" % (phase, sub))
        # The control: what must reach the daemon does reach it.
        for label, x in (("a hostdev", XML["gpu-vm-1"]),
                         ("an <interface type='hostdev'>",
                          no_dev.replace("<devices>", "<devices><interface type='hostdev'><source>"
                                         "<address type='pci' domain='0' bus='0x14' slot='0' function='0'/>"
                                         "</source></interface>")),
                         ("the pcinuma mark only", strip_hostdevs(planned("gpu-vm-1", "require")))):
            n = lst.accepts
            r = run_hook("gpu-vm-1", "prepare", "begin", x, sock)
            eq(r.rc, 0, "hook with %s against a closing listener: %r" % (label, r))
            contains(r.err, "check skipped", "stderr with %s" % label)
            eq(lst.accepts, n + 1, "connections accepted for a domain with %s" % label)
    finally:
        lst.close()


def t_fast_path_daemon_stopped():
    """With the daemon stopped, the fast path still exits 0 silently, even
    under on_unreachable=refuse: it never tried."""
    d = Daemon("fastpath-stopped", policy="require").start()
    sock = d.sock
    check_clean_exit(d, d.stop())
    for phase, sub in OTHER_PHASES:
        r = run_hook("gpu-vm-1", phase, sub, XML["gpu-vm-1"], sock, on_unreachable="refuse")
        eq((r.rc, r.out, r.err), (0, "", ""), "hook %s %s, daemon stopped: %r" % (phase, sub, r))
    r = run_hook("gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"], sock, on_unreachable="refuse")
    eq(r.rc, 1, "prepare with hostdevs, daemon stopped, refuse: %r" % r)


def t_unreachable():
    d = fresh_dir("unreachable")
    missing = os.path.join(d, "nobody-here.sock")
    x = XML["gpu-vm-1"]
    r = run_hook("gpu-vm-1", "prepare", "begin", x, missing, on_unreachable="allow")
    eq((r.rc, r.out), (0, ""), "unreachable, allow: %r" % r)
    contains(r.err, "pcinuma: NUMA placement check skipped for domain gpu-vm-1 (phase prepare)", "stderr (allow)")
    contains(r.err, "on_unreachable=allow", "stderr (allow)")
    contains(r.err, missing, "stderr (allow) names the socket")
    r = run_hook("gpu-vm-1", "prepare", "begin", x, missing, on_unreachable="refuse")
    eq((r.rc, r.out), (1, ""), "unreachable, refuse: %r" % r)
    contains(r.err, "check skipped", "stderr (refuse)")
    contains(r.err, "on_unreachable=refuse", "stderr (refuse)")
    # migrate under refuse: refused, and no XML on stdout
    r = run_hook("gpu-vm-1", "migrate", "begin", x, missing, on_unreachable="refuse")
    eq((r.rc, r.out), (1, ""), "migrate, unreachable, refuse: %r" % r)

    # A daemon that answers with an error: on_unreachable applies too.
    sock = os.path.join(d, "error.sock")
    lst = Listener(sock, "error")
    try:
        r = run_hook("gpu-vm-1", "prepare", "begin", x, sock, on_unreachable="allow")
        eq(r.rc, 0, "error answer, allow: %r" % r)
        contains(r.err, "test listener says no", "stderr (error answer)")
        contains(r.err, "check skipped", "stderr (error answer)")
        r = run_hook("gpu-vm-1", "prepare", "begin", x, sock, on_unreachable="refuse")
        eq(r.rc, 1, "error answer, refuse: %r" % r)
        eq(len(lst.requests), 2, "requests the listener read")
        req = lst.requests[0]
        eq((req.get("version"), req.get("type"), req.get("argv"), req.get("xml")),
           (1, "hook", ["gpu-vm-1", "prepare", "begin", "-"], x), "the hook's request")
    finally:
        lst.close()

    # A daemon that never answers: the hook gives up after timeout_ms.
    sock = os.path.join(d, "hold.sock")
    lst = Listener(sock, "hold")
    try:
        r = run_hook("gpu-vm-1", "prepare", "begin", x, sock, on_unreachable="refuse", timeout_ms=400)
        eq(r.rc, 1, "silent daemon, refuse: %r" % r)
        contains(r.err, "no answer from the daemon within 400 ms", "stderr (silent daemon)")
        check(0.3 < r.elapsed < 3.0, "the hook gave up after %.2f s, timeout_ms is 400" % r.elapsed)
    finally:
        lst.close()


def ensure_user():
    try:
        return session.ensure_user(TEST_USER, TEST_USER_HOME)[0]
    except session.SessionError as e:
        raise Failure(str(e))


def _nonroot_setup(d):
    """Let TEST_USER reach d's socket (0666 in 0755 directories) and run
    a copy of the hook; returns (uid, the hook copy)."""
    uid = ensure_user()
    eq(os.stat(d.sock).st_mode & 0o777, 0o600, "mode of the socket pcinumad created")
    for p in (RUNTMP, d.dir, os.path.dirname(d.sock)):
        os.chmod(p, 0o755)
    os.chmod(d.sock, 0o666)
    hook_copy = os.path.join(d.dir, "pcinuma-hook")
    shutil.copy(ARGS.hook, hook_copy)
    os.chmod(hook_copy, 0o755)
    return uid, hook_copy


RAW_CLIENT = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
buf = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    buf += c
n = struct.unpack(">I", buf[:4])[0] if len(buf) >= 4 else -1
print(json.dumps({"n": n, "payload": buf[4:].decode("utf-8", "replace")}))
"""


def nonroot_skip():
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("runuser"):
        return "runuser not found"
    return None


def t_non_root_peer():
    why = nonroot_skip()
    if why:
        return why
    with Daemon("nonroot", policy="require") as d:
        uid, hook_copy = _nonroot_setup(d)
        # the daemon's answer, read by a client running as the user that
        # sends nothing and reads until EOF
        # (a python the user may run: sys.executable may live in root's home)
        py = next((c for c in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable)
                   if os.path.exists(c)), sys.executable)
        m = d.mark()
        p = subprocess.run(["runuser", "-u", TEST_USER, "--", py, "-c", RAW_CLIENT, d.sock],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        eq(p.returncode, 0, "raw client as %s (stderr %r)" % (TEST_USER, p.stderr))
        got = json.loads(p.stdout)
        ans = json.loads(got["payload"])
        eq(got["n"], len(got["payload"].encode()), "frame length of the answer")
        eq(ans.get("version"), 1, "answer version")
        contains(ans.get("error", ""), "permission denied", "answer to a non-root peer")
        contains(ans.get("error", ""), "uid %d" % uid, "answer to a non-root peer")
        ev = [e for e in d.events(m) if e.mid == MID["PEER_REJECTED"]]
        eq(len(ev), 1, "PEER_REJECTED events")
        eq(ev[0].get("PCINUMA_PEER_UID"), str(uid), "PCINUMA_PEER_UID")
        check(ev[0].get("PCINUMA_PEER_PID", "0") not in ("0", None), "PCINUMA_PEER_PID is set: %r" % ev[0])

        # the hook as that user: on_unreachable applies
        x = XML["gpu-vm-1"]
        m = d.mark()
        r = run_hook("gpu-vm-1", "prepare", "begin", x, d.sock, user=TEST_USER, hook=hook_copy,
                     on_unreachable="allow")
        eq((r.rc, r.out), (0, ""), "non-root hook, allow: %r" % r)
        contains(r.err, "check skipped", "stderr (non-root, allow)")
        contains(r.err, "on_unreachable=allow", "stderr (non-root, allow)")
        r = run_hook("gpu-vm-1", "prepare", "begin", x, d.sock, user=TEST_USER, hook=hook_copy,
                     on_unreachable="refuse")
        eq((r.rc, r.out), (1, ""), "non-root hook, refuse: %r" % r)
        contains(r.err, "on_unreachable=refuse", "stderr (non-root, refuse)")
        ev = [e for e in d.events(m) if e.mid == MID["PEER_REJECTED"]]
        eq([e.get("PCINUMA_PEER_UID") for e in ev], [str(uid)] * 2, "PEER_REJECTED events for the hook calls")
        eq(d.decisions(m), [], "decisions made for a rejected peer")
        # the same call as root is served
        r = run_hook("gpu-vm-1", "prepare", "begin", x, d.sock, on_unreachable="allow")
        eq(r.rc, 1, "root hook: %r" % r)
        contains(r.err, "does not match the NUMA plan", "root hook stderr")
        st = d.status()
        eq(st["requests"]["rejected_peers"], 3, "status rejected_peers")
        eq(st["requests"]["hook"], 1, "status requests.hook (rejected peers are not served)")

    # --allow-uid: that user is served (a session libvirtd's hooks)
    with Daemon("allow-uid", policy="require", extra=["--allow-uid", str(uid)]) as d:
        _, hook_copy = _nonroot_setup(d)
        m = d.mark()
        r = run_hook("gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"], d.sock, user=TEST_USER, hook=hook_copy,
                     on_unreachable="allow")
        eq(r.rc, 1, "hook as an --allow-uid user: %r" % r)
        contains(r.err, "does not match the NUMA plan", "hook as an --allow-uid user")
        eq([e.get("PCINUMA_VERDICT") for e in d.decisions(m)], ["refuse"], "decisions for an --allow-uid user")
        eq(d.status()["requests"]["rejected_peers"], 0, "rejected peers with --allow-uid")


def t_non_root_hook_reason():
    """The hook passes on the daemon's reason ('permission denied'), even
    though the daemon answers and closes before reading the request: the
    answer is in the hook's receive queue when its send fails with EPIPE.
    A 1 MiB XML makes the send outlast the daemon's answer every time."""
    why = nonroot_skip()
    if why:
        return why
    with Daemon("nonroot-reason", policy="require") as d:
        uid, hook_copy = _nonroot_setup(d)
        big = XML["gpu-vm-1"].replace("</domain>", "<!-- %s -->\n</domain>" % ("x" * (1 << 20)))
        for label, x in (("4 KiB XML", XML["gpu-vm-1"]), ("1 MiB XML", big)):
            r = run_hook("gpu-vm-1", "prepare", "begin", x, d.sock, user=TEST_USER, hook=hook_copy,
                         on_unreachable="refuse")
            eq(r.rc, 1, "%s: non-root hook, refuse: %r" % (label, r))
            contains(r.err, "permission denied", "%s: hook stderr" % label)


def t_parallel():
    with Daemon("parallel", policy="require", extra=["--max-connections", "256"]) as d:
        good = planned("gpu-vm-1", "require")
        bad = XML["gpu-vm-1"]

        def one(i):
            if i % 2 == 0:
                return i, run_hook("gpu-vm-1", "prepare", "begin", good, d.sock, timeout_ms=int(T(20000)))
            return i, run_hook("gpu-vm-1", "prepare", "begin", bad, d.sock, timeout_ms=int(T(20000)))

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(64) as ex:
            results = list(ex.map(one, range(64)))
        elapsed = time.monotonic() - t0
        bad_ones = []
        for i, r in results:
            if i % 2 == 0:
                ok = r.rc == 0 and r.err == "" and r.out == ""
            else:
                ok = r.rc == 1 and "does not match the NUMA plan" in r.err and r.out == "" \
                    and "check skipped" not in r.err
            if not ok:
                bad_ones.append("call %d (%s): %r" % (i, "planned" if i % 2 == 0 else "unplanned", r))
        check(not bad_ones, "%d of 64 answers wrong:\n%s" % (len(bad_ones), "\n".join(bad_ones[:5])))
        st = d.status()
        eq(st["requests"]["hook"], 64, "status requests.hook")
        eq((st["verdicts"]["allow"], st["verdicts"]["refuse"]), (32, 32), "status verdicts allow/refuse")
        eq(st["requests"]["errors"], 0, "status requests.errors")
        dec = d.decisions()
        eq(sorted(e.get("PCINUMA_VERDICT") for e in dec), ["allow"] * 32 + ["refuse"] * 32,
           "logged verdicts")
        print("# 64 parallel hook calls in %.2f s" % elapsed)


def t_slow_client():
    with Daemon("slow", policy="require", extra=["--request-timeout-ms", "1500"]) as d:
        slow = connect(d.sock)
        try:
            frame = encode({"version": 1, "type": "status"})
            slow.sendall(frame[:4 + 10])     # the header and 10 of its bytes
            t_sent = time.monotonic()
            good = planned("gpu-vm-1", "require")
            times = []
            for i in range(10):
                r = run_hook("gpu-vm-1", "prepare", "begin", good if i % 2 == 0 else XML["gpu-vm-1"], d.sock)
                eq(r.rc, 0 if i % 2 == 0 else 1, "hook call %d with a slow client open: %r" % (i, r))
                times.append(r.elapsed)
            total = time.monotonic() - t_sent
            check(total < T(1.2), "10 hook calls took %.2f s with a slow client holding a half frame "
                  "(request timeout 1.5 s): %s" % (total, ["%.3f" % t for t in times]))
            d.wait_connections(2)     # the slow one and the status request
            # the slow one is closed after the request timeout
            slow.settimeout(T(6))
            try:
                data = slow.recv(100)
            except ConnectionResetError:
                data = b""
            waited = time.monotonic() - t_sent
            eq(data, b"", "what the daemon sent the slow client")
            check(1.3 < waited < T(3.5), "the slow client was closed %.2f s after its last byte; "
                  "--request-timeout-ms 1500" % waited)
        finally:
            slow.close()
        ev = d.wait_event(lambda e: e.mid == MID["PROTOCOL_ERROR"] and "incomplete request" in e.message,
                          what="incomplete-request log line")
        contains(ev.message, "1500 ms", "incomplete-request log message")
        eq(d.status()["requests"]["errors"], 1, "status requests.errors")


def t_non_reading_client():
    """A client that asks for a 3 MiB answer and never reads it does not
    stall the others, and is closed after the request timeout."""
    with Daemon("nonreading", policy="require", extra=["--request-timeout-ms", "1500"]) as d:
        big = planned("gpu-vm-1", "require").replace("</domain>", "<!-- %s -->\n</domain>" % ("y" * (3 << 20)))
        s = connect(d.sock)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.sendall(encode({"version": 1, "type": "hook", "argv": ["gpu-vm-1", "restore", "begin", "-"],
                              "xml": big}))
            t0 = time.monotonic()
            for i in range(5):
                r = run_hook("gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"], d.sock)
                eq(r.rc, 1, "hook call %d while a client does not read: %r" % (i, r))
            check(time.monotonic() - t0 < T(1.2), "5 hook calls took %.2f s while a client does not read its answer"
                  % (time.monotonic() - t0))
            # the stuck connection goes away after the timeout
            d.wait_connections(1, timeout=6)
        finally:
            s.close()


def t_idle_client():
    """An idle connection that never started a request is closed after the
    timeout too, without counting an error."""
    with Daemon("idle", policy="require", extra=["--request-timeout-ms", "500"]) as d:
        s = connect(d.sock, 5)
        t0 = time.monotonic()
        data = s.recv(10)
        s.close()
        eq(data, b"", "idle client")
        check(0.4 < time.monotonic() - t0 < T(3), "idle client closed after %.2f s" % (time.monotonic() - t0))
        eq(d.status()["requests"]["errors"], 0, "errors for an idle client")


MALFORMED = [
    # (label, bytes to send, expected substring of the error, send the payload?)
    ("non-JSON", encode(b"hello, world"), "payload is not JSON"),
    ("JSON array", encode(b"[1, 2, 3]"), "not a JSON object (it is a JSON array)"),
    ("JSON string", encode(b'"status"'), "not a JSON object"),
    ("NUL byte", encode(b'{"version":1,\x00"type":"status"}'), "NUL byte"),
    ("length 0", struct.pack(">I", 0), "frame length 0"),
    ("oversized", struct.pack(">I", 0x7fffffff), "exceeds the"),
    ("just over the limit", struct.pack(">I", 16 * 1024 * 1024 + 1), "exceeds the 16777216 byte limit"),
    ("wrong version", encode({"version": 2, "type": "status"}), "unsupported protocol version 2"),
    ("missing version", encode({"type": "status"}), "missing 'version'"),
    ("version a string", encode({"version": "1", "type": "status"}), "'version' must be an integer"),
    ("unknown type", encode({"version": 1, "type": "reboot"}), "unknown request type 'reboot'"),
    ("missing type", encode({"version": 1}), "missing 'type'"),
    ("argv a string", encode({"version": 1, "type": "hook", "argv": "gpu-vm-1 prepare begin -"}),
     "'argv' must be an array of 1 to 4 strings"),
    ("argv of numbers", encode({"version": 1, "type": "hook", "argv": [1, 2, 3, 4]}),
     "'argv' must be an array of 1 to 4 strings"),
    ("argv of 5", encode({"version": 1, "type": "hook", "argv": ["a", "prepare", "begin", "-", "x"]}),
     "'argv' must be an array of 1 to 4 strings"),
    ("argv empty", encode({"version": 1, "type": "hook", "argv": []}),
     "'argv' must be an array of 1 to 4 strings"),
    ("missing argv", encode({"version": 1, "type": "hook"}), "missing 'argv'"),
    ("xml a number", encode({"version": 1, "type": "hook", "argv": ["a", "prepare", "begin", "-"], "xml": 5}),
     "'xml' must be a string"),
]


def t_malformed():
    with Daemon("malformed", policy="require") as d:
        n_err = 0
        for label, data, want in MALFORMED:
            m = d.mark()
            with connect(d.sock, 5) as s:
                t0 = time.monotonic()
                s.sendall(data)
                r = recv_frame(s)
                elapsed = time.monotonic() - t0
            n_err += 1
            check(isinstance(r, dict) and "error" in r, "%s: expected an error answer, got %r" % (label, r))
            eq(r.get("version"), 1, "%s: answer version" % label)
            contains(r["error"], want, "%s: error" % label)
            check(elapsed < T(1.0), "%s: answered after %.2f s" % (label, elapsed))
            ev = [e for e in d.events(m) if e.mid == MID["PROTOCOL_ERROR"]]
            eq(len(ev), 1, "%s: PROTOCOL_ERROR log lines" % label)
            contains(ev[0].message, want, "%s: log message" % label)
            st = d.status()
            eq(st["requests"]["errors"], n_err, "%s: status errors" % label)

        # truncated, then closed: no answer possible, a log line instead
        m = d.mark()
        with connect(d.sock, 5) as s:
            s.sendall(encode({"version": 1, "type": "status"})[:12])
        d.wait_event(lambda e: e.mid == MID["PROTOCOL_ERROR"] and "truncated frame" in e.message, m,
                     what="truncated-frame log line")
        n_err += 1
        # a header cut short
        m = d.mark()
        with connect(d.sock, 5) as s:
            s.sendall(b"\x00\x00")
        d.wait_event(lambda e: e.mid == MID["PROTOCOL_ERROR"] and "truncated" in e.message, m,
                     what="truncated-header log line")
        n_err += 1

        # the error closes the connection: what follows on it is not read
        with connect(d.sock, 5) as s:
            s.sendall(encode(b"[]") + encode({"version": 1, "type": "status"}))
            r1 = recv_frame(s)
            r2 = recv_frame(s)
        n_err += 1
        contains(r1.get("error", ""), "not a JSON object", "first answer")
        eq(r2, None, "answer after an error (the connection should be closed)")

        # two good frames in one write: both answered, in order
        with connect(d.sock, 5) as s:
            s.sendall(encode({"version": 1, "type": "status"}) +
                      encode({"version": 1, "type": "hook", "argv": ["x", "started", "begin", "-"]}))
            r1, r2 = recv_frame(s), recv_frame(s)
        check("status" in r1, "pipelined: first answer %r" % r1)
        eq((r2.get("exit"), r2.get("verdict")), (0, "pass"), "pipelined: second answer")

        # the daemon still serves, and counted every error
        st = d.status()
        eq(st["requests"]["errors"], n_err, "status requests.errors after the malformed frames")
        r = run_hook("gpu-vm-1", "prepare", "begin", planned("gpu-vm-1", "require"), d.sock)
        eq((r.rc, r.err), (0, ""), "hook call after the malformed frames: %r" % r)
        p = subprocess.run([ARGS.pcinumactl, "status", "--socket", d.sock],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        eq(p.returncode, 0, "pcinumactl status exit")
        contains(p.stdout, " %d errors," % n_err, "pcinumactl status")


def t_policy_reload():
    with Daemon("reload", policy="require") as d:
        pf = d.policy_file
        st0 = d.status()
        eq(st0["policy"]["default"], "require", "initial default")
        eq(st0["policy"]["file"], pf, "status policy.file")
        eq(st0["policy"]["last_error"], None, "initial last_error")
        r = run_hook("gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"], d.sock)
        eq(r.rc, 1, "unplanned prepare under require: %r" % r)

        time.sleep(0.01)
        write_policy(pf, "preferred")
        m = d.hup()
        ev = [e for e in d.events(m) if e.mid == MID["POLICY_LOADED"]]
        eq(len(ev), 1, "POLICY_LOADED events after SIGHUP")
        eq(ev[0].get("PCINUMA_POLICY_FILE"), pf, "PCINUMA_POLICY_FILE")
        st1 = d.status()
        eq(st1["policy"]["default"], "preferred", "default after a good reload")
        eq(st1["policy"]["last_error"], None, "last_error after a good reload")
        check(st1["policy"]["loaded_at_usec"] > st0["policy"]["loaded_at_usec"],
              "policy.loaded_at_usec did not advance: %r -> %r"
              % (st0["policy"]["loaded_at_usec"], st1["policy"]["loaded_at_usec"]))
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"])
        eq(r.rc, 0, "unplanned prepare under preferred: %r" % r)
        eq((dec.get("PCINUMA_POLICY"), dec.get("PCINUMA_VERDICT")), ("preferred", "warn"), "decision")

        # a bad value: kept the last good policy, the error names file and key
        write_policy(pf, '{"default": {"policy": "bogus"}}\n')
        m = d.hup()
        ev = [e for e in d.events(m) if e.mid == MID["POLICY_INVALID"]]
        eq(len(ev), 1, "POLICY_INVALID events")
        st2 = d.status()
        err = st2["policy"]["last_error"] or ""
        contains(err, pf, "last_error names the file")
        contains(err, "default.policy", "last_error names the key")
        contains(err, "bogus", "last_error names the value")
        eq(st2["policy"]["default"], "preferred", "default after a bad reload")
        eq(st2["policy"]["loaded_at_usec"], st1["policy"]["loaded_at_usec"], "loaded_at_usec after a bad reload")
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"])
        eq((r.rc, dec.get("PCINUMA_POLICY")), (0, "preferred"), "decision after a bad reload")
        p = subprocess.run([ARGS.pcinumactl, "status", "--socket", d.sock],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        contains(p.stdout, "last reload FAILED", "pcinumactl status after a bad reload")

        # a syntax error: the line is named
        write_policy(pf, '{\n  "default": {"policy": "require",}\n}\n')
        d.hup()
        err = d.status()["policy"]["last_error"] or ""
        contains(err, pf, "last_error (syntax) names the file")
        contains(err, "line 2", "last_error (syntax) names the line")
        eq(d.status()["policy"]["default"], "preferred", "default after a syntax error")

        # the file removed: not the built-in default (which would replan
        # every domain under legacy) but the last good policy, and an
        # error naming the file (journal entry with its MESSAGE_ID, status)
        os.unlink(pf)
        m = d.hup()
        ev = [e for e in d.events(m) if e.mid == MID["POLICY_INVALID"]]
        eq(len(ev), 1, "POLICY_INVALID events after the file was removed")
        eq(ev[0].get("PCINUMA_POLICY_FILE"), pf, "PCINUMA_POLICY_FILE of the error")
        eq(ev[0].prefix, "error: ", "priority of the error")
        contains(ev[0].message, pf, "the error names the file")
        contains(ev[0].message, "keeping the last good policy", "the error says what happened")
        eq([e for e in d.events(m) if e.mid == MID["POLICY_LOADED"]], [], "POLICY_LOADED after the removal")
        st3 = d.status()
        eq((st3["policy"]["default"], st3["policy"]["from_file"]), ("preferred", True),
           "policy after the file was removed")
        contains(st3["policy"]["last_error"] or "", pf, "last_error after the removal names the file")
        contains(st3["policy"]["last_error"] or "", "no such file", "last_error after the removal")
        eq(st3["policy"]["loaded_at_usec"], st1["policy"]["loaded_at_usec"], "loaded_at_usec after the removal")
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"])
        eq((r.rc, dec.get("PCINUMA_POLICY")), (0, "preferred"), "decision after the removal")
        p = subprocess.run([ARGS.pcinumactl, "status", "--socket", d.sock],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        contains(p.stdout, "last reload FAILED", "pcinumactl status after the removal")
        contains(p.stdout, pf, "pcinumactl status after the removal names the file")

        # unreadable (a directory where the file was; a FIFO, which must
        # not block the daemon: hup() waits for the rescan that follows
        # the policy load): the same
        os.mkdir(pf)
        d.hup()
        st3b = d.status()
        eq(st3b["policy"]["default"], "preferred", "default with an unreadable file")
        contains(st3b["policy"]["last_error"] or "", pf, "last_error (unreadable) names the file")
        os.rmdir(pf)
        os.mkfifo(pf)
        d.hup()
        st3c = d.status()
        eq(st3c["policy"]["default"], "preferred", "default with a FIFO as the policy file")
        contains(st3c["policy"]["last_error"] or "", pf + ": cannot read: not a regular file", "last_error (FIFO)")
        os.unlink(pf)

        # a key written with an escape repeats another once decoded:
        # refused, not silently the last one
        write_policy(pf, '{"default": {"policy": "require"},\n "d\\u0065fault": {"policy": "off"}}\n')
        d.hup()
        err = d.status()["policy"]["last_error"] or ""
        contains(err, pf, "last_error (escaped duplicate) names the file")
        contains(err, "duplicate key 'd\\u0065fault'", "last_error (escaped duplicate)")
        contains(err, "line 2", "last_error (escaped duplicate) names the line")
        eq(d.status()["policy"]["default"], "preferred", "default after an escaped duplicate key")

        # fixed again
        write_policy(pf, "socket")
        d.hup()
        st4 = d.status()
        eq((st4["policy"]["default"], st4["policy"]["last_error"]), ("socket", None), "policy after a fix")
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"])
        eq((r.rc, dec.get("PCINUMA_POLICY"), dec.get("PCINUMA_VERDICT")), (1, "socket", "refuse"),
           "decision after the fix")


def t_migration_default():
    """migration: refuse is the default: the mark of a domain planned with
    the default switches says migratable="no", and a host with the default
    refuses an incoming planned domain even when its mark says yes."""
    dflt = planned("gpu-vm-1", "require")
    contains(dflt, 'migratable="no" migratable-reason="the policy says migration: refuse"', "default mark")
    with Daemon("migration-default", policy="require") as d:
        r, dec = hook_and_decision(d, "gpu-vm-1", "migrate", "begin", planned("gpu-vm-1", "require", fleet=True))
        eq((r.rc, r.out), (1, ""), "migrate under the default: %r" % r)
        contains(r.err, "this host's pcinuma policy refuses incoming planned domains (migration: refuse)",
                 "migrate stderr")
        assert_decision(dec, mid=MID["MIGRATION_REFUSED"], verdict="refuse", phase="migrate", policy="require",
                        domain="gpu-vm-1")
        r, dec = hook_and_decision(d, "gpu-vm-1", "migrate", "begin", dflt)
        eq(r.rc, 1, "migrate of a default-planned domain: %r" % r)
        contains(r.err, 'marked migratable="no"', "migrate stderr")


def t_policy_missing_at_start():
    """No policy file at start: a warning naming the built-in default in
    force; a reload while there is still none keeps it without an error;
    a file written later is loaded by the next reload."""
    with Daemon("nopolicy", policy=None) as d:
        pf = d.policy_file
        check(not os.path.exists(pf), "the policy file exists")
        st = d.status()
        eq((st["policy"]["default"], st["policy"]["from_file"], st["policy"]["last_error"]),
           ("preferred", False, None), "policy at start without a file")
        w = [e for e in d.events() if "No policy file" in e.message]
        eq(len(w), 1, "warnings about the missing file")
        eq(w[0].prefix, "warning: ", "priority of the missing-file line")
        contains(w[0].message, pf, "the warning names the file")
        contains(w[0].message, "built-in default policy is in force (default preferred", "the warning names the default")
        m = d.hup()
        eq([e for e in d.events(m) if e.mid == MID["POLICY_INVALID"]], [], "POLICY_INVALID without a file")
        eq(d.status()["policy"]["last_error"], None, "last_error after a reload without a file")
        write_policy(pf, "require")
        d.hup()
        st = d.status()
        eq((st["policy"]["default"], st["policy"]["from_file"], st["policy"]["last_error"]),
           ("require", True, None), "policy after the file appeared")
    # (a bad file at start stays fatal: t_bad_policy_at_start)


def t_policy_hook_conf():
    """The policy's hook section is published as hook.conf next to the
    socket, and republished on reload."""
    pol = {"default": {"policy": "require"}, "hook": {"timeout_ms": 1234, "on_unreachable": "refuse"}}
    with Daemon("hookconf", policy=json.dumps(pol)) as d:
        path = os.path.join(os.path.dirname(d.sock), "hook.conf")
        conf = read_text(path)
        for line in ("socket = %s" % d.sock, "timeout_ms = 1234", "on_unreachable = refuse"):
            check(re.search("^%s$" % re.escape(line), conf, re.M), "%s lacks %r:\n%s" % (path, line, conf))
        pol["hook"] = {"timeout_ms": 777, "on_unreachable": "allow"}
        write_policy(d.policy_file, json.dumps(pol))
        d.hup()
        conf = read_text(path)
        check(re.search(r"^timeout_ms = 777$", conf, re.M) and re.search(r"^on_unreachable = allow$", conf, re.M),
              "hook.conf after reload:\n%s" % conf)


def t_bad_policy_at_start():
    for label, text, wants in (
            ("bad value", '{"default": {"policy": "bogus"}}\n', ["default.policy", "bogus"]),
            ("syntax", '{\n  "default": {"policy": "require",}\n}\n', ["line 2"]),
            ("unknown key", '{"default": {"policy": "require"}, "nonsense": 1}\n', ["nonsense"])):
        d = Daemon("badstart", policy=text)
        d.start(wait=False)
        try:
            rc = d.proc.wait(T(10))
        except subprocess.TimeoutExpired:
            raise Failure("%s: pcinumad with a broken policy is still running" % label)
        finally:
            d.kill()
        log = d.log_text()
        check_clean_exit(d, rc, "%s: pcinumad exit status with a broken policy" % label, want=1)
        contains(log, d.policy_file, "%s: message names the file" % label)
        for w in wants:
            contains(log, w, "%s: message" % label)
        ev = [e for e in d.events() if e.mid == MID["POLICY_INVALID"]]
        eq(len(ev), 1, "%s: POLICY_INVALID events" % label)
        check(not os.path.exists(d.sock), "%s: a socket was left at %s" % (label, d.sock))


def t_stand_ins_option():
    """A normal build knows no --stand-ins (pcinumad and its watcher: an
    unknown option, exit 2, nothing started); a stand_ins build refuses a
    bad table at start, naming the file and the entry."""
    table = os.path.join(fresh_dir("stand-ins"), "stand-ins.json")
    watcher = os.path.join(os.path.dirname(ARGS.pcinumad), "pcinuma-watcher")
    if not ARGS.stand_ins_build:
        with open(table, "w") as f:
            f.write('{"52:54:00:5a:00:01": "0000:13:00.0"}\n')
        d = Daemon("no-stand-ins", extra=["--stand-ins", table])
        d.start(wait=False)
        try:
            rc = d.proc.wait(T(10))
        except subprocess.TimeoutExpired:
            raise Failure("pcinumad --stand-ins is still running in a normal build")
        finally:
            d.kill()
        eq(rc, 2, "pcinumad --stand-ins exit status in a normal build")
        contains(d.log_text(), "unrecognized option '--stand-ins'", "pcinumad's message")
        check(not os.path.exists(d.sock), "a socket was left at %s" % d.sock)
        r = subprocess.run([watcher, "--uri", "test:///default", "--stand-ins", table], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=T(10))
        eq(r.returncode, 2, "pcinuma-watcher --stand-ins exit status in a normal build")
        contains(r.stderr, "unrecognized option '--stand-ins'", "pcinuma-watcher's message")
        for prog in (ARGS.pcinumad, watcher):
            h = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=T(10))
            check("stand" not in h.stdout, "%s --help mentions stand-ins in a normal build" % prog)
        return
    for text, want in (('{"52:54:00:5a:00:01": "0000:13:00.0", "52:54:00:5a:00:01": "0000:14:00.0"}',
                        'entry "52:54:00:5a:00:01": MAC address given twice'),
                       ('{"52:54:00:5a:00:01": "13:00.0"}', 'entry "52:54:00:5a:00:01": "13:00.0" is not a host PCI address'),
                       ('["52:54:00:5a:00:01"]', "expected a JSON object")):
        with open(table, "w") as f:
            f.write(text + "\n")
        d = Daemon("bad-stand-ins", extra=["--stand-ins", table])
        d.start(wait=False)
        try:
            rc = d.proc.wait(T(10))
        except subprocess.TimeoutExpired:
            raise Failure("pcinumad with a bad stand-in table is still running")
        finally:
            d.kill()
        eq(rc, 1, "pcinumad exit status with a bad stand-in table %s" % text)
        contains(d.log_text(), "Cannot start: --stand-ins: %s: %s" % (table, want), "pcinumad's message")
        check(not os.path.exists(d.sock), "a socket was left at %s" % d.sock)
        r = subprocess.run([watcher, "--uri", "test:///default", "--stand-ins", table], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=T(10))
        eq(r.returncode, 2, "pcinuma-watcher exit status with a bad stand-in table %s" % text)
        contains(r.stderr, "%s: %s" % (table, want), "pcinuma-watcher's message")


def t_rescan():
    desc = json.loads(read_text(os.path.join(ARGS.hosts, "sample-4n.json")))
    d0 = fresh_dir("rescan")
    tree = os.path.join(d0, "host")
    desc_path = os.path.join(d0, "host.json")
    write_json(desc_path, desc)
    mkfakesysfs(desc_path, tree)
    new_gpu = "0000:92:00.0"
    xml_new = rename_domain(XML["gpu-vm-1"], "gpu-vm-new").replace("bus='0x13'", "bus='0x92'")
    check("bus='0x92'" in xml_new, "could not put %s in the domain" % new_gpu)
    with Daemon("rescan", policy="require", sysfs=tree) as d:
        st0 = d.status()
        r, dec = hook_and_decision(d, "gpu-vm-new", "prepare", "begin", xml_new)
        eq(r.rc, 1, "prepare with a device the host lacks: %r" % r)
        contains(r.err, "device without a host node: %s" % new_gpu, "stderr before the rescan")
        contains(r.err, "not present on this host", "stderr before the rescan")

        # node 3's host bridge gets a second root port with a GPU
        pci90 = [h for h in desc["hostbridges"] if h["name"] == "pci0000:90"][0]
        pci90["devices"].append({"bdf": "0000:90:02.0", "kind": "rootport",
                                 "devices": [{"bdf": new_gpu, "kind": "gpu"}]})
        write_json(desc_path, desc)
        mkfakesysfs(desc_path, tree)
        time.sleep(0.01)
        d.hup()
        st1 = d.status()
        eq(st1["hostmap"]["devices"], st0["hostmap"]["devices"] + 2, "devices after the rescan (root port + GPU)")
        eq(st1["hostmap"]["generation"], st0["hostmap"]["generation"] + 1, "hostmap generation")
        check(st1["hostmap"]["loaded_at_usec"] > st0["hostmap"]["loaded_at_usec"], "hostmap loaded_at_usec")

        r, dec = hook_and_decision(d, "gpu-vm-new", "prepare", "begin", xml_new)
        eq(r.rc, 1, "unplanned prepare after the rescan: %r" % r)
        contains(r.err, "does not match the NUMA plan", "stderr after the rescan")
        devs = dict(zip(dec.all("PCINUMA_DEVICE"), zip(dec.all("PCINUMA_HOST_NODE"), dec.all("PCINUMA_GUEST_CELL"))))
        eq(devs.get(new_gpu), ("3", "3"), "placement of the new device (host node, guest cell)")
        XML["gpu-vm-new"] = xml_new
        good = planned("gpu-vm-new", "require", sysfs=tree)
        eq(planned_cells(good).get(new_gpu), 3, "pcinumactl plan's cell for the new device")
        r, dec = hook_and_decision(d, "gpu-vm-new", "prepare", "begin", good)
        eq((r.rc, r.err), (0, ""), "planned prepare after the rescan: %r" % r)
        eq(dec.get("PCINUMA_VERDICT"), "allow", "verdict after the rescan")

        # a tree that can no longer be read: the last good host map stays
        shutil.rmtree(tree)
        m = d.mark()
        d.signal(signal.SIGHUP)
        d.wait_event(lambda e: "keeping the previous host map" in e.message, m, what="failed rescan log line")
        st2 = d.status()
        eq((st2["hostmap"]["devices"], st2["hostmap"]["generation"]),
           (st1["hostmap"]["devices"], st1["hostmap"]["generation"]), "host map after a failed rescan")


def t_log_fields():
    """The stderr log of each kind of decision: MESSAGE_ID and fields."""
    with Daemon("fields", policy="require") as d:
        devs = gpu_vm_devices("require")
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", planned("gpu-vm-1", "require"))
        assert_decision(dec, mid=MID["START_ALLOWED"], verdict="allow", phase="prepare", policy="require",
                        domain="gpu-vm-1", devices=devs)
        eq(dec.prefix, "", "priority prefix of an allow")
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"])
        assert_decision(dec, mid=MID["START_REFUSED"], verdict="refuse", phase="prepare", policy="require",
                        domain="gpu-vm-1", devices=devs)
        r, dec = hook_and_decision(d, "gpu-vm-1", "migrate", "begin",
                                   planned("gpu-vm-1", "require").replace('migratable="yes"', 'migratable="no"'))
        assert_decision(dec, mid=MID["MIGRATION_REFUSED"], verdict="refuse", phase="migrate", policy="require",
                        domain="gpu-vm-1")
        # a domain name with spaces and quotes is quoted and escaped
        odd = 'vm "one" \\ two'
        r, dec = hook_and_decision(d, odd, "prepare", "begin",
                                   rename_domain(planned("gpu-vm-1", "require"), "vm-odd"))
        eq(dec.get("PCINUMA_DOMAIN"), odd, "PCINUMA_DOMAIN with spaces, quotes, backslash")
        check(' PCINUMA_DOMAIN="vm \\"one\\" \\\\ two" ' in dec.raw, "quoting in the raw line: %r" % dec.raw)

        write_policy(d.policy_file, "preferred")
        d.hup()
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"])
        assert_decision(dec, mid=MID["START_WARNED"], verdict="warn", phase="prepare", policy="preferred",
                        domain="gpu-vm-1", devices=gpu_vm_devices("preferred"))


def t_prepare_memo():
    """A planned domain that comes back unchanged is answered from pcinumad's
    memo of prepare answers (lib/core/memo.h): the same answer and the same
    log entry as the first time (status prepare_memo.answers counts it); an edit, another policy or another host
    map is decided in full."""
    with Daemon("memo", policy="require") as d:
        good = planned("gpu-vm-1", "require")
        base = d.status()["prepare_memo"]["answers"]
        r1, dec1 = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", good)
        eq((r1.rc, r1.err), (0, ""), "first prepare of the planned domain: %r" % r1)
        eq(d.status()["prepare_memo"]["answers"], base, "memo answers after the first prepare")
        r2, dec2 = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", good)
        eq(d.status()["prepare_memo"]["answers"], base + 1, "memo answers after the second prepare")
        eq((r2.rc, r2.out, r2.err), (r1.rc, r1.out, r1.err), "the memo's answer")
        eq((dec2.message, dec2.fields, dec2.prefix), (dec1.message, dec1.fields, dec1.prefix), "the memo's log entry")
        check(len(dec1.all("PCINUMA_DEVICE")) == 16 and dec1.get("PCINUMA_FIDELITY"),
              "the log entry shows the plan: %r" % dec1)

        # libvirt's id='N' on the root element, numbered anew at each start
        with_id = good.replace("<domain ", "<domain id='7' ", 1)
        check(with_id != good, "could not add an id to the domain")
        hook_and_decision(d, "gpu-vm-1", "prepare", "begin", with_id)
        r3, dec3 = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", with_id.replace("id='7'", "id='8'"))
        eq(d.status()["prepare_memo"]["answers"], base + 2, "memo answers for id='7' (new) and id='8' (the same)")
        eq((r3.rc, r3.err, dec3.fields), (r1.rc, r1.err, dec1.fields), "answer with another id")

        # a device the user moved: decided in full (refused under require)
        moved = re.sub(r"(<hostdev .*?<address type=.pci. domain=.0x0000. bus=.0x)([0-9a-f]{2})",
                       lambda m: m.group(1) + ("21" if m.group(2) != "21" else "22"), good, count=1, flags=re.S)
        check(moved != good, "could not move a device")
        r4, dec4 = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", moved)
        eq(r4.rc, 1, "prepare of a moved device: %r" % r4)
        eq(dec4.get("PCINUMA_VERDICT"), "refuse", "verdict of a moved device")
        eq(d.status()["prepare_memo"]["answers"], base + 2, "memo answers after an edited domain")

        # another policy (and host map: SIGHUP reads both again)
        write_policy(d.policy_file, "preferred")
        d.hup()
        r5, dec5 = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", good)
        eq(dec5.get("PCINUMA_POLICY"), "preferred", "policy of the prepare after the reload")
        eq(d.status()["prepare_memo"]["answers"], base + 2, "memo answers after the reload")
        r6, dec6 = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", good)
        eq(d.status()["prepare_memo"]["answers"], base + 3, "memo answers after the reload, again")
        eq((r6.rc, r6.err, dec6.fields), (r5.rc, r5.err, dec5.fields), "the memo's answer after the reload")


def t_prepare_memo_reload():
    """The memo of prepare answers stays warm across a reload (SIGHUP: the
    policy and a rescan of the host) that finds the same policy and the
    same host: pcinumad keeps its host map and policy, and their
    generations, when the new ones are equal in content (memo.h).  A host
    that changed, or a policy that changed in any setting, even one that
    does not change this domain's answer, is decided in full again."""
    desc = json.loads(read_text(os.path.join(ARGS.hosts, "sample-4n.json")))
    d0 = fresh_dir("memo-reload")
    tree = os.path.join(d0, "host")
    desc_path = os.path.join(d0, "host.json")
    write_json(desc_path, desc)
    mkfakesysfs(desc_path, tree)
    with Daemon("memo-reload", policy="require", sysfs=tree) as d:
        def answers():
            return d.status()["prepare_memo"]["answers"]

        def prepare():
            return hook_and_decision(d, "gpu-vm-1", "prepare", "begin", good)

        good = planned("gpu-vm-1", "require", sysfs=tree)
        r1, dec1 = prepare()
        eq((r1.rc, r1.err, dec1.get("PCINUMA_VERDICT")), (0, "", "allow"), "first prepare of the planned domain: %r" % r1)
        prepare()
        base = answers()
        eq(base, 1, "memo answers once warm")
        st = d.status()
        gen, devices = st["hostmap"]["generation"], st["hostmap"]["devices"]

        # A reload that changes nothing: the same settings, written another
        # way, and the same host.  The host map is rebuilt all the same.
        write_policy(d.policy_file, json.dumps({"default": {"policy": "require", "topology": "paths"}}, indent=8) + "\n")
        d.hup()
        eq(d.status()["hostmap"]["generation"], gen + 1, "host map generation after the reload (one more rebuild)")
        r2, dec2 = prepare()
        eq(answers(), base + 1, "memo answers after a reload that found the same policy and host")
        eq((r2.rc, r2.err, dec2.message, dec2.fields), (r1.rc, r1.err, dec1.message, dec1.fields),
           "the memo's answer after the reload")
        d.hup()
        prepare()
        eq(answers(), base + 2, "memo answers after a second reload that changed nothing")

        # The host changes where this domain has no device (a GPU appears
        # on node 3): the host map is not the one the answer was made with.
        pci90 = [h for h in desc["hostbridges"] if h["name"] == "pci0000:90"][0]
        pci90["devices"].append({"bdf": "0000:90:02.0", "kind": "rootport",
                                 "devices": [{"bdf": "0000:92:00.0", "kind": "gpu"}]})
        write_json(desc_path, desc)
        mkfakesysfs(desc_path, tree)
        d.hup()
        eq(d.status()["hostmap"]["devices"], devices + 2, "devices after the rescan (root port + GPU)")
        r3, dec3 = prepare()
        eq(answers(), base + 2, "memo answers after the host changed")
        eq((r3.rc, r3.err, dec3.get("PCINUMA_VERDICT")), (0, "", "allow"), "prepare after the host changed: %r" % r3)
        prepare()
        eq(answers(), base + 3, "memo answers after the host changed, again")

        # A policy setting that this answer does not show (the hook's
        # timeout): another policy all the same.
        write_policy(d.policy_file, json.dumps({"default": {"policy": "require"}, "hook": {"timeout_ms": 9000}}) + "\n")
        d.hup()
        r4, dec4 = prepare()
        eq(answers(), base + 3, "memo answers after the policy changed")
        eq((r4.rc, r4.err, dec4.fields), (r1.rc, r1.err, dec1.fields), "the full decision after the policy changed")
        prepare()
        eq(answers(), base + 4, "memo answers after the policy changed, again")


class FakeJournal:
    PATH = "/run/systemd/journal/socket"

    def __init__(self):
        self.created = []
        self.entries = []      # (pid, fields)
        self.lock = threading.Lock()
        self.stop_flag = False

    def busy(self):
        """A reason to skip when a journald (or anything) listens there."""
        if not os.path.lexists(self.PATH):
            return None
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            probe.connect(self.PATH)
            return "%s exists and is live (a journald runs here)" % self.PATH
        except OSError:
            return None
        finally:
            probe.close()

    def start(self):
        for d in ("/run/systemd", "/run/systemd/journal"):
            if not os.path.isdir(d):
                os.mkdir(d, 0o755)
                self.created.append(d)
        if os.path.lexists(self.PATH):
            os.unlink(self.PATH)     # stale: nobody listens (checked by busy())
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(self.PATH)
        self.created.append(self.PATH)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.s.settimeout(0.05)
        _cleanups.append(self.close)
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        fdsize = array.array("i").itemsize
        while not self.stop_flag:
            try:
                data, anc, flags, _ = self.s.recvmsg(1 << 20, socket.CMSG_SPACE(16 * fdsize) +
                                                     socket.CMSG_SPACE(struct.calcsize("3i")))
            except socket.timeout:
                continue
            except OSError:
                return
            pid = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", cdata[:struct.calcsize("3i")])[0]
                elif level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(cdata[:len(cdata) - len(cdata) % fdsize])
                    for fd in fds:       # a large entry comes as a memfd
                        os.lseek(fd, 0, 0)
                        chunks = []
                        while True:
                            c = os.read(fd, 1 << 20)
                            if not c:
                                break
                            chunks.append(c)
                        os.close(fd)
                        data = b"".join(chunks)
            try:
                fields = parse_journal_datagram(data)
            except Exception as e:
                fields = [("PARSE_ERROR", str(e)), ("RAW", repr(data[:200]))]
            with self.lock:
                self.entries.append((pid, fields))

    def events(self, pid):
        with self.lock:
            out = []
            for p, fields in self.entries:
                if p == pid:
                    msg = dict(fields).get("MESSAGE", "")
                    out.append(Event(msg, fields))
            return out

    def close(self):
        self.stop_flag = True
        if getattr(self, "t", None):
            self.t.join(2)
        if getattr(self, "s", None):
            self.s.close()
        for p in reversed(self.created):
            try:
                if os.path.isdir(p):
                    os.rmdir(p)
                else:
                    os.unlink(p)
            except OSError:
                pass
        self.created = []
        if self.close in _cleanups:
            _cleanups.remove(self.close)


def t_journal():
    if os.geteuid() != 0:
        return "not root: cannot create /run/systemd/journal"
    j = FakeJournal()
    why = j.busy()
    if why:
        return why
    j.start()
    try:
        with Daemon("journal", policy="require", log_target="journal") as d:
            devs = gpu_vm_devices("require")
            cases = [("allow", planned("gpu-vm-1", "require"), "prepare", MID["START_ALLOWED"], 0),
                     ("refuse", XML["gpu-vm-1"], "prepare", MID["START_REFUSED"], 1),
                     ("migrate", planned("gpu-vm-1", "require").replace('migratable="yes"', 'migratable="no"'),
                      "migrate", MID["MIGRATION_REFUSED"], 1)]
            for label, x, phase, mid, rc in cases:
                r = run_hook("gpu-vm-1", phase, "begin", x, d.sock)
                eq(r.rc, rc, "%s: hook exit: %r" % (label, r))
            deadline = time.monotonic() + T(5)
            while time.monotonic() < deadline:
                ev = [e for e in j.events(d.pid) if e.get("PCINUMA_VERDICT")]
                if len(ev) >= 3:
                    break
                time.sleep(0.02)
            all_ev = j.events(d.pid)
            check(any(e.mid == MID["DAEMON_READY"] for e in all_ev),
                  "no DAEMON_READY entry from pid %d in the journal; got %d entries from it, %d in all"
                  % (d.pid, len(all_ev), len(j.entries)))
            for e in all_ev:
                eq(e.get("SYSLOG_IDENTIFIER"), "pcinumad", "SYSLOG_IDENTIFIER")
                check(e.get("PARSE_ERROR") is None, "unparsable datagram: %r" % e.fields)
            eq(len(ev), 3, "decision entries in the journal: %r" % ev)
            for (label, x, phase, mid, rc), e in zip(cases, ev):
                assert_decision(e, mid=mid, verdict="refuse" if rc else "allow", phase=phase, policy="require",
                                domain="gpu-vm-1", devices=devs if phase == "prepare" else None)
                eq(e.get("PRIORITY"), "6" if rc == 0 else "4", "%s: PRIORITY" % label)
                check(e.message, "%s: empty MESSAGE" % label)
            contains(ev[1].message, "does not match the NUMA plan", "refusal MESSAGE")
            # a value with a newline travels in the binary-safe form
            name = "gpu-vm-1\nsecond line"
            r = run_hook(name, "prepare", "begin", planned("gpu-vm-1", "require"), d.sock)
            eq(r.rc, 0, "hook with a newline in the name: %r" % r)
            deadline = time.monotonic() + T(5)
            while time.monotonic() < deadline:
                ev = [e for e in j.events(d.pid) if e.get("PCINUMA_VERDICT")]
                if len(ev) >= 4:
                    break
                time.sleep(0.02)
            eq(len(ev), 4, "decision entries after the newline name")
            eq(ev[3].get("PCINUMA_DOMAIN"), name, "PCINUMA_DOMAIN with a newline")
            eq(ev[3].get("PCINUMA_VERDICT"), "allow", "verdict for the newline name")
            # nothing went to stderr but what precedes log_setup
            dec_on_stderr = d.decisions()
            eq(dec_on_stderr, [], "decisions logged on stderr with --log-target journal")
    finally:
        j.close()
    check(not os.path.lexists(FakeJournal.PATH), "the fake journal socket was not removed")


class NotifySocket:
    def __init__(self, path):
        self.path = path
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(path)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.msgs = []       # (monotonic time received, pid, text)

    def drain(self, timeout=0.0):
        self.s.settimeout(timeout if timeout > 0 else 0.0001)
        while True:
            try:
                data, anc, _, _ = self.s.recvmsg(65536, socket.CMSG_SPACE(struct.calcsize("3i")))
            except (socket.timeout, BlockingIOError):
                return self.msgs
            pid = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", cdata[:12])[0]
            self.msgs.append((time.monotonic(), pid, data.decode("utf-8", "replace")))
            self.s.settimeout(0.0001)

    def wait_for(self, pred, since, timeout=10):
        timeout = T(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.drain(0.05)
            for i in range(since, len(self.msgs)):
                if pred(self.msgs[i][2]):
                    return i
        raise Failure("no matching sd_notify message; got %r" % [m[2] for m in self.msgs[since:]])

    def close(self):
        self.s.close()
        os.unlink(self.path)


def kv(msg):
    return dict(line.split("=", 1) for line in msg.split("\n") if "=" in line)


def t_sd_notify():
    dd = fresh_dir("notify")
    n = NotifySocket(os.path.join(dd, "notify.sock"))
    try:
        env = dict(os.environ)
        env["NOTIFY_SOCKET"] = n.path
        d = Daemon("notify", policy="require", env=env)
        with d:
            i = n.wait_for(lambda m: "READY=1" in kv(m) or kv(m).get("READY") == "1", 0)
            eq(n.msgs[i][1], d.pid, "sender pid of READY=1")
            j = n.wait_for(lambda m: "STATUS" in kv(m), 0)
            status = kv(n.msgs[j][2])["STATUS"]
            contains(status, d.sock, "STATUS=")
            contains(status, "61 PCI devices", "STATUS=")
            contains(status, "default require", "STATUS=")
            since = len(n.msgs)
            write_policy(d.policy_file, "legacy")
            t_before = time.clock_gettime(time.CLOCK_MONOTONIC)
            d.hup()
            t_after = time.clock_gettime(time.CLOCK_MONOTONIC)
            i = n.wait_for(lambda m: kv(m).get("RELOADING") == "1", since)
            fields = kv(n.msgs[i][2])
            check("MONOTONIC_USEC" in fields, "RELOADING=1 without MONOTONIC_USEC: %r" % n.msgs[i][2])
            usec = int(fields["MONOTONIC_USEC"])
            check(t_before * 1e6 - 1000 <= usec <= t_after * 1e6 + 1000,
                  "MONOTONIC_USEC=%d not between %d and %d" % (usec, t_before * 1e6, t_after * 1e6))
            k = n.wait_for(lambda m: kv(m).get("READY") == "1", i + 1)
            check(k > i, "READY=1 came before RELOADING=1")
            s = n.wait_for(lambda m: "STATUS" in kv(m) and "default legacy" in kv(m)["STATUS"], i + 1)
            check(s >= k, "STATUS with the new policy came before READY=1")
            since = len(n.msgs)
        # __exit__ stopped it with SIGTERM
        n.wait_for(lambda m: kv(m).get("STOPPING") == "1", since)
    finally:
        n.close()


def t_socket_activation():
    d = Daemon("activation", policy="require")
    act_path = os.path.join(d.dir, "activated.sock")
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(act_path)
    ls.listen(16)
    # the daemon's own --socket path must stay unused
    d.sock = os.path.join(d.dir, "run", "unused.sock")
    os.makedirs(os.path.dirname(d.sock))
    try:
        pid = spawn_activated(d.argv(), ls.fileno(), d.log_path)
        d.proc = SpawnedProc(pid)
        d.pid = pid
        _live.append(d)
    finally:
        ls.close()     # the daemon holds its copy
    with d:
        d.sock = act_path     # where clients go
        d.wait_ready()
        contains(d.log_text(), "Listening on the socket passed by systemd", "daemon log")
        check(not os.path.exists(os.path.join(d.dir, "run", "unused.sock")),
              "pcinumad bound its --socket path although it was socket-activated")
        r, dec = hook_and_decision(d, "gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"])
        eq(r.rc, 1, "hook through the activated socket: %r" % r)
        contains(r.err, "does not match the NUMA plan", "hook stderr")
        eq(dec.get("PCINUMA_VERDICT"), "refuse", "verdict")
        r = run_hook("gpu-vm-1", "prepare", "begin", planned("gpu-vm-1", "require"), d.sock)
        eq((r.rc, r.err), (0, ""), "planned hook through the activated socket: %r" % r)
        st = d.status()
        eq(st["pid"], d.pid, "status pid (sh exec'ed pcinumad)")
        eq(st["requests"]["hook"], 2, "hook requests")


def t_activation_wrong_pid():
    """LISTEN_PID of another process: the fd is not ours, bind --socket."""
    d = Daemon("activation-wrongpid", policy="require")
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other_path = os.path.join(d.dir, "other.sock")
    other.bind(other_path)
    other.listen(4)
    env = dict(os.environ)
    env.update(LISTEN_FDS="1", LISTEN_PID="1")
    d.env = env
    try:
        with d:
            contains(d.log_text(), "Listening on %s" % d.sock, "daemon log")
            eq(d.status()["policy"]["default"], "require", "status through --socket")
    finally:
        other.close()


def t_status_cli():
    with Daemon("status", policy="require", extra=["--workers", "3"]) as d:
        sock = d.sock
        r = run_hook("gpu-vm-1", "prepare", "begin", planned("gpu-vm-1", "require"), sock)
        eq(r.rc, 0, "hook 1: %r" % r)
        r = run_hook("gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"], sock)
        eq(r.rc, 1, "hook 2: %r" % r)
        r = run_hook("gpu-vm-1", "migrate", "begin", XML["gpu-vm-1"], sock)
        eq(r.rc, 0, "hook 3: %r" % r)
        # over 64 KiB of XML: decided on a worker thread, not the event loop
        padded = XML["gpu-vm-1"].replace("</domain>", "<!-- %s -->\n</domain>" % ("p" * (100 * 1024)))
        r = run_hook("gpu-vm-1", "restore", "begin", padded, sock)
        eq((r.rc, r.err), (0, ""), "hook 4: %r" % r)
        check(r.out == padded, "hook 4: the restored XML is not the input")
        with connect(sock) as s:
            s.sendall(encode(b"nope"))
            recv_frame(s)
        time.sleep(1.1)     # uptime and age reach 1 s
        p = subprocess.run([ARGS.pcinumactl, "status", "--socket", sock, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        eq(p.returncode, 0, "pcinumactl status --json exit (stderr %r)" % p.stderr)
        st = json.loads(p.stdout)
        eq(st["pid"], d.pid, "pid")
        check(1 <= st["uptime_sec"] <= 30, "uptime_sec %r" % st["uptime_sec"])
        eq(st["socket"], sock, "socket")
        eq(st["libvirt_uri"], "none", "libvirt_uri")
        eq(st.get("libvirt", "absent"), None, "libvirt (not watched)")
        h = st["hostmap"]
        eq((h["sysfs_root"], h["devices"], h["mdevs"], h["nodes"], h["generation"], h["udev"]),
           (FIXTURE, 61, 2, 4, 1, False), "hostmap")
        check(1 <= h["age_sec"] <= 30, "hostmap.age_sec %r" % h["age_sec"])
        now_usec = time.time() * 1e6
        check(0 < now_usec - h["loaded_at_usec"] < 60e6, "hostmap.loaded_at_usec %r" % h["loaded_at_usec"])
        pol = st["policy"]
        eq((pol["file"], pol["from_file"], pol["default"], pol["rules"], pol["last_error"]),
           (d.policy_file, True, "require", 0, None), "policy")
        check(0 < now_usec - pol["loaded_at_usec"] < 60e6, "policy.loaded_at_usec %r" % pol["loaded_at_usec"])
        # 4 hook calls, 1 malformed frame, and this status request
        rq = dict(st["requests"])
        total = rq.pop("total")
        eq(rq, {"hook": 4, "status": 1, "errors": 1, "rejected_peers": 0, "connections": 1}, "requests")
        check(total in (5, 6), "requests.total %r" % total)
        eq(st["verdicts"], {"allow": 1, "warn": 0, "refuse": 1, "pass": 2, "restart": 0}, "verdicts")
        eq(st["restarts"], {"window_ms": 5000, "persistent_domains": None, "requested": 0, "restarted": 0,
                            "fallback": 0, "lost": 0, "skipped": 0, "unplanned_us_sum": 0, "unplanned_us_max": 0,
                            "total_us_sum": 0, "total_us_max": 0, "define_waits": 0, "define_waits_in_vain": 0},
           "restarts (no watcher)")
        # the large one was decided on a worker (the others at once); nothing runs now
        wk = dict(st["workers"])
        longest = wk.pop("longest_run_ms"), wk.pop("longest_wait_ms")
        eq(wk, {"threads": 3, "started": 3, "busy": 0, "queued": 0, "completed": 1, "busy_large": 0,
                "queued_large": 0, "refused_busy": 0}, "workers")
        check(all(isinstance(x, int) and 0 <= x < 60000 for x in longest), "workers.longest_run_ms/_wait_ms %r"
              % (longest,))

        p = subprocess.run([ARGS.pcinumactl, "status", "--socket", sock],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        eq(p.returncode, 0, "pcinumactl status exit (stderr %r)" % p.stderr)
        out = p.stdout
        m = re.search(r"^pcinumad \S+ \(pid (\d+)\), up (\d+) s, socket (\S+)$", out, re.M)
        check(m, "no pid/uptime line in:\n%s" % out)
        eq((int(m.group(1)), m.group(3)), (d.pid, sock), "pid and socket (human)")
        check(int(m.group(2)) >= 1, "uptime (human) %s" % m.group(2))
        m = re.search(r"^host map:\s+61 PCI devices, 2 mdevs, 4 NUMA nodes from (\S+); built (\d+) s ago "
                      r"\(generation 1\), rescanned on SIGHUP only$", out, re.M)
        check(m, "no host map line in:\n%s" % out)
        eq(m.group(1), FIXTURE, "sysfs root (human)")
        check(int(m.group(2)) >= 1, "host map age (human) %s" % m.group(2))
        m = re.search(r"^policy:\s+(\S+), default require, 0 rules, loaded (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)$",
                      out, re.M)
        check(m, "no policy line in:\n%s" % out)
        eq(m.group(1), d.policy_file, "policy file (human)")
        loaded = time.mktime(time.strptime(m.group(2), "%Y-%m-%d %H:%M:%S"))
        check(abs(loaded - pol["loaded_at_usec"] / 1e6) < 2, "policy load time (human) %s" % m.group(2))
        check(re.search(r"^requests:\s+%d total, 4 hook, 2 status, 1 errors, 0 rejected peers, 1 open connections$"
                        % (total + 1), out, re.M), "requests line in:\n%s" % out)
        check(re.search(r"^verdicts:\s+1 allow, 0 warn, 1 refuse, 2 pass, 0 restart$", out, re.M),
              "verdicts line in:\n%s" % out)
        check(re.search(r"^restarts:\s+0 asked, 0 into the plan, 0 as the client asked \(the plan did not start\), "
                        r"0 lost, 0 not done; window 5000 ms$", out, re.M), "restarts line in:\n%s" % out)
        check(re.search(r"^workers:\s+3 threads, 0 busy, 0 queued, 1 completed; longest decision \d+ ms$", out, re.M),
              "workers line in:\n%s" % out)
        check(re.search(r"^libvirt:\s+not watched \(--libvirt-uri none\)$", out, re.M),
              "libvirt line in:\n%s" % out)
    # a stopped daemon: pcinumactl status fails and says so
    p = subprocess.run([ARGS.pcinumactl, "status", "--socket", sock],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    eq(p.returncode, 1, "pcinumactl status against a stopped daemon")
    contains(p.stderr, "is pcinumad running?", "pcinumactl status stderr")


def t_socket_lifecycle():
    """A live socket is not stolen; a stale one is replaced; the socket is
    created 0600 and removed when the daemon stops."""
    with Daemon("lifecycle", policy="require") as d:
        eq(os.stat(d.sock).st_mode & 0o777, 0o600, "socket mode")
        d2 = Daemon("lifecycle2", policy="require", socket_path=d.sock)
        d2.start(wait=False)
        try:
            rc = d2.proc.wait(T(10))
        except subprocess.TimeoutExpired:
            raise Failure("a second pcinumad on a live socket kept running")
        finally:
            d2.kill()
        check(rc != 0, "second pcinumad exit status %d" % rc)
        contains(d2.log_text(), "Another process is already listening", "second pcinumad")
        eq(d.status()["requests"]["status"], 1, "the first daemon still serves")
    # the first one is stopped: its socket file is gone
    check(not os.path.lexists(d.sock), "the socket file %s is left after the daemon stopped" % d.sock)
    # a stale socket file (a daemon killed with SIGKILL leaves one): a new
    # daemon replaces it
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(d.sock)
    stale.close()
    check(os.path.exists(d.sock), "the stale socket file was made")
    with Daemon("lifecycle3", policy="require", socket_path=d.sock) as d3:
        eq(d3.status()["pid"], d3.pid, "daemon on a stale socket path")


def t_max_connections():
    with Daemon("maxconn", policy="require", extra=["--max-connections", "2"]) as d:
        a = connect(d.sock)
        b = None
        try:
            # wait until a is the only connection (wait_ready's probe is gone)
            deadline = time.monotonic() + T(5)
            while True:
                a.sendall(encode({"version": 1, "type": "status"}))
                if recv_frame(a)["status"]["requests"]["connections"] == 1:
                    break
                check(time.monotonic() < deadline, "the daemon still counts other connections")
                time.sleep(0.02)
            b = connect(d.sock)
            b.sendall(encode({"version": 1, "type": "status"}))
            eq(recv_frame(b)["status"]["requests"]["connections"], 2, "connections with a and b open")
            m = d.mark()
            c = connect(d.sock, 5)
            try:
                c.sendall(encode({"version": 1, "type": "status"}))
                r = recv_frame(c)
            except (ConnectionResetError, BrokenPipeError):
                r = None
            c.close()
            eq(r, None, "third connection with --max-connections 2")
            contains("\n".join(d.lines(m)), "Too many connections", "daemon log")
        finally:
            a.close()
            if b:
                b.close()
        d.wait_connections(1)


def cpu_ticks(pid):
    """utime + stime of a process, in clock ticks (/proc/PID/stat fields
    14 and 15; the command name in parentheses may hold spaces)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def t_emfile():
    """Out of file descriptors (EMFILE): the accept handler neither spins
    nor floods the log; clients wait in the backlog and are served once
    descriptors are free.  What is asserted is a count (CPU ticks used
    while stuck at EMFILE, over a window of a few seconds), not a time:
    a daemon that spins uses the whole window, one that waits uses ~0."""
    import resource
    with Daemon("emfile", policy="require",
                extra=["--request-timeout-ms", "3600000", "--max-connections", "1000"]) as d:
        good = planned("gpu-vm-1", "require")
        r = run_hook("gpu-vm-1", "prepare", "begin", good, d.sock)
        eq((r.rc, r.err), (0, ""), "a hook call before the limit: %r" % r)
        d.wait_connections(1)          # only the status call itself
        n_open = len(os.listdir("/proc/%d/fd" % d.pid))
        limit = n_open + 6
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (limit, limit))
        m = d.mark()
        clients = []
        try:
            for _ in range(30):        # 6 get a descriptor, the rest wait in the backlog
                clients.append(connect(d.sock))
            deadline = time.monotonic() + T(10)
            while len(os.listdir("/proc/%d/fd" % d.pid)) < limit:
                check(time.monotonic() < deadline, "pcinumad never reached its descriptor limit (%d)" % limit)
                time.sleep(0.02)
            time.sleep(0.3)            # let it meet EMFILE
            window = 3.0
            t0 = cpu_ticks(d.pid)
            time.sleep(window)
            used = cpu_ticks(d.pid) - t0
            hz = os.sysconf("SC_CLK_TCK")
            print("# at EMFILE: pcinumad used %d ticks of CPU (%d per second) in a %.0f s window"
                  % (used, hz, window))
            check(used <= hz * window * 0.1,
                  "pcinumad used %d CPU ticks in %.0f s while out of descriptors (at most %d expected): "
                  "the accept handler spins" % (used, window, hz * window * 0.1))
            emfile_lines = [l for l in d.lines(m) if "Too many open files" in l]
            check(1 <= len(emfile_lines) <= 2,
                  "EMFILE is logged once (and recovery once): %d lines, first: %r"
                  % (len(emfile_lines), emfile_lines[:3]))
            check(d.poll() is None, "pcinumad exited at EMFILE")
        finally:
            for c in clients:
                c.close()
        # descriptors are free again: the daemon serves
        r = run_hook("gpu-vm-1", "prepare", "begin", good, d.sock, timeout_ms=int(T(20000)))
        eq((r.rc, r.err), (0, ""), "a hook call once the clients have gone: %r" % r)
        r = run_hook("gpu-vm-1", "prepare", "begin", XML["gpu-vm-1"], d.sock, timeout_ms=int(T(20000)))
        eq(r.rc, 1, "an unplanned domain is still refused: %r" % r)
        contains(r.err, "does not match the NUMA plan", "hook stderr after EMFILE")


def t_big_xml():
    """A 3 MiB domain XML (within the 4 MiB limit) goes through; the hook
    refuses one over 4 MiB without asking."""
    with Daemon("bigxml", policy="require") as d:
        base = planned("gpu-vm-1", "require")
        pad = "<!-- %s -->" % ("x" * (3 * 1024 * 1024))
        big = base.replace("</domain>", pad + "\n</domain>")
        r, dec = hook_and_decision(d, "gpu-vm-1", "restore", "begin", big)
        eq((r.rc, r.err), (0, ""), "restore of a 3 MiB XML: exit/stderr %r" % ((r.rc, shorten(r.err, 300)),))
        check(r.out == big, "restore of a 3 MiB XML: stdout differs (%d bytes vs %d)" % (len(r.out), len(big)))
        # UTF-8 and JSON-special characters survive the round trip byte for byte
        odd = base.replace("</domain>", "<!-- caf\u00e9 \u20ac \\ \"q\" \t \U0001f600 -->\n</domain>")
        r = run_hook("gpu-vm-1", "restore", "begin", odd, d.sock)
        eq((r.rc, r.err), (0, ""), "restore of an XML with UTF-8: %r" % r)
        check(r.out == odd, "restore of an XML with UTF-8 and escapes: stdout differs")
        huge = base.replace("</domain>", "<!-- %s -->\n</domain>" % ("x" * (5 * 1024 * 1024)))
        before = d.status()["requests"]["total"]
        r = run_hook("gpu-vm-1", "prepare", "begin", huge, d.sock)
        eq(r.rc, 1, "prepare of a 5 MiB XML: %r" % r)
        contains(r.err, "larger than 4 MiB", "stderr")
        eq(d.status()["requests"]["total"], before + 1, "requests (only this status) after the 5 MiB XML")


def heavy_migration_xml(planned_xml, n=None):
    """The heaviest request known to build (issue 24, finding 1): an
    incoming migration of a planned domain with n PCI hostdevs, its mark
    listing the same n devices in reverse order.  On the code of issue 24's
    report, 24,000 of them (3.7 MB) took ~40 s of CPU (80 s on a loaded
    test machine), spent comparing every hostdev with every mark device.
    The core now refuses that document in well under a millisecond, before
    parsing (DOMAIN_XML_TAGS_MAX); so by default n is the most that stays
    under the tag limit (about 3,900: the whole document is parsed, then
    refused for having more devices than the host, 20-60 ms here).  The
    devices are not on the fixture host, so the verdict is a refusal."""
    head = planned_xml[:planned_xml.index("<pcinuma:topology")]
    topology = re.search(r"<pcinuma:topology\b[^>]*>", planned_xml).group(0)
    middle = planned_xml[planned_xml.index("</pcinuma:topology>"):planned_xml.index("<devices>") + len("<devices>")]
    if n is None:
        n = (16384 - (head + topology + middle).count("<") - 64) // 4
    bdfs = [(b, sl, f) for b in range(1, 256) for sl in range(32) for f in range(8)][:n]
    mark = "".join('<pcinuma:device host="0000:%02x:%02x.%x"/>' % x for x in reversed(bdfs))
    hostdevs = "".join('<hostdev mode="subsystem" type="pci"><source><address domain="0" bus="%d" slot="%d" '
                       'function="%d"/></source></hostdev>' % x for x in bdfs)
    xml = head + topology + mark + middle + hostdevs + "</devices></domain>\n"
    check('migratable="yes"' in topology, "the planned domain's mark is not migratable: %s" % topology)
    check(len(xml.encode()) < 4 * 1024 * 1024, "the heavy request is %d bytes, over the 4 MiB cap" % len(xml))
    check(len(xml.encode()) > 256 * 1024, "the heavy request is %d bytes, not a large job" % len(xml))
    return xml


class HeavyClient(threading.Thread):
    """Sends one frame again and again on fresh connections until stopped,
    recording for each when it was sent in full and when (and what) the
    answer came: [t_sent, t_answered or None, answer or None]."""

    def __init__(self, sock, frame, stop):
        super().__init__(daemon=True)
        self.sock, self.frame, self.stop = sock, frame, stop
        self.log = []
        self.error = None

    def run(self):
        try:
            while not self.stop.is_set():
                self._one()
        except Exception as e:      # reported by the test
            self.error = "%s: %s" % (type(e).__name__, e)

    def _one(self):
        with connect(self.sock, 10) as s:
            s.settimeout(0.2)
            view = memoryview(self.frame)
            while view and not self.stop.is_set():
                try:
                    view = view[s.send(view[:1 << 20]):]
                except socket.timeout:
                    continue
            if view:
                return
            entry = [time.monotonic(), None, None]
            self.log.append(entry)
            buf = b""
            while not self.stop.is_set():
                if not select.select([s], [], [], 0.1)[0]:
                    continue
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise Failure("the daemon closed a heavy request's connection without an answer")
                buf += chunk
                if len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                    entry[2] = json.loads(buf[4:])
                    entry[1] = time.monotonic()
                    return


def t_heavy_requests():
    """One slow request never delays another domain's verdict (issue 24):
    while three clients keep sending the heaviest incoming migration
    (heavy_migration_xml(), decided on the worker threads), start checks
    through the real hook, one a second, are each answered in under 2 s
    with the right verdict; heavy requests are being decided around each
    of them; and the watchdog (WATCHDOG_USEC set to the same 2 s, a fake
    notify socket) gets its ping within every period.  On a daemon that
    decided everything on its event loop, with the core before its bounds
    (24,000 hostdevs), the first heavy request held everything: the hook
    gave up after its timeout ("starting anyway") and no WATCHDOG=1 came.
    With the bounds the heaviest request costs tens of ms, so this test
    now guards both halves (workers and bounds): it fails only if both go.
    The one timed assertion of the suite that is not a deadline: the bound
    is the issue's."""
    period = T(2.0)
    dd = fresh_dir("heavy-notify")
    n = NotifySocket(os.path.join(dd, "notify.sock"))
    env = scrubbed_env()
    env.pop("WATCHDOG_PID", None)
    env.update(NOTIFY_SOCKET=n.path, WATCHDOG_USEC=str(int(period * 1e6)))
    # The fleet's opt-in (migration: same-topology): under the default
    # (refuse) an incoming planned domain is refused before its devices
    # are compared, which is cheap and would test nothing.
    d = Daemon("heavy", policy=fleet_policy("require"), env=env, extra=["--workers", "2"])
    stop = threading.Event()
    # each message's time is when it is read: read as they come
    drainer = threading.Thread(target=lambda: [n.drain(0.05) for _ in iter(stop.is_set, True)], daemon=True)
    clients = []
    try:
        drainer.start()
        d.start()
        good, bad = planned("gpu-vm-1", "require", fleet=True), XML["gpu-vm-1"]
        frame = encode({"version": 1, "type": "hook", "argv": ["heavy", "migrate", "begin", "-"],
                        "xml": heavy_migration_xml(good)})
        clients = [HeavyClient(d.sock, frame, stop) for _ in range(3)]
        for c in clients:
            c.start()
        deadline = time.monotonic() + T(10)
        while not any(c.log for c in clients):
            check(time.monotonic() < deadline, "no heavy request was sent within %.0f s" % T(10))
            time.sleep(0.05)
        t_heavy = time.monotonic()
        time.sleep(1.0)
        checks = []
        for i in range(4):
            t0 = time.monotonic()
            r = run_hook("gpu-vm-1", "prepare", "begin", good if i % 2 == 0 else bad, d.sock)
            checks.append((t0, time.monotonic(), r))
            time.sleep(max(0.0, t0 + 1.0 - time.monotonic()))
        t_end = time.monotonic()
        heavy = [e for c in clients for e in list(c.log)]
        # Every finding at once: on a daemon that decides on its loop, both
        # the start checks and the watchdog fail.
        problems = []
        for i, (t0, t1, r) in enumerate(checks):
            print("# start check %d: %.3f s" % (i, r.elapsed))
            if i % 2 == 0:
                ok = (r.rc, r.out, r.err) == (0, "", "")
            else:
                ok = r.rc == 1 and "does not match the NUMA plan" in r.err and "check skipped" not in r.err
            if not ok:
                problems.append("start check %d (%s) during heavy requests: %r"
                                % (i, "planned: allow" if i % 2 == 0 else "unplanned: refuse", r))
            if r.elapsed >= period:
                problems.append("start check %d took %.2f s during heavy requests (bound %.1f s)"
                                % (i, r.elapsed, period))
            # Each heavy request is decided in tens of ms now (the core's
            # bounds): one was in flight around the check, within 0.25 s.
            if not any(e[0] <= t1 + 0.25 and (e[1] is None or e[1] >= t0 - 0.25) for e in heavy):
                problems.append("no heavy request was being decided around start check %d: %r"
                                % (i, [(round(e[0] - t0, 2), e[1] and round(e[1] - t0, 2)) for e in heavy]))
        pings = [t for t, pid, m in list(n.msgs) if kv(m).get("WATCHDOG") == "1" and t_heavy <= t <= t_end]
        gaps = [b - a for a, b in zip([t_heavy] + pings, pings + [t_end])]
        print("# WATCHDOG=1 pings during the heavy requests: %d in %.1f s, longest gap %.2f s (WATCHDOG_USEC %.1f s)"
              % (len(pings), t_end - t_heavy, max(gaps), period))
        if max(gaps) >= period:
            problems.append("the watchdog went %.2f s without a ping during heavy requests (WATCHDOG_USEC is %.1f s; "
                            "pings at %r s)" % (max(gaps), period, [round(t - t_heavy, 2) for t in pings]))
        check(not problems, "\n".join(problems))

        st = d.status()
        stop.set()
        for c in clients:
            c.join(T(5))
        drainer.join(T(5))
        for c in clients:
            check(c.error is None, "a heavy client failed: %s" % c.error)
        heavy = [e for c in clients for e in c.log]
        answered = [e[2] for e in heavy if e[2] is not None]
        for a in answered:
            ok = (a.get("exit"), a.get("verdict")) == (1, "refuse") and \
                "refusing incoming migration of domain heavy" in (a.get("stderr") or "") \
                or "pcinumad is busy" in (a.get("error") or "")
            check(ok, "a heavy request's answer: %s" % shorten(json.dumps(a), 600))
        w = st["workers"]
        print("# heavy requests: %d sent, %d answered; workers then: %r" % (len(heavy), len(answered), w))
        eq(w["threads"], 2, "status workers.threads (--workers 2)")
        check(w["busy_large"] + w["queued_large"] + w["completed"] >= 1,
              "status workers %r: no heavy request went to a worker" % w)

        # Heavy requests still decided (the core's cost, issue 24's other
        # items) are not waited for: SIGKILL.  Otherwise a clean stop.
        if d.status()["workers"]["busy"]:
            d.kill()
        else:
            check_clean_exit(d, d.stop())
    finally:
        stop.set()
        for c in clients:
            c.join(T(5))
        drainer.join(T(5))
        d.kill()
        n.close()


# ---- main --------------------------------------------------------------------

def main():
    global ARGS, WORK, RUNTMP, FIXTURE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "golden", "workdir"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--only", help="run only the tests whose name contains this")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--stand-ins-build", action="store_true",
                    help="the programs are a stand_ins build's (meson -Dstand_ins=true)")
    ap.add_argument("--daemon-wrapper", default="",
                    help="prefix every pcinumad command line with this (e.g. valgrind ...)")
    ap.add_argument("--timeout-factor", type=float, default=1.0,
                    help="multiply the suite's deadlines and upper time bounds")
    ARGS = ap.parse_args()
    global WRAPPER, FACTOR
    WRAPPER = shlex.split(ARGS.daemon_wrapper)
    FACTOR = max(1.0, ARGS.timeout_factor)
    if WRAPPER and not shutil.which(WRAPPER[0]):
        print("SKIP: --daemon-wrapper %s not found" % WRAPPER[0], file=sys.stderr)
        print("1..0 # SKIP %s missing" % WRAPPER[0])
        return SKIP
    if WRAPPER:
        print("# pcinumad runs under: %s (timeouts x%g)" % (" ".join(WRAPPER), FACTOR))

    for opt in ("pcinumad", "pcinumactl", "hook"):
        path = getattr(ARGS, opt)
        if not os.access(path, os.X_OK):
            print("SKIP: %s %s is missing or not executable" % (opt, path), file=sys.stderr)
            print("1..0 # SKIP %s missing" % opt)
            return SKIP
    for opt in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "golden", "workdir"):
        setattr(ARGS, opt, os.path.abspath(getattr(ARGS, opt)))

    atexit.register(_cleanup_at_exit)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    WORK = ARGS.workdir
    if os.path.isdir(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    RUNTMP = tempfile.mkdtemp(prefix="pcinuma-dt-")
    os.chmod(RUNTMP, 0o755)
    if not ARGS.keep:
        _cleanups.insert(0, lambda: shutil.rmtree(RUNTMP, ignore_errors=True))
    else:
        print("# keeping %s" % RUNTMP)

    t0 = time.monotonic()
    FIXTURE = os.path.join(RUNTMP, "sample-4n")
    # the helpers in pcinumatest.daemon read these from their own module
    td.ARGS, td.WRAPPER, td.FACTOR = ARGS, WRAPPER, FACTOR
    td.WORK, td.RUNTMP, td.FIXTURE = WORK, RUNTMP, FIXTURE
    try:
        mkfakesysfs(os.path.join(ARGS.hosts, "sample-4n.json"), FIXTURE)
    except Failure as e:
        print("Bail out! %s" % e)
        print("0 passed, 1 failed")
        return 1
    # conf/examples/gpu-vm-1.xml, from the source tree --golden lives in
    src = os.path.dirname(os.path.dirname(ARGS.golden))
    example = os.path.join(src, "conf", "examples", "gpu-vm-1.xml")
    if not os.path.exists(example):
        print("Bail out! %s not found" % example)
        return 1
    XML["gpu-vm-1"] = read_text(example)
    XML["partial-require"] = read_text(os.path.join(ARGS.golden, "partial-require", "input.xml"))

    for p in POLICIES:
        R.run("hook: every phase under policy %s" % p, t_phase_matrix(p))
    R.run("raw protocol: other phases are answered 'pass' and logged", t_raw_other_phases)
    R.run("raw protocol: prepare without XML, broken XML, external entity", t_raw_prepare_edge_cases)
    R.run("fast path: other phases and hostdev-less XML never connect", t_fast_path)
    R.run("fast path: daemon stopped, refuse: other phases still exit 0", t_fast_path_daemon_stopped)
    R.run("unreachable/erroring/silent daemon: on_unreachable allow and refuse", t_unreachable)
    R.run("non-root peer is refused (PEER_REJECTED, permission denied); --allow-uid serves it", t_non_root_peer)
    R.run("non-root peer: the hook reports the daemon's 'permission denied'", t_non_root_hook_reason)
    R.run("64 parallel hook calls", t_parallel)
    R.run("a slow client does not stall others and is timed out", t_slow_client)
    R.run("an idle client is timed out without an error", t_idle_client)
    R.run("a client that does not read its answer does not stall others", t_non_reading_client)
    R.run("malformed, truncated, oversized frames get errors; daemon keeps serving", t_malformed)
    R.run("policy reload on SIGHUP: good, bad value, syntax error, removed or unreadable (last good kept), escaped duplicate key, fixed", t_policy_reload)
    R.run("no policy file at start: a warning naming the built-in default, kept on reload until a file appears", t_policy_missing_at_start)
    R.run("migration: refuse by default: marks say no, incoming planned domains refused", t_migration_default)
    R.run("policy hook section published as hook.conf and republished on reload", t_policy_hook_conf)
    R.run("broken policy at start: exit non-zero naming file and key/line", t_bad_policy_at_start)
    R.run("--stand-ins: unknown to a normal build (exit 2); a stand_ins build refuses a bad table naming file and entry",
          t_stand_ins_option)
    R.run("SIGHUP rescan sees a device added to the fixture tree", t_rescan)
    R.run("stderr log: MESSAGE_ID and PCINUMA_* fields per decision kind", t_log_fields)
    R.run("prepare memo: an unchanged planned domain answered as before, edits decided in full", t_prepare_memo)
    R.run("prepare memo: warm across a reload that changes nothing, cold after a change of host or policy",
          t_prepare_memo_reload)
    R.run("journal: native datagrams to /run/systemd/journal/socket carry the fields", t_journal)
    R.run("sd_notify: READY, STATUS, RELOADING+MONOTONIC_USEC then READY, STOPPING", t_sd_notify)
    R.run("socket activation: LISTEN_FDS=1 socket on fd 3 is served", t_socket_activation)
    R.run("socket activation: LISTEN_PID of another process is ignored", t_activation_wrong_pid)
    R.run("pcinumactl status: human and --json, counters match", t_status_cli)
    R.run("status counters: total == hook + status + errors", t_status_counter_consistency)
    R.run("socket lifecycle: live socket not stolen, stale one replaced", t_socket_lifecycle)
    R.run("--max-connections drops the extra client", t_max_connections)
    R.run("a 3 MiB XML and UTF-8 round-trip; over 4 MiB is refused by the hook", t_big_xml)
    R.run("heavy requests: start checks answered in under 2 s each while heavy migrations are decided; the watchdog is fed", t_heavy_requests)
    R.run("EMFILE: the accept handler does not spin; the daemon serves again once descriptors are free", t_emfile)

    return R.finish(t0)


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    except Interrupted as e:
        print("Bail out! interrupted by signal %d" % e.args[0])
        rc = 128 + e.args[0]
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _cleanup_at_exit()
    if _interrupted:
        rc = 128 + _interrupted[0]
    sys.exit(rc)

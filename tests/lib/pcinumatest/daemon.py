"""pcinumad as a test drives it: start and stop it on a fresh socket with
a fixture sysfs tree, read its log lines and journal fields, speak the raw
hook protocol, run the real pcinuma-hook, plan with pcinumactl, and print
TAP lines (Results).  The daemon, faults and bad-input suites use all of
it; the hook suite, the libvirt helpers (lvenv) and the benchmarks use its
frame encoder and pcinumad_argv().

The suite sets the module's globals before it starts a daemon: ARGS (the
parsed --pcinumad, --pcinumactl, --hook, --mkfakesysfs, --only), WORK,
RUNTMP, FIXTURE, XML, and optionally WRAPPER and FACTOR
(--daemon-wrapper, --timeout-factor).  Python 3 standard library only."""

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from pcinumatest.tap import Tap

SKIP = 77
WRAPPER_ERROR = 99     # valgrind --error-exitcode of scripts/test.sh
FACTOR = 1.0           # --timeout-factor


def T(seconds):
    """An upper time bound or deadline, scaled by --timeout-factor."""
    return seconds * FACTOR

# lib/log/log.h
MID = {
    "DAEMON_READY": "71688084eef8458f876cb753a0a8e2e4",
    "POLICY_LOADED": "e789c7b5c07f47809c7d78ac27a982dd",
    "POLICY_INVALID": "0e84f476f62846b5b870e61bc914cb33",
    "HOSTMAP_REBUILT": "ee13f9bdff5048748aba0f158d8972a5",
    "SYSFS_UNREADABLE": "9d7110b2ce2b4bc2af04d83235beafd5",
    "START_ALLOWED": "87dc1c2a46174a5ab53f60845dc67c20",
    "START_WARNED": "4e9a72241f07404697b187ec3ec82cb0",
    "START_REFUSED": "ce774eab5d594bbe90c79114599f2877",
    "MIGRATION_REFUSED": "b421eb53069b4a218062031f089c3252",
    "MIGRATION_ACCEPTED": "5a975bd32a29415693dc5fb00048da32",
    "HOOK_PASSED": "9c3977141d6b461fa4e84f48da9ef33b",
    "PEER_REJECTED": "78a61c309291450389a72193f3071080",
    "PROTOCOL_ERROR": "013e5cfcc718429b81f0ecebce08a4ee",
    "START_RESTARTING": "f6efac6604544011bdbb4be49a330a91",
    "RESTARTED": "8805c45ffe6f41b28d6f3862806f65ea",
    "RESTART_FAILED": "6341f02d6d2c491e905a6c3fcdda5aa2",
    "RESTART_SKIPPED": "f85aaf68ac36456aade6416a682f49ba",
}

POLICIES = ("require", "socket", "preferred", "legacy", "off")
OTHER_PHASES = (("start", "begin"), ("started", "begin"), ("stopped", "end"),
                ("release", "end"), ("reconnect", "begin"), ("attach", "begin"))
TEST_USER = "pcinuma-test"
TEST_USER_HOME = "/var/lib/pcinuma-test"
GPU_VM_UUID = "6f1c3a52-8d0e-4b7a-9c55-1e2f3a4b5c6d"
# gpu-vm-1's 16 devices (conf/examples/gpu-vm-1.xml) and their host nodes
# on sample-4n (tests/fixtures/README.md: bus base 0x10/0x30/0x50/0x70 is
# node 0/1/2/3).
GPU_VM_DEVICES = ["0000:%02x:00.0" % (base + off)
                  for base in (0x10, 0x30, 0x50, 0x70) for off in (3, 4, 7, 8)]
GPU_VM_NODE = {bdf: (int(bdf[5:7], 16) - 0x10) // 0x20 for bdf in GPU_VM_DEVICES}

ARGS = None
WRAPPER = []         # --daemon-wrapper, split
WORK = None          # the --workdir
RUNTMP = None        # short directory under /tmp for sockets
FIXTURE = None       # the sample-4n sysfs tree
XML = {}             # name -> domain XML text
_live = []           # Popen/pid objects of running daemons
_cleanups = []       # callables run at exit


# ---- results ---------------------------------------------------------------

class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def eq(got, want, what):
    if got != want:
        raise Failure("%s: expected %r, got %r" % (what, want, got))


def contains(text, sub, what):
    if sub not in text:
        raise Failure("%s: expected to contain %r, got %r" % (what, sub, shorten(text)))


def read_text(path):
    with open(path) as f:
        return f.read()


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def shorten(s, n=1500):
    if isinstance(s, bytes):
        s = s.decode("utf-8", "replace")
    return s if len(s) <= n else s[:n] + "...[%d more]" % (len(s) - n)


class Results(Tap):
    """The daemon suites' Tap: run(name, fn) runs one case (Tap.run: it
    fails by raising, skips by returning a reason) unless --only leaves it
    out or a signal stopped the run.  reap: kill the daemons a case left
    behind after it (suites that keep one daemon across cases pass False)."""

    def __init__(self, reap=True):
        super().__init__()
        self.reap = reap

    def run(self, name, fn):
        if ARGS.only and ARGS.only not in name:
            return
        if _interrupted:
            return
        super().run(name, fn, expected=(Failure,), timed=True)
        if self.reap:
            reap_all()

    def finish(self, t0):
        """The closing lines; the exit status (Tap.finish())."""
        print("# total %.1f s" % (time.monotonic() - t0))
        return super().finish()


# ---- process hygiene -------------------------------------------------------

def start_run(args, prefix):
    """Point this module at a suite's run: ARGS = args, WORK = its
    --workdir (emptied), RUNTMP = a new folder under /tmp named prefix...,
    which other users may enter (0755)."""
    global ARGS, WORK, RUNTMP
    ARGS = args
    WORK = args.workdir
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    RUNTMP = tempfile.mkdtemp(prefix=prefix)
    os.chmod(RUNTMP, 0o755)


def end_run(keep=False):
    """Kill the daemons the run left behind; remove RUNTMP unless keep."""
    reap_all()
    if not keep:
        shutil.rmtree(RUNTMP, ignore_errors=True)


def terminate(proc, grace=15):
    """Stop a process a test started (a subprocess.Popen): SIGTERM while it
    runs, SIGKILL after grace seconds; reaped either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def reap_all():
    """Kill every daemon process group a test left behind."""
    while _live:
        d = _live.pop()
        d.kill()


def _cleanup_at_exit():
    reap_all()
    while _cleanups:
        try:
            _cleanups.pop()()
        except Exception:
            pass


class Interrupted(BaseException):
    pass


_interrupted = []


def _on_signal(signo, frame):
    """SIGTERM/SIGINT: stop here.  The cleanup runs in main's finally,
    after the subprocess in flight (if any) has been killed and reaped,
    so nothing it writes outlives the cleanup; no further test starts
    even if some code swallowed the exception."""
    first = not _interrupted
    _interrupted.append(signo)
    if first:
        raise Interrupted(signo)


# ---- log lines -------------------------------------------------------------

class Event:
    """One 'pcinumad: <message> | MESSAGE_ID=... KEY=VALUE ...' line, or a
    journal entry: .message, .prefix ('warning: ', 'error: ', ''), .fields
    as an ordered list of (key, value)."""

    def __init__(self, message, fields, prefix="", raw=""):
        self.message = message
        self.fields = fields
        self.prefix = prefix
        self.raw = raw

    def get(self, key, default=None):
        for k, v in self.fields:
            if k == key:
                return v
        return default

    def all(self, key):
        return [v for k, v in self.fields if k == key]

    @property
    def mid(self):
        return self.get("MESSAGE_ID")

    def __repr__(self):
        return self.raw or ("%s | %r" % (self.message, self.fields))


def parse_fields(s):
    """'K=V K="a \\"b\\"" ...' -> [(K, V), ...]."""
    out = []
    i, n = 0, len(s)
    while i < n:
        while i < n and s[i] == " ":
            i += 1
        if i >= n:
            break
        eqi = s.index("=", i)
        key = s[i:eqi]
        i = eqi + 1
        if i < n and s[i] == '"':
            i += 1
            val = []
            while i < n and s[i] != '"':
                if s[i] == "\\" and i + 1 < n:
                    nxt = s[i + 1]
                    val.append("\n" if nxt == "n" else nxt)
                    i += 2
                else:
                    val.append(s[i])
                    i += 1
            if i >= n:
                raise ValueError("unterminated quoted value in %r" % s)
            i += 1
            out.append((key, "".join(val)))
        else:
            j = s.find(" ", i)
            j = n if j < 0 else j
            out.append((key, s[i:j]))
            i = j
    return out


def parse_log_line(line):
    if not line.startswith("pcinumad: "):
        return None
    body = line[len("pcinumad: "):]
    prefix = ""
    for p in ("warning: ", "error: "):
        if body.startswith(p):
            prefix, body = p, body[len(p):]
    sep = body.find(" | MESSAGE_ID=")
    if sep < 0:
        return Event(body, [], prefix, line)
    return Event(body[:sep], parse_fields(body[sep + 3:]), prefix, line)


def parse_journal_datagram(data):
    """The native journal protocol: 'KEY=VALUE\\n', or for binary-safe
    fields 'KEY\\n' + le64 length + data + '\\n'."""
    fields = []
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:
            k = line
            (ln,) = struct.unpack("<Q", data[nl + 1:nl + 9])
            v = data[nl + 9:nl + 9 + ln]
            if data[nl + 9 + ln:nl + 10 + ln] != b"\n":
                raise ValueError("binary field %r not followed by a newline" % k)
            i = nl + 10 + ln
        fields.append((k.decode(), v.decode("utf-8", "replace")))
    return fields


# ---- the raw protocol --------------------------------------------------------

def encode(obj):
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">I", len(payload)) + payload


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return buf
        buf += chunk
    return buf


def recv_frame(s):
    """One response frame as an object; None at EOF before a header."""
    hdr = recv_exact(s, 4)
    if not hdr:
        return None
    if len(hdr) < 4:
        raise Failure("truncated response header %r" % hdr)
    (n,) = struct.unpack(">I", hdr)
    payload = recv_exact(s, n)
    if len(payload) != n:
        raise Failure("truncated response: %d of %d bytes" % (len(payload), n))
    return json.loads(payload)


def connect(path, timeout=10.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(T(timeout))
    try:
        s.connect(path)
    except BaseException:
        s.close()
        raise
    return s


def call(path, obj, timeout=10.0):
    with connect(path, timeout) as s:
        s.sendall(encode(obj))
        return recv_frame(s)


def status_of(path):
    r = call(path, {"version": 1, "type": "status"})
    check(r is not None and "status" in r, "status request: got %r" % (r,))
    eq(r.get("version"), 1, "status response version")
    return r["status"]


# ---- daemons ----------------------------------------------------------------

# The variables a service manager or a parent test may have left in the
# environment that change what pcinumad does (socket activation, sd_notify,
# journald, its own socket and sysfs root): a daemon a test starts gets none
# of them unless it asks.
INHERITED_ENV = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
                 "JOURNAL_STREAM", "PCINUMA_SOCKET", "PCINUMA_SYSFS_ROOT")


def scrubbed_env(env=None):
    """os.environ without INHERITED_ENV; with env given, env itself
    (what the caller asked for, kept as it is)."""
    if env is not None:
        return dict(env)
    return {k: v for k, v in os.environ.items() if k not in INHERITED_ENV}


def pcinumad_argv(pcinumad, sysfs, policy_file, sock, libvirt_uri="none",
                  log_target="stderr", extra=(), wrapper=()):
    """The command line of a pcinumad every test and benchmark starts:
    wrapper (valgrind, ...), then pcinumad on a sysfs tree, policy file and
    socket of the test's own, then extra.  No metrics file unless extra
    names one: a machine with node_exporter's textfile folder would
    otherwise get every test daemon's metrics in one shared file."""
    metrics = [] if "--metrics-file" in extra else ["--metrics-file", "none"]
    return list(wrapper) + [pcinumad, "--sysfs-root", sysfs, "--policy-file", policy_file,
                            "--socket", sock, "--libvirt-uri", libvirt_uri,
                            "--log-target", log_target] + metrics + list(extra)


_seq = [0]


def fresh_dir(tag):
    _seq[0] += 1
    d = os.path.join(RUNTMP, "%02d-%s" % (_seq[0], tag))
    os.makedirs(d)
    return d


def write_policy(path, mode_or_text):
    text = mode_or_text
    if mode_or_text in POLICIES:
        text = json.dumps({"default": {"policy": mode_or_text}}) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class Daemon:
    def __init__(self, tag, policy="require", sysfs=None, extra=(), env=None,
                 socket_path=None, policy_file=None, log_target="stderr"):
        self.dir = fresh_dir(tag)
        self.sock = socket_path or os.path.join(self.dir, "run", "hook.sock")
        self.policy_file = policy_file or os.path.join(self.dir, "policy.json")
        if policy is not None:
            write_policy(self.policy_file, policy)
        self.sysfs = sysfs or FIXTURE
        self.log_path = os.path.join(self.dir, "daemon.log")
        self.extra = list(extra)
        self.env = env
        self.log_target = log_target
        self.proc = None
        self.pid = None
        self._rc = None

    def argv(self):
        return pcinumad_argv(ARGS.pcinumad, self.sysfs, self.policy_file, self.sock,
                             log_target=self.log_target, extra=self.extra, wrapper=WRAPPER)

    def start(self, wait=True):
        env = scrubbed_env(self.env)
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=self.logf, stderr=self.logf,
                                     env=env, start_new_session=True)
        self.pid = self.proc.pid
        _live.append(self)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=15.0):
        """Until the socket answers (and, logging to stderr, the ready
        line is out)."""
        timeout = T(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.poll() is not None:
                raise Failure("pcinumad exited with %s before it was ready; log:\n%s"
                              % (self.poll(), self.log_text()))
            logged = self.log_target != "stderr" or \
                any(e.mid == MID["DAEMON_READY"] for e in self.events())
            if logged and self._connectable():
                return
            time.sleep(0.01)
        raise Failure("pcinumad not ready within %.0f s; log:\n%s" % (timeout, self.log_text()))

    def _connectable(self):
        try:
            with connect(self.sock, 1.0):
                return True
        except OSError:
            return False

    def poll(self):
        if self._rc is None and self.proc is not None:
            self._rc = self.proc.poll()
        return self._rc

    def signal(self, signo):
        os.kill(self.pid, signo)

    def stop(self, timeout=10.0):
        """SIGTERM and wait; returns the exit status."""
        timeout = T(timeout)
        if self.poll() is None:
            try:
                self.signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self._rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise Failure("pcinumad did not exit within %.0f s of SIGTERM" % timeout)
        self._close_log()
        if self in _live:
            _live.remove(self)
        return self._rc

    def _close_log(self):
        if getattr(self, "logf", None):
            self.logf.close()
            self.logf = None

    def kill(self):
        """SIGKILL the daemon's process group (it leads one: a new session)
        while the leader is not yet reaped, so the id cannot have been
        reused; pcinumad forks nothing, so nothing outlives the leader."""
        if self.pid is None:
            return
        if self.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self._rc = self.proc.wait(T(5))
            except subprocess.TimeoutExpired:
                pass
        self._close_log()
        if self in _live:
            _live.remove(self)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            rc = self.stop()
            check_clean_exit(self, rc)
        else:
            self.kill()
        return False

    # logs
    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def mark(self):
        try:
            return os.path.getsize(self.log_path)
        except FileNotFoundError:
            return 0

    def lines(self, since=0):
        with open(self.log_path, "rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace").splitlines()

    def events(self, since=0):
        return [e for e in (parse_log_line(l) for l in self.lines(since)) if e]

    def decisions(self, since=0):
        return [e for e in self.events(since) if e.get("PCINUMA_VERDICT") is not None]

    def wait_event(self, pred, since=0, timeout=10.0, what="a log line"):
        timeout = T(timeout)
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events(since):
                if pred(e):
                    return e
            if time.monotonic() > deadline:
                raise Failure("no %s within %.0f s; log since mark:\n%s"
                              % (what, timeout, "\n".join(self.lines(since))))
            time.sleep(0.01)

    def hup(self):
        """SIGHUP and wait until the reload's rescan is logged."""
        m = self.mark()
        self.signal(signal.SIGHUP)
        self.wait_event(lambda e: e.mid == MID["HOSTMAP_REBUILT"] and "(reload)" in e.message,
                        m, what="host map rescan after SIGHUP")
        return m

    def status(self):
        return status_of(self.sock)

    def call(self, obj, timeout=10.0):
        return call(self.sock, obj, timeout)

    def wait_connections(self, n, timeout=5.0):
        """Until the daemon counts n open connections (the status request
        included): a client's close reaches it asynchronously."""
        timeout = T(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.status()["requests"]["connections"]
            except (OSError, Failure) as e:
                # dropped under --max-connections while others were closing
                got = "no answer (%s)" % e
            if got == n:
                return
            if time.monotonic() > deadline:
                raise Failure("open connections: expected %d, still %s after %.0f s" % (n, got, timeout))
            time.sleep(0.02)


def check_clean_exit(d, rc, what="pcinumad exit status after SIGTERM", want=0):
    """A daemon stopped by SIGTERM exits 0.  Under --daemon-wrapper an
    exit of 99 is the wrapper's (valgrind's) verdict: memory errors or
    definite leaks; any other failure shows the log's tail too (a
    sanitizer's report lands there)."""
    if rc == want:
        return
    tail = "\n".join(d.log_text().splitlines()[-60:])
    if WRAPPER and rc == WRAPPER_ERROR:
        raise Failure("%s: %d: %s reported errors or definite leaks; log tail:\n%s"
                      % (what, rc, os.path.basename(WRAPPER[0]), tail))
    raise Failure("%s: expected %d, got %r; log tail:\n%s" % (what, want, rc, tail))


# ---- the hook -------------------------------------------------------------

class HookResult:
    def __init__(self, rc, out, err, elapsed):
        self.rc, self.out, self.err, self.elapsed = rc, out, err, elapsed

    def __repr__(self):
        return "exit %s, %.3f s, stdout %r, stderr %r" % (
            self.rc, self.elapsed, shorten(self.out, 300), shorten(self.err, 600))


_confs = {}


def hook_conf(sock, on_unreachable="allow", timeout_ms=5000):
    key = (sock, on_unreachable, timeout_ms)
    if key not in _confs:
        d = os.path.join(RUNTMP, "hookconf")
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        path = os.path.join(d, "hook-%d.conf" % len(_confs))
        with open(path, "w") as f:
            f.write("# written by pcinumatest/daemon.py\nsocket = %s\ntimeout_ms = %d\non_unreachable = %s\n"
                    % (sock, timeout_ms, on_unreachable))
        os.chmod(path, 0o644)
        _confs[key] = path
    return _confs[key]


def run_hook(name, phase, subphase, xml, sock, on_unreachable="allow", timeout_ms=None,
             user=None, hook=None, extra="-", timeout=60):
    """Run pcinuma-hook as libvirt does: argv NAME PHASE SUBPHASE EXTRA,
    the domain XML on stdin, a scrubbed environment.  The hook's own
    timeout_ms defaults to 5000 scaled by --timeout-factor."""
    if timeout_ms is None:
        timeout_ms = int(T(5000))
    timeout = T(timeout)
    conf = hook_conf(sock, on_unreachable, timeout_ms)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C",
           "PCINUMA_SOCKET": sock, "PCINUMA_HOOK_CONF": conf}
    argv = [hook or ARGS.hook, name, phase, subphase, extra]
    if user:
        argv = ["runuser", "-u", user, "--", "env", "-i"] + \
            ["%s=%s" % kv for kv in sorted(env.items())] + argv
    data = xml.encode() if isinstance(xml, str) else (xml or b"")
    t0 = time.monotonic()
    p = subprocess.run(argv, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env, timeout=timeout)
    return HookResult(p.returncode, p.stdout.decode("utf-8", "replace"),
                      p.stderr.decode("utf-8", "replace"), time.monotonic() - t0)


def hook_and_decision(d, name, phase, subphase, xml, **kw):
    """Run the hook against daemon d; return (result, the one decision it
    logged, or None when nothing was logged)."""
    m = d.mark()
    r = run_hook(name, phase, subphase, xml, d.sock, **kw)
    dec = d.decisions(m)
    check(len(dec) <= 1, "one hook call logged %d decisions: %r" % (len(dec), dec))
    return r, (dec[0] if dec else None)


# ---- fixtures -----------------------------------------------------------------

def mkfakesysfs(desc, out):
    p = subprocess.run([sys.executable, ARGS.mkfakesysfs, desc, out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise Failure("mkfakesysfs %s failed (%d): %s" % (desc, p.returncode, p.stdout))


_plans = {}


def fleet_policy(policy):
    """A policy file's text: default 'policy' with migration:
    same-topology, the fleet's opt-in (the default refuses)."""
    return json.dumps({"default": {"policy": policy, "migration": "same-topology"}}) + "\n"


def planned(xml_name, policy, sysfs=None, fleet=False):
    """`pcinumactl plan` output for XML[xml_name] under policy (with
    fleet: under fleet_policy(policy))."""
    key = (xml_name, policy, sysfs or FIXTURE, fleet)
    if key not in _plans:
        path = os.path.join(WORK, "in-%s.xml" % xml_name)
        with open(path, "w") as f:
            f.write(XML[xml_name])
        how = ["--policy", policy]
        if fleet:
            pf = os.path.join(WORK, "fleet-%s.json" % policy)
            with open(pf, "w") as f:
                f.write(fleet_policy(policy))
            how = ["--policy-file", pf]
        p = subprocess.run([ARGS.pcinumactl, "plan", "--sysfs-root", sysfs or FIXTURE] + how + [path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise Failure("pcinumactl plan --policy %s %s: exit %d: %s"
                          % (policy, xml_name, p.returncode, p.stderr))
        _plans[key] = p.stdout
    return _plans[key]


def planned_cells(xml):
    """host BDF -> guest cell from the pcinuma:device marks of a planned XML."""
    out = {}
    for m in re.finditer(r"<pcinuma:device\b[^>]*>", xml):
        tag = m.group(0)
        host = re.search(r"\bhost=['\"]([^'\"]+)", tag).group(1)
        cell = re.search(r"\bguest-cell=['\"](-?\d+)", tag).group(1)
        out[host] = int(cell)
    return out


def strip_hostdevs(xml):
    return re.sub(r"\s*<hostdev\b.*?</hostdev>", "", xml, flags=re.S)


def rename_domain(xml, name):
    return re.sub(r"<name>[^<]*</name>", "<name>%s</name>" % name, xml, count=1)


# ---- assertions on decisions ------------------------------------------------------

def assert_decision(dec, *, mid, verdict, phase, policy, domain, uuid=GPU_VM_UUID, devices=None):
    check(dec is not None, "the daemon logged no decision")
    eq(dec.mid, mid, "MESSAGE_ID of %r" % dec.message)
    eq(dec.get("PCINUMA_VERDICT"), verdict, "PCINUMA_VERDICT")
    eq(dec.get("PCINUMA_PHASE"), phase, "PCINUMA_PHASE")
    eq(dec.get("PCINUMA_DOMAIN"), domain, "PCINUMA_DOMAIN")
    eq(dec.get("PCINUMA_UUID"), uuid, "PCINUMA_UUID")
    eq(dec.get("PCINUMA_POLICY"), policy, "PCINUMA_POLICY")
    if devices is not None:
        got = list(zip(dec.all("PCINUMA_DEVICE"), dec.all("PCINUMA_HOST_NODE"),
                       dec.all("PCINUMA_GUEST_CELL")))
        eq(len(dec.all("PCINUMA_DEVICE")), len(dec.all("PCINUMA_HOST_NODE")),
           "PCINUMA_DEVICE vs PCINUMA_HOST_NODE count")
        eq(len(dec.all("PCINUMA_DEVICE")), len(dec.all("PCINUMA_GUEST_CELL")),
           "PCINUMA_DEVICE vs PCINUMA_GUEST_CELL count")
        eq(sorted(got), sorted(devices), "per-device fields (DEVICE, HOST_NODE, GUEST_CELL)")
        if len(devices) > 1:
            # PCINUMA_FIDELITY counts every device pair once
            m = re.fullmatch(r"same=(\d+) closer=(\d+) farther=(\d+)", dec.get("PCINUMA_FIDELITY") or "")
            check(m is not None, "PCINUMA_FIDELITY %r" % dec.get("PCINUMA_FIDELITY"))
            n = len(devices)
            eq(sum(int(x) for x in m.groups()), n * (n - 1) // 2, "PCINUMA_FIDELITY pair count")
            # one PCINUMA_PAIR_CHANGED per pair that does not keep its type
            # (at most 32 of them, then PCINUMA_PAIR_CHANGED_MORE says how many more)
            changed = dec.all("PCINUMA_PAIR_CHANGED")
            more = int(dec.get("PCINUMA_PAIR_CHANGED_MORE") or 0)
            eq((len(changed), more), (min(int(m.group(2)) + int(m.group(3)), 32),
                                      max(int(m.group(2)) + int(m.group(3)) - 32, 0)),
               "PCINUMA_PAIR_CHANGED and _MORE vs closer+farther")
            names = {d for d, _n, _c in devices}
            for v in changed:
                pm = re.fullmatch(r"(\S+) (\S+) host=(PIX|PXB|PHB|NODE|SYS) guest=(PIX|PXB|PHB|NODE|SYS)", v)
                check(pm is not None and pm.group(1) in names and pm.group(2) in names
                      and pm.group(3) != pm.group(4), "PCINUMA_PAIR_CHANGED %r" % v)


def gpu_vm_devices(policy):
    """The expected (device, host node, guest cell) triples of gpu-vm-1."""
    cells = planned_cells(planned("gpu-vm-1", policy))
    eq(sorted(cells), sorted(GPU_VM_DEVICES), "devices in pcinumactl plan --policy %s" % policy)
    if policy == "require":
        # cell n is backed by node n: every device goes to its own node's cell
        for bdf in GPU_VM_DEVICES:
            eq(cells[bdf], GPU_VM_NODE[bdf], "plan: guest cell of %s" % bdf)
    return [(bdf, str(GPU_VM_NODE[bdf]), str(cells[bdf])) for bdf in GPU_VM_DEVICES]


def unplaced_devices():
    """Under policy off nothing is placed: the log still lists each device
    with its host node, and guest cell -1."""
    return [(bdf, str(GPU_VM_NODE[bdf]), "-1") for bdf in GPU_VM_DEVICES]


def spawn_activated(argv, listen_fd, log_path, extra_env=None):
    """Start argv with listen_fd as fd 3, LISTEN_FDS=1 and LISTEN_PID set
    to its own pid (through sh, which execs), in a new session."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "PCINUMA_SOCKET")}
    env.update(extra_env or {})
    logfd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    nullfd = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = os.posix_spawn("/bin/sh",
                             ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"'] + argv,
                             env,
                             file_actions=[(os.POSIX_SPAWN_DUP2, nullfd, 0),
                                           (os.POSIX_SPAWN_DUP2, logfd, 1),
                                           (os.POSIX_SPAWN_DUP2, logfd, 2),
                                           (os.POSIX_SPAWN_DUP2, listen_fd, 3)],
                             setsid=True)
    finally:
        os.close(logfd)
        os.close(nullfd)
    return pid


class SpawnedProc:
    """Enough of Popen for Daemon: wait/poll on a posix_spawn'ed pid."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            p, st = os.waitpid(self.pid, os.WNOHANG)
            if p == self.pid:
                self.returncode = os.waitstatus_to_exitcode(st)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("pcinumad", timeout)
            time.sleep(0.01)
        return self.returncode

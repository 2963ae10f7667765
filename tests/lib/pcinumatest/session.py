#!/usr/bin/env python3
"""A private libvirtd in session mode (qemu:///session), for tests.

Stdlib only.  When run as root, the daemon runs as an unprivileged system
user (``pcinuma-test`` by default, created when missing); otherwise it runs
as the current user.  All of its state (config, cache, runtime dir with the
socket, data) lives in a fresh temporary directory that ``stop()`` removes.

    from pcinumatest.session import Session
    s = Session()              # starts libvirtd, waits until virsh answers
    name = s.define(xml_text)
    xml = s.dumpxml(name)
    s.undefine(name)
    s.stop()                   # also registered with atexit; idempotent

If libvirtd or virsh is missing, ``require_tools()`` exits 77 (meson skip).
"""

import atexit
import grp
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
DEFAULT_USER = "pcinuma-test"
DEFAULT_HOME = "/var/lib/pcinuma-test"


class SessionError(RuntimeError):
    pass


def _die_with_parent():
    """preexec_fn: SIGTERM the daemon when the test process dies, even by
    SIGKILL (runs after the uid switch, which would clear it)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)   # PR_SET_PDEATHSIG
    except Exception:
        pass


def _exit_on_signal(signum, frame):
    # turn SIGTERM (meson timeout) / SIGHUP into SystemExit so atexit and
    # finally blocks stop the daemon
    sys.exit(128 + signum)


def find_tool(name, extra_dirs=("/usr/sbin", "/sbin", "/usr/local/sbin")):
    path = shutil.which(name)
    if path:
        return path
    for d in extra_dirs:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def require_tools(names=("libvirtd", "virsh")):
    """Exit 77 (meson 'skip') when a needed tool is missing."""
    missing = [n for n in names if not find_tool(n)]
    if missing:
        print("SKIP: missing %s (install libvirt-daemon and libvirt-clients)"
              % ", ".join(missing), file=sys.stderr)
        print("1..0 # SKIP missing %s" % ", ".join(missing))
        sys.exit(SKIP)


def ensure_user(name=DEFAULT_USER, home=DEFAULT_HOME):
    """Return (uid, gid) of the unprivileged test user, creating it if we are
    root and it does not exist."""
    try:
        pw = pwd.getpwnam(name)
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise SessionError("user %s does not exist and we are not root" % name)
    useradd = find_tool("useradd")
    if not useradd:
        raise SessionError("useradd not found; cannot create user %s" % name)
    # On a fresh machine suites running side by side may all create it:
    # exit 9, the user exists (another one created it); a lock another
    # useradd holds ("cannot lock /etc/passwd; try again later", exit 1,
    # or 10 for the group file): try again.
    for attempt in range(20):
        r = subprocess.run([useradd, "-r", "-m", "-d", home,
                            "-s", "/usr/sbin/nologin", name],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode not in (1, 10) or not re.search(r"cannot lock|try again later", r.stdout):
            break
        time.sleep(0.5)
    if r.returncode not in (0, 9):
        raise SessionError("useradd %s failed (%d): %s"
                           % (name, r.returncode, r.stdout.strip()))
    pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid


HOOK_DIR = "/etc/libvirt/hooks/qemu.d"


def reachable_copy(path, dirpath, name=None):
    """Copy the file at path into dirpath (which the caller made 0755 under
    /tmp or /var/tmp), mode 0755, and return the copy's path.

    What the unprivileged session libvirtd, its hooks or QEMU run or read
    must not stay in the build or source tree: root may have cloned the
    repository under /root (mode 0700), where that user cannot reach."""
    dst = os.path.join(dirpath, name or os.path.basename(path))
    shutil.copyfile(path, dst)
    os.chmod(dst, 0o755)
    return dst


class HookDir:
    """A hook in libvirt's qemu.d, which no Debian package creates.

    install() creates /etc/libvirt/hooks/qemu.d (and /etc/libvirt/hooks)
    when missing, remembering what it created; remove() deletes the hook
    and then only those directories, and only while empty: another test
    (or the administrator's own hooks) may be using them."""

    def __init__(self, name, hook_dir=HOOK_DIR):
        self.dir = hook_dir
        self.path = os.path.join(hook_dir, name)
        self.created = []

    def makedirs(self):
        missing = []
        d = self.dir
        while not os.path.isdir(d):
            missing.append(d)
            d = os.path.dirname(d)
        for d in reversed(missing):
            try:
                os.mkdir(d, 0o755)
                self.created.append(d)
            except FileExistsError:     # a concurrent test made it
                pass

    def install(self, text):
        # Written beside and renamed: libvirt never sees half a hook.  A
        # concurrent test may remove a directory it created between our
        # mkdir and our write; then make it again.
        for _ in range(5):
            self.makedirs()
            tmp = self.path + ".tmp"
            try:
                with open(tmp, "w") as f:
                    f.write(text)
                os.chmod(tmp, 0o755)
                os.rename(tmp, self.path)
                return self.path
            except FileNotFoundError:
                continue
        raise SessionError("cannot install the hook %s" % self.path)

    def remove(self):
        for p in (self.path, self.path + ".tmp"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        for d in reversed(self.created):
            try:
                os.rmdir(d)
            except OSError:             # not empty: someone else's now
                pass
        self.created = []


class Session:
    """A private session-mode libvirtd.  One per test run.

    A subclass may set launch_prefix (argv run before setpriv, as root;
    pcinumatest.netns uses 'nsenter --net=/run/netns/NS') and daemon_args
    (appended to libvirtd's)."""

    launch_prefix = ()
    daemon_args = ()

    def __init__(self, user=DEFAULT_USER, home=DEFAULT_HOME, timeout=60,
                 start=True, verbose=False):
        self.timeout = timeout
        self.verbose = verbose
        self.proc = None
        self.tmp = None
        self._stopped = False
        self._counter = 0
        self.libvirtd = find_tool("libvirtd")
        self.virsh_bin = find_tool("virsh")
        if not self.libvirtd or not self.virsh_bin:
            require_tools()
        if os.geteuid() == 0:
            self.uid, self.gid = ensure_user(user, home)
            self.user = user
        else:
            self.uid, self.gid = os.geteuid(), os.getegid()
            self.user = pwd.getpwuid(self.uid).pw_name
        atexit.register(self.stop)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _exit_on_signal)
        if start:
            self.start()

    # -- environment ---------------------------------------------------
    def _mkdir(self, path, mode=0o700):
        os.makedirs(path, mode=mode, exist_ok=True)
        os.chmod(path, mode)
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.gid)

    @staticmethod
    def _reap_stale(maxage=600):
        """Remove temp dirs left by killed runs (no live libvirtd pid)."""
        now = time.time()
        for d in os.listdir("/tmp"):
            if not d.startswith("pcinuma-lv-"):
                continue
            path = os.path.join("/tmp", d)
            try:
                with open(os.path.join(path, "run", "libvirt",
                                       "libvirtd.pid")) as f:
                    pid = int(f.read().strip() or "0")
            except (OSError, ValueError):
                pid = 0
            try:
                if pid and os.path.exists("/proc/%d" % pid) and \
                        "Z" not in open("/proc/%d/stat" % pid).read().split()[2]:
                    continue
                if not pid and now - os.stat(path).st_mtime < maxage:
                    continue
            except OSError:
                continue
            shutil.rmtree(path, ignore_errors=True)

    def _setup_dirs(self):
        try:
            self._reap_stale()
        except OSError:
            pass
        # Short path under /tmp: the Unix socket path must stay < 108 bytes.
        self.tmp = tempfile.mkdtemp(prefix="pcinuma-lv-", dir="/tmp")
        os.chmod(self.tmp, 0o711)   # traversable; the user owns it anyway
        if os.geteuid() == 0:
            os.chown(self.tmp, self.uid, self.gid)
        self.home = os.path.join(self.tmp, "home")
        self.files = os.path.join(self.tmp, "files")   # XML handed to virsh
        for d in ("home", "config", "cache", "run", "data", "files"):
            self._mkdir(os.path.join(self.tmp, d))
        self.env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": self.home,
            "USER": self.user,
            "LOGNAME": self.user,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "XDG_CONFIG_HOME": os.path.join(self.tmp, "config"),
            "XDG_CACHE_HOME": os.path.join(self.tmp, "cache"),
            "XDG_RUNTIME_DIR": os.path.join(self.tmp, "run"),
            "XDG_DATA_HOME": os.path.join(self.tmp, "data"),
            # never let a client spawn a second daemon behind our back
            "LIBVIRT_AUTOSTART": "0",
            "LIBVIRT_DEFAULT_URI": "qemu:///session",
        }
        self.logfile = os.path.join(self.tmp, "libvirtd.log")
        cfgdir = os.path.join(self.env["XDG_CONFIG_HOME"], "libvirt")
        self._mkdir(cfgdir)
        self._write_file(os.path.join(cfgdir, "libvirtd.conf"),
                         'log_outputs = "3:file:%s"\n'
                         'log_filters = "1:qemu 1:conf 3:util"\n'
                         % self.logfile)

    def _write_file(self, path, text, mode=0o644):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, mode)
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.gid)

    def _demote_kwargs(self):
        if os.geteuid() == 0:
            return {"user": self.uid, "group": self.gid, "extra_groups": []}
        return {}

    def run_as(self, argv, input=None, timeout=120, check=False):
        """Run argv as the session user with the session environment."""
        return subprocess.run(argv, input=input, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=self.env, cwd=self.tmp, timeout=timeout,
                              check=check, **self._demote_kwargs())

    # -- daemon --------------------------------------------------------
    def start(self):
        if self.proc is not None:
            return
        self._setup_dirs()
        out = open(os.path.join(self.tmp, "libvirtd.stdout"), "w")
        try:
            # Foreground daemon in its own session: we keep its pid.  With
            # setpriv the daemon also gets SIGTERM if this process dies
            # (even by SIGKILL), so a killed test leaves no daemon behind.
            setpriv = find_tool("setpriv")
            if setpriv:
                argv = [setpriv]
                if os.geteuid() == 0:
                    argv += ["--reuid=%d" % self.uid, "--regid=%d" % self.gid,
                             "--clear-groups"]
                argv += ["--pdeathsig", "TERM", "--", self.libvirtd]
                kw = {}
            else:
                argv = [self.libvirtd]
                kw = dict(preexec_fn=_die_with_parent, **self._demote_kwargs())
            argv = list(self.launch_prefix) + argv + list(self.daemon_args)
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=self.env, cwd=self.tmp,
                start_new_session=True, **kw)
        finally:
            out.close()
        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SessionError("libvirtd exited with status %s during "
                                   "startup\n%s" % (self.proc.returncode,
                                                    self.log_tail()))
            sock = os.path.join(self.env["XDG_RUNTIME_DIR"], "libvirt",
                                "libvirt-sock")
            if os.path.exists(sock):
                try:
                    last = self.virsh("version", timeout=30)
                    if last.returncode == 0:
                        return
                except subprocess.TimeoutExpired as e:
                    last = e
            time.sleep(0.1)
        err = last.stderr if isinstance(last, subprocess.CompletedProcess) \
            else str(last)
        self.stop()
        raise SessionError("libvirtd did not answer 'virsh -c qemu:///session "
                           "version' within %ds; last error: %s\n%s"
                           % (self.timeout, err, self.log_tail()))

    def log_tail(self, n=60):
        parts = []
        for name in ("libvirtd.stdout", "libvirtd.log"):
            p = os.path.join(self.tmp or "", name)
            try:
                with open(p, errors="replace") as f:
                    lines = f.read().splitlines()[-n:]
                parts.append("---- %s ----\n%s" % (name, "\n".join(lines)))
            except OSError:
                pass
        return "\n".join(parts)

    def stop(self):
        """Destroy running domains, stop the daemon, remove the temp dir.
        Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        if self.proc is not None and self.proc.poll() is None:
            try:
                r = self.virsh("list", "--name", timeout=20)
                for name in r.stdout.split():
                    self.virsh("destroy", name, timeout=20)
            except Exception:
                pass
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=15)
        if self.tmp and os.path.isdir(self.tmp):
            if os.environ.get("PCINUMA_KEEP_SESSION"):
                print("# keeping %s" % self.tmp, file=sys.stderr)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers -------------------------------------------------------
    def virsh(self, *args, input=None, timeout=120, quiet=True):
        """virsh -c qemu:///session ARGS, as the session user."""
        return self.run_as([self.virsh_bin] + (["-q"] if quiet else [])
                           + ["-c", "qemu:///session"]
                           + [str(a) for a in args], input=input,
                           timeout=timeout)

    def write(self, text, name=None, suffix=".xml"):
        """Write text to a file the session user can read; return its path."""
        self._counter += 1
        path = os.path.join(self.files, name or ("f%04d%s" % (self._counter,
                                                             suffix)))
        self._write_file(path, text)
        return path

    def define(self, xml_text, check=True):
        """virsh define; return the domain name (raise SessionError on
        failure when check, else return the CompletedProcess)."""
        path = self.write(xml_text)
        r = self.virsh("define", path, quiet=False)
        if r.returncode != 0:
            if check:
                raise SessionError("virsh define failed: %s"
                                   % (r.stderr.strip() or r.stdout.strip()))
            return r
        m = re.search(r"Domain '?(.+?)'? defined", r.stdout)
        if not m:
            raise SessionError("cannot parse virsh define output: %r" % r.stdout)
        return m.group(1)

    def dumpxml(self, name, inactive=True):
        args = ["dumpxml"] + (["--inactive"] if inactive else []) + [name]
        r = self.virsh(*args)
        if r.returncode != 0:
            raise SessionError("virsh dumpxml %s failed: %s"
                               % (name, r.stderr.strip()))
        return r.stdout

    def undefine(self, name, check=False):
        r = self.virsh("undefine", "--nvram", name)
        if r.returncode != 0 and "nvram" in r.stderr:
            r = self.virsh("undefine", name)
        if check and r.returncode != 0:
            raise SessionError("virsh undefine %s failed: %s"
                               % (name, r.stderr.strip()))
        return r

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def start_session(tap, **kwargs):
    """Start a private session libvirtd for a suite and record it as the
    check "private session libvirtd starts" on tap (a pcinumatest.tap.Tap).
    Returns the Session, or None after printing the suite's closing
    "N passed, M failed" line when it did not start (the caller exits 1)."""
    try:
        s = Session(**kwargs)
    except SessionError as e:
        tap.check(False, "private session libvirtd starts", str(e))
        print("%d passed, %d failed" % (tap.passed, tap.failed))
        return None
    tap.check(True, "private session libvirtd starts",
              note="as %s in %s" % (s.user, s.tmp))
    return s

if __name__ == "__main__":
    # Smoke test: start, print version, stop.
    require_tools()
    s = Session()
    print(s.virsh("version").stdout)
    print(s.virsh("uri").stdout.strip(), "as", s.user, "in", s.tmp)
    s.stop()
    s.stop()

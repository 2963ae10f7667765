"""The whole flow in a real (session) libvirtd, as the libvirt suites
drive it: LvSession (a restartable session libvirtd with a host UUID),
Daemon (pcinumad watching it, status through pcinumactl), domain XML
builders and checks (is_planned, layout_problems), classify() of virsh's
answers, and Harness, the setup and teardown shared by
tests/libvirt/test_integration.py, test_race.py and the faults suite."""

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET

from pcinumatest.daemon import pcinumad_argv
from pcinumatest.session import HookDir, Session, SessionError, _die_with_parent, reachable_copy
from pcinumatest.xmlcmp import compare


VIRSH_TIMEOUT = 60          # any virsh call slower than this is a hang
PLAN_DEADLINE = 2.0         # define -> planned persistent definition
RECONNECT_DEADLINE = 5.0    # libvirtd back -> watcher connected
NS = "urn:pcinuma:topology:1"
MARK = "{%s}topology" % NS

HOOK_FAILED = "Hook script execution failed"
REFUSING = "pcinuma: refusing to start"
NO_PASSTHROUGH = "doesn't support passthrough of host PCI devices"
MSG8_MISMATCH = "does not match the NUMA plan"
MSG8_UPDATING = "persistent definition is being updated"

MID_WARNED = "4e9a72241f07404697b187ec3ec82cb0"
MID_REDEFINED = "455d2ff90a3f4acca3521fe01fa462e5"
MID_REDEFINE_FAILED = "3ff37e4203cd43f58daec424d2534d21"

# sample-4n: host node of each passthrough device used here
NODE_OF = {}
for _n, _bdfs in ((0, ("13", "14", "17", "18")), (1, ("33", "34", "37", "38")),
                  (2, ("53", "54", "57", "58")), (3, ("73", "74", "77", "78"))):
    for _b in _bdfs:
        NODE_OF["0000:%s:00.0" % _b] = _n


# -- small helpers -----------------------------------------------------------

def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text, mode=0o644):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def domain_xml(name, devices=(), cells=2, memnodes=None, memory_mib=128,
               extra_devices="", uid=None):
    """A q35/ACPI/TCG domain with `cells` guest cells; memnodes maps cell ->
    host nodeset (None: no <numatune>); devices are host BDFs."""
    uid = uid or str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, "pcinuma-it:" + name))
    per = max(1, memory_mib // cells)
    cell_xml = "".join("      <cell id='%d' cpus='%d' memory='%d' unit='MiB'/>\n"
                       % (i, i, per) for i in range(cells))
    numatune = ""
    if memnodes:
        numatune = "  <numatune>\n%s  </numatune>\n" % "".join(
            "    <memnode cellid='%d' mode='strict' nodeset='%s'/>\n" % (c, n)
            for c, n in sorted(memnodes.items()))
    hd = ""
    for bdf in devices:
        dom, bus, rest = bdf.split(":")
        slot, fn = rest.split(".")
        hd += ("    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
               "      <source>\n"
               "        <address domain='0x%s' bus='0x%s' slot='0x%s' "
               "function='0x%s'/>\n"
               "      </source>\n"
               "    </hostdev>\n" % (dom, bus, slot, fn))
    return ("<domain type='qemu'>\n"
            "  <name>%s</name>\n"
            "  <uuid>%s</uuid>\n"
            "  <memory unit='MiB'>%d</memory>\n"
            "  <vcpu placement='static'>%d</vcpu>\n"
            "  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
            "  <features>\n    <acpi/>\n  </features>\n"
            "  <cpu mode='custom' match='exact'>\n"
            "    <model fallback='allow'>qemu64</model>\n"
            "    <numa>\n%s    </numa>\n  </cpu>\n"
            "%s"
            "  <devices>\n"
            "    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
            "    <controller type='pci' index='0' model='pcie-root'/>\n"
            "%s%s"
            "    <memballoon model='none'/>\n"
            "  </devices>\n"
            "</domain>\n" % (name, uid, memory_mib, cells, cell_xml, numatune,
                             hd, extra_devices))


def is_planned(xml):
    """The pcinuma mark and at least one pxb."""
    return (NS in xml and "pcie-expander-bus" in xml)


def layout_problems(xml):
    """Check the planned layout: every PCI hostdev sits alone (but for the
    other functions of its host device) on a pcie-root-port, or on a switch
    downstream port, that leads through root and switch ports to a
    pcie-expander-bus whose <node> is a guest cell backed by the device's
    host node.  Return a list of problems (empty = fine)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        return ["not well-formed: %s" % e]
    probs = []
    if root.find("metadata/" + MARK) is None:
        probs.append("no <pcinuma:topology> mark in <metadata>")
    backing = {}
    for mn in root.findall("numatune/memnode"):
        backing[int(mn.get("cellid"))] = set(
            int(x) for x in expand_nodeset(mn.get("nodeset")))
    ctrls = {}
    for c in root.findall("devices/controller"):
        if c.get("type") == "pci":
            ctrls[int(c.get("index"))] = c
    port_users = {}
    for el in root.find("devices") if root.find("devices") is not None else []:
        a = el.find("address")
        if a is not None and a.get("type") == "pci":
            bus = int(a.get("bus"), 0)
            port_users.setdefault(bus, []).append(el)
    n = 0
    for hd in root.findall("devices/hostdev"):
        if hd.get("type") != "pci":
            continue
        n += 1
        s = hd.find("source/address")
        bdf = "%04x:%02x:%02x.%x" % (int(s.get("domain"), 0), int(s.get("bus"), 0),
                                     int(s.get("slot"), 0), int(s.get("function"), 0))
        a = hd.find("address")
        if a is None:
            probs.append("%s: no guest address" % bdf)
            continue
        port = ctrls.get(int(a.get("bus"), 0))
        if port is None or port.get("model") not in ("pcie-root-port", "pcie-switch-downstream-port"):
            probs.append("%s: guest bus %s is not a pcie-root-port or a switch downstream port"
                         % (bdf, a.get("bus")))
            continue
        # alone on its port, but for the other functions of its host device
        others = [u for u in port_users.get(int(port.get("index")), []) if u is not hd]
        same_dev = [u for u in others if u.tag == "hostdev" and u.find("source/address") is not None
                    and int(u.find("source/address").get("bus"), 0) == int(s.get("bus"), 0)
                    and int(u.find("source/address").get("slot"), 0) == int(s.get("slot"), 0)]
        if len(others) != len(same_dev):
            probs.append("%s: its port %s holds %d other devices"
                         % (bdf, port.get("index"), len(others) - len(same_dev)))
        # up through switch ports (downstream -> upstream -> root port or
        # downstream port ...) to the expander bus
        cur, pxb, ok = port, None, True
        for _ in range(16):
            pa = cur.find("address")
            parent = ctrls.get(int(pa.get("bus"), 0)) if pa is not None else None
            if parent is None:
                break
            want_up = {"pcie-switch-downstream-port": ("pcie-switch-upstream-port",),
                       "pcie-switch-upstream-port": ("pcie-root-port", "pcie-switch-downstream-port"),
                       "pcie-root-port": ("pcie-expander-bus",)}.get(cur.get("model"), ())
            if parent.get("model") not in want_up:
                ok = False
                break
            if parent.get("model") == "pcie-expander-bus":
                pxb = parent
                break
            cur = parent
        if not ok or pxb is None:
            probs.append("%s: port %s does not lead to a pcie-expander-bus through root and switch ports"
                         % (bdf, port.get("index")))
            continue
        node_el = pxb.find("target/node")
        if node_el is None:
            probs.append("%s: pxb %s has no <node>" % (bdf, pxb.get("index")))
            continue
        cell = int(node_el.text)
        want = NODE_OF.get(bdf)
        if want is None or want not in backing.get(cell, set()):
            probs.append("%s (host node %s): on pxb %s of guest cell %d, backed "
                         "by host nodes %s" % (bdf, want, pxb.get("index"), cell,
                                               sorted(backing.get(cell, []))))
    if n == 0:
        probs.append("no PCI hostdev")
    return probs


def expand_nodeset(s):
    out = []
    for part in (s or "").split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


# -- the session libvirtd, restartable, with a host UUID ---------------------

class LvSession(Session):
    """Session with a fixed host_uuid in libvirtd.conf (two of them on one
    machine must differ for migration) and a restart() that keeps every
    directory (so definitions survive)."""

    def __init__(self, host_uuid=None, **kw):
        self.host_uuid = host_uuid
        self._restarting = False
        super().__init__(**kw)

    def _setup_dirs(self):
        if self._restarting:
            return
        super()._setup_dirs()
        if self.host_uuid:
            conf = os.path.join(self.env["XDG_CONFIG_HOME"], "libvirt",
                                "libvirtd.conf")
            with open(conf, "a") as f:
                f.write('host_uuid = "%s"\n' % self.host_uuid)

    @property
    def sock(self):
        return os.path.join(self.env["XDG_RUNTIME_DIR"], "libvirt",
                            "libvirt-sock")

    @property
    def uri(self):
        return "qemu+unix:///session?socket=" + self.sock

    def kill_daemon(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self):
        self.kill_daemon()
        self._restarting = True
        try:
            self.start()
        finally:
            self._restarting = False

    def start_dom(self, name, timeout=VIRSH_TIMEOUT):
        """virsh start; return (verdict, text): verdict is 'refused' (by
        our hook), 'passed' (the hook let it through; libvirt then failed
        on the hostdev), 'started', 'hang' or 'other'."""
        t0 = time.monotonic()
        try:
            r = self.virsh("start", name, timeout=timeout, quiet=False)
        except subprocess.TimeoutExpired:
            return "hang", "virsh start %s did not return within %ds" % (
                name, timeout)
        text = (r.stdout + r.stderr).strip()
        text += "\n(%.2fs)" % (time.monotonic() - t0)
        return classify(r.returncode, text), text

    def create_dom(self, path, timeout=VIRSH_TIMEOUT):
        try:
            r = self.virsh("create", path, timeout=timeout, quiet=False)
        except subprocess.TimeoutExpired:
            return "hang", "virsh create did not return within %ds" % timeout
        text = (r.stdout + r.stderr).strip()
        return classify(r.returncode, text), text


OUR_HOOK = None   # the wrapper's path, set by Test.setup()


def classify(rc, text):
    """The hook's verdict from virsh's answer.  A refusal counts only when
    it names our wrapper (another test's hook in qemu.d would also run)."""
    if rc == 0:
        return "started"
    if HOOK_FAILED in text and REFUSING in text and \
            (OUR_HOOK is None or OUR_HOOK in text):
        return "refused"
    if NO_PASSTHROUGH in text and HOOK_FAILED not in text:
        return "passed"
    return "other"


# -- pcinumad ------------------------------------------------------------------

class Daemon:
    def __init__(self, a, rundir, sysfs, policy, allow_uid, logdir):
        self.a = a
        self.rundir = rundir
        self.socket = os.path.join(rundir, "hook.sock")
        self.sysfs = sysfs
        self.policy = policy
        self.allow_uid = allow_uid
        self.logdir = logdir
        self.proc = None
        self.logpath = None
        self.n = 0
        self.logs = []
        # pre-images stay in the test's directory, not /var/lib/pcinuma
        self.extra = ["--state-dir", os.path.join(rundir, "state")]

    def start(self, uri, wait_connected=False):
        self.stop()
        self.n += 1
        self.logpath = os.path.join(self.logdir, "pcinumad.%d.log" % self.n)
        self.logs.append(self.logpath)
        log = open(self.logpath, "w")
        try:
            self.proc = subprocess.Popen(
                pcinumad_argv(self.a.pcinumad, self.sysfs, self.policy, self.socket,
                              libvirt_uri=uri,
                              extra=["--allow-uid", str(self.allow_uid)] + self.extra),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=_die_with_parent)
        finally:
            log.close()
        self.uri = uri
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("pcinumad exited with %s:\n%s"
                                   % (self.proc.returncode, self.log()[-3000:]))
            if os.path.exists(self.socket):
                st = self.status()
                if st is not None:
                    os.chmod(self.socket, 0o666)
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("pcinumad did not answer on %s within 10 s:\n%s"
                               % (self.socket, self.log()[-3000:]))
        if wait_connected:
            self.wait_connected(RECONNECT_DEADLINE)
        return self

    def wait_connected(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if st and (st.get("libvirt") or {}).get("connected"):
                return True
            time.sleep(0.05)
        return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return None
        rc = self.proc.poll()
        if rc is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                rc = self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                rc = "killed (did not stop within 15 s of SIGTERM)"
        self.proc = None
        return rc

    def hup(self):
        before = (self.status() or {}).get("policy", {}).get("loaded_at_usec")
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = self.status() or {}
            if st.get("policy", {}).get("loaded_at_usec") != before:
                return True
            time.sleep(0.05)
        return False

    def status(self, text=False):
        try:
            r = subprocess.run([self.a.pcinumactl, "status", "--socket",
                                self.socket] + ([] if text else ["--json"]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return None
        if r.returncode != 0:
            return None
        if text:
            return r.stdout
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def log(self, all_runs=False):
        out = []
        for p in (self.logs if all_runs else self.logs[-1:]):
            try:
                out.append(read(p))
            except OSError:
                pass
        return "".join(out)


# -- the test ------------------------------------------------------------------

class Harness:
    """The plumbing of a libvirt test: a private session libvirtd with the
    hook installed (a wrapper in /etc/libvirt/hooks/qemu.d forwarding only
    this test's sessions), pcinumad watching it, the fixture host
    sample-4n (a subclass may set HOST to another host of
    tests/fixtures/hosts), a policy file; helpers to define, dump and wait.
    Subclasses add the cases and run()."""

    HOST = "sample-4n"

    def __init__(self, a, tap):
        self.a = a
        self.tap = tap
        self.s = None
        self.s2 = None
        self.d = None
        self.hook_wrapper = None
        self.hook = None
        self.tmp = None

    # -- plumbing --------------------------------------------------------
    def diag(self, text):
        self.tap.diag(text)

    def check(self, ok, what, diag=None, note=None):
        return self.tap.check(bool(ok), what, diag, note)

    def ensure_daemon(self):
        """Start pcinumad again if a step stopped it (or it died)."""
        if not self.d.alive():
            self.d.start(self.s.uri, wait_connected=True)

    def run_steps(self, steps, before=None):
        """Run each step (a method) whose name contains one of --only
        (all without --only), each after before() when given, with its
        time as a diagnostic.  An exception that stops a step is one
        failed "STEP: ran to the end" check; the next step runs."""
        for step in steps:
            name = step.__name__
            if self.a.only and not any(o in name for o in self.a.only):
                continue
            t0 = time.monotonic()
            self.diag("---- %s" % name)
            try:
                if before:
                    before()
                step()
            except (SessionError, RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                self.check(False, "%s: ran to the end" % name, "%s: %s" % (type(e).__name__, e))
            self.diag("%s: %.1fs" % (name, time.monotonic() - t0))

    def set_policy(self, default="require", rules=None, migration=None, passthrough_pool=None):
        rules = rules if rules is not None else self.rules
        dflt = {"policy": default}
        if migration:
            dflt["migration"] = migration
        doc = {
            "default": dflt,
            "rules": [{"match": {"name": n}, "policy": p} for n, p in rules],
            "hook": {"timeout_ms": 10000, "on_unreachable": "allow"},
        }
        if passthrough_pool:
            doc["passthrough_pool"] = passthrough_pool
        write(self.policy, json.dumps(doc, indent=1) + "\n")

    def define(self, xml):
        return self.s.define(xml)

    def dump(self, name, inactive=True, sess=None):
        return (sess or self.s).dumpxml(name, inactive=inactive)

    def wait_planned(self, name, timeout=PLAN_DEADLINE, sess=None):
        """Poll dumpxml --inactive until planned; (xml, seconds or None)."""
        t0 = time.monotonic()
        xml = None
        while True:
            xml = self.dump(name, sess=sess)
            if is_planned(xml):
                return xml, time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                return xml, None
            time.sleep(0.05)

    def wait_until(self, pred, timeout, step=0.05):
        t0 = time.monotonic()
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() - t0 > timeout:
                return v
            time.sleep(step)

    def wait_idle(self, quiet=0.5, timeout=15.0):
        """Wait until the watcher has nothing pending (it redefines a
        domain only once its events are quiet for --settle-ms) and its
        counters stand still for `quiet` s."""
        last, since, t0 = None, time.monotonic(), time.monotonic()
        while time.monotonic() - t0 < timeout:
            st = (self.d.status() or {}).get("libvirt") or {}
            key = (st.get("pending"), st.get("events"), st.get("redefinitions"))
            if key != last or st.get("pending"):
                last, since = key, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return True
            time.sleep(0.05)
        return False

    def wait_log(self, needle, timeout=5.0, all_runs=False):
        return self.wait_until(lambda: needle in self.d.log(all_runs), timeout)

    def same(self, got, want, tag):
        return compare(got, want, self.work, tag, "got", "want")

    def run_hook(self, name, phase, sub, xml):
        env = dict(self.s.env)
        env["PCINUMA_SOCKET"] = self.d.socket
        env["PCINUMA_HOOK_CONF"] = self.hook_conf
        return subprocess.run([self.hook_copy, name, phase, sub, "-"],
                              input=xml, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env,
                              timeout=30, user=self.s.uid, group=self.s.gid,
                              extra_groups=[])

    # -- setup -----------------------------------------------------------
    def setup(self):
        a = self.a
        self.work = a.workdir
        os.makedirs(self.work, exist_ok=True)
        # Short, world-traversable dir: socket path < 108 bytes, and the
        # hook (run by libvirt as pcinuma-test) must reach the socket, its
        # settings and its binary; case 7's pipe runs pcinumactl on the
        # sample host as that user too.  Copies, not the build tree, which
        # may be under /root (mode 0700).
        self.tmp = tempfile.mkdtemp(prefix="pcinuma-it-", dir="/tmp")
        os.chmod(self.tmp, 0o755)
        self.hook_copy = reachable_copy(a.hook, self.tmp)
        self.ctl_copy = reachable_copy(a.pcinumactl, self.tmp)
        self.sysfs = os.path.join(self.tmp, "sys-" + self.HOST)
        r = subprocess.run([sys.executable, a.mkfakesysfs,
                            os.path.join(a.hosts, self.HOST + ".json"), self.sysfs],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("mkfakesysfs failed: %s" % r.stdout)
        self.hook_conf = os.path.join(self.tmp, "hook-test.conf")
        write(self.hook_conf, "socket = %s\ntimeout_ms = 10000\n"
              "on_unreachable = allow\n" % os.path.join(self.tmp, "hook.sock"))
        self.policy = os.path.join(self.tmp, "policy.json")
        # domain name -> policy; everything else: require
        self.rules = [("legacy-*", "legacy"), ("off-*", "off"),
                      ("rev-*", "off")]
        self.set_policy()
        # the hook wrapper, before any libvirtd starts
        # (HookDir creates qemu.d when missing and removes only what it made)
        self.hook = HookDir("pcinuma-test-" + secrets.token_hex(4))
        hooks = self.hook.dir
        self.hook_wrapper = self.hook.path
        global OUR_HOOK
        OUR_HOOK = self.hook_wrapper
        atexit.register(self.remove_hook)
        # Every session libvirtd on this machine that starts while it is
        # installed runs it: it forwards only the calls of this test's
        # session daemons (libvirt passes HOME=<the session's home>) and
        # lets every other one through untouched.
        self.homes = os.path.join(self.tmp, "homes")
        write(self.homes, "")
        self.hook.install(
              "#!/bin/sh\n"
              "# pcinuma integration test (%s); removed when the test ends\n"
              "# (stdin is the domain XML: read the list on fd 3)\n"
              "exec 3< %s || exit 0\n"
              "while read -r h <&3; do\n"
              "  if [ \"$h\" = \"$HOME\" ]; then\n"
              "    exec 3<&-\n"
              "    PCINUMA_SOCKET=%s PCINUMA_HOOK_CONF=%s exec %s \"$@\"\n"
              "  fi\n"
              "done\n"
              "exit 0\n"
              % (self.tmp, self.homes, os.path.join(self.tmp, "hook.sock"),
                 self.hook_conf, self.hook_copy))
        self.s = self.new_session()
        others = sorted(set(os.listdir(hooks)) - {os.path.basename(self.hook_wrapper)})
        if others:
            self.diag("note: other hooks in %s, which this test's libvirtd "
                      "also runs: %s" % (hooks, ", ".join(others)))
        self.check(True, "private session libvirtd starts",
                   note="as %s in %s; hook %s" % (self.s.user, self.s.tmp,
                                                  self.hook_wrapper))
        self.logdir = os.path.join(self.work, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.d = Daemon(a, self.tmp, self.sysfs, self.policy, self.s.uid,
                        self.logdir)

    def new_session(self):
        """A session libvirtd whose hook calls the wrapper forwards."""
        sess = LvSession(host_uuid=str(uuidlib.uuid4()))
        with open(self.homes, "a") as f:
            f.write(sess.home + "\n")
        return sess

    def remove_hook(self):
        if self.hook is not None:
            self.hook.remove()

    def cleanup(self):
        for s in (self.s2, self.s):
            if s is not None:
                try:
                    s.stop()
                except Exception as e:   # noqa: BLE001
                    self.diag("stopping a libvirtd: %s" % e)
        if self.d is not None:
            self.d.stop()
        self.remove_hook()
        if self.d is not None:
            for p in self.d.logs:
                self.diag("pcinumad log: %s" % p)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

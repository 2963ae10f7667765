#!/usr/bin/env python3
"""Tests for pcinuma-hook, the libvirt qemu hook (docs/design.md §2, §8, §9).

Drives the real hook binary against a fake pcinumad written here: a Unix
socket server that speaks the frame format (4-byte big-endian length, then
a JSON object) and answers as each test tells it.  The hook runs with a
scrubbed environment, as libvirt runs it, holding only PCINUMA_SOCKET and
PCINUMA_HOOK_CONF, so no real daemon or config file is ever touched.

Prints "ok N - ..." / "not ok N - ..." lines and a final "N passed, M
failed" line (pcinumatest.tap.Tap, one check per test function); exits 1
if anything failed or nothing passed.
"""

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from pcinumatest.daemon import encode as frame   # the hook protocol's frame
from pcinumatest.tap import Tap

HOOK = None
TMP = None
STAND_INS_BUILD = False     # --stand-ins-build
MiB = 1024 * 1024

PLAIN_XML = """<domain type='kvm'>
  <name>plain-vm</name>
  <devices>
    <disk type='file' device='disk'><source file='/var/lib/libvirt/images/a.qcow2'/></disk>
    <interface type='network'><source network='default'/></interface>
  </devices>
</domain>
"""

GPU_XML = """<domain type='kvm'>
  <name>gpu-vm-1</name>
  <description>caf\u00e9 \u20ac "quoted" \\ back/slash</description>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/></source>
    </hostdev>
  </devices>
</domain>
"""

IFACE_XML_SQ = PLAIN_XML.replace(
    "<interface type='network'><source network='default'/></interface>",
    "<interface type='hostdev' managed='yes'><source><address type='pci' bus='0x5e'/></source></interface>")
IFACE_XML_DQ = PLAIN_XML.replace(
    "<interface type='network'><source network='default'/></interface>",
    '<interface type="hostdev" managed="yes"><source><address type="pci" bus="0x5e"/></source></interface>')
MDEV_XML = PLAIN_XML.replace(
    "<interface type='network'><source network='default'/></interface>",
    "<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source>"
    "<address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source></hostdev>")
MARKED_XML = PLAIN_XML.replace(
    "<devices>",
    "<metadata><pcinuma:topology xmlns:pcinuma='urn:pcinuma:topology:1' planned='yes'/></metadata>\n  <devices>")


# ---- the fake daemon -----------------------------------------------------

def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


class FakeDaemon:
    """Listens on a Unix socket.  For each connection, reads one request
    frame (unless read_request is False), records it, then calls
    behaviour(conn, request)."""

    def __init__(self, behaviour, read_request=True, path=None):
        self.path = path or os.path.join(TMP, "d%d.sock" % id(self))
        self.behaviour = behaviour
        self.read_request = read_request
        self.connections = 0
        self.requests = []
        self.errors = []
        self.stopping = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.threads = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _handle(self, conn):
        with conn:
            try:
                req = None
                if self.read_request:
                    (n,) = struct.unpack(">I", recv_exact(conn, 4))
                    req = json.loads(recv_exact(conn, n).decode("utf-8"))
                    self.requests.append(req)
                self.behaviour(conn, req)
            except Exception as e:  # noqa: BLE001 - recorded for the test
                self.errors.append(repr(e))

    def close(self):
        self.stopping = True
        self.thread.join(2)
        self.sock.close()
        for t in self.threads:
            t.join(0.1)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def answer(exit_code=0, stdout=None, stderr=None, verdict="allow"):
    def behaviour(conn, req):
        obj = {"version": 1, "exit": exit_code, "verdict": verdict}
        if stdout is not None:
            obj["stdout"] = stdout
        if stderr is not None:
            obj["stderr"] = stderr
        conn.sendall(frame(obj))
    return behaviour


def send_raw(data, then_close=True):
    def behaviour(conn, req):
        conn.sendall(data)
        if not then_close:
            time.sleep(30)
    return behaviour


def never_answer(conn, req):
    # Keep the connection open far longer than any timeout under test.
    for _ in range(300):
        time.sleep(0.1)


def contacted(conn, req):
    conn.sendall(frame({"version": 1, "exit": 1, "stderr": "FAKE DAEMON WAS CONTACTED\n"}))


# ---- running the hook ----------------------------------------------------

class Result:
    def __init__(self, rc, out, err, elapsed):
        self.rc, self.out, self.err, self.elapsed = rc, out, err, elapsed

    def __repr__(self):
        return "rc=%r stdout=%r stderr=%r elapsed=%.3fs" % (self.rc, self.out[:300], self.err[:600], self.elapsed)


def write_conf(text):
    fd, path = tempfile.mkstemp(dir=TMP, suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


EMPTY_CONF = None


def run_hook(args, xml="", sock=None, conf=None, env_extra=None, timeout=60):
    env = {"PCINUMA_HOOK_CONF": conf or EMPTY_CONF}
    if sock is not None:
        env["PCINUMA_SOCKET"] = sock
    if env_extra:
        env.update(env_extra)
    data = xml.encode() if isinstance(xml, str) else xml
    start = time.monotonic()
    p = subprocess.run([HOOK] + list(args), input=data, capture_output=True, env=env, timeout=timeout)
    return Result(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"),
                  time.monotonic() - start)


def check(cond, what, res=None):
    if not cond:
        raise AssertionError(what + ("\n    " + repr(res) if res is not None else ""))


def skipped_line(name, phase, action):
    return "pcinuma: NUMA placement check skipped for domain %s (phase %s): " % (name, phase), action


def check_unreachable(res, name, phase, refuse, reason_part=None):
    prefix = "pcinuma: NUMA placement check skipped for domain %s (phase %s): " % (name, phase)
    suffix = ("; refusing (on_unreachable=refuse)" if refuse else "; starting anyway (on_unreachable=allow)")
    lines = [l for l in res.err.splitlines() if l.startswith(prefix)]
    check(len(lines) == 1, "expected one 'check skipped' line on stderr", res)
    check(lines[0].endswith(suffix), "the line must end in %r" % suffix, res)
    if reason_part:
        check(reason_part in lines[0], "the reason must mention %r" % reason_part, res)
    check(res.rc == (1 if refuse else 0), "exit code %d expected" % (1 if refuse else 0), res)
    check(res.out == "", "nothing on stdout when the daemon gave no answer", res)


# ---- the tests -----------------------------------------------------------

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def version():
    """--version prints the version"""
    r = run_hook(["--version"])
    check(r.rc == 0 and r.out.startswith("pcinuma-hook ") and len(r.out.split()) == 2, "version line", r)


@test
def fast_path_other_phases():
    """phases other than prepare/migrate/restore never contact the daemon"""
    with FakeDaemon(contacted) as d:
        for phase, sub in [("start", "begin"), ("started", "begin"), ("stopped", "end"), ("release", "end"),
                           ("reconnect", "begin"), ("attach", "begin"), ("", ""), ("Prepare", "begin")]:
            r = run_hook(["gpu-vm-1", phase, sub, "-"], GPU_XML, sock=d.path)
            check(r.rc == 0 and r.out == "" and r.err == "", "phase %r must exit 0 silently" % phase, r)
        time.sleep(0.2)
        check(d.connections == 0, "the daemon was contacted %d times" % d.connections)


@test
def fast_path_no_devices():
    """prepare/migrate/restore of a domain without hostdev or mark: no contact, no output"""
    with FakeDaemon(contacted) as d:
        for phase in ("prepare", "migrate", "restore"):
            r = run_hook(["plain-vm", phase, "begin", "-"], PLAIN_XML, sock=d.path)
            check(r.rc == 0 and r.out == "" and r.err == "", "%s of a plain domain" % phase, r)
        r = run_hook(["plain-vm", "prepare", "begin", "-"], "", sock=d.path)
        check(r.rc == 0 and r.out == "" and r.err == "", "empty stdin", r)
        time.sleep(0.2)
        check(d.connections == 0, "the daemon was contacted %d times" % d.connections)


@test
def fast_path_no_config_read():
    """the fast path does not read the config file (a broken one stays silent)"""
    conf = write_conf("this is not a config line\nfoo = bar\n")
    r = run_hook(["plain-vm", "prepare", "begin", "-"], PLAIN_XML, sock="/nonexistent/x.sock", conf=conf)
    check(r.rc == 0 and r.err == "", "no warning on the fast path", r)
    r = run_hook(["gpu-vm-1", "started", "begin", "-"], GPU_XML, sock="/nonexistent/x.sock", conf=conf)
    check(r.rc == 0 and r.err == "", "no warning on the fast path", r)


@test
def markers_reach_daemon():
    """pci hostdev, mdev, interface type='hostdev' (both quotes) and the pcinuma mark reach the daemon"""
    with FakeDaemon(answer(0, verdict="allow")) as d:
        for xml in (GPU_XML, MDEV_XML, IFACE_XML_SQ, IFACE_XML_DQ, MARKED_XML):
            r = run_hook(["vm", "prepare", "begin", "-"], xml, sock=d.path)
            check(r.rc == 0, "allowed", r)
        check(len(d.requests) == 5, "5 requests expected, got %d" % len(d.requests))
        check(not d.errors, "fake daemon errors: %r" % d.errors)


def with_device(device):
    """PLAIN_XML with one more element in <devices>."""
    return PLAIN_XML.replace("</devices>", "  " + device + "\n  </devices>")


PCI_ADDR = "<source><address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/></source>"
MDEV_SRC = "<source><address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source>"
USB_SRC = "<source><vendor id='0x1d6b'/><product id='0x0002'/></source>"

# Every legal spelling of a start tag the daemon acts on: attribute order,
# either quote, white space (newlines, tabs, CR) around '=' and between
# attributes, managed before type, a namespaced attribute named like ours.
PCI_SPELLINGS = [
    "<hostdev mode='subsystem' type='pci' managed='yes'>" + PCI_ADDR + "</hostdev>",
    '<hostdev mode="subsystem" type="pci" managed="yes">' + PCI_ADDR + "</hostdev>",
    "<hostdev managed='yes' mode='subsystem' type='pci'>" + PCI_ADDR + "</hostdev>",
    "<hostdev type='pci' mode='subsystem'>" + PCI_ADDR + "</hostdev>",
    "<hostdev type='pci'>" + PCI_ADDR + "</hostdev>",
    "<hostdev managed=\"no\" type='pci' mode=\"subsystem\">" + PCI_ADDR + "</hostdev>",
    "<hostdev\n      mode='subsystem'\n      type='pci'\n      managed='yes'>" + PCI_ADDR + "</hostdev>",
    "<hostdev\tmode = 'subsystem'\ttype =\n'pci' >" + PCI_ADDR + "</hostdev>",
    "<hostdev\r\nmode='subsystem'\r\ntype\r\n=\r\n\"pci\"\r\n>" + PCI_ADDR + "</hostdev>",
    "<hostdev mode='subsystem' foo:type='usb' xmlns:foo='urn:x' type='pci'>" + PCI_ADDR + "</hostdev>",
    "<hostdev mode='subsystem' alias='a>b' type='pci'>" + PCI_ADDR + "</hostdev>",
    "<hostdev mode='subsystem' note=\"it's\" type='pci'>" + PCI_ADDR + "</hostdev>",
    "<hostdev mode='subsystem' type='pci' managed='yes'/>",
    "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>" + MDEV_SRC + "</hostdev>",
    '<hostdev model="vfio-pci" type="mdev">' + MDEV_SRC + "</hostdev>",
    "<hostdev\n  type = \"mdev\"\n  model='vfio-pci'>" + MDEV_SRC + "</hostdev>",
    "<interface type='hostdev' managed='yes'>" + PCI_ADDR + "</interface>",
    '<interface managed="yes" type="hostdev">' + PCI_ADDR + "</interface>",
    "<interface\n  managed='yes'\n  type\t=\t'hostdev'>" + PCI_ADDR + "</interface>",
    # what cannot be read for certain counts as a match
    "<hostdev mode='subsystem' type='&#112;ci'>" + PCI_ADDR + "</hostdev>",
    "<interface type='&#x68;ostdev'>" + PCI_ADDR + "</interface>",
]

# Passthrough the daemon does not act on: the fast path exits 0.
NOT_OURS = [
    "<hostdev mode='subsystem' type='usb' managed='yes'>" + USB_SRC + "</hostdev>",
    '<hostdev managed="no" type="usb" mode="subsystem">' + USB_SRC + "</hostdev>",
    "<hostdev\n  mode = 'subsystem'\n  type = \"usb\">" + USB_SRC + "</hostdev>",
    "<hostdev mode='subsystem' type='scsi'><source><adapter name='scsi_host0'/>"
    "<address bus='0' target='0' unit='0'/></source></hostdev>",
    "<hostdev mode='subsystem' type='scsi_host'><source protocol='vhost' wwpn='naa.5001405df3e54061'/></hostdev>",
    "<hostdev mode='capabilities' type='storage'><source><block>/dev/sdf1</block></source></hostdev>",
    "<hostdev mode='capabilities' type='misc'><source><char>/dev/input/event3</char></source></hostdev>",
    "<hostdev mode='capabilities' type='net'><source><interface>eth0</interface></source></hostdev>",
    "<interface type='bridge'><source bridge='br0'/><model type='virtio'/></interface>",
    "<interface type='direct'><source dev='eth0' mode='vepa'/></interface>",
    "<hostdevice type='pci'/>",
    "<hostdev mode='subsystem' x:type='pci' xmlns:x='urn:y'>" + USB_SRC + "</hostdev>",
    "<redirdev bus='usb' type='spicevmc'/>",
    "<!-- the hostdev of type 'hostdev' ... \"hostdev\" -->",
]


@test
def pci_spellings_reach_daemon():
    """PCI and mdev hostdevs and <interface type='hostdev'>, in every legal spelling, reach the daemon"""
    with FakeDaemon(answer(0, verdict="allow")) as d:
        for i, dev in enumerate(PCI_SPELLINGS):
            before = len(d.requests)
            r = run_hook(["vm", "prepare", "begin", "-"], with_device(dev), sock=d.path)
            check(r.rc == 0 and r.err == "", "spelling %d allowed" % i, r)
            check(len(d.requests) == before + 1, "spelling %d did not reach the daemon: %r" % (i, dev), r)
        check(not d.errors, "fake daemon errors: %r" % d.errors)


@test
def usb_scsi_hostdevs_fast_path():
    """USB, SCSI and mode='capabilities' hostdevs and other interfaces never contact the daemon"""
    refuse = write_conf("on_unreachable = refuse\n")
    with FakeDaemon(contacted) as d:
        for i, dev in enumerate(NOT_OURS):
            for phase in ("prepare", "migrate", "restore"):
                r = run_hook(["usb-vm", phase, "begin", "-"], with_device(dev), sock=d.path, conf=refuse)
                check(r.rc == 0 and r.out == "" and r.err == "", "case %d (%s) must exit 0 silently: %r"
                      % (i, phase, dev), r)
        time.sleep(0.2)
        check(d.connections == 0, "the daemon was contacted %d times" % d.connections)
    # the review's case: a VM whose only hostdev is USB, no daemon, refuse
    r = run_hook(["usb-vm", "prepare", "begin", "-"], with_device(NOT_OURS[0]),
                 sock=os.path.join(TMP, "nobody.sock"), conf=refuse)
    check(r.rc == 0 and r.err == "", "USB only, no daemon, on_unreachable=refuse: started quietly", r)
    # and a USB hostdev next to a PCI one still reaches the daemon
    with FakeDaemon(answer(0)) as d:
        r = run_hook(["mixed", "prepare", "begin", "-"], with_device(NOT_OURS[0] + PCI_SPELLINGS[0]), sock=d.path)
        check(r.rc == 0 and len(d.requests) == 1, "USB + PCI: asked", r)


def random_start_tag(rng):
    """A random legal spelling of a <hostdev> or <interface> start tag (and
    its element), with what an XML parser would read from it."""
    ws = lambda: "".join(rng.choice([" ", "\t", "\n", "\r\n", "  "]) for _ in range(rng.randint(1, 3)))
    opt_ws = lambda: ws() if rng.random() < 0.3 else ""
    if rng.random() < 0.6:
        name = "hostdev"
        attrs = {"type": rng.choice(["pci", "mdev", "usb", "scsi", "scsi_host", "storage", "misc", "net", "PCI"])}
        if rng.random() < 0.7:
            attrs["mode"] = rng.choice(["subsystem", "subsystem", "capabilities"])
        if rng.random() < 0.5:
            attrs["managed"] = rng.choice(["yes", "no"])
        if rng.random() < 0.3:
            attrs["model"] = "vfio-pci"
    else:
        name = "interface"
        attrs = {"type": rng.choice(["hostdev", "hostdev", "network", "bridge", "direct", "user"])}
        if rng.random() < 0.5:
            attrs["managed"] = rng.choice(["yes", "no"])
    if rng.random() < 0.2:
        attrs["alias"] = rng.choice(["a>b", "it's", 'say "hi"', "type='pci'", "<x>".replace("<", "&lt;")])
    items = list(attrs.items())
    if rng.random() < 0.2:
        items.append(("xmlns:n", "urn:x"))
        items.append(("n:type", rng.choice(["pci", "usb", "hostdev"])))
    rng.shuffle(items)
    text = "<" + name
    for k, v in items:
        q = '"' if "'" in v else "'" if '"' in v else rng.choice(["'", '"'])
        text += ws() + k + opt_ws() + "=" + opt_ws() + q + v + q
    text += opt_ws()
    text += "/>" if rng.random() < 0.3 else ">" + PCI_ADDR + "</" + name + ">"
    return text


def concerns_daemon(xml):
    """What the hook's fast path must send on, read by a real XML parser:
    a <hostdev> of type pci or mdev whose mode is subsystem (or absent), or
    an <interface type='hostdev'> (and, in a stand_ins build, an
    <interface type='user'>, which may be a stand-in)."""
    import xml.etree.ElementTree as ET
    devices = ET.fromstring(xml).find("devices")
    for e in devices:
        if e.tag == "hostdev" and e.get("type") in ("pci", "mdev") and e.get("mode", "subsystem") == "subsystem":
            return True
        if e.tag == "interface" and e.get("type") == "hostdev":
            return True
        if STAND_INS_BUILD and e.tag == "interface" and e.get("type") == "user":
            return True
    return False


USER_NICS = [
    "<interface type='user'><mac address='52:54:00:5a:00:01'/><model type='virtio'/></interface>",
    '<interface\n  type = "user">\n<model type="virtio"/></interface>',
    "<interface type='user'/>",
]


@test
def user_interface():
    """<interface type='user'>: the fast path in a normal build; forwarded in a stand_ins build (it may be a stand-in)"""
    refuse = write_conf("on_unreachable = refuse\n")
    with FakeDaemon(answer(0, verdict="allow") if STAND_INS_BUILD else contacted) as d:
        for i, dev in enumerate(USER_NICS):
            before = len(d.requests)
            r = run_hook(["vm", "prepare", "begin", "-"], with_device(dev), sock=d.path, conf=refuse)
            check(r.rc == 0 and r.err == "", "case %d: exit 0 silently" % i, r)
            if STAND_INS_BUILD:
                check(len(d.requests) == before + 1, "case %d did not reach the daemon: %r" % (i, dev), r)
        time.sleep(0.2)
        if not STAND_INS_BUILD:
            check(d.connections == 0, "the daemon was contacted %d times" % d.connections)
        check(not d.errors, "fake daemon errors: %r" % d.errors)


@test
def fast_path_matches_xml_parser():
    """600 random spellings of 0-3 hostdevs/interfaces: the hook asks exactly when an XML parser finds a PCI/mdev hostdev"""
    import random
    seed = int(os.environ.get("PCINUMA_HOOK_TEST_SEED", "20261123"))
    rng = random.Random(seed)
    refuse = write_conf("on_unreachable = refuse\ntimeout_ms = 1000\n")
    nobody = os.path.join(TMP, "nobody.sock")
    counts = {True: 0, False: 0}
    for i in range(600):
        xml = with_device("\n    ".join(random_start_tag(rng) for _ in range(rng.randint(0, 3))))
        want = concerns_daemon(xml)
        counts[want] += 1
        r = run_hook(["vm", "prepare", "begin", "-"], xml, sock=nobody, conf=refuse)
        asked = r.rc == 1 and "check skipped" in r.err
        check(asked == want and (asked or (r.rc == 0 and r.err == "")),
              "case %d (seed %d): an XML parser says %s, the hook %s:\n%s"
              % (i, seed, "ours" if want else "not ours", "asked" if asked else "did not ask", xml), r)
    print("# %d domains with a PCI/mdev device, %d without (seed %d)" % (counts[True], counts[False], seed))
    check(counts[True] > 100 and counts[False] > 100, "both kinds generated: %r" % counts)


def run_as_nobody(args, xml, env):
    data = xml.encode()
    # uid 65534 cannot reach a build directory under a 0700 /root: run a
    # copy from TMP (mode 0755 in session_libvirtd_quiet).
    hook = os.path.join(TMP, "pcinuma-hook-reachable")
    if not os.path.exists(hook):
        shutil.copy2(HOOK, hook)
        os.chmod(hook, 0o755)

    def demote():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    p = subprocess.run([hook] + list(args), input=data, capture_output=True, env=env, timeout=60,
                       preexec_fn=demote)
    return Result(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"), 0)


@test
def session_libvirtd_quiet():
    """run as a non-root user (a session libvirtd's hook) without $PCINUMA_SOCKET: exit 0 quietly, even with refuse"""
    if os.geteuid() != 0:
        raise AssertionError("this test must run as root to run the hook as another user")
    os.chmod(TMP, 0o755)
    refuse = write_conf("on_unreachable = refuse\ntimeout_ms = 300\n")
    os.chmod(refuse, 0o644)
    for phase in ("prepare", "migrate", "restore", "started"):
        for xml in (GPU_XML, MDEV_XML, IFACE_XML_SQ, MARKED_XML):
            r = run_as_nobody(["gpu-vm-1", phase, "begin", "-"], xml, {"PCINUMA_HOOK_CONF": refuse})
            check(r.rc == 0 and r.out == "" and r.err == "", "uid 65534, %s: exit 0 without a word" % phase, r)
    # A wrapper that names a daemon with PCINUMA_SOCKET opts in (the tests'
    # session libvirtds, pcinumad --allow-uid): the hook asks it.
    with FakeDaemon(answer(1, stderr="asked\n")) as d:
        os.chmod(d.path, 0o666)
        r = run_as_nobody(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML,
                          {"PCINUMA_HOOK_CONF": refuse, "PCINUMA_SOCKET": d.path})
        check(r.rc == 1 and r.err == "asked\n" and len(d.requests) == 1, "uid 65534 with PCINUMA_SOCKET: asked", r)
    # and as root, without the variable, the same call is not quiet
    r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, conf=refuse,
                 env_extra={"PCINUMA_SOCKET": os.path.join(TMP, "nobody.sock")})
    check_unreachable(r, "gpu-vm-1", "prepare", refuse=True)


@test
def request_content():
    """the request is {version:1, type:hook, argv:[4 strings], xml} with the XML intact"""
    with FakeDaemon(answer(0)) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path)
        check(r.rc == 0, "allowed", r)
        req = d.requests[0]
        check(req == {"version": 1, "type": "hook", "argv": ["gpu-vm-1", "prepare", "begin", "-"], "xml": GPU_XML},
              "request as sent: %r" % req)


@test
def short_argv():
    """missing arguments are sent as empty strings"""
    with FakeDaemon(answer(0)) as d:
        r = run_hook(["vm", "prepare"], GPU_XML, sock=d.path)
        check(r.rc == 0, "allowed", r)
        check(d.requests[0]["argv"] == ["vm", "prepare", "", ""], "argv %r" % d.requests[0]["argv"])


@test
def each_phase():
    """prepare, migrate and restore are each forwarded with their subphase"""
    with FakeDaemon(answer(0)) as d:
        for phase in ("prepare", "migrate", "restore"):
            r = run_hook(["gpu-vm-1", phase, "begin", "-"], GPU_XML, sock=d.path)
            check(r.rc == 0 and r.out == "" and r.err == "", phase, r)
        check([q["argv"][1:3] for q in d.requests] ==
              [["prepare", "begin"], ["migrate", "begin"], ["restore", "begin"]], "phases %r" % d.requests)


@test
def refusal_passthrough():
    """exit 1 and stderr from the daemon are passed through"""
    msg = "pcinuma: domain gpu-vm-1: refusing to start: the topology does not match the plan\n"
    with FakeDaemon(answer(1, stderr=msg, verdict="refuse")) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path)
        check(r.rc == 1 and r.err == msg and r.out == "", "refusal passed through", r)


@test
def warning_passthrough():
    """exit 0 with a warning on stderr"""
    msg = "pcinuma: domain gpu-vm-1: starting with the old topology\n"
    with FakeDaemon(answer(0, stderr=msg, verdict="warn")) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path)
        check(r.rc == 0 and r.err == msg and r.out == "", "warning passed through", r)


@test
def stdout_passthrough():
    """migrate and restore: the daemon's stdout (the XML) is written out exactly"""
    for phase in ("migrate", "restore"):
        with FakeDaemon(answer(0, stdout=GPU_XML, verdict="pass")) as d:
            r = run_hook(["gpu-vm-1", phase, "begin", "-"], GPU_XML, sock=d.path)
            check(r.rc == 0 and r.out == GPU_XML and r.err == "", "%s XML passed through" % phase, r)


@test
def big_stdout_passthrough():
    """a 3 MiB XML answer is written out in full"""
    big = GPU_XML.replace("</devices>", "<!-- " + "x" * (3 * MiB) + " -->\n  </devices>")
    with FakeDaemon(answer(0, stdout=big)) as d:
        r = run_hook(["gpu-vm-1", "migrate", "begin", "-"], big, sock=d.path)
        check(r.rc == 0 and r.out == big, "3 MiB round trip (stdout %d bytes)" % len(r.out))
        check(d.requests[0]["xml"] == big, "the daemon got the whole XML")


@test
def odd_exit_codes():
    """an exit code other than 0 or 1 becomes 1"""
    for code in (2, 77, 255):
        with FakeDaemon(answer(code, stderr="odd\n")) as d:
            r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path)
            check(r.rc == 1 and r.err == "odd\n", "exit %d -> 1" % code, r)


@test
def fragmented_answer():
    """an answer arriving a few bytes at a time is reassembled"""
    def behaviour(conn, req):
        data = frame({"version": 1, "exit": 1, "stderr": "slow refusal\n"})
        for i in range(0, len(data), 3):
            conn.sendall(data[i:i + 3])
            time.sleep(0.005)
    with FakeDaemon(behaviour) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path)
        check(r.rc == 1 and r.err == "slow refusal\n", "reassembled", r)


@test
def unreachable_allow():
    """no daemon, on_unreachable=allow (the default): exit 0 and one stderr line"""
    for phase in ("prepare", "migrate", "restore"):
        r = run_hook(["gpu-vm-1", phase, "begin", "-"], GPU_XML, sock=os.path.join(TMP, "nobody.sock"))
        check_unreachable(r, "gpu-vm-1", phase, refuse=False, reason_part="nobody.sock")
    conf = write_conf("on_unreachable = allow\n")
    r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=os.path.join(TMP, "nobody.sock"), conf=conf)
    check_unreachable(r, "gpu-vm-1", "prepare", refuse=False)


@test
def unreachable_refuse():
    """no daemon, on_unreachable=refuse: exit 1 and one stderr line"""
    conf = write_conf("on_unreachable = refuse\n")
    for phase in ("prepare", "migrate", "restore"):
        r = run_hook(["gpu-vm-1", phase, "begin", "-"], GPU_XML, sock=os.path.join(TMP, "nobody.sock"), conf=conf)
        check_unreachable(r, "gpu-vm-1", phase, refuse=True, reason_part="No such file")


@test
def connection_refused():
    """a socket file nobody listens on: on_unreachable applies"""
    path = os.path.join(TMP, "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()           # the file stays, nobody listens
    r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=path)
    check_unreachable(r, "gpu-vm-1", "prepare", refuse=False, reason_part="refused")
    os.unlink(path)


@test
def timeout_allow():
    """a daemon that accepts but never answers: give up after timeout_ms, allow"""
    conf = write_conf("timeout_ms = 300\n")
    with FakeDaemon(never_answer) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path, conf=conf)
        check_unreachable(r, "gpu-vm-1", "prepare", refuse=False, reason_part="300 ms")
        check(0.25 <= r.elapsed < 0.3 + 1.5, "gave up after %.3fs, expected about 0.3s" % r.elapsed, r)


@test
def timeout_refuse():
    """a daemon that never answers, on_unreachable=refuse: exit 1 within the timeout"""
    conf = write_conf("timeout_ms = 400\non_unreachable = refuse\n")
    with FakeDaemon(never_answer) as d:
        r = run_hook(["gpu-vm-1", "migrate", "begin", "-"], GPU_XML, sock=d.path, conf=conf)
        check_unreachable(r, "gpu-vm-1", "migrate", refuse=True, reason_part="no answer")
        check(0.35 <= r.elapsed < 0.4 + 1.5, "gave up after %.3fs, expected about 0.4s" % r.elapsed, r)


@test
def timeout_never_reads():
    """a daemon that accepts but never reads a 3 MiB request: the send is bounded by the timeout too"""
    conf = write_conf("timeout_ms = 500\n")
    big = GPU_XML.replace("</devices>", "<!-- " + "y" * (3 * MiB) + " -->\n  </devices>")
    with FakeDaemon(never_answer, read_request=False) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], big, sock=d.path, conf=conf)
        check_unreachable(r, "gpu-vm-1", "prepare", refuse=False)
        check(r.elapsed < 0.5 + 1.5, "gave up after %.3fs" % r.elapsed, r)


@test
def timeout_backlog_full():
    """a daemon whose listen backlog is full: connecting is bounded by the timeout"""
    path = os.path.join(TMP, "full.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(0)
    fillers = []
    try:
        # Fill the backlog with connections nobody accepts.
        for _ in range(8):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(path)
            except (BlockingIOError, InterruptedError):
                c.close()
                break
            fillers.append(c)
        conf = write_conf("timeout_ms = 300\n")
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=path, conf=conf)
        check_unreachable(r, "gpu-vm-1", "prepare", refuse=False)
        check(r.elapsed < 0.3 + 1.5, "gave up after %.3fs" % r.elapsed, r)
    finally:
        for c in fillers:
            c.close()
        srv.close()
        os.unlink(path)


@test
def error_response():
    """an error answer (e.g. a non-root peer) applies on_unreachable and shows the error"""
    err = {"version": 1, "error": "peer uid 1000 is not root; only root may use the hook socket"}
    with FakeDaemon(send_raw(frame(err))) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path)
        check_unreachable(r, "gpu-vm-1", "prepare", refuse=False, reason_part="peer uid 1000 is not root")
        conf = write_conf("on_unreachable = refuse\n")
        r = run_hook(["gpu-vm-1", "restore", "begin", "-"], GPU_XML, sock=d.path, conf=conf)
        check_unreachable(r, "gpu-vm-1", "restore", refuse=True, reason_part="peer uid 1000 is not root")


@test
def malformed_responses():
    """malformed answers (bad JSON, bad length, bad version, missing exit, status, truncated) apply on_unreachable"""
    cases = [
        (frame(b"hello"), "not JSON"),
        (frame(b"[1,2]"), "not a JSON object"),
        (frame(b'{"version":1,"exit":0} junk'), "trailing"),
        (struct.pack(">I", 0), "frame length 0"),
        (struct.pack(">I", 0xffffffff), "exceeds"),
        (frame({"version": 2, "exit": 0}), "unsupported protocol version 2"),
        (frame({"version": 1}), "missing 'exit'"),
        (frame({"version": 1, "exit": "0"}), "'exit' must be an integer"),
        (frame({"version": 1, "exit": 0, "stdout": 5}), "'stdout' must be a string"),
        (frame({"version": 1, "status": {}}), "status"),
        (frame({"version": 1, "exit": 0})[:-3], "middle of its answer"),
        (b"", "without answering"),
    ]
    for refuse in (False, True):
        conf = write_conf("on_unreachable = %s\n" % ("refuse" if refuse else "allow"))
        for data, reason in cases:
            with FakeDaemon(send_raw(data)) as d:
                r = run_hook(["gpu-vm-1", "migrate", "begin", "-"], GPU_XML, sock=d.path, conf=conf)
                check_unreachable(r, "gpu-vm-1", "migrate", refuse=refuse, reason_part=reason)


@test
def daemon_closes_before_reading():
    """a daemon that closes without reading a big request: no SIGPIPE death, on_unreachable applies"""
    big = GPU_XML.replace("</devices>", "<!-- " + "z" * (3 * MiB) + " -->\n  </devices>")
    with FakeDaemon(lambda conn, req: None, read_request=False) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], big, sock=d.path)
        check(r.rc >= 0, "killed by signal %d" % -r.rc, r)
        check_unreachable(r, "gpu-vm-1", "prepare", refuse=False)


@test
def huge_stdin():
    """XML over 4 MiB: refused for prepare/migrate/restore when it concerns us, ignored otherwise; never sent"""
    pad = "<!-- " + "p" * (5 * MiB) + " -->"
    big_gpu = GPU_XML.replace("<devices>", pad + "\n  <devices>")
    big_gpu_late = PLAIN_XML.replace("</devices>", pad + "<hostdev mode='subsystem' type='pci'/></devices>")
    big_plain = PLAIN_XML.replace("<devices>", pad + "\n  <devices>")
    conf = write_conf("on_unreachable = allow\n")
    with FakeDaemon(contacted) as d:
        for phase in ("prepare", "migrate", "restore"):
            for xml, what in ((big_gpu, "hostdev early"), (big_gpu_late, "hostdev after 5 MiB")):
                r = run_hook(["gpu-vm-1", phase, "begin", "-"], xml, sock=d.path, conf=conf)
                check(r.rc == 1 and r.out == "", "%s: %s must be refused" % (phase, what), r)
                check(r.err.startswith("pcinuma: domain XML on stdin is larger than 4 MiB"), "message", r)
            r = run_hook(["plain-vm", phase, "begin", "-"], big_plain, sock=d.path, conf=conf)
            check(r.rc == 0 and r.out == "" and r.err == "", "%s: a big plain domain is none of our business" % phase, r)
        for phase in ("started", "stopped", "release"):
            r = run_hook(["gpu-vm-1", phase, "end", "-"], big_gpu, sock=d.path, conf=conf)
            check(r.rc == 0 and r.out == "" and r.err == "", "%s: fast path" % phase, r)
        time.sleep(0.2)
        check(d.connections == 0, "the daemon was contacted %d times" % d.connections)


def run_hook_split(args, pieces, conf, sock):
    """Feed stdin in pieces, pausing between them, so the hook's reads
    (mostly) end where a piece ends.  Nothing is timed: a read that spans
    two pieces only makes the case easier."""
    env = {"PCINUMA_HOOK_CONF": conf, "PCINUMA_SOCKET": sock}
    p = subprocess.Popen([HOOK] + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    try:
        for piece in pieces:
            p.stdin.write(piece.encode())
            p.stdin.flush()
            time.sleep(0.1)
        p.stdin.close()
    except BrokenPipeError:
        pass
    out, err = p.stdout.read(), p.stderr.read()
    rc = p.wait(60)
    return Result(rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), 0)


@test
def huge_stdin_tags_across_reads():
    """XML over 4 MiB: USB-only is none of our business; a PCI hostdev tag cut by a read is still found"""
    conf = write_conf("on_unreachable = allow\n")
    long_usb = "<hostdev mode='subsystem' pad='%s' type='usb'>%s</hostdev>\n" % ("u" * 1000, USB_SRC)
    head = PLAIN_XML.replace("</devices>", long_usb * (4600 * 1024 // len(long_usb)))
    with FakeDaemon(contacted) as d:
        r = run_hook(["usb-vm", "prepare", "begin", "-"], head + "</devices></domain>\n", sock=d.path, conf=conf)
        check(r.rc == 0 and r.err == "", "a 4.6 MiB domain of long USB hostdev tags: exit 0", r)
        tag = "<hostdev\n  mode = 'subsystem'\n  pad='%s'\n  type = 'pci'>" % ("p" * 2000)
        cuts = [1, 4, 8, 9, 20, 30, 1000, len(tag) - 10, len(tag) - 8, len(tag) - 5, len(tag) - 1]
        for cut in cuts:
            r = run_hook_split(["gpu-vm", "prepare", "begin", "-"],
                               [head, long_usb * 70 + tag[:cut], tag[cut:] + PCI_ADDR + "</hostdev></devices></domain>"],
                               conf, d.path)
            check(r.rc == 1 and "larger than 4 MiB" in r.err, "a PCI tag cut after %d bytes must be found" % cut, r)
        r = run_hook_split(["usb-vm", "prepare", "begin", "-"],
                           [head, long_usb[:500], long_usb[500:] + "</devices></domain>"], conf, d.path)
        check(r.rc == 0 and r.err == "", "a USB tag cut in its padding: exit 0", r)
        # A start tag longer than what is carried between reads counts as ours.
        r = run_hook_split(["odd-vm", "prepare", "begin", "-"],
                           [head, "<hostdev pad='" + "q" * 8000, "' type='usb'/></devices></domain>"], conf, d.path)
        check(r.rc == 1 and "larger than 4 MiB" in r.err, "an 8 KB start tag cut by a read: refused to be safe", r)
        time.sleep(0.2)
        check(d.connections == 0, "the daemon was contacted %d times" % d.connections)


@test
def near_limit_stdin():
    """an XML just under 4 MiB is sent in full"""
    xml = GPU_XML.replace("</devices>", "<!-- " + "q" * (4 * MiB - len(GPU_XML) - 64) + " -->\n  </devices>")
    assert len(xml.encode()) <= 4 * MiB
    with FakeDaemon(answer(0)) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], xml, sock=d.path)
        check(r.rc == 0 and r.err == "", "allowed", r)
        check(d.requests and d.requests[0]["xml"] == xml, "the whole XML reached the daemon")


@test
def config_socket_and_env():
    """socket from the config file; PCINUMA_SOCKET overrides it"""
    with FakeDaemon(answer(1, stderr="from config socket\n")) as d1, \
            FakeDaemon(answer(1, stderr="from env socket\n")) as d2:
        conf = write_conf("# comment\n\n  socket = %s   # trailing comment\n" % d1.path)
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, conf=conf)
        check(r.rc == 1 and r.err == "from config socket\n", "config socket used", r)
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d2.path, conf=conf)
        check(r.rc == 1 and r.err == "from env socket\n", "PCINUMA_SOCKET wins", r)


@test
def config_later_lines_win():
    """a later line overrides an earlier one"""
    conf = write_conf("on_unreachable = refuse\non_unreachable = allow\n")
    r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=os.path.join(TMP, "nobody.sock"), conf=conf)
    check_unreachable(r, "gpu-vm-1", "prepare", refuse=False)
    conf = write_conf("on_unreachable = allow\non_unreachable = refuse\n")
    r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=os.path.join(TMP, "nobody.sock"), conf=conf)
    check_unreachable(r, "gpu-vm-1", "prepare", refuse=True)


@test
def config_warnings():
    """bad lines are reported with file:line and the key, then ignored"""
    conf = write_conf("\n".join([
        "# hook settings",                      # 1
        "colour = blue",                        # 2 unknown key
        "timeout_ms = soon",                    # 3 not a number
        "timeout_ms = 0",                       # 4 out of range
        "timeout_ms = 600001",                  # 5 out of range
        "on_unreachable = maybe",               # 6 bad value
        "socket = relative.sock",               # 7 not absolute
        "just some words",                      # 8 no '='
        "on_unreachable = refuse",              # 9 good
        "timeout_ms = 250",                     # 10 good
        "",
    ]))
    with FakeDaemon(never_answer) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path, conf=conf)
        for line, key in ((2, "colour"), (3, "timeout_ms"), (4, "timeout_ms"), (5, "timeout_ms"),
                          (6, "on_unreachable"), (7, "socket"), (8, "key = value")):
            want = "pcinuma: %s:%d: " % (conf, line)
            hits = [l for l in r.err.splitlines() if l.startswith(want)]
            check(len(hits) == 1 and key in hits[0] and hits[0].endswith("ignoring"),
                  "a warning for line %d naming %r" % (line, key), r)
        check(not any(l.startswith("pcinuma: %s:%d:" % (conf, n)) for n in (1, 9, 10) for l in r.err.splitlines()),
              "no warning for good lines", r)
        # The good lines still apply: refuse, after 250 ms.
        check_unreachable(r, "gpu-vm-1", "prepare", refuse=True, reason_part="250 ms")
        check(r.elapsed < 0.25 + 1.5, "timeout_ms=250 applied (%.3fs)" % r.elapsed, r)


@test
def config_missing_file():
    """PCINUMA_HOOK_CONF naming a missing file: a warning, then the defaults"""
    missing = os.path.join(TMP, "no-such.conf")
    with FakeDaemon(answer(0)) as d:
        r = run_hook(["gpu-vm-1", "prepare", "begin", "-"], GPU_XML, sock=d.path, conf=missing)
        check(r.rc == 0, "allowed", r)
        check(("pcinuma: cannot read %s" % missing) in r.err, "warning about the missing file", r)


def main():
    global HOOK, TMP, EMPTY_CONF, STAND_INS_BUILD
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hook", required=True, help="the pcinuma-hook binary")
    ap.add_argument("--stand-ins-build", action="store_true",
                    help="the hook is a stand_ins build's (meson -Dstand_ins=true)")
    ap.add_argument("tests", nargs="*", help="run only these tests (by function name)")
    args = ap.parse_args()
    HOOK = os.path.abspath(args.hook)
    STAND_INS_BUILD = args.stand_ins_build

    with tempfile.TemporaryDirectory(prefix="pcinuma-hook-test-") as tmp:
        TMP = tmp
        EMPTY_CONF = write_conf("# empty\n")
        tap = Tap()
        for t in TESTS:
            if not args.tests or t.__name__ in args.tests:
                tap.run("%s: %s" % (t.__name__, (t.__doc__ or "").strip()), t)
        return tap.finish()


if __name__ == "__main__":
    sys.exit(main())

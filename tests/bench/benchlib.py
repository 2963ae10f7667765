"""Shared helpers of the benchmarks in tests/bench (standard library only).

Benchmarks measure; they never fail on a figure.  Every figure is printed
with its target as

    RESULT <name>: <value> <unit> (target <op> <target> <unit>): target met
    RESULT <name>: <value> <unit> (target <op> <target> <unit>): target MISSED

and the script exits 0 either way.  It exits 77 (meson's "skipped") when
something it needs is missing, and 1 only when the benchmark itself could
not run (a daemon that does not start, a command that fails)."""

import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib

from pcinumatest.daemon import encode, pcinumad_argv, recv_exact, scrubbed_env

SKIP = 77
_results = []
_cleanups = []


def say(*a):
    print(*a, flush=True)


def result(name, value, unit, op, target, fmt="%.3g", note=""):
    """Print one figure against its target; op is '<=' or '>='."""
    met = value <= target if op == "<=" else value >= target
    line = "RESULT %s: %s %s (target %s %s %s): %s" % (
        name, fmt % value, unit, op, fmt % target, unit,
        "target met" if met else "target MISSED")
    if note:
        line += " -- " + note
    say(line)
    _results.append((name, met))
    return met


def info(name, value, unit="", fmt="%.3g"):
    """A figure without a target (printed for the record)."""
    say("FIGURE %s: %s %s" % (name, fmt % value, unit))


def summary():
    missed = [n for n, met in _results if not met]
    say("SUMMARY %d figure(s) against target: %d met, %d missed%s"
        % (len(_results), len(_results) - len(missed), len(missed),
           (" (" + ", ".join(missed) + ")") if missed else ""))


def at_exit(fn):
    _cleanups.append(fn)


def run_cleanups():
    while _cleanups:
        fn = _cleanups.pop()
        try:
            fn()
        except Exception as e:  # cleanup must go on
            print("# cleanup: %s" % e, file=sys.stderr)


def _on_signal(signum, frame):
    sys.exit(128 + signum)


def main(fn):
    """Run fn() with cleanups on any exit (meson's timeout sends SIGTERM)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    try:
        rc = fn()
    finally:
        run_cleanups()
    summary()
    sys.exit(rc or 0)


def skip(why):
    say("SKIP: %s" % why)
    sys.exit(SKIP)


def short_tmpdir(tag):
    """A temporary directory under /tmp (Unix socket paths are short),
    removed at exit unless PCINUMA_BENCH_KEEP is set."""
    d = tempfile.mkdtemp(prefix="pcinuma-bench-%s-" % tag, dir="/tmp")
    if not os.environ.get("PCINUMA_BENCH_KEEP"):
        at_exit(lambda: shutil.rmtree(d, ignore_errors=True))
    return d


def mkfakesysfs(script, desc, outdir):
    if isinstance(desc, dict):
        path = outdir + ".json"
        with open(path, "w") as f:
            json.dump(desc, f)
        desc = path
    subprocess.run([sys.executable, script, desc, outdir], check=True)
    return outdir


def median(xs):
    return statistics.median(xs)


# ---- domain XML -------------------------------------------------------------

def plain_domain_xml(name="bench-plain", target_bytes=16 * 1024, mark=False):
    """A q35 TCG domain with no passthrough device, padded with virtio
    disks and NICs to about target_bytes (0: no padding, startable).  With mark, a <pcinuma:policy> element in <metadata>
    makes the hook consult the daemon."""
    head = ["<domain type='qemu'>",
            "  <name>%s</name>" % name,
            "  <uuid>0b6e5d1c-5c39-4a62-9d4a-%012x</uuid>" % (zlib.crc32(name.encode())),
            "  <title>pcinuma benchmark domain without passthrough devices</title>"]
    if mark:
        head += ["  <metadata>",
                 "    <pcinuma:policy xmlns:pcinuma='urn:pcinuma:policy:1' tag='bench'/>",
                 "  </metadata>"]
    head += ["  <memory unit='MiB'>64</memory>",
             "  <vcpu placement='static'>1</vcpu>",
             "  <os>",
             "    <type arch='x86_64' machine='q35'>hvm</type>",
             "  </os>",
             "  <features>",
             "    <acpi/>",
             "  </features>",
             "  <clock offset='utc'/>",
             "  <on_poweroff>destroy</on_poweroff>",
             "  <on_reboot>destroy</on_reboot>",
             "  <on_crash>destroy</on_crash>",
             "  <devices>",
             "    <emulator>/usr/bin/qemu-system-x86_64</emulator>",
             "    <controller type='pci' index='0' model='pcie-root'/>"]
    tail = ["    <memballoon model='none'/>",
            "  </devices>",
            "</domain>", ""]
    body = []
    i = 0
    while target_bytes and len("\n".join(head + body + tail)) < target_bytes:
        # What a large live XML is made of: virtio disks and NICs with
        # their aliases and guest addresses (never started: the VM start
        # benchmark uses target_bytes=0).
        bus = 1 + 2 * i
        body += ["    <disk type='file' device='disk'>",
                 "      <driver name='qemu' type='qcow2' cache='none' io='native' discard='unmap'/>",
                 "      <source file='/var/lib/libvirt/images/%s-data%02d.qcow2' index='%d'/>" % (name, i, i + 1),
                 "      <backingStore/>",
                 "      <target dev='vd%s' bus='virtio'/>" % (chr(ord('a') + i % 26) * (1 + i // 26)),
                 "      <alias name='virtio-disk%d'/>" % i,
                 "      <address type='pci' domain='0x0000' bus='0x%02x' slot='0x00' function='0x0'/>" % bus,
                 "    </disk>",
                 "    <interface type='network'>",
                 "      <mac address='52:54:00:5e:%02x:01'/>" % i,
                 "      <source network='default' portid='5e0c2b52-7a3e-4c1e-9f0a-%012x' bridge='virbr0'/>" % i,
                 "      <target dev='vnet%d'/>" % i,
                 "      <model type='virtio'/>",
                 "      <alias name='net%d'/>" % i,
                 "      <address type='pci' domain='0x0000' bus='0x%02x' slot='0x00' function='0x0'/>" % (bus + 1),
                 "    </interface>"]
        i += 1
    return "\n".join(head + body + tail)


# ---- pcinumad ----------------------------------------------------------------

def call(path, obj, timeout=30.0, raw=None):
    """One request on a fresh connection (the daemon serves one request
    per connection); returns the decoded response."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(raw if raw is not None else encode(obj))
        hdr = recv_exact(s, 4)
        if len(hdr) < 4:
            raise RuntimeError("no answer from pcinumad")
        (n,) = struct.unpack(">I", hdr)
        return json.loads(recv_exact(s, n))
    finally:
        s.close()


class Daemon:
    def __init__(self, pcinumad, sysfs, workdir, policy="require", extra=(),
                 wrapper=(), log_path=None, socket_path=None, libvirt_uri="none"):
        self.sock = socket_path or os.path.join(workdir, "hook.sock")
        self.policy_file = os.path.join(workdir, "policy.json")
        with open(self.policy_file, "w") as f:
            json.dump({"default": {"policy": policy}}, f)
        self.log_path = log_path or os.path.join(workdir, "pcinumad.log")
        self.argv = pcinumad_argv(pcinumad, sysfs, self.policy_file, self.sock,
                                  libvirt_uri=libvirt_uri, extra=extra, wrapper=wrapper)
        self.proc = None

    def start(self, timeout=60.0):
        env = scrubbed_env()
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=self.logf, stderr=self.logf,
                                     env=env, start_new_session=True)
        at_exit(self.kill)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("pcinumad exited with %s; log:\n%s"
                                   % (self.proc.returncode, self.log_text()))
            try:
                r = call(self.sock, {"version": 1, "type": "status"}, timeout=5)
                if "status" in r:
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("pcinumad not ready within %.0f s; log:\n%s"
                           % (timeout, self.log_text()))

    @property
    def pid(self):
        return self.proc.pid

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def stop(self, timeout=60.0):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "logf", None):
            self.logf.close()
            self.logf = None
        return self.proc.returncode if self.proc else None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait(10)
        if getattr(self, "logf", None):
            self.logf.close()
            self.logf = None


def hook_request(name, phase, subphase, xml):
    return {"version": 1, "type": "hook", "argv": [name, phase, subphase, "-"],
            "xml": xml}


def planned_xml(pcinumactl, sysfs, xml_path, policy="require", policy_file=None):
    """The domain as pcinuma plans it (what libvirt hands the hook at
    prepare for a domain defined after planning); under policy_file's
    policy when one is given."""
    how = ["--policy-file", policy_file] if policy_file else ["--policy", policy]
    r = subprocess.run([pcinumactl, "plan", "--sysfs-root", sysfs] + how + [
                        xml_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError("pcinumactl plan failed: %s" % r.stderr)
    return r.stdout


def gen_gpu_domain(name, n_devices, cells, host_devs, vcpus_per_cell=4):
    """A q35 domain with n_devices PCI hostdevs spread evenly over 'cells'
    guest cells, cell c backed by host node c (numatune memnode), taking
    host_devs[c] (a list of BDF strings on node c) in order."""
    per = n_devices // cells
    lines = ["<domain type='qemu'>", "  <name>%s</name>" % name,
             "  <memory unit='MiB'>%d</memory>" % (256 * cells),
             "  <vcpu placement='static'>%d</vcpu>" % (vcpus_per_cell * cells),
             "  <os>", "    <type arch='x86_64' machine='q35'>hvm</type>", "  </os>",
             "  <features>", "    <acpi/>", "  </features>",
             "  <cpu mode='custom' match='exact'>",
             "    <model fallback='allow'>qemu64</model>", "    <numa>"]
    for c in range(cells):
        lines.append("      <cell id='%d' cpus='%d-%d' memory='256' unit='MiB'/>"
                     % (c, c * vcpus_per_cell, (c + 1) * vcpus_per_cell - 1))
    lines += ["    </numa>", "  </cpu>", "  <numatune>"]
    for c in range(cells):
        lines.append("    <memnode cellid='%d' mode='strict' nodeset='%d'/>" % (c, c))
    lines += ["  </numatune>", "  <devices>",
              "    <emulator>/usr/bin/qemu-system-x86_64</emulator>",
              "    <controller type='pci' index='0' model='pcie-root'/>"]
    for c in range(cells):
        for bdf in host_devs[c][:per]:
            dom, bus, sf = bdf.split(":")
            slot, fn = sf.split(".")
            lines += ["    <hostdev mode='subsystem' type='pci' managed='yes'>",
                      "      <source>",
                      "        <address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>"
                      % (dom, bus, slot, fn),
                      "      </source>", "    </hostdev>"]
    lines += ["  </devices>", "</domain>", ""]
    return "\n".join(lines)

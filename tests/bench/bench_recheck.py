#!/usr/bin/env python3
"""Scale benchmark (issue 13): what one udev event costs in libvirt calls
with 200 defined domains.

A private session libvirtd (tests/lib/pcinumatest/session.py) holds 200 persistent
q35/TCG domains, each with one passthrough GPU of a generated fixture host
(4 NUMA nodes, 50 GPUs per node, one GPU per domain, policy legacy).
pcinumad watches it (--watch-udev yes, its watcher pcinuma-watcher) and
plans all 200 at connect.  Then 20 VM starts and 20 stops are played as
what pcinuma sees of them: a VM start with a managed hostdev unbinds the
GPU from its host driver and binds it to vfio-pci, a stop does the
reverse (the fixture's driver link and uevent are changed and the udev
'unbind' + 'bind' pair is sent, as test_udev.py does).  The fixture's GPUs
cannot really be passed through, so no QEMU runs.

libvirtd logs every RPC it dispatches (log_filters 1:daemon.remote); the
benchmark counts them per event, by call (DomainGetXMLDesc = a domain read,
DomainDefineXMLFlags = a redefinition, ...), after pcinumad rebuilt its
host map and libvirtd stayed quiet for QUIET_S.  Only the watcher talks to
libvirtd during an event.  Printed: the calls per event (median, max), and
the domain reads per event against the domains the event touches (1).

Works with a pcinumad from before issue 13 (no "rechecks" in its status)
to give the 'before' figures of docs/performance.md.  Needs root (udev's
netlink multicast), libvirtd and virsh; otherwise exits 77.

    bench_recheck.py --pcinumad PATH --pcinumactl PATH --session-py PATH
                     --mkfakesysfs PATH [--domains N] [--events N]
"""
import argparse
import collections
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib as B  # noqa: E402
from pcinumatest import uevent as U  # noqa: E402

QUIET_S = 2.0
PER_NODE = 50
HELPER = re.compile(r"remoteDispatch(\w+)Helper")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def host_desc():
    """sample-4n's nodes; per node one host bridge with PER_NODE root ports,
    a GPU behind each (bound to 'nvidia', a host driver)."""
    nodes = [{"id": n, "cpus": "%d-%d" % (16 * n, 16 * n + 15), "socket": n // 2,
              "distance": [10 if m == n else 12 if m // 2 == n // 2 else 32 for m in range(4)]}
             for n in range(4)]
    hbs, gpus = [], []
    for n in range(4):
        hb = 0x40 * n
        devs = []
        for i in range(PER_NODE):
            bus = hb + 1 + i
            gpu = "0000:%02x:00.0" % bus
            gpus.append((gpu, n))
            devs.append({"bdf": "0000:%02x:%02x.%d" % (hb, 1 + i // 2, i % 2), "kind": "rootport",
                         "devices": [{"bdf": gpu, "kind": "gpu", "driver": "nvidia"}]})
        hbs.append({"name": "pci0000:%02x" % hb, "node": n, "devices": devs})
    return {"description": "bench_recheck: 200 GPUs on 4 nodes", "nodes": nodes, "hostbridges": hbs}, gpus


def domain_xml(i, gpu):
    d, b, rest = gpu.split(":")
    s, f = rest.split(".")
    cells = "".join("<cell id='%d' cpus='%d' memory='32768' unit='KiB'/>" % (c, c) for c in range(4))
    tune = "".join("<memnode cellid='%d' mode='strict' nodeset='%d'/>" % (c, c) for c in range(4))
    return ("<domain type='qemu'><name>bench-rc-%03d</name><uuid>7e57be9c-0000-4000-8000-%012d</uuid>"
            "<memory unit='KiB'>131072</memory><vcpu placement='static'>4</vcpu>"
            "<os><type arch='x86_64' machine='q35'>hvm</type></os><features><acpi/></features>"
            "<cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model><numa>%s</numa></cpu>"
            "<numatune>%s</numatune><devices><emulator>/usr/bin/qemu-system-x86_64</emulator>"
            "<controller type='pci' index='0' model='pcie-root'/>"
            "<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x%s' bus='0x%s' "
            "slot='0x%s' function='0x%s'/></source></hostdev><memballoon model='none'/></devices></domain>"
            % (i, i, cells, tune, d, b, s, f))


def run(a):
    if os.geteuid() != 0:
        B.skip("needs root (it plays udevd's netlink multicast)")
    session = load(a.session_py, "session")
    if not (session.find_tool("libvirtd") and session.find_tool("virsh")):
        B.skip("libvirtd or virsh not found")

    class LogSession(session.Session):
        """A session libvirtd that logs every RPC it dispatches."""
        def _setup_dirs(self):
            super()._setup_dirs()
            self._write_file(os.path.join(self.env["XDG_CONFIG_HOME"], "libvirt", "libvirtd.conf"),
                             'log_outputs = "1:file:%s"\nlog_filters = "1:daemon.remote 4:*"\n' % self.logfile)

    s = LogSession()
    B.at_exit(s.stop)
    uri = "qemu+unix:///session?socket=" + os.path.join(s.env["XDG_RUNTIME_DIR"], "libvirt", "libvirt-sock")

    work = B.short_tmpdir("recheck")
    os.chmod(work, 0o755)
    desc, gpus = host_desc()
    gpus = gpus[:a.domains]
    sysfs = B.mkfakesysfs(a.mkfakesysfs, desc, os.path.join(work, "sys"))
    for i, (gpu, _) in enumerate(gpus):
        path = os.path.join(s.files, "d%03d.xml" % i)
        with open(path, "w") as f:
            f.write(domain_xml(i, gpu))
        os.chmod(path, 0o644)
        r = s.virsh("define", path, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("virsh define %s: %s" % (path, r.stderr.strip()))
    B.say("# %d domains defined" % len(gpus))

    policy = os.path.join(work, "policy.json")
    with open(policy, "w") as f:
        json.dump({"default": {"policy": "legacy"}}, f)
    sock = os.path.join(work, "hook.sock")
    log = open(os.path.join(work, "pcinumad.log"), "w")
    proc = subprocess.Popen([a.pcinumad, "--sysfs-root", sysfs, "--socket", sock, "--policy-file", policy,
                             "--libvirt-uri", uri, "--log-target", "stderr", "--watch-udev", "yes",
                             "--allow-uid", str(s.uid), "--metrics-file", "none"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def stop_daemon():
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    B.at_exit(stop_daemon)

    def status():
        r = subprocess.run([a.pcinumactl, "status", "--socket", sock, "--json"],
                           capture_output=True, text=True, timeout=10)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def calls():
        with open(s.logfile, errors="replace") as f:
            return HELPER.findall(f.read())

    def quiet(pred=lambda: True, timeout=600):
        """Until pred() holds and libvirtd dispatched nothing for QUIET_S."""
        deadline = time.monotonic() + timeout
        n, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            c = len(calls())
            if c != n:
                n, since = c, time.monotonic()
            elif time.monotonic() - since >= QUIET_S and pred():
                return
            time.sleep(0.2)
        raise RuntimeError("libvirtd did not settle within %d s" % timeout)

    t0 = time.monotonic()
    quiet(lambda: ((status() or {}).get("libvirt") or {}).get("redefinitions", 0) >= len(gpus))
    st = status()
    B.say("# pcinumad planned and redefined %d domains at connect in %.1f s (libvirt calls: %d)"
          % (st["libvirt"]["redefinitions"], time.monotonic() - t0, len(calls())))
    B.info("connect_calls", len(calls()), "libvirt calls", fmt="%d")

    seq = [20000]

    def set_driver(gpu, driver):
        dev = os.path.join(sysfs, "bus", "pci", "devices", gpu)
        link = os.path.join(dev, "driver")
        os.remove(link)
        os.symlink("../../../../../../bus/pci/drivers/%s" % driver, link)
        with open(os.path.join(dev, "uevent")) as f:
            lines = [l for l in f.read().splitlines() if not l.startswith("DRIVER=")]
        with open(os.path.join(dev, "uevent"), "w") as f:
            f.write("\n".join(["DRIVER=%s" % driver] + lines) + "\n")
        devpath = os.path.normpath(os.path.join(os.path.dirname(dev), os.readlink(dev)))[len(os.path.normpath(sysfs)):]
        for action in ("unbind", "bind"):
            seq[0] += 1
            U.send(U.uevent(action, devpath, "pci", seq[0]))

    per_event = []          # Counter of calls per event
    step = max(1, len(gpus) // a.events)
    for j in range(a.events):
        gpu = gpus[(j * step) % len(gpus)][0]
        for what, driver in (("start", "vfio-pci"), ("stop", "nvidia")):
            gen = status()["hostmap"]["generation"]
            before = len(calls())
            set_driver(gpu, driver)
            quiet(lambda: (status() or {}).get("hostmap", {}).get("generation", 0) > gen)
            c = collections.Counter(calls()[before:])
            per_event.append(c)
            B.say("# event %2d (%s of bench-rc-%03d, %s -> %s): %d libvirt calls: %s"
                  % (len(per_event), what, (j * step) % len(gpus), gpu, driver, sum(c.values()),
                     ", ".join("%s %d" % kv for kv in sorted(c.items()))))

    totals = [sum(c.values()) for c in per_event]
    reads = [c.get("DomainGetXMLDesc", 0) for c in per_event]
    defines = [c.get("DomainDefineXMLFlags", 0) for c in per_event]
    B.info("events", len(per_event), fmt="%d")
    B.info("calls_per_event_median", statistics.median(totals), "libvirt calls", fmt="%.1f")
    B.info("calls_per_event_max", max(totals), "libvirt calls", fmt="%d")
    B.info("defines_total", sum(defines), "redefinitions", fmt="%d")
    B.result("domain_reads_per_event_median", statistics.median(reads), "domain reads", "<=", 1, fmt="%.1f",
             note="each event touches 1 of %d domains" % len(gpus))
    B.info("domain_reads_per_event_max", max(reads), "domain reads", fmt="%d")
    st = status()
    if "rechecks" in st:
        B.info("pcinumad_plans", st["rechecks"]["plans"], fmt="%d")
        B.info("pcinumad_domain_rechecks", st["rechecks"]["domain_rechecks"], fmt="%d")
        B.info("pcinumad_full_rechecks", st["rechecks"]["full_rechecks"], fmt="%d")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcinumad", required=True)
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--session-py", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts")
    ap.add_argument("--example")
    ap.add_argument("--domains", type=int, default=200)
    ap.add_argument("--events", type=int, default=20)
    a = ap.parse_args()
    B.main(lambda: run(a))


if __name__ == "__main__":
    main()

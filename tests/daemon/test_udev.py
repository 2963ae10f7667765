#!/usr/bin/env python3
"""pcinumad rebuilds its host map when udev reports a PCI device added,
removed, bound or unbound (sd-device monitor), and never per request.

There is no udevd on a test machine, so the test plays udevd: it sends the
same netlink multicast message udevd sends to libudev listeners (group 2,
"libudev" header, the subsystem hash the monitor's BPF filter checks) as
root, after changing the fixture tree.  Ends with 'N passed, M failed'.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from pcinumatest.uevent import send, uevent
from pcinumatest.tap import Tap

TAP = Tap()
check = TAP.check


def status(ctl, sock):
    r = subprocess.run([ctl, "status", "--socket", sock, "--json"], capture_output=True, text=True, timeout=10)
    return json.loads(r.stdout) if r.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pcinumad", required=True)
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("1..0 # SKIP sending udev's netlink multicast needs root")
        sys.exit(77)
    # udev's multicast group is shared by every netlink socket of a network
    # namespace: another run of this test on the machine (a parallel suite,
    # a chroot's test command) would reach our pcinumad, and ours theirs.
    # A private network namespace keeps the test's events to itself.
    if not os.environ.get("PCINUMA_UDEV_NETNS"):
        unshare = shutil.which("unshare")
        if unshare and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
            os.execve(unshare, [unshare, "--net", "--", sys.executable] + sys.argv,
                      dict(os.environ, PCINUMA_UDEV_NETNS="1"))
        print("# no private network namespace (unshare --net): other udev senders may interfere", flush=True)

    work = tempfile.mkdtemp(prefix="pcinuma-udev-")
    daemon = None
    try:
        desc = json.load(open(os.path.join(a.hosts, "sample-4n.json")))
        host = os.path.join(work, "sys")
        desc_path = os.path.join(work, "host.json")
        json.dump(desc, open(desc_path, "w"))
        subprocess.run([sys.executable, a.mkfakesysfs, desc_path, host], check=True)
        sock = os.path.join(work, "hook.sock")
        log = open(os.path.join(work, "daemon.log"), "w")
        daemon = subprocess.Popen([a.pcinumad, "--sysfs-root", host, "--socket", sock, "--libvirt-uri", "none",
                                   "--log-target", "stderr", "--policy-file", os.path.join(work, "none.json"),
                                   "--watch-udev", "yes", "--metrics-file", "none"], stderr=log)
        for _ in range(100):
            st = status(a.pcinumactl, sock) if os.path.exists(sock) else None
            if st:
                break
            time.sleep(0.05)
        check(st is not None, "pcinumad answers status")
        check(st and st["hostmap"]["udev"] is True, "pcinumad watches udev (--watch-udev yes)", json.dumps(st))
        gen0, dev0 = st["hostmap"]["generation"], st["hostmap"]["devices"]

        # Requests never rescan: 20 status calls leave the generation alone.
        for _ in range(20):
            st = status(a.pcinumactl, sock)
        check(st["hostmap"]["generation"] == gen0, "requests do not rebuild the host map")

        # A new GPU appears in the tree; udev says so.
        desc["hostbridges"].append({"name": "pci0000:a0", "node": 2, "devices": [
            {"bdf": "0000:a0:01.0", "kind": "rootport", "devices": [{"bdf": "0000:a1:00.0", "kind": "gpu"}]}]})
        json.dump(desc, open(desc_path, "w"))
        subprocess.run([sys.executable, a.mkfakesysfs, desc_path, host], check=True)
        send(uevent("add", "/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0", "pci", 9001))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = status(a.pcinumactl, sock)
            if st["hostmap"]["generation"] > gen0:
                break
            time.sleep(0.05)
        check(st["hostmap"]["generation"] == gen0 + 1, "a udev 'add' for a PCI device rebuilds the host map once",
              json.dumps(st["hostmap"]))
        check(st["hostmap"]["devices"] == dev0 + 2, "the rebuilt map has the new root port and GPU (%d -> %d devices)"
              % (dev0, st["hostmap"]["devices"]))
        log.flush()
        text = open(log.name).read()
        check("Host map built (udev)" in text, "the rebuild is logged as caused by udev", text[-2000:])

        # A burst (add, bind) is one rebuild; other subsystems are ignored.
        gen1 = st["hostmap"]["generation"]
        send(uevent("add", "/devices/virtual/net/dummy0", "net", 9002))
        time.sleep(0.6)
        st = status(a.pcinumactl, sock)
        check(st["hostmap"]["generation"] == gen1, "a udev event for another subsystem (net) is ignored")
        send(uevent("bind", "/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0", "pci", 9003))
        send(uevent("unbind", "/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0", "pci", 9004))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = status(a.pcinumactl, sock)
            if st["hostmap"]["generation"] > gen1:
                break
            time.sleep(0.05)
        time.sleep(0.6)
        st = status(a.pcinumactl, sock)
        check(st["hostmap"]["generation"] == gen1 + 1, "bind + unbind in a burst give one rebuild",
              json.dumps(st["hostmap"]))
    finally:
        if daemon:
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(TAP.finish())


if __name__ == "__main__":
    main()

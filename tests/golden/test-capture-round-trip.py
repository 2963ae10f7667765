#!/usr/bin/env python3
"""scripts/pcinuma-capture-host keeps everything the host map reads: for
every fixture host (tests/fixtures/hosts/*.json, built by mkfakesysfs.py),
every real snapshot (tests/fixtures/real-sysfs/*.tar.bz2) and the live /sys
(when it has bus/pci/devices or devices/system), capture the tree with
`pcinuma-capture-host --root TREE -o capture.tar.xz`, unpack it, and read
it back: `pcinumactl host --sysfs-root CAPTURE/sys --json` must give the
same host map as the original tree (the JSON objects equal, but for the
"sysfs_root" member, which names the root read).  The live /sys is read
just before and just after its capture; when those two reads differ (a
device came or went), the case is reported as skipped, not failed.

The unit tests (tests/unit/test-hostmap.c, test_capture_*) capture
sample-4n and one snapshot and compare the maps in memory; this test goes
through the CLI over every tree the project has.

    test-capture-round-trip.py --pcinumactl PATH --capture SCRIPT
        --mkfakesysfs PATH --hosts DIR --snapshots DIR --workdir DIR [--no-live]

Output: "ok N - ..." / "not ok N - ..." lines with "#" diagnostics, then
"N passed, M failed"; exit 1 on any failure."""

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pcinumatest.fixtures import (FixtureError, extract_snapshot, host_json,  # noqa: E402
                                  host_names, mkfakesysfs, snapshot_names)
from pcinumatest.tap import Tap  # noqa: E402

CAPTURE_TIMEOUT = 600     # the live /sys of a big host takes a while


def host_map(a, root):
    """The host map of root as an object without "sysfs_root"; or raise
    FixtureError."""
    rc, out, err = host_json(a.pcinumactl, root)
    if rc != 0:
        raise FixtureError("pcinumactl host --sysfs-root %s --json: exit %d: %s" % (root, rc, err))
    try:
        m = json.loads(out)
    except ValueError as e:
        raise FixtureError("pcinumactl host --sysfs-root %s --json: not JSON (%s)" % (root, e))
    m.pop("sysfs_root", None)
    return m


def capture(a, root, work):
    """Capture root with the script into work; the unpacked sysfs root."""
    os.makedirs(work)
    archive = os.path.join(work, "capture.tar.xz")
    p = subprocess.run(["sh", a.capture, "--root", root, "-o", archive],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=CAPTURE_TIMEOUT)
    if p.returncode != 0 or p.stdout.strip() != archive:
        raise FixtureError("pcinuma-capture-host --root %s: exit %d, stdout %r, stderr %r"
                           % (root, p.returncode, p.stdout, p.stderr))
    p = subprocess.run(["tar", "xJf", archive, "-C", work], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=CAPTURE_TIMEOUT)
    if p.returncode != 0:
        raise FixtureError("tar xJf %s: exit %d: %s" % (archive, p.returncode, p.stdout))
    return os.path.join(work, "sys")


def differences(want, got):
    a = json.dumps(want, indent=1, sort_keys=True).splitlines()
    b = json.dumps(got, indent=1, sort_keys=True).splitlines()
    lines = list(difflib.unified_diff(a, b, "original", "capture", lineterm="", n=2))
    if len(lines) > 80:
        lines = lines[:80] + ["... (%d more diff lines)" % (len(lines) - 80)]
    return "\n".join(lines)


def round_trip(tap, a, what, root, work, live=False):
    try:
        before = host_map(a, root)
        got = host_map(a, capture(a, root, work))
        after = host_map(a, root) if live else before
    except (FixtureError, subprocess.TimeoutExpired) as e:
        tap.check(False, "%s: captured and read back" % what, str(e))
        return
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if before != after:
        tap.check(True, "%s: the capture reads back as the same host map" % what,
                  note="SKIP the live host changed during its capture")
        return
    tap.check(got == before, "%s: the capture reads back as the same host map (%d nodes, %d devices, %d mdevs)"
              % (what, len(before.get("nodes", [])), len(before.get("devices", [])),
                 len(before.get("mdevs", []))),
              differences(before, got))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("pcinumactl", "capture", "mkfakesysfs", "hosts", "snapshots", "workdir"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--no-live", action="store_true", help="leave the live /sys out")
    a = ap.parse_args()
    for opt in ("pcinumactl", "capture", "mkfakesysfs", "hosts", "snapshots", "workdir"):
        setattr(a, opt, os.path.abspath(getattr(a, opt)))
    tap = Tap(verbose=False)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)

    hosts = host_names(a.hosts)
    tap.check(len(hosts) > 0, "%s holds fixture hosts" % a.hosts)
    for name in hosts:
        try:
            root = mkfakesysfs(a.mkfakesysfs, os.path.join(a.hosts, name + ".json"),
                               os.path.join(a.workdir, "host-" + name))
        except FixtureError as e:
            tap.check(False, "fixture host %s: built" % name, str(e))
            continue
        round_trip(tap, a, "fixture host %s" % name, root, os.path.join(a.workdir, "cap-host-" + name))
        shutil.rmtree(root, ignore_errors=True)

    snaps = snapshot_names(a.snapshots)
    tap.check(len(snaps) > 0, "%s holds real snapshots" % a.snapshots)
    for name in snaps:
        try:
            root = extract_snapshot(a.snapshots, name, os.path.join(a.workdir, "snap"))
        except FixtureError as e:
            tap.check(False, "real snapshot %s: unpacks" % name, str(e))
            continue
        round_trip(tap, a, "real snapshot %s" % name, root, os.path.join(a.workdir, "cap-snap-" + name))

    live = "/sys"
    if a.no_live:
        tap.diag("live /sys left out (--no-live)")
    elif os.path.isdir(os.path.join(live, "bus", "pci", "devices")) or \
            os.path.isdir(os.path.join(live, "devices", "system")):
        round_trip(tap, a, "live /sys", live, os.path.join(a.workdir, "cap-live"), live=True)
    else:
        tap.diag("no readable /sys here: the live case is left out")

    shutil.rmtree(a.workdir, ignore_errors=True)
    print("%d passed, %d failed" % (tap.passed, tap.failed))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())

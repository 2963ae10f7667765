#!/usr/bin/env python3
"""The host map of real machines: for every snapshot NAME.tar.bz2 in
tests/fixtures/real-sysfs (hwloc's, tests/fixtures/real-sysfs/README.md),
`pcinumactl host --sysfs-root NAME/sys --json`, run in the directory the
snapshot was unpacked into, must exit 0, write nothing to stderr, and print
exactly the bytes of NAME.host.json beside the tarball.  Every tarball needs
its expected file and every expected file its tarball.

The unit tests (tests/unit/test-hostmap.c, test_real_*) assert chosen
fields of each snapshot's map; this test holds the whole output, as a user
sees it, so any change to it shows up as a diff.

    test-real-snapshots.py --pcinumactl PATH --snapshots DIR --workdir DIR [--update]

--update rewrites NAME.host.json from the current output (review the diff
before committing it; tests/fixtures/README.md).  Output: "ok N - ..." /
"not ok N - ..." lines with "#" diagnostics, then "N passed, M failed";
exit 1 on any failure."""

import argparse
import difflib
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from pcinumatest.fixtures import FixtureError, extract_snapshot, host_json, snapshot_names  # noqa: E402
from pcinumatest.tap import Tap  # noqa: E402

SUFFIX = ".host.json"


def unified(want, got, name):
    lines = list(difflib.unified_diff(want.splitlines(), got.splitlines(),
                                      name + SUFFIX, "pcinumactl host --json", lineterm="", n=2))
    if len(lines) > 80:
        lines = lines[:80] + ["... (%d more diff lines)" % (len(lines) - 80)]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--snapshots", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--update", action="store_true",
                    help="rewrite every NAME%s from the current output" % SUFFIX)
    a = ap.parse_args()
    for opt in ("pcinumactl", "snapshots", "workdir"):
        setattr(a, opt, os.path.abspath(getattr(a, opt)))
    tap = Tap(verbose=False)
    names = snapshot_names(a.snapshots)
    tap.check(len(names) > 0, "%s holds real snapshots" % a.snapshots,
              "no *.tar.bz2 in %s" % a.snapshots)
    stale = sorted(os.path.basename(p)[:-len(SUFFIX)]
                   for p in glob.glob(os.path.join(a.snapshots, "*" + SUFFIX)))
    stale = [n for n in stale if n not in names]
    tap.check(not stale, "every %s has its snapshot" % SUFFIX,
              "expected files without a tarball: %s" % ", ".join(stale))

    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    for name in names:
        try:
            extract_snapshot(a.snapshots, name, a.workdir)
        except FixtureError as e:
            tap.check(False, "%s: unpacks" % name, str(e))
            continue
        rc, out, err = host_json(a.pcinumactl, os.path.join(name, "sys"), cwd=a.workdir)
        tap.check(rc == 0 and err == "", "%s: pcinumactl host --json exits 0, stderr empty" % name,
                  "exit %d, stderr %r" % (rc, err))
        expected = os.path.join(a.snapshots, name + SUFFIX)
        if a.update:
            with open(expected, "w") as f:
                f.write(out)
            tap.diag("wrote %s" % expected)
            continue
        try:
            with open(expected) as f:
                want = f.read()
        except FileNotFoundError:
            tap.check(False, "%s: output equals %s" % (name, os.path.basename(expected)),
                      "%s is missing: run with --update and review it" % expected)
            continue
        tap.check(out == want, "%s: output equals %s" % (name, os.path.basename(expected)),
                  unified(want, out, name))
    shutil.rmtree(a.workdir, ignore_errors=True)
    print("%d passed, %d failed" % (tap.passed, tap.failed))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Host trees for tests: fixture hosts built by tests/fixtures/mkfakesysfs.py
from tests/fixtures/hosts/*.json, the real sysfs snapshots of
tests/fixtures/real-sysfs/*.tar.bz2 (hwloc's), and `pcinumactl host
--json` over either.  Python 3 standard library only."""

import argparse
import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile


class FixtureError(RuntimeError):
    pass


def host_names(hosts_dir):
    """The fixture hosts: NAME for every hosts_dir/NAME.json, sorted."""
    return sorted(os.path.basename(p)[:-len(".json")]
                  for p in glob.glob(os.path.join(hosts_dir, "*.json")))


def mkfakesysfs(script, desc, outdir, timeout=120):
    """Build the tree of description desc (a path) in outdir; return outdir."""
    p = subprocess.run([sys.executable, script, desc, outdir], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if p.returncode != 0:
        raise FixtureError("mkfakesysfs %s failed (%d): %s" % (desc, p.returncode, p.stdout))
    return outdir


def build_host(script, hostfile, tree):
    """Build the tree of fixture host hostfile in tree with mkfakesysfs.py
    (script), its output dropped; a failure raises CalledProcessError."""
    subprocess.run([sys.executable, script, hostfile, tree], check=True, stdout=subprocess.DEVNULL)


def golden_host_args(description, golden_help, update_help):
    """The command line of a golden test over the fixture hosts:
    --pcinumactl, --mkfakesysfs, --hosts, --golden and --update."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--golden", required=True, help=golden_help)
    ap.add_argument("--update", action="store_true", help=update_help)
    return ap.parse_args()


@contextlib.contextmanager
def work_dir(prefix):
    """A temporary directory for the host trees, removed afterwards."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def snapshot_names(snapshots_dir):
    """The real snapshots: NAME for every snapshots_dir/NAME.tar.bz2, sorted."""
    return sorted(os.path.basename(p)[:-len(".tar.bz2")]
                  for p in glob.glob(os.path.join(snapshots_dir, "*.tar.bz2")))


def extract_snapshot(snapshots_dir, name, destdir, timeout=300):
    """Unpack snapshots_dir/NAME.tar.bz2 into destdir; return the machine's
    sysfs root, destdir/NAME/sys.  Memory blocks and CPU caches, most of
    some snapshots and nothing the host map reads, are left out (as the
    unit tests do)."""
    tarball = os.path.join(snapshots_dir, name + ".tar.bz2")
    if not os.path.isfile(tarball):
        raise FixtureError("the real snapshot %s is missing" % tarball)
    os.makedirs(destdir, exist_ok=True)
    p = subprocess.run(["tar", "xjf", tarball, "-C", destdir, "--exclude=memory[0-9]*",
                        "--exclude=cache", "--exclude=cpufreq"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise FixtureError("tar xjf %s failed (%d): %s" % (tarball, p.returncode, p.stdout))
    root = os.path.join(destdir, name, "sys")
    if not os.path.isdir(root):
        raise FixtureError("%s holds no %s/sys" % (tarball, name))
    return root


def host_json(pcinumactl, root, cwd=None, timeout=120):
    """`pcinumactl host --sysfs-root ROOT --json` (run in cwd when given):
    (exit status, stdout, stderr)."""
    p = subprocess.run([pcinumactl, "host", "--sysfs-root", root, "--json"], cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr

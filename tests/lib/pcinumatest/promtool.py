"""promtool for tests/daemon/test_metrics.py, without a Prometheus server.

Debian 12 ships promtool only in the package `prometheus`, whose
installation also enables and starts a Prometheus server on :9090 where
systemd runs: too much for a test dependency.  So the test takes promtool,
in this order, from:

  1. $PCINUMA_PROMTOOL (a path), when set;
  2. the PATH (an admin who has Prometheus installed);
  3. CACHE/usr/bin/promtool, CACHE a folder of the build tree;
  4. `apt-get download prometheus` and `dpkg-deb -x` of it into CACHE: the
     package's files are unpacked there, nothing is installed, no service
     is enabled, and the next run finds them (3).

find(cache) returns (path, None), or (None, why) when none of these gives
a promtool that runs; the test then skips, saying why."""

import glob
import os
import shutil
import subprocess
import tempfile

FETCH_TIMEOUT = 300


def _runs(path):
    """True when path is a promtool that answers --version."""
    try:
        r = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _tail(text, n=6):
    return " | ".join(l.strip() for l in text.strip().splitlines()[-n:])


def fetch(cache):
    """Unpack Debian's prometheus package into cache (made atomically: a
    temporary folder beside it, renamed).  Returns None, or why not."""
    for tool in ("apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            return "%s is missing" % tool
    parent = os.path.dirname(os.path.abspath(cache))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".promtool-", dir=parent)
    try:
        # apt's download sandbox user must be able to write here.
        os.chmod(tmp, 0o755)
        try:
            r = subprocess.run(["apt-get", "download", "-q", "prometheus"], cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=FETCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            return "'apt-get download prometheus' took more than %d s" % FETCH_TIMEOUT
        debs = glob.glob(os.path.join(tmp, "prometheus_*.deb"))
        if r.returncode != 0 or len(debs) != 1:
            return "'apt-get download prometheus' failed (exit %d): %s" % (r.returncode, _tail(r.stdout))
        root = os.path.join(tmp, "root")
        r = subprocess.run(["dpkg-deb", "-x", debs[0], root], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=FETCH_TIMEOUT)
        if r.returncode != 0:
            return "'dpkg-deb -x %s' failed: %s" % (os.path.basename(debs[0]), _tail(r.stdout))
        if not _runs(os.path.join(root, "usr", "bin", "promtool")):
            return "the promtool unpacked from %s does not run" % os.path.basename(debs[0])
        # Only the binary is needed: keep the cache small.
        keep = os.path.join(tmp, "keep")
        os.makedirs(os.path.join(keep, "usr", "bin"))
        os.rename(os.path.join(root, "usr", "bin", "promtool"), os.path.join(keep, "usr", "bin", "promtool"))
        try:
            os.rename(keep, cache)
        except OSError:
            # Another run made it meanwhile: theirs serves.
            pass
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def find(cache):
    """(path, None) of a promtool that runs, or (None, why)."""
    env = os.environ.get("PCINUMA_PROMTOOL")
    if env:
        return (env, None) if _runs(env) else (None, "$PCINUMA_PROMTOOL (%s) does not run" % env)
    on_path = shutil.which("promtool")
    if on_path and _runs(on_path):
        return on_path, None
    cached = os.path.join(cache, "usr", "bin", "promtool")
    if _runs(cached):
        return cached, None
    why = fetch(cache)
    if why:
        return None, "promtool is not on the PATH and could not be fetched: %s" % why
    return (cached, None) if _runs(cached) else (None, "promtool was fetched into %s but does not run" % cache)

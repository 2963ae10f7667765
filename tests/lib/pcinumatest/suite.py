"""The main of a suite that runs on a private session libvirtd through an
lvenv.Harness (or a subclass): the arguments tests/meson.build passes to
all of them, the tools and the root they need, and the run itself
(setup, run, cleanup; an exception that stops it is one failed "setup"
check; the time taken and the closing line).  The libvirt suites audit,
integration, migrate, restart and race and the real-client suites
clients-restart, clients-seam and clients-adapters-guest share it:

    def main():
        a = session_args(__doc__, add=lambda ap: ap.add_argument("--rounds", type=int))
        return run_session_suite(a, Test)
"""
import argparse
import os
import time

from pcinumatest.session import SessionError, require_tools
from pcinumatest.tap import Tap

# The paths every session suite gets from tests/meson.build.
SESSION_ARGS = ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "workdir")


def session_args(doc, add=None, paths=()):
    """Parse a session suite's command line: the SESSION_ARGS (required),
    what add(parser) adds, -v/--verbose.  The SESSION_ARGS and the options
    named in paths come back as absolute paths.  Exits 77 (meson's skip)
    when libvirtd or virsh is missing."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for k in SESSION_ARGS:
        ap.add_argument("--" + k, required=True)
    if add:
        add(ap)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    require_tools(("libvirtd", "virsh"))
    for k in SESSION_ARGS + tuple(paths):
        setattr(a, k, os.path.abspath(getattr(a, k)))
    return a


def run_session_suite(a, make, setup=None, errors=(), tap=None):
    """Make the suite's harness with make(a, tap), then its setup() (or
    setup(harness) when given), run() and, whatever happened, cleanup().
    SessionError, RuntimeError, OSError and the exception classes in
    errors count as one failed "setup" check.  Needs root (the hook goes
    to /etc/libvirt/hooks/qemu.d): as another user, one failed check.
    tap: a Tap the caller already wrote to (default: a new one, verbose
    with -v).  Returns the exit status (Tap.finish())."""
    tap = tap or Tap(a.verbose)
    if os.geteuid() != 0:
        tap.check(False, "runs as root", "the hook goes to /etc/libvirt/hooks/qemu.d")
        return tap.finish()
    t0 = time.monotonic()
    t = make(a, tap)
    try:
        if setup:
            setup(t)
        else:
            t.setup()
        t.run()
    except (SessionError, RuntimeError, OSError) + tuple(errors) as e:
        tap.check(False, "setup", "%s: %s" % (type(e).__name__, e))
    finally:
        t.cleanup()
    tap.diag("%.1fs in all" % (time.monotonic() - t0))
    if tap.failures:
        tap.diag("failed: " + "; ".join(tap.failures))
    return tap.finish()

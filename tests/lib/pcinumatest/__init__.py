"""pcinumatest: the helpers every Python test suite of pcinuma shares, so
that no suite imports another suite's file.  tests/meson.build puts
tests/lib on PYTHONPATH; a script run by hand adds it to sys.path itself.

  daemon     pcinumad on a fixture host, the raw protocol, the hook, TAP
             results (the daemon, faults and bad-input suites)
  session    a private session libvirtd as an unprivileged user
  lvenv      pcinumad watching a session libvirtd, and the libvirt suites'
             shared setup (Harness)
  tap        TAP lines, the closing count and the exit status (Tap)
  suite      the main of a session-libvirtd suite: its arguments, root,
             setup/run/cleanup (the libvirt suites; clients-restart)
  xmlcmp     domain XML comparison (bytes, C14N, device order) and diffs
  uevent     udevd's netlink messages, played by a test
  fixtures   fixture hosts (tests/fixtures/mkfakesysfs.py) and the real
             sysfs snapshots
  promtool   promtool for the metrics test, without a Prometheus server
  fake_watcher.py  a stand-in for pcinuma-watcher (FAKE_WATCHER: its path)
"""
import os

FAKE_WATCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_watcher.py")

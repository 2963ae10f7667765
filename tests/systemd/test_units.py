#!/usr/bin/env python3
"""Checks of the systemd glue: the journal catalog covers every MESSAGE_ID
pcinumad logs and journalctl accepts it; the units pass systemd-analyze
verify and carry the hardening and service type the project promises.
Ends with 'N passed, M failed'."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from pcinumatest.tap import Tap

TAP = Tap()
check = TAP.check


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True, help="the build dir's systemd/ (configured units)")
    ap.add_argument("--pcinumad", required=True)
    a = ap.parse_args()

    for tool in ("journalctl", "systemd-analyze"):
        if not shutil.which(tool):
            print(f"1..0 # SKIP {tool} not installed")
            sys.exit(77)

    log_h = open(os.path.join(a.source, "lib", "log", "log.h")).read()
    ids = dict(re.findall(r'#define PCINUMA_MID_(\w+)\s+"([0-9a-f]{32})"', log_h))
    catalog = open(os.path.join(a.source, "systemd", "pcinuma.catalog")).read()
    cat_ids = re.findall(r"^-- ([0-9a-f]{32})$", catalog, re.M)
    check(len(ids) >= 10, f"lib/log/log.h defines the message ids ({len(ids)})")
    check(sorted(set(ids.values())) == sorted(set(cat_ids)),
          "the catalog has exactly one entry per MESSAGE_ID in lib/log/log.h",
          f"missing: {set(ids.values()) - set(cat_ids)}\nextra: {set(cat_ids) - set(ids.values())}")
    check(len(cat_ids) == len(set(cat_ids)), "no MESSAGE_ID appears twice in the catalog")

    with tempfile.TemporaryDirectory() as root:
        d = os.path.join(root, "usr/lib/systemd/catalog")
        os.makedirs(d)
        shutil.copy(os.path.join(a.source, "systemd", "pcinuma.catalog"), d)
        r = subprocess.run(["journalctl", f"--root={root}", "--update-catalog"], capture_output=True, text=True)
        check(r.returncode == 0, "journalctl --update-catalog accepts the catalog", r.stderr)
        r = subprocess.run(["journalctl", f"--root={root}", "--list-catalog"], capture_output=True, text=True)
        listed = set(re.findall(r"^([0-9a-f]{32}) ", r.stdout, re.M))
        check(listed == set(ids.values()), "journalctl lists every pcinuma message id", r.stdout + r.stderr)

    svc = open(os.path.join(a.build, "pcinumad.service")).read()
    sock = open(os.path.join(a.build, "pcinumad.socket")).read()
    ver = int(re.search(r"systemd (\d+)", subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True).stdout).group(1))
    want_type = "notify-reload" if ver >= 253 else "notify"
    check(re.search(rf"^Type={want_type}$", svc, re.M) is not None, f"Type={want_type} for systemd {ver}")
    if want_type == "notify":
        check("ExecReload=/bin/kill -HUP $MAINPID" in svc, "systemd < 253: ExecReload sends SIGHUP")
    for key in ("WatchdogSec=", "ProtectSystem=strict", "PrivateTmp=yes", "NoNewPrivileges=yes",
                "CapabilityBoundingSet=", "ReadWritePaths=/run/pcinuma"):
        check(re.search(rf"^{re.escape(key)}", svc, re.M) is not None, f"pcinumad.service has {key}")
    check("ListenStream=/run/pcinuma/hook.sock" in sock and "SocketMode=0600" in sock,
          "pcinumad.socket listens on /run/pcinuma/hook.sock with mode 0600")

    with tempfile.TemporaryDirectory() as tmp:
        # Point ExecStart at the built daemon so verify finds it.
        svc_local = re.sub(r"^ExecStart=\S+", f"ExecStart={os.path.abspath(a.pcinumad)}", svc, flags=re.M)
        open(os.path.join(tmp, "pcinumad.service"), "w").write(svc_local)
        open(os.path.join(tmp, "pcinumad.socket"), "w").write(sock)
        r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                            os.path.join(tmp, "pcinumad.service"), os.path.join(tmp, "pcinumad.socket")],
                           capture_output=True, text=True)
        # systemd-analyze complains about the host's own units too; only ours count.
        ours = [l for l in (r.stdout + r.stderr).splitlines() if "pcinumad" in l]
        check(r.returncode == 0 and not ours, "systemd-analyze verify accepts the units", r.stdout + r.stderr)

    sys.exit(TAP.finish())


if __name__ == "__main__":
    main()

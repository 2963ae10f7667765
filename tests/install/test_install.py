#!/usr/bin/env python3
"""'meson install' into a DESTDIR: every file lands where the docs say, and
the example policy goes to /etc/pcinuma/policy.json only when no policy is
there (an administrator's file survives a re-install).  Prints 'ok N - ...'
lines and ends with 'N passed, M failed'."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from pcinumatest.tap import Tap

TAP = Tap()
check = TAP.check


def meson_install(meson, build, destdir):
    return subprocess.run(meson + ["install", "-C", build, "--no-rebuild", "--destdir", destdir],
                          capture_output=True, text=True, timeout=300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--meson", default="meson", help="the meson command (MESONINTROSPECT's first word)")
    a = ap.parse_args()
    meson = a.meson.split()

    intro = subprocess.run(meson + ["introspect", "--buildoptions", a.build], capture_output=True, text=True, check=True)
    opt = {o["name"]: o["value"] for o in json.loads(intro.stdout)}
    prefix = opt["prefix"]

    def p(*parts):
        return os.path.join(*parts) if os.path.isabs(parts[0]) else os.path.join(prefix, *parts)

    example = os.path.join(a.source, "conf", "policy.json")
    with open(example, "rb") as f:
        example_bytes = f.read()

    with tempfile.TemporaryDirectory(prefix="pcinuma-install-") as tmp:
        # Case 1: a fresh system.
        d1 = os.path.join(tmp, "fresh")
        r = meson_install(meson, a.build, d1)
        check(r.returncode == 0, "meson install into an empty DESTDIR", r.stdout[-2000:] + r.stderr[-2000:])

        def there(path):
            return os.path.join(d1, path.lstrip("/"))

        sbindir, bindir, libexecdir = p(opt["sbindir"]), p(opt["bindir"]), p(opt["libexecdir"])
        mandir, datadir = p(opt["mandir"]), p(opt["datadir"])
        expected = [
            (os.path.join(sbindir, "pcinumad"), "x"),
            (os.path.join(sbindir, "pcinumactl"), "x"),
            (os.path.join(libexecdir, "pcinuma", "pcinuma-hook"), "x"),
            (os.path.join(libexecdir, "pcinuma", "pcinuma-watcher"), "x"),
            (os.path.join(libexecdir, "pcinuma", "pcinuma-kubevirt-hook"), "x"),
            (os.path.join(libexecdir, "pcinuma", "pcinuma-vdsm-hook"), "x"),
            (os.path.join(bindir, "pcinuma-capture-host"), "x"),
            (os.path.join(mandir, "man8", "pcinumad.8"), "f"),
            (os.path.join(mandir, "man8", "pcinumactl.8"), "f"),
            (os.path.join(mandir, "man8", "pcinuma-hook.8"), "f"),
            (os.path.join(mandir, "man8", "pcinuma-kubevirt-hook.8"), "f"),
            (os.path.join(mandir, "man8", "pcinuma-vdsm-hook.8"), "f"),
            (os.path.join(mandir, "man5", "pcinuma-policy.5"), "f"),
            (os.path.join(mandir, "man1", "pcinuma-capture-host.1"), "f"),
            (os.path.join(datadir, "doc", "pcinuma", "examples", "policy.json"), "f"),
            (os.path.join(datadir, "doc", "pcinuma", "examples", "hook.conf"), "f"),
            (os.path.join(datadir, "doc", "pcinuma", "quickstart.md"), "f"),
            (os.path.join(datadir, "doc", "pcinuma", "troubleshooting.md"), "f"),
            ("/etc/pcinuma/policy.json", "f"),
        ]
        for path, kind in expected:
            full = there(path)
            ok = os.path.isfile(full) and (kind != "x" or os.access(full, os.X_OK))
            check(ok, f"installs {path}" + (" (executable)" if kind == "x" else ""))

        # Units and catalog: wherever systemd.pc (or the default) says.
        found = {}
        for root, _dirs, files in os.walk(d1):
            for name in files:
                found.setdefault(name, []).append(os.path.join(root, name))
        for name in ("pcinumad.service", "pcinumad.socket", "pcinuma.catalog"):
            check(name in found, f"installs {name}", "")
        comp = [f for f in found.get("pcinumactl", []) if "/bash-completion/completions/" in f]
        check(comp, "installs the bash completion of pcinumactl in bash-completion/completions")
        if comp:
            r = subprocess.run(["bash", "-n", comp[0]], capture_output=True, text=True)
            check(r.returncode == 0, "the bash completion is valid bash", r.stderr)

        # pcinumad starts its libvirt watcher from the installed path
        # (it says which in --help): that must be where meson put it.
        watcher = os.path.join(libexecdir, "pcinuma", "pcinuma-watcher")
        r = subprocess.run([there(os.path.join(sbindir, "pcinumad")), "--help"], capture_output=True, text=True)
        check(watcher in r.stdout, f"the installed pcinumad looks for its watcher at {watcher}", r.stdout[-1500:])

        hook = os.path.join(there(opt["libvirt_hooks_dir"]), "pcinuma")
        target = os.path.join(libexecdir, "pcinuma", "pcinuma-hook")
        check(os.path.islink(hook) and os.readlink(hook) == target,
              f"{opt['libvirt_hooks_dir']}/pcinuma is a symlink to {target}",
              os.readlink(hook) if os.path.islink(hook) else "missing")

        pol = there("/etc/pcinuma/policy.json")
        if os.path.exists(pol):
            with open(pol, "rb") as f:
                check(f.read() == example_bytes, "/etc/pcinuma/policy.json is the example")
            check(oct(os.stat(pol).st_mode & 0o777) == "0o644", "/etc/pcinuma/policy.json has mode 0644")

        # Case 2: an administrator's policy is already there.
        d2 = os.path.join(tmp, "existing")
        mine = b'{"default": {"policy": "require"}}\n'
        os.makedirs(os.path.join(d2, "etc", "pcinuma"))
        with open(os.path.join(d2, "etc", "pcinuma", "policy.json"), "wb") as f:
            f.write(mine)
        r = meson_install(meson, a.build, d2)
        check(r.returncode == 0, "meson install over an existing /etc/pcinuma/policy.json", r.stderr[-2000:])
        with open(os.path.join(d2, "etc", "pcinuma", "policy.json"), "rb") as f:
            check(f.read() == mine, "the existing /etc/pcinuma/policy.json is kept byte for byte")
        left = [n for n in os.listdir(os.path.join(d2, "etc", "pcinuma")) if n != "policy.json"]
        check(not left, "no temporary file is left in /etc/pcinuma", " ".join(left))

        # Case 3: a re-install over case 1 keeps the (now existing) policy.
        with open(pol, "ab") as f:
            f.write(b"\n")
        r = meson_install(meson, a.build, d1)
        with open(pol, "rb") as f:
            check(r.returncode == 0 and f.read() == example_bytes + b"\n", "a second meson install keeps an edited policy")

    return TAP.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The man pages against the programs: every option each program's --help
prints (and each pcinumactl command's --help) is documented in its man page,
every option the man page defines (a .TP tag) is one the program knows,
every pcinumactl command has its section, the environment variables named
in --help are in ENVIRONMENT, --version prints the project version, and
groff finds nothing to warn about.  Prints 'ok N - ...' / 'not ok N - ...'
lines and ends with 'N passed, M failed'."""
import argparse
import os
import re
import shutil
import subprocess
import sys

from pcinumatest.tap import Tap

TAP = Tap()
check = TAP.check


def run(argv, env=None):
    e = dict(os.environ)
    for k in ("PCINUMA_SOCKET", "PCINUMA_SYSFS_ROOT", "PCINUMA_HOOK_CONF", "PCINUMA_POLICY_FILE",
              "PCINUMA_KUBEVIRT_STATE_DIR"):
        e.pop(k, None)
    if env:
        e.update(env)
    return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=30, stdin=subprocess.DEVNULL)


def roff_text(path):
    """The man page source with the escapes that matter here undone."""
    with open(path, encoding="utf-8") as f:
        s = f.read()
    s = re.sub(r"\\f[BIRP]", "", s)
    s = s.replace("\\-", "-").replace("\\e", "\\").replace("\\~", " ").replace("\\(bu", "*")
    return s


def tp_tags(text):
    """The tag line after each .TP: where the page defines an option."""
    lines = text.splitlines()
    return [lines[i + 1] for i, l in enumerate(lines[:-1]) if l.strip() == ".TP"]


LONG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SHORT = re.compile(r"(?<![\w-])-[a-zA-Z](?![\w-])")


def options_in(text):
    return set(LONG.findall(text)) | set(SHORT.findall(text))


# Options the program accepts (see its source) that its --help does not
# print; the page documents them anyway.  Shrink this when --help learns them.
UNLISTED = {}


def section(text, name):
    m = re.search(r"^\.SH " + re.escape(name) + r"\s*$(.*?)(?=^\.SH |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--man-dir", required=True, help="the built man pages (build/man)")
    ap.add_argument("--pcinumad", required=True)
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--hook", required=True)
    ap.add_argument("--kubevirt-hook", required=True)
    ap.add_argument("--vdsm-hook", required=True)
    ap.add_argument("--capture", required=True, help="scripts/pcinuma-capture-host")
    ap.add_argument("--version", required=True, help="the project version")
    a = ap.parse_args()

    def page(name):
        return os.path.join(a.man_dir, name)

    # --version of each program.
    for prog, argv in (("pcinumad", [a.pcinumad]), ("pcinumactl", [a.pcinumactl]), ("pcinuma-hook", [a.hook]),
                       ("pcinuma-kubevirt-hook", [a.kubevirt_hook]), ("pcinuma-vdsm-hook", [a.vdsm_hook])):
        r = run(argv + ["--version"])
        check(r.returncode == 0 and r.stdout.strip() == f"{prog} {a.version}",
              f"{prog} --version prints '{prog} {a.version}'", f"rc {r.returncode}: {r.stdout!r} {r.stderr!r}")

    # The help texts, per program (pcinumactl: its own and each command's).
    helps = {}
    r = run([a.pcinumad, "--help"])
    check(r.returncode == 0 and "Usage: pcinumad" in r.stdout, "pcinumad --help", r.stderr)
    helps["pcinumad.8"] = {"": r.stdout}
    r = run([a.hook, "--help"])
    check(r.returncode == 0 and "Usage: pcinuma-hook" in r.stdout, "pcinuma-hook --help", r.stderr)
    helps["pcinuma-hook.8"] = {"": r.stdout}
    r = run([a.kubevirt_hook, "--help"])
    check(r.returncode == 0 and "Usage: onDefineDomain" in r.stdout, "pcinuma-kubevirt-hook --help", r.stderr)
    helps["pcinuma-kubevirt-hook.8"] = {"": r.stdout}
    r = run([a.vdsm_hook, "--help"])
    check(r.returncode == 0 and "Usage: pcinuma-vdsm-hook" in r.stdout, "pcinuma-vdsm-hook --help", r.stderr)
    helps["pcinuma-vdsm-hook.8"] = {"": r.stdout}
    r = run([a.capture, "--help"])
    check(r.returncode == 0 and "Usage: pcinuma-capture-host" in r.stdout, "pcinuma-capture-host --help", r.stderr)
    helps["pcinuma-capture-host.1"] = {"": r.stdout}
    r = run([a.pcinumactl, "--help"])
    check(r.returncode == 0 and "Usage: pcinumactl" in r.stdout, "pcinumactl --help", r.stderr)
    ctl = {"": r.stdout}
    m = re.search(r"^Commands:\n(.*?)(?:\n\n|\Z)", r.stdout, re.M | re.S)
    commands = sorted(set(re.findall(r"^  ([a-z][a-z-]*)", m.group(1) if m else "", re.M)))
    check(len(commands) >= 5, f"pcinumactl --help lists its commands ({', '.join(commands)})")
    for c in commands:
        rc = run([a.pcinumactl, c, "--help"])
        check(rc.returncode == 0 and rc.stdout.strip(), f"pcinumactl {c} --help",
              f"rc {rc.returncode}: {rc.stderr}")
        ctl[c] = rc.stdout
        # Each option its usage names is described on a line of its own,
        # and -h/--help too (issue 25: topo and status described none).
        head = rc.stdout.split("\n\n", 1)[0]
        described = set()
        for line in rc.stdout.splitlines():
            m = re.match(r"^\s+((?:-[a-zA-Z], )?--[a-z][a-z0-9-]*)", line)
            if m:
                described |= options_in(m.group(1))
        undescribed = sorted(options_in(head) - described)
        check(not undescribed and "--help" in described,
              f"pcinumactl {c} --help describes each of its options and --help",
              "not described: " + " ".join(undescribed + ([] if "--help" in described else ["--help"])))
    helps["pcinumactl.8"] = ctl
    r = run([a.pcinumactl])
    check(r.returncode == 2 and "Usage: pcinumactl" in r.stderr, "pcinumactl without a command: usage on stderr, exit 2",
          f"rc {r.returncode}")

    for name, texts in helps.items():
        path = page(name)
        if not os.path.exists(path):
            check(False, f"{name} exists", path)
            continue
        man = roff_text(path)
        man_opts = options_in(man)
        help_opts = set()
        for t in texts.values():
            help_opts |= options_in(t)
        missing = sorted(help_opts - man_opts)
        check(not missing, f"{name}: every option of --help is in the page", "missing: " + " ".join(missing))

        # Vice versa, for the options the page defines (.TP tags).
        defined = set()
        for tag in tp_tags(man):
            defined |= options_in(tag)
        # --help is implied by every program; -h too where getopt has it.
        unknown = sorted(defined - help_opts - {"--help", "-h"} - UNLISTED.get(name, set()))
        check(not unknown, f"{name}: every option the page defines is one the program knows",
              "unknown: " + " ".join(unknown))

        # Environment variables named in --help.
        env_help = set()
        for t in texts.values():
            env_help |= set(re.findall(r"\$(PCINUMA_[A-Z_]+)", t))
        env_sec = section(man, "ENVIRONMENT")
        missing = sorted(v for v in env_help if v not in env_sec)
        check(not missing, f"{name}: the environment variables of --help are in ENVIRONMENT",
              "missing: " + " ".join(missing))

        for sec in ("NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
            check(section(man, sec).strip(), f"{name}: has {sec}")
        if not name.endswith(".5"):
            check(section(man, "EXIT STATUS").strip(), f"{name}: has EXIT STATUS")

        if name == "pcinumactl.8":
            cmds_sec = section(man, "COMMANDS")
            for c in commands:
                check(re.search(r'^\.SS "?' + re.escape(c) + r"\b", cmds_sec, re.M),
                      f"pcinumactl.8: command '{c}' has its own section")
                ex = section(man, "EXIT STATUS")
                check(re.search(r"^\.B " + re.escape(c) + r"\s*$", ex, re.M),
                      f"pcinumactl.8: command '{c}' has its exit statuses")

    # The policy page names every top-level key pcinumactl check-policy knows
    # about (from the docs, the keys are those of docs/policy.md's example).
    pol = roff_text(page("pcinuma-policy.5"))
    for key in ("default", "allow_domain_policy", "rules", "match", "name", "uuid", "tag", "hook",
                "timeout_ms", "on_unreachable", "off", "legacy", "preferred", "socket", "require", "required"):
        check(re.search(r"\b" + re.escape(key) + r"\b", pol), f"pcinuma-policy.5 mentions '{key}'")

    # groff's warnings (the same check as 'man --warnings').
    groff = shutil.which("groff")
    if not groff:
        print("# groff not installed: warnings not checked")
    else:
        for name in sorted(os.listdir(a.man_dir)):
            if not re.search(r"\.[1-8]$", name):
                continue
            r = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", page(name)], capture_output=True, text=True,
                               env=dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80"))
            check(r.returncode == 0 and not r.stderr.strip(), f"{name}: groff -ww finds nothing to warn about", r.stderr)

    return TAP.finish()


if __name__ == "__main__":
    sys.exit(main())

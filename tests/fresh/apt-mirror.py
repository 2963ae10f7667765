#!/usr/bin/env python3
"""Print the Debian mirror this machine's own apt configuration uses, for
the checks that debootstrap a chroot (tests/fresh/test_fresh_demo.sh,
tests/stack2/test_stack2.sh): never a host name of ours.

    apt-mirror.py SUITE

Reads /etc/apt/sources.list, sources.list.d/*.list and the deb822
sources.list.d/*.sources, keeps the enabled 'deb' entries with component
'main' and an http(s) or file URI, and prints the first that carries SUITE
itself, else the first Debian-looking archive (a URI ending in /debian, not
a -security suite).  Prints an empty line when there is none (exit 0).
"""
import glob
import re
import sys

suite = sys.argv[1]
found = []                       # (uri, suites) in apt's order


def add(uri, suites, comps):
    if "main" in comps and re.match(r"(https?|file)://", uri):
        found.append((uri.rstrip("/"), suites))


def one_line(path):
    for line in open(path, errors="replace"):
        line = line.split("#", 1)[0].strip()
        line = re.sub(r"\[[^]]*\]", " ", line).split()
        if len(line) >= 4 and line[0] == "deb":
            add(line[1], [line[2]], line[3:])


def deb822(path):
    for stanza in re.split(r"\n\s*\n", open(path, errors="replace").read()):
        f = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t") and key:
                f[key] += " " + line.strip()
            elif ":" in line:
                key, v = line.split(":", 1)
                key = key.strip().lower()
                f[key] = v.strip()
        if f.get("enabled", "yes").lower() == "no" or "deb" not in f.get("types", "").split():
            continue
        for uri in f.get("uris", "").split():
            add(uri, f.get("suites", "").split(), f.get("components", "").split())


paths = glob.glob("/etc/apt/sources.list") + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
for p in paths:
    one_line(p)
for p in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    deb822(p)
# the release itself first, then any Debian-looking archive (not -security)
best = [u for u, s in found if suite in s] + \
       [u for u, s in found if not any("security" in x for x in s) and u.endswith("/debian")]
print(best[0] if best else "")

#!/usr/bin/env python3
"""libvirt suite: gpudirect_clique reaches QEMU's command line.

    test_clique.py --pcinumactl PATH --mkfakesysfs PATH --hosts DIR \
                   --cases DIR --workdir DIR

For each golden case named gpudirect-clique-* (tests/golden/), plan its
input.xml on its fixture host with its arguments (gpudirect_clique auto),
and let libvirt's own command-line generation (`virsh domxml-to-native
qemu-argv` on a private session libvirtd) turn the planned XML into QEMU's
argv.  Then:

  * every <pcinuma:clique> the mark records (override not 'user') names a
    GPU whose -device JSON has "id" = its alias, "host" = its BDF and
    "x-nv-gpudirect-clique" = its id; no other vfio-pci device has one
    except those the input's own <qemu:override> sets;
  * GPUs of one host switch share an id, and the ids are 0..n-1;
  * `pcinumactl revert` of the planned XML gives an argv with no
    x-nv-gpudirect-clique but the input's own.

In session mode domxml-to-native needs <driver name='vfio'/> in each PCI
hostdev ("invalid PCI passthrough type 'default'" otherwise), and a
<numatune> naming host nodes this machine lacks fails; both are adjusted in
the text handed to virsh only, the same way for the planned and the
reverted XML.

Output: "ok N - ..." / "not ok N - ..." lines and a final count.  Exit 1 on
any failure, 77 when libvirtd or virsh is missing.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET

from pcinumatest.session import require_tools, start_session  # noqa
from pcinumatest.tap import Tap  # noqa

PCINUMA_NS = "urn:pcinuma:topology:1"
PROP = "x-nv-gpudirect-clique"


def for_virsh(xml):
    """The adjustments domxml-to-native needs in session mode."""
    xml = re.sub(r"(<hostdev\b[^>]*\btype=['\"]pci['\"][^>]*>)", r"\1<driver name='vfio'/>", xml)
    xml = re.sub(r"\s*<numatune>.*?</numatune>", "", xml, flags=re.S)
    # libvirt would look the memnode nodesets up on this host.
    xml = re.sub(r"<domain type=['\"]kvm['\"]", "<domain type='qemu'", xml)
    return xml


def device_args(argv_text):
    """The JSON -device arguments of a qemu-argv command line, as dicts."""
    words = shlex.split(argv_text)
    out = []
    for i, w in enumerate(words[:-1]):
        if w == "-device" and words[i + 1].startswith("{"):
            out.append(json.loads(words[i + 1]))
    return out


def clique_records(xml):
    root = ET.fromstring(xml)
    return [c.attrib for c in root.iter("{%s}clique" % PCINUMA_NS)]


def top_switches(host_json):
    """BDF -> the BDF of the topmost switch upstream port above it (or
    absent), from a fixture host description."""
    out = {}

    def walk(devs, top):
        for d in devs:
            t = top or (d["bdf"] if d.get("kind") == "switch-up" else None)
            if t and d.get("kind") != "switch-up":
                out[d["bdf"]] = t
            walk(d.get("devices", []), t)

    for hb in json.load(open(host_json))["hostbridges"]:
        walk(hb.get("devices", []), None)
    return out


def user_cliques(input_xml):
    """alias -> id that the input's own <qemu:override> sets."""
    out = {}
    root = ET.fromstring(input_xml)
    q = "{http://libvirt.org/schemas/domain/qemu/1.0}"
    for dev in root.iter(q + "device"):
        for p in dev.iter(q + "property"):
            if p.get("name") == PROP:
                out[dev.get("alias")] = int(p.get("value"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    require_tools()
    os.makedirs(a.workdir, exist_ok=True)
    tap = Tap()

    cases = sorted(d for d in os.listdir(a.cases) if d.startswith("gpudirect-clique-")
                   and os.path.isfile(os.path.join(a.cases, d, "input.xml")))
    tap.check(len(cases) >= 1, "golden cases gpudirect-clique-* exist", a.cases)

    session = start_session(tap)
    if session is None:
        return 1
    hosts = {}
    try:
        for case in cases:
            cd = os.path.join(a.cases, case)
            host = open(os.path.join(cd, "host")).read().strip()
            if host not in hosts:
                out = os.path.join(a.workdir, "hosts", host)
                subprocess.run([sys.executable, a.mkfakesysfs, os.path.join(a.hosts, host + ".json"), out], check=True)
                hosts[host] = out
            args = []
            if os.path.exists(os.path.join(cd, "args")):
                args = shlex.split(open(os.path.join(cd, "args")).read().replace("@CASE@", cd))
            input_xml = open(os.path.join(cd, "input.xml")).read()
            r = subprocess.run([a.pcinumactl, "plan", "--sysfs-root", hosts[host], *args, os.path.join(cd, "input.xml")],
                               capture_output=True, text=True)
            if not tap.check(r.returncode == 0, "%s: pcinumactl plan" % case, r.stderr):
                continue
            planned = r.stdout
            recs = clique_records(planned)
            ours = [c for c in recs if c.get("override") != "user"]
            tap.check(len(ours) >= 2, "%s: the mark records clique ids (%d)" % (case, len(ours)), planned[:2000])

            nv = session.virsh("domxml-to-native", "qemu-argv", session.write(for_virsh(planned)))
            if not tap.check(nv.returncode == 0, "%s: virsh domxml-to-native of the planned XML" % case,
                             nv.stderr + nv.stdout[:2000]):
                continue
            devs = {d.get("id"): d for d in device_args(nv.stdout) if d.get("driver") == "vfio-pci"}
            user = user_cliques(input_xml)
            bad = []
            for c in ours:
                d = devs.get(c["alias"])
                if d is None:
                    bad.append("no vfio-pci -device with id %s" % c["alias"])
                elif d.get("host") != c["host"] or d.get(PROP) != int(c["id"]):
                    bad.append("%s: host %s %s=%s, the mark says host %s id %s"
                               % (c["alias"], d.get("host"), PROP, d.get(PROP), c["host"], c["id"]))
            expect = {c["alias"]: int(c["id"]) for c in ours}
            expect.update(user)
            for alias, d in devs.items():
                if PROP in d and expect.get(alias) != d[PROP]:
                    bad.append("%s has %s=%s, nothing planned it" % (alias, PROP, d[PROP]))
                if PROP not in d and alias in expect:
                    bad.append("%s has no %s" % (alias, PROP))
            tap.check(not bad, "%s: each GPU's -device carries its planned clique id (%d GPUs)" % (case, len(expect)),
                      "\n".join(bad))

            # One id per host switch, one switch per id: the switches come
            # from the fixture host's description.
            sw = top_switches(os.path.join(a.hosts, host + ".json"))
            by_switch, by_id = {}, {}
            for c in recs:
                by_switch.setdefault(sw.get(c["host"]), set()).add(c["id"])
                by_id.setdefault(c["id"], set()).add(sw.get(c["host"]))
            tap.check(None not in by_switch and all(len(v) == 1 for v in by_switch.values())
                      and all(len(v) == 1 for v in by_id.values()),
                      "%s: GPUs share an id exactly when they share a host switch" % case,
                      "by switch: %s\nby id: %s" % (by_switch, by_id))
            ids = sorted({int(c["id"]) for c in ours})
            tap.check(ids == list(range(len(ids))), "%s: the ids are 0..%d" % (case, len(ids) - 1), str(ids))

            rv = subprocess.run([a.pcinumactl, "revert", "-"], input=planned, capture_output=True, text=True)
            if not tap.check(rv.returncode == 0, "%s: pcinumactl revert" % case, rv.stderr):
                continue
            nv2 = session.virsh("domxml-to-native", "qemu-argv", session.write(for_virsh(rv.stdout)))
            if not tap.check(nv2.returncode == 0, "%s: virsh domxml-to-native of the reverted XML" % case,
                             nv2.stderr + nv2.stdout[:2000]):
                continue
            left = {d.get("id"): d.get(PROP) for d in device_args(nv2.stdout)
                    if d.get("driver") == "vfio-pci" and PROP in d}
            tap.check(left == user, "%s: after revert only the input's own clique ids remain" % case,
                      "left: %s, the input's own: %s" % (left, user))
            tap.check(not any(c["alias"] in nv2.stdout for c in ours if c["alias"].startswith("ua-pcinuma-")),
                      "%s: after revert no ua-pcinuma- alias remains" % case)
    finally:
        session.stop()
    print("%d passed, %d failed" % (tap.passed, tap.failed))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())

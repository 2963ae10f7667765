#!/usr/bin/env python3
"""Write seed inputs for the fuzz targets (tests/fuzz/fuzz-*.c).

    seed-corpus.py OUTDIR [SYSFS_TREE...]

OUTDIR gets domain/, migrate/, policy/, protocol/, revert/, sysfs/ and wproto/, one file per input,
named by the SHA-1 of its content as libFuzzer names them.  The seeds come
from the golden cases, conf/policy.json and the policy unit tests, frames
written here, and the fixture hosts (built with tests/fixtures/mkfakesysfs.py
into a temporary directory); each SYSFS_TREE (e.g. an unpacked capture of a
real machine's /sys) adds one more sysfs seed.  Seeds are starting points:
after a fuzzing run the committed corpus is the merged one
(docs/fuzzing.md).
"""

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
MAX_SEED = 64 * 1024


def put(outdir, target, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_SEED:
        return
    d = os.path.join(outdir, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


# ---- domain -----------------------------------------------------------------

def domain_seeds(outdir):
    golden = os.path.join(TOP, "tests", "golden")
    for case in sorted(os.listdir(golden)):
        for name in ("input.xml", "expected.xml"):
            p = os.path.join(golden, case, name)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    put(outdir, "domain", f.read())


# ---- policy -----------------------------------------------------------------

C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def c_unescape(s):
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = s[i + 1]
        if n == "x":
            m = re.match(r"[0-9a-fA-F]{1,2}", s[i + 2:])
            out.append(int(m.group(0), 16))
            i += 2 + len(m.group(0))
        elif n in "01234567":
            m = re.match(r"[0-7]{1,3}", s[i + 1:])
            out.append(int(m.group(0), 8))
            i += 1 + len(m.group(0))
        else:
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"', "'": b"'"}.get(n, n.encode())
            i += 2
    return bytes(out)


def policy_seeds(outdir):
    with open(os.path.join(TOP, "conf", "policy.json"), "rb") as f:
        put(outdir, "policy", f.read())
    # The first argument of every parse helper call in the unit tests:
    # adjacent string literals, concatenated.
    with open(os.path.join(TOP, "tests", "unit", "test-policy.c")) as f:
        src = f.read()
    for m in re.finditer(r'(?:parse_ok|parse_err|assert_parse_error|static const char \w+\[\] =)\s*\(?\s*((?:"(?:[^"\\\n]|\\.)*"\s*)+)', src):
        text = b"".join(c_unescape(x) for x in C_STRING.findall(m.group(1)))
        put(outdir, "policy", text)


# ---- protocol ---------------------------------------------------------------

def frame(obj):
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">I", len(payload)) + payload


def protocol_seeds(outdir):
    with open(os.path.join(TOP, "tests", "golden", "all-local-require", "input.xml")) as f:
        xml = f.read()
    small = ("<domain type='kvm'><name>vm</name><devices><hostdev mode='subsystem' type='pci' managed='yes'>"
             "<source><address domain='0x0000' bus='0x13' slot='0x00' function='0x0'/></source></hostdev>"
             "</devices></domain>")
    hook = lambda argv, x=None: dict({"version": 1, "type": "hook", "argv": argv}, **({"xml": x} if x is not None else {}))
    requests = [
        hook(["vm", "prepare", "begin", "-"], xml),
        hook(["vm", "prepare", "begin", "-"], small),
        hook(["vm", "migrate", "begin", "-"], xml),
        hook(["vm", "restore", "begin", "-"], small),
        hook(["vm", "started", "begin", "-"]),
        hook(["vm"]),
        hook([]),
        hook(["a", "b", "c", "d", "e"]),
        {"version": 1, "type": "status"},
        {"version": 2, "type": "status"},
        {"type": "status"},
        {"version": 1, "type": "launch"},
        {"version": 1, "type": "hook", "argv": "vm"},
        {"version": 1, "type": "hook", "argv": ["vm", "prepare", "begin", "-"], "xml": 5},
    ]
    responses = [
        {"version": 1, "exit": 0, "stdout": "", "stderr": "", "verdict": "allow"},
        {"version": 1, "exit": 1, "stderr": "pcinuma: refused\n", "verdict": "refuse"},
        {"version": 1, "exit": 0, "stdout": small, "verdict": "pass"},
        {"version": 1, "status": {"uptime_s": 3, "requests": 10, "host": {"nodes": 4, "devices": 26}}},
        {"version": 1, "error": "unsupported protocol version 2, this daemon speaks 1"},
    ]
    for o in requests + responses:
        put(outdir, "protocol", frame(o))          # a raw stream of one frame
        put(outdir, "protocol", json.dumps(o))     # the JSON alone (framed by the target)
    # Streams of several frames, and broken ones.
    put(outdir, "protocol", b"".join(frame(o) for o in requests[4:9]))
    put(outdir, "protocol", frame(requests[8]) + frame(responses[0])[:7])
    put(outdir, "protocol", struct.pack(">I", 0))
    put(outdir, "protocol", struct.pack(">I", 16 * 1024 * 1024 + 1) + b"{}")
    put(outdir, "protocol", frame(b"[1, 2]") + frame(b"{}"))
    put(outdir, "protocol", frame(b"null"))
    put(outdir, "protocol", frame(b'{"version": 1} x'))
    put(outdir, "protocol", frame(b'{"version": 1,}'))
    put(outdir, "protocol", frame(b'{"a": "\xc3\x28"}'))
    put(outdir, "protocol", frame(b'{"a": "b\x00"}'))
    put(outdir, "protocol", frame(b"12"))


# ---- wproto -----------------------------------------------------------------

def wproto_seeds(outdir):
    """The watcher link's messages (lib/base/watcher-protocol.h), valid and broken."""
    small = ("<domain type='kvm'><name>vm</name><uuid>0b8f6f43-1111-2222-3333-444455556666</uuid></domain>")
    fields = [["PCINUMA_DOMAIN", "vm"], ["PCINUMA_UUID", "0b8f6f43-1111-2222-3333-444455556666"]]
    counters = {"settle_ms": 250, "pending": 0, "events": 3, "conflicts": 0, "undone": 0,
                "windows": 1, "window_us_sum": 812, "window_us_max": 812}
    valid = [
        {"type": "plan", "id": 1, "xml": small},
        {"type": "forget", "uuid": "0b8f6f43-1111-2222-3333-444455556666"},
        {"type": "status", "connected": True, "redefinitions": 0, "failures": 0, "last_error": None},
        dict({"type": "status", "connected": False, "redefinitions": 2, "failures": 1,
              "last_error": "libvirtd closed the connection"}, **counters),
        {"type": "planned", "id": 1, "redefine": True, "xml": small, "summary": "1 device moved", "prio": 6,
         "fields": fields},
        {"type": "planned", "id": 2, "redefine": False, "xml": None, "summary": None, "prio": 7, "fields": []},
        {"type": "planned", "id": 3, "redefine": False, "error": "the answer would be 9000 bytes, over the link's "
         "limit of 2048 bytes", "summary": "cannot be redefined", "prio": 3, "fields": fields},
        {"type": "recheck"},
        {"type": "recheck", "uuid": "0b8f6f43-1111-2222-3333-444455556666"},
        {"type": "domains", "persistent": ["0b8f6f43-1111-2222-3333-444455556666"]},
        {"type": "domains", "persistent": []},
        {"type": "domain", "uuid": "0b8f6f43-1111-2222-3333-444455556666", "persistent": True},
        {"type": "plan_restart", "id": 4, "uuid": "0b8f6f43-1111-2222-3333-444455556666", "xml": small},
        {"type": "restarted", "uuid": "0b8f6f43-1111-2222-3333-444455556666", "outcome": "restarted",
         "unplanned_us": 41000, "total_us": 1250000},
        {"type": "restart", "uuid": "0b8f6f43-1111-2222-3333-444455556666", "window_ms": 5000,
         "since_us": 123456789},
    ]
    malformed = [
        {}, {"type": 5}, {"type": "reboot"},
        {"type": "plan", "id": 1}, {"type": "plan", "id": "1", "xml": small}, {"type": "plan", "id": -1, "xml": ""},
        {"type": "forget", "uuid": 7},
        {"type": "status", "connected": 1, "redefinitions": 0, "failures": 0},
        dict({"type": "status", "connected": True, "redefinitions": 0, "failures": 0}, settle_ms=250),
        {"type": "planned", "id": 1, "redefine": True, "xml": "x", "error": "e", "prio": 6, "fields": []},
        {"type": "planned", "id": 1, "redefine": False, "prio": 8, "fields": []},
        {"type": "planned", "id": 1, "redefine": False, "prio": 6, "fields": [["K"]]},
        {"type": "recheck", "uuid": None}, {"type": "recheck", "uuid": []},
        {"type": "domains", "persistent": [1]}, {"type": "domain", "uuid": "u", "persistent": "yes"},
        {"type": "plan_restart", "id": 1, "uuid": "u"},
        {"type": "restarted", "uuid": "u", "outcome": "done", "unplanned_us": 0, "total_us": 0},
        {"type": "restart", "uuid": "u", "window_ms": -1, "since_us": 0},
    ]
    for o in valid + malformed:
        put(outdir, "wproto", frame(o))            # a raw stream of one frame
        put(outdir, "wproto", json.dumps(o))       # the JSON alone (framed by the target)
    put(outdir, "wproto", b"".join(frame(o) for o in valid))
    put(outdir, "wproto", frame(valid[0]) + frame(valid[4])[:9])
    put(outdir, "wproto", frame(b'{"type": "forget", "uuid": "a\\u0000b"}'))
    put(outdir, "wproto", frame(b"[1]"))


# ---- sysfs ------------------------------------------------------------------

# What hostmap-sysfs.c reads: the attributes of a PCI device, of a NUMA
# node and of a CPU, and the links.
DEVICE_FILES = ("uevent", "class", "vendor", "device", "numa_node", "resource")
DEVICE_LINKS = ("driver", "iommu_group", "physfn")


def sysfs_records(root, max_devices=48):
    recs = []

    def add_file(rel):
        p = os.path.join(root, rel)
        if os.path.isfile(p) and not os.path.islink(p):
            with open(p, "rb") as f:
                data = f.read(4096)
            # Only the first six lines of 'resource' matter.
            if rel.endswith("/resource"):
                data = b"".join(data.splitlines(True)[:7])
            recs.append(b"f" + rel.encode() + b"\n" + data.replace(b"\0", b""))

    def add_link(rel):
        p = os.path.join(root, rel)
        if os.path.islink(p):
            recs.append(b"l" + rel.encode() + b"\n" + os.readlink(p).encode())

    devs = os.path.join(root, "bus", "pci", "devices")
    if os.path.isdir(devs):
        for name in sorted(os.listdir(devs))[:max_devices]:
            rel = "bus/pci/devices/" + name
            add_link(rel)
            if os.path.islink(os.path.join(root, rel)):
                target = os.path.normpath(os.path.join("bus/pci/devices", os.readlink(os.path.join(root, rel))))
            else:
                target = rel
            for a in DEVICE_FILES:
                add_file(target + "/" + a)
            for a in DEVICE_LINKS:
                add_link(target + "/" + a)
    mdevs = os.path.join(root, "bus", "mdev", "devices")
    if os.path.isdir(mdevs):
        for name in sorted(os.listdir(mdevs)):
            rel = "bus/mdev/devices/" + name
            add_link(rel)
            target = os.path.normpath(os.path.join("bus/mdev/devices", os.readlink(os.path.join(root, rel))))
            add_link(target + "/mdev_type")
    nodes = os.path.join(root, "devices", "system", "node")
    if os.path.isdir(nodes):
        for name in sorted(os.listdir(nodes)):
            if re.fullmatch(r"node\d+", name):
                add_file("devices/system/node/%s/cpulist" % name)
                add_file("devices/system/node/%s/distance" % name)
    cpus = os.path.join(root, "devices", "system", "cpu")
    if os.path.isdir(cpus):
        for name in sorted(os.listdir(cpus), key=lambda n: (len(n), n)):
            if re.fullmatch(r"cpu\d+", name):
                rel = "devices/system/cpu/%s/topology/physical_package_id" % name
                if os.path.isfile(os.path.join(root, rel)):
                    add_file(rel)
                else:
                    recs.append(b"d" + ("devices/system/cpu/" + name).encode())
    return b"\0".join(recs) + b"\0"


def sysfs_seeds(outdir, trees):
    with tempfile.TemporaryDirectory() as tmp:
        hosts = os.path.join(TOP, "tests", "fixtures", "hosts")
        for h in sorted(os.listdir(hosts)):
            if not h.endswith(".json"):
                continue
            root = os.path.join(tmp, h[:-5])
            subprocess.run([sys.executable, os.path.join(TOP, "tests", "fixtures", "mkfakesysfs.py"),
                            os.path.join(hosts, h), root], check=True, stdout=subprocess.DEVNULL)
            for n in (4, 48):
                put(outdir, "sysfs", sysfs_records(root, n))
    for t in trees:
        for n in (4, 48):
            put(outdir, "sysfs", sysfs_records(t, n))
    # Attribute texts on their own, for the helpers.
    for text in ["0-3,8,10-11", "0-63", "", "0,^1", "0-3, 8", "1-0", "65535", "0x10de", "-1", "0000:3b:00.0",
                 "10000:00:1f.7", "3b:00.0", "10 21 21 10", "0x0000000000001000 0x0000000000001fff 0x0000000000040101"]:
        put(outdir, "sysfs", b"fdevices/system/node/node0/cpulist\n" + text.encode() + b"\0")


# ---- revert -----------------------------------------------------------------

QEMU_CAPS = ('  <qemu:capabilities>\n    <qemu:add capability="blockdev"/>\n    <qemu:del capability="usb-redir"/>\n'
             '  </qemu:capabilities>\n')
QEMU_OVERRIDE = ('  <qemu:override>\n    <qemu:device alias="ua-gpu">\n      <qemu:frontend>\n'
                 '        <qemu:property name="x-pcie-lnksta-dllla" type="bool" value="false"/>\n'
                 '      </qemu:frontend>\n    </qemu:device>\n  </qemu:override>\n')
FORGED_REMOVED = [
    '&lt;disk type="file" device="disk"&gt;&lt;source file="/etc/shadow"/&gt;&lt;target dev="vdz"/&gt;&lt;/disk&gt;',
    '&lt;hostdev mode="subsystem" type="pci"&gt;&lt;source&gt;&lt;address bus="0x99"/&gt;&lt;/source&gt;&lt;/hostdev&gt;',
    '&lt;controller type="usb" index="1"/&gt;',
    '&lt;controller type="pci" index="1" model="pcie-root-port"/&gt;&lt;disk/&gt;',
    '&lt;controller type="pci" index="9" model="pcie-root-port"/&gt;',
    '&lt;controller type="pci" model="pcie-root-port"&gt;&lt;qemu:x xmlns:qemu="urn:x"/&gt;&lt;/controller&gt;',
    'text', '', '&lt;controller',
]


def planned_golden_outputs():
    """The golden cases' expected.xml that carry a mark, in case order."""
    golden = os.path.join(TOP, "tests", "golden")
    for case in sorted(os.listdir(golden)):
        p = os.path.join(golden, case, "expected.xml")
        if not os.path.isfile(p):
            continue
        with open(p, encoding="utf-8") as f:
            x = f.read()
        if "urn:pcinuma:topology:1" in x:
            yield x


def revert_seeds(outdir):
    """Domains with real marks (the golden outputs), edited as a user would
    edit them after planning, and forged marks."""
    for x in planned_golden_outputs():
        put(outdir, "revert", x)
        # qemu elements of the user's, after the plan (the mmio64 cases
        # carry pcinuma's own <qemu:commandline>)
        if 'xmlns:qemu=' not in x:
            xq = x.replace("<domain ", '<domain xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0" ', 1)
        else:
            xq = x
        put(outdir, "revert", xq.replace("</domain>", QEMU_CAPS + "</domain>"))
        put(outdir, "revert", xq.replace("</domain>", QEMU_OVERRIDE + "</domain>"))
        if "<qemu:commandline>" in x:
            put(outdir, "revert", x.replace("<qemu:commandline>\n", '<qemu:commandline>\n    <qemu:arg value="-S"/>\n', 1))
        # a NIC on the first root port pcinuma added
        m = re.search(r'<pcinuma:device [^>]*controller="(\d+)"', x)
        if m:
            nic = ('    <interface type="network">\n      <mac address="52:54:00:12:34:56"/>\n'
                   '      <source network="default"/>\n'
                   f'      <address type="pci" domain="0x0000" bus="0x{int(m.group(1)):02x}" slot="0x00" function="0x0"/>\n'
                   '    </interface>\n')
            put(outdir, "revert", x.replace("  </devices>", nic + "  </devices>", 1))
        # edited mark attributes, quotes and special characters
        put(outdir, "revert", x.replace('policy="', 'policy="it\'s &amp; &lt;x&gt; ', 1))
        put(outdir, "revert", re.sub(r'original-address="[^"]*"', 'original-address="type=pci bus=0x00 slot=0x1f x=%27&amp;"', x, count=1))
        put(outdir, "revert", x.replace('</pcinuma:topology>', '<pcinuma:disk/></pcinuma:topology>', 1))
        put(outdir, "revert", x.replace('  </metadata>', x[x.index('    <pcinuma:topology'):x.index('</pcinuma:topology>') + 19] + '\n  </metadata>', 1))
        if "<pcinuma:removed " in x:
            for body in FORGED_REMOVED:
                put(outdir, "revert", re.sub(r'(<pcinuma:removed [^>]*>).*?(</pcinuma:removed>)',
                                             lambda mm: mm.group(1) + body + mm.group(2), x, count=1, flags=re.S))


# ---- migrate ----------------------------------------------------------------

# Readings two XML parsers could disagree on (issue 24): each goes into a
# marked domain's first hostdev.
DIFFERENTIALS = [
    ("<source>", '<x:source xmlns:x="urn:x"><address domain="0x0000" bus="0x10" slot="0x00" function="0x0"/></x:source>'),
    ("<source>", '<x:source xmlns:x="urn:pcinuma:topology:1"><address bus="0x99"/></x:source>'),
    ("<source>", '<driver name="vfio"/>'),
    ("<source>", '<source><address domain="0x0000" bus="0x10" slot="0x00" function="0x0"/></source>'),
]


def migrate_seeds(outdir):
    """Planned domains (the golden outputs, which carry marks), and the
    same with parser differentials in a hostdev, the mark's records
    reversed, a record twice, a record of a device the domain lacks, and
    the mark's other answers (migratable="no", an old fingerprint
    version)."""
    for x in planned_golden_outputs():
        put(outdir, "migrate", x)
        put(outdir, "migrate", x.replace('migratable="no"', 'migratable="yes"'))
        put(outdir, "migrate", x.replace('fingerprint-version="2"', 'fingerprint-version="1"'))
        h = x.find("<hostdev ")
        if h >= 0:
            for before, text in DIFFERENTIALS:
                at = x.find(before, h)
                if at >= 0:
                    put(outdir, "migrate", x[:at] + text + x[at:])
            a = x.find("<address ", x.find("<source>", h))
            if a >= 0:
                put(outdir, "migrate", x[:a] + '<x:address xmlns:x="urn:x" domain="0x0000" bus="0x77" slot="0x00" '
                    'function="0x0"/>' + x[a:])
        recs = re.findall(r' *<pcinuma:device [^>]*/>\n', x)
        if len(recs) > 1:
            start = x.index(recs[0])
            end = x.index(recs[-1]) + len(recs[-1])
            put(outdir, "migrate", x[:start] + "".join(reversed(recs)) + x[end:])
        if recs:
            put(outdir, "migrate", x.replace(recs[0], recs[0] + recs[0], 1))
            put(outdir, "migrate", x.replace(recs[0], recs[0] + re.sub(r'host="[^"]*"', 'host="0000:ee:1f.7"', recs[0]), 1))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    domain_seeds(out)
    policy_seeds(out)
    protocol_seeds(out)
    wproto_seeds(out)
    sysfs_seeds(out, sys.argv[2:])
    revert_seeds(out)
    migrate_seeds(out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The bad-input catalog (issue 8): pcinumad runs as root and libvirt runs
it on every VM start; whatever it is fed, it must not crash, leak, hang or
change anything.

    test_badinput.py --pcinumad P --pcinumactl P --hook P --mkfakesysfs P
                     --hosts DIR --golden DIR --workdir DIR [--only S] [--keep]

Each case is one kind of bad input, fed through the real surfaces:

* domain XML: `pcinumactl plan` (exit 2 and a message naming the problem),
  `pcinumactl define` (the same, nothing defined), the orchestrator
  adapters (pcinuma-vdsm-hook: exit 2, the same message, $_hook_domxml
  untouched; pcinuma-kubevirt-hook with the XML in --domain, where argv can
  carry it: exit 2, the same message, nothing on stdout), the hook (`prepare begin` with the XML on stdin: exit 1, "refusing to
  start domain ...", the same message) and the raw protocol (a hook
  request: verdict refuse, the message in its stderr);
* policy files: `pcinumactl check-policy` (exit 1, the file and the key or
  line named) and a SIGHUP reload of a running daemon with the file
  (status policy.last_error names it; the last good policy stays);
* protocol frames: bad lengths, versions, JSON (an error answer naming it,
  a PROTOCOL_ERROR log line);
* sysfs: fixture trees with garbage or unreadable files, a dangling device
  link, a device removed while the daemon rescans in a loop (SIGHUP), the
  whole tree gone.

After EVERY case the shared daemon must still be alive and serving: a
status request answers, a good (planned) prepare is allowed, and nothing
changed (the host map's device and node counts and, except after a
reload, its generation; the policy's default and load time).  At the end
each daemon must exit 0 on SIGTERM (under ASan or valgrind, a leak makes
that fail).

Guest NUMA cell ids: libvirt accepts any permutation of 0..n-1 (it sorts
them), and so does pcinuma; the bad ones are gaps and duplicates.  The
catalog checks both (a permutation is planned, not refused).

Output: "ok N - ..." / "not ok N - ..." with "#" diagnostics, then
"N passed, M failed".  Exit 0, 1 on any failure, 77 when a binary is
missing.  Python 3 standard library only; it uses the shared daemon
helpers (tests/lib/pcinumatest/daemon.py)."""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from pcinumatest import daemon as td
from pcinumatest.daemon import Failure, check, eq, contains


SKIP = 77
ARGS = None
MiB = 1 << 20


# ---- results -----------------------------------------------------------------

R = td.Results(reap=False)


# ---- domain XML ----------------------------------------------------------------

def hostdev(bdf=None, address=None):
    if address is None:
        dom, bus, rest = bdf.split(":")
        slot, fn = rest.split(".")
        address = ("<address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>"
                   % (dom, bus, slot, fn))
    return ("    <hostdev mode='subsystem' type='pci' managed='yes'>\n"
            "      <source>%s</source>\n"
            "    </hostdev>\n" % address)


def domain(name="bad-vm", cells=(0, 1), memnodes=((0, "0"), (1, "1")), devices=None,
           controllers="", extra_top="", metadata="", numatune_memory=None):
    """A q35/ACPI domain with guest cells `cells` and PCI hostdevs (host
    BDFs on sample-4n; default 13:00.0 on node 0 and 33:00.0 on node 1)."""
    if devices is None:
        devices = hostdev("0000:13:00.0") + hostdev("0000:33:00.0")
    cell_xml = "".join("      <cell id='%d' cpus='%d' memory='128' unit='MiB'/>\n" % (c, i)
                       for i, c in enumerate(cells))
    nt = "".join("    <memnode cellid='%d' mode='strict' nodeset='%s'/>\n" % m for m in memnodes)
    if numatune_memory is not None:
        nt = "    <memory mode='strict' nodeset='%s'/>\n" % numatune_memory + nt
    return ("<domain type='qemu'>\n"
            "  <name>%s</name>\n"
            "  <uuid>0e5c0a59-1111-4222-8333-444455556666</uuid>\n"
            "%s"
            "  <memory unit='MiB'>256</memory>\n"
            "  <vcpu placement='static'>%d</vcpu>\n"
            "  <os><type arch='x86_64' machine='q35'>hvm</type></os>\n"
            "  <features><acpi/></features>\n"
            "  <cpu mode='custom' match='exact'>\n"
            "    <numa>\n%s    </numa>\n"
            "  </cpu>\n"
            "%s"
            "%s"
            "  <devices>\n"
            "    <controller type='pci' index='0' model='pcie-root'/>\n"
            "%s%s"
            "  </devices>\n"
            "</domain>\n" % (name, metadata, len(cells), cell_xml,
                             ("  <numatune>\n%s  </numatune>\n" % nt) if nt else "", extra_top,
                             controllers, devices))


def billion_laughs():
    ents = ["<!ENTITY lol0 'lol'>"]
    for i in range(1, 10):
        ents.append("<!ENTITY lol%d '%s'>" % (i, ("&lol%d;" % (i - 1)) * 10))
    return ("<?xml version='1.0'?>\n<!DOCTYPE domain [\n %s\n]>\n" % "\n ".join(ents)) + \
        domain().replace("<name>bad-vm</name>", "<name>&lol9;</name>")


def deep(depth):
    return domain(metadata="  <metadata>%s%s</metadata>\n" % ("<a>" * depth, "</a>" * depth))


BAD_XML = [
    # (label, bytes or text, what the message must say)
    ("malformed XML (an unclosed element)",
     domain().replace("</devices>", ""), "malformed domain XML"),
    ("truncated XML (cut in the middle of a hostdev)",
     domain()[:domain().index("function=") + 5], "malformed domain XML"),
    ("empty document with a hostdev marker only",
     "<hostdev", "malformed domain XML"),
    ("a DTD (internal subset, no entities)",
     "<!DOCTYPE domain>\n" + domain(), "DTD or entity declaration"),
    ("billion laughs (nested entity expansion)",
     billion_laughs(), "DTD or entity declaration"),
    ("external entity (XXE, file:///etc/shadow)",
     "<!DOCTYPE domain [<!ENTITY x SYSTEM 'file:///etc/shadow'>]>\n"
     + domain().replace("<name>bad-vm</name>", "<name>&x;</name>"), "DTD or entity declaration"),
    ("external parameter entity fetched over the network",
     "<!DOCTYPE domain [<!ENTITY % p SYSTEM 'http://192.0.2.1/x.dtd'> %p;]>\n" + domain(),
     "DTD or entity declaration"),
    ("undeclared entity reference",
     domain().replace("<name>bad-vm</name>", "<name>&undeclared;</name>"), "malformed domain XML"),
    ("deeply nested XML (100000 levels: beyond the tag limit, refused before parsing)",
     deep(100000), "more than 16384 tags"),
    ("deeply nested XML (300 levels: libxml2's depth limit)",
     deep(300), "malformed domain XML"),
    ("20000 empty elements (beyond the tag limit, 4 MiB or not)",
     domain(metadata="  <metadata><x:a xmlns:x='urn:x'>%s</x:a></metadata>\n" % ("<x:b/>" * 20000)),
     "more than 16384 tags"),
    ("non-UTF-8 bytes in a UTF-8 document",
     domain().encode().replace(b"<name>bad-vm</name>", b"<name>bad-\xff\xfe-vm</name>"), "UTF-8"),
    ("UTF-16 document with a DTD (NUL bytes)",
     ("<?xml version='1.0' encoding='UTF-16'?>\n<!DOCTYPE domain [<!ENTITY a 'b'>]>\n"
      + domain()).encode("utf-16"), "NUL byte"),     # the hook: fast path, see xml_case
    ("a NUL byte inside the XML",
     domain().encode().replace(b"<name>bad-vm", b"<name>bad\x00vm"), "NUL byte"),
    ("root element is not <domain>",
     domain().replace("<domain type='qemu'>", "<network>").replace("</domain>", "</network>"),
     "not a libvirt <domain>"),
    ("hostdev with a bogus source address (bus='0xzz')",
     domain(devices=hostdev(address="<address domain='0x0000' bus='0xzz' slot='0x00' function='0x0'/>")),
     "bad source PCI address"),
    ("hostdev with an out-of-range source address (slot='0x40')",
     domain(devices=hostdev(address="<address domain='0x0000' bus='0x13' slot='0x40' function='0x0'/>")),
     "bad source PCI address"),
    ("hostdev with no source address",
     domain(devices="    <hostdev mode='subsystem' type='pci' managed='yes'><source/></hostdev>\n"),
     "has no <source><address>"),
    ("hostdev with a bogus guest address",
     domain(devices="    <hostdev mode='subsystem' type='pci' managed='yes'><source>"
                    "<address domain='0x0000' bus='0x13' slot='0x00' function='0x0'/></source>"
                    "<address type='pci' domain='0x0000' bus='banana' slot='0x00' function='0x0'/>"
                    "</hostdev>\n"),
     "bad guest PCI address"),
    ("the same host device assigned twice",
     domain(devices=hostdev("0000:13:00.0") + hostdev("0000:13:00.0")), "is assigned twice"),
    ("mdev hostdev without a UUID",
     domain(devices="    <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source/></hostdev>\n"),
     "mdev <hostdev> has no <source><address uuid"),
    ("two PCI controllers with one index",
     domain(controllers="    <controller type='pci' index='1' model='pcie-root-port'/>\n"
                        "    <controller type='pci' index='1' model='pcie-root-port'/>\n"),
     "two PCI controllers have index 1"),
    ("PCI controller with a bogus index",
     domain(controllers="    <controller type='pci' index='-3' model='pcie-root-port'/>\n"),
     "bad index"),
    ("guest cell ids with a gap (0, 2)",
     domain(cells=(0, 2), memnodes=((0, "0"), (2, "1"))), "cell 1 is missing"),
    ("guest cell id duplicated (0, 0)",
     domain(cells=(0, 0), memnodes=((0, "0"),)), "appears twice"),
    ("guest cell with a garbage cpus list",
     domain().replace("cpus='1'", "cpus='1-zz'"), "not a CPU list"),
    ("memnode nodeset naming a host node that does not exist (9)",
     domain(memnodes=((0, "0"), (1, "9"))), "names host node 9, which does not exist"),
    ("numatune memory nodeset naming a host node that does not exist (7)",
     domain(memnodes=(), numatune_memory="7"), "names a host node that does not exist"),
    ("memnode for a guest cell that does not exist",
     domain(memnodes=((0, "0"), (1, "1"), (5, "2"))), "names a guest cell that does not exist"),
    ("memnode cellid appearing twice",
     domain(memnodes=((0, "0"), (0, "1"))), "appears twice"),
]


# ---- the shared daemon and its invariants --------------------------------------------

class Shared:
    d = None
    base = None
    good = None


def snapshot(d):
    st = d.status()
    return {"devices": st["hostmap"]["devices"], "nodes": st["hostmap"]["nodes"],
            "mdevs": st["hostmap"]["mdevs"], "generation": st["hostmap"]["generation"],
            "default": st["policy"]["default"], "policy_loaded": st["policy"]["loaded_at_usec"],
            "from_file": st["policy"]["from_file"]}


def invariants(d, base, good, reloaded=False, what="", policy_reloaded=None):
    """d is alive, answers status, allows a good prepare, and its host map
    and policy are as in base.  A reload (SIGHUP) bumps the host map's
    generation; one with a good policy file also the policy's load time
    (policy_reloaded, by default as reloaded; a bad file leaves it)."""
    if policy_reloaded is None:
        policy_reloaded = reloaded
    rc = d.poll()
    check(rc is None, "%spcinumad died (exit %r); log tail:\n%s"
          % (what, rc, "\n".join(d.log_text().splitlines()[-30:])))
    now = snapshot(d)
    for k in base:
        if (k == "generation" and reloaded) or (k == "policy_loaded" and policy_reloaded):
            continue
        eq(now[k], base[k], "%s%s after the bad input" % (what, k))
    r = td.run_hook("gpu-vm-1", "prepare", "begin", good, d.sock)
    eq((r.rc, r.out, r.err), (0, "", ""), "%sa good prepare after the bad input: %r" % (what, r))


def plan(xml_bytes, sysfs=None, extra=()):
    path = os.path.join(td.WORK, "case.xml")
    with open(path, "wb") as f:
        f.write(xml_bytes)
    return subprocess.run([ARGS.pcinumactl, "plan", "--sysfs-root", sysfs or td.FIXTURE,
                           "--policy", "require"] + list(extra) + [path],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)


def xml_case(label, data, want):
    def run():
        d = Shared.d
        b = data.encode() if isinstance(data, str) else data
        t0 = time.monotonic()
        # 1. pcinumactl plan
        p = plan(b)
        err = p.stderr.decode("utf-8", "replace")
        eq(p.returncode, 2, "pcinumactl plan exit (stderr %r)" % td.shorten(err, 400))
        contains(err, want, "pcinumactl plan stderr")
        eq(p.stdout, b"", "pcinumactl plan stdout")
        adapter_checks(b, want)
        # 2. the hook, as libvirt runs it
        m = d.mark()
        r = td.run_hook("bad-vm", "prepare", "begin", b, d.sock)
        if b.startswith(b"\xff\xfe") or b.startswith(b"\xfe\xff"):
            # UTF-16: none of the hook's fast-path markers ("<hostdev", ...)
            # appears as bytes, so it exits 0 without asking, as for any
            # XML without devices.  libvirt only ever passes UTF-8 (it
            # formats the XML itself), so this is by design; the daemon
            # and the planner refuse it (steps 1 and 3).
            eq((r.rc, r.out, r.err), (0, "", ""), "hook fast path with UTF-16: %r" % r)
            eq(d.decisions(m), [], "decisions for the UTF-16 XML (the hook never asked)")
            b = b.decode("utf-16").encode("utf-8").replace(b"encoding='UTF-16'", b"encoding='UTF-8'")
            b = b.replace(b"<name>bad-vm", b"<name>bad\x00vm")   # keep a NUL for step 3
        else:
            xml_hook_checks(d, m, r, want)
        # 3. the raw protocol: the XML as a JSON string
        try:
            x = b.decode("utf-8")
        except UnicodeDecodeError:
            x = None
        if x is not None:
            resp = d.call({"version": 1, "type": "hook", "argv": ["bad-vm", "prepare", "begin", "-"], "xml": x})
            eq((resp.get("exit"), resp.get("verdict")), (1, "refuse"),
               "raw hook answer %r" % td.shorten(json.dumps(resp), 400))
            contains(resp.get("stderr") or "", want, "raw hook answer's stderr")
        else:
            # invalid UTF-8 cannot be a JSON string: the frame is refused
            payload = b'{"version": 1, "type": "hook", "argv": ["bad-vm", "prepare", "begin", "-"], "xml": "' + \
                b.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"}'
            with td.connect(d.sock, 10) as s:
                s.sendall(td.encode(payload))
                resp = td.recv_frame(s)
            contains((resp or {}).get("error", ""), "invalid utf-8", "raw frame with invalid UTF-8")
        check(time.monotonic() - t0 < 20, "the case took %.1f s" % (time.monotonic() - t0))
        invariants(d, Shared.base, Shared.good)
    return run


def adapter_checks(b, want):
    """pcinumactl define and the orchestrator adapters on the same bad XML:
    exit 2, the message, nothing defined, printed or rewritten.  define
    would talk to libvirt's in-process test driver, which a bad input must
    never reach."""
    path = os.path.join(td.WORK, "case.xml")
    common = ["--sysfs-root", td.FIXTURE, "--policy", "require"]
    p = subprocess.run([ARGS.pcinumactl, "define", "--connect", "test:///default"] + common + [path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    eq(p.returncode, 2, "pcinumactl define exit (stderr %r)" % td.shorten(err, 400))
    contains(err, want, "pcinumactl define stderr")
    eq(p.stdout, b"", "pcinumactl define stdout")
    env = dict(os.environ, _hook_domxml=path)
    p = subprocess.run([ARGS.vdsm_hook, "--hook", "before_vm_start"] + common, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    eq(p.returncode, 2, "pcinuma-vdsm-hook exit (stderr %r)" % td.shorten(err, 400))
    contains(err, want, "pcinuma-vdsm-hook stderr")
    with open(path, "rb") as f:
        eq(f.read() == b, True, "pcinuma-vdsm-hook left $_hook_domxml as it was")
    # KubeVirt passes the XML as one argument: no NUL, at most
    # MAX_ARG_STRLEN (128 KiB) on Linux.
    if b"\0" not in b and len(b) < 100 * 1024:
        p = subprocess.run([ARGS.kubevirt_hook, "--vmi", "{}", "--domain", b] + common,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           env=dict(os.environ, PCINUMA_KUBEVIRT_STATE_DIR=os.path.join(td.WORK, "kv-state")))
        err = p.stderr.decode("utf-8", "replace")
        eq(p.returncode, 2, "pcinuma-kubevirt-hook exit (stderr %r)" % td.shorten(err, 400))
        contains(err, want, "pcinuma-kubevirt-hook stderr")
        eq(p.stdout, b"", "pcinuma-kubevirt-hook stdout")


def xml_hook_checks(d, m, r, want):
    eq(r.rc, 1, "hook prepare exit: %r" % r)
    if True:
        contains(r.err, "refusing to start domain bad-vm", "hook stderr")
        contains(r.err, want, "hook stderr")
        eq(r.out, "", "hook stdout")
        check("check skipped" not in r.err, "the hook did not reach the daemon: %r" % r)
        dec = d.decisions(m)
        eq([e.get("PCINUMA_VERDICT") for e in dec], ["refuse"], "logged verdicts")


def t_permuted_cells():
    """Not bad: libvirt accepts cell ids in any order (a permutation of
    0..n-1), and so does the planner.  The control for the gap/duplicate
    cases."""
    x = domain(cells=(1, 0), memnodes=((0, "0"), (1, "1")))
    p = plan(x.encode())
    eq(p.returncode, 0, "pcinumactl plan of permuted cell ids (stderr %r)" % p.stderr)
    contains(p.stdout.decode(), "pcie-expander-bus", "planned XML")
    invariants(Shared.d, Shared.base, Shared.good)


def t_huge_xml():
    """64 MiB of XML: the planner refuses over 4 MiB; the hook refuses it
    without asking (and drains stdin so libvirt's write does not fail);
    the protocol refuses a frame over its 16 MiB limit before reading it."""
    d = Shared.d
    pad = b"<!-- " + b"x" * (64 * MiB) + b" -->\n"
    big = domain().encode().replace(b"</domain>", pad + b"</domain>")
    p = plan(big)
    eq(p.returncode, 2, "pcinumactl plan of 64 MiB: exit (stderr %r)" % p.stderr[:300])
    contains(p.stderr.decode(), "4194304 byte limit", "pcinumactl plan stderr")
    t0 = time.monotonic()
    r = td.run_hook("bad-vm", "prepare", "begin", big, d.sock)
    eq(r.rc, 1, "hook with 64 MiB: %r" % r)
    contains(r.err, "larger than 4 MiB", "hook stderr")
    check(time.monotonic() - t0 < 10, "hook with 64 MiB took %.1f s" % (time.monotonic() - t0))
    # raw: header announcing 64 MiB, then as much as the daemon takes
    with td.connect(d.sock, 10) as s:
        s.sendall(struct.pack(">I", len(big)))
        try:
            s.sendall(big[:MiB])
        except (BrokenPipeError, ConnectionResetError):
            pass
        resp = td.recv_frame(s)
    check(isinstance(resp, dict), "raw 64 MiB frame: answer %r" % (resp,))
    contains(resp.get("error", ""), "exceeds the 16777216 byte limit", "raw 64 MiB frame")
    # just under the frame limit, over the XML limit: refused by the parser
    x = domain().replace("</domain>", "<!-- %s -->\n</domain>" % ("y" * (5 * MiB)))
    resp = d.call({"version": 1, "type": "hook", "argv": ["bad-vm", "prepare", "begin", "-"], "xml": x})
    eq((resp.get("exit"), resp.get("verdict")), (1, "refuse"), "raw 5 MiB XML")
    contains(resp.get("stderr") or "", "byte limit", "raw 5 MiB XML stderr")
    invariants(d, Shared.base, Shared.good)


def t_hook_bad_argv():
    """The hook called with too few arguments (not as libvirt calls it):
    a usage error on stderr, never a crash."""
    r = subprocess.run([ARGS.hook], input=b"", stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    check(r.returncode in (0, 1, 2), "hook without arguments: exit %d" % r.returncode)
    check(r.returncode >= 0, "hook without arguments died of signal %d" % -r.returncode)
    invariants(Shared.d, Shared.base, Shared.good)


# ---- protocol frames ------------------------------------------------------------------

FRAMES = [
    ("frame length 0", struct.pack(">I", 0), "frame length 0"),
    ("frame length 2 GiB", struct.pack(">I", 0x7fffffff), "exceeds the"),
    ("frame length 4 GiB - 1", struct.pack(">I", 0xffffffff), "exceeds the"),
    ("frame shorter than its length, then EOF", td.encode({"version": 1, "type": "status"})[:9], None),
    ("protocol version 2", td.encode({"version": 2, "type": "status"}), "unsupported protocol version 2"),
    ("protocol version -1", td.encode({"version": -1, "type": "status"}), "unsupported protocol version -1"),
    ("protocol version as a float", td.encode(b'{"version": 1.5, "type": "status"}'), "'version' must be an integer"),
    ("payload not JSON", td.encode(b"GET / HTTP/1.0\r\n\r\n"), "payload is not JSON"),
    ("payload invalid UTF-8 in a JSON string", td.encode(b'{"version": 1, "type": "st\xff\xfeatus"}'), None),
    ("payload JSON with trailing garbage", td.encode(b'{"version": 1, "type": "status"} xx'), "trailing bytes"),
    ("payload a JSON number", td.encode(b"42"), "not a JSON object"),
    ("deeply nested JSON (100000 arrays)", td.encode(b"[" * 100000 + b"]" * 100000), None),
    ("hook request with argv of 5", td.encode({"version": 1, "type": "hook", "argv": ["a", "b", "c", "d", "e"]}),
     "'argv' must be an array of 1 to 4 strings"),
    ("unknown request type", td.encode({"version": 1, "type": "shutdown"}), "unknown request type 'shutdown'"),
]


def frame_case(label, data, want):
    def run():
        d = Shared.d
        m = d.mark()
        err0 = d.status()["requests"]["errors"]
        with td.connect(d.sock, 5) as s:
            s.sendall(data)
            if want is None and label.startswith("frame shorter"):
                s.shutdown(socket.SHUT_WR)
            resp = td.recv_frame(s)
        if label.startswith("frame shorter"):
            eq(resp, None, "an answer to a truncated frame")
            ev = d.wait_event(lambda e: e.mid == td.MID["PROTOCOL_ERROR"] and "truncated" in e.message, m,
                              what="a PROTOCOL_ERROR naming the truncated frame")
        else:
            check(isinstance(resp, dict) and resp.get("error"), "expected an error answer, got %r" % (resp,))
            eq(resp.get("version"), 1, "answer version")
            if want:
                contains(resp["error"], want, "error answer")
            ev = d.wait_event(lambda e: e.mid == td.MID["PROTOCOL_ERROR"], m, what="a PROTOCOL_ERROR log line")
            if want:
                contains(ev.message, want, "PROTOCOL_ERROR message")
            print("# answer: %s" % resp["error"][:200])
        # status counts the error (the status request itself is not an error)
        deadline = time.monotonic() + 5
        while d.status()["requests"]["errors"] != err0 + 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        eq(d.status()["requests"]["errors"], err0 + 1, "status requests.errors")
        invariants(d, Shared.base, Shared.good)
    return run


# ---- policy files -----------------------------------------------------------------------

BAD_POLICIES = [
    ("policy: wrong type (default.policy is a number)", b'{"default": {"policy": 5}}\n', ["default.policy"]),
    ("policy: wrong type (rules is an object)", b'{"rules": {"match": {"name": "x"}}}\n', ["rules"]),
    ("policy: wrong type (hook.timeout_ms is a string)", b'{"hook": {"timeout_ms": "fast"}}\n', ["hook.timeout_ms"]),
    ("policy: hook.timeout_ms out of range (0)", b'{"hook": {"timeout_ms": 0}}\n', ["hook.timeout_ms"]),
    ("policy: unknown top-level key", b'{"default": {"policy": "require"}, "colour": "blue"}\n', ["unknown key 'colour'"]),
    ("policy: unknown key in a rule's match", b'{"rules": [{"match": {"hostname": "x"}, "policy": "off"}]}\n',
     ["hostname"]),
    ("policy: unknown policy name in default", b'{"default": {"policy": "strict"}}\n', ["unknown policy 'strict'"]),
    ("policy: unknown policy name in a rule", b'{"rules": [{"match": {"name": "gpu-*"}, "policy": "maybe"}]}\n',
     ["rules[0].policy", "unknown policy 'maybe'"]),
    ("policy: rule without match", b'{"rules": [{"policy": "off"}]}\n', ["rules[0]"]),
    ("policy: JSON syntax error", b'{\n  "default": {"policy": "require",}\n}\n', ["line 2"]),
    ("policy: empty file", b"", ["empty file"]),
    ("policy: top level is an array", b'[{"default": {"policy": "require"}}]\n', ["object"]),
    ("policy: non-UTF-8 bytes", b'{"default": {"policy": "re\xff\xfequire"}}\n', []),
    ("policy: duplicate key", b'{"default": {"policy": "require"}, "default": {"policy": "off"}}\n', ["default"]),
    ("policy: 2 MiB of whitespace", b"{" + b" " * (2 * MiB) + b"}\n", ["too large"]),
]


def policy_case(label, text, wants):
    def run():
        d = Shared.d
        path = os.path.join(td.WORK, "bad-policy.json")
        with open(path, "wb") as f:
            f.write(text)
        p = subprocess.run([ARGS.pcinumactl, "check-policy", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        out = (p.stdout + p.stderr).decode("utf-8", "replace")
        eq(p.returncode, 1, "pcinumactl check-policy exit (output %r)" % td.shorten(out, 400))
        contains(out, path, "check-policy names the file")
        for w in wants:
            contains(out, w, "check-policy output")
        # SIGHUP with it in place of the daemon's file
        good = open(d.policy_file, "rb").read()
        with open(d.policy_file + ".tmp", "wb") as f:
            f.write(text)
        os.rename(d.policy_file + ".tmp", d.policy_file)
        try:
            m = d.hup()
            ev = [e for e in d.events(m) if e.mid == td.MID["POLICY_INVALID"]]
            eq(len(ev), 1, "POLICY_INVALID log lines after the reload")
            st = d.status()
            err = st["policy"]["last_error"] or ""
            contains(err, d.policy_file, "status policy.last_error names the file")
            for w in wants:
                contains(err, w.replace(path, d.policy_file), "status policy.last_error")
            invariants(d, Shared.base, Shared.good, reloaded=True, policy_reloaded=False)
        finally:
            with open(d.policy_file + ".tmp", "wb") as f:
                f.write(good)
            os.rename(d.policy_file + ".tmp", d.policy_file)
    return run


def t_policy_is_directory():
    """The policy path is a directory: check-policy exits 2 (cannot read);
    a reload keeps the last good policy."""
    d = Shared.d
    path = os.path.join(td.WORK, "policy-dir")
    os.makedirs(path, exist_ok=True)
    p = subprocess.run([ARGS.pcinumactl, "check-policy", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    check(p.returncode in (1, 2), "check-policy of a directory: exit %d" % p.returncode)
    contains(p.stdout + p.stderr, path, "check-policy names the path")
    good = open(d.policy_file, "rb").read()
    os.rename(d.policy_file, d.policy_file + ".saved")
    os.makedirs(d.policy_file)
    try:
        d.hup()
        err = d.status()["policy"]["last_error"] or ""
        contains(err, d.policy_file, "last_error names the path")
        invariants(d, Shared.base, Shared.good, reloaded=True, policy_reloaded=False)
    finally:
        os.rmdir(d.policy_file)
        os.rename(d.policy_file + ".saved", d.policy_file)
        check(open(d.policy_file, "rb").read() == good, "policy file restored")


# ---- sysfs --------------------------------------------------------------------------------

class Host:
    """A private copy of sample-4n and a daemon on it."""
    tree = None
    d = None
    base = None
    good = None


def dev_path(bdf, name=None):
    p = os.path.join(Host.tree, "bus", "pci", "devices", bdf)
    return os.path.join(p, name) if name else p


def refresh_host_baseline():
    Host.base = snapshot(Host.d)


def restore_tree():
    shutil.rmtree(Host.tree)
    td.mkfakesysfs(os.path.join(ARGS.hosts, "sample-4n.json"), Host.tree)


def after_sysfs_case(expect_devices=None):
    """Put the tree back, rescan, and check the daemon is whole again."""
    restore_tree()
    Host.d.hup()
    st = Host.d.status()
    eq(st["hostmap"]["devices"], Host.base["devices"], "devices after restoring the tree")
    eq(st["hostmap"]["warnings"], [], "sysfs warnings after restoring the tree")
    invariants(Host.d, Host.base, Host.good, reloaded=True, what="restored tree: ")


def one_dev_domain(bdf, name="sysfs-vm"):
    return domain(name=name, devices=hostdev(bdf))


def check_sysfs_warning(m, path, what, stderr=None):
    """The rescan since mark m logged one SYSFS_UNREADABLE entry naming
    path (relative to the sysfs root) with 'what' in its message; status
    lists it; pcinumactl's stderr (when given) says it too."""
    evs = [e for e in Host.d.events(m) if e.mid == td.MID["SYSFS_UNREADABLE"] and e.get("PCINUMA_SYSFS_FILE") == path]
    check(len(evs) == 1, "one sysfs warning naming %s in the log, got %r" % (path, evs))
    contains(evs[0].message, what, "the warning for %s" % path)
    eq(evs[0].get("PCINUMA_SYSFS_ROOT"), Host.tree, "PCINUMA_SYSFS_ROOT of the warning")
    st = Host.d.status()
    check(any(w.startswith(path + ": ") and what in w for w in st["hostmap"]["warnings"]),
          "status lists the warning for %s: %r" % (path, st["hostmap"]["warnings"]))
    if stderr is not None:
        contains(stderr, "warning: sysfs %s: " % path, "pcinumactl stderr names %s" % path)


def sysfs_file_case(label, mutate, want_plan, bdf="0000:33:00.0", want_warning=None):
    """Mutate the tree, SIGHUP: the daemon rescans, stays up, and a
    prepare of a domain with the affected device gets a verdict whose
    message names the device and the problem (want_plan); pcinumactl plan
    on the same tree says the same."""
    def run():
        d = Host.d
        mutate()
        m = d.hup()
        check(d.poll() is None, "pcinumad died on the rescan")
        if want_warning is None:
            check(not [e for e in d.events(m) if e.mid == td.MID["SYSFS_UNREADABLE"]],
                  "no sysfs warning expected: %r" % d.events(m))
        x = one_dev_domain(bdf)
        r = td.run_hook("sysfs-vm", "prepare", "begin", x, d.sock)
        eq(r.rc, 1, "prepare with %s after the rescan: %r" % (bdf, r))
        check("check skipped" not in r.err, "hook did not reach the daemon: %r" % r)
        contains(r.err, bdf, "refusal names the device")
        contains(r.err, want_plan, "refusal names the problem")
        p = plan(x.encode(), sysfs=Host.tree)
        check(p.returncode in (1, 2), "pcinumactl plan on the bad tree: exit %d (%r)" % (p.returncode, p.stderr))
        contains(p.stderr.decode(), want_plan, "pcinumactl plan stderr")
        if want_warning is not None:
            check_sysfs_warning(m, "bus/pci/devices/%s/numa_node" % bdf, want_warning, p.stderr.decode())
        print("# refusal: %s" % r.err.strip().splitlines()[-1][:300])
        st = d.status()
        eq(st["hostmap"]["nodes"], 4, "host map nodes after the rescan")
        after_sysfs_case()
    return run


def write_file(path, data):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)


def make_dir(path):
    os.unlink(path)
    os.makedirs(path)


def set_uevent_key(bdf, key, value):
    """Replace KEY=... in the device's uevent with KEY=value (bytes)."""
    path = dev_path(bdf, "uevent")
    lines = open(path, "rb").read().split(b"\n")
    prefix = key.encode() + b"="
    check(any(l.startswith(prefix) for l in lines), "%s has no %s in the fixture" % (path, key))
    lines = [prefix + value if l.startswith(prefix) else l for l in lines]
    write_file(path, b"\n".join(lines))


def t_garbage_other_files():
    """Garbage in what the reader reads for class, vendor, device and
    driver: the uevent keys (PCI_CLASS, PCI_ID, DRIVER) and, for devices
    without a uevent, the class and vendor files it falls back to; garbage
    in resource, distance and cpulist; an unreadable (directory) distance.
    The rescan completes, the map keeps its devices and nodes, the daemon
    serves, and every bad file is named (a uevent with the key)."""
    d = Host.d
    node = os.path.join(Host.tree, "devices", "system", "node")
    set_uevent_key("0000:13:00.0", "PCI_CLASS", b"0xZZZZZZ")
    set_uevent_key("0000:14:00.0", "PCI_CLASS", b"\xff\xfe\x00\x01" * 10)
    set_uevent_key("0000:17:00.0", "PCI_ID", b"-1")
    set_uevent_key("0000:37:00.0", "DRIVER", b"")
    # With a good uevent, the class file is not read: garbage there is
    # not seen (on a real kernel both come from one value).
    write_file(dev_path("0000:38:00.0", "class"), b"0xZZZZZZ\n")
    # Without a uevent (as in some captures) the files are read.
    os.unlink(dev_path("0000:34:00.0", "uevent"))
    write_file(dev_path("0000:34:00.0", "class"), b"0xZZZZZZ\n")
    os.unlink(dev_path("0000:54:00.0", "uevent"))
    write_file(dev_path("0000:54:00.0", "vendor"), b"-1\n")
    write_file(dev_path("0000:18:00.0", "resource"), b"garbage\n" * 100)
    write_file(os.path.join(node, "node0", "distance"), b"10 banana 32 -7 99999999999999999999\n")
    make_dir(os.path.join(node, "node1", "distance"))
    write_file(os.path.join(node, "node2", "distance"), b"")
    write_file(os.path.join(node, "node3", "cpulist"), b"0-zz,\n")
    m = d.hup()
    check(d.poll() is None, "pcinumad died on the rescan")
    st = d.status()
    eq((st["hostmap"]["devices"], st["hostmap"]["nodes"]), (Host.base["devices"], 4), "devices, nodes after the rescan")
    p = subprocess.run([ARGS.pcinumactl, "host", "--sysfs-root", Host.tree], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    eq(p.returncode, 0, "pcinumactl host on the garbage tree (stderr %r)" % p.stderr)
    # Every bad file is named, in the log, in status and by pcinumactl.
    bad = [
        ("bus/pci/devices/0000:13:00.0/uevent", "PCI_CLASS '0xZZZZZZ' is not a PCI class code; read as unknown"),
        ("bus/pci/devices/0000:14:00.0/uevent", "PCI_CLASS '\\xff\\xfe' is not a PCI class code"),
        ("bus/pci/devices/0000:17:00.0/uevent", "PCI_ID '-1' is not a vendor:device ID pair"),
        ("bus/pci/devices/0000:37:00.0/uevent", "DRIVER '' is not a driver name"),
        ("bus/pci/devices/0000:34:00.0/class", "'0xZZZZZZ' is not a PCI class code"),
        ("bus/pci/devices/0000:54:00.0/vendor", "'-1' is not a 16-bit ID"),
        ("bus/pci/devices/0000:18:00.0/resource", "line 1 is not 'start end flags'"),
        ("devices/system/node/node0/distance", "'banana' (entry 2) is not a distance"),
        ("devices/system/node/node1/distance", "cannot read: Is a directory"),
        ("devices/system/node/node2/distance", "empty"),
        ("devices/system/node/node3/cpulist", "'0-zz,' is not a CPU list")]
    for path, what in bad:
        check_sysfs_warning(m, path, what, p.stderr)
    check("0000:38:00.0" not in p.stderr, "a warning for 0000:38:00.0, whose uevent is good: %r" % p.stderr)
    j = subprocess.run([ARGS.pcinumactl, "host", "--json", "--sysfs-root", Host.tree], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    host = json.loads(j.stdout)
    eq(len(host["warnings"]), len(bad), "pcinumactl host --json lists %d warnings" % len(bad))
    devs = {x["bdf"]: x for x in host["devices"]}
    # The fallback still reads the rest: vendor and device from their
    # files, the driver from its link; garbage leaves only its own field
    # unknown.
    eq((devs["0000:34:00.0"]["vendor"], devs["0000:34:00.0"]["driver"]), ("0x15b3", "vfio-pci"),
       "0000:34:00.0 (no uevent): vendor and driver from the files")
    eq((devs["0000:54:00.0"]["vendor"], devs["0000:54:00.0"]["class"]), ("0x0000", "0x020700"),
       "0000:54:00.0 (no uevent, garbage vendor): vendor unknown, class from its file")
    eq(devs["0000:38:00.0"]["class"], "0x020700", "0000:38:00.0: class from its uevent")
    eq(devs["0000:37:00.0"]["driver"], None, "0000:37:00.0: garbage DRIVER reads as no driver")
    after_sysfs_case()


SECRET = b"root:$6$PCINUMA-SECRET-HASH$x:19000:0:99999:7:::\n"


def run_bounded(argv, env=None, timeout=120):
    """Run argv; return (returncode, stdout, stderr).  The timeout only
    guards against a hang (a failure of its own), it is not what the
    caller checks."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise Failure("%s did not finish within %d s (hung?)" % (" ".join(argv), timeout))
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


# Runs argv as its child and prints the child's peak RSS (KiB).  Linux
# keeps a process's peak across execve(), so a child forked straight from
# this test would count the test's own RSS (over 200 MiB after the 64 MiB
# XML cases); a fresh, small interpreter in between keeps that out.
RSS_WRAPPER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(ru.ru_maxrss)
"""


def max_rss_kib(argv, env=None, timeout=120):
    """Peak RSS of one run of argv (see RSS_WRAPPER)."""
    p = subprocess.run([sys.executable, "-c", RSS_WRAPPER] + list(argv), stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, env=env, timeout=timeout, text=True)
    lines = p.stdout.split()
    check(p.returncode == 0 and lines, "measuring the RSS of %s failed: %r" % (argv, p.stdout))
    return int(lines[-1])


def rss_floor_kib():
    """The same figure for true(1): what the wrapper itself brings."""
    return max_rss_kib([shutil.which("true") or "/bin/true"])


def make_hostile_tree():
    """The review's captured tree, on the sample host: numa_node links to a
    shadow-like file outside the root (absolute and relative), FIFOs where
    numa_node, class, uevent and cpulist are read, node ids 2147483647 and
    1024 (a numa_node, a node directory), a cpulist past any CPU.  Returns
    {file (relative to the root): what its warning must say}."""
    outside = os.path.join(td.RUNTMP, "outside")
    os.makedirs(outside, exist_ok=True)
    secret = os.path.join(outside, "shadow")
    write_file(secret, SECRET)
    node = os.path.join(Host.tree, "devices", "system", "node")
    real = lambda bdf: os.path.realpath(dev_path(bdf))
    os.unlink(dev_path("0000:33:00.0", "numa_node"))
    os.symlink(secret, dev_path("0000:33:00.0", "numa_node"))
    os.unlink(dev_path("0000:13:00.0", "numa_node"))
    os.symlink(os.path.relpath(secret, real("0000:13:00.0")), dev_path("0000:13:00.0", "numa_node"))
    os.unlink(dev_path("0000:14:00.0", "numa_node"))
    os.mkfifo(dev_path("0000:14:00.0", "numa_node"))
    os.unlink(dev_path("0000:34:00.0", "uevent"))          # so class is read
    os.unlink(dev_path("0000:34:00.0", "class"))
    os.mkfifo(dev_path("0000:34:00.0", "class"))
    os.unlink(dev_path("0000:35:00.0", "uevent"))
    os.mkfifo(dev_path("0000:35:00.0", "uevent"))
    write_file(dev_path("0000:17:00.0", "numa_node"), b"2147483647\n")
    write_file(dev_path("0000:18:00.0", "numa_node"), b"1024\n")
    os.makedirs(os.path.join(node, "node2147483647"))
    write_file(os.path.join(node, "node2147483647", "cpulist"), b"200\n")     # a CPU of no other node
    os.unlink(os.path.join(node, "node3", "cpulist"))
    os.mkfifo(os.path.join(node, "node3", "cpulist"))
    write_file(os.path.join(node, "node2", "cpulist"), b"0-4294967295\n")
    return {
        "bus/pci/devices/0000:33:00.0/numa_node": "a symbolic link leads outside the sysfs root",
        "bus/pci/devices/0000:13:00.0/numa_node": "a symbolic link leads outside the sysfs root",
        "bus/pci/devices/0000:14:00.0/numa_node": "a FIFO, not a regular file",
        "bus/pci/devices/0000:34:00.0/class": "a FIFO, not a regular file",
        "bus/pci/devices/0000:35:00.0/uevent": "a FIFO, not a regular file",
        "bus/pci/devices/0000:17:00.0/numa_node": "'2147483647' is not a node number (-1 to 1023)",
        "bus/pci/devices/0000:18:00.0/numa_node": "'1024' is not a node number (-1 to 1023)",
        "devices/system/node/node2147483647": "node number above 1023; ignored",
        "devices/system/node/node3/cpulist": "a FIFO, not a regular file",
        "devices/system/node/node2/cpulist": "'0-4294967295' is not a CPU list",
    }


def t_hostile_tree():
    """A captured tree cannot reach outside itself: pcinumactl host (as
    the bug-report workflow runs it) and fingerprint, with openat2() and with the
    fallback walk, and pcinumad (a rescan of the running daemon, and a
    fresh start on the tree) finish, name every refused file in a
    warning, never show the secret's bytes, and stay small."""
    want = make_hostile_tree()
    secret_text = SECRET.decode().strip()
    outputs = {}
    for mode, extra_env in (("openat2", {}), ("walk", {"PCINUMA_SYSFS_NO_OPENAT2": "1"})):
        env = dict(os.environ, **extra_env)
        rc, out, err = run_bounded([ARGS.pcinumactl, "host", "--sysfs-root", Host.tree], env=env)
        eq(rc, 0, "pcinumactl host on the hostile tree (%s): stderr %r" % (mode, err))
        for path, what in want.items():
            check(any(l.startswith("pcinumactl host: warning: sysfs %s: " % path) and what in l
                      for l in err.splitlines()),
                  "pcinumactl host (%s) warns about %s with %r: %r" % (mode, path, what, err))
        for text in (out, err):
            check("PCINUMA-SECRET" not in text and secret_text[:8] not in text,
                  "the secret's bytes in pcinumactl's output (%s): %r" % (mode, text))
        # pcinumactl fingerprint reads the same way: the same warnings, a
        # digest, never the secret.
        rc, fp, ferr = run_bounded([ARGS.pcinumactl, "fingerprint", "--sysfs-root", Host.tree], env=env)
        eq(rc, 0, "pcinumactl fingerprint on the hostile tree (%s): stderr %r" % (mode, ferr))
        check(re.match(r"^[0-9a-f]{64}\n", fp) is not None,
              "pcinumactl fingerprint (%s): the first line is not a digest: %r" % (mode, fp[:100]))
        for path in want:
            check(("pcinumactl fingerprint: warning: sysfs %s: " % path) in ferr,
                  "pcinumactl fingerprint (%s) warns about %s: %r" % (mode, path, ferr))
        check("PCINUMA-SECRET" not in fp + ferr and secret_text[:8] not in fp + ferr,
              "the secret's bytes in pcinumactl fingerprint's output (%s)" % mode)
        rc, js, err = run_bounded([ARGS.pcinumactl, "host", "--json", "--sysfs-root", Host.tree], env=env)
        eq(rc, 0, "pcinumactl host --json (%s)" % mode)
        outputs[mode] = js
        host = json.loads(js)
        devs = {x["bdf"]: x for x in host["devices"]}
        for bdf in ("0000:33:00.0", "0000:13:00.0", "0000:14:00.0", "0000:17:00.0", "0000:18:00.0"):
            eq(devs[bdf]["sysfs_node"], -1, "%s numa_node (%s)" % (bdf, mode))
        eq([n["id"] for n in host["nodes"]], [0, 1, 2, 3], "node ids (%s)" % mode)
        eq(devs["0000:34:00.0"]["class"], "0x000000", "0000:34:00.0 class from a FIFO (%s)" % mode)
        floor = rss_floor_kib()
        peak = max_rss_kib([ARGS.pcinumactl, "host", "--sysfs-root", Host.tree], env=env)
        rss = peak - floor
        print("# pcinumactl host on the hostile tree (%s): peak RSS %d KiB, true(1) %d KiB" % (mode, peak, floor))
        check(rss < 64 * 1024, "pcinumactl host used %d KiB on the hostile tree (%s)" % (rss, mode))
        # A vCPU pinned to CPU 200, of node 2147483647 if that were read,
        # made the planner size a node set by that id: 276 MB before.
        xml = td.XML["gpu-vm-1"].replace("<vcpu placement='static'>16</vcpu>",
                                         "<vcpu placement='static'>16</vcpu>\n"
                                         "  <cputune><vcpupin vcpu='12' cpuset='200'/></cputune>")
        xml = xml.replace("<memnode cellid='3' mode='strict' nodeset='3'/>", "")
        check("cpuset='200'" in xml and "cellid='3'" not in xml, "could not pin gpu-vm-1's cell 3 to CPU 200")
        xml_path = os.path.join(td.WORK, "pinned-200.xml")
        with open(xml_path, "w") as f:
            f.write(xml)
        argv = [ARGS.pcinumactl, "plan", "--sysfs-root", Host.tree, "--policy", "preferred", xml_path]
        rc, out, err = run_bounded(argv, env=env)
        check(rc in (0, 1, 2), "pcinumactl plan on the hostile tree (%s): exit %d" % (mode, rc))
        peak = max_rss_kib(argv, env=env)
        rss = peak - floor
        print("# pcinumactl plan (a vCPU pinned to CPU 200) on the hostile tree (%s): peak RSS %d KiB, true(1) %d KiB"
              % (mode, peak, floor))
        check(rss < 64 * 1024, "pcinumactl plan used %d KiB on the hostile tree (%s)" % (rss, mode))
    eq(outputs["openat2"], outputs["walk"], "the host map under openat2() and under the walk")

    # The running daemon rescans the tree (SIGHUP): every refused file is
    # a SYSFS_UNREADABLE entry and a status warning, and it keeps serving.
    d = Host.d
    m = d.hup()
    check(d.poll() is None, "pcinumad died on the rescan")
    for path, what in want.items():
        check_sysfs_warning(m, path, what)
    st = d.status()
    eq((st["hostmap"]["devices"], st["hostmap"]["nodes"]), (Host.base["devices"], 4), "devices, nodes after the rescan")
    check("PCINUMA-SECRET" not in d.log_text(), "the secret's bytes in pcinumad's log")
    check("PCINUMA-SECRET" not in json.dumps(st), "the secret's bytes in pcinumad's status")
    r = td.run_hook("sysfs-vm", "prepare", "begin", one_dev_domain("0000:33:00.0"), d.sock)
    eq(r.rc, 1, "prepare with 0000:33:00.0 (numa_node refused): %r" % r)
    contains(r.err, "no NUMA node", "refusal")

    # A fresh pcinumad on the tree starts (its readiness wait is the guard
    # against a hang) and lists the same warnings.
    with td.Daemon("hostile", policy="require", sysfs=Host.tree) as h:
        st = h.status()
        for path, what in want.items():
            check(any(w.startswith(path + ": ") and what in w for w in st["hostmap"]["warnings"]),
                  "a fresh pcinumad lists the warning for %s: %r" % (path, st["hostmap"]["warnings"]))
        check("PCINUMA-SECRET" not in h.log_text(), "the secret's bytes in the fresh pcinumad's log")
    after_sysfs_case()


def t_dangling_link():
    """A bus/pci/devices link whose target is gone (the device vanished
    between readdir and open): skipped; the device is then 'not present'."""
    d = Host.d
    bdf = "0000:33:00.0"
    target = os.path.realpath(dev_path(bdf))
    shutil.rmtree(target)
    check(os.path.islink(dev_path(bdf)) and not os.path.exists(dev_path(bdf)), "could not make a dangling link")
    d.hup()
    st = d.status()
    eq(st["hostmap"]["devices"], Host.base["devices"] - 1, "devices after the rescan")
    r = td.run_hook("sysfs-vm", "prepare", "begin", one_dev_domain(bdf), d.sock)
    eq(r.rc, 1, "prepare with the vanished device: %r" % r)
    contains(r.err, "not present on this host", "refusal")
    contains(r.err, bdf, "refusal names the device")
    after_sysfs_case()


def t_stray_entries():
    """Entries in bus/pci/devices that are not PCI addresses, a regular
    file named like one, and a link loop: ignored."""
    d = Host.d
    devs = os.path.join(Host.tree, "bus", "pci", "devices")
    write_file(os.path.join(devs, "not-a-bdf"), b"x")
    write_file(os.path.join(devs, "0000:ee:00.0"), b"a file, not a device dir")
    os.symlink("0000:ef:00.0", os.path.join(devs, "0000:ef:00.0"))     # a self loop
    os.symlink("/dev/zero", os.path.join(devs, "0000:ed:00.0"))
    d.hup()
    st = d.status()
    check(d.poll() is None, "pcinumad died")
    eq(st["hostmap"]["devices"], Host.base["devices"], "devices with stray entries")
    after_sysfs_case()


def t_tree_gone():
    """The whole sysfs root disappears: the rescan fails with an error
    naming the root, and the last good map stays."""
    d = Host.d
    before = d.status()["hostmap"]
    saved = Host.tree + ".saved"
    os.rename(Host.tree, saved)
    try:
        m = d.mark()
        d.signal(signal.SIGHUP)
        ev = d.wait_event(lambda e: Host.tree in e.message, m, what="an error naming the missing sysfs root")
        print("# %s" % ev.message[:300])
        time.sleep(0.2)
        st = d.status()["hostmap"]
        eq((st["devices"], st["generation"]), (before["devices"], before["generation"]),
           "host map after a failed rescan (kept)")
        r = td.run_hook("gpu-vm-1", "prepare", "begin", Host.good, d.sock)
        eq((r.rc, r.err), (0, ""), "good prepare on the kept map: %r" % r)
        p = plan(one_dev_domain("0000:13:00.0").encode(), sysfs=Host.tree)
        eq(p.returncode, 2, "pcinumactl plan with a missing sysfs root (stderr %r)" % p.stderr)
        contains(p.stderr.decode(), Host.tree, "pcinumactl plan names the root")
    finally:
        os.rename(saved, Host.tree)
    d.hup()
    invariants(d, Host.base, Host.good, reloaded=True)


def t_vanish_during_rescans():
    """A thread removes and re-creates device directories (and their
    bus/pci/devices links) as fast as it can while the daemon rescans
    in a loop on SIGHUP and hook calls keep coming.  The daemon survives;
    every map it reports is between 'all removed' and 'all present', and
    once the churn stops the map is exactly the tree."""
    d = Host.d
    victims = ["0000:%02x:00.0" % b for b in (0x14, 0x18, 0x34, 0x38, 0x54, 0x58, 0x74, 0x78)]
    saved = {}
    for b in victims:
        real = os.path.realpath(dev_path(b))
        saved[b] = (real, os.readlink(dev_path(b)), real + ".keep")
        shutil.copytree(real, real + ".keep", symlinks=True)
    stop = threading.Event()
    churn = [0]

    def churner():
        while not stop.is_set():
            for b in victims:
                real, link, keep = saved[b]
                shutil.rmtree(real, ignore_errors=True)
                try:
                    os.unlink(dev_path(b))
                except FileNotFoundError:
                    pass
                shutil.copytree(keep, real, symlinks=True)
                os.symlink(link, dev_path(b))
                churn[0] += 1

    t = threading.Thread(target=churner, daemon=True)
    t.start()
    seen = set()
    try:
        deadline = time.monotonic() + 4
        gen0 = d.status()["hostmap"]["generation"]
        n_hup = 0
        while time.monotonic() < deadline:
            d.signal(signal.SIGHUP)
            n_hup += 1
            time.sleep(0.05)
            st = d.status()
            seen.add(st["hostmap"]["devices"])
            check(d.poll() is None, "pcinumad died during the churn")
            r = td.run_hook("gpu-vm-1", "prepare", "begin", Host.good, d.sock)
            check(r.rc in (0, 1) and "check skipped" not in r.err, "hook during the churn: %r" % r)
    finally:
        stop.set()
        t.join(10)
    lo, hi = Host.base["devices"] - len(victims), Host.base["devices"]
    check(all(lo <= n <= hi for n in seen), "device counts seen during the churn %r, expected within %d..%d"
          % (sorted(seen), lo, hi))
    d.hup()
    st = d.status()
    check(st["hostmap"]["generation"] > gen0, "no rescan happened")
    eq(st["hostmap"]["devices"], Host.base["devices"], "devices once the churn stopped")
    print("# %d SIGHUPs, %d removals, device counts seen %s" % (n_hup, churn[0], sorted(seen)))
    for b in victims:
        shutil.rmtree(saved[b][2])
    after_sysfs_case()


# ---- main --------------------------------------------------------------------------------------

def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for opt in ("pcinumad", "pcinumactl", "hook", "kubevirt-hook", "vdsm-hook", "mkfakesysfs", "hosts", "golden",
                "workdir"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--only")
    ap.add_argument("--keep", action="store_true")
    ARGS = ap.parse_args()
    for opt in ("pcinumad", "pcinumactl", "hook"):
        if not os.access(getattr(ARGS, opt), os.X_OK):
            print("1..0 # SKIP %s missing" % opt)
            return SKIP
    for opt in ("pcinumad", "pcinumactl", "hook", "kubevirt_hook", "vdsm_hook", "mkfakesysfs", "hosts", "golden",
                "workdir"):
        setattr(ARGS, opt, os.path.abspath(getattr(ARGS, opt)))
    ARGS.daemon_wrapper = ""
    td.start_run(ARGS, "pcinuma-bi-")
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    t0 = time.monotonic()
    try:
        td.FIXTURE = os.path.join(td.RUNTMP, "sample-4n")
        td.mkfakesysfs(os.path.join(ARGS.hosts, "sample-4n.json"), td.FIXTURE)
        src = os.path.dirname(os.path.dirname(ARGS.golden))
        td.XML["gpu-vm-1"] = td.read_text(os.path.join(src, "conf", "examples", "gpu-vm-1.xml"))
        good = td.planned("gpu-vm-1", "require")

        Shared.d = td.Daemon("badinput", policy="require").start()
        Shared.good = good
        Shared.base = snapshot(Shared.d)
        R.run("baseline: the daemon serves and allows the planned gpu-vm-1",
              lambda: invariants(Shared.d, Shared.base, good))

        for label, data, want in BAD_XML:
            R.run("xml: " + label, xml_case(label, data, want))
        R.run("xml: 64 MiB of XML (plan, hook, raw frame)", t_huge_xml)
        R.run("xml (control): guest cell ids permuted (1, 0) are accepted, as libvirt does", t_permuted_cells)
        R.run("hook: called without arguments", t_hook_bad_argv)
        for label, data, want in FRAMES:
            R.run("protocol: " + label, frame_case(label, data, want))
        for label, text, wants in BAD_POLICIES:
            R.run(label, policy_case(label, text, wants))
        R.run("policy: the file is a directory", t_policy_is_directory)

        Host.tree = os.path.join(td.RUNTMP, "host")
        td.mkfakesysfs(os.path.join(ARGS.hosts, "sample-4n.json"), Host.tree)
        Host.d = td.Daemon("badsysfs", policy="require", sysfs=Host.tree).start()
        Host.good = good
        refresh_host_baseline()
        bdf = "0000:33:00.0"
        R.run("sysfs: garbage numa_node", sysfs_file_case(
            "garbage", lambda: write_file(dev_path(bdf, "numa_node"), b"banana\n"), "no NUMA node", bdf,
            want_warning="'banana' is not a node number"))
        R.run("sysfs: numa_node out of range (2^40)", sysfs_file_case(
            "range", lambda: write_file(dev_path(bdf, "numa_node"), b"1099511627776\n"), "no NUMA node", bdf,
            want_warning="'1099511627776' is not a node number"))
        R.run("sysfs: numa_node of a node that does not exist (42)", sysfs_file_case(
            "nonode", lambda: write_file(dev_path(bdf, "numa_node"), b"42\n"), "host node 42", bdf))
        R.run("sysfs: unreadable numa_node (a directory)", sysfs_file_case(
            "dir", lambda: make_dir(dev_path(bdf, "numa_node")), "no NUMA node", bdf,
            want_warning="cannot read: Is a directory"))
        R.run("sysfs: numa_node missing", sysfs_file_case(
            "missing", lambda: os.unlink(dev_path(bdf, "numa_node")), "no NUMA node", bdf))
        R.run("sysfs: garbage uevent keys (PCI_CLASS, PCI_ID, DRIVER), class and vendor files of devices "
              "without uevent, resource, distance, cpulist; unreadable distance",
              t_garbage_other_files)
        R.run("sysfs: a dangling bus/pci/devices link (device vanished)", t_dangling_link)
        R.run("sysfs: stray entries in bus/pci/devices (file, loop, /dev/zero link)", t_stray_entries)
        R.run("sysfs: a hostile capture (links out of the root, FIFOs, node ids 2147483647 and 1024, "
              "a cpulist past any CPU): pcinumactl host and fingerprint, and pcinumad", t_hostile_tree)
        R.run("sysfs: the whole root disappears; the last good map stays", t_tree_gone)
        R.run("sysfs: devices vanish and return while pcinumad rescans in a loop", t_vanish_during_rescans)

        def stop_all():
            for d in (Shared.d, Host.d):
                td.check_clean_exit(d, d.stop())
        R.run("both daemons exit 0 on SIGTERM after the catalog", stop_all)
    finally:
        td.end_run(keep=ARGS.keep)
    return R.finish(t0)


if __name__ == "__main__":
    sys.exit(main())

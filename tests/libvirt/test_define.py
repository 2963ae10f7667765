#!/usr/bin/env python3
"""libvirt suite: every XML pcinuma writes must pass libvirt's schema and be
accepted by `virsh define` on a private session libvirtd, and planning must
be idempotent and reversible on libvirt's normalised form (dumpxml).

    test_define.py --pcinumactl PATH --mkfakesysfs PATH --hosts DIR \
                   --cases DIR --workdir DIR [--filter SUBSTR] [-v]

For each golden case (tests/golden/<case>/ with expected.xml):

  1. expected.xml validates (virt-xml-validate FILE domain)
  2. expected.xml defines; D_exp = dumpxml --inactive
  3. plan(D_exp) == D_exp (bytes, else C14N; which one is reported)
  4. revert(D_exp) validates, defines, and its dumpxml is C14N-equal to
     D_in = dumpxml of input.xml defined directly
  5. P = plan(D_in) validates and defines (D_P = its dumpxml);
     plan(P) == P, plan(D_P) == D_P, and revert(D_P) defines back to D_in

Every XML keeps its domain name (policy rules match on it; each define is
undefined right after its dumpxml, so cases never collide), gets a
deterministic per-case <uuid> when it has none, and <domain type='kvm'> becomes 'qemu' (the
unprivileged session daemon has no KVM).  libvirt-generated MAC addresses
are masked when input.xml has an <interface> without <mac>.

A failing comparison in 4 is reported as TAP "# TODO" (counted neither as
passed nor as failed) when input.xml leaves PCI addresses to libvirt: libvirt
then lays out its own controllers differently in dump(expected.xml), which no
revert can undo.  PCINUMA_STRICT_REVERT=1 counts it as a failure.  For an
input that is already planned, the reference is dump(revert(dump(input.xml))).
A case dir with a file "libvirt-skip" (its text is the reason) is skipped.
"@CASE@" in args stands for the case directory.

The hand-written planned XMLs in tests/libvirt/data/*.xml are always
validated, defined and dumped too, so the test is never empty.

Output: "ok N - case: check" / "not ok N - case: check" lines, diagnostics
as "# ..." lines, and a final line "N passed, M failed".  Exit 1 on any
failure, 77 when libvirtd/virsh/virt-xml-validate are not installed.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET

from pcinumatest.session import SessionError, require_tools, find_tool, start_session
from pcinumatest.tap import Tap
from pcinumatest.xmlcmp import compare

HERE = os.path.dirname(os.path.abspath(__file__))

TOOL_TIMEOUT = 60


# -- XML helpers ------------------------------------------------------------

def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def prepare(xml, name, case_uuid):
    """Rename the domain, add a uuid when missing, make it type='qemu'.
    Text substitutions only: an XML library would rewrite namespace
    prefixes and quoting, and we want libvirt to see the bytes we mean."""
    notes = []
    m = re.search(r"<domain\b[^>]*>", xml)
    if not m:
        raise ValueError("no <domain> element")
    head = m.group(0)
    new_head = re.sub(r"""\btype=(['"])kvm\1""", "type='qemu'", head, count=1)
    if new_head != head:
        notes.append("type kvm->qemu")
    xml = xml[:m.start()] + new_head + xml[m.end():]
    start = m.start() + len(new_head)
    nm = re.compile(r"<name>\s*([^<]*?)\s*</name>").search(xml, start)
    if not nm:
        raise ValueError("no <name> element")
    if name is not None:
        xml = xml[:nm.start()] + "<name>%s</name>" % name + xml[nm.end():]
    if not re.search(r"<uuid>[^<]*</uuid>", xml):
        pos = xml.find("</name>", start) + len("</name>")
        xml = xml[:pos] + "\n  <uuid>%s</uuid>" % case_uuid + xml[pos:]
        notes.append("uuid added")
    return xml, notes


def inputs_without_mac(xml):
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return False
    for itf in root.iter("interface"):
        if itf.find("mac") is None:
            return True
    return False


MAC_RE = re.compile(r"""(<mac\s+address=)(['"])[0-9a-fA-F:]+\2""")


def mask_macs(xml):
    return MAC_RE.sub(r"\1\2XX:XX:XX:XX:XX:XX\2", xml)


# -- the test ---------------------------------------------------------------

class Runner:
    def __init__(self, args, tap, session):
        self.a = args
        self.tap = tap
        self.s = session
        self.hostdirs = {}
        self.validator = find_tool("virt-xml-validate")

    def run(self, argv, input=None):
        try:
            r = subprocess.run(argv, input=input, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=TOOL_TIMEOUT)
            return (r.returncode, r.stdout.decode("utf-8", "replace"),
                    r.stderr.decode("utf-8", "replace"))
        except subprocess.TimeoutExpired:
            return -1, "", "timed out after %ds: %s" % (TOOL_TIMEOUT,
                                                       " ".join(argv))
        except OSError as e:
            return -1, "", "cannot run %s: %s" % (argv[0], e)

    def validate(self, path):
        rc, out, err = self.run([self.validator, path, "domain"])
        return rc == 0, (out + err).strip()

    def host(self, name):
        """Build (once) the fixture sysfs tree for a host name."""
        if name in self.hostdirs:
            return self.hostdirs[name]
        desc = os.path.join(self.a.hosts, name + ".json")
        out = os.path.join(self.a.workdir, "hosts", name)
        if not os.path.isfile(desc):
            res = (None, "no host description %s" % desc)
        else:
            rc, o, e = self.run([sys.executable, self.a.mkfakesysfs, desc, out])
            res = (out, None) if rc == 0 else \
                (None, "mkfakesysfs %s failed (exit %d):\n%s" % (desc, rc,
                                                                (o + e).strip()))
        self.hostdirs[name] = res
        return res

    def ctl(self, *argv, path):
        return self.run([self.a.pcinumactl] + list(argv) + [path])

    def plan(self, path, hostdir, args):
        return self.ctl("plan", "--sysfs-root", hostdir, *args, path=path)

    def define_dump(self, xml):
        """define, dumpxml --inactive, undefine.  Return (dump, error)."""
        r = self.s.define(xml, check=False)
        if not isinstance(r, str):
            return None, (r.stderr.strip() or r.stdout.strip()
                          or "virsh define exit %d" % r.returncode)
        name = r
        try:
            return self.s.dumpxml(name), None
        except SessionError as e:
            return None, str(e)
        finally:
            u = self.s.undefine(name)
            if u.returncode != 0:
                self.tap.diag("warning: undefine %s: %s" % (name, u.stderr))

    # -- data/*.xml: hand-written planned XML --------------------------------
    def data_files(self):
        ddir = os.path.join(HERE, "data")
        files = sorted(f for f in os.listdir(ddir) if f.endswith(".xml")) \
            if os.path.isdir(ddir) else []
        for f in files:
            path = os.path.join(ddir, f)
            tag = "data/" + f
            ok, out = self.validate(path)
            self.tap.check(ok, "%s: validates" % tag, out)
            name = "pcinuma-data-" + re.sub(r"[^A-Za-z0-9_.-]", "_", f[:-4])
            try:
                xml, _ = prepare(read(path), name,
                                 uuidlib.uuid5(uuidlib.NAMESPACE_URL,
                                               "pcinuma:" + tag))
            except ValueError as e:
                self.tap.check(False, "%s: defines" % tag, str(e))
                continue
            dump, err = self.define_dump(xml)
            self.tap.check(dump is not None, "%s: defines" % tag, err)
            if dump is None:
                continue
            wd = os.path.join(self.a.workdir, "data")
            os.makedirs(wd, exist_ok=True)
            write(os.path.join(wd, f[:-4] + ".dump.xml"), dump)
            # the pcinuma metadata must survive define + dumpxml
            if "urn:pcinuma:topology:1" in xml:
                self.tap.check("urn:pcinuma:topology:1" in dump,
                               "%s: metadata survives dumpxml" % tag,
                               dump if "urn:pcinuma" not in dump else None)
        return len(files)

    # -- one golden case -----------------------------------------------------
    def case(self, cdir):
        cname = os.path.basename(cdir.rstrip("/"))
        tap = self.tap
        wd = os.path.join(self.a.workdir, "cases", cname)
        shutil.rmtree(wd, ignore_errors=True)
        os.makedirs(wd)
        W = lambda n, t: write(os.path.join(wd, n), t)  # noqa: E731

        exp_path = os.path.join(cdir, "expected.xml")
        in_path = os.path.join(cdir, "input.xml")
        args = []
        if os.path.isfile(os.path.join(cdir, "args")):
            args = [x.replace("@CASE@", os.path.abspath(cdir)) for x in
                    shlex.split(read(os.path.join(cdir, "args")).strip())]
        host_name = read(os.path.join(cdir, "host")).strip() \
            if os.path.isfile(os.path.join(cdir, "host")) else None

        # The domain keeps its own name: policy rules match on it.  Cases
        # cannot collide: each define is undefined right after its dumpxml,
        # and any leftover of that name is removed first.
        dom_name = None
        m = re.search(r"<name>\s*([^<]*?)\s*</name>",
                      read(in_path) if os.path.isfile(in_path) else "")
        if m:
            self.s.undefine(m.group(1))
        case_uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL,
                                      "pcinuma:golden:" + cname))

        skip = os.path.join(cdir, "libvirt-skip")
        if os.path.isfile(skip):
            why = read(skip).strip() or "libvirt-skip"
            tap.n += 1
            tap.skipped += 1
            print("ok %d - %s: libvirt checks # SKIP %s" % (tap.n, cname, why))
            return

        # 1. schema
        ok, out = self.validate(exp_path)
        tap.check(ok, "%s: expected.xml validates" % cname, out)

        # host fixture
        hostdir, herr = (None, "case has no 'host' file") if not host_name \
            else self.host(host_name)
        if not tap.check(hostdir is not None,
                         "%s: fixture host %s builds" % (cname, host_name), herr):
            hostdir = None

        # 2. define expected.xml
        try:
            exp_xml, notes = prepare(read(exp_path), dom_name, case_uuid)
            raw_in = read(in_path)
            in_xml, _ = prepare(raw_in, dom_name, case_uuid)
        except (OSError, ValueError) as e:
            tap.check(False, "%s: read input.xml/expected.xml" % cname, str(e))
            return
        if notes:
            tap.diag("%s: %s" % (cname, ", ".join(notes)))
        mask = inputs_without_mac(in_xml)
        norm = mask_macs if mask else (lambda x: x)
        if mask:
            tap.diag("%s: input has <interface> without <mac>: "
                     "libvirt-generated MACs are masked" % cname)

        d_exp, err = self.define_dump(exp_xml)
        tap.check(d_exp is not None, "%s: expected.xml defines" % cname, err)
        d_in, err_in = self.define_dump(in_xml)
        tap.check(d_in is not None, "%s: input.xml defines" % cname, err_in)
        # libvirt's first dumpxml is not always a fixed point: controllers
        # it auto-added are listed last, and a second define sorts them in
        # among the others.  A domain that has lived in libvirt for a while
        # is at the fixed point, so that is the reference.
        if d_in is not None:
            d_in2, err_in2 = self.define_dump(d_in)
            if d_in2 is not None and d_in2 != d_in:
                tap.diag("%s: dump(input.xml) reached libvirt's fixed point "
                         "after a second define" % cname)
                d_in = d_in2
        if d_exp is not None:
            W("dump-expected.xml", d_exp)
        if d_in is not None:
            W("dump-input.xml", d_in)

        def plan_idempotent(label, text, fname):
            """plan(text) must give text back."""
            path = W(fname, text)
            rc, out, err = self.plan(path, hostdir, args)
            if rc != 0:
                return tap.check(False, "%s: %s is idempotent" % (cname, label),
                                 "pcinumactl plan exit %d\n%s" % (rc, err.strip()))
            W(fname[:-4] + ".plan.xml", out)
            ok, how, dg = compare(out, text, wd, fname[:-4], "plan", label)
            return tap.check(ok, "%s: %s is idempotent" % (cname, label),
                             dg, note=how)

        def revert_restores(label, text, fname, structural_ok=False):
            """revert(text) validates, defines, and dumps to d_in."""
            path = W(fname, text)
            rc, out, err = self.ctl("revert", path=path)
            if not tap.check(rc == 0, "%s: %s succeeds" % (cname, label),
                             "pcinumactl revert exit %d\n%s" % (rc, err.strip())):
                return
            rpath = W(fname[:-4] + ".revert.xml", out)
            ok, vout = self.validate(rpath)
            tap.check(ok, "%s: %s validates" % (cname, label), vout)
            d_rev, derr = self.define_dump(out)
            if not tap.check(d_rev is not None,
                             "%s: %s defines" % (cname, label), derr):
                return
            W(fname[:-4] + ".revert.dump.xml", d_rev)
            if ref[0] is None:
                tap.diag("%s: no reference dumpxml to compare with" % cname)
                return
            ok, how, dg = compare(norm(d_rev), norm(ref[0]), wd,
                                  fname[:-4] + "-rev", "dump(" + label + ")",
                                  ref[1])
            todo = None
            if not ok and structural_ok and unaddressed:
                todo = ("input.xml leaves PCI addresses to libvirt, which "
                        "assigns them differently once pxbs take pcie.0 "
                        "slots (set PCINUMA_STRICT_REVERT=1 to count it)")
            if not ok and unaddressed:
                dg = (dg or "") + "\nfiles: %s" % wd
            tap.check(ok, "%s: dump(%s) equals %s" % (cname, label, ref[1]),
                      dg, note=how, todo=todo)

        # What a revert must give back: dump(input.xml); for an input that
        # is already planned (carries pcinuma metadata), revert goes back
        # past it, to dump(revert(dump(input.xml))).
        ref = [d_in, "dump(input.xml)"]
        if d_in is not None and "urn:pcinuma:topology" in raw_in:
            rc, out, err = self.ctl("revert", path=W("r-dump-input.xml", d_in))
            d_ref, derr = (self.define_dump(out) if rc == 0 else
                           (None, "pcinumactl revert exit %d\n%s" % (rc, err)))
            tap.check(d_ref is not None,
                      "%s: revert(dump(input.xml)) defines" % cname, derr)
            if d_ref is not None:   # libvirt's fixed point, as for d_in
                d_ref2, _ = self.define_dump(d_ref)
                d_ref = d_ref2 if d_ref2 is not None else d_ref
            ref = [d_ref, "dump(revert(dump(input.xml)))"]
            if d_ref is not None:
                W("r-dump-input.revert.dump.xml", d_ref)
        unaddressed = d_in is not None and \
            d_in.count("<address type='pci'") > raw_in.count("<address type=")
        strict = bool(os.environ.get("PCINUMA_STRICT_REVERT"))

        # 3. plan(D_exp) == D_exp
        if d_exp is not None and hostdir:
            plan_idempotent("plan(dump(expected.xml))", d_exp,
                            "dump-expected.xml")
        # 4. revert(D_exp) -> D_in
        if d_exp is not None:
            revert_restores("revert(dump(expected.xml))", d_exp,
                            "r-dump-expected.xml", structural_ok=not strict)

        # 5. P = plan(D_in)
        if d_in is None or not hostdir:
            return
        path = W("p-dump-input.xml", d_in)
        rc, p, err = self.plan(path, hostdir, args)
        if not tap.check(rc == 0, "%s: plan(dump(input.xml)) succeeds" % cname,
                         "pcinumactl plan exit %d\n%s" % (rc, err.strip())):
            return
        ppath = W("plan-dump-input.xml", p)
        ok, vout = self.validate(ppath)
        tap.check(ok, "%s: plan(dump(input.xml)) validates" % cname, vout)
        d_p, derr = self.define_dump(p)
        tap.check(d_p is not None, "%s: plan(dump(input.xml)) defines" % cname,
                  derr)
        plan_idempotent("plan(dump(input.xml))", p, "plan-dump-input-again.xml")
        if d_p is None:
            return
        W("dump-plan-dump-input.xml", d_p)
        plan_idempotent("dump(plan(dump(input.xml)))", d_p,
                        "dump-plan-dump-input.xml")
        revert_restores("revert(dump(plan(dump(input.xml))))", d_p,
                        "r-dump-plan-dump-input.xml", structural_ok=not strict)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True,
                    help="directory of <host>.json fixture descriptions")
    ap.add_argument("--cases", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--filter", default=None,
                    help="only cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()

    require_tools(("libvirtd", "virsh", "virt-xml-validate"))
    a.workdir = os.path.abspath(a.workdir)
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.monotonic()
    tap = Tap(a.verbose)

    cases = []
    if os.path.isdir(a.cases):
        for d in sorted(os.listdir(a.cases)):
            cd = os.path.join(a.cases, d)
            if os.path.isfile(os.path.join(cd, "expected.xml")) and \
                    (not a.filter or a.filter in d):
                cases.append(cd)

    session = start_session(tap)
    if session is None:
        return 1
    if not os.access(a.pcinumactl, os.X_OK) and cases:
        tap.diag("warning: %s is not executable" % a.pcinumactl)

    r = Runner(a, tap, session)
    try:
        ndata = r.data_files()
        if not cases:
            tap.diag("no golden case with expected.xml under %s; only the %d "
                     "hand-written XML(s) in tests/libvirt/data were checked"
                     % (a.cases, ndata))
        for cd in cases:
            try:
                r.case(cd)
            except SessionError as e:
                tap.check(False, "%s: libvirt session" % os.path.basename(cd),
                          str(e))
            if session.proc.poll() is not None:
                tap.check(False, "libvirtd still running",
                          "libvirtd exited with %s\n%s"
                          % (session.proc.returncode, session.log_tail()))
                break
    finally:
        session.stop()

    tap.diag("%d case(s), %.1fs" % (len(cases), time.monotonic() - t0))
    if tap.todo or tap.skipped:
        tap.diag("%d TODO (known structural differences) and %d skipped "
                 "case(s), counted neither as passed nor as failed"
                 % (tap.todo, tap.skipped))
    if tap.failures:
        tap.diag("failed: " + "; ".join(tap.failures[:30])
                 + (" ..." if len(tap.failures) > 30 else ""))
    print("%d passed, %d failed" % (tap.passed, tap.failed))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())

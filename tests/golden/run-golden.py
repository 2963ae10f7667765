#!/usr/bin/env python3
"""Golden tests: input domain XML + fixture host + policy -> expected XML or refusal.

See tests/golden/README.md for the case layout.  For every case that
produces XML it also checks idempotence (planning the output again gives
the same bytes) and reversibility (pcinumactl revert of the output is
canonically equal to the input).  Ends with 'N passed, M failed'.
"""
import argparse
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET

from pcinumatest.tap import Tap


def c14n(text):
    return ET.canonicalize(xml_data=text)


class Runner:
    def __init__(self, args):
        self.args = args
        self.tap = Tap()
        self.report = self.tap.check
        self.hosts = {}

    def host(self, name):
        if name not in self.hosts:
            desc = os.path.join(self.args.hosts, name + ".json")
            out = os.path.join(self.args.workdir, "hosts", name)
            subprocess.run([sys.executable, self.args.mkfakesysfs, desc, out], check=True)
            self.hosts[name] = out
        return self.hosts[name]

    def pcinumactl(self, *argv, stdin=None):
        return subprocess.run([self.args.pcinumactl, *argv], capture_output=True, text=True, input=stdin)

    def run_case(self, case_dir):
        name = os.path.basename(case_dir)

        def read(f, default=None):
            p = os.path.join(case_dir, f)
            if not os.path.exists(p):
                return default
            with open(p, encoding="utf-8") as fh:
                return fh.read()

        host = self.host(read("host").strip())
        extra = [a.replace("@CASE@", case_dir) for a in shlex.split(read("args", "").strip())]
        input_path = os.path.join(case_dir, "input.xml")
        input_xml = read("input.xml")
        expected_xml = read("expected.xml")
        expected_exit = int(read("expected.exit", "0").strip())
        expected_stderr = [l for l in read("expected.stderr", "").splitlines() if l.strip()]

        argv = ["plan", "--sysfs-root", host, *extra, input_path]
        r = self.pcinumactl(*argv)
        diag = f"command: pcinumactl {' '.join(argv)}\nexit: {r.returncode}\nstderr:\n{r.stderr}"

        if self.args.update and expected_exit == 0 and r.returncode == 0:
            with open(os.path.join(case_dir, "expected.xml"), "w", encoding="utf-8") as fh:
                fh.write(r.stdout)
            expected_xml = r.stdout

        self.report(r.returncode == expected_exit, f"{name}: exit status {expected_exit}", diag)
        for s in expected_stderr:
            self.report(s in r.stderr, f"{name}: stderr mentions {s!r}", diag)

        if expected_exit != 0:
            self.report(r.stdout == "", f"{name}: no XML printed when it fails", r.stdout[:400])
            return
        if expected_xml is None:
            self.report(False, f"{name}: expected.xml exists", "run with --update and review the result")
            return
        if r.stdout != expected_xml:
            import difflib
            d = "".join(difflib.unified_diff(expected_xml.splitlines(True), r.stdout.splitlines(True),
                                             "expected.xml", "actual", n=2))
            self.report(False, f"{name}: output matches expected.xml", d[:6000])
        else:
            self.report(True, f"{name}: output matches expected.xml")

        # Idempotence: planning the output again changes nothing.
        r2 = self.pcinumactl("plan", "--sysfs-root", host, *extra, "-", stdin=r.stdout)
        self.report(r2.returncode == 0 and r2.stdout == r.stdout, f"{name}: idempotent",
                    f"exit {r2.returncode}\n{r2.stderr}")

        # Reversibility: revert gives the input back (canonically equal);
        # for an input that was itself planned, its own unplanned form.
        original = input_xml
        if "urn:pcinuma:topology:1" in input_xml:
            original = self.pcinumactl("revert", input_path).stdout
        r3 = self.pcinumactl("revert", "-", stdin=r.stdout)
        ok = r3.returncode == 0
        if ok:
            try:
                ok = c14n(r3.stdout) == c14n(original)
            except ET.ParseError as e:
                ok = False
                r3 = subprocess.CompletedProcess(r3.args, r3.returncode, r3.stdout, f"parse error {e}")
        self.report(ok, f"{name}: revert restores the input", f"exit {r3.returncode}\n{r3.stderr}\n{r3.stdout[:3000]}")

    def run(self):
        cases = sorted(d for d in os.listdir(self.args.cases)
                       if os.path.isfile(os.path.join(self.args.cases, d, "input.xml")))
        if self.args.only:
            cases = [c for c in cases if any(o in c for o in self.args.only)]
        os.makedirs(self.args.workdir, exist_ok=True)
        for c in cases:
            self.run_case(os.path.join(self.args.cases, c))
        print(f"# {len(cases)} golden cases")
        return self.tap.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pcinumactl", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--update", action="store_true", help="rewrite expected.xml from the current output")
    ap.add_argument("only", nargs="*", help="run only cases whose name contains one of these")
    sys.exit(Runner(ap.parse_args()).run())


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""libvirt suite: the revert property test's documents against libvirt's schema.

    test_revert_property.py --property PATH --mkfakesysfs PATH --hosts DIR \
                            --cases DIR --workdir DIR

Runs tests/unit/test-revert-property (plan -> user edits -> revert -> plan,
over every golden case's input with its fixture host and policy and a few
thousand generated domains; see that file) with --out, so that it writes
the edited, reverted and replanned documents of every golden case and of
every 10th generated one.  Each of them must then pass libvirt's schema:
all through `xmllint --relaxng` with the domain.rng that virt-xml-validate
uses (the schema is loaded once per batch), and a fixed sample of 40 through
`virt-xml-validate FILE domain` itself.

Output: the property test's counts, "ok N - ..." lines, and a final line
"N passed, M failed".  Exit 1 on any failure, 77 when virt-xml-validate or
xmllint is not installed.
"""

import argparse
import os
import shutil
import subprocess
import sys

SCHEMA = "/usr/share/libvirt/schemas/domain.rng"
BATCH = 200
SAMPLE = 40


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--property", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()

    for tool in ("virt-xml-validate", "xmllint"):
        if not shutil.which(tool):
            print(f"# {tool} is not installed (libvirt-clients, libxml2-utils): skipped")
            return 77
    if not os.path.exists(SCHEMA):
        print(f"# {SCHEMA} is missing (libvirt-clients): skipped")
        return 77

    shutil.rmtree(a.workdir, ignore_errors=True)
    hosts = os.path.join(a.workdir, "hosts")
    out = os.path.join(a.workdir, "out")
    os.makedirs(hosts)
    os.makedirs(out)
    names = set()
    for case in os.listdir(a.cases):
        p = os.path.join(a.cases, case, "host")
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                names.add(f.read().strip())
    for name in sorted(names):
        subprocess.run([sys.executable, a.mkfakesysfs, os.path.join(a.hosts, name + ".json"),
                        os.path.join(hosts, name)], check=True)

    passed = failed = 0

    def report(ok, what, diag=""):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
        print(f"{'ok' if ok else 'not ok'} {passed + failed} - {what}")
        for line in diag.rstrip().splitlines():
            print(f"#   {line}")
        sys.stdout.flush()

    r = subprocess.run([a.property, "--golden", a.cases, "--hosts", hosts, "--out", out, "--every", "10"],
                       capture_output=True, text=True, env=dict(os.environ, CMOCKA_MESSAGE_OUTPUT="stdout"))
    for line in r.stdout.splitlines():
        if line.startswith("#") or "ERROR" in line or "FAILED" in line:
            print(line)
    report(r.returncode == 0, "plan -> edit -> revert -> plan holds over the golden and generated domains",
           (r.stdout[-6000:] + r.stderr[-2000:]) if r.returncode else "")

    files = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".xml"))
    report(len(files) > 500, f"the property test wrote its documents ({len(files)})")

    invalid = []
    for i in range(0, len(files), BATCH):
        batch = files[i:i + BATCH]
        v = subprocess.run(["xmllint", "--noout", "--relaxng", SCHEMA, *batch], capture_output=True, text=True)
        ok = {line.rsplit(" validates", 1)[0] for line in v.stderr.splitlines() if line.endswith(" validates")}
        for f in batch:
            if f not in ok:
                invalid.append(f)
    diag = ""
    for f in invalid[:5]:
        v = subprocess.run(["xmllint", "--noout", "--relaxng", SCHEMA, f], capture_output=True, text=True)
        diag += f"{os.path.basename(f)}:\n{v.stderr[-1500:]}\n"
    print(f"# libvirt's schema (xmllint --relaxng {SCHEMA}): {len(files) - len(invalid)} of {len(files)} documents valid")
    report(not invalid and files, f"every written document passes libvirt's schema ({len(invalid)} do not)", diag)

    step = max(1, len(files) // SAMPLE)
    sample = files[::step][:SAMPLE]
    bad = []
    for f in sample:
        v = subprocess.run(["virt-xml-validate", f, "domain"], capture_output=True, text=True)
        if v.returncode != 0:
            bad.append(f"{os.path.basename(f)}: {v.stderr.strip()[-800:]}")
    report(not bad and sample, f"virt-xml-validate FILE domain accepts a sample of {len(sample)}", "\n".join(bad[:5]))

    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Instruction counts (valgrind --tool=callgrind, event Ir): figures that
do not depend on the machine's load, to compare from run to run.

  planner_run   one plan of gpu-vm-1 (16 devices, 4 cells) on sample-4n,
                policy require: Ir collected inside planner_run
                (--toggle-collect) over 200 calls, / 200
  engine_plan   the same domain's raw XML through engine_plan, over 20
                calls, / 20
  hook          one pcinuma-hook process, all of it (dynamic loader
                included): the full path (planned gpu-vm-1, prepare begin,
                against a running pcinumad), the fast path (16 KB domain
                without passthrough devices) and the no-op reader on the
                same 16 KB
  daemon        pcinumad under callgrind serving N planned-gpu-vm-1
                'prepare begin' requests minus the same daemon serving
                none (startup and shutdown cancel out), / N

The Ir figures have no targets (except the 64- vs 16-device scaling of
planner_run, at most 4x, in instructions); a change of more than a few percent
between two runs of the same tree means the code changed.

    bench_callgrind.py --bench-planner PATH --hook PATH --noop PATH --pcinumad PATH
                       --pcinumactl PATH --mkfakesysfs PATH --hosts DIR --example XML
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

VG = None


def totals(outfile):
    with open(outfile) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError("no totals in %s" % outfile)


def callgrind(outfile, argv, stdin=None, toggle=None):
    cmd = [VG, "--tool=callgrind", "--callgrind-out-file=" + outfile]
    if toggle:
        cmd.append("--toggle-collect=" + toggle)
    cmd += argv
    B.say("# command: %s%s" % (" ".join(cmd), (" < " + stdin) if stdin else ""))
    with open(stdin or os.devnull) as f:
        r = subprocess.run(cmd, stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (argv[0], r.returncode, r.stderr[-2000:]))
    return totals(outfile)


def top_inclusive(outfile, n=14):
    ann = shutil.which("callgrind_annotate")
    if not ann:
        return []
    r = subprocess.run([ann, "--inclusive=yes", outfile], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    rows, seen = [], set()
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$", line)
        if not m:
            continue
        # callgrind lists a function once per spelling of its file's path
        fn = re.sub(r"^.*?(daemon|hook|tests/bench)/", r"\1/", m.group(2).split(" [")[0])
        if fn in seen:
            continue
        seen.add(fn)
        rows.append("%s  %s" % (m.group(1), fn))
    return rows[1:n + 1]


def run(a):
    global VG
    VG = shutil.which("valgrind")
    if not VG:
        B.skip("valgrind not found")
    work = B.short_tmpdir("cg")
    sysfs = B.mkfakesysfs(a.mkfakesysfs, os.path.join(a.hosts, "sample-4n.json"),
                          os.path.join(work, "host"))
    planned = os.path.join(work, "planned.xml")
    with open(planned, "w") as f:
        f.write(B.planned_xml(a.pcinumactl, sysfs, a.example))
    plain = os.path.join(work, "plain.xml")
    with open(plain, "w") as f:
        f.write(B.plain_domain_xml("bench-plain", 16 * 1024))

    n = 200
    ir = callgrind(os.path.join(work, "cg.planner"),
                   [a.bench_planner, "--sysfs", sysfs, "--policy", "require",
                    "--count-planner", str(n), a.example], toggle="planner_run")
    B.info("callgrind.planner_run_ir_per_plan", ir / n, "Ir", "%.0f")
    # The scaling of planner_run from 16 to 64 devices on the same host
    # (bench_planner.py's generated 4 x 16-GPU host), in instructions.
    import bench_planner
    desc, gpus = bench_planner.wide_host()
    wide = B.mkfakesysfs(a.mkfakesysfs, desc, os.path.join(work, "wide-4x16"))
    wide_ir = {}
    for ndev in (16, 64):
        xml = os.path.join(work, "wide-%d.xml" % ndev)
        with open(xml, "w") as f:
            f.write(B.gen_gpu_domain("bench-%d" % ndev, ndev, 4, gpus))
        wide_ir[ndev] = callgrind(os.path.join(work, "cg.planner-wide-%d" % ndev),
                                  [a.bench_planner, "--sysfs", wide, "--policy", "require",
                                   "--count-planner", "50", xml], toggle="planner_run") / 50
        B.info("callgrind.planner_run_ir_%ddev_wide_host" % ndev, wide_ir[ndev], "Ir", "%.0f")
    B.result("callgrind.planner_run_scaling_64_vs_16", wide_ir[64] / wide_ir[16], "x", "<=", 4.0,
             "%.2f", "instructions, independent of the machine's load")
    n = 20
    ir = callgrind(os.path.join(work, "cg.engine"),
                   [a.bench_planner, "--sysfs", sysfs, "--policy", "require",
                    "--count-engine", str(n), a.example], toggle="engine_plan")
    B.info("callgrind.engine_plan_ir_per_plan", ir / n, "Ir", "%.0f")
    for row in top_inclusive(os.path.join(work, "cg.engine"), 16)[3:]:
        B.say("#   engine_plan x20 inclusive: " + row.strip())

    # The hook process against a native daemon.
    d = B.Daemon(a.pcinumad, sysfs, os.path.join(work), policy="require").start()
    os.environ["PCINUMA_SOCKET"] = d.sock
    conf = os.path.join(work, "hook.conf")
    with open(conf, "w") as f:
        f.write("on_unreachable = refuse\n")
    os.environ["PCINUMA_HOOK_CONF"] = conf
    full = callgrind(os.path.join(work, "cg.hook-full"),
                     [a.hook, "gpu-vm-1", "prepare", "begin", "-"], stdin=planned)
    fast = callgrind(os.path.join(work, "cg.hook-fast"),
                     [a.hook, "bench-plain", "prepare", "begin", "-"], stdin=plain)
    noop = callgrind(os.path.join(work, "cg.noop"), [a.noop], stdin=plain)
    d.stop()
    B.info("callgrind.hook_full_path_ir", full, "Ir", "%d")
    B.info("callgrind.hook_fast_path_ir", fast, "Ir", "%d")
    B.info("callgrind.noop_reader_ir", noop, "Ir", "%d")
    for row in top_inclusive(os.path.join(work, "cg.hook-full"), 12):
        B.say("#   hook full path inclusive: " + row.strip())

    # The daemon side: N requests minus none.
    req = B.encode(B.hook_request("gpu-vm-1", "prepare", "begin", open(planned).read()))
    counts = {}
    for n in (0, a.daemon_requests):
        sub = os.path.join(work, "d%d" % n)
        os.makedirs(sub)
        out = os.path.join(sub, "cg.daemon")
        dd = B.Daemon(a.pcinumad, sysfs, sub, policy="require",
                      wrapper=[VG, "--tool=callgrind", "--callgrind-out-file=" + out])
        B.say("# command: " + " ".join(dd.argv))
        dd.start(timeout=180)
        for _ in range(n):
            r = B.call(dd.sock, None, raw=req, timeout=60)
            if r.get("verdict") != "allow":
                raise RuntimeError("unexpected answer %r" % r)
        if dd.stop(timeout=120) != 0:
            raise RuntimeError("pcinumad under callgrind exited %s" % dd.proc.returncode)
        counts[n] = totals(out)
    per = (counts[a.daemon_requests] - counts[0]) / a.daemon_requests
    B.say("# daemon Ir: %d with no request (startup: status probe included), %d with %d requests"
          % (counts[0], counts[a.daemon_requests], a.daemon_requests))
    B.info("callgrind.daemon_ir_per_prepare_request", per, "Ir", "%.0f")
    for row in top_inclusive(os.path.join(work, "d%d" % a.daemon_requests, "cg.daemon"), 30):
        B.say("#   daemon x%d inclusive: %s" % (a.daemon_requests, row.strip()))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for opt in ("--bench-planner", "--hook", "--noop", "--pcinumad", "--pcinumactl",
                "--mkfakesysfs", "--hosts", "--example"):
        ap.add_argument(opt, required=True)
    ap.add_argument("--daemon-requests", type=int, default=100)
    B.main(lambda: run(ap.parse_args()))

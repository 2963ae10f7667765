#!/usr/bin/env python3
"""Planner benchmark: plans per second on one core (one thread).

  1. gpu-vm-1 (conf/examples, 16 devices, 4 cells) on the sample-4n
     fixture, policy require: planner_run() on the parsed domain with its
     backing resolved (target: at least 20,000 plans/s), and engine_plan()
     on the raw XML (parse + resolve + plan + rewrite + format), reported
     separately.
  2. Scaling: a generated host with 4 nodes of 16 GPUs each (one per root
     port), and generated 16- and 64-device domains over 4 cells on it
     (same host, same shape): the 64-device plan must take at most 4x the
     16-device one.
  3. The p5-like fixture host (issue 15: four root complexes per
     node, switches), 16 devices (tests/golden/paths-p5-like): engine_plan
     with the default paths topology against the cells shape (what
     pcinuma planned before; its output is byte for byte what it was) in
     the same run: target at most 1.5x.

Rates are the median of 15 batches of ~0.2 s each, single thread.  The
targets are judged on the thread's CPU time (CLOCK_THREAD_CPUTIME_ID:
what one core spends, whatever else the machine runs); the wall-clock
rate of the same batches is printed too.

    bench_planner.py --bench-planner PATH --mkfakesysfs PATH --hosts DIR --example XML
"""

import argparse
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402


def wide_host(per_node=16, nodes=4):
    """nodes NUMA nodes, each with a host bridge and per_node GPUs, each
    GPU alone under a root port."""
    desc = {"description": "bench: %d nodes x %d GPUs" % (nodes, per_node), "nodes": [],
            "hostbridges": []}
    cpus = 16
    for n in range(nodes):
        desc["nodes"].append({"id": n, "cpus": "%d-%d" % (n * cpus, (n + 1) * cpus - 1),
                              "socket": n // 2,
                              "distance": [10 if m == n else (12 if m // 2 == n // 2 else 32)
                                           for m in range(nodes)]})
        base = 0x20 + n * 0x30
        devs = []
        for i in range(per_node):
            devs.append({"bdf": "0000:%02x:%02x.0" % (base, 1 + i), "kind": "rootport",
                         "devices": [{"bdf": "0000:%02x:00.0" % (base + 1 + i), "kind": "gpu"}]})
        desc["hostbridges"].append({"name": "pci0000:%02x" % base, "node": n, "devices": devs})
    gpus = [["0000:%02x:00.0" % (0x20 + n * 0x30 + 1 + i) for i in range(per_node)]
            for n in range(nodes)]
    return desc, gpus


def bench(a, sysfs, xml, label, seconds, batches=15, extra=()):
    cmd = [a.bench_planner, "--sysfs", sysfs, "--policy", "require", "--label", label, *extra,
           "--seconds", str(seconds), "--batches", str(batches), xml]
    B.say("# command: " + " ".join(cmd))
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        B.say("# " + line)
        m = re.match(r"\S+ (planner_run|engine_plan): per_call_us=([\d.]+) per_s=(\d+).*"
                     r"cpu_per_call_us=([\d.]+) cpu_per_s=(\d+)", line)
        if m:
            res[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)),
                               float(m.group(5)))
        m = re.match(r"\S+: hostdevs=(\d+) cells=(\d+) policy=\S+ verdict=(\S+) moved=(\d+)", line)
        if m and (m.group(3) != "apply" or m.group(1) != m.group(4)):
            B.say("# WARNING: not every device moves: the figure is not the full plan")
    return res


def run(a):
    if not os.access(a.bench_planner, os.X_OK):
        B.skip("%s is missing" % a.bench_planner)
    work = B.short_tmpdir("planner")
    sample = B.mkfakesysfs(a.mkfakesysfs, os.path.join(a.hosts, "sample-4n.json"),
                           os.path.join(work, "sample-4n"))
    r16 = bench(a, sample, a.example, "gpu-vm-1", 3.0)
    B.result("planner.plans_per_s_16dev_4cell", r16["planner_run"][3], "plans/s", ">=", 20000,
             "%.0f", "thread CPU time, %.2f us/plan; wall clock %.0f plans/s"
             % (r16["planner_run"][2], r16["planner_run"][1]))
    B.info("planner.engine_plan_per_s_16dev_4cell", r16["engine_plan"][3], "plans/s (CPU time)", "%.0f")
    B.info("planner.engine_plan_us_16dev_4cell", r16["engine_plan"][2], "us (CPU time)", "%.1f")
    B.info("planner.engine_plan_wall_us_16dev_4cell", r16["engine_plan"][0], "us (wall)", "%.1f")

    desc, gpus = wide_host()
    wide = B.mkfakesysfs(a.mkfakesysfs, desc, os.path.join(work, "wide-4x16"))
    res = {}
    for n in (16, 64):
        path = os.path.join(work, "wide-%d.xml" % n)
        with open(path, "w") as f:
            f.write(B.gen_gpu_domain("bench-%d" % n, n, 4, gpus))
        res[n] = bench(a, wide, path, "wide-%d" % n, 3.0)
    for fn in ("planner_run", "engine_plan"):
        B.info("planner.%s_us_16dev_wide_host" % fn, res[16][fn][2], "us (CPU time)", "%.2f")
        B.info("planner.%s_us_64dev_wide_host" % fn, res[64][fn][2], "us (CPU time)", "%.2f")
    ratio = res[64]["planner_run"][2] / res[16]["planner_run"][2]
    B.result("planner.scaling_64_vs_16", ratio, "x", "<=", 4.0, "%.2f",
             "thread CPU time; wall-clock ratio %.2f (see callgrind.planner_run_scaling_64_vs_16 "
             "for a load-independent one)" % (res[64]["planner_run"][0] / res[16]["planner_run"][0]))
    B.info("planner.engine_plan_scaling_64_vs_16",
           res[64]["engine_plan"][2] / res[16]["engine_plan"][2], "x", "%.2f")

    p5 = B.mkfakesysfs(a.mkfakesysfs, os.path.join(a.hosts, "p5-like.json"), os.path.join(work, "p5-like"))
    p5xml = os.path.join(a.hosts, "..", "..", "golden", "paths-p5-like", "input.xml")
    p5r = {t: bench(a, p5, p5xml, "p5-%s" % t, 3.0, extra=("--topology", t)) for t in ("cells", "paths")}
    for t in ("cells", "paths"):
        for fn in ("planner_run", "engine_plan"):
            B.info("planner.%s_us_p5_16dev_%s" % (fn, t), p5r[t][fn][2], "us (CPU time)", "%.2f")
    B.result("planner.engine_plan_p5_paths_vs_cells", p5r["paths"]["engine_plan"][2] / p5r["cells"]["engine_plan"][2],
             "x", "<=", 1.5, "%.2f", "thread CPU time, same run; wall-clock ratio %.2f"
             % (p5r["paths"]["engine_plan"][0] / p5r["cells"]["engine_plan"][0]))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for opt in ("--bench-planner", "--mkfakesysfs", "--hosts", "--example"):
        ap.add_argument(opt, required=True)
    B.main(lambda: run(ap.parse_args()))

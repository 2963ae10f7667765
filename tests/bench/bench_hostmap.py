#!/usr/bin/env python3
"""Host map benchmark.

  1. Scan time of a generated 2,000-device fixture (10 host bridges over
     4 nodes, each with 25 root ports holding a NIC PF and its 6 VFs):
     hostmap_load_path() repeated 21 times; the median of the 20 warm
     scans against the target of at most 50 ms (the first scan is shown
     separately).
  2. Lookups never rescan: 1,000,000 hostmap_find_device() calls are
     timed (and compared with one scan), and the same run under
     `strace -f` counts every file, descriptor and network system call
     made between the two marker writes around the lookup phase: the
     target is 0.

    bench_hostmap.py --bench-hostmap PATH --mkfakesysfs PATH [--hosts DIR --example XML]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

N_BRIDGES, PORTS, VFS = 10, 25, 6     # 10 * 25 * (1 root port + 1 PF + 6 VFs) = 2,000


def host_2000():
    desc = {"description": "bench: 2,000 PCI devices", "nodes": [], "hostbridges": []}
    for n in range(4):
        desc["nodes"].append({"id": n, "cpus": "%d-%d" % (16 * n, 16 * n + 15), "socket": n // 2})
    for b in range(N_BRIDGES):
        dom = "%04x" % b
        devs = []
        for p in range(PORTS):
            bus = p + 1
            pf = {"bdf": "%s:%02x:00.0" % (dom, bus), "kind": "nic",
                  "vfs": [{"bdf": "%s:%02x:00.%d" % (dom, bus, f)} for f in range(1, VFS + 1)]}
            devs.append({"bdf": "%s:00:%02x.0" % (dom, bus), "kind": "rootport", "devices": [pf]})
        desc["hostbridges"].append({"name": "pci%s:00" % dom, "node": b % 4, "devices": devs})
    return desc


def run(a):
    if not os.access(a.bench_hostmap, os.X_OK):
        B.skip("%s is missing" % a.bench_hostmap)
    work = B.short_tmpdir("hostmap")
    t = time.monotonic()
    sysfs = B.mkfakesysfs(a.mkfakesysfs, host_2000(), os.path.join(work, "host2000"))
    B.say("# generated the 2,000-device fixture in %.1f s" % (time.monotonic() - t))

    cmd = [a.bench_hostmap, sysfs, "21", "1000000"]
    B.say("# command: " + " ".join(cmd))
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True,
                         text=True).stdout
    for line in out.splitlines():
        B.say("# " + line)
    m = re.search(r"devices=(\d+) .*first_ms=([\d.]+) median_ms=([\d.]+) best_ms=([\d.]+) .*"
                  r"cpu_median_ms=([\d.]+)", out)
    n_dev, first, med = int(m.group(1)), float(m.group(2)), float(m.group(3))
    best, cpu = float(m.group(4)), float(m.group(5))
    if n_dev != 2000:
        B.say("# WARNING: the map holds %d devices, not 2000" % n_dev)
    B.info("hostmap.first_scan_ms", first, "ms", "%.1f")
    B.result("hostmap.scan_ms_2000dev", med, "ms", "<=", 50.0, "%.1f",
             "best %.1f ms; CPU time of the scan, all its threads (up to min(4, CPUs) = %d here), median %.1f ms" % (best, min(4, os.cpu_count() or 1), cpu))
    m = re.search(r"ns_per_lookup=([\d.]+) lookups_vs_one_scan=([\d.]+)", out)
    B.info("hostmap.lookup_ns", float(m.group(1)), "ns", "%.1f")
    B.info("hostmap.1e6_lookups_vs_one_scan", float(m.group(2)), "x", "%.3f")

    strace = shutil.which("strace")
    if not strace:
        B.say("# strace not found: the system-call count is not measured")
        return 0
    trace = os.path.join(work, "strace.out")
    cmd = [strace, "-f", "-o", trace, "-e", "trace=%file,%desc,%network", "-e", "signal=none",
           a.bench_hostmap, sysfs, "2", "1000000"]
    B.say("# command: " + " ".join(cmd))
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    lines = open(trace).read().splitlines()
    begin = next(i for i, l in enumerate(lines) if "@@bench-lookups-begin" in l)
    end = next(i for i, l in enumerate(lines) if "@@bench-lookups-end" in l)
    between = lines[begin + 1:end]
    per = {}
    for l in lines[:begin]:
        m = re.match(r"\d+\s+(\w+)\(", l)
        if m:
            per[m.group(1)] = per.get(m.group(1), 0) + 1
    B.say("# system calls of one scan (half of the 2 scans before the lookups): %d in all; %s"
          % (sum(per.values()) // 2, ", ".join("%s %d" % (k, v // 2) for k, v in
                                              sorted(per.items(), key=lambda kv: -kv[1])[:8])))
    B.say("# system calls between the markers (the 1,000,000 lookups): %d" % len(between))
    for l in between[:10]:
        B.say("#   " + l)
    B.result("hostmap.syscalls_during_1e6_lookups", len(between), "calls", "<=", 0, "%d")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-hostmap", required=True)
    ap.add_argument("--mkfakesysfs", required=True)
    ap.add_argument("--hosts")
    ap.add_argument("--example")
    B.main(lambda: run(ap.parse_args()))

#!/usr/bin/env python3
"""Daemon memory benchmark: pcinumad's resident set after 10,000 requests.

pcinumad runs on the sample-4n fixture (policy require, logging to a file)
and gets 10,000 requests through the raw protocol, one per connection as
the hook sends them, in a fixed rotation:

    prepare begin  gpu-vm-1 as planned          (already planned: allow)
    prepare begin  gpu-vm-1 as written           (planned, then refused: require
                                                  wants the topology in place)
    migrate begin  gpu-vm-1 as planned           (refused: its mark says
                                                  migratable="no")
    status
    prepare begin  a 16 KB domain without passthrough devices (pass)

pcinumad runs as deployed, with its libvirt watcher: --libvirt-uri
test:///default (libvirt's test driver, which lives in the client library,
so no libvirtd is needed; its one persistent domain, "test", goes through
the watcher's plan round trip).  The watcher is pcinumad's child process
pcinuma-watcher (daemon/watcher-link.h); its memory is reported beside
pcinumad's, and the target is pcinumad's.

VmRSS (and VmHWM, the peak) is read from /proc/PID/status after startup
and every 1,000 requests; at the end, the Rss of each mapping
(/proc/PID/smaps) shows where the resident set is.  Targets: VmRSS at most 8 MiB after 10,000
requests, and no growth from request 1,000 to 10,000 (allowance: 64 KiB,
i.e. under 7 bytes per request, the granularity of malloc's arenas).

    bench_daemon_memory.py --pcinumad PATH --pcinumactl PATH --mkfakesysfs PATH
                           --hosts DIR --example XML [--requests N]
"""

import argparse
import os
import re
import sys
import time

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402


def proc_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "VmData"):
                out[k] = int(v.split()[0])
    return out


def smaps_breakdown(pid, top=12):
    """Rss per mapped file (anonymous mappings as [anon]/[heap]/[stack]),
    and the totals of smaps_rollup."""
    agg, cur = {}, None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            parts = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                cur = parts[5] if len(parts) > 5 else "[anon]"
            elif parts and parts[0] == "Rss:":
                agg[cur] = agg.get(cur, 0) + int(parts[1])
    roll = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                roll[parts[0].rstrip(":")] = int(parts[1])
    libs = sum(1 for k in agg if k.startswith("/") and ".so" in k)
    return sorted(agg.items(), key=lambda kv: -kv[1])[:top], roll, libs


def run(a):
    for p in (a.pcinumad, a.pcinumactl):
        if not os.access(p, os.X_OK):
            B.skip("%s is missing" % p)
    work = B.short_tmpdir("mem")
    sysfs = B.mkfakesysfs(a.mkfakesysfs, os.path.join(a.hosts, "sample-4n.json"),
                          os.path.join(work, "host"))
    raw = open(a.example).read()
    planned = B.planned_xml(a.pcinumactl, sysfs, a.example)
    plain = B.plain_domain_xml("bench-plain", 16 * 1024)
    reqs = [
        ("prepare-planned", B.hook_request("gpu-vm-1", "prepare", "begin", planned)),
        ("prepare-unplanned", B.hook_request("gpu-vm-1", "prepare", "begin", raw)),
        ("migrate", B.hook_request("gpu-vm-1", "migrate", "begin", planned)),
        ("status", {"version": 1, "type": "status"}),
        ("prepare-plain", B.hook_request("bench-plain", "prepare", "begin", plain)),
    ]
    frames = [(n, B.encode(o)) for n, o in reqs]
    d = B.Daemon(a.pcinumad, sysfs, work, policy="require", libvirt_uri=a.libvirt_uri).start()
    B.say("# command: " + " ".join(d.argv))
    wpid = None
    if a.libvirt_uri != "none":
        deadline = time.monotonic() + 30
        lv = {}
        while time.monotonic() < deadline:
            lv = B.call(d.sock, {"version": 1, "type": "status"})["status"].get("libvirt") or {}
            if lv.get("connected"):
                break
            time.sleep(0.05)
        wpid = (lv.get("process") or {}).get("pid")
        if not lv.get("connected") or not wpid:
            raise RuntimeError("the libvirt watcher did not connect to %s: %s; log:\n%s"
                               % (a.libvirt_uri, lv, d.log_text()))
        B.say("# libvirt watcher: pid %d, connected to %s (%s redefinitions, %s failures)"
              % (wpid, a.libvirt_uri, lv.get("redefinitions"), lv.get("failures")))
    for n, o in reqs:
        r = B.call(d.sock, o)
        B.say("# %s -> %s" % (n, {k: (v if not isinstance(v, str) or len(v) < 60 else v[:57] + "...")
                                   for k, v in r.items() if k != "status"}))
    samples = [(0, proc_status(d.pid))]
    t0 = time.monotonic()
    for i in range(1, a.requests + 1):
        n, fr = frames[i % len(frames)]
        r = B.call(d.sock, None, raw=fr)
        if "error" in r:
            raise RuntimeError("request %s: %s" % (n, r["error"]))
        if i % 1000 == 0:
            samples.append((i, proc_status(d.pid)))
    elapsed = time.monotonic() - t0
    st = B.call(d.sock, {"version": 1, "type": "status"})["status"]
    B.say("# %d requests in %.1f s (%.0f/s); daemon counters: %s"
          % (a.requests, elapsed, a.requests / elapsed, st.get("requests")))
    B.say("# %8s %8s %8s %8s %8s %8s" % ("requests", "VmRSS", "VmHWM", "RssAnon", "RssFile", "VmData"))
    for i, s in samples:
        B.say("# %8d %8d %8d %8d %8d %8d" % (i, s["VmRSS"], s["VmHWM"], s["RssAnon"], s["RssFile"],
                                             s["VmData"]))
    rss = {i: s["VmRSS"] for i, s in samples}
    last = samples[-1][1]
    B.info("daemon.vmhwm_kib", last["VmHWM"], "KiB", "%d")
    B.result("daemon.vmrss_after_%d_kib" % a.requests, last["VmRSS"], "KiB", "<=", 8192, "%d")
    if 1000 in rss:
        B.result("daemon.vmrss_growth_1000_to_%d_kib" % a.requests, rss[a.requests] - rss[1000],
                 "KiB", "<=", 64, "%d",
                 "RssAnon %+d KiB" % (last["RssAnon"] - dict(samples)[1000]["RssAnon"]))
    top, roll, libs = smaps_breakdown(d.pid)
    B.say("# where the resident set is (/proc/PID/smaps after %d requests; %d shared objects mapped):"
          % (a.requests, libs))
    B.say("#   smaps_rollup: Rss %d KiB, Pss %d KiB, Anonymous %d KiB, Shared_Clean %d KiB, Private_Clean %d KiB"
          % (roll.get("Rss", 0), roll.get("Pss", 0), roll.get("Anonymous", 0),
             roll.get("Shared_Clean", 0), roll.get("Private_Clean", 0)))
    for k, v in top:
        B.say("#   %6d KiB  %s" % (v, k))
    B.info("daemon.rss_anon_after_%d_kib" % a.requests, last["RssAnon"], "KiB", "%d")
    B.info("daemon.rss_file_after_%d_kib" % a.requests, last["RssFile"], "KiB", "%d")
    B.info("daemon.pss_after_%d_kib" % a.requests, roll.get("Pss", 0), "KiB", "%d")
    if wpid:
        ws = proc_status(wpid)
        wtop, wroll, wlibs = smaps_breakdown(wpid, top=6)
        B.say("# the libvirt watcher (pcinuma-watcher, pid %d; %d shared objects mapped): "
              "Rss %d KiB, Pss %d KiB, Anonymous %d KiB" % (wpid, wlibs, wroll.get("Rss", 0),
                                                            wroll.get("Pss", 0), wroll.get("Anonymous", 0)))
        for k, v in wtop:
            B.say("#   %6d KiB  %s" % (v, k))
        B.info("watcher.vmrss_kib", ws["VmRSS"], "KiB", "%d")
        B.info("watcher.pss_kib", wroll.get("Pss", 0), "KiB", "%d")
        B.info("daemon_plus_watcher.pss_kib", roll.get("Pss", 0) + wroll.get("Pss", 0), "KiB", "%d")
    d.stop()
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for opt in ("--pcinumad", "--pcinumactl", "--mkfakesysfs", "--hosts", "--example"):
        ap.add_argument(opt, required=True)
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--libvirt-uri", default="test:///default",
                    help="the watcher's URI (default test:///default); 'none' runs pcinumad without it")
    B.main(lambda: run(ap.parse_args()))

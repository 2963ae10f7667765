#!/usr/bin/env python3
"""pcinumad's Prometheus metrics file (--metrics-file; docs/operations.md,
"Metrics"), issue 25 item 8.

pcinumad runs on the sample host with the fake watcher (FAKE_WATCHER: two
domains, one of them planned before its cells moved, so its mark is
stale), reporting 2 conflicts; the real hook asks it about a domain.
Checks, reading the file as node_exporter's textfile collector would:

  * `promtool check metrics` accepts it, at start and after every step
    (promtool from the PATH, or unpacked from Debian's prometheus package
    into the build tree without installing it: pcinumatest/promtool.py);
  * the verdicts by phase, policy and verdict; the request latency
    histogram (its count is the number of requests, its buckets
    cumulative); the watcher's redefinitions and conflicts (from its
    status messages); the stale mark found at define time; the host map
    rebuilds by trigger; the restarts into the plan the watcher reports
    (into the plan, or failed: started as asked); a failed policy reload
    (last_reload_success 0), then a good one;
  * it is rewritten after a change, within about a second, and at most
    once a second (pcinuma_metrics_writes_total over a burst of requests);
    atomically (no temporary file left; mode 0644); and removed when
    pcinumad stops;
  * a hard link left at the temporary file's name does not get written
    through; a file that cannot be written gives one warning, not one per
    change, and is written once it can be;
  * --metrics-file with a relative path is refused (exit 2).

Skipped (77), saying why, when no promtool can be had.  Output: "ok N - ..." lines and
"N passed, M failed"."""

import argparse
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from pcinumatest import FAKE_WATCHER, promtool
from pcinumatest.daemon import terminate
from pcinumatest.tap import Tap

PROMTOOL = None

TAP = Tap(diag_last=40)
check = TAP.check


def domain_xml(name, uuid, nodes, bdfs):
    cells = "".join("<cell id='%d' cpus='%d' memory='65536' unit='KiB'/>" % (i, i) for i in range(len(nodes)))
    tune = "".join("<memnode cellid='%d' mode='strict' nodeset='%d'/>" % (i, n) for i, n in enumerate(nodes))
    hd = "".join("<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' bus='0x%s' "
                 "slot='0x00' function='0x0'/></source></hostdev>" % b for b in bdfs)
    return ("<domain type='qemu'>\n  <name>%s</name>\n  <uuid>%s</uuid>\n  <memory unit='KiB'>262144</memory>\n"
            "  <vcpu placement='static'>%d</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
            "  <features>\n    <acpi/>\n  </features>\n  <cpu>\n    <numa>%s</numa>\n  </cpu>\n"
            "  <numatune>%s</numatune>\n  <devices>\n    <controller type='pci' index='0' model='pcie-root'/>\n"
            "    %s\n  </devices>\n</domain>\n" % (name, uuid, len(nodes), cells, tune, hd))


def parse(text):
    """{(name, frozenset(labels)): value} of every sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-z_]+)(?:\{(.*)\})? (\S+)$', line)
        if not m:
            raise ValueError("not a sample line: %r" % line)
        labels = frozenset(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def get(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


class Env:
    def __init__(self, a):
        self.a = a
        self.work = tempfile.mkdtemp(prefix="pcinuma-metrics-")
        os.chmod(self.work, 0o755)
        self.sys = os.path.join(self.work, "sys")
        subprocess.run([sys.executable, a.mkfakesysfs, os.path.join(a.hosts, "sample-4n.json"), self.sys],
                       check=True, stdout=subprocess.DEVNULL)
        self.fw = os.path.join(self.work, "fw")
        os.makedirs(os.path.join(self.fw, "domains"))
        os.makedirs(os.path.join(self.fw, "cmd"))
        self.policy = os.path.join(self.work, "policy.json")
        self.write_policy('{"default": {"policy": "require"}}\n')
        # vm-new: unplanned; vm-stale: planned for its cells on nodes 0
        # and 1, which then swapped nodes (an edit): its mark is stale.
        self.xml_new = domain_xml("vm-new", "22222222-0000-4000-8000-000000000001", [0, 1], ["13", "33"])
        plain = domain_xml("vm-stale", "22222222-0000-4000-8000-000000000002", [0, 1], ["13", "33"])
        r = subprocess.run([a.pcinumactl, "plan", "--sysfs-root", self.sys, "--policy", "require", "-"], input=plain,
                           capture_output=True, text=True, check=True)
        stale = re.sub(r"(cellid=.0. mode=.strict. nodeset=.)0", r"\g<1>X", r.stdout)
        stale = re.sub(r"(cellid=.1. mode=.strict. nodeset=.)1", r"\g<1>0", stale)
        stale = re.sub(r"(cellid=.0. mode=.strict. nodeset=.)X", r"\g<1>1", stale)
        for name, xml in (("vm-new", self.xml_new), ("vm-stale", stale)):
            with open(os.path.join(self.fw, "domains", name + ".xml"), "w") as f:
                f.write(xml)
        self.mdir = os.path.join(self.work, "node-exporter")
        os.makedirs(self.mdir)
        self.metrics = os.path.join(self.mdir, "pcinuma.prom")
        # Left where the temporary file goes: a hard link to another file
        # (a folder node_exporter's user may write could hold one).
        self.victim = os.path.join(self.work, "victim.txt")
        with open(self.victim, "w") as f:
            f.write("not pcinuma's\n")
        os.link(self.victim, self.metrics + ".tmp")
        self.sock = os.path.join(self.work, "hook.sock")
        self.conf = os.path.join(self.work, "hook.conf")
        with open(self.conf, "w") as f:
            f.write("socket = %s\ntimeout_ms = 5000\non_unreachable = allow\n" % self.sock)
        self.log = open(os.path.join(self.work, "daemon.log"), "w")
        env = dict(os.environ, FAKE_WATCHER_DIR=self.fw, FAKE_WATCHER_CONFLICTS="2")
        self.proc = subprocess.Popen(
            [a.pcinumad, "--sysfs-root", self.sys, "--socket", self.sock, "--libvirt-uri", "test:///default",
             "--watcher-program", FAKE_WATCHER, "--log-target", "stderr", "--policy-file", self.policy,
             "--metrics-file", self.metrics],
            stderr=self.log, stdin=subprocess.DEVNULL, env=env,
            # the unit's UMask: the file must still be readable by
            # node_exporter's user
            preexec_fn=lambda: os.umask(0o077))

    def send(self, msg):
        """Have the fake watcher send msg to pcinumad (its cmd/ directory)."""
        path = os.path.join(self.fw, "cmd", "%d.json" % time.monotonic_ns())
        with open(path + ".tmp", "w") as f:
            json.dump(msg, f)
        os.rename(path + ".tmp", path)

    def write_policy(self, text):
        with open(self.policy + ".tmp", "w") as f:
            f.write(text)
        os.rename(self.policy + ".tmp", self.policy)

    def hook(self, name, phase, sub, xml):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PCINUMA_SOCKET": self.sock, "PCINUMA_HOOK_CONF": self.conf}
        return subprocess.run([self.a.hook, name, phase, sub, "-"], input=xml, capture_output=True, text=True,
                              env=env, timeout=30)

    def status(self):
        r = subprocess.run([self.a.pcinumactl, "status", "--socket", self.sock, "--json"], capture_output=True,
                           text=True, timeout=10)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def read(self):
        try:
            with open(self.metrics) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait(self, pred, timeout=5.0):
        """The samples once pred(samples) holds (or the last ones)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.read()
            samples = parse(text) if text else {}
            if samples and pred(samples):
                return samples, text
            if time.monotonic() > deadline:
                return samples, text
            time.sleep(0.05)

    def promtool(self, what):
        text = self.read()
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and text, "promtool check metrics: %s" % what, r.stdout + r.stderr + text[:3000])

    def daemon_log(self):
        with open(os.path.join(self.work, "daemon.log")) as f:
            return f.read()

    def stop(self):
        terminate(self.proc)


def unwritable(a, work):
    """A metrics file that cannot be written (its folder is missing): one
    warning however many writes fail, the daemon serves on, and the file
    comes once the folder does, said so."""
    folder = os.path.join(work, "later")
    path = os.path.join(folder, "pcinuma.prom")
    sock = os.path.join(work, "later.sock")
    logpath = os.path.join(work, "later.log")
    with open(logpath, "w") as log:
        proc = subprocess.Popen([a.pcinumad, "--sysfs-root", os.path.join(work, "sys"), "--socket", sock,
                                 "--libvirt-uri", "none", "--log-target", "stderr",
                                 "--policy-file", os.path.join(work, "none.json"), "--metrics-file", path],
                                stderr=log, stdin=subprocess.DEVNULL)
    try:
        def status():
            r = subprocess.run([a.pcinumactl, "status", "--socket", sock, "--json"], capture_output=True, text=True,
                               timeout=10)
            return r.returncode == 0

        # Requests over at least 3.5 s and at least 20 of them (a slow
        # machine or a sanitizer build serves fewer in 3.5 s): a write
        # attempt at start and about one a second after.
        t0 = time.monotonic()
        served = 0
        while (time.monotonic() - t0 < 3.5 or served < 20) and time.monotonic() - t0 < 60:
            served += status()
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        with open(logpath) as f:
            text = f.read()
        warned = text.count("Failed to write the metrics file")
        check(served >= 20 and warned == 1 and proc.poll() is None,
              "an unwritable metrics file: one warning over %d requests in %.1f s, pcinumad serving" % (served, elapsed),
              "warnings: %d\n%s" % (warned, text[-2000:]))
        os.makedirs(folder)
        deadline = time.monotonic() + 5
        while not os.path.exists(path) and time.monotonic() < deadline:
            status()
            time.sleep(0.2)
        with open(logpath) as f:
            text = f.read()
        check(os.path.exists(path) and "Wrote the metrics file %s again" % path in text,
              "once its folder exists, the file is written, and the journal says so", text[-2000:])
    finally:
        terminate(proc)


def run(a):
    e = Env(a)
    try:
        # At start: the file, accepted, the watcher's counters once its
        # status and its plans are in.
        s, text = e.wait(lambda s: get(s, "pcinuma_redefinition_conflicts_total") == 2 and
                         (get(s, "pcinuma_redefinitions_total") or 0) >= 2 and
                         get(s, "pcinuma_stale_marks_total", phase="define") == 1)
        check(text != "", "the metrics file is written at start", e.daemon_log()[-3000:])
        e.promtool("at start")
        check(get(s, "pcinuma_build_info", version=e.status()["version"]) == 1, "build_info carries the version")
        check(get(s, "pcinuma_redefinitions_total") == 2 and get(s, "pcinuma_redefinition_conflicts_total") == 2,
              "the watcher's redefinitions and conflicts, from its status messages", text)
        check(get(s, "pcinuma_stale_marks_total", phase="define") == 1 and
              get(s, "pcinuma_stale_marks_total", phase="prepare") == 0, "the stale mark found at define time", text)
        check(get(s, "pcinuma_hostmap_rebuilds_total", trigger="start", result="success") == 1 and
              get(s, "pcinuma_hostmap_devices") == e.status()["hostmap"]["devices"] and
              get(s, "pcinuma_hostmap_nodes") == 4 and get(s, "pcinuma_domains_known") == 2 and
              get(s, "pcinuma_watcher_connected") == 1,
              "host map, domains and watcher gauges", text)
        mode = stat.S_IMODE(os.stat(e.metrics).st_mode)
        check(mode == 0o644 and os.listdir(e.mdir) == ["pcinuma.prom"], "mode 0644 under umask 077, no temporary file left",
              "%o %r" % (mode, os.listdir(e.mdir)))
        with open(e.victim) as f:
            victim = f.read()
        check(victim == "not pcinuma's\n" and os.stat(e.victim).st_nlink == 1,
              "a hard link left at pcinuma.prom.tmp: the file it links to is untouched", repr(victim[:200]))

        # Hook calls: a refusal (unplanned under require), an allowed
        # start (the planned domain), a migration of it.
        r1 = e.hook("vm-new", "prepare", "begin", e.xml_new)
        planned = open(os.path.join(e.fw, "domains", "vm-new.xml")).read()
        r2 = e.hook("vm-new", "prepare", "begin", planned)
        r3 = e.hook("vm-new", "migrate", "begin", planned)
        check((r1.returncode, r2.returncode) == (1, 0), "the hook: refused unplanned, allowed planned",
              "%r %r %r" % (r1, r2, r3))
        st = e.status()
        n_hook = st["requests"]["hook"]
        s, text = e.wait(lambda s: get(s, "pcinuma_request_duration_seconds_count", type="hook") == n_hook)
        check(get(s, "pcinuma_hook_verdicts_total", phase="prepare", policy="require", verdict="refuse") == 1 and
              get(s, "pcinuma_hook_verdicts_total", phase="prepare", policy="require", verdict="allow") == 1 and
              get(s, "pcinuma_hook_verdicts_total", phase="migrate", policy="require",
                  verdict="allow" if r3.returncode == 0 else "refuse") == 1,
              "verdicts by phase, policy and verdict", text)
        buckets = sorted((float(dict(k[1])["le"]) if dict(k[1])["le"] != "+Inf" else float("inf"), v)
                         for k, v in s.items()
                         if k[0] == "pcinuma_request_duration_seconds_bucket" and dict(k[1])["type"] == "hook")
        cum = [v for _, v in buckets]
        check(n_hook == 3 and cum == sorted(cum) and cum[-1] == n_hook and
              0 < get(s, "pcinuma_request_duration_seconds_sum", type="hook") < 3,
              "the hook latency histogram: cumulative buckets, count = %d requests, a sum in seconds" % n_hook, text)
        e.promtool("after hook calls")

        # Restarts into the plan, as the watcher reports them: one into
        # the plan, one whose plan did not start (started as asked), one
        # not done (not counted).
        check(get(s, "pcinuma_restarts_into_plan_total", result="planned") == 0 and
              get(s, "pcinuma_restarts_into_plan_total", result="failed") == 0, "no restart yet", text)
        for outcome in ("restarted", "fallback", "skipped"):
            e.send({"type": "restarted", "uuid": "22222222-0000-4000-8000-000000000001", "outcome": outcome,
                    "unplanned_us": 1000, "total_us": 2000})
        s, text = e.wait(lambda s: get(s, "pcinuma_restarts_into_plan_total", result="failed") == 1 and
                         get(s, "pcinuma_restarts_into_plan_total", result="planned") == 1)
        st = e.status()["restarts"]
        check(get(s, "pcinuma_restarts_into_plan_total", result="planned") == 1 and
              get(s, "pcinuma_restarts_into_plan_total", result="failed") == 1 and
              (st["restarted"], st["fallback"], st["skipped"]) == (1, 1, 1),
              "the watcher's restart reports: restarts_into_plan_total planned 1, failed 1 (a skipped one is not "
              "counted)", text + json.dumps(st))
        e.promtool("after restarts")

        # A broken policy: the reload fails, the last good policy stays.
        e.write_policy("{broken")
        e.proc.send_signal(signal.SIGHUP)
        s, text = e.wait(lambda s: get(s, "pcinuma_policy_reloads_total", result="failure") == 1)
        check(get(s, "pcinuma_last_reload_success", what="policy") == 0 and
              get(s, "pcinuma_policy_reloads_total", result="success") == 0 and
              get(s, "pcinuma_hostmap_rebuilds_total", trigger="reload", result="success") == 1,
              "a failed policy reload: counted, last_reload_success{policy} 0; the host map rebuilt", text)
        e.write_policy('{"default": {"policy": "require"}}\n')
        e.proc.send_signal(signal.SIGHUP)
        s, text = e.wait(lambda s: get(s, "pcinuma_policy_reloads_total", result="success") == 1)
        check(get(s, "pcinuma_last_reload_success", what="policy") == 1 and
              get(s, "pcinuma_last_reload_success", what="hostmap") == 1,
              "then a good one: last_reload_success 1", text)
        e.promtool("after reloads")

        # At most once a second: a burst of requests over about 2 s.
        time.sleep(1.1)
        w0 = get(parse(e.read()), "pcinuma_metrics_writes_total")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            e.status()
        elapsed = time.monotonic() - t0
        n_status = e.status()["requests"]["status"]
        s, text = e.wait(lambda s: get(s, "pcinuma_request_duration_seconds_count", type="status") >= n_status - 1,
                         timeout=3)
        writes = get(s, "pcinuma_metrics_writes_total") - w0
        check(get(s, "pcinuma_request_duration_seconds_count", type="status") >= n_status - 1 and 1 <= writes <= elapsed + 2,
              "a burst of %d requests in %.1f s: %d writes (at most one a second), the last one current"
              % (n_status, elapsed, writes), text[-1500:])
        e.promtool("after a burst")

        # Stopped: the file is gone.
        e.stop()
        check(e.proc.returncode == 0 and not os.path.exists(e.metrics), "removed when pcinumad stops",
              "rc %s, exists %s" % (e.proc.returncode, os.path.exists(e.metrics)))

        unwritable(a, e.work)

        # Bad and off.
        r = subprocess.run([a.pcinumad, "--metrics-file", "relative.prom"], capture_output=True, text=True, timeout=10)
        check(r.returncode == 2 and "--metrics-file" in r.stderr and "relative.prom" in r.stderr,
              "--metrics-file with a relative path: exit 2 naming it", r.stderr)
        r = subprocess.run([a.pcinumad, "--help"], capture_output=True, text=True, timeout=10)
        check("--metrics-file PATH|none" in r.stdout and "/var/lib/prometheus/node-exporter/pcinuma.prom" in r.stdout,
              "--help names the option and its default", r.stdout)
    finally:
        e.stop()
        shutil.rmtree(e.work, ignore_errors=True)


def main():
    global PROMTOOL
    ap = argparse.ArgumentParser()
    for o in ("pcinumad", "pcinumactl", "hook", "mkfakesysfs", "hosts", "promtool_cache"):
        ap.add_argument("--" + o.replace("_", "-"), required=True)
    a = ap.parse_args()
    PROMTOOL, why = promtool.find(a.promtool_cache)
    if not PROMTOOL:
        print("1..0 # SKIP %s" % why)
        sys.exit(77)
    print("# promtool: %s" % PROMTOOL)
    run(a)
    sys.exit(TAP.finish())


if __name__ == "__main__":
    main()

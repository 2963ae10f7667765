#!/usr/bin/env python3
"""pcinumad asks its libvirt watcher to look again only at the domains a
change touches (issue 13, "work in proportion to what changed").

pcinumad runs on a fixture tree with --watch-udev yes, and with
tests/lib/pcinumatest/fake_watcher.py as its watcher: a tiny libvirt whose
persistent definitions are files, which records every recheck it is asked
for, every plan answer and every redefinition.  The test plays udevd as
test_udev.py does (netlink multicast, as root), after editing the tree.

Domains (sample-4n host, policy legacy; vm-refused under require):
  vm-gpu      0000:13:00.0            vm-vf   0000:14:00.2 (a VF of 14:00.0)
  vm-mdev     mdev ...c01 (parent 0000:91:00.0)
  vm-other    0000:53:00.0            vm-refused  0000:01:00.0 (no NUMA node)

Checked: a udev event on device X rechecks only the domains using X (and
through a PF, an mdev's parent); one on a device no domain uses rechecks
nothing; a brief remove + add rechecks and redefines nothing; a device that
stays gone is acted on once its grace period ends; a reload with the policy
renamed (alias, rule names) rechecks nothing, one that changes one domain's
mode rechecks that domain only (and redefines nothing when its placement
is the same), one that makes a domain's mark stale redefines it saying which
part (PCINUMA_STALE_MARK); a refused domain's summary comes at notice priority once,
then at debug on every recheck, until it changes; a change of the host's
nodes rechecks every domain.  Ends with 'N passed, M failed'.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from pcinumatest import FAKE_WATCHER
from pcinumatest.fake_watcher import read_events
from pcinumatest import uevent as U
from pcinumatest.daemon import terminate
from pcinumatest.tap import Tap

LOG_NOTICE, LOG_DEBUG = 5, 7
MDEV = "4b20d080-1b54-4048-85b3-a6a62d165c01"
DOMS = {
    "vm-gpu": ("11111111-0000-4000-8000-000000000001", "pci", "0000:13:00.0"),
    "vm-vf": ("11111111-0000-4000-8000-000000000002", "pci", "0000:14:00.2"),
    "vm-mdev": ("11111111-0000-4000-8000-000000000003", "mdev", MDEV),
    "vm-other": ("11111111-0000-4000-8000-000000000004", "pci", "0000:53:00.0"),
    "vm-refused": ("11111111-0000-4000-8000-000000000005", "pci", "0000:01:00.0"),
}
UUID = {n: v[0] for n, v in DOMS.items()}
NAME = {v[0]: n for n, v in DOMS.items()}
TAP = Tap(diag_last=40)
check = TAP.check
seq = [9100]


class Failure(Exception):
    pass


def domain_xml(name, uuid, kind, dev):
    if kind == "pci":
        d, b, rest = dev.split(":")
        s, f = rest.split(".")
        hd = ("<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x%s' bus='0x%s' "
              "slot='0x%s' function='0x%s'/></source></hostdev>" % (d, b, s, f))
    else:
        hd = ("<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='%s'/>"
              "</source></hostdev>" % dev)
    cells = "".join("<cell id='%d' cpus='%d' memory='65536' unit='KiB'/>" % (i, i) for i in range(4))
    tune = "".join("<memnode cellid='%d' mode='strict' nodeset='%d'/>" % (i, i) for i in range(4))
    return ("<domain type='qemu'>\n  <name>%s</name>\n  <uuid>%s</uuid>\n  <memory unit='KiB'>262144</memory>\n"
            "  <vcpu placement='static'>4</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
            "  <features>\n    <acpi/>\n  </features>\n  <cpu>\n    <numa>%s</numa>\n  </cpu>\n"
            "  <numatune>%s</numatune>\n  <devices>\n    <controller type='pci' index='0' model='pcie-root'/>\n"
            "    %s\n  </devices>\n</domain>\n" % (name, uuid, cells, tune, hd))


class Env:
    def __init__(self, a):
        self.a = a
        self.work = tempfile.mkdtemp(prefix="pcinuma-recheck-")
        os.chmod(self.work, 0o755)
        self.sys = os.path.join(self.work, "sys")
        subprocess.run([sys.executable, a.mkfakesysfs, os.path.join(a.hosts, "sample-4n.json"), self.sys],
                       check=True, stdout=subprocess.DEVNULL)
        self.held = os.path.join(self.work, "held")
        os.makedirs(self.held)
        self.fw = os.path.join(self.work, "fw")
        os.makedirs(os.path.join(self.fw, "domains"))
        for name, (uuid, kind, dev) in DOMS.items():
            with open(os.path.join(self.fw, "domains", uuid + ".xml"), "w") as f:
                f.write(domain_xml(name, uuid, kind, dev))
        self.policy = os.path.join(self.work, "policy.json")
        self.write_policy({"default": {"policy": "legacy"},
                           "rules": [{"match": {"name": "vm-refused"}, "policy": "require"}]})
        self.sock = os.path.join(self.work, "hook.sock")
        self.log = open(os.path.join(self.work, "daemon.log"), "w")
        env = dict(os.environ, FAKE_WATCHER_DIR=self.fw)
        self.proc = subprocess.Popen(
            [a.pcinumad, "--sysfs-root", self.sys, "--socket", self.sock, "--libvirt-uri", "test:///default",
             "--watcher-program", FAKE_WATCHER, "--log-target", "stderr",
             "--policy-file", self.policy, "--watch-udev", "yes", "--metrics-file", "none"],
            stderr=self.log, stdin=subprocess.DEVNULL, env=env)

    def write_policy(self, obj):
        with open(self.policy + ".tmp", "w") as f:
            json.dump(obj, f)
        os.rename(self.policy + ".tmp", self.policy)

    def status(self):
        r = subprocess.run([self.a.pcinumactl, "status", "--socket", self.sock, "--json"],
                           capture_output=True, text=True, timeout=10)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def events(self):
        return read_events(self.fw)

    def log_text(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def wait(self, cond, what, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = cond()
            if v:
                return v
            time.sleep(0.05)
        raise Failure("timed out waiting for %s\n%s" % (what, self.log_text()[-3000:]))

    def settled(self, gen=None):
        """Wait until pcinumad rebuilt its map (generation > gen) and the
        fake watcher has handled every recheck pcinumad sent (it logs
        'idle' after the last one); returns the status."""
        def ok():
            # events first: pcinumad counts a plan before the fake logs it
            ev = self.events()
            st = self.status()
            if not st or (gen is not None and st["hostmap"]["generation"] <= gen):
                return None
            rc = st["rechecks"]
            rechecks = sum(1 for e in ev if e["ev"] == "recheck")
            plans = sum(1 for e in ev if e["ev"] == "plan")
            if rechecks == rc["domain_rechecks"] + rc["full_rechecks"] and plans == rc["plans"] \
                    and ev and ev[-1]["ev"] == "idle":
                return st
            return None
        return self.wait(ok, "pcinumad and the fake watcher to settle")

    def mark(self):
        return len(self.events())

    def since(self, mark, ev=None):
        out = self.events()[mark:]
        return [e for e in out if ev is None or e["ev"] == ev]

    def dev(self, bdf):
        return os.path.join(self.sys, "bus", "pci", "devices", bdf)

    def set_driver(self, bdf, driver):
        link = os.path.join(self.dev(bdf), "driver")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink("../../../../../../bus/pci/drivers/%s" % driver, link)
        # the kernel's uevent file names the bound driver too
        ue = os.path.join(self.dev(bdf), "uevent")
        with open(ue) as f:
            lines = [l for l in f.read().splitlines() if not l.startswith("DRIVER=")]
        with open(ue, "w") as f:
            f.write("\n".join(["DRIVER=%s" % driver] + lines) + "\n")

    def uevent(self, action, bdf):
        seq[0] += 1
        # the link's text is relative to bus/pci/devices, wherever it is now
        link = self.dev(bdf) if os.path.lexists(self.dev(bdf)) else os.path.join(self.held, bdf)
        real = os.path.normpath(os.path.join(os.path.dirname(self.dev(bdf)), os.readlink(link)))
        devpath = real[len(os.path.normpath(self.sys)):]
        U.send(U.uevent(action, devpath, "pci", seq[0]))

    def stop(self):
        """SIGTERM; pcinumad's exit status (0: clean, and no leak under
        a sanitizer build, whose leak check fails the exit)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            return "did not stop within 30 s"

    def close(self):
        terminate(self.proc)
        shutil.rmtree(self.work, ignore_errors=True)


def hup(e, st0):
    """SIGHUP; wait for the reload (a new policy load) and for the watcher
    to handle what it sent."""
    e.proc.send_signal(signal.SIGHUP)
    e.wait(lambda: (e.status() or {}).get("policy", {}).get("loaded_at_usec") != st0["policy"]["loaded_at_usec"],
           "the reload")
    return e.settled()


def rechecked(e, mark):
    return sorted(NAME.get(x["uuid"], x["uuid"]) for x in e.since(mark, "recheck"))


def event_rechecks(e, what, bdf, driver, want):
    """Bind device bdf to driver (a udev 'bind'); only the domains in want
    are rechecked, none redefined."""
    # The fixture first, then the generation to wait past: a rescan caused
    # by another test's udev message (they reach every listener) then
    # either comes before the edit or already sees it.
    m = e.mark()
    e.set_driver(bdf, driver)
    st0 = e.status()
    e.uevent("bind", bdf)
    e.settled(st0["hostmap"]["generation"])
    got = rechecked(e, m)
    check(got == sorted(want), "udev bind of %s (%s) rechecks %s" % (bdf, what, sorted(want) or "nothing"),
          "rechecked: %r" % got)
    plans = sorted(NAME.get(x["uuid"]) for x in e.since(m, "plan"))
    check(plans == sorted(want) and not e.since(m, "define"),
          "%s: only those are read again (%r), none redefined" % (bdf, plans), json.dumps(e.since(m)))


def run(a):
    e = Env(a)
    try:
        st = e.settled()
        check(st["rechecks"]["domains_known"] == len(DOMS), "every domain planned at connect is cached (%d)"
              % st["rechecks"]["domains_known"], json.dumps(st["rechecks"]))
        first = {NAME[x["uuid"]]: x for x in e.events() if x["ev"] == "plan"}
        check(set(first) == set(DOMS), "the watcher planned every domain at connect", json.dumps(e.events()))
        check(first["vm-refused"]["prio"] == LOG_NOTICE and "not planned" in (first["vm-refused"]["summary"] or ""),
              "the refused domain's summary comes at notice priority the first time", json.dumps(first["vm-refused"]))

        # 1. one device each: a GPU, a VF's PF, an mdev's parent, a device
        # no domain uses
        event_rechecks(e, "a GPU", "0000:13:00.0", "nvidia", ["vm-gpu"])
        event_rechecks(e, "the PF of vm-vf's VF", "0000:14:00.0", "vfio-pci", ["vm-vf"])
        event_rechecks(e, "the parent of vm-mdev's mdev", "0000:91:00.0", "vfio-pci", ["vm-mdev"])
        event_rechecks(e, "used by no domain", "0000:78:00.0", "nvidia", [])

        # 2. the refused domain, rechecked three times: debug each time
        m = e.mark()
        for drv in ("nvme", "vfio-pci", "nvme"):
            e.set_driver("0000:01:00.0", drv)
            st0 = e.status()
            e.uevent("bind", "0000:01:00.0")
            e.settled(st0["hostmap"]["generation"])
        plans = [x for x in e.since(m, "plan") if NAME[x["uuid"]] == "vm-refused"]
        check(len(plans) == 3 and all(x["prio"] == LOG_DEBUG for x in plans),
              "a refused domain rechecked 3 times: its unchanged summary comes at debug priority",
              json.dumps(plans))
        check(e.status()["rechecks"]["logged_once"] >= 3, "status counts the summaries told once",
              json.dumps(e.status()["rechecks"]))

        # 3. a brief remove + add of vm-gpu's device: nothing
        m = e.mark()
        n0 = e.status()["hostmap"]["devices"]
        os.rename(e.dev("0000:13:00.0"), os.path.join(e.held, "0000:13:00.0"))
        st0 = e.status()
        e.uevent("remove", "0000:13:00.0")
        st = e.settled(st0["hostmap"]["generation"])
        check(st["rechecks"]["removals_held"] == 1 and st["hostmap"]["devices"] == n0 - 1,
              "a removed device is held for its grace period", json.dumps(st["rechecks"]))
        os.rename(os.path.join(e.held, "0000:13:00.0"), e.dev("0000:13:00.0"))
        st = e.status()
        e.uevent("add", "0000:13:00.0")
        st = e.settled(st["hostmap"]["generation"])
        check(st["rechecks"]["removals_held"] == 0 and not e.since(m, "recheck") and not e.since(m, "define"),
              "removed and added back within the grace period: no recheck, no redefinition",
              json.dumps(e.since(m)))

        # 4. vm-other's device gone for good: rechecked once the grace
        # period is over (under legacy its plan then changes)
        m = e.mark()
        os.rename(e.dev("0000:53:00.0"), os.path.join(e.held, "0000:53:00.0"))
        st0 = e.status()
        e.uevent("remove", "0000:53:00.0")
        e.settled(st0["hostmap"]["generation"])
        check(not e.since(m, "recheck"), "a removal is not acted on at once")
        e.wait(lambda: e.since(m, "recheck"), "the recheck after the grace period", timeout=30)
        e.settled()
        check(rechecked(e, m) == ["vm-other"] and e.status()["rechecks"]["removals_held"] == 0,
              "still gone after the grace period: the domain using it is rechecked, only it",
              json.dumps(e.since(m)))
        m = e.mark()
        os.rename(os.path.join(e.held, "0000:53:00.0"), e.dev("0000:53:00.0"))
        st0 = e.status()
        e.uevent("add", "0000:53:00.0")
        e.settled(st0["hostmap"]["generation"])
        check(rechecked(e, m) == ["vm-other"], "and rechecked when it comes back", json.dumps(e.since(m)))

        # 5. reloads
        m = e.mark()
        st0 = e.status()
        e.write_policy({"default": {"policy": "legacy"},
                        "rules": [{"match": {"name": "no-such-vm-*"}, "policy": "off"},
                                  {"match": {"name": "vm-refus*"}, "policy": "required"}]})
        st = hup(e, st0)
        check(st["policy"]["loaded_at_usec"] != st0["policy"]["loaded_at_usec"], "the renamed policy is loaded")
        check(not e.since(m), "a reload with the policy renamed (alias, rules) rechecks nothing",
              json.dumps(e.since(m)))
        m = e.mark()
        e.write_policy({"default": {"policy": "legacy"},
                        "rules": [{"match": {"name": "vm-other"}, "policy": "preferred"},
                                  {"match": {"name": "vm-refus*"}, "policy": "required"}]})
        st = hup(e, st)
        check(rechecked(e, m) == ["vm-other"], "a reload that changes one domain's mode rechecks it only",
              json.dumps(e.since(m)))
        check(not e.since(m, "define"), "... and does not redefine it: its devices stay where they are",
              json.dumps(e.since(m)))
        # the refused domain under socket: a new summary, told again
        m = e.mark()
        st = e.status()
        e.write_policy({"default": {"policy": "legacy"},
                        "rules": [{"match": {"name": "vm-other"}, "policy": "preferred"},
                                  {"match": {"name": "vm-refus*"}, "policy": "socket"}]})
        hup(e, st)
        plans = e.since(m, "plan")
        check(rechecked(e, m) == ["vm-refused"] and len(plans) == 1 and plans[0]["prio"] == LOG_NOTICE,
              "a refusal whose summary changed is told again at notice priority", json.dumps(e.since(m)))

        # 5b. vm-other under migration: same-topology (the default is
        # refuse): its mark (migratable="no") is stale, and the
        # redefinition says which part
        m = e.mark()
        st = e.status()
        e.write_policy({"default": {"policy": "legacy"},
                        "rules": [{"match": {"name": "vm-other"}, "policy": "preferred", "migration": "same-topology"},
                                  {"match": {"name": "vm-refus*"}, "policy": "socket"}]})
        hup(e, st)
        plans = [x for x in e.since(m, "plan") if NAME[x["uuid"]] == "vm-other"]
        stale = "migratable: mark says no, policy migration=same-topology"
        check(len(plans) == 1 and plans[0]["redefine"] and ("its mark was stale: " + stale) in (plans[0]["summary"] or ""),
              "a stale mark's redefinition says which part is stale", json.dumps(e.since(m)))
        check(plans and ["PCINUMA_STALE_MARK", stale] in plans[0].get("fields", []),
              "... and its journal fields have PCINUMA_STALE_MARK", json.dumps(plans))

        # 6. the host's nodes change (a SLIT edit, seen at SIGHUP): every domain
        m = e.mark()
        st = e.status()
        with open(os.path.join(e.sys, "devices", "system", "node", "node0", "distance"), "w") as f:
            f.write("10 13 32 32\n")
        st2 = hup(e, st)
        check(rechecked(e, m) == ["*"] and st2["rechecks"]["full_rechecks"] == st["rechecks"]["full_rechecks"] + 1,
              "a change of the host's distances rechecks every domain", json.dumps(e.since(m)))
        rc = e.stop()
        check(rc == 0, "pcinumad exits 0 on SIGTERM (cache and holds freed)", "exit status %r\n%s"
              % (rc, e.log_text()[-3000:]))
    except Failure as ex:
        check(False, "the test ran to its end", str(ex))
    finally:
        e.close()


def main():
    ap = argparse.ArgumentParser()
    for o in ("pcinumad", "pcinumactl", "mkfakesysfs", "hosts"):
        ap.add_argument("--" + o, required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("1..0 # SKIP sending udev's netlink multicast needs root")
        sys.exit(77)
    run(a)
    sys.exit(TAP.finish())


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""libvirt suite: migration gated on topology between three hosts on one
machine (issue 17, part 3).

    test_migrate.py --pcinumad P --pcinumactl P --hook P \
        --mkfakesysfs P --hosts DIR --workdir DIR \
        [--transport auto|netns|unix] [-v]

Three hosts A, B and C, each a private session libvirtd (with its own
host_uuid: libvirt refuses to migrate to itself) and its own pcinumad on
its own fixture host (--sysfs-root): fleet-a, fleet-b (the same topology,
other bus numbers and host bridge names) and fleet-c (one GPU moved to the
other socket).  The hook wrapper is installed in /etc/libvirt/hooks/qemu.d
before any libvirtd starts (libvirt reads hooks only there and only at
start), as in test_integration.py (pcinumatest.lvenv); it picks the pcinumad of the libvirtd
that runs it by the HOME libvirt passes (each session has its own).

Two modes (--transport; auto, the default, takes the first that works):

* netns: each libvirtd runs in its own network namespace (pcinumatest.netns:
  started as root through `nsenter --net`, then setpriv to the session
  user), with its own address; A is linked to B and to C by veth pairs
  (10.231.1.0/24 and 10.231.2.0/24, no bridge), and each libvirtd also
  listens on TCP there (no TLS, auth_tcp "none": a private test network).
  `virsh migrate --offline --persistent --p2p NAME qemu+tcp://ADDR/session`
  asks A's libvirtd to migrate, and A's libvirtd itself talks to the
  destination over the veth (Prepare, where the destination runs its
  migrate hook, and Finish).  The veth's byte counters show that the
  domain went over it.  virsh and pcinumad reach each libvirtd on its Unix
  socket (the filesystem is shared), and the hook wrapper still picks the
  pcinumad by HOME.  Namespaces and links carry the test's pid in their
  names; they are deleted on every exit path (and a killed run's are
  reaped by the next), and the last check is that none is left.
* unix: when namespaces cannot be made (not root, no `ip` or `nsenter`,
  `ip netns add` fails, as where /run/netns cannot be made or mounted),
  the test says so in a loud line and falls back to three session
  daemons on Unix sockets: `virsh migrate --offline --persistent NAME
  qemu+unix:///session?socket=...` is then driven by the client, which
  talks to both daemons.  What makes the hosts distinct for pcinuma (host
  map, policy, socket, the libvirtd that calls the hook) is all there
  still; only the network path between the daemons is not tested.
  --transport netns fails instead of falling back.

Checks:
* A domain with two GPUs and an RDMA NIC (one switch of node 0, one GPU of
  node 1) defined on A is planned, its mark migratable="yes" with A's
  fingerprint and each device's position.
* The hook binary in migrate mode on B, given the live-migration XML
  (`virsh dumpxml --migratable`) on stdin: exit 0, stdout the domain with
  B's devices as hostdev sources, the guest side unchanged.
* `virsh migrate --offline --persistent` A->B: accepted (netns: over the
  A-B veth, whose counters grew by at least the domain's XML, and A->C
  over the A-C veth); B's definition
  has B's devices (as fleet-b numbers them), the guest topology identical
  to A's (controllers, guest addresses, cells), the mark with B's
  fingerprint, and B's plan of it is idempotent (`pcinumactl plan` on B's
  host prints it unchanged; the watcher leaves it alone).
* A->C: refused by C's hook, naming the devices and what differs; the
  domain is not on C.
* Each host's policy says "migration": "same-topology", a fleet's opt-in
  (the default, "refuse", is the next case).
* B's policy with "migration": "refuse": A->B refused by B's hook; a
  domain planned on A under "migration": "refuse" (marked migratable="no")
  refused as before.
* A domain with an mdev (a vGPU of node 1's GPU on A): its mark records the
  mdev's type and its parent's position; A->B goes to B's mdev of that
  type on node 1's GPU, named in the source and the mark.
* B with a domain defined on the GPU A->B gave mig-1's first device: A->B
  gives mig-1 the other GPU of that switch (pcinumad's recheck cache knows
  B's domains' devices); with that one used too, B's hook accepts with a
  warning naming the device and the domain that uses it.

Output: TAP-like "ok N - ..." lines; exit 1 on any failure, 77 when
libvirtd or virsh is missing.
"""

import difflib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET

from pcinumatest.lvenv import Daemon, LvSession, domain_xml, is_planned, write
from pcinumatest.netns import Net, NetnsSession, NetnsUnavailable
from pcinumatest.session import HookDir, reachable_copy
from pcinumatest.suite import run_session_suite, session_args

VIRSH_TIMEOUT = 60
NS = "urn:pcinuma:topology:1"
MARK = "{%s}topology" % NS
DEVICE = "{%s}device" % NS

# fleet-a's devices: GPU and NIC of node 0's switch, a GPU of node 1's.
DEVICES_A = ["0000:18:00.0", "0000:1c:00.0", "0000:9a:00.0"]
# fleet-a's mdev (on node 1's GPU 9b:00.0) and fleet-b's on node 1's (c6:00.0).
MDEV_A = "a0000000-0000-4000-8000-00000000009b"
MDEV_B = "b0000000-0000-4000-8000-0000000000c6"

# netns mode: A linked to B and to C; each host listens on its first link.
LINKS = [("a", "b"), ("a", "c")]
LISTEN_PEER = {"a": "b", "b": "a", "c": "a"}


def bdf_of(addr):
    return "%04x:%02x:%02x.%x" % (int(addr.get("domain"), 0), int(addr.get("bus"), 0),
                                  int(addr.get("slot"), 0), int(addr.get("function"), 0))


def sources(xml):
    root = ET.fromstring(xml)
    return [bdf_of(hd.find("source/address")) for hd in root.findall("devices/hostdev")]


def guest_side(xml):
    """What the guest sees, without the host side: the domain with its
    hostdev sources, the mark and libvirt's run-time-only bits removed,
    as canonical text."""
    root = ET.fromstring(xml)
    for hd in root.findall("devices/hostdev"):
        src = hd.find("source")
        if src is not None:
            hd.remove(src)
    md = root.find("metadata")
    if md is not None:
        root.remove(md)
    # libvirt keeps controllers in index order; pcinuma's rewrite leaves the
    # pruned-and-restored ones where they were: the order is not topology.
    devs = root.find("devices")
    ctrls = devs.findall("controller")
    if ctrls:
        at = list(devs).index(ctrls[0])
        for c in ctrls:
            devs.remove(c)
        for k, c in enumerate(sorted(ctrls, key=lambda c: (c.get("type") or "", int(c.get("index") or 0)))):
            devs.insert(at + k, c)
    for el in root.iter():
        el.text = (el.text or "").strip() or None
        el.tail = None
    return ET.tostring(root, encoding="unicode")


def shape(position):
    """A mark's position without the names after each '@' (the host's own
    bus numbers and bridge names, which differ between A and B)."""
    return re.sub(r"@\S+", "", position or "") or None


def mark_of(xml):
    root = ET.fromstring(xml)
    return root.find("metadata/" + MARK)


class Test:
    def __init__(self, a, tap):
        self.a = a
        self.tap = tap
        self.tmp = None
        self.hook = None
        self.sess = {}
        self.daemons = {}
        self.net = None

    def check(self, ok, what, diag=None, note=None):
        return self.tap.check(bool(ok), what, diag, note)

    def diag(self, text):
        self.tap.diag(text)

    # -- setup -----------------------------------------------------------
    def policy(self, host, migration="same-topology"):
        # A fleet: migration same-topology, its opt-in (the default refuses).
        d = {"policy": "require", "migration": migration}
        write(os.path.join(self.tmp, "policy-%s.json" % host),
              json.dumps({"default": d, "hook": {"timeout_ms": 10000, "on_unreachable": "allow"}}) + "\n")

    def setup_net(self):
        if self.a.transport == "unix":
            self.fallback("--transport unix")
            return
        net = Net("abc", LINKS)
        try:
            net.setup()
        except NetnsUnavailable as e:
            if self.a.transport == "netns":
                raise RuntimeError("network namespaces: %s" % e)
            self.fallback(str(e))
            return
        self.net = net
        self.check(True, "network namespaces %s linked by veth pairs %s"
                   % (", ".join(net.ns(h) for h in "abc"),
                      ", ".join("%s-%s (%s, %s)" % (x, y, net.addr(x, y), net.addr(y, x)) for x, y in LINKS)))

    def fallback(self, why):
        line = ("#### NO NETWORK NAMESPACES (%s): falling back to three session libvirtds on Unix sockets; "
                "the migrations do not cross a network ####" % why)
        print(line, flush=True)
        print(line, file=sys.stderr, flush=True)

    def setup(self):
        a = self.a
        os.makedirs(a.workdir, exist_ok=True)
        self.setup_net()
        self.tmp = tempfile.mkdtemp(prefix="pcinuma-mig-", dir="/tmp")
        os.chmod(self.tmp, 0o755)
        self.hook_copy = reachable_copy(a.hook, self.tmp)
        self.sysfs = {}
        for h in "abc":
            path = os.path.join(self.tmp, "sys-fleet-" + h)
            r = subprocess.run([sys.executable, a.mkfakesysfs,
                                os.path.join(a.hosts, "fleet-%s.json" % h), path],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
            if r.returncode != 0:
                raise RuntimeError("mkfakesysfs fleet-%s: %s" % (h, r.stdout))
            self.sysfs[h] = path
            rundir = os.path.join(self.tmp, "run-" + h)
            os.makedirs(rundir)
            os.chmod(rundir, 0o755)
            write(os.path.join(rundir, "hook.conf"), "socket = %s\ntimeout_ms = 10000\non_unreachable = allow\n"
                  % os.path.join(rundir, "hook.sock"))
            self.policy(h)
        # The wrapper: HOME (each session's own) -> that host's pcinumad.
        self.homes = os.path.join(self.tmp, "homes")
        write(self.homes, "")
        self.hook = HookDir("pcinuma-mig-" + secrets.token_hex(4))
        self.hook.install(
            "#!/bin/sh\n"
            "# pcinuma migration test (%s); removed when the test ends\n"
            "exec 3< %s || exit 0\n"
            "while read -r h run <&3; do\n"
            "  if [ \"$h\" = \"$HOME\" ]; then\n"
            "    exec 3<&-\n"
            "    PCINUMA_SOCKET=$run/hook.sock PCINUMA_HOOK_CONF=$run/hook.conf exec %s \"$@\"\n"
            "  fi\n"
            "done\n"
            "exit 0\n" % (self.tmp, self.homes, self.hook_copy))
        logdir = os.path.join(a.workdir, "logs")
        os.makedirs(logdir, exist_ok=True)
        for h in "abc":
            if self.net:
                s = NetnsSession(self.net, h, self.net.addr(h, LISTEN_PEER[h]), host_uuid=str(uuidlib.uuid4()))
            else:
                s = LvSession(host_uuid=str(uuidlib.uuid4()))
            self.sess[h] = s
            rundir = os.path.join(self.tmp, "run-" + h)
            with open(self.homes, "a") as f:
                f.write("%s %s\n" % (s.home, rundir))
            hostlog = os.path.join(logdir, h)
            os.makedirs(hostlog, exist_ok=True)
            d = Daemon(a, rundir, self.sysfs[h], os.path.join(self.tmp, "policy-%s.json" % h), s.uid, hostlog)
            d.start(s.uri, wait_connected=True)
            self.daemons[h] = d
        self.check(True, "three session libvirtds%s, each with its own pcinumad on fleet-a, fleet-b, fleet-c"
                   % (", each in its namespace" if self.net else " on Unix sockets"))

    def cleanup(self):
        for s in self.sess.values():
            try:
                s.stop()
            except Exception as e:   # noqa: BLE001
                self.diag("stopping a libvirtd: %s" % e)
        for d in self.daemons.values():
            d.stop()
            for p in d.logs:
                self.diag("pcinumad log: %s" % p)
        if self.hook is not None:
            self.hook.remove()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self.net is not None:
            self.net.teardown()
            left = self.net.leftovers()
            self.check(not left, "teardown: no namespace or link of this run is left", " ".join(left))

    # -- helpers ---------------------------------------------------------
    def wait_planned(self, h, name, timeout=5.0):
        t0 = time.monotonic()
        while True:
            xml = self.sess[h].dumpxml(name)
            if is_planned(xml) or time.monotonic() - t0 > timeout:
                return xml
            time.sleep(0.05)

    def migrate(self, name, src, dst):
        """netns: --p2p to the destination's TCP address (src's libvirtd
        connects to it over the veth); unix: the client to both sockets."""
        if self.net:
            args = ["--p2p", name, self.sess[dst].tcp_uri]
        else:
            args = [name, self.sess[dst].uri]
        try:
            r = self.sess[src].virsh("migrate", "--offline", "--persistent", *args,
                                     timeout=VIRSH_TIMEOUT, quiet=False)
            return r.returncode, (r.stdout + r.stderr).strip()
        except subprocess.TimeoutExpired:
            return None, "timed out"

    def crossed(self, src, dst, before, size, what):
        """netns: src's end of the src-dst veth sent, and dst's end
        received, at least size bytes since before (counters())."""
        if not self.net:
            return
        after = self.counters(src, dst)
        sent, got = after[0] - before[0], after[1] - before[1]
        self.check(sent >= size and got >= size,
                   "%s went over the %s-%s veth: %s's end sent %d bytes, %s's received %d (the domain's "
                   "XML is %d)" % (what, src.upper(), dst.upper(), src.upper(), sent, dst.upper(), got, size),
                   "counters before %s, after %s" % (before, after))

    def counters(self, src, dst):
        """(bytes src's end sent, bytes dst's end received) on the src-dst veth."""
        if not self.net:
            return None
        return self.net.counters(src, dst)[1], self.net.counters(dst, src)[0]

    def on(self, h, name):
        return self.sess[h].virsh("dominfo", name).returncode == 0

    def fingerprint(self, h):
        r = subprocess.run([self.a.pcinumactl, "fingerprint", "--sysfs-root", self.sysfs[h]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        return r.stdout.split("\n", 1)[0].strip()

    def run_hook(self, h, name, xml):
        s = self.sess[h]
        rundir = os.path.join(self.tmp, "run-" + h)
        env = dict(s.env)
        env["PCINUMA_SOCKET"] = os.path.join(rundir, "hook.sock")
        env["PCINUMA_HOOK_CONF"] = os.path.join(rundir, "hook.conf")
        return subprocess.run([self.hook_copy, name, "migrate", "begin", "-"], input=xml,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=30, user=s.uid, group=s.gid, extra_groups=[])

    # -- the cases -------------------------------------------------------
    def idempotent_on(self, h, name, xml, what):
        """h's plan of the migrated definition xml changes nothing, and h's
        watcher leaves it alone."""
        path = os.path.join(self.tmp, "on-%s-%s.xml" % (h, name))
        write(path, xml)
        p = subprocess.run([self.a.pcinumactl, "plan", "--sysfs-root", self.sysfs[h], "--policy-file",
                            os.path.join(self.tmp, "policy-%s.json" % h), path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.check(p.returncode == 0 and p.stdout == xml,
                   "%s: %s's plan of the migrated definition changes nothing (idempotent)" % (what, h.upper()),
                   "exit %d: %s" % (p.returncode, p.stderr))
        time.sleep(1.0)
        self.check(self.sess[h].dumpxml(name) == xml,
                   "%s: %s's watcher leaves the migrated definition alone" % (what, h.upper()))

    def run(self):
        name = "mig-1"
        self.sess["a"].define(domain_xml(name, DEVICES_A, memnodes={0: "0", 1: "1"}))
        planned = self.wait_planned("a", name)
        mk = mark_of(planned)
        fp_a, fp_b, fp_c = self.fingerprint("a"), self.fingerprint("b"), self.fingerprint("c")
        self.check(fp_a == fp_b and fp_a != fp_c, "fleet-a and fleet-b have one fingerprint, fleet-c another",
                   "%s %s %s" % (fp_a, fp_b, fp_c))
        devs = mk.findall(DEVICE) if mk is not None else []
        self.check(is_planned(planned) and mk.get("migratable") == "yes" and mk.get("fingerprint") == fp_a
                   and len(devs) == 3 and all(d.get("position") for d in devs),
                   "A plans the domain: its mark says migratable=\"yes\" with A's fingerprint and each device's "
                   "position", planned[-3000:])

        # The hook in migrate mode on the live-migration XML, on B.
        r = self.sess["a"].virsh("dumpxml", "--migratable", name)
        live = r.stdout
        h = self.run_hook("b", name, live)
        srcs = sources(h.stdout) if h.returncode == 0 and h.stdout.strip() else []
        self.check(h.returncode == 0 and len(srcs) == 3 and not set(srcs) & set(DEVICES_A)
                   and guest_side(h.stdout) == guest_side(live),
                   "the hook in migrate mode on B, on the live-migration XML: exit 0, stdout with B's devices "
                   "as sources and the same guest side",
                   "exit %d\nstderr: %s\nsources: %s" % (h.returncode, h.stderr, srcs))
        self.diag("hook on B: %s" % h.stderr.strip().replace("\n", " | "))

        # A -> B: accepted, remapped.
        before = self.counters("a", "b")
        rc, out = self.migrate(name, "a", "b")
        self.diag("virsh migrate %s a -> b: exit %s: %s" % (name, rc, out))
        ok = rc == 0 and self.on("b", name)
        self.check(ok, "virsh migrate --offline --persistent%s A->B (same topology): accepted"
                   % (" --p2p" if self.net else ""), out)
        self.crossed("a", "b", before, len(live), "A->B")
        if ok:
            on_b = self.sess["b"].dumpxml(name)
            got = sources(on_b)
            mk_b = mark_of(on_b)
            self.check(len(got) == 3 and not set(got) & set(DEVICES_A) and got == srcs,
                       "A->B: B's definition has B's devices as hostdev sources (as the hook mapped them)",
                       "A %s, B %s" % (DEVICES_A, got))
            self.check(guest_side(on_b) == guest_side(planned),
                       "A->B: the guest topology (controllers, guest addresses, cells) is identical",
                       "\n".join(difflib.unified_diff(guest_side(planned).replace("><", ">\n<").split("\n"),
                                                      guest_side(on_b).replace("><", ">\n<").split("\n"),
                                                      "A", "B", lineterm="", n=1)))
            self.check(mk_b is not None and mk_b.get("fingerprint") == fp_b and
                       sorted(d.get("host") for d in mk_b.findall(DEVICE)) == sorted(got),
                       "A->B: the mark has B's fingerprint and names B's devices", on_b[-2500:])
            self.idempotent_on("b", name, on_b, "A->B")
            self.sess["b"].undefine(name)

        # A -> C: refused, with the reason.
        before = self.counters("a", "c")
        rc, out = self.migrate(name, "a", "c")
        self.crossed("a", "c", before, len(live), "A->C")
        self.diag("virsh migrate %s a -> c: exit %s: %s" % (name, rc, out))
        self.check(rc not in (0, None) and "refusing incoming migration" in out and
                   "cannot give it the same topology" in out and re.search(r"device 0000:(18|1c|9a):00\.0", out)
                   and not self.on("c", name),
                   "virsh migrate A->C (a GPU moved to the other socket): refused by C's hook, naming the "
                   "device and what differs", out)

        # B under migration: refuse.
        self.policy("b", "refuse")
        self.daemons["b"].hup()
        rc, out = self.migrate(name, "a", "b")
        self.diag("virsh migrate %s a -> b (refuse): exit %s: %s" % (name, rc, out))
        self.check(rc not in (0, None) and "migration: refuse" in out and not self.on("b", name),
                   "migration: refuse on B: A->B refused by B's hook", out)
        # Planned on A under migration: refuse: marked migratable="no".
        self.policy("a", "refuse")
        self.daemons["a"].hup()
        self.sess["a"].define(domain_xml("mig-2", DEVICES_A, memnodes={0: "0", 1: "1"}))
        p2 = self.wait_planned("a", "mig-2")
        self.policy("b")
        self.daemons["b"].hup()
        rc, out = self.migrate("mig-2", "a", "b")
        self.diag("virsh migrate mig-2 a -> b: exit %s: %s" % (rc, out))
        self.check('migratable="no"' in p2 and rc not in (0, None) and 'migratable="no"' in out
                   and not self.on("b", "mig-2"),
                   "migration: refuse on A: the mark says migratable=\"no\" and A->B is refused as before", out)

        # A vGPU: A's nvidia-63 mdev on node 1's GPU goes to B's nvidia-63
        # on node 1's GPU (not to the one of node 0).
        self.policy("a")
        self.daemons["a"].hup()
        mdev_xml = ("    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n"
                    "      <source>\n        <address uuid='%s'/>\n      </source>\n    </hostdev>\n" % MDEV_A)
        self.sess["a"].define(domain_xml("mig-3", (), memnodes={0: "0", 1: "1"}, extra_devices=mdev_xml))
        p3 = self.wait_planned("a", "mig-3")
        mk3 = mark_of(p3)
        d3 = mk3.findall(DEVICE) if mk3 is not None else []
        self.check(len(d3) == 1 and d3[0].get("mdev") == MDEV_A and d3[0].get("mdev-type") == "nvidia-63"
                   and d3[0].get("position"), "A plans a domain with an mdev: the mark records its type and "
                   "its parent's position", p3[-2000:])
        rc, out = self.migrate("mig-3", "a", "b")
        self.diag("virsh migrate mig-3 a -> b: exit %s: %s" % (rc, out))
        on_b = self.sess["b"].dumpxml("mig-3") if rc == 0 and self.on("b", "mig-3") else ""
        uuids = [a.get("uuid") for a in ET.fromstring(on_b).findall("devices/hostdev/source/address")] if on_b else []
        mk_b = mark_of(on_b) if on_b else None
        db = mk_b.findall(DEVICE) if mk_b is not None else []
        self.check(uuids == [MDEV_B] and [d.get("mdev") for d in db] == [MDEV_B]
                   and db[0].get("mdev-type") == "nvidia-63" and d3 and shape(db[0].get("position")) == shape(d3[0].get("position"))
                   and mk_b.get("fingerprint") == self.fingerprint("b"),
                   "virsh migrate A->B with an mdev: accepted, B's definition uses B's nvidia-63 mdev of the GPU in "
                   "the same place; its mark names it, with its type, the same position (but for B's names) and B's fingerprint",
                   "%s\nA's mark: %s\nB's mark: %s\nB's fingerprint: %s" % (
                       out, ET.tostring(mk3, encoding="unicode") if mk3 is not None else None,
                       ET.tostring(mk_b, encoding="unicode") if mk_b is not None else None, self.fingerprint("b")))
        if on_b:
            self.idempotent_on("b", "mig-3", on_b, "A->B with an mdev")

        # B already has a domain on the GPU A->B gave mig-1's first device
        # (srcs[0]): mig-1 gets the other GPU of that switch.  With both
        # used, it still comes in, and B's hook warns naming the domain.
        if len(srcs) != 3:
            self.check(False, "A->B with a device already used on B: the hook's first mapping is known", srcs)
            return
        self.sess["b"].define(domain_xml("mig-busy", [srcs[0]], memnodes={0: "0", 1: "1"}))
        busy = self.wait_planned("b", "mig-busy")
        rc, out = self.migrate(name, "a", "b")
        self.diag("virsh migrate %s a -> b (%s used by mig-busy): exit %s: %s" % (name, srcs[0], rc, out))
        got = sources(self.sess["b"].dumpxml(name)) if rc == 0 and self.on("b", name) else []
        self.check(is_planned(busy) and len(got) == 3 and srcs[0] not in got and got[1:] == srcs[1:],
                   "virsh migrate A->B while B's domain mig-busy uses %s: accepted, mig-1 gets the other GPU "
                   "in that place" % srcs[0], "A->B sources %s, earlier %s\n%s" % (got, srcs, out))
        if len(got) == 3:
            self.sess["b"].undefine(name)
            self.sess["b"].define(domain_xml("mig-busy-2", [got[0]], memnodes={0: "0", 1: "1"}))
            self.wait_planned("b", "mig-busy-2")
            h = self.run_hook("b", name, live)
            both = sources(h.stdout) if h.returncode == 0 and h.stdout.strip() else []
            self.check(h.returncode == 0 and len(both) == 3 and both[0] in (srcs[0], got[0])
                       and re.search(r"warning: domain %s: host device %s \(for %s\) is also used by domain "
                                     r"mig-busy(-2)?:" % (name, re.escape(both[0]), DEVICES_A[0]), h.stderr),
                       "the hook on B with both GPUs of that place used: exit 0, a warning naming the device "
                       "and the domain that uses it", "exit %d\nstderr: %s\nsources: %s" % (h.returncode, h.stderr, both))


def options(ap):
    ap.add_argument("--transport", choices=("auto", "netns", "unix"), default="auto",
                    help="netns: each libvirtd in its network namespace, --p2p over veth pairs; unix: session "
                    "daemons on Unix sockets; auto: netns when possible, else unix, said loudly")


def main():
    return run_session_suite(session_args(__doc__, options), Test, errors=(subprocess.TimeoutExpired,))


if __name__ == "__main__":
    sys.exit(main())

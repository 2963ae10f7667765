"""Network namespaces linked by veth pairs, for tests that need hosts with
their own network address on one machine (tests/libvirt/test_migrate.py).

Stdlib, iproute2 (`ip`) and util-linux (`nsenter`); needs root.

    from pcinumatest.netns import Net, NetnsUnavailable
    net = Net(["a", "b", "c"], [("a", "b"), ("a", "c")])
    try:
        net.setup()              # NetnsUnavailable: why namespaces cannot be used here;
                                 # NetnsError: they can, but setting them up failed (a failure)
    except NetnsUnavailable as e: ...
    net.addr("b", "a")           # B's address on its link to A: "10.231.1.2"
    net.exec_prefix("b")         # ["nsenter", "--net=/run/netns/NAME"]: run argv in B's namespace
    net.counters("a", "b")       # (rx, tx) bytes of A's end of the A-B link
    s = NetnsSession(net, "b", net.addr("b", "a"), host_uuid=...)
                                 # a session libvirtd in B's namespace, also on TCP
    s.tcp_uri                    # "qemu+tcp://10.231.1.2/session"
    net.teardown()               # kill what runs in them, delete namespaces and links
    net.leftovers()              # names of this run's namespaces and links still there

Names carry the test's pid ("pcnx<pid>-a" for a namespace, "pcnx<pid>ab"
for A's end of the A-B veth, at most 15 bytes), so concurrent runs do not
collide; setup() first reaps those of runs whose pid is gone (a test killed
by SIGKILL leaves its namespaces; the processes in them got SIGTERM from
setpriv --pdeathsig).  Link k (from 1) is the subnet 10.231.k.0/24, its
first host .1 and its second host .2.  IPv6 is left off the links
(addrgenmode none), so the byte counters move only with what the test
sends (and ARP).

What runs in a namespace is entered with `nsenter --net`, which changes
only the network namespace, not `ip netns exec` or `ip -n`: those also
unshare the mount namespace to remount /sys, and that fails in a chroot
("mount --make-rslave /" failed: Invalid argument, / not being a mount
point there), where `ip netns add` and nsenter work.
"""

import json
import os
import re
import signal
import subprocess
import time

from pcinumatest.lvenv import LvSession
from pcinumatest.session import find_tool

PREFIX = "pcnx"
NETNS_DIR = "/var/run/netns"     # where 'ip netns add' puts its names
SUBNET = "10.231.%d.%d"


class NetnsError(RuntimeError):
    """Namespaces can be made here, but setting them up failed: a real
    failure, not a reason to fall back."""


class NetnsUnavailable(RuntimeError):
    pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Net:
    def __init__(self, hosts, links, tag=None):
        self.hosts = list(hosts)
        self.links = [tuple(l) for l in links]
        self.tag = tag or "%s%d" % (PREFIX, os.getpid())
        self.ip = find_tool("ip")
        self.nsenter = find_tool("nsenter")
        self.made_ns = []
        self.made_links = []

    # -- names -----------------------------------------------------------
    def ns(self, h):
        return "%s-%s" % (self.tag, h)

    def ifname(self, h, peer):
        return "%s%s%s" % (self.tag, h, peer)

    def _link_no(self, h, peer):
        for k, (x, y) in enumerate(self.links, 1):
            if (x, y) in ((h, peer), (peer, h)):
                return k, (1 if x == h else 2)
        raise KeyError("no link between %s and %s" % (h, peer))

    def addr(self, h, peer):
        """h's address on its link to peer."""
        k, n = self._link_no(h, peer)
        return SUBNET % (k, n)

    def exec_prefix(self, h):
        return [self.nsenter, "--net=" + os.path.join(NETNS_DIR, self.ns(h))]

    # -- running ip ------------------------------------------------------
    def _ip(self, *args, check=True, h=None):
        """ip ARGS, in host h's namespace when h is given."""
        argv = (self.exec_prefix(h) if h else []) + [self.ip] + list(args)
        r = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        if check and r.returncode != 0:
            raise NetnsUnavailable("'%s' failed (exit %d): %s"
                                   % (" ".join(argv), r.returncode, r.stderr.strip()))
        return r

    def _ns_names(self):
        r = self._ip("netns", "list", check=False)
        return [l.split()[0] for l in r.stdout.splitlines() if l.strip()]

    def _root_links(self):
        r = self._ip("-o", "link", "show", check=False)
        out = []
        for l in r.stdout.splitlines():
            m = re.match(r"\d+:\s+([^:@\s]+)", l)
            if m:
                out.append(m.group(1))
        return out

    def _kill_in(self, ns):
        """SIGKILL what still runs in namespace ns (this run's daemons, or
        a dead run's) and wait until it is gone."""
        r = self._ip("netns", "pids", ns, check=False)
        pids = [int(p) for p in r.stdout.split() if p.isdigit()]
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p) and
                    "Z" not in _state(p)]
            time.sleep(0.05)

    def reap_stale(self):
        """Delete namespaces and links named after a pid that is gone."""
        pat = re.compile(r"^%s(\d+)" % PREFIX)
        for ns in self._ns_names():
            m = pat.match(ns)
            if m and not _alive(int(m.group(1))):
                self._kill_in(ns)
                self._ip("netns", "delete", ns, check=False)
        for l in self._root_links():
            m = pat.match(l)
            if m and not _alive(int(m.group(1))):
                self._ip("link", "delete", l, check=False)

    # -- setup and teardown ----------------------------------------------
    def setup(self):
        if os.geteuid() != 0:
            raise NetnsUnavailable("not root")
        if not self.ip:
            raise NetnsUnavailable("no 'ip' (iproute2) on PATH")
        if not self.nsenter:
            raise NetnsUnavailable("no 'nsenter' (util-linux) on PATH")
        self.reap_stale()
        # Only the first "ip netns add" may say that namespaces cannot be
        # made here (NetnsUnavailable, the caller falls back); once one
        # exists, any failure is the test's or the machine's fault and
        # fails the run (NetnsError), never a quiet fallback.
        try:
            self._ip("netns", "add", self.ns(self.hosts[0]))
        except (OSError, subprocess.TimeoutExpired) as e:
            raise NetnsUnavailable("'ip netns add' failed: %s" % e)
        self.made_ns.append(self.ns(self.hosts[0]))
        try:
            for h in self.hosts:
                if self.ns(h) not in self.made_ns:
                    self._ip("netns", "add", self.ns(h))
                    self.made_ns.append(self.ns(h))
                self._ip("link", "set", "lo", "up", h=h)
            for x, y in self.links:
                ix, iy = self.ifname(x, y), self.ifname(y, x)
                self._ip("link", "add", ix, "type", "veth", "peer", "name", iy)
                self.made_links.append(ix)
                for h, i, p in ((x, ix, y), (y, iy, x)):
                    self._ip("link", "set", i, "netns", self.ns(h))
                    self._ip("link", "set", i, "addrgenmode", "none", h=h)
                    self._ip("addr", "add", self.addr(h, p) + "/24", "dev", i, h=h)
                    self._ip("link", "set", i, "up", h=h)
        except (NetnsUnavailable, OSError, subprocess.TimeoutExpired) as e:
            self.teardown()
            raise NetnsError("setting up the namespaces and veth pairs: %s" % e)

    def teardown(self):
        for ns in self.made_ns:
            self._kill_in(ns)
            self._ip("netns", "delete", ns, check=False)
        # a link not yet moved into a namespace is in ours (setup failed)
        for l in self.made_links:
            if l in self._root_links():
                self._ip("link", "delete", l, check=False)
        self.made_ns = []
        self.made_links = []

    def leftovers(self):
        """This run's namespaces and root-namespace links that still exist."""
        return ([n for n in self._ns_names() if n.startswith(self.tag + "-")] +
                [l for l in self._root_links() if l.startswith(self.tag)])

    # -- observing -------------------------------------------------------
    def counters(self, h, peer):
        """(rx_bytes, tx_bytes) of h's end of the link to peer."""
        r = self._ip("-s", "-j", "link", "show", "dev", self.ifname(h, peer), h=h)
        st = json.loads(r.stdout)[0]["stats64"]
        return st["rx"]["bytes"], st["tx"]["bytes"]


class NetnsSession(LvSession):
    """An LvSession whose libvirtd runs in host h's namespace (started by
    root through nsenter, then setpriv to the session user) and
    also listens on TCP at listen_addr, port 16509, without TLS or
    authentication: what `virsh migrate --p2p` from another host's
    libvirtd reaches as tcp_uri.  Its Unix socket (the filesystem is
    shared) still serves virsh and pcinumad."""

    def __init__(self, net, h, listen_addr, **kw):
        self.launch_prefix = net.exec_prefix(h)
        self.daemon_args = ["--listen"]
        self.listen_addr = listen_addr
        super().__init__(**kw)

    def _setup_dirs(self):
        if self._restarting:
            return
        super()._setup_dirs()
        conf = os.path.join(self.env["XDG_CONFIG_HOME"], "libvirt", "libvirtd.conf")
        with open(conf, "a") as f:
            f.write('listen_tls = 0\nlisten_tcp = 1\nauth_tcp = "none"\n'
                    'tcp_port = "16509"\nlisten_addr = "%s"\n' % self.listen_addr)

    @property
    def tcp_uri(self):
        return "qemu+tcp://%s/session" % self.listen_addr


def _state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"

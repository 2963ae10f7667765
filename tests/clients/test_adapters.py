#!/usr/bin/env python3
"""The orchestrator adapters, each through its contract (docs/operations.md,
"Orchestrators"):

KubeVirt (pcinuma-kubevirt-hook as onDefineDomain).  Run as KubeVirt's
sidecar-shim runs it (cmd/sidecars/sidecar_shim.go, runOnDefineDomain()):
looked up as "onDefineDomain" in $PATH, argv ["onDefineDomain", "--vmi",
VMI-JSON, "--domain", DOMAIN-XML], stdout taken as the new domain, stderr
logged.  The VMI and domain are what virt-launcher makes for a VMI with
dedicated CPUs, guestMappingPassthrough and three host devices
(data/kubevirt-vmi.json, data/kubevirt-domain.xml) on fixture host
two-socket.  Checked: stdout is byte for byte `pcinumactl plan` of the same
domain, host and policy; a refusal exits 1 with nothing on stdout; bad
input exits 2; virt-launcher's define passes (WithNetworkIfacesResources()
in pkg/virt-launcher/virtwrap/network/nichotplug.go and
allocateHotplugPorts() in pkg/virt-launcher/virtwrap/manager.go: the
second and third with the devices read back from the previous define, in
a model that drops pcinuma's mark) end with one set of expander buses.

VDSM (pcinuma-vdsm-hook).  Run as VDSM's _runHooksDir()
(lib/vdsm/common/hooks.py) runs a hook: every executable of
hooks/<point>/ in name order, the XML in a mkstemp() file named by
$_hook_domxml, then the file read back by its name.  Checked: the file is
replaced by the plan (mode kept, no temporary file left), a following hook
script sees the plan, a refusal exits 1 and bad input 2 with the file
untouched, a write that fails (run as an unprivileged user, as VDSM runs
hooks, in a directory it cannot write) leaves the original; and
before_vm_migrate_destination answers what pcinumad's migration gate would
(fleet hosts fleet-a, fleet-b, fleet-c).

With libvirt (not with --no-libvirt): every output is defined in a private
session libvirtd (virsh define) and validates (virt-xml-validate);
KubeVirt's define passes run against that libvirtd's read-back;
`pcinumactl define` defines the plan (and nothing on a refusal or bad
input); `virt-install --print-xml | pcinumactl plan - | virsh define
/dev/stdin` with the real virt-install.  The domains carry PCI hostdevs,
which a session libvirtd cannot start: the checks end at the definition.

    test_adapters.py --pcinumactl P --kubevirt-hook P --vdsm-hook P
                     --mkfakesysfs P --hosts DIR --data DIR --examples DIR
                     --workdir DIR
                     [--no-libvirt] [--stand-ins-build] [-v]

Output: "ok N - ..." lines, "N passed, M failed"; exit 1 on a failure, 77
(skip) when libvirt is wanted and libvirtd, virsh, virt-xml-validate or
virt-install is missing.
"""

import argparse
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from pcinumatest.fixtures import build_host
from pcinumatest.lvenv import read, write
from pcinumatest.session import SessionError, find_tool, reachable_copy, start_session
from pcinumatest.tap import Tap

NS = "urn:pcinuma:topology:1"
MARK = "{%s}topology" % NS
TIMEOUT = 60


def run(argv, env=None, input=None, user=None):
    kw = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    return subprocess.run(argv, env=env, input=input, capture_output=True, text=True, timeout=TIMEOUT, **kw)


def bdf(addr):
    return "%04x:%02x:%02x.%x" % tuple(int(addr.get(k), 0) for k in ("domain", "bus", "slot", "function"))


def expand(nodeset):
    out = set()
    for part in (nodeset or "").split(","):
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        elif part.strip():
            out.add(int(part))
    return out


def layout(xml, node_of):
    """(expander buses, problems): the pcie-expander-bus controllers, and
    every PCI hostdev that does not sit, through root and switch ports,
    on an expander bus whose guest cell is backed by its host node."""
    root = ET.fromstring(xml)
    ctrls = {int(c.get("index")): c for c in root.findall("devices/controller") if c.get("type") == "pci"}
    pxbs = [c for c in ctrls.values() if c.get("model") == "pcie-expander-bus"]
    backing = {int(m.get("cellid")): expand(m.get("nodeset")) for m in root.findall("numatune/memnode")}
    probs = []
    for hd in root.findall("devices/hostdev"):
        if hd.get("type") != "pci":
            continue
        host = bdf(hd.find("source/address"))
        a = hd.find("address")
        cur = ctrls.get(int(a.get("bus"), 0)) if a is not None else None
        pxb = None
        for _ in range(8):
            if cur is None:
                break
            if cur.get("model") == "pcie-expander-bus":
                pxb = cur
                break
            pa = cur.find("address")
            cur = ctrls.get(int(pa.get("bus"), 0)) if pa is not None else None
        node = pxb.find("target/node") if pxb is not None else None
        if node is None:
            probs.append("%s is not under an expander bus with a <node>" % host)
        elif node_of.get(host) not in backing.get(int(node.text), set()):
            probs.append("%s (host node %s) sits under guest cell %s (host nodes %s)"
                         % (host, node_of.get(host), node.text, sorted(backing.get(int(node.text), ()))))
    return pxbs, probs


def schema_clean(xml):
    """KubeVirt's domains break libvirt's schema in two places (libvirt's
    parser takes them; KubeVirt defines without VIR_DOMAIN_DEFINE_VALIDATE):
    empty <bios>, <baseBoard> and <chassis> in <sysinfo type='smbios'>, and
    type="pci" on a hostdev's <source><address>.  Drop those, to validate
    what pcinuma added."""
    xml = re.sub(r"\s*<(bios|baseBoard|chassis)(></\1>|/>)", "", xml)
    return re.sub(r"(<source>\s*<address) type=\"pci\"", r"\1", xml)


class Test:
    def __init__(self, a, tap):
        self.a = a
        self.tap = tap
        self.check = tap.check
        self.work = a.workdir
        self.tmp = tempfile.mkdtemp(prefix="pcinuma-adapters-", dir="/tmp")
        os.chmod(self.tmp, 0o755)
        self.trees = {}
        self.node_of = {}
        self.session = None

    # -- fixtures ------------------------------------------------------
    def tree(self, host):
        if host not in self.trees:
            t = os.path.join(self.tmp, "host-" + host)
            build_host(self.a.mkfakesysfs, os.path.join(self.a.hosts, host + ".json"), t)
            for dirpath, dirnames, _ in os.walk(t):
                for d in dirnames:
                    os.chmod(os.path.join(dirpath, d), 0o755)
            os.chmod(t, 0o755)
            self.trees[host] = t
            r = run([self.a.pcinumactl, "host", "--sysfs-root", t, "--json"])
            self.node_of.update({d["bdf"]: d["node"] for d in json.loads(r.stdout)["devices"]})
        return self.trees[host]

    def policy(self, name, text):
        return write(os.path.join(self.tmp, name), text)

    def plan(self, xml_path, host, policy_file):
        return run([self.a.pcinumactl, "plan", "--sysfs-root", self.tree(host), "--policy-file", policy_file, xml_path])

    # -- KubeVirt ------------------------------------------------------
    def shim_env(self, host, policy_file, state_dir):
        """The sidecar container: onDefineDomain in $PATH, the policy and
        the state directory in the environment the image sets."""
        bindir = os.path.join(self.tmp, "sidecar-bin")
        if not os.path.exists(os.path.join(bindir, "onDefineDomain")):
            os.makedirs(bindir, exist_ok=True)
            os.chmod(bindir, 0o755)
            reachable_copy(self.a.kubevirt_hook, bindir, "onDefineDomain")
        return {"PATH": bindir + ":/usr/bin:/bin", "PCINUMA_SYSFS_ROOT": self.tree(host),
                "PCINUMA_POLICY_FILE": policy_file, "PCINUMA_KUBEVIRT_STATE_DIR": state_dir, "LANG": "C.UTF-8"}

    def on_define_domain(self, vmi, domain, env, extra=()):
        # exec.Command("onDefineDomain", "--vmi", vmi, "--domain", domain):
        # looked up in $PATH, argv[0] the bare name.  extra: options a
        # wrapper would add (a stand_ins build's --stand-ins).
        path = shutil.which("onDefineDomain", path=env["PATH"])
        return subprocess.run(["onDefineDomain", "--vmi", vmi, "--domain", domain] + list(extra), executable=path,
                              env=env, capture_output=True, text=True, timeout=TIMEOUT)

    def kubevirt(self):
        vmi = read(os.path.join(self.a.data, "kubevirt-vmi.json"))
        json.loads(vmi)
        dom_path = os.path.join(self.a.data, "kubevirt-domain.xml")
        dom = read(dom_path)
        require = self.policy("require.json", '{"default": {"policy": "require"}}\n')
        preferred = self.policy("preferred.json", '{"default": {"policy": "preferred"}}\n')
        state = os.path.join(self.tmp, "kv-state")
        env = self.shim_env("two-socket", require, state)

        r = self.on_define_domain(vmi, dom, env)
        p = self.plan(dom_path, "two-socket", require)
        self.check(r.returncode == 0 and p.returncode == 0 and r.stdout == p.stdout and r.stdout,
                   "kubevirt: onDefineDomain --vmi JSON --domain XML prints `pcinumactl plan` of the domain, byte for byte",
                   "exit %d, stderr %s\nplan exit %d %s" % (r.returncode, r.stderr, p.returncode, p.stderr))
        pxbs, probs = layout(r.stdout, self.node_of)
        self.check(len(pxbs) == 2 and not probs and ET.fromstring(r.stdout).find("metadata/" + MARK) is not None,
                   "kubevirt: the output puts each host device on an expander bus of its node's guest cell, with the mark",
                   "\n".join(probs) + "\n%d expander buses" % len(pxbs))
        self.check(ET.fromstring(r.stdout).find("metadata/{http://kubevirt.io}kubevirt") is not None,
                   "kubevirt: KubeVirt's own <metadata> is kept")
        self.kv_plan = r.stdout

        # A refusal: a VMI whose one cell is on node 0 with a GPU of node 1.
        one_cell = re.sub(r'<cell id="1".*?</cell>\s*', "", dom, flags=re.S)
        one_cell = re.sub(r'\s*<memnode cellid="1"[^>]*></memnode>', "", one_cell)
        one_cell = one_cell.replace('nodeset="0,1"', 'nodeset="0"')
        one_cell = re.sub(r'\s*<sibling id="1"[^>]*></sibling>', "", one_cell)
        one_cell = re.sub(r'\s*<vcpupin vcpu="[4-7]"[^>]*></vcpupin>', "", one_cell)
        one_cell = one_cell.replace('<vcpu placement="static">8</vcpu>', '<vcpu placement="static">4</vcpu>')
        one_cell = one_cell.replace('sockets="2"', 'sockets="1"').replace('<page size="1048576" unit="KiB" nodeset="1"></page>', "")
        one_cell_path = write(os.path.join(self.tmp, "kubevirt-one-cell.xml"), one_cell)
        r = self.on_define_domain(vmi, one_cell, self.shim_env("two-socket", require, state))
        self.check(r.returncode == 1 and r.stdout == "" and "0000:81:00.0" in r.stderr and "refused" in r.stderr,
                   "kubevirt: a refusal (policy require, a device on a node without a guest cell) exits 1 with "
                   "nothing on stdout, naming the device on stderr",
                   "exit %d\nstdout %r\nstderr %s" % (r.returncode, r.stdout[:200], r.stderr))
        r = self.on_define_domain(vmi, one_cell, self.shim_env("two-socket", preferred, state))
        p = self.plan(one_cell_path, "two-socket", preferred)
        self.check(r.returncode == 0 and r.stdout == p.stdout and NS in r.stdout,
                   "kubevirt: the same domain under policy preferred: exit 0 and the plan (the device on the nearest "
                   "cell)",
                   "exit %d, stderr %s" % (r.returncode, r.stderr))

        # Nothing to plan: the domain comes back unchanged.
        plain = re.sub(r"\s*<hostdev .*?</hostdev>", "", dom, flags=re.S)
        r = self.on_define_domain(vmi, plain, env)
        self.check(r.returncode == 0 and r.stdout == plain,
                   "kubevirt: a domain without host devices is printed unchanged, byte for byte",
                   "exit %d, stderr %s" % (r.returncode, r.stderr))

        self.stand_ins_option(vmi, dom, env)

        # Bad input: exit 2, nothing on stdout.
        bad_policy = self.policy("bad-policy.json", '{"default": {"policy": "sometimes"}}\n')
        cases = [
            ("malformed domain XML", ["--vmi", vmi, "--domain", dom[:-20]], env),
            ("--vmi that is not JSON", ["--vmi", "not json", "--domain", dom], env),
            ("no --domain", ["--vmi", vmi], env),
            ("a bad policy file", ["--vmi", vmi, "--domain", dom], dict(env, PCINUMA_POLICY_FILE=bad_policy)),
            ("a sysfs root that does not exist", ["--vmi", vmi, "--domain", dom],
             dict(env, PCINUMA_SYSFS_ROOT=os.path.join(self.tmp, "no-such-sysfs"))),
        ]
        for what, args, e in cases:
            r = subprocess.run(["onDefineDomain"] + args, executable=shutil.which("onDefineDomain", path=e["PATH"]),
                               env=e, capture_output=True, text=True, timeout=TIMEOUT)
            self.check(r.returncode == 2 and r.stdout == "" and "pcinuma-kubevirt-hook:" in r.stderr,
                       "kubevirt: bad input (%s) exits 2 with nothing on stdout" % what,
                       "exit %d\nstdout %r\nstderr %s" % (r.returncode, r.stdout[:200], r.stderr))

        # virt-launcher's later define passes, without libvirt: the devices
        # of the previous output, the mark gone (KubeVirt's domain model
        # keeps no foreign <metadata>).
        first = self.kv_plan
        devices = re.search(r"<devices>.*</devices>", first, re.S).group(0)
        second_in = re.sub(r"<devices>.*</devices>", lambda _: devices, dom, flags=re.S)
        state2 = os.path.join(self.tmp, "kv-state-passes")
        env2 = self.shim_env("two-socket", require, state2)
        r1 = self.on_define_domain(vmi, dom, env2)
        r2 = self.on_define_domain(vmi, second_in, env2)
        pxbs, probs = layout(r2.stdout, self.node_of) if r2.returncode == 0 else ([], ["exit %d" % r2.returncode])
        self.check(r1.returncode == 0 and r2.returncode == 0 and len(pxbs) == 2 and not probs and r2.stdout == first,
                   "kubevirt: a second define pass (the first's devices, no mark) gets the same plan, one set of "
                   "expander buses", r2.stderr + "\n".join(probs) + "\n%d expander buses" % len(pxbs))
        r3 = self.on_define_domain(vmi, second_in, self.shim_env("two-socket", require, os.path.join(self.tmp, "kv-fresh")))
        pxbs3, _ = layout(r3.stdout, self.node_of) if r3.returncode == 0 else ([], [])
        self.check(r3.returncode == 0 and len(pxbs3) == 4,
                   "kubevirt: control: without the previous pass's plan (another state directory) the second pass "
                   "adds a second set of expander buses", "exit %d, %d expander buses" % (r3.returncode, len(pxbs3)))
        r4 = self.on_define_domain(vmi, dom, env2)
        self.check(r4.returncode == 0 and r4.stdout == first,
                   "kubevirt: a retried first pass (KubeVirt's domain afresh) is planned afresh, not given the old mark",
                   r4.stderr)
        self.kubevirt_example(vmi, one_cell)
        self.check(os.path.isdir(state2) and stat.S_IMODE(os.stat(state2).st_mode) == 0o700
                   and len(os.listdir(state2)) == 1,
                   "kubevirt: the state directory is 0700 and holds one file for the domain", repr(os.listdir(state2)))
        self.hostile_state_dirs(vmi, dom, second_in, first)

    def hostile_state_dirs(self, vmi, dom, second_in, first):
        """The state directory's default is in /tmp, which others may write
        (and the sidecar may run as root): a directory that is a symlink,
        that others may write, or that another user owns is not used (a
        warning; nothing written there or through it), and the hook still
        prints the plan."""
        require = os.path.join(self.tmp, "require.json")
        target = os.path.join(self.tmp, "kv-symlink-target")
        os.makedirs(target, mode=0o700)
        link = os.path.join(self.tmp, "kv-symlink")
        os.symlink(target, link)
        wide = os.path.join(self.tmp, "kv-world-writable")
        os.makedirs(wide)
        os.chmod(wide, 0o777)
        cases = [("a symlink to a directory of this user", link, target),
                 ("mode 0777", wide, wide)]
        if os.geteuid() == 0:
            other = os.path.join(self.tmp, "kv-nobody")
            os.makedirs(other, mode=0o700)
            pw = pwd.getpwnam("nobody")
            os.chown(other, pw.pw_uid, pw.pw_gid)
            cases.append(("a directory of another user (nobody)", other, other))
        for what, state, where in cases:
            env = self.shim_env("two-socket", require, state)
            r1 = self.on_define_domain(vmi, dom, env)
            r2 = self.on_define_domain(vmi, second_in, env)
            self.check(r1.returncode == 0 and r1.stdout == first and r2.returncode == 0
                       and "not using the state directory" in r1.stderr and os.listdir(where) == [],
                       "kubevirt: a state directory that is %s is not used (a warning, nothing written), the plan "
                       "still printed" % what,
                       "exit %d, %d; files %r\n%s" % (r1.returncode, r2.returncode, os.listdir(where), r1.stderr))

    def stand_ins_option(self, vmi, dom, env):
        """--stand-ins exists in a stand_ins build only (docs/hacking.md,
        "The stand-in seam"): a normal build's adapters refuse it as an
        unknown option; a stand_ins build's take it and refuse a bad table
        as bad input, naming the file."""
        bad = write(os.path.join(self.tmp, "bad-stand-ins.json"), '{"not a mac": "0000:21:00.0"}\n')
        seam = self.a.stand_ins_build
        for prog in (self.a.kubevirt_hook, self.a.vdsm_hook):
            name = os.path.basename(prog)
            helped = "--stand-ins" in run([prog, "--help"]).stdout
            self.check(helped == seam, "%s --help %s --stand-ins" % (name, "lists" if seam else "does not list"))
            r = run([prog, "--vmi", vmi, "--domain", dom, "--stand-ins", bad] if "kubevirt" in name
                    else [prog, "--hook", "before_vm_start", "--stand-ins", bad],
                    env=dict(env, _hook_domxml=os.path.join(self.a.data, "vdsm-domain.xml")))
            if seam:
                self.check(r.returncode == 2 and r.stdout == "" and bad in r.stderr,
                           "%s: a stand_ins build takes --stand-ins and refuses a bad table, naming the file" % name,
                           "exit %d: %s" % (r.returncode, r.stderr))
            else:
                self.check(r.returncode == 2 and r.stdout == "" and "stand-ins" in r.stderr,
                           "%s: a normal build refuses --stand-ins (unknown option), exit 2" % name,
                           "exit %d: %s" % (r.returncode, r.stderr))
        if seam:
            self.stand_in_passes(vmi, env)

    def stand_in_passes(self, vmi, env):
        """A stand_ins build: KubeVirt's second define pass of a domain whose
        devices are stand-ins (virtio NICs the table maps to the one-node
        host's 0000:21:00.0 and 0000:22:00.0) gets the first pass's plan, as
        a hostdev's does: the stand-ins are read from the state directory's
        plan and the revert with the table, one set of expander buses."""
        table = write(os.path.join(self.tmp, "stand-ins.json"),
                      '{"52:54:00:5a:00:01": "0000:21:00.0", "52:54:00:5a:00:02": "0000:22:00.0"}\n')
        nics = "".join("    <interface type='user'>\n      <mac address='%s'/>\n      <model type='virtio'/>\n"
                       "    </interface>\n" % m for m in ("52:54:00:5A:00:01", "52:54:00:5a:00:02"))
        dom = ("<domain type='qemu'>\n  <name>ml_stand-ins</name>\n  <memory unit='MiB'>256</memory>\n"
               "  <vcpu placement='static'>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n"
               "  </os>\n  <features>\n    <acpi/>\n  </features>\n  <cpu mode='custom' match='exact'>\n    <model fallback='allow'>qemu64</model>\n"
               "    <numa>\n      <cell id='0' cpus='0' memory='128' unit='MiB'/>\n"
               "      <cell id='1' cpus='1' memory='128' unit='MiB'/>\n    </numa>\n  </cpu>\n"
               "  <numatune>\n    <memnode cellid='0' mode='strict' nodeset='0'/>\n"
               "    <memnode cellid='1' mode='strict' nodeset='0'/>\n  </numatune>\n  <devices>\n"
               "    <controller type='pci' index='0' model='pcie-root'/>\n%s  </devices>\n</domain>\n" % nics)
        e = dict(env, PCINUMA_SYSFS_ROOT=self.tree("one-node"),
                 PCINUMA_KUBEVIRT_STATE_DIR=os.path.join(self.tmp, "kv-stand-ins-state"))
        args = ["--stand-ins", table]
        r1 = self.on_define_domain(vmi, dom, e, args)
        second = re.sub(r"\s*<pcinuma:topology .*?</pcinuma:topology>", "", r1.stdout, flags=re.S)
        r2 = self.on_define_domain(vmi, second, e, args)
        pxbs = r2.stdout.count("model=\"pcie-expander-bus\"")
        self.check(r1.returncode == 0 and NS in r1.stdout and NS not in second and r2.returncode == 0
                   and r2.stdout == r1.stdout and pxbs == 1,
                   "kubevirt: a stand_ins build: a second define pass of a domain with stand-ins (the first's "
                   "devices, no mark) gets the same plan, one set of expander buses",
                   "exit %d, %d; %d expander buses\n%s%s" % (r1.returncode, r2.returncode, pxbs, r1.stderr, r2.stderr))

    def kubevirt_example(self, vmi, one_cell):
        """adapters/kubevirt: the image's policy.json and example.yaml's
        ConfigMap script, which KubeVirt mounts over /usr/bin/onDefineDomain
        and which runs the image's other copy with --policy require."""
        ex = self.a.examples
        pol = os.path.join(ex, "policy.json")
        r = run([self.a.pcinumactl, "check-policy", pol])
        self.check(r.returncode == 0 and "default: preferred" in r.stdout,
                   "kubevirt example: the image's policy.json is valid (default preferred)", r.stdout + r.stderr)
        text = read(os.path.join(ex, "example.yaml"))
        m = re.search(r"^  onDefineDomain: \|\n((?:    .*\n)+)", text, re.M)
        ann = re.search(r"hooks.kubevirt.io/hookSidecars: >-\n((?:          .*\n)+)", text)
        try:
            sidecars = json.loads(" ".join(l.strip() for l in ann.group(1).splitlines())) if ann else None
        except ValueError:
            sidecars = None
        self.check(m is not None and sidecars and sidecars[0]["configMap"]["hookPath"] == "/usr/bin/onDefineDomain"
                   and sidecars[0]["args"] == ["--version", "v1alpha3"],
                   "kubevirt example: example.yaml has the ConfigMap script and a hookSidecars annotation that mounts "
                   "it at /usr/bin/onDefineDomain", repr(sidecars))
        if not m:
            return
        script = "".join(l[4:] + "\n" for l in m.group(1).splitlines())
        bindir = os.path.join(self.tmp, "sidecar-configmap")
        os.makedirs(bindir)
        os.chmod(bindir, 0o755)
        real = reachable_copy(self.a.kubevirt_hook, bindir, "pcinuma-kubevirt-hook")
        write(os.path.join(bindir, "onDefineDomain"),
              script.replace("/usr/libexec/pcinuma/pcinuma-kubevirt-hook", real), 0o755)
        env = {"PATH": bindir + ":/usr/bin:/bin", "PCINUMA_SYSFS_ROOT": self.tree("two-socket"),
               "PCINUMA_POLICY_FILE": pol, "PCINUMA_KUBEVIRT_STATE_DIR": os.path.join(self.tmp, "kv-cm-state")}
        image = dict(env, PATH=os.path.join(self.tmp, "sidecar-bin") + ":/usr/bin:/bin")
        r0 = self.on_define_domain(vmi, one_cell, image)
        r1 = self.on_define_domain(vmi, one_cell, env)
        self.check(r0.returncode == 0 and NS in r0.stdout and r1.returncode == 1 and r1.stdout == ""
                   and "policy require" in r1.stderr,
                   "kubevirt example: the image's policy plans the one-cell domain, the ConfigMap's script refuses it "
                   "(policy require)", "image: exit %d %s\nconfigmap: exit %d %s"
                   % (r0.returncode, r0.stderr, r1.returncode, r1.stderr))

    # -- VDSM ----------------------------------------------------------
    def vdsm_hooks_dir(self, point, extra=()):
        """A VDSM hook directory hooks/<point>/ with 50_pcinuma (a symlink
        to the program, as an administrator installs it) and extra
        scripts."""
        d = os.path.join(self.tmp, "vdsm-hooks-%s-%d" % (point, len(os.listdir(self.tmp))), point)
        os.makedirs(d)
        for p in (d, os.path.dirname(d)):
            os.chmod(p, 0o755)
        prog = reachable_copy(self.a.vdsm_hook, os.path.dirname(d), "pcinuma-vdsm-hook")
        os.symlink(prog, os.path.join(d, "50_pcinuma"))
        for name, text in extra:
            write(os.path.join(d, name), text, 0o755)
        return d

    def run_hooks_dir(self, hooks_dir, data, env_extra, tmpdir=None, user=None, lock=False):
        """VDSM's _runHooksDir(): the scripts of the directory in name
        order, the XML in a mkstemp() file named by $_hook_domxml, exit 2
        stops the chain, the file read back by its name.  Returns
        ([(script, rc, stderr)], the file's text, its mode, the file
        names in its directory afterwards)."""
        scripts = sorted(os.path.join(hooks_dir, s) for s in os.listdir(hooks_dir)
                         if os.path.isfile(os.path.join(hooks_dir, s))
                         and os.access(os.path.join(hooks_dir, s), os.X_OK))
        fd, path = tempfile.mkstemp(dir=tmpdir)
        os.write(fd, data.encode("utf-8"))
        os.close(fd)
        if user:
            pw = pwd.getpwnam(user)
            os.chown(path, pw.pw_uid, pw.pw_gid)
        env = dict(os.environ, _hook_domxml=path, vmId="0b2d4f6a-8c0e-4a2c-9e4f-6a8c0e2a4c6e", **env_extra)
        results = []
        if lock:
            os.chmod(os.path.dirname(path), 0o555)
        try:
            for s in scripts:
                r = run([s], env=env, user=user)
                results.append((os.path.basename(s), r.returncode, r.stderr))
                if r.returncode == 2:
                    break
            with open(path, encoding="utf-8") as f:
                final = f.read()
            mode = stat.S_IMODE(os.stat(path).st_mode)
            names = sorted(os.listdir(os.path.dirname(path)))
        finally:
            if lock:
                os.chmod(os.path.dirname(path), 0o755)
            os.unlink(path)
        return results, final, mode, names

    def vdsm(self):
        dom_path = os.path.join(self.a.data, "vdsm-domain.xml")
        dom = read(dom_path)
        require = self.policy("require.json", '{"default": {"policy": "require"}}\n')
        env = {"PCINUMA_SYSFS_ROOT": self.tree("two-socket")}
        # The hook reads the default policy file, which this machine may
        # not have: the tests name theirs with --policy-file through a
        # wrapper, as an administrator could.
        def hooks(point, policy, extra=()):
            d = self.vdsm_hooks_dir(point, extra)
            os.unlink(os.path.join(d, "50_pcinuma"))
            write(os.path.join(d, "50_pcinuma"), "#!/bin/sh\nexec %s --hook %s --policy-file %s\n"
                  % (os.path.join(os.path.dirname(d), "pcinuma-vdsm-hook"), point, policy), 0o755)
            return d

        spool = os.path.join(self.tmp, "vdsm-tmp")
        os.makedirs(spool, exist_ok=True)
        os.chmod(spool, 0o1777)
        seen = os.path.join(self.tmp, "seen-by-next-hook.xml")
        after = ("60_next", "#!/bin/sh\ncp \"$_hook_domxml\" %s\n" % seen)
        d = hooks("before_vm_start", require, [after])
        res, final, mode, names = self.run_hooks_dir(d, dom, env, tmpdir=spool)
        p = self.plan(dom_path, "two-socket", require)
        self.check([rc for _, rc, _ in res] == [0, 0] and final == p.stdout and p.returncode == 0,
                   "vdsm: before_vm_start replaces $_hook_domxml with `pcinumactl plan` of it, byte for byte",
                   "%r\nplan: %s" % (res, p.stderr))
        self.check(mode == 0o600 and len(names) == 1,
                   "vdsm: the file keeps mkstemp()'s mode 0600 and no temporary file is left beside it",
                   "mode %o, files %r" % (mode, names))
        self.check(os.path.exists(seen) and read(seen) == p.stdout,
                   "vdsm: the next hook script of the directory sees the planned XML")
        pxbs, probs = layout(final, self.node_of)
        self.check(len(pxbs) == 2 and not probs and "http://ovirt.org/vm/1.0" in final,
                   "vdsm: the planned domain keeps oVirt's metadata, each device on its node's expander bus",
                   "\n".join(probs))
        self.vdsm_plan = final

        # The planned domain under policy off: the plan is undone (no mark,
        # no expander bus), and the hook says so.
        off = self.policy("off.json", '{"default": {"policy": "off"}}\n')
        res, final, _, _ = self.run_hooks_dir(hooks("before_vm_start", off), self.vdsm_plan, env, tmpdir=spool)
        self.check(res[0][1] == 0 and NS not in final and "pcie-expander-bus" not in final
                   and "plan undone (policy off)" in res[0][2]
                   and "planned" not in res[0][2],
                   "vdsm: a planned domain under policy off gets its plan undone, and the hook says so", repr(res))

        # The hook point from the directory VDSM runs it from (no --hook).
        d = self.vdsm_hooks_dir("before_vm_start")
        res, final, _, _ = self.run_hooks_dir(d, dom, dict(env, PCINUMA_POLICY_FILE=require), tmpdir=spool)
        self.check(res[0][1] == 0 and final != dom and NS in final,
                   "vdsm: installed as a symlink in hooks/before_vm_start/, it knows its hook point", repr(res))
        d = self.vdsm_hooks_dir("after_vm_start")
        res, final, _, _ = self.run_hooks_dir(d, dom, env, tmpdir=spool)
        self.check(res[0][1] == 2 and final == dom and "after_vm_start" in res[0][2],
                   "vdsm: in a hook directory it does not serve it exits 2, the file untouched", repr(res))

        # A refusal and bad input: the file as it was.
        one_cell = re.sub(r"<cell id='1'[^>]*/>\s*", "", dom)
        one_cell = re.sub(r"\s*<memnode cellid='1'[^>]*/>", "", one_cell)
        d = hooks("before_vm_start", require, [after])
        res, final, _, names = self.run_hooks_dir(d, one_cell, env, tmpdir=spool)
        self.check(res[0][1] == 1 and final == one_cell and "0000:81:00.0" in res[0][2] and len(names) == 1
                   and len(res) == 2,
                   "vdsm: a refusal exits 1 (VDSM runs the next script, then fails the start), the file untouched",
                   repr(res))
        bad_policy = self.policy("bad-policy.json", '{"default": {"policy": "sometimes"}}\n')
        for what, text, pol in (("malformed XML", dom[:-30], require), ("a bad policy file", dom, bad_policy)):
            d = hooks("before_vm_start", pol, [after])
            res, final, _, names = self.run_hooks_dir(d, text, env, tmpdir=spool)
            self.check(res[0][1] == 2 and final == text and len(res) == 1 and len(names) == 1,
                       "vdsm: bad input (%s) exits 2 (VDSM stops the chain), the file untouched" % what, repr(res))
        r = run([self.a.vdsm_hook, "--hook", "before_vm_start"], env={k: v for k, v in os.environ.items()
                                                                       if k != "_hook_domxml"})
        self.check(r.returncode == 2 and "_hook_domxml" in r.stderr,
                   "vdsm: without $_hook_domxml it exits 2 naming it", r.stderr)

        # A write that fails leaves the original: VDSM runs hooks as its
        # own user; here an unprivileged user in a directory it cannot
        # write (the temporary file beside $_hook_domxml cannot be made).
        # Root (not fakeroot, as in a package build) writes anywhere: then
        # the hook runs as nobody; anyone else gets a directory of mode 0555.
        user = "nobody" if os.geteuid() == 0 and "FAKEROOTKEY" not in os.environ else None
        ro = os.path.join(self.tmp, "vdsm-ro")
        os.makedirs(ro, exist_ok=True)
        os.chmod(ro, 0o755)
        d = hooks("before_vm_start", require)
        res, final, _, names = self.run_hooks_dir(d, dom, env, tmpdir=ro, user=user, lock=user is None)
        self.check(res[0][1] == 1 and final == dom and len(names) == 1 and "left as it was" in res[0][2],
                   "vdsm: a plan that cannot be written (run as %s, the directory not writable) exits 1 and leaves "
                   "the original file" % (user or "this user"), repr(res))

        # before_vm_migrate_destination: what pcinumad's migration gate
        # would answer; the file is never changed.
        # A fleet: migration same-topology on both ends (the default,
        # refuse, marks the domain migratable="no").
        a_tree = self.tree("fleet-a")
        src = write(os.path.join(self.tmp, "mig-src.xml"), self.fleet_domain("mig-1"))
        fleet = self.policy("fleet.json", '{"default": {"policy": "require", "migration": "same-topology"}}\n')
        planned = run([self.a.pcinumactl, "plan", "--sysfs-root", a_tree, "--policy-file", fleet, src])
        unmovable = run([self.a.pcinumactl, "plan", "--sysfs-root", a_tree, "--policy", "require", src])
        self.check(planned.returncode == 0 and NS in planned.stdout and 'migratable="no"' in unmovable.stdout,
                   "vdsm: fixture: a domain planned on fleet-a (migratable, and under migration refuse)",
                   planned.stderr + unmovable.stderr)
        cases = [
            ("to fleet-b (the same topology): allowed", planned.stdout, "fleet-b", 0, "is "),
            ("to fleet-c (a GPU moved to the other socket): refused", planned.stdout, "fleet-c", 1,
             "refusing incoming migration"),
            ("of a domain marked migratable=\"no\": refused", unmovable.stdout, "fleet-b", 1, "migratable"),
            ("of a domain without a mark: allowed", read(src), "fleet-c", 0, ""),
        ]
        for what, text, host, want, say in cases:
            d = hooks("before_vm_migrate_destination", fleet)
            res, final, _, _ = self.run_hooks_dir(d, text, {"PCINUMA_SYSFS_ROOT": self.tree(host)}, tmpdir=spool)
            self.check(res[0][1] == want and final == text and say in res[0][2],
                       "vdsm: before_vm_migrate_destination %s, the file untouched" % what, repr(res))

    def fleet_domain(self, name):
        return ("<domain type='qemu'>\n  <name>%s</name>\n  <uuid>3d1f2e4a-5b6c-4d7e-8f90-a1b2c3d4e5f6</uuid>\n"
                "  <memory unit='MiB'>256</memory>\n  <vcpu placement='static'>2</vcpu>\n"
                "  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n"
                "  <features>\n    <acpi/>\n  </features>\n"
                "  <cpu mode='custom' match='exact'>\n    <model fallback='allow'>qemu64</model>\n"
                "    <numa>\n      <cell id='0' cpus='0' memory='128' unit='MiB'/>\n"
                "      <cell id='1' cpus='1' memory='128' unit='MiB'/>\n    </numa>\n  </cpu>\n"
                "  <numatune>\n    <memnode cellid='0' mode='strict' nodeset='0'/>\n"
                "    <memnode cellid='1' mode='strict' nodeset='1'/>\n  </numatune>\n"
                "  <devices>\n%s  </devices>\n</domain>\n"
                % (name, "".join("    <hostdev mode='subsystem' type='pci' managed='yes'>\n      <source>\n"
                                 "        <address domain='0x0000' bus='0x%s' slot='0x00' function='0x0'/>\n"
                                 "      </source>\n    </hostdev>\n" % b for b in ("18", "1c", "9a"))))

    # -- libvirt -------------------------------------------------------
    def validate(self, xml, tag):
        path = write(os.path.join(self.tmp, tag + ".xml"), xml)
        r = run(["virt-xml-validate", path, "domain"])
        return r.returncode == 0, r.stdout + r.stderr

    def define(self, xml):
        """virsh define in the session: (name or None, message)."""
        try:
            r = self.session.define(xml, check=False)
        except SessionError as e:
            return None, str(e)
        if isinstance(r, str):
            return r, ""
        return None, r.stderr + r.stdout

    def libvirt(self):
        s = self.session
        # KubeVirt: the plan defines and validates.
        ok, msg = self.validate(schema_clean(self.kv_plan), "kv-plan")
        self.check(ok, "kubevirt: the plan passes virt-xml-validate (KubeVirt's own two schema deviations aside)", msg)
        ok0, _ = self.validate(schema_clean(read(os.path.join(self.a.data, "kubevirt-domain.xml"))), "kv-in")
        self.check(ok0, "kubevirt: fixture: KubeVirt's domain itself validates with those two deviations aside")
        name, msg = self.define(self.kv_plan)
        back = s.dumpxml(name) if name else ""
        pxbs, probs = layout(back, self.node_of) if name else ([], [msg])
        self.check(name == "ml_gpu-vmi" and len(pxbs) == 2 and not probs,
                   "kubevirt: virsh define accepts the plan; libvirt's definition keeps the layout", "\n".join(probs))
        if name:
            s.undefine(name)
        self.kubevirt_passes()

        # VDSM: VDSM defines the hook's output (defineXML, then createWithFlags).
        ok, msg = self.validate(self.vdsm_plan, "vdsm-plan")
        self.check(ok, "vdsm: the planned domain passes virt-xml-validate", msg)
        name, msg = self.define(self.vdsm_plan)
        back = s.dumpxml(name) if name else ""
        pxbs, probs = layout(back, self.node_of) if name else ([], [msg])
        self.check(name is not None and len(pxbs) == 2 and not probs,
                   "vdsm: virsh define accepts the planned domain; the definition keeps the layout", "\n".join(probs))
        if name:
            s.undefine(name)

        self.pcinumactl_define()
        self.virt_install()

    def kubevirt_passes(self):
        """virt-launcher's define passes against a real libvirtd (q35, one
        interface, so three placeholder interfaces, topology v3): pass 1
        with the placeholders; pass 2 with the devices libvirt read back
        (placeholders removed) and the rest as KubeVirt made it; pass 3
        the second output in KubeVirt's model (no foreign <metadata>) with
        extra root ports and hotplug off on the occupied ones.  The last
        output is what runs."""
        s = self.session
        vmi = read(os.path.join(self.a.data, "kubevirt-vmi.json"))
        dom = read(os.path.join(self.a.data, "kubevirt-domain.xml"))
        require = self.policy("require.json", '{"default": {"policy": "require"}}\n')

        def passes(state):
            env = self.shim_env("two-socket", require, state)
            ph = "".join('\t\t<interface type="ethernet">\n\t\t\t<target dev="placeholder-%d" managed="no"></target>\n'
                         '\t\t\t<model type="virtio-non-transitional"></model>\n'
                         '\t\t\t<alias name="placeholder-%d"></alias>\n\t\t</interface>\n' % (i, i) for i in range(3))
            outs = []
            r = self.on_define_domain(vmi, dom.replace("\t</devices>", ph + "\t</devices>"), env)
            if r.returncode != 0:
                return None, "pass 1: " + r.stderr
            name, msg = self.define(r.stdout)
            if not name:
                return None, "pass 1 define: " + msg
            outs.append(r.stdout)
            back = s.dumpxml(name)
            devices = re.search(r"<devices>.*</devices>", back, re.S).group(0)
            devices = re.sub(r"\s*<interface type='ethernet'>(?:(?!</interface>).)*placeholder(?:(?!</interface>).)*"
                             r"</interface>", "", devices, flags=re.S)
            r = self.on_define_domain(vmi, re.sub(r"<devices>.*</devices>", lambda _: devices, dom, flags=re.S), env)
            if r.returncode != 0:
                return None, "pass 2: " + r.stderr
            name, msg = self.define(r.stdout)
            if not name:
                return None, "pass 2 define: " + msg
            outs.append(r.stdout)
            third = re.sub(r"\s*<pcinuma:topology .*?</pcinuma:topology>", "", r.stdout, flags=re.S)
            occupied = set()
            for a in re.finditer(r"<address type=\"pci\" domain=\"0x0000\" bus=\"(0x[0-9a-f]+)\"", third):
                occupied.add(int(a.group(1), 16))
            def hotplug_off(m):
                el = m.group(0)
                if int(m.group(1)) not in occupied:
                    return el
                if "<target" in el:
                    return el.replace("<target", '<target hotplug="off"', 1)
                return el.replace("</controller>", '<target hotplug="off"/></controller>')
            third = re.sub(r'<controller type="pci" index="(\d+)" model="pcie-root-port">.*?</controller>',
                           hotplug_off, third, flags=re.S)
            top = max(int(i) for i in re.findall(r'<controller type="pci" index="(\d+)"', third))
            extra = "".join('\t\t<controller type="pci" index="%d" model="pcie-root-port"></controller>\n' % (top + k)
                            for k in (1, 2))
            third = third.replace("</devices>", extra + "</devices>", 1)
            r = self.on_define_domain(vmi, third, env)
            if r.returncode != 0:
                return None, "pass 3: " + r.stderr
            name, msg = self.define(r.stdout)
            if not name:
                return None, "pass 3 define: " + msg
            final = s.dumpxml(name)
            s.undefine(name)
            return final, ""

        final, msg = passes(os.path.join(self.tmp, "kv-passes-state"))
        pxbs, probs = layout(final, self.node_of) if final else ([], [msg])
        ok = final is not None and len(pxbs) == 2 and not probs and ET.fromstring(final).find("metadata/" + MARK) is not None
        self.check(ok, "kubevirt: after virt-launcher's three define passes the definition has one set of expander "
                   "buses, each device on its node's, and the mark", "\n".join(probs) + "\n%d expander buses" % len(pxbs))
        if final:
            f = write(os.path.join(self.tmp, "kv-final.xml"), final)
            p = run([self.a.pcinumactl, "plan", "--sysfs-root", self.tree("two-socket"), "--policy-file", require,
                     "--format", "json", f])
            already = p.returncode == 0 and json.loads(p.stdout).get("already_planned") is True
            self.check(already, "kubevirt: pcinumactl plan finds the final definition already planned",
                       p.stdout[:2000] + p.stderr)
            ok, vmsg = self.validate(schema_clean(final), "kv-final")
            self.check(ok, "kubevirt: the final definition passes virt-xml-validate", vmsg)

    def pcinumactl_define(self):
        """pcinumactl define, run as the session user against its libvirtd."""
        s = self.session
        bindir = os.path.join(self.tmp, "ctl-bin")
        os.makedirs(bindir, exist_ok=True)
        os.chmod(bindir, 0o755)
        ctl = reachable_copy(self.a.pcinumactl, bindir)
        tree = self.tree("two-socket")
        dom = read(os.path.join(self.a.data, "vdsm-domain.xml")).replace("<name>ovirt-gpu-1</name>",
                                                                          "<name>ctl-define-1</name>")
        dom = dom.replace("0b2d4f6a-8c0e-4a2c-9e4f-6a8c0e2a4c6e", "c7d1e2f3-0a4b-4c5d-8e6f-7a8b9c0d1e2f")
        path = s.write(dom)
        base = [ctl, "define", "--sysfs-root", tree, "--policy", "require", "--connect", "qemu:///session"]
        r = s.run_as(base + [path])
        back = s.dumpxml("ctl-define-1") if r.returncode == 0 else ""
        pxbs, probs = layout(back, self.node_of) if back else ([], [r.stderr])
        self.check(r.returncode == 0 and "Domain 'ctl-define-1' defined from %s with the NUMA-aware topology (policy "
                   "require)." % path in r.stdout and len(pxbs) == 2 and not probs,
                   "define: plans and defines; the definition has the plan", r.stdout + r.stderr + "\n".join(probs))
        plan = run([self.a.pcinumactl, "plan", "--sysfs-root", tree, "--policy", "require", "--format", "json",
                    write(os.path.join(self.tmp, "ctl-back.xml"), back)]) if back else None
        self.check(plan is not None and json.loads(plan.stdout).get("already_planned") is True,
                   "define: pcinumactl plan finds the definition already planned (the watcher would leave it)")
        s.undefine("ctl-define-1")
        # A planned domain under policy off: the plan is undone, and the
        # line says so (not "unchanged").
        off = [ctl, "define", "--sysfs-root", tree, "--policy", "off", "--connect", "qemu:///session"]
        r = s.run_as(off + [s.write(back)]) if back else None
        back_off = s.dumpxml("ctl-define-1") if r is not None and r.returncode == 0 else ""
        self.check(r is not None and r.returncode == 0 and back_off and NS not in back_off
                   and "with pcinuma's earlier plan undone (policy off)" in r.stdout and "unchanged" not in r.stdout,
                   "define: a planned domain under policy off is defined with the plan undone, and says so",
                   (r.stdout + r.stderr) if r is not None else "no definition to start from")
        s.undefine("ctl-define-1")
        r = s.run_as(base + ["-"], input=dom)
        self.check(r.returncode == 0 and "defined from standard input" in r.stdout
                   and s.virsh("dominfo", "ctl-define-1").returncode == 0,
                   "define: reads the domain from standard input with -", r.stdout + r.stderr)
        s.undefine("ctl-define-1")

        def absent():
            return s.virsh("dominfo", "ctl-define-1").returncode != 0

        one_cell = re.sub(r"<cell id='1'[^>]*/>\s*", "", dom)
        one_cell = re.sub(r"\s*<memnode cellid='1'[^>]*/>", "", one_cell)
        r = s.run_as(base + [s.write(one_cell)])
        self.check(r.returncode == 1 and "0000:81:00.0" in r.stderr and "not defined" in r.stderr and absent(),
                   "define: a refusal exits 1, names the device and defines nothing", r.stdout + r.stderr)
        for what, args in (("malformed XML", [s.write(dom[:-40])]),
                           ("a missing file", [os.path.join(s.files, "no-such.xml")]),
                           ("an unknown policy", ["--policy", "sometimes", s.write(dom)]),
                           ("two files", [s.write(dom), s.write(dom)])):
            r = s.run_as(base + args)
            self.check(r.returncode == 2 and r.stdout == "" and absent(),
                       "define: bad input (%s) exits 2 and defines nothing" % what, r.stdout + r.stderr)
        r = s.run_as(base + [s.write(dom.replace('machine="q35"', 'machine="pc-q35-rhel9.4.0"'))])
        self.check(r.returncode == 1 and "libvirt did not define" in r.stderr and "pc-q35-rhel9.4.0" in r.stderr
                   and absent(), "define: a domain libvirt rejects exits 1 with libvirt's message", r.stderr)
        r = s.run_as([ctl, "define", "--sysfs-root", tree, "--policy", "require", "--connect",
                      "qemu:///session?socket=/nonexistent/sock", s.write(dom)])
        self.check(r.returncode == 1 and "cannot connect to libvirt" in r.stderr and absent(),
                   "define: a libvirt that cannot be reached exits 1, saying so", r.stderr)

    def virt_install(self):
        """virt-install --print-xml | pcinumactl plan - | virsh define /dev/stdin,
        with the real virt-install, as the session user."""
        s = self.session
        bindir = os.path.join(self.tmp, "ctl-bin")
        ctl = os.path.join(bindir, "pcinumactl")
        tree = self.tree("two-socket")
        hostdev = []
        for i, bus in enumerate(("0x21", "0x81"), 1):
            h = "./devices/hostdev[%d]" % i
            hostdev += ["--xml", "xpath.create=%s" % h, "--xml", "%s/@mode=subsystem" % h,
                        "--xml", "%s/@type=pci" % h, "--xml", "%s/@managed=yes" % h,
                        "--xml", "xpath.create=%s/source/address" % h]
            for k, v in (("domain", "0x0000"), ("bus", bus), ("slot", "0x00"), ("function", "0x0")):
                hostdev += ["--xml", "%s/source/address/@%s=%s" % (h, k, v)]
        vi = ["virt-install", "--connect", "qemu:///session", "--name", "vi-planned", "--memory", "1024",
              "--vcpus", "8", "--cpu", "qemu64,cell0.cpus=0-3,cell0.memory=524288,cell1.cpus=4-7,cell1.memory=524288",
              "--numatune", "memnode0.cellid=0,memnode0.mode=strict,memnode0.nodeset=0,"
                            "memnode1.cellid=1,memnode1.mode=strict,memnode1.nodeset=1",
              "--machine", "q35", "--virt-type", "qemu", "--import", "--disk", "none", "--network", "none",
              "--graphics", "none", "--osinfo", "detect=on,require=off", "--print-xml"] + hostdev
        pipeline = "%s | %s plan --sysfs-root %s --policy require - | virsh -c qemu:///session define /dev/stdin" % (
            " ".join("'%s'" % a for a in vi), ctl, tree)
        r = s.run_as(["bash", "-o", "pipefail", "-c", pipeline])
        back = s.dumpxml("vi-planned") if r.returncode == 0 else ""
        pxbs, probs = layout(back, self.node_of) if back else ([], [r.stderr])
        self.check(r.returncode == 0 and "vi-planned" in r.stdout and len(pxbs) == 2 and not probs
                   and NS in back,
                   "virt-install: --print-xml | pcinumactl plan - | virsh define /dev/stdin defines the plan",
                   r.stdout + r.stderr + "\n".join(probs))
        if back:
            ok, msg = self.validate(back, "vi-back")
            self.check(ok, "virt-install: the definition passes virt-xml-validate", msg)
            s.undefine("vi-planned")


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--pcinumactl", "--kubevirt-hook", "--vdsm-hook", "--mkfakesysfs", "--hosts", "--data", "--examples",
                "--workdir"):
        ap.add_argument(opt, required=True)
    ap.add_argument("--no-libvirt", action="store_true", help="the contracts only, without a libvirtd")
    ap.add_argument("--stand-ins-build", action="store_true",
                    help="the adapters are a stand_ins build's (meson -Dstand_ins=true)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    if not a.no_libvirt:
        missing = [t for t in ("libvirtd", "virsh", "virt-xml-validate", "virt-install") if not find_tool(t)]
        if missing:
            print("1..0 # SKIP missing %s (scripts/install-deps.sh installs them)" % ", ".join(missing))
            return 77
    tap = Tap(verbose=a.verbose)
    t = Test(a, tap)
    try:
        t.kubevirt()
        t.vdsm()
        if not a.no_libvirt:
            t.session = start_session(tap)
            if t.session is None:
                return 1
            try:
                t.libvirt()
            finally:
                t.session.stop()
    finally:
        shutil.rmtree(t.tmp, ignore_errors=True)
    print("%d passed, %d failed" % (tap.passed, tap.failed))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())

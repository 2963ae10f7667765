#!/usr/bin/env python3
"""VM start benchmark: `virsh start` of a small TCG domain with the
pcinuma hook installed, against without it.

A private session libvirtd (tests/lib/pcinumatest/session.py, as the user
pcinuma-test) starts a q35/ACPI TCG domain of 64 MiB with no disk (SeaBIOS
finds no boot device, but QEMU runs, and `virsh start` returns once it
does), then destroys it, many times.  Two domains: 'pcinuma-bench-vm-PID'
(no passthrough device, no pcinuma metadata: the hook's fast path) and
'pcinuma-bench-vm-PID-mark' (a <pcinuma:policy> element in its metadata: the hook
sends the XML to pcinumad, which answers 'pass').

libvirt looks for hooks when it starts, so the no-hook baseline needs its
own libvirtd:

  A  libvirtd started with /etc/libvirt/hooks/qemu.d free of our hook:
     'base' = the plain domain, 'base_mark' = the marked one (no hook runs)
  B  libvirtd started with the wrapper /etc/libvirt/hooks/qemu.d/ZZ-pcinuma-bench
     installed (a sh script that execs build/hook/pcinuma-hook with
     PCINUMA_SOCKET and PCINUMA_HOOK_CONF set for this run's domains, and
     only drains stdin for any other domain; the hook runs for prepare,
     start and started during `virsh start`):
     'fast' = the plain domain, 'mark' = the marked one, and, interleaved with them,
     'off' = the plain domain with the wrapper moved out of qemu.d (libvirt reads
     the directory at every call once it knows hooks exist, so this is a
     same-daemon no-hook run); and 'drain' = a third domain the wrapper does not
     hand to pcinuma-hook (its hook is 'cat >/dev/null'): what libvirt's
     running of any hook costs, the floor under 'fast'.  Printed beside the
     targets: drain/off, fast/drain and mark/drain, paired by round.

A and B alternate (A B A B A B: --pairs 3), each block runs its variants interleaved,
order rotated.  pcinumad runs with --allow-uid of pcinuma-test and its
socket made reachable.  The wrapper is always removed (finally, atexit,
SIGTERM).  Targets: median(fast) and median(mark) at most 1.05 x
median(base).

Needs root, libvirtd, virsh, qemu-system-x86_64; otherwise exits 77.

    bench_vm_start.py --hook PATH --pcinumad PATH --session-py PATH
                      --mkfakesysfs PATH --hosts DIR [--example XML] [--rounds N] [--pairs P]
"""

import argparse
import importlib.util
import os
import pwd
import shutil
import sys
import time

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

HOOK_DIR = "/etc/libvirt/hooks/qemu.d"
WRAPPER = os.path.join(HOOK_DIR, "ZZ-pcinuma-bench")


def load_session(path):
    spec = importlib.util.spec_from_file_location("session", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def remove_wrapper(parked=None):
    for p in (WRAPPER, parked):
        if p:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def timed_start(s, name):
    t0 = time.monotonic()
    r = s.virsh("start", name, timeout=120)
    t = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError("virsh start %s failed: %s" % (name, r.stderr.strip()))
    d = s.virsh("destroy", name, timeout=120)
    if d.returncode != 0:
        raise RuntimeError("virsh destroy %s failed: %s" % (name, d.stderr.strip()))
    return t * 1e3


def hook_count(sock):
    return B.call(sock, {"version": 1, "type": "status"})["status"]["requests"]["hook"]


def run(a):
    if os.geteuid() != 0:
        B.skip("needs root (installs a hook in %s)" % HOOK_DIR)
    for tool in ("libvirtd", "virsh", "qemu-system-x86_64"):
        if not (shutil.which(tool) or os.path.exists("/usr/sbin/" + tool)):
            B.skip("%s not found" % tool)
    if os.path.exists(WRAPPER):
        raise RuntimeError("%s exists: another run of this benchmark?" % WRAPPER)
    session = load_session(a.session_py)
    uid = session.ensure_user()[0]
    # creates qemu.d when missing (no Debian package does); at exit it
    # removes the wrapper and only the directories it created
    hookdir = session.HookDir(os.path.basename(WRAPPER), HOOK_DIR)
    hookdir.makedirs()
    B.at_exit(hookdir.remove)      # runs after remove_wrapper (LIFO)

    work = B.short_tmpdir("vm")
    os.chmod(work, 0o711)
    # the hook runs as the session user: a copy it can reach (the build
    # tree may be under /root, mode 0700)
    hook = session.reachable_copy(a.hook, work)
    sysfs = B.mkfakesysfs(a.mkfakesysfs, os.path.join(a.hosts, "sample-4n.json"),
                          os.path.join(work, "host"))
    d = B.Daemon(a.pcinumad, sysfs, work, policy="legacy",
                 extra=["--allow-uid", str(uid)]).start()
    os.chmod(d.sock, 0o666)   # the peer check still serves only root and uid
    conf = os.path.join(work, "bench-hook.conf")
    with open(conf, "w") as f:
        f.write("socket = %s\non_unreachable = refuse\n" % d.sock)
    os.chmod(conf, 0o644)
    # Other test suites on this machine may start libvirtds while the
    # wrapper is installed: their domains must not reach this daemon, so
    # the wrapper only runs the hook for this run's domains (for theirs it
    # drains stdin and exits 0, as a hook that has nothing to say).
    prefix = "pcinuma-bench-vm-%d" % os.getpid()
    wrapper_text = ("#!/bin/sh\n# pcinuma benchmark (tests/bench/bench_vm_start.py); "
                    "removed when it ends\n"
                    "case \"$1\" in\n"
                    "%s*) PCINUMA_SOCKET=%s PCINUMA_HOOK_CONF=%s exec %s \"$@\";;\n"
                    "*) exec cat >/dev/null;;\n"
                    "esac\n"
                    % (prefix, d.sock, conf, hook))
    parked = os.path.join(os.path.dirname(HOOK_DIR), ".pcinuma-bench-parked-%d" % os.getpid())
    B.at_exit(lambda: remove_wrapper(parked))

    def install():
        hookdir.install(wrapper_text)

    plain_vm, mark_vm = prefix, prefix + "-mark"
    # A domain the wrapper does not hand to pcinuma-hook: for it, the hook
    # installed is 'cat >/dev/null', so its starts cost what libvirt's
    # running of any hook costs (fork of libvirtd, sh, the XML on stdin,
    # three times per start): the floor under the 'fast' variant.
    drain_vm = "pcinuma-drain-vm-%d" % os.getpid()
    xml = {plain_vm: B.plain_domain_xml(plain_vm, 0),
           mark_vm: B.plain_domain_xml(mark_vm, 0, mark=True),
           drain_vm: B.plain_domain_xml(drain_vm, 0)}
    B.say("# wrapper %s:\n# %s" % (WRAPPER, wrapper_text.strip().replace("\n", "\n# ")))
    B.say("# domain XML (%s):\n# %s" % (mark_vm, xml[mark_vm].replace("\n", "\n# ")))
    times = {k: [] for k in ("base", "base_mark", "off", "drain", "fast", "mark")}
    rounds_b = []        # per B round: {variant: ms}, for paired ratios
    # More, shorter blocks follow the machine's drift better than two long
    # ones; --rounds starts of each variant in all, over --pairs A B pairs.
    per_block = max(1, a.rounds // a.pairs)
    for block in ("A", "B") * a.pairs:
        if block == "B":
            install()
        else:
            remove_wrapper()
        foreign = sorted(f for f in os.listdir(HOOK_DIR) if f != os.path.basename(WRAPPER))
        if foreign:
            B.say("# block %s: other hooks in %s at libvirtd start (not ours, they run too): %s"
                  % (block, HOOK_DIR, " ".join(foreign)))
        t_block = time.monotonic()
        s = session.Session()
        try:
            for name, text in xml.items():
                s.define(text)
            if block == "A":
                variants = [("base", plain_vm), ("base_mark", mark_vm)]
            else:
                variants = [("off", plain_vm), ("drain", drain_vm), ("fast", plain_vm), ("mark", mark_vm)]
            # warm-up (first start loads QEMU and its capabilities), and checks
            before = hook_count(d.sock)
            timed_start(s, mark_vm)
            timed_start(s, plain_vm)
            calls = hook_count(d.sock) - before
            want = 1 if block == "B" else 0
            if calls != want:
                raise RuntimeError("block %s: the daemon saw %d hook request(s) for one start of "
                                   "%s, expected %d" % (block, calls, mark_vm, want))
            for r in range(per_block):
                this_round = {}
                for k in range(len(variants)):
                    var, name = variants[(k + r) % len(variants)]
                    if var == "off":
                        os.rename(WRAPPER, parked)
                    try:
                        this_round[var] = timed_start(s, name)
                        times[var].append(this_round[var])
                    finally:
                        if var == "off":
                            os.rename(parked, WRAPPER)
                if block == "B":
                    rounds_b.append(this_round)
            if block == "B":
                # the parked wrapper is invisible to this libvirtd:
                os.rename(WRAPPER, parked)
                before = hook_count(d.sock)
                timed_start(s, mark_vm)
                seen = hook_count(d.sock) - before
                os.rename(parked, WRAPPER)
                if seen != 0:
                    raise RuntimeError("with the wrapper parked the hook still ran: 'off' is not a no-hook run")
        finally:
            s.stop()
            remove_wrapper(parked)
        B.say("# block %s done in %.0f s: %s" % (block, time.monotonic() - t_block,
                                                  {k: len(v) for k, v in times.items()}))
    d.stop()

    B.say("# virsh start wall time, ms (as pcinuma-test, qemu:///session, TCG):")
    for k, v in times.items():
        v = sorted(v)
        B.say("#   %-9s median %.1f  p10 %.1f  p90 %.1f  n=%d" % (
            k, B.median(v), v[len(v) // 10], v[(len(v) * 9) // 10], len(v)))
    paired = {v: B.median([r[v] / r["off"] for r in rounds_b]) for v in ("drain", "fast", "mark")}
    B.say("# paired within B (median over rounds of start/off-start of the same round): "
          "drain %.3f, fast %.3f, mark %.3f" % (paired["drain"], paired["fast"], paired["mark"]))
    base = B.median(times["base"])
    for k in ("base", "base_mark", "off", "drain", "fast", "mark"):
        B.info("vmstart.%s_median_ms" % k, B.median(times[k]), "ms", "%.1f")
    # What libvirt's running a hook costs whatever the hook is, and what
    # pcinuma-hook adds above a hook that only drains its stdin.
    B.info("vmstart.any_hook_ratio", paired["drain"], "x", "%.3f")
    B.info("vmstart.fast_vs_drain", B.median([r["fast"] / r["drain"] for r in rounds_b]), "x", "%.3f")
    B.info("vmstart.mark_vs_drain", B.median([r["mark"] / r["drain"] for r in rounds_b]), "x", "%.3f")
    B.result("vmstart.fast_path_ratio", B.median(times["fast"]) / base, "x", "<=", 1.05, "%.3f",
             "vs the same daemon with the hook parked: %.3f, paired %.3f"
             % (B.median(times["fast"]) / B.median(times["off"]), paired["fast"]))
    B.result("vmstart.daemon_path_ratio", B.median(times["mark"]) / B.median(times["base_mark"]), "x",
             "<=", 1.05, "%.3f", "vs the same daemon with the hook parked: %.3f, paired %.3f"
             % (B.median(times["mark"]) / B.median(times["off"]), paired["mark"]))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    for opt in ("--hook", "--pcinumad", "--session-py", "--mkfakesysfs", "--hosts"):
        ap.add_argument(opt, required=True)
    ap.add_argument("--example")
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--pairs", type=int, default=3)
    B.main(lambda: run(ap.parse_args()))

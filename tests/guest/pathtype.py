"""The path type between two PCI devices, from their resolved sysfs paths.

One rule for both sides of the guest path test (test_guest.py): the host's
types come from the fixture sysfs tree, the guest's from the booted guest's
own /sys, and both go through path_type() here, so a difference between the
two matrices is a difference in topology, never in how it was read.

The names are `nvidia-smi topo -m`'s, which NCCL's path types follow:

    PIX   at most one PCIe bridge between them: the ports of one switch,
          or the functions behind one port;
    PXB   several bridges, without crossing a host bridge;
    PHB   through one host bridge (same pciDDDD:BB root, different root
          ports);
    NODE  across host bridges of one NUMA node;
    SYS   across NUMA nodes (or when either node is unknown: NCCL cannot
          assume the two are close either).

What is read is what NCCL reads: the real path of /sys/bus/pci/devices/BDF
(or of /sys/class/net/IF/device, minus a virtioN child) and numa_node. A
chain is that path's components below /sys/devices: the host bridge
"pciDDDD:BB" first, then each bridge's BDF, then the device's own BDF.

Bridges are counted as switches, not ports.  Below a host bridge the chain
is a root port, then (upstream port, downstream port) pairs, one pair per
switch level, so a bridge at an even depth is an upstream port and one at an
odd depth >= 3 is a downstream port that belongs to the upstream port just
above it.  That is NCCL's own reading (it keeps a device's grandparent, the
upstream port, as the switch) and needs nothing but the path.
"""

import os

TYPES = ("PIX", "PXB", "PHB", "NODE", "SYS")
RANK = {t: i for i, t in enumerate(TYPES)}


def chain_of(path):
    """'/x/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0' ->
    ['pci0000:10', '0000:10:01.0', '0000:11:00.0'].  Raises ValueError when
    the path has no pci host bridge component."""
    parts = [p for p in path.split("/") if p]
    for i, p in enumerate(parts):
        if p.startswith("pci") and ":" in p and i > 0 and parts[i - 1] == "devices":
            return parts[i:]
    raise ValueError("%s is not below devices/pciDDDD:BB" % path)


def pci_path(path):
    """Strip the non-PCI children a class device link ends in (a virtio-net
    interface's device is .../0000:fd:00.0/virtio3): what stays ends in the
    PCI function's BDF."""
    parts = path.rstrip("/").split("/")
    while parts and not _is_bdf(parts[-1]):
        parts.pop()
    return "/".join(parts)


def _is_bdf(s):
    try:
        dom, bus, df = s.split(":")
        dev, fn = df.split(".")
        int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16)
        return len(bus) == 2 and len(dev) == 2 and len(fn) == 1
    except ValueError:
        return False


def read_end(sysroot, bdf):
    """(chain, numa_node) of host device bdf in a sysfs tree rooted at
    sysroot, as NCCL would read it on that host."""
    link = os.path.join(sysroot, "bus", "pci", "devices", bdf)
    real = os.path.realpath(link)
    if not os.path.isdir(real):
        raise ValueError("%s: no such device in %s" % (bdf, sysroot))
    try:
        with open(os.path.join(real, "numa_node")) as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        node = -1
    return chain_of(real), node


def _unit(chain, depth):
    """The bridge unit the element at depth (host bridge = 0) belongs to: a
    root port is its own; a switch's downstream port belongs to its
    upstream port."""
    if depth == 1 or depth % 2 == 0:
        return chain[depth]
    return chain[depth - 1]


def path_type(a, b):
    """a, b: (chain, numa_node).  Returns one of TYPES."""
    ca, na = a
    cb, nb = b
    if ca[0] != cb[0]:
        return "NODE" if na >= 0 and na == nb else "SYS"
    # deepest shared element (the host bridge at least); the devices
    # themselves are never shared (two functions differ in their BDF)
    c = 0
    while c < len(ca) - 1 and c < len(cb) - 1 and ca[c] == cb[c]:
        c += 1
    turn = c - 1
    if turn == 0:
        return "PHB"
    units = {_unit(ca, turn)}
    for ch in (ca, cb):
        for depth in range(c, len(ch) - 1):
            units.add(_unit(ch, depth))
    return "PIX" if len(units) <= 1 else "PXB"


def compare(host, guest):
    """'same', 'closer' (the guest's type is nearer than the host's: the
    dangerous error, NCCL may use a path the hardware lacks) or 'farther'."""
    if host == guest:
        return "same"
    return "closer" if RANK[guest] < RANK[host] else "farther"


def matrix(labels, types):
    """A `nvidia-smi topo -m`-style text matrix: a row per label, columns
    d0, d1, ... in the same order.  types[(i, j)] for i != j; the diagonal
    prints X."""
    w = max([len(x) for x in labels] + [4]) + 1
    out = [" " * w + " ".join("%-4s" % ("d%d" % j)
                              for j in range(len(labels))).rstrip()]
    for i, lab in enumerate(labels):
        row = ["%-4s" % ("X" if i == j else types.get((i, j), "?"))
               for j in range(len(labels))]
        out.append((("%-" + str(w) + "s") % lab + " ".join(row)).rstrip())
    return "\n".join(out)

"""Comparing domain XML as libvirt gives it back: identical bytes, equal
canonical XML (xmllint --c14n, else Python's C14N 2.0), or equal up to the
order of <devices> children of different kinds; with a unified diff for
the report."""
import difflib
import os
import subprocess
import xml.etree.ElementTree as ET

from pcinumatest.session import find_tool

TOOL_TIMEOUT = 60


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def c14n(text, workdir, tag):
    """Canonical XML via xmllint --c14n, falling back to Python's C14N 2.0."""
    xmllint = find_tool("xmllint")
    if xmllint:
        path = write(os.path.join(workdir, tag + ".c14n-in.xml"), text)
        r = subprocess.run([xmllint, "--c14n", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TOOL_TIMEOUT)
        if r.returncode == 0:
            return r.stdout.decode("utf-8", "replace")
        return None
    try:
        return ET.canonicalize(text)
    except ET.ParseError:
        return None


def diff(a, b, la="a", lb="b", limit=60):
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(),
                                      la, lb, lineterm="", n=2))
    if len(lines) > limit:
        lines = lines[:limit] + ["... (%d more diff lines)" % (len(lines) - limit)]
    return "\n".join(lines)


def compare(got, want, workdir, tag, lgot, lwant):
    """Return (ok, how, diag): how is 'bytes' or 'c14n'."""
    if got == want:
        return True, "identical bytes", None
    cg = c14n(got, workdir, tag + "-got")
    cw = c14n(want, workdir, tag + "-want")
    if cg is None or cw is None:
        return False, "not well-formed", diff(want, got, lwant, lgot)
    if cg == cw:
        return True, "C14N-equal, bytes differ", diff(want, got, lwant, lgot)
    sg, sw = device_order_free(got), device_order_free(want)
    if sg is not None and sg == sw:
        return True, "equal up to the order of <devices> children of different kinds", None
    return False, "differs", diff(want, got, lwant, lgot)


def device_order_free(text):
    """C14N of the document with <devices> children stably sorted by
    element name and type attribute.  libvirt keeps elements of one kind
    (disks, hostdevs ...) in order, and that order matters; the interleaving
    of different kinds, and the order of controllers (which their type and
    index identify), depend on the history of the definition and mean
    nothing."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return None
    for devices in root.iter("devices"):
        kids = list(devices)
        for k in kids:
            devices.remove(k)
        def key(e):
            # Controllers are identified by type and index, never by place.
            idx = int(e.get("index", "0"), 0) if e.tag == "controller" else 0
            return (e.tag, e.get("type") or "", idx)
        for k in sorted(kids, key=key):
            k.tail = "\n"
            devices.append(k)
    return ET.canonicalize(ET.tostring(root, encoding="unicode"), strip_text=True)

#!/usr/bin/env python3
"""A stand-in for pcinuma-watcher, for the daemon and faults tests.

pcinumad starts it as it starts the real one (--watcher-program: this file,
with --uri and --log-target, its end of the link on fd 3).  It speaks the
link's protocol (lib/base/wproto.h's opening comment), and behaves as
FAKE_WATCHER_MODE says:

  libvirt  (default) a tiny libvirt: the persistent definitions are the
           files $FAKE_WATCHER_DIR/domains/<uuid>.xml.  At start it plans
           every one (as the real watcher does when it connects); a
           {"type":"recheck"} plans every one again, {"type":"recheck",
           "uuid":U} plans U.  A "planned" answer with redefine true
           replaces the file (a define).
  stall    sends one plan request and never reads its link again.
  flood    sends every domain's plan request, again and again, and never
           reads its link.
  once     sends one plan request, reads the answer, and then idles.

It sends a status message at start and after each define, with the
number of defines as "redefinitions"; with FAKE_WATCHER_CONFLICTS=N set,
the status also carries the watcher's other counters, "conflicts" N.

Everything it receives and does is appended, one JSON object a line, to
$FAKE_WATCHER_DIR/events.jsonl: {"ev":"recheck","uuid":U|"*"},
{"ev":"plan","uuid":U,"redefine":b,"prio":n,"summary":s,"error":s,"fields":[[k,v],...]},
{"ev":"define","uuid":U}, {"ev":"idle"} (all caught up).
"""
import glob
import json
import os
import select
import struct
import sys
import time

FD = 3
DIR = os.environ.get("FAKE_WATCHER_DIR", ".")
MODE = os.environ.get("FAKE_WATCHER_MODE", "libvirt")
buf = b""
next_id = 0
queue = []


def log(**ev):
    with open(os.path.join(DIR, "events.jsonl"), "a") as f:
        f.write(json.dumps(ev) + "\n")


def send(obj):
    data = json.dumps(obj).encode()
    frame = struct.pack(">I", len(data)) + data
    off = 0
    while off < len(frame):
        try:
            off += os.write(FD, frame[off:])
        except BlockingIOError:
            select.select([], [FD], [])


def read_frame(block=True):
    """The next object, or None (not block: nothing complete yet; EOF: exit)."""
    global buf
    while True:
        if len(buf) >= 4:
            n = struct.unpack(">I", buf[:4])[0]
            if len(buf) >= 4 + n:
                obj = json.loads(buf[4:4 + n])
                buf = buf[4 + n:]
                return obj
        if not select.select([FD], [], [], None if block else 0)[0]:
            return None
        try:
            chunk = os.read(FD, 1 << 20)
        except BlockingIOError:
            continue
        if not chunk:
            sys.exit(0)          # pcinumad closed the link
        buf += chunk


def domains():
    return sorted(glob.glob(os.path.join(DIR, "domains", "*.xml")))


def uuid_of(path):
    return os.path.basename(path)[:-4]


def take(obj):
    """A message that is not the answer being waited for."""
    if obj.get("type") == "recheck":
        u = obj.get("uuid") or "*"
        log(ev="recheck", uuid=u)
        queue.append(u)
    else:
        log(ev="unexpected", msg=obj)


def plan(path):
    global next_id
    try:
        with open(path) as f:
            xml = f.read()
    except FileNotFoundError:
        log(ev="gone", uuid=uuid_of(path))
        return
    next_id += 1
    send({"type": "plan", "id": next_id, "xml": xml})
    while True:
        a = read_frame()
        if a.get("type") == "planned" and a.get("id") == next_id:
            break
        take(a)
    log(ev="plan", uuid=uuid_of(path), redefine=bool(a.get("redefine")), prio=a.get("prio"),
        summary=a.get("summary"), error=a.get("error"), size=len(a.get("xml") or ""),
        fields=a.get("fields") or [])
    if a.get("redefine") and a.get("xml"):
        with open(path + ".tmp", "w") as f:
            f.write(a["xml"])
        os.rename(path + ".tmp", path)
        log(ev="define", uuid=uuid_of(path))
        global defines
        defines += 1
        status()


defines = 0


def status():
    st = {"type": "status", "connected": True, "redefinitions": defines, "failures": 0, "last_error": None}
    if os.environ.get("FAKE_WATCHER_CONFLICTS"):
        st.update({"settle_ms": 0, "pending": 0, "events": 0, "conflicts": int(os.environ["FAKE_WATCHER_CONFLICTS"]),
                   "undone": 0, "windows": 0, "window_us_sum": 0, "window_us_max": 0})
    send(st)


def main():
    global next_id
    os.set_blocking(FD, False)
    status()
    if MODE == "stall":
        next_id += 1
        with open(domains()[0]) as f:
            send({"type": "plan", "id": next_id, "xml": f.read()})
        log(ev="stalled")
        while True:
            time.sleep(60)
    if MODE == "flood":
        xmls = [open(p).read() for p in domains()]
        log(ev="flooding")
        while True:
            for x in xmls:
                next_id += 1
                send({"type": "plan", "id": next_id, "xml": x})
    if MODE == "once":
        plan(domains()[0])
        log(ev="idle")
        while True:
            read_frame()
    queue.append("*")
    while True:
        while queue:
            u = queue.pop(0)
            if u == "*":
                for p in domains():
                    plan(p)
            else:
                plan(os.path.join(DIR, "domains", u + ".xml"))
            obj = read_frame(block=False)
            while obj is not None:
                take(obj)
                obj = read_frame(block=False)
        log(ev="idle")
        take(read_frame())


if __name__ == "__main__":
    main()

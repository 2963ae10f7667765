#!/usr/bin/env python3
"""A stand-in for pcinuma-watcher, for the daemon and faults tests.

pcinumad starts it as it starts the real one (--watcher-program: this file,
with --uri and --log-target, its end of the link on fd 3).  It speaks the
link's protocol (lib/base/watcher-protocol.h's opening comment), and behaves as
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

In libvirt mode it also plays the restarts into the plan: at start it
sends {"type":"domains"} naming every file in domains/ (they are the
persistent domains; any other UUID is transient), and on a
{"type":"restart","uuid":U} it asks pcinumad at once for the restart plan
of U's live XML ($FAKE_WATCHER_DIR/live/U.xml, else domains/U.xml), as the
real watcher does on the domain's STARTED event (a conditional one,
"if_persistent", only if domains/U.xml exists; else it logs
{"ev":"restart_transient","uuid":U}).  A test makes it send
anything else (a "restarted" report, a "domain" change, a status) by
writing the message as JSON to $FAKE_WATCHER_DIR/cmd/NAME.json: it is sent
as it is within 50 ms, and the file removed.

It sends a status message at start and after each define, with the
number of defines as "redefinitions"; with FAKE_WATCHER_CONFLICTS=N set,
the status also carries the watcher's other counters, "conflicts" N.

Everything it receives and does is appended, one JSON object a line, to
$FAKE_WATCHER_DIR/events.jsonl: {"ev":"recheck","uuid":U|"*"},
{"ev":"plan","uuid":U,"redefine":b,"prio":n,"summary":s,"error":s,"fields":[[k,v],...]},
{"ev":"define","uuid":U}, {"ev":"restart","uuid":U,"window_ms":n,"since_us":n,"if_persistent":b},
{"ev":"restart_plan","uuid":U,"redefine":b,"summary":s,"xml":s,"fields":[...]},
{"ev":"sent","msg":M} (a cmd file), {"ev":"idle"} (all caught up).
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


def read_events(folder):
    """The tests' side of log(): the events a fake watcher with
    FAKE_WATCHER_DIR=folder wrote so far, in order ([] before the first)."""
    try:
        with open(os.path.join(folder, "events.jsonl")) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


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
    elif obj.get("type") == "restart":
        cond = bool(obj.get("if_persistent"))
        log(ev="restart", uuid=obj.get("uuid"), window_ms=obj.get("window_ms"), since_us=obj.get("since_us"),
            if_persistent=cond)
        # A conditional request goes on only for a persistent domain (one
        # in domains/), as the real watcher's once the domain is up.
        if not cond or os.path.exists(os.path.join(DIR, "domains", "%s.xml" % obj.get("uuid"))):
            queue.append(("restart", obj.get("uuid")))
        else:
            log(ev="restart_transient", uuid=obj.get("uuid"))
    else:
        log(ev="unexpected", msg=obj)


def ask(req):
    """Send a request with a fresh id; the "planned" answer to it."""
    global next_id
    next_id += 1
    req["id"] = next_id
    send(req)
    while True:
        a = read_frame()
        if a.get("type") == "planned" and a.get("id") == next_id:
            return a
        take(a)


def restart_plan(u):
    """The restart plan of U's live XML, as the real watcher asks for it
    when U is up."""
    path = os.path.join(DIR, "live", u + ".xml")
    if not os.path.exists(path):
        path = os.path.join(DIR, "domains", u + ".xml")
    try:
        with open(path) as f:
            xml = f.read()
    except FileNotFoundError:
        log(ev="gone", uuid=u)
        return
    a = ask({"type": "plan_restart", "uuid": u, "xml": xml})
    log(ev="restart_plan", uuid=u, redefine=bool(a.get("redefine")), summary=a.get("summary"),
        xml=a.get("xml"), prio=a.get("prio"), fields=a.get("fields") or [])


def send_cmds():
    """The messages a test left in cmd/, in name order."""
    d = os.path.join(DIR, "cmd")
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        with open(path) as f:
            msg = json.load(f)
        os.remove(path)
        send(msg)
        log(ev="sent", msg=msg)


def plan(path):
    try:
        with open(path) as f:
            xml = f.read()
    except FileNotFoundError:
        log(ev="gone", uuid=uuid_of(path))
        return
    a = ask({"type": "plan", "xml": xml})
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
    send({"type": "domains", "persistent": [uuid_of(p) for p in domains()]})
    queue.append("*")
    while True:
        while queue:
            u = queue.pop(0)
            if isinstance(u, tuple):
                restart_plan(u[1])
            elif u == "*":
                for p in domains():
                    plan(p)
            else:
                plan(os.path.join(DIR, "domains", u + ".xml"))
            obj = read_frame(block=False)
            while obj is not None:
                take(obj)
                obj = read_frame(block=False)
        log(ev="idle")
        while not queue:
            send_cmds()
            if select.select([FD], [], [], 0.05)[0] or len(buf) >= 4:
                obj = read_frame(block=False)
                if obj is not None:
                    take(obj)


if __name__ == "__main__":
    main()

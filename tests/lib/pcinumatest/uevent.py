"""Playing udevd in tests: the netlink multicast message udevd sends to
libudev listeners (group 2, the "libudev" header, the subsystem hash the
monitor's BPF filter checks).  Sending it needs root.  Used by the daemon
suite's udev and recheck tests and by bench_recheck."""
import socket
import struct

NETLINK_KOBJECT_UEVENT = 15
UDEV_GROUP = 2


def murmur2(data, seed=0):
    """systemd's string_hash32(): MurmurHash2, 32-bit, little-endian."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (seed ^ length) & 0xFFFFFFFF
    i = 0
    while length >= 4:
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
        i += 4
        length -= 4
    if length == 3:
        h ^= data[i + 2] << 16
    if length >= 2:
        h ^= data[i + 1] << 8
    if length >= 1:
        h ^= data[i]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def uevent(action, devpath, subsystem, seqnum):
    props = ("ACTION=%s\0DEVPATH=%s\0SUBSYSTEM=%s\0SEQNUM=%d\0" % (action, devpath, subsystem, seqnum)).encode()
    # The magic and the filter hashes are big-endian on the wire, the sizes
    # native (systemd's struct monitor_netlink_header).
    header = struct.pack("8s", b"libudev\0")
    header += struct.pack(">I", 0xFEEDCAFE)
    header += struct.pack("=III", 40, 40, len(props))
    header += struct.pack(">II", murmur2(subsystem.encode()), 0)
    header += struct.pack("=II", 0, 0)
    assert len(header) == 40
    return header + props


def send(msg):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_KOBJECT_UEVENT)
    try:
        s.bind((0, 0))
        s.sendto(msg, (0, UDEV_GROUP))
    finally:
        s.close()


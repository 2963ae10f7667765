#!/bin/sh
# Install, with apt, every Debian 12 package that building, testing and the
# demo need, and create the users and directories that libvirt's packages
# expect when they are installed without their recommends.  Safe to re-run:
# it installs only what is missing.  The list is what a minimal Debian 12
# ('debootstrap --variant=minbase bookworm') lacks for ./scripts/demo.sh and
# ./scripts/test.sh; the test command's fresh-machine check
# (tests/fresh/test_fresh_demo.sh) proves it for the demo.  With --demo it
# installs only what the demo needs (DEMO_PKGS: building without the test
# suites, libvirt, QEMU, and the guest's kernel, busybox and cpio).  apt's
# output goes to a log file; its last lines are shown when apt fails.
#   git, ca-certificates   cloning the repository (https)
#   debootstrap            the fresh-machine check itself
#   groff-base, strace     the man page check (groff -ww); the system-call
#                          count of the host-map benchmark
#   iproute2               the migration test's network namespaces and veth
#                          pairs (tests/libvirt/test_migrate.py; without
#                          it that test falls back to Unix sockets)
#   nettle-dev             SHA-256 for the topology fingerprint
#                          (lib/core/sha256.c; libnettle8 is on every
#                          libvirt host, through gnutls)
#   ovmf                   the guest suite's UEFI case (mmio64: eight
#                          64 GiB BARs under OVMF, tests/guest, case h)
#   hwloc-nox              lstopo-no-graphics reads pcinumactl's hwloc XML
#                          (tests/golden/test-hwloc.py); the pictures in
#                          docs/ need Debian's hwloc instead (lstopo with
#                          cairo; it conflicts with hwloc-nox), see
#                          scripts/pcinuma-pictures.sh
#   virtinst, python3-libvirt  the real-client suite (tests/clients, in the
#                          stand_ins build of scripts/test.sh): virt-install
#                          and a Nova-like client on Debian's libvirt
#                          bindings start guests as real clients do; also
#                          tests/clients/test_adapters.py (--print-xml |
#                          pcinumactl plan - | virsh define /dev/stdin)
# Not listed: prometheus.  Its promtool checks pcinumad's metrics file
# (tests/daemon/test_metrics.py), but installing the package also enables
# a Prometheus server on :9090; the test unpacks the package into the build
# tree instead ('apt-get download' and 'dpkg-deb -x': nothing installed;
# tests/lib/pcinumatest/promtool.py), or uses a promtool on the PATH.
# clang is not listed: the test command builds with the default cc, and
# the libFuzzer targets are built only with CC=clang (docs/fuzzing.md).
set -eu

PKGS="gcc meson ninja-build pkg-config python3
      libxml2-dev libjson-c-dev libsystemd-dev libvirt-dev libcmocka-dev nettle-dev
      libxml2-utils libvirt-clients libvirt-daemon libvirt-daemon-driver-qemu
      qemu-system-x86 qemu-utils ovmf
      linux-image-amd64 busybox-static cpio
      sudo procps systemd valgrind bzip2 groff-base strace iproute2
      hwloc-nox
      git ca-certificates debootstrap virtinst python3-libvirt
      build-essential debhelper dpkg-dev"

# What ./scripts/demo.sh needs: the build (no cmocka: the demo builds
# without the test suites), libvirt and QEMU, the guest's kernel, busybox
# and cpio, and xmllint (the demo's diff).
DEMO_PKGS="gcc meson ninja-build pkg-config python3
      libxml2-dev libjson-c-dev libsystemd-dev libvirt-dev nettle-dev
      libxml2-utils libvirt-clients libvirt-daemon libvirt-daemon-driver-qemu
      qemu-system-x86
      linux-image-amd64 busybox-static cpio"

if [ "${1:-}" = --demo ]; then
    PKGS=$DEMO_PKGS
    shift
fi

# --list: print the list, one package a line, and install nothing (the
# second-stack check, tests/stack2/test_stack2.sh, installs it in a chroot).
if [ "${1:-}" = --list ]; then
    # shellcheck disable=SC2086
    printf '%s\n' $PKGS
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: must run as root to install packages with apt" >&2
    exit 1
fi

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -n "$missing" ]; then
    log=$(mktemp /tmp/pcinuma-install-deps.XXXXXX.log)
    # shellcheck disable=SC2086
    set -- $missing
    echo "install-deps: installing $# packages with apt (log: $log):$missing"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! { apt-get update -q && apt-get install -y -q --no-install-recommends $missing; } >"$log" 2>&1; then
        echo "install-deps: apt-get failed; the end of $log:" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
else
    echo "install-deps: all packages present"
fi

# libvirt's packages, installed without recommends, do not create these.
getent group kvm >/dev/null || groupadd -r kvm
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
mkdir -p /var/log/libvirt /var/run/libvirt

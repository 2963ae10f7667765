#!/bin/sh
# The second tested stack, the part that runs INSIDE the chroot that
# tests/stack2/test_stack2.sh prepares (Debian 12 minbase with libvirt and
# QEMU from bookworm-backports): as root, from the copied source tree
# (the current directory), print the versions under test, create what
# libvirt's packages installed without recommends do not (as
# scripts/install-deps.sh does on the host), build pcinuma in a fresh
# build directory and run the given meson suites there.
#
#   inside.sh BUILDDIR GUEST_CASES SUITE...
#
# GUEST_CASES: the guest suite's cases to run (its --filter, e.g.
# 'bcdefg'); empty runs them all.  The guest suite runs on its own, its
# domains run by tests/stack2/qemu-tcg-single.sh (QEMU with
# single-threaded TCG: QEMU 10.0.2's multi-threaded TCG aborts at random
# while a guest boots, docs/install.md "Tested versions"), logged as
# BUILDDIR/meson-logs/guestlog.*, the others in testlog.*.
# The clients suite exists only in a stand_ins build: with 'clients'
# among the suites, a second build BUILDDIR-standins (-Dstand_ins=true)
# runs it, its domains run by qemu-tcg-single.sh as well
# ($PCINUMA_CLIENTS_EMULATOR), logged as BUILDDIR-standins/meson-logs/
# clientslog.*.
# Prints 'stack2: ...' lines for the outer script; exits non-zero when
# a build or a meson test run fails.
set -u

builddir=$1
guest_cases=$2
shift 2

echo "stack2: libvirt: $(libvirtd --version 2>&1)"
virsh -c test:///default version 2>&1 | sed 's/^/stack2: virsh version: /'
echo "stack2: qemu: $(qemu-system-x86_64 --version 2>&1 | head -n 1)"
dpkg-query -W -f='stack2: package: ${Package} ${Version}\n' \
    libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev \
    qemu-system-x86 qemu-utils linux-image-amd64 meson gcc python3-libvirt virtinst 2>&1
echo "stack2: kvm: $([ -w /dev/kvm ] && echo "/dev/kvm present (the suites use TCG anyway)" || echo "no usable /dev/kvm (the suites use TCG)")"

# libvirt's packages, installed without recommends, do not create these.
getent group kvm >/dev/null || groupadd -r kvm
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent passwd libvirt-qemu >/dev/null ||
    useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
mkdir -p /var/log/libvirt /var/run/libvirt

rm -rf "$builddir"
if ! meson setup "$builddir" >"$builddir.setup.log" 2>&1; then
    cat "$builddir.setup.log"
    echo "stack2: meson setup FAILED"
    exit 1
fi
if ! ninja -C "$builddir" >"$builddir.ninja.log" 2>&1; then
    tail -n 60 "$builddir.ninja.log"
    echo "stack2: build FAILED (-Werror against libvirt $(libvirtd --version 2>&1 | awk '{print $NF}'))"
    exit 1
fi
echo "stack2: built ($(grep -c . "$builddir.ninja.log") ninja lines, no error)"

args=""
guest=0
clients=0
for s in "$@"; do
    case $s in
        guest) guest=1 ;;
        clients) clients=1 ;;
        *) args="$args --suite $s" ;;
    esac
done
rc=0
if [ -n "$args" ]; then
    echo "stack2: meson test$args"
    # shellcheck disable=SC2086
    meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" $args || rc=$?
    echo "stack2: meson test exit $rc"
fi
if [ "$guest" = 1 ]; then
    targs="--emulator=$(pwd)/tests/stack2/qemu-tcg-single.sh"
    [ -z "$guest_cases" ] || targs="$targs --filter=$guest_cases"
    echo "stack2: meson test --suite guest --test-args='$targs'"
    grc=0
    meson test -C "$builddir" --print-errorlogs --logbase guestlog --suite guest \
        "--test-args=$targs" || grc=$?
    echo "stack2: meson test (guest cases ${guest_cases:-all}) exit $grc"
    [ "$grc" -eq 0 ] || rc=$grc
fi
if [ "$clients" = 1 ]; then
    sdir=$builddir-standins
    rm -rf "$sdir"
    crc=0
    if ! meson setup -Dstand_ins=true "$sdir" >"$sdir.setup.log" 2>&1; then
        cat "$sdir.setup.log"
        echo "stack2: meson setup -Dstand_ins=true FAILED"
        crc=1
    elif ! ninja -C "$sdir" >"$sdir.ninja.log" 2>&1; then
        tail -n 60 "$sdir.ninja.log"
        echo "stack2: the stand_ins build FAILED"
        crc=1
    else
        echo "stack2: meson test --suite clients (in $sdir, built with -Dstand_ins=true)"
        PCINUMA_CLIENTS_EMULATOR=$(pwd)/tests/stack2/qemu-tcg-single.sh \
            meson test -C "$sdir" --print-errorlogs --logbase clientslog --suite clients || crc=$?
        echo "stack2: meson test --suite clients exit $crc"
    fi
    [ "$crc" -eq 0 ] || rc=$crc
fi
exit "$rc"

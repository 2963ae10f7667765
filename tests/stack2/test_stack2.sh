#!/bin/sh
# The second tested platform (issue 17, part 4): the libvirt, daemon and
# guest suites against libvirt 11 and QEMU 10, the stack of Debian 13,
# as Debian 12's bookworm-backports carries it (docs/install.md, "Tested
# versions").  Meson suite 'stack2'.
#
#   1. a minimal Debian 12 chroot ('debootstrap --variant=minbase
#      bookworm') in WORKDIR/root, with bookworm-backports enabled and
#      scripts/install-deps.sh's packages installed, those of libvirt and
#      QEMU from bookworm-backports (python3-libvirt and virtinst too when
#      backports carries them), plus ovmf (see below).  Cached: reused
#      as it is while WORKDIR/root's stamp (mirror, releases, package
#      lists) matches; when only the package lists changed, apt-get
#      installs the difference; else debootstrapped anew;
#   2. this source tree copied into /root/pcinuma (the files git knows,
#      committed or not, without ignored ones such as build directories;
#      outside git, everything but build*/);
#   3. /proc, /sys, /dev (with /dev/pts) and a tmpfs on /run mounted;
#      tests/stack2/inside.sh, as root in the chroot, prints the versions,
#      builds pcinuma and runs 'meson test --suite libvirt --suite daemon'
#      and the guest suite, all its cases, there, and in a second build
#      with -Dstand_ins=true the clients suite (real clients, real guests:
#      docs/hacking.md, "The stand-in seam").  libvirtd runs in session
#      mode as an unprivileged user (tests/libvirt/session.py), domains
#      under TCG; the guest and clients suites' single-threaded (see below).
# Everything mounted is unmounted, and every process left in the chroot
# killed, on every exit path; the chroot stays (unmounted) for the next run.
#
# The mirror is the machine's own (tests/fresh/apt-mirror.py).  When no
# mirror answers (for bookworm or bookworm-backports) the check is
# skipped (exit 77) with a loud message; it is skipped too when not root
# and inside this check's or the fresh-machine check's own chroot.  Any
# later failure fails it.  Prints 'ok N - ...' / 'not ok N - ...' lines,
# one per inner test with its time, and ends with 'N passed, M failed'.
#
#   test_stack2.sh --source DIR --workdir DIR [--suites "libvirt daemon guest clients"]
#                  [--fresh]
#     --fresh   debootstrap anew even when the cached chroot's stamp matches
# Environment: PCINUMA_STACK2_SUITES (default "libvirt daemon guest clients";
# clients runs in a second build, -Dstand_ins=true);
# PCINUMA_STACK2_TIMEOUT (seconds for the builds and the suites inside,
# default 2700); PCINUMA_STACK2_GUEST_CASES (the guest suite's cases to
# run, its --filter, e.g. 'fg'; empty, the default, runs them all).
set -u

source=""
workdir=""
# The four suites, every time (clients in a stand_ins build of its own;
# inside.sh makes it).  The guest suite's domains run QEMU with
# single-threaded TCG here (inside.sh passes tests/stack2/qemu-tcg-single.sh
# as its --emulator): QEMU 10.0.2's default multi-threaded TCG aborts at
# random while Linux assigns the BARs, "iotlb_to_section: Assertion
# `section_index < d->map.sections_nb' failed" (system/physmem.c), the
# domain shut off before the kernel prints a line; most with case (a)
# (4 vCPUs, 4 pxb-pcie, 16 virtio-net stand-ins), also with (c), (d),
# (e).  docs/install.md, "Tested versions", has the cause and the figures.
suites=${PCINUMA_STACK2_SUITES:-libvirt daemon guest clients}
guest_cases=${PCINUMA_STACK2_GUEST_CASES:-}
fresh=0
while [ $# -gt 0 ]; do
    case $1 in
        --source) source=$2; shift 2 ;;
        --workdir) workdir=$2; shift 2 ;;
        --suites) suites=$2; shift 2 ;;
        --fresh) fresh=1; shift ;;
        *) echo "usage: $0 --source DIR --workdir DIR [--suites LIST] [--fresh]" >&2; exit 2 ;;
    esac
done
if [ -z "$source" ] || [ -z "$workdir" ]; then
    echo "usage: $0 --source DIR --workdir DIR [--suites LIST] [--fresh]" >&2
    exit 2
fi
source=$(cd "$source" && pwd)
cmd_timeout=${PCINUMA_STACK2_TIMEOUT:-2700}
release=bookworm
backports=bookworm-backports
marker=/etc/pcinuma-stack2
# what the libvirt, daemon and guest suites do not use (the valgrind,
# Debian package, fresh-machine, docs and bench checks do)
not_here="valgrind debootstrap build-essential debhelper dpkg-dev groff-base strace"
# added here: nothing now.  ovmf, which qemu-system-x86 recommends, is in
# install-deps.sh's list since the guest suite boots OVMF (case h); libvirt
# 11 needs it anyway: it resolves <os firmware='efi'> when a domain is
# DEFINED and refuses it without a firmware descriptor ("Unable to find
# 'efi' firmware"); libvirt 9.0 does that only at start.
extra=""
# from bookworm-backports: libvirt 11 and QEMU 10
from_bpo="libvirt-dev libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils"
# from bookworm-backports when it carries them (apt-cache madison, in the
# chroot, decides), else from bookworm: the clients suite's libvirt
# bindings and virt-install, to go with libvirt 11 where they can
prefer_bpo="python3-libvirt virtinst"

pass=0
fail=0
n=0
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $*"; }
summary() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
loud() {   # on stdout and stderr
    msg="################################################################
# second-stack check NOT RUN: $*
# pcinuma was NOT tested against libvirt 11 / QEMU 10 (bookworm-backports).
################################################################"
    echo "$msg"
    echo "$msg" >&2
}
skip() { loud "$*"; echo "# SKIP: $*"; echo "0 passed, 0 failed"; exit 77; }
now() { date +%s; }
t_all=$(now)

for m in "$marker" /etc/pcinuma-fresh-check; do
    [ ! -e "$m" ] || skip "already inside a test chroot ($m); a nested debootstrap would test nothing new"
done
[ "$(id -u)" -eq 0 ] || skip "must run as root (debootstrap, mount, chroot)"
for tool in debootstrap python3 chroot mount umount flock tar; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
        skip "$tool not found (scripts/install-deps.sh installs it)"
done

# The mirror from this machine's apt configuration; never a name of ours.
mirror=$(python3 "$source/tests/fresh/apt-mirror.py" "$release")
[ -n "$mirror" ] ||
    skip "no 'deb ... $release main' source in this machine's apt configuration (/etc/apt/sources.list{,.d})"
echo "# mirror (from this machine's apt configuration): $mirror"
for s in "$release" "$backports"; do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=30).read(64)' \
            "$mirror/dists/$s/Release" 2>/dev/null ||
        skip "the mirror $mirror does not answer for $s ($mirror/dists/$s/Release)"
done

pkgs=$(sh "$source/scripts/install-deps.sh" --list) || { notok "scripts/install-deps.sh --list"; summary; exit 1; }
base_pkgs=""
bpo_pkgs=""
pref_pkgs=""
for p in $pkgs $extra; do
    case " $not_here " in *" $p "*) continue ;; esac
    case " $from_bpo " in *" $p "*) bpo_pkgs="$bpo_pkgs $p"; continue ;; esac
    case " $prefer_bpo " in *" $p "*) pref_pkgs="$pref_pkgs $p"; continue ;; esac
    base_pkgs="$base_pkgs $p"
done

mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
root=$workdir/root
stamp="stack2 chroot v1
mirror $mirror
release $release + $backports
base$base_pkgs
backports$bpo_pkgs
backports if there$pref_pkgs"

# one run at a time on this chroot
exec 9>"$workdir/lock"
flock -w 3600 9 || { notok "lock $workdir/lock"; summary; exit 1; }

mounts=""          # what we mounted, newest first

# in_root_pids, unmount_all, mounted_under_root
. "$(dirname "$0")/../lib/chroot.sh"
cleanup() {
    trap '' INT TERM HUP
    unmount_all
    if mounted_under_root; then
        echo "# cleanup: something is still mounted under $root" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

mnt() {   # mnt TARGET MOUNT-ARGS...: mount, and remember for cleanup
    target=$1; shift
    mkdir -p "$target"
    mount "$@" "$target" || return 1
    mounts="$target $mounts"
}
mount_all() {
    mnt "$root/proc" -t proc proc &&
        mnt "$root/sys" --rbind /sys && mount --make-rslave "$root/sys" &&
        mnt "$root/dev" --rbind /dev && mount --make-rslave "$root/dev" &&
        mnt "$root/run" -t tmpfs -o mode=755 tmpfs
}
in_chroot() {   # in_chroot TIMEOUT CMD...: as root, a clean environment
    t_out=$1; shift
    timeout -k 30 "$t_out" chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb \
        DEBIAN_FRONTEND=noninteractive "$@" </dev/null
}

# (1) the chroot: reused, or debootstrapped and provisioned
if mounted_under_root; then
    notok "nothing mounted under $root before we start (a killed earlier run?)"
    summary
    exit 1
fi
provision=1
if [ "$fresh" = 0 ] && [ -f "$root$marker" ] && [ "$(cat "$root$marker")" = "$stamp" ]; then
    ok "cached chroot $root reused (stamp matches; --fresh makes it anew)"
    provision=0
elif [ "$fresh" = 0 ] && [ -f "$root$marker" ] &&
        [ "$(head -n 3 "$root$marker")" = "$(printf '%s\n' "$stamp" | head -n 3)" ]; then
    # same mirror and releases, other package lists: install what is new
    ok "cached chroot $root kept (the package lists changed: apt-get installs the difference)"
else
    rm -rf --one-file-system "$root"
    t=$(now)
    if timeout 1200 debootstrap --variant=minbase "$release" "$root" "$mirror" \
            >"$workdir/debootstrap.log" 2>&1; then
        ok "debootstrap --variant=minbase $release from $mirror ($(( $(now) - t )) s)"
    else
        notok "debootstrap --variant=minbase $release from $mirror"
        tail -n 30 "$workdir/debootstrap.log" | sed 's/^/#   /'
        summary
        exit 1
    fi
    # a throwaway test system: no daemons started by package scripts, no
    # fsync per file, no translations, no initramfs for the kernel (the
    # guest suite boots /boot/vmlinuz-* with an initramfs of its own)
    if ! chroot "$root" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs ||
            ! ln -s /bin/true "$root/usr/sbin/update-initramfs"; then
        notok "update-initramfs diverted in the chroot"
        summary
        exit 1
    fi
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/pcinuma-stack2"
    echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/99pcinuma-stack2"
    echo "deb $mirror $backports main" >"$root/etc/apt/sources.list.d/$backports.list"
fi
if [ "$provision" = 1 ]; then
    mount_all || { notok "mounted /proc, /sys, /dev, /run in the chroot"; summary; exit 1; }
    t=$(now)
    # shellcheck disable=SC2086
    # (each of $pref_pkgs from $backports when apt-cache madison lists it there)
    if in_chroot 1200 sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $base_pkgs &&
            apt-get install -y -q --no-install-recommends -t $backports $bpo_pkgs &&
            for p in $pref_pkgs; do
                if apt-cache madison \$p | grep -q ' $backports/'; then
                    echo \"stack2-pref: \$p from $backports\"
                    apt-get install -y -q --no-install-recommends -t $backports \$p || exit 1
                else
                    echo \"stack2-pref: \$p from $release (not in $backports)\"
                    apt-get install -y -q --no-install-recommends \$p || exit 1
                fi
            done" \
            >"$workdir/apt.log" 2>&1; then
        ok "apt-get install from $release:$base_pkgs; from $backports:$bpo_pkgs; $(grep '^stack2-pref: ' "$workdir/apt.log" | sed 's/^stack2-pref: //' | paste -sd ';' -) ($(( $(now) - t )) s)"
        printf '%s\n' "$stamp" >"$root$marker"
    else
        notok "apt-get install from $release:$base_pkgs; from $backports:$bpo_pkgs"
        tail -n 30 "$workdir/apt.log" | sed 's/^/#   /'
        summary
        exit 1
    fi
fi

# (2) the source tree, as it is now
rm -rf "$root/root/pcinuma" "$root/root/build-stack2" "$root/root/build-stack2".*.log \
    "$root/root/build-stack2-standins" "$root/root/build-stack2-standins".*.log
t=$(now)
mkdir -p "$root/root/pcinuma"
if git -C "$source" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    how="the files git knows, as they are in the tree"
    # (files deleted in the tree but not in the index are left out)
    # shellcheck disable=SC2016
    (cd "$source" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' sh |
        tar --null -T - -cf -) | tar -xf - -C "$root/root/pcinuma"
else
    how="the tree without build*/"
    (cd "$source" && tar --exclude='./build*' -cf - .) | tar -xf - -C "$root/root/pcinuma"
fi
if [ -f "$root/root/pcinuma/meson.build" ] && [ -x "$root/root/pcinuma/tests/stack2/inside.sh" ]; then
    ok "source copied into /root/pcinuma: $how ($(( $(now) - t )) s)"
else
    notok "source copied into /root/pcinuma"
    summary
    exit 1
fi

# (3) build and the suites, inside
[ -n "$mounts" ] || mount_all || { notok "mounted /proc, /sys, /dev, /run in the chroot"; summary; exit 1; }
inside_log=$workdir/inside.log
echo "# building and running the suites ($suites) in the chroot (output: $inside_log)"
echo "# the guest suite's cases here: ${guest_cases:-all} (PCINUMA_STACK2_GUEST_CASES; empty: all)"
t=$(now)
rc=0
# shellcheck disable=SC2086
in_chroot "$cmd_timeout" sh -c 'cd /root/pcinuma && exec tests/stack2/inside.sh "$@"' sh \
    /root/build-stack2 "$guest_cases" $suites >"$inside_log" 2>&1 || rc=$?
secs=$(( $(now) - t ))
grep '^stack2: ' "$inside_log" | sed 's/^stack2: /# /'
rm -f "$workdir/results.txt" "$workdir"/testlog.* "$workdir"/guestlog.* "$workdir"/clientslog.*
for l in testlog guestlog clientslog; do
    # the clients suite's log is in the stand_ins build's directory
    logs=$root/root/build-stack2/meson-logs
    [ "$l" != clientslog ] || logs=$root/root/build-stack2-standins/meson-logs
    [ -f "$logs/$l.json" ] || continue
    cp "$logs/$l.json" "$logs/$l.txt" "$workdir/" 2>/dev/null
    python3 - "$logs/$l.json" <<'PY' >>"$workdir/results.txt"
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    print("%s\t%s on libvirt 11 / QEMU 10: %s (%.0f s)"
          % ("ok" if t["result"] in ("OK", "EXPECTEDFAIL") else
             "skip" if t["result"] == "SKIP" else "fail",
             t["name"], t["result"], t.get("duration", 0)))
PY
done
if [ -f "$workdir/results.txt" ]; then
    while IFS="$(printf '\t')" read -r verdict text; do
        case $verdict in
            ok) ok "$text" ;;
            # a skip inside means a tool the suite needs is missing: the
            # stack was not tested, which is what this check is for
            *) notok "$text" ;;
        esac
    done <"$workdir/results.txt"
fi
if [ "$rc" -eq 0 ]; then
    ok "build and 'meson test' of suites $suites in the chroot exit 0 ($secs s)"
else
    notok "build and 'meson test' of suites $suites in the chroot (exit $rc after $secs s)"
    tail -n 80 "$inside_log" | sed 's/^/#   /'
fi
echo "# total: $(( $(now) - t_all )) s"
summary

#!/bin/sh
# The README's first command on a fresh machine: debootstrap a minimal
# Debian 12 ('--variant=minbase bookworm') into a temporary directory,
# clone this repository's committed HEAD into /root/pcinuma inside it (as a
# newcomer would: uncommitted changes are not in the clone), and run
# './scripts/demo.sh' there as root in a chroot, with /proc, /sys, /dev
# and /run mounted.  Passes when the demo exits 0 and prints its success
# line; for the demo also when its whole output, apt and the build
# included, fits one screen (at most 50 lines: no apt output, the final
# table kept) and it installed none of the packages only the test command
# needs (debhelper and autoconf, sudo, valgrind, cmocka, debootstrap).  Prints 'ok N - ...' / 'not ok N - ...' lines and ends with
# 'N passed, M failed'.  Run by scripts/test.sh in a full run.
#
# The mirror is the machine's own: the first enabled 'deb' source of its
# apt configuration (/etc/apt/sources.list, sources.list.d/*.list and
# deb822 *.sources), preferring one that carries bookworm itself
# (tests/fresh/apt-mirror.py, shared with tests/stack2/).  When no
# mirror answers, the check is skipped (exit 77) with a loud message; when
# a mirror answers, any later failure (debootstrap, apt, build, demo)
# fails it.  Everything is mounted and unmounted by this script, on every
# exit path; the tree is removed only when nothing is mounted in it.
#
# Needs root.  Inside such a chroot (the marker /etc/pcinuma-fresh-check,
# which this script writes into the tree) it skips: a second debootstrap
# inside the first would test nothing new and double the time.
#
#   test_fresh_demo.sh [--command CMD] [--expect LINE] [--log FILE] [--keep]
#     --command   what to run in /root/pcinuma (default ./scripts/demo.sh)
#     --expect    a line its output must contain (default: the demo's
#                 success line); empty: the exit code alone decides
#     --log       the inside command's full output (default: in the tree,
#                 lost with it unless --keep)
#     --keep      keep the tree (unmounted) for a look afterwards
# Environment: PCINUMA_FRESH_TIMEOUT (seconds for the inside command,
# default 2700), PCINUMA_FRESH_SUITE (default bookworm).
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
suite=${PCINUMA_FRESH_SUITE:-bookworm}
cmd_timeout=${PCINUMA_FRESH_TIMEOUT:-2700}
command=./scripts/demo.sh
expect="The guest's own words: every device reports the NUMA node of its host device's cell"
log=""
keep=0
marker=/etc/pcinuma-fresh-check
while [ $# -gt 0 ]; do
    case $1 in
        --command) command=$2; shift 2 ;;
        --expect) expect=$2; shift 2 ;;
        --log) log=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "usage: $0 [--command CMD] [--expect LINE] [--log FILE] [--keep]" >&2; exit 2 ;;
    esac
done

pass=0
fail=0
n=0
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $*"; }
summary() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
skip() { echo "# SKIP: $*"; echo "0 passed, 0 failed"; exit 77; }
loud() {   # on stdout and stderr (not 'tee /dev/stderr': reopening a
           # redirected stderr truncates the caller's log file)
    msg="################################################################
# fresh-machine check NOT RUN: $*
# The README's commands were NOT tried on a fresh Debian 12.
################################################################"
    echo "$msg"
    echo "$msg" >&2
}
now() { date +%s; }

if [ -e "$marker" ]; then
    loud "already inside its chroot ($marker: $(cat "$marker")); a nested debootstrap would test nothing new"
    skip "inside the fresh-machine check's own chroot"
fi
[ "$(id -u)" -eq 0 ] || skip "must run as root (debootstrap, mount, chroot)"
for tool in debootstrap git python3 chroot mount umount; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
        skip "$tool not found (scripts/install-deps.sh installs it)"
done
git -C "$top" rev-parse --verify -q HEAD >/dev/null || skip "$top is not a git clone with a commit"

# The mirror from this machine's apt configuration; never a name of ours.
mirror=$(python3 "$top/tests/fresh/apt-mirror.py" "$suite")
if [ -z "$mirror" ]; then
    loud "no 'deb ... $suite main' source in this machine's apt configuration (/etc/apt/sources.list{,.d})"
    skip "no mirror in the apt configuration"
fi
echo "# mirror (from this machine's apt configuration): $mirror"
if ! python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=30).read(64)' \
        "$mirror/dists/$suite/Release" 2>/dev/null; then
    loud "the mirror $mirror does not answer ($mirror/dists/$suite/Release)"
    skip "debootstrap cannot reach the mirror"
fi

work=$(mktemp -d /var/tmp/pcinuma-fresh.XXXXXX)
root=$work/root
mounts=""          # what we mounted, newest first

# in_root_pids, unmount_all, mounted_under_root
. "$top/tests/lib/chroot.sh"

cleanup() {
    trap '' INT TERM HUP
    unmount_all
    if mounted_under_root; then
        echo "# cleanup: something is still mounted under $root; NOT removing $work" >&2
    elif [ "$keep" = 1 ]; then
        echo "# tree kept: $root"
    else
        rm -rf --one-file-system "$work"
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

# (a) debootstrap
t=$(now)
if timeout 1200 debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
    ok "debootstrap --variant=minbase $suite from $mirror ($(( $(now) - t )) s)"
else
    notok "debootstrap --variant=minbase $suite from $mirror"
    tail -n 30 "$work/debootstrap.log" | sed 's/^/#   /'
    summary
    exit 1
fi

# (b) the clone, as a newcomer makes it: the committed HEAD, in /root
head=$(git -C "$top" rev-parse HEAD)
if [ -n "$(git -C "$top" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "# note: $top has uncommitted changes; the clone has only the commit $head"
fi
if git clone -q --no-hardlinks "$top" "$root/root/pcinuma" &&
        git -C "$root/root/pcinuma" checkout -q --detach "$head"; then
    ok "git clone of $head into /root/pcinuma (/root is mode $(stat -c %a "$root/root"))"
else
    notok "git clone of $head into /root/pcinuma"
    summary
    exit 1
fi

# (c) what a booted machine has: /proc, /sys, /dev, /run; no daemons
# started by package scripts (no init runs in a chroot).
echo "$head $(date -u +%FT%TZ)" >"$root$marker"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
if mnt "$root/proc" -t proc proc &&
        mnt "$root/sys" --rbind /sys && mount --make-rslave "$root/sys" &&
        mnt "$root/dev" --rbind /dev && mount --make-rslave "$root/dev" &&
        mnt "$root/run" -t tmpfs -o mode=755 tmpfs; then
    ok "mounted /proc, /sys, /dev, /run in the chroot"
else
    notok "mounted /proc, /sys, /dev, /run in the chroot"
    summary
    exit 1
fi

# (d) the command, as root, from the clone
inside_log=${log:-$work/inside.log}
mkdir -p "$(dirname "$inside_log")"
echo "# running '$command' in /root/pcinuma in the chroot (output: $inside_log)"
t=$(now)
rc=0
timeout -k 30 "$cmd_timeout" chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb \
    ${PCINUMA_BENCH+PCINUMA_BENCH=$PCINUMA_BENCH} \
    /bin/sh -c "cd /root/pcinuma && $command" </dev/null >"$inside_log" 2>&1 || rc=$?
secs=$(( $(now) - t ))
if [ "$rc" -eq 0 ]; then
    ok "'$command' exits 0 in the fresh chroot ($secs s)"
else
    notok "'$command' exits 0 in the fresh chroot (exit $rc after $secs s)"
fi
if [ -n "$expect" ]; then
    if grep -qF -- "$expect" "$inside_log"; then
        ok "its output says: $expect"
    else
        notok "its output says: $expect"
    fi
fi
if [ "$command" = ./scripts/demo.sh ]; then
    lines=$(wc -l <"$inside_log")
    if [ "$lines" -le 50 ] && ! grep -qE '^(Get:|Unpacking |Setting up |Selecting previously)' "$inside_log"; then
        ok "the demo's output fits one screen ($lines lines, no apt output)"
    else
        notok "the demo's output fits one screen ($lines lines; at most 50, without apt's)"
    fi
    extra=""
    for p in debhelper autoconf sudo valgrind libcmocka-dev debootstrap; do
        if chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            extra="$extra $p"
        fi
    done
    if [ -z "$extra" ]; then
        ok "the demo installed only what it needs (not debhelper, autoconf, sudo, valgrind, libcmocka-dev, debootstrap)"
    else
        notok "the demo installed only what it needs: it installed$extra"
    fi
fi
[ "$fail" -eq 0 ] || tail -n 60 "$inside_log" | sed 's/^/#   /'
tail -n 1 "$inside_log" | sed 's/^/# last line: /'
summary

#!/bin/sh
# Build the Debian package from a copy of this source tree, install it with
# apt, check what it put where, remove and purge it, and check nothing of
# it is left (what apt pulled in as dependencies stays).  On the way: the
# hook link is created on a fresh install only, and a link the
# administrator removed stays removed through a reinstall, an upgrade (to
# a copy of the package with its version bumped) and a remove + install.  Prints
# 'ok N - ...' / 'not ok N - ...' lines and ends with 'N passed, M failed'.
#
# Needs root: it installs and removes the package 'pcinuma' on this
# machine.  It refuses to run (exit 77, skipped) where that could destroy
# something: when pcinuma is already installed as a package, or installed
# by 'meson install' into /usr.  An existing /etc/libvirt/hooks/qemu.d/pcinuma
# is moved aside for the test and put back afterwards; the qemu.d directory
# and a hook of another name in it are checked to be untouched.
#
# Environment: DEB_BUILD_OPTIONS (default: unset, so dh_auto_test runs the
# unit and golden suites; 'nocheck' skips them), PCINUMA_DEB_KEEP=1 keeps
# the build directory.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
pass=0
fail=0
n=0

ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $*"; }
check() { # check DESCRIPTION COMMAND...
    what=$1; shift
    if "$@" >/dev/null 2>&1; then ok "$what"; else notok "$what"; fi
}
skip() { echo "# SKIP: $*"; echo "0 passed, 0 failed"; exit 77; }
summary() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }

if [ "$(id -u)" -ne 0 ]; then
    skip "must run as root (it installs and purges the pcinuma package)"
fi
if dpkg-query -W -f='${Status}' pcinuma 2>/dev/null | grep -q 'installed\|config-files'; then
    skip "the pcinuma package is already on this machine ($(dpkg-query -W -f='${Status}' pcinuma)); not touching it"
fi
for f in /usr/sbin/pcinumad /usr/sbin/pcinumactl /usr/libexec/pcinuma/pcinuma-hook; do
    if [ -e "$f" ]; then
        skip "$f exists (a 'meson install --prefix=/usr'?); the package would overwrite it and its purge delete it"
    fi
done

HOOKDIR=/etc/libvirt/hooks/qemu.d
HOOK=$HOOKDIR/pcinuma
HOOK_TARGET=/usr/libexec/pcinuma/pcinuma-hook

work=$(mktemp -d /tmp/pcinuma-deb.XXXXXX)
aside=""
hookdir_existed=no
[ -d "$HOOKDIR" ] && hookdir_existed=yes

cleanup() {
    [ -n "${sentinel:-}" ] && rm -f "$sentinel"
    if dpkg-query -W -f='${Status}' pcinuma 2>/dev/null | grep -q 'installed\|config-files\|half'; then
        echo "# cleaning up: purging pcinuma"
        dpkg -P pcinuma >/dev/null 2>&1 || true
    fi
    if [ -n "$aside" ] && [ -e "$aside" -o -L "$aside" ]; then
        mkdir -p "$HOOKDIR"
        [ -e "$HOOK" ] || [ -L "$HOOK" ] || mv "$aside" "$HOOK"
        echo "# restored the original $HOOK"
    fi
    if [ "${PCINUMA_DEB_KEEP:-}" = 1 ]; then
        echo "# build directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Someone's hook of our name (e.g. a 'meson install' with another prefix)
# would be kept by postinst and would spoil the checks: put it aside.
if [ -e "$HOOK" ] || [ -L "$HOOK" ]; then
    aside="$work/pcinuma.hook.aside"
    mv "$HOOK" "$aside"
    echo "# moved the existing $HOOK aside for the test"
fi
# Another hook in qemu.d that the package must never touch.  (Not a
# listing of the directory: the libvirt suites of a parallel test run add
# and remove their own hooks there meanwhile.)
sentinel="$HOOKDIR/zz-pcinuma-deb-test-sentinel.$$"
mkdir -p "$HOOKDIR"
printf '#!/bin/sh\ncat >/dev/null\nexit 0\n' >"$sentinel"
chmod 755 "$sentinel"

# The tools: scripts/install-deps.sh installs them (and the build deps).
if ! command -v dpkg-buildpackage >/dev/null || ! command -v dh >/dev/null; then
    "$top/scripts/install-deps.sh" >/dev/null || { notok "install the packaging tools"; summary; exit 1; }
fi

# (a) Build in a copy of the source tree without build directories: the
# files git knows, plus new ones it does not ignore; without git, cp -a.
src="$work/pcinuma"
mkdir -p "$src"
if command -v git >/dev/null && git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$top" && git ls-files -co --exclude-standard -z |
        grep -zv '^debian/pcinuma/\|^debian/\.debhelper/\|^debian/tmp/\|^obj-' |
        tar --null -T - -cf -) | tar -xf - -C "$src"
else
    (cd "$top" && tar --exclude='./build*' --exclude='./obj-*' --exclude='./debian/pcinuma' \
        --exclude='./debian/.debhelper' --exclude='./.git' -cf - .) | tar -xf - -C "$src"
fi
if (cd "$src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
    ok "dpkg-buildpackage -us -uc -b"
else
    notok "dpkg-buildpackage -us -uc -b"
    tail -n 40 "$work/build.log" | sed 's/^/#   /'
    summary
    exit 1
fi
deb=$(ls "$work"/pcinuma_*.deb 2>/dev/null | head -n 1)
check "the build made pcinuma_*.deb" test -f "$deb"

# (b) Install it, dependencies from apt (no recommends: libvirt-daemon-system
# is not pulled into a CI machine by a test).
pkgs_before=$(dpkg-query -W -f='${Package}\n' | sort)
if DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" >"$work/install.log" 2>&1; then
    ok "apt-get install ./$(basename "$deb")"
else
    notok "apt-get install ./$(basename "$deb")"
    tail -n 30 "$work/install.log" | sed 's/^/#   /'
    summary
    exit 1
fi
check "postinst tells to restart libvirtd once" grep -q 'systemctl restart libvirtd' "$work/install.log"
files=$(dpkg -L pcinuma)

# (c) What it installed.
for f in /usr/sbin/pcinumad /usr/sbin/pcinumactl /usr/libexec/pcinuma/pcinuma-hook \
         /usr/libexec/pcinuma/pcinuma-watcher /usr/bin/pcinuma-capture-host \
         /usr/libexec/pcinuma/pcinuma-kubevirt-hook /usr/libexec/pcinuma/pcinuma-vdsm-hook; do
    check "$f is an executable" test -x "$f"
done
check "pcinumad starts its watcher from /usr/libexec/pcinuma/pcinuma-watcher" \
    sh -c "pcinumad --help | grep -q /usr/libexec/pcinuma/pcinuma-watcher"
check "pcinumad does not link libvirt (its watcher does)" sh -c "! ldd /usr/sbin/pcinumad | grep -q libvirt"
for f in /lib/systemd/system/pcinumad.service /lib/systemd/system/pcinumad.socket \
         /usr/lib/systemd/catalog/pcinuma.catalog \
         /usr/share/man/man8/pcinumad.8.gz /usr/share/man/man8/pcinumactl.8.gz \
         /usr/share/man/man8/pcinuma-hook.8.gz /usr/share/man/man5/pcinuma-policy.5.gz \
         /usr/share/man/man1/pcinuma-capture-host.1.gz \
         /usr/share/bash-completion/completions/pcinumactl \
         /usr/share/doc/pcinuma/copyright /usr/share/doc/pcinuma/quickstart.md \
         /usr/share/doc/pcinuma/examples/policy.json /usr/share/doc/pcinuma/examples/hook.conf \
         /etc/pcinuma/policy.json; do
    check "$f is installed" test -f "$f"
done
check "$HOOK is a symlink to $HOOK_TARGET" test "$(readlink "$HOOK" 2>/dev/null)" = "$HOOK_TARGET"
check "$HOOK is not a file of the package (so purge never removes $HOOKDIR)" \
    sh -c "! dpkg -L pcinuma | grep -qx '$HOOK'"
check "/etc/pcinuma/policy.json is a conffile" sh -c "dpkg-query -W -f='\${Conffiles}' pcinuma | grep -q '/etc/pcinuma/policy.json'"
check "/etc/pcinuma/policy.json is the example" cmp /etc/pcinuma/policy.json /usr/share/doc/pcinuma/examples/policy.json
check "pcinumactl check-policy accepts /etc/pcinuma/policy.json" pcinumactl check-policy /etc/pcinuma/policy.json
check "the units name the installed daemon" grep -q '^ExecStart=/usr/sbin/pcinumad ' /lib/systemd/system/pcinumad.service
doc=$(sed -n 's|^Documentation=.* file:||p' /lib/systemd/system/pcinumad.service)
check "the units' Documentation= file exists ($doc)" test -f "$doc"
check "pcinumad.socket is enabled" test -L /etc/systemd/system/sockets.target.wants/pcinumad.socket
check "pcinumad.service is not enabled by the package" test ! -e /etc/systemd/system/multi-user.target.wants/pcinumad.service
ver=$(dpkg-query -W -f='${Version}' pcinuma)
check "pcinumactl --version says $ver" test "$(pcinumactl --version)" = "pcinumactl $ver"
check "pcinumad --version says $ver" test "$(pcinumad --version)" = "pcinumad $ver"
check "pcinuma-hook --version says $ver" test "$("$HOOK" --version)" = "pcinuma-hook $ver"
check "pcinuma-watcher --version says $ver" test "$(/usr/libexec/pcinuma/pcinuma-watcher --version)" = "pcinuma-watcher $ver"
check "the hook answers a call without a passthrough device at once" \
    sh -c "echo '<domain/>' | env -i $HOOK vm prepare begin -"
if command -v man >/dev/null; then
    check "man finds pcinumad(8)" man -w pcinumad
    check "man finds pcinuma-policy(5)" man -w 5 pcinuma-policy
fi

# An edited conffile survives a remove; the hook goes with the binaries;
# a reinstall brings the hook back.
echo '{"default": {"policy": "require"}}' >/etc/pcinuma/policy.json
check "dpkg -r pcinuma" dpkg -r pcinuma
check "after remove: the binaries are gone" test ! -e /usr/sbin/pcinumad
check "after remove: the hook link is gone" test ! -L "$HOOK"
check "after remove: $HOOKDIR is still there" test -d "$HOOKDIR"
check "after remove: the edited policy is kept" grep -qx '{"default": {"policy": "require"}}' /etc/pcinuma/policy.json
check "dpkg -i reinstalls it" dpkg -i "$deb"
check "after reinstall: the hook link is back" test "$(readlink "$HOOK" 2>/dev/null)" = "$HOOK_TARGET"
check "after reinstall: the edited policy is kept" grep -qx '{"default": {"policy": "require"}}' /etc/pcinuma/policy.json

# (c2) The link is the administrator's to remove, like a conffile: neither
# a reinstall of the same version (dpkg runs 'postinst configure VERSION',
# $2 set, as for an upgrade) nor an upgrade to a newer version, nor a
# remove and install, brings it back; only a fresh install after a purge
# does (e).  The newer version is this package with its version bumped.
LINK_OWED=/var/lib/pcinuma/hook-link-removed
rm -f "$HOOK"
check "dpkg -i of the same version over the installed package (a reinstall)" dpkg -i "$deb"
check "after a reinstall: the link the administrator removed stays removed" test ! -e "$HOOK" -a ! -L "$HOOK"
newver="$ver+linktest1"
mkdir -p "$work/bump"
dpkg-deb -R "$deb" "$work/bump/root"
sed -i "s/^Version: .*/Version: $newver/" "$work/bump/root/DEBIAN/control"
bumped="$work/bump/pcinuma_${newver}_bump.deb"
dpkg-deb -b "$work/bump/root" "$bumped" >/dev/null 2>&1
check "the bumped package sorts after $ver" dpkg --compare-versions "$newver" gt "$ver"
check "dpkg -i of a newer version (an upgrade)" dpkg -i "$bumped"
check "after the upgrade: pcinuma is at $newver" test "$(dpkg-query -W -f='${Version}' pcinuma)" = "$newver"
check "after the upgrade: the link the administrator removed stays removed" test ! -e "$HOOK" -a ! -L "$HOOK"
check "after the upgrade: no note that the link is owed" test ! -e "$LINK_OWED"
check "dpkg -r pcinuma (the link already gone)" dpkg -r pcinuma
check "dpkg -i after the remove" dpkg -i "$bumped"
check "after remove and install: the link the administrator removed stays removed" test ! -e "$HOOK" -a ! -L "$HOOK"
# and a link the package itself took away on remove comes back on upgrade
ln -s "$HOOK_TARGET" "$HOOK"
check "dpkg -r pcinuma (the link there)" dpkg -r pcinuma
check "after remove: the link is gone, and owed" sh -c "test ! -L '$HOOK' && test -e '$LINK_OWED'"
check "dpkg -i after the remove brings the package's link back" dpkg -i "$bumped"
check "after remove and install: the link is back" test "$(readlink "$HOOK" 2>/dev/null)" = "$HOOK_TARGET"
check "after remove and install: no note left" test ! -e "$LINK_OWED" -a ! -e /var/lib/pcinuma
files=$(dpkg -L pcinuma)

# (d) Purge, and look for anything left.
check "dpkg -P pcinuma" dpkg -P pcinuma
check "pcinuma is no longer known to dpkg" sh -c "! dpkg-query -W -f='\${Status}' pcinuma 2>/dev/null | grep -q 'installed\|config-files'"
left=""
for f in $files; do
    [ -d "$f" ] && continue     # directories (and /lib -> usr/lib) are shared
    if [ -e "$f" ] || [ -L "$f" ]; then left="$left $f"; fi
done
for d in /etc/pcinuma /usr/libexec/pcinuma /usr/share/doc/pcinuma /run/pcinuma /var/lib/pcinuma; do
    [ -e "$d" ] && left="$left $d"
done
[ -L "$HOOK" ] || [ -e "$HOOK" ] && left="$left $HOOK"
for f in /etc/systemd/system/sockets.target.wants/pcinumad.socket \
         /etc/systemd/system/multi-user.target.wants/pcinumad.service \
         /var/lib/systemd/deb-systemd-helper-enabled/pcinumad.socket.dsh-also \
         /var/lib/systemd/deb-systemd-helper-enabled/sockets.target.wants/pcinumad.socket \
         /var/lib/systemd/deb-systemd-helper-masked/pcinumad.socket; do
    { [ -e "$f" ] || [ -L "$f" ]; } && left="$left $f"
done
if [ -z "$left" ]; then ok "purge leaves nothing of pcinuma"; else notok "purge leaves nothing of pcinuma"; echo "#   left:$left"; fi
if [ "$hookdir_existed" = yes ]; then
    check "$HOOKDIR is still there after purge" test -d "$HOOKDIR"
fi
check "another hook in $HOOKDIR is untouched" sh -c "test -x '$sentinel' && grep -q 'exit 0' '$sentinel'"

# (e) A fresh install after the purge creates the link again.
check "dpkg -i after the purge (a fresh install)" dpkg -i "$deb"
check "after a fresh install: $HOOK is a symlink to $HOOK_TARGET" test "$(readlink "$HOOK" 2>/dev/null)" = "$HOOK_TARGET"
check "dpkg -P pcinuma again" dpkg -P pcinuma
check "after the second purge: no link" test ! -e "$HOOK" -a ! -L "$HOOK"

dpkg-query -W -f='${Package}\n' | sort >"$work/pkgs-after"
new=$(printf '%s\n' "$pkgs_before" | comm -13 - "$work/pkgs-after" | tr '\n' ' ')
[ -n "$new" ] && echo "# left installed by apt as dependencies: $new"

summary

#!/bin/sh
# The demo: the whole mission on the bundled sample host (2 sockets, 4 NUMA
# nodes, 8 GPUs and 8 NICs under PCIe switches): a private libvirtd with the
# hook, pcinumad, an admin's `virsh define`, the rewrite, and a real guest
# booted under TCG reporting each device's NUMA node.  Installs what is
# missing for it (scripts/install-deps.sh --demo, quietly) and builds
# first; run as root.  See scripts/demo.py.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
builddir=${PCINUMA_BUILDDIR:-build}

step() { printf '==> %s\n' "$*"; }

if [ "$(id -u)" -eq 0 ]; then
    step "Installing missing packages"
    "$top/scripts/install-deps.sh" --demo
fi

step "Building"
# The demo needs no test suite: without cmocka (install-deps.sh --demo does
# not install it) they are not built.
opts=""
pkg-config --exists cmocka || opts="-Dtests=disabled"
if [ -f "$builddir/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup --reconfigure $opts "$builddir" >/dev/null
else
    # shellcheck disable=SC2086
    meson setup $opts "$builddir" >/dev/null
fi
ninja -C "$builddir" >/dev/null
ctl="$builddir/pcinumactl/pcinumactl"

exec python3 "$top/scripts/demo.py" --build "$builddir"

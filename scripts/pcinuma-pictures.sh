#!/bin/sh
# Draw the two pictures of docs/guest.md ("Pictures"): the bundled sample
# host (tests/fixtures/hosts/sample-4n.json, the demo's) as `pcinumactl host
# --format hwloc` sees it, and the sample VM (conf/examples/gpu-vm-1.xml) as
# `pcinumactl plan --format hwloc` plans it there, each drawn by lstopo.
# The PNGs are committed; run this after a change to what they show.
#
#   scripts/pcinuma-pictures.sh BUILD_DIR [LSTOPO]
#
# LSTOPO (default: lstopo) must write PNG, which needs cairo: Debian's
# package hwloc, not hwloc-nox (the two conflict; the tests need only
# hwloc-nox's lstopo-no-graphics).  Without installing it:
#   apt-get download hwloc && dpkg -x hwloc_*.deb /tmp/hwloc
#   scripts/pcinuma-pictures.sh build /tmp/hwloc/usr/bin/lstopo
# --no-default-legend leaves out the date and host name, so the same
# input gives the same picture.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: pcinuma-pictures.sh BUILD_DIR [LSTOPO]}
lstopo=${2:-lstopo}
ctl="$build/pcinumactl/pcinumactl"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 "$top/tests/fixtures/mkfakesysfs.py" "$top/tests/fixtures/hosts/sample-4n.json" "$work/sys" >/dev/null
# The demo's policy (scripts/demo.py), whatever /etc/pcinuma holds.
"$ctl" plan --sysfs-root "$work/sys" --policy require --format hwloc "$top/conf/examples/gpu-vm-1.xml" >"$work/guest.xml"
"$ctl" host --sysfs-root "$work/sys" --format hwloc >"$work/host.xml"
"$lstopo" -i "$work/guest.xml" --if xml --no-default-legend -f "$top/docs/guest-sample.png"
"$lstopo" -i "$work/host.xml" --if xml --no-default-legend -f "$top/docs/host-sample.png"
echo "wrote $top/docs/guest-sample.png and $top/docs/host-sample.png"

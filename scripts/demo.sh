#!/bin/sh
# The demo: plan the bundled sample GPU VM against the bundled sample host
# (2 sockets, 4 NUMA nodes, 8 GPUs and 8 NICs under PCIe switches) and show
# what pcinuma does to it.  Installs what is missing (apt) and builds first.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
builddir=${PCINUMA_BUILDDIR:-build}

step() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" -eq 0 ]; then
    step "Installing missing packages"
    "$top/scripts/install-deps.sh"
fi

step "Building"
if [ -f "$builddir/build.ninja" ]; then
    meson setup --reconfigure "$builddir" >/dev/null
else
    meson setup "$builddir" >/dev/null
fi
ninja -C "$builddir" >/dev/null
ctl="$builddir/daemon/pcinumactl"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

step "Building the sample host's sysfs tree (tests/fixtures/hosts/sample-4n.json)"
python3 tests/fixtures/mkfakesysfs.py tests/fixtures/hosts/sample-4n.json "$work/sys"

step "The host, as pcinuma sees it: pcinumactl host --sysfs-root ... (first lines)"
"$ctl" host --sysfs-root "$work/sys" | sed -n '1,20p'
echo "    ..."

vm=conf/examples/gpu-vm-1.xml
step "The VM: $vm (16 hostdevs, 4 guest NUMA cells backed by host nodes 0-3)"

step "What pcinuma decides: pcinumactl plan --policy require --format explain"
"$ctl" plan --sysfs-root "$work/sys" --policy require --format explain "$vm"

step "The rewritten domain XML: pcinumactl plan --policy require"
"$ctl" plan --sysfs-root "$work/sys" --policy require "$vm" | tee "$work/planned.xml"

if command -v virt-xml-validate >/dev/null 2>&1; then
    step "libvirt's schema check: virt-xml-validate"
    virt-xml-validate "$work/planned.xml" domain
fi

step "Undo: pcinumactl revert gives the original back"
"$ctl" revert "$work/planned.xml" > "$work/reverted.xml"
python3 - "$vm" "$work/reverted.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
a, b = (ET.canonicalize(from_file=p) for p in sys.argv[1:3])
print("    reverted XML is canonically identical to the input" if a == b else "    MISMATCH")
sys.exit(0 if a == b else 1)
PY

#!/bin/sh
# meson install script: copy the example policy SRC to DEST (under
# $DESTDIR) unless a file is already there.  install_data() would
# overwrite an administrator's policy on every 'meson install'; this never
# does.  Usage (from meson.build): install-example-policy.sh SRC DEST
set -eu

src=$1
dest=${DESTDIR:-}$2

if [ -n "${MESON_INSTALL_DRY_RUN:-}" ]; then
    echo "Would install $src to $dest unless it exists"
    exit 0
fi
if [ -e "$dest" ] || [ -L "$dest" ]; then
    echo "Keeping existing $dest (the example is in share/doc/pcinuma/examples)"
    exit 0
fi
mkdir -p "$(dirname "$dest")"
# Copy to a temporary name first, so an interrupted install never leaves a
# truncated policy behind (pcinumad refuses to start on a broken one).
tmp="$dest.tmp.$$"
trap 'rm -f "$tmp"' EXIT
cp "$src" "$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$dest"
trap - EXIT
echo "Installing $src to $dest"

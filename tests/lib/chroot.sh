# Shell helpers shared by the chroot checks (tests/fresh/test_fresh_demo.sh,
# tests/stack2/test_stack2.sh), sourced after they set $root (the tree) and
# $mounts (what they mounted, newest first).

in_root_pids() {   # processes whose root is our tree (started by our chroot)
    for p in /proc/[0-9]*; do
        r=$(readlink "$p/root" 2>/dev/null) || continue
        case $r in "$root"|"$root"/*) echo "${p#/proc/}" ;; esac
    done
}

# Stop what the chroot left running (TERM, then KILL), then unmount
# everything in $mounts, and forget them.
unmount_all() {
    pids=$(in_root_pids)
    if [ -n "$pids" ]; then
        echo "# stopping what the chroot left running: $(echo "$pids" | tr "\n" " ")"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null
        sleep 2
        pids=$(in_root_pids)
        # shellcheck disable=SC2086
        [ -z "$pids" ] || kill -KILL $pids 2>/dev/null
        sleep 1
    fi
    for m in $mounts; do
        umount -R "$m" 2>/dev/null || umount -R -l "$m" 2>/dev/null ||
            echo "# cleanup: cannot unmount $m"
    done
    mounts=""
}

mounted_under_root() {   # is anything still mounted at or below $root?
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 { found = 1 } END { exit !found }' /proc/mounts
}

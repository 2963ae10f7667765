#!/bin/sh
# The project's test command: install what is missing (apt), build, and run
# every suite.  Extra arguments go to 'meson test' of the main build (e.g.
# --suite unit).  Ends with a line 'N passed, M failed[, K skipped]' summed
# over everything it ran; exits non-zero on any failure.
#
# Two builds, two passes:
#   1. build/ (PCINUMA_BUILDDIR): every suite.  This includes the 'valgrind'
#      suite: the daemon suite once more with pcinumad under
#      'valgrind --leak-check=full --errors-for-leak-kinds=definite
#      --error-exitcode=99' (tests/meson.build), and the 'stack2' suite:
#      the libvirt, daemon and guest suites once more against libvirt 11
#      and QEMU 10, in a bookworm-backports chroot under build/stack2
#      (tests/stack2/test_stack2.sh; needs root and the apt mirror).
#   2. build-asan/ (PCINUMA_ASAN_BUILDDIR): the same sources built with
#      -Db_sanitize=address,undefined and -fno-sanitize-recover=all, then
#      the unit, golden and daemon suites with leak detection on and every
#      finding fatal (ASAN_OPTIONS, UBSAN_OPTIONS below).
# The sanitizer pass runs by default when no arguments are given; with
# arguments (a suite selection, say) only when PCINUMA_SANITIZE=1.
# PCINUMA_SANITIZE=0 skips it always.
#   2b. build-standins/ (PCINUMA_STANDINS_BUILDDIR): the same sources with
#      -Dstand_ins=true (docs/hacking.md, "The stand-in seam"), and the
#      'clients' suite there: real clients starting real guests whose
#      virtio stand-ins pcinuma places as passthrough devices (the suite
#      exists only in such a build; build/ has no stand-in code at all).
#      By default when no arguments are given; with arguments only when
#      PCINUMA_STANDINS=1; PCINUMA_STANDINS=0 skips it always.  The second
#      stack (stack2, in build/) runs the clients suite too.
#   3. In a full run (no arguments), two checks outside meson: the Debian
#      package (tests/debian/test_deb.sh; PCINUMA_DEB=0 skips it) and the
#      README's first command on a fresh machine: ./scripts/demo.sh in a
#      freshly debootstrapped minimal Debian 12 chroot, from a clone in
#      /root (tests/fresh/test_fresh_demo.sh; PCINUMA_FRESH=0 skips it).
#      They run after the suites, alone, because they need root, apt and
#      the network, take minutes, and test the repository rather than the
#      build directory.
#   4. In a full run (no arguments; PCINUMA_BENCH=0 skips it), last, after
#      waiting up to 90 s for the load average to fall under 1: the
#      benchmarks, 'meson test --benchmark --suite bench' in build/, one
#      after another.  They measure and print figures (the RESULT/FIGURE
#      lines are repeated here; docs/performance.md has the targets); a
#      benchmark fails only when it cannot run, never on a figure.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
builddir=${PCINUMA_BUILDDIR:-build}
asandir=${PCINUMA_ASAN_BUILDDIR:-build-asan}
standinsdir=${PCINUMA_STANDINS_BUILDDIR:-build-standins}
if [ $# -eq 0 ]; then
    sanitize=${PCINUMA_SANITIZE:-1}
    standins=${PCINUMA_STANDINS:-1}
else
    sanitize=${PCINUMA_SANITIZE:-0}
    standins=${PCINUMA_STANDINS:-0}
fi

if [ "$(id -u)" -eq 0 ]; then
    "$top/scripts/install-deps.sh"
else
    echo "test: not root; assuming the packages of scripts/install-deps.sh are installed"
fi

setup() {   # setup DIR [meson options...]
    dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        # meson 1.0's 'setup --reconfigure' ignores -D for options the
        # directory already has; 'configure' applies them
        [ $# -eq 0 ] || meson configure "$dir" "$@" >/dev/null
        meson setup --reconfigure "$dir" >/dev/null
    else
        meson setup "$dir" "$@"
    fi
}

setup "$builddir"
ninja -C "$builddir"
rm -f "$builddir/meson-logs/testlog.json"
rc=0
meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" "$@" || rc=$?

logs="$builddir/meson-logs/testlog.json"
if [ "$sanitize" = 1 ]; then
    echo "test: sanitizer pass: ASan+UBSan build in $asandir; suites unit, golden, daemon"
    # GCC's -Wnonnull misfires on sanitizer-instrumented code (domain.c's
    # memmem after a memchr), so that one warning is not an error here;
    # the plain build keeps -Werror for everything.
    setup "$asandir" -Db_sanitize=address,undefined -Db_lundef=false \
        "-Dc_args=-Wno-error=nonnull -fno-sanitize-recover=all"
    asan_rc=0
    ninja -C "$asandir" || asan_rc=$?
    rm -f "$asandir/meson-logs/testlog.json"
    if [ "$asan_rc" -eq 0 ]; then
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1:strict_string_checks=1 \
        UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
        LSAN_OPTIONS=print_suppressions=0 \
            meson test -C "$asandir" --print-errorlogs --num-processes "$(nproc)" \
                --suite unit --suite golden --suite daemon --suite race || asan_rc=$?
    else
        echo "test: the sanitizer build failed"
    fi
    [ "$asan_rc" -eq 0 ] || rc=1
    logs="$logs $asandir/meson-logs/testlog.json"
    build_failed=$([ "$asan_rc" -ne 0 ] && [ ! -f "$asandir/meson-logs/testlog.json" ] && echo 1 || echo 0)
else
    build_failed=0
fi

# The stand_ins build and the real-client suite (issue 23).
if [ "$standins" = 1 ]; then
    echo "test: stand-in pass: -Dstand_ins=true build in $standinsdir; suite clients"
    standins_rc=0
    setup "$standinsdir" -Dstand_ins=true
    ninja -C "$standinsdir" || standins_rc=$?
    rm -f "$standinsdir/meson-logs/testlog.json"
    if [ "$standins_rc" -eq 0 ]; then
        meson test -C "$standinsdir" --print-errorlogs --num-processes "$(nproc)" --suite clients || standins_rc=$?
    else
        echo "test: the stand_ins build failed"
    fi
    [ "$standins_rc" -eq 0 ] || rc=1
    logs="$logs $standinsdir/meson-logs/testlog.json"
    if [ "$standins_rc" -ne 0 ] && [ ! -f "$standinsdir/meson-logs/testlog.json" ]; then
        build_failed=$((build_failed + 1))
    fi
fi

# The Debian package: built with dpkg-buildpackage, installed, checked and
# purged (tests/debian/test_deb.sh); only in a full run.
deb_result=none
if [ $# -eq 0 ] && [ "${PCINUMA_DEB:-1}" = 1 ]; then
    echo "test: Debian package: tests/debian/test_deb.sh"
    deb_rc=0
    "$top/tests/debian/test_deb.sh" || deb_rc=$?
    case $deb_rc in
        0) deb_result=pass ;;
        77) deb_result=skip ;;
        *) deb_result=fail; rc=1 ;;
    esac
fi

# The README's first command on a fresh Debian 12 (a debootstrapped
# chroot; the committed HEAD cloned into its /root); only in a full run.
fresh_result=none
if [ $# -eq 0 ] && [ "${PCINUMA_FRESH:-1}" = 1 ]; then
    echo "test: fresh machine: tests/fresh/test_fresh_demo.sh (log: $builddir/meson-logs/fresh-demo.log)"
    fresh_rc=0
    "$top/tests/fresh/test_fresh_demo.sh" --log "$builddir/meson-logs/fresh-demo.log" || fresh_rc=$?
    case $fresh_rc in
        0) fresh_result=pass ;;
        77) fresh_result=skip ;;
        *) fresh_result=fail; rc=1 ;;
    esac
fi

# The benchmarks, last, on a machine as quiet as it gets: wait (at most
# 90 s) for the load average the suites left behind to fall under 1.
if [ $# -eq 0 ] && [ "${PCINUMA_BENCH:-1}" = 1 ]; then
    waited=0
    while [ "$waited" -lt 90 ] && ! awk '{ exit !($1 < 1.0) }' /proc/loadavg; do
        sleep 1
        waited=$((waited + 1))
    done
    echo "test: benchmarks: meson test --benchmark --suite bench (figures, not verdicts: docs/performance.md);" \
         "waited ${waited} s for the machine to settle, load average now $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -f "$builddir/meson-logs/benchlog.json" "$builddir/meson-logs/benchlog.txt"
    meson test -C "$builddir" --benchmark --suite bench --logbase benchlog --print-errorlogs || rc=1
    grep -hE '^(RESULT|FIGURE|SUMMARY) ' "$builddir/meson-logs/benchlog.txt" | sed 's/^/test: bench: /' || true
    logs="$logs $builddir/meson-logs/benchlog.json"
fi

# Summarise from meson's JSON logs so the last line says what ran.
python3 - "$build_failed" "$deb_result" "$fresh_result" $logs <<'PY'
import json, sys
deb = sys.argv.pop(2)
fresh = sys.argv.pop(2)
keys = ("OK", "FAIL", "SKIP", "EXPECTEDFAIL", "UNEXPECTEDPASS", "TIMEOUT", "ERROR")
BAD = ("FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS")
total = dict.fromkeys(keys, 0)
failures = []           # (build dir, record) of every test that did not pass


def failure_lines(rec, most=20):
    """What names the fault: the TAP 'not ok', error and Traceback lines a
    test printed, each with the diagnostics or traceback lines under it,
    and its last line (at most MOST lines), else its last lines."""
    out = (rec.get("stdout") or "") + "\n" + (rec.get("stderr") or "")
    lines = [l for l in out.splitlines() if l.strip()]
    picked, under = [], 0
    for l in lines:
        bare = l.lstrip("#").strip()
        if l.startswith("not ok") or bare.startswith(("Bail out", "ERROR", "FAIL", "Traceback")):
            picked.append(l)
            under = 12          # the lines that say more, below it
        elif under and (l.startswith(("#", " ")) or ":" in bare[:40]):
            picked.append(l)    # a diagnostic, a traceback's frame, or its exception line
            under -= 1
        else:
            under = 0
    if picked and lines[-1] not in picked:
        picked.append(lines[-1])
    return (picked or lines)[-most:]

for path in sys.argv[2:]:
    where = path.split("/meson-logs/")[0]
    counts = dict.fromkeys(keys, 0)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        continue
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            print("test: %s: an unreadable line: %r" % (path, line[:200]))
            rec = {"name": "(unreadable line)", "result": "ERROR", "stdout": line[:300].decode("utf-8", "replace")}
        r = rec.get("result", "ERROR")
        counts[r] = counts.get(r, 0) + 1
        if r in BAD:
            failures.append((where, rec))
    for k in counts:
        total[k] = total.get(k, 0) + counts[k]
    if len(sys.argv) > 3:
        print("test: %s: %d passed, %d failed" % (
            where, counts["OK"] + counts["EXPECTEDFAIL"], sum(counts[k] for k in BAD)))
# Name every test that failed, with the lines that say why, next to the
# counts, where a reader of only the last lines of the output sees them.
for where, rec in failures:
    print("test: FAILED %s: %s (%s, exit %s, %.0f s)" % (where, rec.get("name", "?"), rec.get("result"),
                                                        rec.get("returncode"), rec.get("duration") or 0))
    for l in failure_lines(rec):
        print("test:   | %s" % l[:300])
if int(sys.argv[1]):
    print("test: FAILED: %s sanitizer or stand_ins build did not build (its ninja output is above)" % sys.argv[1])
if deb == "fail":
    print("test: FAILED: the Debian package check, tests/debian/test_deb.sh (its 'not ok' lines are above)")
if fresh == "fail":
    print("test: FAILED: the fresh-machine demo, tests/fresh/test_fresh_demo.sh (its log: meson-logs/fresh-demo.log)")
passed = total["OK"] + total["EXPECTEDFAIL"]
failed = sum(total[k] for k in BAD)
failed += int(sys.argv[1])      # a sanitizer or stand_ins build that did not build counts as one failure
for one in (deb, fresh):        # the two checks outside meson count one each
    passed += one == "pass"
    failed += one == "fail"
    total["SKIP"] += one == "skip"
line = f"{passed} passed, {failed} failed"
if total["SKIP"]:
    line += f", {total['SKIP']} skipped"
print(line)
PY
exit $rc

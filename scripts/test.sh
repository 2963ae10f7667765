#!/bin/sh
# The project's test command: install what is missing (apt), build, and run
# every suite.  Extra arguments go to 'meson test' (e.g. --suite unit).
# Ends with a line 'N passed, M failed[, K skipped]'.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
builddir=${PCINUMA_BUILDDIR:-build}

if [ "$(id -u)" -eq 0 ]; then
    "$top/scripts/install-deps.sh"
else
    echo "test: not root; assuming the packages of scripts/install-deps.sh are installed"
fi

if [ -f "$builddir/build.ninja" ]; then
    meson setup --reconfigure "$builddir" >/dev/null
else
    meson setup "$builddir"
fi
ninja -C "$builddir"

rc=0
meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" "$@" || rc=$?

# Summarise from meson's JSON log so the last line says what ran.
python3 - "$builddir/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0, "EXPECTEDFAIL": 0, "UNEXPECTEDPASS": 0, "TIMEOUT": 0, "ERROR": 0}
try:
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line).get("result", "ERROR")
            counts[r] = counts.get(r, 0) + 1
except FileNotFoundError:
    pass
passed = counts["OK"] + counts["EXPECTEDFAIL"]
failed = counts["FAIL"] + counts["TIMEOUT"] + counts["ERROR"] + counts["UNEXPECTEDPASS"]
line = f"{passed} passed, {failed} failed"
if counts["SKIP"]:
    line += f", {counts['SKIP']} skipped"
print(line)
PY
exit $rc

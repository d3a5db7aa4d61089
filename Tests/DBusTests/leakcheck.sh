#!/bin/sh
# Leak check for the EventLoop and DBus modules.
#
# Builds the test bundle with AddressSanitizer and runs the EventLoopTests and DBusTests under
# LeakSanitizer (the 100k-signal storm included), then lists every leak whose allocation stack
# goes through Sources/DBus, Sources/EventLoop or libdbus. Exit status 0 means none.
#
# Why not valgrind: memcheck 3.19 dies with an internal SIGSEGV on the Swift test runner's main
# thread (libdispatch parks it in sigsuspend from a TSD destructor) before any test runs.
#
# Usage: Tests/DBusTests/leakcheck.sh            (from anywhere; builds into .build-dbus-asan)
set -eu
cd "$(dirname "$0")/../.."
scratch=${SCRATCH:-.build-dbus-asan}
log=${LOG:-$scratch/leakcheck.log}

swift build --scratch-path "$scratch" --build-tests --sanitize=address >/dev/null
bin=$(find "$scratch" -name pairdPackageTests.xctest -type f -perm -u+x | head -1)

# PAIRD_SANITIZER_RUN: the storm test skips its RSS bound (ASan's quarantine keeps freed memory).
status=0
PAIRD_SANITIZER_RUN=1 ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=report_objects=0 \
    "$bin" --testing-library swift-testing --filter 'EventLoopTests|DBusTests' >"$log" 2>&1 || status=$?

grep -E '^(✔|✘) Test run' "$log" || true
grep -E '^SUMMARY: AddressSanitizer' "$log" || echo "LeakSanitizer: no leaks at all"

# One line per leak record: kind, size, and whether its stack touches our code or libdbus.
ours=$(awk '
    /^(Direct|Indirect) leak of/ { if (rec != "" && hit) print rec; rec = $0; hit = 0; next }
    /Sources\/(DBus|EventLoop)\// || /libdbus-1/ { hit = 1; if (where == "") where = $0 }
    END { if (rec != "" && hit) print rec }
' "$log")
direct=$(printf '%s\n' "$ours" | grep -c '^Direct' || true)
indirect=$(printf '%s\n' "$ours" | grep -c '^Indirect' || true)
echo "leak records through Sources/DBus, Sources/EventLoop or libdbus: $direct direct (definitely lost), $indirect indirect"
if [ "$direct" -ne 0 ] || [ "$indirect" -ne 0 ]; then
    printf '%s\n' "$ours"
    echo "details: $log"
    exit 1
fi
if [ "$status" -ne 0 ] && ! grep -q 'LeakSanitizer' "$log"; then
    echo "tests failed (exit $status); details: $log"
    exit "$status"
fi
echo "details: $log"

#!/bin/sh
# run_tests.sh BUILD_DIR... — runs every test binary of each build folder, shows its output,
# adds up cmocka's per-binary summaries and ends with one line CI can read:
#   "tests: N passed, N failed"
# A binary that crashes or exits non-zero without a cmocka FAILED line counts as one failure.
set -u
passed=0
failed=0
failed_names=""
# libgomp spins idle workers by default; on a shared machine that multiplies test time (the
# CLI picks passive itself: core/threads.h). A caller's own policy wins.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for build in "$@"; do
    for t in "$build"/tests/test_*; do
        case "$t" in *.d) continue;; esac
        [ -x "$t" ] || continue
        log=$(mktemp)
        echo "=== $t"
        (cd "$(dirname "$0")/.." && "$t") >"$log" 2>&1
        rc=$?
        cat "$log"
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\./\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s).*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        rm -f "$log"
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1
            echo "!!! $t exited with status $rc"
        fi
        passed=$((passed + p))
        failed=$((failed + f))
        [ "$f" -gt 0 ] && failed_names="$failed_names $t"
    done
done
[ -n "$failed_names" ] && echo "failing binaries:$failed_names"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]

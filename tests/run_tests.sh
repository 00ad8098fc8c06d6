#!/bin/sh
# run_tests.sh [--junit FILE] BUILD_DIR... — runs every test binary of each build folder, shows
# its output, adds up cmocka's per-binary summaries and ends with one line CI can read:
# Binaries run TEST_JOBS at a time (default: the number of CPUs; each uses its own temp folder),
# and their outputs are shown whole, in order, once all have run.
#   "tests: N passed, N failed"
# A binary that crashes or exits non-zero without a cmocka FAILED line counts as one failure.
# --junit FILE also writes JUnit XML (one <testcase> per cmocka test, classname = the build
# folder and binary; a binary that died without a verdict is one <error> case), atomically.
set -u
junit=""
if [ "${1:-}" = "--junit" ]; then
    [ -n "${2:-}" ] || { echo "run_tests.sh: --junit needs a FILE" >&2; exit 2; }
    junit=$2
    shift 2
fi
cases=$(mktemp)
# xml_escape TEXT: & < > " escaped for an attribute value
xml_escape() { printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g'; }
passed=0
failed=0
skipped=0
failed_names=""
# libgomp spins idle workers by default; with TEST_JOBS test binaries at once the cores are
# oversubscribed and any spinning multiplies test time, so the tests run passive (the CLI's own
# default is a short spin, core/threads.h, for speed on a machine it has to itself). A caller's
# own policy wins.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
logs=$(mktemp -d)
i=0
f=0
for build in "$@"; do
    f=$((f + 1))
    for t in "$build"/tests/test_*; do
        case "$t" in *.d) continue;; esac
        [ -x "$t" ] || continue
        i=$((i + 1))
        printf '%s\n' "$t" >"$logs/$(printf '%04d' $i).name"
        echo "$f" >"$logs/$(printf '%04d' $i).folder"
    done
done
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
# one job: run NNNN.name's binary from the repository root, output to NNNN.log, status to NNNN.rc
# Start order (the output order stays the folders' and names'): the longest binaries first, so
# that no long one starts last and runs alone: the last folder first (make test passes the
# sanitizer build last: about 3x the plain build's time), and in each folder these first.
LONG_FIRST="test_plugin test_train test_determinism test_optim test_memory test_ddp test_trajectory"
order=$(for n in $(ls "$logs" | sed -n 's/\.name$//p'); do
    b=$(basename "$(cat "$logs/$n.name")")
    rank=$(echo "$LONG_FIRST" | tr ' ' '\n' | grep -nx "$b" | cut -d: -f1)
    printf '%s %s %s\n' "$(cat "$logs/$n.folder")" "${rank:-99}" "$n"
done | sort -k1,1nr -k2,2n -k3,3 | awk '{ print $3 }')
echo "$order" | xargs -P "$jobs" -I{} sh -c \
    't=$(cat "$1/$2.name"); (cd "$3" && "$t") >"$1/$2.log" 2>&1; echo $? >"$1/$2.rc"' sh "$logs" {} "$root"
for n in $(ls "$logs" | sed -n 's/\.name$//p'); do
        t=$(cat "$logs/$n.name")
        log="$logs/$n.log"
        echo "=== $t"
        rc=$(cat "$logs/$n.rc" 2>/dev/null || echo 1)
        cat "$log"
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\./\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s).*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        k=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test(s).*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
        cls=$(xml_escape "$(echo "$t" | tr / .)")
        # each "[ RUN ] name" closed by "[ OK ] name" (pass) or "[ FAILED ] name" (failure, with
        # the ERROR/LINE lines between as its text); a RUN never closed: the binary died in it
        awk -v cls="$cls" '
            function esc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); gsub(/"/, "\\&quot;", s); return s }
            /^\[ RUN      \] / { name = $4; detail = ""; open = 1; next }
            open && /^\[       OK \] / { printf "    <testcase classname=\"%s\" name=\"%s\"/>\n", cls, esc(name); open = 0; next }
            open && /^\[  SKIPPED \] / { printf "    <testcase classname=\"%s\" name=\"%s\">\n      <skipped/>\n    </testcase>\n", cls, esc(name); open = 0; next }
            open && /^\[  FAILED  \] / { printf "    <testcase classname=\"%s\" name=\"%s\">\n      <failure message=\"cmocka: FAILED\">%s</failure>\n    </testcase>\n", cls, esc(name), esc(detail); open = 0; next }
            open && /^\[  (ERROR|LINE)  *\]/ { detail = detail $0 "\n" }
            END { if (open) printf "    <testcase classname=\"%s\" name=\"%s\">\n      <error message=\"died during this test\"/>\n    </testcase>\n", cls, esc(name) }
        ' "$log" >>"$cases"
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1
            echo "!!! $t exited with status $rc"
            printf '    <testcase classname="%s" name="exit status">\n      <error message="exited with status %s without a cmocka verdict"/>\n    </testcase>\n' "$cls" "$rc" >>"$cases"
        fi
        passed=$((passed + p))
        skipped=$((skipped + k))
        failed=$((failed + f))
        [ "$f" -gt 0 ] && failed_names="$failed_names $t"
done
rm -rf "$logs"
[ -n "$failed_names" ] && echo "failing binaries:$failed_names"
if [ -n "$junit" ]; then
    n=$(grep -c '<testcase ' "$cases")
    nf=$(grep -c '<failure ' "$cases")
    ne=$(grep -c '<error ' "$cases")
    ns=$(grep -c '<skipped/>' "$cases")
    { echo '<?xml version="1.0" encoding="UTF-8"?>'
      echo '<testsuites>'
      echo "  <testsuite name=\"trainbench tests\" tests=\"$n\" failures=\"$nf\" errors=\"$ne\" skipped=\"$ns\">"
      cat "$cases"
      echo '  </testsuite>'
      echo '</testsuites>'; } >"$junit.tmp.$$" && mv "$junit.tmp.$$" "$junit" || echo "run_tests.sh: cannot write $junit" >&2
fi
rm -f "$cases"
[ "$skipped" -gt 0 ] && echo "skipped: $skipped (each prints why: a CPU or library this machine lacks, or a sample the sanitizer pass leaves to the plain pass)"
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]

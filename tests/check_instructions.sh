#!/bin/sh
# check_instructions.sh — the instruction-count gate end to end (README "Instruction counts"):
# `trainbench icount` twice with the same build must give identical counts (the gate passes,
# 0 false alarms), and a test build of the icount binary whose optim/adamw_torch/100000 case does
# ~2.4% more work (-DICOUNT_SLOWDOWN, ICOUNT_EXTRA extra loop iterations per step, about 7.2
# instructions each, computed from this machine's own adamw_torch count: valgrind hides AVX-512,
# so the count depends on the CPU's other paths, e.g. 827,771 with the Xeon's table-seeded sqrt,
# where a fixed 1,430 iterations gave only +1.25%) must be caught and named by
# `trainbench gate --metric instructions` (exit 1). Needs valgrind; about 3
# minutes on 2 cores. `make check-instructions` runs it.
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build}
d=$(mktemp -d /tmp/trainbench-icount.XXXXXX)
trap 'rm -rf "$d"' EXIT
fail() { echo "check_instructions: FAIL: $*"; exit 1; }
mkdir -p "$d/a" "$d/b" "$d/slow"
"$B"/trainbench icount --out "$d/a" >/dev/null || fail "icount run a"
"$B"/trainbench icount --out "$d/b" >/dev/null || fail "icount run b"
"$B"/trainbench gate --metric instructions --baseline "$d/a" --candidate "$d/b" >"$d/same.txt" || { cat "$d/same.txt"; fail "two runs of one build must pass"; }
n=$(grep -c ' identical$' "$d/same.txt" || true)
total=$(grep -c '^icount/' "$d/same.txt" || true)
[ "$n" -eq "$total" ] && [ "$total" -ge 9 ] || { cat "$d/same.txt"; fail "counts not identical ($n of $total)"; }
echo "check_instructions: two runs of one build: $n of $total counts identical, gate PASS"
make --no-print-directory BUILD="$B" "$B/bench/trainbench-icount-slow" >/dev/null || fail "building the slowed icount binary"
base=$(awk '$1 == "icount/optim/adamw_torch/100000" { print $2 }' "$d/same.txt")
[ -n "$base" ] || fail "no icount/optim/adamw_torch/100000 count in run a"
extra=$(awk -v b="$base" 'BEGIN { printf "%d", b * 0.024 / 7.2 }')
echo "check_instructions: optim/adamw_torch/100000 counts $base per step here: ICOUNT_EXTRA=$extra (~2.4%)"
ICOUNT_EXTRA=$extra "$B"/trainbench icount --bin "$B/bench/trainbench-icount-slow" --out "$d/slow" >/dev/null || fail "icount slowed run"
rc=0
"$B"/trainbench gate --metric instructions --baseline "$d/a" --candidate "$d/slow" >"$d/slow.txt" || rc=$?
cat "$d/slow.txt"
[ $rc -eq 1 ] || fail "the slowed build must fail the gate (exit 1, got $rc)"
grep -q '^FAIL: regression in icount/optim/adamw_torch/100000 (+2\.' "$d/slow.txt" || fail "the regression is not named as +2.x% in optim/adamw_torch"
[ "$(grep -c REGRESSION "$d/slow.txt")" -eq 1 ] || fail "more than the slowed case flagged"
echo "check_instructions: PASS"

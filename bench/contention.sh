#!/bin/sh
# contention.sh — `make contention`: median step time of the small model (bf16, onednn, batch 8 x
# 128, 2 threads) on this machine as it is, and again while one competing CPU-bound process (a
# shell busy loop pinned to CPU 0 with taskset) runs; for trainbench's deliberate OpenMP wait
# policy (a short spin, GOMP_SPINCOUNT=1000: threads.h), for passive (OMP_WAIT_POLICY=passive)
# and for libgomp's default spinning (GOMP_SPINCOUNT=300000, what an unset OMP_WAIT_POLICY
# gives), rounds interleaved so drift hits every column alike.
# Prints one line per configuration: median of the rounds' median step times, and the ratio
# contended / alone. Not a test: timings are never asserted (README "Threads and contention").
#   sh bench/contention.sh TRAINBENCH_BINARY [ROUNDS] [STEPS]
set -eu
bin=${1:?usage: contention.sh TRAINBENCH_BINARY [ROUNDS] [STEPS]}
rounds=${2:-5}
steps=${3:-12}
command -v taskset >/dev/null 2>&1 || { echo "contention: taskset (util-linux) is needed" >&2; exit 2; }
tmp=$(mktemp -d)
busy=""
cleanup() { [ -n "$busy" ] && kill "$busy" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

# median step time (steps 2..) of one run, in seconds
one() {  # one POLICY_ENV
    env $1 "$bin" train --model small --bf16 --backend onednn --threads 2 --max-steps "$steps" \
        --per-device-train-batch-size 8 --seq-len 128 --eval-steps 0 --num-eval-examples 8 \
        --no-progress --output-dir "$tmp/out" >/dev/null 2>&1 || { echo "contention: trainbench train failed" >&2; exit 1; }
    python3 - "$tmp/out/results.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))["records"][1:]
print(statistics.median(x["step_time_s"] for x in r))
PY
    rm -rf "$tmp/out"  # train refuses an --output-dir that already holds a run
}

for policy in "TRAINBENCH_DEFAULT_POLICY=1" "OMP_WAIT_POLICY=passive" "GOMP_SPINCOUNT=300000"; do
    : >"$tmp/$policy.alone"; : >"$tmp/$policy.busy"
done
i=0
while [ $i -lt "$rounds" ]; do
    for policy in "TRAINBENCH_DEFAULT_POLICY=1" "OMP_WAIT_POLICY=passive" "GOMP_SPINCOUNT=300000"; do
        one "$policy" >>"$tmp/$policy.alone"
        taskset -c 0 sh -c 'while :; do :; done' &
        busy=$!
        one "$policy" >>"$tmp/$policy.busy"
        kill "$busy"; wait "$busy" 2>/dev/null || true; busy=""
    done
    i=$((i + 1))
done
echo "small bf16 onednn b8x128, 2 threads, $rounds interleaved rounds of $steps steps; median step time (s):"
for policy in "TRAINBENCH_DEFAULT_POLICY=1" "OMP_WAIT_POLICY=passive" "GOMP_SPINCOUNT=300000"; do
    python3 - "$policy" "$tmp/$policy.alone" "$tmp/$policy.busy" <<'PY'
import statistics, sys
a = statistics.median(float(x) for x in open(sys.argv[2]))
b = statistics.median(float(x) for x in open(sys.argv[3]))
name = "trainbench default (GOMP_SPINCOUNT=1000)" if sys.argv[1].startswith("TRAINBENCH_DEFAULT") else sys.argv[1]
print(f"  {name:<43} alone {a:.4f}  with a busy process {b:.4f}  ratio {b / a:.2f}x")
PY
done

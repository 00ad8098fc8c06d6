#!/bin/sh
# measure_sensitivity.sh — the wall-time gate's sensitivity and false-alarm rate on this machine
# kind (README "trainbench gate"): RUNS real runs of a benchmark subset (10 interleaved
# repetitions each), then (python3, standard library only) 20 A/A pairs gated as they are (false
# alarms) and 20 A/B pairs whose candidate times are multiplied by 1+s (the slowdown the issue
# constructed), for s in 1..100%, with the first 5 and with all 10 repetitions of each run; prints
# per s how many of the 20 x 4 benchmark comparisons the gate (alpha 0.01, min effect 5%, and
# min effect 0) flagged as REGRESSION, and the smallest s caught in at least 90% of them. Slow (RUNS x ~10 s); not a test. Usage: sh tests/measure_sensitivity.sh [RUNS=40]
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build}
RUNS=${1:-40}
d=${OUT:-/tmp/trainbench-sensitivity}
mkdir -p "$d"
F='--benchmark_filter=^(optim/adamw_torch/10000|optim/adafactor/10000|convert/bf16/1000000|gemm/openblas/f32/nt/1024x768x768)/real_time$'
i=0
while [ $i -lt "$RUNS" ]; do
    if [ ! -s "$d/run$i.json" ]; then  # runs already there are reused (rerun the analysis only)
        "$B"/bench/trainbench-bench "$F" --benchmark_min_time=0.05 --benchmark_repetitions=10 \
            --benchmark_enable_random_interleaving=true --benchmark_out="$d/run$i.tmp" --benchmark_out_format=json >/dev/null 2>&1 \
            && mv "$d/run$i.tmp" "$d/run$i.json" || { echo "measure_sensitivity: bench run $i failed" >&2; exit 1; }
    fi
    i=$((i + 1))
done
python3 - "$d" "$RUNS" "$B/trainbench" <<'PY'
import json, os, subprocess, sys
d, runs, tb = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def folder(src, name, reps, scale):
    out = os.path.join(d, "trial", name)
    os.makedirs(out, exist_ok=True)
    j = json.load(open(src))
    keep = [e for e in j["benchmarks"] if e.get("run_type") != "aggregate" and e.get("repetition_index", 0) < reps]
    for e in keep:
        e["real_time"] *= scale
    json.dump({"context": j["context"], "benchmarks": keep}, open(os.path.join(out, "bench.json"), "w"))
    return out
def gate(a, b, extra):  # regressions flagged among the benchmarks of one trial
    r = subprocess.run([tb, "gate", "--json", "--baseline", a, "--candidate", b] + extra, capture_output=True, text=True)
    return sum(row["verdict"] == "REGRESSION" for row in json.loads(r.stdout)["benchmarks"])
for reps in (5, 10):
    for extra, label in (([], "min effect 5%"), (["--min-effect", "0"], "min effect 0")):
        nb = 4
        aa = sum(gate(folder(f"{d}/run{2*k}.json", "a", reps, 1), folder(f"{d}/run{2*k+1}.json", "b", reps, 1), extra)
                 for k in range(20))
        row, smallest = [], None
        for s in (0.01, 0.02, 0.03, 0.05, 0.07, 0.10, 0.15, 0.20, 0.30, 0.40, 0.50, 0.75, 1.00):
            hits = sum(gate(folder(f"{d}/run{2*k}.json", "a", reps, 1), folder(f"{d}/run{2*k+1}.json", "b", reps, 1 + s), extra)
                       for k in range(20))
            row.append(f"{round(s*100)}%:{hits}/{20*nb}")
            if hits * 10 >= 9 * 20 * nb and smallest is None:
                smallest = s
        print(f"{reps} reps, {label}: A/A false alarms {aa}/{20*nb} benchmark comparisons; A/B detected " + " ".join(row))
        print(f"{reps} reps, {label}: smallest slowdown detected in >= 90% of comparisons: "
              + (f"{round(smallest*100)}%" if smallest is not None else "none up to 100%"))
PY

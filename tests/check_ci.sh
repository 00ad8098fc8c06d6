#!/bin/sh
# check_ci.sh — runs the commands of README "CI" (the GitHub Actions workflow and the GitLab
# job) locally, with a small benchmark filter, and parses every JUnit file they write with
# Python's xml module (what CI test reporters do). The base branch is stood in for by this
# build (a CI job builds the base branch in a worktree; the commands are the same).
# `make check-ci` runs it (about 2 minutes: the normal test suite plus two small bench runs).
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build}
ci=$(mktemp -d /tmp/trainbench-ci.XXXXXX)
trap 'rm -rf "$ci"' EXIT
fail() { echo "check_ci: FAIL: $*"; exit 1; }
F='^(roofline/fma_f32|roofline/triad|optim/adamw_torch/10000|convert/bf16/1000000)/'

# 1. the tests, with a JUnit report (CI: `make test JUNIT=...`; here the normal build's suite)
sh tests/run_tests.sh --junit "$ci/tests.xml" "$B" >"$ci/tests.log" 2>&1 || { tail -5 "$ci/tests.log"; fail "tests"; }
# 2. benchmark base and head into result folders (record + the bench binary), then the gate
for side in base head; do
    d=$("$B"/trainbench record --results "$ci/$side" --label "$side")
    "$B"/bench/trainbench-bench --benchmark_filter="$F" --benchmark_min_time=0.02 --benchmark_repetitions=5 \
        --benchmark_enable_random_interleaving=true --benchmark_out="$d/bench.json" --benchmark_out_format=json \
        >"$ci/$side.log" 2>&1 || { tail -5 "$ci/$side.log"; fail "bench ($side)"; }
    echo "$d" >"$ci/$side.dir"
done
rc=0
"$B"/trainbench gate --baseline "$(cat "$ci/base.dir")" --candidate "$(cat "$ci/head.dir")" --normalize roofline \
    --allow-untested --junit "$ci/gate.xml" --markdown "$ci/gate.md" >"$ci/gate.log" 2>&1 || rc=$?
[ $rc -le 2 ] || fail "gate crashed (exit $rc)"
echo "check_ci: gate exit $rc (0 pass, 1 regression, 2 untested or environment changed: all are verdicts)"
[ -s "$ci/gate.md" ] && grep -q '^## trainbench gate: ' "$ci/gate.md" || fail "no markdown summary"
# 3. the report the job uploads
"$B"/trainbench report "$(cat "$ci/head.dir")" "$(cat "$ci/base.dir")" --out "$ci/report" >/dev/null || fail "report"
[ -s "$ci/report/REPORT.md" ] || fail "no REPORT.md"
# 4. conform and check write JUnit too
"$B"/trainbench conform --optim adamw_torch --case 'vec_25*' --junit "$ci/conform.xml" >/dev/null || fail "conform"
g=reference/golden/optim/adamw_torch/vec_257.safetensors
"$B"/trainbench check "$g" "$g" --junit "$ci/check.xml" >/dev/null || fail "check"
# every JUnit file parses, and its counts match its test cases
python3 - "$ci/tests.xml" "$ci/gate.xml" "$ci/conform.xml" "$ci/check.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
for path in sys.argv[1:]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites", (path, root.tag)
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        fails = sum(1 for c in cases if c.find("failure") is not None)
        errors = sum(1 for c in cases if c.find("error") is not None)
        assert int(suite.get("tests")) == len(cases) > 0, (path, suite.attrib, len(cases))
        assert int(suite.get("failures")) == fails, (path, suite.attrib, fails)
        assert int(suite.get("errors")) == errors, (path, suite.attrib, errors)
        print(f"check_ci: {path.rsplit('/', 1)[1]}: {len(cases)} test cases, {fails} failures, {errors} errors: parsed")
PY
echo "check_ci: PASS"

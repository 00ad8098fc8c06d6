#!/bin/sh
# check_add_optimizer.sh — proves README "How to add an optimizer": in a temporary copy of the
# tree (tracked and untracked files, no build outputs), add tests/extension/optim_dummy.c as
# src/optim/optim_dummy.c, its declaration to optim.h and one line to OPTIMIZERS, then check
# that nothing else needs editing: it builds (library, CLI, tests, plugins, benchmarks); the
# registry lists it; `trainbench memory` measures it (estimate == measured); the Makefile builds
# its plugin adapter; the benchmarks include optim/dummy/*; and of the whole normal test suite
# the only failures are test_optim's "no goldens" and test_memory's "no state formula" for dummy
# (by design: goldens come from the real library, `make goldens`, and the formula is the
# independent statement of its state bytes). `make test-extension` runs it (a full build).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/trainbench-ext.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_add_optimizer: FAIL: $*"; exit 1; }
ok() { echo "check_add_optimizer: ok: $*"; }

# one tar over the whole list (-T): through xargs, a long list (the committed results) became
# several concatenated archives, and the extracting tar stopped at the end of the first
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | (cd "$tmp" && tar xf -) \
    || fail "copying the tree"
cd "$tmp" || exit 1
cp tests/extension/optim_dummy.c src/optim/optim_dummy.c
# the two edits the README names: the declaration and one registry line
sed -i 's/^extern const Optimizer optim_adamw_bnb_8bit;$/&\nextern const Optimizer optim_dummy;/' src/optim/optim.h
sed -i 's/^    &optim_adamw_bnb_8bit,$/&\n    \&optim_dummy,/' src/optim/optim.c
grep -q 'optim_dummy;' src/optim/optim.h && grep -q '&optim_dummy,' src/optim/optim.c || fail "could not apply the two edits"
changed=$(cd "$root" && git ls-files -co --exclude-standard | while read -r f; do cmp -s "$root/$f" "$tmp/$f" || echo "$f"; done)
[ "$changed" = "$(printf 'src/optim/optim.c\nsrc/optim/optim.h')" ] || fail "edited more than optim.c and optim.h: $changed"
ok "one new file (src/optim/optim_dummy.c) and two edited lines (optim.h, optim.c)"

make -j2 all bench-build >build.log 2>&1 || { tail -30 build.log; fail "the build failed"; }
ok "builds (library, CLI, tests, plugins, benchmarks)"
build/trainbench conform --optim bogus 2>&1 | grep -q 'dummy' || fail "the registry does not list dummy"
ok "registry lists dummy"
out=$(build/trainbench memory --model tiny --optim dummy 2>&1) || { echo "$out"; fail "memory --optim dummy"; }
echo "$out" | grep -q 'estimate == measured' || { echo "$out"; fail "memory: no estimate == measured for dummy"; }
ok "trainbench memory --optim dummy: estimate == measured"
[ -f build/plugins/adapter_dummy.so ] || fail "no plugin adapter build/plugins/adapter_dummy.so"
out=$(build/trainbench conform --plugin build/plugins/adapter_dummy.so 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q 'no goldens for dummy' || { echo "$out"; fail "adapter_dummy.so: expected exit 2 'no goldens for dummy' (got $rc)"; }
ok "plugin adapter built and loaded (implements dummy; no goldens)"
n=$(build/bench/trainbench-bench --benchmark_list_tests | grep -c '^optim/dummy/')
[ "$n" -ge 1 ] || fail "no optim/dummy/* benchmark"
ok "benchmarks: $n optim/dummy/* entries"
sh tests/run_tests.sh build >tests.log 2>&1
failing=$(sed -n 's/^failing binaries: *//p' tests.log)
[ "$failing" = "build/tests/test_memory build/tests/test_optim" ] \
    || { tail -5 tests.log; fail "expected only test_memory and test_optim to fail, got: '$failing'"; }
grep -q 'optim/dummy: FAIL no goldens' tests.log || fail "test_optim failed for another reason than the missing goldens"
grep -q 'no state formula for dummy' tests.log || fail "test_memory failed for another reason than the missing formula"
failed_tests=$(sed -n 's/^\[  FAILED  \] \(test_[a-z0-9_]*\)$/\1/p' tests.log | sort -u)
# the golden check, run twice (vector and portable kernels), and the ZeRO-1 formula check:
# nothing else may fail
[ "$failed_tests" = "$(printf 'test_cli_zero1_per_rank\ntest_every_optimizer_matches_its_goldens\ntest_portable_paths_match_goldens')" ] \
    || fail "expected only the golden checks (test_every_optimizer_matches_its_goldens, test_portable_paths_match_goldens) and test_cli_zero1_per_rank to fail, got: $failed_tests"
[ "$(grep -c 'optim/dummy: FAIL no goldens' tests.log)" -eq 2 ] || fail "each golden check must fail on dummy's missing goldens"
tail -1 tests.log
ok "the only failures: test_optim 'no goldens' and test_memory 'no state formula' for dummy (README steps 3 and 4)"
echo "check_add_optimizer: PASS"

#!/bin/sh
# run_fuzz.sh — `make fuzz`: builds every harness of tests/fuzz/ with clang + libFuzzer +
# ASan/UBSan + source coverage (the library compiled with the same flags into build/fuzz/), runs
# each for FUZZ_SECONDS (default 60) with the committed corpus tests/fuzz/corpus/<h>/ as seeds
# (new inputs go to build/fuzz/corpus/<h>/, crashes to build/fuzz/crashes/<h>/; copy a
# reproducer into tests/fuzz/crashes/<h>/ once fixed), then replays both corpora once and prints
# the line coverage of each harness's loader(s) (llvm-profdata/llvm-cov). Exit 1 when a harness
# found a crash. Without clang/libFuzzer (clang, libclang-rt-14-dev) it says so and exits 0.
#   FUZZ_SECONDS=600 FUZZ_ONLY="safetensors dataset" sh tests/fuzz/run_fuzz.sh
set -u
B=build/fuzz
SECONDS_EACH=${FUZZ_SECONDS:-60}
HARNESSES=${FUZZ_ONLY:-"safetensors dataset config checkpoint results fingerprint plugin_result"}
CLANG=${FUZZ_CC:-clang}
PROFDATA=$(command -v llvm-profdata-14 || command -v llvm-profdata || true)
LLVMCOV=$(command -v llvm-cov-14 || command -v llvm-cov || true)

loaders() {  # the source files each harness exists to cover
    case $1 in
        safetensors) echo src/core/safetensors.c ;;
        dataset) echo src/model/data.c ;;
        config) echo src/model/model.c ;;
        checkpoint) echo src/train/checkpoint.c src/train/train.c ;;
        results) echo src/results/gate.c src/results/report.c ;;
        fingerprint) echo src/validate/fingerprint.c ;;
        plugin_result) echo src/validate/conform.c ;;
    esac
}

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char* d, unsigned long n) { return 0; }' > "$probe/p.c"
if ! command -v "$CLANG" >/dev/null 2>&1 || ! "$CLANG" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "fuzz: skipped: $CLANG with libFuzzer is not usable here (Debian: apt-get install clang libclang-rt-14-dev;" \
         "make fuzz installs them as root)"
    exit 0
fi

# -fopenmp-simd, not -fopenmp: clang does not carry a function's target("avx2") attribute into
# the OpenMP regions outlined from it; the fuzz build runs single-threaded (omp_* from -lgomp).
# -DTRAINBENCH_NO_MPI: no harness reaches `train --ddp`, and the fuzz build needs no Open MPI.
FLAGS="-std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer -fno-math-errno -ffp-contract=off -fopenmp-simd -Wno-pass-failed -Isrc -Itests/fuzz -DTRAINBENCH_NO_MPI \
 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fprofile-instr-generate -fcoverage-mapping -DTRAINBENCH_CFLAGS=\"fuzz\""
LIBS="-ljansson -lsqlite3 -lm -ldl -ldnnl -lopenblas -lgomp"
mkdir -p "$B/obj"
[ "$(cat "$B/flags" 2>/dev/null)" = "$CLANG $FLAGS" ] || rm -f "$B"/obj/*.o  # flags changed: rebuild all
echo "$CLANG $FLAGS" > "$B/flags"
objs=""
for src in $(ls src/*/*.c | grep -v '^src/cli/main.c$'); do
    o="$B/obj/$(echo "$src" | sed 's|^src/||; s|/|_|g; s|\.c$|.o|')"
    if [ ! -f "$o" ] || [ "$src" -nt "$o" ] || [ -n "$(find src -name '*.h' -newer "$o" | head -1)" ]; then
        echo "fuzz: cc $src"
        $CLANG $FLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$o" || exit 1
    fi
    objs="$objs $o"
done

found=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for h in $HARNESSES; do
    bin="$B/fuzz_$h"
    $CLANG $FLAGS -fsanitize=fuzzer -DFUZZ_LIBFUZZER "tests/fuzz/fuzz_$h.c" $objs $LIBS -o "$bin" || exit 1
    mkdir -p "$B/corpus/$h" "$B/crashes/$h" "$B/prof"
    echo "fuzz: $h for ${SECONDS_EACH}s"
    LLVM_PROFILE_FILE="$B/prof/$h-run.profraw" "$bin" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=4096 \
        -artifact_prefix="$B/crashes/$h/" -print_final_stats=1 "$B/corpus/$h" "tests/fuzz/corpus/$h" \
        > "$B/$h.log" 2>&1
    rc=$?
    grep -E "^Done [0-9]+ runs" "$B/$h.log" | sed "s/^/fuzz: $h: /"
    if [ $rc -ne 0 ]; then
        found=1
        echo "fuzz: $h FOUND A CRASH (exit $rc): see $B/$h.log and $B/crashes/$h/"
        grep -m3 -E "ERROR|runtime error|CHECK" "$B/$h.log"
    fi
    # coverage of the final corpus (one replay, no mutation)
    rm -f "$B/prof/$h.profraw"
    LLVM_PROFILE_FILE="$B/prof/$h.profraw" "$bin" -runs=0 "$B/corpus/$h" "tests/fuzz/corpus/$h" > "$B/$h.cov.log" 2>&1
    if [ -n "$PROFDATA" ] && [ -n "$LLVMCOV" ] && [ -f "$B/prof/$h.profraw" ]; then
        "$PROFDATA" merge -sparse "$B/prof/$h.profraw" -o "$B/prof/$h.profdata"
        "$LLVMCOV" report "$bin" -instr-profile="$B/prof/$h.profdata" $(loaders "$h") 2>/dev/null |
            awk -v h="$h" 'NR > 2 && $1 ~ /\.c$/ { printf "fuzz: coverage %-12s %-30s lines %s (of %s)\n", h, $1, $10, $8 }'
    fi
done
[ $found -eq 0 ] && echo "fuzz: no crash in $(echo $HARNESSES | wc -w) harnesses x ${SECONDS_EACH}s"
exit $found

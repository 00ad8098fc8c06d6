#!/bin/sh
# deps.sh — checks that every build dependency is really usable (header compiles, library
# links, program runs), not merely that a package name is installed.
#   sh src/deps.sh check [without...]  report what is missing, exit 1 (used by `make all`)
#   sh src/deps.sh install             as root: apt-get install what is missing (apt-get update
#                                      first if a package is not found); otherwise print the
#                                      exact command to run and exit 1 (used by `make deps`)
set -u
mode=${1:-check}
[ $# -gt 0 ] && shift
without=" $* "

CC=${CC:-cc}
CXX=${CXX:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# probe_c PACKAGE LANG 'INCLUDES' 'LIBS'  -> 0 when a tiny program including them links
probe() {
    lang=$1 includes=$2 libs=$3
    printf '%b\nint main(void){return 0;}\n' "$includes" > "$tmp/p.$lang"
    if [ "$lang" = cc ]; then
        $CXX -x c++ "$tmp/p.$lang" $libs -o "$tmp/p" >/dev/null 2>&1
    else
        $CC -x c "$tmp/p.$lang" $libs -o "$tmp/p" >/dev/null 2>&1
    fi
}

missing=""
why=""
need() {  # need PACKAGE WHAT
    missing="$missing $1"
    why="$why\n  $1: $2"
}

command -v "$CC" >/dev/null 2>&1 || need gcc "no C compiler ($CC)"
command -v "$CXX" >/dev/null 2>&1 || need g++ "no C++ compiler ($CXX) for the Google Benchmark shim"
command -v make >/dev/null 2>&1 || need make "no make"
if command -v "$CC" >/dev/null 2>&1; then
    case "$without" in *" openblas "*) ;; *)
        # the OpenMP build, by path (Makefile OPENBLAS_DIR/OPENBLAS_INC), and it must say so at run time
        ob_dir=${OPENBLAS_DIR:-/usr/lib/$($CC -print-multiarch)/openblas-openmp}
        ob_inc=${OPENBLAS_INC:-/usr/include/$($CC -print-multiarch)/openblas-openmp}
        printf '#include <cblas.h>\nint main(void){return openblas_get_parallel() == 2 ? 0 : 1;}\n' > "$tmp/ob.c"
        { $CC -x c "$tmp/ob.c" -I"$ob_inc" -L"$ob_dir" -Wl,-rpath,"$ob_dir" -lopenblas -o "$tmp/ob" >/dev/null 2>&1 && "$tmp/ob"; } ||
            need libopenblas-openmp-dev "OpenBLAS's OpenMP build unusable in $ob_dir (openblas backend; openblas_get_parallel() must be 2)";; esac
    case "$without" in *" onednn "*) ;; *)
        probe c '#include <oneapi/dnnl/dnnl.h>' '-ldnnl' || need libdnnl-dev "oneapi/dnnl/dnnl.h or -ldnnl unusable (onednn backend)";; esac
    case "$without" in *" mpi "*) ;; *)
        # Open MPI (train --ddp): the compiler wrapper's flags, a program that links, and mpirun
        if command -v mpicc >/dev/null 2>&1; then
            probe c '#include <mpi.h>' "$(mpicc --showme:compile 2>/dev/null) $(mpicc --showme:link 2>/dev/null)" ||
                need libopenmpi-dev "mpi.h or -lmpi unusable (train --ddp; or build with WITHOUT=mpi)"
        else
            need libopenmpi-dev "no mpicc (Open MPI's compiler wrapper gives the flags; train --ddp; or WITHOUT=mpi)"
        fi
        command -v mpirun >/dev/null 2>&1 || need openmpi-bin "no mpirun (train --ddp and its tests)";; esac
    probe c '#include <jansson.h>' '-ljansson' || need libjansson-dev "jansson.h or -ljansson unusable (JSON)"
    probe c '#include <sqlite3.h>' '-lsqlite3' || need libsqlite3-dev "sqlite3.h or -lsqlite3 unusable (trainbench history)"
    probe c '#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <setjmp.h>\n#include <cmocka.h>' '-lcmocka' || need libcmocka-dev "cmocka.h or -lcmocka unusable (tests)"
fi
if command -v "$CXX" >/dev/null 2>&1; then
    probe cc '#include <benchmark/benchmark.h>' '-lbenchmark -lpthread' || need libbenchmark-dev "benchmark/benchmark.h or -lbenchmark unusable (benchmarks)"
fi
command -v gnuplot >/dev/null 2>&1 || need gnuplot-nox "no gnuplot program (report plots)"
valgrind --version >/dev/null 2>&1 || need valgrind "no valgrind program (trainbench icount: instruction counts)"
# `make fuzz` adds the word "fuzz": clang with libFuzzer (clang only recommends libclang-rt-14-dev,
# which holds libFuzzer and the sanitizer runtimes) and llvm-profdata/llvm-cov for coverage
case "$without" in *" fuzz "*)
    printf 'int LLVMFuzzerTestOneInput(const unsigned char* d, unsigned long n) { return 0; }\n' > "$tmp/f.c"
    command -v clang >/dev/null 2>&1 || need clang "no clang (make fuzz)"
    if command -v clang >/dev/null 2>&1 && ! clang -fsanitize=fuzzer,address "$tmp/f.c" -o "$tmp/f" >/dev/null 2>&1; then
        need libclang-rt-14-dev "clang -fsanitize=fuzzer does not link (libFuzzer, make fuzz)"
    fi
    command -v llvm-profdata-14 >/dev/null 2>&1 || command -v llvm-profdata >/dev/null 2>&1 || need llvm-14 "no llvm-profdata (make fuzz coverage)";;
esac

if [ -z "$missing" ]; then
    [ "$mode" = install ] && [ -n "${TRAINBENCH_DEPS_VERBOSE:-}" ] && echo "deps: all dependencies present"
    exit 0
fi

if [ "$mode" = check ]; then
    printf 'trainbench: missing build dependencies:%b\n' "$why" >&2
    printf '  run `make deps` (installs them with apt-get as root), or build without a backend or MPI: make WITHOUT=onednn (or WITHOUT=mpi)\n' >&2
    exit 1
fi

cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
    printf 'trainbench: missing dependencies:%b\n' "$why" >&2
    printf 'run as root:\n  sudo apt-get update && sudo %s\n' "$cmd" >&2
    exit 1
fi
printf 'deps: installing:%s\n' "$missing"
export DEBIAN_FRONTEND=noninteractive
if ! $cmd; then
    echo "deps: package not found; running apt-get update first"
    apt-get update && $cmd || { echo "trainbench: apt-get failed; see above" >&2; exit 1; }
fi
exec sh "$0" check $without

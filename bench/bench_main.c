// bench_main.c — the trainbench benchmark binary (build/bench/trainbench-bench): registers
// every benchmark (roofline probes first, so later fractions use values measured in this
// process) and hands the command line to Google Benchmark (--benchmark_filter,
// --benchmark_out, --benchmark_repetitions, ...). Environment: FULL=1 adds the large matrix.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

bool bench_full = false;

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bench_registerf(BenchFn fn, void* arg, const char* fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    bench_register(name, fn, arg);
}

static void skip_v(BenchState* st, const char* prefix, const char* fmt, va_list ap) {
    char msg[768];
    size_t n = (size_t)snprintf(msg, sizeof msg, "%s: ", prefix);
    vsnprintf(msg + n, sizeof msg - n, fmt, ap);
    bench_skip_with_error(st, msg);
}

void bench_fail(BenchState* st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    skip_v(st, "failed", fmt, ap);
    va_end(ap);
}

void bench_unsupported(BenchState* st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    skip_v(st, "unsupported", fmt, ap);
    va_end(ap);
}

int main(int argc, char** argv) {
    const char* full = getenv("FULL");
    bench_full = full && *full && strcmp(full, "0") != 0;
    bench_register_roofline();
    bench_register_convert();
    bench_register_gemm();
    bench_register_optim();
    bench_register_train();
    return bench_main(argc, argv);
}

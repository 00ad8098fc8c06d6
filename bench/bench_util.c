// bench_util.c — the helpers every benchmark file uses (bench.h): the FULL flag, a monotonic
// clock, formatted registration and the "failed: ..." / "unsupported: ..." reports. Kept out of
// bench_main.c so that the benchmark files depend on it and main depends on them, never both
// ways. Not here: any benchmark.
#include <stdarg.h>
#include <stdio.h>
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

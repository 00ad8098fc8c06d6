// gbench_shim.h — a C API over Google Benchmark (C++), so that every benchmark of trainbench
// is written in C. The implementation, gbench_shim.cc, is the only C++ file of the project.
// Every benchmark is timed in wall-clock time (UseRealTime: the kernels run on OpenMP
// threads, so the main thread's CPU time would be wrong).
// Not here: the benchmarks themselves (bench_*.c), result folders and reports.
#ifndef TRAINBENCH_GBENCH_SHIM_H
#define TRAINBENCH_GBENCH_SHIM_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct BenchState BenchState;  // a benchmark::State
typedef void (*BenchFn)(BenchState* st, void* arg);

// Counter flags (benchmark::Counter::Flags): BENCH_RATE divides the value by the measured
// (real) time of the run; BENCH_AVG_ITERS divides it by the number of iterations.
enum { BENCH_PLAIN = 0, BENCH_RATE = 1, BENCH_AVG_ITERS = 2 };

// Registers `fn(st, arg)` under `name` (copied); benchmarks run in registration order.
void bench_register(const char* name, BenchFn fn, void* arg);
// The timing loop: `while (bench_keep_running(st)) { kernel(); }`.
bool bench_keep_running(BenchState* st);
int64_t bench_iterations(const BenchState* st);  // iterations run so far
void bench_pause(BenchState* st);
void bench_resume(BenchState* st);
// Sets (replaces) a user counter; `flags` is a BENCH_* combination.
void bench_counter(BenchState* st, const char* name, double value, int flags);
// Reports the run as an error (JSON "error_occurred": true, "error_message": msg) and not
// timed; call it before the timing loop and return. Messages start "failed: " or
// "unsupported: ".
void bench_skip_with_error(BenchState* st, const char* msg);
void bench_set_label(BenchState* st, const char* label);
// Adds "key": "value" to the JSON output's "context" (benchmark::AddCustomContext); call
// before bench_main. Used for the result-file schema version (results.h).
void bench_add_context(const char* key, const char* value);
// Initialize (consumes --benchmark_* flags) + RunSpecifiedBenchmarks; returns the exit code.
// Any argument left over is reported and gives exit code 2.
int bench_main(int argc, char** argv);

#ifdef __cplusplus
}
#endif

#endif

// gbench_shim.cc — the C API of gbench_shim.h over Google Benchmark (tested with 1.7.1).
// The only C++ file of trainbench: registration, the timing loop, counters, errors, main.
#include "gbench_shim.h"

#include <benchmark/benchmark.h>

#include <cstdio>

struct BenchState {
    benchmark::State* s;
};

extern "C" {

void bench_register(const char* name, BenchFn fn, void* arg) {
    benchmark::RegisterBenchmark(name, [fn, arg](benchmark::State& s) {
        BenchState st{&s};
        fn(&st, arg);
    })->UseRealTime()->Unit(benchmark::kMillisecond);
}

bool bench_keep_running(BenchState* st) { return st->s->KeepRunning(); }
int64_t bench_iterations(const BenchState* st) { return (int64_t)st->s->iterations(); }
void bench_pause(BenchState* st) { st->s->PauseTiming(); }
void bench_resume(BenchState* st) { st->s->ResumeTiming(); }

void bench_counter(BenchState* st, const char* name, double value, int flags) {
    int f = benchmark::Counter::kDefaults;
    if (flags & BENCH_RATE) f |= benchmark::Counter::kIsRate;
    if (flags & BENCH_AVG_ITERS) f |= benchmark::Counter::kAvgIterations;
    st->s->counters[name] = benchmark::Counter(value, static_cast<benchmark::Counter::Flags>(f));
}

void bench_skip_with_error(BenchState* st, const char* msg) { st->s->SkipWithError(msg); }
void bench_set_label(BenchState* st, const char* label) { st->s->SetLabel(label); }

void bench_add_context(const char* key, const char* value) { benchmark::AddCustomContext(key, value); }

int bench_main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (argc > 1) {
        for (int i = 1; i < argc; i++) std::fprintf(stderr, "trainbench-bench: unknown argument '%s'\n", argv[i]);
        std::fprintf(stderr, "trainbench-bench: --help lists the --benchmark_* flags\n");
        return 2;
    }
    const size_t ran = benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    if (ran == 0) {  // Google Benchmark itself exits 0 here, even for a filter it could not compile
        std::fprintf(stderr,
                     "trainbench-bench: no benchmark ran: --benchmark_filter matches none, or is not a valid POSIX "
                     "extended regular expression (e.g. '\\-' is invalid; write '-'); --benchmark_list_tests=true "
                     "lists the names\n");
        return 2;
    }
    return 0;
}

}  // extern "C"

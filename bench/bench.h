// bench.h — what the benchmark files (bench_*.c) share: registration entry points, the
// roofline values measured in this process, and small helpers. Benchmark ids follow DESIGN.md:
//   roofline/<probe>, convert/<dtype>/<n>, gemm/<backend>/<dtype>/<ta><tb>/<M>x<N>x<K>,
//   optim/<name>/<n>, comm/reduce/<bytes> (under mpirun only).
// Every benchmark checks its result once (first run) before it is timed; a failing check is
// reported with bench_skip_with_error("failed: ...") and an unsupported combination with
// "unsupported: <reason>", never timed and never silently replaced by another path.
// Not here: the Google Benchmark C++ (gbench_shim.cc), result folders and reports.
#ifndef TRAINBENCH_BENCH_H
#define TRAINBENCH_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "gbench_shim.h"

// Set from the environment by bench_main.c (defined in bench_util.c): FULL=1 registers the large matrix (1e8 params,
// more GEMM shapes).
extern bool bench_full;

// ---- roofline probes (bench_roofline.c) ----
typedef enum {
    ROOF_FMA_F32 = 0,  // peak fp32 FMA rate, FLOP/s (2 flops per FMA lane), all OpenMP threads
    ROOF_DOT_BF16,     // peak bf16 dot-product rate (vdpbf16ps), FLOP/s; 0 without avx512_bf16
    ROOF_TRIAD,        // STREAM triad bandwidth, bytes/s (3 x 4 bytes per element moved)
    ROOF_COUNT
} Roofline;
// The best value measured so far in this process; if its benchmark has not run yet (e.g.
// filtered out with --benchmark_filter), a short probe measures it first. 0 = unsupported.
double roofline_get(Roofline r);
const char* roofline_name(Roofline r);  // "fma_f32", "dot_bf16", "triad"
// The triad bandwidth now, bytes/s: `runs` triad passes back to back (arrays allocated at the
// first call and kept), their total bytes over their total time, the statistic bm_triad reports
// for a repetition. For ratios against a measurement taken right beside it (bench_optim.c's
// frac_triad_adj): on a shared machine both then see the same neighbours.
double roofline_triad_now(int runs);
void bench_register_roofline(void);

void bench_register_convert(void);
void bench_register_gemm(void);
void bench_register_optim(void);
void bench_register_train(void);
// comm/reduce/<bytes> (bench_comm.c), only under mpirun -np R >= 2: rank 0 registers and
// times, the other ranks call bench_comm_serve until rank 0's bench_comm_stop.
struct Ddp;
void bench_register_comm(struct Ddp* d);
void bench_comm_serve(struct Ddp* d);
void bench_comm_stop(void);

// ---- helpers (bench_util.c) ----
// Seconds from a monotonic clock.
double bench_now(void);
// Registers fn under a printf-formatted name.
void bench_registerf(BenchFn fn, void* arg, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
// "failed: <msg>" / "unsupported: <msg>" error reports (formatted).
void bench_fail(BenchState* st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void bench_unsupported(BenchState* st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

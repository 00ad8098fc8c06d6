// bench_roofline.c — roofline probes measured in the same process as the kernels:
//   roofline/fma_f32   peak fp32 FMA throughput: a register-resident loop of independent
//                      FMA chains (AVX-512, else AVX2+FMA), on every OpenMP thread; GFLOP/s
//                      counting 2 flops per lane per FMA.
//   roofline/dot_bf16  the same with vdpbf16ps (avx512_bf16: 32 bf16 products summed into 16
//                      fp32 lanes = 64 flops per instruction); "unsupported: no avx512_bf16"
//                      on a CPU without it.
//   roofline/triad     STREAM triad a[i] = b[i] + s*c[i] over 3 arrays of 2^25 floats
//                      (128 MiB each, far beyond any cache); GB/s counting 12 bytes per
//                      element (STREAM's convention: write-allocate traffic not counted).
// Each keeps the best rate seen in this process (roofline_get), which the other benchmarks
// divide by for their "frac_*" counters. SIMD code is chosen at run time (cpu.h); the build
// has no -march flags.
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench.h"
#include "core/common.h"
#include "core/cpu.h"

static double best[ROOF_COUNT];

static const char* const ROOF_NAMES[ROOF_COUNT] = {"fma_f32", "dot_bf16", "triad"};
const char* roofline_name(Roofline r) { return ROOF_NAMES[r]; }

// ---- compute probes: `iters` loop trips per thread; returns flops done by one thread ----
// Independent accumulators: > latency (4) x FMA pipes (2) with room to spare. The loops over
// them are fully unrolled so the array lives in registers (checked in the disassembly).
#define CHAINS 16
#define PROBE_ITERS 200000

__attribute__((target("avx512f"))) static double fma_avx512(long iters, float* sink) {
    __m512 acc[CHAINS];
#pragma GCC unroll 16
    for (int j = 0; j < CHAINS; j++) acc[j] = _mm512_set1_ps((float)j);
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);  // acc -> b/(1-a): bounded
    for (long i = 0; i < iters; i++)
    #pragma GCC unroll 16
    for (int j = 0; j < CHAINS; j++) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    __m512 s = acc[0];
#pragma GCC unroll 16
    for (int j = 1; j < CHAINS; j++) s = _mm512_add_ps(s, acc[j]);
    *sink += _mm512_reduce_add_ps(s);
    return (double)iters * CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_avx2(long iters, float* sink) {
    __m256 acc[CHAINS];
#pragma GCC unroll 16
    for (int j = 0; j < CHAINS; j++) acc[j] = _mm256_set1_ps((float)j);
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    for (long i = 0; i < iters; i++)
    #pragma GCC unroll 16
    for (int j = 0; j < CHAINS; j++) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
    __m256 s = acc[0];
#pragma GCC unroll 16
    for (int j = 1; j < CHAINS; j++) s = _mm256_add_ps(s, acc[j]);
    float v[8];
    _mm256_storeu_ps(v, s);
    for (int j = 0; j < 8; j++) *sink += v[j];
    return (double)iters * CHAINS * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static double dot_bf16(long iters, float* sink) {
    __m512 acc[CHAINS];
#pragma GCC unroll 16
    for (int j = 0; j < CHAINS; j++) acc[j] = _mm512_set1_ps((float)j);  // distinct: no CSE
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-10f), _mm512_set1_ps(0x1p-11f));
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-12f), _mm512_set1_ps(0x1p-9f));
    for (long i = 0; i < iters; i++)
    #pragma GCC unroll 16
    for (int j = 0; j < CHAINS; j++) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
    __m512 s = acc[0];
#pragma GCC unroll 16
    for (int j = 1; j < CHAINS; j++) s = _mm512_add_ps(s, acc[j]);
    *sink += _mm512_reduce_add_ps(s);
    return (double)iters * CHAINS * 32 * 2;
}

typedef double (*ComputeProbe)(long iters, float* sink);

static ComputeProbe fma_probe(void) {
    const CpuFeatures* f = cpu_features();
    if (f->avx512f) return fma_avx512;
    if (f->avx2 && f->fma) return fma_avx2;
    return NULL;
}

static ComputeProbe dot_probe(void) {
    const CpuFeatures* f = cpu_features();
    return f->avx512f && f->avx512_bf16 ? dot_bf16 : NULL;
}

static volatile float g_sink;

// Runs the probe on every OpenMP thread once; returns total flops.
static double compute_once(ComputeProbe p) {
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
        float sink = 0;
        total += p(PROBE_ITERS, &sink);
        g_sink = sink;
    }
    return total;
}

// ---- triad ----
#define TRIAD_N ((size_t)1 << 25)
typedef struct {
    float *a, *b, *c;
} Triad;

// The process's triad arrays (3 x 128 MiB), allocated and first-touched at the first use and
// kept: the quick probe, the roofline/triad benchmark and roofline_triad_now share them, so at
// most one set is ever resident (each had its own before: 768 MiB at once) and no probe times
// page faults. Only the triad writes a, and b and c never change.
static Triad* process_triad(void) {
    static Triad t;
    if (!t.a) {
        t = (Triad){xaligned_alloc(TRIAD_N * sizeof(float)), xaligned_alloc(TRIAD_N * sizeof(float)),
                    xaligned_alloc(TRIAD_N * sizeof(float))};
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < TRIAD_N; i++) t.a[i] = 0.0f, t.b[i] = 1.0f, t.c[i] = 2.0f;  // first touch
    }
    return &t;
}

static double triad_once(Triad* t) {
    float* restrict a = t->a;
    const float* restrict b = t->b;
    const float* restrict c = t->c;
    const float s = 3.0f;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < TRIAD_N; i++) a[i] = b[i] + s * c[i];
    return 3.0 * sizeof(float) * (double)TRIAD_N;
}

// ---- one measurement outside Google Benchmark, for roofline_get: the best single run over
// QUICK_PROBE_S seconds (the machine may be shared; the best run is the closest to the peak) ----
#define QUICK_PROBE_S 0.2
static double quick_probe(Roofline r) {
    double rate = 0;
    if (r == ROOF_TRIAD) {
        Triad* t = process_triad();
        const double end = bench_now() + QUICK_PROBE_S;
        for (int i = 0; i < 5 || bench_now() < end; i++) {
            double t0 = bench_now(), work = triad_once(t), dt = bench_now() - t0;
            if (work / dt > rate) rate = work / dt;
        }
        return rate;
    }
    ComputeProbe p = r == ROOF_FMA_F32 ? fma_probe() : dot_probe();
    if (!p) return 0;
    const double end = bench_now() + QUICK_PROBE_S;
    for (int i = 0; i < 5 || bench_now() < end; i++) {
        double t0 = bench_now(), work = compute_once(p), dt = bench_now() - t0;
        if (work / dt > rate) rate = work / dt;
    }
    return rate;
}

double roofline_get(Roofline r) {
    if (best[r] == 0) best[r] = quick_probe(r);
    return best[r];
}

double roofline_triad_now(int runs) {
    Triad* t = process_triad();
    double work = 0, t0 = bench_now();
    for (int i = 0; i < runs; i++) work += triad_once(t);
    return work / (bench_now() - t0);
}

static void note_rate(Roofline r, double rate) {
    if (rate > best[r]) best[r] = rate;
}

// ---- the benchmarks ----
static void bm_compute(BenchState* st, void* arg) {
    const Roofline r = (Roofline)(intptr_t)arg;
    ComputeProbe p = r == ROOF_FMA_F32 ? fma_probe() : dot_probe();
    if (!p) {
        bench_unsupported(st, r == ROOF_FMA_F32 ? "no avx512f or avx2+fma" : "no avx512_bf16");
        return;
    }
    compute_once(p);  // warm up (threads started, clocks up)
    double work = 0, t0 = bench_now();
    while (bench_keep_running(st)) work += compute_once(p);
    note_rate(r, work / (bench_now() - t0));
    bench_counter(st, "GFLOP/s", work * 1e-9, BENCH_RATE);
    bench_counter(st, "threads", omp_get_max_threads(), BENCH_PLAIN);
}

static void bm_triad(BenchState* st, void* arg) {
    Triad* t = process_triad();
    triad_once(t);
    for (size_t i = 0; i < TRIAD_N; i += 4099)
        if (t->a[i] != 7.0f) {
            bench_fail(st, "triad a[%zu] = %g, expected 7", i, (double)t->a[i]);
            return;
        }
    double work = 0, t0 = bench_now();
    while (bench_keep_running(st)) work += triad_once(t);
    note_rate(ROOF_TRIAD, work / (bench_now() - t0));
    bench_counter(st, "GB/s", work * 1e-9, BENCH_RATE);
    bench_counter(st, "threads", omp_get_max_threads(), BENCH_PLAIN);
}

void bench_register_roofline(void) {
    bench_register("roofline/fma_f32", bm_compute, (void*)(intptr_t)ROOF_FMA_F32);
    bench_register("roofline/dot_bf16", bm_compute, (void*)(intptr_t)ROOF_DOT_BF16);
    bench_register("roofline/triad", bm_triad, NULL);
}

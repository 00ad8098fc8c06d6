// torch_reduce.c — PyTorch's CPU float32 reduction orders (see torch_reduce.h for what each
// function mirrors and the assumptions: single-threaded torch, 8-lane kernels).
// Every addition below is one float32 rounding RN(a + b) in the order torch's kernel does it;
// "lanes" are the 8 lanes of a Vectorized<float> and are independent of each other, so the
// compiler may vectorize them any width without changing a bit.
#include "optim/torch_reduce.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/common.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/stream_prefetch.h"

#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

enum {
    LANES = 8,    // Vectorized<float>::size() in the kernels that ran (AVX2 width)
    NROWS = 4,    // multi_row_sum's nrows / row_sum's ilp_factor
    LEVELS = 4,   // multi_row_sum's num_levels
};

// Element idx of X as a float: fp32 (kind 0), or a bf16 (1) or fp16 (2) value widened exactly,
// which is what torch's sums of a reduced-precision tensor accumulate (in float, in the same
// order). kind is a constant at every call, so each kind compiles to its own plain loop.
static inline __attribute__((always_inline)) float ld(const void* X, size_t idx, const int kind) {
    if (kind == 0) return ((const float*)X)[idx];
    const uint16_t h = ((const uint16_t*)X)[idx];
    return kind == 1 ? bf16_widen_f32(h) : fp16_widen_f32(h);
}


// SumKernel.cpp multi_row_sum: sums `size` rows of NROWS items at once, item k of row i being
// the L floats at base + i*row_stride + k*col_stride (L = 1: scalars, L = LANES: vectors).
// A 4-level cascade: level 0 takes 2^level_power rows, then is added into level 1 (and so on
// up while the row counter is a multiple of the level's span), which bounds the error growth.
// out (NROWS * L): item k's sums at out[k*L ..].
static inline __attribute__((always_inline)) void multi_row_sum_k(float* out, const void* X, size_t base,
                                                                   size_t row_stride, size_t col_stride, size_t size,
                                                                   const int L, const int kind) {
    const int lp0 = torch_ceil_log2(size) / LEVELS;
    const int level_power = lp0 > 4 ? lp0 : 4;
    const size_t level_step = (size_t)1 << level_power, level_mask = level_step - 1;
    float acc[LEVELS][NROWS][LANES];
    memset(acc, 0, sizeof acc);
    size_t i = 0;
    while (i + level_step <= size) {
        for (size_t s = 0; s < level_step; s++, i++) {
            const size_t row = base + i * row_stride;
            for (int k = 0; k < NROWS; k++)
                for (int l = 0; l < L; l++)
                    acc[0][k][l] = acc[0][k][l] + ld(X, row + (size_t)k * col_stride + (size_t)l, kind);
        }
        for (int j = 1; j < LEVELS; j++) {
            for (int k = 0; k < NROWS; k++)
                for (int l = 0; l < L; l++) {
                    acc[j][k][l] = acc[j][k][l] + acc[j - 1][k][l];
                    acc[j - 1][k][l] = 0;
                }
            if ((i & (level_mask << (j * level_power))) != 0) break;
        }
    }
    for (; i < size; i++) {
        const size_t row = base + i * row_stride;
        for (int k = 0; k < NROWS; k++)
            for (int l = 0; l < L; l++)
                acc[0][k][l] = acc[0][k][l] + ld(X, row + (size_t)k * col_stride + (size_t)l, kind);
    }
    for (int j = 1; j < LEVELS; j++)
        for (int k = 0; k < NROWS; k++)
            for (int l = 0; l < L; l++) acc[0][k][l] = acc[0][k][l] + acc[j][k][l];
    for (int k = 0; k < NROWS; k++)
        for (int l = 0; l < L; l++) out[k * L + l] = acc[0][k][l];
}
static inline __attribute__((always_inline)) void multi_row_sum(float* out, const float* base, size_t row_stride,
                                                                 size_t col_stride, size_t size, const int L) {
    multi_row_sum_k(out, base, 0, row_stride, col_stride, size, L, 0);
}

// SumKernel.cpp row_sum (ilp_factor 4): the `size` items (L floats each, item i at
// base + i*stride) seen as (size/4, 4): four interleaved partial sums by multi_row_sum, the
// leftover items added to the first, then the other three added to it in order. out (L)
static inline __attribute__((always_inline)) void row_sum_k(float* out, const void* X, size_t base, size_t stride,
                                                             size_t size, const int L, const int kind) {
    const size_t size_ilp = size / NROWS;
    float ps[NROWS * LANES];
    multi_row_sum_k(ps, X, base, NROWS * stride, stride, size_ilp, L, kind);
    for (size_t i = size_ilp * NROWS; i < size; i++)
        for (int l = 0; l < L; l++) ps[l] = ps[l] + ld(X, base + i * stride + (size_t)l, kind);
    for (int k = 1; k < NROWS; k++)
        for (int l = 0; l < L; l++) ps[l] = ps[l] + ps[k * L + l];
    for (int l = 0; l < L; l++) out[l] = ps[l];
}
static inline __attribute__((always_inline)) void row_sum(float* out, const float* base, size_t stride, size_t size,
                                                           const int L) {
    row_sum_k(out, base, 0, stride, size, L, 0);
}

// SumKernel.cpp vectorized_inner_sum for one row (n >= 8): row_sum over the n/8 full vectors,
// then a scalar that takes the n%8 tail elements FIRST and the 8 lanes after, in lane order.
// scalar_inner_sum (n < 8): row_sum over scalars. torch stores 0 + result (no change: a sum
// that starts at +0 is never -0).
static inline __attribute__((always_inline)) float sum_body(const float* x, size_t n) {  // x (n)
    if (n >= LANES) {
        const size_t nvec = n / LANES;
        float v[LANES];
        row_sum(v, x, LANES, nvec, LANES);
        float fin = 0;
        for (size_t k = nvec * LANES; k < n; k++) fin = fin + x[k];
        for (int l = 0; l < LANES; l++) fin = fin + v[l];
        return fin;
    }
    float r;
    row_sum(&r, x, 1, n, 1);
    return r;
}

// SumKernel.cpp vectorized_outer_sum (C >= 8): columns in blocks of 32 (multi_row_sum over the
// R rows, 4 vectors at once), then blocks of 8 (row_sum of vectors), then single columns
// (row_sum of scalars). scalar_outer_sum (C < 8): blocks of 4 columns (multi_row_sum of
// scalars), then single columns. Only columns [j0, j1) of the output: the caller splits the
// leading 32-column blocks over threads (the split does not change any column's order).
static inline __attribute__((always_inline)) void sum_dim0_body_k(float* out, const void* X, size_t R, size_t C,
                                                                  size_t j0, size_t j1, const int kind) {
    size_t j = j0;
    if (C >= LANES) {
        for (; j + NROWS * LANES <= j1; j += NROWS * LANES) multi_row_sum_k(out + j, X, j, C, LANES, R, LANES, kind);
        for (; j + LANES <= j1; j += LANES) row_sum_k(out + j, X, j, C, R, LANES, kind);
    } else {
        for (; j + NROWS <= j1; j += NROWS) multi_row_sum_k(out + j, X, j, C, 1, R, 1, kind);
    }
    for (; j < j1; j++) row_sum_k(out + j, X, j, C, R, 1, kind);
}
static inline __attribute__((always_inline)) void sum_dim0_body(float* out, const float* X, size_t R, size_t C,
                                                                size_t j0, size_t j1) {
    sum_dim0_body_k(out, X, R, C, j0, j1, 0);
}

// ReduceOpsKernel.cpp norm_kernel_tensor_iterator_impl, p == 2, reduce over the last dim:
//   for full vectors: acc_vec += data_vec * data_vec      (product rounded, then added: no FMA)
//   acc_vec.store(buffer); buffer[0] += buffer[j] for j = 1..7
//   for the rest: buffer[0] += x*x — compiled (GCC) as a 4-wide vectorized epilogue whose
//   squares are rounded and added in order when >= 4 remain, then a scalar loop contracted to
//   an FMA for the last 0..3 (measured on the goldens' machine; OPTIM_SEMANTICS.md 0.4(a)).
static inline __attribute__((always_inline)) void sumsq_feed_body(float* restrict acc, const float* restrict x,
                                                                   size_t nv) {  // acc (8), x (nv), nv % 8 == 0
    for (size_t d = 0; d < nv; d += LANES) {
        stream_prefetch_span(x + d, LANES * sizeof(float));
        for (int l = 0; l < LANES; l++) {
            const float sq = x[d + (size_t)l] * x[d + (size_t)l];
            acc[l] = acc[l] + sq;
        }
    }
}

static inline float sumsq_finish_body(const float* acc, const float* x, size_t n) {  // acc (8), x (n), n < 8
    float s = acc[0];
    for (int l = 1; l < LANES; l++) s = s + acc[l];
    size_t i = 0;
    if (n - i >= 4) {
        for (int k = 0; k < 4; k++) {
            const float sq = x[i + (size_t)k] * x[i + (size_t)k];
            s = s + sq;
        }
        i += 4;
    }
    for (; i < n; i++) s = fmaf(x[i], x[i], s);
    return s;
}

static inline __attribute__((always_inline)) float sumsq_body(const float* x, size_t n) {  // x (n)
    float acc[LANES] = {0};
    const size_t nv = n - n % LANES;
    sumsq_feed_body(acc, x, nv);
    return sumsq_finish_body(acc, x + nv, n - nv);
}

// The cascade's levels above 0 for columns [j0, j1) (see torch_sum_dim0_combine in the
// header): multi_row_sum's loop with each level-0 block's sum read from `P` instead of summed
// here, 1024 columns at a time.
static inline __attribute__((always_inline)) void sum_dim0_combine_body(float* out, const float* P, size_t ld,
                                                                        size_t R, size_t j0, size_t j1) {
    const int lp0 = torch_ceil_log2(R) / LEVELS;
    const int level_power = lp0 > 4 ? lp0 : 4;
    const size_t step = (size_t)1 << level_power, mask = step - 1, K = R / step;
    enum { W = 1024 };  // 4 KiB of each partials row per read: contiguous, prefetched
    for (size_t jc = j0; jc < j1; jc += W) {
        const size_t w = j1 - jc < W ? j1 - jc : W;
        float acc[LEVELS][W];
        memset(acc, 0, sizeof acc);
        for (size_t k = 0; k < K; k++) {
            const float* blk = P + k * ld + jc;
            const size_t i = (k + 1) * step;  // rows summed after this block
#pragma omp simd
            for (size_t c = 0; c < w; c++) acc[1][c] = acc[1][c] + blk[c];  // level 0 -> 1
            if ((i & (mask << level_power)) != 0) continue;
            for (int j = 2; j < LEVELS; j++) {
#pragma omp simd
                for (size_t c = 0; c < w; c++) {
                    acc[j][c] = acc[j][c] + acc[j - 1][c];
                    acc[j - 1][c] = 0;
                }
                if ((i & (mask << (j * level_power))) != 0) break;
            }
        }
        const float* tail = R % step ? P + K * ld + jc : NULL;  // rows after the last full block
#pragma omp simd
        for (size_t c = 0; c < w; c++) {
            float a = tail ? tail[c] : 0.0f;
            for (int j = 1; j < LEVELS; j++) a = a + acc[j][c];
            out[jc + c] = a;
        }
    }
}

// sum_dim0_body's columns after the main ones: blocks of 8 (C >= 8) by row_sum of vectors,
// then single columns by row_sum of scalars; X holds column j0 at X[0] of each row (stride ld).
static inline __attribute__((always_inline)) void sum_dim0_tail_body(float* out, const float* X, size_t ld,
                                                                     size_t R, size_t C, size_t j0) {
    size_t j = j0;
    if (C >= LANES)
        for (; j + LANES <= C; j += LANES) row_sum(out + (j - j0), X + (j - j0), ld, R, LANES);
    for (; j < C; j++) row_sum(out + (j - j0), X + (j - j0), ld, R, 1);
}

// binary_kernel_reduce with NormTwoOps (vector_norm over a non-last dim): per output element,
// the reduced elements in order, acc = acc + RN(x*x), from 0. Columns are independent, so this
// loops rows outside and columns [j0, j1) inside (the same order per column, vectorizable).
static inline __attribute__((always_inline)) void sumsq_dim0_body(float* out, const float* X, size_t R, size_t C,
                                                                  size_t j0, size_t j1) {
    for (size_t c = j0; c < j1; c++) out[c] = 0;
    for (size_t r = 0; r < R; r++) {
        const float* row = X + r * C;
#pragma omp simd
        for (size_t c = j0; c < j1; c++) {
            const float sq = row[c] * row[c];
            out[c] = out[c] + sq;  // per column: not a reduction across c
        }
    }
}

// Each body is compiled twice, portable and AVX2+FMA; the lanes are independent and every
// operation is one rounding, so both builds (and any vector width) give the same bits.
static float sum_portable(const float* x, size_t n) { return sum_body(x, n); }
static float sumsq_portable(const float* x, size_t n) { return sumsq_body(x, n); }
static void sum_dim0_portable(float* out, const float* X, size_t R, size_t C, size_t j0, size_t j1) {
    sum_dim0_body(out, X, R, C, j0, j1);
}
static void sum_dim0_low_portable(float* out, const void* X, int kind, size_t R, size_t C, size_t j0, size_t j1) {
    if (kind == 1) sum_dim0_body_k(out, X, R, C, j0, j1, 1);
    else sum_dim0_body_k(out, X, R, C, j0, j1, 2);
}
static void sumsq_feed_portable(float* acc, const float* x, size_t n) { sumsq_feed_body(acc, x, n); }
static void combine_portable(float* out, const float* P, size_t ld, size_t R, size_t j0, size_t j1) {
    sum_dim0_combine_body(out, P, ld, R, j0, j1);
}
static void tail_portable(float* out, const float* X, size_t ld, size_t R, size_t C, size_t j0) {
    sum_dim0_tail_body(out, X, ld, R, C, j0);
}
static void sumsq_dim0_portable(float* out, const float* X, size_t R, size_t C, size_t j0, size_t j1) {
    sumsq_dim0_body(out, X, R, C, j0, j1);
}
#if defined(__x86_64__)
#define TR_AVX2 __attribute__((target("avx2,fma")))
TR_AVX2 static float sum_avx2(const float* x, size_t n) { return sum_body(x, n); }
TR_AVX2 static float sumsq_avx2(const float* x, size_t n) { return sumsq_body(x, n); }
TR_AVX2 static void sum_dim0_avx2(float* out, const float* X, size_t R, size_t C, size_t j0, size_t j1) {
    sum_dim0_body(out, X, R, C, j0, j1);
}
TR_AVX2 static void sum_dim0_low_avx2(float* out, const void* X, int kind, size_t R, size_t C, size_t j0, size_t j1) {
    if (kind == 1) sum_dim0_body_k(out, X, R, C, j0, j1, 1);
    else sum_dim0_body_k(out, X, R, C, j0, j1, 2);
}
TR_AVX2 static void sumsq_feed_avx2(float* acc, const float* x, size_t n) { sumsq_feed_body(acc, x, n); }
TR_AVX2 static void combine_avx2(float* out, const float* P, size_t ld, size_t R, size_t j0, size_t j1) {
    sum_dim0_combine_body(out, P, ld, R, j0, j1);
}
TR_AVX2 static void tail_avx2(float* out, const float* X, size_t ld, size_t R, size_t C, size_t j0) {
    sum_dim0_tail_body(out, X, ld, R, C, j0);
}
TR_AVX2 static void sumsq_dim0_avx2(float* out, const float* X, size_t R, size_t C, size_t j0, size_t j1) {
    sumsq_dim0_body(out, X, R, C, j0, j1);
}
static bool use_avx2(void) { return cpu_features()->avx2 && cpu_features()->fma; }  // thread-safe, cached
#define TR_PICK(name) (use_avx2() ? name##_avx2 : name##_portable)
#else
#define TR_PICK(name) name##_portable
#endif

float torch_sum_f32(const float* x, size_t n) { return TR_PICK(sum)(x, n); }

float torch_sumsq_f32(const float* x, size_t n) { return TR_PICK(sumsq)(x, n); }

// Columns are split over OpenMP threads in whole 32-column blocks (256-column chunks for the
// norm), each column still summed over all rows in torch's order: thread-count independent.
void torch_sum_dim0_f32(float* out, const float* X, size_t R, size_t C) {  // X (R, C), out (C)
    if (C == 1) {  // TensorIterator coalesces (R, 1) into one contiguous row: an inner sum
        out[0] = torch_sum_f32(X, R);
        return;
    }
    void (*k)(float*, const float*, size_t, size_t, size_t, size_t) = TR_PICK(sum_dim0);
    const size_t block = NROWS * LANES, n_blocks = C >= LANES ? C / block : 0;
#pragma omp parallel for schedule(static) if (n_blocks > 1 && R * C >= 65536)
    for (size_t b = 0; b < n_blocks; b++) k(out, X, R, C, b * block, (b + 1) * block);
    k(out, X, R, C, n_blocks * block, C);
}

void torch_sum_dim0_low(float* out, const void* X, DType dt, size_t R, size_t C) {  // X (R, C), out (C)
    CHECK(dt == DTYPE_BF16 || dt == DTYPE_F16, "torch_sum_dim0_low of %s", dtype_name(dt));
    const int kind = dt == DTYPE_BF16 ? 1 : 2;
    if (C == 1) {  // (R, 1) coalesces into one contiguous row: the inner sum, on the widened values
        float* x = xmalloc(R * sizeof(float));
        dtype_to_f32_row(x, dt, X, R);
        out[0] = torch_sum_f32(x, R);
        free(x);
        return;
    }
    void (*k)(float*, const void*, int, size_t, size_t, size_t, size_t) = TR_PICK(sum_dim0_low);
    const size_t block = NROWS * LANES, n_blocks = C >= LANES ? C / block : 0;
#pragma omp parallel for schedule(static) if (n_blocks > 1 && R * C >= 65536)
    for (size_t b = 0; b < n_blocks; b++) k(out, X, kind, R, C, b * block, (b + 1) * block);
    k(out, X, kind, R, C, n_blocks * block, C);
}

void torch_sumsq_dim0_f32(float* out, const float* X, size_t R, size_t C) {  // X (R, C), out (C)
    if (C == 1) {  // (R, 1) coalesces into one contiguous row: the last-dim kernel runs
        out[0] = torch_sumsq_f32(X, R);
        return;
    }
    void (*k)(float*, const float*, size_t, size_t, size_t, size_t) = TR_PICK(sumsq_dim0);
    const size_t chunk = 256, n_chunks = (C + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n_chunks > 1 && R * C >= 65536)
    for (size_t b = 0; b < n_chunks; b++) k(out, X, R, C, b * chunk, (b + 1) * chunk < C ? (b + 1) * chunk : C);
}

// ---- pieces ----
size_t torch_sum_dim0_main_cols(size_t C) {
    if (C == 1) return 0;  // coalesced into a contiguous inner sum
    return C >= LANES ? C / (NROWS * LANES) * (NROWS * LANES) : C / NROWS * NROWS;
}

size_t torch_sum_dim0_block_rows(size_t R) {
    const int lp0 = torch_ceil_log2(R) / LEVELS;
    return (size_t)1 << (lp0 > 4 ? lp0 : 4);
}

void torch_sum_dim0_combine(float* out, const float* partials, size_t ld, size_t R, size_t j0, size_t j1) {
    TR_PICK(combine)(out, partials, ld, R, j0, j1);
}

void torch_sum_dim0_tail_f32(float* out, const float* X, size_t ld, size_t R, size_t C, size_t j0) {
    if (C == 1) {
        CHECK(ld == 1, "a single column is summed as one contiguous row");
        out[0] = torch_sum_f32(X, R);
        return;
    }
    TR_PICK(tail)(out, X, ld, R, C, j0);
}

void torch_sumsq_feed(TorchSumsq* s, const float* x, size_t n) { TR_PICK(sumsq_feed)(s->lane, x, n); }

float torch_sumsq_finish(const TorchSumsq* s, const float* rest, size_t n_rest) {
    return sumsq_finish_body(s->lane, rest, n_rest);
}

// Thread 0 produces the sequence piece by piece into a buffer that stays in L1 and feeds it
// into its lanes; thread 1 (thread 0 after it, when alone) feeds the side. One fork, one join:
// no synchronisation per piece, which a machine shared with other processes punishes.
void torch_sumsq_produced_f32(size_t n, TorchProduce produce, const void* ctx, const float* side, float* sumsq,
                              float* side_sumsq) {
    enum { PIECE = 1024 };
    void (*feed)(float*, const float*, size_t) = TR_PICK(sumsq_feed);
#pragma omp parallel num_threads(side && omp_get_max_threads() > 1 ? 2 : 1) if (side && n >= 65536)
    {
        const int tid = omp_get_thread_num(), side_tid = omp_get_num_threads() > 1 ? 1 : 0;
        if (tid == 0) {
            float buf[PIECE];
            TorchSumsq acc;
            torch_sumsq_init(&acc);
            size_t e = 0;
            for (; e + PIECE <= n; e += PIECE) {
                produce(ctx, buf, e, e + PIECE);
                feed(acc.lane, buf, PIECE);
            }
            const size_t r = n - e, r8 = r - r % LANES;
            produce(ctx, buf, e, n);
            feed(acc.lane, buf, r8);
            *sumsq = torch_sumsq_finish(&acc, buf + r8, r - r8);
        }
        if (side && tid == side_tid) *side_sumsq = torch_sumsq_f32(side, n);
    }
}

// Pieces of 4096 elements go through a ring of 32 slots: piece j may be written into slot
// j % 32 once piece j - 32 has been fed. Thread 0 feeds the pieces in order; the other threads
// (helpers) claim pieces from RING_LEAD ahead of thread 0's feeding position and produce them
// into the ring, so that thread 0 finds the nearer pieces unclaimed and produces those itself
// through produce_feed, straight into its lanes (no ring slot, no second sweep: the chain's
// latency hides under the producing), and finds the helpers' pieces ready when it gets there.
// A helper's piece is fed from the ring while its slot is still in cache. Whenever piece k is
// held by a helper that has not finished it, thread 0 produces an unclaimed piece further on
// into the ring meanwhile. Claims are per piece (an atomic flag each). No barrier per piece: a
// thread that the operating system takes away delays at most the one piece it holds.
// Measured (adafactor_torch pass 2, 2500 x 4000, 2 threads, A/B in one process): with every
// piece going through the ring (thread 0 feeding, helpers claiming in order) thread 0 spent
// 1.4 ms of its 3.8 ms feeding; now 60% of the pieces are thread 0's, fused, and the step
// takes 0.955-0.968 of the time.
enum { RING_PIECE = 4096, RING_SLOTS = 32, RING_LEAD = 4 };

static void ring_relax(unsigned* spins) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (++*spins % 1024 == 0) sched_yield();  // let a descheduled producer run
}

float torch_sumsq_produced_parallel_f32(size_t n, TorchProduce produce, TorchProduceFeed produce_feed,
                                        const void* ctx) {
    const size_t n_pieces = (n + RING_PIECE - 1) / RING_PIECE;
    float sumsq = 0;
    if (n < 65536 || omp_get_max_threads() < 2 || omp_in_parallel()) {
        torch_sumsq_produced_f32(n, produce, ctx, NULL, &sumsq, NULL);
        return sumsq;
    }
    float* ring = xaligned_alloc((size_t)RING_SLOTS * RING_PIECE * sizeof(float));
    _Atomic size_t ready[RING_SLOTS];  // 1 + the piece index a slot holds once it is produced
    for (int i = 0; i < RING_SLOTS; i++) atomic_init(&ready[i], 0);
    _Atomic unsigned char* owner = xcalloc(n_pieces, sizeof *owner);  // 0: unclaimed
    _Atomic size_t hnext, fed;  // the helpers' next piece to look at; pieces fed so far
    atomic_init(&hnext, 0);
    atomic_init(&fed, 0);
    void (*feed)(float*, const float*, size_t) = TR_PICK(sumsq_feed);
#define RING_PRODUCE(j)                                                                                   \
    do {                                                                                                  \
        const size_t e0_ = (j) * RING_PIECE, e1_ = n - e0_ < RING_PIECE ? n : e0_ + RING_PIECE;           \
        produce(ctx, ring + ((j) % RING_SLOTS) * RING_PIECE, e0_, e1_);                                   \
        atomic_store_explicit(&ready[(j) % RING_SLOTS], (j) + 1, memory_order_release);                   \
    } while (0)
#define RING_CLAIM(j) (atomic_exchange_explicit(&owner[j], 1, memory_order_relaxed) == 0)
#pragma omp parallel
    {
        unsigned spins = 0;
        if (omp_get_thread_num() == 0) {
            TorchSumsq acc;
            torch_sumsq_init(&acc);
            const float* tail = NULL;  // the last piece's n % 8 elements, when it came through the ring
            size_t n_tail = 0;
            for (size_t k = 0; k < n_pieces;) {
                const float* piece = ring + (k % RING_SLOTS) * RING_PIECE;
                const size_t e0 = k * RING_PIECE, len = n - e0 < RING_PIECE ? n - e0 : RING_PIECE;
                const size_t len8 = len - len % LANES;
                if (atomic_load_explicit(&ready[k % RING_SLOTS], memory_order_acquire) == k + 1) {
                    feed(acc.lane, piece, len8);
                    if (k + 1 == n_pieces) tail = piece + len8, n_tail = len - len8;  // slot k stays put
                    atomic_store_explicit(&fed, ++k, memory_order_release);
                } else if (atomic_load_explicit(&owner[k], memory_order_relaxed) == 0 && RING_CLAIM(k)) {
                    if (produce_feed && len8 == len) {  // the next piece to feed: fused (no tail)
                        produce_feed(ctx, acc.lane, e0, e0 + len);
                        atomic_store_explicit(&fed, ++k, memory_order_release);
                    } else {
                        RING_PRODUCE(k);  // fed on the next trip round the loop
                    }
                } else {  // a helper holds piece k: produce an unclaimed one further on meanwhile
                    size_t j = k + 1;
                    while (j < n_pieces && j < k + RING_SLOTS && atomic_load_explicit(&owner[j], memory_order_relaxed))
                        j++;
                    if (j < n_pieces && j < k + RING_SLOTS && RING_CLAIM(j)) RING_PRODUCE(j);
                    else ring_relax(&spins);
                }
            }
            sumsq = torch_sumsq_finish(&acc, tail, n_tail);
        } else {
            for (;;) {
                size_t h = atomic_load_explicit(&hnext, memory_order_relaxed);
                const size_t f = atomic_load_explicit(&fed, memory_order_acquire);
                const size_t j = h > f + RING_LEAD ? h : f + RING_LEAD;
                if (j >= n_pieces) break;  // the rest are thread 0's
                if (j >= f + RING_SLOTS) {  // the ring is full: wait for thread 0
                    ring_relax(&spins);
                    continue;
                }
                if (!atomic_compare_exchange_weak_explicit(&hnext, &h, j + 1, memory_order_relaxed,
                                                           memory_order_relaxed))
                    continue;
                if (RING_CLAIM(j)) RING_PRODUCE(j);
            }
        }
    }
#undef RING_CLAIM
#undef RING_PRODUCE
    free(ring);
    free((void*)owner);
    return sumsq;
}

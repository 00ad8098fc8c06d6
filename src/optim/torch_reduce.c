// torch_reduce.c — PyTorch's CPU float32 reduction orders (see torch_reduce.h for what each
// function mirrors and the assumptions: single-threaded torch, 8-lane kernels).
// Every addition below is one float32 rounding RN(a + b) in the order torch's kernel does it;
// "lanes" are the 8 lanes of a Vectorized<float> and are independent of each other, so the
// compiler may vectorize them any width without changing a bit.
#include "optim/torch_reduce.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/cpu.h"

enum {
    LANES = 8,    // Vectorized<float>::size() in the kernels that ran (AVX2 width)
    NROWS = 4,    // multi_row_sum's nrows / row_sum's ilp_factor
    LEVELS = 4,   // multi_row_sum's num_levels
};

// c10 utils::CeilLog2 as SumKernel.cpp defines it (1 for x <= 2)
static int ceil_log2(size_t x) {
    if (x <= 2) return 1;
    return 64 - __builtin_clzll((unsigned long long)(x - 1));
}

// SumKernel.cpp multi_row_sum: sums `size` rows of NROWS items at once, item k of row i being
// the L floats at base + i*row_stride + k*col_stride (L = 1: scalars, L = LANES: vectors).
// A 4-level cascade: level 0 takes 2^level_power rows, then is added into level 1 (and so on
// up while the row counter is a multiple of the level's span), which bounds the error growth.
// out (NROWS * L): item k's sums at out[k*L ..].
static inline __attribute__((always_inline)) void multi_row_sum(float* out, const float* base, size_t row_stride,
                                                                 size_t col_stride, size_t size, const int L) {
    const int lp0 = ceil_log2(size) / LEVELS;
    const int level_power = lp0 > 4 ? lp0 : 4;
    const size_t level_step = (size_t)1 << level_power, level_mask = level_step - 1;
    float acc[LEVELS][NROWS][LANES];
    memset(acc, 0, sizeof acc);
    size_t i = 0;
    while (i + level_step <= size) {
        for (size_t s = 0; s < level_step; s++, i++) {
            const float* row = base + i * row_stride;
            for (int k = 0; k < NROWS; k++)
                for (int l = 0; l < L; l++) acc[0][k][l] = acc[0][k][l] + row[(size_t)k * col_stride + (size_t)l];
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
        const float* row = base + i * row_stride;
        for (int k = 0; k < NROWS; k++)
            for (int l = 0; l < L; l++) acc[0][k][l] = acc[0][k][l] + row[(size_t)k * col_stride + (size_t)l];
    }
    for (int j = 1; j < LEVELS; j++)
        for (int k = 0; k < NROWS; k++)
            for (int l = 0; l < L; l++) acc[0][k][l] = acc[0][k][l] + acc[j][k][l];
    for (int k = 0; k < NROWS; k++)
        for (int l = 0; l < L; l++) out[k * L + l] = acc[0][k][l];
}

// SumKernel.cpp row_sum (ilp_factor 4): the `size` items (L floats each, item i at
// base + i*stride) seen as (size/4, 4): four interleaved partial sums by multi_row_sum, the
// leftover items added to the first, then the other three added to it in order. out (L)
static inline __attribute__((always_inline)) void row_sum(float* out, const float* base, size_t stride, size_t size,
                                                           const int L) {
    const size_t size_ilp = size / NROWS;
    float ps[NROWS * LANES];
    multi_row_sum(ps, base, NROWS * stride, stride, size_ilp, L);
    for (size_t i = size_ilp * NROWS; i < size; i++)
        for (int l = 0; l < L; l++) ps[l] = ps[l] + base[i * stride + (size_t)l];
    for (int k = 1; k < NROWS; k++)
        for (int l = 0; l < L; l++) ps[l] = ps[l] + ps[k * L + l];
    for (int l = 0; l < L; l++) out[l] = ps[l];
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
static inline __attribute__((always_inline)) void sum_dim0_body(float* out, const float* X, size_t R, size_t C,
                                                                size_t j0, size_t j1) {
    size_t j = j0;
    if (C >= LANES) {
        for (; j + NROWS * LANES <= j1; j += NROWS * LANES) multi_row_sum(out + j, X + j, C, LANES, R, LANES);
        for (; j + LANES <= j1; j += LANES) row_sum(out + j, X + j, C, R, LANES);
    } else {
        for (; j + NROWS <= j1; j += NROWS) multi_row_sum(out + j, X + j, C, 1, R, 1);
    }
    for (; j < j1; j++) row_sum(out + j, X + j, C, R, 1);
}

// ReduceOpsKernel.cpp norm_kernel_tensor_iterator_impl, p == 2, reduce over the last dim:
//   for full vectors: acc_vec += data_vec * data_vec      (product rounded, then added: no FMA)
//   acc_vec.store(buffer); buffer[0] += buffer[j] for j = 1..7
//   for the rest: buffer[0] += x*x — compiled (GCC) as a 4-wide vectorized epilogue whose
//   squares are rounded and added in order when >= 4 remain, then a scalar loop contracted to
//   an FMA for the last 0..3 (measured on the goldens' machine; OPTIM_SEMANTICS.md 0.4(a)).
static inline __attribute__((always_inline)) float sumsq_body(const float* x, size_t n) {  // x (n)
    float acc[LANES] = {0};
    const size_t nv = n - n % LANES;
    for (size_t d = 0; d < nv; d += LANES)
        for (int l = 0; l < LANES; l++) {
            const float sq = x[d + (size_t)l] * x[d + (size_t)l];
            acc[l] = acc[l] + sq;
        }
    float s = acc[0];
    for (int l = 1; l < LANES; l++) s = s + acc[l];
    size_t i = nv;
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

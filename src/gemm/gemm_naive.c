// gemm_naive.c — the reference GEMM backend: the definition every other backend is
// compared with. Inputs are widened exactly to fp32 (SPEC.md section 1: fp16/bf16 -> fp32 is
// exact), each C element is accumulated in fp32 in a fixed order (k = 0, 1, ..., K-1), then
// alpha*acc + beta*C is computed in fp32 and rounded once to C's dtype (gemm_store_result).
// f16 inputs are summed in torch 2.15's order on a CPU without native fp16 instead (GemmArgs.f16_sum;
// the products of two f16 values are exact in fp32, so only the order of the adds matters):
//   torch.mm / bmm, nn and nt: four partial sums, k = 4q + r into sum r, the last K % 4 into sum
//     0, then ((s0 + s1) + s2) + s3 (ATen's cpublas `sum`);
//   tn (and tt): k order;
//   F.linear (x @ W^T): ATen's fp16_dot_with_fp32_arith at AVX2 width: blocks of 64 into 8
//     registers of 8 lanes (k = 64b + 8r + l into register r, lane l), the registers folded
//     r += r + 4, + 2, + 1, the lanes l += l ^ 4, ^ 2, ^ 1; then the next K % 64 / 16 blocks of 16
//     into one 8-lane register (the first 8 of a block, then the last 8), folded the same way and
//     added; then the last K % 16 one by one.
// Measured against torch 2.15 (AVX2 dispatch on this AMD EPYC) on 8 F.linear shapes (K 13-768)
// and 12 attention products (3 (B, T, H, dh) shapes, the four kinds): 0 of 45,818 values differ;
// k order alone differs in nn/nt (up to 14 of 12,288). The golden model's own fp16 GEMMs are the
// check at scale (test_model_golden's bit-exact shares). A torch that dispatches AVX-512 (16
// lanes) or has native fp16 (oneDNN) sums F.linear otherwise.
// Deterministic: rows of C are split across OpenMP threads but each element is computed by
// one thread in the same order, so the bits do not depend on the thread count.
// Not here: speed (no blocking, no SIMD intrinsics; the compiler may vectorize across j,
// which does not change any element's order of operations).
#include "gemm/gemm.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int threads;
    float* a;    // (M, K) op(A) widened to fp32, packed
    float* b;    // (K, N) op(B) widened to fp32, packed
    float* acc;  // (M, N) fp32 accumulators, packed
    size_t a_cap, b_cap, acc_cap;  // capacities in floats
} NaiveCtx;

static GemmSupport naive_supports(DType ab, DType c, char* why, size_t why_len) {
    if (!gemm_dtypes_valid(ab, c)) {
        if (why) snprintf(why, why_len, "not a GEMM dtype combination (inputs f32/bf16/f16, "
                                        "output f32 or the input dtype)");
        return GEMM_UNSUPPORTED;
    }
    // The naive loop IS the reference definition for every dtype: native by definition.
    if (why && why_len) why[0] = '\0';
    return GEMM_NATIVE;
}

static Status naive_init(void** ctx, int threads) {
    NaiveCtx* c = xcalloc(1, sizeof *c);
    c->threads = threads;
    *ctx = c;
    return status_ok();
}

static void naive_free(void* ctx) {
    NaiveCtx* c = ctx;
    free(c->a);
    free(c->b);
    free(c->acc);
    free(c);
}

static inline float load_f32(const void* src, DType dt, size_t idx) {
    switch (dt) {
        case DTYPE_F32: return ((const float*)src)[idx];
        case DTYPE_BF16: return bf16_to_f32(((const Bf16*)src)[idx]);
        case DTYPE_F16: return fp16_to_f32(((const Fp16*)src)[idx]);
        default: ABORT("dtype %d is not a GEMM input", (int)dt);
    }
}

// dst (rows, cols) packed = op(src), where op(src)[r][c] = trans ? src[c*ld + r] : src[r*ld + c]
static void widen_op(float* dst, const void* src, DType dt, bool trans, int rows, int cols,
                     int ld) {
    if (!trans) {
        gemm_widen_matrix(dst, src, dt, rows, cols, ld);
        return;
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)r * (size_t)cols + (size_t)c] =
                load_f32(src, dt, (size_t)c * (size_t)ld + (size_t)r);
}

// acc (M, N) = a (M, K) @ b (K, N) in torch.mm's f16 order (see the top): four partial sums
static void sum_ilp4(float* acc, const float* a, const float* b, int M, int N, int K, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < M; i++) {
        const float* ai = a + (size_t)i * (size_t)K;  // (K)
        for (int j = 0; j < N; j++) {
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int k = 0;
            for (; k + 4 <= K; k += 4)
                for (int q = 0; q < 4; q++) s[q] += ai[k + q] * b[(size_t)(k + q) * (size_t)N + (size_t)j];
            for (; k < K; k++) s[0] += ai[k] * b[(size_t)k * (size_t)N + (size_t)j];
            acc[(size_t)i * (size_t)N + (size_t)j] = ((s[0] + s[1]) + s[2]) + s[3];
        }
    }
}

// the 8 lanes of v folded as AVX2's vec_reduce_all: l += l ^ 4, then ^ 2, then ^ 1; lane 0
static float fold8(float* v) {
    for (int s = 4; s >= 1; s /= 2) {
        float t[8];
        for (int l = 0; l < 8; l++) t[l] = v[l] + v[l ^ s];
        memcpy(v, t, sizeof t);
    }
    return v[0];
}

// x . y (K) as ATen's fp16_dot_with_fp32_arith at AVX2 width (see the top)
static float dot_aten(const float* x, const float* y, int K) {
    float r8[8][8] = {{0}};
    const int main_end = K & ~63, vec_end = K & ~15;
    for (int k0 = 0; k0 < main_end; k0 += 64)
        for (int r = 0; r < 8; r++)
            for (int l = 0; l < 8; l++) r8[r][l] += x[k0 + 8 * r + l] * y[k0 + 8 * r + l];
    for (int off = 4; off >= 1; off /= 2)
        for (int r = 0; r < off; r++)
            for (int l = 0; l < 8; l++) r8[r][l] = r8[r][l] + r8[r + off][l];
    float sum = fold8(r8[0]);
    float tail[8] = {0};
    for (int k0 = main_end; k0 < vec_end; k0 += 16) {
        for (int l = 0; l < 8; l++) tail[l] += x[k0 + l] * y[k0 + l];
        for (int l = 0; l < 8; l++) tail[l] += x[k0 + 8 + l] * y[k0 + 8 + l];
    }
    sum += fold8(tail);
    for (int k = vec_end; k < K; k++) sum += x[k] * y[k];
    return sum;
}

static Status naive_run(void* ctx, const GemmArgs* g) {
    NaiveCtx* c = ctx;
    const int M = g->M, N = g->N, K = g->K;
    float* a = gemm_scratch_grow(&c->a, &c->a_cap, (size_t)M * (size_t)K);        // (M, K)
    float* b = gemm_scratch_grow(&c->b, &c->b_cap, (size_t)K * (size_t)N);        // (K, N)
    float* acc = gemm_scratch_grow(&c->acc, &c->acc_cap, (size_t)M * (size_t)N);  // (M, N)
    widen_op(a, g->A, g->ab_dtype, g->trans_a, M, K, g->lda);
    if (g->ab_dtype == DTYPE_F16 && g->f16_sum == GEMM_F16_SUM_LINEAR) {
        // b holds op(B)^T (N, K): row j is column j of op(B), for dot products along k
        widen_op(b, g->B, g->ab_dtype, !g->trans_b, N, K, g->ldb);
#pragma omp parallel for num_threads(c->threads) schedule(static)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                acc[(size_t)i * (size_t)N + (size_t)j] =
                    dot_aten(a + (size_t)i * (size_t)K, b + (size_t)j * (size_t)K, K);
        gemm_store_result(g, acc);
        return status_ok();
    }
    widen_op(b, g->B, g->ab_dtype, g->trans_b, K, N, g->ldb);
    if (g->ab_dtype == DTYPE_F16 && !g->trans_a) {  // torch.mm / bmm nn and nt
        sum_ilp4(acc, a, b, M, N, K, c->threads);
        gemm_store_result(g, acc);
        return status_ok();
    }

    // One row of C per iteration; every element's sum runs k = 0..K-1 in fp32, whatever the
    // thread count. (-std=c11 keeps -ffp-contract=off: no fused multiply-add sneaks in.)
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int i = 0; i < M; i++) {
        float* row = acc + (size_t)i * (size_t)N;  // (N)
        const float* ai = a + (size_t)i * (size_t)K;  // (K)
        for (int j = 0; j < N; j++) row[j] = 0.0f;
        for (int k = 0; k < K; k++) {
            const float aik = ai[k];
            const float* bk = b + (size_t)k * (size_t)N;  // (N)
            for (int j = 0; j < N; j++) row[j] += aik * bk[j];
        }
    }
    gemm_store_result(g, acc);  // alpha*acc + beta*C, rounded once; beta == 0 does not read C
    return status_ok();
}

const GemmBackend gemm_backend_naive = {
    .name = "naive",
    .description = "reference loops: exact widening, fp32 accumulation in k order (f16: torch's CPU "
                   "orders), deterministic for any thread count (OpenMP over rows)",
    .supports = naive_supports,
    .init = naive_init,
    .free = naive_free,
    .run = naive_run,
};

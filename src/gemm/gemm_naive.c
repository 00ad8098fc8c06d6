// gemm_naive.c — the reference GEMM backend: the definition every other backend is
// compared with. Inputs are widened exactly to fp32 (SPEC.md section 1: fp16/bf16 -> fp32 is
// exact), each C element is accumulated in fp32 in a fixed order (k = 0, 1, ..., K-1), then
// alpha*acc + beta*C is computed in fp32 and rounded once to C's dtype (gemm_store_result).
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

static Status naive_run(void* ctx, const GemmArgs* g) {
    NaiveCtx* c = ctx;
    const int M = g->M, N = g->N, K = g->K;
    float* a = gemm_scratch_grow(&c->a, &c->a_cap, (size_t)M * (size_t)K);        // (M, K)
    float* b = gemm_scratch_grow(&c->b, &c->b_cap, (size_t)K * (size_t)N);        // (K, N)
    float* acc = gemm_scratch_grow(&c->acc, &c->acc_cap, (size_t)M * (size_t)N);  // (M, N)
    widen_op(a, g->A, g->ab_dtype, g->trans_a, M, K, g->lda);
    widen_op(b, g->B, g->ab_dtype, g->trans_b, K, N, g->ldb);

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
    .description = "reference loops: exact widening, fp32 accumulation in k order, "
                   "deterministic for any thread count (OpenMP over rows)",
    .supports = naive_supports,
    .init = naive_init,
    .free = naive_free,
    .run = naive_run,
};

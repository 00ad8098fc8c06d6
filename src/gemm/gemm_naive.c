// gemm_naive.c — the reference GEMM backend: the definition every other backend is
// compared with. Inputs are widened exactly to fp32 (SPEC.md section 1: fp16/bf16 -> fp32 is
// exact), each C element is accumulated in fp32 in a fixed order (k = 0, 1, ..., K-1), then
// alpha*acc + beta*C is computed in fp32 and rounded once to C's dtype (gemm_store_result).
// bf16 inputs are summed by k pairs, the odd k of each pair first ((1, 0), (3, 2), ...; an odd
// K's last pair padded with a zero product): the order of avx512_bf16's VDPBF16PS in one
// accumulator, which is how torch 2.15's bf16 matmul (oneDNN) sums on the goldens' machine
// (the products of two bf16 values are exact in fp32, so only the order matters). Measured:
// the bf16 model goldens' summary rows bit-exact 70 -> 79 of 80 with it (k order before); our
// onednn backend gives the same bits there. Not mirrored: VDPBF16PS's flushing of subnormal
// inputs and results (the naive sums keep them). oneDNN's K blocking for long K is mirrored
// (bf16_k_block).
// f16 inputs are summed in torch 2.15's order on a CPU without native fp16 instead (GemmArgs.f16_sum;
// the products of two f16 values are exact in fp32, so only the order of the adds matters). Which
// order torch takes depends on the operands' memory layout at its cpublas gemm (gemm.h), so the
// caller names it:
//   GEMM_F16_SUM_MM (contiguous operands), nn and nt: four partial sums, k = 4q + r into sum r,
//     the last K % 4 into sum 0, then ((s0 + s1) + s2) + s3 (ATen's cpublas `sum`); tn (and tt):
//     k order;
//   GEMM_F16_SUM_DOT (B a transposed view of a contiguous tensor: F.linear's x @ W^T, and in
//     attention what layers.h attention_f16_sum says, in any of our layouts):
//     ATen's fp16_dot_with_fp32_arith at AVX2 width: blocks of 64 into 8
//     registers of 8 lanes (k = 64b + 8r + l into register r, lane l), the registers folded
//     r += r + 4, + 2, + 1, the lanes l += l ^ 4, ^ 2, ^ 1; then the next K % 64 / 16 blocks of 16
//     into one 8-lane register (the first 8 of a block, then the last 8), folded the same way and
//     added; then the last K % 16 one by one.
// Measured against torch 2.15 (AVX2 dispatch on this AMD EPYC) on 8 F.linear shapes (K 13-768)
// and 12 attention products (3 (B, T, H, dh) shapes, the four kinds): 0 of 45,818 values differ;
// k order alone differs in nn/nt (up to 14 of 12,288). The golden model's own fp16 GEMMs are the
// check at scale (test_model_golden's bit-exact shares). A torch that dispatches AVX-512 (16
// lanes) or has native fp16 (oneDNN) sums F.linear otherwise. The attention backward's two
// DOT products were found by tracing the one 10-step fp16 trajectory that was not bit-exact
// (trajectory_dropout_fp16, step 10: one dP element of 2,048, a sum on an fp16 midpoint whose
// partial-sum order rounded it down) and then checked against torch: with v and k^T made
// contiguous in the forward (DistilBERT's heads are strided views, so matmul copies them),
// autograd's grad.bmm(v.transpose(1, 2)) and grad.bmm(kT.transpose(1, 2)) are "transa" calls.
// With them every fp16 model golden and trajectory is bit-identical (accum_fp16 99.9% -> 100%,
// trajectory_dropout_fp16 97.7% -> 100%); the forward's q @ k^T is nn in torch (k^T copied)
// and stays MM: with DOT there, three goldens' attention probabilities (head dims 10 and 12)
// lose bits. With batch, heads or T of 1 the copy is a view and the two swap; the golden
// attention_f16_orders (products built to tell the orders apart) checks all of it.
// bf16 products of at most 16*16*16 multiply-adds in torch's matmul (GemmArgs.torch_macs; a bmm
// counts its batch) are not oneDNN's in torch (ATen's mkldnn checksize) but ATen's cpublas, which
// sums bf16 exactly as f16 (the three orders above, by GemmArgs.f16_sum): measured with products
// built to tell the orders apart (linears of 4x8x8 to 16x16x16: forward dot, dx partial sums,
// dW k order, 0 mismatches each; 16x16x17 and larger: pairs, 0 mismatches; attention with batch
// x heads of 1 at T = dh = 16: the dot order).
// Deterministic: rows of C are split across OpenMP threads but each element is computed by
// one thread in the same order, so the bits do not depend on the thread count.
// Not here: speed (no blocking, no SIMD intrinsics; the compiler may vectorize across j,
// which does not change any element's order of operations).
#include "gemm/gemm.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int threads;
    float* a;    // (M, K) op(A) widened to fp32, packed
    float* b;    // (K, N) op(B) widened to fp32, packed
    float* acc;  // (M, N) fp32 accumulators, packed
    float* ws;   // f16 orders: GEMM_F16_WS_ROWS rows of N per thread
    size_t a_cap, b_cap, acc_cap, ws_cap;  // capacities in floats
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
    free(c->ws);
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

// The f16 orders of the top, one row of C at a time and every step over the whole row (j), so
// that each element's adds are the order's and the loops vectorize over j. a_i (K) is row i of
// op(A), b (K, N) op(B); ws: GEMM_F16_WS_ROWS rows of N floats (the order's accumulators).
enum { GEMM_F16_WS_ROWS = 72 };

static void axpy_row(float* restrict r, float s, const float* restrict bk, int N) {  // r += s * bk
    for (int j = 0; j < N; j++) r[j] += s * bk[j];
}

static void add_row(float* restrict r, const float* restrict x, int N) {  // r = r + x
    for (int j = 0; j < N; j++) r[j] = r[j] + x[j];
}

// GEMM_F16_SUM_MM, nn and nt: four partial sums (k = 4q + r into sum r, the rest into sum 0),
// then ((s0 + s1) + s2) + s3
static void row_mm_f16(float* row, const float* a_i, const float* b, int N, int K, float* ws) {
    memset(ws, 0, (size_t)4 * (size_t)N * sizeof(float));
    int k = 0;
    for (; k + 4 <= K; k += 4)
        for (int q = 0; q < 4; q++) axpy_row(ws + (size_t)q * (size_t)N, a_i[k + q], b + (size_t)(k + q) * (size_t)N, N);
    for (; k < K; k++) axpy_row(ws, a_i[k], b + (size_t)k * (size_t)N, N);
    for (int q = 1; q < 4; q++) add_row(ws, ws + (size_t)q * (size_t)N, N);
    memcpy(row, ws, (size_t)N * sizeof(float));
}

// the 8 lanes v[0..7] (rows of N) folded as AVX2's vec_reduce_all: l += l + 4, then + 2, + 1
static void fold8_rows(float* v, int N) {
    for (int s = 4; s >= 1; s /= 2)
        for (int l = 0; l < s; l++) add_row(v + (size_t)l * (size_t)N, v + (size_t)(l + s) * (size_t)N, N);
}

// GEMM_F16_SUM_DOT: ATen's fp16_dot_with_fp32_arith at AVX2 width (the top): ws rows 0..63 are the 8
// registers x 8 lanes (register r, lane l: row 8r + l), rows 64..71 the tail's one register
static void row_linear_f16(float* row, const float* a_i, const float* b, int N, int K, float* ws) {
    const size_t n = (size_t)N;
    float* tail = ws + 64 * n;
    const int main_end = K & ~63, vec_end = K & ~15;
    // registers that no block reaches hold +0 and fold to +0: only the rows in use are written
    // (+0 + x is x but for x = -0, so the +0 sum is kept as the start, as ATen's is)
    memset(ws, 0, (main_end ? 64 : 1) * n * sizeof(float));
    for (int k0 = 0; k0 < main_end; k0 += 64)
        for (int o = 0; o < 64; o++) axpy_row(ws + (size_t)o * n, a_i[k0 + o], b + (size_t)(k0 + o) * n, N);
    if (main_end) {
        for (int off = 4; off >= 1; off /= 2)  // registers: r += r + off, lane by lane
            for (int r = 0; r < off; r++)
                for (int l = 0; l < 8; l++)
                    add_row(ws + (size_t)(8 * r + l) * n, ws + (size_t)(8 * (r + off) + l) * n, N);
        fold8_rows(ws, N);  // register 0's lanes
    }
    memset(tail, 0, 8 * n * sizeof(float));
    for (int k0 = main_end; k0 < vec_end; k0 += 16) {
        for (int l = 0; l < 8; l++) axpy_row(tail + (size_t)l * n, a_i[k0 + l], b + (size_t)(k0 + l) * n, N);
        for (int l = 0; l < 8; l++) axpy_row(tail + (size_t)l * n, a_i[k0 + 8 + l], b + (size_t)(k0 + 8 + l) * n, N);
    }
    fold8_rows(tail, N);
    add_row(ws, tail, N);
    for (int k = vec_end; k < K; k++) axpy_row(ws, a_i[k], b + (size_t)k * n, N);
    memcpy(row, ws, n * sizeof(float));
}

// oneDNN's K blocks for a bf16 matmul (torch 2.15's bundled oneDNN on this CPU, measured with
// products built to tell the orders apart, M and N from 8 to 768): K up to 512 in one block;
// beyond, blocks of 512, except an untransposed A with K > 1024: blocks of 1024 (nt and nn, e.g.
// a linear's forward and dx at K = 1040-4096; the transposed A of dW = dy^T @ x keeps 512 at K =
// 1040-2048). Each block is summed by pairs from zero and the blocks' sums added in order.
static int bf16_k_block(int K, bool trans_a) {
    if (K <= 512) return K;
    return !trans_a && K > 1024 ? 1024 : 512;
}

static Status naive_run(void* ctx, const GemmArgs* g) {
    NaiveCtx* c = ctx;
    const int M = g->M, N = g->N, K = g->K;
    float* a = gemm_scratch_grow(&c->a, &c->a_cap, (size_t)M * (size_t)K);        // (M, K)
    float* b = gemm_scratch_grow(&c->b, &c->b_cap, (size_t)K * (size_t)N);        // (K, N)
    float* acc = gemm_scratch_grow(&c->acc, &c->acc_cap, (size_t)M * (size_t)N);  // (M, N)
    widen_op(a, g->A, g->ab_dtype, g->trans_a, M, K, g->lda);
    widen_op(b, g->B, g->ab_dtype, g->trans_b, K, N, g->ldb);
    // torch's cpublas orders: every f16 product; bf16 ones of at most GEMM_BF16_ONEDNN_MIN_MACS
    const bool cpublas = g->ab_dtype == DTYPE_F16 ||
                         (g->ab_dtype == DTYPE_BF16 && g->torch_macs > 0 && g->torch_macs <= GEMM_BF16_ONEDNN_MIN_MACS);
    GemmF16Sum order = g->f16_sum;  // op(A) and op(B) are widened: any order runs in any layout
    if (order == GEMM_F16_SUM_MM) order = g->trans_a ? GEMM_F16_SUM_KORDER : GEMM_F16_SUM_PARTIAL4;
    const bool linear = order == GEMM_F16_SUM_DOT;
    if (cpublas && order != GEMM_F16_SUM_KORDER) {  // k order: the plain loop below
        const size_t rows = (size_t)GEMM_F16_WS_ROWS * (size_t)N;
        float* ws = gemm_scratch_grow(&c->ws, &c->ws_cap, (size_t)c->threads * rows);
#pragma omp parallel for num_threads(c->threads) schedule(static)
        for (int i = 0; i < M; i++) {
            float* w = ws + (size_t)omp_get_thread_num() * rows;
            float* row = acc + (size_t)i * (size_t)N;
            const float* a_i = a + (size_t)i * (size_t)K;
            if (linear) row_linear_f16(row, a_i, b, N, K, w);
            else row_mm_f16(row, a_i, b, N, K, w);
        }
        gemm_store_result(g, acc);
        return status_ok();
    }

    // One row of C per iteration; every element's sum runs k = 0..K-1 in fp32 (bf16: by pairs,
    // in oneDNN's K blocks, top), whatever the thread count. (-std=c11 keeps -ffp-contract=off:
    // no fused multiply-add sneaks in.)
    const bool bf16_pairs = g->ab_dtype == DTYPE_BF16 && !cpublas;
    const int kb = bf16_pairs ? bf16_k_block(K, g->trans_a) : K;
    float* part_ws = kb < K ? gemm_scratch_grow(&c->ws, &c->ws_cap, (size_t)c->threads * (size_t)N) : NULL;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int i = 0; i < M; i++) {
        float* row = acc + (size_t)i * (size_t)N;  // (N)
        const float* ai = a + (size_t)i * (size_t)K;  // (K)
        for (int j = 0; j < N; j++) row[j] = 0.0f;
        if (bf16_pairs) {
            // k pairs, the odd k first (VDPBF16PS; an odd K's last pair is padded with a zero
            // product, added first: +0, which turns an accumulated -0 into +0), each K block from
            // zero, the blocks' sums then added in order
            float* part = part_ws ? part_ws + (size_t)omp_get_thread_num() * (size_t)N : NULL;
            for (int k0 = 0; k0 < K; k0 += kb) {
                const int k1 = K - k0 < kb ? K : k0 + kb;
                float* dst = k0 == 0 ? row : part;
                if (k0 > 0)
                    for (int j = 0; j < N; j++) dst[j] = 0.0f;
                for (int k = k0; k < k1; k += 2) {
                    if (k + 1 < k1) {
                        axpy_row(dst, ai[k + 1], b + (size_t)(k + 1) * (size_t)N, N);
                    } else {
                        for (int j = 0; j < N; j++) dst[j] += 0.0f;
                    }
                    axpy_row(dst, ai[k], b + (size_t)k * (size_t)N, N);
                }
                if (k0 > 0) add_row(row, dst, N);
            }
        } else {
            for (int k = 0; k < K; k++) axpy_row(row, ai[k], b + (size_t)k * (size_t)N, N);
        }
    }
    gemm_store_result(g, acc);  // alpha*acc + beta*C, rounded once; beta == 0 does not read C
    return status_ok();
}

const GemmBackend gemm_backend_naive = {
    .name = "naive",
    .description = "reference loops: exact widening, fp32 accumulation in k order (f16: torch's CPU "
                   "orders; bf16: k pairs, odd k first, as VDPBF16PS), deterministic for any thread count "
                   "(OpenMP over rows)",
    .supports = naive_supports,
    .init = naive_init,
    .free = naive_free,
    .run = naive_run,
};

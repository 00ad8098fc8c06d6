// layers.c — forward and backward of every layer of the DistilBERT-architecture classifier
// (layers.h), fp32 math with the precision mode's rounding points; every matrix product goes
// through gemm_run with the mode's dtype. Not here: which activations the model keeps, the
// order of the layers, loss scaling (model.c, amp.c).
#include "model/layers.h"
#include "model/gelu_onednn.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu.h"
#include "optim/torch_reduce.h"

// ---- context and scratch ----
void layer_ctx_init(LayerCtx* c, Gemm* gemm, DType low, AmpCounters* counters) {
    CHECK(gemm && gemm->backend, "layer_ctx_init needs an open Gemm");
    CHECK(low == DTYPE_F32 || low == DTYPE_BF16 || low == DTYPE_F16, "low dtype %s", dtype_name(low));
    memset(c, 0, sizeof *c);
    c->gemm = gemm;
    c->low = low;
    c->counters = counters;
}

static void heads_close(LayerCtx* c) {
    for (int i = 0; i < c->heads_count; i++) {
        HeadWorker* w = &c->heads[i];
        gemm_close(&w->gemm);
        free(w->cl);
        free(w->dP);
        free(w->dS);
        free(w->dSl);
    }
    free(c->heads);
    c->heads = NULL;
    c->heads_count = 0;
    c->heads_backend = NULL;
}

void layer_ctx_free(LayerCtx* c) {
    for (int i = 0; i < LAYER_SCRATCH_COUNT; i++) free(c->scratch[i]);
    heads_close(c);
    memset(c, 0, sizeof *c);
}

// At least n head workers on the backend of c->gemm (all reopened when the backend changed).
static Status heads_open(LayerCtx* c, int n) {
    if (c->heads_backend != c->gemm->backend) heads_close(c);
    if (n <= c->heads_count) return status_ok();
    HeadWorker* h = xcalloc((size_t)n, sizeof *h);
    if (c->heads_count) memcpy(h, c->heads, (size_t)c->heads_count * sizeof *h);
    free(c->heads);
    c->heads = h;
    c->heads_backend = c->gemm->backend;
    for (int i = c->heads_count; i < n; i++) {
        Status s = gemm_open(&h[i].gemm, c->gemm->backend, 1);
        if (!status_is_ok(s)) return s;
        c->heads_count = i + 1;
    }
    return status_ok();
}

// *buf with room for `bytes` (64-byte aligned), grown on demand and kept
static void* grow(void** buf, size_t* cap, size_t bytes) {
    if (bytes > *cap) {
        free(*buf);
        size_t rounded = (bytes + 63) / 64 * 64;
        *buf = xaligned_alloc(rounded);
        *cap = rounded;
    }
    return *buf;
}

void layer_ctx_keep(LayerCtx* c, LowCopy* kept, int count) {
    CHECK(count == 0 || kept, "kept copies without a table");
    for (int i = 0; i < count; i++) kept[i].valid = false;
    c->kept = kept;
    c->kept_count = count;
}

// The kept copy of src (n values), or NULL: none registered (or fp32 mode). A linear search:
// a model registers under 100 arrays and a step looks up a few per GEMM.
static LowCopy* kept_find(const LayerCtx* c, const float* src, size_t n) {
    if (c->low == DTYPE_F32) return NULL;
    for (int i = 0; i < c->kept_count; i++)
        if (c->kept[i].src == src && c->kept[i].n == n) return &c->kept[i];
    return NULL;
}

// For the layer that produces src: where to write src's low copy (the kept storage, marked
// valid: the caller writes it now), or NULL when src has none. *low_only (may be NULL): the
// caller may leave src's fp32 values unwritten.
static void* kept_produce(LayerCtx* c, const float* src, size_t n, bool* low_only) {
    LowCopy* k = kept_find(c, src, n);
    if (low_only) *low_only = k && k->low_only;
    if (!k) return NULL;
    k->valid = true;
    return k->low;
}

const void* layer_kept_low_only(const LayerCtx* c, const float* src, size_t n) {
    const LowCopy* k = kept_find(c, src, n);
    return k && k->low_only && k->valid ? k->low : NULL;
}

size_t layer_ctx_scratch_bytes(const LayerCtx* c) {
    size_t t = 0;
    for (int i = 0; i < LAYER_SCRATCH_COUNT; i++) t += c->scratch_bytes[i];
    for (int i = 0; i < c->heads_count; i++)
        t += c->heads[i].cl_bytes + c->heads[i].dP_bytes + c->heads[i].dS_bytes + c->heads[i].dSl_bytes;
    return t;
}

static void* scratch(LayerCtx* c, int slot, size_t bytes) {
    CHECK(slot >= 0 && slot < LAYER_SCRATCH_COUNT);
    if (bytes > c->scratch_bytes[slot]) {
        free(c->scratch[slot]);
        size_t rounded = (bytes + 63) / 64 * 64;
        c->scratch[slot] = xaligned_alloc(rounded);
        c->scratch_bytes[slot] = rounded;
    }
    return c->scratch[slot];
}

static float* scratch_f32(LayerCtx* c, int slot, size_t n) {
    size_t bytes;
    CHECK(size_mul_ok(n, sizeof(float), &bytes));
    return scratch(c, slot, bytes);
}

// The vectorized kernels below are compiled three times and the loader's ifunc picks one at run
// time (no -march=native): AVX-512, x86-64-v3 (AVX2 + FMA + F16C, ...) and baseline x86-64.
// Not "avx2,fma": target_clones splits its strings at commas, so that made two clones, "avx2"
// without FMA (every fmaf a libm call, nothing vectorized) and "fma", and an AVX2 machine ran
// the first. The source fixes the order of operations and writes every FMA as fmaf, so all
// three compute the same bits.
#define SIMD_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))

// Element-wise conversions of large arrays run on the OpenMP team: each element's result
// depends on that element only, so the split cannot change a bit. Below PAR_MIN elements the
// fork/join costs more than the pass, and small passes are often called inside a parallel
// region (softmax rows, GELU chunks), where even `#pragma omp parallel if (0)` builds a nested
// team per call (measured: tiny bf16 steps 2.5x slower), so they never reach a pragma.
// PAR_CHUNK is a multiple of 16 (the SIMD width) so only the last chunk has a scalar tail.
enum { PAR_MIN = 65536, PAR_CHUNK = 16384 };

// x (n) = 0, and dst (n) = src, on the team for large arrays (callers outside parallel regions)
void layers_zero(float* x, size_t n) {
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += PAR_CHUNK)
        memset(x + i0, 0, (n - i0 < PAR_CHUNK ? n - i0 : PAR_CHUNK) * sizeof(float));
}

static void copy_par(float* dst, const float* src, size_t n) {
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += PAR_CHUNK)
        memcpy(dst + i0, src + i0, (n - i0 < PAR_CHUNK ? n - i0 : PAR_CHUNK) * sizeof(float));
}

// rows 1..N-1 of x (N rows of `row` bytes) = row 0, rows on the team when large
static void broadcast_row0(void* x, size_t row, int N) {
#pragma omp parallel for schedule(static) if ((size_t)N * row >= (size_t)PAR_MIN)
    for (int i = 1; i < N; i++) memcpy((char*)x + (size_t)i * row, x, row);
}

// dst (n, dt) = x (n) rounded to dt
// (from 16,384 elements: a weight matrix of the small model, 128 x 128, narrowed once per forward,
// was one thread's work while the other waited; never inside a parallel region)
static void narrow_par(void* dst, DType dt, const float* x, size_t n) {
    if (n < 16384 || omp_in_parallel()) {
        dtype_from_f32_row(dst, dt, x, n);
        return;
    }
    const size_t es = dtype_traits(dt)->size;
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += PAR_CHUNK)
        dtype_from_f32_row((char*)dst + i0 * es, dt, x + i0, n - i0 < PAR_CHUNK ? n - i0 : PAR_CHUNK);
}

// The row passes between a GEMM's fp32 C (M, N; leading dimension ldc) and its packed low copy
// cl (M, N): ROWS_NARROW cl = R(C), ROWS_WIDEN C = cl, ROWS_WIDEN_ADD C += cl (fp32 adds),
// ROWS_WIDEN_RES C = cl + res (res (M, N) fp32, leading dimension ldc: a residual connection's
// mixed add, low branch + fp32 input, in the widening pass).
typedef enum { ROWS_NARROW, ROWS_WIDEN, ROWS_WIDEN_ADD, ROWS_WIDEN_RES } RowsOp;

// crow[j] = the bf16 value cl[j] widened + rrow[j] (one fp32 add), one vectorized pass
SIMD_CLONES static void widen_res_bf16_row(float* restrict crow, const uint16_t* restrict cl,
                                           const float* restrict rrow, int N) {
#pragma omp simd  // element-wise
    for (int j = 0; j < N; j++) {
        const uint32_t bits = (uint32_t)cl[j] << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        crow[j] = v + rrow[j];
    }
}

// crow[j] += the bf16 value cl[j] widened (exact: its bits are the high half of the fp32's),
// in one vectorized pass instead of widening into a temporary first; the same fp32 adds
SIMD_CLONES static void widen_add_bf16_row(float* restrict crow, const uint16_t* restrict cl, int N) {
#pragma omp simd  // element-wise
    for (int j = 0; j < N; j++) {
        const uint32_t bits = (uint32_t)cl[j] << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        crow[j] += v;
    }
}

// x[i] = ((x[i] + a[i]) + b[i]) + c[i] for bf16 a, b, c widened (exact), one pass
SIMD_CLONES static void widen_add3_bf16(float* restrict x, const uint16_t* restrict a, const uint16_t* restrict b,
                                        const uint16_t* restrict c, size_t n) {
#pragma omp simd  // element-wise
    for (size_t i = 0; i < n; i++) {
        const uint32_t ua = (uint32_t)a[i] << 16, ub = (uint32_t)b[i] << 16, uc = (uint32_t)c[i] << 16;
        float fa, fb, fc;
        memcpy(&fa, &ua, sizeof fa);
        memcpy(&fb, &ub, sizeof fb);
        memcpy(&fc, &uc, sizeof fc);
        x[i] = ((x[i] + fa) + fb) + fc;
    }
}

// x (n) += a, then b, then c (n each, dtype dt, widened), in that order per element; chunks on
// the team (element-wise: see narrow_par)
static void widen_add3(float* x, DType dt, const void* a, const void* b, const void* c, size_t n) {
    const size_t es = dtype_traits(dt)->size;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += PAR_CHUNK) {
        const size_t m = n - i0 < PAR_CHUNK ? n - i0 : PAR_CHUNK;
        const char *ac = (const char*)a + i0 * es, *bc = (const char*)b + i0 * es, *cc = (const char*)c + i0 * es;
        if (dt == DTYPE_BF16) {
            widen_add3_bf16(x + i0, (const uint16_t*)ac, (const uint16_t*)bc, (const uint16_t*)cc, m);
            continue;
        }
        enum { CH = 256 };
        float ta[CH], tb[CH], tc[CH];
        for (size_t j0 = 0; j0 < m; j0 += CH) {
            const size_t k = m - j0 < CH ? m - j0 : CH;
            dtype_to_f32_row(ta, dt, ac + j0 * es, k);
            dtype_to_f32_row(tb, dt, bc + j0 * es, k);
            dtype_to_f32_row(tc, dt, cc + j0 * es, k);
            float* xc = x + i0 + j0;
            for (size_t j = 0; j < k; j++) xc[j] = ((xc[j] + ta[j]) + tb[j]) + tc[j];
        }
    }
}

// x (n) = 0 + rl widened (the add turns a -0 into +0, as adding into a zeroed gradient does),
// then xl (n) = R(x): a widen-and-add into a zeroed array followed by the narrowing of that
// array, chunk by chunk while the chunk is in cache (the same operations; xl's bits are those
// gemm_input gave, -0 and NaN included)
static void widen_zero_add_narrow(float* x, void* xl, const void* rl, DType dt, size_t n) {
    const size_t es = dtype_traits(dt)->size;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += PAR_CHUNK) {
        enum { CH = 256 };
        const size_t m = n - i0 < PAR_CHUNK ? n - i0 : PAR_CHUNK;
        for (size_t j0 = 0; j0 < m; j0 += CH) {
            const size_t k = m - j0 < CH ? m - j0 : CH;
            float* xc = x + i0 + j0;  // (k)
            dtype_to_f32_row(xc, dt, (const char*)rl + (i0 + j0) * es, k);
            for (size_t j = 0; j < k; j++) xc[j] = 0.0f + xc[j];  // not folded: no -ffast-math
            dtype_from_f32_row((char*)xl + (i0 + j0) * es, dt, xc, k);
        }
    }
}

static void low_row(RowsOp op, float* crow, DType dt, char* clrow, const float* rrow, int N) {
    const size_t es = dtype_traits(dt)->size;
    if (op == ROWS_NARROW) {
        dtype_from_f32_row(clrow, dt, crow, (size_t)N);
    } else if (op == ROWS_WIDEN) {
        dtype_to_f32_row(crow, dt, clrow, (size_t)N);
    } else if (op == ROWS_WIDEN_RES && dt == DTYPE_BF16) {
        widen_res_bf16_row(crow, (const uint16_t*)clrow, rrow, N);
    } else if (op == ROWS_WIDEN_RES) {
        dtype_to_f32_row(crow, dt, clrow, (size_t)N);
        for (int j = 0; j < N; j++) crow[j] = crow[j] + rrow[j];
    } else if (dt == DTYPE_BF16) {
        widen_add_bf16_row(crow, (const uint16_t*)clrow, N);
    } else {
        enum { CH = 256 };
        float t[CH];
        for (int j0 = 0; j0 < N; j0 += CH) {
            const int n = N - j0 < CH ? N - j0 : CH;
            dtype_to_f32_row(t, dt, clrow + (size_t)j0 * es, (size_t)n);
            for (int j = 0; j < n; j++) crow[j0 + j] += t[j];
        }
    }
}

// res: the residual rows of ROWS_WIDEN_RES (else NULL)
static void low_rows(RowsOp op, float* C, int ldc, DType dt, char* cl, const float* res, int M, int N) {
    const size_t es = dtype_traits(dt)->size;
#define LOW_ROW_ARGS(i) op, C + (size_t)(i) * (size_t)ldc, dt, cl + (size_t)(i) * (size_t)N * es, \
                        res ? res + (size_t)(i) * (size_t)ldc : NULL, N
    if ((size_t)M * (size_t)N <= PAR_MIN) {
        for (int i = 0; i < M; i++) low_row(LOW_ROW_ARGS(i));
        return;
    }
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++) low_row(LOW_ROW_ARGS(i));
#undef LOW_ROW_ARGS
}

// The GEMM operand for an fp32 tensor x (n): x itself in fp32 mode, else x rounded to the low
// dtype (autocast's cast of a GEMM input; exact when x already holds low values): x's kept copy
// when x is registered (LowCopy: converted by the first call of the forward, reused after),
// else a conversion into the scratch slot.
static const void* gemm_input(LayerCtx* c, int slot, const float* x, size_t n) {
    if (c->low == DTYPE_F32) return x;
    LowCopy* k = kept_find(c, x, n);
    if (k && k->valid) return k->low;
    CHECK(!k || !k->low_only, "the low-only array %p read before its producer wrote it", (const void*)x);
    if (!k && slot == LAYER_SCRATCH_A) c->operand_of = NULL;
    const Phase prev = phase_enter(c->clock, PHASE_CONVERT);
    void* dst = k ? k->low : scratch(c, slot, n * dtype_traits(c->low)->size);
    narrow_par(dst, c->low, x, n);
    if (k) k->valid = true;
    phase_enter(c->clock, prev);
    return dst;
}

// element `off` of a GEMM operand of the ctx's dtype
static const void* elem(const LayerCtx* c, const void* base, size_t off) {
    return (const char*)base + off * dtype_traits(c->low)->size;
}

typedef enum { OUT_LOW, OUT_F32, OUT_LOW_ADD, OUT_LOW_PRESET } OutKind;

// C (M, N) fp32 rows with leading dimension ldc:  C = op(A) @ op(B) + beta*C, with A and B in
// the ctx's GEMM dtype and fp32 accumulation. OUT_LOW: the result is rounded once to the low
// dtype (in a low mode the GEMM writes a low-dtype C, which is widened into C exactly);
// OUT_F32: the fp32 result; OUT_LOW_ADD (low modes, beta 0): C += the OUT_LOW result, the fp32
// add fused into the widening pass (the same adds as OUT_LOW into a temporary, then C += it);
// OUT_LOW_PRESET (low modes, beta != 0): as OUT_LOW, but the caller already wrote the low C
// into the low C buffer, so C is not read (a linear's bias rows: see below).
// The low C (M, N), packed, is scratch slot C, or cl_dst when given (low modes: a caller that
// keeps the result's low copy as the next GEMM's operand, instead of narrowing C again). With
// cl_dst, C may be NULL (OUT_LOW, OUT_LOW_PRESET): the low result is all the caller needs, and
// the widening pass is skipped.
// res (low modes, OUT_LOW / OUT_LOW_PRESET; else NULL): C = the low result + res (M, N; leading
// dimension ldc), the residual add fused into the widening pass.
// bias (N) or NULL: the GEMM's bias argument (GemmArgs.bias: backends with one, beta 0).
static Status mm_on(LayerCtx* c, Gemm* gemm, bool ta, bool tb, int M, int N, int K, const void* A, int lda,
                    const void* B, int ldb, float beta, float* C, int ldc, OutKind out, void* cl_dst,
                    const float* res, const float* bias) {
    CHECK(!res || (c->low != DTYPE_F32 && C && (out == OUT_LOW || out == OUT_LOW_PRESET)), "residual misuse");
    CHECK((out != OUT_LOW_ADD && out != OUT_LOW_PRESET) || c->low != DTYPE_F32, "low-only output kind in fp32 mode");
    CHECK(C || (c->low != DTYPE_F32 && cl_dst && (out == OUT_LOW || out == OUT_LOW_PRESET)), "no fp32 C to write");
    // mm_on's nt products are the linears' forward, which torch computes as F.linear (the naive
    // backend's f16 order for it: gemm.h GemmF16Sum); the others are torch.mm's
    GemmArgs g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = 1.0f, .beta = beta,
                  .ab_dtype = c->low, .A = A, .lda = lda, .B = B, .ldb = ldb, .bias = bias,
                  .f16_sum = !ta && tb                ? GEMM_F16_SUM_DOT
                             : c->dy_col_major && !ta ? GEMM_F16_SUM_KORDER     // dx = dy @ W
                             : c->dy_col_major        ? GEMM_F16_SUM_PARTIAL4  // dW = dy^T @ x
                                                      : GEMM_F16_SUM_MM,
                  // a linear's three products have the same m*k*n: its forward's
                  .torch_macs = (int64_t)M * N * K};
    if (c->low == DTYPE_F32 || out == OUT_F32) {
        g.c_dtype = DTYPE_F32;
        g.C = C;
        g.ldc = ldc;
        return gemm_run(gemm, &g);
    }
    const size_t es = dtype_traits(c->low)->size;
    char* cl = cl_dst ? cl_dst : scratch(c, LAYER_SCRATCH_C, (size_t)M * (size_t)N * es);  // (M, N) low, packed
    CHECK(out != OUT_LOW_ADD || beta == 0.0f, "OUT_LOW_ADD with beta %g", (double)beta);
    CHECK(out != OUT_LOW_PRESET || beta != 0.0f, "OUT_LOW_PRESET with beta 0");
    if (beta != 0.0f && out != OUT_LOW_PRESET) {
        const Phase prev = phase_enter(c->clock, PHASE_CONVERT);
        low_rows(ROWS_NARROW, C, ldc, c->low, cl, NULL, M, N);
        phase_enter(c->clock, prev);
    }
    g.c_dtype = c->low;
    g.C = cl;
    g.ldc = N;
    Status s = gemm_run(gemm, &g);
    if (!status_is_ok(s)) return s;
    if (!C) return status_ok();
    const Phase prev = phase_enter(c->clock, PHASE_CONVERT);
    low_rows(out == OUT_LOW_ADD ? ROWS_WIDEN_ADD : res ? ROWS_WIDEN_RES : ROWS_WIDEN, C, ldc, c->low, cl, res, M, N);
    phase_enter(c->clock, prev);
    return status_ok();
}

static Status mm(LayerCtx* c, bool ta, bool tb, int M, int N, int K, const void* A, int lda, const void* B, int ldb,
                 float beta, float* C, int ldc, OutKind out) {
    return mm_on(c, c->gemm, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, out, NULL, NULL, NULL);
}

// x (n) rounded in place to dt; large arrays on the team (element-wise: see narrow_par)
static void round_to(float* x, size_t n, DType dt) {
    if (dt == DTYPE_F32) return;
    if (n <= PAR_MIN) {
        amp_round_count(x, n, dt, NULL, NULL, NULL);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += PAR_CHUNK)
        amp_round_count(x + i0, n - i0 < PAR_CHUNK ? n - i0 : PAR_CHUNK, dt, NULL, NULL, NULL);
}

// Column sums in panels: the columns are split into panels of at most COLSUM_PANEL, one per team
// thread or a few more, and each panel is summed row by row: every row's panel is a contiguous
// run, read in order, into a local array of accumulators (in L1), instead of blocks of columns
// walking all N rows each at a stride of whole rows (which defeats the prefetcher). Used by
// LayerNorm's dgamma/dbeta (layernorm_backward_cols); each column's adds stay rows in order.
enum { COLSUM_PANEL = 1024 };

// the panel width for C columns: (threads x k) panels of at most COLSUM_PANEL, multiples of 16
static int colsum_panel(int C) {
    const int t = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int panels = t * ((C + t * COLSUM_PANEL - 1) / (t * COLSUM_PANEL));
    const int w = ((C + panels - 1) / panels + 15) / 16 * 16;
    return w < COLSUM_PANEL ? w : COLSUM_PANEL;
}

// A weight gradient's rounding: dW (n) += R(t), or dW = R(t) when `set` (dw_write: dW is not
// read), t (n) not written, counted as parameter-gradient rounding points (amp_round_param_grad
// then the add) in one pass. On the team from 4096 elements, in pieces of 2048: it runs between
// two GEMMs (a weight gradient's product and its bias's column sums), and a small weight's pass
// on one thread (~20 us at 128 x 128) let the other one fall asleep before the next region
// (element-wise, so the split changes no bit; the counts are integer sums).
enum { DW_PAR_MIN = 4096, DW_PAR_CHUNK = 2048 };
static void round_param_grad(LayerCtx* c, float* dW, const float* t, size_t n, bool set) {
    uint64_t nv = 0, nu = 0, no = 0;
    const bool count = c->counters != NULL;
#pragma omp parallel for schedule(static) reduction(+ : nv, nu, no) if (n > DW_PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += DW_PAR_CHUNK) {
        const size_t m = n - i0 < DW_PAR_CHUNK ? n - i0 : DW_PAR_CHUNK;
        uint64_t *v = count ? &nv : NULL, *u = count ? &nu : NULL, *o = count ? &no : NULL;
        if (set) amp_round_count_from(dW + i0, t + i0, m, c->low, v, u, o);
        else amp_round_add_count(dW + i0, t + i0, m, c->low, v, u, o);
    }
    if (count) {
        c->counters->param_values += nv;
        c->counters->param_underflow += nu;
        c->counters->param_overflow += no;
    }
}

void layer_round_grad_operand(LayerCtx* c, float* dst, const float* src, size_t n) {
    if (c->low == DTYPE_F32) {
        copy_par(dst, src, n);
        return;
    }
    const size_t es = dtype_traits(c->low)->size;
    char* dl = scratch(c, LAYER_SCRATCH_A, n * es);  // (n) low
    uint64_t nv = 0, nu = 0, no = 0;
    const bool count = c->counters != NULL;
#pragma omp parallel for schedule(static) reduction(+ : nv, nu, no) if (n > PAR_MIN)
    for (size_t i0 = 0; i0 < n; i0 += PAR_CHUNK) {
        const size_t m = n - i0 < PAR_CHUNK ? n - i0 : PAR_CHUNK;
        amp_round_count_from(dst + i0, src + i0, m, c->low, count ? &nv : NULL, count ? &nu : NULL,
                             count ? &no : NULL);                // dst = R(src), one pass
        dtype_from_f32_row(dl + i0 * es, c->low, dst + i0, m);  // exact: dst holds low values
    }
    if (count) {
        c->counters->act_values += nv;
        c->counters->act_underflow += nu;
        c->counters->act_overflow += no;
    }
    c->operand_of = dst;
    c->operand_n = n;
}

// dst (n) += src (n), element-wise on the team for large n (a residual connection's fp32 add)
static void add_rows_into(float* dst, const float* src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

// ---- embedding ----
void embedding_forward(float* out, const int64_t* ids, const float* Wtok, const float* Wpos, int B, int T, int D,
                       int64_t V) {
    for (size_t i = 0; i < (size_t)B * (size_t)T; i++)
        CHECK(ids[i] >= 0 && ids[i] < V, "token id %lld at %zu outside [0, %lld)", (long long)ids[i], i, (long long)V);
#pragma omp parallel for schedule(static) if ((size_t)B * T * D > 65536)
    for (int r = 0; r < B * T; r++) {
        const float* wt = Wtok + (size_t)ids[r] * (size_t)D;  // (D)
        const float* wp = Wpos + (size_t)(r % T) * (size_t)D;  // (D)
        float* o = out + (size_t)r * (size_t)D;                 // (D)
        for (int d = 0; d < D; d++) o[d] = wt[d] + wp[d];
    }
}

void embedding_backward(float* dWtok, float* dWpos, const float* dout, const int64_t* ids, int B, int T, int D,
                        int64_t V, int64_t padding_idx) {
    if (dWtok) {
        // torch embedding_dense_backward_cpu: rows in index order, the padding row skipped.
        // Each element's adds are in row order whatever the split, so the columns are split
        // over the team, a range of whole 16-column blocks (cache lines) per thread: before, one
        // thread ran this while the other fell asleep (small bf16 step: ~180 us per step).
        for (int r = 0; r < B * T; r++) CHECK(ids[r] >= 0 && ids[r] < V);
#pragma omp parallel if ((size_t)B * T * D > 65536)
        {
            const int nt = omp_get_num_threads(), th = omp_get_thread_num(), nb = (D + 15) / 16;
            const int d0 = nb * th / nt * 16, d1 = nb * (th + 1) / nt * 16 < D ? nb * (th + 1) / nt * 16 : D;
            for (int r = 0; r < B * T; r++) {
                const int64_t id = ids[r];
                if (id == padding_idx) continue;
                float* g = dWtok + (size_t)id * (size_t)D;     // (D)
                const float* s = dout + (size_t)r * (size_t)D;  // (D)
                for (int d = d0; d < d1; d++) g[d] += s[d];
            }
        }
    }
    if (dWpos) {
        // the position ids are one (1, T) row broadcast over the batch: torch sums the (B, T, D)
        // gradient over b (fp32, b in order), then scatters it into rows 0..T-1
#pragma omp parallel for schedule(static) if ((size_t)B * T * D > 65536)
        for (int t = 0; t < T; t++) {
            float* g = dWpos + (size_t)t * (size_t)D;  // (D)
            for (int d = 0; d < D; d++) {
                float s = 0.0f;
                for (int b = 0; b < B; b++) s += dout[((size_t)b * (size_t)T + (size_t)t) * (size_t)D + (size_t)d];
                g[d] += s;
            }
        }
    }
}

// ---- LayerNorm ----
// torch's own float arithmetic, forward and backward: its orders and its compiled code's fused
// multiply-adds are written out in the source (fmaf; the build has -ffp-contract=off), so every
// clone below (AVX-512, AVX2, baseline x86-64, chosen at run time by the loader's ifunc)
// computes the same bits, and those are torch's (measured against native_layer_norm and
// native_layer_norm_backward, each noted where it is used).
#define LN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

// The row's mean and biased variance as torch's LayerNorm computes them: ATen's RowwiseMoments
// (aten/src/ATen/native/cpu/moments_utils.h), Welford over chunks of LNM_CHUNK vectors of
// LNM_LANES floats (Vectorized<float> at AVX2 width, which torch's layer_norm kernel runs on
// this machine), the chunks' moments merged in a cascade (a stack of CeilLog2(chunks) levels,
// merged as a binary counter), a scalar Welford over the last N % 8 values, then the lanes
// merged into it one by one, var = m2 / N. Where torch's compiled code fuses a multiply-add
// (measured: its mean and rstd against 12,000 rows of 1 to 4,200 values at scales 1e-4 to 1e3,
// with offsets, bit for bit; 16 variants of the fusing, only this one matched every row) the
// source writes fmaf: the chunk's two updates and the lanes' merge into the scalar (its mean;
// its m2's product with the old count), and the cascade's m2 as fma(delta, delta*c*m0, m2 + m2_add).
enum { LNM_LANES = 8, LNM_CHUNK = 16, LNM_LEVELS = 64 };
// c_vecs: 1 / (j + 1) for j < LNM_CHUNK, as float divisions (the reciprocals rounded once)
static const float LNM_C[LNM_CHUNK] = {1.0f / 1,  1.0f / 2,  1.0f / 3,  1.0f / 4,  1.0f / 5,  1.0f / 6,
                                       1.0f / 7,  1.0f / 8,  1.0f / 9,  1.0f / 10, 1.0f / 11, 1.0f / 12,
                                       1.0f / 13, 1.0f / 14, 1.0f / 15, 1.0f / 16};

// LNM_LANES floats as one GCC vector: + - * lane by lane, each lane rounded as its float
// operation (what Vectorized<float>'s operators are); LNV_FMA fuses lane by lane (fmaf: one
// vfmadd on FMA targets, the libm call elsewhere, the same bits). Macros and pointers, no
// vector-typed arguments or returns: their ABI would differ between the clones.
typedef float lnv __attribute__((vector_size(LNM_LANES * sizeof(float))));
#define LNV_FMA(a, b, c)                                                                                         \
    __extension__({                                                                                              \
        const lnv a_ = (a), b_ = (b), c_ = (c);                                                                  \
        (lnv){fmaf(a_[0], b_[0], c_[0]), fmaf(a_[1], b_[1], c_[1]), fmaf(a_[2], b_[2], c_[2]),                   \
              fmaf(a_[3], b_[3], c_[3]), fmaf(a_[4], b_[4], c_[4]), fmaf(a_[5], b_[5], c_[5]),                   \
              fmaf(a_[6], b_[6], c_[6]), fmaf(a_[7], b_[7], c_[7])};                                             \
    })
#define LNV_LOAD(p)                                                                                              \
    __extension__({                                                                                              \
        lnv v_;                                                                                                  \
        memcpy(&v_, (p), sizeof v_);                                                                             \
        v_;                                                                                                      \
    })

// AddMomentsVec: merge (m0_add, m1_add, m2_add) into (m0, m1, m2), lane by lane
__attribute__((always_inline)) static inline void lnm_merge_lanes(int64_t m0_add, const lnv* m1_add,
                                                                  const lnv* m2_add, int64_t* m0, lnv* m1, lnv* m2) {
    const int64_t n = *m0 + m0_add;
    const float c = n == 0 ? 0.0f : (float)m0_add / (float)n;
    const lnv cv = (lnv){0} + c, delta = *m1_add - *m1;
    *m1 = *m1 + cv * delta;
    *m2 = LNV_FMA(delta, delta * cv * (float)*m0, *m2 + *m2_add);
    *m0 = n;
}

LN_CLONES static void layernorm_moments(const float* x, int N, float* mean, float* var) {
    const int64_t n = N / LNM_LANES, chunks = (n + LNM_CHUNK - 1) / LNM_CHUNK;
    const int depth = torch_ceil_log2((size_t)chunks);
    CHECK(depth <= LNM_LEVELS);
    int64_t m0s[LNM_LEVELS];
    lnv m1s[LNM_LEVELS], m2s[LNM_LEVELS];
    for (int d = 0; d < depth; d++) m0s[d] = 0, m1s[d] = m2s[d] = (lnv){0};
    for (int64_t i = 0; i < chunks; i++) {
        const float* xc = x + i * LNM_CHUNK * LNM_LANES;
        const int m0 = n - i * LNM_CHUNK < LNM_CHUNK ? (int)(n - i * LNM_CHUNK) : LNM_CHUNK;
        lnv m1 = {0}, m2 = {0};
        for (int j = 0; j < m0; j++) {
            const lnv v = LNV_LOAD(xc + j * LNM_LANES), delta = v - m1;
            m1 = LNV_FMA(delta, (lnv){0} + LNM_C[j], m1);  // c_vecs[j]
            m2 = LNV_FMA(delta, v - m1, m2);
        }
        lnm_merge_lanes(m0, &m1, &m2, &m0s[0], &m1s[0], &m2s[0]);
        int64_t mask = i + 1;
        for (int d = 1; d < depth && (mask & 1) == 0; d++) {
            lnm_merge_lanes(m0s[d - 1], &m1s[d - 1], &m2s[d - 1], &m0s[d], &m1s[d], &m2s[d]);
            m0s[d - 1] = 0;
            m1s[d - 1] = m2s[d - 1] = (lnv){0};
            mask >>= 1;
        }
    }
    for (int d = 1; d < depth; d++) lnm_merge_lanes(m0s[d], &m1s[d], &m2s[d], &m0s[0], &m1s[0], &m2s[0]);
    int64_t m0 = 0;
    float m1 = 0.0f, m2 = 0.0f;
    for (int64_t i = n * LNM_LANES; i < N; i++) {  // the last N % 8 values, one by one
        const float delta = x[i] - m1;
        ++m0;
        m1 = m1 + delta / (float)m0;
        m2 = m2 + delta * (x[i] - m1);
    }
    for (int l = 0; l < LNM_LANES; l++) {  // AddMoments(n, lane l) into the scalar
        const int64_t nn = m0 + n;
        const float c = nn == 0 ? 0.0f : (float)n / (float)nn;
        const float delta = m1s[0][l] - m1;
        m1 = fmaf(c, delta, m1);
        m2 = m2 + fmaf(delta * delta * c, (float)m0, m2s[0][l]);
        m0 = nn;
    }
    *mean = m1;
    *var = m2 / (float)N;
}

LN_CLONES static void layernorm_forward_row(float* yi, float* mean_i, float* rstd_i, const float* xi, const float* w,
                                            const float* b, int D, float eps) {
    float mf, var;
    layernorm_moments(xi, D, &mf, &var);
    const float rs = 1.0f / sqrtf(var + eps);  // torch: T(1) / std::sqrt(var + eps)
    // torch's vectorized map3 contracts `* gamma + beta` into one FMA (measured bit for bit:
    // reference/gen_model_goldens.py --facts); fmaf is exact in every clone
#pragma omp simd  // element-wise (without it GCC kept this loop scalar: yi might alias xi, w, b)
    for (int d = 0; d < D; d++) yi[d] = fmaf((xi[d] - mf) * rs, w[d], b[d]);
    *mean_i = mf;
    *rstd_i = rs;
}

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int N,
                       int D, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
    for (int i = 0; i < N; i++)
        layernorm_forward_row(y + (size_t)i * (size_t)D, &mean[i], &rstd[i], x + (size_t)i * (size_t)D, w, b, D, eps);
}

void layernorm_forward_operand(LayerCtx* c, float* y, float* mean, float* rstd, const float* x, const float* w,
                               const float* b, int N, int D, float eps) {
    char* yl = kept_produce(c, y, (size_t)N * (size_t)D, NULL);  // (N, D) low, or NULL
    if (!yl) {
        layernorm_forward(y, mean, rstd, x, w, b, N, D, eps);
        return;
    }
    const DType low = c->low;
    const size_t row = (size_t)D * dtype_traits(low)->size;
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
    for (int i = 0; i < N; i++) {
        float* yi = y + (size_t)i * (size_t)D;  // (D)
        layernorm_forward_row(yi, &mean[i], &rstd[i], x + (size_t)i * (size_t)D, w, b, D, eps);
        dtype_from_f32_row(yl + (size_t)i * row, low, yi, (size_t)D);  // gemm_input's conversion, row in L1
    }
}

// ATen's vec::map2/map3_reduce_all(+) at LNM_LANES float lanes, as torch's LayerNorm backward
// runs them: sum over d of p_d, p_d = dy[d] * v[d] (w NULL) or (dy[d] * v[d]) * w[d]. Fewer
// than LNM_LANES values: the products added one by one from the left; else lane k starts at
// p_k, each further full vector adds its rounded products, a partial last vector adds fused
// (fma, the compiler's contraction in torch's build: measured), then the lanes pairwise
// (lane k + half into lane k, halving).
__attribute__((always_inline)) static inline float ln_map_reduce(const float* dy, const float* v, const float* w,
                                                                int n) {
    if (n < LNM_LANES) {
        float s = w ? (dy[0] * v[0]) * w[0] : dy[0] * v[0];
        for (int j = 1; j < n; j++) s += w ? (dy[j] * v[j]) * w[j] : dy[j] * v[j];
        return s;
    }
    lnv acc = w ? (LNV_LOAD(dy) * LNV_LOAD(v)) * LNV_LOAD(w) : LNV_LOAD(dy) * LNV_LOAD(v);
    int d = LNM_LANES;
    if (w) {
        for (; d + LNM_LANES <= n; d += LNM_LANES) acc += (LNV_LOAD(dy + d) * LNV_LOAD(v + d)) * LNV_LOAD(w + d);
        for (int k = 0; d + k < n; k++) acc[k] = fmaf(dy[d + k] * v[d + k], w[d + k], acc[k]);
    } else {
        for (; d + LNM_LANES <= n; d += LNM_LANES) acc += LNV_LOAD(dy + d) * LNV_LOAD(v + d);
        for (int k = 0; d + k < n; k++) acc[k] = fmaf(dy[d + k], v[d + k], acc[k]);
    }
    float a[LNM_LANES];
    memcpy(a, &acc, sizeof a);
    for (int h = LNM_LANES / 2; h >= 1; h /= 2)
        for (int k = 0; k < h; k++) a[k] += a[k + h];
    return a[0];
}

// One row's input gradient as torch's LayerNorm backward computes it (ATen
// layer_norm_backward_frame, float): ds = sum(dy * x * w), db = sum(dy * w) (ln_map_reduce),
// b = (db * mean - ds) * a * a * a / D, c = -b * mean - db * a / D (a = rstd), then
// dx = (a * dy) * w + b * x + c, with torch's compiled contractions (measured against
// native_layer_norm_backward on 3,080 rows of 3 to 1,000 values: every element bit for bit):
// fma(db, mean, -ds), fma(-b, mean, -(db * a * scale)), fma(b, x, (a * dy) * w) + c.
// set: dxi = 0 + dx (what a zeroed dx receives; -0 becomes +0), and dx2i (may be NULL) the
// same; else dxi += dx.
LN_CLONES static void layernorm_backward_row(float* dxi, float* dx2i, bool set, const float* dyi, const float* xi,
                                             float mean, float a, const float* w, int D) {
    const float scale = 1.0f / (float)D;
    const float ds = ln_map_reduce(dyi, xi, w, D), db = ln_map_reduce(dyi, w, NULL, D);
    const float b = fmaf(db, mean, -ds) * a * a * a * scale;
    const float c = fmaf(-b, mean, -(db * a * scale));
    if (set) {
#pragma omp simd  // element-wise
        for (int d = 0; d < D; d++) {
            const float v = 0.0f + (fmaf(b, xi[d], (a * dyi[d]) * w[d]) + c);
            dxi[d] = v;
            if (dx2i) dx2i[d] = v;
        }
        return;
    }
#pragma omp simd  // element-wise
    for (int d = 0; d < D; d++) dxi[d] += fmaf(b, xi[d], (a * dyi[d]) * w[d]) + c;
}

// dw[j] += sum_i dy[i, j] * xhat[i, j], db[j] += sum_i dy[i, j] for the jn columns from j0, rows
// in order, as torch's one-thread LayerNorm backward accumulates them (its dgamma/dbeta buffer:
// t = fma(a, x, -a * mean), acc = fma(dy, t, acc); acc + dy; then 0 + acc: measured bit for bit
// against native_layer_norm_backward, 17,946 columns of 1 to 64 rows): a panel of
// colsum_panel's width, summed row by row into local accumulators (a contiguous run of every
// row, instead of 32-column blocks that walked all rows at a stride of a whole row)
LN_CLONES static void layernorm_backward_cols(float* dw, float* db, const float* dy, const float* x, const float* mean,
                                              const float* rstd, int N, int D, int j0, int jn) {
    float sw[COLSUM_PANEL], sb[COLSUM_PANEL];
    for (int k = 0; k < jn; k++) sw[k] = sb[k] = 0.0f;
    for (int i = 0; i < N; i++) {
        const float* xi = x + (size_t)i * (size_t)D + j0;    // (jn)
        const float* dyi = dy + (size_t)i * (size_t)D + j0;  // (jn)
        const float a = rstd[i], nb = -a * mean[i];
#pragma omp simd
        for (int k = 0; k < jn; k++) {
            sw[k] = fmaf(dyi[k], fmaf(a, xi[k], nb), sw[k]);
            sb[k] = sb[k] + dyi[k];
        }
    }
    for (int k = 0; k < jn; k++) {
        if (dw) dw[j0 + k] += 0.0f + sw[k];
        if (db) db[j0 + k] += 0.0f + sb[k];
    }
}

static void layernorm_backward_dx(float* dx, float* dx2, bool set, float* dw, float* db, const float* dy,
                                  const float* x, const float* mean, const float* rstd, const float* w, int N, int D) {
    if (dx) {
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
        for (int i = 0; i < N; i++)
            layernorm_backward_row(dx + (size_t)i * (size_t)D, dx2 ? dx2 + (size_t)i * (size_t)D : NULL, set,
                                   dy + (size_t)i * (size_t)D, x + (size_t)i * (size_t)D, mean[i], rstd[i], w, D);
    }
    if (dw || db) {
        const int pw = colsum_panel(D);
#pragma omp parallel for schedule(static) if ((size_t)N * D > 65536)
        for (int j0 = 0; j0 < D; j0 += pw)
            layernorm_backward_cols(dw, db, dy, x, mean, rstd, N, D, j0, D - j0 < pw ? D - j0 : pw);
    }
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* mean,
                        const float* rstd, const float* w, int N, int D) {
    layernorm_backward_dx(dx, NULL, false, dw, db, dy, x, mean, rstd, w, N, D);
}

void layernorm_backward_set(float* dx, float* dx2, float* dw, float* db, const float* dy, const float* x,
                            const float* mean, const float* rstd, const float* w, int N, int D) {
    layernorm_backward_dx(dx, dx2, true, dw, db, dy, x, mean, rstd, w, N, D);
}

// ---- linear ----
// linear_forward with x already a GEMM operand xl (N, IC) (gemm_input of x; not in slot B,
// BIAS or C, which this uses): attention converts its input once for q, k and v. yl: NULL, or
// (low modes) where the low-dtype result (N, OC) is to stay, packed, as the operand of a later
// GEMM (y receives it widened; the two hold the same values), and then y may be NULL (low
// modes: nothing reads the fp32 result).
// res (N, OC) or NULL: y = linear + res, the fp32 add of a residual connection (low modes: in
// the widening pass; fp32: a pass after the GEMM, dst += res as the model's residual add).
static Status linear_forward_xl(LayerCtx* c, float* y, void* yl, const void* xl, const float* W, const float* b,
                                const float* res, int N, int IC, int OC) {
    const void* Wl = gemm_input(c, LAYER_SCRATCH_B, W, (size_t)OC * (size_t)IC);  // (OC, IC)
    float beta = 0.0f;
    OutKind out = OUT_LOW;
    const float* bias = NULL;  // the GEMM's bias argument (backends with one)
    if (b) {
        // addmm(bias, x, W^T): C starts as the (rounded) bias, C = acc + C is rounded once
        float* bl = scratch_f32(c, LAYER_SCRATCH_BIAS, (size_t)OC);  // (OC)
        memcpy(bl, b, (size_t)OC * sizeof(float));
        round_to(bl, (size_t)OC, c->low);
        if (c->gemm->backend->bias) {
            // acc + bias, rounded once, without bias rows written and read back (gemm.h: the
            // bias is added to the whole K sum, the sum post-op's bits on onednn)
            bias = bl;
        } else if (c->low == DTYPE_F32) {
            memcpy(y, bl, (size_t)OC * sizeof(float));
            broadcast_row0(y, (size_t)OC * sizeof(float), N);
        } else {
            // the GEMM's low C directly: bl holds low values, so its low bits are what narrowing
            // fp32 bias rows of y gave (one conversion, then row copies; y is not written)
            const size_t es = dtype_traits(c->low)->size, row = (size_t)OC * es;
            char* cl = yl ? yl : scratch(c, LAYER_SCRATCH_C, (size_t)N * row);  // (N, OC) low, packed
            dtype_from_f32_row(cl, c->low, bl, (size_t)OC);
            broadcast_row0(cl, row, N);
            out = OUT_LOW_PRESET;
        }
        if (!bias) beta = 1.0f;
    }
    if (c->low == DTYPE_F32) {
        Status s = mm_on(c, c->gemm, false, true, N, OC, IC, xl, IC, Wl, IC, beta, y, OC, out, NULL, NULL, bias);
        if (status_is_ok(s) && res) {
            const Phase prev = phase_enter(c->clock, PHASE_RESIDUAL);
            add_rows_into(y, res, (size_t)N * (size_t)OC);
            phase_enter(c->clock, prev);
        }
        return s;
    }
    return mm_on(c, c->gemm, false, true, N, OC, IC, xl, IC, Wl, IC, beta, y, OC, out, yl, res, bias);
}

// x's GEMM operand (N, IC) for a linear: the low copy ffn_activation_forward_operand left in slot A when
// it is x's, else gemm_input's (slot A)
static const void* linear_input(LayerCtx* c, const float* x, int N, int IC) {
    const void* xl;
    if (c->low != DTYPE_F32 && c->operand_of == x && c->operand_n == (size_t)N * (size_t)IC) {
        xl = c->scratch[LAYER_SCRATCH_A];  // written with x by ffn_activation_forward_operand
    } else {
        xl = gemm_input(c, LAYER_SCRATCH_A, x, (size_t)N * (size_t)IC);
    }
    c->operand_of = NULL;
    return xl;
}

Status linear_forward(LayerCtx* c, float* y, const float* x, const float* W, const float* b, int N, int IC, int OC) {
    const void* xl = linear_input(c, x, N, IC);  // (N, IC)
    bool low_only;
    void* yl = kept_produce(c, y, (size_t)N * (size_t)OC, &low_only);  // y's kept copy (lin1's f1)
    return linear_forward_xl(c, low_only ? NULL : y, yl, xl, W, b, NULL, N, IC, OC);
}

Status linear_forward_residual(LayerCtx* c, float* y, const float* x, const float* W, const float* b,
                               const float* res, int N, int IC, int OC) {
    return linear_forward_xl(c, y, NULL, linear_input(c, x, N, IC), W, b, res, N, IC, OC);
}

// linear_backward with the GEMM operand of x given (xl, in a slot other than A, B, C, F32,
// BIAS, COL) or NULL (x converted here): attention's v, k, q share one conversion of x.
// Low modes, for the FFN (ffn_backward): dyl, when not NULL, is dy's GEMM operand already made
// (slot A), and then dy may be NULL (the bias gradient sums dyl's values: the same); dxl_out, when not NULL, receives the input gradient's low result R(dy @ W) (N, IC),
// packed, instead of dx += it (dx is not touched: the caller's dx is zero and reads that).
// dx_set (fp32 only): dx = dy @ W, written (beta 0) instead of added: for a dx that would hold
// zeros, the same bits but that a -0 product stays -0 (ffn_backward's dg, see there).
static Status linear_backward_dx(LayerCtx* c, float* dx, void* dxl_out, float* dW, float* db, const float* dy,
                                 const void* dyl, const float* x, const void* xl, const float* W, int N, int IC,
                                 int OC, bool dx_set) {
    Status s;
    CHECK(!dxl_out || c->low != DTYPE_F32);
    CHECK(!dx_set || (dx && c->low == DTYPE_F32), "dx_set is for an fp32 dx");
    CHECK(dy || (dyl && c->low != DTYPE_F32), "no dy");
    if (!dyl && c->low != DTYPE_F32 && c->operand_of == dy && c->operand_n == (size_t)N * (size_t)OC)
        dyl = c->scratch[LAYER_SCRATCH_A];  // written with dy by layer_round_grad_operand
    if (!dyl) dyl = gemm_input(c, LAYER_SCRATCH_A, dy, (size_t)N * (size_t)OC);  // (N, OC)
    c->operand_of = NULL;
    if (dxl_out) {
        const void* Wl = gemm_input(c, LAYER_SCRATCH_B, W, (size_t)OC * (size_t)IC);  // (OC, IC)
        s = mm_on(c, c->gemm, false, false, N, IC, OC, dyl, OC, Wl, IC, 0.0f, NULL, IC, OUT_LOW, dxl_out, NULL, NULL);
        if (!status_is_ok(s)) return s;
    } else if (dx) {
        const void* Wl = gemm_input(c, LAYER_SCRATCH_B, W, (size_t)OC * (size_t)IC);  // (OC, IC)
        if (c->low == DTYPE_F32) {
            s = mm(c, false, false, N, IC, OC, dyl, OC, Wl, IC, dx_set ? 0.0f : 1.0f, dx, IC, OUT_F32);  // dx (+)= dy @ W
        } else {
            s = mm(c, false, false, N, IC, OC, dyl, OC, Wl, IC, 0.0f, dx, IC, OUT_LOW_ADD);  // dx += R(dy @ W)
        }
        if (!status_is_ok(s)) return s;
    }
    if (dW) {
        if (!xl) xl = gemm_input(c, LAYER_SCRATCH_B, x, (size_t)N * (size_t)IC);  // (N, IC)
        // dw_write: dW = dy^T @ x (rounded), else dW += it; the same bits where dW was zero
        // (0 + v == v), except that a -0 result stays -0, as torch's first .grad does
        if (c->low == DTYPE_F32) {
            s = mm(c, true, false, OC, IC, N, dyl, OC, xl, IC, c->dw_write ? 0.0f : 1.0f, dW, IC, OUT_F32);
        } else {
            float* t = scratch_f32(c, LAYER_SCRATCH_F32, (size_t)OC * (size_t)IC);  // (OC, IC)
            s = mm(c, true, false, OC, IC, N, dyl, OC, xl, IC, 0.0f, t, IC, OUT_F32);
            if (status_is_ok(s)) {
                const Phase prev = phase_enter(c->clock, PHASE_CONVERT);
                round_param_grad(c, dW, t, (size_t)OC * (size_t)IC, c->dw_write);
                phase_enter(c->clock, prev);
            }
        }
        if (!status_is_ok(s)) return s;
        c->dw_written++;
    }
    if (db) {
        float* t = scratch_f32(c, LAYER_SCRATCH_BIAS, (size_t)OC);  // (OC)
        // addmm's bias gradient is grad.sum(0) in torch's float cascade order (torch_reduce.h,
        // bit for bit against Tensor.sum); in the low modes over the low values of dy, which
        // torch sums widened (its grad is the low tensor), then rounded to the low dtype below
        if (dy) torch_sum_dim0_f32(t, dy, (size_t)N, (size_t)OC);
        else torch_sum_dim0_low(t, dyl, c->low, (size_t)N, (size_t)OC);  // ffn_backward: df1 only as its low copy
        amp_round_param_grad(t, (size_t)OC, c->low, c->counters);
        if (c->dw_write) {  // as dW: written (db holds zeros), so a -0 stays -0
            memcpy(db, t, (size_t)OC * sizeof(float));
        } else {
            for (int j = 0; j < OC; j++) db[j] += t[j];
        }
    }
    return status_ok();
}

static Status linear_backward_ops(LayerCtx* c, float* dx, void* dxl_out, float* dW, float* db, const float* dy,
                                  const void* dyl, const float* x, const void* xl, const float* W, int N, int IC,
                                  int OC) {
    return linear_backward_dx(c, dx, dxl_out, dW, db, dy, dyl, x, xl, W, N, IC, OC, false);
}

static Status linear_backward_xl(LayerCtx* c, float* dx, float* dW, float* db, const float* dy, const float* x,
                                 const void* xl, const float* W, int N, int IC, int OC) {
    return linear_backward_ops(c, dx, NULL, dW, db, dy, NULL, x, xl, W, N, IC, OC);
}

Status linear_backward(LayerCtx* c, float* dx, float* dW, float* db, const float* dy, const float* x,
                       const float* W, int N, int IC, int OC) {
    return linear_backward_xl(c, dx, dW, db, dy, x, NULL, W, N, IC, OC);
}

// ---- GELU ----
// reference: pytorch aten/src/ATen/native/Activation.cpp gelu_out_cpu / gelu_backward_out_cpu
// (GeluType::None): on fp32 tensors torch hands GELU to oneDNN's eltwise_gelu_erf (use_mkldnn:
// contiguous float tensors, torch.backends.mkldnn enabled, the default), so torch's fp32 GELU is
// oneDNN's kernel, which depends on the ISA oneDNN's JIT picks (jit_uni_eltwise_injector):
//   forward, AVX-512 core (F + BW + VL + DQ): erf(x / sqrt 2) by a piecewise degree-5 minimax
//     polynomial in |x| (gelu_onednn.c's coefficients), x * (1 + erf) * 0.5 (gelu_f32_mm_rows);
//   forward, other x86 ISAs: Abramowitz-Stegun 7.1.26 with oneDNN's exp (gelu_as_forward);
//   backward, every ISA: dy * f(x), f = 0.5 + x * exp(-x^2/2) / sqrt(2 pi) + 0.5 * erf(x / sqrt 2)
//     by the same Abramowitz-Stegun erf (gelu_as_grad).
// Each is written out below operation by operation, fp32 ops in oneDNN's order (FMAs where its JIT
// has them), no denormal flushing (torch's fp32 GELU keeps subnormal inputs and results).
// Measured against torch 2.15's F.gelu and gelu_backward on every one of the 2^32 fp32 patterns,
// forward (AVX-512, and AVX2 by ONEDNN_MAX_CPU_ISA=AVX2) and backward (dy = 1; dy * f is one
// rounding): bit-equal on all (golden activations_f32 keeps 2^16 of them for test_model_golden).
// Off x86 the same formulas are used (torch's oneDNN there was not measured).

// c ? a : b through bit masks. Written as `c ? a : b`, GCC 12 merges such selects with nearby
// comparisons into branches, and a loop with branches is not vectorized (it kept the AVX2 and
// baseline clones of GELU scalar). The value is exactly that of `c ? a : b`.
// select_u32 is the same on 32-bit integers (select_bits applies it to the floats' bits).
__attribute__((always_inline)) static inline uint32_t select_u32(bool c, uint32_t a, uint32_t b) {
    const uint32_t m = c ? 0xFFFFFFFFu : 0u;
    return (a & m) | (b & ~m);
}

__attribute__((always_inline)) static inline float select_bits(bool c, float a, float b) {
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    const uint32_t r = select_u32(c, ua, ub);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
}

// SLEEF's xexpf (u10) polynomial on d clamped to [-104, top], +0 below -104: range reduction by
// ln 2 in two parts, degree-6 polynomial, scaling by 2^q in two halves; max error 0.9824 ulp
// over every float in [-20, 20] against double exp (at x = -0x1.77527ap+2; ATen's
// Vectorized<float>::exp). Clamped with comparisons
// (vectorizable, unlike fminf/fmaxf); a NaN d becomes -104 here, so the result is not NaN: the
// callers keep NaN through a factor of x (SiLU, ATen's GELU) or their own select (softmax_exp).
__attribute__((always_inline)) static inline float vexp_clamped(float d, float top) {
    const float lo = select_bits(d > -104.0f, d, -104.0f), hi = select_bits(d < top, d, top);
    const float dc = select_bits(d > -104.0f, hi, lo);
    const float q = rintf(dc * 1.442695040888963407359924681001892137426645954152985934135449406931f);
    float s = fmaf(q, -0.693145751953125f, dc);
    s = fmaf(q, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = fmaf(u, s, 0.00139304355252534151077271f);
    u = fmaf(u, s, 0.00833336077630519866943359f);
    u = fmaf(u, s, 0.0416664853692054748535156f);
    u = fmaf(u, s, 0.166666671633720397949219f);
    u = fmaf(u, s, 0.5f);
    u = 1.0f + fmaf(s * s, u, s);
    const int32_t qi = (int32_t)q, m = qi >> 1;
    const uint32_t b1 = (uint32_t)(m + 127) << 23, b2 = (uint32_t)(qi - m + 127) << 23;
    float p1, p2;
    memcpy(&p1, &b1, sizeof p1);
    memcpy(&p2, &b2, sizeof p2);
    u = u * p1 * p2;
    return select_bits(d < -104.0f, 0.0f, u);
}

// the softmax's exp: its arguments are <= 0 (or NaN), so the top clamp 88.7 never acts
__attribute__((always_inline)) static inline float vexp(float d) { return vexp_clamped(d, 88.7f); }

// exp as SLEEF's xexpf (u10) over its whole range, ATen's Vectorized<float>::exp: the top clamp at
// 88.72283905206835 and +inf above it (SiLU's exp(-x) for x < -88.72)
__attribute__((always_inline)) static inline float vexp_full(float d) {
    return select_bits(d > 88.72283905206835f, INFINITY, vexp_clamped(d, 88.72283905206835f));
}

// ATen's sigmoid: 1 / (1 + exp(-x)) with SLEEF's exp, NaN in -> NaN out (vexp_full alone maps a
// NaN to exp(-104))
__attribute__((always_inline)) static inline float sigmoid_sleef(float x) {
    return select_bits(x != x, x, 1.0f / (1.0f + vexp_full(-x)));
}

// oneDNN's exp (exp_compute_vector_fwd): x clamped to [ln FLT_MIN, ln FLT_MAX] (vminps/vmaxps: a
// NaN x becomes the top), n = floor(x log2e + 0.5), r = x - n ln2 (one FMA), degree-5 polynomial,
// times 2^(n-1) and then 2 (2^(n-1) is 0 where x < ln FLT_MIN: the result is then 0)
__attribute__((always_inline)) static inline float onednn_exp(float x) {
    const float lo = -0x1.5d58ap+6f, hi = 0x1.62e43p+6f;
    const bool under = x < lo;
    float s = select_bits(x < hi, x, hi);
    s = select_bits(s > lo, s, lo);
    // floor(v) as rint(v) less 1 where that rounded up (exact: integers of this range; GCC 12
    // vectorizes rintf, not floorf)
    const float v = s * 0x1.715476p+0f + 0.5f, rv = rintf(v);
    const float fx = rv - select_bits(rv > v, 1.0f, 0.0f);
    const float r = fmaf(-fx, 0x1.62e43p-1f, s);
    const uint32_t pb = select_u32(under, 0u, (uint32_t)((int32_t)(fx - 1.0f) + 127) << 23);
    float p = 0x1.0f9f9cp-7f;
    p = fmaf(p, r, 0x1.573a1ap-5f);
    p = fmaf(p, r, 0x1.555a8p-3f);
    p = fmaf(p, r, 0x1.fffdc6p-2f);
    p = fmaf(p, r, 0x1.fffff6p-1f);
    p = fmaf(p, r, 1.0f);
    float scale;
    memcpy(&scale, &pb, sizeof scale);
    return p * scale * 2.0f;
}

// oneDNN's Abramowitz-Stegun polynomial in t = 1 / fma(p, |x|, 1)
__attribute__((always_inline)) static inline float onednn_as_poly(float t) {
    float r = 0x1.0fb844p+0f;
    r = fmaf(r, t, -0x1.7401c6p+0f);
    r = fmaf(r, t, 0x1.6be1c6p+0f);
    r = fmaf(r, t, -0x1.23531cp-2f);
    return fmaf(r, t, 0x1.04f20cp-2f);
}

// sign(s) xor v: the erf's sign
__attribute__((always_inline)) static inline float xor_sign_of(float v, float s) {
    uint32_t uv, us;
    memcpy(&uv, &v, sizeof uv);
    memcpy(&us, &s, sizeof us);
    uv ^= us & 0x80000000u;
    float out;
    memcpy(&out, &uv, sizeof out);
    return out;
}

// GELU forward, oneDNN's non-AVX-512 kernel: xr = s / sqrt 2, t = 1 / fma(p, |xr|, 1),
// erf = sign(s) xor fma(-exp(-xr^2) * t, poly(t), 1), S = 0.5 s, gelu = fma(erf, S, S)
__attribute__((always_inline)) static inline float gelu_as_forward(float s) {
    const float xr = s * 0x1.6a09e6p-1f;
    const float t = 1.0f / fmaf(0x1.4f740ap-2f, fabsf(xr), 1.0f);
    const float e = -onednn_exp(-(xr * xr)) * t;
    const float erf = xor_sign_of(fmaf(e, onednn_as_poly(t), 1.0f), s);
    const float S = s * 0.5f;
    return fmaf(erf, S, S);
}

// GELU's derivative, oneDNN's backward (every ISA): R = s / sqrt 2, Q = exp(-R^2),
// T = (R / sqrt pi) * Q, W = 1 / fma(p, |R|, 1), erf = sign(R) xor fma(-Q * W, poly(W), 1),
// f = fma(erf, 0.5, T + 0.5); the backward is dy * f
__attribute__((always_inline)) static inline float gelu_as_grad(float s) {
    const float R = s * 0x1.6a09e6p-1f;
    const float Q = onednn_exp(-(R * R));
    const float T = R * 0x1.20dd74p-1f * Q;
    const float W = 1.0f / fmaf(0x1.4f740ap-2f, fabsf(R), 1.0f);
    const float erf = xor_sign_of(fmaf(-Q * W, onednn_as_poly(W), 1.0f), R);
    return fmaf(erf, 0.5f, T + 0.5f);
}

#define GELU_CLONES SIMD_CLONES

// ReLU, torch's clamp_min(x, 0) (scalar: a < min ? min : a; vectorized: maxps(min, a), which
// returns a for a NaN a and for a == +-0): y = x < 0 ? +0 : x, so -0 and NaN pass unchanged. No
// rounding: the output is x or 0 in any dtype.
GELU_CLONES static void relu_rows(float* y, const float* x, size_t m) {
#pragma omp simd
    for (size_t i = 0; i < m; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

// t = threshold_backward(dy, relu(x), 0) = relu(x) <= 0 ? +0 : dy, and relu(x) <= 0 exactly when
// x <= 0 (-0 included; a NaN x passes dy). A select, not dy * (0 or 1): an inf or NaN dy where
// x <= 0 gives 0, as torch's does.
GELU_CLONES static void relu_grad_rows(float* t, const float* dy, const float* x, size_t m) {
#pragma omp simd
    for (size_t i = 0; i < m; i++) t[i] = x[i] <= 0.0f ? 0.0f : dy[i];
}


// GELU on bf16/fp16 tensors as ATen's reduced-type kernel computes it (Gelu.h vectorized_gelu on
// the widened floats): x * 0.5 * (1 + erf(x * alpha)) with Vectorized<float>::erf, which is not
// the fp32 path's (oneDNN's, above) but Abramowitz-Stegun 7.1.26 written with FMAs and SLEEF's exp:
// t = 1 / fma(p, |x|, 1), r = ((((p5 t + p4) t + p3) t + p2) t + p1 (FMAs), erf = sign(x) xor
// fma(-exp(-x*x) * t, r, 1), exp SLEEF's u10; the backward dy * (0.5 (1 + erf(x alpha)) + x * beta *
// exp(-x*x/2)). Measured against torch 2.15 on every pattern: fp16 forward and backward, and bf16
// with torch.backends.mkldnn disabled, bit for bit after rounding (torch's fp16 gelu is not its
// fp32 gelu rounded: 403 patterns differ). Where torch hands bf16 GELU to oneDNN the tables
// follow gelu_low_aten (below).
__attribute__((always_inline)) static inline float verf_aten(float a) {
    const float t = 1.0f / fmaf(0.3275911f, fabsf(a), 1.0f);
    float r = fmaf(1.061405429f, t, -1.453152027f);
    r = fmaf(r, t, 1.421413741f);
    r = fmaf(r, t, -0.284496736f);
    r = fmaf(r, t, 0.254829592f);
    const float e = -vexp_full(-(a * a));
    return xor_sign_of(fmaf(e * t, r, 1.0f), a);  // sign(x) xor: the erf's sign
}

// ATen's reduced-type GELU (verf_aten, with vexp_full): forward y = x * 0.5 * (1 + erf(x / sqrt 2))
// and gradient t = dy * (cdf + x * pdf)
GELU_CLONES static void gelu_rows_aten(float* y, const float* x, size_t m) {
#pragma omp simd  // element-wise: lanes change no bit
    for (size_t i = 0; i < m; i++) {
        const float u = x[i] * (float)M_SQRT1_2;
        y[i] = x[i] * 0.5f * (1.0f + verf_aten(u));
    }
}

GELU_CLONES static void gelu_grad_rows_aten(float* t, const float* dy, const float* x, size_t m) {
    const float kBeta = (float)(M_2_SQRTPI * M_SQRT1_2 * 0.5);
#pragma omp simd  // element-wise: lanes change no bit
    for (size_t i = 0; i < m; i++) {
        const float u = x[i] * (float)M_SQRT1_2, e = x[i] * x[i] * -0.5f;
        const float cdf = 0.5f * (1.0f + verf_aten(u));
        const float pdf = kBeta * vexp_full(e);
        t[i] = dy[i] * (cdf + x[i] * pdf);
    }
}

// torch's fp32 GELU (oneDNN's, above): the Abramowitz-Stegun forward of the non-AVX-512 kernels and
// the backward t = dy * f(x) of every kernel (one rounding)
GELU_CLONES static void gelu_f32_as_rows(float* y, const float* x, size_t m) {
#pragma omp simd  // element-wise: lanes change no bit
    for (size_t i = 0; i < m; i++) y[i] = gelu_as_forward(x[i]);
}

GELU_CLONES static void gelu_f32_grad_rows(float* t, const float* dy, const float* x, size_t m) {
#pragma omp simd  // element-wise: lanes change no bit
    for (size_t i = 0; i < m; i++) t[i] = dy[i] * gelu_as_grad(x[i]);
}

// The AVX-512 forward, oneDNN's minimax kernel 16 lanes at a time: piece index from |x|'s bits,
// (bits + 0xc21fffff) >> 21 (arithmetic) clamped to [1, 24], 23 (erf = 1) where |x| > 5.5426;
// each degree's coefficient picked from its 32-entry row by vpermt2ps; p = Horner by FMAs in |x|;
// erf = sign(x) xor p; y = (x * (p + 1)) * 0.5. Every lane's operations are those of
// gelu_onednn.c's scalar model without its flushing (gelu_onednn_f32_forward; test_layers
// compares the two on random bit patterns).
#if defined(__x86_64__)
#define GELU_MM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
GELU_MM_AVX512 static inline __m512 gelu_mm16(__m512 x, const __m512 lo[6], const __m512 hi[6]) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512i xi = _mm512_castps_si512(x);
    const __m512i pos = _mm512_andnot_si512(sign, xi);
    const __m512 xp = _mm512_castsi512_ps(pos);
    __m512i idx = _mm512_srai_epi32(_mm512_add_epi32(pos, _mm512_set1_epi32((int)0xc21fffffu)), 21);
    idx = _mm512_min_epi32(_mm512_max_epi32(idx, _mm512_set1_epi32(1)), _mm512_set1_epi32(24));
    const __mmask16 beyond = _mm512_cmp_ps_mask(_mm512_set1_ps(0x1.62b9dcp+2f), xp, _CMP_LT_OS);
    idx = _mm512_mask_mov_epi32(idx, beyond, _mm512_set1_epi32(23));
    __m512 p = _mm512_permutex2var_ps(lo[5], idx, hi[5]);
    for (int d = 4; d >= 0; d--) p = _mm512_fmadd_ps(p, xp, _mm512_permutex2var_ps(lo[d], idx, hi[d]));
    p = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(p), _mm512_and_si512(xi, sign)));
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_mul_ps(_mm512_mul_ps(x, p), _mm512_set1_ps(0.5f));
}

GELU_MM_AVX512 static void gelu_f32_mm_rows(float* y, const float* x, size_t m) {
    __m512 lo[6], hi[6];
    for (int d = 0; d < 6; d++) {
        lo[d] = _mm512_castsi512_ps(_mm512_loadu_si512(gelu_onednn_minimax[d]));
        hi[d] = _mm512_castsi512_ps(_mm512_loadu_si512(gelu_onednn_minimax[d] + 16));
    }
    size_t i = 0;
    for (; i + 16 <= m; i += 16) _mm512_storeu_ps(y + i, gelu_mm16(_mm512_loadu_ps(x + i), lo, hi));
    if (i < m) {
        const __mmask16 k = (__mmask16)((1u << (m - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, k, gelu_mm16(_mm512_maskz_loadu_ps(k, x + i), lo, hi));
    }
}
#endif

static int g_gelu_f32_force = -1;  // tests: -1 as torch on this CPU, 0 the A&S forward, 1 the minimax one

// Whether oneDNN's JIT here is AVX-512 core (AVX-512 F, BW, VL, DQ: gelu_onednn_torch_uses'
// check), where torch runs the minimax forward and gelu_f32_mm_rows can run
static bool gelu_f32_mm_here(void) {
#if defined(__x86_64__)
    return cpu_features()->avx512f && gelu_onednn_torch_uses();
#else
    return false;
#endif
}

bool layers_gelu_f32_force(int kernel) {
    if (kernel == 1 && !gelu_f32_mm_here()) return false;
    g_gelu_f32_force = kernel;
    return true;
}

// Which fp32 forward torch runs here: oneDNN's minimax kernel on AVX-512 core, else the
// Abramowitz-Stegun one
bool layers_gelu_f32_minimax(void) {
    return g_gelu_f32_force >= 0 ? g_gelu_f32_force == 1 : gelu_f32_mm_here();
}

static void gelu_f32_rows(float* y, const float* x, size_t m) {
#if defined(__x86_64__)
    if (layers_gelu_f32_minimax()) {
        gelu_f32_mm_rows(y, x, m);
        return;
    }
#endif
    gelu_f32_as_rows(y, x, m);
}

// Which GELU torch runs on tensors of dt: ATen's reduced-type kernel (gelu_rows_aten) for fp16, and
// for bf16 where torch does not hand it to oneDNN; oneDNN's (gelu_onednn.h) for bf16 where it does;
// else (fp32) oneDNN's fp32 kernel (gelu_f32_rows, gelu_f32_grad_rows; the bf16 backward's factor
// where torch uses oneDNN is that kernel's too).
static bool gelu_low_aten(DType dt) {
    return dt == DTYPE_F16 || (dt == DTYPE_BF16 && !gelu_onednn_torch_uses());
}
static bool gelu_low_onednn(DType dt) { return dt == DTYPE_BF16 && gelu_onednn_torch_uses(); }

static void gelu_rows_onednn(float* y, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) y[i] = gelu_onednn_forward(x[i]);
}

// SiLU as ATen's CPU kernels compute it (silu_kernel / silu_backward_kernel, vectorized; the
// reduced types in float, then rounded): y = x / (1 + exp(-x)); the gradient
// dy * s * fma(x, 1 - s, 1) with s = 1 / (1 + exp(-x)) (the compiled kernel fuses 1 + x * (1 - s)).
// Measured against torch 2.15 (AVX-512): every bf16 and fp16 pattern, forward and backward, bit
// for bit after rounding; 1.2M fp32 inputs bit for bit except ATen's scalar tail elements, which
// use std::exp (1 element: 1 ulp). silu(-inf) = NaN and silu(x < -88.72) = -0, as torch's.
GELU_CLONES static void silu_rows(float* y, const float* x, size_t m) {
#pragma omp simd
    for (size_t i = 0; i < m; i++) y[i] = x[i] / (1.0f + vexp_full(-x[i]));
}

GELU_CLONES static void silu_grad_rows(float* t, const float* dy, const float* x, size_t m) {
#pragma omp simd
    for (size_t i = 0; i < m; i++) {
        const float s = 1.0f / (1.0f + vexp_full(-x[i]));
        t[i] = dy[i] * s * fmaf(x[i], 1.0f - s, 1.0f);
    }
}

// tanh as torch 2.15's Vectorized<float>::tanh computes it on x86 (AVX2 and AVX-512 builds):
// SLEEF's xtanhf (u10), tanh(|x|) = (e - 1/e) / (e + 1/e) with e = exp(|x|) as a double-float
// (expk2f), 1 above |x| > 8.664339742, the sign of x; SLEEF's double-float helpers in their
// FMA forms (ENABLE_FMA_SP, as those builds compile them). Checked against the
// Sleef_tanhf16_u10avx512f that libtorch_cpu.so exports, on every one of the 2^32 float patterns
// (NaNs: a NaN): bit for bit. Not torch.tanh on fp32 tensors, which MKL's vsTanh computes
// (0.2% of floats differ by an ulp); this is the tanh inside ATen's GELU kernels.
typedef struct {
    float x, y;
} SlF2;  // SLEEF's vfloat2: an unevaluated sum x + y
__attribute__((always_inline)) static inline SlF2 sl_f2(float x, float y) { return (SlF2){x, y}; }
__attribute__((always_inline)) static inline float sl_pow2i(int q) {
    const uint32_t u = (uint32_t)(q + 0x7f) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
__attribute__((always_inline)) static inline float sl_ldexp2(float d, int e) {
    return d * sl_pow2i(e >> 1) * sl_pow2i(e - (e >> 1));
}
__attribute__((always_inline)) static inline SlF2 sl_add2_f_f(float a, float b) {
    const float s = a + b, v = s - a;
    return sl_f2(s, (a - (s - v)) + (b - v));
}
__attribute__((always_inline)) static inline SlF2 sl_add_f2_f(SlF2 a, float b) {
    const float s = a.x + b;
    return sl_f2(s, ((a.x - s) + b) + a.y);
}
__attribute__((always_inline)) static inline SlF2 sl_add2_f2_f(SlF2 a, float b) {
    const float s = a.x + b, v = s - a.x;
    return sl_f2(s, ((a.x - (s - v)) + (b - v)) + a.y);
}
__attribute__((always_inline)) static inline SlF2 sl_add2_f2_f2(SlF2 a, SlF2 b) {
    const float s = a.x + b.x, v = s - a.x;
    return sl_f2(s, ((a.x - (s - v)) + (b.x - v)) + (a.y + b.y));
}
__attribute__((always_inline)) static inline SlF2 sl_add_f_f2(float a, SlF2 b) {
    const float s = a + b.x;
    return sl_f2(s, ((a - s) + b.x) + b.y);
}
__attribute__((always_inline)) static inline SlF2 sl_add_f2_f2(SlF2 a, SlF2 b) {  // |a| >= |b|
    const float s = a.x + b.x;
    return sl_f2(s, (((a.x - s) + b.x) + a.y) + b.y);
}
__attribute__((always_inline)) static inline SlF2 sl_mul_f2_f(SlF2 a, float b) {
    const float s = a.x * b;
    return sl_f2(s, fmaf(a.y, b, fmaf(a.x, b, -s)));
}
__attribute__((always_inline)) static inline SlF2 sl_mul_f2_f2(SlF2 a, SlF2 b) {
    const float s = a.x * b.x;
    return sl_f2(s, fmaf(a.x, b.y, fmaf(a.y, b.x, fmaf(a.x, b.x, -s))));
}
__attribute__((always_inline)) static inline SlF2 sl_squ_f2(SlF2 a) {
    const float s = a.x * a.x;
    return sl_f2(s, fmaf(a.x + a.x, a.y, fmaf(a.x, a.x, -s)));
}
__attribute__((always_inline)) static inline SlF2 sl_rec_f2(SlF2 d) {
    const float s = 1.0f / d.x;
    return sl_f2(s, s * fmaf(-d.y, s, fmaf(-d.x, s, 1.0f)));
}
__attribute__((always_inline)) static inline SlF2 sl_div_f2(SlF2 n, SlF2 d) {
    const float t = 1.0f / d.x, s = n.x * t, u = fmaf(t, n.x, -s);
    const float v = fmaf(-d.y, t, fmaf(-d.x, t, 1.0f));
    return sl_f2(s, fmaf(s, v, fmaf(n.y, t, u)));
}
// exp(d) as a double-float for 0 <= d <= 8.67 (xtanhf's range here: no under- or overflow)
__attribute__((always_inline)) static inline SlF2 sl_expk2f(SlF2 d) {
    float u = (d.x + d.y) * 1.442695040888963407359924681001892137426645954152985934135449406931f;
    const int q = (int)rintf(u);  // vrint: to nearest, ties to even (the default rounding mode)
    SlF2 s = sl_add2_f2_f(d, (float)q * -0.693145751953125f);
    s = sl_add2_f2_f(s, (float)q * -1.428606765330187045e-06f);
    u = 0.1980960224e-3f;
    u = fmaf(u, s.x, 0.1394256484e-2f);
    u = fmaf(u, s.x, 0.8333456703e-2f);
    u = fmaf(u, s.x, 0.4166637361e-1f);
    SlF2 t = sl_add2_f2_f(sl_mul_f2_f(s, u), 0.166666659414234244790680580464e+0f);
    t = sl_add2_f2_f(sl_mul_f2_f2(s, t), 0.5f);
    t = sl_add2_f2_f2(s, sl_mul_f2_f2(sl_squ_f2(s), t));
    t = sl_add_f_f2(1.0f, t);
    return sl_f2(sl_ldexp2(t.x, q), sl_ldexp2(t.y, q));
}
// (selects through select_bits and rintf, so that the loops calling it vectorize: see select_bits)
__attribute__((always_inline)) static inline float vtanh_sleef(float x) {
    const float a = fabsf(x);
    const bool small = a <= 8.664339742f;  // false for NaN: SLEEF's select gives 1 (then NaN below)
    SlF2 d = sl_expk2f(sl_f2(select_bits(small, a, 0.0f), 0.0f));
    const SlF2 e = sl_rec_f2(d);
    d = sl_div_f2(sl_add_f2_f2(d, sl_f2(-e.x, -e.y)), sl_add_f2_f2(d, e));
    const float y = copysignf(select_bits(small, d.x + d.y, 1.0f), x);  // y >= 0: SLEEF's mulsign
    return select_bits(x != x, x, y);
}

// log as SLEEF's xlogf_u1 (Vectorized<float>::log, Sleef_logf*_u10), for the positive normal
// finite arguments of log_softmax's sum (>= 1); the double-float helpers in their FMA forms. Checked
// against the Sleef_logf8_u10avx2 and Sleef_logf16_u10avx512f libtorch_cpu.so exports on all
// 2,130,706,432 positive normal floats: bit for bit.
__attribute__((always_inline)) static inline float vlog_sleef(float d) {
    const float q = d * (1.0f / 0.75f);
    uint32_t qb, db;
    memcpy(&qb, &q, sizeof qb);
    memcpy(&db, &d, sizeof db);
    const int e = (int)((qb >> 23) & 0xffu) - 0x7f;  // vilogb2k
    db -= (uint32_t)e << 23;                          // vldexp3: m = d / 2^e, in [0.75, 1.5)
    float m;
    memcpy(&m, &db, sizeof m);
    SlF2 s = sl_mul_f2_f(sl_f2(0.69314718246459960938f, -1.904654323148236017e-09f), (float)e);
    const SlF2 x = sl_div_f2(sl_add2_f_f(-1.0f, m), sl_add2_f_f(1.0f, m));
    const float x2 = x.x * x.x;
    float t = 0.3027294874e+0f;
    t = fmaf(t, x2, 0.3996108174e+0f);
    t = fmaf(t, x2, 0.6666694880e+0f);
    s = sl_add_f2_f2(s, sl_f2(x.x * 2.0f, x.y * 2.0f));
    s = sl_add_f2_f(s, (x2 * x.x) * t);
    return s.x + s.y;
}


// log1p as SLEEF's xlog1pf (u10; Vectorized<float>::log1p, Sleef_log1pf16_u10) in the version torch
// 2.15 bundles (SLEEF >= 3.8: above 0x1.2ced32p+126 it is xlogf_u1(d)): e = the exponent of
// (d + 1) / 0.75 (vgetexp; for d > -1 that quotient is a positive normal), m = fma(d, 2^-e,
// 2^-e - 1), x = m / (2 + m) and log1p = e ln2 + 2x + x^3 P(x^2) in double-float; -1 gives -inf,
// d < -1 NaN, -0 stays -0. Checked against the Sleef_log1pf16_u10avx512f that libtorch_cpu.so
// exports, on every one of the 2^32 float patterns (NaNs: a NaN): bit for bit.
#define LOG1PF_BOUND 0x1.2ced32p+126f
__attribute__((always_inline)) static inline float vlog1p_sleef(float d) {
    const float q = (d + 1.0f) * (1.0f / 0.75f);
    uint32_t qb, db;
    memcpy(&qb, &q, sizeof qb);
    memcpy(&db, &d, sizeof db);
    const int e = (int)((qb >> 23) & 0xffu) - 0x7f;
    const uint32_t tb = (uint32_t)(0x7f - e) << 23;
    float t;
    memcpy(&t, &tb, sizeof t);
    const float m = fmaf(d, t, t - 1.0f);
    SlF2 s = sl_mul_f2_f(sl_f2(0.69314718246459960938f, -1.904654323148236017e-09f), (float)e);
    const float two_m = 2.0f + m;
    const SlF2 x = sl_div_f2(sl_f2(m, 0.0f), sl_f2(two_m, (2.0f - two_m) + m));
    const float x2 = x.x * x.x;
    float p = 0.3027294874e+0f;
    p = fmaf(p, x2, 0.3996108174e+0f);
    p = fmaf(p, x2, 0.6666694880e+0f);
    s = sl_add_f2_f2(s, sl_f2(x.x * 2.0f, x.y * 2.0f));
    s = sl_add_f2_f(s, (x2 * x.x) * p);
    float r = s.x + s.y;
    const bool big = !(d <= LOG1PF_BOUND);  // also NaN: the log below keeps it NaN
    r = select_bits(big, d == INFINITY ? INFINITY : vlog_sleef(d), r);
    r = select_bits(-1.0f > d, NAN, r);
    r = select_bits(d == -1.0f, -INFINITY, r);
    r = select_bits(db == 0x80000000u, -0.0f, r);
    return select_bits(d != d, d, r);
}

// GELU's tanh form as ATen computes it (Gelu.h vectorized_gelu_approximated_with_tanh; the reduced
// types in float, then rounded; transformers' "gelu_pytorch_tanh"):
// y = (0.5 x) (1 + tanh(beta fma(kappa, (x x) x, x))), tanh vtanh_sleef; the backward
// (GeluBackwardKernelImpl, tanh branch) dy * (0.5 (1 + t) + ((0.5 x) fma(-t, t, 1)) (beta
// fma(3 kappa, x x, 1))). The three FMAs are the compiler's contractions in torch's build (its
// Vectorized<float> operators are plain vector arithmetic): measured against torch 2.15 on 8M
// fp32 inputs (forward) and 4M (backward): 0 differ with them, 43,054 / 22,975+ without one.
// ATen's scalar tail (the numel % vector-width last elements of a tensor) calls std::tanh
// instead: there a value may differ by one rounding.
#define GELU_TANH_BETA ((float)(M_SQRT2 * M_2_SQRTPI * 0.5))
#define GELU_TANH_KAPPA ((float)0.044715)
GELU_CLONES static void gelu_tanh_rows(float* y, const float* x, size_t m) {
#pragma omp simd
    for (size_t i = 0; i < m; i++) {
        const float v = x[i], inner = GELU_TANH_BETA * fmaf(GELU_TANH_KAPPA, (v * v) * v, v);
        y[i] = (0.5f * v) * (1.0f + vtanh_sleef(inner));
    }
}

GELU_CLONES static void gelu_tanh_grad_rows(float* t, const float* dy, const float* x, size_t m) {
    const float k3 = 3.0f * GELU_TANH_KAPPA;  // kThreeVec * kKappaVec, rounded once
#pragma omp simd
    for (size_t i = 0; i < m; i++) {
        const float v = x[i], sq = v * v;
        const float th = vtanh_sleef(GELU_TANH_BETA * fmaf(GELU_TANH_KAPPA, sq * v, v));
        const float left_d = 0.5f * (1.0f + th);
        const float right_d = ((0.5f * v) * fmaf(-th, th, 1.0f)) * (GELU_TANH_BETA * fmaf(k3, sq, 1.0f));
        t[i] = dy[i] * (left_d + right_d);
    }
}

// transformers' NewGELUActivation ("gelu_new"): 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
// pow(x, 3)))) as eight torch operations on the activation's own dtype, each result rounded to it
// (R; in fp32 the identity), and autograd's backward through them, on chunks of at most
// GELU_NEW_CHUNK values. Forward: p = pow(x, 3) (bf16: Vectorized<BFloat16>'s R(R(x x) x); fp16
// and fp32: (x x) x in float, rounded once), m = R(k p), a = R(x + m), s = R(c a), t = R(tanh s),
// o = R(1 + t), h = R(0.5 x), y = R(h o), with k = f32(0.044715), c = f32(sqrt(2/pi)) (a Python
// float times a tensor: the float scalar) and tanh vtanh_sleef (Vectorized tanh: the reduced
// types' kernel; fp32 tensors get MKL's vsTanh in torch, which differs by an ulp on 0.2% of floats:
// fp32 is compared within tolerances anyway). Backward, in autograd's order (nodes by decreasing
// creation): dh = R(dy o), do = R(dy h); ds = R(do fma(-t, t, 1)) (tanh_backward); da = R(ds c);
// dp = R(da k); pow_backward's R(dp R(3 R(x x))); 0.5 x's R(dh 0.5); x's gradient sums the three
// in arrival order, R(R(da + dpow) + dhalf). (Clones as GELU's: the baseline build has no FMA
// instruction, and fmaf there is a library call.)
enum { GELU_NEW_CHUNK = 256 };
#define GELU_NEW_K ((float)0.044715)
#define GELU_NEW_C ((float)0.7978845608028654)  // f32(math.sqrt(2.0 / math.pi))

static void rnd_row(float* v, size_t m, DType dt) {
    if (dt != DTYPE_F32) dtype_round_row(v, dt, m);
}

// the forward's t (tanh), o and h of x (m <= GELU_NEW_CHUNK values)
GELU_CLONES static void gelu_new_parts(DType dt, float* t, float* o, float* h, const float* x, size_t m) {
    float p[GELU_NEW_CHUNK];
    for (size_t i = 0; i < m; i++) p[i] = x[i] * x[i];
    if (dt == DTYPE_BF16) rnd_row(p, m, dt);
    for (size_t i = 0; i < m; i++) p[i] = p[i] * x[i];
    rnd_row(p, m, dt);
    for (size_t i = 0; i < m; i++) p[i] = GELU_NEW_K * p[i];
    rnd_row(p, m, dt);
    for (size_t i = 0; i < m; i++) p[i] = x[i] + p[i];
    rnd_row(p, m, dt);
    for (size_t i = 0; i < m; i++) p[i] = GELU_NEW_C * p[i];
    rnd_row(p, m, dt);
    for (size_t i = 0; i < m; i++) t[i] = vtanh_sleef(p[i]);
    rnd_row(t, m, dt);
    for (size_t i = 0; i < m; i++) o[i] = 1.0f + t[i];
    rnd_row(o, m, dt);
    for (size_t i = 0; i < m; i++) h[i] = 0.5f * x[i];
    rnd_row(h, m, dt);
}

GELU_CLONES static void gelu_new_rows(DType dt, float* y, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float t[GELU_NEW_CHUNK], o[GELU_NEW_CHUNK], h[GELU_NEW_CHUNK];
        gelu_new_parts(dt, t, o, h, x + i0, n);
        for (size_t i = 0; i < n; i++) y[i0 + i] = h[i] * o[i];
        rnd_row(y + i0, n, dt);
    }
}

GELU_CLONES static void gelu_new_grad_rows(DType dt, float* g, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        const float *xc = x + i0, *dyc = dy + i0;
        float t[GELU_NEW_CHUNK], o[GELU_NEW_CHUNK], h[GELU_NEW_CHUNK], a[GELU_NEW_CHUNK], b[GELU_NEW_CHUNK];
        gelu_new_parts(dt, t, o, h, xc, n);
        for (size_t i = 0; i < n; i++) a[i] = dyc[i] * o[i];  // dh
        rnd_row(a, n, dt);
        for (size_t i = 0; i < n; i++) b[i] = dyc[i] * h[i];  // do
        rnd_row(b, n, dt);
        for (size_t i = 0; i < n; i++) b[i] = b[i] * fmaf(-t[i], t[i], 1.0f);  // ds
        rnd_row(b, n, dt);
        for (size_t i = 0; i < n; i++) b[i] = b[i] * GELU_NEW_C;  // da: x's first gradient, and dm
        rnd_row(b, n, dt);
        for (size_t i = 0; i < n; i++) o[i] = b[i] * GELU_NEW_K;  // dp
        rnd_row(o, n, dt);
        for (size_t i = 0; i < n; i++) h[i] = xc[i] * xc[i];  // pow(x, 2)
        rnd_row(h, n, dt);
        for (size_t i = 0; i < n; i++) h[i] = 3.0f * h[i];
        rnd_row(h, n, dt);
        for (size_t i = 0; i < n; i++) h[i] = o[i] * h[i];  // pow's gradient
        rnd_row(h, n, dt);
        for (size_t i = 0; i < n; i++) a[i] = a[i] * 0.5f;  // 0.5 x's gradient
        rnd_row(a, n, dt);
        float* gc = g + i0;
        for (size_t i = 0; i < n; i++) gc[i] = b[i] + h[i];
        rnd_row(gc, n, dt);
        for (size_t i = 0; i < n; i++) gc[i] = gc[i] + a[i];
        rnd_row(gc, n, dt);
    }
}

// transformers' QuickGELUActivation ("quick_gelu"): x * sigmoid(1.702 * x) as three torch
// operations on the activation's own dtype, each result rounded to it (R), on chunks of at most
// GELU_NEW_CHUNK values: c = R(k x) (k = f32(1.702): a Python float times a tensor), s = R(1 / (1 +
// exp(-c))) (ATen's sigmoid kernel: Vectorized exp, i.e. SLEEF's, then a true division; the reduced
// types in float), y = R(x s). Backward in autograd's order: the product's dx1 = R(dy s) and ds =
// R(dy x); sigmoid_backward dc = R((ds (1 - s)) s) (in float for fp32 and bf16; on fp16 ATen's
// kernel runs in Half arithmetic, R(R(ds R(1 - s)) s), measured: the float form differs on 5,968
// of the 65,536 fp16 patterns); the scalar product's dx2 = R(dc k); x's gradient R(dx1 + dx2)
// (two terms: their order does not matter).
#define QUICK_GELU_K ((float)1.702)

GELU_CLONES static void quick_gelu_sigmoid(DType dt, float* s, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) s[i] = QUICK_GELU_K * x[i];
    rnd_row(s, m, dt);
    for (size_t i = 0; i < m; i++) s[i] = sigmoid_sleef(s[i]);
    rnd_row(s, m, dt);
}

GELU_CLONES static void quick_gelu_rows(DType dt, float* y, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float s[GELU_NEW_CHUNK];
        quick_gelu_sigmoid(dt, s, x + i0, n);
        for (size_t i = 0; i < n; i++) y[i0 + i] = x[i0 + i] * s[i];
        rnd_row(y + i0, n, dt);
    }
}

GELU_CLONES static void quick_gelu_grad_rows(DType dt, float* g, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        const float *xc = x + i0, *dyc = dy + i0;
        float s[GELU_NEW_CHUNK], a[GELU_NEW_CHUNK], b[GELU_NEW_CHUNK], c[GELU_NEW_CHUNK];
        quick_gelu_sigmoid(dt, s, xc, n);
        for (size_t i = 0; i < n; i++) a[i] = dyc[i] * s[i];  // dx1
        rnd_row(a, n, dt);
        for (size_t i = 0; i < n; i++) b[i] = dyc[i] * xc[i];  // ds
        rnd_row(b, n, dt);
        if (dt == DTYPE_F16) {  // dc: sigmoid_backward on Half rounds after each operation
            for (size_t i = 0; i < n; i++) c[i] = 1.0f - s[i];
            rnd_row(c, n, dt);
            for (size_t i = 0; i < n; i++) b[i] = b[i] * c[i];
            rnd_row(b, n, dt);
            for (size_t i = 0; i < n; i++) b[i] = b[i] * s[i];
        } else {  // dc: in float (fp32, and bf16's kernel), rounded once
            for (size_t i = 0; i < n; i++) b[i] = b[i] * (1.0f - s[i]) * s[i];
        }
        rnd_row(b, n, dt);
        for (size_t i = 0; i < n; i++) b[i] = b[i] * QUICK_GELU_K;  // dx2
        rnd_row(b, n, dt);
        float* gc = g + i0;
        for (size_t i = 0; i < n; i++) gc[i] = a[i] + b[i];
        rnd_row(gc, n, dt);
    }
}

// transformers' FastGELUActivation ("gelu_fast"): 0.5 * x * (1 + tanh(x * c * (1 + k * x * x))),
// c = f32(0.7978845608) (the literal, not sqrt(2/pi)), k = f32(0.044715), as nine torch operations
// in Python's order, each rounded: h = R(0.5 x), u = R(x c), v = R(k x), w = R(v x), z = R(w + 1),
// s = R(u z), t = R(tanh s) (vtanh_sleef, as gelu_new's), o = R(t + 1), y = R(h o). Backward in
// autograd's order (nodes by decreasing creation: y, o, t, s, z, w, v, u, h): dh = R(dy o), do =
// R(dy h); ds = R(do fma(-t, t, 1)) (tanh_backward); du = R(ds z), dz = R(ds u); dv = R(dz x), dxw =
// R(dz v); dxv = R(dv k); dxu = R(du c); dxh = R(dh 0.5); x's gradient sums them in arrival order,
// R(R(R(dxw + dxv) + dxu) + dxh).
#define GELU_FAST_C ((float)0.7978845608)
#define GELU_FAST_K ((float)0.044715)

// the forward's h, u, v, z, t and o of x (m <= GELU_NEW_CHUNK values)
GELU_CLONES static void gelu_fast_parts(DType dt, float* h, float* u, float* v, float* z, float* t, float* o,
                                        const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) h[i] = 0.5f * x[i];
    rnd_row(h, m, dt);
    for (size_t i = 0; i < m; i++) u[i] = x[i] * GELU_FAST_C;
    rnd_row(u, m, dt);
    for (size_t i = 0; i < m; i++) v[i] = GELU_FAST_K * x[i];
    rnd_row(v, m, dt);
    for (size_t i = 0; i < m; i++) z[i] = v[i] * x[i];  // w
    rnd_row(z, m, dt);
    for (size_t i = 0; i < m; i++) z[i] = z[i] + 1.0f;
    rnd_row(z, m, dt);
    for (size_t i = 0; i < m; i++) t[i] = u[i] * z[i];  // s
    rnd_row(t, m, dt);
    for (size_t i = 0; i < m; i++) t[i] = vtanh_sleef(t[i]);
    rnd_row(t, m, dt);
    for (size_t i = 0; i < m; i++) o[i] = t[i] + 1.0f;
    rnd_row(o, m, dt);
}

GELU_CLONES static void gelu_fast_rows(DType dt, float* y, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float h[GELU_NEW_CHUNK], u[GELU_NEW_CHUNK], v[GELU_NEW_CHUNK], z[GELU_NEW_CHUNK], t[GELU_NEW_CHUNK],
            o[GELU_NEW_CHUNK];
        gelu_fast_parts(dt, h, u, v, z, t, o, x + i0, n);
        for (size_t i = 0; i < n; i++) y[i0 + i] = h[i] * o[i];
        rnd_row(y + i0, n, dt);
    }
}

GELU_CLONES static void gelu_fast_grad_rows(DType dt, float* g, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        const float *xc = x + i0, *dyc = dy + i0;
        float h[GELU_NEW_CHUNK], u[GELU_NEW_CHUNK], v[GELU_NEW_CHUNK], z[GELU_NEW_CHUNK], t[GELU_NEW_CHUNK],
            o[GELU_NEW_CHUNK];
        gelu_fast_parts(dt, h, u, v, z, t, o, xc, n);
        // dh into o (o's last use), do into h (h's last use)
        for (size_t i = 0; i < n; i++) {
            const float dh = dyc[i] * o[i], d_o = dyc[i] * h[i];
            o[i] = dh;
            h[i] = d_o;
        }
        rnd_row(o, n, dt);
        rnd_row(h, n, dt);
        for (size_t i = 0; i < n; i++) h[i] = h[i] * fmaf(-t[i], t[i], 1.0f);  // ds
        rnd_row(h, n, dt);
        for (size_t i = 0; i < n; i++) {  // du into t, dz into u
            const float du = h[i] * z[i], dz = h[i] * u[i];
            t[i] = du;
            u[i] = dz;
        }
        rnd_row(t, n, dt);
        rnd_row(u, n, dt);
        for (size_t i = 0; i < n; i++) {  // dv into z, dxw into v
            const float dv = u[i] * xc[i], dxw = u[i] * v[i];
            z[i] = dv;
            v[i] = dxw;
        }
        rnd_row(z, n, dt);
        rnd_row(v, n, dt);
        for (size_t i = 0; i < n; i++) z[i] = z[i] * GELU_FAST_K;  // dxv
        rnd_row(z, n, dt);
        for (size_t i = 0; i < n; i++) t[i] = t[i] * GELU_FAST_C;  // dxu
        rnd_row(t, n, dt);
        for (size_t i = 0; i < n; i++) o[i] = o[i] * 0.5f;  // dxh
        rnd_row(o, n, dt);
        float* gc = g + i0;
        for (size_t i = 0; i < n; i++) gc[i] = v[i] + z[i];
        rnd_row(gc, n, dt);
        for (size_t i = 0; i < n; i++) gc[i] = gc[i] + t[i];
        rnd_row(gc, n, dt);
        for (size_t i = 0; i < n; i++) gc[i] = gc[i] + o[i];
        rnd_row(gc, n, dt);
    }
}

// transformers' single-kernel activations and two short compositions (ACT2FN "linear", "sigmoid",
// "tanh", "relu6", "leaky_relu", "relu2", "gelu_10"), as ATen's CPU kernels compute them, the
// reduced types in float and rounded once unless said otherwise (the caller rounds the result):
// - linear (LinearActivation): the input itself; its gradient dy.
// - sigmoid (nn.Sigmoid): 1 / (1 + exp(-x)) (Vectorized exp: SLEEF's; a true division);
//   sigmoid_backward (dy (1 - s)) s on the rounded output s, on fp16 in Half arithmetic (as
//   quick_gelu's).
// - tanh (nn.Tanh): SLEEF's tanh (vtanh_sleef: the reduced types' kernel; fp32 tensors get MKL's
//   vsTanh in torch, an ulp apart on 0.2% of floats: fp32 is compared within tolerances);
//   tanh_backward dy fma(-t, t, 1) on the rounded output t (gelu_new's).
// - relu6 (nn.ReLU6 = hardtanh(x, 0, 6) = clamp): min(max(x, 0), 6) with NaN passing;
//   hardtanh_backward as its vectorized kernel: dy where 0 < x < 6, else 0 (a NaN x gives 0; ATen's
//   scalar tail, the last numel % 16 or 32 elements, passes dy there instead).
// - leaky_relu (nn.LeakyReLU(), negative_slope 0.01): x > 0 ? x : x * f32(0.01); the backward
//   x > 0 ? dy : dy * f32(0.01).
// - relu2 (ReLUSquaredActivation): r = relu(x), y = r * r (torch.square, one rounding); the
//   backward pow_backward R(dy R(2 r)), then ReLU's select on r.
// - gelu_10 (ClippedGELUActivation(-10, 10)): clamp(R(gelu(x)), -10, 10); clamp's backward passes
//   dy where -10 < g < 10, bounds excluded (g the GELU output; a NaN g gives 0; measured with torch
//   2.15: clip(x, -10, 10) at x = 10 has gradient 0), then GELU's backward.
#define LEAKY_RELU_SLOPE ((float)0.01)

static void linear_rows(float* y, const float* x, size_t m) { memcpy(y, x, m * sizeof *y); }
static void linear_grad_rows(float* t, const float* dy, const float* x, size_t m) {
    (void)x;
    linear_rows(t, dy, m);
}

GELU_CLONES static void sigmoid_rows(float* y, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) y[i] = sigmoid_sleef(x[i]);
}

GELU_CLONES static void sigmoid_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float s[GELU_NEW_CHUNK], c[GELU_NEW_CHUNK];
        sigmoid_rows(s, x + i0, n);
        rnd_row(s, n, dt);
        float* tc = t + i0;
        const float* dyc = dy + i0;
        if (dt == DTYPE_F16) {  // Half arithmetic: R(R(dy R(1 - s)) s)
            for (size_t i = 0; i < n; i++) c[i] = 1.0f - s[i];
            rnd_row(c, n, dt);
            for (size_t i = 0; i < n; i++) tc[i] = dyc[i] * c[i];
            rnd_row(tc, n, dt);
            for (size_t i = 0; i < n; i++) tc[i] = tc[i] * s[i];
        } else {
            for (size_t i = 0; i < n; i++) tc[i] = dyc[i] * (1.0f - s[i]) * s[i];
        }
    }
}

GELU_CLONES static void tanh_rows(float* y, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) y[i] = vtanh_sleef(x[i]);
}

GELU_CLONES static void tanh_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float th[GELU_NEW_CHUNK];
        tanh_rows(th, x + i0, n);
        rnd_row(th, n, dt);
        for (size_t i = 0; i < n; i++) t[i0 + i] = dy[i0 + i] * fmaf(-th[i], th[i], 1.0f);
    }
}

GELU_CLONES static void relu6_rows(float* y, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i] > 6.0f ? 6.0f : x[i];
}

GELU_CLONES static void relu6_grad_rows(float* t, const float* dy, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) t[i] = x[i] > 0.0f && x[i] < 6.0f ? dy[i] : 0.0f;
}

GELU_CLONES static void leaky_relu_rows(float* y, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) y[i] = x[i] > 0.0f ? x[i] : x[i] * LEAKY_RELU_SLOPE;
}

GELU_CLONES static void leaky_relu_grad_rows(float* t, const float* dy, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) t[i] = x[i] > 0.0f ? dy[i] : dy[i] * LEAKY_RELU_SLOPE;
}

GELU_CLONES static void relu2_rows(float* y, const float* x, size_t m) {
    relu_rows(y, x, m);
    for (size_t i = 0; i < m; i++) y[i] = y[i] * y[i];
}

GELU_CLONES static void relu2_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float r[GELU_NEW_CHUNK], d[GELU_NEW_CHUNK];
        relu_rows(r, x + i0, n);
        for (size_t i = 0; i < n; i++) d[i] = 2.0f * r[i];
        rnd_row(d, n, dt);
        for (size_t i = 0; i < n; i++) d[i] = dy[i0 + i] * d[i];
        rnd_row(d, n, dt);
        relu_grad_rows(t + i0, d, x + i0, n);
    }
}

// GELU as torch runs it on tensors of dt (gelu_low_aten, gelu_low_onednn): y = gelu(x), not yet
// rounded; t = dy * gelu'(x)
static void gelu_rows(DType dt, float* y, const float* x, size_t m) {
    if (gelu_low_aten(dt)) gelu_rows_aten(y, x, m);
    else if (gelu_low_onednn(dt)) gelu_rows_onednn(y, x, m);
    else gelu_f32_rows(y, x, m);
}
static void gelu_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    if (gelu_low_aten(dt)) gelu_grad_rows_aten(t, dy, x, m);
    else gelu_f32_grad_rows(t, dy, x, m);
}

#define GELU_10_MIN (-10.0f)
#define GELU_10_MAX 10.0f

static void gelu_10_rows(DType dt, float* y, const float* x, size_t m) {
    gelu_rows(dt, y, x, m);
    round_to(y, m, dt);
    for (size_t i = 0; i < m; i++) y[i] = y[i] < GELU_10_MIN ? GELU_10_MIN : y[i] > GELU_10_MAX ? GELU_10_MAX : y[i];
}

static void gelu_10_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float g[GELU_NEW_CHUNK], d[GELU_NEW_CHUNK];
        gelu_rows(dt, g, x + i0, n);
        round_to(g, n, dt);
        for (size_t i = 0; i < n; i++) d[i] = g[i] > GELU_10_MIN && g[i] < GELU_10_MAX ? dy[i0 + i] : 0.0f;
        gelu_grad_rows(dt, t + i0, d, x + i0, n);
    }
}

// transformers' erf forms and hardswish (ACT2FN "gelu_python", "laplace", "hardswish"; and
// "gelu_accurate", "gelu_python_tanh", which are gelu_new's operations in gelu_new's order: the
// golden checks them as such):
// - gelu_python (GELUActivation(use_gelu_python=True)): x * 0.5 * (1 + erf(x / sqrt 2)) as five
//   operations, a = R(x 0.5), b = R(x / r) (r = f32(sqrt 2), a true division), e = R(erf b)
//   (erf_op_rows), o = R(e + 1), y = R(a o); backward in autograd's order
//   da = R(dy o), do = R(dy a), db = erf's backward of do, R(db / r), R(da 0.5), summed.
// - erf's backward (derivatives.yaml: 2/sqrt(pi) * exp(-(b.pow(2))) * grad): R(R(k R(exp(-R(b b))))
//   g), k = f32(2/sqrt(pi)), exp SLEEF's (NaN stays NaN).
// - laplace (LaplaceActivation): b = R(R(x - R(mu)) / c) with mu = 0.707107, c = f32(0.282095 *
//   sqrt 2) (Python's product in double), y = R(0.5 R(R(erf b) + 1)); backward R(erf's backward of
//   R(dy 0.5) / c). A Python float in an add or sub is cast to the tensor's dtype before the
//   operation (TensorIterator's common dtype), in mul and div it stays a float (ATen's
//   cpu-scalar path): hence R(mu) (bf16 0.70703125), measured.
// - hardswish (nn.Hardswish, ATen's kernel): x * min(max(x + 3, 0), 6) / 6 (NaN propagates);
//   backward: 0 where x <= -3, dy where x >= 3, else dy ((x / 3) + 0.5) (both bounds as torch 2.15
//   gives them on every bf16/fp16 pattern: golden activations_low).
#define GELU_PY_R ((float)1.4142135623730951)
#define ERF_GRAD_K ((float)1.1283791670955126)
#define LAPLACE_MU ((float)0.707107)
#define LAPLACE_C ((float)(0.282095 * 1.4142135623730951))

__attribute__((always_inline)) static inline float vexp_nan(float d) { return select_bits(d != d, d, vexp_full(d)); }

// torch.erf as an operation: Vectorized<float>::erf (verf_aten), the reduced types widened to
// float (golden activations_low: bit for bit on every bf16 and fp16 pattern through gelu_python and
// laplace; a correctly rounded erf instead misses 3 fp16 patterns). fp32 tensors may take MKL's
// vsErf in torch: fp32 is compared within tolerances.
static void erf_op_rows(float* v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = verf_aten(v[i]);
}

// db = erf's backward of g at b (n <= GELU_NEW_CHUNK values)
GELU_CLONES static void erf_grad_rows(DType dt, float* db, const float* g, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) db[i] = b[i] * b[i];
    rnd_row(db, n, dt);
    for (size_t i = 0; i < n; i++) db[i] = vexp_nan(-db[i]);
    rnd_row(db, n, dt);
    for (size_t i = 0; i < n; i++) db[i] = ERF_GRAD_K * db[i];
    rnd_row(db, n, dt);
    for (size_t i = 0; i < n; i++) db[i] = db[i] * g[i];
    rnd_row(db, n, dt);
}

// gelu_python's a, b and o of x
GELU_CLONES static void gelu_python_parts(DType dt, float* a, float* b, float* o, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = x[i] * 0.5f;
    rnd_row(a, n, dt);
    for (size_t i = 0; i < n; i++) b[i] = x[i] / GELU_PY_R;
    rnd_row(b, n, dt);
    memcpy(o, b, n * sizeof *o);
    erf_op_rows(o, n);
    rnd_row(o, n, dt);
    for (size_t i = 0; i < n; i++) o[i] = o[i] + 1.0f;
    rnd_row(o, n, dt);
}

GELU_CLONES static void gelu_python_rows(DType dt, float* y, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float a[GELU_NEW_CHUNK], b[GELU_NEW_CHUNK], o[GELU_NEW_CHUNK];
        gelu_python_parts(dt, a, b, o, x + i0, n);
        for (size_t i = 0; i < n; i++) y[i0 + i] = a[i] * o[i];
    }
}

GELU_CLONES static void gelu_python_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        const float* dyc = dy + i0;
        float a[GELU_NEW_CHUNK], b[GELU_NEW_CHUNK], o[GELU_NEW_CHUNK], da[GELU_NEW_CHUNK], d[GELU_NEW_CHUNK];
        gelu_python_parts(dt, a, b, o, x + i0, n);
        for (size_t i = 0; i < n; i++) da[i] = dyc[i] * o[i];
        rnd_row(da, n, dt);
        for (size_t i = 0; i < n; i++) o[i] = dyc[i] * a[i];  // do
        rnd_row(o, n, dt);
        erf_grad_rows(dt, d, o, b, n);
        for (size_t i = 0; i < n; i++) d[i] = d[i] / GELU_PY_R;
        rnd_row(d, n, dt);
        for (size_t i = 0; i < n; i++) da[i] = da[i] * 0.5f;
        rnd_row(da, n, dt);
        for (size_t i = 0; i < n; i++) t[i0 + i] = d[i] + da[i];
    }
}

// laplace's b of x
GELU_CLONES static void laplace_b(DType dt, float* b, const float* x, size_t n) {
    float mu = LAPLACE_MU;  // a Python float added to a tensor is cast to its dtype first (not so for mul, div)
    rnd_row(&mu, 1, dt);
    for (size_t i = 0; i < n; i++) b[i] = x[i] - mu;
    rnd_row(b, n, dt);
    for (size_t i = 0; i < n; i++) b[i] = b[i] / LAPLACE_C;
    rnd_row(b, n, dt);
}

GELU_CLONES static void laplace_rows(DType dt, float* y, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float b[GELU_NEW_CHUNK];
        laplace_b(dt, b, x + i0, n);
        erf_op_rows(b, n);
        rnd_row(b, n, dt);
        for (size_t i = 0; i < n; i++) b[i] = b[i] + 1.0f;
        rnd_row(b, n, dt);
        for (size_t i = 0; i < n; i++) y[i0 + i] = 0.5f * b[i];
    }
}

GELU_CLONES static void laplace_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float b[GELU_NEW_CHUNK], g[GELU_NEW_CHUNK], d[GELU_NEW_CHUNK];
        laplace_b(dt, b, x + i0, n);
        for (size_t i = 0; i < n; i++) g[i] = dy[i0 + i] * 0.5f;
        rnd_row(g, n, dt);
        erf_grad_rows(dt, d, g, b, n);
        for (size_t i = 0; i < n; i++) t[i0 + i] = d[i] / LAPLACE_C;
    }
}

GELU_CLONES static void hardswish_rows(float* y, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) {
        float c = x[i] + 3.0f;
        c = c < 0.0f ? 0.0f : c;  // NaN passes
        c = c > 6.0f ? 6.0f : c;
        y[i] = x[i] * c / 6.0f;
    }
}

GELU_CLONES static void hardswish_grad_rows(float* t, const float* dy, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++)
        t[i] = x[i] <= -3.0f ? 0.0f : x[i] >= 3.0f ? dy[i] : dy[i] * ((x[i] / 3.0f) + 0.5f);
}

// softplus (beta 1, threshold 20) as ATen's kernel: x > 20 ? x : log1p(exp(x)) with SLEEF's exp
// and log1p (NaN stays NaN); its backward dy z / (z + 1), z = exp(x), or dy where x > 20.
// - mish (nn.functional.mish, ATen's kernel): x tanh(softplus(x)) (SLEEF's tanh); backward
//   dy (t + x s (1 - t t)) with t = tanh(log1p(exp x)), s = 1 / (1 + exp(-x)), the two FMAs GCC
//   forms in torch's compiled kernel: fma(x s, fma(-t, t, 1), t).
// - sqrtsoftplus (SqrtSoftplusActivation): y = R(sqrt(R(softplus x))); backward sqrt's
//   R(dy / R(2 y)), then softplus's.
GELU_CLONES static float softplus_f(float x) { return x > 20.0f ? x : vlog1p_sleef(vexp_nan(x)); }

GELU_CLONES static void mish_rows(float* y, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) y[i] = x[i] * vtanh_sleef(vlog1p_sleef(vexp_full(x[i])));
}

GELU_CLONES static void mish_grad_rows(float* t, const float* dy, const float* x, size_t m) {
    for (size_t i = 0; i < m; i++) {
        const float sg = 1.0f / (1.0f + vexp_full(-x[i]));
        const float th = vtanh_sleef(vlog1p_sleef(vexp_full(x[i])));
        t[i] = dy[i] * fmaf(x[i] * sg, fmaf(-th, th, 1.0f), th);
    }
}

GELU_CLONES static void sqrtsoftplus_rows(DType dt, float* y, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float sp[GELU_NEW_CHUNK];
        for (size_t i = 0; i < n; i++) sp[i] = softplus_f(x[i0 + i]);
        rnd_row(sp, n, dt);
        for (size_t i = 0; i < n; i++) y[i0 + i] = sqrtf(sp[i]);
    }
}

GELU_CLONES static void sqrtsoftplus_grad_rows(DType dt, float* t, const float* dy, const float* x, size_t m) {
    for (size_t i0 = 0; i0 < m; i0 += GELU_NEW_CHUNK) {
        const size_t n = m - i0 < GELU_NEW_CHUNK ? m - i0 : GELU_NEW_CHUNK;
        float y[GELU_NEW_CHUNK], g[GELU_NEW_CHUNK];
        sqrtsoftplus_rows(dt, y, x + i0, n);
        rnd_row(y, n, dt);
        for (size_t i = 0; i < n; i++) y[i] = 2.0f * y[i];
        rnd_row(y, n, dt);
        for (size_t i = 0; i < n; i++) g[i] = dy[i0 + i] / y[i];
        rnd_row(g, n, dt);
        for (size_t i = 0; i < n; i++) {
            const float xv = x[i0 + i], z = vexp_nan(xv);
            t[i0 + i] = xv > 20.0f ? g[i] : g[i] * z / (z + 1.0f);
        }
    }
}

// The activations' registry, the one list of them: the config.json name (an activation's first
// row gives its canonical name; "swish" is silu's alias), then its forward and backward rows.
// fwd/grad compute in float and the caller rounds once to the values' dtype; fwd_dt/grad_dt (one
// of each pair is set) take that dtype because they round inside (several torch operations, or a
// formula that depends on it, e.g. GELU's kernel).
static const struct {
    const char* name;
    FfnActivation act;
    void (*fwd)(float* y, const float* x, size_t m);
    void (*fwd_dt)(DType dt, float* y, const float* x, size_t m);
    void (*grad)(float* t, const float* dy, const float* x, size_t m);
    void (*grad_dt)(DType dt, float* t, const float* dy, const float* x, size_t m);
} ACTIVATIONS[] = {
    {"gelu", FFN_ACT_GELU, NULL, gelu_rows, NULL, gelu_grad_rows},
    {"relu", FFN_ACT_RELU, relu_rows, NULL, relu_grad_rows, NULL},
    {"silu", FFN_ACT_SILU, silu_rows, NULL, silu_grad_rows, NULL},
    {"swish", FFN_ACT_SILU, silu_rows, NULL, silu_grad_rows, NULL},
    {"gelu_pytorch_tanh", FFN_ACT_GELU_TANH, gelu_tanh_rows, NULL, gelu_tanh_grad_rows, NULL},
    {"gelu_new", FFN_ACT_GELU_NEW, NULL, gelu_new_rows, NULL, gelu_new_grad_rows},
    {"quick_gelu", FFN_ACT_QUICK_GELU, NULL, quick_gelu_rows, NULL, quick_gelu_grad_rows},
    {"gelu_fast", FFN_ACT_GELU_FAST, NULL, gelu_fast_rows, NULL, gelu_fast_grad_rows},
    {"linear", FFN_ACT_LINEAR, linear_rows, NULL, linear_grad_rows, NULL},
    {"sigmoid", FFN_ACT_SIGMOID, sigmoid_rows, NULL, NULL, sigmoid_grad_rows},
    {"tanh", FFN_ACT_TANH, tanh_rows, NULL, NULL, tanh_grad_rows},
    {"relu6", FFN_ACT_RELU6, relu6_rows, NULL, relu6_grad_rows, NULL},
    {"leaky_relu", FFN_ACT_LEAKY_RELU, leaky_relu_rows, NULL, leaky_relu_grad_rows, NULL},
    {"relu2", FFN_ACT_RELU2, relu2_rows, NULL, NULL, relu2_grad_rows},
    {"gelu_10", FFN_ACT_GELU_10, NULL, gelu_10_rows, NULL, gelu_10_grad_rows},
    {"gelu_accurate", FFN_ACT_GELU_ACCURATE, NULL, gelu_new_rows, NULL, gelu_new_grad_rows},
    {"gelu_python_tanh", FFN_ACT_GELU_PYTHON_TANH, NULL, gelu_new_rows, NULL, gelu_new_grad_rows},
    {"gelu_python", FFN_ACT_GELU_PYTHON, NULL, gelu_python_rows, NULL, gelu_python_grad_rows},
    {"laplace", FFN_ACT_LAPLACE, NULL, laplace_rows, NULL, laplace_grad_rows},
    {"hardswish", FFN_ACT_HARDSWISH, hardswish_rows, NULL, hardswish_grad_rows, NULL},
    {"mish", FFN_ACT_MISH, mish_rows, NULL, mish_grad_rows, NULL},
    {"sqrtsoftplus", FFN_ACT_SQRTSOFTPLUS, NULL, sqrtsoftplus_rows, NULL, sqrtsoftplus_grad_rows},
};

// act's first registry row (every FfnActivation has one: model_config_validate checks the range)
static size_t activation_row(FfnActivation act) {
    for (size_t i = 0; i < ARRAY_LEN(ACTIVATIONS); i++)
        if (ACTIVATIONS[i].act == act) return i;
    CHECK(false, "FFN activation %d has no registry row", (int)act);
    return 0;
}

const char* ffn_activation_name(FfnActivation a) { return ACTIVATIONS[activation_row(a)].name; }

bool ffn_activation_from_name(const char* name, FfnActivation* out) {
    for (size_t i = 0; name && i < ARRAY_LEN(ACTIVATIONS); i++)
        if (!strcmp(name, ACTIVATIONS[i].name)) {
            *out = ACTIVATIONS[i].act;
            return true;
        }
    return false;
}

const char* ffn_activation_names_list(void) {
    static char buf[512];
    if (!buf[0]) {
        for (size_t i = 0; i < ARRAY_LEN(ACTIVATIONS); i++) {
            if (i) strcat(buf, ", ");
            strcat(buf, ACTIVATIONS[i].name);
        }
    }
    return buf;
}

// the FFN activation's rows: y = act(x) (not yet rounded); t = dy * act'(x) (ReLU: the select)
// (dt: the dtype the values hold)
static void act_rows(FfnActivation act, DType dt, float* y, const float* x, size_t m) {
    const size_t r = activation_row(act);
    if (ACTIVATIONS[r].fwd_dt) ACTIVATIONS[r].fwd_dt(dt, y, x, m);
    else ACTIVATIONS[r].fwd(y, x, m);
}
static void act_grad_rows(FfnActivation act, DType dt, float* t, const float* dy, const float* x, size_t m) {
    const size_t r = activation_row(act);
    if (ACTIVATIONS[r].grad_dt) ACTIVATIONS[r].grad_dt(dt, t, dy, x, m);
    else ACTIVATIONS[r].grad(t, dy, x, m);
}

// GELU by table in the low modes. There GELU's input is lin1's low result: one of 65,536 bit
// patterns of bf16 or fp16. The forward's R(gelu(x)) and the backward's factor
// gelu'(x) = cdf + x * pdf (the backward is dy * that factor, one rounding) are functions of
// those 16 bits, so each table holds, for every pattern, what act_rows + round_to and
// act_grad_rows (with dy = 1: 1 * f == f) compute for it, built once by that very code: a
// lookup gives the direct path's bits by construction (test_layers checks every pattern of
// both dtypes against the direct path, NaN and infinities included). 2 x 512 KiB.
typedef struct {
    float fwd[65536];   // R(gelu(x)) in fp32 (a value of the low dtype)
    float grad[65536];  // the factor as act_grad_rows forms it; bf16 where torch runs GELU on oneDNN:
                        // that kernel's derivative (gelu_f32_grad_rows, and with grad_onednn the
                        // kernel's own output, the same values: test_layers)
    bool avx512;        // lookups by AVX-512 gathers (decided once, when the table is built)
    bool grad_onednn;
} GeluLut;
// The tables of the activations whose backward is dy times a factor of x alone: GELU and
// GELU-tanh (gelu_pytorch_tanh; its factor 0.5 (1 + t) + ..., gelu_tanh_grad_rows). Not gelu_new,
// whose backward rounds products with dy several times; ReLU and SiLU are computed directly.
static GeluLut* g_gelu_lut[2][2];  // [GELU, GELU-tanh][bf16, fp16]
static pthread_once_t g_gelu_once[2][2] = {{PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT},
                                           {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT}};
static bool g_gelu_lut_off;  // tests: force the direct path

void layers_gelu_table_disable(bool off) { g_gelu_lut_off = off; }

static void gelu_lut_build(int a, int k) {
    const FfnActivation act = a == 0 ? FFN_ACT_GELU : FFN_ACT_GELU_TANH;
    const DType dt = k == 0 ? DTYPE_BF16 : DTYPE_F16;
    GeluLut* t = xaligned_alloc(sizeof *t);
    uint16_t* bits = xmalloc(65536 * sizeof(uint16_t));
    float* x = xmalloc(65536 * sizeof(float));
    float* ones = xmalloc(65536 * sizeof(float));
    for (size_t i = 0; i < 65536; i++) {
        bits[i] = (uint16_t)i;
        ones[i] = 1.0f;
    }
    dtype_to_f32_row(x, dt, bits, 65536);  // exact
    act_rows(act, dt, t->fwd, x, 65536);
    round_to(t->fwd, 65536, dt);
    act_grad_rows(act, dt, t->grad, ones, x, 65536);
    // bf16 GELU where torch runs gelu_backward on oneDNN: R(dy * f) with oneDNN's own f
    // (gelu_onednn.h; the forward table is oneDNN's forward there: act_rows)
    t->grad_onednn = act == FFN_ACT_GELU && dt == DTYPE_BF16 && gelu_onednn_torch_uses() &&
                     gelu_onednn_grad_f32(x, t->grad, 65536);
#if defined(__x86_64__)
    t->avx512 = cpu_features()->avx512f;
#else
    t->avx512 = false;
#endif
    free(bits);
    free(x);
    free(ones);
    g_gelu_lut[a][k] = t;
}
static void gelu_lut_build_bf16(void) { gelu_lut_build(0, 0); }
static void gelu_lut_build_f16(void) { gelu_lut_build(0, 1); }
static void gelu_tanh_lut_build_bf16(void) { gelu_lut_build(1, 0); }
static void gelu_tanh_lut_build_f16(void) { gelu_lut_build(1, 1); }

// The table of act for dt (built on first use), or NULL: act has none, or dt is not a 16-bit
// low dtype
static const GeluLut* act_lut(FfnActivation act, DType dt) {
    static void (*const BUILD[2][2])(void) = {{gelu_lut_build_bf16, gelu_lut_build_f16},
                                              {gelu_tanh_lut_build_bf16, gelu_tanh_lut_build_f16}};
    const int a = act == FFN_ACT_GELU ? 0 : act == FFN_ACT_GELU_TANH ? 1 : -1;
    const int k = dt == DTYPE_BF16 ? 0 : dt == DTYPE_F16 ? 1 : -1;
    if (g_gelu_lut_off || a < 0 || k < 0) return NULL;
    pthread_once(&g_gelu_once[a][k], BUILD[a][k]);
    return g_gelu_lut[a][k];
}
static const GeluLut* gelu_lut(DType dt) { return act_lut(FFN_ACT_GELU, dt); }

const char* layers_gelu_bf16_grad_source(void) {
    const GeluLut* t = gelu_lut(DTYPE_BF16);
    return t && t->grad_onednn ? "onednn" : "aten";
}


// out[i] = T[idx[i]], times mul[i] (fp32) or times the widened mulb[i] (bf16: the top half of
// its fp32, exactly) when one of them is given: act_grad_rows' final multiply with the factor
// from the table, one rounding either way. AVX-512 gathers 16 lanes at a time (GCC's vectorizer
// does not use gathers here).
static void lut_rows_scalar(float* restrict out, const float* restrict T, const uint16_t* restrict idx,
                            const float* restrict mul, const uint16_t* restrict mulb, size_t m) {
    for (size_t i = 0; i < m; i++) {
        float f = 1.0f;
        if (mul) {
            f = mul[i];
        } else if (mulb) {
            const uint32_t bits = (uint32_t)mulb[i] << 16;
            memcpy(&f, &bits, sizeof f);
        }
        out[i] = mul || mulb ? f * T[idx[i]] : T[idx[i]];
    }
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void lut_rows_avx512(float* restrict out, const float* restrict T,
                                                                const uint16_t* restrict idx,
                                                                const float* restrict mul,
                                                                const uint16_t* restrict mulb, size_t m) {
    size_t i = 0;
    for (; i + 16 <= m; i += 16) {
        const __m512i k = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(idx + i)));
        __m512 v = _mm512_i32gather_ps(k, T, 4);
        if (mul) {
            v = _mm512_mul_ps(_mm512_loadu_ps(mul + i), v);
        } else if (mulb) {
            const __m512i d = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(mulb + i)));
            v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(d, 16)), v);
        }
        _mm512_storeu_ps(out + i, v);
    }
    lut_rows_scalar(out + i, T, idx + i, mul ? mul + i : NULL, mulb ? mulb + i : NULL, m - i);
}
#endif

static void lut_rows(const GeluLut* lut, float* restrict out, const float* restrict T, const uint16_t* restrict idx,
                     const float* restrict mul, const uint16_t* restrict mulb, size_t m) {
#if defined(__x86_64__)
    if (lut->avx512) {
        lut_rows_avx512(out, T, idx, mul, mulb, m);
        return;
    }
#endif
    lut_rows_scalar(out, T, idx, mul, mulb, m);
}

// yl: NULL, or where y's low copy (n, dt) goes as well, chunk by chunk while it is in cache;
// with yl, y may be NULL (only the low copy is wanted: the chunk is computed in a local buffer).
// xl: NULL, or x's values in dt (x's kept copy: lin1's low result, never widened into x),
// widened chunk by chunk into a local buffer (exact), so the same fp32 inputs as x's.
// act: GELU and GELU-tanh by table when xl is given (act_lut), the others computed.
static void act_forward_into(FfnActivation act, float* y, void* yl, const float* x, const void* xl, size_t n,
                             DType dt) {
    enum { CH = 256 };  // rounded chunk by chunk while the values are in cache (element-wise)
    CHECK(y || yl);
    const size_t es = dtype_traits(dt)->size;
    const GeluLut* lut = xl ? act_lut(act, dt) : NULL;  // xl's 16-bit patterns index the table
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i0 = 0; i0 < n; i0 += CH) {
        size_t m = n - i0 < CH ? n - i0 : CH;
        float t[CH], tx[CH];
        float* yc = y ? y + i0 : t;  // (m)
        if (lut) {
            lut_rows(lut, yc, lut->fwd, (const uint16_t*)xl + i0, NULL, NULL, m);
        } else {
            const float* xc = tx;  // (m)
            if (xl)
                dtype_to_f32_row(tx, dt, (const char*)xl + i0 * es, m);
            else
                xc = x + i0;
            act_rows(act, dt, yc, xc, m);
            round_to(yc, m, dt);
        }
        if (yl) dtype_from_f32_row((char*)yl + i0 * es, dt, yc, m);  // exact: yc holds dt values
    }
}

void gelu_forward(float* y, const float* x, size_t n, DType dt) {
    act_forward_into(FFN_ACT_GELU, y, NULL, x, NULL, n, dt);
}

void gelu_forward_low(float* y, void* yl, const void* xl, size_t n, DType dt) {
    act_forward_into(FFN_ACT_GELU, y, yl, NULL, xl, n, dt);
}

// x's kept low copy when it holds x's values (valid), else NULL
static const void* kept_valid(const LayerCtx* c, const float* x, size_t n) {
    const LowCopy* k = kept_find(c, x, n);
    return k && k->valid ? k->low : NULL;
}

void ffn_activation_forward_operand(LayerCtx* c, float* y, const float* x, size_t n) {
    if (c->low == DTYPE_F32) {
        act_forward_into(c->act, y, NULL, x, NULL, n, DTYPE_F32);
        return;
    }
    const void* xl = kept_valid(c, x, n);  // lin1's low result, when kept
    CHECK(xl || !kept_find(c, x, n), "the activation's input registered but not produced");
    bool low_only;
    void* kept = kept_produce(c, y, n, &low_only);  // y's kept copy: lin2's forward and dW read it
    if (kept) {
        c->operand_of = NULL;
        act_forward_into(c->act, low_only ? NULL : y, kept, x, xl, n, c->low);
        return;
    }
    void* yl = scratch(c, LAYER_SCRATCH_A, n * dtype_traits(c->low)->size);  // (n) low
    act_forward_into(c->act, y, yl, x, xl, n, c->low);
    c->operand_of = y;
    c->operand_n = n;
}

// set: dx = 0 + R(...) (the bits of adding into a zeroed dx, without reading or zeroing it)
static void act_backward_into(FfnActivation act, float* dx, const float* dy, const float* x, size_t n, DType dt,
                              bool set) {
    enum { CH = 256 };
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i0 = 0; i0 < n; i0 += CH) {
        size_t m = n - i0 < CH ? n - i0 : CH;
        float t[CH];
        act_grad_rows(act, dt, t, dy + i0, x + i0, m);
        round_to(t, m, dt);
        if (set) {
            for (size_t i = 0; i < m; i++) dx[i0 + i] = 0.0f + t[i];  // not folded: no -ffast-math
        } else {
            for (size_t i = 0; i < m; i++) dx[i0 + i] += t[i];
        }
    }
}

void gelu_backward(float* dx, const float* dy, const float* x, size_t n, DType dt) {
    act_backward_into(FFN_ACT_GELU, dx, dy, x, n, dt, false);
}

// gelu_backward with its operands in the low dtype dt, chunk by chunk: dyl (n) the incoming
// gradient (lin2's input-gradient GEMM result, never widened), x's values from xl (its kept
// copy) or x; dxl (n) receives the low copy of dx = 0 + R(dy * gelu'(x)) (gelu_backward into a
// zeroed dx, then gemm_input's conversion; exact: dx holds dt values), lin1's dy operand and
// its bias gradient's input. The fp32 dx is not written (nothing else reads it).
// dyl's widened values are what gelu_backward read from the zeroed dy after `dy += R(...)`
// except that a -0 stays -0 (0 + -0 is +0): gelu'(x) * +-0 is then +-0 (or NaN for both), which
// rounds to +-0 and adds to dx's 0 as +0, so dx gets the same bits.
static void act_backward_low(FfnActivation act, void* dxl, const void* dyl, const float* x, const void* xl, size_t n,
                             DType dt) {
    enum { CH = 256 };
    const size_t es = dtype_traits(dt)->size;
    // xl's 16-bit patterns index the table; without xl too when the table's gradient is oneDNN's
    // (x then holds dt values: its patterns are converted exactly, chunk by chunk)
    const GeluLut* lut = act_lut(act, dt);
    if (lut && !xl && !lut->grad_onednn) lut = NULL;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (size_t i0 = 0; i0 < n; i0 += CH) {
        size_t m = n - i0 < CH ? n - i0 : CH;
        float t[CH], tdy[CH], tx[CH];
        uint16_t xbits[CH];
        // bf16's dy is widened inside the lookup (in registers), fp16's here
        const uint16_t* dyb = lut && dt == DTYPE_BF16 ? (const uint16_t*)dyl + i0 : NULL;
        if (!dyb) dtype_to_f32_row(tdy, dt, (const char*)dyl + i0 * es, m);
        if (lut) {
            const uint16_t* idx = (const uint16_t*)xl + i0;
            if (!xl) dtype_from_f32_row(xbits, dt, x + i0, m), idx = xbits;  // exact: x holds dt values
            lut_rows(lut, t, lut->grad, idx, dyb ? NULL : tdy, dyb, m);
        } else {
            const float* xc = tx;  // (m)
            if (xl)
                dtype_to_f32_row(tx, dt, (const char*)xl + i0 * es, m);
            else
                xc = x + i0;
            act_grad_rows(act, dt, t, tdy, xc, m);
        }
        round_to(t, m, dt);
        for (size_t i = 0; i < m; i++) t[i] = 0.0f + t[i];  // the zeroed dx's add (-0 -> +0); not folded: no -ffast-math
        dtype_from_f32_row((char*)dxl + i0 * es, dt, t, m);
    }
}

void gelu_backward_low(void* dxl, const void* dyl, const float* x, const void* xl, size_t n, DType dt) {
    act_backward_low(FFN_ACT_GELU, dxl, dyl, x, xl, n, dt);
}

void ffn_activation_forward_low(FfnActivation act, float* y, void* yl, const void* xl, size_t n, DType dt) {
    act_forward_into(act, y, yl, NULL, xl, n, dt);
}

void ffn_activation_backward_low(FfnActivation act, void* dxl, const void* dyl, const float* x, const void* xl,
                                 size_t n, DType dt) {
    act_backward_low(act, dxl, dyl, x, xl, n, dt);
}

Status ffn_backward(LayerCtx* c, float* dx, const FfnGrads* g, const float* dy, const float* h1, const float* f1,
                    const float* gact, const float* W1, const float* W2, float* dg, float* df1, int N, int D,
                    int F) {
    const size_t nf = (size_t)N * (size_t)F;
    Status s;
    if (c->low == DTYPE_F32) {
        // dg and df1 written, not zeroed and added into (2 N*F floats of memset fewer): dg = dy @ W2
        // may now hold -0 where 0 + (-0) gave +0, and GELU's backward then forms df1 = 0 + dg * f
        // from it, which is +0 for either zero (and the default NaN for 0 * inf either way), so
        // df1, the only reader of dg, gets the same bits
        if (!status_is_ok(s = linear_backward_dx(c, dg, NULL, g->W2, g->b2, dy, NULL, gact, NULL, W2, N, F, D, true)))
            return s;
        phase_enter(c->clock, PHASE_GELU);
        act_backward_into(c->act, df1, dg, f1, nf, DTYPE_F32, true);
        phase_enter(c->clock, PHASE_FFN_GEMM);
        return linear_backward(c, dx, g->W1, g->b1, df1, h1, W1, N, D, F);
    }
    // lin2: R(dy @ W2) stays low in slot C (dg is not written); GELU's backward reads it and
    // writes df1's low copy in slot A (df1 is not written), lin1's dy operand and the input of
    // its bias gradient's column sums
    const size_t es = dtype_traits(c->low)->size;
    void* dgl = scratch(c, LAYER_SCRATCH_C, nf * es);  // (N, F) low
    s = linear_backward_ops(c, NULL, dgl, g->W2, g->b2, dy, NULL, gact, NULL, W2, N, F, D);
    if (!status_is_ok(s)) return s;
    phase_enter(c->clock, PHASE_GELU);
    const void* f1l = kept_valid(c, f1, nf);
    CHECK(f1l || !kept_find(c, f1, nf), "lin1's output registered but not produced");
    void* df1l = scratch(c, LAYER_SCRATCH_A, nf * es);  // (N, F) low
    c->operand_of = NULL;
    act_backward_low(c->act, df1l, dgl, f1, f1l, nf, c->low);
    phase_enter(c->clock, PHASE_FFN_GEMM);
    (void)dg;
    (void)df1;
    return linear_backward_ops(c, dx, NULL, g->W1, g->b1, NULL, df1l, h1, NULL, W1, N, D, F);
}

// ---- ReLU ----
void relu_forward(float* y, const float* x, size_t n) { relu_rows(y, x, n); }

void relu_backward(float* dx, const float* dy, const float* y, size_t n) {
    // threshold_backward(grad, result, 0): 0 where result <= 0, else grad
    for (size_t i = 0; i < n; i++) dx[i] += y[i] <= 0.0f ? 0.0f : dy[i];
}

// ---- softmax ----
// reference: pytorch aten/src/ATen/native/cpu/SoftMaxKernel.cpp _vec_softmax_lastdim and
// _vec_softmax_backward, in the form ATen's AVX-512 build runs them: max over the row, e =
// exp(x - max) with a vectorized float exp, sum = vec::reduce_all (SM_LANES float lanes, element
// j into lane j % SM_LANES, a row's tail into the first lanes, then the lanes added pairwise:
// lane k + half into lane k, halving), p = e * (1 / sum). The exp is vexp (SLEEF's u10 form, as
// ATen's Vectorized<float>::exp; max 0.97 ulp) instead of glibc's scalar expf (0.5 ulp, a call
// per element). The order and every operation are fixed in the source, so each clone (AVX-512,
// AVX2+FMA, baseline) computes the same bits.
#define SM_CLONES SIMD_CLONES
enum { SM_LANES = 16 };

// exp for the softmax: vexp, but NaN stays NaN (vexp clamps it; x - max is NaN when the row
// holds a NaN or two infinities, and torch's softmax then returns NaN).
__attribute__((always_inline)) static inline float softmax_exp(float d) { return select_bits(d != d, d, vexp(d)); }

// row (n) rounded in place to dt: bf16 inline (vectorized), fp16 through the row converter
static inline void round_row(float* row, int n, DType dt) {
    if (dt == DTYPE_BF16) {
#pragma omp simd
        for (int j = 0; j < n; j++) row[j] = bf16_round_f32(row[j]);
    } else if (dt == DTYPE_F16) {
        dtype_round_row(row, dt, (size_t)n);
    }
}

// vec::reduce_all(+) of v (n >= 1) at SM_LANES float lanes, as ATen's functional computes it:
// fewer than SM_LANES values are added one by one from the left (vec_reduce_all with a size);
// else lane k starts at v[k], each further full vector adds, a partial last vector adds into the
// first lanes, then lane k + half into lane k, halving. Softmax's sum of exponentials and
// log_softmax's (vec::map_reduce_all: the same adds of the mapped values).
__attribute__((always_inline)) static inline float reduce_all_sum(const float* v, int n) {
    if (n < SM_LANES) {
        float s = v[0];
        for (int j = 1; j < n; j++) s += v[j];
        return s;
    }
    float acc[SM_LANES];
    for (int k = 0; k < SM_LANES; k++) acc[k] = v[k];
    int j0 = SM_LANES;
    for (; j0 + SM_LANES <= n; j0 += SM_LANES)
        for (int k = 0; k < SM_LANES; k++) acc[k] += v[j0 + k];
    for (int k = 0; j0 + k < n; k++) acc[k] += v[j0 + k];
    // the steps written out, so that they vectorize
    for (int k = 0; k < 8; k++) acc[k] += acc[k + 8];
    for (int k = 0; k < 4; k++) acc[k] += acc[k + 4];
    for (int k = 0; k < 2; k++) acc[k] += acc[k + 2];
    return acc[0] + acc[1];
}

// p = exp(v - max(v)) * (1 / sum) over a row of n (p may be v); the max is exact in any order
SM_CLONES static void softmax_row_f32(float* p, const float* v, int n) {
    float mx[SM_LANES];
    for (int k = 0; k < SM_LANES; k++) mx[k] = -INFINITY;
    int j0 = 0;
    for (; j0 + SM_LANES <= n; j0 += SM_LANES)
        for (int k = 0; k < SM_LANES; k++) mx[k] = v[j0 + k] > mx[k] ? v[j0 + k] : mx[k];
    for (int k = 0; j0 + k < n; k++) mx[k] = v[j0 + k] > mx[k] ? v[j0 + k] : mx[k];
    // The lanes' max as a tree (GCC vectorizes the fixed-width steps). No lane is NaN: a lane
    // starts at -inf and takes v only where v > it, which a NaN v never is (a NaN row still
    // gives NaN: x - max is NaN there, and so are exp, the sum and every p). The tree can differ
    // from lane order only in the sign of a zero maximum, and v - (+0) == v - (-0) except for
    // v = -0, where exp gives 1 for both.
    for (int k = 0; k < 8; k++) mx[k] = mx[k + 8] > mx[k] ? mx[k + 8] : mx[k];
    for (int k = 0; k < 4; k++) mx[k] = mx[k + 4] > mx[k] ? mx[k + 4] : mx[k];
    for (int k = 0; k < 2; k++) mx[k] = mx[k + 2] > mx[k] ? mx[k + 2] : mx[k];
    const float m = mx[1] > mx[0] ? mx[1] : mx[0];
#pragma omp simd  // element-wise
    for (int j = 0; j < n; j++) p[j] = softmax_exp(v[j] - m);
    // reduce_all_sum: rows of fewer than 16 (sequences under 16 tokens) are summed one by one;
    // lanes and a tree there made 18-48% of the values of rows of 3..15 differ from torch's
    const float inv = 1.0f / reduce_all_sum(p, n);
#pragma omp simd
    for (int j = 0; j < n; j++) p[j] *= inv;
}

SM_CLONES void softmax_forward_row(float* p, const float* x, const float* mask, int n, DType dt) {
    if (mask) {
#pragma omp simd
        for (int j = 0; j < n; j++) p[j] = x[j] + mask[j];
        softmax_row_f32(p, p, n);
    } else {
        softmax_row_f32(p, x, n);
    }
    round_row(p, n, dt);
}

// softmax backward's sum(dp * p) on fp32 P as ATen's _vec_softmax_backward computes it
// (vec::map2_reduce_all over SM_LANES float lanes): fewer than SM_LANES elements summed one by one from the left, the
// products rounded; else lane k starts at dp[k] p[k], each further full vector adds its rounded
// products, a partial last vector adds fused (fmaf: the compiler's contraction in torch's build),
// then the lanes pairwise as the forward's. Measured against torch 2.15's _softmax_backward_data
// on 3,000 fp32 rows of every n in 1..40: 0 values differ (a double-accumulated sum, before:
// 735,208 of 2,460,000 differed).
__attribute__((always_inline)) static inline float softmax_dot_f32(const float* dp, const float* p, int n) {
    float d;
    if (n < SM_LANES) {
        d = dp[0] * p[0];
        for (int j = 1; j < n; j++) d += dp[j] * p[j];
    } else {
        float acc[SM_LANES];
        for (int k = 0; k < SM_LANES; k++) acc[k] = dp[k] * p[k];
        int j0 = SM_LANES;
        for (; j0 + SM_LANES <= n; j0 += SM_LANES)
            for (int k = 0; k < SM_LANES; k++) acc[k] += dp[j0 + k] * p[j0 + k];
        for (int k = 0; j0 + k < n; k++) acc[k] = fmaf(dp[j0 + k], p[j0 + k], acc[k]);
        for (int h = SM_LANES / 2; h >= 1; h /= 2)
            for (int k = 0; k < h; k++) acc[k] += acc[k + h];
        d = acc[0];
    }
    return d;
}

// The same on bf16/fp16 tensors (dp, p hold values of dt): ATen's reduced-type map2_reduce_all
// loads vectors of 32 values as two float vectors of 16, each with its own accumulator: rows of
// 17..31 put the upper 16 products into the first lanes and add the 16 lanes one by one; rows of
// at most 16 add their products one by one; longer rows keep both accumulators over the 32-blocks
// (a partial last block into the first lanes of each), add them, then fold the lanes pairwise.
// The products of two 16-bit values are exact in float. Measured against torch 2.15 on 2,000
// rows of every length 1..40, bf16 and fp16: 0 of 1,640,000 values differ each (the fp32 order:
// 42 and 84).
__attribute__((always_inline)) static inline float softmax_dot_low(const float* dp, const float* p, int n) {
    float d;
    if (n <= SM_LANES) {
        d = dp[0] * p[0];
        for (int j = 1; j < n; j++) d += dp[j] * p[j];
    } else if (n < 2 * SM_LANES) {
        float v[SM_LANES];
        for (int k = 0; k < SM_LANES; k++) v[k] = dp[k] * p[k];
        for (int k = 0; SM_LANES + k < n; k++) v[k] += dp[SM_LANES + k] * p[SM_LANES + k];
        d = v[0];
        for (int k = 1; k < SM_LANES; k++) d += v[k];
    } else {
        float a0[SM_LANES], a1[SM_LANES];
        for (int k = 0; k < SM_LANES; k++) a0[k] = dp[k] * p[k], a1[k] = dp[SM_LANES + k] * p[SM_LANES + k];
        int j0 = 2 * SM_LANES;
        for (; j0 + 2 * SM_LANES <= n; j0 += 2 * SM_LANES)
            for (int k = 0; k < SM_LANES; k++) {
                a0[k] += dp[j0 + k] * p[j0 + k];
                a1[k] += dp[j0 + SM_LANES + k] * p[j0 + SM_LANES + k];
            }
        const int rest = n - j0;
        for (int k = 0; k < SM_LANES && k < rest; k++) a0[k] += dp[j0 + k] * p[j0 + k];
        for (int k = 0; SM_LANES + k < rest; k++) a1[k] += dp[j0 + SM_LANES + k] * p[j0 + SM_LANES + k];
        for (int k = 0; k < SM_LANES; k++) a0[k] += a1[k];
        for (int h = SM_LANES / 2; h >= 1; h /= 2)
            for (int k = 0; k < h; k++) a0[k] += a0[k + h];
        d = a0[0];
    }
    return d;
}

// dx = (dp - sum(dp * p)) * p, the sum in ATen's order for P's dtype (above), rounded to dt
SM_CLONES void softmax_backward_row(float* dx, const float* dp, const float* p, int n, DType dt) {
    const float d = dt == DTYPE_F32 ? softmax_dot_f32(dp, p, n) : softmax_dot_low(dp, p, n);
#pragma omp simd
    for (int j = 0; j < n; j++) dx[j] = (dp[j] - d) * p[j];
    round_row(dx, n, dt);
}

// ---- attention ----
float attention_scaling(int dh) { return (float)pow((double)dh, -0.5); }

size_t attention_work_floats(int B, int T, int D) { return 4 * (size_t)B * (size_t)T * (size_t)D; }

// layers.h: the fp16 order of each attention product. Measured against torch 2.15 on products
// built so that every order rounds differently (B x H in {2x2, 1x2, 2x1, 1x1, 3x4}, (T, dh) in
// {(16, 16), (20, 12), (72, 24)}): these orders 0 mismatches, every other 5-516 per
// configuration; the golden attention_f16_orders keeps that check.
bool attention_k_grad_col_major(int B, int T) { return B == 1 && T > 1; }

GemmF16Sum attention_f16_sum(AttentionProduct product, int B, int H, int T) {
    const bool k_view = B == 1 || H == 1 || T == 1;  // matmul's reshape of k^T is a view
    switch (product) {
        case ATT_SCORES: return k_view ? GEMM_F16_SUM_DOT : GEMM_F16_SUM_MM;
        case ATT_DQ: return k_view ? GEMM_F16_SUM_MM : GEMM_F16_SUM_DOT;
        case ATT_DP: return GEMM_F16_SUM_DOT;
        case ATT_PV:
        case ATT_DV:
        case ATT_DK: return GEMM_F16_SUM_MM;
    }
    return GEMM_F16_SUM_MM;
}

// One per-head product into fp32 C (M, N; leading dimension ldc): C = R(op(A) @ op(B)), beta 0,
// on the worker's single-threaded handle; in a low mode the GEMM writes a low C into the
// worker's buffer, widened row by row here (mm_on's OUT_LOW, without its parallel passes: this
// runs inside the (b, h) loop).
// cl_dst (low modes; may be NULL): the low C goes there, leading dimension ldcl, instead of the
// worker's packed buffer, and stays there as a later GEMM's operand (attention's merged context);
// then C may be NULL (nothing reads the fp32 values: no widening).
// product, nb, nh: which of attention's products this is and the batch and head counts: the
// low-precision order torch takes for it (attention_f16_sum; every product has M = T) and the
// size of torch's bmm, whose batch is nb * nh (it decides oneDNN or CPU BLAS for bf16).
static Status head_mm(const LayerCtx* c, HeadWorker* w, AttentionProduct product, int nb, int nh, bool ta, bool tb,
                      int M, int N, int K, const void* A, int lda, const void* B, int ldb, float* C, int ldc,
                      void* cl_dst, int ldcl) {
    GemmArgs g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = 1.0f, .beta = 0.0f,
                  .ab_dtype = c->low, .A = A, .lda = lda, .B = B, .ldb = ldb,
                  .f16_sum = attention_f16_sum(product, nb, nh, M),
                  .torch_macs = (int64_t)nb * nh * M * N * K};
    if (c->low == DTYPE_F32) {
        g.c_dtype = DTYPE_F32;
        g.C = C;
        g.ldc = ldc;
        return gemm_run(&w->gemm, &g);
    }
    const size_t es = dtype_traits(c->low)->size;
    char* cl = cl_dst;  // (M, N) low, leading dimension ldcl
    if (!cl) {
        cl = grow(&w->cl, &w->cl_bytes, (size_t)M * (size_t)N * es);  // packed
        ldcl = N;
    }
    g.c_dtype = c->low;
    g.C = cl;
    g.ldc = ldcl;
    Status s = gemm_run(&w->gemm, &g);
    if (!status_is_ok(s)) return s;
    if (!C) return status_ok();
    for (int i = 0; i < M; i++)
        dtype_to_f32_row(C + (size_t)i * (size_t)ldc, c->low, cl + (size_t)i * (size_t)ldcl * es, (size_t)N);
    return status_ok();
}

// One row of a head's scores to probabilities (compiled per CPU path, as the softmax): in a low
// mode the row first widened from the product's low result `cl` (NULL in fp32: the row holds
// it); then S * scaling rounded to the scores' dtype, the softmax (with the mask, in fp32),
// and R(P)'s low copy into `pl` when not NULL. row (n) fp32.
SM_CLONES static void attention_probs_row(float* row, const void* cl, void* pl, DType low, float scale,
                                          const float* mask, DType pdt, int n) {
    if (cl) dtype_to_f32_row(row, low, cl, (size_t)n);
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] *= scale;
    round_row(row, n, low);
    softmax_forward_row(row, row, mask, n, pdt);
    if (pl) dtype_from_f32_row(pl, low, row, (size_t)n);
}

SM_CLONES static void scale_row(float* row, float scale, int n) {
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] *= scale;
}

// dst = src (n floats) with non-temporal stores: dst's lines are written without being read into
// the cache first (no read-for-ownership), for an array written now and read again much later
// (the stored attention probabilities, read by the backward), whose old contents are long out of
// cache. The same values as memcpy. SSE's 16-byte stores, every x86-64 CPU has them: the copy is
// bound by the writes to memory (64 KiB: 2.46 us with them, 2.43 us with AVX-512's 64-byte ones).
static void stream_copy_f32(float* restrict dst, const float* restrict src, size_t n) {
#if defined(__x86_64__)
    size_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 15u); i++) dst[i] = src[i];
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; i++) dst[i] = src[i];
    _mm_sfence();
#else
    memcpy(dst, src, n * sizeof(float));
#endif
}

// Asks for the n bytes at p, every cache line at once: a block last touched long ago (the stored
// attention probabilities, read by the backward a whole forward after they were written) then
// arrives with all its misses in flight together, while other work runs, instead of one row at
// a time inside the product that reads it. A hint: no value depends on it.
static void prefetch_block(const void* p, size_t n) {
    const char* b = (const char*)p;
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch(b + o, 0, 3);
}

// The first failure of a parallel loop (kept under a critical section; later ones are dropped).
static void keep_first_error(Status* first, const Status* s) {
    if (status_is_ok(*s)) return;
#pragma omp critical(attention_error)
    if (status_is_ok(*first)) *first = *s;
}

// attention_forward, plus res (B, T, D) added to out in out_lin's widening pass when not NULL
static Status attention_forward_res(LayerCtx* c, float* out, const AttentionActs* a, const float* x,
                                    const AttentionParams* w, const float* key_mask, const float* res, int B, int T,
                                    int D, int H) {
    CHECK(H >= 1 && D % H == 0, "dim %d is not a multiple of n_heads %d", D, H);
    const int N = B * T, dh = D / H;
    const size_t TT = (size_t)T * (size_t)T;
    Status s;
    const size_t nd = (size_t)N * (size_t)D;
    phase_enter(c->clock, PHASE_QKV_GEMM);
    const void* xl = gemm_input(c, LAYER_SCRATCH_A, x, nd);  // (B, T, D) GEMM dtype, for q, k, v
    const DType low = c->low;
    const size_t es = dtype_traits(low)->size;
    // q, k, v as the score and context products' operands (B, T, D): in a low mode the
    // linears leave their low results there (the values of q, k, v; no narrowing pass)
    // (kept copies, when registered, are what the backward's products read again; q, k, v and
    // ctx then need no fp32 values at all: only GEMMs read them)
    const void* ql = a->q;
    const void* kl = a->k;
    const void* vl = a->v;
    float *qy = a->q, *ky = a->k, *vy = a->v, *ctxy = a->ctx;  // fp32 results; NULL: not written
    if (low != DTYPE_F32) {
        bool lo;
        if (!(ql = kept_produce(c, a->q, nd, &lo))) ql = scratch(c, LAYER_SCRATCH_Q, nd * es);
        if (lo) qy = NULL;
        if (!(kl = kept_produce(c, a->k, nd, &lo))) kl = scratch(c, LAYER_SCRATCH_K, nd * es);
        if (lo) ky = NULL;
        if (!(vl = kept_produce(c, a->v, nd, &lo))) vl = scratch(c, LAYER_SCRATCH_V, nd * es);
        if (lo) vy = NULL;
    }
    if (!status_is_ok(s = linear_forward_xl(c, qy, (void*)ql, xl, w->Wq, w->bq, NULL, N, D, D))) return s;
    if (!status_is_ok(s = linear_forward_xl(c, ky, (void*)kl, xl, w->Wk, w->bk, NULL, N, D, D))) return s;
    if (!status_is_ok(s = linear_forward_xl(c, vy, (void*)vl, xl, w->Wv, w->bv, NULL, N, D, D))) return s;
    phase_enter(c->clock, PHASE_ATTENTION);
    // the merged context as out_lin's operand (B, T, D): the heads' low results, kept or in slot
    // A (x's copy is no longer needed), widened into acts->ctx unless nothing reads that
    void* ctxl = NULL;
    if (low != DTYPE_F32) {
        bool lo;
        if (!(ctxl = kept_produce(c, a->ctx, nd, &lo))) ctxl = scratch(c, LAYER_SCRATCH_A, nd * es);
        if (lo) ctxy = NULL;
    }
    // R(P) for the context products: (B, H, T, T) in the GEMM dtype (P itself in fp32 mode)
    float* pv = a->drop.keep ? a->pd : a->p;  // what the PV product reads (dropout: P * noise)
    const size_t np = (size_t)B * (size_t)H * TT;
    void* pl = pv;
    bool p_low_only = false;  // P's kept low copy holds its values: the fp32 P is not written
    if (low != DTYPE_F32 && !(pl = kept_produce(c, pv, np, &p_low_only))) pl = scratch(c, LAYER_SCRATCH_P, np * es);
    if (!status_is_ok(s = heads_open(c, omp_get_max_threads()))) return s;
    const float scale = attention_scaling(dh);
    const DType pdt = key_mask ? DTYPE_F32 : low;
    Status first = status_ok();
    // Per (b, h), independent of every other head:
    //   S = R(q_h @ k_h^T) into p; S = R(S * scaling) (the scores' dtype); softmax rows (fp32
    //   with the mask, else the low dtype); ctx_h = R(R(P) @ v_h), heads merged into (B, T, D).
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; bh++) {
        HeadWorker* hw = &c->heads[omp_get_thread_num()];
        const int b = bh / H, h = bh % H;
        const size_t off = (size_t)b * (size_t)T * (size_t)D + (size_t)h * (size_t)dh;
        const size_t poff = (size_t)bh * TT;
        float* S = a->p + poff;  // (T, T)
        // Without dropout: the fp32 scores and P in the worker's own (T, T) buffer, which stays
        // in cache from head to head, and P streamed to S for the backward (the stored P's lines,
        // last touched a step ago, are then never read in); in fp32 the PV product reads P from
        // the buffer. The same values as computing in S.
        float* Sw = !a->drop.keep ? grow((void**)&hw->dP, &hw->dP_bytes, TT * sizeof(float)) : S;
        // low modes: the product's low result stays in the worker's buffer (C NULL) and each
        // row is widened in the row loop below, while it is in L1 (the same exact widening)
        Status hs = head_mm(c, hw, ATT_SCORES, B, H, false, true, T, T, dh, elem(c, ql, off), D, elem(c, kl, off),
                            D, low == DTYPE_F32 ? Sw : NULL, T, NULL, 0);
        if (status_is_ok(hs)) {
            // without dropout, R(P)'s low copy (the PV product's operand) row by row as well
            char* plrow = low != DTYPE_F32 && !a->drop.keep ? (char*)pl + poff * es : NULL;
            // P low-only: the row's low copy is all that is kept, and narrowing it is the rounding
            // to P's dtype (low here: no mask), so the fp32 row is left unrounded (DTYPE_F32)
            const DType row_dt = p_low_only ? DTYPE_F32 : pdt;
            for (int i = 0; i < T; i++)
                attention_probs_row(Sw + (size_t)i * (size_t)T,
                                    low != DTYPE_F32 ? (const char*)hw->cl + (size_t)i * (size_t)T * es : NULL,
                                    plrow ? plrow + (size_t)i * (size_t)T * es : NULL, low, scale,
                                    key_mask ? key_mask + (size_t)b * (size_t)T : NULL, row_dt, T);
            if (Sw != S && !p_low_only) stream_copy_f32(S, Sw, TT);
            if (a->drop.keep)  // attention dropout on the probabilities, in their dtype
                dropout_mul(pv + poff, S, a->drop.keep + poff, TT, dropout_scale(a->drop.p, pdt), pdt);
            if (low != DTYPE_F32 && !plrow) dtype_from_f32_row((char*)pl + poff * es, low, pv + poff, TT);
            const void* P = Sw != S && low == DTYPE_F32 ? (const void*)Sw : elem(c, pl, poff);  // (T, T)
            hs = head_mm(c, hw, ATT_PV, B, H, false, false, T, dh, T, P, T, elem(c, vl, off), D,
                         ctxy ? ctxy + off : NULL, D, ctxl ? (char*)ctxl + off * es : NULL, D);
        }
        keep_first_error(&first, &hs);
    }
    if (!status_is_ok(first)) return first;
    phase_enter(c->clock, PHASE_OUT_GEMM);
    if (low == DTYPE_F32) return linear_forward_residual(c, out, a->ctx, w->Wo, w->bo, res, N, D, D);
    c->operand_of = NULL;  // slot A may now hold ctx's low copy
    return linear_forward_xl(c, out, NULL, ctxl, w->Wo, w->bo, res, N, D, D);
}

Status attention_forward(LayerCtx* c, float* out, const AttentionActs* a, const float* x, const AttentionParams* w,
                         const float* key_mask, int B, int T, int D, int H) {
    return attention_forward_res(c, out, a, x, w, key_mask, NULL, B, T, D, H);
}

Status attention_forward_residual(LayerCtx* c, float* out, const AttentionActs* a, const float* x,
                                  const AttentionParams* w, const float* key_mask, int B, int T, int D, int H) {
    return attention_forward_res(c, out, a, x, w, key_mask, x, B, T, D, H);
}

Status attention_backward(LayerCtx* c, float* dx, const AttentionGrads* g, const float* dout,
                          const AttentionActs* a, const float* x, const AttentionParams* w,
                          const float* key_mask, float* work, int B, int T, int D, int H) {
    CHECK(H >= 1 && D % H == 0);
    const int N = B * T, dh = D / H;
    const size_t nd = (size_t)N * (size_t)D, TT = (size_t)T * (size_t)T;
    float* dq = work;            // (B, T, D)
    float* dk = work + nd;       // (B, T, D)
    float* dv = work + 2 * nd;   // (B, T, D)
    float* dctx = work + 3 * nd; // (B, T, D)
    Status s;
    phase_enter(c->clock, PHASE_OUT_GEMM);
    const void* dctxl = dctx;  // (B, T, D) GEMM operand
    if (c->low == DTYPE_F32) {
        layers_zero(dctx, nd);
        if (!status_is_ok(s = linear_backward(c, dctx, g->Wo, g->bo, dout, a->ctx, w->Wo, N, D, D))) return s;
    } else {
        // dctx = 0 + R(dout @ Wo) (linear_backward into a zeroed dctx) and dctx's GEMM operand
        // R(dctx) (gemm_input), the same operations chunk by chunk in one pass over the low result
        const size_t es = dtype_traits(c->low)->size;
        char* rl = scratch(c, LAYER_SCRATCH_C, nd * es);  // (N, D) low
        s = linear_backward_ops(c, NULL, rl, g->Wo, g->bo, dout, NULL, a->ctx, NULL, w->Wo, N, D, D);
        if (!status_is_ok(s)) return s;
        char* dl = scratch(c, LAYER_SCRATCH_DCTX, nd * es);
        const Phase prev = phase_enter(c->clock, PHASE_CONVERT);
        widen_zero_add_narrow(dctx, dl, rl, c->low, nd);
        phase_enter(c->clock, prev);
        dctxl = dl;
    }
    phase_enter(c->clock, PHASE_ATTENTION);

    const void* ql = gemm_input(c, LAYER_SCRATCH_Q, a->q, nd);                           // (B, T, D)
    const void* kl = gemm_input(c, LAYER_SCRATCH_K, a->k, nd);                           // (B, T, D)
    const void* vl = gemm_input(c, LAYER_SCRATCH_V, a->v, nd);                           // (B, T, D)
    const void* pl = gemm_input(c, LAYER_SCRATCH_P, a->drop.keep ? a->pd : a->p, (size_t)B * (size_t)H * TT);
    // P low-only (no mask, no attention dropout, kept): the fp32 P was never written
    const bool p_low_only = !a->drop.keep && layer_kept_low_only(c, a->p, (size_t)B * (size_t)H * TT) != NULL;
    if (!status_is_ok(s = heads_open(c, omp_get_max_threads()))) return s;
    const float scale = attention_scaling(dh);
    const DType low = c->low;
    const size_t es = dtype_traits(low)->size;
    const DType pdt = key_mask ? DTYPE_F32 : low;
    // low modes: the heads' low results dq, dk, dv (B, T, D) stay as the q/k/v linears' dy
    // operands, and their bias gradients sum those low values (the same values): no fp32 copy
    // is widened into work
    char *dql = NULL, *dkl = NULL, *dvl = NULL;
    if (low != DTYPE_F32) {
        dql = scratch(c, LAYER_SCRATCH_DQKV, 3 * nd * es);
        dkl = dql + nd * es;
        dvl = dkl + nd * es;
    }
    for (int i = 0; i < c->heads_count; i++) amp_counters_reset(&c->heads[i].counters);
    Status first = status_ok();
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; bh++) {
        HeadWorker* hw = &c->heads[omp_get_thread_num()];
        const int b = bh / H, h = bh % H;
        const size_t off = (size_t)b * (size_t)T * (size_t)D + (size_t)h * (size_t)dh;
        const size_t poff = (size_t)bh * TT;
        float* dP = grow((void**)&hw->dP, &hw->dP_bytes, TT * sizeof(float));  // (T, T)
        float* dS = grow((void**)&hw->dS, &hw->dS_bytes, TT * sizeof(float));  // (T, T)
        // this head's stored P (the dv product's operand, or its low copy; and the fp32 P of the
        // softmax backward) requested now, to arrive while the dP product runs
        const void* Pop = elem(c, pl, poff);
        prefetch_block(Pop, TT * es);
        if (!p_low_only && Pop != (const void*)(a->p + poff)) prefetch_block(a->p + poff, TT * sizeof(float));
        // dP = R(dctx_h @ v_h^T) ; dv_h = R(R(P)^T @ dctx_h)
        // low modes without dropout: dP's low result stays in the worker's buffer (C NULL; the
        // dv product writes into dvl, not there) and each row is widened in the row loop below,
        // while it is in L1 (the same exact widening; dropout's multiply wants the whole fp32 dP)
        const bool dp_rows = low != DTYPE_F32 && !a->drop.keep;
        Status hs = head_mm(c, hw, ATT_DP, B, H, false, true, T, T, dh, elem(c, dctxl, off), D, elem(c, vl, off), D,
                            dp_rows ? NULL : dP, T, NULL, 0);
        if (status_is_ok(hs))
            hs = head_mm(c, hw, ATT_DV, B, H, true, false, T, dh, T, elem(c, pl, poff), T, elem(c, dctxl, off), D,
                         dvl ? NULL : dv + off, D,
                         dvl ? (char*)dvl + off * es : NULL, D);
        if (status_is_ok(hs)) {
            if (a->drop.keep)  // the dropout's backward: dP * noise, in P's dtype
                dropout_mul(dP, dP, a->drop.keep + poff, TT, dropout_scale(a->drop.p, pdt), pdt);
            // Row by row, each row's passes while it is in L1 (element-wise after the row's
            // softmax backward, so the same operations as whole-array passes):
            //   softmax backward in its forward dtype (fp32 P and the widened dP with a mask);
            //   with a mask the fp32 gradient flows back through the mixed add to the low scores
            //   (counted per worker; integer counts, summed after the loop in any order);
            //   the `* scaling` backward, in the scores' dtype; the GEMM operand's low copy.
            const float* P = a->p + poff;  // (T, T); not written when P is low-only: its low copy's rows
            char* dSlb = low != DTYPE_F32 ? grow(&hw->dSl, &hw->dSl_bytes, TT * es) : NULL;  // (T, T) low
            for (int i = 0; i < T; i++) {
                float* row = dS + (size_t)i * (size_t)T;  // (T)
                const float* Prow = P + (size_t)i * (size_t)T;
                float* dProw = dP + (size_t)i * (size_t)T;  // (T)
                if (dp_rows) dtype_to_f32_row(dProw, low, (const char*)hw->cl + (size_t)i * (size_t)T * es, (size_t)T);
                if (p_low_only) {  // P's row widened (exact) into row, which the backward then overwrites
                    dtype_to_f32_row(row, low, (const char*)Pop + (size_t)i * (size_t)T * es, (size_t)T);
                    Prow = row;
                }
                softmax_backward_row(row, dProw, Prow, T, pdt);
                if (key_mask) amp_round_act_grad(row, (size_t)T, low, c->counters ? &hw->counters : NULL);
                scale_row(row, scale, T);
                // low modes: R(dS * scaling) is the narrowing itself (nearest-even, the NaN and
                // overflow rules of the rounding point; nothing reads the fp32 row afterwards)
                if (low != DTYPE_F32) dtype_from_f32_row(dSlb + (size_t)i * (size_t)T * es, low, row, (size_t)T);
            }
            const void* dSl = low != DTYPE_F32 ? (const void*)dSlb : dS;  // (T, T) GEMM operand
            // dq_h = R(dS @ k_h) ; dk_h = R(dS^T @ q_h)
            hs = head_mm(c, hw, ATT_DQ, B, H, false, false, T, dh, T, dSl, T, elem(c, kl, off), D,
                         dql ? NULL : dq + off, D, dql ? (char*)dql + off * es : NULL, D);
            if (status_is_ok(hs))
                hs = head_mm(c, hw, ATT_DK, B, H, true, false, T, dh, T, dSl, T, elem(c, ql, off), D,
                             dkl ? NULL : dk + off, D, dkl ? (char*)dkl + off * es : NULL, D);
        }
        keep_first_error(&first, &hs);
    }
    if (!status_is_ok(first)) return first;
    if (c->counters)
        for (int i = 0; i < c->heads_count; i++) {
            c->counters->act_values += c->heads[i].counters.act_values;
            c->counters->act_underflow += c->heads[i].counters.act_underflow;
            c->counters->act_overflow += c->heads[i].counters.act_overflow;
        }
    // autograd sums the input gradient as ((d_residual + d_v) + d_k) + d_q (measured)
    phase_enter(c->clock, PHASE_QKV_GEMM);
    const void* xl = gemm_input(c, LAYER_SCRATCH_X, x, nd);  // (B, T, D), shared by the three
    if (low == DTYPE_F32) {
        if (!status_is_ok(s = linear_backward_xl(c, dx, g->Wv, g->bv, dv, x, xl, w->Wv, N, D, D))) return s;
        if (!status_is_ok(s = linear_backward_xl(c, dx, g->Wk, g->bk, dk, x, xl, w->Wk, N, D, D))) return s;
        return linear_backward_xl(c, dx, g->Wq, g->bq, dq, x, xl, w->Wq, N, D, D);
    }
    // low modes: the three input gradients' low results R(d_v @ Wv), R(d_k @ Wk), R(d_q @ Wq)
    // side by side, then added to dx in that order in one pass (the same fp32 adds as three
    // widen-and-add passes)
    char* rv = scratch(c, LAYER_SCRATCH_DX3, 3 * nd * es);  // (3, N, D) low
    char *rk = rv + nd * es, *rq = rk + nd * es;
    if (!status_is_ok(s = linear_backward_ops(c, NULL, rv, g->Wv, g->bv, NULL, dvl, x, xl, w->Wv, N, D, D))) return s;
    // batch 1: k's gradient reaches torch's k_lin column-major (layers.h dy_col_major)
    c->dy_col_major = attention_k_grad_col_major(B, T);
    s = linear_backward_ops(c, NULL, rk, g->Wk, g->bk, NULL, dkl, x, xl, w->Wk, N, D, D);
    c->dy_col_major = false;
    if (!status_is_ok(s)) return s;
    if (!status_is_ok(s = linear_backward_ops(c, NULL, rq, g->Wq, g->bq, NULL, dql, x, xl, w->Wq, N, D, D))) return s;
    const Phase prev = phase_enter(c->clock, PHASE_CONVERT);
    widen_add3(dx, low, rv, rk, rq, nd);
    phase_enter(c->clock, prev);
    return status_ok();
}

// ---- classifier head ----
Status classifier_forward(LayerCtx* c, float* logits, const ClassifierActs* a, const float* h,
                          const ClassifierParams* w, int B, int T, int D, int L) {
    for (int b = 0; b < B; b++)
        memcpy(a->pooled + (size_t)b * (size_t)D, h + (size_t)b * (size_t)T * (size_t)D, (size_t)D * sizeof(float));
    Status s = linear_forward(c, a->pre, a->pooled, w->Wpre, w->bpre, B, D, D);
    if (!status_is_ok(s)) return s;
    relu_forward(a->act, a->pre, (size_t)B * (size_t)D);
    if (!a->drop.keep) return linear_forward(c, logits, a->act, w->Wcls, w->bcls, B, D, L);
    dropout_mul(a->dropped, a->act, a->drop.keep, (size_t)B * (size_t)D, dropout_scale(a->drop.p, c->low), c->low);
    return linear_forward(c, logits, a->dropped, w->Wcls, w->bcls, B, D, L);
}

Status classifier_backward(LayerCtx* c, float* dh, const ClassifierGrads* g, const float* dlogits,
                           const ClassifierActs* a, const ClassifierParams* w, float* work, int B, int T, int D,
                           int L) {
    const size_t bd = (size_t)B * (size_t)D;
    float* dact = work;  // (B, D)
    memset(dact, 0, bd * sizeof(float));
    Status s = linear_backward(c, dact, g->Wcls, g->bcls, dlogits, a->drop.keep ? a->dropped : a->act, w->Wcls, B,
                               D, L);
    if (!status_is_ok(s)) return s;
    if (a->drop.keep) dropout_mul(dact, dact, a->drop.keep, bd, dropout_scale(a->drop.p, c->low), c->low);
    // ReLU backward in place, (B, D): threshold_backward(grad, result, 0), 0 where relu's output
    // is <= 0, else the gradient (also where the output is NaN, as in torch)
    float* dpre = dact;
    for (size_t i = 0; i < bd; i++) dpre[i] = a->act[i] <= 0.0f ? 0.0f : dact[i];
    float* dpooled = work + bd;  // (B, D)
    memset(dpooled, 0, bd * sizeof(float));
    s = linear_backward(c, dpooled, g->Wpre, g->bpre, dpre, a->pooled, w->Wpre, B, D, D);
    if (!status_is_ok(s)) return s;
    for (int b = 0; b < B; b++) {
        float* d = dh + (size_t)b * (size_t)T * (size_t)D;  // (D) token 0 of sequence b
        for (int j = 0; j < D; j++) d[j] += dpooled[(size_t)b * (size_t)D + (size_t)j];
    }
    return status_ok();
}

// ---- cross-entropy ----
// reference: pytorch SoftMaxKernel.cpp _vec_log_softmax_lastdim (x - max - log(sum exp(x - max))),
// LossNLL.cpp nll_loss_out_frame (mean: -sum / total_weight) and nll_loss_backward_out_frame
// (-(grad / total_weight) at the target), _vec_log_softmax_backward (dy - exp(y) * sum(dy))
// The losses take fp32 logits in every mode: cross-entropy is on CPU autocast's fp32 list, and
// the Trainer's LabelSmoother gets accelerate's fp32 outputs (layers.h).
// fp32 log_softmax of one row as ATen's _vec_log_softmax_lastdim (AVX-512 build: 16 float lanes):
// max; sum of exp(x - max) by vec::map_reduce_all (fewer than 16 values one by one from the left;
// else lane k starts at element k, full vectors add, a partial last vector adds into its first
// lanes, the lanes folded pairwise), exp SLEEF's u10 (vexp_full), lse = SLEEF's logf (vlog_sleef),
// lp = (x - max) - lse. Measured against torch 2.15's log_softmax on 4,000 fp32 rows of every
// length 2..40: 0 values differ (glibc's expf and logf with a sequential sum: 506,116 of 3,276,000).
static void log_softmax_row_f32(float* lp, const float* x, int L) {  // lp, x (L)
    float mx = -INFINITY;
    for (int j = 0; j < L; j++) mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < L; j++) lp[j] = vexp_full(x[j] - mx);  // lp holds the exponentials first
    const float sum = reduce_all_sum(lp, L);
    const float lse = isfinite(sum) && sum > 0.0f ? vlog_sleef(sum) : logf(sum);
    for (int j = 0; j < L; j++) lp[j] = (x[j] - mx) - lse;
}

// nll_loss's mean of -logp[b, label_b] as ATen's nll_loss_out_frame sums it (no class weights):
// a cascade of 8 partial sums, each row subtracted from sum 0, which moves up a level (added into
// the next, then reset) at every row index whose low 4 bits (level j: bits 4j..4j+3) are all 0;
// then the 8 added from +0 in order, / B. Measured against torch's F.cross_entropy on fp32 logits,
// B in 2..1000: 0 differ (a left-to-right sum: 17-91% of losses 1 ulp apart for B >= 3).
static float nll_mean(const float* lp, const int32_t* labels, int B, int L) {
    enum { LEVELS = 8, POWER = 4 };  // level_power = max(4, CeilLog2(B) / 8): 4 below B = 2^40
    float part[LEVELS] = {0};
    for (int b = 0; b < B; b++) {
        part[0] -= lp[(size_t)b * (size_t)L + (size_t)labels[b]];
        for (int j = 0; j + 1 < LEVELS; j++) {
            if (((int64_t)b & ((int64_t)15 << (j * POWER))) != 0) break;
            part[j + 1] += part[j];
            part[j] = 0.0f;
        }
    }
    float out = 0.0f;
    for (int j = 0; j < LEVELS; j++) out += part[j];
    return out / (float)B;
}

float cross_entropy_forward(float* logp, const float* logits, const int32_t* labels, int B, int L) {
    for (int i = 0; i < B; i++) {
        float* lp = logp + (size_t)i * (size_t)L;  // (L)
        CHECK(labels[i] >= 0 && labels[i] < L, "label %d of row %d outside [0, %d)", labels[i], i, L);
        log_softmax_row_f32(lp, logits + (size_t)i * (size_t)L, L);
    }
    return nll_mean(logp, labels, B, L);
}

float label_smoothing_forward(float* logp, float* work, const float* logits, const int32_t* labels, int B, int L,
                              double eps) {
    for (int i = 0; i < B; i++) {
        CHECK(labels[i] >= 0 && labels[i] < L, "label %d of row %d outside [0, %d)", labels[i], i, L);
        log_softmax_row_f32(logp + (size_t)i * (size_t)L, logits + (size_t)i * (size_t)L, L);
        work[i] = -logp[(size_t)i * (size_t)L + (size_t)labels[i]];  // gather of -logp
    }
    // nll_loss.sum() / B
    const float nll = torch_sum_f32(work, (size_t)B) / (float)B;
    // log_probs.sum(dim=-1, dtype=float32) of -logp: each row's sum in torch's order, negated after
    // (round to nearest is sign-symmetric, so the same bits)
    for (int i = 0; i < B; i++) work[i] = -torch_sum_f32(logp + (size_t)i * (size_t)L, (size_t)L);
    const float smooth = torch_sum_f32(work, (size_t)B) / (float)((int64_t)B * L);
    return (float)(1.0 - eps) * nll + (float)eps * smooth;
}

void label_smoothing_backward(float* dlogits, const float* logp, const int32_t* labels, float dloss, int B, int L,
                              double eps) {
    const float g_nll = (dloss * (float)(1.0 - eps)) / (float)B;
    const float g_sm = (dloss * (float)eps) / (float)((int64_t)B * L);
    float d[64];
    CHECK(L <= 64, "label smoothing over %d labels", L);
    for (int i = 0; i < B; i++) {
        const float* lp = logp + (size_t)i * (size_t)L;
        for (int j = 0; j < L; j++) d[j] = -(j == labels[i] ? g_sm + g_nll : g_sm);  // neg's backward
        // log_softmax's backward as ATen's _vec_host_softmax_backward_lastdim: sum = vec::reduce_all
        // of d (16 float lanes; fewer than 16 one by one from the left), then d - exp(lp) * sum, the
        // product and difference contracted into one FMA by the compiler, exp SLEEF's u10
        const float sum = reduce_all_sum(d, L);
        for (int j = 0; j < L; j++) dlogits[(size_t)i * (size_t)L + (size_t)j] = fmaf(-vexp_full(lp[j]), sum, d[j]);
    }
}

float mse_forward(float* sq, const float* logits, const int32_t* labels, int B) {
    for (int i = 0; i < B; i++) {
        const float d = logits[i] - (float)labels[i];  // mse kernel: diff = a - b; diff * diff
        sq[i] = d * d;
    }
    return torch_sum_f32(sq, (size_t)B) / (float)B;  // mean: sum_out(...).div_(numel)
}

void mse_backward(float* dlogits, const float* logits, const int32_t* labels, float dloss, int B) {
    const float norm = (float)(2.0 / (double)B);  // Mean: norm = 2. / numel, then to the dtype
    for (int i = 0; i < B; i++) dlogits[i] = norm * (logits[i] - (float)labels[i]) * dloss;
}

void cross_entropy_backward(float* dlogits, const float* logp, const int32_t* labels, float dloss, int B, int L) {
    const float g = -(dloss / (float)B);
    for (int i = 0; i < B; i++) {
        const float* lp = logp + (size_t)i * (size_t)L;  // (L)
        float* d = dlogits + (size_t)i * (size_t)L;      // (L)
        for (int j = 0; j < L; j++) d[j] += fmaf(-vexp_full(lp[j]), g, j == labels[i] ? g : 0.0f);
    }
}

// test_gemm.c — every registered GEMM backend against an fp64 oracle, for every input dtype,
// output dtype, transpose pair and a set of shapes (1x1x1, K=1, odd sizes, two bigger ones),
// in two variants:
//   padded: lda/ldb/ldc larger than needed with NaN in the padding, C pre-filled with NaN,
//           beta = 0 (C must not be read), alpha = -0.75 (not 1);
//   accum:  minimal leading dimensions, beta = 1 accumulating into a C with known values.
// Plus: argument validation, "unsupported never computes", naive's bitwise determinism
// across thread counts, and reuse of the oneDNN primitive cache.
// The backend loop iterates the registry (gemm_backend_at): a new backend is tested with no
// edit here. One cmocka test per backend x input dtype; it fails if any case fails.
// Output: one line per case,
//   gemm/<backend>/<ab>/<ta><tb>/<M>x<N>x<K> c=<c> <variant>: worst element err=.. tol=.. used=..% (max_abs_err=..) ok|FAIL
// where tol and used are those of the element that used the largest share of its tolerance,
// and one "unsupported: <reason>" line per backend x dtype pair that supports() declines.
// Run from the repository root.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm/gemm.h"
#include "core/rng.h"

#define TEST_THREADS 2

static const DType AB_DTYPES[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};

typedef struct {
    int M, N, K;
} Shape;

static const Shape SHAPES[] = {
    {1, 1, 1},      // smallest
    {17, 9, 1},     // K = 1: a rank-1 update
    {7, 7, 7},      // odd, below any vector width
    {33, 7, 127},   // odd sizes, long K
    {127, 33, 7},   // odd sizes, tall
    {7, 127, 33},   // odd sizes, wide
    {64, 96, 128},  // vector-width multiples
    {128, 768, 64}, // a DistilBERT-like projection slice
};
#define N_SHAPES ARRAY_LEN(SHAPES)
#define N_AB ARRAY_LEN(AB_DTYPES)

enum { VARIANT_PADDED = 0, VARIANT_ACCUM, VARIANT_COUNT };
static const char* const VARIANT_NAMES[VARIANT_COUNT] = {"padded", "accum"};
static const float VARIANT_ALPHA[VARIANT_COUNT] = {-0.75f, 1.0f};  // exact in every dtype
static const float VARIANT_BETA[VARIANT_COUNT] = {0.0f, 1.0f};
static const int VARIANT_PAD[VARIANT_COUNT] = {3, 0};  // extra elements per row

// ---------------------------------------------------------------------------------------
// The oracle: for one input dtype and shape, the logical op(A) (M, K) and op(B) (K, N) as
// fp32 values already representable in the dtype, and in fp64 dot[i][j] = sum_k a_ik b_kj
// and mag[i][j] = sum_k |a_ik b_kj|. Products of two fp32 values are exact in fp64 and the
// fp64 sums are ~2^29 times more accurate than the fp32 tolerance, so dot is the exact answer
// for this purpose. Computed once per (dtype, shape) and shared by every backend, transpose
// pair, output dtype and variant (they only lay the same values out differently).
typedef struct {
    bool ready;
    float* a;     // (M, K)
    float* b;     // (K, N)
    double* dot;  // (M, N)
    double* mag;  // (M, N)
} Oracle;
static Oracle oracles[N_AB][N_SHAPES];

// Uniform values in [-1, 1) with 24 random bits, rounded to `dt`. Every value is a multiple
// of 2^-24, so every product is a multiple of 2^-48 and no fp32 intermediate (sum, alpha
// scaling) can be subnormal: only the final rounding to a 16-bit C can land in a subnormal
// range (see tolerance()).
static void fill_values(float* x, size_t n, DType dt, uint64_t seed, uint64_t stream) {
    Rng r;
    rng_init(&r, seed, stream);
    rng_fill_uniform(&r, x, n, -1.0f, 1.0f);
    dtype_round_row(x, dt, n);
}

static const Oracle* oracle_get(size_t di, size_t si) {
    Oracle* o = &oracles[di][si];
    if (o->ready) return o;
    const int M = SHAPES[si].M, N = SHAPES[si].N, K = SHAPES[si].K;
    const DType dt = AB_DTYPES[di];
    o->a = xmalloc((size_t)M * K * sizeof(float));
    o->b = xmalloc((size_t)K * N * sizeof(float));
    o->dot = xcalloc((size_t)M * N, sizeof(double));
    o->mag = xcalloc((size_t)M * N, sizeof(double));
    const uint64_t seed = 0x6A77ull * 1000 + di * 100 + si;
    fill_values(o->a, (size_t)M * K, dt, seed, 0);
    fill_values(o->b, (size_t)K * N, dt, seed, 1);
    for (int i = 0; i < M; i++) {
        double* dot = o->dot + (size_t)i * N;
        double* mag = o->mag + (size_t)i * N;
        for (int k = 0; k < K; k++) {
            const double aik = o->a[(size_t)i * K + k];
            const float* bk = o->b + (size_t)k * N;
            for (int j = 0; j < N; j++) {
                const double p = aik * (double)bk[j];  // exact
                dot[j] += p;
                mag[j] += fabs(p);
            }
        }
    }
    o->ready = true;
    return o;
}

static void oracles_free(void) {
    for (size_t d = 0; d < N_AB; d++)
        for (size_t s = 0; s < N_SHAPES; s++) {
            Oracle* o = &oracles[d][s];
            free(o->a);
            free(o->b);
            free(o->dot);
            free(o->mag);
            memset(o, 0, sizeof *o);
        }
}

// ---------------------------------------------------------------------------------------
// Tolerance for one element of C, derived (u = 2^-24, the unit roundoff of fp32):
//   T   = |alpha| * sum_k |a_ik b_kj| + |beta * c_ij|     (c_ij: C before the call)
//   ref = alpha * sum_k a_ik b_kj + beta * c_ij          (fp64, from the exact inputs)
//   tol = gamma*T + 0.5*eps(c)*(|ref| + gamma*T) + 0.5*sub(c),   gamma = (K + 2) * u
// - gamma*T bounds the fp32 arithmetic in any order: a length-K dot product accumulated in
//   fp32 (K roundings on each path through products and adds, Higham's gamma_K; exact
//   products for bf16/f16 only make it smaller), one rounding for the alpha scaling and one
//   for the final fp32 addition of beta*C (or the rounding of beta*C), each bounded by u*T.
//   The brief's K*u misses those last two roundings and is not a bound for K = 1.
// - 0.5*eps(c)*|result| is the final rounding to C's dtype (round to nearest: half an ulp
//   relative; for an f32 C it is the rounding already counted, harmless to count twice);
//   |result| <= |ref| + gamma*T.
// - 0.5*sub(c), half the smallest subnormal of C's dtype, is the absolute error of rounding
//   into C's subnormal range, where relative bounds do not hold. It matters only for an f16
//   C (2^-25); fp32 intermediates are never subnormal here (see fill_values).
// Reported per case as "used" = max over elements of |C - ref| / tol.
static double half_min_subnormal(DType dt) {
    switch (dt) {
        case DTYPE_F32: return ldexp(1.0, -150);
        case DTYPE_BF16: return ldexp(1.0, -134);
        case DTYPE_F16: return ldexp(1.0, -25);
        default: fail_msg("no subnormal size for %s", dtype_name(dt)); return 0;
    }
}

static double tolerance(int K, double T, double ref, DType c_dt) {
    const double gamma = (K + 2) * ldexp(1.0, -24);
    const double eps_c = dtype_traits(c_dt)->eps;
    return gamma * T + 0.5 * eps_c * (fabs(ref) + gamma * T) + half_min_subnormal(c_dt);
}

// ---------------------------------------------------------------------------------------
// Buffers in a dtype.
static void* to_dtype(const float* x, size_t n, DType dt) {
    void* p = xmalloc(n * dtype_traits(dt)->size);
    dtype_from_f32_row(p, dt, x, n);
    return p;
}

// Stored matrix (rows, ld) holding `logical` (lr, lc) or its transpose, NaN in the padding.
// trans: stored[c][r] = logical[r][c], i.e. stored is (lc, ld >= lr).
static void* make_stored(const float* logical, int lr, int lc, bool trans, int pad, DType dt,
                         int* ld_out) {
    const int rows = trans ? lc : lr, cols = trans ? lr : lc, ld = cols + pad;
    const size_t n = (size_t)rows * ld;
    float* f = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = NAN;
    for (int r = 0; r < lr; r++)
        for (int c = 0; c < lc; c++) {
            float v = logical[(size_t)r * lc + c];
            if (trans) f[(size_t)c * ld + r] = v;
            else f[(size_t)r * ld + c] = v;
        }
    void* p = to_dtype(f, n, dt);
    free(f);
    *ld_out = ld;
    return p;
}

static float load(const void* p, DType dt, size_t i) {
    float v;
    dtype_to_f32_row(&v, dt, (const char*)p + i * dtype_traits(dt)->size, 1);
    return v;
}

// Per backend x (ab, c) summary
typedef struct {
    int cases, failed;
    double max_used;
} Tally;

typedef enum { CASE_OK, CASE_FAIL, CASE_UNSUPPORTED } CaseResult;

// Runs one case; prints its line unless it is unsupported (the caller prints those once).
static CaseResult run_case(Gemm* g, size_t di, DType c_dt, bool ta, bool tb, size_t si,
                           int variant, GemmSupport support, Tally* tally) {
    const DType ab = AB_DTYPES[di];
    const int M = SHAPES[si].M, N = SHAPES[si].N, K = SHAPES[si].K;
    const Oracle* o = oracle_get(di, si);
    const int pad = VARIANT_PAD[variant];
    const float alpha = VARIANT_ALPHA[variant], beta = VARIANT_BETA[variant];
    const size_t ces = dtype_traits(c_dt)->size;

    int lda, ldb;
    void* A = make_stored(o->a, M, K, ta, pad, ab, &lda);
    void* B = make_stored(o->b, K, N, tb, pad, ab, &ldb);
    const int ldc = N + pad;
    const size_t cn = (size_t)M * ldc;
    float* c0 = xmalloc(cn * sizeof(float));  // C before the call, as fp32 values
    if (variant == VARIANT_ACCUM) {
        float* vals = xmalloc((size_t)M * N * sizeof(float));
        fill_values(vals, (size_t)M * N, c_dt, 0x6A77ull * 1000 + di * 100 + si, 2);
        for (size_t i = 0; i < cn; i++) c0[i] = NAN;  // padding
        for (int i = 0; i < M; i++)
            memcpy(c0 + (size_t)i * ldc, vals + (size_t)i * N, (size_t)N * sizeof(float));
        free(vals);
    } else {
        for (size_t i = 0; i < cn; i++) c0[i] = NAN;  // beta = 0: must not be read
    }
    void* C = to_dtype(c0, cn, c_dt);
    void* C_before = xmalloc(cn * ces);
    memcpy(C_before, C, cn * ces);

    GemmArgs args = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = alpha,
                     .beta = beta, .ab_dtype = ab, .c_dtype = c_dt, .A = A, .lda = lda,
                     .B = B, .ldb = ldb, .C = C, .ldc = ldc};
    Status s = gemm_run(g, &args);

    char id[160];
    snprintf(id, sizeof id, "gemm/%s/%s/%c%c/%dx%dx%d c=%s %s", g->backend->name,
             dtype_name(ab), ta ? 't' : 'n', tb ? 't' : 'n', M, N, K, dtype_name(c_dt),
             VARIANT_NAMES[variant]);
    CaseResult result = CASE_OK;
    if (support == GEMM_UNSUPPORTED) {
        // must refuse, with the reason, and leave C untouched
        if (s.code != STATUS_UNSUPPORTED || memcmp(C, C_before, cn * ces) != 0) {
            printf("%s: FAIL supports() says unsupported but gemm_run returned %s (%s)%s\n", id,
                   status_code_name(s.code), s.msg,
                   memcmp(C, C_before, cn * ces) ? " and wrote C" : "");
            result = CASE_FAIL;
        } else {
            result = CASE_UNSUPPORTED;
        }
    } else if (!status_is_ok(s)) {
        printf("%s: FAIL gemm_run returned %s: %s\n", id, status_code_name(s.code), s.msg);
        result = CASE_FAIL;
    } else {
        double max_err = 0, worst_used = -1, worst_tol = 0, worst_err = 0;  // -1: first element sets worst
        bool nan_seen = false, pad_changed = false;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < ldc; j++) {
                const size_t idx = (size_t)i * ldc + j;
                if (j >= N) {  // padding: bit-for-bit untouched
                    if (memcmp((char*)C + idx * ces, (char*)C_before + idx * ces, ces))
                        pad_changed = true;
                    continue;
                }
                const size_t o_idx = (size_t)i * N + j;
                const double cold = beta == 0.0f ? 0.0 : (double)c0[idx];
                const double ref = (double)alpha * o->dot[o_idx] + (double)beta * cold;
                const double T = fabs((double)alpha) * o->mag[o_idx] + fabs((double)beta * cold);
                const double tol = tolerance(K, T, ref, c_dt);
                const double got = load(C, c_dt, idx);
                if (!isfinite(got)) {
                    nan_seen = true;
                    worst_used = INFINITY;
                    worst_tol = tol;
                    max_err = INFINITY;
                    continue;
                }
                const double err = fabs(got - ref);
                if (err > max_err) max_err = err;
                if (err / tol > worst_used) {
                    worst_used = err / tol;
                    worst_tol = tol;
                    worst_err = err;
                }
            }
        }
        const bool ok = !nan_seen && !pad_changed && worst_used <= 1.0;
        printf("%s: worst element err=%.3g tol=%.3g used=%.1f%% (max_abs_err=%.3g) %s%s%s\n", id,
               worst_err, worst_tol, 100.0 * worst_used, max_err, ok ? "ok" : "FAIL", nan_seen ? " (non-finite output)" : "",
               pad_changed ? " (wrote C padding)" : "");
        if (!ok) result = CASE_FAIL;
        if (worst_used > tally->max_used) tally->max_used = worst_used;
    }
    free(A);
    free(B);
    free(C);
    free(C_before);
    free(c0);
    if (result != CASE_UNSUPPORTED) {
        tally->cases++;
        if (result == CASE_FAIL) tally->failed++;
    }
    return result;
}

// One cmocka test per backend x input dtype (state: index into the flattened list).
typedef struct {
    const GemmBackend* backend;
    size_t di;
    char name[64];
} BackendDtypeTest;

static void test_backend_dtype(void** state) {
    const BackendDtypeTest* t = *state;
    const GemmBackend* be = t->backend;
    const DType ab = AB_DTYPES[t->di];
    const DType c_dtypes[2] = {DTYPE_F32, ab};
    const int n_c = ab == DTYPE_F32 ? 1 : 2;

    Gemm g;
    Status open = gemm_open(&g, be, TEST_THREADS);
    int failures = 0;
    if (!status_is_ok(open)) {
        // A backend that cannot start must say so everywhere through supports() too.
        printf("gemm/%s: cannot open: %s\n", be->name, open.msg);
        if (open.code != STATUS_UNSUPPORTED) failures++;
        for (int ci = 0; ci < n_c; ci++) {
            char why[256] = "";
            GemmSupport sup = be->supports(ab, c_dtypes[ci], why, sizeof why);
            printf("gemm/%s/%s c=%s: unsupported: %s%s\n", be->name, dtype_name(ab),
                   dtype_name(c_dtypes[ci]), why,
                   sup == GEMM_UNSUPPORTED ? "" : " FAIL (supports() did not say unsupported)");
            if (sup != GEMM_UNSUPPORTED) failures++;
        }
        if (failures) fail_msg("gemm/%s/%s: %d inconsistencies", be->name, dtype_name(ab), failures);
        return;
    }
    for (int ci = 0; ci < n_c; ci++) {
        const DType c_dt = c_dtypes[ci];
        char why[256] = "";
        const GemmSupport sup = be->supports(ab, c_dt, why, sizeof why);
        if (sup == GEMM_UNSUPPORTED)
            printf("gemm/%s/%s c=%s: unsupported: %s\n", be->name, dtype_name(ab),
                   dtype_name(c_dt), why);
        else
            printf("gemm/%s/%s c=%s: %s%s%s\n", be->name, dtype_name(ab), dtype_name(c_dt),
                   gemm_support_name(sup), why[0] ? ": " : "", why);
        Tally tally = {0};
        int unsupported_cases = 0;
        for (int tr = 0; tr < 4; tr++)  // nn, nt, tn, tt
            for (size_t si = 0; si < N_SHAPES; si++)
                for (int v = 0; v < VARIANT_COUNT; v++)
                    if (run_case(&g, t->di, c_dt, tr >> 1, tr & 1, si, v, sup, &tally) ==
                        CASE_UNSUPPORTED)
                        unsupported_cases++;
        if (sup == GEMM_UNSUPPORTED)
            printf("gemm/%s/%s c=%s: %d cases refused with STATUS_UNSUPPORTED, C untouched%s\n",
                   be->name, dtype_name(ab), dtype_name(c_dt), unsupported_cases,
                   tally.failed ? "; FAIL" : "");
        else
            printf("gemm/%s/%s c=%s: %d cases, %d failed, max used %.1f%% of tolerance\n",
                   be->name, dtype_name(ab), dtype_name(c_dt), tally.cases, tally.failed,
                   100.0 * tally.max_used);
        failures += tally.failed;
    }
    gemm_close(&g);
    if (failures) fail_msg("gemm/%s/%s: %d failed cases", be->name, dtype_name(ab), failures);
}

// ---------------------------------------------------------------------------------------
// gemm_validate: every field's rule, with a message naming the field.
static GemmArgs valid_args(void* A, void* B, void* C) {
    GemmArgs a = {.trans_a = false, .trans_b = false, .M = 4, .N = 5, .K = 6, .alpha = 1,
                  .beta = 0, .ab_dtype = DTYPE_F32, .c_dtype = DTYPE_F32, .A = A, .lda = 6,
                  .B = B, .ldb = 5, .C = C, .ldc = 5};
    return a;
}

static void expect_invalid(GemmArgs a, const char* field) {
    Status s = gemm_validate(&a);
    if (s.code != STATUS_INVALID || !strstr(s.msg, field))
        fail_msg("expected STATUS_INVALID naming '%s', got %s: %s", field,
                 status_code_name(s.code), s.msg);
    printf("validate: %s -> %s\n", field, s.msg);
}

static void test_validate(void** state) {
    float A[64], B[64], C[64];
    GemmArgs a = valid_args(A, B, C);
    assert_int_equal(gemm_validate(&a).code, STATUS_OK);
    a.trans_a = true, a.lda = 4;  // (K, M) stored: lda >= M
    a.trans_b = true, a.ldb = 6;  // (N, K) stored: ldb >= K
    assert_int_equal(gemm_validate(&a).code, STATUS_OK);

    a = valid_args(A, B, C), a.M = 0, expect_invalid(a, "M ");
    a = valid_args(A, B, C), a.N = -1, expect_invalid(a, "N ");
    a = valid_args(A, B, C), a.K = 0, expect_invalid(a, "K ");
    a = valid_args(A, B, C), a.lda = 5, expect_invalid(a, "lda");               // < K
    a = valid_args(A, B, C), a.trans_a = true, a.lda = 3, expect_invalid(a, "lda");  // < M
    a = valid_args(A, B, C), a.trans_a = true, a.lda = 4;
    assert_int_equal(gemm_validate(&a).code, STATUS_OK);
    a = valid_args(A, B, C), a.ldb = 4, expect_invalid(a, "ldb");               // < N
    a = valid_args(A, B, C), a.trans_b = true, a.ldb = 5, expect_invalid(a, "ldb");  // < K
    a = valid_args(A, B, C), a.ldc = 4, expect_invalid(a, "ldc");
    a = valid_args(A, B, C), a.A = NULL, expect_invalid(a, "A ");
    a = valid_args(A, B, C), a.B = NULL, expect_invalid(a, "B ");
    a = valid_args(A, B, C), a.C = NULL, expect_invalid(a, "C ");
    a = valid_args(A, B, C), a.ab_dtype = DTYPE_F64, expect_invalid(a, "ab_dtype");
    a = valid_args(A, B, C), a.ab_dtype = DTYPE_I32, expect_invalid(a, "ab_dtype");
    a = valid_args(A, B, C), a.ab_dtype = DTYPE_F16, a.c_dtype = DTYPE_BF16,
    expect_invalid(a, "c_dtype");
    a = valid_args(A, B, C), a.c_dtype = DTYPE_BF16, expect_invalid(a, "c_dtype");
    a = valid_args(A, B, C), a.c_dtype = (DType)99, expect_invalid(a, "c_dtype");

    // gemm_run validates before any backend sees the call: C stays untouched.
    for (size_t b = 0; b < gemm_backend_count(); b++) {
        Gemm g;
        if (!status_is_ok(gemm_open(&g, gemm_backend_at(b), 1))) continue;
        for (int i = 0; i < 64; i++) C[i] = 42.0f;
        a = valid_args(A, B, C), a.ldc = 3;
        Status s = gemm_run(&g, &a);
        assert_int_equal(s.code, STATUS_INVALID);
        for (int i = 0; i < 64; i++) assert_true(C[i] == 42.0f);
        gemm_close(&g);
    }
}

// ---------------------------------------------------------------------------------------
// gemm_run must refuse what supports() declines and never call run() for it.
static GemmSupport fake_supports(DType ab, DType c, char* why, size_t why_len) {
    if (ab == DTYPE_F32 && c == DTYPE_F32) return GEMM_NATIVE;
    if (why) snprintf(why, why_len, "fake backend does only f32");
    return GEMM_UNSUPPORTED;
}
static int fake_runs;
static Status fake_run(void* ctx, const GemmArgs* a) {
    fake_runs++;
    return status_ok();
}
static const GemmBackend fake_backend = {
    .name = "fake", .description = "test double", .supports = fake_supports, .run = fake_run};

static void test_unsupported_never_computes(void** state) {
    Gemm g;
    assert_int_equal(gemm_open(&g, &fake_backend, 1).code, STATUS_OK);
    Bf16 A[4] = {{0}}, B[4] = {{0}}, C[4] = {{0}};
    GemmArgs a = {.M = 2, .N = 2, .K = 2, .alpha = 1, .beta = 0, .ab_dtype = DTYPE_BF16,
                  .c_dtype = DTYPE_BF16, .A = A, .lda = 2, .B = B, .ldb = 2, .C = C, .ldc = 2};
    fake_runs = 0;
    Status s = gemm_run(&g, &a);
    printf("unsupported: %s\n", s.msg);
    assert_int_equal(s.code, STATUS_UNSUPPORTED);
    assert_non_null(strstr(s.msg, "fake backend does only f32"));
    assert_int_equal(fake_runs, 0);
    gemm_close(&g);

    // Every real backend x dtype pair that supports() declines: STATUS_UNSUPPORTED, C intact
    // (run_case checks the same on every case; this names the pairs in one place).
    for (size_t b = 0; b < gemm_backend_count(); b++) {
        const GemmBackend* be = gemm_backend_at(b);
        for (size_t di = 0; di < N_AB; di++) {
            const DType ab = AB_DTYPES[di];
            const DType cs[2] = {DTYPE_F32, ab};
            for (int ci = 0; ci < (ab == DTYPE_F32 ? 1 : 2); ci++) {
                char why[256] = "";
                if (be->supports(ab, cs[ci], why, sizeof why) != GEMM_UNSUPPORTED) continue;
                printf("gemm/%s/%s c=%s: unsupported: %s\n", be->name, dtype_name(ab),
                       dtype_name(cs[ci]), why);
                assert_true(why[0] != '\0');  // a reason is always given
                if (!status_is_ok(gemm_open(&g, be, 1))) continue;  // "not built" backend
                uint16_t A16[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f80};  // 1.0 in bf16
                float Cf[4] = {7, 7, 7, 7};
                uint16_t C16[4] = {7, 7, 7, 7};
                GemmArgs r = {.M = 2, .N = 2, .K = 2, .alpha = 1, .beta = 0, .ab_dtype = ab,
                              .c_dtype = cs[ci], .A = A16, .lda = 2, .B = A16, .ldb = 2,
                              .C = cs[ci] == DTYPE_F32 ? (void*)Cf : (void*)C16, .ldc = 2};
                float Af[4] = {1, 1, 1, 1};
                if (ab == DTYPE_F32) r.A = r.B = Af;
                s = gemm_run(&g, &r);
                assert_int_equal(s.code, STATUS_UNSUPPORTED);
                for (int i = 0; i < 4; i++) assert_true(Cf[i] == 7 && C16[i] == 7);
                gemm_close(&g);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The reference is bitwise deterministic for any thread count.
static void test_naive_deterministic(void** state) {
    const GemmBackend* naive = gemm_backend_at(0);
    assert_string_equal(naive->name, "naive");  // the registry's first entry is the baseline
    const int M = 131, N = 67, K = 200;
    for (size_t di = 0; di < N_AB; di++) {
        const DType ab = AB_DTYPES[di];
        float* af = xmalloc((size_t)M * K * sizeof(float));
        float* bf = xmalloc((size_t)K * N * sizeof(float));
        fill_values(af, (size_t)M * K, ab, 99, 0);
        fill_values(bf, (size_t)K * N, ab, 99, 1);
        void* A = to_dtype(af, (size_t)M * K, ab);
        void* B = to_dtype(bf, (size_t)K * N, ab);
        void* C[3];
        const int threads[3] = {1, 2, 5};
        for (int t = 0; t < 3; t++) {
            C[t] = xcalloc((size_t)M * N, dtype_traits(ab)->size);
            Gemm g;
            assert_int_equal(gemm_open(&g, naive, threads[t]).code, STATUS_OK);
            // B's K*N values read as a stored (N, K) matrix with trans_b
            GemmArgs a = {.trans_a = false, .trans_b = true, .M = M, .N = N, .K = K,
                          .alpha = 0.3f, .beta = 0, .ab_dtype = ab, .c_dtype = ab, .A = A,
                          .lda = K, .B = B, .ldb = K, .C = C[t], .ldc = N};
            Status s = gemm_run(&g, &a);
            assert_int_equal(s.code, STATUS_OK);
            gemm_close(&g);
        }
        const size_t bytes = (size_t)M * N * dtype_traits(ab)->size;
        printf("naive/%s %dx%dx%d: threads 1 vs 2 vs 5 bitwise %s\n", dtype_name(ab), M, N, K,
               memcmp(C[0], C[1], bytes) == 0 && memcmp(C[0], C[2], bytes) == 0 ? "identical"
                                                                                 : "DIFFERENT");
        assert_memory_equal(C[0], C[1], bytes);
        assert_memory_equal(C[0], C[2], bytes);
        for (int t = 0; t < 3; t++) free(C[t]);
        free(A), free(B), free(af), free(bf);
    }
}

// ---------------------------------------------------------------------------------------
// gemm_run counts the FLOP it ran and the time it took (train --profile's GEMM-call rate);
// a call refused by validation runs nothing and counts no FLOP.
static void test_busy_counters(void** state) {
    Gemm g;
    assert_int_equal(gemm_open(&g, &gemm_backend_naive, 1).code, STATUS_OK);
    assert_true(g.busy_s == 0 && g.flop == 0);
    enum { M = 3, N = 5, K = 7 };
    float A[M * K] = {0}, B[K * N] = {0}, C[M * N];
    GemmArgs a = {.M = M, .N = N, .K = K, .alpha = 1, .beta = 0, .ab_dtype = DTYPE_F32,
                  .c_dtype = DTYPE_F32, .A = A, .lda = K, .B = B, .ldb = N, .C = C, .ldc = N};
    assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
    assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
    assert_true(g.flop == 2.0 * 2 * M * N * K);
    assert_true(g.busy_s > 0);
    GemmArgs bad = a;
    bad.lda = K - 1;
    assert_int_equal(gemm_run(&g, &bad).code, STATUS_INVALID);
    assert_true(g.flop == 2.0 * 2 * M * N * K);
    gemm_close(&g);
}

// ---------------------------------------------------------------------------------------
// GemmArgs.bias (gemm.h): a backend with the `bias` flag computes acc + bias rounded once, the
// same bits as C preset to bias rows with beta 1 (what the layers did before, and still do on
// the other backends); checked in f32 and bf16 (bf16 C and f32 C) at the presets' linear
// shapes with K up to 3072 (several K blocks), x @ W^T as the layers call it. A backend without
// the flag, or a bias with beta != 0, is refused (STATUS_INVALID) and runs nothing. (f16 runs only
// where the backend supports it: oneDNN with avx512_fp16.)
static void test_bias_argument(void** state) {
    static const struct { int M, N, K; } shapes[] = {{64, 48, 40}, {1024, 128, 512}, {1024, 512, 128},
                                                     {8, 2, 768}, {256, 768, 3072}};
    static const DType dts[][2] = {{DTYPE_F32, DTYPE_F32}, {DTYPE_BF16, DTYPE_BF16}, {DTYPE_BF16, DTYPE_F32},
                                   {DTYPE_F16, DTYPE_F16}, {DTYPE_F16, DTYPE_F32}};  // f16: where supported
    int checked = 0;
    for (size_t b = 0; b < gemm_backend_count(); b++) {
        const GemmBackend* be = gemm_backend_at(b);
        Gemm g;
        if (!status_is_ok(gemm_open(&g, be, TEST_THREADS))) continue;
        float A[4] = {1, 2, 3, 4}, B[4] = {1, 0, 0, 1}, C[4] = {-1, -1, -1, -1}, bias[2] = {5, 6};
        GemmArgs small = {.M = 2, .N = 2, .K = 2, .alpha = 1, .beta = 0, .ab_dtype = DTYPE_F32,
                          .c_dtype = DTYPE_F32, .A = A, .lda = 2, .B = B, .ldb = 2, .C = C, .ldc = 2, .bias = bias};
        if (!be->bias) {
            assert_int_equal(gemm_run(&g, &small).code, STATUS_INVALID);
            assert_true(C[0] == -1.0f && C[3] == -1.0f);
            gemm_close(&g);
            continue;
        }
        small.beta = 1.0f;
        assert_int_equal(gemm_run(&g, &small).code, STATUS_INVALID);
        assert_true(C[0] == -1.0f);
        for (size_t si = 0; si < ARRAY_LEN(shapes); si++)
            for (size_t di = 0; di < ARRAY_LEN(dts); di++) {
                const int M = shapes[si].M, N = shapes[si].N, K = shapes[si].K;
                const DType ab = dts[di][0], cd = dts[di][1];
                char why[256];
                if (be->supports(ab, cd, why, sizeof why) == GEMM_UNSUPPORTED) continue;
                float* af = xmalloc((size_t)M * K * sizeof(float));
                float* wf = xmalloc((size_t)N * K * sizeof(float));
                float* bf = xmalloc((size_t)N * sizeof(float));
                fill_values(af, (size_t)M * K, ab, 0xB1A5 + si, 0);
                fill_values(wf, (size_t)N * K, ab, 0xB1A5 + si, 1);
                fill_values(bf, (size_t)N, cd, 0xB1A5 + si, 2);  // the bias rounded to C's dtype
                for (int j = 0; j < N; j++) bf[j] *= 8.0f;  // as large as the products' sums
                void* Ad = to_dtype(af, (size_t)M * K, ab);
                void* Wd = to_dtype(wf, (size_t)N * K, ab);
                const size_t es = dtype_traits(cd)->size, bytes = (size_t)M * N * es;
                float* rows = xmalloc((size_t)M * N * sizeof(float));
                for (int i = 0; i < M; i++) memcpy(rows + (size_t)i * N, bf, (size_t)N * sizeof(float));
                void* Cpre = to_dtype(rows, (size_t)M * N, cd);  // bias rows (exact in cd)
                void* Cb = xmalloc(bytes);
                memset(Cb, 0xff, bytes);  // not read
                GemmArgs a = {.trans_a = false, .trans_b = true, .M = M, .N = N, .K = K, .alpha = 1, .beta = 1,
                              .ab_dtype = ab, .c_dtype = cd, .A = Ad, .lda = K, .B = Wd, .ldb = K, .C = Cpre, .ldc = N};
                assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
                a.beta = 0;
                a.C = Cb;
                a.bias = bf;
                assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
                printf("%s bias argument vs bias rows + beta 1, %s->%s %dx%dx%d: %s\n", be->name, dtype_name(ab),
                       dtype_name(cd), M, N, K, memcmp(Cpre, Cb, bytes) == 0 ? "bitwise identical" : "DIFFERENT");
                assert_memory_equal(Cpre, Cb, bytes);
                checked++;
                free(af), free(wf), free(bf), free(Ad), free(Wd), free(rows), free(Cpre), free(Cb);
            }
        gemm_close(&g);
    }
    printf("bias argument: %d cases compared\n", checked);
}

// ---------------------------------------------------------------------------------------
// Repeated oneDNN calls reuse the cached primitive; the cache evicts least recently used.
static void test_onednn_cache(void** state) {
    const GemmBackend* be = gemm_find("onednn");
    assert_non_null(be);
    Gemm g;
    Status s = gemm_open(&g, be, TEST_THREADS);
    if (!status_is_ok(s)) {
        printf("onednn cache: skipped (%s)\n", s.msg);
        GemmOnednnCacheStats st;
        assert_false(gemm_onednn_cache_stats(&g, &st));
        return;
    }
    GemmOnednnCacheStats st;
    enum { M = 16, N = 24, K = 40 };
    float* A = xcalloc(M * K, sizeof(float));
    float* B = xcalloc(K * N, sizeof(float));
    float* C = xcalloc(M * N, sizeof(float));
    GemmArgs a = {.M = M, .N = N, .K = K, .alpha = 1, .beta = 0, .ab_dtype = DTYPE_F32,
                  .c_dtype = DTYPE_F32, .A = A, .lda = K, .B = B, .ldb = N, .C = C, .ldc = N};
    for (int i = 0; i < 5; i++) assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
    assert_true(gemm_onednn_cache_stats(&g, &st));
    printf("onednn cache after 5 identical runs: created=%zu hits=%zu entries=%zu\n",
           st.created, st.hits, st.entries);
    assert_int_equal(st.created, 1);
    assert_int_equal(st.hits, 4);

    a.beta = 1;  // a different primitive (sum post-op) ...
    assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
    a.beta = 0;  // ... and the first one is still there
    assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
    assert_true(gemm_onednn_cache_stats(&g, &st));
    assert_int_equal(st.created, 2);
    assert_int_equal(st.hits, 5);

    // Fill past capacity with distinct shapes: LRU eviction, first key (used most recently
    // before the flood, but older than all of it) is evicted and created again.
    const size_t cap = st.capacity;
    for (size_t i = 0; i < cap; i++) {
        GemmArgs b = a;
        b.N = N - 1 - (int)(i % 8), b.ldc = b.N, b.K = K - 1 - (int)(i / 8), b.lda = b.K;
        assert_int_equal(gemm_run(&g, &b).code, STATUS_OK);
    }
    assert_true(gemm_onednn_cache_stats(&g, &st));
    assert_int_equal(st.entries, cap);
    assert_int_equal(st.created, 2 + cap);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(gemm_run(&g, &a).code, STATUS_OK);
    assert_true(gemm_onednn_cache_stats(&g, &st));
    printf("onednn cache after %zu more shapes and a rerun: created=%zu hits=%zu entries=%zu "
           "evictions=%zu (capacity %zu)\n",
           cap, st.created, st.hits, st.entries, st.evictions, st.capacity);
    assert_int_equal(st.created, 3 + cap);
    gemm_close(&g);
    free(A), free(B), free(C);
}

// ---------------------------------------------------------------------------------------
static void test_registry(void** state) {
    assert_true(gemm_backend_count() >= 1);
    assert_string_equal(gemm_backend_at(0)->name, "naive");
    const char* list = gemm_backend_names_list();
    for (size_t b = 0; b < gemm_backend_count(); b++) {
        const GemmBackend* be = gemm_backend_at(b);
        assert_ptr_equal(gemm_find(be->name), be);
        assert_non_null(strstr(list, be->name));
        assert_non_null(be->supports);
        assert_non_null(be->run);
        assert_non_null(be->description);
        // pairs outside the contract are declined with a reason by everyone
        char why[256] = "";
        assert_int_equal(be->supports(DTYPE_BF16, DTYPE_F16, why, sizeof why), GEMM_UNSUPPORTED);
        assert_true(why[0] != '\0');
        printf("backend %s: %s\n", be->name, be->description);
        if (be->library_info) {
            GemmInfoItem items[16];
            int n = be->library_info(items, 16);
            for (int i = 0; i < n; i++) printf("  %s: %s\n", items[i].key, items[i].value);
        }
    }
    assert_null(gemm_find("no-such-backend"));
    assert_null(gemm_find(NULL));
    assert_string_equal(gemm_support_name(GEMM_NATIVE), "native");
    assert_string_equal(gemm_support_name(GEMM_EMULATED), "emulated");
    assert_string_equal(gemm_support_name(GEMM_UNSUPPORTED), "unsupported");
}

static int group_teardown(void** state) {
    oracles_free();
    return 0;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // case lines and cmocka's stderr stay in order
    const size_t n_backends = gemm_backend_count();
    const size_t n_fixed = 7;
    const size_t n_tests = n_fixed + n_backends * N_AB;
    struct CMUnitTest* tests = xcalloc(n_tests, sizeof *tests);
    BackendDtypeTest* bdt = xcalloc(n_backends * N_AB, sizeof *bdt);
    size_t n = 0;
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_registry);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_validate);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_unsupported_never_computes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_naive_deterministic);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_busy_counters);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_onednn_cache);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_bias_argument);
    for (size_t b = 0; b < n_backends; b++)
        for (size_t di = 0; di < N_AB; di++) {
            BackendDtypeTest* t = &bdt[b * N_AB + di];
            t->backend = gemm_backend_at(b);
            t->di = di;
            snprintf(t->name, sizeof t->name, "gemm/%s/%s", t->backend->name,
                     dtype_name(AB_DTYPES[di]));
            tests[n++] = (struct CMUnitTest){.name = t->name, .test_func = test_backend_dtype,
                                             .initial_state = t};
        }
    CHECK(n == n_tests, "%zu tests registered, %zu slots", n, n_tests);
    int failed = _cmocka_run_group_tests("gemm", tests, n, NULL, group_teardown);
    free(tests);
    free(bdt);
    return failed ? 1 : 0;
}

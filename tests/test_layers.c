// test_layers.c — every layer's backward (src/model/layers.c, fp32 mode, naive backend) against
// central finite differences of an independent DOUBLE-precision reference of the same layer
// written here, plus the forward against that reference, and a whole-model gradient check on
// the tiny preset (model_forward/model_backward vs finite differences of a double-precision
// model written here) on randomly chosen parameters.
//
// Method. For a layer y = f(inputs), the test draws inputs and an upstream gradient dy, and
// defines the scalar objective J = sum(dy * f(inputs)) evaluated in double (for the loss layers,
// J is the loss). dJ/dv for every input element v is taken by the 4-point central difference
//     (8 (J(v+h) - J(v-h)) - (J(v+2h) - J(v-2h))) / (12 h),   h = 1e-3 * max(1, |v|)
// whose truncation error is O(h^4 J^(5)) ~ 1e-12 and rounding error ~ 1e-16 |J| / h ~ 1e-12 for
// the O(1) values used here: far below fp32's eps (1.2e-7), so the finite differences are the
// exact gradients for the purpose of checking an fp32 layer.
//
// Tolerance for the C fp32 gradients (and forward outputs): |c - fd| <= K * eps32 * S, with S
// the largest |fd| of that tensor. Single layers, K = 16: each element is an fp32 sum of at
// most 12 terms here (reductions are 3..12 long) plus a few elementwise ops (exp, erf, sqrt,
// each within 1-2 ulp), so the worst-case bound is ~(length + ops) eps32 sum|terms|, and
// sum|terms| is within a small factor of S for random data (no systematic cancellation);
// measured at most 1.6. Whole model, K = 64: about 30 such ops in sequence (2 layers forward
// and backward), each adding its error and passing the upstream one on with factors of order 1
// at these weights; measured 4.4. The error of every check, in units of eps32 * S, is printed.
// Gradient outputs are pre-filled with random values and the pre-fill is subtracted afterwards,
// which checks that every backward ACCUMULATES (+=).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "model/amp.h"
#include "gemm/gemm.h"
#include "model/layers.h"
#include "model/gelu_onednn.h"
#include "model/model.h"
#include "core/rng.h"

#define EPS32 0x1p-23
#define K_TOL 16.0    // single layers
#define K_MODEL 64.0  // the whole model

typedef double (*Objective)(void* ctx);

// 4-point central difference of f with respect to v[i] (restored afterwards)
static double fd(Objective f, void* ctx, double* v, size_t i) {
    const double old = v[i], h = 1e-3 * fmax(1.0, fabs(old));
    v[i] = old + h;
    double p1 = f(ctx);
    v[i] = old - h;
    double m1 = f(ctx);
    v[i] = old + 2 * h;
    double p2 = f(ctx);
    v[i] = old - 2 * h;
    double m2 = f(ctx);
    v[i] = old;
    return (8.0 * (p1 - m1) - (p2 - m2)) / (12.0 * h);
}

static double worst_seen = 0.0;  // over all checks, in eps32 * S units

// Checks got - prefill (n floats) against finite differences over v (n doubles).
// skip (may be NULL): elements whose expected gradient is exactly 0 by definition (not FD).
static void check_grad(const char* what, const float* got, const float* prefill, double* v, size_t n, Objective f,
                       void* ctx, const bool* skip) {
    double* g = malloc(n * sizeof(double));
    double S = 0.0;
    for (size_t i = 0; i < n; i++) {
        g[i] = (skip && skip[i]) ? 0.0 : fd(f, ctx, v, i);
        S = fmax(S, fabs(g[i]));
    }
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double c = (double)got[i] - (prefill ? (double)prefill[i] : 0.0);
        if (skip && skip[i]) {
            if (c != 0.0) printf("  %s[%zu] must stay exactly the pre-fill (got %+g)\n", what, i, c);
            assert_true(c == 0.0);
            continue;
        }
        double e = fabs(c - g[i]) / (EPS32 * (S > 0 ? S : 1.0) + (prefill ? EPS32 * fabs((double)prefill[i]) : 0.0));
        if (e > worst) {
            worst = e;
            wi = i;
        }
    }
    printf("  %-34s n %4zu  scale %.3g  max err %.2f eps32*S (at %zu: got %.9g fd %.9g)\n", what, n, S, worst, wi,
           (double)got[wi] - (prefill ? prefill[wi] : 0.0), g[wi]);
    if (worst > worst_seen) worst_seen = worst;
    assert_true(worst <= K_TOL);
    free(g);
}

// forward output (n floats) against a double reference
static void check_forward(const char* what, const float* got, const double* ref, size_t n) {
    double S = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) S = fmax(S, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - ref[i]) / (EPS32 * S));
    printf("  %-34s n %4zu  scale %.3g  max err %.2f eps32*S\n", what, n, S, worst);
    assert_true(worst <= K_TOL);
}

static Rng g_rng;
static float* rnd(size_t n, float std) {
    float* x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&g_rng, 0.0f, std);
    return x;
}
static double* to_d(const float* x, size_t n) {
    double* d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float* copy_f(const float* x, size_t n) {
    float* c = malloc(n * sizeof(float));
    memcpy(c, x, n * sizeof(float));
    return c;
}

static Gemm g_gemm;
static int setup(void** state) {
    (void)state;
    rng_init(&g_rng, 20261129, 0);
    return status_is_ok(gemm_open(&g_gemm, &gemm_backend_naive, 1)) ? 0 : -1;  // same bits for any thread count
}
static int teardown(void** state) {
    (void)state;
    gemm_close(&g_gemm);
    printf("layers: worst error over all checks %.2f eps32*S (tolerance %.0f per layer, %.0f whole model)\n",
           worst_seen, K_TOL, K_MODEL);
    return 0;
}

// ---- double references ----------------------------------------------------------------------
static void ref_linear(double* y, const double* x, const double* W, const double* b, int N, int IC, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int k = 0; k < IC; k++) s += x[i * IC + k] * W[o * IC + k];
            y[i * OC + o] = s;
        }
}

static void ref_layernorm(double* y, const double* x, const double* w, const double* b, int N, int D) {
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int d = 0; d < D; d++) m += x[i * D + d];
        m /= D;
        for (int d = 0; d < D; d++) v += (x[i * D + d] - m) * (x[i * D + d] - m);
        v /= D;
        double rs = 1.0 / sqrt(v + 1e-12);
        for (int d = 0; d < D; d++) y[i * D + d] = (x[i * D + d] - m) * rs * w[d] + b[d];
    }
}

static double ref_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

// transformers eager attention with the four projections; mask (B, T) additive fp32 or NULL
static void ref_attention(double* out, const double* x, double* const w[8], const float* mask, int B, int T, int D,
                          int H) {
    const int N = B * T, dh = D / H;
    double* q = malloc((size_t)N * D * sizeof(double));
    double* k = malloc((size_t)N * D * sizeof(double));
    double* v = malloc((size_t)N * D * sizeof(double));
    double* ctx = calloc((size_t)N * D, sizeof(double));
    double* p = malloc((size_t)T * sizeof(double));
    ref_linear(q, x, w[0], w[1], N, D, D);
    ref_linear(k, x, w[2], w[3], N, D, D);
    ref_linear(v, x, w[4], w[5], N, D, D);
    const double scale = pow((double)dh, -0.5);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int d = 0; d < dh; d++) s += q[(b * T + i) * D + h * dh + d] * k[(b * T + j) * D + h * dh + d];
                    s *= scale;
                    if (mask) s += mask[b * T + j];
                    p[j] = s;
                    mx = fmax(mx, s);
                }
                double sum = 0;
                for (int j = 0; j < T; j++) sum += (p[j] = exp(p[j] - mx));
                for (int j = 0; j < T; j++)
                    for (int d = 0; d < dh; d++)
                        ctx[(b * T + i) * D + h * dh + d] += p[j] / sum * v[(b * T + j) * D + h * dh + d];
            }
    ref_linear(out, ctx, w[6], w[7], N, D, D);
    free(q);
    free(k);
    free(v);
    free(ctx);
    free(p);
}

static double ref_cross_entropy(const double* z, const int32_t* labels, int B, int L) {
    double loss = 0;
    for (int b = 0; b < B; b++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < L; j++) mx = fmax(mx, z[b * L + j]);
        for (int j = 0; j < L; j++) s += exp(z[b * L + j] - mx);
        loss -= z[b * L + labels[b]] - mx - log(s);
    }
    return loss / B;
}

static double dot(const double* a, const float* b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * (double)b[i];
    return s;
}

// ---- linear ---------------------------------------------------------------------------------
typedef struct {
    double *x, *W, *b;
    const float* dy;
    int N, IC, OC;
} LinCtx;

static double lin_obj(void* p) {
    LinCtx* c = p;
    double* y = malloc((size_t)c->N * c->OC * sizeof(double));
    ref_linear(y, c->x, c->W, c->b, c->N, c->IC, c->OC);
    double J = dot(y, c->dy, (size_t)c->N * c->OC);
    free(y);
    return J;
}

static void test_linear(void** state) {
    (void)state;
    const int N = 6, IC = 10, OC = 7;
    float *x = rnd(N * IC, 1), *W = rnd(OC * IC, 0.5f), *b = rnd(OC, 0.5f), *dy = rnd(N * OC, 1);
    float *dx = rnd(N * IC, 1), *dW = rnd(OC * IC, 1), *db = rnd(OC, 1);
    float *dx0 = copy_f(dx, N * IC), *dW0 = copy_f(dW, OC * IC), *db0 = copy_f(db, OC);
    float* y = malloc(N * OC * sizeof(float));
    LayerCtx c;
    layer_ctx_init(&c, &g_gemm, DTYPE_F32, NULL);
    assert_true(status_is_ok(linear_forward(&c, y, x, W, b, N, IC, OC)));
    assert_true(status_is_ok(linear_backward(&c, dx, dW, db, dy, x, W, N, IC, OC)));
    LinCtx lc = {to_d(x, N * IC), to_d(W, OC * IC), to_d(b, OC), dy, N, IC, OC};
    double* yr = malloc(N * OC * sizeof(double));
    ref_linear(yr, lc.x, lc.W, lc.b, N, IC, OC);
    printf("linear (N %d, IC %d, OC %d)\n", N, IC, OC);
    check_forward("y", y, yr, N * OC);
    check_grad("dx", dx, dx0, lc.x, N * IC, lin_obj, &lc, NULL);
    check_grad("dW", dW, dW0, lc.W, OC * IC, lin_obj, &lc, NULL);
    check_grad("db", db, db0, lc.b, OC, lin_obj, &lc, NULL);
    // without bias, and with NULL gradient outputs (not computed, no crash)
    assert_true(status_is_ok(linear_forward(&c, y, x, W, NULL, N, IC, OC)));
    ref_linear(yr, lc.x, lc.W, NULL, N, IC, OC);
    check_forward("y (no bias)", y, yr, N * OC);
    assert_true(status_is_ok(linear_backward(&c, NULL, dW, NULL, dy, x, W, N, IC, OC)));
    layer_ctx_free(&c);
    free(x), free(W), free(b), free(dy), free(dx), free(dW), free(db), free(dx0), free(dW0), free(db0), free(y);
    free(lc.x), free(lc.W), free(lc.b), free(yr);
}

// Rounding in a mixed mode: y = R(x_low @ W_low^T + b_low) with one rounding; dW rounded.
static void test_linear_bf16_rounding(void** state) {
    (void)state;
    const int N = 9, IC = 33, OC = 17;
    float *x = rnd(N * IC, 1), *W = rnd(OC * IC, 0.5f), *b = rnd(OC, 4.0f), *dy = rnd(N * OC, 1);
    float* y = malloc(N * OC * sizeof(float));
    float* dW = calloc(OC * IC, sizeof(float));
    float* db = calloc(OC, sizeof(float));
    LayerCtx c;
    AmpCounters cnt;
    amp_counters_reset(&cnt);
    layer_ctx_init(&c, &g_gemm, DTYPE_BF16, &cnt);
    assert_true(status_is_ok(linear_forward(&c, y, x, W, b, N, IC, OC)));
    int exact = 0;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = (double)dtype_round(b[o], DTYPE_BF16);
            for (int k = 0; k < IC; k++)
                s += (double)dtype_round(x[i * IC + k], DTYPE_BF16) * (double)dtype_round(W[o * IC + k], DTYPE_BF16);
            float want = dtype_round((float)s, DTYPE_BF16);  // exact sum, one rounding (double -> f32 exact here)
            float got = y[i * OC + o];
            assert_true(got == dtype_round(got, DTYPE_BF16));  // holds a bf16 value
            // an fp32 accumulation can differ from the exact sum near a tie: at most 1 bf16 ulp
            assert_true(fabsf(got - want) <= fabsf(want) * 0x1p-7f + 1e-30f);
            exact += got == want;
        }
    printf("linear bf16: %d of %d outputs equal R(exact sum + R(b))\n", exact, N * OC);
    assert_true(exact >= N * OC * 95 / 100);
    // a wrong bias rounding (bias added after rounding, or unrounded) would break the equality
    // above for most elements: b ~ N(0, 4) is not representable in bf16 in general.
    assert_true(status_is_ok(linear_backward(&c, NULL, dW, db, dy, x, W, N, IC, OC)));
    for (int i = 0; i < OC * IC; i++) assert_true(dW[i] == dtype_round(dW[i], DTYPE_BF16));
    for (int i = 0; i < OC; i++) assert_true(db[i] == dtype_round(db[i], DTYPE_BF16));
    assert_int_equal(cnt.param_values, (uint64_t)(OC * IC + OC));  // every value counted, nonzero
    assert_int_equal(cnt.param_underflow, 0);
    layer_ctx_free(&c);
    free(x), free(W), free(b), free(dy), free(y), free(dW), free(db);
}

// ---- embedding --------------------------------------------------------------------------------
typedef struct {
    double *Wt, *Wp;
    const int64_t* ids;
    const float* dy;
    int B, T, D;
} EmbCtx;

static double emb_obj(void* p) {
    EmbCtx* c = p;
    double J = 0;
    for (int r = 0; r < c->B * c->T; r++)
        for (int d = 0; d < c->D; d++)
            J += (c->Wt[c->ids[r] * c->D + d] + c->Wp[(r % c->T) * c->D + d]) * c->dy[r * c->D + d];
    return J;
}

static void test_embedding(void** state) {
    (void)state;
    const int B = 3, T = 5, D = 4, V = 9, P = 7;
    const int64_t ids[15] = {1, 4, 4, 0, 0, 2, 8, 1, 4, 0, 3, 3, 3, 3, 5};  // repeats and padding id 0
    float *Wt = rnd(V * D, 1), *Wp = rnd(P * D, 1), *dy = rnd(B * T * D, 1);
    float *dWt = rnd(V * D, 1), *dWp = rnd(P * D, 1), *dWt0 = copy_f(dWt, V * D), *dWp0 = copy_f(dWp, P * D);
    float* out = malloc(B * T * D * sizeof(float));
    embedding_forward(out, ids, Wt, Wp, B, T, D, V);
    embedding_backward(dWt, dWp, dy, ids, B, T, D, V, 0);
    EmbCtx ec = {to_d(Wt, V * D), to_d(Wp, P * D), ids, dy, B, T, D};
    double* ref = malloc(B * T * D * sizeof(double));
    for (int r = 0; r < B * T; r++)
        for (int d = 0; d < D; d++) ref[r * D + d] = ec.Wt[ids[r] * D + d] + ec.Wp[(r % T) * D + d];
    printf("embedding (B %d, T %d, D %d, V %d, padding_idx 0)\n", B, T, D, V);
    check_forward("out", out, ref, B * T * D);
    // padding_idx: row 0 gets no gradient even though it is used (nn.Embedding(padding_idx=0))
    bool skip[36] = {false};
    for (int d = 0; d < D; d++) skip[0 * D + d] = true;
    check_grad("dWtok (row 0 = padding: 0)", dWt, dWt0, ec.Wt, V * D, emb_obj, &ec, skip);
    check_grad("dWpos (rows >= T: 0)", dWp, dWp0, ec.Wp, P * D, emb_obj, &ec, NULL);
    for (int i = T * D; i < P * D; i++) assert_true(dWp[i] == dWp0[i]);  // unused positions untouched
    free(Wt), free(Wp), free(dy), free(dWt), free(dWp), free(dWt0), free(dWp0), free(out), free(ref);
    free(ec.Wt), free(ec.Wp);
}

// ---- LayerNorm --------------------------------------------------------------------------------
typedef struct {
    double *x, *w, *b;
    const float* dy;
    int N, D;
} LnCtx;

static double ln_obj(void* p) {
    LnCtx* c = p;
    double* y = malloc((size_t)c->N * c->D * sizeof(double));
    ref_layernorm(y, c->x, c->w, c->b, c->N, c->D);
    double J = dot(y, c->dy, (size_t)c->N * c->D);
    free(y);
    return J;
}

static void test_layernorm(void** state) {
    (void)state;
    const int N = 5, D = 12;
    float *x = rnd(N * D, 2), *w = rnd(D, 1), *b = rnd(D, 1), *dy = rnd(N * D, 1);
    for (int i = 0; i < N * D; i++) x[i] += 0.75f * (float)(i / D);  // rows with different means
    float *dx = rnd(N * D, 1), *dw = rnd(D, 1), *db = rnd(D, 1);
    float *dx0 = copy_f(dx, N * D), *dw0 = copy_f(dw, D), *db0 = copy_f(db, D);
    float *y = malloc(N * D * sizeof(float)), mean[5], rstd[5];
    layernorm_forward(y, mean, rstd, x, w, b, N, D, LAYERNORM_EPS);
    layernorm_backward(dx, dw, db, dy, x, mean, rstd, w, N, D);
    LnCtx lc = {to_d(x, N * D), to_d(w, D), to_d(b, D), dy, N, D};
    double* yr = malloc(N * D * sizeof(double));
    ref_layernorm(yr, lc.x, lc.w, lc.b, N, D);
    printf("layernorm (N %d, D %d, eps 1e-12)\n", N, D);
    check_forward("y", y, yr, N * D);
    check_grad("dx", dx, dx0, lc.x, N * D, ln_obj, &lc, NULL);
    check_grad("dw", dw, dw0, lc.w, D, ln_obj, &lc, NULL);
    check_grad("db", db, db0, lc.b, D, ln_obj, &lc, NULL);
    free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db), free(dx0), free(dw0), free(db0), free(y);
    free(yr), free(lc.x), free(lc.w), free(lc.b);
}

// ---- GELU and ReLU ---------------------------------------------------------------------------
typedef struct {
    double* x;
    const float* dy;
    int n;
    int relu;
} ActCtx;

static double act_obj(void* p) {
    ActCtx* c = p;
    double J = 0;
    for (int i = 0; i < c->n; i++) J += (c->relu ? fmax(c->x[i], 0.0) : ref_gelu(c->x[i])) * c->dy[i];
    return J;
}

static void test_gelu_relu(void** state) {
    (void)state;
    const int n = 48;
    float* x = malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) x[i] = -6.0f + 12.0f * (float)i / (n - 1) + 0.01f;  // [-6, 6], never 0
    float *dy = rnd(n, 1), *dx = rnd(n, 1), *dx0 = copy_f(dx, n), *y = malloc(n * sizeof(float));
    ActCtx ac = {to_d(x, n), dy, n, 0};
    double* yr = malloc(n * sizeof(double));
    printf("gelu (exact erf form, n %d)\n", n);
    gelu_forward(y, x, n, DTYPE_F32);
    for (int i = 0; i < n; i++) yr[i] = ref_gelu(ac.x[i]);
    check_forward("y", y, yr, n);
    gelu_backward(dx, dy, x, n, DTYPE_F32);
    check_grad("dx", dx, dx0, ac.x, n, act_obj, &ac, NULL);
    // in a low dtype the op computes in fp32 and rounds its output once: bf16 values near the fp32
    // result (a bf16 ulp, plus the low formulas' erf error, absolute ~1e-7 of erf's, where gelu is
    // tiny), and where torch runs bf16 GELU on oneDNN exactly that formula rounded (gelu_onednn.h;
    // else ATen's reduced-type one, layers.c verf_aten)
    float* yl = malloc(n * sizeof(float));
    gelu_forward(yl, x, n, DTYPE_BF16);
    for (int i = 0; i < n; i++) {
        assert_true(yl[i] == dtype_round(yl[i], DTYPE_BF16));
        assert_true(fabsf(yl[i] - y[i]) <= 0x1p-7f * fabsf(y[i]) + 1e-6f * fabsf(x[i]));
        if (gelu_onednn_torch_uses()) assert_true(yl[i] == dtype_round(gelu_onednn_forward(x[i]), DTYPE_BF16));
    }
    printf("relu (n %d)\n", n);
    ac.relu = 1;
    relu_forward(y, x, n);
    for (int i = 0; i < n; i++) yr[i] = fmax(ac.x[i], 0.0);
    check_forward("y", y, yr, n);
    memcpy(dx, dx0, n * sizeof(float));
    relu_backward(dx, dy, y, n);
    check_grad("dx", dx, dx0, ac.x, n, act_obj, &ac, NULL);
    free(x), free(dy), free(dx), free(dx0), free(y), free(yl), free(yr), free(ac.x);
}

// fp32 GELU's AVX-512 kernel (layers.c gelu_f32_mm_rows, reached through gelu_forward with the
// minimax forward forced) against its scalar model gelu_onednn_f32_forward, bit for bit (a NaN
// matches any NaN), on 4M random bit patterns of every class, subnormals and infinities included.
// (Both against torch: test_model_golden's activations_f32.) Skipped where the CPU cannot run it.
static void test_gelu_f32_kernel_matches_model(void** state) {
    (void)state;
    if (!layers_gelu_f32_force(1)) {
        printf("no AVX-512 BW/VL/DQ: the minimax kernel does not run here\n");
        skip();
    }
    enum { N = 1 << 22 };
    float* x = malloc(N * sizeof(float));
    float* y = malloc(N * sizeof(float));
    uint64_t z = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < N; i++) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        const uint32_t b = (uint32_t)(z >> 16);
        memcpy(&x[i], &b, sizeof b);
    }
    gelu_forward(y, x, N - 5, DTYPE_F32);  // N - 5: the kernel's masked tail too
    layers_gelu_f32_force(-1);
    size_t bad = 0;
    for (size_t i = 0; i < N - 5; i++) {
        const float want = gelu_onednn_f32_forward(x[i]);
        if (memcmp(&y[i], &want, sizeof want) != 0 && !(isnan(y[i]) && isnan(want))) bad++;
    }
    printf("fp32 gelu AVX-512 kernel vs scalar model: %d inputs, %zu differ\n", N - 5, bad);
    assert_int_equal(bad, 0);
    free(x), free(y);
}

// ReLU's edges as torch 2.15 computes them (torch.relu, then .backward(g), the same in fp32,
// bf16 and fp16): relu(-0) = -0, relu(NaN) = NaN, relu(-inf) = 0; the gradient is 0 wherever
// relu(x) <= 0, even for an inf or NaN incoming gradient, and passes g's bits (-0 too) elsewhere,
// NaN x included. dx starts at -0 so that the accumulating backward keeps a -0 visible.
static void test_relu_edges(void** state) {
    (void)state;
    const float x[] = {-0.0f, 0.0f, NAN, -1.0f, 2.0f, -INFINITY, INFINITY};
    const float g[] = {INFINITY, -0.0f, 3.0f, NAN, -0.0f, 5.0f, 7.0f};
    const float y_torch[] = {-0.0f, 0.0f, NAN, 0.0f, 2.0f, 0.0f, INFINITY};
    const float dx_torch[] = {0.0f, 0.0f, 3.0f, 0.0f, -0.0f, 0.0f, 7.0f};
    enum { N = 7 };
    float y[N], dx[N];
    relu_forward(y, x, N);
    for (int i = 0; i < N; i++) dx[i] = -0.0f;
    relu_backward(dx, g, y, N);
    for (int i = 0; i < N; i++) {
        printf("relu edge %d: x %g -> y %g (torch %g), g %g -> dx %g (torch %g)\n", i, (double)x[i], (double)y[i],
               (double)y_torch[i], (double)g[i], (double)dx[i], (double)dx_torch[i]);
        assert_memory_equal(&y[i], &y_torch[i], sizeof(float));
        assert_memory_equal(&dx[i], &dx_torch[i], sizeof(float));
    }
}

// ---- attention -------------------------------------------------------------------------------
typedef struct {
    double* x;
    double* w[8];
    const float* mask;
    const float* dy;
    int B, T, D, H;
} AttCtx;

static double att_obj(void* p) {
    AttCtx* c = p;
    size_t n = (size_t)c->B * c->T * c->D;
    double* out = malloc(n * sizeof(double));
    ref_attention(out, c->x, c->w, c->mask, c->B, c->T, c->D, c->H);
    double J = dot(out, c->dy, n);
    free(out);
    return J;
}

static void attention_case(bool with_mask) {
    const int B = 2, T = 5, D = 8, H = 2, N = B * T;
    const int len[2] = {5, 3};  // sequence 1: keys 3 and 4 are padding
    float mask[10];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) mask[b * T + t] = t < len[b] ? 0.0f : -FLT_MAX;
    const float* m = with_mask ? mask : NULL;
    float* x = rnd(N * D, 1);
    float* w[8];
    float* gw[8];
    float* gw0[8];
    for (int i = 0; i < 8; i++) {
        int sz = i % 2 == 0 ? D * D : D;
        w[i] = rnd(sz, i % 2 == 0 ? 0.4f : 0.2f);
        gw[i] = rnd(sz, 1);
        gw0[i] = copy_f(gw[i], sz);
    }
    AttentionParams ap = {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]};
    AttentionGrads ag = {gw[0], gw[1], gw[2], gw[3], gw[4], gw[5], gw[6], gw[7]};
    float *q = malloc(N * D * 4), *k = malloc(N * D * 4), *v = malloc(N * D * 4), *ctx = malloc(N * D * 4);
    float* p = malloc(B * H * T * T * 4);
    AttentionActs acts = {q, k, v, p, ctx, {NULL, 0}, NULL};
    float *out = malloc(N * D * 4), *dy = rnd(N * D, 1), *dx = rnd(N * D, 1), *dx0 = copy_f(dx, N * D);
    float* work = malloc(attention_work_floats(B, T, D) * sizeof(float));
    LayerCtx c;
    layer_ctx_init(&c, &g_gemm, DTYPE_F32, NULL);
    assert_true(status_is_ok(attention_forward(&c, out, &acts, x, &ap, m, B, T, D, H)));
    assert_true(status_is_ok(attention_backward(&c, dx, &ag, dy, &acts, x, &ap, m, work, B, T, D, H)));
    AttCtx ac = {to_d(x, N * D), {0}, m, dy, B, T, D, H};
    for (int i = 0; i < 8; i++) ac.w[i] = to_d(w[i], i % 2 == 0 ? D * D : D);
    double* ref = malloc(N * D * sizeof(double));
    ref_attention(ref, ac.x, ac.w, m, B, T, D, H);
    printf("attention (B %d, T %d, D %d, heads %d, %s)\n", B, T, D, H,
           with_mask ? "keys 3,4 of sequence 1 padded: additive -FLT_MAX" : "no mask");
    check_forward("out", out, ref, N * D);
    if (with_mask) {
        // masked keys: probability exactly 0 ...
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                for (int j = len[1]; j < T; j++) assert_true(p[((1 * H + h) * T + i) * T + j] == 0.0f);
        // ... and exactly zero gradient for their keys and values (work: dq, dk, dv, dctx)
        const float* dk = work + N * D;
        const float* dv = work + 2 * N * D;
        for (int t = len[1]; t < T; t++)
            for (int d = 0; d < D; d++) {
                assert_true(dk[(1 * T + t) * D + d] == 0.0f);
                assert_true(dv[(1 * T + t) * D + d] == 0.0f);
            }
        printf("  masked keys: probability 0 and d(key), d(value) exactly 0\n");
    }
    static const char* const NAMES[8] = {"dWq", "dbq", "dWk", "dbk", "dWv", "dbv", "dWo", "dbo"};
    check_grad("dx", dx, dx0, ac.x, N * D, att_obj, &ac, NULL);
    for (int i = 0; i < 8; i++) {
        if (i == 3) {
            // the key bias cannot change softmax(q.k + q.b_k) (the same value is added to every
            // score of a row): its exact gradient is 0, so only the rounding residue remains
            double S = 0, worst = 0;
            for (int j = 0; j < D * D; j++) S = fmax(S, fabs((double)gw[2][j] - gw0[2][j]));
            for (int j = 0; j < D; j++) worst = fmax(worst, fabs((double)gw[3][j] - gw0[3][j]));
            printf("  %-34s exact gradient 0: |residue| %.3g <= %.0f eps32 * |dWk| %.3g\n", "dbk", worst, K_TOL, S);
            assert_true(worst <= K_TOL * EPS32 * S);
            continue;
        }
        check_grad(NAMES[i], gw[i], gw0[i], ac.w[i], i % 2 == 0 ? D * D : D, att_obj, &ac, NULL);
    }
    layer_ctx_free(&c);
    for (int i = 0; i < 8; i++) free(w[i]), free(gw[i]), free(gw0[i]), free(ac.w[i]);
    free(x), free(q), free(k), free(v), free(ctx), free(p), free(out), free(dy), free(dx), free(dx0), free(work);
    free(ac.x), free(ref);
}

static void test_attention_masked(void** state) {
    (void)state;
    attention_case(true);
}
static void test_attention_unmasked(void** state) {
    (void)state;
    attention_case(false);
}

// ---- classifier head ------------------------------------------------------------------------
typedef struct {
    double *h, *Wp, *bp, *Wc, *bc;
    const float* dy;
    int B, T, D, L;
} HeadCtx;

static double head_obj(void* p) {
    HeadCtx* c = p;
    double pooled[64], pre[64], z[16];
    double J = 0;
    for (int b = 0; b < c->B; b++) {
        for (int d = 0; d < c->D; d++) pooled[d] = c->h[(b * c->T) * c->D + d];
        ref_linear(pre, pooled, c->Wp, c->bp, 1, c->D, c->D);
        for (int d = 0; d < c->D; d++) pre[d] = fmax(pre[d], 0.0);
        ref_linear(z, pre, c->Wc, c->bc, 1, c->D, c->L);
        for (int l = 0; l < c->L; l++) J += z[l] * c->dy[b * c->L + l];
    }
    return J;
}

static void test_classifier_head(void** state) {
    (void)state;
    const int B = 3, T = 4, D = 8, L = 3;
    float *h = rnd(B * T * D, 1), *Wp = rnd(D * D, 0.5f), *bp = rnd(D, 0.5f), *Wc = rnd(L * D, 0.5f), *bc = rnd(L, 0.5f);
    float *dy = rnd(B * L, 1), *dh = rnd(B * T * D, 1), *dh0 = copy_f(dh, B * T * D);
    float *gWp = rnd(D * D, 1), *gbp = rnd(D, 1), *gWc = rnd(L * D, 1), *gbc = rnd(L, 1);
    float *gWp0 = copy_f(gWp, D * D), *gbp0 = copy_f(gbp, D), *gWc0 = copy_f(gWc, L * D), *gbc0 = copy_f(gbc, L);
    float pooled[24], pre[24], act[24], logits[9], work[48];
    ClassifierActs a = {pooled, pre, act, {NULL, 0}, NULL};
    ClassifierParams cp = {Wp, bp, Wc, bc};
    ClassifierGrads cg = {gWp, gbp, gWc, gbc};
    LayerCtx c;
    layer_ctx_init(&c, &g_gemm, DTYPE_F32, NULL);
    assert_true(status_is_ok(classifier_forward(&c, logits, &a, h, &cp, B, T, D, L)));
    for (int i = 0; i < B * D; i++) assert_true(fabsf(pre[i]) > 1e-2f);  // FD steps do not cross the ReLU kink
    assert_true(status_is_ok(classifier_backward(&c, dh, &cg, dy, &a, &cp, work, B, T, D, L)));
    HeadCtx hc = {to_d(h, B * T * D), to_d(Wp, D * D), to_d(bp, D), to_d(Wc, L * D), to_d(bc, L), dy, B, T, D, L};
    printf("classifier head (B %d, T %d, D %d, labels %d)\n", B, T, D, L);
    bool skip[96];
    for (int i = 0; i < B * T * D; i++) skip[i] = (i / D) % T != 0;  // only token 0 reaches the head
    check_grad("dh (token 0 only)", dh, dh0, hc.h, B * T * D, head_obj, &hc, skip);
    check_grad("dW pre_classifier", gWp, gWp0, hc.Wp, D * D, head_obj, &hc, NULL);
    check_grad("db pre_classifier", gbp, gbp0, hc.bp, D, head_obj, &hc, NULL);
    check_grad("dW classifier", gWc, gWc0, hc.Wc, L * D, head_obj, &hc, NULL);
    check_grad("db classifier", gbc, gbc0, hc.bc, L, head_obj, &hc, NULL);
    layer_ctx_free(&c);
    free(h), free(Wp), free(bp), free(Wc), free(bc), free(dy), free(dh), free(dh0);
    free(gWp), free(gbp), free(gWc), free(gbc), free(gWp0), free(gbp0), free(gWc0), free(gbc0);
    free(hc.h), free(hc.Wp), free(hc.bp), free(hc.Wc), free(hc.bc);
}

// The head's ReLU backward is torch's threshold_backward(grad, result, 0): 0 where the ReLU's
// output is <= 0, the incoming gradient elsewhere, NaN output included. A NaN pre_classifier bias
// makes column j of relu(pre) NaN in every sequence; the gradient reaching pre_classifier's
// weight row j and bias j must then be the same bits as when that column is positive (the
// incoming gradient dlogits @ Wcls does not depend on the forward). It was 0 (`act > 0 ?`).
static void test_classifier_relu_nan(void** state) {
    (void)state;
    const int B = 2, T = 2, D = 8, L = 3, j = 5;
    float *h = rnd(B * T * D, 1), *Wp = rnd(D * D, 0.5f), *bp = rnd(D, 0.5f), *Wc = rnd(L * D, 0.5f), *bc = rnd(L, 0.5f);
    float* dy = rnd(B * L, 1);
    float grads[2][D * D + D];
    for (int run = 0; run < 2; run++) {
        bp[j] = run == 0 ? 1e6f : NAN;  // column j: positive in every sequence, then NaN
        float pooled[16], pre[16], act[16], logits[6], work[32], dh[32] = {0}, gWc[24] = {0}, gbc[3] = {0};
        float* gWp = grads[run];
        float* gbp = grads[run] + D * D;
        memset(grads[run], 0, sizeof grads[run]);
        ClassifierActs a = {pooled, pre, act, {NULL, 0}, NULL};
        ClassifierParams cp = {Wp, bp, Wc, bc};
        ClassifierGrads cg = {gWp, gbp, gWc, gbc};
        LayerCtx c;
        layer_ctx_init(&c, &g_gemm, DTYPE_F32, NULL);
        assert_true(status_is_ok(classifier_forward(&c, logits, &a, h, &cp, B, T, D, L)));
        for (int b = 0; b < B; b++) assert_true(run == 0 ? act[b * D + j] > 0 : isnan(act[b * D + j]));
        assert_true(status_is_ok(classifier_backward(&c, dh, &cg, dy, &a, &cp, work, B, T, D, L)));
        layer_ctx_free(&c);
    }
    printf("classifier ReLU at NaN: db pre_classifier[%d] %g (positive column: %g)\n", j, (double)grads[1][D * D + j],
           (double)grads[0][D * D + j]);
    assert_true(grads[0][D * D + j] != 0.0f);
    assert_memory_equal(&grads[1][D * D + j], &grads[0][D * D + j], sizeof(float));
    assert_memory_equal(&grads[1][j * D], &grads[0][j * D], (size_t)D * sizeof(float));
    free(h), free(Wp), free(bp), free(Wc), free(bc), free(dy);
}

// ---- cross-entropy ----------------------------------------------------------------------------
typedef struct {
    double* z;
    const int32_t* labels;
    int B, L;
} CeCtx;

static double ce_obj(void* p) {
    CeCtx* c = p;
    return ref_cross_entropy(c->z, c->labels, c->B, c->L);
}

static void ce_case(int L) {
    const int B = 4;
    const int32_t labels[4] = {0, 1, (int32_t)(L - 1), 1};
    float *z = rnd(B * L, 2), *dz = rnd(B * L, 1), *dz0 = copy_f(dz, B * L), logp[12];
    float loss = cross_entropy_forward(logp, z, labels, B, L);
    cross_entropy_backward(dz, logp, labels, 1.0f, B, L);
    CeCtx cc = {to_d(z, B * L), labels, B, L};
    double ref = ref_cross_entropy(cc.z, labels, B, L);
    printf("cross-entropy (B %d, %d labels, mean)\n", B, L);
    check_forward("loss", &loss, &ref, 1);
    check_grad("dlogits", dz, dz0, cc.z, B * L, ce_obj, &cc, NULL);
    // the incoming gradient scales the result (GradScaler's loss * scale): a power of two exactly
    float *a = calloc(B * L, 4), *s = calloc(B * L, 4);
    cross_entropy_backward(a, logp, labels, 1.0f, B, L);
    cross_entropy_backward(s, logp, labels, 65536.0f, B, L);
    for (int i = 0; i < B * L; i++) assert_true(s[i] == 65536.0f * a[i]);
    free(z), free(dz), free(dz0), free(cc.z), free(a), free(s);
}

static void test_cross_entropy_2_labels(void** state) {
    (void)state;
    ce_case(2);
}
static void test_cross_entropy_3_labels(void** state) {
    (void)state;
    ce_case(3);
}

// ---- whole model -----------------------------------------------------------------------------
// A double-precision DistilBertForSequenceClassification over the parameter table, composed
// from the references above (the same semantics as transformers' eager path, fp32 mode).
typedef struct {
    const ParamTable* t;
    double* p;  // (alloc_numel) parameters
    const ModelBatch* batch;
} ModelCtx;

static const double* P(const ModelCtx* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static const double* P(const ModelCtx* c, const char* fmt, ...) {
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const ParamTensor* pt = param_table_find(c->t, name);
    assert_non_null(pt);
    return c->p + pt->offset;
}

static double model_obj(void* p) {
    ModelCtx* c = p;
    const ModelConfig* cfg = &c->t->cfg;
    const int B = c->batch->B, T = c->batch->T, N = B * T, D = (int)cfg->dim, F = (int)cfg->hidden_dim,
              H = (int)cfg->n_heads, L = (int)cfg->n_labels;
    double* h = malloc((size_t)N * D * sizeof(double));
    double* a = calloc((size_t)N * D, sizeof(double));
    double* f = calloc((size_t)N * F, sizeof(double));
    const double* wte = P(c, "distilbert.embeddings.word_embeddings.weight");
    const double* wpe = P(c, "distilbert.embeddings.position_embeddings.weight");
    for (int r = 0; r < N; r++)
        for (int d = 0; d < D; d++) a[r * D + d] = wte[c->batch->input_ids[r] * D + d] + wpe[(r % T) * D + d];
    ref_layernorm(h, a, P(c, "distilbert.embeddings.LayerNorm.weight"), P(c, "distilbert.embeddings.LayerNorm.bias"),
                  N, D);
    float* mask = NULL;
    bool pad = false;
    for (int r = 0; r < N; r++) pad |= c->batch->attention_mask[r] == 0;
    if (pad) {
        mask = malloc((size_t)N * sizeof(float));
        for (int r = 0; r < N; r++) mask[r] = c->batch->attention_mask[r] ? 0.0f : -FLT_MAX;
    }
    for (int l = 0; l < cfg->n_layers; l++) {
        const char* pre = "distilbert.transformer.layer";
        double* w[8] = {(double*)P(c, "%s.%d.attention.q_lin.weight", pre, l), (double*)P(c, "%s.%d.attention.q_lin.bias", pre, l),
                        (double*)P(c, "%s.%d.attention.k_lin.weight", pre, l), (double*)P(c, "%s.%d.attention.k_lin.bias", pre, l),
                        (double*)P(c, "%s.%d.attention.v_lin.weight", pre, l), (double*)P(c, "%s.%d.attention.v_lin.bias", pre, l),
                        (double*)P(c, "%s.%d.attention.out_lin.weight", pre, l),
                        (double*)P(c, "%s.%d.attention.out_lin.bias", pre, l)};
        ref_attention(a, h, w, mask, B, T, D, H);
        for (int i = 0; i < N * D; i++) a[i] += h[i];
        ref_layernorm(h, a, P(c, "%s.%d.sa_layer_norm.weight", pre, l), P(c, "%s.%d.sa_layer_norm.bias", pre, l), N, D);
        ref_linear(f, h, P(c, "%s.%d.ffn.lin1.weight", pre, l), P(c, "%s.%d.ffn.lin1.bias", pre, l), N, D, F);
        for (int i = 0; i < N * F; i++) f[i] = ref_gelu(f[i]);
        ref_linear(a, f, P(c, "%s.%d.ffn.lin2.weight", pre, l), P(c, "%s.%d.ffn.lin2.bias", pre, l), N, F, D);
        for (int i = 0; i < N * D; i++) a[i] += h[i];
        ref_layernorm(h, a, P(c, "%s.%d.output_layer_norm.weight", pre, l), P(c, "%s.%d.output_layer_norm.bias", pre, l),
                      N, D);
    }
    double* pooled = malloc((size_t)B * D * sizeof(double));
    double* z = malloc((size_t)B * D * sizeof(double));
    double* logits = malloc((size_t)B * L * sizeof(double));
    for (int b = 0; b < B; b++) memcpy(pooled + b * D, h + (size_t)b * T * D, D * sizeof(double));
    ref_linear(z, pooled, P(c, "pre_classifier.weight"), P(c, "pre_classifier.bias"), B, D, D);
    for (int i = 0; i < B * D; i++) z[i] = fmax(z[i], 0.0);
    ref_linear(logits, z, P(c, "classifier.weight"), P(c, "classifier.bias"), B, D, L);
    double loss = ref_cross_entropy(logits, c->batch->labels, B, L);
    free(h), free(a), free(f), free(mask), free(pooled), free(z), free(logits);
    return loss;
}

// model_backward WRITES every parameter gradient (model.h): the linears' weights by their GEMMs
// (LayerCtx.dw_write), everything else accumulated into zeros it writes itself. A buffer of NaN
// garbage, and the same buffer after one backward run again without zeroing, must both come
// out byte-identical to the backward into a zeroed buffer (fp32 and bf16; the tiny preset,
// with padding): a gradient added to the old contents, or a float left unwritten (alignment
// padding included), differs.
static void test_model_backward_writes_gradients(void** state) {
    (void)state;
    const ModelConfig* cfg = model_config_find("tiny");
    ParamTable t;
    assert_true(status_is_ok(param_table_build(cfg, &t)));
    float* params = param_table_alloc_buffer(&t);
    float* zeroed = param_table_alloc_buffer(&t);
    float* garbage = param_table_alloc_buffer(&t);
    param_table_fill_normal(&t, params, 11, 0.0f, 0.2f);
    const int B = 2, T = 6;
    const int64_t ids[12] = {1, 5, 9, 33, 12, 60, 1, 7, 7, 20, 0, 0};
    const int64_t mask[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    const int32_t labels[2] = {1, 0};
    ModelBatch batch = {ids, mask, labels, B, T, 0, 0, NULL};
    ModelWorkspace* ws;
    assert_true(status_is_ok(model_workspace_new(&t, B, T, &ws)));
    const size_t bytes = t.alloc_numel * sizeof(float);
    static const char* const modes[] = {"fp32", "bf16"};
    for (size_t m = 0; m < ARRAY_LEN(modes); m++) {
        float loss;
        assert_true(status_is_ok(model_forward(ws, params, &batch, amp_mode_find(modes[m]), &g_gemm, &loss, NULL)));
        model_zero_grad(&t, zeroed);
        assert_true(status_is_ok(model_backward(ws, params, 1.0f, &g_gemm, zeroed, NULL)));
        memset(garbage, 0xff, bytes);  // NaN in every float
        assert_true(status_is_ok(model_backward(ws, params, 1.0f, &g_gemm, garbage, NULL)));
        assert_memory_equal(zeroed, garbage, bytes);
        assert_true(status_is_ok(model_backward(ws, params, 1.0f, &g_gemm, garbage, NULL)));  // not zeroed
        assert_memory_equal(zeroed, garbage, bytes);
        size_t nonzero = 0;
        for (size_t i = 0; i < t.alloc_numel; i++) nonzero += zeroed[i] != 0.0f;
        printf("model_backward writes: %s, %zu of %zu gradient floats nonzero, NaN-filled and reused buffers "
               "byte-identical\n", modes[m], nonzero, t.alloc_numel);
        assert_true(nonzero > t.numel / 2);  // a backward that wrote (mostly) nothing fails here
    }
    model_workspace_free(ws);
    free(params);
    free(zeroed);
    free(garbage);
    param_table_free(&t);
}

static void test_whole_model_tiny_fd(void** state) {
    (void)state;
    const ModelConfig* cfg = model_config_find("tiny");
    ParamTable t;
    assert_true(status_is_ok(param_table_build(cfg, &t)));
    float* params = param_table_alloc_buffer(&t);
    float* grads = param_table_alloc_buffer(&t);
    // weights larger than HF's 0.02 and random biases / LayerNorm affine, so that every path
    // carries gradient of a size finite differences resolve well
    param_table_fill_normal(&t, params, 7, 0.0f, 0.2f);
    for (size_t i = 0; i < t.n; i++)
        if (t.t[i].kind == PARAM_NORM_WEIGHT)
            for (size_t j = 0; j < t.t[i].numel; j++) params[t.t[i].offset + j] += 1.0f;
    const int B = 2, T = 6;
    // sequence 1 has 2 padded positions (the padding id 0 appears as a token), both labels 1
    // (equal labels: the two examples' loss gradients do not cancel)
    const int64_t ids[12] = {1, 5, 9, 33, 12, 60, 1, 7, 7, 20, 0, 0};
    const int64_t mask[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    const int32_t labels[2] = {1, 1};
    ModelBatch batch = {ids, mask, labels, B, T, 0, 0, NULL};
    ModelWorkspace* ws;
    assert_true(status_is_ok(model_workspace_new(&t, B, T, &ws)));
    float loss;
    assert_true(status_is_ok(model_forward(ws, params, &batch, amp_mode_find("fp32"), &g_gemm, &loss, NULL)));
    model_zero_grad(&t, grads);
    assert_true(status_is_ok(model_backward(ws, params, 1.0f, &g_gemm, grads, NULL)));
    ModelCtx mc = {&t, malloc(t.alloc_numel * sizeof(double)), &batch};
    for (size_t i = 0; i < t.alloc_numel; i++) mc.p[i] = params[i];
    double ref_loss = model_obj(&mc);
    printf("whole model, tiny preset, fp32, naive backend (B %d, T %d, with padding): loss %.9g (double %.12g)\n",
           B, T, loss, ref_loss);
    assert_true(fabs(loss - ref_loss) <= K_MODEL * EPS32 * fabs(ref_loss));
    // 2 random elements of every tensor (embedding rows: rows the batch uses, and the padding row)
    Rng r;
    rng_init(&r, 99, 1);
    double worst = 0.0;
    int checked = 0;
    for (size_t k = 0; k < t.n; k++) {
        const ParamTensor* pt = &t.t[k];
        double S = 0.0;  // scale: the tensor's largest gradient (C; accurate to ~1e-6 of itself)
        for (size_t j = 0; j < pt->numel; j++) S = fmax(S, fabs((double)grads[pt->offset + j]));
        for (int s = 0; s < 2; s++) {
            size_t j = rng_below(&r, (uint32_t)pt->numel);
            if (pt->kind == PARAM_EMBEDDING) {
                int64_t row = strstr(pt->name, "word") ? ids[rng_below(&r, B * T)] : (int64_t)rng_below(&r, T);
                if (s == 1 && strstr(pt->name, "word")) row = MODEL_PAD_TOKEN_ID;  // must be exactly 0
                j = (size_t)row * (size_t)pt->shape.dims[1] + rng_below(&r, (uint32_t)pt->shape.dims[1]);
            }
            double g = grads[pt->offset + j];
            if (pt->kind == PARAM_EMBEDDING && strstr(pt->name, "word") && j / pt->shape.dims[1] == MODEL_PAD_TOKEN_ID) {
                assert_true(g == 0.0);  // padding_idx: no gradient, whatever finite differences say
                continue;
            }
            double ref = fd(model_obj, &mc, mc.p, pt->offset + j);
            bool kbias = strstr(pt->name, "attention.k_lin.bias") != NULL;  // exact gradient 0
            double e = fabs(g - ref) / (EPS32 * (S > 0 ? S : 1.0));
            if (kbias) {
                double Sw = 0.0;  // the k_lin weight gradient's scale (see test_attention_masked)
                for (size_t q = 0; q < t.t[k - 1].numel; q++) Sw = fmax(Sw, fabs((double)grads[t.t[k - 1].offset + q]));
                e = fabs(g - ref) / (EPS32 * Sw);
            }
            if (e > worst) worst = e;
            if (e > K_MODEL || getenv("TRAINBENCH_VERBOSE"))
                printf("  %-58s [%5zu] C %+.9e fd %+.9e  err %.2f eps32*S\n", pt->name, j, g, ref, e);
            assert_true(e <= K_MODEL);
            checked++;
        }
    }
    printf("  %d parameter elements checked (2 per tensor, padding row included): max err %.2f eps32*S\n", checked,
           worst);
    if (worst > worst_seen) worst_seen = worst;
    free(mc.p);
    model_workspace_free(ws);
    free(params);
    free(grads);
    param_table_free(&t);
}

// The low modes' GELU and GELU-tanh by table (layers.c "GELU by table") against the direct computation, bit
// for bit, for every one of the 65,536 bit patterns of bf16 and of fp16 as GELU's input (NaNs,
// infinities, subnormals, -0 included), forward (fp32 values and the low copy) and backward with
// four upstream gradients per pattern (1, -3.5, a subnormal of the dtype, a value near its max),
// on n = 4 * 65536 + 37 elements (threaded, with a ragged tail).
static void gelu_table_every_pattern(FfnActivation act, DType dt) {
    const size_t n = 4 * 65536 + 37;
    uint16_t* xl = malloc(n * 2);
    uint16_t* dyl = malloc(n * 2);
    float dyv[4] = {1.0f, -3.5f, dt == DTYPE_BF16 ? 0x1p-130f : 0x1p-20f, dt == DTYPE_BF16 ? 1e38f : 6e4f};
    uint16_t dyb[4];
    dtype_from_f32_row(dyb, dt, dyv, 4);
    for (size_t i = 0; i < n; i++) {
        xl[i] = (uint16_t)(i % 65536);
        dyl[i] = dyb[(i / 65536) % 4];
    }
    float *ya = malloc(n * 4), *yb = malloc(n * 4);
    uint16_t *yla = malloc(n * 2), *ylb = malloc(n * 2), *dxa = malloc(n * 2), *dxb = malloc(n * 2);
    layers_gelu_table_disable(true);
    ffn_activation_forward_low(act, ya, yla, xl, n, dt);
    ffn_activation_backward_low(act, dxa, dyl, NULL, xl, n, dt);
    layers_gelu_table_disable(false);
    // bf16 where the table's gradient factor is oneDNN's (gelu_onednn.h): the backward is then
    // R(dy * f) with f from gelu_onednn_grad_f32, formed here element by element instead
    const bool onednn =
        act == FFN_ACT_GELU && dt == DTYPE_BF16 && !strcmp(layers_gelu_bf16_grad_source(), "onednn");
    if (onednn) {
        uint16_t* bits = malloc(65536 * 2);
        float *xw = malloc(65536 * 4), *f = malloc(65536 * 4);
        for (size_t i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
        dtype_to_f32_row(xw, dt, bits, 65536);
        assert_true(gelu_onednn_grad_f32(xw, f, 65536));
        for (size_t i = 0; i < n; i++) {
            float dyw, t;
            dtype_to_f32_row(&dyw, dt, &dyl[i], 1);
            t = 0.0f + dtype_round(dyw * f[xl[i]], dt);
            dtype_from_f32_row(&dxa[i], dt, &t, 1);
        }
        free(bits), free(xw), free(f);
    }
    ffn_activation_forward_low(act, yb, ylb, xl, n, dt);
    ffn_activation_backward_low(act, dxb, dyl, NULL, xl, n, dt);
    // the same backward from x's fp32 values instead of its low copy (no kept copy registered)
    float* xf = malloc(n * 4);
    uint16_t* dxc = malloc(n * 2);
    dtype_to_f32_row(xf, dt, xl, n);
    ffn_activation_backward_low(act, dxc, dyl, xf, NULL, n, dt);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&ya[i], &yb[i], 4) != 0 || yla[i] != ylb[i] || dxa[i] != dxb[i] ||
               (onednn && dxc[i] != dxb[i]);
    free(xf), free(dxc);
    printf("%s table vs direct, %s, %zu elements (every pattern): %zu differ%s\n", ffn_activation_name(act),
           dtype_traits(dt)->name, n, bad, onednn ? " (backward against R(dy * oneDNN's derivative))" : "");
    assert_int_equal(bad, 0);
    free(xl), free(dyl), free(ya), free(yb), free(yla), free(ylb), free(dxa), free(dxb);
}

static void test_gelu_table_every_pattern(void** state) {
    (void)state;
    const DType dts[2] = {DTYPE_BF16, DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        gelu_table_every_pattern(FFN_ACT_GELU, dts[k]);
        gelu_table_every_pattern(FFN_ACT_GELU_TANH, dts[k]);  // gelu_pytorch_tanh: its own tables
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_linear_bf16_rounding),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_gelu_relu),
        cmocka_unit_test(test_gelu_f32_kernel_matches_model),
        cmocka_unit_test(test_relu_edges),
        cmocka_unit_test(test_gelu_table_every_pattern),
        cmocka_unit_test(test_attention_masked),
        cmocka_unit_test(test_attention_unmasked),
        cmocka_unit_test(test_classifier_head),
        cmocka_unit_test(test_classifier_relu_nan),
        cmocka_unit_test(test_cross_entropy_2_labels),
        cmocka_unit_test(test_cross_entropy_3_labels),
        cmocka_unit_test(test_whole_model_tiny_fd),
        cmocka_unit_test(test_model_backward_writes_gradients),
    };
    return cmocka_run_group_tests_name("layers", tests, setup, teardown);
}

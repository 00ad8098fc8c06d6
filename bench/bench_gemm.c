// bench_gemm.c — gemm/<backend>/<dtype>/<ta><tb>/<M>x<N>x<K>: every registered backend x
// {f32, bf16, f16} inputs (C f32, alpha 1, beta 0) on the linear layers of
// distilbert-base-cased at batch x seq 8 x 128 (1024 tokens, D 768, FFN 3072):
//   nt/1024x768x768    q/k/v/out projection forward   y = x @ W^T
//   nt/1024x3072x768   FFN lin1 forward
//   nn/1024x768x3072   FFN lin2 input gradient        dx = dy @ W
//   tn/3072x768x1024   FFN lin1 weight gradient       dW = dy^T @ x   (FULL=1 only)
// Plus the training step's own linear-layer shapes for the small preset at 8 x 128 (the
// train_step/small benchmarks and `make peers`' small step), taken from model_step_gemms (the
// list the report's derived bound sums over), on onednn (the fastest backend for small here) in
// f32 and bf16: 9 shapes x 2 dtypes, ~12 s of `make run`. The per-head attention products and
// the 8-row classifier are not benchmarked; the report names the shape whose rate it uses instead.
// Checked once before timing against the naive backend on the same inputs: C must be within
// twice the per-element bound of tests/test_gemm.c (both results are within it of the exact
// answer): tol = 2 * (gamma*T + 0.5*eps(f32)*(|ref| + gamma*T)), gamma = (K+2)*2^-24,
// T = sum_k |a_ik b_kj| (computed by the naive backend on |A|, |B|; see mag_slack).
// supports() == UNSUPPORTED -> "unsupported: <why>"; a run that returns an error -> "failed".
// Counters: GFLOP/s (2*M*N*K per GEMM) and frac_peak, the fraction of the dtype's roofline
// probe: f32 and f16 -> roofline/fma_f32 (no fp16 FMA probe), bf16 -> roofline/dot_bf16
// when the CPU has avx512_bf16, else fma_f32. The label names the roofline used and says
// "emulated" when the backend widens the inputs to fp32 (supports() == GEMM_EMULATED).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gemm/gemm.h"
#include "model/model.h"
#include "core/rng.h"

typedef struct {
    bool ta, tb;
    int M, N, K;
} GemmShape;

static const GemmShape SHAPES[] = {
    {false, true, 1024, 768, 768},
    {false, true, 1024, 3072, 768},
    {false, false, 1024, 768, 3072},
    {true, false, 3072, 768, 1024},
};
static const DType DTYPES[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};

typedef struct {
    const GemmBackend* backend;
    DType dt;
    GemmShape sh;
    bool checked, ok;
    char why[384];
} GemmCase;

// Inputs (and, once asked for, the naive reference) of one (dtype, shape), shared by every
// backend: registration puts the backends of one key next to each other, so one slot is
// enough.
typedef struct {
    bool valid;
    DType dt;
    GemmShape sh;
    void *A, *B;       // stored op(A), op(B) in dt, minimal leading dimensions
    float *ref, *mag;  // (M, N) naive C and naive sum |a||b|; NULL until needed
} Inputs;
static Inputs cache;

static void inputs_free(Inputs* in) {
    free(in->A);
    free(in->B);
    free(in->ref);
    free(in->mag);
    memset(in, 0, sizeof *in);
}

static void* random_matrix(size_t n, DType dt, uint64_t stream) {
    float* f = xmalloc(n * sizeof(float));
    Rng r;
    rng_init(&r, 0x6E33ull, stream);
    rng_fill_uniform(&r, f, n, -1.0f, 1.0f);
    void* p = xaligned_alloc(n * dtype_traits(dt)->size);
    dtype_from_f32_row(p, dt, f, n);
    free(f);
    return p;
}

static GemmArgs args_for(const Inputs* in, const void* A, const void* B, float* C) {
    const GemmShape* s = &in->sh;
    return (GemmArgs){.trans_a = s->ta, .trans_b = s->tb, .M = s->M, .N = s->N, .K = s->K,
                      .alpha = 1.0f, .beta = 0.0f, .ab_dtype = in->dt, .c_dtype = DTYPE_F32,
                      .A = A, .lda = s->ta ? s->M : s->K, .B = B, .ldb = s->tb ? s->K : s->N,
                      .C = C, .ldc = s->N};
}

static const Inputs* inputs_get(DType dt, const GemmShape* sh) {
    if (cache.valid && cache.dt == dt && memcmp(&cache.sh, sh, sizeof *sh) == 0) return &cache;
    inputs_free(&cache);
    cache.dt = dt;
    cache.sh = *sh;
    cache.A = random_matrix((size_t)sh->M * sh->K, dt, 1);
    cache.B = random_matrix((size_t)sh->K * sh->N, dt, 2);
    cache.valid = true;
    return &cache;
}

// |x| elementwise of a buffer in dt (exact: clears the sign bit).
static void* abs_copy(const void* x, DType dt, size_t n) {
    float* f = xmalloc(n * sizeof(float));
    dtype_to_f32_row(f, dt, x, n);
    for (size_t i = 0; i < n; i++) f[i] = fabsf(f[i]);
    void* p = xaligned_alloc(n * dtype_traits(dt)->size);
    dtype_from_f32_row(p, dt, f, n);
    free(f);
    return p;
}

// The naive reference and magnitudes, computed once per inputs.
static Status reference_get(Inputs* in) {
    if (in->ref) return status_ok();
    const size_t mn = (size_t)in->sh.M * in->sh.N;
    Gemm g;
    Status s = gemm_open(&g, &gemm_backend_naive, 0);
    if (!status_is_ok(s)) return s;
    float* ref = xaligned_alloc(mn * sizeof(float));
    float* mag = xaligned_alloc(mn * sizeof(float));
    void* absA = abs_copy(in->A, in->dt, (size_t)in->sh.M * in->sh.K);
    void* absB = abs_copy(in->B, in->dt, (size_t)in->sh.K * in->sh.N);
    GemmArgs a = args_for(in, in->A, in->B, ref);
    s = gemm_run(&g, &a);
    if (status_is_ok(s)) {
        a = args_for(in, absA, absB, mag);
        s = gemm_run(&g, &a);
    }
    gemm_close(&g);
    free(absA);
    free(absB);
    if (!status_is_ok(s)) {
        free(ref);
        free(mag);
        return s;
    }
    in->ref = ref;
    in->mag = mag;
    return status_ok();
}

// The fp32 sum of K non-negative terms is within gamma of the exact one; this slack covers
// it (and the rounding of the slack itself) many times over.
static double mag_slack(int K) { return 1.0 + 4.0 * (K + 2) * ldexp(1.0, -24); }

static bool gemm_check(Inputs* in, const float* C, char* why, size_t len) {
    Status s = reference_get(in);
    if (!status_is_ok(s)) {
        snprintf(why, len, "naive reference: %.300s", s.msg);
        return false;
    }
    const int M = in->sh.M, N = in->sh.N, K = in->sh.K;
    const double gamma = (K + 2) * ldexp(1.0, -24), eps = dtype_traits(DTYPE_F32)->eps;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        const double ref = in->ref[i], T = in->mag[i] * mag_slack(K);
        const double tol = 2.0 * (gamma * T + 0.5 * eps * (fabs(ref) + gamma * T));
        const double err = fabs((double)C[i] - ref);
        if (!(err <= tol)) {  // NaN fails
            snprintf(why, len, "C[%zu][%zu] = %.9g, naive %.9g: err %.3g > tol %.3g", i / N, i % N,
                     (double)C[i], ref, err, tol);
            return false;
        }
    }
    return true;
}

static Roofline gemm_roofline(DType dt) {
    return dt == DTYPE_BF16 && roofline_get(ROOF_DOT_BF16) > 0 ? ROOF_DOT_BF16 : ROOF_FMA_F32;
}

static void bm_gemm(BenchState* st, void* arg) {
    GemmCase* c = arg;
    char why[256] = "";
    const GemmSupport sup = c->backend->supports(c->dt, DTYPE_F32, why, sizeof why);
    if (sup == GEMM_UNSUPPORTED) {
        bench_unsupported(st, "%s", why);
        return;
    }
    Gemm g;
    Status s = gemm_open(&g, c->backend, 0);
    if (!status_is_ok(s)) {
        if (s.code == STATUS_UNSUPPORTED) bench_unsupported(st, "%s", s.msg);
        else bench_fail(st, "gemm_open: %s", s.msg);
        return;
    }
    Inputs* in = (Inputs*)inputs_get(c->dt, &c->sh);
    float* C = xaligned_alloc((size_t)c->sh.M * c->sh.N * sizeof(float));
    const GemmArgs a = args_for(in, in->A, in->B, C);
    s = gemm_run(&g, &a);  // warm-up (primitive creation, packing) and the checked result
    if (!status_is_ok(s)) {
        c->checked = true;
        c->ok = false;
        snprintf(c->why, sizeof c->why, "gemm_run: %.300s", s.msg);
    } else if (!c->checked) {
        c->ok = gemm_check(in, C, c->why, sizeof c->why);
        c->checked = true;
    }
    if (!c->ok) {
        if (s.code == STATUS_UNSUPPORTED) bench_unsupported(st, "%s", s.msg);
        else bench_fail(st, "%s", c->why);
    } else {
        while (bench_keep_running(st)) gemm_run(&g, &a);
        const Roofline r = gemm_roofline(c->dt);
        const double flops = 2.0 * c->sh.M * c->sh.N * c->sh.K * (double)bench_iterations(st);
        bench_counter(st, "GFLOP/s", flops * 1e-9, BENCH_RATE);
        bench_counter(st, "frac_peak", flops / roofline_get(r), BENCH_RATE);
        char label[64];
        snprintf(label, sizeof label, "roof=%s%s", roofline_name(r), sup == GEMM_EMULATED ? " emulated" : "");
        bench_set_label(st, label);
    }
    free(C);
    gemm_close(&g);
}

void bench_register_gemm(void) {
    const size_t n_shapes = bench_full ? ARRAY_LEN(SHAPES) : 3;
    for (size_t si = 0; si < n_shapes; si++)
        for (size_t di = 0; di < ARRAY_LEN(DTYPES); di++)
            for (size_t b = 0; b < gemm_backend_count(); b++) {
                GemmCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
                c->backend = gemm_backend_at(b);
                c->dt = DTYPES[di];
                c->sh = SHAPES[si];
                bench_registerf(bm_gemm, c, "gemm/%s/%s/%c%c/%dx%dx%d", c->backend->name, dtype_name(c->dt),
                                c->sh.ta ? 't' : 'n', c->sh.tb ? 't' : 'n', c->sh.M, c->sh.N, c->sh.K);
            }
    // the small preset's training-step shapes (8 x 128 tokens): whole-team linear GEMMs only
    const ModelConfig* small = model_config_find("small");
    CHECK(small != NULL, "no small preset");
    ModelGemm g[MODEL_STEP_GEMMS_MAX];
    const size_t ng = model_step_gemms(small, 8, 128, g);
    const DType step_dtypes[] = {DTYPE_F32, DTYPE_BF16};
    for (size_t i = 0; i < ng; i++) {
        if (g[i].per_head || g[i].M < 64 || g[i].N < 64 || g[i].K < 64) continue;  // attention heads, classifier
        for (size_t di = 0; di < ARRAY_LEN(step_dtypes); di++) {
            GemmCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
            c->backend = &gemm_backend_onednn;
            c->dt = step_dtypes[di];
            c->sh = (GemmShape){g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K};
            bench_registerf(bm_gemm, c, "gemm/%s/%s/%c%c/%dx%dx%d", c->backend->name, dtype_name(c->dt),
                            c->sh.ta ? 't' : 'n', c->sh.tb ? 't' : 'n', c->sh.M, c->sh.N, c->sh.K);
        }
    }
}

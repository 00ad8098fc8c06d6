// bench_gemm.c — gemm/<backend>/<dtype>/<ta><tb>/<M>x<N>x<K>: every registered backend x
// {f32, bf16, f16} inputs (C f32, alpha 1, beta 0) on the linear layers of
// distilbert-base-cased at batch x seq 8 x 128 (1024 tokens, D 768, FFN 3072):
//   nt/1024x768x768    q/k/v/out projection forward   y = x @ W^T
//   nt/1024x3072x768   FFN lin1 forward
//   nn/1024x768x3072   FFN lin1 input gradient        dx = dy @ W
//   tn/3072x768x1024   FFN lin1 weight gradient       dW = dy^T @ x   (FULL=1 only)
// The naive backend (the correctness reference, not a speed contender) runs the first shape
// only; FULL=1 runs it on all of them.
// Plus every GEMM call of the training step of the small and distilbert-base-cased presets at
// 8 x 128 (the train_step/small benchmarks, `make peers`' steps), taken from model_step_gemms
// (the list the report's derived bound sums over, so the bound uses the measured rate of each
// call the step makes, not a neighbour's), on onednn (the fastest backend here) in f32 and
// bf16, with the step's transposes and leading dimensions:
//   whole-team calls (the linears): gemm/onednn/<dt>/<tatb>/<MxNxK>, one GEMM on all threads
//     per iteration, as above (not the classifier's 8-row calls: see bench_register_gemm);
//   per-head calls (attention's products, T x T x dh): gemm/onednn/<dt>/<tatb>/<MxNxK>/per_head,
//     run as the step runs them: one layer's B x heads calls per iteration, spread over the
//     threads (a parallel loop, schedule(dynamic, 1)), each on its own one-thread handle, the
//     operands strided as in the (B, T, D) activations (leading dimension D where a side is dh);
//     GFLOP/s counts all threads' calls.
// Shapes already in the list above are not registered twice. The step's calls write C with the
// step's beta and dtype (fp32: beta 1 onto the bias rows or the gradient; bf16: a bf16 C for
// activations); these write an fp32 C with beta 0: interleaved in one process (2 threads, the
// distilbert linear shapes, CPU time per call), beta 1 changed a call's time by -4..+8% (median
// +3%) and a bf16 C by -4..+2%.
// Checked once before timing against the naive backend on the same inputs (up to 64 rows of C,
// evenly spaced, first and last included: a wrong layout, transpose or leading dimension shows
// in every row, and the naive reference of a whole 1024x3072x768 product with its magnitudes
// takes about a second per dtype): C must be within twice the per-element bound of
// tests/test_gemm.c (both results are within it of the exact answer):
// tol = 2 * (gamma*T + 0.5*eps(f32)*(|ref| + gamma*T)), gamma = (K+2)*2^-24,
// T = sum_k |a_ik b_kj| (computed by the naive backend on |A|, |B|; see mag_slack).
// supports() == UNSUPPORTED -> "unsupported: <why>"; a run that returns an error -> "failed".
// Counters: GFLOP/s (2*M*N*K per GEMM) and frac_peak, the fraction of the dtype's roofline
// probe: f32 and f16 -> roofline/fma_f32 (no fp16 FMA probe), bf16 -> roofline/dot_bf16
// when the CPU has avx512_bf16, else fma_f32. The label names the roofline used and says
// "emulated" when the backend widens the inputs to fp32 (supports() == GEMM_EMULATED).
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gemm/gemm.h"
#include "model/model.h"
#include "core/rng.h"

typedef struct {
    bool ta, tb;
    int M, N, K;
    int lda, ldb;  // leading dimensions of the stored A and B; 0 = packed (the minimal one)
    int per_head;  // 0: one whole-team GEMM per iteration; n: n one-thread GEMMs at once (see top)
} GemmShape;

static const GemmShape SHAPES[] = {
    {false, true, 1024, 768, 768, 0, 0, 0},
    {false, true, 1024, 3072, 768, 0, 0, 0},
    {false, false, 1024, 768, 3072, 0, 0, 0},
    {true, false, 3072, 768, 1024, 0, 0, 0},
};

static bool shape_equal(const GemmShape* x, const GemmShape* y) {  // field by field (padding)
    return x->ta == y->ta && x->tb == y->tb && x->M == y->M && x->N == y->N && x->K == y->K && x->lda == y->lda &&
           x->ldb == y->ldb && x->per_head == y->per_head;
}

static int shape_lda(const GemmShape* s) { return s->lda ? s->lda : s->ta ? s->M : s->K; }
static int shape_ldb(const GemmShape* s) { return s->ldb ? s->ldb : s->tb ? s->K : s->N; }
static size_t shape_a_elems(const GemmShape* s) { return (size_t)(s->ta ? s->K : s->M) * (size_t)shape_lda(s); }
static size_t shape_b_elems(const GemmShape* s) { return (size_t)(s->tb ? s->N : s->K) * (size_t)shape_ldb(s); }
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
    void *A, *B;       // stored op(A), op(B) in dt, the shape's leading dimensions
    int rows[64];      // the rows of C the check compares (evenly spaced, first and last)
    int nrows;
    float *ref, *mag;  // (nrows, N) naive C and naive sum |a||b| of those rows; NULL until needed
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
                      .A = A, .lda = shape_lda(s), .B = B, .ldb = shape_ldb(s), .C = C, .ldc = s->N};
}

// Row i of C alone: op(A)'s row i (M = 1; a transposed A's row is a column, hence the offset i).
static GemmArgs row_args(const Inputs* in, const void* A, const void* B, float* C, int i) {
    GemmArgs a = args_for(in, A, B, C);
    const size_t es = dtype_traits(in->dt)->size;
    a.A = (const char*)A + (in->sh.ta ? (size_t)i : (size_t)i * (size_t)a.lda) * es;
    a.M = 1;
    return a;
}

static const Inputs* inputs_get(DType dt, const GemmShape* sh) {
    if (cache.valid && cache.dt == dt && shape_equal(&cache.sh, sh)) return &cache;
    inputs_free(&cache);
    cache.dt = dt;
    cache.sh = *sh;
    cache.A = random_matrix(shape_a_elems(sh), dt, 1);
    cache.B = random_matrix(shape_b_elems(sh), dt, 2);
    cache.nrows = sh->M < (int)ARRAY_LEN(cache.rows) ? sh->M : (int)ARRAY_LEN(cache.rows);
    for (int r = 0; r < cache.nrows; r++)
        cache.rows[r] = cache.nrows == 1 ? 0 : (int)((long long)r * (sh->M - 1) / (cache.nrows - 1));
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

// The naive reference and magnitudes of the checked rows, computed once per inputs.
static Status reference_get(Inputs* in) {
    if (in->ref) return status_ok();
    const size_t N = (size_t)in->sh.N;
    Gemm g;
    Status s = gemm_open(&g, &gemm_backend_naive, 0);
    if (!status_is_ok(s)) return s;
    float* ref = xaligned_alloc((size_t)in->nrows * N * sizeof(float));
    float* mag = xaligned_alloc((size_t)in->nrows * N * sizeof(float));
    void* absA = abs_copy(in->A, in->dt, shape_a_elems(&in->sh));
    void* absB = abs_copy(in->B, in->dt, shape_b_elems(&in->sh));
    for (int r = 0; r < in->nrows && status_is_ok(s); r++) {
        GemmArgs a = row_args(in, in->A, in->B, ref + (size_t)r * N, in->rows[r]);
        s = gemm_run(&g, &a);
        if (status_is_ok(s)) {
            a = row_args(in, absA, absB, mag + (size_t)r * N, in->rows[r]);
            s = gemm_run(&g, &a);
        }
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
    const size_t N = (size_t)in->sh.N;
    const int K = in->sh.K;
    const double gamma = (K + 2) * ldexp(1.0, -24), eps = dtype_traits(DTYPE_F32)->eps;
    for (int r = 0; r < in->nrows; r++)
        for (size_t j = 0; j < N; j++) {
            const size_t i = (size_t)r * N + j;  // in ref/mag
            const double c = C[(size_t)in->rows[r] * N + j];
            const double ref = in->ref[i], T = in->mag[i] * mag_slack(K);
            const double tol = 2.0 * (gamma * T + 0.5 * eps * (fabs(ref) + gamma * T));
            const double err = fabs(c - ref);
            if (!(err <= tol)) {  // NaN fails
                snprintf(why, len, "C[%d][%zu] = %.9g, naive %.9g: err %.3g > tol %.3g", in->rows[r], j, c, ref,
                         err, tol);
                return false;
            }
        }
    return true;
}

static Roofline gemm_roofline(DType dt) {
    return dt == DTYPE_BF16 && roofline_get(ROOF_DOT_BF16) > 0 ? ROOF_DOT_BF16 : ROOF_FMA_F32;
}

// The timing loop of a per-head shape: per iteration, per_head calls spread over the OpenMP
// team as attention's (batch, head) loop spreads them, each thread on its own one-thread handle
// and its own C (the inputs are shared, read-only). Returns the first failure, if any.
static Status time_per_head(BenchState* st, const GemmCase* c, const Inputs* in) {
    const int nt = omp_get_max_threads();  // the team attention's loop runs on
    Gemm* g = xcalloc((size_t)nt, sizeof *g);
    float** C = xcalloc((size_t)nt, sizeof *C);
    Status first = status_ok();
    for (int t = 0; t < nt && status_is_ok(first); t++) {
        first = gemm_open(&g[t], c->backend, 1);
        C[t] = xaligned_alloc((size_t)c->sh.M * c->sh.N * sizeof(float));
    }
    while (status_is_ok(first) && bench_keep_running(st)) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int i = 0; i < c->sh.per_head; i++) {
            const int t = omp_get_thread_num();
            const GemmArgs a = args_for(in, in->A, in->B, C[t]);
            Status s = gemm_run(&g[t], &a);
            if (!status_is_ok(s)) {
#pragma omp critical(bench_gemm_error)
                if (status_is_ok(first)) first = s;
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        if (g[t].backend) gemm_close(&g[t]);
        free(C[t]);
    }
    free(g);
    free(C);
    return first;
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
        double calls = 1;  // GEMMs per iteration
        if (c->sh.per_head) {
            s = time_per_head(st, c, in);
            calls = c->sh.per_head;
        } else {
            while (bench_keep_running(st)) gemm_run(&g, &a);
        }
        const Roofline r = gemm_roofline(c->dt);
        const double flops = 2.0 * c->sh.M * c->sh.N * c->sh.K * calls * (double)bench_iterations(st);
        bench_counter(st, "GFLOP/s", flops * 1e-9, BENCH_RATE);
        bench_counter(st, "frac_peak", flops / roofline_get(r), BENCH_RATE);
        char label[64];
        snprintf(label, sizeof label, "roof=%s%s", roofline_name(r), sup == GEMM_EMULATED ? " emulated" : "");
        bench_set_label(st, label);
        if (!status_is_ok(s)) bench_fail(st, "per-head gemm_run: %.300s", s.msg);
    }
    free(C);
    gemm_close(&g);
}

void bench_register_gemm(void) {
    const size_t n_shapes = bench_full ? ARRAY_LEN(SHAPES) : 3;
    for (size_t si = 0; si < n_shapes; si++)
        for (size_t di = 0; di < ARRAY_LEN(DTYPES); di++)
            for (size_t b = 0; b < gemm_backend_count(); b++) {
                // naive (the reference, ~0.6 s per large product): the first shape only unless
                // FULL=1, which keeps make run's benchmarks phase within its budget
                if (gemm_backend_at(b) == &gemm_backend_naive && si > 0 && !bench_full) continue;
                GemmCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
                c->backend = gemm_backend_at(b);
                c->dt = DTYPES[di];
                c->sh = SHAPES[si];
                bench_registerf(bm_gemm, c, "gemm/%s/%s/%c%c/%dx%dx%d", c->backend->name, dtype_name(c->dt),
                                c->sh.ta ? 't' : 'n', c->sh.tb ? 't' : 'n', c->sh.M, c->sh.N, c->sh.K);
            }
    // every GEMM call of the small and distilbert-base-cased steps at 8 x 128 (see top), each
    // distinct (shape, leading dimensions, per-head or not) once, on onednn in f32 and bf16
    static const char* const STEP_MODELS[] = {"small", "distilbert-base-cased"};
    const DType step_dtypes[] = {DTYPE_F32, DTYPE_BF16};
    GemmShape done[2 * MODEL_STEP_GEMMS_MAX];
    size_t ndone = 0;
    for (size_t si = 0; si < n_shapes; si++) done[ndone++] = SHAPES[si];
    for (size_t mi = 0; mi < ARRAY_LEN(STEP_MODELS); mi++) {
        const ModelConfig* cfg = model_config_find(STEP_MODELS[mi]);
        CHECK(cfg != NULL, "no %s preset", STEP_MODELS[mi]);
        const int B = 8, D = (int)cfg->dim, dh = (int)(cfg->dim / cfg->n_heads);
        ModelGemm g[MODEL_STEP_GEMMS_MAX];
        const size_t ng = model_step_gemms(cfg, B, 128, g);
        for (size_t i = 0; i < ng; i++) {
            // the classifier's B-row calls: under 0.02% of either step's FLOP, while 12 shapes x 2
            // dtypes would add ~12 s to `make run` (5 repetitions of >= 0.1 s each); the report
            // gives them the rate of the nearest benchmarked shape and names the substitution
            if (!g[i].per_head && (g[i].M < 64 || g[i].N < 64 || g[i].K < 64)) continue;
            GemmShape sh = {g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, 0, 0, 0};
            if (g[i].per_head) {
                // attention's operands: a stored side of length dh is a head's slice of the
                // (B, T, D) activations (leading dimension D); T x T ones (P, dS) are packed
                const int a_row = sh.ta ? sh.M : sh.K, b_row = sh.tb ? sh.K : sh.N;
                sh.lda = a_row == dh ? D : 0;
                sh.ldb = b_row == dh ? D : 0;
                sh.per_head = B * (int)cfg->n_heads;  // one layer's heads
            }
            size_t k = 0;
            while (k < ndone && !shape_equal(&done[k], &sh)) k++;
            if (k < ndone) continue;
            CHECK(ndone < ARRAY_LEN(done));
            done[ndone++] = sh;
            for (size_t di = 0; di < ARRAY_LEN(step_dtypes); di++) {
                GemmCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
                c->backend = &gemm_backend_onednn;
                c->dt = step_dtypes[di];
                c->sh = sh;
                bench_registerf(bm_gemm, c, "gemm/%s/%s/%c%c/%dx%dx%d%s", c->backend->name, dtype_name(c->dt),
                                sh.ta ? 't' : 'n', sh.tb ? 't' : 'n', sh.M, sh.N, sh.K, sh.per_head ? "/per_head" : "");
            }
        }
    }
}

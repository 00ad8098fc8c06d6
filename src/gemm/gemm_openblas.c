// gemm_openblas.c — the OpenBLAS backend: cblas_sgemm (row-major) for f32. bf16/f16 inputs
// use cblas_sbgemm when this OpenBLAS build exports it (looked up at run time with dlsym,
// bf16 only); otherwise they are widened exactly to fp32 (SPEC.md section 1) into scratch
// kept in the context and run through cblas_sgemm. A bf16/f16 C is computed in fp32 and
// rounded once (gemm_store_result). Threads: openblas_set_num_threads, a process-wide setting;
// the Makefile links Debian's OpenMP build, whose workers are libgomp's (one team with oneDNN
// and our loops; inside a parallel region it runs on the calling thread).
// Built with -DTRAINBENCH_NO_OPENBLAS (make WITHOUT=openblas) this file defines only a stub
// that answers "not built" and references no OpenBLAS symbol.
// Not here: choosing the OpenBLAS core (OPENBLAS_CORETYPE is the environment's business and
// is never changed here).
#include "gemm/gemm.h"

#ifdef TRAINBENCH_NO_OPENBLAS

#define OPENBLAS_NOT_BUILT "not built (make WITHOUT=openblas)"

static GemmSupport openblas_stub_supports(DType ab, DType c, char* why, size_t why_len) {
    if (why) snprintf(why, why_len, "%s", OPENBLAS_NOT_BUILT);
    return GEMM_UNSUPPORTED;
}

static Status openblas_stub_init(void** ctx, int threads) {
    *ctx = NULL;
    return status_make(STATUS_UNSUPPORTED, "gemm/openblas: %s", OPENBLAS_NOT_BUILT);
}

static Status openblas_stub_run(void* ctx, const GemmArgs* args) {
    return status_make(STATUS_UNSUPPORTED, "gemm/openblas: %s", OPENBLAS_NOT_BUILT);
}

static int openblas_stub_library_info(GemmInfoItem* items, int max) {
    if (max < 1) return 0;
    items[0].key = "built";
    snprintf(items[0].value, sizeof items[0].value, "no (make WITHOUT=openblas)");
    return 1;
}

const GemmBackend gemm_backend_openblas = {
    .name = "openblas",
    .description = "OpenBLAS cblas_sgemm: " OPENBLAS_NOT_BUILT,
    .supports = openblas_stub_supports,
    .init = openblas_stub_init,
    .free = NULL,
    .run = openblas_stub_run,
    .library_info = openblas_stub_library_info,
};

#else  // OpenBLAS built in

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// cblas_sbgemm as declared by OpenBLAS's cblas.h, with bfloat16 spelled as our Bf16
// (both are a 16-bit bf16 bit pattern). C is fp32.
typedef void (*SbgemmFn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE,
                         blasint M, blasint N, blasint K, float alpha, const Bf16* A,
                         blasint lda, const Bf16* B, blasint ldb, float beta, float* C,
                         blasint ldc);

static SbgemmFn sbgemm_fn;
static pthread_once_t sbgemm_once = PTHREAD_ONCE_INIT;

// The Debian 0.3.21 build declares cblas_sbgemm in cblas.h but does not export it, so a
// direct reference would not link: ask the dynamic linker instead.
static void sbgemm_lookup(void) { sbgemm_fn = (SbgemmFn)dlsym(RTLD_DEFAULT, "cblas_sbgemm"); }

static SbgemmFn sbgemm(void) {
    pthread_once(&sbgemm_once, sbgemm_lookup);
    return sbgemm_fn;
}

typedef struct {
    int threads;
    float* a;  // A widened to fp32, packed in its stored layout
    float* b;  // B widened to fp32, packed in its stored layout
    float* c;  // (M, N) fp32 result before rounding to a low-precision C
    size_t a_cap, b_cap, c_cap;  // capacities in floats
} OpenblasCtx;

static GemmSupport openblas_supports(DType ab, DType c, char* why, size_t why_len) {
    if (why && why_len) why[0] = '\0';
    if (!gemm_dtypes_valid(ab, c)) {
        if (why) snprintf(why, why_len, "not a GEMM dtype combination (inputs f32/bf16/f16, "
                                        "output f32 or the input dtype)");
        return GEMM_UNSUPPORTED;
    }
    if (ab == DTYPE_F32) return GEMM_NATIVE;
    if (ab == DTYPE_BF16 && sbgemm()) {
        if (why && c != DTYPE_F32)
            snprintf(why, why_len, "cblas_sbgemm computes an fp32 C; rounded once to bf16");
        return GEMM_NATIVE;
    }
    if (why) {
        if (sbgemm())
            snprintf(why, why_len, "no shgemm in OpenBLAS; inputs widened exactly to fp32");
        else
            snprintf(why, why_len, "no sbgemm/shgemm exported by this OpenBLAS build; "
                                   "inputs widened exactly to fp32");
    }
    return GEMM_EMULATED;
}

#ifndef OPENBLAS_SINGLE_THREAD_FLOPS
#define OPENBLAS_SINGLE_THREAD_FLOPS 64e6
#endif

static Status openblas_init(void** ctx, int threads) {
    OpenblasCtx* c = xcalloc(1, sizeof *c);
    c->threads = threads;
    *ctx = c;
    return status_ok();
}

static void openblas_free(void* ctx) {
    OpenblasCtx* c = ctx;
    free(c->a);
    free(c->b);
    free(c->c);
    free(c);
}

// C (M, N) with leading dimension ldc := 0. With beta == 0 BLAS must not read C, and
// OpenBLAS 0.3.21 does honour that here (checked on the Haswell, SkylakeX, Cooperlake and
// Sandybridge cores), but individual kernels have multiplied C by zero in the past (OpenBLAS
// issue #2496, fixed in PR #2534) and newer versions forward small GEMMs to GEMV/SCAL paths
// whose beta == 0 handling has changed. Zeroing first costs one pass over C and makes a NaN
// already in C unable to leak whatever kernel runs.
static void zero_c(float* C, int M, int N, int ldc) {
    for (int i = 0; i < M; i++) memset(C + (size_t)i * (size_t)ldc, 0, (size_t)N * sizeof(float));
}

static Status openblas_run(void* ctx, const GemmArgs* g) {
    OpenblasCtx* c = ctx;
    const int M = g->M, N = g->N, K = g->K;
    const enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
    // Small products run on the calling thread: a hand-off to the team costs more than the
    // whole product here.
    // The OpenMP build's openblas_set_num_threads also calls omp_set_num_threads: give the
    // caller its own OpenMP setting back afterwards (as gemm_onednn.c does).
    const double flops = 2.0 * (double)M * (double)N * (double)K;
    const int caller_threads = omp_get_max_threads();
    openblas_set_num_threads(flops < OPENBLAS_SINGLE_THREAD_FLOPS ? 1 : c->threads);

    // Where the fp32 result goes: straight into an f32 C (OpenBLAS applies alpha and beta),
    // or into scratch (alpha 1, beta 0) that gemm_store_result scales and rounds once.
    const bool direct = g->c_dtype == DTYPE_F32;
    float* out = direct ? (float*)g->C : gemm_scratch_grow(&c->c, &c->c_cap, (size_t)M * (size_t)N);
    const int ldo = direct ? g->ldc : N;
    const float alpha = direct ? g->alpha : 1.0f;
    const float beta = direct ? g->beta : 0.0f;
    if (beta == 0.0f) zero_c(out, M, N, ldo);

    if (g->ab_dtype == DTYPE_F32) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, g->A, g->lda, g->B, g->ldb, beta,
                    out, ldo);
    } else if (g->ab_dtype == DTYPE_BF16 && sbgemm()) {
        sbgemm()(CblasRowMajor, ta, tb, M, N, K, alpha, g->A, g->lda, g->B, g->ldb, beta, out,
                 ldo);
    } else {
        // Exact widening of the stored matrices (transposes stay with sgemm).
        const int a_rows = g->trans_a ? K : M, a_cols = g->trans_a ? M : K;  // stored A
        const int b_rows = g->trans_b ? N : K, b_cols = g->trans_b ? K : N;  // stored B
        float* a = gemm_scratch_grow(&c->a, &c->a_cap, (size_t)a_rows * (size_t)a_cols);
        float* b = gemm_scratch_grow(&c->b, &c->b_cap, (size_t)b_rows * (size_t)b_cols);
        gemm_widen_matrix(a, g->A, g->ab_dtype, a_rows, a_cols, g->lda);
        gemm_widen_matrix(b, g->B, g->ab_dtype, b_rows, b_cols, g->ldb);
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a, a_cols, b, b_cols, beta, out,
                    ldo);
    }
    if (!direct) gemm_store_result(g, out);  // alpha*acc + beta*C, rounded once
    omp_set_num_threads(caller_threads);
    return status_ok();
}

static int openblas_library_info(GemmInfoItem* items, int max) {
    static const char* const PARALLEL[] = {"sequential", "pthreads", "openmp"};
    int n = 0;
    if (n < max) {
        items[n].key = "config";
        snprintf(items[n].value, sizeof items[n].value, "%s", openblas_get_config());
        n++;
    }
    if (n < max) {
        items[n].key = "core";
        snprintf(items[n].value, sizeof items[n].value, "%s", openblas_get_corename());
        n++;
    }
    if (n < max) {
        int p = openblas_get_parallel();
        items[n].key = "parallel";
        snprintf(items[n].value, sizeof items[n].value, "%s",
                 p >= 0 && p < 3 ? PARALLEL[p] : "unknown");
        n++;
    }
    if (n < max) {
        items[n].key = "sbgemm";
        snprintf(items[n].value, sizeof items[n].value, "%s",
                 sbgemm() ? "exported (bf16 native)" : "not exported (bf16 widened to fp32)");
        n++;
    }
    return n;
}

const GemmBackend gemm_backend_openblas = {
    .name = "openblas",
    .description = "OpenBLAS cblas_sgemm (row-major); bf16 via cblas_sbgemm when exported, "
                   "else bf16/f16 widened exactly to fp32",
    .supports = openblas_supports,
    .init = openblas_init,
    .free = openblas_free,
    .run = openblas_run,
    .library_info = openblas_library_info,
};

#endif

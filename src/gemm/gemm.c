// gemm.c — the GEMM backend registry, argument validation, gemm_open/run/close, and the
// fp32 helpers shared by backends that compute in fp32 (widening inputs, storing results).
// Not here: any backend's arithmetic (gemm_naive.c, gemm_openblas.c, gemm_onednn.c).
#include "gemm/gemm.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

// To add a backend: write src/gemm_<name>.c exporting `const GemmBackend gemm_backend_<name>`
// (supports() must answer for every dtype pair, run() must never fall back to another
// library), declare it in gemm.h and add one line here. naive stays first: it is the
// correctness baseline. tests/test_gemm.c and the benchmarks iterate this table, so the new
// backend is tested against the fp64 oracle with no test edits. If the library is optional,
// follow gemm_openblas.c: a TRAINBENCH_NO_<NAME> build defines a stub that says
// "not built" and references none of the library's symbols.
static const GemmBackend* const BACKENDS[] = {
    &gemm_backend_naive,
    &gemm_backend_openblas,
    &gemm_backend_onednn,
};

size_t gemm_backend_count(void) { return ARRAY_LEN(BACKENDS); }

const GemmBackend* gemm_backend_at(size_t i) {
    CHECK(i < ARRAY_LEN(BACKENDS), "backend index %zu of %zu", i, ARRAY_LEN(BACKENDS));
    return BACKENDS[i];
}

const GemmBackend* gemm_find(const char* name) {
    if (!name) return NULL;
    for (size_t i = 0; i < ARRAY_LEN(BACKENDS); i++)
        if (strcmp(BACKENDS[i]->name, name) == 0) return BACKENDS[i];
    return NULL;
}

const char* gemm_backend_names_list(void) {
    // built from the table once; the names are compile-time constants so the text never changes
    static char buf[256];
    static bool built = false;
    if (!built) {
        size_t used = 0;
        for (size_t i = 0; i < ARRAY_LEN(BACKENDS); i++) {
            int n = snprintf(buf + used, sizeof buf - used, "%s%s", i ? ", " : "",
                             BACKENDS[i]->name);
            CHECK(n > 0 && (size_t)n < sizeof buf - used, "backend names overflow");
            used += (size_t)n;
        }
        built = true;
    }
    return buf;
}

const char* gemm_support_name(GemmSupport s) {
    switch (s) {
        case GEMM_NATIVE: return "native";
        case GEMM_EMULATED: return "emulated";
        case GEMM_UNSUPPORTED: return "unsupported";
        default: return "?";
    }
}

bool gemm_dtypes_valid(DType ab_dtype, DType c_dtype) {
    if ((int)ab_dtype < 0 || ab_dtype >= DTYPE_COUNT) return false;
    if ((int)c_dtype < 0 || c_dtype >= DTYPE_COUNT) return false;
    if (!dtype_traits(ab_dtype)->is_gemm_input) return false;
    return c_dtype == DTYPE_F32 || c_dtype == ab_dtype;
}

Status gemm_open(Gemm* g, const GemmBackend* backend, int threads) {
    CHECK(g && backend);
    memset(g, 0, sizeof *g);
    if (threads <= 0) threads = omp_get_num_procs();
    if (threads < 1) threads = 1;
    if (backend->init) {
        Status s = backend->init(&g->ctx, threads);
        if (!status_is_ok(s)) return s;
    }
    g->backend = backend;
    g->threads = threads;
    return status_ok();
}

void gemm_close(Gemm* g) {
    if (!g) return;
    if (g->backend && g->backend->free && g->ctx) g->backend->free(g->ctx);
    memset(g, 0, sizeof *g);
}

// "f32, bf16, f16": the GEMM input dtypes, from the DType table
static const char* gemm_input_names(void) {
    static char buf[128];
    if (!buf[0]) {
        size_t used = 0;
        for (int d = 0; d < DTYPE_COUNT; d++) {
            if (!dtype_traits((DType)d)->is_gemm_input) continue;
            int n = snprintf(buf + used, sizeof buf - used, "%s%s", used ? ", " : "",
                             dtype_name((DType)d));
            CHECK(n > 0 && (size_t)n < sizeof buf - used);
            used += (size_t)n;
        }
    }
    return buf;
}

Status gemm_validate(const GemmArgs* a) {
    CHECK(a != NULL);
    if (a->M < 1) return status_make(STATUS_INVALID, "gemm: M must be >= 1 (got %d)", a->M);
    if (a->N < 1) return status_make(STATUS_INVALID, "gemm: N must be >= 1 (got %d)", a->N);
    if (a->K < 1) return status_make(STATUS_INVALID, "gemm: K must be >= 1 (got %d)", a->K);
    if ((int)a->ab_dtype < 0 || a->ab_dtype >= DTYPE_COUNT ||
        !dtype_traits(a->ab_dtype)->is_gemm_input)
        return status_make(STATUS_INVALID, "gemm: ab_dtype must be one of %s (got %s)",
                           gemm_input_names(),
                           ((int)a->ab_dtype >= 0 && a->ab_dtype < DTYPE_COUNT)
                               ? dtype_name(a->ab_dtype) : "out-of-range value");
    if (!gemm_dtypes_valid(a->ab_dtype, a->c_dtype)) {
        const char* got = ((int)a->c_dtype >= 0 && a->c_dtype < DTYPE_COUNT)
                              ? dtype_name(a->c_dtype) : "out-of-range value";
        if (a->ab_dtype == DTYPE_F32)
            return status_make(STATUS_INVALID, "gemm: c_dtype must be f32 for f32 inputs (got %s)",
                               got);
        return status_make(STATUS_INVALID, "gemm: c_dtype must be f32 or %s for %s inputs (got %s)",
                           dtype_name(a->ab_dtype), dtype_name(a->ab_dtype), got);
    }
    if (!a->A) return status_make(STATUS_INVALID, "gemm: A is NULL");
    if (!a->B) return status_make(STATUS_INVALID, "gemm: B is NULL");
    if (!a->C) return status_make(STATUS_INVALID, "gemm: C is NULL");
    int min_lda = a->trans_a ? a->M : a->K;
    int min_ldb = a->trans_b ? a->K : a->N;
    if (a->lda < min_lda)
        return status_make(STATUS_INVALID, "gemm: lda must be >= %s (= %d) when trans_a is %s (got %d)",
                           a->trans_a ? "M" : "K", min_lda, a->trans_a ? "true" : "false", a->lda);
    if (a->ldb < min_ldb)
        return status_make(STATUS_INVALID, "gemm: ldb must be >= %s (= %d) when trans_b is %s (got %d)",
                           a->trans_b ? "K" : "N", min_ldb, a->trans_b ? "true" : "false", a->ldb);
    if (a->ldc < a->N)
        return status_make(STATUS_INVALID, "gemm: ldc must be >= N (= %d) (got %d)", a->N, a->ldc);
    return status_ok();
}

Status gemm_run(Gemm* g, const GemmArgs* args) {
    CHECK(g && g->backend, "gemm_run on a Gemm that is not open");
    Status s = gemm_validate(args);
    if (!status_is_ok(s)) return s;
    char why[256] = "";
    GemmSupport sup = g->backend->supports(args->ab_dtype, args->c_dtype, why, sizeof why);
    if (sup == GEMM_UNSUPPORTED)
        return status_make(STATUS_UNSUPPORTED, "gemm/%s: %s inputs with %s output unsupported: %s",
                           g->backend->name, dtype_name(args->ab_dtype),
                           dtype_name(args->c_dtype), why[0] ? why : "(no reason given)");
    if (args->bias && !g->backend->bias)
        return status_make(STATUS_INVALID, "gemm/%s: no bias argument (preset C and beta 1 instead)",
                           g->backend->name);
    if (args->bias && args->beta != 0.0f)
        return status_make(STATUS_INVALID, "gemm: a bias needs beta 0 (got %g)", (double)args->beta);
    const double t0 = now_seconds();
    s = g->backend->run(g->ctx, args);
    g->busy_s += now_seconds() - t0;
    g->flop += 2.0 * args->M * (double)args->N * (double)args->K;
    return s;
}

void gemm_widen_matrix(float* dst, const void* src, DType dt, int rows, int cols, int ld) {
    CHECK(rows >= 0 && cols >= 0 && ld >= cols);
    const size_t es = dtype_traits(dt)->size;
    for (int r = 0; r < rows; r++)
        dtype_to_f32_row(dst + (size_t)r * (size_t)cols, dt,
                         (const char*)src + (size_t)r * (size_t)ld * es, (size_t)cols);
}

void gemm_store_result(const GemmArgs* a, const float* acc /* (M, N) packed */) {
    const float alpha = a->alpha, beta = a->beta;
    const size_t N = (size_t)a->N;
    if (a->c_dtype == DTYPE_F32) {
        for (int i = 0; i < a->M; i++) {
            float* c = (float*)a->C + (size_t)i * (size_t)a->ldc;  // (N) row i of C
            const float* r = acc + (size_t)i * N;
            if (beta == 0.0f)
                for (size_t j = 0; j < N; j++) c[j] = alpha * r[j];  // C not read
            else
                for (size_t j = 0; j < N; j++) c[j] = alpha * r[j] + beta * c[j];
        }
        return;
    }
    // low-precision C: the fp32 value alpha*acc + beta*C is rounded once, in chunks
    enum { CHUNK = 256 };
    float tmp[CHUNK], old[CHUNK];
    const size_t es = dtype_traits(a->c_dtype)->size;
    for (int i = 0; i < a->M; i++) {
        char* crow = (char*)a->C + (size_t)i * (size_t)a->ldc * es;
        const float* r = acc + (size_t)i * N;
        for (size_t j0 = 0; j0 < N; j0 += CHUNK) {
            size_t n = N - j0 < CHUNK ? N - j0 : CHUNK;
            if (beta == 0.0f) {
                for (size_t j = 0; j < n; j++) tmp[j] = alpha * r[j0 + j];
            } else {
                dtype_to_f32_row(old, a->c_dtype, crow + j0 * es, n);
                for (size_t j = 0; j < n; j++) tmp[j] = alpha * r[j0 + j] + beta * old[j];
            }
            dtype_from_f32_row(crow + j0 * es, a->c_dtype, tmp, n);
        }
    }
}

float* gemm_scratch_grow(float** buf, size_t* cap, size_t n) {
    if (n > *cap) {
        free(*buf);
        size_t bytes;
        CHECK(size_mul_ok(n, sizeof(float), &bytes));
        *buf = xaligned_alloc(bytes);
        *cap = n;
    }
    return *buf;
}

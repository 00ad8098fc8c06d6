// gemm_onednn.c — the oneDNN backend: the matmul primitive through oneDNN's v2.x C API.
// f32 and bf16 are computed by oneDNN itself (bf16 src/weights, bf16 or f32 dst, fp32
// accumulation); f16 only where this oneDNN build implements it on this CPU, which is decided
// by trying to create the primitive descriptor once per dtype pair (answer cached).
// Transposes and leading dimensions are expressed as strides; alpha is the output scale and
// beta a sum post-op added only when beta != 0, so beta == 0 never reads C; GemmArgs.bias is the
// matmul's f32 bias argument. Primitives live in
// a small per-context cache (least recently used evicted), never re-created per call.
// Threads: oneDNN runs on OpenMP; the context's thread count is set around creation and
// execution and the caller's OpenMP setting restored afterwards.
// Built with -DTRAINBENCH_NO_ONEDNN (make WITHOUT=onednn) this file defines only a stub that
// answers "not built" and references no oneDNN symbol.
// Not here: letting oneDNN pick blocked weight layouts (format `any` + reorder) — weights are
// used in place, as the other backends do.
#include "gemm/gemm.h"

#ifdef TRAINBENCH_NO_ONEDNN

#define ONEDNN_NOT_BUILT "not built (make WITHOUT=onednn)"

static GemmSupport onednn_stub_supports(DType ab, DType c, char* why, size_t why_len) {
    if (why) snprintf(why, why_len, "%s", ONEDNN_NOT_BUILT);
    return GEMM_UNSUPPORTED;
}

static Status onednn_stub_init(void** ctx, int threads) {
    *ctx = NULL;
    return status_make(STATUS_UNSUPPORTED, "gemm/onednn: %s", ONEDNN_NOT_BUILT);
}

static Status onednn_stub_run(void* ctx, const GemmArgs* args) {
    return status_make(STATUS_UNSUPPORTED, "gemm/onednn: %s", ONEDNN_NOT_BUILT);
}

bool gemm_onednn_cache_stats(const Gemm* g, GemmOnednnCacheStats* out) { return false; }
const char* gemm_onednn_isa(void) { return NULL; }

static int onednn_stub_library_info(GemmInfoItem* items, int max) {
    if (max < 1) return 0;
    items[0].key = "built";
    snprintf(items[0].value, sizeof items[0].value, "no (make WITHOUT=onednn)");
    return 1;
}

const GemmBackend gemm_backend_onednn = {
    .name = "onednn",
    .description = "oneDNN matmul primitive: " ONEDNN_NOT_BUILT,
    .supports = onednn_stub_supports,
    .init = onednn_stub_init,
    .free = NULL,
    .run = onednn_stub_run,
    .library_info = onednn_stub_library_info,
};

#else  // oneDNN built in

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"

// A training step makes 15 distinct whole-team calls (fp32 and bf16 alike: 9 linear shapes with
// their beta/dtype, the classifier's 6); an evaluation whose last batch is partial adds 5 more,
// and a least-recently-used cache smaller than the cycle evicts on every pass: at 16 entries,
// small with --eval-steps 1 and 12 eval examples re-created 78 primitives in 6 steps (oneDNN's
// own cache made each ~4 us), at 32 none. A lookup compares the keys in turn (a few ns each).
enum { ONEDNN_CACHE_CAP = 32 };

// Everything that defines a matmul primitive here. Compared with memcmp, so always built
// from a zeroed struct (no stray padding bytes); alpha/beta compared by their bits.
typedef struct {
    int M, N, K, lda, ldb, ldc;
    int trans_a, trans_b;
    int ab_dtype, c_dtype;
    uint32_t alpha_bits, beta_bits;
    int has_bias;  // GemmArgs.bias: an f32 (1, N) bias argument
} PrimKey;

typedef struct {
    bool used;
    PrimKey key;
    uint64_t last_use;  // LRU clock
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst;  // memory objects created without buffers; handles set per run
    dnnl_memory_t bias;           // NULL unless key.has_bias
} PrimEntry;

typedef struct {
    int threads;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    PrimEntry cache[ONEDNN_CACHE_CAP];
    uint64_t clock;
    GemmOnednnCacheStats stats;
    void* naive;  // the naive backend's context, for the bf16 products torch does not give oneDNN
} OnednnCtx;

static dnnl_data_type_t dnnl_dt(DType dt) {
    switch (dt) {
        case DTYPE_F32: return dnnl_f32;
        case DTYPE_BF16: return dnnl_bf16;
        case DTYPE_F16: return dnnl_f16;
        default: ABORT("dtype %d is not a GEMM dtype", (int)dt);
    }
}

// unimplemented -> UNSUPPORTED, invalid_arguments -> INVALID; other failures (out_of_memory,
// runtime_error, ...) have no closer Status code and are UNSUPPORTED with oneDNN's name.
static Status dnnl_fail(dnnl_status_t st, const char* what) {
    StatusCode code = st == dnnl_invalid_arguments ? STATUS_INVALID : STATUS_UNSUPPORTED;
    return status_make(code, "gemm/onednn: %s failed: dnnl_%s", what, dnnl_status2str(st));
}

#define DNNL_TRY(call, what)                                  \
    do {                                                      \
        dnnl_status_t st_ = (call);                           \
        if (st_ != dnnl_success) return dnnl_fail(st_, what); \
    } while (0)

// Primitive descriptor for a key. Row-major with strides:
//   src  op(A) (M, K): element (m, k) at m*lda + k, or k*lda + m when trans_a
//   wei  op(B) (K, N): element (k, n) at k*ldb + n, or n*ldb + k when trans_b
//   dst  C     (M, N): element (m, n) at m*ldc + n
// dst = alpha * src x wei (output scale), then dst += beta * dst_old (sum post-op, beta != 0).
static Status make_pd(dnnl_primitive_desc_t* pd, dnnl_engine_t engine, const PrimKey* k,
                      float alpha, float beta) {
    dnnl_memory_desc_t src_md, wei_md, dst_md, bias_md;
    const dnnl_dims_t src_dims = {k->M, k->K}, wei_dims = {k->K, k->N}, dst_dims = {k->M, k->N};
    const dnnl_dims_t bias_dims = {1, k->N}, bias_strides = {k->N, 1};
    const dnnl_dims_t src_strides = {k->trans_a ? 1 : k->lda, k->trans_a ? k->lda : 1};
    const dnnl_dims_t wei_strides = {k->trans_b ? 1 : k->ldb, k->trans_b ? k->ldb : 1};
    const dnnl_dims_t dst_strides = {k->ldc, 1};
    const dnnl_data_type_t abt = dnnl_dt((DType)k->ab_dtype), ct = dnnl_dt((DType)k->c_dtype);
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&src_md, 2, src_dims, abt, src_strides), "src memory desc");
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&wei_md, 2, wei_dims, abt, wei_strides), "weights memory desc");
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&dst_md, 2, dst_dims, ct, dst_strides), "dst memory desc");
    if (k->has_bias)
        DNNL_TRY(dnnl_memory_desc_init_by_strides(&bias_md, 2, bias_dims, dnnl_f32, bias_strides), "bias memory desc");
    dnnl_matmul_desc_t desc;
    DNNL_TRY(dnnl_matmul_desc_init(&desc, &src_md, &wei_md, k->has_bias ? &bias_md : NULL, &dst_md), "matmul desc");

    dnnl_primitive_attr_t attr = NULL;
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "attr create");
    dnnl_status_t st = dnnl_success;
    const char* what = "";
    if (alpha != 1.0f) {
        st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
        what = "output scales (alpha)";
    }
    if (st == dnnl_success && beta != 0.0f) {
        dnnl_post_ops_t po = NULL;
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, beta);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
        if (po) dnnl_post_ops_destroy(po);
        what = "sum post-op (beta)";
    }
    if (st == dnnl_success) {
        st = dnnl_primitive_desc_create(pd, &desc, attr, engine, NULL);
        what = "matmul primitive descriptor";
    }
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return dnnl_fail(st, what);
    return status_ok();
}

// ---- supports(): does this oneDNN build implement the dtype pair on this CPU? Decided once
// per pair by creating a small primitive descriptor, since oneDNN's coverage depends on the
// library version and the CPU ISA, not on anything we can read from a header. ----
typedef struct {
    bool probed;
    GemmSupport support;
    char why[256];
} Probe;
static Probe probes[DTYPE_COUNT][DTYPE_COUNT];
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

static void probe_pair(Probe* p, DType ab, DType c) {
    p->support = GEMM_NATIVE;
    p->why[0] = '\0';
    const dnnl_version_t* v = dnnl_version();
    dnnl_engine_t engine = NULL;
    dnnl_status_t st = dnnl_engine_create(&engine, dnnl_cpu, 0);
    if (st != dnnl_success) {
        p->support = GEMM_UNSUPPORTED;
        snprintf(p->why, sizeof p->why, "oneDNN %d.%d.%d cannot create a CPU engine: dnnl_%s",
                 v->major, v->minor, v->patch, dnnl_status2str(st));
        return;
    }
    PrimKey k;
    memset(&k, 0, sizeof k);
    k.M = k.N = k.K = k.lda = k.ldb = k.ldc = 16;
    k.ab_dtype = (int)ab;
    k.c_dtype = (int)c;
    dnnl_primitive_desc_t pd = NULL;
    Status s = make_pd(&pd, engine, &k, 1.0f, 0.0f);
    if (status_is_ok(s)) {
        dnnl_primitive_desc_destroy(pd);
    } else {
        p->support = GEMM_UNSUPPORTED;
        const CpuFeatures* f = cpu_features();
        const char* isa = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
        if (ab == DTYPE_F16 && !f->avx512_fp16 && !f->amx_fp16)
            snprintf(p->why, sizeof p->why,
                     "oneDNN %d.%d.%d has no f16 matmul for this CPU (no avx512_fp16/AMX-FP16; "
                     "oneDNN ISA %s; primitive descriptor: %.120s)",
                     v->major, v->minor, v->patch, isa, s.msg + strlen("gemm/onednn: "));
        else
            snprintf(p->why, sizeof p->why,
                     "oneDNN %d.%d.%d has no %s->%s matmul for this CPU (oneDNN ISA %s; %.120s)",
                     v->major, v->minor, v->patch, dtype_name(ab), dtype_name(c), isa,
                     s.msg + strlen("gemm/onednn: "));
    }
    dnnl_engine_destroy(engine);
}

static GemmSupport onednn_supports(DType ab, DType c, char* why, size_t why_len) {
    if (why && why_len) why[0] = '\0';
    if (!gemm_dtypes_valid(ab, c)) {
        if (why) snprintf(why, why_len, "not a GEMM dtype combination (inputs f32/bf16/f16, "
                                        "output f32 or the input dtype)");
        return GEMM_UNSUPPORTED;
    }
    pthread_mutex_lock(&probe_lock);
    Probe* p = &probes[ab][c];
    if (!p->probed) {
        probe_pair(p, ab, c);
        p->probed = true;
    }
    GemmSupport s = p->support;
    if (why && p->why[0]) snprintf(why, why_len, "%s", p->why);
    pthread_mutex_unlock(&probe_lock);
    return s;
}

// ---- context and primitive cache ----
static void entry_destroy(PrimEntry* e) {
    if (!e->used) return;
    dnnl_memory_destroy(e->src);
    dnnl_memory_destroy(e->wei);
    dnnl_memory_destroy(e->dst);
    if (e->bias) dnnl_memory_destroy(e->bias);
    dnnl_primitive_destroy(e->prim);
    memset(e, 0, sizeof *e);
}

static Status onednn_init(void** ctx, int threads) {
    OnednnCtx* c = xcalloc(1, sizeof *c);
    c->threads = threads;
    c->stats.capacity = ONEDNN_CACHE_CAP;
    dnnl_status_t st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
    if (st == dnnl_success) st = dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        if (c->engine) dnnl_engine_destroy(c->engine);
        free(c);
        *ctx = NULL;
        return dnnl_fail(st, "engine/stream create");
    }
    *ctx = c;
    return status_ok();
}

static void onednn_free(void* ctx) {
    OnednnCtx* c = ctx;
    if (c->naive) gemm_backend_naive.free(c->naive);
    for (int i = 0; i < ONEDNN_CACHE_CAP; i++) entry_destroy(&c->cache[i]);
    dnnl_stream_destroy(c->stream);
    dnnl_engine_destroy(c->engine);
    free(c);
}

// Creates primitive + memory objects for `k` into `e` (which is empty).
static Status entry_create(OnednnCtx* c, PrimEntry* e, const PrimKey* k, float alpha, float beta) {
    dnnl_primitive_desc_t pd = NULL;
    Status s = make_pd(&pd, c->engine, k, alpha, beta);
    if (!status_is_ok(s)) return s;
    dnnl_status_t st = dnnl_primitive_create(&e->prim, pd);
    const char* what = "primitive create";
    if (st == dnnl_success) {
        what = "memory create";
        st = dnnl_memory_create(&e->src, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                                c->engine, DNNL_MEMORY_NONE);
        if (st == dnnl_success)
            st = dnnl_memory_create(&e->wei, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                                    c->engine, DNNL_MEMORY_NONE);
        if (st == dnnl_success)
            st = dnnl_memory_create(&e->dst, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0),
                                    c->engine, DNNL_MEMORY_NONE);
        if (st == dnnl_success && k->has_bias)
            st = dnnl_memory_create(&e->bias, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1),
                                    c->engine, DNNL_MEMORY_NONE);
    }
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        if (e->src) dnnl_memory_destroy(e->src);
        if (e->wei) dnnl_memory_destroy(e->wei);
        if (e->dst) dnnl_memory_destroy(e->dst);
        if (e->bias) dnnl_memory_destroy(e->bias);
        if (e->prim) dnnl_primitive_destroy(e->prim);
        memset(e, 0, sizeof *e);
        return dnnl_fail(st, what);
    }
    e->key = *k;
    e->used = true;
    return status_ok();
}

static Status cache_get(OnednnCtx* c, const GemmArgs* g, PrimEntry** out) {
    PrimKey k;
    memset(&k, 0, sizeof k);
    k.M = g->M, k.N = g->N, k.K = g->K;
    k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
    k.trans_a = g->trans_a, k.trans_b = g->trans_b;
    k.ab_dtype = (int)g->ab_dtype, k.c_dtype = (int)g->c_dtype;
    k.has_bias = g->bias != NULL;
    // beta == 0 (either sign) means "no sum post-op": one key for both zeros
    const float beta = g->beta == 0.0f ? 0.0f : g->beta;
    memcpy(&k.alpha_bits, &g->alpha, sizeof k.alpha_bits);
    memcpy(&k.beta_bits, &beta, sizeof k.beta_bits);

    PrimEntry* victim = NULL;
    for (int i = 0; i < ONEDNN_CACHE_CAP; i++) {
        PrimEntry* e = &c->cache[i];
        if (e->used && memcmp(&e->key, &k, sizeof k) == 0) {
            e->last_use = ++c->clock;
            c->stats.hits++;
            *out = e;
            return status_ok();
        }
        if (!victim || (!e->used && victim->used) ||
            (e->used == victim->used && e->last_use < victim->last_use))
            victim = e;
    }
    if (victim->used) {
        entry_destroy(victim);
        c->stats.evictions++;
        c->stats.entries--;
    }
    Status s = entry_create(c, victim, &k, g->alpha, beta);
    if (!status_is_ok(s)) return s;
    victim->last_use = ++c->clock;
    c->stats.created++;
    c->stats.entries++;
    *out = victim;
    return status_ok();
}

// torch sends a bf16 matmul of at most 16*16*16 multiply-adds (GemmArgs.torch_macs) not to
// oneDNN but to ATen's CPU BLAS, which sums in other orders (gemm.h): such a product runs here
// through the naive backend, which has those orders, so that this backend gives torch's bits
// for every bf16 product (measured: the linear_low_orders and attention_bf16_orders goldens,
// tests/test_model_golden.c). A bias (beta 0) becomes C preset with its rows and beta 1, the
// same single rounding of acc + bias, where C's dtype holds the bias exactly (the low bias of
// a linear under autocast); otherwise the product stays with oneDNN.
static bool onednn_small_bf16(OnednnCtx* c, const GemmArgs* g, Status* out) {
    if (g->ab_dtype != DTYPE_BF16 || g->torch_macs <= 0 || g->torch_macs > GEMM_BF16_ONEDNN_MIN_MACS) return false;
    GemmArgs a = *g;
    if (g->bias) {
        for (int j = 0; j < g->N; j++)
            if (g->c_dtype == DTYPE_BF16 && bf16_to_f32(bf16_from_f32(g->bias[j])) != g->bias[j]) return false;
        for (int i = 0; i < g->M; i++)
            for (int j = 0; j < g->N; j++) {
                const size_t at = (size_t)i * (size_t)g->ldc + (size_t)j;
                if (g->c_dtype == DTYPE_BF16) ((Bf16*)g->C)[at] = bf16_from_f32(g->bias[j]);
                else ((float*)g->C)[at] = g->bias[j];
            }
        a.bias = NULL;
        a.beta = 1.0f;
    }
    if (!c->naive && !status_is_ok(*out = gemm_backend_naive.init(&c->naive, c->threads))) return true;
    *out = gemm_backend_naive.run(c->naive, &a);
    return true;
}

static Status onednn_run(void* ctx, const GemmArgs* g) {
    OnednnCtx* c = ctx;
    Status small;
    if (onednn_small_bf16(c, g, &small)) return small;
    // oneDNN sizes its thread partition from OpenMP's current setting, at creation and at
    // execution: set ours for both, then give the caller back its own.
    const int caller_threads = omp_get_max_threads();
    omp_set_num_threads(c->threads);
    PrimEntry* e = NULL;
    Status s = cache_get(c, g, &e);
    if (status_is_ok(s)) {
        dnnl_status_t st = dnnl_memory_set_data_handle(e->src, (void*)g->A);
        if (st == dnnl_success) st = dnnl_memory_set_data_handle(e->wei, (void*)g->B);
        if (st == dnnl_success) st = dnnl_memory_set_data_handle(e->dst, g->C);
        if (st == dnnl_success && g->bias) st = dnnl_memory_set_data_handle(e->bias, (void*)g->bias);
        const char* what = "set data handle";
        if (st == dnnl_success) {
            const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, e->src},
                                            {DNNL_ARG_WEIGHTS, e->wei},
                                            {DNNL_ARG_DST, e->dst},
                                            {DNNL_ARG_BIAS, e->bias}};
            st = dnnl_primitive_execute(e->prim, c->stream, g->bias ? 4 : 3, args);
            what = "matmul execute";
            if (st == dnnl_success) {
                st = dnnl_stream_wait(c->stream);
                what = "stream wait";
            }
        }
        if (st != dnnl_success) s = dnnl_fail(st, what);
    }
    omp_set_num_threads(caller_threads);
    return s;
}

static int onednn_library_info(GemmInfoItem* items, int max) {
    const dnnl_version_t* v = dnnl_version();
    int n = 0;
    if (n < max) {
        items[n].key = "version";
        snprintf(items[n].value, sizeof items[n].value, "%d.%d.%d (%.40s)", v->major, v->minor,
                 v->patch, v->hash ? v->hash : "");
        n++;
    }
    if (n < max) {
        items[n].key = "isa";
        snprintf(items[n].value, sizeof items[n].value, "%s",
                 dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
        n++;
    }
    if (n < max) {
        items[n].key = "cpu_runtime";
        snprintf(items[n].value, sizeof items[n].value, "%s", dnnl_runtime2str(v->cpu_runtime));
        n++;
    }
    return n;
}

const char* gemm_onednn_isa(void) { return dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()); }

bool gemm_onednn_cache_stats(const Gemm* g, GemmOnednnCacheStats* out) {
    if (!g || g->backend != &gemm_backend_onednn || !g->ctx) return false;
    *out = ((const OnednnCtx*)g->ctx)->stats;
    return true;
}

const GemmBackend gemm_backend_onednn = {
    .name = "onednn",
    .description = "oneDNN matmul primitive (C API): f32 and bf16 native, f16 where oneDNN "
                   "implements it for this CPU; strided operands, cached primitives",
    .supports = onednn_supports,
    .init = onednn_init,
    .free = onednn_free,
    .run = onednn_run,
    .library_info = onednn_library_info,
    // the matmul's bias argument, added to the accumulated sum before the output conversion:
    // the same bits as C preset to bias rows with a sum post-op (beta 1), measured at every
    // linear shape of the presets in f32 and bf16, and without writing and reading the rows
    .bias = true,
};

#endif

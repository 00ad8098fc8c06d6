// amp.c — the precision-mode registry, rounding points with underflow/overflow counting, and
// the GradScaler (see amp.h). Not here: where the model rounds (model.c, layers.c).
#include "model/amp.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

// To add a precision mode: add one line here (registry name, one-line description, the GEMM
// dtype, whether dynamic loss scaling is on). The dtype must be a GEMM input dtype (dtype.h);
// model.c rounds wherever CPU autocast rounds for any low dtype, so nothing else changes.
// tests/test_amp.c and the model tests iterate this table; a mode whose dtype has no golden
// (reference/golden/model/grads_<mode>.safetensors) FAILS tests/test_model_golden.c.
static const PrecisionMode MODES[] = {
    {"fp32", "fp32 everywhere (the baseline)", DTYPE_F32, false},
    {"bf16", "CPU autocast to bf16 (HF bf16=True, Accelerate mixed_precision=\"bf16\")", DTYPE_BF16, false},
    {"fp16", "CPU autocast to fp16 with dynamic loss scaling (HF fp16=True: GradScaler)", DTYPE_F16, true},
    {"fp16-noscale", "CPU autocast to fp16 without loss scaling (shows gradient underflow)", DTYPE_F16, false},
};

size_t amp_mode_count(void) { return ARRAY_LEN(MODES); }

const PrecisionMode* amp_mode_at(size_t i) {
    CHECK(i < ARRAY_LEN(MODES), "precision mode index %zu of %zu", i, ARRAY_LEN(MODES));
    return &MODES[i];
}

const PrecisionMode* amp_mode_find(const char* name) {
    if (!name) return NULL;
    for (size_t i = 0; i < ARRAY_LEN(MODES); i++)
        if (strcmp(MODES[i].name, name) == 0) return &MODES[i];
    return NULL;
}

const char* amp_mode_names_list(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t used = 0;
        for (size_t i = 0; i < ARRAY_LEN(MODES); i++) {
            int n = snprintf(buf + used, sizeof buf - used, "%s%s", i ? ", " : "", MODES[i].name);
            CHECK(n > 0 && (size_t)n < sizeof buf - used);
            used += (size_t)n;
        }
    }
    return buf;
}

Status amp_check_backend(const PrecisionMode* m, const GemmBackend* backend) {
    CHECK(m && backend);
    // (low -> low): every activation GEMM; (low -> f32): weight gradients (see model.c)
    const DType outs[2] = {m->low, DTYPE_F32};
    for (int i = 0; i < 2; i++) {
        char why[256] = "";
        if (backend->supports(m->low, outs[i], why, sizeof why) == GEMM_UNSUPPORTED)
            return status_make(STATUS_UNSUPPORTED,
                               "precision %s needs %s GEMMs (%s inputs, %s output), which backend %s cannot run: %s "
                               "(no fallback; choose another --backend or --precision)",
                               m->name, dtype_name(m->low), dtype_name(m->low), dtype_name(outs[i]), backend->name,
                               why[0] ? why : "(no reason given)");
    }
    return status_ok();
}

// ---- rounding points ----
void amp_counters_reset(AmpCounters* c) { memset(c, 0, sizeof *c); }

// One chunk: round x (m) in place and count. bf16 rounds inline in the counting loop (one pass,
// vectorized); fp16 through the row converter (a chunk at a time, in cache). The counts are
// integers, so how the loop is split or vectorized changes nothing.
#define AMP_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
enum { AMP_CHUNK = 1024 };

// a finite nonzero value v before rounding (counted), and what it became: +-0 or +-inf. On the
// bits (integer compares only, so the loops vectorize): |v| is finite nonzero when its bits
// without the sign are in (0, 0x7F800000).
__attribute__((always_inline)) static inline void count_one(float v, float r, uint32_t* nv, uint32_t* nu,
                                                            uint32_t* no) {
    uint32_t bv, br;
    memcpy(&bv, &v, sizeof bv);
    memcpy(&br, &r, sizeof br);
    bv &= 0x7FFFFFFFu;
    br &= 0x7FFFFFFFu;
    const uint32_t counted = (uint32_t)(bv != 0u) & (uint32_t)(bv < 0x7F800000u);
    *nv += counted;
    *nu += counted & (uint32_t)(br == 0u);
    *no += counted & (uint32_t)(br == 0x7F800000u);
}

// x = R(src) (src == x: in place), counted into (values, underflow, overflow) when `count`;
// without it the rounding alone, no compares and sums for counts nobody reads
AMP_CLONES static void round_count_chunk(float* x, const float* src, size_t m, DType dt, bool count,
                                         uint64_t* values, uint64_t* underflow, uint64_t* overflow) {
    if (!count) {
        if (dt == DTYPE_BF16) {
#pragma omp simd
            for (size_t i = 0; i < m; i++) x[i] = bf16_round_f32(src[i]);
        } else {
            if (x != src) memcpy(x, src, m * sizeof(float));
            dtype_round_row(x, dt, m);
        }
        return;
    }
    uint32_t nv = 0, nu = 0, no = 0;  // m <= AMP_CHUNK: 32 bits suffice, and vectorize
    if (dt == DTYPE_BF16) {
#pragma omp simd reduction(+ : nv, nu, no)
        for (int i = 0; i < (int)m; i++) {
            const float v = src[i], r = bf16_round_f32(v);
            x[i] = r;
            count_one(v, r, &nv, &nu, &no);
        }
    } else {
        float before[AMP_CHUNK];
        memcpy(before, src, m * sizeof(float));
        if (x != src) memcpy(x, src, m * sizeof(float));
        dtype_round_row(x, dt, m);
#pragma omp simd reduction(+ : nv, nu, no)
        for (int i = 0; i < (int)m; i++) count_one(before[i], x[i], &nv, &nu, &no);
    }
    *values += nv;
    *underflow += nu;
    *overflow += no;
}

void amp_round_count(float* x, size_t n, DType dt, uint64_t* values, uint64_t* underflow, uint64_t* overflow) {
    amp_round_count_from(x, x, n, dt, values, underflow, overflow);
}

void amp_round_count_from(float* x, const float* src, size_t n, DType dt, uint64_t* values, uint64_t* underflow,
                          uint64_t* overflow) {
    if (dt == DTYPE_F32) {
        if (x != src) memcpy(x, src, n * sizeof(float));
        return;
    }
    if (n == 0) return;
    CHECK(dt == DTYPE_BF16 || dt == DTYPE_F16, "rounding to %s", dtype_name(dt));
    const bool count = values != NULL;  // none given: rounding only (the same bits)
    uint64_t nv = 0, nu = 0, no = 0;
    // Large arrays on the team. Callers inside a parallel loop (GELU chunks, attention heads)
    // must not reach the pragma at all: even a parallel region whose `if` is false builds a
    // nested team per call in libgomp (futex wake-ups: measured 286k per 8 small bf16 steps).
    if (n > 65536 && !omp_in_parallel()) {
#pragma omp parallel for schedule(static) reduction(+ : nv, nu, no)
        for (size_t i0 = 0; i0 < n; i0 += AMP_CHUNK)
            round_count_chunk(x + i0, src + i0, n - i0 < AMP_CHUNK ? n - i0 : AMP_CHUNK, dt, count, &nv, &nu, &no);
    } else {
        for (size_t i0 = 0; i0 < n; i0 += AMP_CHUNK)
            round_count_chunk(x + i0, src + i0, n - i0 < AMP_CHUNK ? n - i0 : AMP_CHUNK, dt, count, &nv, &nu, &no);
    }
    if (count) {
        *values += nv;
        *underflow += nu;
        *overflow += no;
    }
}

// d += R(src) for one chunk (m <= AMP_CHUNK), counted as round_count_chunk counts
AMP_CLONES static void round_count_add_chunk(float* restrict d, const float* restrict src, size_t m, DType dt,
                                             uint64_t* values, uint64_t* underflow, uint64_t* overflow) {
    uint32_t nv = 0, nu = 0, no = 0;
    if (dt == DTYPE_BF16) {
#pragma omp simd reduction(+ : nv, nu, no)
        for (int i = 0; i < (int)m; i++) {
            const float v = src[i], r = bf16_round_f32(v);
            d[i] += r;
            count_one(v, r, &nv, &nu, &no);
        }
    } else {
        float r[AMP_CHUNK];
        memcpy(r, src, m * sizeof(float));
        dtype_round_row(r, dt, m);
#pragma omp simd reduction(+ : nv, nu, no)
        for (int i = 0; i < (int)m; i++) {
            d[i] += r[i];
            count_one(src[i], r[i], &nv, &nu, &no);
        }
    }
    *values += nv;
    *underflow += nu;
    *overflow += no;
}

void amp_round_add_count(float* d, const float* src, size_t n, DType dt, uint64_t* values, uint64_t* underflow,
                         uint64_t* overflow) {
    CHECK(dt == DTYPE_BF16 || dt == DTYPE_F16, "rounding to %s", dtype_name(dt));
    uint64_t nv = 0, nu = 0, no = 0;
    for (size_t i0 = 0; i0 < n; i0 += AMP_CHUNK)
        round_count_add_chunk(d + i0, src + i0, n - i0 < AMP_CHUNK ? n - i0 : AMP_CHUNK, dt, &nv, &nu, &no);
    if (values) {
        *values += nv;
        *underflow += nu;
        *overflow += no;
    }
}

void amp_round_param_grad(float* x, size_t n, DType dt, AmpCounters* c) {
    if (c) amp_round_count(x, n, dt, &c->param_values, &c->param_underflow, &c->param_overflow);
    else amp_round_count(x, n, dt, NULL, NULL, NULL);
}

void amp_round_act_grad(float* x, size_t n, DType dt, AmpCounters* c) {
    if (c) amp_round_count(x, n, dt, &c->act_values, &c->act_underflow, &c->act_overflow);
    else amp_round_count(x, n, dt, NULL, NULL, NULL);
}

// ---- GradScaler ----
GradScalerConfig grad_scaler_defaults(void) {
    GradScalerConfig c = {.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                          .growth_interval = 2000, .enabled = true};
    return c;
}

Status grad_scaler_validate(const GradScalerConfig* c) {
    if (!(isfinite(c->init_scale) && c->init_scale > 0) || !isfinite((float)c->init_scale))
        return status_make(STATUS_INVALID, "init_scale must be a finite number > 0 that fits in float32 (got %g)",
                           c->init_scale);
    // torch.full((), init_scale, dtype=float32) rounds a value below half the smallest float32
    // subnormal (2^-150) to 0, and torch then runs on: the scaled loss is 0, the gradients 0, and
    // unscale_ multiplies them by 1/0 after its finiteness check, so the first step updates every
    // parameter with NaN and every later step is skipped (measured with validate_model.py)
    if ((float)c->init_scale == 0.0f)
        return status_make(STATUS_INVALID, "init_scale must be a finite number > 0 that fits in float32 (got %g, "
                           "which rounds to 0 in float32; the smallest positive float32 is %g)",
                           c->init_scale, 0x1p-149);
    if (!(isfinite(c->growth_factor) && c->growth_factor > 1.0))
        return status_make(STATUS_INVALID, "growth_factor must be a finite number > 1 (got %g)", c->growth_factor);
    if (!(c->backoff_factor > 0.0 && c->backoff_factor < 1.0))
        return status_make(STATUS_INVALID, "backoff_factor must be in (0, 1) (got %g)", c->backoff_factor);
    if (c->growth_interval < 1 || c->growth_interval > INT32_MAX)
        return status_make(STATUS_INVALID, "growth_interval must be an integer in [1, %d] (got %lld)", INT32_MAX,
                           (long long)c->growth_interval);
    return status_ok();
}

void grad_scaler_init(GradScaler* s, const GradScalerConfig* cfg) {
    Status st = grad_scaler_validate(cfg);
    CHECK(status_is_ok(st), "%s", st.msg);
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    // torch.full((), init_scale, dtype=torch.float32)
    s->scale = cfg->enabled ? (float)cfg->init_scale : 1.0f;
    s->growth_tracker = 0;
}

float grad_scaler_loss_scale(const GradScaler* s) { return s->cfg.enabled ? s->scale : 1.0f; }

float grad_scaler_inv_scale(const GradScaler* s) {
    if (!s->cfg.enabled) return 1.0f;
    return (float)(1.0 / (double)s->scale);  // self._scale.double().reciprocal().float()
}

bool grad_scaler_unscale(const GradScaler* s, float* g, size_t n) {
    if (!s->cfg.enabled) return false;
    const float inv = grad_scaler_inv_scale(s);
    bool found = false;
    // _amp_foreach_non_finite_check_and_unscale_cpu_kernel: check the value, then multiply
    // (unless inv_scale == 1); every gradient is unscaled even after an inf was found.
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        if (!isfinite(v)) found = true;
        if (inv != 1.0f) g[i] = v * inv;
    }
    return found;
}

void grad_scaler_update(GradScaler* s, bool found_inf) {
    if (!s->cfg.enabled) return;
    // reference: AmpGradScalerKernels.cpp _amp_update_scale_cpu_kernel (float * double
    // product, stored as float)
    if (found_inf) {
        s->scale = (float)((double)s->scale * s->cfg.backoff_factor);
        s->growth_tracker = 0;
        s->n_skipped++;
    } else {
        int64_t successful = (int64_t)s->growth_tracker + 1;
        if (successful == s->cfg.growth_interval) {
            float grown = (float)((double)s->scale * s->cfg.growth_factor);
            if (isfinite(grown)) s->scale = grown;  // do not grow past fp32 bounds to inf
            s->growth_tracker = 0;
        } else {
            s->growth_tracker = (int32_t)successful;
        }
    }
}

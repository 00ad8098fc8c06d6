/* adafactor_plain.c — transformers' Adafactor (transformers.optimization.Adafactor, the
 * "adafactor" golden set) as a trainbench plugin in plain C99, written from
 * reference/OPTIM_SEMANTICS.md with no trainbench code but the public header. It is NOT
 * bit-exact: it sums in its own order (not torch's 8-lane / cascade order), so it is the
 * "correct implementation with other roundings" that `trainbench conform` must judge
 * CONFORMS (the rounding-order band of reference/CONFORMANCE.md), never PASS by luck of the
 * tolerance (the Adafactor tolerance is bit-exact) and never FAIL.
 *
 * Test builds (Makefile: $(BUILD)/plugins/adafactor_<x>.so, -DVARIANT=VARIANT_<X>):
 *   correct, other rounding orders (must CONFORM):
 *     SEQ       sequential float32 sums, mul+add everywhere, clipping as a division,
 *               rsqrt written g / sqrt(v), b2t from powf (float32)
 *     F64       float64 accumulation of every mean and RMS, g*g + eps1 as one fma, the
 *               moments with fma, clipping as a multiplication by the reciprocal,
 *               relative-step lr and lr_t in float64, rsqrt of row*col in one sqrt
 *     PAIRWISE  pairwise float32 sums, relative-step lr in float32, decay as p*(1 - wd*lr)
 *   known mistakes (must FAIL, the diagnosis naming them):
 *     NO_CLIP          update clipping missing
 *     NO_SCALE         scale_parameter ignored (lr not multiplied by max(eps2, RMS(p)))
 *     WARMUP_IGNORED   warmup_init ignored (min step 1e-2 instead of 1e-6*t)
 *     DECAY_FIXED      decay_rate ignored: beta2t = 1 - t^-0.8 whatever decay_rate says
 *     EPS1_OUTSIDE     eps1 added to the second moment (rsqrt(v + eps1)) instead of to g^2
 *     EPS1_SQUARED     (g + eps1)^2 instead of g^2 + eps1 (eps1 = 1e-30 underflows: eps1 missing)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "validate/trainbench_plugin.h"

#define VARIANT_SEQ 1
#define VARIANT_F64 2
#define VARIANT_PAIRWISE 3
#define VARIANT_NO_CLIP 4
#define VARIANT_NO_SCALE 5
#define VARIANT_WARMUP_IGNORED 6
#define VARIANT_DECAY_FIXED 7
#define VARIANT_EPS1_OUTSIDE 8
#define VARIANT_EPS1_SQUARED 9
#ifndef VARIANT
#define VARIANT VARIANT_SEQ
#endif
#if VARIANT < VARIANT_SEQ || VARIANT > VARIANT_EPS1_SQUARED /* an undefined name reads as 0 */
#error "unknown VARIANT"
#endif
/* the mistakes are written in the SEQ style */
#define STYLE_F64 (VARIANT == VARIANT_F64)
#define STYLE_PAIRWISE (VARIANT == VARIANT_PAIRWISE)

typedef struct {
    TrainbenchHparams hp;
    int32_t ndim;
    int64_t dims[TRAINBENCH_PLUGIN_MAX_DIMS];
    size_t numel, batch, R, C;  /* factored: (batch, R, C) over the last two dims */
    int factored;
    int64_t t;      /* the library's Python int */
    float rms;      /* RMS of the param before the last step (0-d state) */
    float *row, *col, *v, *m, *U;
} Af;

/* ---- sums in this plugin's own orders ---- */
#if STYLE_PAIRWISE
static float sum_pairwise(const float* x, size_t n, size_t stride) {
    if (n == 0) return 0.0f;
    if (n == 1) return x[0];
    const size_t h = n / 2;
    return sum_pairwise(x, h, stride) + sum_pairwise(x + h * stride, n - h, stride);
}
#endif

/* sum of x[k*stride], k < n */
static float sum_f(const float* x, size_t n, size_t stride) {
#if STYLE_F64
    double s = 0;
    for (size_t k = 0; k < n; k++) s += x[k * stride];
    return (float)s;
#elif STYLE_PAIRWISE
    return sum_pairwise(x, n, stride);
#else
    float s = 0.0f;
    for (size_t k = 0; k < n; k++) s += x[k * stride];
    return s;
#endif
}

/* _rms(x) = norm2(x) / sqrt(numel) */
static float rms_f(const float* x, size_t n) {
#if STYLE_F64
    double s = 0;
    for (size_t k = 0; k < n; k++) s += (double)x[k] * x[k];
    return (float)(sqrt(s) / sqrt((double)n));
#else
    float* sq = malloc((n ? n : 1) * sizeof(float));
    for (size_t k = 0; k < n; k++) sq[k] = x[k] * x[k];
    const float s = sum_f(sq, n, 1);
    free(sq);
    return sqrtf(s) / sqrtf((float)n);
#endif
}

static void* af_create(int32_t ndim, const int64_t* dims, const TrainbenchHparams* hp, const char** error) {
    if (ndim < 0 || ndim > TRAINBENCH_PLUGIN_MAX_DIMS) {
        *error = "ndim must be 0..4";
        return NULL;
    }
    Af* s = calloc(1, sizeof *s);
    s->hp = *hp;
    s->ndim = ndim;
    s->numel = 1;
    for (int32_t d = 0; d < ndim; d++) {
        s->dims[d] = dims[d];
        s->numel *= (size_t)dims[d];
    }
    s->factored = ndim >= 2;
    if (s->factored) {
        s->R = (size_t)dims[ndim - 2];
        s->C = (size_t)dims[ndim - 1];
        s->batch = s->R * s->C > 0 ? s->numel / (s->R * s->C) : 0;
        s->row = calloc(s->batch * s->R + 1, sizeof(float));
        s->col = calloc(s->batch * s->C + 1, sizeof(float));
    } else {
        s->v = calloc(s->numel + 1, sizeof(float));
    }
    if (hp->has_beta1) s->m = calloc(s->numel + 1, sizeof(float));
    s->U = calloc(s->numel + 1, sizeof(float));
    return s;
}

static const char* af_step(void* state, float* p, const float* g, int64_t numel) {
    Af* s = state;
    const TrainbenchHparams* hp = &s->hp;
    if ((size_t)numel != s->numel) return "numel does not match the shape given to create";
    const size_t n = s->numel;
    s->t++;
    const double t = (double)s->t;
    s->rms = rms_f(p, n);
    /* lr_t = rel * (scale_parameter ? max(eps2, RMS) : 1) */
    int warmup = hp->warmup_init;
#if VARIANT == VARIANT_WARMUP_IGNORED
    warmup = 0;
#endif
    int scale = hp->scale_parameter;
#if VARIANT == VARIANT_NO_SCALE
    scale = 0;
#endif
#if STYLE_PAIRWISE
    float rel = (float)hp->lr;
    if (hp->relative_step) rel = fminf(warmup ? 1e-6f * (float)t : 1e-2f, 1.0f / sqrtf((float)t));
    const float lr_t = rel * (scale ? fmaxf((float)hp->eps2, s->rms) : 1.0f);
#else
    double rel = hp->lr;
    if (hp->relative_step) rel = fmin(warmup ? 1e-6 * t : 1e-2, 1.0 / sqrt(t));
    const float lr_t = (float)(rel * (scale ? fmax(hp->eps2, (double)s->rms) : 1.0));
#endif
    double decay_rate = hp->decay_rate;
#if VARIANT == VARIANT_DECAY_FIXED
    decay_rate = -0.8;
#endif
#if VARIANT == VARIANT_SEQ
    const float b2t = 1.0f - powf((float)t, (float)decay_rate);
    const float keep = b2t, add = 1.0f - b2t;
#else
    const double b2t = 1.0 - pow(t, decay_rate);
    const float keep = (float)b2t, add = (float)(1.0 - b2t);
#endif
    float eps1 = (float)hp->eps1;
#if VARIANT == VARIANT_EPS1_OUTSIDE
    const float eps1_after = eps1;
    eps1 = 0.0f;
#endif
    float* U = s->U;
    for (size_t i = 0; i < n; i++) {
#if STYLE_F64
        U[i] = fmaf(g[i], g[i], eps1);
#elif VARIANT == VARIANT_EPS1_SQUARED
        U[i] = (g[i] + eps1) * (g[i] + eps1);
#else
        U[i] = g[i] * g[i] + eps1;
#endif
    }
    if (s->factored) {
        const size_t R = s->R, C = s->C;
        for (size_t b = 0; b < s->batch; b++) {
            float* u = U + b * R * C;
            float* row = s->row + b * R;
            float* col = s->col + b * C;
            for (size_t i = 0; i < R; i++) {
                const float mean = sum_f(u + i * C, C, 1) / (float)C;
#if STYLE_F64
                row[i] = fmaf(add, mean, row[i] * keep);
#else
                row[i] = keep * row[i] + add * mean;
#endif
            }
            for (size_t j = 0; j < C; j++) {
                const float mean = sum_f(u + j, R, C) / (float)R;
#if STYLE_F64
                col[j] = fmaf(add, mean, col[j] * keep);
#else
                col[j] = keep * col[j] + add * mean;
#endif
            }
            const float rm = sum_f(row, R, 1) / (float)R;
            const float* gb = g + b * R * C;
            for (size_t i = 0; i < R; i++)
                for (size_t j = 0; j < C; j++) {
                    float rr = row[i], cc = col[j];
#if VARIANT == VARIANT_EPS1_OUTSIDE
                    rr += eps1_after;
                    cc += eps1_after;
#endif
#if STYLE_F64
                    u[i * C + j] = gb[i * C + j] / sqrtf((rr / rm) * cc);
#else
                    u[i * C + j] = gb[i * C + j] / sqrtf(rr / rm) / sqrtf(cc);
#endif
                }
        }
    } else {
        for (size_t i = 0; i < n; i++) {
#if STYLE_F64
            s->v[i] = fmaf(add, U[i], s->v[i] * keep);
#else
            s->v[i] = keep * s->v[i] + add * U[i];
#endif
            float vv = s->v[i];
#if VARIANT == VARIANT_EPS1_OUTSIDE
            vv += eps1_after;
#endif
#if STYLE_F64
            U[i] = g[i] * (1.0f / sqrtf(vv));
#else
            U[i] = g[i] / sqrtf(vv);
#endif
        }
    }
    float clip = rms_f(U, n) / (float)hp->clip_threshold;
    if (clip < 1.0f) clip = 1.0f;
#if VARIANT == VARIANT_NO_CLIP
    clip = 1.0f;
#endif
#if STYLE_F64
    const float inv_clip = 1.0f / clip;
#endif
    const float wd_lr = (float)hp->weight_decay * lr_t;
    const float b1 = (float)hp->beta1, w1 = (float)(1.0 - hp->beta1);
    for (size_t i = 0; i < n; i++) {
#if STYLE_F64
        float upd = (U[i] * inv_clip) * lr_t;
#else
        float upd = (U[i] / clip) * lr_t;
#endif
        if (s->m) {
#if STYLE_F64
            s->m[i] = fmaf(w1, upd, b1 * s->m[i]);
#else
            s->m[i] = b1 * s->m[i] + w1 * upd;
#endif
            upd = s->m[i];
        }
        float pi = p[i];
        if (hp->weight_decay != 0) {
#if STYLE_PAIRWISE
            pi = pi * (1.0f - wd_lr);
#else
            pi = pi - wd_lr * pi;
#endif
        }
        p[i] = pi - upd;
    }
    return NULL;
}

static int32_t af_list_state(void* state, TrainbenchTensor* out, int32_t max) {
    Af* s = state;
    TrainbenchTensor all[5];
    int32_t k = 0;
    all[k++] = (TrainbenchTensor){"step", TRAINBENCH_DTYPE_I64, 0, {0}, &s->t};
    all[k++] = (TrainbenchTensor){"RMS", TRAINBENCH_DTYPE_F32, 0, {0}, &s->rms};
    if (s->factored) {
        TrainbenchTensor r = {"exp_avg_sq_row", TRAINBENCH_DTYPE_F32, s->ndim - 1, {0}, s->row};
        TrainbenchTensor c = {"exp_avg_sq_col", TRAINBENCH_DTYPE_F32, s->ndim - 1, {0}, s->col};
        for (int32_t d = 0; d < s->ndim - 1; d++) r.dims[d] = s->dims[d];
        for (int32_t d = 0; d < s->ndim - 2; d++) c.dims[d] = s->dims[d];
        c.dims[s->ndim - 2] = s->dims[s->ndim - 1];
        all[k++] = r;
        all[k++] = c;
    } else {
        TrainbenchTensor v = {"exp_avg_sq", TRAINBENCH_DTYPE_F32, s->ndim, {0}, s->v};
        for (int32_t d = 0; d < s->ndim; d++) v.dims[d] = s->dims[d];
        all[k++] = v;
    }
    if (s->m) {
        TrainbenchTensor m = {"exp_avg", TRAINBENCH_DTYPE_F32, s->ndim, {0}, s->m};
        for (int32_t d = 0; d < s->ndim; d++) m.dims[d] = s->dims[d];
        all[k++] = m;
    }
    for (int32_t i = 0; i < k && i < max; i++) out[i] = all[i];
    return k;
}

static void af_destroy(void* state) {
    Af* s = state;
    free(s->row);
    free(s->col);
    free(s->v);
    free(s->m);
    free(s->U);
    free(s);
}

static const TrainbenchOptimizerPlugin PLUGIN = {
    TRAINBENCH_PLUGIN_ABI_VERSION, "adafactor_plain", "adafactor", af_create, af_step, af_list_state, af_destroy,
};

const TrainbenchOptimizerPlugin* trainbench_optimizer_plugin(void) { return &PLUGIN; }

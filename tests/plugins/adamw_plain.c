/* adamw_plain.c — a complete trainbench optimizer plugin in plain C99: torch.optim.AdamW
 * (single-tensor path), written from SPEC.md 3.1 and reference/OPTIM_SEMANTICS.md with no
 * trainbench code but the public header. Copy it to start your own plugin; build and run:
 *
 *     cc -std=c99 -O2 -fPIC -shared -ffp-contract=off -Isrc tests/plugins/adamw_plain.c \
 *        -o adamw_plain.so -lm
 *     trainbench conform --plugin ./adamw_plain.so
 *
 * It passes every adamw_torch golden: exp_avg and exp_avg_sq bit for bit, params within the
 * tolerance that allows for torch's MKL sqrt (this file uses the correctly rounded sqrtf).
 *
 * Test builds only: -DMISTAKE=MISTAKE_<one of the names below> makes the deliberately wrong plugins of
 * tests/test_plugin.c (each must FAIL, and the diagnosis must name its mistake) and the ones
 * that misbehave (crash, hang, NaN, refuse, wrong ABI version). With no MISTAKE it is correct.
 */
#include <math.h>
#include <stdlib.h>

#include "validate/trainbench_plugin.h"

#define MISTAKE_PLAIN 1               /* correct */
#define MISTAKE_EPS_INSIDE_SQRT 2     /* denom = sqrt(v_hat + eps) */
#define MISTAKE_NO_BIAS_CORRECTION 3  /* bc1 = bc2 = 1 */
#define MISTAKE_DECAY_AFTER_UPDATE 4  /* p <- (p + update) * (1 - lr*wd) */
#define MISTAKE_LERP_WEIGHT 5         /* exp_avg.lerp_(grad, beta1) */
#define MISTAKE_CRASH 6               /* segfault in step on the 255-element case */
#define MISTAKE_NAN 7                 /* writes NaN into every parameter */
#define MISTAKE_HANG 8                /* never returns from step on the 1-element case */
#define MISTAKE_REFUSE_ND 9           /* create refuses tensors that are not 1-D */
#define MISTAKE_ABI 10                /* claims another ABI version */
/* correct AdamW written in other roundings (must CONFORM: rounding-order band) */
#define MISTAKE_TEXTBOOK 11           /* m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g*g (mul+add), p -= lr*m_hat/(sqrt(v_hat)+eps) */
#define MISTAKE_REORDERED 12          /* lerp's other formula for every weight, v + (g*g)*(1-b2), (m*-step)/denom */
/* more mistakes */
#define MISTAKE_L2_MULADD 13          /* g <- g + wd*p (mul then add), no decoupled decay */
#define MISTAKE_L2_FMA 14             /* g <- fma(wd, p, g), no decoupled decay */
#define MISTAKE_BC_F32 15             /* bias corrections 1 - b^t computed in float32 */
#define MISTAKE_ABI1 16               /* correct, built as for ABI version 1 (still loaded) */
#ifndef MISTAKE
#define MISTAKE MISTAKE_PLAIN
#endif
#if MISTAKE < MISTAKE_PLAIN || MISTAKE > MISTAKE_ABI1 /* an undefined name reads as 0 */
#error "unknown MISTAKE"
#endif

typedef struct {
    double lr, beta1, beta2, eps, wd;
    int64_t numel;
    int32_t ndim;
    int64_t dims[TRAINBENCH_PLUGIN_MAX_DIMS];
    int64_t t;          /* steps taken */
    float step;         /* torch keeps `step` as a 0-d float32 tensor */
    float* exp_avg;     /* (numel) */
    float* exp_avg_sq;  /* (numel) */
} AdamW;

static void* adamw_create(int32_t ndim, const int64_t* dims, const TrainbenchHparams* hp, const char** error) {
#if MISTAKE == MISTAKE_REFUSE_ND
    if (ndim != 1) {
        *error = "this plugin only handles 1-D tensors";
        return NULL;
    }
#endif
    AdamW* s = calloc(1, sizeof *s);
    if (!s) {
        *error = "out of memory";
        return NULL;
    }
    s->lr = hp->lr;
    s->beta1 = hp->beta1;
    s->beta2 = hp->beta2;
    s->eps = hp->eps;
    s->wd = hp->weight_decay;
    s->ndim = ndim;
    s->numel = 1;
    for (int32_t d = 0; d < ndim; d++) {
        s->dims[d] = dims[d];
        s->numel *= dims[d];
    }
    s->exp_avg = calloc((size_t)s->numel + 1, sizeof(float));  /* zeros, as torch initialises */
    s->exp_avg_sq = calloc((size_t)s->numel + 1, sizeof(float));
    if (!s->exp_avg || !s->exp_avg_sq) {
        free(s->exp_avg);
        free(s->exp_avg_sq);
        free(s);
        *error = "out of memory";
        return NULL;
    }
    return s;
}

/* torch's lerp_ on CPU: weight < 0.5 -> fma(w, end - self, self), else fma(w - 1, end - self, end) */
static inline float lerp(float self, float end, float w) {
    return (w < 0.5f && w > -0.5f) ? fmaf(w, end - self, self) : fmaf(w - 1.0f, end - self, end);
}

static const char* adamw_step(void* state, float* p, const float* g, int64_t numel) {
    AdamW* s = state;
    if (numel != s->numel) return "numel does not match the shape given to create";
#if MISTAKE == MISTAKE_CRASH
    if (numel == 255) {
        int* volatile nowhere = (int*)(uintptr_t)16;  /* not NULL: UBSan would report a NULL store and exit 1 */
        *nowhere = 1;
    }
#endif
#if MISTAKE == MISTAKE_HANG
    if (numel == 1)
        for (volatile int spin = 1; spin;) {}
#endif
    s->t++;
    s->step = (float)s->t;
    /* Python floats are doubles: bias corrections and step size in double, then each
     * constant rounded to float32 where torch hands it to a float32 kernel. */
    const double t = (double)s->t;
    double bc1 = 1.0 - pow(s->beta1, t), bc2 = 1.0 - pow(s->beta2, t);
#if MISTAKE == MISTAKE_NO_BIAS_CORRECTION
    bc1 = bc2 = 1.0;
#elif MISTAKE == MISTAKE_BC_F32
    bc1 = 1.0f - powf((float)s->beta1, (float)t);
    bc2 = 1.0f - powf((float)s->beta2, (float)t);
#endif
#if MISTAKE == MISTAKE_L2_MULADD || MISTAKE == MISTAKE_L2_FMA
    const float decay = 1.0f, wd = (float)s->wd;               /* L2: no decoupled decay */
#else
    const float decay = (float)(1.0 - s->lr * s->wd);     /* param.mul_(1 - lr*wd) */
#endif
#if MISTAKE == MISTAKE_LERP_WEIGHT
    const float lerp_w = (float)s->beta1;
#else
    const float lerp_w = (float)(1.0 - s->beta1);         /* exp_avg.lerp_(grad, 1 - beta1) */
#endif
    const float b2 = (float)s->beta2, w2 = (float)(1.0 - s->beta2);
    const float eps = (float)s->eps;
#if MISTAKE != MISTAKE_EPS_INSIDE_SQRT
    const float bc2_sqrt = (float)sqrt(bc2);                  /* bias_correction2 ** 0.5 */
#endif
    const float neg_step_size = (float)(-s->lr / bc1);
    for (int64_t i = 0; i < numel; i++) {
        float pi = p[i];
#if MISTAKE != MISTAKE_DECAY_AFTER_UPDATE
        pi = pi * decay;                                         /* decoupled decay, first */
#endif
        float gi = g[i];
#if MISTAKE == MISTAKE_L2_MULADD
        gi = gi + wd * pi;                                       /* grad + wd*param, two roundings */
#elif MISTAKE == MISTAKE_L2_FMA
        gi = fmaf(wd, pi, gi);
#endif
#if MISTAKE == MISTAKE_TEXTBOOK
        const float m = (float)s->beta1 * s->exp_avg[i] + lerp_w * gi;
        const float v = b2 * s->exp_avg_sq[i] + w2 * (gi * gi);
        const float m_hat = m / (float)bc1, v_hat = v / (float)bc2;
        s->exp_avg[i] = m;
        s->exp_avg_sq[i] = v;
        p[i] = pi - (float)s->lr * m_hat / (sqrtf(v_hat) + eps);
        continue;
#elif MISTAKE == MISTAKE_REORDERED
        const float m = fmaf(lerp_w - 1.0f, gi - s->exp_avg[i], gi);  /* g - (g - m)*(1 - w) */
        const float v = fmaf(gi * gi, w2, s->exp_avg_sq[i] * b2);
#else
        const float m = lerp(s->exp_avg[i], gi, lerp_w);
        const float v = fmaf(w2 * gi, gi, s->exp_avg_sq[i] * b2);  /* mul_(b2).addcmul_(g, g, 1-b2) */
#endif
#if MISTAKE == MISTAKE_EPS_INSIDE_SQRT
        const float denom = sqrtf(v / (float)bc2 + eps);            /* the mistake */
#else
        const float denom = sqrtf(v) / bc2_sqrt + eps;           /* (sqrt(v) / sqrt(bc2)).add_(eps) */
#endif
        s->exp_avg[i] = m;
        s->exp_avg_sq[i] = v;
#if MISTAKE == MISTAKE_REORDERED
        pi = pi + (m * neg_step_size) / denom;
#else
        pi = pi + (neg_step_size * m) / denom;                   /* addcdiv_(m, denom, -step_size) */
#endif
#if MISTAKE == MISTAKE_DECAY_AFTER_UPDATE
        pi = pi * decay;
#endif
#if MISTAKE == MISTAKE_NAN
        pi = NAN;
#endif
        p[i] = pi;
    }
    return NULL;
}

static int32_t adamw_list_state(void* state, TrainbenchTensor* out, int32_t max) {
    AdamW* s = state;
    const TrainbenchTensor all[3] = {
        {"step", TRAINBENCH_DTYPE_F32, 0, {0}, &s->step},
        {"exp_avg", TRAINBENCH_DTYPE_F32, s->ndim, {s->dims[0], s->dims[1], s->dims[2], s->dims[3]}, s->exp_avg},
        {"exp_avg_sq", TRAINBENCH_DTYPE_F32, s->ndim, {s->dims[0], s->dims[1], s->dims[2], s->dims[3]}, s->exp_avg_sq},
    };
    for (int32_t i = 0; i < 3 && i < max; i++) out[i] = all[i];
    return 3;
}

static void adamw_destroy(void* state) {
    AdamW* s = state;
    free(s->exp_avg);
    free(s->exp_avg_sq);
    free(s);
}

static const TrainbenchOptimizerPlugin PLUGIN = {
#if MISTAKE == MISTAKE_ABI
    99,
#elif MISTAKE == MISTAKE_ABI1
    1,
#else
    TRAINBENCH_PLUGIN_ABI_VERSION,
#endif
    "adamw_plain", "adamw_torch", adamw_create, adamw_step, adamw_list_state, adamw_destroy,
};

const TrainbenchOptimizerPlugin* trainbench_optimizer_plugin(void) { return &PLUGIN; }

/* adafactor_torch_plain.c — torch.optim.Adafactor (the "adafactor_torch" golden set) as a
 * trainbench plugin in plain C99, written from reference/OPTIM_SEMANTICS.md with no
 * trainbench code but the public header. Not bit-exact: it reduces in its own order (not
 * torch's norm kernels), so `trainbench conform` must judge it CONFORMS (the rounding-order
 * band of reference/CONFORMANCE.md), never FAIL.
 *
 * Test builds (Makefile: $(BUILD)/plugins/aftorch_<x>.so, -DVARIANT=VARIANT_<X>):
 *   correct, other rounding orders (must CONFORM):
 *     LERP_OTHER  lerp's other formula for every weight (end - (end - self)*(1 - w), mul+add),
 *                 row/col variance as norm^2 from a sequential float32 sum of squares
 *     SUM_F64     row/col variance as sum(g^2)/n accumulated in float64 (no sqrt/square),
 *                 lerp written (1 - w)*self + w*end, the clipping denominator in float32
 *     PAIRWISE    pairwise float32 sums, torch's lerp (fma, two branches), alpha in float32,
 *                 decay written p - (lr*wd)*p
 *   known mistakes (must FAIL, the diagnosis naming them):
 *     NO_CLIP      update clipping missing (d = inf)
 *     DECAY_FIXED  beta2_decay ignored: w = t^-0.8 whatever beta2_decay says
 *     NO_WD        weight decay missing
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "validate/trainbench_plugin.h"

#define VARIANT_LERP_OTHER 1
#define VARIANT_SUM_F64 2
#define VARIANT_PAIRWISE 3
#define VARIANT_NO_CLIP 4
#define VARIANT_DECAY_FIXED 5
#define VARIANT_NO_WD 6
#ifndef VARIANT
#define VARIANT VARIANT_LERP_OTHER
#endif
#if VARIANT < VARIANT_LERP_OTHER || VARIANT > VARIANT_NO_WD /* an undefined name reads as 0 */
#error "unknown VARIANT"
#endif
/* the mistakes are written in the LERP_OTHER style */
#define STYLE_F64 (VARIANT == VARIANT_SUM_F64)
#define STYLE_PAIRWISE (VARIANT == VARIANT_PAIRWISE)

typedef struct {
    TrainbenchHparams hp;
    int32_t ndim;
    int64_t dims[TRAINBENCH_PLUGIN_MAX_DIMS];
    size_t numel, batch, R, C;
    int factored;
    float step;  /* torch keeps a 0-d float32 tensor */
    float *row, *col, *var, *U;
} Aft;

#if STYLE_PAIRWISE
static float sum_pairwise(const float* x, size_t n, size_t stride) {
    if (n == 0) return 0.0f;
    if (n == 1) return x[0];
    const size_t h = n / 2;
    return sum_pairwise(x, h, stride) + sum_pairwise(x + h * stride, n - h, stride);
}
#endif

/* mean of g^2 over x[k*stride], k < n: what vector_norm(g)^2 / n computes */
static float mean_sq(const float* x, size_t n, size_t stride) {
#if STYLE_F64
    double s = 0;
    for (size_t k = 0; k < n; k++) s += (double)x[k * stride] * x[k * stride];
    return (float)(s / (double)n);
#else
    float* sq = malloc((n ? n : 1) * sizeof(float));
    for (size_t k = 0; k < n; k++) sq[k] = x[k * stride] * x[k * stride];
#if STYLE_PAIRWISE
    const float s = sum_pairwise(sq, n, 1);
#else
    float s = 0.0f;
    for (size_t k = 0; k < n; k++) s += sq[k];
#endif
    free(sq);
    const float norm = sqrtf(s);
    return (norm * norm) / (float)n;
#endif
}

/* norm2 of x (n elements) in this plugin's order */
static float norm_f(const float* x, size_t n) {
    return sqrtf(mean_sq(x, n, 1) * (float)n);
}

static inline float lerp_f(float self, float end, float w) {
#if STYLE_F64
    return (1.0f - w) * self + w * end;
#elif STYLE_PAIRWISE
    return (w < 0.5f && w > -0.5f) ? fmaf(w, end - self, self) : fmaf(w - 1.0f, end - self, end);
#else
    return end - (end - self) * (1.0f - w);
#endif
}

static void* aft_create(int32_t ndim, const int64_t* dims, const TrainbenchHparams* hp, const char** error) {
    if (ndim < 0 || ndim > TRAINBENCH_PLUGIN_MAX_DIMS) {
        *error = "ndim must be 0..4";
        return NULL;
    }
    Aft* s = calloc(1, sizeof *s);
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
        s->var = calloc(s->numel + 1, sizeof(float));
    }
    s->U = calloc(s->numel + 1, sizeof(float));
    return s;
}

static const char* aft_step(void* state, float* p, const float* g, int64_t numel) {
    Aft* s = state;
    const TrainbenchHparams* hp = &s->hp;
    if ((size_t)numel != s->numel) return "numel does not match the shape given to create";
    const size_t n = s->numel;
    s->step += 1.0f;
    const double t = (double)s->step;
    const double eps1 = hp->eps1 < 0 ? (double)0x1p-23f : hp->eps1;
    double decay = hp->decay_rate;
#if VARIANT == VARIANT_DECAY_FIXED
    decay = -0.8;
#endif
    const float w = (float)pow(t, decay);
    double wd = hp->weight_decay;
#if VARIANT == VARIANT_NO_WD
    wd = 0;
#endif
#if STYLE_PAIRWISE
    const float rho = fminf((float)hp->lr, 1.0f / sqrtf((float)t));
    const float alpha = fmaxf((float)hp->eps2, norm_f(p, n) / sqrtf((float)n)) * rho;
#else
    const double rho = fmin(hp->lr, 1.0 / sqrt(t));
    const double alpha = fmax(hp->eps2, (double)norm_f(p, n) / sqrt((double)n)) * rho;
#endif
    if (wd != 0) {
#if STYLE_PAIRWISE
        const float lw = (float)(hp->lr * wd);
        for (size_t i = 0; i < n; i++) p[i] = p[i] - lw * p[i];
#else
        const float keep = (float)(1.0 - hp->lr * wd);
        for (size_t i = 0; i < n; i++) p[i] = p[i] * keep;
#endif
    }
    const float floor_v = (float)(eps1 * eps1);
    float* U = s->U;
    if (s->factored) {
        const size_t R = s->R, C = s->C;
        for (size_t b = 0; b < s->batch; b++) {
            const float* gb = g + b * R * C;
            float* row = s->row + b * R;
            float* col = s->col + b * C;
            for (size_t i = 0; i < R; i++) row[i] = lerp_f(row[i], mean_sq(gb + i * C, C, 1), w);
            for (size_t j = 0; j < C; j++) col[j] = lerp_f(col[j], mean_sq(gb + j, R, C), w);
            float rs = 0.0f;
            for (size_t i = 0; i < R; i++) rs += row[i];
            float rm = rs / (float)R;
            if (rm < (float)eps1) rm = (float)eps1;
            for (size_t i = 0; i < R; i++)
                for (size_t j = 0; j < C; j++) {
                    float v = (row[i] * col[j]) / rm;
                    if (v < floor_v) v = floor_v;
                    U[b * R * C + i * C + j] = gb[i * C + j] / sqrtf(v);
                }
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            s->var[i] = lerp_f(s->var[i], g[i] * g[i], w);
            float v = s->var[i];
            if (v < floor_v) v = floor_v;
            U[i] = g[i] / sqrtf(v);
        }
    }
    double d = hp->d;
#if VARIANT == VARIANT_NO_CLIP
    d = INFINITY;
#endif
#if STYLE_F64
    float denom = norm_f(U, n) / (sqrtf((float)n) * (float)d);
    if (!(denom > 1.0f)) denom = 1.0f;
    const float a = (float)(-alpha) / denom;
#else
    double denom = (double)norm_f(U, n) / (sqrt((double)n) * d);
    if (!(denom > 1.0)) denom = 1.0;
    const float a = (float)(-alpha / denom);
#endif
    // maximize (ABI 2): grad = -grad, so U = -U; written as the step's sign
    const float sa = hp->maximize ? -a : a;
    for (size_t i = 0; i < n; i++) p[i] = p[i] + sa * U[i];
    return NULL;
}

static int32_t aft_list_state(void* state, TrainbenchTensor* out, int32_t max) {
    Aft* s = state;
    TrainbenchTensor all[3];
    int32_t k = 0;
    all[k++] = (TrainbenchTensor){"step", TRAINBENCH_DTYPE_F32, 0, {0}, &s->step};
    if (s->factored) {
        TrainbenchTensor r = {"row_var", TRAINBENCH_DTYPE_F32, s->ndim, {0}, s->row};
        TrainbenchTensor c = {"col_var", TRAINBENCH_DTYPE_F32, s->ndim, {0}, s->col};
        for (int32_t d = 0; d < s->ndim; d++) r.dims[d] = c.dims[d] = s->dims[d];
        r.dims[s->ndim - 1] = 1;
        c.dims[s->ndim - 2] = 1;
        all[k++] = r;
        all[k++] = c;
    } else {
        TrainbenchTensor v = {"variance", TRAINBENCH_DTYPE_F32, s->ndim, {0}, s->var};
        for (int32_t d = 0; d < s->ndim; d++) v.dims[d] = s->dims[d];
        all[k++] = v;
    }
    for (int32_t i = 0; i < k && i < max; i++) out[i] = all[i];
    return k;
}

static void aft_destroy(void* state) {
    Aft* s = state;
    free(s->row);
    free(s->col);
    free(s->var);
    free(s->U);
    free(s);
}

static const TrainbenchOptimizerPlugin PLUGIN = {
    TRAINBENCH_PLUGIN_ABI_VERSION, "adafactor_torch_plain", "adafactor_torch", aft_create, aft_step, aft_list_state,
    aft_destroy,
};

const TrainbenchOptimizerPlugin* trainbench_optimizer_plugin(void) { return &PLUGIN; }

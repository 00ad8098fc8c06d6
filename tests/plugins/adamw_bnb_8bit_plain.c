/* adamw_bnb_8bit_plain.c — bitsandbytes' AdamW8bit on CPU (the "adamw_bnb_8bit" golden set) as
 * a trainbench plugin in plain C99, written from reference/OPTIM_SEMANTICS.md section 4 with no
 * trainbench code but the public header: the dynamic code maps, the 65,536-point lookup-table
 * quantizer per 256-element block, the 32-bit update below min_8bit_size. Not bit-exact: it
 * rounds in its own order (mul+add, x / absmax, lerp), so `trainbench conform` must judge it
 * CONFORMS (the rounding-order band of reference/CONFORMANCE.md), never FAIL.
 *
 * Test builds (Makefile: $(BUILD)/plugins/bnb_<x>.so, -DVARIANT=VARIANT_<X>):
 *   correct, other rounding orders (must CONFORM):
 *     MULADD    m = b1*m + (1-b1)*g and v = b2*v + (1-b2)*(g*g) with separate roundings,
 *               y = x / absmax (a division, not x * (1/absmax)), the grid index without fma,
 *               (m * step)/denom; 32-bit path p -= lr*m_hat/(sqrt(v_hat) + eps)
 *     LERP      m = torch's lerp (two formulas), v = fma(g*g, 1-b2, b2*v), absmax scanned
 *               backwards, denom = sqrt(v / c2^2) + eps
 *   another quantizer (the question of reference/CONFORMANCE.md):
 *     NEAREST   the library's arithmetic, but each code the exact nearest of the 256 (search
 *               over the whole map; ties to the lower code), as bitsandbytes' GPU kernels pick
 *   known mistakes (must FAIL, the diagnosis naming them):
 *     LINEAR_MAP  both states quantized with linear maps (linspace(-1, 1, 256), linspace(0, 1, 256))
 *     SIGNED_V    state2 (v) quantized with the signed map of state1
 *     L2          g <- g + wd*p, no decoupled weight decay (Adam's L2 penalty)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "validate/trainbench_plugin.h"

#define VARIANT_MULADD 1
#define VARIANT_LERP 2
#define VARIANT_NEAREST 3
#define VARIANT_LINEAR_MAP 4
#define VARIANT_SIGNED_V 5
#define VARIANT_L2 6
#ifndef VARIANT
#define VARIANT VARIANT_MULADD
#endif
#if VARIANT < VARIANT_MULADD || VARIANT > VARIANT_L2 /* an undefined name reads as 0 */
#error "unknown VARIANT"
#endif
/* the mistakes are written in the MULADD style */
#define STYLE_LERP (VARIANT == VARIANT_LERP || VARIANT == VARIANT_NEAREST)
#define BLOCK 256
#define GRID 65536

static float g_map[2][256];       /* qmap1 (signed, m), qmap2 (unsigned, v) */
static unsigned char g_lut[2][GRID];
static int g_ready;

#if VARIANT != VARIANT_LINEAR_MAP
static int cmp_float(const void* a, const void* b) {
    const float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}
#endif

/* create_dynamic_map(signed, 7, 8) (OPTIM_SEMANTICS.md 4.3), torch's float32 linspace */
#if VARIANT != VARIANT_LINEAR_MAP
static void dynamic_map(int is_signed, float* code) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        const int k = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        float bnd[129];
        const float step = (1.0f - 0.1f) / (float)(k - 1);
        for (int j = 0; j < k; j++) bnd[j] = j < k / 2 ? fmaf(step, (float)j, 0.1f) : fmaf(-step, (float)(k - 1 - j), 1.0f);
        const float scale = (float)pow(10.0, i - 6);
        for (int j = 0; j + 1 < k; j++) {
            const float mean = (bnd[j] + bnd[j + 1]) / 2.0f;
            code[n++] = scale * mean;
            if (is_signed) code[n++] = -scale * mean;
        }
    }
    code[n++] = 0.0f;
    code[n++] = 1.0f;
    qsort(code, 256, sizeof(float), cmp_float);
}
#endif

static void maps_init(void) {
    if (g_ready) return;
#if VARIANT == VARIANT_LINEAR_MAP
    for (int i = 0; i < 256; i++) {
        g_map[0][i] = -1.0f + 2.0f * (float)i / 255.0f;
        g_map[1][i] = (float)i / 255.0f;
    }
#else
    dynamic_map(1, g_map[0]);
#if VARIANT == VARIANT_SIGNED_V
    memcpy(g_map[1], g_map[0], sizeof g_map[0]);
#else
    dynamic_map(0, g_map[1]);
#endif
#endif
    for (int k = 0; k < 2; k++) {  /* lut[j] = midpoints strictly below the grid point j */
        int c = 0;
        for (int j = 0; j < GRID; j++) {
            const float val = ((float)j + (float)j) / 65535.0f - 1.0f;
            while (c < 255 && (g_map[k][c] + g_map[k][c + 1]) * 0.5f < val) c++;
            g_lut[k][j] = (unsigned char)c;
        }
    }
    g_ready = 1;
}

typedef struct {
    TrainbenchHparams hp;
    int32_t ndim;
    int64_t dims[TRAINBENCH_PLUGIN_MAX_DIMS];
    size_t n, n_blocks;
    int is_8bit;
    int64_t t;
    void *s1, *s2;          /* fp32 m, v or uint8 codes */
    float *am1, *am2;
} Bnb;

static void* bnb_create(int32_t ndim, const int64_t* dims, const TrainbenchHparams* hp, const char** error) {
    if (ndim < 0 || ndim > TRAINBENCH_PLUGIN_MAX_DIMS) {
        *error = "ndim must be 0..4";
        return NULL;
    }
    if (hp->block_size != BLOCK) {
        *error = "only block_size 256";
        return NULL;
    }
    maps_init();
    Bnb* s = calloc(1, sizeof *s);
    s->hp = *hp;
    s->ndim = ndim;
    s->n = 1;
    for (int32_t d = 0; d < ndim; d++) {
        s->dims[d] = dims[d];
        s->n *= (size_t)dims[d];
    }
    s->is_8bit = (int64_t)s->n >= hp->min_8bit_size;
    s->n_blocks = (s->n + BLOCK - 1) / BLOCK;
    const size_t es = s->is_8bit ? 1 : sizeof(float);
    s->s1 = calloc(s->n + 1, es);
    s->s2 = calloc(s->n + 1, es);
    s->am1 = calloc(s->n_blocks + 1, sizeof(float));
    s->am2 = calloc(s->n_blocks + 1, sizeof(float));
    return s;
}

static inline float lerp_f(float self, float end, float w) {
    return (w < 0.5f && w > -0.5f) ? fmaf(w, end - self, self) : fmaf(w - 1.0f, end - self, end);
}

/* the code of x (already a block's value) given the block's absmax */
static unsigned char quantize(int k, float x, float absmax) {
#if VARIANT == VARIANT_NEAREST
    float y = x / absmax;
    if (y != y) return 0;
    if (y < -1.0f) y = -1.0f;
    if (y > 1.0f) y = 1.0f;
    int best = 0;
    for (int c = 1; c < 256; c++)
        if (fabsf(g_map[k][c] - y) < fabsf(g_map[k][best] - y)) best = c;
    return (unsigned char)best;
#else
#if VARIANT == VARIANT_MULADD || VARIANT == VARIANT_LINEAR_MAP || VARIANT == VARIANT_SIGNED_V || VARIANT == VARIANT_L2
    float y = x / absmax;
#else
    float y = x * (1.0f / absmax);
#endif
    if (y < -1.0f) y = -1.0f;
    if (y > 1.0f) y = 1.0f;
    if (y != y) return g_lut[k][0];
#if STYLE_LERP
    const float z = fmaf((y + 1.0f) * 0.5f, 65535.0f, 0.5f);
#else
    const float z = (y + 1.0f) * 0.5f * 65535.0f + 0.5f;
#endif
    return g_lut[k][(int)z & 0xFFFF];
#endif
}

static const char* bnb_step(void* state, float* p, const float* g, int64_t numel) {
    Bnb* s = state;
    if ((size_t)numel != s->n) return "numel does not match the shape given to create";
    const TrainbenchHparams* hp = &s->hp;
    s->t++;
    const double t = (double)s->t, c1 = 1.0 - pow(hp->beta1, t), c2 = sqrt(1.0 - pow(hp->beta2, t));
    const float w1 = (float)(1.0 - hp->beta1), b2 = (float)hp->beta2, w2 = (float)(1.0 - hp->beta2);
#if !STYLE_LERP
    const float b1 = (float)hp->beta1;
#endif
#if VARIANT == VARIANT_L2
    const float decay = 1.0f, l2 = (float)hp->weight_decay;
#else
    const float decay = hp->weight_decay > 0 ? (float)(1.0 - hp->lr * hp->weight_decay) : 1.0f;
#endif
    for (size_t off = 0; off < s->n; off += BLOCK) {
        const size_t len = s->n - off < BLOCK ? s->n - off : BLOCK, blk = off / BLOCK;
        float m[BLOCK], v[BLOCK];
        for (size_t j = 0; j < len; j++) {
            const size_t i = off + j;
            float gi = g[i];
#if VARIANT == VARIANT_L2
            gi = gi + l2 * p[i];
#endif
            float mp, vp;
            if (s->is_8bit) {
                mp = g_map[0][((unsigned char*)s->s1)[i]] * s->am1[blk];
                vp = g_map[1][((unsigned char*)s->s2)[i]] * s->am2[blk];
            } else {
                mp = ((float*)s->s1)[i];
                vp = ((float*)s->s2)[i];
            }
#if STYLE_LERP
            m[j] = lerp_f(mp, gi, w1);
            v[j] = fmaf(gi * gi, w2, b2 * vp);
#else
            m[j] = b1 * mp + w1 * gi;
            v[j] = b2 * vp + w2 * (gi * gi);
#endif
            float pi = p[i] * decay;
            if (s->is_8bit) {
#if STYLE_LERP
                const float denom = sqrtf(v[j] / (float)(c2 * c2)) + (float)hp->eps;
#else
                const float denom = sqrtf(v[j]) / (float)c2 + (float)hp->eps;
#endif
                pi = pi + (m[j] * (float)(-hp->lr / c1)) / denom;
            } else {
                /* the textbook form of the same update: m_hat / (sqrt(v_hat) + eps) */
                const float m_hat = m[j] / (float)c1, v_hat = v[j] / (float)(c2 * c2);
                pi = pi - (float)hp->lr * m_hat / (sqrtf(v_hat) + (float)hp->eps);
                ((float*)s->s1)[i] = m[j];
                ((float*)s->s2)[i] = v[j];
            }
            p[i] = pi;
        }
        if (!s->is_8bit) continue;
        float a1 = 0.0f, a2 = 0.0f;  /* max |x| over the block, NaN ignored */
#if STYLE_LERP
        for (size_t j = len; j-- > 0;) {
#else
        for (size_t j = 0; j < len; j++) {
#endif
            if (fabsf(m[j]) > a1) a1 = fabsf(m[j]);
            if (fabsf(v[j]) > a2) a2 = fabsf(v[j]);
        }
        s->am1[blk] = a1;
        s->am2[blk] = a2;
        for (size_t j = 0; j < len; j++) {
            ((unsigned char*)s->s1)[off + j] = a1 == 0.0f ? 0 : quantize(0, m[j], a1);
            ((unsigned char*)s->s2)[off + j] = a2 == 0.0f ? 0 : quantize(1, v[j], a2);
        }
    }
    return NULL;
}

static int32_t bnb_list_state(void* state, TrainbenchTensor* out, int32_t max) {
    Bnb* s = state;
    TrainbenchTensor all[7];
    int32_t k = 0;
    all[k++] = (TrainbenchTensor){"step", TRAINBENCH_DTYPE_I64, 0, {0}, &s->t};
    const int32_t dt = s->is_8bit ? TRAINBENCH_DTYPE_U8 : TRAINBENCH_DTYPE_F32;
    TrainbenchTensor a = {"state1", dt, s->ndim, {0}, s->s1}, b = {"state2", dt, s->ndim, {0}, s->s2};
    for (int32_t d = 0; d < s->ndim; d++) a.dims[d] = b.dims[d] = s->dims[d];
    all[k++] = a;
    all[k++] = b;
    if (s->is_8bit) {
        all[k++] = (TrainbenchTensor){"absmax1", TRAINBENCH_DTYPE_F32, 1, {(int64_t)s->n_blocks}, s->am1};
        all[k++] = (TrainbenchTensor){"absmax2", TRAINBENCH_DTYPE_F32, 1, {(int64_t)s->n_blocks}, s->am2};
        all[k++] = (TrainbenchTensor){"qmap1", TRAINBENCH_DTYPE_F32, 1, {256}, g_map[0]};
        all[k++] = (TrainbenchTensor){"qmap2", TRAINBENCH_DTYPE_F32, 1, {256}, g_map[1]};
    }
    for (int32_t i = 0; i < k && i < max; i++) out[i] = all[i];
    return k;
}

static void bnb_destroy(void* state) {
    Bnb* s = state;
    free(s->s1);
    free(s->s2);
    free(s->am1);
    free(s->am2);
    free(s);
}

static const TrainbenchOptimizerPlugin PLUGIN = {
    TRAINBENCH_PLUGIN_ABI_VERSION, "adamw_bnb_8bit_plain", "adamw_bnb_8bit", bnb_create, bnb_step, bnb_list_state,
    bnb_destroy,
};

const TrainbenchOptimizerPlugin* trainbench_optimizer_plugin(void) { return &PLUGIN; }

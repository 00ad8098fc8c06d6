// optim_mistakes.c — the known-mistake table (optim_mistakes.h). The AdamW variants are one
// scalar copy of optim_adamw_torch.c's portable kernel (same fp32 rounding points, torch's sqrt)
// with a switch on the mistake, so that each differs from the reference in that one detail
// only; the other entries are config tweaks of a reference optimizer, or the other Adafactor
// dialect run on the same hyperparameters.
// To add a mistake: add an enum value and a case below (or a tweak function), then one table
// row. tests/test_optim.c checks that it fails the goldens; a row that passes them is not a
// mistake this suite can see, and must not be listed.
#include "optim/optim_mistakes.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/torch_reduce.h"
#include "optim/torch_sqrt.h"

// ---- AdamW (torch) with one mistake ----
typedef enum {
    AM_EPS_INSIDE_SQRT,      // denom = sqrt(v/bc2 + eps)
    AM_NO_BIAS_CORRECTION,   // bc1 = bc2 = 1
    AM_NO_BC1,               // step_size = lr (first moment not corrected)
    AM_NO_BC2,               // denom = sqrt(v) + eps (second moment not corrected)
    AM_BC2_NO_SQRT,          // denom = sqrt(v)/bc2 + eps
    AM_EPS_BEFORE_BC2,       // denom = (sqrt(v) + eps)/sqrt(bc2)
    AM_DECAY_AFTER_UPDATE,   // p <- (p + update) * (1 - lr*wd)
    AM_L2_DECAY,             // Adam's coupled L2: g <- g + wd*p, no decoupled decay
    AM_LERP_WEIGHT_BETA1,    // m <- lerp(m, g, beta1) instead of weight 1 - beta1
    AM_V_WEIGHTS_SWAPPED,    // v <- (1-b2)*v + b2*g*g
    AM_STEP_PLUS_ONE,        // bias correction with t+1 (step counted twice / from 1 before increment)
    AM_BC_F32,               // bias corrections 1 - b^t computed in float32 (powf of the fp32 betas)
} AdamwMistake;

static void adamw_mistake_step(OptimState* st, float* p, const float* g, const OptimConfig* c, AdamwMistake mk) {
    torch_sqrt_init();
    st->step++;
    *(float*)optim_state_find(st, "step")->data = (float)st->step;
    float* m = optim_state_find(st, "exp_avg")->data;
    float* v = optim_state_find(st, "exp_avg_sq")->data;
    float* vmax = optim_torch_adamw_vmax(st);
    const double t = (double)st->step + (mk == AM_STEP_PLUS_ONE ? 1.0 : 0.0);
    double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
    if (mk == AM_NO_BIAS_CORRECTION || mk == AM_NO_BC1) bc1 = 1.0;
    if (mk == AM_NO_BIAS_CORRECTION || mk == AM_NO_BC2) bc2 = 1.0;
    if (mk == AM_BC_F32) {
        bc1 = 1.0f - powf((float)c->beta1, (float)t);
        bc2 = 1.0f - powf((float)c->beta2, (float)t);
    }
    const float decay = (float)(1.0 - c->lr * c->weight_decay), wd = (float)c->weight_decay;
    const float w1 = (float)(1.0 - c->beta1), b1 = (float)c->beta1, b2 = (float)c->beta2, w2 = (float)(1.0 - c->beta2);
    const float bc2f = (float)bc2, bc2_sqrt = (float)pow(bc2, 0.5), eps = (float)c->eps;
    const float neg_step_size = (float)(-c->lr / bc1);
    const size_t n = shape_numel(&st->shape);
    for (size_t i = 0; i < n; i++) {
        float pi = p[i], gi = c->maximize ? -g[i] : g[i];  // maximize, as the reference
        if (mk == AM_L2_DECAY) gi = fmaf(pi, wd, gi);  // grad.add(param, alpha=wd): an FMA on CPU
        else if (mk != AM_DECAY_AFTER_UPDATE) pi = pi * decay;
        const float mi = torch_lerp(m[i], gi, mk == AM_LERP_WEIGHT_BETA1 ? b1 : w1);
        const float vi = mk == AM_V_WEIGHTS_SWAPPED ? fmaf(b2 * gi, gi, v[i] * w2) : fmaf(w2 * gi, gi, v[i] * b2);
        float vd = vi;  // amsgrad: the running maximum, as the reference
        if (vmax) vmax[i] = vd = optim_torch_maximum(vmax[i], vi);
        float denom;
        switch (mk) {
        case AM_EPS_INSIDE_SQRT: denom = torch_sqrtf(vd / bc2f + eps); break;
        case AM_BC2_NO_SQRT: denom = torch_sqrtf(vd) / bc2f + eps; break;
        case AM_EPS_BEFORE_BC2: denom = (torch_sqrtf(vd) + eps) / bc2_sqrt; break;
        default: denom = torch_sqrtf(vd) / bc2_sqrt + eps; break;
        }
        m[i] = mi;
        v[i] = vi;
        pi = pi + (neg_step_size * mi) / denom;
        if (mk == AM_DECAY_AFTER_UPDATE) pi = pi * decay;
        p[i] = pi;
    }
}

// One Optimizer per mistake: the reference's vtable with the step replaced (a step has no
// context pointer, so each mistake gets its own small function).
#define ADAMW_MISTAKE(tag, mk)                                                                  \
    static void step_##tag(OptimState* st, float* p, const float* g, const OptimConfig* c) {   \
        adamw_mistake_step(st, p, g, c, mk);                                                    \
    }
ADAMW_MISTAKE(eps_inside_sqrt, AM_EPS_INSIDE_SQRT)
ADAMW_MISTAKE(no_bias_correction, AM_NO_BIAS_CORRECTION)
ADAMW_MISTAKE(no_bc1, AM_NO_BC1)
ADAMW_MISTAKE(no_bc2, AM_NO_BC2)
ADAMW_MISTAKE(bc2_no_sqrt, AM_BC2_NO_SQRT)
ADAMW_MISTAKE(eps_before_bc2, AM_EPS_BEFORE_BC2)
ADAMW_MISTAKE(decay_after_update, AM_DECAY_AFTER_UPDATE)
ADAMW_MISTAKE(l2_decay, AM_L2_DECAY)
ADAMW_MISTAKE(lerp_weight, AM_LERP_WEIGHT_BETA1)
ADAMW_MISTAKE(v_weights_swapped, AM_V_WEIGHTS_SWAPPED)
ADAMW_MISTAKE(step_plus_one, AM_STEP_PLUS_ONE)
ADAMW_MISTAKE(bc_f32, AM_BC_F32)

// The L2 variant's rounding-order band: AdamW's (which reads the gradient only as a magnitude)
// on the magnitude of what it really sums, |g| + |wd*p| (g + wd*p may cancel), without
// decoupled decay, plus p's own error fed back through wd*p into m and v; so that the L2
// mistake is named in any rounding style (fma, or g + wd*p with two roundings).
void optim_mistake_band_l2_decay(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p, const float* g,
                          const OptimConfig* c) {
    const size_t n = b->n ? b->n : 1;
    float* g2 = xmalloc(n * sizeof(float));
    double* ep_prev = xmalloc(n * sizeof(double));
    const double wd = c->weight_decay;
    for (size_t i = 0; i < b->n; i++) {
        g2[i] = (float)(fabs((double)g[i]) + fabs(wd * (double)p_prev[i]));
        ep_prev[i] = b->param[i];
    }
    OptimConfig c2 = *c;
    c2.weight_decay = 0;
    optim_adamw_rounding_band_step(b, st, p_prev, p, g2, &c2);
    for (size_t i = 0; i < b->n; i++) {
        b->state[0][i] += (1 - c->beta1) * wd * ep_prev[i];
        // v = b2*v + (1-b2)*g'^2: g' = g + wd*p carries its own rounding (u of |g| + |wd*p|,
        // when written mul+add) and p's error; v's band is otherwise relative to v
        b->state[1][i] += (1 - c->beta2) * 2 * (double)g2[i] * (wd * ep_prev[i] + 0x1p-24 * (double)g2[i]);
    }
    free(g2);
    free(ep_prev);
}

// ---- transformers Adafactor with one mistake ----
// A scalar copy of optim_adafactor_hf.c's step (the same fp32 rounding points and torch
// reduction orders, torch_reduce.h), with a switch on the mistake.
typedef enum {
    HM_EPS1_OUTSIDE,  // u = g^2 (no eps1), and rsqrt(row + eps1), rsqrt(col + eps1) / rsqrt(v + eps1)
} AfhfMistake;

static float afhf_rms_f32(const float* x, size_t n) { return torch_norm2_f32(x, n) / (float)pow((double)n, 0.5); }

static void afhf_mistake_step(OptimState* st, float* p, const float* g, const OptimConfig* c, AfhfMistake mk) {
    const size_t n = shape_numel(&st->shape);
    float* U = xmalloc((n ? n : 1) * sizeof(float));  // (n) the update
    st->step++;
    const double t = (double)st->step;
    const float rms = afhf_rms_f32(p, n);
    *(float*)optim_state_find(st, "RMS")->data = rms;
    double rel = c->lr;
    if (c->relative_step) rel = fmin(c->warmup_init ? 1e-6 * t : 1e-2, 1.0 / sqrt(t));
    const bool lr_is_f32 = c->scale_parameter && (double)rms > c->eps2;
    const float lr_f32 = lr_is_f32 ? rms * (float)rel : (float)((c->scale_parameter ? c->eps2 : 1.0) * rel);
    const double lr_t = lr_is_f32 ? (double)lr_f32 : (c->scale_parameter ? c->eps2 : 1.0) * rel;
    const double b2t = 1.0 - pow(t, c->decay_rate);
    const float keep = (float)b2t, add = (float)(1.0 - b2t);
    const float eps_in = mk == HM_EPS1_OUTSIDE ? 0.0f : (float)c->eps1;   // the library: g^2 + eps1
    const float eps_out = mk == HM_EPS1_OUTSIDE ? (float)c->eps1 : 0.0f;  // the mistake: on the moment
    if (st->shape.ndim >= 2) {
        size_t batch, R, C;
        shape_as_matrices(&st->shape, &batch, &R, &C);
        float* cbuf = xmalloc((C ? C : 1) * sizeof(float));  // (C) column means, then c_factor
        float* rows = optim_state_find(st, "exp_avg_sq_row")->data;
        float* cols = optim_state_find(st, "exp_avg_sq_col")->data;
        for (size_t i = 0; i < n; i++) U[i] = g[i] * g[i] + eps_in;
        for (size_t b = 0; b < batch; b++) {
            float* ub = U + b * R * C;
            float* row = rows + b * R;
            float* col = cols + b * C;
            for (size_t i = 0; i < R; i++) row[i] = fmaf(torch_sum_f32(ub + i * C, C) / (float)C, add, row[i] * keep);
            torch_sum_dim0_f32(cbuf, ub, R, C);
            for (size_t j = 0; j < C; j++) col[j] = fmaf(cbuf[j] / (float)R, add, col[j] * keep);
            for (size_t j = 0; j < C; j++) cbuf[j] = 1.0f / sqrtf(col[j] + eps_out);
            const float rm = torch_sum_f32(row, R) / (float)R;
            for (size_t i = 0; i < R; i++) {
                const float r_factor = 1.0f / sqrtf((row[i] + eps_out) / rm);
                for (size_t j = 0; j < C; j++) ub[i * C + j] = (r_factor * cbuf[j]) * g[b * R * C + i * C + j];
            }
        }
        free(cbuf);
    } else {
        float* v = optim_state_find(st, "exp_avg_sq")->data;
        for (size_t i = 0; i < n; i++) {
            v[i] = fmaf(add, g[i] * g[i] + eps_in, v[i] * keep);
            U[i] = (1.0f / sqrtf(v[i] + eps_out)) * g[i];
        }
    }
    float clip = afhf_rms_f32(U, n) / (float)c->clip_threshold;
    if (clip < 1.0f) clip = 1.0f;
    const float alpha = lr_is_f32 ? (float)(-c->weight_decay) * lr_f32 : (float)(-c->weight_decay * lr_t);
    float* m = c->has_beta1 ? optim_state_find(st, "exp_avg")->data : NULL;
    const float b1 = (float)c->beta1, w1 = (float)(1.0 - c->beta1);
    for (size_t i = 0; i < n; i++) {
        float pi = p[i];
        if (c->weight_decay != 0) pi = fmaf(alpha, pi, pi);
        if (m) {
            m[i] = fmaf(w1, (U[i] / clip) * lr_f32, m[i] * b1);
            p[i] = pi - m[i];
        } else {
            p[i] = pi - (U[i] / clip) * lr_f32;
        }
    }
    free(U);
}

static void step_afhf_eps1_outside(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    afhf_mistake_step(st, p, g, c, HM_EPS1_OUTSIDE);
}

// ---- bitsandbytes 8-bit AdamW (CPU) with one mistake ----
// A scalar copy of optim_adamw_bnb_8bit.c's two paths (the same fp32 rounding points, torch's
// sqrt, the library's absmax, grid index and lookup table, OPTIM_SEMANTICS.md 4.1-4.4), with a
// switch on the mistake; the quantizer's maps are the library's (its find_shared_state) or the
// mistake's own.
typedef enum {
    BM_L2_DECAY,      // g <- fma(wd, p, g) (Adam's L2 penalty), no decoupled decay
    BM_LINEAR_MAP,    // both states quantized with linear maps instead of the dynamic ones
    BM_SIGNED_V,      // state2 (v) quantized with the signed map of state1
    BM_NEAREST_CODE,  // each code the exact nearest of the 256 (bitsandbytes' GPU rule), no grid
} BnbMistake;

#define BM_GRID 65536
enum { BMAP_DYN_SIGNED, BMAP_DYN_UNSIGNED, BMAP_LIN_SIGNED, BMAP_LIN_UNSIGNED, BMAP_COUNT };
static float g_bm_lin[2][256];                 // linspace(-1, 1, 256), linspace(0, 1, 256)
static const float* g_bm_map[BMAP_COUNT];
static uint8_t g_bm_lut[BMAP_COUNT][BM_GRID];
static pthread_once_t g_bm_once = PTHREAD_ONCE_INIT;

static void bm_maps_init(void) {
    for (int i = 0; i < 256; i++) {
        g_bm_lin[0][i] = -1.0f + 2.0f * (float)i / 255.0f;
        g_bm_lin[1][i] = (float)i / 255.0f;
    }
    g_bm_map[BMAP_DYN_SIGNED] = optim_adamw_bnb_8bit.find_shared_state("qmap1")->data;
    g_bm_map[BMAP_DYN_UNSIGNED] = optim_adamw_bnb_8bit.find_shared_state("qmap2")->data;
    g_bm_map[BMAP_LIN_SIGNED] = g_bm_lin[0];
    g_bm_map[BMAP_LIN_UNSIGNED] = g_bm_lin[1];
    for (int k = 0; k < BMAP_COUNT; k++) {  // build_quantize_lut (OPTIM_SEMANTICS.md 4.4)
        int c = 0;
        for (int j = 0; j < BM_GRID; j++) {
            const float val = -1.0f + (2.0f * (float)j) / (float)(BM_GRID - 1);
            while (c < 255 && 0.5f * (g_bm_map[k][c] + g_bm_map[k][c + 1]) < val) c++;
            g_bm_lut[k][j] = (uint8_t)c;
        }
    }
    torch_sqrt_init();
}

// the maps (state1, state2) a mistake quantizes with
static void bm_maps_of(BnbMistake mk, int* k1, int* k2) {
    *k1 = mk == BM_LINEAR_MAP ? BMAP_LIN_SIGNED : BMAP_DYN_SIGNED;
    *k2 = mk == BM_LINEAR_MAP ? BMAP_LIN_UNSIGNED : mk == BM_SIGNED_V ? BMAP_DYN_SIGNED : BMAP_DYN_UNSIGNED;
}

// The library's code of y = x * RN(1/absmax) (absmax > 0): clamp, the grid index (a NaN gives
// index 0, as the .so's conversion does on x86-64), the lookup table; or the exact nearest code.
static uint8_t bm_quantize(float x, float inv, int k, BnbMistake mk) {
    float y = x * inv;
    y = (-1.0f > y) ? -1.0f : (y > 1.0f ? 1.0f : y);
    if (mk == BM_NEAREST_CODE) {  // the map is sorted: the last code <= y, or the next if nearer (ties: lower)
        if (y != y) return 0;
        const float* q = g_bm_map[k];
        int lo = 0, hi = 255;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (q[mid] <= y) lo = mid;
            else hi = mid - 1;
        }
        return (uint8_t)(lo < 255 && fabsf(q[lo + 1] - y) < fabsf(q[lo] - y) ? lo + 1 : lo);
    }
    float f = fmaf((y + 1.0f) * 0.5f, 65535.0f, 0.5f);
    f = (f == f) ? f : 0.0f;
    return g_bm_lut[k][(uint32_t)(int32_t)f & 0xFFFFu];
}

// absmax of a block as the library computes it: max |x| ignoring NaN, 0 when nothing is > 0
static float bm_absmax(const float* x, size_t len) {
    float a = 0.0f;
    for (size_t i = 0; i < len; i++)
        if (fabsf(x[i]) > a) a = fabsf(x[i]);  // NaN compares false: ignored
    return a;
}

static void bnb_mistake_step(OptimState* st, float* p, const float* g, const OptimConfig* c, BnbMistake mk) {
    CHECK(pthread_once(&g_bm_once, bm_maps_init) == 0);
    st->step++;
    const double t = (double)st->step;
    const double c1 = 1.0 - pow(c->beta1, t), c2 = sqrt(1.0 - pow(c->beta2, t));
    const size_t n = shape_numel(&st->shape);
    const float b1 = (float)c->beta1, w1 = (float)(1.0 - c->beta1), b2 = (float)c->beta2, w2 = (float)(1.0 - c->beta2);
    const bool decoupled = c->weight_decay > 0.0 && mk != BM_L2_DECAY;
    const float decay = decoupled ? (float)(1.0 - c->lr * c->weight_decay) : 1.0f, wd = (float)c->weight_decay;
    const StateTensor* s1 = optim_state_find(st, "state1");
    if (s1->dtype == DTYPE_F32) {  // numel < min_8bit_size: the 32-bit update (4.1)
        float* m = s1->data;
        float* v = optim_state_find(st, "state2")->data;
        const float eps_c2 = (float)(c->eps * c2), step = (float)(-c->lr * c2 / c1);
        for (size_t i = 0; i < n; i++) {
            const float gi = mk == BM_L2_DECAY ? fmaf(wd, p[i], g[i]) : g[i];
            m[i] = fmaf(gi, w1, m[i] * b1);
            v[i] = fmaf(w2 * gi, gi, v[i] * b2);
            const float u = m[i] / (torch_sqrtf(v[i]) + eps_c2);
            p[i] = fmaf(u, step, p[i] * decay);
        }
        return;
    }
    int k1, k2;
    bm_maps_of(mk, &k1, &k2);
    uint8_t* q1 = s1->data;
    uint8_t* q2 = optim_state_find(st, "state2")->data;
    float* am1 = optim_state_find(st, "absmax1")->data;
    float* am2 = optim_state_find(st, "absmax2")->data;
    const float c2f = (float)c2, eps = (float)c->eps, step = (float)(-c->lr / c1);
    float m[256], v[256];
    for (size_t off = 0; off < n; off += 256) {
        const size_t len = n - off < 256 ? n - off : 256, b = off / 256;
        for (size_t j = 0; j < len; j++) {
            const size_t i = off + j;
            const float gi = mk == BM_L2_DECAY ? fmaf(wd, p[i], g[i]) : g[i];
            m[j] = fmaf(gi, w1, (g_bm_map[k1][q1[i]] * am1[b]) * b1);
            v[j] = fmaf(w2 * gi, gi, (g_bm_map[k2][q2[i]] * am2[b]) * b2);
            const float denom = torch_sqrtf(v[j]) / c2f + eps;
            p[i] = p[i] * decay + (step * m[j]) / denom;
        }
        am1[b] = bm_absmax(m, len);
        am2[b] = bm_absmax(v, len);
        const float inv1 = 1.0f / am1[b], inv2 = 1.0f / am2[b];
        for (size_t j = 0; j < len; j++) {
            q1[off + j] = am1[b] == 0.0f ? 0 : bm_quantize(m[j], inv1, k1, mk);
            q2[off + j] = am2[b] == 0.0f ? 0 : bm_quantize(v[j], inv2, k2, mk);
        }
    }
}

#define BNB_MISTAKE(tag, mk)                                                                    \
    static void step_bnb_##tag(OptimState* st, float* p, const float* g, const OptimConfig* c) { \
        bnb_mistake_step(st, p, g, c, mk);                                                      \
    }
BNB_MISTAKE(l2_decay, BM_L2_DECAY)
BNB_MISTAKE(linear_map, BM_LINEAR_MAP)
BNB_MISTAKE(signed_v, BM_SIGNED_V)
BNB_MISTAKE(nearest_code, BM_NEAREST_CODE)

// The maps a variant lists as qmap1/qmap2 (its find_shared_state).
static const StateTensor* bm_shared(BnbMistake mk, const char* name) {
    CHECK(pthread_once(&g_bm_once, bm_maps_init) == 0);
    static StateTensor t[BMAP_COUNT][2];
    int k[2];
    bm_maps_of(mk, &k[0], &k[1]);
    for (int i = 0; i < 2; i++) {
        if (strcmp(name, i ? "qmap2" : "qmap1") != 0) continue;
        StateTensor* out = &t[k[i]][i];
        *out = (StateTensor){"", DTYPE_F32, {1, {256}}, (void*)g_bm_map[k[i]]};
        snprintf(out->name, sizeof out->name, "%s", name);
        return out;
    }
    return NULL;
}
static const StateTensor* shared_linear_map(const char* name) { return bm_shared(BM_LINEAR_MAP, name); }
static const StateTensor* shared_signed_v(const char* name) { return bm_shared(BM_SIGNED_V, name); }

static void tweak_no_decay(OptimConfig* c) { c->weight_decay = 0; }
static void tweak_no_warmup_init(OptimConfig* c) { c->warmup_init = false; }
static void tweak_decay_rate_default(OptimConfig* c) { c->decay_rate = -0.8; }
static void tweak_no_eps1(OptimConfig* c) { c->eps1 = 0; }
static void tweak_no_clip_hf(OptimConfig* c) { c->clip_threshold = INFINITY; }
static void tweak_no_clip_torch(OptimConfig* c) { c->d = INFINITY; }
static void tweak_no_scale_parameter(OptimConfig* c) { c->scale_parameter = false; }
static void tweak_no_8bit(OptimConfig* c) { c->min_8bit_size = SIZE_MAX; }

typedef struct {
    OptimMistake m;
    void (*step)(OptimState*, float*, const float*, const OptimConfig*);  // step variant, or NULL
    const Optimizer* base;  // whose vtable the step variant replaces (NULL: adamw_torch)
    const StateTensor* (*shared)(const char* name);  // the variant's shared state (maps), or NULL
} Row;

// Designated initializers: a row names only what it uses.
#define ADAMW_ROW(id_, text_, step_) {{.optim = "adamw_torch", .id = id_, .text = text_}, step_, NULL, NULL}
#define STEP_ROW(optim_, base_, id_, text_, step_) {{.optim = optim_, .id = id_, .text = text_}, step_, base_, NULL}
#define MAPS_ROW(optim_, base_, id_, text_, step_, shared_) \
    {{.optim = optim_, .id = id_, .text = text_}, step_, base_, shared_}
#define TWEAK_ROW(optim_, id_, text_, tweak_, params_only_) \
    {{.optim = optim_, .id = id_, .text = text_, .tweak = tweak_, .params_only = params_only_}, NULL, NULL, NULL}
#define DIALECT_ROW(optim_, id_, text_, other_) \
    {{.optim = optim_, .id = id_, .text = text_, .variant = other_, .parse_as = other_, .params_only = true}, NULL, NULL, NULL}

static const Row ROWS[] = {
    ADAMW_ROW("eps_inside_sqrt", "eps inside the sqrt: sqrt(v_hat + eps) instead of sqrt(v_hat) + eps", step_eps_inside_sqrt),
    ADAMW_ROW("no_bias_correction", "bias correction missing (both moments)", step_no_bias_correction),
    ADAMW_ROW("no_bias_correction1", "bias correction of the first moment missing (step size lr, not lr/(1-b1^t))", step_no_bc1),
    ADAMW_ROW("no_bias_correction2", "bias correction of the second moment missing (sqrt(v) + eps)", step_no_bc2),
    ADAMW_ROW("bias_correction2_no_sqrt", "second-moment bias correction without its sqrt (sqrt(v)/(1-b2^t) + eps)", step_bc2_no_sqrt),
    ADAMW_ROW("eps_before_bias_correction2", "eps added before the bias correction ((sqrt(v) + eps)/sqrt(1-b2^t))", step_eps_before_bc2),
    ADAMW_ROW("decay_after_update", "weight decay applied after the update instead of before", step_decay_after_update),
    ADAMW_ROW("l2_decay", "L2 penalty added to the gradient (Adam) instead of decoupled weight decay (AdamW)", step_l2_decay),
    TWEAK_ROW("adamw_torch", "no_weight_decay", "weight decay missing", tweak_no_decay, false),
    ADAMW_ROW("lerp_weight_beta1", "wrong lerp weight: exp_avg.lerp_(grad, beta1) instead of 1 - beta1", step_lerp_weight),
    ADAMW_ROW("v_weights_swapped", "second-moment weights swapped: (1-b2)*v + b2*g^2", step_v_weights_swapped),
    ADAMW_ROW("step_plus_one", "off-by-one step in the bias correction (t+1 instead of t)", step_step_plus_one),
    ADAMW_ROW("bias_correction_f32", "bias corrections 1 - beta^t computed in float32 instead of double", step_bc_f32),

    TWEAK_ROW("adafactor", "no_update_clipping", "update clipping missing (U / max(1, RMS(U)/clip_threshold))", tweak_no_clip_hf, false),
    TWEAK_ROW("adafactor", "no_weight_decay", "weight decay missing", tweak_no_decay, false),
    TWEAK_ROW("adafactor", "scale_parameter_ignored", "scale_parameter ignored (lr not multiplied by max(eps2, RMS(p)))", tweak_no_scale_parameter, false),
    TWEAK_ROW("adafactor", "warmup_init_ignored", "warmup_init ignored (relative step min(1e-2, 1/sqrt(t)) instead of min(1e-6*t, 1/sqrt(t)))", tweak_no_warmup_init, false),
    TWEAK_ROW("adafactor", "decay_rate_ignored", "decay_rate ignored (beta2t = 1 - t^-0.8 whatever decay_rate says)", tweak_decay_rate_default, false),
    STEP_ROW("adafactor", &optim_adafactor_hf, "eps1_outside", "eps1 added to the second moment (rsqrt(v + eps1)) instead of to the squared gradient (g^2 + eps1)", step_afhf_eps1_outside),
    TWEAK_ROW("adafactor", "eps1_missing", "eps1 missing (g^2 without + eps1; also (g + eps1)^2, where eps1 underflows)", tweak_no_eps1, false),
    DIALECT_ROW("adafactor", "dialect_adafactor_torch", "the other dialect: torch.optim.Adafactor (adafactor_torch) on these hyperparameters", &optim_adafactor_torch),

    TWEAK_ROW("adafactor_torch", "no_update_clipping", "update clipping missing (alpha / max(1, RMS(U)/d))", tweak_no_clip_torch, false),
    TWEAK_ROW("adafactor_torch", "no_weight_decay", "weight decay missing", tweak_no_decay, false),
    TWEAK_ROW("adafactor_torch", "beta2_decay_ignored", "beta2_decay ignored (w = t^-0.8 whatever beta2_decay says)", tweak_decay_rate_default, false),
    DIALECT_ROW("adafactor_torch", "dialect_adafactor", "the other dialect: transformers Adafactor (adafactor) on these hyperparameters", &optim_adafactor_hf),

    TWEAK_ROW("adamw_bnb_8bit", "no_weight_decay", "weight decay missing", tweak_no_decay, false),
    TWEAK_ROW("adamw_bnb_8bit", "fp32_state", "no 8-bit quantization: fp32 state for every tensor", tweak_no_8bit, true),
    STEP_ROW("adamw_bnb_8bit", &optim_adamw_bnb_8bit, "l2_decay", "L2 penalty added to the gradient (Adam) instead of decoupled weight decay (AdamW)", step_bnb_l2_decay),
    MAPS_ROW("adamw_bnb_8bit", &optim_adamw_bnb_8bit, "linear_map", "states quantized with linear maps instead of bitsandbytes' dynamic maps", step_bnb_linear_map, shared_linear_map),
    MAPS_ROW("adamw_bnb_8bit", &optim_adamw_bnb_8bit, "signed_map_for_v", "state2 (v) quantized with the signed map of state1 instead of the unsigned map", step_bnb_signed_v, shared_signed_v),
    STEP_ROW("adamw_bnb_8bit", &optim_adamw_bnb_8bit, "nearest_code", "exact nearest-code quantization (bitsandbytes' GPU kernels) instead of the CPU lookup table's 65,536-point grid", step_bnb_nearest_code),
};

static OptimMistake g_table[ARRAY_LEN(ROWS)];
static Optimizer g_step_variants[ARRAY_LEN(ROWS)];

// The step variants are their optimizer (optim_adamw_torch unless the row names another) with
// another step; built once (a static
// initializer cannot copy another object).
static void table_init(void) {
    if (g_table[0].optim) return;
    for (size_t i = 0; i < ARRAY_LEN(ROWS); i++) {
        g_table[i] = ROWS[i].m;
        if (ROWS[i].step) {
            g_step_variants[i] = ROWS[i].base ? *ROWS[i].base : optim_adamw_torch;
            g_step_variants[i].step = ROWS[i].step;
            if (ROWS[i].shared) g_step_variants[i].find_shared_state = ROWS[i].shared;
            if (ROWS[i].step == step_l2_decay) g_step_variants[i].rounding_band_step = optim_mistake_band_l2_decay;
            g_table[i].variant = &g_step_variants[i];
        }
    }
}

size_t optim_mistake_count(void) { return ARRAY_LEN(ROWS); }

const OptimMistake* optim_mistake_at(size_t i) {
    CHECK(i < ARRAY_LEN(ROWS));
    table_init();
    return &g_table[i];
}

// band_adamw_bnb_8bit.c — the rounding-order band of bitsandbytes' AdamW8bit on CPU
// ("adamw_bnb_8bit"), derived in reference/CONFORMANCE.md "The 8-bit AdamW band, derived".
// Below min_8bit_size (4096 elements) the state is fp32 and the update is AdamW's recurrence
// (eps scaled by sqrt(1 - b2^t), an algebraic rewrite of the same update): AdamW's band
// (optim_adamw_torch.c) applies as it is. From 4096 elements the state is requantized every
// step (OPTIM_SEMANTICS.md 4.2-4.4), and the band tracks intervals: per element the values of m
// and v every correct implementation can hold (from its dequantized interval and its own
// roundings), per 256-block the absmax interval, and per code the codes the library's quantizer
// (1/absmax, the 65,536-point grid, its lookup table) reaches from those intervals: how many
// code steps below and above the library's code (the U8 band, code_band_pack). The next step
// starts from the dequantized values of the reachable codes. The parameter's band is AdamW's
// with the update taken over the m and v intervals exactly.
// A known-mistake variant's band follows the variant (RoundingBand.qmap: its maps;
// .recurrence "l2_decay": the gradient it sums; "nearest_code": its quantizer).
// Not here: whether the exact nearest code (bitsandbytes' GPU kernels) is a rounding order (it is
// not: CONFORMANCE.md "8-bit: an implementation that picks the exact nearest code").
#include "validate/rounding_band.h"

#include "optim/optim_mistakes.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define BU 0x1p-24
#define BSUB (8 * 0x1p-149)
#define BLOCK 256
#define GRID 65536

// The library's lookup table (OPTIM_SEMANTICS.md 4.4, build_quantize_lut): lut[j] = number of
// midpoints RN(RN(code[i] + code[i+1]) * 0.5) strictly below the grid point -1 + 2j/65535.
// The band needs it to know which grid cells map to which code. Built per map (the library's
// qmap1/qmap2, or a known-mistake variant's: RoundingBand.qmap), cached by the map's address.
typedef struct {
    const float* map;
    uint8_t lut[GRID];
} Lut;
static Lut g_luts[8];
static pthread_mutex_t g_lut_lock = PTHREAD_MUTEX_INITIALIZER;

static const Lut* lut_of(const float* map) {
    CHECK(pthread_mutex_lock(&g_lut_lock) == 0);
    Lut* l = NULL;
    for (size_t i = 0; i < ARRAY_LEN(g_luts) && !l; i++)
        if (g_luts[i].map == map || !g_luts[i].map) l = &g_luts[i];
    CHECK(l, "more than %zu code maps", ARRAY_LEN(g_luts));
    if (!l->map) {
        float mid[255];
        for (int i = 0; i < 255; i++) mid[i] = (map[i] + map[i + 1]) * 0.5f;
        int c = 0;
        for (int j = 0; j < GRID; j++) {
            const float val = ((float)j + (float)j) / 65535.0f - 1.0f;
            while (c < 255 && mid[c] < val) c++;
            l->lut[j] = (uint8_t)c;
        }
        l->map = map;
    }
    CHECK(pthread_mutex_unlock(&g_lut_lock) == 0);
    return l;
}

// The quantizer whose reachable codes the band tracks: the library's (lookup table on the grid)
// or, for the "nearest_code" variant, the exact nearest code (ties to the lower code).
typedef struct {
    const float* map;
    const Lut* lut;  // NULL: nearest code
} Quantizer;

// The grid cell of a normalized value y (clamped to [-1, 1]): trunc((y + 1)/2 * 65535 + 0.5),
// in exact arithmetic (the band's endpoints are already widened for the library's roundings).
static int grid_cell(double y) {
    y = y < -1 ? -1 : y > 1 ? 1 : y;
    double z = floor((y + 1) * 0.5 * 65535.0 + 0.5);
    return z < 0 ? 0 : z > GRID - 1 ? GRID - 1 : (int)z;
}

// The values a correct implementation can hold are tracked as intervals, not as a symmetric
// band: quantization snaps an interval that holds no decision boundary back to one code (width
// 0), where a symmetric band around the reference code would keep widening. Per element and
// state: the reference's dequantized value (the library's float, for recomputing its m and v)
// and the interval [lo, hi] of every correct implementation's dequantized value.
typedef struct {
    double *ref, *lo, *hi;  // (n) each
} DeqInterval;

// |x| over the interval [lo, hi]: its smallest and largest value
static inline double abs_lo(double lo, double hi) { return lo > 0 ? lo : hi < 0 ? -hi : 0; }
static inline double abs_hi(double lo, double hi) { return fmax(fabs(lo), fabs(hi)); }

// One state (k = 0: m with qmap1; k = 1: v with qmap2) of one block after the step: x (len) the
// reference's new values before quantization and [xlo, xhi] every correct implementation's;
// codes/absmax the reference's new state. Writes the codes' band (code steps; NaN: identical
// only), absmax's band, and the next step's dequantized intervals (dq + off).
// The code of a normalized value y in [-1, 1] under q (y's grid cell, or the nearest code).
static int code_of(const Quantizer* q, double y) {
    y = y < -1 ? -1 : y > 1 ? 1 : y;
    if (q->lut) return q->lut->lut[grid_cell(y)];
    int lo = 0, hi = 255;  // the last code <= y, then the nearer of it and the next (ties: lower)
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (q->map[mid] <= y) lo = mid;
        else hi = mid - 1;
    }
    return lo < 255 && fabs(q->map[lo + 1] - y) < fabs(y - q->map[lo]) ? lo + 1 : lo;
}

static void quantize_interval(const Quantizer* q, bool non_negative, const float* x, const double* xlo,
                              const double* xhi, size_t len, const uint8_t* codes, float absmax, double* code_band,
                              double* e_absmax, DeqInterval dq, size_t off) {
    // absmax = max |x| over the block (NaN ignored): within [max |x|_lo, max |x|_hi]
    double a_lo = 0, a_hi = 0;
    for (size_t i = 0; i < len; i++) {
        if (isnan(x[i])) continue;
        a_lo = fmax(a_lo, abs_lo(xlo[i], xhi[i]));
        a_hi = fmax(a_hi, abs_hi(xlo[i], xhi[i]));
    }
    *e_absmax = isfinite(absmax) && isfinite(a_hi) ? fmax(a_hi - absmax, absmax - a_lo) : NAN;
    for (size_t i = 0; i < len; i++) {
        const int c = codes[i];
        const double ref = (double)(q->map[c] * absmax);  // the library's RN(code * absmax)
        dq.ref[off + i] = ref;
        if (a_hi == 0) {  // exact zeros everywhere in the block, in every ordering: codes 0
            code_band[i] = 0;
            dq.lo[off + i] = dq.hi[off + i] = ref;
            continue;
        }
        // NaN/inf reach the library's undefined conversion: exact only there. So where some but
        // not all of the reachable absmax have a reciprocal that overflows float32 (absmax below
        // about 2^-128): the library's y = x * RN(1/absmax) is then x * inf, +-1 or NaN (code 0),
        // where a division gives a finite y: a value difference, not a rounding one.
        const bool inv_inf_all = isinf(1.0f / (float)a_hi), inv_inf_any = isinf(1.0f / (float)a_lo);
        if (!isfinite(x[i]) || !isfinite(xlo[i]) || !isfinite(xhi[i]) || !isfinite(absmax) || !isfinite(a_hi) ||
            inv_inf_all != inv_inf_any) {
            code_band[i] = NAN;
            dq.lo[off + i] = dq.hi[off + i] = NAN;
            continue;
        }
        int c_lo = c, c_hi = c;
        if (inv_inf_all) {  // every reachable 1/absmax is inf: the code follows x's sign (0: NaN, code 0)
            const int cand[3] = {xhi[i] > 0 ? code_of(q, 1.0) : c, xlo[i] < 0 ? code_of(q, -1.0) : c,
                                 xlo[i] <= 0 && xhi[i] >= 0 ? 0 : c};
            for (int k = 0; k < 3; k++) {
                c_lo = cand[k] < c_lo ? cand[k] : c_lo;
                c_hi = cand[k] > c_hi ? cand[k] : c_hi;
            }
        } else {
            // y = x * RN(1/absmax) over x in [xlo, xhi], absmax in [a_lo, a_hi] (y is monotone in
            // each), widened by another ordering's normalization (x/absmax or x*RN(1/absmax):
            // 2u of |y|) and index arithmetic in another order (RN(y + 1): 2^-24; (t * 65535) + 0.5
            // fused or not: up to 2 roundings of 2^-9 of a grid step, 9.3e-8 in y): 2^-22)
            const double y_lo = xlo[i] >= 0 ? xlo[i] / a_hi : xlo[i] / a_lo;
            const double y_hi = xhi[i] >= 0 ? xhi[i] / a_lo : xhi[i] / a_hi;
            const double w_lo = 2 * BU * fabs(y_lo) + 0x1p-22, w_hi = 2 * BU * fabs(y_hi) + 0x1p-22;
            // v >= 0: its normalized value never goes below 0
            c_lo = code_of(q, non_negative ? fmax(0.0, y_lo - w_lo) : y_lo - w_lo);
            c_hi = code_of(q, y_hi + w_hi);
            if (c < c_lo) c_lo = c;
            if (c > c_hi) c_hi = c;
        }
        code_band[i] = code_band_pack(c - c_lo, c_hi - c);
        // the dequantized value code[c'] * absmax' over the reachable codes and absmax
        const double q_lo = q->map[c_lo], q_hi = q->map[c_hi];
        dq.lo[off + i] = fmin(ref, q_lo * (q_lo >= 0 ? a_lo : a_hi));
        dq.hi[off + i] = fmax(ref, q_hi * (q_hi >= 0 ? a_hi : a_lo));
    }
}

void band_adamw_bnb_8bit_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                              const float* g, const OptimConfig* c) {
    const StateTensor* s1 = optim_state_find(st, "state1");
    const bool l2 = b->recurrence && !strcmp(b->recurrence, "l2_decay");  // the L2 variant's recurrence
    if (!s1 || s1->dtype == DTYPE_F32) {  // the 32-bit path: AdamW's recurrence, AdamW's band
        if (l2) optim_mistake_band_l2_decay(b, st, p_prev, p, g, c);
        else optim_adamw_rounding_band_step(b, st, p_prev, p, g, c);
        return;
    }
    const bool nearest = b->recurrence && !strcmp(b->recurrence, "nearest_code");
    Quantizer q[2];
    for (int k = 0; k < 2; k++) {
        const StateTensor* own = optim_adamw_bnb_8bit.find_shared_state(k ? "qmap2" : "qmap1");
        q[k].map = b->qmap[k] ? b->qmap[k] : own->data;
        q[k].lut = nearest ? NULL : lut_of(q[k].map);
    }
    const size_t n = b->n;
    const uint8_t* c1 = s1->data;
    const uint8_t* c2 = optim_state_find(st, "state2")->data;
    const float* am1 = optim_state_find(st, "absmax1")->data;
    const float* am2 = optim_state_find(st, "absmax2")->data;
    double* Bc1 = rounding_band_state(b, st, "state1");
    double* Bc2 = rounding_band_state(b, st, "state2");
    double* Ba1 = rounding_band_state(b, st, "absmax1");
    double* Ba2 = rounding_band_state(b, st, "absmax2");
    // aux: the dequantized m and v of the previous step (0 before the first: absmax 0)
    const DeqInterval M = {b->aux[0], b->aux[1], b->aux[2]}, V = {b->aux[3], b->aux[4], b->aux[5]};
    double* Ep = b->param;
    const double t = (double)st->step, b1 = c->beta1, b2 = c->beta2;
    const double s = c->lr / (1.0 - pow(b1, t)), cc = sqrt(1.0 - pow(b2, t));
    const double d = c->weight_decay > 0 && !l2 ? 1.0 - c->lr * c->weight_decay : 1.0;
    const float wdf = (float)c->weight_decay;
    const float b1f = (float)b1, w1f = (float)(1.0 - b1), b2f = (float)b2, w2f = (float)(1.0 - b2);
    float m[BLOCK], v[BLOCK];
    double mlo[BLOCK], mhi[BLOCK], vlo[BLOCK], vhi[BLOCK];
    for (size_t off = 0; off < n; off += BLOCK) {
        const size_t len = n - off < BLOCK ? n - off : BLOCK, blk = off / BLOCK;
        for (size_t j = 0; j < len; j++) {
            const size_t i = off + j;
            // the gradient the recurrence sums: g, or the L2 variant's fma(wd, p, g); the band's
            // operand magnitude |g| + |wd*p| (g + wd*p may cancel) and p's own band through wd*p
            const float gf = l2 ? fmaf(wdf, p_prev[i], g[i]) : g[i];
            const double gi = gf, gmag = l2 ? fabs((double)g[i]) + fabs(c->weight_decay * p_prev[i]) : fabs(gi);
            const double eg = l2 && isfinite(Ep[i]) ? c->weight_decay * Ep[i] + BU * gmag : 0;
            // the reference's new m and v, as the library computes them (OPTIM_SEMANTICS.md 4.2)
            m[j] = fmaf(gf, w1f, (float)M.ref[i] * b1f);
            v[j] = fmaf(w2f * gf, gf, (float)V.ref[i] * b2f);
            // every correct implementation's: m = b1*m_dq + (1-b1)*g over its dequantized
            // interval (b1, 1-b1 >= 0: monotone), plus its own roundings: the dequantizing
            // product, the coefficients, the products and the sum, or either lerp formula:
            // 5u of the operands' magnitudes (a subnormal step when any is nonzero; exact zeros
            // stay exact in every ordering)
            const double am = abs_hi(M.lo[i], M.hi[i]), av = abs_hi(V.lo[i], V.hi[i]);
            const double rm = 5 * BU * (b1 * am + gmag * (1 + (1 - b1))) + (1 - b1) * eg + (am != 0 || gi != 0 ? BSUB : 0);
            const double rv = 5 * BU * (b2 * av + (1 - b2) * gmag * gmag) + (1 - b2) * (2 * gmag * eg + eg * eg) +
                              (av != 0 || gi != 0 ? BSUB : 0);
            mlo[j] = fmin(m[j], b1 * M.lo[i] + (1 - b1) * gi - rm);
            mhi[j] = fmax(m[j], b1 * M.hi[i] + (1 - b1) * gi + rm);
            vlo[j] = fmin(v[j], b2 * V.lo[i] + (1 - b2) * gi * gi - rv);
            vhi[j] = fmax(v[j], b2 * V.hi[i] + (1 - b2) * gi * gi + rv);
            // the parameter: AdamW's band (optim_adamw_torch.c) for the decay and the update's own
            // roundings; the update U = s*m / (sqrt(v)/c + eps) over the m and v intervals exactly
            // (not to first order: a code flip of a small v moves sqrt(v) by a large factor): U is
            // linear in m and monotone in v, so its extremes are at the corners
            const double vi = v[j], D = sqrt(vi) / cc + c->eps, U = s * m[j] / D;
            double eu = 0;
            for (int a = 0; a < 4; a++) {
                const double mc = a & 1 ? mhi[j] : mlo[j], vc = a & 2 ? vhi[j] : fmax(vlo[j], 0.0);
                eu = fmax(eu, fabs(s * mc / (sqrt(vc) / cc + c->eps) - U));
            }
            const double e = fabs(d) * Ep[i] + 2 * BU * fabs((double)p_prev[i]) * (1 + fabs(c->lr * c->weight_decay)) +
                             BU * fabs((double)p[i]) + fabs(U) * 10 * BU + eu + BSUB;
            Ep[i] = isfinite(e) ? e : NAN;
        }
        quantize_interval(&q[0], false, m, mlo, mhi, len, c1 + off, am1[blk], Bc1 + off, &Ba1[blk], M, off);
        quantize_interval(&q[1], true, v, vlo, vhi, len, c2 + off, am2[blk], Bc2 + off, &Ba2[blk], V, off);
    }
}

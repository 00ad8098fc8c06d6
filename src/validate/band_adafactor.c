// band_adafactor.c — the rounding-order bands of both Adafactor dialects (transformers'
// Adafactor "adafactor", torch.optim.Adafactor "adafactor_torch"), derived in
// reference/CONFORMANCE.md "The Adafactor bands, derived".
// Each step follows the reference trajectory (the golden's, replayed bit for bit by our own
// optimizer, or a known-mistake variant's): from the reference state after the step, the
// params before and after it and the gradient, it advances per element a first-order bound
// on |x - x_ref| that any implementation of the same formulas, rounding in another correct
// fp32 order, can reach. u = 2^-24. Every local rounding term is counted for both sides
// (the candidate's roundings and the reference's, each against exact arithmetic on the same
// inputs): that is the factor 2 in front of every k*u below.
// Reductions: a sum of n non-negative terms computed in any order is within (n-1)u of its
// exact value relatively (first order: every partial sum is <= the total), sequential,
// pairwise, 8-lane or float64 alike; the terms here (squares, second moments) are all >= 0.
// Not here: comparing against the band (conform.c), the registry and the band arrays
// (rounding_band.c), adamw_torch's band (its optimizer file).
#include "validate/rounding_band.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BU 0x1p-24                 // unit roundoff of fp32
#define BSUB (8 * 0x1p-149)        // below 2^-126 a rounding errs by half a subnormal step absolutely

static const float* state_data(const OptimState* st, const char* name) {
    const StateTensor* t = optim_state_find(st, name);
    return t ? t->data : NULL;
}

// A band that is not finite is no band: NaN (only the library's exact bits pass there). Such an
// element adds nothing to the bands of the quantities it feeds (a norm over the tensor, a
// mean): a candidate that differs there fails on that element itself, so wherever it passes it
// holds the library's value there.
static inline double finite_or_nan(double e) { return isfinite(e) ? e : NAN; }

// RMS of the parameter before the step, sqrt(sum p^2 / n), and its band: the sum of n rounded
// squares (n u), the sqrt, sqrt(n) and the division (3u), both sides; plus the parameter's own
// band carried in: |norm(p + dp) - norm(p)| <= norm(dp), so sqrt(sum E_p^2 / n).
static void param_rms(const float* p_prev, const double* Ep, size_t n, double* rms, double* e_rms) {
    double sq = 0, e2 = 0;
    for (size_t i = 0; i < n; i++) {
        sq += (double)p_prev[i] * p_prev[i];
        if (isfinite(Ep[i])) e2 += Ep[i] * Ep[i];  // no band: must be exact (see finite_or_nan)
    }
    const double nn = n ? (double)n : 1;
    *rms = sqrt(sq / nn);
    *e_rms = 2 * (nn / 2 + 3) * BU * *rms + sqrt(e2 / nn) + BSUB;
}

// The relative band of RMS(U) = norm(U)/sqrt(n) from the elements' relative bands rho_i:
// ||dU|| <= sqrt(sum (rho_i U_i)^2) carried in, plus the reduction (n u / 2 after the sqrt,
// 3u for sqrt, sqrt(n), division), both sides. NaN when U has no finite norm.
static double rms_rel_band(const double* U, const double* rho, size_t n) {
    double s = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        s += U[i] * U[i];
        const double d = rho[i] * U[i];
        if (isfinite(d)) e += d * d;  // no band: must be exact (see finite_or_nan)
    }
    if (!(s > 0)) return s == 0 ? 0 : NAN;
    return sqrt(e / s) + 2 * ((double)n / 2 + 3) * BU;
}

// A factor max(1, r) (update clipping) with r known to relative band rho_r: 0 where r cannot
// reach 1 within its band (clip is exactly 1 on both sides), else rho_r plus the division by
// the threshold (2u both sides). max is 1-Lipschitz, so |d clip|/clip <= |d r|/r.
static double clip_rel_band(double r, double rho_r) {
    if (!isfinite(r) || !isfinite(rho_r)) return NAN;
    return r * (1 + rho_r + 4 * BU) < 1 ? 0 : rho_r + 4 * BU;
}

// ---- transformers Adafactor ----
// Recurrence (optim_adafactor_hf.c): RMS = rms(p); lr_t = rel * (scale ? max(eps2, RMS) : 1);
// u = g^2 + eps1; factored: row = keep*row + add*mean_c(u), col = keep*col + add*mean_r(u),
// U = g * rsqrt(row/mean(row)) * rsqrt(col); 1-D: v = keep*v + add*u, U = g*rsqrt(v);
// clip = max(1, rms(U)/clip_threshold); Uh = U/clip*lr_t; [m = b1*m + (1-b1)*Uh; Uh = m];
// p = p - wd*lr_t*p - Uh. aux[0]: previous row / v, aux[1]: previous col, aux[2]: previous m.
void band_adafactor_hf_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                            const float* g, const OptimConfig* c) {
    const size_t n = b->n;
    const double t = (double)st->step;
    double* Ep = b->param;
    // The derivation below takes every second-moment term as >= 0 (no cancellation): eps1 >= 0
    // and keep = 1 - t^decay_rate in [0, 1] (decay_rate <= 0). transformers accepts eps1 < 0
    // and decay_rate > 0 (goldens wide_eps1_negative_20x28, wide_decay_rate_0.3_20x28); there
    // g^2 + eps1 or keep*row may cancel, and the band is none: only the library's bits pass.
    if (c->eps1 < 0 || c->decay_rate > 0) {
        for (size_t i = 0; i < n; i++) Ep[i] = NAN;
        for (int k = 0; k < st->n_tensors; k++)
            if (b->state[k])
                for (size_t i = 0, m = shape_numel(&st->tensors[k].shape); i < m; i++) b->state[k][i] = NAN;
        return;
    }
    // RMS of p (a state tensor: the value before this step's changes)
    double rms, e_rms;
    param_rms(p_prev, Ep, n, &rms, &e_rms);
    double* E_RMS = rounding_band_state(b, st, "RMS");
    if (E_RMS) E_RMS[0] = finite_or_nan(e_rms);
    // lr_t: rel (Python doubles; 1/sqrt(t) and min in float32 differ by <= 2u: 4u both sides),
    // times max(eps2, RMS) (RMS's band when RMS can be the larger), times: 2u, lr_t as fp32 2u
    double rel = c->lr;
    if (c->relative_step) rel = fmin(c->warmup_init ? 1e-6 * t : 1e-2, 1.0 / sqrt(t));
    const double scale = c->scale_parameter ? fmax(c->eps2, rms) : 1.0;
    const double lr_t = rel * scale;
    const double rho_lr = 8 * BU + (c->scale_parameter && rms + e_rms > c->eps2 ? e_rms / fmax(c->eps2, rms) : 0);
    // coefficients keep = 1 - t^decay_rate, add = t^decay_rate: a float32 pow or 1 - keep from
    // a rounded keep is within 2u of the double: 4u both sides, inside the 2(k+5)u below
    const double keep = 1.0 - pow(t, c->decay_rate);
    double* U = xmalloc((n ? n : 1) * sizeof(double));    // the reference's update before clipping
    double* rho = xmalloc((n ? n : 1) * sizeof(double));  // its relative band
    if (st->shape.ndim >= 2) {
        size_t batch, R, C;
        shape_as_matrices(&st->shape, &batch, &R, &C);
        const float* row = state_data(st, "exp_avg_sq_row");
        const float* col = state_data(st, "exp_avg_sq_col");
        double* Er = rounding_band_state(b, st, "exp_avg_sq_row");
        double* Ec = rounding_band_state(b, st, "exp_avg_sq_col");
        for (size_t k = 0; k < batch; k++) {
            const float* rk = row + k * R;
            const float* ck = col + k * C;
            double* Erk = Er + k * R;
            double* Eck = Ec + k * C;
            // row = keep*row + add*mean(u): every term >= 0, so each rounding is relative to
            // row_t: mean of C terms (C-1 sums, the division: C u), u = g^2 + eps1 (2u), the
            // coefficients (2u), the product and the sum (2u); both sides: 2(C+5)u
            for (size_t i = 0; i < R; i++) Erk[i] = finite_or_nan(keep * Erk[i] + 2 * ((double)C + 5) * BU * rk[i] + BSUB);
            for (size_t j = 0; j < C; j++) Eck[j] = finite_or_nan(keep * Eck[j] + 2 * ((double)R + 5) * BU * ck[j] + BSUB);
            // mean(row): R terms >= 0 carrying their bands, plus (R+1)u both sides
            double rm = 0, erm = 0;
            for (size_t i = 0; i < R; i++) {
                rm += rk[i];
                if (isfinite(Erk[i])) erm += Erk[i];
            }
            rm /= (double)R;
            erm = erm / (double)R + 2 * ((double)R + 1) * BU * rm;
            // U = g * rsqrt(row/rm) * rsqrt(col): half the relative bands of row, rm and col
            // (a square root halves a relative error) plus row/rm, two rsqrt (sqrt and 1/x) and
            // two products: 6.5u per side, 13u both
            for (size_t i = 0; i < R; i++)
                for (size_t j = 0; j < C; j++) {
                    const size_t e = k * R * C + i * C + j;
                    U[e] = (double)g[e] / sqrt((double)rk[i] / rm) / sqrt((double)ck[j]);
                    rho[e] = 0.5 * (Erk[i] / rk[i] + erm / rm + Eck[j] / ck[j]) + 13 * BU;
                }
        }
    } else {
        const float* v = state_data(st, "exp_avg_sq");
        double* Ev = rounding_band_state(b, st, "exp_avg_sq");
        for (size_t i = 0; i < n; i++) {
            // v = keep*v + add*(g^2 + eps1): u (2u), coefficients (2u), product and sum (2u)
            Ev[i] = finite_or_nan(keep * Ev[i] + 12 * BU * v[i] + BSUB);
            U[i] = (double)g[i] / sqrt((double)v[i]);
            rho[i] = Ev[i] / (2 * (double)v[i]) + 6 * BU;  // rsqrt (2u) and the product: 3u per side
        }
    }
    // clipping: clip = max(1, RMS(U)/clip_threshold)
    double su = 0;
    for (size_t i = 0; i < n; i++) su += U[i] * U[i];
    const double rms_u = n ? sqrt(su / (double)n) : 0;
    // (clamp_(min=1) keeps a NaN: NaN everywhere, no band; an infinite RMS makes every finite
    // element's update exactly 0)
    const double clip = fmax(1.0, rms_u / c->clip_threshold);
    const double rho_clip = isinf(clip) ? 0 : clip_rel_band(rms_u / c->clip_threshold, rms_rel_band(U, rho, n));
    const float* m = c->has_beta1 ? state_data(st, "exp_avg") : NULL;
    double* Em = c->has_beta1 ? rounding_band_state(b, st, "exp_avg") : NULL;
    double* m_prev = b->aux[2];
    const double alpha = -c->weight_decay * lr_t;
    for (size_t i = 0; i < n; i++) {
        // Uh = U/clip*lr_t (division or multiplication by 1/clip, then lr: 2u per side)
        const double uh = U[i] / clip * lr_t;
        const double rho_uh = uh != 0 ? rho[i] + rho_clip + rho_lr + 4 * BU : 0;
        double e_upd;
        if (m) {
            // m = b1*m + (1-b1)*Uh: the coefficients, the products, the sum (fma or not): 4u
            // per side of the operands' magnitudes; Uh's band enters times |1-b1| (magnitudes:
            // transformers takes any beta1, e.g. 1.5 or -0.5, goldens wide_beta1_*)
            const double b1 = c->beta1, ap = fabs(b1 * m_prev[i]) + fabs((1 - b1) * uh);
            Em[i] = finite_or_nan(fabs(b1) * Em[i] + fabs(1 - b1) * fabs(uh) * rho_uh + 8 * BU * ap + BSUB);
            m_prev[i] = m[i];
            e_upd = Em[i];
        } else {
            e_upd = fabs(uh) * rho_uh;
        }
        // p = p + alpha*p - Uh: alpha = -wd*lr_t carries lr_t's band (+2u per side); the decay's
        // product and sum (2u per side of |p| + |alpha p|) and the final subtraction (u per side)
        const double pp = p_prev[i], ap = fabs(alpha * pp);
        double e = fabs(1 + alpha) * Ep[i] + 2 * BU * fabs((double)p[i]) + e_upd + BSUB;
        if (c->weight_decay != 0) e += ap * (rho_lr + 4 * BU) + 4 * BU * (fabs(pp) + ap);
        Ep[i] = finite_or_nan(e);
    }
    // the second moment's previous values for the next step are the reference's current ones
    // (kept by the reference state itself: nothing to store); U, rho are per step
    free(U);
    free(rho);
}

// ---- torch.optim.Adafactor ----
// Recurrence (optim_adafactor_torch.c): w = t^beta2_decay; rho = min(lr, 1/sqrt(t));
// alpha = max(eps2, rms(p)) * rho; p = p*(1 - lr*wd); factored: row = lerp(row, norm_c(g)^2/C, w),
// col = lerp(col, norm_r(g)^2/R, w), V = row*col / max(mean(row), eps1); 1-D: var = lerp(var, g^2, w),
// V = var; U = g * rsqrt(max(V, eps1^2)); denom = max(1, norm(U)/(sqrt(n)*d)); p = p - alpha/denom * U.
// aux[0]: previous row / var, aux[1]: previous col.
// lerp(a, b, w) written any way (a + w(b-a), b - (1-w)(b-a), (1-w)a + wb, fma or not) rounds at
// most 3 times on operands bounded by |a| + |b| (b - a is not relative to the result), plus
// the weight (w or 1 - w, 2u): 5u (|a| + |b|) per side, 10u both.
static inline double lerp_band(double w, double e_a, double e_b, double a, double b) {
    return fabs(1 - w) * e_a + fabs(w) * e_b + 10 * BU * (fabs(a) + fabs(b));
}

void band_adafactor_torch_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                               const float* g, const OptimConfig* c) {
    const size_t n = b->n;
    const double t = (double)st->step;
    double* Ep = b->param;
    const double eps1 = c->eps1 < 0 ? (double)0x1p-23f : c->eps1;
    const double w = pow(t, c->decay_rate);
    double rms, e_rms;
    param_rms(p_prev, Ep, n, &rms, &e_rms);
    // alpha = max(eps2, RMS) * min(lr, 1/sqrt(t)): RMS's band when it can be the larger; rho's
    // two operations and the product (3u per side)
    const double rho_lr = fmin(c->lr, 1.0 / sqrt(t));
    const double alpha = fmax(c->eps2, rms) * rho_lr;
    const double rho_alpha = 6 * BU + (rms + e_rms > c->eps2 ? e_rms / fmax(c->eps2, rms) : 0);
    double* U = xmalloc((n ? n : 1) * sizeof(double));
    double* rho = xmalloc((n ? n : 1) * sizeof(double));
    double* prev0 = b->aux[0];
    double* prev1 = b->aux[1];
    if (st->shape.ndim >= 2) {
        size_t batch, R, C;
        shape_as_matrices(&st->shape, &batch, &R, &C);
        const float* row = state_data(st, "row_var");
        const float* col = state_data(st, "col_var");
        double* Er = rounding_band_state(b, st, "row_var");
        double* Ec = rounding_band_state(b, st, "col_var");
        for (size_t k = 0; k < batch; k++) {
            const float* gk = g + k * R * C;
            const float* rk = row + k * R;
            const float* ck = col + k * C;
            double *Erk = Er + k * R, *Eck = Ec + k * C, *rpk = prev0 + k * R, *cpk = prev1 + k * C;
            // row_mean = norm_c(g)^2 / C, or sum(g^2)/C: C rounded squares and their sum (C u),
            // the sqrt and the square or neither, the division (3u): per side (C+3)u, relative
            for (size_t i = 0; i < R; i++) {
                double s = 0;
                for (size_t j = 0; j < C; j++) s += (double)gk[i * C + j] * gk[i * C + j];
                const double mean = s / (double)C, e_mean = 2 * ((double)C + 3) * BU * mean;
                Erk[i] = finite_or_nan(lerp_band(w, Erk[i], e_mean, rpk[i], mean) + BSUB);
                rpk[i] = rk[i];
            }
            for (size_t j = 0; j < C; j++) {
                double s = 0;
                for (size_t i = 0; i < R; i++) s += (double)gk[i * C + j] * gk[i * C + j];
                const double mean = s / (double)R, e_mean = 2 * ((double)R + 3) * BU * mean;
                Eck[j] = finite_or_nan(lerp_band(w, Eck[j], e_mean, cpk[j], mean) + BSUB);
                cpk[j] = ck[j];
            }
            // max(mean(row), eps1): R terms >= 0 with their bands, (R+1)u per side; the clamp is
            // 1-Lipschitz
            double rm = 0, erm = 0;
            for (size_t i = 0; i < R; i++) {
                rm += rk[i];
                if (isfinite(Erk[i])) erm += Erk[i];
            }
            rm /= (double)R;
            erm = erm / (double)R + 2 * ((double)R + 1) * BU * rm;
            const double rmc = fmax(rm, eps1);
            const double rel_rm = rm + erm > eps1 ? erm / rmc : 0;
            for (size_t i = 0; i < R; i++)
                for (size_t j = 0; j < C; j++) {
                    const size_t e = k * R * C + i * C + j;
                    const double V = (double)rk[i] * ck[j] / rmc, floor = eps1 * eps1;
                    // V's relative band: row, col, the clamped mean, product and division (2u per
                    // side); where V can fall to the eps1^2 floor the floor's own value is exact
                    const double rel_v = Erk[i] / rk[i] + Eck[j] / ck[j] + rel_rm + 4 * BU;
                    const double Vc = fmax(V, floor);
                    U[e] = (double)gk[i * C + j] / sqrt(Vc);
                    // rsqrt (sqrt and 1/x) and the product: 3u per side
                    rho[e] = (V * (1 + rel_v) > floor ? 0.5 * rel_v * V / Vc : 0) + 6 * BU;
                }
        }
    } else {
        const float* var = state_data(st, "variance");
        double* Ev = rounding_band_state(b, st, "variance");
        const double floor = eps1 * eps1;
        for (size_t i = 0; i < n; i++) {
            const double g2 = (double)g[i] * g[i];
            // var = lerp(var, g*g, w): g*g rounds once (2u both sides, relative)
            Ev[i] = finite_or_nan(lerp_band(w, Ev[i], 2 * BU * g2, prev0[i], g2) + BSUB);
            prev0[i] = var[i];
            const double V = var[i], Vc = fmax(V, floor);
            U[i] = (double)g[i] / sqrt(Vc);
            rho[i] = (V + Ev[i] > floor ? 0.5 * Ev[i] / Vc : 0) + 6 * BU;
        }
    }
    // denom = max(1, norm(U) / (sqrt(n) * d))
    double su = 0;
    for (size_t i = 0; i < n; i++) su += U[i] * U[i];
    const double r = n ? sqrt(su / (double)n) / c->d : 0;
    // torch's Python max(1.0, nan) is 1.0: a NaN norm leaves denom exactly 1; an infinite norm
    // makes it inf and the update exactly 0 (for finite U): no band needed from it either way
    const double denom = isnan(r) ? 1.0 : fmax(1.0, r);
    const double rho_denom = isfinite(r) ? clip_rel_band(r, rms_rel_band(U, rho, n)) : 0;
    // p = p*decay + a*U with a = -alpha/denom as fp32 (2u per side): decay's coefficient
    // (1 - lr*wd, or lr*wd, rounded: u (1 + lr*wd) of |p| per side) and product or difference
    // (u of |p| + |lr*wd*p| per side), the final sum (u per side of |p_t|)
    const double a = alpha / denom, rho_a = rho_alpha + rho_denom + 4 * BU;
    const double lw = fabs(c->lr * c->weight_decay), decay = 1.0 - c->lr * c->weight_decay;
    for (size_t i = 0; i < n; i++) {
        const double upd = fabs(a * U[i]);
        double e = fabs(decay) * Ep[i] + (upd != 0 ? upd * (rho_a + rho[i]) : 0) + 2 * BU * fabs((double)p[i]) + BSUB;
        if (c->weight_decay != 0) e += 4 * BU * fabs((double)p_prev[i]) * (1 + lw);
        Ep[i] = finite_or_nan(e);
    }
    free(U);
    free(rho);
}

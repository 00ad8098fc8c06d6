// optim_adamw_torch.c — torch.optim.AdamW, single-tensor (for-loop) path, fp32 params.
// reference: pytorch torch/optim/adam.py _single_tensor_adam (AdamW = decoupled decay)
// Per element, in torch's order and float32 rounding points (SPEC.md 3.1):
//   p <- p * f32(1 - lr*wd)                              param.mul_(1 - lr*weight_decay)
//   w = f32(1-b1)                                        exp_avg.lerp_(grad, 1-beta1): torch's
//   m <- fma(w, g - m, m)        when |w| < 0.5 (b1 > 0.5) lerp has two formulas by weight
//   m <- fma(w - 1, g - m, g)    otherwise (b1 <= 0.5)   (ATen Lerp.h lerp_vec; torch_lerp)
//   v <- fma(f32(1-b2) * g, g, v * f32(b2))              mul_ then addcmul_ (its CPU kernel
//                                                        computes self + (value*t1)*t2, fused)
//   bc1 = 1 - b1^t, bc2 = 1 - b2^t in double; step_size = lr/bc1; bc2_sqrt = bc2 ** 0.5
//   denom = sqrt(v) / f32(bc2_sqrt) + f32(eps)             sqrt = torch's CPU sqrt (MKL,
//                                                        not correctly rounded): torch_sqrt.h
//   p <- p + (f32(-step_size) * m) / denom               param.addcdiv_(exp_avg, denom, -step_size)
//                                                        (its CPU kernel: self + (value*t1)/t2)
// These rounding points were pinned down by reference/check_optim_semantics.py against the
// installed torch (see reference/OPTIM_SEMANTICS.md).
// State: exp_avg, exp_avg_sq (fp32, param's shape), step (0-d fp32), as torch keeps them.
// maximize: grad = -grad (exact), taken as the gradient factor's sign (g * -g_scale == -(g * g_scale)).
// amsgrad: max_exp_avg_sq <- torch.maximum(max_exp_avg_sq, v) (NaN if either is NaN), and the
// denominator takes sqrt(max_exp_avg_sq) instead of sqrt(v); state max_exp_avg_sq (fp32, param's shape).
// foreach=True (_multi_tensor_adam) gives these bits on CPU (its _foreach_ ops run the single-
// tensor kernels per tensor); the fused kernel is adamw_torch_fused. Not here: bf16 params.
#include <math.h>

#include "optim/optim.h"
#include "optim/torch_sqrt.h"
#include "core/cpu.h"

static void adamw_defaults(OptimConfig* c) {
    c->lr = 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 1e-2;
}

// torch/optim/adam.py Adam.__init__'s rules (optim_torch_adamw_check), then what we do not mirror.
// foreach=True is accepted and bit-exact (above); fused=True is accepted and computes the same
// formulas within conform_tolerance (the fused kernel's exact bits are adamw_torch_fused's:
// another sqrt, and another second-moment contraction in its last numel % 8 elements).
static Status adamw_validate(const OptimConfig* c) {
    Status s = optim_torch_adamw_check(c);
    if (!status_is_ok(s)) return s;
    if (c->capturable) return optim_not_implemented("adamw_torch", "capturable=true (tensor bias corrections)");
    return status_ok();
}

static OptimState* adamw_init(const TensorShape* shape, const OptimConfig* c) {
    return optim_torch_adamw_state_new(&optim_adamw_torch, shape, c);
}

// Portable kernel: any CPU; torch_sqrtf's table lookup keeps GCC from vectorizing it.
// lerp_coeff, lerp_from_start: torch_lerp(m, g, w1) split into its branch (chosen once per step):
// small weight: fma(w1, g - m, m); otherwise fma(w1 - 1, g - m, g).
static void adamw_kernel_portable(float* restrict p, const float* restrict g, float* restrict m,
                                  float* restrict v, float* restrict vmax, size_t n, float decay, float lerp_coeff,
                                  bool lerp_from_start, float b2, float w2, float bc2_sqrt, float eps,
                                  float neg_step_size, float g_scale, bool hw_seed) {
    (void)hw_seed;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float pi = p[i] * decay;  // decay == 1.0f when weight_decay == 0: exact, same as skipping
        float gi = g[i] * g_scale;  // clipping's g * coef (g_scale 1.0f: g itself, NaN included)
        float mi = fmaf(lerp_coeff, gi - m[i], lerp_from_start ? m[i] : gi);
        float vi = fmaf(w2 * gi, gi, v[i] * b2);
        float vd = vi;  // amsgrad (vmax): torch.maximum(max_exp_avg_sq, v)
        if (vmax) vmax[i] = vd = optim_torch_maximum(vmax[i], vi);
        float denom = torch_sqrtf(vd) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + (neg_step_size * mi) / denom;
    }
}

#if defined(__x86_64__)
// The same operations, 8 lanes at a time, torch's sqrt computed by SQRT8(vi): one body for both
// vector kernels below. Bit-identical to the portable kernel.
#define ADAMW_KERNEL_BODY(SQRT8, AMSGRAD)                                                                             \
    const size_t n8 = n / 8 * 8;                                                                                       \
    const __m256 vdecay = _mm256_set1_ps(decay), vw1 = _mm256_set1_ps(lerp_coeff), vb2 = _mm256_set1_ps(b2),           \
                 vw2 = _mm256_set1_ps(w2), vbc = _mm256_set1_ps(bc2_sqrt), veps = _mm256_set1_ps(eps),                 \
                 vss = _mm256_set1_ps(neg_step_size), vgs = _mm256_set1_ps(g_scale);                                   \
    _Pragma("omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)")                                             \
    for (size_t i = 0; i < n8; i += 8) {                                                                              \
        __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), vdecay);                                                    \
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs), m0 = _mm256_loadu_ps(m + i);                          \
        __m256 mi = _mm256_fmadd_ps(vw1, _mm256_sub_ps(gi, m0), lerp_from_start ? m0 : gi);                          \
        __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(vw2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), vb2));         \
        __m256 vd = vi;                                                                                                \
        if (AMSGRAD) {                                                                                                 \
            vd = optim_torch_maximum8(_mm256_loadu_ps(vmax + i), vi);                                                  \
            _mm256_storeu_ps(vmax + i, vd);                                                                            \
        }                                                                                                              \
        __m256 denom = _mm256_add_ps(_mm256_div_ps(SQRT8(vd), vbc), veps);                                            \
        _mm256_storeu_ps(m + i, mi);                                                                                   \
        _mm256_storeu_ps(v + i, vi);                                                                                   \
        _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(vss, mi), denom)));                     \
    }                                                                                                                  \
    adamw_kernel_portable(p + n8, g + n8, m + n8, v + n8, vmax ? vmax + n8 : NULL, n - n8, decay, lerp_coeff,         \
                          lerp_from_start, b2, w2, bc2_sqrt, eps, neg_step_size, g_scale, hw_seed)

// torch's sqrt seeded by the CPU's rsqrtps where torch_sqrt_hw_matches() proved it gives the
// table's bits (hw_seed), else by the table gathered (torch_sqrt8_avx2): MKL's SSE kernel
#define ADAMW_SQRT8_SSE(x) torch_sqrt8_avx2((x), hw_seed)
__attribute__((target("avx2,fma"))) static void adamw_kernel_avx2(
    float* restrict p, const float* restrict g, float* restrict m, float* restrict v, float* restrict vmax, size_t n,
    float decay, float lerp_coeff, bool lerp_from_start, float b2, float w2, float bc2_sqrt, float eps,
    float neg_step_size, float g_scale, bool hw_seed) {
    if (vmax) {
        ADAMW_KERNEL_BODY(ADAMW_SQRT8_SSE, true);
    } else {
        ADAMW_KERNEL_BODY(ADAMW_SQRT8_SSE, false);
    }
}

// MKL's AVX-512 kernel (TORCH_SQRT_MKL_AVX512; CPUs with AVX-512VL): torch_sqrt8_mkl_avx512
__attribute__((target("avx2,fma,avx512f,avx512vl"))) static void adamw_kernel_mkl512(
    float* restrict p, const float* restrict g, float* restrict m, float* restrict v, float* restrict vmax, size_t n,
    float decay, float lerp_coeff, bool lerp_from_start, float b2, float w2, float bc2_sqrt, float eps,
    float neg_step_size, float g_scale, bool hw_seed) {
    if (vmax) {
        ADAMW_KERNEL_BODY(torch_sqrt8_mkl_avx512, true);
    } else {
        ADAMW_KERNEL_BODY(torch_sqrt8_mkl_avx512, false);
    }
}
#endif

// One step on g * g_scale (g_scale 1.0f: on g; x * 1.0f is x for every float, so the plain
// step and the scaled one are the same code)
static void adamw_step_scaled(OptimState* st, float* p, const float* g, float g_scale, const OptimConfig* c) {
    torch_sqrt_init();
    st->step++;
    float* step_t = st->tensors[2].data;
    *step_t = (float)st->step;  // torch: step_t += 1 (exact in fp32 up to 2^24 steps)
    const double t = (double)st->step;
    const double bc1 = 1.0 - pow(c->beta1, t);
    const double bc2 = 1.0 - pow(c->beta2, t);
    const double step_size = c->lr / bc1;
    const double bc2_sqrt = pow(bc2, 0.5);
    void (*kernel)(float* restrict, const float* restrict, float* restrict, float* restrict, float* restrict, size_t,
                   float, float, bool, float, float, float, float, float, float, bool) = adamw_kernel_portable;
#if defined(__x86_64__)
    if (torch_sqrt_vector()) kernel = adamw_kernel_avx2;
    else if (g_torch_sqrt_kernel == TORCH_SQRT_MKL_AVX512 && cpu_features()->avx512vl) kernel = adamw_kernel_mkl512;
#endif
    const float w1 = (float)(1.0 - c->beta1);
    const bool small = w1 < 0.5f && w1 > -0.5f;  // torch_lerp's branch (optim.h)
    // maximize: grad = -grad, an exact negation: g * (-g_scale) is -(g * g_scale) for every float
    kernel(p, g, st->tensors[0].data, st->tensors[1].data, optim_torch_adamw_vmax(st), shape_numel(&st->shape),
           (float)(1.0 - c->lr * c->weight_decay), small ? w1 : w1 - 1.0f, small, (float)c->beta2,
           (float)(1.0 - c->beta2), (float)bc2_sqrt, (float)c->eps, (float)(-step_size),
           c->maximize ? -g_scale : g_scale, torch_sqrt_hw_matches());
}

static void adamw_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    adamw_step_scaled(st, p, g, 1.0f, c);
}

// The rounding-order band (derived in reference/CONFORMANCE.md, "Verdict bands: AdamW"), u = 2^-24,
// first order, per element, from the reference trajectory (m, v, p of this file's own step):
//   L_t   = |m_(t-1)| + |g|                                the lerp's operands: either formula of
//                                                          lerp rounds g - m (or a product of each)
//   E_m,t = b1*E_m,(t-1) + K_M*u*L_t                       K_M = 4: coefficient rounding, g - m or the
//                                                          products, the sum (lerp, fma or mul+add)
//   E_v,t = b2*E_v,(t-1) + K_V*u*v_t                       K_V = 5: all terms >= 0 (relative)
//   D = sqrt(v)/c + eps, U = s*m/D (s = lr/bc1, c = sqrt(bc2), in double)
//   E_p,t = |d|*E_p,(t-1) + K_D*u*|p_(t-1)|*(1 + lr*wd) + u*|p_t|
//           + |U|*(K_U*u + E_v/(2v)) + s*E_m/D              K_D = 2, K_U = 10 (sqrt <= 2u incl. MKL,
//                                                          /c, c, +eps, s, s*m, /D: 1u each, margin 1)
// Each of E_m, E_v, E_p also gains 8 * 2^-149 per step: below 2^-126 rounding errs by half a
// subnormal step absolutely, not relatively. Non-finite reference values get no band (only the
// library's own NaN/inf pattern passes there), and an ordering that overflows where the library
// does not (w2*(g*g) for |g| ~ 1e20, where torch's addcmul computes (w2*g)*g) is outside it.
#define BAND_U 0x1p-24
#define BAND_SUB (8 * 0x1p-149)
void optim_adamw_rounding_band_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                                    const float* g, const OptimConfig* c) {
    const float* m = st->tensors[0].data;
    const float* v = st->tensors[1].data;
    const double t = (double)st->step, b1 = c->beta1, b2 = c->beta2;
    const double s = c->lr / (1.0 - pow(b1, t)), cc = sqrt(1.0 - pow(b2, t)), d = 1.0 - c->lr * c->weight_decay;
    double *m_prev = b->aux[0], *Em = b->state[0], *Ev = b->state[1], *Ep = b->param;
    // amsgrad: the denominator's max(v_1..v_t) is off by at most the largest band it took a v from
    const StateTensor* vmax_t = optim_state_find(st, "max_exp_avg_sq");
    const float* vmax = vmax_t ? vmax_t->data : NULL;
    double* Evmax = vmax_t ? b->state[vmax_t - st->tensors] : NULL;  // the band of that state tensor
    for (size_t i = 0; i < b->n; i++) {
        const double gi = g[i], mi = m[i];
        Em[i] = b1 * Em[i] + 4 * BAND_U * (fabs(m_prev[i]) + fabs(gi)) + BAND_SUB;
        m_prev[i] = mi;
        Ev[i] = b2 * Ev[i] + 5 * BAND_U * (double)v[i] + BAND_SUB;
        double vi = v[i], Evi = Ev[i];  // the denominator's second moment and its band
        if (Evmax) {
            Evmax[i] = fmax(Evmax[i], Ev[i]);
            vi = vmax[i], Evi = Evmax[i];
        }
        const double D = sqrt(vi) / cc + c->eps, U = s * mi / D;
        const double rel_v = vi > 0 ? Evi / (2 * vi) : 0;
        Ep[i] = fabs(d) * Ep[i] + 2 * BAND_U * fabs((double)p_prev[i]) * (1 + fabs(c->lr * c->weight_decay)) +
                BAND_U * fabs((double)p[i]) + fabs(U) * (10 * BAND_U + rel_v) + (D > 0 ? s * Em[i] / D : INFINITY) +
                BAND_SUB;
        if (!isfinite(Ep[i]) || !isfinite(Em[i]) || !isfinite(Ev[i]) || (Evmax && !isfinite(Evmax[i]))) {
            Ep[i] = Em[i] = Ev[i] = NAN;
            if (Evmax) Evmax[i] = NAN;
        }
    }
}

const Optimizer optim_adamw_torch = {
    .name = "adamw_torch",
    .reference = "torch.optim.AdamW, single-tensor for-loop path (torch/optim/adam.py _single_tensor_adam)",
    .defaults = adamw_defaults,
    .validate = adamw_validate,
    .state_bytes = optim_torch_adamw_state_bytes,
    .shared_state_bytes = NULL,
    .init = adamw_init,
    .step = adamw_step,
    .step_scaled = adamw_step_scaled,
    .free = optim_state_free_tensors,
    .keywords = optim_torch_adamw_keywords,
    .rounding_band_step = optim_adamw_rounding_band_step,
};

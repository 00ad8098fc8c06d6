// optim_adamw_torch_fused.c — torch.optim.AdamW(fused=True) on CPU, fp32 params: HF Trainer's
// optim="adamw_torch_fused", TrainingArguments' default in transformers 5.24 with torch >= 2.8.
// reference: pytorch aten/src/ATen/native/cpu/FusedAdamKernel.cpp (adam_fused_step_impl,
// adam_math for float, ADAM_MODE::ADAMW) as the AVX-512 build of torch runs it.
// The kernel splits the tensor into chunks of whole 64-byte lines (16 floats) and runs each
// chunk's Vectorized body (16 lanes) and a loop for what is left, so only the tensor's last
// numel % 16 elements leave the body, whatever the thread count; of those the compiled loop
// takes 8 at a time with the body's arithmetic and the last numel % 8 one by one with another
// contraction of the second moment (measured: tails of 1..15 elements, 59 steps each). Per
// element, in the float32 rounding points measured against the installed torch (its compiler
// contracts some multiply-adds, see reference/OPTIM_SEMANTICS.md):
//   p <- p * f32(1 - lr*wd)                              (when wd != 0)
//   m <- torch_lerp(m, g, f32(1-b1))                     fma, both weight branches (as adamw_torch)
//   v <- fma(f32(1-b2) * g, g, v * f32(b2))              (as adamw_torch's addcmul_)
//   the last numel % 8: v <- fma(v, f32(b2), (f32(1-b2) * g) * g)
//   bc1 = 1 - b1^t, bc2 = 1 - b2^t in double (t from the fp32 step); step_size = lr/bc1
//   denom = sqrt(v) / f32(sqrt(bc2)) + f32(eps)          sqrt correctly rounded (_mm512_sqrt_ps,
//                                                        std::sqrt; adamw_torch's is MKL's)
//   p <- p + (f32(-step_size) * m) / denom               (the tail's p - (step_size*m)/denom: equal)
// That split is the AVX-512 build's (the goldens' machine); other builds of torch may split the
// tail otherwise.
// maximize: grad * -1 (exact), taken as the gradient factor's sign (g * -g_scale).
// amsgrad: max_exp_avg_sq <- maximum(max_exp_avg_sq, v) and denom = sqrt(max_exp_avg_sq) / ... ;
// a NaN v gives a NaN maximum in the Vectorized body and in the loop after it alike (measured:
// the goldens' amsgrad_grads_nonfinite_vec_15, whose 15 elements are all that loop's; a NaN v
// stays NaN at every later step, so no element can tell torch.maximum from a max keeping v).
// State: exp_avg, exp_avg_sq (fp32), step (0-d fp32), with amsgrad max_exp_avg_sq (fp32), as
// torch keeps them.
// Not here: capturable, bf16 params, and the GradScaler's grad_scale argument
// (without unscale_ the kernel divides each gradient by the scale: the trainer refuses that).
#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu.h"
#include "optim/optim.h"

enum { FUSED_SCALAR_TAIL = 8 };  // the last numel % 8 elements: the kernel's one-by-one loop

static void fused_defaults(OptimConfig* c) {  // torch.optim.AdamW's, with fused=True
    optim_adamw_torch.defaults(c);
    c->fused = true;
}

static Status fused_validate(const OptimConfig* c) {
    Status s = optim_torch_adamw_check(c);
    if (!status_is_ok(s)) return s;
    if (!c->fused)
        return status_make(STATUS_INVALID, "fused=false: adamw_torch_fused is the fused kernel (the for-loop path "
                           "is adamw_torch)");
    if (c->capturable) return optim_not_implemented("adamw_torch_fused", "capturable=true");
    return status_ok();
}

static OptimState* fused_init(const TensorShape* shape, const OptimConfig* c) {
    return optim_torch_adamw_state_new(&optim_adamw_torch_fused, shape, c);
}

typedef struct {
    float decay, lerp_coeff, b2, w2, bc2_sqrt, eps, neg_step_size, step_size, g_scale;
    bool lerp_from_start;
} FusedArgs;

// Elements [0, n): the kernel's Vectorized body and its tail's 8-wide part (the same arithmetic).
static void fused_body_portable(float* restrict p, const float* restrict g, float* restrict m, float* restrict v,
                                float* restrict vmax, size_t n, const FusedArgs* a) {
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float pi = p[i] * a->decay;  // decay 1.0f without weight decay: exact
        const float gi = g[i] * a->g_scale;  // clip_grad_norm_'s g * coef (1.0f: g itself)
        const float mi = fmaf(a->lerp_coeff, gi - m[i], a->lerp_from_start ? m[i] : gi);
        const float vi = fmaf(a->w2 * gi, gi, v[i] * a->b2);
        float vd = vi;
        if (vmax) vmax[i] = vd = optim_torch_maximum(vmax[i], vi);
        const float denom = sqrtf(vd) / a->bc2_sqrt + a->eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + (a->neg_step_size * mi) / denom;
    }
}

#if defined(__x86_64__)
// The body 8 lanes at a time: the same operations, bit-identical (every op correctly rounded).
__attribute__((target("avx2,fma"))) static void fused_body_avx2(float* restrict p, const float* restrict g,
                                                                 float* restrict m, float* restrict v,
                                                                 float* restrict vmax, size_t n, const FusedArgs* a) {
    const size_t n8 = n / 8 * 8;
    const __m256 vdecay = _mm256_set1_ps(a->decay), vw1 = _mm256_set1_ps(a->lerp_coeff),
                 vb2 = _mm256_set1_ps(a->b2), vw2 = _mm256_set1_ps(a->w2), vbc = _mm256_set1_ps(a->bc2_sqrt),
                 veps = _mm256_set1_ps(a->eps), vss = _mm256_set1_ps(a->neg_step_size),
                 vgs = _mm256_set1_ps(a->g_scale);
    const bool from_start = a->lerp_from_start;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n8; i += 8) {
        const __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), vdecay);
        const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), vgs), m0 = _mm256_loadu_ps(m + i);
        const __m256 mi = _mm256_fmadd_ps(vw1, _mm256_sub_ps(gi, m0), from_start ? m0 : gi);
        const __m256 vi =
            _mm256_fmadd_ps(_mm256_mul_ps(vw2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), vb2));
        __m256 vd = vi;
        if (vmax) {  // amsgrad
            vd = optim_torch_maximum8(_mm256_loadu_ps(vmax + i), vi);
            _mm256_storeu_ps(vmax + i, vd);
        }
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vd), vbc), veps);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(vss, mi), denom)));
    }
    fused_body_portable(p + n8, g + n8, m + n8, v + n8, vmax ? vmax + n8 : NULL, n - n8, a);
}
#endif

// The one-by-one loop of the kernel's last chunk (fewer than 8 elements).
static void fused_tail(float* p, const float* g, float* m, float* v, float* vmax, size_t n, const FusedArgs* a) {
    for (size_t i = 0; i < n; i++) {
        const float pi = p[i] * a->decay;
        const float gi = g[i] * a->g_scale;
        const float mi = fmaf(a->lerp_coeff, gi - m[i], a->lerp_from_start ? m[i] : gi);
        const float vi = fmaf(v[i], a->b2, (a->w2 * gi) * gi);
        float vd = vi;
        if (vmax) vmax[i] = vd = optim_torch_maximum(vmax[i], vi);
        const float denom = sqrtf(vd) / a->bc2_sqrt + a->eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - (a->step_size * mi) / denom;
    }
}

static void fused_step_scaled(OptimState* st, float* p, const float* g, float g_scale, const OptimConfig* c) {
    st->step++;
    float* step_t = st->tensors[2].data;
    *step_t = (float)st->step;  // state_step += 1; the kernel reads it as a float
    const double t = (double)*step_t;
    const double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
    const double step_size = c->lr / bc1;
    const float w1 = (float)(1.0 - c->beta1);
    const bool small = w1 < 0.5f && w1 > -0.5f;  // the lerp's branch (optim.h torch_lerp)
    const FusedArgs a = {.decay = c->weight_decay != 0 ? (float)(1.0 - c->lr * c->weight_decay) : 1.0f,
                         .lerp_coeff = small ? w1 : w1 - 1.0f,
                         .b2 = (float)c->beta2,
                         .w2 = (float)(1.0 - c->beta2),
                         .bc2_sqrt = (float)sqrt(bc2),
                         .eps = (float)c->eps,
                         .neg_step_size = (float)(-step_size),
                         .step_size = (float)step_size,
                         .g_scale = c->maximize ? -g_scale : g_scale,  // maximize: grad * -1, exact
                         .lerp_from_start = small};
    const size_t n = shape_numel(&st->shape), body = n - n % FUSED_SCALAR_TAIL;
    float *m = st->tensors[0].data, *v = st->tensors[1].data, *vmax = optim_torch_adamw_vmax(st);
#if defined(__x86_64__)
    if (cpu_features()->avx2 && cpu_features()->fma) fused_body_avx2(p, g, m, v, vmax, body, &a);
    else fused_body_portable(p, g, m, v, vmax, body, &a);
#else
    fused_body_portable(p, g, m, v, vmax, body, &a);
#endif
    fused_tail(p + body, g + body, m + body, v + body, vmax ? vmax + body : NULL, n - body, &a);
}

static void fused_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    fused_step_scaled(st, p, g, 1.0f, c);
}

const Optimizer optim_adamw_torch_fused = {
    .name = "adamw_torch_fused",
    .reference = "torch.optim.AdamW(fused=True) on CPU (aten/src/ATen/native/cpu/FusedAdamKernel.cpp, AVX-512 build)",
    .defaults = fused_defaults,
    .validate = fused_validate,
    .state_bytes = optim_torch_adamw_state_bytes,
    .shared_state_bytes = NULL,
    .init = fused_init,
    .step = fused_step,
    .step_scaled = fused_step_scaled,
    .free = optim_state_free_tensors,
    .keywords = optim_torch_adamw_keywords,  // fused: this optimizer's own value
    // AdamW's formulas in another rounding order (a correctly rounded sqrt, the tail's
    // second-moment fma): adamw_torch's band, whose terms bound each rounding
    .rounding_band_step = optim_adamw_rounding_band_step,
};

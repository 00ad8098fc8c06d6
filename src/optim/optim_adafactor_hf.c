// optim_adafactor_hf.c — transformers.optimization.Adafactor ("adafactor" in HF Trainer).
// reference: huggingface/transformers src/transformers/optimization.py class Adafactor (step,
// _get_lr, _rms, _approx_sq_grad); trainer.py get_optimizer_cls_and_kwargs sets
// scale_parameter=False, relative_step=False, lr=learning_rate — our defaults.
// Per tensor, float32 unless said (SPEC.md 3.2):
//   t += 1; RMS = f32(norm2(p)) / f32(sqrt(numel))                 (0-d fp32 state, before changes)
//   lr_t = rel * (scale_parameter ? max(eps2, RMS) : 1); rel = lr, or with relative_step
//          min(warmup_init ? 1e-6*t : 1e-2, 1/sqrt(t)); python doubles, except that
//          max(eps2, RMS) returns the fp32 tensor RMS when RMS > eps2 (then lr_t is fp32)
//   b2t = 1 - t^decay_rate (double); u = g*g + f32(eps1)
//   ndim >= 2 (factored over the last two dims, leading dims batch):
//     row <- row*f32(b2t) + f32(1-b2t)*mean_c(u);  col <- col*f32(b2t) + f32(1-b2t)*mean_r(u)
//     U = (rsqrt(row/mean(row)) (outer) rsqrt(col)) * g
//   1-D: v <- v*f32(b2t) + f32(1-b2t)*u ; U = rsqrt(v) * g
//   U <- U / max(1, RMS(U)/clip_threshold) ; U <- U * lr_t
//   beta1: m <- m*f32(beta1) + f32(1-beta1)*U ; U = m
//   wd: p <- p + f32(-wd*lr_t)*p ; then p <- p - U
// `add_(x, alpha=a)` is a fused multiply-add in PyTorch's vectorized CPU kernel (ufunc add:
// vec::fmadd(other, alpha, self)); we write fmaf() there. Reductions (norm, mean) are torch's
// own float32 orders (torch_reduce.h: norm kernel, cascade sums), so the step is bit-exact
// against the goldens; rsqrt is 1/sqrtf (torch's Vectorized rsqrt, correctly rounded, not MKL).
// State: exp_avg_sq_row (batch.., R), exp_avg_sq_col (batch.., C) or exp_avg_sq (N), RMS (0-d),
// exp_avg when beta1 is set; step is a Python int in the library (not a tensor).
#include <math.h>
#include <string.h>

#include "core/cpu.h"
#include "optim/optim.h"
#include "optim/torch_reduce.h"

static void afhf_defaults(OptimConfig* c) {
    c->lr = 5e-5;  // TrainingArguments.learning_rate default, passed by the Trainer
    c->eps1 = 1e-30;
    c->eps2 = 1e-3;
    c->clip_threshold = 1.0;
    c->decay_rate = -0.8;
    c->has_beta1 = false;
    c->beta1 = 0;
    c->weight_decay = 0;
    c->scale_parameter = false;
    c->relative_step = false;
    c->warmup_init = false;
}

// The hyper-parameter table: transformers.optimization.Adafactor.__init__'s keywords (5.24).
static const char* const AFHF_KEYWORDS[] = {
    "lr", "eps", "clip_threshold", "decay_rate", "beta1", "weight_decay", "scale_parameter", "relative_step",
    "warmup_init", NULL,
};

// The constructor's own defaults (golden hparams are constructor kwargs): lr=None,
// relative_step=True, scale_parameter=True; `afhf_defaults` is the Trainer's configuration.
static void afhf_constructor_defaults(OptimConfig* c) {
    c->lr = 0;
    c->lr_none = true;
    c->scale_parameter = true;
    c->relative_step = true;
}

// transformers Adafactor.__init__ raises for exactly two things (its messages quoted below);
// the other rules are ranges we have goldens for: transformers accepts more (it checks nothing
// else) and those values are refused as not implemented, saying so.
static Status afhf_validate(const OptimConfig* c) {
    if (c->relative_step && !c->lr_none)
        return status_make(STATUS_INVALID, "lr must be null (None) when relative_step=true (got %g); transformers "
                           "refuses it too: \"Cannot combine manual `lr` and `relative_step=True` options\"", c->lr);
    if (c->warmup_init && !c->relative_step)
        return status_make(STATUS_INVALID, "warmup_init=true requires relative_step=true; transformers refuses it "
                           "too: \"`warmup_init=True` requires `relative_step=True`\"");
    if (!c->relative_step && c->lr_none)
        return status_make(STATUS_INVALID, "lr must be a number when relative_step=false (transformers accepts "
                           "lr=None here and then fails in step() multiplying None)");
    const char* bad = NULL;
    char what[160];
    if (!c->relative_step && !(isfinite(c->lr) && c->lr >= 0)) bad = "lr", snprintf(what, sizeof what, "lr=%g (only lr >= 0)", c->lr);
    else if (!(isfinite(c->eps1) && c->eps1 >= 0)) bad = "eps1", snprintf(what, sizeof what, "eps1 (eps[0])=%g (only eps1 >= 0)", c->eps1);
    else if (!(isfinite(c->eps2) && c->eps2 >= 0)) bad = "eps2", snprintf(what, sizeof what, "eps2 (eps[1])=%g (only eps2 >= 0)", c->eps2);
    else if (!(isfinite(c->clip_threshold) && c->clip_threshold > 0))
        bad = "clip_threshold", snprintf(what, sizeof what, "clip_threshold=%g (only clip_threshold > 0)", c->clip_threshold);
    else if (!(isfinite(c->decay_rate) && c->decay_rate <= 0))
        bad = "decay_rate", snprintf(what, sizeof what, "decay_rate=%g (only decay_rate <= 0)", c->decay_rate);
    else if (c->has_beta1 && !(c->beta1 >= 0 && c->beta1 < 1))
        bad = "beta1", snprintf(what, sizeof what, "beta1=%g (only null or 0 <= beta1 < 1)", c->beta1);
    else if (!(isfinite(c->weight_decay) && c->weight_decay >= 0))
        bad = "weight_decay", snprintf(what, sizeof what, "weight_decay=%g (only weight_decay >= 0)", c->weight_decay);
    return bad ? optim_not_implemented("adafactor", what) : status_ok();
}

static size_t afhf_state_bytes(const TensorShape* shape, const OptimConfig* c) {
    size_t n = shape_numel(shape), b = 4;  // RMS (0-d fp32)
    if (shape->ndim >= 2) {
        size_t batch, rows, cols;
        shape_as_matrices(shape, &batch, &rows, &cols);
        b += 4 * batch * (rows + cols);
    } else {
        b += 4 * n;
    }
    if (c->has_beta1) b += 4 * n;
    return b;
}

typedef struct {
    OptimState base;
    float *row, *col, *v, *rms, *m;
} AdafactorHfState;

static OptimState* afhf_init(const TensorShape* shape, const OptimConfig* c) {
    AdafactorHfState* s = (AdafactorHfState*)optim_state_new(&optim_adafactor_hf, sizeof *s, shape);
    if (c->has_beta1) s->m = optim_state_add(&s->base, "exp_avg", DTYPE_F32, *shape);
    if (shape->ndim >= 2) {
        TensorShape rs = *shape, cs = *shape;
        rs.ndim--;                               // grad_shape[:-1]
        cs.ndim--;
        cs.dims[cs.ndim - 1] = shape->dims[shape->ndim - 1];  // grad_shape[:-2] + grad_shape[-1:]
        s->row = optim_state_add(&s->base, "exp_avg_sq_row", DTYPE_F32, rs);
        s->col = optim_state_add(&s->base, "exp_avg_sq_col", DTYPE_F32, cs);
    } else {
        s->v = optim_state_add(&s->base, "exp_avg_sq", DTYPE_F32, *shape);
    }
    s->rms = optim_state_add(&s->base, "RMS", DTYPE_F32, (TensorShape){0, {0}});
    return &s->base;
}

// torch's _rms(x): x.norm(2) (a 0-d fp32 tensor, torch_reduce.h) / (numel ** 0.5)
static float afhf_rms(const float* x, size_t n) {
    return torch_norm2_f32(x, n) / (float)pow((double)n, 0.5);
}

// ---- elementwise kernels ----
// Each kernel is one C body compiled twice: portable, and for AVX2+FMA (fmaf becomes vfmadd
// and the loop vectorizes 8 wide). Every operation is a correctly rounded fp32 op, so both
// builds give the same bits; the caller splits the index range over OpenMP threads, and no
// kernel reduces, so the result does not depend on the thread count either.
typedef struct {
    float *p, *U, *m, *v;      // (n) param, update, exp_avg, exp_avg_sq (1-D)
    const float* g;            // (n)
    const float *row, *cf;     // factored: exp_avg_sq_row (R), c_factor (C) of one matrix
    size_t C;
    float eps1, keep, add, row_mean, clip, lr, b1, w1, alpha;
    bool beta1, decay;
} AfhfArgs;

// u = g*g + eps1 (grad**2 + eps[0]), written into U    over elements [lo, hi)
static inline __attribute__((always_inline)) void afhf_sq_body(const AfhfArgs* a, size_t lo, size_t hi) {
    float* restrict U = a->U;
    const float* restrict g = a->g;
    const float eps1 = a->eps1;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) U[i] = g[i] * g[i] + eps1;
}

// _approx_sq_grad(row, col) * g for rows [lo, hi) of one (R, C) matrix: U and g point at it
static inline __attribute__((always_inline)) void afhf_factor_body(const AfhfArgs* a, size_t lo, size_t hi) {
    const size_t C = a->C;
    const float* restrict cf = a->cf;
    for (size_t i = lo; i < hi; i++) {
        const float r_factor = 1.0f / sqrtf(a->row[i] / a->row_mean);
        float* restrict U = a->U + i * C;
        const float* restrict g = a->g + i * C;
#pragma omp simd
        for (size_t j = 0; j < C; j++) U[j] = (r_factor * cf[j]) * g[j];
    }
}

// 1-D: v <- fma(u, 1-b2t, v*b2t); U = rsqrt(v) * g    over elements [lo, hi)
static inline __attribute__((always_inline)) void afhf_vec_body(const AfhfArgs* a, size_t lo, size_t hi) {
    float* restrict U = a->U;
    float* restrict v = a->v;
    const float* restrict g = a->g;
    const float eps1 = a->eps1, keep = a->keep, add = a->add;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) {
        const float u = g[i] * g[i] + eps1;
        v[i] = fmaf(add, u, v[i] * keep);
        U[i] = (1.0f / sqrtf(v[i])) * g[i];
    }
}

// U <- (U / clip) * lr ; [m <- fma(U, 1-b1, m*b1), U = m] ; [p <- fma(alpha, p, p)] ; p <- p - U
static inline __attribute__((always_inline)) void afhf_apply_body(const AfhfArgs* a, size_t lo, size_t hi) {
    float* restrict p = a->p;
    float* restrict m = a->m;
    const float* restrict U = a->U;
    const float clip = a->clip, lr = a->lr, b1 = a->b1, w1 = a->w1, alpha = a->alpha;
    if (a->decay) {  // p.add_(p, alpha=-wd*lr) comes before p.add_(-update) and reads only p
#pragma omp simd
        for (size_t i = lo; i < hi; i++) p[i] = fmaf(alpha, p[i], p[i]);
    }
    if (a->beta1) {
#pragma omp simd
        for (size_t i = lo; i < hi; i++) {
            m[i] = fmaf(w1, (U[i] / clip) * lr, m[i] * b1);
            p[i] = p[i] - m[i];
        }
    } else {
#pragma omp simd
        for (size_t i = lo; i < hi; i++) p[i] = p[i] - (U[i] / clip) * lr;
    }
}

typedef void (*AfhfKernel)(const AfhfArgs* a, size_t lo, size_t hi);
#if defined(__x86_64__)
#define AFHF_KERNEL(name)                                                                                 \
    static void name##_portable(const AfhfArgs* a, size_t lo, size_t hi) { name##_body(a, lo, hi); }     \
    __attribute__((target("avx2,fma"))) static void name##_avx2(const AfhfArgs* a, size_t lo, size_t hi) { \
        name##_body(a, lo, hi);                                                                           \
    }
#define AFHF_PICK(name) (afhf_avx2() ? name##_avx2 : name##_portable)
static bool afhf_avx2(void) { return cpu_features()->avx2 && cpu_features()->fma; }
#else
#define AFHF_KERNEL(name) \
    static void name##_portable(const AfhfArgs* a, size_t lo, size_t hi) { name##_body(a, lo, hi); }
#define AFHF_PICK(name) name##_portable
#endif
AFHF_KERNEL(afhf_sq)
AFHF_KERNEL(afhf_factor)
AFHF_KERNEL(afhf_vec)
AFHF_KERNEL(afhf_apply)

// Runs k over [0, n) in fixed 16Ki-item chunks, spread over the OpenMP threads; `per_item` is
// the work of one item (elements per row for row kernels) for the serial cut-off.
static void afhf_run(AfhfKernel k, const AfhfArgs* a, size_t n, size_t per_item) {
    const size_t chunk = per_item >= 16384 ? 1 : 16384 / per_item;
    const size_t n_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n * per_item >= 65536)
    for (size_t c = 0; c < n_chunks; c++) k(a, c * chunk, (c + 1) * chunk < n ? (c + 1) * chunk : n);
}

static void afhf_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    AdafactorHfState* s = (AdafactorHfState*)st;
    const size_t n = shape_numel(&st->shape);
    float* U = xaligned_alloc(n * sizeof(float));  // (n) the update; freed after the step, as torch does
    st->step++;
    const double t = (double)st->step;
    const float rms = afhf_rms(p, n);
    *s->rms = rms;

    double rel = c->lr;
    if (c->relative_step) {
        double min_step = c->warmup_init ? 1e-6 * t : 1e-2;
        rel = fmin(min_step, 1.0 / sqrt(t));
    }
    // lr_t: a double, or an fp32 0-d tensor when max(eps2, RMS) picked the tensor
    bool lr_is_f32 = c->scale_parameter && (double)rms > c->eps2;
    float lr_f32 = lr_is_f32 ? rms * (float)rel : (float)((c->scale_parameter ? c->eps2 : 1.0) * rel);
    double lr_t = lr_is_f32 ? (double)lr_f32 : (c->scale_parameter ? c->eps2 : 1.0) * rel;

    const double b2t = 1.0 - pow(t, c->decay_rate);
    AfhfArgs a = {.p = p, .U = U, .m = s->m, .v = s->v, .g = g, .eps1 = (float)c->eps1,
                  .keep = (float)b2t, .add = (float)(1.0 - b2t)};

    if (st->shape.ndim >= 2) {
        size_t batch, R, C;
        shape_as_matrices(&st->shape, &batch, &R, &C);
        float* cbuf = xmalloc(C * sizeof(float));  // (C) column means, then c_factor
        AfhfArgs am = a;
        am.C = C;
        afhf_run(AFHF_PICK(afhf_sq), &a, n, 1);  // U = u = g^2 + eps1, all matrices
        for (size_t b = 0; b < batch; b++) {
            const float* ub = U + b * R * C;  // (R, C)
            float* row = s->row + b * R;      // (R)
            float* col = s->col + b * C;      // (C)
            // update.mean(dim=-1) / mean(dim=-2): torch's cascade sums, then one division;
            // row <- fma(mean, 1-b2t, row*b2t) (mul_(beta2t).add_(mean, alpha=1-beta2t))
#pragma omp parallel for schedule(static) if (R * C >= 65536)
            for (size_t i = 0; i < R; i++) {
                const float mean = torch_sum_f32(ub + i * C, C) / (float)C;
                row[i] = fmaf(mean, a.add, row[i] * a.keep);
            }
            torch_sum_dim0_f32(cbuf, ub, R, C);
            for (size_t j = 0; j < C; j++) col[j] = fmaf(cbuf[j] / (float)R, a.add, col[j] * a.keep);
            // _approx_sq_grad: rsqrt(row / row.mean(-1)) (outer) rsqrt(col), then * g
            for (size_t j = 0; j < C; j++) cbuf[j] = 1.0f / sqrtf(col[j]);  // c_factor
            am.row = row;
            am.cf = cbuf;
            am.row_mean = torch_sum_f32(row, R) / (float)R;
            am.U = U + b * R * C;
            am.g = g + b * R * C;
            afhf_run(AFHF_PICK(afhf_factor), &am, R, C);
        }
        free(cbuf);
    } else {
        afhf_run(AFHF_PICK(afhf_vec), &a, n, 1);
    }
    float clip = afhf_rms(U, n) / (float)c->clip_threshold;
    if (clip < 1.0f) clip = 1.0f;  // clamp_(min=1.0): NaN stays NaN
    a.clip = clip;
    a.lr = lr_f32;  // exact when lr_t is the fp32 tensor, else f32(lr_t) as mul_(lr) rounds it
    a.beta1 = c->has_beta1;
    if (c->has_beta1) {
        a.b1 = (float)c->beta1;
        a.w1 = (float)(1.0 - c->beta1);
    }
    a.decay = c->weight_decay != 0;
    // p.add_(p, alpha=-wd*lr): alpha a double, or fp32 when lr is the fp32 tensor
    a.alpha = lr_is_f32 ? (float)(-c->weight_decay) * lr_f32 : (float)(-c->weight_decay * lr_t);
    afhf_run(AFHF_PICK(afhf_apply), &a, n, 1);
    free(U);
}

const Optimizer optim_adafactor_hf = {
    .name = "adafactor",
    .reference = "transformers.optimization.Adafactor as HF Trainer configures it",
    .defaults = afhf_defaults,
    .validate = afhf_validate,
    .keywords = AFHF_KEYWORDS,
    .constructor_defaults = afhf_constructor_defaults,
    .state_bytes = afhf_state_bytes,
    .shared_state_bytes = NULL,
    .init = afhf_init,
    .step = afhf_step,
    .free = optim_state_free_tensors,
};

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
// vec::fmadd(other, alpha, self)); we write fmaf() there. Reductions (norm, mean) are summed
// in double here and in float with another order by PyTorch: results may differ by ~1 ulp.
// State: exp_avg_sq_row (batch.., R), exp_avg_sq_col (batch.., C) or exp_avg_sq (N), RMS (0-d),
// exp_avg when beta1 is set; step is a Python int in the library (not a tensor).
#include <math.h>
#include <string.h>

#include "optim.h"

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

static Status afhf_validate(const OptimConfig* c) {
    Status s;
    if (c->relative_step) {
        if (c->lr != 0)  // transformers raises "Cannot combine manual `lr` and `relative_step=True`"
            return status_make(STATUS_INVALID, "lr must be unset (None) when relative_step=true (got %g)", c->lr);
    } else {
        if (!status_is_ok(s = optim_check_positive("lr", c->lr))) return s;
        if (c->warmup_init)  // transformers raises for warmup_init without relative_step
            return status_make(STATUS_INVALID, "warmup_init=true requires relative_step=true");
    }
    if (!status_is_ok(s = optim_check_nonneg("eps1", c->eps1))) return s;
    if (!status_is_ok(s = optim_check_nonneg("eps2", c->eps2))) return s;
    if (!status_is_ok(s = optim_check_positive("clip_threshold", c->clip_threshold))) return s;
    if (!(isfinite(c->decay_rate) && c->decay_rate <= 0))
        return status_make(STATUS_INVALID, "decay_rate must be a finite number <= 0 (got %g)", c->decay_rate);
    if (c->has_beta1 && !status_is_ok(s = optim_check_beta("beta1", c->beta1))) return s;
    if (!status_is_ok(s = optim_check_nonneg("weight_decay", c->weight_decay))) return s;
    return status_ok();
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

static void afhf_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    AdafactorHfState* s = (AdafactorHfState*)st;
    const size_t n = shape_numel(&st->shape);
    float* U = xaligned_alloc(n * sizeof(float));  // the update; freed after the step, as torch does
    st->step++;
    const double t = (double)st->step;
    const float rms = optim_rms_f32(p, n);
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
    const float keep = (float)b2t, add = (float)(1.0 - b2t), eps1 = (float)c->eps1;

    if (st->shape.ndim >= 2) {
        size_t batch, R, C;
        shape_as_matrices(&st->shape, &batch, &R, &C);
        double* colsum = xmalloc(C * sizeof(double));
        for (size_t b = 0; b < batch; b++) {
            const float* gb = g + b * R * C;
            float* row = s->row + b * R;
            float* col = s->col + b * C;
            float* Ub = U + b * R * C;
            for (size_t j = 0; j < C; j++) colsum[j] = 0;
            for (size_t i = 0; i < R; i++) {
                double rs = 0;
                for (size_t j = 0; j < C; j++) {
                    float u = gb[i * C + j] * gb[i * C + j] + eps1;
                    rs += u;
                    colsum[j] += u;
                }
                float mean = (float)(rs / (double)C);
                row[i] = fmaf(add, mean, row[i] * keep);
            }
            for (size_t j = 0; j < C; j++) col[j] = fmaf(add, (float)(colsum[j] / (double)R), col[j] * keep);
            double rsum = 0;
            for (size_t i = 0; i < R; i++) rsum += row[i];
            const float row_mean = (float)(rsum / (double)R);
            for (size_t j = 0; j < C; j++) colsum[j] = 1.0f / sqrtf(col[j]);  // c_factor, reused buffer
            for (size_t i = 0; i < R; i++) {
                float r_factor = 1.0f / sqrtf(row[i] / row_mean);
                for (size_t j = 0; j < C; j++) Ub[i * C + j] = (r_factor * (float)colsum[j]) * gb[i * C + j];
            }
        }
        free(colsum);
    } else {
        float* v = s->v;
        for (size_t i = 0; i < n; i++) {
            float u = g[i] * g[i] + eps1;
            v[i] = fmaf(add, u, v[i] * keep);
            U[i] = (1.0f / sqrtf(v[i])) * g[i];
        }
    }
    float clip = optim_rms_f32(U, n) / (float)c->clip_threshold;
    if (clip < 1.0f) clip = 1.0f;
    for (size_t i = 0; i < n; i++) U[i] = (U[i] / clip) * lr_f32;
    if (c->has_beta1) {
        const float b1 = (float)c->beta1, w1 = (float)(1.0 - c->beta1);
        for (size_t i = 0; i < n; i++) {
            s->m[i] = fmaf(w1, U[i], s->m[i] * b1);
            U[i] = s->m[i];
        }
    }
    if (c->weight_decay != 0) {
        // alpha = -wd * lr: a double, or fp32 when lr is the fp32 tensor
        float alpha = lr_is_f32 ? (float)(-c->weight_decay) * lr_f32 : (float)(-c->weight_decay * lr_t);
        for (size_t i = 0; i < n; i++) p[i] = fmaf(alpha, p[i], p[i]);
    }
    for (size_t i = 0; i < n; i++) p[i] = p[i] - U[i];
    free(U);
}

const Optimizer optim_adafactor_hf = {
    .name = "adafactor",
    .reference = "transformers.optimization.Adafactor as HF Trainer configures it",
    .defaults = afhf_defaults,
    .validate = afhf_validate,
    .state_bytes = afhf_state_bytes,
    .shared_state_bytes = NULL,
    .init = afhf_init,
    .step = afhf_step,
    .free = optim_state_free_tensors,
};

// optim_adafactor_torch.c — torch.optim.Adafactor (PyTorch >= 2.5), single-tensor path.
// reference: pytorch torch/optim/_adafactor.py _single_tensor_adafactor
// Per tensor (SPEC.md 3.3); doubles are Python floats, the rest float32:
//   step += 1 (0-d fp32 state); w = t^beta2_decay; rho = min(lr, 1/t^0.5)
//   alpha = max(eps2, f32(norm2(p)) / sqrt(numel)) * rho        (RMS of p before decay)
//   wd: p <- p * f32(1 - lr*wd)
//   ndim >= 2, over the last two dims (leading dims batch):
//     row_mean = f32(norm over cols)^2 / C ; row_var <- lerp(row_var, row_mean, w)   (.., R, 1)
//     col_mean = f32(norm over rows)^2 / R ; col_var <- lerp(col_var, col_mean, w)   (.., 1, C)
//     V = (row_var @ col_var) / max(mean(row_var), eps1)
//   1-D: variance <- lerp(variance, g*g, w) ; V = variance
//   U = rsqrt(max(V, eps1^2)) * g ; denom = max(1, norm2(U)/(sqrt(numel)*d))  (double)
//   p <- p + f32(-alpha/denom) * U                                  (add_ with alpha: an FMA)
// eps1 = None means the dtype's machine epsilon (2^-23 for fp32).
// State: row_var, col_var (or variance) in the gradient's dtype (fp32 here), step (0-d fp32).
#include <math.h>
#include <string.h>

#include "optim.h"

static void aft_defaults(OptimConfig* c) {
    c->lr = 1e-2;
    c->decay_rate = -0.8;  // beta2_decay
    c->eps1 = -1;          // None -> finfo(float32).eps
    c->eps2 = 1e-3;
    c->d = 1.0;
    c->weight_decay = 0;
}

static Status aft_validate(const OptimConfig* c) {
    Status s;
    if (!status_is_ok(s = optim_check_positive("lr", c->lr))) return s;
    if (!(isfinite(c->decay_rate) && c->decay_rate <= 0))
        return status_make(STATUS_INVALID, "beta2_decay must be a finite number <= 0 (got %g)", c->decay_rate);
    if (c->eps1 >= 0 && !status_is_ok(s = optim_check_nonneg("eps1", c->eps1))) return s;
    if (!status_is_ok(s = optim_check_nonneg("eps2", c->eps2))) return s;
    if (!status_is_ok(s = optim_check_positive("d", c->d))) return s;
    if (!status_is_ok(s = optim_check_nonneg("weight_decay", c->weight_decay))) return s;
    return status_ok();
}

static size_t aft_state_bytes(const TensorShape* shape, const OptimConfig* c) {
    if (shape->ndim >= 2) {
        size_t batch, rows, cols;
        shape_as_matrices(shape, &batch, &rows, &cols);
        return 4 * batch * (rows + cols) + 4;
    }
    return 4 * shape_numel(shape) + 4;
}

typedef struct {
    OptimState base;
    float *row, *col, *var, *step;
} AdafactorTorchState;

static OptimState* aft_init(const TensorShape* shape, const OptimConfig* c) {
    AdafactorTorchState* s = (AdafactorTorchState*)optim_state_new(&optim_adafactor_torch, sizeof *s, shape);
    s->step = optim_state_add(&s->base, "step", DTYPE_F32, (TensorShape){0, {0}});
    if (shape->ndim >= 2) {
        TensorShape rs = *shape, cs = *shape;
        rs.dims[rs.ndim - 1] = 1;
        cs.dims[cs.ndim - 2] = 1;
        s->row = optim_state_add(&s->base, "row_var", DTYPE_F32, rs);
        s->col = optim_state_add(&s->base, "col_var", DTYPE_F32, cs);
    } else {
        s->var = optim_state_add(&s->base, "variance", DTYPE_F32, *shape);
    }
    return &s->base;
}

static void aft_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    AdafactorTorchState* s = (AdafactorTorchState*)st;
    const size_t n = shape_numel(&st->shape);
    float* U = xaligned_alloc(n * sizeof(float));  // the update; freed after the step, as torch does
    st->step++;
    *s->step = (float)st->step;
    const double t = (double)*s->step;
    const double eps1 = c->eps1 < 0 ? (double)0x1p-23f : c->eps1;
    const float w = (float)pow(t, c->decay_rate);
    const double rho = fmin(c->lr, 1.0 / pow(t, 0.5));
    const double p_rms = (double)(float)sqrt(optim_sum_sq(p, n)) / pow((double)n, 0.5);
    const double alpha = fmax(c->eps2, p_rms) * rho;
    if (c->weight_decay != 0) {
        const float decay = (float)(1.0 - c->lr * c->weight_decay);
        for (size_t i = 0; i < n; i++) p[i] *= decay;
    }
    const float floor_v = (float)(eps1 * eps1);
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
                    double x = gb[i * C + j];
                    rs += x * x;
                    colsum[j] += x * x;
                }
                float norm = (float)sqrt(rs);
                row[i] = torch_lerp(row[i], (norm * norm) / (float)C, w);
            }
            for (size_t j = 0; j < C; j++) {
                float norm = (float)sqrt(colsum[j]);
                col[j] = torch_lerp(col[j], (norm * norm) / (float)R, w);
            }
            double rsum = 0;
            for (size_t i = 0; i < R; i++) rsum += row[i];
            float row_mean = (float)(rsum / (double)R);
            if (row_mean < (float)eps1) row_mean = (float)eps1;
            for (size_t i = 0; i < R; i++) {
                for (size_t j = 0; j < C; j++) {
                    float v = (row[i] * col[j]) / row_mean;
                    if (v < floor_v) v = floor_v;
                    Ub[i * C + j] = (1.0f / sqrtf(v)) * gb[i * C + j];
                }
            }
        }
        free(colsum);
    } else {
        for (size_t i = 0; i < n; i++) {
            s->var[i] = torch_lerp(s->var[i], g[i] * g[i], w);
            float v = s->var[i] < floor_v ? floor_v : s->var[i];
            U[i] = (1.0f / sqrtf(v)) * g[i];
        }
    }
    const double u_norm = (double)(float)sqrt(optim_sum_sq(U, n));
    const double denom = fmax(1.0, u_norm / (pow((double)n, 0.5) * c->d));
    const float a = (float)(-alpha / denom);
    for (size_t i = 0; i < n; i++) p[i] = fmaf(a, U[i], p[i]);
    free(U);
}

const Optimizer optim_adafactor_torch = {
    .name = "adafactor_torch",
    .reference = "torch.optim.Adafactor, single-tensor path (torch/optim/_adafactor.py)",
    .defaults = aft_defaults,
    .validate = aft_validate,
    .state_bytes = aft_state_bytes,
    .shared_state_bytes = NULL,
    .init = aft_init,
    .step = aft_step,
    .free = optim_state_free_tensors,
};

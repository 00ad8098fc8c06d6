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
// The norms and the mean are torch's own float32 reductions in torch's order (torch_reduce.h:
// the dim=-1/whole-tensor norm kernel, the dim=-2 NormTwoOps loop, the cascade sum); every
// sqrt here is a correctly rounded sqrtf (norm's std::sqrt, rsqrt = 1/sqrt; no Tensor.sqrt()
// and so no MKL sqrt), so the step is bit-exact against the goldens.
// State: row_var, col_var (or variance) in the gradient's dtype (fp32 here), step (0-d fp32).
#include <math.h>
#include <string.h>

#include "core/cpu.h"
#include "optim/optim.h"
#include "optim/torch_reduce.h"

static void aft_defaults(OptimConfig* c) {
    c->lr = 1e-2;
    c->decay_rate = -0.8;  // beta2_decay
    c->eps1 = -1;          // None -> finfo(float32).eps
    c->eps2 = 1e-3;
    c->d = 1.0;
    c->weight_decay = 0;
}

// The hyper-parameter table: torch.optim.Adafactor.__init__'s keywords (torch 2.15).
static const char* const AFT_KEYWORDS[] = {"lr", "beta2_decay", "eps", "d", "weight_decay", "foreach", "maximize", NULL};

// torch/optim/_adafactor.py Adafactor.__init__'s rules, then what we do not mirror.
static Status aft_validate(const OptimConfig* c) {
    Status s;
    if (c->lr_none)  // Python: `0.0 <= None` raises TypeError
        return status_make(STATUS_INVALID, "lr must be a number (got null): torch.optim.Adafactor has no lr=None");
    if (!(0.0 <= c->lr))
        return status_make(STATUS_INVALID, "lr must be >= 0 (got %g); torch refuses it too: \"Learning rate should "
                           "be >= 0\"", c->lr);
    if (!(0.0 >= c->decay_rate))
        return status_make(STATUS_INVALID, "beta2_decay must be <= 0 (got %g); torch refuses it too: \"beta2_decay "
                           "should be <= 0\"", c->decay_rate);
    if (c->eps1 != -1 && !(0.0 <= c->eps1))  // -1: eps1=None (the dtype's eps)
        return status_make(STATUS_INVALID, "eps1 (eps[0]) must be null or >= 0 (got %g); torch refuses it too: "
                           "\"epsilon1 should be >= 0\"", c->eps1);
    if (!(0.0 <= c->eps2))
        return status_make(STATUS_INVALID, "eps2 (eps[1]) must be >= 0 (got %g); torch refuses it too: "
                           "\"epsilon2 should be >= 0\"", c->eps2);
    if (!(1.0 <= c->d))
        return status_make(STATUS_INVALID, "d must be >= 1 (got %g); torch refuses it too: \"Clipping threshold d "
                           "should be >= 1\"", c->d);
    if (!(0.0 <= c->weight_decay))
        return status_make(STATUS_INVALID, "weight_decay must be >= 0 (got %g); torch refuses it too: "
                           "\"weight_decay should be >= 0\"", c->weight_decay);
    if (c->maximize) return optim_not_implemented("adafactor_torch", "maximize=true");
    if (c->foreach) return optim_not_implemented("adafactor_torch", "foreach=true (the multi-tensor path)");
    if (!isfinite(c->decay_rate) || !isfinite(c->eps2) || !isfinite(c->d) || !isfinite(c->lr) ||
        !isfinite(c->weight_decay) || (c->eps1 != -1 && !isfinite(c->eps1)))
        return optim_not_implemented("adafactor_torch", "an infinite hyper-parameter");
    (void)s;
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

// ---- elementwise kernels ----
// Each kernel is one C body compiled twice: portable, and for AVX2+FMA (fmaf becomes vfmadd
// and the loop vectorizes 8 wide). Every operation is a correctly rounded fp32 op, so both
// builds give the same bits; the caller splits the index range over OpenMP threads, and no
// kernel reduces, so the result does not depend on the thread count either.
typedef struct {
    float *p, *U, *var;        // (n) param, update, variance (1-D)
    const float* g;            // (n)
    const float *row, *col;    // factored: row_var (R), col_var (C) of one matrix
    size_t C;
    float w, floor_v, row_mean, decay, a;
    bool wd;
} AftArgs;

// rows [lo, hi) of one (R, C) matrix (U, g point at it):
// V = clamp(row*col / row_mean, eps1^2); U = rsqrt(V) * g
static inline __attribute__((always_inline)) void aft_factor_body(const AftArgs* a, size_t lo, size_t hi) {
    const size_t C = a->C;
    const float* restrict col = a->col;
    const float row_mean = a->row_mean, floor_v = a->floor_v;
    for (size_t i = lo; i < hi; i++) {
        const float r = a->row[i];
        float* restrict U = a->U + i * C;
        const float* restrict g = a->g + i * C;
#pragma omp simd
        for (size_t j = 0; j < C; j++) {
            float v = (r * col[j]) / row_mean;
            v = v < floor_v ? floor_v : v;  // clamp_(min=eps1*eps1): NaN stays NaN
            U[j] = (1.0f / sqrtf(v)) * g[j];
        }
    }
}

// 1-D, elements [lo, hi): variance <- lerp(variance, g*g, w); U = rsqrt(clamp(variance)) * g
static inline __attribute__((always_inline)) void aft_vec_body(const AftArgs* a, size_t lo, size_t hi) {
    float* restrict U = a->U;
    float* restrict var = a->var;
    const float* restrict g = a->g;
    // torch_lerp (optim.h) with its branch on the weight taken once, outside the loop:
    // |w| < 0.5: fma(w, end - self, self), else fma(w - 1, end - self, end)
    const bool small = a->w < 0.5f && a->w > -0.5f;
    const float wf = small ? a->w : a->w - 1.0f, floor_v = a->floor_v;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) {
        const float end = g[i] * g[i];
        var[i] = fmaf(wf, end - var[i], small ? var[i] : end);
        const float v = var[i] < floor_v ? floor_v : var[i];
        U[i] = (1.0f / sqrtf(v)) * g[i];
    }
}

// elements [lo, hi): [p <- p * f32(1 - lr*wd)] ; p <- fma(U, a, p)
// (the decay happens before the update in torch too; nothing else reads p in between)
static inline __attribute__((always_inline)) void aft_apply_body(const AftArgs* a, size_t lo, size_t hi) {
    float* restrict p = a->p;
    const float* restrict U = a->U;
    const float decay = a->decay, alpha = a->a;
    if (a->wd) {
#pragma omp simd
        for (size_t i = lo; i < hi; i++) p[i] = fmaf(alpha, U[i], p[i] * decay);
    } else {
#pragma omp simd
        for (size_t i = lo; i < hi; i++) p[i] = fmaf(alpha, U[i], p[i]);
    }
}

typedef void (*AftKernel)(const AftArgs* a, size_t lo, size_t hi);
#if defined(__x86_64__)
#define AFT_KERNEL(name)                                                                                  \
    static void name##_portable(const AftArgs* a, size_t lo, size_t hi) { name##_body(a, lo, hi); }      \
    __attribute__((target("avx2,fma"))) static void name##_avx2(const AftArgs* a, size_t lo, size_t hi) { \
        name##_body(a, lo, hi);                                                                           \
    }
#define AFT_PICK(name) (aft_avx2() ? name##_avx2 : name##_portable)
static bool aft_avx2(void) { return cpu_features()->avx2 && cpu_features()->fma; }
#else
#define AFT_KERNEL(name) \
    static void name##_portable(const AftArgs* a, size_t lo, size_t hi) { name##_body(a, lo, hi); }
#define AFT_PICK(name) name##_portable
#endif
AFT_KERNEL(aft_factor)
AFT_KERNEL(aft_vec)
AFT_KERNEL(aft_apply)

// Runs k over [0, n) in fixed 16Ki-item chunks, spread over the OpenMP threads; `per_item` is
// the work of one item (elements per row for row kernels) for the serial cut-off.
static void aft_run(AftKernel k, const AftArgs* a, size_t n, size_t per_item) {
    const size_t chunk = per_item >= 16384 ? 1 : 16384 / per_item;
    const size_t n_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n * per_item >= 65536)
    for (size_t c = 0; c < n_chunks; c++) k(a, c * chunk, (c + 1) * chunk < n ? (c + 1) * chunk : n);
}

static void aft_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    AdafactorTorchState* s = (AdafactorTorchState*)st;
    const size_t n = shape_numel(&st->shape);
    float* U = xaligned_alloc(n * sizeof(float));  // (n) the update; freed after the step, as torch does
    st->step++;
    *s->step = (float)st->step;
    const double t = (double)*s->step;
    const double eps1 = c->eps1 < 0 ? (double)0x1p-23f : c->eps1;
    const float w = (float)pow(t, c->decay_rate);
    const double rho = fmin(c->lr, 1.0 / pow(t, 0.5));
    // param.norm(2).item(): torch's float32 norm (torch_reduce.h) widened to double
    const double p_rms = (double)torch_norm2_f32(p, n) / pow((double)n, 0.5);
    const double alpha = fmax(c->eps2, p_rms) * rho;
    AftArgs a = {.p = p, .U = U, .var = s->var, .g = g, .w = w, .floor_v = (float)(eps1 * eps1),
                 .wd = c->weight_decay != 0, .decay = (float)(1.0 - c->lr * c->weight_decay)};
    if (st->shape.ndim >= 2) {
        size_t batch, R, C;
        shape_as_matrices(&st->shape, &batch, &R, &C);
        float* cbuf = xmalloc(C * sizeof(float));  // (C) column sums of squares
        AftArgs am = a;
        am.C = C;
        for (size_t b = 0; b < batch; b++) {
            const float* gb = g + b * R * C;  // (R, C)
            float* row = s->row + b * R;      // (R, 1)
            float* col = s->col + b * C;      // (1, C)
            // vector_norm(g, dim=-1).square_().div_(C): the norm is rounded, then squared
#pragma omp parallel for schedule(static) if (R * C >= 65536)
            for (size_t i = 0; i < R; i++) {
                const float norm = torch_norm2_f32(gb + i * C, C);
                row[i] = torch_lerp(row[i], (norm * norm) / (float)C, w);
            }
            // vector_norm(g, dim=-2): per column, rows in order (another kernel than dim=-1)
            torch_sumsq_dim0_f32(cbuf, gb, R, C);
            for (size_t j = 0; j < C; j++) {
                const float norm = sqrtf(cbuf[j]);
                col[j] = torch_lerp(col[j], (norm * norm) / (float)R, w);
            }
            // row_var.mean(dim=-2): (R, 1) is one contiguous row for torch's sum
            float row_mean = torch_sum_f32(row, R) / (float)R;
            if (row_mean < (float)eps1) row_mean = (float)eps1;  // clamp_(min=eps1): NaN stays NaN
            am.row = row;
            am.col = col;
            am.row_mean = row_mean;
            am.U = U + b * R * C;
            am.g = gb;
            aft_run(AFT_PICK(aft_factor), &am, R, C);
        }
        free(cbuf);
    } else {
        aft_run(AFT_PICK(aft_vec), &a, n, 1);
    }
    const double u_norm = (double)torch_norm2_f32(U, n);
    const double denom = fmax(1.0, u_norm / (pow((double)n, 0.5) * c->d));  // max(1.0, NaN) = 1.0
    a.a = (float)(-alpha / denom);  // add_(update, alpha=-alpha/denom): fma(U, f32(alpha), p)
    aft_run(AFT_PICK(aft_apply), &a, n, 1);
    free(U);
}

const Optimizer optim_adafactor_torch = {
    .name = "adafactor_torch",
    .reference = "torch.optim.Adafactor, single-tensor path (torch/optim/_adafactor.py)",
    .defaults = aft_defaults,
    .validate = aft_validate,
    .keywords = AFT_KEYWORDS,
    .state_bytes = aft_state_bytes,
    .shared_state_bytes = NULL,
    .init = aft_init,
    .step = aft_step,
    .free = optim_state_free_tensors,
};

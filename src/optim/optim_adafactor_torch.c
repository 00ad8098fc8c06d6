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
//   maximize: g = -g first (only U's sign changes: the coefficient's sign is flipped instead)
// foreach=True (_multi_tensor_adafactor, on CPU each _foreach_ op runs the single-tensor kernel
// per tensor): the same, but that the last update is two roundings, updates.mul_(f32(-alpha/denom))
// then param.add_(updates): p <- p + RN(a * U) (measured: goldens foreach_*).
// eps1 = None means the dtype's machine epsilon (2^-23 for fp32).
// The norms and the mean are torch's own float32 reductions in torch's order (torch_reduce.h:
// the dim=-1/whole-tensor norm kernel, the dim=-2 NormTwoOps loop, the cascade sum); every
// sqrt here is a correctly rounded sqrtf (norm's std::sqrt, rsqrt = 1/sqrt; no Tensor.sqrt()
// and so no MKL sqrt), so the step is bit-exact against the goldens.
// State: row_var, col_var (or variance) in the gradient's dtype (fp32 here), step (0-d fp32).
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/stream_prefetch.h"
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

// Scratch for the streaming step, allocated at the first step and kept (no allocation per
// step; torch allocates the update tensor each step, we never store it).
typedef struct {
    float* colsq;              // (batch*C) column sums of squares of g
} AftScratch;

typedef struct {
    OptimState base;
    float *row, *col, *var, *step;
    AftScratch sc;
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
        size_t batch, R, C;
        shape_as_matrices(shape, &batch, &R, &C);
        s->sc.colsq = xaligned_alloc(batch * C * sizeof(float));
    } else {
        s->var = optim_state_add(&s->base, "variance", DTYPE_F32, *shape);
    }
    return &s->base;
}

static void aft_free(OptimState* st) {
    free(((AdafactorTorchState*)st)->sc.colsq);
    optim_state_free_tensors(st);
}

// ---- elementwise kernels ----
// Each kernel is one C body compiled twice: portable, and for AVX2+FMA (fmaf becomes vfmadd
// and the loop vectorizes 8 wide). Every operation is a correctly rounded fp32 op, so both
// builds give the same bits; the callers split rows or element ranges over OpenMP threads
// and no kernel reduces across them, so the result does not depend on the thread count.
typedef struct {
    float *p, *var;            // (n) param, variance (1-D)
    const float* g;            // (n)
    const float *row, *col;    // factored: row_var (batch*R), col_var (batch*C)
    const float* row_mean;     // (batch) clamp(row_var.mean(-2), eps1) per matrix
    const double* row_rcp;     // (batch) 1.0 / (double)row_mean: the AVX-512 kernels' divisor
    size_t R, C;
    float w, floor_v, decay, a;
    bool wd;
    bool fe;  // foreach=True (_multi_tensor_adafactor): p + RN(a * U), two roundings, not fma(a, U, p)
} AftArgs;

// Software prefetch of the streaming loops (pass 1 only for tensors beyond AFT_STORE_MAX, which
// stream from memory): the process's stream prefetch policy (core/stream_prefetch.h), one call
// per vector read. A single thread's stream of g (and p) waits on memory less: lines 4 KiB ahead
// into L1 (this file's own prefetch before the policy; 2500x4000, one thread, CPU time of 12
// steps alternated in one process, 3 processes: pass 1 5.06-5.42 -> 4.63-4.96 ms, pass 2 with
// the AVX-512 kernel 4.14-4.27 -> 3.64-3.85 ms), into L2 since (the step 0.90x of that, README
// "The Adafactors' passes", ninth round). Prefetching changes no value.

// Pass 1's statistics of `rows` (1, 2 or 4) consecutive rows of a matrix (g0 .. g3) in one loop:
// each column's sum of squares takes the rows in order (vector_norm(dim=-2): per column, rows in
// order from 0; colsq = 0 + sq on row 0, `first`), and the rows' norm chains (each torch_sumsq_f32's
// order from its row's start), independent of each other, advance side by side so that none waits
// on its own addition latency. More rows per loop keep more read streams, more misses in flight,
// for the one thread that runs this pass (AMD EPYC, 2500 x 4000, 2 threads: two rows 0.96-0.97x of
// one, four 0.96-0.97x of two, in-process alternation). `rows` is a constant wherever this is
// inlined and the rows are named, not looped over (a loop over them left GCC's code scalar).
// The rows' sums of squares into sumsq[0 .. rows).
static inline __attribute__((always_inline)) void aft_rows_body(const float* restrict g0, const float* restrict g1,
                                                                const float* restrict g2, const float* restrict g3,
                                                                float* restrict colsq, size_t C, int rows, bool first,
                                                                bool pf, float* restrict sumsq) {
    enum { V = 8 };
    TorchSumsq c0, c1, c2, c3;
    torch_sumsq_init(&c0);
    torch_sumsq_init(&c1);
    torch_sumsq_init(&c2);
    torch_sumsq_init(&c3);
    const size_t C8 = C - C % V;
    for (size_t j = 0; j < C8; j += V) {
        if (pf) {
            stream_prefetch_span(g0 + j, V * sizeof(float));
            if (rows > 1) stream_prefetch_span(g1 + j, V * sizeof(float));
            if (rows > 2) stream_prefetch_span(g2 + j, V * sizeof(float)), stream_prefetch_span(g3 + j, V * sizeof(float));
        }
        for (int l = 0; l < V; l++) {
            const size_t jl = j + (size_t)l;
            const float s0 = g0[jl] * g0[jl];
            float c = first ? 0.0f + s0 : colsq[jl] + s0;
            c0.lane[l] = c0.lane[l] + s0;
            if (rows > 1) {
                const float s1 = g1[jl] * g1[jl];
                c = c + s1;
                c1.lane[l] = c1.lane[l] + s1;
            }
            if (rows > 2) {
                const float s2 = g2[jl] * g2[jl], s3 = g3[jl] * g3[jl];
                c = (c + s2) + s3;
                c2.lane[l] = c2.lane[l] + s2;
                c3.lane[l] = c3.lane[l] + s3;
            }
            colsq[jl] = c;
        }
    }
    for (size_t j = C8; j < C; j++) {
        float c = first ? 0.0f + g0[j] * g0[j] : colsq[j] + g0[j] * g0[j];
        if (rows > 1) c = c + g1[j] * g1[j];
        if (rows > 2) c = (c + g2[j] * g2[j]) + g3[j] * g3[j];
        colsq[j] = c;
    }
    sumsq[0] = torch_sumsq_finish(&c0, g0 + C8, C - C8);
    if (rows > 1) sumsq[1] = torch_sumsq_finish(&c1, g1 + C8, C - C8);
    if (rows > 2) {
        sumsq[2] = torch_sumsq_finish(&c2, g2 + C8, C - C8);
        sumsq[3] = torch_sumsq_finish(&c3, g3 + C8, C - C8);
    }
}

// The update U of elements [e0, e1) (flat index) into out:
// factored, V = clamp(row*col / row_mean, eps1^2); 1-D, V = clamp(variance, eps1^2);
// U = rsqrt(V) * g
static inline __attribute__((always_inline)) void aft_update_body(const AftArgs* a, float* restrict out, size_t e0,
                                                                  size_t e1) {
    const float* restrict g = a->g;
    const float floor_v = a->floor_v;
    if (a->row) {
        const size_t C = a->C, R = a->R;
        for (size_t e = e0; e < e1;) {
            const size_t grow = e / C, j = e - grow * C, len = C - j < e1 - e ? C - j : e1 - e;
            const float r = a->row[grow], row_mean = a->row_mean[grow / R];
            const float* restrict col = a->col + (grow / R) * C + j;
            const float* restrict gg = g + e;
            float* restrict o = out + (e - e0);
#pragma omp simd
            for (size_t t = 0; t < len; t++) {
                float v = (r * col[t]) / row_mean;
                v = v < floor_v ? floor_v : v;  // clamp_(min=eps1*eps1): NaN stays NaN
                o[t] = (1.0f / sqrtf(v)) * gg[t];
            }
            e += len;
        }
    } else {
        const float* restrict var = a->var;
#pragma omp simd
        for (size_t e = e0; e < e1; e++) {
            const float v = var[e] < floor_v ? floor_v : var[e];
            out[e - e0] = (1.0f / sqrtf(v)) * g[e];
        }
    }
}

// 1-D, elements [lo, hi): variance <- lerp(variance, g*g, w)
static inline __attribute__((always_inline)) void aft_vec_body(const AftArgs* a, size_t lo, size_t hi) {
    float* restrict var = a->var;
    const float* restrict g = a->g;
    // torch_lerp (optim.h) with its branch on the weight taken once, outside the loop:
    // |w| < 0.5: fma(w, end - self, self), else fma(w - 1, end - self, end)
    const bool small = a->w < 0.5f && a->w > -0.5f;
    const float wf = small ? a->w : a->w - 1.0f;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) {
        const float end = g[i] * g[i];
        var[i] = fmaf(wf, end - var[i], small ? var[i] : end);
    }
}

// One run of elements of one row (factored: V = clamp(r * col[t] / row_mean, eps1^2); 1-D:
// col is the variance and V = clamp(col[t], eps1^2)), U = rsqrt(V) * g recomputed in the loop
// that updates p, so that g and p stream together:
// [p <- p * f32(1 - lr*wd)] ; p <- fma(U, a, p)   (foreach: p <- p + RN(a * U))
// (the decay happens before the update in torch too; nothing else reads p in between)
static inline __attribute__((always_inline)) float aft_add(float p, float alpha, float U, bool fe) {
    return fe ? p + alpha * U : fmaf(alpha, U, p);
}

static inline __attribute__((always_inline)) void aft_apply_run(const AftArgs* a, float* restrict p,
                                                                const float* restrict g, const float* restrict col,
                                                                float r, float row_mean, size_t len, bool factored,
                                                                bool wd, bool fe) {
    const float floor_v = a->floor_v, decay = a->decay, alpha = a->a;
#pragma omp simd
    for (size_t t = 0; t < len; t++) {
        float v = factored ? (r * col[t]) / row_mean : col[t];
        v = v < floor_v ? floor_v : v;  // clamp_(min=eps1*eps1): NaN stays NaN
        const float U = (1.0f / sqrtf(v)) * g[t];
        p[t] = aft_add(wd ? p[t] * decay : p[t], alpha, U, fe);
    }
}

static inline __attribute__((always_inline)) void aft_apply_runs(const AftArgs* a, size_t e0, size_t e1, bool wd,
                                                                 bool fe) {
    if (!a->row) {
        aft_apply_run(a, a->p + e0, a->g + e0, a->var + e0, 0, 0, e1 - e0, false, wd, fe);
        return;
    }
    const size_t C = a->C, R = a->R;
    for (size_t e = e0; e < e1;) {
        const size_t grow = e / C, j = e - grow * C, len = C - j < e1 - e ? C - j : e1 - e;
        aft_apply_run(a, a->p + e, a->g + e, a->col + (grow / R) * C + j, a->row[grow], a->row_mean[grow / R], len,
                      true, wd, fe);
        e += len;
    }
}

// Elements [e0, e1) of the update pass.
static inline __attribute__((always_inline)) void aft_apply_body(const AftArgs* a, size_t e0, size_t e1) {
    if (a->fe) {
        if (a->wd) aft_apply_runs(a, e0, e1, true, true);
        else aft_apply_runs(a, e0, e1, false, true);
    } else {
        if (a->wd) aft_apply_runs(a, e0, e1, true, false);
        else aft_apply_runs(a, e0, e1, false, false);
    }
}

// Small tensors (in cache): U stored, elements [e0, e1): [p <- p * f32(1 - lr*wd)] ; p <- fma(U, a, p)
// (foreach: p <- p + RN(a * U))
static inline __attribute__((always_inline)) void aft_apply_stored_run(const AftArgs* a, const float* restrict U,
                                                                       size_t e0, size_t e1, bool wd, bool fe) {
    float* restrict p = a->p;
    const float decay = a->decay, alpha = a->a;
#pragma omp simd
    for (size_t i = e0; i < e1; i++) p[i] = aft_add(wd ? p[i] * decay : p[i], alpha, U[i], fe);
}

static inline __attribute__((always_inline)) void aft_apply_stored_body(const AftArgs* a, const float* restrict U,
                                                                        size_t e0, size_t e1) {
    if (a->fe) {
        if (a->wd) aft_apply_stored_run(a, U, e0, e1, true, true);
        else aft_apply_stored_run(a, U, e0, e1, false, true);
    } else {
        if (a->wd) aft_apply_stored_run(a, U, e0, e1, true, false);
        else aft_apply_stored_run(a, U, e0, e1, false, false);
    }
}

typedef struct {
    void (*rows)(const float*, size_t, int, float*, bool, bool, float*);  // rows g, g + C, .. (1, 2 or 4)
    void (*vec)(const AftArgs*, size_t, size_t);
    void (*apply)(const AftArgs*, size_t, size_t);
    void (*apply_stored)(const AftArgs*, const float*, size_t, size_t);
    TorchProduce produce;           // aft_update_body for torch_sumsq_produced_parallel_f32
    TorchProduceFeed produce_feed;  // U produced and fed in one loop (NULL: through the ring)
} AftKernels;

#define AFT_KERNELS(sfx, attr)                                                                                 \
    attr static void aft_rows_##sfx(const float* g, size_t C, int rows, float* colsq, bool first, bool pf,     \
                                    float* sumsq) {                                                            \
        const float *g1 = rows > 1 ? g + C : g, *g2 = rows > 2 ? g1 + C : g, *g3 = rows > 2 ? g2 + C : g;     \
        if (rows == 4) {                                                                                       \
            if (first) aft_rows_body(g, g1, g2, g3, colsq, C, 4, true, false, sumsq);                          \
            else if (pf) aft_rows_body(g, g1, g2, g3, colsq, C, 4, false, true, sumsq);                        \
            else aft_rows_body(g, g1, g2, g3, colsq, C, 4, false, false, sumsq);                               \
        } else if (rows == 2) {                                                                                \
            if (first) aft_rows_body(g, g1, g2, g3, colsq, C, 2, true, false, sumsq);                          \
            else if (pf) aft_rows_body(g, g1, g2, g3, colsq, C, 2, false, true, sumsq);                        \
            else aft_rows_body(g, g1, g2, g3, colsq, C, 2, false, false, sumsq);                               \
        } else {                                                                                               \
            if (first) aft_rows_body(g, g1, g2, g3, colsq, C, 1, true, false, sumsq);                          \
            else aft_rows_body(g, g1, g2, g3, colsq, C, 1, false, false, sumsq);                               \
        }                                                                                                      \
    }                                                                                                          \
    attr static void aft_vec_##sfx(const AftArgs* a, size_t lo, size_t hi) { aft_vec_body(a, lo, hi); }        \
    attr static void aft_apply_##sfx(const AftArgs* a, size_t e0, size_t e1) { aft_apply_body(a, e0, e1); }    \
    attr static void aft_apply_stored_##sfx(const AftArgs* a, const float* U, size_t e0, size_t e1) {          \
        aft_apply_stored_body(a, U, e0, e1);                                                                   \
    }                                                                                                          \
    attr static void aft_produce_##sfx(const void* ctx, float* out, size_t e0, size_t e1) {                    \
        aft_update_body(ctx, out, e0, e1);                                                                     \
    }                                                                                                          \
    static const AftKernels AFT_##sfx = {aft_rows_##sfx,  aft_vec_##sfx,          aft_apply_##sfx,                 \
                                        aft_apply_stored_##sfx, aft_produce_##sfx, NULL};
AFT_KERNELS(portable, )
#if defined(__x86_64__)
AFT_KERNELS(avx2, __attribute__((target("avx2,fma"))))
static const AftKernels* aft_kernels(void) {
    return cpu_features()->avx2 && cpu_features()->fma ? &AFT_avx2 : &AFT_portable;
}
#else
static const AftKernels* aft_kernels(void) { return &AFT_portable; }
#endif

// ---- AVX-512 kernels of passes 2 and 3 (factored tensors) ----
// Same operations as aft_update_body / aft_apply_run, 16 lanes, with one division per element
// fewer: the quotient by the matrix's row mean d, v = RN_f(x / d) with x = RN_f(r * col[t]),
// is computed as RN_f(RN_d((double)x * R)), R = RN_d(1.0 / (double)d) once per matrix, used
// only when d is a normal float > 0 and the clamp floor eps1^2 >= 2^-126 (FLT_MIN); otherwise
// the step takes the AVX2/portable kernels. Why the bits are the same:
// - (double)x is exact; R = (1/d)(1 + e1), RN_d(x R) = (x/d)(1 + e1)(1 + e2), |e1|, |e2| <=
//   2^-53: the double quotient q' lies within 2^-51 (relative) of the exact q = x/d.
// - RN_f(q) and RN_f(q') differ only if a float rounding boundary (a midpoint between two
//   floats, or the overflow threshold 2^128 - 2^103) lies between q and q', or on q. For |q|
//   >= 2^-126 such a boundary is m = M 2^b with M odd, 2^24 < M < 2^25 (25 bits). Write x = X
//   2^a, d = D 2^c with integers X, D < 2^24. q == m would need X 2^a = M D 2^(b+c), whose odd
//   part M D_odd >= M > 2^24 exceeds any odd part of X: impossible. So x - m d is a nonzero
//   multiple of 2^min(a, b+c); if a >= b+c, |x - m d| >= 2^(b+c) > |m d| 2^-49 (M D < 2^49);
//   if a < b+c, |x - m d| >= 2^a > |x| 2^-24. Either way |q - m| > 2^-49 |m| (about), four
//   times the double path's error: q' is on q's side of every boundary and RN_f(q') ==
//   RN_f(q) (an exactly representable q is no boundary: q' within 2^-51 rounds back to it).
// - |q| < 2^-126 (the subnormal range, whose boundaries M 2^-150, M < 2^24, q can equal):
//   both results are then <= 2^-126 in magnitude, and the clamp v < floor_v ? floor_v : v
//   with floor_v >= 2^-126 turns every such value into floor_v (2^-126 itself stays 2^-126,
//   which is then floor_v): the same bits whichever way q' rounded.
// - x = +-0 gives +-0 both ways; +-inf gives +-inf (R finite > 0, no double overflow: |x R|
//   <= 2^128 2^126); a NaN x keeps its payload through cvtps2pd, vmulpd and cvtpd2ps as it
//   does through vdivps; double never underflows here (|x R| >= 2^-149 2^-128).
// The square root and 1/sqrt stay true IEEE operations (a Newton reciprocal from vrcp14ps with
// a Markstein correction was measured slower on Zen 4: the FP pipes, not the divider, became
// the limit). test_adafactor_torch_avx512_matches_avx2 compares both kernels bit for bit.
#if defined(__x86_64__)
#include <immintrin.h>
#define AFT_AVX512 __attribute__((target("avx512f,avx2,fma")))

AFT_AVX512 static inline __m512 aft_u16(__m512 col, __m512 g, __m512 vr, __m512d R, __m512 floor_v) {
    const __m512 x = _mm512_mul_ps(vr, col);  // r * col[t]
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    const __m256 ql = _mm512_cvtpd_ps(_mm512_mul_pd(lo, R)), qh = _mm512_cvtpd_ps(_mm512_mul_pd(hi, R));
    __m512 v = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(ql)), _mm256_castps_pd(qh), 1));
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, floor_v, _CMP_LT_OQ), floor_v);  // NaN stays NaN
    return _mm512_mul_ps(_mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(v)), g);  // (1/sqrt(v)) * g
}

// U of one run of one row into out (pass 2)
AFT_AVX512 static void aft_u_run_avx512(float* restrict out, const float* restrict g, const float* restrict col,
                                        float r, double rcp, float floor_v, size_t len) {
    const __m512 vr = _mm512_set1_ps(r), vf = _mm512_set1_ps(floor_v);
    const __m512d R = _mm512_set1_pd(rcp);
    size_t t = 0;
    for (; t + 16 <= len; t += 16) {
        stream_prefetch_span(g + t, 16 * sizeof(float));
        _mm512_storeu_ps(out + t, aft_u16(_mm512_loadu_ps(col + t), _mm512_loadu_ps(g + t), vr, R, vf));
    }
    if (t < len) {
        const __mmask16 m = (__mmask16)((1u << (len - t)) - 1);
        _mm512_mask_storeu_ps(out + t, m,
                              aft_u16(_mm512_maskz_loadu_ps(m, col + t), _mm512_maskz_loadu_ps(m, g + t), vr, R, vf));
    }
}

// pass 3 on one run of one row: [p <- p * decay] ; p <- fma(alpha, U, p)  (foreach: p + RN(alpha * U))
AFT_AVX512 static inline __m512 aft_apply16(__m512 p, __m512 U, __m512 va, __m512 vd, bool wd, bool fe) {
    const __m512 base = wd ? _mm512_mul_ps(p, vd) : p;
    return fe ? _mm512_add_ps(base, _mm512_mul_ps(va, U)) : _mm512_fmadd_ps(va, U, base);
}
AFT_AVX512 static void aft_apply_run_avx512(const AftArgs* a, float* restrict p, const float* restrict g,
                                            const float* restrict col, float r, double rcp, size_t len) {
    const __m512 vr = _mm512_set1_ps(r), vf = _mm512_set1_ps(a->floor_v), va = _mm512_set1_ps(a->a),
                 vd = _mm512_set1_ps(a->decay);
    const __m512d R = _mm512_set1_pd(rcp);
    const bool wd = a->wd, fe = a->fe;
    size_t t = 0;
    for (; t + 16 <= len; t += 16) {
        stream_prefetch_span(g + t, 16 * sizeof(float));
        stream_prefetch_span(p + t, 16 * sizeof(float));
        const __m512 U = aft_u16(_mm512_loadu_ps(col + t), _mm512_loadu_ps(g + t), vr, R, vf);
        _mm512_storeu_ps(p + t, aft_apply16(_mm512_loadu_ps(p + t), U, va, vd, wd, fe));
    }
    if (t < len) {
        const __mmask16 m = (__mmask16)((1u << (len - t)) - 1);
        const __m512 U = aft_u16(_mm512_maskz_loadu_ps(m, col + t), _mm512_maskz_loadu_ps(m, g + t), vr, R, vf);
        _mm512_mask_storeu_ps(p + t, m, aft_apply16(_mm512_maskz_loadu_ps(m, p + t), U, va, vd, wd, fe));
    }
}

AFT_AVX512 static void aft_produce_avx512(const void* ctx, float* out, size_t e0, size_t e1) {
    const AftArgs* a = ctx;
    const size_t C = a->C, R = a->R;
    for (size_t e = e0; e < e1;) {
        const size_t grow = e / C, j = e - grow * C, len = C - j < e1 - e ? C - j : e1 - e;
        aft_u_run_avx512(out + (e - e0), a->g + e, a->col + (grow / R) * C + j, a->row[grow], a->row_rcp[grow / R],
                         a->floor_v, len);
        e += len;
    }
}

// Pass 2 on thread 0's own pieces (torch_sumsq_produced_parallel_f32's produce_feed): U of
// elements [e0, e1) (e0, e1 - e0 multiples of 8) and its squares fed straight into torch's 8
// lane accumulators, U never stored. A run (one row's elements) that starts at element e feeds
// lane (e + k) % 8 from its vectors' position k: the accumulators are rotated by e % 8 for the
// run (lanes stay independent chains; within a lane the elements still come in increasing
// order, position k before position k + 8). A run's last vector feeds +0 from its unused
// positions, which changes no accumulator: each holds +0, a sum of squares (>= +0) or a NaN,
// and x + (+0) is x for all of those. The squares are RN(U * U) and each addition is rounded,
// as in torch_sumsq_feed: the same bits as producing U and then feeding it.
AFT_AVX512 static inline __m256 aft_add_sq16(__m256 acc, __m512 x) {  // lanes += x[0:8]^2, then x[8:16]^2
    const __m512 sq = _mm512_mul_ps(x, x);
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(sq));
    return _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1)));
}

AFT_AVX512 static void aft_produce_feed_avx512(const void* ctx, float* lanes, size_t e0, size_t e1) {
    const AftArgs* a = ctx;
    const size_t C = a->C, R = a->R;
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), seven = _mm256_set1_epi32(7);
    const __m512 vf = _mm512_set1_ps(a->floor_v);
    __m256 acc = _mm256_loadu_ps(lanes);
    for (size_t e = e0; e < e1;) {
        const size_t grow = e / C, j = e - grow * C, len = C - j < e1 - e ? C - j : e1 - e;
        const __m512 vr = _mm512_set1_ps(a->row[grow]);
        const __m512d Rd = _mm512_set1_pd(a->row_rcp[grow / R]);
        const float* restrict col = a->col + (grow / R) * C + j;
        const float* restrict g = a->g + e;
        const __m256i o = _mm256_set1_epi32((int)(e % 8));
        // position k <- lane (k + o) % 8; back: lane l <- position (l - o) % 8
        __m256 r = _mm256_permutevar8x32_ps(acc, _mm256_and_si256(_mm256_add_epi32(iota, o), seven));
        size_t t = 0;
        for (; t + 16 <= len; t += 16) {
            stream_prefetch_span(g + t, 16 * sizeof(float));
            r = aft_add_sq16(r, aft_u16(_mm512_loadu_ps(col + t), _mm512_loadu_ps(g + t), vr, Rd, vf));
        }
        if (t < len) {
            const __mmask16 m = (__mmask16)((1u << (len - t)) - 1);
            const __m512 U = aft_u16(_mm512_maskz_loadu_ps(m, col + t), _mm512_maskz_loadu_ps(m, g + t), vr, Rd, vf);
            r = aft_add_sq16(r, _mm512_maskz_mov_ps(m, U));
        }
        acc = _mm256_permutevar8x32_ps(r, _mm256_and_si256(_mm256_sub_epi32(iota, o), seven));
        e += len;
    }
    _mm256_storeu_ps(lanes, acc);
}

AFT_AVX512 static void aft_apply_avx512(const AftArgs* a, size_t e0, size_t e1) {
    const size_t C = a->C, R = a->R;
    for (size_t e = e0; e < e1;) {
        const size_t grow = e / C, j = e - grow * C, len = C - j < e1 - e ? C - j : e1 - e;
        aft_apply_run_avx512(a, a->p + e, a->g + e, a->col + (grow / R) * C + j, a->row[grow], a->row_rcp[grow / R],
                             len);
        e += len;
    }
}

// passes 2 and 3 of factored tensors; pass 1 and the stored update as in the AVX2 set
static const AftKernels AFT_avx512 = {aft_rows_avx2,         aft_vec_avx2,       aft_apply_avx512,
                                      aft_apply_stored_avx2, aft_produce_avx512, aft_produce_feed_avx512};
#endif
static bool g_aft_no_avx512;  // tests: the AVX2 kernels even where AVX-512 runs
void optim_adafactor_torch_force_no_avx512(bool on) { g_aft_no_avx512 = on; }
static size_t g_aft_avx512_steps;  // steps whose passes 2 and 3 took the AVX-512 kernels
size_t optim_adafactor_torch_avx512_steps(void) { return __atomic_load_n(&g_aft_avx512_steps, __ATOMIC_RELAXED); }

// The kernels of passes 2 and 3: the AVX-512 ones where the CPU has them and their divisor
// trick applies (above), else those of pass 1.
static const AftKernels* aft_kernels_23(const AftKernels* k, const AftArgs* a, size_t batch) {
#if defined(__x86_64__)
    if (g_aft_no_avx512 || k != &AFT_avx2 || !a->row || !cpu_features()->avx512f || !(a->floor_v >= 0x1p-126f))
        return k;
    for (size_t b = 0; b < batch; b++)
        if (!isnormal(a->row_mean[b]) || !(a->row_mean[b] > 0)) return k;
    __atomic_fetch_add(&g_aft_avx512_steps, 1, __ATOMIC_RELAXED);
    return &AFT_avx512;
#else
    (void)a, (void)batch;
    return k;
#endif
}

enum { AFT_PIECE = 8192 };  // elements per work item of the elementwise passes

// Up to AFT_STORE_MAX elements (8 MiB, cache-sized) U is stored once and read back by the
// update pass: recomputing its two divisions and square root costs more than reading it from
// cache (1e6 elements: +10-28% CPU time measured). One buffer for the whole process, grown to
// the largest such tensor and reused (torch allocates the same transient tensor every step);
// the lock keeps two concurrent steps from sharing it.
enum { AFT_STORE_MAX = 1 << 21 };
static pthread_mutex_t g_aft_u_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_aft_force_recompute;  // tests: the large-tensor path at every size

void optim_adafactor_torch_force_recompute(bool on) { g_aft_force_recompute = on; }
static float* g_aft_u;
static size_t g_aft_u_cap;

// norm2(U) with U stored in g_aft_u (the caller holds g_aft_u_lock)
static float aft_stored_sumsq(const AftKernels* k, const AftArgs* a, size_t n) {
    if (g_aft_u_cap < n) {
        free(g_aft_u);
        g_aft_u = xaligned_alloc(AFT_STORE_MAX * sizeof(float));
        g_aft_u_cap = AFT_STORE_MAX;
    }
    const size_t n_pieces = (n + AFT_PIECE - 1) / AFT_PIECE;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n_pieces; i++)
        k->produce(a, g_aft_u + i * AFT_PIECE, i * AFT_PIECE, (i + 1) * AFT_PIECE < n ? (i + 1) * AFT_PIECE : n);
    return torch_sumsq_f32(g_aft_u, n);
}

// Pass 1's statistics (one thread: every column's sum runs over all rows in order and every
// row's over all its columns, so the pass is one sweep over g in row order), four rows per loop
// (then two, then one for the last R % 4).
static void aft_stats(AdafactorTorchState* s, const AftKernels* k, const AftArgs* a, size_t batch, size_t n) {
    if (!s->row) {
        for (size_t i = 0; i < n; i += AFT_PIECE) k->vec(a, i, i + AFT_PIECE < n ? i + AFT_PIECE : n);
        return;
    }
    const size_t R = a->R, C = a->C;
    for (size_t b = 0; b < batch; b++) {
        const float* gb = a->g + b * R * C;  // (R, C)
        float* row = s->row + b * R;         // (R, 1)
        float* colsq = s->sc.colsq + b * C;  // (C)
        for (size_t i = 0; i < R;) {
            float sumsq[4];
            const int rows = i + 3 < R ? 4 : i + 1 < R ? 2 : 1;
            k->rows(gb + i * C, C, rows, colsq, i == 0, n > AFT_STORE_MAX, sumsq);
            for (int r = 0; r < rows; r++, i++) {
                // vector_norm(g, dim=-1).square_().div_(C): the norm is rounded, then squared
                const float norm = sqrtf(sumsq[r]);
                row[i] = torch_lerp(row[i], (norm * norm) / (float)C, a->w);
            }
        }
        // (R, 1): torch coalesces the column into one contiguous row and runs the last-dim kernel
        if (C == 1) colsq[0] = torch_sumsq_f32(gb, R);
    }
}

// The step in three passes over memory (the reductions' dependencies allow no fewer):
//  1. one thread sweeps g for the row and column statistics, four rows per loop (aft_rows_body:
//     four independent row chains; 1-D: the variance) while a second runs torch's norm chain
//     over p (param.norm(2), needed for alpha);
//  2. norm2(U): every thread produces U (two divisions and a square root per element; with
//     AVX-512 one division, a double multiplication and a square root) while thread 0 runs the
//     norm chain over it in order, fused with its own producing where the AVX-512 kernels run;
//  3. p updated, U recomputed from g and the statistics (up to AFT_STORE_MAX elements U is
//     stored in pass 2 and read back instead); pieces claimed dynamically.
static void aft_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    AdafactorTorchState* s = (AdafactorTorchState*)st;
    const size_t n = shape_numel(&st->shape);
    const AftKernels* k = aft_kernels();
    st->step++;
    *s->step = (float)st->step;
    const double t = (double)*s->step;
    const double eps1 = c->eps1 < 0 ? (double)0x1p-23f : c->eps1;
    const float w = (float)pow(t, c->decay_rate);
    const double rho = fmin(c->lr, 1.0 / pow(t, 0.5));
    size_t batch = 1;
    float row_mean[64], *row_means = row_mean;  // (batch)
    double row_rcp[64], *row_rcps = row_rcp;    // (batch)
    AftArgs a = {.p = p, .var = s->var, .g = g, .w = w, .floor_v = (float)(eps1 * eps1),
                 .wd = c->weight_decay != 0, .decay = (float)(1.0 - c->lr * c->weight_decay), .fe = c->foreach};
    if (s->row) {
        shape_as_matrices(&st->shape, &batch, &a.R, &a.C);
        if (batch > 64) row_means = xmalloc(batch * sizeof(float)), row_rcps = xmalloc(batch * sizeof(double));
    }
    float p_sumsq = 0;
#pragma omp parallel num_threads(omp_get_max_threads() > 1 ? 2 : 1) if (n >= OPTIM_PAR_MIN)
    {
        const int side = omp_get_num_threads() > 1 ? 1 : 0;
        if (omp_get_thread_num() == 0) aft_stats(s, k, &a, batch, n);
        if (omp_get_thread_num() == side) p_sumsq = torch_sumsq_f32(p, n);
    }
    // param.norm(2).item(): torch's float32 norm widened to double
    const double p_rms = (double)sqrtf(p_sumsq) / pow((double)n, 0.5);
    const double alpha = fmax(c->eps2, p_rms) * rho;
    if (s->row) {
        const size_t R = a.R, C = a.C;
        for (size_t b = 0; b < batch; b++) {
            float* row = s->row + b * R;
            float* col = s->col + b * C;
            const float* colsq = s->sc.colsq + b * C;
            for (size_t j = 0; j < C; j++) {
                const float norm = sqrtf(colsq[j]);
                col[j] = torch_lerp(col[j], (norm * norm) / (float)R, w);
            }
            // row_var.mean(dim=-2): (R, 1) is one contiguous row for torch's sum
            float rm = torch_sum_f32(row, R) / (float)R;
            if (rm < (float)eps1) rm = (float)eps1;  // clamp_(min=eps1): NaN stays NaN
            row_means[b] = rm;
            row_rcps[b] = 1.0 / (double)rm;
        }
        a.row = s->row;
        a.col = s->col;
        a.row_mean = row_means;
        a.row_rcp = row_rcps;
    }
    const AftKernels* k23 = aft_kernels_23(k, &a, batch);
    const bool stored = n <= AFT_STORE_MAX && !g_aft_force_recompute;
    if (stored) CHECK(pthread_mutex_lock(&g_aft_u_lock) == 0);
    const double u_norm =
        (double)sqrtf(stored ? aft_stored_sumsq(k23, &a, n)
                             : torch_sumsq_produced_parallel_f32(n, k23->produce, k23->produce_feed, &a));
    const double denom = fmax(1.0, u_norm / (pow((double)n, 0.5) * c->d));  // max(1.0, NaN) = 1.0
    a.a = (float)(-alpha / denom);  // add_(update, alpha=-alpha/denom): fma(U, f32(alpha), p)
    // maximize: grad = -grad. Only U's sign follows it (the statistics square g, the norm squares
    // U): U(-g) = -U(g) exactly, and fma(a, -U, p) == fma(-a, U, p)
    if (c->maximize) a.a = -a.a;
    const size_t n_pieces = (n + AFT_PIECE - 1) / AFT_PIECE;
    // pieces claimed as threads come free (2 at a time, 64 KiB of p): a descheduled thread no
    // longer holds back a fixed half of the pass; elementwise, so thread-count independent
#pragma omp parallel for schedule(dynamic, 2) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n_pieces; i++) {
        const size_t e0 = i * AFT_PIECE, e1 = (i + 1) * AFT_PIECE < n ? (i + 1) * AFT_PIECE : n;
        if (stored) k->apply_stored(&a, g_aft_u, e0, e1);
        else k23->apply(&a, e0, e1);
    }
    if (stored) CHECK(pthread_mutex_unlock(&g_aft_u_lock) == 0);
    if (row_means != row_mean) free(row_means), free(row_rcps);
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
    .free = aft_free,
};

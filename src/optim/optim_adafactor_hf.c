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
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/stream_prefetch.h"
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

// transformers Adafactor.__init__ raises for exactly two things (its messages quoted below) and
// checks nothing else: every finite value of every hyper-parameter runs the same formulas (a
// negative lr or weight decay, eps1 < 0, clip_threshold <= 0, decay_rate > 0, beta1 outside
// [0, 1) included; goldens wide_*). Non-finite values are refused as not implemented.
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
    if (!c->relative_step && !isfinite(c->lr)) bad = "lr", snprintf(what, sizeof what, "lr=%g (only finite values)", c->lr);
    else if (!isfinite(c->eps1)) bad = "eps1", snprintf(what, sizeof what, "eps1 (eps[0])=%g (only finite values)", c->eps1);
    else if (!isfinite(c->eps2)) bad = "eps2", snprintf(what, sizeof what, "eps2 (eps[1])=%g (only finite values)", c->eps2);
    else if (!isfinite(c->clip_threshold))
        bad = "clip_threshold", snprintf(what, sizeof what, "clip_threshold=%g (only finite values)", c->clip_threshold);
    else if (!isfinite(c->decay_rate))
        bad = "decay_rate", snprintf(what, sizeof what, "decay_rate=%g (only finite values)", c->decay_rate);
    else if (c->has_beta1 && !isfinite(c->beta1))
        bad = "beta1", snprintf(what, sizeof what, "beta1=%g (only null or a finite value)", c->beta1);
    else if (!isfinite(c->weight_decay))
        bad = "weight_decay", snprintf(what, sizeof what, "weight_decay=%g (only finite values)", c->weight_decay);
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

// Scratch for the streaming step, allocated at the first step and kept (no allocation per
// step; torch allocates the update tensor each step, we never store it).
typedef struct {
    size_t threads;            // row buffers allocated for this many OpenMP threads
    float* urow;               // (threads, C) one row of u = g^2 + eps1 per thread
    float* part;               // (ceil(R / block), Cm) column block sums of one matrix
    float* tail;               // (R, C - Cm) u of the columns summed from a copy
    float* colsum;             // (C)
    float *rf, *cf;            // (batch*R) rsqrt(row / row_mean), (batch*C) rsqrt(col)
} AfhfScratch;

typedef struct {
    OptimState base;
    float *row, *col, *v, *rms, *m;
    AfhfScratch sc;
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

static void afhf_scratch_free(AfhfScratch* sc) {
    free(sc->urow);
    free(sc->part);
    free(sc->tail);
    free(sc->colsum);
    free(sc->rf);
    free(sc->cf);
    memset(sc, 0, sizeof *sc);
}

static void afhf_free(OptimState* st) {
    afhf_scratch_free(&((AdafactorHfState*)st)->sc);
    optim_state_free_tensors(st);
}

static void afhf_scratch_ensure(AdafactorHfState* s) {
    const size_t threads = (size_t)omp_get_max_threads();
    AfhfScratch* sc = &s->sc;
    if (sc->threads >= threads) return;
    afhf_scratch_free(sc);
    sc->threads = threads;
    if (s->base.shape.ndim >= 2) {
        size_t batch, R, C;
        shape_as_matrices(&s->base.shape, &batch, &R, &C);
        const size_t Cm = torch_sum_dim0_main_cols(C), B = torch_sum_dim0_block_rows(R);
        sc->urow = xaligned_alloc(threads * C * sizeof(float));
        sc->part = xaligned_alloc(((R + B - 1) / B) * (Cm ? Cm : 1) * sizeof(float));
        sc->tail = xaligned_alloc(R * (C - Cm ? C - Cm : 1) * sizeof(float));
        sc->colsum = xaligned_alloc(C * sizeof(float));
        sc->rf = xaligned_alloc(batch * R * sizeof(float));
        sc->cf = xaligned_alloc(batch * C * sizeof(float));
    }
}

// ---- elementwise kernels ----
// Each kernel is one C body compiled twice: portable, and for AVX2+FMA (fmaf becomes vfmadd
// and the loop vectorizes 8 wide). Every operation is a correctly rounded fp32 op, so both
// builds give the same bits; the callers split rows or element ranges over OpenMP threads
// and no kernel reduces across them, so the result does not depend on the thread count.
typedef struct {
    float *p, *m, *v;          // (n) param, exp_avg, exp_avg_sq (1-D)
    const float* g;            // (n)
    const float *rf, *cf;      // factored: (batch*R) row factors, (batch*C) column factors
    size_t R, C;
    float eps1, keep, add, clip, lr, b1, w1, alpha;
    bool beta1, decay;
} AfhfArgs;

// One row of the statistics pass: u = g*g + eps1 (grad**2 + eps[0]) into `u` (C), and into
// the column block sums acc (Cm): acc = 0 + u on the block's first row, else acc + u.
static inline __attribute__((always_inline)) void afhf_urow_body(const AfhfArgs* a, const float* restrict g,
                                                                 float* restrict u, float* restrict acc,
                                                                 bool first, size_t Cm) {
    const size_t C = a->C;
    const float eps1 = a->eps1;
    if (first) {
#pragma omp simd
        for (size_t j = 0; j < Cm; j++) {
            u[j] = g[j] * g[j] + eps1;
            acc[j] = 0.0f + u[j];
        }
    } else {
#pragma omp simd
        for (size_t j = 0; j < Cm; j++) {
            u[j] = g[j] * g[j] + eps1;
            acc[j] = acc[j] + u[j];
        }
    }
#pragma omp simd
    for (size_t j = Cm; j < C; j++) u[j] = g[j] * g[j] + eps1;
}

enum { AFHF_V = 8, AFHF_CHUNK = 4 * AFHF_V, AFHF_LEVELS = 4 };

// The row sum's cascade after chunk i (chunks summed so far): when i ends a level-0 block, each
// level is added into the next and cleared, up the levels while i also ends that level's block
// (multi_row_sum's carry; mask = chunks per level-0 block - 1, lp = its log2).
static inline __attribute__((always_inline)) void afhf_cascade_carry(float lv[AFHF_LEVELS][AFHF_CHUNK], size_t i,
                                                                     size_t mask, int lp) {
    if ((i & mask) != 0) return;
    for (int j = 1; j < AFHF_LEVELS; j++) {
        for (int t = 0; t < AFHF_CHUNK; t++) {
            lv[j][t] = lv[j][t] + lv[j - 1][t];
            lv[j - 1][t] = 0;
        }
        if ((i & (mask << (j * lp))) != 0) break;
    }
}

// The end of one row's sum, after its `size` full chunks went through the cascade lv: the levels
// combined, the row's last C % 32 u values (from g) into tail_u, row_sum's leftover vectors into
// the first partial, the four partials combined, then vectorized_inner_sum's scalar tail first
// and the 8 lanes in order. Returns the row's sum.
static inline __attribute__((always_inline)) float afhf_row_finish(float lv[AFHF_LEVELS][AFHF_CHUNK],
                                                                   const float* restrict g, float* restrict tail_u,
                                                                   size_t C, size_t size, float eps1) {
    enum { V = AFHF_V, CHUNK = AFHF_CHUNK };
    float ps[CHUNK];
    for (int t = 0; t < CHUNK; t++) ps[t] = ((lv[0][t] + lv[1][t]) + lv[2][t]) + lv[3][t];
    const size_t Cm = size * CHUNK, nt = C - Cm, nvec = C / V;
    for (size_t k = 0; k < nt; k++) tail_u[k] = g[Cm + k] * g[Cm + k] + eps1;
    for (size_t v = size * 4; v < nvec; v++)  // row_sum's leftover vectors, into the first
        for (int l = 0; l < V; l++) ps[l] = ps[l] + tail_u[(v - size * 4) * V + (size_t)l];
    for (int k = 1; k < 4; k++)
        for (int l = 0; l < V; l++) ps[l] = ps[l] + ps[k * V + l];
    float fin = 0;  // vectorized_inner_sum: the scalar tail first, then the 8 lanes in order
    for (size_t k = nvec * V; k < C; k++) fin = fin + tail_u[k - Cm];
    for (int l = 0; l < V; l++) fin = fin + ps[l];
    return fin;
}

// `rows` (1 or 4) consecutive rows of one block (g0 = g, g1 = g + C, ...) of the statistics pass
// in one read of g (C >= 8): u = g*g + eps1 (grad**2 + eps[0]) is formed once per element and
// added, while it is in a register, into the column block sums acc (the main columns [0,
// C/32*32): each column takes the rows' u in row order, acc = 0 + u of the first on the block's
// first row, else acc + u) and into each row's sum in torch_sum_f32's own order: SumKernel.cpp
// vectorized_inner_sum -> row_sum(ilp 4) -> multi_row_sum over the C/32 chunks of 4 vectors of 8
// (torch_reduce.c sum_body), its 4-level cascade carried along (level `lp`, i.e.
// torch_sum_dim0_block_rows(C/32) chunks per level-0 block); the rows' cascades advance side by
// side. Four read streams per thread keep more misses in flight than one (README "The Adafactors'
// passes", ninth round). `rows` is a constant wherever this is inlined and the rows are named,
// as in adafactor_torch's aft_rows_body. The rows' sums into sums[0 .. rows); row r's last C % 32
// u values into tail_u[32 r ..] (the leftover vectors and scalars of that order, and the column
// tail).
static inline __attribute__((always_inline)) void afhf_rows_fused_body(const float* restrict g, float* restrict acc,
                                                                       float* restrict tail_u, size_t C, float eps1,
                                                                       bool first, int rows, float* restrict sums) {
    enum { CHUNK = AFHF_CHUNK };
    const size_t size = C / CHUNK, step = torch_sum_dim0_block_rows(size), mask = step - 1;
    const int lp = __builtin_ctzll((unsigned long long)step);
    float lv[4][AFHF_LEVELS][CHUNK];
    memset(lv, 0, (size_t)rows * sizeof lv[0]);
    const float *restrict g0 = g, *restrict g1 = rows > 1 ? g0 + C : g0, *restrict g2 = rows > 1 ? g1 + C : g0,
                *restrict g3 = rows > 1 ? g2 + C : g0;
    for (size_t c = 0; c < size; c++) {
        float* restrict ac = acc + c * CHUNK;
        const float *restrict gc0 = g0 + c * CHUNK, *restrict gc1 = g1 + c * CHUNK, *restrict gc2 = g2 + c * CHUNK,
                    *restrict gc3 = g3 + c * CHUNK;
        stream_prefetch_span(gc0, CHUNK * sizeof(float));
        if (rows > 1) {
            stream_prefetch_span(gc1, CHUNK * sizeof(float));
            stream_prefetch_span(gc2, CHUNK * sizeof(float));
            stream_prefetch_span(gc3, CHUNK * sizeof(float));
        }
        for (int t = 0; t < CHUNK; t++) {
            const float u0 = gc0[t] * gc0[t] + eps1;
            float a0 = first ? 0.0f + u0 : ac[t] + u0;
            lv[0][0][t] = lv[0][0][t] + u0;
            if (rows > 1) {
                const float u1 = gc1[t] * gc1[t] + eps1, u2 = gc2[t] * gc2[t] + eps1, u3 = gc3[t] * gc3[t] + eps1;
                a0 = ((a0 + u1) + u2) + u3;
                lv[1][0][t] = lv[1][0][t] + u1;
                lv[2][0][t] = lv[2][0][t] + u2;
                lv[3][0][t] = lv[3][0][t] + u3;
            }
            ac[t] = a0;
        }
        for (int r = 0; r < rows; r++) afhf_cascade_carry(lv[r], c + 1, mask, lp);  // c + 1 chunks summed so far
    }
    for (int r = 0; r < rows; r++)
        sums[r] = afhf_row_finish(lv[r], g + (size_t)r * C, tail_u + (size_t)r * CHUNK, C, size, eps1);
}

// The update U of elements [e0, e1) (flat index over the whole tensor) into out:
// factored, _approx_sq_grad(row, col) * g = (rsqrt(row/row_mean) * rsqrt(col)) * g;
// 1-D, rsqrt(v) * g.
static inline __attribute__((always_inline)) void afhf_update_body(const AfhfArgs* a, float* restrict out,
                                                                   size_t e0, size_t e1) {
    const float* restrict g = a->g;
    if (a->rf) {
        const size_t C = a->C, R = a->R;
        for (size_t e = e0; e < e1;) {
            const size_t grow = e / C, j = e - grow * C, len = C - j < e1 - e ? C - j : e1 - e;
            const float r = a->rf[grow];
            const float* restrict cf = a->cf + (grow / R) * C + j;
            const float* restrict gg = g + e;
            float* restrict o = out + (e - e0);
#pragma omp simd
            for (size_t t = 0; t < len; t++) o[t] = (r * cf[t]) * gg[t];
            e += len;
        }
    } else {
        const float* restrict v = a->v;
#pragma omp simd
        for (size_t e = e0; e < e1; e++) out[e - e0] = (1.0f / sqrtf(v[e])) * g[e];
    }
}

// Pass 2's chain when every row starts on a multiple of 8 elements (factored, C % 8 == 0):
// U = (rf * cf) * g formed in registers and fed straight into torch's 8 norm lanes (lane l
// takes the elements 8k + l: acc + RN(U*U), torch_sumsq_feed's order), with no buffer in
// between; rows [0, rows) of the (batch*R, C) view, the lanes carried in and out of `lane`.
static inline __attribute__((always_inline)) void afhf_u_sumsq_body(const AfhfArgs* a, float* restrict lane,
                                                                    size_t rows) {
    enum { V = 8 };
    const size_t C = a->C, R = a->R;
    float acc[V];
    memcpy(acc, lane, sizeof acc);
    for (size_t grow = 0; grow < rows; grow++) {
        const float r = a->rf[grow];
        const float* restrict cf = a->cf + (grow / R) * C;
        const float* restrict g = a->g + grow * C;
        for (size_t j = 0; j < C; j += V) {
            stream_prefetch_span(g + j, V * sizeof(float));
            for (int l = 0; l < V; l++) {
                const float U = (r * cf[j + (size_t)l]) * g[j + (size_t)l];
                const float sq = U * U;
                acc[l] = acc[l] + sq;
            }
        }
    }
    memcpy(lane, acc, sizeof acc);
}

// 1-D statistics, elements [lo, hi): v <- fma(u, 1-b2t, v*b2t), u = g*g + eps1
static inline __attribute__((always_inline)) void afhf_vec_body(const AfhfArgs* a, size_t lo, size_t hi) {
    float* restrict v = a->v;
    const float* restrict g = a->g;
    const float eps1 = a->eps1, keep = a->keep, add = a->add;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) v[i] = fmaf(add, g[i] * g[i] + eps1, v[i] * keep);
}

// One run of elements that share a row factor r (factored: U = (r * cf[t]) * g[t]; 1-D, cf is
// v and U = rsqrt(v[t]) * g[t]), U recomputed in the loop that updates p so that g, p (and m)
// stream together:
// U <- (U / clip) * lr ; [m <- fma(U, 1-b1, m*b1), U = m] ; [p <- fma(alpha, p, p)] ; p <- p - U
// `decay`, `beta1` and `clip1` are constants at every call, so each combination is its own
// loop. clip1: RMS(U) <= clip_threshold, the divisor is exactly 1 and U / 1 == U for every U
// (NaN and infinities included), so the division (the costliest instruction of the loop) is
// left out without changing a bit.
static inline __attribute__((always_inline)) void afhf_apply_run(const AfhfArgs* a, float* restrict p,
                                                                 float* restrict m, const float* restrict g,
                                                                 const float* restrict cf, float r, size_t len,
                                                                 bool factored, bool decay, bool beta1, bool clip1) {
    const float clip = a->clip, lr = a->lr, b1 = a->b1, w1 = a->w1, alpha = a->alpha;
#pragma omp simd
    for (size_t t = 0; t < len; t++) {
        const float U = factored ? (r * cf[t]) * g[t] : (1.0f / sqrtf(cf[t])) * g[t];
        float pt = p[t];
        if (decay) pt = fmaf(alpha, pt, pt);  // p.add_(p, alpha=-wd*lr) comes before p.add_(-update)
        if (beta1) {
            const float mt = fmaf(w1, (clip1 ? U : U / clip) * lr, m[t] * b1);
            m[t] = mt;
            pt = pt - mt;
        } else {
            pt = pt - (clip1 ? U : U / clip) * lr;
        }
        p[t] = pt;
    }
}

enum { AFHF_PF_RUN = STREAM_PAGE_BYTES / sizeof(float) };  // elements per run of the update pass

static inline __attribute__((always_inline)) void afhf_apply_runs(const AfhfArgs* a, size_t e0, size_t e1,
                                                                  bool decay, bool beta1, bool clip1) {
    float* m = beta1 ? a->m : NULL;
    if (!a->rf) {
        afhf_apply_run(a, a->p + e0, m ? m + e0 : NULL, a->g + e0, a->v + e0, 0, e1 - e0, false, decay, beta1,
                       clip1);
        return;
    }
    const size_t C = a->C, R = a->R;
    for (size_t e = e0; e < e1;) {
        const size_t grow = e / C, j = e - grow * C;
        size_t len = C - j < e1 - e ? C - j : e1 - e;
        if (len > AFHF_PF_RUN) len = AFHF_PF_RUN;  // one page of g and p per run: kick the streams
        stream_prefetch_run(a->g + e, len * sizeof(float));
        stream_prefetch_run(a->p + e, len * sizeof(float));
        afhf_apply_run(a, a->p + e, m ? m + e : NULL, a->g + e, a->cf + (grow / R) * C + j, a->rf[grow], len, true,
                       decay, beta1, clip1);
        e += len;
    }
}

// Elements [e0, e1) of the update pass.
static inline __attribute__((always_inline)) void afhf_apply_clip(const AfhfArgs* a, size_t e0, size_t e1,
                                                                  bool clip1) {
    if (a->decay) {
        if (a->beta1) afhf_apply_runs(a, e0, e1, true, true, clip1);
        else afhf_apply_runs(a, e0, e1, true, false, clip1);
    } else {
        if (a->beta1) afhf_apply_runs(a, e0, e1, false, true, clip1);
        else afhf_apply_runs(a, e0, e1, false, false, clip1);
    }
}

static inline __attribute__((always_inline)) void afhf_apply_body(const AfhfArgs* a, size_t e0, size_t e1) {
    if (a->clip == 1.0f) afhf_apply_clip(a, e0, e1, true);
    else afhf_apply_clip(a, e0, e1, false);
}

typedef struct {
    void (*urow)(const AfhfArgs*, const float*, float*, float*, bool, size_t);
    void (*rows_fused)(const float*, float*, float*, size_t, float, bool, int, float*);  // rows g, g + C, .. (1 or 4)
    void (*u_sumsq)(const AfhfArgs*, float*, size_t);
    void (*vec)(const AfhfArgs*, size_t, size_t);
    void (*apply)(const AfhfArgs*, size_t, size_t);
    TorchProduce produce;  // afhf_update_body for torch_sumsq_produced_f32
} AfhfKernels;

#define AFHF_KERNELS(sfx, attr)                                                                                 \
    attr static void afhf_urow_##sfx(const AfhfArgs* a, const float* g, float* u, float* acc, bool first,       \
                                     size_t Cm) {                                                               \
        afhf_urow_body(a, g, u, acc, first, Cm);                                                                \
    }                                                                                                           \
    attr static void afhf_rows_fused_##sfx(const float* g, float* acc, float* tail_u, size_t C, float eps1,     \
                                           bool first, int rows, float* sums) {                                 \
        if (rows == 4) {                                                                                        \
            if (first) afhf_rows_fused_body(g, acc, tail_u, C, eps1, true, 4, sums);                            \
            else afhf_rows_fused_body(g, acc, tail_u, C, eps1, false, 4, sums);                                 \
        } else {                                                                                                \
            if (first) afhf_rows_fused_body(g, acc, tail_u, C, eps1, true, 1, sums);                            \
            else afhf_rows_fused_body(g, acc, tail_u, C, eps1, false, 1, sums);                                 \
        }                                                                                                       \
    }                                                                                                           \
    attr static void afhf_u_sumsq_##sfx(const AfhfArgs* a, float* lane, size_t rows) {                          \
        afhf_u_sumsq_body(a, lane, rows);                                                                       \
    }                                                                                                           \
    attr static void afhf_vec_##sfx(const AfhfArgs* a, size_t lo, size_t hi) { afhf_vec_body(a, lo, hi); }     \
    attr static void afhf_apply_##sfx(const AfhfArgs* a, size_t e0, size_t e1) { afhf_apply_body(a, e0, e1); }   \
    attr static void afhf_produce_##sfx(const void* ctx, float* out, size_t e0, size_t e1) {                   \
        afhf_update_body(ctx, out, e0, e1);                                                                     \
    }                                                                                                           \
    static const AfhfKernels AFHF_##sfx = {afhf_urow_##sfx, afhf_rows_fused_##sfx, afhf_u_sumsq_##sfx,         \
                                           afhf_vec_##sfx,  afhf_apply_##sfx,      afhf_produce_##sfx};
AFHF_KERNELS(portable, )
#if defined(__x86_64__)
AFHF_KERNELS(avx2, __attribute__((target("avx2,fma"))))
static const AfhfKernels* afhf_kernels(void) {
    return cpu_features()->avx2 && cpu_features()->fma ? &AFHF_avx2 : &AFHF_portable;
}
#else
static const AfhfKernels* afhf_kernels(void) { return &AFHF_portable; }
#endif

enum { AFHF_PIECE = 2048 };  // elements per work item of the elementwise passes (8 KiB)

// Columns [j0, j1) of one matrix: col <- fma(mean_r(u), 1-b2t, col*b2t), cf = rsqrt(col).
static void afhf_col_factors(const AfhfArgs* a, float* col, float* cf, const float* colsum, size_t j0, size_t j1) {
    for (size_t j = j0; j < j1; j++) {
        col[j] = fmaf(colsum[j] / (float)a->R, a->add, col[j] * a->keep);
        cf[j] = 1.0f / sqrtf(col[j]);
    }
}

// The statistics of one (R, C) matrix b: row <- fma(mean_c(u), 1-b2t, row*b2t) and the same
// for col with mean_r(u) (update.mean(dim=-1) / mean(dim=-2): torch's cascade sums, one
// division), then the factors rf = rsqrt(row / row.mean(-1)), cf = rsqrt(col).
// One pass over g, one read per element (afhf_rows_fused_body four rows at a time, the rest of
// a block one row at a time; rows narrower than 8 through a row buffer): threads take blocks of rows (torch_sum_dim0_block_rows), each row's sum is
// complete in its thread and each block's column sums are torch's level-0 sums; the levels
// above are replayed per column after (torch_sum_dim0_combine), so nothing depends on threads.
static void afhf_matrix_stats(AdafactorHfState* s, const AfhfKernels* k, const AfhfArgs* a, size_t b) {
    AfhfScratch* sc = &s->sc;
    const size_t R = a->R, C = a->C, Cm = torch_sum_dim0_main_cols(C), Ct = C - Cm;
    const size_t B = torch_sum_dim0_block_rows(R), n_blocks = (R + B - 1) / B;
    const float* gb = a->g + b * R * C;  // (R, C)
    float* row = s->row + b * R;         // (R)
    float* col = s->col + b * C;         // (C)
    float* cf = sc->cf + b * C;
    enum { W = 256 };
    // One parallel region for both loops (one fork and join fewer per matrix): the blocks, then,
    // after the implicit barrier of the first loop, the column combine and factors by chunks.
#pragma omp parallel if (R * C >= OPTIM_PAR_MIN)
    {
#pragma omp for schedule(dynamic, 1)
        for (size_t blk = 0; blk < n_blocks; blk++) {
            float* u = sc->urow + (size_t)omp_get_thread_num() * C;
            float* acc = sc->part + blk * Cm;
            const size_t i1 = (blk + 1) * B < R ? (blk + 1) * B : R;
            for (size_t i = blk * B; i < i1;) {
                if (C >= 8 && i + 3 < i1) {  // four rows in one loop, one read each
                    float sums[4], tails[4 * 32];
                    k->rows_fused(gb + i * C, acc, tails, C, a->eps1, i == blk * B, 4, sums);
                    for (size_t r = 0; r < 4; r++, i++) {
                        row[i] = fmaf(sums[r] / (float)C, a->add, row[i] * a->keep);
                        if (Ct) memcpy(sc->tail + i * Ct, tails + 32 * r, Ct * sizeof(float));
                    }
                    continue;
                }
                float sum;
                if (C >= 8) {  // one read of the row; its u values after C/32*32 land in u
                    k->rows_fused(gb + i * C, acc, u, C, a->eps1, i == blk * B, 1, &sum);
                } else {
                    k->urow(a, gb + i * C, u, acc, i == blk * B, Cm);
                    sum = torch_sum_f32(u, C);
                }
                row[i] = fmaf(sum / (float)C, a->add, row[i] * a->keep);
                if (Ct) memcpy(sc->tail + i * Ct, C >= 8 ? u : u + Cm, Ct * sizeof(float));
                i++;
            }
        }
#pragma omp for schedule(static)
        for (size_t j = 0; j < Cm; j += W) {
            const size_t j1 = j + W < Cm ? j + W : Cm;
            torch_sum_dim0_combine(sc->colsum, sc->part, Cm, R, j, j1);
            afhf_col_factors(a, col, cf, sc->colsum, j, j1);
        }
    }
    if (Ct) {
        torch_sum_dim0_tail_f32(sc->colsum + Cm, sc->tail, Ct, R, C, Cm);
        afhf_col_factors(a, col, cf, sc->colsum, Cm, C);
    }
    const float row_mean = torch_sum_f32(row, R) / (float)R;
    float* rf = sc->rf + b * R;
    for (size_t i = 0; i < R; i++) rf[i] = 1.0f / sqrtf(row[i] / row_mean);
}

// The step in three passes over memory (the reductions' dependencies allow no fewer):
//  1. the statistics from g (factored: afhf_matrix_stats, one fused read per row; 1-D: v);
//  2. RMS(U), U formed in registers by the thread that runs torch's norm chain over it (two
//     multiplications per element: the chain's latency is the limit; afhf_u_sumsq_body when
//     rows start on multiples of 8, else through an L1 buffer), and RMS(p) alongside on a
//     second thread (p is unchanged until pass 3);
//  3. p (and m) updated, U recomputed from g and the factors; pieces claimed dynamically.
static void afhf_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    AdafactorHfState* s = (AdafactorHfState*)st;
    const size_t n = shape_numel(&st->shape);
    const AfhfKernels* k = afhf_kernels();
    afhf_scratch_ensure(s);
    st->step++;
    const double t = (double)st->step;

    const double b2t = 1.0 - pow(t, c->decay_rate);
    AfhfArgs a = {.p = p, .m = s->m, .v = s->v, .g = g, .eps1 = (float)c->eps1,
                  .keep = (float)b2t, .add = (float)(1.0 - b2t)};
    const size_t n_pieces = (n + AFHF_PIECE - 1) / AFHF_PIECE;
    if (st->shape.ndim >= 2) {
        size_t batch;
        shape_as_matrices(&st->shape, &batch, &a.R, &a.C);
        a.rf = s->sc.rf;
        a.cf = s->sc.cf;
        for (size_t b = 0; b < batch; b++) afhf_matrix_stats(s, k, &a, b);
    } else {
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
        for (size_t i = 0; i < n_pieces; i++) k->vec(&a, i * AFHF_PIECE, (i + 1) * AFHF_PIECE < n ? (i + 1) * AFHF_PIECE : n);
    }

    // torch's _rms(x): x.norm(2) (a 0-d fp32 tensor) / (numel ** 0.5), for U and for p
    float sumsq_u = 0, sumsq_p = 0;
    if (a.rf && a.C % 8 == 0) {  // U's chain fused (afhf_u_sumsq_body), p's on a second thread
#pragma omp parallel num_threads(omp_get_max_threads() > 1 ? 2 : 1) if (n >= OPTIM_PAR_MIN)
        {
            const int side = omp_get_num_threads() > 1 ? 1 : 0;
            if (omp_get_thread_num() == 0) {
                TorchSumsq acc;
                torch_sumsq_init(&acc);
                k->u_sumsq(&a, acc.lane, n / a.C);
                sumsq_u = torch_sumsq_finish(&acc, NULL, 0);
            }
            if (omp_get_thread_num() == side) sumsq_p = torch_sumsq_f32(p, n);
        }
    } else {
        torch_sumsq_produced_f32(n, k->produce, &a, p, &sumsq_u, &sumsq_p);
    }
    const float sqrt_n = (float)pow((double)n, 0.5);
    const float rms = sqrtf(sumsq_p) / sqrt_n;
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

    float clip = (sqrtf(sumsq_u) / sqrt_n) / (float)c->clip_threshold;
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
    // pieces claimed as threads come free (8 at a time, 64 KiB of p): on a machine shared with
    // other processes a descheduled thread no longer holds back a fixed half of the pass;
    // elementwise, so the bits do not depend on which thread takes which piece
#pragma omp parallel for schedule(dynamic, 8) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n_pieces; i++) k->apply(&a, i * AFHF_PIECE, (i + 1) * AFHF_PIECE < n ? (i + 1) * AFHF_PIECE : n);
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
    .free = afhf_free,
};

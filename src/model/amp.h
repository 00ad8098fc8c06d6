// amp.h — precision modes (`--precision`), the rounding points of CPU autocast, dynamic loss
// scaling exactly as torch.amp.GradScaler("cpu"), and the per-step gradient underflow/overflow
// counters. SPEC.md sections 2 and 4 are the contract; reference/MODEL_SEMANTICS.md (what
// torch/transformers really compute under CPU autocast) overrides SPEC.md where they differ.
//
// Rounding model. Every tensor of the C model is an fp32 array; a tensor that torch holds in a
// low dtype (bf16/fp16) is an fp32 array whose values are exactly representable in that dtype
// (rounded once, round-to-nearest-even, where torch rounds). Widening is exact (SPEC.md 1), so
// this represents torch's tensors value for value. Where each mode rounds (layers.h and
// model.c implement it; model.c's header lists every point):
//   - GEMM-type ops (linear = addmm, the attention matmuls QK^T and PV, and their backward
//     GEMMs) take inputs rounded to the low dtype, accumulate in fp32 and round the output to
//     the low dtype once (a linear's bias is rounded to the low dtype and added to the fp32
//     accumulator before that single rounding, as torch's addmm).
//   - Ops in no autocast list (softmax, layer_norm, gelu, relu, the `* scaling` of the scores)
//     run in the dtype they receive: computed in fp32, output rounded to the input's dtype.
//   - A mixed add (a low-dtype branch + an fp32 residual, or bf16 scores + the fp32 padding
//     mask) promotes to fp32; its backward hands the low-dtype input a gradient rounded to the
//     low dtype (an "activation-gradient rounding point").
//   - cross_entropy is in the autocast fp32 list: logits are widened, everything is fp32.
//   - Backward runs in each op's forward dtype; a weight or bias gradient is computed in the low
//     dtype, rounded to it (a "parameter-gradient rounding point") and stored widened in the
//     fp32 gradient buffer. Embedding and LayerNorm parameters see fp32 ops only, so their
//     gradients are fp32 in every mode.
//
// Not here: the layers themselves (layers.h), the model (model.h), the optimizer step.
#ifndef TRAINBENCH_AMP_H
#define TRAINBENCH_AMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/dtype.h"
#include "gemm/gemm.h"

// ---- precision modes ----
typedef struct {
    const char* name;         // registry name: "fp32", "bf16", "fp16", "fp16-noscale"
    const char* description;  // one line for `trainbench info` and --help
    DType low;                // GEMM input/output dtype: DTYPE_F32 (no autocast), BF16 or F16
    bool loss_scaling;        // dynamic loss scaling (GradScaler) is on
} PrecisionMode;

// true for the autocast modes (low != DTYPE_F32)
static inline bool amp_is_mixed(const PrecisionMode* m) { return m->low != DTYPE_F32; }

size_t amp_mode_count(void);
const PrecisionMode* amp_mode_at(size_t i);
const PrecisionMode* amp_mode_find(const char* name);  // NULL if unknown
const char* amp_mode_names_list(void);                 // "fp32, bf16, fp16, fp16-noscale"

// STATUS_UNSUPPORTED (with the backend's reason) when the GEMM backend cannot run this mode:
// the model needs (low -> low) for activations and (low -> f32) for weight gradients. Native
// and emulated support are both fine; there is never a fallback to another dtype or backend.
Status amp_check_backend(const PrecisionMode* m, const GemmBackend* backend);

// ---- rounding points and the underflow/overflow counters ----
// What is counted (per step; amp_counters_reset before each backward):
//   At every PARAMETER-gradient rounding point (the fp32 result of a weight-gradient GEMM or of
//   a bias-gradient sum, just before it is rounded to the low dtype and stored widened in the
//   fp32 .grad), each element whose fp32 value v is finite and nonzero is one "value"; it is an
//   UNDERFLOW when round(v) == 0 (v was below half the smallest subnormal; a value that becomes
//   a subnormal is not counted) and an OVERFLOW when round(v) is +-inf. Zeros, infs and NaNs
//   that arrive from upstream are not counted (nothing was lost at this point).
//   The same three numbers are kept separately for ACTIVATION-gradient rounding points (an
//   fp32 gradient handed to a low-dtype tensor: the residual adds, the logits, the padded
//   softmax): a diagnostic of where the small values were lost before they reached a weight.
// The counts are those of the gradients the backward really computes, i.e. of loss*scale when
// loss scaling is on: scaling moves values away from the underflow threshold, which is what
// the counters show. In fp32 mode nothing is rounded and every counter stays 0.
typedef struct {
    uint64_t param_values;     // finite nonzero values rounded at parameter-gradient points
    uint64_t param_underflow;  // ... that became +-0
    uint64_t param_overflow;   // ... that became +-inf
    uint64_t act_values;       // the same at activation-gradient points
    uint64_t act_underflow;
    uint64_t act_overflow;
} AmpCounters;

void amp_counters_reset(AmpCounters* c);

// Rounds x (n) in place to dt (DTYPE_F32: no-op). When the counters are given, counts as
// described above into (values, underflow, overflow); values == NULL: rounds only (no count
// work). Bit-identical to dtype_round_row.
void amp_round_count(float* x, size_t n, DType dt, uint64_t* values, uint64_t* underflow, uint64_t* overflow);
// The same from src into x (n each; src == x is the in-place form): x = R(src), counted; fp32
// copies. One pass instead of a copy and a rounding pass.
void amp_round_count_from(float* x, const float* src, size_t n, DType dt, uint64_t* values, uint64_t* underflow,
                          uint64_t* overflow);
// d (n) += R(src) (n), counted as amp_round_count counts src's rounding; src is not written.
// One pass (no parallel region: callers split large arrays).
void amp_round_add_count(float* d, const float* src, size_t n, DType dt, uint64_t* values, uint64_t* underflow,
                         uint64_t* overflow);
// The two kinds of rounding points; c may be NULL (no counting).
void amp_round_param_grad(float* x, size_t n, DType dt, AmpCounters* c);
void amp_round_act_grad(float* x, size_t n, DType dt, AmpCounters* c);

// ---- loss scaling: torch.amp.GradScaler("cpu") ----
// reference: pytorch torch/amp/grad_scaler.py (GradScaler.scale/unscale_/step/update) and
// aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp (_amp_foreach_non_finite_check_and_unscale_,
// _amp_update_scale_). The scale is a float32 (torch keeps it in a 0-d float32 tensor), the
// growth tracker an int32.
typedef struct {
    double init_scale;       // 2^16
    double growth_factor;    // 2.0
    double backoff_factor;   // 0.5
    int64_t growth_interval; // 2000
    bool enabled;            // false: scale 1, unscale/update do nothing (GradScaler(enabled=False))
} GradScalerConfig;

typedef struct {
    GradScalerConfig cfg;
    float scale;             // current scale (float32)
    int32_t growth_tracker;  // successful (finite) steps since the last change
    uint64_t n_skipped;      // steps skipped because a gradient was inf/NaN (bookkeeping)
} GradScaler;

// torch defaults (init_scale 65536, growth 2, backoff 0.5, interval 2000), enabled.
GradScalerConfig grad_scaler_defaults(void);
// STATUS_INVALID naming the field: init_scale finite > 0, growth_factor finite > 1,
// backoff_factor in (0, 1), growth_interval >= 1 (torch's own asserts).
Status grad_scaler_validate(const GradScalerConfig* cfg);
void grad_scaler_init(GradScaler* s, const GradScalerConfig* cfg);
// The factor the loss is multiplied by before backward: scale (1 when disabled).
float grad_scaler_loss_scale(const GradScaler* s);
// float32(1/scale), the reciprocal taken in double then rounded (grad_scaler.py:
// self._scale.double().reciprocal().float()).
float grad_scaler_inv_scale(const GradScaler* s);
// unscale_: every g (n) becomes g * inv_scale (float32 multiply; skipped when inv_scale == 1,
// as the kernel does). Returns true when any g was inf or NaN BEFORE the multiply (found_inf).
// Disabled: returns false and leaves g untouched. Call once per step over all gradients (or
// once per tensor and OR the results).
bool grad_scaler_unscale(const GradScaler* s, float* g, size_t n);
// update(): found_inf -> scale *= backoff (no lower bound), tracker = 0, n_skipped++;
// else tracker += 1 and when it reaches growth_interval: scale *= growth if the product is
// finite in float32 (else the scale stays), tracker = 0. Products are taken in double and
// rounded to float32, as the kernel does. Disabled: nothing.
void grad_scaler_update(GradScaler* s, bool found_inf);
// Whether the optimizer step must run this step (GradScaler.step: skipped when found_inf).
static inline bool grad_scaler_should_step(bool found_inf) { return !found_inf; }

#endif

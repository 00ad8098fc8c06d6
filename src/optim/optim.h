// optim.h — the Optimizer vtable, its hyperparameters and the optimizer registry.
// Optimizers work per tensor: each parameter tensor gets its own state (as torch keeps
// optimizer.state[p]); the trainer, the memory report and the conformance tests iterate the
// parameter table and call the same four functions. Every optimizer mirrors one library
// function exactly (SPEC.md section 3; reference/OPTIM_SEMANTICS.md records what the
// installed libraries really do) and keeps its own step count, so a skipped step (GradScaler
// found inf/NaN) is simply a step() that is not called.
// Not here: learning-rate schedules, gradient clipping, loss scaling (amp.h).
#ifndef TRAINBENCH_OPTIM_H
#define TRAINBENCH_OPTIM_H

#include <jansson.h>
#include <math.h>

#include "core/common.h"
#include "core/dtype.h"

#define OPTIM_MAX_DIMS 4
#define OPTIM_MAX_STATE 8
// A tensor of at least this many elements runs its step's passes on the OpenMP team; a smaller
// one on the calling thread. model_optim_step relies on it: it steps the large tensors one after
// another and the small ones several at once, one per thread (model.c).
#define OPTIM_PAR_MIN 65536

typedef struct {
    int ndim;                        // 0..OPTIM_MAX_DIMS; a 0-d tensor has numel 1
    int64_t dims[OPTIM_MAX_DIMS];
} TensorShape;

size_t shape_numel(const TensorShape* s);
TensorShape shape_1d(int64_t n);
TensorShape shape_2d(int64_t rows, int64_t cols);

// All hyperparameters of all optimizers; each optimizer reads the ones it has and ignores the
// rest. optim_defaults() fills the library defaults of one optimizer (as HF Trainer sets them).
typedef struct {
    double lr;              // learning rate (>= 0); Adafactor HF: ignored when relative_step
    bool lr_none;           // lr=None (Adafactor HF with relative_step; lr is then 0)
    double beta1, beta2;    // AdamW family: betas; Adafactor HF: beta1 used when has_beta1
    bool has_beta1;         // Adafactor HF: beta1=None -> false
    double eps;             // AdamW family
    double weight_decay;    // decoupled (AdamW family, adafactor_torch) / HF Adafactor's own form
    // Constructor flags that select code paths; validate() refuses the values we do not mirror.
    bool amsgrad, maximize, capturable, differentiable;
    bool foreach, fused;    // torch: True selects the multi-tensor / fused path (None, False: for-loop)
    bool is_paged;          // bitsandbytes: paged state buffers
    bool args_given;        // bitsandbytes: args is not None
    int optim_bits;         // bitsandbytes AdamW8bit: must be 32 (the library's own rule)
    // transformers Adafactor
    double eps1, eps2;      // eps=(1e-30, 1e-3); adafactor_torch: eps1 < 0 means None (dtype eps)
    double clip_threshold;  // 1.0
    double decay_rate;      // -0.8 (HF) ; torch: beta2_decay
    bool scale_parameter, relative_step, warmup_init;
    // torch Adafactor
    double d;               // clipping threshold d = 1.0
    // bitsandbytes 8-bit
    int block_size;         // 256
    size_t min_8bit_size;   // 4096: smaller tensors keep fp32 state
} OptimConfig;

typedef struct {
    char name[64];          // the library's state key: "exp_avg", "state1", "row_var", ...
    DType dtype;
    TensorShape shape;
    void* data;             // owned by the optimizer state
} StateTensor;

// Per-tensor state: the optimizer's own struct begins with this header.
typedef struct OptimState {
    const struct Optimizer* optim;
    TensorShape shape;      // the parameter's shape
    int64_t step;           // steps taken (t of the last step; 0 before the first)
    int n_tensors;
    StateTensor tensors[OPTIM_MAX_STATE];  // everything the library keeps, step included
} OptimState;

// The rounding-order band of one tensor per element (reference/CONFORMANCE.md "Verdict bands"):
// the largest |x - reference| an implementation of the same formulas with other correctly
// rounded fp32 orderings (fma vs mul+add, operand order, lerp either way, bias corrections in
// double) can reach. `param` (numel) and `state[i]` (indexed like the reference state's
// tensors[], each of that tensor's numel; a U8 code tensor's band: the code steps below and
// above the reference's code that it reaches, validate/rounding_band.h code_band_pack; NULL for
// tensors without a band) are owned by conform; aux[] are zeroed scratch arrays of numel
// doubles each, for the optimizer's own envelopes. A NaN band: none (bit-exact only there).
#define ROUNDING_BAND_AUX 8
typedef struct {
    size_t n;
    double* param;
    double* state[OPTIM_MAX_STATE];
    double* aux[ROUNDING_BAND_AUX];
    // Set by the caller from the band's reference (NULL: the optimizer's own): its code maps
    // (bitsandbytes' qmap1/qmap2, from its find_shared_state) and, when the reference is a
    // known-mistake variant, the mistake's id (optim_mistakes.h), for bands whose reference
    // values are recomputed rather than read from the state (the 8-bit path).
    const float* qmap[2];
    const char* recurrence;
} RoundingBand;

typedef struct Optimizer {
    const char* name;        // registry name = HF TrainingArguments.optim: "adamw_torch", ...
    const char* reference;   // "torch.optim.AdamW (for-loop path)"
    void (*defaults)(OptimConfig* cfg);
    // STATUS_INVALID naming the field and the allowed range when a value is bad.
    Status (*validate)(const OptimConfig* cfg);
    // Closed-formula state size in bytes for a tensor of this shape (SPEC.md section 5),
    // excluding anything shared by all tensors (see shared_state_bytes).
    size_t (*state_bytes)(const TensorShape* shape, const OptimConfig* cfg);
    // Bytes shared by every tensor of a run (bitsandbytes' two code maps); may be NULL.
    size_t (*shared_state_bytes)(const OptimConfig* cfg);
    // Allocates the state for one parameter tensor, zeroed as the library initialises it
    // (most libraries create state lazily at the first step; the values are the same).
    OptimState* (*init)(const TensorShape* shape, const OptimConfig* cfg);
    // One step: updates p (numel floats) in place from g; increments the state's step.
    void (*step)(OptimState* st, float* p, const float* g, const OptimConfig* cfg);
    void (*free)(OptimState* st);
    // Optional: a state tensor shared by all parameter tensors (bitsandbytes' qmap1/qmap2),
    // by the library's state key; NULL if none has that name.
    const StateTensor* (*find_shared_state)(const char* name);
    // The hyper-parameter table: the library constructor's keyword arguments (NULL-terminated).
    // optim_config_from_json refuses any other key, naming the class and this list; the values
    // are judged by validate() with the library's own rule (and a "not implemented" rule for
    // what the library accepts but we do not mirror).
    const char* const* keywords;
    // The constructor's defaults where they differ from `defaults` (which are the HF Trainer's
    // configuration); NULL: the same. Golden hparams are constructor kwargs, so an omitted key
    // takes the constructor's default.
    void (*constructor_defaults)(OptimConfig* cfg);
    // Optional: advances the rounding-order band by one step of the reference trajectory: `st`
    // is the reference state after the step, p_prev/p the reference params before/after it, g
    // its gradient. NULL: no band derived (every difference beyond the tolerance is a failure).
    void (*rounding_band_step)(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                               const float* g, const OptimConfig* cfg);
    // Optional (last, so that plugins built without it keep their layout): step() on the
    // gradient g * g_scale (each element rounded once to float, as an in-place g.mul_(g_scale)
    // before the step), without writing g: gradient clipping's multiply fused into the step's
    // own pass over g. NULL: model_optim_step_scaled multiplies g in place, then calls step().
    void (*step_scaled)(OptimState* st, float* p, const float* g, float g_scale, const OptimConfig* cfg);
} Optimizer;

// registry
size_t optim_count(void);
const Optimizer* optim_at(size_t i);
const Optimizer* optim_find(const char* name);
const char* optim_names_list(void);

// Convenience wrappers.
void optim_defaults(const Optimizer* o, OptimConfig* cfg);
// Measured state: sum of numel*element_size over the state tensors (what the seed's
// compute_optimizer_size does); elements counted likewise.
size_t optim_state_measured_bytes(const OptimState* st);
size_t optim_state_measured_elems(const OptimState* st);
const StateTensor* optim_state_find(const OptimState* st, const char* name);

// Hyperparameters from JSON: the library constructor's keyword arguments (golden `hparams`),
// starting from the constructor's defaults. A key not in o->keywords is an error naming the
// class and its keywords; a value of the wrong JSON type names the key and the type expected;
// then o->validate() applies the library's rules.
Status optim_config_from_json(const Optimizer* o, json_t* hp, OptimConfig* cfg);
// The same, skipping keys o does not take: a known-mistake variant running another optimizer
// (the other Adafactor dialect) on a case's hparams, from `defaults` (HF Trainer's configuration).
Status optim_config_from_json_skipping(const Optimizer* o, json_t* hp, OptimConfig* cfg);
// "lr, betas, eps, ..." (o->keywords joined), for messages.
const char* optim_keywords_list(const Optimizer* o, char* buf, size_t len);

// Helpers for optimizer files: add a state tensor to st (allocates zeroed, 64-byte aligned).
void* optim_state_add(OptimState* st, const char* name, DType dt, TensorShape shape);
OptimState* optim_state_new(const Optimizer* o, size_t struct_size, const TensorShape* shape);
void optim_state_free_tensors(OptimState* st);
// Shared validation pieces: each returns STATUS_OK or STATUS_INVALID with "<field> must ...".
Status optim_check_positive(const char* field, double v);          // finite and > 0
Status optim_check_nonneg(const char* field, double v);            // finite and >= 0
Status optim_check_beta(const char* field, double v);              // 0 <= v < 1
// The library's rule `if not 0.0 <= v: raise ValueError(...)`: v >= 0 (NaN fails); `lib_msg`
// is the library's own message, quoted in ours.
Status optim_check_ge0(const char* field, double v, const char* lib_msg);
// Adam's constructor range checks as torch.optim.Adam and bitsandbytes' optimizers both word them:
// lr >= 0, eps >= 0, betas in [0, 1), weight_decay >= 0; `library` ("torch", "bitsandbytes")
// is named in the message.
Status optim_adam_ranges_check(const OptimConfig* c, const char* library);
// torch.optim.AdamW.__init__'s range checks (Adam's, which AdamW passes its arguments through),
// with torch's messages: lr a number >= 0, eps >= 0, betas in [0, 1), weight_decay >= 0, and
// fused and foreach / differentiable not together. adamw_torch and adamw_torch_fused share them.
Status optim_torch_adamw_check(const OptimConfig* c);
// torch.optim.AdamW.__init__'s keywords (torch 2.15; Optimizer.keywords of both torch AdamWs)
extern const char* const optim_torch_adamw_keywords[];
// torch.optim.AdamW's state, as both torch AdamWs keep it: exp_avg, exp_avg_sq (fp32, the
// parameter's shape) and step (0-d fp32), and with amsgrad max_exp_avg_sq (fp32, the parameter's
// shape), zeroed; owned by optimizer o. Its closed-form size.
OptimState* optim_torch_adamw_state_new(const Optimizer* o, const TensorShape* shape, const OptimConfig* c);
size_t optim_torch_adamw_state_bytes(const TensorShape* shape, const OptimConfig* c);
// The max_exp_avg_sq array of a torch AdamW state (amsgrad), or NULL.
float* optim_torch_adamw_vmax(const OptimState* st);
// AdamW's rounding-order band (Optimizer.rounding_band_step; optim_adamw_torch.c): adamw_torch's,
// shared by adamw_torch_fused and used inside bitsandbytes' and the mistake variants' bands.
void optim_adamw_rounding_band_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                                    const float* g, const OptimConfig* c);
// Whether o's constructor takes the keyword `key` (its keywords table).
bool optim_has_keyword(const Optimizer* o, const char* key);
// The environment variables that choose how the optimizers compute and read memory, once, at
// start (the CLI's and the benchmark binary's main): TRAINBENCH_TORCH_SQRT (torch_sqrt.h), then
// TRAINBENCH_STREAM_PREFETCH (core/stream_prefetch.h). false with the refusal's message in err.
bool optim_apply_env(char* err, size_t cap);
// A value the library accepts but trainbench does not mirror: STATUS_INVALID saying so.
Status optim_not_implemented(const char* optim, const char* what);

extern const Optimizer optim_adamw_torch;
extern const Optimizer optim_adamw_torch_fused;
extern const Optimizer optim_adafactor_hf;
extern const Optimizer optim_adafactor_torch;
extern const Optimizer optim_adamw_bnb_8bit;


// Shared helper for optimizer files.
// A tensor of ndim >= 2 seen as (batch, rows, cols) over its last two dims.
void shape_as_matrices(const TensorShape* s, size_t* batch, size_t* rows, size_t* cols);

// torch's lerp as its vectorized CPU kernel computes it (ATen Lerp.h lerp_vec):
// |w| < 0.5: fma(w, end - self, self); otherwise fma(w - 1, end - self, end).
// Tests: adafactor_torch takes its large-tensor path (U recomputed, never stored) at every size.
void optim_adafactor_torch_force_recompute(bool on);
// Tests: adamw_bnb_8bit's 8-bit steps use at most kernel max_kernel (3 AVX-512 VBMI, 2 AVX-512,
// 1 AVX2; -1: the best this CPU has). Returns the kernel full blocks will now take (0: portable).
int optim_adamw_bnb_8bit_force_kernel(int max_kernel);
// Tests: adafactor_torch's passes 2 and 3 in the AVX2 kernels even where the AVX-512 ones run.
void optim_adafactor_torch_force_no_avx512(bool on);
// How many steps so far took adafactor_torch's AVX-512 kernels (tests: that they ran).
size_t optim_adafactor_torch_avx512_steps(void);

static inline float torch_lerp(float self, float end, float w) {
    return w < 0.5f && w > -0.5f ? fmaf(w, end - self, self) : fmaf(w - 1.0f, end - self, end);
}

// torch.maximum(a, b) on floats (ATen's maximum kernel): NaN when either is NaN, else the larger
// (a > b ? a : b, as Vectorized's max_ps; the operands here are never zeros of both signs). The
// NaN's bits may differ from torch's (all-ones in its vector body), never whether it is NaN.
static inline float optim_torch_maximum(float a, float b) {
    return a != a || b != b ? NAN : a > b ? a : b;
}
#if defined(__x86_64__)
#include <immintrin.h>
// 8 lanes of optim_torch_maximum: max_ps, then all ones (a NaN) where either operand is NaN
__attribute__((target("avx2"), always_inline)) static inline __m256 optim_torch_maximum8(__m256 a, __m256 b) {
    return _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
#endif

#endif

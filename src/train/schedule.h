// schedule.h — the two per-step policies Hugging Face's Trainer wraps around the optimizer:
// the learning-rate schedule (transformers.get_scheduler's schedules: linear, constant, cosine, ...) and
// gradient clipping (torch.nn.utils.clip_grad_norm_ as the Trainer calls it, after the
// GradScaler's unscale). train_step() (train.h) applies both; `trainbench train` sets them
// from --lr-scheduler-type, --warmup-steps/--warmup-ratio and --max-grad-norm.
// Not here: the optimizers' own arithmetic (optim/), loss scaling (model/amp.h).
#ifndef TRAINBENCH_SCHEDULE_H
#define TRAINBENCH_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

// TrainingArguments.lr_scheduler_type values whose schedule needs no extra keyword arguments
// (the Trainer passes none by default) and no evaluation metric (reduce_lr_on_plateau).
typedef enum {
    LR_SCHEDULE_LINEAR,                // "linear": TrainingArguments' default
    LR_SCHEDULE_CONSTANT,              // "constant": lr every step (no warmup, as transformers' "constant")
    LR_SCHEDULE_COSINE,                // "cosine": get_cosine_schedule_with_warmup (num_cycles 0.5)
    LR_SCHEDULE_COSINE_WITH_RESTARTS,  // "cosine_with_restarts": ..._with_hard_restarts (num_cycles 1)
    LR_SCHEDULE_POLYNOMIAL,            // "polynomial": get_polynomial_decay_schedule_with_warmup (lr_end 1e-7, power 1)
    LR_SCHEDULE_CONSTANT_WITH_WARMUP,  // "constant_with_warmup"
    LR_SCHEDULE_INVERSE_SQRT,          // "inverse_sqrt": timescale = warmup steps, or 10,000 without warmup
    LR_SCHEDULE_COUNT
} LrScheduleType;

typedef struct {
    LrScheduleType type;
    double base_lr;          // the optimizer's lr (TrainingArguments.learning_rate)
    int64_t warmup_steps;    // >= 0 (not for constant)
    int64_t training_steps;  // num_training_steps = max_steps
} LrSchedule;

const char* lr_schedule_name(LrScheduleType t);          // "linear", "constant", ...
bool lr_schedule_find(const char* name, LrScheduleType* out);
const char* lr_schedule_names_list(void);                 // "linear, constant, cosine, ..."
// The schedule's own refusals, as transformers raises them (polynomial: lr_end 1e-7 must be below
// the lr; a decay of zero steps divides by zero at the scheduler step after the last): NULL when
// fine, else a message (static).
const char* lr_schedule_refusal(const LrSchedule* s);
// TrainingArguments.get_warmup_steps (transformers 5.x, whose warmup_steps is a float >= 0): from
// 1 a count, int() of it (truncated); below 1 a ratio, ceil(training_steps * warmup_steps).
int64_t lr_schedule_warmup_steps(double warmup_steps, int64_t training_steps);

// The lr of the optimizer step that follows `scheduler_steps` earlier scheduler steps, as
// LambdaLR computes it: base_lr * lambda(scheduler_steps), in double, with transformers 5.24's
// lambdas (optimization.py), W warmup steps, N training steps, k = scheduler_steps:
//   warmup (all but constant): k < W: k / max(1, W)
//   linear:     max(0, (N - k) / max(1, N - W))
//   cosine:     p = (k - W) / max(1, N - W); max(0, 0.5 * (1 + cos(((pi * 0.5) * 2) * p)))
//   cosine_with_restarts: the same p; 0 when p >= 1, else max(0, 0.5 * (1 + cos(pi * ((1 * p) % 1))))
//   polynomial: k > N: lr_end / lr; else ((lr - lr_end) * (1 - (k - W) / (N - W))^1 + lr_end) / lr
//   constant_with_warmup: 1;  inverse_sqrt: 1 / sqrt((k + T - W) / T), T = W or 10,000
// (each step the Python expression's own order of double operations). The Trainer steps the scheduler only after an
// optimizer step that was not skipped by the GradScaler, so scheduler_steps is the number of
// optimizer steps taken (OptimState.step), not the loop's step.
double lr_schedule_lr(const LrSchedule* s, int64_t scheduler_steps);

// torch.nn.utils.clip_grad_norm_(params, max_norm) (norm_type 2, foreach on CPU), exactly:
//   norms[i] = linalg.vector_norm(grad_i)        per tensor, float32, torch's CPU order
//   total    = linalg.vector_norm(stack(norms))  float32, the same order over the norms
//   coef     = reciprocal(total + f32(1e-6)) * f32(max_norm)   (Tensor.__rtruediv__ is
//              reciprocal() * other), clamped to <= 1.0 (NaN stays NaN)
//   grad_i  *= coef                               every tensor, even when coef == 1
// This computes total (returned: the Trainer's logged grad_norm) and the clamped coef, grads
// (a table buffer) untouched: the trainer passes coef to model_optim_step_scaled, which does
// the multiply inside the optimizer's pass over the gradient (or in place first), and skips it
// when coef is exactly 1: that happens only with every gradient finite (a NaN gradient makes
// coef NaN, an infinite one 0), where x * 1.0f == x bit for bit.
float grad_clip_coef(const ParamTable* t, const float* grads, double max_norm, float* coef);
// Only the total norm (no clipping), as clip_grad_norm_ computes it.
float grad_total_norm(const ParamTable* t, const float* grads);

#endif

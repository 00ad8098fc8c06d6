// schedule.h — the two per-step policies Hugging Face's Trainer wraps around the optimizer:
// the learning-rate schedule (transformers.get_linear_schedule_with_warmup / constant) and
// gradient clipping (torch.nn.utils.clip_grad_norm_ as the Trainer calls it, after the
// GradScaler's unscale). train_step() (train.h) applies both; `trainbench train` sets them
// from --lr-scheduler-type, --warmup-steps/--warmup-ratio and --max-grad-norm.
// Not here: the optimizers' own arithmetic (optim/), loss scaling (model/amp.h).
#ifndef TRAINBENCH_SCHEDULE_H
#define TRAINBENCH_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

typedef enum {
    LR_SCHEDULE_LINEAR,    // "linear": TrainingArguments' default
    LR_SCHEDULE_CONSTANT,  // "constant": lr every step (no warmup, as transformers' "constant")
    LR_SCHEDULE_COUNT
} LrScheduleType;

typedef struct {
    LrScheduleType type;
    double base_lr;          // the optimizer's lr (TrainingArguments.learning_rate)
    int64_t warmup_steps;    // >= 0 (linear only)
    int64_t training_steps;  // num_training_steps = max_steps
} LrSchedule;

const char* lr_schedule_name(LrScheduleType t);          // "linear", "constant"
bool lr_schedule_find(const char* name, LrScheduleType* out);
const char* lr_schedule_names_list(void);                 // "linear, constant"
// TrainingArguments.get_warmup_steps for a fraction in [0, 1): ceil(training_steps * ratio).
int64_t lr_schedule_warmup_from_ratio(double ratio, int64_t training_steps);

// The lr of the optimizer step that follows `scheduler_steps` earlier scheduler steps, as
// LambdaLR computes it: base_lr * lambda(scheduler_steps), in double. linear (transformers
// _get_linear_schedule_with_warmup_lr_lambda): k < warmup: k / max(1, warmup); else
// max(0, (N - k) / max(1, N - warmup)). The Trainer steps the scheduler only after an
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

// schedule.c — Hugging Face Trainer's learning-rate schedules and torch's clip_grad_norm_
// (see schedule.h for the formulas). Not here: when they run in a step (train.c, train_step).
// reference: transformers src/transformers/optimization.py get_linear_schedule_with_warmup,
// get_constant_schedule; torch/optim/lr_scheduler.py LambdaLR; torch/nn/utils/clip_grad.py
// _get_total_norm, _clip_grads_with_norm_; transformers trainer.py (_clip_grad_norm after
// the scaler's unscale, lr_scheduler.step() only when the optimizer step was not skipped).
#include "train/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/torch_reduce.h"

static const char* const NAMES[LR_SCHEDULE_COUNT] = {"linear", "constant"};

const char* lr_schedule_name(LrScheduleType t) {
    CHECK(t >= 0 && t < LR_SCHEDULE_COUNT);
    return NAMES[t];
}

bool lr_schedule_find(const char* name, LrScheduleType* out) {
    for (int i = 0; i < LR_SCHEDULE_COUNT; i++)
        if (!strcmp(name, NAMES[i])) {
            *out = (LrScheduleType)i;
            return true;
        }
    return false;
}

const char* lr_schedule_names_list(void) { return "linear, constant"; }

int64_t lr_schedule_warmup_from_ratio(double ratio, int64_t training_steps) {
    CHECK(ratio >= 0 && ratio < 1 && training_steps >= 0);
    return (int64_t)ceil((double)training_steps * ratio);  // math.ceil(num_training_steps * warmup_steps)
}

double lr_schedule_lr(const LrSchedule* s, int64_t k) {
    CHECK(k >= 0);
    if (s->type == LR_SCHEDULE_CONSTANT) return s->base_lr * 1.0;
    double lambda;
    if (k < s->warmup_steps) {
        lambda = (double)k / (double)(s->warmup_steps > 1 ? s->warmup_steps : 1);
    } else {
        int64_t d = s->training_steps - s->warmup_steps;
        lambda = (double)(s->training_steps - k) / (double)(d > 1 ? d : 1);
        if (!(lambda > 0.0)) lambda = 0.0;  // max(0.0, ...)
    }
    return s->base_lr * lambda;
}

// The per-tensor norms are independent (each is one chain in torch's order, never split), so
// they run on the thread team, the largest tensors claimed first; norms[i] is the same value
// whichever thread computes it.
static int by_numel_desc(const void* a, const void* b, void* tv) {
    const ParamTable* t = tv;
    const size_t na = t->t[*(const size_t*)a].numel, nb = t->t[*(const size_t*)b].numel;
    return na < nb ? 1 : na > nb ? -1 : 0;
}

float grad_total_norm(const ParamTable* t, const float* grads) {
    const size_t n = t->n;
    float* norms = xmalloc((n ? n : 1) * sizeof(float));     // (n) torch.stack(norms)
    size_t* order = xmalloc((n ? n : 1) * sizeof(size_t));  // (n) tensor indices, largest first
    for (size_t i = 0; i < n; i++) order[i] = i;
    qsort_r(order, n, sizeof *order, by_numel_desc, (void*)t);
#pragma omp parallel for schedule(dynamic, 1) if (t->numel > (1u << 20))
    for (size_t k = 0; k < n; k++) {
        const size_t i = order[k];
        norms[i] = torch_norm2_f32(grads + t->t[i].offset, t->t[i].numel);
    }
    float total = torch_norm2_f32(norms, n);
    free(order);
    free(norms);
    return total;
}

float grad_clip_coef(const ParamTable* t, const float* grads, double max_norm, float* coef_out) {
    const float total = grad_total_norm(t, grads);
    const float denom = total + 1e-6f;
    float coef = (1.0f / denom) * (float)max_norm;
    if (coef > 1.0f) coef = 1.0f;  // torch.clamp(max=1.0): NaN stays NaN
    *coef_out = coef;
    return total;
}

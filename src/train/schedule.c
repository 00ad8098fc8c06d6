// schedule.c — Hugging Face Trainer's learning-rate schedules and torch's clip_grad_norm_
// (see schedule.h for the formulas). Not here: when they run in a step (train.c, train_step).
// reference: transformers src/transformers/optimization.py get_scheduler and the lr lambdas of
// its linear, constant, cosine, cosine_with_hard_restarts, polynomial_decay, constant_with_warmup
// and inverse_sqrt schedules; torch/optim/lr_scheduler.py LambdaLR; torch/nn/utils/clip_grad.py
// _get_total_norm, _clip_grads_with_norm_; transformers trainer.py (_clip_grad_norm after
// the scaler's unscale, lr_scheduler.step() only when the optimizer step was not skipped).
#include "train/schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/torch_reduce.h"

static const char* const NAMES[LR_SCHEDULE_COUNT] = {"linear", "constant", "cosine", "cosine_with_restarts",
                                                       "polynomial", "constant_with_warmup", "inverse_sqrt"};
enum { POLY_POWER = 1 };
static const double POLY_LR_END = 1e-7;  // get_polynomial_decay_schedule_with_warmup's defaults

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

const char* lr_schedule_names_list(void) {
    return "linear, constant, cosine, cosine_with_restarts, polynomial, constant_with_warmup, inverse_sqrt";
}

const char* lr_schedule_refusal(const LrSchedule* s) {
    if (s->type != LR_SCHEDULE_POLYNOMIAL) return NULL;
    if (!(s->base_lr > POLY_LR_END))
        return "polynomial decays to lr_end 1e-7 and needs a larger --learning-rate (transformers raises \"lr_end "
               "must be smaller than initial lr\")";
    if (s->training_steps <= s->warmup_steps)
        return "polynomial needs more --max-steps than warmup steps (transformers divides by num_training_steps - "
               "num_warmup_steps at the scheduler step after the last)";
    return NULL;
}

int64_t lr_schedule_warmup_steps(double warmup_steps, int64_t training_steps) {
    CHECK(warmup_steps >= 0 && warmup_steps <= 1e18 && training_steps >= 0);
    if (warmup_steps >= 1) return (int64_t)warmup_steps;          // int(self.warmup_steps)
    return (int64_t)ceil((double)training_steps * warmup_steps);  // math.ceil(num_training_steps * warmup_steps)
}

// Python's max(0.0, x): the later argument only when it is greater, so NaN and -0.0 give 0.0
static double max0(double x) { return x > 0.0 ? x : 0.0; }

double lr_schedule_lr(const LrSchedule* s, int64_t k) {
    CHECK(k >= 0);
    if (s->type == LR_SCHEDULE_CONSTANT) return s->base_lr * 1.0;
    const int64_t W = s->warmup_steps, N = s->training_steps;
    if (k < W) return s->base_lr * ((double)k / (double)(W > 1 ? W : 1));  // every warmup: k / max(1, W)
    const int64_t span = N - W > 1 ? N - W : 1;                            // max(1, N - W)
    const double pi = M_PI;
    double lambda;
    switch (s->type) {
        case LR_SCHEDULE_LINEAR: lambda = max0((double)(N - k) / (double)span); break;
        case LR_SCHEDULE_COSINE: {
            const double p = (double)(k - W) / (double)span;
            lambda = max0(0.5 * (1.0 + cos(pi * 0.5 * 2.0 * p)));  // math.pi * float(num_cycles) * 2.0 * progress
            break;
        }
        case LR_SCHEDULE_COSINE_WITH_RESTARTS: {
            const double p = (double)(k - W) / (double)span;
            lambda = p >= 1.0 ? 0.0 : max0(0.5 * (1.0 + cos(pi * fmod(1.0 * p, 1.0))));  // p >= 0: % is fmod
            break;
        }
        case LR_SCHEDULE_POLYNOMIAL: {
            const double lr_init = s->base_lr;
            if (k > N) {
                lambda = POLY_LR_END / lr_init;
            } else {
                const double pct_remaining = 1.0 - (double)(k - W) / (double)(N - W);  // N > W (lr_schedule_refusal)
                const double decay = (lr_init - POLY_LR_END) * pow(pct_remaining, (double)POLY_POWER) + POLY_LR_END;
                lambda = decay / lr_init;
            }
            break;
        }
        case LR_SCHEDULE_CONSTANT_WITH_WARMUP: lambda = 1.0; break;
        case LR_SCHEDULE_INVERSE_SQRT: {
            const int64_t T = W ? W : 10000, shift = T - W;
            lambda = 1.0 / sqrt((double)(k + shift) / (double)T);
            break;
        }
        default: ABORT("lr schedule %d", (int)s->type);
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

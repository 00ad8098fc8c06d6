// accum.c — the gradients of one optimizer step over N micro-batches (gradient accumulation,
// HF TrainingArguments.gradient_accumulation_steps), for train_step() (train.h documents the
// contract). Kept apart from the loop so that a data-parallel version can run the same
// per-micro-batch computation on each rank and add the results in the same order.
// reference: the plain PyTorch loop of reference/gen_model_goldens.py (accum_* cases):
//   for k in range(N): (scaler.scale(model(batch[s*N+k]).loss / N)).backward()
// torch's AccumulateGrad sets .grad to micro-batch 0's gradient and adds each later one in
// place (.grad += g_k, one float32 add per element); the backward seed of loss_k is
// float32(scale / N) (MulBackward gives scale, DivBackward divides it by N).
#include <math.h>
#include <string.h>

#include "train/train.h"

Status train_accumulate_gradients(TrainStep* t, const ModelBatch* batch, TrainStepResult* out) {
    const int n = t->accum_steps > 1 ? t->accum_steps : 1;
    const size_t numel = t->table->alloc_numel;
    CHECK(n == 1 || t->micro_grads != NULL);
    const float scale = grad_scaler_loss_scale(t->scaler);
    const float seed = n == 1 ? scale : scale / (float)n;
    out->scale = scale;
    float loss_mean = 0;  // the Trainer's tr_loss: float32 sum of loss_k / N, in order
    model_zero_grad(t->table, t->grads);
    for (int k = 0; k < n; k++) {
        float loss;
        Status s = model_forward(t->ws, t->params, &batch[k], t->mode, t->gemm, &loss, NULL);
        if (!status_is_ok(s)) return s;
        if (!isfinite(loss) && !t->mode->loss_scaling) {
            out->loss = loss;
            out->loss_nonfinite = true;
            out->skipped = true;
            return status_ok();
        }
        loss_mean = n == 1 ? loss : loss_mean + loss / (float)n;
        float* g = k == 0 ? t->grads : t->micro_grads;  // micro-batch 0: the zeroed accumulator
        if (k > 0) model_zero_grad(t->table, g);
        s = model_backward(t->ws, t->params, seed, t->gemm, g, &out->counters);
        if (!status_is_ok(s)) return s;
        if (k > 0) {
            phase_enter(model_workspace_phases(t->ws), PHASE_OTHER);  // phase.h: the add is "other"
            for (size_t i = 0; i < numel; i++) t->grads[i] += g[i];
        }
    }
    out->loss = loss_mean;
    return status_ok();
}

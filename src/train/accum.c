// accum.c — the gradients of one optimizer step over N micro-batches (gradient accumulation,
// HF TrainingArguments.gradient_accumulation_steps), for train_step() (train.h documents the
// contract). Kept apart from the loop so that a data-parallel version can run the same
// per-micro-batch computation on each rank and add the results in the same order: that is
// train_accumulate_gradients_ddp at the end of this file (the MPI calls are in ddp.c).
// reference: the plain PyTorch loop of reference/gen_model_goldens.py (accum_* cases):
//   for k in range(N): (scaler.scale(model(batch[s*N+k]).loss / N)).backward()
// torch's AccumulateGrad sets .grad to micro-batch 0's gradient and adds each later one in
// place (.grad += g_k, one float32 add per element): model_backward writes each micro-batch's
// gradient (no zeroing first), into .grad itself for micro-batch 0; the backward seed of loss_k is
// float32(scale / N) (MulBackward gives scale, DivBackward divides it by N).
#include <math.h>
#include <string.h>

#include "core/common.h"
#include "train/ddp.h"
#include "train/train.h"

Status train_accumulate_gradients(TrainStep* t, const ModelBatch* batch, TrainStepResult* out) {
    const int n = t->accum_steps > 1 ? t->accum_steps : 1;
    const size_t numel = t->table->alloc_numel;
    CHECK(n == 1 || t->micro_grads != NULL);
    const float scale = grad_scaler_loss_scale(t->scaler);
    const float seed = n == 1 ? scale : scale / (float)n;
    out->scale = scale;
    float loss_mean = 0;  // the Trainer's tr_loss: float32 sum of loss_k / N, in order
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
        float* g = k == 0 ? t->grads : t->micro_grads;  // micro-batch 0: the accumulator itself
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

// ---- the data-parallel version (train.h documents the contract; ddp.h the collectives) ----
Status train_accumulate_gradients_ddp(TrainStep* t, const ModelBatch* batch, TrainStepResult* out) {
    Ddp* d = t->ddp;
    const int R = ddp_size(d), rank = ddp_rank(d);
    const int A = t->accum_steps > 1 ? t->accum_steps : 1;
    const int n = R * A;  // micro-batches of the optimizer step, all ranks together
    const size_t numel = t->table->alloc_numel;
    CHECK(t->micro_grads != NULL);
    const float scale = grad_scaler_loss_scale(t->scaler);
    const float seed = n == 1 ? scale : scale / (float)n;
    out->scale = scale;
    float loss_mean = 0;
    float* losses = xmalloc((size_t)R * sizeof(float));  // (R) this round's losses in rank order
    Status s = status_ok();
    for (int a = 0; a < A && status_is_ok(s); a++) {
        float loss;
        s = model_forward(t->ws, t->params, &batch[a], t->mode, t->gemm, &loss, NULL);
        // A model error is the same on every rank only when the input is: agree before going on
        if (ddp_max_int(d, status_is_ok(s) ? 0 : 1) != 0) {
            if (status_is_ok(s)) s = status_make(STATUS_INVALID, "another rank's forward failed (see its message)");
            break;
        }
        phase_enter(model_workspace_phases(t->ws), PHASE_OTHER);
        ddp_allgather_float(d, loss, losses);
        int bad = -1;  // the first micro-batch of the round with a non-finite loss (no scaler)
        for (int k = 0; k < R && bad < 0 && !t->mode->loss_scaling; k++)
            if (!isfinite(losses[k])) bad = k;
        for (int k = 0; k < (bad < 0 ? R : 0); k++) loss_mean = n == 1 ? losses[k] : loss_mean + losses[k] / (float)n;
        if (bad < 0 || rank < bad) {  // accumulation runs the backward of every micro-batch before `bad`
            s = model_backward(t->ws, t->params, seed, t->gemm, t->micro_grads, &out->counters);
        }
        if (ddp_max_int(d, status_is_ok(s) ? 0 : 1) != 0) {  // every rank calls it, backward or not
            if (status_is_ok(s)) s = status_make(STATUS_INVALID, "another rank's backward failed (see its message)");
            break;
        }
        if (bad >= 0) {
            out->loss = losses[bad];
            out->loss_nonfinite = true;
            out->skipped = true;
            break;
        }
        phase_enter(model_workspace_phases(t->ws), PHASE_OTHER);  // phase.h: communication and the add are "other"
        ddp_reduce_round(d, t->micro_grads, t->grads, numel, a == 0);
    }
    free(losses);
    if (!status_is_ok(s)) return s;
    uint64_t c[6] = {out->counters.param_values, out->counters.param_underflow, out->counters.param_overflow,
                     out->counters.act_values,   out->counters.act_underflow,   out->counters.act_overflow};
    ddp_sum_u64(d, c, 6);
    out->counters = (AmpCounters){c[0], c[1], c[2], c[3], c[4], c[5]};
    if (out->loss_nonfinite) return status_ok();
    ddp_allgather_chunks(d, t->grads, numel);
    out->loss = loss_mean;
    return status_ok();
}

// train.h — one training step (forward, backward of loss*scale, GradScaler unscale/skip/
// update, optimizer step), shared by `trainbench train` (train.c) and the golden trajectory
// tests, so both run exactly the same sequence of operations.
#ifndef TRAINBENCH_TRAIN_H
#define TRAINBENCH_TRAIN_H

#include "model/amp.h"
#include "gemm/gemm.h"
#include "model/model.h"
#include "train/schedule.h"

typedef struct {
    const ParamTable* table;
    ModelWorkspace* ws;
    Gemm* gemm;
    const PrecisionMode* mode;
    ModelOptim* mo;
    GradScaler* scaler;   // disabled (scale 1) unless the mode has loss scaling
    float* params;        // table buffer
    float* grads;         // table buffer (scratch: zeroed each step)
    // HF Trainer policies (schedule.h); zero-initialised = off (constant lr, no clipping):
    const LrSchedule* schedule;  // NULL: mo->cfg.lr every step; else mo->cfg.lr is set per step
    double max_grad_norm;        // > 0: clip_grad_norm_(max_grad_norm) after unscale; 0: none
    // Gradient accumulation (accum.c): one optimizer step over accum_steps micro-batches.
    // 0 or 1: one batch per step. > 1: `batch` points to accum_steps micro-batches and
    // micro_grads is a second table buffer (scratch for each later micro-batch's gradient).
    int accum_steps;
    float* micro_grads;
    // Data parallel (ddp.h, README "Distributed"); NULL: one process. With R ranks, `batch`
    // holds this rank's accum_steps micro-batches (round a: global micro-batch a*R + rank of
    // the step), micro_grads is required, and the step equals accumulation over R*accum_steps.
    struct Ddp* ddp;
    // ZeRO-1 (ddp only): this rank holds the optimizer state of its shard (model_optim_shard);
    // after the optimizer step, rank r's parameter range [zero_offsets[r], zero_offsets[r+1])
    // (floats; R+1 entries) is all-gathered. NULL: every rank steps every tensor.
    const size_t* zero_offsets;
    // max_grad_norm 0: still compute the norm into TrainStepResult.grad_norm, as the Trainer logs it
    // (`trainbench train` sets it; the step benchmarks, like their PyTorch peers, do not)
    bool norm_without_clipping;
} TrainStep;

typedef struct {
    float loss;           // the forward's loss (before scaling); with accumulation the mean over
                          // the micro-batches as the Trainer logs it: float32 sum of loss_k / N
    float scale;          // loss scale used for this step's backward
    bool skipped;         // GradScaler found inf/NaN: the optimizer did not step
    bool loss_nonfinite;  // loss was inf/NaN and the mode has no scaler: nothing was done
    AmpCounters counters; // rounding-point counters of this backward (amp.h), summed over micro-batches
    double lr;            // the learning rate of this step (the schedule's, or mo->cfg.lr)
    float grad_norm;      // total gradient norm before clipping (after unscale); NaN when
                          // max_grad_norm is 0 (not computed, as the Trainer)
    PhaseTimes phases;    // where this step's time went (phase.h); adds up to the step's time
} TrainStepResult;

// zero_grad; forward; if the loss is non-finite and the mode has no loss scaling, stop there
// (loss_nonfinite, params untouched); else backward(loss*scale); found_inf = unscale; with
// max_grad_norm > 0 clip the unscaled gradients (clip_grad_norm_); lr from the schedule
// (scheduler steps = optimizer steps taken); step the optimizer unless found_inf; scaler update. Errors from the model (unsupported backend,
// invalid batch) are returned with params untouched.
// The zero_grad/forward/backward part is train_accumulate_gradients (below), for one batch too;
// with accum_steps N > 1 unscale (found_inf over the accumulated gradient), clipping, the
// schedule, the optimizer and the GradScaler act once per N micro-batches.
Status train_step(TrainStep* t, const ModelBatch* batch, TrainStepResult* out);

// accum.c — the gradients of one optimizer step, into t->grads (zeroed first): for micro-batch
// k = 0 .. N-1 (N = accum_steps, at least 1) forward batch[k]; if its loss is non-finite and the
// mode has no loss scaling, stop there (out->loss_nonfinite, out->loss that loss); else backward
// of loss_k * (scale / N) (the seed torch's backward of scaler.scale(loss / N) gives; scale / 1 =
// scale). Micro-batch 0's gradient is computed into the zeroed accumulator t->grads, each later
// one into the zeroed scratch t->micro_grads and then added element by element (float32), in
// micro-batch order: acc = ((g0 + g1) + g2) + ..., what torch's AccumulateGrad does (.grad = g0,
// then .grad += g_k). No gradient is ever accumulated in place by a backward, so a data-parallel
// run that computes each micro-batch on another rank and adds them in the same order gets the
// same bits. Sets out->loss (mean as documented above), out->scale, out->counters.
Status train_accumulate_gradients(TrainStep* t, const ModelBatch* batch, TrainStepResult* out);

// The same over R ranks (t->ddp), equal bit for bit to train_accumulate_gradients with
// accum_steps R*A in one process (A = t->accum_steps): round a = 0 .. A-1, rank k computes
// micro-batch j = a*R + k (its batch[a]) into the zeroed t->micro_grads with seed
// float32(scale / (R*A)); the chunk owners add the round's R gradients in rank order
// (ddp_reduce_round), so each element is ((g_0 + g_1) + g_2) + ... in j order; then the chunks
// are all-gathered into t->grads on every rank. The losses of each round are all-gathered and
// every rank forms the mean in j order (as accum.c); a non-finite loss without loss scaling
// stops every rank at the first such j (ranks before it in that round still run their backward,
// as accumulation would have, so the counters agree). Counters are summed over the ranks.
Status train_accumulate_gradients_ddp(TrainStep* t, const ModelBatch* batch, TrainStepResult* out);

// `trainbench train`'s flag parser alone (argv[0] "train", then its flags): 0 when they parse and
// pass its value checks, else the usage error it printed and exit code 2. Nothing is run or
// written; `trainbench run` checks its --train-args with it before its phases start.
int train_check_args(int argc, char** argv);

#endif

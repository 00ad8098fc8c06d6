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
} TrainStep;

typedef struct {
    float loss;           // the forward's loss (before scaling)
    float scale;          // loss scale used for this step's backward
    bool skipped;         // GradScaler found inf/NaN: the optimizer did not step
    bool loss_nonfinite;  // loss was inf/NaN and the mode has no scaler: nothing was done
    AmpCounters counters; // rounding-point counters of this backward (amp.h)
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
Status train_step(TrainStep* t, const ModelBatch* batch, TrainStepResult* out);

#endif

// train.h — one training step (forward, backward of loss*scale, GradScaler unscale/skip/
// update, optimizer step), shared by `trainbench train` (train.c) and the golden trajectory
// tests, so both run exactly the same sequence of operations.
#ifndef TRAINBENCH_TRAIN_H
#define TRAINBENCH_TRAIN_H

#include "model/amp.h"
#include "gemm/gemm.h"
#include "model/model.h"

typedef struct {
    const ParamTable* table;
    ModelWorkspace* ws;
    Gemm* gemm;
    const PrecisionMode* mode;
    ModelOptim* mo;
    GradScaler* scaler;   // disabled (scale 1) unless the mode has loss scaling
    float* params;        // table buffer
    float* grads;         // table buffer (scratch: zeroed each step)
} TrainStep;

typedef struct {
    float loss;           // the forward's loss (before scaling)
    float scale;          // loss scale used for this step's backward
    bool skipped;         // GradScaler found inf/NaN: the optimizer did not step
    bool loss_nonfinite;  // loss was inf/NaN and the mode has no scaler: nothing was done
    AmpCounters counters; // rounding-point counters of this backward (amp.h)
} TrainStepResult;

// zero_grad; forward; if the loss is non-finite and the mode has no loss scaling, stop there
// (loss_nonfinite, params untouched); else backward(loss*scale); found_inf = unscale; step the
// optimizer unless found_inf; scaler update. Errors from the model (unsupported backend,
// invalid batch) are returned with params untouched.
Status train_step(TrainStep* t, const ModelBatch* batch, TrainStepResult* out);

#endif

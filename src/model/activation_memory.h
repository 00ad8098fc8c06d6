// activation_memory.h — the closed-formula estimate of what one training step of the
// DistilBERT-architecture classifier holds beyond parameters, gradients and optimizer state:
// the activations the forward keeps for the backward, the backward's activation gradients,
// the batch, and the largest transient GEMM operands. Derived from the model's maths and
// shapes (activation_memory.c says term by term why each tensor must exist); it never asks
// the workspace what it allocated. Not here: parameters, gradients and optimizer state
// (model_optim_estimate_bytes), library-internal buffers (oneDNN/OpenBLAS packing, threads).
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "core/dtype.h"
#include "model/model.h"

typedef struct {
    size_t saved_bytes;      // forward activations kept for the backward (all layers; in the
                             // mixed modes with the low copies of the GEMM inputs)
    size_t saved_layer_bytes;// of which one transformer layer
    size_t low_weight_bytes; // mixed modes: the weights' low copies (autocast's cast cache)
    size_t grad_bytes;       // the backward's activation-gradient buffers (live at once)
    size_t batch_bytes;      // input ids, labels, padding mask
    size_t transient_bytes;  // low-dtype GEMM operand copies and per-head attention temporaries
    size_t total_bytes;      // the sum of the five above
} ActivationEstimate;

// How far a trainer's measured workspace (activation arena + kept GEMM scratch after one real
// step) may lie from total_bytes: within [total * (1 - BELOW) - pad, total * (1 + ABOVE) + pad],
// pad = 64 * (16 * n_layers + 40) bytes. Why not exact: a workspace pads each buffer to 64
// bytes (fewer than 16 buffers per layer and 40 others) and sizes each scratch slot for its
// largest use (a slot may serve operands of different sizes), and attention's heads are
// handed to threads dynamically, so a thread that got no head holds no head temporaries (the
// estimate counts every thread: on tiny one thread's are 0.2-0.8%); measured on tiny, small and
// distilbert-base-cased with every thread busy it lands exactly on the formula. Why this tight: on the tiny preset (b8 x 32) one N*D buffer
// missing is -2.3% and one N*F buffer too many is +4.7%, both outside.
#define ACTIVATION_TOL_BELOW 0.01
#define ACTIVATION_TOL_ABOVE 0.03

// B x T tokens per step, low = the precision mode's GEMM dtype (DTYPE_F32, BF16 or F16),
// threads = the OpenMP threads the step runs on (each may hold one attention head's
// temporaries). Sizes are exact products (no alignment padding). CHECKs B, T, threads >= 1.
ActivationEstimate activation_memory_estimate(const ModelConfig* cfg, int B, int T, DType low, int threads);
// The tolerance above: true when `measured` bytes lie within it.
bool activation_memory_within(const ActivationEstimate* e, const ModelConfig* cfg, size_t measured);

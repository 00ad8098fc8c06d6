// phase.h — where a training step's time goes: a clock that charges the wall time between two
// switches to the phase that was current, per direction (forward or backward). Every instant
// between phase_clock_begin and phase_clock_end is charged to exactly one phase (PHASE_OTHER
// when no other is current), so the phases add up to the step time measured by the clock.
// The model and layers switch phases (model.c, layers.c); train_step adds the GradScaler and
// the optimizer; `trainbench train` keeps totals in results.json and prints them (--profile).
// Cost: one clock_gettime per switch (a few hundred per step).
// Not here: FLOP and byte counts (model_step_cost in model.h), printing (train.c).
#ifndef TRAINBENCH_PHASE_H
#define TRAINBENCH_PHASE_H

#include <stdbool.h>

typedef enum {
    PHASE_OTHER = 0,     // anything not below (batch copy, zero_grad, mask building, ...)
    PHASE_EMBEDDING,     // token + position embeddings
    PHASE_LAYERNORM,
    PHASE_QKV_GEMM,      // the q, k, v projections (linear: GEMM + bias)
    PHASE_ATTENTION,     // per (batch, head): scores QK^T, scaling, softmax, context PV (one
                         // parallel loop over heads, so the three are not separated)
    PHASE_OUT_GEMM,      // attention output projection
    PHASE_FFN_GEMM,      // lin1, lin2
    PHASE_GELU,
    PHASE_RESIDUAL,      // residual adds
    PHASE_CONVERT,       // rounding to / widening from the low dtype outside a GEMM call
    PHASE_CLASSIFIER,    // pre_classifier, ReLU, classifier
    PHASE_LOSS,          // cross-entropy
    PHASE_SCALER,        // GradScaler unscale + inf check + update
    PHASE_OPTIMIZER,     // the optimizer step
    PHASE_COUNT
} Phase;

enum { PHASE_FORWARD = 0, PHASE_BACKWARD = 1 };

typedef struct {
    double s[2][PHASE_COUNT];  // seconds per direction and phase
} PhaseTimes;

typedef struct {
    PhaseTimes t;
    int dir;       // PHASE_FORWARD or PHASE_BACKWARD: where switches are charged
    Phase cur;
    double last;   // time of the last switch (seconds, monotonic)
    bool running;
} PhaseClock;

const char* phase_name(Phase p);  // "embedding", "qkv_gemm", ...

// Zeroes the times and starts charging PHASE_OTHER (forward).
void phase_clock_begin(PhaseClock* c);
// Charges the time since the last switch to the current phase, then makes p current.
// Returns the phase that was current (to switch back to). NULL clock: does nothing.
Phase phase_enter(PhaseClock* c, Phase p);
// As phase_enter(c, PHASE_OTHER), and from now on switches are charged to direction dir.
void phase_direction(PhaseClock* c, int dir);
// Charges the last interval and stops.
void phase_clock_end(PhaseClock* c);

double phase_times_total(const PhaseTimes* t);
void phase_times_add(PhaseTimes* into, const PhaseTimes* t);

#endif

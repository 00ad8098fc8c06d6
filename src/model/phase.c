// phase.c — implementation of phase.h.
#include "model/phase.h"

#include <string.h>
#include <time.h>

#include "core/common.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char* phase_name(Phase p) {
    static const char* const NAMES[PHASE_COUNT] = {
        [PHASE_OTHER] = "other",           [PHASE_EMBEDDING] = "embedding", [PHASE_LAYERNORM] = "layernorm",
        [PHASE_QKV_GEMM] = "qkv_gemm",     [PHASE_ATTENTION] = "attention", [PHASE_OUT_GEMM] = "out_gemm",
        [PHASE_FFN_GEMM] = "ffn_gemm",     [PHASE_GELU] = "gelu",           [PHASE_RESIDUAL] = "residual",
        [PHASE_CONVERT] = "convert",       [PHASE_CLASSIFIER] = "classifier", [PHASE_LOSS] = "loss",
        [PHASE_SCALER] = "grad_scaler",    [PHASE_OPTIMIZER] = "optimizer",
    };
    CHECK(p >= 0 && p < PHASE_COUNT, "phase %d", (int)p);
    return NAMES[p];
}

void phase_clock_begin(PhaseClock* c) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->cur = PHASE_OTHER;
    c->dir = PHASE_FORWARD;
    c->last = now();
    c->running = true;
}

Phase phase_enter(PhaseClock* c, Phase p) {
    if (!c || !c->running) return PHASE_OTHER;
    const double t = now();
    c->t.s[c->dir][c->cur] += t - c->last;
    c->last = t;
    const Phase prev = c->cur;
    c->cur = p;
    return prev;
}

void phase_direction(PhaseClock* c, int dir) {
    if (!c || !c->running) return;
    phase_enter(c, PHASE_OTHER);
    c->dir = dir;
}

void phase_clock_end(PhaseClock* c) {
    if (!c || !c->running) return;
    phase_enter(c, PHASE_OTHER);
    c->running = false;
}

double phase_times_total(const PhaseTimes* t) {
    double s = 0;
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < PHASE_COUNT; p++) s += t->s[d][p];
    return s;
}

void phase_times_add(PhaseTimes* into, const PhaseTimes* t) {
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < PHASE_COUNT; p++) into->s[d][p] += t->s[d][p];
}

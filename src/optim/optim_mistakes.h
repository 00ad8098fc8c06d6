// optim_mistakes.h — known implementation mistakes of the registered optimizers, each as a
// runnable variant of our reference with exactly that one mistake. Two users:
// tests/test_optim.c checks that every variant FAILS its optimizer's goldens (so the
// conformance check can fail, and each mistake is distinguishable from the correct step);
// `trainbench conform` replays a failing case with each variant and reports the ones that
// reproduce the candidate's outputs within the conformance tolerance ("consistent with: ...").
// Only mistakes implemented here are ever named: a diagnosis is a measured fit, not a guess.
// Not here: comparing (conform.c).
#ifndef TRAINBENCH_OPTIM_MISTAKES_H
#define TRAINBENCH_OPTIM_MISTAKES_H

#include "optim/optim.h"

typedef struct {
    const char* optim;          // the golden set it is a mistake of: "adamw_torch", ...
    const char* id;             // stable id: "eps_inside_sqrt"
    const char* text;           // one line for the diagnosis
    // How to run the variant: `variant` (NULL: the reference optimizer `optim` itself) with the
    // case's hparams parsed as `parse_as` would parse them (NULL: as `optim`), then `tweak`
    // applied to that config (NULL: none). A pure tweak that leaves a case's config unchanged
    // does not apply to that case (e.g. "weight decay missing" when weight_decay is 0).
    const Optimizer* variant;
    const Optimizer* parse_as;
    void (*tweak)(OptimConfig* cfg);
    bool params_only;           // its state keys/dtypes differ from the library's: compare params only
} OptimMistake;

size_t optim_mistake_count(void);
// The AdamW L2 variant's rounding-order band (AdamW's, on the gradient it really sums; also the
// 32-bit path of bitsandbytes' L2 variant, which is AdamW's recurrence).
void optim_mistake_band_l2_decay(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                                 const float* g, const OptimConfig* c);
const OptimMistake* optim_mistake_at(size_t i);

#endif

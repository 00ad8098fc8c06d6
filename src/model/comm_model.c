// comm_model.c — the communication model of `train --ddp` (comm_model.h): chunk bounds and
// bytes per optimizer step per rank. Pure arithmetic; train/ddp.c uses the same chunk rule.
#include "model/comm_model.h"

#include "core/common.h"

// written without the product r*numel, which could overflow
void comm_model_chunk(size_t numel, int R, int r, size_t* begin, size_t* end) {
    *begin = numel / (size_t)R * (size_t)r + numel % (size_t)R * (size_t)r / (size_t)R;
    *end = numel / (size_t)R * (size_t)(r + 1) + numel % (size_t)R * (size_t)(r + 1) / (size_t)R;
}

CommStepBytes comm_model_step_bytes(size_t numel, int ranks, int rank, int accum, size_t param_floats, int machines) {
    CHECK(ranks >= 1 && rank >= 0 && rank < ranks && accum >= 1 && machines >= 1 && ranks % machines == 0);
    const int per_machine = ranks / machines, mine = rank / per_machine;
    CommStepBytes b = {0};
    size_t cb, ce;
    comm_model_chunk(numel, ranks, rank, &cb, &ce);
    const uint64_t own = ce - cb;
    uint64_t to_other_machines = 0;  // floats of the other ranks' chunks that live on other machines
    for (int r = 0; r < ranks; r++) {
        size_t b0, e0;
        comm_model_chunk(numel, ranks, r, &b0, &e0);
        if (r / per_machine != mine) to_other_machines += e0 - b0;
    }
    const uint64_t remote_ranks = (uint64_t)(ranks - per_machine);
    b.grad_bytes = 4 * ((uint64_t)accum * (numel - own) + own * (uint64_t)(ranks - 1));
    b.grad_inter_bytes = 4 * ((uint64_t)accum * to_other_machines + own * remote_ranks);
    b.param_bytes = 4 * (uint64_t)param_floats * (uint64_t)(ranks - 1);
    b.param_inter_bytes = 4 * (uint64_t)param_floats * remote_ranks;
    return b;
}


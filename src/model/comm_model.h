// comm_model.h — the communication of `train --ddp` as a formula (README "Distributed"): how the
// gradient buffer is cut into the ranks' chunks (the rule ddp.c uses) and the bytes each rank
// passes to MPI per optimizer step, also split by machines, so `trainbench memory --ranks R
// --machines N` can say what R ranks on N machines need without running them, and the
// trainer's measured bytes can be checked against it. Not here: MPI (train/ddp.c).
#ifndef TRAINBENCH_COMM_MODEL_H
#define TRAINBENCH_COMM_MODEL_H

#include <stddef.h>
#include <stdint.h>

// Chunk r of R over numel floats: [floor(r*numel/R), floor((r+1)*numel/R)); sizes differ by at
// most one float. Rank r owns (adds up and all-gathers) chunk r of the gradient.
void comm_model_chunk(size_t numel, int ranks, int r, size_t* begin, size_t* end);

// The communication model (README "Distributed"): the bytes rank `rank` of R passes to MPI in
// one optimizer step, counted as train/ddp.c's DdpTraffic counts them (the payload each call moves to or
// from other ranks), for a table buffer of `numel` floats, A = `accum` rounds and, with ZeRO-1,
// a parameter range of `param_floats` (0 without ZeRO-1 or on a skipped step):
//   gradient: A reduce-scatter rounds, each sending the rank's pieces of the other ranks'
//     chunks, 4 (numel - c_r); then its own chunk c_r to the R - 1 others, 4 c_r (R - 1);
//   parameters: its range to the R - 1 others, 4 p_r (R - 1).
// With `machines` N (R divisible by N; ranks placed in blocks of R/N per machine) the *_inter
// fields are the part addressed to ranks on other machines (the bytes must cross the network
// at least once however the library routes them). Losses, flags and counters (a few dozen
// bytes per round) are left out.
typedef struct {
    uint64_t grad_bytes, param_bytes;
    uint64_t grad_inter_bytes, param_inter_bytes;
} CommStepBytes;
CommStepBytes comm_model_step_bytes(size_t numel, int ranks, int rank, int accum, size_t param_floats, int machines);

#endif

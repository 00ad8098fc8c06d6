// ddp.h — data-parallel training over MPI (`trainbench train --ddp`, README "Distributed"):
// the only interface to MPI; ddp.c is the only file that includes mpi.h, so the rest of the
// code builds and runs without MPI (make WITHOUT=mpi: every function here but ddp_available
// and ddp_world_size_from_env is then unreachable, ddp_init refuses).
// The collectives used by the trainer, each with its order written down (MPI itself promises
// no order for its reductions, so no floating-point sum is left to MPI):
//   gradient: reduce-scatter by chunks, each chunk's owner adds the ranks' contributions in
//     rank order (ddp_reduce_round), then an all-gather of the chunks (ddp_allgather_chunks);
//   losses and per-tensor values: all-gathered, then every rank computes the same thing in
//     the same order; integer counters: summed (integer sums are exact in any order);
//   ZeRO-1: each rank's parameter range all-gathered after its optimizer step.
// Not here: what a step computes (accum.c), the training loop (train.c).
#ifndef TRAINBENCH_DDP_H
#define TRAINBENCH_DDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "model/comm_model.h"

typedef struct Ddp Ddp;

// Bytes this rank passed to MPI calls, by kind (sent + received buffers as given to MPI).
typedef struct {
    uint64_t grad_bytes;    // gradient reduce-scatter + all-gather
    uint64_t param_bytes;   // ZeRO-1 parameter all-gather
    uint64_t other_bytes;   // losses, counters, flags, checkpoint state gathering
    double grad_seconds;    // wall time inside the gradient collectives
    double param_seconds;   // wall time inside the parameter all-gather
} DdpTraffic;

// Whether this build has MPI (false under make WITHOUT=mpi).
bool ddp_available(void);
// The number of processes mpirun started (OMPI_COMM_WORLD_SIZE / PMI_SIZE), 1 when not under
// mpirun; read from the environment, so it works without MPI too.
int ddp_world_size_from_env(void);
// The processes mpirun started on this machine (OMPI_COMM_WORLD_LOCAL_SIZE / MPI_LOCALNRANKS),
// 1 when not under mpirun.
int ddp_local_size_from_env(void);

// MPI_Init; *out holds rank and size. STATUS_UNSUPPORTED (message says how to build with MPI)
// in a build without MPI.
Status ddp_init(int* argc, char*** argv, Ddp** out);
// Buffers for the gradient reduction of `numel` floats (a receive buffer of R chunks).
void ddp_alloc_buffers(Ddp* d, size_t numel);
// The bytes ddp_alloc_buffers(numel) allocates (for the up-front memory check).
size_t ddp_buffer_bytes(int ranks, size_t numel);
int ddp_rank(const Ddp* d);
int ddp_size(const Ddp* d);
// MPI_Finalize and free; NULL is fine.
void ddp_finalize(Ddp* d);
// MPI_Abort(code): ends every rank (a failure on one rank must not leave the others waiting).
_Noreturn void ddp_abort(Ddp* d, int code);

// The chunk of the gradient buffer rank r owns: [begin, end) floats of numel.
void ddp_chunk(const Ddp* d, size_t numel, int r, size_t* begin, size_t* end);
// One round of the gradient reduction: every rank passes its micro-batch gradient g (numel);
// the owner of each chunk adds the R contributions of this round in rank order into acc's
// chunk: first round acc = g_0 (copied), then acc += g_1, acc += g_2, ... (float32, one add
// per element, left to right); later rounds acc += g_0, acc += g_1, ... Only this rank's
// chunk of acc is written.
void ddp_reduce_round(Ddp* d, const float* g, float* acc, size_t numel, bool first_round);
// Every rank's chunk of acc to every rank (acc is then the whole reduced gradient everywhere).
void ddp_allgather_chunks(Ddp* d, float* acc, size_t numel);
// ZeRO-1: rank r's range [offsets[r], offsets[r+1]) of buf (floats) from rank r to all.
void ddp_allgather_ranges(Ddp* d, float* buf, const size_t* offsets);
// Every rank's `mine` (one float) into all[0..R-1], in rank order.
void ddp_allgather_float(Ddp* d, float mine, float* all);
// Every rank's `mine` (one uint64) into all[0..R-1], in rank order.
void ddp_allgather_u64(Ddp* d, uint64_t mine, uint64_t* all);
// v[0..n-1] summed over the ranks (exact: integers), result on every rank.
void ddp_sum_u64(Ddp* d, uint64_t* v, int n);
// The largest of every rank's v, on every rank (agreeing on an exit code).
int ddp_max_int(Ddp* d, int v);
// Rank 0's v on every rank (the benchmark binary's command to its serving ranks).
int64_t ddp_bcast_i64(Ddp* d, int64_t v);
// Point to point, for gathering ZeRO-1 state to rank 0 for a checkpoint: tag = tensor index.
void ddp_send_bytes(Ddp* d, const void* buf, size_t n, int to, int tag);
void ddp_recv_bytes(Ddp* d, void* buf, size_t n, int from, int tag);
void ddp_barrier(Ddp* d);
// Bytes and seconds so far (this rank).
DdpTraffic ddp_traffic(const Ddp* d);

#endif

// ddp.c — the MPI side of `trainbench train --ddp` (ddp.h documents each collective and its
// order). The only file that includes mpi.h; built without it under make WITHOUT=mpi
// (TRAINBENCH_NO_MPI), when ddp_init refuses with a message and nothing else is reachable.
// Every floating-point sum is done here by our own loop in a fixed order (MPI_Allreduce and
// MPI_Reduce_scatter promise no order of their additions, and a float sum depends on it);
// MPI only moves bytes.
#include "train/ddp.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int ddp_world_size_from_env(void) {
    static const char* const VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < ARRAY_LEN(VARS); i++) {
        const char* v = getenv(VARS[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

int ddp_local_size_from_env(void) {
    static const char* const VARS[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < ARRAY_LEN(VARS); i++) {
        const char* v = getenv(VARS[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

size_t ddp_buffer_bytes(int ranks, size_t numel) {
    // the receive buffer: R contributions to the largest chunk
    size_t chunk = ranks > 0 ? (numel + (size_t)ranks - 1) / (size_t)ranks : numel;
    return (size_t)ranks * chunk * sizeof(float);
}

#ifdef TRAINBENCH_NO_MPI

struct Ddp {
    int unused;
};

bool ddp_available(void) { return false; }

Status ddp_init(int* argc, char*** argv, Ddp** out) {
    (void)argc;
    (void)argv;
    *out = NULL;
    return status_make(STATUS_UNSUPPORTED, "built without MPI (make WITHOUT=mpi); --ddp needs Open MPI: run `make deps` "
                       "(installs libopenmpi-dev and openmpi-bin) and rebuild without WITHOUT=mpi");
}
#define UNREACHABLE ABORT("ddp: built without MPI")
void ddp_alloc_buffers(Ddp* d, size_t numel) { UNREACHABLE; }
int ddp_rank(const Ddp* d) { return 0; }
int ddp_size(const Ddp* d) { return 1; }
void ddp_finalize(Ddp* d) {}
_Noreturn void ddp_abort(Ddp* d, int code) { exit(code); }
void ddp_chunk(const Ddp* d, size_t numel, int r, size_t* begin, size_t* end) { UNREACHABLE; }
void ddp_reduce_round(Ddp* d, const float* g, float* acc, size_t numel, bool first_round) { UNREACHABLE; }
void ddp_allgather_chunks(Ddp* d, float* acc, size_t numel) { UNREACHABLE; }
void ddp_allgather_ranges(Ddp* d, float* buf, const size_t* offsets) { UNREACHABLE; }
void ddp_allgather_float(Ddp* d, float mine, float* all) { UNREACHABLE; }
void ddp_allgather_u64(Ddp* d, uint64_t mine, uint64_t* all) { UNREACHABLE; }
void ddp_sum_u64(Ddp* d, uint64_t* v, int n) { UNREACHABLE; }
int ddp_max_int(Ddp* d, int v) { UNREACHABLE; }
int64_t ddp_bcast_i64(Ddp* d, int64_t v) { UNREACHABLE; }
void ddp_send_bytes(Ddp* d, const void* buf, size_t n, int to, int tag) { UNREACHABLE; }
void ddp_recv_bytes(Ddp* d, void* buf, size_t n, int from, int tag) { UNREACHABLE; }
void ddp_barrier(Ddp* d) { UNREACHABLE; }
DdpTraffic ddp_traffic(const Ddp* d) {
    DdpTraffic t = {0};
    return t;
}

#else

#include <mpi.h>

struct Ddp {
    int rank, size;
    float* recv;          // (R * chunk) ddp_reduce_round's receive buffer, rank-major
    int* counts;          // (R) scratch for the v-collectives
    int* displs;          // (R)
    DdpTraffic traffic;
};

bool ddp_available(void) { return true; }

Status ddp_init(int* argc, char*** argv, Ddp** out) {
    int ok = 0;
    MPI_Initialized(&ok);
    if (!ok && MPI_Init(argc, argv) != MPI_SUCCESS)
        return status_make(STATUS_IO, "MPI_Init failed (start the run with mpirun -np R)");
    Ddp* d = xcalloc(1, sizeof *d);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->counts = xcalloc((size_t)d->size, sizeof(int));
    d->displs = xcalloc((size_t)d->size, sizeof(int));
    *out = d;
    return status_ok();
}

void ddp_alloc_buffers(Ddp* d, size_t numel) {
    size_t chunk = (numel + (size_t)d->size - 1) / (size_t)d->size;
    CHECK(numel <= (size_t)INT_MAX, "ddp: %zu floats exceed MPI's int counts (at most %d per collective)", numel,
          INT_MAX);
    free(d->recv);
    d->recv = xaligned_alloc((size_t)d->size * chunk * sizeof(float) + 64);
}

int ddp_rank(const Ddp* d) { return d->rank; }
int ddp_size(const Ddp* d) { return d->size; }

void ddp_finalize(Ddp* d) {
    if (!d) return;
    MPI_Finalize();
    free(d->recv);
    free(d->counts);
    free(d->displs);
    free(d);
}

_Noreturn void ddp_abort(Ddp* d, int code) {
    (void)d;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);  // MPI_Abort does not return; this keeps the compiler's _Noreturn check happy
}

void ddp_chunk(const Ddp* d, size_t numel, int r, size_t* begin, size_t* end) {
    comm_model_chunk(numel, d->size, r, begin, end);
}

static void check_mpi(int rc, const char* what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "trainbench: %s failed: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

void ddp_reduce_round(Ddp* d, const float* g, float* acc, size_t numel, bool first_round) {
    const double t0 = now_seconds();
    const int R = d->size;
    size_t mb, me;
    ddp_chunk(d, numel, d->rank, &mb, &me);
    const size_t mine = me - mb;
    int* sdispls = xcalloc((size_t)R, sizeof(int));
    int* scounts = xcalloc((size_t)R, sizeof(int));
    uint64_t sent = 0;
    for (int r = 0; r < R; r++) {
        size_t b, e;
        ddp_chunk(d, numel, r, &b, &e);
        scounts[r] = (int)(e - b);  // my contribution to rank r's chunk
        sdispls[r] = (int)b;
        d->counts[r] = (int)mine;   // rank r's contribution to my chunk, at r * mine
        d->displs[r] = (int)((size_t)r * mine);
        if (r != d->rank) sent += (e - b) * sizeof(float);
    }
    check_mpi(MPI_Alltoallv(g, scounts, sdispls, MPI_FLOAT, d->recv, d->counts, d->displs, MPI_FLOAT, MPI_COMM_WORLD),
              "MPI_Alltoallv (gradient reduce-scatter)");
    free(sdispls);
    free(scounts);
    // The fixed order: contributions of ranks 0, 1, ..., R-1 added one after another into the
    // accumulator, as accum.c adds micro-batches 0, 1, ... (the first round starts from rank 0's
    // gradient itself, as accum.c's micro-batch 0 is computed into the zeroed accumulator).
    float* a = acc + mb;  // (mine)
    for (int r = 0; r < R; r++) {
        const float* c = d->recv + (size_t)r * mine;  // (mine) rank r's gradient for my chunk
        if (first_round && r == 0)
            memcpy(a, c, mine * sizeof(float));
        else
            for (size_t i = 0; i < mine; i++) a[i] += c[i];
    }
    d->traffic.grad_bytes += sent;
    d->traffic.grad_seconds += now_seconds() - t0;
}

void ddp_allgather_chunks(Ddp* d, float* acc, size_t numel) {
    const double t0 = now_seconds();
    for (int r = 0; r < d->size; r++) {
        size_t b, e;
        ddp_chunk(d, numel, r, &b, &e);
        d->counts[r] = (int)(e - b);
        d->displs[r] = (int)b;
    }
    check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, acc, d->counts, d->displs, MPI_FLOAT, MPI_COMM_WORLD),
              "MPI_Allgatherv (gradient chunks)");
    d->traffic.grad_bytes += (uint64_t)d->counts[d->rank] * sizeof(float) * (uint64_t)(d->size - 1);
    d->traffic.grad_seconds += now_seconds() - t0;
}

void ddp_allgather_ranges(Ddp* d, float* buf, const size_t* offsets) {
    const double t0 = now_seconds();
    for (int r = 0; r < d->size; r++) {
        CHECK(offsets[r + 1] >= offsets[r] && offsets[r + 1] <= (size_t)INT_MAX);
        d->counts[r] = (int)(offsets[r + 1] - offsets[r]);
        d->displs[r] = (int)offsets[r];
    }
    check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, d->counts, d->displs, MPI_FLOAT, MPI_COMM_WORLD),
              "MPI_Allgatherv (ZeRO-1 parameters)");
    d->traffic.param_bytes += (uint64_t)d->counts[d->rank] * sizeof(float) * (uint64_t)(d->size - 1);
    d->traffic.param_seconds += now_seconds() - t0;
}

void ddp_allgather_float(Ddp* d, float mine, float* all) {
    check_mpi(MPI_Allgather(&mine, 1, MPI_FLOAT, all, 1, MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgather (losses)");
    d->traffic.other_bytes += sizeof(float) * (uint64_t)(d->size - 1);
}

void ddp_allgather_u64(Ddp* d, uint64_t mine, uint64_t* all) {
    check_mpi(MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather (uint64)");
    d->traffic.other_bytes += sizeof(uint64_t) * (uint64_t)(d->size - 1);
}

void ddp_sum_u64(Ddp* d, uint64_t* v, int n) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce (counters)");
    d->traffic.other_bytes += (uint64_t)n * sizeof(uint64_t);
}

int ddp_max_int(Ddp* d, int v) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce (exit code)");
    d->traffic.other_bytes += sizeof(int);
    return v;
}

int64_t ddp_bcast_i64(Ddp* d, int64_t v) {
    check_mpi(MPI_Bcast(&v, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
    d->traffic.other_bytes += sizeof v;
    return v;
}

// Messages larger than INT_MAX bytes go in pieces (MPI counts are int).
void ddp_send_bytes(Ddp* d, const void* buf, size_t n, int to, int tag) {
    const char* p = buf;
    do {
        int piece = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        check_mpi(MPI_Send(p, piece, MPI_BYTE, to, tag, MPI_COMM_WORLD), "MPI_Send (optimizer state)");
        p += piece;
        n -= (size_t)piece;
        d->traffic.other_bytes += (uint64_t)piece;
    } while (n > 0);
}

void ddp_recv_bytes(Ddp* d, void* buf, size_t n, int from, int tag) {
    char* p = buf;
    do {
        int piece = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        check_mpi(MPI_Recv(p, piece, MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  "MPI_Recv (optimizer state)");
        p += piece;
        n -= (size_t)piece;
    } while (n > 0);
}

void ddp_barrier(Ddp* d) { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

DdpTraffic ddp_traffic(const Ddp* d) { return d->traffic; }

#endif

// bench_comm.c — comm/reduce/<bytes>: the gradient reduction of `train --ddp` (ddp.h: the
// ordered reduce-scatter, each chunk's owner adding the ranks' pieces in rank order, then the
// all-gather) on a float buffer of <bytes>, timed on rank 0, when the benchmark binary runs
// under `mpirun -np R` (R >= 2; README "Distributed"):
//   mpirun -np 2 build/bench/trainbench-bench --benchmark_filter=comm/
// Rank 0 runs Google Benchmark; the other ranks serve (bench_comm_serve): before each
// reduction rank 0 broadcasts its size, so every rank makes the same calls however many
// iterations Google Benchmark picks, and -1 ends them. Without mpirun nothing is registered.
// Checked once before timing: rank r's buffer holds known values, and rank 0's reduced result
// must equal their float32 sum in rank order, element by element.
// Counters: bytes_per_second = buffer bytes / time (what one all-reduce of that buffer
// delivers), bus_bytes_per_second = that x 2(R-1)/R (the bytes each rank's link carries in a
// reduce-scatter + all-gather; the figure NCCL-style tests report), bytes_passed = the
// payload rank 0 passed to MPI per reduction (ddp.h DdpTraffic).
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/common.h"
#include "train/ddp.h"

static Ddp* g_ddp;

typedef struct {
    size_t n;  // floats
    bool checked, ok;
} CommCase;

// rank r's value at element i: exact in float32, different per rank and element
static float comm_value(int r, size_t i) { return (float)(r + 1) * 0.5f + (float)(i % 1021) * 0.001953125f; }

static void comm_reduce(size_t n, float* g, float* acc) {
    ddp_reduce_round(g_ddp, g, acc, n, true);
    ddp_allgather_chunks(g_ddp, acc, n);
}

static void comm_fill(size_t n, float* g) {
    for (size_t i = 0; i < n; i++) g[i] = comm_value(ddp_rank(g_ddp), i);
}

static void bm_comm(BenchState* st, void* arg) {
    CommCase* c = arg;
    float* g = xaligned_alloc(c->n * sizeof(float) + 64);
    float* acc = xaligned_alloc(c->n * sizeof(float) + 64);
    ddp_alloc_buffers(g_ddp, c->n);
    comm_fill(c->n, g);
    if (!c->checked) {
        ddp_bcast_i64(g_ddp, (int64_t)c->n);
        comm_reduce(c->n, g, acc);
        c->ok = true;
        for (size_t i = 0; i < c->n && c->ok; i++) {
            float want = comm_value(0, i);
            for (int r = 1; r < ddp_size(g_ddp); r++) want += comm_value(r, i);
            c->ok = acc[i] == want;
        }
        c->checked = true;
    }
    if (!c->ok) {
        bench_fail(st, "reduced values differ from the float32 sum in rank order");
    } else {
        const uint64_t before = ddp_traffic(g_ddp).grad_bytes;
        while (bench_keep_running(st)) {
            ddp_bcast_i64(g_ddp, (int64_t)c->n);
            comm_reduce(c->n, g, acc);
        }
        const int64_t it = bench_iterations(st);
        const double R = ddp_size(g_ddp), bytes = (double)c->n * sizeof(float);
        bench_counter(st, "bytes_per_second", bytes * (double)it, BENCH_RATE);
        bench_counter(st, "bus_bytes_per_second", bytes * 2.0 * (R - 1) / R * (double)it, BENCH_RATE);
        bench_counter(st, "bytes_passed", it ? (double)(ddp_traffic(g_ddp).grad_bytes - before) / (double)it : 0,
                      BENCH_PLAIN);
        bench_counter(st, "ranks", R, BENCH_PLAIN);
    }
    free(g);
    free(acc);
}

void bench_comm_serve(Ddp* d) {
    g_ddp = d;
    float* g = NULL;
    float* acc = NULL;
    size_t cap = 0;
    for (;;) {
        const int64_t n = ddp_bcast_i64(g_ddp, 0);
        if (n < 0) break;
        if ((size_t)n > cap) {
            free(g);
            free(acc);
            cap = (size_t)n;
            g = xaligned_alloc(cap * sizeof(float) + 64);
            acc = xaligned_alloc(cap * sizeof(float) + 64);
            ddp_alloc_buffers(g_ddp, cap);
        }
        comm_fill((size_t)n, g);
        comm_reduce((size_t)n, g, acc);
    }
    free(g);
    free(acc);
}

void bench_comm_stop(void) { ddp_bcast_i64(g_ddp, -1); }

void bench_register_comm(Ddp* d) {
    g_ddp = d;
    static const size_t BYTES[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
    const size_t count = bench_full ? ARRAY_LEN(BYTES) : ARRAY_LEN(BYTES) - 1;
    static CommCase cases[ARRAY_LEN(BYTES)];
    for (size_t k = 0; k < count; k++) {
        cases[k].n = BYTES[k] / sizeof(float);
        bench_registerf(bm_comm, &cases[k], "comm/reduce/%zu", BYTES[k]);
    }
}

// bench_main.c — the trainbench benchmark binary (build/bench/trainbench-bench): registers
// every benchmark (roofline probes first, so later fractions use values measured in this
// process; under mpirun also comm/, bench_comm.c) and hands the command line to Google
// Benchmark (--benchmark_filter,
// --benchmark_out, --benchmark_repetitions, ...). Environment: FULL=1 adds the large matrix.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/threads.h"
#include "optim/optim.h"
#include "results/results.h"
#include "train/ddp.h"

int main(int argc, char** argv) {
    threads_apply_wait_policy(argv);  // may re-execute once (threads.h)
    char err[200];
    if (!optim_apply_env(err, sizeof err)) {  // as the CLI: torch.sqrt's MKL kernel, the streams' software prefetch
        fprintf(stderr, "trainbench-bench: %s\n", err);
        return 2;
    }
    const char* full = getenv("FULL");
    bench_full = full && *full && strcmp(full, "0") != 0;
    // under mpirun -np R >= 2 (bench_comm.c): rank 0 runs the benchmarks, the others serve its
    // comm/ reductions; without MPI in the build it says so and runs alone
    Ddp* ddp = NULL;
    if (ddp_world_size_from_env() > 1) {
        Status s = ddp_init(&argc, &argv, &ddp);
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench-bench: %s\n", s.msg);
            return 2;
        }
        if (ddp_rank(ddp) != 0) {
            bench_comm_serve(ddp);
            ddp_finalize(ddp);
            return 0;
        }
        bench_register_comm(ddp);
    }
    bench_register_roofline();
    bench_register_convert();
    bench_register_gemm();
    bench_register_optim();
    bench_register_train();
    // bench.json is a result file: its schema version goes into the context (results.h)
    char version[16];
    snprintf(version, sizeof version, "%d", result_schema_version(RESULT_BENCH));
    bench_add_context("trainbench_schema_version", version);
    int rc = bench_main(argc, argv);
    if (ddp) {
        bench_comm_stop();
        ddp_finalize(ddp);
    }
    return rc;
}

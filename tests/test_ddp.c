// test_ddp.c — `mpirun -np 2 trainbench train --ddp` on the tiny preset (README "Distributed"):
// the data-parallel run and the one-process run with --gradient-accumulation-steps R*A over
// the same micro-batches end bit-identical: every step record but its timing (losses, loss
// scales, skips, gradient norms, counters, tokens) and every tensor of the checkpoints
// (parameters and optimizer state), plus model.safetensors byte for byte; with --zero 1 for
// each registered optimizer; two ranks x two rounds (four micro-batches, so the order of the
// sums matters: two addends commute, three do not) in fp16 with GradScaler skips and clipping;
// a repeated run is identical; resuming with the same ranks continues bit for bit, resuming
// a ZeRO-1 checkpoint of 2 ranks in one process with the same micro-batches per step too,
// and with other micro-batches per step it restores the records and runs on; bad input is
// refused with exit 2 (also ranks on different GEMM backends). A build without MPI (make WITHOUT=mpi) skips the mpirun parts with a
// message and checks that --ddp is refused. The ASan pass runs a subset (two comparisons)
// with leak detection off in the MPI children only (Open MPI's own allocations at exit are
// reported as leaks; nothing of ours is exempted in the other tests).
// Runs BUILD/trainbench (the binary next to this test's build folder) under mpirun.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "model/model.h"
#include "optim/optim.h"
#include "train/ddp.h"
#include "checkpoint_compare.h"
#include "cli_harness.h"
#include "sanitizer_pass.h"

// Open MPI in a container as root: the two variables allow root; --oversubscribe lets 2 ranks
// share fewer cores; vader's cross-memory attach is blocked in containers (no CAP_SYS_PTRACE);
// --bind-to none leaves the OpenMP threads unpinned. odls_base_sigkill_timeout 0: when a rank
// exits non-zero (the refusals below), Open MPI 4 otherwise waits 1 s between SIGTERM and
// SIGKILL per round of cleanup, idle: 2.4 s per refused run against 0.4 s (a 2-rank probe whose
// ranks exit 2 after MPI_Finalize), ~5 s of each build's test_ddp (set as a variable, which an
// Open MPI without the parameter ignores).
#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_odls_base_sigkill_timeout=0 " \
               "mpirun --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none"
#define COMMON "--model tiny --max-steps 4 --save-steps 2 --logging-steps 1 --threads 1 --learning-rate 1e-3 " \
               "--weight-decay 0.01 --num-train-examples 256 --num-eval-examples 32 --no-progress"
// make test-ddp (TRAINBENCH_DDP_SMALL=1): the small preset, 4 steps of 2 x 8 x 64 tokens
#define COMMON_SMALL "--model small --seq-len 64 --max-steps 4 --save-steps 2 --logging-steps 1 --threads 1 " \
                     "--learning-rate 1e-3 --weight-decay 0.01 --num-train-examples 512 --num-eval-examples 32 " \
                     "--no-progress"
static const char* g_common = COMMON;
static const char* g_model = "tiny";  // the preset g_common names

static char g_out[1 << 16];
static bool g_have_mpirun;

// `[mpirun -np ranks] trainbench train COMMON args` (ranks 0: no mpirun), output into g_out
static int train(int ranks, const char* args) {
    char cmd[8192];
    if (ranks > 0)
        snprintf(cmd, sizeof cmd, MPIRUN " %s -np %d %s train %s %s 2>&1",
                 SANITIZER_PASS ? "-x ASAN_OPTIONS=detect_leaks=0" : "", ranks, g_bin, g_common, args);
    else
        snprintf(cmd, sizeof cmd, "%s train %s %s 2>&1", g_bin, g_common, args);
    int rc = cli_capture(cmd, g_out, sizeof g_out);
    printf("$ %s%d trainbench train %s  -> exit %d\n", ranks ? "mpirun -np " : "", ranks, args, rc);
    if (rc != 0) printf("%s\n", g_out);
    return rc;
}

static const char* g_tmp_path(const char* name) {
    static char p[600];
    snprintf(p, sizeof p, "%s/%s", g_tmp, name);
    return p;
}

// Step records 1..n of two results.json equal field by field, timing aside.
static void assert_records_equal(const char* a, const char* b, size_t n) {
    json_t* ja = load_results(a);
    json_t* jb = load_results(b);
    json_t* ra = json_object_get(ja, "records");
    json_t* rb = json_object_get(jb, "records");
    assert_true(json_array_size(ra) >= n && json_array_size(rb) >= n);
    for (size_t i = 0; i < n; i++) {
        json_t* x = json_deep_copy(json_array_get(ra, i));
        json_t* y = json_deep_copy(json_array_get(rb, i));
        json_object_del(x, "step_time_s");
        json_object_del(y, "step_time_s");
        if (!json_equal(x, y)) {
            char* sx = json_dumps(x, JSON_COMPACT);
            char* sy = json_dumps(y, JSON_COMPACT);
            printf("record %zu differs:\n  %s\n  %s\n", i + 1, sx, sy);
            free(sx);
            free(sy);
        }
        assert_true(json_equal(x, y));
        json_decref(x);
        json_decref(y);
    }
    json_decref(ja);
    json_decref(jb);
}

static bool files_equal(const char* a, const char* b) {
    FILE* fa = fopen(a, "rb");
    FILE* fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

// checkpoint-<step> of two output dirs: every tensor of checkpoint.safetensors (parameters and
// optimizer state) bit for bit, the numbers of its metadata (step, optimizer step, GradScaler),
// and model.safetensors byte for byte. The checkpoint's config and records metadata are not
// compared: they name the output folder, the ranks and the step times.
static void assert_checkpoints_equal(const char* a, const char* b, int step) {
    char pa[700], pb[700];
    snprintf(pa, sizeof pa, "%s/checkpoint-%d/checkpoint.safetensors", a, step);
    snprintf(pb, sizeof pb, "%s/checkpoint-%d/checkpoint.safetensors", b, step);
    static const char* const META[] = {"step", "optimizer_step", "scaler_scale", "scaler_growth_tracker",
                                       "scaler_skipped"};
    assert_checkpoint_files_equal(pa, pb, META, ARRAY_LEN(META));
    snprintf(pa, sizeof pa, "%s/checkpoint-%d/model.safetensors", a, step);
    snprintf(pb, sizeof pb, "%s/checkpoint-%d/model.safetensors", b, step);
    assert_true(files_equal(pa, pb));
}

// The data-parallel run `ranks_args` under mpirun -np 2 against the one-process run
// `single_args`: records and checkpoints 2 and 4 identical.
static void check_equal_runs(const char* name, const char* single_args, const char* ddp_args) {
    char a[512], b[512], args[2048];
    snprintf(a, sizeof a, "%s/%s-single", g_tmp, name);
    snprintf(b, sizeof b, "%s/%s-ddp", g_tmp, name);
    if (access(a, F_OK) != 0) {  // the same reference serves several cases
        snprintf(args, sizeof args, "%s --output-dir %s", single_args, a);
        assert_int_equal(train(0, args), 0);
    }
    snprintf(args, sizeof args, "--ddp %s --output-dir %s", ddp_args, b);
    assert_int_equal(train(2, args), 0);
    assert_records_equal(a, b, 4);
    assert_checkpoints_equal(a, b, 2);
    assert_checkpoints_equal(a, b, 4);
    // every rank's optimizer state measured equals the shard rule's estimate (results.json)
    json_t* j = load_results(b);
    json_t* d = json_object_get(json_object_get(j, "summary"), "distributed");
    assert_int_equal(json_integer_value(json_object_get(d, "ranks")), 2);
    json_t* m = json_object_get(d, "optimizer_state_bytes_per_rank");
    json_t* e = json_object_get(d, "optimizer_state_estimate_bytes_per_rank");
    assert_int_equal(json_array_size(m), 2);
    assert_true(json_equal(m, e));
    printf("%s: --ddp %s == one process %s (records, checkpoints 2 and 4); state bytes per rank %lld, %lld\n", name,
           ddp_args, single_args, (long long)json_integer_value(json_array_get(m, 0)),
           (long long)json_integer_value(json_array_get(m, 1)));
    // the bytes rank 0 passed to MPI against the communication model, written out here: per
    // step A reduce-scatter rounds of n - c_0 floats and the all-gather of its chunk c_0 =
    // floor(n/2) to the other rank; ZeRO-1: its parameter range p_0 per step taken
    ParamTable t;
    assert_true(status_is_ok(param_table_build(model_config_find(g_model), &t)));
    const uint64_t n = t.alloc_numel, c0 = n / 2;
    param_table_free(&t);
    const char* acc = strstr(ddp_args, "--gradient-accumulation-steps ");
    const uint64_t A = acc ? strtoull(acc + 30, NULL, 10) : 1;
    json_t* recs = json_object_get(j, "records");
    uint64_t steps = json_array_size(recs), taken = 0;
    for (size_t i = 0; i < steps; i++) taken += !json_is_true(json_object_get(json_array_get(recs, i), "skipped"));
    json_t* pf = json_object_get(d, "zero_param_floats_per_rank");
    const uint64_t p0 = (uint64_t)json_integer_value(json_array_get(pf, 0));
    const uint64_t p1 = (uint64_t)json_integer_value(json_array_get(pf, 1));
    assert_true(strstr(ddp_args, "--zero 1") ? p0 + p1 == n && p0 > 0 && p1 > 0 : p0 + p1 == 0);
    const uint64_t grad = (uint64_t)json_integer_value(json_object_get(d, "rank0_grad_bytes"));
    const uint64_t param = (uint64_t)json_integer_value(json_object_get(d, "rank0_param_bytes"));
    printf("  rank 0 passed %llu gradient and %llu parameter bytes to MPI in %llu steps (%llu taken); model %llu and %llu\n",
           (unsigned long long)grad, (unsigned long long)param, (unsigned long long)steps, (unsigned long long)taken,
           (unsigned long long)(steps * 4 * (A * (n - c0) + c0)), (unsigned long long)(taken * 4 * p0));
    assert_true(grad == steps * 4 * (A * (n - c0) + c0));
    assert_true(param == taken * 4 * p0);
    assert_true((uint64_t)json_integer_value(json_array_get(json_object_get(d, "model_grad_bytes_per_step_per_rank"), 0)) ==
                4 * (A * (n - c0) + c0));
    json_decref(j);
}

#define SKIP_WITHOUT_MPI()                                                            \
    do {                                                                              \
        if (!ddp_available() || !g_have_mpirun) {                                     \
            printf("skipped: %s\n", !ddp_available() ? "built without MPI (WITHOUT=mpi)" \
                                                     : "no mpirun on PATH (make deps installs openmpi-bin)"); \
            skip();                                                                   \
        }                                                                             \
    } while (0)

static void test_ddp_equals_accumulation(void** s) {
    (void)s;
    SKIP_WITHOUT_MPI();
    check_equal_runs("adamw", "--gradient-accumulation-steps 2", "");
    if (SANITIZER_PASS) {
        sanitizer_pass_note("the fp16 DDP-vs-accumulation check");
        return;
    }
    // 2 ranks x 2 rounds = 4 micro-batches, fp16: a large initial scale makes the first step
    // overflow and skip (found_inf from the reduced gradient), default clipping at 1.0
    check_equal_runs("fp16", "--fp16 --init-scale 1e6 --gradient-accumulation-steps 4",
                     "--fp16 --init-scale 1e6 --gradient-accumulation-steps 2");
    json_t* j = load_results(g_tmp_path("fp16-ddp"));
    int skipped = 0;
    json_t* recs = json_object_get(j, "records");
    for (size_t i = 0; i < json_array_size(recs); i++) skipped += json_is_true(json_object_get(json_array_get(recs, i), "skipped"));
    printf("fp16: %d of 4 steps skipped by the GradScaler\n", skipped);
    assert_true(skipped > 0 && skipped < 4);  // both paths (skip, step) were compared
    json_decref(j);
}

static void test_zero1_equals_accumulation(void** s) {
    (void)s;
    SKIP_WITHOUT_MPI();
    for (size_t i = 0; i < optim_count(); i++) {
        const char* o = optim_at(i)->name;
        if (SANITIZER_PASS && i > 0) {
            char what[96];
            snprintf(what, sizeof what, "ZeRO-1 of %s", o);
            sanitizer_pass_note(what);
            continue;
        }
        char name[128], single[256], ddp[256];
        snprintf(name, sizeof name, "zero-%s", o);
        snprintf(single, sizeof single, "--optim %s --gradient-accumulation-steps 2", o);
        snprintf(ddp, sizeof ddp, "--optim %s --zero 1", o);
        check_equal_runs(name, single, ddp);
    }
}

static void test_repeat_and_resume(void** s) {
    (void)s;
    SKIP_WITHOUT_MPI();
    if (SANITIZER_PASS) {
        sanitizer_pass_note("repetition and resume");
        return;
    }
    char ref[512], dir[512], args[2048];
    snprintf(ref, sizeof ref, "%s/zero-adamw_torch-ddp", g_tmp);  // test_zero1_equals_accumulation's
    assert_int_equal(access(ref, F_OK), 0);
    // the same run again: identical
    snprintf(dir, sizeof dir, "%s/repeat", g_tmp);
    snprintf(args, sizeof args, "--ddp --optim adamw_torch --zero 1 --output-dir %s", dir);
    assert_int_equal(train(2, args), 0);
    assert_records_equal(ref, dir, 4);
    assert_checkpoints_equal(ref, dir, 4);
    // resumed at step 2 with the same ranks: checkpoint-4 and every record identical
    snprintf(dir, sizeof dir, "%s/resume-same", g_tmp);
    snprintf(args, sizeof args, "--ddp --optim adamw_torch --zero 1 --output-dir %s --resume-from-checkpoint "
             "%s/checkpoint-2", dir, ref);
    assert_int_equal(train(2, args), 0);
    assert_non_null(strstr(g_out, "Resuming from"));
    assert_records_equal(ref, dir, 4);
    assert_checkpoints_equal(ref, dir, 4);
    // the 2-rank ZeRO-1 checkpoint in one process with the same 2 micro-batches per step:
    // the state is restored exactly (gathered by rank 0 when saved), so the end is identical
    snprintf(dir, sizeof dir, "%s/resume-one-process", g_tmp);
    snprintf(args, sizeof args, "--optim adamw_torch --gradient-accumulation-steps 2 --output-dir %s "
             "--resume-from-checkpoint %s/checkpoint-2", dir, ref);
    assert_int_equal(train(0, args), 0);
    assert_records_equal(ref, dir, 4);
    assert_checkpoints_equal(ref, dir, 4);
    // 2 ranks x 2 rounds from the 2-rank checkpoint: other micro-batches per step (README: the
    // continuation cannot equal the uninterrupted run); the restored records are the same
    snprintf(dir, sizeof dir, "%s/resume-other-batches", g_tmp);
    snprintf(args, sizeof args, "--ddp --optim adamw_torch --zero 1 --gradient-accumulation-steps 2 --output-dir %s "
             "--resume-from-checkpoint %s/checkpoint-2", dir, ref);
    assert_int_equal(train(2, args), 0);
    assert_records_equal(ref, dir, 2);
    json_t* j = load_results(dir);
    json_t* jr = load_results(ref);
    json_int_t t3 = json_integer_value(json_object_get(json_array_get(json_object_get(j, "records"), 2), "tokens"));
    json_int_t r3 = json_integer_value(json_object_get(json_array_get(json_object_get(jr, "records"), 2), "tokens"));
    assert_int_equal(t3, 2 * r3);  // 4 micro-batches per step instead of 2
    json_decref(j);
    json_decref(jr);
    // without --ddp a different accumulation is still refused (test_train checks the message)
    snprintf(args, sizeof args, "--optim adamw_torch --output-dir %s/refused --resume-from-checkpoint "
             "%s/adamw-single/checkpoint-2", g_tmp, g_tmp);
    assert_int_equal(train(0, args), 2);
    assert_non_null(strstr(g_out, "gradient_accumulation_steps=2, this run has gradient_accumulation_steps=1"));
}

// make test-ddp: the small preset with oneDNN (README "Determinism": identical run to run, and
// both sides run 1 thread per process, so the split of work is the same) in fp32 and bf16, and
// ZeRO-1 of every optimizer; fp16 with oneDNN where the CPU has it (avx512_fp16), else refused
// the same way by both and checked with openblas (deterministic for any thread count).
static void test_small_preset_onednn(void** s) {
    (void)s;
    const char* e = getenv("TRAINBENCH_DDP_SMALL");
    if (!e || !*e || !strcmp(e, "0")) {
        printf("skipped: the small preset with oneDNN runs in `make test-ddp` (TRAINBENCH_DDP_SMALL=1)\n");
        skip();
    }
    SKIP_WITHOUT_MPI();
    g_common = COMMON_SMALL;
    g_model = "small";
    check_equal_runs("small-onednn-fp32", "--backend onednn --gradient-accumulation-steps 4",
                     "--backend onednn --gradient-accumulation-steps 2");
    check_equal_runs("small-onednn-bf16", "--backend onednn --bf16 --gradient-accumulation-steps 4",
                     "--backend onednn --bf16 --gradient-accumulation-steps 2");
    char args[512];
    snprintf(args, sizeof args, "--backend onednn --fp16 --max-steps 1 --output-dir %s/fp16-probe", g_tmp);
    const char* fp16_backend = "onednn";
    if (train(0, args) == 2 && strstr(g_out, "cannot run --precision fp16")) {
        printf("oneDNN has no fp16 matmul on this CPU (README \"GEMM backends\"): fp16 checked with openblas\n");
        fp16_backend = "openblas";
    }
    char single[256], ddp[256];
    snprintf(single, sizeof single, "--backend %s --fp16 --init-scale 1e6 --gradient-accumulation-steps 4", fp16_backend);
    snprintf(ddp, sizeof ddp, "--backend %s --fp16 --init-scale 1e6 --gradient-accumulation-steps 2", fp16_backend);
    check_equal_runs("small-fp16", single, ddp);
    for (size_t i = 0; i < optim_count(); i++) {
        const char* o = optim_at(i)->name;
        char name[128];
        snprintf(name, sizeof name, "small-zero-%s", o);
        snprintf(single, sizeof single, "--backend onednn --optim %s --gradient-accumulation-steps 2", o);
        snprintf(ddp, sizeof ddp, "--backend onednn --optim %s --zero 1", o);
        check_equal_runs(name, single, ddp);
    }
    g_common = COMMON;
    g_model = "tiny";
}

// The benchmark binary under mpirun: comm/reduce/4096 runs (its check: rank 0's reduced values
// equal the float32 sum of every rank's known values in rank order) and reports its counters.
static void test_comm_benchmark(void** s) {
    (void)s;
    SKIP_WITHOUT_MPI();
    char bench[4200], cmd[8192];
    snprintf(bench, sizeof bench, "%s", g_bin);
    char* slash = strrchr(bench, '/');
    snprintf(slash ? slash + 1 : bench, sizeof bench - (size_t)(slash ? slash + 1 - bench : 0), "bench/trainbench-bench");
    if (access(bench, X_OK) != 0) {
        printf("skipped: %s not built (make bench-build; the ASan build has none)\n", bench);
        skip();
    }
    snprintf(cmd, sizeof cmd, MPIRUN " -np 2 %s --benchmark_filter='^comm/reduce/4096' --benchmark_min_time=0.01 "
             "--benchmark_format=json 2>&1", bench);
    int rc = cli_capture(cmd, g_out, sizeof g_out);
    printf("$ mpirun -np 2 trainbench-bench --benchmark_filter=^comm/reduce/4096 -> exit %d\n", rc);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    const char* j = strchr(g_out, '{');
    assert_non_null(j);
    json_t* root = json_loads(j, JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(root);
    json_t* b = json_array_get(json_object_get(root, "benchmarks"), 0);
    assert_non_null(b);
    assert_string_equal(json_string_value(json_object_get(b, "name")), "comm/reduce/4096/real_time");
    assert_null(json_object_get(b, "error_occurred") && json_is_true(json_object_get(b, "error_occurred")) ? b : NULL);
    assert_true(json_number_value(json_object_get(b, "bytes_per_second")) > 0);
    assert_int_equal((int)json_number_value(json_object_get(b, "ranks")), 2);
    assert_int_equal((int)json_number_value(json_object_get(b, "bytes_passed")), 4096);  // 2048 out, 2048 gathered
    printf("comm/reduce/4096 on 2 ranks: %.3g bytes/s\n", json_number_value(json_object_get(b, "bytes_per_second")));
    json_decref(root);
}

static void test_bad_input(void** s) {
    (void)s;
    char args[1024];
    snprintf(args, sizeof args, "--zero 1 --output-dir %s/bad1", g_tmp);
    assert_int_equal(train(0, args), 2);
    assert_non_null(strstr(g_out, "--zero 1 shards the optimizer state over MPI ranks: it needs --ddp"));
    if (!ddp_available()) {  // WITHOUT=mpi: --ddp refused by name, nothing written
        snprintf(args, sizeof args, "--ddp --output-dir %s/bad2", g_tmp);
        assert_int_equal(train(0, args), 2);
        assert_non_null(strstr(g_out, "built without MPI"));
        snprintf(args, sizeof args, "%s/bad2", g_tmp);
        assert_int_not_equal(access(args, F_OK), 0);
        return;
    }
    SKIP_WITHOUT_MPI();
    // mpirun without --ddp: every process would train alone into the same folder
    snprintf(args, sizeof args, "--output-dir %s/bad3", g_tmp);
    assert_int_not_equal(train(2, args), 0);
    assert_non_null(strstr(g_out, "without --ddp"));
    snprintf(args, sizeof args, "%s/bad3", g_tmp);
    assert_int_not_equal(access(args, F_OK), 0);
    // ranks on different GEMM backends (--backend auto decides per process; here two explicit
    // ones through mpirun's MPMD form): refused on every rank, no results
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             MPIRUN " %s -np 1 %s train %s --ddp --backend naive --output-dir %s/bad5 : -np 1 %s train %s --ddp "
                    "--backend openblas --output-dir %s/bad5 2>&1",
             SANITIZER_PASS ? "-x ASAN_OPTIONS=detect_leaks=0" : "", g_bin, COMMON, g_tmp, g_bin, COMMON, g_tmp);
    assert_int_not_equal(cli_capture(cmd, g_out, sizeof g_out), 0);
    printf("$ mpirun -np 1 ... --backend naive : -np 1 ... --backend openblas\n%s", g_out);
    assert_non_null(strstr(g_out, "the ranks run different GEMM backends (this rank: naive)"));
    assert_non_null(strstr(g_out, "the ranks run different GEMM backends (this rank: openblas)"));
    snprintf(args, sizeof args, "%s/bad5/results.json", g_tmp);
    assert_int_not_equal(access(args, F_OK), 0);
    // the up-front memory check counts the micro-batch and receive buffers, for every rank here
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/huge.json", g_tmp);
    FILE* f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("{\"vocab_size\": 30522, \"dim\": 16384, \"n_layers\": 16, \"n_heads\": 64, \"hidden_dim\": 65536, "
          "\"max_position_embeddings\": 512, \"num_labels\": 2}\n", f);
    fclose(f);
    snprintf(args, sizeof args, "--ddp --config %s --output-dir %s/bad4", cfg, g_tmp);
    g_common = "--max-steps 1 --no-progress";  // not the tiny preset
    assert_int_not_equal(train(2, args), 0);
    g_common = COMMON;
    assert_non_null(strstr(g_out, "micro-batch grads"));
    assert_non_null(strstr(g_out, "--ddp receive buffer"));
    assert_non_null(strstr(g_out, "times 2 ranks on this machine"));
    snprintf(args, sizeof args, "%s/bad4", g_tmp);
    assert_int_not_equal(access(args, F_OK), 0);
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "test_ddp")) return 1;
    g_have_mpirun = system("command -v mpirun >/dev/null 2>&1") == 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ddp_equals_accumulation),
        cmocka_unit_test(test_zero1_equals_accumulation),
        cmocka_unit_test(test_repeat_and_resume),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_comm_benchmark),
        cmocka_unit_test(test_small_preset_onednn),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cli_harness_cleanup("test_ddp");
    return rc;
}

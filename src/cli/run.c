// run.c — `trainbench run`: the main job (`make run` builds, then calls it). Fills one new
// result folder RESULTS/<machine-class>/<run-id>/ phase by phase, each phase a function that
// runs its programs as child processes (no shell) and writes its files through the results
// module (results.h) or atomically by the program itself:
//   record       `trainbench record` (machine.json); the folder path
//   conformance  BUILD/tests/{test_optim,test_model_golden,test_trajectory}: conform.log, and
//                conform.json (one case per program: ok = exit status 0, cmocka's counts)
//   memory       `trainbench memory --optim all --step --batch 8 --seq-len 128 --out memory.json`
//                (distilbert-base-cased: optimizer state, and one real fp32 step's activation +
//                workspace estimate against the measured high-water mark and peak RSS);
//                `trainbench memory --optim adamw_torch --ranks R --zero 1` for R = 2, 4, 8:
//                memory-zero1-r<R>.json (each rank's ZeRO-1 state, estimate vs measured)
//   benchmarks   BUILD/bench/trainbench-bench BENCH_ARGS: bench.json (temp + rename), bench.log
//   peers        reference/bench_peers.py with VENV's python when it exists: peers.json, peers.log
//   train        `trainbench train` tiny preset per precision:backend x optimizer: train/<p>-<o>/
//   tradeoff     the optimizer trade-off: every registered optimizer x {fp32, bf16} (onednn) x
//                --tradeoff-seeds seeds, tiny-wide preset, --tradeoff-steps steps, each optimizer at
//                its own learning rate (TRADEOFF_LR): tradeoff/<p>-<o>-seed<k>/
//   scaling      ranks x threads (tiny, fp32, openblas): one process with 1 and 2 threads, and
//                `mpirun -np 2 train --ddp` plain and --zero 1: scaling/<ranks>x<threads>[-zero1]/
//                (the data-parallel rows are skipped, saying so, in a build without MPI)
//   report       `trainbench report` of the folder
// Prints one line per phase with the elapsed seconds, and at the end the time per phase against
// the 10-minute budget of `make run`. Every phase runs even when an earlier one
// failed (except record: without a folder there is nothing to fill); exit 1 when any failed,
// naming them, 0 otherwise, 2 on bad flags. Not here: building (the Makefile), the phases'
// own logic (their commands).
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/common.h"
#include "optim/optim.h"
#include "results/results.h"
#include "train/ddp.h"
#include "train/train.h"

static int run_main(int argc, char** argv);

const Command cmd_run = {
    .name = "run",
    .summary = "the main job: record, conformance, memory, benchmarks, peers, training, report into one result folder",
    .usage = "trainbench run [--results DIR (results)] [--label TEXT] [--build DIR (this binary's folder)]\n"
             "    [--bench-args 'ARGS' (--benchmark_min_time=0.1 --benchmark_repetitions=5\n"
             "     --benchmark_enable_random_interleaving=true)] [--steps N (1500)] [--train-args 'ARGS']\n"
             "    [--venv DIR (~/.cache/trainbench-venv)] [--no-peers] [--full]\n"
             "    [--tradeoff-steps N (1000; 0 skips the trade-off)] [--tradeoff-seeds N (3)]\n"
             "  exit 0 when every phase succeeded, 1 when any failed (all still run), 2 on bad flags",
    .run = run_main,
};

#define RUN_DEFAULT_BENCH_ARGS \
    "--benchmark_min_time=0.1 --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true"
#define RUN_DEFAULT_TRAIN_ARGS                                                                       \
    "--learning-rate 3e-4 --per-device-train-batch-size 32 --num-train-examples 20000 --num-eval-examples 512 " \
    "--eval-steps 250 --lr-scheduler-type constant --max-grad-norm 0"

static const char* const CONFORM_PROGRAMS[] = {"test_optim", "test_model_golden", "test_trajectory"};
static const char* const TRAIN_MODES[][2] = {
    {"fp32", "onednn"}, {"bf16", "onednn"}, {"fp16", "openblas"}, {"fp16-noscale", "openblas"}};
static const char* const TRAIN_OPTIMS[] = {"adamw_torch", "adafactor"};

// The optimizer trade-off (issue 10 item 6): every registered optimizer in fp32 and bf16 on
// onednn, --tradeoff-seeds seeds each, on the tiny-wide preset (tiny's vocabulary, positions and
// 2 layers at width 64, 4 heads, FFN 128; 77,506 parameters, most tensors above bitsandbytes'
// 4,096-element threshold, so its 8-bit state is smaller than AdamW's on the trained model too).
// Why this shape and schedule (sweeps of 3 seeds x 4 optimizers x 2 precisions, README "The
// optimizer trade-off"): tiny itself (width 32, 2 heads) at 600 steps of 32 x 32, lr 1e-3 for all,
// constant, no clipping left the paraphrase task's chance plateau (eval_accuracy 0.50) in 6 of 24
// runs (make runs 1bad and 3090 alike); small costs ~10x per step. tiny-wide at 1,000 steps of 32 x 16
// with the Trainer's own schedule (linear decay, max_grad_norm 1.0) after 100 warmup steps left
// it in 24 of 24 (final 0.58-0.86). The learning rate is each optimizer's own (TRADEOFF_LR):
// one shared rate trains some and not others, as Adam at 2e-3 stalls (8 of 12 runs at 0.50-0.51)
// where Adafactor trains, and torch.optim.Adafactor's lr is relative (its step is
// lr x max(1e-3, RMS(param)), torch's default 1e-2), so at Adam's 1e-3 it moves the ~0.02-RMS
// weights by ~2e-5 per step and never left 0.50 (9 of 9 runs).
// Budget: 24 runs of ~3.8 s on 2 quiet cores (1,000 steps, 4 evals of 512 examples, start-up):
// ~90 s, ~30 s more than the tiny phase it replaces (make run stays within its 600 s).
#define RUN_TRADEOFF_ARGS                                                                              \
    "--per-device-train-batch-size 32 --seq-len 16 --num-train-examples 20000 --num-eval-examples 512 " \
    "--eval-steps 250 --lr-scheduler-type linear --warmup-steps 100 --max-grad-norm 1"
// Each optimizer's learning rate in the trade-off (the best of 1e-3 and 2e-3, and torch's
// Adafactor of 1e-2 and 3e-2, in the sweeps above); an optimizer not listed gets the first row's.
static const struct {
    const char* optim;
    const char* lr;
} TRADEOFF_LR[] = {{"adamw_torch", "1e-3"}, {"adamw_bnb_8bit", "1e-3"}, {"adafactor", "2e-3"}, {"adafactor_torch", "3e-2"}};
static const char* const TRADEOFF_MODES[] = {"fp32", "bf16"};
#define TRADEOFF_BACKEND "onednn"
#define TRADEOFF_MODEL "tiny-wide"
#define RUN_BUDGET_S 600.0  // `make run` within 10 minutes on 2 quiet cores (issue 10)

typedef struct {
    const char* results;
    const char* label;
    char build[4096];
    char self[4096];
    const char* bench_args;
    const char* train_args;
    long steps;
    char venv[4096];
    bool peers, full;
    long tradeoff_steps, tradeoff_seeds;
    char dir[4096];       // the result folder
    double t0, tp;        // start, start of the current phase
    char failed[2048];    // " name" per failed phase
    char cur[96];         // the current phase's group: the first word of its line ("train", ...)
    struct {
        char name[96];
        double s;
    } spent[16];          // seconds per phase group, for the budget table at the end
    int nspent;
} Job;

static void phase(Job* j, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void phase(Job* j, const char* fmt, ...) {
    double now = now_seconds();
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    printf("run [%.0fs] %s  (previous phase %.0fs)\n", now - j->t0, what, now - j->tp);
    fflush(stdout);
    if (j->cur[0]) {  // charge the previous phase to its group
        int k = 0;
        while (k < j->nspent && strcmp(j->spent[k].name, j->cur)) k++;
        if (k == j->nspent && k < (int)ARRAY_LEN(j->spent)) snprintf(j->spent[j->nspent++].name, sizeof j->spent[0].name, "%s", j->cur);
        if (k < (int)ARRAY_LEN(j->spent)) j->spent[k].s += now - j->tp;
    }
    snprintf(j->cur, sizeof j->cur, "%.*s", (int)strcspn(what, " "), what);
    j->tp = now;
}

// The time per phase group against make run's budget (after phase(j, "done")).
static void print_budget(const Job* j) {
    const double total = now_seconds() - j->t0;
    printf("run: time per phase (budget: %.0f s for make run on 2 quiet cores)\n", RUN_BUDGET_S);
    for (int k = 0; k < j->nspent; k++)
        printf("run:   %-12s %7.1f s  %5.1f%%\n", j->spent[k].name, j->spent[k].s, total > 0 ? 100 * j->spent[k].s / total : 0.0);
    printf("run:   %-12s %7.1f s  (%s the %.0f s budget)\n", "total", total, total <= RUN_BUDGET_S ? "within" : "OVER",
           RUN_BUDGET_S);
}

static void fail(Job* j, const char* name) {
    size_t n = strlen(j->failed);
    snprintf(j->failed + n, sizeof j->failed - n, " %s", name);
}

// The last `lines` lines of a log, to stdout (what went wrong, without opening the file).
static void tail(const char* path, int lines) {
    uint8_t* data;
    size_t len;
    if (!status_is_ok(read_file(path, &data, &len))) return;
    size_t i = len;
    int seen = 0;
    while (i > 0 && seen <= lines) {
        i--;
        if (data[i] == '\n' && i + 1 < len) seen++;
    }
    if (seen > lines) i++;
    fwrite(data + i, 1, len - i, stdout);
    free(data);
}

// A phase's subfolder RESULT/<sub> into dir (made if missing); false, with the phase `sub`
// marked failed and the reason printed, when it cannot be made.
static bool phase_dir(Job* j, const char* sub, char* dir, size_t cap) {
    snprintf(dir, cap, "%s/%s", j->dir, sub);
    Status s = make_dirs(dir);
    if (status_is_ok(s)) return true;
    fprintf(stderr, "trainbench run: %s\n", s.msg);
    fail(j, sub);
    return false;
}

// One training run of a phase: its output folder <dir>/<label>/ and log <dir>/<label>.log.
#define RUN_PATH_CAP 4400
static void run_paths(const char* dir, const char* label, char* out, char* log) {
    snprintf(out, RUN_PATH_CAP, "%s/%s", dir, label);
    snprintf(log, RUN_PATH_CAP, "%s/%s.log", dir, label);
}

// Runs argv with stdout and stderr into log; a failure marks "<group>:<label>" failed and
// prints the log's last lines.
static void run_logged(Job* j, const char* group, const char* label, const char* const* argv, const char* log) {
    if (run_program(argv, NULL, log, log) == 0) return;
    char name[256];
    snprintf(name, sizeof name, "%s:%s", group, label);
    fail(j, name);
    tail(log, 3);
}

// Splits a flag string at spaces into argv slots after `at`; returns the new count.
static int split_args(const char* s, char* buf, size_t cap, const char** argv, int at, int max) {
    snprintf(buf, cap, "%s", s);
    for (char* save = NULL, *t = strtok_r(buf, " \t\n", &save); t && at < max - 1; t = strtok_r(NULL, " \t\n", &save))
        argv[at++] = t;
    argv[at] = NULL;
    return at;
}

static bool phase_record(Job* j) {
    phase(j, "record");
    char out[4200];
    snprintf(out, sizeof out, "%s/.run-record.%ld", j->results, (long)getpid());
    Status s = make_dirs(j->results);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench run: %s\n", s.msg);
        return false;
    }
    const char* argv[] = {j->self, "record", "--results", j->results, *j->label ? "--label" : NULL, j->label, NULL};
    int rc = run_program(argv, NULL, out, NULL);
    uint8_t* data = NULL;
    size_t len = 0;
    bool ok = rc == 0 && status_is_ok(read_file(out, &data, &len)) && len > 1;
    unlink(out);
    if (ok) {
        snprintf(j->dir, sizeof j->dir, "%s", (char*)data);
        j->dir[strcspn(j->dir, "\n")] = 0;
    }
    free(data);
    if (!ok) fprintf(stderr, "trainbench run: `trainbench record` failed (exit %d)\n", rc);
    else printf("run: result folder %s\n", j->dir);
    return ok;
}

// cmocka's "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s)" counts in a log; 0 when absent.
static long cmocka_count(const char* text, const char* tag) {
    const char* p = strstr(text, tag);
    return p ? strtol(p + strlen(tag), NULL, 10) : 0;
}

static void phase_conformance(Job* j) {
    phase(j, "conformance (test_optim test_model_golden test_trajectory)");
    char log_tmp[4200], log[4200], one[4200], path[4200];
    snprintf(log, sizeof log, "%s/conform.log", j->dir);
    snprintf(log_tmp, sizeof log_tmp, "%s/conform.log.tmp", j->dir);
    FILE* all = fopen(log_tmp, "w");
    if (!all) {
        fprintf(stderr, "trainbench run: cannot write %s: %s\n", log_tmp, strerror(errno));
        fail(j, "conformance");
        return;
    }
    ConformFile cf = {0};
    bool any_failed = false;
    for (size_t i = 0; i < ARRAY_LEN(CONFORM_PROGRAMS); i++) {
        snprintf(path, sizeof path, "%s/tests/%s", j->build, CONFORM_PROGRAMS[i]);
        snprintf(one, sizeof one, "%s/.%s.log", j->dir, CONFORM_PROGRAMS[i]);
        const char* argv[] = {path, NULL};
        int rc = run_program(argv, NULL, one, one);
        uint8_t* text = NULL;
        size_t len = 0;
        long np = 0, nf = 0;
        if (status_is_ok(read_file(one, &text, &len))) {
            fwrite(text, 1, len, all);
            np = cmocka_count((char*)text, "[  PASSED  ] ");
            nf = cmocka_count((char*)text, "[  FAILED  ] ");
        }
        free(text);
        unlink(one);
        char detail[256];
        snprintf(detail, sizeof detail, "exit status %d; cmocka: %ld passed, %ld failed", rc, np, nf);
        printf("run:   %s exit %d (passed %ld, failed %ld)\n", CONFORM_PROGRAMS[i], rc, np, nf);
        conform_file_add(&cf, CONFORM_PROGRAMS[i], rc == 0, detail);
        if (rc != 0) {
            any_failed = true;
            char name[64];
            snprintf(name, sizeof name, "conformance:%s", CONFORM_PROGRAMS[i]);
            fail(j, name);
        }
    }
    bool log_ok = fclose(all) == 0 && rename(log_tmp, log) == 0;
    snprintf(path, sizeof path, "%s/conform.json", j->dir);
    Status s = conform_file_write(path, &cf);
    conform_file_free(&cf);
    if (!log_ok || !status_is_ok(s)) {
        fprintf(stderr, "trainbench run: writing conform.log / conform.json failed%s%s\n", status_is_ok(s) ? "" : ": ",
                status_is_ok(s) ? "" : s.msg);
        if (!any_failed) fail(j, "conformance");
    }
}

static void phase_memory(Job* j) {
    phase(j, "memory (optimizer state, and one distilbert-base-cased step at 8 x 128)");
    char out[4200];
    snprintf(out, sizeof out, "%s/memory.json", j->dir);
    // --step: one real distilbert-base-cased step (batch 8 x 128, fp32: the shape make peers
    // compares) so the report has the activation + workspace estimate vs the measured step
    const char* argv[] = {j->self, "memory", "--optim", "all", "--step", "--batch", "8", "--seq-len", "128",
                          "--out", out, NULL};
    if (run_program(argv, NULL, "/dev/null", NULL) != 0) fail(j, "memory");
    // ZeRO-1 (issue 15 item 3): distilbert-base-cased's AdamW state per rank for R = 2, 4, 8,
    // estimate (the shard rule) vs each shard allocated and stepped alone (~3 s each)
    static const char* const RANKS[] = {"2", "4", "8"};
    for (size_t i = 0; i < ARRAY_LEN(RANKS); i++) {
        snprintf(out, sizeof out, "%s/memory-zero1-r%s.json", j->dir, RANKS[i]);
        const char* zargv[] = {j->self, "memory", "--optim", "adamw_torch", "--ranks", RANKS[i], "--zero", "1",
                               "--out", out, NULL};
        if (run_program(zargv, NULL, "/dev/null", NULL) != 0) {
            char name[64];
            snprintf(name, sizeof name, "memory:zero1-r%s", RANKS[i]);
            fail(j, name);
        }
    }
}

static void phase_bench(Job* j) {
    phase(j, "benchmarks (%s)", j->bench_args);
    char bin[4200], out[4200], tmp[4200], log[4200], outflag[4300], buf[4096];
    snprintf(bin, sizeof bin, "%s/bench/trainbench-bench", j->build);
    snprintf(out, sizeof out, "%s/bench.json", j->dir);
    snprintf(tmp, sizeof tmp, "%s/bench.json.tmp", j->dir);
    snprintf(log, sizeof log, "%s/bench.log", j->dir);
    snprintf(outflag, sizeof outflag, "--benchmark_out=%s", tmp);
    const char* argv[64] = {bin, outflag, "--benchmark_out_format=json"};
    split_args(j->bench_args, buf, sizeof buf, argv, 3, 64);
    int rc = run_program(argv, NULL, log, log);
    if (rc == 0 && rename(tmp, out) == 0) return;
    unlink(tmp);
    fail(j, "bench");
    tail(log, 5);
}

static void phase_peers(Job* j) {
    char py[4200];
    snprintf(py, sizeof py, "%s/bin/python", j->venv);
    if (!j->peers) {
        printf("run: peers skipped (--no-peers)\n");
        return;
    }
    if (access(py, X_OK) != 0) {
        printf("run: peers NOT measured: no Python venv at %s. For the PyTorch comparison run\n"
               "run:   make peers RESULT_DIR=%s   (creates the venv: about 3.1 GB to download), then make report "
               "RESULT_DIR=%s\n", j->venv, j->dir, j->dir);
        return;
    }
    phase(j, "peers (PyTorch on the same problems: reference/bench_peers.py)");
    char script[4200], out[4200], log[4200];
    repo_path("reference", script, sizeof script);
    size_t n = strlen(script);
    snprintf(script + n, sizeof script - n, "/bench_peers.py");
    snprintf(out, sizeof out, "%s/peers.json", j->dir);
    snprintf(log, sizeof log, "%s/peers.log", j->dir);
    char bench[4200];  // the training steps run ours interleaved with PyTorch
    snprintf(bench, sizeof bench, "%s/bench/trainbench-bench", j->build);
    const char* argv[] = {py, script, "--out", out, "--bench-bin", bench, j->full ? "--full" : NULL, NULL};
    if (run_program(argv, NULL, log, log) != 0) {
        fail(j, "peers");
        tail(log, 5);
    }
}

static void phase_train(Job* j) {
    char tdir[4200];
    if (!phase_dir(j, "train", tdir, sizeof tdir)) return;
    for (size_t m = 0; m < ARRAY_LEN(TRAIN_MODES); m++)
        for (size_t o = 0; o < ARRAY_LEN(TRAIN_OPTIMS); o++) {
            const char* p = TRAIN_MODES[m][0];
            const char* b = TRAIN_MODES[m][1];
            phase(j, "train %s-%s (tiny, %s, %ld steps)", p, TRAIN_OPTIMS[o], b, j->steps);
            char label[128], out[RUN_PATH_CAP], log[RUN_PATH_CAP], steps[32], buf[4096];
            snprintf(label, sizeof label, "%s-%s", p, TRAIN_OPTIMS[o]);
            run_paths(tdir, label, out, log);
            snprintf(steps, sizeof steps, "%ld", j->steps);
            const char* argv[64] = {j->self,     "train", "--model",      "tiny",     "--precision",  p,
                                    "--backend", b,       "--optim",      TRAIN_OPTIMS[o], "--max-steps", steps,
                                    "--output-dir", out,  "--no-progress"};
            split_args(j->train_args, buf, sizeof buf, argv, 15, 64);
            run_logged(j, "train", label, argv, log);
        }
}

static void phase_tradeoff(Job* j) {
    if (j->tradeoff_steps <= 0) {
        printf("run: optimizer trade-off skipped (--tradeoff-steps 0)\n");
        return;
    }
    char tdir[4200];
    if (!phase_dir(j, "tradeoff", tdir, sizeof tdir)) return;
    for (size_t o = 0; o < optim_count(); o++)
        for (size_t m = 0; m < ARRAY_LEN(TRADEOFF_MODES); m++)
            for (long seed = 1; seed <= j->tradeoff_seeds; seed++) {
                const char* on = optim_at(o)->name;
                // AdamW's fused kernel: adamw_torch's algorithm and state, its trajectory equal up
                // to rounding; its rows would repeat adamw_torch's in the trade-off (6 runs, ~35 s)
                if (!strcmp(on, "adamw_torch_fused")) continue;
                const char* p = TRADEOFF_MODES[m];
                const char* lr = TRADEOFF_LR[0].lr;
                for (size_t k = 0; k < ARRAY_LEN(TRADEOFF_LR); k++)
                    if (!strcmp(TRADEOFF_LR[k].optim, on)) lr = TRADEOFF_LR[k].lr;
                phase(j, "tradeoff %s-%s seed %ld (%s, %s, %ld steps, lr %s)", p, on, seed, TRADEOFF_MODEL,
                      TRADEOFF_BACKEND, j->tradeoff_steps, lr);
                char label[160], out[RUN_PATH_CAP], log[RUN_PATH_CAP], steps[32], seeds[32], buf[4096];
                snprintf(label, sizeof label, "%s-%s-seed%ld", p, on, seed);
                run_paths(tdir, label, out, log);
                snprintf(steps, sizeof steps, "%ld", j->tradeoff_steps);
                snprintf(seeds, sizeof seeds, "%ld", seed);
                const char* argv[64] = {j->self,         "train",       "--model",    TRADEOFF_MODEL, "--precision",
                                        p,               "--backend",   TRADEOFF_BACKEND, "--optim",  on,
                                        "--max-steps",   steps,         "--seed",     seeds,          "--learning-rate",
                                        lr,              "--output-dir", out,         "--no-progress"};
                split_args(RUN_TRADEOFF_ARGS, buf, sizeof buf, argv, 19, 64);
                run_logged(j, "tradeoff", label, argv, log);
            }
}

// Scaling (issue 15 item 4): ranks x threads on the tiny preset, fp32 on openblas (the backend
// whose results do not depend on the split, README "Determinism"), the same global batch of 2
// micro-batches per step in every row: one process with 1 and with 2 threads (gradient
// accumulation 2), and `mpirun -np 2 train --ddp` with 1 thread per rank, plain and ZeRO-1.
// The report's Scaling section reads scaling/*/results.json. Budget: 4 runs of 100 steps of
// 2 x 16 x 32 tokens, ~1 s (one process) and ~4 s (two ranks: MPI start-up, then ~15 ms per
// step on 2 cores) each on a quiet machine: ~10 s.
#define RUN_SCALING_ARGS                                                                                    \
    "--model tiny --precision fp32 --backend openblas --optim adamw_torch --max-steps 100 "                \
    "--per-device-train-batch-size 16 --seq-len 32 --num-train-examples 4000 --num-eval-examples 64 "      \
    "--eval-steps 1000 --lr-scheduler-type constant --max-grad-norm 0 --no-progress"
static void phase_scaling(Job* j) {
    static const struct {
        const char* name;
        int ranks;
        const char* args;
    } ROWS[] = {{"1x1", 1, "--threads 1 --gradient-accumulation-steps 2"},
                {"1x2", 1, "--threads 2 --gradient-accumulation-steps 2"},
                {"2x1", 2, "--threads 1 --ddp"},
                {"2x1-zero1", 2, "--threads 1 --ddp --zero 1"}};
    char sdir[4200];
    if (!phase_dir(j, "scaling", sdir, sizeof sdir)) return;
    // Open MPI refuses to start as root unless told; in containers cross-memory attach is
    // blocked (README "Distributed"). Set for mpirun only when we are root.
    if (geteuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    for (size_t i = 0; i < ARRAY_LEN(ROWS); i++) {
        if (ROWS[i].ranks > 1 && !ddp_available()) {
            printf("run: scaling %s skipped: this trainbench was built without MPI (make WITHOUT=mpi); `make deps` "
                   "and a rebuild add the data-parallel rows\n", ROWS[i].name);
            continue;
        }
        phase(j, "scaling %s (tiny, fp32, openblas: %d rank(s), %s)", ROWS[i].name, ROWS[i].ranks, ROWS[i].args);
        char out[RUN_PATH_CAP], log[RUN_PATH_CAP], buf[4096], np[16];
        run_paths(sdir, ROWS[i].name, out, log);
        snprintf(np, sizeof np, "%d", ROWS[i].ranks);
        const char* argv[64] = {"mpirun", "-np", np, "--oversubscribe", "--bind-to", "none", "--mca",
                                "btl_vader_single_copy_mechanism", "none"};
        int n = ROWS[i].ranks > 1 ? 9 : 0;
        argv[n++] = j->self;
        argv[n++] = "train";
        argv[n++] = "--output-dir";
        argv[n++] = out;
        char both[1024];
        snprintf(both, sizeof both, "%s %s", RUN_SCALING_ARGS, ROWS[i].args);
        split_args(both, buf, sizeof buf, argv, n, 64);
        run_logged(j, "scaling", ROWS[i].name, argv, log);
    }
}

static void phase_report(Job* j) {
    phase(j, "report");
    const char* argv[] = {j->self, "report", j->dir, NULL};
    if (run_program(argv, NULL, NULL, NULL) != 0) fail(j, "report");
}

static int run_main(int argc, char** argv) {
    Job j = {.results = "results", .label = "", .bench_args = RUN_DEFAULT_BENCH_ARGS,
             .train_args = RUN_DEFAULT_TRAIN_ARGS, .steps = 1500, .peers = true, .tradeoff_steps = 1000,
             .tradeoff_seeds = 3};
    const char* build = NULL;
    const char* venv = NULL;
    bool steps_set = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-peers")) {
            j.peers = false;
        } else if (!strcmp(argv[i], "--full")) {
            j.full = true;
        } else if (flag_matches(argv[i], "--results")) {
            if (!flag_value(&cmd_run, argc, argv, &i, "--results", &j.results)) return 2;
        } else if (flag_matches(argv[i], "--label")) {
            if (!flag_value(&cmd_run, argc, argv, &i, "--label", &j.label)) return 2;
        } else if (flag_matches(argv[i], "--build")) {
            if (!flag_value(&cmd_run, argc, argv, &i, "--build", &build)) return 2;
        } else if (flag_matches(argv[i], "--bench-args")) {
            if (!flag_value(&cmd_run, argc, argv, &i, "--bench-args", &j.bench_args)) return 2;
        } else if (flag_matches(argv[i], "--train-args")) {
            if (!flag_value(&cmd_run, argc, argv, &i, "--train-args", &j.train_args)) return 2;
        } else if (flag_matches(argv[i], "--venv")) {
            if (!flag_value(&cmd_run, argc, argv, &i, "--venv", &venv)) return 2;
        } else if (flag_matches(argv[i], "--steps")) {
            if (!flag_int(&cmd_run, argc, argv, &i, "--steps", 1, 100000000, &j.steps)) return 2;
            steps_set = true;
        } else if (flag_matches(argv[i], "--tradeoff-steps")) {
            if (!flag_int(&cmd_run, argc, argv, &i, "--tradeoff-steps", 0, 100000000, &j.tradeoff_steps)) return 2;
        } else if (flag_matches(argv[i], "--tradeoff-seeds")) {
            if (!flag_int(&cmd_run, argc, argv, &i, "--tradeoff-seeds", 1, 100, &j.tradeoff_seeds)) return 2;
        } else {
            return cli_unknown_flag(&cmd_run, argv[i]);
        }
    }
    if (j.full && !steps_set) j.steps = 6000;
    ssize_t len = readlink("/proc/self/exe", j.self, sizeof j.self - 1);
    if (len <= 0) return user_error("run: cannot find this program's path (/proc/self/exe)");
    j.self[len] = 0;
    if (build) {
        snprintf(j.build, sizeof j.build, "%s", build);
    } else {
        snprintf(j.build, sizeof j.build, "%s", j.self);
        char* slash = strrchr(j.build, '/');
        if (slash) *slash = 0;
    }
    if (!path_is_dir(j.build)) return cli_usage_error(&cmd_run, "--build: no such folder %s", j.build);
    // before the first phase: what a phase would only find out minutes in
    {
        char buf[4096];
        const char* targv[64] = {"train", "--model", "tiny", "--max-steps", "1", "--no-progress"};
        int targc = split_args(j.train_args, buf, sizeof buf, targv, 6, 64);
        if (train_check_args(targc, (char**)targv) != 0)
            return user_error("run: --train-args '%s' is refused by `trainbench train` (above)", j.train_args);
    }
    char bench_bin[4200];
    snprintf(bench_bin, sizeof bench_bin, "%s/bench/trainbench-bench", j.build);
    if (access(bench_bin, X_OK) != 0)
        return cli_usage_error(&cmd_run, "--build %s holds no bench/trainbench-bench (build it: make bench-build, or "
                               "give the build folder that has it)", j.build);
    if (venv) snprintf(j.venv, sizeof j.venv, "%s", venv);
    else snprintf(j.venv, sizeof j.venv, "%s/.cache/trainbench-venv", getenv("HOME") ? getenv("HOME") : "");

    j.t0 = j.tp = now_seconds();
    if (!phase_record(&j)) return 1;
    phase_conformance(&j);
    phase_memory(&j);
    phase_bench(&j);
    phase_peers(&j);
    phase_train(&j);
    phase_tradeoff(&j);
    phase_scaling(&j);
    phase_report(&j);
    phase(&j, "done");
    print_budget(&j);
    printf("run: results in %s\n", j.dir);
    if (j.failed[0]) {
        fflush(stdout);
        fprintf(stderr, "run: FAILED phases:%s\n", j.failed);
        return 1;
    }
    return 0;
}

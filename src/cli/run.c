// run.c — `trainbench run`: the main job (`make run` builds, then calls it). Fills one new
// result folder RESULTS/<machine-class>/<run-id>/ phase by phase, each phase a function that
// runs its programs as child processes (no shell) and writes its files through the results
// module (results.h) or atomically by the program itself:
//   record       `trainbench record` (machine.json); the folder path
//   conformance  BUILD/tests/{test_optim,test_model_golden,test_trajectory}: conform.log, and
//                conform.json (one case per program: ok = exit status 0, cmocka's counts)
//   memory       `trainbench memory --optim all --out memory.json` (distilbert-base-cased)
//   benchmarks   BUILD/bench/trainbench-bench BENCH_ARGS: bench.json (temp + rename), bench.log
//   peers        reference/bench_peers.py with VENV's python when it exists: peers.json, peers.log
//   train        `trainbench train` tiny preset per precision:backend x optimizer: train/<p>-<o>/
//   report       `trainbench report` of the folder
// Prints one line per phase with the elapsed seconds. Every phase runs even when an earlier one
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
#include "results/results.h"

static int run_main(int argc, char** argv);

const Command cmd_run = {
    .name = "run",
    .summary = "the main job: record, conformance, memory, benchmarks, peers, training, report into one result folder",
    .usage = "trainbench run [--results DIR (results)] [--label TEXT] [--build DIR (this binary's folder)]\n"
             "    [--bench-args 'ARGS' (--benchmark_min_time=0.1 --benchmark_repetitions=5\n"
             "     --benchmark_enable_random_interleaving=true)] [--steps N (2000)] [--train-args 'ARGS']\n"
             "    [--venv DIR (~/.cache/trainbench-venv)] [--no-peers] [--full]\n"
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
    char dir[4096];       // the result folder
    double t0, tp;        // start, start of the current phase
    char failed[2048];    // " name" per failed phase
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
    j->tp = now;
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
    phase(j, "memory");
    char out[4200];
    snprintf(out, sizeof out, "%s/memory.json", j->dir);
    const char* argv[] = {j->self, "memory", "--optim", "all", "--out", out, NULL};
    if (run_program(argv, NULL, "/dev/null", NULL) != 0) fail(j, "memory");
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
    snprintf(tdir, sizeof tdir, "%s/train", j->dir);
    Status s = make_dirs(tdir);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench run: %s\n", s.msg);
        fail(j, "train");
        return;
    }
    for (size_t m = 0; m < ARRAY_LEN(TRAIN_MODES); m++)
        for (size_t o = 0; o < ARRAY_LEN(TRAIN_OPTIMS); o++) {
            const char* p = TRAIN_MODES[m][0];
            const char* b = TRAIN_MODES[m][1];
            phase(j, "train %s-%s (tiny, %s, %ld steps)", p, TRAIN_OPTIMS[o], b, j->steps);
            char out[4400], log[4400], steps[32], buf[4096];
            snprintf(out, sizeof out, "%s/%s-%s", tdir, p, TRAIN_OPTIMS[o]);
            snprintf(log, sizeof log, "%s/%s-%s.log", tdir, p, TRAIN_OPTIMS[o]);
            snprintf(steps, sizeof steps, "%ld", j->steps);
            const char* argv[64] = {j->self,     "train", "--model",      "tiny",     "--precision",  p,
                                    "--backend", b,       "--optim",      TRAIN_OPTIMS[o], "--max-steps", steps,
                                    "--output-dir", out,  "--no-progress"};
            split_args(j->train_args, buf, sizeof buf, argv, 15, 64);
            if (run_program(argv, NULL, log, log) != 0) {
                char name[128];
                snprintf(name, sizeof name, "train:%s-%s", p, TRAIN_OPTIMS[o]);
                fail(j, name);
                tail(log, 3);
            }
        }
}

static void phase_report(Job* j) {
    phase(j, "report");
    const char* argv[] = {j->self, "report", j->dir, NULL};
    if (run_program(argv, NULL, NULL, NULL) != 0) fail(j, "report");
}

static int run_main(int argc, char** argv) {
    Job j = {.results = "results", .label = "", .bench_args = RUN_DEFAULT_BENCH_ARGS,
             .train_args = RUN_DEFAULT_TRAIN_ARGS, .steps = 2000, .peers = true};
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
    if (venv) snprintf(j.venv, sizeof j.venv, "%s", venv);
    else snprintf(j.venv, sizeof j.venv, "%s/.cache/trainbench-venv", getenv("HOME") ? getenv("HOME") : "");

    j.t0 = j.tp = now_seconds();
    if (!phase_record(&j)) return 1;
    phase_conformance(&j);
    phase_memory(&j);
    phase_bench(&j);
    phase_peers(&j);
    phase_train(&j);
    phase_report(&j);
    phase(&j, "done");
    printf("run: results in %s\n", j.dir);
    if (j.failed[0]) {
        fflush(stdout);
        fprintf(stderr, "run: FAILED phases:%s\n", j.failed);
        return 1;
    }
    return 0;
}

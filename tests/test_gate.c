// test_gate.c — end-to-end tests of `trainbench gate` on constructed result folders (bench.json
// in Google Benchmark's JSON format, with repetitions and aggregates, written into a temp dir):
// identical runs pass, a 20% slowdown fails naming the benchmark, noisy equal distributions
// pass, a 3% change passes under the 5% default, conformance failures and memory mismatches
// fail, and unusable input (different benchmark sets, malformed JSON, bad flags) exits 2.
// Runs the binary next to this test's build folder (BUILD/trainbench), like test_cli.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cli_harness.h"

typedef struct {
    int exit_code;
    char out[65536];
} RunResult;

static RunResult g_run;

static void run_gate(RunResult* r, const char* args) {
    char full[8200];
    snprintf(full, sizeof full, "gate %s", args);
    r->exit_code = cli_run(full, true, r->out, sizeof r->out);
}

static void expect(const char* args, int code, const char* needle) {
    run_gate(&g_run, args);
    if (g_run.exit_code != code || (needle && !strstr(g_run.out, needle))) printf("output was:\n%s\n", g_run.out);
    assert_int_equal(g_run.exit_code, code);
    if (needle) assert_non_null(strstr(g_run.out, needle));
}

// Deterministic noise in [-1, 1): a small LCG seeded per folder, so "different draws" differ.
static double noise(uint64_t* s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

typedef struct {
    const char* name;
    double time_ns;  // centre of the distribution
    double scale;    // multiplies the times (1.2 = 20% slower)
} Spec;

#define REPS 10
static int g_reps = REPS;  // repetitions write_bench writes per benchmark

// error_message written for the benchmark named by write_bench's err_name
static const char* g_err_msg = "result differs from naive";

// Writes DIR/bench.json: per benchmark REPS iteration entries time*scale*(1 + amp*noise) in
// "us" or "ns", then the mean/median/stddev aggregates the gate must ignore.
static void write_bench(const char* dir, const Spec* specs, size_t n, double amp, uint64_t seed, const char* err_name) {
    mkdir(dir, 0755);
    json_t* arr = json_array();
    for (size_t b = 0; b < n; b++) {
        bool us = b % 2;  // mix units
        for (int r = 0; r < g_reps; r++) {
            double t = specs[b].time_ns * specs[b].scale * (1.0 + amp * noise(&seed));
            json_t* e = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:s, s:f}", "name", specs[b].name, "run_name",
                                  specs[b].name, "run_type", "iteration", "repetitions", g_reps, "repetition_index", r,
                                  "threads", 1, "real_time", us ? t / 1000 : t, "cpu_time", us ? t / 1000 : t,
                                  "time_unit", us ? "us" : "ns", "GFLOP/s", 12.5);
            if (err_name && !strcmp(err_name, specs[b].name)) {
                json_object_set_new(e, "error_occurred", json_true());
                json_object_set_new(e, "error_message", json_string(g_err_msg));
            }
            json_array_append_new(arr, e);
        }
        static const char* const AGG[] = {"mean", "median", "stddev", "cv"};
        for (int a = 0; a < 4; a++) {
            char nm[256];
            snprintf(nm, sizeof nm, "%s_%s", specs[b].name, AGG[a]);
            json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:f, s:f, s:s}", "name", nm, "run_name",
                                                 specs[b].name, "run_type", "aggregate", "aggregate_name", AGG[a],
                                                 "real_time", 1e9, "cpu_time", 1e9, "time_unit", "ns"));
        }
    }
    json_t* root = json_pack("{s:{s:s, s:i}, s:o}", "context", "date", "2026-11-29T00:00:00+00:00", "num_cpus", 2,
                             "benchmarks", arr);
    char path[1024];
    snprintf(path, sizeof path, "%s/bench.json", dir);
    assert_int_equal(json_dump_file(root, path, JSON_INDENT(1)), 0);
    json_decref(root);
}

static void write_text(const char* dir, const char* file, const char* text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const Spec BASE[] = {
    {"gemm/naive/f32/nn/64x64x64", 250000, 1.0},
    {"optim/adamw_torch/10000", 8000, 1.0},
    {"convert/bf16/1000000", 400000, 1.0},
};

static char g_base[512];

// folder name under the temp dir
static const char* dir_of(char* buf, size_t n, const char* leaf) {
    snprintf(buf, n, "%s/%s", g_tmp, leaf);
    return buf;
}

static void gate_args(char* args, size_t n, const char* cand, const char* extra) {
    snprintf(args, n, "--baseline %s --candidate %s %s", g_base, cand, extra ? extra : "");
}

static int setup_base(void** s) {
    (void)s;
    dir_of(g_base, sizeof g_base, "base");
    write_bench(g_base, BASE, 3, 0.01, 1, NULL);
    return 0;
}

static void test_identical_runs_pass(void** s) {
    (void)s;
    char args[2048];
    gate_args(args, sizeof args, g_base, NULL);
    expect(args, 0, "PASS");
    assert_non_null(strstr(g_run.out, "optim/adamw_torch/10000"));
    assert_non_null(strstr(g_run.out, "no significant change"));
    gate_args(args, sizeof args, g_base, "--json");
    expect(args, 0, NULL);
    json_error_t err;
    json_t* root = json_loads(g_run.out, 0, &err);
    if (!root) printf("not JSON: %s\n%s\n", err.text, g_run.out);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "result")), "PASS");
    json_t* b = json_object_get(root, "benchmarks");
    assert_int_equal(json_array_size(b), 3);
    json_t* row = json_array_get(b, 1);
    assert_string_equal(json_string_value(json_object_get(row, "name")), "optim/adamw_torch/10000");
    assert_int_equal(json_integer_value(json_object_get(row, "candidate_repetitions")), REPS);  // aggregates ignored
    assert_true(json_real_value(json_object_get(row, "p")) == 1.0);
    json_decref(root);
}

static void test_20pct_slowdown_fails_naming_it(void** s) {
    (void)s;
    char dir[512], args[2048];
    Spec c[3];
    memcpy(c, BASE, sizeof c);
    c[1].scale = 1.2;
    write_bench(dir_of(dir, sizeof dir, "slow"), c, 3, 0.01, 2, NULL);
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 1, "FAIL");
    assert_non_null(strstr(g_run.out, "regression in optim/adamw_torch/10000"));
    assert_null(strstr(g_run.out, "regression in gemm"));
    assert_null(strstr(g_run.out, "regression in convert"));
    gate_args(args, sizeof args, dir, "--json");
    expect(args, 1, "\"REGRESSION\"");
}

static size_t count_of(const char* hay, const char* needle) {
    size_t n = 0;
    for (const char* p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

// CI outputs: --junit (one test case per benchmark, the regression a <failure>) and --markdown
// (regressions first, then improvements, then the untested). tests/check_ci.sh also parses the
// JUnit with Python's xml module.
static void test_junit_and_markdown(void** s) {
    (void)s;
    char dir[512], args[4096], junit[600], md[600];
    Spec c[3];
    memcpy(c, BASE, sizeof c);
    c[1].scale = 1.2;   // regression
    c[2].scale = 0.8;   // improvement
    write_bench(dir_of(dir, sizeof dir, "ci"), c, 3, 0.01, 5, NULL);
    snprintf(junit, sizeof junit, "%s/gate.xml", g_tmp);
    snprintf(md, sizeof md, "%s/gate.md", g_tmp);
    gate_args(args, sizeof args, dir, "");
    size_t L = strlen(args);
    snprintf(args + L, sizeof args - L, " --junit %s --markdown %s", junit, md);
    expect(args, 1, "FAIL");
    FILE* f = fopen(junit, "r");
    assert_non_null(f);
    static char x[65536];
    size_t n = fread(x, 1, sizeof x - 1, f);
    x[n] = 0;
    fclose(f);
    assert_non_null(strstr(x, "<?xml version=\"1.0\""));
    assert_non_null(strstr(x, "tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"0\""));
    assert_int_equal(count_of(x, "<testcase "), 3);
    assert_int_equal(count_of(x, "<failure "), 1);
    assert_non_null(strstr(x, "name=\"optim/adamw_torch/10000\" time=\"0.000000\">\n      <failure message=\"REGRESSION"));
    f = fopen(md, "r");
    assert_non_null(f);
    n = fread(x, 1, sizeof x - 1, f);
    x[n] = 0;
    fclose(f);
    const char* regr = strstr(x, "### Regressions and failures (1)");
    const char* impr = strstr(x, "### Improvements (1)");
    assert_non_null(strstr(x, "## trainbench gate: FAIL"));
    assert_non_null(regr);
    assert_non_null(impr);
    assert_true(regr < impr);
    assert_true(strstr(regr, "`optim/adamw_torch/10000`") < impr);
    assert_true(strstr(impr, "`convert/bf16/1000000`") != NULL);
    // untested after improvements
    gate_args(args, sizeof args, dir, "--alpha 1e-9 --allow-untested");
    L = strlen(args);
    snprintf(args + L, sizeof args - L, " --markdown %s", md);
    expect(args, 0, NULL);
    f = fopen(md, "r");
    assert_non_null(f);
    n = fread(x, 1, sizeof x - 1, f);
    x[n] = 0;
    fclose(f);
    assert_non_null(strstr(x, "### Untested (3)"));
    // an unwritable report path is bad input
    gate_args(args, sizeof args, dir, "--junit /nonexistent-folder/x.xml");
    expect(args, 2, "--junit");
}

static void test_noisy_equal_distributions_pass(void** s) {
    (void)s;
    char dir[512], args[2048];
    write_bench(dir_of(dir, sizeof dir, "noisy"), BASE, 3, 0.01, 12345, NULL);  // same distribution, new draws
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 0, "PASS");
}

static void test_3pct_change_passes_under_default(void** s) {
    (void)s;
    char dir[512], args[2048];
    Spec c[3];
    memcpy(c, BASE, sizeof c);
    c[0].scale = 1.03;
    write_bench(dir_of(dir, sizeof dir, "three"), c, 3, 0.002, 7, NULL);  // small noise: significant
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 0, "change below min effect");
    assert_non_null(strstr(g_run.out, "PASS"));
    gate_args(args, sizeof args, dir, "--min-effect 0.01");  // a stricter gate catches it
    expect(args, 1, "regression in gemm/naive/f32/nn/64x64x64");
    // at an alpha 10 repetitions cannot reach, the gate says so instead of passing
    gate_args(args, sizeof args, dir, "--min-effect=0.01 --alpha=1e-9");
    expect(args, 2, "could not be tested: alpha 1e-09 needs at least");
}

// The roofline probes are compared first: a machine 40% slower everywhere (probes included) is
// an environment change, not a regression (exit 2, speed not gated); --normalize roofline
// divides each benchmark by its probe's best repetition and then finds only the real slowdown.
static void test_environment_change_blames_no_code(void** s) {
    (void)s;
    static const Spec PB[] = {
        {"roofline/fma_f32", 900000, 1.0},
        {"roofline/triad", 5000000, 1.0},
        {"gemm/openblas/f32/nt/1024x768x768", 2000000, 1.0},
        {"optim/adamw_torch/1000000", 600000, 1.0},
    };
    char base[512], slow_env[512], slow_both[512], args[2048];
    write_bench(dir_of(base, sizeof base, "env_base"), PB, 4, 0.005, 41, NULL);
    Spec c[4];
    memcpy(c, PB, sizeof c);
    for (int i = 0; i < 4; i++) c[i].scale = 1.4;  // another machine of the "same" kind, 40% slower
    write_bench(dir_of(slow_env, sizeof slow_env, "env_slow"), c, 4, 0.005, 42, NULL);
    snprintf(args, sizeof args, "--baseline %s --candidate %s", base, slow_env);
    expect(args, 2, "ENVIRONMENT CHANGED: roofline/fma_f32");
    assert_null(strstr(g_run.out, "regression in"));
    assert_non_null(strstr(g_run.out, "--normalize roofline"));
    assert_non_null(strstr(g_run.out, "slower, not gated: environment changed"));
    snprintf(args, sizeof args, "--baseline %s --candidate %s --normalize roofline", base, slow_env);
    expect(args, 0, "PASS");
    // the same machine change plus a real 20% slowdown of the optimizer: normalized, it is found
    c[3].scale = 1.4 * 1.2;
    write_bench(dir_of(slow_both, sizeof slow_both, "env_slow_optim"), c, 4, 0.005, 43, NULL);
    snprintf(args, sizeof args, "--baseline %s --candidate %s --normalize roofline", base, slow_both);
    expect(args, 1, "regression in optim/adamw_torch/1000000");
    assert_null(strstr(g_run.out, "regression in gemm"));
    snprintf(args, sizeof args, "--baseline %s --candidate %s --normalize bogus", base, slow_both);
    expect(args, 2, "--normalize must be roofline or none");
    snprintf(args, sizeof args, "--baseline %s --candidate %s --metric instructions --json", base, slow_both);
    expect(args, 2, "--metric instructions takes neither --json nor --normalize");
    snprintf(args, sizeof args, "--baseline %s --candidate %s --metric instructions", base, slow_both);
    expect(args, 2, "no icount/ entries");
}

// --metric instructions on constructed bench.json files (the counts `trainbench icount` writes;
// tests/check_instructions.sh runs valgrind for real): a plain threshold, no statistics.
static void write_icount(const char* dir, double adamw_instructions) {
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/bench.json", dir);
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"benchmarks\": [{\"name\": \"icount/optim/adamw_torch/100000\", \"run_type\": \"iteration\", "
               "\"real_time\": 9e6, \"time_unit\": \"ns\", \"instructions\": %.1f}, {\"name\": "
               "\"icount/gemm/naive/f32/nn/64x64x64\", \"run_type\": \"iteration\", \"real_time\": 4e7, "
               "\"time_unit\": \"ns\", \"instructions\": 1909040}]}\n",
            adamw_instructions);
    fclose(f);
}

static void test_instruction_gate(void** s) {
    (void)s;
    char a[512], b[512], c[512], d[512], args[2048];
    write_icount(dir_of(a, sizeof a, "ic_a"), 477708);
    write_icount(dir_of(b, sizeof b, "ic_b"), 477708);
    write_icount(dir_of(c, sizeof c, "ic_slow"), 477708 * 1.02);
    write_icount(dir_of(d, sizeof d, "ic_half"), 477708 * 1.005);
    snprintf(args, sizeof args, "--metric instructions --baseline %s --candidate %s", a, b);
    expect(args, 0, "PASS: 2 benchmarks, none above +1% instructions");
    snprintf(args, sizeof args, "--metric instructions --baseline %s --candidate %s", a, c);
    expect(args, 1, "FAIL: regression in icount/optim/adamw_torch/100000 (+2.00% instructions");
    snprintf(args, sizeof args, "--metric instructions --baseline %s --candidate %s", a, d);
    expect(args, 0, "within threshold");
    snprintf(args, sizeof args, "--metric instructions --threshold 0.001 --baseline %s --candidate %s", a, d);
    expect(args, 1, "regression in icount/optim/adamw_torch/100000");
    // the wall-time gate ignores icount/ entries (timed under valgrind)
    snprintf(args, sizeof args, "--baseline %s --candidate %s", a, c);
    expect(args, 2, "no wall-time benchmarks");
}

static void test_failed_candidate_benchmark_fails(void** s) {
    (void)s;
    char dir[512], args[2048];
    write_bench(dir_of(dir, sizeof dir, "err"), BASE, 3, 0.01, 3, "convert/bf16/1000000");
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 1, "convert/bf16/1000000 failed in the candidate: result differs from naive");
}

// "unsupported: ..." in both runs (onednn f16 on a CPU without avx512_fp16) is not a failure;
// a benchmark that ran in the baseline and is unsupported in the candidate is one.
static void test_unsupported_on_both_sides_not_gated(void** s) {
    (void)s;
    char b[512], c[512], args[2048];
    g_err_msg = "unsupported: no f16 matmul on this CPU";
    write_bench(dir_of(b, sizeof b, "unsup-base"), BASE, 3, 0.01, 5, "convert/bf16/1000000");
    write_bench(dir_of(c, sizeof c, "unsup-cand"), BASE, 3, 0.01, 6, "convert/bf16/1000000");
    g_err_msg = "result differs from naive";
    snprintf(args, sizeof args, "--baseline %s --candidate %s", b, c);
    expect(args, 0, "unsupported on both");
    gate_args(args, sizeof args, c, NULL);  // baseline ran it, candidate cannot
    expect(args, 1, "convert/bf16/1000000 failed in the candidate: unsupported");
}

static void test_conformance_failure_fails(void** s) {
    (void)s;
    char dir[512], args[2048];
    write_bench(dir_of(dir, sizeof dir, "conf"), BASE, 3, 0.01, 4, NULL);
    write_text(dir, "conform.json",
               "{\"cases\": [{\"id\": \"optim/adamw_torch/step1\", \"ok\": true, \"detail\": \"\"},"
               " {\"id\": \"optim/adafactor/block_boundary\", \"ok\": false, \"detail\": \"max rel err 3e-3 > tol\"}]}");
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 1, "conformance case optim/adafactor/block_boundary failed: max rel err 3e-3 > tol");
    write_text(dir, "conform.json", "{\"cases\": [{\"id\": \"a\", \"ok\": true}]}");
    expect(args, 0, "1 conformance cases, none failed");
    write_text(dir, "conform.json", "{\"failures\": 2}");
    expect(args, 1, "2 failures reported");
    write_text(dir, "conform.json", "{\"cases\": [{\"ok\": true}]}");
    expect(args, 2, "needs \"id\"");
}

static void test_memory_mismatch_fails(void** s) {
    (void)s;
    char dir[512], args[2048], cmd[8192];
    write_bench(dir_of(dir, sizeof dir, "mem"), BASE, 3, 0.01, 5, NULL);
    // the real `trainbench memory --json` output passes ...
    snprintf(cmd, sizeof cmd, "%s memory --json --model tiny > %s/memory.json 2>/dev/null", g_bin, dir);
    assert_int_equal(system(cmd), 0);
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 0, "memory rows, estimate == measured");
    // ... and one row changed fails, naming it
    write_text(dir, "memory.json",
               "{\"model\": \"tiny\", \"optimizers\": ["
               "{\"optimizer\": \"adamw_torch\", \"variant\": \"default\", \"estimate_bytes\": 170928, \"measured_bytes\": 170928},"
               "{\"optimizer\": \"adafactor\", \"variant\": \"default\", \"estimate_bytes\": 7984, \"measured_bytes\": 8000}]}");
    expect(args, 1, "memory tiny adafactor/default: estimate 7984 != measured 8000 bytes");
}

static void test_unusable_input_exits_2(void** s) {
    (void)s;
    char dir[512], args[2048];
    // different benchmark sets: name the one missing
    write_bench(dir_of(dir, sizeof dir, "fewer"), BASE, 2, 0.01, 6, NULL);
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 2, "only in baseline");
    assert_non_null(strstr(g_run.out, "convert/bf16/1000000"));
    // malformed JSON: file and jansson's message
    dir_of(dir, sizeof dir, "broken");
    mkdir(dir, 0755);
    write_text(dir, "bench.json", "{\"benchmarks\": [ {\"name\": \"x\", ");
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 2, "bench.json: malformed JSON");
    write_text(dir, "bench.json", "{\"context\": {}}");
    expect(args, 2, "no \"benchmarks\" array");
    write_text(dir, "bench.json", "{\"benchmarks\": [{\"name\": \"x\", \"real_time\": 1, \"time_unit\": \"fortnight\"}]}");
    expect(args, 2, "\"time_unit\" must be one of ns, us, ms, s");
    // a failure flag that is not a boolean must not pass as a success; versions are integers
    write_text(dir, "bench.json", "{\"benchmarks\": [{\"name\": \"x\", \"real_time\": 1, \"time_unit\": \"ns\", "
                                  "\"error_occurred\": \"yes\"}]}");
    expect(args, 2, "\"error_occurred\" must be true or false");
    write_text(dir, "bench.json", "{\"context\": {\"trainbench_schema_version\": \"1x\"}, \"benchmarks\": []}");
    expect(args, 2, "is not a whole number");
    // missing folder / bench.json
    gate_args(args, sizeof args, "/nonexistent/trainbench-dir", NULL);
    expect(args, 2, "does not exist");
    dir_of(dir, sizeof dir, "empty");
    mkdir(dir, 0755);
    gate_args(args, sizeof args, dir, NULL);
    expect(args, 2, "bench.json: missing");
    // flags
    gate_args(args, sizeof args, g_base, "--alpha 0");
    expect(args, 2, "--alpha must be in (0, 1)");
    gate_args(args, sizeof args, g_base, "--alpha 1.5");
    expect(args, 2, "--alpha must be in (0, 1)");
    gate_args(args, sizeof args, g_base, "--alpha abc");
    expect(args, 2, "--alpha must be a finite number");
    gate_args(args, sizeof args, g_base, "--min-effect -0.1");
    expect(args, 2, "--min-effect must be a number >= 0");
    gate_args(args, sizeof args, g_base, "--bogus");
    expect(args, 2, "unknown option '--bogus'");
    expect("--baseline x", 2, "missing --candidate DIR");
    expect("", 2, "missing --baseline DIR");
}

// One repetition a side: nothing can be significant, so the gate cannot say PASS (exit 2,
// naming the repetitions alpha needs) unless --allow-untested.
static void test_too_few_repetitions_exit_2(void** s) {
    (void)s;
    char dir[512], args[2048];
    dir_of(dir, sizeof dir, "one");
    mkdir(dir, 0755);
    write_text(dir, "bench.json",
               "{\"benchmarks\": [{\"name\": \"a\", \"run_type\": \"iteration\", \"real_time\": 5, \"time_unit\": \"ms\"}]}");
    char dir2[512];
    dir_of(dir2, sizeof dir2, "one_slow");
    mkdir(dir2, 0755);
    write_text(dir2, "bench.json",
               "{\"benchmarks\": [{\"name\": \"a\", \"run_type\": \"iteration\", \"real_time\": 9, \"time_unit\": \"ms\"}]}");
    snprintf(args, sizeof args, "--baseline %s --candidate %s", dir, dir2);
    expect(args, 2, "UNTESTED: too few repetitions");
    assert_non_null(strstr(g_run.out, "needs at least 5 repetitions per side"));
    snprintf(args, sizeof args, "--baseline %s --candidate %s --allow-untested", dir, dir2);
    expect(args, 0, "allowed by --allow-untested");
    snprintf(args, sizeof args, "--baseline %s --candidate %s --json", dir, dir2);
    expect(args, 2, "\"result\": \"UNTESTED\"");
}

// The rule "smallest n with 2/C(2n, n) <= alpha": 3 repetitions of a 10x slower candidate
// cannot pass silently; 4 a side suffice at alpha 0.05 but not at 0.01, 5 suffice at 0.01.
static void test_repetitions_needed_per_alpha(void** s) {
    (void)s;
    static const Spec SLOW[] = {{"a", 1000, 10.0}}, FAST[] = {{"a", 1000, 1.0}};
    char b[512], c[512], args[2048];
    static const struct { int reps; const char* alpha; int code; const char* needle; } CASES[] = {
        {3, "0.05", 2, "needs at least 4 repetitions"},
        {3, "0.01", 2, "needs at least 5 repetitions"},
        {4, "0.05", 1, "REGRESSION"},
        {4, "0.01", 2, "needs at least 5 repetitions"},
        {5, "0.01", 1, "REGRESSION"},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        g_reps = CASES[k].reps;
        char leaf[64];
        snprintf(leaf, sizeof leaf, "reps%d_base", g_reps);
        write_bench(dir_of(b, sizeof b, leaf), FAST, 1, 0.01, 7, NULL);
        snprintf(leaf, sizeof leaf, "reps%d_slow", g_reps);
        write_bench(dir_of(c, sizeof c, leaf), SLOW, 1, 0.01, 8, NULL);
        snprintf(args, sizeof args, "--baseline %s --candidate %s --alpha %s", b, c, CASES[k].alpha);
        expect(args, CASES[k].code, CASES[k].needle);
    }
    g_reps = REPS;
}

// 80,000 benchmark names a side: matched by hash (this took minutes when matching was a
// linear search per name); every one is reported.
static void test_many_benchmarks(void** s) {
    (void)s;
    enum { N = 80000 };
    char dir[512];
    for (int side = 0; side < 2; side++) {
        dir_of(dir, sizeof dir, side ? "many_c" : "many_b");
        mkdir(dir, 0755);
        char path[1024];
        snprintf(path, sizeof path, "%s/bench.json", dir);
        FILE* f = fopen(path, "w");
        assert_non_null(f);
        fputs("{\"benchmarks\": [", f);
        for (int i = 0; i < N; i++)  // the candidate lists them in reverse order
            fprintf(f, "%s{\"name\": \"b/%d\", \"real_time\": 1, \"time_unit\": \"ms\"}", i ? ", " : "",
                    side ? N - 1 - i : i);
        fputs("]}", f);
        fclose(f);
    }
    // 80,000 table rows: the output goes to a file (a pipe would fill)
    char cmd[8192], b[512], out[1024];
    snprintf(out, sizeof out, "%s/many.out", g_tmp);
    snprintf(cmd, sizeof cmd, "%s gate --baseline %s --candidate %s --allow-untested --json > %s 2>&1", g_bin,
             dir_of(b, sizeof b, "many_b"), dir, out);
    char none[8];
    assert_int_equal(cli_capture(cmd, none, sizeof none), 0);
    FILE* f = fopen(out, "r");
    assert_non_null(f);
    char line[512];
    bool found = false;
    while (fgets(line, sizeof line, f)) found |= strstr(line, "\"untested\": 80000") != NULL;
    fclose(f);
    assert_true(found);
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "gate") != 0) return 1;
    setup_base(NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_runs_pass),
        cmocka_unit_test(test_20pct_slowdown_fails_naming_it),
        cmocka_unit_test(test_junit_and_markdown),
        cmocka_unit_test(test_noisy_equal_distributions_pass),
        cmocka_unit_test(test_3pct_change_passes_under_default),
        cmocka_unit_test(test_environment_change_blames_no_code),
        cmocka_unit_test(test_instruction_gate),
        cmocka_unit_test(test_failed_candidate_benchmark_fails),
        cmocka_unit_test(test_unsupported_on_both_sides_not_gated),
        cmocka_unit_test(test_conformance_failure_fails),
        cmocka_unit_test(test_memory_mismatch_fails),
        cmocka_unit_test(test_unusable_input_exits_2),
        cmocka_unit_test(test_too_few_repetitions_exit_2),
        cmocka_unit_test(test_repetitions_needed_per_alpha),
        cmocka_unit_test(test_many_benchmarks),
    };
    int rc = cmocka_run_group_tests_name("gate", tests, NULL, NULL);
    cli_harness_cleanup("gate");
    return rc;
}

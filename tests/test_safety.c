// test_safety.c — the output promises of README "Safety", through the `trainbench` binary:
// a command whose stdout cannot be written (/dev/full) exits non-zero; --output-dir naming a
// file is refused before anything runs (exit 2); `report` of a folder without result files
// exits 2 naming it; temp files/folders (NAME.tmp.<pid>) of dead processes are removed by the
// next train/record/report and those of live processes are kept; --resume-from-checkpoint
// OUTPUT_DIR picks the newest complete checkpoint (ignoring empty or temp folders); a run
// refused after making its folders removes them again (folders that existed stay); `record`
// killed at any point leaves no run folder without machine.json. (Kills during training and
// a full disk: test_crash.c.) The up-front memory check of train and memory refuses a huge
// config and sees `ulimit -v`, and train's counts the synthetic data before generating it. A
// FIFO given as an input is refused at once; config values train refuses are refused by memory.
// A TRAINBENCH_STREAM_PREFETCH value that is no policy stops every command (exit 2, naming the
// allowed ones); a valid one is what `info` reports. trainbench-bench refuses bad values of it
// and of TRAINBENCH_TORCH_SQRT the same way.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"
#include "model/model.h"
#include "cli_harness.h"

static char g_out[1 << 16];

static bool exists(const char* p) { return access(p, F_OK) == 0; }

// a pid that is certainly dead: a child that exited and was reaped
static long dead_pid(void) {
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) _exit(0);
    int st;
    waitpid(p, &st, 0);
    return (long)p;
}

static void write_text(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void touch(const char* path) { write_text(path, "partial"); }

// `trainbench <args>` is refused: exit 2, its output (printed) naming `needle`
static void expect_refused(const char* args, const char* needle) {
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 2);
    printf("%s", g_out);
    assert_non_null(strstr(g_out, needle));
}

static void test_stream_prefetch_env(void** s) {
    (void)s;
    assert_int_equal(setenv("TRAINBENCH_STREAM_PREFETCH", "page", 1), 0);
    expect_refused("info", "TRAINBENCH_STREAM_PREFETCH='page' is not a policy (allowed: pages, lines, none, auto)");
    static const char* const OK[] = {"pages", "lines", "none"};
    for (size_t i = 0; i < ARRAY_LEN(OK); i++) {
        assert_int_equal(setenv("TRAINBENCH_STREAM_PREFETCH", OK[i], 1), 0);
        assert_int_equal(cli_run("info --json", false, g_out, sizeof g_out), 0);
        char want[64];
        snprintf(want, sizeof want, "\"stream_prefetch\": \"%s\"", OK[i]);
        assert_non_null(strstr(g_out, want));
    }
    assert_int_equal(unsetenv("TRAINBENCH_STREAM_PREFETCH"), 0);
}

// The benchmark binary takes the same environment as the CLI: a value of TRAINBENCH_TORCH_SQRT or
// TRAINBENCH_STREAM_PREFETCH that neither takes stops it before any benchmark (exit 2, naming
// the allowed values); valid ones run. (Skipped where trainbench-bench is not built: the
// sanitizer build has none; `make test` builds it for the normal build.)
static void test_bench_env_refused(void** s) {
    (void)s;
    char dir[4096], bench[4200], cmd[8192];
    snprintf(dir, sizeof dir, "%s", g_bin);
    snprintf(bench, sizeof bench, "%s/bench/trainbench-bench", dirname(dir));
    if (access(bench, X_OK) != 0) {
        printf("skipped: %s not built (make bench-build)\n", bench);
        skip();
    }
    static const struct {
        const char *env, *needle;
    } BAD[] = {
        {"TRAINBENCH_TORCH_SQRT=sse", "TRAINBENCH_TORCH_SQRT='sse' is not a kernel (allowed: mkl-sse, mkl-avx512, auto)"},
        {"TRAINBENCH_STREAM_PREFETCH=page", "TRAINBENCH_STREAM_PREFETCH='page' is not a policy (allowed: pages, lines, none, auto)"},
    };
    for (size_t i = 0; i < ARRAY_LEN(BAD); i++) {
        snprintf(cmd, sizeof cmd, "%s '%s' --benchmark_list_tests=true 2>&1", BAD[i].env, bench);
        const int rc = cli_capture(cmd, g_out, sizeof g_out);
        printf("$ %s  -> exit %d\n%s", cmd, rc, g_out);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(g_out, BAD[i].needle));
        assert_null(strstr(g_out, "optim/"));  // stopped before listing anything
    }
    snprintf(cmd, sizeof cmd,
             "TRAINBENCH_TORCH_SQRT=mkl-sse TRAINBENCH_STREAM_PREFETCH=none '%s' --benchmark_list_tests=true "
             "--benchmark_filter='^optim/adamw_torch/10000/' 2>&1", bench);
    assert_int_equal(cli_capture(cmd, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "optim/adamw_torch/10000"));
}

static void test_stdout_errors_exit_nonzero(void** s) {
    (void)s;
    static const char* const CMDS[] = {"info --json", "info", "memory --json --model tiny --optim adamw_torch",
                                       "--version"};
    for (size_t i = 0; i < ARRAY_LEN(CMDS); i++) {
        char args[256];
        snprintf(args, sizeof args, "%s 2>&1 > /dev/full", CMDS[i]);  // stderr to us, stdout to a full disk
        int rc = cli_run(args, false, g_out, sizeof g_out);
        printf("%s", g_out);
        assert_int_equal(rc, 1);
        assert_non_null(strstr(g_out, "cannot write standard output"));
    }
    assert_int_equal(cli_run("info --json > /dev/null", true, g_out, sizeof g_out), 0);  // a writable stdout is fine
}

static void test_output_dir_that_is_a_file(void** s) {
    (void)s;
    char f[512], args[1024];
    snprintf(f, sizeof f, "%s/a-file", g_tmp);
    touch(f);
    snprintf(args, sizeof args, "train --max-steps 2 --no-progress --output-dir %s", f);
    expect_refused(args, "exists and is not a folder");
    assert_null(strstr(g_out, "Running training"));  // refused before anything ran
}

static void test_report_of_empty_folder(void** s) {
    (void)s;
    char d[512], args[1024], md[600];
    snprintf(d, sizeof d, "%s/empty", g_tmp);
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(args, sizeof args, "report %s", d);
    expect_refused(args, "nothing to report");
    snprintf(md, sizeof md, "%s/REPORT.md", d);
    assert_false(exists(md));
}

static void test_stale_temps_removed_live_kept(void** s) {
    (void)s;
    char out[512], p[4][700], args[1024];
    snprintf(out, sizeof out, "%s/stale", g_tmp);
    assert_int_equal(mkdir(out, 0755), 0);
    long dead = dead_pid();
    snprintf(p[0], sizeof p[0], "%s/results.json.tmp.%ld", out, dead);
    snprintf(p[1], sizeof p[1], "%s/checkpoint-3.tmp.%ld", out, dead);
    snprintf(p[2], sizeof p[2], "%s/results.json.tmp.%ld", out, (long)getpid());  // alive: this test
    snprintf(p[3], sizeof p[3], "%s/notes.tmp.txt", out);                         // not a temp name
    touch(p[0]);
    assert_int_equal(mkdir(p[1], 0755), 0);
    char inner[800];
    snprintf(inner, sizeof inner, "%s/checkpoint.safetensors.tmp.%ld", p[1], dead);
    touch(inner);
    touch(p[2]);
    touch(p[3]);
    snprintf(args, sizeof args, "train --max-steps 2 --no-progress --output-dir %s", out);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "Removed 2 temporary files"));
    assert_false(exists(p[0]));
    assert_false(exists(p[1]));
    assert_true(exists(p[2]));
    assert_true(exists(p[3]));
}

static void test_resume_from_output_dir_picks_newest_complete(void** s) {
    (void)s;
    char out[512], args[2400], d[700];
    snprintf(out, sizeof out, "%s/newest", g_tmp);
    snprintf(args, sizeof args, "train --max-steps 6 --save-steps 2 --no-progress --output-dir %s", out);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 0);
    snprintf(d, sizeof d, "%s/checkpoint-8", out);  // an old-style empty folder: not complete
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(d, sizeof d, "%s/checkpoint-10.tmp.%ld", out, dead_pid());
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(args, sizeof args, "train --max-steps 8 --save-steps 2 --no-progress --output-dir %s "
             "--resume-from-checkpoint %s", out, out);
    int rc = cli_run(args, true, g_out, sizeof g_out);
    printf("%s", g_out);
    assert_int_equal(rc, 0);
    char want[800];
    snprintf(want, sizeof want, "Resuming from %s/checkpoint-6 at step 6", out);
    assert_non_null(strstr(g_out, want));
    // an output dir without any complete checkpoint: exit 2 naming it
    snprintf(d, sizeof d, "%s/none", g_tmp);
    assert_int_equal(mkdir(d, 0755), 0);
    snprintf(args, sizeof args, "train --max-steps 2 --no-progress --resume-from-checkpoint %s --output-dir %s/o", d,
             g_tmp);
    expect_refused(args, "nor a complete checkpoint-<step>/ folder");
}

// A run refused after setup made its folders (here: --resume-from-checkpoint names a folder
// without a checkpoint, checked after the output folder exists) removes the folders it made,
// nested ones included, and leaves a folder that was there before (empty or not) as it was.
static void test_refused_run_leaves_no_folder(void** s) {
    (void)s;
    char empty[512], args[2400], made[600], kept[600], file[700];
    snprintf(empty, sizeof empty, "%s/no-checkpoint", g_tmp);
    assert_int_equal(mkdir(empty, 0755), 0);
    snprintf(made, sizeof made, "%s/refused", g_tmp);
    snprintf(args, sizeof args, "train --max-steps 2 --no-progress --resume-from-checkpoint %s --output-dir %s/a/b "
             "--dropout 0.1 --dump-dropout-masks %s/masks/x", empty, made, made);
    expect_refused(args, "--resume-from-checkpoint");
    assert_false(exists(made));  // refused/a/b, refused/masks/x and refused itself: all made by the run
    // an output folder that existed (empty, and with a file) stays, with its file
    snprintf(kept, sizeof kept, "%s/existing", g_tmp);
    assert_int_equal(mkdir(kept, 0755), 0);
    snprintf(args, sizeof args, "train --max-steps 2 --no-progress --resume-from-checkpoint %s --output-dir %s", empty,
             kept);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 2);
    assert_true(exists(kept));
    snprintf(file, sizeof file, "%s/notes.txt", kept);
    touch(file);
    snprintf(args, sizeof args, "train --max-steps 2 --no-progress --resume-from-checkpoint %s --output-dir %s/sub",
             empty, kept);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 2);
    assert_true(exists(file));
    snprintf(file, sizeof file, "%s/sub", kept);
    assert_false(exists(file));
}

// Every run folder under RESULTS/<machine-id>/ has machine.json; returns how many there are.
static int check_run_folders(const char* results) {
    int n = 0;
    DIR* top = opendir(results);
    if (!top) return 0;
    struct dirent* m;
    while ((m = readdir(top))) {
        if (m->d_name[0] == '.') continue;
        char md[1024 + 256];
        snprintf(md, sizeof md, "%s/%s", results, m->d_name);
        DIR* d = opendir(md);
        assert_non_null(d);
        struct dirent* r;
        while ((r = readdir(d))) {
            if (r->d_name[0] == '.') continue;  // .<time>.tmp.<pid>: a temp folder
            char mj[1400 + 256];
            snprintf(mj, sizeof mj, "%s/%s/machine.json", md, r->d_name);
            if (!exists(mj)) printf("run folder without machine.json: %s/%s\n", md, r->d_name);
            assert_true(exists(mj));
            n++;
        }
        closedir(d);
    }
    closedir(top);
    return n;
}

static void test_record_killed_leaves_nothing_half_made(void** s) {
    (void)s;
    char results[512];
    snprintf(results, sizeof results, "%s/results", g_tmp);
    static const long DELAYS_US[] = {0, 500, 1000, 2000, 4000, 8000, 16000, 32000};
    int finished = 0;
    for (size_t i = 0; i < ARRAY_LEN(DELAYS_US); i++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (!freopen("/dev/null", "w", stdout)) _exit(127);
            execl(g_bin, g_bin, "record", "--results", results, (char*)NULL);
            _exit(127);
        }
        struct timespec ts = {0, DELAYS_US[i] * 1000};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        finished += WIFEXITED(st);
        check_run_folders(results);
    }
    // the next record removes the killed ones' temp folders and makes a complete one
    assert_int_equal(cli_run_in(g_tmp, "record --results results", true, g_out, sizeof g_out), 0);
    int n = check_run_folders(results);
    printf("%zu records killed at 0-32 ms (%d had finished); then %d complete run folder(s)\n",
           ARRAY_LEN(DELAYS_US), finished, n);
    assert_true(n >= 1);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.tmp.*' | grep -q .", results);
    assert_int_not_equal(system(cmd), 0);  // no temp folder left
}

// A 51.5 G-parameter DistilBERT config (~780 GB for params, grads and AdamW state): both
// commands refuse before allocating, naming what they need and what is available.
static void test_memory_check_refuses_huge_config(void** s) {
    (void)s;
    char cfg[512], out[600], args[2048];
    snprintf(cfg, sizeof cfg, "%s/huge.json", g_tmp);
    write_text(cfg, "{\"model_type\": \"distilbert\", \"vocab_size\": 30522, \"dim\": 16384, \"n_layers\": 16, "
                    "\"n_heads\": 64, \"hidden_dim\": 65536, \"max_position_embeddings\": 512, \"num_labels\": 2}\n");
    snprintf(out, sizeof out, "%s/huge-out", g_tmp);
    snprintf(args, sizeof args, "train --config %s --max-steps 1 --no-progress --output-dir %s", cfg, out);
    expect_refused(args, "needs about 7");  // 779.63 GB
    assert_non_null(strstr(g_out, "is available ("));
    assert_non_null(strstr(g_out, "--force"));
    assert_false(exists(out));  // nothing was written
    // with accumulation the micro-batch gradient buffer (accum.c) is counted: exactly one more
    // table buffer of alloc_numel floats than without
    unsigned long long need1 = 0, need2 = 0;
    const char* p = strstr(g_out, "GB (");
    assert_non_null(p);
    need1 = strtoull(p + 4, NULL, 10);
    snprintf(args, sizeof args, "train --config %s --max-steps 1 --no-progress --gradient-accumulation-steps 2 "
             "--output-dir %s", cfg, out);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 2);
    printf("%s", g_out);
    assert_non_null(p = strstr(g_out, "GB ("));
    need2 = strtoull(p + 4, NULL, 10);
    ModelConfig mc;
    ParamTable t;
    assert_true(status_is_ok(model_config_from_json_file(cfg, &mc)));
    assert_true(status_is_ok(param_table_build(&mc, &t)));
    assert_true(need2 - need1 == (unsigned long long)t.alloc_numel * sizeof(float));
    param_table_free(&t);
    assert_false(exists(out));
    snprintf(args, sizeof args, "memory --config %s --optim adamw_torch", cfg);
    expect_refused(args, "needs about");
    assert_non_null(strstr(g_out, "is available ("));
}

// Under `ulimit -v` the address-space limit is the binding one: a 12 GB activation workspace
// is refused naming RLIMIT_AS, while a tiny run under the same limit trains. (Not under ASan,
// whose shadow memory needs terabytes of address space.)
static void test_memory_check_sees_ulimit_v(void** s) {
    (void)s;
#if defined(__SANITIZE_ADDRESS__)
    printf("skipped under ASan (its shadow mapping cannot run under ulimit -v)\n");
#else
    char args[8192];
    snprintf(args, sizeof args, "-c 'ulimit -v 2000000 && exec %s train --model small --per-device-train-batch-size 2048 "
             "--max-steps 1 --no-progress --output-dir %s/ulimit-big' 2>&1", g_bin, g_tmp);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "sh %s", args);
    int rc = cli_capture(cmd, g_out, sizeof g_out);
    printf("$ %s -> exit %d\n%s", cmd, rc, g_out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_out, "RLIMIT_AS"));
    snprintf(cmd, sizeof cmd, "sh -c 'ulimit -v 2000000 && exec %s train --model tiny --max-steps 2 --num-eval-examples 0 "
             "--no-progress --output-dir %s/ulimit-tiny' 2>&1", g_bin, g_tmp);
    rc = cli_capture(cmd, g_out, sizeof g_out);
    printf("$ %s -> exit %d\n", cmd, rc);
    assert_int_equal(rc, 0);
#endif
}

// A FIFO given where a file is read is refused at once (exit 2, "not a regular file"): opening one
// for reading would wait for a writer forever. `timeout` turns a hang into a failure here.
static void test_fifo_inputs_refused(void** s) {
    (void)s;
    char fifo[512], folder[600], bench[700], cmd[8192];
    snprintf(fifo, sizeof fifo, "%s/pipe", g_tmp);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    snprintf(folder, sizeof folder, "%s/fifo-result", g_tmp);  // a result folder whose JSON files are FIFOs
    assert_int_equal(mkdir(folder, 0755), 0);
    snprintf(bench, sizeof bench, "%s/bench.json", folder);
    assert_int_equal(mkfifo(bench, 0644), 0);
    snprintf(bench, sizeof bench, "%s/machine.json", folder);  // (history add reads this one first)
    assert_int_equal(mkfifo(bench, 0644), 0);
    const char* const ARGS[] = {"inspect %s", "train --config %s --output-dir %s.out", "train --train-file %s",
                                "train --init-from %s", "memory --config %s", "conform --plugin %s",
                                "fingerprint %s", "report %s --out %s.rep", "history add %s --db %s.sqlite"};
    for (size_t i = 0; i < ARRAY_LEN(ARGS); i++) {
        const char* in = i < 7 ? fifo : folder;
        char a[2048];
        snprintf(a, sizeof a, ARGS[i], in, folder);
        snprintf(cmd, sizeof cmd, "timeout 30 %s %s 2>&1", g_bin, a);
        int rc = cli_capture(cmd, g_out, sizeof g_out);
        printf("$ %s -> exit %d\n%s", cmd, rc, g_out);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(g_out, "not a regular file"));
    }
    char left[700];
    snprintf(left, sizeof left, "%s.sqlite", folder);
    assert_false(exists(left));  // history add made no empty database
    snprintf(left, sizeof left, "%s.rep", folder);
    assert_false(exists(left));
}

// The synthetic data is counted before it is generated: an absurd --num-train-examples is refused
// with the memory check's message (exit 2), not killed by the OOM killer while generating.
static void test_synthetic_data_checked_before_generating(void** s) {
    (void)s;
    char args[1024], out[600];
    snprintf(out, sizeof out, "%s/data-huge", g_tmp);
    snprintf(args, sizeof args, "train --num-train-examples 68719476736 --max-steps 1 --no-progress --output-dir %s", out);
    expect_refused(args, "the synthetic data alone");
    assert_false(exists(out));
}

// Config values refused by name: a negative num_labels is not "absent" (it used to become 2), a
// vocab_size of 0 is named as itself, and `memory --config` applies train's rules.
static void test_config_values_refused(void** s) {
    (void)s;
    static const struct {
        const char* extra;
        const char* cmd;
        const char* needle;
    } CASES[] = {
        {"\"num_labels\": -2", "train", "num_labels must be >= 1"},
        {"\"num_labels\": -2", "memory", "num_labels must be >= 1"},
        {"\"activation\": \"xielu\"", "memory", "activation \"xielu\""},
        {"\"dropout\": 1.5", "memory", "dropout"},
    };
    for (size_t i = 0; i < ARRAY_LEN(CASES); i++) {
        char cfg[512], args[1400], text[400];
        snprintf(cfg, sizeof cfg, "%s/cfg-%zu.json", g_tmp, i);
        snprintf(text, sizeof text, "{\"vocab_size\": 64, \"dim\": 32, \"n_layers\": 2, \"n_heads\": 2, "
                 "\"hidden_dim\": 64, \"max_position_embeddings\": 32, %s}\n", CASES[i].extra);
        write_text(cfg, text);
        if (!strcmp(CASES[i].cmd, "train"))
            snprintf(args, sizeof args, "train --config %s --max-steps 1 --no-progress --output-dir %s/cfg-out", cfg,
                     g_tmp);
        else
            snprintf(args, sizeof args, "memory --config %s --optim adamw_torch", cfg);
        expect_refused(args, CASES[i].needle);
    }
    char cfg[512], args[1400];
    snprintf(cfg, sizeof cfg, "%s/cfg-vocab0.json", g_tmp);
    write_text(cfg, "{\"vocab_size\": 0, \"dim\": 32, \"n_layers\": 2, \"n_heads\": 2, \"hidden_dim\": 64, "
                    "\"max_position_embeddings\": 32, \"pad_token_id\": 0}\n");
    snprintf(args, sizeof args, "train --config %s --max-steps 1 --no-progress --output-dir %s/cfg-out", cfg, g_tmp);
    expect_refused(args, "vocab_size must be");
}

// A new run into an --output-dir that holds another run is refused (exit 2) and changes nothing
// there; resuming that run into it is allowed.
static void test_output_dir_holding_a_run(void** s) {
    (void)s;
    char dir[512], args[1400], results[600];
    snprintf(dir, sizeof dir, "%s/held", g_tmp);
    snprintf(args, sizeof args, "train --max-steps 2 --save-steps 2 --num-eval-examples 8 --no-progress --output-dir %s",
             dir);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 0);
    snprintf(results, sizeof results, "%s/results.json", dir);
    uint8_t *before, *after;
    size_t nb, na;
    assert_true(status_is_ok(read_file(results, &before, &nb)));
    snprintf(args, sizeof args, "train --max-steps 1 --seed 7 --no-progress --output-dir %s", dir);
    expect_refused(args, "already holds a run (results.json)");
    assert_true(status_is_ok(read_file(results, &after, &na)));
    assert_true(nb == na && memcmp(before, after, nb) == 0);  // untouched
    free(after);
    snprintf(args, sizeof args, "train --max-steps 3 --save-steps 3 --num-eval-examples 8 --no-progress --output-dir %s "
             "--resume-from-checkpoint %s", dir, dir);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 0);
    free(before);
    // a run that saved no checkpoint (--save-steps 0): refused too, without resume advice
    snprintf(dir, sizeof dir, "%s/held-no-checkpoint", g_tmp);
    snprintf(args, sizeof args, "train --max-steps 2 --save-steps 0 --num-eval-examples 8 --no-progress --output-dir %s",
             dir);
    assert_int_equal(cli_run(args, true, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "train --max-steps 1 --no-progress --output-dir %s", dir);
    expect_refused(args, "already holds a run (results.json) that saved no checkpoint to resume from: give a new "
                         "folder, or remove that one");
}

// A report path that is one of the command's inputs is refused (exit 2) and the input stays.
static void test_output_path_that_is_an_input(void** s) {
    (void)s;
    char cfg[512], args[2048];
    snprintf(cfg, sizeof cfg, "%s/same.json", g_tmp);
    write_text(cfg, "{\"vocab_size\": 64, \"dim\": 32, \"n_layers\": 2, \"n_heads\": 2, \"hidden_dim\": 64, "
                    "\"max_position_embeddings\": 32}\n");
    snprintf(args, sizeof args, "memory --config %s --optim adamw_torch --out %s", cfg, cfg);
    expect_refused(args, "is the --config file");
    ModelConfig mc;
    assert_true(status_is_ok(model_config_from_json_file(cfg, &mc)));  // still the config
    snprintf(args, sizeof args, "check %s %s --junit %s", cfg, cfg, cfg);
    expect_refused(args, "one of the files compared");
    assert_true(status_is_ok(model_config_from_json_file(cfg, &mc)));
}

static int group_teardown(void** s) {
    (void)s;
    cli_harness_cleanup("test_safety");
    return 0;
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "test_safety")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stdout_errors_exit_nonzero),
        cmocka_unit_test(test_stream_prefetch_env),
        cmocka_unit_test(test_bench_env_refused),
        cmocka_unit_test(test_output_dir_that_is_a_file),
        cmocka_unit_test(test_report_of_empty_folder),
        cmocka_unit_test(test_stale_temps_removed_live_kept),
        cmocka_unit_test(test_resume_from_output_dir_picks_newest_complete),
        cmocka_unit_test(test_refused_run_leaves_no_folder),
        cmocka_unit_test(test_record_killed_leaves_nothing_half_made),
        cmocka_unit_test(test_memory_check_refuses_huge_config),
        cmocka_unit_test(test_memory_check_sees_ulimit_v),
        cmocka_unit_test(test_fifo_inputs_refused),
        cmocka_unit_test(test_synthetic_data_checked_before_generating),
        cmocka_unit_test(test_config_values_refused),
        cmocka_unit_test(test_output_dir_holding_a_run),
        cmocka_unit_test(test_output_path_that_is_an_input),
    };
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}

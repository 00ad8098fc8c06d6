// test_cli.c — end-to-end tests of the `trainbench` binary: bad input gives a usage message
// and exit code 2 (never a crash), `info --json` describes every registered backend, and
// `inspect` reports malformed safetensors files cleanly. Runs the binary next to this test's
// build folder (BUILD/trainbench), so the ASan build tests the ASan binary.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemm/gemm.h"
#include "core/safetensors.h"
#include "cli_harness.h"


typedef struct {
    int exit_code;   // -1 if killed by a signal
    char out[65536];  // stdout + stderr
} RunResult;

static void run_cmd(RunResult* r, const char* args) { r->exit_code = cli_run(args, true, r->out, sizeof r->out); }

static void expect_usage_error(const char* args, const char* needle) {
    RunResult r;
    run_cmd(&r, args);
    if (r.exit_code != 2 || !strstr(r.out, needle)) printf("output was:\n%s\n", r.out);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.out, needle));
}

static void test_bad_command_lines(void** s) {
    (void)s;
    expect_usage_error("", "usage: trainbench COMMAND");
    expect_usage_error("frobnicate", "unknown command 'frobnicate'");
    expect_usage_error("info --bogus", "unknown option '--bogus'");
    expect_usage_error("info --threads", "needs a value");
    expect_usage_error("info --threads abc", "--threads must be an integer");
    expect_usage_error("info --threads 0", "--threads must be an integer in [1, 1024]");
    expect_usage_error("info --threads=99999999999999999999", "--threads must be an integer");
    expect_usage_error("inspect", "missing FILE.safetensors");
    expect_usage_error("inspect a b", "expected one file");
    // `trainbench run` (what `make run` calls): bad flags exit 2 before any phase starts
    expect_usage_error("run --bogus", "unknown option '--bogus'");
    expect_usage_error("run --steps 0", "--steps must be an integer");
    expect_usage_error("run --tradeoff-seeds 0", "--tradeoff-seeds must be an integer in [1, 100]");
    expect_usage_error("run --tradeoff-steps -1", "--tradeoff-steps must be an integer in [0, 100000000]");
    expect_usage_error("run --build /nonexistent/folder", "--build: no such folder");
    expect_usage_error("run --build /", "holds no bench/trainbench-bench");
    expect_usage_error("run --train-args '--bogus 3'", "--train-args '--bogus 3' is refused");
    // a forgotten value is not taken from the next option (that would make a folder "--seed")
    expect_usage_error("train --output-dir --seed 3", "the next argument is the option --seed");
    expect_usage_error("train --train-file x.safetensors --seq-len 8", "--seq-len sets up the synthetic task");
}

static void test_help_and_version(void** s) {
    (void)s;
    RunResult r;
    run_cmd(&r, "--help");
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "info"));
    run_cmd(&r, "info --help");
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "usage: trainbench info"));
    run_cmd(&r, "--version");
    assert_int_equal(r.exit_code, 0);
}

static void test_info_json_lists_every_backend(void** s) {
    (void)s;
    RunResult r;
    run_cmd(&r, "info --json --threads 1");
    assert_int_equal(r.exit_code, 0);
    json_error_t err;
    json_t* root = json_loads(r.out, 0, &err);
    if (!root) printf("not JSON: %s\n%s\n", err.text, r.out);
    assert_non_null(root);
    assert_int_equal(json_integer_value(json_object_get(root, "threads")), 1);
    json_t* env = json_object_get(root, "environment");
    assert_non_null(json_object_get(env, "OPENBLAS_CORETYPE"));  // recorded even when unset (null)
    const char* core = getenv("OPENBLAS_CORETYPE");
    if (core) assert_string_equal(json_string_value(json_object_get(env, "OPENBLAS_CORETYPE")), core);
    json_t* backends = json_object_get(root, "backends");
    assert_int_equal(json_array_size(backends), gemm_backend_count());
    for (size_t b = 0; b < gemm_backend_count(); b++) {
        json_t* be = json_array_get(backends, b);
        assert_string_equal(json_string_value(json_object_get(be, "name")), gemm_backend_at(b)->name);
        json_t* combos = json_object_get(be, "dtypes");
        assert_int_equal(json_array_size(combos), 5);  // f32->f32, bf16->{f32,bf16}, f16->{f32,f16}
        size_t i;
        json_t* c;
        json_array_foreach(combos, i, c) {
            const char* sup = json_string_value(json_object_get(c, "support"));
            assert_true(!strcmp(sup, "native") || !strcmp(sup, "emulated") || !strcmp(sup, "unsupported"));
            if (strcmp(sup, "native") != 0)  // anything not native says why
                assert_true(strlen(json_string_value(json_object_get(c, "why"))) > 0);
        }
    }
    json_decref(root);
}

static void write_bytes(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void test_inspect_valid_and_malformed(void** s) {
    (void)s;
    char good[512], bad[512], args[1200];
    snprintf(good, sizeof good, "%s/good.safetensors", g_tmp);
    StWriter* w = st_writer_new();
    float x[6] = {1, 2, 3, 4, 5, -6};
    int64_t shape[2] = {2, 3};
    st_writer_add(w, "weight", DTYPE_F32, 2, shape, x);
    st_writer_meta(w, "case", "demo");
    assert_true(status_is_ok(st_writer_save(w, good)));
    st_writer_free(w);
    RunResult r;
    snprintf(args, sizeof args, "inspect %s", good);
    run_cmd(&r, args);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "weight"));
    assert_non_null(strstr(r.out, "(2, 3)"));

    // Malformed files: each must give exit 2 and a message naming the file and the problem.
    struct { const char* what; const char* bytes; size_t n; const char* needle; } cases[] = {
        {"short", "abc", 3, "too short"},
        {"huge header length", "\xff\xff\xff\xff\x00\x00\x00\x00{}", 10, "header"},
        {"bad json", "\x05\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13, "JSON"},
        {"truncated data", NULL, 0, "truncated"},  // built below: header says 16 bytes, file has 2
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(bad, sizeof bad, "%s/bad%zu.safetensors", g_tmp, i);
        if (cases[i].bytes) {
            write_bytes(bad, cases[i].bytes, cases[i].n);
        } else {
            const char* json = "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
            uint8_t buf[256] = {0};
            uint64_t hl = strlen(json);
            memcpy(buf, &hl, 8);  // little-endian host (the reader requires it too)
            memcpy(buf + 8, json, hl);
            buf[8 + hl] = 1;
            buf[9 + hl] = 2;
            write_bytes(bad, buf, 8 + hl + 2);
        }
        snprintf(args, sizeof args, "inspect %s", bad);
        run_cmd(&r, args);
        printf("  (%s) %s", cases[i].what, r.out);
        assert_int_equal(r.exit_code, 2);
        assert_non_null(strstr(r.out, bad));
        assert_non_null(strstr(r.out, cases[i].needle));
        assert_null(strstr(r.out, "AddressSanitizer"));
        assert_null(strstr(r.out, "runtime error"));
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "cli") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_command_lines),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_info_json_lists_every_backend),
        cmocka_unit_test(test_inspect_valid_and_malformed),
    };
    int rc = cmocka_run_group_tests_name("cli", tests, NULL, NULL);
    cli_harness_cleanup("cli");
    return rc;
}

// test_train.c — end-to-end tests of `trainbench train` on the tiny preset: results.json is
// complete and valid; resuming from a checkpoint continues bit for bit (every parameter and
// optimizer-state tensor, and every per-step loss, equal to an uninterrupted run) for each
// optimizer; fp16 with a huge initial loss scale skips steps and backs the scale off;
// fp16-noscale counts underflowing gradient values that fp16 with loss scaling does not lose;
// a non-finite fp32 loss stops the run with exit 1 and valid results; bad input exits 2.
// Runs BUILD/trainbench (the binary next to this test's build folder).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "optim/optim.h"
#include "core/safetensors.h"
#include "cli_harness.h"


static int run(const char* args, char* out, size_t out_len) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s train --no-progress %s 2>&1", g_bin, args);
    FILE* p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, out_len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    printf("$ trainbench train %s  -> exit %d\n", args, rc);
    return rc;
}

static json_t* load_results(const char* dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/results.json", dir);
    json_error_t err;
    json_t* j = json_load_file(path, 0, &err);
    if (!j) printf("%s: %s\n", path, err.text);
    assert_non_null(j);
    return j;
}

static char g_out[1 << 16];

static void test_run_writes_complete_results(void** s) {
    (void)s;
    char dir[512], args[1024];
    snprintf(dir, sizeof dir, "%s/basic", g_tmp);
    snprintf(args, sizeof args, "--max-steps 12 --logging-steps 4 --eval-steps 6 --learning-rate 1e-3 --output-dir %s", dir);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "{'loss': "));
    assert_non_null(strstr(g_out, "'eval_accuracy': "));
    json_t* j = load_results(dir);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "completed");
    json_t* recs = json_object_get(j, "records");
    assert_int_equal(json_array_size(recs), 12);
    for (size_t i = 0; i < 12; i++) {
        json_t* r = json_array_get(recs, i);
        assert_int_equal(json_integer_value(json_object_get(r, "step")), (json_int_t)i + 1);
        assert_true(json_is_number(json_object_get(r, "loss")));
        assert_true(json_number_value(json_object_get(r, "step_time_s")) > 0);
        assert_true(json_integer_value(json_object_get(r, "tokens")) > 0);
    }
    assert_int_equal(json_array_size(json_object_get(j, "evals")), 2);  // steps 6 and 12
    json_t* sum = json_object_get(j, "summary");
    assert_true(json_number_value(json_object_get(sum, "tokens_per_s")) > 0);
    assert_true(json_integer_value(json_object_get(sum, "optimizer_state_bytes")) ==
                json_integer_value(json_object_get(sum, "optimizer_state_estimate_bytes")));
    json_decref(j);
}

// Every tensor of two checkpoints equal bit for bit.
static void assert_checkpoints_equal(const char* a, const char* b) {
    SafeTensors sa, sb;
    assert_true(status_is_ok(st_read(a, &sa)));
    assert_true(status_is_ok(st_read(b, &sb)));
    assert_int_equal(sa.n_tensors, sb.n_tensors);
    size_t n_optim = 0;
    for (size_t i = 0; i < sa.n_tensors; i++) {
        const StTensor* ta = &sa.tensors[i];
        const StTensor* tb = st_find(&sb, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->nbytes, tb->nbytes);
        if (memcmp(ta->data, tb->data, ta->nbytes) != 0) printf("differs: %s\n", ta->name);
        assert_memory_equal(ta->data, tb->data, ta->nbytes);
        n_optim += strncmp(ta->name, "optim.", 6) == 0;
    }
    assert_true(n_optim > 0);  // optimizer state is in the checkpoint
    assert_string_equal(st_meta(&sa, "scaler_scale"), st_meta(&sb, "scaler_scale"));
    st_free(&sa);
    st_free(&sb);
}

static void check_resume(const char* optim, const char* precision) {
    char a[512], b[512], args[2048], ca[600], cb[600];
    snprintf(a, sizeof a, "%s/full-%s-%s", g_tmp, optim, precision);
    snprintf(b, sizeof b, "%s/resumed-%s-%s", g_tmp, optim, precision);
    const char* common = "--max-steps 16 --save-steps 8 --learning-rate 1e-3 --weight-decay 0.01 --init-scale 16777216 --growth-interval 3";
    snprintf(args, sizeof args, "%s --optim %s --precision %s --output-dir %s", common, optim, precision, a);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "%s --optim %s --precision %s --output-dir %s --resume-from-checkpoint %s/checkpoint-8",
             common, optim, precision, b, a);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "Resuming from"));
    snprintf(ca, sizeof ca, "%s/checkpoint-16/checkpoint.safetensors", a);
    snprintf(cb, sizeof cb, "%s/checkpoint-16/checkpoint.safetensors", b);
    assert_checkpoints_equal(ca, cb);
    json_t* ja = load_results(a);
    json_t* jb = load_results(b);
    json_t* ra = json_object_get(ja, "records");
    json_t* rb = json_object_get(jb, "records");
    assert_int_equal(json_array_size(ra), 16);
    assert_int_equal(json_array_size(rb), 16);
    for (size_t i = 0; i < 16; i++) {
        json_t* x = json_array_get(ra, i);
        json_t* y = json_array_get(rb, i);
        assert_true(json_equal(json_object_get(x, "loss"), json_object_get(y, "loss")));
        assert_true(json_equal(json_object_get(x, "loss_scale"), json_object_get(y, "loss_scale")));
        assert_true(json_equal(json_object_get(x, "skipped"), json_object_get(y, "skipped")));
    }
    printf("resume %s/%s: checkpoint-16 and all 16 losses identical\n", optim, precision);
    json_decref(ja);
    json_decref(jb);
}

static void test_resume_is_bit_identical(void** s) {
    (void)s;
    for (size_t i = 0; i < optim_count(); i++) check_resume(optim_at(i)->name, "fp32");
    check_resume("adamw_torch", "fp16");  // GradScaler state travels too
}

static void test_fp16_scaler_skips_and_backs_off(void** s) {
    (void)s;
    char dir[512], args[1024];
    snprintf(dir, sizeof dir, "%s/fp16", g_tmp);
    snprintf(args, sizeof args, "--fp16 --max-steps 12 --learning-rate 1e-3 --init-scale 1e30 --output-dir %s", dir);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    json_t* j = load_results(dir);
    json_t* recs = json_object_get(j, "records");
    int skipped = 0;
    double prev = INFINITY;
    for (size_t i = 0; i < json_array_size(recs); i++) {
        json_t* r = json_array_get(recs, i);
        double scale = json_number_value(json_object_get(r, "loss_scale"));
        bool sk = json_is_true(json_object_get(r, "skipped"));
        if (sk) skipped++;
        assert_true(scale <= prev);  // with interval 2000 the scale only backs off here
        prev = scale;
        if (i + 1 < json_array_size(recs) && sk)  // a skipped step halves the next step's scale
            assert_true(json_number_value(json_object_get(json_array_get(recs, i + 1), "loss_scale")) == scale * 0.5);
    }
    printf("fp16 with init scale 1e30: %d of 12 steps skipped, final scale %g\n", skipped, prev);
    assert_true(skipped >= 1);
    json_decref(j);
}

static void test_fp16_noscale_underflows(void** s) {
    (void)s;
    char d1[512], d2[512], args[1024];
    snprintf(d1, sizeof d1, "%s/noscale", g_tmp);
    snprintf(d2, sizeof d2, "%s/scaled", g_tmp);
    snprintf(args, sizeof args, "--precision fp16-noscale --max-steps 4 --output-dir %s", d1);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "--precision fp16 --max-steps 4 --output-dir %s", d2);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    json_t* j1 = load_results(d1);
    json_t* j2 = load_results(d2);
    json_int_t u1 = 0, u2 = 0;
    for (size_t i = 0; i < 4; i++) {
        u1 += json_integer_value(json_object_get(json_array_get(json_object_get(j1, "records"), i), "grad_underflow"));
        u2 += json_integer_value(json_object_get(json_array_get(json_object_get(j2, "records"), i), "grad_underflow"));
    }
    printf("gradient values underflowed in 4 steps: fp16-noscale %lld, fp16 with loss scaling %lld\n", (long long)u1,
           (long long)u2);
    assert_true(u1 > 0);
    assert_true(u2 < u1);
    json_decref(j1);
    json_decref(j2);
}

static void test_nonfinite_loss_stops_with_valid_results(void** s) {
    (void)s;
    char dir[512], args[1024];
    snprintf(dir, sizeof dir, "%s/nan", g_tmp);
    snprintf(args, sizeof args, "--max-steps 30 --learning-rate 3e38 --output-dir %s", dir);
    assert_int_equal(run(args, g_out, sizeof g_out), 1);
    assert_non_null(strstr(g_out, "non-finite loss"));
    json_t* j = load_results(dir);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "non-finite loss");
    assert_true(json_array_size(json_object_get(j, "records")) < 30);
    json_decref(j);
}

static void expect_exit2(const char* args, const char* needle) {
    int rc = run(args, g_out, sizeof g_out);
    if (rc != 2 || !strstr(g_out, needle)) printf("output:\n%s\n", g_out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(g_out, needle));
}

static void test_bad_input(void** s) {
    (void)s;
    char args[1024];
    expect_exit2("--precision fp8", "--precision: unknown mode 'fp8'");
    expect_exit2("--fp16 --bf16", "conflicts");
    expect_exit2("--optim sgd", "--optim: unknown optimizer 'sgd'");
    expect_exit2("--model huge", "--model: unknown model 'huge'");
    expect_exit2("--backend onednn --fp16", "cannot run --precision fp16");
    expect_exit2("--learning-rate -1", "--learning-rate must be > 0");
    expect_exit2("--learning-rate abc", "--learning-rate must be a finite number");
    expect_exit2("--max-steps 0", "--max-steps must be an integer");
    expect_exit2("--seq-len 999", "exceeds the model's max_position_embeddings");
    expect_exit2("--frobnicate", "unknown option '--frobnicate'");
    snprintf(args, sizeof args, "--output-dir %s/x --resume-from-checkpoint %s/does-not-exist", g_tmp, g_tmp);
    expect_exit2(args, "--resume-from-checkpoint");
    // a checkpoint of another run's configuration is refused, naming the field
    snprintf(args, sizeof args, "--optim adafactor --max-steps 16 --output-dir %s/y --resume-from-checkpoint "
                                "%s/full-adamw_torch-fp32/checkpoint-8", g_tmp, g_tmp);
    expect_exit2(args, "optim");
}

// Copies checkpoint folder `src` to `dst` with metadata `key` set to `value` (tensors as they are).
static void write_crafted_checkpoint(const char* src, const char* dst, const char* key, const char* value) {
    char in[1024], out[1024];
    snprintf(in, sizeof in, "%s/checkpoint.safetensors", src);
    snprintf(out, sizeof out, "%s/checkpoint.safetensors", dst);
    assert_true(status_is_ok(make_dirs(dst)));
    SafeTensors st;
    assert_true(status_is_ok(st_read(in, &st)));
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (size_t i = 0; i < st.n_meta; i++)
        st_writer_meta(w, st.meta_keys[i], strcmp(st.meta_keys[i], key) ? st.meta_values[i] : value);
    assert_true(status_is_ok(st_writer_save(w, out)));
    st_writer_free(w);
    st_free(&st);
}

// Every number read from a checkpoint is checked before it is used; each crafted field is
// refused with exit 2 naming the file and the field (a negative step used to read out of
// bounds in dataset_gather; a NaN loss scale was accepted).
static void test_crafted_checkpoints_refused(void** s) {
    (void)s;
    static const struct { const char* precision; const char* key; const char* value; } CASES[] = {
        {"fp32", "step", "-3"},
        {"fp32", "step", "99999999999999"},
        {"fp32", "optimizer_step", "-1"},
        {"fp32", "optimizer_step", "7"},
        {"fp32", "scaler_skipped", "9"},
        {"fp32", "scaler_scale", "2"},
        {"fp16", "scaler_scale", "nan"},
        {"fp16", "scaler_scale", "-inf"},
        {"fp16", "scaler_scale", "0x1p+16junk"},
        {"fp16", "scaler_growth_tracker", "-1"},
        {"fp16", "scaler_growth_tracker", "3"},  // --growth-interval 3
        {"fp32", "records", "{\"records\": [], \"evals\": []}"},
        {"fp32", "records", "{\"records\": 5, \"evals\": []}"},
    };
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        char src[512], dst[512], args[2048], needle[256];
        snprintf(src, sizeof src, "%s/full-adamw_torch-%s/checkpoint-8", g_tmp, CASES[k].precision);
        snprintf(dst, sizeof dst, "%s/crafted-%zu/checkpoint-8", g_tmp, k);
        write_crafted_checkpoint(src, dst, CASES[k].key, CASES[k].value);
        snprintf(args, sizeof args, "--max-steps 16 --save-steps 8 --learning-rate 1e-3 --weight-decay 0.01 "
                 "--init-scale 16777216 --growth-interval 3 --optim adamw_torch --precision %s "
                 "--output-dir %s/crafted-out-%zu --resume-from-checkpoint %s", CASES[k].precision, g_tmp, k, dst);
        snprintf(needle, sizeof needle, "%s", !strcmp(CASES[k].key, "records") ? "field records" : CASES[k].key);
        expect_exit2(args, needle);
        assert_non_null(strstr(g_out, "crafted-"));  // the file is named
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "train") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_writes_complete_results),
        cmocka_unit_test(test_resume_is_bit_identical),
        cmocka_unit_test(test_fp16_scaler_skips_and_backs_off),
        cmocka_unit_test(test_fp16_noscale_underflows),
        cmocka_unit_test(test_nonfinite_loss_stops_with_valid_results),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_crafted_checkpoints_refused),
    };
    int rc = cmocka_run_group_tests_name("train", tests, NULL, NULL);
    cli_harness_cleanup("train");
    return rc;
}

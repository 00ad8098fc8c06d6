// test_train.c — end-to-end tests of `trainbench train` on the tiny preset: results.json is
// complete and valid (its phases leave out the warm-up step, recorded apart); resuming from a checkpoint continues bit for bit (every parameter and
// optimizer-state tensor, and every per-step loss, equal to an uninterrupted run) for each
// optimizer; fp16 with a huge initial loss scale skips steps and backs the scale off;
// fp16-noscale counts underflowing gradient values that fp16 with loss scaling does not lose;
// a non-finite fp32 loss stops the run with exit 1 and valid results; bad input exits 2;
// `--init-from` a save_pretrained-style folder + `--train-file` + `--data-order sequential`
// with the Trainer's policies reproduces PyTorch's trajectory (trainer_fp32 golden) through the
// CLI, and the checkpoint's model.safetensors holds torch's final parameters under their names;
// `--gradient-accumulation-steps 4` follows the accum_fp32/accum_fp16 goldens the same way and
// resumes bit for bit at an optimizer-step boundary.
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

#include "gemm/gemm.h"
#include "optim/optim.h"
#include "core/safetensors.h"
#include "checkpoint_compare.h"
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

static char g_out[1 << 16];

static void test_run_writes_complete_results(void** s) {
    (void)s;
    char dir[512], args[1024];
    snprintf(dir, sizeof dir, "%s/basic", g_tmp);
    snprintf(args, sizeof args, "--max-steps 12 --logging-steps 4 --eval-steps 6 --learning-rate 1e-3 --profile "
             "--output-dir %s", dir);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "{'loss': "));
    assert_non_null(strstr(g_out, "'eval_accuracy': "));
    // --profile: the steady steps, the warm-up step named apart
    assert_non_null(strstr(g_out, "where the step goes (11 steps"));
    assert_non_null(strstr(g_out, "(not counted: this process's first step, its warm-up, "));
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
    // summary.phases: steps 2..12; step 1, the warm-up, apart with its own recorded time
    json_t* ph = json_object_get(sum, "phases");
    assert_int_equal(json_integer_value(json_object_get(ph, "steps")), 11);
    assert_int_equal(json_integer_value(json_object_get(ph, "warmup_steps")), 1);
    assert_true(json_number_value(json_object_get(ph, "warmup_step_time_s")) ==
                json_number_value(json_object_get(json_array_get(recs, 0), "step_time_s")));
    double later = 0;
    for (size_t i = 1; i < 12; i++) later += json_number_value(json_object_get(json_array_get(recs, i), "step_time_s"));
    const double step_sum = json_number_value(json_object_get(ph, "step_time_sum_s"));
    assert_true(fabs(step_sum - later) <= 1e-12 * later);
    // each step's phases partition part of its measured time (batch loading is outside them)
    const double phase_sum = json_number_value(json_object_get(ph, "phase_sum_s"));
    assert_true(phase_sum > 0 && phase_sum <= step_sum);
    json_decref(j);

    // a single step is counted: there is no later step to show instead
    snprintf(dir, sizeof dir, "%s/one-step", g_tmp);
    snprintf(args, sizeof args, "--max-steps 1 --output-dir %s", dir);
    rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    j = load_results(dir);
    ph = json_object_get(json_object_get(j, "summary"), "phases");
    assert_int_equal(json_integer_value(json_object_get(ph, "steps")), 1);
    assert_int_equal(json_integer_value(json_object_get(ph, "warmup_steps")), 0);
    json_decref(j);
}

// Every tensor of two checkpoints equal bit for bit, and the GradScaler's scale.
static void assert_checkpoints_equal(const char* a, const char* b) {
    static const char* const META[] = {"scaler_scale"};
    assert_checkpoint_files_equal(a, b, META, ARRAY_LEN(META));
}

// The runs in directories a and b recorded n steps each, with the same loss, loss scale and
// skip flag at every step (results.json "records")
// results.json's records[k].loss
static double record_loss(json_t* results, size_t k) {
    return json_number_value(json_object_get(json_array_get(json_object_get(results, "records"), k), "loss"));
}

static void assert_same_losses(const char* a, const char* b, size_t n) {
    json_t* ja = load_results(a);
    json_t* jb = load_results(b);
    json_t* ra = json_object_get(ja, "records");
    json_t* rb = json_object_get(jb, "records");
    assert_int_equal(json_array_size(ra), n);
    assert_int_equal(json_array_size(rb), n);
    for (size_t i = 0; i < n; i++) {
        json_t* x = json_array_get(ra, i);
        json_t* y = json_array_get(rb, i);
        assert_true(json_equal(json_object_get(x, "loss"), json_object_get(y, "loss")));
        assert_true(json_equal(json_object_get(x, "loss_scale"), json_object_get(y, "loss_scale")));
        assert_true(json_equal(json_object_get(x, "skipped"), json_object_get(y, "skipped")));
    }
    json_decref(ja);
    json_decref(jb);
}

// The resume runs' settings (the crafted-checkpoint tests resume their checkpoints with them):
// 100 training examples, so that an epoch is 12 batches of 8 and a short one of 4 and the run
// resumed at step 8 crosses the epoch boundary (step 13's short batch, the next epoch's
// reshuffle at step 14) after its restart; 64 evaluation examples (the evaluation is not compared).
#define RESUME_DATA "--task paraphrase --num-train-examples 100 --num-eval-examples 64"
#define RESUME_COMMON "--max-steps 16 --save-steps 8 --learning-rate 1e-3 --weight-decay 0.01 --init-scale 16777216 " \
                      "--growth-interval 3 " RESUME_DATA

static void check_resume(const char* optim, const char* precision) {
    char a[512], b[512], args[2048], ca[600], cb[600];
    snprintf(a, sizeof a, "%s/full-%s-%s", g_tmp, optim, precision);
    snprintf(b, sizeof b, "%s/resumed-%s-%s", g_tmp, optim, precision);
    const char* common = RESUME_COMMON;
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
    assert_same_losses(a, b, 16);
    printf("resume %s/%s: checkpoint-16 and all 16 losses identical\n", optim, precision);
}

static void test_resume_is_bit_identical(void** s) {
    (void)s;
    for (size_t i = 0; i < optim_count(); i++) check_resume(optim_at(i)->name, "fp32");
    check_resume("adamw_torch", "fp16");  // GradScaler state travels too
}

// results.json's config.backend of the run in DIR, into out
static void config_backend(const char* dir, char* out, size_t cap) {
    json_t* r = load_results(dir);
    const char* b = json_string_value(json_object_get(json_object_get(r, "config"), "backend"));
    assert_non_null(b);
    snprintf(out, cap, "%s", b);
    json_decref(r);
}

// --backend auto (the default): onednn where oneDNN reports the precision's GEMMs native (with
// low and fp32 outputs), else openblas; resuming, the checkpoint's backend, so that a bf16 run
// started on openblas continues there bit for bit (the same losses as the uninterrupted run)
// instead of being refused for another backend.
static void test_backend_auto(void** s) {
    (void)s;
    const GemmBackend* onednn = gemm_find("onednn");
    char why[256];
    const bool native_bf16 = onednn && onednn->supports(DTYPE_BF16, DTYPE_BF16, why, sizeof why) == GEMM_NATIVE &&
                             onednn->supports(DTYPE_BF16, DTYPE_F32, why, sizeof why) == GEMM_NATIVE;
    const bool native_f32 = onednn && onednn->supports(DTYPE_F32, DTYPE_F32, why, sizeof why) == GEMM_NATIVE;
    const char* lib = gemm_find("openblas") ? "openblas" : "naive";
    char dir[512], args[2048], got[64];
    snprintf(dir, sizeof dir, "%s/auto-bf16", g_tmp);
    snprintf(args, sizeof args, "--model tiny --bf16 --max-steps 2 --output-dir %s", dir);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    config_backend(dir, got, sizeof got);
    printf("bf16 with the default backend: %s (oneDNN native bf16 here: %s)\n", got, native_bf16 ? "yes" : "no");
    assert_string_equal(got, native_bf16 ? "onednn" : lib);
    assert_non_null(strstr(g_out, "(auto: "));
    snprintf(dir, sizeof dir, "%s/auto-fp32", g_tmp);
    snprintf(args, sizeof args, "--model tiny --max-steps 2 --output-dir %s", dir);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    config_backend(dir, got, sizeof got);
    printf("fp32 with the default backend: %s\n", got);
    assert_string_equal(got, native_f32 ? "onednn" : lib);
    if (!gemm_find("openblas")) return;
    char full[512], part[512], resumed[512];
    snprintf(full, sizeof full, "%s/auto-ob-full", g_tmp);
    snprintf(part, sizeof part, "%s/auto-ob-part", g_tmp);
    snprintf(resumed, sizeof resumed, "%s/auto-ob-resumed", g_tmp);
    snprintf(args, sizeof args, "--model tiny --bf16 --backend openblas --max-steps 4 --output-dir %s", full);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "--model tiny --bf16 --backend openblas --max-steps 4 --save-steps 2 --output-dir %s",
             part);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "--model tiny --bf16 --max-steps 4 --resume-from-checkpoint %s/checkpoint-2 --output-dir %s",
             part, resumed);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "backend = openblas (auto: the checkpoint's)"));
    config_backend(resumed, got, sizeof got);
    assert_string_equal(got, "openblas");
    assert_same_losses(full, resumed, 4);
}

// A checkpoint written before --gradient-accumulation-steps and dropout existed has neither
// key in its config; it continues bit for bit in a run with accumulation 1 and no dropout (what
// it was made with), and a run with dropout is refused naming the key.
static void test_resume_checkpoint_from_before_new_settings(void** s) {
    (void)s;
    char a[512], old[512], b[512], args[2048], src[700], dst[700], cmd[2048];
    snprintf(a, sizeof a, "%s/prenew-full", g_tmp);
    snprintf(old, sizeof old, "%s/prenew-old", g_tmp);
    snprintf(b, sizeof b, "%s/prenew-resumed", g_tmp);
    const char* common = "--max-steps 8 --save-steps 4 --learning-rate 1e-3";
    snprintf(args, sizeof args, "%s --output-dir %s", common, a);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    // the old format: the same checkpoint folder, its config metadata without the two keys
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s/checkpoint-4' '%s/'", old, a, old);
    assert_int_equal(system(cmd), 0);
    snprintf(src, sizeof src, "%s/checkpoint-4/checkpoint.safetensors", a);
    snprintf(dst, sizeof dst, "%s/checkpoint-4/checkpoint.safetensors", old);
    SafeTensors st;
    assert_true(status_is_ok(st_read(src, &st)));
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (size_t i = 0; i < st.n_meta; i++) {
        if (strcmp(st.meta_keys[i], "config") != 0) {
            st_writer_meta(w, st.meta_keys[i], st.meta_values[i]);
            continue;
        }
        json_t* cfg = json_loads(st.meta_values[i], 0, NULL);
        assert_non_null(cfg);
        assert_int_equal(json_object_del(cfg, "gradient_accumulation_steps"), 0);
        assert_int_equal(json_object_del(cfg, "dropout"), 0);
        char* text = json_dumps(cfg, JSON_COMPACT);
        st_writer_meta(w, "config", text);
        free(text);
        json_decref(cfg);
    }
    assert_true(status_is_ok(st_writer_save(w, dst)));
    st_writer_free(w);
    st_free(&st);
    snprintf(args, sizeof args, "%s --output-dir %s --resume-from-checkpoint %s/checkpoint-4", common, b, old);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    snprintf(src, sizeof src, "%s/checkpoint-8/checkpoint.safetensors", a);
    snprintf(dst, sizeof dst, "%s/checkpoint-8/checkpoint.safetensors", b);
    assert_checkpoints_equal(src, dst);
    snprintf(args, sizeof args, "%s --dropout 0.1 --output-dir %s-dropout --resume-from-checkpoint %s/checkpoint-4", common,
             b, old);
    assert_int_equal(run(args, g_out, sizeof g_out), 2);
    assert_non_null(strstr(g_out, "dropout"));
    snprintf(args, sizeof args, "%s --gradient-accumulation-steps 2 --output-dir %s-accum --resume-from-checkpoint "
             "%s/checkpoint-4", common, b, old);
    assert_int_equal(run(args, g_out, sizeof g_out), 2);
    assert_non_null(strstr(g_out, "gradient_accumulation_steps"));
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

static void expect_exit2(const char* args, const char* needle);

// Writes `dst` with the golden's tensors named `prefix`<name>, renamed to <name> (reshaped from
// (S, B, ...) to (S*B, ...) when flatten).
static void write_renamed(const SafeTensors* g, const char* prefix, const char* dst, bool flatten) {
    StWriter* w = st_writer_new();
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < g->n_tensors; i++) {
        const StTensor* t = &g->tensors[i];
        if (strncmp(t->name, prefix, pl) != 0) continue;
        int64_t shape[ST_MAX_NDIM];
        int nd = t->ndim;
        memcpy(shape, t->shape, sizeof shape);
        if (flatten) {
            shape[0] = t->shape[0] * t->shape[1];
            for (int d = 1; d + 1 < t->ndim; d++) shape[d] = t->shape[d + 1];
            nd = t->ndim - 1;
        }
        st_writer_add(w, t->name + pl, t->dtype, nd, shape, t->data);
    }
    assert_true(status_is_ok(st_writer_save(w, dst)));
    st_writer_free(w);
}

#define TINY_CONFIG_JSON                                                                                    \
    "{\"activation\": \"gelu\", \"architectures\": [\"DistilBertForSequenceClassification\"], "              \
    "\"attention_dropout\": 0.0, \"bos_token_id\": null, \"dim\": 32, \"dropout\": 0.0, \"dtype\": \"float32\", " \
    "\"eos_token_id\": null, \"hidden_dim\": 64, \"id2label\": {\"0\": \"LABEL_0\", \"1\": \"LABEL_1\"}, "       \
    "\"initializer_range\": 0.02, \"label2id\": {\"LABEL_0\": 0, \"LABEL_1\": 1}, "                            \
    "\"max_position_embeddings\": 32, \"model_type\": \"distilbert\", \"n_heads\": 2, \"n_layers\": 2, "        \
    "\"pad_token_id\": 0, \"qa_dropout\": 0.1, \"seq_classif_dropout\": 0.0, \"sinusoidal_pos_embds\": false, "  \
    "\"tie_word_embeddings\": true, \"transformers_version\": \"5.24.0\", \"vocab_size\": 64}\n"

static void write_text(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

// The golden's initial weights as a save_pretrained folder (model.safetensors + the config.json
// transformers 5.24 writes for the tiny shape, dropouts set to 0), its 20 batches as one
// 80-row train file read in order: the CLI must then follow torch's trajectory within
// test_trajectory's fp32 tolerances (loss 1e-6 per step, final params 2e-5, grad norm 1e-5
// relative), with the lr of every step identical.
static void test_init_from_reproduces_torch_trajectory(void** s) {
    (void)s;
    SafeTensors g;
    assert_true(status_is_ok(st_read("reference/golden/model/trainer_fp32.safetensors", &g)));
    char dir[512], path[700], data[600], out[600], args[4096];
    snprintf(dir, sizeof dir, "%s/hf-init", g_tmp);
    assert_true(status_is_ok(make_dirs(dir)));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_renamed(&g, "param.", path, false);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, TINY_CONFIG_JSON);
    snprintf(data, sizeof data, "%s/train-data.safetensors", g_tmp);
    write_renamed(&g, "input.", data, true);
    snprintf(out, sizeof out, "%s/init-from", g_tmp);
    snprintf(args, sizeof args,
             "--init-from %s --train-file %s --data-order sequential --per-device-train-batch-size 4 --max-steps 20 "
             "--learning-rate 1e-3 --weight-decay 0.01 --warmup-steps 4 --max-grad-norm 0.3 --logging-steps 1 "
             "--save-steps 10 --backend naive --threads 1 --output-dir %s", dir, data, out);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "data order = sequential"));
    json_t* j = load_results(out);
    json_t* recs = json_object_get(j, "records");
    assert_int_equal(json_array_size(recs), 20);
    const StTensor* e_loss = st_find(&g, "expect.loss");
    const StTensor* e_lr = st_find(&g, "expect.lr");
    const StTensor* e_norm = st_find(&g, "expect.clip_total_norm");
    assert_true(e_loss && e_lr && e_norm);
    double worst_loss = 0, worst_norm = 0;
    for (size_t i = 0; i < 20; i++) {
        json_t* r = json_array_get(recs, i);
        double loss = json_number_value(json_object_get(r, "loss"));
        double lr = json_number_value(json_object_get(r, "learning_rate"));
        double gn = json_number_value(json_object_get(r, "grad_norm"));
        double want_loss = ((const float*)e_loss->data)[i], want_norm = ((const float*)e_norm->data)[i];
        worst_loss = fmax(worst_loss, fabs(loss - want_loss));
        worst_norm = fmax(worst_norm, fabs(gn - want_norm) / want_norm);
        assert_true(lr == ((const double*)e_lr->data)[i]);
    }
    json_decref(j);
    snprintf(path, sizeof path, "%s/checkpoint-20/model.safetensors", out);
    SafeTensors m;
    assert_true(status_is_ok(st_read(path, &m)));
    double worst_param = 0;
    size_t n_final = 0;
    for (size_t i = 0; i < g.n_tensors; i++) {
        const StTensor* e = &g.tensors[i];
        if (strncmp(e->name, "expect.final.param.", 19) != 0) continue;
        const StTensor* t = st_find(&m, e->name + 19);
        assert_non_null(t);
        assert_int_equal(t->numel, e->numel);
        for (size_t k = 0; k < e->numel; k++)
            worst_param = fmax(worst_param, fabs((double)((const float*)t->data)[k] - ((const float*)e->data)[k]));
        n_final++;
    }
    assert_int_equal(m.n_tensors, n_final);  // transformers' names only, nothing else
    // a run started with --init-from resumes from its checkpoint (without --init-from) bit for bit
    char out2[700], p2[800];
    snprintf(out2, sizeof out2, "%s-resumed", out);
    snprintf(args, sizeof args,
             "--config %s/config.json --train-file %s --data-order sequential --per-device-train-batch-size 4 "
             "--max-steps 20 --learning-rate 1e-3 --weight-decay 0.01 --warmup-steps 4 --max-grad-norm 0.3 "
             "--logging-steps 1 --save-steps 10 --backend naive --threads 1 --output-dir %s "
             "--resume-from-checkpoint %s/checkpoint-10", dir, data, out2, out);
    rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    snprintf(p2, sizeof p2, "%s/checkpoint-20/model.safetensors", out2);
    SafeTensors m2;
    assert_true(status_is_ok(st_read(p2, &m2)));
    for (size_t i = 0; i < m.n_tensors; i++) {
        const StTensor* t2 = st_find(&m2, m.tensors[i].name);
        assert_non_null(t2);
        assert_memory_equal(m.tensors[i].data, t2->data, m.tensors[i].nbytes);
    }
    st_free(&m2);
    printf("--init-from + sequential + Trainer policies vs torch (trainer_fp32): max |loss diff| %.3g, grad_norm "
           "max rel diff %.3g, final params max |diff| %.3g, lr identical 20/20\n", worst_loss, worst_norm, worst_param);
    assert_true(worst_loss <= 1e-6);
    assert_true(worst_norm <= 1e-5);
    assert_true(worst_param <= 2e-5);
    st_free(&m);

    // refusals, each naming what is wrong
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad-config", g_tmp);
    assert_true(status_is_ok(make_dirs(bad)));
    snprintf(path, sizeof path, "%s/config.json", bad);
    write_text(path, "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                     "\"max_position_embeddings\":32,\"dropout\":1.5}");
    snprintf(args, sizeof args, "--init-from %s --max-steps 1 --output-dir %s/o1", bad, g_tmp);
    expect_exit2(args, "dropout must be a number in [0, 1] (a dropout probability)");
    static const struct { const char* key; const char* value; const char* needle; } REFUSED[] = {
        {"activation", "\"prelu\"", "activation \"prelu\" is not implemented: it must be one of gelu, relu, silu, swish, gelu_pytorch_tanh, gelu_new, quick_gelu, gelu_fast, linear, sigmoid, tanh, relu6, leaky_relu, relu2, gelu_10, gelu_accurate, gelu_python_tanh, gelu_python, laplace, hardswish, mish, sqrtsoftplus (transformers' other ACT2FN names are not)"},
        {"activation", "1", "activation (a JSON value that is not a string) is not implemented: it must be one of gelu, relu"},
        {"pad_token_id", "64", "pad_token_id must be null or an integer in [-vocab_size, vocab_size) = [-64, 64)"},
        {"pad_token_id", "-65", "pad_token_id must be null or an integer in"},
        {"initializer_range", "0", "initializer_range must be a finite number > 0"},
        {"initializer_range", "\"0.02\"", "initializer_range must be a finite number > 0"},
        {"seq_classif_dropout", "-0.2", "seq_classif_dropout must be a number in [0, 1]"},
        {"attention_dropout", "\"0.1\"", "attention_dropout must be a number in [0, 1]"},
        {"problem_type", "\"regression\"", "problem_type \"regression\" needs num_labels 1 (got 2)"},
        {"problem_type", "\"multi_label_classification\"", "\"multi_label_classification\" needs float multi-hot labels"},
        {"problem_type", "3", "problem_type must be null, \"single_label_classification\""},
    };
    for (size_t k = 0; k < sizeof REFUSED / sizeof REFUSED[0]; k++) {
        char text[512];
        snprintf(text, sizeof text, "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                 "\"max_position_embeddings\":32,\"%s\":%s}", REFUSED[k].key, REFUSED[k].value);
        snprintf(path, sizeof path, "%s/refused-%zu.json", g_tmp, k);
        write_text(path, text);
        snprintf(args, sizeof args, "--config %s --max-steps 1 --output-dir %s/o2", path, g_tmp);
        expect_exit2(args, REFUSED[k].needle);
    }
    // a file of another shape: the tensor and both shapes are named
    snprintf(args, sizeof args, "--init-from %s/model.safetensors --model small --max-steps 1 --output-dir %s/o3", dir,
             g_tmp);
    expect_exit2(args, "tensor 'distilbert.embeddings.word_embeddings.weight' has shape (64, 32), this model's "
                       "parameter is (1024, 128)");
    // a file with an extra tensor (our own checkpoint format: param./optim. prefixes)
    snprintf(args, sizeof args, "--init-from %s/checkpoint-20/checkpoint.safetensors --max-steps 1 --output-dir %s/o4",
             out, g_tmp);
    expect_exit2(args, "unexpected tensor '");
    // a folder without config.json and no --model/--config
    snprintf(args, sizeof args, "--init-from %s --max-steps 1 --output-dir %s/o5", g_tmp, g_tmp);
    expect_exit2(args, "has no readable config.json");
    // a missing tensor, and one of another dtype: named, with what is allowed
    {
        StWriter* w = st_writer_new();
        StWriter* w2 = st_writer_new();
        for (size_t i = 0; i < g.n_tensors; i++) {
            const StTensor* t = &g.tensors[i];
            if (strncmp(t->name, "param.", 6) != 0) continue;
            if (strcmp(t->name, "param.classifier.bias") != 0) st_writer_add(w, t->name + 6, t->dtype, t->ndim, t->shape, t->data);
            if (strcmp(t->name, "param.pre_classifier.bias") != 0)
                st_writer_add(w2, t->name + 6, t->dtype, t->ndim, t->shape, t->data);
        }
        int64_t b[32] = {0};
        int64_t shape[1] = {32};
        st_writer_add(w2, "pre_classifier.bias", DTYPE_I64, 1, shape, b);
        snprintf(path, sizeof path, "%s/missing.safetensors", g_tmp);
        assert_true(status_is_ok(st_writer_save(w, path)));
        snprintf(args, sizeof args, "--init-from %s --max-steps 1 --output-dir %s/o6", path, g_tmp);
        expect_exit2(args, "missing tensor 'classifier.bias' (2)");
        snprintf(path, sizeof path, "%s/i64.safetensors", g_tmp);
        assert_true(status_is_ok(st_writer_save(w2, path)));
        snprintf(args, sizeof args, "--init-from %s --max-steps 1 --output-dir %s/o7", path, g_tmp);
        expect_exit2(args, "tensor 'pre_classifier.bias' has dtype I64 (allowed: F32, BF16, F16)");
        st_writer_free(w);
        st_writer_free(w2);
    }
    // refused runs leave no output folder behind
    for (int k = 1; k <= 7; k++) {
        snprintf(path, sizeof path, "%s/o%d", g_tmp, k);
        assert_false(path_is_dir(path));
    }
    st_free(&g);
}

// --gradient-accumulation-steps 4 through the CLI against the accum_<mode> goldens (the plain
// PyTorch loop, 40 micro-batches of 4, loss / 4, the Trainer's policies): the golden's weights
// as a save_pretrained folder and its 40 batches as one train file read in order, so optimizer
// step s takes rows (4s+k)*4 .. of micro-batch k. Per optimizer step: the logged loss (mean over
// the 4 micro-batches), the lr (identical), grad_norm of the accumulated gradient, loss scale and
// skipped flag; final parameters from checkpoint-10/model.safetensors. Tolerances are
// test_trajectory's for the mode. Then resuming from checkpoint-5 ends bit-identical, and a
// resume with another accumulation setting is refused naming it.
static void check_accum_golden(const char* mode, double loss_tol, double norm_rtol, double param_tol) {
    char gpath[256], dir[512], path[700], data[600], out[600], args[4096];
    snprintf(gpath, sizeof gpath, "reference/golden/model/accum_%s.safetensors", mode);
    SafeTensors g;
    assert_true(status_is_ok(st_read(gpath, &g)));
    assert_string_equal(st_meta(&g, "gradient_accumulation_steps"), "4");
    snprintf(dir, sizeof dir, "%s/accum-init-%s", g_tmp, mode);
    assert_true(status_is_ok(make_dirs(dir)));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_renamed(&g, "param.", path, false);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, TINY_CONFIG_JSON);
    snprintf(data, sizeof data, "%s/accum-data-%s.safetensors", g_tmp, mode);
    write_renamed(&g, "input.", data, true);
    const bool fp16 = !strcmp(mode, "fp16");
    char common[2048];
    snprintf(common, sizeof common,
             "--config %s/config.json --train-file %s --data-order sequential --per-device-train-batch-size 4 "
             "--gradient-accumulation-steps 4 --max-steps 10 --learning-rate 1e-3 --weight-decay 0.01 "
             "--warmup-steps 2 --max-grad-norm 0.15 --logging-steps 1 --save-steps 5 --backend naive --threads 1 %s",
             dir, data, fp16 ? "--fp16 --init-scale 16777216 --growth-interval 4" : "");
    snprintf(out, sizeof out, "%s/accum-%s", g_tmp, mode);
    snprintf(args, sizeof args, "%s --init-from %s --output-dir %s", common, dir, out);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "gradient accumulation steps = 4 (16 examples per optimizer step)"));
    json_t* j = load_results(out);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "config"), "gradient_accumulation_steps")), 4);
    json_t* recs = json_object_get(j, "records");
    assert_int_equal(json_array_size(recs), 10);
    const StTensor* e_loss = st_find(&g, "expect.loss");
    const StTensor* e_lr = st_find(&g, "expect.lr");
    const StTensor* e_norm = st_find(&g, "expect.clip_total_norm");
    const StTensor* e_scale = st_find(&g, "expect.scale");
    const StTensor* e_skip = st_find(&g, "expect.skipped");
    assert_true(e_loss && e_lr && e_norm && e_scale && e_skip && e_loss->numel == 10);
    double worst_loss = 0, worst_norm = 0;
    int n_skipped = 0;
    for (size_t i = 0; i < 10; i++) {
        json_t* r = json_array_get(recs, i);
        double loss = json_number_value(json_object_get(r, "loss"));
        double want_norm = ((const float*)e_norm->data)[i];
        bool skipped = json_is_true(json_object_get(r, "skipped"));
        worst_loss = fmax(worst_loss, fabs(loss - ((const float*)e_loss->data)[i]));
        if (isfinite(want_norm))
            worst_norm = fmax(worst_norm, fabs(json_number_value(json_object_get(r, "grad_norm")) - want_norm) / want_norm);
        else
            assert_true(json_is_null(json_object_get(r, "grad_norm")));  // inf/NaN: not a finite number
        assert_true(json_number_value(json_object_get(r, "learning_rate")) == ((const double*)e_lr->data)[i]);
        assert_true(json_number_value(json_object_get(r, "loss_scale")) == ((const float*)e_scale->data)[i]);
        assert_int_equal(skipped, ((const uint8_t*)e_skip->data)[i] != 0);
        assert_int_equal(json_integer_value(json_object_get(r, "tokens")), 4 * 4 * 16);  // 4 micro-batches of 4x16
        n_skipped += skipped;
    }
    json_decref(j);
    snprintf(path, sizeof path, "%s/checkpoint-10/model.safetensors", out);
    SafeTensors m;
    assert_true(status_is_ok(st_read(path, &m)));
    double worst_param = 0;
    for (size_t i = 0; i < g.n_tensors; i++) {
        const StTensor* e = &g.tensors[i];
        if (strncmp(e->name, "expect.final.param.", 19) != 0) continue;
        const StTensor* t = st_find(&m, e->name + 19);
        assert_non_null(t);
        for (size_t k = 0; k < e->numel; k++)
            worst_param = fmax(worst_param, fabs((double)((const float*)t->data)[k] - ((const float*)e->data)[k]));
    }
    st_free(&m);
    printf("--gradient-accumulation-steps 4 vs torch (accum_%s): max |loss diff| %.3g (tol %.3g), grad_norm max rel "
           "diff %.3g (tol %.3g), final params max |diff| %.3g (tol %.3g), lr and loss scale identical 10/10, "
           "%d skipped as torch\n", mode, worst_loss, loss_tol, worst_norm, norm_rtol, worst_param, param_tol, n_skipped);
    assert_true(worst_loss <= loss_tol);
    assert_true(worst_norm <= norm_rtol);
    assert_true(worst_param <= param_tol);
    // resume at the optimizer-step boundary 5: the whole checkpoint-10 bit for bit
    char out2[700], ca[800], cb[800];
    snprintf(out2, sizeof out2, "%s-resumed", out);
    snprintf(args, sizeof args, "%s --output-dir %s --resume-from-checkpoint %s/checkpoint-5", common, out2, out);
    rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    snprintf(ca, sizeof ca, "%s/checkpoint-10/checkpoint.safetensors", out);
    snprintf(cb, sizeof cb, "%s/checkpoint-10/checkpoint.safetensors", out2);
    assert_checkpoints_equal(ca, cb);
    // the accumulation setting is part of what a checkpoint must match
    snprintf(args, sizeof args, "%s --gradient-accumulation-steps 2 --output-dir %s-2 --resume-from-checkpoint "
             "%s/checkpoint-5", common, out, out);
    expect_exit2(args, "gradient_accumulation_steps=4, this run has gradient_accumulation_steps=2");
    st_free(&g);
}

static void test_gradient_accumulation_matches_torch(void** s) {
    (void)s;
    check_accum_golden("fp32", 1e-6, 1e-5, 2e-5);
    check_accum_golden("fp16", 1e-4, 2e-3, 2e-3);
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
    // the optimizer's own rule, in its library's words (transformers' Adafactor takes any lr: below)
    expect_exit2("--learning-rate -1", "--optim adamw_torch with --learning-rate -1 --weight-decay 0");
    assert_non_null(strstr(g_out, "Invalid learning rate"));
    expect_exit2("--optim adafactor_torch --weight-decay -0.5", "weight_decay must be >= 0 (got -0.5)");
    expect_exit2("--optim adamw_bnb_8bit --learning-rate -1e-3", "--learning-rate -0.001");
    expect_exit2("--learning-rate abc", "--learning-rate must be a finite number");
    expect_exit2("--max-steps 0", "--max-steps must be an integer");
    expect_exit2("--seq-len 999", "exceeds the model's max_position_embeddings");
    expect_exit2("--frobnicate", "unknown option '--frobnicate'");
    expect_exit2("--data-order random", "--data-order: unknown order 'random' (allowed: shuffled, sequential)");
    expect_exit2("--lr-scheduler-type cosine_with_min_lr", "--lr-scheduler-type: unknown schedule 'cosine_with_min_lr' "
                 "(allowed: linear, constant, cosine, cosine_with_restarts, polynomial, constant_with_warmup, inverse_sqrt)");
    expect_exit2("--lr-scheduler-type polynomial --max-steps 4 --warmup-steps 4",
                 "--lr-scheduler-type polynomial: polynomial needs more --max-steps than warmup steps");
    expect_exit2("--lr-scheduler-type polynomial --learning-rate 1e-7", "needs a larger --learning-rate");
    expect_exit2("--warmup-steps 2 --warmup-ratio 0.1", "not both");
    expect_exit2("--warmup-ratio 1.5", "--warmup-ratio must be in [0, 1)");
    expect_exit2("--lr-scheduler-type constant --warmup-steps 3", "constant has no warmup");
    expect_exit2("--gradient-accumulation-steps 0", "--gradient-accumulation-steps must be an integer in [1, 4096]");
    expect_exit2("--dropout 1.5", "--dropout must be a probability in [0, 1] (got 1.5)");
    expect_exit2("--attention-dropout -0.1", "--attention-dropout must be a probability in [0, 1]");
    snprintf(args, sizeof args, "--dump-dropout-masks %s/m --output-dir %s/z", g_tmp, g_tmp);
    expect_exit2(args, "--dump-dropout-masks: this run has no dropout");
    {  // a mask folder that cannot be made: refused before any output folder exists
        char file[600];
        snprintf(file, sizeof file, "%s/not-a-folder", g_tmp);
        write_text(file, "x");
        snprintf(args, sizeof args, "--dropout 0.1 --dump-dropout-masks %s/m --output-dir %s/z2", file, g_tmp);
        expect_exit2(args, "--dump-dropout-masks: ");
        snprintf(file, sizeof file, "%s/z2", g_tmp);
        assert_int_equal(access(file, F_OK), -1);
    }
    snprintf(args, sizeof args, "--output-dir %s/x --resume-from-checkpoint %s/does-not-exist", g_tmp, g_tmp);
    expect_exit2(args, "--resume-from-checkpoint");
    // a checkpoint of another run's configuration is refused, naming the field
    snprintf(args, sizeof args, RESUME_COMMON " --optim adafactor --output-dir %s/y --resume-from-checkpoint "
                                "%s/full-adamw_torch-fp32/checkpoint-8", g_tmp, g_tmp);
    expect_exit2(args, "optim");
}

// --learning-rate, --weight-decay and --max-grad-norm take what the Trainer and the optimizer's
// library take (TrainingArguments checks none of them): lr 0 for torch's AdamW (0 <= lr), whose weights then never move (p * (1 - 0 *
// wd) + (-0) * update == p: 2 and 4 steps end on the same parameter tensors, while the moments
// change), and a negative lr and weight decay for transformers' Adafactor, whose constructor
// checks neither (model-level agreement with transformers on them: reference/validate_model.py).
static void test_values_the_trainer_takes(void** s) {
    (void)s;
    char args[1024], ca[600], cb[600];
    const char* c = "--learning-rate 0 --weight-decay 0.01 --num-train-examples 64 --num-eval-examples 8";
    snprintf(args, sizeof args, "%s --max-steps 2 --save-steps 2 --output-dir %s/lr0-2", c, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "%s --max-steps 4 --save-steps 4 --output-dir %s/lr0-4", c, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(ca, sizeof ca, "%s/lr0-2/checkpoint-2/checkpoint.safetensors", g_tmp);
    snprintf(cb, sizeof cb, "%s/lr0-4/checkpoint-4/checkpoint.safetensors", g_tmp);
    SafeTensors sa, sb;
    assert_true(status_is_ok(st_read(ca, &sa)));
    assert_true(status_is_ok(st_read(cb, &sb)));
    size_t n_param = 0, n_moved = 0;
    for (size_t i = 0; i < sa.n_tensors; i++) {
        const StTensor* ta = &sa.tensors[i];
        const StTensor* tb = st_find(&sb, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->nbytes, tb->nbytes);
        const bool same = memcmp(ta->data, tb->data, ta->nbytes) == 0;
        if (strncmp(ta->name, "param.", 6) == 0) {
            if (!same) printf("moved with lr 0: %s\n", ta->name);
            assert_true(same);
            n_param++;
        } else {
            n_moved += !same;  // exp_avg, exp_avg_sq and step go on
        }
    }
    printf("lr 0: %zu parameter tensors unchanged from step 2 to 4, %zu optimizer tensors moved\n", n_param, n_moved);
    assert_true(n_param > 0 && n_moved > 0);
    st_free(&sa);
    st_free(&sb);
    snprintf(args, sizeof args, "--optim adafactor --learning-rate -1e-3 --weight-decay -0.1 --max-steps 2 "
             "--num-train-examples 64 --num-eval-examples 8 --output-dir %s/adafactor-negative", g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "%s/adafactor-negative", g_tmp);
    json_t* r = load_results(args);
    const double lr = json_number_value(json_object_get(json_array_get(json_object_get(r, "records"), 0), "learning_rate"));
    printf("adafactor, --learning-rate -1e-3: step 1's learning_rate %g\n", lr);
    assert_true(lr < 0);
    json_decref(r);
    // --max-grad-norm below 0 is the Trainer's no clipping (`max_grad_norm > 0` decides): the same
    // run as 0, its norm logged
    const char* nc = "--max-steps 3 --logging-steps 1 --learning-rate 1e-3 --num-train-examples 64 --num-eval-examples 8";
    snprintf(args, sizeof args, "%s --max-grad-norm -1 --output-dir %s/clip-neg", nc, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "'grad_norm': "));
    snprintf(args, sizeof args, "%s --max-grad-norm 0 --output-dir %s/clip-0", nc, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(ca, sizeof ca, "%s/clip-neg", g_tmp);
    snprintf(cb, sizeof cb, "%s/clip-0", g_tmp);
    assert_same_losses(ca, cb, 3);
    // adamw_torch_fused in fp16 without clipping at a scale that is not a power of two: the
    // Trainer unscales before the step either way (see train.c), so the run equals one whose
    // clipping never bites (coefficient clamped to 1)
    const char* fz = "--optim adamw_torch_fused --fp16 --init-scale 3000 --max-steps 3 --save-steps 3 --learning-rate 1e-3 "
                     "--num-train-examples 64 --num-eval-examples 8";
    snprintf(args, sizeof args, "%s --max-grad-norm 0 --output-dir %s/fused-noclip", fz, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "%s --max-grad-norm 1e30 --output-dir %s/fused-clip", fz, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(ca, sizeof ca, "%s/fused-noclip/checkpoint-3/checkpoint.safetensors", g_tmp);
    snprintf(cb, sizeof cb, "%s/fused-clip/checkpoint-3/checkpoint.safetensors", g_tmp);
    assert_checkpoints_equal(ca, cb);
    // --warmup-steps as transformers 5.x's float warmup_steps (get_warmup_steps): from 1 int() of
    // it, below 1 a ratio, ceil(max_steps * x); results.json records the resolved count
    static const struct {
        const char* flag;
        long steps;
    } WARMUP[] = {{"--warmup-steps 2.7", 2}, {"--warmup-steps 0.3", 2}, {"--warmup-steps 1.0", 1}, {"--warmup-ratio 0.3", 2}};
    for (size_t k = 0; k < ARRAY_LEN(WARMUP); k++) {
        snprintf(args, sizeof args, "--max-steps 4 --num-train-examples 64 --num-eval-examples 8 %s --output-dir %s/warmup-%zu",
                 WARMUP[k].flag, g_tmp, k);
        assert_int_equal(run(args, g_out, sizeof g_out), 0);
        snprintf(ca, sizeof ca, "%s/warmup-%zu", g_tmp, k);
        json_t* wr = load_results(ca);
        const long got = (long)json_integer_value(json_object_get(json_object_get(wr, "config"), "warmup_steps"));
        printf("%s with --max-steps 4: %ld warmup steps\n", WARMUP[k].flag, got);
        assert_int_equal(got, WARMUP[k].steps);
        json_decref(wr);
    }
    expect_exit2("--warmup-steps -1", "--warmup-steps must be in [0, 100000000]");
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
        snprintf(args, sizeof args, RESUME_COMMON " --optim adamw_torch --precision %s "
                 "--output-dir %s/crafted-out-%zu --resume-from-checkpoint %s", CASES[k].precision, g_tmp, k, dst);
        snprintf(needle, sizeof needle, "%s", !strcmp(CASES[k].key, "records") ? "field records" : CASES[k].key);
        expect_exit2(args, needle);
        assert_non_null(strstr(g_out, "crafted-"));  // the file is named
    }
}

// Files a and b have the same bytes.
static void assert_files_equal(const char* a, const char* b) {
    uint8_t *da, *db;
    size_t na, nb;
    assert_true(status_is_ok(read_file(a, &da, &na)));
    assert_true(status_is_ok(read_file(b, &db, &nb)));
    if (na != nb || memcmp(da, db, na) != 0) printf("FAIL %s and %s differ\n", a, b);
    assert_true(na == nb && memcmp(da, db, na) == 0);
    free(da);
    free(db);
}

// Dropout as users train: a config.json's dropouts are used and stated (start-up line,
// results.json, the checkpoint's config.json); the masks of each optimizer step do not depend on
// gradient accumulation (1 x 8 and 2 x 4 examples give the same --dump-dropout-masks files,
// byte for byte: keyed by step and example, dropout.h); --dropout overrides; a config.json
// without dropout keys gets DistilBertConfig's defaults.
// num_labels 1 (problem_type null or "regression"): transformers' regression, MSELoss on the one
// logit (test_model_golden's grads_regression_* check the values against transformers): the
// synthetic task's 0/1 labels are its targets; eval_loss alone (accuracy and F1 null in
// results.json); the config records problem_type; a resumed run repeats the uninterrupted one.
static void test_regression(void** s) {
    (void)s;
    char cfg[512], a[512], b[512], args[2400];
    snprintf(cfg, sizeof cfg, "%s/regression.json", g_tmp);
    write_text(cfg, "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                    "\"max_position_embeddings\":32,\"num_labels\":1,\"problem_type\":null}");
    snprintf(a, sizeof a, "%s/regression-full", g_tmp);
    snprintf(b, sizeof b, "%s/regression-resumed", g_tmp);
    const char* common = "--max-steps 8 --save-steps 4 --eval-steps 4 --learning-rate 1e-3 --precision fp16 "
                         "--init-scale 65536 --num-eval-examples 24";
    snprintf(args, sizeof args, "--config %s %s --output-dir %s", cfg, common, a);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "{'eval_loss': "));
    assert_null(strstr(g_out, "eval_accuracy"));
    json_t* r = load_results(a);
    json_t* mc = json_object_get(json_object_get(r, "config"), "model_config");
    assert_string_equal(json_string_value(json_object_get(mc, "problem_type")), "regression");
    assert_int_equal(json_integer_value(json_object_get(mc, "num_labels")), 1);
    json_t* evals = json_object_get(r, "evals");
    assert_int_equal(json_array_size(evals), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t* e = json_array_get(evals, i);
        assert_true(json_is_number(json_object_get(e, "eval_loss")));
        assert_true(json_is_null(json_object_get(e, "eval_accuracy")));
        assert_true(json_is_null(json_object_get(e, "eval_f1")));
    }
    json_decref(r);
    snprintf(args, sizeof args, "--config %s %s --output-dir %s --resume-from-checkpoint %s/checkpoint-4", cfg, common,
             b, a);
    rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_same_losses(a, b, 8);
    // the checkpoint's config.json names the problem (transformers' from_pretrained then trains
    // the same loss), and --init-from reads it back as a regression
    char ck[700];
    snprintf(ck, sizeof ck, "%s/checkpoint-8/config.json", a);
    json_t* hf = json_load_file(ck, 0, NULL);
    assert_non_null(hf);
    assert_string_equal(json_string_value(json_object_get(hf, "problem_type")), "regression");
    json_decref(hf);
    snprintf(args, sizeof args, "--init-from %s/checkpoint-8 --max-steps 1 --output-dir %s/regression-init", a, g_tmp);
    rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "{'eval_loss': "));
    assert_null(strstr(g_out, "eval_accuracy"));
    // single_label_classification named with one label is a one-class cross-entropy, not a regression
    write_text(cfg, "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                    "\"max_position_embeddings\":32,\"num_labels\":1,\"problem_type\":\"single_label_classification\"}");
    snprintf(args, sizeof args, "--config %s --max-steps 1 --output-dir %s/one-class", cfg, g_tmp);
    expect_exit2(args, "n_labels must be 2..");  // the synthetic task has two classes
}

// --adam-beta1/--adam-beta2/--adam-epsilon reach the AdamW optimizers as the Trainer's adam_kwargs
// (their arithmetic at other betas and eps is the optimizer goldens'; reference/validate_model.py
// runs them against transformers end to end): the defaults written out change nothing, other
// values change the run and are recorded, Adafactor ignores them as the Trainer does, and torch's
// own refusals name the flag.
static void test_adam_flags(void** s) {
    (void)s;
    const char* common = "--max-steps 3 --learning-rate 1e-3 --num-eval-examples 8";
    char a[512], b[512], c[512], args[2400];
    snprintf(a, sizeof a, "%s/adam-default", g_tmp);
    snprintf(b, sizeof b, "%s/adam-explicit", g_tmp);
    snprintf(c, sizeof c, "%s/adam-other", g_tmp);
    snprintf(args, sizeof args, "%s --output-dir %s", common, a);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "%s --adam-beta1 0.9 --adam-beta2 0.999 --adam-epsilon 1e-8 --output-dir %s", common, b);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    assert_same_losses(a, b, 3);
    json_t* r = load_results(b);
    assert_null(json_object_get(json_object_get(r, "config"), "adam"));  // defaults: the config as before
    json_decref(r);
    snprintf(args, sizeof args, "%s --adam-beta2 0.9 --adam-epsilon 1e-3 --output-dir %s", common, c);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    json_t* ra = load_results(a);
    r = load_results(c);
    json_t* adam = json_object_get(json_object_get(r, "config"), "adam");
    assert_non_null(adam);
    assert_true(json_real_value(json_object_get(adam, "beta2")) == 0.9);
    assert_true(json_real_value(json_object_get(adam, "epsilon")) == 1e-3);
    const double la = record_loss(ra, 2), lc = record_loss(r, 2);
    printf("step-3 loss: defaults %.9g, beta2 0.9 eps 1e-3 %.9g\n", la, lc);
    assert_true(la != lc);
    json_decref(ra);
    json_decref(r);
    snprintf(args, sizeof args, "%s --optim adafactor --output-dir %s/adafactor-plain", common, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "%s --optim adafactor --adam-beta2 0.5 --output-dir %s/adafactor-adam", common, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(a, sizeof a, "%s/adafactor-plain", g_tmp);
    snprintf(b, sizeof b, "%s/adafactor-adam", g_tmp);
    assert_same_losses(a, b, 3);
    expect_exit2("--adam-beta1 1 --max-steps 1", "--adam-beta1 1 --adam-beta2 0.999 --adam-epsilon 1e-08: beta1 (betas[0]) "
                 "must be in [0, 1) (got 1)");
    expect_exit2("--optim adamw_bnb_8bit --adam-epsilon -1 --max-steps 1", "eps must be >= 0");
}

// --label-smoothing-factor: the Trainer's LabelSmoother (its values: test_model_golden's
// grads_label_smoothing_* against transformers; validate_model.py end to end): recorded in the
// config, it changes the loss, and what is not implemented is refused by name.
static void test_label_smoothing_flag(void** s) {
    (void)s;
    char a[512], b[512], args[2400];
    snprintf(a, sizeof a, "%s/ls-off", g_tmp);
    snprintf(b, sizeof b, "%s/ls-on", g_tmp);
    snprintf(args, sizeof args, "--max-steps 2 --num-eval-examples 8 --output-dir %s", a);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "--max-steps 2 --num-eval-examples 8 --label-smoothing-factor 0.2 --output-dir %s", b);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    json_t* ra = load_results(a);
    json_t* rb = load_results(b);
    assert_null(json_object_get(json_object_get(ra, "config"), "label_smoothing_factor"));
    assert_true(json_real_value(json_object_get(json_object_get(rb, "config"), "label_smoothing_factor")) == 0.2);
    const double la = record_loss(ra, 0), lb = record_loss(rb, 0);
    printf("step-1 loss without / with label smoothing 0.2: %.9g / %.9g\n", la, lb);
    assert_true(la != lb);
    json_decref(ra);
    json_decref(rb);
    snprintf(args, sizeof args, "--max-steps 2 --num-eval-examples 8 --label-smoothing-factor 0.2 --bf16 --output-dir "
             "%s/ls-bf16", g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);  // every precision (its bits: the goldens)
    // any factor != 0 smooths, as the Trainer's `label_smoothing_factor != 0` (model-level agreement
    // with transformers at 1, 1.5, -0.2 and -0.3 in bf16: reference/validate_model.py): both run
    // and train on different losses (at 1 the smoother's mean -log p over all labels alone)
    const char* lsa = "--max-steps 2 --num-eval-examples 8 --num-train-examples 64 --logging-steps 1";
    double first[2];
    const char* eps[2] = {"1", "-0.5"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "%s --label-smoothing-factor %s --output-dir %s/ls-wide-%d", lsa, eps[k], g_tmp, k);
        assert_int_equal(run(args, g_out, sizeof g_out), 0);
        char dir[600];
        snprintf(dir, sizeof dir, "%s/ls-wide-%d", g_tmp, k);
        json_t* rr = load_results(dir);
        first[k] = record_loss(rr, 0);
        json_decref(rr);
    }
    printf("step-1 loss: factor 1 %.9g, factor -0.5 %.9g\n", first[0], first[1]);
    assert_true(isfinite(first[0]) && isfinite(first[1]) && first[0] != first[1]);
    expect_exit2("--label-smoothing-factor 0.1 --gradient-accumulation-steps 2 --max-steps 1",
                 "--label-smoothing-factor with --gradient-accumulation-steps > 1 is not implemented");
}

// The Trainer's choices where they differ from the library defaults: with adamw_bnb_8bit every
// nn.Embedding weight keeps 32-bit state (trainer.py registers bitsandbytes' module override;
// small's word embeddings, 1024 x 128, would take 8-bit state by the size rule), and without
// clipping the grad norm is still logged (_get_grad_norm), as the real Trainer's runs show.
static void test_trainer_policies(void** s) {
    (void)s;
    char dir[512], args[2400], path[700];
    snprintf(dir, sizeof dir, "%s/bnb-small", g_tmp);
    snprintf(args, sizeof args, "--model small --optim adamw_bnb_8bit --max-steps 1 --save-steps 1 --max-grad-norm 0 "
             "--num-train-examples 8 --num-eval-examples 0 --output-dir %s", dir);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(path, sizeof path, "%s/checkpoint-1/checkpoint.safetensors", dir);
    SafeTensors st;
    assert_true(status_is_ok(st_read(path, &st)));
    const StTensor* e = st_find(&st, "optim.distilbert.embeddings.word_embeddings.weight.state1");
    const StTensor* q = st_find(&st, "optim.distilbert.transformer.layer.0.ffn.lin1.weight.state1");
    assert_non_null(e);
    assert_non_null(q);
    assert_int_equal(e->dtype, DTYPE_F32);  // 32-bit state
    assert_int_equal(q->dtype, DTYPE_U8);   // 8-bit codes (131,072 elements, over min_8bit_size)
    st_free(&st);
    json_t* r = load_results(dir);
    json_t* gn = json_object_get(json_array_get(json_object_get(r, "records"), 0), "grad_norm");
    assert_true(json_is_number(gn) && json_number_value(gn) > 0);  // logged without clipping
    json_decref(r);
}

static void test_dropout_from_config_and_flags(void** s) {
    (void)s;
    char cfg[512], args[2048], a[512], b[512];
    snprintf(cfg, sizeof cfg, "%s/dropout-config.json", g_tmp);
    write_text(cfg, "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                    "\"max_position_embeddings\":32,\"dropout\":0.1,\"attention_dropout\":0.15,"
                    "\"seq_classif_dropout\":0.2}");
    const char* common = "--max-steps 2 --save-steps 2 --num-train-examples 64 --num-eval-examples 8 --seed 5";
    snprintf(args, sizeof args, "--config %s %s --per-device-train-batch-size 8 --output-dir %s/drop-a "
             "--dump-dropout-masks %s/drop-a/masks", cfg, common, g_tmp, g_tmp);
    int rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "dropout = 0.1, attention_dropout = 0.15, seq_classif_dropout = 0.2 (masks keyed"));
    snprintf(a, sizeof a, "%s/drop-a", g_tmp);
    json_t* j = load_results(a);
    json_t* d = json_object_get(json_object_get(j, "config"), "dropout");
    assert_true(json_number_value(json_object_get(d, "dropout")) == 0.1);
    assert_true(json_number_value(json_object_get(d, "attention_dropout")) == 0.15);
    assert_true(json_number_value(json_object_get(d, "seq_classif_dropout")) == 0.2);
    json_decref(j);
    snprintf(a, sizeof a, "%s/drop-a/checkpoint-2/config.json", g_tmp);
    j = json_load_file(a, 0, NULL);
    assert_non_null(j);
    assert_true(json_number_value(json_object_get(j, "attention_dropout")) == 0.15);
    json_decref(j);
    snprintf(args, sizeof args, "--config %s %s --per-device-train-batch-size 4 --gradient-accumulation-steps 2 "
             "--output-dir %s/drop-b --dump-dropout-masks %s/drop-b/masks", cfg, common, g_tmp, g_tmp);
    rc = run(args, g_out, sizeof g_out);
    if (rc) printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    for (int step = 1; step <= 2; step++) {
        snprintf(a, sizeof a, "%s/drop-a/masks/masks-step-%d.safetensors", g_tmp, step);
        snprintf(b, sizeof b, "%s/drop-b/masks/masks-step-%d.safetensors", g_tmp, step);
        assert_files_equal(a, b);
    }
    // the dump's layout: one U8 tensor per site, rows = the step's 8 examples
    SafeTensors st;
    snprintf(a, sizeof a, "%s/drop-a/masks/masks-step-2.safetensors", g_tmp);
    assert_true(status_is_ok(st_read(a, &st)));
    const StTensor* t = st_find(&st, "distilbert.transformer.layer.1.attention.dropout");
    assert_non_null(t);
    assert_int_equal(t->dtype, DTYPE_U8);
    assert_int_equal(t->ndim, 4);
    assert_int_equal(t->shape[0], 8);
    assert_int_equal(t->shape[1], 2);
    assert_non_null(st_find(&st, "distilbert.embeddings.dropout"));
    assert_non_null(st_find(&st, "dropout"));
    assert_string_equal(st_meta(&st, "step"), "2");
    st_free(&st);
    // --dropout overrides the config's; the other two stay
    snprintf(args, sizeof args, "--config %s %s --dropout 0 --seq-classif-dropout 0.5 --output-dir %s/drop-c", cfg,
             common, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "dropout = 0, attention_dropout = 0.15, seq_classif_dropout = 0.5"));
    // no dropout keys: transformers' defaults
    snprintf(cfg, sizeof cfg, "%s/dropout-defaults.json", g_tmp);
    write_text(cfg, "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                    "\"max_position_embeddings\":32}");
    snprintf(args, sizeof args, "--config %s %s --output-dir %s/drop-d", cfg, common, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "dropout = 0.1, attention_dropout = 0.1, seq_classif_dropout = 0.2"));
    // a preset trains without dropout
    snprintf(args, sizeof args, "--model tiny %s --output-dir %s/drop-e", common, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "dropout = 0, attention_dropout = 0, seq_classif_dropout = 0 (no dropout)"));
    // resuming continues the masks (keyed by the optimizer step): bit-identical checkpoint-4 in bf16
    const char* r4 = "--model tiny --bf16 --dropout 0.1 --attention-dropout 0.1 --seq-classif-dropout 0.2 "
                     "--max-steps 4 --save-steps 2 --learning-rate 1e-3 --num-train-examples 64 --num-eval-examples 8";
    snprintf(args, sizeof args, "%s --output-dir %s/drop-full", r4, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    snprintf(args, sizeof args, "%s --output-dir %s/drop-resumed --resume-from-checkpoint %s/drop-full/checkpoint-2", r4,
             g_tmp, g_tmp);
    assert_int_equal(run(args, g_out, sizeof g_out), 0);
    assert_non_null(strstr(g_out, "Resuming from"));
    snprintf(a, sizeof a, "%s/drop-full/checkpoint-4/checkpoint.safetensors", g_tmp);
    snprintf(b, sizeof b, "%s/drop-resumed/checkpoint-4/checkpoint.safetensors", g_tmp);
    assert_checkpoints_equal(a, b);
    // a checkpoint of a dropout run is not resumed without it (the config differs by name)
    snprintf(args, sizeof args, "--model tiny --bf16 --max-steps 4 --learning-rate 1e-3 --num-train-examples 64 "
             "--num-eval-examples 8 --output-dir %s/drop-x --resume-from-checkpoint %s/drop-full/checkpoint-2", g_tmp,
             g_tmp);
    expect_exit2(args, "the checkpoint was made with dropout=");
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "train") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_writes_complete_results),
        cmocka_unit_test(test_resume_is_bit_identical),
        cmocka_unit_test(test_resume_checkpoint_from_before_new_settings),
        cmocka_unit_test(test_backend_auto),
        cmocka_unit_test(test_fp16_scaler_skips_and_backs_off),
        cmocka_unit_test(test_fp16_noscale_underflows),
        cmocka_unit_test(test_nonfinite_loss_stops_with_valid_results),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_values_the_trainer_takes),
        cmocka_unit_test(test_crafted_checkpoints_refused),
        cmocka_unit_test(test_init_from_reproduces_torch_trajectory),
        cmocka_unit_test(test_gradient_accumulation_matches_torch),
        cmocka_unit_test(test_dropout_from_config_and_flags),
        cmocka_unit_test(test_regression),
        cmocka_unit_test(test_adam_flags),
        cmocka_unit_test(test_label_smoothing_flag),
        cmocka_unit_test(test_trainer_policies),
    };
    int rc = cmocka_run_group_tests_name("train", tests, NULL, NULL);
    cli_harness_cleanup("train");
    return rc;
}

// test_memory.c — optimizer-state memory: for every registered optimizer (and, for those with
// bitsandbytes' min_8bit_size rule, also as HF Trainer configures them) on every small preset,
// the closed-formula estimate equals the bytes the optimizer really allocated after a real
// step, exactly; the distilbert-base-cased AdamW figures are the seed's (SPEC.md section 5);
// and `trainbench memory` prints them, emits valid JSON and refuses bad input with exit 2;
// `memory --ranks 4 --zero 1` gives each rank's estimate and measurement equal to SPEC.md's
// formulas split by the README's shard rule, computed here (small: every optimizer;
// distilbert-base-cased: AdamW).
// The training step's activation estimate (model/activation_memory.c): its per-layer figure for
// tiny worked out by hand, and against the workspace a real step leaves (tiny, every precision
// mode, naive backend) within the tolerance activation_memory.h states.
// Runs the binary next to this test's build folder (BUILD/trainbench), like test_cli.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <libgen.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/rng.h"
#include "model/activation_memory.h"
#include "model/amp.h"
#include "model/model.h"
#include "cli_harness.h"
#include "sanitizer_pass.h"


// Builds the table, real buffers (HF init, a synthetic N(0, 1e-3) gradient), the state for
// every tensor, and one real step; returns measured bytes and checks them against the estimate.
static size_t check_estimate_equals_measured(const ParamTable* t, const Optimizer* o, bool emb32,
                                             const float* params0, const float* grads, size_t* elems) {
    OptimConfig cfg;
    optim_defaults(o, &cfg);
    float* params = param_table_alloc_buffer(t);
    memcpy(params, params0, t->alloc_numel * sizeof(float));
    size_t estimate = model_optim_estimate_bytes(t, o, &cfg, emb32);
    ModelOptim mo;
    model_optim_init(&mo, t, o, &cfg, emb32);
    model_optim_step(&mo, t, params, grads);
    model_optim_step(&mo, t, params, grads);  // state sizes do not change after the first step
    size_t measured = model_optim_measured_bytes(&mo);
    *elems = model_optim_measured_elems(&mo);
    printf("  %-16s %-5s estimate %zu measured %zu bytes (%zu elements)\n", o->name, emb32 ? "hf" : "plain", estimate,
           measured, *elems);
    assert_int_equal(estimate, measured);
    assert_true(measured > 0);
    for (size_t i = 0; i < t->numel && i < t->alloc_numel; i++)  // the step left finite parameters
        assert_true(params[i] == params[i]);
    model_optim_free(&mo);
    free(params);
    return measured;
}

static void test_estimate_equals_measured_every_optimizer_and_preset(void** s) {
    (void)s;
    static const char* const PRESETS[] = {"tiny", "small"};
    assert_true(optim_count() >= 1);
    for (size_t p = 0; p < ARRAY_LEN(PRESETS); p++) {
        ParamTable t;
        assert_true(status_is_ok(param_table_build(model_config_find(PRESETS[p]), &t)));
        printf("%s: %zu params in %zu tensors\n", PRESETS[p], t.numel, t.n);
        float* params = param_table_alloc_buffer(&t);
        float* grads = param_table_alloc_buffer(&t);
        param_table_init_weights(&t, params, 42, 0.02f);
        param_table_fill_normal(&t, grads, 43, 0.0f, 1e-3f);
        for (size_t i = 0; i < optim_count(); i++) {
            const Optimizer* o = optim_at(i);
            size_t elems;
            size_t plain = check_estimate_equals_measured(&t, o, false, params, grads, &elems);
            size_t hf = check_estimate_equals_measured(&t, o, true, params, grads, &elems);
            OptimConfig cfg;
            optim_defaults(o, &cfg);
            // Only optimizers with the 8-bit size rule can differ between the two; keeping
            // embeddings at 32-bit state never makes the state smaller.
            if (cfg.min_8bit_size == 0) assert_int_equal(plain, hf);
            else if (t.t[0].numel >= cfg.min_8bit_size) assert_true(hf > plain);  // word embeddings
            assert_true(hf >= plain);
        }
        free(params);
        free(grads);
        param_table_free(&t);
    }
}

static void test_distilbert_base_cased_adamw_seed_figures(void** s) {
    (void)s;
    ParamTable t;
    assert_true(status_is_ok(param_table_build(model_config_find("distilbert-base-cased"), &t)));
    const Optimizer* o = optim_find("adamw_torch");
    assert_non_null(o);
    OptimConfig cfg;
    optim_defaults(o, &cfg);
    size_t estimate = model_optim_estimate_bytes(&t, o, &cfg, false);
    // SPEC.md section 5 (the seed's figures): 65,783,042 parameters; AdamW estimate 502 MB
    // (params * 8 bytes); measured state 131,566,188 elements (2 per parameter + one 0-d step
    // per tensor), 502 MB (bytes / 1024^2, rounded).
    assert_int_equal(t.numel, 65783042);
    assert_int_equal((t.numel * 8 + (1 << 19)) >> 20, 502);
    assert_int_equal(estimate, 65783042ull * 8 + 104 * 4);
    assert_int_equal((estimate + (1 << 19)) >> 20, 502);

    // One real measured run (~1 GB: params, grads, state; about a second, 30 under ASan, whose
    // paths test_estimate_equals_measured_every_optimizer_and_preset runs on smaller models).
    if (SANITIZER_PASS) {
        sanitizer_pass_note("distilbert-base-cased's measured AdamW state (estimate checked)");
        param_table_free(&t);
        return;
    }
    float* params = param_table_alloc_buffer(&t);
    float* grads = param_table_alloc_buffer(&t);
    for (size_t i = 0; i < t.alloc_numel; i++) {
        params[i] = 0.01f;
        grads[i] = (float)(i % 7) * 1e-4f - 3e-4f;
    }
    ModelOptim mo;
    model_optim_init(&mo, &t, o, &cfg, false);
    model_optim_step(&mo, &t, params, grads);
    assert_int_equal(model_optim_measured_elems(&mo), 131566188);  // SPEC.md section 5
    assert_int_equal(model_optim_measured_bytes(&mo), estimate);
    assert_int_equal((model_optim_measured_bytes(&mo) + (1 << 19)) >> 20, 502);  // SPEC.md section 5
    model_optim_free(&mo);
    free(params);
    free(grads);
    param_table_free(&t);
}

// ---- CLI ----
typedef struct {
    int exit_code;  // -1 if killed by a signal
    char out[1 << 17];
} RunResult;

static void run_cmd(RunResult* r, const char* args, bool with_stderr) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s %s", g_bin, args, with_stderr ? "2>&1" : "2>/dev/null");
    FILE* p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(r->out, 1, sizeof r->out - 1, p);
    r->out[n] = 0;
    int st = pclose(p);
    r->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    printf("$ trainbench %s  -> exit %d\n", args, r->exit_code);
}

static RunResult g_run;

static void test_cli_distilbert_adamw_report(void** s) {
    (void)s;
    RunResult* r = &g_run;
    if (SANITIZER_PASS) {  // the same report on the small preset: the seed's figures are distilbert's
        sanitizer_pass_note("the report on small instead of distilbert-base-cased (the seed's figures not checked)");
        run_cmd(r, "memory --model small --optim adamw_torch", true);
        printf("%s", r->out);
        assert_int_equal(r->exit_code, 0);
        assert_non_null(strstr(r->out, "estimate == measured"));
        assert_non_null(strstr(r->out, "activations: not counted here"));
        return;
    }
    run_cmd(r, "memory --model distilbert-base-cased --optim adamw_torch", true);
    printf("%s", r->out);
    assert_int_equal(r->exit_code, 0);
    // SPEC.md section 5: the seed's figures.
    assert_non_null(strstr(r->out, "65,783,042"));
    assert_non_null(strstr(r->out, "502 MB"));
    assert_non_null(strstr(r->out, "131,566,188"));
    assert_non_null(strstr(r->out, "estimate == measured"));
    assert_non_null(strstr(r->out, "Accelerate"));
    assert_non_null(strstr(r->out, "activations: not counted here"));
}

static void test_cli_json_every_optimizer(void** s) {
    (void)s;
    RunResult* r = &g_run;
    run_cmd(r, "memory --model tiny --json --time --threads 1", false);
    assert_int_equal(r->exit_code, 0);
    json_error_t err;
    json_t* root = json_loads(r->out, 0, &err);
    if (!root) printf("not JSON: %s\n%s\n", err.text, r->out);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "model")), "tiny");
    assert_int_equal(json_integer_value(json_object_get(root, "tensors")), 40);
    json_t* rows = json_object_get(root, "optimizers");
    size_t expect_rows = 0;
    for (size_t i = 0; i < optim_count(); i++) {
        OptimConfig cfg;
        optim_defaults(optim_at(i), &cfg);
        expect_rows += cfg.min_8bit_size ? 2 : 1;  // + "as HF Trainer configures it"
    }
    assert_int_equal(json_array_size(rows), expect_rows);
    size_t k = 0;
    for (size_t i = 0; i < optim_count(); i++) {
        json_t* row = json_array_get(rows, k);
        assert_string_equal(json_string_value(json_object_get(row, "optimizer")), optim_at(i)->name);
        k += strcmp(json_string_value(json_object_get(row, "variant")), "plain") == 0 ? 2 : 1;
    }
    size_t i;
    json_t* row;
    json_array_foreach(rows, i, row) {
        assert_true(json_is_true(json_object_get(row, "estimate_equals_measured")));
        assert_int_equal(json_integer_value(json_object_get(row, "estimate_bytes")),
                         json_integer_value(json_object_get(row, "measured_bytes")));
        assert_true(json_is_number(json_object_get(row, "step_seconds")));
        assert_true(json_is_number(json_object_get(row, "effective_gb_per_second")));
    }
    json_decref(root);

    if (SANITIZER_PASS) {
        sanitizer_pass_note("the distilbert-base-cased JSON (tiny's checked)");
        return;
    }
    run_cmd(r, "memory --model distilbert-base-cased --optim adamw_torch --json", false);
    assert_int_equal(r->exit_code, 0);
    root = json_loads(r->out, 0, &err);
    assert_non_null(root);
    assert_int_equal(json_integer_value(json_object_get(root, "parameters")), 65783042);
    row = json_array_get(json_object_get(root, "optimizers"), 0);
    assert_int_equal(json_integer_value(json_object_get(row, "measured_elements")), 131566188);  // SPEC.md 5
    assert_int_equal(json_integer_value(json_object_get(row, "measured_mb")), 502);               // SPEC.md 5
    assert_int_equal(json_integer_value(json_object_get(row, "estimate_mb")), 502);               // SPEC.md 5
    json_decref(root);
}


// One real step per precision mode on the naive backend: the workspace's high-water mark is
// within activation_memory_within of the estimate, and one (N, D) activation less or one (N, F)
// buffer more is not.
static void check_activation_estimate_vs_workspace(const ModelConfig* mc, int B, int T) {
    ParamTable t;
    assert_true(status_is_ok(param_table_build(mc, &t)));
    float* params = param_table_alloc_buffer(&t);
    float* grads = param_table_alloc_buffer(&t);
    param_table_init_weights(&t, params, 7, 0.02f);
    int64_t* ids = xcalloc((size_t)B * T, sizeof *ids);
    int32_t* labels = xcalloc((size_t)B, sizeof *labels);
    Rng r;
    rng_init(&r, 5, 0);
    for (int i = 0; i < B * T; i++) ids[i] = 1 + rng_below(&r, (uint32_t)(mc->vocab_size - 1));
    for (int b = 0; b < B; b++) labels[b] = (int32_t)rng_below(&r, (uint32_t)mc->n_labels);
    ModelBatch batch = {.input_ids = ids, .attention_mask = NULL, .labels = labels, .B = B, .T = T};
    // one OpenMP thread: attention hands heads to threads dynamically, and a thread that got no
    // head holds no head temporaries (activation_memory.h); with one the figure is deterministic
    const int threads0 = omp_get_max_threads();
    omp_set_num_threads(1);
    const size_t N = (size_t)B * T;
    for (size_t m = 0; m < amp_mode_count(); m++) {
        const PrecisionMode* mode = amp_mode_at(m);
        Gemm gemm;
        assert_true(status_is_ok(gemm_open(&gemm, &gemm_backend_naive, 1)));
        ModelWorkspace* ws;
        assert_true(status_is_ok(model_workspace_new(&t, B, T, &ws)));
        float loss;
        model_zero_grad(&t, grads);
        assert_true(status_is_ok(model_forward(ws, params, &batch, mode, &gemm, &loss, NULL)));
        assert_true(status_is_ok(model_backward(ws, params, 1.0f, &gemm, grads, NULL)));
        const size_t measured = model_workspace_bytes(ws);
        ActivationEstimate e = activation_memory_estimate(mc, B, T, mode->low, 1);
        printf("%lld layers, b%d x %d %-12s estimate %zu bytes, workspace after a step %zu (ratio %.4f)\n",
               (long long)mc->n_layers, B, T, mode->name, e.total_bytes, measured,
               (double)measured / (double)e.total_bytes);
        assert_true(activation_memory_within(&e, mc, measured));
        assert_false(activation_memory_within(&e, mc, measured - 4 * N * (size_t)mc->dim));
        assert_false(activation_memory_within(&e, mc, measured + 4 * N * (size_t)mc->hidden_dim));
        model_workspace_free(ws);
        gemm_close(&gemm);
    }
    omp_set_num_threads(threads0);
    free(ids);
    free(labels);
    free(params);
    free(grads);
    param_table_free(&t);
}

// tiny: D 32, F 64, 2 heads, 2 layers; b8 x 32: N = 256. Saved per layer, by hand:
// 4 * (8*256*32 + 2*256*64 + 8*2*32*32 + 4*256) = 4 * (65536 + 32768 + 16384 + 1024) = 462,848.
static void test_activation_estimate_vs_workspace_tiny(void** s) {
    (void)s;
    const ModelConfig* mc = model_config_find("tiny");
    assert_non_null(mc);
    ActivationEstimate e32 = activation_memory_estimate(mc, 8, 32, DTYPE_F32, 1);
    assert_int_equal(e32.saved_layer_bytes, 462848);
    assert_int_equal(e32.batch_bytes, 8 * 256 + 4 * 8 + 4 * 256);
    check_activation_estimate_vs_workspace(mc, 8, 32);
}

// tiny without its layers (n_layers 0, which transformers builds: the embeddings go straight to
// the head): no layer buffers in the workspace and none in the estimate. By hand, fp32, b8 x 32:
// activation gradients 4 * (2*256*32 + 2*8*32 + 8*2) = 67,648; transient one bias gradient 4 * 32.
static void test_activation_estimate_vs_workspace_no_layers(void** s) {
    (void)s;
    ModelConfig mc = *model_config_find("tiny");
    mc.n_layers = 0;
    assert_true(status_is_ok(model_config_validate(&mc)));
    ActivationEstimate e32 = activation_memory_estimate(&mc, 8, 32, DTYPE_F32, 1);
    assert_int_equal(e32.grad_bytes, 67648);
    assert_int_equal(e32.transient_bytes, 128);
    check_activation_estimate_vs_workspace(&mc, 8, 32);
}

static void test_cli_training_step_json(void** s) {
    (void)s;
    RunResult* r = &g_run;
    run_cmd(r, "memory --model tiny --optim adamw_torch --batch 4 --seq-len 16 --precision bf16 --threads 1 --json", false);
    assert_int_equal(r->exit_code, 0);
    json_error_t err;
    json_t* root = json_loads(r->out, 0, &err);
    if (!root) printf("not JSON: %s\n%s\n", err.text, r->out);
    assert_non_null(root);
    json_t* st = json_object_get(root, "training_step");
    assert_non_null(st);
    assert_int_equal(json_integer_value(json_object_get(st, "batch")), 4);
    assert_int_equal(json_integer_value(json_object_get(st, "seq_len")), 16);
    assert_string_equal(json_string_value(json_object_get(st, "precision")), "bf16");
    assert_true(json_is_true(json_object_get(st, "within_tolerance")));
    
    assert_true(json_integer_value(json_object_get(json_object_get(st, "estimate"), "total_bytes")) > 0);
    assert_true(json_integer_value(json_object_get(st, "measured_workspace_bytes")) > 0);
    assert_true(json_integer_value(json_object_get(st, "peak_rss_bytes")) > 0);
    json_decref(root);
}

static void expect_exit2(const char* args, const char* needle) {
    RunResult* r = &g_run;
    run_cmd(r, args, true);
    if (r->exit_code != 2 || !strstr(r->out, needle)) printf("output was:\n%s\n", r->out);
    assert_int_equal(r->exit_code, 2);
    assert_non_null(strstr(r->out, needle));
    assert_null(strstr(r->out, "AddressSanitizer"));
    assert_null(strstr(r->out, "runtime error"));
}

// SPEC.md section 5's per-tensor formulas, written out here (not the optimizers' state_bytes).
static uint64_t spec_state_bytes(const char* optim, bool hf_trainer, const ParamTensor* t) {
    const uint64_t N = t->numel;
    const bool matrix = t->shape.ndim == 2;
    const uint64_t R = matrix ? (uint64_t)t->shape.dims[0] : 0, C = matrix ? (uint64_t)t->shape.dims[1] : 0;
    // SPEC.md 5: exp_avg + exp_avg_sq fp32 and a 0-d fp32 step (the fused kernel keeps the same)
    if (!strcmp(optim, "adamw_torch") || !strcmp(optim, "adamw_torch_fused")) return 8 * N + 4;
    if (!strcmp(optim, "adafactor") || !strcmp(optim, "adafactor_torch")) return matrix ? 4 * (R + C) + 4 : 4 * N + 4;
    if (strcmp(optim, "adamw_bnb_8bit") != 0) {  // a new optimizer needs its formula here
        printf("no state formula for %s: add it to spec_state_bytes (tests/test_memory.c; README "
               "\"How to add an optimizer\", step 4)\n", optim);
        fail();
    }
    if (N < 4096 || (hf_trainer && t->is_embedding)) return 8 * N;
    return 2 * N + 8 * ((N + 255) / 256);
}

// Each rank's bytes under the README's shard rule, computed from prefix sums: rank r's run
// [start, e) ends at the first e where its bytes times the ranks left (R - r) reach the bytes
// from `start` to the end, or where only one tensor per later rank is left; plus the shared
// code maps (bitsandbytes: 2 x 256 fp32) that every rank holds.
static void spec_zero1_ranks(const ParamTable* t, const char* optim, bool hf_trainer, int R, uint64_t* out,
                             size_t* first) {
    uint64_t* prefix = calloc(t->n + 1, sizeof *prefix);
    for (size_t i = 0; i < t->n; i++) prefix[i + 1] = prefix[i] + spec_state_bytes(optim, hf_trainer, &t->t[i]);
    size_t start = 0;
    for (int r = 0; r < R; r++) {
        size_t e = start + 1;
        if (r == R - 1) e = t->n;
        else
            while (!((prefix[e] - prefix[start]) * (uint64_t)(R - r) >= prefix[t->n] - prefix[start] ||
                     t->n - e == (size_t)(R - 1 - r)))
                e++;
        out[r] = prefix[e] - prefix[start] + (!strcmp(optim, "adamw_bnb_8bit") ? 2 * 256 * 4 : 0);
        first[r] = start;
        start = e;
    }
    free(prefix);
}

// `memory --ranks R --zero 1`: every rank's estimate and measurement against the formulas above
static void check_zero1_json(const char* model, const char* optim, int R) {
    char args[256];
    snprintf(args, sizeof args, "memory --model %s --optim %s --ranks %d --zero 1 --json --threads 1", model, optim, R);
    run_cmd(&g_run, args, false);
    assert_int_equal(g_run.exit_code, 0);
    json_t* root = json_loads(g_run.out, 0, NULL);
    assert_non_null(root);
    ParamTable t;
    assert_true(status_is_ok(param_table_build(model_config_find(model), &t)));
    size_t i;
    json_t* row;
    uint64_t want[64];
    size_t first[64];
    const uint64_t n = t.alloc_numel;
    json_array_foreach(json_object_get(root, "optimizers"), i, row) {
        const char* o = json_string_value(json_object_get(row, "optimizer"));
        bool hf = !strcmp(json_string_value(json_object_get(row, "variant")), "hf_trainer");
        spec_zero1_ranks(&t, o, hf, R, want, first);
        json_t* pr = json_object_get(row, "zero1_per_rank");
        assert_int_equal(json_array_size(pr), R);
        for (int k = 0; k < R; k++) {
            json_t* e = json_array_get(pr, (size_t)k);
            printf("%s %s (%s) rank %d of %d: estimate %lld measured %lld, independent %llu\n", model, o,
                   hf ? "hf_trainer" : "plain", k, R, (long long)json_integer_value(json_object_get(e, "estimate_bytes")),
                   (long long)json_integer_value(json_object_get(e, "measured_bytes")), (unsigned long long)want[k]);
            assert_int_equal(json_integer_value(json_object_get(e, "estimate_bytes")), want[k]);
            assert_int_equal(json_integer_value(json_object_get(e, "measured_bytes")), want[k]);
            // the communication model per step: the rank's gradient chunk c = floor((k+1)n/R) -
            // floor(kn/R); it sends the others' pieces (n - c) and its chunk to R - 1 ranks, and
            // its parameter range (first tensor's offset to the next rank's) to R - 1 ranks
            const uint64_t c = (k + 1) * n / (uint64_t)R - (uint64_t)k * n / (uint64_t)R;
            const uint64_t p = (k + 1 < R ? t.t[first[k + 1]].offset : n) - t.t[first[k]].offset;
            assert_int_equal(json_integer_value(json_object_get(e, "comm_grad_bytes_per_step")),
                             4 * (n - c + c * (uint64_t)(R - 1)));
            assert_int_equal(json_integer_value(json_object_get(e, "comm_param_bytes_per_step")), 4 * p * (uint64_t)(R - 1));
        }
    }
    param_table_free(&t);
    json_decref(root);
}

static void test_cli_zero1_per_rank(void** s) {
    (void)s;
    check_zero1_json("small", "all", 4);
    if (SANITIZER_PASS)
        sanitizer_pass_note("the distilbert-base-cased ZeRO-1 check");
    else
        check_zero1_json("distilbert-base-cased", "adamw_torch", 4);
    expect_exit2("memory --model tiny --zero 1", "give --ranks R with R >= 2");
    expect_exit2("memory --model tiny --ranks 41 --zero 1", "--ranks must be in [2, 40]");
    expect_exit2("memory --model tiny --ranks 4 --machines 3", "--machines 3 must divide --ranks 4");
}

static void test_cli_bad_input_exits_2(void** s) {
    (void)s;
    char args[1200], path[600];
    expect_exit2("memory --bogus", "unknown option '--bogus'");
    expect_exit2("memory --model", "needs a value");
    expect_exit2("memory --model gpt5", "unknown model 'gpt5' (allowed: tiny, tiny-wide, small, distilbert-base-cased");
    expect_exit2("memory --optim sgd", "unknown optimizer 'sgd' (allowed: all, adamw_torch");
    expect_exit2("memory --optim=", "non-empty value");
    expect_exit2("memory --threads 0", "--threads must be an integer");
    expect_exit2("memory --model tiny --config x.json", "not both");
    expect_exit2("memory --model tiny --seq-len 33", "exceeds the model's max_position_embeddings (32)");
    expect_exit2("memory --model tiny --precision fp8", "unknown precision 'fp8' (allowed: fp32, bf16");
    expect_exit2("memory --model tiny --backend mkl", "unknown backend 'mkl' (allowed: naive");
    expect_exit2("memory --model tiny --batch 0", "--batch must be an integer");
    snprintf(path, sizeof path, "%s/nope.json", g_tmp);
    snprintf(args, sizeof args, "memory --config %s", path);
    expect_exit2(args, "nope.json");
    static const struct { const char* name; const char* text; const char* needle; } bad[] = {
        {"malformed.json", "{\"dim\": ", "not valid JSON"},
        {"unknown.json", "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                         "\"max_position_embeddings\":32,\"colour\":1}", "unknown key 'colour'"},
        {"invalid.json", "{\"vocab_size\":64,\"dim\":32,\"n_layers\":2,\"n_heads\":5,\"hidden_dim\":64,"
                         "\"max_position_embeddings\":32}", "divisible by n_heads"},
        {"zero.json", "{\"vocab_size\":0,\"dim\":32,\"n_layers\":2,\"n_heads\":2,\"hidden_dim\":64,"
                      "\"max_position_embeddings\":32}", "vocab_size must be an integer in [1,"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        snprintf(path, sizeof path, "%s/%s", g_tmp, bad[i].name);
        FILE* f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i].text, f);
        fclose(f);
        snprintf(args, sizeof args, "memory --config %s", path);
        expect_exit2(args, bad[i].needle);
    }
    // a good config file works and is named in the report
    snprintf(path, sizeof path, "%s/good.json", g_tmp);
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"vocab_size\":64,\"dim\":32,\"n_layers\":1,\"n_heads\":4,\"hidden_dim\":64,\"max_position_embeddings\":8,"
          "\"model_type\":\"distilbert\",\"dropout\":0.1}",
          f);
    fclose(f);
    snprintf(args, sizeof args, "memory --config %s --optim adamw_torch --time", path);
    run_cmd(&g_run, args, true);
    assert_int_equal(g_run.exit_code, 0);
    assert_non_null(strstr(g_run.out, "good.json"));
    assert_non_null(strstr(g_run.out, "G params/s"));
    run_cmd(&g_run, "memory --help", true);
    assert_int_equal(g_run.exit_code, 0);
    assert_non_null(strstr(g_run.out, "usage: trainbench memory"));
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "memory") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_equals_measured_every_optimizer_and_preset),
        cmocka_unit_test(test_distilbert_base_cased_adamw_seed_figures),
        cmocka_unit_test(test_cli_distilbert_adamw_report),
        cmocka_unit_test(test_cli_json_every_optimizer),
        cmocka_unit_test(test_activation_estimate_vs_workspace_tiny),
        cmocka_unit_test(test_activation_estimate_vs_workspace_no_layers),
        cmocka_unit_test(test_cli_training_step_json),
        cmocka_unit_test(test_cli_zero1_per_rank),
        cmocka_unit_test(test_cli_bad_input_exits_2),
    };
    int rc = cmocka_run_group_tests_name("memory", tests, NULL, NULL);
    cli_harness_cleanup("memory");
    return rc;
}

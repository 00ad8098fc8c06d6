// test_trajectory.c — 20 training steps of the tiny model against PyTorch's own trajectories
// (reference/golden/model/train_<mode>.safetensors, made by reference/gen_model_goldens.py with
// transformers' DistilBertForSequenceClassification, torch.optim.AdamW (for-loop) and, for
// fp16, torch.amp.GradScaler("cpu")), and trainer_<mode>.safetensors: the same with HF
// Trainer's decay groups, linear warmup schedule and clip_grad_norm_ (per-step lr and norm). Same initial weights, same 20 batches, the same
// hyperparameters; our steps run through train_step() (the function `trainbench train` uses)
// on the naive backend. Compared per step: loss, loss scale and skipped flag; and the final
// parameters. accum_<mode>: the same with 4 accumulated micro-batches per optimizer step, and the
// accumulated gradient bit-identical to separately computed micro-batch gradients added in
// order. trajectory_dropout_<mode>: 10 steps with DistilBERT's dropouts, torch fed our masks (each
// step's masks also compared with the golden's, golden_replay.h). A missing golden FAILS (it is
// not skipped).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "validate/compare.h"
#include "golden_replay.h"

typedef struct {
    const char* golden;  // reference/golden/model/<golden>.safetensors
    const char* mode;
    // loss: |ours - torch| <= loss_atol. fp32: our forward differs from torch only in the
    // summation order of reductions and GEMMs (a few fp32 ulp per activation); the loss
    // (~0.69) moves by ~1e-7 (measured 6e-8): 1e-6. Low-dtype modes round activations to
    // bf16/fp16 at the same points as torch (reference/MODEL_SEMANTICS.md); another fp32
    // accumulation order can still flip one rounding by one low-dtype ulp. The logits are
    // ~1e-2 at this init, so one flipped ulp moves a logit by <= 1e-2 * 2^-8 = 4e-5 and the
    // loss by about half that: 1e-4 allows a few such flips (measured <= 7.5e-6).
    double loss_atol;
    // final params: |ours - torch| <= param_atol. AdamW's update is ~lr per element per step
    // whatever the gradient's size, so where a gradient is ~0 a rounding difference can flip
    // the update's direction: up to ~lr per step for that element. fp32 (measured 1.4e-6):
    // 2e-5. Mixed modes (measured up to 9.1e-4, about one flipped step at lr 1e-3): 2 lr.
    double param_atol;
} ModeTol;

static const ModeTol TOLS[] = {
    {"train_fp32", "fp32", 1e-6, 2e-5},
    {"train_bf16", "bf16", 1e-4, 2e-3},
    {"train_fp16", "fp16", 1e-4, 2e-3},
    {"train_fp16-noscale", "fp16-noscale", 1e-4, 2e-3},
    // HF Trainer's policies (decay groups, linear schedule with warmup, clipping after unscale):
    // the same mode tolerances, for the same reasons
    {"trainer_fp32", "fp32", 1e-6, 2e-5},
    {"trainer_fp16", "fp16", 1e-4, 2e-3},
    // gradient accumulation (4 micro-batches per optimizer step, loss / 4) with the Trainer's
    // policies (clipping of the accumulated gradient after unscale): the same mode tolerances;
    // the loss compared is the step's mean over its micro-batches (the Trainer's tr_loss)
    {"accum_fp32", "fp32", 1e-6, 2e-5},
    {"accum_fp16", "fp16", 1e-4, 2e-3},
    // dropout 0.1 / 0.1 / 0.2 in train mode, torch fed our masks (reference/gen_dropout_goldens.py;
    // 10 steps, fp16 with GradScaler init 2^16): the same mode tolerances. Measured: loss 6.0e-8 /
    // 6.0e-8 / 1.2e-7, final params 2.0e-7 / 5.2e-6 / 6.9e-5 (fp32 / bf16 / fp16). Checked by
    // mutation: replayed without dropout, loss 7e-3..1.1e-2 and params 1.5e-2..1.7e-2 off (all
    // three fail); with the bf16 noise not rounded to bf16 (1.1111112 instead of 1.109375) the
    // bf16 final params are 3.0e-3 off (fails; the grads_dropout_* goldens catch it in every
    // low mode)
    {"trajectory_dropout_fp32", "fp32", 1e-6, 2e-5},
    {"trajectory_dropout_bf16", "bf16", 1e-4, 2e-3},
    {"trajectory_dropout_fp16", "fp16", 1e-4, 2e-3},
    // the same with batches of one sequence: torch's k_lin then receives a column-major
    // gradient (layers.h dy_col_major), which swaps the fp16 orders of its dx and dW
    {"trajectory_dropout_fp16_b1", "fp16", 1e-4, 2e-3},
};

// trainer_* goldens: the lr of every step must be torch's exactly (both are the same double
// formula of LambdaLR, stepped only after steps that were not skipped), and the total gradient
// norm clip_grad_norm_ returned must agree to CLIP_NORM_RTOL where it is finite (NaN/inf on
// skipped steps: both non-finite). Our gradients differ from torch's only by summation order
// (test_model_golden: <= 0.7 fp32 ulp of their term scale), and the norm is dominated by the
// largest elements, so one step's norm agrees to ~1e-6 in fp32; after the parameters drift
// apart over the steps (final max |diff| ~1e-7) still well below 1e-5. fp16: one flipped fp16
// rounding moves a gradient element by 2^-11 relative. Measured worst: 7.0e-7 (fp32), 8.0e-5
// (fp16, step 19, a small norm of 0.032). Without the decay groups (every tensor decayed) the
// fp32 case fails: loss 3.1e-6, final params 1.0e-4, grad_norm 1.3e-4 (checked by mutation).
#define CLIP_NORM_RTOL_FP32 1e-5
#define CLIP_NORM_RTOL_LOW 2e-3

static void run_case(const ModeTol* tol) {
    char path[512];
    snprintf(path, sizeof path, "reference/golden/model/%s.safetensors", tol->golden);
    GoldenReplay g;
    assert_true(golden_replay_open(&g, path, "naive", 1));  // naive runs every mode
    assert_string_equal(st_meta(&g.st, "mode"), tol->mode);
    const StTensor* e_loss = st_find(&g.st, "expect.loss");
    const StTensor* e_scale = st_find(&g.st, "expect.scale");
    const StTensor* e_skip = st_find(&g.st, "expect.skipped");
    assert_true(e_loss && e_scale && e_skip);
    const StTensor* e_lr = st_find(&g.st, "expect.lr");
    const StTensor* e_norm = st_find(&g.st, "expect.clip_total_norm");
    const bool trainer = !strncmp(tol->golden, "trainer_", 8) || !strncmp(tol->golden, "accum_", 6);
    if (!strncmp(tol->golden, "accum_", 6)) assert_true(g.N > 1 && e_loss->numel == (size_t)g.S);
    if (trainer) assert_true(e_lr && e_norm && e_lr->dtype == DTYPE_F64 && g.ts.schedule && g.ts.max_grad_norm > 0);
    const double norm_rtol = !strcmp(tol->mode, "fp32") ? CLIP_NORM_RTOL_FP32 : CLIP_NORM_RTOL_LOW;
    double max_loss_err = 0, max_norm_rel = 0;
    int skip_mismatch = 0, scale_mismatch = 0, lr_mismatch = 0, norm_mismatch = 0;
    for (int k = 0; k < g.S; k++) {
        TrainStepResult r;
        golden_replay_step(&g, k, &r);
        float want_loss = ((const float*)e_loss->data)[k], want_scale = ((const float*)e_scale->data)[k];
        bool want_skip = ((const uint8_t*)e_skip->data)[k] != 0;
        double err = fabs((double)r.loss - (double)want_loss);
        if (err > max_loss_err) max_loss_err = err;
        if (r.skipped != want_skip) skip_mismatch++;
        if (r.scale != want_scale) scale_mismatch++;
        bool bad = err > tol->loss_atol || r.skipped != want_skip || r.scale != want_scale;
        char extra[160] = "";
        if (trainer) {
            const double want_lr = ((const double*)e_lr->data)[k];
            const float want_norm = ((const float*)e_norm->data)[k];
            double rel = isfinite(want_norm) ? fabs((double)r.grad_norm - want_norm) / want_norm : 0;
            bool norm_ok = isfinite(want_norm) ? rel <= norm_rtol : !isfinite(r.grad_norm);
            if (isfinite(want_norm) && rel > max_norm_rel) max_norm_rel = rel;
            lr_mismatch += r.lr != want_lr;
            norm_mismatch += !norm_ok;
            bad = bad || r.lr != want_lr || !norm_ok;
            snprintf(extra, sizeof extra, "  lr %.6g torch %.6g  grad_norm %.7g torch %.7g", r.lr, want_lr,
                     (double)r.grad_norm, (double)want_norm);
        }
        printf("%s step %2d: loss %.7f torch %.7f |diff| %.2e  scale %g torch %g  skipped %d torch %d%s%s\n",
               tol->golden, k + 1, r.loss, want_loss, err, (double)r.scale, (double)want_scale, r.skipped, want_skip,
               extra, bad ? "  <-- FAIL" : "");
    }
    double max_param_err = 0;
    size_t n_params = 0, n_exact = 0;
    for (size_t i = 0; i < g.table.n; i++) {
        char name[256];
        snprintf(name, sizeof name, "expect.final.param.%s", g.table.t[i].name);
        const StTensor* t = st_find(&g.st, name);
        assert_non_null(t);
        CompareF32 c = compare_f32(g.params + g.table.t[i].offset, t->data, t->numel, tol->param_atol, 0);
        if (c.max_abs > max_param_err) max_param_err = c.max_abs;
        n_params += c.n;
        n_exact += c.n_exact;
        if (c.n_exact < c.n && getenv("TRAINBENCH_VERBOSE"))  // where the final parameters differ
            printf("  %s: %zu of %zu final values not bit-exact, max |diff| %.3g\n", g.table.t[i].name,
                   c.n - c.n_exact, c.n, c.max_abs);
    }
    printf("%s (%s): max |loss diff| %.3g (tol %.3g), skipped mismatches %d, scale mismatches %d, "
           "final params max |diff| %.3g (tol %.3g), bit-exact %.1f%%",
           tol->golden, tol->mode, max_loss_err, tol->loss_atol, skip_mismatch, scale_mismatch, max_param_err,
           tol->param_atol, 100.0 * (double)n_exact / (double)n_params);
    if (trainer)
        printf("; lr mismatches %d, grad_norm max rel diff %.3g (tol %.3g), mismatches %d", lr_mismatch, max_norm_rel,
               norm_rtol, norm_mismatch);
    printf("\n");
    assert_int_equal(lr_mismatch, 0);
    assert_int_equal(norm_mismatch, 0);
    assert_int_equal(skip_mismatch, 0);
    assert_int_equal(scale_mismatch, 0);
    assert_true(max_loss_err <= tol->loss_atol);
    assert_true(max_param_err <= tol->param_atol);
    // bf16/fp16 on the naive backend round where torch rounds and sum in torch's orders
    // (reference/MODEL_SEMANTICS.md): every low-precision trajectory ends bit-identical, and must
    // (fp32 differs by MKL's GEMM orders, which nobody mirrors: its tolerances above judge it)
    if (strcmp(tol->mode, "fp32") != 0) {
        if (n_exact != n_params)
            fail_msg("%s: %zu of %zu final parameters not bit-identical to torch's (TRAINBENCH_VERBOSE=1 names them)",
                     tol->golden, n_params - n_exact, n_params);
        assert_true(max_loss_err == 0.0);
    }
    golden_replay_close(&g);
}

// The order of the sums (README "Gradient accumulation", train.h): the accumulated gradient of
// one optimizer step must be, bit for bit, what a data-parallel run would build from separately
// computed micro-batch gradients: each micro-batch's forward + backward (seed float32(scale / N))
// into its own zeroed buffer, then acc = g0, acc += g1, ... in micro-batch order. Computed here
// independently of accum.c with model_forward/model_backward for the first optimizer step of
// each accum_* golden (fp16: scale 2^24, so the seed is 2^22). A backward that accumulated into
// the running sum in place would round differently (e.g. the embeddings' scatter-adds): checked
// by mutation, 83 of 21,360 fp32 values differ, while the tolerance-based replays still pass.
static void check_sum_order(const char* golden) {
    char path[512];
    snprintf(path, sizeof path, "reference/golden/model/%s.safetensors", golden);
    GoldenReplay g;
    assert_true(golden_replay_open(&g, path, "naive", 1));
    assert_true(g.N > 1);
    const size_t n = g.table.alloc_numel;
    float* acc = calloc(n, sizeof(float));
    float* buf = calloc(n, sizeof(float));
    assert_true(acc && buf);
    const int B = g.B, T = g.T;
    ModelBatch mb[GOLDEN_REPLAY_MAX_ACCUM];
    for (int m = 0; m < g.N; m++) {
        for (int b = 0; b < B; b++) g.lab[m][b] = (int32_t)((const int64_t*)g.labels->data)[m * B + b];
        mb[m] = (ModelBatch){(const int64_t*)g.ids->data + (size_t)m * B * T,
                             (const int64_t*)g.mask->data + (size_t)m * B * T, g.lab[m], B, T, 0, 0, NULL};
    }
    const float seed = grad_scaler_loss_scale(&g.scaler) / (float)g.N;
    for (int m = 0; m < g.N; m++) {
        float loss;
        memset(buf, 0, n * sizeof(float));
        assert_true(status_is_ok(model_forward(g.ws, g.params, &mb[m], g.mode, &g.gemm, &loss, NULL)));
        assert_true(status_is_ok(model_backward(g.ws, g.params, seed, &g.gemm, buf, NULL)));
        for (size_t i = 0; i < n; i++) acc[i] = m == 0 ? buf[i] : acc[i] + buf[i];
    }
    TrainStepResult r;
    memset(&r, 0, sizeof r);
    assert_true(status_is_ok(train_accumulate_gradients(&g.ts, mb, &r)));
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&acc[i], &g.grads[i], sizeof(float)) != 0;
    printf("%s: step 1's accumulated gradient (%d micro-batches, seed %g) vs separately computed micro-batch "
           "gradients added in order: %zu of %zu values differ in their bits\n", golden, g.N, (double)seed, differ, n);
    assert_int_equal(differ, 0);
    free(acc);
    free(buf);
    golden_replay_close(&g);
}

static void test_accum_sum_order(void** s) {
    (void)s;
    check_sum_order("accum_fp32");
    check_sum_order("accum_fp16");
}

// lr_schedules (transformers.get_scheduler, no scheduler kwargs, as the Trainer calls it): every
// implemented lr_scheduler_type at the golden's (lr, warmup, training steps) settings, the lr after
// k = 0..N+2 scheduler steps bit for bit (lr_schedule_lr, in double as Python); a (type, setting)
// transformers refused (polynomial with lr <= lr_end or no decay steps) is refused by
// lr_schedule_refusal too, and "constant" is generated without warmup only (the CLI refuses one).
static void test_lr_schedules(void** s) {
    (void)s;
    SafeTensors st;
    Status rs = st_read("reference/golden/model/lr_schedules.safetensors", &st);
    if (!status_is_ok(rs)) printf("FAIL %s (run `make goldens`)\n", rs.msg);
    assert_true(status_is_ok(rs));
    json_t* settings = json_loads(st_meta(&st, "settings"), 0, NULL);
    assert_non_null(settings);
    const char* cases = st_meta(&st, "cases");
    assert_non_null(cases);
    int compared = 0, values = 0, refused = 0;
    for (int t = 0; t < LR_SCHEDULE_COUNT; t++) {
        for (size_t i = 0; i < json_array_size(settings); i++) {
            json_t* o = json_array_get(settings, i);
            LrSchedule sc = {.type = (LrScheduleType)t, .base_lr = json_number_value(json_object_get(o, "lr")),
                             .warmup_steps = json_integer_value(json_object_get(o, "warmup_steps")),
                             .training_steps = json_integer_value(json_object_get(o, "training_steps"))};
            char name[96];
            snprintf(name, sizeof name, "lr.%s.%zu", lr_schedule_name((LrScheduleType)t), i);
            const StTensor* e = st_find(&st, name);
            if (!e) {  // not generated: transformers refused it, or constant with warmup
                const bool ours = lr_schedule_refusal(&sc) != NULL || (t == LR_SCHEDULE_CONSTANT && sc.warmup_steps);
                if (!ours) printf("FAIL %s: transformers refused it, trainbench does not\n", name);
                assert_true(ours);
                refused++;
                continue;
            }
            assert_null(lr_schedule_refusal(&sc));
            assert_int_equal(e->dtype, DTYPE_F64);
            assert_int_equal(e->numel, (size_t)sc.training_steps + 3);
            for (int64_t k = 0; k < sc.training_steps + 3; k++) {
                double want;
                memcpy(&want, (const char*)e->data + (size_t)k * sizeof want, sizeof want);
                const double got = lr_schedule_lr(&sc, k);
                if (memcmp(&got, &want, sizeof got) != 0)
                    printf("FAIL %s (lr %g, warmup %lld, steps %lld) k=%lld: ours %.17g, transformers %.17g\n", name,
                           sc.base_lr, (long long)sc.warmup_steps, (long long)sc.training_steps, (long long)k, got,
                           want);
                assert_memory_equal(&got, &want, sizeof got);
                values++;
            }
            compared++;
        }
    }
    printf("lr schedules: %d (type, setting) pairs, %d lr values bit-identical to transformers; %d refused by both "
           "(golden cases: %s)\n", compared, values, refused, cases);
    json_decref(settings);
    st_free(&st);
}

static void test_fp32(void** s) { (void)s; run_case(&TOLS[0]); }
static void test_bf16(void** s) { (void)s; run_case(&TOLS[1]); }
static void test_fp16_grad_scaler(void** s) { (void)s; run_case(&TOLS[2]); }
static void test_fp16_noscale(void** s) { (void)s; run_case(&TOLS[3]); }
static void test_trainer_fp32(void** s) { (void)s; run_case(&TOLS[4]); }
static void test_trainer_fp16(void** s) { (void)s; run_case(&TOLS[5]); }
static void test_accum_fp32(void** s) { (void)s; run_case(&TOLS[6]); }
static void test_accum_fp16_grad_scaler(void** s) { (void)s; run_case(&TOLS[7]); }
static void test_dropout_fp32(void** s) { (void)s; run_case(&TOLS[8]); }
static void test_dropout_bf16(void** s) { (void)s; run_case(&TOLS[9]); }
static void test_dropout_fp16_grad_scaler(void** s) { (void)s; run_case(&TOLS[10]); }
static void test_dropout_fp16_batch1(void** s) { (void)s; run_case(&TOLS[11]); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16_grad_scaler),
        cmocka_unit_test(test_fp16_noscale),
        cmocka_unit_test(test_trainer_fp32),
        cmocka_unit_test(test_trainer_fp16),
        cmocka_unit_test(test_accum_fp32),
        cmocka_unit_test(test_accum_fp16_grad_scaler),
        cmocka_unit_test(test_accum_sum_order),
        cmocka_unit_test(test_dropout_fp32),
        cmocka_unit_test(test_dropout_bf16),
        cmocka_unit_test(test_dropout_fp16_grad_scaler),
        cmocka_unit_test(test_dropout_fp16_batch1),
        cmocka_unit_test(test_lr_schedules),
    };
    return cmocka_run_group_tests_name("trajectory", tests, NULL, NULL);
}

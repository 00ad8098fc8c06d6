// golden_replay.h — replays a model training golden (reference/golden/model/train_*.safetensors,
// reference/README.md "Model goldens") through train_step(), the function `trainbench train`
// runs each step: the golden's initial weights (param.<name>), its batches (input.*), its
// optimizer and hyperparameters (metadata optimizer/hparams), GradScaler settings (grad_scaler)
// and precision mode (mode). Shared by test_trajectory.c and test_fingerprint.c; include after
// cmocka.h.
#ifndef TRAINBENCH_TESTS_GOLDEN_REPLAY_H
#define TRAINBENCH_TESTS_GOLDEN_REPLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "train/train.h"

#define GOLDEN_REPLAY_MAX_BATCH 64

typedef struct {
    SafeTensors st;                     // the golden (its expect.* tensors stay readable)
    const PrecisionMode* mode;
    ParamTable table;
    float *params, *grads;              // table buffers: params start as the golden's
    ModelOptim mo;
    GradScaler scaler;
    Gemm gemm;
    ModelWorkspace* ws;
    const StTensor *ids, *mask, *labels;
    int S, B, T;                        // steps, batch, sequence length
    int32_t lab[GOLDEN_REPLAY_MAX_BATCH];
    TrainStep ts;
} GoldenReplay;

// Opens the golden at `path` and sets everything up on `backend` with `threads` threads.
// Returns false (nothing to close) when the backend cannot run the golden's precision mode;
// a missing or malformed golden fails the test (it is never skipped).
static bool golden_replay_open(GoldenReplay* r, const char* path, const char* backend, int threads) {
    memset(r, 0, sizeof *r);
    Status s = st_read(path, &r->st);
    if (!status_is_ok(s)) printf("FAIL %s (run `make goldens`)\n", s.msg);
    assert_true(status_is_ok(s));
    r->mode = amp_mode_find(st_meta(&r->st, "mode"));
    assert_non_null(r->mode);
    if (!status_is_ok(amp_check_backend(r->mode, gemm_find(backend)))) {
        st_free(&r->st);
        return false;
    }
    assert_true(status_is_ok(param_table_build(model_config_find("tiny"), &r->table)));
    r->params = param_table_alloc_buffer(&r->table);
    r->grads = param_table_alloc_buffer(&r->table);
    for (size_t i = 0; i < r->table.n; i++) {
        char name[256];
        snprintf(name, sizeof name, "param.%s", r->table.t[i].name);
        const StTensor* t = st_find(&r->st, name);
        assert_non_null(t);
        assert_int_equal(t->numel, r->table.t[i].numel);
        memcpy(r->params + r->table.t[i].offset, t->data, t->numel * sizeof(float));
    }
    const Optimizer* o = optim_find(st_meta(&r->st, "optimizer"));
    assert_non_null(o);
    json_t* hp = json_loads(st_meta(&r->st, "hparams"), 0, NULL);
    OptimConfig ocfg;
    assert_true(status_is_ok(optim_config_from_json(o, hp, &ocfg)));
    json_decref(hp);
    GradScalerConfig gcfg = grad_scaler_defaults();
    const char* gs_text = st_meta(&r->st, "grad_scaler");
    json_t* gs = json_loads(gs_text ? gs_text : "null", JSON_DECODE_ANY, NULL);  // "none": not JSON, NULL
    if (json_is_object(gs)) {
        gcfg.init_scale = json_number_value(json_object_get(gs, "init_scale"));
        gcfg.growth_factor = json_number_value(json_object_get(gs, "growth_factor"));
        gcfg.backoff_factor = json_number_value(json_object_get(gs, "backoff_factor"));
        gcfg.growth_interval = json_integer_value(json_object_get(gs, "growth_interval"));
    }
    json_decref(gs);
    gcfg.enabled = r->mode->loss_scaling;
    grad_scaler_init(&r->scaler, &gcfg);
    model_optim_init(&r->mo, &r->table, o, &ocfg, false);
    assert_true(status_is_ok(gemm_open(&r->gemm, gemm_find(backend), threads)));
    r->ids = st_find(&r->st, "input.input_ids");
    r->mask = st_find(&r->st, "input.attention_mask");
    r->labels = st_find(&r->st, "input.labels");
    assert_true(r->ids && r->mask && r->labels);
    r->S = (int)r->ids->shape[0];
    r->B = (int)r->ids->shape[1];
    r->T = (int)r->ids->shape[2];
    assert_true(r->B <= GOLDEN_REPLAY_MAX_BATCH);
    assert_true(status_is_ok(model_workspace_new(&r->table, r->B, r->T, &r->ws)));
    r->ts = (TrainStep){&r->table, r->ws, &r->gemm, r->mode, &r->mo, &r->scaler, r->params, r->grads};
    return true;
}

// Step k (0-based) of the golden's S steps.
static void golden_replay_step(GoldenReplay* r, int k, TrainStepResult* out) {
    const int B = r->B, T = r->T;
    for (int b = 0; b < B; b++) r->lab[b] = (int32_t)((const int64_t*)r->labels->data)[k * B + b];
    ModelBatch mb = {(const int64_t*)r->ids->data + (size_t)k * B * T,
                     (const int64_t*)r->mask->data + (size_t)k * B * T, r->lab, B, T};
    assert_true(status_is_ok(train_step(&r->ts, &mb, out)));
}

static void golden_replay_close(GoldenReplay* r) {
    model_workspace_free(r->ws);
    gemm_close(&r->gemm);
    model_optim_free(&r->mo);
    free(r->params);
    free(r->grads);
    param_table_free(&r->table);
    st_free(&r->st);
}

#endif

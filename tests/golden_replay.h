// golden_replay.h — replays a model training golden (reference/golden/model/train_*.safetensors,
// reference/README.md "Model goldens") through train_step(), the function `trainbench train`
// runs each step: the golden's initial weights (param.<name>), its batches (input.*), its
// optimizer and hyperparameters (metadata optimizer/hparams), GradScaler settings (grad_scaler),
// precision mode (mode), the model's shape (config: any DistilBertConfig, not only tiny) and,
// for trainer_* goldens, HF Trainer's policies: param_groups "hf_trainer: ..." (decay groups;
// the golden's list of no-decay names must be exactly param_gets_weight_decay's complement),
// lr_schedule and max_grad_norm; accum_* goldens: metadata gradient_accumulation_steps N, input.*
// holding N micro-batches per optimizer step (step k = micro-batches k*N .. k*N+N-1). Shared by test_trajectory.c and test_fingerprint.c; include
// after cmocka.h.
#ifndef TRAINBENCH_TESTS_GOLDEN_REPLAY_H
#define TRAINBENCH_TESTS_GOLDEN_REPLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "golden_config.h"
#include "golden_dropout.h"
#include "train/train.h"

#define GOLDEN_REPLAY_MAX_BATCH 64
#define GOLDEN_REPLAY_MAX_ACCUM 16

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
    int S, B, T;                        // optimizer steps, batch, sequence length
    int N;                              // micro-batches per optimizer step (1 unless accum_*)
    float* micro_grads;                 // N > 1: train_accumulate_gradients' scratch buffer
    int32_t lab[GOLDEN_REPLAY_MAX_ACCUM][GOLDEN_REPLAY_MAX_BATCH];
    LrSchedule schedule;                // trainer_* goldens (metadata lr_schedule)
    bool has_schedule;
    TrainStep ts;
    DropoutConfig dropout;              // trajectory_dropout_* goldens (metadata dropout)
    bool has_dropout;
    int64_t first_step;                 // the 1-based step of the golden's first optimizer step
} GoldenReplay;

// metadata param_groups "hf_trainer: weight_decay on every parameter except these (...): a,b,c":
// the list must be exactly the tensors param_gets_weight_decay exempts.
static void golden_replay_check_decay_groups(const ParamTable* t, const char* groups) {
    const char* list = strstr(groups, "): ");
    assert_non_null(list);
    list += 3;
    size_t listed = 0;
    for (size_t i = 0; i < t->n; i++) {
        const char* name = t->t[i].name;
        size_t len = strlen(name);
        bool in_list = false;
        for (const char* p = list; (p = strstr(p, name)) != NULL; p += len)
            if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) in_list = true;
        listed += in_list;
        if (in_list == param_gets_weight_decay(&t->t[i]))
            printf("FAIL decay group of %s: transformers %s, ours %s\n", name, in_list ? "no decay" : "decay",
                   param_gets_weight_decay(&t->t[i]) ? "decay" : "no decay");
        assert_true(in_list != param_gets_weight_decay(&t->t[i]));
    }
    size_t commas = 1;
    for (const char* p = list; *p; p++) commas += *p == ',';
    assert_int_equal(commas, listed);  // no name in the list that the table lacks
}

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
    ModelConfig cfg;
    golden_config(&r->st, &cfg);  // the model's shape, activation and padding_idx
    assert_true(status_is_ok(param_table_build(&cfg, &r->table)));
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
    const char* groups = st_meta(&r->st, "param_groups");
    if (groups && !strncmp(groups, "hf_trainer", 10)) {
        golden_replay_check_decay_groups(&r->table, groups);
        r->mo.decay_groups = true;
    }
    double max_grad_norm = 0;
    const char* mgn = st_meta(&r->st, "max_grad_norm");
    if (mgn) max_grad_norm = strtod(mgn, NULL);
    const char* ls = st_meta(&r->st, "lr_schedule");
    if (ls) {
        json_t* j = json_loads(ls, 0, NULL);
        assert_non_null(j);
        assert_true(lr_schedule_find(json_string_value(json_object_get(j, "type")), &r->schedule.type));
        r->schedule.base_lr = ocfg.lr;
        r->schedule.warmup_steps = json_integer_value(json_object_get(j, "warmup_steps"));
        r->schedule.training_steps = json_integer_value(json_object_get(j, "training_steps"));
        r->has_schedule = true;
        json_decref(j);
    }
    assert_true(status_is_ok(gemm_open(&r->gemm, gemm_find(backend), threads)));
    r->ids = st_find(&r->st, "input.input_ids");
    r->mask = st_find(&r->st, "input.attention_mask");
    r->labels = st_find(&r->st, "input.labels");
    assert_true(r->ids && r->mask && r->labels);
    const char* ga = st_meta(&r->st, "gradient_accumulation_steps");
    r->N = ga ? atoi(ga) : 1;
    assert_true(r->N >= 1 && r->N <= GOLDEN_REPLAY_MAX_ACCUM);
    assert_true(r->ids->shape[0] % r->N == 0);
    r->S = (int)r->ids->shape[0] / r->N;
    r->B = (int)r->ids->shape[1];
    r->T = (int)r->ids->shape[2];
    assert_true(r->B <= GOLDEN_REPLAY_MAX_BATCH);
    if (r->N > 1) r->micro_grads = param_table_alloc_buffer(&r->table);
    int64_t first_example;
    r->has_dropout = golden_dropout_config(&r->st, &r->dropout, &r->first_step, &first_example);
    if (r->has_dropout) assert_true(first_example == 0);
    assert_true(status_is_ok(model_workspace_new(&r->table, r->B, r->T, &r->ws)));
    r->ts = (TrainStep){&r->table, r->ws, &r->gemm, r->mode, &r->mo, &r->scaler, r->params, r->grads,
                        r->has_schedule ? &r->schedule : NULL, max_grad_norm, r->N, r->micro_grads, NULL, NULL, false};
    return true;
}

// Optimizer step k (0-based) of the golden's S steps: its N micro-batches k*N .. k*N+N-1.
static void golden_replay_step(GoldenReplay* r, int k, TrainStepResult* out) {
    const int B = r->B, T = r->T;
    ModelBatch mb[GOLDEN_REPLAY_MAX_ACCUM];
    for (int m = 0; m < r->N; m++) {
        const size_t i = (size_t)k * r->N + m;
        for (int b = 0; b < B; b++) r->lab[m][b] = (int32_t)((const int64_t*)r->labels->data)[i * B + b];
        // dropout masks keyed as `trainbench train` keys them: optimizer step, row m*B + b
        mb[m] = (ModelBatch){(const int64_t*)r->ids->data + i * B * T, (const int64_t*)r->mask->data + i * B * T,
                             r->lab[m], B, T, r->first_step + k, (int64_t)m * B, r->has_dropout ? &r->dropout : NULL};
    }
    assert_true(status_is_ok(train_step(&r->ts, mb, out)));
    // the last micro-batch's masks (the workspace holds the last forward's) are the golden's
    if (r->has_dropout) assert_int_equal(golden_dropout_check_masks(&r->st, r->ws, k, (r->N - 1) * B, B), 0);
}

static void golden_replay_close(GoldenReplay* r) {
    model_workspace_free(r->ws);
    gemm_close(&r->gemm);
    model_optim_free(&r->mo);
    free(r->params);
    free(r->grads);
    free(r->micro_grads);
    param_table_free(&r->table);
    st_free(&r->st);
}

#endif

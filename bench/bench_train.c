// bench_train.c — train_step/<model>/<backend>/<precision>/<optim>: one full training step
// (train.h train_step: zero_grad, forward, backward of loss*scale, GradScaler, optimizer) on a
// model preset with synthetic tokens: tiny at batch 8 x seq 32 and small at 8 x 128, for every
// backend x precision mode (small on naive only with FULL=1), with adamw_torch; FULL=1 adds distilbert-base-cased at 8 x 128 in
// fp32 and bf16 on the library backends (openblas, onednn: a naive step of that model takes
// minutes), the shapes `make peers` compares with PyTorch. Counters: tokens/s (B*T per step) and
// ms_<phase> (phase.h: ms per step in that phase, forward + backward, from the times train_step
// takes of every step anyway; `trainbench report` draws them as "where the step goes").
// Checked once before timing (unless TRAINBENCH_TRAIN_STEP_CHECKED=1, see bm_train: then only
// finite): the first step's loss must be finite and agree with the naive
// backend's first step (distilbert-base-cased: the other library backend's, openblas <->
// onednn) from the same parameters and batch within a sanity bound (1e-4
// relative for fp32, 2e-2 for 16-bit modes: different GEMM summation orders, rounded to
// 8- or 11-bit mantissas; the conformance tests, not this, pin the numerics).
// amp_check_backend() says no (onednn + fp16) -> "unsupported: <reason>".
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/rng.h"
#include "train/train.h"

typedef struct {
    const char* model;
    const GemmBackend* backend;
    const PrecisionMode* mode;
    const Optimizer* optim;
    int B, T;
    const GemmBackend* check_ref;  // the check's reference backend; NULL = naive
    bool checked, ok;
    char why[384];
} TrainCase;

// Everything one step needs; built fresh per run (deterministic: same seed, same values).
typedef struct {
    ParamTable table;
    ModelWorkspace* ws;
    Gemm gemm;
    ModelOptim mo;
    GradScaler scaler;
    float *params, *grads;
    int64_t* ids;     // (B, T)
    int32_t* labels;  // (B)
    ModelBatch batch;
    TrainStep ts;
} Trainer;

static Status trainer_open(Trainer* t, const TrainCase* c, const GemmBackend* backend) {
    memset(t, 0, sizeof *t);
    const ModelConfig* mc = model_config_find(c->model);
    if (!mc) return status_make(STATUS_INVALID, "no model preset %s", c->model);
    Status s = param_table_build(mc, &t->table);
    if (!status_is_ok(s)) return s;
    t->params = param_table_alloc_buffer(&t->table);
    t->grads = param_table_alloc_buffer(&t->table);
    param_table_init_weights(&t->table, t->params, 1234, 0.02f);
    s = model_workspace_new(&t->table, c->B, c->T, &t->ws);
    if (!status_is_ok(s)) return s;
    s = gemm_open(&t->gemm, backend, 0);
    if (!status_is_ok(s)) return s;
    OptimConfig ocfg;
    optim_defaults(c->optim, &ocfg);
    model_optim_init(&t->mo, &t->table, c->optim, &ocfg, false);
    GradScalerConfig gcfg = grad_scaler_defaults();
    gcfg.enabled = c->mode->loss_scaling;
    grad_scaler_init(&t->scaler, &gcfg);
    const size_t n = (size_t)c->B * c->T;
    t->ids = xmalloc(n * sizeof(int64_t));
    t->labels = xmalloc((size_t)c->B * sizeof(int32_t));
    Rng r;
    rng_init(&r, 0x7EA1ull, 0);
    for (size_t i = 0; i < n; i++) t->ids[i] = 1 + rng_below(&r, (uint32_t)(mc->vocab_size - 1));
    for (int b = 0; b < c->B; b++) t->labels[b] = (int32_t)rng_below(&r, (uint32_t)mc->n_labels);
    t->batch = (ModelBatch){.input_ids = t->ids, .attention_mask = NULL, .labels = t->labels, .B = c->B, .T = c->T};
    t->ts = (TrainStep){.table = &t->table, .ws = t->ws, .gemm = &t->gemm, .mode = c->mode, .mo = &t->mo,
                        .scaler = &t->scaler, .params = t->params, .grads = t->grads};
    return status_ok();
}

static void trainer_close(Trainer* t) {
    if (t->mo.states) model_optim_free(&t->mo);
    if (t->gemm.backend) gemm_close(&t->gemm);
    model_workspace_free(t->ws);
    free(t->params);
    free(t->grads);
    free(t->ids);
    free(t->labels);
    param_table_free(&t->table);
}

static bool train_check(const TrainCase* c, float loss, char* why, size_t len) {
    if (!isfinite(loss)) {
        snprintf(why, len, "first step loss %g", (double)loss);
        return false;
    }
    Trainer ref;
    const GemmBackend* rb = c->check_ref ? c->check_ref : &gemm_backend_naive;
    Status s = trainer_open(&ref, c, rb);
    TrainStepResult res;
    if (status_is_ok(s)) s = train_step(&ref.ts, &ref.batch, &res);
    trainer_close(&ref);
    if (!status_is_ok(s)) {
        snprintf(why, len, "%s reference step: %.300s", rb->name, s.msg);
        return false;
    }
    const double rtol = c->mode->low == DTYPE_F32 ? 1e-4 : 2e-2;
    if (!(fabs((double)loss - res.loss) <= rtol * fabs(res.loss))) {
        snprintf(why, len, "first step loss %.9g, %s %.9g (rtol %g)", (double)loss, rb->name, (double)res.loss, rtol);
        return false;
    }
    return true;
}

static void bm_train(BenchState* st, void* arg) {
    TrainCase* c = arg;
    Status s = amp_check_backend(c->mode, c->backend);
    if (!status_is_ok(s)) {
        bench_unsupported(st, "%s", s.msg);
        return;
    }
    Trainer t;
    s = trainer_open(&t, c, c->backend);
    TrainStepResult res = {0};
    if (status_is_ok(s)) s = train_step(&t.ts, &t.batch, &res);  // warm-up and the checked step
    if (!status_is_ok(s)) {
        if (s.code == STATUS_UNSUPPORTED) bench_unsupported(st, "%s", s.msg);
        else bench_fail(st, "%s", s.msg);
        trainer_close(&t);
        return;
    }
    // TRAINBENCH_TRAIN_STEP_CHECKED=1: the caller already passed this benchmark's check in this
    // session and only wants the timing (make peers' later rounds: the check of distilbert-base-
    // cased runs a whole second model, ~4 s a round); the loss must still be finite
    const char* prechecked = getenv("TRAINBENCH_TRAIN_STEP_CHECKED");
    if (!c->checked && prechecked && !strcmp(prechecked, "1")) {
        c->ok = isfinite(res.loss);
        if (!c->ok) snprintf(c->why, sizeof c->why, "first step loss %g", (double)res.loss);
        c->checked = true;
        bench_set_label(st, "check skipped: TRAINBENCH_TRAIN_STEP_CHECKED=1");
    }
    if (!c->checked) {
        c->ok = train_check(c, res.loss, c->why, sizeof c->why);
        c->checked = true;
    }
    if (!c->ok) {
        bench_fail(st, "%s", c->why);
    } else {
        PhaseTimes phases = {0};  // train_step times its phases anyway (phase.h): summed here
        while (bench_keep_running(st)) {
            train_step(&t.ts, &t.batch, &res);
            phase_times_add(&phases, &res.phases);
        }
        bench_counter(st, "tokens/s", (double)c->B * c->T * (double)bench_iterations(st), BENCH_RATE);
        // where the step goes: ms per step of each phase (forward + backward), for the report
        for (int p = 0; p < PHASE_COUNT; p++) {
            const double ms = 1e3 * (phases.s[PHASE_FORWARD][p] + phases.s[PHASE_BACKWARD][p]);
            char name[64];
            snprintf(name, sizeof name, "ms_%s", phase_name((Phase)p));
            if (ms > 0) bench_counter(st, name, ms, BENCH_AVG_ITERS);
        }
    }
    trainer_close(&t);
}

static void add(const char* model, int B, int T) {
    for (size_t b = 0; b < gemm_backend_count(); b++)
        for (size_t m = 0; m < amp_mode_count(); m++) {
            // naive small steps (~0.75 s each, the reference backend, not a speed contender)
            // only under FULL=1: they took ~30 s of make run's budgeted benchmarks phase
            if (gemm_backend_at(b) == &gemm_backend_naive && strcmp(model, "tiny") && !bench_full) continue;
            TrainCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
            *c = (TrainCase){.model = model, .backend = gemm_backend_at(b), .mode = amp_mode_at(m),
                             .optim = &optim_adamw_torch, .B = B, .T = T};
            bench_registerf(bm_train, c, "train_step/%s/%s/%s/%s", model, c->backend->name, c->mode->name,
                            c->optim->name);
        }
}

// distilbert-base-cased (FULL=1): fp32 and bf16 on openblas and onednn, each checked against the other.
static void add_large(const char* model, int B, int T) {
    const GemmBackend* libs[2] = {&gemm_backend_openblas, &gemm_backend_onednn};
    const char* modes[2] = {"fp32", "bf16"};
    for (int b = 0; b < 2; b++)
        for (int m = 0; m < 2; m++) {
            TrainCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
            *c = (TrainCase){.model = model, .backend = libs[b], .mode = amp_mode_find(modes[m]),
                             .optim = &optim_adamw_torch, .B = B, .T = T, .check_ref = libs[1 - b]};
            CHECK(c->mode != NULL, "no precision mode %s", modes[m]);
            bench_registerf(bm_train, c, "train_step/%s/%s/%s/%s", model, c->backend->name, c->mode->name,
                            c->optim->name);
        }
}

void bench_register_train(void) {
    add("tiny", 8, 32);
    add("small", 8, 128);
    if (bench_full) add_large("distilbert-base-cased", 8, 128);
}

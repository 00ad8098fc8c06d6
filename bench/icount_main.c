// icount_main.c — build/bench/trainbench-icount: the instruction-count benchmarks. Runs ONE
// named case single-threaded for a fixed number of iterations inside icount_measure(), the only
// function `trainbench icount` tells valgrind's callgrind to count (--toggle-collect), so
// start-up, set-up, the warm-up iteration and exit are not counted: instructions per iteration =
// callgrind's total / iterations. Valgrind hides AVX-512 from the program, so the AVX2 (or
// portable) code paths are what it counts; the binary prints the paths it ran.
//   trainbench-icount --list          the case names, one per line
//   trainbench-icount NAME ITERS      runs the case; prints "paths: ..." on stdout
// Cases (small, so valgrind's ~50x slowdown stays affordable): gemm/<backend>/f32/nn/64x64x64 for
// every backend, optim/<name>/100000 for every optimizer (a 100 x 1000 tensor, defaults),
// train_step/<tiny|small>/naive/fp32/adamw_torch (batch 2 x 16 tokens; small is ~90x tiny's count:
// ~6 s per iteration under valgrind on this machine kind).
// Test builds: -DICOUNT_SLOWDOWN='"NAME"' adds ~2% more instructions to that one case's measured
// region (a deliberate slowdown the instruction gate must catch; never in a normal build).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "gemm/gemm.h"
#include "optim/optim.h"
#include "optim/torch_sqrt.h"
#include "train/train.h"

typedef struct {
    char name[128];
    int kind;  // 0 gemm, 1 optim, 2 train_step
    const GemmBackend* backend;
    const Optimizer* optim;
    const char* model;  // train_step: the preset
} Case;

static Case g_cases[64];
static int g_n;

static void list_cases(void) {
    for (size_t b = 0; b < gemm_backend_count(); b++) {
        Case* c = &g_cases[g_n++];
        c->kind = 0;
        c->backend = gemm_backend_at(b);
        snprintf(c->name, sizeof c->name, "gemm/%s/f32/nn/64x64x64", c->backend->name);
    }
    for (size_t i = 0; i < optim_count(); i++) {
        Case* c = &g_cases[g_n++];
        c->kind = 1;
        c->optim = optim_at(i);
        snprintf(c->name, sizeof c->name, "optim/%s/100000", c->optim->name);
    }
    static const char* const STEP_MODELS[] = {"tiny", "small"};
    for (size_t i = 0; i < ARRAY_LEN(STEP_MODELS); i++) {
        Case* c = &g_cases[g_n++];
        c->kind = 2;
        c->model = STEP_MODELS[i];
        snprintf(c->name, sizeof c->name, "train_step/%s/naive/fp32/adamw_torch", c->model);
    }
}

typedef struct {
    const Case* c;
    Gemm gemm;
    GemmArgs ga;
    OptimState* st;
    OptimConfig cfg;
    float *p, *g;
    TrainStep* ts;
    ModelBatch* batch;
} Work;

static void run_once(Work* w) {
    if (w->c->kind == 0) {
        Status s = gemm_run(&w->gemm, &w->ga);
        CHECK(status_is_ok(s), "%s", s.msg);
    } else if (w->c->kind == 1) {
        w->c->optim->step(w->st, w->p, w->g, &w->cfg);
    } else {
        TrainStepResult res;
        Status s = train_step(w->ts, w->batch, &res);
        CHECK(status_is_ok(s), "%s", s.msg);
    }
}

volatile float icount_sink;

// The counted region (callgrind --toggle-collect=icount_measure): ITERS runs of the case.
__attribute__((noinline)) void icount_measure(Work* w, long iters) {
    for (long i = 0; i < iters; i++) run_once(w);
#ifdef ICOUNT_SLOWDOWN
    if (!strcmp(w->c->name, ICOUNT_SLOWDOWN)) {  // ~2% extra work in this case only (test builds)
        static long extra = -1;
        if (extra < 0) extra = atol(getenv("ICOUNT_EXTRA") ? getenv("ICOUNT_EXTRA") : "0");
        float acc = 0;
        for (long i = 0; i < extra * iters; i++) acc += (float)i * 0.5f;
        icount_sink = acc;
    }
#endif
}

int main(int argc, char** argv) {
    list_cases();
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < g_n; i++) printf("%s\n", g_cases[i].name);
        return 0;
    }
    long iters = argc == 3 ? atol(argv[2]) : 0;
    const Case* c = NULL;
    for (int i = 0; argc == 3 && i < g_n; i++)
        if (!strcmp(g_cases[i].name, argv[1])) c = &g_cases[i];
    if (!c || iters < 1) {
        fprintf(stderr, "usage: trainbench-icount --list | NAME ITERS (ITERS >= 1; NAME from --list)\n");
        return 2;
    }
    omp_set_num_threads(1);
    Work w = {.c = c};
    Rng r;
    rng_init(&r, 0x1C0u, 0);
    if (c->kind == 0) {
        static float A[64 * 64], B[64 * 64], C[64 * 64];
        rng_fill_normal(&r, A, 64 * 64, 0, 1);
        rng_fill_normal(&r, B, 64 * 64, 0, 1);
        Status s = gemm_open(&w.gemm, c->backend, 1);
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench-icount: %s: %s\n", c->name, s.msg);
            return 3;
        }
        w.ga = (GemmArgs){false, false, 64, 64, 64, 1.0f, 0.0f, DTYPE_F32, DTYPE_F32, A, 64, B, 64, C, 64, NULL, GEMM_F16_SUM_MM, 0};
    } else if (c->kind == 1) {
        optim_defaults(c->optim, &w.cfg);
        TensorShape shape = shape_2d(100, 1000);
        w.p = xaligned_alloc(100000 * sizeof(float));
        w.g = xaligned_alloc(100000 * sizeof(float));
        rng_fill_normal(&r, w.p, 100000, 0, 0.02f);
        rng_fill_normal(&r, w.g, 100000, 0, 1e-3f);
        w.st = c->optim->init(&shape, &w.cfg);
    } else {  // as bench_train.c's trainer_open, the case's preset, batch 2 x 16
        static ParamTable table;
        static ModelWorkspace* ws;
        static ModelOptim mo;
        static GradScaler scaler;
        static int64_t ids[2 * 16];
        static int32_t labels[2];
        static ModelBatch batch;
        static TrainStep ts;
        const ModelConfig* mc = model_config_find(c->model);
        CHECK(mc != NULL, "no preset %s", c->model);
        Status s = param_table_build(mc, &table);
        CHECK(status_is_ok(s), "%s", s.msg);
        float* params = param_table_alloc_buffer(&table);
        float* grads = param_table_alloc_buffer(&table);
        param_table_init_weights(&table, params, 1234, 0.02f);
        s = model_workspace_new(&table, 2, 16, &ws);
        CHECK(status_is_ok(s), "%s", s.msg);
        s = gemm_open(&w.gemm, &gemm_backend_naive, 1);
        CHECK(status_is_ok(s), "%s", s.msg);
        OptimConfig ocfg;
        optim_defaults(optim_find("adamw_torch"), &ocfg);
        model_optim_init(&mo, &table, optim_find("adamw_torch"), &ocfg, false);
        GradScalerConfig gcfg = grad_scaler_defaults();
        gcfg.enabled = false;
        grad_scaler_init(&scaler, &gcfg);
        for (int i = 0; i < 2 * 16; i++) ids[i] = 1 + rng_below(&r, (uint32_t)(mc->vocab_size - 1));
        for (int b = 0; b < 2; b++) labels[b] = (int32_t)rng_below(&r, (uint32_t)mc->n_labels);
        batch = (ModelBatch){.input_ids = ids, .attention_mask = NULL, .labels = labels, .B = 2, .T = 16};
        ts = (TrainStep){.table = &table, .ws = ws, .gemm = &w.gemm, .mode = amp_mode_find("fp32"), .mo = &mo,
                         .scaler = &scaler, .params = params, .grads = grads};
        w.ts = &ts;
        w.batch = &batch;
    }
    run_once(&w);  // warm-up: first-touch, primitive creation, lazy tables (not counted)
    icount_measure(&w, iters);
    printf("paths: convert=%s torch_sqrt=%s threads=1\n", convert_impl_name(convert_impl_active()),
           !torch_sqrt_vector() ? "portable-table" : torch_sqrt_hw_matches() ? "hw-rsqrt-avx2" : "table-gather-avx2");
    return 0;
}

// adapter.c — trainbench's own optimizers exposed through the plugin ABI
// (src/validate/trainbench_plugin.h): the "correct plugin built from our own optimizer" of
// tests/test_plugin.c, compiled once per optimizer together with the optimizer sources
// (Makefile: $(BUILD)/plugins/adapter_<name>.so). It converts the ABI's resolved
// hyperparameters back into an OptimConfig, so the numeric fields of TrainbenchHparams are
// exercised for every optimizer, and lists the state under the library's keys, adding the
// integer "step" the libraries keep as a Python int (I64) where our state has none.
// Compile-time knobs (tests only):
//   ADAPTER_OPTIM        the optimizer that runs ("adafactor")
//   ADAPTER_IMPLEMENTS   what the plugin claims (default ADAPTER_OPTIM)
//   ADAPTER_PARSE_JSON   build the config from hparams_json as ADAPTER_OPTIM parses it (the
//                        other Adafactor dialect on these hparams: a deliberately wrong plugin)
//   ADAPTER_NO_CLIP      clip_threshold/d = inf: update clipping missing (deliberately wrong)
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "validate/trainbench_plugin.h"

#ifndef ADAPTER_IMPLEMENTS
#define ADAPTER_IMPLEMENTS ADAPTER_OPTIM
#endif

typedef struct {
    const Optimizer* o;
    OptimConfig cfg;
    OptimState* st;
    StateTensor step_t;  // "step" as the library's Python int (I64), aliasing st->step
} Adapter;

static char g_error[512];

static void* adapter_create(int32_t ndim, const int64_t* dims, const TrainbenchHparams* hp, const char** error) {
    const Optimizer* o = optim_find(ADAPTER_OPTIM);
    if (ndim < 0 || ndim > OPTIM_MAX_DIMS) {
        *error = "ndim must be 0..4";
        return NULL;
    }
    Adapter* a = calloc(1, sizeof *a);
    a->o = o;
#ifdef ADAPTER_PARSE_JSON
    json_t* j = json_loads(hp->hparams_json, 0, NULL);
    Status s = j ? optim_config_from_json_skipping(o, j, &a->cfg) : status_make(STATUS_INVALID, "hparams_json is not JSON");
    json_decref(j);
#else
    optim_defaults(o, &a->cfg);
    OptimConfig* c = &a->cfg;
    c->lr = hp->lr;
    c->beta1 = hp->beta1;
    c->beta2 = hp->beta2;
    c->has_beta1 = hp->has_beta1 != 0;
    c->eps = hp->eps;
    c->weight_decay = hp->weight_decay;
    c->eps1 = hp->eps1;
    c->eps2 = hp->eps2;
    c->clip_threshold = hp->clip_threshold;
    c->decay_rate = hp->decay_rate;
    c->d = hp->d;
    c->scale_parameter = hp->scale_parameter != 0;
    c->relative_step = hp->relative_step != 0;
    c->warmup_init = hp->warmup_init != 0;
    c->lr_none = c->relative_step;  // the ABI: lr is 0 where the library's lr is None
    c->block_size = (int)hp->block_size;
    c->min_8bit_size = (size_t)hp->min_8bit_size;
    c->amsgrad = hp->amsgrad != 0;
    c->maximize = hp->maximize != 0;
    c->foreach = hp->foreach != 0;
    Status s = o->validate(c);
#endif
    if (!status_is_ok(s)) {
        snprintf(g_error, sizeof g_error, "%s", s.msg);
        *error = g_error;
        free(a);
        return NULL;
    }
#ifdef ADAPTER_NO_CLIP
    a->cfg.clip_threshold = INFINITY;
    a->cfg.d = INFINITY;
#endif
    TensorShape shape = {ndim, {0}};
    for (int d = 0; d < ndim; d++) shape.dims[d] = dims[d];
    a->st = o->init(&shape, &a->cfg);
    return a;
}

static const char* adapter_step(void* state, float* param, const float* grad, int64_t numel) {
    Adapter* a = state;
    if ((size_t)numel != shape_numel(&a->st->shape)) return "numel does not match the shape given to create";
    a->o->step(a->st, param, grad, &a->cfg);
    return NULL;
}

static int32_t code_of(DType dt) {
    switch (dt) {
    case DTYPE_F32: return TRAINBENCH_DTYPE_F32;
    case DTYPE_F16: return TRAINBENCH_DTYPE_F16;
    case DTYPE_BF16: return TRAINBENCH_DTYPE_BF16;
    case DTYPE_F64: return TRAINBENCH_DTYPE_F64;
    case DTYPE_U8: return TRAINBENCH_DTYPE_U8;
    case DTYPE_I32: return TRAINBENCH_DTYPE_I32;
    case DTYPE_I64: return TRAINBENCH_DTYPE_I64;
    default: return 0;
    }
}

static void put(TrainbenchTensor* out, int32_t max, int32_t* n, const StateTensor* t) {
    if (*n < max) {
        TrainbenchTensor* d = &out[*n];
        d->name = t->name;
        d->dtype = code_of(t->dtype);
        d->ndim = t->shape.ndim;
        for (int k = 0; k < TRAINBENCH_PLUGIN_MAX_DIMS; k++) d->dims[k] = k < t->shape.ndim ? t->shape.dims[k] : 0;
        d->data = t->data;
    }
    (*n)++;
}

static int32_t adapter_list_state(void* state, TrainbenchTensor* out, int32_t max) {
    Adapter* a = state;
    int32_t n = 0;
    for (int i = 0; i < a->st->n_tensors; i++) put(out, max, &n, &a->st->tensors[i]);
    if (a->o->find_shared_state) {  // bitsandbytes' code maps, shared by all tensors
        static const char* const SHARED[] = {"qmap1", "qmap2"};
        for (int i = 0; i < 2; i++) {
            const StateTensor* t = a->o->find_shared_state(SHARED[i]);
            if (t) put(out, max, &n, t);
        }
    }
    if (!optim_state_find(a->st, "step")) {  // the library's Python int
        a->step_t = (StateTensor){"step", DTYPE_I64, {0, {0}}, &a->st->step};
        put(out, max, &n, &a->step_t);
    }
    return n;
}

static void adapter_destroy(void* state) {
    Adapter* a = state;
    a->o->free(a->st);
    free(a);
}

static const TrainbenchOptimizerPlugin PLUGIN = {
    TRAINBENCH_PLUGIN_ABI_VERSION, "trainbench " ADAPTER_OPTIM " (adapter)", ADAPTER_IMPLEMENTS,
    adapter_create, adapter_step, adapter_list_state, adapter_destroy,
};

const TrainbenchOptimizerPlugin* trainbench_optimizer_plugin(void) { return &PLUGIN; }

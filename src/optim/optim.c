// optim.c — the optimizer registry and the helpers every optimizer file shares: state
// allocation, measurement, hyperparameter validation and JSON (golden hparams) parsing.
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/stream_prefetch.h"
#include "optim/torch_sqrt.h"

// To add an optimizer: write src/optim_<name>.c exporting `const Optimizer optim_<name>`,
// add one line here, add its cases to reference/gen_optim_goldens.py and run `make goldens`.
// tests/test_optim.c iterates this table; a registered optimizer without goldens FAILS.
static const Optimizer* const OPTIMIZERS[] = {
    &optim_adamw_torch,
    &optim_adamw_torch_fused,
    &optim_adafactor_hf,
    &optim_adafactor_torch,
    &optim_adamw_bnb_8bit,
};

size_t optim_count(void) { return ARRAY_LEN(OPTIMIZERS); }

const Optimizer* optim_at(size_t i) {
    CHECK(i < ARRAY_LEN(OPTIMIZERS));
    return OPTIMIZERS[i];
}

const Optimizer* optim_find(const char* name) {
    for (size_t i = 0; i < ARRAY_LEN(OPTIMIZERS); i++)
        if (strcmp(OPTIMIZERS[i]->name, name) == 0) return OPTIMIZERS[i];
    return NULL;
}

const char* optim_names_list(void) {
    static char buf[256];
    if (!buf[0]) {
        for (size_t i = 0; i < ARRAY_LEN(OPTIMIZERS); i++) {
            if (i) strcat(buf, ", ");
            strcat(buf, OPTIMIZERS[i]->name);
        }
    }
    return buf;
}

size_t shape_numel(const TensorShape* s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) {
        CHECK(s->dims[d] >= 0);
        CHECK(size_mul_ok(n, (size_t)s->dims[d], &n), "shape overflow");
    }
    return n;
}

TensorShape shape_1d(int64_t n) {
    TensorShape s = {1, {n}};
    return s;
}

TensorShape shape_2d(int64_t rows, int64_t cols) {
    TensorShape s = {2, {rows, cols}};
    return s;
}

void optim_defaults(const Optimizer* o, OptimConfig* cfg) {
    memset(cfg, 0, sizeof *cfg);
    o->defaults(cfg);
}

size_t optim_state_measured_bytes(const OptimState* st) {
    size_t b = 0;
    for (int i = 0; i < st->n_tensors; i++)
        b += shape_numel(&st->tensors[i].shape) * dtype_traits(st->tensors[i].dtype)->size;
    return b;
}

size_t optim_state_measured_elems(const OptimState* st) {
    size_t n = 0;
    for (int i = 0; i < st->n_tensors; i++) n += shape_numel(&st->tensors[i].shape);
    return n;
}

const StateTensor* optim_state_find(const OptimState* st, const char* name) {
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

OptimState* optim_state_new(const Optimizer* o, size_t struct_size, const TensorShape* shape) {
    CHECK(struct_size >= sizeof(OptimState));
    OptimState* st = xcalloc(1, struct_size);
    st->optim = o;
    st->shape = *shape;
    return st;
}

void* optim_state_add(OptimState* st, const char* name, DType dt, TensorShape shape) {
    CHECK(st->n_tensors < OPTIM_MAX_STATE);
    StateTensor* t = &st->tensors[st->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->shape = shape;
    size_t bytes;
    CHECK(size_mul_ok(shape_numel(&shape), dtype_traits(dt)->size, &bytes));
    t->data = xaligned_alloc(bytes);
    memset(t->data, 0, bytes);
    return t->data;
}

void optim_state_free_tensors(OptimState* st) {
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].data);
    free(st);
}

Status optim_check_positive(const char* field, double v) {
    if (!(isfinite(v) && v > 0))
        return status_make(STATUS_INVALID, "%s must be a finite number > 0 (got %g)", field, v);
    return status_ok();
}

Status optim_check_nonneg(const char* field, double v) {
    if (!(isfinite(v) && v >= 0))
        return status_make(STATUS_INVALID, "%s must be a finite number >= 0 (got %g)", field, v);
    return status_ok();
}

Status optim_check_ge0(const char* field, double v, const char* lib_msg) {
    if (!(0.0 <= v))
        return status_make(STATUS_INVALID, "%s must be >= 0 (got %g); the library refuses it too: \"%s\"", field, v,
                           lib_msg);
    return status_ok();
}

Status optim_adam_ranges_check(const OptimConfig* c, const char* library) {
    Status s;
    if (!status_is_ok(s = optim_check_ge0("lr", c->lr, "Invalid learning rate"))) return s;
    if (!status_is_ok(s = optim_check_ge0("eps", c->eps, "Invalid epsilon value"))) return s;
    if (!(0.0 <= c->beta1 && c->beta1 < 1.0))
        return status_make(STATUS_INVALID, "beta1 (betas[0]) must be in [0, 1) (got %g); %s refuses it too: "
                           "\"Invalid beta parameter at index 0\"", c->beta1, library);
    if (!(0.0 <= c->beta2 && c->beta2 < 1.0))
        return status_make(STATUS_INVALID, "beta2 (betas[1]) must be in [0, 1) (got %g); %s refuses it too: "
                           "\"Invalid beta parameter at index 1\"", c->beta2, library);
    return optim_check_ge0("weight_decay", c->weight_decay, "Invalid weight_decay value");
}

Status optim_torch_adamw_check(const OptimConfig* c) {
    Status s;
    if (c->lr_none)  // Python: `0.0 <= None` raises TypeError
        return status_make(STATUS_INVALID, "lr must be a number (got null): torch.optim.AdamW has no lr=None");
    if (!status_is_ok(s = optim_adam_ranges_check(c, "torch"))) return s;
    if (c->fused && c->foreach)
        return status_make(STATUS_INVALID, "fused=true and foreach=true together: torch refuses it too: "
                           "\"`fused` and `foreach` cannot be `True` together.\"");
    if (c->fused && c->differentiable)
        return status_make(STATUS_INVALID, "fused=true and differentiable=true together: torch refuses it too: "
                           "\"`fused` does not support `differentiable`\"");
    return status_ok();
}

const char* const optim_torch_adamw_keywords[] = {
    "lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused",
    NULL,
};

OptimState* optim_torch_adamw_state_new(const Optimizer* o, const TensorShape* shape, const OptimConfig* c) {
    OptimState* st = optim_state_new(o, sizeof(OptimState), shape);
    optim_state_add(st, "exp_avg", DTYPE_F32, *shape);
    optim_state_add(st, "exp_avg_sq", DTYPE_F32, *shape);
    optim_state_add(st, "step", DTYPE_F32, (TensorShape){0, {0}});
    if (c->amsgrad) optim_state_add(st, "max_exp_avg_sq", DTYPE_F32, *shape);
    return st;
}

size_t optim_torch_adamw_state_bytes(const TensorShape* shape, const OptimConfig* c) {
    // exp_avg + exp_avg_sq (fp32) + 0-d fp32 step; amsgrad: + max_exp_avg_sq (fp32)
    return (c->amsgrad ? 12 : 8) * shape_numel(shape) + 4;
}

float* optim_torch_adamw_vmax(const OptimState* st) {
    const StateTensor* t = optim_state_find(st, "max_exp_avg_sq");
    return t ? t->data : NULL;
}

Status optim_not_implemented(const char* optim, const char* what) {
    return status_make(STATUS_INVALID, "%s: %s is not implemented (the library accepts it; trainbench does not "
                       "mirror that code path)", optim, what);
}

Status optim_check_beta(const char* field, double v) {
    if (!(v >= 0 && v < 1))
        return status_make(STATUS_INVALID, "%s must be in [0, 1) (got %g)", field, v);
    return status_ok();
}

// ---- JSON hyperparameters (names as the libraries' constructor keywords) ----
static bool json_num(json_t* v, double* out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return true;
    }
    return false;
}

static bool json_bool(json_t* v, bool* out) {
    if (!json_is_boolean(v)) return false;
    *out = json_is_true(v);
    return true;
}

const char* optim_keywords_list(const Optimizer* o, char* buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (const char* const* k = o->keywords; k && *k; k++)
        used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s", k == o->keywords ? "" : ", ", *k);
    return buf;
}

static Status config_from_json(const Optimizer* o, json_t* hp, OptimConfig* cfg, bool skip_unknown);

bool optim_apply_env(char* err, size_t cap) {
    return torch_sqrt_apply_env(err, cap) && stream_prefetch_apply_env(err, cap);
}

bool optim_has_keyword(const Optimizer* o, const char* key) {
    for (const char* const* k = o->keywords; k && *k; k++)
        if (!strcmp(*k, key)) return true;
    return false;
}

Status optim_config_from_json(const Optimizer* o, json_t* hp, OptimConfig* cfg) {
    return config_from_json(o, hp, cfg, false);
}

Status optim_config_from_json_skipping(const Optimizer* o, json_t* hp, OptimConfig* cfg) {
    return config_from_json(o, hp, cfg, true);
}

static Status config_from_json(const Optimizer* o, json_t* hp, OptimConfig* cfg, bool skip_unknown) {
    optim_defaults(o, cfg);
    if (o->constructor_defaults && !skip_unknown) o->constructor_defaults(cfg);
    if (!json_is_object(hp)) return status_make(STATUS_INVALID, "hparams must be a JSON object");
    const char* key;
    json_t* v;
    json_object_foreach(hp, key, v) {
        if (!optim_has_keyword(o, key)) {
            if (skip_unknown) continue;
            char kw[512];
            return status_make(STATUS_INVALID, "unknown hyperparameter '%s': %s takes no keyword '%s' (its keywords: %s)",
                               key, o->reference, key, optim_keywords_list(o, kw, sizeof kw));
        }
        const char* want = "a number";
        double x;
        bool ok;
        if (!strcmp(key, "lr")) {
            cfg->lr_none = json_is_null(v);  // HF Adafactor with relative_step: lr=None
            if (cfg->lr_none) cfg->lr = 0;
            ok = cfg->lr_none || json_num(v, &cfg->lr);
            want = "a number (or null where the library allows None)";
        } else if (!strcmp(key, "betas")) {
            ok = json_is_array(v) && json_array_size(v) == 2 && json_num(json_array_get(v, 0), &cfg->beta1) &&
                 json_num(json_array_get(v, 1), &cfg->beta2);
            want = "[beta1, beta2]";
        } else if (!strcmp(key, "eps") && json_is_array(v)) {  // Adafactor: (eps1, eps2); torch: eps1 may be null
            json_t* e1 = json_array_get(v, 0);
            ok = json_array_size(v) == 2 && json_num(json_array_get(v, 1), &cfg->eps2);
            if (ok && json_is_null(e1)) cfg->eps1 = -1;
            else ok = ok && json_num(e1, &cfg->eps1);
            want = "[eps1, eps2] (eps1 may be null for torch.optim.Adafactor)";
        } else if (!strcmp(key, "eps")) {
            ok = json_num(v, &cfg->eps);
        } else if (!strcmp(key, "weight_decay")) {
            ok = json_num(v, &cfg->weight_decay);
        } else if (!strcmp(key, "beta1")) {
            cfg->has_beta1 = !json_is_null(v);
            ok = !cfg->has_beta1 || json_num(v, &cfg->beta1);
            want = "a number or null";
        } else if (!strcmp(key, "clip_threshold")) {
            ok = json_num(v, &cfg->clip_threshold);
        } else if (!strcmp(key, "decay_rate") || !strcmp(key, "beta2_decay")) {
            ok = json_num(v, &cfg->decay_rate);
        } else if (!strcmp(key, "d")) {
            ok = json_num(v, &cfg->d);
        } else if (!strcmp(key, "min_8bit_size")) {
            ok = json_is_integer(v);
            if (ok) cfg->min_8bit_size = json_integer_value(v) < 0 ? 0 : (size_t)json_integer_value(v);  // numel < min
            want = "an integer";
        } else if (!strcmp(key, "optim_bits")) {
            ok = json_is_integer(v);
            if (ok) cfg->optim_bits = (int)json_integer_value(v);
            want = "an integer";
        } else if (!strcmp(key, "args")) {
            cfg->args_given = !json_is_null(v);
            ok = true;
        } else if (!strcmp(key, "foreach") || !strcmp(key, "fused")) {  // None or a bool
            bool* f = !strcmp(key, "foreach") ? &cfg->foreach : &cfg->fused;
            *f = false;
            ok = json_is_null(v) || json_bool(v, f);
            want = "true, false or null";
        } else {
            bool* f = !strcmp(key, "scale_parameter") ? &cfg->scale_parameter
                    : !strcmp(key, "relative_step")   ? &cfg->relative_step
                    : !strcmp(key, "warmup_init")     ? &cfg->warmup_init
                    : !strcmp(key, "amsgrad")         ? &cfg->amsgrad
                    : !strcmp(key, "maximize")        ? &cfg->maximize
                    : !strcmp(key, "capturable")      ? &cfg->capturable
                    : !strcmp(key, "differentiable")  ? &cfg->differentiable
                    : !strcmp(key, "is_paged")        ? &cfg->is_paged
                                                      : NULL;
            CHECK(f, "keyword %s of %s has no parser", key, o->name);
            ok = json_bool(v, f);
            want = "true or false";
        }
        (void)x;
        if (!ok) return status_make(STATUS_INVALID, "hyperparameter '%s' of %s must be %s", key, o->name, want);
    }
    return o->validate(cfg);
}

void shape_as_matrices(const TensorShape* s, size_t* batch, size_t* rows, size_t* cols) {
    CHECK(s->ndim >= 2);
    *rows = (size_t)s->dims[s->ndim - 2];
    *cols = (size_t)s->dims[s->ndim - 1];
    size_t b = 1;
    for (int d = 0; d < s->ndim - 2; d++) b *= (size_t)s->dims[d];
    *batch = b;
}

// optim.c — the optimizer registry and the helpers every optimizer file shares: state
// allocation, measurement, hyperparameter validation and JSON (golden hparams) parsing.
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// To add an optimizer: write src/optim_<name>.c exporting `const Optimizer optim_<name>`,
// add one line here, add its cases to reference/gen_optim_goldens.py and run `make goldens`.
// tests/test_optim.c iterates this table; a registered optimizer without goldens FAILS.
static const Optimizer* const OPTIMIZERS[] = {
    &optim_adamw_torch,
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

Status optim_config_from_json(const Optimizer* o, json_t* hp, OptimConfig* cfg) {
    optim_defaults(o, cfg);
    if (!json_is_object(hp)) return status_make(STATUS_INVALID, "hparams must be a JSON object");
    const char* key;
    json_t* v;
    json_object_foreach(hp, key, v) {
        double x;
        if (!strcmp(key, "lr")) {
            if (json_is_null(v)) cfg->lr = 0;  // HF Adafactor with relative_step: lr=None
            else if (!json_num(v, &cfg->lr)) goto bad;
        } else if (!strcmp(key, "betas")) {
            if (!json_is_array(v) || json_array_size(v) != 2 || !json_num(json_array_get(v, 0), &cfg->beta1) ||
                !json_num(json_array_get(v, 1), &cfg->beta2))
                goto bad;
        } else if (!strcmp(key, "eps")) {
            if (json_is_array(v)) {  // Adafactor: (eps1, eps2); torch: eps1 may be null
                if (json_array_size(v) != 2) goto bad;
                json_t* e1 = json_array_get(v, 0);
                if (json_is_null(e1)) cfg->eps1 = -1;
                else if (!json_num(e1, &cfg->eps1)) goto bad;
                if (!json_num(json_array_get(v, 1), &cfg->eps2)) goto bad;
            } else if (!json_num(v, &cfg->eps)) {
                goto bad;
            }
        } else if (!strcmp(key, "weight_decay")) {
            if (!json_num(v, &cfg->weight_decay)) goto bad;
        } else if (!strcmp(key, "beta1")) {
            if (json_is_null(v)) cfg->has_beta1 = false;
            else if (json_num(v, &cfg->beta1)) cfg->has_beta1 = true;
            else goto bad;
        } else if (!strcmp(key, "clip_threshold")) {
            if (!json_num(v, &cfg->clip_threshold)) goto bad;
        } else if (!strcmp(key, "decay_rate") || !strcmp(key, "beta2_decay")) {
            if (!json_num(v, &cfg->decay_rate)) goto bad;
        } else if (!strcmp(key, "d")) {
            if (!json_num(v, &cfg->d)) goto bad;
        } else if (!strcmp(key, "scale_parameter")) {
            if (!json_is_boolean(v)) goto bad;
            cfg->scale_parameter = json_is_true(v);
        } else if (!strcmp(key, "relative_step")) {
            if (!json_is_boolean(v)) goto bad;
            cfg->relative_step = json_is_true(v);
        } else if (!strcmp(key, "warmup_init")) {
            if (!json_is_boolean(v)) goto bad;
            cfg->warmup_init = json_is_true(v);
        } else if (!strcmp(key, "amsgrad")) {
            if (!json_is_boolean(v)) goto bad;
            cfg->amsgrad = json_is_true(v);
        } else if (!strcmp(key, "min_8bit_size")) {
            if (!json_num(v, &x) || x < 0) goto bad;
            cfg->min_8bit_size = (size_t)x;
        } else if (!strcmp(key, "block_size")) {
            if (!json_num(v, &x) || x < 1) goto bad;
            cfg->block_size = (int)x;
        } else if (!strcmp(key, "maximize") || !strcmp(key, "foreach") || !strcmp(key, "fused") ||
                   !strcmp(key, "capturable") || !strcmp(key, "differentiable") ||
                   !strcmp(key, "optim_bits") || !strcmp(key, "percentile_clipping") ||
                   !strcmp(key, "block_wise") || !strcmp(key, "is_paged") || !strcmp(key, "args") ||
                   !strcmp(key, "decoupled_weight_decay")) {
            // accepted: flags that select code paths we mirror (or that must be off); a true
            // maximize/amsgrad/decoupled mismatch is caught by validate() or the goldens.
            if (!strcmp(key, "maximize") && json_is_true(v))
                return status_make(STATUS_INVALID, "hparam maximize=true is not supported");
        } else {
            return status_make(STATUS_INVALID, "unknown hyperparameter '%s' for %s", key, o->name);
        }
        continue;
    bad:
        return status_make(STATUS_INVALID, "hyperparameter '%s' has an invalid value for %s", key, o->name);
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

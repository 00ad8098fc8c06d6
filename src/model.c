// model.c — DistilBERT-architecture configuration (presets, HF config.json, validation), the
// parameter table with Hugging Face names, weight initialisation, and per-tensor optimizer
// state over the table (see model.h). Not here: forward/backward (the trainer's issue).
#include "model.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

// To add a preset: add one line here (registry name, one-line description, the sizes in
// ModelConfig order: vocab, dim, layers, heads, hidden, positions, labels). Tests and the
// memory report iterate this table; model_config_validate() must accept the new line.
static const ModelPreset PRESETS[] = {
    {"tiny", "unit tests and end-to-end runs in milliseconds", {64, 32, 2, 2, 64, 32, 2}},
    {"small", "quick training runs and benchmarks", {1024, 128, 4, 4, 512, 128, 2}},
    {"distilbert-base-cased", "the real model's shape (HF distilbert-base-cased, 2 labels)",
     {28996, 768, 6, 12, 3072, 512, 2}},
};

size_t model_preset_count(void) { return ARRAY_LEN(PRESETS); }

const ModelPreset* model_preset_at(size_t i) {
    CHECK(i < ARRAY_LEN(PRESETS));
    return &PRESETS[i];
}

const ModelConfig* model_config_find(const char* name) {
    for (size_t i = 0; i < ARRAY_LEN(PRESETS); i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i].cfg;
    return NULL;
}

const char* model_preset_names_list(void) {
    static char buf[256];
    if (!buf[0]) {
        for (size_t i = 0; i < ARRAY_LEN(PRESETS); i++) {
            if (i) strcat(buf, ", ");
            strcat(buf, PRESETS[i].name);
        }
    }
    return buf;
}

// ---- validation ----
static Status check_range(const char* field, int64_t v, int64_t max) {
    if (v < 1 || v > max)
        return status_make(STATUS_INVALID, "%s must be an integer in [1, %lld] (got %lld)", field, (long long)max,
                           (long long)v);
    return status_ok();
}

// Parameter count in checked size_t arithmetic; false on overflow. Assumes nothing about the
// ranges, so it is safe to call before (or without) the range checks.
static bool config_param_count(const ModelConfig* c, size_t* out) {
    const int64_t f[] = {c->vocab_size, c->dim, c->n_layers, c->n_heads, c->hidden_dim, c->max_positions, c->n_labels};
    for (size_t i = 0; i < ARRAY_LEN(f); i++)
        if (f[i] < 0) return false;
    size_t V = (size_t)c->vocab_size, D = (size_t)c->dim, Ly = (size_t)c->n_layers, H = (size_t)c->hidden_dim,
           P = (size_t)c->max_positions, L = (size_t)c->n_labels;
    size_t a, b, emb, layer, head, total;
    // embeddings: V*D + P*D + 2D
    if (!size_mul_ok(V, D, &a) || !size_mul_ok(P, D, &b) || !size_add_ok(a, b, &emb) || !size_add_ok(emb, 2 * D, &emb))
        return false;
    // layer: 4(D*D + D) attention, 2D sa_layer_norm, H*D + H lin1, D*H + D lin2, 2D output_layer_norm
    if (!size_mul_ok(D, D, &a) || !size_add_ok(a, D, &a) || !size_mul_ok(a, 4, &layer)) return false;
    if (!size_mul_ok(H, D, &b) || !size_mul_ok(b, 2, &b) || !size_add_ok(layer, b, &layer)) return false;
    if (!size_add_ok(layer, H + 5 * D, &layer)) return false;  // H, D, 2D, 2D (D <= 2^62 checked by D*D)
    // head: pre_classifier D*D + D, classifier L*D + L
    if (!size_mul_ok(D, D, &a) || !size_add_ok(a, D, &head) || !size_mul_ok(L, D, &b) || !size_add_ok(head, b, &head) ||
        !size_add_ok(head, L, &head))
        return false;
    if (!size_mul_ok(layer, Ly, &total) || !size_add_ok(total, emb, &total) || !size_add_ok(total, head, &total))
        return false;
    *out = total;
    return true;
}

Status model_config_validate(const ModelConfig* c) {
    Status s;
    if (!status_is_ok(s = check_range("vocab_size", c->vocab_size, MODEL_MAX_VOCAB))) return s;
    if (!status_is_ok(s = check_range("dim", c->dim, MODEL_MAX_DIM))) return s;
    if (!status_is_ok(s = check_range("n_layers", c->n_layers, MODEL_MAX_LAYERS))) return s;
    if (!status_is_ok(s = check_range("n_heads", c->n_heads, c->dim))) return s;
    if (!status_is_ok(s = check_range("hidden_dim", c->hidden_dim, MODEL_MAX_HIDDEN))) return s;
    if (!status_is_ok(s = check_range("max_position_embeddings", c->max_positions, MODEL_MAX_POSITIONS))) return s;
    if (!status_is_ok(s = check_range("num_labels", c->n_labels, MODEL_MAX_LABELS))) return s;
    if (c->dim % c->n_heads != 0)
        return status_make(STATUS_INVALID, "dim (%lld) must be divisible by n_heads (%lld)", (long long)c->dim,
                           (long long)c->n_heads);
    size_t total;
    if (!config_param_count(c, &total) || total > (size_t)MODEL_MAX_PARAMS)
        return status_make(STATUS_INVALID,
                           "the configuration has too many parameters (vocab_size*dim + n_layers*(4*dim^2 + "
                           "2*dim*hidden_dim) + ... must be <= %lld)",
                           (long long)MODEL_MAX_PARAMS);
    return status_ok();
}

// ---- config.json ----
// Keys of DistilBertConfig / PretrainedConfig that do not change the parameter table.
static const char* const IGNORED_KEYS[] = {
    "activation", "attention_dropout", "dropout", "qa_dropout", "seq_classif_dropout", "initializer_range",
    "pad_token_id", "output_past", "tie_weights_", "architectures", "transformers_version", "torch_dtype",
    "dtype", "_name_or_path", "problem_type", "finetuning_task", "output_hidden_states", "output_attentions",
    "return_dict", "torchscript", "bos_token_id", "eos_token_id", "use_cache",
};

static Status json_int_field(const char* path, const char* key, json_t* v, int64_t* out) {
    if (!json_is_integer(v))
        return status_make(STATUS_INVALID, "%s: %s must be an integer", path, key);
    *out = (int64_t)json_integer_value(v);
    return status_ok();
}

static Status config_from_json(const char* path, json_t* root, ModelConfig* cfg) {
    if (!json_is_object(root)) return status_make(STATUS_INVALID, "%s: the top level must be a JSON object", path);
    static const char* const REQUIRED[] = {"vocab_size", "dim", "n_layers", "n_heads", "hidden_dim",
                                           "max_position_embeddings"};
    int64_t* dest[] = {&cfg->vocab_size, &cfg->dim, &cfg->n_layers, &cfg->n_heads, &cfg->hidden_dim,
                       &cfg->max_positions};
    memset(cfg, 0, sizeof *cfg);
    cfg->n_labels = 2;  // PretrainedConfig default
    bool seen[ARRAY_LEN(REQUIRED)] = {false};
    int64_t num_labels = -1, n_id2label = -1;
    const char* key;
    json_t* v;
    Status s;
    json_object_foreach(root, key, v) {
        bool known = false;
        for (size_t i = 0; i < ARRAY_LEN(REQUIRED); i++) {
            if (!strcmp(key, REQUIRED[i])) {
                if (!status_is_ok(s = json_int_field(path, key, v, dest[i]))) return s;
                seen[i] = known = true;
            }
        }
        if (known) continue;
        if (!strcmp(key, "num_labels")) {
            if (!status_is_ok(s = json_int_field(path, key, v, &num_labels))) return s;
        } else if (!strcmp(key, "id2label") || !strcmp(key, "label2id")) {
            if (!json_is_object(v)) return status_make(STATUS_INVALID, "%s: %s must be a JSON object", path, key);
            int64_t n = (int64_t)json_object_size(v);
            if (n_id2label >= 0 && n != n_id2label)
                return status_make(STATUS_INVALID, "%s: id2label and label2id have different sizes", path);
            n_id2label = n;
        } else if (!strcmp(key, "model_type")) {
            if (!json_is_string(v) || strcmp(json_string_value(v), "distilbert") != 0)
                return status_make(STATUS_INVALID, "%s: model_type must be \"distilbert\"", path);
        } else if (!strcmp(key, "sinusoidal_pos_embds")) {
            // true makes HF freeze position_embeddings (requires_grad=False): a different
            // trainable parameter set, which this table does not model.
            if (!json_is_boolean(v)) return status_make(STATUS_INVALID, "%s: sinusoidal_pos_embds must be a boolean", path);
            if (json_is_true(v))
                return status_make(STATUS_INVALID, "%s: sinusoidal_pos_embds=true is not supported (allowed: false)", path);
        } else {
            bool ignored = false;
            for (size_t i = 0; i < ARRAY_LEN(IGNORED_KEYS) && !ignored; i++) ignored = !strcmp(key, IGNORED_KEYS[i]);
            if (!ignored)
                return status_make(STATUS_INVALID,
                                   "%s: unknown key '%s' (allowed: vocab_size, dim, n_layers, n_heads, hidden_dim, "
                                   "max_position_embeddings, num_labels, id2label, label2id, model_type, "
                                   "sinusoidal_pos_embds and common HF keys that do not change the parameters)",
                                   path, key);
        }
    }
    for (size_t i = 0; i < ARRAY_LEN(REQUIRED); i++)
        if (!seen[i]) return status_make(STATUS_INVALID, "%s: missing key '%s'", path, REQUIRED[i]);
    if (num_labels >= 0 && n_id2label >= 0 && num_labels != n_id2label)
        return status_make(STATUS_INVALID, "%s: num_labels (%lld) disagrees with id2label (%lld entries)", path,
                           (long long)num_labels, (long long)n_id2label);
    if (num_labels >= 0) cfg->n_labels = num_labels;
    else if (n_id2label >= 0) cfg->n_labels = n_id2label;
    s = model_config_validate(cfg);
    if (!status_is_ok(s)) return status_make(STATUS_INVALID, "%s: %s", path, s.msg);
    return status_ok();
}

Status model_config_from_json_file(const char* path, ModelConfig* cfg) {
    uint8_t* data;
    size_t len;
    Status s = read_file(path, &data, &len);
    if (!status_is_ok(s)) return s;
    json_error_t err;
    json_t* root = json_loadb((const char*)data, len, JSON_REJECT_DUPLICATES, &err);
    free(data);
    if (!root)
        return status_make(STATUS_INVALID, "%s: not valid JSON (line %d, column %d: %s)", path, err.line, err.column,
                           err.text);
    s = config_from_json(path, root, cfg);
    json_decref(root);
    return s;
}

// ---- parameter table ----
static void table_add(ParamTable* t, size_t* cap, ParamKind kind, TensorShape shape, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void table_add(ParamTable* t, size_t* cap, ParamKind kind, TensorShape shape, const char* fmt, ...) {
    if (t->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        t->t = xrealloc(t->t, *cap * sizeof *t->t);
    }
    ParamTensor* p = &t->t[t->n++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    CHECK(len > 0 && (size_t)len < sizeof p->name);
    p->shape = shape;
    p->numel = shape_numel(&shape);
    p->kind = kind;
    p->is_embedding = kind == PARAM_EMBEDDING;
    p->offset = t->alloc_numel;
    t->numel += p->numel;
    t->alloc_numel += (p->numel + MODEL_ALIGN_FLOATS - 1) / MODEL_ALIGN_FLOATS * MODEL_ALIGN_FLOATS;
}

static void add_linear(ParamTable* t, size_t* cap, const char* prefix, int64_t out, int64_t in) {
    table_add(t, cap, PARAM_LINEAR_WEIGHT, shape_2d(out, in), "%s.weight", prefix);
    table_add(t, cap, PARAM_LINEAR_BIAS, shape_1d(out), "%s.bias", prefix);
}

static void add_norm(ParamTable* t, size_t* cap, const char* prefix, int64_t d) {
    table_add(t, cap, PARAM_NORM_WEIGHT, shape_1d(d), "%s.weight", prefix);
    table_add(t, cap, PARAM_NORM_BIAS, shape_1d(d), "%s.bias", prefix);
}

Status param_table_build(const ModelConfig* cfg, ParamTable* t) {
    memset(t, 0, sizeof *t);
    Status s = model_config_validate(cfg);
    if (!status_is_ok(s)) return s;
    t->cfg = *cfg;
    const int64_t D = cfg->dim, H = cfg->hidden_dim;
    size_t cap = 0;
    // DistilBertForSequenceClassification.state_dict() order.
    table_add(t, &cap, PARAM_EMBEDDING, shape_2d(cfg->vocab_size, D), "distilbert.embeddings.word_embeddings.weight");
    table_add(t, &cap, PARAM_EMBEDDING, shape_2d(cfg->max_positions, D),
              "distilbert.embeddings.position_embeddings.weight");
    add_norm(t, &cap, "distilbert.embeddings.LayerNorm", D);
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        char pre[96], name[128];
        snprintf(pre, sizeof pre, "distilbert.transformer.layer.%lld", (long long)i);
        static const char* const ATT[] = {"q_lin", "k_lin", "v_lin", "out_lin"};
        for (size_t k = 0; k < ARRAY_LEN(ATT); k++) {
            snprintf(name, sizeof name, "%s.attention.%s", pre, ATT[k]);
            add_linear(t, &cap, name, D, D);
        }
        snprintf(name, sizeof name, "%s.sa_layer_norm", pre);
        add_norm(t, &cap, name, D);
        snprintf(name, sizeof name, "%s.ffn.lin1", pre);
        add_linear(t, &cap, name, H, D);
        snprintf(name, sizeof name, "%s.ffn.lin2", pre);
        add_linear(t, &cap, name, D, H);
        snprintf(name, sizeof name, "%s.output_layer_norm", pre);
        add_norm(t, &cap, name, D);
    }
    add_linear(t, &cap, "pre_classifier", D, D);
    add_linear(t, &cap, "classifier", cfg->n_labels, D);
    size_t expect;
    CHECK(config_param_count(cfg, &expect) && expect == t->numel, "table and closed-form count disagree");
    return status_ok();
}

void param_table_free(ParamTable* t) {
    free(t->t);
    memset(t, 0, sizeof *t);
}

const ParamTensor* param_table_find(const ParamTable* t, const char* name) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->t[i].name, name)) return &t->t[i];
    return NULL;
}

float* param_table_alloc_buffer(const ParamTable* t) {
    size_t bytes;
    CHECK(size_mul_ok(t->alloc_numel, sizeof(float), &bytes));
    float* p = xaligned_alloc(bytes);
    memset(p, 0, bytes);
    return p;
}

#define FILL_CHUNK ((size_t)1 << 20)

// Fills the selected tensors ~ N(mean, std), chunk c of tensor i from stream (i << 32 | c).
static void fill_normal_where(const ParamTable* t, float* buf, uint64_t seed, float mean, float std,
                              const bool* selected) {
    size_t n_items = 0;
    for (size_t i = 0; i < t->n; i++)
        if (selected[i]) n_items += (t->t[i].numel + FILL_CHUNK - 1) / FILL_CHUNK;
    size_t* item_tensor = xmalloc((n_items ? n_items : 1) * sizeof(size_t));
    size_t* item_chunk = xmalloc((n_items ? n_items : 1) * sizeof(size_t));
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (!selected[i]) continue;
        for (size_t c = 0; c * FILL_CHUNK < t->t[i].numel; c++, k++) {
            item_tensor[k] = i;
            item_chunk[k] = c;
        }
    }
#pragma omp parallel for schedule(dynamic)
    for (size_t j = 0; j < n_items; j++) {
        const ParamTensor* p = &t->t[item_tensor[j]];
        size_t start = item_chunk[j] * FILL_CHUNK;
        size_t len = p->numel - start < FILL_CHUNK ? p->numel - start : FILL_CHUNK;
        Rng r;
        rng_init(&r, seed, (uint64_t)item_tensor[j] << 32 | item_chunk[j]);
        rng_fill_normal(&r, buf + p->offset + start, len, mean, std);
    }
    free(item_tensor);
    free(item_chunk);
}

void param_table_fill_normal(const ParamTable* t, float* buf, uint64_t seed, float mean, float std) {
    bool* all = xmalloc(t->n * sizeof(bool));
    for (size_t i = 0; i < t->n; i++) all[i] = true;
    fill_normal_where(t, buf, seed, mean, std, all);
    free(all);
}

void param_table_init_weights(const ParamTable* t, float* buf, uint64_t seed, float std) {
    bool* normal = xmalloc(t->n * sizeof(bool));
    for (size_t i = 0; i < t->n; i++) {
        const ParamTensor* p = &t->t[i];
        normal[i] = p->kind == PARAM_EMBEDDING || p->kind == PARAM_LINEAR_WEIGHT;
        if (!normal[i]) {
            float v = p->kind == PARAM_NORM_WEIGHT ? 1.0f : 0.0f;
            for (size_t j = 0; j < p->numel; j++) buf[p->offset + j] = v;
        }
    }
    fill_normal_where(t, buf, seed, 0.0f, std, normal);
    free(normal);
}

// ---- optimizer state over the table ----
OptimConfig model_optim_tensor_config(const OptimConfig* cfg, bool embeddings_32bit, const ParamTensor* t) {
    OptimConfig c = *cfg;
    // HF Trainer (trainer.py, optim adamw_bnb_8bit): for every nn.Embedding module,
    // bnb GlobalOptimManager.register_module_override(module, "weight", {"optim_bits": 32}),
    // i.e. that tensor takes bitsandbytes' 32-bit path whatever its size.
    if (embeddings_32bit && t->is_embedding) c.min_8bit_size = SIZE_MAX;
    return c;
}

size_t model_optim_estimate_bytes(const ParamTable* t, const Optimizer* o, const OptimConfig* cfg,
                                  bool embeddings_32bit) {
    size_t total = o->shared_state_bytes ? o->shared_state_bytes(cfg) : 0;
    for (size_t i = 0; i < t->n; i++) {
        OptimConfig c = model_optim_tensor_config(cfg, embeddings_32bit, &t->t[i]);
        CHECK(size_add_ok(total, o->state_bytes(&t->t[i].shape, &c), &total));
    }
    return total;
}

void model_optim_init(ModelOptim* mo, const ParamTable* t, const Optimizer* o, const OptimConfig* cfg,
                      bool embeddings_32bit) {
    memset(mo, 0, sizeof *mo);
    mo->optim = o;
    mo->cfg = *cfg;
    mo->embeddings_32bit = embeddings_32bit;
    mo->n = t->n;
    mo->states = xcalloc(t->n ? t->n : 1, sizeof *mo->states);
    for (size_t i = 0; i < t->n; i++) {
        OptimConfig c = model_optim_tensor_config(cfg, embeddings_32bit, &t->t[i]);
        mo->states[i] = o->init(&t->t[i].shape, &c);
    }
}

void model_optim_step(ModelOptim* mo, const ParamTable* t, float* params, const float* grads) {
    CHECK(mo->n == t->n && mo->states);
    for (size_t i = 0; i < t->n; i++) {
        OptimConfig c = model_optim_tensor_config(&mo->cfg, mo->embeddings_32bit, &t->t[i]);
        mo->optim->step(mo->states[i], params + t->t[i].offset, grads + t->t[i].offset, &c);
    }
}

size_t model_optim_shared_bytes(const ModelOptim* mo) {
    return mo->optim->shared_state_bytes ? mo->optim->shared_state_bytes(&mo->cfg) : 0;
}

size_t model_optim_measured_bytes(const ModelOptim* mo) {
    size_t total = model_optim_shared_bytes(mo);
    for (size_t i = 0; i < mo->n; i++) CHECK(size_add_ok(total, optim_state_measured_bytes(mo->states[i]), &total));
    return total;
}

size_t model_optim_measured_elems(const ModelOptim* mo) {
    size_t total = 0;
    for (size_t i = 0; i < mo->n; i++) total += optim_state_measured_elems(mo->states[i]);
    return total;
}

void model_optim_free(ModelOptim* mo) {
    for (size_t i = 0; i < mo->n; i++)
        if (mo->states && mo->states[i]) mo->optim->free(mo->states[i]);
    free(mo->states);
    memset(mo, 0, sizeof *mo);
}

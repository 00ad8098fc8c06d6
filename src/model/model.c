// model.c — DistilBERT-architecture configuration (presets, HF config.json, validation), the
// parameter table with Hugging Face names, weight initialisation, per-tensor optimizer
// state over the table, and the forward/backward pass (see model.h; the op-by-op semantics are
// written out above model_forward). Not here: the layers' arithmetic (layers.c), datasets.
#include "model/model.h"

#include <float.h>
#include <math.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "core/rng.h"

// To add a preset: add one line here (registry name, one-line description, the sizes in
// ModelConfig order: vocab, dim, layers, heads, hidden, positions, labels, then activation,
// pad_token_id, initializer_range (0: 0.02) and sinusoidal_pos_embds). Tests and the
// memory report iterate this table; model_config_validate() must accept the new line.
static const ModelPreset PRESETS[] = {
    {"tiny", "unit tests and end-to-end runs in milliseconds", {64, 32, 2, 2, 64, 32, 2, FFN_ACT_GELU, MODEL_PAD_TOKEN_ID, 0, false, false}},
    {"tiny-wide", "make run's optimizer trade-off: tiny at width 64 (4 heads, FFN 128)",
     {64, 64, 2, 4, 128, 32, 2, FFN_ACT_GELU, MODEL_PAD_TOKEN_ID, 0, false, false}},
    {"small", "quick training runs and benchmarks", {1024, 128, 4, 4, 512, 128, 2, FFN_ACT_GELU, MODEL_PAD_TOKEN_ID, 0, false, false}},
    {"distilbert-base-cased", "the real model's shape (HF distilbert-base-cased, 2 labels)",
     {28996, 768, 6, 12, 3072, 512, 2, FFN_ACT_GELU, MODEL_PAD_TOKEN_ID, 0, false, false}},
};

size_t model_preset_count(void) { return ARRAY_LEN(PRESETS); }

// The step's GEMMs in the order layers.c / model.c run them (per layer: attention then FFN;
// forward: linear y = x @ W^T is nt (N, OC, IC); backward: dx = dy @ W is nn (N, IC, OC) and
// dW = dy^T @ x is tn (OC, IC, N); per (batch, head), dh = D / heads: scores Q K^T nt (T, T, dh),
// context P V nn (T, dh, T); backward dP = dctx V^T nt (T, T, dh), dV = P^T dctx tn (T, dh, T),
// dQ = dS K nn (T, dh, T), dK = dS^T Q tn (T, dh, T)). Identical shapes are merged.
size_t model_step_gemms(const ModelConfig* cfg, int B, int T, ModelGemm* out) {
    const int N = B * T, D = (int)cfg->dim, F = (int)cfg->hidden_dim, L = (int)cfg->n_labels;
    const int dh = (int)(cfg->dim / cfg->n_heads);
    const long long layers = cfg->n_layers, heads = (long long)B * cfg->n_heads * layers;
    const struct {
        const char* what;
        bool ta, tb;
        int M, N, K;
        long long count;
        bool per_head;
    } ALL[] = {
        {"q/k/v/out forward", false, true, N, D, D, 4 * layers, false},
        {"lin1 forward", false, true, N, F, D, layers, false},
        {"lin2 forward", false, true, N, D, F, layers, false},
        {"attention scores QK^T", false, true, T, T, dh, heads, true},
        {"attention context PV", false, false, T, dh, T, heads, true},
        {"q/k/v/out input grad", false, false, N, D, D, 4 * layers, false},
        {"q/k/v/out weight grad", true, false, D, D, N, 4 * layers, false},
        {"lin2 input grad", false, false, N, F, D, layers, false},
        {"lin2 weight grad", true, false, D, F, N, layers, false},
        {"lin1 input grad", false, false, N, D, F, layers, false},
        {"lin1 weight grad", true, false, F, D, N, layers, false},
        {"attention dP = dctx V^T", false, true, T, T, dh, heads, true},
        {"attention dV, dK", true, false, T, dh, T, 2 * heads, true},
        {"attention dQ", false, false, T, dh, T, heads, true},
        {"pre_classifier forward", false, true, B, D, D, 1, false},
        {"classifier forward", false, true, B, L, D, 1, false},
        {"classifier input grad", false, false, B, D, L, 1, false},
        {"classifier weight grad", true, false, L, D, B, 1, false},
        {"pre_classifier input grad", false, false, B, D, D, 1, false},
        {"pre_classifier weight grad", true, false, D, D, B, 1, false},
    };
    size_t n = 0;
    for (size_t i = 0; i < ARRAY_LEN(ALL); i++) {
        size_t k = 0;
        while (k < n && !(out[k].ta == ALL[i].ta && out[k].tb == ALL[i].tb && out[k].M == ALL[i].M &&
                          out[k].N == ALL[i].N && out[k].K == ALL[i].K && out[k].per_head == ALL[i].per_head))
            k++;
        if (k < n) {
            out[k].count += ALL[i].count;
            continue;
        }
        CHECK(n < MODEL_STEP_GEMMS_MAX);
        out[n++] = (ModelGemm){ALL[i].what, ALL[i].ta, ALL[i].tb, ALL[i].M, ALL[i].N, ALL[i].K, ALL[i].count,
                               ALL[i].per_head};
    }
    return n;
}

ModelStepCost model_step_cost(const ModelConfig* cfg, int B, int T) {
    ModelGemm g[MODEL_STEP_GEMMS_MAX];
    const size_t n = model_step_gemms(cfg, B, T, g);
    ModelStepCost c = {0};
    for (size_t i = 0; i < n; i++) c.gemm_flop += 2.0 * g[i].M * (double)g[i].N * (double)g[i].K * (double)g[i].count;
    const double D = (double)cfg->dim, Hd = (double)cfg->hidden_dim, L = (double)cfg->n_labels;
    const double layers = (double)cfg->n_layers;
    const double params = (double)cfg->vocab_size * D + (double)cfg->max_positions * D + 2 * D +
                          layers * (4 * (D * D + D) + 2 * D * Hd + Hd + D + 4 * D) + (D * D + D) + (L * D + L);
    c.min_bytes_model = params * (4 + 4 + 4);  // weights read by forward and backward, gradient written
    c.min_bytes_optim = params * 28;           // AdamW: read p, g, m, v; write p, m, v
    c.min_bytes = c.min_bytes_model + c.min_bytes_optim;
    return c;
}

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
static Status check_range_from(const char* field, int64_t v, int64_t min, int64_t max) {
    if (v < min || v > max)
        return status_make(STATUS_INVALID, "%s must be an integer in [%lld, %lld] (got %lld)", field, (long long)min,
                           (long long)max, (long long)v);
    return status_ok();
}
static Status check_range(const char* field, int64_t v, int64_t max) { return check_range_from(field, v, 1, max); }

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
    // 0 layers: DistilBertConfig accepts it (the embeddings' LayerNorm output goes straight to the head)
    if (!status_is_ok(s = check_range_from("n_layers", c->n_layers, 0, MODEL_MAX_LAYERS))) return s;
    if (!status_is_ok(s = check_range("n_heads", c->n_heads, c->dim))) return s;
    if (!status_is_ok(s = check_range("hidden_dim", c->hidden_dim, MODEL_MAX_HIDDEN))) return s;
    if (!status_is_ok(s = check_range("max_position_embeddings", c->max_positions, MODEL_MAX_POSITIONS))) return s;
    if (!status_is_ok(s = check_range("num_labels", c->n_labels, MODEL_MAX_LABELS))) return s;
    if (c->dim % c->n_heads != 0)
        return status_make(STATUS_INVALID, "dim (%lld) must be divisible by n_heads (%lld)", (long long)c->dim,
                           (long long)c->n_heads);
    if ((int)c->activation < 0 || (int)c->activation >= (int)FFN_ACT_COUNT)
        return status_make(STATUS_INVALID, "activation must be %s", ffn_activation_names_list());
    if (c->pad_token_id < -1 || c->pad_token_id >= c->vocab_size)
        return status_make(STATUS_INVALID, "pad_token_id (%lld) must be -1 (none) or in [0, vocab_size)",
                           (long long)c->pad_token_id);
    if (!(c->initializer_range >= 0) || !isfinite(c->initializer_range))
        return status_make(STATUS_INVALID, "initializer_range must be a finite number >= 0 (0: 0.02)");
    if (c->regression && c->n_labels != 1)
        return status_make(STATUS_INVALID, "a regression model has num_labels 1 (got %lld)", (long long)c->n_labels);
    size_t total;
    if (!config_param_count(c, &total) || total > (size_t)MODEL_MAX_PARAMS)
        return status_make(STATUS_INVALID,
                           "the configuration has too many parameters (vocab_size*dim + n_layers*(4*dim^2 + "
                           "2*dim*hidden_dim) + ... must be <= %lld)",
                           (long long)MODEL_MAX_PARAMS);
    return status_ok();
}

// ---- config.json ----
// Keys of DistilBertConfig / PretrainedConfig that do not change the parameter table. The ones
// that change the computation (activation, the dropouts, pad_token_id, initializer_range,
// problem_type) are ignored by the shape-only reader (`trainbench memory`) and checked by the
// training reader (semantics_check below).
static const char* const IGNORED_KEYS[] = {
    "activation", "attention_dropout", "dropout", "qa_dropout", "seq_classif_dropout", "initializer_range",
    "pad_token_id", "output_past", "tie_weights_", "tie_word_embeddings", "architectures", "transformers_version",
    "torch_dtype", "dtype", "_name_or_path", "problem_type", "finetuning_task", "output_hidden_states",
    "output_attentions", "return_dict", "torchscript", "bos_token_id", "eos_token_id", "use_cache",
};

// DistilBertConfig's dropout keys, in DropoutConfig field order, and their defaults there
// (transformers 5.24 configuration_distilbert.py: dropout 0.1, attention_dropout 0.1,
// seq_classif_dropout 0.2), which a config.json without the key gets.
static const char* const DROPOUT_KEYS[] = {"dropout", "attention_dropout", "seq_classif_dropout"};
static const double DROPOUT_DEFAULTS[] = {0.1, 0.1, 0.2};

static Status json_int_field(const char* path, const char* key, json_t* v, int64_t* out) {
    if (!json_is_integer(v))
        return status_make(STATUS_INVALID, "%s: %s must be an integer", path, key);
    *out = (int64_t)json_integer_value(v);
    return status_ok();
}

// The settings of a DistilBertConfig that change what DistilBertForSequenceClassification
// computes in training, beyond its shape. What this model implements: GELU, ReLU or SiLU, the three dropouts,
// any padding_idx (or none), HF's N(0, initializer_range) init, single-label cross-entropy. Anything else is refused by
// name, so a config.json never trains silently as something it does not describe. Keys that
// do not change the math stay ignored: qa_dropout (only DistilBertForQuestionAnswering uses
// it), tie_word_embeddings (save_pretrained writes true, but the sequence classifier has no
// output embedding to tie: its state_dict has no shared tensors), dtype/torch_dtype (master
// weights are fp32 in every precision mode), architectures, id2label names, versions.
// The settings beyond the shape a ModelConfig holds, read from config.json's value v (NULL:
// the key is absent). Each returns false, leaving *out, for a value transformers would refuse or
// we do not implement; else it sets *out (an absent key leaves the default). config_from_json
// takes the valid ones, semantics_check refuses the others.
static bool read_activation(json_t* v, FfnActivation* out) {
    return !v || (json_is_string(v) && ffn_activation_from_name(json_string_value(v), out));
}

static bool read_pad_token_id(json_t* v, int64_t vocab_size, int64_t* out) {
    if (!v) return true;
    if (json_is_null(v)) {
        *out = -1;  // no padding_idx
        return true;
    }
    if (!json_is_integer(v)) return false;
    const int64_t p = (int64_t)json_integer_value(v);
    if (p < -vocab_size || p >= vocab_size) return false;  // nn.Embedding's range
    *out = p < 0 ? vocab_size + p : p;                      // nn.Embedding: padding_idx += num_embeddings
    return true;
}

static bool read_initializer_range(json_t* v, double* out) {
    if (!v) return true;
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v))) return false;
    *out = json_number_value(v) == 0.02 ? 0 : json_number_value(v);  // 0: DistilBertConfig's 0.02
    return true;
}

// problem_type as DistilBertForSequenceClassification decides it: null -> "regression" when
// num_labels is 1, else single-label classification (integer labels); false for other strings
static bool read_problem_type(const json_t* v, int64_t n_labels, bool* regression) {
    *regression = n_labels == 1;
    if (!v || json_is_null(v)) return true;
    if (!json_is_string(v)) return false;
    if (!strcmp(json_string_value(v), "single_label_classification")) {
        *regression = false;
        return true;
    }
    if (!strcmp(json_string_value(v), "regression")) {
        *regression = true;
        return true;
    }
    return false;
}

static Status semantics_check(const char* path, json_t* root, int64_t n_labels, int64_t vocab_size) {
    FfnActivation act;
    int64_t pad;
    double init;
    json_t* v;
    v = json_object_get(root, "activation");
    if (!read_activation(v, &act)) {
        char got[64];
        if (json_is_string(v)) snprintf(got, sizeof got, "\"%.40s\"%s", json_string_value(v),
                                        strlen(json_string_value(v)) > 40 ? "..." : "");
        else snprintf(got, sizeof got, "(a JSON value that is not a string)");
        return status_make(STATUS_INVALID,
                           "%s: activation %s is not implemented: it must be one of %s (transformers' other ACT2FN "
                           "names are not)", path, got, ffn_activation_names_list());
    }
    // the three dropouts are implemented (dropout.h): probabilities in [0, 1], read by
    // model_dropout_from_json_file
    for (size_t i = 0; i < ARRAY_LEN(DROPOUT_KEYS); i++) {
        v = json_object_get(root, DROPOUT_KEYS[i]);
        if (v && (!json_is_number(v) || !(json_number_value(v) >= 0.0 && json_number_value(v) <= 1.0)))
            return status_make(STATUS_INVALID, "%s: %s must be a number in [0, 1] (a dropout probability)", path,
                               DROPOUT_KEYS[i]);
    }
    // (vocab_size < 1: model_config_validate names vocab_size itself, not the empty range here)
    if (vocab_size >= 1 && !read_pad_token_id(json_object_get(root, "pad_token_id"), vocab_size, &pad))
        return status_make(STATUS_INVALID,
                           "%s: pad_token_id must be null or an integer in [-vocab_size, vocab_size) = [%lld, %lld) "
                           "(the word embedding's padding_idx; nn.Embedding refuses others)", path,
                           (long long)-vocab_size, (long long)vocab_size);
    if (!read_initializer_range(json_object_get(root, "initializer_range"), &init))
        return status_make(STATUS_INVALID, "%s: initializer_range must be a finite number > 0 (the init's std)", path);
    bool regression;
    if (!read_problem_type(json_object_get(root, "problem_type"), n_labels, &regression))
        return status_make(STATUS_INVALID,
                           "%s: problem_type must be null, \"single_label_classification\" (cross-entropy) or "
                           "\"regression\" (MSELoss; with num_labels 1, which null also means); "
                           "\"multi_label_classification\" needs float multi-hot labels, which trainbench "
                           "datasets do not carry", path);
    if (regression && n_labels != 1)
        return status_make(STATUS_INVALID,
                           "%s: problem_type \"regression\" needs num_labels 1 (got %lld): with more labels "
                           "transformers' MSELoss broadcasts the (batch,) labels against (batch, num_labels) "
                           "logits, which is not implemented", path, (long long)n_labels);
    return status_ok();
}

static Status config_from_json(const char* path, json_t* root, ModelConfig* cfg, bool for_training) {
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
            if (num_labels < 1)  // not "absent": a negative count is a mistake, as 0 is
                return status_make(STATUS_INVALID, "%s: num_labels must be >= 1 (got %lld; 1 means regression)", path,
                                   (long long)num_labels);
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
            // true: the position table's init (transformers >= 5 keeps it trainable; 4.x froze it)
            if (!json_is_boolean(v)) return status_make(STATUS_INVALID, "%s: sinusoidal_pos_embds must be a boolean", path);
            cfg->sinusoidal_pos_embds = json_is_true(v);
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
    // settings beyond the shape, taken when valid (semantics_check refuses the others in training)
    (void)read_activation(json_object_get(root, "activation"), &cfg->activation);
    (void)read_pad_token_id(json_object_get(root, "pad_token_id"), cfg->vocab_size, &cfg->pad_token_id);
    (void)read_initializer_range(json_object_get(root, "initializer_range"), &cfg->initializer_range);
    (void)read_problem_type(json_object_get(root, "problem_type"), cfg->n_labels, &cfg->regression);
    if (for_training && !status_is_ok(s = semantics_check(path, root, cfg->n_labels, cfg->vocab_size))) return s;
    s = model_config_validate(cfg);
    if (!status_is_ok(s)) return status_make(STATUS_INVALID, "%s: %s", path, s.msg);
    return status_ok();
}

// A config.json file parsed (duplicate keys rejected); *root owned by the caller.
static Status load_config_json(const char* path, json_t** root) {
    uint8_t* data;
    size_t len;
    Status s = read_file(path, &data, &len);
    if (!status_is_ok(s)) return s;
    json_error_t err;
    *root = json_loadb((const char*)data, len, JSON_REJECT_DUPLICATES, &err);
    free(data);
    if (!*root)
        return status_make(STATUS_INVALID, "%s: not valid JSON (line %d, column %d: %s)", path, err.line, err.column,
                           err.text);
    return status_ok();
}

static Status config_from_json_file(const char* path, ModelConfig* cfg, bool for_training) {
    json_t* root;
    Status s = load_config_json(path, &root);
    if (!status_is_ok(s)) return s;
    s = config_from_json(path, root, cfg, for_training);
    json_decref(root);
    return s;
}

Status model_config_from_json_file(const char* path, ModelConfig* cfg) {
    return config_from_json_file(path, cfg, false);
}

Status model_config_from_json_file_for_training(const char* path, ModelConfig* cfg) {
    return config_from_json_file(path, cfg, true);
}

Status model_dropout_from_json_file(const char* path, DropoutConfig* d) {
    json_t* root;
    Status s = load_config_json(path, &root);
    if (!status_is_ok(s)) return s;
    double* dest[] = {&d->hidden, &d->attention, &d->classifier};
    for (size_t i = 0; i < ARRAY_LEN(DROPOUT_KEYS); i++) {
        json_t* v = json_is_object(root) ? json_object_get(root, DROPOUT_KEYS[i]) : NULL;
        if (!v) {
            *dest[i] = DROPOUT_DEFAULTS[i];
        } else if (json_is_number(v) && json_number_value(v) >= 0.0 && json_number_value(v) <= 1.0) {
            *dest[i] = json_number_value(v);
        } else {
            json_decref(root);
            return status_make(STATUS_INVALID, "%s: %s must be a number in [0, 1] (a dropout probability)", path,
                               DROPOUT_KEYS[i]);
        }
    }
    json_decref(root);
    return status_ok();
}

json_t* model_config_to_json(const ModelConfig* c) {
    json_t* o = json_object();
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "dim", json_integer(c->dim));
    json_object_set_new(o, "n_layers", json_integer(c->n_layers));
    json_object_set_new(o, "n_heads", json_integer(c->n_heads));
    json_object_set_new(o, "hidden_dim", json_integer(c->hidden_dim));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_positions));
    json_object_set_new(o, "num_labels", json_integer(c->n_labels));
    // only when not the default GELU: results and checkpoints of GELU runs keep the form they
    // had before ReLU existed (a resume compares this object key by key)
    if (c->activation != FFN_ACT_GELU) json_object_set_new(o, "activation", json_string(ffn_activation_name(c->activation)));
    if (c->pad_token_id != MODEL_PAD_TOKEN_ID)
        json_object_set_new(o, "pad_token_id", c->pad_token_id < 0 ? json_null() : json_integer(c->pad_token_id));
    if (c->initializer_range > 0) json_object_set_new(o, "initializer_range", json_real(c->initializer_range));
    if (c->sinusoidal_pos_embds) json_object_set_new(o, "sinusoidal_pos_embds", json_true());
    if (c->regression) json_object_set_new(o, "problem_type", json_string("regression"));
    return o;
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
    const ParamTensor* w = param_table_find(t, "distilbert.embeddings.word_embeddings.weight");
    const int64_t pad = t->cfg.pad_token_id;
    if (w && pad >= 0 && pad < t->cfg.vocab_size)  // padding_idx: its row zeroed
        memset(buf + w->offset + (size_t)pad * (size_t)t->cfg.dim, 0, (size_t)t->cfg.dim * sizeof(float));
    const ParamTensor* pos = param_table_find(t, "distilbert.embeddings.position_embeddings.weight");
    if (pos && t->cfg.sinusoidal_pos_embds) model_sinusoidal_table(buf + pos->offset, t->cfg.max_positions, t->cfg.dim);
}

void model_sinusoidal_table(float* out, int64_t n_pos, int64_t dim) {
    for (int64_t p = 0; p < n_pos; p++)
        for (int64_t j = 0; j < dim; j++) {
            // numpy: pos / np.power(10000, 2 * (j // 2) / dim), then np.sin / np.cos, float64
            const double angle = (double)p / pow(10000.0, (double)(2 * (j / 2)) / (double)dim);
            out[p * dim + j] = (float)(j % 2 == 0 ? sin(angle) : cos(angle));
        }
}

double model_init_std(const ModelConfig* c) { return c->initializer_range > 0 ? c->initializer_range : 0.02; }

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

// The tensors in the order the optimizer steps them: first those large enough for the
// kernels' parallel loops (OPTIM_PAR_MIN elements, optim.h), back to back,
// then the small ones, one tensor per thread at a time. Each tensor's step reads and writes only
// its own parameters, gradients and state, so the order changes no bit; in table order a small
// tensor (a bias, a LayerNorm) between two large ones left the second thread idle long enough
// to fall asleep, and every large tensor after one paid for waking it (small bf16 step: 4 such
// gaps per step, ~100 us each, plus the wake-up).
static void optim_order(const ParamTable* t, size_t* order /* (t->n) */) {
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t j = 0; j < t->n; j++)
            if ((t->t[j].numel >= OPTIM_PAR_MIN) == (pass == 0)) order[k++] = j;
}

void model_optim_init(ModelOptim* mo, const ParamTable* t, const Optimizer* o, const OptimConfig* cfg,
                      bool embeddings_32bit) {
    model_optim_init_owned(mo, t, o, cfg, embeddings_32bit, NULL, 0);
}

void model_optim_init_owned(ModelOptim* mo, const ParamTable* t, const Optimizer* o, const OptimConfig* cfg,
                            bool embeddings_32bit, const int* owner, int rank) {
    memset(mo, 0, sizeof *mo);
    mo->optim = o;
    mo->cfg = *cfg;
    mo->embeddings_32bit = embeddings_32bit;
    mo->n = t->n;
    mo->states = xcalloc(t->n ? t->n : 1, sizeof *mo->states);
    mo->order = xmalloc((t->n ? t->n : 1) * sizeof *mo->order);
    optim_order(t, mo->order);
    for (size_t i = 0; i < t->n; i++) {
        if (owner && owner[i] != rank) continue;  // another rank's shard (ZeRO-1)
        OptimConfig c = model_optim_tensor_config(cfg, embeddings_32bit, &t->t[i]);
        mo->states[i] = o->init(&t->t[i].shape, &c);
    }
}

size_t model_optim_estimate_bytes_owned(const ParamTable* t, const Optimizer* o, const OptimConfig* cfg,
                                        bool embeddings_32bit, const int* owner, int rank) {
    size_t total = o->shared_state_bytes ? o->shared_state_bytes(cfg) : 0;  // every rank holds the shared maps
    for (size_t i = 0; i < t->n; i++) {
        if (owner && owner[i] != rank) continue;
        OptimConfig c = model_optim_tensor_config(cfg, embeddings_32bit, &t->t[i]);
        CHECK(size_add_ok(total, o->state_bytes(&t->t[i].shape, &c), &total));
    }
    return total;
}

Status model_optim_shard(const ParamTable* t, const Optimizer* o, const OptimConfig* cfg, bool embeddings_32bit,
                         int ranks, int* owner) {
    if (ranks < 1 || (size_t)ranks > t->n)
        return status_make(STATUS_INVALID, "%d ranks for %zu parameter tensors: ZeRO-1 shards whole tensors, so "
                           "1 <= ranks <= %zu", ranks, t->n, t->n);
    uint64_t left = 0;  // state bytes from the current rank's first tensor onward
    for (size_t i = 0; i < t->n; i++) {
        OptimConfig c = model_optim_tensor_config(cfg, embeddings_32bit, &t->t[i]);
        left += o->state_bytes(&t->t[i].shape, &c);
    }
    int r = 0;
    uint64_t mine = 0;  // rank r's bytes so far
    for (size_t i = 0; i < t->n; i++) {
        OptimConfig c = model_optim_tensor_config(cfg, embeddings_32bit, &t->t[i]);
        owner[i] = r;
        mine += o->state_bytes(&t->t[i].shape, &c);
        const size_t tensors_left = t->n - 1 - i;
        const int ranks_left = ranks - 1 - r;
        if (ranks_left > 0 && (mine * (uint64_t)(ranks - r) >= left || tensors_left == (size_t)ranks_left)) {
            left -= mine;  // the next rank starts here
            mine = 0;
            r++;
        }
    }
    CHECK(r == ranks - 1);
    return status_ok();
}

int64_t model_optim_steps_taken(const ModelOptim* mo) {
    for (size_t i = 0; i < mo->n; i++)
        if (mo->states[i]) return mo->states[i]->step;
    ABORT("model_optim_steps_taken: this process holds no optimizer state");
}

bool param_gets_weight_decay(const ParamTensor* t) {
    // The rule by kind equals the name rule for every name this table has: LayerNorm modules
    // (embeddings.LayerNorm, sa_layer_norm, output_layer_norm) and names containing "bias".
    return t->kind == PARAM_EMBEDDING || t->kind == PARAM_LINEAR_WEIGHT;
}

static void optim_step_tensor(ModelOptim* mo, const ParamTable* t, size_t i, float* params, const float* g,
                              float g_scale) {
    OptimConfig c = model_optim_tensor_config(&mo->cfg, mo->embeddings_32bit, &t->t[i]);
    if (mo->decay_groups && !param_gets_weight_decay(&t->t[i])) c.weight_decay = 0.0;
    if (g_scale == 1.0f)
        mo->optim->step(mo->states[i], params + t->t[i].offset, g, &c);
    else
        mo->optim->step_scaled(mo->states[i], params + t->t[i].offset, g, g_scale, &c);
}

void model_optim_step(ModelOptim* mo, const ParamTable* t, float* params, const float* grads) {
    model_optim_step_scaled(mo, t, params, (float*)grads, 1.0f);  // g_scale 1: grads are only read
}

static void optim_step_one(ModelOptim* mo, const ParamTable* t, size_t i, float* params, float* grads,
                           float g_scale) {
    if (!mo->states[i]) return;         // held by another rank (ZeRO-1)
    float* g = grads + t->t[i].offset;  // (numel)
    if (g_scale != 1.0f && !mo->optim->step_scaled) {
        const size_t n = t->t[i].numel;
#pragma omp parallel for schedule(static) if (n > (1u << 16))
        for (size_t j = 0; j < n; j++) g[j] *= g_scale;  // torch's g.mul_(coef)
        optim_step_tensor(mo, t, i, params, g, 1.0f);
    } else {
        optim_step_tensor(mo, t, i, params, g, g_scale);
    }
}

void model_optim_step_scaled(ModelOptim* mo, const ParamTable* t, float* params, float* grads, float g_scale) {
    CHECK(mo->n == t->n && mo->states);
    size_t k = 0;
    for (; k < t->n && t->t[mo->order[k]].numel >= OPTIM_PAR_MIN; k++)
        optim_step_one(mo, t, mo->order[k], params, grads, g_scale);  // each on the whole team
    // the small ones: one tensor per thread at a time (their kernels stay on one thread)
    const size_t k0 = k;
#pragma omp parallel for schedule(dynamic, 1) if (t->n - k0 > 1)
    for (size_t j = k0; j < t->n; j++) optim_step_one(mo, t, mo->order[j], params, grads, g_scale);
}

size_t model_optim_shared_bytes(const ModelOptim* mo) {
    return mo->optim->shared_state_bytes ? mo->optim->shared_state_bytes(&mo->cfg) : 0;
}

size_t model_optim_measured_bytes(const ModelOptim* mo) {
    size_t total = model_optim_shared_bytes(mo);
    for (size_t i = 0; i < mo->n; i++)
        if (mo->states[i]) CHECK(size_add_ok(total, optim_state_measured_bytes(mo->states[i]), &total));
    return total;
}

size_t model_optim_measured_elems(const ModelOptim* mo) {
    size_t total = 0;
    for (size_t i = 0; i < mo->n; i++)
        if (mo->states[i]) total += optim_state_measured_elems(mo->states[i]);
    return total;
}

void model_optim_free(ModelOptim* mo) {
    for (size_t i = 0; i < mo->n; i++)
        if (mo->states && mo->states[i]) mo->optim->free(mo->states[i]);
    free(mo->states);
    free(mo->order);
    memset(mo, 0, sizeof *mo);
}

// ==== forward / backward ====
//
// DistilBertForSequenceClassification (transformers, attn_implementation="eager") under
// torch.autocast("cpu", dtype=low) for the mixed modes. In training with ModelBatch.dropout
// (dropout.h), four dropouts run as in transformers: D(x) = R_dt(x * noise) in the input's dtype
// dt, after the embeddings' LayerNorm (fp32), on P before the PV product (P's dtype), on lin2's
// output before the residual add (low), on the classifier's input after the ReLU (low); their
// backwards multiply by the same noise. None when ModelBatch.dropout is NULL (evaluation).
// R(.) rounds to the mode's low dtype (identity in fp32); everything else is fp32. N = B*T tokens.
//   e   = Wtok[ids] + Wpos[t]                          fp32 (embedding is in no autocast list)
//   h0  = LayerNorm_emb(e)                              fp32
//   key mask: materialized only when some attention_mask value is 0 (transformers'
//   create_bidirectional_mask returns None otherwise): 0 / finfo(float32).min per key, fp32.
//   per layer, x = h_{l}:
//     q, k, v = R(R(x) R(W)^T + R(b))                   addmm, one rounding
//     S   = R(R(q_h k_h^T) * float(dh^-0.5))            bmm, then mul in the scores' dtype
//     P   = softmax(S + mask) fp32   | R(softmax(S)) when no mask
//     ctx = R(R(P) v_h) ; ao = R(R(ctx) R(Wo)^T + R(bo))
//     r1  = ao + x                                      fp32 (mixed add promotes)
//     h1  = LayerNorm_sa(r1)                            fp32
//     f1  = R(R(h1) R(W1)^T + R(b1)) ; g = R(act(f1))   act (GELU, ReLU or SiLU) runs in the dtype it receives
//     r2  = R(g R(W2)^T + R(b2)) + h1                   fp32
//     h2  = LayerNorm_out(r2)                           fp32
//   pooled = h_L[:, 0] ; pre = R(R(pooled) R(Wpre)^T + R(bpre)) ; act = relu(pre)
//   logits = R(act R(Wcls)^T + R(bcls)) ; loss = cross_entropy(float(logits)) fp32
// Backward (each op in its forward dtype; layers.h gives each op's formulas):
//   dlogits fp32 from cross-entropy, then R (logits were low)          [activation point]
//   at r2 and r1: the fp32 gradient goes on unrounded to the fp32 input and rounded to the
//   low branch (f2, ao)                                                [activation points]
//   with a mask, dS from the fp32 softmax backward is rounded for the low scores
//                                                                      [activation point]
//   weight/bias gradients of every linear: R(...) then added to the fp32 grads
//                                                                      [parameter points]
//   the three q/k/v input gradients and the residual gradient are summed in fp32;
//   LayerNorm and embedding gradients are fp32; the word-embedding row cfg.pad_token_id
//   gets no gradient (padding_idx).

typedef struct {
    size_t Wq, bq, Wk, bk, Wv, bv, Wo, bo;
    size_t ln1_w, ln1_b;  // sa_layer_norm
    size_t W1, b1, W2, b2;
    size_t ln2_w, ln2_b;  // output_layer_norm
} LayerOffsets;

typedef struct {
    AttentionActs att;     // q, k, v (N, D), p (B, H, T, T), ctx (N, D)
    float* r1;             // (N, D) ao + x: sa_layer_norm input
    float *mean1, *rstd1;  // (N)
    float* h1;             // (N, D) sa_layer_norm output
    float* f1;             // (N, Hd) lin1 output (low)
    float* g;              // (N, Hd) act(f1) (low): GELU, ReLU or SiLU
    float* r2;             // (N, D) f2 + h1: output_layer_norm input
    float *mean2, *rstd2;  // (N)
    float* h2;             // (N, D) the layer's output
} LayerActs;

struct ModelWorkspace {
    ModelConfig cfg;
    int max_B, max_T;
    // parameter offsets (floats into a table buffer of alloc_numel floats)
    size_t alloc_numel;
    size_t wte, wpe, lne_w, lne_b, Wpre, bpre, Wcls, bcls;
    LayerOffsets* lo;  // (n_layers)
    // activations (carved from one arena, sized for max_B x max_T)
    float* arena;
    size_t arena_floats;
    float* emb;                  // (N, D) word + position embeddings
    float *emb_mean, *emb_rstd;  // (N)
    float* h0;                   // (N, D) embeddings LayerNorm output
    LayerActs* la;               // (n_layers)
    ClassifierActs cls;          // pooled, pre, act (B, D)
    float* logits;               // (B, L)
    float* logp;                 // (B, L)
    float* key_mask;             // (B, T) additive mask (used only when has_mask)
    // gradient buffers of the backward
    float* dh;        // (N, D) gradient of the current hidden state (fp32)
    float* dr;        // (N, D) gradient of a LayerNorm input (fp32)
    float* dlow;      // (N, D) its copy rounded for the low branch
    float* dh1;       // (N, D)
    float* dg;        // (N, Hd)
    float* df1;       // (N, Hd)
    float* att_work;  // attention_work_floats(B, T, D)
    float* cls_work;  // (2 * B * D)
    float* dlogits;   // (B, L)
    // dropout (training only; dropout.h): one arena allocated by the first forward that drops,
    // sized for max_B x max_T. Masks (uint8, 1 = kept) per site, the embeddings' dropped output
    // (the input of layer 0) and each layer's dropped probabilities (AttentionActs.pd).
    uint8_t* drop_arena;
    size_t drop_bytes;
    uint8_t* keep_emb;   // (N, D)
    uint8_t** keep_att;  // (n_layers) each (B, H, T, T)
    uint8_t** keep_ffn;  // (n_layers) each (N, D)
    uint8_t* keep_cls;   // (B, D)
    float* h0d;          // (N, D)
    float** pd;          // (n_layers) each (B, H, T, T)
    DropoutConfig drop;  // the last forward's probabilities (all 0: none ran)
    // the batch of the last forward (copied)
    int64_t* ids;     // (B, T)
    int32_t* labels;  // (B)
    int B, T;
    bool has_mask;
    double label_smoothing;  // HF Trainer's label_smoothing_factor (0: the model's own loss)
    float* ls_work;          // (max_B) label smoothing's per-example sums
    const PrecisionMode* mode;  // of the last forward; NULL before the first
    // low modes: the kept low copies (LowCopy, layers.h) of every linear's weight and of the fp32
    // activations that feed GEMMs, converted once per forward and reused by the backward. One
    // arena (low_bytes, allocated by the first low-mode forward, sized for max_B x max_T) and
    // the table registered with the layer context at every low-mode forward (kept_register).
    uint8_t* low_arena;
    size_t low_bytes;
    LowCopy* kept;  // (kept_cap)
    int kept_cap;
    LayerCtx ctx;
    bool ctx_ready;
    PhaseClock phases;  // charged while running (train_step begins and ends it)
};

PhaseClock* model_workspace_phases(ModelWorkspace* ws) { return &ws->phases; }

static size_t must_find(const ParamTable* t, const char* name) {
    const ParamTensor* p = param_table_find(t, name);
    CHECK(p != NULL, "parameter table has no tensor %s", name);
    return p->offset;
}

// model_workspace_new, or with bytes_only only the size it would allocate (*bytes_only; the
// arena and id/label buffers, not the GEMM scratch), nothing kept.
static Status workspace_make(const ParamTable* t, int max_B, int max_T, ModelWorkspace** out, size_t* bytes_only) {
    *out = NULL;
    const ModelConfig* c = &t->cfg;
    if (max_B < 1) return status_make(STATUS_INVALID, "batch size must be >= 1 (got %d)", max_B);
    if (max_T < 1 || max_T > c->max_positions)
        return status_make(STATUS_INVALID, "sequence length must be in [1, %lld] (max_position_embeddings) (got %d)",
                           (long long)c->max_positions, max_T);
    CHECK(c->dim <= INT32_MAX && c->hidden_dim <= INT32_MAX && c->n_heads <= INT32_MAX && c->n_labels <= INT32_MAX);
    ModelWorkspace* ws = xcalloc(1, sizeof *ws);
    ws->cfg = *c;
    ws->max_B = max_B;
    ws->max_T = max_T;
    ws->alloc_numel = t->alloc_numel;
    ws->wte = must_find(t, "distilbert.embeddings.word_embeddings.weight");
    ws->wpe = must_find(t, "distilbert.embeddings.position_embeddings.weight");
    ws->lne_w = must_find(t, "distilbert.embeddings.LayerNorm.weight");
    ws->lne_b = must_find(t, "distilbert.embeddings.LayerNorm.bias");
    ws->Wpre = must_find(t, "pre_classifier.weight");
    ws->bpre = must_find(t, "pre_classifier.bias");
    ws->Wcls = must_find(t, "classifier.weight");
    ws->bcls = must_find(t, "classifier.bias");
    const size_t Ly = (size_t)c->n_layers;
    ws->lo = xcalloc(Ly, sizeof *ws->lo);
    ws->la = xcalloc(Ly, sizeof *ws->la);
    for (size_t l = 0; l < Ly; l++) {
        char n[160];
        LayerOffsets* o = &ws->lo[l];
#define OFF(field, suffix)                                                             \
    snprintf(n, sizeof n, "distilbert.transformer.layer.%zu.%s", l, suffix);            \
    o->field = must_find(t, n)
        OFF(Wq, "attention.q_lin.weight"); OFF(bq, "attention.q_lin.bias");
        OFF(Wk, "attention.k_lin.weight"); OFF(bk, "attention.k_lin.bias");
        OFF(Wv, "attention.v_lin.weight"); OFF(bv, "attention.v_lin.bias");
        OFF(Wo, "attention.out_lin.weight"); OFF(bo, "attention.out_lin.bias");
        OFF(ln1_w, "sa_layer_norm.weight"); OFF(ln1_b, "sa_layer_norm.bias");
        OFF(W1, "ffn.lin1.weight"); OFF(b1, "ffn.lin1.bias");
        OFF(W2, "ffn.lin2.weight"); OFF(b2, "ffn.lin2.bias");
        OFF(ln2_w, "output_layer_norm.weight"); OFF(ln2_b, "output_layer_norm.bias");
#undef OFF
    }

    // Sizes; every piece starts on a 64-byte boundary. Two passes: count, then carve.
    const size_t B = (size_t)max_B, T = (size_t)max_T, N = B * T, D = (size_t)c->dim, Hd = (size_t)c->hidden_dim,
                 H = (size_t)c->n_heads, L = (size_t)c->n_labels;
    for (int pass = 0; pass < 2; pass++) {
        size_t used = 0;
#define CARVE(ptr, count)                                                                      \
    do {                                                                                       \
        size_t cnt_ = (count);                                                                 \
        if (pass == 1) (ptr) = ws->arena + used;                                               \
        CHECK(size_add_ok(used, (cnt_ + 15) / 16 * 16, &used), "workspace size overflows");    \
    } while (0)
        CARVE(ws->emb, N * D);
        CARVE(ws->emb_mean, N);
        CARVE(ws->emb_rstd, N);
        CARVE(ws->h0, N * D);
        for (size_t l = 0; l < Ly; l++) {
            LayerActs* a = &ws->la[l];
            CARVE(a->att.q, N * D);
            CARVE(a->att.k, N * D);
            CARVE(a->att.v, N * D);
            CARVE(a->att.p, B * H * T * T);
            CARVE(a->att.ctx, N * D);
            CARVE(a->r1, N * D);
            CARVE(a->mean1, N);
            CARVE(a->rstd1, N);
            CARVE(a->h1, N * D);
            CARVE(a->f1, N * Hd);
            CARVE(a->g, N * Hd);
            CARVE(a->r2, N * D);
            CARVE(a->mean2, N);
            CARVE(a->rstd2, N);
            CARVE(a->h2, N * D);
        }
        CARVE(ws->cls.pooled, B * D);
        CARVE(ws->cls.pre, B * D);
        CARVE(ws->cls.act, B * D);
        CARVE(ws->logits, B * L);
        CARVE(ws->logp, B * L);
        CARVE(ws->key_mask, N);
        CARVE(ws->dh, N * D);
        CARVE(ws->dr, N * D);
        if (Ly > 0) {  // the layers' backward buffers (a model without layers leaves them NULL)
            CARVE(ws->dlow, N * D);
            CARVE(ws->dh1, N * D);
            CARVE(ws->dg, N * Hd);
            CARVE(ws->df1, N * Hd);
            CARVE(ws->att_work, attention_work_floats(max_B, max_T, (int)D));
        }
        CARVE(ws->cls_work, 2 * B * D);
        CARVE(ws->dlogits, B * L);
#undef CARVE
        if (pass == 0) {
            size_t bytes;
            CHECK(size_mul_ok(used, sizeof(float), &bytes), "workspace size overflows");
            if (bytes_only) {
                *bytes_only = bytes + N * sizeof(int64_t) + B * sizeof(int32_t);
                free(ws->lo);
                free(ws->la);
                free(ws);
                return status_ok();
            }
            ws->arena = xaligned_alloc(bytes);
            ws->arena_floats = used;
        }
    }
    ws->ids = xmalloc(N * sizeof(int64_t));
    ws->labels = xmalloc(B * sizeof(int32_t));
    *out = ws;
    return status_ok();
}

Status model_workspace_new(const ParamTable* t, int max_B, int max_T, ModelWorkspace** out) {
    return workspace_make(t, max_B, max_T, out, NULL);
}

Status model_workspace_estimate_bytes(const ParamTable* t, int max_B, int max_T, size_t* bytes) {
    ModelWorkspace* none;
    *bytes = 0;
    return workspace_make(t, max_B, max_T, &none, bytes);
}

Status model_workspace_set_label_smoothing(ModelWorkspace* ws, double eps) {
    // any finite factor: the Trainer smooths whenever label_smoothing_factor != 0 and the
    // LabelSmoother's (1 - eps) * nll + eps * smoothed checks no range
    if (!isfinite(eps)) return status_make(STATUS_INVALID, "label smoothing factor %g (allowed: a finite number)", eps);
    if (eps != 0 && ws->cfg.regression)
        return status_make(STATUS_INVALID, "label smoothing on a regression model (num_labels 1): the smoother's "
                           "log_softmax over one logit is not a loss; not implemented");
    if (eps != 0 && ws->cfg.n_labels > 64)
        return status_make(STATUS_INVALID, "label smoothing over %lld labels (implemented up to 64)",
                           (long long)ws->cfg.n_labels);
    if (eps != 0 && !ws->ls_work) ws->ls_work = xcalloc((size_t)ws->max_B, sizeof(float));
    ws->label_smoothing = eps;
    return status_ok();
}

void model_workspace_free(ModelWorkspace* ws) {
    if (!ws) return;
    free(ws->ls_work);
    free(ws->drop_arena);
    free(ws->keep_att);
    free(ws->keep_ffn);
    free(ws->pd);
    if (ws->ctx_ready) layer_ctx_free(&ws->ctx);
    free(ws->low_arena);
    free(ws->kept);
    free(ws->arena);
    free(ws->lo);
    free(ws->la);
    free(ws->ids);
    free(ws->labels);
    free(ws);
}

size_t model_workspace_bytes(const ModelWorkspace* ws) {
    return ws->arena_floats * sizeof(float) + ws->drop_bytes + ws->low_bytes +
           (ws->ctx_ready ? layer_ctx_scratch_bytes(&ws->ctx) : 0) +
           (size_t)ws->max_B * (size_t)ws->max_T * sizeof(int64_t) + (size_t)ws->max_B * sizeof(int32_t);
}

void model_zero_grad(const ParamTable* t, float* grads) { layers_zero(grads, t->alloc_numel); }

// Points the layer context at this step's backend, dtype and counters (the scratch is kept).
static void ws_ctx(ModelWorkspace* ws, Gemm* gemm, DType low, AmpCounters* counters) {
    if (!ws->ctx_ready) {
        layer_ctx_init(&ws->ctx, gemm, low, counters);
        ws->ctx_ready = true;
    }
    ws->ctx.gemm = gemm;
    ws->ctx.low = low;
    ws->ctx.act = ws->cfg.activation;
    ws->ctx.counters = counters;
    ws->ctx.clock = &ws->phases;
}

static AttentionParams attention_params(const ModelWorkspace* ws, const float* p, size_t l) {
    const LayerOffsets* o = &ws->lo[l];
    AttentionParams a = {p + o->Wq, p + o->bq, p + o->Wk, p + o->bk, p + o->Wv, p + o->bv, p + o->Wo, p + o->bo};
    return a;
}

static ClassifierParams classifier_params(const ModelWorkspace* ws, const float* p) {
    ClassifierParams c = {p + ws->Wpre, p + ws->bpre, p + ws->Wcls, p + ws->bcls};
    return c;
}

static Status validate_batch(const ModelWorkspace* ws, const ModelBatch* b) {
    if (b->B < 1 || b->B > ws->max_B)
        return status_make(STATUS_INVALID, "batch size must be in [1, %d] (the workspace's) (got %d)", ws->max_B, b->B);
    if (b->T < 1 || b->T > ws->max_T)
        return status_make(STATUS_INVALID, "sequence length must be in [1, %d] (the workspace's) (got %d)", ws->max_T,
                           b->T);
    CHECK(b->input_ids && b->labels, "batch without input_ids or labels");
    const size_t n = (size_t)b->B * (size_t)b->T;
    for (size_t i = 0; i < n; i++) {
        if (b->input_ids[i] < 0 || b->input_ids[i] >= ws->cfg.vocab_size)
            return status_make(STATUS_INVALID, "input_ids[%zu][%zu] = %lld is outside [0, %lld) (vocab_size)",
                               i / (size_t)b->T, i % (size_t)b->T, (long long)b->input_ids[i],
                               (long long)ws->cfg.vocab_size);
        if (b->attention_mask && b->attention_mask[i] != 0 && b->attention_mask[i] != 1)
            return status_make(STATUS_INVALID, "attention_mask[%zu][%zu] = %lld (allowed: 0, 1)", i / (size_t)b->T,
                               i % (size_t)b->T, (long long)b->attention_mask[i]);
    }
    for (int i = 0; i < b->B && !ws->cfg.regression; i++)  // regression: any value is a target
        if (b->labels[i] < 0 || b->labels[i] >= ws->cfg.n_labels)
            return status_make(STATUS_INVALID, "labels[%d] = %d is outside [0, %lld) (num_labels)", i, b->labels[i],
                               (long long)ws->cfg.n_labels);
    return status_ok();
}

// The dropout arena (ModelWorkspace.drop_arena) for max_B x max_T: masks of every site and the
// float buffers of the dropped values, each piece on a 64-byte boundary. With ws NULL only its
// size is computed; with ws the pieces are carved from ws->drop_arena (allocated by the caller).
static size_t dropout_carve(ModelWorkspace* ws, const ModelConfig* c, int max_B, int max_T) {
    const size_t B = (size_t)max_B, T = (size_t)max_T, N = B * T, D = (size_t)c->dim, H = (size_t)c->n_heads,
                 Ly = (size_t)c->n_layers, BHTT = B * H * T * T;
    size_t used = 0;
#define DCARVE(ptr, bytes)                                                                   \
    do {                                                                                     \
        size_t b_ = (bytes);                                                                 \
        if (ws) ws->ptr = (void*)(ws->drop_arena + used);                                    \
        CHECK(size_add_ok(used, (b_ + 63) / 64 * 64, &used), "dropout workspace overflows"); \
    } while (0)
    DCARVE(keep_emb, N * D);
    DCARVE(keep_cls, B * D);
    DCARVE(h0d, N * D * sizeof(float));
    for (size_t l = 0; l < Ly; l++) {
        DCARVE(keep_att[l], BHTT);
        DCARVE(keep_ffn[l], N * D);
        DCARVE(pd[l], BHTT * sizeof(float));
    }
    DCARVE(cls.dropped, B * D * sizeof(float));
#undef DCARVE
    return used;
}

size_t model_workspace_dropout_bytes(const ParamTable* t, int max_B, int max_T) {
    return dropout_carve(NULL, &t->cfg, max_B, max_T);
}

static void dropout_alloc(ModelWorkspace* ws) {
    if (ws->drop_arena) return;
    const size_t Ly = (size_t)ws->cfg.n_layers;
    ws->keep_att = xcalloc(Ly, sizeof *ws->keep_att);
    ws->keep_ffn = xcalloc(Ly, sizeof *ws->keep_ffn);
    ws->pd = xcalloc(Ly, sizeof *ws->pd);
    ws->drop_bytes = dropout_carve(NULL, &ws->cfg, ws->max_B, ws->max_T);
    ws->drop_arena = xaligned_alloc(ws->drop_bytes);
    dropout_carve(ws, &ws->cfg, ws->max_B, ws->max_T);
}

// A site's mask for this batch's rows, or NULL when p == 0 (the site does not run).
static const uint8_t* site_mask(uint8_t* keep, const ModelBatch* b, DropoutSite site, int layer, size_t per_example,
                                double p) {
    if (!(p > 0)) return NULL;
    dropout_fill_mask(keep, b->dropout->seed, b->step, b->first_example, b->B, per_example, site, layer, p);
    return keep;
}

// The low copies a low-mode step keeps (ModelWorkspace.low_arena), in this order, each piece on
// a 64-byte boundary: per layer the six weights (Wq, Wk, Wv, Wo (D, D), W1 (F, D), W2 (D, F)),
// then the layer input x (N, D) (q/k/v's operand), q, k, v (N, D), the PV product's P (B, H, T,
// T), ctx (N, D), h1 (N, D) (lin1's operand), g (N, F) (lin2's); then pre_classifier's and the
// classifier's weights (D, D), (L, D) and their inputs pooled and act (or dropped) (B, D). With
// ws NULL only the size is computed (capacities for max_B x max_T, es bytes per value); else
// each piece is registered in ws->kept with this forward's arrays (p: the parameters; x0: layer
// 0's input) and sizes (B x T tokens), and the count returned through *count.
static size_t kept_layout(const ModelConfig* c, int max_B, int max_T, size_t es, ModelWorkspace* ws,
                          const float* p, const float* x0, int B, int T, int* count) {
    LowCopy* kept = ws ? ws->kept : NULL;
    const size_t MB = (size_t)max_B, MT = (size_t)max_T, D = (size_t)c->dim, F = (size_t)c->hidden_dim,
                 H = (size_t)c->n_heads, L = (size_t)c->n_labels, N = (size_t)B * (size_t)T;
    size_t used = 0;
    int k = 0;
    // one piece: capacity cap values; registered for src (n values)
#define KEEP(src_, n_, cap_, low_only_)                                                                  do {                                                                                                     size_t b_;                                                                                           CHECK(size_mul_ok((cap_), es, &b_), "kept copies overflow");                                         if (kept) {                                                                                              CHECK(k < ws->kept_cap);                                                                             kept[k++] = (LowCopy){.src = (src_), .n = (n_), .low = ws->low_arena + used, .low_only = (low_only_)};         }                                                                                                    CHECK(size_add_ok(used, (b_ + 63) / 64 * 64, &used), "kept copies overflow");                    } while (0)
    static const LayerOffsets none_o;
    static LayerActs none_a;
    for (size_t l = 0; l < (size_t)c->n_layers; l++) {
        const LayerOffsets* o = ws ? &ws->lo[l] : &none_o;  // (sizes only: no arrays)
        LayerActs* a = ws ? &ws->la[l] : &none_a;
        KEEP(p + o->Wq, D * D, D * D, false);
        KEEP(p + o->Wk, D * D, D * D, false);
        KEEP(p + o->Wv, D * D, D * D, false);
        KEEP(p + o->Wo, D * D, D * D, false);
        KEEP(p + o->W1, F * D, F * D, false);
        KEEP(p + o->W2, D * F, D * F, false);
        KEEP(l && ws ? ws->la[l - 1].h2 : x0, N * D, MB * MT * D, false);
        KEEP(a->att.q, N * D, MB * MT * D, true);
        KEEP(a->att.k, N * D, MB * MT * D, true);
        KEEP(a->att.v, N * D, MB * MT * D, true);
        // what the PV product reads: P, or with attention dropout P * noise (model_forward)
        const float* pv = ws && ws->drop.attention > 0 ? ws->pd[l] : a->att.p;
        // without a key mask P's values are low values (the softmax runs in the low dtype): with
        // no attention dropout the low copy is all anyone reads (the PV and dV products, the
        // softmax backward row by row; model_workspace_attention_probs widens it on request)
        KEEP(pv, (size_t)B * H * (size_t)T * (size_t)T, MB * H * MT * MT,
             ws && !ws->has_mask && !(ws->drop.attention > 0));
        KEEP(a->att.ctx, N * D, MB * MT * D, true);
        KEEP(a->h1, N * D, MB * MT * D, false);
        KEEP(a->f1, N * F, MB * MT * F, true);
        KEEP(a->g, N * F, MB * MT * F, true);
    }
    if (ws) {
        KEEP(p + ws->Wpre, D * D, D * D, false);
        KEEP(p + ws->Wcls, L * D, L * D, false);
        KEEP(ws->cls.pooled, (size_t)B * D, MB * D, false);
        KEEP(ws->drop.classifier > 0 ? ws->cls.dropped : ws->cls.act, (size_t)B * D, MB * D, false);
    } else {  // the same four sizes
        KEEP(NULL, 0, D * D, false);
        KEEP(NULL, 0, L * D, false);
        KEEP(NULL, 0, MB * D, false);
        KEEP(NULL, 0, MB * D, false);
    }
#undef KEEP
    if (count) *count = k;
    return used;
}

// Registers this forward's kept copies with the layer context (low modes; fp32: none), the
// arena allocated on first use (or when the dtype's size changes). After the dropout setup:
// which arrays feed the GEMMs depends on it.
static void kept_register(ModelWorkspace* ws, const float* p, const float* x0, DType low, int B, int T) {
    if (low == DTYPE_F32) {
        layer_ctx_keep(&ws->ctx, NULL, 0);
        return;
    }
    const size_t es = dtype_traits(low)->size;
    const size_t bytes = kept_layout(&ws->cfg, ws->max_B, ws->max_T, es, NULL, NULL, NULL, 1, 1, NULL);
    if (bytes != ws->low_bytes) {
        free(ws->low_arena);
        ws->low_arena = xaligned_alloc(bytes);
        ws->low_bytes = bytes;
    }
    if (!ws->kept) {
        ws->kept_cap = 15 * (int)ws->cfg.n_layers + 4;
        ws->kept = xcalloc((size_t)ws->kept_cap, sizeof *ws->kept);
    }
    int count;
    kept_layout(&ws->cfg, ws->max_B, ws->max_T, es, ws, p, x0, B, T, &count);
    layer_ctx_keep(&ws->ctx, ws->kept, count);
}

size_t model_workspace_low_bytes(const ParamTable* t, int max_B, int max_T, DType low) {
    if (low == DTYPE_F32) return 0;
    return kept_layout(&t->cfg, max_B, max_T, dtype_traits(low)->size, NULL, NULL, NULL, 1, 1, NULL);
}

static void add_rows(float* dst, const float* src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

Status model_forward(ModelWorkspace* ws, const float* params, const ModelBatch* batch, const PrecisionMode* mode,
                     Gemm* gemm, float* loss, float* logits) {
    CHECK(ws && params && batch && mode && gemm && gemm->backend && loss);
    ws->mode = NULL;  // no valid forward until this one completes
    Status s = amp_check_backend(mode, gemm->backend);
    if (!status_is_ok(s)) return s;
    if (!status_is_ok(s = validate_batch(ws, batch))) return s;
    const int B = batch->B, T = batch->T, N = B * T;
    const int D = (int)ws->cfg.dim, Hd = (int)ws->cfg.hidden_dim, H = (int)ws->cfg.n_heads, L = (int)ws->cfg.n_labels;
    const DType low = mode->low;
    ws->B = B;
    ws->T = T;
    memcpy(ws->ids, batch->input_ids, (size_t)N * sizeof(int64_t));
    memcpy(ws->labels, batch->labels, (size_t)B * sizeof(int32_t));
    ws->has_mask = false;
    if (batch->attention_mask)
        for (int i = 0; i < N; i++) ws->has_mask |= batch->attention_mask[i] == 0;
    if (ws->has_mask)
        for (int i = 0; i < N; i++) ws->key_mask[i] = batch->attention_mask[i] ? 0.0f : -FLT_MAX;
    const float* mask = ws->has_mask ? ws->key_mask : NULL;
    ws_ctx(ws, gemm, low, NULL);
    LayerCtx* c = &ws->ctx;
    PhaseClock* pc = c->clock;
    const float* p = params;
    // dropout (training): which sites run, their masks drawn per site below
    memset(&ws->drop, 0, sizeof ws->drop);
    if (batch->dropout && dropout_config_any(batch->dropout)) {
        ws->drop = *batch->dropout;
        dropout_alloc(ws);
    }
    const size_t nd = (size_t)N * (size_t)D;
    kept_register(ws, p, ws->drop.hidden > 0 ? ws->h0d : ws->h0, low, B, T);

    phase_direction(pc, PHASE_FORWARD);
    phase_enter(pc, PHASE_EMBEDDING);
    embedding_forward(ws->emb, ws->ids, p + ws->wte, p + ws->wpe, B, T, D, ws->cfg.vocab_size);
    phase_enter(pc, PHASE_LAYERNORM);
    layernorm_forward_operand(c, ws->h0, ws->emb_mean, ws->emb_rstd, ws->emb, p + ws->lne_w, p + ws->lne_b, N, D,
                              LAYERNORM_EPS);
    const float* x = ws->h0;  // (N, D)
    // dropout's work (drawing masks, the multiplies outside attention) is charged to "other"
    if (ws->drop.hidden > 0) phase_enter(pc, PHASE_OTHER);
    if (site_mask(ws->keep_emb, batch, DROPOUT_SITE_EMBEDDINGS, 0, (size_t)T * (size_t)D, ws->drop.hidden)) {
        // the embeddings' dropout runs on the fp32 LayerNorm output
        dropout_mul(ws->h0d, ws->h0, ws->keep_emb, nd, dropout_scale(ws->drop.hidden, DTYPE_F32), DTYPE_F32);
        x = ws->h0d;
    }
    for (size_t l = 0; l < (size_t)ws->cfg.n_layers; l++) {
        LayerActs* a = &ws->la[l];
        const LayerOffsets* o = &ws->lo[l];
        AttentionParams ap = attention_params(ws, p, l);
        if (ws->drop.attention > 0) phase_enter(pc, PHASE_OTHER);
        a->att.drop.p = ws->drop.attention;
        a->att.drop.keep = site_mask(ws->drop.attention > 0 ? ws->keep_att[l] : NULL, batch, DROPOUT_SITE_ATTENTION,
                                     (int)l, (size_t)H * (size_t)T * (size_t)T, ws->drop.attention);
        a->att.pd = a->att.drop.keep ? ws->pd[l] : NULL;
        // r1 = ao + x (the residual's fp32 add, in out_lin's widening pass)
        if (!status_is_ok(s = attention_forward_residual(c, a->r1, &a->att, x, &ap, mask, B, T, D, H))) return s;
        phase_enter(pc, PHASE_LAYERNORM);
        layernorm_forward_operand(c, a->h1, a->mean1, a->rstd1, a->r1, p + o->ln1_w, p + o->ln1_b, N, D, LAYERNORM_EPS);
        phase_enter(pc, PHASE_FFN_GEMM);
        if (!status_is_ok(s = linear_forward(c, a->f1, a->h1, p + o->W1, p + o->b1, N, D, Hd))) return s;
        phase_enter(pc, PHASE_GELU);
        ffn_activation_forward_operand(c, a->g, a->f1, (size_t)N * (size_t)Hd);  // and lin2's operand
        phase_enter(pc, PHASE_FFN_GEMM);
        if (ws->drop.hidden > 0) {
            if (!status_is_ok(s = linear_forward(c, a->r2, a->g, p + o->W2, p + o->b2, N, Hd, D))) return s;
            phase_enter(pc, PHASE_OTHER);
            site_mask(ws->keep_ffn[l], batch, DROPOUT_SITE_FFN, (int)l, (size_t)T * (size_t)D, ws->drop.hidden);
            // FFN dropout on lin2's low output
            dropout_mul(a->r2, a->r2, ws->keep_ffn[l], nd, dropout_scale(ws->drop.hidden, low), low);
            phase_enter(pc, PHASE_RESIDUAL);
            add_rows(a->r2, a->h1, (size_t)N * (size_t)D);  // r2 = f2 + h1
        } else {  // r2 = f2 + h1, the add in lin2's widening pass
            s = linear_forward_residual(c, a->r2, a->g, p + o->W2, p + o->b2, a->h1, N, Hd, D);
            if (!status_is_ok(s)) return s;
        }
        phase_enter(pc, PHASE_LAYERNORM);
        layernorm_forward_operand(c, a->h2, a->mean2, a->rstd2, a->r2, p + o->ln2_w, p + o->ln2_b, N, D, LAYERNORM_EPS);
        x = a->h2;
    }
    ClassifierParams cp = classifier_params(ws, p);
    if (ws->drop.classifier > 0) phase_enter(pc, PHASE_OTHER);
    ws->cls.drop.p = ws->drop.classifier;
    ws->cls.drop.keep = site_mask(ws->drop.classifier > 0 ? ws->keep_cls : NULL, batch, DROPOUT_SITE_CLASSIFIER, 0,
                                  (size_t)D, ws->drop.classifier);
    phase_enter(pc, PHASE_CLASSIFIER);
    if (!status_is_ok(s = classifier_forward(c, ws->logits, &ws->cls, x, &cp, B, T, D, L))) return s;
    phase_enter(pc, PHASE_LOSS);
    if (ws->label_smoothing != 0)
        *loss = label_smoothing_forward(ws->logp, ws->ls_work, ws->logits, ws->labels, B, L, ws->label_smoothing);
    else  // regression (L = 1): logp holds the squared errors (B)
        *loss = ws->cfg.regression ? mse_forward(ws->logp, ws->logits, ws->labels, B)
                                   : cross_entropy_forward(ws->logp, ws->logits, ws->labels, B, L);
    phase_enter(pc, PHASE_OTHER);
    if (logits) memcpy(logits, ws->logits, (size_t)B * (size_t)L * sizeof(float));
    ws->mode = mode;
    return status_ok();
}

// zero_grad_but_linear_weights' step: grads [*z0, off) = 0, then [off, off + numel) left to the
// backward; *z0 moves past it
static void zero_up_to_weight(float* grads, size_t* z0, size_t off, size_t numel) {
    CHECK(off >= *z0, "weights out of order");
    layers_zero(grads + *z0, off - *z0);
    *z0 = off + numel;
}

// grads = 0 everywhere except the values of the linears' weights, which model_backward's linear
// backwards write (LayerCtx.dw_write): every other tensor, and the weights' alignment padding.
// Returns the number of weights left to the backward. The weights in table order: per layer
// q, k, v, out, lin1, lin2, then pre_classifier and classifier.
static int zero_grad_but_linear_weights(const ModelWorkspace* ws, float* grads) {
    const size_t D = (size_t)ws->cfg.dim, Hd = (size_t)ws->cfg.hidden_dim, L = (size_t)ws->cfg.n_labels;
    size_t z0 = 0;  // the next float not yet zeroed or left to the backward
    int n = 0;
    for (int64_t l = 0; l < ws->cfg.n_layers; l++) {
        const LayerOffsets* o = &ws->lo[l];
        const size_t off[6] = {o->Wq, o->Wk, o->Wv, o->Wo, o->W1, o->W2};
        const size_t numel[6] = {D * D, D * D, D * D, D * D, Hd * D, D * Hd};
        for (int k = 0; k < 6; k++, n++) zero_up_to_weight(grads, &z0, off[k], numel[k]);
    }
    zero_up_to_weight(grads, &z0, ws->Wpre, D * D);
    zero_up_to_weight(grads, &z0, ws->Wcls, L * D);
    n += 2;
    CHECK(z0 <= ws->alloc_numel);
    layers_zero(grads + z0, ws->alloc_numel - z0);
    return n;
}

Status model_backward(ModelWorkspace* ws, const float* params, float loss_scale, Gemm* gemm, float* grads,
                      AmpCounters* counters) {
    CHECK(ws && params && gemm && gemm->backend && grads);
    CHECK(ws->mode != NULL, "model_backward without a successful model_forward");
    const PrecisionMode* mode = ws->mode;
    Status s = amp_check_backend(mode, gemm->backend);
    if (!status_is_ok(s)) return s;
    const int B = ws->B, T = ws->T, N = B * T;
    const int D = (int)ws->cfg.dim, Hd = (int)ws->cfg.hidden_dim, H = (int)ws->cfg.n_heads, L = (int)ws->cfg.n_labels;
    const size_t nd = (size_t)N * (size_t)D;
    const DType low = mode->low;
    const float* mask = ws->has_mask ? ws->key_mask : NULL;
    ws_ctx(ws, gemm, low, counters);
    LayerCtx* c = &ws->ctx;
    PhaseClock* pc = c->clock;
    const float* p = params;
    float* g = grads;

    // loss -> logits (fp32), then the cast back to the logits' low dtype
    phase_direction(pc, PHASE_BACKWARD);
    phase_enter(pc, PHASE_LOSS);
    memset(ws->dlogits, 0, (size_t)B * (size_t)L * sizeof(float));
    if (ws->label_smoothing != 0)
        label_smoothing_backward(ws->dlogits, ws->logp, ws->labels, loss_scale, B, L, ws->label_smoothing);
    else if (ws->cfg.regression) mse_backward(ws->dlogits, ws->logits, ws->labels, loss_scale, B);
    else cross_entropy_backward(ws->dlogits, ws->logp, ws->labels, loss_scale, B, L);
    amp_round_act_grad(ws->dlogits, (size_t)B * (size_t)L, low, counters);
    phase_enter(pc, PHASE_OTHER);
    layers_zero(ws->dh, nd);
    // the parameter gradients are written, not added: zeroes where no linear writes its weight's
    const int weights = zero_grad_but_linear_weights(ws, grads);
    c->dw_write = true;
    c->dw_written = 0;
    ClassifierParams cp = classifier_params(ws, p);
    ClassifierGrads cg = {g + ws->Wpre, g + ws->bpre, g + ws->Wcls, g + ws->bcls};
    phase_enter(pc, PHASE_CLASSIFIER);
    s = classifier_backward(c, ws->dh, &cg, ws->dlogits, &ws->cls, &cp, ws->cls_work, B, T, D, L);
    if (!status_is_ok(s)) return s;

    for (size_t l = (size_t)ws->cfg.n_layers; l-- > 0;) {
        LayerActs* a = &ws->la[l];
        const LayerOffsets* o = &ws->lo[l];
        const float* x = l ? ws->la[l - 1].h2 : ws->drop.hidden > 0 ? ws->h0d : ws->h0;  // the layer's input (N, D)
        // output_layer_norm; r2 = f2 + h1
        // dr = 0 + LN's input gradient, and its copy dh1 (the residual's share) in the same pass
        phase_enter(pc, PHASE_LAYERNORM);
        layernorm_backward_set(ws->dr, ws->dh1, g + o->ln2_w, g + o->ln2_b, ws->dh, a->r2, a->mean2, a->rstd2,
                               p + o->ln2_w, N, D);
        phase_enter(pc, low != DTYPE_F32 ? PHASE_CONVERT : PHASE_RESIDUAL);  // fp32: only copies (residual)
        if (ws->drop.hidden > 0) {  // the FFN dropout's backward, in the low dtype
            memcpy(ws->dlow, ws->dr, nd * sizeof(float));
            amp_round_act_grad(ws->dlow, nd, low, counters);
            phase_enter(pc, PHASE_OTHER);
            dropout_mul(ws->dlow, ws->dlow, ws->keep_ffn[l], nd, dropout_scale(ws->drop.hidden, low), low);
        } else {
            layer_round_grad_operand(c, ws->dlow, ws->dr, nd);  // and lin2's dy operand
        }
        // ffn: lin2, the activation, lin1 (its input gradient adds into dh1)
        phase_enter(pc, PHASE_FFN_GEMM);
        FfnGrads fg = {g + o->W1, g + o->b1, g + o->W2, g + o->b2};
        s = ffn_backward(c, ws->dh1, &fg, ws->dlow, a->h1, a->f1, a->g, p + o->W1, p + o->W2, ws->dg, ws->df1, N, D, Hd);
        if (!status_is_ok(s)) return s;
        // sa_layer_norm; r1 = ao + x
        // dr = 0 + LN's input gradient, and dh its copy (the residual's fp32 share of dx)
        phase_enter(pc, PHASE_LAYERNORM);
        layernorm_backward_set(ws->dr, ws->dh, g + o->ln1_w, g + o->ln1_b, ws->dh1, a->r1, a->mean1, a->rstd1,
                               p + o->ln1_w, N, D);
        phase_enter(pc, low != DTYPE_F32 ? PHASE_CONVERT : PHASE_RESIDUAL);  // fp32: a copy (residual)
        layer_round_grad_operand(c, ws->dlow, ws->dr, nd);     // and out_lin's dy operand
        AttentionParams ap = attention_params(ws, p, l);
        AttentionGrads ag = {g + o->Wq, g + o->bq, g + o->Wk, g + o->bk, g + o->Wv, g + o->bv, g + o->Wo, g + o->bo};
        s = attention_backward(c, ws->dh, &ag, ws->dlow, &a->att, x, &ap, mask, ws->att_work, B, T, D, H);
        if (!status_is_ok(s)) return s;
    }
    if (ws->drop.hidden > 0) {  // the embeddings dropout's backward (fp32)
        phase_enter(pc, PHASE_OTHER);
        dropout_mul(ws->dh, ws->dh, ws->keep_emb, nd, dropout_scale(ws->drop.hidden, DTYPE_F32), DTYPE_F32);
    }
    phase_enter(pc, PHASE_LAYERNORM);
    layernorm_backward_set(ws->dr, NULL, g + ws->lne_w, g + ws->lne_b, ws->dh, ws->emb, ws->emb_mean, ws->emb_rstd,
                       p + ws->lne_w, N, D);
    phase_enter(pc, PHASE_EMBEDDING);
    embedding_backward(g + ws->wte, g + ws->wpe, ws->dr, ws->ids, B, T, D, ws->cfg.vocab_size, ws->cfg.pad_token_id);
    phase_enter(pc, PHASE_OTHER);
    c->dw_write = false;
    CHECK(c->dw_written == weights, "backward wrote %d of the %d linear weight gradients", c->dw_written, weights);
    return status_ok();
}

const float* model_workspace_hidden_state(const ModelWorkspace* ws, int i) {
    CHECK(ws->mode != NULL, "no forward has run");
    CHECK(i >= 0 && i <= ws->cfg.n_layers, "hidden state %d of %lld", i, (long long)ws->cfg.n_layers + 1);
    return i == 0 ? (ws->drop.hidden > 0 ? ws->h0d : ws->h0) : ws->la[i - 1].h2;
}

const uint8_t* model_workspace_dropout_mask(const ModelWorkspace* ws, DropoutSite site, int layer) {
    CHECK(ws->mode != NULL, "no forward has run");
    const bool in_range = layer >= 0 && layer < ws->cfg.n_layers;
    switch (site) {
        case DROPOUT_SITE_EMBEDDINGS: return ws->drop.hidden > 0 ? ws->keep_emb : NULL;
        case DROPOUT_SITE_ATTENTION: return ws->drop.attention > 0 && in_range ? ws->keep_att[layer] : NULL;
        case DROPOUT_SITE_FFN: return ws->drop.hidden > 0 && in_range ? ws->keep_ffn[layer] : NULL;
        case DROPOUT_SITE_CLASSIFIER: return ws->drop.classifier > 0 ? ws->keep_cls : NULL;
    }
    return NULL;
}

const float* model_workspace_attention_probs(ModelWorkspace* ws, int layer) {
    CHECK(ws->mode != NULL, "no forward has run");
    CHECK(layer >= 0 && layer < ws->cfg.n_layers, "layer %d of %lld", layer, (long long)ws->cfg.n_layers);
    AttentionActs* a = &ws->la[layer].att;
    if (a->drop.keep) return a->pd;
    const size_t n = (size_t)ws->B * (size_t)ws->cfg.n_heads * (size_t)ws->T * (size_t)ws->T;
    const void* low = layer_kept_low_only(&ws->ctx, a->p, n);
    if (low) dtype_to_f32_row(a->p, ws->ctx.low, low, n);  // the forward wrote only P's low copy: widened now
    return a->p;
}

// hf_weights.c — read and write the parameters as transformers' model.safetensors (see
// hf_weights.h). Not here: checkpoints with optimizer state (train/), config.json parsing
// (model.c).
#include "model/hf_weights.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"

static void shape_text(char* buf, size_t len, int ndim, const int64_t* dims) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, len - n, "(");
    for (int i = 0; i < ndim && n < len; i++) n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (n < len) snprintf(buf + n, len - n, ")");
}

Status hf_weights_load(const ParamTable* t, float* buf, const char* path) {
    SafeTensors st;
    Status s = st_read(path, &st);
    if (!status_is_ok(s)) return s;
    // first every check, then the copy: buf is untouched on error
    for (size_t i = 0; i < st.n_tensors && status_is_ok(s); i++)
        if (!param_table_find(t, st.tensors[i].name))
            s = status_make(STATUS_INVALID,
                            "%s: unexpected tensor '%s': not a parameter of this model (DistilBertForSequenceClassification"
                            " with %zu tensors; the file must hold exactly the state_dict, as load_state_dict(strict=True))",
                            path, st.tensors[i].name, t->n);
    for (size_t i = 0; i < t->n && status_is_ok(s); i++) {
        const ParamTensor* p = &t->t[i];
        const StTensor* x = st_find(&st, p->name);
        char want[64], got[64];
        shape_text(want, sizeof want, p->shape.ndim, p->shape.dims);
        if (!x) {
            s = status_make(STATUS_INVALID, "%s: missing tensor '%s' %s (the file has %zu tensors, this model %zu)", path,
                            p->name, want, st.n_tensors, t->n);
            break;
        }
        if (x->dtype != DTYPE_F32 && x->dtype != DTYPE_BF16 && x->dtype != DTYPE_F16) {
            s = status_make(STATUS_INVALID, "%s: tensor '%s' has dtype %s (allowed: F32, BF16, F16)", path, p->name,
                            dtype_traits(x->dtype)->st_name);
            break;
        }
        bool same = x->ndim == p->shape.ndim;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == p->shape.dims[d];
        if (!same) {
            shape_text(got, sizeof got, x->ndim, x->shape);
            s = status_make(STATUS_INVALID, "%s: tensor '%s' has shape %s, this model's parameter is %s (is the config "
                            "the one the weights were saved with?)", path, p->name, got, want);
            break;
        }
    }
    for (size_t i = 0; i < t->n && status_is_ok(s); i++) {
        const ParamTensor* p = &t->t[i];
        float* x;
        s = st_tensor_to_f32(st_find(&st, p->name), &x);
        if (!status_is_ok(s)) break;
        memcpy(buf + p->offset, x, p->numel * sizeof(float));
        free(x);
    }
    st_free(&st);
    return s;
}

Status hf_weights_save(const ParamTable* t, const float* buf, const char* path) {
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < t->n; i++)
        st_writer_add_ref(w, t->t[i].name, DTYPE_F32, t->t[i].shape.ndim, t->t[i].shape.dims, buf + t->t[i].offset);
    st_writer_meta(w, "format", "pt");
    Status s = st_writer_save(w, path);
    st_writer_free(w);
    return s;
}

Status hf_config_save(const ModelConfig* c, const DropoutConfig* dropout, const char* path) {
    json_t* o = json_object();
    json_object_set_new(o, "model_type", json_string("distilbert"));
    json_object_set_new(o, "architectures", json_pack("[s]", "DistilBertForSequenceClassification"));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "dim", json_integer(c->dim));
    json_object_set_new(o, "n_layers", json_integer(c->n_layers));
    json_object_set_new(o, "n_heads", json_integer(c->n_heads));
    json_object_set_new(o, "hidden_dim", json_integer(c->hidden_dim));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_positions));
    json_object_set_new(o, "num_labels", json_integer(c->n_labels));
    json_object_set_new(o, "activation", json_string(ffn_activation_name(c->activation)));
    json_object_set_new(o, "dropout", json_real(dropout ? dropout->hidden : 0.0));
    json_object_set_new(o, "attention_dropout", json_real(dropout ? dropout->attention : 0.0));
    json_object_set_new(o, "seq_classif_dropout", json_real(dropout ? dropout->classifier : 0.0));
    json_object_set_new(o, "pad_token_id", c->pad_token_id < 0 ? json_null() : json_integer(c->pad_token_id));
    json_object_set_new(o, "initializer_range", json_real(model_init_std(c)));
    json_object_set_new(o, "sinusoidal_pos_embds", json_boolean(c->sinusoidal_pos_embds));
    // problem_type where transformers' own choice would differ from ours or be implicit: with one
    // label null means regression there, so a one-class classifier names itself
    if (c->regression) json_object_set_new(o, "problem_type", json_string("regression"));
    else if (c->n_labels == 1) json_object_set_new(o, "problem_type", json_string("single_label_classification"));
    char* text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    size_t len = strlen(text);
    char* withnl = xmalloc(len + 2);
    memcpy(withnl, text, len);
    withnl[len] = '\n';
    withnl[len + 1] = 0;
    free(text);
    Status s = write_file_atomic(path, withnl, len + 1);
    free(withnl);
    return s;
}

// golden_config.h — a model golden's metadata "config" (the DistilBertConfig the generator built,
// as JSON) as a ModelConfig: the shape keys, activation (default gelu), pad_token_id (default
// 0) and problem_type (regression: "regression", or null with num_labels 1); the init's std does not matter (goldens carry their weights). Shared by test_model_golden.c
// and golden_replay.h (test_trajectory.c, test_fingerprint.c). Include after cmocka.h.
#ifndef TRAINBENCH_TESTS_GOLDEN_CONFIG_H
#define TRAINBENCH_TESTS_GOLDEN_CONFIG_H

#include <jansson.h>
#include <string.h>

#include "core/safetensors.h"
#include "model/model.h"

static void golden_config(const SafeTensors* st, ModelConfig* c) {
    memset(c, 0, sizeof *c);  // defaults: GELU, pad_token_id 0, initializer_range 0.02
    const char* text = st_meta(st, "config");
    if (!text) fprintf(stderr, "%s: missing metadata config\n", st->path);
    assert_non_null(text);
    json_t* o = json_loads(text, 0, NULL);
    assert_non_null(o);
    static const char* const KEYS[] = {"vocab_size", "dim", "n_layers", "n_heads", "hidden_dim",
                                       "max_position_embeddings", "num_labels"};
    int64_t* dest[] = {&c->vocab_size, &c->dim, &c->n_layers, &c->n_heads, &c->hidden_dim, &c->max_positions,
                       &c->n_labels};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        json_t* v = json_object_get(o, KEYS[i]);
        if (!json_is_integer(v)) fprintf(stderr, "%s: config key %s is not an integer\n", st->path, KEYS[i]);
        assert_true(json_is_integer(v));
        *dest[i] = (int64_t)json_integer_value(v);
    }
    json_t* act_v = json_object_get(o, "activation");  // DistilBertConfig's default: gelu
    const char* an = act_v ? json_string_value(act_v) : "gelu";
    assert_non_null(an);
    FfnActivation act;
    if (!ffn_activation_from_name(an, &act)) fail_msg("golden activation '%s' is not implemented", an);
    c->activation = act;
    json_t* pad = json_object_get(o, "pad_token_id");  // DistilBertConfig's default: 0
    if (pad) {
        assert_true(json_is_integer(pad) && json_integer_value(pad) >= 0);
        c->pad_token_id = json_integer_value(pad);
    }
    // problem_type as transformers decides it (model.c): null with one label, or "regression"
    json_t* pt = json_object_get(o, "problem_type");
    const char* pts = pt && json_is_string(pt) ? json_string_value(pt) : NULL;
    c->regression = pts ? !strcmp(pts, "regression") : c->n_labels == 1;
    json_decref(o);
}

#endif

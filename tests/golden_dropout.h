// golden_dropout.h — the dropout part of a model golden (reference/gen_dropout_goldens.py):
// metadata "dropout" {"dropout", "attention_dropout", "seq_classif_dropout", "seed",
// "first_step", "first_example"} and the masks torch was fed, input.dropout.<module> (U8,
// (B, ...) or (S, B, ...) for S steps), named after the nn.Dropout module that applied them.
// The masks were made by reference/dropout_masks.py from the documented RNG, so comparing them
// with the model's own masks checks our RNG against an independent implementation bit for bit.
// Include after cmocka.h.
#ifndef TRAINBENCH_TESTS_GOLDEN_DROPOUT_H
#define TRAINBENCH_TESTS_GOLDEN_DROPOUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/safetensors.h"
#include "model/model.h"

// false (d untouched) when the golden has no dropout metadata (every dropout 0)
static bool golden_dropout_config(const SafeTensors* st, DropoutConfig* d, int64_t* first_step,
                                  int64_t* first_example) {
    const char* text = st_meta(st, "dropout");
    if (!text) return false;
    json_t* o = json_loads(text, 0, NULL);
    assert_non_null(o);
    memset(d, 0, sizeof *d);
    d->hidden = json_number_value(json_object_get(o, "dropout"));
    d->attention = json_number_value(json_object_get(o, "attention_dropout"));
    d->classifier = json_number_value(json_object_get(o, "seq_classif_dropout"));
    assert_true(json_is_integer(json_object_get(o, "seed")));
    d->seed = (uint64_t)json_integer_value(json_object_get(o, "seed"));
    *first_step = json_integer_value(json_object_get(o, "first_step"));
    *first_example = json_integer_value(json_object_get(o, "first_example"));
    json_decref(o);
    assert_true(dropout_config_any(d));
    return true;
}

// Every input.dropout.<module> of the golden against the workspace's masks of its last forward:
// rows [row0, row0 + B) of step index `step` (-1: the tensors have no step dimension). Returns
// the number of tensors that differ (printed); a golden with dropout must have at least one.
static int golden_dropout_check_masks(const SafeTensors* st, const ModelWorkspace* ws, int step, int row0, int B) {
    int bad = 0, seen = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        const StTensor* t = &st->tensors[i];
        if (strncmp(t->name, "input.dropout.", 14) != 0) continue;
        const char* mod = t->name + 14;
        int layer = 0;
        char kind[32] = "";
        DropoutSite site;
        if (!strcmp(mod, "distilbert.embeddings.dropout")) site = DROPOUT_SITE_EMBEDDINGS;
        else if (!strcmp(mod, "dropout")) site = DROPOUT_SITE_CLASSIFIER;
        else if (sscanf(mod, "distilbert.transformer.layer.%d.%31[a-z].dropout", &layer, kind) == 2 &&
                 (!strcmp(kind, "attention") || !strcmp(kind, "ffn")))
            site = !strcmp(kind, "attention") ? DROPOUT_SITE_ATTENTION : DROPOUT_SITE_FFN;
        else {
            printf("FAIL unknown dropout mask tensor %s\n", t->name);
            bad++;
            continue;
        }
        assert_true(t->dtype == DTYPE_U8);
        const int lead = step >= 0 ? 2 : 1;  // (S, B, ...) or (B, ...)
        size_t per = 1;
        for (int k = lead; k < t->ndim; k++) per *= (size_t)t->shape[k];
        const size_t rows = (size_t)t->shape[lead - 1];
        const uint8_t* want = (const uint8_t*)t->data + ((step >= 0 ? (size_t)step * rows : 0) + (size_t)row0) * per;
        const uint8_t* got = model_workspace_dropout_mask(ws, site, layer);
        seen++;
        if (!got || memcmp(got, want, (size_t)B * per) != 0) {
            size_t diff = 0;
            for (size_t j = 0; got && j < (size_t)B * per; j++) diff += got[j] != want[j];
            printf("FAIL dropout mask %s (step index %d): %s %zu of %zu elements differ from the golden's\n", mod, step,
                   got ? "" : "no mask;", diff, (size_t)B * per);
            bad++;
        }
    }
    if (!seen) {
        printf("FAIL the golden has dropout metadata but no input.dropout.* masks\n");
        bad++;
    }
    return bad;
}

#endif

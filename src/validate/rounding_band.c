// rounding_band.c — the registry of the rounding-order bands kept in src/validate
// (rounding_band_of) and the band arrays (rounding_band.h). The bands themselves:
// band_adafactor.c, band_adamw_bnb_8bit.c, and adamw_torch's own (optim_adamw_torch.c), which
// adamw_torch_fused names too.
#include "validate/rounding_band.h"

#include <stdlib.h>
#include <string.h>

RoundingBandStep rounding_band_of(const Optimizer* o) {
    if (!o) return NULL;
    if (o->rounding_band_step) return o->rounding_band_step;
    static const struct {
        const char* name;
        RoundingBandStep step;
    } TABLE[] = {
        {"adafactor", band_adafactor_hf_step},
        {"adafactor_torch", band_adafactor_torch_step},
        {"adamw_bnb_8bit", band_adamw_bnb_8bit_step},
    };
    for (size_t i = 0; i < ARRAY_LEN(TABLE); i++)
        if (!strcmp(o->name, TABLE[i].name)) return TABLE[i].step;
    return NULL;
}

void rounding_band_alloc(RoundingBand* b, size_t n, const OptimState* st) {
    memset(b, 0, sizeof *b);
    b->n = n;
    b->param = xcalloc(n ? n : 1, sizeof(double));
    for (int i = 0; i < st->n_tensors; i++) {
        const size_t k = shape_numel(&st->tensors[i].shape);
        // F32: a band in the tensor's units; U8 (8-bit codes): code steps below/above (code_band_pack)
        if (st->tensors[i].dtype == DTYPE_F32 || st->tensors[i].dtype == DTYPE_U8)
            b->state[i] = xcalloc(k ? k : 1, sizeof(double));
    }
    for (int i = 0; i < ROUNDING_BAND_AUX; i++) b->aux[i] = xcalloc(n ? n : 1, sizeof(double));
}

void rounding_band_free(RoundingBand* b) {
    free(b->param);
    for (int i = 0; i < OPTIM_MAX_STATE; i++) free(b->state[i]);
    for (int i = 0; i < ROUNDING_BAND_AUX; i++) free(b->aux[i]);
    memset(b, 0, sizeof *b);
}

void rounding_band_follow(RoundingBand* b, const Optimizer* o, const char* mistake_id) {
    for (int k = 0; k < 2; k++) {
        const StateTensor* q = o && o->find_shared_state ? o->find_shared_state(k ? "qmap2" : "qmap1") : NULL;
        b->qmap[k] = q && q->dtype == DTYPE_F32 && shape_numel(&q->shape) == 256 ? q->data : NULL;
    }
    b->recurrence = mistake_id;
}

double* rounding_band_state(const RoundingBand* b, const OptimState* st, const char* name) {
    for (int i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name)) return b->state[i];
    return NULL;
}


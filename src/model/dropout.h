// dropout.h — DistilBERT's three dropouts in training, as transformers 5.24 places them and as
// torch 2.15's CPU dropout computes them, with masks from our own counter-based RNG.
//
// Where (modeling_distilbert.py, DistilBertForSequenceClassification, eager attention):
//   config.dropout              Embeddings: after the embeddings' LayerNorm (B, T, D), fp32
//                               FFN: after lin2, before the residual add (B, T, D), low dtype
//   config.attention_dropout    eager_attention_forward: on the softmax output (B, H, T, T),
//                               before the PV matmul; fp32 when the batch has padding (the
//                               fp32 mask promoted the scores), low without padding
//   config.seq_classif_dropout  after pre_classifier + ReLU, before the classifier (B, D), low
// In eval (no ModelBatch.dropout) nothing runs, as module.training=False in torch.
//
// Arithmetic (ATen native/Dropout.cpp _dropout_impl, the CPU path of at::dropout): p == 0
// returns the input; otherwise noise = bernoulli(1 - p) in the INPUT's dtype, noise.div_(1 - p)
// (1 - p in double, the division in float: 1.0f / (float)(1 - p), rounded to the dtype; in bf16
// 1/0.9 becomes 1.109375), output = input * noise (one product, rounded to the dtype); p == 1
// multiplies by zero. The backward is the product's backward: grad_in = grad_out * noise, in the
// same dtype. dropout_scale and dropout_mul below are exactly these two steps.
//
// Masks (documented bit for bit in reference/MODEL_SEMANTICS.md, section 10, so a script can
// rebuild them; reference/dropout_masks.py does): mix64 is SplitMix64's output function,
//   mix64(z) = z ^= z >> 30, z *= 0xBF58476D1CE4E5B9, z ^= z >> 27, z *= 0x94D049BB133111EB,
//              z ^ z >> 31                                               (all mod 2^64)
//   absorb(k, v) = mix64(k + (v + 1) * G), G = 0x9E3779B97F4A7C15
//   key(seed, step, example, site, layer) =
//       absorb(absorb(absorb(seed, step), example), site << 32 | layer)
//   draw(key, i) = mix64(key + (i + 1) * G)        (SplitMix64's (i+1)-th output from key)
//   kept(i) = (draw(key, i) >> 11) * 2^-53 < 1 - p (compared in double)
// step: the optimizer step, 1-based (ModelBatch.step); example: the row's global index within
// that optimizer step (ModelBatch.first_example + row); site: DropoutSite below; layer: the
// transformer layer (0 for the embeddings and the classifier); i: the element's row-major index
// in that example's own tensor: (t, d) -> t*D + d for the embeddings and FFN sites,
// (h, q, k) -> (h*T + q)*T + k for attention, d for the classifier. A mask therefore depends on
// nothing but (seed, step, example, site, layer, i): not on threads, ranks, micro-batching or
// the batch's other rows.
#ifndef TRAINBENCH_DROPOUT_H
#define TRAINBENCH_DROPOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/dtype.h"

typedef struct {
    double hidden;      // config.dropout: the embeddings' output and every FFN output
    double attention;   // config.attention_dropout: the attention probabilities
    double classifier;  // config.seq_classif_dropout: the classifier head's input
    uint64_t seed;      // the run's --seed (first word of every mask key)
} DropoutConfig;

// The sites, the `site` word of the key (values are part of the documented key layout).
typedef enum {
    DROPOUT_SITE_EMBEDDINGS = 1,
    DROPOUT_SITE_ATTENTION = 2,
    DROPOUT_SITE_FFN = 3,
    DROPOUT_SITE_CLASSIFIER = 4,
} DropoutSite;

const char* dropout_site_name(DropoutSite site);  // "embeddings", "attention", "ffn", "classifier"

// STATUS_INVALID naming the field unless every probability is in [0, 1] (torch's check).
// names: the three names to use in the message (config.json keys or flags), in field order.
Status dropout_config_validate(const DropoutConfig* d, const char* const names[3]);
bool dropout_config_any(const DropoutConfig* d);  // some probability > 0

// One site's mask as the layers read it: keep[i] 1 = kept, 0 = dropped; keep NULL = the site
// does not run (p == 0, or eval).
typedef struct {
    const uint8_t* keep;
    double p;
} DropoutMask;

uint64_t dropout_mix64(uint64_t z);
uint64_t dropout_key(uint64_t seed, int64_t step, int64_t example, DropoutSite site, int layer);
uint64_t dropout_draw(uint64_t key, uint64_t i);  // draw(key, i) (above)
// kept(i) for one example's key (above).
bool dropout_kept(uint64_t key, uint64_t i, double p);
// Masks of B examples (rows first_example .. first_example + B - 1 of step `step`), each of
// per_example elements: keep (B, per_example). Parallel over rows when not already in a
// parallel region; the bits do not depend on it.
void dropout_fill_mask(uint8_t* keep, uint64_t seed, int64_t step, int64_t first_example, int B,
                       size_t per_example, DropoutSite site, int layer, double p);

// The value torch multiplies kept elements by: R_dt(1.0f / (float)(1.0 - p)); 0 when p == 1
// (torch multiplies by a zero tensor). dt: the dropout input's dtype (DTYPE_F32, BF16 or F16).
float dropout_scale(double p, DType dt);
// y[i] = R_dt(x[i] * noise[i]), noise[i] = keep[i] ? scale : 0 (a real multiply: inf * 0 is
// NaN, as in torch). Forward (x = the input) and backward (x = the incoming gradient) alike;
// y may equal x. Serial inside a parallel region, parallel over chunks otherwise.
void dropout_mul(float* y, const float* x, const uint8_t* keep, size_t n, float scale, DType dt);

#endif

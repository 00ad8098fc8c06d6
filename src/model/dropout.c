// dropout.c — implementation of dropout.h: the counter-based mask RNG and torch's CPU dropout
// arithmetic (scale in the input's dtype, one rounded product per element).
#include "model/dropout.h"

#include <omp.h>

#define DROPOUT_GOLDEN 0x9E3779B97F4A7C15ull  // SplitMix64's increment (odd: v -> (v+1)*G is a bijection)

const char* dropout_site_name(DropoutSite site) {
    switch (site) {
        case DROPOUT_SITE_EMBEDDINGS: return "embeddings";
        case DROPOUT_SITE_ATTENTION: return "attention";
        case DROPOUT_SITE_FFN: return "ffn";
        case DROPOUT_SITE_CLASSIFIER: return "classifier";
    }
    return "?";
}

Status dropout_config_validate(const DropoutConfig* d, const char* const names[3]) {
    const double p[3] = {d->hidden, d->attention, d->classifier};
    for (int i = 0; i < 3; i++)
        if (!(p[i] >= 0.0 && p[i] <= 1.0))  // NaN fails too
            return status_make(STATUS_INVALID, "%s must be a probability in [0, 1] (got %g)", names[i], p[i]);
    return status_ok();
}

bool dropout_config_any(const DropoutConfig* d) { return d->hidden > 0 || d->attention > 0 || d->classifier > 0; }

uint64_t dropout_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// mix64 is a bijection and v -> (v + 1) * G too, so for a fixed k distinct v give distinct keys.
static uint64_t absorb(uint64_t k, uint64_t v) { return dropout_mix64(k + (v + 1) * DROPOUT_GOLDEN); }

uint64_t dropout_key(uint64_t seed, int64_t step, int64_t example, DropoutSite site, int layer) {
    uint64_t k = absorb(seed, (uint64_t)step);
    k = absorb(k, (uint64_t)example);
    return absorb(k, (uint64_t)site << 32 | (uint32_t)layer);
}

uint64_t dropout_draw(uint64_t key, uint64_t i) { return dropout_mix64(key + (i + 1) * DROPOUT_GOLDEN); }

bool dropout_kept(uint64_t key, uint64_t i, double p) {
    return (double)(dropout_draw(key, i) >> 11) * 0x1p-53 < 1.0 - p;
}

static void fill_row(uint8_t* keep, uint64_t key, size_t n, double p) {
    const double keep_prob = 1.0 - p;
    for (size_t i = 0; i < n; i++) keep[i] = (double)(dropout_draw(key, (uint64_t)i) >> 11) * 0x1p-53 < keep_prob;
}

void dropout_fill_mask(uint8_t* keep, uint64_t seed, int64_t step, int64_t first_example, int B,
                       size_t per_example, DropoutSite site, int layer, double p) {
#pragma omp parallel for schedule(static) if (B > 1 && !omp_in_parallel())
    for (int b = 0; b < B; b++)
        fill_row(keep + (size_t)b * per_example, dropout_key(seed, step, first_example + b, site, layer), per_example,
                 p);
}

float dropout_scale(double p, DType dt) {
    if (p >= 1.0) return 0.0f;
    // noise.div_(1 - p): the double scalar becomes a float operand, the division runs in float
    // (opmath of bf16/fp16 too) and the quotient is stored in the noise tensor's dtype.
    return dtype_round(1.0f / (float)(1.0 - p), dt);
}

#define DROPOUT_CHUNK 65536

static void mul_chunk(float* y, const float* x, const uint8_t* keep, size_t n, float scale, DType dt) {
    if (dt == DTYPE_F32) {
        for (size_t i = 0; i < n; i++) y[i] = x[i] * (keep[i] ? scale : 0.0f);
        return;
    }
    // x and scale hold low values (8 or 11 significant bits): their fp32 product is exact, so
    // rounding it once is torch's low-dtype multiply (computed in float, stored in low).
    for (size_t i = 0; i < n; i++) y[i] = x[i] * (keep[i] ? scale : 0.0f);
    dtype_round_row(y, dt, n);
}

void dropout_mul(float* y, const float* x, const uint8_t* keep, size_t n, float scale, DType dt) {
    if (n <= DROPOUT_CHUNK || omp_in_parallel()) {
        mul_chunk(y, x, keep, n, scale, dt);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += DROPOUT_CHUNK)
        mul_chunk(y + i0, x + i0, keep + i0, n - i0 < DROPOUT_CHUNK ? n - i0 : DROPOUT_CHUNK, scale, dt);
}

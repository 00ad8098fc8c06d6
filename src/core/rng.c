// rng.c — implementation of rng.h (SplitMix64 seeding, xoshiro256**, polar normals).
#include "core/rng.h"

#include <math.h>

#include "core/common.h"

uint64_t splitmix64_next(uint64_t* z) {
    uint64_t x = (*z += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void rng_init(Rng* r, uint64_t seed, uint64_t stream) {
    uint64_t z = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64_next(&z);
    r->has_spare = false;
    r->spare = 0;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next_u64(Rng* r) {
    uint64_t* s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(Rng* r) { return (double)(rng_next_u64(r) >> 11) * 0x1p-53; }

float rng_uniform_f32(Rng* r) { return (float)(rng_next_u64(r) >> 40) * 0x1p-24f; }

uint32_t rng_below(Rng* r, uint32_t n) {
    CHECK(n >= 1);
    // Lemire's multiply-shift with rejection: exact uniformity.
    uint64_t m = (uint64_t)(uint32_t)(rng_next_u64(r) >> 32) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (low < threshold) {
            m = (uint64_t)(uint32_t)(rng_next_u64(r) >> 32) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

float rng_normal(Rng* r, float mean, float std) {
    double z;
    if (r->has_spare) {
        r->has_spare = false;
        z = r->spare;
    } else {
        double u, v, s;
        do {
            u = 2.0 * rng_uniform(r) - 1.0;
            v = 2.0 * rng_uniform(r) - 1.0;
            s = u * u + v * v;
        } while (s >= 1.0 || s == 0.0);
        double f = sqrt(-2.0 * log(s) / s);
        r->spare = v * f;
        r->has_spare = true;
        z = u * f;
    }
    return (float)((double)mean + (double)std * z);
}

void rng_fill_normal(Rng* r, float* x, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(r, mean, std);
}

void rng_fill_uniform(Rng* r, float* x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform_f32(r);
}

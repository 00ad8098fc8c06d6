// rng.h — the project's deterministic random numbers. Algorithm (documented so any language
// can reproduce it bit for bit):
//   seeding:  SplitMix64 (Steele, Lea, Flood 2014): z += 0x9E3779B97F4A7C15;
//             z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB;
//             out = z ^ z>>31. The four xoshiro state words are four successive outputs
//             starting from z = seed ^ (stream * 0xD1B54A32D192ED03).
//   generator: xoshiro256** 1.0 (Blackman, Vigna 2018): out = rotl(s1*5, 7)*9, then the
//             standard xoshiro256 state update.
//   uniform:  u64 >> 11 times 2^-53 in [0, 1) (double); u64 >> 40 times 2^-24 (float).
//   normal:   Marsaglia polar method in double (two uniforms in (-1,1), reject r >= 1 or 0,
//             factor sqrt(-2 ln r / r)), both values used in turn, result rounded to float.
// The sequence depends only on (seed, stream): no global state, no dependence on threads.
// Code that draws in parallel gives each independent unit (row, tensor, worker) its own
// stream id so the result does not depend on the thread count.
#ifndef TRAINBENCH_RNG_H
#define TRAINBENCH_RNG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
    bool has_spare;   // polar method makes normals in pairs
    double spare;
} Rng;

void rng_init(Rng* r, uint64_t seed, uint64_t stream);
uint64_t rng_next_u64(Rng* r);
double rng_uniform(Rng* r);               // [0, 1), 53 random bits
float rng_uniform_f32(Rng* r);            // [0, 1), 24 random bits
uint32_t rng_below(Rng* r, uint32_t n);   // uniform integer in [0, n), unbiased (n >= 1)
float rng_normal(Rng* r, float mean, float std);
void rng_fill_normal(Rng* r, float* x, size_t n, float mean, float std);
void rng_fill_uniform(Rng* r, float* x, size_t n, float lo, float hi);
uint64_t splitmix64_next(uint64_t* z);

#endif

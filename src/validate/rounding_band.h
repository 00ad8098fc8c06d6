// rounding_band.h — the rounding-order bands (RoundingBand, optim.h; reference/CONFORMANCE.md
// "Verdict bands") of the optimizers whose own file does not carry one: derived here, in
// src/validate, from the library's recurrence (band_adafactor.c: both Adafactor dialects;
// band_adamw_bnb_8bit.c: bitsandbytes 8-bit AdamW). adamw_torch's lives in its optimizer file
// (Optimizer.rounding_band_step). conform and check ask rounding_band_of() for either.
// Not here: comparing against a band (conform_count_beyond_band, conform.c).
#ifndef TRAINBENCH_ROUNDING_BAND_H
#define TRAINBENCH_ROUNDING_BAND_H

#include <math.h>

#include "optim/optim.h"

// A U8 code tensor's band per element: how many code steps below and above the reference's
// code a correct implementation can reach, packed in one double (NaN: none, identical only).
static inline double code_band_pack(int down, int up) { return (double)down + 1024.0 * (double)up; }
static inline int code_band_down(double b) { return (int)(b - 1024.0 * floor(b / 1024.0)); }
static inline int code_band_up(double b) { return (int)floor(b / 1024.0); }

typedef void (*RoundingBandStep)(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                                 const float* g, const OptimConfig* cfg);

// o's band step: o->rounding_band_step when set, else the one registered here for o->name
// (a known-mistake variant or a tweaked config of an optimizer follows that optimizer's
// recurrence, so it gets the same band); NULL: no band derived.
RoundingBandStep rounding_band_of(const Optimizer* o);

// Allocates b's arrays for a state laid out like st (param band n doubles, one band per F32 or
// U8 state tensor of that tensor's numel: U8 codes' bands are code_band_pack()ed; aux[] of n
// doubles each), all zero; rounding_band_free releases them.
void rounding_band_alloc(RoundingBand* b, size_t n, const OptimState* st);
void rounding_band_free(RoundingBand* b);
// Points b at the band reference's code maps (o's find_shared_state qmap1/qmap2, if any) and,
// for a known-mistake variant, at its id (the recurrence the band follows); NULL: none.
void rounding_band_follow(RoundingBand* b, const Optimizer* o, const char* mistake_id);
// The band array of st's tensor `name` (NULL: none).
double* rounding_band_state(const RoundingBand* b, const OptimState* st, const char* name);

void band_adafactor_hf_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                            const float* g, const OptimConfig* cfg);
void band_adamw_bnb_8bit_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                              const float* g, const OptimConfig* cfg);
void band_adafactor_torch_step(RoundingBand* b, const OptimState* st, const float* p_prev, const float* p,
                               const float* g, const OptimConfig* cfg);

#endif

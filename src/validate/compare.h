// compare.h — element-wise comparison of a result with a reference, the one rule used by the
// conformance tests (and `trainbench check` later): |x - ref| <= atol + rtol*|ref| per element;
// NaN in x is a failure unless ref has NaN at the same place. Reports max abs/rel error, max
// ulp distance, the worst element and the share of the tolerance it used.
#ifndef TRAINBENCH_COMPARE_H
#define TRAINBENCH_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t n;
    double max_abs, max_rel;  // rel = abs / |ref| (0 where ref == 0 and x == 0)
    uint32_t max_ulp;         // fp32 ulp distance (ordered-integer difference)
    size_t worst;             // index of the element using most of its tolerance
    double worst_got, worst_ref;
    double used;              // max over elements of |x - ref| / (atol + rtol*|ref|); inf on NaN mismatch
    size_t n_fail;            // elements outside tolerance
    size_t n_exact;           // bit-identical elements
    bool ok;
} CompareF32;

CompareF32 compare_f32(const float* x, const float* ref, size_t n, double atol, double rtol);
// As compare_f32 with a per-element absolute term: tol_i = atol + rtol*|ref_i| + scale_k*scale[i].
// Used where the error scales with a quantity other than the result (e.g. a parameter's
// cumulative movement |p_t - p_{t-1}| summed over steps, when p nearly cancels).
CompareF32 compare_f32_scaled(const float* x, const float* ref, size_t n, double atol, double rtol,
                              const double* scale, double scale_k);
uint32_t ulp_distance_f32(float a, float b);  // UINT32_MAX if exactly one is NaN
// The rule every comparison applies to one element: the share of its tolerance
// atol + rtol*|b| + extra that |a - b| uses (0 when equal, NaN matching NaN or equal infinities;
// INFINITY for NaN against a number, unequal infinities, or a difference with zero tolerance).
// Finite errors update *max_abs and *max_rel (relative to |b|).
double compare_element_used(double a, double b, double atol, double rtol, double extra, double* max_abs,
                            double* max_rel);

typedef struct {
    size_t n, n_equal;
    int max_dist;       // max |code - ref code|
    size_t worst;
    double frac_equal;  // n_equal / n (1 for n == 0)
} CompareU8;

CompareU8 compare_u8(const uint8_t* x, const uint8_t* ref, size_t n);

#endif

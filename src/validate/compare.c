// compare.c — implementation of compare.h.
#include "validate/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t ordered(float x) {
    int32_t i;
    memcpy(&i, &x, 4);
    return i < 0 ? (int64_t)INT32_MIN - i : i;  // monotonic integer line, -0 == +0
}

double compare_element_used(double a, double b, double atol, double rtol, double extra, double* max_abs,
                            double* max_rel) {
    if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0 : INFINITY;
    if (isinf(a) || isinf(b)) return a == b ? 0 : INFINITY;
    double err = fabs(a - b);
    double rel = b != 0 ? err / fabs(b) : (err == 0 ? 0 : INFINITY);
    if (err > *max_abs) *max_abs = err;
    if (rel > *max_rel) *max_rel = rel;
    double tol = atol + rtol * fabs(b) + extra;
    return err == 0 ? 0 : (tol > 0 ? err / tol : INFINITY);
}

uint32_t ulp_distance_f32(float a, float b) {
    if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0 : UINT32_MAX;
    int64_t d = ordered(a) - ordered(b);
    if (d < 0) d = -d;
    return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

CompareF32 compare_f32(const float* x, const float* ref, size_t n, double atol, double rtol) {
    return compare_f32_scaled(x, ref, n, atol, rtol, NULL, 0);
}

CompareF32 compare_f32_scaled(const float* x, const float* ref, size_t n, double atol, double rtol,
                              const double* scale, double scale_k) {
    CompareF32 r;
    memset(&r, 0, sizeof r);
    r.n = n;
    r.used = 0;
    for (size_t i = 0; i < n; i++) {
        double a = x[i], b = ref[i];
        if (memcmp(&x[i], &ref[i], 4) == 0) r.n_exact++;
        uint32_t ulp = ulp_distance_f32(x[i], ref[i]);
        if (ulp > r.max_ulp) r.max_ulp = ulp;
        double used = compare_element_used(a, b, atol, rtol, scale ? scale_k * scale[i] : 0, &r.max_abs, &r.max_rel);
        if (used > 1) r.n_fail++;
        if (used > r.used || i == 0) {
            if (used >= r.used) {
                r.used = used;
                r.worst = i;
                r.worst_got = a;
                r.worst_ref = b;
            }
        }
    }
    r.ok = r.n_fail == 0;
    return r;
}

CompareU8 compare_u8(const uint8_t* x, const uint8_t* ref, size_t n) {
    CompareU8 r;
    memset(&r, 0, sizeof r);
    r.n = n;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)x[i] - (int)ref[i]);
        if (d == 0) r.n_equal++;
        if (d > r.max_dist) {
            r.max_dist = d;
            r.worst = i;
        }
    }
    r.frac_equal = n ? (double)r.n_equal / (double)n : 1.0;
    return r;
}

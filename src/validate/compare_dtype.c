// compare_dtype.c — implementation of compare_dtype.h. Values are read with dtype.h's exact
// readers; the float loop applies compare.h's rule and picks the worst element the same way as
// compare_f32_scaled, so f32/bf16/f16 tensors give the numbers they always gave.
#include "validate/compare_dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/common.h"
#include "validate/compare.h"

Tolerance dtype_default_tolerance(DType dt) {
    Tolerance t = {0, 0, 0, 1.0, 0, "integers and u8 codes of a plain tensor: exact"};
    const DTypeTraits* tr = dtype_traits(dt);
    switch (dt) {
        case DTYPE_F32:
            t.why = "f32 default: rtol 2 eps (2-4 ulp), atol smallest normal (flush-to-zero)";
            break;
        case DTYPE_BF16:
            t.why = "bf16 default: rtol 2 eps (2-4 ulp), atol smallest normal (flush-to-zero)";
            break;
        case DTYPE_F16:
            t.why = "f16 default: rtol 2 eps (2-4 ulp), atol smallest normal (flush-to-zero)";
            break;
        case DTYPE_F64:
            t.why = "f64 default: rtol 2 eps (2-4 ulp), atol smallest normal (flush-to-zero)";
            break;
        case DTYPE_C64:
            t.why = "c64 default: each part as f32, rtol 2 eps (2-4 ulp), atol smallest normal";
            break;
        case DTYPE_F8_E8M0:
            t.why = "f8_e8m0 default: exact (powers of two: one code apart is a factor 2)";
            return t;
        default:
            if (tr->kind != DTYPE_KIND_FLOAT) return t;
            // 8 bits or fewer: one code step is already 6-50% of the value
            t.rtol = tr->eps;
            t.atol = tr->min_subnormal;
            t.why = "8-bit-or-smaller float default: rtol 1 eps (1-2 ulp), atol smallest subnormal (1 ulp at 0)";
            return t;
    }
    t.rtol = 2 * tr->eps;
    t.atol = tr->min_normal;
    return t;
}

static bool is_real_float(DType dt) { return dtype_traits(dt)->kind == DTYPE_KIND_FLOAT; }
static bool is_integer(DType dt) {
    DTypeKind k = dtype_traits(dt)->kind;
    return k == DTYPE_KIND_SIGNED || k == DTYPE_KIND_UNSIGNED || k == DTYPE_KIND_BOOL;
}

bool dtype_widening_ok(DType golden, DType candidate, char* why, size_t why_len) {
    if (golden == candidate) return true;
    if ((is_real_float(golden) && is_real_float(candidate)) || (is_integer(golden) && is_integer(candidate)))
        return true;
    snprintf(why, why_len, "%s and %s have no exact common type (allowed: two real float dtypes, widened to f64, "
             "or two integer/bool dtypes, compared as integers)", dtype_name(golden), dtype_name(candidate));
    return false;
}

static TensorCompare compare_ints(const StTensor* got, const StTensor* ref) {
    TensorCompare r;
    memset(&r, 0, sizeof r);
    r.is_int = true;
    r.worst_part = -1;
    r.widened = got->dtype != ref->dtype;
    size_t bad = 0;
    const size_t n = ref->numel;
    for (size_t i = 0; i < n; i++) {
        __int128 a = dtype_int_at(got->dtype, got->data, i), b = dtype_int_at(ref->dtype, ref->data, i);
        __int128 d = a > b ? a - b : b - a;
        if (d > 0) bad++;
        if ((double)d > r.max_abs) {
            r.max_abs = (double)d;
            r.worst = i;
        }
    }
    r.all_exact = bad == 0;
    r.used = bad ? INFINITY : 0;
    r.ok = bad == 0;
    if (n) {
        r.worst_got_int = dtype_int_at(got->dtype, got->data, r.worst);
        r.worst_ref_int = dtype_int_at(ref->dtype, ref->data, r.worst);
    }
    r.worst_got = (double)r.worst_got_int;
    r.worst_ref = (double)r.worst_ref_int;
    return r;
}

TensorCompare compare_tensor_values(const StTensor* got, const StTensor* ref, const Tolerance* tol,
                                    const double* moved) {
    CHECK(got->numel == ref->numel);
    if (is_integer(ref->dtype)) {
        CHECK(is_integer(got->dtype));
        return compare_ints(got, ref);
    }
    TensorCompare r;
    memset(&r, 0, sizeof r);
    r.worst_part = -1;
    const bool complex = dtype_traits(ref->dtype)->kind == DTYPE_KIND_COMPLEX;
    CHECK(complex ? got->dtype == ref->dtype : is_real_float(got->dtype));
    const DType vg = complex ? DTYPE_F32 : got->dtype, vr = complex ? DTYPE_F32 : ref->dtype;
    r.widened = got->dtype != ref->dtype;
    r.has_ulp = !r.widened;
    const size_t n = complex ? 2 * ref->numel : ref->numel;  // complex: (re, im) parts
    size_t n_exact = 0;
    for (size_t i = 0; i < n; i++) {
        const double a = dtype_f64_at(vg, got->data, i), b = dtype_f64_at(vr, ref->data, i);
        if (r.widened) {
            n_exact += (a == b && signbit(a) == signbit(b)) || (isnan(a) && isnan(b));
        } else {
            const uint64_t ca = dtype_code_at(vg, got->data, i), cb = dtype_code_at(vr, ref->data, i);
            n_exact += ca == cb;
            uint64_t ulp = dtype_ulp_distance(vr, ca, cb);
            if (ulp > r.max_ulp) r.max_ulp = ulp;
        }
        double used = compare_element_used(a, b, tol->atol, tol->rtol,
                                           moved ? tol->move_k * moved[complex ? i / 2 : i] : 0, &r.max_abs, &r.max_rel);
        if (used > r.used || i == 0) {
            if (used >= r.used) {
                r.used = used;
                r.worst = complex ? i / 2 : i;
                r.worst_part = complex ? (int)(i % 2) : -1;
                r.worst_got = a;
                r.worst_ref = b;
            }
        }
    }
    r.all_exact = n_exact == n;
    r.ok = !(r.used > 1);
    return r;
}

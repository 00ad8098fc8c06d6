// compare_dtype.h — comparing two safetensors tensors of any dtype of the format, value by
// value, for `trainbench check`: the default tolerance of each dtype, reading both sides exactly
// (floats to double, integers and bool to exact 128-bit integers, complex per part), and the
// exact widening used when the dtypes differ (--allow-dtype-mismatch).
// Not here: u8 code comparison (compare.h compare_u8), the tolerance rule itself
// (|x - ref| <= atol + rtol*|ref| + move_k*moved, compare.h), the per-optimizer tolerances
// (conform.c), printing.
#ifndef TRAINBENCH_COMPARE_DTYPE_H
#define TRAINBENCH_COMPARE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/safetensors.h"
#include "validate/conform.h"

// The tolerance of a plain tensor of dtype dt (no optimizer rule applies): floats of 16 bits
// or more rtol 2 eps, atol the smallest normal; floats of 8 bits or fewer rtol 1 eps, atol the
// smallest subnormal; f8_e8m0 (powers of two) and integers, bool exact; c64 as f32 per part.
Tolerance dtype_default_tolerance(DType dt);

// Whether golden and candidate values of these dtypes can be compared after exact widening:
// both real floats (to double), or both integers/bool (to 128-bit integers). Otherwise false
// with the reason in why.
bool dtype_widening_ok(DType golden, DType candidate, char* why, size_t why_len);

typedef struct {
    bool is_int;            // compared as exact integers (is_int) or as floats
    bool widened;           // the dtypes differ: values compared after exact widening
    bool has_ulp;           // max_ulp is meaningful (floats of one dtype: ulps of that format)
    bool all_exact, ok;
    double max_abs, max_rel, used;
    uint64_t max_ulp;       // UINT64_MAX when NaN meets a number
    size_t worst;           // element index of the worst element (complex: element, see part)
    int worst_part;         // complex: 0 real, 1 imaginary; else -1
    double worst_got, worst_ref;            // floats
    __int128 worst_got_int, worst_ref_int;  // integers (exact)
} TensorCompare;

// Compares got with ref (same numel; dtypes equal, or dtype_widening_ok). moved: NULL or
// (numel) per-element scales for tol->move_k. Integers and bool pass only when all equal.
TensorCompare compare_tensor_values(const StTensor* got, const StTensor* ref, const Tolerance* tol,
                                    const double* moved);

#endif

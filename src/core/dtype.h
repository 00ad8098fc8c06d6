// dtype.h — the DType table (one registry for element types), the fp16 and bf16 storage
// types, and conversions between them and fp32.
// Conversion semantics are SPEC.md section 1: round to nearest, ties to even; subnormals kept;
// overflow to +-inf; NaN stays NaN (fp16 NaN -> 0x7E00|sign, bf16 NaN -> 0x7FC0, as PyTorch c10).
// Each conversion has a scalar reference version and a row version that dispatches at run time
// to AVX-512 / AVX2 code when the CPU has it; the row versions are bit-identical to the scalar
// ones (tests/test_dtype.c proves it on >10^7 inputs).
// Not here: rounding policy of precision modes (amp.h), GEMM (gemm.h).
#ifndef TRAINBENCH_DTYPE_H
#define TRAINBENCH_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Distinct struct types so an fp16 buffer cannot be passed where bf16 is expected.
typedef struct { uint16_t bits; } Fp16;
typedef struct { uint16_t bits; } Bf16;

// To add a dtype: add an enum value before DTYPE_COUNT, one row in DTYPES (dtype.c), and
// (for float dtypes) its converters. Tests and `trainbench info` iterate the table.
typedef enum {
    DTYPE_F32 = 0,
    DTYPE_BF16,
    DTYPE_F16,
    DTYPE_F64,
    DTYPE_U8,
    DTYPE_I32,
    DTYPE_I64,
    DTYPE_COUNT
} DType;

typedef struct {
    const char* name;         // registry name used in flags, ids, JSON: "f32", "bf16", "f16", ...
    const char* st_name;      // safetensors dtype string: "F32", "BF16", "F16", ...
    size_t size;              // bytes per element
    bool is_float;
    bool is_gemm_input;       // usable as a GEMM input dtype (f32, bf16, f16)
    double eps;               // machine epsilon (ulp at 1) for float types, 0 otherwise
    double max_finite;        // largest finite value for float types
} DTypeTraits;

const DTypeTraits* dtype_traits(DType dt);
const char* dtype_name(DType dt);
// Look up by registry name ("bf16") or safetensors name ("BF16"); returns false if unknown.
bool dtype_from_name(const char* name, DType* out);
bool dtype_from_st_name(const char* st_name, DType* out);
// "f32, bf16, f16, ..." for error messages
const char* dtype_names_list(void);

// ---- scalar reference converters ----
// reference: pytorch c10/util/Half.h fp16_ieee_from_fp32_value / fp16_ieee_to_fp32_value
Fp16 fp16_from_f32(float x);
float fp16_to_f32(Fp16 h);
// reference: pytorch c10/util/BFloat16.h round_to_nearest_even / f32_from_bits
Bf16 bf16_from_f32(float x);
float bf16_to_f32(Bf16 b);

// ---- row converters: dispatch to the fastest bit-identical implementation ----
void fp16_from_f32_row(Fp16* dst, const float* src, size_t n);
void fp16_to_f32_row(float* dst, const Fp16* src, size_t n);
void bf16_from_f32_row(Bf16* dst, const float* src, size_t n);
void bf16_to_f32_row(float* dst, const Bf16* src, size_t n);

// Generic forms over the DType table (dt must be F32, BF16 or F16).
void dtype_from_f32_row(void* dst, DType dt, const float* src, size_t n);  // round
void dtype_to_f32_row(float* dst, DType dt, const void* src, size_t n);    // widen (exact)
// Round every value to dt and back in place (what a tensor "stored in dt" holds).
void dtype_round_row(float* x, DType dt, size_t n);
float dtype_round(float x, DType dt);

// ---- dispatch control (for tests and `trainbench info`) ----
typedef enum { CONVERT_SCALAR = 0, CONVERT_AVX2, CONVERT_AVX512, CONVERT_IMPL_COUNT } ConvertImpl;
const char* convert_impl_name(ConvertImpl impl);
bool convert_impl_available(ConvertImpl impl);  // CPU supports it
ConvertImpl convert_impl_active(void);
// Force an implementation (tests); returns false if the CPU lacks it. CONVERT_IMPL_COUNT
// restores automatic selection.
bool convert_impl_force(ConvertImpl impl);

#endif

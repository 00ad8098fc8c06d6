// dtype.h — the DType table (one registry for element types: every dtype of the safetensors
// format), exact value readers for each of them (fp8, fp6, fp4, integers, complex), the fp16 and
// bf16 storage types, and conversions between them and fp32.
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
#include <string.h>

// Distinct struct types so an fp16 buffer cannot be passed where bf16 is expected.
typedef struct { uint16_t bits; } Fp16;
typedef struct { uint16_t bits; } Bf16;

// Every dtype of the safetensors format (its Dtype list as of safetensors 0.8).
// To add a dtype: add an enum value before DTYPE_COUNT (whole-byte elements) or before
// DTYPE_COUNT_ALL (packed sub-byte elements), one row in DTYPES (dtype.c), and its value reader
// (dtype_f64_at / dtype_int_at). Tests and `trainbench info` iterate the table.
// DTYPE_COUNT counts the whole-byte types, the ones any buffer of this project can hold (one
// element = `size` bytes); the packed types after it (F4, F6_*) exist only as safetensors
// storage: `size` is 0 for them, use dtype_nbytes().
typedef enum {
    DTYPE_F32 = 0,
    DTYPE_BF16,
    DTYPE_F16,
    DTYPE_F64,
    DTYPE_U8,
    DTYPE_I32,
    DTYPE_I64,
    DTYPE_BOOL,
    DTYPE_I8,
    DTYPE_I16,
    DTYPE_U16,
    DTYPE_U32,
    DTYPE_U64,
    DTYPE_F8_E4M3,      // torch.float8_e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448
    DTYPE_F8_E4M3FNUZ,  // torch.float8_e4m3fnuz: bias 8, no inf, no -0, NaN = 0x80, max 240
    DTYPE_F8_E5M2,      // torch.float8_e5m2: IEEE-like, bias 15, inf and NaN, max 57344
    DTYPE_F8_E5M2FNUZ,  // torch.float8_e5m2fnuz: bias 16, no inf, no -0, NaN = 0x80
    DTYPE_F8_E8M0,      // torch.float8_e8m0fnu: 2^(code - 127), no sign, no zero, NaN = 0xFF
    DTYPE_C64,          // complex64: (real, imaginary) f32 pairs
    DTYPE_COUNT,        // the whole-byte types end here
    DTYPE_F4 = DTYPE_COUNT,  // MX FP4 E2M1 (torch.float4_e2m1fn_x2 holds two), 4 bits
    DTYPE_F6_E2M3,      // MX FP6 E2M3, 6 bits
    DTYPE_F6_E3M2,      // MX FP6 E3M2, 6 bits
    DTYPE_COUNT_ALL,
    // Not a dtype: what the safetensors reader gives a tensor whose dtype name it does not know
    // (only when asked to list such tensors, StReadOptions); dtype_traits() refuses it.
    DTYPE_UNKNOWN = DTYPE_COUNT_ALL
} DType;

typedef enum {
    DTYPE_KIND_FLOAT = 0,   // real floating point: values exactly representable as double
    DTYPE_KIND_SIGNED,      // signed integers
    DTYPE_KIND_UNSIGNED,    // unsigned integers (U8 also serves as bitsandbytes' codes)
    DTYPE_KIND_BOOL,        // one byte, 0 = false, anything else true (numpy/torch read it so)
    DTYPE_KIND_COMPLEX,     // pairs of `part` floats
} DTypeKind;

typedef struct {
    const char* name;         // registry name used in flags, ids, JSON: "f32", "bf16", "f16", ...
    const char* st_name;      // safetensors dtype string: "F32", "BF16", "F16", ...
    size_t size;              // bytes per element; 0 for packed sub-byte types (see bits)
    bool is_float;            // real floating point (not complex)
    bool is_gemm_input;       // usable as a GEMM input dtype (f32, bf16, f16)
    double eps;               // machine epsilon (ulp at 1) for float types, 0 otherwise
    double max_finite;        // largest finite value for float types
    // added with the whole safetensors format:
    unsigned bits;            // bits per element (4, 6, 8, ..., 64)
    DTypeKind kind;
    double min_normal;        // float types: smallest positive normal (for e8m0: 2^-127)
    double min_subnormal;     // float types: smallest positive value
} DTypeTraits;

const DTypeTraits* dtype_traits(DType dt);
const char* dtype_name(DType dt);
// Look up by registry name ("bf16") or safetensors name ("BF16"); returns false if unknown.
bool dtype_from_name(const char* name, DType* out);
bool dtype_from_st_name(const char* st_name, DType* out);
// "f32, bf16, f16, ..." for error messages (every dtype of the table)
const char* dtype_names_list(void);

// ---- every dtype: sizes and exact value readers ----
// Bytes of n elements of dt: numel * bits / 8. False when that overflows or, for a packed type,
// is not a whole number of bytes (the safetensors rule: numel * bits % 8 == 0).
bool dtype_nbytes(DType dt, size_t numel, size_t* out);
// The raw code of element i (its `bits` bits; packed types: element i is bits [i*bits,
// i*bits + bits) of the data read as a little-endian bit stream, so F4 element 0 is the low
// nibble of byte 0, as torch.float4_e2m1fn_x2 stores it). C64: the real part's f32 bits.
uint64_t dtype_code_at(DType dt, const void* data, size_t i);
// Float kinds: element i exactly as a double (every format here fits); NaN/inf as they are.
double dtype_f64_at(DType dt, const void* data, size_t i);
// A float code exactly as a double (dt a float kind other than F32/F64 with code < 2^bits).
double dtype_decode_small_float(DType dt, uint32_t code);
// Integer and bool kinds: element i exactly (I64 and U64 in full).
__int128 dtype_int_at(DType dt, const void* data, size_t i);
// Float kinds: distance of two codes on the format's ordered value line (-0 == +0, adjacent
// representable values are 1 apart); 0 when both are NaN, UINT64_MAX when exactly one is.
uint64_t dtype_ulp_distance(DType dt, uint64_t code_a, uint64_t code_b);
bool dtype_is_nan_code(DType dt, uint64_t code);

// ---- scalar reference converters ----
// reference: pytorch c10/util/Half.h fp16_ieee_from_fp32_value / fp16_ieee_to_fp32_value
Fp16 fp16_from_f32(float x);
float fp16_to_f32(Fp16 h);
// reference: pytorch c10/util/BFloat16.h round_to_nearest_even / f32_from_bits
Bf16 bf16_from_f32(float x);
float bf16_to_f32(Bf16 b);

// x rounded to bf16 and widened back (= bf16_to_f32(bf16_from_f32(x)), bit for bit: nearest,
// ties to even, overflow to inf, NaN -> 0x7FC0), written branch-free on the bits so that a loop
// calling it vectorizes (fusing a rounding point into another pass costs no extra memory pass).
static inline float bf16_round_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    const uint32_t nan = 0u - (uint32_t)((u & 0x7FFFFFFFu) > 0x7F800000u);  // all ones for a NaN
    u = (r & ~nan) | (0x7FC00000u & nan);
    memcpy(&x, &u, sizeof x);
    return x;
}

// One 16-bit pattern widened, inline and branch-free (a loop that loads through them vectorizes;
// a call per element of fp16_to_f32 / bf16_to_f32 costs ~8x in a sum): the same bits as those
// two on all 65,536 patterns (test_dtype), NaNs quieted as fp16_to_f32 does.
static inline float bf16_widen_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline float fp16_widen_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = (uint32_t)(h & 0x7FFFu) << 13;  // exponent and mantissa in a float's places
    const uint32_t e = em & 0x0F800000u;                // the fp16 exponent field
    const uint32_t infnan = 0u - (uint32_t)(e == 0x0F800000u), sub = 0u - (uint32_t)(e == 0u);
    const uint32_t quiet = infnan & (0u - (uint32_t)((em & 0x007FFFFFu) != 0u)) & 0x00400000u;
    const uint32_t normal = em + ((127u - 15u) << 23) + (infnan & ((128u - 16u) << 23));
    // zero and subnormals: m * 2^-24 as (1 + m/1024) * 2^-14 - 2^-14, both exact
    const uint32_t one_m = em + (113u << 23);
    float f, t;
    memcpy(&t, &one_m, sizeof t);
    t -= 0x1p-14f;
    uint32_t ts;
    memcpy(&ts, &t, sizeof ts);
    const uint32_t u = sign | (sub & ts) | (~sub & (normal | quiet));
    memcpy(&f, &u, sizeof f);
    return f;
}

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
// CONVERT_AVX512_BF16: CONVERT_AVX512 whose fp32 -> bf16 rounding uses avx512_bf16's
// VCVTNEPS2BF16 where it is exact (see dtype.c); the fastest available is chosen.
typedef enum { CONVERT_SCALAR = 0, CONVERT_AVX2, CONVERT_AVX512, CONVERT_AVX512_BF16, CONVERT_IMPL_COUNT } ConvertImpl;
const char* convert_impl_name(ConvertImpl impl);
bool convert_impl_available(ConvertImpl impl);  // CPU supports it
ConvertImpl convert_impl_active(void);
// Force an implementation (tests); returns false if the CPU lacks it. CONVERT_IMPL_COUNT
// restores automatic selection.
bool convert_impl_force(ConvertImpl impl);

#endif

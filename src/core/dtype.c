// dtype.c — the DType table and fp16/bf16 <-> fp32 conversion: scalar reference versions
// written with integer arithmetic only (so they do not depend on FPU modes such as FTZ/DAZ),
// and AVX2/AVX-512 row versions selected at run time, bit-identical to the scalar ones.
// avx512_bf16's VCVTNEPS2BF16 alone is not bit-identical to PyTorch's conversion: it flushes
// fp32 subnormal inputs to zero and keeps NaN payloads (tests/test_dtype.c measures that on this
// CPU). It rounds every other input exactly as round_to_nearest_even does (bf16 has fp32's
// exponent range, so a normal fp32 never becomes a bf16 subnormal), so CONVERT_AVX512_BF16 uses
// it and recomputes with the integer form only the vectors that hold a subnormal or a NaN.
#include "core/dtype.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/common.h"
#include "core/cpu.h"

// ---- the table ----
// name, st_name, size, is_float, is_gemm_input, eps, max_finite, bits, kind, min_normal,
// min_subnormal. Float facts from each format's definition (c10/util/Float8_*.h, the OCP MX
// spec for F8_E8M0, F4, F6_*).
#define NOT_FLOAT 0, 0
static const DTypeTraits DTYPES[DTYPE_COUNT_ALL] = {
    [DTYPE_F32] = {"f32", "F32", 4, true, true, 0x1p-23, 3.4028234663852886e38, 32, DTYPE_KIND_FLOAT, 0x1p-126, 0x1p-149},
    [DTYPE_BF16] = {"bf16", "BF16", 2, true, true, 0x1p-7, 0x1.fep127, 16, DTYPE_KIND_FLOAT, 0x1p-126, 0x1p-133},
    [DTYPE_F16] = {"f16", "F16", 2, true, true, 0x1p-10, 65504.0, 16, DTYPE_KIND_FLOAT, 0x1p-14, 0x1p-24},
    [DTYPE_F64] = {"f64", "F64", 8, true, false, 0x1p-52, 1.7976931348623157e308, 64, DTYPE_KIND_FLOAT, 0x1p-1022, 0x1p-1074},
    [DTYPE_U8] = {"u8", "U8", 1, false, false, 0, 0, 8, DTYPE_KIND_UNSIGNED, 0, 0},
    [DTYPE_I32] = {"i32", "I32", 4, false, false, 0, 0, 32, DTYPE_KIND_SIGNED, 0, 0},
    [DTYPE_I64] = {"i64", "I64", 8, false, false, 0, 0, 64, DTYPE_KIND_SIGNED, 0, 0},
    [DTYPE_BOOL] = {"bool", "BOOL", 1, false, false, NOT_FLOAT, 8, DTYPE_KIND_BOOL, 0, 0},
    [DTYPE_I8] = {"i8", "I8", 1, false, false, NOT_FLOAT, 8, DTYPE_KIND_SIGNED, 0, 0},
    [DTYPE_I16] = {"i16", "I16", 2, false, false, NOT_FLOAT, 16, DTYPE_KIND_SIGNED, 0, 0},
    [DTYPE_U16] = {"u16", "U16", 2, false, false, NOT_FLOAT, 16, DTYPE_KIND_UNSIGNED, 0, 0},
    [DTYPE_U32] = {"u32", "U32", 4, false, false, NOT_FLOAT, 32, DTYPE_KIND_UNSIGNED, 0, 0},
    [DTYPE_U64] = {"u64", "U64", 8, false, false, NOT_FLOAT, 64, DTYPE_KIND_UNSIGNED, 0, 0},
    [DTYPE_F8_E4M3] = {"f8_e4m3", "F8_E4M3", 1, true, false, 0x1p-3, 448.0, 8, DTYPE_KIND_FLOAT, 0x1p-6, 0x1p-9},
    [DTYPE_F8_E4M3FNUZ] = {"f8_e4m3fnuz", "F8_E4M3FNUZ", 1, true, false, 0x1p-3, 240.0, 8, DTYPE_KIND_FLOAT, 0x1p-7, 0x1p-10},
    [DTYPE_F8_E5M2] = {"f8_e5m2", "F8_E5M2", 1, true, false, 0x1p-2, 57344.0, 8, DTYPE_KIND_FLOAT, 0x1p-14, 0x1p-16},
    [DTYPE_F8_E5M2FNUZ] = {"f8_e5m2fnuz", "F8_E5M2FNUZ", 1, true, false, 0x1p-2, 57344.0, 8, DTYPE_KIND_FLOAT, 0x1p-15, 0x1p-17},
    [DTYPE_F8_E8M0] = {"f8_e8m0", "F8_E8M0", 1, true, false, 1.0, 0x1p127, 8, DTYPE_KIND_FLOAT, 0x1p-127, 0x1p-127},
    [DTYPE_C64] = {"c64", "C64", 8, false, false, 0x1p-23, 3.4028234663852886e38, 64, DTYPE_KIND_COMPLEX, 0x1p-126, 0x1p-149},
    [DTYPE_F4] = {"f4", "F4", 0, true, false, 0x1p-1, 6.0, 4, DTYPE_KIND_FLOAT, 1.0, 0x1p-1},
    [DTYPE_F6_E2M3] = {"f6_e2m3", "F6_E2M3", 0, true, false, 0x1p-3, 7.5, 6, DTYPE_KIND_FLOAT, 1.0, 0x1p-3},
    [DTYPE_F6_E3M2] = {"f6_e3m2", "F6_E3M2", 0, true, false, 0x1p-2, 28.0, 6, DTYPE_KIND_FLOAT, 0x1p-2, 0x1p-4},
};
#undef NOT_FLOAT

const DTypeTraits* dtype_traits(DType dt) {
    CHECK(dt >= 0 && dt < DTYPE_COUNT_ALL, "dtype %d", (int)dt);
    return &DTYPES[dt];
}

const char* dtype_name(DType dt) { return dtype_traits(dt)->name; }

bool dtype_from_name(const char* name, DType* out) {
    for (int i = 0; i < DTYPE_COUNT_ALL; i++) {
        if (strcmp(DTYPES[i].name, name) == 0 || strcmp(DTYPES[i].st_name, name) == 0) {
            *out = (DType)i;
            return true;
        }
    }
    return false;
}

bool dtype_from_st_name(const char* st_name, DType* out) {
    for (int i = 0; i < DTYPE_COUNT_ALL; i++) {
        if (strcmp(DTYPES[i].st_name, st_name) == 0) {
            *out = (DType)i;
            return true;
        }
    }
    return false;
}

const char* dtype_names_list(void) {
    static char buf[512];
    if (!buf[0]) {
        for (int i = 0; i < DTYPE_COUNT_ALL; i++) {
            if (i) strcat(buf, ", ");
            strcat(buf, DTYPES[i].name);
        }
    }
    return buf;
}

// ---- every dtype: sizes and exact value readers ----

bool dtype_nbytes(DType dt, size_t numel, size_t* out) {
    const DTypeTraits* t = dtype_traits(dt);
    if (t->size) return size_mul_ok(numel, t->size, out);
    size_t nbits = 0;
    if (!size_mul_ok(numel, t->bits, &nbits) || nbits % 8 != 0) return false;
    *out = nbits / 8;
    return true;
}

static uint64_t load_le(const uint8_t* p, size_t n) {
    uint64_t v = 0;
    for (size_t k = n; k-- > 0;) v = (v << 8) | p[k];
    return v;
}

uint64_t dtype_code_at(DType dt, const void* data, size_t i) {
    const DTypeTraits* t = dtype_traits(dt);
    const uint8_t* p = data;
    if (t->kind == DTYPE_KIND_COMPLEX) return load_le(p + i * t->size, t->size / 2);
    if (t->size) return load_le(p + i * t->size, t->size);
    // packed: a little-endian bit stream (torch's float4_e2m1fn_x2: element 0 in bits 3..0)
    size_t bit = i * t->bits;
    unsigned shift = (unsigned)(bit % 8);
    uint32_t v = p[bit / 8] >> shift;
    if (shift + t->bits > 8) v |= (uint32_t)p[bit / 8 + 1] << (8 - shift);
    return v & ((1u << t->bits) - 1);
}

// A small float format: 1 sign bit (none for e8m0), E exponent bits, M mantissa bits.
typedef enum {
    SPECIALS_NONE,     // every code finite (F4, F6_*)
    SPECIALS_FN,       // no inf; exponent and mantissa all ones = NaN (F8_E4M3 = e4m3fn)
    SPECIALS_IEEE,     // exponent all ones: inf (mantissa 0) or NaN (F8_E5M2)
    SPECIALS_FNUZ,     // no inf, no -0: the code 1000...0 is the only NaN
    SPECIALS_E8M0,     // unsigned exponent only: 2^(code - 127), all ones = NaN
} Specials;

typedef struct {
    int e, m, bias;
    Specials specials;
} SmallFloat;

static bool small_float_of(DType dt, SmallFloat* f) {
    switch (dt) {
        case DTYPE_F16: *f = (SmallFloat){5, 10, 15, SPECIALS_IEEE}; return true;
        case DTYPE_BF16: *f = (SmallFloat){8, 7, 127, SPECIALS_IEEE}; return true;
        case DTYPE_F8_E4M3: *f = (SmallFloat){4, 3, 7, SPECIALS_FN}; return true;
        case DTYPE_F8_E4M3FNUZ: *f = (SmallFloat){4, 3, 8, SPECIALS_FNUZ}; return true;
        case DTYPE_F8_E5M2: *f = (SmallFloat){5, 2, 15, SPECIALS_IEEE}; return true;
        case DTYPE_F8_E5M2FNUZ: *f = (SmallFloat){5, 2, 16, SPECIALS_FNUZ}; return true;
        case DTYPE_F8_E8M0: *f = (SmallFloat){8, 0, 127, SPECIALS_E8M0}; return true;
        case DTYPE_F4: *f = (SmallFloat){2, 1, 1, SPECIALS_NONE}; return true;
        case DTYPE_F6_E2M3: *f = (SmallFloat){2, 3, 1, SPECIALS_NONE}; return true;
        case DTYPE_F6_E3M2: *f = (SmallFloat){3, 2, 3, SPECIALS_NONE}; return true;
        default: return false;
    }
}

bool dtype_is_nan_code(DType dt, uint64_t code) {
    SmallFloat f;
    if (dt == DTYPE_F32) return (code & 0x7FFFFFFFu) > 0x7F800000u;
    if (dt == DTYPE_F64) return (code & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
    if (!small_float_of(dt, &f)) return false;
    const uint64_t emax = (1u << f.e) - 1, mmask = (1u << f.m) - 1;
    const uint64_t ebits = (code >> f.m) & emax, man = code & mmask;
    switch (f.specials) {
        case SPECIALS_NONE: return false;
        case SPECIALS_FN: return ebits == emax && man == mmask;
        case SPECIALS_IEEE: return ebits == emax && man != 0;
        case SPECIALS_FNUZ: return code == (1u << (f.e + f.m));
        case SPECIALS_E8M0: return code == 0xFF;
    }
    return false;
}

// reference: the format definitions of c10/util/Float8_e4m3fn.h, Float8_e4m3fnuz.h,
// Float8_e5m2.h, Float8_e5m2fnuz.h, Float8_e8m0fnu.h (fp8_*_to_fp32_value) and the OCP MX spec
// (F4 E2M1, F6 E2M3/E3M2); checked against torch's own conversion of all 256 fp8 codes in
// tests/test_safetensors_dtypes.c (reference/golden/safetensors/fp8_all_codes.safetensors).
double dtype_decode_small_float(DType dt, uint32_t code) {
    SmallFloat f;
    CHECK(small_float_of(dt, &f), "%s is not a small float format", dtype_name(dt));
    if (dtype_is_nan_code(dt, code)) {
        bool neg = f.specials != SPECIALS_E8M0 && f.specials != SPECIALS_FNUZ && (code >> (f.e + f.m)) & 1;
        return neg ? -NAN : NAN;
    }
    if (f.specials == SPECIALS_E8M0) return ldexp(1.0, (int)code - f.bias);
    const uint32_t emax = (1u << f.e) - 1, mmask = (1u << f.m) - 1;
    const uint32_t ebits = (code >> f.m) & emax, man = code & mmask;
    const bool neg = (code >> (f.e + f.m)) & 1;
    double v;
    if (f.specials == SPECIALS_IEEE && ebits == emax) v = INFINITY;  // mantissa 0 (NaN above)
    else if (ebits == 0) v = ldexp((double)man, 1 - f.bias - f.m);  // subnormal (or zero)
    else v = ldexp((double)((1u << f.m) | man), (int)ebits - f.bias - f.m);
    return neg ? -v : v;
}

double dtype_f64_at(DType dt, const void* data, size_t i) {
    const uint64_t code = dtype_code_at(dt, data, i);
    if (dt == DTYPE_F64) {
        double d;
        memcpy(&d, &code, 8);
        return d;
    }
    if (dt == DTYPE_F32) {
        uint32_t u = (uint32_t)code;
        float x;
        memcpy(&x, &u, 4);
        return x;
    }
    return dtype_decode_small_float(dt, (uint32_t)code);
}

__int128 dtype_int_at(DType dt, const void* data, size_t i) {
    const DTypeTraits* t = dtype_traits(dt);
    const uint64_t code = dtype_code_at(dt, data, i);
    switch (t->kind) {
        case DTYPE_KIND_UNSIGNED:
        case DTYPE_KIND_BOOL: return (__int128)code;
        case DTYPE_KIND_SIGNED: {
            if (t->bits == 64) return (__int128)(int64_t)code;
            const uint64_t sign = 1ull << (t->bits - 1);
            return (__int128)(int64_t)((code ^ sign) - sign);  // sign-extend
        }
        default: ABORT("dtype_int_at: %s is not an integer dtype", t->name);
    }
}

// Monotonic integer line of a float code (sign-magnitude -> two's complement; -0 == +0).
static int64_t ordered_code(DType dt, uint64_t code) {
    const DTypeTraits* t = dtype_traits(dt);
    if (dt == DTYPE_F8_E8M0) return (int64_t)code;  // no sign bit
    const unsigned sign_bit = t->bits - 1;
    const uint64_t mag = code & ((1ull << sign_bit) - 1);
    return (code >> sign_bit) & 1 ? -(int64_t)mag : (int64_t)mag;
}

uint64_t dtype_ulp_distance(DType dt, uint64_t code_a, uint64_t code_b) {
    CHECK(dtype_traits(dt)->kind == DTYPE_KIND_FLOAT, "ulp distance of %s", dtype_name(dt));
    bool na = dtype_is_nan_code(dt, code_a), nb = dtype_is_nan_code(dt, code_b);
    if (na || nb) return na && nb ? 0 : UINT64_MAX;
    int64_t a = ordered_code(dt, code_a), b = ordered_code(dt, code_b);
    return a > b ? (uint64_t)a - (uint64_t)b : (uint64_t)b - (uint64_t)a;
}

// ---- scalar reference converters ----
static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// reference: pytorch c10/util/Half.h fp16_ieee_from_fp32_value (same results, integer form)
Fp16 fp16_from_f32(float x) {
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFF;
    Fp16 h;
    if (a > 0x7F800000) {  // NaN -> canonical quiet NaN, sign kept
        h.bits = sign | 0x7E00;
    } else if (a >= 0x477FF000) {  // |x| >= 65520 (65504 + half an ulp, tie to even) -> inf
        h.bits = sign | 0x7C00;
    } else if (a >= 0x38800000) {  // |x| >= 2^-14: normal fp16
        uint32_t m = a - 0x38000000;  // rebias exponent 127 -> 15
        m += 0x0FFF + ((m >> 13) & 1);  // round to nearest even on the 13 dropped bits
        h.bits = sign | (uint16_t)(m >> 13);  // a carry into the exponent is the right answer
    } else if (a <= 0x33000000) {  // |x| <= 2^-25: rounds to zero (2^-25 is a tie -> even 0)
        h.bits = sign;
    } else {  // fp16 subnormal: count units of 2^-24
        uint32_t e = a >> 23;              // 102..112
        uint32_t mant = (a & 0x7FFFFF) | 0x800000;
        uint32_t shift = 126 - e;          // 14..24
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        h.bits = sign | (uint16_t)q;  // q == 0x400 is the smallest normal: correct encoding
    }
    return h;
}

// reference: pytorch c10/util/Half.h fp16_ieee_to_fp32_value (exact; NaN payload kept, quieted)
float fp16_to_f32(Fp16 h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000) << 16;
    uint32_t e = (h.bits >> 10) & 0x1F;
    uint32_t m = h.bits & 0x3FF;
    uint32_t u;
    if (e == 0x1F) {
        u = sign | 0x7F800000 | (m << 13) | (m ? 0x400000u : 0);
    } else if (e != 0) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else {  // subnormal: normalise m * 2^-24
        uint32_t exp = 113;  // exponent field for 2^-14
        while (!(m & 0x400)) {
            m <<= 1;
            exp--;
        }
        u = sign | (exp << 23) | ((m & 0x3FF) << 13);
    }
    return f32_from_bits(u);
}

// reference: pytorch c10/util/BFloat16.h round_to_nearest_even (NaN -> 0x7FC0, sign dropped)
Bf16 bf16_from_f32(float x) {
    uint32_t u = f32_bits(x);
    Bf16 b;
    if ((u & 0x7FFFFFFF) > 0x7F800000)
        b.bits = 0x7FC0;
    else
        b.bits = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    return b;
}

// reference: pytorch c10/util/BFloat16.h f32_from_bits (exact)
float bf16_to_f32(Bf16 b) { return f32_from_bits((uint32_t)b.bits << 16); }

// ---- scalar rows ----
static void fp16_from_f32_row_scalar(Fp16* dst, const float* src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = fp16_from_f32(src[i]);
}
static void fp16_to_f32_row_scalar(float* dst, const Fp16* src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = fp16_to_f32(src[i]);
}
static void bf16_from_f32_row_scalar(Bf16* dst, const float* src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}
static void bf16_to_f32_row_scalar(float* dst, const Bf16* src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

// ---- SIMD rows (x86-64; compiled with target attributes, used only when detected) ----
#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
#define AVX2 __attribute__((target("avx2,f16c")))

AVX512 static void fp16_from_f32_row_avx512(Fp16* dst, const float* src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(src + i);
        __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        if (nan) {  // hardware keeps NaN payloads; PyTorch writes 0x7E00 | sign
            __m512i sign = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 16),
                                            _mm512_set1_epi32(0x8000));
            __m256i canon = _mm256_or_si256(_mm512_cvtepi32_epi16(sign), _mm256_set1_epi16(0x7E00));
            h = _mm256_mask_blend_epi16(nan, h, canon);
        }
        _mm256_storeu_si256((__m256i*)(dst + i), h);
    }
    fp16_from_f32_row_scalar(dst + i, src + i, n - i);
}

AVX512 static void fp16_to_f32_row_avx512(float* dst, const Fp16* src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + i))));
    fp16_to_f32_row_scalar(dst + i, src + i, n - i);
}

AVX512 static void bf16_from_f32_row_avx512(Bf16* dst, const float* src, size_t n) {
    size_t i = 0;
    const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(src + i);
        __m512i u = _mm512_castps_si512(x);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
        __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC0));
        _mm256_storeu_si256((__m256i*)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    bf16_from_f32_row_scalar(dst + i, src + i, n - i);
}

#define AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c")))

AVX512BF16 static void bf16_from_f32_row_avx512bf16(Bf16* dst, const float* src, size_t n) {
    size_t i = 0;
    const __m512i bias = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), max_sub = _mm512_set1_epi32(0x007FFFFF),
                  inf = _mm512_set1_epi32(0x7F800000);
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(src + i);
        __m512i u = _mm512_castps_si512(x);
        __m512i a = _mm512_and_si512(u, abs_mask);
        // subnormal: |bits| in [1, 0x7FFFFF]; NaN: |bits| > 0x7F800000 (unsigned compares)
        __mmask16 special = _mm512_cmple_epu32_mask(_mm512_sub_epi32(a, one), _mm512_sub_epi32(max_sub, one)) |
                            _mm512_cmpgt_epu32_mask(a, inf);
        __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
        if (special) {  // the integer form of bf16_from_f32_row_avx512 for this vector
            __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
            __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
            r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FC0));
            h = _mm512_cvtepi32_epi16(r);
        }
        _mm256_storeu_si256((__m256i*)(dst + i), h);
    }
    bf16_from_f32_row_scalar(dst + i, src + i, n - i);
}

AVX512 static void bf16_to_f32_row_avx512(float* dst, const Bf16* src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(src + i)));
        _mm512_storeu_si512((void*)(dst + i), _mm512_slli_epi32(h, 16));
    }
    bf16_to_f32_row_scalar(dst + i, src + i, n - i);
}

AVX2 static void fp16_from_f32_row_avx2(Fp16* dst, const float* src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 nanmask = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
        if (_mm256_movemask_ps(nanmask)) {
            __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 16),
                                            _mm256_set1_epi32(0x8000));
            __m256i canon32 = _mm256_or_si256(sign, _mm256_set1_epi32(0x7E00));
            __m128i canon = _mm_packus_epi32(_mm256_castsi256_si128(canon32),
                                             _mm256_extracti128_si256(canon32, 1));
            __m256i m32 = _mm256_castps_si256(nanmask);
            __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(m32), _mm256_extracti128_si256(m32, 1));
            h = _mm_blendv_epi8(h, canon, m16);
        }
        _mm_storeu_si128((__m128i*)(dst + i), h);
    }
    fp16_from_f32_row_scalar(dst + i, src + i, n - i);
}

AVX2 static void fp16_to_f32_row_avx2(float* dst, const Fp16* src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i))));
    fp16_to_f32_row_scalar(dst + i, src + i, n - i);
}

AVX2 static void bf16_from_f32_row_avx2(Bf16* dst, const float* src, size_t n) {
    size_t i = 0;
    const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        __m256i u = _mm256_castps_si256(x);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
        __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
        __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i*)(dst + i), packed);
    }
    bf16_from_f32_row_scalar(dst + i, src + i, n - i);
}

AVX2 static void bf16_to_f32_row_avx2(float* dst, const Bf16* src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(src + i)));
        _mm256_storeu_si256((__m256i*)(dst + i), _mm256_slli_epi32(h, 16));
    }
    bf16_to_f32_row_scalar(dst + i, src + i, n - i);
}
#endif

// ---- dispatch ----
typedef struct {
    void (*fp16_from)(Fp16*, const float*, size_t);
    void (*fp16_to)(float*, const Fp16*, size_t);
    void (*bf16_from)(Bf16*, const float*, size_t);
    void (*bf16_to)(float*, const Bf16*, size_t);
} ConvertRows;

static const ConvertRows IMPLS[CONVERT_IMPL_COUNT] = {
    [CONVERT_SCALAR] = {fp16_from_f32_row_scalar, fp16_to_f32_row_scalar, bf16_from_f32_row_scalar,
                        bf16_to_f32_row_scalar},
#if defined(__x86_64__)
    [CONVERT_AVX2] = {fp16_from_f32_row_avx2, fp16_to_f32_row_avx2, bf16_from_f32_row_avx2,
                      bf16_to_f32_row_avx2},
    [CONVERT_AVX512] = {fp16_from_f32_row_avx512, fp16_to_f32_row_avx512, bf16_from_f32_row_avx512,
                        bf16_to_f32_row_avx512},
    [CONVERT_AVX512_BF16] = {fp16_from_f32_row_avx512, fp16_to_f32_row_avx512, bf16_from_f32_row_avx512bf16,
                             bf16_to_f32_row_avx512},
#endif
};

static ConvertImpl g_active;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

bool convert_impl_available(ConvertImpl impl) {
    const CpuFeatures* f = cpu_features();
    switch (impl) {
        case CONVERT_SCALAR: return true;
        case CONVERT_AVX2: return IMPLS[impl].fp16_from && f->avx2 && f->f16c;
        case CONVERT_AVX512: return IMPLS[impl].fp16_from && f->avx512f && f->avx512bw && f->avx512vl && f->f16c;
        case CONVERT_AVX512_BF16:
            return IMPLS[impl].fp16_from && f->avx512f && f->avx512bw && f->avx512vl && f->f16c && f->avx512_bf16;
        default: return false;
    }
}

static void choose_impl(void) {
    g_active = CONVERT_SCALAR;
    for (int i = CONVERT_IMPL_COUNT - 1; i > 0; i--) {
        if (convert_impl_available((ConvertImpl)i)) {
            g_active = (ConvertImpl)i;
            break;
        }
    }
}

ConvertImpl convert_impl_active(void) {
    pthread_once(&g_once, choose_impl);
    return g_active;
}

bool convert_impl_force(ConvertImpl impl) {
    pthread_once(&g_once, choose_impl);
    if (impl == CONVERT_IMPL_COUNT) {
        choose_impl();
        return true;
    }
    if (!convert_impl_available(impl)) return false;
    g_active = impl;
    return true;
}

const char* convert_impl_name(ConvertImpl impl) {
    static const char* const names[CONVERT_IMPL_COUNT] = {"scalar", "avx2", "avx512", "avx512_bf16"};
    CHECK(impl >= 0 && impl < CONVERT_IMPL_COUNT);
    return names[impl];
}

void fp16_from_f32_row(Fp16* dst, const float* src, size_t n) { IMPLS[convert_impl_active()].fp16_from(dst, src, n); }
void fp16_to_f32_row(float* dst, const Fp16* src, size_t n) { IMPLS[convert_impl_active()].fp16_to(dst, src, n); }
void bf16_from_f32_row(Bf16* dst, const float* src, size_t n) { IMPLS[convert_impl_active()].bf16_from(dst, src, n); }
void bf16_to_f32_row(float* dst, const Bf16* src, size_t n) { IMPLS[convert_impl_active()].bf16_to(dst, src, n); }

void dtype_from_f32_row(void* dst, DType dt, const float* src, size_t n) {
    switch (dt) {
        case DTYPE_F32: memmove(dst, src, n * sizeof(float)); break;
        case DTYPE_BF16: bf16_from_f32_row(dst, src, n); break;
        case DTYPE_F16: fp16_from_f32_row(dst, src, n); break;
        default: ABORT("dtype_from_f32_row: %s is not a float GEMM dtype", dtype_name(dt));
    }
}

void dtype_to_f32_row(float* dst, DType dt, const void* src, size_t n) {
    switch (dt) {
        case DTYPE_F32: memmove(dst, src, n * sizeof(float)); break;
        case DTYPE_BF16: bf16_to_f32_row(dst, src, n); break;
        case DTYPE_F16: fp16_to_f32_row(dst, src, n); break;
        default: ABORT("dtype_to_f32_row: %s is not a float GEMM dtype", dtype_name(dt));
    }
}

float dtype_round(float x, DType dt) {
    switch (dt) {
        case DTYPE_F32: return x;
        case DTYPE_BF16: return bf16_to_f32(bf16_from_f32(x));
        case DTYPE_F16: return fp16_to_f32(fp16_from_f32(x));
        default: ABORT("dtype_round: %s is not a float GEMM dtype", dtype_name(dt));
    }
}

void dtype_round_row(float* x, DType dt, size_t n) {
    if (dt == DTYPE_F32) return;
    uint16_t tmp[1024];
    for (size_t i = 0; i < n; i += 1024) {
        size_t m = n - i < 1024 ? n - i : 1024;
        dtype_from_f32_row(tmp, dt, x + i, m);
        dtype_to_f32_row(x + i, dt, tmp, m);
    }
}

// dtype.c — the DType table and fp16/bf16 <-> fp32 conversion: scalar reference versions
// written with integer arithmetic only (so they do not depend on FPU modes such as FTZ/DAZ),
// and AVX2/AVX-512 row versions selected at run time, bit-identical to the scalar ones.
// Not used on purpose: avx512_bf16's VCVTNEPS2BF16. It flushes fp32 subnormal inputs to zero
// and keeps NaN payloads, so it is not bit-identical to PyTorch's conversion; tests/test_dtype.c
// measures that on this CPU and shows the mismatches.
#include "core/dtype.h"

#include <pthread.h>
#include <string.h>

#include "core/common.h"
#include "core/cpu.h"

// ---- the table ----
static const DTypeTraits DTYPES[DTYPE_COUNT] = {
    [DTYPE_F32] = {"f32", "F32", 4, true, true, 0x1p-23, 3.4028234663852886e38},
    [DTYPE_BF16] = {"bf16", "BF16", 2, true, true, 0x1p-7, 0x1.fep127},
    [DTYPE_F16] = {"f16", "F16", 2, true, true, 0x1p-10, 65504.0},
    [DTYPE_F64] = {"f64", "F64", 8, true, false, 0x1p-52, 1.7976931348623157e308},
    [DTYPE_U8] = {"u8", "U8", 1, false, false, 0, 0},
    [DTYPE_I32] = {"i32", "I32", 4, false, false, 0, 0},
    [DTYPE_I64] = {"i64", "I64", 8, false, false, 0, 0},
};

const DTypeTraits* dtype_traits(DType dt) {
    CHECK(dt >= 0 && dt < DTYPE_COUNT, "dtype %d", (int)dt);
    return &DTYPES[dt];
}

const char* dtype_name(DType dt) { return dtype_traits(dt)->name; }

bool dtype_from_name(const char* name, DType* out) {
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(DTYPES[i].name, name) == 0 || strcmp(DTYPES[i].st_name, name) == 0) {
            *out = (DType)i;
            return true;
        }
    }
    return false;
}

bool dtype_from_st_name(const char* st_name, DType* out) {
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(DTYPES[i].st_name, st_name) == 0) {
            *out = (DType)i;
            return true;
        }
    }
    return false;
}

const char* dtype_names_list(void) {
    static char buf[128];
    if (!buf[0]) {
        for (int i = 0; i < DTYPE_COUNT; i++) {
            if (i) strcat(buf, ", ");
            strcat(buf, DTYPES[i].name);
        }
    }
    return buf;
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
    static const char* const names[CONVERT_IMPL_COUNT] = {"scalar", "avx2", "avx512"};
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

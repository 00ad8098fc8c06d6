// torch_sqrt.h — float32 sqrt exactly as torch's CPU Tensor.sqrt() computes it on the machine
// kind the goldens come from (MKL vmsSqrt, VML_HA). Used by optimizers that mirror torch code
// calling .sqrt() (adamw_torch, adamw_bnb_8bit).
// torch's CPU sqrt kernel calls MKL vmsSqrt(VML_HA), not a correctly rounded sqrt. On the
// machine kind the goldens come from (AMD EPYC Zen 5) MKL runs its SSE kernel
// (mkl_vml_kernel_sSqrt_EXHAynn): for positive normal x with bits <= 0x7F7FF000,
//   y = rsqrtps(x); s = x*y; h = 0.5f*y; e = 0.5f - s*h; s1 = s + s*e; h1 = h + h*e;
//   r = s1 + (x - s1*s1)*h1                     (every operation rounded to fp32, no FMA)
// and for everything else (0, subnormals, the top of the range, inf, NaN, negatives) an
// accurate double-precision path, i.e. the correctly rounded sqrtf. The result is within
// 1 ulp of sqrtf and differs from it for ~12% of inputs; it matched torch.sqrt bit for bit
// on all 2^24 floats in [1, 4) and 2e7 random bit patterns. rsqrtps is CPU-specific: its
// result on that CPU depends only on the exponent's parity and the top 12 mantissa bits,
// giving a 12-bit mantissa; the 8192 values (x in [1, 4) ascending, starting at 4095) are
// stored below as first differences (0..2), two per hex digit, so every host computes the
// same thing. A torch on another CPU (another MKL kernel) may round differently.
#ifndef TRAINBENCH_TORCH_SQRT_H
#define TRAINBENCH_TORCH_SQRT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

// 12-bit mantissa of rsqrtps(x), x in [1, 4); two zero entries after the 8192 so that a 32-bit
// gather of entry 8191 (torch_rsqrt8_table_avx2) stays inside the array
extern uint16_t torch_rsqrt_tab[8192 + 2];
void torch_sqrt_init(void);             // fills the table once (thread-safe); call before use
// True when this CPU's own 256-bit rsqrtps gives exactly the table's values (checked once over
// all 8192 table entries and a spread of exponents): then torch_sqrt8_avx2(x, true), which
// takes the instruction's estimate as its seed, is bit-identical to torch_sqrtf. (AMD Zen 4/5:
// yes; an Intel Xeon with AMX: no, its rsqrtps rounds other entries.)
bool torch_sqrt_hw_matches(void);
// True when the vector kernels may run (AVX2 and FMA, not forced portable): they then call
// torch_sqrt8_avx2(x, torch_sqrt_hw_matches()), whose seed is rsqrtps where it matches and
// the table, gathered 8 lanes at a time, elsewhere; both bit-identical to torch_sqrtf.
bool torch_sqrt_vector(void);
// True when vector kernels of MKL's AVX-512 model may run: the kernel is TORCH_SQRT_MKL_AVX512
// (which the setter allows only with AVX-512F) and the portable path is not forced.
bool torch_sqrt_vector_mkl_avx512(void);
// Tests: force_portable(true): both of the above report false (the scalar kernels);
// force_table(true): torch_sqrt_hw_matches() reports false (the gathered seed, on a CPU whose
// rsqrtps matches); false restores detection.
void torch_sqrt_force_portable(bool on);
void torch_sqrt_force_table(bool on);

// torch_sqrtf in two parts so that the table lookup can sit in its own (scalar) loop while
// the arithmetic vectorizes.
static inline uint32_t torch_rsqrt_tab_index(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    const int32_t e = (int32_t)(b >> 23) - 127;
    return ((uint32_t)(e & 1) << 12) | ((b >> 11) & 0xFFFu);
}

static inline float torch_sqrt_finish(float x, uint32_t tab) {
    uint32_t b;
    memcpy(&b, &x, 4);
    const int32_t e = (int32_t)(b >> 23) - 127;
    const int32_t yb = (int32_t)(0x3F000000u | tab << 11) - (e >> 1) * (1 << 23);  // rsqrt(x*4^-k) * 2^-k
    float y;
    memcpy(&y, &yb, 4);
    const float s = x * y, h = y * 0.5f;
    const float c = 0.5f - s * h;
    const float s1 = s + s * c, h1 = h + h * c;
    const float r = s1 + (x - s1 * s1) * h1;
    const bool rare = b - 0x00800000u > 0x7F7FF000u - 0x00800000u;  // outside [min normal, 0x7F7FF000]
    return rare ? sqrtf(x) : r;
}

// Which of MKL's sqrt kernels torch_sqrtf reproduces (reference/OPTIM_SEMANTICS.md 0.3): the SSE
// kernel MKL takes on the goldens' AMD machine (the table above: the default), or the AVX-512
// kernel it takes on Intel AVX-512 CPUs (vrsqrt14ps seed, one fused Newton step, biased
// exponents below 64 scaled by 2^64). `trainbench conform` sets it per golden from its
// `torch_sqrt` metadata (absent: mkl-sse), restoring it afterwards.
typedef enum { TORCH_SQRT_MKL_SSE = 0, TORCH_SQRT_MKL_AVX512 = 1 } TorchSqrtKernel;
extern TorchSqrtKernel g_torch_sqrt_kernel;  // read by torch_sqrtf; set only through the setter
// Sets the kernel for the steps that follow (process-wide: never while a step runs).
// MKL_AVX512 needs AVX-512F (vrsqrt14ps): on a CPU without it, false and nothing changes.
// Under MKL_AVX512 torch_sqrt_vector() is false: the table/rsqrtps vector kernels stand aside
// (adamw_torch has its own for this kernel, torch_sqrt8_mkl_avx512, and bnb's AVX-512 kernels
// torch_sqrt16_mkl_avx512; bnb's AVX2 one stands aside too: it runs scalar where AVX-512BW is missing).
bool torch_sqrt_set_kernel(TorchSqrtKernel k);
const char* torch_sqrt_kernel_name(TorchSqrtKernel k);          // "mkl-sse", "mkl-avx512"
bool torch_sqrt_kernel_parse(const char* s, TorchSqrtKernel* out);  // the names above
float torch_sqrtf_mkl_avx512(float x);  // the Intel kernel's model; AVX-512F CPUs only
// The process's kernel from the environment, once, at start (optim_apply_env): TRAINBENCH_TORCH_SQRT
// = mkl-sse (the default), mkl-avx512, or auto (mkl-avx512 on an Intel CPU with AVX-512F, the
// kernel its torch takes; else mkl-sse). false and a message in err for any other value, or for
// mkl-avx512 on a CPU without AVX-512F.
bool torch_sqrt_apply_env(char* err, size_t cap);

static inline float torch_sqrtf(float x) {
    if (g_torch_sqrt_kernel == TORCH_SQRT_MKL_AVX512) return torch_sqrtf_mkl_avx512(x);
    return torch_sqrt_finish(x, torch_rsqrt_tab[torch_rsqrt_tab_index(x)]);
}

// root[i] = torch_sqrtf(v[i]) for n values, seed[n] as scratch: under the table's kernel the
// lookups in their own scalar loop, so that the arithmetic vectorizes; always inlined, so that
// it does so in the caller's target (bnb's target_clones).
static inline __attribute__((always_inline)) void torch_sqrtf_n(const float* restrict v, float* restrict root, uint32_t* restrict seed, size_t n) {
    if (g_torch_sqrt_kernel == TORCH_SQRT_MKL_AVX512) {
        for (size_t i = 0; i < n; i++) root[i] = torch_sqrtf_mkl_avx512(v[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) seed[i] = torch_rsqrt_tab[torch_rsqrt_tab_index(v[i])];
#pragma omp simd
    for (size_t i = 0; i < n; i++) root[i] = torch_sqrt_finish(v[i], seed[i]);
}


#if defined(__x86_64__)
#include <immintrin.h>
// torch_sqrt_finish's seed y for 8 lanes from the table (torch_rsqrt_tab_index's index, one
// 32-bit gather, the low 16 bits kept): the same integer steps, lane by lane.
__attribute__((target("avx2"))) static inline __m256 torch_rsqrt8_table_avx2(__m256 x) {
    const __m256i b = _mm256_castps_si256(x);
    const __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(127));
    const __m256i idx = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(e, _mm256_set1_epi32(1)), 12),
                                        _mm256_and_si256(_mm256_srli_epi32(b, 11), _mm256_set1_epi32(0xFFF)));
    const __m256i tab = _mm256_and_si256(_mm256_i32gather_epi32((const int*)(const void*)torch_rsqrt_tab, idx, 2),
                                         _mm256_set1_epi32(0xFFFF));
    const __m256i yb = _mm256_sub_epi32(_mm256_or_si256(_mm256_set1_epi32(0x3F000000), _mm256_slli_epi32(tab, 11)),
                                        _mm256_slli_epi32(_mm256_srai_epi32(e, 1), 23));
    return _mm256_castsi256_ps(yb);
}

// 8 lanes of torch_sqrtf: the seed from rsqrtps (hw_seed: only valid if torch_sqrt_hw_matches())
// or from the table. Every operation is a separate rounded fp32 op (no FMA), as in
// torch_sqrt_finish.
__attribute__((target("avx2"))) static inline __m256 torch_sqrt8_avx2(__m256 x, bool hw_seed) {
    const __m256 half = _mm256_set1_ps(0.5f);
    __m256 y = hw_seed ? _mm256_rsqrt_ps(x) : torch_rsqrt8_table_avx2(x);
    __m256 s = _mm256_mul_ps(x, y), h = _mm256_mul_ps(y, half);
    __m256 c = _mm256_sub_ps(half, _mm256_mul_ps(s, h));
    __m256 s1 = _mm256_add_ps(s, _mm256_mul_ps(s, c)), h1 = _mm256_add_ps(h, _mm256_mul_ps(h, c));
    __m256 r = _mm256_add_ps(s1, _mm256_mul_ps(_mm256_sub_ps(x, _mm256_mul_ps(s1, s1)), h1));
    // "rare" lanes (not a positive normal <= 0x7F7FF000) take the correctly rounded sqrt
    __m256i d = _mm256_sub_epi32(_mm256_castps_si256(x), _mm256_set1_epi32(0x00800000));
    __m256i rare = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), d),
                                   _mm256_cmpgt_epi32(d, _mm256_set1_epi32(0x7F7FF000 - 0x00800000)));
    if (_mm256_testz_si256(rare, rare)) return r;  // the usual case: no vsqrtps (it is not cheap)
    return _mm256_blendv_ps(r, _mm256_sqrt_ps(x), _mm256_castsi256_ps(rare));
}

// 8 lanes of torch_sqrtf_mkl_avx512 (MKL's AVX-512 kernel): the same steps, lane by lane; for
// kernels compiled for AVX-512VL (vrsqrt14ps on 256 bits), used only under TORCH_SQRT_MKL_AVX512.
__attribute__((target("avx2,fma,avx512f,avx512vl"))) static inline __m256 torch_sqrt8_mkl_avx512(__m256 x) {
    const __m256i b = _mm256_castps_si256(x);
    const __m256i bm1 = _mm256_sub_epi32(b, _mm256_set1_epi32(1));  // tiny: 0 < b < 64 << 23
    const __m256i tiny = _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32((64 << 23) - 1), bm1),
                                          _mm256_cmpgt_epi32(bm1, _mm256_set1_epi32(-1)));
    const __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(0x1p64f)), _mm256_castsi256_ps(tiny));
    const __m256 y = _mm256_rsqrt14_ps(xs);
    const __m256 s = _mm256_mul_ps(xs, y), h = _mm256_mul_ps(y, _mm256_set1_ps(0.5f));
    __m256 r = _mm256_fmadd_ps(_mm256_fnmadd_ps(s, s, xs), h, s);
    r = _mm256_blendv_ps(r, _mm256_mul_ps(r, _mm256_set1_ps(0x1p-32f)), _mm256_castsi256_ps(tiny));
    // +-0 as they are; inf, NaN and negatives (b >= 0x7F800000 unsigned) the correctly rounded sqrt
    const __m256i zero = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_setzero_si256());
    const __m256i special = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), b),
                                            _mm256_cmpgt_epi32(b, _mm256_set1_epi32(0x7F7FFFFF)));
    r = _mm256_blendv_ps(r, _mm256_sqrt_ps(x), _mm256_castsi256_ps(_mm256_or_si256(special, zero)));
    return r;
}

// 16 lanes of torch_sqrtf_mkl_avx512, with masks instead of blends (for bnb's AVX-512 kernels,
// under TORCH_SQRT_MKL_AVX512 only): tiny lanes (0 < bits < 64 << 23) scaled by 2^64 and the
// result by 2^-32; +-0 as they are; inf, NaN and negatives the correctly rounded sqrt.
__attribute__((target("avx512f,fma"))) static inline __m512 torch_sqrt16_mkl_avx512(__m512 x) {
    const __m512i b = _mm512_castps_si512(x);
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(b, _mm512_set1_epi32(1)), _mm512_set1_epi32((64 << 23) - 1));
    const __m512 xs = _mm512_mask_mul_ps(x, tiny, x, _mm512_set1_ps(0x1p64f));
    const __m512 y = _mm512_rsqrt14_ps(xs);
    const __m512 s = _mm512_mul_ps(xs, y), h = _mm512_mul_ps(y, _mm512_set1_ps(0.5f));
    __m512 r = _mm512_fmadd_ps(_mm512_fnmadd_ps(s, s, xs), h, s);
    r = _mm512_mask_mul_ps(r, tiny, r, _mm512_set1_ps(0x1p-32f));
    // zero: bits & 0x7FFFFFFF == 0; special: bits >= 0x7F800000 unsigned (inf, NaN, negatives)
    const __mmask16 zero = _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 special = _mm512_cmpgt_epu32_mask(b, _mm512_set1_epi32(0x7F7FFFFF));
    const __mmask16 exact = (__mmask16)(zero | special);
    return exact ? _mm512_mask_sqrt_ps(r, exact, x) : r;
}
#endif

#endif

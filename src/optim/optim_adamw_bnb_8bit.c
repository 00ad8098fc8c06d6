// optim_adamw_bnb_8bit.c — bitsandbytes.optim.AdamW8bit (bitsandbytes 0.50.2) exactly as it
// runs on CPU (torch CPU ops + libbitsandbytes_cpu.so), fp32 params and grads.
// Not here: the CUDA kernel (kOptimizerStatic8bit2StateBlockwise: decay after the update,
// NaN/Inf grads reset that element's state, exact nearest code by binary search), paged
// state, max_unorm/percentile clipping, bf16/fp16 params, block sizes other than 256.
//
// reference: bitsandbytes/optim/adamw.py AdamW8bit (Optimizer2State "adam", optim_bits 8)
// reference: bitsandbytes/optim/optimizer.py Optimizer2State.init_state / update_step
// reference: bitsandbytes/functional.py create_dynamic_map(signed=True / signed=False)
// reference: bitsandbytes/backends/cpu/ops.py _optimizer_update_8bit_blockwise_cpu,
//            _optimizer_update_32bit_cpu (the kernels registered for "cpu")
// reference: bitsandbytes csrc/cpu_ops.cpp quantize_cpu_impl, build_quantize_lut,
//            dequantizeBlockwise8bitCpu (checked against the disassembly of the installed .so)
//
// What the installed library really does (measured; torch 2.15 CPU, AVX512 kernels):
// - State per tensor. numel < min_8bit_size (4096): state1, state2 fp32 (param shape) and the
//   32-bit update. Otherwise state1, state2 uint8 codes (param shape), absmax1, absmax2 fp32
//   (ceil(n/256)), plus qmap1/qmap2 which are the SAME two 256-entry tensors for every
//   parameter (kept once here: shared_state_bytes). The step is a Python int (no tensor).
//   Block size is fixed at 256 by both init_state and the CPU kernel.
// - Code maps (create_dynamic_map): for i = 0..6, k = 2^i + 1 (signed) or 2^(i+1) + 1
//   (unsigned) boundaries from torch.linspace(0.1, 1, k, float32), midpoint means
//   (b[j] + b[j+1]) / 2 in fp32, times f32(10^(i-6)) in fp32; signed adds the negatives;
//   then 0 and 1.0 are appended and the 256 values sorted. torch's CPU linspace computes
//   step = (1 - 0.1f) / (k-1) in fp32 and element j as fma(step, j, 0.1f) for j < k/2 and
//   fma(-step, k-1-j, 1.0f) otherwise (one rounding each).
// - 8-bit step, per element in fp32 (g*gnorm_scale with gnorm_scale 1.0 is exact); the torch
//   ops' rounding was measured on torch 2.15 (add_ with alpha and addcmul_ are fused, tails
//   included; addcdiv_ is not; tensor / scalar is a true division):
//     m = code1[c1] * absmax1[blk]            v = code2[c2] * absmax2[blk]      (dequantize)
//     m = m * f32(b1);  m = fma(g, f32(1-b1), m)              mul_ then add_(alpha)
//     v = v * f32(b2);  v = fma(f32(1-b2) * g, g, v)           mul_ then addcmul_
//     c1 = 1 - b1^t, c2 = sqrt(1 - b2^t) in double (Python floats)
//     denom = tsqrt(v) / f32(c2) + f32(eps)                    eps after the division
//     p = p * f32(1 - lr*wd)   (only when wd > 0; multiplying by 1.0f is the same)
//     p = p + (f32(-lr/c1) * m) / denom                        addcdiv_
//   where tsqrt is torch.sqrt, which is NOT the correctly rounded sqrtf (see torch_sqrtf).
//   Then each state is requantized per 256-element block:
//     absmax = max over the block of |x|, NaN ignored, 0 if none is > 0;
//     absmax == 0: every code 0 (dequantizes to code[0]*0, i.e. -0 for the signed map);
//     else x * f32(1/absmax) (a reciprocal, not a division), clamped to [-1, 1] (NaN passes),
//     grid index = (uint16)trunc(fma((x+1)*0.5f, 65535, 0.5f)) (the .so fuses this; a NaN
//     gives index 0), code = lut[index]. lut[i] = number of midpoints
//     0.5f*(code[j]+code[j+1]) strictly below -1 + (2i)/65535 (fp32), i.e. the nearest code
//     to the grid point, ties to the lower code. So the result is the nearest code to the
//     snapped value, not to x itself, and 0 maps to the code nearest +1/65535 (not to 0).
//   Nothing is special-cased for NaN/inf gradients (unlike CUDA): they flow through.
// - 32-bit step (small tensors), fp32 per element:
//     m = m*f32(b1); m = fma(g, f32(1-b1), m);  v = v*f32(b2); v = fma(f32(1-b2)*g, g, v)
//     c1 = 1 - b1^t, c2 = sqrt(1 - b2^t), step_size = (-lr*c2)/c1 (double)
//     p = p * f32(1 - lr*wd) (wd > 0);  u = m / (tsqrt(v) + f32(eps*c2))
//     p = fma(u, f32(step_size), p)                            add_(alpha)
//   (eps is scaled by c2 here, while the 8-bit path adds eps after dividing by c2.)
// Checked bit for bit (params, codes, absmax, fp32 states, qmaps, every step) against the
// library: the goldens in reference/golden/optim/adamw_bnb_8bit plus throwaway cases (ragged
// last block, n = 4095/4096, 2-D, hyperparameter variants, zero/tiny/huge per-block scales,
// sparse and NaN/inf gradients, 60 steps); quantizer and maps also checked on 1.5M crafted
// values (every grid point and code midpoint +-1 ulp, NaN/inf/zero blocks).
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "optim/optim.h"
#include "optim/torch_sqrt.h"

#define BNB_BLOCK 256
#define BNB_LUT_SIZE 65536
#define BNB_CHUNK 64  // blocks per call of the AVX-512 kernel (16,384 elements)

typedef struct {
    OptimState base;
    bool is_8bit;
    size_t n;          // numel
    size_t n_blocks;   // ceil(n / 256) (8-bit only)
    void* state1;      // (param shape) uint8 codes or fp32 m
    void* state2;      // (param shape) uint8 codes or fp32 v
    float* absmax1;    // (n_blocks) 8-bit only
    float* absmax2;    // (n_blocks)
} Bnb8State;

// ---- the two shared code maps and their quantization LUTs (built once, thread-safe) ----
static float g_code1[256];                   // signed "dynamic" map (state1 = m)
static float g_code2[256];                   // unsigned "udynamic" map (state2 = v)
static uint8_t g_lut1[BNB_LUT_SIZE];         // grid point -> code index, signed map
static uint8_t g_lut2[BNB_LUT_SIZE];         // unsigned map
// The same LUTs as thresholds for the AVX-512 quantizer, which searches them in registers
// (gathers, from the 64 KiB LUT or from smaller L1-resident tables, measured slower than the
// rest of the step together). lut is non-decreasing, so lut[i] = #{j : T[j] <= i} with
// T[j] = the first grid index whose code is > j (j = 0..254; each fits in 16 bits because the
// last code, 1.0, is reached at i = 65535). The search is branch-free over the implicit tree in
// breadth-first (Eytzinger) order: node k (1..255) holds T[(2 (k - 2^d) + 1) 2^(7-d) - 1] at
// depth d; from k = 1, eight times k = 2k + (node k <= i); then k - 256 = lut[i]. Nodes 1..31
// (depths 0-4) fit in one register of 32 words, 32..63 in one, 64..127 in two, 128..255 in four.
static uint16_t g_tree1[256], g_tree2[256];  // [0] unused
// The code maps as planes of 16-bit halves (low, high) for the AVX-512 dequantizer, which
// looks codes up with word permutes instead of gathers.
static uint16_t g_code1_lo[256], g_code1_hi[256], g_code2_lo[256], g_code2_hi[256];
static pthread_once_t g_maps_once = PTHREAD_ONCE_INIT;

// torch.linspace(start, end, k, dtype=float32) as torch's CPU kernel computes it (k >= 2).
static void linspace_f32(float start, float end, int k, float* out) {
    const float step = (end - start) / (float)(k - 1);
    const int half = k / 2;
    for (int j = 0; j < k; j++)
        out[j] = j < half ? fmaf(step, (float)j, start) : fmaf(-step, (float)(k - 1 - j), end);
}

static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)
static void dynamic_map(bool is_signed, float* code) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        const int k = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        float bnd[129];
        linspace_f32(0.1f, 1.0f, k, bnd);
        const float scale = (float)pow(10.0, i - 6);  // Python 10 ** (i - 6)
        for (int j = 0; j + 1 < k; j++) {
            const float mean = (bnd[j] + bnd[j + 1]) / 2.0f;
            code[n++] = scale * mean;
            if (is_signed) code[n++] = -scale * mean;
        }
    }
    code[n++] = 0.0f;
    code[n++] = 1.0f;
    CHECK(n == 256, "dynamic map has %d entries", n);
    qsort(code, 256, sizeof(float), cmp_float);
}

// build_quantize_lut: nearest code for each of 65,536 grid points on [-1, 1]
static void build_lut(const float* code, uint8_t* lut) {
    float mid[255];
    for (int i = 0; i < 255; i++) mid[i] = 0.5f * (code[i] + code[i + 1]);
    int c = 0;
    for (int i = 0; i < BNB_LUT_SIZE; i++) {
        const float val = -1.0f + (2.0f * (float)i) / (float)(BNB_LUT_SIZE - 1);
        while (c < 255 && mid[c] < val) c++;
        lut[i] = (uint8_t)c;
    }
}

static void build_tree(const uint8_t* lut, uint16_t* tree) {
    uint32_t t[255];
    for (int j = 0, i = 0; j < 255; j++) {
        while (i < BNB_LUT_SIZE && lut[i] <= j) i++;
        CHECK(i < BNB_LUT_SIZE, "code %d is never reached", j + 1);
        t[j] = (uint32_t)i;
    }
    tree[0] = 0;
    for (int d = 0; d < 8; d++)
        for (int k = 1 << d; k < 2 << d; k++) tree[k] = (uint16_t)t[(2 * (k - (1 << d)) + 1) * (128 >> d) - 1];
    // the search, scalar, must give the LUT back at every grid point
    for (uint32_t i = 0; i < BNB_LUT_SIZE; i++) {
        uint32_t k = 1;
        for (int d = 0; d < 8; d++) k = 2 * k + (tree[k] <= i);
        CHECK(k - 256 == lut[i], "threshold search gives %u at grid point %u, the LUT %u", k - 256, i, lut[i]);
    }
}

#if defined(__x86_64__)
static void vbmi_init(void);
#endif

static void maps_init(void) {
    dynamic_map(true, g_code1);
    dynamic_map(false, g_code2);
    build_lut(g_code1, g_lut1);
    build_lut(g_code2, g_lut2);
    build_tree(g_lut1, g_tree1);
    build_tree(g_lut2, g_tree2);
    for (int i = 0; i < 256; i++) {
        uint32_t u1, u2;
        memcpy(&u1, &g_code1[i], 4);
        memcpy(&u2, &g_code2[i], 4);
        g_code1_lo[i] = (uint16_t)u1, g_code1_hi[i] = (uint16_t)(u1 >> 16);
        g_code2_lo[i] = (uint16_t)u2, g_code2_hi[i] = (uint16_t)(u2 >> 16);
    }
    torch_sqrt_init();
#if defined(__x86_64__)
    vbmi_init();
#endif
}

static void maps_ensure(void) { CHECK(pthread_once(&g_maps_once, maps_init) == 0); }

// ---- kernels ----
// Both paths work in blocks of 256 elements on small local arrays: the loops with table
// lookups (dequantize + moment update + rsqrt seed; quantize LUT) are plain scalar loops, the
// rest are `omp simd` loops that GCC vectorizes even at -O2 (no per-element branches, only
// selects). The kernels are compiled per ISA and called per block from one OpenMP loop; every
// clone gives the same bits (fmaf is a real fma everywhere, -ffp-contract=off adds none).
// Full 8-bit blocks take hand-written AVX2, AVX-512 or AVX-512 VBMI kernels (below) when the
// CPU's rsqrtps matches torch's, with the same operations in the same order; the AVX-512 one
// quantizes by a search of the LUT's thresholds held in registers, the VBMI one by byte-table
// lookups (measured on Zen 4 with a 1e7 step: the
// 32-bit LUT gathers of a first AVX-512 version, and gathers from L1-sized tables, cost as much
// as the scalar LUT loads; the search does not touch memory).
#if defined(__x86_64__)
#define BNB_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define BNB_CLONES
#endif
typedef struct {
    float b1, w1, b2, w2;   // f32(b1), f32(1-b1), f32(b2), f32(1-b2)
    float c2;               // 8-bit: f32(sqrt(1 - b2^t));  32-bit: f32(eps * sqrt(1 - b2^t))
    float eps;              // 8-bit: f32(eps)
    float decay;            // f32(1 - lr*wd), or 1.0f when wd == 0 (p * 1.0f == p exactly)
    float step;             // 8-bit: f32(-lr / (1 - b1^t));  32-bit: f32(-lr*sqrt(1-b2^t)/(1-b1^t))
    bool hw_seed;           // vector kernels: torch's sqrt seeded by rsqrtps (torch_sqrt_hw_matches) or the table
    bool mkl512;            // AVX-512 kernels: torch's sqrt is MKL's AVX-512 kernel (torch_sqrt16_mkl_avx512)
} StepConsts;

// Grid index for x (already multiplied by 1/absmax), as the .so computes it; NaN -> 0.
static inline uint32_t grid_index(float x) {
    x = (-1.0f > x) ? -1.0f : (x > 1.0f ? 1.0f : x);
    float f = fmaf((x + 1.0f) * 0.5f, 65535.0f, 0.5f);
    f = (f == f) ? f : 0.0f;
    return (uint32_t)(int32_t)f & 0xFFFFu;
}

// Absmax as the .so computes it: max |x| ignoring NaN, 0 when nothing is > 0. Computed on
// the bit patterns (|x| as uint32 orders like the float; NaN patterns are dropped), which
// vectorizes and does not depend on the reduction order.
static inline uint32_t abs_bits_or_zero(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0x7FFFFFFFu;
    return u > 0x7F800000u ? 0u : u;
}

static inline float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void quantize_block(const float* restrict x, uint8_t* restrict out, const uint8_t* restrict lut,
                                  float absmax, size_t len) {
    if (absmax == 0.0f) {
        memset(out, 0, len);
        return;
    }
    const float inv = 1.0f / absmax;
    uint32_t idx[BNB_BLOCK];  // (len)
#pragma omp simd
    for (size_t i = 0; i < len; i++) idx[i] = grid_index(x[i] * inv);
    for (size_t i = 0; i < len; i++) out[i] = lut[idx[i]];
}

// One block (len <= 256) of the 8-bit step: dequantize, update m and v, update p, requantize.
BNB_CLONES
static void bnb8_block(float* restrict p, const float* restrict g, uint8_t* restrict c1,
                       uint8_t* restrict c2, float* restrict absmax1, float* restrict absmax2,
                       size_t len, const StepConsts* sc) {
    float m[BNB_BLOCK], v[BNB_BLOCK];  // (len) dequantized, then the new states
    float root[BNB_BLOCK];             // (len) torch.sqrt(v)
    uint32_t seed[BNB_BLOCK];          // (len) scratch of torch_sqrtf_n
    const StepConsts s = *sc;
    const float a1 = *absmax1, a2 = *absmax2;
    for (size_t i = 0; i < len; i++) {
        const float gi = g[i];
        m[i] = fmaf(gi, s.w1, (g_code1[c1[i]] * a1) * s.b1);
        v[i] = fmaf(s.w2 * gi, gi, (g_code2[c2[i]] * a2) * s.b2);
    }
    torch_sqrtf_n(v, root, seed, len);
    uint32_t am1 = 0, am2 = 0;
#pragma omp simd reduction(max : am1, am2)
    for (size_t i = 0; i < len; i++) {
        const float denom = root[i] / s.c2 + s.eps;
        p[i] = p[i] * s.decay + (s.step * m[i]) / denom;
        const uint32_t u1 = abs_bits_or_zero(m[i]), u2 = abs_bits_or_zero(v[i]);
        am1 = u1 > am1 ? u1 : am1;
        am2 = u2 > am2 ? u2 : am2;
    }
    *absmax1 = bits_to_float(am1);
    *absmax2 = bits_to_float(am2);
    quantize_block(m, c1, g_lut1, *absmax1, len);
    quantize_block(v, c2, g_lut2, *absmax2, len);
}

#if defined(__x86_64__)
#include <immintrin.h>
#define BNB_AVX2 __attribute__((target("avx2,fma")))

// quantize_block, 8 lanes: grid_index's clamp (NaN passes), fused (x+1)*0.5 -> 65535 and
// truncation, NaN -> 0; then the LUT by scalar loads (measured faster than 32-bit gathers from
// the byte table on Zen 4: 28.5 vs 32.6 ms per 1e7-element step, one thread; and not slower than
// L1-sized threshold tables, whose extra arithmetic costs what the LUT's L2 hits cost: README,
// "Optimizer steps at 1e7 parameters"). len % 8 == 0.
BNB_AVX2 static void quantize_block_avx2(const float* x, uint8_t* out, const uint8_t* lut, float absmax, size_t len) {
    if (absmax == 0.0f) {
        memset(out, 0, len);
        return;
    }
    const __m256 inv = _mm256_set1_ps(1.0f / absmax), one = _mm256_set1_ps(1.0f), m1 = _mm256_set1_ps(-1.0f);
    const __m256 half = _mm256_set1_ps(0.5f), top = _mm256_set1_ps(65535.0f);
    uint32_t idxs[BNB_BLOCK];
    for (size_t i = 0; i < len; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
        v = _mm256_blendv_ps(v, m1, _mm256_cmp_ps(m1, v, _CMP_GT_OQ));   // -1 > x ? -1
        v = _mm256_blendv_ps(v, one, _mm256_cmp_ps(v, one, _CMP_GT_OQ)); // x > 1 ? 1
        __m256 f = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_add_ps(v, one), half), top, half);
        f = _mm256_and_ps(f, _mm256_cmp_ps(f, f, _CMP_ORD_Q));  // NaN -> 0
        __m256i idx = _mm256_and_si256(_mm256_cvttps_epi32(f), _mm256_set1_epi32(0xFFFF));
        _mm256_storeu_si256((__m256i*)(idxs + i), idx);
    }
    for (size_t i = 0; i < len; i++) out[i] = lut[idxs[i]];
}

// bnb8_block with 8 lanes of AVX2: the code maps read by gathers and torch.sqrt by
// torch_sqrt8_avx2 (seeded by the CPU's own rsqrtps where torch_sqrt_hw_matches(), else by the
// table, gathered). Every
// arithmetic operation is the scalar block's, in its order, one rounding each, so the bits
// are the same. Full blocks only (len == 256); the ragged last block takes bnb8_block.
BNB_AVX2 static void bnb8_block_avx2(float* restrict p, const float* restrict g, uint8_t* restrict c1,
                                     uint8_t* restrict c2, float* restrict absmax1, float* restrict absmax2,
                                     const StepConsts* sc) {
    float m[BNB_BLOCK], v[BNB_BLOCK];  // the new states, quantized once their absmax is known
    const __m256 a1 = _mm256_set1_ps(*absmax1), a2 = _mm256_set1_ps(*absmax2);
    const __m256 b1 = _mm256_set1_ps(sc->b1), w1 = _mm256_set1_ps(sc->w1), b2 = _mm256_set1_ps(sc->b2);
    const __m256 w2 = _mm256_set1_ps(sc->w2), cc2 = _mm256_set1_ps(sc->c2), eps = _mm256_set1_ps(sc->eps);
    const __m256 decay = _mm256_set1_ps(sc->decay), step = _mm256_set1_ps(sc->step);
    const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    __m256i am1 = _mm256_setzero_si256(), am2 = _mm256_setzero_si256();
    for (size_t i = 0; i < BNB_BLOCK; i += 8) {
        const __m256 gi = _mm256_loadu_ps(g + i);
        const __m256i i1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(c1 + i)));
        const __m256i i2 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(c2 + i)));
        const __m256 d1 = _mm256_mul_ps(_mm256_i32gather_ps(g_code1, i1, 4), a1);  // dequantize
        const __m256 d2 = _mm256_mul_ps(_mm256_i32gather_ps(g_code2, i2, 4), a2);
        const __m256 mi = _mm256_fmadd_ps(gi, w1, _mm256_mul_ps(d1, b1));
        const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(w2, gi), gi, _mm256_mul_ps(d2, b2));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        const __m256 denom = _mm256_add_ps(_mm256_div_ps(torch_sqrt8_avx2(vi, sc->hw_seed), cc2), eps);
        const __m256 pi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), decay),
                                        _mm256_div_ps(_mm256_mul_ps(step, mi), denom));
        _mm256_storeu_ps(p + i, pi);
        // abs_bits_or_zero, max: NaN patterns (> inf) count as 0
        __m256i u1 = _mm256_and_si256(_mm256_castps_si256(mi), absmask);
        __m256i u2 = _mm256_and_si256(_mm256_castps_si256(vi), absmask);
        u1 = _mm256_andnot_si256(_mm256_cmpgt_epi32(u1, inf), u1);
        u2 = _mm256_andnot_si256(_mm256_cmpgt_epi32(u2, inf), u2);
        am1 = _mm256_max_epu32(am1, u1);
        am2 = _mm256_max_epu32(am2, u2);
    }
    uint32_t l1[8], l2[8], m1 = 0, m2 = 0;
    _mm256_storeu_si256((__m256i*)l1, am1);
    _mm256_storeu_si256((__m256i*)l2, am2);
    for (int l = 0; l < 8; l++) {
        m1 = l1[l] > m1 ? l1[l] : m1;
        m2 = l2[l] > m2 ? l2[l] : m2;
    }
    *absmax1 = bits_to_float(m1);
    *absmax2 = bits_to_float(m2);
    quantize_block_avx2(m, c1, g_lut1, *absmax1, BNB_BLOCK);
    quantize_block_avx2(v, c2, g_lut2, *absmax2, BNB_BLOCK);
}

#define BNB_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))

// torch_rsqrt8_table_avx2 over 16 lanes (one 512-bit gather)
BNB_AVX512 static inline __m512 torch_rsqrt16_table_avx512(__m512 x) {
    const __m512i b = _mm512_castps_si512(x);
    const __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(127));
    const __m512i idx = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(e, _mm512_set1_epi32(1)), 12),
                                        _mm512_and_si512(_mm512_srli_epi32(b, 11), _mm512_set1_epi32(0xFFF)));
    const __m512i tab = _mm512_and_si512(_mm512_i32gather_epi32(idx, (const void*)torch_rsqrt_tab, 2),
                                         _mm512_set1_epi32(0xFFFF));
    return _mm512_castsi512_ps(
        _mm512_sub_epi32(_mm512_or_si512(_mm512_set1_epi32(0x3F000000), _mm512_slli_epi32(tab, 11)),
                         _mm512_slli_epi32(_mm512_srai_epi32(e, 1), 23)));
}

// torch_sqrt8_avx2 over 16 lanes: the seed from the 256-bit rsqrtps on each half (hw_seed;
// AVX-512's vrsqrt14ps has 14 bits, not the 12-bit values torch's MKL kernel saw) or from the
// table, then the same fp32 steps, each one rounding, no FMA.
BNB_AVX512 static inline __m512 torch_sqrt16_avx512(__m512 x, bool hw_seed) {
    const __m512 half = _mm512_set1_ps(0.5f);
    __m512 y;
    if (hw_seed) {
        const __m256 ylo = _mm256_rsqrt_ps(_mm512_castps512_ps256(x));
        const __m256 yhi = _mm256_rsqrt_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
        y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(ylo)),
                                                _mm256_castps_pd(yhi), 1));
    } else {
        y = torch_rsqrt16_table_avx512(x);
    }
    const __m512 s = _mm512_mul_ps(x, y), h = _mm512_mul_ps(y, half);
    const __m512 c = _mm512_sub_ps(half, _mm512_mul_ps(s, h));
    const __m512 s1 = _mm512_add_ps(s, _mm512_mul_ps(s, c)), h1 = _mm512_add_ps(h, _mm512_mul_ps(h, c));
    const __m512 r = _mm512_add_ps(s1, _mm512_mul_ps(_mm512_sub_ps(x, _mm512_mul_ps(s1, s1)), h1));
    // rare lanes (not a positive normal <= 0x7F7FF000): the correctly rounded sqrt
    const __m512i d = _mm512_sub_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(0x00800000));
    const __mmask16 rare = _mm512_cmpgt_epu32_mask(d, _mm512_set1_epi32(0x7F7FF000 - 0x00800000));
    return rare ? _mm512_mask_sqrt_ps(r, rare, x) : r;
}

// The step's constants in registers, for both AVX-512 kernels
typedef struct {
    __m512 b1, w1, b2, w2, c2, eps, decay, step;
    bool hw_seed, mkl512;
} StepRegs;

BNB_AVX512 static inline StepRegs step_regs(const StepConsts* sc) {
    return (StepRegs){_mm512_set1_ps(sc->b1),  _mm512_set1_ps(sc->w1),    _mm512_set1_ps(sc->b2),
                      _mm512_set1_ps(sc->w2),  _mm512_set1_ps(sc->c2),    _mm512_set1_ps(sc->eps),
                      _mm512_set1_ps(sc->decay), _mm512_set1_ps(sc->step), sc->hw_seed, sc->mkl512};
}

// torch.sqrt of 16 lanes under either MKL kernel torch_sqrtf models
BNB_AVX512 static inline __m512 bnb_sqrt16(__m512 x, const StepRegs* k) {
    return k->mkl512 ? torch_sqrt16_mkl_avx512(x) : torch_sqrt16_avx512(x, k->hw_seed);
}

// 16 lanes of bnb8_block_avx2's arithmetic, shared by both AVX-512 kernels: the old moments
// dequantized (code values code1, code2 times the block's absmax a1, a2), the new ones into
// *mi, *vi and stored at mo, vo, and p updated in place from g.
BNB_AVX512 static inline __attribute__((always_inline)) void adam16_avx512(float* p, const float* g, float* mo,
                                                                          float* vo, __m512 code1, __m512 code2,
                                                                          __m512 a1, __m512 a2, const StepRegs* k,
                                                                          __m512* mi, __m512* vi) {
    const __m512 gi = _mm512_loadu_ps(g);
    const __m512 d1 = _mm512_mul_ps(code1, a1);  // dequantize
    const __m512 d2 = _mm512_mul_ps(code2, a2);
    *mi = _mm512_fmadd_ps(gi, k->w1, _mm512_mul_ps(d1, k->b1));
    *vi = _mm512_fmadd_ps(_mm512_mul_ps(k->w2, gi), gi, _mm512_mul_ps(d2, k->b2));
    _mm512_storeu_ps(mo, *mi);
    _mm512_storeu_ps(vo, *vi);
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(bnb_sqrt16(*vi, k), k->c2), k->eps);
    _mm512_storeu_ps(p, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(p), k->decay),
                                      _mm512_div_ps(_mm512_mul_ps(k->step, *mi), denom)));
}

// The grid index of 16 lanes (grid_index) as 32-bit integers, 0..65535 or (NaN) 0x80000000: the clamp
// is max(-1, x) then min(1, x), and vmaxps/vminps return their second operand when either is
// NaN, so NaN passes as in grid_index. fma((x+1)*0.5, 65535, 0.5) is computed as
// fma(x+1, 32767.5, 0.5): (x+1)*0.5 is exact (x+1 is 0 or >= 2^-24) and so is the product
// either way, leaving the same single rounding. No NaN mask: vcvttps2dq turns NaN into
// 0x80000000, which the caller's unsigned saturating pack to 16 bits makes index 0, grid_index's
// answer (every other lane is in [0, 65535] and packs unchanged).
BNB_AVX512 static inline __m512i grid_index16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    x = _mm512_min_ps(one, _mm512_max_ps(_mm512_set1_ps(-1.0f), x));
    return _mm512_cvttps_epi32(_mm512_fmadd_ps(_mm512_add_ps(x, one), _mm512_set1_ps(32767.5f), _mm512_set1_ps(0.5f)));
}

// The search tree of build_tree in registers: nodes 1..31, 32..63, 64..127, 128..255.
typedef struct {
    __m512i root, d0to4, d5, d6a, d6b, d7a, d7b, d7c, d7d;
} TreeRegs;

BNB_AVX512 static inline TreeRegs tree_load(const uint16_t* tree) {
    return (TreeRegs){
        _mm512_set1_epi16((short)tree[1]), _mm512_loadu_si512(tree), _mm512_loadu_si512(tree + 32),
        _mm512_loadu_si512(tree + 64), _mm512_loadu_si512(tree + 96), _mm512_loadu_si512(tree + 128),
        _mm512_loadu_si512(tree + 160), _mm512_loadu_si512(tree + 192), _mm512_loadu_si512(tree + 224),
    };
}

// The codes of 32 values already multiplied by 1/absmax: their grid indices g (16-bit lanes,
// by vpackusdw, which interleaves groups of 4 of x0 and x1 per 128-bit lane), then the
// branch-free tree search, from k = 1 eight times k = 2k + (node k <= g), by word permutes
// (vpermw/vpermi2w use only the low 5/6 bits of an index, so node k indexes its depth's
// register(s) as it is). Returns k - 256 (the low byte of k) as 32 bytes in element order.
BNB_AVX512 static inline __m256i tree_codes32(__m512 x0, __m512 x1, const TreeRegs* t) {
    const __m512i g = _mm512_packus_epi32(grid_index16(x0), grid_index16(x1));
    const __m512i minus1 = _mm512_set1_epi16(-1);
    __m512i k = _mm512_mask_blend_epi16(_mm512_cmple_epu16_mask(t->root, g), _mm512_set1_epi16(2),
                                        _mm512_set1_epi16(3));
    // k = 2k + (node <= g): the add, then -(-1) in the lanes where the node is <= g
#define BNB_DESCEND(node) k = _mm512_mask_sub_epi16(_mm512_add_epi16(k, k), _mm512_cmple_epu16_mask((node), g), \
                                                    _mm512_add_epi16(k, k), minus1)
    BNB_DESCEND(_mm512_permutexvar_epi16(k, t->d0to4));  // depth 1
    BNB_DESCEND(_mm512_permutexvar_epi16(k, t->d0to4));
    BNB_DESCEND(_mm512_permutexvar_epi16(k, t->d0to4));
    BNB_DESCEND(_mm512_permutexvar_epi16(k, t->d0to4));  // depth 4
    BNB_DESCEND(_mm512_permutexvar_epi16(k, t->d5));
    BNB_DESCEND(_mm512_permutex2var_epi16(t->d6a, k, t->d6b));
    BNB_DESCEND(_mm512_mask_blend_epi16(_mm512_test_epi16_mask(k, _mm512_set1_epi16(64)),
                                        _mm512_permutex2var_epi16(t->d7a, k, t->d7b),
                                        _mm512_permutex2var_epi16(t->d7c, k, t->d7d)));
#undef BNB_DESCEND
    // 32-bit group 2L of the bytes holds elements 4L..4L+3 of x0, group 2L+1 those of x1
    return _mm256_permutevar8x32_epi32(_mm512_cvtepi16_epi8(k), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

// The quantizer's per-block constants: 1/absmax for each state, and a byte mask that zeroes
// the codes of a state whose absmax is 0 (quantize_block's memset).
typedef struct {
    __m512 inv1, inv2;
    __m256i keep1, keep2;
} QuantConsts;

BNB_AVX512 static inline QuantConsts quant_consts(float absmax1, float absmax2) {
    return (QuantConsts){
        _mm512_set1_ps(1.0f / absmax1), _mm512_set1_ps(1.0f / absmax2),
        _mm256_set1_epi8(absmax1 == 0.0f ? 0 : -1), _mm256_set1_epi8(absmax2 == 0.0f ? 0 : -1),
    };
}

// quantize_block for 32 elements of both states (two independent search chains).
BNB_AVX512 static inline void quantize_pair32(const float* m, const float* v, uint8_t* c1, uint8_t* c2,
                                              const QuantConsts* q, const TreeRegs* t1, const TreeRegs* t2) {
    const __m256i q1 = tree_codes32(_mm512_mul_ps(_mm512_loadu_ps(m), q->inv1),
                                    _mm512_mul_ps(_mm512_loadu_ps(m + 16), q->inv1), t1);
    const __m256i q2 = tree_codes32(_mm512_mul_ps(_mm512_loadu_ps(v), q->inv2),
                                    _mm512_mul_ps(_mm512_loadu_ps(v + 16), q->inv2), t2);
    _mm256_storeu_si256((__m256i*)c1, _mm256_and_si256(q1, q->keep1));
    _mm256_storeu_si256((__m256i*)c2, _mm256_and_si256(q2, q->keep2));
}

// One plane (256 words in 8 registers' worth of memory) at 32 indices k: vpermi2w covers 64
// entries with the low 6 bits; bits 6 and 7 (masks b6, b7) pick among the four.
BNB_AVX512 static inline __m512i plane_lookup32(const uint16_t* t, __m512i k, __mmask32 b6, __mmask32 b7) {
    const __m512i a = _mm512_permutex2var_epi16(_mm512_loadu_si512(t), k, _mm512_loadu_si512(t + 32));
    const __m512i b = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 64), k, _mm512_loadu_si512(t + 96));
    const __m512i c = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 128), k, _mm512_loadu_si512(t + 160));
    const __m512i d = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 192), k, _mm512_loadu_si512(t + 224));
    return _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, a, b), _mm512_mask_blend_epi16(b6, c, d));
}

// code[c[0..31]] as two vectors of 16 floats (elements 0..15, 16..31), without gathers: the two
// 16-bit planes looked up for 32 lanes, then interleaved. vpunpck*wd interleaves within 128-bit
// lanes (words 8L..8L+3 with their partners go to lane L of the low result, 8L+4..8L+7 to the
// high one), so the indices are first put in the order that makes the results come out in
// element order: word 8L+j holds element 4L+j and word 8L+4+j element 16+4L+j (j < 4).
BNB_AVX512 static inline void dequant_codes32(const uint8_t* c, const uint16_t* lo, const uint16_t* hi,
                                              __m512* first, __m512* second) {
    const __m512i order = _mm512_set_epi16(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8,
                                           23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i k = _mm512_permutexvar_epi16(order, _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)c)));
    const __mmask32 b6 = _mm512_test_epi16_mask(k, _mm512_set1_epi16(64));
    const __mmask32 b7 = _mm512_test_epi16_mask(k, _mm512_set1_epi16(128));
    const __m512i l = plane_lookup32(lo, k, b6, b7), h = plane_lookup32(hi, k, b6, b7);
    *first = _mm512_castsi512_ps(_mm512_unpacklo_epi16(l, h));
    *second = _mm512_castsi512_ps(_mm512_unpackhi_epi16(l, h));
}

// bnb8_block_avx2 with 16 lanes over n_blocks full blocks: the same operations in the same
// order (so the same bits). Software-pipelined: a block's codes can only be computed once its
// absmax is known, i.e. after its last element, so the 32-element steps of block b's arithmetic
// (floating-point multiplies, divisions) each also quantize 32 elements of block b-1 (word
// permutes and compares), which keeps both kinds of execution unit busy; the last block is
// quantized after the loop. Block b reads its old codes and absmax before they are replaced:
// the codes written during block b are block b-1's.
BNB_AVX512 static void bnb8_blocks_avx512(float* restrict p, const float* restrict g, uint8_t* restrict c1,
                                          uint8_t* restrict c2, float* restrict absmax1, float* restrict absmax2,
                                          size_t n_blocks, const StepConsts* sc) {
    float m[2][BNB_BLOCK], v[2][BNB_BLOCK];  // the new states of block b (b & 1) and block b-1
    const TreeRegs t1 = tree_load(g_tree1), t2 = tree_load(g_tree2);
    const StepRegs k = step_regs(sc);
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    for (size_t b = 0; b < n_blocks; b++) {
        const size_t off = b * BNB_BLOCK, cur = b & 1, prev = cur ^ 1;
        const __m512 a1 = _mm512_set1_ps(absmax1[b]), a2 = _mm512_set1_ps(absmax2[b]);
        const QuantConsts qp = b > 0 ? quant_consts(absmax1[b - 1], absmax2[b - 1]) : quant_consts(1.0f, 1.0f);
        __m512i am1 = _mm512_setzero_si512(), am2 = _mm512_setzero_si512();
        for (size_t i = 0; i < BNB_BLOCK; i += 32) {
            __m512 code1[2], code2[2];
            dequant_codes32(c1 + off + i, g_code1_lo, g_code1_hi, &code1[0], &code1[1]);
            dequant_codes32(c2 + off + i, g_code2_lo, g_code2_hi, &code2[0], &code2[1]);
            for (size_t h = 0; h < 2; h++) {
                const size_t e = off + i + 16 * h;
                __m512 mi, vi;
                adam16_avx512(p + e, g + e, m[cur] + i + 16 * h, v[cur] + i + 16 * h, code1[h], code2[h], a1, a2,
                              &k, &mi, &vi);
                // abs_bits_or_zero, max: NaN patterns (> inf) count as 0
                const __m512i u1 = _mm512_and_si512(_mm512_castps_si512(mi), absmask);
                const __m512i u2 = _mm512_and_si512(_mm512_castps_si512(vi), absmask);
                am1 = _mm512_mask_max_epu32(am1, _mm512_cmple_epu32_mask(u1, inf), am1, u1);
                am2 = _mm512_mask_max_epu32(am2, _mm512_cmple_epu32_mask(u2, inf), am2, u2);
            }
            if (b > 0)
                quantize_pair32(m[prev] + i, v[prev] + i, c1 + off - BNB_BLOCK + i, c2 + off - BNB_BLOCK + i, &qp,
                                &t1, &t2);
        }
        absmax1[b] = bits_to_float(_mm512_reduce_max_epu32(am1));
        absmax2[b] = bits_to_float(_mm512_reduce_max_epu32(am2));
    }
    if (n_blocks > 0) {
        const size_t last = n_blocks - 1, off = last * BNB_BLOCK;
        const QuantConsts q = quant_consts(absmax1[last], absmax2[last]);
        for (size_t i = 0; i < BNB_BLOCK; i += 32)
            quantize_pair32(m[last & 1] + i, v[last & 1] + i, c1 + off + i, c2 + off + i, &q, &t1, &t2);
    }
}

// ---- the AVX-512 VBMI kernel: the quantizer by byte-table lookups instead of a tree search ----
// lut[i] = #{j : T[j] <= i} (build_tree's thresholds) is computed as a sum over four groups of
// the thresholds, each group counted by table lookups on 64 byte lanes at once (vpermi2b, which
// indexes 128 bytes, two registers). A group is paged: page P covers the grid indices
// start + P 2^s .. start + (P+1) 2^s - 1 and holds at most one of the group's thresholds past
// its first index, so the group's count at i is cum[P] (its thresholds <= the page's first
// index) + (i's offset in the page >= that threshold's offset), one byte compare. Kinds:
// - H (start 0, s = 8, 256 pages): the page is i's high byte, the offset its low byte; cum and
//   thr are 256-byte tables (two vpermi2b and a blend on the page's bit 7 each).
// - W (s = 1..8, 128 pages): page min((i -sat start) >> s, 127) (the clamp by vpacksswb's
//   signed saturation of the words to bytes); the offset is compared as the low byte of
//   i - start (the page's own bits in it are added to its threshold byte, 255 = none). Every
//   threshold lies in pages 1..126 or at the start of page 127, so a lane below the group
//   (page 0) or above it (page 127) never compares true and gets cum 0 or the group's size.
// - D (direct, s = 0): cum[min(i -sat start, 127)], no compare.
// The signed map (state1) takes H, W s=6, W s=4, D; the unsigned map W s=8, W s=5, W s=2, D
// (its top-decade thresholds, spaced 230-231 grid points, all fit pages of 256 but the last,
// which holds two; a W start moves the page boundaries). Each W group's start is chosen among
// the 2^s starts that just cover the thresholds still unassigned, as the one leaving the
// narrowest span of thresholds to the finer groups; D must then cover the rest within 127.
// vbmi_check runs the vector code itself on all 65,536 grid indices against the LUT; the kernel
// is used only if that, and the planning, succeed (else the AVX-512 kernel's tree search).
#define BNB_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi,avx2,fma")))
#define BNB_NGROUP 4
typedef struct {
    _Alignas(64) uint8_t cum[BNB_NGROUP][256];  // by page (W, D: the first 128)
    _Alignas(64) uint8_t thr[BNB_NGROUP][256];  // by page: threshold byte, 255 = none (D: unused)
    uint16_t start[BNB_NGROUP];                 // W, D (H: 0)
} VbmiQuant;
static const int BNB_VBMI_SHIFT[2][BNB_NGROUP] = {{8, 6, 4, 0}, {8, 5, 2, 0}};
static const bool BNB_VBMI_FIRST_H[2] = {true, false};
static VbmiQuant g_vq[2];                      // signed map, unsigned map
static _Alignas(64) uint8_t g_plane[2][4][256];  // the code maps' floats as byte planes (0 = low byte)
static bool g_vbmi_ok;                         // planned and checked (maps_init)

// Threshold T of a group of kind W with this start and shift: its page and offset (page 0 or
// past page 127's start: not placeable, returns false).
static bool w_place(uint32_t T, int start, int s, uint32_t* page, uint32_t* off) {
    const int t = (int)T - start;
    if (t <= 0 || t > (127 << s)) return false;
    *page = (uint32_t)t >> s, *off = (uint32_t)t & ((1u << s) - 1);
    return *off == 0 || *page > 0;
}

// Assigns to a group the thresholds (of rem[0..n), sorted) that fit it, in order: one per page
// past the page's first index, any number at it. taken[i] set for those. Returns the count.
static int group_assign(const uint32_t* rem, int n, bool h, int start, int s, bool* taken) {
    bool used[256] = {false};
    int cnt = 0;
    for (int i = 0; i < n; i++) {
        uint32_t page, off;
        taken[i] = false;
        if (h) page = rem[i] >> 8, off = rem[i] & 255;
        else if (!w_place(rem[i], start, s, &page, &off)) continue;
        if (off != 0) {
            if (used[page]) continue;
            used[page] = true;
        }
        taken[i] = true;
        cnt++;
    }
    return cnt;
}

static bool vbmi_plan(const uint8_t* lut, bool first_h, const int* shift, VbmiQuant* q) {
    uint32_t rem[255];
    int n = 0;
    for (int j = 0, i = 0; j < 255; j++) {
        while (i < BNB_LUT_SIZE && lut[i] <= j) i++;
        rem[n++] = (uint32_t)i;
    }
    memset(q, 0, sizeof *q);
    for (int k = 0; k < BNB_NGROUP - 1; k++) {
        const bool h = k == 0 && first_h;
        const int s = shift[k];
        bool taken[255];
        int start = 0;
        if (!h) {  // the 2^s starts whose 127 pages just reach the highest threshold left
            int best_span = 1 << 30, best_cnt = -1;
            const int base = (int)rem[n - 1] - (127 << s) > 0 ? (int)rem[n - 1] - (127 << s) : 0;
            for (int r = 0; r < (1 << s); r++) {
                const int cnt = group_assign(rem, n, false, base + r, s, taken);
                uint32_t lo = UINT32_MAX, hi = 0;
                for (int i = 0; i < n; i++)
                    if (!taken[i]) lo = rem[i] < lo ? rem[i] : lo, hi = rem[i] > hi ? rem[i] : hi;
                const int span = cnt == n ? -1 : (int)(hi - lo);
                if (span < best_span || (span == best_span && cnt > best_cnt)) best_span = span, best_cnt = cnt, start = base + r;
            }
        }
        group_assign(rem, n, h, start, s, taken);
        q->start[k] = (uint16_t)start;
        const int pages = h ? 256 : 128;
        for (int pg = 0; pg < 256; pg++) q->thr[k][pg] = 255;
        for (int pg = 0; pg < pages; pg++) {
            const uint32_t first = h ? (uint32_t)pg << 8 : (uint32_t)start + ((uint32_t)pg << s);
            int c = 0;
            for (int i = 0; i < n; i++)
                if (taken[i] && rem[i] <= first) c++;
            q->cum[k][pg] = (uint8_t)c;
        }
        int left = 0;
        for (int i = 0; i < n; i++) {
            if (!taken[i]) {
                rem[left++] = rem[i];
                continue;
            }
            uint32_t page = 0, off = 0;
            if (h) page = rem[i] >> 8, off = rem[i] & 255;
            else w_place(rem[i], start, s, &page, &off);
            if (off != 0) q->thr[k][page] = (uint8_t)((((page << s) & 255) + off - 1));
        }
        n = left;
    }
    if (n == 0) return false;  // D would be empty: not expected for these maps
    const int start = (int)rem[0] - 1;
    if (start < 0 || (int)rem[n - 1] - start > 127) return false;
    q->start[BNB_NGROUP - 1] = (uint16_t)start;
    for (int pg = 0; pg < 128; pg++) {
        int c = 0;
        for (int i = 0; i < n; i++) c += (int)rem[i] <= start + pg;
        q->cum[BNB_NGROUP - 1][pg] = (uint8_t)c;
    }
    return true;
}

// Byte position 16l + 4h + j (l, h < 4, j < 4) of the quantizer's byte vectors is element
// 16h + 4l + j of the 64 (the order vpackusdw then vpacksswb leave them in); the same permutation
// (its own inverse) puts codes in the order that byte-plane unpacking needs, and back.
static const uint8_t BNB_TRANSPOSE[64] = {
    0, 1, 2, 3, 16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51, 4, 5, 6, 7, 20, 21, 22, 23,
    36, 37, 38, 39, 52, 53, 54, 55, 8, 9, 10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,
    12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63,
};
// The low bytes of the two word vectors w0, w1 (vpermt2b indices) in that byte order: position
// 16l + 4h + j is word 8l + 4(h & 1) + j of w(h >> 1). BNB_HIGH_BYTES = these + 1.
static const uint8_t BNB_LOW_BYTES[64] = {
    0, 2, 4, 6, 8, 10, 12, 14, 64, 66, 68, 70, 72, 74, 76, 78,
    16, 18, 20, 22, 24, 26, 28, 30, 80, 82, 84, 86, 88, 90, 92, 94,
    32, 34, 36, 38, 40, 42, 44, 46, 96, 98, 100, 102, 104, 106, 108, 110,
    48, 50, 52, 54, 56, 58, 60, 62, 112, 114, 116, 118, 120, 122, 124, 126,
};

// A 256-byte table at 64 byte indices: two vpermi2b and a blend on bit 7 (b7).
BNB_VBMI static inline __m512i table256(const uint8_t* t, __m512i k, __mmask64 b7) {
    return _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(_mm512_load_si512(t), k, _mm512_load_si512(t + 64)),
                                  _mm512_permutex2var_epi8(_mm512_load_si512(t + 128), k, _mm512_load_si512(t + 192)));
}

BNB_VBMI static inline __m512i table128(const uint8_t* t, __m512i k) {
    return _mm512_permutex2var_epi8(_mm512_load_si512(t), k, _mm512_load_si512(t + 64));
}

// W group k: count += cum[page]; returns the mask of lanes whose offset reaches the page's
// threshold.
BNB_VBMI static inline __mmask64 w_group(const VbmiQuant* q, int k, int s, __m512i w0, __m512i w1, __m512i lo,
                                         __m512i* count) {
    const __m512i st = _mm512_set1_epi16((short)q->start[k]);
    const __m512i page = _mm512_packs_epi16(_mm512_srli_epi16(_mm512_subs_epu16(w0, st), s),
                                            _mm512_srli_epi16(_mm512_subs_epu16(w1, st), s));
    *count = _mm512_add_epi8(*count, table128(q->cum[k], page));
    const __m512i off = _mm512_sub_epi8(lo, _mm512_set1_epi8((char)(q->start[k] & 255)));
    return _mm512_cmpgt_epu8_mask(off, table128(q->thr[k], page));
}

// The codes of 64 grid indices, given as words w0 = vpackusdw(e0..15, e16..31),
// w1 = vpackusdw(e32..47, e48..63); returned in element order.
BNB_VBMI static inline __attribute__((always_inline)) __m512i vbmi_codes64(__m512i w0, __m512i w1,
                                                                          const VbmiQuant* q, const int* shift,
                                                                          bool first_h) {
    const __m512i lidx = _mm512_loadu_si512(BNB_LOW_BYTES);
    const __m512i lo = _mm512_permutex2var_epi8(w0, lidx, w1);
    __m512i count = _mm512_setzero_si512();
    __mmask64 m0;
    if (first_h) {
        const __m512i hi = _mm512_permutex2var_epi8(w0, _mm512_add_epi8(lidx, _mm512_set1_epi8(1)), w1);
        const __mmask64 b7 = _mm512_movepi8_mask(hi);
        count = table256(q->cum[0], hi, b7);
        m0 = _mm512_cmpgt_epu8_mask(lo, table256(q->thr[0], hi, b7));
    } else {
        m0 = w_group(q, 0, shift[0], w0, w1, lo, &count);
    }
    const __mmask64 m1 = w_group(q, 1, shift[1], w0, w1, lo, &count);
    const __mmask64 m2 = w_group(q, 2, shift[2], w0, w1, lo, &count);
    const __m512i st = _mm512_set1_epi16((short)q->start[3]), top = _mm512_set1_epi16(127);
    const __m512i d = _mm512_packs_epi16(_mm512_min_epu16(_mm512_subs_epu16(w0, st), top),
                                         _mm512_min_epu16(_mm512_subs_epu16(w1, st), top));
    count = _mm512_add_epi8(count, table128(q->cum[3], d));
    const __m512i minus1 = _mm512_set1_epi8(-1);
    count = _mm512_mask_sub_epi8(count, m0, count, minus1);
    count = _mm512_mask_sub_epi8(count, m1, count, minus1);
    count = _mm512_mask_sub_epi8(count, m2, count, minus1);
    return _mm512_permutexvar_epi8(_mm512_loadu_si512(BNB_TRANSPOSE), count);
}

// The vector quantizer against the LUT at every grid index (the words built as the kernel
// builds them from 32-bit indices).
BNB_VBMI static bool vbmi_check(int map, const uint8_t* lut) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int base = 0; base < BNB_LUT_SIZE; base += 64) {
        __m512i gi[4];
        for (int k = 0; k < 4; k++) gi[k] = _mm512_add_epi32(iota, _mm512_set1_epi32(base + 16 * k));
        const __m512i w0 = _mm512_packus_epi32(gi[0], gi[1]), w1 = _mm512_packus_epi32(gi[2], gi[3]);
        const __m512i c = map == 0 ? vbmi_codes64(w0, w1, &g_vq[0], BNB_VBMI_SHIFT[0], BNB_VBMI_FIRST_H[0])
                                   : vbmi_codes64(w0, w1, &g_vq[1], BNB_VBMI_SHIFT[1], BNB_VBMI_FIRST_H[1]);
        uint8_t out[64];
        _mm512_storeu_si512(out, c);
        if (memcmp(out, lut + base, 64) != 0) return false;
    }
    return true;
}

// code[c[0..63]] as four vectors of 16 floats (elements 0-15, ..., 48-63): the four byte planes
// looked up for 64 lanes, then interleaved (the codes first put in BNB_TRANSPOSE's order, which
// vpunpck*bw/wd's in-lane interleaving turns back into element order).
BNB_VBMI static inline void vbmi_dequant64(const uint8_t* c, const uint8_t (*plane)[256], __m512 out[4]) {
    const __m512i k = _mm512_permutexvar_epi8(_mm512_loadu_si512(BNB_TRANSPOSE), _mm512_loadu_si512(c));
    const __mmask64 b7 = _mm512_movepi8_mask(k);
    const __m512i b0 = table256(plane[0], k, b7), b1 = table256(plane[1], k, b7);
    const __m512i b2 = table256(plane[2], k, b7), b3 = table256(plane[3], k, b7);
    const __m512i lo01 = _mm512_unpacklo_epi8(b0, b1), hi01 = _mm512_unpackhi_epi8(b0, b1);
    const __m512i lo23 = _mm512_unpacklo_epi8(b2, b3), hi23 = _mm512_unpackhi_epi8(b2, b3);
    out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(lo01, lo23));
    out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(lo01, lo23));
    out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(hi01, hi23));
    out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(hi01, hi23));
}

// The 32-bit grid indices of 16 values x * inv. The clamp to [-1, 1] is needed only when inv is
// not a normal float: for finite |m| <= absmax and inv = f32(1/absmax) normal,
// |f32(m * inv)| <= f32(absmax * inv) (rounding is monotonic) and absmax * inv = 1 + d with
// |d| <= 2^-24, which rounds to at most 1.0 (1 + 2^-24 is a tie, to even: 1.0); NaN lanes pass
// the clamp anyway, and absmax = inf makes inv = 0 (lanes +-0 or NaN). A subnormal inv (absmax
// > 2^126) has a larger relative error, and inv = inf (absmax < ~2^-128, or 0) scales to inf:
// those blocks keep the clamp.
BNB_VBMI static inline __m512i vbmi_grid16(__m512 x, __m512 inv, bool clamp) {
    x = _mm512_mul_ps(x, inv);
    if (clamp) return grid_index16(x);
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_cvttps_epi32(_mm512_fmadd_ps(_mm512_add_ps(x, one), _mm512_set1_ps(32767.5f), _mm512_set1_ps(0.5f)));
}

typedef struct {
    __m512 inv1, inv2;
    __m512i keep1, keep2;
    bool clamp1, clamp2;
} VbmiQuantConsts;

BNB_VBMI static inline VbmiQuantConsts vbmi_quant_consts(float absmax1, float absmax2) {
    const float inv1 = 1.0f / absmax1, inv2 = 1.0f / absmax2;
    return (VbmiQuantConsts){
        _mm512_set1_ps(inv1), _mm512_set1_ps(inv2),
        _mm512_set1_epi8(absmax1 == 0.0f ? 0 : -1), _mm512_set1_epi8(absmax2 == 0.0f ? 0 : -1),
        !isnormal(inv1), !isnormal(inv2),
    };
}

// quantize_block for 128 elements of both states (all codes computed before any is stored, so
// that the byte tables are loaded once for both 64-element halves).
BNB_VBMI static inline __attribute__((always_inline)) void vbmi_quantize128(const float* m, const float* v, uint8_t* c1,
                                                                           uint8_t* c2, const VbmiQuantConsts* q) {
    __m512i a[8], b[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        a[k] = vbmi_grid16(_mm512_loadu_ps(m + 16 * k), q->inv1, q->clamp1);
        b[k] = vbmi_grid16(_mm512_loadu_ps(v + 16 * k), q->inv2, q->clamp2);
    }
    __m512i q1[2], q2[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
        q1[h] = vbmi_codes64(_mm512_packus_epi32(a[4 * h], a[4 * h + 1]), _mm512_packus_epi32(a[4 * h + 2], a[4 * h + 3]),
                             &g_vq[0], BNB_VBMI_SHIFT[0], BNB_VBMI_FIRST_H[0]);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
        q2[h] = vbmi_codes64(_mm512_packus_epi32(b[4 * h], b[4 * h + 1]), _mm512_packus_epi32(b[4 * h + 2], b[4 * h + 3]),
                             &g_vq[1], BNB_VBMI_SHIFT[1], BNB_VBMI_FIRST_H[1]);
    for (int h = 0; h < 2; h++) {
        _mm512_storeu_si512(c1 + 64 * h, _mm512_and_si512(q1[h], q->keep1));
        _mm512_storeu_si512(c2 + 64 * h, _mm512_and_si512(q2[h], q->keep2));
    }
}

// bnb8_blocks_avx512 with the VBMI dequantizer and quantizer, 64 elements per step: the same
// arithmetic in the same order, the same pipelining (block b-1 quantized during block b).
BNB_VBMI static void bnb8_blocks_vbmi(float* restrict p, const float* restrict g, uint8_t* restrict c1,
                                      uint8_t* restrict c2, float* restrict absmax1, float* restrict absmax2,
                                      size_t n_blocks, const StepConsts* sc) {
    float m[2][BNB_BLOCK], v[2][BNB_BLOCK];  // the new states of block b (b & 1) and block b-1
    const StepRegs k = step_regs(sc);
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF);
    for (size_t b = 0; b < n_blocks; b++) {
        const size_t off = b * BNB_BLOCK, cur = b & 1, prev = cur ^ 1;
        const __m512 a1 = _mm512_set1_ps(absmax1[b]), a2 = _mm512_set1_ps(absmax2[b]);
        const VbmiQuantConsts qp = b > 0 ? vbmi_quant_consts(absmax1[b - 1], absmax2[b - 1]) : vbmi_quant_consts(1.0f, 1.0f);
        __m512 am1 = _mm512_setzero_ps(), am2 = _mm512_setzero_ps();
        for (size_t i = 0; i < BNB_BLOCK; i += 128) {
            __m512 code1[8], code2[8];
            vbmi_dequant64(c1 + off + i, g_plane[0], code1);
            vbmi_dequant64(c1 + off + i + 64, g_plane[0], code1 + 4);
            vbmi_dequant64(c2 + off + i, g_plane[1], code2);
            vbmi_dequant64(c2 + off + i + 64, g_plane[1], code2 + 4);
#pragma GCC unroll 8
            for (size_t h = 0; h < 8; h++) {
                const size_t e = off + i + 16 * h;
                __m512 mi, vi;
                adam16_avx512(p + e, g + e, m[cur] + i + 16 * h, v[cur] + i + 16 * h, code1[h], code2[h], a1, a2,
                              &k, &mi, &vi);
                // abs_bits_or_zero, max, in floats: vmaxps returns its second operand (am) when
                // either is NaN, and orders non-negative floats as their bit patterns
                am1 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(mi), absmask)), am1);
                am2 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(vi), absmask)), am2);
            }
            if (b > 0)
                vbmi_quantize128(m[prev] + i, v[prev] + i, c1 + off - BNB_BLOCK + i, c2 + off - BNB_BLOCK + i, &qp);
        }
        absmax1[b] = bits_to_float(_mm512_reduce_max_epu32(_mm512_castps_si512(am1)));
        absmax2[b] = bits_to_float(_mm512_reduce_max_epu32(_mm512_castps_si512(am2)));
    }
    if (n_blocks > 0) {
        const size_t last = n_blocks - 1, off = last * BNB_BLOCK;
        const VbmiQuantConsts q = vbmi_quant_consts(absmax1[last], absmax2[last]);
        for (size_t i = 0; i < BNB_BLOCK; i += 128)
            vbmi_quantize128(m[last & 1] + i, v[last & 1] + i, c1 + off + i, c2 + off + i, &q);
    }
}

// maps_init's part for this kernel: plan both maps' groups, split the code maps into byte
// planes, check the vector quantizer at every grid index.
static void vbmi_init(void) {
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 4; j++) {
            uint32_t u1, u2;
            memcpy(&u1, &g_code1[i], 4);
            memcpy(&u2, &g_code2[i], 4);
            g_plane[0][j][i] = (uint8_t)(u1 >> (8 * j));
            g_plane[1][j][i] = (uint8_t)(u2 >> (8 * j));
        }
    g_vbmi_ok = cpu_features()->avx512bw && __builtin_cpu_supports("avx512vbmi") &&
                vbmi_plan(g_lut1, BNB_VBMI_FIRST_H[0], BNB_VBMI_SHIFT[0], &g_vq[0]) &&
                vbmi_plan(g_lut2, BNB_VBMI_FIRST_H[1], BNB_VBMI_SHIFT[1], &g_vq[1]) && vbmi_check(0, g_lut1) &&
                vbmi_check(1, g_lut2);
}
#endif

// One block (len <= 256) of the 32-bit step.
BNB_CLONES
static void bnb32_block(float* restrict p, const float* restrict g, float* restrict m, float* restrict v,
                        size_t len, const StepConsts* sc) {
    float root[BNB_BLOCK];     // (len) torch.sqrt(v)
    uint32_t seed[BNB_BLOCK];  // (len) scratch of torch_sqrtf_n
    const StepConsts s = *sc;
#pragma omp simd
    for (size_t i = 0; i < len; i++) {
        const float gi = g[i];
        m[i] = fmaf(gi, s.w1, m[i] * s.b1);
        v[i] = fmaf(s.w2 * gi, gi, v[i] * s.b2);
    }
    torch_sqrtf_n(v, root, seed, len);
#pragma omp simd
    for (size_t i = 0; i < len; i++) {
        const float u = m[i] / (root[i] + s.c2);
        p[i] = fmaf(u, s.step, p[i] * s.decay);
    }
}

// The best kernel bnb_run may take (tests): 3 AVX-512 VBMI, 2 AVX-512, 1 AVX2 (0: as 1; the
// portable kernel is forced by torch_sqrt_force_portable). Under MKL's AVX-512 sqrt kernel the
// AVX-512 ones run with its model and 1 means portable.
static int g_bnb_max_kernel = 3;

// The kernel full 8-bit blocks take (the numbers above) under torch's sqrt kernel of this step:
// the AVX-512 ones also under MKL's AVX-512 kernel (mkl512: torch_sqrt16_mkl_avx512), the AVX2
// one only under the SSE kernel's (its 8-lane sqrt has no other model).
static int bnb_kernel(bool mkl512) {
#if defined(__x86_64__)
    const bool avx2 = torch_sqrt_vector();  // AVX2 and FMA, not forced portable
    const bool avx512 = (avx2 || mkl512) && cpu_features()->avx512bw && g_bnb_max_kernel >= 2;
    return avx512 && g_vbmi_ok && g_bnb_max_kernel >= 3 ? 3 : avx512 ? 2 : avx2 ? 1 : 0;
#else
    (void)mkl512;
    return 0;
#endif
}

int optim_adamw_bnb_8bit_force_kernel(int max_kernel) {
    maps_ensure();
    g_bnb_max_kernel = max_kernel < 0 ? 3 : max_kernel;
    return bnb_kernel(torch_sqrt_vector_mkl_avx512());
}

// p (n), g (n); 8-bit: st1/st2 (n) codes, am1/am2 (ceil(n/256)); 32-bit: st1/st2 (n) fp32.
static void bnb_run(bool is_8bit, float* p, const float* g, void* st1, void* st2, float* am1, float* am2,
                    size_t n, const StepConsts* s) {
    const size_t n_blocks = (n + BNB_BLOCK - 1) / BNB_BLOCK;
    const int kernel = is_8bit ? bnb_kernel(s->mkl512) : 0;
#if defined(__x86_64__)
    const bool avx2 = kernel == 1, vbmi = kernel == 3;
    if (kernel >= 2) {  // chunks of BNB_CHUNK full blocks, then the ragged last block if any
        const size_t n_full = n / BNB_BLOCK, n_chunks = (n_full + BNB_CHUNK - 1) / BNB_CHUNK;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
        for (size_t c = 0; c < n_chunks; c++) {
            const size_t b0 = c * BNB_CHUNK, nb = n_full - b0 < BNB_CHUNK ? n_full - b0 : BNB_CHUNK;
            const size_t off = b0 * BNB_BLOCK;
            if (vbmi)
                bnb8_blocks_vbmi(p + off, g + off, (uint8_t*)st1 + off, (uint8_t*)st2 + off, am1 + b0, am2 + b0,
                                 nb, s);
            else
                bnb8_blocks_avx512(p + off, g + off, (uint8_t*)st1 + off, (uint8_t*)st2 + off, am1 + b0,
                                   am2 + b0, nb, s);
        }
        if (n_full < n_blocks) {
            const size_t off = n_full * BNB_BLOCK;
            bnb8_block(p + off, g + off, (uint8_t*)st1 + off, (uint8_t*)st2 + off, am1 + n_full, am2 + n_full,
                       n - off, s);
        }
        return;
    }
#else
    (void)kernel;
#endif
#pragma omp parallel for schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t b = 0; b < n_blocks; b++) {
        const size_t off = b * BNB_BLOCK;
        const size_t len = n - off < BNB_BLOCK ? n - off : BNB_BLOCK;
#if defined(__x86_64__)
        if (avx2 && len == BNB_BLOCK) {
            bnb8_block_avx2(p + off, g + off, (uint8_t*)st1 + off, (uint8_t*)st2 + off, am1 + b, am2 + b, s);
            continue;
        }
#endif
        if (is_8bit)
            bnb8_block(p + off, g + off, (uint8_t*)st1 + off, (uint8_t*)st2 + off, am1 + b, am2 + b, len, s);
        else
            bnb32_block(p + off, g + off, (float*)st1 + off, (float*)st2 + off, len, s);
    }
}

// ---- the Optimizer vtable ----
static void bnb8_defaults(OptimConfig* c) {
    c->lr = 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 1e-2;
    c->block_size = BNB_BLOCK;
    c->min_8bit_size = 4096;
    c->optim_bits = 32;  // the constructor's default (AdamW8bit accepts only 32)
}

// The hyper-parameter table: bitsandbytes.optim.AdamW8bit.__init__'s keywords (0.50.2).
static const char* const BNB8_KEYWORDS[] = {
    "lr", "betas", "eps", "weight_decay", "amsgrad", "optim_bits", "args", "min_8bit_size", "is_paged", NULL,
};

// bitsandbytes optim/adamw.py AdamW8bit.__init__ and optimizer.py Optimizer2State.__init__'s
// rules, then what we do not mirror.
static Status bnb8_validate(const OptimConfig* c) {
    Status s;
    if (c->lr_none)  // Python: `0.0 <= None` raises TypeError
        return status_make(STATUS_INVALID, "lr must be a number (got null): bitsandbytes AdamW8bit has no lr=None");
    if (c->amsgrad)
        return status_make(STATUS_INVALID, "amsgrad=true: bitsandbytes refuses it: \"AdamW8bit does not support "
                           "amsgrad=True\"");
    if (c->optim_bits != 32)
        return status_make(STATUS_INVALID, "optim_bits=%d: bitsandbytes refuses it: \"AdamW8bit only supports "
                           "optim_bits=32 (default value for compatibility)\"", c->optim_bits);
    if (!status_is_ok(s = optim_adam_ranges_check(c, "bitsandbytes"))) return s;
    if (c->block_size != BNB_BLOCK)
        return status_make(STATUS_INVALID,
                           "block_size must be 256 for adamw_bnb_8bit (the only block size bitsandbytes' "
                           "CPU optimizer supports; got %d)", c->block_size);
    if (c->is_paged) return optim_not_implemented("adamw_bnb_8bit", "is_paged=true");
    if (c->args_given) return optim_not_implemented("adamw_bnb_8bit", "args (a GlobalOptimManager config object)");
    return status_ok();
}

static bool uses_8bit(size_t n, const OptimConfig* c) { return n >= c->min_8bit_size; }

static size_t bnb8_state_bytes(const TensorShape* shape, const OptimConfig* c) {
    const size_t n = shape_numel(shape);
    if (!uses_8bit(n, c)) return 8 * n;  // state1, state2 fp32
    return 2 * n + 8 * ((n + BNB_BLOCK - 1) / BNB_BLOCK);  // two uint8 codes + two fp32 absmax
}

static size_t bnb8_shared_state_bytes(const OptimConfig* c) { return 2 * 256 * sizeof(float); }

// The library's qmap1/qmap2 (one tensor each, referenced from every parameter's state).
static const StateTensor* bnb8_find_shared_state(const char* name) {
    static StateTensor qmap[2] = {
        {"qmap1", DTYPE_F32, {1, {256}}, g_code1},
        {"qmap2", DTYPE_F32, {1, {256}}, g_code2},
    };
    maps_ensure();
    for (int i = 0; i < 2; i++)
        if (!strcmp(name, qmap[i].name)) return &qmap[i];
    return NULL;
}

static OptimState* bnb8_init(const TensorShape* shape, const OptimConfig* c) {
    Bnb8State* st = (Bnb8State*)optim_state_new(&optim_adamw_bnb_8bit, sizeof(Bnb8State), shape);
    st->n = shape_numel(shape);
    st->is_8bit = uses_8bit(st->n, c);
    maps_ensure();  // code maps, LUTs and the sqrt table
    if (st->is_8bit) {
        st->n_blocks = (st->n + BNB_BLOCK - 1) / BNB_BLOCK;
        st->state1 = optim_state_add(&st->base, "state1", DTYPE_U8, *shape);
        st->state2 = optim_state_add(&st->base, "state2", DTYPE_U8, *shape);
        st->absmax1 = optim_state_add(&st->base, "absmax1", DTYPE_F32, shape_1d((int64_t)st->n_blocks));
        st->absmax2 = optim_state_add(&st->base, "absmax2", DTYPE_F32, shape_1d((int64_t)st->n_blocks));
    } else {
        st->state1 = optim_state_add(&st->base, "state1", DTYPE_F32, *shape);
        st->state2 = optim_state_add(&st->base, "state2", DTYPE_F32, *shape);
    }
    return &st->base;
}

static void bnb8_optim_step(OptimState* base, float* p, const float* g, const OptimConfig* c) {
    Bnb8State* st = (Bnb8State*)base;
    base->step++;
    const double t = (double)base->step;
    const double c1 = 1.0 - pow(c->beta1, t);         // correction1
    const double c2 = sqrt(1.0 - pow(c->beta2, t));   // correction2 (already a sqrt)
    StepConsts s = {
        .b1 = (float)c->beta1, .w1 = (float)(1.0 - c->beta1),
        .b2 = (float)c->beta2, .w2 = (float)(1.0 - c->beta2),
        .decay = c->weight_decay > 0.0 ? (float)(1.0 - c->lr * c->weight_decay) : 1.0f,
        .hw_seed = torch_sqrt_hw_matches(),
        .mkl512 = torch_sqrt_vector_mkl_avx512(),
    };
    if (st->is_8bit) {
        s.c2 = (float)c2;
        s.eps = (float)c->eps;
        s.step = (float)(-c->lr / c1);
    } else {
        s.c2 = (float)(c->eps * c2);
        s.step = (float)(-c->lr * c2 / c1);
    }
    bnb_run(st->is_8bit, p, g, st->state1, st->state2, st->absmax1, st->absmax2, st->n, &s);
}

const Optimizer optim_adamw_bnb_8bit = {
    .name = "adamw_bnb_8bit",
    .reference = "bitsandbytes.optim.AdamW8bit 0.50 on CPU (backends/cpu/ops.py + csrc/cpu_ops.cpp LUT quantizer)",
    .defaults = bnb8_defaults,
    .validate = bnb8_validate,
    .state_bytes = bnb8_state_bytes,
    .shared_state_bytes = bnb8_shared_state_bytes,
    .keywords = BNB8_KEYWORDS,
    .find_shared_state = bnb8_find_shared_state,
    .init = bnb8_init,
    .step = bnb8_optim_step,
    .free = optim_state_free_tensors,
};

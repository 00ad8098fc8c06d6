// test_torch_sqrt.c — torch_sqrtf (our model of torch's CPU float sqrt) against its
// definition, and the hardware rsqrtps vector path against torch_sqrtf bit for bit.
// Expected facts: within 1 ulp of the correctly rounded sqrtf everywhere; equal to sqrtf on
// the "rare" inputs (0, subnormals, top of range, inf, NaN). The bit-exact match with torch
// itself is established by the adamw_torch / adamw_bnb_8bit goldens (tests/test_optim.c).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "validate/compare.h"
#include "optim/torch_sqrt.h"
#include "sanitizer_pass.h"

static float f_of(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }

static void test_within_one_ulp_of_sqrtf(void** s) {
    (void)s;
    torch_sqrt_init();
    size_t differ = 0, n = 0;
    uint32_t worst = 0;
    for (uint32_t b = 0x3F800000u; b < 0x40800000u; b++, n++) {  // all of [1, 4)
        float x = f_of(b), a = torch_sqrtf(x), r = sqrtf(x);
        uint32_t d = ulp_distance_f32(a, r);
        if (d) differ++;
        if (d > worst) worst = d;
    }
    printf("torch_sqrtf vs sqrtf on all %zu floats in [1,4): %zu differ (%.1f%%), max %u ulp\n", n, differ,
           100.0 * (double)differ / (double)n, worst);
    assert_true(worst <= 1);
    // rare inputs take the correctly rounded path
    const uint32_t rare[] = {0, 1, 0x007FFFFF, 0x7F7FF001, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x80000000, 0xBF800000};
    for (size_t i = 0; i < sizeof rare / sizeof rare[0]; i++) {
        float x = f_of(rare[i]), a = torch_sqrtf(x), r = sqrtf(x);
        assert_true(memcmp(&a, &r, 4) == 0 || (isnan(a) && isnan(r)));
    }
}

// the sanitizer pass checks 1/16 of each sweep below (the same code paths; sanitizer_pass.h)
#define SWEEP_DIV (SANITIZER_PASS ? 16 : 1)

#if defined(__x86_64__)
__attribute__((target("avx2"))) static size_t vector_mismatches(bool hw_seed, size_t* n_out) {
    uint64_t z = 88172645463325252ull;
    size_t bad = 0, n = 0;
    float xs[8], got[8];
    for (int i = 0; i < 4000000 / SWEEP_DIV; i++) {  // 32M random bit patterns, all classes of floats
        for (int l = 0; l < 8; l++) {
            z ^= z << 13; z ^= z >> 7; z ^= z << 17;
            uint32_t b = (uint32_t)z;
            memcpy(&xs[l], &b, 4);
        }
        _mm256_storeu_ps(got, torch_sqrt8_avx2(_mm256_loadu_ps(xs), hw_seed));
        for (int l = 0; l < 8; l++, n++) {
            float want = torch_sqrtf(xs[l]);
            if (memcmp(&got[l], &want, 4) != 0 && !(isnan(got[l]) && isnan(want))) bad++;
        }
    }
    *n_out = n;
    return bad;
}

// every float in [1, 4) (each table entry) and at the extremes of the exponent range
__attribute__((target("avx2"))) static size_t table_sweep_mismatches(size_t* n_out) {
    static const int shifts[] = {0, 2, -2, -126, 126, 124, -124};
    size_t bad = 0, n = 0;
    float xs[8], got[8];
    for (size_t k = 0; k < sizeof shifts / sizeof shifts[0]; k++)
        // every float of [1, 4) at the table's own exponents; every 64th at the others (each
        // entry still met: the index is the top 12 mantissa bits and the exponent's parity)
        for (uint32_t b = 0x3F800000u; b < 0x40800000u; b += (k == 0 ? 8u : 512u) * SWEEP_DIV) {
            for (int l = 0; l < 8; l++) {
                int64_t e = (int64_t)((b + (uint32_t)l) >> 23) + shifts[k];
                if (e < 1) e = 1;  // keep it a normal (subnormals are in the random patterns)
                if (e > 254) e = 254;
                const uint32_t bits = ((uint32_t)e << 23) | ((b + (uint32_t)l) & 0x7FFFFFu);
                memcpy(&xs[l], &bits, 4);
            }
            _mm256_storeu_ps(got, torch_sqrt8_avx2(_mm256_loadu_ps(xs), false));
            for (int l = 0; l < 8; l++, n++) {
                float want = torch_sqrtf(xs[l]);
                if (memcmp(&got[l], &want, 4) != 0) bad++;
            }
        }
    *n_out = n;
    return bad;
}
#endif

static void test_hardware_path_bit_identical(void** s) {
    (void)s;
#if defined(__x86_64__)
    if (!torch_sqrt_hw_matches()) {
        printf("this CPU's rsqrtps differs from the table (or no AVX2): the hardware seed is not used\n");
        return;
    }
    size_t n, bad = vector_mismatches(true, &n);
    printf("rsqrtps-seeded vector path vs torch_sqrtf: %zu random inputs, %zu mismatches\n", n, bad);
    assert_int_equal(bad, 0);
#endif
}

// The seed gathered from the table (the vector kernels' path on a CPU whose rsqrtps rounds
// otherwise, e.g. an Intel Xeon with AMX): bit-identical to torch_sqrtf on every CPU with AVX2.
static void test_table_seed_path_bit_identical(void** s) {
    (void)s;
#if defined(__x86_64__)
    torch_sqrt_init();
    if (!__builtin_cpu_supports("avx2")) {
        printf("no AVX2: the vector kernels are not used\n");
        return;
    }
    size_t n, bad = vector_mismatches(false, &n), n2, bad2 = table_sweep_mismatches(&n2);
    printf("table-seeded vector path vs torch_sqrtf: %zu random inputs, %zu mismatches; %zu swept (every entry at "
           "7 exponents), %zu mismatches\n", n, bad, n2, bad2);
    sanitizer_pass_note("1/16 of each sqrt sweep");
    assert_int_equal(bad, 0);
    assert_int_equal(bad2, 0);
#endif
}

#if defined(__x86_64__)
// Mismatches of MKL's AVX-512 model in `lanes` (8: adamw_torch's torch_sqrt8_mkl_avx512; 16: bnb's
// torch_sqrt16_mkl_avx512) against the scalar model: 16M random bit patterns of all classes, then
// 16M floats from 1, `lanes` per vector.
__attribute__((target("avx2,fma,avx512f,avx512vl"))) static size_t mkl512_mismatches(int lanes, size_t* n_out) {
    uint64_t z = 0x9E3779B97F4A7C15ull;
    size_t bad = 0, n = 0;
    float xs[16], got[16];
    const int vectors = 32000000 / lanes / SWEEP_DIV, half = vectors / 2;
    for (int i = 0; i < vectors; i++) {
        for (int l = 0; l < lanes; l++) {
            z ^= z << 13; z ^= z >> 7; z ^= z << 17;
            uint32_t b = i < half ? (uint32_t)z
                                  : 0x3F800000u + (uint32_t)(i - half) * (uint32_t)lanes * SWEEP_DIV + (uint32_t)l;
            memcpy(&xs[l], &b, 4);
        }
        if (lanes == 16) _mm512_storeu_ps(got, torch_sqrt16_mkl_avx512(_mm512_loadu_ps(xs)));
        else _mm256_storeu_ps(got, torch_sqrt8_mkl_avx512(_mm256_loadu_ps(xs)));
        for (int l = 0; l < lanes; l++, n++) {
            float want = torch_sqrtf_mkl_avx512(xs[l]);
            if (memcmp(&got[l], &want, 4) != 0 && !(isnan(got[l]) && isnan(want))) bad++;
        }
    }
    *n_out = n;
    return bad;
}
#endif

// MKL's AVX-512 kernel (OPTIM_SEMANTICS.md 0.3): the 8-lane version adamw_torch's kernel uses
// under TORCH_SQRT_MKL_AVX512, and the 16-lane one of bnb's AVX-512 kernels, equal the scalar model (which test_optim's
// test_mkl_avx512_sqrt_goldens holds to torch's own goldens).
static void test_mkl_avx512_vector_matches_scalar(void** s) {
    (void)s;
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl")) {
        printf("no AVX-512F/VL: MKL's AVX-512 kernel is not modelled here\n");
        return;
    }
    size_t n, bad = mkl512_mismatches(8, &n), n16, bad16 = mkl512_mismatches(16, &n16);
    printf("mkl-avx512 vector vs scalar model: 8 lanes %zu inputs (random patterns, then floats of [1, 4)), %zu "
           "mismatches; 16 lanes %zu inputs, %zu mismatches\n", n, bad, n16, bad16);
    assert_int_equal(bad, 0);
    assert_int_equal(bad16, 0);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_within_one_ulp_of_sqrtf),
        cmocka_unit_test(test_hardware_path_bit_identical),
        cmocka_unit_test(test_table_seed_path_bit_identical),
        cmocka_unit_test(test_mkl_avx512_vector_matches_scalar),
    };
    return cmocka_run_group_tests_name("torch_sqrt", tests, NULL, NULL);
}

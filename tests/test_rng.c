// test_rng.c — the RNG reproduces the documented algorithm. Expected values come from
// reference/rng_vectors.py, an independent Python implementation of the algorithm in rng.h,
// and from the published SplitMix64 sequence; none were produced by this C code.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "core/rng.h"

static void test_splitmix64_published_value(void** state) {
    (void)state;
    uint64_t z = 0;
    // First SplitMix64 output for seed 0 (Vigna's reference splitmix64.c).
    assert_true(splitmix64_next(&z) == 0xe220a8397b1dcdafull);
}

static void test_xoshiro_vectors(void** state) {
    (void)state;
    static const struct { uint64_t seed, stream, v[4]; } cases[] = {
        {0, 0, {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull, 0x1a5f849d4933e6e0ull, 0x6aa594f1262d2d2cull}},
        {42, 0, {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull, 0xae17533239e499a1ull, 0xecb8ad4703b360a1ull}},
        {42, 7, {0xab0b230f7fc48e9aull, 0x048b0576862255caull, 0x8f664d3da4409262ull, 0x06addd70503a676cull}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Rng r;
        rng_init(&r, cases[c].seed, cases[c].stream);
        for (int i = 0; i < 4; i++) assert_true(rng_next_u64(&r) == cases[c].v[i]);
    }
}

static void test_normal_vectors(void** state) {
    (void)state;
    static const float expect[6] = {-0x1.73d2fep-1f, -0x1.b08802p-3f, 0x1.c5e22p-3f,
                                    0x1.0ba8bcp-1f, 0x1.db514cp-2f, 0x1.7b6196p-1f};
    Rng r;
    rng_init(&r, 42, 0);
    for (int i = 0; i < 6; i++) assert_true(rng_normal(&r, 0.0f, 1.0f) == expect[i]);
}

static void test_normal_moments(void** state) {
    (void)state;
    Rng r;
    rng_init(&r, 1, 0);
    const int n = 200000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double z = rng_normal(&r, 0.0f, 1.0f);
        s += z;
        s2 += z * z;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    // standard errors: mean 1/sqrt(n) = 0.0022, variance sqrt(2/n) = 0.0032; allow ~5 sigma
    assert_true(fabs(mean) < 0.011);
    assert_true(fabs(var - 1.0) < 0.016);
}

static void test_uniform_range_and_below(void** state) {
    (void)state;
    Rng r;
    rng_init(&r, 3, 1);
    int counts[7] = {0};
    for (int i = 0; i < 70000; i++) {
        double u = rng_uniform(&r);
        float f = rng_uniform_f32(&r);
        assert_true(u >= 0.0 && u < 1.0);
        assert_true(f >= 0.0f && f < 1.0f);
        counts[rng_below(&r, 7)]++;
    }
    for (int k = 0; k < 7; k++) assert_true(counts[k] > 9400 && counts[k] < 10600);  // ~6 sigma
}

static void test_streams_independent_and_repeatable(void** state) {
    (void)state;
    Rng a, b, c;
    rng_init(&a, 5, 0);
    rng_init(&b, 5, 0);
    rng_init(&c, 5, 1);
    int same_ac = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_next_u64(&a), y = rng_next_u64(&b), z = rng_next_u64(&c);
        assert_true(x == y);
        same_ac += (x == z);
    }
    assert_int_equal(same_ac, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splitmix64_published_value),
        cmocka_unit_test(test_xoshiro_vectors),
        cmocka_unit_test(test_normal_vectors),
        cmocka_unit_test(test_normal_moments),
        cmocka_unit_test(test_uniform_range_and_below),
        cmocka_unit_test(test_streams_independent_and_repeatable),
    };
    return cmocka_run_group_tests_name("rng", tests, NULL, NULL);
}

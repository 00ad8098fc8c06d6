// test_stats.c — median and the Mann-Whitney U test of src/results/stats.c. The expected p-values were
// computed OFFLINE with scipy 1.17.1, scipy.stats.mannwhitneyu(x, y, alternative="two-sided",
// method=<as noted>, use_continuity=True), not with this code; the rest are closed forms
// (complete separation: 2 / C(n+m, n)) and properties (symmetry, identical samples).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "core/common.h"
#include "results/stats.h"

#define REL_TOL 1e-12  // both sides are double arithmetic on the same formulas

static void expect_close(double got, double want, const char* what) {
    double err = fabs(got - want);
    if (err > REL_TOL * fabs(want) + 1e-15) printf("%s: got %.17g want %.17g\n", what, got, want);
    assert_true(err <= REL_TOL * fabs(want) + 1e-15);
}

static void test_median(void** s) {
    (void)s;
    const double odd[] = {5, 1, 3};
    const double even[] = {4, 1, 3, 2};
    const double one[] = {7.5};
    assert_true(stats_median(odd, 3) == 3.0);
    assert_true(stats_median(even, 4) == 2.5);
    assert_true(stats_median(one, 1) == 7.5);
    assert_true(odd[0] == 5 && odd[1] == 1);  // input untouched
}

typedef struct {
    const char* id;
    double a[16];
    size_t n;
    double b[16];
    size_t m;
    bool exact;     // method given to scipy (and forced here)
    double U;       // scipy's statistic (U of the first sample)
    double p;       // scipy's two-sided p
} ScipyCase;

// scipy 1.17.1 values, see the file header.
static const ScipyCase SCIPY[] = {
    {"exact_5v5_separated", {1, 2, 3, 4, 5}, 5, {6, 7, 8, 9, 10}, 5, true, 0.0, 0.007936507936507936},
    {"exact_4v6", {1.1, 2.5, 3.3, 7.0}, 4, {0.5, 4.2, 5.1, 6.0, 8.8, 9.9}, 6, true, 7.0, 0.35238095238095235},
    {"exact_8v7", {3.1, 4.7, 1.2, 9.5, 6.6, 2.8, 7.7, 5.5}, 8, {8.1, 9.9, 10.4, 6.1, 12.0, 11.3, 7.2}, 7, true, 6.0,
     0.009324009324009324},
    {"asymptotic_ties", {1, 2, 2, 3, 3, 3, 4, 5}, 8, {3, 4, 4, 5, 5, 6, 7, 7, 8}, 9, false, 7.5, 0.006373133838085873},
    {"asymptotic_10v12",
     {1.02, 0.98, 1.05, 1.01, 0.97, 1.03, 0.99, 1.04, 1.00, 0.96},
     10,
     {1.10, 1.08, 1.03, 1.12, 1.07, 1.01, 1.09, 1.11, 1.06, 1.05, 1.13, 0.99},
     12,
     false,
     14.0,
     0.002668277513316019},
    {"asymptotic_5v5_separated", {1, 2, 3, 4, 5}, 5, {6, 7, 8, 9, 10}, 5, false, 0.0, 0.012185780355344813},
    {"asymptotic_all_identical", {2, 2, 2}, 3, {2, 2, 2, 2}, 4, false, 6.0, 1.0},
};

static void test_against_scipy(void** s) {
    (void)s;
    for (size_t i = 0; i < ARRAY_LEN(SCIPY); i++) {
        const ScipyCase* c = &SCIPY[i];
        MannWhitney r = mann_whitney_u_method(c->a, c->n, c->b, c->m, c->exact);
        printf("  %-26s U=%g p=%.17g (scipy %.17g)\n", c->id, r.U, r.p, c->p);
        assert_true(r.U == c->U);
        assert_true(r.exact == c->exact);
        expect_close(r.p, c->p, c->id);
    }
}

// mann_whitney_u picks the method like scipy's "auto" for these cases: exact for small
// samples without ties, asymptotic with ties or more than 8 values on a side.
static void test_method_choice(void** s) {
    (void)s;
    MannWhitney r = mann_whitney_u(SCIPY[0].a, 5, SCIPY[0].b, 5);
    assert_true(r.exact);
    expect_close(r.p, 2.0 / 252.0, "n=m=5 separated: 2/C(10,5)");
    r = mann_whitney_u(SCIPY[3].a, SCIPY[3].n, SCIPY[3].b, SCIPY[3].m);  // ties
    assert_false(r.exact);
    expect_close(r.p, SCIPY[3].p, "ties -> asymptotic");
    r = mann_whitney_u(SCIPY[4].a, SCIPY[4].n, SCIPY[4].b, SCIPY[4].m);  // 10 and 12 values
    assert_false(r.exact);
    expect_close(r.p, SCIPY[4].p, "n > 8 -> asymptotic");
}

// Complete separation with exact p = 2 / C(n+m, n) for several small sizes, either direction.
static void test_complete_separation_exact(void** s) {
    (void)s;
    for (size_t n = 1; n <= 8; n++) {
        for (size_t m = 1; m <= 8; m++) {
            double a[8], b[8];
            for (size_t i = 0; i < n; i++) a[i] = (double)i;
            for (size_t j = 0; j < m; j++) b[j] = 100.0 + (double)j;
            double binom = 1;  // C(n+m, n)
            for (size_t k = 1; k <= n; k++) binom = binom * (double)(m + k) / (double)k;
            double want = fmin(1.0, 2.0 / binom);
            MannWhitney lo = mann_whitney_u(a, n, b, m), hi = mann_whitney_u(b, m, a, n);
            assert_true(lo.exact && hi.exact);
            assert_true(lo.U == 0.0);
            assert_true(hi.U == (double)(n * m));
            expect_close(lo.p, want, "separated");
            expect_close(hi.p, want, "separated, swapped");
        }
    }
}

// Swapping the samples gives U2 = n*m - U1 and the same two-sided p, in both methods.
static void test_symmetry(void** s) {
    (void)s;
    for (size_t i = 0; i < ARRAY_LEN(SCIPY); i++) {
        const ScipyCase* c = &SCIPY[i];
        for (int e = 0; e < 2; e++) {
            MannWhitney ab = mann_whitney_u_method(c->a, c->n, c->b, c->m, e);
            MannWhitney ba = mann_whitney_u_method(c->b, c->m, c->a, c->n, e);
            assert_true(ab.U + ba.U == (double)(c->n * c->m));
            expect_close(ba.p, ab.p, "symmetry");
        }
    }
}

// Identical samples: U = n*m/2, p = 1 (exact and asymptotic, with and without ties).
static void test_identical_samples(void** s) {
    (void)s;
    const double x[] = {0.3, 0.1, 0.4, 0.15, 0.9, 0.26};
    for (int e = 0; e < 2; e++) {
        MannWhitney r = mann_whitney_u_method(x, 6, x, 6, e);
        assert_true(r.U == 18.0);
        assert_true(r.p == 1.0);
    }
    MannWhitney r = mann_whitney_u(x, 6, x, 6);
    assert_false(r.exact);  // identical samples tie pairwise
    assert_true(r.p == 1.0);
    double big[20];
    for (int i = 0; i < 20; i++) big[i] = (double)((i * 7) % 13);
    r = mann_whitney_u(big, 20, big, 20);
    assert_true(r.p == 1.0);
}

// Near the centre of the null distribution the exact p is large and at most 1; n = m = 1
// (the only possible outcomes U = 0 or 1, each with probability 1/2) gives p = min(1, 2*1/2) = 1.
static void test_exact_total_mass(void** s) {
    (void)s;
    double a[8], b[8];
    for (int i = 0; i < 8; i++) {
        a[i] = 2.0 * i;
        b[i] = 2.0 * i + 1.0;
    }
    // interleaved: U1 = 28 against a centre of n*m/2 = 32
    MannWhitney r = mann_whitney_u(a, 8, b, 8);
    assert_true(r.exact);
    assert_true(r.U == 28.0);
    assert_true(r.p > 0.5 && r.p <= 1.0);
    r = mann_whitney_u(a, 1, b, 1);
    assert_true(r.exact && r.p == 1.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_median),
        cmocka_unit_test(test_against_scipy),
        cmocka_unit_test(test_method_choice),
        cmocka_unit_test(test_complete_separation_exact),
        cmocka_unit_test(test_symmetry),
        cmocka_unit_test(test_identical_samples),
        cmocka_unit_test(test_exact_total_mass),
    };
    return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}

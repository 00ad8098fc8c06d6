// stats.c — median and the two-sided Mann-Whitney U test (see stats.h for the formulas).
// References: H. B. Mann and D. R. Whitney, "On a test of whether one of two random variables
// is stochastically larger than the other", Ann. Math. Statist. 18(1), 1947 (the recurrence
// for the exact distribution); scipy.stats.mannwhitneyu (scipy/stats/_mannwhitneyu.py) for
// the tie-corrected asymptotic method with continuity correction and the two-sided p.
#include "results/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"

static int cmp_double(const void* x, const void* y) {
    double a = *(const double*)x, b = *(const double*)y;
    return (a > b) - (a < b);
}

double stats_median(const double* x, size_t n) {
    CHECK(n >= 1, "median of an empty sample");
    double* s = xmalloc(n * sizeof(double));
    memcpy(s, x, n * sizeof(double));
    qsort(s, n, sizeof(double), cmp_double);
    double med = (n % 2) ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return med;
}

typedef struct {
    double v;
    int from_a;
} Pooled;

static int cmp_pooled(const void* x, const void* y) {
    return cmp_double(&((const Pooled*)x)->v, &((const Pooled*)y)->v);
}

// Mid-ranks of the pooled sample: returns U1 (for a), the tie term sum(t^3 - t) and whether
// any ties exist.
static double rank_u1(const double* a, size_t n, const double* b, size_t m, double* tie_term, bool* ties) {
    size_t N = n + m;
    Pooled* p = xmalloc(N * sizeof(Pooled));
    for (size_t i = 0; i < n; i++) p[i] = (Pooled){a[i], 1};
    for (size_t j = 0; j < m; j++) p[n + j] = (Pooled){b[j], 0};
    qsort(p, N, sizeof(Pooled), cmp_pooled);
    double r1 = 0, tt = 0;
    *ties = false;
    for (size_t i = 0; i < N;) {
        size_t k = i;
        while (k + 1 < N && p[k + 1].v == p[i].v) k++;
        double t = (double)(k - i + 1);
        double mid = 0.5 * ((double)(i + 1) + (double)(k + 1));  // ranks are 1-based
        for (size_t q = i; q <= k; q++)
            if (p[q].from_a) r1 += mid;
        if (t > 1) {
            *ties = true;
            tt += t * t * t - t;
        }
        i = k + 1;
    }
    free(p);
    *tie_term = tt;
    return r1 - (double)n * (double)(n + 1) / 2.0;
}

// P(U >= u) under the null for sample sizes n, m (no ties), by the Mann-Whitney recurrence in
// probability form: P(u; i, j) = i/(i+j) P(u - j; i-1, j) + j/(i+j) P(u; i, j-1).
static double exact_sf(double u_obs, size_t n, size_t m) {
    CHECK(n <= 64 && m <= 64, "exact Mann-Whitney distribution is for small samples (n=%zu m=%zu)", n, m);
    size_t L = n * m + 1;  // support 0..n*m
    // prev[j] / cur[j]: distribution for (i-1, j) / (i, j), each L doubles
    double* prev = xcalloc((m + 1) * L, sizeof(double));
    double* cur = xcalloc((m + 1) * L, sizeof(double));
    for (size_t j = 0; j <= m; j++) prev[j * L] = 1.0;  // i = 0: U = 0 surely
    for (size_t i = 1; i <= n; i++) {
        memset(cur, 0, (m + 1) * L * sizeof(double));
        cur[0] = 1.0;  // j = 0
        for (size_t j = 1; j <= m; j++) {
            double wa = (double)i / (double)(i + j), wb = (double)j / (double)(i + j);
            double* c = cur + j * L;
            const double* from_a = prev + j * L;        // (i-1, j), shifted by j
            const double* from_b = cur + (j - 1) * L;   // (i, j-1)
            for (size_t u = 0; u <= i * j; u++) {
                double v = wb * from_b[u];
                if (u >= j) v += wa * from_a[u - j];
                c[u] = v;
            }
        }
        double* t = prev;
        prev = cur;
        cur = t;
    }
    const double* d = prev + m * L;  // (n, m)
    double sf = 0;
    size_t u0 = (size_t)ceil(u_obs);
    for (size_t k = u0; k < L; k++) sf += d[k];
    free(prev);
    free(cur);
    return sf;
}

MannWhitney mann_whitney_u_method(const double* a, size_t n, const double* b, size_t m, bool exact) {
    CHECK(n >= 1 && m >= 1, "Mann-Whitney U needs two non-empty samples (n=%zu m=%zu)", n, m);
    MannWhitney r = {0};
    double tie_term;
    bool ties;
    double nm = (double)n * (double)m, N = (double)(n + m);
    r.U = rank_u1(a, n, b, m, &tie_term, &ties);
    double u_big = fmax(r.U, nm - r.U);
    double mu = nm / 2.0;
    double var = nm / 12.0 * ((N + 1.0) - (N > 1 ? tie_term / (N * (N - 1.0)) : 0.0));
    double sigma = var > 0 ? sqrt(var) : 0.0;
    r.z = sigma > 0 ? (u_big - mu - 0.5) / sigma : 0.0;
    r.exact = exact;
    if (exact) {
        r.p = 2.0 * exact_sf(u_big, n, m);
    } else if (sigma == 0) {
        r.p = 1.0;  // every value equal: no evidence of a difference
    } else {
        r.p = erfc(r.z / sqrt(2.0));  // 2 * (1 - Phi(z))
    }
    if (r.p > 1.0) r.p = 1.0;
    if (r.p < 0.0) r.p = 0.0;
    return r;
}

MannWhitney mann_whitney_u(const double* a, size_t n, const double* b, size_t m) {
    double tie_term;
    bool ties;
    (void)rank_u1(a, n, b, m, &tie_term, &ties);
    bool exact = !ties && n <= STATS_MWU_EXACT_MAX && m <= STATS_MWU_EXACT_MAX;
    return mann_whitney_u_method(a, n, b, m, exact);
}

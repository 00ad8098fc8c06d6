// stats.h — the small statistics the gate needs: the median and the two-sided Mann-Whitney U
// test (Mann & Whitney 1947). Not here: reading result files or deciding verdicts (gate.c).
#ifndef TRAINBENCH_STATS_H
#define TRAINBENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>

// Median of x[0..n); n >= 1. The mean of the two middle values when n is even. x is not changed.
double stats_median(const double* x, size_t n);

typedef struct {
    double U;     // U of the first sample a: #pairs (a_i > b_j) + 0.5 * #pairs (a_i == b_j)
    double z;     // tie-corrected normal score of max(U, n*m - U) with continuity correction
                  // (computed for information also when the exact distribution gave p)
    double p;     // two-sided p-value, in [0, 1]
    bool exact;   // true when p came from the exact null distribution of U
} MannWhitney;

// Largest sample size per side for which the exact distribution is used (when there are no
// ties): like scipy.stats.mannwhitneyu's method="auto", which switches to the normal
// approximation above 8 values.
#define STATS_MWU_EXACT_MAX 8

// Two-sided Mann-Whitney U test of a[0..n) against b[0..m) (n, m >= 1; finite values).
//
// U1 = R1 - n(n+1)/2 with R1 the sum of the mid-ranks of a in the pooled sample; U2 = n*m - U1.
// Exact (no ties, n <= 8 and m <= 8): the null distribution of U counts the orderings of
// the pooled sample, built by the recurrence of Mann & Whitney (1947), eq. (1):
//     c(u; i, j) = c(u - j; i - 1, j) + c(u; i, j - 1),   c(0; i, 0) = c(0; 0, j) = 1
// (the largest pooled value is either from a, beating all j values of b, or from b), used as
// probabilities p = c / C(i+j, i) to stay in range. p = min(1, 2 * P(U >= max(U1, U2))), as in
// scipy.stats.mannwhitneyu(method="exact").
// Otherwise (ties, or a side with > 8 values): the normal approximation with tie correction
// and continuity correction, as scipy.stats.mannwhitneyu(method="asymptotic",
// use_continuity=True):
//     mu = n*m/2,  sigma = sqrt(n*m/12 * ((N+1) - sum(t^3 - t) / (N*(N-1)))),  N = n+m,
//     t = sizes of the tie groups;  z = (max(U1, U2) - mu - 0.5) / sigma;
//     p = min(1, 2 * (1 - Phi(z))).  All values equal (sigma = 0): p = 1.
MannWhitney mann_whitney_u(const double* a, size_t n, const double* b, size_t m);

// Force one method (for tests): exact == true uses the exact distribution (ignores ties: the
// U statistic still uses mid-ranks), false the normal approximation.
MannWhitney mann_whitney_u_method(const double* a, size_t n, const double* b, size_t m, bool exact);

#endif

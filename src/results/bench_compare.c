// bench_compare.c — implementation of bench_compare.h. Not here: file reading, output.
#include "results/bench_compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char* const VERDICT_NAMES[V_COUNT] = {
    "no significant change", "change below min effect", "REGRESSION", "IMPROVEMENT",
    "UNTESTED: too few repetitions", "FAILED in candidate",     "failed in baseline",
    "unsupported on both", "slower, not gated: environment changed", "faster, not gated: environment changed",
};

double bench_min_p(size_t n, size_t m) {
    if (n == 0 || m == 0) return 1.0;
    double* v = xmalloc((n + m) * sizeof(double));
    for (size_t i = 0; i < n + m; i++) v[i] = (double)i;
    double p = mann_whitney_u(v, n, v + n, m).p;
    free(v);
    return p;
}

size_t bench_reps_needed(double alpha) {
    // bench_min_p(n, n) falls as n grows: double up to a bound, then bisect
    size_t hi = 1;
    while (bench_min_p(hi, hi) > alpha && hi < (1u << 20)) hi *= 2;
    size_t lo = hi / 2;  // bench_min_p(lo, lo) > alpha (or lo == 0)
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (bench_min_p(mid, mid) > alpha) lo = mid;
        else hi = mid;
    }
    return hi;
}

BenchComparison bench_compare(const BenchEntry* b, const BenchEntry* c, double alpha, double min_effect) {
    return bench_compare_scaled(b, c, alpha, min_effect, 1.0, 1.0);
}

RooflineCheck bench_roofline_check(const BenchEntry* b, const BenchEntry* c, double min_effect) {
    RooflineCheck r = {.name = b->name, .best_b = bench_entry_best(b), .best_c = bench_entry_best(c), .change = NAN};
    if (!b->n || !c->n || !(r.best_b > 0)) return r;
    r.change = r.best_c / r.best_b - 1.0;
    double max_b = 0, max_c = 0;
    for (size_t i = 0; i < b->n; i++) max_b = fmax(max_b, b->reps[i].real_time_s);
    for (size_t i = 0; i < c->n; i++) max_c = fmax(max_c, c->reps[i].real_time_s);
    bool apart = max_b < r.best_c || max_c < r.best_b;
    r.changed = apart && fabs(r.change) > min_effect;
    return r;
}

BenchComparison bench_compare_scaled(const BenchEntry* b, const BenchEntry* c, double alpha, double min_effect,
                                     double scale_b, double scale_c) {
    BenchComparison r = {.name = b->name, .nb = b->n, .nc = c->n, .med_b = NAN, .med_c = NAN, .change = NAN};
    double* tb = xmalloc((b->n + 1) * sizeof(double));
    double* tc = xmalloc((c->n + 1) * sizeof(double));
    bench_entry_metric(b, tb);
    bench_entry_metric(c, tc);
    for (size_t i = 0; i < b->n; i++) tb[i] *= scale_b;
    for (size_t i = 0; i < c->n; i++) tc[i] *= scale_c;
    if (b->n) r.med_b = stats_median(tb, b->n);
    if (c->n) r.med_c = stats_median(tc, c->n);
    if (b->n && c->n) r.change = r.med_b > 0 ? r.med_c / r.med_b - 1.0 : (r.med_c > 0 ? INFINITY : 0.0);
    // A combination the backend reports as unsupported (benchmarks say "unsupported: <why>")
    // in both runs is not a failure; unsupported only in the candidate is (a lost capability).
    if (c->error && b->error && strncmp(c->error, "unsupported:", 12) == 0 &&
        strncmp(b->error, "unsupported:", 12) == 0) {
        r.verdict = V_UNSUPPORTED;
        r.error = c->error;
    } else if (c->error) {
        r.verdict = V_CAND_ERROR;
        r.error = c->error;
    } else if (b->error) {
        r.verdict = V_BASE_ERROR;
        r.error = b->error;
    } else if (bench_min_p(b->n, c->n) > alpha) {  // no outcome could be significant
        r.verdict = V_UNTESTED;
    } else {
        r.mw = mann_whitney_u(tc, c->n, tb, b->n);
        r.tested = true;
        if (!(r.mw.p <= alpha)) r.verdict = V_SAME;
        else if (r.change > min_effect) r.verdict = V_REGRESSION;
        else if (r.change < -min_effect) r.verdict = V_IMPROVEMENT;
        else r.verdict = V_SMALL;
    }
    free(tb);
    free(tc);
    return r;
}

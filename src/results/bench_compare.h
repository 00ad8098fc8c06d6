// bench_compare.h — the comparison of one benchmark between two runs, shared by `trainbench
// gate` (verdicts, exit status) and `trainbench report` (the significance column of the
// hardware comparison), so both always say the same thing about a row. The metric compared is
// results.h's bench_entry_metric (real time per iteration). Not here: reading files
// (results.h), the test itself (stats.h), exit codes (gate.c).
#ifndef TRAINBENCH_BENCH_COMPARE_H
#define TRAINBENCH_BENCH_COMPARE_H

#include "results/results.h"
#include "results/stats.h"

#define GATE_DEFAULT_ALPHA 0.01
#define GATE_DEFAULT_MIN_EFFECT 0.05

typedef enum {
    V_SAME = 0,      // no significant change
    V_SMALL,         // significant but below the minimum effect
    V_REGRESSION,
    V_IMPROVEMENT,
    V_UNTESTED,      // too few repetitions on a side for any p <= alpha: exit 2 unless allowed
    V_CAND_ERROR,    // the candidate benchmark failed: gated (a conformance failure)
    V_BASE_ERROR,    // only the baseline failed: nothing to compare, not gated
    V_UNSUPPORTED,   // "unsupported: ..." on both sides (e.g. onednn f16 here): not gated
    V_ENV_SLOWER,    // would be a regression, but the roofline probes say the machine changed: not gated
    V_ENV_FASTER,    // would be an improvement, same
    V_COUNT
} Verdict;

extern const char* const VERDICT_NAMES[V_COUNT];

typedef struct {
    const char* name;
    size_t nb, nc;
    double med_b, med_c, change;  // medians of the metric; change = med_c / med_b - 1; NAN when n/a
    MannWhitney mw;
    bool tested;
    Verdict verdict;
    const char* error;  // candidate's (or baseline's) error message
} BenchComparison;

// Mann-Whitney U (two-sided) over the repetitions' metric, plus the minimum effect on the
// medians: REGRESSION when p <= alpha and change > +min_effect, IMPROVEMENT when p <= alpha and
// change < -min_effect. The result borrows b's name and the entries' error strings.
BenchComparison bench_compare(const BenchEntry* b, const BenchEntry* c, double alpha, double min_effect);
// The same with every repetition's metric multiplied by scale_b (baseline) and scale_c
// (candidate): the roofline-normalized comparison divides each side by its probe's best time.
BenchComparison bench_compare_scaled(const BenchEntry* b, const BenchEntry* c, double alpha, double min_effect,
                                     double scale_b, double scale_c);

// The environment check the gate runs first: the roofline probes of two runs. A probe
// "changed" when its best repetitions differ by more than min_effect AND the two samples do not
// overlap (every repetition of one run is faster than every repetition of the other: the
// difference is beyond both runs' own spread). Then the machine, not the code, changed.
typedef struct {
    const char* name;
    double best_b, best_c, change;  // change = best_c / best_b - 1 (of the real time)
    bool changed;
} RooflineCheck;
RooflineCheck bench_roofline_check(const BenchEntry* b, const BenchEntry* c, double min_effect);

// The smallest two-sided p the test can give with n and m repetitions (samples without
// overlap; exact: 2 / C(n+m, n)); 1 when a side has none.
double bench_min_p(size_t n, size_t m);
// The least n with bench_min_p(n, n) <= alpha (4 at 0.05, 5 at 0.01).
size_t bench_reps_needed(double alpha);

#endif

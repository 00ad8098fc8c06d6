// bench_optim.c — optim/<name>/<n>: one optimizer step (defaults as HF Trainer sets them) on
// one (rows, cols) parameter tensor of n elements, for every optimizer in the registry and
// n in {1e4, 1e6, 1e7} (FULL=1 adds 1e8). Checked once before timing: two fresh states given
// the same parameters and gradients must produce bit-identical parameters after one step
// (the step is deterministic), every parameter must stay finite, and some must change.
// Counters: params/s, GB/s and frac_triad (of roofline/triad). The bytes a step must move
// are the compulsory traffic, derived from the registry so a new optimizer needs no edit:
//   bytes/step = 12 n (read p and g, write p) + 2 * state_bytes(shape)  (read+write state)
// which gives adamw_torch 28 B/param (exp_avg, exp_avg_sq fp32), adamw_bnb_8bit ~16 B/param
// (two uint8 states + block absmax), adafactor_hf and adafactor_torch ~12 B/param (factored
// row/col statistics only; no first moment by default). Extra passes an implementation makes
// (Adafactor's RMS and row/col reductions) are not counted: frac_triad shows their cost.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "optim/optim.h"
#include "core/rng.h"

// From this size on (the targets' 1e7) each repetition also measures the triad right before and
// right after its loop (ADJACENT_RUNS passes each, ~15 ms per pass, outside the timed region):
// frac_triad_adj is the step's GB/s over their mean. frac_triad divides by the best triad of the
// whole process instead, which on a shared machine may come from a quieter minute than the
// step's own (README "Benchmarks").
enum { ADJACENT_MIN_N = 10000000, ADJACENT_RUNS = 3 };

typedef struct {
    const Optimizer* o;
    int64_t rows, cols;
    bool checked, ok;
    char why[256];
} OptimCase;

static void fill(float* p, float* g, size_t n) {
    Rng r;
    rng_init(&r, 0x0971ull, n);
    rng_fill_normal(&r, p, n, 0.0f, 0.02f);
    rng_fill_normal(&r, g, n, 0.0f, 1e-3f);
}

static bool optim_check(const OptimCase* c, const OptimConfig* cfg, const TensorShape* shape,
                        const float* p0, const float* g, char* why, size_t len) {
    const size_t n = shape_numel(shape);
    float* p1 = xaligned_alloc(n * sizeof(float));
    float* p2 = xaligned_alloc(n * sizeof(float));
    memcpy(p1, p0, n * sizeof(float));
    memcpy(p2, p0, n * sizeof(float));
    OptimState* s1 = c->o->init(shape, cfg);
    OptimState* s2 = c->o->init(shape, cfg);
    c->o->step(s1, p1, g, cfg);
    c->o->step(s2, p2, g, cfg);
    bool ok = true;
    size_t changed = 0;
    for (size_t i = 0; i < n && ok; i++) {
        if (memcmp(&p1[i], &p2[i], sizeof(float)) != 0) {
            snprintf(why, len, "not deterministic: p[%zu] = %a vs %a after one step from the same state", i,
                     (double)p1[i], (double)p2[i]);
            ok = false;
        } else if (!isfinite(p1[i])) {
            snprintf(why, len, "p[%zu] = %g after one step", i, (double)p1[i]);
            ok = false;
        }
        changed += p1[i] != p0[i];
    }
    if (ok && changed == 0) {
        snprintf(why, len, "one step changed no parameter");
        ok = false;
    }
    c->o->free(s1);
    c->o->free(s2);
    free(p1);
    free(p2);
    return ok;
}

static void bm_optim(BenchState* st, void* arg) {
    OptimCase* c = arg;
    OptimConfig cfg;
    optim_defaults(c->o, &cfg);
    const TensorShape shape = shape_2d(c->rows, c->cols);
    const size_t n = shape_numel(&shape);
    float* p = xaligned_alloc(n * sizeof(float));
    float* g = xaligned_alloc(n * sizeof(float));
    fill(p, g, n);
    if (!c->checked) {
        c->ok = optim_check(c, &cfg, &shape, p, g, c->why, sizeof c->why);
        c->checked = true;
    }
    if (!c->ok) {
        bench_fail(st, "%s", c->why);
    } else {
        OptimState* s = c->o->init(&shape, &cfg);
        c->o->step(s, p, g, &cfg);  // warm-up: state pages touched
        const bool adjacent = n >= ADJACENT_MIN_N;
        double triad_before = 0, t0 = 0;
        if (adjacent) {  // before the loop and after it: Google Benchmark's timer runs only inside
            triad_before = roofline_triad_now(ADJACENT_RUNS);
            c->o->step(s, p, g, &cfg);  // the triad evicted p, g and the state: as cold as the loop's first step
            t0 = bench_now();
        }
        while (bench_keep_running(st)) c->o->step(s, p, g, &cfg);
        const double iters = (double)bench_iterations(st);
        const double bytes = 12.0 * (double)n + 2.0 * (double)c->o->state_bytes(&shape, &cfg);
        bench_counter(st, "params/s", iters * (double)n, BENCH_RATE);
        bench_counter(st, "GB/s", iters * bytes * 1e-9, BENCH_RATE);
        bench_counter(st, "frac_triad", iters * bytes / roofline_get(ROOF_TRIAD), BENCH_RATE);
        bench_counter(st, "bytes/param", bytes / (double)n, BENCH_PLAIN);
        if (adjacent) {
            const double elapsed = bench_now() - t0;
            const double triad_after = roofline_triad_now(ADJACENT_RUNS);
            // the step's rate over the mean of the two probes' rates (each ADJACENT_RUNS passes)
            const double triad_adj = 0.5 * (triad_before + triad_after);
            bench_counter(st, "triad_adj_GB/s", triad_adj * 1e-9, BENCH_PLAIN);
            bench_counter(st, "frac_triad_adj", iters * bytes / elapsed / triad_adj, BENCH_PLAIN);
        }
        c->o->free(s);
    }
    free(p);
    free(g);
}

void bench_register_optim(void) {
    static const int64_t shapes[][2] = {{100, 100}, {1000, 1000}, {2500, 4000}, {10000, 10000}};
    const size_t n_shapes = bench_full ? 4 : 3;
    for (size_t i = 0; i < optim_count(); i++)
        for (size_t s = 0; s < n_shapes; s++) {
            OptimCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
            c->o = optim_at(i);
            c->rows = shapes[s][0];
            c->cols = shapes[s][1];
            bench_registerf(bm_optim, c, "optim/%s/%lld", c->o->name, (long long)(c->rows * c->cols));
        }
}

// gate.c — `trainbench gate`: compares a candidate result folder with a baseline one and
// exits 1 when the candidate regressed, 0 when it did not, 2 when the input is unusable.
// Per benchmark (Google Benchmark JSON, bench.json): a two-sided Mann-Whitney U test over the
// per-repetition real times (stats.h) plus a minimum relative effect on the medians. Also fails
// on any failed candidate benchmark, failed conformance case (conform.json) or memory row whose
// estimate differs from the measured bytes (memory.json, the output of `trainbench memory
// --json`). Not here: the statistics themselves (stats.c), running benchmarks (bench/).
//
// Inputs, all in the result folder DIR:
//   bench.json    required. {"benchmarks": [...]}: entries with "run_type": "aggregate" are
//                 ignored; every other entry is one repetition of "run_name" (or "name"), with
//                 "real_time" in "time_unit" (ns, us, ms, s). "error_occurred": true marks a
//                 failed benchmark ("error_message" says why).
//   conform.json  optional, candidate only. {"cases": [{"id": "...", "ok": true|false,
//                 "detail": "..."}]}; also accepted: a bare array of such cases, or
//                 {"failures": N}.
//   memory.json   optional, candidate only. `trainbench memory --json` output (an object with
//                 "optimizers": [{"optimizer", "variant", "estimate_bytes", "measured_bytes"}])
//                 or an array of such objects (several models).
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cli.h"
#include "core/common.h"
#include "results/stats.h"

#define GATE_DEFAULT_ALPHA 0.01
#define GATE_DEFAULT_MIN_EFFECT 0.05

typedef struct {
    char* name;
    double* t;  // real_time of each successful repetition, seconds
    size_t n, cap;
    char* error;  // first error_message of a failed repetition, or NULL
} Bench;

typedef struct {
    Bench* v;
    size_t n, cap;
    size_t* slot;      // open-addressing hash index: slot[h] = index into v + 1, 0 = empty
    size_t slot_cap;   // a power of two, kept above twice n
} BenchSet;

typedef enum {
    V_SAME = 0,      // no significant change
    V_SMALL,         // significant but below the minimum effect
    V_REGRESSION,
    V_IMPROVEMENT,
    V_UNTESTED,      // too few repetitions on a side for any p <= alpha: exit 2 unless allowed
    V_CAND_ERROR,    // the candidate benchmark failed: gated (a conformance failure)
    V_BASE_ERROR,    // only the baseline failed: nothing to compare, not gated
    V_UNSUPPORTED,   // "unsupported: ..." on both sides (e.g. onednn f16 here): not gated
} Verdict;

static const char* const VERDICT_NAMES[] = {
    "no significant change", "change below min effect", "REGRESSION", "IMPROVEMENT",
    "UNTESTED: too few repetitions", "FAILED in candidate",     "failed in baseline",
    "unsupported on both",
};

typedef struct {
    const char* name;
    size_t nb, nc;
    double med_b, med_c, change;  // NAN when not available
    MannWhitney mw;
    bool tested;
    Verdict verdict;
    const char* error;  // candidate's (or baseline's) error message
} Row;

static void benchset_free(BenchSet* s) {
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].name);
        free(s->v[i].t);
        free(s->v[i].error);
    }
    free(s->v);
    free(s->slot);
}

static uint64_t name_hash(const char* s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a 64
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

// The slot of `name` in the index: where it is, or the empty slot where it would go.
static size_t benchset_slot(const BenchSet* s, const char* name) {
    size_t mask = s->slot_cap - 1, h = (size_t)name_hash(name) & mask;
    while (s->slot[h] && strcmp(s->v[s->slot[h] - 1].name, name)) h = (h + 1) & mask;
    return h;
}

// Finds a benchmark by name in expected O(1) (matching is linear in the number of benchmarks);
// with create, adds it when missing.
static Bench* benchset_get(BenchSet* s, const char* name, bool create) {
    if (s->slot_cap) {
        size_t h = benchset_slot(s, name);
        if (s->slot[h]) return &s->v[s->slot[h] - 1];
    }
    if (!create) return NULL;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->v = xrealloc(s->v, s->cap * sizeof(Bench));
    }
    if (2 * (s->n + 1) > s->slot_cap) {  // grow and rehash
        free(s->slot);
        s->slot_cap = s->slot_cap ? 2 * s->slot_cap : 64;
        s->slot = xcalloc(s->slot_cap, sizeof(size_t));
        for (size_t i = 0; i < s->n; i++) s->slot[benchset_slot(s, s->v[i].name)] = i + 1;
    }
    Bench* b = &s->v[s->n];
    memset(b, 0, sizeof *b);
    b->name = xstrdup(name);
    s->slot[benchset_slot(s, name)] = ++s->n;
    return b;
}

static void bench_push(Bench* b, double t) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 8;
        b->t = xrealloc(b->t, b->cap * sizeof(double));
    }
    b->t[b->n++] = t;
}

static bool file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Loads a JSON file; on failure fills st with the file name and jansson's message.
static json_t* load_json(const char* path, Status* st) {
    json_error_t err;
    json_t* root = json_load_file(path, 0, &err);
    if (!root)
        *st = status_make(STATUS_INVALID, "%s: malformed JSON (line %d, column %d): %s", path, err.line, err.column,
                          err.text);
    return root;
}

static bool unit_seconds(const char* unit, double* scale) {
    static const struct { const char* name; double s; } UNITS[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
    for (size_t i = 0; i < ARRAY_LEN(UNITS); i++)
        if (!strcmp(unit, UNITS[i].name)) {
            *scale = UNITS[i].s;
            return true;
        }
    return false;
}

static Status load_bench(const char* dir, BenchSet* out) {
    memset(out, 0, sizeof *out);
    char path[4096];
    if (!path_is_dir(dir)) return status_make(STATUS_IO, "result folder %s does not exist", dir);
    snprintf(path, sizeof path, "%s/bench.json", dir);
    if (!file_exists(path)) return status_make(STATUS_IO, "%s: missing (a result folder holds bench.json)", path);
    Status st = status_ok();
    json_t* root = load_json(path, &st);
    if (!root) return st;
    json_t* arr = json_object_get(root, "benchmarks");
    if (!json_is_array(arr)) {
        json_decref(root);
        return status_make(STATUS_INVALID, "%s: no \"benchmarks\" array (expected Google Benchmark JSON)", path);
    }
    size_t i;
    json_t* e;
    json_array_foreach(arr, i, e) {
        if (!json_is_object(e)) {
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] is not an object", path, i);
            break;
        }
        const char* rt = json_string_value(json_object_get(e, "run_type"));
        if (rt && !strcmp(rt, "aggregate")) continue;
        const char* name = json_string_value(json_object_get(e, "run_name"));
        if (!name) name = json_string_value(json_object_get(e, "name"));
        if (!name) {
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] has no \"run_name\" or \"name\"", path, i);
            break;
        }
        Bench* b = benchset_get(out, name, true);
        if (json_is_true(json_object_get(e, "error_occurred"))) {
            if (!b->error) {
                const char* msg = json_string_value(json_object_get(e, "error_message"));
                b->error = xstrdup(msg && *msg ? msg : "error_occurred without a message");
            }
            continue;
        }
        json_t* rtime = json_object_get(e, "real_time");
        const char* unit = json_string_value(json_object_get(e, "time_unit"));
        double scale;
        if (!json_is_number(rtime) || !isfinite(json_number_value(rtime)) || json_number_value(rtime) < 0) {
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] (%s): \"real_time\" must be a number >= 0", path, i,
                             name);
            break;
        }
        if (!unit || !unit_seconds(unit, &scale)) {
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] (%s): \"time_unit\" must be one of ns, us, ms, s (got %s)",
                             path, i, name, unit ? unit : "nothing");
            break;
        }
        bench_push(b, json_number_value(rtime) * scale);
    }
    json_decref(root);
    if (status_is_ok(st) && out->n == 0) st = status_make(STATUS_INVALID, "%s: no benchmarks", path);
    if (!status_is_ok(st)) benchset_free(out);
    return st;
}

// ---- conformance and memory (candidate only; optional files) ----

typedef struct {
    bool present;
    size_t cases;       // cases listed (or, for {"failures": N}, N)
    json_t* failures;   // array of {"id", "detail"}
} ConformResult;

static Status conform_case(const char* path, size_t i, json_t* c, ConformResult* r) {
    json_t* ok = json_object_get(c, "ok");
    const char* id = json_string_value(json_object_get(c, "id"));
    if (!json_is_object(c) || !json_is_boolean(ok) || !id)
        return status_make(STATUS_INVALID, "%s: case %zu needs \"id\" (string) and \"ok\" (true or false)", path, i);
    r->cases++;
    if (!json_is_true(ok)) {
        const char* detail = json_string_value(json_object_get(c, "detail"));
        json_array_append_new(r->failures, json_pack("{s:s, s:s}", "id", id, "detail", detail ? detail : ""));
    }
    return status_ok();
}

static Status load_conform(const char* dir, ConformResult* r) {
    r->present = false;
    r->cases = 0;
    r->failures = json_array();
    char path[4096];
    snprintf(path, sizeof path, "%s/conform.json", dir);
    if (!file_exists(path)) return status_ok();
    r->present = true;
    Status st = status_ok();
    json_t* root = load_json(path, &st);
    if (!root) return st;
    json_t* cases = json_is_array(root) ? root : json_object_get(root, "cases");
    json_t* nfail = json_is_object(root) ? json_object_get(root, "failures") : NULL;
    if (json_is_array(cases)) {
        size_t i;
        json_t* c;
        json_array_foreach(cases, i, c) {
            st = conform_case(path, i, c, r);
            if (!status_is_ok(st)) break;
        }
    } else if (json_is_integer(nfail) && json_integer_value(nfail) >= 0) {
        long long n = json_integer_value(nfail);
        r->cases = (size_t)n;
        if (n > 0) {
            char d[64];
            snprintf(d, sizeof d, "%lld failures reported", n);
            json_array_append_new(r->failures, json_pack("{s:s, s:s}", "id", "(conform.json)", "detail", d));
        }
    } else {
        st = status_make(STATUS_INVALID,
                         "%s: expected {\"cases\": [{\"id\": ..., \"ok\": true|false, \"detail\": ...}]} or {\"failures\": N}",
                         path);
    }
    json_decref(root);
    return st;
}

typedef struct {
    bool present;
    size_t rows;
    json_t* mismatches;  // array of {"row", "estimate_bytes", "measured_bytes"}
} MemoryResult;

static Status memory_report(const char* path, json_t* rep, MemoryResult* r) {
    json_t* opts = json_object_get(rep, "optimizers");
    if (!json_is_array(opts))
        return status_make(STATUS_INVALID, "%s: no \"optimizers\" array (expected `trainbench memory --json` output)",
                           path);
    const char* model = json_string_value(json_object_get(rep, "model"));
    size_t i;
    json_t* o;
    json_array_foreach(opts, i, o) {
        const char* name = json_string_value(json_object_get(o, "optimizer"));
        const char* variant = json_string_value(json_object_get(o, "variant"));
        json_t* est = json_object_get(o, "estimate_bytes");
        json_t* meas = json_object_get(o, "measured_bytes");
        if (!name || !json_is_integer(est) || !json_is_integer(meas))
            return status_make(STATUS_INVALID,
                               "%s: optimizers[%zu] needs \"optimizer\", \"estimate_bytes\" and \"measured_bytes\" (integers)",
                               path, i);
        r->rows++;
        if (json_integer_value(est) != json_integer_value(meas)) {
            char row[512];
            snprintf(row, sizeof row, "%s%s%s%s%s", model ? model : "", model ? " " : "", name, variant ? "/" : "",
                     variant ? variant : "");
            json_array_append_new(r->mismatches, json_pack("{s:s, s:I, s:I}", "row", row, "estimate_bytes",
                                                           json_integer_value(est), "measured_bytes",
                                                           json_integer_value(meas)));
        }
    }
    return status_ok();
}

static Status load_memory(const char* dir, MemoryResult* r) {
    r->present = false;
    r->rows = 0;
    r->mismatches = json_array();
    char path[4096];
    snprintf(path, sizeof path, "%s/memory.json", dir);
    if (!file_exists(path)) return status_ok();
    r->present = true;
    Status st = status_ok();
    json_t* root = load_json(path, &st);
    if (!root) return st;
    if (json_is_array(root)) {
        size_t i;
        json_t* rep;
        json_array_foreach(root, i, rep) {
            st = memory_report(path, rep, r);
            if (!status_is_ok(st)) break;
        }
    } else {
        st = memory_report(path, root, r);
    }
    json_decref(root);
    return st;
}

// ---- comparison ----

// The smallest two-sided p the Mann-Whitney test (as stats.c runs it: exact up to
// STATS_MWU_EXACT_MAX a side, else the normal approximation) can give with n and m
// repetitions: that of two samples with no overlap (exact: 2 / C(n+m, n)); 1 when a side has none.
static double gate_min_p(size_t n, size_t m) {
    if (n == 0 || m == 0) return 1.0;
    double* v = xmalloc((n + m) * sizeof(double));
    for (size_t i = 0; i < n + m; i++) v[i] = (double)i;
    double p = mann_whitney_u(v, n, v + n, m).p;
    free(v);
    return p;
}

// The smallest number of repetitions per side (equal sides) with which a difference can be
// significant at alpha: the least n with gate_min_p(n, n) <= alpha (exact: 2 / C(2n, n); 4 at
// 0.05, 5 at 0.01).
static size_t gate_reps_needed(double alpha) {
    // gate_min_p(n, n) falls as n grows: double up to a bound, then bisect
    size_t hi = 1;
    while (gate_min_p(hi, hi) > alpha && hi < (1u << 20)) hi *= 2;
    size_t lo = hi / 2;  // gate_min_p(lo, lo) > alpha (or lo == 0)
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (gate_min_p(mid, mid) > alpha) lo = mid;
        else hi = mid;
    }
    return hi;
}

static Row compare_one(const Bench* b, const Bench* c, double alpha, double min_effect) {
    Row r = {.name = b->name, .nb = b->n, .nc = c->n, .med_b = NAN, .med_c = NAN, .change = NAN};
    if (b->n) r.med_b = stats_median(b->t, b->n);
    if (c->n) r.med_c = stats_median(c->t, c->n);
    if (b->n && c->n)
        r.change = r.med_b > 0 ? r.med_c / r.med_b - 1.0 : (r.med_c > 0 ? INFINITY : 0.0);
    // A combination the backend reports as unsupported (benchmarks say "unsupported: <why>")
    // in both runs is not a failure; unsupported only in the candidate is (a lost capability).
    if (c->error && b->error && strncmp(c->error, "unsupported:", 12) == 0 &&
        strncmp(b->error, "unsupported:", 12) == 0) {
        r.verdict = V_UNSUPPORTED;
        r.error = c->error;
        return r;
    }
    if (c->error) {
        r.verdict = V_CAND_ERROR;
        r.error = c->error;
        return r;
    }
    if (b->error) {
        r.verdict = V_BASE_ERROR;
        r.error = b->error;
        return r;
    }
    if (gate_min_p(b->n, c->n) > alpha) {  // no outcome could be significant
        r.verdict = V_UNTESTED;
        return r;
    }
    r.mw = mann_whitney_u(c->t, c->n, b->t, b->n);
    r.tested = true;
    if (!(r.mw.p <= alpha)) r.verdict = V_SAME;
    else if (r.change > min_effect) r.verdict = V_REGRESSION;
    else if (r.change < -min_effect) r.verdict = V_IMPROVEMENT;
    else r.verdict = V_SMALL;
    return r;
}

static void fmt_time(char* buf, size_t n, double s) {
    if (isnan(s)) snprintf(buf, n, "-");
    else if (s >= 1.0) snprintf(buf, n, "%.4g s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.4g ms", s * 1e3);
    else if (s >= 1e-6) snprintf(buf, n, "%.4g us", s * 1e6);
    else snprintf(buf, n, "%.4g ns", s * 1e9);
}

static json_t* num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static int gate_run(int argc, char** argv);

const Command cmd_gate = {
    .name = "gate",
    .summary = "compare a candidate result folder with a baseline; exit 1 on a regression",
    .usage = "trainbench gate --baseline DIR --candidate DIR [--alpha 0.01] [--min-effect 0.05] [--allow-untested]\n"
             "    [--json]\n"
             "  A benchmark timed on both sides with too few repetitions for any p <= alpha (the exact\n"
             "  test's smallest p is 2/C(n1+n2, n1)) makes the gate exit 2, unless --allow-untested.",
    .run = gate_run,
};

static bool flag_double(int argc, char** argv, int* i, const char* name, double* out) {
    const char* v;
    if (!flag_value(&cmd_gate, argc, argv, i, name, &v)) return false;
    if (!parse_double(v, out) || !isfinite(*out)) {
        cli_usage_error(&cmd_gate, "%s must be a finite number (got '%s')", name, v);
        return false;
    }
    return true;
}

// Appends "; " + text to a growing reason string.
static void reason_add(char** s, size_t* len, const char* text) {
    size_t t = strlen(text);
    *s = xrealloc(*s, *len + t + 3);
    if (*len) {
        memcpy(*s + *len, "; ", 2);
        *len += 2;
    }
    memcpy(*s + *len, text, t + 1);
    *len += t;
}

static int gate_run(int argc, char** argv) {
    const char* base_dir = NULL;
    const char* cand_dir = NULL;
    double alpha = GATE_DEFAULT_ALPHA, min_effect = GATE_DEFAULT_MIN_EFFECT;
    bool as_json = false, allow_untested = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            as_json = true;
        } else if (!strcmp(argv[i], "--allow-untested")) {
            allow_untested = true;
        } else if (flag_matches(argv[i], "--baseline")) {
            if (!flag_value(&cmd_gate, argc, argv, &i, "--baseline", &base_dir)) return 2;
        } else if (flag_matches(argv[i], "--candidate")) {
            if (!flag_value(&cmd_gate, argc, argv, &i, "--candidate", &cand_dir)) return 2;
        } else if (flag_matches(argv[i], "--alpha")) {
            if (!flag_double(argc, argv, &i, "--alpha", &alpha)) return 2;
            if (!(alpha > 0 && alpha < 1))
                return cli_usage_error(&cmd_gate, "--alpha must be in (0, 1) (got %s)", argv[i]);
        } else if (flag_matches(argv[i], "--min-effect")) {
            if (!flag_double(argc, argv, &i, "--min-effect", &min_effect)) return 2;
            if (!(min_effect >= 0))
                return cli_usage_error(&cmd_gate, "--min-effect must be a number >= 0 (got %s)", argv[i]);
        } else {
            return cli_unknown_flag(&cmd_gate, argv[i]);
        }
    }
    if (!base_dir) return cli_usage_error(&cmd_gate, "missing --baseline DIR");
    if (!cand_dir) return cli_usage_error(&cmd_gate, "missing --candidate DIR");

    // ---- load everything; any unusable input exits 2 ----
    BenchSet base, cand;
    Status st = load_bench(base_dir, &base);
    if (!status_is_ok(st)) return user_error("gate: %s", st.msg);
    st = load_bench(cand_dir, &cand);
    if (!status_is_ok(st)) {
        benchset_free(&base);
        return user_error("gate: %s", st.msg);
    }
    ConformResult conf;
    MemoryResult mem;
    Status st_c = load_conform(cand_dir, &conf);
    Status st_m = load_memory(cand_dir, &mem);
    int rc = 0;
    char* only = NULL;
    size_t only_len = 0;
    if (!status_is_ok(st_c) || !status_is_ok(st_m)) {
        rc = user_error("gate: %s", !status_is_ok(st_c) ? st_c.msg : st_m.msg);
        goto done;
    }
    // same benchmark sets?
    {
        char* in_base = NULL;
        size_t lb = 0;
        for (size_t i = 0; i < base.n; i++)
            if (!benchset_get(&cand, base.v[i].name, false)) reason_add(&in_base, &lb, base.v[i].name);
        for (size_t i = 0; i < cand.n; i++)
            if (!benchset_get(&base, cand.v[i].name, false)) reason_add(&only, &only_len, cand.v[i].name);
        if (in_base || only) {
            rc = user_error("gate: different benchmark sets: only in baseline (%s): %s; only in candidate (%s): %s",
                            base_dir, in_base ? in_base : "none", cand_dir, only ? only : "none");
            free(in_base);
            goto done;
        }
    }

    // ---- compare ----
    Row* rows = xcalloc(base.n, sizeof(Row));
    size_t n_regr = 0, n_err = 0, n_tested = 0, n_untested = 0;
    size_t name_w = 9;
    for (size_t i = 0; i < base.n; i++) {
        rows[i] = compare_one(&base.v[i], benchset_get(&cand, base.v[i].name, false), alpha, min_effect);
        n_regr += rows[i].verdict == V_REGRESSION;
        n_err += rows[i].verdict == V_CAND_ERROR;
        n_tested += rows[i].tested;
        n_untested += rows[i].verdict == V_UNTESTED;
        if (strlen(rows[i].name) > name_w) name_w = strlen(rows[i].name);
    }
    size_t n_conf = json_array_size(conf.failures), n_mem = json_array_size(mem.mismatches);
    bool fail = n_regr || n_err || n_conf || n_mem;
    // untested benchmarks make the verdict unusable (exit 2) unless the user allows them
    bool untested_stop = n_untested && !allow_untested && !fail;
    size_t reps_needed = gate_reps_needed(alpha);

    // the why: one clause per kind of failure
    char* why = NULL;
    size_t why_len = 0;
    char buf[1024];
    for (size_t i = 0; i < base.n; i++) {
        if (rows[i].verdict == V_REGRESSION) {
            snprintf(buf, sizeof buf, "regression in %s (%+.1f%%, p=%.2g)", rows[i].name, 100 * rows[i].change,
                     rows[i].mw.p);
            reason_add(&why, &why_len, buf);
        } else if (rows[i].verdict == V_CAND_ERROR) {
            snprintf(buf, sizeof buf, "benchmark %s failed in the candidate: %s", rows[i].name, rows[i].error);
            reason_add(&why, &why_len, buf);
        }
    }
    size_t k;
    json_t* f;
    json_array_foreach(conf.failures, k, f) {
        const char* d = json_string_value(json_object_get(f, "detail"));
        snprintf(buf, sizeof buf, "conformance case %s failed%s%s", json_string_value(json_object_get(f, "id")),
                 d && *d ? ": " : "", d ? d : "");
        reason_add(&why, &why_len, buf);
    }
    json_array_foreach(mem.mismatches, k, f) {
        snprintf(buf, sizeof buf, "memory %s: estimate %lld != measured %lld bytes",
                 json_string_value(json_object_get(f, "row")),
                 json_integer_value(json_object_get(f, "estimate_bytes")),
                 json_integer_value(json_object_get(f, "measured_bytes")));
        reason_add(&why, &why_len, buf);
    }
    if (n_untested) {
        snprintf(buf, sizeof buf,
                 "%zu benchmark%s timed on both sides could not be tested: alpha %g needs at least %zu repetitions "
                 "per side (the smallest n whose smallest possible p, 2/C(2n, n) for the exact test, is <= alpha)%s",
                 n_untested, n_untested == 1 ? "" : "s", alpha, reps_needed,
                 allow_untested ? "; allowed by --allow-untested" : "; rerun with more repetitions or pass --allow-untested");
        reason_add(&why, &why_len, buf);
    }
    if (!fail) {
        snprintf(buf, sizeof buf, "%zu benchmarks compared (%zu tested), no regression at p <= %g beyond %g%%", base.n,
                 n_tested, alpha, 100 * min_effect);
        reason_add(&why, &why_len, buf);
        snprintf(buf, sizeof buf, conf.present ? "%zu conformance cases, none failed" : "no conform.json", conf.cases);
        reason_add(&why, &why_len, buf);
        snprintf(buf, sizeof buf, mem.present ? "%zu memory rows, estimate == measured" : "no memory.json", mem.rows);
        reason_add(&why, &why_len, buf);
    }

    if (as_json) {
        json_t* root = json_object();
        json_object_set_new(root, "baseline", json_string(base_dir));
        json_object_set_new(root, "candidate", json_string(cand_dir));
        json_object_set_new(root, "alpha", json_real(alpha));
        json_object_set_new(root, "min_effect", json_real(min_effect));
        json_t* arr = json_array();
        for (size_t i = 0; i < base.n; i++) {
            const Row* r = &rows[i];
            json_t* o = json_object();
            json_object_set_new(o, "name", json_string(r->name));
            json_object_set_new(o, "baseline_repetitions", json_integer((json_int_t)r->nb));
            json_object_set_new(o, "candidate_repetitions", json_integer((json_int_t)r->nc));
            json_object_set_new(o, "baseline_median_s", num_or_null(r->med_b));
            json_object_set_new(o, "candidate_median_s", num_or_null(r->med_c));
            json_object_set_new(o, "change", num_or_null(r->change));
            json_object_set_new(o, "p", r->tested ? json_real(r->mw.p) : json_null());
            json_object_set_new(o, "U", r->tested ? json_real(r->mw.U) : json_null());
            json_object_set_new(o, "method", r->tested ? json_string(r->mw.exact ? "exact" : "asymptotic") : json_null());
            json_object_set_new(o, "verdict", json_string(VERDICT_NAMES[r->verdict]));
            json_object_set_new(o, "fails_gate", json_boolean(r->verdict == V_REGRESSION || r->verdict == V_CAND_ERROR));
            json_object_set_new(o, "error", r->error ? json_string(r->error) : json_null());
            json_array_append_new(arr, o);
        }
        json_object_set_new(root, "benchmarks", arr);
        json_t* c = json_object();
        json_object_set_new(c, "present", json_boolean(conf.present));
        json_object_set_new(c, "cases", json_integer((json_int_t)conf.cases));
        json_object_set_new(c, "failures", json_incref(conf.failures));
        json_object_set_new(root, "conformance", c);
        json_t* m = json_object();
        json_object_set_new(m, "present", json_boolean(mem.present));
        json_object_set_new(m, "rows", json_integer((json_int_t)mem.rows));
        json_object_set_new(m, "mismatches", json_incref(mem.mismatches));
        json_object_set_new(root, "memory", m);
        json_object_set_new(root, "untested", json_integer((json_int_t)n_untested));
        json_object_set_new(root, "repetitions_needed", json_integer((json_int_t)reps_needed));
        json_object_set_new(root, "result", json_string(fail ? "FAIL" : untested_stop ? "UNTESTED" : "PASS"));
        json_object_set_new(root, "reason", json_string(why));
        char* s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(root);
    } else {
        printf("baseline:  %s\ncandidate: %s\nMann-Whitney U two-sided, alpha %g, min effect %g%% (medians of real time)\n\n",
               base_dir, cand_dir, alpha, 100 * min_effect);
        printf("%-*s %5s %12s %12s %9s %9s  %s\n", (int)name_w, "benchmark", "reps", "baseline", "candidate",
               "change", "p", "verdict");
        for (size_t i = 0; i < base.n; i++) {
            const Row* r = &rows[i];
            char tb[32], tc[32], ch[32], p[32], reps[32];
            fmt_time(tb, sizeof tb, r->med_b);
            fmt_time(tc, sizeof tc, r->med_c);
            if (isfinite(r->change)) snprintf(ch, sizeof ch, "%+.1f%%", 100 * r->change);
            else snprintf(ch, sizeof ch, "-");
            if (r->tested) snprintf(p, sizeof p, "%.2g", r->mw.p);
            else snprintf(p, sizeof p, "-");
            snprintf(reps, sizeof reps, "%zu/%zu", r->nb, r->nc);
            printf("%-*s %5s %12s %12s %9s %9s  %s%s%s\n", (int)name_w, r->name, reps, tb, tc, ch, p,
                   VERDICT_NAMES[r->verdict], r->error ? ": " : "", r->error ? r->error : "");
        }
        if (conf.present && n_conf) printf("\nconformance failures (%zu of %zu cases)\n", n_conf, conf.cases);
        json_array_foreach(conf.failures, k, f)
            printf("  %s  %s\n", json_string_value(json_object_get(f, "id")),
                   json_string_value(json_object_get(f, "detail")));
        if (n_mem) printf("\nmemory rows where estimate != measured\n");
        json_array_foreach(mem.mismatches, k, f)
            printf("  %-32s estimate %lld  measured %lld bytes\n", json_string_value(json_object_get(f, "row")),
                   json_integer_value(json_object_get(f, "estimate_bytes")),
                   json_integer_value(json_object_get(f, "measured_bytes")));
        printf("\n%s: %s\n", fail ? "FAIL" : untested_stop ? "UNTESTED" : "PASS", why);
    }
    free(why);
    free(rows);
    rc = fail ? 1 : untested_stop ? 2 : 0;
done:
    free(only);
    json_decref(conf.failures);
    json_decref(mem.mismatches);
    benchset_free(&base);
    benchset_free(&cand);
    return rc;
}

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
#include "core/junit.h"
#include "results/bench_compare.h"
#include "results/history.h"
#include "results/results.h"


static bool file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// ---- conformance and memory (candidate only; optional files), read by results.h ----

typedef struct {
    bool present;
    size_t cases;       // cases listed (or, for version 0 {"failures": N}, N)
    json_t* failures;   // array of {"id", "detail"}
} ConformResult;

static Status load_conform(const char* dir, ConformResult* r) {
    r->present = false;
    r->cases = 0;
    r->failures = json_array();
    char path[4096];
    snprintf(path, sizeof path, "%s/conform.json", dir);
    if (!file_exists(path)) return status_ok();
    r->present = true;
    ConformFile f;
    Status st = conform_file_read(path, &f);
    if (!status_is_ok(st)) return st;
    if (f.legacy_count_only) {
        r->cases = f.legacy_failures;
        if (f.legacy_failures > 0) {
            char d[64];
            snprintf(d, sizeof d, "%zu failures reported", f.legacy_failures);
            json_array_append_new(r->failures, json_pack("{s:s, s:s}", "id", "(conform.json)", "detail", d));
        }
    }
    for (size_t i = 0; i < f.n; i++) {
        r->cases++;
        if (!f.cases[i].ok)
            json_array_append_new(r->failures, json_pack("{s:s, s:s}", "id", f.cases[i].id, "detail", f.cases[i].detail));
    }
    conform_file_free(&f);
    return status_ok();
}

typedef struct {
    bool present;
    size_t rows;
    json_t* mismatches;  // array of {"row", "estimate_bytes", "measured_bytes"}
} MemoryResult;

static Status load_memory(const char* dir, MemoryResult* r) {
    r->present = false;
    r->rows = 0;
    r->mismatches = json_array();
    char path[4096];
    snprintf(path, sizeof path, "%s/memory.json", dir);
    if (!file_exists(path)) return status_ok();
    r->present = true;
    MemoryFile f;
    Status st = memory_file_read(path, &f);
    if (!status_is_ok(st)) return st;
    for (size_t k = 0; k < f.n; k++)
        for (size_t i = 0; i < f.models[k].n; i++) {
            const MemoryModel* m = &f.models[k];
            const MemoryRow* o = &m->rows[i];
            r->rows++;
            if (o->estimate_bytes != o->measured_bytes) {
                char row[512];
                snprintf(row, sizeof row, "%s%s%s%s%s", m->model, *m->model ? " " : "", o->optimizer,
                         *o->variant ? "/" : "", o->variant);
                json_array_append_new(r->mismatches, json_pack("{s:s, s:I, s:I}", "row", row, "estimate_bytes",
                                                               (json_int_t)o->estimate_bytes, "measured_bytes",
                                                               (json_int_t)o->measured_bytes));
            }
        }
    memory_file_free(&f);
    return status_ok();
}

static Status load_bench(const char* dir, BenchFile* out) {
    memset(out, 0, sizeof *out);
    if (!path_is_dir(dir))
        return status_make(STATUS_IO, "result folder %s %s", dir, path_not_dir_reason(dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/bench.json", dir);
    Status st = bench_file_read(path, RESULT_BENCH, out);
    if (status_is_ok(st) && out->n == 0) {
        bench_file_free(out);
        st = status_make(STATUS_INVALID, "%s: no benchmarks", path);
    }
    return st;
}

static void fmt_time(char* buf, size_t n, double s) {
    if (isnan(s)) snprintf(buf, n, "-");
    else if (s >= 1.0) snprintf(buf, n, "%.4g s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.4g ms", s * 1e3);
    else if (s >= 1e-6) snprintf(buf, n, "%.4g us", s * 1e6);
    else snprintf(buf, n, "%.4g ns", s * 1e9);
}

static json_t* num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

// One markdown table of the rows with one of the verdicts (NULL-terminated list); "" if none.
static void md_rows(FILE* f, const char* title, const BenchComparison* rows, size_t n, const Verdict* which) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        for (const Verdict* w = which; *w != V_COUNT; w++) count += rows[i].verdict == *w;
    if (!count) return;
    fprintf(f, "\n### %s (%zu)\n\n| benchmark | baseline | candidate | change | p | verdict |\n|---|---:|---:|---:|---:|---|\n",
            title, count);
    for (size_t i = 0; i < n; i++) {
        bool in = false;
        for (const Verdict* w = which; *w != V_COUNT; w++) in |= rows[i].verdict == *w;
        if (!in) continue;
        const BenchComparison* r = &rows[i];
        char tb[32], tc[32], ch[32] = "-", p[32] = "-";
        fmt_time(tb, sizeof tb, r->med_b);
        fmt_time(tc, sizeof tc, r->med_c);
        if (isfinite(r->change)) snprintf(ch, sizeof ch, "%+.1f%%", 100 * r->change);
        if (r->tested) snprintf(p, sizeof p, "%.2g", r->mw.p);
        fprintf(f, "| `%s` | %s | %s | %s | %s | %s%s%s |\n", r->name, tb, tc, ch, p, VERDICT_NAMES[r->verdict],
                r->error ? ": " : "", r->error ? r->error : "");
    }
}

static void reason_add(char** s, size_t* len, const char* text);

// The instruction-count gate: icount/ entries with an "instructions" counter on both sides;
// change = candidate / baseline - 1 of the instructions per iteration; above +threshold a
// REGRESSION (exit 1), below -threshold an IMPROVEMENT. No statistics: the counts have no noise
// (valgrind runs the same instructions every time for one binary and machine class).
static int gate_instructions(const BenchFile* base, const BenchFile* cand, const char* base_dir, const char* cand_dir,
                             double threshold, const char* junit_path, const char* md_path) {
    size_t n = 0, n_regr = 0, n_impr = 0, n_missing = 0;
    JUnit* ju = junit_path ? junit_new("trainbench gate --metric instructions") : NULL;
    char* md = NULL;
    size_t md_len = 0;
    FILE* mf = md_path ? open_memstream(&md, &md_len) : NULL;
    char* why = NULL;
    size_t why_len = 0;
    printf("baseline:  %s\ncandidate: %s\ninstructions per iteration (valgrind callgrind), threshold %g%%\n\n", base_dir,
           cand_dir, 100 * threshold);
    printf("%-50s %16s %16s %9s  %s\n", "benchmark", "baseline", "candidate", "change", "verdict");
    if (mf) fprintf(mf, "| benchmark | baseline | candidate | change | verdict |\n|---|---:|---:|---:|---|\n");
    for (size_t i = 0; i < cand->n; i++) {
        const BenchEntry* c = &cand->v[i];
        if (strncmp(c->name, "icount/", 7)) continue;
        const BenchEntry* b = bench_file_find(base, c->name);
        double ic = bench_entry_median(c, "instructions");
        double ib = b ? bench_entry_median(b, "instructions") : NAN;
        char buf[600];
        if (isnan(ic) || isnan(ib)) {
            n_missing++;
            snprintf(buf, sizeof buf, "%s: no instruction count in the %s", c->name, isnan(ib) ? "baseline" : "candidate");
            reason_add(&why, &why_len, buf);
            continue;
        }
        n++;
        double change = ib > 0 ? ic / ib - 1 : 0;
        const char* v = change > threshold ? "REGRESSION" : change < -threshold ? "IMPROVEMENT" : change == 0 ? "identical" : "within threshold";
        if (change > threshold) {
            n_regr++;
            snprintf(buf, sizeof buf, "regression in %s (%+.2f%% instructions: %.0f -> %.0f)", c->name, 100 * change, ib, ic);
            reason_add(&why, &why_len, buf);
        }
        n_impr += change < -threshold;
        printf("%-50s %16.0f %16.0f %+8.2f%%  %s\n", c->name, ib, ic, 100 * change, v);
        if (mf) fprintf(mf, "| `%s` | %.0f | %.0f | %+.2f%% | %s |\n", c->name, ib, ic, 100 * change, v);
        if (ju)
            junit_case(ju, "gate.instructions", c->name, 0, change > threshold ? JUNIT_FAILURE : JUNIT_PASS,
                       change > threshold ? buf : NULL, NULL);
    }
    for (size_t i = 0; i < base->n; i++)
        if (!strncmp(base->v[i].name, "icount/", 7) && !bench_file_find(cand, base->v[i].name)) {
            char buf[600];
            n_missing++;
            snprintf(buf, sizeof buf, "%s: not in the candidate", base->v[i].name);
            reason_add(&why, &why_len, buf);
        }
    int rc;
    char tail[256];
    if (n == 0 || n_missing) {
        rc = 2;
        snprintf(tail, sizeof tail, "%s", n == 0 ? "no icount/ entries with instructions on both sides (run `trainbench icount`)" : "");
        if (n == 0) reason_add(&why, &why_len, tail);
    } else {
        rc = n_regr ? 1 : 0;
        if (!n_regr) {
            snprintf(tail, sizeof tail, "%zu benchmarks, none above +%g%% instructions (%zu improved)", n, 100 * threshold, n_impr);
            reason_add(&why, &why_len, tail);
        }
    }
    const char* result = rc == 1 ? "FAIL" : rc == 2 ? "UNUSABLE" : "PASS";
    printf("\n%s: %s\n", result, why);
    if (ju) {
        Status js = junit_write(ju, junit_path);
        junit_free(ju);
        if (!status_is_ok(js)) rc = user_error("gate: --junit: %s", js.msg);
    }
    if (mf) {
        fclose(mf);
        char* head = NULL;
        size_t hl = 0;
        FILE* hf = open_memstream(&head, &hl);
        fprintf(hf, "## trainbench gate (instructions): %s\n\n> %s\n\n%s", result, why, md);
        fclose(hf);
        Status ws = write_file_atomic(md_path, head, hl);
        free(head);
        free(md);
        if (!status_is_ok(ws)) rc = user_error("gate: --markdown: %s", ws.msg);
    }
    free(why);
    return rc;
}

static int gate_run(int argc, char** argv);

const Command cmd_gate = {
    .name = "gate",
    .summary = "compare a candidate result folder with a baseline; exit 1 on a regression",
    .usage = "trainbench gate --baseline DIR|history:N --candidate DIR [--db FILE] [--alpha 0.01] [--min-effect 0.05]\n"
             "    [--allow-untested]\n"
             "  --baseline history:N  every repetition of the last N runs of the candidate's machine class in the\n"
             "                        history database (--db, default " HISTORY_DEFAULT_DB "), the candidate excluded\n"
             "    [--normalize roofline|none] [--metric time|instructions] [--threshold 0.01] [--json] [--junit FILE]\n"
             "    [--markdown FILE]\n"
             "  --metric instructions  compare the icount/ entries' instructions per iteration (`trainbench icount`,\n"
             "                        valgrind): no noise, so a plain threshold: REGRESSION above +threshold\n"
             "                        (default 1%), exit 1; time (default) ignores icount/ entries\n"
             "  --junit FILE     also write JUnit XML: one test case per benchmark (regression = failure,\n"
             "                   untested or environment-changed = skipped), conformance and memory cases\n"
             "  --markdown FILE  also write a summary for a pull request: regressions first, then\n"
             "                   improvements, then the untested\n"
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
    bool as_json = false, allow_untested = false, normalize = false;
    const char* junit_path = NULL;
    const char* md_path = NULL;
    const char* db_path = HISTORY_DEFAULT_DB;
    bool instructions = false;
    double threshold = 0.01;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            as_json = true;
        } else if (!strcmp(argv[i], "--allow-untested")) {
            allow_untested = true;
        } else if (flag_matches(argv[i], "--metric")) {
            const char* v;
            if (!flag_value(&cmd_gate, argc, argv, &i, "--metric", &v)) return 2;
            if (strcmp(v, "time") && strcmp(v, "instructions"))
                return cli_usage_error(&cmd_gate, "--metric must be time or instructions (got '%s')", v);
            instructions = !strcmp(v, "instructions");
        } else if (flag_matches(argv[i], "--threshold")) {
            if (!flag_double(argc, argv, &i, "--threshold", &threshold)) return 2;
            if (!(threshold >= 0)) return cli_usage_error(&cmd_gate, "--threshold must be a number >= 0 (got %s)", argv[i]);
        } else if (flag_matches(argv[i], "--db")) {
            if (!flag_value(&cmd_gate, argc, argv, &i, "--db", &db_path)) return 2;
        } else if (flag_matches(argv[i], "--junit")) {
            if (!flag_value(&cmd_gate, argc, argv, &i, "--junit", &junit_path)) return 2;
        } else if (flag_matches(argv[i], "--markdown")) {
            if (!flag_value(&cmd_gate, argc, argv, &i, "--markdown", &md_path)) return 2;
        } else if (flag_matches(argv[i], "--normalize")) {
            const char* v;
            if (!flag_value(&cmd_gate, argc, argv, &i, "--normalize", &v)) return 2;
            if (strcmp(v, "roofline") && strcmp(v, "none"))
                return cli_usage_error(&cmd_gate, "--normalize must be roofline or none (got '%s')", v);
            normalize = !strcmp(v, "roofline");
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
    if (instructions && (as_json || normalize))
        return cli_usage_error(&cmd_gate, "--metric instructions takes neither --json nor --normalize (allowed: --threshold, "
                                          "--junit, --markdown)");
    if (!cand_dir) return cli_usage_error(&cmd_gate, "missing --candidate DIR");
    // a report path that is one of the result files read would replace it
    const char* const outs[2] = {junit_path, md_path};
    const char* const dirs[2] = {base_dir, cand_dir};
    for (int o = 0; o < 2; o++)
        for (int d = 0; d < 2 && outs[o]; d++)
            for (int k = 0; k < RESULT_KIND_COUNT; k++) {
                char in[4200];
                snprintf(in, sizeof in, "%s/%s", dirs[d], result_file_name((ResultKind)k));
                if (same_existing_file(outs[o], in))
                    return cli_usage_error(&cmd_gate, "%s %s is %s, an input of this gate: give a new path for the "
                                           "report", o == 0 ? "--junit" : "--markdown", outs[o], in);
            }

    // ---- load everything; any unusable input exits 2 ----
    BenchFile base, cand;
    Status st = load_bench(cand_dir, &cand);
    if (!status_is_ok(st)) return user_error("gate: %s", st.msg);
    char base_label[4400];
    snprintf(base_label, sizeof base_label, "%s", base_dir);
    if (!strncmp(base_dir, "history:", 8)) {  // the last N runs of the candidate's machine class
        long n_runs;
        if (!parse_long(base_dir + 8, 1, 100000, &n_runs)) {
            bench_file_free(&cand);
            return cli_usage_error(&cmd_gate, "--baseline history:N needs N in [1, 100000] (got '%s')", base_dir);
        }
        char mpath[4200];
        snprintf(mpath, sizeof mpath, "%s/machine.json", cand_dir);
        MachineFile mf;
        st = machine_file_read(mpath, &mf);
        int used = 0;
        if (status_is_ok(st)) {
            st = history_baseline(db_path, mf.machine_class, (int)n_runs, cand_dir, &base, &used);
            snprintf(base_label, sizeof base_label, "%s: last %d run%s of machine class %s", db_path, used,
                     used == 1 ? "" : "s", mf.machine_class);
            machine_file_free(&mf);
        }
    } else {
        st = load_bench(base_dir, &base);
    }
    if (!status_is_ok(st)) {
        bench_file_free(&cand);
        return user_error("gate: %s", st.msg);
    }
    base_dir = base_label;
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
    if (instructions) {
        rc = gate_instructions(&base, &cand, base_dir, cand_dir, threshold, junit_path, md_path);
        goto done;
    }
    // the wall-time gate: icount/ entries (timed under valgrind) are not its business
    bench_file_drop_prefix(&base, "icount/");
    bench_file_drop_prefix(&cand, "icount/");
    if (cand.n == 0 || base.n == 0) {
        rc = user_error("gate: no wall-time benchmarks in %s", cand.n == 0 ? cand_dir : base_dir);
        goto done;
    }
    // same benchmark sets?
    {
        char* in_base = NULL;
        size_t lb = 0;
        for (size_t i = 0; i < base.n; i++)
            if (!bench_file_find(&cand, base.v[i].name)) reason_add(&in_base, &lb, base.v[i].name);
        for (size_t i = 0; i < cand.n; i++)
            if (!bench_file_find(&base, cand.v[i].name)) reason_add(&only, &only_len, cand.v[i].name);
        if (in_base || only) {
            rc = user_error("gate: different benchmark sets: only in baseline (%s): %s; only in candidate (%s): %s",
                            base_dir, in_base ? in_base : "none", cand_dir, only ? only : "none");
            free(in_base);
            goto done;
        }
    }

    // ---- the environment first: the roofline probes (best repetitions) ----
    RooflineCheck probes[8];
    size_t n_probes = 0, n_env = 0;
    for (size_t i = 0; i < base.n && n_probes < ARRAY_LEN(probes); i++) {
        if (!bench_is_roofline(base.v[i].name)) continue;
        probes[n_probes] = bench_roofline_check(&base.v[i], bench_file_find(&cand, base.v[i].name), min_effect);
        n_env += probes[n_probes].changed;
        n_probes++;
    }
    bool env_changed = n_env > 0;

    // ---- compare ----
    BenchComparison* rows = xcalloc(base.n, sizeof(BenchComparison));
    size_t n_regr = 0, n_err = 0, n_tested = 0, n_untested = 0, n_normalized = 0;
    size_t name_w = 9;
    for (size_t i = 0; i < base.n; i++) {
        const BenchEntry* b = &base.v[i];
        const BenchEntry* c = bench_file_find(&cand, b->name);
        double sb = 1.0, sc = 1.0;
        char probe[256];
        if (normalize && bench_roofline_of(b, probe, sizeof probe)) {
            const BenchEntry* pb = bench_file_find(&base, probe);
            const BenchEntry* pc = bench_file_find(&cand, probe);
            double bb = pb ? bench_entry_best(pb) : NAN, bc = pc ? bench_entry_best(pc) : NAN;
            if (bb > 0 && bc > 0) {  // time per iteration / probe's best time: the machine's speed divided out
                sb = 1.0 / bb;
                sc = 1.0 / bc;
                n_normalized++;
            }
        }
        rows[i] = bench_compare_scaled(b, c, alpha, min_effect, sb, sc);
        if (sb != 1.0) {  // the table shows real times
            rows[i].med_b /= sb;
            rows[i].med_c /= sc;
        }
        // a changed environment makes speed verdicts meaningless: shown, not gated; the probes
        // measure the machine, never the code
        if (((env_changed && !normalize) || bench_is_roofline(b->name)) &&
            (rows[i].verdict == V_REGRESSION || rows[i].verdict == V_IMPROVEMENT))
            rows[i].verdict = rows[i].verdict == V_REGRESSION ? V_ENV_SLOWER : V_ENV_FASTER;
        n_regr += rows[i].verdict == V_REGRESSION;
        n_err += rows[i].verdict == V_CAND_ERROR;
        n_tested += rows[i].tested;
        n_untested += rows[i].verdict == V_UNTESTED;
        if (strlen(rows[i].name) > name_w) name_w = strlen(rows[i].name);
    }
    size_t n_conf = json_array_size(conf.failures), n_mem = json_array_size(mem.mismatches);
    bool fail = n_regr || n_err || n_conf || n_mem;
    // untested benchmarks make the verdict unusable (exit 2) unless the user allows them; so
    // does a changed environment without --normalize roofline
    bool env_stop = env_changed && !normalize && !fail;
    bool untested_stop = (n_untested && !allow_untested && !fail) || env_stop;
    size_t reps_needed = bench_reps_needed(alpha);

    // the why: one clause per kind of failure
    char* why = NULL;
    size_t why_len = 0;
    char buf[1024];
    for (size_t i = 0; i < n_probes; i++)
        if (probes[i].changed) {
            snprintf(buf, sizeof buf,
                     "ENVIRONMENT CHANGED: %s best repetition %+.1f%% in time (beyond both runs' spread): the machine, "
                     "not the code, differs%s",
                     probes[i].name, 100 * probes[i].change,
                     normalize ? "; times normalized by their roofline probe"
                               : "; speed verdicts are not gated: rerun both on one machine, or pass --normalize "
                                 "roofline for a roofline-normalized comparison");
            reason_add(&why, &why_len, buf);
        }
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
            const BenchComparison* r = &rows[i];
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
        json_t* env = json_object();
        json_object_set_new(env, "changed", json_boolean(env_changed));
        json_object_set_new(env, "normalized", json_boolean(normalize));
        json_object_set_new(env, "normalized_benchmarks", json_integer((json_int_t)n_normalized));
        json_t* pr = json_array();
        for (size_t i = 0; i < n_probes; i++)
            json_array_append_new(pr, json_pack("{s:s, s:o, s:o, s:o, s:b}", "name", probes[i].name, "baseline_best_s",
                                                num_or_null(probes[i].best_b), "candidate_best_s",
                                                num_or_null(probes[i].best_c), "change", num_or_null(probes[i].change),
                                                "changed", probes[i].changed));
        json_object_set_new(env, "probes", pr);
        json_object_set_new(root, "environment", env);
        json_object_set_new(root, "result", json_string(fail ? "FAIL" : env_stop ? "ENVIRONMENT CHANGED" : untested_stop ? "UNTESTED" : "PASS"));
        json_object_set_new(root, "reason", json_string(why));
        char* s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(root);
    } else {
        printf("baseline:  %s\ncandidate: %s\nMann-Whitney U two-sided, alpha %g, min effect %g%% (medians of %s%s)\n\n",
               base_dir, cand_dir, alpha, 100 * min_effect, BENCH_METRIC_NAME,
               normalize ? ", each divided by its roofline probe's best repetition" : "");
        if (n_probes) {
            printf("roofline probes first (best repetition of each run; changed = beyond both runs' spread and %g%%)\n",
                   100 * min_effect);
            for (size_t i = 0; i < n_probes; i++) {
                char tb[32], tc[32];
                fmt_time(tb, sizeof tb, probes[i].best_b);
                fmt_time(tc, sizeof tc, probes[i].best_c);
                printf("  %-24s %12s %12s %+8.1f%%  %s\n", probes[i].name, tb, tc, 100 * probes[i].change,
                       probes[i].changed ? "ENVIRONMENT CHANGED" : "same");
            }
            printf("\n");
        }
        printf("%-*s %5s %12s %12s %9s %9s  %s\n", (int)name_w, "benchmark", "reps", "baseline", "candidate",
               "change", "p", "verdict");
        for (size_t i = 0; i < base.n; i++) {
            const BenchComparison* r = &rows[i];
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
        printf("\n%s: %s\n", fail ? "FAIL" : env_stop ? "ENVIRONMENT CHANGED" : untested_stop ? "UNTESTED" : "PASS", why);
    }
    rc = fail ? 1 : untested_stop ? 2 : 0;
    const char* result = fail ? "FAIL" : env_stop ? "ENVIRONMENT CHANGED" : untested_stop ? "UNTESTED" : "PASS";
    if (junit_path) {
        JUnit* ju = junit_new("trainbench gate");
        for (size_t i = 0; i < base.n; i++) {
            const BenchComparison* r = &rows[i];
            char msg[1200];
            snprintf(msg, sizeof msg, "%s: change %+.1f%%%s%.2g%s%s", VERDICT_NAMES[r->verdict], 100 * r->change,
                     r->tested ? ", p=" : "", r->tested ? r->mw.p : 0.0, r->error ? "; " : "", r->error ? r->error : "");
            if (!r->tested) snprintf(msg, sizeof msg, "%s%s%s", VERDICT_NAMES[r->verdict], r->error ? ": " : "",
                                     r->error ? r->error : "");
            JUnitOutcome o = r->verdict == V_REGRESSION || r->verdict == V_CAND_ERROR ? JUNIT_FAILURE
                             : r->verdict == V_UNTESTED || r->verdict == V_ENV_SLOWER || r->verdict == V_ENV_FASTER ||
                                     r->verdict == V_UNSUPPORTED || r->verdict == V_BASE_ERROR
                                 ? JUNIT_SKIPPED
                                 : JUNIT_PASS;
            junit_case(ju, "gate.benchmarks", r->name, 0, o, o == JUNIT_PASS ? NULL : msg, NULL);
        }
        json_array_foreach(conf.failures, k, f)
            junit_case(ju, "gate.conformance", json_string_value(json_object_get(f, "id")), 0, JUNIT_FAILURE,
                       "conformance case failed", json_string_value(json_object_get(f, "detail")));
        json_array_foreach(mem.mismatches, k, f)
            junit_case(ju, "gate.memory", json_string_value(json_object_get(f, "row")), 0, JUNIT_FAILURE,
                       "estimate != measured", NULL);
        Status js = junit_write(ju, junit_path);
        junit_free(ju);
        if (!status_is_ok(js)) rc = user_error("gate: --junit: %s", js.msg);
    }
    if (md_path) {
        char* text = NULL;
        size_t len = 0;
        FILE* mf = open_memstream(&text, &len);
        CHECK(mf != NULL);
        fprintf(mf, "## trainbench gate: %s\n\nBaseline `%s`, candidate `%s`: Mann-Whitney U two-sided over the "
                    "repetitions' %s%s, alpha %g, min effect %g%%.\n\n> %s\n",
                result, base_dir, cand_dir, BENCH_METRIC_NAME,
                normalize ? " divided by the roofline probe's best repetition" : "", alpha, 100 * min_effect, why);
        if (n_probes) {
            fprintf(mf, "\n### Environment: roofline probes (best repetition)\n\n| probe | baseline | candidate | change | |\n"
                        "|---|---:|---:|---:|---|\n");
            for (size_t i = 0; i < n_probes; i++) {
                char tb[32], tc[32];
                fmt_time(tb, sizeof tb, probes[i].best_b);
                fmt_time(tc, sizeof tc, probes[i].best_c);
                fprintf(mf, "| `%s` | %s | %s | %+.1f%% | %s |\n", probes[i].name, tb, tc, 100 * probes[i].change,
                        probes[i].changed ? "**environment changed**" : "same");
            }
        }
        static const Verdict REGR[] = {V_REGRESSION, V_CAND_ERROR, V_COUNT}, IMPR[] = {V_IMPROVEMENT, V_COUNT},
                             UNT[] = {V_UNTESTED, V_ENV_SLOWER, V_ENV_FASTER, V_COUNT};
        md_rows(mf, "Regressions and failures", rows, base.n, REGR);
        md_rows(mf, "Improvements", rows, base.n, IMPR);
        md_rows(mf, "Untested", rows, base.n, UNT);
        if (n_conf || n_mem) fprintf(mf, "\n### Conformance and memory\n\n");
        json_array_foreach(conf.failures, k, f)
            fprintf(mf, "- conformance case `%s` failed: %s\n", json_string_value(json_object_get(f, "id")),
                    json_string_value(json_object_get(f, "detail")));
        json_array_foreach(mem.mismatches, k, f)
            fprintf(mf, "- memory `%s`: estimate %lld != measured %lld bytes\n",
                    json_string_value(json_object_get(f, "row")),
                    json_integer_value(json_object_get(f, "estimate_bytes")),
                    json_integer_value(json_object_get(f, "measured_bytes")));
        static const Verdict ALL[] = {V_SAME, V_SMALL, V_REGRESSION, V_IMPROVEMENT, V_UNTESTED, V_CAND_ERROR,
                                      V_BASE_ERROR, V_UNSUPPORTED, V_ENV_SLOWER, V_ENV_FASTER, V_COUNT};
        fprintf(mf, "\n<details><summary>All %zu benchmarks</summary>\n", base.n);
        md_rows(mf, "All benchmarks", rows, base.n, ALL);
        fprintf(mf, "\n</details>\n");
        CHECK(fclose(mf) == 0);
        Status ws = write_file_atomic(md_path, text, len);
        free(text);
        if (!status_is_ok(ws)) rc = user_error("gate: --markdown: %s", ws.msg);
    }
    free(why);
    free(rows);
done:
    free(only);
    json_decref(conf.failures);
    json_decref(mem.mismatches);
    bench_file_free(&base);
    bench_file_free(&cand);
    return rc;
}

// check.c — `trainbench check GOLDEN CANDIDATE`: compares another implementation's output
// (a safetensors file holding tensors under the golden's names) with a golden, tensor by
// tensor, and exits 0 (all within tolerance), 1 (some outside) or 2 (unusable input).
//
// What is compared: every golden tensor named "expect.*" (all golden tensors when it has none,
// e.g. two plain files), narrowed by --tensors REGEX; each must be in the candidate with the
// same dtype and shape (else exit 2 naming it), unless --only-present skips the absent ones.
// Candidate tensors the golden lacks are named in a warning and ignored.
//
// Tolerance, per tensor (compare.h's rule |x - ref| <= atol + rtol*|ref| + move_k*moved):
//   - optimizer goldens (metadata "optimizer" names a registered optimizer): the tolerance
//     `trainbench conform` / tests/test_optim.c use, conform_tolerance(optimizer, key, step) for
//     expect.step{k}.param ("param") and expect.step{k}.state.<key>. Its movement term
//     (`moved` = the element's cumulative |p_t - p_(t-1)|) needs every step, while the golden
//     only has the checked ones, so it comes from replaying the golden's inputs through our
//     optimizer of that name: the same numbers conform scales by.
//   - anything else: derived from the dtype (dtype_default below).
//   - --exact, --atol/--rtol, --min-code-equal, --max-code-dist replace those.
// Every dtype of the safetensors format is read exactly (compare_dtype.c): floats as doubles with
// their ulp distance counted in their own format, complex per part; U8 tensors are codes (share
// identical + max code distance); other integers and bool exactly (I64/U64 in full). A dtype
// mismatch is exit 2 unless --allow-dtype-mismatch (exact widening, named in the output). Never writes files. Not here: the comparison rule itself (compare.c),
// the per-optimizer tolerances and their reasons (conform.c), running an optimizer on a
// candidate's behalf (reference/validate_python.py does that for Python optimizers).
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "core/common.h"
#include "core/junit.h"
#include "validate/compare.h"
#include "validate/compare_dtype.h"
#include "validate/conform.h"
#include "validate/rounding_band.h"
#include "optim/optim.h"
#include "core/safetensors.h"

static int check_run(int argc, char** argv);

const Command cmd_check = {
    .name = "check",
    .summary = "compare a candidate safetensors file with a golden, tensor by tensor; exit 1 if off",
    .usage =
        "trainbench check GOLDEN.safetensors CANDIDATE.safetensors [--tensors REGEX] [--only-present]\n"
        "    [--exact | --atol X --rtol Y] [--min-code-equal F] [--max-code-dist N] [--allow-dtype-mismatch]\n"
        "    [--junit FILE]\n"
        "  Compares every golden tensor named expect.* (all tensors if it has none) with the candidate's\n"
        "  tensor of the same name, dtype and shape. Optimizer goldens use the tolerance of `conform`\n"
        "  (src/validate/conform.c, incl. its movement term); other tensors, any safetensors dtype: floats of\n"
        "  16+ bits rtol = 2 eps of the dtype, atol = its smallest normal; fp8/f6/f4 rtol 1 eps, atol smallest\n"
        "  subnormal; f8_e8m0, integers, bool and u8 codes exact; c64 per part as f32.\n"
        "  --tensors REGEX     only golden tensors whose name matches (POSIX extended regex, unanchored)\n"
        "  --only-present      skip golden tensors the candidate lacks (at least one must remain)\n"
        "  --exact             every tensor bit-exact (numerically equal; NaN matches NaN)\n"
        "  --atol X --rtol Y   float tolerance for every float tensor (a missing one is 0; no movement term)\n"
        "  --min-code-equal F  u8 codes: share identical required, 0..1;  --max-code-dist N: 0..255\n"
        "  --allow-dtype-mismatch  compare tensors whose dtypes differ after exact widening (two real floats:\n"
        "                      to f64, with the golden dtype's tolerance; two integer/bool dtypes: as integers)\n"
        "  --junit FILE        also write a JUnit XML report: one test case per compared tensor\n"
        "  Exit 0 all within tolerance, 1 some outside (NaN where the golden is finite is outside),\n"
        "  2 unusable input (unreadable file, tensor missing or of another dtype/shape: named).",
    .run = check_run,
};

typedef struct {
    bool exact, only_present, allow_dtype_mismatch;
    bool have_atol, have_rtol, have_code_equal, have_code_dist;
    double atol, rtol, min_code_equal;
    long max_code_dist;
} Overrides;

// One compared tensor and its outcome.
typedef struct {
    const StTensor* g;  // golden
    const StTensor* c;  // candidate
    Tolerance tol;
    int rule;           // index into the rules legend
    int64_t step;       // k of expect.step{k}.param when it takes the movement term, else -1
    int64_t kstep;      // k of expect.step{k}.* (optimizer goldens), else 0
    const char* key;    // "param" or the state key (optimizer goldens), else NULL
    // outcome; rounding_only: outside the tolerance, inside the rounding-order band (CONFORMS)
    bool is_codes, is_int, all_exact, ok, rounding_only;
    double max_abs, max_rel, used, worst_got, worst_ref, frac_equal;
    uint64_t max_ulp;
    size_t worst;
    TensorCompare tc;   // the comparison of compare_dtype.c (not for u8 codes)
} Row;

#define MAX_RULES 32

// ---- tolerances ----

// "expect.step{k}.param" -> "param", "expect.step{k}.state.<key>" -> key, with *step = k;
// NULL for other names.
static const char* optim_tensor_key(const char* name, int64_t* step) {
    if (strncmp(name, "expect.step", 11) != 0) return NULL;
    char* end;
    long long k = strtoll(name + 11, &end, 10);
    if (end == name + 11 || k < 1) return NULL;
    *step = k;
    if (!strcmp(end, ".param")) return "param";
    if (!strncmp(end, ".state.", 7) && end[7]) return end + 7;
    return NULL;
}

static Tolerance tolerance_for(const Overrides* ov, const char* optim, const StTensor* g, int64_t* move_step) {
    *move_step = -1;
    int64_t k = 0;
    const char* key = optim ? optim_tensor_key(g->name, &k) : NULL;
    Tolerance t = key ? conform_tolerance(optim, key, k) : dtype_default_tolerance(g->dtype);
    if (ov->exact) {
        Tolerance e = {0, 0, 0, 1.0, 0, "--exact: bit-exact"};
        return e;
    }
    if (ov->have_atol || ov->have_rtol) {
        t.atol = ov->have_atol ? ov->atol : 0;
        t.rtol = ov->have_rtol ? ov->rtol : 0;
        t.move_k = 0;
        if (g->dtype != DTYPE_U8) t.why = "--atol/--rtol from the command line";
    }
    if (ov->have_code_equal) t.min_code_equal = ov->min_code_equal;
    if (ov->have_code_dist) t.max_code_dist = (int)ov->max_code_dist;
    if ((ov->have_code_equal || ov->have_code_dist) && g->dtype == DTYPE_U8)
        t.why = "--min-code-equal/--max-code-dist from the command line";
    // conform applies the movement term to params with more than one element only (a 0-d
    // tensor shares the code path); mirrored so both agree on every golden
    if (key && t.move_k > 0 && !strcmp(key, "param") && g->numel > 1) *move_step = k;
    else t.move_k = 0;
    return t;
}

static void rule_text(const Tolerance* t, DType dt, char* buf, size_t n) {
    if (dt == DTYPE_U8)
        snprintf(buf, n, "%s (codes: >= %.4g%% identical, max distance %d)", t->why, 100 * t->min_code_equal,
                 t->max_code_dist);
    else if (!dtype_traits(dt)->is_float && dtype_traits(dt)->kind != DTYPE_KIND_COMPLEX)
        snprintf(buf, n, "%s (integers: exact)", t->why);
    else if (t->move_k > 0)
        snprintf(buf, n, "%s (atol %.3g, rtol %.3g, + %.3g x cumulative |delta p|)", t->why, t->atol, t->rtol,
                 t->move_k);
    else
        snprintf(buf, n, "%s (atol %.3g, rtol %.3g)", t->why, t->atol, t->rtol);
}

// ---- the movement term: a replay of the golden's inputs through our optimizer ----

// moved[k] (for each k with want[k]) = every element's cumulative |p_t - p_(t-1)| over steps
// 1..k, as conform_run_case() computes it. STATUS_INVALID naming the problem when the golden
// cannot be replayed (no inputs, bad hparams).
// The rounding-order band of one checked step (RoundingBand, optim.h), per tensor key.
typedef struct {
    double* param;
    double* state[OPTIM_MAX_STATE];
    char names[OPTIM_MAX_STATE][64];
    int n_state;
} StepBand;

static const double* step_band_of(const StepBand* b, const char* key) {
    if (!b || !key) return NULL;
    if (!strcmp(key, "param")) return b->param;
    for (int i = 0; i < b->n_state; i++)
        if (!strcmp(b->names[i], key)) return b->state[i];
    return NULL;
}

// Also fills bands[k] for want[k] when o derives a rounding-order band (bands may be NULL).
static Status replay_movement(const SafeTensors* g, const Optimizer* o, int64_t max_k, const bool* want,
                              double** moved, StepBand* bands) {
    const StTensor* p0 = st_find(g, "input.param");
    const StTensor* grads = st_find(g, "input.grads");
    const char* hparams = st_meta(g, "hparams");
    if (!p0 || !grads || !hparams || p0->dtype != DTYPE_F32 || p0->ndim > OPTIM_MAX_DIMS ||
        grads->ndim != p0->ndim + 1 || grads->shape[0] < max_k)
        return status_make(STATUS_INVALID, "%s: an optimizer golden needs input.param (F32), input.grads (T >= %lld, "
                           "*param shape) and metadata hparams for the movement term", g->path, (long long)max_k);
    json_error_t jerr;
    json_t* hp = json_loads(hparams, 0, &jerr);
    OptimConfig cfg;
    Status s = hp ? optim_config_from_json(o, hp, &cfg) : status_make(STATUS_INVALID, "hparams is not JSON: %s", jerr.text);
    json_decref(hp);
    if (!status_is_ok(s)) return status_make(STATUS_INVALID, "%s: %s", g->path, s.msg);
    float* all_grads = NULL;  // (T, n)
    s = st_tensor_to_f32(grads, &all_grads);
    if (!status_is_ok(s)) return s;
    TensorShape shape = {p0->ndim, {0}};
    for (int d = 0; d < p0->ndim; d++) shape.dims[d] = p0->shape[d];
    const size_t n = p0->numel;
    float* p = xaligned_alloc(n * sizeof(float) + 4);
    float* before = xaligned_alloc(n * sizeof(float) + 4);
    double* acc = xcalloc(n ? n : 1, sizeof(double));
    memcpy(p, p0->data, n * sizeof(float));
    OptimState* state = o->init(&shape, &cfg);
    RoundingBand rb = {.n = n};
    const size_t nb = (n ? n : 1) * sizeof(double);
    const RoundingBandStep band_step = bands ? rounding_band_of(o) : NULL;
    if (band_step) {
        rounding_band_alloc(&rb, n, state);
        rounding_band_follow(&rb, o, NULL);
    }
    for (int64_t t = 1; t <= max_k; t++) {
        memcpy(before, p, n * sizeof(float));
        o->step(state, p, all_grads + (size_t)(t - 1) * n, &cfg);
        for (size_t i = 0; i < n; i++) acc[i] += fabs((double)p[i] - (double)before[i]);
        if (rb.param) band_step(&rb, state, before, p, all_grads + (size_t)(t - 1) * n, &cfg);
        if (want[t]) {
            moved[t] = xmalloc((n ? n : 1) * sizeof(double));
            memcpy(moved[t], acc, n * sizeof(double));
            if (rb.param) {
                StepBand* b = &bands[t];
                b->param = xmalloc(nb);
                memcpy(b->param, rb.param, nb);
                for (int i = 0; i < state->n_tensors; i++) {
                    if (!rb.state[i]) continue;
                    snprintf(b->names[b->n_state], sizeof b->names[0], "%s", state->tensors[i].name);
                    const size_t nbi = (shape_numel(&state->tensors[i].shape) ? shape_numel(&state->tensors[i].shape) : 1) *
                                       sizeof(double);
                    b->state[b->n_state] = xmalloc(nbi);
                    memcpy(b->state[b->n_state++], rb.state[i], nbi);
                }
            }
        }
    }
    rounding_band_free(&rb);
    o->free(state);
    free(acc);
    free(before);
    free(p);
    free(all_grads);
    return status_ok();
}

// ---- comparison ----

static void compare_row(Row* r, const double* moved, const double* band) {
    const StTensor* g = r->g;
    const StTensor* c = r->c;
    const size_t n = g->numel;
    if (g->dtype == DTYPE_U8 && c->dtype == DTYPE_U8) {
        r->is_codes = true;
        CompareU8 u = compare_u8(c->data, g->data, n);
        r->frac_equal = u.frac_equal;
        r->max_abs = u.max_dist;
        r->worst = u.worst;
        r->worst_got = n ? ((const uint8_t*)c->data)[u.worst] : 0;
        r->worst_ref = n ? ((const uint8_t*)g->data)[u.worst] : 0;
        r->all_exact = u.n_equal == n;
        r->ok = u.frac_equal >= r->tol.min_code_equal && u.max_dist <= r->tol.max_code_dist;  // conform's rule
        double mism = 1 - u.frac_equal, allowed = 1 - r->tol.min_code_equal;
        double u1 = mism <= 0 ? 0 : allowed > 0 ? mism / allowed : INFINITY;
        double u2 = u.max_dist == 0 ? 0 : r->tol.max_code_dist > 0 ? (double)u.max_dist / r->tol.max_code_dist : INFINITY;
        r->used = u1 > u2 ? u1 : u2;
        double bused;
        if (!r->ok && band && conform_codes_beyond_band(c->data, g->data, n, band, &bused) == 0) {
            r->ok = r->rounding_only = true;  // every differing code is one the rounding-order band reaches
            r->used = bused;
        }
        return;
    }
    // every other dtype (and u8 against another integer dtype): exact readers, its own tolerance
    TensorCompare tc = compare_tensor_values(c, g, &r->tol, moved);
    r->is_int = tc.is_int;
    r->max_abs = tc.max_abs;
    r->max_rel = tc.max_rel;
    r->used = tc.used;
    r->worst = tc.worst;
    r->worst_got = tc.worst_got;
    r->worst_ref = tc.worst_ref;
    r->all_exact = tc.all_exact;
    r->ok = tc.ok;
    r->max_ulp = tc.max_ulp;
    r->tc = tc;
    if (!r->ok && band && g->dtype == DTYPE_F32 && c->dtype == DTYPE_F32) {
        // outside the tolerance: inside the rounding-order band? (optimizer float state)
        double bused;
        if (conform_count_beyond_band(c->data, g->data, n, &r->tol, moved, band, &bused) == 0) {
            r->ok = r->rounding_only = true;
            r->used = bused;
        }
    }
}

// ---- printing ----

static void shape_str(const StTensor* t, char* buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < t->ndim && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (len < n) snprintf(buf + len, n - len, ")");
}

// flat index -> "[i0,i1,...]" (row-major)
static void index_str(const StTensor* t, size_t flat, char* buf, size_t n) {
    int64_t idx[ST_MAX_NDIM];
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t dim = t->shape[d] > 0 ? t->shape[d] : 1;
        idx[d] = (int64_t)(flat % (size_t)dim);
        flat /= (size_t)dim;
    }
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

static void used_str(double used, char* buf, size_t n) {
    if (isinf(used)) snprintf(buf, n, "inf");
    else snprintf(buf, n, "%.3g%%", 100 * used);
}

static void int_str(__int128 v, char* buf, size_t n) {
    if (v < 0) snprintf(buf, n, "%lld", (long long)v);
    else snprintf(buf, n, "%llu", (unsigned long long)v);
}

// Integers exactly (u64/i64 beyond 2^53 too); complex: which part.
static void format_worst_values(const TensorCompare* tc, char* worst, size_t worst_n, char* got, char* exp, size_t n) {
    if (tc->is_int) {
        int_str(tc->worst_got_int, got, n);
        int_str(tc->worst_ref_int, exp, n);
    }
    if (tc->worst_part >= 0) strncat(worst, tc->worst_part ? ".im" : ".re", worst_n - strlen(worst) - 1);
}

static void print_row(const Row* r, int name_w) {
    char shape[96], worst[96] = "-", got[32] = "-", exp[32] = "-", ulp[32] = "-", used[32], rel[32] = "-";
    shape_str(r->g, shape, sizeof shape);
    if (!r->all_exact) {
        index_str(r->g, r->worst, worst, sizeof worst);
        snprintf(got, sizeof got, "%.9g", r->worst_got);
        snprintf(exp, sizeof exp, "%.9g", r->worst_ref);
        if (!r->is_codes) format_worst_values(&r->tc, worst, sizeof worst, got, exp, sizeof got);
    }
    char dtype[32];
    snprintf(dtype, sizeof dtype, "%s%s%s", dtype_name(r->g->dtype), r->c->dtype != r->g->dtype ? "<-" : "",
             r->c->dtype != r->g->dtype ? dtype_name(r->c->dtype) : "");
    if (r->is_codes) snprintf(ulp, sizeof ulp, "%.3f%%eq", 100 * r->frac_equal);
    else if (!r->is_int && !r->tc.has_ulp) snprintf(rel, sizeof rel, "%.3g", r->max_rel);  // widened: no one format
    else if (!r->is_int) {
        if (r->max_ulp == UINT64_MAX) snprintf(ulp, sizeof ulp, "nan");
        else snprintf(ulp, sizeof ulp, "%llu", (unsigned long long)r->max_ulp);
        snprintf(rel, sizeof rel, "%.3g", r->max_rel);
    }
    used_str(r->used, used, sizeof used);
    printf("%-*s %-5s %-11s %10.3g %10s %10s %-11s %15s %15s %9s %-7s [%d]\n", name_w, r->g->name,
           dtype, shape, r->max_abs, rel, ulp, worst, got, exp, used, !r->ok ? "FAIL" : r->rounding_only ? "CONFORMS" : "PASS",
           r->rule + 1);
}

// Natural order ("expect.step2..." before "expect.step10...").
static int cmp_rows(const void* a, const void* b) {
    return strverscmp(((const Row*)a)->g->name, ((const Row*)b)->g->name);
}

static bool flag_number(int argc, char** argv, int* i, const char* name, double lo, double hi, double* out) {
    const char* v;
    if (!flag_value(&cmd_check, argc, argv, i, name, &v)) return false;
    if (!parse_double(v, out) || !(*out >= lo && *out <= hi)) {
        cli_usage_error(&cmd_check, "%s must be a number in [%g, %g] (got '%s')", name, lo, hi, v);
        return false;
    }
    return true;
}

// ---- dtypes of a compared pair (kept apart from the verdict code) ----

static const char* dtype_label(const StTensor* t) {
    return t->dtype == DTYPE_UNKNOWN ? st_dtype_text(t) : dtype_name(t->dtype);
}

// Whether golden g and candidate c can be compared value by value; else prints why (exit 2).
static bool check_dtypes_usable(const StTensor* g, const StTensor* c, bool allow_mismatch) {
    if (g->dtype == DTYPE_UNKNOWN || c->dtype == DTYPE_UNKNOWN) {
        fprintf(stderr, "trainbench check: tensor '%s': dtype \"%s\" is not a safetensors dtype this reader knows "
                "(golden %s, candidate %s): its values cannot be compared (allowed: %s)\n", g->name,
                st_dtype_text(g->dtype == DTYPE_UNKNOWN ? g : c), dtype_label(g), dtype_label(c), dtype_names_list());
        return false;
    }
    if (c->dtype == g->dtype) return true;
    if (!allow_mismatch) {
        fprintf(stderr, "trainbench check: tensor '%s': dtype differs: golden %s, candidate %s "
                "(--allow-dtype-mismatch compares the values after exact widening)\n", g->name,
                dtype_name(g->dtype), dtype_name(c->dtype));
        return false;
    }
    char why[256];
    if (!dtype_widening_ok(g->dtype, c->dtype, why, sizeof why)) {
        fprintf(stderr, "trainbench check: tensor '%s': dtype differs: golden %s, candidate %s: %s\n", g->name,
                dtype_name(g->dtype), dtype_name(c->dtype), why);
        return false;
    }
    return true;
}

static int check_run(int argc, char** argv) {
    Overrides ov = {0};
    const char* paths[2] = {NULL, NULL};
    const char* regex_text = NULL;
    const char* junit_path = NULL;
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exact")) {
            ov.exact = true;
        } else if (!strcmp(argv[i], "--only-present")) {
            ov.only_present = true;
        } else if (!strcmp(argv[i], "--allow-dtype-mismatch")) {
            ov.allow_dtype_mismatch = true;
        } else if (flag_matches(argv[i], "--junit")) {
            if (!flag_value(&cmd_check, argc, argv, &i, "--junit", &junit_path)) return 2;
        } else if (flag_matches(argv[i], "--atol")) {
            if (!flag_number(argc, argv, &i, "--atol", 0, INFINITY, &ov.atol)) return 2;
            ov.have_atol = true;
        } else if (flag_matches(argv[i], "--rtol")) {
            if (!flag_number(argc, argv, &i, "--rtol", 0, INFINITY, &ov.rtol)) return 2;
            ov.have_rtol = true;
        } else if (flag_matches(argv[i], "--min-code-equal")) {
            if (!flag_number(argc, argv, &i, "--min-code-equal", 0, 1, &ov.min_code_equal)) return 2;
            ov.have_code_equal = true;
        } else if (flag_matches(argv[i], "--max-code-dist")) {
            if (!flag_int(&cmd_check, argc, argv, &i, "--max-code-dist", 0, 255, &ov.max_code_dist)) return 2;
            ov.have_code_dist = true;
        } else if (flag_matches(argv[i], "--tensors")) {
            if (!flag_value(&cmd_check, argc, argv, &i, "--tensors", &regex_text)) return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_unknown_flag(&cmd_check, argv[i]);
        } else if (n_paths == 2) {
            return cli_usage_error(&cmd_check, "expected two files (GOLDEN CANDIDATE), got a third: '%s'", argv[i]);
        } else {
            paths[n_paths++] = argv[i];
        }
    }
    if (n_paths < 2) return cli_usage_error(&cmd_check, "expected two files: GOLDEN CANDIDATE");
    if (ov.exact && (ov.have_atol || ov.have_rtol || ov.have_code_equal || ov.have_code_dist))
        return cli_usage_error(&cmd_check, "--exact cannot be combined with --atol/--rtol/--min-code-equal/--max-code-dist");
    regex_t re;
    if (regex_text) {
        int e = regcomp(&re, regex_text, REG_EXTENDED | REG_NOSUB);
        if (e) {
            char msg[256];
            regerror(e, &re, msg, sizeof msg);
            return cli_usage_error(&cmd_check, "--tensors: invalid regular expression '%s': %s", regex_text, msg);
        }
    }

    if (junit_path && (same_existing_file(junit_path, paths[0]) || same_existing_file(junit_path, paths[1])))
        return cli_usage_error(&cmd_check, "--junit %s is one of the files compared: give a new path for the report",
                               junit_path);
    SafeTensors gold = {0}, cand = {0};
    Row* rows = NULL;
    const StTensor** skipped = NULL;  // golden tensors not in the candidate (--only-present)
    double** moved = NULL;
    StepBand* bands = NULL;  // per step k (optimizer goldens whose optimizer derives a band)
    int64_t max_k = 0;
    int rc = 2;
    const StReadOptions list_unknown = {.allow_unknown_dtypes = true};  // named below if compared
    Status s = st_read_opts(paths[0], &list_unknown, &gold);
    if (status_is_ok(s)) s = st_read_opts(paths[1], &list_unknown, &cand);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench check: %s\n", s.msg);
        goto done;
    }

    // Which tolerance table applies: an optimizer golden names its optimizer in metadata.
    const char* optim = st_meta(&gold, "optimizer");
    const Optimizer* opt = optim ? optim_find(optim) : NULL;
    if (optim && !opt)
        fprintf(stderr, "trainbench check: note: %s names optimizer '%s', which is not registered here (%s): "
                "dtype-derived tolerances\n", paths[0], optim, optim_names_list());
    if (!opt) optim = NULL;
    if (opt) {  // an optimizer golden missing a checked step or state tensor is unusable, not a pass
        s = conform_golden_validate(&gold, opt->name);
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench check: %s\n", s.msg);
            goto done;
        }
    }

    // ---- select the golden tensors and validate the candidate's; any problem exits 2 ----
    bool has_expect = false;
    for (size_t i = 0; i < gold.n_tensors; i++)
        if (!strncmp(gold.tensors[i].name, "expect.", 7)) has_expect = true;
    rows = xcalloc(gold.n_tensors ? gold.n_tensors : 1, sizeof(Row));
    skipped = xcalloc(gold.n_tensors ? gold.n_tensors : 1, sizeof(StTensor*));
    size_t n_rows = 0, n_skipped = 0, n_problems = 0;
    for (size_t i = 0; i < gold.n_tensors; i++) {
        const StTensor* g = &gold.tensors[i];
        if (has_expect && strncmp(g->name, "expect.", 7)) continue;
        if (regex_text && regexec(&re, g->name, 0, NULL, 0) != 0) continue;
        const StTensor* c = st_find(&cand, g->name);
        char gs[96], cs[96];
        shape_str(g, gs, sizeof gs);
        if (!c) {
            if (ov.only_present) {
                skipped[n_skipped++] = g;
                continue;
            }
            fprintf(stderr, "trainbench check: golden tensor '%s' (%s %s) is missing from the candidate %s\n",
                    g->name, dtype_label(g), gs, paths[1]);
            n_problems++;
            continue;
        }
        shape_str(c, cs, sizeof cs);
        if (!check_dtypes_usable(g, c, ov.allow_dtype_mismatch)) {
            n_problems++;
            continue;
        }
        if (strcmp(gs, cs) != 0) {
            fprintf(stderr, "trainbench check: tensor '%s': shape differs: golden %s, candidate %s\n", g->name, gs, cs);
            n_problems++;
            continue;
        }
        Row* r = &rows[n_rows++];
        r->g = g;
        r->c = c;
        r->tol = tolerance_for(&ov, optim, g, &r->step);
        if (r->step > max_k) max_k = r->step;
        r->key = optim ? optim_tensor_key(g->name, &r->kstep) : NULL;
        // the rounding-order band needs the replay up to every optimizer tensor's step
        if (r->key && rounding_band_of(opt) && !ov.exact && !ov.have_atol && !ov.have_rtol && r->kstep > max_k)
            max_k = r->kstep;
    }
    if (n_problems) {
        fprintf(stderr, "trainbench check: %zu problem(s) above: the candidate must hold each compared golden tensor "
                "under the same name with the same dtype and shape (see --tensors, --only-present)\n", n_problems);
        goto done;
    }
    if (n_rows == 0) {
        fprintf(stderr, "trainbench check: nothing to compare: no golden tensor%s%s%s\n",
                has_expect ? " named expect.*" : "", regex_text ? " matching --tensors " : "", regex_text ? regex_text : "");
        goto done;
    }
    for (size_t i = 0; i < cand.n_tensors; i++)
        if (!st_find(&gold, cand.tensors[i].name))
            fprintf(stderr, "trainbench check: warning: candidate tensor '%s' is not in the golden: not compared\n",
                    cand.tensors[i].name);

    // ---- the movement term (optimizer goldens, params) ----
    if (max_k > 0) {
        bool* want = xcalloc((size_t)max_k + 1, sizeof(bool));
        moved = xcalloc((size_t)max_k + 1, sizeof(double*));
        bands = xcalloc((size_t)max_k + 1, sizeof(StepBand));
        for (size_t i = 0; i < n_rows; i++) {
            if (rows[i].step > 0) want[rows[i].step] = true;
            if (rows[i].key && rows[i].kstep <= max_k) want[rows[i].kstep] = true;
        }
        s = replay_movement(&gold, opt, max_k, want, moved,
                            rounding_band_of(opt) && !ov.exact && !ov.have_atol && !ov.have_rtol ? bands : NULL);
        free(want);
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench check: %s\n", s.msg);
            goto done;
        }
    }

    // ---- compare and print ----
    qsort(rows, n_rows, sizeof(Row), cmp_rows);
    char rules[MAX_RULES][400];
    int n_rules = 0;
    int name_w = 6;
    for (size_t i = 0; i < n_rows; i++) {
        Row* r = &rows[i];
        char text[400];
        // u8 against another integer dtype (--allow-dtype-mismatch) is compared as integers, not codes
        rule_text(&r->tol, r->g->dtype == DTYPE_U8 && r->c->dtype != DTYPE_U8 ? DTYPE_I64 : r->g->dtype, text,
                  sizeof text);
        r->rule = -1;
        for (int k = 0; k < n_rules; k++)
            if (!strcmp(rules[k], text)) r->rule = k;
        if (r->rule < 0) {
            CHECK(n_rules < MAX_RULES, "more than %d distinct tolerance rules", MAX_RULES);
            snprintf(rules[n_rules], sizeof rules[0], "%s", text);
            r->rule = n_rules++;
        }
        compare_row(r, r->step > 0 ? moved[r->step] : NULL,
                    bands && r->key && r->kstep <= max_k ? step_band_of(&bands[r->kstep], r->key) : NULL);
        int len = (int)strlen(r->g->name);
        if (len > name_w) name_w = len;
    }
    const char* case_id = st_meta(&gold, "case");
    const char* library = st_meta(&gold, "library");
    printf("golden:    %s", paths[0]);
    if (optim || case_id || library)
        printf("  (%s%s%s%s%s)", optim ? optim : "", optim && case_id ? ", case " : "", case_id ? case_id : "",
               library ? "; " : "", library ? library : "");
    printf("\ncandidate: %s\n", paths[1]);
    for (size_t i = 0; i < n_rows; i++)
        if (rows[i].c->dtype != rows[i].g->dtype)
            printf("widened:   %s: golden %s, candidate %s: compared after exact widening (%s; --allow-dtype-mismatch)\n",
                   rows[i].g->name, dtype_name(rows[i].g->dtype), dtype_name(rows[i].c->dtype),
                   rows[i].tc.is_int ? "both as exact integers" : "both to f64");
    if (n_skipped) {
        printf("skipped:   %zu golden tensor(s) not in the candidate (--only-present):", n_skipped);
        for (size_t i = 0; i < n_skipped; i++) printf(" %s", skipped[i]->name);
        printf("\n");
    }
    if (optim && !ov.exact && !(ov.have_atol || ov.have_rtol))
        printf("tolerance: `trainbench conform`'s for %s (src/validate/conform.c)%s\n", optim,
               max_k > 0 ? "; the movement term from a replay of the golden's inputs through our optimizer" : "");
    printf("\n%-*s %-5s %-11s %10s %10s %10s %-11s %15s %15s %9s %-7s %s\n", name_w, "tensor", "dtype", "shape",
           "max_abs", "max_rel", "max_ulp", "worst", "got", "expected", "tol_used", "verdict", "rule");
    size_t n_fail = 0;
    const Row* worst = NULL;
    for (size_t i = 0; i < n_rows; i++) {
        print_row(&rows[i], name_w);
        if (!rows[i].ok) n_fail++;
        if (!worst || rows[i].used > worst->used) worst = &rows[i];
    }
    if (junit_path) {
        JUnit* ju = junit_new("trainbench check");
        char cls[512], msg[256];
        snprintf(cls, sizeof cls, "check.%s", case_id ? case_id : paths[0]);
        for (size_t i = 0; i < n_rows; i++) {
            const Row* r = &rows[i];
            char used[32];
            used_str(r->used, used, sizeof used);
            snprintf(msg, sizeof msg, "max_abs %.3g, %s of its tolerance (rule: %.150s)", r->max_abs, used, rules[r->rule]);
            junit_case(ju, cls, r->g->name, 0, r->ok ? JUNIT_PASS : JUNIT_FAILURE, r->ok ? NULL : msg, NULL);
        }
        Status js = junit_write(ju, junit_path);
        junit_free(ju);
        if (!status_is_ok(js)) {
            fprintf(stderr, "trainbench check: --junit: %s\n", js.msg);
            rc = 1;
            goto done;
        }
    }
    printf("\nrules (|got - expected| <= atol + rtol*|expected| [+ k x cumulative |delta p|]; u8: codes):\n");
    for (int k = 0; k < n_rules; k++) printf("  [%d] %s\n", k + 1, rules[k]);
    char wu[32];
    used_str(worst->used, wu, sizeof wu);
    size_t n_same = 0, n_round = 0;
    for (size_t i = 0; i < n_rows; i++) {
        n_same += rows[i].all_exact;
        n_round += rows[i].rounding_only;
    }
    if (n_fail) {
        printf("\nFAIL: %zu of %zu tensors outside tolerance:", n_fail, n_rows);
        for (size_t i = 0; i < n_rows; i++)
            if (!rows[i].ok) printf(" %s", rows[i].g->name);
        printf(" (worst %s: %s of its tolerance)\n", worst->g->name, wu);
        printf("bands: %zu bit-identical, %zu within tolerance, %zu differ by rounding only (CONFORMS), %zu FAIL\n",
               n_same, n_rows - n_fail - n_same - n_round, n_round, n_fail);
        rc = 1;
    } else if (n_round) {
        printf("\nCONFORMS: %zu of %zu tensors within tolerance or the rounding-order band (%zu bit-identical, %zu "
               "differ by rounding only: reference/CONFORMANCE.md \"Verdict bands\")\n", n_rows, n_rows, n_same, n_round);
        rc = 0;
    } else {
        if (n_same == n_rows)
            printf("\nPASS: %zu of %zu tensors within tolerance (all bit-identical)\n", n_rows, n_rows);
        else
            printf("\nPASS: %zu of %zu tensors within tolerance (%zu bit-identical; worst %s: %s of its tolerance)\n",
                   n_rows, n_rows, n_same, worst->g->name, wu);
        rc = 0;
    }

done:
    if (moved)
        for (int64_t k = 0; k <= max_k; k++) free(moved[k]);
    free(moved);
    if (bands)
        for (int64_t k = 0; k <= max_k; k++) {
            free(bands[k].param);
            for (int i = 0; i < bands[k].n_state; i++) free(bands[k].state[i]);
        }
    free(bands);
    free(rows);
    free(skipped);
    st_free(&gold);
    st_free(&cand);
    if (regex_text) regfree(&re);
    return rc;
}

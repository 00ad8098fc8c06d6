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
// Floats are compared in fp32 after exact widening (bf16/f16), with their ulp distance counted
// in their own format; U8 tensors are codes (share identical + max code distance); I32/I64
// are compared exactly. Never writes files. Not here: the comparison rule itself (compare.c),
// the per-optimizer tolerances and their reasons (conform.c), running an optimizer on a
// candidate's behalf (reference/validate_python.py does that for Python optimizers).
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "core/common.h"
#include "validate/compare.h"
#include "validate/conform.h"
#include "optim/optim.h"
#include "core/safetensors.h"

static int check_run(int argc, char** argv);

const Command cmd_check = {
    .name = "check",
    .summary = "compare a candidate safetensors file with a golden, tensor by tensor; exit 1 if off",
    .usage =
        "trainbench check GOLDEN.safetensors CANDIDATE.safetensors [--tensors REGEX] [--only-present]\n"
        "    [--exact | --atol X --rtol Y] [--min-code-equal F] [--max-code-dist N]\n"
        "  Compares every golden tensor named expect.* (all tensors if it has none) with the candidate's\n"
        "  tensor of the same name, dtype and shape. Optimizer goldens use the tolerance of `conform`\n"
        "  (src/validate/conform.c, incl. its movement term); other tensors: f32/bf16/f16 rtol = 2 eps of the\n"
        "  dtype, atol = its smallest normal; u8 codes and integers exact.\n"
        "  --tensors REGEX     only golden tensors whose name matches (POSIX extended regex, unanchored)\n"
        "  --only-present      skip golden tensors the candidate lacks (at least one must remain)\n"
        "  --exact             every tensor bit-exact (numerically equal; NaN matches NaN)\n"
        "  --atol X --rtol Y   float tolerance for every float tensor (a missing one is 0; no movement term)\n"
        "  --min-code-equal F  u8 codes: share identical required, 0..1;  --max-code-dist N: 0..255\n"
        "  Exit 0 all within tolerance, 1 some outside (NaN where the golden is finite is outside),\n"
        "  2 unusable input (unreadable file, tensor missing or of another dtype/shape: named).",
    .run = check_run,
};

typedef struct {
    bool exact, only_present;
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
    // outcome
    bool is_codes, is_int, all_exact, ok;
    double max_abs, max_rel, used, worst_got, worst_ref, frac_equal;
    uint64_t max_ulp;
    size_t worst;
} Row;

#define MAX_RULES 32

// ---- tolerances ----

// A generic output of a float dtype: a couple of roundings apart is agreement (rtol = 2 eps,
// i.e. 2 ulp at the top of a binade, 4 at the bottom); atol = the smallest normal so a value
// flushed to zero on one side (FTZ/DAZ hardware) is not a failure.
static Tolerance dtype_default(DType dt) {
    Tolerance t = {0, 0, 0, 1.0, 0, "integers and u8 codes of a plain tensor: exact"};
    if (dt == DTYPE_F32) {
        t.rtol = 2 * 0x1p-23;
        t.atol = 0x1p-126;
        t.why = "f32 default: rtol 2 eps (2-4 ulp), atol smallest normal (flush-to-zero)";
    } else if (dt == DTYPE_BF16) {
        t.rtol = 2 * 0x1p-7;
        t.atol = 0x1p-126;
        t.why = "bf16 default: rtol 2 eps (2-4 ulp), atol smallest normal (flush-to-zero)";
    } else if (dt == DTYPE_F16) {
        t.rtol = 2 * 0x1p-10;
        t.atol = 0x1p-14;
        t.why = "f16 default: rtol 2 eps (2-4 ulp), atol smallest normal (flush-to-zero)";
    }
    return t;
}

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
    Tolerance t = key ? conform_tolerance(optim, key, k) : dtype_default(g->dtype);
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
    else if (dt == DTYPE_I32 || dt == DTYPE_I64)
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
static Status replay_movement(const SafeTensors* g, const Optimizer* o, int64_t max_k, const bool* want,
                              double** moved) {
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
    for (int64_t t = 1; t <= max_k; t++) {
        memcpy(before, p, n * sizeof(float));
        o->step(state, p, all_grads + (size_t)(t - 1) * n, &cfg);
        for (size_t i = 0; i < n; i++) acc[i] += fabs((double)p[i] - (double)before[i]);
        if (want[t]) {
            moved[t] = xmalloc((n ? n : 1) * sizeof(double));
            memcpy(moved[t], acc, n * sizeof(double));
        }
    }
    o->free(state);
    free(acc);
    free(before);
    free(p);
    free(all_grads);
    return status_ok();
}

// ---- comparison ----

// Ordered-integer distance of two 16-bit floats (bf16 or f16 bits); UINT64_MAX when exactly
// one is NaN.
static uint64_t ulp16(uint16_t a, uint16_t b, DType dt) {
    uint16_t exp_mask = dt == DTYPE_BF16 ? 0x7F80 : 0x7C00, man_mask = dt == DTYPE_BF16 ? 0x007F : 0x03FF;
    bool na = (a & exp_mask) == exp_mask && (a & man_mask), nb = (b & exp_mask) == exp_mask && (b & man_mask);
    if (na || nb) return na && nb ? 0 : UINT64_MAX;
    int32_t oa = a & 0x8000 ? -(int32_t)(a & 0x7FFF) : (int32_t)a;
    int32_t ob = b & 0x8000 ? -(int32_t)(b & 0x7FFF) : (int32_t)b;
    return (uint64_t)(oa > ob ? oa - ob : ob - oa);
}

static int64_t int_at(const StTensor* t, size_t i) {
    return t->dtype == DTYPE_I64 ? ((const int64_t*)t->data)[i] : ((const int32_t*)t->data)[i];
}

static void compare_row(Row* r, const double* moved) {
    const StTensor* g = r->g;
    const StTensor* c = r->c;
    const size_t n = g->numel;
    if (g->dtype == DTYPE_U8) {
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
        return;
    }
    if (g->dtype == DTYPE_I32 || g->dtype == DTYPE_I64) {
        r->is_int = true;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)int_at(c, i) - (double)int_at(g, i));
            if (d > 0) bad++;
            if (d > r->max_abs) {
                r->max_abs = d;
                r->worst = i;
            }
        }
        r->all_exact = bad == 0;
        r->used = bad ? INFINITY : 0;
        r->worst_got = n ? (double)int_at(c, r->worst) : 0;
        r->worst_ref = n ? (double)int_at(g, r->worst) : 0;
        r->ok = bad == 0;
        return;
    }
    float *x = NULL, *ref = NULL;  // widened exactly (bf16/f16), or copies of f32
    Status s = st_tensor_to_f32(c, &x);
    CHECK(status_is_ok(s), "%s", s.msg);  // dtype validated before
    s = st_tensor_to_f32(g, &ref);
    CHECK(status_is_ok(s), "%s", s.msg);
    CompareF32 cf = compare_f32_scaled(x, ref, n, r->tol.atol, r->tol.rtol, moved, r->tol.move_k);
    r->max_abs = cf.max_abs;
    r->max_rel = cf.max_rel;
    r->used = cf.used;
    r->worst = cf.worst;
    r->worst_got = cf.worst_got;
    r->worst_ref = cf.worst_ref;
    r->all_exact = cf.n_exact == n;
    r->ok = cf.ok;
    r->max_ulp = cf.max_ulp == UINT32_MAX ? UINT64_MAX : cf.max_ulp;
    if (g->dtype == DTYPE_BF16 || g->dtype == DTYPE_F16) {  // ulps of the tensor's own format
        r->max_ulp = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t d = ulp16(((const uint16_t*)c->data)[i], ((const uint16_t*)g->data)[i], g->dtype);
            if (d > r->max_ulp) r->max_ulp = d;
        }
    }
    free(x);
    free(ref);
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

static void print_row(const Row* r, int name_w) {
    char shape[96], worst[96] = "-", got[32] = "-", exp[32] = "-", ulp[32] = "-", used[32], rel[32] = "-";
    shape_str(r->g, shape, sizeof shape);
    if (!r->all_exact) {
        index_str(r->g, r->worst, worst, sizeof worst);
        snprintf(got, sizeof got, "%.9g", r->worst_got);
        snprintf(exp, sizeof exp, "%.9g", r->worst_ref);
    }
    if (r->is_codes) snprintf(ulp, sizeof ulp, "%.3f%%eq", 100 * r->frac_equal);
    else if (!r->is_int) {
        if (r->max_ulp == UINT64_MAX) snprintf(ulp, sizeof ulp, "nan");
        else snprintf(ulp, sizeof ulp, "%llu", (unsigned long long)r->max_ulp);
        snprintf(rel, sizeof rel, "%.3g", r->max_rel);
    }
    used_str(r->used, used, sizeof used);
    printf("%-*s %-5s %-11s %10.3g %10s %10s %-11s %15s %15s %9s %-7s [%d]\n", name_w, r->g->name,
           dtype_name(r->g->dtype), shape, r->max_abs, rel, ulp, worst, got, exp, used, r->ok ? "PASS" : "FAIL",
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

static int check_run(int argc, char** argv) {
    Overrides ov = {0};
    const char* paths[2] = {NULL, NULL};
    const char* regex_text = NULL;
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exact")) {
            ov.exact = true;
        } else if (!strcmp(argv[i], "--only-present")) {
            ov.only_present = true;
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

    SafeTensors gold = {0}, cand = {0};
    Row* rows = NULL;
    const StTensor** skipped = NULL;  // golden tensors not in the candidate (--only-present)
    double** moved = NULL;
    int64_t max_k = 0;
    int rc = 2;
    Status s = st_read(paths[0], &gold);
    if (status_is_ok(s)) s = st_read(paths[1], &cand);
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
                    g->name, dtype_name(g->dtype), gs, paths[1]);
            n_problems++;
            continue;
        }
        shape_str(c, cs, sizeof cs);
        if (c->dtype != g->dtype) {
            fprintf(stderr, "trainbench check: tensor '%s': dtype differs: golden %s, candidate %s\n", g->name,
                    dtype_name(g->dtype), dtype_name(c->dtype));
            n_problems++;
            continue;
        }
        if (strcmp(gs, cs) != 0) {
            fprintf(stderr, "trainbench check: tensor '%s': shape differs: golden %s, candidate %s\n", g->name, gs, cs);
            n_problems++;
            continue;
        }
        if (g->dtype == DTYPE_F64) {
            fprintf(stderr, "trainbench check: tensor '%s': f64 is not supported (f32, bf16, f16, u8, i32, i64 are)\n",
                    g->name);
            n_problems++;
            continue;
        }
        Row* r = &rows[n_rows++];
        r->g = g;
        r->c = c;
        r->tol = tolerance_for(&ov, optim, g, &r->step);
        if (r->step > max_k) max_k = r->step;
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
        for (size_t i = 0; i < n_rows; i++)
            if (rows[i].step > 0) want[rows[i].step] = true;
        s = replay_movement(&gold, opt, max_k, want, moved);
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
        rule_text(&r->tol, r->g->dtype, text, sizeof text);
        r->rule = -1;
        for (int k = 0; k < n_rules; k++)
            if (!strcmp(rules[k], text)) r->rule = k;
        if (r->rule < 0) {
            CHECK(n_rules < MAX_RULES, "more than %d distinct tolerance rules", MAX_RULES);
            snprintf(rules[n_rules], sizeof rules[0], "%s", text);
            r->rule = n_rules++;
        }
        compare_row(r, r->step > 0 ? moved[r->step] : NULL);
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
    printf("\nrules (|got - expected| <= atol + rtol*|expected| [+ k x cumulative |delta p|]; u8: codes):\n");
    for (int k = 0; k < n_rules; k++) printf("  [%d] %s\n", k + 1, rules[k]);
    char wu[32];
    used_str(worst->used, wu, sizeof wu);
    if (n_fail) {
        printf("\nFAIL: %zu of %zu tensors outside tolerance:", n_fail, n_rows);
        for (size_t i = 0; i < n_rows; i++)
            if (!rows[i].ok) printf(" %s", rows[i].g->name);
        printf(" (worst %s: %s of its tolerance)\n", worst->g->name, wu);
        rc = 1;
    } else {
        size_t n_same = 0;
        for (size_t i = 0; i < n_rows; i++) n_same += rows[i].all_exact;
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
    free(rows);
    free(skipped);
    st_free(&gold);
    st_free(&cand);
    if (regex_text) regfree(&re);
    return rc;
}

// conform.c — implementation of conform.h (golden optimizer cases vs an Optimizer, vs a
// known-mistake variant, and plugins wrapped as an Optimizer) and the `trainbench conform`
// command: every golden case of one optimizer through a plugin (src/validate/trainbench_plugin.h) or
// a built-in optimizer, each case in a child process, as a PASS/FAIL table with a diagnosis.
// Not here: the mistakes themselves (optim_mistakes.c), the comparison rule (compare.c).
#include "validate/conform.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/safetensors.h"
#include "core/junit.h"
#include "optim/torch_sqrt.h"
#include "results/results.h"
#include "validate/rounding_band.h"
#include "validate/trainbench_plugin.h"

// Tolerances, per optimizer and tensor: |x - ref| <= atol + rtol*|ref| + move_k*moved, where
// `moved` is the element's cumulative |p_t - p_(t-1)| over the steps so far (our trajectory):
// when a parameter nearly cancels (p_new ~ 0), its error scales with the update, not with
// p_new. Each entry says which rounding point differs from the library; the measured
// agreement is printed by tests/test_optim.c with every comparison.
#define EPS32 0x1p-23
Tolerance conform_tolerance(const char* optim_name, const char* tensor, int64_t step) {
    Tolerance t = {0, 0, 0, 1.0, 0, "bit-exact: same fp32 operations in the same order"};
    bool is_param = !strcmp(tensor, "param");
    if (!strcmp(optim_name, "adamw_torch")) {
        if (is_param) {
            // torch's float Tensor.sqrt() on x86 is MKL vsSqrt (HA mode): within 1 ulp but not
            // correctly rounded; we use sqrtf. denom then differs by <= ~1 ulp, the update by
            // <= ~2 ulp; 4 ulp of the movement (plus 2 ulp of p) covers it.
            t.rtol = 2 * EPS32;
            t.move_k = 4 * EPS32;
            t.why = "MKL sqrt (<= 1 ulp off) in denom: a few ulp of each update";
        } else if (!strcmp(tensor, "exp_avg_sq")) {
            // torch's own fused CPU kernel (AdamW(fused=True)) computes v = beta2*v + (1-beta2)*g*g
            // for the tail elements (numel mod the vector width) in a scalar loop that rounds
            // differently from the addcmul_ of the for-loop/foreach paths: <= 1 ulp per step,
            // and v carries the earlier steps' differences (times beta2 < 1), so after step k
            // up to k ulp (measured: 2.7 ulp at step 10; reference/VALIDATE_PYTHON.md).
            // rtol = k * 2^-23 admits k ulp. Our port stays bit-exact (tests/test_optim.c
            // asserts 0 ulp on every float state tensor).
            t.rtol = (double)(step > 0 ? step : 1) * EPS32;
            t.why = "exp_avg_sq: <= 1 ulp per step so far (torch fused=True rounds its tail elements differently)";
        } else {
            t.why = "exp_avg/step: same fp32 ops incl. the FMA of lerp_: bit-exact";
        }
    } else if (!strcmp(optim_name, "adafactor") || !strcmp(optim_name, "adafactor_torch")) {
        // Bit-exact (atol = rtol = move_k = 0) for every tensor: params, RMS, exp_avg,
        // exp_avg_sq(_row/_col), row_var/col_var/variance, step. The norms and means are summed
        // in torch's own float32 order (torch_reduce.h: the 8-lane norm kernel, the dim=-2
        // NormTwoOps loop, the cascade sums), and every other operation is a correctly rounded
        // fp32 op or fmaf at torch's rounding points; neither optimizer calls Tensor.sqrt()
        // (norm's std::sqrt and rsqrt = 1/sqrt are correctly rounded), so MKL plays no part.
        // Measured: 564 of 564 comparisons identical bit for bit. A difference here means a
        // changed rounding point or reduction order (or a golden from a torch that reduces
        // multi-threaded or with other vector widths), never "noise": do not loosen to hide it.
        t.why = "bit-exact: torch's reduction orders (torch_reduce.h) and rounding points";
    } else if (!strcmp(optim_name, "adamw_bnb_8bit")) {
        t.min_code_equal = 0.999;
        t.max_code_dist = 1;
        t.why = "fp32 state / absmax / maps: bit-exact; codes: >= 99.9% identical, rest one apart";
        if (is_param) {
            // a code one step off changes m or v by one quantization step for that element,
            // which changes that element's update; MKL sqrt as in adamw_torch
            t.rtol = 2 * EPS32;
            t.move_k = 4 * EPS32;
            t.why = "MKL sqrt (<= 1 ulp off) in the 32-bit path; 8-bit path bit-exact";
        }
    }
    return t;
}

static int cmp_str(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

// Where the optimizer goldens are: --goldens DIR, else GOLDEN_OPTIM_DIR found by repo_path
// (the working directory, else beside the executable).
static char g_golden_dir[4096];
void conform_set_golden_dir(const char* dir) {
    snprintf(g_golden_dir, sizeof g_golden_dir, "%s", dir);
}
const char* conform_golden_dir(void) {
    if (!g_golden_dir[0]) repo_path(GOLDEN_OPTIM_DIR, g_golden_dir, sizeof g_golden_dir);
    return g_golden_dir;
}

Status conform_list_cases(const char* optim_name, char*** paths, size_t* n) {
    *paths = NULL;
    *n = 0;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", conform_golden_dir(), optim_name);
    DIR* d = opendir(dir);
    if (!d) return status_ok();
    struct dirent* e;
    size_t cap = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 13 || strcmp(e->d_name + len - 12, ".safetensors") != 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *paths = xrealloc(*paths, cap * sizeof(char*));
        }
        char* p = xmalloc(strlen(dir) + len + 2);
        sprintf(p, "%s/%s", dir, e->d_name);
        (*paths)[(*n)++] = p;
    }
    closedir(d);
    if (*n) qsort(*paths, *n, sizeof(char*), cmp_str);
    return status_ok();
}

void conform_free_list(char** paths, size_t n) {
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
}


static bool shape_equal(const StTensor* t, const TensorShape* s) {
    if (t->ndim != s->ndim) return false;
    for (int d = 0; d < s->ndim; d++)
        if (t->shape[d] != s->dims[d]) return false;
    return true;
}

// Counts one comparison; `used` is its share of the tolerance (inf for a failure that has no
// share: missing tensor, wrong dtype/shape, codes out of bounds).
static void record(ConformSummary* sum, bool ok, double used, int64_t step, const char* label) {
    sum->n_compared++;
    if (!ok) sum->n_failed++;
    if (!ok && !sum->first_fail_at[0]) snprintf(sum->first_fail_at, sizeof sum->first_fail_at, "step%lld %s", (long long)step, label);
    if (!(used <= sum->worst_any_used) || !sum->worst_at[0]) {  // NaN counts as worst
        sum->worst_any_used = used;
        snprintf(sum->worst_at, sizeof sum->worst_at, "step%lld %s", (long long)step, label);
    }
}

// Compares one expected tensor with ours; prints one line. `tol_name`: whose tolerances.
// Notes the band of one compared tensor in sum->bands: "param within tolerance, exp_avg differs
// by rounding only, exp_avg_sq FAILS", for the most telling checked step: the first with a
// failure, else the first with a rounding-only tensor, else the last. rank: 0 ordinary,
// 1 rounding only, 2 fails.
static void bands_settle(ConformSummary* sum) {
    if (sum->cur_step && (sum->cur_rank > sum->bands_rank || (sum->bands_rank == 0))) {
        if (sum->bands_rank == 0 || sum->cur_rank > sum->bands_rank) {
            memcpy(sum->bands, sum->cur, sizeof sum->bands);
            sum->bands_step = sum->cur_step;
            sum->bands_rank = sum->cur_rank;
        }
    }
}

static void note_band(ConformSummary* sum, int64_t step, const char* label, const char* band, int rank) {
    if (sum->cur_step != step) {
        bands_settle(sum);
        sum->cur_step = step;
        sum->cur_rank = 0;
        sum->cur[0] = 0;
    }
    if (rank > sum->cur_rank) sum->cur_rank = rank;
    size_t used = strlen(sum->cur);
    snprintf(sum->cur + used, sizeof sum->cur - used, "%s%s %s", used ? ", " : "", label, band);
}

// Elements beyond max(tolerance, rounding band): the band admits what another correctly rounded
// ordering of the same formulas can reach (RoundingBand; NaN band = none: exact only).
size_t conform_count_beyond_band(const float* x, const float* ref, size_t n, const Tolerance* tol, const double* moved,
                                 const double* band, double* used) {
    size_t beyond = 0;
    *used = 0;
    for (size_t i = 0; i < n; i++) {
        double a = x[i], b = ref[i], allowed;
        if ((isnan(a) && isnan(b)) || memcmp(&x[i], &ref[i], 4) == 0) continue;
        double err = (isnan(a) || isnan(b) || isinf(a) || isinf(b)) ? INFINITY : fabs(a - b);
        allowed = tol->atol + tol->rtol * fabs(b) + (moved && tol->move_k > 0 ? tol->move_k * moved[i] : 0);
        if (isfinite(band[i]) && band[i] > allowed) allowed = band[i];
        double u = err == 0 ? 0 : allowed > 0 ? err / allowed : INFINITY;
        if (u > *used) *used = u;
        if (u > 1) beyond++;
    }
    return beyond;
}

// Codes outside the codes their band reaches below and above the golden's (code_band_pack;
// NaN: identical only).
size_t conform_codes_beyond_band(const uint8_t* x, const uint8_t* ref, size_t n, const double* band, double* used) {
    size_t beyond = 0;
    *used = 0;
    for (size_t i = 0; i < n; i++) {
        const int dist = (int)x[i] - (int)ref[i];
        if (!dist) continue;
        const int allowed = isnan(band[i]) ? 0 : dist < 0 ? code_band_down(band[i]) : code_band_up(band[i]);
        const double u = allowed ? (double)abs(dist) / allowed : INFINITY;
        if (u > *used) *used = u;
        if (u > 1) beyond++;
    }
    return beyond;
}

static void compare_tensor(const char* tol_name, const char* case_id, int64_t step, const char* kind,
                           const StTensor* exp, DType got_dt, const TensorShape* got_shape,
                           const void* got, const double* moved, const double* band, FILE* log, ConformSummary* sum) {
    const char* label = kind;
    if (got == NULL || exp->dtype != got_dt || !shape_equal(exp, got_shape)) {
        if (log) fprintf(log, "optim/%s/%s step%lld %s: FAIL %s\n", tol_name, case_id, (long long)step, label,
                         got == NULL ? "missing from our state" : "dtype/shape differs from the library's");
        record(sum, false, INFINITY, step, label);
        note_band(sum, step, label, "unusable (missing or of another dtype/shape)", 2);
        return;
    }
    Tolerance tol = conform_tolerance(tol_name, kind, step);
    if (exp->dtype == DTYPE_U8) {
        CompareU8 c = compare_u8(got, exp->data, exp->numel);
        bool ok = c.frac_equal >= tol.min_code_equal && c.max_dist <= tol.max_code_dist, rounding_only = false;
        double bused = 0;
        if (!ok && band && conform_codes_beyond_band(got, exp->data, exp->numel, band, &bused) == 0) ok = rounding_only = true;
        if (log) fprintf(log, "optim/%s/%s step%lld %s: codes identical %.4f%% (%zu/%zu), max distance %d -> %s\n",
                         tol_name, case_id, (long long)step, label, 100 * c.frac_equal, c.n_equal, c.n,
                         c.max_dist, ok ? "ok" : "FAIL");
        if (c.frac_equal < sum->min_code_equal) sum->min_code_equal = c.frac_equal;
        if (c.max_dist > sum->max_code_dist) sum->max_code_dist = c.max_dist;
        // share used: the larger of (codes differing / allowed) and (distance / allowed)
        double used = 0;
        if (c.frac_equal < 1) used = tol.min_code_equal < 1 ? (1 - c.frac_equal) / (1 - tol.min_code_equal) : INFINITY;
        if (c.max_dist > 0) used = fmax(used, tol.max_code_dist > 0 ? (double)c.max_dist / tol.max_code_dist : INFINITY);
        if (rounding_only) {
            if (log) fprintf(log, "optim/%s/%s step%lld %s: every differing code within the rounding-order band -> conforms\n",
                             tol_name, case_id, (long long)step, label);
            sum->n_rounding_only++;
            used = bused;  // the largest share of the codes the band reaches on that side
        }
        record(sum, ok, used, step, label);
        note_band(sum, step, label, c.n_equal == c.n ? "bit-exact" : rounding_only ? "differs by rounding only"
                                    : ok ? "within tolerance" : "FAILS", ok ? rounding_only : 2);
        return;
    }
    float* ref = NULL;
    float one;
    if (exp->dtype == DTYPE_F32) {
        ref = (float*)exp->data;
    } else if (exp->dtype == DTYPE_I64 && exp->numel == 1) {
        one = (float)*(const int64_t*)exp->data;
        ref = &one;
        got_dt = DTYPE_F32;
        if (got != NULL) {  // ours is an I64 too (same dtype checked above): compare as float
            static float got_f;
            got_f = (float)*(const int64_t*)got;
            got = &got_f;
        }
    } else {
        if (log) fprintf(log, "optim/%s/%s step%lld %s: FAIL unsupported golden dtype %s\n", tol_name, case_id,
                         (long long)step, label, dtype_name(exp->dtype));
        record(sum, false, INFINITY, step, label);
        return;
    }
    CompareF32 c = compare_f32_scaled(got, ref, exp->numel, tol.atol, tol.rtol,
                                      tol.move_k > 0 && exp->numel > 1 ? moved : NULL, tol.move_k);
    if (log) fprintf(log, "optim/%s/%s step%lld %s: max_abs=%.3g max_rel=%.3g max_ulp=%u exact=%.1f%% worst[%zu] got=%.9g ref=%.9g used=%.1f%% -> %s\n",
                     tol_name, case_id, (long long)step, label, c.max_abs, c.max_rel, c.max_ulp,
                     c.n ? 100.0 * (double)c.n_exact / (double)c.n : 100.0, c.worst, c.worst_got,
                     c.worst_ref, 100 * c.used, c.ok ? "ok" : "FAIL");
    size_t n_same = 0;  // bit-identical, or NaN where the golden has NaN (sign and payload are not compared)
    for (size_t i = 0; i < exp->numel; i++)
        n_same += memcmp((const float*)got + i, ref + i, 4) == 0 || (isnan(((const float*)got)[i]) && isnan(ref[i]));
    bool ok = c.ok, rounding_only = false;
    double used = c.used;
    if (!ok && band) {
        double bused;
        size_t beyond = conform_count_beyond_band(got, ref, exp->numel, &tol, tol.move_k > 0 && exp->numel > 1 ? moved : NULL,
                                          band, &bused);
        if (beyond == 0) {
            ok = rounding_only = true;
            used = bused;
        }
        if (log) fprintf(log, "optim/%s/%s step%lld %s: rounding-order band: %zu element(s) beyond it, %.1f%% of it used -> %s\n",
                         tol_name, case_id, (long long)step, label, beyond, 100 * bused, beyond ? "FAIL" : "conforms");
    }
    if (c.used > sum->worst_used) sum->worst_used = c.used;
    if (!strcmp(kind, "param") && c.max_ulp > sum->worst_ulp_param) sum->worst_ulp_param = c.max_ulp;
    if (strcmp(kind, "param") && c.max_ulp > sum->worst_ulp_state) sum->worst_ulp_state = c.max_ulp;
    if (rounding_only) sum->n_rounding_only++;
    record(sum, ok, used, step, label);
    note_band(sum, step, label, n_same == exp->numel ? "bit-exact" : rounding_only ? "differs by rounding only"
                                : ok ? "within tolerance" : "FAILS", ok ? rounding_only : 2);
}

// The band of the band reference's state tensor `name` (NULL: none).
static const double* band_of(const RoundingBand* b, const OptimState* bstate, const char* name) {
    if (!bstate) return NULL;
    for (int i = 0; i < bstate->n_tensors; i++)
        if (!strcmp(bstate->tensors[i].name, name)) return b->state[i];
    return NULL;
}

static bool optim_state_find_name_in(char names[][64], int n, const char* name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return true;
    return false;
}

static bool in_list(const char* list, int64_t k) {
    const char* p = list;
    while (p && *p) {
        char* end;
        long long v = strtoll(p, &end, 10);
        if (end == p) return false;
        if (v == k) return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

// ---- plugins wrapped as an Optimizer (state in statics: one plugin per process) ----
static const TrainbenchOptimizerPlugin* g_plugin;
static Optimizer g_plugin_optim;
static char g_plugin_name[160];
static char g_ext_error[512];            // set when the optimizer under test refused; "" otherwise
static const char* g_case_hparams = "{}";  // the running case's hparams JSON (for the plugin)

typedef struct {
    OptimState base;   // tensors[] alias the plugin's buffers (refreshed after every call)
    void* ps;          // the plugin's state
} PluginState;

_Static_assert(TRAINBENCH_PLUGIN_MAX_STATE <= OPTIM_MAX_STATE, "plugin state must fit an OptimState");
_Static_assert(TRAINBENCH_PLUGIN_MAX_DIMS == OPTIM_MAX_DIMS, "plugin dims must match TensorShape");

static bool plugin_dtype(int32_t code, DType* out) {
    static const DType MAP[] = {DTYPE_COUNT, DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_F64, DTYPE_U8, DTYPE_I32, DTYPE_I64};
    if (code < 1 || code > TRAINBENCH_DTYPE_I64) return false;
    *out = MAP[code];
    return true;
}

// Copies the plugin's state listing into s->base.tensors; false (g_ext_error set) when the
// listing is malformed.
static bool plugin_refresh(PluginState* s) {
    TrainbenchTensor t[TRAINBENCH_PLUGIN_MAX_STATE];
    memset(t, 0, sizeof t);
    int32_t n = g_plugin->list_state(s->ps, t, TRAINBENCH_PLUGIN_MAX_STATE);
    if (n < 0 || n > TRAINBENCH_PLUGIN_MAX_STATE) {
        snprintf(g_ext_error, sizeof g_ext_error, "list_state returned %d entries (allowed 0..%d)", (int)n,
                 TRAINBENCH_PLUGIN_MAX_STATE);
        return false;
    }
    for (int32_t i = 0; i < n; i++) {
        StateTensor* d = &s->base.tensors[i];
        const char* why = NULL;
        if (!t[i].name || !t[i].name[0] || strlen(t[i].name) >= sizeof d->name) why = "a name of 1..63 characters";
        else if (!plugin_dtype(t[i].dtype, &d->dtype)) why = "a dtype code TRAINBENCH_DTYPE_F32..I64 (1..7)";
        else if (t[i].ndim < 0 || t[i].ndim > TRAINBENCH_PLUGIN_MAX_DIMS) why = "ndim 0..4";
        if (!why) {
            d->shape.ndim = t[i].ndim;
            for (int k = 0; k < OPTIM_MAX_DIMS; k++) d->shape.dims[k] = k < t[i].ndim ? t[i].dims[k] : 0;
            for (int k = 0; k < t[i].ndim; k++)
                if (t[i].dims[k] < 0 || t[i].dims[k] > (int64_t)1 << 40) why = "dims in 0..2^40";
        }
        if (!why && !t[i].data) why = "a data pointer";
        if (why) {
            snprintf(g_ext_error, sizeof g_ext_error, "list_state entry %d (%s) needs %s", (int)i,
                     t[i].name ? t[i].name : "no name", why);
            return false;
        }
        snprintf(d->name, sizeof d->name, "%s", t[i].name);
        d->data = (void*)t[i].data;
    }
    s->base.n_tensors = n;
    return true;
}

static OptimState* plugin_init(const TensorShape* shape, const OptimConfig* c) {
    TrainbenchHparams hp = {
        .optimizer = g_plugin_optim.name, .hparams_json = g_case_hparams, .lr = c->lr, .beta1 = c->beta1,
        .beta2 = c->beta2, .has_beta1 = c->has_beta1, .eps = c->eps, .weight_decay = c->weight_decay,
        .eps1 = c->eps1, .eps2 = c->eps2, .clip_threshold = c->clip_threshold, .decay_rate = c->decay_rate,
        .d = c->d, .scale_parameter = c->scale_parameter, .relative_step = c->relative_step,
        .warmup_init = c->warmup_init, .block_size = c->block_size, .min_8bit_size = (int64_t)c->min_8bit_size,
        .amsgrad = c->amsgrad, .maximize = c->maximize, .foreach = c->foreach,
    };
    const char* err = NULL;
    void* ps = g_plugin->create(shape->ndim, shape->dims, &hp, &err);
    if (!ps) {
        snprintf(g_ext_error, sizeof g_ext_error, "create refused: %s", err ? err : "(no message)");
        return NULL;
    }
    PluginState* s = (PluginState*)optim_state_new(&g_plugin_optim, sizeof *s, shape);
    s->ps = ps;
    plugin_refresh(s);
    return &s->base;
}

static void plugin_step(OptimState* st, float* p, const float* g, const OptimConfig* c) {
    PluginState* s = (PluginState*)st;
    const char* err = g_plugin->step(s->ps, p, g, (int64_t)shape_numel(&st->shape));
    if (err) {
        snprintf(g_ext_error, sizeof g_ext_error, "step %lld: %s", (long long)st->step + 1, err);
        return;
    }
    st->step++;
    plugin_refresh(s);
}

static void plugin_free(OptimState* st) {
    g_plugin->destroy(((PluginState*)st)->ps);
    free(st);  // the tensors belong to the plugin
}

Status conform_plugin_load(const char* path, const char* optim_name, const Optimizer** out, ConformPluginInfo* info) {
    memset(info, 0, sizeof *info);
    // dlopen searches the library path for a name without '/': make "lib.so" mean ./lib.so
    char p[4096];
    snprintf(p, sizeof p, "%s%s", strchr(path, '/') ? "" : "./", path);
    struct stat sb;  // dlopen of a FIFO would wait for a writer
    if (stat(p, &sb) != 0)
        return status_make(STATUS_INVALID, "cannot load plugin %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return status_make(STATUS_INVALID, "cannot load plugin %s: not a regular file (a shared library is)", path);
    void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) return status_make(STATUS_INVALID, "cannot load plugin %s: %s", path, dlerror());
    TrainbenchPluginEntry entry = (TrainbenchPluginEntry)dlsym(h, TRAINBENCH_PLUGIN_SYMBOL);
    if (!entry)
        return status_make(STATUS_INVALID, "plugin %s does not export %s() (see src/validate/trainbench_plugin.h)", path,
                           TRAINBENCH_PLUGIN_SYMBOL);
    const TrainbenchOptimizerPlugin* pl = entry();
    if (!pl) return status_make(STATUS_INVALID, "plugin %s: %s() returned NULL", path, TRAINBENCH_PLUGIN_SYMBOL);
    info->abi_version = pl->abi_version;
    if (pl->abi_version < TRAINBENCH_PLUGIN_ABI_OLDEST || pl->abi_version > TRAINBENCH_PLUGIN_ABI_VERSION)
        return status_make(STATUS_INVALID, "plugin %s was built for plugin ABI version %u, this trainbench speaks "
                           "versions %d to %d: rebuild it against this trainbench's src/validate/trainbench_plugin.h",
                           path, pl->abi_version, TRAINBENCH_PLUGIN_ABI_OLDEST, TRAINBENCH_PLUGIN_ABI_VERSION);
    snprintf(info->name, sizeof info->name, "%s", pl->name ? pl->name : "(unnamed)");
    snprintf(info->implements, sizeof info->implements, "%s", pl->implements ? pl->implements : "");
    const char* missing = !pl->create ? "create" : !pl->step ? "step" : !pl->list_state ? "list_state"
                        : !pl->destroy ? "destroy" : NULL;
    if (missing) return status_make(STATUS_INVALID, "plugin %s: function %s is NULL (all four are required)", path, missing);
    const char* target = optim_name ? optim_name : info->implements;
    const Optimizer* base = optim_find(target);
    if (!base)
        return status_make(STATUS_INVALID, "plugin %s implements '%s', which is not a registered optimizer "
                           "(allowed: %s); pass --optim NAME", path, target, optim_names_list());
    g_plugin = pl;
    snprintf(g_plugin_name, sizeof g_plugin_name, "plugin %s", info->name);
    g_plugin_optim = (Optimizer){
        .name = base->name,  // its goldens and tolerances apply
        .reference = g_plugin_name,
        .defaults = base->defaults,
        .validate = base->validate,
        .keywords = base->keywords,
        .constructor_defaults = base->constructor_defaults,
        .state_bytes = base->state_bytes,
        .init = plugin_init,
        .step = plugin_step,
        .free = plugin_free,
    };
    *out = &g_plugin_optim;
    return status_ok();
}

// ---- running a case ----
// A runnable optimizer: what steps, how its config comes from the case's hparams.
typedef struct {
    const Optimizer* o;
    const Optimizer* parse_as;      // NULL: o
    void (*tweak)(OptimConfig* c);  // NULL: none
    bool tweak_must_change;         // a pure tweak that changes nothing does not apply
    const char* mistake;            // the known mistake's id (NULL: none)
} Runner;

static Runner runner_of_mistake(const OptimMistake* m) {
    Runner r = {m->variant ? m->variant : optim_find(m->optim), m->parse_as, m->tweak,
                m->tweak && !m->variant && !m->parse_as, m->id};
    CHECK(r.o, "mistake %s of unknown optimizer %s", m->id, m->optim);
    return r;
}

static Status runner_config(const Runner* r, json_t* hp, OptimConfig* cfg) {
    Status s = r->parse_as ? optim_config_from_json_skipping(r->parse_as, hp, cfg) : optim_config_from_json(r->o, hp, cfg);
    if (!status_is_ok(s) || !r->tweak) return s;
    OptimConfig before = *cfg;
    r->tweak(cfg);
    if (r->tweak_must_change && !memcmp(&before, cfg, sizeof before))
        return status_make(STATUS_UNSUPPORTED, "changes nothing for this case");
    return status_ok();
}

// A usable optimizer golden lists check steps 1..T (T = input.grads' first dim) and holds, at
// each of them, expect.step{k}.param, expect.step{k}.state.step and every state tensor the
// library keeps for this case (the state keys of `optim_name`'s registered optimizer, run on
// the case's hparams and shape: exp_avg, exp_avg_sq_row, absmax1, ...). Anything less would
// make a comparison silently pass (a missing state tensor) or blame the optimizer (a missing
// step): STATUS_INVALID naming the file, what is missing and why it is required.
Status conform_golden_validate(const SafeTensors* st, const char* optim_name) {
    const StTensor* p0 = st_find(st, "input.param");
    const StTensor* grads = st_find(st, "input.grads");
    const char* checks = st_meta(st, "check_steps");
    const char* hparams = st_meta(st, "hparams");
    if (!st_meta(st, "case") || !hparams || !checks || !p0 || !grads || p0->dtype != DTYPE_F32 ||
        grads->ndim != p0->ndim + 1 || p0->ndim > OPTIM_MAX_DIMS)
        return status_make(STATUS_INVALID, "%s: not an optimizer golden (needs metadata case, hparams, "
                           "check_steps and tensors input.param (F32), input.grads (T, *param shape))", st->path);
    for (int d = 0; d < p0->ndim; d++)
        if (grads->shape[d + 1] != p0->shape[d])
            return status_make(STATUS_INVALID, "%s: unusable golden: input.grads dim %d is %lld, input.param's is %lld",
                               st->path, d + 1, (long long)grads->shape[d + 1], (long long)p0->shape[d]);
    const int64_t T = grads->shape[0];
    // the state keys the library keeps for this case: our registered optimizer's, plus "step"
    const Optimizer* reg = optim_find(optim_name);
    CHECK(reg, "unknown optimizer %s", optim_name);
    json_error_t jerr;
    json_t* hp = json_loads(hparams, 0, &jerr);
    if (!hp) return status_make(STATUS_INVALID, "%s: unusable golden: hparams is not JSON: %s", st->path, jerr.text);
    OptimConfig cfg;
    Status s = optim_config_from_json(reg, hp, &cfg);
    json_decref(hp);
    if (!status_is_ok(s)) return status_make(STATUS_INVALID, "%s: %s", st->path, s.msg);
    TensorShape shape = {p0->ndim, {0}};
    for (int d = 0; d < p0->ndim; d++) shape.dims[d] = p0->shape[d];
    OptimState* ref = reg->init(&shape, &cfg);
    char names[OPTIM_MAX_STATE + 1][64];
    int n_names = 0;
    for (int i = 0; i < ref->n_tensors; i++) snprintf(names[n_names++], sizeof names[0], "%s", ref->tensors[i].name);
    reg->free(ref);
    if (!optim_state_find_name_in(names, n_names, "step")) snprintf(names[n_names++], sizeof names[0], "step");
    if (!*checks) return status_make(STATUS_INVALID, "%s: unusable golden: check_steps is empty", st->path);
    const char* q = checks;
    while (*q) {
        char* end;
        long long k = strtoll(q, &end, 10);
        if (end == q || (*end && *end != ','))
            return status_make(STATUS_INVALID, "%s: unusable golden: check_steps '%s' is not a comma list of steps",
                               st->path, checks);
        if (k < 1 || k > T)
            return status_make(STATUS_INVALID, "%s: unusable golden: check_steps lists step %lld, but input.grads has "
                               "steps 1..%lld", st->path, k, (long long)T);
        char key[700];
        snprintf(key, sizeof key, "expect.step%lld.param", k);
        if (!st_find(st, key))
            return status_make(STATUS_INVALID, "%s: unusable golden: check_steps lists step %lld but it has no %s",
                               st->path, k, key);
        for (int i = 0; i < n_names; i++) {
            snprintf(key, sizeof key, "expect.step%lld.state.%s", k, names[i]);
            if (!st_find(st, key))
                return status_make(STATUS_INVALID, "%s: unusable golden: it lacks %s (%s keeps '%s' in its state on "
                                   "this case: a golden without it could not catch a wrong %s)", st->path, key,
                                   reg->name, names[i], names[i]);
        }
        q = *end ? end + 1 : end;
    }
    return status_ok();
}

// The core: runs `subject` over the case; the expected values are the golden's, or (ref !=
// NULL) those of `ref` run in lockstep on the same inputs. params_only: skip state tensors.
static Status run_case(const char* tol_name, const Runner* subject, const Runner* ref, bool params_only,
                       const char* path, FILE* log, ConformSummary* sum) {
    memset(sum, 0, sizeof *sum);
    sum->min_code_equal = 1.0;
    g_ext_error[0] = 0;
    SafeTensors st;
    Status s = st_read(path, &st);
    if (!status_is_ok(s)) return s;
    s = conform_golden_validate(&st, tol_name);
    if (!status_is_ok(s)) {
        st_free(&st);
        return s;
    }
    // torch.sqrt's MKL kernel on the machine that made the golden (metadata torch_sqrt, written
    // by reference/random_optim_cases.py; absent: the committed goldens' AMD machine, mkl-sse),
    // for every torch_sqrtf of this case (ours and the reference computations), then restored
    const TorchSqrtKernel sqrt_before = g_torch_sqrt_kernel;
    const char* sqrt_meta = st_meta(&st, "torch_sqrt");
    TorchSqrtKernel sqrt_kernel = TORCH_SQRT_MKL_SSE;
    if (sqrt_meta && !torch_sqrt_kernel_parse(sqrt_meta, &sqrt_kernel)) {
        Status e = status_make(STATUS_INVALID, "%s: unusable golden: metadata torch_sqrt '%.40s' is not a known "
                               "kernel (allowed: mkl-sse, mkl-avx512)", path, sqrt_meta);
        st_free(&st);
        return e;
    }
    if (!torch_sqrt_set_kernel(sqrt_kernel)) {
        Status e = status_make(STATUS_UNSUPPORTED, "does not apply here: the golden's torch.sqrt is MKL's %s kernel, "
                               "whose model needs AVX-512F (vrsqrt14ps), which this CPU lacks", sqrt_meta);
        st_free(&st);
        return e;
    }
    const char* case_id = st_meta(&st, "case");
    const char* hparams = st_meta(&st, "hparams");
    const char* checks = st_meta(&st, "check_steps");
    const StTensor* p0 = st_find(&st, "input.param");
    const StTensor* grads = st_find(&st, "input.grads");
    json_error_t jerr;
    json_t* hp = json_loads(hparams, 0, &jerr);
    OptimConfig cfg, rcfg, bcfg;
    s = hp ? runner_config(subject, hp, &cfg) : status_make(STATUS_INVALID, "hparams is not JSON: %s", jerr.text);
    if (status_is_ok(s) && ref) {
        Status rs = runner_config(ref, hp, &rcfg);
        if (!status_is_ok(rs)) s = status_make(STATUS_UNSUPPORTED, "does not apply: %s", rs.msg);
    }
    // The rounding-order band follows the expected values' trajectory: the golden's (our
    // registered optimizer replays it bit for bit) or the variant's.
    const Optimizer* band_o = ref ? ref->o : optim_find(tol_name);
    RoundingBandStep band_step = rounding_band_of(band_o);
    if (status_is_ok(s) && !ref && band_step && !status_is_ok(optim_config_from_json(band_o, hp, &bcfg)))
        band_step = NULL;
    if (!band_step) band_o = NULL;
    json_decref(hp);
    if (!status_is_ok(s)) {
        Status e = status_make(s.code, "%s: %s", path, s.msg);
        st_free(&st);
        torch_sqrt_set_kernel(sqrt_before);
        return e;
    }
    TensorShape shape = {p0->ndim, {0}};
    for (int d = 0; d < p0->ndim; d++) shape.dims[d] = p0->shape[d];
    const size_t n = p0->numel;
    const int64_t T = grads->shape[0];
    float* all_grads = NULL;
    s = st_tensor_to_f32(grads, &all_grads);
    if (!status_is_ok(s)) {
        st_free(&st);
        torch_sqrt_set_kernel(sqrt_before);
        return s;
    }
    float* p = xaligned_alloc(n * sizeof(float) + 4);
    memcpy(p, p0->data, n * sizeof(float));
    float* rp = NULL;  // the reference variant's param (lockstep)
    OptimState* rstate = NULL;
    if (ref) {
        rp = xaligned_alloc(n * sizeof(float) + 4);
        memcpy(rp, p0->data, n * sizeof(float));
        rstate = ref->o->init(&shape, &rcfg);
    }
    // band: the band reference's own lockstep state (bp, bstate) unless the variant is the reference
    RoundingBand band = {.n = n};
    float *bp = NULL, *bp_prev = NULL;
    OptimState* bstate = NULL;
    const OptimConfig* band_cfg = ref ? &rcfg : &bcfg;
    if (band_o) {
        bp_prev = xaligned_alloc(n * sizeof(float) + 4);
        if (!ref) {
            bp = xaligned_alloc(n * sizeof(float) + 4);
            memcpy(bp, p0->data, n * sizeof(float));
            bstate = band_o->init(&shape, &bcfg);
        } else {
            bp = rp;
            bstate = rstate;
        }
        rounding_band_alloc(&band, n, bstate);
        rounding_band_follow(&band, band_o, ref ? ref->mistake : NULL);
    }
    g_case_hparams = hparams;
    OptimState* state = subject->o->init(&shape, &cfg);
    float* before = xaligned_alloc(n * sizeof(float) + 4);
    double* moved = xcalloc(n ? n : 1, sizeof(double));  // cumulative |p_t - p_(t-1)|
    for (int64_t t = 1; t <= T && state && !g_ext_error[0]; t++) {
        memcpy(before, p, n * sizeof(float));
        subject->o->step(state, p, all_grads + (size_t)(t - 1) * n, &cfg);
        if (g_ext_error[0]) break;
        if (band_o) memcpy(bp_prev, bp, n * sizeof(float));
        if (ref) ref->o->step(rstate, rp, all_grads + (size_t)(t - 1) * n, &rcfg);
        if (band_o && !ref) band_o->step(bstate, bp, all_grads + (size_t)(t - 1) * n, &bcfg);
        if (band_o) band_step(&band, bstate, bp_prev, bp, all_grads + (size_t)(t - 1) * n, band_cfg);
        for (size_t i = 0; i < n; i++) moved[i] += fabs((double)p[i] - (double)before[i]);
        if (!in_list(checks, t)) continue;
        char key[256];
        snprintf(key, sizeof key, "expect.step%lld.param", (long long)t);
        const StTensor* ep = st_find(&st, key);
        if (!ep) {
            if (log) fprintf(log, "optim/%s/%s step%lld: FAIL golden lacks %s\n", tol_name, case_id, (long long)t, key);
            record(sum, false, INFINITY, t, "param");
            continue;
        }
        StTensor rview;
        if (ref) {  // the variant's param in place of the golden's
            rview = *ep;
            rview.data = rp;
            ep = &rview;
        }
        compare_tensor(tol_name, case_id, t, "param", ep, DTYPE_F32, &shape, p, moved, band.param, log, sum);
        if (params_only) continue;
        // every state tensor the library kept at this step
        char prefix[64];
        int plen = snprintf(prefix, sizeof prefix, "expect.step%lld.state.", (long long)t);
        for (size_t i = 0; i < st.n_tensors; i++) {
            const StTensor* et = &st.tensors[i];
            if (strncmp(et->name, prefix, (size_t)plen) != 0) continue;
            const char* name = et->name + plen;
            StTensor rt;
            int64_t ref_step_i;
            float ref_step_f;
            if (ref) {  // the variant's tensor of that name in place of the golden's
                const StateTensor* r = optim_state_find(rstate, name);
                if (!r && ref->o->find_shared_state) r = ref->o->find_shared_state(name);
                rt = *et;
                if (r) {
                    rt.dtype = r->dtype;
                    rt.ndim = r->shape.ndim;
                    for (int d = 0; d < ST_MAX_NDIM; d++) rt.shape[d] = d < r->shape.ndim ? r->shape.dims[d] : 0;
                    rt.numel = shape_numel(&r->shape);
                    rt.data = r->data;
                } else if (!strcmp(name, "step")) {  // the variant keeps a Python int, as the library
                    ref_step_i = rstate->step;
                    ref_step_f = (float)rstate->step;
                    rt.data = et->dtype == DTYPE_I64 ? (void*)&ref_step_i : (void*)&ref_step_f;
                } else {
                    continue;  // not kept by the variant (a params_only variant differs in keys)
                }
                et = &rt;
            }
            const StateTensor* ours = optim_state_find(state, name);
            if (!ours && subject->o->find_shared_state) ours = subject->o->find_shared_state(name);
            if (ours) {
                compare_tensor(tol_name, case_id, t, name, et, ours->dtype, &ours->shape, ours->data, moved,
                               band_of(&band, bstate, name), log, sum);
            } else if (!strcmp(name, "step")) {  // the library keeps a Python int: compare our count
                float ours_step = (float)state->step;
                int64_t ours_step_i = state->step;
                TensorShape scalar = {0, {0}};
                compare_tensor(tol_name, case_id, t, name, et, et->dtype == DTYPE_I64 ? DTYPE_I64 : DTYPE_F32,
                               &scalar, et->dtype == DTYPE_I64 ? (void*)&ours_step_i : (void*)&ours_step, NULL, NULL, log, sum);
            } else {
                compare_tensor(tol_name, case_id, t, name, et, et->dtype, &shape, NULL, NULL, NULL, log, sum);
            }
        }
    }
    bands_settle(sum);
    if (state) subject->o->free(state);
    if (rstate) ref->o->free(rstate);
    if (band_o && !ref) {
        band_o->free(bstate);
        free(bp);
    }
    free(bp_prev);
    rounding_band_free(&band);
    free(rp);
    free(before);
    free(moved);
    free(p);
    free(all_grads);
    st_free(&st);
    torch_sqrt_set_kernel(sqrt_before);
    g_case_hparams = "{}";
    if (g_ext_error[0]) return status_make(STATUS_UNSUPPORTED, "%s", g_ext_error);
    return status_ok();
}

Status conform_run_case(const Optimizer* o, const char* path, FILE* log, ConformSummary* sum) {
    Runner r = {o, NULL, NULL, false, NULL};
    return run_case(o->name, &r, NULL, false, path, log, sum);
}

Status conform_run_case_vs_mistake(const Optimizer* o, const char* path, const OptimMistake* m, FILE* log,
                                   ConformSummary* sum) {
    Runner r = {o, NULL, NULL, false, NULL}, ref = runner_of_mistake(m);
    return run_case(o->name, &r, &ref, m->params_only, path, log, sum);
}

Status conform_run_mistake(const OptimMistake* m, const char* path, FILE* log, ConformSummary* sum) {
    Runner r = runner_of_mistake(m);
    return run_case(m->optim, &r, NULL, m->params_only, path, log, sum);
}

// ======================= the `trainbench conform` command =======================
// Every case runs in a forked child: a plugin that crashes, hangs or corrupts memory takes
// down only its case. The parent never loads the plugin at all: a first child loads it and
// reports name, ABI version and `implements` (a crash in the plugin's constructors is then a
// clear exit 2, not a dead trainbench), then each case's child loads it again (cheap) and
// sends back a fixed-size result through a pipe; the parent waits with a timeout.
// The parent runs no OpenMP region before forking (libgomp's thread pool does not survive a
// fork), so the children may.

static int conform_cmd_run(int argc, char** argv);

const Command cmd_conform = {
    .name = "conform",
    .summary = "run every optimizer golden case through a plugin (or a built-in optimizer): pass/fail table",
    .usage = "trainbench conform (--plugin LIB.so [--optim NAME] | --optim NAME) [--case GLOB[,GLOB...]] [--timeout SEC] "
             "[--goldens DIR] [--verbose] [--list-mistakes] [--json] [--junit FILE]\n"
             "  --junit FILE  also write a JUnit XML report: one test case per golden case\n"
             "  --json  print conform.json (a result folder's conformance file: one case per golden, id, ok, detail)\n"
             "          on stdout instead of the table; exit status as without it",
    .run = conform_cmd_run,
};

#define RESULT_MAGIC 0x54424346u  // "TBCF"
#define CONFORM_DEFAULT_TIMEOUT 60

typedef struct {
    const char* plugin;  // NULL: the built-in optimizer
    const char* optim;   // --optim, or the plugin's `implements`
    const char* glob;
    long timeout;
    bool verbose;
    bool as_json;
    const char* junit;
} Options;

typedef struct {
    uint32_t magic;
    int32_t code;     // StatusCode of the run (plugin load, golden, plugin's own error)
    char msg[512];
    ConformSummary sum;
    ConformPluginInfo info;  // the probe child's answer
} ChildResult;

typedef struct {
    uint32_t magic;
    char text[1024];
} ChildDiagnosis;

static void write_all(int fd, const void* buf, size_t n) {
    const char* p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;  // the parent went away: nothing to tell anyone
        p += w;
        n -= (size_t)w;
    }
}

// In a child: fatal signals take their default action, so a crash in the plugin ends the
// child with that signal (under ASan its handler would print a report and exit 1 instead).
static void child_default_signals(void) {
    static const int SIGS[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < ARRAY_LEN(SIGS); i++) signal(SIGS[i], SIG_DFL);
}

static const Optimizer* child_optimizer(const Options* op, ChildResult* r) {
    if (!op->plugin) return optim_find(op->optim);
    const Optimizer* o = NULL;
    Status s = conform_plugin_load(op->plugin, op->optim, &o, &r->info);
    if (!status_is_ok(s)) {
        r->code = s.code;
        snprintf(r->msg, sizeof r->msg, "%s", s.msg);
        return NULL;
    }
    return o;
}

// Replays a failing case against every known mistake of its optimizer. A mistake fits when
// (1) it changes this case's outputs beyond tolerance and rounding-order band (the variant
// itself fails the golden) and (2) the candidate reproduces the variant within that band: a fit
// in any rounding style, never a guess. Of the fits, those within twice the closest fit's share
// of its band are named (two mistakes with tiny effects on a one-element case can both "fit";
// the closer one is the diagnosis). The tensors' bands come first.
static void diagnose(const Optimizer* o, const char* path, const ConformSummary* sum, char* out, size_t len) {
    size_t n_tried = 0, n_fit = 0;
    size_t used = (size_t)snprintf(out, len, "step%lld: %s; ", (long long)sum->bands_step, sum->bands);
    const OptimMistake* fit[64];
    double fit_used[64], best = INFINITY;
    for (size_t i = 0; i < optim_mistake_count(); i++) {
        const OptimMistake* m = optim_mistake_at(i);
        if (strcmp(m->optim, o->name) != 0) continue;
        ConformSummary ms, own;
        Status s = conform_run_case_vs_mistake(o, path, m, NULL, &ms);
        if (!status_is_ok(s)) continue;  // does not apply to this case
        n_tried++;
        if (!(ms.n_failed == 0 && ms.n_compared > 0)) continue;
        if (!status_is_ok(conform_run_mistake(m, path, NULL, &own)) || own.n_failed == 0) continue;  // no effect here
        if (n_fit < 64) {
            fit[n_fit] = m;
            fit_used[n_fit++] = ms.worst_any_used;
            if (ms.worst_any_used < best) best = ms.worst_any_used;
        }
    }
    size_t head = used;
    for (size_t k = 0; k < n_fit; k++)
        if (fit_used[k] <= 2 * best)
            used += (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%s", used > head ? "; " : "consistent with: ",
                                     fit[k]->text);
    if (used == head)
        snprintf(out + used, used < len ? len - used : 0, "no known mistake fits (%zu tried); worst: %s", n_tried,
                 sum->worst_at);
}

static void child_run_case(const Options* op, const char* path, int fd) {
    child_default_signals();
    ChildResult r;
    memset(&r, 0, sizeof r);
    r.magic = RESULT_MAGIC;
    const Optimizer* o = child_optimizer(op, &r);
    if (o) {
        Status s = conform_run_case(o, path, op->verbose ? stdout : NULL, &r.sum);
        r.code = s.code;
        snprintf(r.msg, sizeof r.msg, "%s", s.msg);
    }
    fflush(stdout);
    write_all(fd, &r, sizeof r);  // the verdict first: a crash while diagnosing cannot lose it
    if (o && r.code == STATUS_OK && r.sum.n_failed) {
        ChildDiagnosis d = {RESULT_MAGIC, ""};
        diagnose(o, path, &r.sum, d.text, sizeof d.text);
        write_all(fd, &d, sizeof d);
    }
    fflush(stdout);
    _exit(0);
}

static void child_probe(const Options* op, int fd) {
    child_default_signals();
    ChildResult r;
    memset(&r, 0, sizeof r);
    r.magic = RESULT_MAGIC;
    r.code = child_optimizer(op, &r) ? STATUS_OK : r.code;
    write_all(fd, &r, sizeof r);
    _exit(0);
}

typedef struct {
    bool timed_out;
    int status;         // waitpid status
    size_t n;           // bytes received
    union {
        struct {
            ChildResult r;
            ChildDiagnosis d;
        } s;
        char bytes[sizeof(ChildResult) + sizeof(ChildDiagnosis)];
    } u;
} ChildOutcome;

static void outcome_sanitize(ChildOutcome* c);

// Forks; the child probes the plugin (path NULL) or runs the case at path. Collects what it writes until it exits or timeout_s passes
// (then SIGKILL).
static void run_child(const Options* op, const char* path, long timeout_s, ChildOutcome* out) {
    memset(out, 0, sizeof *out);
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) ABORT("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) ABORT("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        if (path) child_run_case(op, path, fds[1]);
        else child_probe(op, fds[1]);
    }
    close(fds[1]);
    const double deadline = now_seconds() + (double)timeout_s;
    for (;;) {
        double left = deadline - now_seconds();
        if (left <= 0) {
            out->timed_out = true;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int k = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) continue;  // re-check the deadline
        ssize_t got = read(fds[0], out->u.bytes + out->n, sizeof out->u.bytes - out->n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;  // EOF: the child exited (or closed the pipe)
        out->n += (size_t)got;
        if (out->n == sizeof out->u.bytes) break;  // all it sends; it exits next
    }
    if (out->timed_out) kill(pid, SIGKILL);
    close(fds[0]);
    while (waitpid(pid, &out->status, 0) < 0 && errno == EINTR) {}
    outcome_sanitize(out);
}

// The parent's side of the pipe is the plugin-result reader: the plugin ran in the child, so a
// misbehaving one may have scribbled over what was sent. Every string is cut at its last byte
// (the parent prints them with %s) and the numbers the table prints are clamped to sane ranges.
static void outcome_sanitize(ChildOutcome* c) {
    ChildResult* r = &c->u.s.r;
    r->msg[sizeof r->msg - 1] = 0;
    r->info.name[sizeof r->info.name - 1] = 0;
    r->info.implements[sizeof r->info.implements - 1] = 0;
    r->sum.worst_at[sizeof r->sum.worst_at - 1] = 0;
    r->sum.first_fail_at[sizeof r->sum.first_fail_at - 1] = 0;
    r->sum.bands[sizeof r->sum.bands - 1] = 0;
    r->sum.cur[sizeof r->sum.cur - 1] = 0;
    c->u.s.d.text[sizeof c->u.s.d.text - 1] = 0;
    if (r->code < 0 || r->code >= STATUS_COUNT) r->code = STATUS_INVALID;
    if (r->sum.n_failed > r->sum.n_compared) r->sum.n_failed = r->sum.n_compared ? r->sum.n_compared : 1;
}

static bool outcome_has_result(const ChildOutcome* c) {
    return c->n >= sizeof(ChildResult) && c->u.s.r.magic == RESULT_MAGIC;
}
static bool outcome_has_diagnosis(const ChildOutcome* c) {
    return c->n >= sizeof(ChildResult) + sizeof(ChildDiagnosis) && c->u.s.d.magic == RESULT_MAGIC;
}

// "SIGSEGV (Segmentation fault)" or "exit status 3"
static void describe_exit(int status, char* buf, size_t len) {
    if (WIFSIGNALED(status)) {
        const char* abbrev = sigabbrev_np(WTERMSIG(status));
        snprintf(buf, len, "SIG%s (%s)", abbrev ? abbrev : "?", strsignal(WTERMSIG(status)));
    } else {
        snprintf(buf, len, "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
}

static void format_used(double used, char* buf, size_t len) {
    if (isnan(used) || isinf(used)) snprintf(buf, len, "inf");
    else if (used * 100 < 1e5) snprintf(buf, len, "%.1f%%", 100 * used);
    else snprintf(buf, len, "%.2g%%", 100 * used);
}

static void case_id_of(const char* path, char* buf, size_t len) {
    const char* b = strrchr(path, '/');
    snprintf(buf, len, "%s", b ? b + 1 : path);
    char* dot = strstr(buf, ".safetensors");
    if (dot) *dot = 0;
}

// UNUSABLE: the golden itself cannot be used (conform_golden_validate: a missing step or state
// tensor, a check step past its last step, hparams this optimizer refuses): exit 2.
// CONFORMS: no comparison failed, but some passed only through the rounding-order band (a
// correct implementation with other fp32 roundings); PASS: bit-exact or within the tolerance.
typedef enum { V_PASS, V_CONFORMS, V_FAIL, V_CRASH, V_TIMEOUT, V_ERROR, V_UNUSABLE, V_COUNT } Verdict;
static const char* const VERDICT_NAMES[V_COUNT] = {"PASS", "CONFORMS", "FAIL", "CRASH", "TIMEOUT", "ERROR", "UNUSABLE"};

// One table row from a case's outcome: verdict, worst comparison, tolerance used, ulp, detail.
static Verdict verdict_of(const ChildOutcome* c, long timeout, const char* how, const char** worst, char* used,
                          size_t used_cap, char* ulp, size_t ulp_cap, char* detail, size_t detail_cap) {
    const ChildResult* r = &c->u.s.r;
    Verdict v;
    detail[0] = 0;
    if (!outcome_has_result(c) && c->timed_out) {
        v = V_TIMEOUT;
        snprintf(detail, detail_cap, "no result within %ld s (killed)", timeout);
    } else if (!outcome_has_result(c)) {
        v = V_CRASH;
        snprintf(detail, detail_cap, "%s%s", how,
                 WIFSIGNALED(c->status) ? "" : " before reporting a result (exit() in the plugin, or a sanitizer's report: see stderr)");
    } else if (r->code == STATUS_INVALID) {
        v = V_UNUSABLE;
        snprintf(detail, detail_cap, "%s", r->msg);
    } else if (r->code != STATUS_OK) {
        v = V_ERROR;
        snprintf(detail, detail_cap, "%s", r->msg);
    } else {
        v = r->sum.n_failed ? V_FAIL : r->sum.n_rounding_only ? V_CONFORMS : V_PASS;
        if (v == V_CONFORMS) snprintf(detail, detail_cap, "step%lld: %s", (long long)r->sum.bands_step, r->sum.bands);
        *worst = r->sum.worst_at;
        format_used(r->sum.worst_any_used, used, used_cap);
        if (r->sum.worst_ulp_param == UINT32_MAX) snprintf(ulp, ulp_cap, "NaN");
        else snprintf(ulp, ulp_cap, "%u", r->sum.worst_ulp_param);
        if (v == V_FAIL) {
            if (outcome_has_diagnosis(c)) snprintf(detail, detail_cap, "%s", c->u.s.d.text);
            else if (c->timed_out) snprintf(detail, detail_cap, "(no diagnosis: replaying known mistakes took over %ld s)", timeout);
            else snprintf(detail, detail_cap, "(no diagnosis: the child ended with %s while replaying known mistakes)", how);
        }
    }
    return v;
}

size_t conform_child_bytes_max(void) { return sizeof(((ChildOutcome*)0)->u.bytes); }

void conform_describe_child_bytes(const void* bytes, size_t n, int wait_status, char* line, size_t cap) {
    ChildOutcome c;
    memset(&c, 0, sizeof c);
    c.n = n < sizeof c.u.bytes ? n : sizeof c.u.bytes;
    memcpy(c.u.bytes, bytes, c.n);
    c.status = wait_status;
    outcome_sanitize(&c);
    char how[160], used[32] = "-", ulp[16] = "-", detail[1200];
    const char* worst = "-";
    describe_exit(c.status, how, sizeof how);
    Verdict v = verdict_of(&c, 60, how, &worst, used, sizeof used, ulp, sizeof ulp, detail, sizeof detail);
    snprintf(line, cap, "%-7s %-24s %9s %10s  %s | %s %s", VERDICT_NAMES[v], worst, used, ulp, detail,
             c.u.s.r.info.name, c.u.s.r.info.implements);
}

static void list_mistakes(void) {
    printf("%-16s %-28s %s\n", "optimizer", "mistake", "diagnosis text");
    for (size_t i = 0; i < optim_mistake_count(); i++) {
        const OptimMistake* m = optim_mistake_at(i);
        printf("%-16s %-28s %s%s\n", m->optim, m->id, m->text, m->params_only ? " [params only]" : "");
    }
}

// --case: one glob or a comma list of globs; a case runs when any matches its id.
static bool case_matches(const char* globs, const char* id) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", globs);
    char* save = NULL;
    for (char* g = strtok_r(buf, ",", &save); g; g = strtok_r(NULL, ",", &save))
        if (fnmatch(g, id, 0) == 0) return true;
    return false;
}

static int conform_cmd_run(int argc, char** argv) {
    Options op = {.timeout = CONFORM_DEFAULT_TIMEOUT};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--verbose")) {
            op.verbose = true;
        } else if (!strcmp(argv[i], "--json")) {
            op.as_json = true;
        } else if (!strcmp(argv[i], "--list-mistakes")) {
            list_mistakes();
            return 0;
        } else if (flag_matches(argv[i], "--plugin")) {
            if (!flag_value(&cmd_conform, argc, argv, &i, "--plugin", &op.plugin)) return 2;
        } else if (flag_matches(argv[i], "--optim")) {
            if (!flag_value(&cmd_conform, argc, argv, &i, "--optim", &op.optim)) return 2;
        } else if (flag_matches(argv[i], "--goldens")) {
            const char* dir;
            if (!flag_value(&cmd_conform, argc, argv, &i, "--goldens", &dir)) return 2;
            DIR* d = opendir(dir);
            if (!d) return cli_usage_error(&cmd_conform, "--goldens: cannot open folder %s (%s)", dir, strerror(errno));
            closedir(d);
            conform_set_golden_dir(dir);
        } else if (flag_matches(argv[i], "--junit")) {
            if (!flag_value(&cmd_conform, argc, argv, &i, "--junit", &op.junit)) return 2;
        } else if (flag_matches(argv[i], "--case")) {
            if (!flag_value(&cmd_conform, argc, argv, &i, "--case", &op.glob)) return 2;
        } else if (flag_matches(argv[i], "--timeout")) {
            if (!flag_int(&cmd_conform, argc, argv, &i, "--timeout", 1, 86400, &op.timeout)) return 2;
        } else {
            return cli_unknown_flag(&cmd_conform, argv[i]);
        }
    }
    if (!op.plugin && !op.optim) return cli_usage_error(&cmd_conform, "needs --plugin LIB.so or --optim NAME");
    if (op.optim && !optim_find(op.optim))
        return cli_usage_error(&cmd_conform, "--optim must be one of: %s (got '%s')", optim_names_list(), op.optim);

    ConformPluginInfo info = {0};
    if (op.plugin) {
        if (access(op.plugin, R_OK) != 0)
            return user_error("conform: no such plugin file: %s (%s)", op.plugin, strerror(errno));
        ChildOutcome probe;
        run_child(&op, NULL, op.timeout, &probe);
        char how[160];
        describe_exit(probe.status, how, sizeof how);
        if (probe.timed_out) return user_error("conform: loading plugin %s did not finish within %ld s", op.plugin, op.timeout);
        if (!outcome_has_result(&probe))
            return user_error("conform: plugin %s crashed while loading: %s%s", op.plugin, how,
                              WIFSIGNALED(probe.status) ? "" : " (see the messages above; a plugin built with "
                              "-fsanitize=... can only be loaded by a trainbench built with the same flags)");
        if (probe.u.s.r.code != STATUS_OK) return user_error("conform: %s", probe.u.s.r.msg);
        info = probe.u.s.r.info;
        if (!op.optim && !optim_find(info.implements))
            return user_error("conform: plugin %s implements '%s', not a registered optimizer (allowed: %s)", op.plugin,
                              info.implements, optim_names_list());
        if (!op.optim) op.optim = optim_find(info.implements)->name;
    }
    const Optimizer* o = optim_find(op.optim);
    char** paths;
    size_t n_all;
    Status s = conform_list_cases(o->name, &paths, &n_all);
    if (!status_is_ok(s)) return user_error("conform: %s", s.msg);
    if (n_all == 0) {
        conform_free_list(paths, n_all);
        return user_error("conform: no goldens for %s in %s/%s (give the golden folder with --goldens DIR)", o->name,
                          conform_golden_dir(), o->name);
    }
    size_t n = 0;  // keep the cases matching --case
    for (size_t i = 0; i < n_all; i++) {
        char id[256];
        case_id_of(paths[i], id, sizeof id);
        if (!op.glob || case_matches(op.glob, id)) {
            char* keep = paths[i];
            paths[i] = paths[n];
            paths[n++] = keep;
        }
    }
    if (n == 0) {
        conform_free_list(paths, n_all);
        return user_error("conform: --case '%s' matches none of the %zu %s cases in %s/%s", op.glob, n_all, o->name,
                          conform_golden_dir(), o->name);
    }

    FILE* table = op.as_json ? fopen("/dev/null", "w") : stdout;  // --json: the table goes nowhere
    if (!table) ABORT("cannot open /dev/null");
    ConformFile cf = {0};
    JUnit* ju = op.junit ? junit_new("trainbench conform") : NULL;
    char ju_class[300];
    snprintf(ju_class, sizeof ju_class, "conform.%s", o->name);
    if (op.plugin)
        fprintf(table, "conform: plugin %s (\"%s\", ABI %u, implements %s) against the %s goldens, %zu case%s\n", op.plugin,
               info.name, info.abi_version, info.implements[0] ? info.implements : "(nothing)", o->name, n,
               n == 1 ? "" : "s");
    else
        fprintf(table, "conform: built-in %s (%s) against its goldens, %zu case%s\n", o->name, o->reference, n, n == 1 ? "" : "s");
    fprintf(table, "%-26s %-7s %-24s %9s %10s  %s\n", "case", "verdict", "worst comparison", "tol used", "max ulp", "diagnosis");
    size_t count[V_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        char id[256], used[32] = "-", ulp[16] = "-", how[160];
        case_id_of(paths[i], id, sizeof id);
        ChildOutcome c;
        double t_case = now_seconds();
        run_child(&op, paths[i], op.timeout, &c);
        t_case = now_seconds() - t_case;
        describe_exit(c.status, how, sizeof how);
        const char* worst = "-";
        char detail[1200];
        Verdict v = verdict_of(&c, op.timeout, how, &worst, used, sizeof used, ulp, sizeof ulp, detail, sizeof detail);
        count[v]++;
        fprintf(table, "%-26s %-7s %-24s %9s %10s  %s\n", id, VERDICT_NAMES[v], worst, used, ulp, detail);
        char jd[1600];
        snprintf(jd, sizeof jd, "%s %s; worst %s, %s of tolerance, max param ulp %s%s%.1200s", op.plugin ? op.plugin : "built-in",
                 VERDICT_NAMES[v], worst, used, ulp, *detail ? "; " : "", detail);
        char cid[300];
        snprintf(cid, sizeof cid, "%s/%s", o->name, id);
        bool passed = v == V_PASS || v == V_CONFORMS;
        conform_file_add(&cf, cid, passed, jd);
        if (ju)
            junit_case(ju, ju_class, id, t_case, passed ? JUNIT_PASS : v == V_FAIL ? JUNIT_FAILURE : JUNIT_ERROR,
                       passed ? NULL : VERDICT_NAMES[v], passed ? NULL : jd);
    }
    conform_free_list(paths, n_all);
    fprintf(table, "conform: %zu case%s: %zu passed, %zu failed, %zu crashed, %zu timed out, %zu errors", n, n == 1 ? "" : "s",
           count[V_PASS] + count[V_CONFORMS], count[V_FAIL], count[V_CRASH], count[V_TIMEOUT], count[V_ERROR]);
    fprintf(table, count[V_CONFORMS] ? " (%zu of the passed conform by rounding order only)\n" : "\n", count[V_CONFORMS]);
    if (ju) {
        Status js = junit_write(ju, op.junit);
        junit_free(ju);
        if (!status_is_ok(js)) {
            fprintf(stderr, "trainbench conform: --junit: %s\n", js.msg);
            if (op.as_json) fclose(table);
            conform_file_free(&cf);
            return 1;
        }
    }
    if (op.as_json) {
        fclose(table);
        json_t* root = conform_file_to_json(&cf);
        bool ok = result_json_print(stdout, RESULT_CONFORM, root);
        json_decref(root);
        conform_file_free(&cf);
        if (!ok) {  // an output that cannot be written: exit 1, as every command (bad input is 2)
            fprintf(stderr, "trainbench conform: writing the JSON to stdout failed\n");
            return 1;
        }
    } else {
        conform_file_free(&cf);
    }
    if (count[V_UNUSABLE]) {
        fprintf(stderr, "conform: %zu unusable golden%s (UNUSABLE rows above): fix or regenerate them; exit 2\n",
                count[V_UNUSABLE], count[V_UNUSABLE] == 1 ? "" : "s");
        return 2;
    }
    return count[V_PASS] + count[V_CONFORMS] == n ? 0 : 1;
}

// test_model_golden.c — the C model against the REAL transformers DistilBertForSequenceClassification
// (reference/gen_model_goldens.py; reference/MODEL_SEMANTICS.md says what torch computes). For
// every reference/golden/model/grads_*.safetensors: load its parameters and batch, run
// model_forward/model_backward with the naive backend in the golden's precision mode, and compare
// logits, loss, every hidden state and attention map, every parameter gradient and (mixed modes)
// the underflow/overflow counters (the grads_cfg2_* goldens: a second configuration, head size
// 12, 3 labels, heavy padding; grads_relu_*: a third, with activation="relu"). Then every
// train_<mode>.safetensors and trajectory_cfg2_<mode> is replayed at the model level (model_forward/backward + GradScaler + adamw_torch, no train.c): per-step loss, loss
// scale, skipped steps, counters, and the final parameters. Missing goldens FAIL (a golden test
// that passes without goldens would be a defect); every precision mode of the registry must be
// covered. Tolerances are derived beside `tolerance_for` and above `run_train_golden`, and the
// measured errors are printed (TRAINBENCH_VERBOSE=1 prints every tensor and every step).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "model/amp.h"
#include "model/layers.h"
#include "validate/compare.h"
#include "gemm/gemm.h"
#include "model/model.h"
#include "model/gelu_onednn.h"
#include "optim/optim.h"
#include "core/cpu.h"
#include "core/safetensors.h"
#include "golden_config.h"
#include "sanitizer_pass.h"
#include "golden_dropout.h"

#define GOLDEN_DIR "reference/golden/model"

// ---- tolerances ---------------------------------------------------------------------------
// Every comparison: |x - ref| <= atol + rtol*|ref| with rtol = KR*eps and atol = KA*eps*S, where
// eps is the mode's low-dtype epsilon (fp32 2^-23, bf16 2^-7, fp16 2^-10) and S the size of the
// terms the compared values are sums of: max|ref| of the tensor for forward quantities (logits,
// loss, hidden states, attention probabilities) and, for a gradient, the per-example term scale
// of `term_scales` below (the batch gradient is a sum over examples that can cancel). An element
// is an accumulated sum; its rounding error is bounded relative to its terms, not to its value.
//
// fp32: KR = KA = 16. The C model and torch evaluate the same formulas in other orders (GEMM
// sums in k order here, blocked in MKL/oneDNN; torch's vectorized exp/erf vs libm; LayerNorm
// statistics in double here, float in torch; softmax sums in 8/16 lanes vs in order), a few ulp
// per op; through two layers forward and backward the measured maximum is 0.043*16 = 0.7 ulp of
// S (printed as "used" = share of the tolerance). 16 ulp leave ~6x headroom while a semantic
// difference (a missing term, a wrong scale, another mask value) is many orders larger.
//
// bf16/fp16, two conditions:
//  (a) KR = KA = 4 (low-dtype ulps): the rounding points are torch's (MODEL_SEMANTICS.md), but an
//      fp32 accumulation in another order can move a result across a rounding boundary of the
//      low dtype (probability ~ fp32 error / low ulp per element and op): that element moves by
//      1 low ulp and the tensors downstream by at most about as much relative to their terms.
//      Measured maximum: 0.19 of this tolerance (fp16 Linear weight gradients, 0.77 fp16 ulp of S).
//  (b) agreement: at least AGREE_MIN of the elements of each tensor agree to the fp32 tolerance
//      (16 fp32 ulp of S + |ref|). Matching rounding points give bit-identical or fp32-close
//      values almost everywhere (measured minimum 0.90: layer-1 q_lin weight gradient in bf16),
//      while a misplaced rounding point moves most elements by a fraction of a low-dtype ulp,
//      which (a) alone cannot see. Checked by mutation (each reverted): not rounding the fp32
//      gradient handed to a low tensor at the residual adds -> 0.00 on the bias gradients;
//      rounding the masked (fp32) softmax to the low dtype -> 0.42 on the attention maps;
//      not rounding the logits' gradient -> 0.00 on classifier.bias. Exception:
//      attention.k_lin.bias, whose exact gradient is 0 and whose values are rounding residue
//      (see term_scales), is held to (a) only.
//  The underflow/overflow counters (amp.h definition; the golden measures them on torch's own
//  run) must agree within COUNT_SLACK: our fp32 value before a rounding point comes from another
//  accumulation order than torch's (recomputed exactly from its inputs), so a value within an
//  fp32 error of the underflow threshold may count on one side only (measured: identical).
#define AGREE_MIN 0.75
#define COUNT_SLACK_REL 0.002
#define COUNT_SLACK_ABS 2
typedef struct {
    double kr, ka;
} Tol;

static Tol tolerance_for(DType low) {
    if (low == DTYPE_F32) return (Tol){16, 16};
    return (Tol){4, 4};
}

// ---- golden loading -------------------------------------------------------------------------
static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

// Sorted paths of GOLDEN_DIR/grads_*.safetensors; returns the count (0 when none / no folder).
static size_t list_grads_goldens(char*** out) {
    *out = NULL;
    DIR* d = opendir(GOLDEN_DIR);
    if (!d) return 0;
    size_t n = 0, cap = 0;
    char** v = NULL;
    struct dirent* e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "grads_", 6) != 0 || len < 12 || strcmp(e->d_name + len - 12, ".safetensors") != 0)
            continue;
        if (n == cap) v = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
        size_t sz = strlen(GOLDEN_DIR) + 1 + len + 1;
        v[n] = malloc(sz);
        snprintf(v[n], sz, "%s/%s", GOLDEN_DIR, e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(v, n, sizeof *v, cmp_str);
    *out = v;
    return n;
}

// The golden file at path read into st (the test fails, naming the file and the problem, when it
// cannot be)
static void need_golden(const char* path, SafeTensors* st) {
    Status s = st_read(path, st);
    if (!status_is_ok(s)) printf("FAIL: %s (run `make goldens`)\n", s.msg);
    assert_true(status_is_ok(s));
}

static const StTensor* need(const SafeTensors* st, const char* name) {
    const StTensor* t = st_find(st, name);
    if (!t) fprintf(stderr, "%s: missing tensor %s\n", st->path, name);
    assert_non_null(t);
    return t;
}

static float* need_f32(const SafeTensors* st, const char* name, size_t numel) {
    const StTensor* t = need(st, name);
    assert_int_equal(t->numel, numel);
    float* x;
    assert_true(status_is_ok(st_tensor_to_f32(t, &x)));
    return x;
}

static const char* need_meta(const SafeTensors* st, const char* key) {
    const char* v = st_meta(st, key);
    if (!v) fprintf(stderr, "%s: missing metadata %s\n", st->path, key);
    assert_non_null(v);
    return v;
}

// ---- comparison bookkeeping ----------------------------------------------------------------
typedef enum { K_LOGITS, K_LOSS, K_HIDDEN, K_ATTN, K_EMB, K_NORM, K_WEIGHT, K_BIAS, K_COUNT } Kind;
static const char* const KIND_NAMES[K_COUNT] = {"logits", "loss", "hidden states", "attention probs",
                                                "grad embeddings", "grad LayerNorm", "grad Linear weight",
                                                "grad Linear bias"};
typedef struct {
    double max_abs[K_COUNT], max_rel[K_COUNT], max_used[K_COUNT], min_agree[K_COUNT];
    size_t n[K_COUNT], n_exact[K_COUNT], n_tensors[K_COUNT];
    int failures;
} Summary;

static Kind grad_kind(const ParamTensor* p) {
    switch (p->kind) {
        case PARAM_EMBEDDING: return K_EMB;
        case PARAM_NORM_WEIGHT:
        case PARAM_NORM_BIAS: return K_NORM;
        case PARAM_LINEAR_WEIGHT: return K_WEIGHT;
        default: return K_BIAS;
    }
}

static double max_abs_f32(const float* x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

// scale: the size of the terms the compared values are sums of (see "tolerances" above);
// agree: apply condition (b) (mixed modes, not for tensors of rounding residue)
static void compare(Summary* s, Kind k, const char* what, const float* got, const float* ref, size_t n, DType low,
                    double scale, bool agree, bool verbose) {
    Tol t = tolerance_for(low);
    const double eps = dtype_traits(low)->eps;
    CompareF32 c = compare_f32(got, ref, n, t.ka * eps * scale, t.kr * eps);
    size_t close = 0;
    for (size_t i = 0; i < n; i++)
        close += fabs((double)got[i] - (double)ref[i]) <= 16 * 0x1p-23 * (scale + fabs((double)ref[i]));
    const double share = n ? (double)close / (double)n : 1.0;
    const bool agree_ok = !agree || low == DTYPE_F32 || share >= AGREE_MIN;
    const bool ok = c.ok && agree_ok;
    double rel_scale = scale > 0 ? c.max_abs / scale : c.max_abs;  // error relative to the scale
    if (!ok || verbose)
        printf("    %-58s %s max_abs %.3g max_err/S %.3g exact %zu/%zu agree %.3f used %.2f%s\n", what,
               ok ? "ok  " : "FAIL", c.max_abs, rel_scale, c.n_exact, c.n, share, c.used,
               c.ok ? (agree_ok ? "" : "  <-- agreement below AGREE_MIN") : "  <-- outside tolerance");
    if (!c.ok)
        printf("      worst [%zu]: got %.9g ref %.9g (atol %.3g rtol %.3g)\n", c.worst, c.worst_got, c.worst_ref,
               t.ka * eps * scale, t.kr * eps);
    if (!ok) s->failures++;
    s->max_abs[k] = fmax(s->max_abs[k], c.max_abs);
    s->max_rel[k] = fmax(s->max_rel[k], rel_scale);
    s->max_used[k] = fmax(s->max_used[k], c.used);
    if (agree) s->min_agree[k] = s->n_tensors[k] ? fmin(s->min_agree[k], share) : share;
    else if (!s->n_tensors[k]) s->min_agree[k] = 1.0;
    s->n[k] += c.n;
    s->n_exact[k] += c.n_exact;
    s->n_tensors[k]++;
}

// ---- term scales of the gradients ----------------------------------------------------------
// The batch gradient is (1/B) sum_b g_b, g_b the gradient of example b's own loss. When the
// examples' contributions cancel (at initialization the two classes' logits are nearly equal, so
// p - onehot is +-0.5 for every example and the batch sums nearly cancel: the classifier bias
// gradient is ~1/160 of its terms in grads_fp32), what remains of the sum is of the size of its
// rounding errors, which are relative to the terms. Measured against float64 torch, torch's own
// fp32 gradients there are off by 3e-5 of their largest value, 250 fp32 ulp: the error of fp32
// arithmetic at that conditioning, not a difference in semantics. The scale of a gradient tensor
// is therefore S = max over its elements of sum_b |g_b| / B (computed here in fp32 with the
// naive backend, one example at a time; only its size matters).
// attention.k_lin.bias: its exact gradient is 0 (softmax is invariant to adding the same value
// to a row of scores, and the key bias adds q_i . b_k to every score of row i), so both torch's
// and our values are rounding residue of sum_t dk_t; its S is that of the k_lin.weight
// gradient, dWk = sum_t dk_t x_t^T with |x_t| ~ 1 (LayerNorm outputs), i.e. the size of the
// terms dk_t whose sum leaves the residue.
static void term_scales(const ParamTable* t, const float* params, const ModelBatch* batch, ModelWorkspace* ws,
                        Gemm* gemm, double* S /* (t->n) */) {
    float* g = param_table_alloc_buffer(t);
    double* acc = calloc(t->alloc_numel, sizeof(double));
    for (int b = 0; b < batch->B; b++) {
        // with dropout, example b keeps its masks alone in a batch (keyed by its index)
        ModelBatch one = {batch->input_ids + (size_t)b * batch->T,
                          batch->attention_mask ? batch->attention_mask + (size_t)b * batch->T : NULL,
                          batch->labels + b, 1, batch->T, batch->step, batch->first_example + b, batch->dropout};
        float loss;
        assert_true(status_is_ok(model_forward(ws, params, &one, amp_mode_find("fp32"), gemm, &loss, NULL)));
        model_zero_grad(t, g);
        assert_true(status_is_ok(model_backward(ws, params, 1.0f, gemm, g, NULL)));
        for (size_t i = 0; i < t->alloc_numel; i++) acc[i] += fabs((double)g[i]) / batch->B;
    }
    for (size_t k = 0; k < t->n; k++) {
        S[k] = 0.0;
        for (size_t i = 0; i < t->t[k].numel; i++) S[k] = fmax(S[k], acc[t->t[k].offset + i]);
    }
    for (size_t k = 1; k < t->n; k++) {
        const char* n = t->t[k].name;
        size_t len = strlen(n), sl = strlen("attention.k_lin.bias");
        if (len >= sl && strcmp(n + len - sl, "attention.k_lin.bias") == 0) {
            assert_true(strstr(t->t[k - 1].name, "attention.k_lin.weight") != NULL);
            S[k] = S[k - 1];
        }
    }
    free(acc);
    free(g);
}

// ---- one golden ---------------------------------------------------------------------------
typedef struct {
    const char* path;
    const PrecisionMode* mode;
    Summary sum;
    bool has_counters;
    AmpCounters ours, theirs;
} CaseResult;

static void run_golden(const char* path, CaseResult* r) {
    memset(r, 0, sizeof *r);
    r->path = path;
    SafeTensors st;
    need_golden(path, &st);
    const char* mode_name = need_meta(&st, "mode");
    const PrecisionMode* mode = amp_mode_find(mode_name);
    if (!mode) printf("%s: unknown mode '%s' (registry: %s)\n", path, mode_name, amp_mode_names_list());
    assert_non_null(mode);
    r->mode = mode;
    ModelConfig cfg;
    golden_config(&st, &cfg);
    char pad_text[32];
    snprintf(pad_text, sizeof pad_text, "%lld", (long long)cfg.pad_token_id);
    assert_string_equal(need_meta(&st, "pad_id"), pad_text);  // the config's padding_idx
    ParamTable table;
    assert_true(status_is_ok(param_table_build(&cfg, &table)));
    float* params = param_table_alloc_buffer(&table);
    float* grads = param_table_alloc_buffer(&table);
    size_t n_param_tensors = 0;
    for (size_t i = 0; i < st.n_tensors; i++) n_param_tensors += strncmp(st.tensors[i].name, "param.", 6) == 0;
    assert_int_equal(n_param_tensors, table.n);  // the golden has exactly the table's tensors
    for (size_t i = 0; i < table.n; i++) {
        char name[160];
        snprintf(name, sizeof name, "param.%s", table.t[i].name);
        float* x = need_f32(&st, name, table.t[i].numel);
        memcpy(params + table.t[i].offset, x, table.t[i].numel * sizeof(float));
        free(x);
    }
    const StTensor* ids_t = need(&st, "input.input_ids");
    const StTensor* mask_t = need(&st, "input.attention_mask");
    const StTensor* lab_t = need(&st, "input.labels");
    assert_int_equal(ids_t->dtype, DTYPE_I64);
    assert_int_equal(mask_t->dtype, DTYPE_I64);
    assert_int_equal(lab_t->dtype, DTYPE_I64);
    assert_int_equal(ids_t->ndim, 2);
    const int B = (int)ids_t->shape[0], T = (int)ids_t->shape[1];
    assert_int_equal(mask_t->numel, (size_t)B * T);
    assert_int_equal(lab_t->numel, (size_t)B);
    int32_t* labels = malloc((size_t)B * sizeof(int32_t));
    for (int b = 0; b < B; b++) labels[b] = (int32_t)((const int64_t*)lab_t->data)[b];
    ModelBatch batch = {ids_t->data, mask_t->data, labels, B, T, 0, 0, NULL};
    // grads_dropout_*: train mode with dropout, torch fed the masks stored in the golden
    DropoutConfig drop;
    const bool has_dropout = golden_dropout_config(&st, &drop, &batch.step, &batch.first_example);
    if (has_dropout) batch.dropout = &drop;

    Gemm gemm;
    // one thread: the naive backend gives the same bits for any thread count (gemm_naive.c), and
    // no fork/join per small GEMM keeps the test fast on a busy machine
    assert_true(status_is_ok(gemm_open(&gemm, &gemm_backend_naive, 1)));
    ModelWorkspace* ws;
    assert_true(status_is_ok(model_workspace_new(&table, B, T, &ws)));
    // grads_label_smoothing_*: the loss is HF Trainer's LabelSmoother with this factor
    const char* ls = st_meta(&st, "label_smoothing");
    if (ls) assert_true(status_is_ok(model_workspace_set_label_smoothing(ws, atof(ls))));
    const int L = (int)cfg.n_labels, D = (int)cfg.dim, H = (int)cfg.n_heads;
    double* S = malloc(table.n * sizeof(double));
    term_scales(&table, params, &batch, ws, &gemm, S);
    float loss, *logits = malloc((size_t)B * L * sizeof(float));
    Status s = model_forward(ws, params, &batch, mode, &gemm, &loss, logits);
    if (!status_is_ok(s)) printf("%s\n", s.msg);
    assert_true(status_is_ok(s));
    model_zero_grad(&table, grads);
    amp_counters_reset(&r->ours);
    s = model_backward(ws, params, 1.0f, &gemm, grads, &r->ours);
    assert_true(status_is_ok(s));
    if (has_dropout) {  // our masks are the ones torch was fed (an independent implementation's)
        const int bad = golden_dropout_check_masks(&st, ws, -1, 0, B);
        printf("  %s: dropout %g / %g / %g, masks %s\n", path, drop.hidden, drop.attention, drop.classifier,
               bad ? "DIFFER" : "identical to the golden's");
        r->sum.failures += bad;
    }

    const DType low = mode->low;
    const bool verbose = getenv("TRAINBENCH_VERBOSE") != NULL;
    printf("  %s (mode %s, B=%d T=%d)\n", path, mode->name, B, T);
    float* x = need_f32(&st, "expect.logits", (size_t)B * L);
    compare(&r->sum, K_LOGITS, "logits", logits, x, (size_t)B * L, low, max_abs_f32(x, (size_t)B * L), true, verbose);
    free(x);
    x = need_f32(&st, "expect.loss", 1);
    compare(&r->sum, K_LOSS, "loss", &loss, x, 1, low, fabs(x[0]), true, verbose);
    free(x);
    char name[200];
    for (int i = 0; i <= cfg.n_layers; i++) {
        snprintf(name, sizeof name, "expect.hidden_state.%d", i);
        if (!st_find(&st, name)) continue;
        x = need_f32(&st, name, (size_t)B * T * D);
        compare(&r->sum, K_HIDDEN, name, model_workspace_hidden_state(ws, i), x, (size_t)B * T * D, low,
                max_abs_f32(x, (size_t)B * T * D), true, verbose);
        free(x);
    }
    for (int l = 0; l < cfg.n_layers; l++) {
        snprintf(name, sizeof name, "expect.attention.%d", l);
        if (!st_find(&st, name)) continue;
        x = need_f32(&st, name, (size_t)B * H * T * T);
        compare(&r->sum, K_ATTN, name, model_workspace_attention_probs(ws, l), x, (size_t)B * H * T * T, low,
                max_abs_f32(x, (size_t)B * H * T * T), true, verbose);
        free(x);
    }
    for (size_t i = 0; i < table.n; i++) {
        const ParamTensor* p = &table.t[i];
        snprintf(name, sizeof name, "expect.grad.%s", p->name);
        x = need_f32(&st, name, p->numel);
        const bool residue = strstr(p->name, "attention.k_lin.bias") != NULL;
        compare(&r->sum, grad_kind(p), name + 7, grads + p->offset, x, p->numel, low, S[i], !residue, verbose);
        // the padding row of the word embeddings never receives a gradient (padding_idx)
        if (p->kind == PARAM_EMBEDDING && strstr(p->name, "word_embeddings"))
            for (int d = 0; d < D; d++) assert_true(grads[p->offset + (size_t)cfg.pad_token_id * D + d] == 0.0f);
        free(x);
    }
    static const char* const CNT[6] = {"param_values", "underflow", "overflow",
                                       "act_values", "act_underflow", "act_overflow"};
    uint64_t* theirs[6] = {&r->theirs.param_values, &r->theirs.param_underflow, &r->theirs.param_overflow,
                           &r->theirs.act_values, &r->theirs.act_underflow, &r->theirs.act_overflow};
    for (int k = 0; k < 6; k++) {
        snprintf(name, sizeof name, "expect.%s", CNT[k]);
        const StTensor* t = st_find(&st, name);
        if (!t) continue;
        assert_int_equal(t->dtype, DTYPE_I64);
        assert_int_equal(t->numel, 1);
        *theirs[k] = (uint64_t)((const int64_t*)t->data)[0];
        r->has_counters = true;
    }
    free(S);
    free(logits);
    free(labels);
    model_workspace_free(ws);
    gemm_close(&gemm);
    free(params);
    free(grads);
    param_table_free(&table);
    st_free(&st);
}

static void print_summary(const CaseResult* r) {
    printf("  summary %s (%s): kind, tensors, max abs err, max err/S, bit-exact share, min agreement, "
           "max tolerance used\n", r->path, r->mode->name);
    for (int k = 0; k < K_COUNT; k++) {
        if (!r->sum.n_tensors[k]) continue;
        printf("    %-20s %3zu  %-10.3g %-10.3g %6.2f%%  %.3f  %.3f\n", KIND_NAMES[k], r->sum.n_tensors[k],
               r->sum.max_abs[k], r->sum.max_rel[k], 100.0 * (double)r->sum.n_exact[k] / (double)r->sum.n[k],
               r->sum.min_agree[k], r->sum.max_used[k]);
    }
}

// ---- tests ---------------------------------------------------------------------------------
static void test_goldens_present_and_cover_every_mode(void** state) {
    (void)state;
    char** paths;
    size_t n = list_grads_goldens(&paths);
    if (n == 0)
        printf("FAIL: no %s/grads_*.safetensors: run `make goldens` (reference/gen_model_goldens.py); "
               "the model cannot be checked without them\n", GOLDEN_DIR);
    assert_true(n > 0);
    // every precision mode's low dtype must be covered by a golden of some mode with that dtype
    // (the grads_* cases run without a loss scaler, so fp16 covers fp16-noscale's forward/backward)
    for (size_t m = 0; m < amp_mode_count(); m++) {
        const PrecisionMode* pm = amp_mode_at(m);
        bool covered = false;
        for (size_t i = 0; i < n && !covered; i++) {
            SafeTensors st;
            assert_true(status_is_ok(st_read(paths[i], &st)));
            const PrecisionMode* gm = amp_mode_find(need_meta(&st, "mode"));
            covered = gm && gm->low == pm->low;
            st_free(&st);
        }
        if (!covered) printf("FAIL: no grads golden covers precision mode %s (%s)\n", pm->name, dtype_name(pm->low));
        assert_true(covered);
    }
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

static void test_every_golden_matches(void** state) {
    (void)state;
    char** paths;
    size_t n = list_grads_goldens(&paths);
    assert_true(n > 0);
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        CaseResult r;
        run_golden(paths[i], &r);
        print_summary(&r);
        failures += r.sum.failures;
        if (r.has_counters) {
            printf("    counters ours/torch: param values %llu/%llu underflow %llu/%llu overflow %llu/%llu | "
                   "act values %llu/%llu underflow %llu/%llu overflow %llu/%llu\n",
                   (unsigned long long)r.ours.param_values, (unsigned long long)r.theirs.param_values,
                   (unsigned long long)r.ours.param_underflow, (unsigned long long)r.theirs.param_underflow,
                   (unsigned long long)r.ours.param_overflow, (unsigned long long)r.theirs.param_overflow,
                   (unsigned long long)r.ours.act_values, (unsigned long long)r.theirs.act_values,
                   (unsigned long long)r.ours.act_underflow, (unsigned long long)r.theirs.act_underflow,
                   (unsigned long long)r.ours.act_overflow, (unsigned long long)r.theirs.act_overflow);
            const uint64_t ours[6] = {r.ours.param_values, r.ours.param_underflow, r.ours.param_overflow,
                                      r.ours.act_values, r.ours.act_underflow, r.ours.act_overflow};
            const uint64_t theirs[6] = {r.theirs.param_values, r.theirs.param_underflow, r.theirs.param_overflow,
                                        r.theirs.act_values, r.theirs.act_underflow, r.theirs.act_overflow};
            for (int k = 0; k < 6; k++) {
                double d = fabs((double)ours[k] - (double)theirs[k]);
                if (d > COUNT_SLACK_ABS + COUNT_SLACK_REL * (double)theirs[k]) {
                    printf("    FAIL counter %d: ours %llu torch %llu\n", k, (unsigned long long)ours[k],
                           (unsigned long long)theirs[k]);
                    failures++;
                }
            }
        } else if (amp_is_mixed(r.mode)) {
            printf("    FAIL %s has no expect.param_values/underflow/... counters (regenerate the goldens)\n",
                   r.path);
            failures++;
        }
        free(paths[i]);
    }
    free(paths);
    printf("model goldens: %zu files, %d tensor comparisons outside tolerance\n", n, failures);
    assert_int_equal(failures, 0);
}

// ---- training trajectories (train_*.safetensors, trajectory_cfg2_*.safetensors) ------------------
// 20 AdamW steps (adamw_torch, one group) on fixed batches, fp16 with GradScaler(init 2^24,
// interval 4), as MODEL_SEMANTICS.md section 6 writes the loop; train_<mode> on the tiny preset,
// trajectory_cfg2_<mode> on the second configuration (head size 12, 3 labels, heavy padding).
// What must match, and how:
//  - exactly: the scale used at every step and which steps are skipped. A skip happens when
//    a scaled gradient overflows fp16 somewhere (the logits' gradient cast, or the fp16 sum of a
//    bias gradient: steps 6, 14, 16 of train_fp16 skip only because the classifier bias sum
//    overflows), so this checks the rounding points end to end;
//  - the per-step loss and the final parameters, against torch's own noise: the generator runs
//    torch again under P = 2 harmless perturbations (metadata noise_perturbation): the examples of
//    every batch reversed (the same math, another summation order in every reduction over the
//    batch) and every initial parameter moved by one fp32 ulp (a rounding-level difference in
//    the inputs), what separates two correct implementations, and stores each run's losses
//    (expect.noise.loss, (P, S)) and the distance of its final parameters
//    (expect.noise.final_l2, (P)). With noise = max over perturbations and steps of
//    |noise_{p,j} - torch_j| (the size of torch's own loss noise on this trajectory), every
//    step's loss must satisfy
//      |ours - torch| <= NOISE_K * noise + 16 eps32 |torch_k|,
//    one bound for the whole trajectory, so it never vanishes where two curves happen to cross
//    (the earlier bound, 0.25 |torch_mode - torch_fp32| per step, did, and failed PyTorch
//    against itself on the second configuration; a running maximum over steps j <= k was too
//    tight early: the perturbed runs diverge later than ours, train_fp16 step 13 used 2x). The
//    final parameters:
//      ||ours - torch|| <= NOISE_K * max_p expect.noise.final_l2[p].
//    NOISE_K = 10: our code differs from torch in more places than one summation order (GEMM
//    blocking, libm exp/erf against torch's vectorized ones, LayerNorm statistics in double),
//    each a rounding-level difference that Adam's normalized steps amplify alike. Measured share
//    of the bound used (printed per golden): loss at most 0.09 (train_fp16); final parameters
//    0.07 / 0.08 / 0.10 / 0.02 (train_fp32 / bf16 / fp16 / fp16-noscale), 0.05 / 0.00 / 0.03
//    (trajectory_cfg2_fp32 / bf16 / fp16). A semantic difference is far outside: replaying the
//    bf16 goldens in fp32 mode (no rounding points) uses 4.3x (train_bf16 loss) and 18.8x
//    (its final parameters), 6.2x and 8.3x (trajectory_cfg2_bf16) of the bound (checked by
//    mutation);
//  - counters per step within TRAIN_COUNT_SLACK_REL of torch's: the parameters drift apart a
//    little (see the final distance), and the counts are of values near a threshold, so they drift
//    too (measured: up to 6%, fp16-noscale step 16 activation underflow 351 vs 331); the single-step
//    grads_* goldens hold the counters to COUNT_SLACK. A missing or extra rounding point changes
//    them by factors (e.g. no residual-branch rounding: 4x fewer activation values).
#define NOISE_K 10.0
#define TRAIN_COUNT_SLACK_REL 0.10

typedef struct {
    float* loss;      // (S)
    float* final;     // table buffer
} Trajectory;

static void load_final(const SafeTensors* st, const ParamTable* t, float* buf) {
    char name[200];
    for (size_t i = 0; i < t->n; i++) {
        snprintf(name, sizeof name, "expect.final.param.%s", t->t[i].name);
        float* x = need_f32(st, name, t->t[i].numel);
        memcpy(buf + t->t[i].offset, x, t->t[i].numel * sizeof(float));
        free(x);
    }
}

static double l2_diff(const ParamTable* t, const float* a, const float* b) {
    double s = 0;
    for (size_t i = 0; i < t->n; i++)
        for (size_t j = 0; j < t->t[i].numel; j++) {
            double d = (double)a[t->t[i].offset + j] - (double)b[t->t[i].offset + j];
            s += d * d;
        }
    return sqrt(s);
}

static int run_train_golden(const char* golden) {
    char path[256];
    snprintf(path, sizeof path, GOLDEN_DIR "/%s.safetensors", golden);
    SafeTensors st;
    need_golden(path, &st);
    const PrecisionMode* mode = amp_mode_find(need_meta(&st, "mode"));
    assert_non_null(mode);
    ModelConfig cfg;
    golden_config(&st, &cfg);
    ParamTable table;
    assert_true(status_is_ok(param_table_build(&cfg, &table)));
    float* params = param_table_alloc_buffer(&table);
    float* grads = param_table_alloc_buffer(&table);
    float* final_torch = param_table_alloc_buffer(&table);
    float* init = param_table_alloc_buffer(&table);
    char name[200];
    for (size_t i = 0; i < table.n; i++) {
        snprintf(name, sizeof name, "param.%s", table.t[i].name);
        float* x = need_f32(&st, name, table.t[i].numel);
        memcpy(params + table.t[i].offset, x, table.t[i].numel * sizeof(float));
        free(x);
    }
    memcpy(init, params, table.alloc_numel * sizeof(float));
    load_final(&st, &table, final_torch);
    const StTensor* ids = need(&st, "input.input_ids");
    const StTensor* mask = need(&st, "input.attention_mask");
    const StTensor* lab = need(&st, "input.labels");
    assert_int_equal(ids->ndim, 3);
    const int S = (int)ids->shape[0], B = (int)ids->shape[1], T = (int)ids->shape[2];
    float* loss_t = need_f32(&st, "expect.loss", (size_t)S);
    const StTensor* noise_l2_t = need(&st, "expect.noise.final_l2");
    assert_int_equal(noise_l2_t->dtype, DTYPE_F64);
    const size_t P = noise_l2_t->numel;  // perturbations
    assert_true(P >= 1);
    float* loss_noise = need_f32(&st, "expect.noise.loss", P * (size_t)S);  // (P, S)
    double noise_l2 = 0;
    for (size_t p = 0; p < P; p++) noise_l2 = fmax(noise_l2, ((const double*)noise_l2_t->data)[p]);
    float* scale_t = need_f32(&st, "expect.scale", (size_t)S);
    const StTensor* skipped_t = need(&st, "expect.skipped");
    json_error_t jerr;
    json_t* hp = json_loads(need_meta(&st, "hparams"), 0, &jerr);
    assert_non_null(hp);
    const Optimizer* o = optim_find(need_meta(&st, "optimizer"));
    assert_non_null(o);
    OptimConfig ocfg;
    Status s = optim_config_from_json(o, hp, &ocfg);
    if (!status_is_ok(s)) printf("%s\n", s.msg);
    assert_true(status_is_ok(s));
    json_decref(hp);
    ModelOptim mo;
    model_optim_init(&mo, &table, o, &ocfg, false);
    GradScalerConfig gcfg = grad_scaler_defaults();
    gcfg.enabled = false;
    if (mode->loss_scaling) {
        json_t* g = json_loads(need_meta(&st, "grad_scaler"), 0, &jerr);
        assert_non_null(g);
        gcfg.init_scale = json_number_value(json_object_get(g, "init_scale"));
        gcfg.growth_factor = json_number_value(json_object_get(g, "growth_factor"));
        gcfg.backoff_factor = json_number_value(json_object_get(g, "backoff_factor"));
        gcfg.growth_interval = (int64_t)json_integer_value(json_object_get(g, "growth_interval"));
        gcfg.enabled = true;
        json_decref(g);
    }
    GradScaler scaler;
    grad_scaler_init(&scaler, &gcfg);
    Gemm gemm;
    assert_true(status_is_ok(gemm_open(&gemm, &gemm_backend_naive, 1)));
    ModelWorkspace* ws;
    assert_true(status_is_ok(model_workspace_new(&table, B, T, &ws)));
    int32_t* labels = malloc((size_t)B * sizeof(int32_t));
    static const char* const CNT[6] = {"param_values", "underflow", "overflow", "act_values", "act_underflow",
                                       "act_overflow"};
    const StTensor* cnt_t[6] = {NULL};
    for (int k = 0; k < 6; k++) {
        snprintf(name, sizeof name, "expect.%s", CNT[k]);
        cnt_t[k] = st_find(&st, name);
        if (amp_is_mixed(mode)) assert_non_null(cnt_t[k]);
    }
    int failures = 0, n_skipped = 0;
    double worst_loss = 0, envelope = 0;
    for (size_t p = 0; p < P; p++)
        for (int k = 0; k < S; k++) envelope = fmax(envelope, fabs((double)loss_noise[p * S + k] - loss_t[k]));
    for (int step = 0; step < S; step++) {
        for (int b = 0; b < B; b++) labels[b] = (int32_t)((const int64_t*)lab->data)[(size_t)step * B + b];
        ModelBatch batch = {(const int64_t*)ids->data + (size_t)step * B * T,
                            (const int64_t*)mask->data + (size_t)step * B * T, labels, B, T, 0, 0, NULL};
        float loss;
        assert_true(status_is_ok(model_forward(ws, params, &batch, mode, &gemm, &loss, NULL)));
        const float used_scale = grad_scaler_loss_scale(&scaler);
        model_zero_grad(&table, grads);
        AmpCounters c;
        amp_counters_reset(&c);
        assert_true(status_is_ok(model_backward(ws, params, used_scale, &gemm, grads, &c)));
        bool found_inf = false;
        if (mode->loss_scaling) found_inf = grad_scaler_unscale(&scaler, grads, table.alloc_numel);
        if (grad_scaler_should_step(found_inf)) model_optim_step(&mo, &table, params, grads);
        grad_scaler_update(&scaler, found_inf);
        n_skipped += found_inf;
        // comparisons
        const double lt = loss_t[step];
        const double tol = NOISE_K * envelope + 16 * 0x1p-23 * fabs(lt);
        const double used = fabs(loss - lt) / tol;
        worst_loss = fmax(worst_loss, used);
        const bool skip_t = ((const uint8_t*)skipped_t->data)[step] != 0;
        bool ok = used <= 1.0 && used_scale == scale_t[step] && found_inf == skip_t;
        const uint64_t ours[6] = {c.param_values, c.param_underflow, c.param_overflow, c.act_values, c.act_underflow,
                                  c.act_overflow};
        char cnt_line[256] = "";
        if (amp_is_mixed(mode)) {
            int64_t th[6];
            for (int k = 0; k < 6; k++) {
                th[k] = ((const int64_t*)cnt_t[k]->data)[step];
                if (fabs((double)ours[k] - (double)th[k]) > COUNT_SLACK_ABS + TRAIN_COUNT_SLACK_REL * (double)th[k])
                    ok = false;
            }
            snprintf(cnt_line, sizeof cnt_line, " | underflow %llu/%lld overflow %llu/%lld act_under %llu/%lld act_over %llu/%lld",
                     (unsigned long long)ours[1], (long long)th[1], (unsigned long long)ours[2], (long long)th[2],
                     (unsigned long long)ours[4], (long long)th[4], (unsigned long long)ours[5], (long long)th[5]);
        }
        if (!ok || getenv("TRAINBENCH_VERBOSE"))
            printf("    step %2d: loss %.7f torch %.7f (torch noise %.2g, used %.2f) scale %g/%g skipped %d/%d%s%s\n",
                   step + 1, loss, lt, envelope, used, used_scale, scale_t[step], found_inf, skip_t, cnt_line,
                   ok ? "" : "  <-- FAIL");
        failures += !ok;
    }
    const double d_ours = l2_diff(&table, params, final_torch);
    const double moved = l2_diff(&table, init, final_torch);
    const bool final_ok = d_ours <= NOISE_K * noise_l2;
    printf("  %s (%s): %d steps, %d skipped, %d step(s) outside tolerance (loss: torch noise %.3g, worst %.2f of %g x "
           "noise + 16 eps32); final params ||ours - torch|| %.3g, torch noise %.3g (used %.2f of %g x noise), moved "
           "%.3g%s\n",
           golden, mode->name, S, n_skipped, failures, envelope, worst_loss, NOISE_K, d_ours, noise_l2,
           d_ours / (NOISE_K * noise_l2), NOISE_K, moved, final_ok ? "" : "  <-- FAIL");
    failures += !final_ok;
    free(labels);
    model_workspace_free(ws);
    gemm_close(&gemm);
    model_optim_free(&mo);
    free(loss_t), free(loss_noise), free(scale_t);
    free(params), free(grads), free(final_torch), free(init);
    param_table_free(&table);
    st_free(&st);
    return failures;
}

static void test_training_trajectories(void** state) {
    (void)state;
    int failures = 0;
    char name[128];
    for (size_t m = 0; m < amp_mode_count(); m++) {  // every precision mode on tiny
        snprintf(name, sizeof name, "train_%s", amp_mode_at(m)->name);
        failures += run_train_golden(name);
    }
    static const char* const CFG2[] = {"trajectory_cfg2_fp32", "trajectory_cfg2_bf16", "trajectory_cfg2_fp16"};
    for (size_t i = 0; i < ARRAY_LEN(CFG2); i++) failures += run_train_golden(CFG2[i]);
    assert_int_equal(failures, 0);
}

// ---- the FFN activations on every low-dtype pattern (activations_low.safetensors) ----------
// transformers' activations (every one we implement: gelu, relu, silu, gelu_pytorch_tanh, gelu_new,
// quick_gelu, gelu_fast, linear, sigmoid, tanh, relu6, leaky_relu, relu2, gelu_10) on each of the 65,536 bf16 and fp16 bit
// patterns, forward y and backward dx for a given dy, both in that dtype: ours
// (ffn_activation_forward_low / ffn_activation_backward_low, GELU by its tables) must give the same
// bits for all but GELU (SLEEF's tanh inside ATen's kernels, the activations written as several
// torch operations: layers.c); GELU as below.
// Two allowances, both stated: a NaN matches any NaN (payloads are not compared), and the
// backward's +0 where torch has -0 (ours is 0 + R(...), the add into a zeroed gradient: layers.h,
// gelu_backward_low). GELU must match too: on fp16 ATen's reduced-type kernel (layers.c
// verf_aten); on bf16, where torch hands it to oneDNN (AVX-512 BW/VL/DQ, the goldens' machine),
// oneDNN's minimax forward written out in C and oneDNN's derivative for the backward (layers.c
// gelu_as_grad, the fp32 path's; with oneDNN built in, the table's factors are that kernel's own
// output, the same values). On a CPU where torch would not use oneDNN the bf16 GELU rows are reported only:
// the golden came from one where it does (reference/MODEL_SEMANTICS.md step 19).
static void test_activation_tables(void** state) {
    (void)state;
    SafeTensors st;
    need_golden(GOLDEN_DIR "/activations_low.safetensors", &st);
    static const char* const DT[2] = {"bf16", "fp16"};
    static const DType DTS[2] = {DTYPE_BF16, DTYPE_F16};
    enum { N = 65536 };
    // the ASan pass: every 8th pattern and every non-finite one (the same code paths)
    if (SANITIZER_PASS) sanitizer_pass_note("the activation tables on every 8th pattern and every +-inf/NaN one");
    for (int d = 0; d < 2; d++) {
        char name[96];
        snprintf(name, sizeof name, "input.%s.x", DT[d]);
        const StTensor* xt = need(&st, name);
        snprintf(name, sizeof name, "input.%s.dy", DT[d]);
        const StTensor* dyt = need(&st, name);
        assert_int_equal(xt->numel, N);
        assert_int_equal(dyt->numel, N);
        size_t* pick = malloc(N * sizeof *pick);
        size_t n = 0;
        for (size_t i = 0; i < N; i++)
            if (!SANITIZER_PASS || i % 8 == 0 || !isfinite(dtype_f64_at(DTS[d], xt->data, i))) pick[n++] = i;
        uint16_t* xs = malloc(n * sizeof(uint16_t));
        uint16_t* dys = malloc(n * sizeof(uint16_t));
        for (size_t j = 0; j < n; j++) {
            xs[j] = ((const uint16_t*)xt->data)[pick[j]];
            dys[j] = ((const uint16_t*)dyt->data)[pick[j]];
        }
        for (int a = 0; a < (int)FFN_ACT_COUNT; a++) {  // every implemented activation
            const FfnActivation act = (FfnActivation)a;
            snprintf(name, sizeof name, "expect.%s.%s.y", ffn_activation_name(act), DT[d]);
            const uint16_t* yr_all = (const uint16_t*)need(&st, name)->data;
            snprintf(name, sizeof name, "expect.%s.%s.dx", ffn_activation_name(act), DT[d]);
            const uint16_t* dxr_all = (const uint16_t*)need(&st, name)->data;
            uint16_t* yr = malloc(n * sizeof(uint16_t));
            uint16_t* dxr = malloc(n * sizeof(uint16_t));
            for (size_t j = 0; j < n; j++) yr[j] = yr_all[pick[j]], dxr[j] = dxr_all[pick[j]];
            uint16_t* yl = malloc(n * sizeof(uint16_t));
            uint16_t* dxl = malloc(n * sizeof(uint16_t));
            ffn_activation_forward_low(act, NULL, yl, xs, n, DTS[d]);
            ffn_activation_backward_low(act, dxl, dys, NULL, xs, n, DTS[d]);
            size_t bad_y = 0, bad_dx = 0, zero_sign = 0, nonfinite_x = 0;
            uint64_t max_ulp = 0;
            for (size_t i = 0; i < n; i++) {
                const float xv = (float)dtype_f64_at(DTS[d], xs, i);
                const float yo = (float)dtype_f64_at(DTS[d], yl, i), yt = (float)dtype_f64_at(DTS[d], yr, i);
                const float go = (float)dtype_f64_at(DTS[d], dxl, i), gt = (float)dtype_f64_at(DTS[d], dxr, i);
                const bool dx_zero_sign = dxl[i] != dxr[i] && go == 0.0f && gt == 0.0f;  // the allowance above
                if (!isfinite(xv) && ((yl[i] != yr[i] && !(isnan(yo) && isnan(yt))) ||
                                      (dxl[i] != dxr[i] && !(isnan(go) && isnan(gt)) && !dx_zero_sign))) {
                    nonfinite_x++;  // +-inf inputs: counted apart (GELU: oneDNN's gelu(+inf) is NaN)
                    continue;
                }
                if (yl[i] != yr[i] && !(isnan(yo) && isnan(yt))) {
                    bad_y++;
                    const uint64_t u = isnan(yo) || isnan(yt) ? UINT64_MAX : dtype_ulp_distance(DTS[d], yl[i], yr[i]);
                    max_ulp = u > max_ulp ? u : max_ulp;
                }
                if (dxl[i] != dxr[i] && !(isnan(go) && isnan(gt))) {
                    if (go == 0.0f && gt == 0.0f) {
                        zero_sign++;
                    } else {
                        bad_dx++;
                        const uint64_t u =
                            isnan(go) || isnan(gt) ? UINT64_MAX : dtype_ulp_distance(DTS[d], dxl[i], dxr[i]);
                        max_ulp = u > max_ulp ? u : max_ulp;
                    }
                }
            }
            printf("%s %s: %zu patterns, forward %zu differ, backward %zu differ (+ %zu zeros of the other sign), "
                   "max %llu ulp; +-inf inputs differing: %zu\n", ffn_activation_name(act), DT[d], n, bad_y, bad_dx,
                   zero_sign, (unsigned long long)max_ulp, nonfinite_x);
            // bf16 GELU backward: oneDNN's derivative where torch uses oneDNN, from the kernel
            // itself or (built without oneDNN) from its formula written out in layers.c
            const bool bf16_gelu = act == FFN_ACT_GELU && DTS[d] == DTYPE_BF16;
            if (bf16_gelu && gelu_onednn_torch_uses()) {
                const bool grad_onednn = !strcmp(layers_gelu_bf16_grad_source(), "onednn");
                printf("  (bf16 GELU: oneDNN's forward; backward from %s)\n",
                       grad_onednn ? "oneDNN's derivative kernel" : "oneDNN's derivative formula (built without oneDNN)");
                assert_int_equal(bad_y, 0);
                assert_int_equal(nonfinite_x, 0);
                assert_int_equal(bad_dx, 0);
            } else if (!bf16_gelu) {  // relu, silu and fp16 GELU (ATen's reduced-type kernel): every pattern
                assert_int_equal(bad_y, 0);
                assert_int_equal(bad_dx, 0);
                assert_int_equal(nonfinite_x, 0);
            }  // else bf16 GELU on a CPU where torch would not use oneDNN: reported only (the golden's is)
            free(yl);
            free(dxl);
            free(yr);
            free(dxr);
        }
        free(pick);
        free(xs);
        free(dys);
    }
    st_free(&st);
}

// fp32 GELU against torch's own (golden activations_f32: F.gelu forward and backward on 65,536 fp32
// inputs, random bit patterns, normal draws, a ramp, tiny values and the minimax pieces' bounds).
// torch runs fp32 GELU on oneDNN, whose forward depends on the ISA (layers.c): the golden holds
// the default run's y (metadata default_forward: which kernel that was on the generating CPU) and
// the forward with oneDNN held to AVX2. Ours with each kernel forced must give the same bits
// (the minimax one only where this CPU can run it), and the default kernel here must be the one
// torch picks on such a CPU. The backward (one formula on every ISA) likewise. Allowances, stated:
// a NaN matches any NaN; the backward's +0 where torch has -0 (ours is the add into a zeroed
// gradient, 0 + R(...): layers.h).
static size_t gelu_f32_mismatches(const float* ours, const float* torch_, size_t n, bool zero_sign_ok) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &ours[i], sizeof a);
        memcpy(&b, &torch_[i], sizeof b);
        if (a == b || (isnan(ours[i]) && isnan(torch_[i]))) continue;
        if (zero_sign_ok && ours[i] == 0.0f && torch_[i] == 0.0f) continue;
        if (bad++ < 3) printf("  x #%zu: ours %a, torch %a\n", i, (double)ours[i], (double)torch_[i]);
    }
    return bad;
}

static void test_activation_f32(void** state) {
    (void)state;
    SafeTensors st;
    need_golden(GOLDEN_DIR "/activations_f32.safetensors", &st);
    const StTensor* xt = need(&st, "input.x");
    const size_t n = xt->numel;
    const float* x = (const float*)xt->data;
    const float* dy = (const float*)need(&st, "input.dy")->data;
    const float* y_default = (const float*)need(&st, "expect.gelu.y")->data;
    const float* y_avx2 = (const float*)need(&st, "expect.gelu.y_avx2")->data;
    const float* dx_t = (const float*)need(&st, "expect.gelu.dx")->data;
    const char* dk = st_meta(&st, "default_forward");
    assert_non_null(dk);
    const bool golden_mm = !strcmp(dk, "minimax");
    float* y = malloc(n * sizeof(float));
    float* dx = calloc(n, sizeof(float));
    // the Abramowitz-Stegun forward (oneDNN held to AVX2); the minimax one where this CPU runs it
    assert_true(layers_gelu_f32_force(0));
    gelu_forward(y, x, n, DTYPE_F32);
    size_t bad = gelu_f32_mismatches(y, y_avx2, n, false);
    printf("fp32 gelu, Abramowitz-Stegun forward vs torch with ONEDNN_MAX_CPU_ISA=AVX2: %zu of %zu differ\n", bad, n);
    assert_int_equal(bad, 0);
    if (golden_mm) {
        if (layers_gelu_f32_force(1)) {
            gelu_forward(y, x, n, DTYPE_F32);
            bad = gelu_f32_mismatches(y, y_default, n, false);
            printf("fp32 gelu, minimax forward vs torch's default (AVX-512): %zu of %zu differ\n", bad, n);
            assert_int_equal(bad, 0);
        } else {
            printf("fp32 gelu, minimax forward: not checked (this CPU has no AVX-512 BW/VL/DQ)\n");
        }
    }
    // the kernel chosen by default: torch's on a CPU like this one
    layers_gelu_f32_force(-1);
    gelu_forward(y, x, n, DTYPE_F32);
    const float* y_here = layers_gelu_f32_minimax() ? (golden_mm ? y_default : NULL) : y_avx2;
    if (y_here) assert_int_equal(gelu_f32_mismatches(y, y_here, n, false), 0);
    printf("fp32 gelu default here: %s\n", layers_gelu_f32_minimax() ? "minimax" : "Abramowitz-Stegun");
    gelu_backward(dx, dy, x, n, DTYPE_F32);
    bad = gelu_f32_mismatches(dx, dx_t, n, true);
    printf("fp32 gelu backward vs torch: %zu of %zu differ\n", bad, n);
    assert_int_equal(bad, 0);
    free(y);
    free(dx);
    st_free(&st);
}

// LayerNorm against torch's own (golden layernorm_rows: F.layer_norm forward and backward
// through autograd, fp32, eps 1e-12, 11 shapes of 1-64 rows of 3 to 3072 values, scales 1e-4 to
// 1e3): y, mean, rstd, dx, dgamma and dbeta must be bit for bit torch's (layers.c writes out
// ATen's RowwiseMoments and layer_norm_backward_frame with its fused multiply-adds). One
// allowance, stated: a zero of the other sign in dx (ours is the add into a zeroed gradient,
// 0 + v: layers.h). With 1 and 2 threads (rows and column panels split over the team).
static void test_layernorm_rows(void** state) {
    (void)state;
    SafeTensors st;
    need_golden(GOLDEN_DIR "/layernorm_rows.safetensors", &st);
    const char* shapes = need_meta(&st, "shapes");
    size_t compared = 0, zero_sign = 0;
    const int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        for (const char* sp = shapes; *sp;) {
            int M, D, used;
            assert_int_equal(sscanf(sp, "%dx%d%n", &M, &D, &used), 2);
            sp += used + (sp[used] == ',');
            char name[96];
#define LN_T(kind, what) (snprintf(name, sizeof name, "%s.%dx%d.%s", kind, M, D, what), (const float*)need(&st, name)->data)
            const float *x = LN_T("input", "x"), *dy = LN_T("input", "dy"), *w = LN_T("input", "gamma"),
                        *b = LN_T("input", "beta");
            const float* want[6] = {LN_T("expect", "y"),  LN_T("expect", "mean"),   LN_T("expect", "rstd"),
                                    LN_T("expect", "dx"), LN_T("expect", "dgamma"), LN_T("expect", "dbeta")};
#undef LN_T
            const size_t n = (size_t)M * (size_t)D;
            float* y = malloc(n * sizeof(float));
            float* mean = malloc((size_t)M * sizeof(float));
            float* rstd = malloc((size_t)M * sizeof(float));
            float* dx = calloc(n, sizeof(float));
            float* dw = calloc((size_t)D, sizeof(float));
            float* db = calloc((size_t)D, sizeof(float));
            layernorm_forward(y, mean, rstd, x, w, b, M, D, 1e-12f);
            layernorm_backward(dx, dw, db, dy, x, mean, rstd, w, M, D);
            const float* got[6] = {y, mean, rstd, dx, dw, db};
            const size_t count[6] = {n, (size_t)M, (size_t)M, n, (size_t)D, (size_t)D};
            static const char* const WHAT[6] = {"y", "mean", "rstd", "dx", "dgamma", "dbeta"};
            for (int k = 0; k < 6; k++)
                for (size_t i = 0; i < count[k]; i++) {
                    if (!memcmp(&got[k][i], &want[k][i], sizeof(float))) continue;
                    if (k == 3 && got[k][i] == 0.0f && want[k][i] == 0.0f) {
                        zero_sign++;
                        continue;
                    }
                    fail_msg("layernorm %dx%d (%d threads): %s[%zu] = %a, torch %a", M, D, threads, WHAT[k], i,
                             (double)got[k][i], (double)want[k][i]);
                }
            compared += 2 * n + 2 * (size_t)M + 2 * (size_t)D;
            free(y), free(mean), free(rstd), free(dx), free(dw), free(db);
        }
    }
    omp_set_num_threads(saved);
    printf("layernorm_rows: %zu values (y, mean, rstd, dx, dgamma, dbeta; 1 and 2 threads) bit-identical to torch's "
           "(+ %zu zeros of dx of the other sign)\n", compared, zero_sign);
    st_free(&st);
}

// One fp16 or bf16 value as a double, for messages
static double low_value(DType dt, uint16_t v) {
    return dt == DTYPE_F16 ? (double)fp16_to_f32((Fp16){v}) : (double)bf16_to_f32((Bf16){v});
}

// Checks one product against torch's values: the naive backend with the arguments layers.c
// gives it (order, torch_macs), C in the inputs' dtype, every value bit for bit. Returns the count.
static size_t check_low_product(Gemm* gemm, GemmArgs a, const uint16_t* want, const char* what) {
    const size_t n = (size_t)a.M * (size_t)a.N;
    uint16_t* out = xmalloc(n * sizeof(uint16_t));
    a.alpha = 1.0f, a.beta = 0.0f, a.c_dtype = a.ab_dtype, a.C = out, a.ldc = a.N;
    assert_true(status_is_ok(gemm_run(gemm, &a)));
    const bool onednn_order = a.ab_dtype == DTYPE_BF16 && a.torch_macs > GEMM_BF16_ONEDNN_MIN_MACS;
    for (size_t i = 0; i < n; i++)
        if (out[i] != want[i])
            fail_msg("%s [%zu] = %a, torch %a (%s, order %s, torch_macs %lld)", what, i, low_value(a.ab_dtype, out[i]),
                     low_value(a.ab_dtype, want[i]), a.ab_dtype == DTYPE_F16 ? "fp16" : "bf16",
                     onednn_order ? "bf16 pairs" : a.f16_sum == GEMM_F16_SUM_DOT ? "DOT" : "MM",
                     (long long)a.torch_macs);
    free(out);
    return n;
}

// attention_<f16|bf16>_orders (reference/gen_attention_order_goldens.py): torch's six attention
// products per head, with DistilBERT's head split, on inputs built so that every summation
// order gives different bits (fp16: 8 (B, H, T, dh) configurations: batch and heads > 1; batch
// 1; one head; both; head dims with and without a 16-element tail; T past a 64-block. bf16: 6,
// on both sides of torch's 16*16*16 oneDNN threshold). Each product is recomputed with the
// naive backend in the order attention_f16_sum names for it and with head_mm's torch_macs, the
// operands laid out as layers.c passes them; every value must be torch's bit for bit. Checked:
// it fails with every product MM, with the batch-1 / one-head swap removed, with dP in the MM
// order, and (bf16) with every product in the pairs order.
static size_t check_attention_orders(const char* file, DType dt, const GemmBackend* backend, size_t* configs_out) {
    SafeTensors st;
    need_golden(file, &st);
    Gemm gemm;
    assert_true(status_is_ok(gemm_open(&gemm, backend, 1)));
    static const char* const NAME[6] = {"S", "ctx", "dP", "dv", "dq", "dk"};
    static const AttentionProduct PROD[6] = {ATT_SCORES, ATT_PV, ATT_DP, ATT_DV, ATT_DQ, ATT_DK};
    size_t compared = 0, configs = 0;
    for (int ci = 0;; ci++) {
        char name[64];
#define AO_T(kind, what) (snprintf(name, sizeof name, "%s.c%d.%s", kind, ci, what), st_find(&st, name))
        const StTensor *tq = AO_T("input", "q"), *tP = AO_T("input", "P");
        if (!tq) break;
        assert_non_null(tP);
        assert_int_equal(tq->ndim, 3);
        assert_int_equal(tP->ndim, 4);
        assert_int_equal(tq->dtype, dt);
        const int B = (int)tP->shape[0], H = (int)tP->shape[1], T = (int)tP->shape[2], D = (int)tq->shape[2];
        const int dh = D / H;
        const uint16_t *q = AO_T("input", "q")->data, *k = AO_T("input", "k")->data, *v = AO_T("input", "v")->data;
        const uint16_t *P = tP->data, *dS = AO_T("input", "dS")->data, *dctx = AO_T("input", "dctx")->data;
        const StTensor* want[6];
        for (int p = 0; p < 6; p++) {
            want[p] = AO_T("expect", NAME[p]);
            assert_non_null(want[p]);
            assert_int_equal(want[p]->dtype, dt);
        }
#undef AO_T
        const size_t TT = (size_t)T * (size_t)T, Td = (size_t)T * (size_t)dh;
        for (int bh = 0; bh < B * H; bh++) {
            const int b = bh / H, h = bh % H;
            const size_t off = (size_t)b * (size_t)T * (size_t)D + (size_t)h * (size_t)dh;  // head of (B, T, D)
            const uint16_t *qh = q + off, *kh = k + off, *vh = v + off;
            const uint16_t *Ph = P + (size_t)bh * TT, *dSh = dS + (size_t)bh * TT, *dch = dctx + (size_t)bh * Td;
            // the operands and shapes of layers.c's head_mm calls, product by product
            const struct {
                bool ta, tb;
                int M, N, K;
                const uint16_t *A, *Bm;
                int lda, ldb;
            } g[6] = {{false, true, T, T, dh, qh, kh, D, D},     {false, false, T, dh, T, Ph, vh, T, D},
                      {false, true, T, T, dh, dch, vh, dh, D},   {true, false, T, dh, T, Ph, dch, T, dh},
                      {false, false, T, dh, T, dSh, kh, T, D},   {true, false, T, dh, T, dSh, qh, T, D}};
            for (int p = 0; p < 6; p++) {
                GemmArgs a = {.trans_a = g[p].ta, .trans_b = g[p].tb, .M = g[p].M, .N = g[p].N, .K = g[p].K,
                              .ab_dtype = dt, .A = g[p].A, .lda = g[p].lda, .B = g[p].Bm, .ldb = g[p].ldb,
                              .f16_sum = attention_f16_sum(PROD[p], B, H, T),
                              .torch_macs = (int64_t)B * H * g[p].M * g[p].N * g[p].K};
                char what[128];
                snprintf(what, sizeof what, "%s c%d (B %d, H %d, T %d, dh %d): %s head %d", file, ci, B, H, T, dh,
                         NAME[p], bh);
                const size_t n = (size_t)g[p].M * (size_t)g[p].N;
                compared += check_low_product(&gemm, a, (const uint16_t*)want[p]->data + (size_t)bh * n, what);
            }
        }
        configs++;
    }
    gemm_close(&gemm);
    st_free(&st);
    *configs_out = configs;
    return compared;
}

// Whether the onednn backend's bf16 products can be held to the order goldens: oneDNN built in
// and dispatching its avx512_core_bf16 kernels, as on the goldens' machine (where torch's bf16
// matmul is oneDNN summing in VDPBF16PS pairs). Elsewhere oneDNN's kernels sum in another order
// (AMX tiles; or no bf16 kernel at all without avx512_bf16) and so would torch's own oneDNN on
// that CPU: the naive backend stays the reference there. *why_not says which.
static bool onednn_runs_golden_bf16_order(const char** why_not) {
    static char why[160];
    const char* isa = gemm_onednn_isa();
    Gemm probe;
    if (!isa || !status_is_ok(gemm_open(&probe, &gemm_backend_onednn, 1))) {
        *why_not = "onednn not built";
        return false;
    }
    gemm_close(&probe);
    if (!cpu_features()->avx512_bf16 || strcmp(isa, GEMM_ONEDNN_GOLDEN_BF16_ISA) != 0) {
        snprintf(why, sizeof why, "oneDNN dispatches %s here, the goldens' bf16 order is that of %s", isa,
                 GEMM_ONEDNN_GOLDEN_BF16_ISA);
        *why_not = why;
        return false;
    }
    return true;
}

static void test_attention_low_orders(void** state) {
    (void)state;
    size_t cf, cb, co = 0, no = 0;
    const size_t nf = check_attention_orders(GOLDEN_DIR "/attention_f16_orders.safetensors", DTYPE_F16,
                                             &gemm_backend_naive, &cf);
    const size_t nb = check_attention_orders(GOLDEN_DIR "/attention_bf16_orders.safetensors", DTYPE_BF16,
                                             &gemm_backend_naive, &cb);
    // the onednn backend, where built: bf16 in oneDNN, and the products torch gives its CPU BLAS
    // through the naive orders (gemm_onednn.c onednn_small_bf16)
    const char* why_not = NULL;
    const bool onednn = onednn_runs_golden_bf16_order(&why_not);
    if (onednn)
        no = check_attention_orders(GOLDEN_DIR "/attention_bf16_orders.safetensors", DTYPE_BF16, &gemm_backend_onednn,
                                    &co);
    assert_true(cf >= 8 && cb >= 6);
    printf("attention orders: fp16 %zu configurations, %zu values; bf16 %zu configurations, %zu values (onednn "
           "backend: %zu values%s%s): the six attention products bit-identical to torch's\n", cf, nf, cb, nb, no,
           onednn ? "" : ", not run: ", onednn ? "" : why_not);
}

// n values of 1.0 in the low dtype (fp16 0x3c00, bf16 0x3f80): the W (and x) of linear_low_orders
static uint16_t* low_ones(DType dt, size_t n) {
    uint16_t* ones = xmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) ones[i] = dt == DTYPE_F16 ? 0x3c00 : 0x3f80;
    return ones;
}

// linear_low_orders: F.linear's forward (x @ W^T), dx (dy @ W) and dW (dy^T @ x) in fp16 and bf16
// on crafted inputs, sizes on both sides of bf16's oneDNN threshold; mm_on's rule: nt DOT, the
// others MM, torch_macs = M*N*K. Checked: fails with bf16 always in the pairs order.
static void check_linear_orders(const GemmBackend* backend, bool bf16_only) {
    SafeTensors st;
    need_golden(GOLDEN_DIR "/linear_low_orders.safetensors", &st);
    Gemm gemm;
    assert_true(status_is_ok(gemm_open(&gemm, backend, 1)));
    const char* sizes = need_meta(&st, "sizes");
    size_t compared = 0, cases = 0;
    static const char* const DT_NAME[2] = {"fp16", "bf16"};
    static const DType DT[2] = {DTYPE_F16, DTYPE_BF16};
    for (int d = bf16_only ? 1 : 0; d < 2; d++)
        for (const char* sp = sizes; *sp;) {
            int N, Kin, Kout, used;
            assert_int_equal(sscanf(sp, "%dx%dx%d%n", &N, &Kin, &Kout, &used), 3);
            sp += used + (sp[used] == ',');
            char name[96];
#define LO_T(kind, what) (snprintf(name, sizeof name, "%s.%s.%dx%dx%d.%s", kind, DT_NAME[d], N, Kin, Kout, what), \
                          (const uint16_t*)need(&st, name)->data)
            const uint16_t *x = LO_T("input", "x"), *dy = LO_T("input", "dy"), *dyw = LO_T("input", "dyW");
            const uint16_t *y = LO_T("expect", "y"), *dx = LO_T("expect", "dx"), *dW = LO_T("expect", "dW");
#undef LO_T
            uint16_t* ones = low_ones(DT[d], (size_t)(N > Kout ? N : Kout) * (size_t)Kin);
            const int64_t macs = (int64_t)N * Kin * Kout;
            char what[96];
            snprintf(what, sizeof what, "linear %s %dx%dx%d forward", DT_NAME[d], N, Kin, Kout);
            compared += check_low_product(&gemm, (GemmArgs){.trans_b = true, .M = N, .N = Kout, .K = Kin, .ab_dtype = DT[d],
                                                            .A = x, .lda = Kin, .B = ones, .ldb = Kin,
                                                            .f16_sum = GEMM_F16_SUM_DOT, .torch_macs = macs}, y, what);
            snprintf(what, sizeof what, "linear %s %dx%dx%d dx", DT_NAME[d], N, Kin, Kout);
            compared += check_low_product(&gemm, (GemmArgs){.M = N, .N = Kin, .K = Kout, .ab_dtype = DT[d], .A = dy,
                                                            .lda = Kout, .B = ones, .ldb = Kin,
                                                            .f16_sum = GEMM_F16_SUM_MM, .torch_macs = macs}, dx, what);
            snprintf(what, sizeof what, "linear %s %dx%dx%d dW", DT_NAME[d], N, Kin, Kout);
            compared += check_low_product(&gemm, (GemmArgs){.trans_a = true, .M = Kout, .N = Kin, .K = N, .ab_dtype = DT[d],
                                                            .A = dyw, .lda = Kout, .B = ones, .ldb = Kin,
                                                            .f16_sum = GEMM_F16_SUM_MM, .torch_macs = macs}, dW, what);
            free(ones);
            cases++;
        }
    // k_lin's dx and dW behind the head split: layers.c's orders (dy_col_major at batch 1)
    const char* kgrad = need_meta(&st, "kgrad");
    size_t kcases = 0;
    for (int d = bf16_only ? 1 : 0; d < 2; d++)
        for (const char* sp = kgrad; *sp;) {
            int B, H, T, dh, used;
            assert_int_equal(sscanf(sp, "%dx%dx%dx%d%n", &B, &H, &T, &dh, &used), 4);
            sp += used + (sp[used] == ',');
            char name[96];
            snprintf(name, sizeof name, "input.%s.k%dx%dx%dx%d.g1", DT_NAME[d], B, H, T, dh);
            if (!st_find(&st, name)) continue;  // bf16 keeps only the CPU BLAS-sized ones
#define KG_T(kind, what) (snprintf(name, sizeof name, "%s.%s.k%dx%dx%dx%d.%s", kind, DT_NAME[d], B, H, T, dh, what), \
                          (const uint16_t*)need(&st, name)->data)
            const uint16_t *g1 = KG_T("input", "g1"), *g2 = KG_T("input", "g2");
            const uint16_t *dx = KG_T("expect", "dx"), *dW = KG_T("expect", "dW");
#undef KG_T
            const int N = B * T, D = H * dh;
            const bool col = attention_k_grad_col_major(B, T);
            uint16_t* ones = low_ones(DT[d], (size_t)(N > D ? N : D) * (size_t)D);
            const int64_t macs = (int64_t)N * D * D;
            char what[96];
            snprintf(what, sizeof what, "k_lin %s B %d H %d T %d dh %d dx", DT_NAME[d], B, H, T, dh);
            compared += check_low_product(&gemm, (GemmArgs){.M = N, .N = D, .K = D, .ab_dtype = DT[d], .A = g1, .lda = D,
                                                            .B = ones, .ldb = D,
                                                            .f16_sum = col ? GEMM_F16_SUM_KORDER : GEMM_F16_SUM_MM,
                                                            .torch_macs = macs}, dx, what);
            snprintf(what, sizeof what, "k_lin %s B %d H %d T %d dh %d dW", DT_NAME[d], B, H, T, dh);
            compared += check_low_product(&gemm, (GemmArgs){.trans_a = true, .M = D, .N = D, .K = N, .ab_dtype = DT[d],
                                                            .A = g2, .lda = D, .B = ones, .ldb = D,
                                                            .f16_sum = col ? GEMM_F16_SUM_PARTIAL4 : GEMM_F16_SUM_MM,
                                                            .torch_macs = macs}, dW, what);
            free(ones);
            kcases++;
        }
    gemm_close(&gemm);
    st_free(&st);
    assert_true(bf16_only ? cases >= 7 && kcases >= 2 : cases >= 14 && kcases >= 8);
    printf("linear orders (%s backend%s): %zu (dtype, size) cases and %zu k_lin backward cases, %zu values of forward, "
           "dx and dW bit-identical to torch's\n", backend->name, bf16_only ? ", bf16" : "", cases, kcases, compared);
}

static void test_linear_low_orders(void** state) {
    (void)state;
    check_linear_orders(&gemm_backend_naive, false);
    const char* why_not = NULL;
    if (onednn_runs_golden_bf16_order(&why_not))
        check_linear_orders(&gemm_backend_onednn, true);
    else
        printf("linear orders (onednn backend): not run: %s\n", why_not);
}

// sinusoidal_pos_embds=True: the position table transformers' own init gives the model
// (golden sinusoidal_pos, four (positions, dim) shapes up to distilbert-base-cased's 512 x 768)
// against model_sinusoidal_table bit for bit, and through param_table_init_weights (the
// position tensor of a table built with the flag; the word embeddings still N(0, std)). The
// golden also records that transformers keeps the table trainable (requires_grad), which is what
// our training does (it is an ordinary parameter).
static void test_sinusoidal_table(void** state) {
    (void)state;
    SafeTensors st;
    need_golden(GOLDEN_DIR "/sinusoidal_pos.safetensors", &st);
    assert_string_equal(need_meta(&st, "requires_grad"), "true");
    size_t shapes = 0;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        long long n_pos, dim;
        if (sscanf(t->name, "expect.pos.%lldx%lld", &n_pos, &dim) != 2) continue;
        const size_t n = (size_t)(n_pos * dim);
        float* want = need_f32(&st, t->name, n);
        float* got = xmalloc(n * sizeof(float));
        model_sinusoidal_table(got, n_pos, dim);
        size_t diff = 0;
        for (size_t k = 0; k < n; k++) diff += memcmp(&got[k], &want[k], sizeof(float)) != 0;
        printf("sinusoidal %lldx%lld: %zu of %zu values differ from transformers'\n", n_pos, dim, diff, n);
        assert_int_equal(diff, 0);
        // through the model's init: the flag set on a small config of this shape
        ModelConfig cfg = *model_config_find("tiny");
        cfg.dim = dim;
        cfg.n_heads = dim % 2 == 0 ? 2 : 1;
        cfg.max_positions = n_pos;
        cfg.sinusoidal_pos_embds = true;
        ParamTable table;
        assert_true(status_is_ok(param_table_build(&cfg, &table)));
        float* p = param_table_alloc_buffer(&table);
        param_table_init_weights(&table, p, 7, 0.02f);
        const ParamTensor* pos = param_table_find(&table, "distilbert.embeddings.position_embeddings.weight");
        const ParamTensor* word = param_table_find(&table, "distilbert.embeddings.word_embeddings.weight");
        assert_memory_equal(p + pos->offset, want, n * sizeof(float));
        bool random_words = false;
        for (size_t k = (size_t)dim; k < word->numel && !random_words; k++) random_words = p[word->offset + k] != 0;
        assert_true(random_words);
        free(p);
        param_table_free(&table);
        free(want);
        free(got);
        shapes++;
    }
    assert_int_equal(shapes, 4);
    st_free(&st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens_present_and_cover_every_mode),
        cmocka_unit_test(test_every_golden_matches),
        cmocka_unit_test(test_training_trajectories),
        cmocka_unit_test(test_activation_tables),
        cmocka_unit_test(test_activation_f32),
        cmocka_unit_test(test_layernorm_rows),
        cmocka_unit_test(test_attention_low_orders),
        cmocka_unit_test(test_linear_low_orders),
        cmocka_unit_test(test_sinusoidal_table),
    };
    return cmocka_run_group_tests_name("model_golden", tests, NULL, NULL);
}

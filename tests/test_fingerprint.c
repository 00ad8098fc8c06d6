// test_fingerprint.c — end-to-end tests of `trainbench fingerprint` (runs BUILD/trainbench like
// test_gate): every golden trajectory (reference/golden/model/train_*.safetensors) as a candidate
// matches itself and only itself; perturbed trajectories inside / outside the tolerance; label
// agreement and contradiction ("claims fp16, matches fp32"); the text, CSV and JSON formats;
// the PyTorch demonstration runs of reference/fingerprint_demo.py (reference/golden/fingerprint/:
// 2-thread re-runs, HF Accelerate fp16 on CPU, a plain fp32 run labelled fp16) give the verdicts
// reference/FINGERPRINT.md states; our own C trainer (train_step, as `trainbench train` runs it)
// replaying each golden's initial weights and batches on every backend is recognised as that
// golden's mode and dialect; and unusable input exits 2 naming the problem.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_harness.h"
#include "golden_replay.h"
#include "sanitizer_pass.h"

#define GOLDENS "reference/golden/model"
#define DEMO "reference/golden/fingerprint"
#define TOL 3e-5  // the command's default (src/validate/fingerprint.c explains it)

static char g_out[65536];

static int run_fp(const char* args) {
    char full[8192];
    snprintf(full, sizeof full, "fingerprint %s", args);
    return cli_run(full, true, g_out, sizeof g_out);
}

static void expect(const char* args, int code, const char* needle) {
    int rc = run_fp(args);
    if (rc != code || (needle && !strstr(g_out, needle))) printf("output was:\n%s\n", g_out);
    assert_int_equal(rc, code);
    if (needle) assert_non_null(strstr(g_out, needle));
}

static int count_of(const char* hay, const char* needle) {
    int n = 0;
    for (const char* p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void path_of(char* buf, size_t len, const char* name) { snprintf(buf, len, "%s/%s", g_tmp, name); }

static void write_text(const char* name, const char* text) {
    char p[512];
    path_of(p, sizeof p, name);
    FILE* f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

// the goldens' trajectories: name (train_x), mode, optimizer, losses
typedef struct {
    char name[128], mode[32], optim[32];
    char desc[160];  // how fingerprint names it: "fp16 (adamw_torch, GradScaler init 65536, interval 2000)"
    double loss[64];
    int n;
} Golden;

static Golden g_gold[32];
static int g_n_gold;

static int cmp_golden(const void* a, const void* b) { return strcmp(((const Golden*)a)->name, ((const Golden*)b)->name); }

static void load_goldens(void) {
    if (g_n_gold) return;
    DIR* d = opendir(GOLDENS);
    assert_non_null(d);
    struct dirent* e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "train_", 6) || l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        assert_true(g_n_gold < 32);
        Golden* g = &g_gold[g_n_gold++];
        char p[512];
        snprintf(p, sizeof p, "%s/%s", GOLDENS, e->d_name);
        SafeTensors st;
        assert_true(status_is_ok(st_read(p, &st)));
        snprintf(g->name, sizeof g->name, "%.*s", (int)(l - 12), e->d_name);
        snprintf(g->mode, sizeof g->mode, "%s", st_meta(&st, "mode"));
        snprintf(g->optim, sizeof g->optim, "%s", st_meta(&st, "optimizer"));
        json_t* gs = json_loads(st_meta(&st, "grad_scaler") ? st_meta(&st, "grad_scaler") : "null", JSON_DECODE_ANY, NULL);
        if (json_is_object(gs))
            snprintf(g->desc, sizeof g->desc, "%s (%s, GradScaler init %.0f, interval %lld)", st_meta(&st, "mode"),
                     st_meta(&st, "optimizer"),
                     json_number_value(json_object_get(gs, "init_scale")),
                     (long long)json_integer_value(json_object_get(gs, "growth_interval")));
        else
            snprintf(g->desc, sizeof g->desc, "%s (%s)", st_meta(&st, "mode"), st_meta(&st, "optimizer"));
        json_decref(gs);
        const StTensor* t = st_find(&st, "expect.loss");
        assert_non_null(t);
        g->n = (int)t->numel;
        for (int k = 0; k < g->n; k++) g->loss[k] = ((const float*)t->data)[k];
        st_free(&st);
    }
    closedir(d);
    qsort(g_gold, (size_t)g_n_gold, sizeof(Golden), cmp_golden);
    // the four precision modes with adamw_torch plus the optimizer dialects
    assert_true(g_n_gold >= 8);
}

// References that never differ by more than 2 x tolerance over their 20 steps (FINGERPRINT.md:
// 2.18e-5 apart at most): fp16 with GradScaler at its defaults (init 2^16, interval 2000) never
// overflows on the tiny preset and loses almost nothing to underflow, so its trajectory is
// fp16-noscale's. Each is "ambiguous" with the other, by design.
static const char* inseparable_partner(const char* name) {
    static const char* const PAIRS[][2] = {{"train_fp16-noscale", "train_fp16_scaler_default"}};
    for (size_t i = 0; i < sizeof PAIRS / sizeof PAIRS[0]; i++) {
        if (!strcmp(name, PAIRS[i][0])) return PAIRS[i][1];
        if (!strcmp(name, PAIRS[i][1])) return PAIRS[i][0];
    }
    return NULL;
}

static const Golden* golden(const char* name) {
    load_goldens();
    for (int i = 0; i < g_n_gold; i++)
        if (!strcmp(g_gold[i].name, name)) return &g_gold[i];
    fail_msg("no golden %s", name);
    return NULL;
}

// JSON candidate {"losses": [...], "label": ...} (label NULL: none)
static void write_json(const char* name, const double* loss, int n, const char* label) {
    char buf[8192];
    size_t o = (size_t)snprintf(buf, sizeof buf, "{\"losses\": [");
    for (int k = 0; k < n; k++) o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%.9g", k ? ", " : "", loss[k]);
    if (label) snprintf(buf + o, sizeof buf - o, "], \"label\": \"%s\"}\n", label);
    else snprintf(buf + o, sizeof buf - o, "]}\n");
    write_text(name, buf);
}

// ---- every golden matches itself and only itself ----
static void test_each_golden_matches_only_itself(void** s) {
    (void)s;
    load_goldens();
    for (int i = 0; i < g_n_gold; i++) {
        char args[1024], want[256], row[256];
        snprintf(args, sizeof args, "%s/%.127s.safetensors", GOLDENS, g_gold[i].name);
        const char* partner = inseparable_partner(g_gold[i].name);
        if (partner) {  // itself first, then the one it cannot be told apart from
            snprintf(want, sizeof want, "\nambiguous: consistent with %s and %s\n", g_gold[i].desc, golden(partner)->desc);
            expect(args, 1, want);
        } else {
            snprintf(want, sizeof want, "\nmatches %s\n", g_gold[i].desc);
            expect(args, 0, want);
        }
        snprintf(row, sizeof row, "1    %-28.127s", g_gold[i].name);  // ranked first
        assert_non_null(strstr(g_out, row));
        assert_int_equal(count_of(g_out, "  consistent\n"), partner ? 2 : 1);
        assert_int_equal(count_of(g_out, "not consistent\n"), g_n_gold - (partner ? 2 : 1));
    }
}

// ---- perturbations: inside the tolerance still matches, beyond it matches none ----
static void test_perturbed(void** s) {
    (void)s;
    const Golden* g = golden("train_fp32");
    double l[64];
    memcpy(l, g->loss, sizeof l);
    l[9] += 0.9 * TOL;  // step 10
    write_json("in.json", l, g->n, NULL);
    char args[1024];
    snprintf(args, sizeof args, "%s/in.json", g_tmp);
    expect(args, 0, "\nmatches fp32 (adamw_torch)\n");
    l[9] = g->loss[9] + 1.5 * TOL;
    write_json("out.json", l, g->n, NULL);
    snprintf(args, sizeof args, "%s/out.json", g_tmp);
    expect(args, 1, "matches none (closest: fp32 (adamw_torch), |dloss| ");
    assert_non_null(strstr(g_out, "at step 10)"));
    // the same with a wider --tolerance is consistent again
    snprintf(args, sizeof args, "%s/out.json --tolerance 5e-5", g_tmp);
    expect(args, 0, "\nmatches fp32 (adamw_torch)\n");
    // beyond fp32's decisive steps (1..14: by then it has separated from every other reference)
    // a deviation does not change the verdict; it is reported in a note
    memcpy(l, g->loss, sizeof l);
    l[16] += 10 * TOL;  // step 17
    write_json("late.json", l, g->n, NULL);
    snprintf(args, sizeof args, "%s/late.json", g_tmp);
    expect(args, 0, "\nmatches fp32 (adamw_torch)\nnote: after its decisive steps 1..14 the candidate drifts from "
                    "train_fp32 (|dloss| 0.0003 at step 17)");
    // a trajectory that is halfway between fp32 and bf16 matches neither
    const Golden* b = golden("train_bf16");
    for (int k = 0; k < g->n; k++) l[k] = 0.5 * (g->loss[k] + b->loss[k]);
    write_json("mid.json", l, g->n, NULL);
    snprintf(args, sizeof args, "%s/mid.json", g_tmp);
    expect(args, 1, "matches none (closest: ");
}

// ---- labels ----
static void test_labels(void** s) {
    (void)s;
    const Golden* g = golden("train_fp32");
    char args[1024];
    write_json("fp32_as_fp16.json", g->loss, g->n, "fp16");
    snprintf(args, sizeof args, "%s/fp32_as_fp16.json", g_tmp);
    expect(args, 1, "\nclaims fp16, matches fp32 (adamw_torch)\n");
    // --label overrides the file's label
    snprintf(args, sizeof args, "%s/fp32_as_fp16.json --label fp32", g_tmp);
    expect(args, 0, "\nclaims fp32, matches fp32 (adamw_torch)\n");
    snprintf(args, sizeof args, "%s/fp32_as_fp16.json --label fp32/adamw_torch", g_tmp);
    expect(args, 0, "\nclaims fp32/adamw_torch, matches fp32 (adamw_torch)\n");
    // right mode, wrong optimizer dialect
    snprintf(args, sizeof args, "%s/fp32_as_fp16.json --label fp32/adafactor", g_tmp);
    expect(args, 1, "\nclaims fp32/adafactor, matches fp32 (adamw_torch)\n");
    const Golden* b = golden("train_bf16_adafactor");
    write_json("bf16_adafactor.json", b->loss, b->n, "bf16/adafactor");
    snprintf(args, sizeof args, "%s/bf16_adafactor.json", g_tmp);
    expect(args, 0, "\nclaims bf16/adafactor, matches bf16 (adafactor)\n");
    // a result folder's train results.json (read through results.h): losses of its records,
    // label = config precision/optim
    {
        char buf[8192];
        size_t o = (size_t)snprintf(buf, sizeof buf,
                                    "{\"schema_version\": 1, \"status\": \"done\", \"config\": {\"precision\": \"fp16\", "
                                    "\"optim\": \"adamw_torch\"}, \"records\": [");
        for (int k = 0; k < g->n; k++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s{\"step\": %d, \"loss\": %.9g}", k ? ", " : "", k + 1, g->loss[k]);
        snprintf(buf + o, sizeof buf - o, "], \"evals\": [], \"summary\": {}}\n");
        write_text("results.json", buf);
        snprintf(args, sizeof args, "%s/results.json", g_tmp);
        expect(args, 1, "\nclaims fp16/adamw_torch, matches fp32 (adamw_torch)\n");
        assert_non_null(strstr(g_out, "trainbench results.json"));
    }
    // a label on a trajectory that matches nothing
    double l[64];
    for (int k = 0; k < g->n; k++) l[k] = g->loss[k] + 1e-3;
    write_json("none.json", l, g->n, "bf16");
    snprintf(args, sizeof args, "%s/none.json", g_tmp);
    expect(args, 1, "\nclaims bf16, matches none (closest: ");
}

// ---- formats: text, CSV with header and comments, JSON array, safetensors "loss" ----
static void test_formats(void** s) {
    (void)s;
    const Golden* g = golden("train_fp16");
    char text[4096], csv[4096], arr[4096], args[1024];
    size_t a = 0, b = 0, c = 0;
    b += (size_t)snprintf(csv + b, sizeof csv - b, "# exported from my trainer\nstep,loss\n");
    c += (size_t)snprintf(arr + c, sizeof arr - c, "[");
    for (int k = 0; k < g->n; k++) {
        a += (size_t)snprintf(text + a, sizeof text - a, "%.9g\n", g->loss[k]);
        b += (size_t)snprintf(csv + b, sizeof csv - b, "%d, %.9g\r\n", k + 1, g->loss[k]);
        c += (size_t)snprintf(arr + c, sizeof arr - c, "%s%.9g", k ? "," : "", g->loss[k]);
    }
    snprintf(arr + c, sizeof arr - c, "]");
    write_text("l.txt", text);
    write_text("l.csv", csv);
    write_text("l.json", arr);
    char want[256];
    snprintf(args, sizeof args, "%s/l.txt", g_tmp);
    snprintf(want, sizeof want, "\nmatches %s\n", g->desc);
    expect(args, 0, want);
    assert_non_null(strstr(g_out, "(text, 20 losses)"));
    snprintf(args, sizeof args, "%s/l.csv --label fp16", g_tmp);
    snprintf(want, sizeof want, "\nclaims fp16, matches %s\n", g->desc);
    expect(args, 0, want);
    snprintf(args, sizeof args, "%s/l.json", g_tmp);
    snprintf(want, sizeof want, "\nmatches %s\n", g->desc);
    expect(args, 0, want);
    // safetensors: F64 "loss" with a label in the metadata
    StWriter* w = st_writer_new();
    int64_t shape[1] = {g->n};
    st_writer_add(w, "loss", DTYPE_F64, 1, shape, g->loss);
    st_writer_meta(w, "label", "fp16-noscale");
    char p[512];
    path_of(p, sizeof p, "l.safetensors");
    assert_true(status_is_ok(st_writer_save(w, p)));
    st_writer_free(w);
    snprintf(args, sizeof args, "%s", p);
    snprintf(want, sizeof want, "\nclaims fp16-noscale, matches %s\n", g->desc);
    expect(args, 1, want);
    // more steps than the references: the first 20 are compared
    double l[64];
    memcpy(l, g->loss, sizeof l);
    for (int k = g->n; k < g->n + 10; k++) l[k] = 0.5;
    write_json("long.json", l, g->n + 10, NULL);
    snprintf(args, sizeof args, "%s/long.json", g_tmp);
    expect(args, 0, "later steps are ignored");
    // fewer steps: compared over the common ones; 5 steps still tell fp16 apart
    write_json("short.json", g->loss, 5, NULL);
    snprintf(args, sizeof args, "%s/short.json", g_tmp);
    expect(args, 0, "steps 1..5");
}

// ---- short candidates: ambiguous once the closest pair has not diverged yet ----
static void test_short_is_ambiguous(void** s) {
    (void)s;
    // fp32 adamw_torch and fp32 adamw_bnb_8bit (8-bit state) stay within 2 x tolerance for
    // their first steps: a 5-step fp32 trajectory cannot tell them apart
    const Golden* g = golden("train_fp32");
    char args[1024];
    write_json("fp32_5.json", g->loss, 5, NULL);
    snprintf(args, sizeof args, "%s/fp32_5.json", g_tmp);
    expect(args, 1, "\nambiguous: consistent with fp32 (");
    assert_non_null(strstr(g_out, "first differ by more than 2 x tolerance at step"));
    // with a claimed mode that every consistent reference shares, the claim is confirmed
    snprintf(args, sizeof args, "%s/fp32_5.json --label fp32", g_tmp);
    expect(args, 0, "(all agree with the claim)");
}

// ---- the PyTorch demonstration runs (reference/fingerprint_demo.py) ----
static void test_pytorch_demo(void** s) {
    (void)s;
    static const struct { const char* file; int code; const char* conclusion; } CASES[] = {
        {"threads2_fp32", 0, "claims fp32, matches fp32 (adamw_torch)"},
        {"threads2_bf16", 0, "claims bf16, matches bf16 (adamw_torch)"},  // (a)
        {"threads2_fp16", 0, "claims fp16, matches fp16 (adamw_torch, GradScaler init 16777216, interval 4)"},
        // fp16-noscale cannot be told apart from fp16 with a default GradScaler (see inseparable_partner)
        {"threads2_fp16-noscale", 1, "claims fp16-noscale, ambiguous: consistent with fp16-noscale (adamw_torch) and "
                                     "fp16 (adamw_torch, GradScaler init 65536, interval 2000)"},
        {"threads2_fp32_foreach", 0, "claims fp32/adamw_torch, matches fp32 (adamw_torch)"},
        {"threads2_fp32_fused", 0, "claims fp32/adamw_torch, matches fp32 (adamw_torch)"},
        {"threads2_fp32_adafactor", 0, "claims fp32/adafactor, matches fp32 (adafactor)"},
        {"threads2_bf16_adafactor", 0, "claims bf16/adafactor, matches bf16 (adafactor)"},
        {"threads2_fp32_adafactor_torch", 0, "claims fp32/adafactor_torch, matches fp32 (adafactor_torch)"},
        {"threads2_fp32_adamw_bnb_8bit", 0, "claims fp32/adamw_bnb_8bit, matches fp32 (adamw_bnb_8bit)"},
        // torch.backends.mkldnn disabled: another GEMM path (bf16 Adafactor drifts 1.6e-5 by step 20)
        {"mkldnn_off_fp32", 0, "claims fp32/adamw_torch, matches fp32 (adamw_torch)"},
        {"mkldnn_off_bf16", 0, "claims bf16/adamw_torch, matches bf16 (adamw_torch)"},
        {"mkldnn_off_fp16", 0, "claims fp16/adamw_torch, matches fp16 (adamw_torch, GradScaler init 16777216, interval 4)"},
        {"mkldnn_off_fp16-noscale", 1, "claims fp16-noscale/adamw_torch, ambiguous: consistent with fp16-noscale "
                                       "(adamw_torch) and fp16 (adamw_torch, GradScaler init 65536, interval 2000)"},
        {"mkldnn_off_fp32_adafactor", 0, "claims fp32/adafactor, matches fp32 (adafactor)"},
        {"mkldnn_off_bf16_adafactor", 0, "claims bf16/adafactor, matches bf16 (adafactor)"},
        {"mkldnn_off_fp32_adafactor_torch", 0, "claims fp32/adafactor_torch, matches fp32 (adafactor_torch)"},
        {"mkldnn_off_fp32_adamw_bnb_8bit", 0, "claims fp32/adamw_bnb_8bit, matches fp32 (adamw_bnb_8bit)"},
        {"accelerate_fp16_cpu", 1, "claims fp16, matches fp32 (adamw_torch)"},  // (b)
        {"plain_fp32_labelled_fp16", 1, "claims fp16, matches fp32 (adamw_torch)"},  // (c)
        {"bnb_default_labelled_8bit", 1, "claims fp32/adamw_bnb_8bit, matches fp32 (adamw_torch)"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char args[512], want[256];
        snprintf(args, sizeof args, DEMO "/%s.json", CASES[i].file);
        snprintf(want, sizeof want, "\n%s\n", CASES[i].conclusion);
        expect(args, CASES[i].code, want);
    }
}

// ---- our C trainer from each golden's initial weights and batches, on every backend ----
// Replays the golden's 20 steps through train_step (what `trainbench train` runs each step)
// with the golden's optimizer, hyperparameters and GradScaler settings; returns false when
// the backend cannot run the mode.
static bool replay(const char* name, const char* backend, double* loss, int* n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%.200s.safetensors", GOLDENS, name);
    GoldenReplay g;
    if (!golden_replay_open(&g, path, backend, 2)) return false;
    assert_true(g.S <= 64);
    for (int k = 0; k < g.S; k++) {
        TrainStepResult r;
        golden_replay_step(&g, k, &r);
        loss[k] = r.loss;
    }
    *n = g.S;
    golden_replay_close(&g);
    return true;
}

static void test_c_trainer_recognised(void** s) {
    (void)s;
    load_goldens();
    static const char* const BACKENDS[] = {"naive", "openblas", "onednn"};
    double worst = 0;
    int failures = 0;
    for (int i = 0; i < g_n_gold; i++) {
        const Golden* g = &g_gold[i];
        // the sanitizer pass replays on the naive backend only (the fingerprint's paths are the same)
        const size_t n_backends = SANITIZER_PASS ? 1 : sizeof BACKENDS / sizeof BACKENDS[0];
        for (size_t bi = 0; bi < n_backends; bi++) {
            double loss[64];
            int n;
            if (!replay(g->name, BACKENDS[bi], loss, &n)) {
                printf("%s on %s: backend cannot run this mode (skipped)\n", g->name, BACKENDS[bi]);
                continue;
            }
            double d = 0;
            for (int k = 0; k < n; k++) d = fmax(d, fabs(loss[k] - g->loss[k]));
            worst = fmax(worst, d);
            printf("C trainer %-28s on %-8s: max |loss - golden| %.3e\n", g->name, BACKENDS[bi], d);
            char label[96], fname[200], args[512], want[200];
            snprintf(label, sizeof label, "%.31s/%.31s", g->mode, g->optim);
            snprintf(fname, sizeof fname, "c_%.127s_%s.json", g->name, BACKENDS[bi]);
            write_json(fname, loss, n, label);
            snprintf(args, sizeof args, "%s/%s", g_tmp, fname);
            const char* partner = inseparable_partner(g->name);
            int want_rc = 0;
            if (partner) {  // consistent with both; which one ranks first depends on the run's noise
                snprintf(want, sizeof want, "\nclaims %s, ambiguous: consistent with ", label);
                want_rc = 1;
            } else {
                snprintf(want, sizeof want, "\nclaims %s, matches %s\n", label, g->desc);
            }
            int rc = run_fp(args);
            const char* concl = strstr(g_out, "\nclaims ");
            printf("  %s", concl ? concl + 1 : "(no conclusion)\n");  // the conclusion (and any note)
            bool ok = rc == want_rc && strstr(g_out, want);
            if (partner && ok) ok = concl && strstr(concl, g->desc) && strstr(concl, golden(partner)->desc);
            if (!ok) {
                printf("output was:\n%s\nFAIL: the C trainer's %s run on %s is not recognised as %s\n", g_out, g->name,
                       BACKENDS[bi], label);
                for (int k = 0; k < n; k++)
                    printf("  step %2d: C %.9f golden %.9f |diff| %.2e\n", k + 1, loss[k], g->loss[k],
                           fabs(loss[k] - g->loss[k]));
                failures++;
            }
        }
    }
    sanitizer_pass_note("the C trainer's runs on the naive backend only");
    printf("C trainer: largest drift from a golden of the same mode and dialect: %.3e (tolerance %.0e)\n", worst, TOL);
    assert_int_equal(failures, 0);
}

// ---- unusable input: exit 2 and a message naming the problem ----
static void test_bad_input(void** s) {
    (void)s;
    char args[1024];
    expect("", 2, "missing CANDIDATE");
    expect("a.json b.json", 2, "one CANDIDATE only");
    expect("x.json --frobnicate", 2, "unknown option '--frobnicate'");
    expect("x.json --tolerance 0", 2, "--tolerance must be a finite number > 0");
    expect("x.json --tolerance nan", 2, "--tolerance must be a finite number > 0");
    snprintf(args, sizeof args, "%s/does-not-exist.json", g_tmp);
    expect(args, 2, "cannot open");

    write_text("empty.txt", "");
    snprintf(args, sizeof args, "%s/empty.txt", g_tmp);
    expect(args, 2, "too few steps: 0 losses; at least 2 needed");
    write_text("one.txt", "0.6931\n");
    snprintf(args, sizeof args, "%s/one.txt", g_tmp);
    expect(args, 2, "too few steps: 1 loss; at least 2 needed");
    write_text("nan.txt", "0.6931\n0.69\nnan\n0.68\n");
    snprintf(args, sizeof args, "%s/nan.txt", g_tmp);
    expect(args, 2, "the loss of step 3 is nan (every loss must be finite)");
    write_text("inf.csv", "step,loss\n1,0.69\n2,inf\n");
    snprintf(args, sizeof args, "%s/inf.csv", g_tmp);
    expect(args, 2, "the loss of step 2 is inf");
    write_text("word.txt", "0.6931\n0.69\nabc\n");
    snprintf(args, sizeof args, "%s/word.txt", g_tmp);
    expect(args, 2, "line 3 is not a loss");
    write_text("steps.csv", "1,0.69\n3,0.68\n");
    snprintf(args, sizeof args, "%s/steps.csv", g_tmp);
    expect(args, 2, "line 2: step 3, expected 2");
    write_text("three.csv", "1,0.69,x\n2,0.68,y\n");
    snprintf(args, sizeof args, "%s/three.csv", g_tmp);
    expect(args, 2, "line 2 is not a loss");

    write_text("bad.json", "{\"losses\": [0.69, 0.68,");
    snprintf(args, sizeof args, "%s/bad.json", g_tmp);
    expect(args, 2, "malformed JSON");
    write_text("null.json", "{\"losses\": [0.69, null, 0.68]}");
    snprintf(args, sizeof args, "%s/null.json", g_tmp);
    expect(args, 2, "losses[1] is null");
    write_text("str.json", "{\"losses\": [0.69, \"0.68\"]}");
    snprintf(args, sizeof args, "%s/str.json", g_tmp);
    expect(args, 2, "losses[1] is not a number");
    write_text("nolosses.json", "{\"loss\": [0.69, 0.68]}");
    snprintf(args, sizeof args, "%s/nolosses.json", g_tmp);
    expect(args, 2, "expected {\"losses\": [numbers]");
    write_text("badlabel.json", "{\"losses\": [0.69, 0.68], \"label\": \"fp8\"}");
    snprintf(args, sizeof args, "%s/badlabel.json", g_tmp);
    expect(args, 2, "unknown precision mode 'fp8' (allowed: fp32, bf16, fp16, fp16-noscale");
    write_text("numlabel.json", "{\"losses\": [0.69, 0.68], \"label\": 16}");
    snprintf(args, sizeof args, "%s/numlabel.json", g_tmp);
    expect(args, 2, "\"label\" must be a string");
    snprintf(args, sizeof args, "%s/one.txt --label fp32/sgd", g_tmp);
    expect(args, 2, "unknown optimizer 'sgd'");

    // safetensors without a loss tensor, and with a 2-D one
    StWriter* w = st_writer_new();
    float v[4] = {0.69f, 0.68f, 0.67f, 0.66f};
    int64_t shape[2] = {2, 2};
    st_writer_add(w, "weights", DTYPE_F32, 1, shape, v);
    char p[512];
    path_of(p, sizeof p, "noloss.safetensors");
    assert_true(status_is_ok(st_writer_save(w, p)));
    st_writer_free(w);
    expect(p, 2, "no tensor \"loss\" or \"expect.loss\"");
    w = st_writer_new();
    st_writer_add(w, "loss", DTYPE_F32, 2, shape, v);
    path_of(p, sizeof p, "loss2d.safetensors");
    assert_true(status_is_ok(st_writer_save(w, p)));
    st_writer_free(w);
    expect(p, 2, "tensor loss must be 1-D F32 or F64 (got f32 with 2 dims)");
    // a binary file that is not safetensors
    path_of(p, sizeof p, "garbage.bin");
    FILE* f = fopen(p, "wb");
    assert_non_null(f);
    fwrite("\x10\x00\x00\x00\x00\x00\x00\x00xx\x00yy", 1, 13, f);
    fclose(f);
    expect(p, 2, "not JSON or text, and not a valid safetensors file");
}

// ---- unusable references ----
static void test_bad_references(void** s) {
    (void)s;
    char dir[512], args[1024], p[600];
    snprintf(dir, sizeof dir, "%s/refs", g_tmp);
    mkdir(dir, 0755);
    snprintf(args, sizeof args, "%s/one.txt --goldens %s/missing", g_tmp, g_tmp);
    expect(args, 2, "cannot open the folder");
    snprintf(args, sizeof args, "%s/one.txt --goldens %s", g_tmp, dir);
    expect(args, 2, "0 train_*.safetensors trajectories found, at least 2 needed");
    // two references with different initial weights: nothing can be compared
    for (int i = 0; i < 2; i++) {
        StWriter* w = st_writer_new();
        float loss[3] = {0.69f, 0.6f + 0.05f * (float)i, 0.5f};
        float param[2] = {1.0f, (float)i};
        int64_t n3[1] = {3}, n2[1] = {2};
        st_writer_add(w, "expect.loss", DTYPE_F32, 1, n3, loss);
        st_writer_add(w, "param.w", DTYPE_F32, 1, n2, param);
        st_writer_meta(w, "mode", "fp32");
        st_writer_meta(w, "optimizer", "adamw_torch");
        snprintf(p, sizeof p, "%s/train_%c.safetensors", dir, 'a' + i);
        assert_true(status_is_ok(st_writer_save(w, p)));
        st_writer_free(w);
    }
    write_text("three.txt", "0.69\n0.6\n0.5\n");
    snprintf(args, sizeof args, "%s/three.txt --goldens %s", g_tmp, dir);
    expect(args, 2, "train_b.safetensors: tensor param.w differs from");
    // a file that is not a trajectory golden
    snprintf(p, sizeof p, "%s/train_b.safetensors", dir);
    StWriter* w = st_writer_new();
    float x[1] = {1};
    int64_t n1[1] = {1};
    st_writer_add(w, "something", DTYPE_F32, 1, n1, x);
    assert_true(status_is_ok(st_writer_save(w, p)));
    st_writer_free(w);
    expect(args, 2, "not a trajectory golden");
}

// The default references are found from any working directory (beside the executable).
static void test_from_another_directory(void** s) {
    (void)s;
    char cand[4096], args[4200], out[16384];
    assert_non_null(realpath("reference/golden/fingerprint/threads2_bf16.json", cand));
    snprintf(args, sizeof args, "fingerprint %s", cand);
    int rc = cli_run_in(g_tmp, args, true, out, sizeof out);
    printf("%s", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "claims bf16, matches bf16 (adamw_torch)"));
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "fingerprint") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_golden_matches_only_itself),
        cmocka_unit_test(test_perturbed),
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_short_is_ambiguous),
        cmocka_unit_test(test_pytorch_demo),
        cmocka_unit_test(test_c_trainer_recognised),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_bad_references),
        cmocka_unit_test(test_from_another_directory),
    };
    int rc = cmocka_run_group_tests_name("fingerprint", tests, NULL, NULL);
    cli_harness_cleanup("fingerprint");
    return rc;
}

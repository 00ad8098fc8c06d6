// test_check.c — end-to-end tests of `trainbench check GOLDEN CANDIDATE` on files written with
// the safetensors writer into a temp folder: identical files pass; one element far off fails
// naming the tensor and its multi-dim worst index; a 1-ulp difference passes under the dtype
// default and shows the share of tolerance used; NaN fails; u8 codes report the identical share
// and honour --min-code-equal/--max-code-dist; a missing tensor, another shape or dtype exit 2
// naming the tensor; bad flags exit 2. With a real optimizer golden (adamw_torch, bnb 8-bit):
// the golden's own expect tensors pass, one ulp off in a bit-exact state tensor fails, a param
// error that only the movement term covers passes (and fails without it), one code off passes
// bnb's rule and two apart fail, and --tensors / --only-present select what is compared.
// Runs the binary next to this test's build folder (BUILD/trainbench), like test_gate.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_harness.h"
#include "core/safetensors.h"

#define ADAMW_GOLDEN "reference/golden/optim/adamw_torch/vec_257.safetensors"
#define BNB_GOLDEN "reference/golden/optim/adamw_bnb_8bit/vec_4096.safetensors"

static char g_out[1 << 17];

static int run_check(const char* args) {
    char full[8192];
    snprintf(full, sizeof full, "check %s", args);
    return cli_run(full, true, g_out, sizeof g_out);
}

static void expect(const char* args, int code, const char* needle) {
    int rc = run_check(args);
    if (rc != code || (needle && !strstr(g_out, needle))) printf("output was:\n%s\n", g_out);
    assert_int_equal(rc, code);
    if (needle) assert_non_null(strstr(g_out, needle));
}

static const char* tmp_path(char* buf, size_t n, const char* leaf) {
    snprintf(buf, n, "%s/%s", g_tmp, leaf);
    return buf;
}

// ---- constructed plain files: "a" f32 (2,3), "b" bf16 (4), "codes" u8 (10), "n" i64 () ----
typedef struct {
    float a[6];
    uint16_t b[4];
    uint8_t codes[10];
    int64_t n;
    bool drop_b;        // leave "b" out
    bool a_as_3x2;      // write "a" with shape (3,2)
    bool b_as_f16;      // write "b" as F16
    bool extra;         // add a tensor the golden lacks
} Plain;

static void plain_init(Plain* p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 6; i++) p->a[i] = 1.5f + (float)i;
    const uint16_t b[4] = {0x3F80, 0x4000, 0xBF80, 0x0000};  // bf16 1, 2, -1, 0
    memcpy(p->b, b, sizeof b);
    for (int i = 0; i < 10; i++) p->codes[i] = (uint8_t)(100 + i);
    p->n = 20;
}

static void plain_write(const Plain* p, const char* path) {
    StWriter* w = st_writer_new();
    const int64_t sa[2] = {2, 3}, sa2[2] = {3, 2}, sb[1] = {4}, sc[1] = {10};
    st_writer_add(w, "a", DTYPE_F32, 2, p->a_as_3x2 ? sa2 : sa, p->a);
    if (!p->drop_b) st_writer_add(w, "b", p->b_as_f16 ? DTYPE_F16 : DTYPE_BF16, 1, sb, p->b);
    st_writer_add(w, "codes", DTYPE_U8, 1, sc, p->codes);
    st_writer_add(w, "n", DTYPE_I64, 0, NULL, &p->n);
    if (p->extra) st_writer_add(w, "extra", DTYPE_U8, 1, sc, p->codes);
    Status s = st_writer_save(w, path);
    assert_true(status_is_ok(s));
    st_writer_free(w);
}

static char g_gold[512];  // the plain golden

static void cand_args(char* args, size_t n, const Plain* c, const char* leaf, const char* extra) {
    char path[512];
    plain_write(c, tmp_path(path, sizeof path, leaf));
    snprintf(args, n, "%s %s %s", g_gold, path, extra ? extra : "");
}

static void test_identical_plain_files_pass(void** s) {
    (void)s;
    Plain c;
    plain_init(&c);
    char args[2048];
    cand_args(args, sizeof args, &c, "same.safetensors", NULL);
    expect(args, 0, "PASS: 4 of 4 tensors within tolerance (all bit-identical)");
    assert_non_null(strstr(g_out, "f32 default: rtol 2 eps"));  // the rule used is printed
}

static void test_far_off_element_fails_naming_index(void** s) {
    (void)s;
    Plain c;
    plain_init(&c);
    c.a[5] = 100.0f;  // row 1, column 2
    char args[2048];
    cand_args(args, sizeof args, &c, "far.safetensors", NULL);
    expect(args, 1, "FAIL: 1 of 4 tensors outside tolerance: a ");
    assert_non_null(strstr(g_out, "[1,2]"));
    assert_non_null(strstr(g_out, "93.5"));  // max abs error 100 - 6.5
    // a loose enough override passes it (the override applies to every float tensor)
    cand_args(args, sizeof args, &c, "far.safetensors", "--atol 100");
    expect(args, 0, "PASS");
    assert_non_null(strstr(g_out, "--atol/--rtol from the command line"));
}

static void test_one_ulp_within_default_tolerance(void** s) {
    (void)s;
    Plain c;
    plain_init(&c);
    c.a[0] = nextafterf(1.5f, 2.0f);  // 1 ulp = 2^-23; tolerance 2^-126 + 2*2^-23*1.5 -> 33.3%
    c.b[0] = 0x3F81;                  // bf16 1 + 2^-7: 1 ulp; tolerance 2*2^-7 -> 50%
    char args[2048];
    cand_args(args, sizeof args, &c, "ulp.safetensors", NULL);
    expect(args, 0, "PASS: 4 of 4 tensors within tolerance (2 bit-identical; worst b: 50% of its tolerance)");
    assert_non_null(strstr(g_out, "33.3%"));
    // --exact: the same file fails
    cand_args(args, sizeof args, &c, "ulp.safetensors", "--exact");
    expect(args, 1, "FAIL: 2 of 4 tensors outside tolerance: a b ");
}

static void test_nan_fails(void** s) {
    (void)s;
    Plain c;
    plain_init(&c);
    c.a[3] = NAN;
    char args[2048];
    cand_args(args, sizeof args, &c, "nan.safetensors", "--atol 1e30");  // no tolerance admits NaN
    expect(args, 1, "FAIL: 1 of 4 tensors outside tolerance: a ");
    assert_non_null(strstr(g_out, "nan"));
    assert_non_null(strstr(g_out, "[1,0]"));
}

static void test_u8_codes(void** s) {
    (void)s;
    Plain c;
    plain_init(&c);
    c.codes[7] = (uint8_t)(c.codes[7] + 1);  // 90% identical, max distance 1
    char args[2048];
    cand_args(args, sizeof args, &c, "codes.safetensors", NULL);
    expect(args, 1, "90.000%eq");
    assert_non_null(strstr(g_out, "outside tolerance: codes "));
    assert_non_null(strstr(g_out, "[7]"));
    cand_args(args, sizeof args, &c, "codes.safetensors", "--min-code-equal 0.9 --max-code-dist 1");
    expect(args, 0, "PASS");
    cand_args(args, sizeof args, &c, "codes.safetensors", "--min-code-equal 0.95 --max-code-dist 1");
    expect(args, 1, "FAIL");
    // integers are exact
    plain_init(&c);
    c.n = 21;
    cand_args(args, sizeof args, &c, "int.safetensors", "--atol 5");
    expect(args, 1, "outside tolerance: n ");
}

static void test_unusable_candidates_exit_2_naming_tensor(void** s) {
    (void)s;
    Plain c;
    char args[2048];
    plain_init(&c);
    c.drop_b = true;
    cand_args(args, sizeof args, &c, "missing.safetensors", NULL);
    expect(args, 2, "golden tensor 'b' (bf16 (4)) is missing from the candidate");
    assert_null(strstr(g_out, "PASS"));
    plain_init(&c);
    c.a_as_3x2 = true;
    cand_args(args, sizeof args, &c, "shape.safetensors", NULL);
    expect(args, 2, "tensor 'a': shape differs: golden (2,3), candidate (3,2)");
    plain_init(&c);
    c.b_as_f16 = true;
    cand_args(args, sizeof args, &c, "dtype.safetensors", NULL);
    expect(args, 2, "tensor 'b': dtype differs: golden bf16, candidate f16");
    // an extra candidate tensor is a warning, not a failure
    plain_init(&c);
    c.extra = true;
    cand_args(args, sizeof args, &c, "extra.safetensors", NULL);
    expect(args, 0, "candidate tensor 'extra' is not in the golden: not compared");
}

static void test_bad_input_exits_2(void** s) {
    (void)s;
    char args[2048], path[512];
    snprintf(args, sizeof args, "%s %s/nope.safetensors", g_gold, g_tmp);
    expect(args, 2, "nope.safetensors");
    tmp_path(path, sizeof path, "junk.safetensors");
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a safetensors file at all", f);
    fclose(f);
    snprintf(args, sizeof args, "%s %s", g_gold, path);
    expect(args, 2, "junk.safetensors");
    expect(g_gold, 2, "expected two files: GOLDEN CANDIDATE");
    snprintf(args, sizeof args, "%s %s %s", g_gold, g_gold, g_gold);
    expect(args, 2, "got a third");
    snprintf(args, sizeof args, "%s %s --rtol -1", g_gold, g_gold);
    expect(args, 2, "--rtol must be a number in [0, inf]");
    snprintf(args, sizeof args, "%s %s --min-code-equal 1.5", g_gold, g_gold);
    expect(args, 2, "--min-code-equal must be a number in [0, 1]");
    snprintf(args, sizeof args, "%s %s --max-code-dist 300", g_gold, g_gold);
    expect(args, 2, "--max-code-dist must be an integer in [0, 255]");
    snprintf(args, sizeof args, "%s %s --exact --atol 1", g_gold, g_gold);
    expect(args, 2, "--exact cannot be combined");
    snprintf(args, sizeof args, "%s %s --tensors '('", g_gold, g_gold);
    expect(args, 2, "invalid regular expression");
    snprintf(args, sizeof args, "%s %s --tensors '^zzz$'", g_gold, g_gold);
    expect(args, 2, "nothing to compare");
    snprintf(args, sizeof args, "%s %s --bogus", g_gold, g_gold);
    expect(args, 2, "unknown option '--bogus'");
}

// ---- real optimizer goldens ----

typedef void (*Mutate)(const char* name, DType dt, void* data, size_t numel, void* ctx);

// Writes the golden's expect.* tensors (names matching `only`, when given) to leaf, after
// mutate() changed them; returns the path.
static const char* write_from_golden(const char* golden, const char* leaf, const char* only, Mutate mutate,
                                     void* ctx, char* path, size_t n) {
    SafeTensors st;
    Status s = st_read(golden, &st);
    if (!status_is_ok(s)) printf("%s\n", s.msg);
    assert_true(status_is_ok(s));
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < st.n_tensors; i++) {
        StTensor* t = &st.tensors[i];
        if (strncmp(t->name, "expect.", 7) || (only && !strstr(t->name, only))) continue;
        if (mutate) mutate(t->name, t->dtype, t->data, t->numel, ctx);
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    tmp_path(path, n, leaf);
    s = st_writer_save(w, path);
    assert_true(status_is_ok(s));
    st_writer_free(w);
    st_free(&st);
    return path;
}

static void ulp_off_exp_avg_step5(const char* name, DType dt, void* data, size_t numel, void* ctx) {
    (void)ctx;
    if (strcmp(name, "expect.step5.state.exp_avg") != 0) return;
    assert_int_equal(dt, DTYPE_F32);
    float* x = data;
    x[3] = nextafterf(x[3], INFINITY);
}

static void rel_off_exp_avg_step5(const char* name, DType dt, void* data, size_t numel, void* ctx) {
    if (strcmp(name, "expect.step5.state.exp_avg") != 0) return;
    float* x = data;
    x[3] = x[3] * (1 + *(float*)ctx);
}

// The step-20 param element with the smallest |p| moves by 10x its rtol-only tolerance
// (2 ulp of p, 1000%): only the movement term (4 ulp of the cumulative |delta p|) covers it.
static void cancel_param_step20(const char* name, DType dt, void* data, size_t numel, void* ctx) {
    if (strcmp(name, "expect.step20.param") != 0) return;
    float* x = data;
    size_t k = 0;
    for (size_t i = 1; i < numel; i++)
        if (fabsf(x[i]) < fabsf(x[k])) k = i;
    *(size_t*)ctx = k;
    x[k] = (float)((double)x[k] + 20 * 0x1p-23 * fabs((double)x[k]));
}

static void code_off(const char* name, DType dt, void* data, size_t numel, void* ctx) {
    if (strcmp(name, "expect.step20.state.state1") != 0) return;
    uint8_t* c = data;
    int by = *(int*)ctx;
    c[100] = (uint8_t)(c[100] < 128 ? c[100] + by : c[100] - by);
}

static void test_golden_itself_passes(void** s) {
    (void)s;
    char path[512], args[2048];
    write_from_golden(ADAMW_GOLDEN, "adamw_same.safetensors", NULL, NULL, NULL, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", ADAMW_GOLDEN, path);
    expect(args, 0, "PASS: 20 of 20 tensors within tolerance (all bit-identical)");
    assert_non_null(strstr(g_out, "`trainbench conform`'s for adamw_torch"));
    assert_non_null(strstr(g_out, "MKL sqrt"));  // conform's reasons are printed as the rules
}

// exp_avg 1 ulp off: outside its tolerance (bit-exact) but inside AdamW's rounding-order band,
// so CONFORMS (exit 0, the tensor named as differing by rounding only); --exact still fails it;
// 1e-4 relative off is beyond the band: FAIL.
static void test_one_ulp_in_bit_exact_state_fails(void** s) {
    (void)s;
    char path[512], args[2048];
    write_from_golden(ADAMW_GOLDEN, "adamw_ulp.safetensors", NULL, ulp_off_exp_avg_step5, NULL, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", ADAMW_GOLDEN, path);
    expect(args, 0, "CONFORMS: 20 of 20 tensors within tolerance or the rounding-order band (19 bit-identical, 1 differ");
    assert_non_null(strstr(g_out, "expect.step5.state.exp_avg "));
    assert_non_null(strstr(g_out, " CONFORMS ["));
    snprintf(args, sizeof args, "%s %s --exact", ADAMW_GOLDEN, path);
    expect(args, 1, "FAIL: 1 of 20 tensors outside tolerance: expect.step5.state.exp_avg ");
    float rel = 1e-4f;
    write_from_golden(ADAMW_GOLDEN, "adamw_rel.safetensors", NULL, rel_off_exp_avg_step5, &rel, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", ADAMW_GOLDEN, path);
    expect(args, 1, "FAIL: 1 of 20 tensors outside tolerance: expect.step5.state.exp_avg ");
    assert_non_null(strstr(g_out, "bands: 19 bit-identical, 0 within tolerance, 0 differ by rounding only (CONFORMS), 1 FAIL"));
}

// Both Adafactor dialects have a rounding-order band too (src/validate/band_adafactor.c): a
// factored second moment and a parameter each 1 ulp off at step 5 are outside the bit-exact
// tolerance but inside the band (CONFORMS, exit 0, each named as differing by rounding only);
// 1e-3 relative off is beyond it (FAIL, and the bands line says which tensor).
typedef struct {
    const char* name;
    size_t index;
    float rel;  // 0: one ulp up
} Nudge;
static void nudge(const char* name, DType dt, void* data, size_t numel, void* ctx) {
    for (const Nudge* n = ctx; n->name; n++) {
        if (strcmp(name, n->name) != 0) continue;
        assert_int_equal(dt, DTYPE_F32);
        assert_true(n->index < numel);
        float* x = data;
        x[n->index] = n->rel ? x[n->index] * (1 + n->rel) : nextafterf(x[n->index], INFINITY);
    }
}
static void test_adafactor_bands_in_check(void** s) {
    (void)s;
    char path[512], args[2048];
    static const char* const HF = "reference/golden/optim/adafactor/matrix_64x96_wd.safetensors";
    Nudge ulp[] = {{"expect.step5.state.exp_avg_sq_row", 3, 0}, {"expect.step5.param", 7, 0}, {NULL, 0, 0}};
    write_from_golden(HF, "afhf_ulp.safetensors", NULL, nudge, ulp, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", HF, path);
    expect(args, 0, "CONFORMS: 25 of 25 tensors within tolerance or the rounding-order band (23 bit-identical, 2 differ");
    assert_non_null(strstr(g_out, "expect.step5.state.exp_avg_sq_row "));
    Nudge far[] = {{"expect.step5.state.exp_avg_sq_row", 3, 1e-3f}, {"expect.step5.param", 7, 0}, {NULL, 0, 0}};
    write_from_golden(HF, "afhf_far.safetensors", NULL, nudge, far, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", HF, path);
    expect(args, 1, "FAIL: 1 of 25 tensors outside tolerance: expect.step5.state.exp_avg_sq_row ");
    assert_non_null(strstr(g_out, "bands: 23 bit-identical, 0 within tolerance, 1 differ by rounding only (CONFORMS), 1 FAIL"));
    static const char* const TORCH = "reference/golden/optim/adafactor_torch/vec_257.safetensors";
    Nudge tv[] = {{"expect.step10.state.variance", 100, 0}, {NULL, 0, 0}};
    write_from_golden(TORCH, "aft_ulp.safetensors", NULL, nudge, tv, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", TORCH, path);
    expect(args, 0, "CONFORMS: ");
    assert_non_null(strstr(g_out, "expect.step10.state.variance "));
}

// The 8-bit codes have a band too (src/validate/band_adamw_bnb_8bit.c): at step 5 of vec_4096,
// element 65 of state2 (code 12) sits where a correct ordering of v's update can land up to two
// codes lower (the unsigned map's small codes are finer than the quantizer's grid). Two codes
// lower breaks the codes rule (at most 1 apart) but is inside the band: CONFORMS; two codes
// higher is not reachable: FAIL.
typedef struct {
    const char* name;
    size_t index;
    int delta;
} CodeNudge;
static void code_nudge(const char* name, DType dt, void* data, size_t numel, void* ctx) {
    const CodeNudge* n = ctx;
    if (strcmp(name, n->name) != 0) return;
    assert_int_equal(dt, DTYPE_U8);
    assert_true(n->index < numel);
    uint8_t* c = data;
    assert_int_equal(c[n->index], 12);
    c[n->index] = (uint8_t)(c[n->index] + n->delta);
}
static void test_bnb_code_band(void** s) {
    (void)s;
    char path[512], args[2048];
    CodeNudge down = {"expect.step5.state.state2", 65, -2}, up = {"expect.step5.state.state2", 65, 2};
    write_from_golden(BNB_GOLDEN, "bnb_down.safetensors", NULL, code_nudge, &down, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", BNB_GOLDEN, path);
    expect(args, 0, "CONFORMS: 40 of 40 tensors within tolerance or the rounding-order band (39 bit-identical, 1 differ");
    write_from_golden(BNB_GOLDEN, "bnb_up.safetensors", NULL, code_nudge, &up, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", BNB_GOLDEN, path);
    expect(args, 1, "FAIL: 1 of 40 tensors outside tolerance: expect.step5.state.state2 ");
}

// An optimizer golden missing a state tensor at a checked step is unusable (exit 2, named):
// otherwise a candidate would "pass" a comparison that never happened.
static void test_golden_missing_state_exits_2(void** s) {
    (void)s;
    char path[512], args[2048];
    SafeTensors st;
    assert_true(status_is_ok(st_read(ADAMW_GOLDEN, &st)));
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < st.n_tensors; i++)
        if (strcmp(st.tensors[i].name, "expect.step5.state.exp_avg_sq"))
            st_writer_add(w, st.tensors[i].name, st.tensors[i].dtype, st.tensors[i].ndim, st.tensors[i].shape,
                          st.tensors[i].data);
    for (size_t i = 0; i < st.n_meta; i++) st_writer_meta(w, st.meta_keys[i], st.meta_values[i]);
    tmp_path(path, sizeof path, "adamw_no_v5.safetensors");
    assert_true(status_is_ok(st_writer_save(w, path)));
    st_writer_free(w);
    st_free(&st);
    snprintf(args, sizeof args, "%s %s", path, ADAMW_GOLDEN);
    expect(args, 2, "unusable golden: it lacks expect.step5.state.exp_avg_sq");
}

static void test_movement_term_from_replay(void** s) {
    (void)s;
    char path[512], args[2048];
    size_t k = 0;
    write_from_golden(ADAMW_GOLDEN, "adamw_cancel.safetensors", NULL, cancel_param_step20, &k, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", ADAMW_GOLDEN, path);
    expect(args, 0, "PASS");
    char idx[32];
    snprintf(idx, sizeof idx, "[%zu]", k);
    assert_non_null(strstr(g_out, idx));
    // the same rtol without the movement term: outside
    snprintf(args, sizeof args, "%s %s --atol 0 --rtol 2.384185791015625e-07", ADAMW_GOLDEN, path);
    expect(args, 1, "outside tolerance: expect.step20.param ");
}

static void test_bnb_codes_rule(void** s) {
    (void)s;
    char path[512], args[2048];
    int by = 1;  // one code of 4096 one apart: 99.98% identical, within bnb's rule
    write_from_golden(BNB_GOLDEN, "bnb1.safetensors", NULL, code_off, &by, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", BNB_GOLDEN, path);
    expect(args, 0, "99.976%eq");
    assert_non_null(strstr(g_out, "codes: >= 99.9% identical, max distance 1"));
    by = 2;
    write_from_golden(BNB_GOLDEN, "bnb2.safetensors", NULL, code_off, &by, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", BNB_GOLDEN, path);
    expect(args, 1, "outside tolerance: expect.step20.state.state1 ");
}

static void test_tensor_selection(void** s) {
    (void)s;
    char path[512], args[2048];
    write_from_golden(ADAMW_GOLDEN, "adamw_params.safetensors", ".param", NULL, NULL, path, sizeof path);
    snprintf(args, sizeof args, "%s %s", ADAMW_GOLDEN, path);
    expect(args, 2, "golden tensor 'expect.step1.state.exp_avg' (f32 (257)) is missing from the candidate");
    snprintf(args, sizeof args, "%s %s --only-present", ADAMW_GOLDEN, path);
    expect(args, 0, "PASS: 5 of 5 tensors within tolerance");
    assert_non_null(strstr(g_out, "skipped:   15 golden tensor(s) not in the candidate"));
    snprintf(args, sizeof args, "%s %s --tensors '^expect\\.step[0-9]+\\.param$'", ADAMW_GOLDEN, path);
    expect(args, 0, "PASS: 5 of 5 tensors within tolerance");
    assert_null(strstr(g_out, "skipped"));
    snprintf(args, sizeof args, "%s %s --tensors 'step(1|2)\\.'", ADAMW_GOLDEN, path);
    expect(args, 2, "missing from the candidate");  // the states of steps 1, 2 are selected and absent
    snprintf(args, sizeof args, "%s %s --tensors 'step(1|2)\\.' --only-present", ADAMW_GOLDEN, path);
    expect(args, 0, "PASS: 2 of 2 tensors");
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "check") != 0) return 1;
    Plain g;
    plain_init(&g);
    plain_write(&g, tmp_path(g_gold, sizeof g_gold, "golden.safetensors"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_plain_files_pass),
        cmocka_unit_test(test_far_off_element_fails_naming_index),
        cmocka_unit_test(test_one_ulp_within_default_tolerance),
        cmocka_unit_test(test_nan_fails),
        cmocka_unit_test(test_u8_codes),
        cmocka_unit_test(test_unusable_candidates_exit_2_naming_tensor),
        cmocka_unit_test(test_bad_input_exits_2),
        cmocka_unit_test(test_golden_itself_passes),
        cmocka_unit_test(test_one_ulp_in_bit_exact_state_fails),
        cmocka_unit_test(test_adafactor_bands_in_check),
        cmocka_unit_test(test_bnb_code_band),
        cmocka_unit_test(test_movement_term_from_replay),
        cmocka_unit_test(test_golden_missing_state_exits_2),
        cmocka_unit_test(test_bnb_codes_rule),
        cmocka_unit_test(test_tensor_selection),
    };
    int rc = cmocka_run_group_tests_name("check", tests, NULL, NULL);
    cli_harness_cleanup("check");
    return rc;
}

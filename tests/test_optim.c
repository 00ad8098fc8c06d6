// test_optim.c — optimizer conformance against goldens produced by the real libraries
// (reference/gen_optim_goldens.py: torch, transformers, bitsandbytes), plus hyperparameter
// validation and estimate == measured state size. Iterates the optimizer registry: a
// registered optimizer without goldens FAILS. Tolerances and their justification live in
// src/validate/conform.c (conform_tolerance) and are printed with every comparison.
// Every known mistake of src/optim/optim_mistakes.c (eps inside the sqrt, decay after the update, the
// other Adafactor dialect, ...) runs through the same conformance check and must FAIL it: proof
// that the check can fail, and that each diagnosis of `trainbench conform` is distinguishable.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "validate/conform.h"
#include "optim/optim.h"
#include "optim/torch_reduce.h"
#include "optim/torch_sqrt.h"
#include "sanitizer_pass.h"

static void run_all_cases(const Optimizer* o, FILE* log, size_t* n_cases, size_t* n_failed_cases, ConformSummary* total) {
    char** paths;
    size_t n;
    assert_true(status_is_ok(conform_list_cases(o->name, &paths, &n)));
    *n_cases = n;
    *n_failed_cases = 0;
    memset(total, 0, sizeof *total);
    total->min_code_equal = 1.0;
    for (size_t i = 0; i < n; i++) {
        ConformSummary s;
        Status st = conform_run_case(o, paths[i], log, &s);
        if (!status_is_ok(st)) {
            printf("optim/%s: FAIL %s\n", o->name, st.msg);
            (*n_failed_cases)++;
            continue;
        }
        if (s.n_failed) (*n_failed_cases)++;
        total->n_compared += s.n_compared;
        total->n_failed += s.n_failed;
        if (s.worst_used > total->worst_used) total->worst_used = s.worst_used;
        if (s.worst_ulp_param > total->worst_ulp_param) total->worst_ulp_param = s.worst_ulp_param;
        if (s.worst_ulp_state > total->worst_ulp_state) total->worst_ulp_state = s.worst_ulp_state;
        if (s.min_code_equal < total->min_code_equal) total->min_code_equal = s.min_code_equal;
        if (s.max_code_dist > total->max_code_dist) total->max_code_dist = s.max_code_dist;
    }
    conform_free_list(paths, n);
}

static void test_every_optimizer_matches_its_goldens(void** state) {
    (void)state;
    printf("torch sqrt: %s\n", !torch_sqrt_vector()     ? "portable scalar path"
                               : torch_sqrt_hw_matches() ? "vector path, rsqrtps seed (verified identical to the table)"
                                                         : "vector path, seed gathered from the table");
    size_t failed_optims = 0;
    for (size_t i = 0; i < optim_count(); i++) {
        const Optimizer* o = optim_at(i);
        size_t n_cases, n_failed;
        ConformSummary t;
        run_all_cases(o, stdout, &n_cases, &n_failed, &t);
        if (n_cases == 0) {
            printf("optim/%s: FAIL no goldens in %s/%s (run `make goldens`)\n", o->name, GOLDEN_OPTIM_DIR, o->name);
            failed_optims++;
            continue;
        }
        printf("optim/%s: %zu cases, %zu comparisons, %zu failed; max param ulp %u; max state ulp %u; max tolerance"
               " used %.1f%%; codes identical >= %.4f%%, max code distance %d\n",
               o->name, n_cases, t.n_compared, t.n_failed, t.worst_ulp_param, t.worst_ulp_state, 100 * t.worst_used,
               100 * t.min_code_equal, t.max_code_dist);
        if (n_failed) failed_optims++;
        // Our ports are bit-exact on every float state tensor and on the parameters, stricter than
        // the conformance verdict (which admits the 1 ulp of torch's fused AdamW in exp_avg_sq, and
        // calls a result inside the rounding-order band "conforms": there the foreach/for-loop
        // difference of adafactor_torch's last update, two roundings against one fma, passes).
        if (t.worst_ulp_state != 0) {
            printf("optim/%s: FAIL state tensors not bit-exact (max %u ulp)\n", o->name, t.worst_ulp_state);
            failed_optims++;
        }
        if (t.worst_ulp_param != 0) {
            printf("optim/%s: FAIL parameters not bit-exact (max %u ulp)\n", o->name, t.worst_ulp_param);
            failed_optims++;
        }
    }
    assert_int_equal(failed_optims, 0);
}

// ---- every known mistake (src/optim/optim_mistakes.c) must FAIL its optimizer's goldens: proof that
// the check can fail, and that `trainbench conform` can tell each mistake from a correct step ----
static void test_every_known_mistake_fails(void** s) {
    (void)s;
    size_t not_caught = 0;
    for (size_t i = 0; i < optim_mistake_count(); i++) {
        const OptimMistake* m = optim_mistake_at(i);
        char** paths;
        size_t n, n_run = 0, n_failed = 0, n_cmp = 0, n_cmp_failed = 0;
        assert_true(status_is_ok(conform_list_cases(m->optim, &paths, &n)));
        for (size_t k = 0; k < n; k++) {
            ConformSummary sum;
            // per-line output would read like real failures: silent
            if (!status_is_ok(conform_run_mistake(m, paths[k], NULL, &sum))) continue;  // does not apply
            n_run++;
            n_failed += sum.n_failed > 0;
            n_cmp += sum.n_compared;
            n_cmp_failed += sum.n_failed;
            if (SANITIZER_PASS && n_failed) break;  // caught: the remaining cases replay the same paths
        }
        conform_free_list(paths, n);
        printf("mistake %s/%s: %zu of %zu applicable cases failed (%zu of %zu comparisons)%s\n", m->optim, m->id,
               n_failed, n_run, n_cmp_failed, n_cmp, n_failed ? "" : "  <- NOT CAUGHT");
        if (n_failed == 0) not_caught++;
    }
    sanitizer_pass_note("each mistake's cases stop at the first that fails it");
    assert_int_equal(not_caught, 0);
}

// The portable kernels (table-based torch sqrt) must conform too: on a CPU whose rsqrtps
// matches, the run above used the vector path, so force the portable one here.
static void test_portable_paths_match_goldens(void** s) {
    (void)s;
    torch_sqrt_force_portable(true);
    test_every_optimizer_matches_its_goldens(NULL);
    torch_sqrt_force_portable(false);
}

// The vector kernels with torch's sqrt seeded from the table (gathered) instead of rsqrtps:
// the path of CPUs whose rsqrtps rounds otherwise (an Intel Xeon with AMX), forced here so that
// a CPU whose rsqrtps matches checks it too. On a CPU whose rsqrtps does not match, forcing
// changes nothing: test_every_optimizer_matches_its_goldens ran this very path, so it is skipped.
static void test_table_seed_paths_match_goldens(void** s) {
    (void)s;
    if (!torch_sqrt_hw_matches()) {
        printf("this CPU's rsqrtps is not the table's: the goldens above ran the table-seeded path already\n");
        skip();
    }
    torch_sqrt_force_table(true);
    test_every_optimizer_matches_its_goldens(NULL);
    torch_sqrt_force_table(false);
}

// adamw_bnb_8bit's vector kernels (AVX2; AVX-512: register-resident threshold search instead of
// the LUT; AVX-512 VBMI: byte-table lookups instead of the search; hardware rsqrt seed) against
// its portable scalar kernel on data the goldens do not reach: 70 blocks (a ragged last one),
// each with its own scale from 1e-30 to 1e30, a block of zeros, blocks with NaN, +-inf and
// subnormal gradients, sparse blocks, a block near FLT_MAX (m's absmax passes 2^126 at step 3,
// so 1/absmax is subnormal: the quantizer's clamp path), 4 steps. Each vector kernel this CPU
// has runs in turn; parameters, codes and absmax must be identical bit for bit. (On a CPU
// without the vector paths both runs take the scalar kernel and this only checks determinism.)
static void bnb8_run_steps(int kernel, float* p, const float* g, size_t n, OptimState** out) {
    const TensorShape shape = shape_1d((int64_t)n);
    OptimConfig cfg;
    optim_defaults(&optim_adamw_bnb_8bit, &cfg);
    OptimState* st = optim_adamw_bnb_8bit.init(&shape, &cfg);
    torch_sqrt_force_portable(kernel < 0);
    optim_adamw_bnb_8bit_force_kernel(kernel);
    for (int t = 0; t < 4; t++) optim_adamw_bnb_8bit.step(st, p, g + (size_t)t * n, &cfg);
    torch_sqrt_force_portable(false);
    optim_adamw_bnb_8bit_force_kernel(-1);
    *out = st;
}

static void test_bnb8_vector_kernels_match_portable(void** s) {
    (void)s;
    const size_t n = 69 * 256 + 77;
    float* p0 = malloc(n * sizeof *p0);
    float* g = malloc(4 * n * sizeof *g);
    Rng r;
    rng_init(&r, 0xb9b8ull, 1);
    rng_fill_normal(&r, p0, n, 0.0f, 0.02f);
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < n; i++) {
            const size_t blk = i / 256;
            float x = rng_normal(&r, 0.0f, 1.0f) * powf(10.0f, (float)((int)(blk % 61) - 30));
            if (blk == 3) x = 0.0f;                                     // all-zero block
            if (blk == 5 && i % 97 == 0) x = NAN;                       // NaN in a block
            if (blk == 6 && i % 50 == 1) x = (i & 2) ? INFINITY : -INFINITY;
            if (blk == 7) x = rng_normal(&r, 0.0f, 1.0f) * 1e-40f;      // subnormal gradients
            if (blk == 8 && i % 31 != 0) x = 0.0f;                      // sparse
            if (blk == 9 && t == 2) x = 0.0f;                           // a zero step after others
            if (blk == 10) x = (i & 1 ? 1.0f : -1.0f) * (3.4e38f - (float)(i % 256) * 1e35f);  // near FLT_MAX
            g[(size_t)t * n + i] = x;
        }
    // the most capable kernel first; each one the CPU lacks falls back to the next (skipped);
    // torch's sqrt seeded by rsqrtps where it matches the table, from the table (forced), and
    // MKL's AVX-512 kernel (seed 2, where the CPU has AVX-512F: the AVX-512 kernels with
    // torch_sqrt16_mkl_avx512 against the scalar torch_sqrtf_mkl_avx512)
    for (int seed = 0; seed < 3; seed++) {
        if (seed == 0 && !torch_sqrt_hw_matches()) continue;  // this CPU takes the table seed anyway
        if (seed == 2 && !torch_sqrt_set_kernel(TORCH_SQRT_MKL_AVX512)) continue;
        torch_sqrt_force_table(seed == 1);
        int last = -1;
        for (int want = 3; want >= 1; want--) {
            const int kernel = optim_adamw_bnb_8bit_force_kernel(want);
            optim_adamw_bnb_8bit_force_kernel(-1);
            if (kernel == last) continue;
            last = kernel;
            float* pv = malloc(n * sizeof *pv);
            float* ps = malloc(n * sizeof *ps);
            memcpy(pv, p0, n * sizeof *pv);
            memcpy(ps, p0, n * sizeof *ps);
            OptimState *sv, *ss;
            bnb8_run_steps(want, pv, g, n, &sv);
            bnb8_run_steps(-1, ps, g, n, &ss);
            size_t diff = 0;
            for (size_t i = 0; i < n; i++) diff += memcmp(&pv[i], &ps[i], sizeof(float)) != 0;
            printf("adamw_bnb_8bit vector kernel %d (%s) vs portable: %zu of %zu parameters differ\n", kernel,
                   seed == 2 ? "MKL AVX-512 sqrt" : seed ? "table seed" : "rsqrtps seed", diff, n);
            assert_int_equal(diff, 0);
            assert_int_equal(sv->n_tensors, ss->n_tensors);
            for (int k = 0; k < sv->n_tensors; k++) {
                const StateTensor* a = &sv->tensors[k];
                const StateTensor* b = &ss->tensors[k];
                assert_string_equal(a->name, b->name);
                size_t bytes, bytes_b;
                assert_true(dtype_nbytes(a->dtype, shape_numel(&a->shape), &bytes));
                assert_true(dtype_nbytes(b->dtype, shape_numel(&b->shape), &bytes_b));
                assert_int_equal(bytes, bytes_b);
                printf("  state %s: %s\n", a->name, memcmp(a->data, b->data, bytes) ? "DIFFERS" : "identical");
                assert_memory_equal(a->data, b->data, bytes);
            }
            optim_adamw_bnb_8bit.free(sv);
            optim_adamw_bnb_8bit.free(ss);
            free(pv);
            free(ps);
        }
        torch_sqrt_set_kernel(TORCH_SQRT_MKL_SSE);
    }
    torch_sqrt_force_table(false);
    free(p0);
    free(g);
}

// Goldens made by torch on an Intel Xeon with AVX-512 (reference/golden/optim_mkl_avx512/, by
// reference/random_optim_cases.py: metadata torch_sqrt mkl-avx512), where MKL's sqrt is another
// kernel than on the committed goldens' AMD machine (OPTIM_SEMANTICS.md 0.3): conform follows
// the golden's metadata, and adamw_torch and adamw_bnb_8bit must replay them bit for bit (on a
// CPU without AVX-512F, whose vrsqrt14ps the model needs, each case is "does not apply").
static void test_mkl_avx512_sqrt_goldens(void** s) {
    (void)s;
    static const char* const OPTIMS[] = {"adamw_torch", "adamw_bnb_8bit"};
    size_t cases = 0;
    for (size_t k = 0; k < sizeof OPTIMS / sizeof OPTIMS[0]; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s_mkl_avx512/%s", GOLDEN_OPTIM_DIR, OPTIMS[k]);
        DIR* d = opendir(dir);
        assert_non_null(d);
        struct dirent* e;
        while ((e = readdir(d))) {
            if (!strstr(e->d_name, ".safetensors")) continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            ConformSummary sum;
            Status st = conform_run_case(optim_find(OPTIMS[k]), path, NULL, &sum);
            if (st.code == STATUS_UNSUPPORTED && !cpu_features()->avx512f) {
                printf("%s: %s\n", path, st.msg);
                continue;
            }
            if (!status_is_ok(st)) fail_msg("%s: %s", path, st.msg);
            printf("%s/%s: %zu comparisons, %zu failed, max param ulp %u, max state ulp %u, codes identical %.4f%%\n",
                   OPTIMS[k], e->d_name, sum.n_compared, sum.n_failed, sum.worst_ulp_param, sum.worst_ulp_state,
                   100.0 * sum.min_code_equal);
            assert_int_equal(sum.n_failed, 0);
            assert_int_equal(sum.worst_ulp_param, 0);
            assert_int_equal(sum.worst_ulp_state, 0);
            assert_true(sum.min_code_equal == 1.0);
            cases++;
        }
        closedir(d);
    }
    assert_int_equal(g_torch_sqrt_kernel, TORCH_SQRT_MKL_SSE);  // restored after each case
    if (cpu_features()->avx512f) assert_true(cases >= 16);  // 13 adamw_torch (amsgrad, maximize, foreach among them) + 3 bnb
}

// The VBMI kernel's quantizer is planned and checked against the LUT at start-up and skipped if
// either fails; on a CPU that has everything it needs, it must not have been skipped.
static void test_bnb8_vbmi_kernel_in_use(void** s) {
    (void)s;
#if defined(__x86_64__)
    const CpuFeatures* f = cpu_features();
    const bool capable = f->avx2 && f->fma && f->avx512bw && __builtin_cpu_supports("avx512vbmi") &&
                         torch_sqrt_vector();
    const int kernel = optim_adamw_bnb_8bit_force_kernel(-1);
    printf("adamw_bnb_8bit: kernel %d (VBMI-capable CPU: %s)\n", kernel, capable ? "yes" : "no");
    if (capable) assert_int_equal(kernel, 3);
#endif
}

// adafactor_torch's AVX-512 kernels of passes 2 and 3 (the quotient by the row mean through
// a double reciprocal, optim_adafactor_torch.c) against its AVX2 kernels, bit for bit, on data
// the goldens do not reach: ragged row tails (C % 16 from 1 to 15, C < 16), batches, rows
// scaled from 1e-20 to 1e15 (squares that underflow to subnormals or zero, products r * col
// that overflow to inf), zero and subnormal gradients, statistics set by hand to NaN, inf,
// 0, negative and subnormal values between steps (v = NaN, inf, negative, subnormal reach
// the kernels with a normal row mean), weight decay on and off, the stored and the
// recomputed update, eps1 at the limit 2^-63 (floor 2^-126) and below it (the AVX2 fallback),
// NaN/inf gradients (a NaN row mean: the fallback), 4 steps each; parameters and every state
// tensor must be identical. (Without AVX-512 both runs take the AVX2 kernels.)
static void aft_run_steps(bool no_avx512, bool recompute, const TensorShape* shape, const OptimConfig* cfg, float* p,
                          const float* g, size_t n, int hard, OptimState** out) {
    OptimState* st = optim_adafactor_torch.init(shape, cfg);
    optim_adafactor_torch_force_no_avx512(no_avx512);
    optim_adafactor_torch_force_recompute(recompute);
    for (int t = 0; t < 4; t++) {
        if (t == 2 && hard) {  // statistics by hand: the next V = r * col / mean reaches every class
            float* row = optim_state_find(st, "row_var")->data;
            float* col = optim_state_find(st, "col_var")->data;
            const size_t n_row = shape_numel(&optim_state_find(st, "row_var")->shape);
            const size_t n_col = shape_numel(&optim_state_find(st, "col_var")->shape);
            static const float specials[] = {NAN, INFINITY, 0.0f, -1.0f, 1e-40f, 3e38f, -0.0f, 1e-30f};
            for (size_t j = 1; j < n_col; j += 5) col[j] = specials[(j / 5) % 8];
            for (size_t i = 2; i < n_row; i += 7) row[i] = (i / 7) % 3 == 0 ? 0.0f : (i / 7) % 3 == 1 ? -2.0f : 1e30f;
        }
        optim_adafactor_torch.step(st, p, g + (size_t)t * n, cfg);
    }
    optim_adafactor_torch_force_no_avx512(false);
    optim_adafactor_torch_force_recompute(false);
    *out = st;
}

// {batch, rows, cols}: a (rows, cols) matrix, or a (batch, rows, cols) stack of them
static TensorShape batched_shape(const int64_t s[3]) {
    return s[0] > 1 ? (TensorShape){3, {s[0], s[1], s[2]}} : shape_2d(s[1], s[2]);
}

static void test_adafactor_torch_avx512_matches_avx2(void** s) {
    (void)s;
    static const int64_t shapes[][3] = {{1, 3, 5},    {1, 17, 15},  {1, 9, 33},   {1, 40, 47},  {1, 64, 96},
                                        {2, 5, 7},    {3, 33, 70},  {1, 257, 1000}, {1, 300, 301}, {1, 2100, 37},
                                        {2, 300, 129}};
    const size_t before = optim_adafactor_torch_avx512_steps();
    size_t compared = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const size_t batch = (size_t)shapes[k][0], R = (size_t)shapes[k][1], C = (size_t)shapes[k][2];
        const size_t n = batch * R * C;
        if (SANITIZER_PASS && n > 100000) {  // 257 x 1000: the threaded split, as the three ~80k shapes
            sanitizer_pass_note("adafactor_torch AVX-512 vs AVX2: the 257 x 1000 shape");
            continue;
        }
        const TensorShape shape = batched_shape(shapes[k]);
        float* p0 = malloc(n * sizeof *p0);
        float* g = malloc(4 * n * sizeof *g);
        Rng r;
        rng_init(&r, 0xaf512ull + k, 1);
        rng_fill_normal(&r, p0, n, 0.0f, 0.02f);
        for (int v = 0; v < 7; v++) {
            // v: 0 plain, 1 weight decay, 2 hand-set statistics, 3 eps1 = 2^-63, 4 eps1 = 1e-30
            // (below: fallback), 5 NaN and inf gradients (fallback), 6 gradients growing 8x per
            // step: the statistics lag, RMS(U) > d, so the update's norm (pass 2's chain) sets
            // the step size and every bit of it shows in the parameters (with RMS(U) <= d the
            // norm is never used: denom = 1)
            OptimConfig cfg;
            optim_defaults(&optim_adafactor_torch, &cfg);
            if (v == 1 || v == 2) cfg.weight_decay = 0.1;
            if (v == 3) cfg.eps1 = 0x1p-63;
            if (v == 4) cfg.eps1 = 1e-30;
            for (int t = 0; t < 4; t++)
                for (size_t i = 0; i < n; i++) {
                    const size_t row = i / C;
                    float x = rng_normal(&r, 0.0f, 1.0f) * powf(10.0f, (float)((int)(row % 37) - 20));
                    if (row % 11 == 4) x = 0.0f;
                    if (i % 89 == 3) x = rng_normal(&r, 0.0f, 1.0f) * 1e-40f;
                    if (v == 5 && i % 1013 == 7) x = (i & 1) ? NAN : INFINITY;
                    if (v == 6) x = ldexpf(rng_normal(&r, 0.0f, 1.0f), 3 * t - (int)(row % 7));
                    g[(size_t)t * n + i] = x;
                }
            for (int recompute = 0; recompute < 2; recompute++) {
                float* pa = malloc(n * sizeof *pa);
                float* pb = malloc(n * sizeof *pb);
                memcpy(pa, p0, n * sizeof *pa);
                memcpy(pb, p0, n * sizeof *pb);
                OptimState *sa, *sb;
                aft_run_steps(false, recompute, &shape, &cfg, pa, g, n, v == 2, &sa);
                aft_run_steps(true, recompute, &shape, &cfg, pb, g, n, v == 2, &sb);
                size_t diff = 0;
                for (size_t i = 0; i < n; i++) diff += memcmp(&pa[i], &pb[i], sizeof(float)) != 0;
                if (diff)
                    fail_msg("adafactor_torch %zux%zux%zu variant %d recompute %d: %zu of %zu parameters differ "
                             "between the AVX-512 and AVX2 kernels", batch, R, C, v, recompute, diff, n);
                for (int j = 0; j < sa->n_tensors; j++) {
                    size_t bytes;
                    assert_true(dtype_nbytes(sa->tensors[j].dtype, shape_numel(&sa->tensors[j].shape), &bytes));
                    if (memcmp(sa->tensors[j].data, sb->tensors[j].data, bytes))
                        fail_msg("adafactor_torch %zux%zux%zu variant %d: state %s differs", batch, R, C, v,
                                 sa->tensors[j].name);
                }
                compared += n;
                optim_adafactor_torch.free(sa);
                optim_adafactor_torch.free(sb);
                free(pa);
                free(pb);
            }
        }
        free(p0);
        free(g);
    }
    const size_t fast_steps = optim_adafactor_torch_avx512_steps() - before;
    printf("adafactor_torch AVX-512 vs AVX2 kernels: %zu parameters compared after 4 steps, identical; %zu steps "
           "took the AVX-512 kernels\n", compared, fast_steps);
#if defined(__x86_64__)
    if (cpu_features()->avx512f) assert_true(fast_steps > 0);
#endif
}

// adafactor_torch stores U up to 2^21 elements and recomputes it beyond; every golden is
// smaller, so run its goldens again with the recomputing path forced.
static void test_recomputing_path_matches_goldens(void** s) {
    (void)s;
    optim_adafactor_torch_force_recompute(true);
    size_t n_cases, n_failed;
    ConformSummary t;
    run_all_cases(&optim_adafactor_torch, stdout, &n_cases, &n_failed, &t);
    optim_adafactor_torch_force_recompute(false);
    printf("optim/adafactor_torch (U recomputed): %zu cases, %zu comparisons, %zu failed; max param ulp %u; max "
           "state ulp %u\n", n_cases, t.n_compared, t.n_failed, t.worst_ulp_param, t.worst_ulp_state);
    assert_true(n_cases > 0);
    assert_int_equal(n_failed, 0);
    assert_int_equal(t.worst_ulp_state, 0);
    assert_int_equal(t.worst_ulp_param, 0);
}


// ---- validation and state size ----
static void expect_invalid(const Optimizer* o, const char* json, const char* field) {
    json_t* hp = json_loads(json, 0, NULL);
    assert_non_null(hp);
    OptimConfig cfg;
    Status s = optim_config_from_json(o, hp, &cfg);
    json_decref(hp);
    printf("%s %s -> %s\n", o->name, json, s.msg);
    assert_int_equal(s.code, STATUS_INVALID);
    assert_non_null(strstr(s.msg, field));
}

static void expect_valid(const Optimizer* o, const char* json) {
    json_t* hp = json_loads(json, 0, NULL);
    assert_non_null(hp);
    OptimConfig cfg;
    Status s = optim_config_from_json(o, hp, &cfg);
    json_decref(hp);
    if (!status_is_ok(s)) printf("%s %s -> refused: %s\n", o->name, json, s.msg);
    assert_true(status_is_ok(s));
}

// The hyper-parameter contract, one row per rule: what the library accepts is accepted (valid
// = NULL), what it refuses is refused with its own words, what we do not mirror is refused as
// "not implemented". Messages must name the field and quote the rule.
typedef struct {
    const char* optim;
    const char* json;
    const char* msg;  // substring of the refusal; NULL: must be accepted
} HparamRule;

static const HparamRule HPARAM_RULES[] = {
    // torch.optim.AdamW (Adam.__init__'s checks)
    {"adamw_torch", "{\"lr\": 0}", NULL},
    {"adamw_torch", "{\"eps\": 0}", NULL},
    {"adamw_torch", "{\"betas\": [0, 0]}", NULL},
    {"adamw_torch", "{\"weight_decay\": 0}", NULL},
    {"adamw_torch", "{\"foreach\": true}", NULL},
    {"adamw_torch", "{\"fused\": true, \"foreach\": null}", NULL},
    {"adamw_torch", "{\"lr\": -1e-3}", "Invalid learning rate"},
    {"adamw_torch", "{\"eps\": -1e-8}", "Invalid epsilon value"},
    {"adamw_torch", "{\"betas\": [1.0, 0.999]}", "Invalid beta parameter at index 0"},
    {"adamw_torch", "{\"betas\": [0.9, -0.1]}", "Invalid beta parameter at index 1"},
    {"adamw_torch", "{\"weight_decay\": -0.1}", "Invalid weight_decay value"},
    {"adamw_torch", "{\"fused\": true, \"foreach\": true}", "cannot be `True` together"},
    {"adamw_torch", "{\"fused\": true, \"differentiable\": true}", "does not support `differentiable`"},
    {"adamw_torch", "{\"amsgrad\": true, \"maximize\": true}", NULL},
    {"adamw_torch", "{\"amsgrad\": true, \"maximize\": true, \"fused\": true}", NULL},
    {"adamw_torch", "{\"capturable\": true}", "capturable=true (tensor bias corrections) is not implemented"},
    {"adamw_torch", "{\"decoupled_weight_decay\": false}", "takes no keyword 'decoupled_weight_decay'"},
    {"adamw_torch", "{\"lr\": \"1e-3\"}", "'lr' of adamw_torch must be a number"},
    // transformers Adafactor (the constructor's defaults: lr=None, relative_step=True)
    {"adafactor", "{}", NULL},
    {"adafactor", "{\"lr\": 0, \"relative_step\": false}", NULL},
    {"adafactor", "{\"beta1\": 0.0, \"lr\": 1e-3, \"relative_step\": false}", NULL},
    {"adafactor", "{\"lr\": 0.001}", "Cannot combine manual `lr` and `relative_step=True` options"},
    {"adafactor", "{\"warmup_init\": true, \"relative_step\": false, \"lr\": 1e-3}", "`warmup_init=True` requires `relative_step=True`"},
    {"adafactor", "{\"relative_step\": false}", "lr must be a number when relative_step=false"},
    // transformers checks nothing else: values outside the usual ranges run (goldens wide_*)
    {"adafactor", "{\"clip_threshold\": 0, \"beta1\": 1.5, \"decay_rate\": 0.5, \"weight_decay\": -0.1, "
                  "\"eps\": [-1, -1e-3], \"lr\": -1e-3, \"relative_step\": false}", NULL},
    {"adafactor", "{\"amsgrad\": false}", "takes no keyword 'amsgrad'"},
    // torch.optim.Adafactor
    {"adafactor_torch", "{\"lr\": 0}", NULL},
    {"adafactor_torch", "{\"d\": 1, \"beta2_decay\": 0, \"eps\": [0, 0]}", NULL},
    {"adafactor_torch", "{\"lr\": -1}", "Learning rate should be >= 0"},
    {"adafactor_torch", "{\"beta2_decay\": 0.5}", "beta2_decay should be <= 0"},
    {"adafactor_torch", "{\"eps\": [-1e-30, 1e-3]}", "epsilon1 should be >= 0"},
    {"adafactor_torch", "{\"eps\": [null, -1e-3]}", "epsilon2 should be >= 0"},
    {"adafactor_torch", "{\"d\": 0.5}", "Clipping threshold d should be >= 1"},
    {"adafactor_torch", "{\"weight_decay\": -0.1}", "weight_decay should be >= 0"},
    {"adafactor_torch", "{\"maximize\": true}", NULL},
    {"adafactor_torch", "{\"foreach\": true, \"maximize\": true}", NULL},
    // bitsandbytes.optim.AdamW8bit
    {"adamw_bnb_8bit", "{\"lr\": 0, \"eps\": 0, \"min_8bit_size\": 1}", NULL},
    {"adamw_bnb_8bit", "{\"optim_bits\": 32, \"is_paged\": false, \"args\": null}", NULL},
    {"adamw_bnb_8bit", "{\"optim_bits\": 8}", "AdamW8bit only supports optim_bits=32"},
    {"adamw_bnb_8bit", "{\"amsgrad\": true}", "AdamW8bit does not support amsgrad=True"},
    {"adamw_bnb_8bit", "{\"lr\": -1}", "Invalid learning rate"},
    {"adamw_bnb_8bit", "{\"eps\": -1}", "Invalid epsilon value"},
    {"adamw_bnb_8bit", "{\"betas\": [0.9, 1.0]}", "Invalid beta parameter at index 1"},
    {"adamw_bnb_8bit", "{\"weight_decay\": -0.1}", "Invalid weight_decay value"},
    {"adamw_bnb_8bit", "{\"percentile_clipping\": 5}", "takes no keyword 'percentile_clipping'"},
    {"adamw_bnb_8bit", "{\"block_wise\": false}", "takes no keyword 'block_wise'"},
    {"adamw_bnb_8bit", "{\"is_paged\": true}", "is_paged=true is not implemented"},
    {"adamw_bnb_8bit", "{\"min_8bit_size\": 1.5}", "'min_8bit_size' of adamw_bnb_8bit must be an integer"},
};

static void test_hyperparameter_contract(void** s) {
    (void)s;
    for (size_t i = 0; i < optim_count(); i++) {
        const Optimizer* o = optim_at(i);
        OptimConfig cfg;
        optim_defaults(o, &cfg);
        Status st = o->validate(&cfg);
        if (!status_is_ok(st)) printf("%s defaults invalid: %s\n", o->name, st.msg);
        assert_true(status_is_ok(st));  // the library defaults (as HF Trainer sets them) are valid
        expect_invalid(o, "{\"bogus_knob\": 1}", "takes no keyword 'bogus_knob'");
    }
    for (size_t i = 0; i < sizeof HPARAM_RULES / sizeof HPARAM_RULES[0]; i++) {
        const HparamRule* r = &HPARAM_RULES[i];
        const Optimizer* o = optim_find(r->optim);
        assert_non_null(o);
        if (r->msg) expect_invalid(o, r->json, r->msg);
        else expect_valid(o, r->json);
    }
}

// ---- honest goldens: a damaged golden is unusable (STATUS_INVALID, named), never a pass nor a
// failure of the optimizer ----
// Copies `src` to `dst` without the tensor `drop` (NULL: none), with metadata `key` set to
// `value` (NULL: unchanged).
static void write_damaged(const char* src, const char* dst, const char* drop, const char* key, const char* value) {
    SafeTensors st;
    assert_true(status_is_ok(st_read(src, &st)));
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (size_t i = 0; i < st.n_meta; i++)
        st_writer_meta(w, st.meta_keys[i], key && !strcmp(st.meta_keys[i], key) ? value : st.meta_values[i]);
    assert_true(status_is_ok(st_writer_save(w, dst)));
    st_writer_free(w);
    st_free(&st);
}

static void expect_unusable(const char* optim, const char* golden, const char* drop, const char* key, const char* value,
                            const char* needle) {
    char src[512], dst[] = "/tmp/test_optim_damaged_XXXXXX.safetensors";
    snprintf(src, sizeof src, "%s/%s/%s", GOLDEN_OPTIM_DIR, optim, golden);
    int fd = mkstemps(dst, 12);
    assert_true(fd >= 0);
    close(fd);
    write_damaged(src, dst, drop, key, value);
    ConformSummary sum;
    Status s = conform_run_case(optim_find(optim), dst, NULL, &sum);
    printf("%s without %s%s%s -> %s\n", golden, drop ? drop : "-", key ? ", " : "", key ? key : "", s.msg);
    unlink(dst);
    assert_int_equal(s.code, STATUS_INVALID);
    assert_non_null(strstr(s.msg, "unusable golden"));
    assert_non_null(strstr(s.msg, needle));
}

static void test_damaged_goldens_are_unusable(void** s) {
    (void)s;
    // a state tensor the library keeps, at a checked step (AdamW, Adafactor factored, 8-bit)
    expect_unusable("adamw_torch", "vec_257.safetensors", "expect.step10.state.exp_avg", NULL, NULL,
                    "lacks expect.step10.state.exp_avg");
    expect_unusable("adafactor", "matrix_64x96_wd.safetensors", "expect.step2.state.exp_avg_sq_col", NULL, NULL,
                    "lacks expect.step2.state.exp_avg_sq_col");
    expect_unusable("adamw_bnb_8bit", "vec_4097.safetensors", "expect.step1.state.absmax2", NULL, NULL,
                    "lacks expect.step1.state.absmax2");
    expect_unusable("adafactor_torch", "vec_255.safetensors", "expect.step5.state.variance", NULL, NULL,
                    "lacks expect.step5.state.variance");
    // the step tensor (a Python int in transformers' state, a tensor in torch's)
    expect_unusable("adafactor", "vec_257.safetensors", "expect.step20.state.step", NULL, NULL,
                    "lacks expect.step20.state.step");
    expect_unusable("adamw_torch", "vec_1.safetensors", "expect.step1.state.step", NULL, NULL,
                    "lacks expect.step1.state.step");
    // a checked step's param
    expect_unusable("adamw_torch", "vec_257.safetensors", "expect.step5.param", NULL, NULL,
                    "lists step 5 but it has no expect.step5.param");
    // a check step beyond the last step, and a malformed list
    expect_unusable("adamw_torch", "vec_257.safetensors", NULL, "check_steps", "1,2,5,10,20,21",
                    "lists step 21, but input.grads has steps 1..20");
    expect_unusable("adamw_torch", "vec_257.safetensors", NULL, "check_steps", "1,x", "not a comma list of steps");
    expect_unusable("adamw_torch", "vec_257.safetensors", NULL, "check_steps", "", "check_steps is empty");
}

// Both Adafactors form their row and column statistics in one fused read of g (row sums and
// column block sums of u = g^2 + eps1 in one loop; two rows' norm chains side by side). After
// one step the statistics are exactly the means of that step (transformers: beta2t = 0, so
// row = fma(mean, 1, 0); torch: lerp weight 1), so they must equal, bit for bit, torch's
// whole-array reductions of torch_reduce.h (themselves checked against torch in
// test_torch_reduce) on shapes that reach every tail of the fused orders: C % 8, C % 32,
// leftover vectors, cascade levels 2 and 3 (8192 and 131072 elements per row), odd rows,
// batches, and tensors large enough (>= 65536) for the threaded passes.
static void test_adafactor_statistics_equal_whole_array_reductions(void** s) {
    (void)s;
    static const int64_t shapes[][3] = {
        {1, 1, 9},   {1, 3, 8},    {1, 17, 15},  {1, 5, 31},   {1, 33, 32},  {1, 2, 33},   {1, 16, 40},  {1, 7, 63},
        {1, 3, 65},  {1, 64, 96},  {1, 9, 100},  {1, 4, 129},  {1, 31, 513}, {1, 12, 8339}, {1, 2, 140001},
        {1, 301, 300}, {1, 2500, 40}, {1, 70, 1000}, {1, 37, 4001}, {2, 3, 40},  {3, 16, 24},  {2, 5, 7},
        {3, 33, 700},
    };
    const Optimizer* optims[] = {&optim_adafactor_hf, &optim_adafactor_torch};
    size_t checked = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const size_t batch = (size_t)shapes[k][0], R = (size_t)shapes[k][1], C = (size_t)shapes[k][2];
        const size_t n = batch * R * C;
        const TensorShape shape = batched_shape(shapes[k]);
        float* g = xaligned_alloc(n * sizeof(float));
        float* p = xaligned_alloc(n * sizeof(float));
        float* u = xaligned_alloc(n * sizeof(float));
        float* col = xaligned_alloc(C * sizeof(float));
        uint32_t x = 12345u + (uint32_t)k;
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            g[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0x1p-6f * (float)(1 + (x & 7));
        }
        for (size_t o = 0; o < 2; o++) {
            OptimConfig cfg;
            optim_defaults(optims[o], &cfg);
            for (size_t i = 0; i < n; i++) p[i] = 0.01f;
            OptimState* st = optims[o]->init(&shape, &cfg);
            optims[o]->step(st, p, g, &cfg);
            const bool hf = o == 0;
            const float* row_got = optim_state_find(st, hf ? "exp_avg_sq_row" : "row_var")->data;
            const float* col_got = optim_state_find(st, hf ? "exp_avg_sq_col" : "col_var")->data;
            for (size_t b = 0; b < batch; b++) {
                const float* gb = g + b * R * C;
                float* ub = u + b * R * C;
                for (size_t i = 0; i < R * C; i++) ub[i] = hf ? gb[i] * gb[i] + (float)cfg.eps1 : gb[i];
                for (size_t i = 0; i < R; i++) {
                    float want;
                    if (hf) {
                        want = torch_sum_f32(ub + i * C, C) / (float)C;  // update.mean(dim=-1)
                    } else {
                        const float norm = torch_norm2_f32(ub + i * C, C);  // vector_norm(dim=-1)^2 / C
                        want = (norm * norm) / (float)C;
                    }
                    if (memcmp(&want, &row_got[b * R + i], sizeof want) != 0)
                        fail_msg("%s %zux%zux%zu: row %zu of matrix %zu: %a, whole-array reduction %a", optims[o]->name,
                                 batch, R, C, i, b, (double)row_got[b * R + i], (double)want);
                }
                if (hf) torch_sum_dim0_f32(col, ub, R, C);  // update.mean(dim=-2)
                else torch_sumsq_dim0_f32(col, ub, R, C);   // vector_norm(dim=-2)^2 / R
                for (size_t j = 0; j < C; j++) {
                    float want = col[j] / (float)R;
                    if (!hf) {
                        const float norm = sqrtf(col[j]);
                        want = (norm * norm) / (float)R;
                    }
                    if (memcmp(&want, &col_got[b * C + j], sizeof want) != 0)
                        fail_msg("%s %zux%zux%zu: column %zu of matrix %zu: %a, whole-array reduction %a",
                                 optims[o]->name, batch, R, C, j, b, (double)col_got[b * C + j], (double)want);
                }
            }
            checked += batch * (R + C);
            optims[o]->free(st);
        }
        free(g);
        free(p);
        free(u);
        free(col);
    }
    printf("adafactor, adafactor_torch: %zu row/column statistics equal to the whole-array reductions\n", checked);
}

// The closed-form state size of one configuration on every shape equals the measured state.
static void check_estimate(const Optimizer* o, const OptimConfig* cfg, const char* label) {
    const TensorShape shapes[] = {shape_1d(1), shape_1d(255), shape_1d(4095), shape_1d(4096), shape_1d(4097),
                                  shape_2d(64, 96), shape_2d(3, 5), {3, {2, 8, 12}}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        OptimState* st = o->init(&shapes[k], cfg);
        size_t n = shape_numel(&shapes[k]);
        float* p = xaligned_alloc(n * 4);
        float* g = xaligned_alloc(n * 4);
        for (size_t j = 0; j < n; j++) {
            p[j] = 0.01f * (float)(j % 7);
            g[j] = 0.001f * (float)((int)(j % 5) - 2);
        }
        o->step(st, p, g, cfg);  // measured after one real step, as the seed does
        size_t est = o->state_bytes(&shapes[k], cfg), meas = optim_state_measured_bytes(st);
        if (est != meas) printf("%s%s shape #%zu: estimate %zu != measured %zu\n", o->name, label, k, est, meas);
        assert_int_equal(est, meas);
        o->free(st);
        free(p);
        free(g);
    }
}

static void test_estimate_equals_measured(void** s) {
    (void)s;
    for (size_t i = 0; i < optim_count(); i++) {
        const Optimizer* o = optim_at(i);
        OptimConfig cfg;
        optim_defaults(o, &cfg);
        check_estimate(o, &cfg, "");
        cfg.amsgrad = true;  // torch AdamW's max_exp_avg_sq, where the optimizer takes it
        if (optim_has_keyword(o, "amsgrad") && status_is_ok(o->validate(&cfg))) {
            check_estimate(o, &cfg, " amsgrad");
            OptimState* st = o->init(&(TensorShape){1, {5}}, &cfg);
            assert_non_null(optim_state_find(st, "max_exp_avg_sq"));
            o->free(st);
        }
    }
}

// step_scaled(g, coef) (clipping's multiply fused into the optimizer's pass) gives the bits of
// g *= coef in place followed by step(), for every optimizer that has it: parameters and every
// state tensor after 3 steps, on a threaded 2-D size and a ragged 1-D one, gradients spanning
// zeros, -0, subnormals, 1e-30..1e10, and coefficients below 1, 0 (an infinite norm) and NaN.
static bool same_bits_or_nan(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], sizeof a[i]) != 0) return false;
    return true;
}

// One configuration: step_scaled against multiply + step on both shapes and every coefficient;
// returns the cases checked.
static int check_step_scaled(const Optimizer* o, const OptimConfig* cfg, const char* label) {
    const float coefs[] = {0.0427f, 0.73f, 0.0f, NAN};
    TensorShape shapes[2] = {{.ndim = 2, .dims = {300, 701}}, {.ndim = 1, .dims = {1003}}};
    int checked = 0;
    for (size_t k = 0; k < 2; k++)
        for (size_t ci = 0; ci < sizeof coefs / sizeof coefs[0]; ci++) {
            const size_t n = shape_numel(&shapes[k]);
            float* pa = xaligned_alloc(n * 4);
            float* pb = xaligned_alloc(n * 4);
            float* g = xaligned_alloc(n * 4);
            float* gm = xaligned_alloc(n * 4);
            Rng r;
            rng_init(&r, 77, n + ci);
            rng_fill_normal(&r, pa, n, 0.0f, 0.02f);
            memcpy(pb, pa, n * 4);
            OptimState* sa = o->init(&shapes[k], cfg);
            OptimState* sb = o->init(&shapes[k], cfg);
            for (int step = 0; step < 3; step++) {
                rng_fill_normal(&r, g, n, 0.0f, 1.0f);
                for (size_t j = 0; j < n; j++) {
                    const float scale[8] = {1e-30f, 1e-3f, 1.0f, 1e10f, 0x1p-140f, 1e-20f, 3e5f, 0.5f};
                    g[j] *= scale[(j * 7 + (size_t)step) % 8];
                    if (j % 97 == 3) g[j] = 0.0f;
                    if (j % 89 == 5) g[j] = -0.0f;
                }
                memcpy(gm, g, n * 4);
                for (size_t j = 0; j < n; j++) gm[j] *= coefs[ci];
                o->step(sa, pa, gm, cfg);
                o->step_scaled(sb, pb, g, coefs[ci], cfg);
            }
            // bit for bit, but that a NaN's sign may differ with maximize (the NaN coefficient:
            // (g * NaN) * -1 keeps the NaN's sign, g * -NaN flips it): NaN where NaN
            bool same = same_bits_or_nan(pa, pb, n) && sa->n_tensors == sb->n_tensors;
            for (int t = 0; same && t < sa->n_tensors; t++) {
                const size_t m = shape_numel(&sa->tensors[t].shape);
                same = sa->tensors[t].dtype == DTYPE_F32
                           ? same_bits_or_nan(sa->tensors[t].data, sb->tensors[t].data, m)
                           : memcmp(sa->tensors[t].data, sb->tensors[t].data,
                                    m * dtype_traits(sa->tensors[t].dtype)->size) == 0;
            }
            if (!same)
                printf("%s%s shape #%zu coef %g: step_scaled differs from multiply + step\n", o->name, label, k,
                       (double)coefs[ci]);
            assert_true(same);
            checked++;
            o->free(sa);
            o->free(sb);
            free(pa);
            free(pb);
            free(g);
            free(gm);
        }
    return checked;
}

static void test_step_scaled_equals_multiply_then_step(void** state) {
    (void)state;
    int checked = 0;
    for (size_t oi = 0; oi < optim_count(); oi++) {
        const Optimizer* o = optim_at(oi);
        if (!o->step_scaled) continue;
        OptimConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        o->defaults(&cfg);
        cfg.weight_decay = 0.01;
        checked += check_step_scaled(o, &cfg, "");
        if (!optim_has_keyword(o, "maximize")) continue;
        cfg.maximize = true;  // and amsgrad, where the optimizer takes it
        cfg.amsgrad = optim_has_keyword(o, "amsgrad");
        assert_true(status_is_ok(o->validate(&cfg)));
        checked += check_step_scaled(o, &cfg, " (maximize, amsgrad)");
    }
    printf("step_scaled == multiply + step: %d cases\n", checked);
    assert_true(checked > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hyperparameter_contract),
        cmocka_unit_test(test_estimate_equals_measured),
        cmocka_unit_test(test_damaged_goldens_are_unusable),
        cmocka_unit_test(test_every_optimizer_matches_its_goldens),
        cmocka_unit_test(test_portable_paths_match_goldens),
        cmocka_unit_test(test_table_seed_paths_match_goldens),
        cmocka_unit_test(test_mkl_avx512_sqrt_goldens),
        cmocka_unit_test(test_bnb8_vector_kernels_match_portable),
        cmocka_unit_test(test_bnb8_vbmi_kernel_in_use),
        cmocka_unit_test(test_recomputing_path_matches_goldens),
        cmocka_unit_test(test_adafactor_torch_avx512_matches_avx2),
        cmocka_unit_test(test_adafactor_statistics_equal_whole_array_reductions),
        cmocka_unit_test(test_every_known_mistake_fails),
        cmocka_unit_test(test_step_scaled_equals_multiply_then_step),
    };
    return cmocka_run_group_tests_name("optim", tests, NULL, NULL);
}

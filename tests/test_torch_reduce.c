// test_torch_reduce.c — the streaming pieces of torch_reduce.h give exactly the bits of the
// whole-array functions they decompose (which the optimizer goldens tie to torch itself):
// column sums from row-block partials (torch_sum_dim0_combine + torch_sum_dim0_tail_f32) vs
// torch_sum_dim0_f32, the 8-lane norm chain fed in pieces vs torch_sumsq_f32, and the
// produced / pipelined norm chains for 1, 2 and 3 threads. The data spread over many binades so
// that a different summation order gives different bits (checked: a plain in-order column sum
// differs somewhere), so the comparisons can fail.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "core/rng.h"
#include "optim/torch_reduce.h"

// values of both signs over ~2^-20 .. 2^20: sums depend on their order
static void fill_spread(float* x, size_t n, uint64_t seed) {
    Rng r;
    rng_init(&r, seed, n);
    rng_fill_normal(&r, x, n, 0.0f, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)((i * 2654435761u >> 7) % 41) - 20);
}

static void assert_same_bits(const float* a, const float* b, size_t n, const char* what) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            printf("%s: element %zu: %a vs %a\n", what, i, (double)a[i], (double)b[i]);
            fail();
        }
}

// Column sums by blocks of rows (taken in reverse order, as a thread might), then the cascade's
// upper levels and the other columns, against the serial torch_sum_dim0_f32.
static void check_dim0(size_t R, size_t C, bool *order_matters) {
    float* X = xaligned_alloc(R * C * sizeof(float));
    fill_spread(X, R * C, R * 131 + C);
    float* want = xmalloc(C * sizeof(float));
    float* got = xmalloc(C * sizeof(float));
    torch_sum_dim0_f32(want, X, R, C);

    const size_t Cm = torch_sum_dim0_main_cols(C), Ct = C - Cm, B = torch_sum_dim0_block_rows(R);
    const size_t n_blocks = (R + B - 1) / B;
    float* part = xmalloc((n_blocks * (Cm ? Cm : 1)) * sizeof(float));
    float* tail = xmalloc((R * (Ct ? Ct : 1)) * sizeof(float));
    for (size_t blk = n_blocks; blk-- > 0;) {
        float* acc = part + blk * Cm;
        const size_t i1 = (blk + 1) * B < R ? (blk + 1) * B : R;
        for (size_t i = blk * B; i < i1; i++)
            for (size_t j = 0; j < Cm; j++) acc[j] = (i == blk * B ? 0.0f : acc[j]) + X[i * C + j];
    }
    for (size_t i = 0; i < R; i++) memcpy(tail + i * Ct, X + i * C + Cm, Ct * sizeof(float));
    torch_sum_dim0_combine(got, part, Cm, R, 0, Cm);
    if (Ct) torch_sum_dim0_tail_f32(got + Cm, tail, Ct, R, C, Cm);
    char what[64];
    snprintf(what, sizeof what, "dim0 sum %zux%zu", R, C);
    assert_same_bits(got, want, C, what);

    for (size_t j = 0; j < C; j++) {  // the plain in-order sum: a different order
        float s = 0;
        for (size_t i = 0; i < R; i++) s += X[i * C + j];
        if (memcmp(&s, &want[j], sizeof s) != 0) *order_matters = true;
    }
    free(X);
    free(want);
    free(got);
    free(part);
    free(tail);
}

static void test_dim0_blocks_match_serial(void** s) {
    (void)s;
    // C: 1 (coalesced), < 8 (blocks of 4 + singles), 32-multiples, 32-blocks + 8-blocks +
    // singles; R: one block, several, 256+ rows (level 2), 4096+ (level 3), and more than 2^19
    // rows (level_power 5: blocks of 32 rows)
    static const size_t shapes[][2] = {{1, 1},    {5, 1},    {300, 1},    {17, 3},    {33, 5},  {100, 8},
                                       {20, 28},  {64, 96},  {12, 8339},  {257, 37},  {300, 64}, {4200, 45},
                                       {5000, 75}, {530000, 5}};
    bool order_matters = false;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) check_dim0(shapes[k][0], shapes[k][1], &order_matters);
    assert_true(order_matters);  // the data can tell orders apart
}

static void test_sumsq_pieces_match_whole(void** s) {
    (void)s;
    static const size_t ns[] = {0, 1, 3, 4, 7, 8, 9, 12, 15, 16, 100, 4099, 100003};
    float* x = xmalloc(100003 * sizeof(float));
    fill_spread(x, 100003, 7);
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const size_t n = ns[k], nv = n - n % 8;
        TorchSumsq acc;
        torch_sumsq_init(&acc);
        for (size_t e = 0, piece = 8; e < nv; e += piece, piece = (piece * 3) % 200 / 8 * 8 + 8)
            torch_sumsq_feed(&acc, x + e, nv - e < piece ? nv - e : piece);
        const float got = torch_sumsq_finish(&acc, x + nv, n - nv), want = torch_sumsq_f32(x, n);
        assert_memory_equal(&got, &want, sizeof got);
    }
    free(x);
}

typedef struct {
    const float* x;
} CopyCtx;

static void produce_copy(const void* ctx, float* out, size_t e0, size_t e1) {
    const CopyCtx* c = ctx;
    memcpy(out, c->x + e0, (e1 - e0) * sizeof(float));
}

// produce_copy then torch_sumsq_feed, in the produce_feed form (lanes in and out)
static void produce_feed_copy(const void* ctx, float* lanes, size_t e0, size_t e1) {
    const CopyCtx* c = ctx;
    TorchSumsq acc;
    memcpy(acc.lane, lanes, sizeof acc.lane);
    torch_sumsq_feed(&acc, c->x + e0, e1 - e0);
    memcpy(lanes, acc.lane, sizeof acc.lane);
}

static void test_produced_chains_match_whole(void** s) {
    (void)s;
    static const size_t ns[] = {1, 7, 4096, 65535, 65536, 65539, 1000003};
    float* x = xmalloc(1000003 * sizeof(float));
    float* y = xmalloc(1000003 * sizeof(float));
    fill_spread(x, 1000003, 11);
    fill_spread(y, 1000003, 13);
    const int saved = omp_get_max_threads();
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            const size_t n = ns[k];
            const CopyCtx c = {x};
            const float want = torch_sumsq_f32(x, n), want_side = torch_sumsq_f32(y, n);
            float got, got_side;
            torch_sumsq_produced_f32(n, produce_copy, &c, y, &got, &got_side);
            assert_memory_equal(&got, &want, sizeof got);
            assert_memory_equal(&got_side, &want_side, sizeof got);
            got = torch_sumsq_produced_parallel_f32(n, produce_copy, NULL, &c);
            assert_memory_equal(&got, &want, sizeof got);
            got = torch_sumsq_produced_parallel_f32(n, produce_copy, produce_feed_copy, &c);  // thread 0 fuses
            assert_memory_equal(&got, &want, sizeof got);
        }
    }
    omp_set_num_threads(saved);
    free(x);
    free(y);
}

// torch_sum_dim0_low (the cascade reading bf16/fp16 values, widening each as it loads it) equals
// torch_sum_dim0_f32 of the widened matrix bit for bit: the same adds in the same order, on
// shapes through every branch (C = 1: the coalesced inner sum; C < 8: scalar outer sums; blocks
// of 32, of 8, single columns; R over several cascade levels), 1-3 threads
static void test_dim0_low_equals_widened(void** s) {
    (void)s;
    static const size_t shapes[][2] = {{1, 1}, {5, 1}, {300, 1}, {7, 3}, {40, 7}, {3, 8}, {17, 33}, {64, 100},
                                       {1024, 128}, {300, 301}, {1024, 3072}};
    const int saved = omp_get_max_threads();
    size_t compared = 0;
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            const size_t R = shapes[k][0], C = shapes[k][1], n = R * C;
            float* x = xmalloc(n * sizeof(float));
            float* w = xmalloc(n * sizeof(float));
            uint16_t* low = xmalloc(n * sizeof(uint16_t));
            float* want = xmalloc(C * sizeof(float));
            float* got = xmalloc(C * sizeof(float));
            fill_spread(x, n, 7 * R + C);
            for (int d = 0; d < 2; d++) {
                const DType dt = d ? DTYPE_F16 : DTYPE_BF16;
                dtype_from_f32_row(low, dt, x, n);
                dtype_to_f32_row(w, dt, low, n);
                torch_sum_dim0_f32(want, w, R, C);
                torch_sum_dim0_low(got, low, dt, R, C);
                assert_memory_equal(got, want, C * sizeof(float));
                compared += C;
            }
            free(x), free(w), free(low), free(want), free(got);
        }
    }
    omp_set_num_threads(saved);
    printf("torch_sum_dim0_low: %zu column sums (bf16, fp16; 1-3 threads) equal to the widened fp32 cascade\n",
           compared);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dim0_blocks_match_serial),
        cmocka_unit_test(test_sumsq_pieces_match_whole),
        cmocka_unit_test(test_produced_chains_match_whole),
        cmocka_unit_test(test_dim0_low_equals_widened),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

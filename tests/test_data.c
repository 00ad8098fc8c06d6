// test_data.c — datasets and metrics (src/model/data.h): the synthetic "paraphrase" task is
// deterministic per (seed, split, index), balanced, well padded, disjoint between splits,
// solvable by its rule and not by a linear bag-of-words model; safetensors export/import
// round-trips and rejects every malformed input with a message naming file, tensor and
// problem; metrics match sklearn's definitions on hand-computed cases (the expected values
// are worked out in the comments, not produced by this code; the metric and argmax cases were
// cross-checked once with sklearn 1.9.1 f1_score/confusion_matrix and torch 2.15 argmax).
// Temporary files go to a mkdtemp folder under $TMPDIR (or /tmp) and are removed.
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
#include <unistd.h>

#include "model/data.h"
#include "model/model.h"
#include "core/safetensors.h"

// ---------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------

// the "tiny" preset's shape: vocab 64, 32 positions, 2 labels
static const ModelConfig TINY = {64, 32, 2, 2, 64, 32, 2, FFN_ACT_GELU, MODEL_PAD_TOKEN_ID, 0, false, false};

static DataConfig base_cfg(int64_t n_labels) {
    DataConfig c = {0};
    c.task = "paraphrase";
    c.n_labels = n_labels;
    c.n_train = 2000;
    c.n_eval = 1000;
    c.seq_len = 32;
    c.vocab_size = 64;
    c.seed = 1234;
    return c;
}

static Dataset make(const DataConfig* c) {
    Dataset ds;
    Status s = dataset_synthetic(c, &ds);
    if (!status_is_ok(s)) fail_msg("dataset_synthetic: %s", s.msg);
    return ds;
}

static bool same_split(const SplitData* a, const SplitData* b, int64_t T) {
    if (a->n != b->n) return false;
    size_t cells = a->n * (size_t)T;
    return memcmp(a->input_ids, b->input_ids, cells * sizeof(int64_t)) == 0 &&
           memcmp(a->attention_mask, b->attention_mask, cells * sizeof(int64_t)) == 0 &&
           memcmp(a->labels, b->labels, a->n * sizeof(int32_t)) == 0;
}

static void expect_contains(const char* msg, const char* part) {
    if (!strstr(msg, part)) fail_msg("message \"%s\" lacks \"%s\"", msg, part);
}

// Parses [CLS] A [SEP] B [SEP] [PAD]... ; returns L (segment length) or -1 if malformed.
static int64_t parse_row(const int64_t* ids, int64_t T, const int64_t** A, const int64_t** B) {
    if (ids[0] != DATA_CLS_ID) return -1;
    int64_t sep1 = -1;
    for (int64_t t = 1; t < T; t++)
        if (ids[t] == DATA_SEP_ID) {
            sep1 = t;
            break;
        }
    if (sep1 < 2) return -1;
    int64_t L = sep1 - 1;
    if (2 * L + 3 > T || ids[2 * L + 2] != DATA_SEP_ID) return -1;
    *A = ids + 1;
    *B = ids + L + 2;
    return L;
}

// The task's rule, implemented independently of data.c: d = L - |A ∩ B| (multiset).
static int64_t unmatched(const int64_t* A, const int64_t* B, int64_t L) {
    int64_t counts[256] = {0};  // vocab <= 256 in these tests
    for (int64_t i = 0; i < L; i++) counts[A[i]]++;
    int64_t matched = 0;
    for (int64_t i = 0; i < L; i++)
        if (counts[B[i]] > 0) {
            counts[B[i]]--;
            matched++;
        }
    return L - matched;
}

static int32_t rule_label(const int64_t* A, const int64_t* B, int64_t L, int64_t K) {
    int64_t d = unmatched(A, B, L);
    if (K == 2) return d == 0;
    return d == 0 ? 2 : d == L ? 0 : 1;
}

static char* make_temp_dir(void) {
    const char* base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    char* dir = malloc(strlen(base) + 40);
    assert_non_null(dir);
    sprintf(dir, "%s/test_data.XXXXXX", base);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static char* path_join(const char* dir, const char* name) {
    char* p = malloc(strlen(dir) + strlen(name) + 2);
    assert_non_null(p);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

// ---------------------------------------------------------------------------------------
// configuration
// ---------------------------------------------------------------------------------------

static void test_config_rejected(void** state) {
    (void)state;
    DataConfig c;
    Dataset ds;
    Status s;
#define EXPECT_INVALID(stmt, part)                                   \
    do {                                                             \
        c = base_cfg(2);                                             \
        stmt;                                                        \
        s = dataset_synthetic(&c, &ds);                              \
        assert_int_equal(s.code, STATUS_INVALID);                    \
        expect_contains(s.msg, part);                                \
        assert_null(ds.split[SPLIT_TRAIN].input_ids);                \
    } while (0)
    EXPECT_INVALID(c.task = "nope", "unknown task 'nope' (allowed: paraphrase)");
    EXPECT_INVALID(c.task = NULL, "unknown task '(null)'");
    EXPECT_INVALID(c.n_labels = 4, "n_labels must be 2..3 for task paraphrase (got 4)");
    EXPECT_INVALID(c.n_labels = 1, "n_labels must be 2..3");
    EXPECT_INVALID(c.n_train = 0, "n_train must be 1..");
    EXPECT_INVALID(c.n_eval = -1, "n_eval must be 0..");
    EXPECT_INVALID(c.seq_len = 4, "seq_len must be 5..");
    EXPECT_INVALID((c.n_labels = 3, c.seq_len = 8), "seq_len must be 9..");
    EXPECT_INVALID(c.vocab_size = 4, "vocab_size must be 5..");
    EXPECT_INVALID(c.max_segment = 15, "max_segment must be 1..14");
    EXPECT_INVALID((c.min_segment = 9, c.max_segment = 8), "min_segment must be 1..8");
    EXPECT_INVALID((c.n_labels = 3, c.min_segment = 2), "min_segment must be 3..");
    EXPECT_INVALID((c.n_labels = 3, c.vocab_size = 11), "vocab_size 11 too small for max_segment 8");
    EXPECT_INVALID((c.vocab_size = 17, c.max_segment = 14), "vocab_size must be >= 18");
#undef EXPECT_INVALID
    assert_string_equal(data_task_names_list(), "paraphrase");
}

// ---------------------------------------------------------------------------------------
// determinism
// ---------------------------------------------------------------------------------------

static void test_deterministic(void** state) {
    (void)state;
    for (int64_t K = 2; K <= 3; K++) {
        DataConfig c = base_cfg(K);
        Dataset a = make(&c), b = make(&c);
        for (int s = 0; s < SPLIT_COUNT; s++) assert_true(same_split(&a.split[s], &b.split[s], 32));
        // another seed gives other data
        DataConfig c2 = c;
        c2.seed = 1235;
        Dataset d = make(&c2);
        assert_false(same_split(&a.split[SPLIT_TRAIN], &d.split[SPLIT_TRAIN], 32));
        // thread count does not matter
        int saved = omp_get_max_threads();
        omp_set_num_threads(1);
        Dataset one = make(&c);
        omp_set_num_threads(3);
        Dataset three = make(&c);
        omp_set_num_threads(saved);
        for (int s = 0; s < SPLIT_COUNT; s++) {
            assert_true(same_split(&a.split[s], &one.split[s], 32));
            assert_true(same_split(&a.split[s], &three.split[s], 32));
        }
        // example i does not depend on how many are generated: a smaller dataset is a prefix
        DataConfig cs = c;
        cs.n_train = 333;
        cs.n_eval = 77;
        Dataset small = make(&cs);
        for (int s = 0; s < SPLIT_COUNT; s++) {
            SplitData pre = a.split[s];
            pre.n = small.split[s].n;
            assert_true(same_split(&pre, &small.split[s], 32));
        }
        dataset_free(&a);
        dataset_free(&b);
        dataset_free(&d);
        dataset_free(&one);
        dataset_free(&three);
        dataset_free(&small);
    }
}

static void test_batches(void** state) {
    (void)state;
    DataConfig c = base_cfg(2);
    c.n_train = 103;  // 103 = 12 * 8 + 7: a short last batch
    Dataset ds = make(&c);
    const int B = 8;
    assert_int_equal(dataset_n_batches(&ds, SPLIT_TRAIN, B), 13);
    assert_int_equal(dataset_n_batches(&ds, SPLIT_EVAL, B), 125);
    assert_int_equal(dataset_n_batches(&ds, SPLIT_TRAIN, 103), 1);
    assert_int_equal(dataset_n_batches(&ds, SPLIT_TRAIN, 200), 1);

    // sequential pass; keep batch k
    const size_t k = 5;
    Batch seq, alone;
    batch_alloc(&seq, B, 32);
    batch_alloc(&alone, B, 32);
    int64_t kept_ids[8 * 32];
    int32_t kept_labels[8];
    size_t rows = 0;
    for (size_t b = 0; b < dataset_n_batches(&ds, SPLIT_TRAIN, B); b++) {
        dataset_get_batch(&ds, SPLIT_TRAIN, b, B, &seq);
        assert_int_equal(seq.batch, b == 12 ? 7 : 8);
        assert_int_equal(seq.seq_len, 32);
        for (int i = 0; i < seq.batch; i++) {  // rows are the split's rows, in order
            assert_memory_equal(seq.input_ids + i * 32, ds.split[SPLIT_TRAIN].input_ids + (rows + i) * 32,
                                32 * sizeof(int64_t));
            assert_int_equal(seq.labels[i], ds.split[SPLIT_TRAIN].labels[rows + i]);
        }
        rows += (size_t)seq.batch;
        if (b == k) {
            memcpy(kept_ids, seq.input_ids, sizeof kept_ids);
            memcpy(kept_labels, seq.labels, sizeof kept_labels);
        }
    }
    assert_int_equal(rows, 103);
    // batch k alone, from a dataset just large enough to hold it
    DataConfig c2 = c;
    c2.n_train = (int64_t)((k + 1) * B);
    c2.n_eval = 0;
    Dataset only = make(&c2);
    dataset_get_batch(&only, SPLIT_TRAIN, k, B, &alone);
    assert_int_equal(alone.batch, B);
    assert_memory_equal(alone.input_ids, kept_ids, sizeof kept_ids);
    assert_memory_equal(alone.labels, kept_labels, sizeof kept_labels);
    assert_int_equal(only.split[SPLIT_EVAL].n, 0);
    assert_null(only.split[SPLIT_EVAL].input_ids);

    // epoch orders: permutations, repeatable, different per epoch; gather follows them
    size_t o1[103], o2[103], o3[103];
    dataset_epoch_order(103, 7, 0, o1);
    dataset_epoch_order(103, 7, 0, o2);
    dataset_epoch_order(103, 7, 1, o3);
    assert_memory_equal(o1, o2, sizeof o1);
    assert_memory_not_equal(o1, o3, sizeof o1);
    int seen[103] = {0};
    for (int i = 0; i < 103; i++) seen[o1[i]]++;
    for (int i = 0; i < 103; i++) assert_int_equal(seen[i], 1);
    dataset_gather(&ds, SPLIT_TRAIN, o1 + 96, 7, &seq);
    assert_int_equal(seq.batch, 7);
    for (int i = 0; i < 7; i++) {
        assert_memory_equal(seq.attention_mask + i * 32,
                            ds.split[SPLIT_TRAIN].attention_mask + o1[96 + i] * 32, 32 * sizeof(int64_t));
        assert_int_equal(seq.labels[i], ds.split[SPLIT_TRAIN].labels[o1[96 + i]]);
    }
    batch_free(&seq);
    batch_free(&alone);
    batch_free(&seq);  // safe twice
    dataset_free(&ds);
    dataset_free(&only);
    dataset_free(&only);  // safe twice
}

// ---------------------------------------------------------------------------------------
// splits, balance, padding
// ---------------------------------------------------------------------------------------

static int cmp_rows(const void* a, const void* b) {
    return memcmp(a, b, 32 * sizeof(int64_t));
}

// true when no row of eval (N_e, 32) equals a row of train (N_t, 32)
static bool disjoint_rows(const int64_t* train, size_t nt, const int64_t* eval, size_t ne) {
    int64_t* sorted = malloc(nt * 32 * sizeof(int64_t));
    assert_non_null(sorted);
    memcpy(sorted, train, nt * 32 * sizeof(int64_t));
    qsort(sorted, nt, 32 * sizeof(int64_t), cmp_rows);
    bool ok = true;
    for (size_t i = 0; i < ne && ok; i++)
        ok = bsearch(eval + i * 32, sorted, nt, 32 * sizeof(int64_t), cmp_rows) == NULL;
    free(sorted);
    return ok;
}

static void test_train_eval_disjoint(void** state) {
    (void)state;
    for (int64_t K = 2; K <= 3; K++) {
        DataConfig c = base_cfg(K);
        Dataset ds = make(&c);
        assert_true(disjoint_rows(ds.split[SPLIT_TRAIN].input_ids, ds.split[SPLIT_TRAIN].n,
                                  ds.split[SPLIT_EVAL].input_ids, ds.split[SPLIT_EVAL].n));
        dataset_free(&ds);
    }
    // A tiny task space (5 content tokens, segments of 1-2 tokens: 50 distinct "same" and
    // 105 "not" sequences) where eval draws often collide with the 100 train draws but are
    // not all exhausted: every collision is redrawn.
    DataConfig c = base_cfg(2);
    c.vocab_size = 8;
    c.seq_len = 32;
    c.min_segment = 1;
    c.max_segment = 2;
    c.n_train = 100;
    c.n_eval = 300;
    Dataset ds = make(&c);
    const SplitData* tr = &ds.split[SPLIT_TRAIN];
    const SplitData* ev = &ds.split[SPLIT_EVAL];
    assert_true(disjoint_rows(tr->input_ids, tr->n, ev->input_ids, ev->n));
    // The same eval split drawn against a 1-example train set (a prefix of the big one): an
    // eval row differs between the two exactly when d1's row lies in the big train set, i.e.
    // it was redrawn there (and some are). Labels are kept across redraws.
    DataConfig c1 = c;
    c1.n_train = 1;
    Dataset d1 = make(&c1);
    int redrawn = 0;
    for (size_t i = 0; i < ev->n; i++) {
        const int64_t* first = d1.split[SPLIT_EVAL].input_ids + i * 32;
        bool in_train = !disjoint_rows(tr->input_ids, tr->n, first, 1);
        bool differs = memcmp(first, ev->input_ids + i * 32, 32 * sizeof(int64_t)) != 0;
        assert_int_equal(in_train, differs);
        assert_int_equal(ev->labels[i], d1.split[SPLIT_EVAL].labels[i]);  // labels are kept
        redrawn += differs;
    }
    print_message("tiny task space: %d of 300 eval examples redrawn to avoid the train split\n",
                  redrawn);
    assert_true(redrawn > 0);
    dataset_free(&d1);
    dataset_free(&ds);
    // A space too small to hold any eval example outside train: a clear error.
    c.vocab_size = 5;
    c.max_segment = 1;
    c.n_train = 200;
    c.n_eval = 10;
    Status s = dataset_synthetic(&c, &ds);
    assert_int_equal(s.code, STATUS_INVALID);
    expect_contains(s.msg, "eval example 0 equals a train example in all 4096 attempts");
    expect_contains(s.msg, "raise vocab_size or max_segment, or lower n_train");
}

static void test_label_balance(void** state) {
    (void)state;
    // Labels are stratified by construction (each block of K consecutive examples holds
    // every label once), so the tolerance is exact: every class count is floor(N/K) or
    // ceil(N/K), and any batch of a multiple of K rows starting at a multiple of K is exactly
    // balanced. The order inside blocks must still be random: for K = 2 the share of blocks
    // in order (0, 1) is Binomial(1000, 1/2)/1000, sd 0.016; [0.4, 0.6] is > 6 sd wide.
    for (int64_t K = 2; K <= 3; K++) {
        DataConfig c = base_cfg(K);
        c.n_train = 2001;  // not a multiple of K
        Dataset ds = make(&c);
        for (int s = 0; s < SPLIT_COUNT; s++) {
            const SplitData* sd = &ds.split[s];
            size_t count[3] = {0};
            for (size_t i = 0; i < sd->n; i++) {
                assert_true(sd->labels[i] >= 0 && sd->labels[i] < K);
                count[sd->labels[i]]++;
            }
            for (int64_t k = 0; k < K; k++) {
                assert_true(count[k] >= sd->n / (size_t)K);
                assert_true(count[k] <= sd->n / (size_t)K + 1);
            }
            for (size_t b = 0; b + 6 <= sd->n; b += 6) {  // batches of 6 (a multiple of 2 and 3)
                size_t cb[3] = {0};
                for (size_t i = b; i < b + 6; i++) cb[sd->labels[i]]++;
                for (int64_t k = 0; k < K; k++) assert_int_equal(cb[k], 6 / K);
            }
        }
        if (K == 2) {
            const SplitData* sd = &ds.split[SPLIT_TRAIN];
            int in_order = 0;
            for (size_t b = 0; b < 1000; b++) in_order += sd->labels[2 * b] == 0;
            assert_true(in_order > 400 && in_order < 600);
        }
        dataset_free(&ds);
    }
}

static void check_rows(const Dataset* ds, int64_t max_positions, bool expect_padding) {
    const int64_t T = ds->seq_len;
    assert_true(T <= max_positions);
    for (int s = 0; s < SPLIT_COUNT; s++) {
        const SplitData* sd = &ds->split[s];
        int64_t len_seen[1024] = {0};
        size_t padded = 0;
        for (size_t i = 0; i < sd->n; i++) {
            const int64_t* ids = sd->input_ids + i * (size_t)T;
            const int64_t* m = sd->attention_mask + i * (size_t)T;
            const int64_t *A = NULL, *B = NULL;
            int64_t L = parse_row(ids, T, &A, &B);
            assert_true(L >= ds->min_segment && L <= ds->max_segment);
            int64_t len = 2 * L + 3;
            assert_true(len <= T);
            len_seen[len]++;
            padded += len < T;
            for (int64_t t = 0; t < T; t++) {
                assert_int_equal(m[t], t < len);  // mask: ones over the tokens, zeros after
                if (t >= len) assert_int_equal(ids[t], DATA_PAD_ID);
                else assert_true(ids[t] != DATA_PAD_ID);
                assert_true(ids[t] >= 0 && ids[t] < ds->vocab_size);
            }
            for (int64_t j = 0; j < L; j++) {  // segments hold content tokens only
                assert_true(A[j] >= DATA_FIRST_CONTENT_ID && B[j] >= DATA_FIRST_CONTENT_ID);
            }
        }
        // every segment length in range occurs (lengths vary), and padding is common
        if (sd->n >= 1000) {
            for (int64_t L = ds->min_segment; L <= ds->max_segment; L++)
                assert_true(len_seen[2 * L + 3] > 0);
        }
        if (expect_padding) assert_true(padded > sd->n / 2);
        else assert_int_equal(padded, 0);
    }
}

static void test_padding_and_mask(void** state) {
    (void)state;
    for (int64_t K = 2; K <= 3; K++) {
        // the tiny preset's shape, the small preset's shape, and explicit segment ranges
        DataConfig c = base_cfg(K);
        Dataset ds = make(&c);
        assert_int_equal(ds.max_segment, 8);       // min((32 - 3) / 2, 8)
        assert_int_equal(ds.min_segment, K == 2 ? 2 : 3);
        ModelConfig m = TINY;
        m.n_labels = K;
        Status s = dataset_check_model(&ds, &m);
        assert_true(status_is_ok(s));
        check_rows(&ds, m.max_positions, true);
        dataset_free(&ds);

        const ModelConfig* small = model_config_find("small");
        assert_non_null(small);
        c.seq_len = small->max_positions;
        c.vocab_size = small->vocab_size;
        ds = make(&c);
        assert_int_equal(ds.max_segment, 8);
        assert_int_equal(ds.min_segment, K == 2 ? 2 : 3);
        DataConfig wide = c;  // explicit range: up to the whole sequence
        wide.min_segment = 10;
        wide.max_segment = (small->max_positions - 3) / 2;
        wide.n_train = 500;
        wide.n_eval = 100;
        Dataset w = make(&wide);
        check_rows(&w, small->max_positions, true);
        assert_int_equal(w.max_segment, 62);
        dataset_free(&w);
        check_rows(&ds, small->max_positions, true);
        dataset_free(&ds);

        c = base_cfg(K);
        c.seq_len = 9;
        c.min_segment = 3;
        c.max_segment = 3;  // 2*3 + 3 = 9: no padding at all
        ds = make(&c);
        check_rows(&ds, 9, false);
        for (size_t i = 0; i < ds.split[SPLIT_TRAIN].n * 9; i++)
            assert_int_equal(ds.split[SPLIT_TRAIN].attention_mask[i], 1);
        dataset_free(&ds);
    }
    // a model that cannot take the dataset
    DataConfig c = base_cfg(2);
    Dataset ds = make(&c);
    ModelConfig m = TINY;
    m.max_positions = 16;
    Status s = dataset_check_model(&ds, &m);
    assert_int_equal(s.code, STATUS_INVALID);
    expect_contains(s.msg, "dataset seq_len 32 exceeds the model's max_positions 16");
    m = TINY;
    m.vocab_size = 32;
    s = dataset_check_model(&ds, &m);
    expect_contains(s.msg, "dataset vocab_size 64 exceeds the model's vocab_size 32");
    m = TINY;
    m.n_labels = 3;
    s = dataset_check_model(&ds, &m);
    expect_contains(s.msg, "dataset n_labels 2 differs from the model's n_labels 3");
    dataset_free(&ds);
}

// ---------------------------------------------------------------------------------------
// the task needs comparing the segments
// ---------------------------------------------------------------------------------------

// Softmax regression on per-segment token counts [count in A (C), count in B (C), 1]: a
// linear bag-of-words model. It can weigh each token of each segment (and so any
// whole-sequence count) but the label depends on whether the two count vectors are equal,
// which no linear threshold detects (K = 2). With K = 3 the softmax could in principle carve
// a slab around cA = cB for the middle-scored class; SGD from zero finds little of it here.
// Plain SGD, deterministic; returns eval accuracy.
static double bow_baseline(const Dataset* ds, double* train_acc) {
    const int64_t T = ds->seq_len, K = ds->n_labels, C = ds->vocab_size - DATA_FIRST_CONTENT_ID;
    const int64_t F = 2 * C + 1;
    double* W = calloc((size_t)(K * F), sizeof(double));  // (K, F)
    double* x = calloc((size_t)F, sizeof(double));        // (F)
    assert_non_null(W);
    assert_non_null(x);
    const double lr = 0.02;
    double acc[SPLIT_COUNT] = {0};
    for (int epoch = 0; epoch <= 30; epoch++) {
        for (int s = 0; s < SPLIT_COUNT; s++) {
            if (epoch < 30 && s == SPLIT_EVAL) continue;  // epoch 30: evaluate only
            const SplitData* sd = &ds->split[s];
            size_t correct = 0;
            for (size_t i = 0; i < sd->n; i++) {
                const int64_t *A = NULL, *B = NULL;
                int64_t L = parse_row(sd->input_ids + i * (size_t)T, T, &A, &B);
                memset(x, 0, (size_t)F * sizeof(double));
                for (int64_t j = 0; j < L; j++) {
                    x[A[j] - DATA_FIRST_CONTENT_ID] += 1.0;
                    x[C + B[j] - DATA_FIRST_CONTENT_ID] += 1.0;
                }
                x[2 * C] = 1.0;
                double z[3], zmax = -INFINITY, sum = 0;
                int best = 0;
                for (int64_t k = 0; k < K; k++) {
                    z[k] = 0;
                    for (int64_t f = 0; f < F; f++) z[k] += W[k * F + f] * x[f];
                    if (z[k] > zmax) {
                        zmax = z[k];
                        best = (int)k;
                    }
                }
                correct += best == sd->labels[i];
                if (epoch == 30) continue;
                for (int64_t k = 0; k < K; k++) sum += (z[k] = exp(z[k] - zmax));
                for (int64_t k = 0; k < K; k++) {
                    double g = z[k] / sum - (k == sd->labels[i]);
                    for (int64_t f = 0; f < F; f++) W[k * F + f] -= lr * g * x[f];
                }
            }
            acc[s] = (double)correct / (double)sd->n;
        }
    }
    free(W);
    free(x);
    *train_acc = acc[SPLIT_TRAIN];
    return acc[SPLIT_EVAL];
}

static void test_task_needs_comparison(void** state) {
    (void)state;
    for (int64_t K = 2; K <= 3; K++) {
        DataConfig c = base_cfg(K);
        c.n_train = 4000;
        c.n_eval = 2000;
        Dataset ds = make(&c);
        // 1. the rule (comparing the multisets of the two segments) is exact on every example
        size_t d_hist[4] = {0};  // negatives ("not" / "near") by d: 0, 1, 2, >= 3
        for (int s = 0; s < SPLIT_COUNT; s++) {
            const SplitData* sd = &ds.split[s];
            for (size_t i = 0; i < sd->n; i++) {
                const int64_t *A = NULL, *B = NULL;
                int64_t L = parse_row(sd->input_ids + i * 32, 32, &A, &B);
                assert_int_equal(rule_label(A, B, L, K), sd->labels[i]);
                int64_t d = unmatched(A, B, L);
                if (sd->labels[i] == K - 2) d_hist[d < 3 ? d : 3]++;
            }
        }
        // hard negatives (one or two tokens off) are present in both variants; the binary
        // variant also has easier ones, the 3-label "near" class has no others
        assert_int_equal(d_hist[0], 0);
        assert_true(d_hist[1] > 0 && d_hist[2] > 0);
        if (K == 2) assert_true(d_hist[3] > 0);
        else assert_int_equal(d_hist[3], 0);

        // 2. a linear bag-of-words model over per-segment counts stays near chance (1/K).
        // Measured over seeds 1-6 and 1234: eval 0.49-0.52 (K=2), 0.35-0.39 (K=3); the sd of a
        // chance accuracy over 2000 examples is 0.011. Bound: chance + 0.1, far below the
        // rule's 1.0 and below what a DistilBERT reaches (README "Data").
        double train_acc, eval_acc = bow_baseline(&ds, &train_acc);
        print_message("paraphrase/%d labels: linear bag-of-words eval_accuracy %.3f (train %.3f), "
                      "rule 1.000\n", (int)K, eval_acc, train_acc);
        assert_true(eval_acc < 1.0 / (double)K + 0.1);

        // 3. ...while even a crude comparison of the segments (is the sum of token ids equal?)
        // separates same from not-same on most examples (binary variant only).
        if (K == 2) {
            size_t correct = 0;
            const SplitData* sd = &ds.split[SPLIT_EVAL];
            for (size_t i = 0; i < sd->n; i++) {
                const int64_t *A = NULL, *B = NULL;
                int64_t L = parse_row(sd->input_ids + i * 32, 32, &A, &B), sa = 0, sb = 0;
                for (int64_t j = 0; j < L; j++) sa += A[j], sb += B[j];
                correct += (sa == sb) == sd->labels[i];
            }
            print_message("paraphrase/2 labels: 'sum of ids equal' rule eval_accuracy %.3f\n",
                          (double)correct / (double)sd->n);
            assert_true((double)correct / (double)sd->n > 0.9);
        }
        dataset_free(&ds);
    }
}

// ---------------------------------------------------------------------------------------
// safetensors
// ---------------------------------------------------------------------------------------

static void test_safetensors_round_trip(void** state) {
    (void)state;
    char* dir = make_temp_dir();
    char* ptrain = path_join(dir, "train.safetensors");
    char* peval = path_join(dir, "eval.safetensors");
    for (int64_t K = 2; K <= 3; K++) {
        DataConfig c = base_cfg(K);
        c.n_train = 257;
        c.n_eval = 64;
        Dataset ds = make(&c);
        assert_true(status_is_ok(dataset_save_safetensors(&ds, SPLIT_TRAIN, ptrain)));
        assert_true(status_is_ok(dataset_save_safetensors(&ds, SPLIT_EVAL, peval)));
        ModelConfig m = TINY;
        m.n_labels = K;
        Dataset back;
        Status s = dataset_from_safetensors(ptrain, peval, &m, &back);
        if (!status_is_ok(s)) fail_msg("%s", s.msg);
        assert_int_equal(back.seq_len, 32);
        assert_int_equal(back.n_labels, K);
        assert_string_equal(back.task, "safetensors");
        for (int sp = 0; sp < SPLIT_COUNT; sp++)
            assert_true(same_split(&ds.split[sp], &back.split[sp], 32));
        dataset_free(&back);
        // no eval file: eval split empty
        s = dataset_from_safetensors(ptrain, NULL, &m, &back);
        assert_true(status_is_ok(s));
        assert_int_equal(back.split[SPLIT_EVAL].n, 0);
        dataset_free(&back);
        // the file itself: I64 tensors and metadata for the Python side
        SafeTensors st;
        assert_true(status_is_ok(st_read(peval, &st)));
        assert_int_equal(st.n_tensors, 3);
        const StTensor* t = st_find(&st, "labels");
        assert_non_null(t);
        assert_int_equal(t->dtype, DTYPE_I64);
        assert_int_equal(t->shape[0], 64);
        assert_int_equal(st_find(&st, "input_ids")->dtype, DTYPE_I64);
        assert_string_equal(st_meta(&st, "format"), "trainbench-dataset/1");
        assert_string_equal(st_meta(&st, "task"), "paraphrase");
        assert_string_equal(st_meta(&st, "split"), "eval");
        assert_string_equal(st_meta(&st, "seed"), "1234");
        assert_string_equal(st_meta(&st, "n_labels"), K == 2 ? "2" : "3");
        assert_string_equal(st_meta(&st, "max_segment"), "8");
        st_free(&st);
        dataset_free(&ds);
    }

    // I32 ids and labels, U8 mask, and no mask at all (derived from ids != [PAD])
    const int64_t ids64[3 * 6] = {1, 5, 6, 2, 0, 0, 1, 7, 2, 0, 0, 0, 1, 3, 4, 5, 6, 2};
    int32_t ids32[18], lab32[3] = {0, 1, 1};
    uint8_t mask8[18];
    for (int i = 0; i < 18; i++) {
        ids32[i] = (int32_t)ids64[i];
        mask8[i] = ids64[i] != 0;
    }
    const int64_t shape2[2] = {3, 6}, shape1[1] = {3};
    for (int with_mask = 0; with_mask <= 1; with_mask++) {
        StWriter* w = st_writer_new();
        st_writer_add(w, "labels", DTYPE_I32, 1, shape1, lab32);
        st_writer_add(w, "input_ids", DTYPE_I32, 2, shape2, ids32);
        if (with_mask) st_writer_add(w, "attention_mask", DTYPE_U8, 2, shape2, mask8);
        assert_true(status_is_ok(st_writer_save(w, ptrain)));
        st_writer_free(w);
        Dataset back;
        Status s = dataset_from_safetensors(ptrain, NULL, &TINY, &back);
        if (!status_is_ok(s)) fail_msg("%s", s.msg);
        assert_int_equal(back.seq_len, 6);
        assert_int_equal(back.split[SPLIT_TRAIN].n, 3);
        assert_memory_equal(back.split[SPLIT_TRAIN].input_ids, ids64, sizeof ids64);
        for (int i = 0; i < 18; i++)
            assert_int_equal(back.split[SPLIT_TRAIN].attention_mask[i], mask8[i]);
        assert_memory_equal(back.split[SPLIT_TRAIN].labels, lab32, sizeof lab32);
        dataset_free(&back);
    }
    unlink(ptrain);
    unlink(peval);
    assert_int_equal(rmdir(dir), 0);
    free(ptrain);
    free(peval);
    free(dir);
}

// One malformed-file case: tensors to write, and the parts its message must contain.
typedef struct {
    const char* name;
    DType dt;
    int ndim;
    int64_t shape[2];
    const void* data;
} TensorSpec;

// Writes the tensors ts[0..n) to the safetensors file `path`.
static void write_tensors(const char* path, const TensorSpec* ts, int n) {
    StWriter* w = st_writer_new();
    for (int i = 0; i < n; i++) st_writer_add(w, ts[i].name, ts[i].dt, ts[i].ndim, ts[i].shape, ts[i].data);
    assert_true(status_is_ok(st_writer_save(w, path)));
    st_writer_free(w);
}

// The tensors ts[0..n), written to DIR/ok.safetensors, load as model m's training split into ds
// (the test fails with the loader's message when they do not); the file is removed.
static void expect_load_ok(const char* dir, const TensorSpec* ts, int n, const ModelConfig* m, Dataset* ds) {
    char* path = path_join(dir, "ok.safetensors");
    write_tensors(path, ts, n);
    Status s = dataset_from_safetensors(path, NULL, m, ds);
    if (!status_is_ok(s)) fail_msg("%s", s.msg);
    unlink(path);
    free(path);
}

static void expect_load_fails(const char* dir, const TensorSpec* ts, int n, const ModelConfig* m,
                              StatusCode code, const char* part1, const char* part2) {
    char* path = path_join(dir, "bad.safetensors");
    write_tensors(path, ts, n);
    Dataset ds;
    Status s = dataset_from_safetensors(path, NULL, m, &ds);
    if (s.code != code) fail_msg("expected %s, got %s: %s", status_code_name(code), status_code_name(s.code), s.msg);
    if (code == STATUS_INVALID) expect_contains(s.msg, path);  // the file is named
    expect_contains(s.msg, part1);
    if (part2) expect_contains(s.msg, part2);
    assert_null(ds.split[SPLIT_TRAIN].input_ids);
    unlink(path);
    free(path);
}

static void test_safetensors_rejected(void** state) {
    (void)state;
    char* dir = make_temp_dir();
    // a valid base: N = 3, T = 6
    int64_t ids[18] = {1, 5, 6, 2, 0, 0, 1, 7, 2, 0, 0, 0, 1, 3, 4, 5, 6, 2};
    int64_t mask[18];
    for (int i = 0; i < 18; i++) mask[i] = ids[i] != 0;
    int64_t lab[3] = {0, 1, 1};
    float f[18] = {0};
    const TensorSpec ID = {"input_ids", DTYPE_I64, 2, {3, 6}, ids};
    const TensorSpec MASK = {"attention_mask", DTYPE_I64, 2, {3, 6}, mask};
    const TensorSpec LAB = {"labels", DTYPE_I64, 1, {3, 0}, lab};
    const ModelConfig* m = &TINY;
#define T_(...) (TensorSpec[]){__VA_ARGS__}, (int)(sizeof((TensorSpec[]){__VA_ARGS__}) / sizeof(TensorSpec))
    // names
    expect_load_fails(dir, T_(MASK, LAB), m, STATUS_INVALID, "no tensor 'input_ids'", NULL);
    expect_load_fails(dir, T_(ID, MASK), m, STATUS_INVALID, "no tensor 'labels'", "(expected labels (N)");
    expect_load_fails(dir, T_(ID, MASK, {"label", DTYPE_I64, 1, {3, 0}, lab}), m, STATUS_INVALID,
                      "found 'label': rename it to 'labels'", NULL);
    expect_load_fails(dir, T_(ID, LAB, {"label", DTYPE_I64, 1, {3, 0}, lab}), m, STATUS_INVALID,
                      "unexpected tensor 'label' next to 'labels'", NULL);
    expect_load_fails(dir, T_(ID, LAB, {"token_type_ids", DTYPE_I64, 2, {3, 6}, mask}), m,
                      STATUS_INVALID, "'token_type_ids': DistilBERT takes no token type ids", NULL);
    expect_load_fails(dir, T_(ID, LAB, {"attention_masks", DTYPE_I64, 2, {3, 6}, mask}), m,
                      STATUS_INVALID, "unexpected tensor 'attention_masks' (allowed: input_ids, "
                      "attention_mask, labels)", NULL);
    // dtypes
    expect_load_fails(dir, T_({"input_ids", DTYPE_F32, 2, {3, 6}, f}, LAB), m, STATUS_INVALID,
                      "tensor 'input_ids': dtype F32 not allowed (allowed: I64, I32)", NULL);
    expect_load_fails(dir, T_(ID, {"labels", DTYPE_F32, 1, {3, 0}, f}), m, STATUS_INVALID,
                      "tensor 'labels': dtype F32 not allowed", NULL);
    expect_load_fails(dir, T_(ID, LAB, {"attention_mask", DTYPE_F32, 2, {3, 6}, f}), m,
                      STATUS_INVALID, "tensor 'attention_mask': dtype F32 not allowed (allowed: "
                      "I64, I32, U8)", NULL);
    // shapes
    expect_load_fails(dir, T_({"input_ids", DTYPE_I64, 1, {18, 0}, ids}, LAB), m, STATUS_INVALID,
                      "tensor 'input_ids': shape [18] must be 2-D (N, T)", NULL);
    expect_load_fails(dir, T_(ID, {"labels", DTYPE_I64, 2, {3, 1}, lab}), m, STATUS_INVALID,
                      "tensor 'labels': shape [3, 1] must be 1-D (N)", NULL);
    expect_load_fails(dir, T_(ID, {"labels", DTYPE_I64, 1, {2, 0}, lab}), m, STATUS_INVALID,
                      "tensor 'labels': 2 labels but input_ids has 3 rows", NULL);
    expect_load_fails(dir, T_(ID, LAB, {"attention_mask", DTYPE_I64, 2, {3, 5}, mask}), m,
                      STATUS_INVALID, "tensor 'attention_mask': shape [3, 5] must equal "
                      "input_ids' shape [3, 6]", NULL);
    expect_load_fails(dir, T_({"input_ids", DTYPE_I64, 2, {0, 6}, ids}, {"labels", DTYPE_I64, 1, {0, 0}, lab}),
                      m, STATUS_INVALID, "tensor 'input_ids': no examples (N = 0)", NULL);
    expect_load_fails(dir, T_({"input_ids", DTYPE_I64, 2, {3, 0}, ids}, LAB), m, STATUS_INVALID,
                      "tensor 'input_ids': sequence length T = 0", NULL);
    ModelConfig short_model = TINY;
    short_model.max_positions = 5;
    expect_load_fails(dir, T_(ID, LAB), &short_model, STATUS_INVALID,
                      "tensor 'input_ids': sequence length T = 6 exceeds the model's "
                      "max_positions 5", NULL);
    // values
    ids[7] = 64;
    expect_load_fails(dir, T_(ID, LAB), m, STATUS_INVALID,
                      "tensor 'input_ids': row 1, position 1: token id 64 outside [0, "
                      "vocab_size 64)", NULL);
    ids[7] = -3;
    expect_load_fails(dir, T_(ID, LAB), m, STATUS_INVALID, "row 1, position 1: token id -3", NULL);
    ids[7] = 7;
    ids[17] = 100;  // in the padding-free row, last position
    expect_load_fails(dir, T_(ID, LAB), m, STATUS_INVALID, "row 2, position 5: token id 100", NULL);
    ids[17] = 2;
    lab[2] = 2;
    expect_load_fails(dir, T_(ID, LAB), m, STATUS_INVALID,
                      "tensor 'labels': row 2: label 2 outside [0, n_labels 2)", NULL);
    lab[2] = -1;
    expect_load_fails(dir, T_(ID, LAB), m, STATUS_INVALID, "row 2: label -1 outside", NULL);
    lab[2] = 1;
    mask[4] = 2;
    expect_load_fails(dir, T_(ID, MASK, LAB), m, STATUS_INVALID,
                      "tensor 'attention_mask': row 0, position 4: value 2 (must be 0 or 1)", NULL);
    mask[4] = 0;
    // a row whose first token is masked (left padding, or no real token at all) loads as given:
    // the model computes every position as transformers does under that mask, position 0 (which
    // the classifier reads) included (reference/validate_model.py on left-padded rows, holes and an
    // all-masked row: fp32, bf16 and fp16, every backend, PASS); without a mask, ids != [PAD]
    mask[6] = 0;
    ids[12] = 0;
    {
        Dataset ds;
        expect_load_ok(dir, T_(ID, MASK, LAB), m, &ds);
        assert_int_equal(ds.split[SPLIT_TRAIN].attention_mask[6], 0);   // as the file says
        assert_int_equal(ds.split[SPLIT_TRAIN].attention_mask[12], 1);  // the file's mask, not ids != 0
        dataset_free(&ds);
        expect_load_ok(dir, T_(ID, LAB), m, &ds);  // no mask: row 2's first token, [PAD], is masked
        assert_int_equal(ds.split[SPLIT_TRAIN].attention_mask[12], 0);
        dataset_free(&ds);
    }
    mask[6] = 1;
    ids[12] = 1;
    // one label: a one-class classification takes label 0 only; a regression any int32 target
    ModelConfig one = TINY;
    one.n_labels = 1;
    expect_load_fails(dir, T_(ID, LAB), &one, STATUS_INVALID, "tensor 'labels': row 1: label 1 outside [0, n_labels 1)",
                      NULL);
    ModelConfig reg = one;
    reg.regression = true;
    lab[0] = (int64_t)INT32_MAX + 1;
    expect_load_fails(dir, T_(ID, LAB), &reg, STATUS_INVALID,
                      "tensor 'labels': row 0: regression target 2147483648 outside the int32 range", NULL);
    lab[0] = -7;  // a negative target is a regression target like any other
    {
        Dataset ds;
        expect_load_ok(dir, T_(ID, LAB), &reg, &ds);
        assert_int_equal(ds.split[SPLIT_TRAIN].labels[0], -7);
        assert_int_equal(ds.n_labels, 1);
        dataset_free(&ds);
    }
    lab[0] = 0;
#undef T_
    // the base itself loads (so each case above failed for its own reason only)
    {
        char* path = path_join(dir, "ok.safetensors");
        const TensorSpec base[] = {ID, MASK, LAB};
        write_tensors(path, base, 3);
        Dataset ds;
        Status s = dataset_from_safetensors(path, NULL, m, &ds);
        if (!status_is_ok(s)) fail_msg("%s", s.msg);
        dataset_free(&ds);

        // eval file with another T than train
        char* pe = path_join(dir, "eval.safetensors");
        StWriter* w = st_writer_new();
        const int64_t shape_e[2] = {3, 5}, shape_l[1] = {3};
        st_writer_add(w, "input_ids", DTYPE_I64, 2, shape_e, ids);
        st_writer_add(w, "labels", DTYPE_I64, 1, shape_l, lab);
        assert_true(status_is_ok(st_writer_save(w, pe)));
        st_writer_free(w);
        s = dataset_from_safetensors(path, pe, m, &ds);
        assert_int_equal(s.code, STATUS_INVALID);
        expect_contains(s.msg, pe);
        expect_contains(s.msg, "T = 5 differs from the train file's T = 6");
        assert_null(ds.split[SPLIT_TRAIN].input_ids);  // train freed again

        // missing file: STATUS_IO; not a safetensors file: STATUS_INVALID from the reader
        char* missing = path_join(dir, "missing.safetensors");
        s = dataset_from_safetensors(missing, NULL, m, &ds);
        assert_int_equal(s.code, STATUS_IO);
        expect_contains(s.msg, missing);
        FILE* fp = fopen(pe, "wb");
        assert_non_null(fp);
        fputs("input_ids,labels\n1,2\n", fp);
        fclose(fp);
        s = dataset_from_safetensors(path, pe, m, &ds);
        assert_int_equal(s.code, STATUS_INVALID);
        expect_contains(s.msg, pe);
        unlink(pe);
        unlink(path);
        free(missing);
        free(pe);
        free(path);
    }
    assert_int_equal(rmdir(dir), 0);
    free(dir);
}

// ---------------------------------------------------------------------------------------
// metrics (expected values by hand from sklearn's definitions; see data.h)
// ---------------------------------------------------------------------------------------

#define EPS 1e-15

static void test_metrics_binary(void** state) {
    (void)state;
    // labels 1 0 1 1 0 0, preds 1 0 0 1 1 0: TP 2 (i=0,3), FP 1 (i=4), FN 1 (i=2)
    // F1 = 2*2 / (2*2 + 1 + 1) = 2/3; accuracy 4/6
    const int32_t y[6] = {1, 0, 1, 1, 0, 0}, p[6] = {1, 0, 0, 1, 1, 0};
    EvalMetrics m = metrics_compute(y, p, 6, 2);
    assert_int_equal(m.n, 6);
    assert_true(fabs(m.accuracy - 4.0 / 6.0) < EPS);
    assert_true(fabs(m.f1 - 2.0 / 3.0) < EPS);
    int64_t cm[4] = {0};
    metrics_confusion_add(cm, 2, y, p, 6);
    const int64_t cm_expect[4] = {2, 1, 1, 2};  // [[TN, FP], [FN, TP]]
    assert_memory_equal(cm, cm_expect, sizeof cm);

    // all predictions one class. labels 0 1 0 1:
    //   all 0 -> TP 0: F1 0; accuracy 1/2.   all 1 -> TP 2, FP 2, FN 0: F1 4/6; accuracy 1/2
    const int32_t y2[4] = {0, 1, 0, 1}, zeros[4] = {0}, ones[4] = {1, 1, 1, 1};
    m = metrics_compute(y2, zeros, 4, 2);
    assert_true(m.accuracy == 0.5 && m.f1 == 0.0);
    m = metrics_compute(y2, ones, 4, 2);
    assert_true(m.accuracy == 0.5 && fabs(m.f1 - 2.0 / 3.0) < EPS);
    // no positive anywhere: TP + FP + FN = 0 -> zero_division ("warn") -> 0.0; accuracy 1
    m = metrics_compute(zeros, zeros, 4, 2);
    assert_true(m.accuracy == 1.0 && m.f1 == 0.0);
    // only positives, all right: F1 1
    m = metrics_compute(ones, ones, 4, 2);
    assert_true(m.accuracy == 1.0 && m.f1 == 1.0);
    // nothing evaluated: NaN
    m = metrics_compute(NULL, NULL, 0, 2);
    assert_int_equal(m.n, 0);
    assert_true(isnan(m.accuracy) && isnan(m.f1));
}

static void test_metrics_multiclass(void** state) {
    (void)state;
    // K = 4. labels 0 0 1 1 1 0, preds 0 1 1 2 1 0.
    //   class 0: TP 2 (i=0,5), FP 0, FN 1 (i=1)        F1 = 4/5
    //   class 1: TP 2 (i=2,4), FP 1 (i=1), FN 1 (i=3)  F1 = 4/6
    //   class 2: TP 0, FP 1 (i=3), FN 0                F1 = 0 (predicted only: averaged in)
    //   class 3: in neither labels nor predictions: NOT averaged (sklearn unique_labels)
    //   macro F1 = (4/5 + 2/3 + 0) / 3 = 22/45 (not 22/60, which averaging class 3 would give)
    //   accuracy = 4/6
    const int32_t y[6] = {0, 0, 1, 1, 1, 0}, p[6] = {0, 1, 1, 2, 1, 0};
    EvalMetrics m = metrics_compute(y, p, 6, 4);
    assert_true(fabs(m.accuracy - 4.0 / 6.0) < EPS);
    assert_true(fabs(m.f1 - 22.0 / 45.0) < EPS);
    int64_t cm[16] = {0};
    metrics_confusion_add(cm, 4, y, p, 6);
    const int64_t cm_expect[16] = {2, 1, 0, 0,  0, 2, 1, 0,  0, 0, 0, 0,  0, 0, 0, 0};
    assert_memory_equal(cm, cm_expect, sizeof cm);
    // accumulating in two parts gives the same matrix and metrics
    int64_t cm2[16] = {0};
    metrics_confusion_add(cm2, 4, y, p, 2);
    metrics_confusion_add(cm2, 4, y + 2, p + 2, 4);
    assert_memory_equal(cm, cm2, sizeof cm);
    EvalMetrics m2 = metrics_from_confusion(cm2, 4);
    assert_true(m2.accuracy == m.accuracy && m2.f1 == m.f1 && m2.n == 6);

    // K = 3, all predictions class 0. labels 0 1 2 0:
    //   class 0: TP 2, FP 2, FN 0: F1 4/6; classes 1, 2: TP 0: F1 0 (both in the labels)
    //   macro = (2/3) / 3 = 2/9; accuracy 2/4
    const int32_t y3[4] = {0, 1, 2, 0}, p3[4] = {0, 0, 0, 0};
    m = metrics_compute(y3, p3, 4, 3);
    assert_true(m.accuracy == 0.5);
    assert_true(fabs(m.f1 - 2.0 / 9.0) < EPS);
    // K = 3, labels all class 2 and predictions all right: only class 2 present -> F1 1
    const int32_t y4[3] = {2, 2, 2};
    m = metrics_compute(y4, y4, 3, 3);
    assert_true(m.accuracy == 1.0 && m.f1 == 1.0);
}

static void test_metrics_argmax(void** state) {
    (void)state;
    // as torch.argmax / np.argmax: ties -> first index, NaN -> the first NaN
    const float inf = INFINITY, nan = NAN;
    const float logits[] = {
        0.5f, 2.0f, 2.0f,    // tie -> 1
        3.0f, 3.0f, 3.0f,    // all equal -> 0
        1.0f, nan, 5.0f,     // NaN -> 1
        nan, nan, 1.0f,      // first NaN -> 0
        -inf, -inf, -1.0f,   // -> 2
        inf, 1.0f, inf,      // -> 0
        -0.0f, 0.0f, -1.0f,  // -0 == 0: tie -> 0
    };
    const int32_t expect[] = {1, 0, 1, 0, 2, 0, 0};
    int32_t pred[7] = {0};
    metrics_argmax(logits, 7, 3, pred);
    assert_memory_equal(pred, expect, sizeof expect);
    // K = 1: always 0
    const float one[2] = {nan, -1.0f};
    metrics_argmax(one, 2, 1, pred);
    assert_int_equal(pred[0], 0);
    assert_int_equal(pred[1], 0);
}

// --data-order shuffled, as reference/data_order.py computes it from the documented algorithm
// (an independent Python implementation: a PyTorch script uses it to feed the same batches).
static void test_epoch_order_matches_python(void** state) {
    (void)state;
    static const struct { size_t n; uint64_t seed, epoch; size_t want[10]; } V[] = {
        {10, 42, 0, {4, 0, 9, 7, 2, 1, 5, 3, 6, 8}},
        {10, 42, 1, {2, 6, 9, 0, 3, 8, 5, 7, 1, 4}},
        {7, 0, 3, {3, 5, 6, 2, 1, 0, 4}},
    };
    for (size_t k = 0; k < ARRAY_LEN(V); k++) {
        size_t order[10];
        dataset_epoch_order(V[k].n, V[k].seed, V[k].epoch, order);
        for (size_t i = 0; i < V[k].n; i++) assert_int_equal(order[i], V[k].want[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_rejected),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_train_eval_disjoint),
        cmocka_unit_test(test_label_balance),
        cmocka_unit_test(test_padding_and_mask),
        cmocka_unit_test(test_task_needs_comparison),
        cmocka_unit_test(test_safetensors_round_trip),
        cmocka_unit_test(test_safetensors_rejected),
        cmocka_unit_test(test_metrics_binary),
        cmocka_unit_test(test_metrics_multiclass),
        cmocka_unit_test(test_metrics_argmax),
        cmocka_unit_test(test_epoch_order_matches_python),
    };
    return cmocka_run_group_tests_name("data", tests, NULL, NULL);
}

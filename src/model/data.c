// data.c — implementation of data.h: the synthetic "paraphrase" task, safetensors import and
// export of tokenized datasets with validation, batches, and eval metrics.
// Not here: tokenization, the model, the training loop.
#include "model/data.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/safetensors.h"

const char* split_name(Split s) {
    static const char* const names[SPLIT_COUNT] = {"train", "eval"};
    CHECK(s >= 0 && s < SPLIT_COUNT, "split %d", (int)s);
    return names[s];
}

// ---------------------------------------------------------------------------------------
// RNG stream layout. Every draw of the data module comes from rng_init(seed, stream) with
//   stream = tag << 56 | kind << 48 | attempt << 36 | index       (index < 2^36)
// tag = split + 1 for examples and label blocks, 0 for epoch orders; kind as below;
// attempt = how many times an eval example was redrawn because it equalled a train example.
// ---------------------------------------------------------------------------------------
enum { STREAM_EXAMPLE = 0, STREAM_LABEL_BLOCK = 1, STREAM_EPOCH_ORDER = 2 };
#define DATA_MAX_ATTEMPTS 4096  // 12 bits

static uint64_t data_stream(uint64_t tag, uint64_t kind, uint64_t attempt, uint64_t index) {
    CHECK(index < ((uint64_t)1 << 36) && attempt < DATA_MAX_ATTEMPTS && kind < 256 && tag < 256);
    return tag << 56 | kind << 48 | attempt << 36 | index;
}

// ---------------------------------------------------------------------------------------
// Task registry
// ---------------------------------------------------------------------------------------

// Resolved generation parameters shared by all examples of a dataset.
typedef struct {
    int64_t T, V, K, min_seg, max_seg;
} GenParams;

// Writes one example row (T ids and T mask values) of the given label, drawing from r.
// scratch holds 2 * max_seg int64 values.
typedef void (*MakeExampleFn)(const GenParams* g, Rng* r, int label, int64_t* ids, int64_t* mask,
                              int64_t* scratch);

typedef struct {
    const char* name;
    const char* description;
    int64_t min_labels, max_labels;
    MakeExampleFn make;
} DataTask;

static void shuffle_i64(Rng* r, int64_t* x, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(r, (uint32_t)(i + 1));
        int64_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

static bool contains_i64(const int64_t* x, int64_t n, int64_t v) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] == v) return true;
    return false;
}

// "paraphrase": see data.h for the definition.
static void paraphrase_make(const GenParams* g, Rng* r, int label, int64_t* ids, int64_t* mask,
                            int64_t* scratch) {
    const uint32_t C = (uint32_t)(g->V - DATA_FIRST_CONTENT_ID);  // content tokens
    const int64_t L = g->min_seg + (int64_t)rng_below(r, (uint32_t)(g->max_seg - g->min_seg + 1));
    int64_t* A = scratch;               // (L)
    int64_t* B = scratch + g->max_seg;  // (L)
    for (int64_t i = 0; i < L; i++) A[i] = DATA_FIRST_CONTENT_ID + (int64_t)rng_below(r, C);

    // k positions of B (a random permutation of A) get tokens absent from A, so d = k:
    // "same" (label K-1): k = 0; "not" (label 0 of 2): k uniform in 1..L;
    // "near" (label 1 of 3): k uniform in 1..2; "disjoint" (label 0 of 3): k = L
    int64_t k;
    if (label == g->K - 1) k = 0;
    else if (g->K == 2) k = 1 + (int64_t)rng_below(r, (uint32_t)L);
    else if (label == 1) k = 1 + (int64_t)rng_below(r, 2);
    else k = L;
    memcpy(B, A, (size_t)L * sizeof(int64_t));
    shuffle_i64(r, B, L);
    for (int64_t s = 0; s < k; s++) {  // the first k slots of a random permutation are k
        int64_t y;                     // random positions
        do y = DATA_FIRST_CONTENT_ID + (int64_t)rng_below(r, C);
        while (contains_i64(A, L, y));
        B[s] = y;
    }

    const int64_t len = 2 * L + 3;
    CHECK(len <= g->T);
    ids[0] = DATA_CLS_ID;
    memcpy(ids + 1, A, (size_t)L * sizeof(int64_t));
    ids[L + 1] = DATA_SEP_ID;
    memcpy(ids + L + 2, B, (size_t)L * sizeof(int64_t));
    ids[2 * L + 2] = DATA_SEP_ID;
    for (int64_t t = len; t < g->T; t++) ids[t] = DATA_PAD_ID;
    for (int64_t t = 0; t < g->T; t++) mask[t] = t < len;
}

// To add a synthetic task: write `static void <name>_make(...)` (a MakeExampleFn drawing only
// from the Rng it is given), add one row here with the label counts it supports, describe it
// in data.h, and add its "true rule" check to tests/test_data.c.
static const DataTask DATA_TASKS[] = {
    {"paraphrase", "is segment B a permutation of segment A (2 labels; 3: same/near/disjoint)",
     2, 3, paraphrase_make},
};

static const DataTask* data_task_find(const char* name) {
    for (size_t i = 0; i < ARRAY_LEN(DATA_TASKS); i++)
        if (name && strcmp(DATA_TASKS[i].name, name) == 0) return &DATA_TASKS[i];
    return NULL;
}

// Kept in step with DATA_TASKS: dataset_synthetic CHECKs that every task is listed.
#define DATA_TASK_NAMES "paraphrase"

const char* data_task_names_list(void) { return DATA_TASK_NAMES; }

// ---------------------------------------------------------------------------------------
// Dataset memory
// ---------------------------------------------------------------------------------------

static void split_alloc(SplitData* s, size_t n, int64_t T) {
    size_t cells = 0, bytes = 0;
    CHECK(size_mul_ok(n, (size_t)T, &cells) && size_mul_ok(cells, sizeof(int64_t), &bytes));
    s->n = n;
    s->input_ids = xaligned_alloc(bytes);
    s->attention_mask = xaligned_alloc(bytes);
    s->labels = xaligned_alloc(n * sizeof(int32_t));
}

void dataset_free(Dataset* ds) {
    if (!ds) return;
    for (int s = 0; s < SPLIT_COUNT; s++) {
        free(ds->split[s].input_ids);
        free(ds->split[s].attention_mask);
        free(ds->split[s].labels);
    }
    memset(ds, 0, sizeof *ds);
}

// ---------------------------------------------------------------------------------------
// Synthetic generation
// ---------------------------------------------------------------------------------------

static Status resolve_config(const DataConfig* cfg, const DataTask** task_out, GenParams* g) {
    const DataTask* task = data_task_find(cfg->task);
    if (!task)
        return status_make(STATUS_INVALID, "unknown task '%s' (allowed: %s)",
                           cfg->task ? cfg->task : "(null)", data_task_names_list());
    if (cfg->n_labels < task->min_labels || cfg->n_labels > task->max_labels)
        return status_make(STATUS_INVALID, "n_labels must be %" PRId64 "..%" PRId64
                           " for task %s (got %" PRId64 ")", task->min_labels, task->max_labels,
                           task->name, cfg->n_labels);
    if (cfg->n_train < 1 || cfg->n_train > DATA_MAX_EXAMPLES)
        return status_make(STATUS_INVALID, "n_train must be 1..%" PRId64 " (got %" PRId64 ")",
                           DATA_MAX_EXAMPLES, cfg->n_train);
    if (cfg->n_eval < 0 || cfg->n_eval > DATA_MAX_EXAMPLES)
        return status_make(STATUS_INVALID, "n_eval must be 0..%" PRId64 " (got %" PRId64 ")",
                           DATA_MAX_EXAMPLES, cfg->n_eval);
    const int64_t K = cfg->n_labels;
    const int64_t floor_seg = K == 3 ? 3 : 1;  // near (d <= 2) must differ from disjoint (d = L)
    const int64_t min_T = 2 * floor_seg + 3;
    if (cfg->seq_len < min_T || cfg->seq_len > MODEL_MAX_POSITIONS)
        return status_make(STATUS_INVALID, "seq_len must be %" PRId64 "..%" PRId64 " for task %s "
                           "with %" PRId64 " labels (got %" PRId64 ")", min_T,
                           (int64_t)MODEL_MAX_POSITIONS, task->name, K, cfg->seq_len);
    if (cfg->vocab_size < DATA_FIRST_CONTENT_ID + 2 || cfg->vocab_size > MODEL_MAX_VOCAB)
        return status_make(STATUS_INVALID, "vocab_size must be %d..%" PRId64 " (ids 0-2 are "
                           "[PAD] [CLS] [SEP]; at least 2 content tokens; got %" PRId64 ")",
                           DATA_FIRST_CONTENT_ID + 2, (int64_t)MODEL_MAX_VOCAB, cfg->vocab_size);
    const int64_t T = cfg->seq_len, fit = (T - 3) / 2;
    int64_t max_seg = cfg->max_segment;
    if (max_seg == 0) max_seg = fit < 8 ? fit : 8;
    if (max_seg < floor_seg || max_seg > fit)
        return status_make(STATUS_INVALID, "max_segment must be %" PRId64 "..%" PRId64 " (two "
                           "segments plus [CLS] and two [SEP] fit seq_len %" PRId64 "; got %"
                           PRId64 ")", floor_seg, fit, T, cfg->max_segment);
    int64_t min_seg = cfg->min_segment;
    if (min_seg == 0) {
        min_seg = 2;
        if (min_seg < floor_seg) min_seg = floor_seg;
        if (min_seg > max_seg) min_seg = max_seg;
    }
    if (min_seg < floor_seg || min_seg > max_seg)
        return status_make(STATUS_INVALID, "min_segment must be %" PRId64 "..%" PRId64
                           " (max_segment) for %" PRId64 " labels (got %" PRId64 ")", floor_seg,
                           max_seg, K, cfg->min_segment);
    if (cfg->vocab_size - DATA_FIRST_CONTENT_ID < max_seg + 1)
        return status_make(STATUS_INVALID, "vocab_size %" PRId64 " too small for max_segment %"
                           PRId64 ": replacement tokens are drawn from content tokens absent "
                           "from segment A, so vocab_size must be >= %" PRId64, cfg->vocab_size,
                           max_seg, max_seg + 1 + DATA_FIRST_CONTENT_ID);
    size_t cells = 0;
    size_t n_max = (size_t)(cfg->n_train > cfg->n_eval ? cfg->n_train : cfg->n_eval);
    if (!size_mul_ok(n_max, (size_t)T, &cells) || !size_mul_ok(cells, sizeof(int64_t), &cells))
        return status_make(STATUS_INVALID, "n_train/n_eval x seq_len overflows memory sizes");
    *task_out = task;
    *g = (GenParams){T, cfg->vocab_size, K, min_seg, max_seg};
    return status_ok();
}

// Label of example i: block i / K holds a random permutation of 0..K-1.
static int32_t example_label(uint64_t seed, Split split, size_t i, int64_t K) {
    Rng r;
    rng_init(&r, seed, data_stream((uint64_t)split + 1, STREAM_LABEL_BLOCK, 0, i / (size_t)K));
    int32_t perm[64];
    CHECK(K >= 2 && K <= 64, "K %" PRId64, K);  // task tables keep max_labels <= 64
    for (int64_t c = 0; c < K; c++) perm[c] = (int32_t)c;
    for (int64_t c = K - 1; c > 0; c--) {
        int64_t j = (int64_t)rng_below(&r, (uint32_t)(c + 1));
        int32_t t = perm[c];
        perm[c] = perm[j];
        perm[j] = t;
    }
    return perm[i % (size_t)K];
}

static void make_example(const DataTask* task, const GenParams* g, uint64_t seed, Split split,
                         size_t i, uint64_t attempt, int32_t label, int64_t* ids, int64_t* mask,
                         int64_t* scratch) {
    Rng r;
    rng_init(&r, seed, data_stream((uint64_t)split + 1, STREAM_EXAMPLE, attempt, i));
    task->make(g, &r, label, ids, mask, scratch);
}

// Open-addressing set of the train rows, for the eval/train disjointness guarantee.
typedef struct {
    const int64_t* rows;  // (N, T) the train input_ids
    int64_t T;
    size_t cap;           // power of two
    size_t* slot;         // (cap) row index + 1, 0 = empty
} RowSet;

static uint64_t row_hash(const int64_t* row, int64_t T) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int64_t t = 0; t < T; t++) {
        uint64_t z = h ^ (uint64_t)row[t];
        h = splitmix64_next(&z);
    }
    return h;
}

static void rowset_build(RowSet* s, const int64_t* rows, size_t n, int64_t T) {
    s->rows = rows;
    s->T = T;
    s->cap = 16;
    while (s->cap < 2 * n) s->cap *= 2;
    s->slot = xcalloc(s->cap, sizeof(size_t));
    for (size_t i = 0; i < n; i++) {
        const int64_t* row = rows + i * (size_t)T;
        size_t h = (size_t)row_hash(row, T) & (s->cap - 1);
        while (s->slot[h]) {
            if (memcmp(rows + (s->slot[h] - 1) * (size_t)T, row, (size_t)T * sizeof(int64_t)) == 0)
                break;  // duplicate train row: one entry is enough
            h = (h + 1) & (s->cap - 1);
        }
        if (!s->slot[h]) s->slot[h] = i + 1;
    }
}

static bool rowset_contains(const RowSet* s, const int64_t* row) {
    size_t h = (size_t)row_hash(row, s->T) & (s->cap - 1);
    while (s->slot[h]) {
        if (memcmp(s->rows + (s->slot[h] - 1) * (size_t)s->T, row, (size_t)s->T * sizeof(int64_t)) == 0)
            return true;
        h = (h + 1) & (s->cap - 1);
    }
    return false;
}

Status dataset_synthetic(const DataConfig* cfg, Dataset* out) {
    CHECK(cfg && out);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < ARRAY_LEN(DATA_TASKS); i++)
        CHECK(strstr(DATA_TASK_NAMES, DATA_TASKS[i].name) && DATA_TASKS[i].max_labels <= 64,
              "task '%s': update DATA_TASK_NAMES / max_labels", DATA_TASKS[i].name);
    const DataTask* task = NULL;
    GenParams g;
    Status st = resolve_config(cfg, &task, &g);
    if (!status_is_ok(st)) return st;

    snprintf(out->task, sizeof out->task, "%s", task->name);
    out->seq_len = g.T;
    out->vocab_size = g.V;
    out->n_labels = g.K;
    out->seed = cfg->seed;
    out->min_segment = g.min_seg;
    out->max_segment = g.max_seg;
    const size_t n_split[SPLIT_COUNT] = {(size_t)cfg->n_train, (size_t)cfg->n_eval};
    const size_t T = (size_t)g.T;
    for (int s = 0; s < SPLIT_COUNT; s++)
        if (n_split[s]) split_alloc(&out->split[s], n_split[s], g.T);

    // train: one stream per example, so the loop order and thread count do not matter
    SplitData* tr = &out->split[SPLIT_TRAIN];
    #pragma omp parallel
    {
        int64_t* scratch = xmalloc((size_t)(2 * g.max_seg) * sizeof(int64_t));
        #pragma omp for schedule(static)
        for (size_t i = 0; i < tr->n; i++) {
            tr->labels[i] = example_label(cfg->seed, SPLIT_TRAIN, i, g.K);
            make_example(task, &g, cfg->seed, SPLIT_TRAIN, i, 0, tr->labels[i],
                         tr->input_ids + i * T, tr->attention_mask + i * T, scratch);
        }
        free(scratch);
    }

    // eval: redraw (next attempt's stream, same label) while the row equals a train row
    SplitData* ev = &out->split[SPLIT_EVAL];
    if (ev->n) {
        RowSet set;
        rowset_build(&set, tr->input_ids, tr->n, g.T);
        size_t first_failed = SIZE_MAX;
        #pragma omp parallel reduction(min : first_failed)
        {
            int64_t* scratch = xmalloc((size_t)(2 * g.max_seg) * sizeof(int64_t));
            #pragma omp for schedule(static)
            for (size_t i = 0; i < ev->n; i++) {
                ev->labels[i] = example_label(cfg->seed, SPLIT_EVAL, i, g.K);
                uint64_t attempt = 0;
                for (;; attempt++) {
                    if (attempt == DATA_MAX_ATTEMPTS) {
                        if (i < first_failed) first_failed = i;
                        break;
                    }
                    make_example(task, &g, cfg->seed, SPLIT_EVAL, i, attempt, ev->labels[i],
                                 ev->input_ids + i * T, ev->attention_mask + i * T, scratch);
                    if (!rowset_contains(&set, ev->input_ids + i * T)) break;
                }
            }
            free(scratch);
        }
        free(set.slot);
        if (first_failed != SIZE_MAX) {
            dataset_free(out);
            return status_make(STATUS_INVALID, "task %s: eval example %zu equals a train example "
                               "in all %d attempts: too few distinct sequences for n_train %"
                               PRId64 " (raise vocab_size or max_segment, or lower n_train)",
                               task->name, first_failed, DATA_MAX_ATTEMPTS, cfg->n_train);
        }
    }
    return status_ok();
}

Status dataset_check_model(const Dataset* ds, const ModelConfig* model) {
    CHECK(ds && model);
    if (ds->seq_len > model->max_positions)
        return status_make(STATUS_INVALID, "dataset seq_len %" PRId64 " exceeds the model's "
                           "max_positions %" PRId64, ds->seq_len, model->max_positions);
    if (ds->vocab_size > model->vocab_size)
        return status_make(STATUS_INVALID, "dataset vocab_size %" PRId64 " exceeds the model's "
                           "vocab_size %" PRId64, ds->vocab_size, model->vocab_size);
    if (ds->n_labels != model->n_labels)
        return status_make(STATUS_INVALID, "dataset n_labels %" PRId64 " differs from the "
                           "model's n_labels %" PRId64, ds->n_labels, model->n_labels);
    return status_ok();
}

// ---------------------------------------------------------------------------------------
// safetensors import / export
// ---------------------------------------------------------------------------------------

static int64_t int_at(const StTensor* t, size_t i) {
    switch (t->dtype) {
        case DTYPE_I64: return ((const int64_t*)t->data)[i];
        case DTYPE_I32: return ((const int32_t*)t->data)[i];
        case DTYPE_U8: return ((const uint8_t*)t->data)[i];
        default: ABORT("dtype %d is not an integer dtype", (int)t->dtype);
    }
}

static bool dtype_in(DType dt, const DType* allowed, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (allowed[i] == dt) return true;
    return false;
}

static Status check_dtype(const char* path, const StTensor* t, const DType* allowed, size_t n) {
    if (dtype_in(t->dtype, allowed, n)) return status_ok();
    char list[64] = "";
    size_t pos = 0;
    for (size_t i = 0; i < n; i++)
        pos += (size_t)snprintf(list + pos, sizeof list - pos, "%s%s", i ? ", " : "",
                                dtype_traits(allowed[i])->st_name);
    return status_make(STATUS_INVALID, "%s: tensor '%s': dtype %s not allowed (allowed: %s)", path,
                       t->name, dtype_traits(t->dtype)->st_name, list);
}

static void shape_text(char* dst, size_t cap, const StTensor* t) {
    size_t pos = (size_t)snprintf(dst, cap, "[");
    for (int i = 0; i < t->ndim && pos < cap; i++)
        pos += (size_t)snprintf(dst + pos, cap - pos, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    if (pos < cap) snprintf(dst + pos, cap - pos, "]");
}

// Loads and validates one split file. expect_T > 0: the T the file must have (eval after train).
static Status load_split(const char* path, const ModelConfig* model, int64_t expect_T,
                         SplitData* out, int64_t* T_out) {
    SafeTensors st;
    Status s = st_read(path, &st);
    if (!status_is_ok(s)) return s;
    const StTensor *ids = NULL, *mask = NULL, *lab = NULL;
    char sh[ST_MAX_NDIM * 24 + 8], sh2[ST_MAX_NDIM * 24 + 8];
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        if (strcmp(t->name, "input_ids") == 0) ids = t;
        else if (strcmp(t->name, "attention_mask") == 0) mask = t;
        else if (strcmp(t->name, "labels") == 0) lab = t;
        else if (strcmp(t->name, "token_type_ids") == 0) {
            s = status_make(STATUS_INVALID, "%s: unexpected tensor 'token_type_ids': DistilBERT "
                            "takes no token type ids (drop it)", path);
            goto done;
        } else if (strcmp(t->name, "label") != 0) {
            s = status_make(STATUS_INVALID, "%s: unexpected tensor '%s' (allowed: input_ids, "
                            "attention_mask, labels)", path, t->name);
            goto done;
        }
    }
    if (!ids) {
        s = status_make(STATUS_INVALID, "%s: no tensor 'input_ids' (expected input_ids (N, T), "
                        "labels (N) and optionally attention_mask (N, T))", path);
        goto done;
    }
    if (!lab) {
        s = status_make(STATUS_INVALID, "%s: no tensor 'labels'%s", path,
                        st_find(&st, "label") ? " (found 'label': rename it to 'labels', the "
                                                "name the HF Trainer passes to the model)"
                                              : " (expected labels (N), I64 or I32)");
        goto done;
    }
    if (st_find(&st, "label")) {
        s = status_make(STATUS_INVALID, "%s: unexpected tensor 'label' next to 'labels' (keep "
                        "only 'labels')", path);
        goto done;
    }
    static const DType id_types[] = {DTYPE_I64, DTYPE_I32};
    static const DType mask_types[] = {DTYPE_I64, DTYPE_I32, DTYPE_U8};
    if (!status_is_ok(s = check_dtype(path, ids, id_types, ARRAY_LEN(id_types)))) goto done;
    if (!status_is_ok(s = check_dtype(path, lab, id_types, ARRAY_LEN(id_types)))) goto done;
    if (mask && !status_is_ok(s = check_dtype(path, mask, mask_types, ARRAY_LEN(mask_types))))
        goto done;
    if (ids->ndim != 2) {
        shape_text(sh, sizeof sh, ids);
        s = status_make(STATUS_INVALID, "%s: tensor 'input_ids': shape %s must be 2-D (N, T)",
                        path, sh);
        goto done;
    }
    const int64_t N = ids->shape[0], T = ids->shape[1];
    if (lab->ndim != 1) {
        shape_text(sh, sizeof sh, lab);
        s = status_make(STATUS_INVALID, "%s: tensor 'labels': shape %s must be 1-D (N)", path, sh);
        goto done;
    }
    if (mask && (mask->ndim != 2 || mask->shape[0] != N || mask->shape[1] != T)) {
        shape_text(sh, sizeof sh, mask);
        shape_text(sh2, sizeof sh2, ids);
        s = status_make(STATUS_INVALID, "%s: tensor 'attention_mask': shape %s must equal "
                        "input_ids' shape %s", path, sh, sh2);
        goto done;
    }
    if (lab->shape[0] != N) {
        s = status_make(STATUS_INVALID, "%s: tensor 'labels': %" PRId64 " labels but input_ids "
                        "has %" PRId64 " rows (N must match)", path, lab->shape[0], N);
        goto done;
    }
    if (N == 0) {
        s = status_make(STATUS_INVALID, "%s: tensor 'input_ids': no examples (N = 0)", path);
        goto done;
    }
    if (N > DATA_MAX_EXAMPLES) {
        s = status_make(STATUS_INVALID, "%s: tensor 'input_ids': %" PRId64 " examples (at most %"
                        PRId64 ")", path, N, DATA_MAX_EXAMPLES);
        goto done;
    }
    if (T == 0) {
        s = status_make(STATUS_INVALID, "%s: tensor 'input_ids': sequence length T = 0", path);
        goto done;
    }
    if (T > model->max_positions) {
        s = status_make(STATUS_INVALID, "%s: tensor 'input_ids': sequence length T = %" PRId64
                        " exceeds the model's max_positions %" PRId64, path, T,
                        model->max_positions);
        goto done;
    }
    if (expect_T > 0 && T != expect_T) {
        s = status_make(STATUS_INVALID, "%s: tensor 'input_ids': T = %" PRId64 " differs from "
                        "the train file's T = %" PRId64 " (both splits must have the same "
                        "sequence length)", path, T, expect_T);
        goto done;
    }
    const size_t n = (size_t)N, tt = (size_t)T;
    for (size_t r = 0; r < n; r++) {
        for (size_t c = 0; c < tt; c++) {
            int64_t v = int_at(ids, r * tt + c);
            if (v < 0 || v >= model->vocab_size) {
                s = status_make(STATUS_INVALID, "%s: tensor 'input_ids': row %zu, position %zu: "
                                "token id %" PRId64 " outside [0, vocab_size %" PRId64 ")", path,
                                r, c, v, model->vocab_size);
                goto done;
            }
        }
        int64_t y = int_at(lab, r);
        if (model->regression && (y < INT32_MIN || y > INT32_MAX)) {  // the float targets, held as int32
            s = status_make(STATUS_INVALID, "%s: tensor 'labels': row %zu: regression target %" PRId64
                            " outside the int32 range [%d, %d]", path, r, y, INT32_MIN, INT32_MAX);
            goto done;
        }
        if (!model->regression && (y < 0 || y >= model->n_labels)) {
            s = status_make(STATUS_INVALID, "%s: tensor 'labels': row %zu: label %" PRId64
                            " outside [0, n_labels %" PRId64 ")", path, r, y, model->n_labels);
            goto done;
        }
        if (mask) {
            for (size_t c = 0; c < tt; c++) {
                int64_t m = int_at(mask, r * tt + c);
                if (m != 0 && m != 1) {
                    s = status_make(STATUS_INVALID, "%s: tensor 'attention_mask': row %zu, "
                                    "position %zu: value %" PRId64 " (must be 0 or 1)", path, r,
                                    c, m);
                    goto done;
                }
            }
        }
    }
    split_alloc(out, n, T);
    for (size_t i = 0; i < n * tt; i++) {
        out->input_ids[i] = int_at(ids, i);
        out->attention_mask[i] = mask ? int_at(mask, i) : (out->input_ids[i] != DATA_PAD_ID);
    }
    for (size_t r = 0; r < n; r++) out->labels[r] = (int32_t)int_at(lab, r);
    *T_out = T;
done:
    st_free(&st);
    return s;
}

Status dataset_from_safetensors(const char* train_path, const char* eval_path,
                                const ModelConfig* model, Dataset* out) {
    CHECK(train_path && model && out);
    memset(out, 0, sizeof *out);
    CHECK(status_is_ok(model_config_validate(model)), "invalid ModelConfig");
    if (model->n_labels > DATA_MAX_LABELS)
        return status_make(STATUS_UNSUPPORTED, "model n_labels %" PRId64 ": at most %d labels are "
                           "supported (the metrics keep a K x K confusion matrix)",
                           model->n_labels, DATA_MAX_LABELS);
    int64_t T = 0, T_eval = 0;
    Status s = load_split(train_path, model, 0, &out->split[SPLIT_TRAIN], &T);
    if (status_is_ok(s) && eval_path)
        s = load_split(eval_path, model, T, &out->split[SPLIT_EVAL], &T_eval);
    if (!status_is_ok(s)) {
        dataset_free(out);
        return s;
    }
    snprintf(out->task, sizeof out->task, "safetensors");
    out->seq_len = T;
    out->vocab_size = model->vocab_size;
    out->n_labels = model->n_labels;
    return status_ok();
}

Status dataset_save_safetensors(const Dataset* ds, Split split, const char* path) {
    CHECK(ds && path && split >= 0 && split < SPLIT_COUNT);
    const SplitData* sd = &ds->split[split];
    const size_t n = sd->n, T = (size_t)ds->seq_len;
    StWriter* w = st_writer_new();
    const int64_t shape2[2] = {(int64_t)n, (int64_t)T}, shape1[1] = {(int64_t)n};
    st_writer_add(w, "input_ids", DTYPE_I64, 2, shape2, sd->input_ids);
    st_writer_add(w, "attention_mask", DTYPE_I64, 2, shape2, sd->attention_mask);
    int64_t* lab = xmalloc((n ? n : 1) * sizeof(int64_t));
    for (size_t i = 0; i < n; i++) lab[i] = sd->labels[i];
    st_writer_add(w, "labels", DTYPE_I64, 1, shape1, lab);
    free(lab);
    char num[32];
    st_writer_meta(w, "format", "trainbench-dataset/1");
    st_writer_meta(w, "generator", "trainbench src/model/data.c");
    st_writer_meta(w, "task", ds->task);
    st_writer_meta(w, "split", split_name(split));
    snprintf(num, sizeof num, "%" PRIu64, ds->seed);
    st_writer_meta(w, "seed", num);
    snprintf(num, sizeof num, "%" PRId64, ds->n_labels);
    st_writer_meta(w, "n_labels", num);
    snprintf(num, sizeof num, "%" PRId64, ds->vocab_size);
    st_writer_meta(w, "vocab_size", num);
    snprintf(num, sizeof num, "%" PRId64, ds->seq_len);
    st_writer_meta(w, "seq_len", num);
    if (ds->max_segment) {
        snprintf(num, sizeof num, "%" PRId64, ds->min_segment);
        st_writer_meta(w, "min_segment", num);
        snprintf(num, sizeof num, "%" PRId64, ds->max_segment);
        st_writer_meta(w, "max_segment", num);
    }
    Status s = st_writer_save(w, path);
    st_writer_free(w);
    return s;
}

// ---------------------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------------------

void batch_alloc(Batch* b, int capacity, int seq_len) {
    CHECK(b && capacity >= 1 && seq_len >= 1);
    size_t cells = 0;
    CHECK(size_mul_ok((size_t)capacity, (size_t)seq_len, &cells) &&
          size_mul_ok(cells, sizeof(int64_t), &cells));
    b->input_ids = xaligned_alloc(cells);
    b->attention_mask = xaligned_alloc(cells);
    b->labels = xaligned_alloc((size_t)capacity * sizeof(int32_t));
    b->batch = 0;
    b->seq_len = seq_len;
    b->capacity = capacity;
}

void batch_free(Batch* b) {
    if (!b) return;
    free(b->input_ids);
    free(b->attention_mask);
    free(b->labels);
    memset(b, 0, sizeof *b);
}

size_t dataset_n_batches(const Dataset* ds, Split split, int batch_size) {
    CHECK(ds && split >= 0 && split < SPLIT_COUNT && batch_size >= 1);
    size_t n = ds->split[split].n;
    return n / (size_t)batch_size + (n % (size_t)batch_size != 0);
}

static void copy_row(const SplitData* sd, size_t T, size_t src, Batch* out, size_t dst) {
    memcpy(out->input_ids + dst * T, sd->input_ids + src * T, T * sizeof(int64_t));
    memcpy(out->attention_mask + dst * T, sd->attention_mask + src * T, T * sizeof(int64_t));
    out->labels[dst] = sd->labels[src];
}

void dataset_get_batch(const Dataset* ds, Split split, size_t k, int batch_size, Batch* out) {
    CHECK(out && k < dataset_n_batches(ds, split, batch_size), "batch %zu of %zu", k,
          dataset_n_batches(ds, split, batch_size));
    CHECK(out->capacity >= batch_size && out->seq_len == ds->seq_len);
    const SplitData* sd = &ds->split[split];
    size_t begin = k * (size_t)batch_size, end = begin + (size_t)batch_size;
    if (end > sd->n) end = sd->n;
    for (size_t i = begin; i < end; i++) copy_row(sd, (size_t)ds->seq_len, i, out, i - begin);
    out->batch = (int)(end - begin);
}

void dataset_gather(const Dataset* ds, Split split, const size_t* rows, int n, Batch* out) {
    CHECK(ds && split >= 0 && split < SPLIT_COUNT && out && (rows || n == 0) && n >= 0);
    CHECK(out->capacity >= n && out->seq_len == ds->seq_len);
    const SplitData* sd = &ds->split[split];
    for (int i = 0; i < n; i++) {
        CHECK(rows[i] < sd->n, "row %zu of %zu", rows[i], sd->n);
        copy_row(sd, (size_t)ds->seq_len, rows[i], out, (size_t)i);
    }
    out->batch = n;
}

void dataset_epoch_order(size_t n, uint64_t seed, uint64_t epoch, size_t* order) {
    CHECK((order || n == 0) && n <= (size_t)DATA_MAX_EXAMPLES);
    Rng r;
    rng_init(&r, seed, data_stream(0, STREAM_EPOCH_ORDER, 0, epoch & (((uint64_t)1 << 36) - 1)));
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n; i > 1; i--) {
        // j uniform in [0, i): two 32-bit draws when i exceeds 32 bits
        size_t j = i <= UINT32_MAX ? rng_below(&r, (uint32_t)i) : (size_t)(rng_next_u64(&r) % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

// ---------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------

void metrics_argmax(const float* logits, size_t n, int n_labels, int32_t* pred) {
    CHECK((logits && pred) || n == 0);
    CHECK(n_labels >= 1);
    for (size_t i = 0; i < n; i++) {
        const float* row = logits + i * (size_t)n_labels;  // (K)
        int best = 0;
        if (!isnan(row[0])) {
            for (int c = 1; c < n_labels; c++) {
                if (isnan(row[c])) {  // NaN is the maximum; the first one wins
                    best = c;
                    break;
                }
                if (row[c] > row[best]) best = c;  // strict: ties keep the first index
            }
        }
        pred[i] = best;
    }
}

void metrics_confusion_add(int64_t* cm, int n_labels, const int32_t* labels, const int32_t* pred,
                           size_t n) {
    CHECK(cm && n_labels >= 1 && n_labels <= DATA_MAX_LABELS && ((labels && pred) || n == 0));
    for (size_t i = 0; i < n; i++) {
        CHECK(labels[i] >= 0 && labels[i] < n_labels, "label %d at %zu (K %d)", labels[i], i,
              n_labels);
        CHECK(pred[i] >= 0 && pred[i] < n_labels, "prediction %d at %zu (K %d)", pred[i], i,
              n_labels);
        cm[(size_t)labels[i] * (size_t)n_labels + (size_t)pred[i]]++;
    }
}

EvalMetrics metrics_from_confusion(const int64_t* cm, int n_labels) {
    CHECK(cm && n_labels >= 2 && n_labels <= DATA_MAX_LABELS);
    const size_t K = (size_t)n_labels;
    int64_t total = 0, correct = 0;
    for (size_t i = 0; i < K * K; i++) {
        CHECK(cm[i] >= 0);
        total += cm[i];
    }
    for (size_t c = 0; c < K; c++) correct += cm[c * K + c];
    EvalMetrics m = {(size_t)total, NAN, NAN};
    if (total == 0) return m;
    m.accuracy = (double)correct / (double)total;
    double sum = 0;
    size_t present = 0;
    for (size_t c = 0; c < K; c++) {
        int64_t tp = cm[c * K + c], row = 0, col = 0;  // row: true c; col: predicted c
        for (size_t j = 0; j < K; j++) {
            row += cm[c * K + j];
            col += cm[j * K + c];
        }
        const int64_t denom = row + col;  // = 2 TP + FP + FN
        const double f1 = denom ? 2.0 * (double)tp / (double)denom : 0.0;  // zero_division -> 0
        if (K == 2 && c == 1) m.f1 = f1;
        if (denom) {
            sum += f1;
            present++;
        }
    }
    if (K > 2) m.f1 = sum / (double)present;  // present >= 1 since total > 0
    return m;
}

EvalMetrics metrics_compute(const int32_t* labels, const int32_t* pred, size_t n, int n_labels) {
    CHECK(n_labels >= 2 && n_labels <= DATA_MAX_LABELS);
    int64_t* cm = xcalloc((size_t)n_labels * (size_t)n_labels, sizeof(int64_t));  // (K, K)
    metrics_confusion_add(cm, n_labels, labels, pred, n);
    EvalMetrics m = metrics_from_confusion(cm, n_labels);
    free(cm);
    return m;
}

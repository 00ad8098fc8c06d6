// data.h — deterministic datasets for sequence classification and the eval metrics that the
// Hugging Face Trainer reports for them.
//   - A synthetic, seeded task ("paraphrase", 2 or 3 labels; definition below) generated in
//     memory: every example is a function of (seed, split, index) only.
//   - User-tokenized data from safetensors files (one file per split), validated against the
//     model's configuration, and a writer that exports any dataset in the same format for the
//     PyTorch comparison scripts.
//   - Batches (copies of rows), a deterministic per-epoch shuffle order.
//   - Metrics: argmax predictions, confusion matrix, eval_accuracy and eval_f1.
// Not here: tokenization (users tokenize in Python), the model, the training loop.
//
// Token ids (DistilBertConfig.pad_token_id is 0): 0 = [PAD], 1 = [CLS], 2 = [SEP]; content
// tokens are 3 .. vocab_size-1. Padding is on the right; attention_mask is 1 on real tokens.
//
// Task "paraphrase" (synthetic). Each sequence is
//     [CLS] a_1 .. a_L [SEP] b_1 .. b_L [SEP] [PAD] ...      (length 2L + 3 <= seq_len)
// with L drawn uniformly from [min_segment, max_segment] and a_i uniform content tokens.
// B is a random permutation of A in which k random positions are replaced by content tokens
// absent from A (each uniform over those), so exactly d = k tokens of B have no match in A
// (d = L - |A ∩ B|, multiset intersection):
//   n_labels 2:  label 1 "paraphrase": k = 0;
//                label 0 "not": k uniform in 1..L, from hard negatives (one token changed)
//                to easy ones (no token shared), so training makes progress early and keeps
//                improving on the hard cases.
//   n_labels 3:  label 2 "same": k = 0; label 1 "near": k uniform in 1..2;
//                label 0 "disjoint": k = L. Needs min_segment >= 3 (near != disjoint).
// Needs vocab_size >= max_segment + 4 (replacements must exist outside A).
// The label is therefore a function of the sequence (the rule above reaches 100%), but each
// segment alone is uniform i.i.d. content tokens in every class, so any rule must relate the
// tokens of B to those of A (attention across positions). tests/test_data.c shows a linear
// bag-of-words model over per-segment counts stays at chance while the rule reaches 100%.
// (Whole-sequence statistics that pair tokens, such as the number of distinct tokens or the
// parity of each token's count, do carry signal: they too need attention across positions.)
// Learnability, measured with HF DistilBertForSequenceClassification in PyTorch (dim 64,
// 2 layers, AdamW, 20,000 train examples, seq_len 32, vocab 64, default segments): see
// README.md "Data".
// Determinism: example i of a split is drawn from its own RNG stream (rng_init(seed, stream)
// with the stream built from split, index and attempt; see data.c), so it does not depend on
// how many examples were drawn before, on the split sizes, or on the thread count. Labels are
// stratified: indices [K*j, K*j + K) (K = n_labels) hold a random permutation of 0..K-1 drawn
// from the stream of block j, so every class count is N/K rounded down or up. Train and eval
// use different streams; an eval example that happens to equal a train example (it happens
// for short segments over small vocabularies: with vocab 64 there are only ~7,400 distinct
// "same" sequences with L = 2) is redrawn from the next attempt's stream, keeping its label,
// so the two splits never share a sequence. Eval example i thus depends on the train set
// exactly when such a collision occurs; train examples never depend on anything else.
#ifndef TRAINBENCH_DATA_H
#define TRAINBENCH_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "model/model.h"

#define DATA_PAD_ID 0
#define DATA_CLS_ID 1
#define DATA_SEP_ID 2
#define DATA_FIRST_CONTENT_ID 3
#define DATA_MAX_EXAMPLES (INT64_C(1) << 36)  // per split; indices fit the RNG stream layout
#define DATA_MAX_LABELS 4096                   // metrics keep a (K, K) confusion matrix

typedef enum { SPLIT_TRAIN = 0, SPLIT_EVAL, SPLIT_COUNT } Split;
const char* split_name(Split s);  // "train", "eval"

// ---- synthetic datasets ----
typedef struct {
    const char* task;        // registry name: "paraphrase" (data_task_names_list())
    int64_t n_labels;        // 2 or 3 for paraphrase
    int64_t n_train;         // examples in the train split (>= 1)
    int64_t n_eval;          // examples in the eval split (>= 0)
    int64_t seq_len;         // T: every sequence is padded to T (<= the model's max_positions)
    int64_t vocab_size;      // token ids are < vocab_size (the model's vocab_size)
    uint64_t seed;
    int64_t min_segment;     // segment length range; 0 = default 2 (3 with 3 labels)
    int64_t max_segment;     // 0 = default min((T - 3) / 2, 8)
} DataConfig;

// "paraphrase" (one line per registered task, for CLI messages)
const char* data_task_names_list(void);

typedef struct {
    size_t n;                  // N: examples
    int64_t* input_ids;        // (N, T) token ids
    int64_t* attention_mask;   // (N, T) 1 = real token, 0 = padding
    int32_t* labels;           // (N) in [0, n_labels)
} SplitData;

typedef struct {
    char task[64];             // "paraphrase" or "safetensors"
    int64_t seq_len;           // T
    int64_t vocab_size;        // ids are < vocab_size
    int64_t n_labels;          // K
    uint64_t seed;             // synthetic only
    int64_t min_segment, max_segment;  // synthetic only, defaults resolved
    SplitData split[SPLIT_COUNT];      // an absent split has n = 0 and NULL arrays
} Dataset;

// Validates cfg (STATUS_INVALID naming the field, the value and the allowed range) and
// generates both splits into *out (free with dataset_free). On failure *out is zeroed.
Status dataset_synthetic(const DataConfig* cfg, Dataset* out);

// Whether a model can consume the dataset: seq_len <= max_positions, vocab_size <= the
// model's vocab_size, n_labels == the model's n_labels. STATUS_INVALID naming the field.
Status dataset_check_model(const Dataset* ds, const ModelConfig* model);

// Loads user-tokenized data: one safetensors file per split (eval_path may be NULL: no eval
// split) with tensors
//   input_ids       (N, T) I64 or I32
//   attention_mask  (N, T) I64, I32 or U8, values 0/1 — optional: input_ids != 0 if absent
//   labels          (N)    I64 or I32
// and no others (HF datasets' column names after the Trainer's renaming of "label"). Checks,
// each a STATUS_INVALID naming the file, the tensor and the problem: names, dtypes, ranks,
// matching N and T, N >= 1, 1 <= T <= model->max_positions, every id in [0, vocab_size)
// (padding included: the embedding reads it), labels in [0, n_labels), mask values 0/1, and
// no row whose first token ([CLS], read by the classifier) is masked; the eval file must have
// the train file's T. STATUS_IO when a file cannot be read. Masks need not be contiguous.
// vocab_size and n_labels of the result are the model's. On failure *out is zeroed.
Status dataset_from_safetensors(const char* train_path, const char* eval_path,
                                const ModelConfig* model, Dataset* out);

// Writes one split in the format above (input_ids, attention_mask, labels, all I64 as torch
// uses for token ids and CrossEntropyLoss targets) with metadata (format, task, split, seed,
// n_labels, vocab_size, seq_len), atomically. Readable with safetensors.torch.load_file.
Status dataset_save_safetensors(const Dataset* ds, Split split, const char* path);

void dataset_free(Dataset* ds);  // safe on a zeroed or already freed Dataset

// ---- batches ----
typedef struct {
    int64_t* input_ids;        // (B, T)
    int64_t* attention_mask;   // (B, T)
    int32_t* labels;           // (B)
    int batch;                 // B: rows filled (the last batch of a split may be short)
    int seq_len;               // T
    int capacity;              // rows allocated
} Batch;

void batch_alloc(Batch* b, int capacity, int seq_len);
void batch_free(Batch* b);

// ceil(N / batch_size): the last batch may be short (HF dataloader_drop_last=False).
size_t dataset_n_batches(const Dataset* ds, Split split, int batch_size);
// Copies rows [k*batch_size, min((k+1)*batch_size, N)) into out (capacity >= batch_size,
// seq_len == T; both CHECKed, as is k < dataset_n_batches).
void dataset_get_batch(const Dataset* ds, Split split, size_t k, int batch_size, Batch* out);
// Copies the n rows rows[0..n) (in that order) into out (capacity >= n).
void dataset_gather(const Dataset* ds, Split split, const size_t* rows, int n, Batch* out);
// order (N): a permutation of 0..N-1 for the given epoch, a function of (seed, epoch, N) only:
// rng_init(seed, 2 << 48 | epoch); order = identity; for i = N down to 2: swap order[i-1] and
// order[rng_below(i)] (Fisher-Yates). reference/data_order.py is the same in Python (what
// `trainbench train --data-order shuffled` reads, for a PyTorch script to feed the same batches). Batch b of an epoch is
// dataset_gather(ds, split, order + b*B, min(B, N - b*B), out).
void dataset_epoch_order(size_t n, uint64_t seed, uint64_t epoch, size_t* order);

// ---- metrics (the keys HF Trainer prints: compute_metrics' names with the "eval_" prefix) ----
#define METRIC_EVAL_ACCURACY "eval_accuracy"
#define METRIC_EVAL_F1 "eval_f1"

typedef struct {
    size_t n;         // examples counted
    double accuracy;  // eval_accuracy: correct / n (sklearn accuracy_score)
    double f1;        // eval_f1: see metrics_from_confusion
} EvalMetrics;

// pred[i] = argmax over logits row i (N, K), as torch.argmax (and np.argmax): the FIRST
// maximal index on ties, and a NaN counts as the maximum (the first NaN wins).
void metrics_argmax(const float* logits, size_t n, int n_labels, int32_t* pred);
// cm (K, K), row = true label, column = predicted (sklearn confusion_matrix layout).
// ACCUMULATES (+=) the n pairs into cm; zero it once before an eval pass. Labels and
// predictions outside [0, K) are bugs (CHECK).
void metrics_confusion_add(int64_t* cm, int n_labels, const int32_t* labels, const int32_t* pred,
                           size_t n);
// From a confusion matrix (K >= 2), matching sklearn with its defaults:
//   accuracy = trace / n;
//   per class c: F1_c = 2 TP / (2 TP + FP + FN), and 0.0 when TP + FP + FN == 0
//   (zero_division="warn" returns 0.0, and warns, which we do not);
//   K == 2: f1 = F1 of class 1 (f1_score average="binary", pos_label=1);
//   K > 2:  f1 = mean of F1_c over the classes that occur in the labels or the predictions
//           (f1_score average="macro", labels=None uses unique_labels(y_true, y_pred), so a
//           class absent from both is not averaged in).
// n == 0: both NaN (nothing was evaluated).
EvalMetrics metrics_from_confusion(const int64_t* cm, int n_labels);
// Convenience: a fresh confusion matrix over the n pairs, then metrics_from_confusion.
EvalMetrics metrics_compute(const int32_t* labels, const int32_t* pred, size_t n, int n_labels);

#endif

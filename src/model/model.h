// model.h — the DistilBERT-architecture sequence classifier's configuration (presets and HF
// config.json files), its parameter table (one entry per tensor, Hugging Face names, offsets
// into one contiguous fp32 buffer) and per-tensor optimizer state over that table.
// Everything that touches parameters derives from the table: allocation, gradients, golden
// loading, checkpoints, optimizer iteration and the memory report.
// Also here: the forward and backward pass over that table (ModelWorkspace, model_forward,
// model_backward, model_zero_grad; layers in layers.h, precision modes in amp.h).
// Not here: datasets (data.h), the optimizer loop and loss scaling policy (amp.h, train).
#ifndef TRAINBENCH_MODEL_H
#define TRAINBENCH_MODEL_H

#include <jansson.h>

#include "model/amp.h"
#include "model/dropout.h"
#include "model/phase.h"
#include "core/common.h"
#include "gemm/gemm.h"
#include "model/layers.h"
#include "optim/optim.h"

// Field names follow transformers' DistilBertConfig; config.json keys in the comments.
typedef struct {
    int64_t vocab_size;     // vocab_size
    int64_t dim;            // dim (hidden size D)
    int64_t n_layers;       // n_layers
    int64_t n_heads;        // n_heads (dim % n_heads == 0)
    int64_t hidden_dim;     // hidden_dim (FFN inner size H)
    int64_t max_positions;  // max_position_embeddings (P)
    int64_t n_labels;       // num_labels (= len(id2label) in a config.json)
    FfnActivation activation;  // activation: GELU (0, the presets'), ReLU or SiLU; no parameter depends on it
    // pad_token_id: the word embedding's padding_idx (its row starts at 0 and never receives a
    // gradient), normalized as nn.Embedding does (a negative id counts from vocab_size); -1: null
    // (no padding_idx). 0 in the presets, as DistilBertConfig's default.
    int64_t pad_token_id;
    // initializer_range, the init's std, when it is not DistilBertConfig's 0.02 (0: 0.02, as in the
    // presets; model_init_std)
    double initializer_range;
    // sinusoidal_pos_embds: the position embeddings start as DistilBERT's sinusoidal table
    // (model_sinusoidal_table) instead of N(0, std), and train like any other weight, as
    // transformers >= 5 does (4.x froze them). false in the presets.
    bool sinusoidal_pos_embds;
    // problem_type "regression" (config.json; transformers' choice too when problem_type is null
    // and num_labels is 1): one logit, MSELoss against the label read as a float target
    // (mse_forward); n_labels is then 1. false: single-label classification, cross-entropy.
    bool regression;
} ModelConfig;

// The std of HF's init for this config: initializer_range (0.02 by default).
double model_init_std(const ModelConfig* c);

// Upper bounds model_config_validate() enforces (sanity, and so that every size product
// fits comfortably in size_t and int64_t).
#define MODEL_MAX_VOCAB      (INT64_C(1) << 24)
#define MODEL_MAX_DIM        (INT64_C(1) << 16)
#define MODEL_MAX_LAYERS     INT64_C(1024)
#define MODEL_MAX_HIDDEN     (INT64_C(1) << 20)
#define MODEL_MAX_POSITIONS  (INT64_C(1) << 20)
#define MODEL_MAX_LABELS     (INT64_C(1) << 20)
#define MODEL_MAX_PARAMS     (INT64_C(1) << 36)   // 68.7 G parameters (275 GB of fp32)

// ---- presets (registry in model.c) ----
typedef struct {
    const char* name;         // registry name: "tiny", "small", "distilbert-base-cased"
    const char* description;
    ModelConfig cfg;
} ModelPreset;

size_t model_preset_count(void);
const ModelPreset* model_preset_at(size_t i);
const ModelConfig* model_config_find(const char* name);  // NULL if no preset has that name

// The work of one training step (forward + backward, B sequences of T tokens), counted once,
// here, from the config (README "Where the step goes"):
//   gemm_flop: 2*M*N*K summed over every GEMM the step runs: per layer the q, k, v, out and two
//     FFN linears (forward 1x, backward 2x: input and weight gradients), attention's QK^T and PV
//     (forward) and dP, dV, dQ, dK (backward); the classifier's two linears likewise.
//   min_bytes: a floor on the memory traffic: every fp32 parameter read by the forward and again
//     by the backward, every gradient written once, and AdamW's read of p, g, m, v and write
//     of p, m, v (28 bytes per parameter); activations are assumed to stay in cache (a floor).
//   min_bytes_model / min_bytes_optim: min_bytes split into the forward + backward part (12
//     bytes per parameter) and AdamW's 28 (the derived bound replaces the latter by the measured
//     optimizer step, README "Where the step goes").
// gemm_flop is the sum of 2*M*N*K*count over model_step_gemms(), the step's GEMM calls.
typedef struct {
    double gemm_flop;
    double min_bytes;
    double min_bytes_model, min_bytes_optim;
} ModelStepCost;
ModelStepCost model_step_cost(const ModelConfig* cfg, int B, int T);

// The GEMM calls of one training step (one micro-batch, B x T), as layers.c makes them, one
// entry per distinct call with its count per step. `per_head` calls run inside attention's
// parallel (batch, head) loop on a one-thread handle each (so several run at once); the others
// use the whole thread team. Shapes as gemm_run gets them: C (M, N) = op(A) (M, K) @ op(B) (K, N).
// tests/test_model.c records the real calls of a step and compares them with this list.
typedef struct {
    const char* what;  // "q/k/v/out forward", "lin1 weight grad", ... (for people)
    bool ta, tb;
    int M, N, K;
    long long count;
    bool per_head;
} ModelGemm;
enum { MODEL_STEP_GEMMS_MAX = 32 };
// Fills out[] (MODEL_STEP_GEMMS_MAX slots); returns the number of entries.
size_t model_step_gemms(const ModelConfig* cfg, int B, int T, ModelGemm* out);
const char* model_preset_names_list(void);                // "tiny, small, distilbert-base-cased"

// STATUS_INVALID naming the field and the rule: every size >= 1 and <= its MODEL_MAX_*,
// dim % n_heads == 0, total parameter count <= MODEL_MAX_PARAMS (checked arithmetic).
Status model_config_validate(const ModelConfig* cfg);
// Reads a Hugging Face config.json (DistilBertConfig). Required: vocab_size, dim, n_layers,
// n_heads, hidden_dim, max_position_embeddings; labels from num_labels or id2label/label2id
// (default 2, as PretrainedConfig). Common HF keys that do not change the parameter table
// are accepted and ignored; any other key is STATUS_INVALID naming it. Validates the result.
Status model_config_from_json_file(const char* path, ModelConfig* cfg);
// The same, for training: also refuses by name every setting that changes the computation and
// is not implemented (activation other than "gelu"; a dropout, attention_dropout or
// seq_classif_dropout outside [0, 1]; pad_token_id other than 0; initializer_range other than
// 0.02; problem_type other than single_label_classification; num_labels 1 = regression).
// Accepts what transformers 5.24's save_pretrained writes (tie_word_embeddings, dtype, ...).
Status model_config_from_json_file_for_training(const char* path, ModelConfig* cfg);
// The config.json's dropout probabilities (dropout, attention_dropout, seq_classif_dropout) into
// d's hidden, attention and classifier fields (d->seed untouched); a missing key takes
// DistilBertConfig's default (0.1, 0.1, 0.2), as transformers would. STATUS_INVALID naming the
// key unless each is a number in [0, 1].
Status model_dropout_from_json_file(const char* path, DropoutConfig* d);
// The config as a new JSON object with the config.json keys model_config_from_json_file reads
// (vocab_size, dim, n_layers, n_heads, hidden_dim, max_position_embeddings, num_labels), so
// writing it and reading it back gives the same config. Used by train's and memory's results.
json_t* model_config_to_json(const ModelConfig* cfg);

// ---- parameter table ----
typedef enum {
    PARAM_EMBEDDING,      // nn.Embedding weight (word and position embeddings)
    PARAM_LINEAR_WEIGHT,  // nn.Linear weight (out, in)
    PARAM_LINEAR_BIAS,    // nn.Linear bias (out)
    PARAM_NORM_WEIGHT,    // nn.LayerNorm weight (D)
    PARAM_NORM_BIAS,      // nn.LayerNorm bias (D)
    PARAM_KIND_COUNT
} ParamKind;

// Offsets are aligned to MODEL_ALIGN_FLOATS floats (64 bytes) so every tensor starts on a
// cache line; the buffer therefore holds alloc_numel >= numel floats (the gaps are zero and
// belong to no tensor). The parameter count is always the sum of numels (numel).
#define MODEL_ALIGN_FLOATS 16

typedef struct {
    char name[96];        // HF DistilBertForSequenceClassification state_dict key
    TensorShape shape;    // as torch: Linear weight (out, in), Embedding (num, dim)
    size_t offset;        // in floats from the buffer start; multiple of MODEL_ALIGN_FLOATS
    size_t numel;
    ParamKind kind;
    bool is_embedding;    // kind == PARAM_EMBEDDING (HF Trainer: 32-bit state under bnb 8-bit)
} ParamTensor;

typedef struct {
    ModelConfig cfg;
    size_t n;             // number of tensors (104 for distilbert-base-cased)
    ParamTensor* t;       // (n) in state_dict order
    size_t numel;         // parameter count: sum of t[i].numel
    size_t alloc_numel;   // floats in a parameter (or gradient) buffer, alignment gaps included
} ParamTable;

// Validates cfg (as model_config_validate) and builds the table; free with param_table_free.
Status param_table_build(const ModelConfig* cfg, ParamTable* table);
void param_table_free(ParamTable* table);
const ParamTensor* param_table_find(const ParamTable* table, const char* name);
// A zeroed, 64-byte aligned buffer of alloc_numel floats (parameters or gradients).
float* param_table_alloc_buffer(const ParamTable* table);
// HF DistilBertPreTrainedModel._init_weights: Linear and Embedding weights ~ N(0, std)
// (model_init_std: initializer_range, 0.02 by default), Linear biases 0, LayerNorm weight 1 and
// bias 0, and the word embeddings' padding row (cfg.pad_token_id, unless null) zeroed, as
// nn.Embedding's padding_idx init does. Deterministic for any thread count (rng streams per
// tensor chunk, see param_table_fill_normal).
// With cfg.sinusoidal_pos_embds the position embeddings are then overwritten with
// model_sinusoidal_table, as DistilBertPreTrainedModel._init_weights does after nn.Embedding's.
void param_table_init_weights(const ParamTable* table, float* buf, uint64_t seed, float std);
// transformers' create_sinusoidal_embeddings into out (n_pos, dim): angle = pos / 10000^(2*(j/2)/dim)
// in double, column j even sin(angle), odd cos(angle), each rounded once to float.
void model_sinusoidal_table(float* out, int64_t n_pos, int64_t dim);
// Every tensor ~ N(mean, std) (e.g. a synthetic gradient). Each tensor is drawn in chunks of
// 2^20 elements, chunk c of tensor i from rng stream (i << 32 | c), so the values do not
// depend on the thread count.
void param_table_fill_normal(const ParamTable* table, float* buf, uint64_t seed, float mean, float std);

// ---- optimizer state over the whole table (what a training loop holds) ----
typedef struct {
    const Optimizer* optim;
    OptimConfig cfg;          // the run's hyperparameters
    bool embeddings_32bit;    // HF Trainer + bitsandbytes: every nn.Embedding weight keeps
                              // 32-bit state (module override optim_bits=32)
    size_t n;                 // = table->n
    OptimState** states;      // (n) one per tensor, NULL before model_optim_init
    bool decay_groups;        // false (model_optim_init): cfg.weight_decay on every tensor;
                              // true: HF Trainer's two groups, weight decay only where
                              // param_gets_weight_decay (set after model_optim_init)
    size_t* order;            // (n) the order the tensors are stepped in (model.c: the large first)
} ModelOptim;

// HF Trainer.get_decay_parameter_names: every parameter except those of nn.LayerNorm modules
// and those whose lowercased name matches "bias", "layernorm", "rmsnorm", "(^|\.)norm($|\.)"
// or "_norm($|\.)". For this model: the embeddings and the Linear weights decay; biases and
// LayerNorm weights/biases do not.
bool param_gets_weight_decay(const ParamTensor* t);

// The config the optimizer sees for one tensor: cfg, except that with embeddings_32bit an
// embedding weight gets min_8bit_size = SIZE_MAX (the 32-bit path).
OptimConfig model_optim_tensor_config(const OptimConfig* cfg, bool embeddings_32bit, const ParamTensor* t);
// Closed formula (SPEC.md section 5): sum over tensors of state_bytes + shared_state_bytes once.
size_t model_optim_estimate_bytes(const ParamTable* table, const Optimizer* o, const OptimConfig* cfg,
                                  bool embeddings_32bit);
void model_optim_init(ModelOptim* mo, const ParamTable* table, const Optimizer* o, const OptimConfig* cfg,
                      bool embeddings_32bit);
// One optimizer step on every tensor: params and grads are table buffers (alloc_numel floats).
void model_optim_step(ModelOptim* mo, const ParamTable* table, float* params, const float* grads);
// The same step on the gradients times g_scale (gradient clipping's coefficient; each element
// rounded once, as torch's in-place multiply): fused into the optimizer's own pass where it has
// step_scaled (grads are then left as they are), else grads multiplied in place first. A
// g_scale of 1.0f is model_optim_step (and never writes grads).
void model_optim_step_scaled(ModelOptim* mo, const ParamTable* table, float* params, float* grads, float g_scale);
// Measured: sum of optim_state_measured_bytes over the tensors + shared_state_bytes once
// (shared state is not allocated per tensor, so the vtable's figure is the only one there is).
size_t model_optim_measured_bytes(const ModelOptim* mo);
size_t model_optim_shared_bytes(const ModelOptim* mo);
size_t model_optim_measured_elems(const ModelOptim* mo);  // per-tensor state elements only
void model_optim_free(ModelOptim* mo);
// Optimizer steps taken (the step count of the first tensor whose state this process holds;
// every held tensor steps together, a skipped step skips them all).
int64_t model_optim_steps_taken(const ModelOptim* mo);

// ---- ZeRO-1: the optimizer state sharded over ranks, whole tensors as the unit ----
// The shard rule (README "Distributed"): contiguous runs of whole tensors in parameter order,
// balanced by state bytes (state_bytes of each tensor with its model_optim_tensor_config; the
// shared bitsandbytes code maps are held by every rank and not balanced). Rank r starts at the
// first tensor rank r-1 did not take and takes tensors until its own bytes b_r satisfy
// b_r * (R - r) >= (the bytes of rank r's first tensor onward), i.e. it holds at least its
// fair share of what is left, or until as many tensors are left as later ranks (each rank
// holds at least one tensor); the last rank takes the rest. Whole tensors because Adafactor's
// factored statistics (row and column means) and its RMS span a whole tensor, and
// bitsandbytes' 32-bit/8-bit choice is per tensor. owner[i] (table->n) receives tensor i's
// rank. STATUS_INVALID when ranks < 1 or ranks > table->n.
Status model_optim_shard(const ParamTable* table, const Optimizer* o, const OptimConfig* cfg, bool embeddings_32bit,
                         int ranks, int* owner);
// model_optim_init holding only the tensors with owner[i] == rank (the others' states stay NULL:
// model_optim_step skips them, measured bytes count only held ones). owner NULL: every tensor.
void model_optim_init_owned(ModelOptim* mo, const ParamTable* table, const Optimizer* o, const OptimConfig* cfg,
                            bool embeddings_32bit, const int* owner, int rank);
// Closed formula for one rank's shard: state_bytes of its tensors + shared_state_bytes once.
size_t model_optim_estimate_bytes_owned(const ParamTable* table, const Optimizer* o, const OptimConfig* cfg,
                                        bool embeddings_32bit, const int* owner, int rank);

// ---- forward / backward (DistilBertForSequenceClassification; train mode with the batch's
// dropout settings, eval mode without) ----
// The computation, op by op, with the rounding points of each precision mode, is written out
// at the top of model.c; reference/MODEL_SEMANTICS.md records what torch/transformers compute.

// DistilBertConfig.pad_token_id's default (ModelConfig.pad_token_id of the presets): the word
// embedding's padding_idx, whose row never receives a gradient (nn.Embedding(padding_idx=0)).
#define MODEL_PAD_TOKEN_ID 0

// One batch as the model reads it (views; data.h's Batch converts field by field).
typedef struct {
    const int64_t* input_ids;       // (B, T) in [0, vocab_size)
    const int64_t* attention_mask;  // (B, T) 1 = real token, 0 = padding; NULL = all ones
    const int32_t* labels;          // (B) in [0, n_labels); regression: any value (the float targets)
    int B, T;                       // 1 <= B <= the workspace's max_B, 1 <= T <= max_T
    // Training with dropout (dropout.h): the settings, or NULL = no dropout (evaluation, as
    // model.eval(); also every p = 0). The masks are keyed by the optimizer step (1-based)
    // and each row's global example index within that step's global batch: row b is example
    // first_example + b (micro-batch k of gradient accumulation with B rows: k*B; a data-parallel
    // rank adds its offset), so they do not depend on threads, ranks or micro-batching.
    int64_t step;
    int64_t first_example;
    const DropoutConfig* dropout;
} ModelBatch;

// Every activation of one forward/backward for batches of up to max_B x max_T tokens, allocated
// once (sizes from the config), plus the layers' GEMM scratch (grown on the first step, then
// kept). Not thread-safe: one step at a time.
typedef struct ModelWorkspace ModelWorkspace;

// STATUS_INVALID when max_B < 1, max_T < 1 or max_T > max_position_embeddings.
Status model_workspace_new(const ParamTable* table, int max_B, int max_T, ModelWorkspace** out);
void model_workspace_free(ModelWorkspace* ws);  // NULL is fine
// HF Trainer's label_smoothing_factor (TrainingArguments; 0, the default: the model's own loss):
// the loss of every later forward is the Trainer's LabelSmoother's (layers.h). STATUS_INVALID
// outside [0, 1), on a regression model, or above 64 labels.
Status model_workspace_set_label_smoothing(ModelWorkspace* ws, double eps);
// The bytes model_workspace_new(t, max_B, max_T) would allocate (activation arena, id and label
// buffers; the GEMM scratch allocated on first use is not counted), allocating nothing; the
// same errors as model_workspace_new. For up-front memory checks.
Status model_workspace_estimate_bytes(const ParamTable* t, int max_B, int max_T, size_t* bytes);
// The bytes the first training forward with dropout adds to a workspace of max_B x max_T (the
// masks and the dropped activations, allocated then and kept); 0 extra without dropout.
size_t model_workspace_dropout_bytes(const ParamTable* t, int max_B, int max_T);
// The bytes the first forward in a low mode (low: its GEMM dtype) adds to a workspace of
// max_B x max_T: the low copies of the weights and of the GEMM inputs kept for the backward
// (allocated then and kept); 0 in fp32.
size_t model_workspace_low_bytes(const ParamTable* t, int max_B, int max_T, DType low);
// Bytes held: the activation arena (and the dropout and low-copy arenas once allocated) plus the GEMM scratch
// currently allocated.
size_t model_workspace_bytes(const ModelWorkspace* ws);
// The phase clock the forward and backward charge (phase.h); it charges only between
// phase_clock_begin and phase_clock_end (train_step), so evaluation forwards are not timed.
PhaseClock* model_workspace_phases(ModelWorkspace* ws);

// Forward pass and loss (mean cross-entropy over the batch, fp32). params: a table buffer
// (param_table_alloc_buffer layout). logits (B, n_labels) receives the classifier's output as
// fp32 (the low-dtype values in a mixed mode), or NULL. Errors: STATUS_UNSUPPORTED when the
// backend cannot run the mode's dtype (e.g. onednn + fp16; amp_check_backend), STATUS_INVALID
// for a batch outside the workspace, an id outside the vocabulary, a label outside
// [0, n_labels) or a mask value other than 0/1. Saves what model_backward needs.
Status model_forward(ModelWorkspace* ws, const float* params, const ModelBatch* batch, const PrecisionMode* mode,
                     Gemm* gemm, float* loss, float* logits);
// Backward of the last model_forward (same params, same mode): d(loss * loss_scale) with
// respect to every parameter, WRITTEN into grads (a table buffer; its old contents are neither
// read nor kept, so it needs no zeroing: torch's first backward after zero_grad(set_to_none)).
// Gradient accumulation adds such results itself (train/accum.c). The linears' weight
// gradients are the GEMM results themselves (a -0 stays -0, as in torch; 0 + v would make it
// +0), the others are summed into zeros. loss_scale is 1, or the GradScaler's scale.
// counters (may be NULL) are incremented at the rounding points (amp.h says what is counted).
// gemm: an open backend (normally the one the forward used).
Status model_backward(ModelWorkspace* ws, const float* params, float loss_scale, Gemm* gemm, float* grads,
                      AmpCounters* counters);
// grads[0 .. alloc_numel) = 0 (model_backward does not need it: it writes every gradient)
void model_zero_grad(const ParamTable* table, float* grads);

// Saved activations of the last successful model_forward (tests, inspection), as transformers'
// output_hidden_states return them: hidden state i (B, T, D), i = 0 the embeddings' output
// (LayerNorm, then the embeddings dropout in training), i = l + 1 the output of layer l; layer
// l's attention probabilities (B, n_heads, T, T) (fp32 with padding; low-dtype values without),
// after the attention dropout in training (what eager attention returns as attn_weights).
const float* model_workspace_hidden_state(const ModelWorkspace* ws, int i);
const float* model_workspace_attention_probs(ModelWorkspace* ws, int layer);
// The dropout masks of the last successful model_forward (1 = kept), or NULL when that site did
// not run (eval, p = 0, or no such layer): embeddings (B, T, D), attention of `layer`
// (B, n_heads, T, T), ffn of `layer` (B, T, D), classifier (B, D). layer is ignored for the
// embeddings and classifier sites. For exporting masks (train --dump-dropout-masks) and tests.
const uint8_t* model_workspace_dropout_mask(const ModelWorkspace* ws, DropoutSite site, int layer);

#endif

// train.c — `trainbench train`: the reference training loop, with flags in the spirit of
// Hugging Face TrainingArguments. One run = data (synthetic task or user safetensors files),
// the model (model.h) on one GEMM backend, a precision mode with GradScaler where the mode has
// loss scaling (amp.h), one optimizer (optim.h), periodic evaluation (eval_accuracy, eval_f1)
// and Trainer-like log lines. It writes OUTPUT_DIR/results.json (config, per-step records,
// evals, summary) atomically after every log/eval and at the end, and, with --save-steps,
// checkpoints OUTPUT_DIR/checkpoint-<step>/checkpoint.safetensors (params, optimizer state,
// scaler, step, records so far; written and read by checkpoint.c) from which
// --resume-from-checkpoint continues bit for bit, plus model.safetensors + config.json
// (transformers' view of the weights). --init-from starts from transformers weights; the
// Trainer's schedule and clipping are in schedule.c, gradient accumulation
// (--gradient-accumulation-steps: one optimizer step over N micro-batches) in accum.c.
// Not here: benchmarks (bench/), comparisons with goldens (tests), reports.
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model/amp.h"
#include "core/cli.h"
#include "core/common.h"
#include "core/cpu.h"
#include "core/resources.h"
#include "model/data.h"
#include "gemm/gemm.h"
#include "model/model.h"
#include "optim/optim.h"
#include "core/safetensors.h"
#include "train/checkpoint.h"
#include "train/ddp.h"
#include "train/train.h"
#include "model/hf_weights.h"
#include "train/schedule.h"
#include "results/results.h"

#define BACKEND_AUTO "auto"  // --backend auto (backend_auto)

typedef struct {
    const char* model;          // preset name (NULL when config_path is used)
    const char* config_path;    // HF config.json
    const char* optim;
    const char* precision;
    const char* backend;
    double lr;                  // < 0: TrainingArguments default 5e-5
    double weight_decay;        // TrainingArguments default 0.0
    double adam_beta1, adam_beta2, adam_epsilon;  // TrainingArguments: 0.9, 0.999, 1e-8 (AdamW optimizers)
    double label_smoothing;     // TrainingArguments.label_smoothing_factor (0: none)
    long max_steps;
    long batch_size, eval_batch_size, seq_len;
    long eval_steps, logging_steps, save_steps;
    long seed;
    long threads;
    const char* output_dir;
    const char* resume;
    const char* train_file;
    const char* eval_file;
    const char* task;
    long n_train, n_eval;
    double init_scale;          // GradScaler
    long growth_interval;
    bool progress;              // progress bar on a terminal
    const char* init_from;      // save_pretrained folder or model.safetensors (NULL: HF init)
    const char* data_order;     // "shuffled" (default) or "sequential"
    const char* lr_scheduler_type;  // "linear" (TrainingArguments default) or "constant"
    double warmup_steps;        // as given (transformers 5.x's float: a count from 1, a ratio below); < 0: not given
    double warmup_ratio;        // < 0: not given
    double max_grad_norm;       // TrainingArguments default 1.0; <= 0: no clipping (the norm still logged)
    bool profile;               // --profile: print where the step time went
    bool force;                 // --force: skip the up-front memory check
    long grad_accum;            // --gradient-accumulation-steps (default 1)
    bool ddp;                   // --ddp: data parallel over the MPI ranks (ddp.h)
    long zero;                  // --zero 0|1: ZeRO stage (1: optimizer state sharded; needs --ddp)
    double dropout, attention_dropout, seq_classif_dropout;  // < 0: not given (config / preset)
    const char* dump_dropout_masks;  // --dump-dropout-masks DIR (NULL: none)
} TrainArgs;

typedef struct {
    int64_t step;
    double loss;
    double scale;
    bool skipped;
    AmpCounters counters;
    double lr;              // the learning rate of this step (schedule.h)
    double grad_norm;       // total norm before clipping (NaN: not computed)
    double step_time_s;
    int64_t tokens;         // positions processed: B x T (padding included, as tokens/s elsewhere)
    int64_t real_tokens;    // positions with attention_mask 1
} StepRecord;

typedef struct {
    int64_t step;
    double loss, accuracy, f1;
    double epoch;
} EvalRecord;

typedef struct {
    StepRecord* steps;
    size_t n_steps, cap_steps;
    EvalRecord* evals;
    size_t n_evals, cap_evals;
} Records;

static int train_run(int argc, char** argv);

const Command cmd_train = {
    .name = "train",
    .summary = "train the reference model (precision mode x backend x optimizer), write results",
    .usage =
        "trainbench train [--model tiny|small|distilbert-base-cased | --config FILE.json]\n"
        "    [--optim NAME] [--precision fp32|bf16|fp16|fp16-noscale | --fp16 | --bf16]\n"
        "    [--backend auto|naive|openblas|onednn] [--learning-rate X] [--weight-decay X]\n"
        "    [--adam-beta1 X] [--adam-beta2 X] [--adam-epsilon X] [--label-smoothing-factor X]\n"
        "    [--max-steps N] [--per-device-train-batch-size N] [--per-device-eval-batch-size N]\n"
        "    [--seq-len N] [--eval-steps N] [--logging-steps N] [--save-steps N] [--seed N]\n"
        "    [--threads N] [--output-dir DIR] [--resume-from-checkpoint DIR]\n"
        "    [--train-file F.safetensors [--eval-file F.safetensors] | --task paraphrase\n"
        "     --num-train-examples N --num-eval-examples N]\n"
        "    [--init-scale X] [--growth-interval N] [--no-progress] [--force]\n"
        "    [--init-from DIR|FILE.safetensors] [--data-order shuffled|sequential]\n"
        "    [--lr-scheduler-type NAME] [--warmup-steps X | --warmup-ratio X]\n"
        "    [--max-grad-norm X] [--gradient-accumulation-steps N] [--profile]\n"
        "    [--ddp [--zero 0|1]]   (under mpirun -np R; README \"Distributed\")\n"
        "    [--dropout P] [--attention-dropout P] [--seq-classif-dropout P] [--dump-dropout-masks DIR]\n"
        "  defaults: --model tiny --optim adamw_torch --precision fp32 --backend auto\n"
        "  --backend auto: resuming, the checkpoint's backend; else onednn where it runs the precision's\n"
        "  GEMMs natively (fp32; bf16 on avx512_bf16 CPUs; fp16 where oneDNN has f16 matmul), else openblas\n"
        "  --learning-rate 5e-5 --weight-decay 0 (biases and LayerNorm weights never decay; any finite values\n"
        "  the optimizer's library accepts: >= 0 for torch's and bitsandbytes', any for transformers' Adafactor)\n"
        "  --adam-beta1 0.9 --adam-beta2 0.999 --adam-epsilon 1e-8 (AdamW optimizers; Adafactor ignores them,\n"
        "  as the Trainer does); --label-smoothing-factor 0 (X != 0: the Trainer's LabelSmoother)\n"
        "  --lr-scheduler-type linear --warmup-steps 0 --max-grad-norm 1.0 (HF TrainingArguments; --warmup-steps\n"
        "  as transformers 5.x reads it: from 1 a count, truncated, below 1 a ratio of --max-steps); schedules:\n"
        "  linear, constant, cosine, cosine_with_restarts, polynomial, constant_with_warmup, inverse_sqrt\n"
        "  (transformers.get_scheduler without scheduler kwargs, as the Trainer makes them)\n"
        "  --gradient-accumulation-steps 1 (N: each optimizer step takes N micro-batches, loss / N;\n"
        "  --max-steps, --eval-steps, --logging-steps and --save-steps count optimizer steps)\n"
        "  --ddp: mpirun -np R trainbench train --ddp ...: each optimizer step takes R x N micro-batches,\n"
        "  rank k computing micro-batch a*R + k of round a; bit-identical to one process with\n"
        "  --gradient-accumulation-steps R*N (same --threads). --zero 1 shards the optimizer state\n"
        "  (whole tensors) over the ranks. Rank 0 alone writes results and checkpoints.\n"
        "  --data-order shuffled --max-steps 100\n"
        "  dropout: a preset's is 0; --config's config.json gives dropout, attention_dropout,\n"
        "  seq_classif_dropout (missing keys: DistilBertConfig's 0.1, 0.1, 0.2); the flags override\n"
        "  --per-device-train-batch-size 8 --seq-len min(128, max positions) --eval-steps 0\n"
        "  (evaluate at the end only) --logging-steps 10 --seed 42 --output-dir\n"
        "  results/train/<model>-<precision>-<optim>-<time>; synthetic task paraphrase with\n"
        "  2048 train / 512 eval examples. Before allocating, the estimated bytes (params, grads,\n"
        "  optimizer state, activations) are compared with the available memory: exit 2 with both\n"
        "  numbers when they do not fit, unless --force. An --output-dir that holds a run\n"
        "  (results.json, checkpoint-N) takes only --resume-from-checkpoint. Exit 0 when the run\n"
        "  completes, 1 when it stops on a non-finite loss or cannot write its output, 2 on bad input.",
    .run = train_run,
};

// ---- records ----
static void records_add_step(Records* r, const StepRecord* s) {
    if (r->n_steps == r->cap_steps) {
        r->cap_steps = r->cap_steps ? 2 * r->cap_steps : 64;
        r->steps = xrealloc(r->steps, r->cap_steps * sizeof *r->steps);
    }
    r->steps[r->n_steps++] = *s;
}

static void records_add_eval(Records* r, const EvalRecord* e) {
    if (r->n_evals == r->cap_evals) {
        r->cap_evals = r->cap_evals ? 2 * r->cap_evals : 16;
        r->evals = xrealloc(r->evals, r->cap_evals * sizeof *r->evals);
    }
    r->evals[r->n_evals++] = *e;
}

static json_t* records_steps_json(const Records* r) {
    json_t* a = json_array();
    for (size_t i = 0; i < r->n_steps; i++) {
        const StepRecord* s = &r->steps[i];
        json_t* o = json_object();
        json_object_set_new(o, "step", json_integer(s->step));
        json_object_set_new(o, "loss", isfinite(s->loss) ? json_real(s->loss) : json_null());
        json_object_set_new(o, "loss_scale", json_real(s->scale));
        json_object_set_new(o, "skipped", json_boolean(s->skipped));
        json_object_set_new(o, "learning_rate", isfinite(s->lr) ? json_real(s->lr) : json_null());
        json_object_set_new(o, "grad_norm", isfinite(s->grad_norm) ? json_real(s->grad_norm) : json_null());
        json_object_set_new(o, "grad_values", json_integer((json_int_t)s->counters.param_values));
        json_object_set_new(o, "grad_underflow", json_integer((json_int_t)s->counters.param_underflow));
        json_object_set_new(o, "grad_overflow", json_integer((json_int_t)s->counters.param_overflow));
        json_object_set_new(o, "act_grad_underflow", json_integer((json_int_t)s->counters.act_underflow));
        json_object_set_new(o, "act_grad_overflow", json_integer((json_int_t)s->counters.act_overflow));
        json_object_set_new(o, "step_time_s", json_real(s->step_time_s));
        json_object_set_new(o, "tokens", json_integer(s->tokens));
        json_object_set_new(o, "real_tokens", json_integer(s->real_tokens));
        json_array_append_new(a, o);
    }
    return a;
}

static json_t* records_evals_json(const Records* r) {
    json_t* a = json_array();
    for (size_t i = 0; i < r->n_evals; i++) {
        const EvalRecord* e = &r->evals[i];
        json_t* o = json_object();
        json_object_set_new(o, "step", json_integer(e->step));
        json_object_set_new(o, "epoch", json_real(e->epoch));
        json_object_set_new(o, "eval_loss", isfinite(e->loss) ? json_real(e->loss) : json_null());
        // regression: no accuracy or F1 (NaN in the record): null
        json_object_set_new(o, METRIC_EVAL_ACCURACY, isfinite(e->accuracy) ? json_real(e->accuracy) : json_null());
        json_object_set_new(o, METRIC_EVAL_F1, isfinite(e->f1) ? json_real(e->f1) : json_null());
        json_array_append_new(a, o);
    }
    return a;
}

// Reads records written by records_*_json (resume) from a checkpoint of `step` steps,
// checking every field: exactly `step` step records numbered 1..step, counters >= 0, eval
// steps within [0, step] in order. Timing fields are kept as they were.
static Status records_from_json(Records* r, json_t* steps, json_t* evals, int64_t step) {
    size_t i;
    json_t* o;
    if (!json_is_array(steps) || !json_is_array(evals))
        return status_make(STATUS_INVALID, "field records: 'records' and 'evals' must be arrays");
    if ((int64_t)json_array_size(steps) != step)
        return status_make(STATUS_INVALID, "field records: %zu step records for a checkpoint at step %lld",
                           json_array_size(steps), (long long)step);
    static const char* const COUNTS[] = {"grad_values", "grad_underflow", "grad_overflow", "act_grad_underflow",
                                         "act_grad_overflow", "tokens", "real_tokens"};
    json_array_foreach(steps, i, o) {
        StepRecord s;
        memset(&s, 0, sizeof s);
        json_t* l = json_object_get(o, "loss");
        json_t* sc = json_object_get(o, "loss_scale");
        json_t* tm = json_object_get(o, "step_time_s");
        if (!json_is_object(o) || !json_is_integer(json_object_get(o, "step")) ||
            json_integer_value(json_object_get(o, "step")) != (json_int_t)i + 1 || !(json_is_number(l) || json_is_null(l)) ||
            !json_is_number(sc) || !json_is_boolean(json_object_get(o, "skipped")) || !json_is_number(tm))
            return status_make(STATUS_INVALID, "field records[%zu]: not a step record of step %zu (step, loss, "
                               "loss_scale, skipped, step_time_s)", i, i + 1);
        int64_t v[ARRAY_LEN(COUNTS)];
        for (size_t k = 0; k < ARRAY_LEN(COUNTS); k++) {
            json_t* c = json_object_get(o, COUNTS[k]);
            if (!json_is_integer(c) || json_integer_value(c) < 0)
                return status_make(STATUS_INVALID, "field records[%zu].%s: must be an integer >= 0", i, COUNTS[k]);
            v[k] = json_integer_value(c);
        }
        s.step = (int64_t)i + 1;
        s.loss = json_is_number(l) ? json_number_value(l) : NAN;
        s.scale = json_number_value(sc);
        s.skipped = json_is_true(json_object_get(o, "skipped"));
        s.counters.param_values = (uint64_t)v[0];
        s.counters.param_underflow = (uint64_t)v[1];
        s.counters.param_overflow = (uint64_t)v[2];
        s.counters.act_underflow = (uint64_t)v[3];
        s.counters.act_overflow = (uint64_t)v[4];
        s.tokens = v[5];
        s.real_tokens = v[6];
        s.step_time_s = json_number_value(tm);
        json_t* lr = json_object_get(o, "learning_rate");
        json_t* gn = json_object_get(o, "grad_norm");
        s.lr = json_is_number(lr) ? json_number_value(lr) : NAN;
        s.grad_norm = json_is_number(gn) ? json_number_value(gn) : NAN;
        records_add_step(r, &s);
    }
    int64_t prev = 0;
    json_array_foreach(evals, i, o) {
        EvalRecord e;
        json_t* st = json_object_get(o, "step");
        if (!json_is_object(o) || !json_is_integer(st) || json_integer_value(st) < prev || json_integer_value(st) > step)
            return status_make(STATUS_INVALID, "field evals[%zu].step: must be an integer in [%lld, %lld], in order", i,
                               (long long)prev, (long long)step);
        e.step = prev = json_integer_value(st);
        e.epoch = json_number_value(json_object_get(o, "epoch"));
        json_t* l = json_object_get(o, "eval_loss");
        e.loss = json_is_number(l) ? json_number_value(l) : NAN;
        json_t* acc = json_object_get(o, METRIC_EVAL_ACCURACY), *f1 = json_object_get(o, METRIC_EVAL_F1);
        e.accuracy = json_is_number(acc) ? json_number_value(acc) : NAN;  // null: a regression's
        e.f1 = json_is_number(f1) ? json_number_value(f1) : NAN;
        records_add_eval(r, &e);
    }
    return status_ok();
}

// ---- one step (train.h) ----
static Status train_step_timed(TrainStep* t, const ModelBatch* batch, TrainStepResult* out, PhaseClock* pc) {
    Status s = t->ddp ? train_accumulate_gradients_ddp(t, batch, out)  // accum.c: R ranks x N micro-batches
                      : train_accumulate_gradients(t, batch, out);     // accum.c: 1 or N micro-batches
    if (!status_is_ok(s) || out->loss_nonfinite) return s;
    phase_enter(pc, PHASE_SCALER);
    bool found_inf = grad_scaler_unscale(t->scaler, t->grads, t->table->alloc_numel);
    phase_enter(pc, PHASE_OPTIMIZER);
    out->grad_norm = NAN;
    float clip_coef = 1.0f;  // clip_grad_norm_'s coefficient, applied inside the optimizer step
    if (t->max_grad_norm > 0) out->grad_norm = grad_clip_coef(t->table, t->grads, t->max_grad_norm, &clip_coef);
    // no clipping: the Trainer still logs the norm (_get_grad_norm: clip_grad_norm_ with max_norm inf,
    // whose coefficient clamps to 1 and leaves the gradients as they are)
    else if (t->norm_without_clipping) out->grad_norm = grad_total_norm(t->table, t->grads);
    if (t->schedule) t->mo->cfg.lr = lr_schedule_lr(t->schedule, model_optim_steps_taken(t->mo));
    out->lr = t->mo->cfg.lr;
    // With --ddp every rank holds the same reduced gradient, so found_inf, the norm and the
    // clipping above are the same bits everywhere; ZeRO-1 ranks step only the tensors whose
    // state they hold, then each rank's updated range goes to every rank.
    if (grad_scaler_should_step(found_inf)) {
        model_optim_step_scaled(t->mo, t->table, t->params, t->grads, clip_coef);
        if (t->zero_offsets) ddp_allgather_ranges(t->ddp, t->params, t->zero_offsets);
    }
    phase_enter(pc, PHASE_SCALER);
    grad_scaler_update(t->scaler, found_inf);
    out->skipped = found_inf;
    return status_ok();
}

Status train_step(TrainStep* t, const ModelBatch* batch, TrainStepResult* out) {
    memset(out, 0, sizeof *out);
    PhaseClock* pc = model_workspace_phases(t->ws);
    phase_clock_begin(pc);
    Status s = train_step_timed(t, batch, out, pc);
    phase_clock_end(pc);
    out->phases = pc->t;
    return s;
}

// ---- the run ----
typedef struct {
    TrainArgs a;
    ModelConfig mcfg;
    ParamTable table;
    Dataset ds;
    const Optimizer* optim;
    OptimConfig ocfg;
    const PrecisionMode* mode;
    const GemmBackend* backend;
    char backend_why[96];   // --backend auto: " (auto: why)" in messages and the banner; else ""
    Gemm gemm;
    ModelWorkspace* ws;
    ModelOptim mo;
    GradScaler scaler;
    float* params;
    float* grads;
    Batch* micro;           // (grad_accum) the micro-batches of the current optimizer step
    ModelBatch* micro_mb;   // (grad_accum) views of them, as train_step takes them
    float* micro_grads;     // grad_accum > 1: train_accumulate_gradients' scratch table buffer
    size_t* order;          // (N train) the current epoch's order
    int64_t order_epoch;    // epoch `order` belongs to (-1: none)
    int64_t step;           // optimizer-loop steps taken (skipped ones included)
    LrSchedule schedule;    // --lr-scheduler-type, --warmup-steps/--warmup-ratio
    DropoutConfig dropout;  // the three probabilities (all 0: none) and the mask seed (--seed)
    bool sequential;        // --data-order sequential
    char init_weights_path[4200];  // --init-from's model.safetensors ("" = HF init)
    char init_config_path[4200];   // --init-from DIR's config.json when no --model/--config
    Records rec;
    json_t* config_json;    // what defines the run (checked on resume)
    char results_path[4096];
    char made_output_dir[4096];  // the outermost folder setup created for --output-dir ("" none)
    char made_masks_dir[4096];   // the same for --dump-dropout-masks
    double run_seconds;     // wall time of this process's steps
    const char* stop_reason;
    PhaseTimes phases;      // summed over this process's steps but its warm-up step (phase.h)
    double phases_step_time_s;  // the same steps' measured step times, summed
    int64_t phases_steps;
    double gemm_busy_s, gemm_flop;  // the same steps' time in r->gemm's gemm_run calls, their FLOP
    // The first step this process runs, when more follow: its warm-up (the GEMM backend creates
    // and compiles its primitives, buffers are touched for the first time), kept out of the
    // phases above so that they describe the steady step; its time alone is reported.
    int64_t warmup_steps;   // 0 or 1
    double warmup_step_time_s;
    // --ddp (ddp.h): NULL in one process. rank 0 alone prints, evaluates and writes files.
    struct Ddp* ddp;
    int rank, ranks;        // 0 and 1 without --ddp
    int* zero_owner;        // (table.n) --zero 1: the rank holding each tensor's state, else NULL
    size_t* zero_offsets;   // (ranks + 1) --zero 1: each rank's parameter range in floats
    uint64_t* state_bytes;  // (ranks) measured optimizer state bytes of every rank (gathered)
    uint64_t* state_estimate;  // (ranks) the shard rule's closed formula per rank
    bool stopped_together;  // the loop stopped on every rank at once (step failure, non-finite loss)
} Run;

// Epochs done after `step` optimizer steps: micro-batches consumed / batches per epoch.
static double epoch_of(const Run* r, int64_t step) {
    size_t nb = dataset_n_batches(&r->ds, SPLIT_TRAIN, (int)r->a.batch_size);
    return nb ? (double)step * (double)r->a.grad_accum * (double)r->ranks / (double)nb : 0.0;
}

// Global training batch s (0-based) into dst: epoch = s / nb, batch b = s % nb of that epoch's
// order, so resuming at any step reads the same batches. --data-order sequential: rows
// b*B .. b*B+B-1 of the file in every epoch (the last batch may be short); shuffled: the
// permutation dataset_epoch_order(N, seed, epoch) (data.h documents it step by step).
static void load_train_batch(Run* r, int64_t s, Batch* dst) {
    const size_t N = r->ds.split[SPLIT_TRAIN].n;
    const size_t B = (size_t)r->a.batch_size;
    const size_t nb = dataset_n_batches(&r->ds, SPLIT_TRAIN, (int)B);
    const int64_t epoch = s / (int64_t)nb;
    const size_t b = (size_t)(s % (int64_t)nb);
    if (epoch != r->order_epoch) {
        if (r->sequential)
            for (size_t i = 0; i < N; i++) r->order[i] = i;
        else
            dataset_epoch_order(N, (uint64_t)r->a.seed, (uint64_t)epoch, r->order);
        r->order_epoch = epoch;
    }
    size_t first = b * B;
    int n = (int)(N - first < B ? N - first : B);
    dataset_gather(&r->ds, SPLIT_TRAIN, r->order + first, n, dst);
}

static ModelBatch model_batch_of(const Batch* b) {
    ModelBatch mb = {b->input_ids, b->attention_mask, b->labels, b->batch, b->seq_len, 0, 0, NULL};
    return mb;
}

// Where this process's step time went: seconds per phase (forward, backward) summed over its
// steps, their sum, the measured step times' sum (batch loading included there), and the
// step's GEMM work from the model config (model_step_cost).
static json_t* phases_json(const Run* r) {
    json_t* o = json_object();
    static const char* const DIR[2] = {"forward", "backward"};
    for (int d = 0; d < 2; d++) {
        json_t* ph = json_object();
        for (int p = 0; p < PHASE_COUNT; p++) json_object_set_new(ph, phase_name((Phase)p), json_real(r->phases.s[d][p]));
        json_object_set_new(o, DIR[d], ph);
    }
    json_object_set_new(o, "steps", json_integer(r->phases_steps));
    json_object_set_new(o, "phase_sum_s", json_real(phase_times_total(&r->phases)));
    json_object_set_new(o, "step_time_sum_s", json_real(r->phases_step_time_s));
    json_object_set_new(o, "warmup_steps", json_integer(r->warmup_steps));
    json_object_set_new(o, "warmup_step_time_s", json_real(r->warmup_step_time_s));
    ModelStepCost cost = model_step_cost(&r->mcfg, (int)r->a.batch_size, (int)r->a.seq_len);
    cost.gemm_flop *= (double)r->a.grad_accum;  // an optimizer step runs N micro-batches
    json_object_set_new(o, "gemm_flop_per_step", json_real(cost.gemm_flop));
    json_object_set_new(o, "min_bytes_per_step", json_real(cost.min_bytes));
    return o;
}

// --profile: the table of phases_json, with each phase's share and the GEMM rate reached
static void print_profile(const Run* r) {
    const PhaseTimes* t = &r->phases;
    const double sum = phase_times_total(t), n = r->phases_steps ? (double)r->phases_steps : 1;
    printf("\nwhere the step goes (%lld steps, ms per step; phases sum to %.1f%% of the measured step time)\n",
           (long long)r->phases_steps, r->phases_step_time_s > 0 ? 100.0 * sum / r->phases_step_time_s : 0.0);
    if (r->warmup_steps)
        printf("(not counted: this process's first step, its warm-up, %.3f ms: the GEMM backend creates its "
               "primitives, buffers are touched for the first time)\n", 1e3 * r->warmup_step_time_s);
    printf("  %-12s %10s %10s %10s %7s\n", "phase", "forward", "backward", "total", "share");
    double gemm = 0;
    for (int p = 0; p < PHASE_COUNT; p++) {
        const double f = t->s[PHASE_FORWARD][p], b = t->s[PHASE_BACKWARD][p];
        if (p == PHASE_QKV_GEMM || p == PHASE_OUT_GEMM || p == PHASE_FFN_GEMM || p == PHASE_ATTENTION ||
            p == PHASE_CLASSIFIER)
            gemm += f + b;
        printf("  %-12s %10.3f %10.3f %10.3f %6.1f%%\n", phase_name((Phase)p), 1e3 * f / n, 1e3 * b / n,
               1e3 * (f + b) / n, sum > 0 ? 100.0 * (f + b) / sum : 0.0);
    }
    printf("  %-12s %32.3f\n", "sum", 1e3 * sum / n);
    printf("  %-12s %32.3f\n", "step time", 1e3 * r->phases_step_time_s / n);
    ModelStepCost cost = model_step_cost(&r->mcfg, (int)r->a.batch_size, (int)r->a.seq_len);
    cost.gemm_flop *= (double)r->a.grad_accum;  // an optimizer step runs N micro-batches
    printf("GEMM work %.3f GFLOP per step; in the GEMM phases (q/k/v, out, FFN, attention, classifier: %.1f%% "
           "of the step) that is %.1f GFLOP/s. Minimum bytes per step %.1f MB.\n",
           cost.gemm_flop * 1e-9, sum > 0 ? 100.0 * gemm / sum : 0.0, gemm > 0 ? cost.gemm_flop * n / gemm * 1e-9 : 0.0,
           cost.min_bytes / 1e6);
    // the calls themselves, without the phases' other work (bias rows, conversions, softmax):
    // the rate to compare with the gemm/<backend>/... benchmarks of the same shapes
    printf("GEMM calls on the whole thread team (every GEMM but attention's per-head products, which run on "
           "one-thread handles inside its loop): %.3f GFLOP in %.3f ms per step (%.1f%% of the step), %.1f GFLOP/s.\n",
           r->gemm_flop / n * 1e-9, 1e3 * r->gemm_busy_s / n,
           r->phases_step_time_s > 0 ? 100.0 * r->gemm_busy_s / r->phases_step_time_s : 0.0,
           r->gemm_busy_s > 0 ? r->gemm_flop / r->gemm_busy_s * 1e-9 : 0.0);
}

// ---- gradient accumulation: the micro-batches of one optimizer step ----
// Optimizer step s (0-based) consumes --gradient-accumulation-steps N micro-batches of
// --per-device-train-batch-size: micro-batch k is global batch s*N + k of the order above
// (an optimizer step may span two epochs; the Trainer instead ends each epoch with a shorter
// step, README). train_step (accum.c) computes and adds their gradients.
static void accum_alloc(Run* r) {
    const int n = (int)r->a.grad_accum;
    r->micro = xcalloc((size_t)n, sizeof *r->micro);
    r->micro_mb = xcalloc((size_t)n, sizeof *r->micro_mb);
    for (int k = 0; k < n; k++) batch_alloc(&r->micro[k], (int)r->a.batch_size, (int)r->a.seq_len);
    if (n > 1 || r->ddp) r->micro_grads = param_table_alloc_buffer(&r->table);  // --ddp: always (accum.c)
}

static void accum_free(Run* r) {
    for (int k = 0; r->micro && k < (int)r->a.grad_accum; k++) batch_free(&r->micro[k]);
    free(r->micro);
    free(r->micro_mb);
    free(r->micro_grads);
}

// Loads the micro-batches of optimizer step r->step into r->micro / r->micro_mb; adds their
// positions (B x T, padding included) and real tokens to rec. With --ddp over R ranks the step
// has R*N micro-batches (global batches r->step*R*N ..): this rank loads those of its rounds,
// micro[a] = global micro-batch a*R + rank of the step (accum.c), and the token counts of
// every rank are summed (rank 0's record holds the whole step's, as one process would).
// Dropout masks are keyed by the optimizer step (1-based) and each row's index in the step's
// global batch: micro-batch j's row 0 is example j * B (dropout.h).
static void load_step_batches(Run* r, StepRecord* rec) {
    const int64_t per_step = r->a.grad_accum * r->ranks;
    for (int k = 0; k < (int)r->a.grad_accum; k++) {
        // j: this micro-batch's index within the optimizer step's R*N (round k, rank r->rank);
        // anything keyed by the example's place in the step must use j*B, not k*B
        const int64_t j = (int64_t)k * r->ranks + r->rank;
        load_train_batch(r, r->step * per_step + j, &r->micro[k]);
        r->micro_mb[k] = model_batch_of(&r->micro[k]);
        r->micro_mb[k].step = r->step + 1;
        r->micro_mb[k].first_example = j * r->a.batch_size;
        r->micro_mb[k].dropout = dropout_config_any(&r->dropout) ? &r->dropout : NULL;
        const ModelBatch mb = r->micro_mb[k];
        rec->tokens += (int64_t)mb.B * mb.T;
        for (int b = 0; b < mb.B; b++)
            for (int t = 0; t < mb.T; t++) rec->real_tokens += mb.attention_mask ? mb.attention_mask[b * mb.T + t] : 1;
    }
    if (r->ddp) {
        uint64_t v[2] = {(uint64_t)rec->tokens, (uint64_t)rec->real_tokens};
        ddp_sum_u64(r->ddp, v, 2);
        rec->tokens = (int64_t)v[0];
        rec->real_tokens = (int64_t)v[1];
    }
}

// --ddp: ranks, ZeRO stage, every rank's measured optimizer state bytes next to the shard
// rule's estimate, and the bytes rank 0 passed to MPI (ddp.h DdpTraffic).
static json_t* distributed_json(const Run* r) {
    json_t* o = json_object();
    json_object_set_new(o, "ranks", json_integer(r->ranks));
    json_object_set_new(o, "zero_stage", json_integer(r->a.zero));
    json_object_set_new(o, "micro_batches_per_step", json_integer(r->a.grad_accum * r->ranks));
    json_t* m = json_array();
    json_t* e = json_array();
    for (int k = 0; k < r->ranks; k++) {
        json_array_append_new(m, json_integer((json_int_t)r->state_bytes[k]));
        json_array_append_new(e, json_integer((json_int_t)r->state_estimate[k]));
    }
    json_object_set_new(o, "optimizer_state_bytes_per_rank", m);
    json_object_set_new(o, "optimizer_state_estimate_bytes_per_rank", e);
    // the communication model (model/comm_model.h) for one step of every rank, next to rank 0's measured bytes
    json_t* pf = json_array();
    json_t* mg = json_array();
    json_t* mp = json_array();
    for (int k = 0; k < r->ranks; k++) {
        const size_t floats = r->zero_offsets ? r->zero_offsets[k + 1] - r->zero_offsets[k] : 0;
        CommStepBytes model = comm_model_step_bytes(r->table.alloc_numel, r->ranks, k, (int)r->a.grad_accum, floats, 1);
        json_array_append_new(pf, json_integer((json_int_t)floats));
        json_array_append_new(mg, json_integer((json_int_t)model.grad_bytes));
        json_array_append_new(mp, json_integer((json_int_t)model.param_bytes));
    }
    json_object_set_new(o, "zero_param_floats_per_rank", pf);
    json_object_set_new(o, "model_grad_bytes_per_step_per_rank", mg);
    json_object_set_new(o, "model_param_bytes_per_step_per_rank", mp);
    DdpTraffic tr = ddp_traffic(r->ddp);
    json_object_set_new(o, "rank0_grad_bytes", json_integer((json_int_t)tr.grad_bytes));
    json_object_set_new(o, "rank0_param_bytes", json_integer((json_int_t)tr.param_bytes));
    json_object_set_new(o, "rank0_other_bytes", json_integer((json_int_t)tr.other_bytes));
    json_object_set_new(o, "rank0_grad_seconds", json_real(tr.grad_seconds));
    json_object_set_new(o, "rank0_param_seconds", json_real(tr.param_seconds));
    return o;
}

// --dump-dropout-masks DIR: the masks of optimizer step r->step + 1 (the batches just loaded)
// as DIR/masks-step-<s>.safetensors, one U8 tensor per site that runs (1 = kept), named after
// the nn.Dropout module transformers applies it with, rows = every micro-batch's rows in order:
//   distilbert.embeddings.dropout                        (rows, T, D)
//   distilbert.transformer.layer.<l>.attention.dropout   (rows, n_heads, T, T)
//   distilbert.transformer.layer.<l>.ffn.dropout         (rows, T, D)
//   dropout                                              (rows, D)  the classifier's
//   example_index (I64, rows): each row's index in the step's global batch (the mask key)
// and metadata (format, step, seed, the three p). The masks are recomputed from their keys
// (dropout_fill_mask), exactly what model_forward draws (tests/test_dropout.c checks it).
static Status dump_dropout_masks(const Run* r) {
    const int n_micro = (int)r->a.grad_accum;
    const int64_t T = r->micro_mb[0].T, D = r->mcfg.dim, H = r->mcfg.n_heads;
    int64_t rows = 0;
    for (int k = 0; k < n_micro; k++) rows += r->micro_mb[k].B;
    const DropoutConfig* d = &r->dropout;
    StWriter* w = st_writer_new();
    int64_t* examples = xmalloc((size_t)rows * sizeof(int64_t));
    for (int k = 0, row = 0; k < n_micro; k++)
        for (int b = 0; b < r->micro_mb[k].B; b++) examples[row++] = r->micro_mb[k].first_example + b;
    st_writer_add(w, "example_index", DTYPE_I64, 1, &rows, examples);
    free(examples);
    // one site: per_example elements per row, for every micro-batch
#define DUMP_SITE(name, site, layer, p, ndim, ...)                                                          \
        do {                                                                                                    \
            const int64_t shape_[] = {rows, __VA_ARGS__};                                                       \
            size_t per_ = 1;                                                                                    \
            for (int j_ = 1; j_ < (ndim); j_++) per_ *= (size_t)shape_[j_];                                     \
            uint8_t* m_ = xmalloc((size_t)rows * per_);                                                         \
            for (int k_ = 0, r0_ = 0; k_ < n_micro; r0_ += r->micro_mb[k_].B, k_++)                             \
                dropout_fill_mask(m_ + (size_t)r0_ * per_, d->seed, r->micro_mb[k_].step,                        \
                                  r->micro_mb[k_].first_example, r->micro_mb[k_].B, per_, site, layer, p);       \
            st_writer_add(w, name, DTYPE_U8, ndim, shape_, m_);                                                 \
            free(m_);                                                                                           \
        } while (0)
    if (d->hidden > 0) DUMP_SITE("distilbert.embeddings.dropout", DROPOUT_SITE_EMBEDDINGS, 0, d->hidden, 3, T, D);
    for (int l = 0; l < (int)r->mcfg.n_layers; l++) {
        char name[128];
        if (d->attention > 0) {
            snprintf(name, sizeof name, "distilbert.transformer.layer.%d.attention.dropout", l);
            DUMP_SITE(name, DROPOUT_SITE_ATTENTION, l, d->attention, 4, H, T, T);
        }
        if (d->hidden > 0) {
            snprintf(name, sizeof name, "distilbert.transformer.layer.%d.ffn.dropout", l);
            DUMP_SITE(name, DROPOUT_SITE_FFN, l, d->hidden, 3, T, D);
        }
    }
    if (d->classifier > 0) DUMP_SITE("dropout", DROPOUT_SITE_CLASSIFIER, 0, d->classifier, 2, D);
#undef DUMP_SITE
    char v[64], path[4400];
    st_writer_meta(w, "format", "trainbench-dropout-masks-1");
    snprintf(v, sizeof v, "%lld", (long long)r->micro_mb[0].step);
    st_writer_meta(w, "step", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)d->seed);
    st_writer_meta(w, "seed", v);
    snprintf(v, sizeof v, "%.17g", d->hidden);
    st_writer_meta(w, "dropout", v);
    snprintf(v, sizeof v, "%.17g", d->attention);
    st_writer_meta(w, "attention_dropout", v);
    snprintf(v, sizeof v, "%.17g", d->classifier);
    st_writer_meta(w, "seq_classif_dropout", v);
    snprintf(path, sizeof path, "%s/masks-step-%lld.safetensors", r->a.dump_dropout_masks,
             (long long)r->micro_mb[0].step);
    Status s = st_writer_save(w, path);
    st_writer_free(w);
    return s;
}

static json_t* summary_json(const Run* r) {
    json_t* o = json_object();
    double time_sum = 0, loss_sum = 0;
    int64_t tokens = 0, skipped = 0, n_loss = 0;
    for (size_t i = 0; i < r->rec.n_steps; i++) {
        const StepRecord* s = &r->rec.steps[i];
        time_sum += s->step_time_s;
        tokens += s->tokens;
        skipped += s->skipped;
        if (isfinite(s->loss)) {
            loss_sum += s->loss;
            n_loss++;
        }
    }
    size_t n = r->rec.n_steps;
    json_object_set_new(o, "steps", json_integer((json_int_t)n));
    json_object_set_new(o, "skipped_steps", json_integer(skipped));
    json_object_set_new(o, "train_loss", n_loss ? json_real(loss_sum / (double)n_loss) : json_null());
    json_object_set_new(o, "final_loss", n && isfinite(r->rec.steps[n - 1].loss) ? json_real(r->rec.steps[n - 1].loss) : json_null());
    json_object_set_new(o, "train_runtime_s", json_real(time_sum));
    json_object_set_new(o, "mean_step_time_s", json_real(n ? time_sum / (double)n : 0));
    json_object_set_new(o, "tokens_per_s", json_real(time_sum > 0 ? (double)tokens / time_sum : 0));
    // this process's state (with --zero 1 rank 0's shard; summary.distributed has every rank's)
    json_object_set_new(o, "optimizer_state_bytes", json_integer((json_int_t)model_optim_measured_bytes(&r->mo)));
    json_object_set_new(o, "optimizer_state_estimate_bytes", json_integer((json_int_t)r->state_estimate[0]));
    json_object_set_new(o, "final_loss_scale", json_real(grad_scaler_loss_scale(&r->scaler)));
    if (r->rec.n_evals) {
        const EvalRecord* e = &r->rec.evals[r->rec.n_evals - 1];
        json_object_set_new(o, METRIC_EVAL_ACCURACY, isfinite(e->accuracy) ? json_real(e->accuracy) : json_null());
        json_object_set_new(o, METRIC_EVAL_F1, isfinite(e->f1) ? json_real(e->f1) : json_null());
    }
    json_object_set_new(o, "phases", phases_json(r));
    if (r->ddp) json_object_set_new(o, "distributed", distributed_json(r));
    return o;
}

// results.json, atomically (temp file + rename): a reader never sees a partial file.
static Status write_results(const Run* r, const char* status) {
    json_t* records = records_steps_json(&r->rec);
    json_t* evals = records_evals_json(&r->rec);
    json_t* summary = summary_json(r);
    Status s = train_file_write(r->results_path, TRAINBENCH_VERSION, status, r->config_json, records, evals, summary);
    json_decref(records);
    json_decref(evals);
    json_decref(summary);
    return s;
}

// numpy's float32 sum of a contiguous array (np.add.reduce: pairwise_sum, from +0): fewer than 8
// values one by one; up to 128, eight running sums then ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) and
// the rest one by one; above, the two halves (the first a multiple of 8) summed apart. Checked
// against numpy 2 on 1,520 random float32 arrays of 1 to 9,000 values: 0 differ.
static float numpy_sum_f32(const float* a, size_t n) {
    if (n < 8) {
        float r = 0.0f;
        for (size_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        size_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + (size_t)j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return numpy_sum_f32(a, n2) + numpy_sum_f32(a + n2, n - n2);
}

// The Trainer's eval_loss (evaluation_loop): each batch's loss repeated once per example, the
// non-finite ones dropped when any is finite (logging_nan_inf_filter, default true), then numpy's
// float32 mean, sum / count in float32. In place: losses is reordered.
static double trainer_eval_loss(float* losses, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(losses[i])) losses[k++] = losses[i];
    if (k == 0) k = n;  // none finite: all kept (their mean is not finite)
    if (k == 0) return NAN;
    return (double)(numpy_sum_f32(losses, k) / (float)k);
}

static Status evaluate(Run* r, EvalRecord* out) {
    const Dataset* ds = &r->ds;
    size_t n = ds->split[SPLIT_EVAL].n;
    out->step = r->step;
    out->epoch = epoch_of(r, r->step);
    out->loss = NAN;
    out->accuracy = 0;
    out->f1 = 0;
    if (n == 0) return status_ok();
    if (r->mcfg.regression) out->accuracy = out->f1 = NAN;  // eval_loss (the MSE) alone, as the Trainer's
    const int K = (int)r->mcfg.n_labels;
    const int B = (int)r->a.eval_batch_size;
    Batch eb;
    batch_alloc(&eb, B, (int)ds->seq_len);
    float* logits = xmalloc((size_t)B * (size_t)K * sizeof(float));
    int32_t* pred = xmalloc((size_t)B * sizeof(int32_t));
    int64_t* cm = xcalloc((size_t)K * (size_t)K, sizeof(int64_t));
    float* losses = xmalloc((n ? n : 1) * sizeof(float));  // each batch's loss once per example
    size_t n_losses = 0;
    Status s = status_ok();
    size_t nb = dataset_n_batches(ds, SPLIT_EVAL, B);
    for (size_t k = 0; k < nb; k++) {
        dataset_get_batch(ds, SPLIT_EVAL, k, B, &eb);
        ModelBatch mb = model_batch_of(&eb);
        float loss;
        s = model_forward(r->ws, r->params, &mb, r->mode, &r->gemm, &loss, logits);
        if (!status_is_ok(s)) break;
        for (int i = 0; i < eb.batch && n_losses < n; i++) losses[n_losses++] = loss;  // losses.repeat(batch_size)
        if (r->mcfg.regression) continue;  // the labels are targets, not classes
        metrics_argmax(logits, (size_t)eb.batch, K, pred);
        metrics_confusion_add(cm, K, eb.labels, pred, (size_t)eb.batch);
    }
    if (status_is_ok(s)) {
        out->loss = trainer_eval_loss(losses, n_losses);
        if (!r->mcfg.regression) {
            EvalMetrics m = metrics_from_confusion(cm, K);
            out->accuracy = m.accuracy;
            out->f1 = m.f1;
        }
    }
    free(losses);
    free(cm);
    free(pred);
    free(logits);
    batch_free(&eb);
    return s;
}

// ---- checkpoints (checkpoint.c) ----
static CheckpointRun checkpoint_run_of(Run* r) {
    CheckpointRun c = {&r->table, r->params, &r->mo, &r->scaler, r->config_json, &r->mcfg, &r->dropout};
    return c;
}

// --zero 1: rank 0 gathers every other rank's optimizer state for the checkpoint (temporary
// states, freed after the save: rank 0 then briefly holds the whole state, README
// "Distributed"); owners send their tensors' state in tensor order. Rank 0 keeps the received
// states in r->mo.states until zero_release frees them (model_optim_step never sees them).
static void zero_gather(Run* r) {
    for (size_t i = 0; i < r->table.n; i++) {
        const int owner = r->zero_owner[i];
        if (owner == 0) continue;
        if (r->rank == 0) {
            OptimConfig c = model_optim_tensor_config(&r->mo.cfg, r->mo.embeddings_32bit, &r->table.t[i]);
            OptimState* st = r->optim->init(&r->table.t[i].shape, &c);
            for (int k = 0; k < st->n_tensors; k++)
                ddp_recv_bytes(r->ddp, st->tensors[k].data,
                               shape_numel(&st->tensors[k].shape) * dtype_traits(st->tensors[k].dtype)->size, owner,
                               (int)i);
            st->step = model_optim_steps_taken(&r->mo);
            r->mo.states[i] = st;
        } else if (owner == r->rank) {
            const OptimState* st = r->mo.states[i];
            for (int k = 0; k < st->n_tensors; k++)
                ddp_send_bytes(r->ddp, st->tensors[k].data,
                               shape_numel(&st->tensors[k].shape) * dtype_traits(st->tensors[k].dtype)->size, 0,
                               (int)i);
        }
    }
}

static void zero_release(Run* r) {
    for (size_t i = 0; r->rank == 0 && i < r->table.n; i++)
        if (r->zero_owner[i] != 0 && r->mo.states[i]) {
            r->optim->free(r->mo.states[i]);
            r->mo.states[i] = NULL;
        }
}

static Status save_checkpoint(Run* r) {
    if (r->zero_owner) zero_gather(r);
    if (r->rank != 0) return status_ok();  // rank 0 alone writes
    CheckpointRun c = checkpoint_run_of(r);
    json_t* recs = json_object();
    json_object_set_new(recs, "records", records_steps_json(&r->rec));
    json_object_set_new(recs, "evals", records_evals_json(&r->rec));
    Status s = checkpoint_save(r->a.output_dir, r->step, &c, recs);
    json_decref(recs);
    if (r->zero_owner) zero_release(r);
    return s;
}

// Restores params, optimizer state, scaler, step and records; the checkpoint must come from a
// run with the same config (else STATUS_INVALID naming the first differing field).
static Status load_checkpoint(Run* r, const char* dir) {
    CheckpointRun c = checkpoint_run_of(r);
    char path[4300];
    int64_t step = 0;
    json_t* recs = NULL;
    Status s = checkpoint_load(dir, &c, &step, &recs, path, sizeof path);
    if (status_is_ok(s)) {
        s = records_from_json(&r->rec, json_object_get(recs, "records"), json_object_get(recs, "evals"), step);
        if (!status_is_ok(s)) s = status_make(STATUS_INVALID, "%s: %s", path, s.msg);
        r->step = step;
    }
    json_decref(recs);
    return s;
}

// ---- logging ----
static void print_progress(const Run* r, double elapsed, double loss) {
    long total = r->a.max_steps;
    int width = 30, filled = total ? (int)((double)width * (double)r->step / (double)total) : width;
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; i++) fputc(i < filled ? '#' : '.', stderr);
    fprintf(stderr, "] %lld/%ld steps  %.2f it/s  loss %.4f ", (long long)r->step, total,
            elapsed > 0 ? (double)r->rec.n_steps / elapsed : 0.0, loss);
    fflush(stderr);
}

static void clear_progress(const Run* r) {
    if (r->a.progress) fprintf(stderr, "\r%*s\r", 80, "");
}

// --backend auto, the default: resuming, the backend the checkpoint's run used (a run continues
// bit for bit only on the GEMMs it started on); otherwise onednn where it runs the precision's
// GEMMs natively (fp32 and, on CPUs with avx512_bf16, bf16; fp16 where oneDNN itself reports an
// f16 matmul: Debian's 2.6 has none, not even on an AMX Xeon with avx512_fp16): the fastest
// backend on every train_step measured here (small: fp32 23.0k against openblas's 18.8k tokens/s, bf16 36.2k against 17.5k; tiny equal),
// else openblas, else naive (which runs everything). `why` receives " (auto: ...)" for messages
// and the banner.
static const char* backend_auto(const PrecisionMode* m, const char* resume, char* why, size_t cap) {
    if (resume) {
        static char saved[64];
        checkpoint_backend_peek(resume, saved, sizeof saved);
        if (saved[0]) {
            snprintf(why, cap, " (auto: the checkpoint's)");
            return saved;
        }
    }
    const GemmBackend* onednn = gemm_find("onednn");
    char w[256] = "";
    if (onednn && onednn->supports(m->low, m->low, w, sizeof w) == GEMM_NATIVE &&
        onednn->supports(m->low, DTYPE_F32, w, sizeof w) == GEMM_NATIVE) {
        snprintf(why, cap, " (auto: runs %s GEMMs natively here)", dtype_name(m->low));
        return "onednn";
    }
    // a build without a library keeps its registry entry, which answers "not built ..."
    const bool built = onednn && strncmp(w, "not built", 9) != 0;
    static const char* const ORDER[] = {"openblas", "naive"};
    for (size_t i = 0; i < ARRAY_LEN(ORDER); i++) {
        const GemmBackend* b = gemm_find(ORDER[i]);
        if (b && status_is_ok(amp_check_backend(m, b))) {
            snprintf(why, cap, " (auto: %s)",
                     i > 0   ? "no library backend runs this precision in this build"
                     : built ? "onednn has no native GEMMs of this precision here"
                             : "built without onednn");
            return ORDER[i];
        }
    }
    snprintf(why, cap, " (auto)");
    return "naive";
}

// ---- argument parsing ----
static bool parse_float_flag(int argc, char** argv, int* i, const char* name, double* out) {
    const char* v;
    if (!flag_value(&cmd_train, argc, argv, i, name, &v)) return false;
    if (!parse_double(v, out) || !isfinite(*out)) {
        cli_usage_error(&cmd_train, "%s must be a finite number (got '%s')", name, v);
        return false;
    }
    return true;
}

static int parse_args(int argc, char** argv, TrainArgs* a) {
    memset(a, 0, sizeof *a);
    a->optim = "adamw_torch";
    a->backend = BACKEND_AUTO;
    a->lr = 5e-5;  // TrainingArguments.learning_rate
    a->weight_decay = 0.0;
    a->adam_beta1 = 0.9;
    a->adam_beta2 = 0.999;
    a->adam_epsilon = 1e-8;
    a->max_steps = 100;
    a->batch_size = 8;
    a->eval_batch_size = 8;
    a->seq_len = -1;
    a->logging_steps = 10;
    a->seed = 42;
    a->threads = 0;
    a->task = "paraphrase";
    a->n_train = 2048;
    a->n_eval = 512;
    a->init_scale = 65536.0;
    a->growth_interval = 2000;
    a->progress = isatty(STDERR_FILENO);
    a->data_order = "shuffled";
    a->lr_scheduler_type = "linear";
    a->warmup_steps = -1;
    a->warmup_ratio = -1;
    a->max_grad_norm = 1.0;
    a->grad_accum = 1;
    a->dropout = a->attention_dropout = a->seq_classif_dropout = -1;
    const char* precision = NULL;
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
#define STR_FLAG(flag, field) \
    else if (flag_matches(arg, flag)) { if (!flag_value(&cmd_train, argc, argv, &i, flag, &a->field)) return 2; }
#define INT_FLAG(flag, field, lo, hi) \
    else if (flag_matches(arg, flag)) { if (!flag_int(&cmd_train, argc, argv, &i, flag, lo, hi, &a->field)) return 2; }
        if (0) {
        }
        STR_FLAG("--model", model)
        STR_FLAG("--config", config_path)
        STR_FLAG("--optim", optim)
        STR_FLAG("--backend", backend)
        STR_FLAG("--output-dir", output_dir)
        STR_FLAG("--resume-from-checkpoint", resume)
        STR_FLAG("--train-file", train_file)
        STR_FLAG("--eval-file", eval_file)
        STR_FLAG("--task", task)
        STR_FLAG("--init-from", init_from)
        STR_FLAG("--data-order", data_order)
        STR_FLAG("--lr-scheduler-type", lr_scheduler_type)
        STR_FLAG("--dump-dropout-masks", dump_dropout_masks)
        INT_FLAG("--max-steps", max_steps, 1, 100000000)
        INT_FLAG("--per-device-train-batch-size", batch_size, 1, 65536)
        INT_FLAG("--per-device-eval-batch-size", eval_batch_size, 1, 65536)
        INT_FLAG("--gradient-accumulation-steps", grad_accum, 1, 4096)
        INT_FLAG("--seq-len", seq_len, 1, 1 << 20)
        INT_FLAG("--eval-steps", eval_steps, 0, 100000000)
        INT_FLAG("--logging-steps", logging_steps, 1, 100000000)
        INT_FLAG("--save-steps", save_steps, 0, 100000000)
        INT_FLAG("--seed", seed, 0, 0x7FFFFFFFFFFFFFFF)
        INT_FLAG("--threads", threads, 1, 1024)
        INT_FLAG("--num-train-examples", n_train, 1, INT64_C(1) << 36)
        INT_FLAG("--num-eval-examples", n_eval, 0, INT64_C(1) << 36)
        INT_FLAG("--growth-interval", growth_interval, 1, 0x7FFFFFFF)
        INT_FLAG("--zero", zero, 0, 1)
        else if (flag_matches(arg, "--precision")) {
            const char* v;
            if (!flag_value(&cmd_train, argc, argv, &i, "--precision", &v)) return 2;
            if (precision && strcmp(precision, v) != 0)
                return cli_usage_error(&cmd_train, "--precision %s conflicts with %s given earlier", v, precision);
            precision = v;
        } else if (!strcmp(arg, "--fp16") || !strcmp(arg, "--bf16")) {
            const char* v = arg + 2;
            if (precision && strcmp(precision, v) != 0)
                return cli_usage_error(&cmd_train, "%s conflicts with precision %s given earlier", arg, precision);
            precision = v;
        } else if (flag_matches(arg, "--learning-rate")) {
            // any finite value: TrainingArguments checks none, the optimizer's own rule applies
            // (validate(): torch's and bitsandbytes' lr >= 0; transformers' Adafactor any)
            if (!parse_float_flag(argc, argv, &i, "--learning-rate", &a->lr)) return 2;
        } else if (flag_matches(arg, "--label-smoothing-factor")) {
            // any finite value: the Trainer smooths when it is != 0 and checks no range
            if (!parse_float_flag(argc, argv, &i, "--label-smoothing-factor", &a->label_smoothing)) return 2;
        } else if (flag_matches(arg, "--adam-beta1")) {
            if (!parse_float_flag(argc, argv, &i, "--adam-beta1", &a->adam_beta1)) return 2;
        } else if (flag_matches(arg, "--adam-beta2")) {
            if (!parse_float_flag(argc, argv, &i, "--adam-beta2", &a->adam_beta2)) return 2;
        } else if (flag_matches(arg, "--adam-epsilon")) {
            if (!parse_float_flag(argc, argv, &i, "--adam-epsilon", &a->adam_epsilon)) return 2;
        } else if (flag_matches(arg, "--weight-decay")) {
            // as --learning-rate: the optimizer's rule (torch, bitsandbytes >= 0; transformers' Adafactor any)
            if (!parse_float_flag(argc, argv, &i, "--weight-decay", &a->weight_decay)) return 2;
        } else if (flag_matches(arg, "--warmup-steps")) {
            // TrainingArguments.warmup_steps (transformers 5.x, a float read by get_warmup_steps:
            // schedule.h lr_schedule_warmup_steps); < 0 raises there
            if (!parse_float_flag(argc, argv, &i, "--warmup-steps", &a->warmup_steps)) return 2;
            if (!(a->warmup_steps >= 0 && a->warmup_steps <= 100000000))
                return cli_usage_error(&cmd_train, "--warmup-steps must be in [0, 100000000] (a count from 1, a ratio of "
                                       "--max-steps below 1; got %g)", a->warmup_steps);
        } else if (flag_matches(arg, "--warmup-ratio")) {
            if (!parse_float_flag(argc, argv, &i, "--warmup-ratio", &a->warmup_ratio)) return 2;
            if (!(a->warmup_ratio >= 0 && a->warmup_ratio < 1))
                return cli_usage_error(&cmd_train, "--warmup-ratio must be in [0, 1) (got %g)", a->warmup_ratio);
        } else if (flag_matches(arg, "--max-grad-norm")) {
            // any finite value: the Trainer clips when `max_grad_norm > 0`, else only logs the norm
            if (!parse_float_flag(argc, argv, &i, "--max-grad-norm", &a->max_grad_norm)) return 2;
        } else if (flag_matches(arg, "--dropout") || flag_matches(arg, "--attention-dropout") ||
                   flag_matches(arg, "--seq-classif-dropout")) {
            const char* flag = flag_matches(arg, "--dropout")             ? "--dropout"
                               : flag_matches(arg, "--attention-dropout") ? "--attention-dropout"
                                                                          : "--seq-classif-dropout";
            double* dst = !strcmp(flag, "--dropout")             ? &a->dropout
                          : !strcmp(flag, "--attention-dropout") ? &a->attention_dropout
                                                                 : &a->seq_classif_dropout;
            if (!parse_float_flag(argc, argv, &i, flag, dst)) return 2;
            if (!(*dst >= 0 && *dst <= 1))
                return cli_usage_error(&cmd_train, "%s must be a probability in [0, 1] (got %g)", flag, *dst);
        } else if (flag_matches(arg, "--init-scale")) {
            if (!parse_float_flag(argc, argv, &i, "--init-scale", &a->init_scale)) return 2;
        } else if (!strcmp(arg, "--no-progress")) {
            a->progress = false;
        } else if (!strcmp(arg, "--profile")) {
            a->profile = true;
        } else if (!strcmp(arg, "--force")) {
            a->force = true;
        } else if (!strcmp(arg, "--ddp")) {
            a->ddp = true;
        } else {
            return cli_unknown_flag(&cmd_train, arg);
        }
#undef STR_FLAG
#undef INT_FLAG
    }
    a->precision = precision ? precision : "fp32";
    if (a->model && a->config_path) return cli_usage_error(&cmd_train, "give --model or --config, not both");
    if (!a->model && !a->config_path && !a->init_from) a->model = "tiny";
    if (a->eval_file && !a->train_file) return cli_usage_error(&cmd_train, "--eval-file needs --train-file");
    if (a->train_file) {  // the synthetic task's settings would be silently ignored
        static const char* const SYNTHETIC[] = {"--num-train-examples", "--num-eval-examples", "--task", "--seq-len"};
        for (int k = 1; k < argc; k++)
            for (size_t j = 0; j < ARRAY_LEN(SYNTHETIC); j++)
                if (flag_matches(argv[k], SYNTHETIC[j]))
                    return cli_usage_error(&cmd_train, "%s sets up the synthetic task; with --train-file the data files "
                                           "give the examples and the sequence length (drop one of the two)",
                                           SYNTHETIC[j]);
    }
    if (strcmp(a->data_order, "shuffled") != 0 && strcmp(a->data_order, "sequential") != 0)
        return cli_usage_error(&cmd_train, "--data-order: unknown order '%s' (allowed: shuffled, sequential)",
                               a->data_order);
    LrScheduleType lt;
    if (!lr_schedule_find(a->lr_scheduler_type, &lt))
        return cli_usage_error(&cmd_train, "--lr-scheduler-type: unknown schedule '%s' (allowed: %s)",
                               a->lr_scheduler_type, lr_schedule_names_list());
    if (a->warmup_steps >= 0 && a->warmup_ratio >= 0)
        return cli_usage_error(&cmd_train, "give --warmup-steps or --warmup-ratio, not both");
    if (lt == LR_SCHEDULE_CONSTANT && (a->warmup_steps > 0 || a->warmup_ratio > 0))
        return cli_usage_error(&cmd_train, "--lr-scheduler-type constant has no warmup (as transformers' \"constant\"); "
                               "use linear, or drop --warmup-steps/--warmup-ratio");
    if (a->zero && !a->ddp)
        return cli_usage_error(&cmd_train, "--zero %ld shards the optimizer state over MPI ranks: it needs --ddp "
                               "(mpirun -np R trainbench train --ddp --zero 1 ...)", a->zero);
    if (a->init_from && a->resume)
        return cli_usage_error(&cmd_train, "give --init-from or --resume-from-checkpoint, not both (a checkpoint has "
                               "its own weights)");
    if (a->dump_dropout_masks && a->ddp)  // each rank holds only its micro-batches; one file per step is not made
        return cli_usage_error(&cmd_train, "--dump-dropout-masks is not supported with --ddp (run it in one process: "
                               "the masks depend only on seed, step and example index, not on the ranks)");
    return 0;
}

int train_check_args(int argc, char** argv) {
    TrainArgs a;
    return parse_args(argc, argv, &a);
}

// ---- setup ----
// --init-from PATH: a folder (save_pretrained: config.json + model.safetensors; its config.json
// is the model's unless --model/--config is given) or one safetensors file with transformers'
// parameter names (the shape then comes from --model/--config, default tiny).
static Status resolve_init_from(Run* r) {
    TrainArgs* a = &r->a;
    if (!a->init_from) return status_ok();
    if (path_is_dir(a->init_from)) {
        snprintf(r->init_weights_path, sizeof r->init_weights_path, "%s/%s", a->init_from, HF_WEIGHTS_FILE);
        if (!a->model && !a->config_path) {
            snprintf(r->init_config_path, sizeof r->init_config_path, "%s/%s", a->init_from, HF_CONFIG_FILE);
            if (access(r->init_config_path, R_OK) != 0)
                return status_make(STATUS_INVALID, "%s has no readable %s (a save_pretrained folder has one; or give "
                                   "--config FILE.json / --model NAME)", a->init_from, HF_CONFIG_FILE);
            a->config_path = r->init_config_path;
        }
    } else {
        snprintf(r->init_weights_path, sizeof r->init_weights_path, "%s", a->init_from);
        if (!a->model && !a->config_path) a->model = "tiny";
    }
    return status_ok();
}

// TrainingArguments' lr schedule (--lr-scheduler-type), warmup from --warmup-steps or
// --warmup-ratio as get_warmup_steps reads them (schedule.h).
static int setup_schedule(Run* r) {
    const TrainArgs* a = &r->a;
    CHECK(lr_schedule_find(a->lr_scheduler_type, &r->schedule.type));
    r->schedule.base_lr = r->ocfg.lr;
    r->schedule.training_steps = a->max_steps;
    // --warmup-ratio is warmup_steps below 1 by its old name (the two are never both given)
    const double w = a->warmup_steps >= 0 ? a->warmup_steps : a->warmup_ratio;
    r->schedule.warmup_steps = w >= 0 ? lr_schedule_warmup_steps(w, a->max_steps) : 0;
    const char* why = lr_schedule_refusal(&r->schedule);
    return why ? user_error("--lr-scheduler-type %s: %s", a->lr_scheduler_type, why) : 0;
}

// HF Trainer with a bitsandbytes 8-bit optimizer (trainer.py: optimizer_kwargs optim_bits 8)
// registers GlobalOptimManager.register_module_override(module, "weight", {"optim_bits": 32}) for
// every nn.Embedding, so the word and position embeddings keep 32-bit state (measured against the
// real Trainer, transformers 5.24 + bitsandbytes 0.50: bit-identical with it, 4,471 embedding
// values apart without it after 2 steps). The 8-bit optimizers are the ones with min_8bit_size.
static bool trainer_embeddings_32bit(const Optimizer* o) {
    for (const char* const* k = o->keywords; k && *k; k++)
        if (!strcmp(*k, "min_8bit_size")) return true;
    return false;
}

// The bytes a dataset's arrays hold: per example T token ids and T mask values (int64 each) and
// its label. Saturates: an absurd --num-train-examples gives a huge need, never a wrapped one.
static uint64_t data_bytes(uint64_t n_examples, uint64_t T) {
    const uint64_t per = T * 16 + 8;
    return n_examples > UINT64_MAX / per ? UINT64_MAX : n_examples * per;
}

static uint64_t dataset_bytes(const Dataset* ds) {
    uint64_t n = 0;
    for (int k = 0; k < SPLIT_COUNT; k++) n += ds->split[k].n;
    return data_bytes(n, (uint64_t)ds->seq_len);
}

// Before the big allocations: params + grads (fp32 table buffers), the optimizer state (its
// closed formula, SPEC.md section 5) and the activation workspace for the larger of the train
// and eval batches (model_workspace_estimate_bytes, plus the low-copy arena of a bf16/fp16 run;
// the GEMM scratch is not counted) against
// the memory available (resources.h). Exit 2 with both numbers unless --force.
// With --gradient-accumulation-steps N > 1 or --ddp a third table buffer (each micro-batch's
// gradient, accum.c) is counted, with --ddp the reduction's receive buffer (ddp.h), with
// --zero 1 this rank's shard of the state (plus, on rank 0 when it saves checkpoints, the
// other ranks' state it gathers for the save). The ranks mpirun started on this machine all
// allocate at once: each counts its own need times their number (ddp_local_size_from_env),
// taking the others to need what it needs (ZeRO-1 shards differ a little).
static int check_memory(Run* r, int max_b) {
    size_t ws_bytes = 0;
    Status s = model_workspace_estimate_bytes(&r->table, max_b, (int)r->a.seq_len, &ws_bytes);
    if (!status_is_ok(s)) return user_error("workspace: %s", s.msg);
    if (dropout_config_any(&r->dropout))  // masks and dropped activations (model.h)
        ws_bytes += model_workspace_dropout_bytes(&r->table, max_b, (int)r->a.seq_len);
    // bf16/fp16: the weights' and GEMM inputs' low copies kept for the backward (model.h)
    ws_bytes += model_workspace_low_bytes(&r->table, max_b, (int)r->a.seq_len, r->mode->low);
    uint64_t buf = (uint64_t)r->table.alloc_numel * sizeof(float);
    uint64_t state = model_optim_estimate_bytes(&r->table, r->optim, &r->ocfg, trainer_embeddings_32bit(r->optim));
    if (r->zero_owner && !(r->rank == 0 && r->a.save_steps > 0))
        state = model_optim_estimate_bytes_owned(&r->table, r->optim, &r->ocfg, trainer_embeddings_32bit(r->optim),
                                                 r->zero_owner, r->rank);
    int n_buf = r->a.grad_accum > 1 || r->ddp ? 3 : 2;
    uint64_t comm = r->ddp ? ddp_buffer_bytes(r->ranks, r->table.alloc_numel) : 0;
    const int local = r->ddp ? ddp_local_size_from_env() : 1;
    const uint64_t data = dataset_bytes(&r->ds);  // already allocated, and it stays
    uint64_t need = ((uint64_t)n_buf * buf + state + ws_bytes + comm + data) * (uint64_t)local;
    char what[460], a[32], b[32], c[32], d[32], e[64] = "", f[32];
    if (local > 1) snprintf(e, sizeof e, "; times %d ranks on this machine", local);
    snprintf(what, sizeof what, "params + grads%s %s x %d, %s optimizer state %s, activations %s%s%s, data %s%s",
             n_buf == 3 ? " + micro-batch grads" : "", format_bytes_human(a, sizeof a, buf), n_buf, r->optim->name,
             format_bytes_human(b, sizeof b, state), format_bytes_human(c, sizeof c, ws_bytes),
             comm ? ", --ddp receive buffer " : "", comm ? format_bytes_human(d, sizeof d, comm) : "",
             format_bytes_human(f, sizeof f, data), e);
    return memory_check("train", need, what, r->a.force);
}

// What in `dir` shows that a run wrote there: "results.json", or the first "checkpoint-N"
// folder found, into what (n bytes). false: none (a new, empty or unrelated folder).
static bool folder_holds_run(const char* dir, char* what, size_t n) {
    char p[4200];
    snprintf(p, sizeof p, "%s/results.json", dir);
    if (access(p, F_OK) == 0) {
        snprintf(what, n, "results.json");
        return true;
    }
    return checkpoint_folder_any(dir, what, n);
}

static int setup(Run* r) {
    TrainArgs* a = &r->a;
    Status s;
    if (path_is_non_dir(a->output_dir))
        return user_error("--output-dir %s exists and is not a folder (give a new or an existing folder)", a->output_dir);
    // A new run in a folder another run wrote would replace its results.json and mix the two
    // runs' checkpoints (a later --resume-from-checkpoint FOLDER takes the newest, whichever run
    // made it): refused; resuming (which continues a run there) is allowed.
    char held[300], ckpt[300];
    if (!a->resume && folder_holds_run(a->output_dir, held, sizeof held)) {
        if (!checkpoint_folder_any(a->output_dir, ckpt, sizeof ckpt))  // e.g. stopped before its first save
            return user_error("--output-dir %s already holds a run (%s) that saved no checkpoint to resume from: give "
                              "a new folder, or remove that one (its results.json would be lost); nothing was written",
                              a->output_dir, held);
        return user_error("--output-dir %s already holds a run (%s): continue it with --resume-from-checkpoint %s, or "
                          "give a new folder (or remove that one); nothing was written", a->output_dir, held,
                          a->output_dir);
    }
    s = resolve_init_from(r);
    if (!status_is_ok(s)) return user_error("--init-from: %s", s.msg);
    if (a->config_path) {
        s = model_config_from_json_file_for_training(a->config_path, &r->mcfg);
        if (!status_is_ok(s)) return user_error("--config: %s", s.msg);
        s = model_dropout_from_json_file(a->config_path, &r->dropout);
        if (!status_is_ok(s)) return user_error("--config: %s", s.msg);
    } else {
        const ModelConfig* c = model_config_find(a->model);
        if (!c) return user_error("--model: unknown model '%s' (allowed: %s, or --config FILE.json)", a->model,
                                  model_preset_names_list());
        r->mcfg = *c;  // presets train without dropout (r->dropout stays 0)
    }
    if (a->dropout >= 0) r->dropout.hidden = a->dropout;
    if (a->attention_dropout >= 0) r->dropout.attention = a->attention_dropout;
    if (a->seq_classif_dropout >= 0) r->dropout.classifier = a->seq_classif_dropout;
    r->dropout.seed = (uint64_t)a->seed;
    if (a->dump_dropout_masks && !dropout_config_any(&r->dropout))
        return user_error("--dump-dropout-masks: this run has no dropout (dropout, attention_dropout and "
                          "seq_classif_dropout are all 0); give --dropout P or a config.json with dropout");
    r->optim = optim_find(a->optim);
    if (!r->optim) return user_error("--optim: unknown optimizer '%s' (allowed: %s)", a->optim, optim_names_list());
    r->mode = amp_mode_find(a->precision);
    if (!r->mode) return user_error("--precision: unknown mode '%s' (allowed: %s)", a->precision, amp_mode_names_list());
    if (!strcmp(a->backend, BACKEND_AUTO)) a->backend = backend_auto(r->mode, a->resume, r->backend_why, sizeof r->backend_why);
    r->backend = gemm_find(a->backend);
    if (!r->backend)
        return user_error("--backend: unknown backend '%s'%s (allowed: %s, %s)", a->backend, r->backend_why,
                          BACKEND_AUTO, gemm_backend_names_list());
    s = amp_check_backend(r->mode, r->backend);
    if (!status_is_ok(s))
        return user_error("--backend %s%s cannot run --precision %s: %s", a->backend,
                          r->backend_why, a->precision, s.msg);
    if (a->seq_len < 0) a->seq_len = r->mcfg.max_positions < 128 ? r->mcfg.max_positions : 128;
    if (a->seq_len > r->mcfg.max_positions)
        return user_error("--seq-len %ld exceeds the model's max_position_embeddings %lld", a->seq_len,
                          (long long)r->mcfg.max_positions);
    optim_defaults(r->optim, &r->ocfg);
    r->ocfg.lr = a->lr;
    r->ocfg.weight_decay = a->weight_decay;
    // HF Trainer hands betas=(adam_beta1, adam_beta2), eps=adam_epsilon to the AdamW optimizers
    // (get_optimizer_cls_and_kwargs' adam_kwargs) and not to Adafactor, which ignores the flags:
    // the optimizers whose constructor takes betas and eps (Adafactor's take beta1 or beta2_decay)
    const bool adam = optim_has_keyword(r->optim, "betas") && optim_has_keyword(r->optim, "eps");
    if (adam) {
        r->ocfg.beta1 = a->adam_beta1;
        r->ocfg.beta2 = a->adam_beta2;
        r->ocfg.eps = a->adam_epsilon;
    }
    if (r->optim == &optim_adafactor_hf) r->ocfg.relative_step = false;  // as HF Trainer configures it
    s = r->optim->validate(&r->ocfg);
    if (!status_is_ok(s) && adam)
        return user_error("--optim %s with --learning-rate %g --weight-decay %g --adam-beta1 %g --adam-beta2 %g "
                          "--adam-epsilon %g: %s", a->optim, a->lr, a->weight_decay, a->adam_beta1, a->adam_beta2,
                          a->adam_epsilon, s.msg);
    if (!status_is_ok(s))
        return user_error("--optim %s with --learning-rate %g --weight-decay %g: %s", a->optim, a->lr, a->weight_decay,
                          s.msg);
    // adamw_torch_fused under a GradScaler: the Trainer (transformers 5.24) unscales before every
    // optimizer step, with or without clipping (without, _get_grad_norm still runs accelerate's
    // clip_grad_norm_ with max_norm inf, which calls unscale_gradients first), so GradScaler.step
    // finds the optimizer UNSCALED and hands the fused kernel no grad_scale: plain unscaling, as
    // for the other optimizers, whatever the scale.
    GradScalerConfig gcfg = grad_scaler_defaults();
    gcfg.init_scale = a->init_scale;
    gcfg.growth_interval = a->growth_interval;
    gcfg.enabled = r->mode->loss_scaling;
    s = grad_scaler_validate(&gcfg);
    if (!status_is_ok(s)) return user_error("GradScaler: %s", s.msg);
    grad_scaler_init(&r->scaler, &gcfg);

    // data
    if (a->train_file) {
        s = dataset_from_safetensors(a->train_file, a->eval_file, &r->mcfg, &r->ds);
        if (!status_is_ok(s)) return user_error("%s", s.msg);
    } else {
        DataConfig dc;
        memset(&dc, 0, sizeof dc);
        dc.task = a->task;
        // regression: the task's two classes 0 and 1 as the float targets of the one logit
        dc.n_labels = r->mcfg.regression ? 2 : r->mcfg.n_labels;
        dc.n_train = a->n_train;
        dc.n_eval = a->n_eval;
        dc.seq_len = a->seq_len;
        dc.vocab_size = r->mcfg.vocab_size;
        dc.seed = (uint64_t)a->seed;
        // the data alone, before it is generated (the whole need is checked once the model is built)
        const uint64_t n_data = data_bytes((uint64_t)a->n_train + (uint64_t)a->n_eval, (uint64_t)a->seq_len);
        char what[200];
        snprintf(what, sizeof what, "the synthetic data alone: %lld train + %lld eval examples x %ld tokens, "
                 "int64 token ids and attention masks", (long long)a->n_train, (long long)a->n_eval, a->seq_len);
        int rc = memory_check("train", n_data, what, a->force);
        if (rc) return rc;
        s = dataset_synthetic(&dc, &r->ds);
        if (!status_is_ok(s)) return user_error("synthetic data: %s", s.msg);
        if (r->mcfg.regression) r->ds.n_labels = 1;
    }
    s = dataset_check_model(&r->ds, &r->mcfg);
    if (!status_is_ok(s)) return user_error("data vs model: %s", s.msg);
    a->seq_len = r->ds.seq_len;

    // model, optimizer, backend
    s = param_table_build(&r->mcfg, &r->table);
    if (!status_is_ok(s)) return user_error("model: %s", s.msg);
    int max_b = (int)(a->batch_size > a->eval_batch_size ? a->batch_size : a->eval_batch_size);
    if (a->zero) {
        r->zero_owner = xcalloc(r->table.n, sizeof(int));
        s = model_optim_shard(&r->table, r->optim, &r->ocfg, trainer_embeddings_32bit(r->optim), r->ranks, r->zero_owner);
        if (!status_is_ok(s)) return user_error("--zero 1: %s", s.msg);
        r->zero_offsets = xcalloc((size_t)r->ranks + 1, sizeof(size_t));
        for (size_t i = r->table.n; i-- > 0;) r->zero_offsets[r->zero_owner[i]] = r->table.t[i].offset;
        r->zero_offsets[r->ranks] = r->table.alloc_numel;
    }
    int rc = check_memory(r, max_b);
    if (rc) return rc;
    if (r->ddp && r->table.alloc_numel > (size_t)INT32_MAX)
        return user_error("--ddp: the model's %zu floats exceed what one MPI collective counts (%d: MPI counts are "
                          "int); use a model below 2^31 parameters", r->table.alloc_numel, INT32_MAX);
    r->params = param_table_alloc_buffer(&r->table);
    r->grads = param_table_alloc_buffer(&r->table);
    if (r->init_weights_path[0]) {
        s = hf_weights_load(&r->table, r->params, r->init_weights_path);
        if (!status_is_ok(s)) return user_error("--init-from: %s", s.msg);
    } else {
        param_table_init_weights(&r->table, r->params, (uint64_t)a->seed, (float)model_init_std(&r->mcfg));
    }
    s = model_workspace_new(&r->table, max_b, (int)a->seq_len, &r->ws);
    if (!status_is_ok(s)) return user_error("workspace: %s", s.msg);
    if (a->label_smoothing != 0) {
        // the Trainer's LabelSmoother as it normalizes one micro-batch; with accumulation (and so
        // with --ddp) it divides by the items of all micro-batches (num_items_in_batch)
        if (a->grad_accum > 1 || r->ddp)
            return user_error("--label-smoothing-factor with %s is not implemented (one micro-batch per step and one "
                              "process only: with accumulation the Trainer's LabelSmoother normalizes by the items of "
                              "all micro-batches)", a->grad_accum > 1 ? "--gradient-accumulation-steps > 1" : "--ddp");
        s = model_workspace_set_label_smoothing(r->ws, a->label_smoothing);
        if (!status_is_ok(s)) return user_error("--label-smoothing-factor: %s", s.msg);
    }
    model_optim_init_owned(&r->mo, &r->table, r->optim, &r->ocfg, trainer_embeddings_32bit(r->optim), r->zero_owner,
                           r->rank);
    r->mo.decay_groups = true;  // HF Trainer: no decay for biases and LayerNorm weights
    r->state_bytes = xcalloc((size_t)r->ranks, sizeof(uint64_t));
    r->state_estimate = xcalloc((size_t)r->ranks, sizeof(uint64_t));
    for (int k = 0; k < r->ranks; k++)
        r->state_estimate[k] =
            model_optim_estimate_bytes_owned(&r->table, r->optim, &r->ocfg, r->mo.embeddings_32bit, r->zero_owner, k);
    if (r->ddp) {
        ddp_alloc_buffers(r->ddp, r->table.alloc_numel);
        ddp_allgather_u64(r->ddp, model_optim_measured_bytes(&r->mo), r->state_bytes);
    } else {
        r->state_bytes[0] = model_optim_measured_bytes(&r->mo);
    }
    if ((rc = setup_schedule(r))) return rc;
    r->sequential = !strcmp(a->data_order, "sequential");
    int threads = a->threads > 0 ? (int)a->threads : cpu_logical_cores();
    omp_set_num_threads(threads);
    s = gemm_open(&r->gemm, r->backend, threads);
    if (!status_is_ok(s)) return user_error("--backend %s: %s", a->backend, s.msg);
    accum_alloc(r);
    r->order = xmalloc(r->ds.split[SPLIT_TRAIN].n * sizeof(size_t));
    r->order_epoch = -1;

    // what defines the run (results.json "config"; compared on resume)
    json_t* c = json_object();
    json_object_set_new(c, "model", json_string(a->model ? a->model : a->config_path));
    json_t* mc = model_config_to_json(&r->mcfg);
    json_object_set_new(c, "model_config", mc);
    json_object_set_new(c, "parameters", json_integer((json_int_t)r->table.numel));
    json_object_set_new(c, "optim", json_string(r->optim->name));
    json_object_set_new(c, "learning_rate", json_real(r->ocfg.lr));
    json_object_set_new(c, "weight_decay", json_real(r->ocfg.weight_decay));
    if (a->label_smoothing != 0) json_object_set_new(c, "label_smoothing_factor", json_real(a->label_smoothing));
    // the AdamW hyper-parameters only when not TrainingArguments' defaults (results of runs with
    // the defaults keep their form, and a resume compares this object key by key)
    if (adam && (r->ocfg.beta1 != 0.9 || r->ocfg.beta2 != 0.999 || r->ocfg.eps != 1e-8))
        json_object_set_new(c, "adam", json_pack("{s:f, s:f, s:f}", "beta1", r->ocfg.beta1, "beta2", r->ocfg.beta2,
                                                 "epsilon", r->ocfg.eps));
    json_object_set_new(c, "weight_decay_groups",
                        json_string("HF Trainer: biases and LayerNorm weights without decay"));
    json_object_set_new(c, "lr_scheduler_type", json_string(lr_schedule_name(r->schedule.type)));
    json_object_set_new(c, "warmup_steps", json_integer(r->schedule.warmup_steps));
    json_object_set_new(c, "max_grad_norm", json_real(a->max_grad_norm));
    json_object_set_new(c, "data_order", json_string(a->data_order));
    json_object_set_new(c, "dropout",
                        json_pack("{s:f, s:f, s:f, s:s}", "dropout", r->dropout.hidden, "attention_dropout",
                                  r->dropout.attention, "seq_classif_dropout", r->dropout.classifier, "masks",
                                  "counter-based, keyed by (seed, step, example, site, layer, element): "
                                  "reference/MODEL_SEMANTICS.md section 10; none at evaluation"));
    json_object_set_new(c, "init_from", r->init_weights_path[0] ? json_string(r->init_weights_path) : json_null());
    json_object_set_new(c, "precision", json_string(r->mode->name));
    json_object_set_new(c, "backend", json_string(r->backend->name));
    json_object_set_new(c, "threads", json_integer(threads));
    json_object_set_new(c, "seed", json_integer(a->seed));
    json_object_set_new(c, "per_device_train_batch_size", json_integer(a->batch_size));
    json_object_set_new(c, "gradient_accumulation_steps", json_integer(a->grad_accum));
    json_object_set_new(c, "per_device_eval_batch_size", json_integer(a->eval_batch_size));
    json_object_set_new(c, "seq_len", json_integer(a->seq_len));
    json_object_set_new(c, "max_steps", json_integer(a->max_steps));
    json_object_set_new(c, "eval_steps", json_integer(a->eval_steps));
    json_object_set_new(c, "logging_steps", json_integer(a->logging_steps));
    json_object_set_new(c, "save_steps", json_integer(a->save_steps));
    json_object_set_new(c, "data", json_string(a->train_file ? a->train_file : r->ds.task));
    json_object_set_new(c, "eval_data", a->eval_file ? json_string(a->eval_file) : json_null());
    json_object_set_new(c, "num_train_examples", json_integer((json_int_t)r->ds.split[SPLIT_TRAIN].n));
    json_object_set_new(c, "num_eval_examples", json_integer((json_int_t)r->ds.split[SPLIT_EVAL].n));
    json_object_set_new(c, "grad_scaler",
                        r->mode->loss_scaling
                            ? json_pack("{s:f, s:f, s:f, s:I}", "init_scale", gcfg.init_scale, "growth_factor",
                                        gcfg.growth_factor, "backoff_factor", gcfg.backoff_factor,
                                        "growth_interval", (json_int_t)gcfg.growth_interval)
                            : json_null());
    json_object_set_new(c, "output_dir", json_string(a->output_dir));
    if (r->ddp) {  // only with --ddp, so one-process configs (and their checkpoints) are as before
        json_object_set_new(c, "ddp_ranks", json_integer(r->ranks));
        json_object_set_new(c, "zero_stage", json_integer(a->zero));
    }
    r->config_json = c;

    if (a->dump_dropout_masks) {  // first: a refused mask folder leaves no output folder behind
        s = make_dirs_noting(a->dump_dropout_masks, r->made_masks_dir, sizeof r->made_masks_dir);
        if (!status_is_ok(s)) return user_error("--dump-dropout-masks: %s", s.msg);
    }
    snprintf(r->results_path, sizeof r->results_path, "%s/results.json", a->output_dir);
    if (r->rank == 0) {  // --ddp: rank 0 alone writes into the output folder
        s = make_dirs_noting(a->output_dir, r->made_output_dir, sizeof r->made_output_dir);
        if (!status_is_ok(s)) return user_error("--output-dir: %s", s.msg);
        // writable now, not found out at the first save or at the end of the run
        char probe[4300];
        snprintf(probe, sizeof probe, "%s/.write-probe.tmp.%ld", a->output_dir, (long)getpid());
        int pfd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (pfd < 0) return user_error("--output-dir %s is not writable: %s", a->output_dir, strerror(errno));
        close(pfd);
        unlink(probe);
        int stale = remove_stale_temps(a->output_dir);
        if (stale)
            printf("Removed %d temporary file%s of killed runs from %s\n", stale, stale == 1 ? "" : "s", a->output_dir);
    }
    if (a->resume) {
        char ck[4400];
        s = checkpoint_resolve(a->resume, ck, sizeof ck);
        if (!status_is_ok(s)) return user_error("--resume-from-checkpoint: %s", s.msg);
        s = load_checkpoint(r, ck);
        if (!status_is_ok(s)) return user_error("--resume-from-checkpoint: %s", s.msg);
        if (r->step > a->max_steps)  // == max_steps: killed after its last checkpoint; results are rewritten
            return user_error("--resume-from-checkpoint: the checkpoint is at step %lld, --max-steps is %ld",
                              (long long)r->step, a->max_steps);
        printf("Resuming from %s at step %lld\n", ck, (long long)r->step);
    }
    return 0;
}

static void teardown(Run* r) {
    free(r->order);
    free(r->zero_owner);
    free(r->zero_offsets);
    free(r->state_bytes);
    free(r->state_estimate);
    accum_free(r);
    gemm_close(&r->gemm);
    if (r->mo.states) model_optim_free(&r->mo);
    model_workspace_free(r->ws);
    free(r->params);
    free(r->grads);
    if (r->table.t) param_table_free(&r->table);
    dataset_free(&r->ds);
    json_decref(r->config_json);
    free(r->rec.steps);
    free(r->rec.evals);
}

static int log_eval(Run* r) {
    EvalRecord e;
    Status s = evaluate(r, &e);
    if (!status_is_ok(s)) {
        clear_progress(r);
        fprintf(stderr, "trainbench train: evaluation failed: %s\n", s.msg);
        return 1;
    }
    if (r->ds.split[SPLIT_EVAL].n == 0) return 0;
    records_add_eval(&r->rec, &e);
    clear_progress(r);
    if (r->mcfg.regression) {
        printf("{'eval_loss': %.4f, 'epoch': %.2f}\n", e.loss, e.epoch);
        return 0;
    }
    printf("{'eval_loss': %.4f, '%s': %.4f, '%s': %.4f, 'epoch': %.2f}\n", e.loss, METRIC_EVAL_ACCURACY, e.accuracy,
           METRIC_EVAL_F1, e.f1, e.epoch);
    return 0;
}

static int train_loop(Run* r) {
    const TrainArgs* a = &r->a;
    double t_start = now_seconds(), log_loss = 0;
    int log_n = 0;
    Status s;
    while (r->step < a->max_steps) {
        double t0 = now_seconds();
        StepRecord rec;
        memset(&rec, 0, sizeof rec);
        load_step_batches(r, &rec);
        if (a->dump_dropout_masks) {
            s = dump_dropout_masks(r);
            if (!status_is_ok(s)) {
                clear_progress(r);
                fprintf(stderr, "trainbench train: --dump-dropout-masks: %s\n", s.msg);
                r->stop_reason = "cannot write dropout masks";
                return 1;
            }
        }
        TrainStep ts = {&r->table, r->ws, &r->gemm, r->mode, &r->mo, &r->scaler, r->params, r->grads,
                        &r->schedule, r->a.max_grad_norm, (int)r->a.grad_accum, r->micro_grads, r->ddp,
                        r->zero_offsets, true};
        TrainStepResult res;
        const double gemm_busy0 = r->gemm.busy_s, gemm_flop0 = r->gemm.flop;
        s = train_step(&ts, r->micro_mb, &res);
        // this process's first step is its warm-up unless it is also its last (see Run)
        const bool warmup = r->warmup_steps == 0 && r->phases_steps == 0 && r->step + 1 < a->max_steps;
        if (!warmup) {
            r->gemm_busy_s += r->gemm.busy_s - gemm_busy0;
            r->gemm_flop += r->gemm.flop - gemm_flop0;
        }
        if (!status_is_ok(s)) {
            clear_progress(r);
            fprintf(stderr, "trainbench train: step %lld failed: %s\n", (long long)r->step + 1, s.msg);
            r->stop_reason = "step failed";
            r->stopped_together = true;  // --ddp: accum.c agreed on the failure
            return 1;
        }
        float loss = res.loss;
        rec.step = r->step + 1;
        rec.loss = loss;
        rec.scale = res.scale;
        rec.skipped = res.skipped;
        rec.counters = res.counters;
        rec.lr = res.loss_nonfinite ? NAN : res.lr;
        rec.grad_norm = res.loss_nonfinite ? NAN : res.grad_norm;
        if (res.loss_nonfinite) {  // no scaler to skip the step: the run cannot continue
            rec.step_time_s = now_seconds() - t0;
            records_add_step(&r->rec, &rec);
            r->step++;
            clear_progress(r);
            fprintf(stderr, "trainbench train: non-finite loss (%g) at step %lld in %s mode; stopping. "
                            "Results so far are in %s\n", loss, (long long)r->step, r->mode->name, r->results_path);
            r->stop_reason = "non-finite loss";
            r->stopped_together = true;  // --ddp: every rank saw the same losses
            return 1;
        }
        rec.step_time_s = now_seconds() - t0;
        records_add_step(&r->rec, &rec);
        if (warmup) {
            r->warmup_steps = 1;
            r->warmup_step_time_s = rec.step_time_s;
        } else {
            phase_times_add(&r->phases, &res.phases);
            r->phases_step_time_s += rec.step_time_s;
            r->phases_steps++;
        }
        r->step++;
        if (isfinite(loss)) {
            log_loss += loss;
            log_n++;
        }
        if (a->progress) print_progress(r, now_seconds() - t_start, loss);
        bool last = r->step == a->max_steps;
        if (r->step % a->logging_steps == 0 || last) {
            clear_progress(r);
            char gn[48] = "";
            if (isfinite(rec.grad_norm) || a->max_grad_norm > 0)
                snprintf(gn, sizeof gn, "'grad_norm': %.4g, ", rec.grad_norm);
            printf("{'loss': %.4f, %s'learning_rate': %g, 'loss_scale': %g, 'epoch': %.2f}\n",
                   log_n ? log_loss / log_n : NAN, gn, rec.lr, (double)rec.scale, epoch_of(r, r->step));
            fflush(stdout);
            log_loss = 0;
            log_n = 0;
        }
        if (((a->eval_steps > 0 && r->step % a->eval_steps == 0) || last) && r->rank == 0) {  // same params on every rank
            if (log_eval(r) != 0) {
                r->stop_reason = "evaluation failed";
                return 1;
            }
        }
        if (a->save_steps > 0 && (r->step % a->save_steps == 0 || last)) {
            s = save_checkpoint(r);
            if (!status_is_ok(s)) {
                clear_progress(r);
                fprintf(stderr, "trainbench train: cannot save checkpoint: %s\n", s.msg);
                r->stop_reason = "checkpoint failed";
                return 1;
            }
        }
        if ((r->step % a->logging_steps == 0 || last) && r->rank == 0) {
            s = write_results(r, last ? "completed" : "running");
            if (!status_is_ok(s)) {
                fprintf(stderr, "trainbench train: cannot write results: %s\n", s.msg);
                return 1;
            }
        }
    }
    r->run_seconds = now_seconds() - t_start;
    return 0;
}

static int train_run(int argc, char** argv) {
    Run run;
    memset(&run, 0, sizeof run);
    int rc = parse_args(argc, argv, &run.a);
    if (rc) return rc;
    run.ranks = 1;
    if (run.a.ddp) {
        Status ds = ddp_init(&argc, &argv, &run.ddp);
        if (!status_is_ok(ds)) return user_error("--ddp: %s", ds.msg);
        run.rank = ddp_rank(run.ddp);
        run.ranks = ddp_size(run.ddp);
        if (run.rank != 0) {  // rank 0 speaks for the run; the others' stderr still shows their errors
            run.a.progress = false;
            if (!freopen("/dev/null", "w", stdout)) return user_error("--ddp: rank %d cannot silence stdout", run.rank);
        }
    } else if (ddp_world_size_from_env() > 1) {
        return user_error("started by mpirun with %d processes but without --ddp: each would train alone and write "
                          "the same output folder; add --ddp (README \"Distributed\") or run one process",
                          ddp_world_size_from_env());
    }
    char default_dir[512];
    if (!run.a.output_dir) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        snprintf(default_dir, sizeof default_dir, "results/train/%s-%s-%s-%04d%02d%02dT%02d%02d%02dZ",
                 run.a.model ? run.a.model : "config", run.a.precision, run.a.optim, tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        run.a.output_dir = default_dir;
    }
    rc = setup(&run);
    if (run.ddp) rc = ddp_max_int(run.ddp, rc);  // every rank starts, or none (bad input is the same everywhere)
    if (run.ddp && rc == 0) {  // --backend auto decides per process: ranks on unlike CPUs could differ
        int idx = 0;
        for (size_t i = 0; i < gemm_backend_count(); i++)
            if (gemm_backend_at(i) == run.backend) idx = (int)i;
        if (ddp_max_int(run.ddp, idx) != -ddp_max_int(run.ddp, -idx)) {
            fprintf(stderr, "trainbench train: --ddp: the ranks run different GEMM backends (this rank: %s%s), so "
                            "their gradients would not be those of one process; give --backend explicitly\n",
                    run.backend->name, run.backend_why);
            rc = 2;
        }
    }
    if (rc != 0) {  // refused before the first step: the folders this run created go again (empty)
        remove_made_dirs(run.a.output_dir, run.made_output_dir);
        if (run.a.dump_dropout_masks) remove_made_dirs(run.a.dump_dropout_masks, run.made_masks_dir);
    }
    if (rc == 0) {
        char init_desc[160];
        snprintf(init_desc, sizeof init_desc, "HF init (N(0, %g)%s%s, seeded by --seed)", model_init_std(&run.mcfg),
                 run.mcfg.pad_token_id >= 0 ? ", padding row zeroed" : "",
                 run.mcfg.sinusoidal_pos_embds ? ", sinusoidal position table" : "");
        printf("***** Running training *****\n  model = %s (%zu parameters, FFN activation %s), optim = %s, precision = %s, backend = %s%s\n"
               "  examples = %zu, batch size = %ld, gradient accumulation steps = %ld (%ld examples per optimizer "
               "step), seq len = %ld, max steps = %ld, output = %s\n"
               "  learning rate = %g, lr scheduler = %s (warmup %lld steps), weight decay = %g (not on biases and "
               "LayerNorm weights), max grad norm = %g%s\n"
               "  data order = %s (seed %ld), initial weights = %s\n"
               "  dropout = %g, attention_dropout = %g, seq_classif_dropout = %g (%s)\n",
               run.a.model ? run.a.model : run.a.config_path, run.table.numel,
               ffn_activation_name(run.mcfg.activation), run.optim->name, run.mode->name,
               run.backend->name, run.backend_why, run.ds.split[SPLIT_TRAIN].n, run.a.batch_size, run.a.grad_accum,
               run.a.batch_size * run.a.grad_accum, run.a.seq_len, run.a.max_steps,
               run.a.output_dir, run.ocfg.lr, lr_schedule_name(run.schedule.type), (long long)run.schedule.warmup_steps,
               run.ocfg.weight_decay, run.a.max_grad_norm, run.a.max_grad_norm > 0 ? "" : " (no clipping)",
               run.a.data_order, run.a.seed,
               run.init_weights_path[0] ? run.init_weights_path : init_desc,
               run.dropout.hidden, run.dropout.attention, run.dropout.classifier,
               dropout_config_any(&run.dropout) ? "masks keyed by seed, step and example; none at evaluation"
                                                : "no dropout");
        fflush(stdout);
        rc = train_loop(&run);
        Status s = status_ok();
        if (run.rank == 0)
            s = write_results(&run, rc == 0 ? "completed" : run.stop_reason ? run.stop_reason : "failed");
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench train: cannot write results: %s\n", s.msg);
            rc = 1;
        }
        // rank 0 alone failed (evaluation, a checkpoint or results.json): the others wait in the
        // next step's collectives, so end them all (README "Distributed": exit status)
        if (run.ddp && rc != 0 && !run.stopped_together) ddp_abort(run.ddp, rc);
        if (rc == 0) {
            json_t* sum = summary_json(&run);
            printf("{'train_runtime': %.3f, 'train_steps_per_second': %.3f, 'tokens_per_second': %.1f, "
                   "'train_loss': %.4f, 'epoch': %.2f}\n",
                   json_number_value(json_object_get(sum, "train_runtime_s")),
                   json_number_value(json_object_get(sum, "train_runtime_s")) > 0
                       ? (double)run.rec.n_steps / json_number_value(json_object_get(sum, "train_runtime_s"))
                       : 0.0,
                   json_number_value(json_object_get(sum, "tokens_per_s")),
                   json_number_value(json_object_get(sum, "train_loss")), epoch_of(&run, run.step));
            json_decref(sum);
            if (run.a.profile) print_profile(&run);
            printf("results: %s\n", run.results_path);
        }
    }
    teardown(&run);
    ddp_finalize(run.ddp);
    return rc;
}

// memory.c — `trainbench memory`: optimizer-state memory of a model shape, per registered
// optimizer: the closed-formula estimate (SPEC.md section 5) against a measurement (allocate
// every tensor's state, run one real step on real buffers, sum what the optimizer allocated),
// the process RSS growth while the state exists, and an itemized training budget (params,
// grads, optimizer state) next to Accelerate's `estimate-memory` "Training using Adam".
// With --time it also times one step over all tensors (after the measured step, which is the
// warm-up) and reports parameters/s and effective GB/s (traffic model below).
// With --batch/--seq-len/--precision (or --step) it also takes one real training step (forward,
// backward, AdamW) and reports the activation + workspace estimate (model/activation_memory.c)
// against the workspace allocator's high-water mark and the process peak RSS.
// With --ranks R --zero 1 it also gives each rank's share of the optimizer state under ZeRO-1
// (the shard rule of model_optim_shard, the one `train --ddp --zero 1` uses): per rank the
// closed-formula estimate against a measurement (that rank's state allocated alone, one real
// step, summed as above).
// Not here: the activation formula itself (model/activation_memory.c).
#include <jansson.h>
#include <sys/resource.h>
#include <malloc.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/resources.h"
#include "core/common.h"
#include "core/cpu.h"
#include "core/rng.h"
#include "model/activation_memory.h"
#include "model/amp.h"
#include "model/comm_model.h"
#include "model/model.h"
#include "results/results.h"

#define MIB (1024.0 * 1024.0)
#define PARAM_SEED 42u   // weights: HF init, N(0, 0.02)
#define GRAD_SEED 43u    // synthetic gradient: N(0, 1e-3)

static int memory_run(int argc, char** argv);

const Command cmd_memory = {
    .name = "memory",
    .summary = "optimizer-state memory per optimizer: estimate vs measured, RSS, step speed",
    .usage = "trainbench memory [--model NAME | --config FILE.json] [--optim NAME|all] [--json | --out FILE] [--time] "
             "[--threads N] [--force]\n"
             "                         [--ranks R [--zero 0|1] [--machines N]]\n"
             "                         [--step] [--batch B] [--seq-len T] [--precision P] [--backend NAME]\n"
             "  --model   a preset (default distilbert-base-cased); --config  a HF config.json instead\n"
             "  --optim   one registered optimizer or all (default)\n"
             "  --json    the same data as JSON on stdout (memory.json of a result folder, schema_version 1)\n"
             "  --out FILE  write that JSON to FILE atomically instead (temp + rename)\n"
             "  --time    also time one step over all tensors (after a warm-up step)\n"
             "  --ranks R --zero 1  also each rank's optimizer state under ZeRO-1 (train --ddp --zero 1's shard\n"
             "            rule: whole tensors, contiguous runs balanced by state bytes), estimate vs measured;\n"
             "            --ranks R also the bytes each rank sends per step (model/comm_model.h), --machines N\n"
             "            (divides R): the part of them addressed to other machines\n"
             "  --force   skip the up-front check of params + grads + the largest state against the\n"
             "            available memory (without it: exit 2 with both numbers when they do not fit)\n"
             "  --step    also one real training step (AdamW): activation + workspace estimate vs the\n"
             "            workspace's high-water mark, and the process peak RSS; implied by --batch (default 8),\n"
             "            --seq-len (default 128), --precision (default fp32), --backend (default: the first of\n"
             "            onednn, openblas, naive that runs the precision)\n"
             "  exit 0; 1 if an estimate differs from its measurement (state: exact; step: beyond the\n"
             "  stated tolerance) or stdout cannot be written; 2 on bad input",
    .run = memory_run,
};

// One report row: an optimizer with one way of configuring it.
typedef struct {
    const Optimizer* optim;
    const char* variant;        // "default", "plain", "hf_trainer" (JSON id)
    const char* label;          // what the variant means, for people
    bool embeddings_32bit;
    size_t estimate_bytes;
    size_t measured_bytes;      // per-tensor state + shared
    size_t measured_elems;      // per-tensor state elements
    size_t shared_bytes;
    long long rss_growth;       // bytes; -1 if /proc is unavailable
    size_t traffic_bytes;       // per step, see traffic model
    double step_seconds;        // --time; 0 when not timed
    // --ranks R --zero 1: per rank (R entries), NULL otherwise
    int* first_tensor;          // the rank's first and last tensor index (contiguous run)
    int* last_tensor;
    size_t* rank_estimate;
    size_t* rank_measured;
    size_t* rank_param_floats;  // the rank's parameter range (all-gathered after each step)
} MemRow;

// ---- formatting ----
static const char* fmt_count(char* buf, size_t cap, unsigned long long v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", v);
    size_t o = 0;
    for (int i = 0; i < n && o + 1 < cap; i++) {
        if (i && (n - i) % 3 == 0 && o + 2 < cap) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

static const char* fmt_signed(char* buf, size_t cap, long long v) {
    if (v >= 0) {
        buf[0] = '+';
        fmt_count(buf + 1, cap - 1, (unsigned long long)v);
    } else {
        buf[0] = '-';
        fmt_count(buf + 1, cap - 1, (unsigned long long)(-(v + 1)) + 1);
    }
    return buf;
}

static double round_2dp(double x) { return round(x * 100) / 100; }

static unsigned long long mb_rounded(size_t bytes) { return ((unsigned long long)bytes + (1u << 19)) >> 20; }

// "526,264,752 bytes = 502 MB (501.88 MB)"
static const char* fmt_bytes(char* buf, size_t cap, size_t bytes) {
    char a[32], b[32];
    snprintf(buf, cap, "%s bytes = %s MB (%.2f MB)", fmt_count(a, sizeof a, bytes),
             fmt_count(b, sizeof b, mb_rounded(bytes)), (double)bytes / MIB);
    return buf;
}

// ---- measurement ----
static long long rss_bytes(void) {
    FILE* f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long long size, resident;
    int ok = fscanf(f, "%lld %lld", &size, &resident) == 2;
    fclose(f);
    return ok ? resident * (long long)sysconf(_SC_PAGESIZE) : -1;
}

// Traffic model (bytes an optimizer must move per step, used for effective GB/s): read p and
// g, write p (12 bytes/param), and read + write every state byte once; shared state (code
// maps) is read once. Derived per optimizer:
//   adamw_torch: reads p,g,m,v (16) and writes p,m,v (12) = 28 bytes/param, plus 8 bytes per
//     tensor for the 0-d step.
//   adamw_bnb_8bit, tensors >= min_8bit_size: p,g read (8) + p written (4) + the two uint8
//     code tensors read and written (4) + the two fp32 absmax per 256-block read and written
//     (16/256) = 16.0625 bytes/param, plus the 2,048-byte code maps read once; smaller tensors
//     (and embeddings in the HF Trainer variant) take the 32-bit path: 28 bytes/param.
//   adafactor / adafactor_torch, 2-D (R x C): p,g read, p written (12 bytes/param) plus the
//     factored row (R) and col (C) fp32 statistics read and written, 8(R + C) bytes, and the
//     0-d RMS/step; 1-D: 12 + 8 bytes/param (the full fp32 variance). This is the compulsory
//     traffic only: the algorithm passes over g more than once (the row/col means must be
//     complete before the update, and RMS(U) must be complete before U is applied; RMS(p)
//     is one more pass over p), so the bandwidth it really achieves is higher than reported.
static size_t row_traffic(const ParamTable* t, const ModelOptim* mo) {
    size_t total = model_optim_shared_bytes(mo);
    for (size_t i = 0; i < t->n; i++)
        total += 3 * sizeof(float) * t->t[i].numel + 2 * optim_state_measured_bytes(mo->states[i]);
    return total;
}

static void measure_row(MemRow* r, const ParamTable* t, float* params, const float* grads, bool timed) {
    OptimConfig cfg;
    optim_defaults(r->optim, &cfg);
    r->estimate_bytes = model_optim_estimate_bytes(t, r->optim, &cfg, r->embeddings_32bit);
    long long rss0 = rss_bytes();
    ModelOptim mo;
    model_optim_init(&mo, t, r->optim, &cfg, r->embeddings_32bit);
    model_optim_step(&mo, t, params, grads);  // one real step: every lazily-made buffer exists
    long long rss1 = rss_bytes();
    r->rss_growth = rss0 >= 0 && rss1 >= 0 ? rss1 - rss0 : -1;
    r->measured_bytes = model_optim_measured_bytes(&mo);
    r->measured_elems = model_optim_measured_elems(&mo);
    r->shared_bytes = model_optim_shared_bytes(&mo);
    r->traffic_bytes = row_traffic(t, &mo);
    if (timed) {  // the measured step above was the warm-up
        double t0 = now_seconds();
        model_optim_step(&mo, t, params, grads);
        r->step_seconds = now_seconds() - t0;
    }
    model_optim_free(&mo);
    malloc_trim(0);  // give freed state back so the next row's RSS growth starts clean
}

// --ranks R --zero 1: each rank's shard (model_optim_shard) allocated alone and stepped once;
// its measured bytes against model_optim_estimate_bytes_owned.
static void measure_row_ranks(MemRow* r, const ParamTable* t, float* params, const float* grads, int ranks) {
    OptimConfig cfg;
    optim_defaults(r->optim, &cfg);
    int* owner = xcalloc(t->n, sizeof(int));
    CHECK(status_is_ok(model_optim_shard(t, r->optim, &cfg, r->embeddings_32bit, ranks, owner)));  // ranks checked
    r->first_tensor = xcalloc((size_t)ranks, sizeof(int));
    r->last_tensor = xcalloc((size_t)ranks, sizeof(int));
    r->rank_estimate = xcalloc((size_t)ranks, sizeof(size_t));
    r->rank_measured = xcalloc((size_t)ranks, sizeof(size_t));
    r->rank_param_floats = xcalloc((size_t)ranks, sizeof(size_t));
    for (size_t i = t->n; i-- > 0;) r->first_tensor[owner[i]] = (int)i;
    for (size_t i = 0; i < t->n; i++) r->last_tensor[owner[i]] = (int)i;
    for (int k = 0; k < ranks; k++)  // train.c's zero_offsets: first tensor's offset to the next rank's
        r->rank_param_floats[k] = (k + 1 < ranks ? t->t[r->first_tensor[k + 1]].offset : t->alloc_numel) -
                                  t->t[r->first_tensor[k]].offset;
    for (int k = 0; k < ranks; k++) {
        r->rank_estimate[k] = model_optim_estimate_bytes_owned(t, r->optim, &cfg, r->embeddings_32bit, owner, k);
        ModelOptim mo;
        model_optim_init_owned(&mo, t, r->optim, &cfg, r->embeddings_32bit, owner, k);
        model_optim_step(&mo, t, params, grads);  // one real step: every lazily-made buffer exists
        r->rank_measured[k] = model_optim_measured_bytes(&mo);
        model_optim_free(&mo);
    }
    free(owner);
}

static void mem_row_free(MemRow* r) {
    free(r->first_tensor);
    free(r->last_tensor);
    free(r->rank_estimate);
    free(r->rank_measured);
    free(r->rank_param_floats);
}

// Rows for one optimizer: optimizers with bitsandbytes' size rule (min_8bit_size > 0 in their
// defaults) get a second row as HF Trainer configures them (embeddings at 32-bit state).
static size_t rows_for(const Optimizer* o, MemRow* out) {
    OptimConfig cfg;
    optim_defaults(o, &cfg);
    memset(out, 0, 2 * sizeof *out);
    out[0].optim = out[1].optim = o;
    if (cfg.min_8bit_size == 0) {
        out[0].variant = "default";
        out[0].label = "library defaults";
        return 1;
    }
    out[0].variant = "plain";
    out[0].label = "plain bitsandbytes (every tensor follows the min_8bit_size rule)";
    out[1].variant = "hf_trainer";
    out[1].label = "as HF Trainer configures it (nn.Embedding weights keep 32-bit state)";
    out[1].embeddings_32bit = true;
    return 2;
}

// ---- one training step: activation + workspace estimate vs measured ----
// Tolerance: ACTIVATION_TOL_BELOW / _ABOVE, with their reason, in model/activation_memory.h.
#define STEP_TOL_BELOW ACTIVATION_TOL_BELOW
#define STEP_TOL_ABOVE ACTIVATION_TOL_ABOVE

typedef struct {
    bool wanted;
    long B, T;
    const PrecisionMode* mode;
    const GemmBackend* backend;  // NULL: the default order
    ActivationEstimate est;
    size_t workspace_bytes;      // model_workspace_bytes after the step (arena + kept scratch)
    size_t param_grad_bytes;     // params + grads buffers (alloc_numel floats each)
    size_t optim_bytes;          // AdamW state, measured
    long long rss_before;        // current RSS before the workspace exists (bytes; -1 n/a)
    long long peak_rss;          // getrusage ru_maxrss after the step (bytes)
    float loss;
    bool ok;
} StepMem;


// Builds a workspace for B x T, takes one step (forward, backward, AdamW) on synthetic tokens.
static Status measure_step(StepMem* m, const ParamTable* t, float* params, float* grads) {
    const GemmBackend* order[3] = {gemm_find("onednn"), gemm_find("openblas"), gemm_find("naive")};
    Gemm gemm = {0};
    Status s = status_make(STATUS_UNSUPPORTED, "no backend runs %s", m->mode->name);
    for (int i = 0; i < 3; i++) {
        const GemmBackend* b = m->backend ? m->backend : order[i];
        if (!b) continue;
        s = amp_check_backend(m->mode, b);
        if (status_is_ok(s)) s = gemm_open(&gemm, b, 0);
        if (status_is_ok(s) || m->backend) break;
    }
    if (!status_is_ok(s)) return s;
    m->backend = gemm.backend;
    m->est = activation_memory_estimate(&t->cfg, (int)m->B, (int)m->T, m->mode->low, omp_get_max_threads());
    m->param_grad_bytes = 2 * t->alloc_numel * sizeof(float);
    m->rss_before = rss_bytes();
    ModelWorkspace* ws = NULL;
    s = model_workspace_new(t, (int)m->B, (int)m->T, &ws);
    if (!status_is_ok(s)) {
        gemm_close(&gemm);
        return s;
    }
    const size_t N = (size_t)m->B * (size_t)m->T;
    int64_t* ids = xmalloc(N * sizeof(int64_t));
    int32_t* labels = xmalloc((size_t)m->B * sizeof(int32_t));
    Rng r;
    rng_init(&r, 0x7EA1ull, 0);
    for (size_t i = 0; i < N; i++) ids[i] = 1 + rng_below(&r, (uint32_t)(t->cfg.vocab_size - 1));
    for (long b = 0; b < m->B; b++) labels[b] = (int32_t)rng_below(&r, (uint32_t)t->cfg.n_labels);
    ModelBatch batch = {.input_ids = ids, .attention_mask = NULL, .labels = labels, .B = (int)m->B, .T = (int)m->T};
    OptimConfig ocfg;
    optim_defaults(&optim_adamw_torch, &ocfg);
    ModelOptim mo;
    model_optim_init(&mo, t, &optim_adamw_torch, &ocfg, false);
    s = model_forward(ws, params, &batch, m->mode, &gemm, &m->loss, NULL);
    if (status_is_ok(s)) s = model_backward(ws, params, 1.0f, &gemm, grads, NULL);
    if (status_is_ok(s)) {
        model_optim_step(&mo, t, params, grads);
        m->workspace_bytes = model_workspace_bytes(ws);
        m->optim_bytes = model_optim_measured_bytes(&mo);
        struct rusage ru;
        m->peak_rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (long long)ru.ru_maxrss * 1024 : -1;
        m->ok = activation_memory_within(&m->est, &t->cfg, m->workspace_bytes);
    }
    model_optim_free(&mo);
    model_workspace_free(ws);
    free(ids);
    free(labels);
    gemm_close(&gemm);
    return s;
}

static json_t* step_json(const StepMem* m) {
    json_t* o = json_object();
    json_object_set_new(o, "batch", json_integer(m->B));
    json_object_set_new(o, "seq_len", json_integer(m->T));
    json_object_set_new(o, "precision", json_string(m->mode->name));
    json_object_set_new(o, "backend", json_string(m->backend->name));
    json_object_set_new(o, "optimizer", json_string(optim_adamw_torch.name));
    json_object_set_new(o, "loss", json_real(m->loss));
    json_t* e = json_object();
    json_object_set_new(e, "saved_activations_bytes", json_integer((json_int_t)m->est.saved_bytes));
    json_object_set_new(e, "saved_per_layer_bytes", json_integer((json_int_t)m->est.saved_layer_bytes));
    json_object_set_new(e, "low_weight_copy_bytes", json_integer((json_int_t)m->est.low_weight_bytes));
    json_object_set_new(e, "activation_gradient_bytes", json_integer((json_int_t)m->est.grad_bytes));
    json_object_set_new(e, "batch_bytes", json_integer((json_int_t)m->est.batch_bytes));
    json_object_set_new(e, "transient_bytes", json_integer((json_int_t)m->est.transient_bytes));
    json_object_set_new(e, "total_bytes", json_integer((json_int_t)m->est.total_bytes));
    json_object_set_new(o, "estimate", e);
    json_object_set_new(o, "measured_workspace_bytes", json_integer((json_int_t)m->workspace_bytes));
    json_object_set_new(o, "tolerance", json_pack("{s:f, s:f}", "below", STEP_TOL_BELOW, "above", STEP_TOL_ABOVE));
    json_object_set_new(o, "within_tolerance", json_boolean(m->ok));
    json_object_set_new(o, "params_grads_bytes", json_integer((json_int_t)m->param_grad_bytes));
    json_object_set_new(o, "optimizer_state_bytes", json_integer((json_int_t)m->optim_bytes));
    json_object_set_new(o, "rss_before_workspace_bytes", m->rss_before >= 0 ? json_integer(m->rss_before) : json_null());
    json_object_set_new(o, "peak_rss_bytes", m->peak_rss >= 0 ? json_integer(m->peak_rss) : json_null());
    return o;
}

static void step_print(const StepMem* m) {
    char a[32], line[160];
    const ActivationEstimate* e = &m->est;
    printf("\ntraining step memory: batch %ld x seq %ld, %s, %s backend, AdamW (one real step: forward, backward, "
           "optimizer; loss %.4f)\n", m->B, m->T, m->mode->name, m->backend->name, (double)m->loss);
    printf("  estimate (model/activation_memory.c, README \"Training step memory\"):\n");
    printf("    saved activations      %s\n", fmt_bytes(line, sizeof line, e->saved_bytes));
    printf("      of which per layer   %s\n", fmt_bytes(line, sizeof line, e->saved_layer_bytes));
    if (e->low_weight_bytes) printf("    weights' low copies    %s\n", fmt_bytes(line, sizeof line, e->low_weight_bytes));
    printf("    activation gradients   %s\n", fmt_bytes(line, sizeof line, e->grad_bytes));
    printf("    batch                  %s\n", fmt_bytes(line, sizeof line, e->batch_bytes));
    printf("    transient              %s\n", fmt_bytes(line, sizeof line, e->transient_bytes));
    printf("    total                  %s\n", fmt_bytes(line, sizeof line, e->total_bytes));
    printf("  measured: workspace high-water (activation arena + GEMM scratch kept after the step)\n");
    printf("                           %s\n", fmt_bytes(line, sizeof line, m->workspace_bytes));
    printf("  verdict:  measured / estimate = %.4f: %s (tolerance -%.0f%% / +%.0f%% and 64 bytes of padding per "
           "buffer; model/activation_memory.h says why)\n",
           e->total_bytes ? (double)m->workspace_bytes / (double)e->total_bytes : 0.0,
           m->ok ? "within tolerance" : "OUTSIDE TOLERANCE", 100 * STEP_TOL_BELOW, 100 * STEP_TOL_ABOVE);
    if (m->peak_rss >= 0) {
        const long long known = (long long)(m->param_grad_bytes + m->optim_bytes + m->workspace_bytes);
        printf("  process peak RSS after the step: %s MB = params + grads %s MB + AdamW state %s MB + workspace %s MB\n",
               fmt_count(a, sizeof a, mb_rounded((size_t)m->peak_rss)),
               fmt_count(line, 40, mb_rounded(m->param_grad_bytes)), fmt_count(line + 40, 40, mb_rounded(m->optim_bytes)),
               fmt_count(line + 80, 40, mb_rounded(m->workspace_bytes)));
        printf("                                   + the rest %s MB (code and shared libraries, their own buffers,\n"
               "                                   thread stacks, allocator slack)\n",
               fmt_signed(a, sizeof a, (m->peak_rss - known + (1 << 19)) >> 20));
        if (m->mode->low != DTYPE_F32)  // README "Training step memory"
            printf("                                   (in bf16/fp16 the workspace's fp32 arrays of q, k, v, the context,\n"
                   "                                   f1, GELU's output and the FFN's two gradients are reserved but never written:\n"
                   "                                   GEMMs read their low copies; unwritten pages are not resident; in a batch\n"
                   "                                   without padding, and without attention dropout, the fp32 attention\n"
                   "                                   probabilities too: their low copy holds their values)\n");
    }
}

// ---- output ----
typedef struct {
    const char* model;   // preset name or config path
    const ParamTable* t;
    int threads;
    bool timed;
    MemRow* rows;
    size_t n_rows;
    const StepMem* step;  // NULL without --step
    int ranks;            // --ranks (1 without)
    int zero;             // --zero
    int machines;         // --machines (communication model)
} Report;

static size_t training_total(const Report* rep, const MemRow* r) {
    return 2 * sizeof(float) * rep->t->numel + r->measured_bytes;  // params + grads (fp32) + state
}

static json_t* report_json(const Report* rep) {
    const ParamTable* t = rep->t;
    const ModelConfig* c = &t->cfg;
    json_t* root = json_object();
    json_object_set_new(root, "model", json_string(rep->model));
    json_t* cfg = model_config_to_json(c);
    json_object_set_new(root, "config", cfg);
    json_object_set_new(root, "tensors", json_integer((json_int_t)t->n));
    json_object_set_new(root, "parameters", json_integer((json_int_t)t->numel));
    json_object_set_new(root, "parameter_bytes", json_integer((json_int_t)(4 * t->numel)));
    json_object_set_new(root, "gradient_bytes", json_integer((json_int_t)(4 * t->numel)));
    json_object_set_new(root, "activations", json_string("not counted here; training_step (--step) has them"));
    json_object_set_new(root, "accelerate_training_adam_bytes", json_integer((json_int_t)(16 * t->numel)));
    json_object_set_new(root, "threads", json_integer(rep->threads));
    json_object_set_new(root, "ranks", json_integer(rep->ranks));
    json_object_set_new(root, "zero_stage", json_integer(rep->zero));
    json_object_set_new(root, "machines", json_integer(rep->machines));
    json_t* arr = json_array();
    for (size_t i = 0; i < rep->n_rows; i++) {
        const MemRow* r = &rep->rows[i];
        json_t* o = json_object();
        json_object_set_new(o, "optimizer", json_string(r->optim->name));
        json_object_set_new(o, "variant", json_string(r->variant));
        json_object_set_new(o, "label", json_string(r->label));
        json_object_set_new(o, "reference", json_string(r->optim->reference));
        json_object_set_new(o, "estimate_bytes", json_integer((json_int_t)r->estimate_bytes));
        json_object_set_new(o, "estimate_mb", json_integer((json_int_t)mb_rounded(r->estimate_bytes)));
        json_object_set_new(o, "estimate_mb_2dp", json_real(round_2dp((double)r->estimate_bytes / MIB)));
        json_object_set_new(o, "measured_elements", json_integer((json_int_t)r->measured_elems));
        json_object_set_new(o, "measured_bytes", json_integer((json_int_t)r->measured_bytes));
        json_object_set_new(o, "measured_mb", json_integer((json_int_t)mb_rounded(r->measured_bytes)));
        json_object_set_new(o, "measured_mb_2dp", json_real(round_2dp((double)r->measured_bytes / MIB)));
        json_object_set_new(o, "shared_state_bytes", json_integer((json_int_t)r->shared_bytes));
        json_object_set_new(o, "estimate_equals_measured", json_boolean(r->estimate_bytes == r->measured_bytes));
        json_object_set_new(o, "rss_growth_bytes", r->rss_growth >= 0 ? json_integer(r->rss_growth) : json_null());
        json_object_set_new(o, "training_total_bytes", json_integer((json_int_t)training_total(rep, r)));
        json_object_set_new(o, "traffic_bytes_per_step", json_integer((json_int_t)r->traffic_bytes));
        if (r->rank_estimate) {
            json_t* pr = json_array();
            for (int k = 0; k < rep->ranks; k++) {
                CommStepBytes cm = comm_model_step_bytes(t->alloc_numel, rep->ranks, k, 1, r->rank_param_floats[k],
                                                         rep->machines);
                json_array_append_new(
                    pr, json_pack("{s:i, s:i, s:i, s:I, s:I, s:b, s:I, s:I, s:I, s:I}", "rank", k, "first_tensor",
                                  r->first_tensor[k], "last_tensor", r->last_tensor[k], "estimate_bytes",
                                  (json_int_t)r->rank_estimate[k], "measured_bytes", (json_int_t)r->rank_measured[k],
                                  "estimate_equals_measured", r->rank_estimate[k] == r->rank_measured[k],
                                  "comm_grad_bytes_per_step", (json_int_t)cm.grad_bytes, "comm_param_bytes_per_step",
                                  (json_int_t)cm.param_bytes, "comm_grad_bytes_to_other_machines",
                                  (json_int_t)cm.grad_inter_bytes, "comm_param_bytes_to_other_machines",
                                  (json_int_t)cm.param_inter_bytes));
            }
            json_object_set_new(o, "zero1_per_rank", pr);
        }
        if (rep->timed) {
            json_object_set_new(o, "step_seconds", json_real(r->step_seconds));
            json_object_set_new(o, "params_per_second", json_real(r->step_seconds > 0 ? (double)t->numel / r->step_seconds : 0));
            json_object_set_new(o, "effective_gb_per_second",
                                json_real(r->step_seconds > 0 ? (double)r->traffic_bytes / r->step_seconds / 1e9 : 0));
        }
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "optimizers", arr);
    if (rep->step) json_object_set_new(root, "training_step", step_json(rep->step));
    return root;
}

static void report_print(const Report* rep) {
    const ParamTable* t = rep->t;
    const ModelConfig* c = &t->cfg;
    char a[64], b[64], line[160];
    printf("trainbench memory: %s (DistilBertForSequenceClassification: vocab %lld, dim %lld, %lld layers, "
           "%lld heads, hidden %lld, %lld positions, %lld labels)\n",
           rep->model, (long long)c->vocab_size, (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads,
           (long long)c->hidden_dim, (long long)c->max_positions, (long long)c->n_labels);
    printf("parameters: %s in %zu tensors; fp32 %s\n", fmt_count(a, sizeof a, t->numel), t->n,
           fmt_bytes(line, sizeof line, 4 * t->numel));
    if (rep->ranks > 1) {  // model/comm_model.h: the same for every optimizer
        printf("train --ddp over %d ranks on %d machine%s, per optimizer step and rank (model, one round: "
               "--gradient-accumulation-steps 1; bytes sent, of which to other machines):\n",
               rep->ranks, rep->machines, rep->machines == 1 ? "" : "s");
        for (int k = 0; k < rep->ranks; k++) {
            CommStepBytes cm = comm_model_step_bytes(t->alloc_numel, rep->ranks, k, 1, 0, rep->machines);
            printf("  rank %d: gradient reduce-scatter + all-gather %s bytes (%s to other machines)%s\n", k,
                   fmt_count(a, sizeof a, cm.grad_bytes), fmt_count(b, sizeof b, cm.grad_inter_bytes),
                   rep->zero ? "; ZeRO-1 adds its parameter range, per optimizer below" : "");
        }
    }
    printf("MB = bytes / 1024^2. estimate: SPEC.md section 5 closed formula; measured: every state buffer the\n"
           "optimizer allocated, after one real step per tensor; RSS: process resident-set growth meanwhile.\n");
    for (size_t i = 0; i < rep->n_rows; i++) {
        const MemRow* r = &rep->rows[i];
        printf("\n%s", r->optim->name);
        if (strcmp(r->variant, "default") != 0) printf(" — %s", r->label);
        printf("\n  reference:  %s\n", r->optim->reference);
        printf("  estimate:   %s\n", fmt_bytes(line, sizeof line, r->estimate_bytes));
        printf("  measured:   %s elements, %s", fmt_count(a, sizeof a, r->measured_elems),
               fmt_bytes(line, sizeof line, r->measured_bytes));
        if (r->shared_bytes) printf(" (incl. %s shared bytes)", fmt_count(b, sizeof b, r->shared_bytes));
        printf("\n");
        if (r->rss_growth >= 0)
            printf("  RSS growth: %s bytes = %lld MB\n", fmt_signed(a, sizeof a, r->rss_growth),
                   (r->rss_growth + (1 << 19)) >> 20);
        else
            printf("  RSS growth: n/a (no /proc/self/statm)\n");
        long long extra = r->rss_growth - (long long)r->measured_bytes;
        if (r->rss_growth >= 0 && extra > (1 << 20) && extra > (long long)r->measured_bytes / 20)
            printf("  note:       RSS grew %lld MB more than the state: the optimizer holds memory outside its\n"
                   "              state tensors (scratch kept per tensor?), which the library would not keep\n",
                   (extra + (1 << 19)) >> 20);
        if (r->estimate_bytes == r->measured_bytes)
            printf("  verdict:    estimate == measured (%s bytes, exact)\n", fmt_count(a, sizeof a, r->measured_bytes));
        else
            printf("  verdict:    MISMATCH: measured - estimate = %s bytes\n",
                   fmt_signed(a, sizeof a, (long long)r->measured_bytes - (long long)r->estimate_bytes));
        if (r->rank_estimate) {
            printf("  ZeRO-1 over %d ranks (whole tensors, contiguous runs balanced by state bytes; README "
                   "\"Distributed\"):\n", rep->ranks);
            printf("    %4s  %-15s %18s %18s %9s  %-8s %s\n", "rank", "tensors", "estimate bytes", "measured bytes",
                   "MB", "verdict", "sends per step: gradient + parameters (model; to other machines)");
            for (int k = 0; k < rep->ranks; k++) {
                char rng[32], g[32], pb[32], gi[32], pi[32];
                snprintf(rng, sizeof rng, "%d-%d (%d)", r->first_tensor[k], r->last_tensor[k],
                         r->last_tensor[k] - r->first_tensor[k] + 1);
                CommStepBytes cm = comm_model_step_bytes(t->alloc_numel, rep->ranks, k, 1, r->rank_param_floats[k],
                                                         rep->machines);
                printf("    %4d  %-15s %18s %18s %9.2f  %-8s %s + %s (%s + %s)\n", k, rng,
                       fmt_count(a, sizeof a, r->rank_estimate[k]), fmt_count(b, sizeof b, r->rank_measured[k]),
                       (double)r->rank_measured[k] / MIB, r->rank_estimate[k] == r->rank_measured[k] ? "exact" : "MISMATCH",
                       fmt_count(g, sizeof g, cm.grad_bytes), fmt_count(pb, sizeof pb, cm.param_bytes),
                       fmt_count(gi, sizeof gi, cm.grad_inter_bytes), fmt_count(pi, sizeof pi, cm.param_inter_bytes));
            }
        } else if (rep->ranks > 1) {
            printf("  %d ranks without ZeRO (--zero 0): every rank holds the whole state above\n", rep->ranks);
        }
        if (rep->timed) {
            double s = r->step_seconds;
            printf("  step time:  %.4f s for %s params (%d threads, after a warm-up step): %.3f G params/s, "
                   "%.1f GB/s effective (%.4g bytes/param moved)\n",
                   s, fmt_count(a, sizeof a, t->numel), rep->threads, s > 0 ? (double)t->numel / s / 1e9 : 0.0,
                   s > 0 ? (double)r->traffic_bytes / s / 1e9 : 0.0, (double)r->traffic_bytes / (double)t->numel);
        }
    }
    size_t acc = 16 * t->numel;
    printf("\ntraining memory, fp32, itemized (activations: not counted here; --step adds them)\n");
    printf("  %-26s %10s %10s %16s %12s   %s\n", "optimizer", "params", "grads", "optimizer state", "total",
           "total - Accelerate");
    for (size_t i = 0; i < rep->n_rows; i++) {
        const MemRow* r = &rep->rows[i];
        char name[64], p[32], g[32], s[32], tot[32], d[40];
        snprintf(name, sizeof name, "%s%s%s", r->optim->name, strcmp(r->variant, "default") ? " " : "",
                 strcmp(r->variant, "default") ? r->variant : "");
        snprintf(p, sizeof p, "%s MB", fmt_count(a, sizeof a, mb_rounded(4 * t->numel)));
        snprintf(g, sizeof g, "%s MB", fmt_count(a, sizeof a, mb_rounded(4 * t->numel)));
        snprintf(s, sizeof s, "%s MB", fmt_count(a, sizeof a, mb_rounded(r->measured_bytes)));
        snprintf(tot, sizeof tot, "%s MB", fmt_count(a, sizeof a, mb_rounded(training_total(rep, r))));
        fmt_signed(d, sizeof d, (long long)training_total(rep, r) - (long long)acc);
        printf("  %-26s %10s %10s %16s %12s   %s bytes\n", name, p, g, s, tot, d);
    }
    printf("Accelerate `accelerate estimate-memory` \"Training using Adam\" (fp32) = 4 x model size = 16 bytes/param\n"
           "(params + grads + 2 Adam states, no activations): %s\n",
           fmt_bytes(line, sizeof line, acc));
    if (rep->step) step_print(rep->step);
}

// ---- command ----
static int memory_run(int argc, char** argv) {
    const char* model = NULL;
    const char* config_path = NULL;
    const char* optim_name = "all";
    bool as_json = false, timed = false, force = false;
    const char* out_path = NULL;
    long threads = cpu_logical_cores();
    StepMem step = {.B = 8, .T = 128};
    const char* precision = "fp32";
    const char* backend = NULL;
    long ranks = 1, zero = 0, machines = 1;
    for (int i = 1; i < argc; i++) {
        if (flag_matches(argv[i], "--ranks")) {
            if (!flag_int(&cmd_memory, argc, argv, &i, "--ranks", 1, 1 << 20, &ranks)) return 2;
        } else if (flag_matches(argv[i], "--machines")) {
            if (!flag_int(&cmd_memory, argc, argv, &i, "--machines", 1, 1 << 20, &machines)) return 2;
        } else if (flag_matches(argv[i], "--zero")) {
            if (!flag_int(&cmd_memory, argc, argv, &i, "--zero", 0, 1, &zero)) return 2;
        } else if (!strcmp(argv[i], "--step")) {
            step.wanted = true;
        } else if (flag_matches(argv[i], "--batch")) {
            if (!flag_int(&cmd_memory, argc, argv, &i, "--batch", 1, 1 << 16, &step.B)) return 2;
            step.wanted = true;
        } else if (flag_matches(argv[i], "--seq-len")) {
            if (!flag_int(&cmd_memory, argc, argv, &i, "--seq-len", 1, 1 << 20, &step.T)) return 2;
            step.wanted = true;
        } else if (flag_matches(argv[i], "--precision")) {
            if (!flag_value(&cmd_memory, argc, argv, &i, "--precision", &precision)) return 2;
            step.wanted = true;
        } else if (flag_matches(argv[i], "--backend")) {
            if (!flag_value(&cmd_memory, argc, argv, &i, "--backend", &backend)) return 2;
            step.wanted = true;
        } else if (!strcmp(argv[i], "--json")) {
            as_json = true;
        } else if (!strcmp(argv[i], "--time")) {
            timed = true;
        } else if (!strcmp(argv[i], "--force")) {
            force = true;
        } else if (flag_matches(argv[i], "--model")) {
            if (!flag_value(&cmd_memory, argc, argv, &i, "--model", &model)) return 2;
        } else if (flag_matches(argv[i], "--config")) {
            if (!flag_value(&cmd_memory, argc, argv, &i, "--config", &config_path)) return 2;
        } else if (flag_matches(argv[i], "--optim")) {
            if (!flag_value(&cmd_memory, argc, argv, &i, "--optim", &optim_name)) return 2;
        } else if (flag_matches(argv[i], "--out")) {
            if (!flag_value(&cmd_memory, argc, argv, &i, "--out", &out_path)) return 2;
            as_json = true;
        } else if (flag_matches(argv[i], "--threads")) {
            if (!flag_int(&cmd_memory, argc, argv, &i, "--threads", 1, 1024, &threads)) return 2;
        } else {
            return cli_unknown_flag(&cmd_memory, argv[i]);
        }
    }
    if (model && config_path) return cli_usage_error(&cmd_memory, "give --model or --config, not both");
    if (out_path && config_path && same_existing_file(out_path, config_path))
        return cli_usage_error(&cmd_memory, "--out %s is the --config file: give a new path for the report", out_path);
    if (ranks % machines != 0)
        return cli_usage_error(&cmd_memory, "--machines %ld must divide --ranks %ld (ranks are placed in equal blocks "
                               "per machine)", machines, ranks);
    if (zero && ranks < 2)
        return cli_usage_error(&cmd_memory, "--zero 1 shards the optimizer state over ranks: give --ranks R with R >= 2");
    ModelConfig cfg;
    if (config_path) {
        // the training rules (activation, dropouts, pad token, problem type...): --step trains with
        // this config, and a config `train` refuses should not get a memory answer either
        Status s = model_config_from_json_file_for_training(config_path, &cfg);
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench memory: --config: %s\n", s.msg);
            return 2;
        }
        model = config_path;
    } else {
        if (!model) model = "distilbert-base-cased";
        const ModelConfig* found = model_config_find(model);
        if (!found)
            return cli_usage_error(&cmd_memory, "unknown model '%s' (allowed: %s; or --config FILE.json)", model,
                                   model_preset_names_list());
        cfg = *found;
    }
    if (step.wanted) {
        step.mode = amp_mode_find(precision);
        if (!step.mode)
            return cli_usage_error(&cmd_memory, "unknown precision '%s' (allowed: %s)", precision, amp_mode_names_list());
        if (backend && !(step.backend = gemm_find(backend)))
            return cli_usage_error(&cmd_memory, "unknown backend '%s' (allowed: %s)", backend, gemm_backend_names_list());
        if (step.T > cfg.max_positions)
            return cli_usage_error(&cmd_memory, "--seq-len %ld exceeds the model's max_position_embeddings (%lld)",
                                   step.T, (long long)cfg.max_positions);
    }
    size_t n_opt = optim_count();
    const Optimizer** opts = xcalloc(n_opt, sizeof *opts);
    size_t k = 0;
    if (!strcmp(optim_name, "all")) {
        for (size_t i = 0; i < n_opt; i++) opts[k++] = optim_at(i);
    } else {
        const Optimizer* o = optim_find(optim_name);
        if (!o) {
            free(opts);
            return cli_usage_error(&cmd_memory, "unknown optimizer '%s' (allowed: all, %s)", optim_name,
                                   optim_names_list());
        }
        opts[k++] = o;
    }

    ParamTable t;
    Status s = param_table_build(&cfg, &t);
    if (!status_is_ok(s)) {  // presets and loaded configs are validated already
        free(opts);
        fprintf(stderr, "trainbench memory: %s\n", s.msg);
        return 2;
    }
    if (zero && (size_t)ranks > t.n) {
        const size_t n_tensors = t.n;
        free(opts);
        param_table_free(&t);
        return cli_usage_error(&cmd_memory, "--ranks %ld with --zero 1: ZeRO-1 shards whole tensors and %s has %zu, so "
                               "--ranks must be in [2, %zu]", ranks, model, n_tensors, n_tensors);
    }
    // up front: params + grads + the largest optimizer state (rows are measured one at a time)
    uint64_t largest = 0;
    for (size_t i = 0; i < k; i++) {
        OptimConfig oc;
        optim_defaults(opts[i], &oc);
        for (int e32 = 0; e32 < 2; e32++) {
            uint64_t b = model_optim_estimate_bytes(&t, opts[i], &oc, e32 != 0);
            if (b > largest) largest = b;
        }
    }
    // --step: the training step runs after the optimizer rows, with AdamW's state and the
    // activation workspace live at once (its estimate; the attention probabilities bound first, so
    // that an absurd --batch x --seq-len saturates instead of overflowing the estimate's size_t)
    uint64_t step_need = 0;
    if (step.wanted) {
        const double probs = (double)step.B * (double)step.T * (double)step.T * (double)t.cfg.n_heads *
                             (double)t.cfg.n_layers * 4.0;
        if (probs > 0x1p60) {
            step_need = UINT64_MAX / 4;
        } else {
            const ActivationEstimate e =
                activation_memory_estimate(&t.cfg, (int)step.B, (int)step.T, step.mode->low, (int)threads);
            OptimConfig oc;
            optim_defaults(&optim_adamw_torch, &oc);
            step_need = e.total_bytes + model_optim_estimate_bytes(&t, &optim_adamw_torch, &oc, false);
        }
    }
    char what[200], hb[32];
    snprintf(what, sizeof what, "params + grads %s x 2 and the larger of: the largest optimizer state, %s",
             format_bytes_human(hb, sizeof hb, (uint64_t)t.alloc_numel * sizeof(float)),
             step.wanted ? "--step's AdamW state + activation workspace" : "(no --step)");
    int mrc = memory_check("memory", 2 * (uint64_t)t.alloc_numel * sizeof(float) + (largest > step_need ? largest : step_need),
                           what, force);
    if (mrc) {
        free(opts);
        param_table_free(&t);
        return mrc;
    }
    omp_set_num_threads((int)threads);
    // Fixed thresholds: every large state buffer is its own mmap and goes back to the OS on
    // free (glibc's adaptive threshold would otherwise keep the first optimizer's memory in the
    // heap and hide the next one's RSS growth).
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);

    float* params = param_table_alloc_buffer(&t);  // (alloc_numel) fp32
    float* grads = param_table_alloc_buffer(&t);   // (alloc_numel) fp32, synthetic
    param_table_init_weights(&t, params, PARAM_SEED, 0.02f);
    param_table_fill_normal(&t, grads, GRAD_SEED, 0.0f, 1e-3f);

    int rc = 0;
    // The step first, so that the process peak RSS it reports is this step's (params, grads,
    // AdamW state, workspace), not an earlier optimizer row's.
    if (step.wanted) {
        s = measure_step(&step, &t, params, grads);
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench memory: --step: %s\n", s.msg);
            free(opts);
            free(params);
            free(grads);
            param_table_free(&t);
            return s.code == STATUS_INVALID ? 2 : 1;
        }
        if (!step.ok) rc = 1;
        param_table_init_weights(&t, params, PARAM_SEED, 0.02f);  // the optimizer rows start as without --step
        param_table_fill_normal(&t, grads, GRAD_SEED, 0.0f, 1e-3f);
    }
    MemRow* rows = xcalloc(2 * k, sizeof *rows);
    size_t n_rows = 0;
    for (size_t i = 0; i < k; i++) n_rows += rows_for(opts[i], rows + n_rows);
    for (size_t i = 0; i < n_rows; i++) {
        measure_row(&rows[i], &t, params, grads, timed);
        if (rows[i].estimate_bytes != rows[i].measured_bytes) rc = 1;
        if (zero) {
            measure_row_ranks(&rows[i], &t, params, grads, (int)ranks);
            for (long q = 0; q < ranks; q++)
                if (rows[i].rank_estimate[q] != rows[i].rank_measured[q]) {
                    fprintf(stderr, "trainbench memory: %s (%s) rank %ld of %ld: estimate %zu != measured %zu bytes\n",
                            rows[i].optim->name, rows[i].variant, q, ranks, rows[i].rank_estimate[q],
                            rows[i].rank_measured[q]);
                    rc = 1;
                }
        }
    }
    Report rep = {model, &t, (int)threads, timed, rows, n_rows, step.wanted ? &step : NULL, (int)ranks, (int)zero, (int)machines};
    if (as_json) {
        json_t* root = report_json(&rep);
        if (out_path) {
            Status ws = result_json_write(out_path, RESULT_MEMORY, root);
            if (!status_is_ok(ws)) {
                fprintf(stderr, "trainbench memory: --out: %s\n", ws.msg);
                rc = 1;
            }
        } else if (!result_json_print(stdout, RESULT_MEMORY, root)) {
            fprintf(stderr, "trainbench memory: writing the JSON to stdout failed\n");
            rc = 1;
        }
        json_decref(root);
    } else {
        report_print(&rep);
    }
    for (size_t i = 0; i < n_rows; i++)
        if (rows[i].estimate_bytes != rows[i].measured_bytes)
            fprintf(stderr, "trainbench memory: %s (%s): estimate %zu != measured %zu bytes — a bug in that optimizer's "
                            "state_bytes() or init()\n",
                    rows[i].optim->name, rows[i].variant, rows[i].estimate_bytes, rows[i].measured_bytes);
    if (step.wanted && !step.ok)
        fprintf(stderr, "trainbench memory: training step: workspace %zu bytes is outside -%.0f%%/+%.0f%% of the "
                        "estimate %zu bytes — model/activation_memory.c and the workspace disagree\n",
                step.workspace_bytes, 100 * STEP_TOL_BELOW, 100 * STEP_TOL_ABOVE, step.est.total_bytes);
    for (size_t i = 0; i < n_rows; i++) mem_row_free(&rows[i]);
    free(rows);
    free(opts);
    free(params);
    free(grads);
    param_table_free(&t);
    return rc;
}

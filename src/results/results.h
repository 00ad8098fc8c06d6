// results.h — the one owner of the result-folder format (results/<machine-id>/<run-id>/):
// a typed reader and writer per file, each file carrying a schema version, one error style
// (Status). Every command that writes a result file (record, memory, train, conform, run, the
// bench binary's context) and every one that reads one (gate, report, fingerprint) goes through
// here; nobody else walks these files' JSON.
// Not here: what the files mean to a command (verdicts, plots), running anything.
//
// Schema versions. Our own files (machine.json, memory.json, conform.json, train results.json)
// carry a top-level "schema_version": N; Google Benchmark files (bench.json, peers.json) carry it
// as "context": {"trainbench_schema_version": N} (the rest stays Google Benchmark JSON, so
// tools/compare.py still reads them). A file without one is version 0: the format before
// versions existed (committed folders, e.g. results/amd-epyc-2c-4049c22c/20261129T231008Z-224a/),
// still read. A version above this build's is refused ("written by a newer trainbench").
//
// Include rule: this header depends on core only, so train/ and validate/ may write and read
// result files through it (cli -> {validate, train} -> results -> model -> {optim, gemm} -> core).
#ifndef TRAINBENCH_RESULTS_H
#define TRAINBENCH_RESULTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/common.h"

typedef enum {
    RESULT_MACHINE,  // machine.json
    RESULT_BENCH,    // bench.json (Google Benchmark JSON)
    RESULT_MEMORY,   // memory.json
    RESULT_CONFORM,  // conform.json
    RESULT_TRAIN,    // train/<name>/results.json
    RESULT_PEERS,    // peers.json (Google Benchmark JSON from reference/bench_peers.py)
    RESULT_KIND_COUNT
} ResultKind;

// The version this build writes (and the highest it reads) for each kind; RESULTS.md-style
// history of each version is in README "Result folder format".
int result_schema_version(ResultKind kind);
const char* result_file_name(ResultKind kind);  // "machine.json", ... ("results.json" for train)

// ---- generic JSON files ----
// Reads `path`. Absent file: *out = NULL and OK when !required, else STATUS_IO "missing".
// Malformed JSON: STATUS_INVALID naming the file, line, column and jansson's message. A schema
// version above this build's: STATUS_INVALID. *version (optional) gets the file's version (0:
// none recorded).
Status result_json_read(const char* path, ResultKind kind, bool required, json_t** out, int* version);
// Stamps the schema version into root (see above) and writes it atomically (temp + rename).
Status result_json_write(const char* path, ResultKind kind, json_t* root);
// Stamps the version and prints root to f (for `--json` on stdout); false when f failed.
bool result_json_print(FILE* f, ResultKind kind, json_t* root);
// The version recorded in root (0 when none).
int result_json_version(json_t* root, ResultKind kind);

// ---- bench.json / peers.json ----
typedef struct {
    double real_time_s;  // real_time of the repetition in seconds (time_unit applied)
    json_t* raw;         // the repetition's object (borrowed from BenchFile.root): counters, label
} BenchRep;

typedef struct {
    char* name;      // run_name (or name) without Google Benchmark's "/real_time" suffix
    BenchRep* reps;  // successful repetitions, in file order
    size_t n, cap;
    char* error;     // error_message of the first failed repetition, or NULL
} BenchEntry;

typedef struct {
    json_t* root;
    int version;
    BenchEntry* v;  // in order of first appearance
    size_t n, cap;
    size_t* slot;   // open-addressing hash index: slot[h] = index into v + 1, 0 = empty
    size_t slot_cap;
} BenchFile;

// Reads a Google Benchmark JSON file (aggregates ignored). Errors name the file and the entry.
Status bench_file_read(const char* path, ResultKind kind, BenchFile* out);
// The same from a parsed root (the BenchFile takes the reference); origin names it in errors.
Status bench_file_from_json(json_t* root, const char* origin, BenchFile* out);
void bench_file_free(BenchFile* f);
BenchEntry* bench_file_find(const BenchFile* f, const char* name);  // NULL when absent
// Removes every benchmark whose name starts with prefix (e.g. "icount/": timed under valgrind).
void bench_file_drop_prefix(BenchFile* f, const char* prefix);
// A counter of one repetition ("real_time" gives seconds); NAN when absent.
double bench_rep_value(const BenchRep* r, const char* key);
// Median over the repetitions of bench_rep_value; NAN when no repetition has it.
double bench_entry_median(const BenchEntry* e, const char* key);
// ---- the metric: ONE definition used by gate, report, history and plots ----
// A benchmark's metric is its real time per iteration in seconds, per repetition (lower is
// better; throughput counters are work / time of the same repetition, so their ratios are the
// inverse). Fills out[0..e->n) and returns the count.
size_t bench_entry_metric(const BenchEntry* e, double* out);
#define BENCH_METRIC_NAME "real time per iteration"
// The roofline probes (peak FMA and bf16-dot rates, STREAM triad bandwidth): their name prefix.
// A probe's figure is its BEST repetition (the least real time): a peak is what the machine can
// do, and interference only ever makes a repetition slower.
#define BENCH_ROOFLINE_PREFIX "roofline/"
bool bench_is_roofline(const char* name);
double bench_entry_best(const BenchEntry* e);  // least real time of a repetition (s); NAN if none
// A counter ("GFLOP/s") of that best repetition; NAN when absent. How reports quote a probe.
double bench_entry_best_value(const BenchEntry* e, const char* key);
// The probe a benchmark is bound by, for roofline normalization: a GEMM's label "roof=NAME"
// (bench_gemm.c) or by family: gemm/<b>/bf16/... -> roofline/dot_bf16, other gemm/ and
// train_step/ -> roofline/fma_f32, optim/ and convert/ -> roofline/triad; NULL for the probes
// themselves and anything else. Writes the probe's name into buf.
const char* bench_roofline_of(const BenchEntry* e, char* buf, size_t cap);

// ---- conform.json ----
typedef struct {
    char* id;
    bool ok;
    char* detail;
} ConformCase;

typedef struct {
    ConformCase* cases;
    size_t n, cap;
    int version;
    size_t legacy_failures;  // version 0 {"failures": N} form: N (cases then empty)
    bool legacy_count_only;
} ConformFile;

void conform_file_add(ConformFile* f, const char* id, bool ok, const char* detail);
json_t* conform_file_to_json(const ConformFile* f);
Status conform_file_write(const char* path, const ConformFile* f);
// Reads {"cases": [...]} (also, version 0: a bare array of cases, or {"failures": N}).
Status conform_file_read(const char* path, ConformFile* out);
void conform_file_free(ConformFile* f);

// ---- memory.json ----
typedef struct {
    char* optimizer;
    char* variant;    // "" when none
    char* reference;  // "" when none
    long long estimate_bytes, measured_bytes;
    // `memory --ranks R --zero 1`: each rank's optimizer-state shard (zero1_per_rank), n_ranks
    // entries; 0 without --zero 1
    struct MemoryRank {
        int rank, first_tensor, last_tensor;
        long long estimate_bytes, measured_bytes;
    }* ranks;
    size_t n_ranks;
} MemoryRow;

// memory.json's optional "training_step" (`trainbench memory --step`): one real step's activation
// + workspace estimate against the workspace high-water mark and the process peak RSS.
typedef struct {
    bool present;
    long long batch, seq_len;
    char precision[32], backend[32];
    long long estimate_bytes;          // estimate.total_bytes
    long long saved_activations_bytes, activation_gradient_bytes;
    long long measured_workspace_bytes;
    bool within_tolerance;
    double tol_below, tol_above;       // tolerance.below / .above (fractions)
    long long params_grads_bytes, optimizer_state_bytes;
    long long peak_rss_bytes;          // -1 when not recorded
} MemoryStep;

typedef struct {
    char* model;
    long long parameters, parameter_bytes;
    MemoryRow* rows;
    size_t n;
    MemoryStep step;
    int ranks, zero_stage;  // `memory --ranks R --zero S` (1 and 0 without)
} MemoryModel;

typedef struct {
    MemoryModel* models;  // one per model (version 0 allowed an array of reports)
    size_t n;
    int version;
} MemoryFile;

Status memory_file_read(const char* path, MemoryFile* out);
void memory_file_free(MemoryFile* f);

// ---- machine.json ----
typedef struct {
    json_t* root;            // the whole description (CPU, features, backends, environment, ...)
    int version;
    const char* machine_id;  // folder name; version 0: cpu slug + cores + hostname hash
    const char* machine_class;  // version >= 1: the class id history and baselines group by
    const char* instance_id;    // version >= 1: this machine instance
    const char* run_id;
    const char* commit;      // git commit, "unknown" when not recorded
    const char* date;
    const char* label;
} MachineFile;

Status machine_file_read(const char* path, MachineFile* out);
void machine_file_free(MachineFile* f);
// Class id of a machine.json root: its "machine_class" or, for version 0, its "machine_id".
const char* machine_class_of(json_t* root);
// The machine class id of an `info --json` root (or a machine.json, which holds info's fields):
// <cpu-slug>-<logical cores>c-<8 hex digits of FNV-1a over the class description> (record.c;
// README "Machine ids"). Stable across trainbench versions for an unchanged machine: recorded
// environment variables added later enter the description only when set.
void machine_class_derive(json_t* info, char* out, size_t cap);

// ---- train/<name>/results.json ----
typedef struct {
    json_t* root;
    int version;
    json_t* config;   // object
    json_t* records;  // array of step records
    json_t* evals;    // array
    json_t* summary;  // object
} TrainFile;

Status train_file_read(const char* path, TrainFile* out);
void train_file_free(TrainFile* f);
// Writes results.json atomically from its parts (borrowed; stamped with the version).
Status train_file_write(const char* path, const char* trainbench_version, const char* status, json_t* config,
                        json_t* records, json_t* evals, json_t* summary);

#endif

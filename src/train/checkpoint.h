// checkpoint.h — `trainbench train` checkpoints: OUTPUT_DIR/checkpoint-<step>/checkpoint.safetensors
// holding every parameter ("param.<name>"), every optimizer state tensor ("optim.<name>.<state>")
// and, as metadata, the format, step, optimizer step, GradScaler state, the run's config and the
// step/eval records so far; beside it model.safetensors + config.json (transformers' view). Loading validates every field against the run it is applied to.
// Not here: the records' own format (train.c owns StepRecord/EvalRecord and reads them back),
// the training loop.
#ifndef TRAINBENCH_CHECKPOINT_H
#define TRAINBENCH_CHECKPOINT_H

#include <jansson.h>
#include <stdint.h>

#include "core/common.h"
#include "model/amp.h"
#include "model/model.h"

#define CHECKPOINT_FILE "checkpoint.safetensors"
#define CHECKPOINT_FORMAT "trainbench-checkpoint-1"

// What a checkpoint saves and restores: the run's tables and buffers (borrowed).
typedef struct {
    const ParamTable* table;
    float* params;            // (table->alloc_numel) written by checkpoint_load
    ModelOptim* mo;           // state tensors and step written by checkpoint_load
    GradScaler* scaler;       // scale, growth tracker, skipped count written by checkpoint_load
    const json_t* config;     // the run's config (results.json "config"), saved and compared
    const ModelConfig* mcfg;  // the model's config (config.json of the checkpoint folder)
    const DropoutConfig* dropout;  // its dropout probabilities (config.json); NULL: 0
} CheckpointRun;

// Writes OUTPUT_DIR/checkpoint-<step>/checkpoint.safetensors; `records` is the JSON object
// {"records": [...], "evals": [...]} stored as metadata. The folder is built as
// checkpoint-<step>.tmp.<pid>/ and renamed when complete (an older checkpoint-<step>/ is
// replaced), so checkpoint-<step>/ is always complete or absent; tensors are written straight
// from the run's buffers. Prints "Saving model checkpoint to DIR". On failure (STATUS_IO: a
// write, fsync, close or rename failed) nothing new is left behind.
Status checkpoint_save(const char* output_dir, int64_t step, const CheckpointRun* c, const json_t* records);

// The checkpoint folder `dir` names: `dir` itself when it holds checkpoint.safetensors (or is
// not a folder: loading then says why), else its checkpoint-<step>/ subfolder with the largest
// step that holds checkpoint.safetensors (an output dir: resume from the newest complete
// checkpoint, as HF Trainer's get_last_checkpoint). STATUS_INVALID when it has none.
Status checkpoint_resolve(const char* dir, char* out, size_t cap);
// true when `dir` holds a checkpoint-<step> folder, complete or not (the first found's name into
// name, cap bytes): a run wrote there
bool checkpoint_folder_any(const char* dir, char* name, size_t cap);

// The "backend" its run config names, from the safetensors header of DIR's checkpoint (DIR as
// checkpoint_resolve takes it) alone, without reading the tensors: `train --backend auto`
// resumes on the backend the run started on. Writes "" when the file cannot be read or names
// none (checkpoint_load then reports what is wrong with it).
void checkpoint_backend_peek(const char* dir, char* out, size_t cap);

// Reads DIR/checkpoint.safetensors, checks its metadata (step, optimizer_step, scaler fields)
// and config against the run (STATUS_INVALID naming the file and the first bad field), then
// restores params, optimizer state and scaler. On success *step is the checkpoint's step and
// *records a new reference to its records object (the caller reads and checks it; json_decref),
// and path_out (cap bytes) names the file read, for messages.
Status checkpoint_load(const char* dir, CheckpointRun* c, int64_t* step, json_t** records, char* path_out,
                       size_t cap);

#endif

// hf_weights.h — the model's parameters as transformers stores them: a safetensors file whose
// tensor names are exactly DistilBertForSequenceClassification's state_dict keys (what
// save_pretrained writes as model.safetensors, and what load_state_dict(strict=True) accepts).
// `trainbench train --init-from` reads one; every checkpoint folder gets one.
// Not here: trainbench's own checkpoint format (params + optimizer state + scaler; train/).
#ifndef TRAINBENCH_HF_WEIGHTS_H
#define TRAINBENCH_HF_WEIGHTS_H

#include "model/model.h"

#define HF_WEIGHTS_FILE "model.safetensors"
#define HF_CONFIG_FILE "config.json"

// Reads `path` into buf (a table buffer). Strict, as load_state_dict(strict=True): every
// tensor of the table must be present with the table's shape, and no other tensor may be in
// the file; F32 is copied, BF16/F16 are widened exactly to fp32. STATUS_INVALID naming the
// file, the tensor, and its dtype/shape against what the table expects (or STATUS_IO).
// buf is unchanged on error.
Status hf_weights_load(const ParamTable* t, float* buf, const char* path);

// Writes buf's tensors under their state_dict names, F32, in table order, with metadata
// {"format": "pt"} (what save_pretrained writes), atomically.
Status hf_weights_save(const ParamTable* t, const float* buf, const char* path);

// config.json for this shape as transformers' DistilBertConfig reads it (the run's dropout
// probabilities, or 0 when dropout is NULL; gelu; eager attention not stored), written
// atomically; `DistilBertForSequenceClassification.from_pretrained(dir)` then loads the folder.
Status hf_config_save(const ModelConfig* c, const DropoutConfig* dropout, const char* path);

#endif

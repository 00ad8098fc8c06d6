// fuzz_dataset.c — libFuzzer harness: the user dataset loader (dataset_from_safetensors, as
// `train --train-file` calls it) against the tiny preset, then dataset_check_model and one
// batch gathered from what it accepted. Not here: the synthetic task.
#include "model/data.h"
#include "model/model.h"
#include "fuzz_util.h"

int fuzz_dataset(const uint8_t* data, size_t size) {
    char path[512];
    fuzz_write(fuzz_path(path, sizeof path, "dataset/train.safetensors"), data, size);
    const ModelConfig* cfg = model_config_find("tiny");
    CHECK(cfg);
    Dataset ds;
    Status s = dataset_from_safetensors(path, NULL, cfg, &ds);
    if (!status_is_ok(s)) return 0;
    if (status_is_ok(dataset_check_model(&ds, cfg)) && ds.split[SPLIT_TRAIN].n > 0) {
        Batch b;
        int B = ds.split[SPLIT_TRAIN].n < 4 ? (int)ds.split[SPLIT_TRAIN].n : 4;
        batch_alloc(&b, B, (int)ds.seq_len);
        dataset_get_batch(&ds, SPLIT_TRAIN, 0, B, &b);
        batch_free(&b);
    }
    dataset_free(&ds);
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_dataset(data, size); }
#endif

// fuzz_checkpoint.c — libFuzzer harness: checkpoint loading end to end, as a user runs it:
// the input is OUTPUT_DIR/checkpoint-2/checkpoint.safetensors and `trainbench train
// --resume-from-checkpoint OUTPUT_DIR` (tiny preset, adafactor, 16 examples, no eval, naive
// backend, --max-steps 2) runs in-process: checkpoint_resolve, checkpoint_load (metadata,
// config, tensors) and the records reader, then at most 2 steps and the results. The seed is a
// real checkpoint of exactly this run (tests/fuzz/corpus/checkpoint/).
#include "fuzz_util.h"

int fuzz_checkpoint(const uint8_t* data, size_t size) {
    char path[512], out[512];
    fuzz_write(fuzz_path(path, sizeof path, "ckpt/checkpoint-2/checkpoint.safetensors"), data, size);
    snprintf(out, sizeof out, "%s/ckpt", fuzz_dir());
    const char* argv[] = {"train", "--model", "tiny", "--optim", "adafactor", "--backend", "naive",
                          "--num-train-examples", "16", "--num-eval-examples", "0", "--max-steps", "2",
                          "--threads", "1", "--no-progress", "--output-dir", out, "--resume-from-checkpoint", out};
    (void)fuzz_run_quiet(&cmd_train, (int)ARRAY_LEN(argv), argv);
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_checkpoint(data, size); }
#endif

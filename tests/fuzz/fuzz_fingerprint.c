// fuzz_fingerprint.c — libFuzzer harness: `trainbench fingerprint CANDIDATE` in-process, the
// input being the candidate trajectory file (JSON, text/CSV or safetensors: the reader picks
// by content), against the committed references (run from the repository root).
#include "fuzz_util.h"

int fuzz_fingerprint(const uint8_t* data, size_t size) {
    char path[512];
    fuzz_write(fuzz_path(path, sizeof path, "fingerprint/candidate"), data, size);
    const char* argv[] = {"fingerprint", path};
    (void)fuzz_run_quiet(&cmd_fingerprint, (int)ARRAY_LEN(argv), argv);
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_fingerprint(data, size); }
#endif

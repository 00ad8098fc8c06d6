// fuzz_results.c — libFuzzer harness: the result-folder loaders of `gate` and `report`, run
// in-process as a user runs them. Byte 0 of the input picks the file it becomes in the
// candidate folder (bench.json, conform.json, memory.json, machine.json, peers.json,
// train/x/results.json); the rest is its content. `gate --baseline B --candidate C` (B holds the
// same files from tests/fuzz/corpus/results-baseline/, when present) and `report C --out R`
// (gnuplot not on PATH meanwhile: plots are skipped, the loaders and tables still run).
#include "fuzz_util.h"

static const char* const RESULT_FILES[] = {"bench.json", "conform.json", "memory.json", "machine.json",
                                           "peers.json", "train/x/results.json"};

int fuzz_results(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const char* name = RESULT_FILES[data[0] % ARRAY_LEN(RESULT_FILES)];
    char cand[512], base[512], rep[512], rel[256], path[768];
    snprintf(cand, sizeof cand, "%s/cand", fuzz_dir());
    snprintf(base, sizeof base, "%s/base", fuzz_dir());
    snprintf(rep, sizeof rep, "%s/report", fuzz_dir());
    (void)remove_tree(cand);
    snprintf(rel, sizeof rel, "cand/%s", name);
    fuzz_write(fuzz_path(path, sizeof path, rel), data + 1, size - 1);
    if (!path_is_dir(base)) {  // the baseline: a small valid folder, once
        CHECK(status_is_ok(make_dirs(base)));
        static const char BENCH[] =
            "{\"benchmarks\": [{\"name\": \"optim/adamw_torch/10000\", \"run_name\": \"optim/adamw_torch/10000\", "
            "\"run_type\": \"iteration\", \"repetitions\": 5, \"real_time\": 8.0, \"time_unit\": \"us\"}]}";
        snprintf(path, sizeof path, "%s/bench.json", base);
        fuzz_write(path, (const uint8_t*)BENCH, sizeof BENCH - 1);
    }
    const char* gate[] = {"gate", "--baseline", base, "--candidate", cand, "--allow-untested"};
    (void)fuzz_run_quiet(&cmd_gate, (int)ARRAY_LEN(gate), gate);
    char* old_path = getenv("PATH") ? xstrdup(getenv("PATH")) : NULL;
    setenv("PATH", "/nonexistent-fuzz", 1);
    const char* report[] = {"report", cand, "--out", rep};
    (void)fuzz_run_quiet(&cmd_report, (int)ARRAY_LEN(report), report);
    if (old_path) {
        setenv("PATH", old_path, 1);
        free(old_path);
    }
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_results(data, size); }
#endif

// fuzz_config.c — libFuzzer harness: the Hugging Face config.json parser
// (model_config_from_json_file, as `train/memory --config` call it); an accepted config must
// build its parameter table. Not here: allocating the model (a valid config may be huge).
#include "model/model.h"
#include "fuzz_util.h"

int fuzz_config(const uint8_t* data, size_t size) {
    char path[512];
    fuzz_write(fuzz_path(path, sizeof path, "config/config.json"), data, size);
    ModelConfig cfg;
    if (!status_is_ok(model_config_from_json_file(path, &cfg))) return 0;
    ParamTable t;
    Status s = param_table_build(&cfg, &t);
    CHECK(status_is_ok(s), "an accepted config must build its table: %s", s.msg);
    param_table_free(&t);
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_config(data, size); }
#endif

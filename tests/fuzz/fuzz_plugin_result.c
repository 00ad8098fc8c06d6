// fuzz_plugin_result.c — libFuzzer harness: the plugin-result reader of `conform --plugin`
// (conform_describe_child_bytes: what the parent makes of the bytes a case's child process,
// which ran the plugin, sent through its pipe, as the table row it prints). The input is those
// bytes; the wait status is "exited 0". Seeds: a well-formed PASS, and results whose strings
// fill their buffers without a terminating NUL.
#include "validate/conform.h"
#include "fuzz_util.h"

int fuzz_plugin_result(const uint8_t* data, size_t size) {
    char line[4096];
    conform_describe_child_bytes(data, size, 0, line, sizeof line);
    CHECK(strlen(line) < sizeof line);
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_plugin_result(data, size); }
#endif

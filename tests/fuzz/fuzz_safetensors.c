// fuzz_safetensors.c — libFuzzer harness: the safetensors reader (st_parse, the code under
// st_read) on arbitrary bytes, then every accessor on what it accepted (tensor data read in
// full, metadata looked up, f32 widening). Not here: the writer.
#include "core/safetensors.h"
#include "fuzz_util.h"

int fuzz_safetensors(const uint8_t* data, size_t size) {
    SafeTensors st;
    Status s = st_parse(data, size, "fuzz.safetensors", &st);
    if (!status_is_ok(s)) return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        const uint8_t* p = t->data;
        for (size_t b = 0; b < t->nbytes; b++) sink ^= p[b];
        CHECK(st_find(&st, t->name) != NULL);
        float* f = NULL;
        if (status_is_ok(st_tensor_to_f32(t, &f))) free(f);
    }
    for (size_t i = 0; i < st.n_meta; i++) CHECK(st_meta(&st, st.meta_keys[i]) != NULL);
    (void)sink;
    st_free(&st);
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return fuzz_safetensors(data, size); }
#endif

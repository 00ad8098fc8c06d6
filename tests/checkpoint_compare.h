// checkpoint_compare.h — test helpers (include after cmocka.h): two checkpoint.safetensors files
// equal where a continued or distributed run must reproduce them, and a run's results.json
// loaded, for test_train (resume) and test_ddp (--ddp vs accumulation).
#ifndef TRAINBENCH_TEST_CHECKPOINT_COMPARE_H
#define TRAINBENCH_TEST_CHECKPOINT_COMPARE_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/safetensors.h"

// Every tensor of the two files (parameters and optimizer state, which must be present) bit for
// bit, naming the first that differs, and the metadata values named in meta[0..n_meta) equal as
// text. The rest of the metadata (config, records: output folder, ranks, step times) is not
// compared.
__attribute__((unused)) static void assert_checkpoint_files_equal(const char* a, const char* b,
                                                                  const char* const* meta, size_t n_meta) {
    SafeTensors sa, sb;
    assert_true(status_is_ok(st_read(a, &sa)));
    assert_true(status_is_ok(st_read(b, &sb)));
    assert_int_equal(sa.n_tensors, sb.n_tensors);
    size_t n_optim = 0;
    for (size_t i = 0; i < sa.n_tensors; i++) {
        const StTensor* ta = &sa.tensors[i];
        const StTensor* tb = st_find(&sb, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->nbytes, tb->nbytes);
        if (memcmp(ta->data, tb->data, ta->nbytes) != 0) printf("differs: %s\n", ta->name);
        assert_memory_equal(ta->data, tb->data, ta->nbytes);
        n_optim += strncmp(ta->name, "optim.", 6) == 0;
    }
    assert_true(n_optim > 0);  // optimizer state is in the checkpoint
    for (size_t k = 0; k < n_meta; k++) assert_string_equal(st_meta(&sa, meta[k]), st_meta(&sb, meta[k]));
    st_free(&sa);
    st_free(&sb);
}

// DIR/results.json parsed (the test fails, naming the parser's error, when it cannot be).
__attribute__((unused)) static json_t* load_results(const char* dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/results.json", dir);
    json_error_t err;
    json_t* j = json_load_file(path, 0, &err);
    if (!j) printf("%s: %s\n", path, err.text);
    assert_non_null(j);
    return j;
}

#endif

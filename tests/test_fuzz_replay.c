// test_fuzz_replay.c — the standalone driver `make test` uses for the libFuzzer harnesses of
// tests/fuzz/ (built by gcc, normally and under ASan+UBSan; no clang needed): every file of
// tests/fuzz/corpus/<harness>/ (seeds and inputs the fuzzers kept) and of
// tests/fuzz/crashes/<harness>/ (reproducers of fixed bugs: each must now pass) goes through
// the same entry function libFuzzer calls. A crash, a CHECK, a sanitizer report or a leak
// fails the run. Runs from the repository root (run_tests.sh does).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_checkpoint.c"
#include "fuzz/fuzz_config.c"
#include "fuzz/fuzz_dataset.c"
#include "fuzz/fuzz_fingerprint.c"
#include "fuzz/fuzz_plugin_result.c"
#include "fuzz/fuzz_results.c"
#include "fuzz/fuzz_safetensors.c"

static int cmp_names(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

// Replays every file of DIR (sorted, so the order is stable); returns how many.
static size_t replay_dir(const char* dir, int (*fn)(const uint8_t*, size_t)) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    char** names = NULL;
    size_t n = 0, cap = 0;
    struct dirent* de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) names = xrealloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[n++] = xstrdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        uint8_t* buf;
        size_t len;
        Status s = read_file(path, &buf, &len);
        assert_true(status_is_ok(s));
        fn(buf, len);
        free(buf);
        free(names[i]);
    }
    free(names);
    return n;
}

static void replay(const char* harness, int (*fn)(const uint8_t*, size_t)) {
    char corpus[256], crashes[256];
    snprintf(corpus, sizeof corpus, "tests/fuzz/corpus/%s", harness);
    snprintf(crashes, sizeof crashes, "tests/fuzz/crashes/%s", harness);
    double t0 = now_seconds();
    size_t a = replay_dir(corpus, fn), b = replay_dir(crashes, fn);
    printf("fuzz replay %-12s %3zu corpus files + %2zu crash reproducers, %.2f s\n", harness, a, b, now_seconds() - t0);
    assert_true(a > 0);  // every harness has a committed seed corpus
}

static void test_safetensors(void** s) { (void)s; replay("safetensors", fuzz_safetensors); }
static void test_dataset(void** s) { (void)s; replay("dataset", fuzz_dataset); }
static void test_config(void** s) { (void)s; replay("config", fuzz_config); }
static void test_checkpoint(void** s) { (void)s; replay("checkpoint", fuzz_checkpoint); }
static void test_results(void** s) { (void)s; replay("results", fuzz_results); }
static void test_fingerprint(void** s) { (void)s; replay("fingerprint", fuzz_fingerprint); }
static void test_plugin_result(void** s) { (void)s; replay("plugin_result", fuzz_plugin_result); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors), cmocka_unit_test(test_dataset), cmocka_unit_test(test_config),
        cmocka_unit_test(test_checkpoint),  cmocka_unit_test(test_results), cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_plugin_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

// test_check_dtypes.c — `trainbench inspect` and `trainbench check` on files of every safetensors
// dtype written by the Python package (reference/golden/safetensors/dtype_*.safetensors):
// inspect shows statistics for each, check passes each against itself bit for bit, catches a
// one-unit change of a U64 beyond 2^53 (exact integers), allows 1 fp8 ulp and refuses 2, keeps a
// dtype mismatch an exit-2 error unless --allow-dtype-mismatch (then named, exact widening),
// lists unknown dtype names instead of refusing the file, and still refuses malformed files.
// Candidates are made from the fixtures by our writer (test inputs, not expected values).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "cli_harness.h"
#include "core/common.h"
#include "core/dtype.h"
#include "core/safetensors.h"

#define FIX "reference/golden/safetensors"

static char out[1 << 16];

static void assert_has(const char* what) {
    if (!strstr(out, what)) fail_msg("output lacks \"%s\":\n%s", what, out);
}

// Writes `src` fixture's tensors to g_tmp/name, with element `idx` of "x" changed by `delta` on
// its raw code (ints: value; floats: the code, i.e. ulps), optionally as dtype `as` (bf16 from f32).
static void write_candidate(const char* fixture, const char* name, size_t idx, int delta) {
    SafeTensors st;
    Status s = st_read(fixture, &st);
    if (!status_is_ok(s)) fail_msg("%s", s.msg);
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < st.n_tensors; i++) {
        StTensor* t = &st.tensors[i];
        if (!strcmp(t->name, "x") && delta) {
            size_t size = dtype_traits(t->dtype)->size;
            uint8_t* p = (uint8_t*)t->data + idx * size;
            uint64_t v = 0;
            memcpy(&v, p, size);
            v += (uint64_t)(int64_t)delta;
            memcpy(p, &v, size);
        }
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    assert_true(status_is_ok(st_writer_save(w, path)));
    st_writer_free(w);
    st_free(&st);
}

static void test_every_dtype_inspect_and_self_check(void** state) {
    (void)state;
    for (int d = 0; d < DTYPE_COUNT_ALL; d++) {
        char args[512];
        snprintf(args, sizeof args, "inspect " FIX "/dtype_%s.safetensors", dtype_name((DType)d));
        assert_int_equal(cli_run(args, true, out, sizeof out), 0);
        assert_has(" x ");
        assert_has(" min ");
        assert_has(" max ");
        snprintf(args, sizeof args, "check " FIX "/dtype_%s.safetensors " FIX "/dtype_%s.safetensors",
                 dtype_name((DType)d), dtype_name((DType)d));
        assert_int_equal(cli_run(args, true, out, sizeof out), 0);
        assert_has("(all bit-identical)");
    }
    assert_int_equal(cli_run("inspect " FIX "/dtype_u64.safetensors", true, out, sizeof out), 0);
    assert_has("max 18446744073709551615");  // exact, not 1.84467e+19
    assert_int_equal(cli_run("inspect " FIX "/dtype_c64.safetensors", true, out, sizeof out), 0);
    assert_has("real: min");
    assert_has("imag: min");
}

static void test_integers_exact_beyond_2p53(void** state) {
    (void)state;
    write_candidate(FIX "/dtype_u64.safetensors", "u64.safetensors", 5, 1);  // x[5] = 2^53 + 1
    char args[1024];
    snprintf(args, sizeof args, "check " FIX "/dtype_u64.safetensors %s/u64.safetensors", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 1);
    assert_has("9007199254740994");
    assert_has("9007199254740993");
    printf("%s", out);
}

static void test_fp8_one_ulp_passes_two_fail(void** state) {
    (void)state;
    char args[1024];
    write_candidate(FIX "/dtype_f8_e4m3.safetensors", "f8_1.safetensors", 6, 1);  // code 0x38 = 1.0 -> 1.125
    snprintf(args, sizeof args, "check " FIX "/dtype_f8_e4m3.safetensors %s/f8_1.safetensors", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 0);
    assert_has("1.125");
    write_candidate(FIX "/dtype_f8_e4m3.safetensors", "f8_2.safetensors", 6, 2);  // 1.25: 2 ulps
    snprintf(args, sizeof args, "check " FIX "/dtype_f8_e4m3.safetensors %s/f8_2.safetensors", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 1);
    assert_has("FAIL");
}

static void test_dtype_mismatch(void** state) {
    (void)state;
    // the bf16 fixture's values, widened exactly to f32, and an i32 tensor of its shape
    SafeTensors st;
    assert_true(status_is_ok(st_read(FIX "/dtype_bf16.safetensors", &st)));
    const StTensor* x = st_find(&st, "x");
    float* f = NULL;
    assert_true(status_is_ok(st_tensor_to_f32(x, &f)));
    int32_t iv[15];
    for (int i = 0; i < 15; i++) iv[i] = i;
    StWriter* w = st_writer_new();
    st_writer_add(w, "x", DTYPE_F32, x->ndim, x->shape, f);
    char path[512], args[1200];
    snprintf(path, sizeof path, "%s/f32.safetensors", g_tmp);
    assert_true(status_is_ok(st_writer_save(w, path)));
    st_writer_free(w);
    f[1] = 1.0f + 0x1p-20f;  // x[0,1]: a value bf16 cannot hold
    w = st_writer_new();
    st_writer_add(w, "x", DTYPE_F32, x->ndim, x->shape, f);
    snprintf(path, sizeof path, "%s/f32_off.safetensors", g_tmp);
    assert_true(status_is_ok(st_writer_save(w, path)));
    st_writer_free(w);
    w = st_writer_new();
    st_writer_add(w, "x", DTYPE_I32, x->ndim, x->shape, iv);
    snprintf(path, sizeof path, "%s/i32.safetensors", g_tmp);
    assert_true(status_is_ok(st_writer_save(w, path)));
    st_writer_free(w);
    free(f);
    st_free(&st);

    snprintf(args, sizeof args, "check " FIX "/dtype_bf16.safetensors %s/f32.safetensors --tensors '^x$'", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 2);
    assert_has("dtype differs: golden bf16, candidate f32");
    assert_has("--allow-dtype-mismatch");
    snprintf(args, sizeof args, "check " FIX "/dtype_bf16.safetensors %s/f32.safetensors --tensors '^x$' "
             "--allow-dtype-mismatch", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 0);  // the same values, exactly
    assert_has("widened:   x: golden bf16, candidate f32");
    assert_has("bf16<-f32");
    assert_has("(all bit-identical)");
    snprintf(args, sizeof args, "check " FIX "/dtype_bf16.safetensors %s/f32_off.safetensors --tensors '^x$' "
             "--allow-dtype-mismatch --exact", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 1);  // 2^-20 off: not hidden by a rounding
    assert_has("1.00000095");
    snprintf(args, sizeof args, "check " FIX "/dtype_bf16.safetensors %s/i32.safetensors --tensors '^x$' "
             "--allow-dtype-mismatch", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 2);
    assert_has("no exact common type");
    printf("%s", out);
}

static void test_unknown_listed_and_malformed_refused(void** state) {
    (void)state;
    const char* h = "{\"q\":{\"dtype\":\"F8_E3M4\",\"shape\":[5],\"data_offsets\":[0,5]},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[5,9]}}";
    const char* bad = "{\"q\":{\"dtype\":\"F6_E2M3\",\"shape\":[3],\"data_offsets\":[0,3]}}";
    const char* hs[2] = {h, bad};
    const char* names[2] = {"unknown.safetensors", "bad.safetensors"};
    const size_t data_len[2] = {9, 3};
    for (int k = 0; k < 2; k++) {
        size_t hlen = strlen(hs[k]);
        uint8_t buf[256] = {0};
        for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
        memcpy(buf + 8, hs[k], hlen);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", g_tmp, names[k]);
        assert_true(status_is_ok(write_file_atomic(path, buf, 8 + hlen + data_len[k])));
    }
    char args[1024];
    snprintf(args, sizeof args, "inspect %s/unknown.safetensors", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 0);
    assert_has("unknown dtype \"F8_E3M4\": 5 bytes");
    snprintf(args, sizeof args, "check %s/unknown.safetensors %s/unknown.safetensors", g_tmp, g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 2);
    assert_has("\"F8_E3M4\" is not a safetensors dtype this reader knows");
    snprintf(args, sizeof args, "check %s/unknown.safetensors %s/unknown.safetensors --tensors '^w$'", g_tmp, g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 0);
    snprintf(args, sizeof args, "inspect %s/bad.safetensors", g_tmp);
    assert_int_equal(cli_run(args, true, out, sizeof out), 2);
    assert_has("not a whole number of bytes");
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "check_dtypes") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_dtype_inspect_and_self_check),
        cmocka_unit_test(test_integers_exact_beyond_2p53),
        cmocka_unit_test(test_fp8_one_ulp_passes_two_fail),
        cmocka_unit_test(test_dtype_mismatch),
        cmocka_unit_test(test_unknown_listed_and_malformed_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cli_harness_cleanup("check_dtypes");
    return rc;
}

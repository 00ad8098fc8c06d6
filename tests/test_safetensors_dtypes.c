// test_safetensors_dtypes.c — every dtype of the safetensors format against files written by
// the real Python package (reference/gen_safetensors_fixtures.py, reference/golden/safetensors/):
//   - fp8: all 256 codes of each of the five fp8 formats decode exactly as torch's own
//     conversion to float32 and float64 (NaN: NaN-ness and sign; torch's payloads vary);
//   - one fixture per dtype (odd shape, 0-element and 0-d tensors, metadata) reads back exactly:
//     floats bit for bit as doubles, integers as integers (U64/I64 beyond 2^53), complex per part;
//   - our writer re-writing each fixture gives the bytes whose sha256 the generator committed
//     after reading them back with safetensors.numpy/torch (writer_sha256.tsv): writer drift fails;
//   - packed F4/F6 sizes and bit order, the reader's unknown-dtype listing mode, and corruptions
//     of a file with every kind of dtype read in that mode (every element read inside its bytes).
// With `--write-dir OUT FOLDER` it only writes the re-written fixtures (for the generator).
// Not here: the generic reader/writer rules (test_safetensors.c), check and inspect (test_check.c).
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "core/dtype.h"
#include "core/safetensors.h"

#define FIXTURES "reference/golden/safetensors"

// ---- sha256 (FIPS 180-4), for the writer hashes --------------------------------------------
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_hex(const uint8_t* msg, size_t len, char out[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    size_t total = (len + 9 + 63) / 64 * 64;
    uint8_t* m = calloc(total, 1);
    assert_non_null(m);
    if (len) memcpy(m, msg, len);
    m[len] = 0x80;
    for (int i = 0; i < 8; i++) m[total - 1 - i] = (uint8_t)(((uint64_t)len * 8) >> (8 * i));
    for (size_t off = 0; off < total; off += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)m[off + 4 * i] << 24 | (uint32_t)m[off + 4 * i + 1] << 16 |
                   (uint32_t)m[off + 4 * i + 2] << 8 | m[off + 4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
            uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
    }
    free(m);
    for (int i = 0; i < 8; i++) sprintf(out + 8 * i, "%08x", h[i]);
}

// ---- helpers --------------------------------------------------------------------------------
static void read_fixture(DType dt, SafeTensors* st) {
    char path[256];
    snprintf(path, sizeof path, FIXTURES "/dtype_%s.safetensors", dtype_name(dt));
    Status s = st_read(path, st);
    if (!status_is_ok(s)) fail_msg("%s", s.msg);
}

static bool same_double(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) && signbit(a) == signbit(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

// Our re-write of a fixture: tensors in file order, metadata in header order.
static void rewrite(const SafeTensors* st, uint8_t** buf, size_t* len) {
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < st->n_meta; i++) st_writer_meta(w, st->meta_keys[i], st->meta_values[i]);
    for (size_t i = 0; i < st->n_tensors; i++) {
        const StTensor* t = &st->tensors[i];
        st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    assert_true(status_is_ok(st_writer_serialize(w, buf, len)));
    st_writer_free(w);
}

// ---- the table's facts agree with the decoders (which are checked against torch below) -----
static void test_table_facts_match_decoders(void** state) {
    (void)state;
    for (int d = 0; d < DTYPE_COUNT_ALL; d++) {
        const DType dt = (DType)d;
        const DTypeTraits* t = dtype_traits(dt);
        DType back;
        assert_true(dtype_from_name(t->name, &back) && back == dt);
        assert_true(dtype_from_st_name(t->st_name, &back) && back == dt);
        if (d < DTYPE_COUNT) assert_int_equal(t->size * 8, t->bits);
        else assert_int_equal(t->size, 0);
        assert_int_equal(t->is_float, t->kind == DTYPE_KIND_FLOAT);
        if (t->kind != DTYPE_KIND_FLOAT || t->bits > 16) continue;
        // every code: the largest finite, smallest positive and smallest normal values, and the
        // value after 1.0 (1 + eps) are what the table says
        double max_finite = 0, min_pos = INFINITY, after_one = INFINITY;
        for (uint32_t c = 0; c < (1u << t->bits); c++) {
            double v = dtype_decode_small_float(dt, c);
            if (isfinite(v) && v > max_finite) max_finite = v;
            if (v > 0 && v < min_pos) min_pos = v;
            if (v > 1 && v < after_one) after_one = v;
        }
        if (max_finite != t->max_finite || min_pos != t->min_subnormal || after_one != 1 + t->eps)
            fail_msg("%s: table max %a / min subnormal %a / eps %a, decoded %a / %a / %a", t->name, t->max_finite,
                     t->min_subnormal, t->eps, max_finite, min_pos, after_one - 1);
        assert_true(t->min_normal >= t->min_subnormal);
    }
    size_t nb;
    assert_true(dtype_nbytes(DTYPE_F6_E2M3, 4, &nb) && nb == 3);
    assert_false(dtype_nbytes(DTYPE_F6_E2M3, 2, &nb));
    assert_true(dtype_nbytes(DTYPE_F4, 0, &nb) && nb == 0);
    assert_false(dtype_nbytes(DTYPE_U64, SIZE_MAX / 4, &nb));
}

// ---- fp8: all 256 codes against torch -------------------------------------------------------
static void test_fp8_all_codes_match_torch(void** state) {
    (void)state;
    SafeTensors st;
    Status s = st_read(FIXTURES "/fp8_all_codes.safetensors", &st);
    if (!status_is_ok(s)) fail_msg("%s", s.msg);
    const DType fmts[] = {DTYPE_F8_E4M3, DTYPE_F8_E4M3FNUZ, DTYPE_F8_E5M2, DTYPE_F8_E5M2FNUZ, DTYPE_F8_E8M0};
    const StTensor* codes = st_find(&st, "codes");
    assert_non_null(codes);
    assert_int_equal(codes->numel, 256);
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        char n32[64], n64[64];
        snprintf(n32, sizeof n32, "%s.f32", dtype_name(fmts[f]));
        snprintf(n64, sizeof n64, "%s.f64", dtype_name(fmts[f]));
        const StTensor* t32 = st_find(&st, n32);
        const StTensor* t64 = st_find(&st, n64);
        assert_true(t32 && t64 && t32->dtype == DTYPE_F32 && t64->dtype == DTYPE_F64 && t64->numel == 256);
        size_t nan = 0;
        for (size_t c = 0; c < 256; c++) {
            double ours = dtype_f64_at(fmts[f], codes->data, c);  // the U8 codes are the fp8 bytes
            double want64 = ((const double*)t64->data)[c];
            float want32 = ((const float*)t32->data)[c];
            if (!same_double(ours, want64))
                fail_msg("%s code 0x%02zx: ours %a, torch float64 %a", dtype_name(fmts[f]), c, ours, want64);
            if (!same_double((double)(float)ours, (double)want32))
                fail_msg("%s code 0x%02zx: ours %a, torch float32 %a", dtype_name(fmts[f]), c, ours,
                         (double)want32);
            nan += isnan(ours) != 0;
        }
        print_message("    %-12s 256 codes identical to torch (%zu NaN codes)\n", dtype_name(fmts[f]), nan);
    }
    st_free(&st);
}

// ---- every fixture reads back exactly -----------------------------------------------------
static void check_values(DType dt, const StTensor* t, json_t* list) {
    assert_non_null(list);
    const DTypeTraits* tr = dtype_traits(dt);
    assert_int_equal(json_array_size(list), t->numel);
    for (size_t i = 0; i < t->numel; i++) {
        json_t* e = json_array_get(list, i);
        if (tr->kind == DTYPE_KIND_FLOAT) {
            double want = strtod(json_string_value(e), NULL);
            double got = dtype_f64_at(dt, t->data, i);
            if (!same_double(got, want) && !(isnan(got) && isnan(want)))
                fail_msg("%s %s[%zu]: got %a, expected %s", dtype_name(dt), t->name, i, got, json_string_value(e));
        } else if (tr->kind == DTYPE_KIND_COMPLEX) {
            for (size_t part = 0; part < 2; part++) {
                double want = strtod(json_string_value(json_array_get(e, part)), NULL);
                double got = dtype_f64_at(DTYPE_F32, t->data, 2 * i + part);
                if (!same_double(got, want) && !(isnan(got) && isnan(want)))
                    fail_msg("c64 %s[%zu] part %zu: got %a, expected %a", t->name, i, part, got, want);
            }
        } else if (tr->kind == DTYPE_KIND_BOOL) {
            assert_int_equal((long long)dtype_int_at(dt, t->data, i), (long long)json_integer_value(e));
        } else {
            const char* text = json_string_value(e);
            __int128 want = text[0] == '-' ? (__int128)strtoll(text, NULL, 10) : (__int128)strtoull(text, NULL, 10);
            __int128 got = dtype_int_at(dt, t->data, i);
            if (got != want) fail_msg("%s %s[%zu]: expected %s", dtype_name(dt), t->name, i, text);
        }
    }
}

static void test_python_fixtures_read_back_exactly(void** state) {
    (void)state;
    for (int d = 0; d < DTYPE_COUNT_ALL; d++) {
        const DType dt = (DType)d;
        SafeTensors st;
        read_fixture(dt, &st);
        assert_int_equal(st.n_meta, 1);
        json_error_t err;
        json_t* fx = json_loads(st_meta(&st, "fixture"), 0, &err);  // the generator's metadata
        assert_non_null(fx);
        assert_string_equal(json_string_value(json_object_get(fx, "dtype")), dtype_traits(dt)->st_name);
        json_t* expect = json_object_get(fx, "expect");
        const bool packed = dtype_traits(dt)->size == 0;
        const StTensor* x = st_find(&st, "x");
        const StTensor* empty = st_find(&st, "empty");
        const StTensor* scalar = st_find(&st, "scalar");
        assert_true(x && empty && x->dtype == dt && empty->dtype == dt);
        assert_int_equal(x->ndim, 2);
        assert_int_equal(x->shape[0], 3);
        assert_int_equal(x->shape[1], packed ? 4 : 5);
        assert_int_equal(empty->numel, 0);
        assert_int_equal(empty->nbytes, 0);
        size_t nb = 0;
        assert_true(dtype_nbytes(dt, x->numel, &nb));
        assert_int_equal(x->nbytes, nb);
        check_values(dt, x, json_object_get(expect, "x"));
        check_values(dt, empty, json_object_get(expect, "empty"));
        if (packed) {
            assert_null(scalar);  // one 4- or 6-bit element is not a whole byte
        } else {
            assert_true(scalar && scalar->dtype == dt && scalar->ndim == 0 && scalar->numel == 1);
            check_values(dt, scalar, json_object_get(expect, "scalar"));
        }
        json_decref(fx);
        st_free(&st);
    }
    print_message("    %d dtypes: x, empty%s read back exactly\n", DTYPE_COUNT_ALL, ", scalar");
}

// ---- our writer: the bytes the generator verified with the Python package -----------------
static void test_writer_matches_python_verified_hashes(void** state) {
    (void)state;
    uint8_t* tsv = NULL;
    size_t tsv_len = 0;
    Status s = read_file(FIXTURES "/writer_sha256.tsv", &tsv, &tsv_len);
    if (!status_is_ok(s)) fail_msg("%s", s.msg);
    char* text = calloc(tsv_len + 1, 1);
    assert_non_null(text);
    memcpy(text, tsv, tsv_len);
    free(tsv);
    int checked = 0;
    for (int d = 0; d < DTYPE_COUNT_ALL; d++) {
        const DType dt = (DType)d;
        char key[128];
        snprintf(key, sizeof key, "\ndtype_%s.safetensors\t", dtype_name(dt));
        const char* row = strstr(text, key);
        if (!row) fail_msg("writer_sha256.tsv has no row for dtype_%s.safetensors", dtype_name(dt));
        const char* want = row + strlen(key);
        SafeTensors st;
        read_fixture(dt, &st);
        uint8_t* buf;
        size_t len;
        rewrite(&st, &buf, &len);
        char got[65];
        sha256_hex(buf, len, got);
        if (strncmp(got, want, 64) != 0)
            fail_msg("our writer's re-write of dtype_%s.safetensors has sha256 %s, the Python-verified "
                     "one is %.64s: the writer's output drifted", dtype_name(dt), got, want);
        free(buf);
        st_free(&st);
        checked++;
    }
    free(text);
    print_message("    %d re-written fixtures: sha256 as verified with safetensors.numpy/torch\n", checked);
}

static void test_sha256_known_vectors(void** state) {
    (void)state;
    char h[65];
    sha256_hex((const uint8_t*)"", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_hex((const uint8_t*)"abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// ---- packed sizes and bit order -------------------------------------------------------------
static Status parse_header(const char* header, size_t data_len, const StReadOptions* opts, SafeTensors* st) {
    size_t hlen = strlen(header), len = 8 + hlen + data_len;
    uint8_t* buf = calloc(len, 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) buf[8 + hlen + i] = (uint8_t)(0xA5 ^ (i * 29));
    Status s = st_parse_opts(buf, len, "t.safetensors", opts, st);
    free(buf);
    return s;
}

static void expect_refused(const char* header, size_t data_len, const char* what) {
    SafeTensors st;
    Status s = parse_header(header, data_len, NULL, &st);
    print_message("    -> %s\n", s.msg);
    assert_int_equal(s.code, STATUS_INVALID);
    if (!strstr(s.msg, what)) fail_msg("message \"%s\" lacks \"%s\"", s.msg, what);
}

static void test_packed_sizes(void** state) {
    (void)state;
    SafeTensors st;
    assert_true(status_is_ok(parse_header("{\"a\":{\"dtype\":\"F6_E2M3\",\"shape\":[2,2],\"data_offsets\":[0,3]}}", 3, NULL, &st)));
    assert_int_equal(st.tensors[0].nbytes, 3);
    assert_int_equal(st.tensors[0].numel, 4);
    st_free(&st);
    assert_true(status_is_ok(parse_header("{\"a\":{\"dtype\":\"F4\",\"shape\":[3,2],\"data_offsets\":[0,3]}}", 3, NULL, &st)));
    st_free(&st);
    expect_refused("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "not a whole number of bytes");
    expect_refused("{\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[],\"data_offsets\":[0,1]}}", 1, "not a whole number of bytes");
    expect_refused("{\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, "needs 3 bytes");
    // bit order: a little-endian bit stream (torch.float4_e2m1fn_x2: element 0 in bits 3..0)
    const uint8_t f4[1] = {0x7A};
    assert_int_equal(dtype_code_at(DTYPE_F4, f4, 0), 0xA);
    assert_int_equal(dtype_code_at(DTYPE_F4, f4, 1), 0x7);
    const uint8_t f6[3] = {0x41, 0x20, 0xFC};  // codes 1, 1, 2, 63 = 000001 000001 000010 111111
    const uint64_t want[4] = {1, 1, 2, 63};
    for (size_t i = 0; i < 4; i++) assert_int_equal(dtype_code_at(DTYPE_F6_E2M3, f6, i), want[i]);
    assert_true(dtype_f64_at(DTYPE_F6_E2M3, f6, 3) == -7.5);
    assert_true(dtype_f64_at(DTYPE_F6_E3M2, f6, 3) == -28.0);
}

// ---- unknown dtype names: listed in lenient mode, refused otherwise -------------------------
static void test_unknown_dtype_listed(void** state) {
    (void)state;
    const char* h = "{\"__metadata__\":{\"k\":\"v\"},\"q\":{\"dtype\":\"F8_E3M4\",\"shape\":[5],\"data_offsets\":[0,5]},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[5,9]}}";
    SafeTensors st;
    Status s = parse_header(h, 9, NULL, &st);
    assert_int_equal(s.code, STATUS_INVALID);
    assert_non_null(strstr(s.msg, "unknown dtype \"F8_E3M4\""));
    const StReadOptions lenient = {.allow_unknown_dtypes = true};
    s = parse_header(h, 9, &lenient, &st);
    if (!status_is_ok(s)) fail_msg("%s", s.msg);
    const StTensor* q = st_find(&st, "q");
    assert_int_equal(q->dtype, DTYPE_UNKNOWN);
    assert_string_equal(q->unknown_dtype, "F8_E3M4");
    assert_string_equal(st_dtype_text(q), "F8_E3M4");
    assert_int_equal(q->nbytes, 5);
    assert_int_equal(q->numel, 5);
    assert_null(st_find(&st, "w")->unknown_dtype);
    st_free(&st);
    // every offset rule still applies to unknown dtypes
    const char* bad[] = {
        "{\"q\":{\"dtype\":\"X9\",\"shape\":[5],\"data_offsets\":[1,6]}}",   // gap
        "{\"q\":{\"dtype\":\"X9\",\"shape\":[5],\"data_offsets\":[0,12]}}",  // beyond the data
        "{\"q\":{\"dtype\":\"X9\",\"shape\":[5],\"data_offsets\":[4,0]}}",   // begin > end
        "{\"q\":{\"dtype\":\"X9\",\"shape\":[-1],\"data_offsets\":[0,6]}}",  // negative dim
        "{\"q\":{\"dtype\":\"X9\",\"shape\":[5],\"data_offsets\":[0,3]}}",   // trailing bytes
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = parse_header(bad[i], 6, &lenient, &st);
        print_message("    -> %s\n", s.msg);
        assert_int_equal(s.code, STATUS_INVALID);
    }
}

// ---- fuzz: corruptions of a file with packed, fp8, complex and unknown dtypes, read leniently -
static uint64_t xorshift(uint64_t* st) {
    uint64_t x = *st;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *st = x;
}

static void test_fuzz_lenient_every_kind(void** state) {
    (void)state;
    const char* h = "{\"__metadata__\":{\"k\":\"v\"},"
                    "\"a\":{\"dtype\":\"F6_E3M2\",\"shape\":[2,4],\"data_offsets\":[0,6]},"
                    "\"b\":{\"dtype\":\"F4\",\"shape\":[3,2],\"data_offsets\":[6,9]},"
                    "\"c\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[9,25]},"
                    "\"d\":{\"dtype\":\"F8_E5M2FNUZ\",\"shape\":[3],\"data_offsets\":[25,28]},"
                    "\"e\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[28,36]},"
                    "\"f\":{\"dtype\":\"Q3\",\"shape\":[7],\"data_offsets\":[36,41]}}";
    const size_t hlen = strlen(h), data_len = 41, len = 8 + hlen + data_len;
    uint8_t* good = calloc(len, 1);
    assert_non_null(good);
    for (int i = 0; i < 8; i++) good[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(good + 8, h, hlen);
    for (size_t i = 0; i < data_len; i++) good[8 + hlen + i] = (uint8_t)(i * 53 + 7);
    const StReadOptions lenient = {.allow_unknown_dtypes = true};
    uint64_t seed = 0x243F6A8885A308D3ull;
    int ok = 0, refused = 0;
    uint8_t* b = malloc(len);  // exact size: ASan flags any over-read
    assert_non_null(b);
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(b, good, len);
        uint64_t r = xorshift(&seed);
        if (iter) b[r % len] = (uint8_t)(r >> 32);  // iteration 0: the file as written
        SafeTensors st;
        Status s = st_parse_opts(b, len, "fuzz.safetensors", &lenient, &st);
        if (!status_is_ok(s)) {
            assert_int_equal(s.code, STATUS_INVALID);
            refused++;
            continue;
        }
        ok++;
        for (size_t i = 0; i < st.n_tensors; i++) {
            const StTensor* t = &st.tensors[i];
            if (t->dtype == DTYPE_UNKNOWN) {
                assert_non_null(t->unknown_dtype);
                continue;
            }
            size_t nb = 0;
            assert_true(dtype_nbytes(t->dtype, t->numel, &nb));
            assert_int_equal(nb, t->nbytes);
            const DTypeTraits* tr = dtype_traits(t->dtype);
            volatile double sink = 0;
            for (size_t k = 0; k < t->numel; k++) {  // every element read inside its bytes
                if (tr->kind == DTYPE_KIND_FLOAT) sink += dtype_f64_at(t->dtype, t->data, k);
                else if (tr->kind == DTYPE_KIND_COMPLEX) sink += dtype_f64_at(DTYPE_F32, t->data, 2 * k + 1);
                else sink += (double)dtype_int_at(t->dtype, t->data, k);
            }
            (void)sink;
        }
        st_free(&st);
    }
    free(b);
    free(good);
    print_message("    3000 corruptions (lenient reader): %d parsed, %d refused\n", ok, refused);
    assert_true(ok > 0 && refused > 0);
}

// ---- --write-dir: the re-written fixtures for reference/gen_safetensors_fixtures.py ---------
static int write_dir(const char* out, const char* folder) {
    for (int d = 0; d < DTYPE_COUNT_ALL; d++) {
        char in_path[512], out_path[512];
        snprintf(in_path, sizeof in_path, "%s/dtype_%s.safetensors", folder, dtype_name((DType)d));
        snprintf(out_path, sizeof out_path, "%s/dtype_%s.safetensors", out, dtype_name((DType)d));
        SafeTensors st;
        Status s = st_read(in_path, &st);
        if (!status_is_ok(s)) {
            fprintf(stderr, "%s\n", s.msg);
            return 2;
        }
        StWriter* w = st_writer_new();
        for (size_t i = 0; i < st.n_meta; i++) st_writer_meta(w, st.meta_keys[i], st.meta_values[i]);
        for (size_t i = 0; i < st.n_tensors; i++) {
            const StTensor* t = &st.tensors[i];
            st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
        }
        s = st_writer_save(w, out_path);
        st_writer_free(w);
        st_free(&st);
        if (!status_is_ok(s)) {
            fprintf(stderr, "%s\n", s.msg);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 4 && !strcmp(argv[1], "--write-dir")) return write_dir(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_known_vectors),
        cmocka_unit_test(test_table_facts_match_decoders),
        cmocka_unit_test(test_fp8_all_codes_match_torch),
        cmocka_unit_test(test_python_fixtures_read_back_exactly),
        cmocka_unit_test(test_writer_matches_python_verified_hashes),
        cmocka_unit_test(test_packed_sizes),
        cmocka_unit_test(test_unknown_dtype_listed),
        cmocka_unit_test(test_fuzz_lenient_every_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

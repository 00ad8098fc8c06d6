// safetensors.c — implementation of safetensors.h: a validating reader (jansson for the JSON
// header) and a writer that produces the same layout as the Python/Rust reference library.
// Not here: memory mapping, lazy loading, tensor comparison.
#include "core/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "trainbench: safetensors data is little-endian; big-endian hosts are not supported"
#endif

// Run-time twin of the #error above, for compilers that do not define __BYTE_ORDER__.
static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

static Status host_endian_status(const char* what) {
    return status_make(STATUS_UNSUPPORTED,
                       "%s: safetensors data is little-endian and this host is big-endian "
                       "(not supported)", what);
}

static const char* json_type_name(const json_t* j) {
    switch (json_typeof(j)) {
        case JSON_OBJECT: return "an object";
        case JSON_ARRAY: return "an array";
        case JSON_STRING: return "a string";
        case JSON_INTEGER: return "an integer";
        case JSON_REAL: return "a real number";
        case JSON_TRUE: return "true";
        case JSON_FALSE: return "false";
        case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

// "F32, BF16, F16, ..." from the DType table, into dst (no static state: thread-safe)
static const char* st_dtype_names_list(char* dst, size_t cap) {
    size_t pos = 0;
    dst[0] = '\0';
    for (int dt = 0; dt < DTYPE_COUNT_ALL && pos < cap; dt++)
        pos += (size_t)snprintf(dst + pos, cap - pos, "%s%s", dt ? ", " : "",
                                dtype_traits((DType)dt)->st_name);
    return dst;
}

// Exact (case-sensitive) safetensors dtype name lookup over the DType table.
static bool st_dtype_lookup(const char* s, DType* out) {
    for (int dt = 0; dt < DTYPE_COUNT_ALL; dt++) {
        if (strcmp(dtype_traits((DType)dt)->st_name, s) == 0) {
            *out = (DType)dt;
            return true;
        }
    }
    return false;
}

// "[2, 3]" for messages
static void format_shape(char* dst, size_t cap, const int64_t* shape, int ndim) {
    size_t pos = 0;
    dst[0] = '\0';
    pos += (size_t)snprintf(dst, cap, "[");
    for (int i = 0; i < ndim && pos < cap; i++)
        pos += (size_t)snprintf(dst + pos, cap - pos, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (pos < cap) snprintf(dst + pos, cap - pos, "]");
}

// ---------------------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------------------

typedef struct {
    size_t begin, end;  // byte offsets in the data region
} Span;

// Alignment the reader gives a tensor's data: its element size (1 for packed and unknown).
static size_t data_alignment(const StTensor* t) {
    if (t->dtype == DTYPE_UNKNOWN) return 1;
    size_t size = dtype_traits(t->dtype)->size;
    return size ? size : 1;
}

// Validates one tensor entry and fills t (name already set) and its span.
static Status parse_entry(const char* file, const char* name, const json_t* v, size_t data_len,
                          bool allow_unknown, StTensor* t, Span* span) {
    if (!json_is_object(v))
        return status_make(STATUS_INVALID, "%s: tensor '%s': entry is not an object (got %s)",
                           file, name, json_type_name(v));

    const json_t* jd = json_object_get(v, "dtype");
    if (!jd)
        return status_make(STATUS_INVALID, "%s: tensor '%s': missing \"dtype\"", file, name);
    if (!json_is_string(jd))
        return status_make(STATUS_INVALID, "%s: tensor '%s': \"dtype\" must be a string (got %s)",
                           file, name, json_type_name(jd));
    if (!st_dtype_lookup(json_string_value(jd), &t->dtype)) {
        if (allow_unknown) {
            t->dtype = DTYPE_UNKNOWN;
            t->unknown_dtype = xstrdup(json_string_value(jd));
        } else {
            char allowed[512];
            return status_make(STATUS_INVALID, "%s: tensor '%s': unknown dtype \"%s\" (allowed: %s)",
                               file, name, json_string_value(jd),
                               st_dtype_names_list(allowed, sizeof allowed));
        }
    }
    const bool known = t->dtype != DTYPE_UNKNOWN;

    const json_t* js = json_object_get(v, "shape");
    if (!js)
        return status_make(STATUS_INVALID, "%s: tensor '%s': missing \"shape\"", file, name);
    if (!json_is_array(js))
        return status_make(STATUS_INVALID,
                           "%s: tensor '%s': \"shape\" must be an array of integers (got %s)",
                           file, name, json_type_name(js));
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_NDIM)
        return status_make(STATUS_INVALID,
                           "%s: tensor '%s': shape has %zu dimensions (at most %d supported)",
                           file, name, nd, ST_MAX_NDIM);
    t->ndim = (int)nd;
    size_t numel = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        const json_t* d = json_array_get(js, i);
        if (!json_is_integer(d))
            return status_make(STATUS_INVALID, "%s: tensor '%s': shape[%zu] is not an integer "
                               "(got %s)", file, name, i, json_type_name(d));
        json_int_t dim = json_integer_value(d);
        if (dim < 0)
            return status_make(STATUS_INVALID, "%s: tensor '%s': shape[%zu] is negative (%lld)",
                               file, name, i, (long long)dim);
        t->shape[i] = (int64_t)dim;
        if (!overflow && !size_mul_ok(numel, (size_t)dim, &numel)) overflow = true;
    }
    char shape_text[ST_MAX_NDIM * 24 + 8];
    format_shape(shape_text, sizeof shape_text, t->shape, t->ndim);
    size_t nbytes = 0;
    size_t nbits = 0;
    if (overflow || (known && !size_mul_ok(numel, dtype_traits(t->dtype)->bits, &nbits)))
        return status_make(STATUS_INVALID, "%s: tensor '%s': shape %s product overflows",
                           file, name, shape_text);
    if (known && nbits % 8 != 0)  // packed sub-byte types only
        return status_make(STATUS_INVALID, "%s: tensor '%s': shape %s of %s is %zu elements of %u "
                           "bits = %zu bits, not a whole number of bytes (numel x bits must be a "
                           "multiple of 8)", file, name, shape_text, dtype_traits(t->dtype)->st_name,
                           numel, dtype_traits(t->dtype)->bits, nbits);
    nbytes = nbits / 8;
    t->numel = numel;

    const json_t* jo = json_object_get(v, "data_offsets");
    if (!jo)
        return status_make(STATUS_INVALID, "%s: tensor '%s': missing \"data_offsets\"", file,
                           name);
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
        return status_make(STATUS_INVALID, "%s: tensor '%s': \"data_offsets\" must be an array "
                           "of two integers [begin, end]", file, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < 0)
        return status_make(STATUS_INVALID, "%s: tensor '%s': data_offsets [%lld, %lld] must be "
                           "non-negative", file, name, (long long)b, (long long)e);
    if (b > e)
        return status_make(STATUS_INVALID, "%s: tensor '%s': data_offsets [%lld, %lld] have "
                           "begin > end", file, name, (long long)b, (long long)e);
    uint64_t span_bytes = (uint64_t)e - (uint64_t)b;
    if (!known) nbytes = (size_t)span_bytes;  // the size of an unknown dtype's element is unknown
    t->nbytes = nbytes;
    if (span_bytes != (uint64_t)nbytes)
        return status_make(STATUS_INVALID, "%s: tensor '%s': shape/offset mismatch: shape %s of "
                           "%s needs %zu bytes but data_offsets [%lld, %lld] span %" PRIu64,
                           file, name, shape_text, dtype_traits(t->dtype)->st_name, nbytes,
                           (long long)b, (long long)e, span_bytes);
    if ((uint64_t)e > (uint64_t)data_len)
        return status_make(STATUS_INVALID, "%s: tensor '%s': data_offsets [%lld, %lld] extend "
                           "beyond the data region of %zu bytes (truncated file?)",
                           file, name, (long long)b, (long long)e, data_len);
    span->begin = (size_t)b;
    span->end = (size_t)e;
    return status_ok();
}

static Status parse_metadata(const char* file, const json_t* m, SafeTensors* out) {
    if (!json_is_object(m))
        return status_make(STATUS_INVALID, "%s: \"__metadata__\" must be an object of string "
                           "values (got %s)", file, json_type_name(m));
    size_t n = json_object_size(m);
    out->meta_keys = xcalloc(n ? n : 1, sizeof(char*));
    out->meta_values = xcalloc(n ? n : 1, sizeof(char*));
    const char* key;
    json_t* val;
    json_object_foreach((json_t*)m, key, val) {
        if (!json_is_string(val))
            return status_make(STATUS_INVALID, "%s: \"__metadata__\" value of key '%s' must be "
                               "a string (got %s)", file, key, json_type_name(val));
        out->meta_keys[out->n_meta] = xstrdup(key);
        out->meta_values[out->n_meta] = xstrdup(json_string_value(val));
        out->n_meta++;
    }
    return status_ok();
}

typedef struct {
    Span span;
    size_t idx;  // index into the header-order arrays
} SortItem;

static int sort_item_cmp(const void* pa, const void* pb) {
    const SortItem* a = pa;
    const SortItem* b = pb;
    if (a->span.begin != b->span.begin) return a->span.begin < b->span.begin ? -1 : 1;
    if (a->span.end != b->span.end) return a->span.end < b->span.end ? -1 : 1;
    return a->idx < b->idx ? -1 : (a->idx > b->idx);
}

// Core parser. When *owned is non-NULL it is the buffer `buf` points into (64-byte aligned,
// from read_file) and the parser may adopt it as storage, setting *owned = NULL.
static Status parse_impl(const uint8_t* buf, size_t len, const char* file, uint8_t** owned,
                         bool allow_unknown, SafeTensors* out) {
    memset(out, 0, sizeof *out);
    if (!host_is_little_endian()) return host_endian_status(file);
    if (len < 8)
        return status_make(STATUS_INVALID, "%s: file too short (%zu bytes): a safetensors file "
                           "starts with an 8-byte header length", file, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > ST_MAX_HEADER_BYTES)
        return status_make(STATUS_INVALID, "%s: header length %" PRIu64 " exceeds the 100 MB "
                           "limit (corrupt or not a safetensors file)", file, hlen);
    if (hlen > len - 8)
        return status_make(STATUS_INVALID, "%s: header length %" PRIu64 " exceeds the file size "
                           "(%zu bytes after the 8-byte length): truncated or not a "
                           "safetensors file", file, hlen, len - 8);
    const uint8_t* data = buf + 8 + hlen;
    const size_t data_len = len - 8 - (size_t)hlen;

    json_error_t jerr;
    json_t* root = json_loadb((const char*)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return status_make(STATUS_INVALID, "%s: invalid JSON header: %s (line %d, column %d, "
                           "byte %d of the header)", file, jerr.text, jerr.line, jerr.column,
                           jerr.position);
    Status s = status_ok();
    Span* spans = NULL;
    SortItem* order = NULL;
    if (!json_is_object(root)) {
        s = status_make(STATUS_INVALID, "%s: header is not a JSON object (got %s)", file,
                        json_type_name(root));
        goto fail;
    }

    const json_t* meta = json_object_get(root, "__metadata__");
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    out->tensors = xcalloc(n ? n : 1, sizeof(StTensor));
    spans = xcalloc(n ? n : 1, sizeof(Span));
    if (meta) {
        s = parse_metadata(file, meta, out);
        if (!status_is_ok(s)) goto fail;
    }
    const char* key;
    json_t* val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue;
        CHECK(out->n_tensors < n);
        StTensor* t = &out->tensors[out->n_tensors];
        t->name = xstrdup(key);
        out->n_tensors++;
        s = parse_entry(file, key, val, data_len, allow_unknown, t, &spans[out->n_tensors - 1]);
        if (!status_is_ok(s)) goto fail;
    }
    CHECK(out->n_tensors == n);

    // Contiguity: sorted by begin, the tensors must tile [0, data_len) exactly.
    order = xcalloc(n ? n : 1, sizeof(SortItem));
    for (size_t i = 0; i < n; i++) order[i] = (SortItem){spans[i], i};
    qsort(order, n, sizeof(SortItem), sort_item_cmp);
    size_t expect = 0;
    for (size_t k = 0; k < n; k++) {
        const Span sp = order[k].span;
        const char* tname = out->tensors[order[k].idx].name;
        if (sp.begin < expect) {
            const SortItem prev = order[k - 1];  // k > 0: expect is 0 before the first
            s = status_make(STATUS_INVALID, "%s: tensors '%s' [%zu, %zu) and '%s' [%zu, %zu) "
                            "overlap in the data region", file, out->tensors[prev.idx].name,
                            prev.span.begin, prev.span.end, tname, sp.begin, sp.end);
            goto fail;
        }
        if (sp.begin > expect) {
            s = status_make(STATUS_INVALID, "%s: gap of %zu unused bytes before tensor '%s' at "
                            "data offset %zu (tensors must be contiguous)", file,
                            sp.begin - expect, tname, sp.begin);
            goto fail;
        }
        expect = sp.end;
    }
    if (expect != data_len) {
        s = status_make(STATUS_INVALID, "%s: %zu trailing unused bytes after the last tensor "
                        "(data region is %zu bytes, tensors cover %zu)", file,
                        data_len - expect, data_len, expect);
        goto fail;
    }

    // Storage: keep the file buffer when every tensor is aligned to its element size there;
    // otherwise copy each tensor to its own 64-byte aligned slot of one buffer.
    bool aligned = owned && *owned;
    for (size_t i = 0; i < n && aligned; i++) {
        if ((uintptr_t)(data + spans[i].begin) % data_alignment(&out->tensors[i]) != 0)
            aligned = false;
    }
    StTensor* sorted = xcalloc(n ? n : 1, sizeof(StTensor));
    if (aligned) {
        out->storage = *owned;
        *owned = NULL;
        for (size_t k = 0; k < n; k++) {
            sorted[k] = out->tensors[order[k].idx];
            sorted[k].data = (void*)(data + order[k].span.begin);
        }
    } else {
        size_t total = 0;
        for (size_t k = 0; k < n; k++) {
            size_t sz = order[k].span.end - order[k].span.begin;
            CHECK(size_add_ok(total, (sz + 63) / 64 * 64, &total));
        }
        uint8_t* store = xaligned_alloc(total ? total : 64);
        size_t pos = 0;
        for (size_t k = 0; k < n; k++) {
            size_t sz = order[k].span.end - order[k].span.begin;
            sorted[k] = out->tensors[order[k].idx];
            sorted[k].data = store + pos;
            if (sz) memcpy(store + pos, data + order[k].span.begin, sz);
            pos += (sz + 63) / 64 * 64;
        }
        out->storage = store;
    }
    free(out->tensors);
    out->tensors = sorted;
    out->path = xstrdup(file);
    free(order);
    free(spans);
    json_decref(root);
    return status_ok();

fail:
    free(order);
    free(spans);
    json_decref(root);
    st_free(out);
    return s;
}

Status st_parse_opts(const uint8_t* buf, size_t len, const char* name_for_messages,
                     const StReadOptions* opts, SafeTensors* out) {
    CHECK(out && name_for_messages && (buf || len == 0));
    static const uint8_t empty[1] = {0};
    return parse_impl(buf ? buf : empty, len, name_for_messages, NULL,
                      opts && opts->allow_unknown_dtypes, out);
}

Status st_parse(const uint8_t* buf, size_t len, const char* name_for_messages, SafeTensors* out) {
    return st_parse_opts(buf, len, name_for_messages, NULL, out);
}

const char* st_dtype_text(const StTensor* t) {
    return t->dtype == DTYPE_UNKNOWN ? t->unknown_dtype : dtype_traits(t->dtype)->st_name;
}

Status st_read(const char* path, SafeTensors* out) { return st_read_opts(path, NULL, out); }

Status st_read_opts(const char* path, const StReadOptions* opts, SafeTensors* out) {
    CHECK(out && path);
    memset(out, 0, sizeof *out);
    uint8_t* buf = NULL;
    size_t len = 0;
    Status s = read_file(path, &buf, &len);
    if (!status_is_ok(s)) return s;
    uint8_t* owned = buf;
    s = parse_impl(buf, len, path, &owned, opts && opts->allow_unknown_dtypes, out);
    free(owned);  // NULL when adopted as storage
    return s;
}

const StTensor* st_find(const SafeTensors* st, const char* name) {
    for (size_t i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

const char* st_meta(const SafeTensors* st, const char* key) {
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

void st_free(SafeTensors* st) {
    if (!st) return;
    if (st->tensors)
        for (size_t i = 0; i < st->n_tensors; i++) {
            free(st->tensors[i].name);
            free(st->tensors[i].unknown_dtype);
        }
    free(st->tensors);
    for (size_t i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    free(st->storage);
    free(st->path);
    memset(st, 0, sizeof *st);
}

Status st_tensor_to_f32(const StTensor* t, float** out) {
    CHECK(t && out);
    *out = NULL;
    if (t->dtype != DTYPE_F32 && t->dtype != DTYPE_F16 && t->dtype != DTYPE_BF16)
        return status_make(STATUS_INVALID, "tensor '%s' has dtype %s; a float32 copy needs F32, "
                           "F16 or BF16", t->name, st_dtype_text(t));
    size_t nb = 0;
    CHECK(size_mul_ok(t->numel, sizeof(float), &nb));
    float* f = xaligned_alloc(nb);  // (numel)
    if (t->numel) dtype_to_f32_row(f, t->dtype, t->data, t->numel);
    *out = f;
    return status_ok();
}

// ---------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------

typedef struct {
    char* name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_NDIM];
    size_t nbytes;
    const uint8_t* data;  // (nbytes) bytes, NULL when nbytes is 0
    bool owned;           // data is our copy (st_writer_add), else the caller's (st_writer_add_ref)
} StWriterEntry;

struct StWriter {
    StWriterEntry* entries;
    size_t n, cap;
    char** meta_keys;
    char** meta_values;
    size_t n_meta, meta_cap;
};

static bool is_valid_utf8(const char* s) {
    json_t* j = json_string(s);  // NULL for invalid UTF-8
    if (!j) return false;
    json_decref(j);
    return true;
}

StWriter* st_writer_new(void) { return xcalloc(1, sizeof(StWriter)); }

static void writer_add(StWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                       const void* data, bool copy) {
    CHECK(w && name);
    CHECK(is_valid_utf8(name), "tensor name is not valid UTF-8");
    CHECK(strcmp(name, "__metadata__") != 0, "'__metadata__' cannot be a tensor name");
    CHECK(dt >= 0 && dt < DTYPE_COUNT_ALL, "tensor '%s': dtype %d", name, (int)dt);
    CHECK(ndim >= 0 && ndim <= ST_MAX_NDIM, "tensor '%s': ndim %d", name, ndim);
    CHECK(ndim == 0 || shape, "tensor '%s': shape is NULL", name);
    for (size_t i = 0; i < w->n; i++)
        CHECK(strcmp(w->entries[i].name, name) != 0, "duplicate tensor name '%s'", name);
    StWriterEntry e = {0};
    e.dtype = dt;
    e.ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        CHECK(shape[i] >= 0, "tensor '%s': shape[%d] = %" PRId64, name, i, shape[i]);
        e.shape[i] = shape[i];
        CHECK(size_mul_ok(numel, (size_t)shape[i], &numel), "tensor '%s': size overflow", name);
    }
    CHECK(dtype_nbytes(dt, numel, &e.nbytes), "tensor '%s': size overflow, or %zu elements of %s "
          "are not a whole number of bytes", name, numel, dtype_traits(dt)->st_name);
    CHECK(e.nbytes == 0 || data, "tensor '%s': data is NULL", name);
    if (e.nbytes && copy) {
        uint8_t* c = xmalloc(e.nbytes);
        memcpy(c, data, e.nbytes);
        e.data = c;
        e.owned = true;
    } else if (e.nbytes) {
        e.data = data;
    }
    e.name = xstrdup(name);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->entries = xrealloc(w->entries, w->cap * sizeof(StWriterEntry));
    }
    w->entries[w->n++] = e;
}

void st_writer_add(StWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                   const void* data) {
    writer_add(w, name, dt, ndim, shape, data, true);
}

void st_writer_add_ref(StWriter* w, const char* name, DType dt, int ndim, const int64_t* shape,
                       const void* data) {
    writer_add(w, name, dt, ndim, shape, data, false);
}

void st_writer_meta(StWriter* w, const char* key, const char* value) {
    CHECK(w && key && value);
    CHECK(is_valid_utf8(key) && is_valid_utf8(value), "metadata '%s' is not valid UTF-8", key);
    for (size_t i = 0; i < w->n_meta; i++) {
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_values[i]);
            w->meta_values[i] = xstrdup(value);
            return;
        }
    }
    if (w->n_meta == w->meta_cap) {
        w->meta_cap = w->meta_cap ? 2 * w->meta_cap : 8;
        w->meta_keys = xrealloc(w->meta_keys, w->meta_cap * sizeof(char*));
        w->meta_values = xrealloc(w->meta_values, w->meta_cap * sizeof(char*));
    }
    w->meta_keys[w->n_meta] = xstrdup(key);
    w->meta_values[w->n_meta] = xstrdup(value);
    w->n_meta++;
}

static void json_set_checked(json_t* obj, const char* key, json_t* value) {
    CHECK(value && json_object_set_new(obj, key, value) == 0, "jansson failed to set '%s'", key);
}

// The 8-byte length and the padded JSON header in a fresh buffer (*hdr, *hdr_len bytes);
// *data_len: the size of the data region that follows.
static Status writer_header(const StWriter* w, uint8_t** hdr, size_t* hdr_len, size_t* data_len) {
    if (!host_is_little_endian()) return host_endian_status("st_writer_serialize");
    json_t* root = json_object();
    CHECK(root);
    if (w->n_meta) {  // first, as the reference writer does
        json_t* m = json_object();
        CHECK(m);
        for (size_t i = 0; i < w->n_meta; i++)
            json_set_checked(m, w->meta_keys[i], json_string(w->meta_values[i]));
        json_set_checked(root, "__metadata__", m);
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const StWriterEntry* e = &w->entries[i];
        size_t end = 0;
        CHECK(size_add_ok(off, e->nbytes, &end) && end <= (size_t)INT64_MAX);
        json_t* t = json_object();
        json_t* shape = json_array();
        json_t* offs = json_array();
        CHECK(t && shape && offs);
        for (int d = 0; d < e->ndim; d++)
            CHECK(json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) == 0);
        CHECK(json_array_append_new(offs, json_integer((json_int_t)off)) == 0);
        CHECK(json_array_append_new(offs, json_integer((json_int_t)end)) == 0);
        json_set_checked(t, "dtype", json_string(dtype_traits(e->dtype)->st_name));
        json_set_checked(t, "shape", shape);
        json_set_checked(t, "data_offsets", offs);
        json_set_checked(root, e->name, t);
        off = end;
    }
    char* js = json_dumps(root, JSON_COMPACT);
    CHECK(js, "jansson failed to serialize the header");
    json_decref(root);
    size_t hlen = strlen(js);
    size_t padded = (hlen + 7) / 8 * 8;  // 8 + padded is a multiple of 8
    uint8_t* out = xmalloc(8 + padded);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, js, hlen);
    memset(out + 8 + hlen, ' ', padded - hlen);
    free(js);
    *hdr = out;
    *hdr_len = 8 + padded;
    *data_len = off;
    return status_ok();
}

Status st_writer_serialize(const StWriter* w, uint8_t** buf, size_t* len) {
    CHECK(w && buf && len);
    *buf = NULL;
    *len = 0;
    uint8_t* hdr;
    size_t hlen, dlen, total = 0;
    Status s = writer_header(w, &hdr, &hlen, &dlen);
    if (!status_is_ok(s)) return s;
    CHECK(size_add_ok(hlen, dlen, &total));
    uint8_t* out = xrealloc(hdr, total ? total : 1);
    size_t pos = hlen;
    for (size_t i = 0; i < w->n; i++) {
        if (w->entries[i].nbytes) memcpy(out + pos, w->entries[i].data, w->entries[i].nbytes);
        pos += w->entries[i].nbytes;
    }
    CHECK(pos == total);
    *buf = out;
    *len = total;
    return status_ok();
}

// Streams the header and then each tensor straight from its buffer into the temp file: no
// copy of the whole file image is made (a distilbert-base-cased checkpoint is ~790 MB).
Status st_writer_save(const StWriter* w, const char* path) {
    CHECK(w && path);
    uint8_t* hdr;
    size_t hlen, dlen;
    Status s = writer_header(w, &hdr, &hlen, &dlen);
    if (!status_is_ok(s)) return s;
    AtomicFile f;
    s = atomic_open(&f, path);
    if (!status_is_ok(s)) {
        free(hdr);
        return s;
    }
    atomic_write(&f, hdr, hlen);
    free(hdr);
    for (size_t i = 0; i < w->n; i++)
        if (w->entries[i].nbytes) atomic_write(&f, w->entries[i].data, w->entries[i].nbytes);
    return atomic_commit(&f);
}

void st_writer_free(StWriter* w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->entries[i].name);
        if (w->entries[i].owned) free((void*)w->entries[i].data);
    }
    free(w->entries);
    for (size_t i = 0; i < w->n_meta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->meta_keys);
    free(w->meta_values);
    free(w);
}

// inspect.c — `trainbench inspect FILE.safetensors`: list a safetensors file's metadata and
// tensors (dtype, shape, and statistics for every dtype of the format: min/max/mean/NaN count of
// floats decoded exactly, per part for complex; exact integer min/max and the mean for integers
// and bool). A dtype name the reader does not know is listed as unknown with its byte size.
// Validates the file with the same reader the goldens use, so a malformed file gives one clear
// message, exit 2.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "core/common.h"
#include "core/safetensors.h"

static int inspect_run(int argc, char** argv);

const Command cmd_inspect = {
    .name = "inspect",
    .summary = "list the metadata and tensors of a safetensors file (goldens, checkpoints)",
    .usage = "trainbench inspect FILE.safetensors [--no-stats]",
    .run = inspect_run,
};

static void print_shape(const StTensor* t) {
    char buf[128] = "(";
    for (int d = 0; d < t->ndim; d++) {
        char part[32];
        snprintf(part, sizeof part, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        strncat(buf, part, sizeof buf - strlen(buf) - 1);
    }
    strncat(buf, ")", sizeof buf - strlen(buf) - 1);
    printf("%-20s", buf);
}

// min / max / mean / NaN count of n float values read by `at` (NaN skipped; mean of the finite).
static void print_float_stats(const char* label, DType dt, const void* data, size_t n, size_t stride, size_t first) {
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    size_t nan = 0, finite = 0;
    for (size_t k = 0; k < n; k++) {
        double v = dtype_f64_at(dt, data, k * stride + first);
        if (isnan(v)) { nan++; continue; }
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        if (isfinite(v)) { sum += v; finite++; }
    }
    printf(" %smin %-12.6g max %-12.6g mean %-12.6g", label, lo, hi, finite ? sum / (double)finite : NAN);
    if (nan) printf(" NaN %zu", nan);
}

static void print_int(__int128 v) {
    if (v < 0) printf("%-12lld", (long long)v);
    else printf("%-12llu", (unsigned long long)v);
}

// Integers and bool: exact min and max (I64/U64 in full), mean as a double.
static void print_int_stats(const StTensor* t) {
    __int128 lo = dtype_int_at(t->dtype, t->data, 0), hi = lo;
    long double sum = 0;
    for (size_t k = 0; k < t->numel; k++) {
        __int128 v = dtype_int_at(t->dtype, t->data, k);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
        sum += (long double)v;
    }
    printf(" min ");
    print_int(lo);
    printf(" max ");
    print_int(hi);
    printf(" mean %-12.6g", (double)(sum / (long double)t->numel));
}

static void print_stats(const StTensor* t) {
    if (t->dtype == DTYPE_UNKNOWN) {
        printf(" unknown dtype \"%s\": %zu bytes, not decoded", t->unknown_dtype, t->nbytes);
        return;
    }
    if (t->numel == 0) return;
    switch (dtype_traits(t->dtype)->kind) {
        case DTYPE_KIND_FLOAT: print_float_stats("", t->dtype, t->data, t->numel, 1, 0); break;
        case DTYPE_KIND_COMPLEX:  // f32 (real, imaginary) pairs
            print_float_stats("real: ", DTYPE_F32, t->data, t->numel, 2, 0);
            print_float_stats(" imag: ", DTYPE_F32, t->data, t->numel, 2, 1);
            break;
        default: print_int_stats(t); break;
    }
}

static int inspect_run(int argc, char** argv) {
    const char* path = NULL;
    bool stats = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-stats")) stats = false;
        else if (argv[i][0] == '-' && argv[i][1]) return cli_unknown_flag(&cmd_inspect, argv[i]);
        else if (path) return cli_usage_error(&cmd_inspect, "expected one file, got '%s' and '%s'", path, argv[i]);
        else path = argv[i];
    }
    if (!path) return cli_usage_error(&cmd_inspect, "missing FILE.safetensors");
    SafeTensors st;
    const StReadOptions opts = {.allow_unknown_dtypes = true};  // listed, not decoded
    Status s = st_read_opts(path, &opts, &st);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench inspect: %s\n", s.msg);
        return 2;
    }
    printf("%s: %zu tensors, %zu metadata entries\n", path, st.n_tensors, st.n_meta);
    for (size_t i = 0; i < st.n_meta; i++) printf("  meta %-16s %s\n", st.meta_keys[i], st.meta_values[i]);
    int dtype_w = 5;  // the widest dtype name in this file ("f8_e4m3fnuz": 11)
    for (size_t i = 0; i < st.n_tensors; i++)
        if (st.tensors[i].dtype != DTYPE_UNKNOWN && (int)strlen(dtype_name(st.tensors[i].dtype)) > dtype_w)
            dtype_w = (int)strlen(dtype_name(st.tensors[i].dtype));
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        printf("  %-40s %-*s ", t->name, dtype_w, t->dtype == DTYPE_UNKNOWN ? "?" : dtype_name(t->dtype));
        print_shape(t);
        if (stats) print_stats(t);
        else if (t->dtype == DTYPE_UNKNOWN) printf(" unknown dtype \"%s\": %zu bytes", t->unknown_dtype, t->nbytes);
        putchar('\n');
    }
    st_free(&st);
    return 0;
}

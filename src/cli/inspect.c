// inspect.c — `trainbench inspect FILE.safetensors`: list a safetensors file's metadata and
// tensors (dtype, shape, and min/max/mean/NaN count for float tensors). Validates the file
// with the same reader the goldens use, so a malformed file gives one clear message, exit 2.
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
    Status s = st_read(path, &st);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench inspect: %s\n", s.msg);
        return 2;
    }
    printf("%s: %zu tensors, %zu metadata entries\n", path, st.n_tensors, st.n_meta);
    for (size_t i = 0; i < st.n_meta; i++) printf("  meta %-16s %s\n", st.meta_keys[i], st.meta_values[i]);
    for (size_t i = 0; i < st.n_tensors; i++) {
        const StTensor* t = &st.tensors[i];
        printf("  %-40s %-5s ", t->name, dtype_name(t->dtype));
        print_shape(t);
        if (stats && (t->dtype == DTYPE_F32 || t->dtype == DTYPE_F16 || t->dtype == DTYPE_BF16) && t->numel > 0) {
            float* x = NULL;
            Status c = st_tensor_to_f32(t, &x);
            CHECK(status_is_ok(c), "%s", c.msg);
            double lo = INFINITY, hi = -INFINITY, sum = 0;
            size_t nan = 0, finite = 0;
            for (size_t k = 0; k < t->numel; k++) {
                if (isnan(x[k])) { nan++; continue; }
                if (x[k] < lo) lo = x[k];
                if (x[k] > hi) hi = x[k];
                if (isfinite(x[k])) { sum += x[k]; finite++; }
            }
            printf(" min %-12.6g max %-12.6g mean %-12.6g", lo, hi, finite ? sum / (double)finite : NAN);
            if (nan) printf(" NaN %zu", nan);
            free(x);
        }
        putchar('\n');
    }
    st_free(&st);
    return 0;
}

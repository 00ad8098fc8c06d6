// bench_convert.c — convert/<dtype>/<n>: rounding a row of n fp32 values to bf16 or f16 with
// the dispatching row converter (dtype.h: the fastest bit-identical implementation this CPU
// has). Checked once against the scalar reference converter, bit for bit. Counters: GB/s
// (4 bytes read + 2 written per element), elements/s, frac_triad (of roofline/triad).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/common.h"
#include "core/dtype.h"
#include "core/rng.h"

typedef struct {
    DType dt;
    size_t n;
    bool checked, ok;
    char why[256];
} ConvertCase;

static void convert_row(DType dt, void* dst, const float* src, size_t n) {
    if (dt == DTYPE_BF16) bf16_from_f32_row(dst, src, n);
    else fp16_from_f32_row(dst, src, n);
}

static bool convert_check(const ConvertCase* c, const uint16_t* out, const float* src, char* why, size_t len) {
    for (size_t i = 0; i < c->n; i++) {
        const uint16_t ref = c->dt == DTYPE_BF16 ? bf16_from_f32(src[i]).bits : fp16_from_f32(src[i]).bits;
        if (out[i] != ref) {
            snprintf(why, len, "element %zu (%a): row converter 0x%04x, scalar reference 0x%04x", i,
                     (double)src[i], out[i], ref);
            return false;
        }
    }
    return true;
}

static void bm_convert(BenchState* st, void* arg) {
    ConvertCase* c = arg;
    float* src = xaligned_alloc(c->n * sizeof(float));
    uint16_t* dst = xaligned_alloc(c->n * sizeof(uint16_t));
    Rng r;
    rng_init(&r, 0xC0417ull, c->n);
    rng_fill_normal(&r, src, c->n, 0.0f, 100.0f);  // spans many binades; overflows f16 sometimes
    convert_row(c->dt, dst, src, c->n);             // also the warm-up (first touch)
    if (!c->checked) {
        c->ok = convert_check(c, dst, src, c->why, sizeof c->why);
        c->checked = true;
    }
    if (!c->ok) {
        bench_fail(st, "%s", c->why);
    } else {
        while (bench_keep_running(st)) convert_row(c->dt, dst, src, c->n);
        const double iters = (double)bench_iterations(st), bytes = 6.0 * (double)c->n;
        bench_counter(st, "GB/s", iters * bytes * 1e-9, BENCH_RATE);
        bench_counter(st, "elems/s", iters * (double)c->n, BENCH_RATE);
        bench_counter(st, "frac_triad", iters * bytes / roofline_get(ROOF_TRIAD), BENCH_RATE);
        bench_set_label(st, convert_impl_name(convert_impl_active()));
    }
    free(src);
    free(dst);
}

void bench_register_convert(void) {
    static const DType dts[] = {DTYPE_BF16, DTYPE_F16};
    static const size_t ns[] = {1000000, 10000000};
    for (size_t d = 0; d < ARRAY_LEN(dts); d++)
        for (size_t i = 0; i < ARRAY_LEN(ns); i++) {
            ConvertCase* c = xcalloc(1, sizeof *c);  // lives until exit (registered)
            c->dt = dts[d];
            c->n = ns[i];
            bench_registerf(bm_convert, c, "convert/%s/%zu", dtype_name(c->dt), c->n);
        }
}

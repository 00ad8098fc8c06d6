// gelu_onednn.c — implementation of gelu_onednn.h: oneDNN's AVX-512 gelu_erf forward written out
// in C (any build), and one oneDNN eltwise_gelu_erf backward primitive (f32, 1-D), created, run once
// over the caller's values and destroyed (layers.c calls both once, when the bf16 GELU table is
// built). make WITHOUT=onednn builds the backward's stub answer only.
#include "model/gelu_onednn.h"

#include "core/cpu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

// The minimax coefficients of oneDNN's jit_uni_eltwise_injector (gelu_erf_minimax_polynomial,
// src/cpu/x64/injectors): coefficient of degree d for piece i is gelu_onednn_minimax[d][i], as fp32
// bit patterns; rows padded to 32 entries with zeros (never picked: pieces are 1 to 24), as oneDNN's
// table is, for the 32-entry permutes of layers.c's AVX-512 kernel.
const uint32_t gelu_onednn_minimax[6][32] = {
    {0xa6f2cb94, 0x32827792, 0x3381cc0c, 0x34523d4a, 0x351ac44d, 0x35f36d88, 0x36ee8229, 0x37b8a3bb, 0x3867a213,
     0x3940033b, 0x3a2a5a1d, 0x3ae35863, 0x3b7828f2, 0x3c08b14b, 0x3c515ed3, 0xbb503236, 0xbd8d8e5e, 0xbe8abcd9,
     0xbf0c19a2, 0xbeccb328, 0x3e176ced, 0x3f470d99, 0x3f7abb28, 0x3f800000, 0x00000000},
    {0x3f4c422a, 0x3f4c421f, 0x3f4c4207, 0x3f4c41cb, 0x3f4c413b, 0x3f4c3fad, 0x3f4c3a2f, 0x3f4c2d40, 0x3f4c146a,
     0x3f4bc341, 0x3f4ad08c, 0x3f48f8cf, 0x3f45fac7, 0x3f404e07, 0x3f3b980f, 0x3f48dff3, 0x3f78b21b, 0x3fbb0704,
     0x40019c32, 0x3fe536d6, 0x3f81331e, 0x3e6c8684, 0x3c98f936, 0x00000000, 0x3f800000},
    {0xb62173f4, 0x3735e4cf, 0x37f2ff89, 0x388c23be, 0x3917535c, 0x39ab2ab0, 0x3a60fadb, 0x3af9b960, 0x3b6e5491,
     0x3c0a4ec5, 0x3ca5aa8c, 0x3d2138d9, 0x3d8737d4, 0x3ddfb660, 0x3e0f27ab, 0x3d94004b, 0xbe0efdeb, 0xbf1d96c3,
     0xbf89db58, 0xbf6d9897, 0xbef69fb8, 0xbdc4f8a8, 0xbbde6422, 0x00000000, 0x00000000},
    {0xbe081a19, 0xbe084570, 0xbe08639b, 0xbe089837, 0xbe08f409, 0xbe09ab95, 0xbe0b66d0, 0xbe0e400a, 0xbe124df8,
     0xbe1bde02, 0xbe2f19c9, 0xbe4931bf, 0xbe685fbc, 0xbe89c95f, 0xbe96cbca, 0xbe8044aa, 0xbe0550f2, 0x3dcfd6a1,
     0x3e94c826, 0x3e79345f, 0x3decec91, 0x3ca46568, 0x3aa1e00a, 0x00000000, 0x00000000},
    {0xba3d61db, 0x39f097a3, 0x3a5845dc, 0x3ab1fa35, 0x3b0cefb8, 0x3b653ab6, 0x3bcae527, 0x3c221712, 0x3c6c5840,
     0x3cc0a703, 0x3d1dcc19, 0x3d63656d, 0x3d955907, 0x3dbf9910, 0x3dd53f69, 0x3db7dcef, 0x3d639ebe, 0xba6ede48,
     0xbd22be69, 0xbd041cf1, 0xbc64f5ab, 0xbb097a32, 0xb8ebf380, 0x00000000, 0x00000000},
    {0x3cb7d80c, 0x3c9b6050, 0x3c978d11, 0x3c92e850, 0x3c8d058b, 0x3c848454, 0x3c6cd623, 0x3c4c824b, 0x3c2a7935,
     0x3be0b390, 0x3b0651ac, 0xbb232f53, 0xbbd42fa0, 0xbc2c5366, 0xbc492c9e, 0xbc2a7aa6, 0xbbd55d04, 0xba823a76,
     0x3b102aa8, 0x3ae25a7e, 0x3a31f792, 0x38b84375, 0x3689bb5a, 0x00000000, 0x00000000},
};

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
// the kernel's denormal flushing: a subnormal becomes a zero of its sign
static float flush(float v) { return v != 0.0f && fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v; }

// oneDNN's AVX-512 gelu_erf forward; fl: the bf16 kernel's flushing (else none: the fp32 kernel)
static float minimax_forward(float x, bool fl) {
    if (fl) x = flush(x);
    const uint32_t pos = f32_bits(x) & 0x7fffffffu;
    const float xp = bits_f32(pos);
    // piece: (bits(|x|) + 0xc21fffff) >> 21 (32-bit wrap, arithmetic shift), in [1, 24]; 23 (erf = 1)
    // beyond 0x40b15cee (5.54)
    int32_t i = (int32_t)(pos + 0xc21fffffu) >> 21;
    i = i < 1 ? 1 : i > 24 ? 24 : i;
    if (bits_f32(0x40b15cee) < xp) i = 23;
    float p = bits_f32(gelu_onednn_minimax[5][i]);
    for (int d = 4; d >= 0; d--) {
        p = fmaf(p, xp, bits_f32(gelu_onednn_minimax[d][i]));
        if (fl) p = flush(p);
    }
    p = bits_f32(f32_bits(p) ^ (f32_bits(x) & 0x80000000u));  // erf's sign: x's
    if (!fl) return (x * (p + 1.0f)) * 0.5f;
    const float r = flush(x * flush(p + 1.0f));
    return flush(r * 0.5f);
}

float gelu_onednn_forward(float x) { return minimax_forward(x, true); }

float gelu_onednn_f32_forward(float x) { return minimax_forward(x, false); }

bool gelu_onednn_torch_uses(void) {
    const CpuFeatures* c = cpu_features();
    return c->avx512bw && c->avx512vl && c->avx512dq;
}

#ifdef TRAINBENCH_NO_ONEDNN

bool gelu_onednn_grad_f32(const float* x, float* f, size_t n) {
    (void)x, (void)f, (void)n;
    return false;
}

#else

#include <dnnl.h>
#include <stdlib.h>

bool gelu_onednn_grad_f32(const float* x, float* f, size_t n) {
    float* ones = malloc((n ? n : 1) * sizeof(float));
    if (!ones) return false;
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
    dnnl_primitive_t bp = NULL;
    dnnl_memory_t mx = NULL, mdy = NULL, mdx = NULL;
    dnnl_memory_desc_t md;
    dnnl_eltwise_desc_t fd, bd;
    dnnl_dims_t dims = {(dnnl_dim_t)n};
    bool ok = dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success &&
              dnnl_stream_create(&st, eng, dnnl_stream_default_flags) == dnnl_success &&
              dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_f32, dnnl_a) == dnnl_success &&
              dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training, dnnl_eltwise_gelu_erf, &md, 0, 0) ==
                  dnnl_success &&
              dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL) == dnnl_success &&
              dnnl_eltwise_backward_desc_init(&bd, dnnl_eltwise_gelu_erf, &md, &md, 0, 0) == dnnl_success &&
              dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd) == dnnl_success &&
              dnnl_primitive_create(&bp, bpd) == dnnl_success &&
              dnnl_memory_create(&mx, &md, eng, (void*)x) == dnnl_success &&
              dnnl_memory_create(&mdy, &md, eng, ones) == dnnl_success &&
              dnnl_memory_create(&mdx, &md, eng, f) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_SRC, mdx}};
        ok = dnnl_primitive_execute(bp, st, 3, args) == dnnl_success && dnnl_stream_wait(st) == dnnl_success;
    }
    if (mdx) dnnl_memory_destroy(mdx);
    if (mdy) dnnl_memory_destroy(mdy);
    if (mx) dnnl_memory_destroy(mx);
    if (bp) dnnl_primitive_destroy(bp);
    if (bpd) dnnl_primitive_desc_destroy(bpd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (st) dnnl_stream_destroy(st);
    if (eng) dnnl_engine_destroy(eng);
    free(ones);
    return ok;
}

#endif

// gelu_onednn.c — implementation of gelu_onednn.h: one oneDNN eltwise_gelu_erf backward primitive
// (f32, 1-D), created, run once over the caller's values and destroyed (layers.c calls it once,
// when the bf16 GELU table is built). make WITHOUT=onednn builds the stub answers only.
#include "model/gelu_onednn.h"

#include "core/cpu.h"

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

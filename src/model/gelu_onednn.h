// gelu_onednn.h — the derivative torch's bf16 GELU backward uses where torch runs it on oneDNN.
// On a CPU with AVX-512 BW, VL and DQ (torch's mkldnn_bf16_device_check) torch 2.x hands GELU on
// bf16 tensors to oneDNN's eltwise_gelu_erf, whose derivative differs from ATen's float formula
// (the one trainbench computes elsewhere) on 179 of the 65,536 bf16 patterns
// (reference/MODEL_SEMANTICS.md step 19). Its backward is R(dy * f(x)) with f the kernel's f32
// derivative; measured: f from Debian's oneDNN 2.6 reproduces torch 2.15's bf16 gelu_backward on
// every pattern, so the bf16 GELU table's gradient factor is taken from it (layers.c). The
// forward is not: oneDNN 2.6's forward differs from torch's (a newer oneDNN) on 16,232 patterns.
#ifndef TRAINBENCH_GELU_ONEDNN_H
#define TRAINBENCH_GELU_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>

// True where torch runs GELU on bf16 tensors through oneDNN (the CPU check above), whether or not
// this build has oneDNN.
bool gelu_onednn_torch_uses(void);

// f[i] = the derivative of gelu_erf at x[i] as oneDNN's f32 eltwise backward computes it
// (diff_src for diff_dst = 1, n values). False, f untouched, when not built with oneDNN or when
// the primitive cannot be created or run.
bool gelu_onednn_grad_f32(const float* x, float* f, size_t n);

#endif

// gelu_onednn.h — GELU as torch computes it where it runs it on oneDNN.
// On a CPU with AVX-512 BW, VL and DQ (torch's mkldnn_bf16_device_check) torch 2.x hands GELU on
// bf16 tensors to oneDNN's eltwise_gelu_erf, which differs from ATen's kernels on 661 forward and
// 179 backward bf16 patterns (reference/MODEL_SEMANTICS.md step 19). Forward: gelu_onednn_forward
// below (oneDNN's AVX-512 algorithm in C). Backward: R(dy * f(x)) with f the kernel's f32
// derivative (layers.c gelu_as_grad writes it out; gelu_onednn_grad_f32 runs Debian's oneDNN 2.6
// kernel, which gives the same values and reproduces torch 2.15's bf16 gelu_backward on every
// pattern; that version's forward does not: 16,232 patterns apart, an older algorithm).
// fp32 tensors go to oneDNN too (torch's use_mkldnn: any contiguous float tensor): there the same
// minimax forward without flushing (gelu_onednn_f32_forward; layers.c's AVX-512 kernel), oneDNN's
// Abramowitz-Stegun forward on CPUs without AVX-512, and the same derivative (layers.c).
#ifndef TRAINBENCH_GELU_ONEDNN_H
#define TRAINBENCH_GELU_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// True where torch runs GELU on bf16 tensors through oneDNN (the CPU check above), whether or not
// this build has oneDNN.
bool gelu_onednn_torch_uses(void);

// gelu_erf(x) as oneDNN's AVX-512 forward computes it (torch 2.15's bundled oneDNN), in fp32 before
// the bf16 rounding: erf(x / sqrt 2) by a piecewise degree-5 minimax polynomial in |x| (25 pieces
// picked from the exponent and 2 mantissa bits, 1 beyond 5.54), x * (1 + erf) * 0.5, with the
// kernel's denormals flushed (inputs and every intermediate). Measured: rounded to bf16 it equals
// torch's bf16 gelu on all 65,536 patterns. Pure C (no oneDNN call): any build.
float gelu_onednn_forward(float x);

// The same kernel on fp32 tensors, where torch's fp32 F.gelu runs it (on AVX-512 core CPUs): the
// same operations without any flushing (torch keeps subnormal inputs and results there). The
// scalar model of layers.c's AVX-512 fp32 kernel (test_layers compares the two).
float gelu_onednn_f32_forward(float x);

// The minimax coefficients: [degree][piece] as fp32 bit patterns, pieces 1 to 24 used (rows
// padded to 32 with zeros)
extern const uint32_t gelu_onednn_minimax[6][32];

// f[i] = the derivative of gelu_erf at x[i] as oneDNN's f32 eltwise backward computes it
// (diff_src for diff_dst = 1, n values). False, f untouched, when not built with oneDNN or when
// the primitive cannot be created or run.
bool gelu_onednn_grad_f32(const float* x, float* f, size_t n);

#endif

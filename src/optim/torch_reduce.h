// torch_reduce.h — float32 reductions in exactly the order and with exactly the rounding points
// of PyTorch's CPU kernels, so that optimizers built on norms and means (both Adafactors) can be
// bit-exact against the goldens. Not a general-purpose fast sum: use it where a torch reduction
// is being mirrored.
// reference: pytorch aten/src/ATen/native/cpu/SumKernel.cpp (cascade_sum: multi_row_sum,
// row_sum, vectorized_inner_sum, vectorized_outer_sum, scalar_outer_sum) and
// aten/src/ATen/native/cpu/ReduceOpsKernel.cpp (norm_kernel_tensor_iterator_impl: the p == 2
// last-dim fast path, and binary_kernel_reduce with NormTwoOps for other dims); the orders are
// also written out in reference/OPTIM_SEMANTICS.md section 0.4 and modelled in
// reference/check_optim_semantics.py (sumsq_lastdim, norm2_dim_m2, _multi_row_sum, _row_sum,
// sum_lastdim, sum_dim_m2).
// Assumptions, both true of the machine the goldens come from (torch 2.15, AMD EPYC, AVX-512):
// - torch reduces single-threaded (the generator sets 1 thread); with more threads torch
//   splits long reductions into per-thread chunks and its result changes, ours does not;
// - the reduction kernels that run use 8 float lanes (Vectorized<float> at AVX2 width, also on
//   AVX-512 machines). The lanes here are plain C arrays: the result does not depend on the
//   SIMD width our compiler picks (each function has a portable and an AVX2+FMA build, picked
//   at run time, giving the same bits), nor on our thread count: a single sum is never split;
//   only the dim-0 (column) functions spread whole columns over OpenMP threads.
// All arithmetic is float32 with one rounding per operation (the Makefile's
// -ffp-contract=off); the one fused multiply-add torch's compiled code has is written fmaf().
#ifndef TRAINBENCH_TORCH_REDUCE_H
#define TRAINBENCH_TORCH_REDUCE_H

#include <math.h>
#include <stddef.h>

// sum(x[0..n)) as Tensor.sum over a contiguous last dim (also a whole contiguous tensor):
// cascade_sum -> vectorized_inner_sum (n >= 8) or scalar_inner_sum (n < 8). For mean, torch
// then divides once: mean = sum / (float)n.
float torch_sum_f32(const float* x, size_t n);

// out[c] = sum over r of X[r*C + c], X (R, C) row-major: Tensor.sum(dim=-2) of a contiguous
// (.., R, C) tensor for one leading index (cascade_sum -> vectorized_outer_sum for C >= 8,
// else scalar_outer_sum; C == 1 is coalesced into a contiguous row, i.e. torch_sum_f32).
// out (C)
void torch_sum_dim0_f32(float* out, const float* X, size_t R, size_t C);

// sum of x*x as norm(p=2) accumulates it over one contiguous row, before its sqrt
// (norm_kernel_tensor_iterator_impl, p == 2 last-dim path): 8 lane accumulators of
// acc + RN(x*x), folded in lane order; then the compiler's 4-wide epilogue (rounded squares,
// added in order) when >= 4 elements remain; then fused fma(x, x, s) for the last 0..3.
float torch_sumsq_f32(const float* x, size_t n);

// Tensor.norm(2) / linalg.vector_norm(x) of a contiguous tensor, or of each row for dim=-1:
// the sum above, then std::sqrt (correctly rounded; not MKL's Tensor.sqrt()).
static inline float torch_norm2_f32(const float* x, size_t n) { return sqrtf(torch_sumsq_f32(x, n)); }

// out[c] = sum over r of RN(X[r*C + c]^2), rows in order from 0: what
// linalg.vector_norm(X, dim=-2) accumulates per column (binary_kernel_reduce with NormTwoOps,
// acc + x*x unfused) before its sqrt; for C == 1 torch coalesces to one contiguous row and runs
// the last-dim kernel (torch_sumsq_f32). X (R, C) row-major, out (C).
void torch_sumsq_dim0_f32(float* out, const float* X, size_t R, size_t C);

#endif

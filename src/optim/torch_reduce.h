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
#include <string.h>

#include "core/dtype.h"

// c10 utils::CeilLog2 as ATen's kernels define it (SumKernel.cpp, moments_utils.h): 1 for x <= 2
static inline int torch_ceil_log2(size_t x) {
    if (x <= 2) return 1;
    return 64 - __builtin_clzll((unsigned long long)(x - 1));
}

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

// torch_sum_dim0_f32 of a bf16 or fp16 matrix (dt), each element widened exactly as it is read:
// Tensor.sum(dim=-2) of a reduced-precision tensor, which accumulates in float in the same order
// (measured: the bias gradients of every bf16/fp16 model golden bit for bit). X (R, C), out (C)
void torch_sum_dim0_low(float* out, const void* X, DType dt, size_t R, size_t C);

// out[c] = sum over r of RN(X[r*C + c]^2), rows in order from 0: what
// linalg.vector_norm(X, dim=-2) accumulates per column (binary_kernel_reduce with NormTwoOps,
// acc + x*x unfused) before its sqrt; for C == 1 torch coalesces to one contiguous row and runs
// the last-dim kernel (torch_sumsq_f32). X (R, C) row-major, out (C).
void torch_sumsq_dim0_f32(float* out, const float* X, size_t R, size_t C);

// ---- the same orders fed in pieces, for optimizers that fuse their passes over memory ----

// Column sums by row blocks. torch's cascade (multi_row_sum over the R rows) sums the leading
// torch_sum_dim0_main_cols(C) columns so that every block of torch_sum_dim0_block_rows(R)
// consecutive rows starts again from +0: those block sums are independent of each other.
// The caller computes them in any order or thread (block k = rows [k*B, (k+1)*B), rows added
// in order to an accumulator that starts at +0.0f: acc = 0.0f + x, then acc = acc + x) into
// row k of `partials` (leading dimension ld), the rows after the last full block into one
// more row, R / B, when R % B != 0; torch_sum_dim0_combine then replays the cascade's upper
// levels and gives columns [j0, j1) of torch_sum_dim0_f32 bit for bit.
size_t torch_sum_dim0_main_cols(size_t C);
size_t torch_sum_dim0_block_rows(size_t R);
void torch_sum_dim0_combine(float* out, const float* partials, size_t ld, size_t R, size_t j0, size_t j1);
// The remaining columns [j0, C), j0 = torch_sum_dim0_main_cols(C), whose order (row_sum with
// four interleaved row partials, or C == 1's contiguous sum) is not block-decomposable: from a
// copy X of those columns, X[i*ld + (j - j0)] = column j of row i (C == 1 needs ld == 1).
// out[j - j0], j in [j0, C).
void torch_sum_dim0_tail_f32(float* out, const float* X, size_t ld, size_t R, size_t C, size_t j0);

// torch_sumsq_f32 fed in pieces: the 8 lane accumulators, fed a multiple of 8 elements at a
// time in order, then finished with the last n % 8 elements. torch_sumsq_f32(x, n) equals
// feed(x, n - n%8) then finish(x + n - n%8, n%8), whatever the pieces.
typedef struct {
    float lane[8];
} TorchSumsq;
static inline void torch_sumsq_init(TorchSumsq* s) { memset(s, 0, sizeof *s); }
void torch_sumsq_feed(TorchSumsq* s, const float* x, size_t n);  // n % 8 == 0
float torch_sumsq_finish(const TorchSumsq* s, const float* rest, size_t n_rest);  // n_rest < 8

// torch_sumsq_f32 of a sequence of n elements that is computed on the fly, never stored:
// produce(ctx, out, e0, e1) writes elements [e0, e1) (at most 4096 at a time). With
// side != NULL, torch_sumsq_f32(side, n) is computed alongside on a second thread
// (*side_sumsq): two independent chains, each torch's single 8-lane chain in order.
typedef void (*TorchProduce)(const void* ctx, float* out, size_t e0, size_t e1);
void torch_sumsq_produced_f32(size_t n, TorchProduce produce, const void* ctx, const float* side, float* sumsq,
                              float* side_sumsq);
// produce_feed(ctx, lanes, e0, e1): the elements [e0, e1) (e0 and e1 - e0 multiples of 8)
// produced and their squares fed into the 8 lane accumulators `lanes` in order, exactly as
// produce then torch_sumsq_feed would, in one loop: the chain's additions (latency-bound)
// interleave with the producing (throughput-bound) instead of following it.
typedef void (*TorchProduceFeed)(const void* ctx, float* lanes, size_t e0, size_t e1);
// The same sum when producing is the expensive part (divisions, square roots): every OpenMP
// thread produces pieces while thread 0 feeds them into its lanes in order; the pieces thread
// 0 produces itself go through produce_feed when it is not NULL (never stored).
float torch_sumsq_produced_parallel_f32(size_t n, TorchProduce produce, TorchProduceFeed produce_feed,
                                        const void* ctx);

#endif

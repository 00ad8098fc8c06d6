// layers.h — the layers of the DistilBERT-architecture classifier, each a `<layer>_forward`
// and a `<layer>_backward`, computed in fp32 with the rounding points of the precision mode
// (amp.h explains the rounding model: a "low" tensor is an fp32 array holding values exactly
// representable in the low dtype). Every matrix product (linears, attention's QK^T and PV, and
// all their backward products) goes through the LayerCtx's Gemm handle with the mode's dtype:
// f32, bf16 or f16 inputs, fp32 accumulation, output rounded once to the low dtype (weight
// gradients: fp32 output, rounded by amp_round_param_grad so the counters see the value before
// rounding; the single rounding is the same).
//
// Conventions:
//   - Shapes are in the comments: x (N, IC) means N rows of IC floats, row-major, contiguous.
//   - Every backward ACCUMULATES (+=) into its gradient outputs (dx, dW, db, ...): the caller
//     zeroes them once (the model zeroes activation gradients and, in model_backward, the
//     parameter gradients other than the linears' weights). The one exception, a LayerCtx
//     with dw_write set (model_backward's): linear backwards write their weight gradient dW.
//     A NULL gradient output is not computed.
//   - A backward's incoming gradient dy of a low-dtype tensor must hold low-dtype values (the
//     caller rounds where an fp32 gradient meets a low tensor: amp_round_act_grad).
//   - Functions that run GEMMs return a Status: STATUS_UNSUPPORTED when the backend cannot run
//     the dtype (model_forward checks that up front), anything else is a bug.
// Reference semantics: transformers' DistilBERT (modeling_distilbert.py, eager attention) and
// the torch CPU kernels it calls; reference/MODEL_SEMANTICS.md lists them op by op.
// Not here: the model's wiring and saved activations (model.c), loss scaling (amp.h).
#ifndef TRAINBENCH_LAYERS_H
#define TRAINBENCH_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/amp.h"
#include "model/dropout.h"
#include "model/phase.h"
#include "core/common.h"
#include "core/dtype.h"
#include "gemm/gemm.h"

#define LAYERNORM_EPS 1e-12f  // DistilBERT's nn.LayerNorm(eps=1e-12), as float32 (torch passes
                              // eps to the float kernel as float)

// Scratch buffers: low-dtype copies of GEMM operands and small temporaries. Grown on demand and
// kept, so after the first step a training loop allocates nothing.
enum {
    LAYER_SCRATCH_A = 0, LAYER_SCRATCH_B, LAYER_SCRATCH_C, LAYER_SCRATCH_F32, LAYER_SCRATCH_BIAS,
    LAYER_SCRATCH_Q, LAYER_SCRATCH_K, LAYER_SCRATCH_V, LAYER_SCRATCH_P, LAYER_SCRATCH_DCTX,
    LAYER_SCRATCH_COL, LAYER_SCRATCH_X,
    LAYER_SCRATCH_DQKV,  // low modes: attention backward's dq, dk, dv as GEMM operands (3, N, D)
    LAYER_SCRATCH_DX3,   // low modes: the q/k/v linears' three input-gradient results (3, N, D)
    LAYER_SCRATCH_COUNT
};

// One worker of attention's per-(batch, head) loop, which runs in parallel over (b, h): a
// single-threaded Gemm handle (B*H small products: a fork/join per product would cost more than
// the product) and that head's temporaries. Each (b, h) is computed by exactly the same
// operations whichever thread runs it, so the split cannot change a bit.
typedef struct {
    Gemm gemm;                 // threads = 1, on the LayerCtx's backend
    void* cl;                  // low C of one head product, packed (T, max(T, dh))
    size_t cl_bytes;
    float* dP;                 // (T, T) backward: gradient of P
    float* dS;                 // (T, T) backward: gradient of the scores
    void* dSl;                 // (T, T) dS as a GEMM operand (low dtype)
    size_t dP_bytes, dS_bytes, dSl_bytes;
    AmpCounters counters;      // activation-gradient counts of this worker, summed after the loop
} HeadWorker;

// A low-dtype copy of an fp32 array kept for a whole forward + backward: torch autocast's cast
// cache, which casts each leaf weight once per autocast region and hands the same low tensor to
// the forward GEMM and to backward's dX GEMM, and autograd, which saves a GEMM's low input for
// backward's dW GEMM instead of casting the fp32 activation again. The model registers its
// weights and the fp32 activations that feed GEMMs (layer_ctx_keep); every GEMM operand of a
// registered array then comes from `low`: written once, by the first gemm_input of it or by the
// layer that produces the array (q/k/v, P, ctx, GELU's output), and read back by every later
// GEMM. Same bits as converting again: the same fp32 values rounded by the same converter.
typedef struct {
    const float* src;  // the fp32 array (n values)
    size_t n;
    void* low;         // (n) in the ctx's low dtype, owned by the registrant
    bool valid;        // low holds R(src) (cleared by layer_ctx_keep)
    // nothing reads src's fp32 values in a low mode once low is written (q, k, v, ctx, GELU's
    // output: only GEMMs read them; the attention probabilities without a key mask or attention
    // dropout: low values, which the softmax backward widens row by row from low), so their
    // producers skip the widening pass into src
    bool low_only;
} LowCopy;

// The FFN's activation, DistilBertConfig.activation: "gelu" (transformers' GELUActivation, the
// exact erf form), "relu" (nn.ReLU), "silu" (= "swish": nn.functional.silu), "gelu_pytorch_tanh"
// (transformers' GELUTanh: nn.functional.gelu(approximate="tanh")) or "gelu_new" (transformers'
// NewGELUActivation: the tanh form as eight tensor operations), "quick_gelu" (QuickGELUActivation:
// x * sigmoid(1.702 x), three operations) or "gelu_fast" (FastGELUActivation: the tanh form with
// the constant 0.7978845608, nine operations), or one of "linear", "sigmoid", "tanh", "relu6",
// "leaky_relu", "relu2", "gelu_10", "gelu_accurate", "gelu_python_tanh", "gelu_python", "laplace",
// "hardswish", "mish", "sqrtsoftplus" (layers.c says how each is computed). The model's other ReLU
// (pre_classifier) is always ReLU.
typedef enum {
    FFN_ACT_GELU = 0,
    FFN_ACT_RELU = 1,
    FFN_ACT_SILU = 2,
    FFN_ACT_GELU_TANH = 3,
    FFN_ACT_GELU_NEW = 4,
    FFN_ACT_QUICK_GELU = 5,
    FFN_ACT_GELU_FAST = 6,
    FFN_ACT_LINEAR = 7,
    FFN_ACT_SIGMOID = 8,
    FFN_ACT_TANH = 9,
    FFN_ACT_RELU6 = 10,
    FFN_ACT_LEAKY_RELU = 11,
    FFN_ACT_RELU2 = 12,
    FFN_ACT_GELU_10 = 13,
    FFN_ACT_GELU_ACCURATE = 14,
    FFN_ACT_GELU_PYTHON_TANH = 15,
    FFN_ACT_GELU_PYTHON = 16,
    FFN_ACT_LAPLACE = 17,
    FFN_ACT_HARDSWISH = 18,
    FFN_ACT_MISH = 19,
    FFN_ACT_SQRTSOFTPLUS = 20,
    FFN_ACT_COUNT
} FfnActivation;
// The activation's config.json name (layers.c ACTIVATIONS, the registry: "silu" for FFN_ACT_SILU).
const char* ffn_activation_name(FfnActivation a);
// The activation a config.json string names (transformers' ACT2FN keys in the registry, "swish"
// included); false for any other.
bool ffn_activation_from_name(const char* name, FfnActivation* out);
// Those names, comma-separated in registry order, for messages.
const char* ffn_activation_names_list(void);

typedef struct {
    Gemm* gemm;             // the selected backend (used by one thread at a time)
    DType low;              // DTYPE_F32 (fp32 mode: nothing is rounded), DTYPE_BF16 or DTYPE_F16
    FfnActivation act;      // the FFN's activation (layer_ctx_init: GELU)
    AmpCounters* counters;  // NULL: rounding points do not count
    PhaseClock* clock;      // NULL: no phase timing; attention and conversions switch phases
    void* scratch[LAYER_SCRATCH_COUNT];
    size_t scratch_bytes[LAYER_SCRATCH_COUNT];
    HeadWorker* heads;                 // one per OpenMP thread; opened on first use
    int heads_count;                   // workers open
    const GemmBackend* heads_backend;  // backend the workers' handles were opened on
    // Low modes: scratch slot A holds the GEMM operand (low copy) of this fp32 array of
    // operand_n values, written by ffn_activation_forward_operand for the linear_forward that follows
    // it, or by layer_round_grad_operand for the linear_backward that follows it; any other
    // use of slot A (and that linear_forward / linear_backward) clears it. NULL: none.
    const float* operand_of;
    size_t operand_n;
    // Low modes: the kept copies (LowCopy), registrant-owned; none when kept_count is 0.
    LowCopy* kept;
    int kept_count;
    // false (layer_ctx_init): linear backwards ADD their weight gradient into dW, as every
    // backward accumulates (the conventions above). true: they WRITE it (dW = the product,
    // rounded in a low mode; dW's old contents are not read), the first gradient of a freshly
    // zeroed buffer without the zeroing and the read of the zeros, and db written as well:
    // model_backward's mode, which runs each linear's backward exactly once; dw_written counts
    // the weights written.
    bool dw_write;
    int dw_written;
    // The linear backward that follows receives its dy in torch as a column-major matrix (k_lin
    // at batch 1: attention_backward sets it around that call): torch's CPU BLAS then sums the
    // low-dtype dx in k order and dW in four partial sums, the other way round from a contiguous
    // dy (gemm.h GemmF16Sum). Ignored in fp32 and by oneDNN-sized bf16 products.
    bool dy_col_major;
} LayerCtx;

void layer_ctx_init(LayerCtx* c, Gemm* gemm, DType low, AmpCounters* counters);
void layer_ctx_free(LayerCtx* c);
size_t layer_ctx_scratch_bytes(const LayerCtx* c);  // bytes currently held by the scratch
// Registers `count` kept copies (LowCopy; NULL, 0: none), all marked invalid: the model calls it
// at the start of every forward (the weights may have changed since the last one) with the
// arrays of that forward; its backward then reuses them. A registered array must not change
// while registered (the model's wiring guarantees it: each is written once per forward, before
// its first GEMM), and backward must receive the forward's parameter pointer (else it converts
// again: correct, only slower).
void layer_ctx_keep(LayerCtx* c, LowCopy* kept, int count);
// src's (n values) low copy when src is registered low-only and the copy is written (src's fp32
// values then were not); NULL otherwise (not registered, not low-only, or not yet written).
const void* layer_kept_low_only(const LayerCtx* c, const float* src, size_t n);

// dst (n) = src rounded to the ctx's low dtype, counted as activation-gradient rounding points
// (amp_round_act_grad: the fp32 gradient meeting a low tensor), and its GEMM operand left in
// the ctx for the next linear_backward(c, ..., dy = dst, ...) (which then does not narrow dst
// again): one pass instead of copy, round and narrow; dst must not change in between. fp32
// mode: a copy.
void layer_round_grad_operand(LayerCtx* c, float* dst, const float* src, size_t n);

// ---- embedding: out[b,t] = Wtok[ids[b,t]] + Wpos[t] (fp32; nn.Embedding is in no autocast list)
// ids (B, T) in [0, V) (CHECKed), Wtok (V, D), Wpos (P >= T, D), out (B, T, D)
void embedding_forward(float* out, const int64_t* ids, const float* Wtok, const float* Wpos, int B, int T, int D,
                       int64_t V);
// backward ACCUMULATES: dWtok[ids[b,t]] += dout[b,t] except where ids[b,t] == padding_idx
// (nn.Embedding(padding_idx=...): that row never receives gradient; -1 = none), and
// dWpos[t] += sum over b of dout[b,t]. dWtok (V, D), dWpos (P, D), dout (B, T, D).
void embedding_backward(float* dWtok, float* dWpos, const float* dout, const int64_t* ids, int B, int T, int D,
                        int64_t V, int64_t padding_idx);

// ---- LayerNorm over the last dim (fp32 in, fp32 out; torch's CPU kernel, its float arithmetic
// bit for bit: reference/MODEL_SEMANTICS.md "LayerNorm", golden layernorm_rows):
// mean and biased variance per row as ATen's RowwiseMoments (Welford), rstd = 1/sqrtf(var + eps),
// y = fma((x - mean) * rstd, w, b).   x, y (N, D); w, b (D); mean, rstd (N) saved for backward
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int N,
                       int D, float eps);
// layernorm_forward that also writes y's kept low copy (LowCopy) row by row while the row is in
// cache, when y is registered (the next GEMM's operand: q/k/v's input, lin1's); the same bits
// as converting y afterwards. Else layernorm_forward.
void layernorm_forward_operand(LayerCtx* c, float* y, float* mean, float* rstd, const float* x, const float* w,
                               const float* b, int N, int D, float eps);
// backward ACCUMULATES into dx (N, D), dw (D), db (D): torch's layer_norm_backward_frame (float
// sums at 8 lanes; dw, db over the rows in order, as torch at one thread; any thread count here).
void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* mean,
                        const float* rstd, const float* w, int N, int D);
// The same into a dx that is not read: dx = 0 + the gradient (the bits a zeroed dx accumulates:
// -0 becomes +0), and dx2 (N, D; may be NULL) a copy of it (the residual's share), in one pass.
void layernorm_backward_set(float* dx, float* dx2, float* dw, float* db, const float* dy, const float* x,
                            const float* mean, const float* rstd, const float* w, int N, int D);

// x (n) = 0, on the thread team when large (element-wise; call outside parallel regions)
void layers_zero(float* x, size_t n);

// ---- linear (torch addmm): y = R(R(x) @ R(W)^T + R(b)), R = round to ctx->low (identity in
// fp32), the bias added to the fp32 accumulator before the single rounding.
// x (N, IC), W (OC, IC), b (OC) or NULL, y (N, OC)
Status linear_forward(LayerCtx* c, float* y, const float* x, const float* W, const float* b, int N, int IC, int OC);
// y = linear(x) + res (res (N, OC) fp32): a residual connection's mixed add (the low result
// promoted, one fp32 add), fused into the widening pass in the low modes (the same bits as
// linear_forward, then y += res)
Status linear_forward_residual(LayerCtx* c, float* y, const float* x, const float* W, const float* b,
                               const float* res, int N, int IC, int OC);
// backward ACCUMULATES into dx (N, IC), dW (OC, IC), db (OC) (any may be NULL):
//   dx += R(dy @ R(W))                 (fp32 add of the low result, as autograd sums grads)
//   dW += R(dy^T @ R(x))               (parameter-gradient rounding point, counted)
//   db += R(sum over rows of dy)       (the same; fp32: torch's float cascade sum, Tensor.sum(0) bit for
//                                       bit; low modes: accumulated in double, then rounded)
// dy (N, OC) holds low values; x is the forward's fp32 input (rounded again here, as forward).
Status linear_backward(LayerCtx* c, float* dx, float* dW, float* db, const float* dy, const float* x,
                       const float* W, int N, int IC, int OC);

// ---- GELU, exact (erf) form: y = R(x * 0.5 * (1 + erf(x / sqrt(2)))) computed in fp32, rounded
// to dt (the dtype x holds: autocast leaves gelu in the dtype it receives). x, y (n)
void gelu_forward(float* y, const float* x, size_t n, DType dt);
// The FFN's activation (c->act: GELU, ReLU as relu_forward, or SiLU) in the ctx's low dtype, which
// also leaves y's GEMM operand (its low copy) in the ctx for the next linear_forward(c, ..., y,
// ...), which then does not narrow y again; y must not change in between (the FFN: lin1 ->
// activation -> lin2). fp32: the activation alone.
void ffn_activation_forward_operand(LayerCtx* c, float* y, const float* x, size_t n);
// dx += R(dy * (cdf(x) + x * pdf(x))) (torch's GeluBackward, fp32 math, rounded to dt)
void gelu_backward(float* dx, const float* dy, const float* x, size_t n, DType dt);
// The low modes' GELU on low operands (the FFN's path): forward from xl (n, dt), y (fp32; may be
// NULL) and/or yl (dt; may be NULL) receiving R(gelu(x)); backward dxl (n, dt) = low copy of
// 0 + R(dy * gelu'(x)) from dyl (n, dt) and x's values xl (dt) or, with xl NULL, x (fp32).
void gelu_forward_low(float* y, void* yl, const void* xl, size_t n, DType dt);
void gelu_backward_low(void* dxl, const void* dyl, const float* x, const void* xl, size_t n, DType dt);
// The same for any FFN activation (GELU as above; ReLU and SiLU computed directly).
void ffn_activation_forward_low(FfnActivation act, float* y, void* yl, const void* xl, size_t n, DType dt);
void ffn_activation_backward_low(FfnActivation act, void* dxl, const void* dyl, const float* x, const void* xl,
                                 size_t n, DType dt);
// "onednn" when the bf16 GELU backward uses oneDNN's derivative (gelu_onednn.h), else "aten".
const char* layers_gelu_bf16_grad_source(void);
// Tests: true makes the low modes' GELU compute directly instead of by its 16-bit tables
// (layers.c "GELU by table"), false restores them.
void layers_gelu_table_disable(bool off);

// The fp32 GELU forward torch runs on this CPU (layers.c: oneDNN's kernel by ISA): true for the
// AVX-512 minimax kernel, false for the Abramowitz-Stegun one. Tests: layers_gelu_f32_force(1 or 0)
// picks one (false, nothing changed, when the CPU cannot run the AVX-512 kernel), -1 restores.
bool layers_gelu_f32_minimax(void);
bool layers_gelu_f32_force(int kernel);

// ---- the FFN's backward: lin2, the activation, lin1 (DistilBERT's FFN: f1 = lin1(h1), g =
// act(f1), lin2(g); act = c->act, GELU, ReLU or SiLU), the operations of
//   dg = 0; linear_backward(dg, dW2, db2 <- dy, g, W2); df1 = 0; gelu_backward(df1 <- dg, f1)
//   (ReLU: relu_backward(df1 <- dg, relu(f1)); SiLU: silu_backward as torch's kernel);
//   linear_backward(dx, dW1, db1 <- df1, h1, W1)
// with the same bits and, in the low modes, fewer conversion passes: lin2's input gradient
// stays in the low dtype for GELU's backward (dg is not written), GELU's backward reads f1's
// kept copy when registered and writes df1's GEMM operand as it goes (lin1's bias gradient sums
// that low copy: the same values). dx (N, D) ACCUMULATES; dg, df1 (N, F) are scratch (written
// only in fp32, where df1 holds the gradient at f1 on return).
typedef struct {
    float *W1, *b1, *W2, *b2;  // gradients (any may be NULL)
} FfnGrads;
Status ffn_backward(LayerCtx* c, float* dx, const FfnGrads* g, const float* dy, const float* h1, const float* f1,
                    const float* gact, const float* W1, const float* W2, float* dg, float* df1, int N, int D,
                    int F);

// ---- ReLU as torch computes it (relu = clamp_min(x, 0)): y = x < 0 ? 0 : x, so relu(-0) = -0
// and relu(NaN) = NaN; exact in every dtype. Backward threshold_backward(dy, y, 0): dx += (y <= 0 ?
// 0 : dy), a select (an inf or NaN dy where y <= 0 gives 0; a NaN y passes dy).
void relu_forward(float* y, const float* x, size_t n);
void relu_backward(float* dx, const float* dy, const float* y, size_t n);

// ---- softmax over rows of length n with an optional additive fp32 mask (n) added first;
// torch's kernel form: p = exp(x - max) * (1 / sum). Output rounded to dt.
void softmax_forward_row(float* p, const float* x, const float* mask, int n, DType dt);
// dx = R(p * (dp - sum(dp * p))), written (not accumulated); dt as forward.
void softmax_backward_row(float* dx, const float* dp, const float* p, int n, DType dt);

// ---- multi-head self-attention (transformers eager_attention_forward + DistilBertSelfAttention)
//   q, k, v = linear(x) (low), per head h (width dh = D/H):
//   S = R(R(q_h @ k_h^T) * scaling), scaling = float(dh ** -0.5) (the multiply runs in S's dtype)
//   with key_mask: S' = S + mask (fp32 add: mask is fp32, so the scores promote to fp32),
//                  P = softmax(S') in fp32 (not rounded)
//   without:       P = R(softmax(S))   (transformers passes no mask when nothing is padded,
//                  so the softmax runs in the low dtype)
//   training with attention dropout: P <- dropout(P) in P's dtype (acts->drop, dropout.h)
//   ctx_h = R(R(P) @ v_h); out = linear(ctx) with out_lin.
// key_mask (B, T): additive, 0 for a real token and -FLT_MAX (torch.finfo(float32).min) for a
// padded key, or NULL. Masked keys get probability exactly 0, hence zero gradient.
typedef struct {
    const float *Wq, *bq, *Wk, *bk, *Wv, *bv, *Wo, *bo;  // W (D, D), b (D)
} AttentionParams;
typedef struct {
    float *Wq, *bq, *Wk, *bk, *Wv, *bv, *Wo, *bo;  // gradients, same shapes (any may be NULL)
} AttentionGrads;
typedef struct {
    float* q;    // (B, T, D) low values
    float* k;    // (B, T, D)
    float* v;    // (B, T, D)
    float* p;    // (B, H, T, T) softmax output: fp32 with a key_mask, low values without
    float* ctx;  // (B, T, D) heads merged, low values
    // attention dropout (dropout.h), training only: drop.keep (B, H, T, T) or NULL (none).
    // With it, pd (B, H, T, T) receives P * noise in P's dtype (fp32 with a key_mask, low
    // without), which the PV product reads instead of P; the softmax backward still uses P.
    DropoutMask drop;
    float* pd;
} AttentionActs;

float attention_scaling(int dh);  // float(dh ** -0.5)
// x (B, T, D) fp32; out (B, T, D) low values; acts filled (caller-owned storage)
Status attention_forward(LayerCtx* c, float* out, const AttentionActs* acts, const float* x,
                         const AttentionParams* w, const float* key_mask, int B, int T, int D, int H);
// out = attention(x) + x (DistilBERT's sa residual, fp32 add), the add fused into out_lin's
// widening pass in the low modes: the same bits as attention_forward, then out += x
Status attention_forward_residual(LayerCtx* c, float* out, const AttentionActs* acts, const float* x,
                                  const AttentionParams* w, const float* key_mask, int B, int T, int D, int H);
// Floats of `work` attention_backward needs: 4 * B*T*D.
size_t attention_work_floats(int B, int T, int D);

// The fp16 summation order (gemm.h GemmF16Sum) torch 2.15 takes for each of attention's six
// per-head products, which depends on how the operands lie in memory at its cpublas gemm and so,
// for two of them, on the shape: DistilBERT's heads are strided views, and matmul's reshape of
// k^T (B, H, dh, T) to (B*H, dh, T) is a view when B, H or T is 1 and a contiguous copy
// otherwise. A product by a transposed view of a contiguous tensor is DOT, else MM:
//   SCORES q @ k^T    DOT when B, H or T is 1, else MM (k^T copied)
//   PV     P @ v      MM          DP  dctx @ v^T   DOT (grad.bmm(v.transpose))
//   DV     P^T @ dctx MM (tn)     DQ  dS @ k       MM when B, H or T is 1, else DOT
//   DK     dS^T @ q   MM (tn)
// Measured against torch on products built to tell the orders apart (the golden
// attention_f16_orders, reference/gen_attention_order_goldens.py; tests/test_model_golden.c).
typedef enum { ATT_SCORES, ATT_PV, ATT_DP, ATT_DV, ATT_DQ, ATT_DK } AttentionProduct;
GemmF16Sum attention_f16_sum(AttentionProduct product, int B, int H, int T);
// Whether k's gradient reaches torch's k_lin as a column-major matrix (LayerCtx.dy_col_major):
// at batch 1 (with T > 1) the chain of views back from k^T ends in a (T, D) view with strides
// (1, T) instead of a contiguous copy. Measured (golden linear_low_orders, kgrad cases).
bool attention_k_grad_col_major(int B, int T);
// backward ACCUMULATES into dx (B, T, D) and the gradients; dout (B, T, D) low values.
// On return work holds dq, dk, dv, dctx, each (B, T, D): the gradients of the projections'
// outputs and of the merged context (low values), in that order (tests read dk and dv).
// dx receives ((dx + d_v) + d_k) + d_q in fp32, the order autograd sums them in.
Status attention_backward(LayerCtx* c, float* dx, const AttentionGrads* g, const float* dout,
                          const AttentionActs* acts, const float* x, const AttentionParams* w,
                          const float* key_mask, float* work, int B, int T, int D, int H);

// ---- classifier head on the first token (DistilBertForSequenceClassification):
//   pooled = h[:, 0] (fp32) ; pre = linear(pooled) (low) ; act = relu(pre) ;
//   [training: act = dropout(act) in low] ; logits = linear(act)
typedef struct {
    const float *Wpre, *bpre;  // pre_classifier (D, D), (D)
    const float *Wcls, *bcls;  // classifier (L, D), (L)
} ClassifierParams;
typedef struct {
    float *Wpre, *bpre, *Wcls, *bcls;
} ClassifierGrads;
typedef struct {
    float* pooled;  // (B, D) fp32 copy of h[:, 0]
    float* pre;     // (B, D) pre_classifier output (low)
    float* act;     // (B, D) relu(pre)
    // seq_classif_dropout (dropout.h), training only: drop.keep (B, D) or NULL (none); with it
    // dropped (B, D) = act * noise in the low dtype, the classifier's input.
    DropoutMask drop;
    float* dropped;
} ClassifierActs;

// h (B, T, D); logits (B, L) low values
Status classifier_forward(LayerCtx* c, float* logits, const ClassifierActs* a, const float* h,
                          const ClassifierParams* w, int B, int T, int D, int L);
// backward ACCUMULATES into dh[:, 0] (dh (B, T, D); other tokens untouched) and the grads.
// dlogits (B, L) low values; work: (B, D) floats.
Status classifier_backward(LayerCtx* c, float* dh, const ClassifierGrads* g, const float* dlogits,
                           const ClassifierActs* a, const ClassifierParams* w, float* work, int B, int T, int D,
                           int L);

// ---- cross-entropy, mean over the batch, in fp32 (autocast's fp32 list: logits widened):
// logp = log_softmax(logits) saved (B, L); loss = -(sum_i logp[i, labels[i]]) / B.
// labels (B) must be in [0, L) (CHECKed: the model validates them first).
float cross_entropy_forward(float* logp, const float* logits, const int32_t* labels, int B, int L);
// dlogits (B, L) += dlogp - exp(logp) * sum(dlogp), with dlogp[i, labels[i]] = -(dloss / B)
// (nll_loss + log_softmax backward as torch's CPU kernels write them). dloss = the loss's
// incoming gradient: 1, or the loss scale under GradScaler.
void cross_entropy_backward(float* dlogits, const float* logp, const int32_t* labels, float dloss, int B, int L);

// ---- HF Trainer's LabelSmoother (TrainingArguments.label_smoothing_factor eps > 0; the Trainer
// pops the labels and computes this loss from the model's logits), in fp32 in every precision
// mode: accelerate runs the model's forward under autocast and converts its outputs to fp32
// (convert_outputs_to_fp32), and the Trainer (transformers >= 5: autocast_smart_context_manager
// is a nullcontext) calls the smoother outside the autocast, so in a low mode the logits arrive
// widened exactly and the caller rounds the gradient back to the low dtype (the .float()'s
// backward; measured with transformers 5.24 + accelerate 1.16's real Trainer, bf16):
// lpn = -log_softmax(logits) (logp, torch's fp32 log_softmax as cross_entropy_forward computes
// it, saved (B, L)); nll = sum_i lpn[i, labels[i]] / B; smooth = sum_i (sum_j lpn[i, j]) / (B * L)
// (the sums in torch's float32 order); loss = f32(1-eps) * nll + f32(eps) * smooth.
// work (B) scratch. labels in [0, L).
float label_smoothing_forward(float* logp, float* work, const float* logits, const int32_t* labels, int B, int L,
                              double eps);
// dlogits (B, L) = the backward of the above with incoming gradient dloss, as autograd runs it:
// g_nll = (dloss * f32(1-eps)) / B, g_sm = (dloss * f32(eps)) / (B*L); the gradient of lpn is
// g_sm everywhere plus g_nll at the label; log_softmax's backward d - exp(logp) * sum_j d
// with d = -(that gradient). fp32; L <= 64.
void label_smoothing_backward(float* dlogits, const float* logp, const int32_t* labels, float dloss, int B, int L,
                              double eps);

// ---- regression (num_labels 1: transformers' MSELoss on logits.squeeze() and labels.squeeze()),
// in fp32 (autocast's fp32 list): the integer labels become float targets y = float(label) (as
// torch promotes the long labels; exact up to 2^24); sq (B) = (x - y) * (x - y) saved; loss =
// torch's sum of sq (its float32 order, torch_reduce.h) / B.
float mse_forward(float* sq, const float* logits, const int32_t* labels, int B);
// dlogits (B) = (norm * (x - y)) * dloss with norm = float(2.0 / B): torch's
// mse_backward_cpu_kernel, grad_output dloss (1, or the loss scale under GradScaler).
void mse_backward(float* dlogits, const float* logits, const int32_t* labels, float dloss, int B);

#endif

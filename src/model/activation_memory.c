// activation_memory.c — the activation and workspace estimate of one training step (see
// activation_memory.h), as a closed formula over the model's tensors. With N = B*T tokens,
// D = dim, F = hidden_dim (FFN), H = heads, L = labels, f = 4 bytes (fp32) and l = the low
// dtype's size (2 for bf16/fp16; in fp32 mode there are no low copies):
//
// Every activation is held as fp32 in every precision mode: the mixed modes round values to
// the low dtype where autocast does but keep them in fp32 arrays (amp.h), so the saved
// activations do not shrink in bf16/fp16 (PyTorch's autocast keeps bf16 tensors instead).
//
// saved, per layer (what backward needs of the forward), f bytes each:
//   q, k, v (N*D each)          the score and context products' backward reads them
//   P (B*H*T*T)                 softmax backward and dV = P^T dctx read the probabilities
//   ctx (N*D)                   out_lin's weight gradient dWo = dy^T ctx reads it
//   r1, h1 (N*D each)           LayerNorm 1's input (its backward) and output (lin1's input,
//                               the FFN residual)
//   mean1, rstd1 (N each)       LayerNorm 1's statistics
//   f1, g (N*F each)            lin1's output (GELU backward) and GELU's output (lin2's dW)
//   r2, h2 (N*D each), mean2, rstd2 (N each)   LayerNorm 2, as LayerNorm 1; h2 is the next
//                               layer's input (its q/k/v weight gradients read it)
//   = f * (8*N*D + 2*N*F + B*H*T*T + 4*N)
// saved, outside the layers: embeddings sum (N*D, the LayerNorm's input) and its LayerNorm
//   output (N*D) with statistics (2*N); classifier: pooled [CLS] row, pre_classifier output,
//   ReLU output (3*B*D), logits and log-probabilities (2*B*L)
//   = f * (2*N*D + 2*N + 3*B*D + 2*B*L)
// backward activation gradients (fp32, one set reused layer after layer):
//   the hidden-state gradient, the gradient at a LayerNorm's input, the residual branch's
//   gradient and its copy rounded to the low dtype (the rounding point of a mixed add, amp.h),
//   kept apart from the fp32 residual path (4*N*D); the FFN gradients after and before GELU
//   (2*N*F); attention's dq, dk, dv and dctx (4*N*D); the classifier's two (B*D) gradients and
//   dlogits (B*L)
//   = f * (8*N*D + 2*N*F + 2*B*D + B*L)
// batch: ids int64 (8*N), labels int32 (4*B), additive key-padding mask fp32 (4*N)
// mixed modes, the low-dtype copies kept from the forward for the backward (layers.h LowCopy:
//   autograd saves a GEMM's low input for the dW product instead of casting the fp32 value
//   again), l bytes each: per layer the layer input x (q/k/v's operand), q, k, v, ctx, h1
//   (lin1's operand) (6*N*D), lin1's output f1 (N*F: GELU's forward and backward read it; it
//   is never widened) and GELU's output g (N*F, lin2's operand), the P the PV product reads
//   (B*H*T*T), counted in saved_layer_bytes; the classifier's two inputs (2*B*D)
//   = l * (6*N*D + 2*N*F + B*H*T*T) per layer + l * 2*B*D
// mixed modes, the low copies of the weights (autocast's cast cache: each weight cast once per
//   forward, read by the forward GEMM and by backward's dX GEMM): every linear's weight,
//   l * (layers * (4*D*D + 2*D*F) + D*D + L*D)
// transient (the largest temporaries a step needs at once), with W = the threads the step runs
// on (attention's heads run in parallel, each thread on one head at a time):
//   fp32: per thread, the score gradient before and after the softmax backward (2*T*T*f); a
//   bias gradient (F*f; torch's float cascade sum, no other buffer)
//   mixed modes, in addition: per thread, one head's (T, T) product in the low dtype before
//   widening (T*T*l; the (T, D/H) products write into whole-tensor low buffers) and the score
//   gradient as a GEMM operand (T*T*l); the backward's low-dtype operands cast per use: dctx
//   for the attention products (N*D) and a linear's output gradient dy (N*F at most); a
//   linear's low output before widening (N*F at most); attention's dq, dk, dv as the q/k/v
//   linears' operands and those linears' three input-gradient results, added to dx in one
//   pass (6*N*D); all times l; and one fp32 weight-gradient temporary (F*D*f: a weight gradient is rounded
//   to the low dtype before it is added to the accumulated gradient, amp.h)
//
// without layers (n_layers 0): none of the layer terms; activation gradients f * (2*N*D + 2*B*D
//   + B*L) (the hidden state's and the embeddings' LayerNorm input's, the head's), transient a
//   bias gradient (D*f) and, in the mixed modes, the head's two low operands (2*B*D*l) and its
//   fp32 weight-gradient temporary (D*D*f); the workspace then carves no layer buffers
//
// The workspace (model.c) and the layers' scratch (layers.c) are one way to hold these; the
// trainer's measured figure is compared with this estimate in `trainbench memory` and in
// tests/test_memory.c with the tolerance stated there.
#include "model/activation_memory.h"

ActivationEstimate activation_memory_estimate(const ModelConfig* cfg, int B_, int T_, DType low, int threads) {
    CHECK(B_ >= 1 && T_ >= 1 && threads >= 1, "batch %d x seq %d, %d threads", B_, T_, threads);
    const size_t B = (size_t)B_, T = (size_t)T_, N = B * T, D = (size_t)cfg->dim, F = (size_t)cfg->hidden_dim,
                 H = (size_t)cfg->n_heads, L = (size_t)cfg->n_labels, Ly = (size_t)cfg->n_layers;
    const size_t f = sizeof(float), P = B * H * T * T;
    const size_t FF = F > D ? F : D;  // the widest linear side (hidden_dim in DistilBERT)
    ActivationEstimate e = {0};
    const size_t l = low == DTYPE_F32 ? 0 : dtype_traits(low)->size;  // no low copies in fp32
    e.saved_layer_bytes = f * (8 * N * D + 2 * N * F + P + 4 * N) + l * (6 * N * D + 2 * N * F + P);
    e.saved_bytes = Ly * e.saved_layer_bytes + f * (2 * N * D + 2 * N + 3 * B * D + 2 * B * L) + l * 2 * B * D;
    e.low_weight_bytes = l * (Ly * (4 * D * D + 2 * D * F) + D * D + L * D);
    e.batch_bytes = 8 * N + 4 * B + 4 * N;
    const size_t W = (size_t)threads;
    if (Ly > 0) {
        e.grad_bytes = f * (8 * N * D + 2 * N * F + 2 * B * D + B * L);
        e.transient_bytes = W * 2 * T * T * f + FF * f;
        if (low != DTYPE_F32)
            e.transient_bytes += W * l * (T * T + T * T) + l * (N * D + N * FF + N * FF + 6 * N * D) + FF * D * f;
    } else {  // no layers: the head's and the embeddings' only
        e.grad_bytes = f * (2 * N * D + 2 * B * D + B * L);
        e.transient_bytes = D * f;
        if (low != DTYPE_F32) e.transient_bytes += l * 2 * B * D + D * D * f;
    }
    e.total_bytes = e.saved_bytes + e.low_weight_bytes + e.grad_bytes + e.batch_bytes + e.transient_bytes;
    return e;
}

bool activation_memory_within(const ActivationEstimate* e, const ModelConfig* cfg, size_t measured) {
    const double pad = 64.0 * (16.0 * (double)cfg->n_layers + 40.0), t = (double)e->total_bytes, m = (double)measured;
    return m >= t * (1 - ACTIVATION_TOL_BELOW) - pad && m <= t * (1 + ACTIVATION_TOL_ABOVE) + pad;
}

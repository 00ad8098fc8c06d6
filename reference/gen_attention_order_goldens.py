#!/usr/bin/env python3
"""The summation orders of torch's fp16 and bf16 matrix products, from torch itself.

    ~/.cache/trainbench-venv/bin/python reference/gen_attention_order_goldens.py --out reference/golden

On a CPU without native fp16 arithmetic torch 2.15 sums an fp16 matrix product in one of
three orders (MODEL_SEMANTICS.md, "The fp16 GEMMs' order of summation"), and which one it takes
depends on how the operands lie in memory when they reach ATen's cpublas gemm. DistilBERT's
attention heads are strided views of the (B, T, D) projections, so `matmul` copies k^T (and v)
to contiguous tensors, except when the batch, the head count or the sequence length is 1
(then the reshape is a view): the orders of q @ k^T and of its backward dS @ k depend on the
shape. Random data almost never tells the orders apart (the model goldens agree with several),
so this file holds products built to: every dot product has a +4096 and a -4096 term and a few
multiples of 2^-12 at random positions, with ones on the other side, so that each order keeps
or loses a different set of the small terms and rounds to a different fp16 value.

bf16 adds a size rule: torch sends a bf16 matmul to oneDNN only when it has more than
16*16*16 multiply-adds (a bmm counts its batch; ATen's mkldnn checksize), else to the same
cpublas kernels as fp16, with the same orders.

Three cases (<out>/model/<case>.safetensors):
  attention_f16_orders   fp16, CONFIGS
  attention_bf16_orders  bf16, BF16_CONFIGS (both sides of the oneDNN threshold)
  linear_low_orders      F.linear forward, dx and dW in fp16 and bf16 for LINEAR_SIZES (N, Kin,
                         Kout) around the threshold: input.<dt>.<N>x<Kin>x<Kout>.{x,dy,dyW} and
                         expect.<dt>.<N>x<Kin>x<Kout>.{y,dx,dW} (W all ones; y and dx from x and
                         dy, dW = dyW^T @ ones: each product's crafted side is the summed one);
                         and k_lin's dx and dW behind DistilBERT's head split for KGRAD_CONFIGS
                         (B, H, T, dh): input.<dt>.k<B>x<H>x<T>x<dh>.{g1,g2} (the gradient reaching
                         k_lin, rows / columns crafted), expect.<...>.{dx,dW} (at batch 1 that
                         gradient is column-major in torch: the two products swap orders)
The attention cases, for each configuration c (B, H, T, dh):
  input.c<i>.q, .k, .v   fp16 (B, T, H*dh): the projections; torch splits heads as DistilBERT
                         does (view(B, T, H, dh).transpose(1, 2))
  input.c<i>.P           fp16 (B, H, T, T): the probabilities the PV product reads
  input.c<i>.dS          fp16 (B, H, T, T): the gradient of the scores (loss term sum(S * dS))
  input.c<i>.dctx        fp16 (B, H, T, dh): the gradient of the context (loss term on the
                         merged heads: ctx.transpose(1, 2).contiguous().view(B, T, D))
  expect.c<i>.S          q @ k^T             (B, H, T, T)
  expect.c<i>.ctx        P @ v               (B, H, T, dh)
  expect.c<i>.dP         dctx @ v^T          (B, H, T, T)   (P.grad)
  expect.c<i>.dv         P^T @ dctx          (B, H, T, dh)  (v's gradient, heads split)
  expect.c<i>.dq         dS @ k              (B, H, T, dh)
  expect.c<i>.dk         dS^T @ q            (B, H, T, dh)
all in the case's dtype, as torch's autograd computed them (torch.set_num_threads(1)).
tests/test_model_golden.c recomputes each product with the naive backend in the order
src/model/layers.c names for it (attention_f16_sum, and the linears' rule) and requires every
value bit for bit.

Deterministic (numpy's PCG64 with a fixed seed, one thread). `--check` regenerates in memory and
compares with the file on disk. Installs nothing.
"""
import argparse
import functools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden_io  # noqa: E402 - writer, MANIFEST

PROG = "gen_attention_order_goldens"
die = functools.partial(golden_io.die, PROG)
SEED = 20261202
# (B, H, T, dh): batch and heads > 1 (k^T copied), batch 1, one head, both 1, more of each;
# head dims with and without a 16-element tail, sequences past one 64-block
CONFIGS = [(2, 2, 16, 16), (2, 2, 20, 12), (2, 2, 72, 24), (1, 2, 16, 16), (1, 2, 72, 24),
           (2, 1, 20, 12), (1, 1, 16, 16), (3, 4, 20, 10)]
# bf16: B*H*T*T*dh above 4096 (oneDNN) and at most 4096 (cpublas), views and copies
BF16_CONFIGS = [(2, 2, 16, 16), (2, 2, 20, 12), (1, 1, 16, 16), (2, 2, 8, 8), (1, 2, 12, 12), (2, 1, 12, 10)]
# ... and long K (bf16: oneDNN's K blocks of 512, or 1024 past K = 1024 with A untransposed)
LINEAR_SIZES = [(4, 8, 8), (8, 16, 16), (16, 16, 16), (16, 16, 17), (3, 40, 24), (64, 32, 32), (2, 96, 20),
                (8, 768, 16), (4, 1100, 12), (8, 16, 1536), (1040, 8, 8), (2048, 4, 4)]
# k_lin's backward (B, H, T, dh): at batch 1 its gradient is column-major in torch
KGRAD_CONFIGS = [(2, 2, 24, 8), (1, 2, 24, 8), (1, 4, 20, 6), (2, 1, 24, 8), (1, 1, 24, 16), (1, 2, 8, 4), (2, 2, 6, 4)]
BIG, SMALL = 4096.0, 2.0 ** -12


def crafted(np, rng, shape):
    """Rows (the last dim) with +BIG, -BIG and up to 5 multiples of SMALL at random positions."""
    x = np.zeros(shape, dtype=np.float32)
    rows = x.reshape(-1, shape[-1])
    K = shape[-1]
    for r in rows:
        pos = rng.permutation(K)
        r[pos[0]], r[pos[1]] = BIG, -BIG
        for t in range(2, min(K, 7)):
            r[pos[t]] = SMALL * float(rng.choice([1, 3, 5]))
    return x


def run_config(torch, np, rng, B, H, T, dh, half):
    D = H * dh
    q_in = torch.tensor(crafted(np, rng, (B, T, H, dh)).reshape(B, T, D), dtype=half)
    k_in = torch.ones(B, T, D, dtype=half)
    v_in = torch.ones(B, T, D, dtype=half)
    P_in = torch.tensor(crafted(np, rng, (B, H, T, T)), dtype=half)
    dS_in = torch.tensor(crafted(np, rng, (B, H, T, T)), dtype=half)
    dctx_in = torch.tensor(crafted(np, rng, (B, H, T, dh)), dtype=half)
    xq, xk, xv = (t.clone().requires_grad_() for t in (q_in, k_in, v_in))
    P = P_in.clone().requires_grad_()
    q = xq.view(B, T, H, dh).transpose(1, 2)     # DistilBERT's head split: strided views
    k = xk.view(B, T, H, dh).transpose(1, 2)
    v = xv.view(B, T, H, dh).transpose(1, 2)
    S = torch.matmul(q, k.transpose(2, 3))
    ctx = torch.matmul(P, v)
    merged = ctx.transpose(1, 2).contiguous().view(B, T, D)
    w_ctx = dctx_in.transpose(1, 2).contiguous().view(B, T, D)
    loss = (S.float() * dS_in.float()).sum() + (merged.float() * w_ctx.float()).sum()
    loss.backward()

    def heads(g):  # (B, T, D) gradient -> (B, H, T, dh)
        return g.view(B, T, H, dh).transpose(1, 2).contiguous()
    return {
        "input.q": q_in, "input.k": k_in, "input.v": v_in, "input.P": P_in, "input.dS": dS_in,
        "input.dctx": dctx_in,
        "expect.S": S.detach(), "expect.ctx": ctx.detach().contiguous(), "expect.dP": P.grad.detach(),
        "expect.dv": heads(xv.grad), "expect.dq": heads(xq.grad), "expect.dk": heads(xk.grad),
    }


def run_linear(torch, np, rng, N, Kin, Kout, dt):
    """F.linear's three products: y = x @ W^T and dx = dy @ W from x, dy crafted (W ones); dW
    from a second graph with x ones and dyW crafted along N (dW[o, i] = sum_n dyW[n, o])."""
    x_in = torch.tensor(crafted(np, rng, (N, Kin)), dtype=dt)
    dy_in = torch.tensor(crafted(np, rng, (N, Kout)), dtype=dt)
    dyw_in = torch.tensor(crafted(np, rng, (Kout, N)).T.copy(), dtype=dt)
    x = x_in.clone().requires_grad_()
    W = torch.ones(Kout, Kin, dtype=dt, requires_grad=True)
    y = torch.nn.functional.linear(x, W)
    (y.float() * dy_in.float()).sum().backward()
    x1 = torch.ones(N, Kin, dtype=dt, requires_grad=True)
    W1 = torch.ones(Kout, Kin, dtype=dt, requires_grad=True)
    (torch.nn.functional.linear(x1, W1).float() * dyw_in.float()).sum().backward()
    return {"input.x": x_in, "input.dy": dy_in, "input.dyW": dyw_in,
            "expect.y": y.detach(), "expect.dx": x.grad.detach(), "expect.dW": W1.grad.detach()}


def run_kgrad(torch, np, rng, B, H, T, dh, dt):
    """k_lin's backward: DistilBERT's k = k_lin(x).view(B, T, H, dh).transpose(1, 2) and S = q @ k^T;
    the gradient reaching k_lin (B*T, D) is made what we want through q one-hot (q[.., l, l] = 1:
    grad_k[b, h, j, l] = dS[b, h, l, j]). Graph 1: that gradient's rows crafted, x and W ones ->
    dx[n, i] = the sum of row n; graph 2: its columns crafted -> dW[o, i] = the sum of column o."""
    D = H * dh
    assert dh <= T
    out = {}
    for graph, what in ((1, "dx"), (2, "dW")):
        if graph == 1:
            G = crafted(np, rng, (B, T, D))                      # rows over o crafted
        else:
            G = crafted(np, rng, (D, B * T)).T.copy().reshape(B, T, D)  # columns over n crafted
        dS = np.zeros((B, H, T, T), dtype=np.float32)
        for h in range(H):
            for l in range(dh):
                dS[:, h, l, :] = G[:, :, h * dh + l]
        q = np.zeros((B, H, T, dh), dtype=np.float32)
        for l in range(dh):
            q[:, :, l, l] = 1.0
        lin = torch.nn.Linear(D, D).to(dt)
        with torch.no_grad():
            lin.weight.fill_(1.0)
            lin.bias.zero_()
        x = torch.ones(B, T, D, dtype=dt, requires_grad=True)
        k = lin(x).view(B, T, H, dh).transpose(1, 2)
        S = torch.matmul(torch.tensor(q, dtype=dt), k.transpose(2, 3))
        (S.float() * torch.tensor(dS, dtype=dt).float()).sum().backward()
        out[f"input.g{graph}"] = torch.tensor(G.reshape(B * T, D), dtype=dt)
        out[f"expect.{what}"] = (x.grad.reshape(B * T, D) if what == "dx" else lin.weight.grad).detach().clone()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reference/golden", help="golden root (default reference/golden)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and compare with the file on disk (exit 1 on difference)")
    args = ap.parse_args()
    torch, np = golden_io.require(PROG, [("torch", "torch >= 2.5"), ("numpy", "numpy")])
    golden_io.require_version(PROG, "torch", torch.__version__, "2.5", "the fp16 orders recorded here are torch 2.x's")
    torch.set_num_threads(1)
    goldens = golden_io.Goldens(PROG, __file__, os.path.join(args.out, "MANIFEST.tsv"), check=args.check)
    base = {
        "library": f"torch {torch.__version__}",
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_num_threads": "1",
        "mkldnn_bf16_supported": str(bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())).lower(),
        "seed": str(SEED),
        "generator": goldens.generator,
    }
    for case, dt, configs in (("attention_f16_orders", torch.float16, CONFIGS),
                              ("attention_bf16_orders", torch.bfloat16, BF16_CONFIGS)):
        rng = np.random.default_rng(SEED)
        tensors = {}
        for i, (B, H, T, dh) in enumerate(configs):
            for name, t in run_config(torch, np, rng, B, H, T, dh, dt).items():
                kind, what = name.split(".")
                tensors[f"{kind}.c{i}.{what}"] = t
        meta = dict(base, case=case,
                    comment=f"{str(dt)[6:]} attention products (forward q @ k^T, P @ v; backward dctx @ v^T, "
                            "P^T @ dctx, dS @ k, dS^T @ q) as torch's autograd computes them with DistilBERT's "
                            "head split, on inputs built so that every summation order gives different bits",
                    configs=json.dumps([dict(B=b, H=h, T=t, dh=d) for b, h, t, d in configs], separators=(",", ":")))
        path = os.path.join(args.out, "model", case + ".safetensors")
        goldens.put(path, golden_io.safetensors_bytes(torch, tensors, meta), meta["library"], meta["seed"])
    rng = np.random.default_rng(SEED + 1)
    tensors = {}
    for dname, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for (N, Kin, Kout) in LINEAR_SIZES:
            for name, t in run_linear(torch, np, rng, N, Kin, Kout, dt).items():
                kind, what = name.split(".")
                tensors[f"{kind}.{dname}.{N}x{Kin}x{Kout}.{what}"] = t
    for dname, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for (B, H, T, dh) in KGRAD_CONFIGS:
            if dt == torch.bfloat16 and B * T * H * dh * H * dh > 4096:
                continue  # oneDNN-sized in bf16: pairs whatever the layout
            for name, t in run_kgrad(torch, np, rng, B, H, T, dh, dt).items():
                kind, what = name.split(".")
                tensors[f"{kind}.{dname}.k{B}x{H}x{T}x{dh}.{what}"] = t
    meta = dict(base, case="linear_low_orders",
                comment="F.linear forward, dx and dW in fp16 and bf16 on inputs built so that every summation "
                        "order gives different bits, sizes around the 16*16*16 oneDNN threshold of bf16",
                sizes=",".join(f"{n}x{i}x{o}" for n, i, o in LINEAR_SIZES),
                kgrad=",".join(f"{b}x{h}x{t}x{d}" for b, h, t, d in KGRAD_CONFIGS))
    path = os.path.join(args.out, "model", "linear_low_orders.safetensors")
    goldens.put(path, golden_io.safetensors_bytes(torch, tensors, meta), meta["library"], meta["seed"])
    print(f"total {goldens.total} bytes in {'checked' if args.check else 'written'} files")
    if args.check:
        goldens.finish_check()
        return
    n = goldens.write_manifest(stale=lambda f: False)
    print(f"wrote {goldens.manifest_path} ({n} rows)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""trainbench's dropout masks, re-implemented in Python from their documentation, and a way to
make transformers apply them.

    python3 reference/dropout_masks.py --vectors      # the test vectors tests/test_dropout.c holds

The masks (src/model/dropout.h; reference/MODEL_SEMANTICS.md section 10) are a pure function of
(seed, optimizer step, the example's index in the step's global batch, site, layer, element):

    mix64(z)     = SplitMix64's output function (below), all arithmetic mod 2^64
    absorb(k, v) = mix64(k + (v + 1) * G),   G = 0x9E3779B97F4A7C15
    key          = absorb(absorb(absorb(seed, step), example), site << 32 | layer)
    draw(i)      = mix64(key + (i + 1) * G)
    kept(i)      = (draw(i) >> 11) * 2**-53 < 1 - p      (in double)

site: 1 embeddings, 2 attention, 3 ffn, 4 classifier; layer: the transformer layer (0 for the
embeddings and the classifier); i: the element's row-major index in the example's own tensor
((T, D) for embeddings/ffn, (H, T, T) for attention, (D) for the classifier).

This file is written from that description only (not from the C code): the goldens of
reference/gen_dropout_goldens.py store the masks it makes, and tests/test_model_golden.c checks
that the C trainer draws exactly the same ones. `patched_dropout` makes transformers' DistilBERT
use given masks with torch's own dropout arithmetic (ATen native/Dropout.cpp _dropout_impl:
noise = mask in the input's dtype, noise.div_(1 - p), input * noise), so a PyTorch run can be fed
the masks of a trainbench run (`trainbench train --dump-dropout-masks DIR` writes them).

Needs numpy for the masks; torch only for patched_dropout.
"""
import argparse
import contextlib

import numpy as np

M64 = (1 << 64) - 1
G = 0x9E3779B97F4A7C15
SITES = {"embeddings": 1, "attention": 2, "ffn": 3, "classifier": 4}


def mix64(z):
    """SplitMix64's output function on a Python int (mod 2^64)."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def absorb(k, v):
    return mix64(k + ((v + 1) * G & M64))


def key(seed, step, example, site, layer):
    """The key of one example's mask at one site (site: a name of SITES or its number)."""
    s = SITES[site] if isinstance(site, str) else int(site)
    k = absorb(seed & M64, step & M64)
    k = absorb(k, example & M64)
    return absorb(k, ((s << 32) | (layer & 0xFFFFFFFF)) & M64)


def draws(k, n):
    """draw(i) for i = 0..n-1 of key k, as a numpy uint64 array (wrapping arithmetic)."""
    i = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(k) + i * np.uint64(G)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def kept(k, n, p):
    """The keep mask (bool, n) of key k at drop probability p."""
    return (draws(k, n) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 < 1.0 - p


def site_mask(seed, step, first_example, rows, shape, site, layer, p):
    """uint8 (rows, *shape): the masks of examples first_example .. first_example + rows - 1."""
    n = int(np.prod(shape))
    out = np.empty((rows, n), dtype=np.uint8)
    for b in range(rows):
        out[b] = kept(key(seed, step, first_example + b, site, layer), n, p)
    return out.reshape((rows,) + tuple(shape))


def step_masks(cfg, seed, step, first_example, rows, seq, p_hidden, p_attention, p_classifier):
    """Every mask of one forward, keyed and named as `trainbench train --dump-dropout-masks`
    names them (the transformers module that applies each), in the order DistilBERT's forward
    calls dropout: {name: uint8 array}. cfg: dim, n_layers, n_heads. Sites with p = 0 are left out
    (torch does not draw for them: F.dropout returns its input)."""
    D, L, H = cfg["dim"], cfg["n_layers"], cfg["n_heads"]
    out = {}
    if p_hidden > 0:
        out["distilbert.embeddings.dropout"] = site_mask(seed, step, first_example, rows, (seq, D),
                                                         "embeddings", 0, p_hidden)
    for layer in range(L):
        if p_attention > 0:
            out[f"distilbert.transformer.layer.{layer}.attention.dropout"] = site_mask(
                seed, step, first_example, rows, (H, seq, seq), "attention", layer, p_attention)
        if p_hidden > 0:
            out[f"distilbert.transformer.layer.{layer}.ffn.dropout"] = site_mask(
                seed, step, first_example, rows, (seq, D), "ffn", layer, p_hidden)
    if p_classifier > 0:
        out["dropout"] = site_mask(seed, step, first_example, rows, (D,), "classifier", 0, p_classifier)
    return out


@contextlib.contextmanager
def patched_dropout(torch, masks, repeat=False):
    """Within the block, every torch.nn.functional.dropout call with p > 0 in training consumes the
    next (name, mask) of `masks` (in DistilBERT's call order, as step_masks returns them) and
    computes what ATen's CPU dropout computes with that mask as its bernoulli draw:
        noise = mask.to(input.dtype); noise.div_(1 - p); return input * noise
    (p == 1: input * 0). Calls with p == 0 or training=False go to the real function. The shape of
    each mask must be the input's; on exit every mask must have been used, and one at least unless
    there were none (a model without layers has no attention dropout to draw) (repeat=True: the list
    starts over after its last mask, for several forwards of the same batch, and on exit the calls
    must have been whole forwards). Yields the list of mask names used, in order."""
    F = torch.nn.functional
    real = F.dropout
    items = list(masks.items()) if isinstance(masks, dict) else list(masks)
    queue = list(items)
    used = []

    def dropout(input, p=0.5, training=True, inplace=False):
        if p == 0 or not training:
            return real(input, p, training, inplace)
        if not queue and repeat:
            queue.extend(items)
        if not queue:
            raise RuntimeError(f"patched_dropout: a dropout call (shape {tuple(input.shape)}, p {p}) without a mask")
        name, m = queue.pop(0)
        m = torch.as_tensor(m)
        if tuple(m.shape) != tuple(input.shape):
            raise RuntimeError(f"patched_dropout: mask {name} has shape {tuple(m.shape)}, the dropout input "
                               f"{tuple(input.shape)}")
        used.append(name)
        if p == 1:
            return input * torch.zeros((), dtype=input.dtype)
        noise = m.to(dtype=input.dtype)
        noise.div_(1 - p)
        return input * noise

    F.dropout = dropout
    try:
        yield used
    finally:
        F.dropout = real
    if queue and (not repeat or len(queue) != len(items)) or (items and not used):
        raise RuntimeError(f"patched_dropout: masks not used: {[n for n, _ in queue]}")


def check_formula(torch):
    """patched_dropout's arithmetic against torch's own CPU dropout: for fp32, bf16 and fp16 and a
    few p, run the real torch.nn.functional.dropout, read its bernoulli draw back as a mask (the
    kept elements are the nonzero outputs; the input has no zeros), recompute the output and the
    input gradient with the mask, and require both bit-identical. Raises on a difference."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(5)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        for p in (0.1, 0.15, 0.2, 0.5):
            x = (torch.randn(4096, generator=g) + 8.0).to(dt)      # no zeros
            if bool((x == 0).any()):
                raise RuntimeError("check_formula: input has zeros")
            x1 = x.clone().requires_grad_(True)
            torch.manual_seed(11)
            y = F.dropout(x1, p=p, training=True)
            dy = torch.randn(4096, generator=g).to(dt)
            y.backward(dy)
            m = (y != 0).to(torch.uint8)
            x2 = x.clone().requires_grad_(True)
            noise = m.to(dtype=dt)
            noise.div_(1 - p)
            y2 = x2 * noise
            y2.backward(dy)
            if not (torch.equal(y, y2) and torch.equal(x1.grad, x2.grad)):
                raise RuntimeError(f"check_formula: {dt} p={p}: the masked formula differs from torch's dropout")


def vectors():
    """Test vectors for tests/test_dropout.c."""
    print("mix64:", ", ".join(f"0x{mix64(z):016x}" for z in (0, 1, 0x9E3779B97F4A7C15, M64)))
    for args in ((42, 1, 0, "embeddings", 0), (42, 1, 5, "attention", 1), (7, 123456, 31, "ffn", 3),
                 (2**63 + 5, 2, 1, "classifier", 0)):
        k = key(*args)
        d = draws(k, 3)
        print(f"key{args} = 0x{k:016x}; draw(0..2) = " + ", ".join(f"0x{int(x):016x}" for x in d))
    m = kept(key(42, 1, 0, "attention", 0), 64, 0.1)
    print("kept(key(42,1,0,attention,0), i<64, p=0.1) bits: 0x%016x" % sum(int(b) << i for i, b in enumerate(m)))
    m = kept(key(42, 3, 2, "classifier", 0), 64, 0.5)
    print("kept(key(42,3,2,classifier,0), i<64, p=0.5) bits: 0x%016x" % sum(int(b) << i for i, b in enumerate(m)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", action="store_true", help="print the test vectors of tests/test_dropout.c")
    args = ap.parse_args()
    if args.vectors:
        vectors()
    else:
        ap.print_help()


if __name__ == "__main__":
    main()

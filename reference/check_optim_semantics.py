#!/usr/bin/env python3
"""Second, independent implementation of reference/OPTIM_SEMANTICS.md, checked against the goldens.

    python3 reference/check_optim_semantics.py [--golden reference/golden] [--sqrt exact|torch] [FILE...]

Re-implements the four optimizers with NumPy float32 scalar semantics exactly as OPTIM_SEMANTICS.md
states them (every rounding point, every fused multiply-add, the torch reduction orders, the
bitsandbytes CPU quantizer), replays each golden's input.grads and compares every expect.* tensor
bit for bit.  It does not import torch, transformers or bitsandbytes (except `--sqrt torch`, see
below), so it shows that the document alone is enough to reproduce the goldens; a C port that
follows the same document should match to the same degree.

Exit status 0 when every tensor matches exactly, except where the only cause is the one operation
the document cannot specify exactly: torch's float32 Tensor.sqrt() on x86 runs MKL vsSqrt(VML_HA),
which is not correctly rounded (<= 1 ulp).  `--sqrt exact` (default) uses a correctly rounded sqrt
(what a C port gets from sqrtf) and reports the differences that remain in adamw_torch and
adamw_bnb_8bit parameters; `--sqrt torch` borrows torch.sqrt for that one op and then everything
must match bit for bit.

Needs only NumPy (and Python >= 3.8).
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

import numpy as np

f32 = np.float32
F64 = np.float64
SQRT_MODE = "exact"


# ------------------------------------------------------------------------------------------
# safetensors reader
# ------------------------------------------------------------------------------------------
def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    meta = header.pop("__metadata__", {})
    base = 8 + hlen
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        raw = data[base + a: base + b]
        dt = h["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, "<f4")
        elif dt == "BF16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view("<f4")
        elif dt == "U8":
            arr = np.frombuffer(raw, np.uint8)
        elif dt == "I64":
            arr = np.frombuffer(raw, "<i8")
        else:
            raise ValueError(dt)
        out[name] = arr.reshape(h["shape"]).copy()
    return out, meta


# ------------------------------------------------------------------------------------------
# float32 primitives
# ------------------------------------------------------------------------------------------
def fma(a, b, c):
    """Correctly rounded float32 fma(a, b, c) (a*b is exact in float64; TwoSum fixes the tie case)."""
    a = np.asarray(a, f32).astype(F64)
    b = np.asarray(b, f32).astype(F64)
    c = np.asarray(c, f32).astype(F64)
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * b
        s = p + c
        bb = s - p
        e = (p - (s - bb)) + (c - bb)
        r = s.astype(f32)
        r64 = r.astype(F64)
        up = np.nextafter(r, f32(np.inf))
        dn = np.nextafter(r, f32(-np.inf))
        mid_up = (s > r64) & (s - r64 == (up.astype(F64) - r64) / 2)
        mid_dn = (s < r64) & (r64 - s == (r64 - dn.astype(F64)) / 2)
        r = np.where(mid_up & (e > 0), up, r)
        r = np.where(mid_dn & (e < 0), dn, r)
    return r.astype(f32)


def sqrt(x):
    x = np.asarray(x, f32)
    if SQRT_MODE == "torch":  # MKL vsSqrt(VML_HA), exactly what Tensor.sqrt() runs on x86
        import torch
        return torch.from_numpy(np.ascontiguousarray(x)).sqrt().numpy()
    with np.errstate(invalid="ignore"):
        return np.sqrt(x)       # correctly rounded (sqrtf)


def rsqrt(x):
    """torch rsqrt on CPU: 1 / sqrt(x), both correctly rounded (not MKL, not an approximation)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (f32(1) / np.sqrt(np.asarray(x, f32))).astype(f32)


def lerp(start, end, w):
    """torch lerp_ with a scalar weight: w is rounded to float32 first."""
    w = f32(w)
    d = (np.asarray(end, f32) - np.asarray(start, f32)).astype(f32)
    if abs(w) < f32(0.5):
        return fma(w, d, start)
    return fma(f32(w - f32(1)), d, end)


def clamp_min(x, m):
    x = np.asarray(x, f32)
    return np.where(np.isnan(x), x, np.maximum(x, f32(m))).astype(f32)


# ------------------------------------------------------------------------------------------
# torch CPU reductions (float32, 8-lane AVX2 kernels, single thread)
# ------------------------------------------------------------------------------------------
def sumsq_lastdim(x):
    """Sum of squares as norm(p=2) accumulates it over one contiguous row (before the sqrt)."""
    x = np.asarray(x, f32)
    n = x.shape[0]
    nv = n - n % 8
    acc = np.zeros(8, f32)
    for d in range(0, nv, 8):
        v = x[d:d + 8]
        acc = (acc + (v * v).astype(f32)).astype(f32)
    s = acc[0]
    for j in range(1, 8):
        s = f32(s + acc[j])
    i = nv
    if n - i >= 4:                  # compiler-vectorized epilogue: 4 rounded squares, added in order
        for v in x[i:i + 4]:
            s = f32(s + f32(v * v))
        i += 4
    for v in x[i:]:                 # scalar epilogue: fused
        s = fma(v, v, s)[()]
    return f32(s)


def norm2_full(x):
    """tensor.norm(2) / linalg.vector_norm over all elements of a contiguous tensor."""
    return np.sqrt(sumsq_lastdim(np.asarray(x, f32).reshape(-1)))


def norm2_lastdim(X):
    """linalg.vector_norm(X, dim=-1, keepdim=True) for contiguous X (..., C)."""
    X = np.asarray(X, f32)
    rows = X.reshape(-1, X.shape[-1])
    out = np.array([np.sqrt(sumsq_lastdim(r)) for r in rows], f32)
    return out.reshape(X.shape[:-1] + (1,))


def norm2_dim_m2(X):
    """linalg.vector_norm(X, dim=-2, keepdim=True): per column, rows in order, acc + RN(x*x)."""
    X = np.asarray(X, f32)
    lead = X.shape[:-2]
    if X.shape[-1] == 1:  # TensorIterator coalesces (R, 1) into one contiguous row: the last-dim kernel
        rows = X.reshape((-1, X.shape[-2]))
        return np.array([np.sqrt(sumsq_lastdim(r)) for r in rows], f32).reshape(lead + (1, 1))
    Xs = X.reshape((-1,) + X.shape[-2:])
    out = np.empty((Xs.shape[0], 1, X.shape[-1]), f32)
    for a in range(Xs.shape[0]):
        s = np.zeros(X.shape[-1], f32)
        for r in range(Xs.shape[1]):
            v = Xs[a, r]
            s = (s + (v * v).astype(f32)).astype(f32)
        out[a, 0] = np.sqrt(s)
    return out.reshape(lead + (1, X.shape[-1]))


def _ceil_log2(x):
    return 0 if x <= 1 else (int(x) - 1).bit_length()


def _multi_row_sum(load, nrows, size, shape):
    """at::native multi_row_sum: 4-level cascade of running sums (SumKernel.cpp)."""
    num_levels = 4
    level_power = max(4, _ceil_log2(size) // num_levels)
    level_step = 1 << level_power
    level_mask = level_step - 1
    acc = [[np.zeros(shape, f32) for _ in range(nrows)] for _ in range(num_levels)]
    i = 0
    while i + level_step <= size:
        for _ in range(level_step):
            for k in range(nrows):
                acc[0][k] = (acc[0][k] + load(i, k)).astype(f32)
            i += 1
        for j in range(1, num_levels):
            for k in range(nrows):
                acc[j][k] = (acc[j][k] + acc[j - 1][k]).astype(f32)
                acc[j - 1][k] = np.zeros(shape, f32)
            if (i & (level_mask << (j * level_power))) != 0:
                break
    while i < size:
        for k in range(nrows):
            acc[0][k] = (acc[0][k] + load(i, k)).astype(f32)
        i += 1
    for j in range(1, num_levels):
        for k in range(nrows):
            acc[0][k] = (acc[0][k] + acc[j][k]).astype(f32)
    return [acc[0][k] for k in range(nrows)]


def _row_sum(load1, size, shape):
    """at::native row_sum: 4 interleaved partial sums (ilp_factor 4), then leftovers, then fold."""
    size_ilp = size // 4
    ps = _multi_row_sum(lambda i, k: load1(i * 4 + k), 4, size_ilp, shape)
    for i in range(size_ilp * 4, size):
        ps[0] = (ps[0] + load1(i)).astype(f32)
    for k in range(1, 4):
        ps[0] = (ps[0] + ps[k]).astype(f32)
    return ps[0]


W = 8  # float lanes of the reduction kernels that run (AVX2 width, also on AVX-512 machines)


def sum_lastdim(X):
    """X.sum(dim=-1) for contiguous X (..., n): cascade_sum, 'contiguous inner reduction'."""
    X = np.asarray(X, f32)
    n = X.shape[-1]
    rows = X.reshape(-1, n)
    out = np.empty(rows.shape[0], f32)
    for r, x in enumerate(rows):
        if n >= W:
            nvec = n // W
            vacc = _row_sum(lambda i: x[i * W:(i + 1) * W], nvec, (W,))
            fin = f32(0)
            for k in range(nvec * W, n):
                fin = f32(fin + x[k])
            for k in range(W):
                fin = f32(fin + vacc[k])
        else:
            fin = _row_sum(lambda i: x[i], n, ())
        out[r] = fin
    return out.reshape(X.shape[:-1])


def sum_dim_m2(X):
    """X.sum(dim=-2) for contiguous X (..., R, C): cascade_sum, 'contiguous outer reduction'."""
    X = np.asarray(X, f32)
    R, C = X.shape[-2:]
    if C == 1:  # (R, 1) coalesces into one contiguous row: an inner (last-dim) sum
        return sum_lastdim(X.reshape(X.shape[:-2] + (R,))).reshape(X.shape[:-2] + (1,))
    Xs = X.reshape((-1, R, C))
    out = np.empty((Xs.shape[0], C), f32)
    for a in range(Xs.shape[0]):
        M = Xs[a]
        o = out[a]
        j = 0
        if C >= W:
            while j + 4 * W <= C:
                sums = _multi_row_sum(lambda i, k: M[i, j + k * W:j + (k + 1) * W], 4, R, (W,))
                for k in range(4):
                    o[j + k * W:j + (k + 1) * W] = sums[k]
                j += 4 * W
            while j + W <= C:
                o[j:j + W] = _row_sum(lambda i: M[i, j:j + W], R, (W,))
                j += W
            while j < C:
                o[j] = _row_sum(lambda i: M[i, j], R, ())
                j += 1
        else:
            while j + 3 < C:
                sums = _multi_row_sum(lambda i, k: M[i, j + k], 4, R, ())
                for k in range(4):
                    o[j + k] = sums[k]
                j += 4
            while j < C:
                o[j] = _row_sum(lambda i: M[i, j], R, ())
                j += 1
    return out.reshape(X.shape[:-2] + (C,))


def mean_lastdim(X):
    return (sum_lastdim(X) / f32(np.asarray(X).shape[-1])).astype(f32)


def mean_dim_m2(X):
    return (sum_dim_m2(X) / f32(np.asarray(X).shape[-2])).astype(f32)


# ------------------------------------------------------------------------------------------
# optimizers
# ------------------------------------------------------------------------------------------
class AdamWTorch:
    def __init__(self, p, hp):
        self.hp = hp
        self.state = {"step": f32(0), "exp_avg": np.zeros_like(p), "exp_avg_sq": np.zeros_like(p)}
        if hp.get("amsgrad"):
            self.state["max_exp_avg_sq"] = np.zeros_like(p)

    def step(self, p, g):
        hp, st = self.hp, self.state
        lr, (b1, b2), eps, wd = hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"]
        if hp.get("maximize"):
            g = -g
        st["step"] = f32(st["step"] + f32(1))
        t = float(st["step"])
        if wd != 0:
            p = (p * f32(1 - lr * wd)).astype(f32)
        st["exp_avg"] = lerp(st["exp_avg"], g, 1 - b1)
        v = (st["exp_avg_sq"] * f32(b2)).astype(f32)
        st["exp_avg_sq"] = fma((f32(1 - b2) * g).astype(f32), g, v)
        bc1 = 1 - b1 ** t
        bc2 = 1 - b2 ** t
        step_size = lr / bc1
        bc2_sqrt = bc2 ** 0.5
        vd = st["exp_avg_sq"]
        if hp.get("amsgrad"):  # torch.maximum: NaN where either is NaN (numpy's maximum too)
            vd = st["max_exp_avg_sq"] = np.maximum(st["max_exp_avg_sq"], vd)
        denom = ((sqrt(vd) / f32(bc2_sqrt)).astype(f32) + f32(eps)).astype(f32)
        upd = ((f32(-step_size) * st["exp_avg"]).astype(f32) / denom).astype(f32)
        return (p + upd).astype(f32)


class AdamWTorchFused(AdamWTorch):
    """torch.optim.AdamW(fused=True) on CPU (FusedAdamKernel.cpp as the AVX-512 build compiles it):
    adamw_torch's state and operations with a correctly rounded sqrt (whatever --sqrt says: the
    kernel's Vectorized sqrt and std::sqrt), and the flattened tensor's last numel % 8 elements
    computing the second moment as fma(v, b2, (w2*g)*g). amsgrad: maximum(old, v), NaN where v is
    NaN in the body and the loop after it alike (amsgrad_grads_nonfinite_vec_15)."""
    def step(self, p, g):
        hp, st = self.hp, self.state
        lr, (b1, b2), eps, wd = hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"]
        if hp.get("maximize"):
            g = -g
        st["step"] = f32(st["step"] + f32(1))
        t = float(st["step"])
        shape = p.shape
        p, g = p.reshape(-1), g.reshape(-1)
        if wd != 0:
            p = (p * f32(1 - lr * wd)).astype(f32)
        m = lerp(st["exp_avg"].reshape(-1), g, 1 - b1)
        v0 = st["exp_avg_sq"].reshape(-1)
        w2g = (f32(1 - b2) * g).astype(f32)
        v = fma(w2g, g, (v0 * f32(b2)).astype(f32))
        k = p.size - p.size % 8
        v[k:] = fma(v0[k:], np.full(p.size - k, f32(b2), f32), (w2g[k:] * g[k:]).astype(f32))
        bc1 = 1 - b1 ** t
        bc2 = 1 - b2 ** t
        step_size = lr / bc1
        vd = v
        if hp.get("amsgrad"):
            vd = np.maximum(st["max_exp_avg_sq"].reshape(-1), v)
            st["max_exp_avg_sq"] = vd.reshape(shape)
        with np.errstate(invalid="ignore"):
            root = np.sqrt(vd).astype(f32)
        denom = ((root / f32(math.sqrt(bc2))).astype(f32) + f32(eps)).astype(f32)
        upd = ((f32(-step_size) * m).astype(f32) / denom).astype(f32)
        st["exp_avg"], st["exp_avg_sq"] = m.reshape(shape), v.reshape(shape)
        return (p + upd).astype(f32).reshape(shape)


class AdafactorHF:
    def __init__(self, p, hp):
        self.hp = hp
        self.factored = p.ndim >= 2
        st = {"step": 0}
        if hp["beta1"] is not None:
            st["exp_avg"] = np.zeros_like(p)
        if self.factored:
            st["exp_avg_sq_row"] = np.zeros(p.shape[:-1], f32)
            st["exp_avg_sq_col"] = np.zeros(p.shape[:-2] + p.shape[-1:], f32)
        else:
            st["exp_avg_sq"] = np.zeros_like(p)
        st["RMS"] = 0
        self.state = st
        self.clipped = []

    @staticmethod
    def _rms(x):
        return f32(norm2_full(x) / f32(x.size ** 0.5))

    def step(self, p, g):
        hp, st = self.hp, self.state
        eps1, eps2 = hp["eps"]
        st["step"] += 1
        t = st["step"]
        st["RMS"] = self._rms(p)
        # _get_lr: a float32 0-d tensor when the RMS branch of max() wins, else a python float
        rel = hp["lr"]
        if hp["relative_step"]:
            min_step = 1e-6 * t if hp["warmup_init"] else 1e-2
            rel = min(min_step, 1.0 / math.sqrt(t))
        lr_is_tensor = False
        if hp["scale_parameter"]:
            if st["RMS"] > eps2:
                lr = f32(st["RMS"] * f32(rel))
                lr_is_tensor = True
            else:
                lr = eps2 * rel
        else:
            lr = 1.0 * rel
        beta2t = 1.0 - math.pow(t, hp["decay_rate"])
        upd = ((g * g).astype(f32) + f32(eps1)).astype(f32)
        if self.factored:
            row = (st["exp_avg_sq_row"] * f32(beta2t)).astype(f32)
            st["exp_avg_sq_row"] = fma(mean_lastdim(upd), f32(1.0 - beta2t), row)
            col = (st["exp_avg_sq_col"] * f32(beta2t)).astype(f32)
            st["exp_avg_sq_col"] = fma(mean_dim_m2(upd), f32(1.0 - beta2t), col)
            r, c = st["exp_avg_sq_row"], st["exp_avg_sq_col"]
            rmean = mean_lastdim(r)[..., None]
            r_factor = rsqrt((r / rmean).astype(f32))[..., None]
            c_factor = rsqrt(c)[..., None, :]
            upd = (r_factor * c_factor).astype(f32)
            upd = (upd * g).astype(f32)
        else:
            v = (st["exp_avg_sq"] * f32(beta2t)).astype(f32)
            st["exp_avg_sq"] = fma(upd, f32(1.0 - beta2t), v)
            upd = (rsqrt(st["exp_avg_sq"]) * g).astype(f32)
        ratio = f32(self._rms(upd) / f32(hp["clip_threshold"]))
        self.clipped.append(bool(ratio > f32(1)))
        upd = (upd / clamp_min(ratio, 1.0)).astype(f32)
        upd = (upd * f32(lr)).astype(f32)
        if hp["beta1"] is not None:
            m = (st["exp_avg"] * f32(hp["beta1"])).astype(f32)
            st["exp_avg"] = fma(upd, f32(1 - hp["beta1"]), m)
            upd = st["exp_avg"]
        if hp["weight_decay"] != 0:
            alpha = f32(lr * f32(-hp["weight_decay"])) if lr_is_tensor else f32(-hp["weight_decay"] * lr)
            p = fma(p, alpha, p)
        return (p - upd).astype(f32)


class AdafactorTorch:
    def __init__(self, p, hp):
        self.hp = hp
        st = {"step": f32(0)}
        if p.ndim > 1:
            st["row_var"] = np.zeros(p.shape[:-1] + (1,), f32)
            st["col_var"] = np.zeros(p.shape[:-2] + (1,) + p.shape[-1:], f32)
        else:
            st["variance"] = np.zeros_like(p)
        self.state = st
        self.clipped = []

    def step(self, p, g):
        hp, st = self.hp, self.state
        eps1, eps2 = hp["eps"]
        if eps1 is None:
            eps1 = float(np.finfo(f32).eps)
        lr, d, wd = hp["lr"], hp["d"], hp["weight_decay"]
        if hp.get("maximize"):
            g = -g
        st["step"] = f32(st["step"] + f32(1))
        t = float(st["step"])
        w = t ** hp["beta2_decay"]
        rho = min(lr, 1 / (t ** 0.5))
        alpha = max(eps2, float(norm2_full(p)) / (p.size ** 0.5)) * rho
        if wd != 0:
            p = (p * f32(1 - lr * wd)).astype(f32)
        if g.ndim > 1:
            C, R = g.shape[-1], g.shape[-2]
            row_mean = ((norm2_lastdim(g) ** 2).astype(f32) / f32(C)).astype(f32)
            st["row_var"] = lerp(st["row_var"], row_mean, w)
            col_mean = ((norm2_dim_m2(g) ** 2).astype(f32) / f32(R)).astype(f32)
            st["col_var"] = lerp(st["col_var"], col_mean, w)
            var = (st["row_var"] * st["col_var"]).astype(f32)          # (…,R,1) @ (…,1,C)
            rv = st["row_var"][..., 0]                                  # (…,R)
            rmean = (sum_lastdim(rv) / f32(R)).astype(f32)[..., None, None]
            var = (var / clamp_min(rmean, eps1)).astype(f32)
        else:
            st["variance"] = lerp(st["variance"], (g * g).astype(f32), w)
            var = st["variance"].copy()
        upd = rsqrt(clamp_min(var, eps1 * eps1))
        upd = (upd * g).astype(f32)
        denom = max(1.0, float(norm2_full(upd)) / ((upd.size ** 0.5) * d))
        self.clipped.append(denom > 1.0)
        if hp.get("foreach"):  # _multi_tensor_adafactor: updates.mul_(a), then param.add_(updates)
            return (p + (upd * f32(-alpha / denom)).astype(f32)).astype(f32)
        return fma(upd, f32(-alpha / denom), p)


def create_dynamic_map(signed):
    """bitsandbytes.functional.create_dynamic_map(signed, 7, 8) with torch.linspace's float32 rule."""
    def linspace(a, b, n):
        a, b = f32(a), f32(b)
        step = f32((b - a) / f32(n - 1))
        half = n // 2
        return np.array([fma(step, f32(i), a) if i < half else fma(-step, f32(n - 1 - i), b)
                         for i in range(n)], f32)
    data = []
    for i in range(7):
        items = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        bnd = linspace(0.1, 1, items)
        means = ((bnd[:-1] + bnd[1:]).astype(f32) / f32(2)).astype(f32)
        scale = f32(10.0 ** (-6 + i))
        data += [float(f32(scale * m)) for m in means]
        if signed:
            data += [float(f32(f32(-scale) * m)) for m in means]
    data += [0.0, 1.0]
    data.sort()
    return np.array(data, f32)


def build_quantize_lut(code):
    mid = ((code[:-1] + code[1:]).astype(f32) * f32(0.5)).astype(f32)
    lut = np.empty(65536, np.uint8)
    k = 0
    for i in range(65536):
        val = f32(f32(f32(f32(i) + f32(i)) / f32(65535)) - f32(1))
        while k < 255 and mid[k] < val:
            k += 1
        lut[i] = k
    return lut


_LUTS = {}


def quantize_blockwise(x, code):
    """libbitsandbytes_cpu quantize_cpu (CPU LUT quantizer), blocksize 256."""
    key = code.tobytes()
    if key not in _LUTS:
        _LUTS[key] = build_quantize_lut(code)
    lut = _LUTS[key]
    x = np.asarray(x, f32).reshape(-1)
    n = x.size
    nb = (n + 255) // 256
    absmax = np.zeros(nb, f32)
    out = np.zeros(n, np.uint8)
    for b in range(nb):
        blk = x[b * 256:(b + 1) * 256]
        a = f32(-np.inf)
        for v in np.abs(blk):            # a = (a < v) ? v : a  -- NaN never wins
            if a < v:
                a = v
        a = f32(0) if not (a > f32(0)) else a   # final max(0, acc): also empty/-inf -> 0
        absmax[b] = a
        if a == f32(0):
            continue
        inv = f32(f32(1) / a)
        with np.errstate(invalid="ignore", over="ignore"):
            y = (blk * inv).astype(f32)
            y = np.where(y < f32(-1), f32(-1), np.where(f32(1) < y, f32(1), y)).astype(f32)
            t = ((y + f32(1)).astype(f32) * f32(0.5)).astype(f32)
            z = fma(t, f32(65535), f32(0.5))
            idx = np.where(np.isfinite(z), np.trunc(z), -2.0 ** 31).astype(np.int64) & 0xFFFF
        out[b * 256:(b + 1) * 256] = lut[idx]
    return out, absmax


def dequantize_blockwise(codes, absmax, code):
    codes = codes.reshape(-1)
    scale = np.repeat(absmax, 256)[:codes.size]
    return (code[codes] * scale).astype(f32)


class AdamW8bitBnb:
    def __init__(self, p, hp):
        self.hp = hp
        self.q = p.size >= hp["min_8bit_size"]
        st = {"step": 0}
        if self.q:
            nb = (p.size + 255) // 256
            st.update(state1=np.zeros(p.shape, np.uint8), qmap1=create_dynamic_map(True),
                      state2=np.zeros(p.shape, np.uint8), qmap2=create_dynamic_map(False),
                      absmax1=np.zeros(nb, f32), absmax2=np.zeros(nb, f32))
        else:
            st.update(state1=np.zeros_like(p), state2=np.zeros_like(p))
        self.state = st

    def step(self, p, g):
        hp, st = self.hp, self.state
        lr, (b1, b2), eps, wd = hp["lr"], hp["betas"], hp["eps"], hp["weight_decay"]
        st["step"] += 1
        t = st["step"]
        g = (g * f32(1.0)).astype(f32)      # gnorm_scale
        if not self.q:                       # backends/cpu/ops.py _optimizer_update_32bit_cpu
            m = fma(g, f32(1.0 - b1), (st["state1"] * f32(b1)).astype(f32))
            v = fma((f32(1.0 - b2) * g).astype(f32), g, (st["state2"] * f32(b2)).astype(f32))
            st["state1"], st["state2"] = m, v
            c1 = 1.0 - b1 ** t
            c2 = math.sqrt(1.0 - b2 ** t)
            step_size = -lr * c2 / c1
            if wd > 0.0:
                p = (p * f32(1.0 - lr * wd)).astype(f32)
            upd = (m / (sqrt(v) + f32(eps * c2)).astype(f32)).astype(f32)
            return fma(upd, f32(step_size * 1.0), p)
        shape = p.shape
        m = dequantize_blockwise(st["state1"], st["absmax1"], st["qmap1"]).reshape(shape)
        v = dequantize_blockwise(st["state2"], st["absmax2"], st["qmap2"]).reshape(shape)
        m = fma(g, f32(1.0 - b1), (m * f32(b1)).astype(f32))
        v = fma((f32(1.0 - b2) * g).astype(f32), g, (v * f32(b2)).astype(f32))
        c1 = 1.0 - b1 ** t
        c2 = math.sqrt(1.0 - b2 ** t)
        denom = ((sqrt(v) / f32(c2)).astype(f32) + f32(eps)).astype(f32)
        if wd > 0.0:
            p = (p * f32(1.0 - lr * wd)).astype(f32)
        p = (p + ((f32(-lr / c1) * m).astype(f32) / denom).astype(f32)).astype(f32)
        s1, a1 = quantize_blockwise(m, st["qmap1"])
        s2, a2 = quantize_blockwise(v, st["qmap2"])
        st["state1"], st["absmax1"] = s1.reshape(shape), a1
        st["state2"], st["absmax2"] = s2.reshape(shape), a2
        return p


OPTIMS = {"adamw_torch": AdamWTorch, "adamw_torch_fused": AdamWTorchFused, "adafactor": AdafactorHF, "adafactor_torch": AdafactorTorch,
          "adamw_bnb_8bit": AdamW8bitBnb}


# ------------------------------------------------------------------------------------------
def ulp_diff(a, b):
    a = np.asarray(a, f32).reshape(-1).view(np.int32).astype(np.int64)
    b = np.asarray(b, f32).reshape(-1).view(np.int32).astype(np.int64)
    a = np.where(a < 0, -(a & 0x7FFFFFFF), a)
    b = np.where(b < 0, -(b & 0x7FFFFFFF), b)
    return np.abs(a - b)


def compare(name, got, exp):
    got = np.asarray(got)
    if exp.dtype == np.int64:
        got = np.asarray(got, np.int64)
    got = got.astype(exp.dtype).reshape(exp.shape)
    if exp.dtype == np.float32:
        same = (got.view(np.uint32) == exp.view(np.uint32)) | (np.isnan(got) & np.isnan(exp))
    else:
        same = got == exp
    nbad = int(same.size - np.count_nonzero(same))
    info = ""
    if nbad and exp.dtype == np.float32:
        info = f" max_ulp={int(ulp_diff(got, exp).max())}"
    elif nbad and exp.dtype == np.uint8:
        info = f" max_code_diff={int(np.abs(got.astype(int) - exp.astype(int)).max())}"
    return nbad, info


def check_file(path, verbose):
    tensors, meta = read_safetensors(path)
    opt_name = meta["optimizer"]
    hp = json.loads(meta["hparams"])
    p = tensors["input.param"].astype(f32)
    grads = tensors["input.grads"].astype(f32)
    opt = OPTIMS[opt_name](p, hp)
    checks = [int(k) for k in meta["check_steps"].split(",")]
    results = []
    for t in range(1, int(meta["steps"]) + 1):
        p = opt.step(p, grads[t - 1])
        if t in checks:
            results.append((f"expect.step{t}.param", p))
            for key, v in opt.state.items():
                results.append((f"expect.step{t}.state.{key}", v))
    expected = {k for k in tensors if k.startswith("expect.")}
    got = {k for k, _ in results}
    problems = []
    if expected != got:
        problems.append(f"tensor sets differ: missing {sorted(expected - got)}, extra {sorted(got - expected)}")
    lines = []
    for k, v in results:
        if k not in tensors:
            continue
        nbad, info = compare(k, v, tensors[k])
        if nbad:
            lines.append(f"    {k}: {nbad}/{tensors[k].size} differ{info}")
    clipped = getattr(opt, "clipped", None)
    flags = meta.get("flags", "").split(",")
    if clipped is not None and "clip_active" in flags and not any(clipped):
        problems.append("flag clip_active but no step clipped")
    if clipped is not None and "clip_active" not in flags and any(clipped):
        problems.append("steps %s clipped but flag clip_active missing" %
                        ",".join(str(i + 1) for i, c in enumerate(clipped) if c))
    return lines, problems


def main():
    global SQRT_MODE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golden", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))
    ap.add_argument("--sqrt", choices=["exact", "torch"], default="exact")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    SQRT_MODE = args.sqrt
    files = args.files or sorted(glob.glob(os.path.join(args.golden, "optim", "*", "*.safetensors")))
    if not files:
        sys.stderr.write("no golden files found\n")
        return 2
    n_exact = n_sqrt = n_fail = 0
    for path in files:
        lines, problems = check_file(path, args.verbose)
        rel = os.path.relpath(path)
        sqrt_only = lines and all(".param:" in ln for ln in lines) and \
            ("adamw_torch" in path or "adamw_bnb_8bit" in path) and args.sqrt == "exact"
        if problems:
            status = "FAIL"
            n_fail += 1
        elif not lines:
            status = "exact"
            n_exact += 1
        elif sqrt_only:
            status = "sqrt-only"
            n_sqrt += 1
        else:
            status = "FAIL"
            n_fail += 1
        print(f"{status:9s} {rel}")
        for ln in lines + [f"    {p}" for p in problems]:
            if status == "FAIL" or args.verbose:
                print(ln)
    print(f"check_optim_semantics: {n_exact} exact, {n_sqrt} differ only through MKL sqrt, "
          f"{n_fail} failed (sqrt={args.sqrt})")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())

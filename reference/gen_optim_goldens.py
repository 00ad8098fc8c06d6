#!/usr/bin/env python3
"""Optimizer goldens for trainbench, produced by running the REAL reference libraries on CPU.

    ~/.cache/trainbench-venv/bin/python reference/gen_optim_goldens.py --out reference/golden

Writes one safetensors file per case to <out>/optim/<optimizer>/<case>.safetensors and rewrites
<out>/MANIFEST.tsv (rows of other generators are kept). adamw_torch and adamw_bnb_8bit call
torch.sqrt, MKL's, whose kernel depends on the CPU: where it is not the committed goldens' (SSE)
kernel, their files go to <out>/optim_<kernel>/<optimizer>/ with metadata torch_sqrt (which
trainbench conform follows). --cases PATTERNS generates only the matching case names.  Optimizers (HF TrainingArguments.optim
names): adamw_torch (torch.optim.AdamW, for-loop path), adamw_torch_fused (torch.optim.AdamW with
fused=True: the CPU fused kernel; the Trainer's default optim with torch >= 2.8), adafactor (transformers Adafactor as the
HF Trainer configures it, plus flag variants), adafactor_torch (torch.optim.Adafactor, for-loop
path), adamw_bnb_8bit (bitsandbytes.optim.AdamW8bit).

Each optimizer is driven exactly as a user would drive it:
    p = torch.nn.Parameter(init.clone()); opt = Optim([p], **hparams)
    for t in 1..T: p.grad = grads[t-1].clone(); opt.step()   (snapshot opt.state[p] at check steps)

File format (reference/README.md has the full description):
  input.param                    F32   the case's shape           initial parameter
  input.grads                    F32 or BF16, (T, *shape)        gradient of step t at index t-1
  expect.step{k}.param           F32                              parameter after step k
  expect.step{k}.state.<key>     every entry of opt.state[p] under the library's own key, in the
                                 library's dtype and shape (python ints become I64 0-d tensors)
  __metadata__                   case, comment, flags, optimizer, library, generator, seed, steps,
                                 check_steps, hparams (JSON of constructor kwargs), shape, ...

Deterministic: no clocks or host names go into the .safetensors files, torch runs single-threaded,
and the safetensors writer (golden_io.py, shared by the generators) emits a canonical header.
Running twice gives identical bytes (`--check` regenerates into memory and compares with the
files on disk).

Installs nothing.  Needs torch >= 2.5, transformers and bitsandbytes >= 0.50 (exit 2 otherwise).
"""
import argparse
import fnmatch
import functools
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_io  # noqa: E402 - writer, MANIFEST, import checks shared by reference/

PROG = "gen_optim_goldens"
die = functools.partial(golden_io.die, PROG)
T_DEFAULT = 20
# log10 of the per-step gradient scale for steps 1..20; None = an all-zero gradient (step 7).
# Covers tiny (1e-8) and large (1e3) steps and sudden jumps between them (3->4, 11->12).
STEP_EXPONENTS = [0, -1, -8, 3, -4, 1, None, -6, 2, -2, -8, 3, -3, 0, -5, 2, -7, 1, -2, 0]
# per-element magnitude multiplier 10^U(-ELEM_SPREAD, +ELEM_SPREAD) on top of N(0, 1)
ELEM_SPREAD = 1.5
BF16_GRADS_MIN_NUMEL = 4095  # input.grads is stored as BF16 for cases with this many elements


def import_libraries():
    """Import the reference libraries or exit 2 with a clear message. Installs nothing."""
    # bitsandbytes logs a harmless warning about the optional 'kernels' package on import
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    torch, _, transformers, bitsandbytes = golden_io.require(PROG, [
        ("torch", "torch >= 2.5"), ("numpy", "numpy"),   # torch.Tensor.numpy() needs numpy
        ("transformers", "transformers"), ("bitsandbytes", "bitsandbytes >= 0.50")])
    golden_io.require_version(PROG, "torch", torch.__version__, "2.5", "torch.optim.Adafactor")
    golden_io.require_version(PROG, "bitsandbytes", bitsandbytes.__version__, "0.50",
                              "CPU optimizer kernels")
    if not hasattr(torch.optim, "Adafactor"):
        die("this torch has no torch.optim.Adafactor")
    return torch, transformers, bitsandbytes


# ----------------------------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------------------------
def case(name, shape, seed, hp, flags, comment, std=0.02, steps=T_DEFAULT, check=None,
         grad_mask=None, grads=None):
    """grads: None = the STEP_EXPONENTS schedule; or one of GRAD_KINDS (edge-value gradients)."""
    if check is None:
        check = sorted({1, 2, 5, 10, steps}) if steps > 2 else list(range(1, steps + 1))
    assert grads is None or grads in GRAD_KINDS, grads
    return dict(name=name, shape=tuple(shape), seed=seed, hp=hp, flags=flags, comment=comment,
                std=std, steps=steps, check=[k for k in check if k <= steps], grad_mask=grad_mask,
                grads=grads)


# Edge-value gradient kinds (the case's `grads`), each with the description written to its
# metadata `grad_schedule`. All draw N(0,1) * 10^U(-ELEM_SPREAD, ELEM_SPREAD) per element first.
GRAD_KINDS = {
    "subnormal": "every step: N(0,1) * 10^U(-1.5,1.5) * 1e-41 (fp32 subnormals, some flushed to 0)",
    "huge": "every step: N(0,1) * 10^U(-1.5,1.5) * 1e20 (g*g overflows fp32 to inf)",
    "nonfinite": "the STEP_EXPONENTS schedule, then step 2: flat[0]=+inf, flat[1]=-inf, flat[2]=NaN; "
                 "step 4: flat[5]=NaN",
    "all_zero": "every step all-zero",
}
EDGE_STEPS = 6  # edge cases: 6 steps checked at 1, 2, 3, 4, 6 (keeps replay and size small)
EDGE_CHECK = [1, 2, 3, 4, 6]


def sched_flags(steps):
    """Flags implied by the gradient schedule for the first `steps` steps."""
    ex = STEP_EXPONENTS[:steps]
    f = ["bias_correction_early"]
    if any(e is not None and e <= -6 for e in ex):
        f.append("tiny_grads")
    if any(e is not None and e >= 3 for e in ex):
        f.append("large_grads")
    if any(e is None for e in ex):
        f.append("zero_grad_step")
    return f


BIG_N = 100003           # ~100k, not a multiple of 256 (390 full blocks + 163), nor of 8/16/32
BIG_MATRIX = (12, 8339)  # ~100k for the Adafactor dialects: 100068 elements (390 blocks + 228);
                         # rows of 8339 make torch's cascade sum use more than one level
BIG_STEPS = 1            # one step keeps the folder small: this case checks the size-dependent
                         # paths (tails, many blocks, long reductions); dynamics are in small cases


def common_cases(hp_on, hp_off, wd_flag_on="wd_on", wd_flag_off="wd_off", extra_vec_flags=None,
                 big_matrix=False):
    """The shapes every optimizer gets. hp_on/hp_off: hyperparameters with/without weight decay."""
    xf = extra_vec_flags or (lambda n: [])
    cs = [
        case("matrix_64x96_wd", (64, 96), 101, hp_on, ["matrix_rect", wd_flag_on],
             "64x96 matrix (R != C), weight decay on", std=0.02),
        case("matrix_64x96_nowd", (64, 96), 101, hp_off, ["matrix_rect", wd_flag_off],
             "64x96 matrix (R != C), weight decay off; same data as matrix_64x96_wd", std=0.02),
    ]
    vecs = [(1, True, 1.0), (255, False, 0.5), (257, True, 0.02), (4095, False, 1.0),
            (4096, True, 0.1), (4097, False, 0.02)]
    for i, (n, wd, std) in enumerate(vecs):
        cs.append(case(f"vec_{n}", (n,), 200 + i, hp_on if wd else hp_off,
                       ["vector", wd_flag_on if wd else wd_flag_off] + xf(n),
                       f"vector of {n} elements, weight decay {'on' if wd else 'off'}", std=std))
    if big_matrix:
        r, c_ = BIG_MATRIX
        cs.append(case(f"matrix_{r}x{c_}", BIG_MATRIX, 300, hp_on,
                       ["matrix_rect", "large_tensor", "bf16_grads", "long_reduction", wd_flag_on],
                       f"{r}x{c_} matrix ({r * c_} elements, ~100k): long row reductions, "
                       f"weight decay on, {BIG_STEPS} step(s)", std=0.02, steps=BIG_STEPS,
                       check=sorted({1, BIG_STEPS})))
    else:
        cs.append(case(f"vec_{BIG_N}", (BIG_N,), 300, hp_on,
                       ["vector", "large_tensor", "bf16_grads", wd_flag_on] + xf(BIG_N),
                       f"vector of {BIG_N} elements (~100k, not a multiple of 256/32/16/8), "
                       f"weight decay on, {BIG_STEPS} step(s)", std=0.02, steps=BIG_STEPS,
                       check=sorted({1, BIG_STEPS})))
    return cs


def edge(name, shape, seed, hp, flags, comment, std=0.5, grads=None, grad_mask=None):
    """A short edge case: EDGE_STEPS steps of a small tensor (flags gain "edge")."""
    return case(name, shape, seed, hp, flags + ["edge"], comment, std=std, steps=EDGE_STEPS,
                check=EDGE_CHECK, grads=grads, grad_mask=grad_mask)


def edge_shapes_and_grads(hp, seed0, extra_flags=()):
    """Shapes (0-d, (N,1), (1,N), 3-D) and gradient values (zero, subnormal, huge, inf/NaN) that
    every optimizer gets, on hyper-parameters hp."""
    xf = list(extra_flags)
    return [
        edge("scalar_0d", (), seed0, hp, ["scalar_0d"] + xf, "0-d parameter (a single value, shape ())"),
        edge("col_37x1", (37, 1), seed0 + 1, hp, ["matrix_col"] + xf, "(N, 1) matrix: one column"),
        edge("row_1x37", (1, 37), seed0 + 2, hp, ["matrix_row"] + xf, "(1, N) matrix: one row"),
        edge("three_d_2x3x5", (2, 3, 5), seed0 + 3, hp, ["three_d"] + xf, "3-D tensor (2, 3, 5)"),
        edge("grads_all_zero_vec_33", (33,), seed0 + 4, hp, ["zero_grads"] + xf,
             "every gradient is 0 from step 1 (state stays 0; only decay moves p)", grads="all_zero"),
        edge("grads_subnormal_vec_33", (33,), seed0 + 5, hp, ["subnormal_grads"] + xf,
             "fp32 subnormal gradients (~1e-41): g*g underflows to 0", grads="subnormal"),
        edge("grads_huge_vec_33", (33,), seed0 + 6, hp, ["huge_grads"] + xf,
             "gradients ~1e20: g*g overflows to inf in the second moment", grads="huge"),
        edge("grads_nonfinite_vec_33", (33,), seed0 + 7, hp, ["nonfinite_grads"] + xf,
             "+inf, -inf and NaN gradients at step 2 and NaN at step 4: NaN/inf propagate into "
             "state and params as the library lets them", grads="nonfinite"),
    ]


def adamw_torch_cases():
    base = dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01, amsgrad=False,
                maximize=False, foreach=False, capturable=False, differentiable=False, fused=False)
    # foreach=True: _multi_tensor_adam, whose _foreach_ ops run the single-tensor kernels per
    # tensor on CPU: the for-loop path's bits (measured equal, amsgrad and maximize included)
    fe = dict(base, foreach=True)
    foreach = [
        case("foreach_vec_4097", (4097,), 620, fe, ["vector", "wd_on", "foreach"],
             "foreach=True (the multi-tensor path): the for-loop path's bits on CPU", std=0.1),
        case("foreach_amsgrad_maximize_matrix_20x28", (20, 28), 621, dict(fe, amsgrad=True, maximize=True),
             ["matrix_rect", "wd_on", "foreach", "amsgrad", "maximize"], "foreach=True with amsgrad and maximize"),
    ]
    return (common_cases(base, dict(base, weight_decay=0.0)) + adam_family_edge_cases(base, 500)
            + adamw_flag_cases(base, 600) + foreach)


def adamw_flag_cases(base, seed0):
    """torch AdamW's amsgrad and maximize (both torch AdamWs): max_exp_avg_sq = maximum(max, v)
    over the 20-step schedule, whose 1e3 -> 1e-4 drops leave the maximum above v; NaN gradients
    (torch.maximum's NaN) in the fused kernel's 16-lane body and in the loop after it; sizes whose
    last numel % 16 leave the fused body (15: all of it; 4097: one element); maximize with and
    without amsgrad, weight decay on and off."""
    ams = dict(base, amsgrad=True)
    mx = dict(base, maximize=True)
    both = dict(base, amsgrad=True, maximize=True)
    cs = [
        case("amsgrad_matrix_64x96_wd", (64, 96), seed0, ams, ["matrix_rect", "wd_on", "amsgrad"],
             "amsgrad=True, 64x96 matrix, weight decay on: the denominator takes the running maximum of v"),
        case("amsgrad_vec_4097", (4097,), seed0 + 1, dict(ams, weight_decay=0.0),
             ["vector", "wd_off", "amsgrad"], "amsgrad=True, 4097 elements (one after the fused 16-lane body)",
             std=0.1),
        case("amsgrad_vec_15", (15,), seed0 + 2, ams, ["vector", "wd_on", "amsgrad"],
             "amsgrad=True, 15 elements (the fused kernel's whole tensor is its loop after the body)", std=0.5),
        case("maximize_vec_257", (257,), seed0 + 3, mx, ["vector", "wd_on", "maximize"],
             "maximize=True: the step follows -grad"),
        case("maximize_amsgrad_matrix_20x28", (20, 28), seed0 + 4, dict(both, weight_decay=0.0),
             ["matrix_rect", "wd_off", "amsgrad", "maximize"], "amsgrad=True and maximize=True together"),
        edge("amsgrad_grads_nonfinite_vec_33", (33,), seed0 + 5, ams, ["nonfinite_grads", "amsgrad"],
             "amsgrad with +inf, -inf, NaN gradients (steps 2, 4) in the fused body (elements 0..31) "
             "and its last element", grads="nonfinite"),
        edge("amsgrad_grads_nonfinite_vec_15", (15,), seed0 + 6, ams, ["nonfinite_grads", "amsgrad"],
             "amsgrad with NaN gradients in the fused kernel's loop after its 16-lane body (all 15 "
             "elements)", grads="nonfinite"),
        edge("maximize_grads_nonfinite_vec_33", (33,), seed0 + 7, mx, ["nonfinite_grads", "maximize"],
             "maximize with +inf, -inf and NaN gradients", grads="nonfinite"),
    ]
    return cs


def adamw_torch_fused_cases():
    """HF Trainer's optim="adamw_torch_fused" (TrainingArguments' default with torch >= 2.8):
    torch.optim.AdamW(fused=True) on CPU, the same cases as adamw_torch (their sizes leave the
    kernel's scalar tail, numel % 16, from 0 to 15 elements)."""
    base = dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01, amsgrad=False,
                maximize=False, foreach=False, capturable=False, differentiable=False, fused=True)
    return (common_cases(base, dict(base, weight_decay=0.0)) + adam_family_edge_cases(base, 1500)
            + adamw_flag_cases(base, 1600))


def adam_family_edge_cases(base, seed0):
    """AdamW-family hyper-parameter edges (adamw_torch and adamw_bnb_8bit share them): beta1 on
    both sides of torch lerp_'s 0.5 weight switch, beta2 near and far from 1, eps 0/tiny/large,
    lr 0/tiny/large, weight decay with lr*wd near, at and above 1."""
    b2 = base["betas"][1]
    v = (257,)
    cs = [edge(f"beta1_{b1}_vec_257", v, seed0 + i, dict(base, betas=[b1, b2]),
               ["beta1_edge", "lerp_weight_large" if 1 - b1 >= 0.5 else "lerp_weight_small"],
               f"beta1={b1}: lerp_ weight 1-beta1={1 - b1:g} "
               f"({'>= 0.5: the end - (end-start)*(1-w) branch' if 1 - b1 >= 0.5 else '< 0.5: the start + w*(end-start) branch'})")
          for i, b1 in enumerate([0.0, 0.3, 0.5, 0.7])]
    cs += [
        edge("beta2_0_vec_257", v, seed0 + 10, dict(base, betas=[0.9, 0.0]), ["beta2_edge"],
             "beta2=0: v = g*g each step, bias correction 2 is 1"),
        edge("beta2_0.5_vec_257", v, seed0 + 11, dict(base, betas=[0.9, 0.5]), ["beta2_edge"],
             "beta2=0.5: far from 1"),
        edge("beta2_0.999999_vec_257", v, seed0 + 12, dict(base, betas=[0.9, 0.999999]), ["beta2_edge"],
             "beta2=0.999999: 1-beta2 rounds visibly in fp32, 1-beta2^t tiny"),
        edge("eps_0_vec_257", v, seed0 + 13, dict(base, eps=0.0), ["eps_edge", "zero_denominator"],
             "eps=0 with elements 0..7 never getting a gradient: 0/0 = NaN in those elements",
             grad_mask=[(0, 8)]),
        edge("eps_1e-30_vec_257", v, seed0 + 14, dict(base, eps=1e-30), ["eps_edge"], "eps=1e-30 (tiny)"),
        edge("eps_1_vec_257", v, seed0 + 15, dict(base, eps=1.0), ["eps_edge"], "eps=1 (dominates sqrt(v_hat))"),
        edge("lr_0_vec_257", v, seed0 + 16, dict(base, lr=0.0), ["lr_edge"],
             "lr=0: params stay put (decay factor 1), state still updates"),
        edge("lr_1e-10_vec_257", v, seed0 + 17, dict(base, lr=1e-10), ["lr_edge"], "lr=1e-10 (tiny)"),
        edge("lr_10_vec_257", v, seed0 + 18, dict(base, lr=10.0), ["lr_edge"], "lr=10 (large)"),
        edge("wd_lr_x_wd_0.999_vec_257", v, seed0 + 19, dict(base, lr=0.1, weight_decay=9.99),
             ["wd_edge", "wd_on"], "lr*wd = 0.999: decay factor 1 - lr*wd = 0.001 (rounded in fp32)"),
        edge("wd_lr_x_wd_1_vec_257", v, seed0 + 20, dict(base, lr=0.5, weight_decay=2.0),
             ["wd_edge", "wd_on"], "lr*wd = 1: decay factor 0, params reset to 0 before each update"),
        edge("wd_lr_x_wd_1.5_vec_257", v, seed0 + 21, dict(base, lr=0.5, weight_decay=3.0),
             ["wd_edge", "wd_on"], "lr*wd = 1.5: negative decay factor -0.5 (the library allows it)"),
    ]
    return cs + edge_shapes_and_grads(base, seed0 + 30)


def adafactor_hf_cases():
    # HF Trainer (optim="adafactor"): Adafactor(params, lr=learning_rate, scale_parameter=False,
    # relative_step=False); everything else at the transformers defaults.
    base = dict(lr=1e-3, eps=[1e-30, 1e-3], clip_threshold=1.0, decay_rate=-0.8, beta1=None,
                weight_decay=0.0, scale_parameter=False, relative_step=False, warmup_init=False)
    cs = common_cases(dict(base, weight_decay=0.01), base,
                      extra_vec_flags=lambda n: ["unfactored"], big_matrix=True)
    for c in cs:
        if c["name"].startswith("matrix"):
            c["flags"] += ["factored"]
        c["flags"].append("hf_trainer_config")
    # (clip_active is added to every Adafactor case below: check_optim_semantics.py verifies it)
    cs += [
        case("three_d_3x16x24", (3, 16, 24), 400, base, ["three_d", "factored", "hf_trainer_config"],
             "3-D tensor: factored over the last two dims, leading dim batched"),
        case("scale_parameter_20x28", (20, 28), 401, dict(base, scale_parameter=True),
             ["matrix_rect", "factored", "scale_parameter"],
             "scale_parameter=True with a fixed lr: lr_t = max(eps2, RMS(p)) * lr"),
        case("relative_step_20x28", (20, 28), 402, dict(base, lr=None, scale_parameter=True,
                                                        relative_step=True),
             ["matrix_rect", "factored", "relative_step", "scale_parameter", "eps2_floor"],
             "HF defaults: lr=None, relative_step=True, scale_parameter=True, warmup_init=False; "
             "tiny params so max(eps2, RMS(p)) starts at eps2", std=1e-5),
        case("relative_step_warmup_20x28", (20, 28), 403,
             dict(base, lr=None, scale_parameter=True, relative_step=True, warmup_init=True),
             ["matrix_rect", "factored", "relative_step", "warmup_init", "scale_parameter"],
             "relative_step=True with warmup_init=True: rel step = min(1e-6*t, 1/sqrt(t))"),
        case("beta1_20x28", (20, 28), 404, dict(base, beta1=0.9),
             ["matrix_rect", "factored", "beta1"],
             "first moment on (beta1=0.9) with the Trainer configuration"),
        case("all_flags_vec_257", (257,), 405,
             dict(base, lr=None, scale_parameter=True, relative_step=True, warmup_init=True,
                  beta1=0.9, weight_decay=0.01),
             ["vector", "unfactored", "relative_step", "warmup_init", "scale_parameter", "beta1",
              "wd_on"],
             "unfactored path with every flag on: relative_step+warmup_init, scale_parameter, "
             "beta1=0.9, weight_decay=0.01", std=0.5),
        case("clip_threshold_0.5_20x28", (20, 28), 406, dict(base, clip_threshold=0.5),
             ["matrix_rect", "factored", "clip_active"],
             "clip_threshold=0.5: the update is clipped whenever RMS(U) > 0.5"),
    ]
    cs = add_clip_flag(cs)
    v, m = (257,), (20, 28)
    cs += [edge(f"beta1_{b1}_20x28", m, 600 + i, dict(base, beta1=b1), ["beta1_edge", "factored"],
                f"beta1={b1}: exp_avg = beta1*exp_avg + (1-beta1)*U (mul_ then add_, no lerp)")
           for i, b1 in enumerate([0.0, 0.3, 0.5])]
    cs += [
        edge("decay_rate_0_20x28", m, 610, dict(base, decay_rate=0.0), ["decay_rate_edge", "factored"],
             "decay_rate=0: beta2t = 1 - t^0 = 0, the statistics are the last step's g*g + eps1"),
        edge("decay_rate_-0.5_vec_257", v, 611, dict(base, decay_rate=-0.5), ["decay_rate_edge", "unfactored"],
             "decay_rate=-0.5"),
        edge("decay_rate_-1_20x28", m, 612, dict(base, decay_rate=-1.0), ["decay_rate_edge", "factored"],
             "decay_rate=-1: beta2t = 1 - 1/t"),
        edge("eps1_1e-3_20x28", m, 613, dict(base, eps=[1e-3, 1e-3]), ["eps_edge", "factored"],
             "eps1=1e-3 (large): dominates g*g for small gradients"),
        edge("eps1_0_vec_257", v, 614, dict(base, eps=[0.0, 1e-3]), ["eps_edge", "unfactored", "zero_denominator"],
             "eps1=0 with elements 0..7 never getting a gradient: rsqrt(0) = inf, 0*inf = NaN",
             grad_mask=[(0, 8)]),
        edge("eps2_0_scale_parameter_vec_257", v, 615, dict(base, eps=[1e-30, 0.0], scale_parameter=True),
             ["eps_edge", "unfactored", "scale_parameter"], "eps2=0 with scale_parameter: lr_t = RMS(p)*lr"),
        edge("clip_threshold_1e-3_20x28", m, 616, dict(base, clip_threshold=1e-3), ["clip_edge", "factored"],
             "clip_threshold=1e-3: every update clipped"),
        edge("clip_threshold_1e3_20x28", m, 617, dict(base, clip_threshold=1e3), ["clip_edge", "factored"],
             "clip_threshold=1e3: no update clipped"),
        edge("lr_0_vec_257", v, 618, dict(base, lr=0.0), ["lr_edge", "unfactored"], "lr=0: params stay put"),
        edge("lr_10_20x28", m, 619, dict(base, lr=10.0), ["lr_edge", "factored"], "lr=10 (large)"),
        edge("wd_lr_x_wd_1_vec_257", v, 620, dict(base, lr=0.5, weight_decay=2.0), ["wd_edge", "wd_on"],
             "lr*wd = 1: p - wd*lr*p = 0 before the update"),
        edge("wd_lr_x_wd_0.999_20x28", m, 621, dict(base, lr=0.1, weight_decay=9.99), ["wd_edge", "wd_on", "factored"],
             "lr*wd = 0.999"),
    ]
    # values transformers accepts (its __init__ checks nothing but the lr/relative_step pair):
    # the same formulas outside the usual ranges
    cs += [
        edge("wide_lr_negative_vec_257", v, 660, dict(base, lr=-1e-3), ["wide_range", "unfactored"],
             "lr=-1e-3: the step goes up the gradient"),
        edge("wide_clip_threshold_0_20x28", m, 661, dict(base, clip_threshold=0.0), ["wide_range", "factored"],
             "clip_threshold=0: RMS(U)/0 = inf, U/inf = 0 (NaN where RMS(U) is 0)"),
        edge("wide_clip_threshold_negative_vec_257", v, 662, dict(base, clip_threshold=-1.0),
             ["wide_range", "unfactored"], "clip_threshold=-1: RMS(U)/-1 < 0 clamps to 1, no clipping"),
        edge("wide_decay_rate_0.3_20x28", m, 663, dict(base, decay_rate=0.3), ["wide_range", "factored"],
             "decay_rate=0.3: beta2t = 1 - t^0.3 goes negative from t = 2"),
        edge("wide_beta1_1.5_vec_257", v, 664, dict(base, beta1=1.5), ["wide_range", "unfactored", "beta1"],
             "beta1=1.5: exp_avg*1.5 + U*(-0.5)"),
        edge("wide_beta1_negative_20x28", m, 665, dict(base, beta1=-0.5), ["wide_range", "factored", "beta1"],
             "beta1=-0.5"),
        edge("wide_eps1_negative_20x28", m, 666, dict(base, eps=[-1e-3, 1e-3]), ["wide_range", "factored"],
             "eps1=-1e-3: g^2 + eps1 < 0 for small g (rsqrt of a negative mean: NaN)"),
        edge("wide_weight_decay_negative_vec_257", v, 667, dict(base, weight_decay=-0.1),
             ["wide_range", "unfactored", "wd_on"], "weight_decay=-0.1: p grows by lr*0.1 per step"),
        edge("wide_eps2_negative_scale_parameter_20x28", m, 668,
             dict(base, eps=[1e-30, -1e-3], scale_parameter=True), ["wide_range", "factored", "scale_parameter"],
             "eps2=-1e-3 with scale_parameter: max(eps2, RMS) is RMS even for a zero RMS"),
    ]
    return flag_clipped_edges("adafactor", cs + edge_shapes_and_grads(base, 630))


def add_clip_flag(cs):
    # With this gradient schedule RMS(U) exceeds the clipping threshold on some step of every
    # Adafactor case (step 1 for factored tensors, the tiny->large jumps for all);
    # reference/check_optim_semantics.py recomputes it and fails if a flag is wrong.
    for c in cs:
        if "clip_active" not in c["flags"]:
            c["flags"].append("clip_active")
    return cs


# Edge cases in which RMS(U) exceeds the clipping threshold on some step (flag clip_active);
# reference/check_optim_semantics.py recomputes the clipping and fails if this list is wrong.
CLIPPED_EDGE_CASES = {
    "adafactor": {"beta1_0.0_20x28", "beta1_0.3_20x28", "beta1_0.5_20x28", "clip_threshold_1e-3_20x28",
                  "col_37x1", "decay_rate_-0.5_vec_257", "decay_rate_-1_20x28", "decay_rate_0_20x28",
                  "eps1_1e-3_20x28", "eps2_0_scale_parameter_vec_257", "lr_0_vec_257", "lr_10_20x28",
                  "row_1x37", "scalar_0d", "three_d_2x3x5", "wd_lr_x_wd_0.999_20x28", "wd_lr_x_wd_1_vec_257",
                  "wide_beta1_1.5_vec_257", "wide_beta1_negative_20x28", "wide_clip_threshold_0_20x28",
                  "wide_decay_rate_0.3_20x28", "wide_eps1_negative_20x28", "wide_eps2_negative_scale_parameter_20x28",
                  "wide_lr_negative_vec_257", "wide_weight_decay_negative_vec_257"},
    "adafactor_torch": {"beta2_decay_-0.5_vec_257", "beta2_decay_-1_20x28", "beta2_decay_0_20x28", "col_37x1",
                        "eps1_1e-3_20x28", "eps2_0_vec_257", "lr_0_vec_257", "lr_10_20x28", "row_1x37",
                        "scalar_0d", "three_d_2x3x5", "wd_lr_x_wd_0.999_20x28", "wd_lr_x_wd_1_vec_257"},
}


def flag_clipped_edges(optim, cs):
    for c in cs:
        if "edge" in c["flags"] and c["name"] in CLIPPED_EDGE_CASES[optim]:
            c["flags"].append("clip_active")
    return cs


def adafactor_torch_cases():
    base = dict(lr=1e-2, beta2_decay=-0.8, eps=[None, 1e-3], d=1.0, weight_decay=0.0,
                foreach=False, maximize=False)
    cs = common_cases(dict(base, weight_decay=0.01), base,
                      extra_vec_flags=lambda n: ["unfactored"], big_matrix=True)
    for c in cs:
        if c["name"].startswith("matrix"):
            c["flags"] += ["factored"]
    cs += [
        case("three_d_3x16x24", (3, 16, 24), 400, base, ["three_d", "factored"],
             "3-D tensor: row_var (3,16,1), col_var (3,1,24), batched over the leading dim"),
        case("rho_relative_20x28", (20, 28), 410, dict(base, lr=0.5),
             ["matrix_rect", "factored", "relative_step"],
             "lr=0.5 so rho_t = min(lr, 1/sqrt(t)) switches to 1/sqrt(t) from t=5"),
        case("tiny_params_vec_257", (257,), 411, base, ["vector", "unfactored", "eps2_floor"],
             "params ~1e-5 so alpha = max(eps2, RMS(p)) * rho starts at the eps2 floor", std=1e-5),
        case("d_2_eps_20x28", (20, 28), 412, dict(base, d=2.0, eps=[1e-20, 1e-2], weight_decay=0.05),
             ["matrix_rect", "factored", "wd_on", "explicit_eps1"],
             "explicit eps1=1e-20, eps2=1e-2, clipping threshold d=2, weight_decay=0.05"),
    ]
    cs = add_clip_flag(cs)
    v, m = (257,), (20, 28)
    cs += [
        edge("beta2_decay_0_20x28", m, 700, dict(base, beta2_decay=0.0), ["decay_rate_edge", "factored"],
             "beta2_decay=0: lerp weight t^0 = 1, the statistics are the last step's"),
        edge("beta2_decay_-0.5_vec_257", v, 701, dict(base, beta2_decay=-0.5), ["decay_rate_edge", "unfactored"],
             "beta2_decay=-0.5: lerp weights 1, 0.707, 0.577, 0.5 (switches lerp branch), 0.447, ..."),
        edge("beta2_decay_-1_20x28", m, 702, dict(base, beta2_decay=-1.0), ["decay_rate_edge", "factored"],
             "beta2_decay=-1: lerp weight 1/t (0.5 at t=2: the other lerp branch)"),
        edge("eps1_0_vec_257", v, 703, dict(base, eps=[0.0, 1e-3]), ["eps_edge", "unfactored", "zero_denominator"],
             "eps1=0 with elements 0..7 never getting a gradient: rsqrt(max(0, 0)) = inf, 0*inf = NaN",
             grad_mask=[(0, 8)]),
        edge("eps1_1e-3_20x28", m, 704, dict(base, eps=[1e-3, 1e-3]), ["eps_edge", "factored"],
             "eps1=1e-3 (large): the max(V, eps1^2) floor and max(mean(row_var), eps1) are active"),
        edge("eps2_0_vec_257", v, 705, dict(base, eps=[None, 0.0]), ["eps_edge", "unfactored"],
             "eps2=0: alpha = RMS(p)*rho"),
        edge("d_1e3_20x28", m, 706, dict(base, d=1e3), ["clip_edge", "factored"], "d=1000: no update clipped"),
        edge("lr_0_vec_257", v, 707, dict(base, lr=0.0), ["lr_edge", "unfactored"],
             "lr=0: rho = 0, params stay put, state still updates"),
        edge("lr_10_20x28", m, 708, dict(base, lr=10.0), ["lr_edge", "factored"],
             "lr=10: rho = min(10, 1/sqrt(t)) = 1/sqrt(t)"),
        edge("wd_lr_x_wd_1_vec_257", v, 709, dict(base, lr=0.5, weight_decay=2.0), ["wd_edge", "wd_on"],
             "lr*wd = 1: decay factor 0"),
        edge("wd_lr_x_wd_0.999_20x28", m, 710, dict(base, lr=0.1, weight_decay=9.99), ["wd_edge", "wd_on", "factored"],
             "lr*wd = 0.999"),
    ]
    mx = dict(base, maximize=True)
    cs += add_clip_flag([
        case("maximize_matrix_20x28_wd", m, 760, dict(mx, weight_decay=0.01), ["matrix_rect", "factored", "wd_on",
             "maximize"], "maximize=True (grad = -grad: the update's sign), factored, weight decay on"),
        case("maximize_vec_257", v, 761, mx, ["vector", "unfactored", "maximize"],
             "maximize=True, unfactored (the variance of (-g)^2)"),
        case("maximize_three_d_3x16x24", (3, 16, 24), 762, mx, ["three_d", "factored", "maximize"],
             "maximize=True, 3-D tensor"),
    ])
    cs += [
        edge("maximize_grads_nonfinite_vec_33", (33,), 763, mx, ["nonfinite_grads", "unfactored", "maximize"],
             "maximize with +inf, -inf and NaN gradients", grads="nonfinite"),
    ]
    # foreach=True: _multi_tensor_adafactor, whose last update rounds twice (updates * alpha, then
    # param + updates) where the for-loop path's add_(alpha=) is one fma
    fe = dict(base, foreach=True)
    cs += add_clip_flag([
        case("foreach_matrix_20x28_wd", m, 770, dict(fe, weight_decay=0.01), ["matrix_rect", "factored", "wd_on",
             "foreach"], "foreach=True, factored, weight decay on"),
        case("foreach_vec_257", v, 771, fe, ["vector", "unfactored", "foreach"], "foreach=True, unfactored"),
        case("foreach_maximize_three_d_3x16x24", (3, 16, 24), 772, dict(fe, maximize=True),
             ["three_d", "factored", "foreach", "maximize"], "foreach=True and maximize=True, 3-D tensor"),
        case(f"foreach_vec_{BIG_N}", (BIG_N,), 773, dict(fe, weight_decay=0.01),
             ["vector", "unfactored", "large_tensor", "bf16_grads", "foreach", "wd_on"],
             f"foreach=True, {BIG_N} elements (the thread team's update pass), {BIG_STEPS} step(s)",
             steps=BIG_STEPS, check=sorted({1, BIG_STEPS})),
    ])
    cs += [
        edge("foreach_grads_nonfinite_vec_33", (33,), 774, fe, ["nonfinite_grads", "unfactored", "foreach"],
             "foreach=True with +inf, -inf and NaN gradients", grads="nonfinite"),
    ]
    return flag_clipped_edges("adafactor_torch", cs + edge_shapes_and_grads(base, 730))


def adamw_bnb_8bit_cases():
    base = dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01, min_8bit_size=4096,
                is_paged=False)

    def vflags(n):
        f = ["bnb_min_8bit_size"] if n in (4095, 4096) else []
        f.append("bnb_state_fp32" if n < 4096 else "bnb_state_8bit")
        if n >= 4096 and n % 256:
            f.append("block_boundary")
        return f
    cs = common_cases(base, dict(base, weight_decay=0.0), extra_vec_flags=vflags)
    for c in cs:
        if c["name"].startswith("matrix"):
            c["flags"] += ["bnb_state_8bit"]
    mask = [(256, 512)]  # block 1 of a 4096-vector never gets a gradient: absmax 0 every step
    cs.append(case("zero_block_vec_4096", (4096,), 420, base,
                   ["vector", "bnb_state_8bit", "bnb_zero_block", "wd_on"],
                   "elements 256..511 (block 1) always get zero gradients: that block's absmax "
                   "stays 0 and its codes stay 0", std=0.1, grad_mask=mask))
    # edges on the 8-bit path at small sizes: min_8bit_size=1 quantizes every tensor
    q = dict(base, min_8bit_size=1)
    edges = adam_family_edge_cases(q, 800)
    for c in edges:
        c["flags"].append("bnb_state_8bit")
        if c["grads"] in ("nonfinite", "huge") or "zero_denominator" in c["flags"]:
            # NaN (or inf/inf) reaches the quantizer: libbitsandbytes_cpu converts the normalized
            # NaN to a lookup-table index with a float->int conversion that C++ leaves undefined
            c["flags"].append("nan_undefined_conversion")
    cs += edges
    cs += [edge(f"block_edge_vec_{n}", (n,), 850 + i, q, ["bnb_state_8bit", "block_boundary"],
                f"{n} elements on the 8-bit path (min_8bit_size=1): block edge")
           for i, n in enumerate([255, 256, 511, 513])]
    cs.append(case("block_edge_vec_4351", (4351,), 860, base, ["vector", "bnb_state_8bit", "block_boundary", "wd_on"],
                   "4351 elements (16 full blocks + 255) with the default min_8bit_size", std=0.1,
                   steps=EDGE_STEPS, check=EDGE_CHECK))
    # the 32-bit path (< min_8bit_size) on the gradient edges
    for c in edge_shapes_and_grads(base, 870):
        if c["grads"]:
            c["name"] = "fp32_state_" + c["name"]
            c["flags"].append("bnb_state_fp32")
            cs.append(c)
    return cs


OPTIMIZERS = ["adamw_torch", "adamw_torch_fused", "adafactor", "adafactor_torch", "adamw_bnb_8bit"]
SQRT_OPTIMIZERS = ["adamw_torch", "adamw_bnb_8bit"]  # their step calls torch.sqrt (MKL's)
CASES = {
    "adamw_torch": adamw_torch_cases,
    "adamw_torch_fused": adamw_torch_fused_cases,
    "adafactor": adafactor_hf_cases,
    "adafactor_torch": adafactor_torch_cases,
    "adamw_bnb_8bit": adamw_bnb_8bit_cases,
}


# ----------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------
def make_inputs(torch, c):
    """Initial params and gradients (T, *shape) from the case's seed (torch.Generator, CPU)."""
    g = torch.Generator(device="cpu")
    g.manual_seed(c["seed"])
    shape = c["shape"]
    init = (torch.randn(shape, generator=g, dtype=torch.float32) * c["std"]).to(torch.float32)
    grads = []
    kind = c["grads"]
    for t in range(c["steps"]):
        e = STEP_EXPONENTS[t]
        z = torch.randn(shape, generator=g, dtype=torch.float32)
        u = torch.rand(shape, generator=g, dtype=torch.float32)
        if kind in ("subnormal", "huge"):
            e = -41 if kind == "subnormal" else 20
        if e is None or kind == "all_zero":
            gt = torch.zeros(shape, dtype=torch.float32)
        else:
            mag = torch.pow(10.0, (u * 2.0 - 1.0) * ELEM_SPREAD)
            if kind == "subnormal":  # 10**-41 is not an fp32: scale in float64, round once
                gt = (z.double() * mag.double() * 1e-41).to(torch.float32)
            else:
                gt = (z * mag * (10.0 ** e)).to(torch.float32)
        if kind == "nonfinite":
            flat = gt.view(-1)
            if t == 1:
                for i, v in ((0, float("inf")), (1, float("-inf")), (2, float("nan"))):
                    if i < flat.numel():
                        flat[i] = v
            if t == 3 and flat.numel() > 5:
                flat[5] = float("nan")
        if c["grad_mask"]:
            flat = gt.view(-1)
            for lo, hi in c["grad_mask"]:
                flat[lo:hi] = 0.0
        grads.append(gt)
    grads = torch.stack(grads)
    n = 1
    for s in shape:
        n *= s
    if n >= BF16_GRADS_MIN_NUMEL:
        stored = grads.to(torch.bfloat16)   # round to nearest even
        grads = stored.to(torch.float32)    # the optimizer sees exactly the widened BF16 values
    else:
        stored = grads
    return init, grads, stored


def make_optimizer(torch, transformers, bnb, name, params, hp):
    if name in ("adamw_torch", "adamw_torch_fused"):  # fused=True in the latter's hparams
        kw = dict(hp)
        kw["betas"] = tuple(kw["betas"])
        return torch.optim.AdamW(params, **kw)
    if name == "adafactor":
        kw = dict(hp)
        kw["eps"] = tuple(kw["eps"])
        return transformers.optimization.Adafactor(params, **kw)
    if name == "adafactor_torch":
        kw = dict(hp)
        kw["eps"] = tuple(kw["eps"])
        return torch.optim.Adafactor(params, **kw)
    if name == "adamw_bnb_8bit":
        kw = dict(hp)
        kw["betas"] = tuple(kw["betas"])
        return bnb.optim.AdamW8bit(params, **kw)
    raise ValueError(name)


def probe_bnb_path(torch, bnb):
    """Run one 8-bit step under a profiler hook and report which bitsandbytes code ran."""
    import bitsandbytes.backends.cpu.ops as cpu_ops
    calls = []
    real_lib = cpu_ops.lib

    class LibSpy:
        def __getattr__(self, attr):
            calls.append("lib." + attr)
            return getattr(real_lib, attr)
    py_calls = set()

    def prof(frame, event, arg):
        if event == "call" and "bitsandbytes" in frame.f_code.co_filename:
            py_calls.add(frame.f_code.co_name)
    p = torch.nn.Parameter(torch.ones(4096))
    opt = bnb.optim.AdamW8bit([p])
    p.grad = torch.full((4096,), 0.5)
    cpu_ops.lib = LibSpy()
    sys.setprofile(prof)
    try:
        opt.step()
    finally:
        sys.setprofile(None)
        cpu_ops.lib = real_lib
    if "_optimizer_update_8bit_blockwise_cpu" not in py_calls:
        die("bitsandbytes did not run its CPU 8-bit kernel (_optimizer_update_8bit_blockwise_cpu); "
            f"python functions seen: {sorted(py_calls)}", code=1)
    libs = sorted(set(calls))
    if "lib.cquantize_blockwise_cpu_fp32" not in libs:
        die(f"bitsandbytes did not quantize through libbitsandbytes_cpu (calls: {libs})", code=1)
    return ("cpu:lut65536 (backends/cpu/ops.py _optimizer_update_8bit_blockwise_cpu in torch "
            "ops; libbitsandbytes_cpu " + "+".join(c[4:] for c in libs) + ")")


def run_case(torch, transformers, bnb, opt_name, c, common_meta):
    init, grads, stored_grads = make_inputs(torch, c)
    p = torch.nn.Parameter(init.clone())
    opt = make_optimizer(torch, transformers, bnb, opt_name, [p], c["hp"])
    tensors = {"input.param": init, "input.grads": stored_grads}
    for t in range(1, c["steps"] + 1):
        p.grad = grads[t - 1].clone()
        opt.step()
        if t in c["check"]:
            tensors[f"expect.step{t}.param"] = p.detach().clone()
            for key, v in golden_io.snapshot_state(torch, opt.state[p]).items():
                tensors[f"expect.step{t}.state.{key}"] = v
    meta = dict(common_meta[opt_name])
    implied = sched_flags(c["steps"]) if c["grads"] in (None, "nonfinite") else []
    flags = c["flags"] + [f for f in implied if f not in c["flags"]]
    schedule = ("step t: N(0,1) * 10^U(-%g,%g) per element * 10^e[t], e=%s (null = all-zero step)"
                % (ELEM_SPREAD, ELEM_SPREAD,
                   json.dumps(STEP_EXPONENTS[:c["steps"]], separators=(",", ":"))))
    if c["grads"] in ("subnormal", "huge", "all_zero"):
        schedule = GRAD_KINDS[c["grads"]]
    elif c["grads"] == "nonfinite":
        schedule += "; then " + GRAD_KINDS["nonfinite"].split(", then ")[1]
    meta.update({
        "case": c["name"],
        "comment": c["comment"],
        "flags": ",".join(flags),
        "optimizer": opt_name,
        "seed": str(c["seed"]),
        "steps": str(c["steps"]),
        "check_steps": ",".join(str(k) for k in c["check"]),
        "hparams": json.dumps(c["hp"], separators=(",", ":"), sort_keys=True),
        "shape": "x".join(str(s) for s in c["shape"]),
        "param_init": f"torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * {c['std']!r}",
        "grad_schedule": schedule,
        "grads_dtype": "BF16 (rounded to nearest even from F32; the optimizer saw the widened values)"
                       if stored_grads.dtype == torch.bfloat16 else "F32",
    })
    if c["grad_mask"]:
        meta["grad_mask"] = "zero gradient at flat indices " + ",".join(f"[{a},{b})" for a, b in c["grad_mask"])
    return tensors, meta


def torch_sqrt_kernel(torch):
    """Which of MKL's sqrt kernels this torch takes (reference/OPTIM_SEMANTICS.md 0.3), told by
    the share of [1, 4) it rounds otherwise than the correctly rounded sqrt (a double sqrt rounded
    to float is correctly rounded): about 12% with the SSE kernel of the goldens' AMD machine,
    0.59% with the AVX-512 kernel of Intel AVX-512 CPUs. Written into a golden's metadata
    (torch_sqrt), which `trainbench conform` follows; another share is named as it is."""
    x = torch.arange(0x3F800000, 0x40800000, 61, dtype=torch.int32).view(torch.float32)
    off = (torch.sqrt(x) != torch.sqrt(x.double()).float()).double().mean().item()
    if 0.08 < off < 0.2:
        return "mkl-sse"
    if 0.002 < off < 0.02:
        return "mkl-avx512"
    return f"unknown ({100 * off:.2f}% of [1, 4) off the correctly rounded sqrt)"


def library_string(torch, transformers, bnb, opt_name):
    tv = f"torch {torch.__version__}"
    if opt_name == "adafactor":
        return f"transformers {transformers.__version__} / {tv}"
    if opt_name == "adamw_bnb_8bit":
        return f"bitsandbytes {bnb.__version__} / {tv}"
    return tv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reference/golden", help="golden root (default reference/golden)")
    ap.add_argument("--only", default="", help="comma list of optimizer names to generate")
    ap.add_argument("--cases", default="",
                    help="comma list of case-name patterns (fnmatch, e.g. 'amsgrad_*,maximize_*'): only "
                         "those cases are generated; the other files and MANIFEST rows stay as they are")
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and compare with the files on disk (exit 1 on difference)")
    args = ap.parse_args()

    torch, transformers, bnb = import_libraries()
    torch.set_num_threads(1)   # reductions and elementwise chunking then do not depend on cores
    torch.manual_seed(0)

    only = [s for s in args.only.split(",") if s]
    for s in only:
        if s not in OPTIMIZERS:
            die(f"--only: unknown optimizer '{s}' (allowed: {', '.join(OPTIMIZERS)})")
    selected = only or OPTIMIZERS

    patterns = [x for x in args.cases.split(",") if x]

    def wanted(name):
        return not patterns or any(fnmatch.fnmatchcase(name, pat) for pat in patterns)

    goldens = golden_io.Goldens(PROG, __file__, os.path.join(args.out, "MANIFEST.tsv"),
                                check=args.check)
    # torch.sqrt is MKL's, whose kernel depends on the CPU (reference/OPTIM_SEMANTICS.md 0.3): the
    # optimizers that call it get the kernel in their metadata (torch_sqrt, which `trainbench
    # conform` follows) where it is not the one of the committed optim/ goldens (mkl-sse), and
    # their files then go to <out>/optim_<kernel>/ (optim_mkl_avx512/ on Intel AVX-512 CPUs)
    sqrt_kernel = torch_sqrt_kernel(torch)
    if not sqrt_kernel.startswith("mkl-"):
        die(f"torch.sqrt is an unknown MKL kernel here: {sqrt_kernel}")
    sqrt_folder = "optim" if sqrt_kernel == "mkl-sse" else "optim_" + sqrt_kernel.replace("-", "_")
    quantizer_path = probe_bnb_path(torch, bnb)
    common_meta = {}
    for name in OPTIMIZERS:
        m = {"library": library_string(torch, transformers, bnb, name), "generator": goldens.generator,
             "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
             "torch_num_threads": "1", "format": "trainbench-optim-golden-1"}
        if name == "adamw_bnb_8bit":
            m["quantizer_path"] = quantizer_path
            m["blocksize"] = "256"
        if name in SQRT_OPTIMIZERS and sqrt_kernel != "mkl-sse":
            m["torch_sqrt"] = sqrt_kernel
        common_meta[name] = m
    if sqrt_folder != "optim" and set(selected) & set(SQRT_OPTIMIZERS):
        print(f"torch.sqrt is MKL's {sqrt_kernel} kernel here: "
              f"{', '.join(o for o in selected if o in SQRT_OPTIMIZERS)} go to {args.out}/{sqrt_folder}/")

    for opt_name in selected:
        for c in CASES[opt_name]():
            if not wanted(c["name"]):
                continue
            tensors, meta = run_case(torch, transformers, bnb, opt_name, c, common_meta)
            folder = sqrt_folder if opt_name in SQRT_OPTIMIZERS else "optim"
            path = os.path.join(args.out, folder, opt_name, c["name"] + ".safetensors")
            blob = golden_io.safetensors_bytes(torch, tensors, meta)
            goldens.put(path, blob, meta["library"], meta["seed"])
    print(f"total {goldens.total} bytes in {'checked' if args.check else 'written'} files")
    if args.check:
        goldens.finish_check()
        return
    # manifest: this run's rows replace those of the same files; of this generator's other rows,
    # those of the optimizers generated now are dropped (cases that no longer exist)
    optim_dir = golden_io.repo_path(os.path.join(args.out, "optim")) + "/"
    n = goldens.write_manifest(stale=lambda f: not patterns and f.startswith(optim_dir) and
                               f.split("/")[-2] in selected)
    print(f"wrote {goldens.manifest_path} ({n} rows)")


if __name__ == "__main__":
    main()

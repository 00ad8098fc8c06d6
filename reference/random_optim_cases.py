#!/usr/bin/env python3
"""Random optimizer cases produced by the REAL libraries, for a conformance campaign beyond the
committed goldens: new seeds, shapes, hyper-parameters and gradient kinds.

    ~/.cache/trainbench-venv/bin/python reference/random_optim_cases.py --out build/conform-random \
        [--seed N] [--cases 20] [--big 2] [--only adafactor,adamw_torch]
    build/trainbench conform --optim adafactor --goldens build/conform-random/optim

(`make conform-random` runs both for every optimizer.) Each case is a golden file in the
format of reference/gen_optim_goldens.py (same inputs, same driving loop, same metadata; its
`hparams` are the constructor keywords the library was given), written to
<out>/optim/<optimizer>/r<seed>_<k>.safetensors, so `trainbench conform` and `trainbench check`
read it as they read a committed golden. Never writes into reference/golden.

What is drawn, per case (random.Random(seed), so a seed reproduces a campaign exactly):
  shape     1-D (sizes at the vector and block edges: 1, 7, 8, 255..257, 4095..4097, 70001),
            2-D up to 90 x 300, 3-D and 4-D (leading batch dims); --big cases per optimizer at
            the sizes where the step runs on the thread team (> 65536 elements) and where
            adafactor_torch streams instead of storing its update (> 2^21)
  steps     1..20 (at most 6 with an edge-value gradient kind, 3 for the big cases)
  gradients the committed goldens' schedule (1e-8 .. 1e3 jumps, an all-zero step 7), or one of
            subnormal / huge / nonfinite / all_zero (gen_optim_goldens.GRAD_KINDS)
  init std  0.02, 0.5 or 1e-4
  hparams   within what each library accepts (its constructor's checks), over the options
            trainbench implements: AdamW lr, betas, eps, weight_decay, amsgrad, maximize (each
            true in 30% of the cases); transformers Adafactor lr
            or lr=None with relative_step (warmup_init), eps pair, clip_threshold, decay_rate,
            beta1 (None or a float), weight_decay, scale_parameter (in 20% of the cases one of
            them outside the usual range: transformers checks none); torch Adafactor lr,
            beta2_decay, eps pair (eps1 None or a float), d, weight_decay, maximize, foreach (30%
            each); AdamW8bit lr, betas,
            eps, weight_decay, min_8bit_size (1, 100 or 4096: the 32-bit and 8-bit paths).
The library runs single-threaded (torch.set_num_threads(1)), as for the goldens.

Installs nothing; needs the goldens venv (torch >= 2.5, transformers, bitsandbytes >= 0.50).
Exit 0 when every case was written, 2 on bad arguments or missing libraries.
"""
import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_optim_goldens as gen  # noqa: E402 - case(), run_case(), the libraries' setup
import golden_io  # noqa: E402

PROG = "random_optim_cases"


def die(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(2)


def loguniform(r, lo, hi):
    return 10 ** r.uniform(math.log10(lo), math.log10(hi))


VECTOR_SIZES = [1, 2, 7, 8, 15, 16, 17, 255, 256, 257, 1000, 4095, 4096, 4097, 5000, 8192, 70001]
# > 65536 elements: the thread team (OPTIM_PAR_MIN); > 2^21: adafactor_torch's streaming path
BIG_SHAPES = [(300, 700), (64, 1030), (2, 250, 300), (70001,), (1200, 1800), (3, 600, 1200), (2100000,)]


def draw_shape(r):
    k = r.random()
    if k < 0.25:
        return (r.choice(VECTOR_SIZES),)
    if k < 0.75:
        return (r.randint(1, 90), r.randint(1, 300))
    if k < 0.9:
        return (r.randint(1, 4), r.randint(1, 40), r.randint(1, 70))
    return (r.randint(1, 3), r.randint(1, 3), r.randint(1, 20), r.randint(1, 30))


def draw_hparams(r, opt):
    """Constructor keywords within the library's accepted ranges (its __init__ checks)."""
    wd = r.choice([0.0, loguniform(r, 1e-4, 1.0)])
    if opt in ("adamw_torch", "adamw_torch_fused"):
        return dict(lr=loguniform(r, 1e-5, 0.3),
                    betas=[r.choice([0.0, 0.5, 0.9, r.uniform(0.0, 0.999)]),
                           r.choice([0.9, 0.99, 0.999, r.uniform(0.5, 0.99999)])],
                    eps=loguniform(r, 1e-12, 1e-2), weight_decay=wd, amsgrad=r.random() < 0.3,
                    maximize=r.random() < 0.3, foreach=False, capturable=False, differentiable=False,
                    fused=opt == "adamw_torch_fused")
    if opt == "adafactor":
        rel = r.random() < 0.3  # relative_step needs lr=None (transformers refuses both)
        hp = dict(lr=None if rel else loguniform(r, 1e-5, 0.1),
                  eps=[loguniform(r, 1e-35, 1e-10), loguniform(r, 1e-6, 1e-1)],
                  clip_threshold=r.choice([1.0, 0.5, loguniform(r, 0.01, 10.0)]),
                  decay_rate=r.choice([-0.8, r.uniform(-1.0, -0.1)]),
                  beta1=r.choice([None, None, r.uniform(0.0, 0.99)]), weight_decay=wd,
                  scale_parameter=rel or r.random() < 0.4, relative_step=rel,
                  warmup_init=rel and r.random() < 0.5)
        if r.random() < 0.2:  # transformers checks no range: one value outside the usual ones
            k = r.choice(["lr", "eps1", "eps2", "clip_threshold", "decay_rate", "beta1", "weight_decay"])
            if k == "lr" and not rel:
                hp["lr"] = -loguniform(r, 1e-5, 0.1)
            elif k in ("eps1", "eps2"):
                hp["eps"][k == "eps2"] = -loguniform(r, 1e-6, 1e-2)
            elif k == "clip_threshold":
                hp["clip_threshold"] = r.choice([0.0, -1.0])
            elif k == "decay_rate":
                hp["decay_rate"] = r.uniform(0.05, 1.0)
            elif k == "beta1":
                hp["beta1"] = r.choice([1.0, r.uniform(1.0, 2.0), r.uniform(-1.0, 0.0)])
            elif k == "weight_decay":
                hp["weight_decay"] = -loguniform(r, 1e-4, 1.0)
        return hp
    if opt == "adafactor_torch":
        return dict(lr=r.choice([1e-2, loguniform(r, 1e-5, 1.0)]),
                    beta2_decay=r.choice([-0.8, r.uniform(-1.0, -0.05)]),
                    eps=[r.choice([None, loguniform(r, 1e-30, 1e-3)]), loguniform(r, 1e-6, 1e-1)],
                    d=r.choice([1.0, r.uniform(1.0, 5.0)]), weight_decay=wd, foreach=r.random() < 0.3,
                    maximize=r.random() < 0.3)
    if opt == "adamw_bnb_8bit":
        return dict(lr=loguniform(r, 1e-5, 0.1),
                    betas=[r.choice([0.9, r.uniform(0.0, 0.99)]), r.choice([0.999, r.uniform(0.9, 0.9999)])],
                    eps=loguniform(r, 1e-10, 1e-3), weight_decay=wd,
                    min_8bit_size=r.choice([4096, 4096, 1, 100]), is_paged=False)
    raise ValueError(opt)


def draw_case(r, seed, opt, name, big):
    shape = r.choice(BIG_SHAPES) if big else draw_shape(r)
    steps = r.choice([1, 2, 3, 6, 12, 20])
    kind = r.choice([None] * 6 + list(gen.GRAD_KINDS))
    if kind is not None:
        steps = min(steps, gen.EDGE_STEPS)
    if big:
        steps = min(steps, 3)
    flags = ["random"]
    if opt == "adamw_bnb_8bit" and kind in ("nonfinite", "huge"):
        flags.append("nan_undefined_conversion")  # as gen_optim_goldens flags its 8-bit edges
    return gen.case(name, shape, r.randint(1, 10**6), draw_hparams(r, opt), flags,
                    f"random case of {PROG} (--seed {seed})", std=r.choice([0.02, 0.5, 1e-4]),
                    steps=steps, grads=kind)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (OUT/optim/<optimizer>/...)")
    ap.add_argument("--seed", type=int, default=None, help="campaign seed (default: a fresh one, printed)")
    ap.add_argument("--cases", type=int, default=20, help="small cases per optimizer (default 20)")
    ap.add_argument("--big", type=int, default=2, help="large cases per optimizer (default 2)")
    ap.add_argument("--only", default="", help="comma list of optimizer names (default: all)")
    a = ap.parse_args()
    if not 0 <= a.cases <= 10000 or not 0 <= a.big <= 100:
        die(f"--cases must be in 0..10000 and --big in 0..100 (got {a.cases}, {a.big})")
    golden_root = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))
    out = os.path.realpath(a.out)
    if out == golden_root or out.startswith(golden_root + os.sep):
        die(f"--out {a.out} is inside reference/golden: random cases never go there")
    only = [s for s in a.only.split(",") if s]
    for s in only:
        if s not in gen.OPTIMIZERS:
            die(f"--only: unknown optimizer '{s}' (allowed: {', '.join(gen.OPTIMIZERS)})")
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"{PROG}: seed {seed} (rerun the same cases with --seed {seed})", flush=True)

    torch, transformers, bnb = gen.import_libraries()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    common = {}
    quantizer_path = gen.probe_bnb_path(torch, bnb)
    sqrt_kernel = gen.torch_sqrt_kernel(torch)
    print(f"{PROG}: torch.sqrt is MKL's {sqrt_kernel} kernel here", flush=True)
    for name in gen.OPTIMIZERS:
        m = {"library": gen.library_string(torch, transformers, bnb, name), "generator": PROG,
             "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_num_threads": "1",
             "format": "trainbench-optim-golden-1", "campaign_seed": str(seed), "torch_sqrt": sqrt_kernel}
        if name == "adamw_bnb_8bit":
            m["quantizer_path"] = quantizer_path
            m["blocksize"] = "256"
        common[name] = m

    written = 0
    for opt in only or gen.OPTIMIZERS:
        r = random.Random(f"{seed}/{opt}")  # per optimizer: --only gives the same cases
        folder = os.path.join(out, "optim", opt)
        os.makedirs(folder, exist_ok=True)
        for k in range(a.cases + a.big):
            c = draw_case(r, seed, opt, f"r{seed}_{k}", big=k >= a.cases)
            tensors, meta = gen.run_case(torch, transformers, bnb, opt, c, common)
            path = os.path.join(folder, c["name"] + ".safetensors")
            with open(path + ".tmp", "wb") as f:
                f.write(golden_io.safetensors_bytes(torch, tensors, meta))
            os.replace(path + ".tmp", path)
            written += 1
            print(f"  {opt}/{c['name']}: shape {'x'.join(map(str, c['shape']))}, {c['steps']} steps, "
                  f"grads {c['grads'] or 'schedule'}, hparams {meta['hparams']}", flush=True)
    print(f"{PROG}: {written} cases in {out}/optim")


if __name__ == "__main__":
    main()

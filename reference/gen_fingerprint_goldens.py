#!/usr/bin/env python3
"""Optimizer-dialect trajectories for `trainbench fingerprint`, from the REAL libraries on CPU.

    ~/.cache/trainbench-venv/bin/python reference/gen_fingerprint_goldens.py --out reference/golden

The train_<mode> goldens of reference/gen_model_goldens.py are 20 AdamW (adamw_torch) steps in
each precision mode. A fingerprint also has to tell optimizer dialects apart, so this script
trains the SAME model (tiny preset, HF init after torch.manual_seed(1234)) on the SAME 20
batches (data_seed 78) with the other optimizers of SPEC.md section 3 and writes
<out>/model/train_<mode>_<optimizer>.safetensors in the same format as the train_* goldens
(reference/README.md "Model goldens"): param.<name>, input.*, expect.loss, expect.scale,
expect.skipped, expect.grad_norm, expect.final.param.<name>, and metadata case, optimizer (the
registry name), hparams (constructor kwargs as the library names them, readable by
optim_config_from_json), mode, autocast, step_protocol, ... It appends or replaces only its own
rows of <out>/MANIFEST.tsv (same columns as the other generators).

Everything shared with the AdamW goldens is imported from gen_model_goldens.py (model, batches,
autocast, metadata), gen_optim_goldens.py (library imports, optimizer construction, the
bitsandbytes code-path probe) and golden_io.py (safetensors writer, MANIFEST), not copied, so the inputs are identical by
construction; main() also checks that param.* and input.* equal those of train_fp32.

Cases (learning rates: each dialect's usual setting -- the HF Trainer's for Adafactor, torch's
default for torch.optim.Adafactor, the AdamW goldens' for 8-bit AdamW, so that the dialect is
the only difference; the generator prints the pairwise max |dloss| of all references, which
reference/FINGERPRINT.md quotes: every pair differs by >= 8.4e-4 except fp32 adamw_torch vs
fp32 adamw_bnb_8bit, 1.67e-4 at most -- 8-bit state changes 20 steps that little):
  train_fp32_adafactor        transformers Adafactor as HF Trainer builds it for optim="adafactor"
                              (lr=1e-3, scale_parameter=False, relative_step=False, wd 0)
  train_bf16_adafactor        the same under torch.autocast("cpu", dtype=torch.bfloat16)
  train_fp32_adafactor_torch  torch.optim.Adafactor at its defaults (lr=1e-2: alpha = RMS(p) *
                              1e-2, relative to each tensor's scale), foreach=False
  train_fp32_adamw_bnb_8bit   bitsandbytes AdamW8bit (lr=1e-3, wd 0.01 like the AdamW goldens),
                              min_8bit_size=1024: at the library default 4096 every tensor of the
                              tiny preset (<= 2048 elements) keeps fp32 state and the run is
                              AdamW up to rounding; 1024 puts the 15 matrices of >= 1024 elements
                              (embeddings, attention, FFN, pre_classifier) on 8-bit blockwise state

Deterministic like the other generators (one thread, canonical writer). `--check` regenerates in
memory and compares with the files; `--only` selects cases. Installs nothing; exit 2 when
torch/transformers/bitsandbytes/numpy are missing.
"""
import argparse
import functools
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_model_goldens as G  # noqa: E402 - model, batches, metadata
import gen_optim_goldens as O  # noqa: E402 - library imports, optimizer construction, bnb probe
import golden_io  # noqa: E402 - writer, MANIFEST

PROG = "gen_fingerprint_goldens"
die = functools.partial(golden_io.die, PROG)

ADAFACTOR_HF = dict(lr=1e-3, eps=[1e-30, 1e-3], clip_threshold=1.0, decay_rate=-0.8, beta1=None,
                    weight_decay=0.0, scale_parameter=False, relative_step=False, warmup_init=False)
ADAFACTOR_TORCH = dict(lr=1e-2, beta2_decay=-0.8, eps=[None, 1e-3], d=1.0, weight_decay=0.0,
                       foreach=False, maximize=False)
ADAMW_BNB_8BIT = dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01, min_8bit_size=1024,
                      is_paged=False)

CASES = [
    dict(name="train_fp32_adafactor", mode="fp32", optim="adafactor", hp=ADAFACTOR_HF,
         cls="transformers.optimization.Adafactor",
         comment="20 steps, fp32, transformers Adafactor as HF Trainer configures it "
                 "(lr=1e-3, scale_parameter=False, relative_step=False)"),
    dict(name="train_bf16_adafactor", mode="bf16", optim="adafactor", hp=ADAFACTOR_HF,
         cls="transformers.optimization.Adafactor",
         comment="20 steps under bf16 CPU autocast, transformers Adafactor as HF Trainer "
                 "configures it (lr=1e-3, scale_parameter=False, relative_step=False)"),
    dict(name="train_fp32_adafactor_torch", mode="fp32", optim="adafactor_torch", hp=ADAFACTOR_TORCH,
         cls="torch.optim.Adafactor",
         comment="20 steps, fp32, torch.optim.Adafactor at its defaults (lr=1e-2), for-loop path"),
    dict(name="train_fp32_adamw_bnb_8bit", mode="fp32", optim="adamw_bnb_8bit", hp=ADAMW_BNB_8BIT,
         cls="bitsandbytes.optim.AdamW8bit",
         comment="20 steps, fp32, bitsandbytes AdamW8bit (lr=1e-3, wd=0.01) with min_8bit_size=1024 "
                 "so that the tiny preset's matrices use 8-bit blockwise state"),
    # what most fp16 runs use: GradScaler("cpu") at its defaults. On the tiny preset its loss
    # scale never overflows and its trajectory stays within 2.2e-5 of fp16-noscale's: the two
    # cannot be told apart, and fingerprint must say so instead of naming fp16-noscale
    dict(name="train_fp16_scaler_default", mode="fp16", optim="adamw_torch", hp=G.ADAMW,
         cls="torch.optim.AdamW", scaler=dict(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                                              growth_interval=2000, enabled=True),
         comment="20 AdamW steps under fp16 CPU autocast with torch.amp.GradScaler('cpu') at its "
                 "defaults (init_scale 2^16, growth_interval 2000)"),
]

STEP_PROTOCOL = ("for s in 1..20: opt.zero_grad(set_to_none=True); with autocast (bf16 only): out = "
                 "model(input_ids[s-1], attention_mask[s-1], labels=labels[s-1]); "
                 "out.loss.backward(); opt.step()")


def run_case(torch, transformers, bnb, c, base_meta):
    mode = c["mode"]
    if (mode == "fp16") != ("scaler" in c) or mode == "fp16-noscale":
        die(f"{c['name']}: mode {mode}: fp32/bf16 without a scaler, or fp16 with one", 1)
    model = G.build_model(torch, transformers, 2)
    names = G.param_names(model)
    params = [p for _, p in model.named_parameters()]
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids, masks, labels = G.train_batches(torch)
    opt = O.make_optimizer(torch, transformers, bnb, c["optim"], params, c["hp"])
    scaler = torch.amp.GradScaler("cpu", **c["scaler"]) if "scaler" in c else None

    loss_v, grad_norm_v, scale_v, skipped_v = [], [], [], []
    for s in range(G.TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        out = G.forward(torch, model, mode, ids[s], masks[s], labels[s])
        if out.loss.dtype != torch.float32:
            die(f"{c['name']}: loss dtype {out.loss.dtype}", 1)
        loss_v.append(float(out.loss.detach()))
        scale = scaler.get_scale() if scaler is not None else 1.0
        scale_v.append(scale)
        if scaler is not None:
            scaler.scale(out.loss).backward()
            scaler.unscale_(opt)
        else:
            out.loss.backward()
        grad_norm_v.append(math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params)))
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
            skipped_v.append(1 if scaler.get_scale() < scale else 0)
        else:
            opt.step()
            skipped_v.append(0)
        if not all(bool(torch.isfinite(p).all()) for p in params):
            die(f"{c['name']}: step {s + 1}: non-finite parameters", 1)

    bnb_8bit = []
    if c["optim"] == "adamw_bnb_8bit":   # which tensors really got 8-bit state (uint8 codes)
        bnb_8bit = [n for n, p in model.named_parameters()
                    if opt.state[p]["state1"].dtype == torch.uint8]

    S = G.TRAIN_STEPS
    tensors = {f"param.{n}": init[n] for n in names}
    for n, p in model.named_parameters():
        tensors[f"expect.final.param.{n}"] = p.detach().clone()
    tensors["input.input_ids"] = ids
    tensors["input.attention_mask"] = masks
    tensors["input.labels"] = labels
    tensors["expect.loss"] = torch.tensor(loss_v, dtype=torch.float32)
    tensors["expect.scale"] = torch.tensor(scale_v, dtype=torch.float32)
    tensors["expect.skipped"] = torch.tensor(skipped_v, dtype=torch.uint8)
    tensors["expect.grad_norm"] = torch.tensor(grad_norm_v, dtype=torch.float64).float()

    flags = ["padding", "no_padding_batch", c["optim"], "trajectory", "fingerprint_reference"]
    if mode != "fp32":
        flags.append("autocast")
    if scaler is not None:
        flags.append("grad_scaler")
    if bnb_8bit:
        flags.append("bnb_state_8bit")
    meta = dict(base_meta)
    meta.update(G.model_meta(model, 2))
    meta.update({
        "case": c["name"], "comment": c["comment"], "flags": ",".join(flags),
        "seed": str(G.MODEL_SEED), "data_seed": str(G.TRAIN_DATA_SEED),
        "mode": mode, "autocast": G.autocast_string(mode),
        "steps": str(S), "nopad_step": str(G.TRAIN_NOPAD_STEP),
        "optimizer": c["optim"], "optimizer_class": c["cls"],
        "hparams": json.dumps(c["hp"], separators=(",", ":"), sort_keys=True),
        "param_groups": "one group with every parameter (weight decay, where set, on all)",
        "grad_scaler": json.dumps(c["scaler"], separators=(",", ":"), sort_keys=True) if scaler else "none",
        "step_protocol": G.STEP_PROTOCOL_SCALER if scaler else STEP_PROTOCOL,
        "skipped_steps": ",".join(str(i + 1) for i, k in enumerate(skipped_v) if k) or "none",
        "final_scale": repr(scaler.get_scale()) if scaler else "none",
        "lengths": ";".join(",".join(str(int(x)) for x in masks[s].sum(1)) for s in range(S)),
        "inputs_from": "identical to train_fp32.safetensors (param.*, input.*): same model seed, "
                       "same batches (gen_model_goldens.train_batches)",
    })
    if bnb_8bit:
        meta["bnb_8bit_tensors"] = json.dumps(bnb_8bit, separators=(",", ":"))
        meta["quantizer_path"] = O.probe_bnb_path(torch, bnb)
    return tensors, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reference/golden", help="golden root (default reference/golden)")
    ap.add_argument("--only", default="", help="comma list of case names")
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and compare with the files on disk (exit 1 on difference)")
    args = ap.parse_args()

    torch, transformers, bnb = O.import_libraries()
    torch.set_num_threads(1)   # as the train_* goldens: reduction order independent of cores
    transformers.logging.set_verbosity_error()

    cases = CASES
    only = [s for s in args.only.split(",") if s]
    if only:
        known = {c["name"] for c in CASES}
        for s in only:
            if s not in known:
                die(f"--only: unknown case '{s}' (allowed: {', '.join(sorted(known))})")
        cases = [c for c in CASES if c["name"] in only]

    goldens = golden_io.Goldens(PROG, __file__, os.path.join(args.out, "MANIFEST.tsv"),
                                check=args.check)
    base_meta = dict(G.lib_meta(torch, transformers), generator=goldens.generator)
    base_meta["library"] += f" / bitsandbytes {bnb.__version__}"
    base_meta["imports"] = ", ".join(
        f"{golden_io.script_name(m.__file__)} sha256:{golden_io.sha16(m.__file__)}" for m in (G, O))

    out_root = args.out
    # the AdamW reference of the same inputs: the new files must hold exactly its inputs
    from safetensors.torch import load_file
    adamw = {m: load_file(os.path.join(out_root, "model", f"train_{m}.safetensors"))
             for m in G.MODES}
    trajectories = {f"train_{m}": adamw[m]["expect.loss"].double() for m in G.MODES}

    for c in cases:
        tensors, meta = run_case(torch, transformers, bnb, c, base_meta)
        for k, v in adamw["fp32"].items():
            if (k.startswith("param.") or k.startswith("input.")) and not torch.equal(v, tensors[k]):
                die(f"{c['name']}: {k} differs from train_fp32.safetensors", 1)
        trajectories[c["name"]] = tensors["expect.loss"].double()
        lv = tensors["expect.loss"]
        print(f"  {c['name']}: loss {float(lv[0]):.6f} -> {float(lv[-1]):.6f}")
        path = os.path.join(out_root, "model", c["name"] + ".safetensors")
        blob = golden_io.safetensors_bytes(torch, tensors, meta)
        goldens.put(path, blob, meta["library"], meta["seed"])

    # pairwise distances (max |loss difference| over the 20 steps) between all references:
    # the separation that FINGERPRINT.md quotes for the tolerance
    names = sorted(trajectories)
    print("pairwise max |dloss| (and the first step where |dloss| > 1e-4):")
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            d = (trajectories[a] - trajectories[b]).abs()
            over = (d > 1e-4).nonzero()
            first = int(over[0]) + 1 if len(over) else "-"
            print(f"  {a:28s} {b:28s} {float(d.max()):.3e}  step {first}")

    if args.check:
        goldens.finish_check()
        return
    n = goldens.write_manifest()   # replaces only the rows of the files written now
    print(f"wrote {goldens.manifest_path} ({n} rows)")


if __name__ == "__main__":
    main()

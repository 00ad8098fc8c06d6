#!/usr/bin/env python3
"""PyTorch runs for the `trainbench fingerprint` demonstration (reference/FINGERPRINT.md).

    ~/.cache/trainbench-venv/bin/python reference/fingerprint_demo.py --out reference/golden/fingerprint

Each run trains the tiny preset from the goldens' initial weights on the goldens' 20 batches
(both rebuilt by gen_model_goldens.py: HF init after torch.manual_seed(1234), data_seed 78 --
checked equal to param.* / input.* of train_fp32.safetensors) and writes its per-step losses as
a fingerprint candidate <out>/<name>.json:
    {"losses": [20 numbers], "label": "<claimed mode>[/<optimizer>]", "run": "...", ...}
Every run here is recomputed, not copied from a golden, and uses torch.set_num_threads(2)
(the goldens use 1), so reductions may take another order.

  threads2_<mode>                  torch.optim.AdamW (for-loop), fp32 / bf16 autocast / fp16 autocast
                                   + GradScaler (golden settings) / fp16 autocast without scaler;
                                   threads2_bf16 is demonstration (a)
  threads2_fp32_foreach|_fused     AdamW foreach=True / fused=True: same dialect, other kernels
  threads2_<mode>_<optimizer>      the dialects of gen_fingerprint_goldens.py, 2 threads
  mkldnn_off_<mode>[_<optimizer>]  the same AdamW / dialect runs with torch.backends.mkldnn disabled
                                   (another CPU GEMM path and accumulation order)
  accelerate_fp16_cpu              (b) HF Accelerate, Accelerator(mixed_precision="fp16", cpu=True),
                                   accelerator.autocast() + accelerator.backward(); labelled fp16
                                   (skipped with a note when accelerate is not installed)
  plain_fp32_labelled_fp16         (c) a plain fp32 AdamW run that claims fp16
  bnb_default_labelled_8bit        bitsandbytes AdamW8bit at its defaults (min_8bit_size 4096),
                                   labelled fp32/adamw_bnb_8bit

The same-mode runs measure how far a legitimate re-run drifts from its golden (the fingerprint
tolerance must exceed it); the script prints, per run, max |loss - golden of the same mode and
optimizer|. Installs nothing; exit 2 when the libraries are missing. It also appends/replaces
its own rows of <out>/../MANIFEST.tsv.
"""
import argparse
import functools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_model_goldens as G  # noqa: E402
import gen_optim_goldens as O  # noqa: E402
import gen_fingerprint_goldens as F  # noqa: E402
import golden_io  # noqa: E402 - MANIFEST rows

die = functools.partial(golden_io.die, "fingerprint_demo")

THREADS = 2
ADAMW = dict(G.ADAMW)
DIALECT_HP = {"adafactor": F.ADAFACTOR_HF, "adafactor_torch": F.ADAFACTOR_TORCH,
              "adamw_bnb_8bit": F.ADAMW_BNB_8BIT}


def train(torch, transformers, bnb, mode, optim, hp, ctx=None, backward=None, scaler=None, prepare=None):
    """20 steps from the golden init on the golden batches; returns the per-step losses."""
    model = G.build_model(torch, transformers, 2)
    params = list(model.parameters())
    opt = O.make_optimizer(torch, transformers, bnb, optim, params, hp)
    if prepare:
        model, opt = prepare(model, opt)
    ids, masks, labels = G.train_batches(torch)
    losses = []
    for s in range(G.TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        with (ctx() if ctx else G.autocast_ctx(torch, mode)):
            out = model(input_ids=ids[s], attention_mask=masks[s], labels=labels[s])
        losses.append(float(out.loss.detach()))
        if scaler is not None:
            scaler.scale(out.loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        else:
            (backward or (lambda x: x.backward()))(out.loss)
            opt.step()
    return losses, model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reference/golden/fingerprint",
                    help="folder for the candidate JSON files (default reference/golden/fingerprint)")
    args = ap.parse_args()
    torch, transformers, bnb = O.import_libraries()
    torch.set_num_threads(THREADS)
    transformers.logging.set_verbosity_error()
    from safetensors.torch import load_file

    golden_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "model")
    gold = {}
    for f in sorted(os.listdir(golden_dir)):
        if f.startswith("train_") and f.endswith(".safetensors"):
            t = load_file(os.path.join(golden_dir, f))
            gold[f[:-len(".safetensors")]] = t
    # the inputs rebuilt here are the goldens' own
    ids, masks, labels = G.train_batches(torch)
    ref = gold["train_fp32"]
    model = G.build_model(torch, transformers, 2)
    for n, p in model.named_parameters():
        if not torch.equal(p.detach(), ref["param." + n]):
            die(f"rebuilt initial weights differ from train_fp32.safetensors at {n}", 1)
    for k, v in (("input.input_ids", ids), ("input.attention_mask", masks), ("input.labels", labels)):
        if not torch.equal(v, ref[k]):
            die(f"rebuilt {k} differs from train_fp32.safetensors", 1)

    lib = f"transformers {transformers.__version__} / torch {torch.__version__} / bitsandbytes {bnb.__version__}"
    runs = []   # (name, label, losses, same-mode golden or None, note)

    def add(name, label, losses, golden, note):
        runs.append((name, label, losses, golden, note))

    # AdamW in every precision mode, 2 threads
    for mode in G.MODES:
        hp = dict(ADAMW, betas=tuple(ADAMW["betas"]))
        scaler = torch.amp.GradScaler("cpu", **G.SCALER) if mode == "fp16" else None
        losses, _ = train(torch, transformers, bnb, mode, "adamw_torch", hp, scaler=scaler)
        add(f"threads2_{mode}", mode, losses, f"train_{mode}",
            f"torch.optim.AdamW (for-loop), {G.autocast_string(mode)}"
            + (", GradScaler('cpu', init_scale=2^24, growth_interval=4)" if scaler else "")
            + f", {THREADS} threads")
    for variant in ("foreach", "fused"):
        hp = dict(ADAMW, betas=tuple(ADAMW["betas"]), foreach=variant == "foreach", fused=variant == "fused")
        losses, _ = train(torch, transformers, bnb, "fp32", "adamw_torch", hp)
        add(f"threads2_fp32_{variant}", "fp32/adamw_torch", losses, "train_fp32",
            f"torch.optim.AdamW({variant}=True), fp32, {THREADS} threads (same dialect, another kernel)")
    for c in F.CASES:
        losses, _ = train(torch, transformers, bnb, c["mode"], c["optim"], c["hp"])
        add(f"threads2_{c['mode']}_{c['optim']}", f"{c['mode']}/{c['optim']}", losses, c["name"],
            f"{c['cls']} {json.dumps(c['hp'], sort_keys=True)}, {G.autocast_string(c['mode'])}, {THREADS} threads")

    # the same runs with oneDNN (mkldnn) disabled: torch's other CPU GEMM path, another
    # accumulation order; how far a legitimate PyTorch variant drifts in each mode and dialect
    with torch.backends.mkldnn.flags(enabled=False):
        for mode in G.MODES:
            hp = dict(ADAMW, betas=tuple(ADAMW["betas"]))
            scaler = torch.amp.GradScaler("cpu", **G.SCALER) if mode == "fp16" else None
            losses, _ = train(torch, transformers, bnb, mode, "adamw_torch", hp, scaler=scaler)
            add(f"mkldnn_off_{mode}", f"{mode}/adamw_torch", losses, f"train_{mode}",
                f"as threads2_{mode} with torch.backends.mkldnn.flags(enabled=False)")
        for c in F.CASES:
            losses, _ = train(torch, transformers, bnb, c["mode"], c["optim"], c["hp"])
            add(f"mkldnn_off_{c['mode']}_{c['optim']}", f"{c['mode']}/{c['optim']}", losses, c["name"],
                f"as threads2_{c['mode']}_{c['optim']} with torch.backends.mkldnn.flags(enabled=False)")

    # (b) HF Accelerate with mixed_precision="fp16" on the CPU
    try:
        import accelerate
        from accelerate import Accelerator
    except Exception as e:  # noqa: BLE001
        print(f"note: accelerate is not installed ({e}); demonstration (b) skipped")
    else:
        acc = Accelerator(mixed_precision="fp16", cpu=True)
        probe = {}

        def prepare(model, opt):
            return acc.prepare(model, opt)

        def ctx():
            return acc.autocast()
        hp = dict(ADAMW, betas=tuple(ADAMW["betas"]))
        losses, m = train(torch, transformers, bnb, "fp32", "adamw_torch", hp, ctx=ctx,
                          backward=acc.backward, prepare=prepare)
        with acc.autocast():
            y = m(input_ids=ids[0], attention_mask=masks[0]).logits
        probe = dict(accelerate=accelerate.__version__, device=str(acc.device),
                     mixed_precision=acc.mixed_precision, native_amp=acc.native_amp,
                     scaler=repr(acc.scaler), logits_dtype_under_accelerator_autocast=str(y.dtype))
        add("accelerate_fp16_cpu", "fp16", losses, None,
            "accelerate.Accelerator(mixed_precision='fp16', cpu=True): prepare(model, AdamW), "
            "with accelerator.autocast(): forward; accelerator.backward(loss); opt.step(). "
            + json.dumps(probe, sort_keys=True))
        print("accelerate:", json.dumps(probe, sort_keys=True))

    # (c) a plain fp32 run that claims fp16
    hp = dict(ADAMW, betas=tuple(ADAMW["betas"]))
    losses, _ = train(torch, transformers, bnb, "fp32", "adamw_torch", hp)
    add("plain_fp32_labelled_fp16", "fp16", losses, None,
        f"torch.optim.AdamW, no autocast, {THREADS} threads, labelled fp16")
    # bitsandbytes AdamW8bit at its defaults: on the tiny preset no tensor reaches min_8bit_size
    hp = dict(F.ADAMW_BNB_8BIT, min_8bit_size=4096)
    losses, _ = train(torch, transformers, bnb, "fp32", "adamw_bnb_8bit", hp)
    add("bnb_default_labelled_8bit", "fp32/adamw_bnb_8bit", losses, None,
        "bitsandbytes.optim.AdamW8bit(lr=1e-3, wd=0.01) at the default min_8bit_size=4096, fp32, "
        f"{THREADS} threads: every tiny-preset tensor (<= 2048 elements) keeps fp32 state")

    goldens = golden_io.Goldens("fingerprint_demo", __file__,
                                os.path.join(os.path.dirname(os.path.abspath(args.out)), "MANIFEST.tsv"))
    print(f"{'run':32s} {'label':24s} {'vs golden':28s} max |dloss|")
    for name, label, losses, golden, note in runs:
        doc = {"losses": losses, "label": label, "run": note, "generator": goldens.generator, "library": lib,
               "torch_num_threads": THREADS, "seed": G.MODEL_SEED, "data_seed": G.TRAIN_DATA_SEED}
        blob = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        goldens.put(os.path.join(args.out, name + ".json"), blob, lib, G.MODEL_SEED, quiet=True)
        d = ""
        if golden:
            g = gold[golden]["expect.loss"].double()
            d = f"{float((torch.tensor(losses, dtype=torch.float64) - g).abs().max()):.3e}"
        print(f"{name:32s} {label:24s} {golden or '-':28s} {d}")
    n = goldens.write_manifest()   # replaces only the rows of the files written now
    print(f"wrote {len(runs)} candidates to {args.out} and {goldens.manifest_path} ({n} rows)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Dropout goldens for trainbench: the REAL transformers DistilBertForSequenceClassification in
train mode with dropout > 0, fed trainbench's masks, on CPU.

    ~/.cache/trainbench-venv/bin/python reference/gen_dropout_goldens.py --out reference/golden

The model goldens of reference/gen_model_goldens.py run with every dropout 0. These cases run the
same tiny model (HF init after torch.manual_seed(1234), the same batches) with DistilBERT's
dropout=0.1, attention_dropout=0.1, seq_classif_dropout=0.2 in train mode. torch's own bernoulli
draws cannot be reproduced outside torch, so every dropout gets trainbench's mask instead, made
by reference/dropout_masks.py (a Python implementation of the documented mask RNG, written from
MODEL_SEMANTICS.md section 10, not from the C code), with torch's own dropout arithmetic
(dropout_masks.patched_dropout: noise = mask.to(input.dtype); noise.div_(1 - p); input * noise,
what ATen's CPU _dropout_impl computes with its bernoulli draw). Everything else — where each
dropout sits, the dtype it runs in under autocast, the backward — is transformers' and torch's.

Cases (written to <out>/model/<case>.safetensors; rows of <out>/MANIFEST.tsv):
  grads_dropout_<mode>      fp32, bf16, fp16: one forward+backward (the grads_* format of
                            gen_model_goldens.py: logits, loss, hidden states, attention maps as
                            eager attention returns them (after dropout), every .grad, counters),
                            batch 4x16 with padding (attention dropout on fp32 probabilities)
  grads_dropout_<bf16|fp16>_nopad  a batch without padding: no mask, the softmax and so the
                            attention dropout run in the low dtype (scale 1.109375 in bf16,
                            1.111328125 in fp16)
  grads_dropout_fp16_b1      fp16, one sequence without padding; grads_dropout_fp16_h1: fp16, one
                            head of 32, a batch without padding (both: torch's k^T reshape is a view,
                            which swaps the fp16 orders of q @ k^T and dS @ k)
  grads_dropout_cfg2_<mode> fp32, bf16: the second configuration of gen_model_goldens.py (dim 36,
                            3 heads of 12, 3 labels, batch 5x20 with heavy padding)
  trajectory_dropout_fp16_b1 as trajectory_dropout_fp16 with batches of one sequence
  trajectory_dropout_<mode> fp32, bf16, fp16 (+ GradScaler('cpu'), init 2^16, interval 4):
                            TRAIN_STEPS AdamW steps (adamw_torch, the train_* goldens'
                            hyperparameters) on the first batches of the train_* stream, the
                            masks of optimizer step s (1-based) for step s. Named trajectory_*
                            (not train_*) so that fingerprint's references stay the same
Every case stores its masks as input.dropout.<module> (U8, 1 = kept; grads: (B, ...), train:
(S, B, ...)), named after the nn.Dropout module that applies them as `trainbench train
--dump-dropout-masks` names them, and metadata dropout = {"dropout", "attention_dropout",
"seq_classif_dropout", "seed", "first_step"}: tests/test_model_golden.c and test_trajectory.c
check that the C model draws exactly these masks and computes what torch computed with them.

Deterministic (one thread, canonical writer, masks from a counter-based RNG). `--check`
regenerates in memory and compares with the files; `--only` selects cases. Installs nothing.
"""
import argparse
import functools
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dropout_masks as DM  # noqa: E402 - the mask RNG and the torch-side application
import gen_model_goldens as G  # noqa: E402 - model, batches, grads case, metadata
import golden_io  # noqa: E402 - writer, MANIFEST

PROG = "gen_dropout_goldens"
die = functools.partial(golden_io.die, PROG)

DROPOUT = dict(dropout=0.1, attention_dropout=0.1, seq_classif_dropout=0.2)  # DistilBertConfig's defaults
DROPOUT_SEED = 42            # the mask seed (trainbench train --seed's default)
TRAIN_STEPS = 10
TRAIN_SCALER = dict(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=4,
                    enabled=True)


def cases():
    cs = []
    for mode in ["fp32", "bf16", "fp16"]:
        cs.append(dict(name=f"grads_dropout_{mode}", kind="grads", mode=mode, labels=2, nopad=False,
                       flags=["padding", "forward_backward", "dropout"] + ([] if mode == "fp32" else ["autocast"]),
                       comment=f"one forward+backward of the tiny model in train mode with dropout 0.1, "
                               f"attention_dropout 0.1, seq_classif_dropout 0.2 (trainbench's masks), {mode}"
                               + ("" if mode == "fp32" else f" ({G.autocast_string(mode)}, no scaler)")
                               + ", batch 4x16 with padding"))
    for mode in ["fp32", "bf16"]:
        cs.append(dict(name=f"grads_dropout_cfg2_{mode}", kind="grads", mode=mode, labels=3, nopad=False,
                       shape="cfg2",
                       flags=["padding", "heavy_padding", "forward_backward", "labels3", "head_dim_12", "dropout"]
                       + ([] if mode == "fp32" else ["autocast"]),
                       comment=f"one forward+backward of the second configuration (dim 36, 3 heads of 12, FFN 50, "
                               f"3 labels) in train mode with dropout 0.1 / 0.1 / 0.2 (trainbench's masks), {mode}, "
                               "batch 5x20 with 2-20 real tokens"))
    for mode in ["bf16", "fp16"]:
        cs.append(dict(name=f"grads_dropout_{mode}_nopad", kind="grads", mode=mode, labels=2, nopad=True,
                       flags=["no_padding_batch", "forward_backward", "dropout", "autocast", "mask_none"],
                       comment=f"one forward+backward with dropout (trainbench's masks), {mode}, a batch without "
                               f"padding: the softmax and the attention dropout run in {mode}"))
    # fp16 attention whose k^T reshape is a view (batch 1, or one head): torch sums q @ k^T and
    # dq = dS @ k in the other two orders (src/model/layers.c scores_f16_sum)
    cs.append(dict(name="grads_dropout_fp16_b1", kind="grads", mode="fp16", labels=2, nopad=True, batch=1,
                   flags=["no_padding_batch", "forward_backward", "dropout", "autocast", "mask_none", "batch_1"],
                   comment="one forward+backward with dropout (trainbench's masks), fp16, one sequence without "
                           "padding: the k^T reshape is a view, so q @ k^T and dS @ k swap summation orders"))
    cs.append(dict(name="grads_dropout_fp16_h1", kind="grads", mode="fp16", labels=2, nopad=True, cfg=dict(n_heads=1),
                   flags=["no_padding_batch", "forward_backward", "dropout", "autocast", "mask_none", "one_head"],
                   comment="one forward+backward with dropout (trainbench's masks), fp16, one attention head of 32, "
                           "a batch without padding: the k^T reshape is a view, as with batch 1"))
    # batch 1: k's gradient reaches k_lin column-major in torch (src/model/layers.h dy_col_major)
    cs.append(dict(name="trajectory_dropout_fp16_b1", kind="train", mode="fp16", labels=2, nopad=False, batch=1,
                   flags=["padding", "adamw_torch", "trajectory", "dropout", "autocast", "grad_scaler", "batch_1"],
                   comment=f"{TRAIN_STEPS} AdamW steps of one sequence each, fp16, with dropout 0.1 / 0.1 / 0.2 and "
                           "trainbench's masks of each step and GradScaler('cpu') (init 2^16, interval 4)"))
    for mode in ["fp32", "bf16", "fp16"]:
        flags = ["padding", "adamw_torch", "trajectory", "dropout"]
        if mode != "fp32":
            flags.append("autocast")
        if mode == "fp16":
            flags += ["grad_scaler"]
        cs.append(dict(name=f"trajectory_dropout_{mode}", kind="train", mode=mode, labels=2, nopad=False, flags=flags,
                       comment=f"{TRAIN_STEPS} AdamW steps, {mode}, with dropout 0.1 / 0.1 / 0.2 and trainbench's "
                               "masks of each step" + (" and GradScaler('cpu') (init 2^16, interval 4)"
                                                       if mode == "fp16" else "")))
    return cs


def dropout_meta(first_step):
    return json.dumps(dict(DROPOUT, seed=DROPOUT_SEED, first_step=first_step, first_example=0),
                      separators=(",", ":"), sort_keys=True)


def masks_for(step, rows, seq):
    return DM.step_masks(G.CFG, DROPOUT_SEED, step, 0, rows, seq, DROPOUT["dropout"], DROPOUT["attention_dropout"],
                         DROPOUT["seq_classif_dropout"])


def run_grads(torch, transformers, c, base_meta):
    masks = masks_for(1, G.BATCH, G.SEQ)
    with DM.patched_dropout(torch, masks, repeat=True) as used:
        tensors, meta = G.run_grads(torch, transformers, c, base_meta)
    if len(used) != 2 * len(masks):  # the plain pass and the traced pass
        die(f"{c['name']}: {len(used)} dropout calls for {len(masks)} masks (expected two forwards)", 1)
    for name, m in masks.items():
        tensors[f"input.dropout.{name}"] = torch.from_numpy(m)
    meta["model_mode"] = ("train (model.train(); dropout, attention_dropout, seq_classif_dropout as in config, "
                          "each nn.functional.dropout given trainbench's mask: reference/dropout_masks.py)")
    meta["dropout"] = dropout_meta(1)
    meta["dropout_masks"] = ",".join(masks)
    return tensors, meta


def run_train(torch, transformers, c, base_meta):
    mode = c["mode"]
    model = G.build_model(torch, transformers, c["labels"])
    names = G.param_names(model)
    params = [p for _, p in model.named_parameters()]
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids, masks_in, labels = G.train_batches(torch, TRAIN_STEPS)
    hp = dict(G.ADAMW)
    hp["betas"] = tuple(hp["betas"])
    opt = torch.optim.AdamW(params, **hp)
    scaler = torch.amp.GradScaler("cpu", **TRAIN_SCALER) if mode == "fp16" else None
    loss_v, scale_v, skipped_v = [], [], []
    step_masks = []
    for s in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        m = masks_for(s + 1, G.BATCH, G.SEQ)
        step_masks.append(m)
        with DM.patched_dropout(torch, m):
            out = G.forward(torch, model, mode, ids[s], masks_in[s], labels[s])
        loss_v.append(float(out.loss.detach()))
        before = float(opt.state[params[0]]["step"]) if "step" in opt.state.get(params[0], {}) else 0.0
        if scaler is not None:
            scale = scaler.get_scale()
            scaler.scale(out.loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            scale = 1.0
            out.loss.backward()
            opt.step()
        after = float(opt.state[params[0]]["step"]) if "step" in opt.state.get(params[0], {}) else 0.0
        scale_v.append(scale)
        skipped_v.append(1 if after == before else 0)
        if skipped_v[-1] and scaler is None:
            die(f"{c['name']}: step {s + 1} skipped without a scaler", 1)

    tensors = {f"param.{n}": init[n] for n in names}
    for n, p in model.named_parameters():
        tensors[f"expect.final.param.{n}"] = p.detach().clone()
    tensors["input.input_ids"] = ids
    tensors["input.attention_mask"] = masks_in
    tensors["input.labels"] = labels
    for name in step_masks[0]:
        tensors[f"input.dropout.{name}"] = torch.stack([torch.from_numpy(m[name]) for m in step_masks])
    tensors["expect.loss"] = torch.tensor(loss_v, dtype=torch.float32)
    tensors["expect.scale"] = torch.tensor(scale_v, dtype=torch.float32)
    tensors["expect.skipped"] = torch.tensor(skipped_v, dtype=torch.uint8)
    meta = dict(base_meta)
    meta.update(G.model_meta(model, c["labels"]))
    meta.update({
        "case": c["name"], "comment": c["comment"], "flags": ",".join(c["flags"]),
        "seed": str(G.MODEL_SEED), "data_seed": str(G.TRAIN_DATA_SEED),
        "mode": mode, "autocast": G.autocast_string(mode), "steps": str(TRAIN_STEPS),
        "optimizer": "adamw_torch",
        "hparams": json.dumps(G.ADAMW, separators=(",", ":"), sort_keys=True),
        "param_groups": "one group with every parameter (weight decay on all)",
        "grad_scaler": json.dumps(TRAIN_SCALER, separators=(",", ":"), sort_keys=True)
        if scaler is not None else "none",
        "step_protocol": "for s in 1..S: zero_grad(set_to_none=True); forward (train mode, the masks of step "
                         "s) under the mode's autocast; loss.backward() (fp16: scaler.scale(loss).backward(); "
                         "scaler.step(opt); scaler.update()); opt.step()",
        "model_mode": "train (model.train(); dropout 0.1, attention_dropout 0.1, seq_classif_dropout 0.2, each "
                      "nn.functional.dropout given trainbench's mask of that step: reference/dropout_masks.py)",
        "dropout": dropout_meta(1),
        "dropout_masks": ",".join(step_masks[0]),
        "final_scale": repr(scaler.get_scale()) if scaler is not None else "none",
        "skipped_steps": ",".join(str(i + 1) for i, k in enumerate(skipped_v) if k) or "none",
    })
    return tensors, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reference/golden", help="golden root (default reference/golden)")
    ap.add_argument("--only", default="", help="comma list of case names")
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and compare with the files on disk (exit 1 on difference)")
    args = ap.parse_args()
    torch, transformers = G.import_libraries()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    DM.check_formula(torch)   # the masked arithmetic is torch's dropout, bit for bit (else exit 1)
    print("masked dropout formula = torch.nn.functional.dropout bit for bit (fp32, bf16, fp16; output and grad)")
    cs = cases()
    only = [s for s in args.only.split(",") if s]
    known = {c["name"] for c in cs}
    for s in only:
        if s not in known:
            die(f"--only: unknown case '{s}' (allowed: {', '.join(sorted(known))})")
    if only:
        cs = [c for c in cs if c["name"] in only]
    goldens = golden_io.Goldens(PROG, __file__, os.path.join(args.out, "MANIFEST.tsv"), check=args.check)
    base_meta = dict(G.lib_meta(torch, transformers), generator=goldens.generator)
    for c in cs:
        G.use_shape(c.get("shape", "tiny"))
        G.CFG = dict(G.CFG, **DROPOUT, **c.get("cfg", {}))   # make_config reads the module's CFG
        if "batch" in c:
            G.BATCH = c["batch"]          # make_batch and the masks read the module's BATCH
        run = run_grads if c["kind"] == "grads" else run_train
        tensors, meta = run(torch, transformers, c, base_meta)
        if c["kind"] == "train":
            t = tensors
            print(f"  {c['name']}: loss {t['expect.loss'][0]:.6f} -> {t['expect.loss'][-1]:.6f}; "
                  f"skipped {meta['skipped_steps']}; scale {[float(x) for x in t['expect.scale']]}")
        path = os.path.join(args.out, "model", c["name"] + ".safetensors")
        blob = golden_io.safetensors_bytes(torch, tensors, meta)
        goldens.put(path, blob, meta["library"], meta["seed"])
    print(f"total {goldens.total} bytes in {'checked' if args.check else 'written'} files")
    if args.check:
        goldens.finish_check()
        return
    current = {golden_io.repo_path(os.path.join(args.out, "model", c["name"] + ".safetensors")) for c in cases()}
    n = goldens.write_manifest(stale=lambda f: f not in current)
    print(f"wrote {goldens.manifest_path} ({n} rows)")


if __name__ == "__main__":
    main()

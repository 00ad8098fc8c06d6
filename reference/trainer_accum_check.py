#!/usr/bin/env python3
"""How transformers' Trainer scales the loss under gradient accumulation, measured (writes nothing).

    ~/.cache/trainbench-venv/bin/python reference/trainer_accum_check.py

Needs `accelerate` (the Trainer refuses to start without it; the goldens venv does not have it):
e.g. `pip install --target DIR --no-deps accelerate psutil pyyaml` and PYTHONPATH=DIR (exit 2
otherwise). Measured with transformers 5.24.0, torch 2.15.0, accelerate 1.15.0:
    plain loop (loss / 4): gradient norm 0.31424, mean of the micro-batch losses 0.69256
    Trainer as is (model_accepts_loss_kwargs = True): gradient = 4 x plain exactly, logged loss 2.77024
    Trainer with trainer.model_accepts_loss_kwargs = False: gradient = plain exactly, logged loss 0.69256

trainbench's --gradient-accumulation-steps N follows the plain PyTorch loop (each micro-batch's
mean loss divided by N: the gradient of the mean over the N micro-batches). transformers 5's
Trainer divides by N only when it does not count the items of the batch: when the model's
forward accepts **kwargs (model_accepts_loss_kwargs) and the batch has labels, it passes
num_items_in_batch (the labels of all N micro-batches) to the model and does NOT divide the loss
by N, expecting the model's loss to sum over items and divide by that count. This script runs one
optimizer step of the real Trainer on the tiny DistilBertForSequenceClassification (4 micro-batches
of 4, lr 0, no clipping) and compares its accumulated gradient and logged loss with the plain loop's
(same micro-batches, same order), then again with trainer.model_accepts_loss_kwargs = False (the
Trainer then divides by N). It prints the ratio of the gradient norms (Trainer / plain loop), the
largest element differences and the logged losses; exit 0.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_goldens as gm  # noqa: E402 - the same tiny model, init and batches


def main():
    torch, transformers = gm.import_libraries()
    try:
        import accelerate  # noqa: F401
    except ImportError:
        print("trainer_accum_check: transformers' Trainer needs the accelerate package, which is not "
              "importable (install it into a separate folder: pip install --target DIR --no-deps accelerate "
              "psutil pyyaml, then PYTHONPATH=DIR)", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    N, B = 4, gm.BATCH
    ids, masks, labels = gm.train_batches(torch, N)

    # plain loop: loss / N per micro-batch
    model = gm.build_model(torch, transformers, 2)
    tr = 0.0
    for k in range(N):
        out = model(input_ids=ids[k], attention_mask=masks[k], labels=labels[k])
        (out.loss / N).backward()
        tr += float(out.loss.detach()) / N
    plain = torch.cat([p.grad.reshape(-1) for p in model.parameters()])

    # the Trainer: same model init, the same 16 rows in order (sequential sampler), one step
    rows = [dict(input_ids=ids[k][b], attention_mask=masks[k][b], labels=labels[k][b])
            for k in range(N) for b in range(B)]
    captured = {}

    class Capture(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
            captured["grad"] = torch.cat([p.grad.detach().reshape(-1).clone() for p in model.parameters()])

    class InOrder(transformers.Trainer):
        def _get_train_sampler(self, *a, **kw):
            return torch.utils.data.SequentialSampler(self.train_dataset)

    def run_trainer(accepts_loss_kwargs):
        model2 = gm.build_model(torch, transformers, 2)
        with tempfile.TemporaryDirectory() as tmp:
            args = transformers.TrainingArguments(output_dir=tmp, per_device_train_batch_size=B,
                                                  gradient_accumulation_steps=N, max_steps=1, learning_rate=0.0,
                                                  max_grad_norm=0.0, logging_steps=1, report_to=[], use_cpu=True,
                                                  save_strategy="no", dataloader_num_workers=0,
                                                  disable_tqdm=True)
            trainer = InOrder(model=model2, args=args, train_dataset=rows, callbacks=[Capture()])
            detected = trainer.model_accepts_loss_kwargs
            if accepts_loss_kwargs is not None:
                trainer.model_accepts_loss_kwargs = accepts_loss_kwargs
            trainer.train()
            logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        return detected, captured["grad"], logged[0]

    print(f"transformers {transformers.__version__}, torch {torch.__version__}; one optimizer step of "
          f"{N} micro-batches of {B}")
    print(f"plain loop (loss / {N}): gradient norm {float(plain.norm()):.6g}, mean of the micro-batch losses {tr:.6g}")
    for setting in (None, False):
        detected, g, logged = run_trainer(setting)
        what = (f"Trainer as is (model_accepts_loss_kwargs = {detected}: num_items_in_batch counted)"
                if setting is None else "Trainer with trainer.model_accepts_loss_kwargs = False")
        print(f"{what}: gradient norm {float(g.norm()):.6g} = {float(g.norm() / plain.norm()):.6g} x plain, "
              f"max |Trainer - plain| {float((g - plain).abs().max()):.3g}, "
              f"max |Trainer - {N} x plain| {float((g - N * plain).abs().max()):.3g}; logged loss {logged:.6g}")

if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Model goldens for trainbench: the REAL transformers DistilBertForSequenceClassification on CPU.

    ~/.cache/trainbench-venv/bin/python reference/gen_model_goldens.py --out reference/golden

Writes one safetensors file per case to <out>/model/<case>.safetensors and rewrites
<out>/MANIFEST.tsv (rows of other generators are kept).  reference/MODEL_SEMANTICS.md is the
contract these files check: what PyTorch computes, op by op, in each precision mode.

Model: the "tiny" preset (and CFG2 for the *_cfg2_* cases, RELU and SILU for grads_relu_* and grads_silu_*), DistilBertConfig(vocab_size=64, dim=32, n_layers=2, n_heads=2,
hidden_dim=64, max_position_embeddings=32, dropout=0, attention_dropout=0, seq_classif_dropout=0,
activation="gelu", attn_implementation="eager"), weights = the Hugging Face init after
torch.manual_seed(MODEL_SEED), model.train().  Precision modes (SPEC.md section 2):
  fp32          no autocast
  bf16          torch.autocast("cpu", dtype=torch.bfloat16)
  fp16          torch.autocast("cpu", dtype=torch.float16) (+ torch.amp.GradScaler("cpu") in train_*)
  fp16-noscale  torch.autocast("cpu", dtype=torch.float16), no scaler (train_* only)

Cases:
  grads_<mode>          one forward+backward: logits, loss, every parameter's .grad
  grads_fp32_labels3    the same with num_labels=3 (the loss over 3 classes)
  grads_<mode>_nopad    a batch without padding: transformers then passes NO mask (see
                        MODEL_SEMANTICS.md: the softmax then runs in the low dtype)
  train_<mode>          20 AdamW steps on a fixed sequence of batches (per-step loss, scale,
                        skipped, underflow counters; final parameters)
  grads_cfg2_<mode>, trajectory_cfg2_<mode>   fp32, bf16, fp16: the same cases for a second
                        configuration (CFG2: head size 12, 3 heads, 3 labels, heavy padding,
                        other seeds); trajectory_* (not train_*) so fingerprint's references
                        stay the same
  grads_relu_<mode>     fp32, bf16, fp16: one forward+backward of a third configuration with
                        activation="relu" and pad_token_id 3 (RELU: 4 heads of 10, FFN 72)
  grads_silu_<mode>     fp32 and bf16: the same for a fourth with activation="silu" (SILU: 6 heads of
                        8, 3 labels); not fp16, whose layer-0 q_lin gradients on this configuration are
                        fp16 subnormals, outside what test_model_golden's tolerance models (the same with
                        gelu there)
  grads_regression_<mode>  fp32, bf16, fp16: one forward+backward of a fifth configuration with
                        num_labels 1 and problem_type "regression" (MSELoss on the one logit against
                        the integer labels as float targets; REGRESSION: 3 heads of 8, FFN 40)
  grads_nolayers_<mode>  fp32, bf16, fp16: one forward+backward of a sixth configuration with
                        n_layers 0 (NOLAYERS: the embeddings go straight into the head; 3 labels)
  activations_low       every activation trainbench implements (ACT_TABLE: transformers' ACT2FN but prelu and xielu,
                        which add parameters) through get_activation on every bf16 and fp16 pattern, forward
                        and backward in that dtype
  activations_f32       F.gelu (approximate="none") on 65,536 fp32 inputs (random bit patterns, normal draws, a
                        ramp over [-12, 12], values near 0 and near the minimax pieces' bounds), forward and
                        backward as torch runs them by default (oneDNN's eltwise_gelu_erf), and the forward again
                        in a subprocess with ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN's non-AVX-512 kernel)
  lr_schedules          the lr after each scheduler step of transformers.get_scheduler for every
                        lr_scheduler_type trainbench implements, at several (lr, warmup, steps)
  layernorm_rows        F.layer_norm forward and backward (y, mean, rstd, dx, dgamma, dbeta) on rows of 3 to 3072
  sinusoidal_pos        the position embeddings of a model built with sinusoidal_pos_embds=True
                        (the model's own init), for 512x768, 128x128, 40x15 and 3x2; metadata
                        requires_grad says whether transformers keeps the table trainable
  trainer_<mode>        fp32 and fp16: the same 20 batches with HF Trainer's optimization
                        policies: weight decay 0.01 in two groups (Trainer.get_decay_parameter_names:
                        no decay for biases and LayerNorm weights), get_linear_schedule_with_warmup
                        (4 warmup steps of 20), clip_grad_norm_(max_norm=TRAINER_MAX_GRAD_NORM)
                        after the scaler's unscale_ (clipping on most steps); the scheduler steps
                        only after optimizer steps that were not skipped, as the Trainer does.
                        Named trainer_* (not train_*) so fingerprint's references stay the same.

File format (reference/README.md has the full description):
  param.<name>                 F32  the initial parameters (exact state_dict names)
  input.input_ids / .attention_mask / .labels   I64  (B,T) (B,T) (B)  or (S,B,T) ... for train_*
  expect.*                     see README.md (logits, loss, grad.<name>, per-step vectors, ...)
  __metadata__                 case, comment, flags, library, generator, seed, mode, autocast, ...

Deterministic: no clocks or host names go into the .safetensors files, torch runs single-threaded,
and the safetensors writer (golden_io.py) emits a canonical header (sorted keys, tensors ordered
by dtype size then name).  `--check` regenerates into memory and compares with the files on disk.

Installs nothing.  Needs torch >= 2.5, transformers >= 4.48 (attn_implementation, eager attention
interface) and numpy (exit 2 otherwise).  `--facts` prints the measurements quoted in
MODEL_SEMANTICS.md (op dtypes under CPU autocast, rounding points) and writes nothing.
"""
import argparse
import functools
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_io  # noqa: E402 - writer, MANIFEST, import checks shared by reference/

PROG = "gen_model_goldens"
die = functools.partial(golden_io.die, PROG)
FORMAT = "trainbench-model-golden-1"

MODEL_SEED = 1234        # torch.manual_seed before constructing the model (HF init)
GRADS_DATA_SEED = 77     # torch.Generator seed of the grads_* batch
TRAIN_DATA_SEED = 78     # torch.Generator seed of the train_* batches
BATCH, SEQ = 4, 16
GRADS_LENGTHS = [16, 11, 7, 3]      # valid tokens per sequence of the grads_* batch (pad id 0)
TRAIN_STEPS = 20
TRAIN_NOPAD_STEP = 10                # 1-based: this train batch has no padding at all
CLS_ID, PAD_ID = 1, 0                # position 0 holds token 1 (a [CLS]-like first token)

TINY = dict(vocab_size=64, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
            max_position_embeddings=32, num_labels=2, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0, activation="gelu")
# A second configuration unlike tiny: head size 12 (not a power of two: the attention scale
# 12**-0.5 is inexact), 3 heads, FFN 50, 3 labels, vocab 50, batches of 5 x 20 with heavy
# padding (2..8 real tokens in the trajectories), other seeds.
CFG2 = dict(vocab_size=50, dim=36, n_layers=2, n_heads=3, hidden_dim=50,
            max_position_embeddings=24, num_labels=3, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0, activation="gelu")
# A third configuration with DistilBertConfig's other implemented activation: activation="relu"
# (nn.ReLU between the FFN's linears), and pad_token_id 3 (padding_idx 3: that row starts at 0
# and gets no gradient, while token 0 is an ordinary one; the batches pad with 3, and hold 3 and
# 0 among their real tokens: make_batch), 4 heads of 10, FFN 72, vocab 60, batch 4 x 18, other seeds.
RELU = dict(vocab_size=60, dim=40, n_layers=2, n_heads=4, hidden_dim=72,
            max_position_embeddings=24, num_labels=2, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0, activation="relu", pad_token_id=3)
# A fourth with activation="silu" (nn.functional.silu: x / (1 + exp(-x))), 6 heads of 8, FFN 96,
# vocab 70, 3 labels, batch 3 x 22.
SILU = dict(vocab_size=70, dim=48, n_layers=2, n_heads=6, hidden_dim=96,
            max_position_embeddings=24, num_labels=3, dropout=0.0, attention_dropout=0.0,
            seq_classif_dropout=0.0, activation="silu")
# A fifth for regression: num_labels 1 with problem_type "regression" (what transformers picks for
# one label), MSELoss on the single logit against the integer labels read as float targets (the
# count of high tokens, 0..L-1: make_batch), 3 heads of 8, FFN 40, vocab 56, batch 5 x 14.
REGRESSION = dict(vocab_size=56, dim=24, n_layers=2, n_heads=3, hidden_dim=40,
                  max_position_embeddings=24, num_labels=1, problem_type="regression", dropout=0.0,
                  attention_dropout=0.0, seq_classif_dropout=0.0, activation="gelu")
# A sixth with no transformer layers (n_layers 0, which DistilBertConfig accepts: the embeddings'
# LayerNorm output goes straight to the classification head), 3 labels, dim 20, vocab 40,
# batch 4 x 12.
NOLAYERS = dict(vocab_size=40, dim=20, n_layers=0, n_heads=2, hidden_dim=36,
                max_position_embeddings=16, num_labels=3, dropout=0.0, attention_dropout=0.0,
                seq_classif_dropout=0.0, activation="gelu")
SHAPES = {
    "tiny": dict(config=TINY, model_seed=1234, grads_seed=77, train_seed=78, batch=4, seq=16,
                 grads_lengths=[16, 11, 7, 3], train_lengths=(3, 16), nopad_step=10),
    "relu": dict(config=RELU, model_seed=3031, grads_seed=113, train_seed=114, batch=4, seq=18,
                 grads_lengths=[18, 12, 5, 9], train_lengths=(3, 18), nopad_step=None),
    "silu": dict(config=SILU, model_seed=4049, grads_seed=131, train_seed=132, batch=3, seq=22,
                 grads_lengths=[22, 14, 6], train_lengths=(3, 22), nopad_step=None),
    "cfg2": dict(config=CFG2, model_seed=2027, grads_seed=97, train_seed=98, batch=5, seq=20,
                 grads_lengths=[20, 7, 4, 2, 3], train_lengths=(2, 8), nopad_step=None),
    "regression": dict(config=REGRESSION, model_seed=5051, grads_seed=151, train_seed=152, batch=5, seq=14,
                       grads_lengths=[14, 9, 4, 12, 2], train_lengths=(2, 14), nopad_step=None),
    "nolayers": dict(config=NOLAYERS, model_seed=6067, grads_seed=171, train_seed=172, batch=4, seq=12,
                     grads_lengths=[12, 5, 9, 2], train_lengths=(2, 12), nopad_step=None),
}
CFG = TINY                  # the configuration of the case being generated (use_shape)
TRAIN_LENGTHS = (3, SEQ)    # min, max real tokens per sequence of the train_* batches


def use_shape(name):
    """Points the module's case parameters at SHAPES[name] (the generator runs one case at a time)."""
    global CFG, MODEL_SEED, GRADS_DATA_SEED, TRAIN_DATA_SEED, BATCH, SEQ, GRADS_LENGTHS
    global TRAIN_LENGTHS, TRAIN_NOPAD_STEP
    sh = SHAPES[name]
    CFG, MODEL_SEED, GRADS_DATA_SEED, TRAIN_DATA_SEED = (sh["config"], sh["model_seed"],
                                                         sh["grads_seed"], sh["train_seed"])
    BATCH, SEQ, GRADS_LENGTHS = sh["batch"], sh["seq"], sh["grads_lengths"]
    TRAIN_LENGTHS, TRAIN_NOPAD_STEP = sh["train_lengths"], sh["nopad_step"]


def attention_scale():
    return (CFG["dim"] // CFG["n_heads"]) ** -0.5
ADAMW = dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.01, amsgrad=False,
             maximize=False, foreach=False, capturable=False, differentiable=False, fused=False)
# GradScaler for train_fp16: torch defaults except init_scale (large, so that the first steps
# overflow and are skipped) and growth_interval (small, so that growth happens within 20 steps)
SCALER = dict(init_scale=2.0 ** 24, growth_factor=2.0, backoff_factor=0.5, growth_interval=4,
              enabled=True)
MODES = ["fp32", "bf16", "fp16", "fp16-noscale"]
TRAINER_MODES = ["fp32", "fp16"]
TRAINER_WARMUP = 4                  # warmup steps of get_linear_schedule_with_warmup (of 20)
TRAINER_MAX_GRAD_NORM = 0.3         # below the tiny model's gradient norms (~0.3-0.6): clips
ACCUM_MODES = ["fp32", "fp16"]
ACCUM_N = 4                         # gradient_accumulation_steps of the accum_* cases
ACCUM_STEPS = 10                    # optimizer steps: 40 micro-batches (the first 20 = train_*'s)
ACCUM_WARMUP = 2                    # of 10 optimizer steps
ACCUM_MAX_GRAD_NORM = 0.15          # the accumulated (mean) gradient is smaller: clips about half


def import_libraries():
    """Import the reference libraries or exit 2 with a clear message. Installs nothing."""
    torch, _, transformers, _ = golden_io.require(PROG, [
        ("torch", "torch >= 2.5"), ("numpy", "numpy"),   # torch.Tensor.numpy() needs numpy
        ("transformers", "transformers"),
        ("transformers.models.distilbert.modeling_distilbert", "transformers (DistilBERT)")])
    golden_io.require_version(PROG, "torch", torch.__version__, "2.5",
                              "CPU autocast fp16, GradScaler('cpu')")
    golden_io.require_version(PROG, "transformers", transformers.__version__, "4.48",
                              "attention interface")
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            y = torch.nn.functional.linear(torch.ones(2, 2), torch.ones(2, 2))
        if y.dtype != torch.float16:
            raise RuntimeError(f"linear gave {y.dtype}")
        torch.amp.GradScaler("cpu")
    except Exception as e:  # noqa: BLE001
        die(f"this torch has no CPU fp16 autocast or no GradScaler('cpu'): {e}")
    return torch, transformers


# ----------------------------------------------------------------------------------------------
# model, data, precision modes
# ----------------------------------------------------------------------------------------------
def low_dtype(torch, mode):
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16,
            "fp16-noscale": torch.float16}[mode]


def dname(torch, dt):
    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
            torch.int64: "i64", torch.bool: "bool", torch.int32: "i32"}.get(dt, str(dt))


def autocast_string(mode):
    return {"fp32": "none",
            "bf16": "torch.autocast('cpu', dtype=torch.bfloat16)",
            "fp16": "torch.autocast('cpu', dtype=torch.float16)",
            "fp16-noscale": "torch.autocast('cpu', dtype=torch.float16)"}[mode]


def autocast_ctx(torch, mode):
    import contextlib
    dt = low_dtype(torch, mode)
    if dt is None:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=dt)


def make_config(transformers, num_labels):
    cfg = transformers.DistilBertConfig(**dict(CFG, num_labels=num_labels),
                                        attn_implementation="eager")
    return cfg


def build_model(torch, transformers, num_labels):
    torch.manual_seed(MODEL_SEED)
    model = transformers.DistilBertForSequenceClassification(make_config(transformers, num_labels))
    model.train()
    if model.config._attn_implementation != "eager":
        die(f"attention implementation is {model.config._attn_implementation!r}, not 'eager'", 1)
    w0 = model.distilbert.embeddings.word_embeddings.weight
    if not bool((w0[pad_id()] == 0).all()):
        die("HF init did not zero the padding row of word_embeddings", 1)
    return model


def param_names(model):
    return [n for n, _ in model.named_parameters()]


def pad_id():
    """The case's padding token: its config's pad_token_id (DistilBertConfig's default PAD_ID)."""
    return CFG.get("pad_token_id", PAD_ID)


def make_batch(torch, g, lengths, num_labels):
    """input_ids (B,T) with token CLS_ID at position 0, random ids 2..vocab-1 after it, PAD_ID
    beyond the length; attention_mask 1/0; labels from the content so the task is learnable:
    count of tokens with id >= vocab/2 (positions 1..L-1), 2 labels: majority, 3 labels: mod 3."""
    v = CFG["vocab_size"]
    ids = torch.randint(2, v, (BATCH, SEQ), generator=g, dtype=torch.int64)
    ids[:, 0] = CLS_ID
    mask = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    labels = torch.zeros(BATCH, dtype=torch.int64)
    if pad_id() != PAD_ID:  # the padding token also among the real ones (no gradient), and 0 too (an ordinary token)
        ids[0, 2], ids[0, 3], ids[1, 1] = pad_id(), PAD_ID, PAD_ID
    for b, n in enumerate(lengths):
        ids[b, n:] = pad_id()
        mask[b, :n] = 1
        hi = int((ids[b, 1:n] >= v // 2).sum())
        if num_labels == 1:  # regression: the count itself is the target
            labels[b] = hi
        else:
            labels[b] = (1 if 2 * hi > (n - 1) else 0) if num_labels == 2 else hi % num_labels
    return ids, mask, labels


def grads_batch(torch, num_labels, nopad=False):
    g = torch.Generator(device="cpu")
    g.manual_seed(GRADS_DATA_SEED)
    return make_batch(torch, g, [SEQ] * BATCH if nopad else GRADS_LENGTHS, num_labels)


def train_batches(torch, n=None):
    """The first n (default TRAIN_STEPS) batches of the train_* stream (seed TRAIN_DATA_SEED):
    a longer stream starts with the same batches."""
    g = torch.Generator(device="cpu")
    g.manual_seed(TRAIN_DATA_SEED)
    ids, masks, labels = [], [], []
    for s in range(1, (n or TRAIN_STEPS) + 1):
        lens = torch.randint(TRAIN_LENGTHS[0], TRAIN_LENGTHS[1] + 1, (BATCH,), generator=g).tolist()
        if s == TRAIN_NOPAD_STEP:
            lens = [SEQ] * BATCH
        elif all(n == SEQ for n in lens):
            lens[-1] = SEQ // 2          # every other batch has padding (a mask is materialized)
        i, m, lab = make_batch(torch, g, lens, CFG["num_labels"])
        ids.append(i)
        masks.append(m)
        labels.append(lab)
    return torch.stack(ids), torch.stack(masks), torch.stack(labels)


# ----------------------------------------------------------------------------------------------
# op trace (TorchDispatchMode sees the aten ops below autograd and autocast: the real dtypes)
# ----------------------------------------------------------------------------------------------
VIEW_OPS = {"view", "_unsafe_view", "t", "transpose", "expand", "clone", "detach", "select",
            "slice", "unsqueeze", "arange", "new_ones", "ge", "bitwise_and", "index", "all",
            "_local_scalar_dense", "zeros", "scalar_tensor", "ones_like", "where"}


def make_tracer(torch):
    from torch.utils._python_dispatch import TorchDispatchMode

    def sig(x):
        if isinstance(x, torch.Tensor):
            return dname(torch, x.dtype) + "[" + ",".join(str(s) for s in x.shape) + "]"
        if isinstance(x, (list, tuple)):
            parts = [sig(y) for y in x]
            return "(" + ",".join(p for p in parts if p) + ")" if any(parts) else ""
        if isinstance(x, float):
            return repr(x)
        return ""

    class Tracer(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.rows = []   # (opname, in signature, out signature, args, out)
            self.masks = []  # (value tensor of the additive mask)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if name == "where" and isinstance(out, torch.Tensor) and out.is_floating_point():
                self.masks.append(out.detach().clone())
            if name not in VIEW_OPS:
                ins = ",".join(s for s in (sig(a) for a in args) if s)
                self.rows.append((name, ins, sig(out)))
            return out

    return Tracer


def summarize_trace(rows):
    """Full ordered trace and an op -> unique dtype signatures map (dtypes only)."""
    import re
    full = ";".join(f"{n}({i})->{o}" for n, i, o in rows)
    by_op = {}
    for n, i, o in rows:
        di = re.sub(r"\[[0-9,]*\]", "", i)
        do = re.sub(r"\[[0-9,]*\]", "", o)
        by_op.setdefault(n, set()).add(f"{di}->{do}")
    return full, json.dumps({k: sorted(v) for k, v in sorted(by_op.items())},
                            separators=(",", ":"), sort_keys=True)


def make_counter(torch):
    """Backward-pass counters at the rounding points of CPU autocast (src/model/amp.h's definition).

    activation points: every aten._to_copy fp32 -> low in the backward (autograd handing an fp32
      gradient to a low-dtype tensor: the logits cast, the residual adds, the scores + mask add).
      Measured exactly: values = finite nonzero inputs, underflow = those whose output is +-0,
      overflow = those whose output is +-inf.
    parameter points: the low-dtype mm (weight gradient) or sum (bias gradient) whose result
      becomes a parameter's .grad (found through the _to_copy low -> fp32 that autograd then
      stores as .grad).  torch rounds inside the kernel, so the fp32 value before rounding is
      recomputed from torch's own low-dtype inputs: exactly in float64, then rounded to fp32.
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    A = torch.ops.aten
    LOW = (torch.bfloat16, torch.float16)

    def ptr(t):
        return t.untyped_storage().data_ptr()

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.act = [0, 0, 0]        # values, underflow, overflow
            self.produced = {}          # storage ptr of a low mm/sum output -> (func, args, out)
            self.widened = {}           # storage ptr of a _to_copy low->f32 output -> source ptr

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            # a new tensor may reuse the memory of a freed one: forget stale widenings (views
            # share their input's storage and keep it)
            ins = set()
            for a in args:
                for t in (a if isinstance(a, (tuple, list)) else (a,)):
                    if isinstance(t, torch.Tensor):
                        ins.add(ptr(t))
            for o in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(o, torch.Tensor) and ptr(o) not in ins:
                    self.widened.pop(ptr(o), None)
            if func in (A.mm.default, A.sum.dim_IntList) and out.dtype in LOW:
                self.produced[ptr(out)] = (func, args, out)
            elif func is A._to_copy.default and isinstance(args[0], torch.Tensor):
                src = args[0]
                if src.dtype == torch.float32 and out.dtype in LOW:
                    fin = torch.isfinite(src) & (src != 0)
                    self.act[0] += int(fin.sum())
                    self.act[1] += int((fin & (out == 0)).sum())
                    self.act[2] += int((fin & torch.isinf(out)).sum())
                elif src.dtype in LOW and out.dtype == torch.float32:
                    self.widened[ptr(out)] = ptr(src)
            return out

        def param_counts(self, params):
            """(values, underflow, overflow, number of parameters matched) over params' .grad"""
            D = torch.float64
            vals = under = over = matched = 0
            for p in params:
                src = self.widened.get(ptr(p.grad))
                rec = self.produced.get(src) if src is not None else None
                if rec is None:
                    continue
                func, a, out = rec
                if func is A.mm.default:
                    v = (a[0].to(D) @ a[1].to(D)).float()
                else:
                    v = a[0].to(D).sum(a[1], keepdim=a[2] if len(a) > 2 else False).float()
                r = v.to(out.dtype)
                g = p.grad if p.grad.dim() != 2 or p.grad.shape == out.shape else p.grad.t()
                g, o = g.reshape(out.shape), out.float()
                if not bool(((g == o) | (torch.isnan(g) & torch.isnan(o))).all()):
                    raise RuntimeError("a .grad does not hold the low-dtype result it was traced to")
                fin = torch.isfinite(v) & (v != 0)
                vals += int(fin.sum())
                under += int((fin & (r == 0)).sum())
                over += int((fin & torch.isinf(r)).sum())
                matched += 1
            return vals, under, over, matched

    return Counter


def expected_low_grad_params(names):
    """Linear weights and biases: the parameters whose gradient torch computes in the low dtype."""
    return [n for n in names if not ("embeddings" in n or "layer_norm" in n or "LayerNorm" in n)]


# ----------------------------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------------------------
def lib_meta(torch, transformers):
    return {
        "library": f"transformers {transformers.__version__} / torch {torch.__version__}",
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_num_threads": "1",
        "mkldnn_bf16_supported": str(bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())).lower(),
        "mkldnn_fp16_supported": str(bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())).lower(),
        "format": FORMAT,
    }


def model_meta(model, num_labels):
    cfg = dict(CFG, num_labels=num_labels)
    return {
        "model": "transformers.DistilBertForSequenceClassification",
        "config": json.dumps(cfg, separators=(",", ":"), sort_keys=True),
        "attn_implementation": model.config._attn_implementation +
        " (config._attn_implementation; the dispatch trace has no scaled_dot_product_attention op)",
        "param_init": f"Hugging Face init (_init_weights: Linear/Embedding N(0, 0.02), biases 0, "
                      f"LayerNorm 1/0, word_embeddings row {pad_id()} (padding_idx) = 0) after "
                      f"torch.manual_seed({MODEL_SEED})",
        "param_names": json.dumps(param_names(model), separators=(",", ":")),
        "model_mode": "train (model.train(); every dropout p = 0)",
        "pad_id": str(pad_id()),
    }


def grads_case_list():
    cs = []
    for mode in ["fp32", "bf16", "fp16"]:
        cs.append(dict(name=f"grads_{mode}", kind="grads", mode=mode, labels=2, nopad=False,
                       flags=["padding", "forward_backward"] + ([] if mode == "fp32" else ["autocast"]),
                       comment=f"one forward+backward of the tiny model, {mode}"
                               + ("" if mode == "fp32" else f" ({autocast_string(mode)}, no scaler)")
                               + ", batch 4x16 with padding"))
    cs.append(dict(name="grads_fp32_labels3", kind="grads", mode="fp32", labels=3, nopad=False,
                   flags=["padding", "forward_backward", "labels3"],
                   comment="one forward+backward, fp32, num_labels=3 (3-class cross-entropy)"))
    for mode in ["bf16", "fp16"]:
        cs.append(dict(name=f"grads_{mode}_nopad", kind="grads", mode=mode, labels=2, nopad=True,
                       flags=["no_padding_batch", "forward_backward", "autocast", "mask_none"],
                       comment=f"one forward+backward, {mode}, a batch without padding: transformers "
                               "passes no mask, so the attention softmax runs in the low dtype"))
    return cs


def train_case_list():
    cs = []
    for mode in MODES:
        flags = ["padding", "no_padding_batch", "adamw_torch", "trajectory"]
        if mode != "fp32":
            flags.append("autocast")
        if mode == "fp16":
            flags += ["grad_scaler", "overflow_skip", "scale_growth", "scale_backoff"]
        if mode == "fp16-noscale":
            flags.append("no_scaler")
        comment = {"fp32": "20 AdamW steps, fp32",
                   "bf16": "20 AdamW steps under bf16 CPU autocast",
                   "fp16": "20 AdamW steps under fp16 CPU autocast with GradScaler('cpu') "
                           "(init_scale 2^24, growth_interval 4): skipped steps, backoff and growth",
                   "fp16-noscale": "20 AdamW steps under fp16 CPU autocast without loss scaling"}[mode]
        cs.append(dict(name=f"train_{mode}", kind="train", mode=mode, labels=2, nopad=False,
                       flags=flags, comment=comment))
    return cs


def trainer_case_list():
    cs = []
    for mode in TRAINER_MODES:
        flags = ["padding", "no_padding_batch", "adamw_torch", "trajectory", "weight_decay_groups",
                 "linear_schedule", "warmup", "grad_clipping"]
        if mode == "fp16":
            flags += ["autocast", "grad_scaler", "overflow_skip", "clip_after_unscale"]
        cs.append(dict(name=f"trainer_{mode}", kind="trainer", mode=mode, labels=2, nopad=False,
                       flags=flags,
                       comment=f"20 AdamW steps, {mode}, as HF Trainer optimizes: decay groups, linear "
                               f"schedule with {TRAINER_WARMUP} warmup steps, clip_grad_norm_"
                               f"({TRAINER_MAX_GRAD_NORM})"
                               + (" after GradScaler.unscale_ (init 2^24, interval 4)" if mode == "fp16" else "")))
    return cs


def cfg2_case_list():
    cs = []
    for mode in ["fp32", "bf16", "fp16"]:
        cs.append(dict(name=f"grads_cfg2_{mode}", kind="grads", mode=mode, labels=3, nopad=False,
                       shape="cfg2",
                       flags=["padding", "heavy_padding", "forward_backward", "labels3", "head_dim_12"]
                       + ([] if mode == "fp32" else ["autocast"]),
                       comment=f"one forward+backward of the second configuration (dim 36, 3 heads of "
                               f"12, FFN 50, 3 labels), {mode}, batch 5x20 with 2-20 real tokens"))
    for mode in ["fp32", "bf16", "fp16"]:
        flags = ["heavy_padding", "adamw_torch", "trajectory", "labels3", "head_dim_12"]
        if mode != "fp32":
            flags.append("autocast")
        if mode == "fp16":
            flags += ["grad_scaler", "overflow_skip"]
        cs.append(dict(name=f"trajectory_cfg2_{mode}", kind="train", mode=mode, labels=3, nopad=False,
                       shape="cfg2", flags=flags,
                       comment=f"20 AdamW steps of the second configuration, {mode}"
                               + (" with GradScaler('cpu') (init 2^24, interval 4)" if mode == "fp16" else "")
                               + ", batches 5x20 with 2-8 real tokens"))
    return cs


def accum_case_list():
    cs = []
    for mode in ACCUM_MODES:
        flags = ["padding", "no_padding_batch", "adamw_torch", "trajectory", "gradient_accumulation",
                 "weight_decay_groups", "linear_schedule", "warmup", "grad_clipping"]
        if mode == "fp16":
            flags += ["autocast", "grad_scaler", "overflow_skip", "clip_after_unscale"]
        cs.append(dict(name=f"accum_{mode}", kind="accum", mode=mode, labels=2, nopad=False, flags=flags,
                       comment=f"{ACCUM_STEPS} AdamW steps of {ACCUM_N} accumulated micro-batches each "
                               f"(loss / {ACCUM_N}), {mode}, with HF Trainer's decay groups, linear schedule "
                               f"({ACCUM_WARMUP} warmup steps) and clip_grad_norm_({ACCUM_MAX_GRAD_NORM}) of the "
                               "accumulated gradient"
                               + (" after GradScaler.unscale_ (init 2^24, interval 4; skipped steps)"
                                  if mode == "fp16" else "")))
    return cs


def relu_case_list():
    return [dict(name=f"grads_relu_{mode}", kind="grads", mode=mode, labels=2, nopad=False, shape="relu",
                 flags=["padding", "forward_backward", "relu", "pad_token_id_3"] + ([] if mode == "fp32" else ["autocast"]),
                 comment=f"one forward+backward of a configuration with activation=\"relu\" and "
                         f"pad_token_id 3 (dim 40, 4 heads of 10, FFN 72), {mode}, batch 4x18 padded with 3")
            for mode in ["fp32", "bf16", "fp16"]]


def silu_case_list():
    # not fp16: this configuration's layer-0 q_lin gradients are fp16 subnormals (spacing 2^-24),
    # beyond test_model_golden's relative tolerance (measured: the same 2-subnormal-ulp differences
    # with activation="gelu" on it); the activation's fp16 bits are checked by activations_low
    return [dict(name=f"grads_silu_{mode}", kind="grads", mode=mode, labels=3, nopad=False, shape="silu",
                 flags=["padding", "forward_backward", "silu", "labels3"] + ([] if mode == "fp32" else ["autocast"]),
                 comment=f"one forward+backward of a configuration with activation=\"silu\" (dim 48, 6 heads "
                         f"of 8, FFN 96, 3 labels), {mode}, batch 3x22 with padding")
            for mode in ["fp32", "bf16"]]


def label_smoothing_case_list():
    return [dict(name=f"grads_label_smoothing_{mode}", kind="grads", mode=mode, labels=3, nopad=False, shape="cfg2",
                 label_smoothing=0.1, classifier_scale=150.0,
                 flags=["padding", "forward_backward", "labels3", "label_smoothing"] + ([] if mode == "fp32" else ["autocast"]),
                 comment=f"one forward+backward of the second configuration (3 labels) with HF Trainer's label smoothing "
                         f"(TrainingArguments.label_smoothing_factor=0.1: transformers' LabelSmoother on the logits "
                         f"as the Trainer with accelerate passes them: converted to fp32 after the autocast forward, "
                         f"the smoother outside the autocast), {mode}; the classifier weight x150 after the init so "
                         f"that the logits are of order 1")
            for mode in ["fp32", "bf16", "fp16"]]


def regression_case_list():
    return [dict(name=f"grads_regression_{mode}", kind="grads", mode=mode, labels=1, nopad=False,
                 shape="regression",
                 flags=["padding", "forward_backward", "regression", "mse_loss"] + ([] if mode == "fp32" else ["autocast"]),
                 comment=f"one forward+backward of a regression configuration (num_labels 1, problem_type "
                         f"\"regression\": MSELoss on the one logit, integer labels as targets; dim 24, 3 heads of "
                         f"8, FFN 40), {mode}, batch 5x14 with padding")
            for mode in ["fp32", "bf16", "fp16"]]


def nolayers_case_list():
    return [dict(name=f"grads_nolayers_{mode}", kind="grads", mode=mode, labels=3, nopad=False, shape="nolayers",
                 flags=["padding", "forward_backward", "no_layers", "labels3"] + ([] if mode == "fp32" else ["autocast"]),
                 comment=f"one forward+backward of a configuration with n_layers 0 (the embeddings' LayerNorm "
                         f"output straight into the classification head; dim 20, 3 labels), {mode}, batch 4x12 "
                         f"with padding")
            for mode in ["fp32", "bf16", "fp16"]]


def table_case_list():
    return [dict(name="activations_low", kind="table", mode="bf16", flags=["activation_table"],
                 comment="transformers' FFN activations (" + ", ".join(ACT_TABLE) + ": get_activation) on every bf16 and fp16 "
                         "bit pattern, forward and backward in that dtype")]


ACT_TABLE = ["gelu", "relu", "silu", "gelu_pytorch_tanh", "gelu_new", "quick_gelu", "gelu_fast", "linear", "sigmoid",
             "tanh", "relu6", "leaky_relu", "relu2", "gelu_10", "gelu_accurate", "gelu_python_tanh", "gelu_python",
             "laplace", "hardswish", "mish", "sqrtsoftplus"]


def table_f32_case_list():
    return [dict(name="activations_f32", kind="table_f32", mode="fp32", flags=["activation_f32"],
                 comment="F.gelu on 65,536 fp32 inputs, forward and backward (torch's default: oneDNN's eltwise_gelu_erf "
                         "with the ISA its JIT picks on the generating CPU), and the forward with "
                         "ONEDNN_MAX_CPU_ISA=AVX2 (the kernel of CPUs without AVX-512)")]


AVX2_GELU = ("import sys, numpy as np, torch; torch.set_num_threads(1); "
             "x = torch.from_numpy(np.fromfile(sys.argv[1], dtype=np.float32)); "
             "torch.nn.functional.gelu(x).numpy().tofile(sys.argv[2])")


def run_table_f32(torch, transformers, c, base_meta):
    """fp32 GELU on a fixed set of inputs: y and x.grad for dy (default ISA), y with oneDNN held to AVX2."""
    import subprocess
    import tempfile
    import numpy as np
    g = torch.Generator().manual_seed(GRADS_DATA_SEED)
    q = 16384
    bits = torch.randint(-(1 << 31), (1 << 31) - 1, (q,), generator=g, dtype=torch.int32).view(torch.float32)
    normal = torch.randn(q, generator=g) * 3
    ramp = torch.linspace(-12, 12, q)
    # near 0 (subnormals included) and around the pieces' bounds: |x| = 2^k (k -24..3) times (1 +- tiny)
    small = torch.randn(q // 2, generator=g) * torch.exp2(torch.randint(-140, 4, (q // 2,), generator=g).float())
    k = torch.exp2(torch.randint(-24, 4, (q // 2,), generator=g).float())
    edges = k * (1 + torch.randn(q // 2, generator=g) * 1e-6) * torch.where(torch.rand(q // 2, generator=g) < 0.5, -1.0, 1.0)
    x = torch.cat([bits, normal, ramp, small, edges]).float()
    specials = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 5.542593955993652, 5.5426, -5.5426,
                             1e-40, -1e-40, 3e38, -3e38, 13.3, -13.3, 100.0, -100.0])
    x[:specials.numel()] = specials
    dy = torch.randn(x.numel(), generator=g)
    xx = x.clone().requires_grad_(True)
    y = torch.nn.functional.gelu(xx)
    y.backward(dy)
    with tempfile.TemporaryDirectory() as d:
        xin, yout = os.path.join(d, "x.bin"), os.path.join(d, "y.bin")
        x.numpy().tofile(xin)
        subprocess.run([sys.executable, "-c", AVX2_GELU, xin, yout], check=True,
                       env=dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2"))
        y_avx2 = torch.from_numpy(np.fromfile(yout, dtype=np.float32))
    yd = y.detach()
    minimax = bool((yd.view(torch.int32) != y_avx2.view(torch.int32)).any())
    tensors = {"input.x": x.clone(), "input.dy": dy, "expect.gelu.y": yd.clone(), "expect.gelu.dx": xx.grad.clone(),
               "expect.gelu.y_avx2": y_avx2.clone()}
    meta = dict(base_meta, case=c["name"], comment=c["comment"], flags=",".join(c["flags"]), seed=str(GRADS_DATA_SEED),
                default_forward="minimax" if minimax else "abramowitz_stegun",
                default_forward_means="which oneDNN forward torch ran by default on the generating CPU: minimax "
                                      "(AVX-512 core) when it differs from the AVX2 run somewhere, else "
                                      "abramowitz_stegun")
    return tensors, meta


def run_table(torch, transformers, c, base_meta):
    """Every 16-bit pattern x of bf16 and fp16 through get_activation(name) in that dtype: y and, for an
    incoming gradient dy (fixed random values of the dtype), x.grad = the activation's backward."""
    from transformers.activations import get_activation
    tensors = {}
    g = torch.Generator().manual_seed(GRADS_DATA_SEED)
    for dname_, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        x = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dt)
        dy = (torch.randn(65536, generator=g) * 0.01).to(dt)
        tensors[f"input.{dname_}.x"] = x.clone()
        tensors[f"input.{dname_}.dy"] = dy
        for name in ACT_TABLE:
            xx = x.clone().requires_grad_(True)
            y = get_activation(name)(xx)
            y.backward(dy)
            if y.dtype != dt or xx.grad.dtype != dt:
                die(f"{name} on {dt} gave {y.dtype} / {xx.grad.dtype}", 1)
            tensors[f"expect.{name}.{dname_}.y"] = y.detach().clone()
            tensors[f"expect.{name}.{dname_}.dx"] = xx.grad.detach().clone()
    meta = dict(base_meta, case=c["name"], comment=c["comment"], flags=",".join(c["flags"]), seed=str(GRADS_DATA_SEED),
                activations=",".join(ACT_TABLE),
                dy="torch.randn(65536, generator=torch.Generator().manual_seed(seed)) * 0.01, rounded to the dtype "
                   "(bf16's drawn first)")
    return tensors, meta


# layernorm_rows: (rows, D): tails of D % 8 (7, 17, 513, 3, 60), one chunk of Welford (D <= 128),
# cascades of 2-24 chunks (513-3072), and one row of a single vector (8)
LAYERNORM_SHAPES = [(5, 7), (4, 17), (6, 128), (4, 768), (3, 1000), (3, 513), (2, 3072), (37, 60), (2, 3), (1, 8),
                    (64, 36)]


def layernorm_case_list():
    return [dict(name="layernorm_rows", kind="layernorm", mode="fp32", flags=["layernorm"],
                 comment="torch.nn.functional.layer_norm (eps 1e-12) forward and backward through autograd, fp32, "
                         "on rows of 3 to 3072 values at scales 1e-4 to 1e3 with offsets; mean and rstd from "
                         "torch.native_layer_norm")]


def run_layernorm(torch, transformers, c, base_meta):
    """Per shape (M, D): x, dy, gamma, beta (inputs) and y, mean, rstd, dx, dgamma, dbeta (torch's)."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(GRADS_DATA_SEED)
    tensors = {}
    for k, (M, D) in enumerate(LAYERNORM_SHAPES):
        scale = 10.0 ** (-4 + 7 * k / (len(LAYERNORM_SHAPES) - 1))           # 1e-4 .. 1e3
        offset = (0.0, 1.0, 10.0)[k % 3] * scale
        x = torch.randn(M, D, generator=g) * scale + offset * torch.randn(M, 1, generator=g)
        dy = torch.randn(M, D, generator=g) * 10.0 ** (-3 + (k % 4))
        w = 1 + 0.1 * torch.randn(D, generator=g)
        b = 0.1 * torch.randn(D, generator=g)
        xx, ww, bb = (t.clone().requires_grad_(True) for t in (x, w, b))
        y = F.layer_norm(xx, [D], ww, bb, 1e-12)
        y.backward(dy)
        _, mean, rstd = torch.native_layer_norm(x, [D], w, b, 1e-12)
        key = f"{M}x{D}"
        for name, t in (("x", x), ("dy", dy), ("gamma", w), ("beta", b)):
            tensors[f"input.{key}.{name}"] = t.contiguous()
        for name, t in (("y", y), ("mean", mean.reshape(M)), ("rstd", rstd.reshape(M)), ("dx", xx.grad),
                        ("dgamma", ww.grad), ("dbeta", bb.grad)):
            tensors[f"expect.{key}.{name}"] = t.detach().contiguous()
    meta = dict(base_meta, case=c["name"], comment=c["comment"], flags=",".join(c["flags"]), seed=str(GRADS_DATA_SEED),
                shapes=",".join(f"{m}x{d}" for m, d in LAYERNORM_SHAPES), eps="1e-12")
    return tensors, meta


SINUSOIDAL_SHAPES = [(512, 768), (128, 128), (40, 15), (3, 2)]  # (max_position_embeddings, dim)


def sinusoidal_case_list():
    return [dict(name="sinusoidal_pos", kind="sinusoidal", mode="fp32", flags=["sinusoidal_table"],
                 comment="the position embeddings a DistilBertForSequenceClassification built with "
                         "sinusoidal_pos_embds=True starts from (DistilBertPreTrainedModel._init_weights), per "
                         "(max_position_embeddings, dim)")]


def run_sinusoidal(torch, transformers, c, base_meta):
    """The position table after the model's own init, for each shape; and whether transformers leaves it
    trainable (5.x copies the table into the parameter and keeps requires_grad; 4.x froze it)."""
    tensors = {}
    trainable = set()
    for n_pos, dim in SINUSOIDAL_SHAPES:
        heads = next(h for h in (12, 4, 3, 2, 1) if dim % h == 0)
        cfg = transformers.DistilBertConfig(vocab_size=10, dim=dim, n_layers=1, n_heads=heads, hidden_dim=4,
                                            max_position_embeddings=n_pos, sinusoidal_pos_embds=True)
        torch.manual_seed(0)
        model = transformers.DistilBertForSequenceClassification(cfg)
        w = model.distilbert.embeddings.position_embeddings.weight
        if w.dtype != torch.float32 or tuple(w.shape) != (n_pos, dim):
            die(f"sinusoidal {n_pos}x{dim}: got {w.dtype} {tuple(w.shape)}", 1)
        trainable.add(bool(w.requires_grad))
        tensors[f"expect.pos.{n_pos}x{dim}"] = w.detach().clone()
    if len(trainable) != 1:
        die("sinusoidal: requires_grad differs between shapes", 1)
    meta = dict(base_meta, case=c["name"], comment=c["comment"], flags=",".join(c["flags"]), seed="0",
                shapes=",".join(f"{n}x{d}" for n, d in SINUSOIDAL_SHAPES),
                requires_grad=str(trainable.pop()).lower())
    return tensors, meta


# lr_schedules: transformers.get_scheduler as Trainer.create_scheduler calls it (no scheduler kwargs),
# for every lr_scheduler_type trainbench implements, at (lr, warmup steps, training steps)
SCHEDULE_TYPES = ["linear", "constant", "cosine", "cosine_with_restarts", "polynomial", "constant_with_warmup",
                  "inverse_sqrt"]
SCHEDULE_SETTINGS = [(5e-5, 0, 20), (3e-4, 4, 20), (1e-3, 7, 13), (2e-5, 3, 997), (7e-4, 1, 2), (1e-4, 10, 10)]


def schedules_case_list():
    return [dict(name="lr_schedules", kind="schedules", mode="fp32", flags=["lr_schedules"],
                 comment="the lr of every scheduler step, as transformers.get_scheduler(name, optimizer, "
                         "num_warmup_steps, num_training_steps) computes it, for each lr_scheduler_type trainbench "
                         "implements at several (lr, warmup, training steps)")]


def run_schedules(torch, transformers, c, base_meta):
    """lr.<type>.<i>: F64 (N + 3): get_last_lr() after k = 0..N+2 scheduler steps for SCHEDULE_SETTINGS[i]
    (settings a type's get_scheduler refuses are left out; metadata settings lists them)."""
    tensors, done = {}, []
    for name in SCHEDULE_TYPES:
        for i, (lr, w, n) in enumerate(SCHEDULE_SETTINGS):
            if name == "constant" and w:
                continue  # the Trainer's "constant" takes no warmup (trainbench refuses one)
            p = torch.nn.Parameter(torch.zeros(1))
            opt = torch.optim.SGD([p], lr=lr)
            try:
                sched = transformers.get_scheduler(name, opt, num_warmup_steps=w, num_training_steps=n)
            except ValueError:
                continue
            vals = []
            try:
                for k in range(n + 3):
                    vals.append(float(sched.get_last_lr()[0]))
                    opt.step()
                    sched.step()
            except ZeroDivisionError:  # polynomial with n == w: transformers fails at the step after
                continue
            tensors[f"lr.{name}.{i}"] = torch.tensor(vals, dtype=torch.float64)
            done.append(f"{name}.{i}")
    meta = dict(base_meta, case=c["name"], comment=c["comment"], flags=",".join(c["flags"]), seed="0",
                settings=json.dumps([dict(index=i, lr=lr, warmup_steps=w, training_steps=n)
                                     for i, (lr, w, n) in enumerate(SCHEDULE_SETTINGS)]),
                cases=",".join(done))
    return tensors, meta


def all_cases():
    return (grads_case_list() + train_case_list() + trainer_case_list() + cfg2_case_list() + accum_case_list()
            + relu_case_list() + silu_case_list() + regression_case_list() + nolayers_case_list() + label_smoothing_case_list()
            + table_case_list() + table_f32_case_list() + layernorm_case_list()
            + sinusoidal_case_list() + schedules_case_list())


def forward(torch, model, mode, ids, mask, labels, label_smoothing=0.0, **kw):
    if label_smoothing:
        # as the Trainer runs it with accelerate: labels popped, the model's forward under the
        # autocast and its outputs converted to fp32 (accelerate's convert_outputs_to_fp32 around
        # the autocast forward), then Trainer.compute_loss's LabelSmoother outside the autocast
        # (transformers >= 5: autocast_smart_context_manager is a nullcontext). Measured: the real
        # Trainer (transformers 5.24, accelerate 1.16, bf16=True, use_cpu=True) gives this loss
        from transformers.trainer_pt_utils import LabelSmoother
        with autocast_ctx(torch, mode):
            out = model(input_ids=ids, attention_mask=mask, **kw)
        out["logits"] = out["logits"].float()
        out["loss"] = LabelSmoother(epsilon=label_smoothing)(out, labels)
        return out
    with autocast_ctx(torch, mode):
        return model(input_ids=ids, attention_mask=mask, labels=labels, **kw)


def run_grads(torch, transformers, c, base_meta):
    model = build_model(torch, transformers, c["labels"])
    if c.get("classifier_scale"):  # logits of order 1 instead of ~1e-2 (HF init): every rounding matters
        with torch.no_grad():
            model.classifier.weight.mul_(c["classifier_scale"])
    names = param_names(model)
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids, mask, labels = grads_batch(torch, c["labels"], c["nopad"])

    ls = c.get("label_smoothing", 0.0)
    out = forward(torch, model, c["mode"], ids, mask, labels, label_smoothing=ls)
    # (label smoothing: the model's logits dtype, before accelerate's conversion to fp32)
    logits_dtype = (low_dtype(torch, c["mode"]) or torch.float32) if ls else out.logits.dtype
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    for n in names:
        if grads[n].dtype != torch.float32:
            die(f"{c['name']}: .grad of {n} is {grads[n].dtype}", 1)

    # second pass under the op tracer (and with hidden states / attention probabilities returned):
    # the same numbers must come out, so the trace describes the stored run
    model.zero_grad(set_to_none=True)
    Tracer = make_tracer(torch)
    tf, tb = Tracer(), Tracer()
    counter = make_counter(torch)()
    with tf:
        out2 = forward(torch, model, c["mode"], ids, mask, labels, label_smoothing=ls, output_hidden_states=True,
                       output_attentions=True)
    with counter, tb:
        out2.loss.backward()
    if not (torch.equal(out2.logits, out.logits) and torch.equal(out2.loss, out.loss) and
            all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())):
        die(f"{c['name']}: the traced pass differs from the plain pass", 1)
    if any(r[0].startswith("_scaled_dot_product") or r[0] == "scaled_dot_product_attention"
           for r in tf.rows):
        die(f"{c['name']}: an SDPA kernel ran; expected the eager attention path", 1)
    check_attention_trace(torch, c, tf.rows, tf.masks)

    tensors = {}
    for n in names:
        tensors[f"param.{n}"] = init[n]
        tensors[f"expect.grad.{n}"] = grads[n]
    tensors["input.input_ids"] = ids
    tensors["input.attention_mask"] = mask
    tensors["input.labels"] = labels
    tensors["expect.logits"] = out.logits.detach().float()
    tensors["expect.loss"] = out.loss.detach().float().reshape(())
    for i, h in enumerate(out2.hidden_states):
        tensors[f"expect.hidden_state.{i}"] = h.detach().float()
    for i, a in enumerate(out2.attentions):
        tensors[f"expect.attention.{i}"] = a.detach().float()
    if low_dtype(torch, c["mode"]) is not None:
        pv, pu, po, matched = counter.param_counts([p for _, p in model.named_parameters()])
        if matched != len(expected_low_grad_params(names)):
            die(f"{c['name']}: {matched} parameter-gradient rounding points found, expected "
                f"{len(expected_low_grad_params(names))}", 1)
        for k, v in (("param_values", pv), ("underflow", pu), ("overflow", po),
                     ("act_values", counter.act[0]), ("act_underflow", counter.act[1]),
                     ("act_overflow", counter.act[2])):
            tensors[f"expect.{k}"] = torch.tensor(v, dtype=torch.int64)

    fwd_full, fwd_by_op = summarize_trace(tf.rows)
    bwd_full, bwd_by_op = summarize_trace(tb.rows)
    meta = dict(base_meta)
    meta.update(model_meta(model, c["labels"]))
    meta.update({
        "case": c["name"], "comment": c["comment"], "flags": ",".join(c["flags"]),
        "seed": str(MODEL_SEED), "data_seed": str(GRADS_DATA_SEED),
        "mode": c["mode"], "autocast": autocast_string(c["mode"]),
        "logits_dtype": dname(torch, logits_dtype) +
        " (expect.logits holds them widened exactly to F32)",
        "loss_dtype": dname(torch, out.loss.dtype),
        "lengths": ",".join(str(int(x)) for x in mask.sum(1)),
        "attention_mask_additive": mask_description(torch, tf.masks),
        "attention_scaling": f"scores = matmul(q, k^T) * {attention_scale()!r} (head_dim**-0.5 applied to the "
                             "matmul output, before the mask is added)",
        "op_dtypes_forward": fwd_by_op, "op_dtypes_backward": bwd_by_op,
        "op_trace_forward": fwd_full, "op_trace_backward": bwd_full,
        "batch": f"input_ids[b,0]={CLS_ID}, ids 2..{CFG['vocab_size'] - 1} at 1..L-1, {pad_id()} "
                 "beyond L; labels from the content (make_batch in the generator)",
        "extras": "expect.hidden_state.<i> (embeddings output and each layer's output) and "
                  "expect.attention.<layer> (softmax probabilities, (B,heads,T,T)) come from "
                  "output_hidden_states/output_attentions; all F32 as returned",
    })
    if ls:
        meta["label_smoothing"] = repr(ls)
    if c.get("classifier_scale"):
        meta["classifier_scale"] = repr(c["classifier_scale"])
    if low_dtype(torch, c["mode"]) is not None:
        meta["counters"] = COUNTERS_DOC
        meta["low_grad_params"] = "Linear weights and biases (gradients rounded to the low dtype); " \
                                  "embeddings and LayerNorm gradients are fp32"
    return tensors, meta


def check_attention_trace(torch, c, rows, masks):
    """The scaling is a mul by head_dim**-0.5 (a Python float) right after the QK^T bmm; the mask
    add follows it. A model without layers (n_layers 0) has no attention to check."""
    if CFG["n_layers"] == 0:
        return
    names = [r[0] for r in rows]
    for i, n in enumerate(names):
        if n == "bmm" and i + 1 < len(names) and names[i + 1] == "mul":
            if repr(attention_scale()) not in rows[i + 1][1]:
                die(f"{c['name']}: unexpected attention scaling {rows[i + 1]}", 1)
            break
    else:
        die(f"{c['name']}: no bmm followed by mul (scaling) in the forward trace", 1)
    if c["nopad"] and masks:
        die(f"{c['name']}: a mask was materialized for a batch without padding", 1)
    if not c["nopad"] and not masks:
        die(f"{c['name']}: no additive mask was materialized", 1)


def mask_description(torch, masks):
    if not masks:
        return "none (no padding in the batch: transformers skips the mask; scores go to softmax unchanged)"
    m = masks[0]
    lo = float(m.min())
    if lo != float(torch.finfo(torch.float32).min) or m.dtype != torch.float32:
        die(f"unexpected mask value {lo} dtype {m.dtype}", 1)
    return (f"{lo!r} = torch.finfo(torch.float32).min (-FLT_MAX) at padded keys, 0 elsewhere; "
            f"dtype {dname(torch, m.dtype)} (the dtype of the embeddings output, fp32 in every mode); "
            f"shape ({m.shape[0]},1,{m.shape[2]},{m.shape[3]}) broadcast over heads")


def decay_parameter_names(transformers, model):
    """The real Trainer.get_decay_parameter_names (it does not use self)."""
    return transformers.Trainer.get_decay_parameter_names(None, model)


def clip_model(torch, grads, max_norm, total):
    """schedule.h's account of clip_grad_norm_, checked against torch's own result each step:
    per-tensor norms, their norm, coef = reciprocal(total + f32(1e-6)) * f32(max_norm) clamped
    to 1.0 (all float32)."""
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    t = torch.linalg.vector_norm(norms)
    if bool(torch.isfinite(total)) and not torch.equal(t, total):
        die(f"clip_grad_norm_ total {float(total)!r} != norm of per-tensor norms {float(t)!r}", 1)
    coef = torch.clamp((total + 1e-6).reciprocal() * max_norm, max=1.0)
    return coef


NOISE_PERTURBATIONS = [
    ("reverse", "the examples of every batch in reverse order: the same mean loss and gradients in "
                "exact arithmetic, another summation order in every reduction over the batch"),
    ("ulp", "every initial parameter moved by one fp32 ulp, up or down (torch.Generator seed 9): "
            "a rounding-level difference in the inputs, as two implementations' first steps have"),
]


def noise_run(torch, transformers, c, ids, masks, labels, kind):
    """torch against itself: the train_* loop (AdamW, GradScaler for fp16) under one harmless
    perturbation (NOISE_PERTURBATIONS). Returns (losses, skipped flags, final parameters)."""
    mode = c["mode"]
    model = build_model(torch, transformers, c["labels"])
    if kind == "ulp":
        g = torch.Generator().manual_seed(9)
        with torch.no_grad():
            for p in model.parameters():
                up = torch.rand(p.shape, generator=g) < 0.5
                p.copy_(torch.where(up, torch.nextafter(p, torch.full_like(p, math.inf)),
                                    torch.nextafter(p, torch.full_like(p, -math.inf))))
    rev = (lambda x: x.flip(0)) if kind == "reverse" else (lambda x: x)  # noqa: E731
    params = [p for _, p in model.named_parameters()]
    hp = dict(ADAMW)
    hp["betas"] = tuple(hp["betas"])
    opt = torch.optim.AdamW(params, **hp)
    scaler = torch.amp.GradScaler("cpu", **SCALER) if mode == "fp16" else None
    losses, skipped = [], []
    for s in range(TRAIN_STEPS):
        opt.zero_grad(set_to_none=True)
        out = forward(torch, model, mode, rev(ids[s]), rev(masks[s]), rev(labels[s]))
        losses.append(float(out.loss.detach()))
        before = float(opt.state[params[0]]["step"]) if "step" in opt.state.get(params[0], {}) else 0.0
        if scaler is not None:
            scaler.scale(out.loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            out.loss.backward()
            opt.step()
        after = float(opt.state[params[0]]["step"]) if "step" in opt.state.get(params[0], {}) else 0.0
        skipped.append(after == before)
    return losses, skipped, {n: p.detach().clone() for n, p in model.named_parameters()}


def run_train(torch, transformers, c, base_meta):
    mode = c["mode"]
    low = low_dtype(torch, mode)
    trainer = c["kind"] == "trainer"
    model = build_model(torch, transformers, c["labels"])
    names = param_names(model)
    params = [p for _, p in model.named_parameters()]
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids, masks, labels = train_batches(torch)
    hp = dict(ADAMW)
    hp["betas"] = tuple(hp["betas"])
    if trainer:
        # Trainer.create_optimizer: two groups, decay / no decay (get_decay_parameter_names)
        decay = set(decay_parameter_names(transformers, model))
        groups = [{"params": [p for n, p in model.named_parameters() if n in decay],
                   "weight_decay": hp["weight_decay"]},
                  {"params": [p for n, p in model.named_parameters() if n not in decay],
                   "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, **hp)
        sched = transformers.get_linear_schedule_with_warmup(opt, TRAINER_WARMUP, TRAIN_STEPS)
        no_decay = [n for n in names if n not in decay]
    else:
        opt = torch.optim.AdamW(params, **hp)
        sched = None
    scaler = torch.amp.GradScaler("cpu", **SCALER) if mode == "fp16" else None
    lr_v, clip_norm_v, clip_coef_v = [], [], []

    S = TRAIN_STEPS
    loss_v, scale_v, skipped_v, grad_norm_v = [], [], [], []
    nonfinite_v, zero_v, grad_under_v = [], [], []
    counts = {k: [] for k in ("param_values", "underflow", "overflow", "act_values",
                              "act_underflow", "act_overflow")}
    Counter = make_counter(torch)
    for s in range(S):
        opt.zero_grad(set_to_none=True)
        out = forward(torch, model, mode, ids[s], masks[s], labels[s])
        loss = out.loss
        if loss.dtype != torch.float32:
            die(f"{c['name']}: loss dtype {loss.dtype}", 1)
        loss_v.append(float(loss.detach()))
        steps_before = [float(opt.state[p]["step"]) if p in opt.state else 0.0 for p in params]
        counter = Counter()
        if scaler is not None:
            scale = scaler.get_scale()
            with counter:
                scaler.scale(loss).backward()
        else:
            scale = 1.0
            with counter:
                loss.backward()
        held = [p.grad.detach().clone() for p in params]          # as backward left them (scaled)
        if low is not None:
            pv, pu, po, matched = counter.param_counts(params)
            if matched != len(expected_low_grad_params(names)):
                die(f"{c['name']}: step {s + 1}: {matched} parameter-gradient rounding points found", 1)
            for k, v in (("param_values", pv), ("underflow", pu), ("overflow", po),
                         ("act_values", counter.act[0]), ("act_underflow", counter.act[1]),
                         ("act_overflow", counter.act[2])):
                counts[k].append(v)
        del counter
        if scaler is not None:
            scaler.unscale_(opt)
        if trainer:
            # Trainer._clip_grad_norm -> accelerator.clip_grad_norm_ (unscale_ first, done above)
            # -> torch.nn.utils.clip_grad_norm_
            pre = [p.grad.detach().clone() for p in params]
            total = torch.nn.utils.clip_grad_norm_(params, TRAINER_MAX_GRAD_NORM)
            coef = clip_model(torch, pre, TRAINER_MAX_GRAD_NORM, total)
            if bool(torch.isfinite(total)) and not all(torch.equal(p.grad, g * coef) for p, g in zip(params, pre)):
                die(f"{c['name']}: step {s + 1}: clip_grad_norm_ differs from clip_model", 1)
            clip_norm_v.append(float(total))
            clip_coef_v.append(float(coef))
            lr_v.append(opt.param_groups[0]["lr"])
        grads = [p.grad.detach() for p in params]                 # what the optimizer sees
        scale_v.append(scale)
        nonfinite_v.append(sum(int((~torch.isfinite(g)).sum()) for g in held))
        zero_v.append(sum(int((g == 0).sum()) for g in grads))
        grad_norm_v.append(math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads)))
        if low is not None:
            grad_under_v.append(sum(count_underflow(torch, g, low) for g in grads))
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        steps_after = [float(opt.state[p]["step"]) if p in opt.state else 0.0 for p in params]
        advanced = [a != b for a, b in zip(steps_after, steps_before)]
        if any(advanced) != all(advanced):
            die(f"{c['name']}: step {s + 1}: some parameters stepped and some did not", 1)
        skipped = not advanced[0]
        if scaler is not None:
            inf_seen = nonfinite_v[-1] > 0
            if skipped != inf_seen or (skipped and not scaler.get_scale() < scale):
                die(f"{c['name']}: step {s + 1}: skip bookkeeping disagrees with GradScaler", 1)
        elif skipped:
            die(f"{c['name']}: step {s + 1} skipped without a scaler", 1)
        skipped_v.append(1 if skipped else 0)
        if sched is not None and not skipped:
            sched.step()        # Trainer: only when accelerator.optimizer_step_was_skipped is False

    tensors = {f"param.{n}": init[n] for n in names}
    for n, p in model.named_parameters():
        tensors[f"expect.final.param.{n}"] = p.detach().clone()
    tensors["input.input_ids"] = ids
    tensors["input.attention_mask"] = masks
    tensors["input.labels"] = labels
    tensors["expect.loss"] = torch.tensor(loss_v, dtype=torch.float32)
    tensors["expect.scale"] = torch.tensor(scale_v, dtype=torch.float32)
    tensors["expect.skipped"] = torch.tensor(skipped_v, dtype=torch.uint8)
    tensors["expect.nonfinite"] = torch.tensor(nonfinite_v, dtype=torch.int64)
    tensors["expect.zero_grads"] = torch.tensor(zero_v, dtype=torch.int64)
    tensors["expect.grad_norm"] = torch.tensor(grad_norm_v, dtype=torch.float64).float()
    if low is not None:
        for k, v in counts.items():
            tensors[f"expect.{k}"] = torch.tensor(v, dtype=torch.int64)
        tensors["expect.grad_underflow"] = torch.tensor(grad_under_v, dtype=torch.int64)
    if not trainer:
        # torch-vs-torch noise (what tests/test_model_golden.c scales its trajectory tolerance by)
        n_losses, n_skips, n_l2 = [], [], []
        for kind, _ in NOISE_PERTURBATIONS:
            n_loss, n_skip, n_final = noise_run(torch, transformers, c, ids, masks, labels, kind)
            n_losses.append(n_loss)
            n_skips.append([1 if k else 0 for k in n_skip])
            d2 = sum(float(((n_final[n].double() - p.detach().double()) ** 2).sum())
                     for n, p in model.named_parameters())
            n_l2.append(math.sqrt(d2))
            print(f"    noise {kind}: max |loss diff| {max(abs(a - b) for a, b in zip(n_loss, loss_v)):.3g}, "
                  f"final ||diff|| {n_l2[-1]:.3g}, skips {'same' if n_skips[-1] == skipped_v else n_skips[-1]}")
        tensors["expect.noise.loss"] = torch.tensor(n_losses, dtype=torch.float32)
        tensors["expect.noise.skipped"] = torch.tensor(n_skips, dtype=torch.uint8)
        tensors["expect.noise.final_l2"] = torch.tensor(n_l2, dtype=torch.float64)
    if trainer:
        tensors["expect.lr"] = torch.tensor(lr_v, dtype=torch.float64)
        tensors["expect.clip_total_norm"] = torch.tensor(clip_norm_v, dtype=torch.float32)
        tensors["expect.clip_coef"] = torch.tensor(clip_coef_v, dtype=torch.float32)
        clipped = sum(1 for x in clip_coef_v if x < 1.0)
        if clipped < S // 2:
            die(f"{c['name']}: only {clipped} of {S} steps clipped; lower TRAINER_MAX_GRAD_NORM", 1)

    meta = dict(base_meta)
    meta.update(model_meta(model, c["labels"]))
    meta.update({
        "case": c["name"], "comment": c["comment"], "flags": ",".join(c["flags"]),
        "seed": str(MODEL_SEED), "data_seed": str(TRAIN_DATA_SEED),
        "mode": mode, "autocast": autocast_string(mode),
        "steps": str(S), "nopad_step": str(TRAIN_NOPAD_STEP) if TRAIN_NOPAD_STEP else "none",
        "optimizer": "adamw_torch",
        "hparams": json.dumps(ADAMW, separators=(",", ":"), sort_keys=True),
        "param_groups": ("hf_trainer: weight_decay on every parameter except these (Trainer."
                         "get_decay_parameter_names): " + ",".join(no_decay)) if trainer else
                        "one group with every parameter (weight decay on all, unlike HF Trainer, "
                        "which exempts biases and LayerNorm weights)",
        "grad_scaler": json.dumps(SCALER, separators=(",", ":"), sort_keys=True)
        if scaler is not None else "none",
        "step_protocol": (STEP_PROTOCOL_TRAINER if trainer else
                          STEP_PROTOCOL_SCALER if scaler is not None else STEP_PROTOCOL),
        "counters": COUNTERS_DOC,
        "final_scale": repr(scaler.get_scale()) if scaler is not None else "none",
        "skipped_steps": ",".join(str(i + 1) for i, k in enumerate(skipped_v) if k) or "none",
        "lengths": ";".join(",".join(str(int(x)) for x in masks[s].sum(1)) for s in range(S)),
    })
    if not trainer:
        meta["noise_perturbation"] = " | ".join(f"{i}: {k}: {d}" for i, (k, d) in enumerate(NOISE_PERTURBATIONS)) + (
            " || row i of expect.noise.loss (P,S) / expect.noise.skipped (P,S) / expect.noise.final_l2 (P) "
            "= that perturbed torch run's per-step loss, skips, ||final parameters - expect.final.param|| "
            "(float64)")
    if trainer:
        meta["lr_schedule"] = json.dumps({"type": "linear", "warmup_steps": TRAINER_WARMUP,
                                          "training_steps": S}, separators=(",", ":"), sort_keys=True)
        meta["max_grad_norm"] = repr(TRAINER_MAX_GRAD_NORM)
        meta["clipped_steps"] = ",".join(str(i + 1) for i, x in enumerate(clip_coef_v) if x < 1.0)
    return tensors, meta


def run_accum(torch, transformers, c, base_meta):
    """Gradient accumulation as a plain PyTorch loop (what HF Trainer does when it divides the
    loss by gradient_accumulation_steps; STEP_PROTOCOL_ACCUM): optimizer step s consumes the
    micro-batches s*N .. s*N+N-1 of the train_* stream, each backward of (loss / N) (times the
    scale) accumulates into .grad, then unscale_, clip_grad_norm_, optimizer and scaler step once,
    and the scheduler steps unless the scaler skipped."""
    mode = c["mode"]
    N, S = ACCUM_N, ACCUM_STEPS
    model = build_model(torch, transformers, c["labels"])
    names = param_names(model)
    params = [p for _, p in model.named_parameters()]
    init = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids, masks, labels = train_batches(torch, S * N)
    hp = dict(ADAMW)
    hp["betas"] = tuple(hp["betas"])
    decay = set(decay_parameter_names(transformers, model))
    groups = [{"params": [p for n, p in model.named_parameters() if n in decay], "weight_decay": hp["weight_decay"]},
              {"params": [p for n, p in model.named_parameters() if n not in decay], "weight_decay": 0.0}]
    no_decay = [n for n in names if n not in decay]
    opt = torch.optim.AdamW(groups, **hp)
    sched = transformers.get_linear_schedule_with_warmup(opt, ACCUM_WARMUP, S)
    scaler = torch.amp.GradScaler("cpu", **SCALER) if mode == "fp16" else None
    loss_v, micro_v, scale_v, skipped_v, lr_v, clip_norm_v, clip_coef_v, nonfinite_v = [], [], [], [], [], [], [], []
    opt.zero_grad(set_to_none=True)
    for s in range(S):
        scale = scaler.get_scale() if scaler is not None else 1.0
        tr_loss = torch.zeros((), dtype=torch.float32)   # the Trainer's tr_loss over this step
        for k in range(N):
            i = s * N + k
            out = forward(torch, model, mode, ids[i], masks[i], labels[i])
            if out.loss.dtype != torch.float32:
                die(f"{c['name']}: loss dtype {out.loss.dtype}", 1)
            micro_v.append(float(out.loss.detach()))
            loss = out.loss / N
            tr_loss += loss.detach()
            (scaler.scale(loss) if scaler is not None else loss).backward()
        loss_v.append(float(tr_loss))
        nonfinite_v.append(sum(int((~torch.isfinite(p.grad)).sum()) for p in params))
        steps_before = [float(opt.state[p]["step"]) if p in opt.state else 0.0 for p in params]
        if scaler is not None:
            scaler.unscale_(opt)
        pre = [p.grad.detach().clone() for p in params]
        total = torch.nn.utils.clip_grad_norm_(params, ACCUM_MAX_GRAD_NORM)
        coef = clip_model(torch, pre, ACCUM_MAX_GRAD_NORM, total)
        if bool(torch.isfinite(total)) and not all(torch.equal(p.grad, g * coef) for p, g in zip(params, pre)):
            die(f"{c['name']}: step {s + 1}: clip_grad_norm_ differs from clip_model", 1)
        clip_norm_v.append(float(total))
        clip_coef_v.append(float(coef))
        lr_v.append(opt.param_groups[0]["lr"])
        scale_v.append(scale)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        steps_after = [float(opt.state[p]["step"]) if p in opt.state else 0.0 for p in params]
        advanced = [a != b for a, b in zip(steps_after, steps_before)]
        if any(advanced) != all(advanced):
            die(f"{c['name']}: step {s + 1}: some parameters stepped and some did not", 1)
        skipped = not advanced[0]
        if scaler is not None:
            if skipped != (nonfinite_v[-1] > 0) or (skipped and not scaler.get_scale() < scale):
                die(f"{c['name']}: step {s + 1}: skip bookkeeping disagrees with GradScaler", 1)
        elif skipped:
            die(f"{c['name']}: step {s + 1} skipped without a scaler", 1)
        skipped_v.append(1 if skipped else 0)
        if not skipped:
            sched.step()
        opt.zero_grad(set_to_none=True)                  # Trainer: model.zero_grad()
    if scaler is not None and not any(skipped_v):
        die(f"{c['name']}: no step skipped; the case must show a skip", 1)
    clipped = sum(1 for x in clip_coef_v if x < 1.0)
    if not 0 < clipped < S:
        die(f"{c['name']}: {clipped} of {S} steps clipped; the case must clip some steps and not others", 1)

    tensors = {f"param.{n}": init[n] for n in names}
    for n, p in model.named_parameters():
        tensors[f"expect.final.param.{n}"] = p.detach().clone()
    tensors["input.input_ids"] = ids
    tensors["input.attention_mask"] = masks
    tensors["input.labels"] = labels
    tensors["expect.loss"] = torch.tensor(loss_v, dtype=torch.float32)
    tensors["expect.micro_loss"] = torch.tensor(micro_v, dtype=torch.float32)
    tensors["expect.scale"] = torch.tensor(scale_v, dtype=torch.float32)
    tensors["expect.skipped"] = torch.tensor(skipped_v, dtype=torch.uint8)
    tensors["expect.nonfinite"] = torch.tensor(nonfinite_v, dtype=torch.int64)
    tensors["expect.lr"] = torch.tensor(lr_v, dtype=torch.float64)
    tensors["expect.clip_total_norm"] = torch.tensor(clip_norm_v, dtype=torch.float32)
    tensors["expect.clip_coef"] = torch.tensor(clip_coef_v, dtype=torch.float32)
    meta = dict(base_meta)
    meta.update(model_meta(model, c["labels"]))
    meta.update({
        "case": c["name"], "comment": c["comment"], "flags": ",".join(c["flags"]),
        "seed": str(MODEL_SEED), "data_seed": str(TRAIN_DATA_SEED),
        "mode": mode, "autocast": autocast_string(mode),
        "steps": str(S), "gradient_accumulation_steps": str(N),
        "nopad_step": f"micro-batch {TRAIN_NOPAD_STEP}" if TRAIN_NOPAD_STEP else "none",
        "optimizer": "adamw_torch",
        "hparams": json.dumps(ADAMW, separators=(",", ":"), sort_keys=True),
        "param_groups": "hf_trainer: weight_decay on every parameter except these (Trainer."
                        "get_decay_parameter_names): " + ",".join(no_decay),
        "grad_scaler": json.dumps(SCALER, separators=(",", ":"), sort_keys=True) if scaler is not None else "none",
        "step_protocol": STEP_PROTOCOL_ACCUM,
        "final_scale": repr(scaler.get_scale()) if scaler is not None else "none",
        "skipped_steps": ",".join(str(i + 1) for i, k in enumerate(skipped_v) if k) or "none",
        "lr_schedule": json.dumps({"type": "linear", "warmup_steps": ACCUM_WARMUP, "training_steps": S},
                                  separators=(",", ":"), sort_keys=True),
        "max_grad_norm": repr(ACCUM_MAX_GRAD_NORM),
        "clipped_steps": ",".join(str(i + 1) for i, x in enumerate(clip_coef_v) if x < 1.0),
        "lengths": ";".join(",".join(str(int(x)) for x in masks[i].sum(1)) for i in range(S * N)),
        "tensors": "input.* (S*N, B, T): micro-batch k of optimizer step s is row s*N+k; expect.micro_loss "
                   "(S*N) each micro-batch's loss; expect.loss (S) the float32 sum of loss_k / N in order "
                   "(the Trainer's tr_loss of the step: the mean it logs); expect.nonfinite: inf/NaN values "
                   "in the accumulated .grad before unscale_ (found_inf); expect.lr, expect.clip_total_norm, "
                   "expect.clip_coef as in trainer_*",
    })
    return tensors, meta


STEP_PROTOCOL_ACCUM = (
    "plain PyTorch gradient accumulation (HF Trainer with loss / gradient_accumulation_steps): "
    "opt.zero_grad(set_to_none=True); for s in 1..S: [fp16: scale[s] = scaler.get_scale()]; tr = 0 (float32); "
    "for k in 0..N-1: i = (s-1)*N + k; with autocast: out = model(input_ids[i], attention_mask[i], "
    "labels=labels[i]); loss = out.loss / N; tr += loss; (scaler.scale(loss) | loss).backward() "
    "(AccumulateGrad: .grad = g_0, then .grad += g_k); expect.loss[s] = tr; [fp16: scaler.unscale_(opt)]; "
    "expect.clip_total_norm[s] = clip_grad_norm_(params, max_grad_norm); expect.lr[s] = "
    "opt.param_groups[0]['lr']; (scaler.step(opt); scaler.update() | opt.step()); if the step was not "
    "skipped: scheduler.step(); opt.zero_grad(set_to_none=True)")
STEP_PROTOCOL = ("for s in 1..20: opt.zero_grad(set_to_none=True); with autocast: out = "
                 "model(input_ids[s-1], attention_mask[s-1], labels=labels[s-1]); out.loss.backward(); "
                 "opt.step()")
STEP_PROTOCOL_SCALER = ("for s in 1..20: opt.zero_grad(set_to_none=True); scale[s] = scaler.get_scale(); "
                        "with autocast: out = model(...batch s...); scaler.scale(out.loss).backward(); "
                        "scaler.unscale_(opt); scaler.step(opt); scaler.update()")
STEP_PROTOCOL_TRAINER = (
    "as HF Trainer (inner loop of _inner_training_loop): for s in 1..20: opt.zero_grad(set_to_none="
    "True); [fp16: scale[s] = scaler.get_scale()]; with autocast: out = model(...batch s...); "
    "(scaler.scale(out.loss) | out.loss).backward(); [fp16: scaler.unscale_(opt)]; expect.clip_total_norm"
    "[s] = clip_grad_norm_(params, max_grad_norm); expect.lr[s] = opt.param_groups[0]['lr']; "
    "(scaler.step(opt); scaler.update() | opt.step()); if the step was not skipped: scheduler.step()")
COUNTERS_DOC = ("backward of loss*scale (src/model/amp.h): param_values/underflow/overflow = at the parameter-"
                "gradient rounding points (the fp32 value of each Linear weight/bias gradient before "
                "torch rounds it to the low dtype, recomputed in float64 from torch's own low-dtype "
                "GEMM/sum inputs and rounded to fp32): finite nonzero values / those that round to +-0 "
                "/ to +-inf; act_values/act_underflow/act_overflow = the same, measured exactly, at "
                "every fp32 -> low cast of a gradient in the backward (logits, residual branches, "
                "scores + mask). Train cases also: nonfinite = inf/NaN values in .grad right after "
                "backward (what GradScaler tests); grad_underflow = values g of the fp32 .grad the "
                "optimizer sees (after unscale_) with g != 0 and g.to(low) == 0 (what loss scaling "
                "kept alive); zero_grads = values == 0 in that .grad; grad_norm = sqrt(sum g^2) of "
                "that .grad in float64, stored F32. All summed over all parameters.")


def count_underflow(torch, g, low):
    return int(((g != 0) & (g.to(low) == 0)).sum())


# ----------------------------------------------------------------------------------------------
# --facts: the measurements behind MODEL_SEMANTICS.md (printed, nothing written)
# ----------------------------------------------------------------------------------------------
def facts(torch, transformers):
    from torch.utils._python_dispatch import TorchDispatchMode
    A = torch.ops.aten
    D = torch.float64

    def bits(t):
        return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16).long()

    def exact_frac(out, ref):
        return float((bits(out) == bits(ref)).float().mean())

    for mode, nopad in [("fp32", False), ("bf16", False), ("fp16", False), ("bf16", True),
                        ("fp16", True)]:
        stats = {}

        def add(key, out, ref):
            n, s = stats.get(key, (0, 0.0))
            stats[key] = (n + out.numel(), s + exact_frac(out, ref) * out.numel())

        class Cap(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                r = lambda x, dt: x.to(torch.float32).to(dt)  # noqa: E731 (fp64 -> fp32 -> dt)
                if func is A.addmm.default:
                    b, x, w = args
                    add(f"addmm {dname(torch, out.dtype)}: round(b + x@w) (one rounding, bias in fp32)",
                        out, r(b.to(D) + x.to(D) @ w.to(D), out.dtype))
                elif func in (A.mm.default, A.bmm.default):
                    add(f"{func.__name__.split('.')[0]} {dname(torch, out.dtype)}: round(exact)",
                        out, r(args[0].to(D) @ args[1].to(D), out.dtype))
                elif func is A.sum.dim_IntList and out.is_floating_point():
                    add(f"sum {dname(torch, out.dtype)}: round(exact)", out,
                        r(args[0].to(D).sum(args[1], keepdim=args[2]), out.dtype))
                elif func is A.gelu.default:
                    x = args[0].to(D)
                    add(f"gelu {dname(torch, out.dtype)}: round(0.5x(1+erf(x/sqrt2)))", out,
                        r(0.5 * x * (1 + torch.erf(x / math.sqrt(2))), out.dtype))
                elif func is A.gelu_backward.default:
                    g, x = args[0].to(D), args[1].to(D)
                    ref = g * (0.5 * (1 + torch.erf(x / math.sqrt(2))) +
                               x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
                    add(f"gelu_backward {dname(torch, out.dtype)}: round(exact)", out, r(ref, out.dtype))
                elif func is A._softmax.default:
                    add(f"softmax {dname(torch, out.dtype)}: round(exact)", out,
                        r(torch.softmax(args[0].to(D), -1), out.dtype))
                elif func is A._softmax_backward_data.default:
                    g, y = args[0].to(D), args[1].to(D)
                    add(f"softmax_backward {dname(torch, out.dtype)}: round(y*(g - sum(g*y)))", out,
                        r(y * (g - (g * y).sum(-1, keepdim=True)), out.dtype))
                elif func is A.native_layer_norm.default:
                    x, _, w, b, _ = args
                    y, mu, rs = out
                    ref = ((x - mu) * rs).double() * w.double() + b.double()   # fma((x-mu)*rstd, w, b)
                    add("layer_norm y == fma((x-mean)*rstd, w, b) given torch's mean/rstd", y, ref.float())
                elif func is A.mul.Tensor and isinstance(args[1], float):
                    add(f"mul by {args[1]} {dname(torch, out.dtype)}: exact", out,
                        r(args[0].to(D) * args[1], out.dtype))
                return out

        model = build_model(torch, transformers, 2)
        ids, mask, labels = grads_batch(torch, 2, nopad)
        # non-zero biases and LayerNorm affine so the bias paths are exercised
        with torch.no_grad():
            gen = torch.Generator().manual_seed(5)
            for n, p in model.named_parameters():
                if n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n:
                    p.add_(torch.randn(p.shape, generator=gen) * 0.1)
        with Cap():
            out = forward(torch, model, mode, ids, mask, labels)
            out.loss.backward()
        print(f"== {mode}{' no padding' if nopad else ''}: share of elements bit-identical "
              "to the formula (inputs as torch saw them; exact in fp64, then rounded)")
        for k in sorted(stats):
            n, s = stats[k]
            print(f"  {k:70s} {s / n:.5f} of {n}")

    # the forward contract of MODEL_SEMANTICS.md section 3, re-implemented with float64 math and
    # explicit roundings, against the real model
    for mode, nopad in [("fp32", False), ("bf16", False), ("fp16", False), ("bf16", True),
                        ("fp16", True)]:
        model = build_model(torch, transformers, 2)
        with torch.no_grad():
            gen = torch.Generator().manual_seed(5)
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        ids, mask, labels = grads_batch(torch, 2, nopad)
        with torch.no_grad():
            out = forward(torch, model, mode, ids, mask, labels, output_hidden_states=True)
            ref = contract_forward(torch, model, low_dtype(torch, mode), ids, mask, labels)
        same = [float((bits(a.float()) == bits(b.float())).float().mean())
                for a, b in zip(list(out.hidden_states) + [out.logits, out.loss], ref)]
        diff = max(float((a.float() - b.float()).abs().max())
                   for a, b in zip(list(out.hidden_states) + [out.logits, out.loss], ref))
        lo = low_dtype(torch, mode) or torch.float32
        ulp = int((bits(out.logits.to(lo)) - bits(ref[-2].float().to(lo))).abs().max())
        print(f"== contract forward vs torch, {mode}{' no padding' if nopad else ''}: bit-identical "
              f"share of hidden_state.0/1/2, logits, loss = {', '.join(f'{x:.3f}' for x in same)}; "
              f"max |diff| {diff:.3g}; logits differ by at most {ulp} ulp of {dname(torch, lo)}")

    # backward accumulation order into a tensor used by several ops
    model = build_model(torch, transformers, 2)
    ids, mask, labels = grads_batch(torch, 2)
    order = []
    for n, mod in model.named_modules():
        if isinstance(mod, (torch.nn.Linear, torch.nn.LayerNorm)):
            mod.register_full_backward_hook(lambda m, gi, go, n=n: order.append(n))
    out = forward(torch, model, "fp32", ids, mask, labels)
    out.loss.backward()
    print("== backward order of Linear/LayerNorm modules:")
    print("  " + ", ".join(n.replace("distilbert.transformer.", "") for n in order))
    # accumulation order of the gradient of a block's input (residual + three projections)
    ids, mask, labels = grads_batch(torch, 2)
    for mode in ["fp32", "bf16", "fp16"]:
        model = build_model(torch, transformers, 2)
        got = {}
        blk = model.distilbert.transformer.layer[1]
        for nm in ["q_lin", "k_lin", "v_lin"]:
            getattr(blk.attention, nm).register_full_backward_hook(
                lambda m, gi, go, nm=nm: got.__setitem__(nm, gi[0].clone()))
        blk.sa_layer_norm.register_full_backward_hook(lambda m, gi, go: got.__setitem__("res", gi[0].clone()))
        blk.register_full_backward_hook(lambda m, gi, go: got.__setitem__("total", gi[0].clone()))
        forward(torch, model, mode, ids, mask, labels).loss.backward()
        r, v, k, q = got["res"], got["v_lin"], got["k_lin"], got["q_lin"]
        print(f"== {mode}: d(block input) == ((d_residual + d_v) + d_k) + d_q in fp32:",
              torch.equal(got["total"], ((r + v) + k) + q), "| ((d_res + d_q) + d_k) + d_v:",
              torch.equal(got["total"], ((r + q) + k) + v))
    # embedding backward
    g = torch.randn(BATCH, SEQ, 32, generator=torch.Generator().manual_seed(3))
    W = torch.nn.Parameter(torch.zeros(64, 32))
    torch.nn.functional.embedding(ids, W, padding_idx=PAD_ID).backward(g)
    seq = torch.zeros(64, 32)
    for b in range(BATCH):
        for t in range(SEQ):
            i = int(ids[b, t])
            if i != PAD_ID:
                seq[i] += g[b, t]
    print("== word-embedding grad == fp32 accumulation in (b, t) order, padding row untouched:",
          torch.equal(seq, W.grad))
    P = torch.nn.Parameter(torch.zeros(32, 32))
    x = torch.zeros(BATCH, SEQ, 32, requires_grad=True)
    (x + torch.nn.functional.embedding(torch.arange(SEQ)[None], P)).backward(g)
    s = g[0].clone()
    for b in range(1, BATCH):
        s = s + g[b]
    print("== position-embedding grad rows == ((g[0]+g[1])+g[2])+g[3]:", torch.equal(P.grad[:SEQ], s))
    # the additive mask saturates to -FLT_MAX
    fmin = torch.finfo(torch.float32).min
    sc = torch.tensor([0.0, 1e30, -1e30, 2.0 ** 103], dtype=torch.float32)
    print("== score + finfo(f32).min for scores 0, 1e30, -1e30, 2^103:", (sc + fmin).tolist())


def contract_forward(torch, model, low, ids, mask, labels):
    """MODEL_SEMANTICS.md section 3 in float64 with explicit roundings: F = round to fp32,
    R = round to the low dtype (fp32 mode: F). Returns hidden states 0..L, logits, loss."""
    D = torch.float64
    F = lambda x: x.float().double()                                          # noqa: E731
    R = (lambda x: x.float().to(low).double()) if low is not None else F      # noqa: E731
    P = {n: p.detach().double() for n, p in model.named_parameters()}
    cfg = model.config
    B, T = ids.shape
    H, dh = cfg.n_heads, cfg.dim // cfg.n_heads

    def lin(x, name):                    # addmm: one rounding of the fp32 accumulation
        return R(R(P[name + ".bias"]) + R(x) @ R(P[name + ".weight"]).t())

    def ln(x, name):                     # fp32 LayerNorm, eps 1e-12, biased variance
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return F((x - mu) / torch.sqrt(var + 1e-12) * P[name + ".weight"] + P[name + ".bias"])

    e = F(P["distilbert.embeddings.word_embeddings.weight"][ids] +
          P["distilbert.embeddings.position_embeddings.weight"][:T][None])
    h = ln(e, "distilbert.embeddings.LayerNorm")
    hs = [h]
    padded = bool((mask == 0).any())
    add_mask = torch.where(mask[:, None, None, :] == 1, 0.0, float(torch.finfo(torch.float32).min)).to(D)
    for i in range(cfg.n_layers):
        pre = f"distilbert.transformer.layer.{i}."
        q, k, v = (lin(h, pre + f"attention.{n}_lin").view(B, T, H, dh).transpose(1, 2) for n in "qkv")
        s = R(R(q @ k.transpose(2, 3)) * dh ** -0.5)        # bmm rounded, then * 0.25 in low
        if padded:
            s = F(s + add_mask)                               # promotes to fp32
            p = F(torch.softmax(s, -1))
        else:
            p = R(torch.softmax(s, -1))                       # softmax in the scores' dtype
        ctx = R(R(p) @ v).transpose(1, 2).reshape(B, T, cfg.dim)
        h = ln(F(lin(ctx, pre + "attention.out_lin") + h), pre + "sa_layer_norm")
        a = lin(h, pre + "ffn.lin1")
        g = (R(torch.relu(a)) if cfg.activation == "relu" else R(a / (1 + torch.exp(-a))) if cfg.activation == "silu"
             else R(0.5 * a * (1 + torch.erf(a / math.sqrt(2)))))
        h = ln(F(lin(g, pre + "ffn.lin2") + h), pre + "output_layer_norm")
        hs.append(h)
    x = R(torch.relu(lin(h[:, 0], "pre_classifier")))
    logits = lin(x, "classifier")
    logp = F(torch.log_softmax(logits, -1))                   # fp32 (widened logits)
    loss = F(-logp[torch.arange(B), labels].mean())
    return hs + [logits, loss]


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reference/golden", help="golden root (default reference/golden)")
    ap.add_argument("--only", default="", help="comma list of case names (or prefixes: grads, train)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate in memory and compare with the files on disk (exit 1 on difference)")
    ap.add_argument("--facts", action="store_true",
                    help="print the measurements quoted in MODEL_SEMANTICS.md; write nothing")
    args = ap.parse_args()

    torch, transformers = import_libraries()
    torch.set_num_threads(1)   # reductions and GEMM blocking then do not depend on cores
    transformers.logging.set_verbosity_error()
    if args.facts:
        facts(torch, transformers)
        return

    cases = all_cases()
    only = [s for s in args.only.split(",") if s]
    if only:
        known = {c["name"] for c in cases}
        for s in only:
            if s not in known and s not in ("grads", "train", "trainer", "cfg2", "accum", "relu", "silu", "regression", "nolayers", "table",
                                            "layernorm", "sinusoidal", "schedules", "label_smoothing"):
                die(f"--only: unknown case '{s}' (allowed: grads, train, trainer, cfg2, accum, relu, silu, regression, nolayers, table, "
                    f"layernorm, sinusoidal, schedules, "
                    f"{', '.join(sorted(known))})")
        # a group name selects the cases of that kind, shape or flag (relu, silu, regression,
        # label_smoothing are flags of their cases)
        cases = [c for c in cases if c["name"] in only or c["kind"] in only or c.get("shape") in only
                 or any(f in only for f in c.get("flags", []))]

    goldens = golden_io.Goldens(PROG, __file__, os.path.join(args.out, "MANIFEST.tsv"),
                                check=args.check)
    base_meta = dict(lib_meta(torch, transformers), generator=goldens.generator)
    for c in cases:
        use_shape(c.get("shape", "tiny"))
        run = (run_grads if c["kind"] == "grads" else run_accum if c["kind"] == "accum"
               else run_table if c["kind"] == "table" else run_table_f32 if c["kind"] == "table_f32"
               else run_layernorm if c["kind"] == "layernorm"
               else run_sinusoidal if c["kind"] == "sinusoidal"
               else run_schedules if c["kind"] == "schedules" else run_train)
        tensors, meta = run(torch, transformers, c, base_meta)
        if c["kind"] in ("train", "trainer", "accum"):
            t = tensors
            print(f"  {c['name']}: loss {t['expect.loss'][0]:.6f} -> {t['expect.loss'][-1]:.6f}; "
                  f"skipped {meta['skipped_steps']}; scale {[float(x) for x in t['expect.scale']]}")
            if "expect.underflow" in t:
                print(f"    underflow {t['expect.underflow'].tolist()}")
        path = os.path.join(args.out, "model", c["name"] + ".safetensors")
        blob = golden_io.safetensors_bytes(torch, tensors, meta)
        goldens.put(path, blob, meta["library"], meta["seed"])
    print(f"total {goldens.total} bytes in {'checked' if args.check else 'written'} files")
    if args.check:
        goldens.finish_check()
        return
    # manifest: this run's rows replace those of the same files; of this generator's other rows,
    # those of model files it no longer makes are dropped (the other generators' rows are kept,
    # e.g. gen_fingerprint_goldens.py's model/train_*_<optimizer> files)
    current = {golden_io.repo_path(os.path.join(args.out, "model", c["name"] + ".safetensors"))
               for c in all_cases()}
    n = goldens.write_manifest(stale=lambda f: f not in current)
    print(f"wrote {goldens.manifest_path} ({n} rows)")


if __name__ == "__main__":
    main()

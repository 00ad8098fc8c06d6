#!/usr/bin/env python3
"""Validate a Python optimizer against trainbench's optimizer goldens with `trainbench check`.

    ~/.cache/trainbench-venv/bin/python reference/validate_python.py \
        --optimizer torch.optim:AdamW --kwargs '{"foreach": true}' \
        --goldens reference/golden/optim/adamw_torch --trainbench build/trainbench

For every golden case in --goldens (one optimizer's folder) it drives the optimizer exactly as
reference/gen_optim_goldens.py drove the library that made the golden:
    torch.set_num_threads(1); p = torch.nn.Parameter(input.param.clone())
    opt = Class([p], **kwargs)      kwargs = the golden's hparams (+ --kwargs, - --drop)
    for t in 1..T: p.grad = input.grads[t-1] (widened to float32).clone(); opt.step()
and at each checked step writes p and every entry of opt.state[p] (under the optimizer's own
keys; Python ints as 0-d int64) as expect.step{t}.param / expect.step{t}.state.<key> into
<out>/<case>.safetensors. Then it runs `trainbench check GOLDEN CANDIDATE` per case (the golden's
own tolerances: src/validate/conform.c) and prints one summary row per case.

Hyperparameters: the goldens store the constructor kwargs under the library's own names. When
the class is the other Adafactor dialect than the golden's (torch.optim.Adafactor on
`adafactor` goldens, transformers' Adafactor on `adafactor_torch` goldens), --translate auto
(default) maps them to the closest meaning and prints every mapping and every setting with no
equivalent, so a failure reflects the algorithms, not a missing kwarg. --params-only writes
only the parameters and checks only expect.step*.param (the dialects keep differently named
state, which `check` would report as unusable input, exit 2).

Per case the verdict is PASS / FAIL (check's exit 0 / 1), ERROR (the optimizer raised, e.g. it
refuses the golden's hyperparameters: a failure) or UNUSABLE (check's exit 2: the candidate lacks
a golden tensor or has another dtype/shape; the first problem is shown). --check-args passes
flags to check (e.g. '--rtol 1e-4 --atol 1e-7' instead of the golden's tolerances).
Exit 0 when every case passes, 1 when some case fails or errs, 2 on unusable input (bad flags,
an import error, a golden folder without goldens, or some case UNUSABLE).
Needs torch and safetensors (the venv of reference/README.md); writes only under --out.
"""
import argparse
import functools
import glob
import importlib
import inspect
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_io  # noqa: E402 - die, optimizer state snapshots shared by reference/

die = functools.partial(golden_io.die, "validate_python")
TORCH_F32_EPS = 2.0 ** -23  # torch.finfo(torch.float32).eps: what torch's Adafactor uses for eps1=None


def load_class(spec):
    if ":" not in spec:
        die(f"--optimizer must be module:Class (e.g. torch.optim:AdamW), got '{spec}'")
    mod_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - report any import failure
        die(f"--optimizer: cannot import module '{mod_name}': {e}")
    for part in attr.split("."):
        if not hasattr(obj, part):
            die(f"--optimizer: module '{mod_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        die(f"--optimizer: '{spec}' is not a class")
    return obj


def dialect_of(cls):
    """Which Adafactor dialect a class implements, by where it lives (None: not an Adafactor we know)."""
    mod = getattr(cls, "__module__", "")
    if cls.__name__ == "Adafactor" and mod.startswith("transformers"):
        return "adafactor"          # the golden folder name of transformers' Adafactor
    if cls.__name__ == "Adafactor" and mod.startswith("torch.optim"):
        return "adafactor_torch"
    return None


def translate_hf_to_torch(hp):
    """transformers Adafactor hparams -> torch.optim.Adafactor kwargs of the closest meaning."""
    kw, notes = {}, []
    if hp.get("relative_step"):
        if hp.get("warmup_init"):
            notes.append("relative_step+warmup_init (rho = min(1e-6*t, 1/sqrt(t))): no torch equivalent; "
                         "lr=1e-2 (rho = min(1e-2, 1/sqrt(t)))")
        else:
            notes.append("relative_step (rho = min(1e-2, 1/sqrt(t))) -> lr=1e-2 (torch: rho = min(lr, 1/sqrt(t)))")
        kw["lr"] = 1e-2
    else:
        kw["lr"] = hp["lr"]
        notes.append(f"lr={hp['lr']} -> lr (torch's rho = min(lr, 1/sqrt(t)) = lr for t <= 1/lr^2)")
    if not hp.get("scale_parameter"):
        notes.append("scale_parameter=False: no torch equivalent (torch always scales the step by "
                     "max(eps2, RMS(p)))")
    else:
        notes.append("scale_parameter=True: torch always scales by max(eps2, RMS(p))")
    kw["beta2_decay"] = hp["decay_rate"]
    notes.append("decay_rate -> beta2_decay")
    kw["eps"] = tuple(hp["eps"])
    notes.append(f"eps={tuple(hp['eps'])} -> eps (HF adds eps1 to g^2; torch clamps the estimate at eps1^2)")
    kw["d"] = hp["clip_threshold"]
    notes.append("clip_threshold -> d")
    kw["weight_decay"] = hp["weight_decay"]
    if hp.get("beta1") is not None:
        notes.append(f"beta1={hp['beta1']}: no torch equivalent (dropped: no first moment)")
    kw["foreach"] = False  # the for-loop path, as the torch goldens
    return kw, notes


def translate_torch_to_hf(hp):
    """torch.optim.Adafactor hparams -> transformers Adafactor kwargs of the closest meaning."""
    kw, notes = {}, []
    kw["lr"] = hp["lr"]
    kw["relative_step"] = False
    kw["warmup_init"] = False
    kw["scale_parameter"] = True
    notes.append(f"lr={hp['lr']} -> lr, relative_step=False (torch's rho = min(lr, 1/sqrt(t)) is lr while "
                 f"t <= {1 / hp['lr'] ** 2:g})")
    notes.append("scale_parameter=True (torch always scales the step by max(eps2, RMS(p)))")
    kw["decay_rate"] = hp["beta2_decay"]
    notes.append("beta2_decay -> decay_rate")
    e1, e2 = hp["eps"]
    if e1 is None:
        e1 = TORCH_F32_EPS
        notes.append("eps1=None -> eps1=2^-23 (torch uses finfo(float32).eps)")
    kw["eps"] = (e1, e2)
    notes.append("eps (torch clamps the estimate at eps1^2; HF adds eps1 to g^2)")
    kw["clip_threshold"] = hp["d"]
    notes.append("d -> clip_threshold")
    kw["weight_decay"] = hp["weight_decay"]
    kw["beta1"] = None
    for k in ("foreach", "maximize"):
        if k in hp:
            notes.append(f"{k}={hp[k]}: dropped (no HF equivalent)" +
                         ("; HF's step follows +grad, so this case cannot match" if k == "maximize" and hp[k] else ""))
    return kw, notes


def build_kwargs(cls, golden_optim, hp, args):
    """The constructor kwargs: the golden's hparams (translated across dialects), --drop, --kwargs."""
    notes = []
    target = dialect_of(cls)
    if args.translate == "auto" and target and golden_optim in ("adafactor", "adafactor_torch") \
            and target != golden_optim:
        kw, notes = (translate_hf_to_torch if golden_optim == "adafactor" else translate_torch_to_hf)(hp)
        notes.insert(0, f"hparams translated from {golden_optim} to {cls.__module__}.{cls.__name__}:")
    else:
        kw = dict(hp)
        for k in ("betas", "eps"):  # JSON lists -> the tuples the constructors document
            if isinstance(kw.get(k), list):
                kw[k] = tuple(kw[k])
    for k in args.drop:
        kw.pop(k, None)
    kw.update(args.kwargs)
    if args.drop_unknown:
        takes = accepted_kwargs(cls)
        if takes is not None:
            dropped = sorted(k for k in kw if k not in takes)
            for k in dropped:
                del kw[k]
            if dropped:
                notes.append(f"--drop-unknown: {cls.__name__} takes no {', '.join(dropped)} (dropped)")
    return kw, notes


# Library classes that run the same code as a golden set's class (documented in
# reference/VALIDATE_PYTHON.md, "Aliases"); the note is printed when one is validated.
ALIASES = {
    ("bitsandbytes.optim.adam", "Adam8bit"): "alias of AdamW8bit for the adamw_bnb_8bit goldens: both are "
        "Optimizer2State('adam', optim_bits=8) and bitsandbytes' 'adam' kernels apply weight_decay decoupled "
        "(p *= 1 - lr*wd), so Adam8bit decays like AdamW8bit (only its default weight_decay differs: 0 vs 1e-2; "
        "the goldens pass it explicitly)",
    ("torch.optim.adam", "Adam"): "alias of AdamW for the adamw_torch goldens only with "
        "--kwargs '{\"decoupled_weight_decay\": true}' (Adam's default is the L2 penalty)",
}


def accepted_kwargs(cls):
    """The keyword arguments cls(params, ...) takes (inspect.signature); None if it takes **kwargs."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return {n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def read_golden_numpy(path):
    """Reads any trainbench golden into {name: numpy array} and its metadata, with numpy only.
    safetensors.numpy cannot read BF16 (numpy has no bfloat16; the larger optimizer goldens store
    input.grads as BF16): BF16 is widened exactly to float32 here (its 16 bits are the high half
    of the float32). Returns (tensors, metadata)."""
    import numpy as np
    dtypes = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
              "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
    with open(path, "rb") as fh:
        blob = fh.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] in dtypes:
            arr = np.frombuffer(raw, dtype=np.dtype(dtypes[t["dtype"]]).newbyteorder("<")).copy()
        else:
            raise ValueError(f"{path}: tensor {name} has dtype {t['dtype']}, which this reader does not know")
        out[name] = arr.reshape(t["shape"])
    return out, meta


def run_case(torch, cls, golden_path, args):
    """Runs the optimizer on one golden's inputs; returns (tensors dict, kwargs, notes)."""
    from safetensors import safe_open
    with safe_open(golden_path, framework="pt") as f:
        meta = f.metadata() or {}
        param0 = f.get_tensor("input.param")
        grads = f.get_tensor("input.grads").to(torch.float32)  # BF16 widens exactly
    for k in ("hparams", "check_steps", "optimizer"):
        if k not in meta:
            raise ValueError(f"{golden_path}: not an optimizer golden (metadata '{k}' missing)")
    hp = json.loads(meta["hparams"])
    check = {int(k) for k in meta["check_steps"].split(",")}
    kw, notes = build_kwargs(cls, meta["optimizer"], hp, args)
    p = torch.nn.Parameter(param0.clone())
    opt = cls([p], **kw)
    tensors = {}
    for t in range(1, grads.shape[0] + 1):
        p.grad = grads[t - 1].clone()
        opt.step()
        if t in check:
            tensors[f"expect.step{t}.param"] = p.detach().clone().contiguous()
            if not args.params_only:
                for key, v in golden_io.snapshot_state(torch, opt.state[p], floats=True).items():
                    tensors[f"expect.step{t}.state.{key}"] = v
    return tensors, kw, notes


ROW = re.compile(r"^(expect\.\S+|\S+)\s+(f32|bf16|f16|u8|i32|i64)\s+(\(\S*\))\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+"
                 r"(\S+)\s+(\S+)\s+(\S+)\s+(PASS|CONFORMS|FAIL)\s+\[(\d+)\]$")


def parse_check(out):
    """The per-tensor rows of `trainbench check` output."""
    rows = []
    for line in out.splitlines():
        m = ROW.match(line.strip())
        if m:
            name, dtype, shape, max_abs, max_rel, ulp, worst, got, exp, used, verdict, rule = m.groups()
            rows.append(dict(name=name, max_abs=float(max_abs), max_rel=max_rel, ulp=ulp, worst=worst,
                             got=got, exp=exp, used=used, ok=verdict != "FAIL", conforms=verdict == "CONFORMS"))
    return rows


def used_value(s):
    return math.inf if s == "inf" else float(s.rstrip("%"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--optimizer", required=True, help="module:Class, e.g. torch.optim:AdamW")
    ap.add_argument("--goldens", required=True, help="one optimizer's golden folder, e.g. reference/golden/optim/adamw_torch")
    ap.add_argument("--kwargs", default="{}", help="JSON object merged over the golden's hparams, e.g. '{\"foreach\": true}'")
    ap.add_argument("--drop", default="", help="comma list of golden hparams not to pass (a class that lacks them)")
    ap.add_argument("--drop-unknown", action="store_true",
                    help="drop the golden hparams the class's constructor does not take (inspect.signature), "
                         "listing them (e.g. torch-only amsgrad/fused/foreach for bitsandbytes' Adam8bit)")
    ap.add_argument("--translate", choices=["auto", "none"], default="auto",
                    help="auto: map Adafactor hparams across the torch/transformers dialects (default)")
    ap.add_argument("--params-only", action="store_true",
                    help="write and check only expect.step*.param (for optimizers that keep other state)")
    ap.add_argument("--case", default="", help="only cases whose name contains this text")
    ap.add_argument("--out", default="", help="folder for the candidate files (default: a new temp folder)")
    ap.add_argument("--trainbench", default="build/trainbench", help="the trainbench binary (default build/trainbench)")
    ap.add_argument("--check-args", default="", help="extra arguments for `trainbench check`, e.g. '--rtol 1e-4 --atol 1e-7'")
    ap.add_argument("--verbose", action="store_true", help="print check's full output for every case")
    args = ap.parse_args()

    try:
        args.kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as e:
        die(f"--kwargs is not JSON: {e}")
    if not isinstance(args.kwargs, dict):
        die("--kwargs must be a JSON object")
    args.drop = [k for k in args.drop.split(",") if k]
    if not os.access(args.trainbench, os.X_OK):
        die(f"--trainbench: {args.trainbench} is not an executable (build it with make)")
    goldens = sorted(g for g in glob.glob(os.path.join(args.goldens, "*.safetensors")) if args.case in os.path.basename(g))
    if not goldens:
        die(f"--goldens: no *.safetensors{' matching --case ' + args.case if args.case else ''} in {args.goldens}")
    try:
        import torch
        from safetensors.torch import save_file
    except Exception as e:  # noqa: BLE001
        die(f"needs torch and safetensors (the venv of reference/README.md): {e}")
    torch.set_num_threads(1)  # as the goldens were made: reductions do not depend on the core count
    cls = load_class(args.optimizer)
    out_dir = args.out or tempfile.mkdtemp(prefix="validate_python-")
    os.makedirs(out_dir, exist_ok=True)

    check_args = shlex.split(args.check_args)
    if args.params_only:
        check_args += ["--tensors", r"^expect\.step[0-9]+\.param$"]
    alias = ALIASES.get((getattr(cls, "__module__", ""), getattr(cls, "__name__", "")))
    if alias:
        print(f"note: {cls.__name__} is an {alias}")
    print(f"optimizer: {args.optimizer}  kwargs over the golden's: {json.dumps(args.kwargs)}"
          f"{'  dropped: ' + ','.join(args.drop) if args.drop else ''}")
    print(f"goldens:   {args.goldens} ({len(goldens)} cases)   candidates: {out_dir}")
    print(f"check:     {args.trainbench} check GOLDEN CANDIDATE {' '.join(check_args)}".rstrip())
    results, shown_notes = [], set()
    for g in goldens:
        case = os.path.basename(g)[: -len(".safetensors")]
        try:
            tensors, kw, notes = run_case(torch, cls, g, args)
        except Exception as e:  # noqa: BLE001 - the optimizer's own error, reported per case
            results.append(dict(case=case, verdict="ERROR", detail=f"{type(e).__name__}: {e}"))
            continue
        key = "\n".join(notes)
        if notes and key not in shown_notes:
            shown_notes.add(key)
            print(f"[{case}] " + "\n    ".join(notes))
        cand = os.path.join(out_dir, case + ".safetensors")
        tmp = cand + ".tmp"
        save_file(tensors, tmp, metadata={"optimizer_class": args.optimizer, "kwargs": json.dumps(kw, default=str)})
        os.replace(tmp, cand)
        proc = subprocess.run([args.trainbench, "check", g, cand] + check_args, capture_output=True, text=True)
        if args.verbose:
            print(proc.stdout + proc.stderr)
        rows = parse_check(proc.stdout)
        r = dict(case=case, rc=proc.returncode, rows=rows)
        if proc.returncode == 2 or not rows:
            problems = [x for x in proc.stderr.strip().splitlines() if not x.startswith("usage:")]
            r["verdict"] = "UNUSABLE"
            r["detail"] = (problems or ["no output"])[0] + (f" (+{len(problems) - 2} more)" if len(problems) > 2 else "")
        else:
            r["verdict"] = "FAIL" if proc.returncode else \
                "CONFORMS" if any(x.get("conforms") for x in rows) else "PASS"
        results.append(r)

    print()
    hdr = f"{'case':28} {'verdict':8} {'failed':>7} {'identical':>9} {'worst tensor (most tolerance used)':36} " \
          f"{'tol_used':>10} {'param max_ulp':>13} {'param max_rel':>13}"
    print(hdr)
    for r in results:
        if "rows" not in r or not r["rows"]:
            print(f"{r['case']:28} {r['verdict']:8} {r.get('detail', '')}")
            continue
        rows = r["rows"]
        worst = max(rows, key=lambda x: used_value(x["used"]))
        params = [x for x in rows if x["name"].endswith(".param")]
        pulp = max((int(x["ulp"]) if x["ulp"].isdigit() else math.inf for x in params), default=0)
        prel = max((float(x["max_rel"]) if x["max_rel"] not in ("-", "nan") else math.inf for x in params), default=0)
        nfail = sum(not x["ok"] for x in rows)
        nsame = sum(x["max_abs"] == 0 and x["worst"] == "-" for x in rows)
        wname = worst["name"] if used_value(worst["used"]) > 0 else "- (all identical)" if nsame == len(rows) else "-"
        print(f"{r['case']:28} {r['verdict']:8} {nfail:>3}/{len(rows):<3} {nsame:>4}/{len(rows):<4} {wname:36} "
              f"{worst['used']:>10} {pulp:>13} {prel:>13.3g}")
        if nfail:
            failed = [x["name"] for x in rows if not x["ok"]]
            print(f"    failed: {' '.join(failed[:6])}{' ...' if len(failed) > 6 else ''}")
    n_pass = sum(r["verdict"] in ("PASS", "CONFORMS") for r in results)
    bad = [r for r in results if r["verdict"] == "UNUSABLE"]
    counts = {v: sum(r["verdict"] == v for r in results) for v in ("FAIL", "ERROR", "UNUSABLE")}
    print(f"\n{n_pass} of {len(results)} cases pass" +
          "".join(f", {n} {v}" for v, n in counts.items() if n))
    sys.exit(2 if bad else 0 if n_pass == len(results) else 1)


if __name__ == "__main__":
    main()

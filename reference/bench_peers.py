#!/usr/bin/env python3
"""Peer timings for trainbench: PyTorch, transformers and bitsandbytes on the SAME problems as our
benchmarks (bench/bench_optim.c, bench/bench_train.c), on the same machine, with the same thread count.

    ~/.cache/trainbench-venv/bin/python reference/bench_peers.py --out RESULT_DIR/peers.json
    (or `make peers`, which picks the result folder; README "Benchmarks")

Output: Google Benchmark JSON (the form `trainbench-bench --benchmark_out_format=json` writes):
{"context": {...}, "benchmarks": [...]}, one "iteration" entry per repetition (real_time and
cpu_time per step in ms, iterations, the same throughput counter as ours) followed by the
mean/median/stddev/cv "aggregate" entries; a peer that cannot run is one entry with
"error_occurred": true and "error_message": "unsupported: <the library's error>" (or "failed: ..."
when its sanity check fails): never a substitute. `trainbench report` pairs each peer with our
benchmark and prints ours/peer ratios (README "trainbench report").

Name mapping (how report.c pairs a peer with our benchmark):
    peer/<variant>/<problem>/real_time
  optimizer step, problem = our benchmark name exactly:  optim/<name>/<n>
    peer/torch/optim/adamw_torch/1000000             torch.optim.AdamW(foreach=False, fused=False)
                                                     (the for-loop path our adamw_torch mirrors)
    peer/torch_foreach/optim/adamw_torch/<n>         torch.optim.AdamW(foreach=True)
    peer/torch_fused/optim/adamw_torch/<n>           torch.optim.AdamW(fused=True)  (CPU: torch >= 2.4)
    peer/torch/optim/adafactor_torch/<n>             torch.optim.Adafactor(foreach=False)
    peer/torch_foreach/optim/adafactor_torch/<n>     torch.optim.Adafactor(foreach=True)
    peer/transformers/optim/adafactor/<n>            transformers.optimization.Adafactor as HF Trainer
                                                     configures it (scale_parameter=False,
                                                     relative_step=False, warmup_init=False, lr=5e-5)
    peer/bitsandbytes/optim/adamw_bnb_8bit/<n>       bitsandbytes.optim.AdamW8bit (CPU kernels)
  Hyperparameters are our optim_defaults() (src/optim_*.c), the parameter tensor has our
  (rows, cols) shape: 100x100, 1000x1000, 2500x4000 (n = 1e4, 1e6, 1e7; --full adds 10000x10000,
  as FULL=1 does for our bench), parameters N(0, 0.02), gradients N(0, 1e-3), the same gradient
  every step. Counter: params/s.
  training step, problem = our name WITHOUT the backend part (PyTorch has its own kernels):
    train_step/<model>/<precision>/adamw_torch       (ours: train_step/<model>/<backend>/<precision>/adamw_torch)
    peer/torch/train_step/tiny/fp32/adamw_torch      transformers DistilBertForSequenceClassification,
                                                     eager attention, AdamW(foreach=False): the
                                                     configuration of our conformance goldens
    peer/torch_sdpa_fused/train_step/...             attn_implementation="sdpa", AdamW(fused=True)
    peer/torch_foreach/train_step/...                attn_implementation="sdpa", AdamW(foreach=True)
    peer/torch_best/train_step/...                   the samples of the variant above with the
                                                     fastest median ("best PyTorch"; torch.compile
                                                     is excluded)
    ours/train_step/<model>/<backend>/<precision>/adamw_torch
                                                     OUR samples, taken interleaved with the peers'
  models: our presets tiny (vocab 64, dim 32, 2 layers, 2 heads, hidden 64) at batch 8 x seq 32,
  small (vocab 1024, dim 128, 4 layers, 4 heads, hidden 512) and distilbert-base-cased at 8 x 128,
  dropout 0 (as our presets train), HF init; precision fp32 (no autocast) and bf16 =
  torch.autocast("cpu", dtype=torch.bfloat16). One step = zero_grad(set_to_none=True); forward
  with labels (no attention mask: every token is real, as in our bench); loss.backward();
  opt.step(). Random token ids 1..vocab-1, labels 0..1. Counter: tokens/s (B*T per step).
  Interleaved (interleaved_train): --rounds rounds per (model, precision), --rounds-fast for tiny
  and small; even rounds ours then PyTorch, odd rounds PyTorch then ours. Ours = one
  repetition of --bench-bin's train_step benchmark in a fresh process (FULL=1 for
  distilbert-base-cased, OMP_NUM_THREADS = --threads); rounds 0 and 1 run onednn and openblas;
  those whose better sample of the two is within 1.25x of the faster one run in every later
  round, and ours is the one with the fastest median over the rounds.

Timing, as Google Benchmark does it for our benchmarks: warm-up steps (at least 3 and 0.2 x
--min-time; state allocated, threads started), then the iteration count is fixed so one repetition takes >= --min-time seconds, and
each of --repetitions repetitions reports its mean time per step (time.perf_counter, wall clock;
cpu_time is this thread's CPU time, as Google Benchmark's default). Before timing each peer is
checked once: every parameter finite and some changed (a no-op step would look fast).

Threads: torch.set_num_threads(--threads); default = OMP_NUM_THREADS if set, else the CPUs this
process may run on (what our OpenMP code uses). The JSON is written atomically (temp + rename).
Needs torch >= 2.5, transformers, bitsandbytes >= 0.50 (exit 2 naming what is missing).
"""
import argparse
import contextlib
import datetime
import functools
import json
import logging
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_io  # noqa: E402 - die, import checks, the version parser shared by reference/

# `trainbench run` re-executes itself with its own OpenMP wait policy (src/core/threads.h:
# GOMP_SPINCOUNT, marked by TRAINBENCH_WAIT_POLICY_SET) and this script inherits it. PyTorch
# gets its own runtime's default instead (libgomp reads these when torch loads it, below), as
# a PyTorch user would have it; our benchmark binary, a child, applies ours again. A policy the
# user set (no mark) is left to both sides.
if os.environ.get("TRAINBENCH_WAIT_POLICY_SET") == "1":
    for _k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "TRAINBENCH_WAIT_POLICY_SET"):
        os.environ.pop(_k, None)

GENERATOR = "reference/bench_peers.py"
OPTIM_SHAPES = [(100, 100), (1000, 1000), (2500, 4000)]
FULL_SHAPE = (10000, 10000)
# name: (vocab, dim, layers, heads, hidden, positions, labels), batch, seq  (src/model/model.c PRESETS,
# bench/bench_train.c add())
MODELS = {
    "tiny": ((64, 32, 2, 2, 64, 32, 2), 8, 32),
    "small": ((1024, 128, 4, 4, 512, 128, 2), 8, 128),
    "distilbert-base-cased": ((28996, 768, 6, 12, 3072, 512, 2), 8, 128),
}
# our backends within this factor of the fastest (best of rounds 0 and 1) run in every round (interleaved_train)
CANDIDATE_SLACK = 1.25
# our benchmark registers distilbert-base-cased only under FULL=1 (bench/bench_train.c)
OURS_NEEDS_FULL = {"distilbert-base-cased"}
# models whose step takes well under a second: --rounds-fast rounds instead of --rounds (a round
# costs ~1.5 s there, ~12 s for distilbert-base-cased; more rounds make the medians steadier on a
# shared machine for a few seconds of make run's budget)
FAST_MODELS = {"tiny", "small"}


def rounds_for(a, model):
    """The interleaved rounds of one training-step problem (--rounds-fast for FAST_MODELS)."""
    return a.rounds_fast if model in FAST_MODELS else a.rounds
# our backends that may be "our fastest" for a training step (naive is the reference, never fastest)
OURS_BACKENDS = ["onednn", "openblas"]
# PyTorch training-step configurations; "best PyTorch" = the fastest of them. torch.compile is
# excluded: its compile time and graph breaks are a different question than a step's speed.
TRAIN_VARIANTS = [
    ("torch", "eager", "loop", "eager attention, AdamW foreach=False (the for-loop path; our goldens' configuration)"),
    ("torch_sdpa_fused", "sdpa", "fused", "sdpa attention, AdamW fused=True"),
    ("torch_foreach", "sdpa", "foreach", "sdpa attention, AdamW foreach=True"),
]
PRECISIONS = ["fp32", "bf16"]
WARMUP_STEPS = 3
die = functools.partial(golden_io.die, "bench_peers")


def import_libraries():
    """torch and transformers are required; bitsandbytes is optional (its peer is then
    "unsupported: ..." with the import error)."""
    torch, transformers = golden_io.require("bench_peers", [("torch", "torch >= 2.5"),
                                                            ("transformers", "transformers")])
    golden_io.require_version("bench_peers", "torch", torch.__version__, "2.5", "torch.optim.Adafactor")
    # bitsandbytes logs a harmless warning about the optional 'kernels' package on import
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    try:
        import bitsandbytes as bnb
        bnb_error = None
        if golden_io.version_tuple(bnb.__version__) < (0, 50):
            bnb_error = f"bitsandbytes >= 0.50 is required for CPU optimizer kernels; found {bnb.__version__}"
    except Exception as e:  # noqa: BLE001
        bnb, bnb_error = None, f"bitsandbytes cannot be imported: {e}"
    return torch, transformers, bnb, bnb_error


# ---------------------------------------------------------------------------------------------- cases

def optim_cases(torch, transformers, bnb, bnb_error):
    """(problem optimizer name, variant, label, factory(params) -> optimizer or raises)."""
    adamw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)   # src/optim/optim_adamw_torch.c
    aft = dict(lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0)  # optim_adafactor_torch.c
    afhf = dict(lr=5e-5, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8, beta1=None,
                weight_decay=0.0, scale_parameter=False, relative_step=False, warmup_init=False)
    bnb8 = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, min_8bit_size=4096)

    def bnb_factory(ps):
        if bnb is None or bnb_error:
            raise RuntimeError(bnb_error)
        return bnb.optim.AdamW8bit(ps, **bnb8)

    return [
        ("adamw_torch", "torch", "torch.optim.AdamW(foreach=False, fused=False)",
         lambda ps: torch.optim.AdamW(ps, foreach=False, fused=False, **adamw)),
        ("adamw_torch", "torch_foreach", "torch.optim.AdamW(foreach=True)",
         lambda ps: torch.optim.AdamW(ps, foreach=True, **adamw)),
        ("adamw_torch", "torch_fused", "torch.optim.AdamW(fused=True)",
         lambda ps: torch.optim.AdamW(ps, fused=True, **adamw)),
        ("adamw_torch_fused", "torch", "torch.optim.AdamW(fused=True) (the kernel adamw_torch_fused mirrors)",
         lambda ps: torch.optim.AdamW(ps, fused=True, **adamw)),
        ("adafactor_torch", "torch", "torch.optim.Adafactor(foreach=False)",
         lambda ps: torch.optim.Adafactor(ps, foreach=False, **aft)),
        ("adafactor_torch", "torch_foreach", "torch.optim.Adafactor(foreach=True)",
         lambda ps: torch.optim.Adafactor(ps, foreach=True, **aft)),
        ("adafactor", "transformers", "transformers Adafactor(scale_parameter=False, relative_step=False, lr=5e-5)",
         lambda ps: transformers.optimization.Adafactor(ps, **afhf)),
        ("adamw_bnb_8bit", "bitsandbytes", "bitsandbytes.optim.AdamW8bit(min_8bit_size=4096)", bnb_factory),
    ]


def make_optim_problem(torch, factory, rows, cols):
    """Returns (step, check) for one optimizer on one (rows, cols) tensor."""
    g = torch.Generator().manual_seed(0x0971 + rows * cols)
    p = torch.nn.Parameter(torch.randn(rows, cols, generator=g) * 0.02)
    p.grad = torch.randn(rows, cols, generator=g) * 1e-3
    p0 = p.detach().clone()
    opt = factory([p])

    def step():
        opt.step()

    def check():
        if not bool(torch.isfinite(p).all()):
            return "a parameter is not finite after the warm-up steps"
        if bool((p.detach() == p0).all()):
            return "the warm-up steps changed no parameter"
        return None
    return step, check


def make_train_problem(torch, transformers, model_name, precision, attn, opt_kind):
    (vocab, dim, layers, heads, hidden, positions, labels), B, T = MODELS[model_name]
    cfg = transformers.DistilBertConfig(vocab_size=vocab, dim=dim, n_layers=layers, n_heads=heads,
                                        hidden_dim=hidden, max_position_embeddings=positions,
                                        num_labels=labels, dropout=0.0, attention_dropout=0.0,
                                        seq_classif_dropout=0.0, activation="gelu",
                                        attn_implementation=attn)
    torch.manual_seed(1234)
    model = transformers.DistilBertForSequenceClassification(cfg)
    model.train()
    adamw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
    if opt_kind == "loop":
        opt = torch.optim.AdamW(model.parameters(), foreach=False, fused=False, **adamw)
    elif opt_kind == "foreach":
        opt = torch.optim.AdamW(model.parameters(), foreach=True, fused=False, **adamw)
    else:
        opt = torch.optim.AdamW(model.parameters(), fused=True, **adamw)
    g = torch.Generator().manual_seed(0x7EA1)
    ids = torch.randint(1, vocab, (B, T), generator=g, dtype=torch.int64)
    lab = torch.randint(0, labels, (B,), generator=g, dtype=torch.int64)
    p0 = [p.detach().clone() for p in model.parameters()]
    last = {}
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with ctx():
            out = model(input_ids=ids, labels=lab)
        out.loss.backward()
        opt.step()
        last["loss"] = out.loss

    def check():
        loss = float(last["loss"].detach())
        if not math.isfinite(loss):
            return f"loss {loss}"
        if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            return "a parameter is not finite after the warm-up steps"
        if all(bool((p.detach() == q).all()) for p, q in zip(model.parameters(), p0)):
            return "the warm-up steps changed no parameter"
        return None
    return step, check


# ---------------------------------------------------------------------------------------------- timing

def time_peer(step, min_time, reps):
    """Warm-up, fix the iteration count from the warm-up's speed, then `reps` repetitions.
    Returns [(iterations, real seconds per step, cpu seconds per step)]."""
    t0, k = time.perf_counter(), 0
    while k < WARMUP_STEPS or time.perf_counter() - t0 < 0.2 * min_time:
        step()
        k += 1
    per = (time.perf_counter() - t0) / k
    iters = max(1, min(10**9, math.ceil(min_time / max(per, 1e-9))))
    out = []
    for _ in range(reps):
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(iters):
            step()
        w1, c1 = time.perf_counter(), time.thread_time()
        out.append((iters, (w1 - w0) / iters, (c1 - c0) / iters))
    return out


def entries(name, family, reps, counter, per_step_units, label, rows):
    """Google Benchmark JSON entries: one per repetition, then mean/median/stddev/cv."""
    base = {"name": name, "family_index": family, "per_family_instance_index": 0, "run_name": name,
            "repetitions": reps, "threads": 1}
    out = []
    for i, (iters, real, cpu) in enumerate(rows):
        e = dict(base, run_type="iteration", repetition_index=i, iterations=iters,
                 real_time=real * 1e3, cpu_time=cpu * 1e3, time_unit="ms", label=label)
        e[counter] = per_step_units / real
        out.append(e)
    reals = [r[1] * 1e3 for r in rows]
    cpus = [r[2] * 1e3 for r in rows]
    rates = [per_step_units / r[1] for r in rows]
    aggs = [("mean", statistics.fmean), ("median", statistics.median),
            ("stddev", lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)]
    for agg, f in aggs:
        e = dict(base, name=f"{name}_{agg}", run_type="aggregate", aggregate_name=agg, aggregate_unit="time",
                 iterations=len(rows), real_time=f(reals), cpu_time=f(cpus), time_unit="ms", label=label)
        e[counter] = f(rates)
        out.append(e)
    m = statistics.fmean(reals)
    sd = statistics.stdev(reals) if len(reals) > 1 else 0.0
    out.append(dict(base, name=f"{name}_cv", run_type="aggregate", aggregate_name="cv",
                    aggregate_unit="percentage", iterations=len(rows), real_time=sd / m if m else 0.0,
                    cpu_time=0.0, time_unit="ms", label=label))
    return out


def error_entry(name, family, reps, msg):
    return {"name": name, "family_index": family, "per_family_instance_index": 0, "run_name": name,
            "run_type": "iteration", "repetitions": reps, "repetition_index": 0, "threads": 1,
            "error_occurred": True, "error_message": msg}



# ---------------------------------------------------------------------------------------------- training steps, interleaved

def ere_escape(text):
    """text as a literal POSIX extended regular expression (Google Benchmark's --benchmark_filter).
    Python's re.escape also escapes '-', which POSIX calls an invalid escape: the filter then
    fails to compile, the benchmark binary runs nothing and writes no JSON (distilbert-base-cased,
    the only model name with a '-', was never measured on our side before this)."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


def run_ours(a, model, backend, precision, checked=False):
    """One repetition of our train_step benchmark in a fresh process of build/bench/trainbench-bench
    (its own setup and sanity check untimed; checked=True: the check already passed in round 0,
    only the loss's finiteness is checked). Returns (iterations, real s/step, cpu s/step) or
    raises RuntimeError with the benchmark's error."""
    name = f"train_step/{model}/{backend}/{precision}/adamw_torch/real_time"
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    if model in OURS_NEEDS_FULL:
        env["FULL"] = "1"
    if checked:  # round 0 ran this benchmark's check (against another backend's step) already
        env["TRAINBENCH_TRAIN_STEP_CHECKED"] = "1"
    cmd = [a.bench_bin, f"--benchmark_filter=^{ere_escape(name)}$", "--benchmark_repetitions=1",
           f"--benchmark_min_time={a.min_time}", "--benchmark_format=json"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{a.bench_bin} exited {p.returncode}: {p.stderr.strip()[-300:]}")
    try:
        rows = [b for b in json.loads(p.stdout)["benchmarks"] if b.get("name") == name]
    except (ValueError, KeyError) as e:
        raise RuntimeError(f"{a.bench_bin} wrote no benchmark JSON ({e}); its stderr: "
                           f"{p.stderr.strip()[-300:] or '(empty)'}") from None
    if not rows:
        raise RuntimeError(f"{a.bench_bin} has no benchmark {name}")
    b = rows[0]
    if b.get("error_occurred"):
        raise RuntimeError(b.get("error_message", "error"))
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return (int(b["iterations"]), float(b["real_time"]) * scale, float(b["cpu_time"]) * scale)


def interleaved_train(a, torch, transformers, model, precision, benchmarks, family, choices):
    """Our fastest backend and every PyTorch variant on one (model, precision), in alternating
    rounds: even rounds ours then PyTorch, odd rounds PyTorch then ours (so drift on a shared
    machine and any order effect hit both sides). Rounds 0 and 1 run every backend of OURS_BACKENDS;
    those within CANDIDATE_SLACK of the fastest (best of their two samples) run in every round;
    ours = the fastest median. Appends Google Benchmark entries; returns family."""
    _, B, T = MODELS[model]
    problem = f"train_step/{model}/{precision}/adamw_torch"
    tokens = B * T
    n_rounds = rounds_for(a, model)
    steps, labels, rows = {}, {}, {}
    for variant, attn, opt_kind, what in TRAIN_VARIANTS:
        name = f"peer/{variant}/{problem}/real_time"
        labels[variant] = (f"DistilBertForSequenceClassification {model} ({what}), {precision}"
                           f"{' autocast' if precision == 'bf16' else ''}, {B}x{T} tokens, dropout 0; "
                           f"interleaved with ours, {n_rounds} rounds")
        try:
            step, check = make_train_problem(torch, transformers, model, precision, attn, opt_kind)
            step()
            why = check()
            msg = "failed: " + why if why else None
        except Exception as e:  # noqa: BLE001 - any library error is reported as it is
            msg = f"unsupported: {type(e).__name__}: {e}".replace("\n", " ")
        if msg:
            benchmarks.append(error_entry(name, family, n_rounds, msg))
            family += 1
            print(f"{name:64s} ERROR OCCURRED: '{msg}'", flush=True)
            continue
        # warm-up beyond the checked step, then a fixed iteration count per round
        t0, k = time.perf_counter(), 0
        while k < 1 or time.perf_counter() - t0 < 0.2 * a.min_time:
            step()
            k += 1
        per = (time.perf_counter() - t0) / k
        steps[variant] = (step, max(1, math.ceil(a.min_time / max(per, 1e-9))))
        rows[variant] = []

    def theirs():
        for variant, (step, iters) in steps.items():
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(iters):
                step()
            w1, c1 = time.perf_counter(), time.thread_time()
            rows[variant].append((iters, (w1 - w0) / iters, (c1 - c0) / iters))

    # Our backends: rounds 0 and 1 run every one; those whose better sample of the two is within
    # CANDIDATE_SLACK of the fastest such sample stay candidates and run in every later round;
    # the candidate with the fastest median over the rounds is "ours". (Choosing on round 0's
    # single sample alone picked the slower backend when two were close: small fp32 onednn 67.6
    # vs openblas 62.0 ms in round 0, medians 53 vs 69 ms in the benchmarks phase of the same
    # run; and dropped the faster one after one slow sample on a busy host: small fp32 onednn
    # 195 ms in round 0 against 60 ms in that run's benchmarks phase, so ours became openblas
    # at 134 ms, 20261203T154708Z-eb35.)
    screen = min(2, n_rounds)  # rounds that run every backend
    ours_by, ours_backend, ours_err, first, all_by = {}, None, {}, {}, {}

    def ours(r):
        if r < screen:
            for be in OURS_BACKENDS:
                if be in ours_err:
                    continue
                try:
                    v = run_ours(a, model, be, precision, checked=r > 0)
                except RuntimeError as e:
                    ours_err[be] = str(e)
                    all_by.pop(be, None)
                    continue
                if r == 0:
                    first[be] = v
                all_by.setdefault(be, []).append(v)
            if r == screen - 1 and all_by:
                best = {be: min(x[1] for x in rr) for be, rr in all_by.items()}
                fastest = min(best.values())
                for be, rr in all_by.items():
                    if best[be] <= CANDIDATE_SLACK * fastest:
                        ours_by[be] = list(rr)
        else:
            for be in ours_by:
                ours_by[be].append(run_ours(a, model, be, precision, checked=True))

    for r in range(n_rounds):
        if r % 2 == 0:
            ours(r)
            theirs()
        else:
            theirs()
            ours(r)
    if ours_by:
        ours_backend = min(ours_by, key=lambda be: statistics.median(x[1] for x in ours_by[be]))
    ours_rows = ours_by.get(ours_backend, [])
    choices[problem] = {"backend": ours_backend, "first_round_ms": {be: v[1] * 1e3 for be, v in first.items()},
                        "median_ms": {be: statistics.median(x[1] for x in rr) * 1e3 for be, rr in ours_by.items()},
                        "errors": ours_err}
    if ours_backend:
        name = f"ours/train_step/{model}/{ours_backend}/{precision}/adamw_torch/real_time"
        lab = (f"trainbench-bench train_step, {ours_backend} (our fastest median of {', '.join(sorted(ours_by))}; "
               f"{', '.join(sorted(first))} ran in round 0), interleaved with PyTorch, {n_rounds} rounds")
        benchmarks.extend(entries(name, family, n_rounds, "tokens/s", tokens, lab, ours_rows))
        family += 1
        med = statistics.median(x[1] for x in ours_rows)
        print(f"{name + '_median':64s} {med * 1e3:10.4g} ms  tokens/s={tokens / med:.4g}", flush=True)
    else:
        name = f"ours/train_step/{model}/<backend>/{precision}/adamw_torch/real_time"
        benchmarks.append(error_entry(name, family, n_rounds, "failed: " + "; ".join(
            f"{be}: {m}" for be, m in ours_err.items())))
        family += 1
        print(f"{name:64s} ERROR OCCURRED: {ours_err}", flush=True)
    for variant, rr in rows.items():
        name = f"peer/{variant}/{problem}/real_time"
        benchmarks.extend(entries(name, family, n_rounds, "tokens/s", tokens, labels[variant], rr))
        family += 1
        med = statistics.median(x[1] for x in rr)
        print(f"{name + '_median':64s} {med * 1e3:10.4g} ms  tokens/s={tokens / med:.4g}", flush=True)
    if rows:
        best = min(rows, key=lambda v: statistics.median(x[1] for x in rows[v]))
        name = f"peer/torch_best/{problem}/real_time"
        lab = (f"best PyTorch = the fastest median of {', '.join(rows)} (torch.compile excluded) here: {best}; "
               "its samples")
        benchmarks.extend(entries(name, family, n_rounds, "tokens/s", tokens, lab, rows[best]))
        family += 1
    return family

# ---------------------------------------------------------------------------------------------- main

def default_threads():
    env = os.environ.get("OMP_NUM_THREADS", "")
    if re.fullmatch(r"[1-9][0-9]*", env):
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Time PyTorch/transformers/bitsandbytes on trainbench's "
                                             "benchmark problems; writes Google Benchmark JSON.")
    ap.add_argument("--out", default="peers.json", help="output JSON file (default: peers.json)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: OMP_NUM_THREADS, else the usable CPUs)")
    ap.add_argument("--repetitions", type=int, default=5, help="repetitions per peer (default 5, as make run)")
    ap.add_argument("--min-time", type=float, default=0.1,
                    help="seconds one repetition runs at least (default 0.1, as make run)")
    ap.add_argument("--quick", action="store_true",
                    help="smaller: n = 1e4 and 1e6 only, the tiny model only, 3 repetitions of >= 0.05 s")
    ap.add_argument("--full", action="store_true", help="add n = 1e8 (FULL=1 of our bench)")
    ap.add_argument("--filter", default=None, help="regular expression: run only peers whose name matches")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds (ours, PyTorch) per training-step problem (default 3)")
    ap.add_argument("--rounds-fast", type=int, default=5,
                    help="the same for the models whose step is short (" + ", ".join(sorted(FAST_MODELS)) +
                         "; default 5)")
    ap.add_argument("--bench-bin", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                         "build", "bench", "trainbench-bench"),
                    help="our benchmark binary for the training-step side (default build/bench/trainbench-bench)")
    ap.add_argument("--models", default=None,
                    help="comma-separated training-step models (default: tiny, small, distilbert-base-cased; "
                         "--quick: tiny)")
    a = ap.parse_args(argv)
    if a.threads is None:
        a.threads = default_threads()
    if not 1 <= a.threads <= 1024:
        die(f"--threads must be an integer in 1..1024 (got {a.threads})")
    if a.quick:
        a.repetitions, a.min_time = 3, 0.05
    if not 1 <= a.repetitions <= 1000:
        die(f"--repetitions must be an integer in 1..1000 (got {a.repetitions})")
    if not (math.isfinite(a.min_time) and a.min_time > 0):
        die(f"--min-time must be a finite number of seconds > 0 (got {a.min_time})")
    if not 1 <= a.rounds <= 100:
        die(f"--rounds must be an integer in 1..100 (got {a.rounds})")
    if not 1 <= a.rounds_fast <= 100:
        die(f"--rounds-fast must be an integer in 1..100 (got {a.rounds_fast})")
    if a.models is not None:
        a.models = [m.strip() for m in a.models.split(",") if m.strip()]
        bad = [m for m in a.models if m not in MODELS]
        if bad or not a.models:
            die(f"--models: unknown model {', '.join(bad) or '(none given)'} (allowed: {', '.join(MODELS)})")
    if a.quick and a.full:
        die("--quick and --full exclude each other")
    if a.filter is not None:
        try:
            a.filter_re = re.compile(a.filter)
        except re.error as e:
            die(f"--filter is not a valid regular expression ({e}): {a.filter!r}")
    else:
        a.filter_re = None
    d = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(d):
        die(f"--out: folder {d} does not exist")
    return a


def main(argv):
    a = parse_args(argv)
    torch, transformers, bnb, bnb_error = import_libraries()
    torch.set_num_threads(a.threads)
    shapes = OPTIM_SHAPES[:2] if a.quick else OPTIM_SHAPES + ([FULL_SHAPE] if a.full else [])
    models = a.models or (["tiny"] if a.quick else list(MODELS))

    # (name, label, counter, units per step, builder() -> (step, check)); built lazily so that only
    # one problem's tensors live at a time
    todo = []
    for prob, variant, label, factory in optim_cases(torch, transformers, bnb, bnb_error):
        for rows, cols in shapes:
            n = rows * cols
            todo.append((f"peer/{variant}/optim/{prob}/{n}/real_time", f"{label}, ({rows}, {cols})", "params/s", n,
                         lambda f=factory, r=rows, c=cols: make_optim_problem(torch, f, r, c)))
    # training steps: (model, precision) problems, each run interleaved with ours
    train = [(m, prec) for m in models for prec in PRECISIONS]
    if a.filter_re:
        todo = [t for t in todo if a.filter_re.search(t[0])]
        train = [(m, prec) for m, prec in train
                 if any(a.filter_re.search(f"{pre}/train_step/{m}/{prec}/adamw_torch/real_time")
                        for pre in [f"peer/{v[0]}" for v in TRAIN_VARIANTS] + ["peer/torch_best", "ours"])]
        if not todo and not train:
            die(f"--filter {a.filter!r} matches no peer")
    if train and not os.access(a.bench_bin, os.X_OK):
        die(f"--bench-bin: {a.bench_bin} is not an executable (the training steps run ours interleaved with "
            "PyTorch; build it with `make bench-build`)")

    benchmarks = []
    print(f"bench_peers: torch {torch.__version__}, {a.threads} threads, {a.repetitions} repetitions of >= "
          f"{a.min_time} s; {len(todo)} optimizer peers; {len(train)} training-step problems interleaved with ours "
          f"({a.rounds_fast} rounds for {', '.join(sorted(FAST_MODELS))}, {a.rounds} for the others)", flush=True)
    for family, (name, label, counter, units, build) in enumerate(todo):
        # The library raising while constructing or taking the first step = it cannot run this
        # problem here ("unsupported: <its error>"); a step that runs but leaves non-finite or
        # unchanged parameters = "failed: ...". Neither is timed, nothing is substituted.
        try:
            step, check = build()
            step()
            why = check()
            msg = "failed: " + why if why else None
        except Exception as e:  # noqa: BLE001 - any library error is reported as it is
            msg = f"unsupported: {type(e).__name__}: {e}".replace("\n", " ")
        if msg:
            benchmarks.append(error_entry(name, family, a.repetitions, msg))
            print(f"{name:64s} ERROR OCCURRED: '{msg}'", flush=True)
            continue
        rows = time_peer(step, a.min_time, a.repetitions)
        benchmarks.extend(entries(name, family, a.repetitions, counter, units, label, rows))
        med = statistics.median(r[1] for r in rows)
        print(f"{name + '_median':64s} {med * 1e3:10.4g} ms  {counter}={units / med:.4g}  ({rows[0][0]} iterations)",
              flush=True)
        del step, check
    family = len(todo)
    choices = {}
    for m, prec in train:
        family = interleaved_train(a, torch, transformers, m, prec, benchmarks, family, choices)

    try:
        cap = torch.backends.cpu.get_cpu_capability()
    except Exception as e:  # noqa: BLE001
        cap = f"unknown ({e})"
    context = {
        # peers.json is a trainbench result file: its schema version (src/results/results.h)
        "trainbench_schema_version": "1",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host_name": socket.gethostname(),
        "executable": GENERATOR,
        "num_cpus": os.cpu_count(),
        "library_build_type": "release",
        "peers": {
            "generator": GENERATOR,
            "argv": argv,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "bitsandbytes": bnb.__version__ if bnb is not None else None,
            "bitsandbytes_error": bnb_error,
            "threads": a.threads,
            "torch_num_threads": torch.get_num_threads(),
            "torch_num_interop_threads": torch.get_num_interop_threads(),
            "torch_cpu_capability": cap,
            "torch_parallel_info": torch.__config__.parallel_info(),
            "repetitions": a.repetitions,
            "min_time_s": a.min_time,
            "warmup_steps": WARMUP_STEPS,
            "environment": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                       "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY")
                            if k in os.environ},
            "name_mapping": "peer/<variant>/<problem>/real_time; optim problem = our benchmark name "
                            "optim/<name>/<n>; train_step problem = our name without the backend part; "
                            "ours/<our benchmark name>: our samples taken interleaved with the peers'",
            "train_step_method": f"interleaved: {a.rounds_fast} rounds per (model, precision) for "
                                 f"{', '.join(sorted(FAST_MODELS))}, {a.rounds} for the others; even rounds ours then "
                                 "PyTorch, odd rounds PyTorch then ours; ours = one repetition of "
                                 "trainbench-bench's train_step benchmark in a fresh process (setup and its "
                                 "sanity check untimed, run in round 0 only); every backend in rounds 0 and 1, those "
                                 f"within {CANDIDATE_SLACK}x of the fastest (best of those two samples) in every round, "
                                 "ours = the fastest median; PyTorch = "
                                 "each variant's fixed iteration count per round in this process; "
                                 "peer/torch_best = the variant with the fastest median; torch.compile excluded",
            "train_step_rounds": {m: rounds_for(a, m) for m in MODELS},
            "train_step_ours": choices,
            "bench_bin": a.bench_bin,
        },
    }
    text = json.dumps({"context": context, "benchmarks": benchmarks}, indent=2) + "\n"
    tmp = f"{a.out}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        die(f"cannot write {a.out}: {e}", 1)
    nerr = sum(1 for b in benchmarks if b.get("error_occurred"))
    print(f"bench_peers: wrote {a.out} ({len(benchmarks)} entries, {nerr} unsupported/failed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

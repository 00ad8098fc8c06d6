#!/usr/bin/env python3
"""make_seeds.py — (re)makes the seed corpora of tests/fuzz/corpus/ from committed files: small
safetensors goldens, conform child results, the tiny model golden's batch as a dataset, its config as a config.json,
slices of the committed result folder (results/*/*/), the committed fingerprint candidates, and
one real checkpoint of the run fuzz_checkpoint.c resumes (made by BUILD/trainbench). Standard
library only. Usage: python3 tests/fuzz/make_seeds.py [--trainbench build/trainbench]
Seeds are small on purpose (a few KB each, the checkpoint ~90 KB): libFuzzer mutates them."""
import argparse, glob, json, os, shutil, struct, subprocess, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    return header, data


def write_st(path, tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes)"""
    header, off, blobs = {}, 0, []
    if meta:
        header["__metadata__"] = meta
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def put(harness, name, content):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainbench", default=os.path.join(ROOT, "build", "trainbench"))
    a = ap.parse_args()
    for h in ("safetensors", "dataset", "config", "checkpoint", "results", "fingerprint", "plugin_result"):
        shutil.rmtree(os.path.join(CORPUS, h), ignore_errors=True)
    # safetensors: the smallest optimizer goldens, as committed
    for p in sorted(glob.glob(os.path.join(ROOT, "reference/golden/optim/*/vec_1.safetensors")))[:2]:
        put("safetensors", os.path.basename(os.path.dirname(p)) + "_vec_1.safetensors", open(p, "rb").read())
    # dataset + config: the tiny model golden's batch and config
    g = os.path.join(ROOT, "reference/golden/model/grads_fp32.safetensors")
    header, data = read_st(g)
    meta = header.get("__metadata__", {})
    put("config", "tiny_golden_config.json", meta["config"])
    cfg = json.loads(meta["config"])
    cfg["model_type"] = "distilbert"
    put("config", "tiny_golden_config_hf.json", json.dumps(cfg, indent=1))
    tensors = []
    for want, alts in (("input_ids", ("input_ids", "input.input_ids")), ("attention_mask", ("attention_mask", "input.attention_mask")),
                       ("labels", ("labels", "input.labels"))):
        for k in alts:
            if k in header:
                e = header[k]
                b0, b1 = e["data_offsets"]
                tensors.append((want, e["dtype"], e["shape"], data[b0:b1]))
                break
    tmp = tempfile.mkdtemp()
    try:
        p = os.path.join(tmp, "d.safetensors")
        write_st(p, tensors, {"format": "trainbench-dataset-1"})
        put("dataset", "golden_batch.safetensors", open(p, "rb").read())
        write_st(p, [t for t in tensors if t[0] != "attention_mask"])
        put("dataset", "golden_batch_nomask.safetensors", open(p, "rb").read())
        # checkpoint: the run fuzz_checkpoint.c resumes, 2 steps
        out = os.path.join(tmp, "ck")
        subprocess.run([a.trainbench, "train", "--model", "tiny", "--optim", "adafactor", "--backend", "naive",
                        "--num-train-examples", "16", "--num-eval-examples", "0", "--max-steps", "2", "--save-steps", "1",
                        "--threads", "1", "--no-progress", "--output-dir", out], check=True, stdout=subprocess.DEVNULL)
        put("checkpoint", "tiny_adafactor_step2.safetensors", open(os.path.join(out, "checkpoint-2/checkpoint.safetensors"), "rb").read())
        put("checkpoint", "tiny_adafactor_step1.safetensors", open(os.path.join(out, "checkpoint-1/checkpoint.safetensors"), "rb").read())
    finally:
        shutil.rmtree(tmp)
    # results: byte 0 selects the file (fuzz_results.c RESULT_FILES order)
    run = sorted(glob.glob(os.path.join(ROOT, "results/*/*/machine.json")))[-1]
    rd = os.path.dirname(run)
    bench = json.load(open(os.path.join(rd, "bench.json")))
    small = {"context": bench.get("context", {}), "benchmarks": bench["benchmarks"][:24]}
    put("results", "0_bench.json", b"\x00" + json.dumps(small, indent=1).encode())
    put("results", "1_conform.json", b"\x01" + open(os.path.join(rd, "conform.json"), "rb").read())
    put("results", "2_memory.json", b"\x02" + open(os.path.join(rd, "memory.json"), "rb").read())
    put("results", "3_machine.json", b"\x03" + open(os.path.join(rd, "machine.json"), "rb").read())
    peers = os.path.join(rd, "peers.json")
    if os.path.exists(peers):
        pj = json.load(open(peers))
        put("results", "4_peers.json", b"\x04" + json.dumps({"context": pj.get("context", {}), "benchmarks": pj["benchmarks"][:12]}, indent=1).encode())
    tr = sorted(glob.glob(os.path.join(rd, "train/*/results.json")))
    if tr:
        j = json.load(open(tr[0]))
        j["records"] = j["records"][:20]
        j["evals"] = j["evals"][:2]
        put("results", "5_train_results.json", b"\x05" + json.dumps(j, indent=1).encode())
    # fingerprint: committed candidates
    for p in sorted(glob.glob(os.path.join(ROOT, "reference/golden/fingerprint/*.json")))[:3]:
        put("fingerprint", os.path.basename(p), open(p, "rb").read())
    put("fingerprint", "text.csv", "step,loss\n1,0.69\n2,0.68\n")
    # plugin_result: the bytes a conform child sends (ChildResult + ChildDiagnosis, < 4096 bytes;
    # extra bytes are ignored): magic "TBCF" (0x54424346 little-endian), then zeros = PASS;
    # the same with every other byte 'A' (strings without a NUL); a short write
    magic = struct.pack("<I", 0x54424346)
    put("plugin_result", "pass_zeros", magic + bytes(4092))
    put("plugin_result", "unterminated_strings", magic + b"\x00" * 4 + b"A" * 4088)
    put("plugin_result", "short", magic + b"\x00" * 12)
    for h in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, h))
        print(f"{h}: {len(files)} seeds, {sum(os.path.getsize(os.path.join(CORPUS, h, f)) for f in files)} bytes")


if __name__ == "__main__":
    main()

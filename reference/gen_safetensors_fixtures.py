"""Fixtures for every dtype of the safetensors format (safetensors 0.8), written by the real
Python `safetensors` package, plus torch's own decoding of all 256 codes of each fp8 format.

Writes reference/golden/safetensors/ (and its MANIFEST.tsv rows):
  dtype_<name>.safetensors  one per dtype: "x" (an odd shape, edge values of the dtype), "empty"
                            (0 elements) and "scalar" (0-d; not for F4/F6, whose single element
                            is not a whole byte), and one metadata entry "fixture": a JSON object
                            with case, comment, dtype, generator and expect.<tensor> = the values
                            as JSON strings: floats as Python repr of torch's/numpy's exact
                            float64 value ("nan", "inf"), complex as [re, im], integers in decimal
                            (exact beyond 2^53), bool as 0/1. (One entry because safetensors 0.8.0
                            writes the metadata map in random order.)
  fp8_all_codes.safetensors "codes" (U8 0..255) and, per fp8 format, "<name>.f32" / "<name>.f64":
                            torch's own conversion (tensor.view(float8_*).to(float32/float64)).
  writer_sha256.tsv         sha256 of each fixture re-written by OUR writer (st_writer_*), after
                            this script read it back with safetensors.numpy / safetensors.torch
                            (safetensors.deserialize for F6) and found every tensor bit-identical
                            and the metadata equal. tests/test_safetensors_dtypes.c re-writes the
                            fixtures and compares with these hashes, so a writer drift fails.

Which library writes what (safetensors 0.8.0 cannot write every dtype from every framework):
  safetensors.numpy.save: BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, F32, F64, C64
  safetensors.torch.save: BF16, F8_E4M3, F8_E4M3FNUZ, F8_E5M2, F8_E5M2FNUZ, F8_E8M0, F4 (as
    torch.float4_e2m1fn_x2: two values per byte, element 2k in bits 3..0, its header shape is the
    element count, the last dimension doubled)
  F6_E2M3, F6_E3M2: no Python framework has these dtypes and TensorSpec refuses them
    ('Unknown dtype "F6_E2M3"'), so this script writes the file bytes itself (canonical layout)
    and has them validated by safetensors.deserialize (the Rust reader, which knows F6: 6 bits per
    element, numel * 6 a multiple of 8). Their bit order is an assumption: a little-endian bit
    stream like torch's F4 (element i = bits [6i, 6i+6)); their values (and F4's: torch cannot
    convert float4_e2m1fn_x2) come from the OCP MX v1.0 definition written out below, not from a
    library.

Run with the venv of `make goldens` after `make` (needs build/tests/test_safetensors_dtypes):
  ~/.cache/trainbench-venv/bin/python reference/gen_safetensors_fixtures.py [--check]
"""
import argparse
import functools
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_io  # noqa: E402 - MANIFEST, writing

PROG = "gen_safetensors_fixtures.py"
die = functools.partial(golden_io.die, PROG)
SEED = 0  # no randomness: every value is listed below


# ---- OCP MX v1.0 definitions (sections 5.3.2, 5.3.3) for the formats torch cannot convert ----
def mx_decode(code, e, m, bias):
    sign = -1.0 if (code >> (e + m)) & 1 else 1.0
    ebits = (code >> m) & ((1 << e) - 1)
    man = code & ((1 << m) - 1)
    if ebits == 0:
        return sign * man / (1 << m) * 2.0 ** (1 - bias)
    return sign * (1 + man / (1 << m)) * 2.0 ** (ebits - bias)


def pack_bits(codes, bits):
    """Little-endian bit stream: element i at bits [i*bits, (i+1)*bits)."""
    acc = 0
    for i, c in enumerate(codes):
        acc |= c << (i * bits)
    nbytes = len(codes) * bits // 8
    return acc.to_bytes(nbytes, "little")


def fstr(v):
    return repr(float(v))


def raw_file(tensors, metadata):
    """Canonical safetensors bytes for raw (dtype, shape, bytes) entries, in the given order."""
    header = {"__metadata__": metadata}
    off = 0
    for name, (dt, shape, data) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(d for _, _, d in tensors.values())


def build(torch, np, st_np, st_torch):
    """name -> (file bytes, library). Each fixture: x, empty, scalar (+ expect.* metadata)."""
    out = {}

    def meta_for(name, st_name, comment, expects):
        # one metadata key: safetensors 0.8.0 writes a metadata map in random order (a Rust
        # HashMap), so several keys would make the file bytes differ from run to run
        m = {"case": f"dtype/{name}", "dtype": st_name, "comment": comment,
             "generator": golden_io.generator_id(__file__), "expect": expects}
        return {"fixture": json.dumps(m, sort_keys=True, separators=(",", ":"))}

    # numpy-written dtypes
    big = 2 ** 53 + 1
    np_cases = {
        "bool": ("BOOL", np.bool_, [True, False, True, True, False, False, True, False, True, True, False, True, False, False, True], True),
        "u8": ("U8", np.uint8, [0, 1, 2, 127, 128, 254, 255, 3, 4, 5, 6, 7, 8, 9, 10], 200),
        "i8": ("I8", np.int8, [0, 1, -1, 127, -128, -2, 2, 100, -100, 5, 6, 7, 8, 9, 10], -128),
        "u16": ("U16", np.uint16, [0, 1, 65535, 32768, 32767, 255, 256, 1000, 2, 3, 4, 5, 6, 7, 8], 65535),
        "i16": ("I16", np.int16, [0, 1, -1, 32767, -32768, -2, 2, 1000, -1000, 5, 6, 7, 8, 9, 10], -32768),
        "u32": ("U32", np.uint32, [0, 1, 2**32 - 1, 2**31, 2**31 - 1, 2**24 + 1, 65536, 7, 8, 9, 10, 11, 12, 13, 14], 2**32 - 1),
        "i32": ("I32", np.int32, [0, 1, -1, 2**31 - 1, -2**31, 2**24 + 1, -(2**24 + 1), 7, 8, 9, 10, 11, 12, 13, 14], -2**31),
        "u64": ("U64", np.uint64, [0, 1, 2**64 - 1, 2**63, 2**63 - 1, big, 2**53, big + 2, 2**64 - 2, 9, 10, 11, 12, 13, 14], 2**64 - 1),
        "i64": ("I64", np.int64, [0, 1, -1, 2**63 - 1, -2**63, big, -big, 2**53, -(2**53), -(2**63) + 1, 10, 11, 12, 13, 14], -big),
        "f16": ("F16", np.float16, [0.0, -0.0, 1.0, -2.5, 2**-24, -(2**-24), 2**-14, 65504.0, float("inf"), float("-inf"), float("nan"), 1 / 3, 0.1, -1e-5, 3.0], -0.0),
        "f32": ("F32", np.float32, [0.0, -0.0, 1.0, -2.5, 2**-149, -(2**-126), 3.4028234663852886e38, 1 / 3, float("inf"), float("-inf"), float("nan"), 0.1, -1e-30, 16777217.0, 3.0], 2**-149),
        "f64": ("F64", np.float64, [0.0, -0.0, 1.0, -2.5, 5e-324, -2.2250738585072014e-308, 1.7976931348623157e308, 1 / 3, float("inf"), float("-inf"), float("nan"), 0.1, -1e-300, 2.0**53 + 2, 3.0], 1 / 3),
    }
    for name, (st_name, npdt, vals, sval) in np_cases.items():
        x = np.array(vals, dtype=npdt).reshape(3, 5)
        s = np.array(sval, dtype=npdt)
        e = np.zeros((0, 3), dtype=npdt)
        if st_name == "BOOL":
            conv = lambda a: [int(v) for v in a.reshape(-1).tolist()]  # noqa: E731
        elif npdt in (np.float16, np.float32, np.float64):
            conv = lambda a: [fstr(v) for v in a.astype(np.float64).reshape(-1).tolist()]  # noqa: E731
        else:
            conv = lambda a: [str(int(v)) for v in a.reshape(-1).tolist()]  # noqa: E731
        meta = meta_for(name, st_name, f"{st_name} edge values, 0-element and 0-d tensors, written by safetensors.numpy",
                        {"x": conv(x), "empty": [], "scalar": conv(s)})
        out[name] = (st_np.save({"x": x, "empty": e, "scalar": s}, metadata=meta),
                     f"safetensors {st_np_version()} numpy {np.__version__}")

    # complex64 (numpy)
    cv = [1 + 2j, -0.0 + 0j, complex(float("inf"), -1), complex(float("nan"), 0.5), 2**-149 - 3.4e38j,
          0.1 + 0.2j, -1 - 1j, 3j, 4, 5, 6, 7, 8, 9, 10]
    x = np.array(cv, dtype=np.complex64).reshape(3, 5)
    s = np.array(-2.5 + 0.25j, dtype=np.complex64)
    conv = lambda a: [[fstr(v.real), fstr(v.imag)] for v in a.reshape(-1).tolist()]  # noqa: E731
    meta = meta_for("c64", "C64", "complex64 (real, imaginary) pairs incl. inf/nan parts, written by safetensors.numpy",
                    {"x": conv(x), "empty": [], "scalar": conv(s)})
    out["c64"] = (st_np.save({"x": x, "empty": np.zeros((0, 3), np.complex64), "scalar": s}, metadata=meta),
                  f"safetensors {st_np_version()} numpy {np.__version__}")

    # torch-written: bf16 and fp8 (values = torch's own float64 conversion)
    tv = f"safetensors {st_np_version()} torch {torch.__version__}"
    bf = torch.tensor([0.0, -0.0, 1.0, -2.5, 2**-133, 2**-126, 3.3895313892515355e38, 1 / 3, float("inf"),
                       float("-inf"), float("nan"), 0.1, -1e-30, 257.0, 3.0], dtype=torch.bfloat16).reshape(3, 5)
    tconv = lambda a: [fstr(v) for v in a.to(torch.float64).reshape(-1).tolist()]  # noqa: E731
    bs = torch.tensor(-0.0, dtype=torch.bfloat16)
    meta = meta_for("bf16", "BF16", "BF16 edge values, written by safetensors.torch",
                    {"x": tconv(bf), "empty": [], "scalar": tconv(bs)})
    out["bf16"] = (st_torch.save({"x": bf, "empty": torch.zeros((0, 3), dtype=torch.bfloat16), "scalar": bs},
                                 metadata=meta), tv)
    fp8 = {"f8_e4m3": ("F8_E4M3", torch.float8_e4m3fn), "f8_e4m3fnuz": ("F8_E4M3FNUZ", torch.float8_e4m3fnuz),
           "f8_e5m2": ("F8_E5M2", torch.float8_e5m2), "f8_e5m2fnuz": ("F8_E5M2FNUZ", torch.float8_e5m2fnuz),
           "f8_e8m0": ("F8_E8M0", torch.float8_e8m0fnu)}
    codes = [0x00, 0x80, 0x01, 0x81, 0x07, 0x08, 0x38, 0x7E, 0x7F, 0xFE, 0xFF, 0x7C, 0xFC, 0x3C, 0x55]
    for name, (st_name, tdt) in fp8.items():
        x = torch.tensor(codes, dtype=torch.uint8).view(tdt).reshape(3, 5)
        s = torch.tensor([0x40], dtype=torch.uint8).view(tdt).reshape(())
        meta = meta_for(name, st_name, f"{st_name} codes incl. 0, -0/NaN, subnormals, max, inf/NaN, written by "
                        "safetensors.torch; expect = torch's own float64 conversion",
                        {"x": tconv(x), "empty": [], "scalar": tconv(s)})
        out[name] = (st_torch.save({"x": x, "empty": torch.zeros((0, 3), dtype=torch.uint8).view(tdt),
                                    "scalar": s}, metadata=meta), tv)

    # F4 via torch.float4_e2m1fn_x2 (torch stores, cannot convert: values from the MX definition)
    f4codes = [0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xE, 0xF]  # 12 elements, (3, 4)
    packed = pack_bits(f4codes, 4)
    x = torch.frombuffer(bytearray(packed), dtype=torch.uint8).view(torch.float4_e2m1fn_x2).reshape(3, 2)
    meta = meta_for("f4", "F4", "F4 (MX E2M1) all magnitudes, written by safetensors.torch from "
                    "torch.float4_e2m1fn_x2 (header shape = elements); expect from the OCP MX definition",
                    {"x": [fstr(mx_decode(c, 2, 1, 1)) for c in f4codes], "empty": []})
    out["f4"] = (st_torch.save({"x": x, "empty": torch.zeros((0, 1), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)},
                               metadata=meta), tv)

    # F6: bytes written here, validated by safetensors.deserialize below
    for name, st_name, e, m, bias in (("f6_e2m3", "F6_E2M3", 2, 3, 1), ("f6_e3m2", "F6_E3M2", 3, 2, 3)):
        c6 = [0x00, 0x20, 0x01, 0x1F, 0x3F, 0x08, 0x07, 0x2A, 0x15, 0x10, 0x30, 0x0C]  # 12 elements, (3, 4)
        meta = meta_for(name, st_name, f"{st_name} (MX FP6) bytes written by this script (no Python framework "
                        "writes F6), little-endian bit order assumed; expect from the OCP MX definition",
                        {"x": [fstr(mx_decode(c, e, m, bias)) for c in c6], "empty": []})
        blob = raw_file({"x": (st_name, [3, 4], pack_bits(c6, 6)), "empty": (st_name, [0, 4], b"")}, meta)
        out[name] = (blob, f"safetensors {st_np_version()} (deserialize only)")
    return out


_ST_VERSION = None


def st_np_version():
    return _ST_VERSION


def fp8_all_codes(torch, st_torch):
    tensors = {"codes": torch.arange(256, dtype=torch.uint8)}
    names = {"f8_e4m3": torch.float8_e4m3fn, "f8_e4m3fnuz": torch.float8_e4m3fnuz,
             "f8_e5m2": torch.float8_e5m2, "f8_e5m2fnuz": torch.float8_e5m2fnuz, "f8_e8m0": torch.float8_e8m0fnu}
    for name, tdt in names.items():
        v = tensors["codes"].view(tdt)
        tensors[f"{name}.f32"] = v.to(torch.float32)
        tensors[f"{name}.f64"] = v.to(torch.float64)
    meta = {"fixture": json.dumps({"case": "fp8_all_codes", "generator": golden_io.generator_id(__file__),
                                   "comment": "all 256 codes of each fp8 format decoded by torch "
                                   f"{torch.__version__} (tensor.view(float8_*).to(float32/float64)); "
                                   "NaN payloads are torch's"}, sort_keys=True, separators=(",", ":"))}
    return st_torch.save(tensors, metadata=meta)


def load_any(path, st_np, st_torch, safetensors, torch, np):
    """name -> raw bytes of every tensor (as the Python package returns them), and the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    hlen = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + hlen])
    meta = header.get("__metadata__", {})
    dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    out = {}
    if dtypes <= {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32", "F64", "C64"}:
        how = "safetensors.numpy.load_file"
        for k, a in st_np.load_file(path).items():
            out[k] = (list(a.shape), a.tobytes())
    elif not dtypes & {"F6_E2M3", "F6_E3M2"}:
        how = "safetensors.torch.load_file"
        for k, t in st_torch.load_file(path).items():
            shape = list(t.shape)
            if t.dtype == torch.float4_e2m1fn_x2:
                shape[-1] *= 2  # logical element count, as in the header
            out[k] = (shape, t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    else:
        how = "safetensors.deserialize"
        for k, v in safetensors.deserialize(blob):
            out[k] = (list(v["shape"]), bytes(v["data"]))
    return out, meta, how


def main():
    global _ST_VERSION
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="reference/golden", help="golden root (default reference/golden)")
    ap.add_argument("--writer", default="build/tests/test_safetensors_dtypes",
                    help="our re-writer (test binary with --write-dir)")
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = ap.parse_args()
    torch, np, safetensors, st_np, st_torch = golden_io.require(PROG, [
        ("torch", "torch>=2.5"), ("numpy", "numpy"), ("safetensors", "safetensors>=0.8"),
        ("safetensors.numpy", "safetensors"), ("safetensors.torch", "safetensors")])
    golden_io.require_version(PROG, "safetensors", safetensors.__version__, "0.8", "F8_E8M0, F4, F6 dtypes")
    _ST_VERSION = safetensors.__version__
    folder = os.path.join(args.out, "safetensors")
    goldens = golden_io.Goldens(PROG, __file__, os.path.join(args.out, "MANIFEST.tsv"), check=args.check)

    fixtures = build(torch, np, st_np, st_torch)
    paths = {}
    for name, (blob, lib) in sorted(fixtures.items()):
        path = os.path.join(folder, f"dtype_{name}.safetensors")
        goldens.put(path, blob, lib, SEED)
        paths[name] = path
    goldens.put(os.path.join(folder, "fp8_all_codes.safetensors"), fp8_all_codes(torch, st_torch),
                f"safetensors {_ST_VERSION} torch {torch.__version__}", SEED)
    if args.check:
        goldens.finish_check()
        return

    # our writer: re-write every fixture, read it back with the Python package, compare
    if not os.path.exists(args.writer):
        die(f"{args.writer} not found: run `make` first")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([args.writer, "--write-dir", tmp, folder], capture_output=True, text=True)
        if r.returncode != 0:
            die(f"{args.writer} --write-dir failed ({r.returncode}): {r.stderr}{r.stdout}")
        for name, path in sorted(paths.items()):
            ours = os.path.join(tmp, os.path.basename(path))
            want, want_meta, how = load_any(path, st_np, st_torch, safetensors, torch, np)
            got, got_meta, how2 = load_any(ours, st_np, st_torch, safetensors, torch, np)
            if got != want or got_meta != want_meta:
                die(f"our writer's {os.path.basename(path)} reads back differently with {how2}", code=1)
            with open(ours, "rb") as f:
                sha = hashlib.sha256(f.read()).hexdigest()
            rows.append(f"{os.path.basename(path)}\t{sha}\t{how2}\n")
            print(f"writer ok {os.path.basename(path)}: {len(got)} tensors identical via {how2}")
    tsv = ("# fixture\tsha256 of our writer's re-write\tread back and verified with\n" + "".join(rows)).encode()
    goldens.put(os.path.join(folder, "writer_sha256.tsv"), tsv, f"safetensors {_ST_VERSION}", SEED)
    n = goldens.write_manifest()
    print(f"MANIFEST.tsv: {n} rows")


if __name__ == "__main__":
    main()

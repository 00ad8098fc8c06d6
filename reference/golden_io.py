"""Helpers shared by the scripts of reference/: error exit, library import checks, the canonical
safetensors writer, and writing (or `--check`ing) golden files with their MANIFEST.tsv rows.

Importing this module does nothing but define these helpers; it needs only the standard library
(torch is passed in by the caller). Part of every golden's generating code is here, so a golden's
`generator` names both files (generator_id below).
"""
import datetime
import hashlib
import importlib
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
MANIFEST_HEADER = ["file", "sha256", "generator", "library_versions", "seed", "date_utc"]
INSTALL_HINT = ("\n  create the venv described in reference/README.md, e.g.\n"
                "  python3 -m venv ~/.cache/trainbench-venv && ~/.cache/trainbench-venv/bin/pip install"
                " \"torch>=2.5\" transformers \"bitsandbytes>=0.50\" safetensors numpy")


def die(prog, msg, code=2):
    """Print '<prog>: <msg>' to stderr and exit (2: unusable input or setup, 1: a failed check)."""
    sys.stderr.write(prog + ": " + msg + "\n")
    sys.exit(code)


# ----------------------------------------------------------------------------------------------
# libraries
# ----------------------------------------------------------------------------------------------
def version_tuple(v):
    """'2.15.0+cu132' -> (2, 15, 0): the digits of each dot-separated part, up to a part without any."""
    out = []
    for part in v.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def require(prog, wanted):
    """Import every module of `wanted` [(module name, what to install)], or exit 2 naming all that
    are missing and how to create the venv. Installs nothing. Returns the modules in order.
    A dotted name (a submodule) is skipped when its package already failed, so a missing
    package is named once."""
    modules, missing, failed = [], [], set()
    for name, what in wanted:
        if name.split(".")[0] in failed:
            modules.append(None)
            continue
        try:
            modules.append(importlib.import_module(name))
        except Exception as e:  # noqa: BLE001 - report any import failure
            missing.append(f"{what} ({e})")
            failed.add(name)
            modules.append(None)
    if missing:
        die(prog, "missing reference libraries: " + "; ".join(missing) + INSTALL_HINT)
    return modules


def require_version(prog, name, version, minimum, why):
    """Exit 2 unless version >= minimum (both strings like '2.5'); `why` says what needs it."""
    if version_tuple(version) < version_tuple(minimum):
        die(prog, f"{name} >= {minimum} is required ({why}); found {version}")


# ----------------------------------------------------------------------------------------------
# safetensors writer (canonical: sorted header keys, tensors ordered by (dtype size desc, name)),
# so that the same tensors always give the same bytes
# ----------------------------------------------------------------------------------------------
def safetensors_dtypes(torch):
    """torch dtype -> (safetensors name, element size)."""
    return {torch.float64: ("F64", 8), torch.int64: ("I64", 8), torch.float32: ("F32", 4),
            torch.bfloat16: ("BF16", 2), torch.float16: ("F16", 2), torch.uint8: ("U8", 1)}


def tensor_bytes(torch, t):
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):   # numpy has no bfloat16: write the raw bits
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()  # numpy writes little-endian on every supported host


def safetensors_bytes(torch, tensors, metadata):
    """tensors: dict name -> torch.Tensor; metadata: dict str -> str."""
    if sys.byteorder != "little":
        die("golden_io", "big-endian hosts are not supported by this writer")
    dtypes = safetensors_dtypes(torch)
    entries = []
    for name, t in tensors.items():
        dname, size = dtypes[t.dtype]
        entries.append((-size, name, dname, list(t.shape), tensor_bytes(torch, t)))
    entries.sort(key=lambda e: (e[0], e[1]))
    header = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    offset = 0
    for _, name, dname, shape, data in entries:
        header[name] = {"dtype": dname, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # pad the header to a multiple of 8 bytes
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(e[4] for e in entries)


def snapshot_state(torch, state, floats=False):
    """optimizer.state[p] as tensors under the optimizer's own keys: tensors cloned, Python ints
    as 0-d int64, Python floats as 0-d float32 only when `floats` (the goldens never saw one)."""
    out = {}
    for key, v in state.items():
        if torch.is_tensor(v):
            out[key] = v.detach().clone().contiguous()
        elif isinstance(v, bool):
            raise TypeError(f"unexpected bool state entry {key}")
        elif isinstance(v, int):
            out[key] = torch.tensor(v, dtype=torch.int64)
        elif isinstance(v, float) and floats:
            out[key] = torch.tensor(v, dtype=torch.float32)
        else:
            raise TypeError(f"state entry {key} of type {type(v).__name__} cannot be written")
    return out


# ----------------------------------------------------------------------------------------------
# provenance, MANIFEST.tsv, writing or checking golden files
# ----------------------------------------------------------------------------------------------
def sha16(path):
    """The first 16 hex digits of a file's sha256."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def script_name(script):
    """'reference/<file>': how goldens and MANIFEST.tsv name a script of this folder."""
    return "reference/" + os.path.basename(script)


def generator_id(script):
    """The `generator` of a golden: the script and this module, each with its sha256 prefix,
    e.g. 'reference/gen_optim_goldens.py sha256:<16 hex> + reference/golden_io.py sha256:<16 hex>'."""
    return (f"{script_name(script)} sha256:{sha16(script)} + "
            f"{script_name(__file__)} sha256:{sha16(__file__)}")


def repo_path(path):
    """A path as MANIFEST.tsv spells it: relative to the repository root, with '/'."""
    return os.path.relpath(os.path.abspath(path), REPO_ROOT).replace(os.sep, "/")


def read_manifest(path):
    """The rows of a MANIFEST.tsv (lists of columns, header left out); [] when there is none."""
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for line in lines[1:]:
            if line.strip():
                rows.append(line.split("\t"))
    return rows


class Goldens:
    """One generator run: writes golden files (tmp + rename) and updates its rows of MANIFEST.tsv,
    or with check=True compares fresh bytes with the files on disk and writes nothing."""

    def __init__(self, prog, script, manifest_path, check=False):
        self.prog, self.manifest_path, self.check = prog, manifest_path, check
        self.script = script_name(script)
        self.generator = generator_id(script)
        self.old_rows = read_manifest(manifest_path)
        self.old_by_file = {r[0]: r for r in self.old_rows}
        self.now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.new_rows = {}
        self.mismatches = []
        self.total = 0

    def put(self, path, blob, library, seed, quiet=False):
        """Check or write one file; its row keeps the old date when the sha256 did not change."""
        rel = repo_path(path)
        sha = hashlib.sha256(blob).hexdigest()
        self.total += len(blob)
        if self.check:
            try:
                with open(path, "rb") as f:
                    same = f.read() == blob
            except OSError:
                same = False
            if not same:
                self.mismatches.append(rel)
            if not quiet:
                print(f"{'same' if same else 'DIFF'} {rel}")
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
        old = self.old_by_file.get(rel)
        date = old[5] if old and len(old) > 5 and old[1] == sha else self.now
        self.new_rows[rel] = [rel, sha, self.generator, library, str(seed), date]
        if not quiet:
            print(f"wrote {rel} ({len(blob)} bytes)")

    def finish_check(self):
        """--check: exit 1 naming the files that differ, else say all are identical."""
        if self.mismatches:
            die(self.prog, f"{len(self.mismatches)} file(s) differ from a fresh run: " +
                ", ".join(self.mismatches), code=1)
        print("all files identical to a fresh run")

    def write_manifest(self, stale=None):
        """Rewrite MANIFEST.tsv: the rows of this run replace those of the same files; of the other
        rows, only this generator's own (its `generator` column names this script) are dropped,
        and only where stale(file) says this run should have made the file but no longer does.
        Rows of other generators are always kept. Returns the number of rows."""
        def keep(r):
            if r[0] in self.new_rows:
                return False
            own = len(r) > 2 and r[2].split(" ")[0] == self.script
            return not (own and stale and stale(r[0]))
        rows = [r for r in self.old_rows if keep(r)] + list(self.new_rows.values())
        rows.sort(key=lambda r: r[0])
        tmp = self.manifest_path + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write("\t".join(MANIFEST_HEADER) + "\n")
            for r in rows:
                f.write("\t".join(r) + "\n")
        os.replace(tmp, self.manifest_path)
        return len(rows)

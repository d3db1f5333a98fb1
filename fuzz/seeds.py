#!/usr/bin/env python3
"""Writes the seed corpus and dictionary of one fuzz target (fuzz/README.md).

usage: seeds.py TARGET OUT_DIR      TARGET: parser | interpreter | dimop | safetensors | profile | env | plan

Seeds come from the repository, so they follow it: the .nns files of
examples/, stdlib/ and tests/ (parser, interpreter); the dimop annotations
of the op declarations in those files and of the dimop unit tests (dimop);
small safetensors files written here, plus any .safetensors under tests/
(safetensors). The parser's dictionary is every literal token of
grammar/Nns.g4; the others are fuzz/*.dict.
"""
import hashlib
import json
import pathlib
import re
import shutil
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def nns_files():
    for pattern in ("examples/*.nns", "stdlib/*.nns", "tests/**/*.nns"):
        yield from sorted(ROOT.glob(pattern))


def put(out, data):
    if isinstance(data, str):
        data = data.encode()
    (out / hashlib.sha1(data).hexdigest()).write_bytes(data)


def grammar_dict(path):
    tokens = sorted(set(re.findall(r"'((?:[^'\\]|\\.)+)'", (ROOT / "grammar/Nns.g4").read_text())))
    with open(path, "w") as f:
        for t in tokens:
            t = t.replace("\\\\", "\\")
            f.write('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"\n')


def annotations():
    """The dimop strings of every op declaration and of the dimop unit tests."""
    found = set()
    # op NAME(PARAMS) : "A" | "B" ... (the params may span lines)
    decl = re.compile(r'\bop\s+\w+\s*\((?:[^()]|\([^()]*\))*\)\s*:\s*((?:"[^"\n]*"\s*\|?\s*)+)')
    for f in nns_files():
        for m in decl.finditer(f.read_text(errors="replace")):
            found.update(re.findall(r'"([^"\n]*)"', m.group(1)))
    for f in sorted(ROOT.glob("tests/unit/test_dimop.cpp")):
        for lit in re.findall(r'"((?:[^"\\\n]|\\.)*)"', f.read_text()):
            if "->" in lit:
                found.add(lit.encode().decode("unicode_escape"))
    return sorted(found)


def safetensors(tensors, metadata=None):
    """A file as the reference writer lays it out (tensors given in data order)."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds(out):
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    put(out, safetensors([]))
    put(out, safetensors([], {"step": "3", "world": "2"}))
    put(out, safetensors([("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))]))
    put(out, safetensors([("s", "F32", [], f32(0.5))], {"format": "pt"}))
    put(out, safetensors([("empty", "F32", [0, 4], b""), ("b", "F32", [1], f32(7))]))
    put(out, safetensors([("a", "F64", [2], struct.pack("<2d", 1, 2)), ("i", "I64", [1], struct.pack("<q", -1)),
                          ("h", "BF16", [2], b"\x80\x3f\x00\x40"), ("m", "BOOL", [3], b"\x01\x00\x01")],
                         {"step": "10"}))
    put(out, safetensors([("model.w1", "F32", [4, 2], f32(*range(8))), ("adamw.m.model.w1", "F32", [4, 2], f32(*[0] * 8)),
                          ("x", "F32", [2, 2, 1], f32(1, 2, 3, 4))], {"step": "1", "world": "1", "nns": "checkpoint"}))
    for f in sorted(ROOT.glob("tests/**/*.safetensors")):
        put(out, f.read_bytes())


# Plan bodies for fuzz_plan's fixed model (fuzz/fuzz_plan.cpp): data,
# tensor and pipeline parallelism, every schedule kind, zero1 and
# recompute, an order. Each evaluates; all are legal there except
# interlaced, nf1b and 3f1b, which the checker refuses with a located error
# (the model has one pass and no head or tail), so their refusals are
# fuzzed too.
PLAN_BODIES = [
    "  same_split(select(\"*\"), \"batch\", name = \"dp\")\n  for op in select(\"*\") {\n    if splittable(op, \"batch\") {\n      let parts = trans(op, dim = \"batch\", num = ngpus)\n      for i in 0..ngpus { assign(parts[i], i) }\n    } else {\n      replicate(op, 0..ngpus)\n    }\n  }",
    "  for op in select(\"blocks.0.*linear#*\") {\n    let parts = trans(op, dim = \"n\", num = ngpus)\n    for i in 0..ngpus { assign(parts[i], i) }\n  }\n  split_only(select(\"*linear#*\"), [\"batch\", \"n\"], name = \"t\")\n  replicate(unassigned(), 0..ngpus)",
    "  let s0 = select(\"blocks.0.*\")\n  let s1 = select(\"blocks.1.*\") + select(\"layer_norm#*\") + select(\"mse#*\")\n  assign(s0, 0)\n  assign(s1, 1)\n  schedule(\"1f1b\", [s0, s1])",
    # The other schedule kinds, so mutations start from each one's arguments.
    "  let s0 = select(\"blocks.0.*\")\n  let s1 = select(\"blocks.1.*\") + select(\"layer_norm#*\") + select(\"mse#*\")\n  assign(s0, 0)\n  assign(s1, 1)\n  schedule(\"gpipe\", [s0, s1])",
    "  let s0 = select(\"blocks.0.*\")\n  let s1 = select(\"blocks.1.*\") + select(\"layer_norm#*\") + select(\"mse#*\")\n  assign(s0, 0)\n  assign(s1, 1)\n  schedule(\"zb-h1\", [s0, s1])",
    "  let s0 = select(\"blocks.0.*\")\n  let s1 = select(\"blocks.1.*\") + select(\"layer_norm#*\") + select(\"mse#*\")\n  assign(s0, 0)\n  assign(s1, 1)\n  schedule(\"interleaved\", [s0, s1], v = 1)",
    "  let s0 = select(\"blocks.0.*\")\n  let s1 = select(\"blocks.1.*\") + select(\"layer_norm#*\") + select(\"mse#*\")\n  assign(s0, 0)\n  assign(s1, 1)\n  schedule(\"interlaced\", [s0, s1], head = s0, tail = s1)",
    "  let s0 = select(\"blocks.0.*\")\n  let s1 = select(\"blocks.1.*\") + select(\"layer_norm#*\") + select(\"mse#*\")\n  assign(s0, 0)\n  assign(s1, 1)\n  schedule(\"nf1b\", [[s0, s1], [s0, s1]])",
    "  let s0 = select(\"blocks.0.*\")\n  let s1 = select(\"blocks.1.*\") + select(\"layer_norm#*\") + select(\"mse#*\")\n  assign(s0, 0)\n  assign(s1, 1)\n  schedule(\"3f1b\", [[s0, s1], [s0, s1], [s0, s1]])",
    "  zero1(select(\"*\"))\n  recompute(select(\"blocks.0.*\"))\n  replicate(unassigned(), 0..ngpus)",
    "  assign(select(\"blocks.0.*\"), 0)\n  assign(select(\"blocks.1.*\"), 1)\n  replicate(unassigned(), [0, 1])\n  order(select(\"blocks.1.linear#0\"), select(\"blocks.0.linear#0\"))",
]


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("parser", "interpreter", "dimop", "safetensors", "profile", "env", "plan"):
        sys.exit(__doc__)
    target, out = sys.argv[1], pathlib.Path(sys.argv[2])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if target in ("parser", "interpreter"):
        for f in nns_files():
            put(out, f.read_bytes())
        grammar_dict(out.parent / "nns.dict")
    elif target == "dimop":
        for a in annotations():
            put(out, a)
            # a second line: the inputs' dim sizes for a binding with shapes
            put(out, a + "\n\x02\x04\x03\x08\x01\x00")
    elif target == "profile":
        for f in sorted((ROOT / "stdlib" / "profiles").glob("*.json")):
            put(out, f.read_bytes())
    elif target == "env":
        for text in ("RANK=0\nWORLD_SIZE=2\nLOCAL_RANK=0\nLOCAL_WORLD_SIZE=2\nMASTER_PORT=29500\n",
                     "SLURM_PROCID=1\nSLURM_NTASKS=4\nSLURM_STEP_ID=0\nSLURM_TASKS_PER_NODE=2(x2)\nSLURM_NODEID=1\nSLURM_JOB_NODELIST=n[01-02]\n",
                     "OMPI_COMM_WORLD_RANK=0\nOMPI_COMM_WORLD_SIZE=2\nNNS_MASTER_ADDR=h\n",
                     "NNS_THREADS=4\nNNS_COMM_SPIN_US=50\nNNS_BIND=1\nNNS_COMM_TIMEOUT=2.5\nNNS_LAUNCHER=local\nNNS_RANK=1\nNNS_WORLD_SIZE=2\n"):
            put(out, text.encode())
    elif target == "plan":
        for body in PLAN_BODIES:
            put(out, body)
    else:
        safetensors_seeds(out)
    print(f"seeds: {len(list(out.iterdir()))} {target} inputs in {out}")


if __name__ == "__main__":
    main()

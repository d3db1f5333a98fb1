#!/usr/bin/env python3
"""Checks that the PyTorch twins in torch_step.py compute what nns computes:
same weights (nns --init) and data (nns --data) on both sides, then compares
the first step's loss, every parameter gradient (nns --dump-grads) and the
parameters after one AdamW step (nns --save).  Not a test; run by hand:

    /usr/bin/python3 bench/torch/verify_twin.py [gpt|swin ...] [--nns build/nns]
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_step as ts  # noqa: E402

DT = {torch.float32: "F32", torch.int32: "I32"}
NP = {"F32": torch.float32, "I32": torch.int32}


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        b = t.numpy().tobytes()
        header[name] = {"dtype": DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=NP[info["dtype"]]).reshape(info["shape"])
    return out


def rel_err(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=["gpt", "swin"])
    ap.add_argument("--nns", default=os.path.join(ts.ROOT, "build", "nns"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ok = True
    for case in args.cases:
        ok &= check(case, args.nns, args.threads)
    return 0 if ok else 1


def check(case, nns, threads):
    torch.manual_seed(0)
    model, inputs, loss_fn, o, warm, clip, cfg = ts.make_case(case, "tiny")
    with torch.no_grad():  # no exact zeros/ones, so that every gradient path is exercised
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    named = dict(model.named_parameters())
    before = {n: p.detach().clone() for n, p in named.items()}
    with tempfile.TemporaryDirectory() as d:
        w, data, g, ck = (os.path.join(d, f) for f in ("w.st", "d.st", "g.st", "ck.st"))
        write_st(w, named)
        write_st(data, {k: (v.to(torch.int32) if v.dtype == torch.int64 else v) for k, v in inputs.items()})
        r = subprocess.run([nns, "run", os.path.join(ts.ROOT, "examples", case + ".nns"), "--config", "tiny", "--steps", "1",
                            "--threads", str(threads), "--init", w, "--data", data, "--dump-grads", g, "--save", ck],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{case}: nns run failed ({r.returncode}):\n{r.stdout}{r.stderr}")
            return False
        out = r.stdout
        nns_loss = float(re.search(r"step\s+1/1\s+loss\s+(\S+)", out).group(1))
        nns_grads, nns_after = read_st(g), read_st(ck)

    params = list(model.parameters())
    opt, _ = ts.make_optimizer(params, o, warm, 1)
    loss = loss_fn(inputs)
    loss.backward()
    missing = sorted(set(named) ^ set(nns_grads))
    # nns clips in place before --dump-grads writes the gradients: compare clipped ones.
    gnorm = float(ts.grad_norm_and_clip(params, clip))
    # The key bias bk gets a zero gradient in exact arithmetic (softmax ignores a
    # per-row constant), so both sides hold rounding noise there: errors are taken
    # relative to max(|torch grad|, 1e-3 * the largest gradient anywhere), and the
    # update check skips such noise-only parameters (AdamW amplifies noise to +-lr).
    top = max(float(p.grad.abs().max()) for p in params)
    noise = {n for n, p in named.items() if float(p.grad.abs().max()) < 1e-5 * top}
    worst_g = max((float((nns_grads[n] - p.grad).abs().max()) / max(float(p.grad.abs().max()), 1e-3 * top), n)
                  for n, p in named.items() if n in nns_grads)
    opt.step()
    worst_u = max((rel_err(nns_after[n] - before[n], p.detach() - before[n]), n)
                  for n, p in named.items() if n in nns_after and n not in noise)
    good = not missing and abs(nns_loss - float(loss)) < 1e-4 * max(1.0, abs(float(loss))) and worst_g[0] < 1e-3 and worst_u[0] < 1e-2
    nns_gnorm = float(re.search(r"\|g\|\s+(\S+)", out).group(1))
    print(f"{case}: loss nns {nns_loss:.6f} torch {float(loss):.6f}; |g| nns {nns_gnorm:.4g} torch {gnorm:.4g}; "
          f"worst gradient error {worst_g[0]:.2e} ({worst_g[1]}); worst update error {worst_u[0]:.2e} ({worst_u[1]}); "
          f"{len(named)} parameters ({len(noise)} with zero gradient: {','.join(sorted(noise)) or '-'}){', name mismatch: ' + str(missing) if missing else ''} -> {'MATCH' if good else 'DIFFER'}")
    return good


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Hugging Face-layout checkpoints for the pretrained-weights tests, and the
logits of an independent PyTorch implementation of the same models.

Written from the architectures' definitions (GPT-2: Radford et al. 2019 and
the "gpt2" checkpoint's tensor names and Conv1D [in, out] layout; Llama:
Touvron et al. 2023 and transformers' LlamaForCausalLM names, rotate-half
rotary embedding, grouped KV heads), not from nns: the point is that two
implementations agree.

  hf_reference.py make gpt2|llama DIR [--layers L] [--seq S] [--dtype F32|BF16] [--shards K] [--prefix P] [--extra NAME] [--drop NAME]
      random weights in the HF layout (DIR/model.safetensors, or K shards
      with model.safetensors.index.json), and DIR/data.safetensors with the
      token ids (and targets) nns reads as --data.
  hf_reference.py compare gpt2|llama DIR OUTPUTS.safetensors [--bound B]
      the float64 PyTorch logits of DIR's weights and tokens against the
      "logits" tensor nns wrote (--dump-outputs); prints the error and exits
      1 beyond the bound (max |nns - torch| / max |torch|).
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

# Shapes of the models' test configs: GPT-2 small (the "gpt2" checkpoint)
# and examples/llama.nns's tiny config.
SHAPES = {
    "gpt2": dict(vocab=50257, dim=768, heads=12, layers=12, positions=1024),
    "llama": dict(vocab=128, dim=64, heads=8, kv_heads=4, ffn=160, layers=2, theta=10000.0),
}

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32}
CODES = {v: k for k, v in DTYPES.items()}


def write_safetensors(path, tensors, metadata=None):
    """The safetensors format from its definition: an 8-byte little-endian
    header length, a JSON header (name -> dtype, shape, data_offsets), the
    data; header space-padded to a multiple of 8."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = bytearray(data[a:b])
        if e["dtype"] == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(raw, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def read_checkpoint(d):
    try:
        with open(d + "/model.safetensors.index.json") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    w = {}
    for name in files:
        w.update(read_safetensors(d + "/" + name))
    return w


def gpt2_weights(s, g):
    d, n = s["dim"], s["layers"]
    normal = lambda *shape, std=0.02: torch.randn(*shape, generator=g) * std
    w = {"wte.weight": normal(s["vocab"], d), "wpe.weight": normal(s["positions"], d, std=0.01)}
    for i in range(n):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[p + ln + ".weight"] = 1 + normal(d, std=0.1)
            w[p + ln + ".bias"] = normal(d)
        w[p + "attn.c_attn.weight"] = normal(d, 3 * d)  # Conv1D: [in, out]
        w[p + "attn.c_attn.bias"] = normal(3 * d)
        w[p + "attn.c_proj.weight"] = normal(d, d, std=0.02 / math.sqrt(2 * n))
        w[p + "attn.c_proj.bias"] = normal(d)
        w[p + "mlp.c_fc.weight"] = normal(d, 4 * d)
        w[p + "mlp.c_fc.bias"] = normal(4 * d)
        w[p + "mlp.c_proj.weight"] = normal(4 * d, d, std=0.02 / math.sqrt(2 * n))
        w[p + "mlp.c_proj.bias"] = normal(d)
        # The "gpt2" checkpoint stores the causal mask as a buffer.
        w[p + "attn.bias"] = torch.tril(torch.ones(s["positions"], s["positions"])).view(1, 1, s["positions"], s["positions"])
    w["ln_f.weight"] = 1 + normal(d, std=0.1)
    w["ln_f.bias"] = normal(d)
    return w


def llama_weights(s, g):
    d, hd = s["dim"], s["dim"] // s["heads"]
    normal = lambda *shape, std=0.05: torch.randn(*shape, generator=g) * std
    w = {"model.embed_tokens.weight": normal(s["vocab"], d, std=1.0)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + normal(d, std=0.1)
        w[p + "self_attn.q_proj.weight"] = normal(d, d)  # nn.Linear: [out, in]
        w[p + "self_attn.k_proj.weight"] = normal(s["kv_heads"] * hd, d)
        w[p + "self_attn.v_proj.weight"] = normal(s["kv_heads"] * hd, d)
        w[p + "self_attn.o_proj.weight"] = normal(d, d)
        w[p + "post_attention_layernorm.weight"] = 1 + normal(d, std=0.1)
        w[p + "mlp.gate_proj.weight"] = normal(s["ffn"], d)
        w[p + "mlp.up_proj.weight"] = normal(s["ffn"], d)
        w[p + "mlp.down_proj.weight"] = normal(d, s["ffn"])
    w["model.norm.weight"] = 1 + normal(d, std=0.1)
    w["lm_head.weight"] = normal(s["vocab"], d)
    return w


def causal_attention(q, k, v):
    """q [b, h, s, e], k and v [b, h, s, e]: softmax(q k^T / sqrt(e)) v with
    position j hidden from i < j."""
    seq = q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def gpt2_logits(w, ids, s):
    b, seq = ids.shape
    d, h = s["dim"], s["heads"]
    heads = lambda t: t.view(b, seq, h, d // h).transpose(1, 2)
    x = w["wte.weight"][ids] + w["wpe.weight"][:seq]
    for i in range(s["layers"]):
        p = f"h.{i}."
        a = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps=1e-5)
        q, k, v = (a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(d, dim=-1)
        y = causal_attention(heads(q), heads(k), heads(v)).transpose(1, 2).reshape(b, seq, d)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps=1e-5)
        m = F.gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (d,), w["ln_f.weight"], w["ln_f.bias"], eps=1e-5)
    return x @ w["wte.weight"].T  # the head is tied to the token embedding


def llama_logits(w, ids, s):
    b, seq = ids.shape
    d, h, kv = s["dim"], s["heads"], s["kv_heads"]
    hd = d // h

    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight

    inv_freq = 1.0 / (s["theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    def rotate(t):  # rotate_half: [x1, x2] -> [-x2, x1]
        x1, x2 = t[..., : hd // 2], t[..., hd // 2:]
        return t * cos + torch.cat([-x2, x1], -1) * sin

    x = w["model.embed_tokens.weight"][ids]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        a = rms(x, w[p + "input_layernorm.weight"])
        q = rotate((a @ w[p + "self_attn.q_proj.weight"].T).view(b, seq, h, hd).transpose(1, 2))
        k = rotate((a @ w[p + "self_attn.k_proj.weight"].T).view(b, seq, kv, hd).transpose(1, 2))
        v = (a @ w[p + "self_attn.v_proj.weight"].T).view(b, seq, kv, hd).transpose(1, 2)
        # Query head j reads KV head j // (h / kv).
        k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(b, seq, d)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"])
        m = F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)
        x = x + m @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def make(args):
    s = dict(SHAPES[args.model])
    if args.layers:
        s["layers"] = args.layers
    g = torch.Generator().manual_seed(args.seed)
    w = gpt2_weights(s, g) if args.model == "gpt2" else llama_weights(s, g)
    if args.extra:
        w[args.extra] = torch.zeros(4)
    for name in args.drop:
        del w[name]
    dtype = DTYPES[args.dtype]
    w = {args.prefix + k: (v.to(dtype) if v.is_floating_point() else v) for k, v in w.items()}
    names = list(w)
    if args.shards <= 1:
        write_safetensors(f"{args.dir}/model.safetensors", w, {"format": "pt"})
    else:
        weight_map = {}
        for k in range(args.shards):
            part = names[k::args.shards]
            file = f"model-{k + 1:05d}-of-{args.shards:05d}.safetensors"
            write_safetensors(f"{args.dir}/{file}", {n: w[n] for n in part}, {"format": "pt"})
            weight_map.update({n: file for n in part})
        with open(f"{args.dir}/model.safetensors.index.json", "w") as f:
            json.dump({"metadata": {"total_size": sum(t.numel() * t.element_size() for t in w.values())}, "weight_map": weight_map}, f)
    ids = torch.randint(0, s["vocab"], (1, args.seq), generator=g, dtype=torch.int32)
    write_safetensors(f"{args.dir}/data.safetensors", {"ids": ids, "targets": ids.roll(-1, 1)})


def compare(args):
    s = dict(SHAPES[args.model])
    w = read_checkpoint(args.dir)
    prefix = "transformer."
    w = {(k[len(prefix):] if k.startswith(prefix) else k): v.to(torch.float64) for k, v in w.items()}
    s["layers"] = len({k.split(".")[1] for k in w if k.startswith("h.")}) if args.model == "gpt2" else \
        len({k.split(".")[2] for k in w if k.startswith("model.layers.")})
    ids = read_safetensors(args.dir + "/data.safetensors")["ids"].long()
    with torch.no_grad():
        ref = (gpt2_logits if args.model == "gpt2" else llama_logits)(w, ids, s)
    ours = read_safetensors(args.outputs)["logits"].to(torch.float64).reshape(ref.shape)
    err = (ours - ref).abs().max().item() / ref.abs().max().item()
    norm = ((ours - ref).norm() / ref.norm()).item()
    print(f"{args.model}: logits {list(ref.shape)}, max |nns - torch| / max |torch| = {err:.3e}, normwise {norm:.3e} (bound {args.bound:g})")
    return 0 if err <= args.bound else 1


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("model", choices=SHAPES)
    m.add_argument("dir")
    m.add_argument("--layers", type=int, default=0)
    m.add_argument("--seq", type=int, default=64)
    m.add_argument("--dtype", default="F32", choices=["F32", "BF16", "F16"])
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--prefix", default="")
    m.add_argument("--extra", default="")
    m.add_argument("--drop", action="append", default=[])
    m.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("model", choices=SHAPES)
    c.add_argument("dir")
    c.add_argument("outputs")
    c.add_argument("--bound", type=float, default=1e-5)
    args = ap.parse_args()
    sys.exit(make(args) if args.cmd == "make" else compare(args))


if __name__ == "__main__":
    main()

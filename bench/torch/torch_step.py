#!/usr/bin/env python3
"""PyTorch twins of examples/gpt.nns and examples/swin.nns, timed for one
training step on CPU.  Used by bench/torch/run.sh; not a test.

The models follow stdlib/nn.nns op for op (same reshapes, permutes, linears
with separate biases, explicit matmul/softmax attention rather than a fused
kernel), so that both sides do the same arithmetic:

  gpt   pre-LN blocks, separate q/k/v/o linears with bias, causal mask (-inf),
        exact-erf GELU, LayerNorm eps 1e-5, tied output head (x @ wte^T),
        cross entropy (mean).
  swin  conv patch embed + LayerNorm, window attention with relative position
        bias (q scaled before q@k), shifted windows (roll + -100 mask) on odd
        blocks, patch merging in Swin's order (x0, x1, x2, x3) + LayerNorm +
        bias-free reduction, final LayerNorm, mean over tokens, linear head,
        cross entropy (mean).

The config preset (batch, sizes, lr) and the train block's adamw(...)
arguments, cosine_lr(warmup = ...) and clip are read from the .nns file, so
the twin follows edits to the presets.  AdamW decays every parameter (as
nns does); the global gradient norm is computed every step (nns reports it)
and clipped where the train block says `clip`.  verify_twin.py checks the
twins against nns (same weights and data: loss, gradients, one update).

Prints a `key=value` line that run.sh parses, then the config it used.
"""
import argparse
import ast
import math
import os
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- multiply-add counting (matmul/linear/conv only, as `nns check` counts) ----
_MACS = [0, False]


def _count(n):
    if _MACS[1]:
        _MACS[0] += int(n)


def lin(x, w):  # nns linear(x, w) = x @ w^T
    _count(x.numel() // x.shape[-1] * w.shape[0] * w.shape[1])
    return F.linear(x, w)


def mm(a, b):  # batched matmul [..., m, k] @ [..., k, n]
    _count(a.numel() // a.shape[-1] * a.shape[-1] * b.shape[-1])
    return torch.matmul(a, b)


# ---- stdlib/nn.nns layers --------------------------------------------------------
class Linear(nn.Module):
    def __init__(self, fin, fout, has_bias=True, std=0.02):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fout, fin) * std)
        self.bias = nn.Parameter(torch.zeros(fout)) if has_bias else None

    def forward(self, x):
        y = lin(x, self.weight)
        if self.bias is not None:
            y = y + self.bias
        return y


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps
        self.dim = dim

    def forward(self, x):
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = Linear(dim, hidden)
        self.fc2 = Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))  # approximate='none': exact erf


def qkvo_params(m, dim):
    for n in ("q", "k", "v", "o"):
        setattr(m, "w" + n, nn.Parameter(torch.randn(dim, dim) * 0.02))
        setattr(m, "b" + n, nn.Parameter(torch.zeros(dim)))


class MultiHeadAttention(nn.Module):
    def __init__(self, dim, heads, causal):
        super().__init__()
        assert dim % heads == 0
        qkvo_params(self, dim)
        self.h, self.causal = heads, causal

    def forward(self, x):
        b, s, _ = x.shape
        h = self.h
        hd = self.wq.shape[0] // h
        q = (lin(x, self.wq) + self.bq).reshape(b, s, h, hd).permute(0, 2, 1, 3)
        k = (lin(x, self.wk) + self.bk).reshape(b, s, h, hd).permute(0, 2, 3, 1)
        v = (lin(x, self.wv) + self.bv).reshape(b, s, h, hd).permute(0, 2, 1, 3)
        scores = mm(q, k) * (1.0 / math.sqrt(hd))
        if self.causal:
            scores = scores.masked_fill(self.causal_mask(s), float("-inf"))
        o = mm(torch.softmax(scores, dim=-1), v)
        merged = o.permute(0, 2, 1, 3).reshape(b, s, h * hd)
        return lin(merged, self.wo) + self.bo

    def causal_mask(self, s):
        if getattr(self, "_mask", None) is None or self._mask.shape[0] != s:
            self._mask = torch.ones(s, s, dtype=torch.bool).triu(1)  # j > i
        return self._mask


class TransformerBlock(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4, causal=True):
        super().__init__()
        self.ln1 = LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, heads, causal)
        self.ln2 = LayerNorm(dim)
        self.mlp = Mlp(dim, dim * mlp_ratio)

    def forward(self, x):
        y = x + self.attn(self.ln1(x))
        return y + self.mlp(self.ln2(y))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, dim, heads, layers):
        super().__init__()
        self.wte = nn.Parameter(torch.randn(vocab, dim) * 0.02)
        self.wpe = nn.Parameter(torch.randn(seq, dim) * 0.01)
        self.blocks = nn.ModuleList([TransformerBlock(dim, heads) for _ in range(layers)])
        self.ln_f = LayerNorm(dim)

    def forward(self, ids):
        x = F.embedding(ids, self.wte) + self.wpe
        for blk in self.blocks:
            x = blk(x)
        return lin(self.ln_f(x), self.wte)  # tied head


# ---- Swin --------------------------------------------------------------------------
class PatchEmbed(nn.Module):
    def __init__(self, patch, in_chans, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, in_chans, patch, patch) * 0.02)
        self.bias = nn.Parameter(torch.zeros(dim))
        self.norm = LayerNorm(dim)
        self.patch = patch

    def forward(self, img):
        x = F.conv2d(img, self.weight, self.bias, stride=self.patch)
        b, c, hh, ww = x.shape
        _count(x.numel() * self.weight[0].numel())
        return self.norm(x.reshape(b, c, hh * ww).permute(0, 2, 1))


def swin_relative_index(w):  # (dh + w - 1) * (2w - 1) + (dw + w - 1), flattened [n*n]
    n = w * w
    i = torch.arange(n)
    dh = (i[:, None] // w) - (i[None, :] // w) + w - 1
    dw = (i[:, None] % w) - (i[None, :] % w) + w - 1
    return (dh * (2 * w - 1) + dw).reshape(-1)


def swin_shift_mask(H, W, win, shift):  # [nw, n, n], 0 or -100 (as backend/cpu)
    def region(p, size):
        return 0 if p < size - win else (1 if p < size - shift else 2)

    gw, n = W // win, win * win
    nw = (H // win) * gw
    out = torch.zeros(nw, n, n)
    for w in range(nw):
        lab = torch.tensor([region((w // gw) * win + t // win, H) * 3 + region((w % gw) * win + t % win, W) for t in range(n)])
        out[w] = torch.where(lab[:, None] == lab[None, :], 0.0, -100.0)
    return out


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        qkvo_params(self, dim)
        t = torch.empty((2 * window - 1) ** 2, heads)
        nn.init.trunc_normal_(t, std=0.02, a=-0.04, b=0.04)  # nns redraws outside 2 std
        self.relative_bias = nn.Parameter(t)
        self.register_buffer("index", swin_relative_index(window), persistent=False)
        self.h = heads

    def forward(self, x, mask=None):  # x [b, nw, n, c]
        b, nw, n, c = x.shape
        h = self.h
        hd = self.wq.shape[0] // h
        xs = x.reshape(b * nw, n, c)
        q = (lin(xs, self.wq) + self.bq).reshape(b * nw, n, h, hd).permute(0, 2, 1, 3) * (1.0 / math.sqrt(hd))
        k = (lin(xs, self.wk) + self.bk).reshape(b * nw, n, h, hd).permute(0, 2, 3, 1)
        v = (lin(xs, self.wv) + self.bv).reshape(b * nw, n, h, hd).permute(0, 2, 1, 3)
        attn = mm(q, k)
        bias = self.relative_bias.index_select(0, self.index).reshape(n, n, h).permute(2, 0, 1)
        attn = attn + bias
        if mask is not None:
            attn = (attn.reshape(b, nw, h, n, n) + mask.reshape(nw, 1, n, n)).reshape(b * nw, h, n, n)
        o = mm(torch.softmax(attn, dim=-1), v)
        merged = o.permute(0, 2, 1, 3).reshape(b * nw, n, h * hd)
        return lin(merged, self.wo).reshape(b, nw, n, c) + self.bo


class SwinBlock(nn.Module):
    def __init__(self, dim, res, heads, window, shift, mlp_ratio=4):
        super().__init__()
        self.win = min(window, res)
        self.sh = 0 if res <= window else shift
        self.dim, self.res = dim, res
        self.norm1 = LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, self.win)
        self.norm2 = LayerNorm(dim)
        self.mlp = Mlp(dim, dim * mlp_ratio)
        if self.sh > 0:
            self.register_buffer("mask", swin_shift_mask(res, res, self.win, self.sh), persistent=False)
        else:
            self.mask = None

    def forward(self, x):
        b, res, win, dim, sh = x.shape[0], self.res, self.win, self.dim, self.sh
        g = res // win
        y = self.norm1(x).reshape(b, res, res, dim)
        if sh > 0:
            y = torch.roll(y, shifts=(-sh, -sh), dims=(1, 2))
        w = y.reshape(b, g, win, g, win, dim).permute(0, 1, 3, 2, 4, 5).reshape(b, g * g, win * win, dim)
        a = self.attn(w, self.mask)
        y = a.reshape(b, g, g, win, win, dim).permute(0, 1, 3, 2, 4, 5).reshape(b, res, res, dim)
        if sh > 0:
            y = torch.roll(y, shifts=(sh, sh), dims=(1, 2))
        h = x + y.reshape(b, res * res, dim)
        return h + self.mlp(self.norm2(h))


class PatchMerging(nn.Module):
    def __init__(self, dim, res):
        super().__init__()
        self.norm = LayerNorm(4 * dim)
        self.reduction = Linear(4 * dim, 2 * dim, has_bias=False)
        self.dim, self.res = dim, res

    def forward(self, x):
        b, half, dim = x.shape[0], self.res // 2, self.dim
        y = x.reshape(b, half, 2, half, 2, dim).permute(0, 1, 3, 4, 2, 5).reshape(b, half * half, 4 * dim)
        return self.reduction(self.norm(y))


class SwinStage(nn.Module):
    def __init__(self, dim, res, depth, heads, window, merge):
        super().__init__()
        self.blocks = nn.ModuleList(
            [SwinBlock(dim, res, heads, window, 0 if i % 2 == 0 else window // 2) for i in range(depth)])
        self.downsample = PatchMerging(dim, res) if merge else None

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        if self.downsample is not None:
            x = self.downsample(x)
        return x


class SwinTransformer(nn.Module):
    def __init__(self, image, patch, window, embed, depths, heads, classes):
        super().__init__()
        stages = len(depths)
        final_dim = embed * 2 ** (stages - 1)
        self.patch_embed = PatchEmbed(patch, 3, embed)
        self.layers = nn.ModuleList([
            SwinStage(embed * 2 ** i, image // patch // 2 ** i, depths[i], heads[i], window, i + 1 < stages)
            for i in range(stages)])
        self.norm = LayerNorm(final_dim)
        self.head = Linear(final_dim, classes)

    def forward(self, images):
        x = self.patch_embed(images)
        for stage in self.layers:
            x = stage(x)
        return self.head(self.norm(x).mean(dim=1))


# ---- config presets and train-block hyper-parameters, read from the .nns file ---------
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_config(text, name):
    """`config NAME [extends BASE] { key = literal ... }` -> dict (literals only)."""
    m = re.search(r"^config\s+" + re.escape(name) + r"(?:\s+extends\s+(\w+))?\s*\{(.*?)^\}", text, re.M | re.S)
    if not m:
        raise SystemExit(f"no config '{name}'")
    cfg = read_config(text, m.group(1)) if m.group(1) else {}
    for line in m.group(2).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            k, v = (t.strip() for t in line.split("=", 1))
            cfg[k] = ast.literal_eval(v)
    return cfg


def read_train(text, cfg):
    """The optimizer, schedule warm-up and clipping of the `train` block (nns defaults otherwise)."""
    body = re.search(r"^train\s*\{(.*?)^\}", text, re.M | re.S).group(1)

    def val(expr):
        expr = expr.strip()
        return cfg[expr[4:]] if expr.startswith("cfg.") else ast.literal_eval(expr)

    def kwargs(call):
        m = re.search(call + r"\(([^)]*)\)", body)
        if not m:
            raise SystemExit(f"train block has no {call}(...)")
        return {k.strip(): val(v) for k, v in (a.split("=", 1) for a in m.group(1).split(",") if "=" in a)}

    opt = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
    opt.update(kwargs("adamw"))
    warmup = kwargs("cosine_lr").get("warmup", 0)
    m = re.search(r"^\s*clip\s*=\s*(\S+)", body, re.M)
    clip = val(m.group(1)) if m else 0.0
    return opt, warmup, clip


def make_case(name, config):
    """(model, inputs by their nns names, loss function of the inputs, adamw kwargs, warm-up, clip, config)."""
    text = open(os.path.join(ROOT, "examples", name + ".nns")).read()
    c = read_config(text, config)
    opt, warmup, clip = read_train(text, c)
    if name == "gpt":
        model = Gpt(c["vocab"], c["seq"], c["dim"], c["heads"], c["layers"])
        g = torch.Generator().manual_seed(1)
        inputs = {"ids": torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=g),
                  "targets": torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=g)}
        rows = c["batch"] * c["seq"]

        def loss_fn(x):
            logits = model(x["ids"])
            return F.cross_entropy(logits.reshape(rows, c["vocab"]), x["targets"].reshape(rows))
    else:
        model = SwinTransformer(c["image"], c["patch"], c["window"], c["embed"], c["depths"], c["heads"], c["classes"])
        g = torch.Generator().manual_seed(3)
        inputs = {"images": torch.randn(c["batch"], 3, c["image"], c["image"], generator=g),
                  "targets": torch.randint(0, c["classes"], (c["batch"],), generator=g)}

        def loss_fn(x):
            return F.cross_entropy(model(x["images"]), x["targets"])

    return model, inputs, loss_fn, opt, warmup, clip, c


def make_optimizer(params, o, warm, total):
    """torch AdamW + LambdaLR reproducing nns's adamw and cosine_lr(warmup) over `total` steps."""
    opt = torch.optim.AdamW(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                            weight_decay=o["weight_decay"])

    def factor(i):  # LambdaLR calls it with 0 before step 1; nns numbers steps from 1
        step = i + 1
        if warm > 0 and step <= warm:
            return step / warm
        t = min(1.0, (step - warm) / max(1, total - warm))
        return 0.5 * (1 + math.cos(math.pi * t))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def grad_norm_and_clip(params, clip):
    if clip > 0:
        return torch.nn.utils.clip_grad_norm_(params, clip)
    # nns computes the global |g| every step (it reports it) even without clipping
    return torch.norm(torch.stack([p.grad.detach().norm() for p in params]))


def loaded_blas():
    """The BLAS shared object this process loaded (torch's fp32 matmuls go there)."""
    try:
        libs = {l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.rsplit("/", 1)[-1].lower()}
    except OSError:
        return "unknown"
    return ",".join(sorted(libs)) or "built-in"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["gpt", "swin"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (bench/gpu/gpt_step.sh)")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 autocast of the matrix products (nns's precision = \"bf16\"): fp32 weights and optimizer")
    ap.add_argument("--compile", action="store_true", help="torch.compile the loss function")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, inputs, loss_fn, o, warm, clip, cfg = make_case(args.case, args.config)
    dev = torch.device(args.device)
    model.to(dev)
    inputs = {k: v.to(dev) for k, v in inputs.items()}
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)

    # Count forward multiply-adds once (outside the timed loop).
    _MACS[0], _MACS[1] = 0, True
    with torch.no_grad():
        loss_fn(inputs)
    _MACS[1] = False
    macs = _MACS[0]

    opt, sched = make_optimizer(params, o, warm, args.steps + args.warmup_steps)
    compute = torch.compile(loss_fn) if args.compile else loss_fn

    def forward():
        if args.bf16:
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                return compute(inputs).float()
        return compute(inputs)

    def step():
        loss = forward()
        loss.backward()
        gn = grad_norm_and_clip(params, clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        return loss.item(), float(gn)

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    first = last = None
    for i in range(args.warmup_steps):
        loss, _ = step()
        first = loss if i == 0 else first
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        last, _ = step()
        times.append(time.perf_counter() - t0)
    ms = 1000.0 * sum(times) / len(times)
    times.sort()
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
    print(f"case={args.case} device={args.device} bf16={int(args.bf16)} compile={int(args.compile)} peak_bytes={peak} "
          f"params={nparams} fwd_macs={macs} threads={torch.get_num_threads()} "
          f"steps={args.steps} ms_per_step={ms:.3f} median_ms={1000 * times[len(times) // 2]:.3f} "
          f"min_ms={1000 * times[0]:.3f} loss_first={first:.6f} loss_last={last:.6f} torch={torch.__version__} blas={loaded_blas()}")
    print("config " + " ".join(f"{k}={v}".replace(" ", "") for k, v in cfg.items())
          + f" | adamw lr={o['lr']} betas=({o['beta1']},{o['beta2']}) eps={o['eps']} wd={o['weight_decay']} warmup={warm} clip={clip}")


if __name__ == "__main__":
    sys.exit(main())

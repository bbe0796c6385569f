#!/usr/bin/python3
"""PyTorch side of the GPT training-step benchmark: the reference our C implementation is
compared with (docs/benchmarks.md). Not a test.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_gpt.py --config A [--steps N] [--warmup N]

Runs with Debian's python3-torch (scripts/setup-bench.sh installs it): use /usr/bin/python3, as
`python3` on PATH may be another interpreter without torch.

The model is the one our library builds: a GPT-2 style decoder with learned token and position
embeddings and pre-LayerNorm blocks (eps 1e-5)

    x += proj(attn(ln1(x)))                 attention: q, k, v = Linear(C, 3C) (fused, with bias),
    x += fc2(gelu_tanh(fc1(ln2(x))))        causal softmax, proj = Linear(C, C) with bias;
                                            MLP C -> 4C -> C with biases

then a final LayerNorm and a head Linear(C, V, bias=False), tied to the token embedding with
--tied (config B) and untied otherwise (config A). The fused qkv projection has exactly the flops
of three Linear(C, C); pass --qkv separate to use three. Loss: cross-entropy. Optimizer: AdamW
(lr 3e-4, betas (0.9, 0.95), weight decay 0.1, PyTorch's default implementation choice), gradient
norm clipped to 1.0. fp32, one process, 2 threads (torch.set_num_threads). Batches are random
tokens from a seeded generator.

One training step = zero_grad, forward, loss, backward, clip_grad_norm_, optimizer step. We run
--warmup untimed steps, then --steps timed ones, and print one JSON line: step_s is the mean step
time (tokens_per_s and gflops derive from it); step_s_min and step_s_median show how much other
load on the machine disturbed the run.

FLOPs (the formula our C benchmark uses too; the nanoGPT / PaLM-appendix estimate, as in
nanoGPT's estimate_mfu):

    flops_per_token = 6 * N + 12 * L * C * T

    N = the parameters that take part in matrix multiplies and the elementwise work around them:
        every parameter except the embedding tables, with the head counted, i.e.
        N = params_total - wpe - (wte if untied else 0)
        (tied: the shared wte/head matrix counts once, as the head).
    12 * L * C * T: attention scores QK^T and the weighted sum PV, forward (2 * 2 * T * C per
        token per layer) and backward (twice that), over the full T x T matrix, without halving
        for the causal mask (nanoGPT's 12 * L * H * Q * T with H * Q = C).

    gflops = flops_per_token * tokens_per_s / 1e9 (achieved GFLOP/s).
"""

import argparse
import datetime
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # name: vocab V, context T, layers L, heads H, width C, batch B, tied head
    "A": dict(vocab=256, context=256, layers=4, heads=4, width=256, batch=8, tied=False),
    "B": dict(vocab=50257, context=1024, layers=12, heads=12, width=768, batch=4, tied=True),
}

FLOPS_FORMULA = ("flops_per_token = 6*N + 12*L*C*T; N = params - wpe - (wte if untied else 0) "
                 "(head counted, embedding tables not); gflops = flops_per_token*tokens_per_s/1e9")

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class Attention(nn.Module):
    def __init__(self, C, H, T, fused_qkv):
        super().__init__()
        self.H = H
        self.fused_qkv = fused_qkv
        if fused_qkv:
            self.qkv = nn.Linear(C, 3 * C)
        else:
            self.q, self.k, self.v = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        self.proj = nn.Linear(C, C)
        if not HAVE_SDPA:
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)  # True above the diagonal: masked
            self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        if self.fused_qkv:
            q, k, v = self.qkv(x).split(C, dim=2)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        # (B, T, C) -> (B, H, T, C/H)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, H, T, fused_qkv):
        super().__init__()
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, H, T, fused_qkv)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc1 = nn.Linear(C, 4 * C)
        self.fc2 = nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, width, tied, fused_qkv):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context, fused_qkv) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, vocab, bias=False)
        if tied:
            self.head.weight = self.wte.weight
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="A")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before timing")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--qkv", choices=("fused", "separate"), default="fused")
    ap.add_argument("--tied", action="store_true", default=None,
                    help="tie the head to the token embedding (default: as the config says)")
    ap.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")

    cfg = dict(CONFIGS[args.config])
    if args.tied is not None:
        cfg["tied"] = args.tied
    B, T, L, C, V = cfg["batch"], cfg["context"], cfg["layers"], cfg["width"], cfg["vocab"]

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = GPT(V, T, L, cfg["heads"], C, cfg["tied"], args.qkv == "fused")
    params = sum(p.numel() for p in model.parameters())  # unique: a tied matrix counts once
    n_flops = params - model.wpe.weight.numel() - (0 if cfg["tied"] else model.wte.weight.numel())
    flops_per_token = 6 * n_flops + 12 * L * C * T

    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)

    def step():
        tok = torch.randint(V, (B, T + 1), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = model(tok[:, :-1], tok[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)

    step_s = sum(times) / len(times)
    tokens_per_s = B * T / step_s
    print(json.dumps({
        "impl": "pytorch",
        "config": args.config,
        "tokens_per_s": round(tokens_per_s, 1),
        "step_s": round(step_s, 4),
        "step_s_min": round(min(times), 4),
        "step_s_median": round(statistics.median(times), 4),
        "gflops": round(flops_per_token * tokens_per_s / 1e9, 2),
        "params": params,
        "params_flops": n_flops,
        "flops_per_token": flops_per_token,
        "flops_formula": FLOPS_FORMULA,
        "batch": B, "context": T, "layers": L, "heads": cfg["heads"], "width": C, "vocab": V,
        "tied": cfg["tied"],
        "qkv": args.qkv,
        "attention": "F.scaled_dot_product_attention(is_causal=True)" if HAVE_SDPA
                     else "explicit masked softmax",
        "optimizer": "AdamW(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1), default implementation",
        "warmup": args.warmup, "steps": args.steps, "last_loss": round(loss, 4),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes tests/data/moe_ref.safetensors: a small Mixture-of-Experts layer in PyTorch, the reference that
tests/unit/test_moe_ref.c checks hp_moe_build (src/nn/moe.c) against.

    apt-get install -y python3-torch        # once; not a dependency of the build or the tests
    /usr/bin/python3 scripts/make_moe_ref.py [--out tests/data/moe_ref.safetensors]

Three cases, each a layer of E experts on x (B, T, C), written independently of our code from the
papers' definitions (include/hp/moe.h):
    softmax.   Mixtral/Qwen-MoE routing: probs = softmax(x W_r^T), the top-k probs renormalised are the
               gates; one shared expert; the Switch/GShard balancing loss aux = E sum_e f_e P_e with
               f_e = counts_e / (N k), P_e = mean_n probs[n, e].
    sigmoid.   DeepSeek-V3 routing: s = sigmoid(x W_r^T), experts chosen by the top-k of s + bias, the
               gates the chosen s renormalised; no shared expert; aux from p = s / sum_e s; and the
               bias after one update, bias + u sign(mean(counts) - counts).
    swiglu.    the softmax case's routing with the Llama family's SwiGLU experts (Mixtral, Qwen-MoE):
               y_e = W_down[e] (silu(W_gate[e] x) * (W_up[e] x)); one shared SwiGLU expert.
The first two cases' experts are GELU(tanh) MLPs, y_e = W_proj[e] gelu(W_fc[e] x); no biases anywhere;
y = sum_j g_j y_{e_j} (+ the shared MLP). The loss is sum(y * r) + ALPHA * aux with r a fixed random tensor, so every gradient is
non-trivial. Computed in float64, stored as float32:
    <case>.x, <case>.r                       inputs (B, T, C)
    <case>.param.<name>                      the weights, our names (mlp.router.weight, ...)
    <case>.grad.<name>, <case>.grad.x        d loss / d (weights, x)
    <case>.y (B, T, C), <case>.aux (), <case>.loss (), <case>.idx (N, k) I32, <case>.counts (E) I32
    <case>.bias_updated (E)                  sigmoid only
    __metadata__                             B, T, C, E, k, F, shared, alpha, u, torch
"""

import argparse
import json
import os
import struct

import torch

B, T, C, E, K, F = 2, 5, 8, 4, 2, 6
ALPHA, U = 0.1, 0.01
SEED = 4321


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        t = t.detach().contiguous()
        dtype = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def gelu(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def swiglu_mlp(x, w_gate, w_up, w_down):
    return (torch.nn.functional.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def layer(case, shared):
    """Returns the tensors of one case as (name, tensor) pairs."""
    swi = case == "swiglu"
    p = {"mlp.router.weight": torch.randn(E, C, dtype=torch.float64) * 0.5}
    for name, shape in ((("gate_proj", (E, F, C)), ("up_proj", (E, F, C)), ("down_proj", (E, C, F))) if swi else
                        (("fc", (E, F, C)), ("proj", (E, C, F)))):
        p[f"mlp.experts.{name}.weight"] = torch.randn(*shape, dtype=torch.float64) * 0.4
    if shared:
        for name, shape in ((("gate_proj", (shared * F, C)), ("up_proj", (shared * F, C)),
                             ("down_proj", (C, shared * F))) if swi else
                            (("fc", (shared * F, C)), ("proj", (C, shared * F)))):
            p[f"mlp.shared.{name}.weight"] = torch.randn(*shape, dtype=torch.float64) * 0.4
    bias = torch.randn(E, dtype=torch.float64) * 0.1 if case == "sigmoid" else None
    x = torch.randn(B, T, C, dtype=torch.float64)
    r = torch.randn(B, T, C, dtype=torch.float64)
    for t in list(p.values()) + [x]:
        t.requires_grad_(True)
    N = B * T
    xf = x.reshape(N, C)
    logits = xf @ p["mlp.router.weight"].T
    if case != "sigmoid":
        probs = torch.softmax(logits, dim=-1)
        _, idx = torch.topk(probs.detach(), K, dim=-1)
        sel = probs.gather(1, idx)
    else:
        s = torch.sigmoid(logits)
        _, idx = torch.topk((s + bias).detach(), K, dim=-1)
        sel = s.gather(1, idx)
        probs = s / s.sum(dim=-1, keepdim=True)
    gates = sel / sel.sum(dim=-1, keepdim=True)
    y = torch.zeros(N, C, dtype=torch.float64)
    for n in range(N):
        for j in range(K):
            e = int(idx[n, j])
            if swi:
                ye = swiglu_mlp(xf[n:n + 1], p["mlp.experts.gate_proj.weight"][e], p["mlp.experts.up_proj.weight"][e],
                                p["mlp.experts.down_proj.weight"][e])[0]
            else:
                ye = p["mlp.experts.proj.weight"][e] @ gelu(p["mlp.experts.fc.weight"][e] @ xf[n])
            y[n] = y[n] + gates[n, j] * ye
    if shared and swi:
        y = y + swiglu_mlp(xf, p["mlp.shared.gate_proj.weight"], p["mlp.shared.up_proj.weight"],
                           p["mlp.shared.down_proj.weight"])
    elif shared:
        y = y + gelu(xf @ p["mlp.shared.fc.weight"].T) @ p["mlp.shared.proj.weight"].T
    counts = torch.bincount(idx.reshape(-1), minlength=E)
    f = counts.double() / (N * K)
    aux = E * (f * probs.mean(dim=0)).sum()
    y = y.reshape(B, T, C)
    loss = (y * r).sum() + ALPHA * aux
    loss.backward()
    out = [(f"{case}.x", x.float()), (f"{case}.r", r.float())]
    for name, t in p.items():
        out.append((f"{case}.param.{name}", t.float()))
        out.append((f"{case}.grad.{name}", t.grad.float()))
    out.append((f"{case}.grad.x", x.grad.float()))
    out += [(f"{case}.y", y.float()), (f"{case}.aux", aux.float()), (f"{case}.loss", loss.float()),
            (f"{case}.idx", idx.to(torch.int32)), (f"{case}.counts", counts.to(torch.int32))]
    if bias is not None:
        out.append((f"{case}.param.mlp.router.bias", bias.float()))
        mean = counts.double().mean()
        out.append((f"{case}.bias_updated", (bias + U * torch.sign(mean - counts.double())).float()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "data", "moe_ref.safetensors"))
    args = ap.parse_args()
    torch.manual_seed(SEED)
    tensors = layer("softmax", 1) + layer("sigmoid", 0) + layer("swiglu", 1)
    meta = {"B": str(B), "T": str(T), "C": str(C), "E": str(E), "k": str(K), "F": str(F), "shared": "1",
            "alpha": repr(ALPHA), "u": repr(U), "torch": torch.__version__}
    write_safetensors(args.out, tensors, meta)
    print(f"wrote {args.out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()

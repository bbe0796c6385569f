#!/usr/bin/python3
"""Writes tests/data/gpt2_ref.safetensors: one training step of a tiny GPT in PyTorch, the reference
that tests/unit/test_torch_ref.c checks our library against (llm.c's test_gpt2.c, made a real test).

    apt-get install -y python3-torch        # once; not a dependency of the build or the tests
    /usr/bin/python3 scripts/make_torch_ref.py [--out tests/data/gpt2_ref.safetensors]

The model is bench/torch_gpt.py's GPT (the PyTorch mirror of src/nn/gpt.c) with separate q, k, v
projections and an untied head; its parameters are renamed to ours (fc1 -> mlp.fc, fc2 -> mlp.proj,
head -> lm_head). Every parameter is drawn at random (LayerNorm weights around 1, biases small and
non-zero) so no gradient is trivially structured. The step is the one hp_train_step_build makes:
mean cross-entropy, backward, global-norm clipping (max norm GRAD_CLIP; the norm is above it here, so
clipping acts), AdamW (betas, eps, decoupled weight decay on every parameter except biases and
LayerNorm parameters). It runs in float64 (the reference is then exact to float32 precision) and is
stored as float32.

The file (safetensors, little-endian, about 200 KiB):
    param.<name>      the weights before the step (F32, our shapes)
    grad.<name>       d loss / d param, before clipping (what our gradient tensors hold)
    updated.<name>    the weights after the AdamW step
    tokens, targets   (B, T) I32
    loss              () F32, the mean cross-entropy before the step
    __metadata__      vocab, context, layers, heads, width, batch, lr, beta1, beta2, eps,
                      weight_decay, grad_clip, grad_norm, torch (version)
"""

import argparse
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from torch_gpt import GPT  # noqa: E402  (the model definition the benchmark uses)

V, T, L, H, C, B = 32, 8, 2, 2, 16, 2
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0
SEED = 1234


def our_name(name):
    """bench/torch_gpt.py's parameter name -> ours (include/hp/nn.h)."""
    name = name.replace(".fc1.", ".mlp.fc.").replace(".fc2.", ".mlp.proj.")
    return "lm_head.weight" if name == "head.weight" else name


def no_weight_decay(name):
    """Ours: biases and LayerNorm parameters are not decayed (src/nn/gpt.c)."""
    return name.endswith(".bias") or ".ln" in name or name.startswith("ln_f.")


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, torch tensor); written in that order (float32 / int32)."""
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "data", "gpt2_ref.safetensors"))
    args = ap.parse_args()

    torch.manual_seed(SEED)
    model = GPT(V, T, L, H, C, tied=False, fused_qkv=False).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            n = our_name(name)
            if n.endswith(".bias"):
                p.copy_(0.02 * torch.randn_like(p))
            elif ".ln" in n or n.startswith("ln_f."):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))  # large enough that the norm exceeds GRAD_CLIP
    # Round the start to float32: both sides start from exactly the stored weights.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.float().double())
    before = {our_name(n): p.detach().float().clone() for n, p in model.named_parameters()}

    tok = torch.randint(V, (B, T + 1), generator=torch.Generator().manual_seed(SEED))
    tokens, targets = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    loss = model(tokens, targets)
    loss.backward()
    grads = {our_name(n): p.grad.detach().float().clone() for n, p in model.named_parameters()}
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP))
    decay = [p for n, p in model.named_parameters() if not no_weight_decay(our_name(n))]
    rest = [p for n, p in model.named_parameters() if no_weight_decay(our_name(n))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS)
    opt.step()
    after = {our_name(n): p.detach().float().clone() for n, p in model.named_parameters()}

    names = [our_name(n) for n, _ in model.named_parameters()]
    tensors = [("tokens", tokens.int()), ("targets", targets.int()), ("loss", loss.detach().float().reshape(()))]
    tensors += [("param." + n, before[n]) for n in names]
    tensors += [("grad." + n, grads[n]) for n in names]
    tensors += [("updated." + n, after[n]) for n in names]
    meta = {"vocab": V, "context": T, "layers": L, "heads": H, "width": C, "batch": B, "lr": LR, "beta1": BETA1,
            "beta2": BETA2, "eps": EPS, "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP,
            "grad_norm": grad_norm, "seed": SEED, "torch": torch.__version__,
            "made_by": "scripts/make_torch_ref.py"}
    write_safetensors(args.out, tensors, {k: str(v) for k, v in meta.items()})
    print(f"{args.out}: loss {float(loss):.6f}, grad norm {grad_norm:.4f}, {len(names)} parameters, "
          f"{os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""An independent plain-PyTorch implementation of Hugging Face's Mixtral (MixtralForCausalLM as
transformers' modeling_mixtral.py computes it: the Llama attention of llama_ref.py and, in place of
every MLP, a sparse Mixture-of-Experts block: router logits x W_g^T, softmax, the top-k experts per
token, their probabilities renormalised to sum to 1, and per expert w2(silu(w1 x) * w3 x)), reading a
Hugging Face model directory: the reference for `hp convert --from-hf` on a Mixtral checkpoint.

    /usr/bin/python3 scripts/hf-ref/mixtral_ref.py             # rewrites tests/data/hf/mixtral-tiny{,.ref.safetensors}
    /usr/bin/python3 scripts/hf-ref/mixtral_ref.py logits DIR  # logits of any Mixtral dir on the fixed prompt

`make` (the default) builds a tiny Mixtral with random weights (4 experts, 2 per token, grouped-query
attention, a tied head, a non-default rms_norm_eps and rope_theta) and writes it as one
model.safetensors with one tensor per expert (block_sparse_moe.experts.E.w{1,2,3}.weight), as
save_pretrained does, with a small byte-level BPE tokenizer.json. It reads the directory back from
disk and writes the logits of a fixed prompt (float64 arithmetic, stored as float32) to
tests/data/hf/mixtral-tiny.ref.safetensors: tokens (T,) I32 and logits (T, V) F32. Routing is
discontinuous, so `make` checks that at every layer and token the k-th and (k+1)-th router
probabilities differ by more than MARGIN (float32 and float64 then select the same experts).
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hfio import SAMPLE_TEXT, load_dir, write_safetensors, write_tiny_tokenizer  # noqa: E402
from llama_ref import PROMPT, rms_norm, rotate_half  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
V, T, L, H, KV, C, F, E, K = 320, 32, 2, 4, 2, 32, 24, 4, 2
EPS, THETA, AUX = 1e-5, 20000.0, 0.02
SEED = 23
MARGIN = 1e-4


def moe_block(x, get, p, n_experts, top_k, margins):
    """Mixtral's sparse MoE block on x (T, C): float64, as MixtralSparseMoeBlock.forward."""
    probs = (x @ get[p + "gate.weight"].T).softmax(-1)                        # (T, E)
    top, idx = probs.topk(top_k + (1 if top_k < n_experts else 0), dim=-1)
    if top_k < n_experts:
        margins.append((top[:, top_k - 1] - top[:, top_k]).min().item())
    w, idx = top[:, :top_k], idx[:, :top_k]
    w = w / w.sum(-1, keepdim=True)                                             # renormalised top-k
    y = torch.zeros_like(x)
    for e in range(n_experts):
        q = p + f"experts.{e}."
        a = x @ get[q + "w1.weight"].T
        out = ((a * torch.sigmoid(a)) * (x @ get[q + "w3.weight"].T)) @ get[q + "w2.weight"].T
        gate = (w * (idx == e)).sum(-1, keepdim=True)                           # 0 where e is not selected
        y = y + gate * out
    return y


def logits(config, tensors, tokens, margins=None):
    """Mixtral's forward pass over one sequence, in float64."""
    margins = [] if margins is None else margins
    get = {k: v.double() for k, v in tensors.items()}
    C, nh = config["hidden_size"], config["num_attention_heads"]
    nkv = config.get("num_key_value_heads") or nh
    eps, theta = config.get("rms_norm_eps", 1e-6), config.get("rope_theta", 1e6)
    assert config.get("hidden_act", "silu") == "silu" and not config.get("rope_scaling")
    assert config.get("sliding_window") is None
    n_experts, top_k = config["num_local_experts"], config.get("num_experts_per_tok", 2)
    hd = C // nh
    Tn = len(tokens)
    x = get["model.embed_tokens.weight"][torch.tensor(tokens)]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.arange(Tn, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        a = rms_norm(x, get[p + "input_layernorm.weight"], eps)
        q = (a @ get[p + "self_attn.q_proj.weight"].T).reshape(Tn, nh, hd).transpose(0, 1)
        k = (a @ get[p + "self_attn.k_proj.weight"].T).reshape(Tn, nkv, hd).transpose(0, 1)
        v = (a @ get[p + "self_attn.v_proj.weight"].T).reshape(Tn, nkv, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        att = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(Tn, nh * hd)
        x = x + y @ get[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, get[p + "post_attention_layernorm.weight"], eps)
        x = x + moe_block(m, get, p + "block_sparse_moe.", n_experts, top_k, margins)
    x = rms_norm(x, get["model.norm.weight"], eps)
    head = get["model.embed_tokens.weight"] if config.get("tie_word_embeddings", False) else get["lm_head.weight"]
    return x @ head.T


def make(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(SEED)

    def randn(*shape, std=1.0, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g)).float()

    hd = C // H
    tensors = [("model.embed_tokens.weight", randn(V, C, std=0.5))]
    for layer in range(L):
        p = f"model.layers.{layer}."
        tensors += [
            (p + "input_layernorm.weight", randn(C, mean=1.0, std=0.1)),
            (p + "self_attn.q_proj.weight", randn(H * hd, C, std=1.0 / math.sqrt(C))),
            (p + "self_attn.k_proj.weight", randn(KV * hd, C, std=1.0 / math.sqrt(C))),
            (p + "self_attn.v_proj.weight", randn(KV * hd, C, std=1.0 / math.sqrt(C))),
            (p + "self_attn.o_proj.weight", randn(C, H * hd, std=0.5 / math.sqrt(C))),
            (p + "post_attention_layernorm.weight", randn(C, mean=1.0, std=0.1)),
            (p + "block_sparse_moe.gate.weight", randn(E, C, std=2.0 / math.sqrt(C))),
        ]
        for e in range(E):
            q = p + f"block_sparse_moe.experts.{e}."
            tensors += [
                (q + "w1.weight", randn(F, C, std=1.0 / math.sqrt(C))),
                (q + "w2.weight", randn(C, F, std=0.5 / math.sqrt(F))),
                (q + "w3.weight", randn(F, C, std=1.0 / math.sqrt(C))),
            ]
    tensors += [("model.norm.weight", randn(C, mean=1.0, std=0.1))]
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    config = {
        "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": V - 1,
        "eos_token_id": V - 1, "hidden_act": "silu", "hidden_size": C, "initializer_range": 0.02,
        "intermediate_size": F, "max_position_embeddings": T, "model_type": "mixtral",
        "num_attention_heads": H, "num_experts_per_tok": K, "num_hidden_layers": L, "num_key_value_heads": KV,
        "num_local_experts": E, "output_router_logits": False, "rms_norm_eps": EPS, "rope_theta": THETA,
        "router_aux_loss_coef": AUX, "router_jitter_noise": 0.0, "sliding_window": None,
        "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True, "vocab_size": V,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    n = write_tiny_tokenizer(out, V, SAMPLE_TEXT)
    assert n == V, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="make", choices=["make", "logits"])
    ap.add_argument("dir", nargs="?", default=os.path.join(ROOT, "tests", "data", "hf", "mixtral-tiny"))
    ap.add_argument("--ref", default=None, help="where to write the logits (make: DIR.ref.safetensors)")
    args = ap.parse_args()
    d = os.path.normpath(args.dir)
    if args.what == "make":
        make(d)
    config, tensors = load_dir(d)  # read back from disk: the reference sees what hp convert sees
    margins = []
    with torch.no_grad():
        out = logits(config, tensors, PROMPT, margins)
    if args.what == "make":
        assert min(margins) > MARGIN, f"a router margin {min(margins):.3g} <= {MARGIN}: pick another SEED"
    ref = args.ref or (d + ".ref.safetensors" if args.what == "make" else None)
    if ref:
        write_safetensors(ref, [("tokens", torch.tensor(PROMPT, dtype=torch.int32)), ("logits", out.float())],
                          {"made_by": "scripts/hf-ref/mixtral_ref.py", "torch": torch.__version__,
                           "model": os.path.relpath(d, ROOT)})
        print(f"{ref}: logits {tuple(out.shape)}, |logits| max {out.abs().max():.4f}, std {out.std():.4f}, "
              f"smallest router margin {min(margins):.3g}")
    else:
        torch.set_printoptions(precision=6, linewidth=140)
        print(out.float())


if __name__ == "__main__":
    main()

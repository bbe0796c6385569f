#!/usr/bin/python3
"""An independent plain-PyTorch implementation of Hugging Face's Llama (LlamaForCausalLM as
transformers' modeling_llama.py computes it: RMSNorm, rotary embeddings with rotate_half on the two
halves of each head, grouped-query attention, SwiGLU MLP), reading a Hugging Face model directory:
the reference for `hp convert --from-hf` on a Llama checkpoint.

    apt-get install -y python3-torch        # once (scripts/setup-bench.sh installs it)
    /usr/bin/python3 scripts/hf-ref/llama_ref.py             # rewrites tests/data/hf/llama-tiny{,.ref.safetensors}
    /usr/bin/python3 scripts/hf-ref/llama_ref.py logits DIR  # logits of any Llama dir on the fixed prompt

`make` (the default) builds a tiny Llama with random weights (grouped-query attention with fewer
key/value heads than query heads, an intermediate size that is not 4 x hidden, a non-default
rms_norm_eps and rope_theta, an untied head) and writes it as transformers' save_pretrained shards a
model: config.json, model.safetensors.index.json and two shards model-0000{1,2}-of-00002.safetensors,
with a small byte-level BPE tokenizer.json. It reads the directory back from disk and writes the
logits of a fixed prompt (float64 arithmetic, stored as float32) to
tests/data/hf/llama-tiny.ref.safetensors: tokens (T,) I32 and logits (T, V) F32.
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hfio import SAMPLE_TEXT, load_dir, write_safetensors, write_sharded, write_tiny_tokenizer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
V, T, L, H, KV, C, F = 320, 32, 2, 4, 2, 32, 88
EPS, THETA = 1e-6, 50000.0
SEED = 17
PROMPT = [5, 300, 17, 256, 99, 318, 0, 42, 200, 7, 271, 128, 64, 319, 1, 250]


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def logits(config, tensors, tokens):
    """Llama's forward pass over one sequence, in float64."""
    get = {k: v.double() for k, v in tensors.items()}
    C, nh = config["hidden_size"], config["num_attention_heads"]
    nkv = config.get("num_key_value_heads") or nh
    eps, theta = config.get("rms_norm_eps", 1e-6), config.get("rope_theta", 10000.0)
    assert config.get("hidden_act", "silu") == "silu" and not config.get("rope_scaling")
    hd = C // nh
    Tn = len(tokens)
    x = get["model.embed_tokens.weight"][torch.tensor(tokens)]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.arange(Tn, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()                                           # (T, hd)
    causal = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        a = rms_norm(x, get[p + "input_layernorm.weight"], eps)
        q = (a @ get[p + "self_attn.q_proj.weight"].T).reshape(Tn, nh, hd).transpose(0, 1)
        k = (a @ get[p + "self_attn.k_proj.weight"].T).reshape(Tn, nkv, hd).transpose(0, 1)
        v = (a @ get[p + "self_attn.v_proj.weight"].T).reshape(Tn, nkv, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)                             # query head h reads kv head h // (nh/nkv)
        v = v.repeat_interleave(nh // nkv, dim=0)
        att = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(Tn, nh * hd)
        x = x + y @ get[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, get[p + "post_attention_layernorm.weight"], eps)
        gate = m @ get[p + "mlp.gate_proj.weight"].T
        m = (gate * torch.sigmoid(gate)) * (m @ get[p + "mlp.up_proj.weight"].T)   # SiLU(gate) * up
        x = x + m @ get[p + "mlp.down_proj.weight"].T
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
            (p + "mlp.gate_proj.weight", randn(F, C, std=1.0 / math.sqrt(C))),
            (p + "mlp.up_proj.weight", randn(F, C, std=1.0 / math.sqrt(C))),
            (p + "mlp.down_proj.weight", randn(C, F, std=0.5 / math.sqrt(F))),
        ]
    tensors += [("model.norm.weight", randn(C, mean=1.0, std=0.1)), ("lm_head.weight", randn(V, C, std=0.2))]
    write_sharded(out, tensors, 2)
    config = {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": V - 1, "eos_token_id": V - 1, "hidden_act": "silu", "hidden_size": C,
        "initializer_range": 0.02, "intermediate_size": F, "max_position_embeddings": T, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": H, "num_hidden_layers": L, "num_key_value_heads": KV,
        "pretraining_tp": 1, "rms_norm_eps": EPS, "rope_scaling": None, "rope_theta": THETA,
        "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True, "vocab_size": V,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    n = write_tiny_tokenizer(out, V, SAMPLE_TEXT)
    assert n == V, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="make", choices=["make", "logits"])
    ap.add_argument("dir", nargs="?", default=os.path.join(ROOT, "tests", "data", "hf", "llama-tiny"))
    ap.add_argument("--ref", default=None, help="where to write the logits (make: DIR.ref.safetensors)")
    args = ap.parse_args()
    d = os.path.normpath(args.dir)
    if args.what == "make":
        make(d)
    config, tensors = load_dir(d)  # read back from disk: the reference sees what hp convert sees
    with torch.no_grad():
        out = logits(config, tensors, PROMPT)
    ref = args.ref or (d + ".ref.safetensors" if args.what == "make" else None)
    if ref:
        write_safetensors(ref, [("tokens", torch.tensor(PROMPT, dtype=torch.int32)), ("logits", out.float())],
                          {"made_by": "scripts/hf-ref/llama_ref.py", "torch": torch.__version__,
                           "model": os.path.relpath(d, ROOT)})
        print(f"{ref}: logits {tuple(out.shape)}, |logits| max {out.abs().max():.4f}, std {out.std():.4f}")
    else:
        torch.set_printoptions(precision=6, linewidth=140)
        print(out.float())


if __name__ == "__main__":
    main()

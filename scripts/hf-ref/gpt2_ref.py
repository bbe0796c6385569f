#!/usr/bin/python3
"""An independent plain-PyTorch implementation of Hugging Face's GPT-2 (GPT2LMHeadModel as
transformers' modeling_gpt2.py computes it), reading a Hugging Face model directory: the reference
that tests/unit/test_hf_convert.c checks `hp convert --from-hf` against.

    apt-get install -y python3-torch        # once (scripts/setup-bench.sh installs it); not needed
                                            # by the build or the tests, which use the committed files
    /usr/bin/python3 scripts/hf-ref/gpt2_ref.py             # rewrites tests/data/hf/gpt2-tiny{,.ref.safetensors}
    /usr/bin/python3 scripts/hf-ref/gpt2_ref.py logits DIR  # logits of any GPT-2 dir on the fixed prompt
    /usr/bin/python3 scripts/hf-ref/gpt2_ref.py make /tmp/gpt2-small --shape small
                                            # a random model of GPT-2 small's shape (124M parameters,
                                            # 500 MB; for bench/bench_hf_convert.c, not committed)

`make` (the default) builds a tiny GPT-2 with random weights and writes it as the hub's `gpt2`
repository is laid out: config.json, model.safetensors with the GPT2Model names (no "transformer."
prefix: "h.0.attn.c_attn.weight", ...), the causal-mask buffers "h.N.attn.bias" the hub file carries,
Conv1D weights stored (in, out), a tied head (no lm_head.weight), and a small byte-level BPE
tokenizer.json. It then reads the directory back from disk and writes the logits of a fixed prompt
(float64 arithmetic, stored as float32) to tests/data/hf/gpt2-tiny.ref.safetensors:
    tokens  (T,) I32        the prompt
    logits  (T, V) F32      the model's logits at every position
The model is written in float32; weights are drawn at random with scales that keep every
activation O(1) (so GELU's curvature and LayerNorm are exercised).
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hfio import SAMPLE_TEXT, load_dir, write_safetensors, write_tiny_tokenizer  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
V, T, L, H, C = 320, 32, 2, 4, 32
SHAPES = {"tiny": (320, 32, 2, 4, 32), "small": (50257, 1024, 12, 12, 768)}  # V, T, L, H, C
SEED = 16
PROMPT = [5, 300, 17, 256, 99, 318, 0, 42, 200, 7, 271, 128, 64, 319, 1, 250]


def gelu_new(x):
    """transformers' NewGELUActivation (activation_function "gelu_new")."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def logits(config, tensors, tokens):
    """GPT-2's forward pass over one sequence, in float64."""
    get = {k[len("transformer."):] if k.startswith("transformer.") else k: v.double() for k, v in tensors.items()}
    C, nh, eps = config["n_embd"], config["n_head"], config.get("layer_norm_epsilon", 1e-5)
    assert config.get("activation_function", "gelu_new") in ("gelu_new", "gelu_pytorch_tanh")
    hd = C // nh
    ids = torch.tensor(tokens)
    Tn = len(tokens)
    x = get["wte.weight"][ids] + get["wpe.weight"][:Tn]
    causal = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for layer in range(config["n_layer"]):
        p = f"h.{layer}."
        a = layer_norm(x, get[p + "ln_1.weight"], get[p + "ln_1.bias"], eps)
        qkv = a @ get[p + "attn.c_attn.weight"] + get[p + "attn.c_attn.bias"]   # Conv1D: x W + b, W (in, out)
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.reshape(Tn, nh, hd).transpose(0, 1) for t in (q, k, v))     # (nh, T, hd)
        att = q @ k.transpose(-1, -2) / math.sqrt(hd)                            # scale_attn_weights
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(0, 1).reshape(Tn, C)
        x = x + y @ get[p + "attn.c_proj.weight"] + get[p + "attn.c_proj.bias"]
        m = layer_norm(x, get[p + "ln_2.weight"], get[p + "ln_2.bias"], eps)
        m = gelu_new(m @ get[p + "mlp.c_fc.weight"] + get[p + "mlp.c_fc.bias"])
        x = x + m @ get[p + "mlp.c_proj.weight"] + get[p + "mlp.c_proj.bias"]
    x = layer_norm(x, get["ln_f.weight"], get["ln_f.bias"], eps)
    tied = config.get("tie_word_embeddings", True)
    head = get["wte.weight"] if tied or "lm_head.weight" not in tensors else tensors["lm_head.weight"].double()
    return x @ head.T


def make(out, shape="tiny"):
    V, T, L, H, C = SHAPES[shape]
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(SEED)

    def randn(*shape, std=1.0, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g)).float()

    tensors = [("wte.weight", randn(V, C, std=0.5)), ("wpe.weight", randn(T, C, std=0.2))]
    for layer in range(L):
        p = f"h.{layer}."
        tensors += [
            (p + "ln_1.weight", randn(C, mean=1.0, std=0.1)), (p + "ln_1.bias", randn(C, std=0.05)),
            (p + "attn.bias", torch.tril(torch.ones(T, T)).reshape(1, 1, T, T)),  # the hub's mask buffer
            (p + "attn.c_attn.weight", randn(C, 3 * C, std=1.0 / math.sqrt(C))),
            (p + "attn.c_attn.bias", randn(3 * C, std=0.05)),
            (p + "attn.c_proj.weight", randn(C, C, std=0.5 / math.sqrt(C))),
            (p + "attn.c_proj.bias", randn(C, std=0.05)),
            (p + "ln_2.weight", randn(C, mean=1.0, std=0.1)), (p + "ln_2.bias", randn(C, std=0.05)),
            (p + "mlp.c_fc.weight", randn(C, 4 * C, std=1.0 / math.sqrt(C))),
            (p + "mlp.c_fc.bias", randn(4 * C, std=0.05)),
            (p + "mlp.c_proj.weight", randn(4 * C, C, std=0.5 / math.sqrt(4 * C))),
            (p + "mlp.c_proj.bias", randn(C, std=0.05)),
        ]
    tensors += [("ln_f.weight", randn(C, mean=1.0, std=0.1)), ("ln_f.bias", randn(C, std=0.05))]
    write_safetensors(os.path.join(out, "model.safetensors"), tensors, {"format": "pt"})
    config = {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": V - 1, "embd_pdrop": 0.1, "eos_token_id": V - 1, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": T, "n_embd": C, "n_head": H, "n_inner": None,
        "n_layer": L, "n_positions": T, "resid_pdrop": 0.1, "scale_attn_weights": True,
        "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
        "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": "float32", "use_cache": True,
        "vocab_size": V,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    if shape == "tiny":
        n = write_tiny_tokenizer(out, V, SAMPLE_TEXT)
        assert n == V, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="make", choices=["make", "logits"])
    ap.add_argument("dir", nargs="?", default=os.path.join(ROOT, "tests", "data", "hf", "gpt2-tiny"))
    ap.add_argument("--ref", default=None, help="where to write the logits (make: DIR.ref.safetensors)")
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES), help="make: the model's size")
    args = ap.parse_args()
    d = os.path.normpath(args.dir)
    if args.what == "make":
        make(d, args.shape)
    config, tensors = load_dir(d)  # read back from disk: the reference sees what hp convert sees
    with torch.no_grad():
        out = logits(config, tensors, PROMPT)
    ref = args.ref or (d + ".ref.safetensors" if args.what == "make" else None)
    if ref:
        write_safetensors(ref, [("tokens", torch.tensor(PROMPT, dtype=torch.int32)), ("logits", out.float())],
                          {"made_by": "scripts/hf-ref/gpt2_ref.py", "torch": torch.__version__,
                           "model": os.path.relpath(d, ROOT)})
        print(f"{ref}: logits {tuple(out.shape)}, |logits| max {out.abs().max():.4f}, std {out.std():.4f}")
    else:
        torch.set_printoptions(precision=6, linewidth=140)
        print(out.float())


if __name__ == "__main__":
    main()

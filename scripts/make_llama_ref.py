#!/usr/bin/python3
"""Writes tests/data/llama_ref.safetensors and tests/data/llama_mqa_tied_ref.safetensors: a tiny
Llama-family decoder's forward and backward in plain PyTorch, the outside reference that
tests/unit/test_llama_ref.c checks src/nn/llama.c against.

    apt-get install -y python3-torch        # once; not a dependency of the build or the tests
    /usr/bin/python3 scripts/make_llama_ref.py [--outdir tests/data]

The model is written here line for line after Hugging Face transformers' modeling_llama.py
(LlamaRMSNorm, LlamaRotaryEmbedding with its float32 inv_freq and angles, rotate_half /
apply_rotary_pos_emb, repeat_kv for grouped-query attention, eager causal attention with a float32
softmax upcast, LlamaMLP down(silu(gate(x)) * up(x)), no biases), with HF's parameter names, which
are ours (include/hp/nn.h). transformers itself is not needed (no PyPI). Every parameter is drawn at
random (RMSNorm weights around 1) so no gradient is trivially structured. It runs in float64 (the
rotary cos/sin are float32 values, as in HF) and is stored as float32.

Two models: "llama_ref" (4 query heads over 2 kv heads, untied head, ffn_width 24, base 10000) and
"llama_mqa_tied_ref" (multi-query: 1 kv head, tied head, default ffn_width, base 500).

Each file (safetensors, little-endian):
    param.<name>      the weights (F32, HF shapes: Linear (out, in))
    grad.<name>       d loss / d param
    tokens, targets   (B, T) I32
    logits            (B, T, V) F32
    loss              () F32, the mean cross-entropy
    __metadata__      vocab, context, layers, heads, kv_heads, width, ffn_width, rope_base, norm_eps,
                      tied_head, batch, seed, torch (version)
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_torch_ref import write_safetensors  # noqa: E402

SEED = 4321


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float64)  # HF: float32; the reference runs in float64
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(torch.nn.Module):
    def __init__(self, dim, base):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c["heads"], c["kv_heads"], c["width"] // c["heads"]
        C, D = c["width"], c["width"] // c["heads"]
        self.q_proj = torch.nn.Linear(C, self.heads * D, bias=False)
        self.k_proj = torch.nn.Linear(C, self.kv_heads * D, bias=False)
        self.v_proj = torch.nn.Linear(C, self.kv_heads * D, bias=False)
        self.o_proj = torch.nn.Linear(self.heads * D, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.heads // self.kv_heads)
        v = repeat_kv(v, self.heads // self.kv_heads)
        w = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        mask = torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)
        w = torch.nn.functional.softmax(w + mask, dim=-1, dtype=torch.float64).to(q.dtype)
        o = torch.matmul(w, v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(o)


class LlamaMLP(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        C, F = c["width"], c["ffn_width"]
        self.gate_proj = torch.nn.Linear(C, F, bias=False)
        self.up_proj = torch.nn.Linear(C, F, bias=False)
        self.down_proj = torch.nn.Linear(F, C, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = LlamaAttention(c)
        self.mlp = LlamaMLP(c)
        self.input_layernorm = LlamaRMSNorm(c["width"], c["norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(c["width"], c["norm_eps"])

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c["vocab"], c["width"])
        self.layers = torch.nn.ModuleList([LlamaDecoderLayer(c) for _ in range(c["layers"])])
        self.norm = LlamaRMSNorm(c["width"], c["norm_eps"])
        self.rotary_emb = LlamaRotaryEmbedding(c["width"] // c["heads"], c["rope_base"])


class LlamaForCausalLM(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = LlamaModel(c)
        self.tied = c["tied_head"]
        if not self.tied:
            self.lm_head = torch.nn.Linear(c["width"], c["vocab"], bias=False)

    def forward(self, tokens, targets):
        x = self.model.embed_tokens(tokens)
        pos = torch.arange(tokens.shape[1])[None, :].expand(tokens.shape[0], -1)
        cos, sin = self.model.rotary_emb(x, pos)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = x @ head.t()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


MODELS = {
    "llama_ref": dict(vocab=32, context=8, layers=2, heads=4, kv_heads=2, width=16, ffn_width=24, rope_base=10000.0,
                      norm_eps=1e-5, tied_head=False, batch=2),
    "llama_mqa_tied_ref": dict(vocab=32, context=8, layers=2, heads=2, kv_heads=1, width=16, ffn_width=256,
                               rope_base=500.0, norm_eps=1e-6, tied_head=True, batch=2),
}


def make(name, c, outdir):
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(c).double()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif n == "model.embed_tokens.weight":
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
            p.copy_(p.float().double())  # both sides start from exactly the stored weights
    tok = torch.randint(c["vocab"], (c["batch"], c["context"] + 1), generator=torch.Generator().manual_seed(SEED))
    tokens, targets = tok[:, :-1].contiguous(), tok[:, 1:].contiguous()
    logits, loss = model(tokens, targets)
    loss.backward()
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    tensors = [("tokens", tokens.int()), ("targets", targets.int()), ("logits", logits.detach().float()),
               ("loss", loss.detach().float().reshape(()))]
    tensors += [("param." + n, params[n].detach().float()) for n in names]
    tensors += [("grad." + n, params[n].grad.detach().float()) for n in names]
    meta = dict(c, seed=SEED, torch=torch.__version__, made_by="scripts/make_llama_ref.py")
    meta["tied_head"] = int(c["tied_head"])
    path = os.path.join(outdir, name + ".safetensors")
    write_safetensors(path, tensors, {k: str(v) for k, v in meta.items()})
    print(f"{path}: loss {float(loss):.6f}, {len(names)} parameters, {os.path.getsize(path)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--outdir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
    args = ap.parse_args()
    for name, c in MODELS.items():
        make(name, c, args.outdir)


if __name__ == "__main__":
    main()

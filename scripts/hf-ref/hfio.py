"""Plain-Python reading and writing of Hugging Face model directories for the reference scripts in
this folder (gpt2_ref.py, llama_ref.py). No `transformers`, no `safetensors` package: the
safetensors format is small enough to read and write by hand (https://github.com/huggingface/
safetensors, "Format": 8-byte little-endian header length, a JSON header, the tensors' bytes).

    tensors = load_dir("tests/data/hf/gpt2-tiny")       # {name: torch tensor}, from model.safetensors
                                                        # or model.safetensors.index.json + shards
    write_safetensors(path, [(name, tensor), ...], {"format": "pt"})
"""

import json
import os
import struct

import torch

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor), written in that order; metadata: {str: str}."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t  # numpy has no bfloat16
        data = raw.numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
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


def read_safetensors(path):
    """{name: tensor} of one file (a copy of each tensor's bytes)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    base, out = 8 + n, {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dtype = _DTYPES[e["dtype"]]
        raw = bytearray(blob[base + b:base + end])
        if dtype == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.empty(0, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"])
    return out


def load_dir(d):
    """config.json and every tensor of a Hugging Face model directory (single file or sharded)."""
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        for shard in sorted(set(weight_map.values())):
            part = read_safetensors(os.path.join(d, shard))
            tensors.update({k: v for k, v in part.items() if weight_map.get(k) == shard})
    else:
        tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    return config, tensors


def write_sharded(d, tensors, n_shards):
    """tensors (list of (name, tensor)) into n_shards files model-0000i-of-0000n.safetensors and
    model.safetensors.index.json, as transformers' save_pretrained shards a large model."""
    per = -(-len(tensors) // n_shards)
    weight_map, total = {}, 0
    for s in range(n_shards):
        part = tensors[s * per:(s + 1) * per]
        name = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        write_safetensors(os.path.join(d, name), part, {"format": "pt"})
        for k, t in part:
            weight_map[k] = name
            total += t.numel() * t.element_size()
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters (openai/gpt-2, src/encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_tiny_tokenizer(d, vocab_size, text):
    """A byte-level BPE tokenizer.json of vocab_size tokens: the 256 byte symbols (GPT-2's order),
    vocab_size - 257 merges learnt greedily on `text`, and <|endoftext|> last. Small, but a real
    tokenizer of GPT-2's scheme, so the copy hp convert makes can be loaded by a BPE reader."""
    b2u = bytes_to_unicode()
    vocab = {ch: i for i, ch in enumerate(b2u.values())}
    import re
    words = [[b2u[b] for b in w.encode()] for w in re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", text)]
    merges = []
    while len(vocab) < vocab_size - 1:
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = max(sorted(counts), key=lambda p: counts[p])
        merges.append(best)
        vocab[best[0] + best[1]] = len(vocab)
        new_words = []
        for w in words:
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words.append(out)
        words = new_words
    eos = len(vocab)
    vocab["<|endoftext|>"] = eos
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eos, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]},
    }
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return len(vocab)


SAMPLE_TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
               "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
               "And God said, Let there be light: and there was light. And God saw the light, that it was good: "
               "and God divided the light from the darkness. ") * 4

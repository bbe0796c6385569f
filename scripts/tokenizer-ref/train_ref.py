#!/usr/bin/env python3
"""A naive byte-level BPE trainer (recount every pair at every step) to check `hp tokenizer train`'s
incremental one: same pre-tokens (GPT-2's pattern; ASCII classes, so use it on ASCII text), the pair
with the highest count merged, ties to the smaller (left id, right id). Prints the merges as
"a b" lines of byte-level strings, as in tokenizer.json.

    python3 scripts/tokenizer-ref/train_ref.py CORPUS MERGES > ref.txt
"""
import collections
import re
import sys

PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    text = open(sys.argv[1], encoding="ascii").read()
    n_merges = int(sys.argv[2])
    words = collections.Counter(PAT.findall(text))
    seqs = {w: list(w.encode()) for w in words}
    toks = [bytes([b]) for b in range(256)]
    index = {t: i for i, t in enumerate(toks)}
    b2u = bytes_to_unicode()
    out = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), c = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if c < 2:
            break
        new = toks[a] + toks[b]
        if new not in index:
            index[new] = len(toks)
            toks.append(new)
        nid = index[new]
        for w in words:
            s, r, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    r.append(nid)
                    i += 2
                else:
                    r.append(s[i])
                    i += 1
            seqs[w] = r
        out.append("".join(b2u[x] for x in toks[a]) + " " + "".join(b2u[x] for x in toks[b]))
    print("\n".join(out))


main()

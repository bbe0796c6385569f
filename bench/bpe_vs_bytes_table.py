#!/usr/bin/env python3
"""Tables of the BPE-vs-bytes experiment (bench/bpe_vs_bytes.sh) from what it left in runs/bvb/:

    python3 bench/bpe_vs_bytes_table.py [runs/bvb]

Per run: steps, wall and CPU time (NAME.log), training time (the sum of the metrics' step_s),
tokens and bytes of text trained on, the trainer's last val loss and val_bpb (the metrics), and
`hp eval --data kjv-heldout.txt` of its last checkpoint (eval.jsonl); then every checkpoint's
held-out bits per byte against step and training time. Markdown on stdout.
"""
import json
import os
import re
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "runs/bvb"
runs = [r for r in ("bytes", "bpe", "bpe-eq") if os.path.exists(f"{d}/{r}.jsonl")]
evals = {}
for line in open(f"{d}/eval.jsonl"):
    e = json.loads(line)
    evals.setdefault(e["run"], {})[e["step"]] = e

# bytes of text per training token: 1 for bytes; the shards' train bytes / tokens for BPE
idx = json.load(open(f"{d}/shards-bpe/index.json"))
bpt = {"bytes": 1.0, "bpe": idx["train"]["bytes"] / idx["train"]["tokens"]}
bpt["bpe-eq"] = bpt["bpe"]

info = {}
for r in runs:
    m = [json.loads(l) for l in open(f"{d}/{r}.jsonl") if l.strip()]
    clock, t = {}, 0.0
    for x in m:
        t += x.get("step_s", 0.0)
        clock[x["step"]] = t
    vals = [x for x in m if "val_loss" in x]
    log = open(f"{d}/{r}.log").read()
    w = re.search(r"wall ([0-9.]+) s, cpu ([0-9.]+) s user \+ ([0-9.]+) s sys", log)
    loads = re.findall(r"load average: ([0-9.]+)", log)
    info[r] = dict(steps=m[-1]["step"], clock=clock, train_s=t, val=vals[-1],
                   wall=float(w.group(1)) if w else float("nan"),
                   cpu=float(w.group(2)) + float(w.group(3)) if w else float("nan"), loads=loads)

B, T = 16, 128
print("| run | tokenizer | steps | wall (s) | CPU (s) | training time (s) | text trained on (MB) "
      "| trainer val loss (nats/token) | trainer val bpb | held-out loss (nats/token) | held-out bpb |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in runs:
    i = info[r]
    e = evals[r][max(evals[r])]
    mb = i["steps"] * B * T * bpt[r] / 1e6
    print(f"| {r} | {'bytes (256)' if r == 'bytes' else 'BPE 4096'} | {i['steps']} | {i['wall']:.0f} | "
          f"{i['cpu']:.0f} | {i['train_s']:.0f} | {mb:.1f} | {i['val']['val_loss']:.4f} | "
          f"{i['val'].get('val_bpb', float('nan')):.4f} | {e['loss']:.4f} | **{e['bpb']:.4f}** |")
print()
print("Held-out bits per byte of every checkpoint (training time in s, the sum of step_s, in brackets):")
print()
steps = sorted({s for r in runs for s in evals[r]})
print("| step | " + " | ".join(runs) + " |")
print("| --- | " + " | ".join("---" for _ in runs) + " |")
for s in steps:
    cells = []
    for r in runs:
        e = evals[r].get(s)
        cells.append(f"{e['bpb']:.4f} ({info[r]['clock'].get(s, float('nan')):.0f})" if e else "")
    print(f"| {s} | " + " | ".join(cells) + " |")
print()
for r in runs:
    e = evals[r][max(evals[r])]
    print(f"- {r}: held-out {e['tokens']} targets, {e['bytes']} bytes; load average at start/end "
          f"{' / '.join(info[r]['loads'])}")

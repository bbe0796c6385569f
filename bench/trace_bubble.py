#!/usr/bin/env python3
"""Pipeline bubble measured from a trace written by `hp train --trace FILE.json` (docs/benchmarks.md).

    python3 bench/trace_bubble.py TRACE.json [--skip N] [--name NAME]

For each training step (after the first N, default 1: the warm-up) and each rank, the trace's
compute spans tagged with a pipeline phase (F, B, W) are grouped into actions by (stage,
micro-batch, phase); an action's time is from its first node's start to its last node's end (the
per-action program entry and the gaps between its nodes count as busy, as in bench_pipeline's
busy time). The step's schedule window is from the first action's start to the last action's end
over all ranks (the ranks' clocks are aligned by hp_trace_sync); the optimizer after it is not part
of the window. bubble = 1 - sum of the ranks' action time / (ranks x window). Prints one JSON line:
the median, min and max bubble over the steps, the ranks, steps counted, the imbalance (the busiest
rank's action time less the ranks' mean, over the window: idle that unequal stages force whatever
the schedule, which the closed forms at uniform times leave out), and each rank's mean F, B and W
action time in ms (where a rank splits some backwards into B and W, B is the mean of those split
B's: its whole ones, DualPipeV's, are B + W; where it splits none, the whole backward counts as B).
"""
import json
import statistics
import sys


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    path, skip, name = argv[0], 1, argv[0]
    i = 1
    while i < len(argv):
        if argv[i] == "--skip":
            skip = int(argv[i + 1])
            i += 2
        elif argv[i] == "--name":
            name = argv[i + 1]
            i += 2
        else:
            print(f"trace_bubble: unknown argument {argv[i]}", file=sys.stderr)
            return 2
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    actions = {}  # (step, rank, stage, mb, phase) -> [start, end]
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "compute":
            continue
        a = e.get("args", {})
        if a.get("phase") not in ("F", "B", "W") or "stage" not in a or "step" not in a:
            continue
        key = (a["step"], e["pid"], a["stage"], a["microbatch"], a["phase"])
        t0, t1 = e["ts"], e["ts"] + e["dur"]
        if key in actions:
            actions[key][0] = min(actions[key][0], t0)
            actions[key][1] = max(actions[key][1], t1)
        else:
            actions[key] = [t0, t1]
    ranks = sorted({k[1] for k in actions})
    steps = sorted({k[0] for k in actions})[skip:]
    if not steps or not ranks:
        print(f"trace_bubble: {path}: no pipeline actions after step {skip}", file=sys.stderr)
        return 1
    bubbles, imbalance = [], []
    phase_ms = {r: {"F": [], "B": [], "W": []} for r in ranks}
    for s in steps:
        acts = [(k, v) for k, v in actions.items() if k[0] == s]
        lo = min(v[0] for _, v in acts)
        hi = max(v[1] for _, v in acts)
        busy = sum(v[1] - v[0] for _, v in acts)
        bubbles.append(1 - busy / (len(ranks) * (hi - lo)))
        per_rank = [sum(v[1] - v[0] for k, v in acts if k[1] == r) for r in ranks]
        imbalance.append((max(per_rank) - statistics.mean(per_rank)) / (hi - lo))
        # a B without a W of its (stage, micro-batch) ran the whole backward (GPipe, 1F1B, interleaved;
        # DualPipeV's unsplit ones): a split schedule's B time is its split B's, else it is the whole
        has_w = {(k[1], k[2], k[3]) for k, _ in acts if k[4] == "W"}
        for k, v in acts:
            if k[4] == "B" and any(w[0] == k[1] for w in has_w) and (k[1], k[2], k[3]) not in has_w:
                continue
            phase_ms[k[1]][k[4]].append((v[1] - v[0]) / 1e3)
    out = {
        "bench": "pipeline_trace_bubble",
        "name": name,
        "ranks": len(ranks),
        "steps": len(steps),
        "bubble": round(statistics.median(bubbles), 4),
        "bubble_min": round(min(bubbles), 4),
        "bubble_max": round(max(bubbles), 4),
        # the part of the bubble the ranks' unequal work alone makes: (the busiest rank's compute -
        # the ranks' mean) / window; no schedule of these stages has less idle than this
        "imbalance": round(statistics.median(imbalance), 4),
    }
    for r in ranks:
        for ph in ("F", "B", "W"):
            xs = phase_ms[r][ph]
            out[f"rank{r}_{ph}_ms"] = round(statistics.mean(xs), 3) if xs else None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Pipeline bubble measured from a trace written by `hp train --trace FILE.json` (docs/benchmarks.md).

    python3 bench/trace_bubble.py TRACE.json [--skip N] [--name NAME] [--span]

For each training step (after the first N, default 1: the warm-up) and each rank, the trace's
compute spans tagged with a pipeline phase (F, B, W) are grouped into actions: a rank's
consecutive spans of one (stage, micro-batch, phase); an action's time is from its first node's start to its last node's end (the
per-action program entry and the gaps between its nodes count as busy, as in bench_pipeline's
busy time). The step's schedule window is from the first action's start to the last action's end
over all ranks (the ranks' clocks are aligned by hp_trace_sync); the optimizer after it is not part
of the window. bubble = 1 - sum of the ranks' action time / (ranks x window). Prints one JSON line:
the median, min and max bubble over the steps, the ranks, steps counted, the imbalance (the busiest
rank's action time less the ranks' mean, over the window: idle that unequal stages force whatever
the schedule, which the closed forms at uniform times leave out), and each rank's mean F, B and W
action time in ms (where a rank splits some backwards into B and W, B is the mean of those split
B's and BW the mean of its whole ones, DualPipeV's; where it splits none, the whole backward counts
as B and BW is null).

With --span it also reports span_bubble: the steps after the first N taken as one window, from
their first action's start to the end of their last action, optimizer program or post-validation
copy, with the optimizer's programs (phase opt, node by node) and the post-validation copies and
restores counted as busy: the bubble of a run of consecutive steps, which a per-step window cannot
measure once steps overlap (pipeline.post_validate) and which counts the waits between steps that
the per-step window leaves out. A redone post-validated step's schedule, run twice, counts twice.
"""
import json
import statistics
import sys


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    path, skip, name, span = argv[0], 1, argv[0], False
    i = 1
    while i < len(argv):
        if argv[i] == "--span":
            span = True
            i += 1
        elif argv[i] == "--skip":
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
    spans = []  # (rank, start, end, (step, rank, stage, mb, phase)) of the F, B and W nodes
    other = []  # (step, start, end) of the optimizer's programs' nodes and the post-validation copies
    for e in events:
        a = e.get("args", {})
        if e.get("ph") != "X" or "step" not in a:
            continue
        if a.get("phase") == "opt" and e.get("cat") in ("compute", "copy"):
            other.append((a["step"], e["ts"], e["ts"] + e["dur"]))
        if e.get("cat") == "compute" and a.get("phase") in ("F", "B", "W") and "stage" in a:
            key = (a["step"], e["pid"], a["stage"], a["microbatch"], a["phase"])
            spans.append((e["pid"], e["ts"], e["ts"] + e["dur"], key))
    # an action: a rank's consecutive nodes of one (step, stage, micro-batch, phase), so a schedule
    # run again (a redone post-validated step) gives its actions twice instead of one merged span
    actions = []  # [(key, [start, end])]
    for rank, t0, t1, key in sorted(spans):
        if actions and actions[-1][0] == key:
            actions[-1][1][1] = max(actions[-1][1][1], t1)
        else:
            actions.append((key, [t0, t1]))
    ranks = sorted({k[1] for k, _ in actions})
    steps = sorted({k[0] for k, _ in actions})[skip:]
    if not steps or not ranks:
        print(f"trace_bubble: {path}: no pipeline actions after step {skip}", file=sys.stderr)
        return 1
    bubbles, imbalance = [], []
    phase_ms = {r: {"F": [], "B": [], "W": [], "BW": []} for r in ranks}
    for s in steps:
        acts = [(k, v) for k, v in actions if k[0] == s]
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
            whole = k[4] == "B" and any(w[0] == k[1] for w in has_w) and (k[1], k[2], k[3]) not in has_w
            phase_ms[k[1]]["BW" if whole else k[4]].append((v[1] - v[0]) / 1e3)
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
    if span:
        first = steps[0]
        acts = [v for k, v in actions if k[0] >= first]
        opt = [(t0, t1) for st, t0, t1 in other if st >= first]
        lo = min(v[0] for v in acts)
        hi = max([v[1] for v in acts] + [t1 for _, t1 in opt])
        busy = sum(v[1] - v[0] for v in acts) + sum(t1 - t0 for t0, t1 in opt)
        out["span_bubble"] = round(1 - busy / (len(ranks) * (hi - lo)), 4)
        out["span_ms_per_step"] = round((hi - lo) / 1e3 / len(steps), 2)
    for r in ranks:
        for ph in ("F", "B", "W", "BW"):
            xs = phase_ms[r][ph]
            out[f"rank{r}_{ph}_ms"] = round(statistics.mean(xs), 3) if xs else None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Ring attention's masking from a trace of `hp train --trace FILE.json` (docs/benchmarks.md).

    python3 bench/trace_ring_mask.py TRACE.json [--skip N]

For each rank, every ring transfer span on the "p2p" track (ring_sendrecv, ring_send, ring_recv:
the queue thread's time from issue to completion) is intersected with the rank's compute track: the
time covered by node spans that are not waits (cat "wait") and not the per-step "step" span.
A receive cannot start before its sender issued the matching send, and the time before that is the
peer's compute (under the causal mask, load imbalance), not communication: each receive is matched
with the previous rank's k-th send of the same step (sends and receives pair in issue order) and
starts at the later of the two issues (the ranks' clocks are aligned by hp_trace_sync; 2 ranks:
the previous rank is the other one). masked = covered time / transfer time, over the steps after
the first N (default 1: the warm-up); "masked_raw" counts from the receiver's own issue. Prints one
JSON line: masked overall and per rank, transfer time, the compute thread's wait time per step.
"""
import json
import sys


def merge(iv):
    iv.sort()
    out = []
    for s, e in iv:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(spans, busy):
    """Sum over spans of their overlap with the merged busy intervals."""
    total, j = 0.0, 0
    for s, e in sorted(spans):
        while j < len(busy) and busy[j][1] <= s:
            j += 1
        k = j
        while k < len(busy) and busy[k][0] < e:
            total += max(0.0, min(e, busy[k][1]) - max(s, busy[k][0]))
            k += 1
    return total


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    path, skip = argv[0], 1
    if len(argv) >= 3 and argv[1] == "--skip":
        skip = int(argv[2])
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    tracks = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            tracks[(e["pid"], e["tid"])] = e["args"]["name"]
    ranks = sorted({e["pid"] for e in events if e.get("ph") == "X"})
    out = {"bench": "ring_mask", "trace": path, "skip": skip}
    # the sends of each rank per step, in issue order: (start of the queue span)
    sends = {}
    for e in sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e["ts"]):
        a = e.get("args", {})
        if tracks.get((e["pid"], e["tid"])) == "p2p" and e["name"].startswith("ring_") and a.get("op") in ("sendrecv", "send"):
            sends.setdefault((e["pid"], a.get("step", 0)), []).append(e["ts"])
    tot_x = tot_c = tot_raw_x = tot_raw_c = 0.0
    per = {}
    for r in ranks:
        prev = ranks[(ranks.index(r) - 1) % len(ranks)]
        nrecv = {}
        raw = []
        xfer, busy, wait, steps = [], [], 0.0, set()
        for e in events:
            if e.get("ph") != "X" or e["pid"] != r or e.get("args", {}).get("step", 0) <= skip:
                continue
            steps.add(e["args"]["step"])
            name, track = e["name"], tracks.get((r, e["tid"]), "")
            span = (e["ts"], e["ts"] + e["dur"])
            if track == "p2p" and name.startswith("ring_"):
                op, st = e["args"].get("op"), e["args"]["step"]
                if op == "send":
                    continue  # a lone send: non-blocking, its receiver accounts for the transfer
                k = nrecv.get(st, 0)
                nrecv[st] = k + 1
                peer = sends.get((prev, st), [])
                start = max(span[0], peer[k]) if k < len(peer) else span[0]
                raw.append(span)
                xfer.append((min(start, span[1]), span[1]))
            elif track == "compute":
                if e.get("cat") == "wait":
                    wait += e["dur"]
                elif name != "step":
                    busy.append(list(span))
        mb = merge(busy)
        x = sum(b - a for a, b in xfer)
        c = covered(xfer, mb)
        rx = sum(b - a for a, b in raw)
        rc = covered(raw, mb)
        tot_x += x
        tot_c += c
        tot_raw_x += rx
        tot_raw_c += rc
        ns = max(1, len(steps))
        per[f"rank{r}"] = {"masked": round(c / x, 3) if x else None, "masked_raw": round(rc / rx, 3) if rx else None,
                           "transfer_ms_per_step": round(x / 1e3 / ns, 2),
                           "compute_wait_ms_per_step": round(wait / 1e3 / ns, 2), "transfers": len(xfer)}
    out["masked"] = round(tot_c / tot_x, 3) if tot_x else None
    out["masked_raw"] = round(tot_raw_c / tot_raw_x, 3) if tot_raw_x else None
    out.update(per)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

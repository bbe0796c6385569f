#!/usr/bin/env python3
"""The closed-form bubble of a pipeline schedule (the same forms as hp_schedule_bubble_formula in
src/mpmd/schedule_check.c): idle / (compute + idle) of a synchronous step with uniform per-stage
(per chunk) times f, b (input gradient; the whole backward under a schedule without W) and w.

    bubble_formula.py SCHEDULE P M V F B W   ->   {"sync": ..., "span": ...}

Imported by bench/pipeline.sh's summary (formula(...)), so the measured bubble is set against its
form in the same run."""
import json
import sys


def formula(kind, p, m, v, f, b, w):
    if kind in ("gpipe", "1f1b", "interleaved"):
        v = 1 if kind != "interleaved" else (v or 2)
        tc = v * m * (f + b + w)
        tb_sync = tb_span = (p - 1 + (v - 1) * (p - m if m < p else 0)) * (f + b + w)
    elif kind == "zb-h1":
        tc = m * (f + b + w)
        tb_sync = tb_span = (p - 1) * max(f + b - w, f, b)
    elif kind == "zb-v":
        tc = 2.0 * m * (f + b + w)
        tb_span = (p - 1) * max(f + b - 2 * w, 0.0)
        tb_sync = (p - 1) * max(f + b - 2 * w, f)
    elif kind == "dualpipev":
        tc = 2.0 * m * (f + b + w)
        tb_sync = tb_span = (p - 1) * max(f + b - w, f)
    else:
        raise ValueError(f"unknown schedule {kind!r}")
    return {"sync": tb_sync / (tc + tb_sync) if tc + tb_sync > 0 else 0.0,
            "span": tb_span / (tc + tb_span) if tc + tb_span > 0 else 0.0}


if __name__ == "__main__":
    k, p, m, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    f, b, w = (float(x) for x in sys.argv[5:8])
    print(json.dumps(formula(k, p, m, v, f, b, w)))

#!/usr/bin/env bash
# HyperMPMD measured on this machine (docs/benchmarks.md, "HyperMPMD: measured against the plan"):
# for one small GPT trained through `hp train`, as one rank, dp2, tp2, fsdp2 and a pp2 pipeline under every
# schedule (split: auto), the step time `hp plan` predicts from the calibrated cost model against the
# measured median step, and for the pipelines the bubble measured from a trace (hp train --trace,
# bench/trace_bubble.py) with its closed form at the measured F, B and W times (bench/bubble_formula.py)
# and their ratio, and the schedule simulated with each rank's own measured F, B and W (bench_schedule
# --ranks: the bubble of stages as unequal as the measured ones) and the ratio to it. pp2-zb-v-post
# is ZB-V with post-validated steps (pipeline.post_validate), whose steps overlap: for it only the
# span bubble means something (trace_bubble.py --span: the steps after the first 3 as one window,
# the waits between steps counted, the optimizer and the store copy busy), set against synchronous
# 1F1B's span bubble of the same round. One JSON line per (round, configuration), then one summary
# line per configuration with the medians over the rounds, and the span bubbles of ZB-V
# (synchronous and post-validated) over 1F1B's.
#
#   bench/pipeline.sh [BUILD_DIR] [ROUNDS] [STEPS]
#
# Each round calibrates first (`hp calibrate` for 1 rank x 2 threads and under `mpirun -n 2` for
# 2 ranks x 1 thread, into a file of the run's own), then runs the configurations in an order
# rotated by one each round (alternating, so slow drift of the machine's load spreads over them),
# each as plan -> train (STEPS steps, default 20, the first 3 not counted) -> for pipelines a second,
# traced train. The 1-minute load average is recorded on each line: the machine is shared. With
# HP_BENCH_ONLY="pp2-1f1b dp2" only those configurations run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
rounds="${2:-3}"
steps="${3:-20}"
hp="$build/hp"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-pipeline.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "${HP_DATA_DIR:-$root/data}" "$work/data"
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

# The model of bench_pipeline: 4 blocks, width 128, 4 heads, vocab 256, context 128; batch 16.
# HP_BENCH_LAYERS, HP_BENCH_WIDTH, HP_BENCH_BATCH and HP_BENCH_MB (micro-batches) change it.
layers="${HP_BENCH_LAYERS:-4}"
width="${HP_BENCH_WIDTH:-128}"
batch="${HP_BENCH_BATCH:-16}"
mb="${HP_BENCH_MB:-8}"
base() { # STEPS
    cat <<EOF
model: {vocab: 256, context: 128, layers: $layers, heads: 4, width: $width, tied_head: false}
data: {corpus: data/kjv.txt, val_fraction: 0.05}
train: {steps: $1, batch: $batch, seed: 1, log_every: 1000, eval_every: 0, checkpoint_dir: ckpt, checkpoint_every: 0, sample_tokens: 0}
optim: {lr: 1.0e-3, min_lr: 1.0e-3, warmup: 0, weight_decay: 0.1, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, grad_clip: ${clip:-1.0}}
EOF
}
pipe() { # SCHEDULE CHUNKS [POST_VALIDATE]
    base "$steps"
    cat <<EOF
pipeline: {schedule: $1, micro_batches: $mb, chunks: $2, split: auto, post_validate: ${3:-false}}
groups:
  first: {ranks: [0]}
  second: {ranks: [1]}
EOF
}
base "$steps" > single.yaml
{ base "$steps"; echo "strategy: {mesh: {device_matrix: [2], alias_name: [dp]}, inputs: {tokens: [dp, none], targets: [dp, none]}}"; } > dp2.yaml
{
    base "$steps"
    cat <<'EOF'
strategy:
  mesh: {device_matrix: [2], alias_name: [tp]}
  params:
    - {match: "blocks.*.attn.[qkv].weight", tensor_map: [tp, none]}
    - {match: "blocks.*.attn.[qkv].bias", tensor_map: [tp]}
    - {match: "blocks.*.mlp.fc.weight", tensor_map: [tp, none]}
    - {match: "blocks.*.mlp.fc.bias", tensor_map: [tp]}
    - {match: "blocks.*.attn.proj.weight", tensor_map: [none, tp]}
    - {match: "blocks.*.mlp.proj.weight", tensor_map: [none, tp]}
EOF
} > tp2.yaml
{ # ZeRO-3 / FSDP: the batch and every parameter (so its gradient and AdamW state) split over dp
    base "$steps"
    cat <<'EOF'
strategy:
  mesh: {device_matrix: [2], alias_name: [dp]}
  inputs: {tokens: [dp, none], targets: [dp, none]}
  params:
    - {match: "*", tensor_map: [dp]}
EOF
} > fsdp2.yaml
{ # one pipeline stage over both ranks, tensor parallel inside: the stage's collectives in the plan
    base "$steps"
    cat <<EOF
pipeline: {schedule: 1f1b, micro_batches: 2}
groups:
  only:
    ranks: [0, 1]
    module: [embedding, blocks.0-$((layers - 1)), head]
    mesh: {device_matrix: [2], alias_name: [tp]}
    strategy:
      params:
        - {match: "blocks.*.attn.[qkv].weight", tensor_map: [tp, none]}
        - {match: "blocks.*.attn.[qkv].bias", tensor_map: [tp]}
        - {match: "blocks.*.mlp.fc.weight", tensor_map: [tp, none]}
        - {match: "blocks.*.mlp.fc.bias", tensor_map: [tp]}
        - {match: "blocks.*.attn.proj.weight", tensor_map: [none, tp]}
        - {match: "blocks.*.mlp.proj.weight", tensor_map: [none, tp]}
EOF
} > pp1-tp2.yaml
pipe gpipe 1 > pp2-gpipe.yaml
pipe 1f1b 1 > pp2-1f1b.yaml
pipe interleaved 2 > pp2-interleaved.yaml
pipe zb-h1 1 > pp2-zb-h1.yaml
pipe zb-v 2 > pp2-zb-v.yaml
pipe dualpipev 2 > pp2-dualpipev.yaml
# post-validated steps (hp train's pipeline.post_validate): under a clip of 1.0 this model's early
# norms exceed it and every step would run twice; a clip of 100 never acts, which changes no step's
# work (the synchronous step all-reduces the norm either way), only the numbers it trains to
clip=100.0 pipe zb-v 2 true > pp2-zb-v-post.yaml

names=(single dp2 tp2 fsdp2 pp1-tp2 pp2-gpipe pp2-1f1b pp2-interleaved pp2-zb-h1 pp2-zb-v pp2-dualpipev pp2-zb-v-post)
only="${HP_BENCH_ONLY:-}"
want() { [[ -z "$only" || " $only " == *" $1 "* ]]; }
load() { cut -d' ' -f1 /proc/loadavg; }

# median step_s over the metrics lines after the first 3
median_step() {
    python3 -c '
import json, statistics, sys
xs = [json.loads(l)["step_s"] for l in open(sys.argv[1]) if l.strip()][3:]
print(statistics.median(xs) if xs else "nan")' "$1"
}

calibrate() {
    OMP_NUM_THREADS=2 "$hp" calibrate -o "$work/cal.json" > "$work/cal.log" 2>&1 || { cat "$work/cal.log" >&2; exit 1; }
    OMP_NUM_THREADS=1 mpirun -n 2 "$hp" calibrate -o "$work/cal.json" > "$work/cal.log" 2>&1 ||
        { cat "$work/cal.log" >&2; exit 1; }
}

results="$work/results.jsonl"
for ((round = 0; round < rounds; round++)); do
    calibrate
    n=${#names[@]}
    for ((j = 0; j < n; j++)); do
        name=${names[$(((j + round) % n))]}
        want "$name" || continue
        if [[ $name == single ]]; then ranks=1 threads=2; else ranks=2 threads=1; fi
        launch=("$hp")
        ((ranks > 1)) && launch=(mpirun -n "$ranks" "$hp")
        pred=$(OMP_NUM_THREADS=$threads "$hp" plan "$name.yaml" --calibration "$work/cal.json" |
            sed -n 's/.*predicted step: \([0-9.]*\) s.*/\1/p' | head -1)
        l0=$(load)
        OMP_NUM_THREADS=$threads "${launch[@]}" train "$name.yaml" --overwrite --metrics "$work/m.jsonl" \
            > "$work/out.log" 2>&1 || { cat "$work/out.log" >&2; exit 1; }
        meas=$(median_step "$work/m.jsonl")
        bubble="null"
        if [[ $name == pp2-* ]]; then
            OMP_NUM_THREADS=$threads "${launch[@]}" train "$name.yaml" --overwrite --trace "$work/t.json" \
                > "$work/out.log" 2>&1 || { cat "$work/out.log" >&2; exit 1; }
            bubble=$(python3 "$root/bench/trace_bubble.py" "$work/t.json" --skip 3 --name "$name" --span)
        fi
        PYTHONPATH="$root/bench" python3 -c '
import json, subprocess, sys
from bubble_formula import formula
name, rnd, pred, meas, l0, l1, bubble, mb, sched = sys.argv[1:10]
out = {"bench": "pipeline_plan", "config": name, "round": int(rnd), "predicted_s": float(pred),
       "measured_s": float(meas), "ratio": round(float(pred) / float(meas), 3), "load1": [float(l0), float(l1)]}
if bubble != "null":
    b = json.loads(bubble)
    out.update({k: v for k, v in b.items() if k not in ("bench", "name", "ranks")})
    # the closed form at the ranks mean F, B and W (B: the whole backward where there is no W)
    kind = name[4:].replace("-post", "")
    mean = lambda ph: sum(out.get("rank%d_%s_ms" % (r, ph)) or 0.0 for r in (0, 1)) / 2
    v = 2 if kind in ("interleaved", "zb-v", "dualpipev") else 1
    fo = formula(kind, 2, int(mb), v, mean("F"), mean("B"), mean("W"))["sync"]
    out["formula"] = round(fo, 4)
    out["bubble_over_formula"] = round(out["bubble"] / fo, 3) if fo > 0 else None
    # the schedule simulated with each of the ranks own measured F, B and W (bench_schedule --ranks): the
    # bubble of stages as unequal as the measured ones, which the closed form at uniform times leaves out
    times = [str(out.get("rank%d_%s_ms" % (r, ph)) or 0.0) for r in (0, 1) for ph in ("F", "B", "W")]
    sim = json.loads(subprocess.run([sched, "--ranks", kind, mb, str(v)] + times, check=True,
                                    capture_output=True, text=True).stdout)
    out["sim_ranks"] = round(sim["bubble"], 4)
    out["bubble_over_sim_ranks"] = round(out["bubble"] / sim["bubble"], 3) if sim["bubble"] > 0 else None
print(json.dumps(out))' "$name" "$round" "$pred" "$meas" "$l0" "$(load)" "$bubble" "$mb" "$build/bench/bench_schedule" |
            tee -a "$results"
    done
done
python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for name in dict.fromkeys(r["config"] for r in rows):
    rs = [r for r in rows if r["config"] == name]
    out = {"bench": "pipeline_plan_summary", "config": name, "rounds": len(rs),
           "predicted_s": round(statistics.median(r["predicted_s"] for r in rs), 4),
           "measured_s": round(statistics.median(r["measured_s"] for r in rs), 4),
           "ratio": round(statistics.median(r["ratio"] for r in rs), 3)}
    if "bubble" in rs[0]:
        out["bubble"] = round(statistics.median(r["bubble"] for r in rs), 4)
        out["formula"] = round(statistics.median(r["formula"] for r in rs), 4)
        out["bubble_over_formula"] = round(out["bubble"] / out["formula"], 3) if out["formula"] > 0 else None
        out["imbalance"] = round(statistics.median(r["imbalance"] for r in rs), 4)
        out["bubble_over_sim_ranks"] = round(statistics.median(r["bubble_over_sim_ranks"] for r in rs), 3)
        out["bubble_over_formula_per_round"] = sorted(r["bubble_over_formula"] for r in rs)
        out["bubble_over_sim_ranks_per_round"] = sorted(r["bubble_over_sim_ranks"] for r in rs)
        out["span_bubble"] = round(statistics.median(r["span_bubble"] for r in rs), 4)
    out["load1_max"] = max(max(r["load1"]) for r in rs)
    print(json.dumps(out))
# consecutive steps (span_bubble: the waits between steps counted, the optimizer and the copy busy):
# ZB-V with post-validated steps, and synchronous, against synchronous 1F1B, paired per round
base = {r["round"]: r["span_bubble"] for r in rows if r["config"] == "pp2-1f1b"}
for name in ("pp2-zb-v", "pp2-zb-v-post"):
    ratios = [r["span_bubble"] / base[r["round"]] for r in rows if r["config"] == name and base.get(r["round"])]
    if ratios:
        print(json.dumps({"bench": "pipeline_span_vs_1f1b", "config": name, "rounds": len(ratios),
                          "span_bubble_over_1f1b": round(statistics.median(ratios), 3),
                          "per_round": [round(x, 3) for x in ratios]}))' "$results"

#!/usr/bin/env bash
# The RL job (hp rl, hp/rl.h) measured on this machine (docs/benchmarks.md, "RL (GRPO)"):
#   1. samples/s with and without generation/training overlap: disjoint groups (learner FSDP on
#      ranks 0-1, actor on rank 2), rl.off_policy 0 (the actor waits for each update) against 1 (the
#      actor generates batch i+1 while the learner trains on batch i), same model and batch;
#   2. each weight sync's time against the bytes moved: the same disjoint job at model widths
#      64..512 (hp_redistribute_cross of every parameter from the learner's FSDP layout to the
#      actor's replica), per sync: the median seconds and the bytes.
# One JSON line per (round, configuration); the first 3 steps of a run are not counted. The machine
# is shared: the 1-minute load average is on each line.
#
#   bench/rl.sh [BUILD_DIR] [ROUNDS] [STEPS]
#
# HP_BENCH_ONLY=overlap (or sync) runs only that part. HP_BENCH_RANKS=2: a one-rank learner and a
# one-rank actor instead (the overlap needs a core per group; this machine has 2).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
rounds="${2:-3}"
steps="${3:-23}"
hp="$build/hp"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-rl.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
nranks="${HP_BENCH_RANKS:-3}" # 2: learner on rank 0, actor on rank 1 (a core each on a 2-core machine)

config() { # WIDTH OFF_POLICY PROMPTS
    cat <<YAML
model: {vocab: 256, context: 12, layers: 2, heads: 2, width: $1}
train: {seed: 1}
optim: {lr: 3.0e-4, min_lr: 3.0e-4, warmup: 0, weight_decay: 0.0}
rl: {digits: [3, 5], prompts: $3, group_size: 8, steps: $steps, sft_steps: 5, off_policy: $2, eval_prompts: 0}
YAML
    if (( nranks == 2 )); then
        cat <<YAML
groups:
  learner: {kind: learner, ranks: [0]}
  actor: {kind: actor, ranks: [1]}
YAML
    else
        cat <<YAML
groups:
  learner:
    kind: learner
    ranks: [0, 1]
    mesh: {device_matrix: [2], alias_name: [fsdp]}
    strategy: {inputs: {tokens: [fsdp, none], targets: [fsdp, none]}, params: [{match: "*", tensor_map: [fsdp]}]}
  actor: {kind: actor, ranks: [2]}
YAML
    fi
}

summary() { # NAME METRICS.jsonl
    python3 - "$1" "$2" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, statistics, sys
name, path, load = sys.argv[1], sys.argv[2], float(sys.argv[3])
r = [json.loads(l) for l in open(path)][3:]
syncs = [x for x in r if x["sync_bytes"] > 0]
print(json.dumps({
    "bench": "rl", "config": name, "steps": len(r), "load1": load,
    "samples_per_s": round(sum(x["samples"] for x in r) / sum(x["seconds"] for x in r), 1),
    "step_ms_median": round(1e3 * statistics.median(x["seconds"] for x in r), 2),
    "gen_ms_median": round(1e3 * statistics.median(x["gen_seconds"] for x in r), 2),
    "wait_ms_median": round(1e3 * statistics.median(x["wait_seconds"] for x in r), 2),
    "train_ms_median": round(1e3 * statistics.median(x["train_seconds"] for x in r), 2),
    "sync_ms_median": round(1e3 * statistics.median(x["sync_seconds"] for x in syncs), 3) if syncs else 0,
    "sync_bytes": syncs[0]["sync_bytes"] if syncs else 0,
    "sync_MB_per_s": round(statistics.median(x["sync_bytes"] / x["sync_seconds"] for x in syncs) / 1e6, 1) if syncs else 0}))
PY
}

run() { # NAME WIDTH OFF_POLICY PROMPTS
    config "$2" "$3" "$4" > "$work/$1.yaml"
    mpirun --oversubscribe -n "$nranks" "$hp" rl "$work/$1.yaml" --quiet --metrics "$work/$1.jsonl" > /dev/null
    summary "$1" "$work/$1.jsonl"
}

for ((round = 0; round < rounds; round++)); do
    if (( round % 2 == 0 )); then order="0 1"; else order="1 0"; fi
    if [[ "${HP_BENCH_ONLY:-overlap}" == overlap || -z "${HP_BENCH_ONLY:-}" ]]; then
        for off in $order; do run "overlap-off_policy$off" 128 "$off" 16; done
    fi
    if [[ "${HP_BENCH_ONLY:-sync}" == sync || -z "${HP_BENCH_ONLY:-}" ]]; then
        for w in 64 128 256 512; do run "sync-width$w" "$w" 0 4; done
    fi
done

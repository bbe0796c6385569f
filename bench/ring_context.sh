#!/usr/bin/env bash
# The longest context a fixed per-rank memory budget trains (docs/benchmarks.md, "Ring attention"):
# one rank; cp2 with ring attention; cp2 with ring attention + HyperOffload (offload.device_budget =
# the budget, everything else on the host tier). A Llama-family model (RoPE: no position table that
# grows with the context), batch 1. For each setup a binary search over the context (a multiple of
# STEP tokens) with `hp plan` (no run): without offload the planned memory per rank (parameters,
# optimizer state, inputs, activation arena, workspace; the larger of the two ranks) must fit the
# budget; with offload the residency planner must find a plan under it. Then tokens/s of a few
# training steps at the length found (one thread per rank). Prints one JSON line per setup.
#
#   bash bench/ring_context.sh [BUDGET_MIB] [STEPS_TIMED]     # defaults 256 and 3
set -euo pipefail
cd "$(dirname "$0")/.."
HP=${HP:-build/hp}
BUDGET_MIB=${1:-256}
STEPS=${2:-3}
STEP=512
MAX=$((1 << 20))
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

config() { # SETUP T STEPS -> path
    local setup=$1 t=$2 steps=$3 f="$TMP/$1_$2.yaml"
    cat >"$f" <<YAML
model: {family: llama, vocab: 256, context: $t, layers: 4, heads: 4, kv_heads: 4, width: 256, ffn_width: 512, tied_head: true}
data: {corpus: "$PWD/data/kjv.txt", val_fraction: 0.01}
train: {steps: $steps, batch: 1, seed: 1, log_every: 1, eval_every: 0, checkpoint_dir: "$TMP/ck_$1_$2", checkpoint_every: 0, sample_tokens: 0, threads: 1}
YAML
    if [ "$setup" != one ]; then
        cat >>"$f" <<YAML
strategy:
  mesh: {device_matrix: [2], alias_name: [cp]}
  inputs: {tokens: [none, cp], targets: [none, cp]}
  context_parallel: ring
  bucket_size: 0
YAML
    fi
    if [ "$setup" = cp2offload ]; then
        cat >>"$f" <<YAML
offload:
  device_budget: ${BUDGET_MIB}MiB
  host_budget: 64GiB
  policy: {params: host, grads: host, optimizer: host, activations: host}
YAML
    fi
    echo "$f"
}

fits() { # SETUP T -> exit 0 when the plan fits the budget on every rank
    local setup=$1 t=$2 f ranks=1 r
    f=$(config "$setup" "$t" 1)
    [ "$setup" != one ] && ranks=2
    for ((r = 0; r < ranks; r++)); do
        local out
        out=$("$HP" plan "$f" --rank $r 2>&1) || return 1
        if [ "$setup" != cp2offload ]; then
            local total
            total=$(echo "$out" | awk '/^  total .* MiB/ {print $2}')
            awk -v t="$total" -v b="$BUDGET_MIB" 'BEGIN {exit !(t <= b)}' || return 1
        fi
    done
    return 0
}

for setup in one cp2 cp2offload; do
    lo=0 hi=$STEP
    while fits "$setup" "$hi" && [ "$hi" -lt "$MAX" ]; do lo=$hi; hi=$((hi * 2)); done
    while [ $((hi - lo)) -gt "$STEP" ]; do
        mid=$(((lo + hi) / 2 / STEP * STEP))
        if fits "$setup" "$mid"; then lo=$mid; else hi=$mid; fi
    done
    tps=null
    if [ "$lo" -gt 0 ] && [ "$STEPS" -gt 0 ]; then
        f=$(config "$setup" "$lo" "$STEPS")
        if [ "$setup" = one ]; then log=$("$HP" train "$f" 2>&1 || true)
        else log=$(mpirun --oversubscribe -n 2 -x OMP_NUM_THREADS=1 "$HP" train "$f" 2>&1 || true); fi
        tps=$(echo "$log" | awk -F'|' '/^step .*tok\/s/ {v=$5} END {gsub(/[^0-9.]/, "", v); print (v == "" ? "null" : v)}')
    fi
    echo "{\"bench\":\"ring_context\",\"setup\":\"$setup\",\"budget_mib\":$BUDGET_MIB,\"context\":$lo,\"tokens_per_s\":$tps}"
done

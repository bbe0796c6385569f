#!/usr/bin/env bash
# 2-D against 1-D tensor parallelism: the bytes each rank receives per training step, as planned by
# `hp plan --ranks N` (nothing runs), at 4, 8 and 16 ranks, for two GPT shapes. One JSON line per
# (model, ranks, strategy).
#   1d: Megatron TP over all N ranks (tp4.yaml's rules), inputs replicated.
#   2d: examples/tp2d.yaml's layouts on an R x C mesh (tpr x tpc; block weights over both axes,
#       the batch over tpr), for each factorisation with R, C >= 2.
#
#   bash bench/tp2d_plan.sh [build/hp]
set -euo pipefail
hp="${1:-build/hp}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-tp2d.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# name width heads batch context
models=("wide 2048 16 4 256" "base 512 16 16 256")

model_yaml() { # width heads batch context
    cat <<EOM
model: {vocab: 256, context: $4, layers: 4, heads: $2, width: $1, tied_head: false}
data: {corpus: data/kjv.txt}
train: {steps: 1, batch: $3, seed: 1}
optim: {lr: 3.0e-4}
EOM
}

tp1d() { # n
    cat <<EOM
strategy:
  mesh: {device_matrix: [$1], alias_name: [tp]}
  params:
    - {match: "blocks.*.attn.[qkv].weight", tensor_map: [tp, none]}
    - {match: "blocks.*.attn.[qkv].bias", tensor_map: [tp]}
    - {match: "blocks.*.mlp.fc.weight", tensor_map: [tp, none]}
    - {match: "blocks.*.mlp.fc.bias", tensor_map: [tp]}
    - {match: "blocks.*.attn.proj.weight", tensor_map: [none, tp]}
    - {match: "blocks.*.mlp.proj.weight", tensor_map: [none, tp]}
EOM
}

tp2d() { # r c
    cat <<EOM
strategy:
  mesh: {device_matrix: [$1, $2], alias_name: [tpr, tpc]}
  inputs: {tokens: [tpr, none], targets: [tpr, none]}
  params:
    - {match: "blocks.*.attn.[qkv].weight", tensor_map: [tpc, tpr]}
    - {match: "blocks.*.mlp.fc.weight", tensor_map: [tpc, tpr]}
    - {match: "blocks.*.attn.proj.weight", tensor_map: [tpr, tpc]}
    - {match: "blocks.*.mlp.proj.weight", tensor_map: [tpr, tpc]}
    - {match: "blocks.*.attn.[qkv].bias", tensor_map: [tpc]}
    - {match: "blocks.*.mlp.fc.bias", tensor_map: [tpc]}
EOM
}

bytes_of() { # yaml n -> total bytes per rank per step
    "$hp" plan "$1" --ranks "$2" | sed -n 's/^  total: \([0-9]*\) bytes.*/\1/p'
}

for m in "${models[@]}"; do
    read -r name width heads batch context <<< "$m"
    for n in 4 8 16; do
        f="$work/${name}_1d_$n.yaml"
        { model_yaml "$width" "$heads" "$batch" "$context"; tp1d "$n"; } > "$f"
        b1="$(bytes_of "$f" "$n")"
        echo "{\"bench\": \"tp2d_plan\", \"model\": \"$name\", \"width\": $width, \"batch\": $batch, \"context\": $context, \"ranks\": $n, \"strategy\": \"1d\", \"mesh\": \"[$n]\", \"bytes_per_rank_per_step\": $b1}"
        for r in 2 4 8; do
            c=$((n / r))
            (( c >= 2 && r * c == n )) || continue
            f="$work/${name}_2d_${r}x$c.yaml"
            { model_yaml "$width" "$heads" "$batch" "$context"; tp2d "$r" "$c"; } > "$f"
            b2="$(bytes_of "$f" "$n")"
            echo "{\"bench\": \"tp2d_plan\", \"model\": \"$name\", \"width\": $width, \"batch\": $batch, \"context\": $context, \"ranks\": $n, \"strategy\": \"2d\", \"mesh\": \"[$r, $c]\", \"bytes_per_rank_per_step\": $b2, \"vs_1d\": $(awk -v a="$b2" -v b="$b1" 'BEGIN { printf "%.3f", a / b }')}"
        done
    done
done

#!/usr/bin/env bash
# Throughput of `hp eval` against its batch size (windows per forward pass), one JSON line per run:
#
#   bench/eval.sh HP CKPT [BATCH...]        (default batches: 1 4 16 64)
#
# Each line: the batch, the tokens scored, the seconds of the forward passes and scoring
# (hp eval's own "seconds"), tokens/s, the loss (which must not depend on the batch) and the
# 1-minute load average before the run (on a shared machine a high one means other jobs took cores).
set -euo pipefail
if (( $# < 2 )); then
    echo "usage: bench/eval.sh HP CKPT [BATCH...]" >&2
    exit 2
fi
hp="$1" ckpt="$2"
shift 2
batches=("$@")
(( ${#batches[@]} )) || batches=(1 4 16 64)
field() { sed -n "s/.*\"$1\": \([-0-9.eE+]*\).*/\1/p" <<<"$2"; }
for b in "${batches[@]}"; do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    out="$("$hp" eval "$ckpt" --batch "$b" --json)"
    tokens="$(field tokens "$out")" secs="$(field seconds "$out")"
    printf '{"bench": "eval", "batch": %s, "tokens": %s, "seconds": %s, "tokens_per_s": %.0f, "loss": %s, "loadavg": %s, "threads": "%s"}\n' \
        "$b" "$tokens" "$secs" "$(awk -v t="$tokens" -v s="$secs" 'BEGIN { print t / s }')" "$(field loss "$out")" "$load" \
        "${OMP_NUM_THREADS:-default}"
done

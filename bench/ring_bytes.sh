#!/usr/bin/env bash
# Ring attention's point-to-point bytes against the analytic minimum (docs/benchmarks.md, "Ring
# attention"), from `hp plan` (no run): a causal Llama-family model (4 layers, width 256, 4 heads,
# batch 1, context T) with the sequence split over cp = 2, 4, 8 and strategy.context_parallel: ring,
# summed over the ranks (hp plan --rank r), forward and backward. One block is B x T/n x C floats.
# Analytic minimum, per layer, causal, block distribution: every rank r must receive K and V of the
# blocks before it, forward and again backward (they are not kept): n(n - 1)/2 blocks each, so
# n(n - 1) K/V blocks per pass; the ring carries each block exactly up to its last reader, which
# meets it. dK, dV: the shares of the n - 1 later ranks must reach each owner: n - 1 blocks per
# tensor when sent straight, (n - 1)^2 per tensor when accumulated around the ring (n - 1 hops).
# Also Ulysses' all-to-all bytes for the same model (8 all-to-alls per layer of (n - 1)/n of a
# rank's block each). Prints one JSON line per n.
#
#   bash bench/ring_bytes.sh [T]      # default 4096
set -euo pipefail
cd "$(dirname "$0")/.."
HP=${HP:-build/hp}
T=${1:-4096}
L=4 C=256
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for n in 2 4 8; do
    for cp in ring ulysses; do
        cat >"$TMP/$cp$n.yaml" <<YAML
model: {family: llama, vocab: 256, context: $T, layers: $L, heads: 8, kv_heads: 8, width: $C, ffn_width: 512, tied_head: true}
data: {corpus: "$PWD/data/kjv.txt", val_fraction: 0.01}
train: {steps: 1, batch: 1, checkpoint_dir: "$TMP/ck"}
strategy:
  mesh: {device_matrix: [$n], alias_name: [cp]}
  inputs: {tokens: [none, cp], targets: [none, cp]}
  context_parallel: $cp
YAML
    done
    fwd=0 bwd=0 uly=0
    for ((r = 0; r < n; r++)); do
        line=$("$HP" plan "$TMP/ring$n.yaml" --rank $r | grep "point to point" || true)
        f=$(echo "$line" | sed -n 's/.*forward \([0-9]*\), backward \([0-9]*\).*/\1/p')
        b=$(echo "$line" | sed -n 's/.*forward \([0-9]*\), backward \([0-9]*\).*/\2/p')
        fwd=$((fwd + ${f:-0}))
        bwd=$((bwd + ${b:-0}))
        u=$("$HP" plan "$TMP/ulysses$n.yaml" --rank $r | awk '/^  total: .* bytes received/ {print $2}')
        ufb=$("$HP" plan "$TMP/ulysses$n.yaml" --rank $r | sed -n 's/^  total: .*(forward \([0-9]*\), backward \([0-9]*\),.*/\1 \2/p')
        uly=$((uly + $(echo "$ufb" | awk '{print $1 + $2}')))
    done
    block=$((T / n * C * 4))
    min_kv=$((L * n * (n - 1) * block))           # one pass: K and V
    min_acc_ring=$((L * 2 * (n - 1) * (n - 1) * block))
    min_acc_direct=$((L * 2 * (n - 1) * block))
    python3 - "$n" "$T" "$fwd" "$bwd" "$min_kv" "$min_acc_ring" "$min_acc_direct" "$uly" <<'PY'
import json, sys
n, T, fwd, bwd, kv, acc_ring, acc_direct, uly = map(int, sys.argv[1:])
print(json.dumps({"bench": "ring_bytes", "cp": n, "context": T, "forward_bytes": fwd, "forward_min": kv,
                  "forward_ratio": round(fwd / kv, 3), "backward_bytes": bwd, "backward_min_ring": kv + acc_ring,
                  "backward_ratio_ring": round(bwd / (kv + acc_ring), 3), "backward_min_direct": kv + acc_direct,
                  "backward_ratio_direct": round(bwd / (kv + acc_direct), 3),
                  "ulysses_forward_backward_bytes": uly}))
PY
done

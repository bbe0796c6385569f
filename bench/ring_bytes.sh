#!/usr/bin/env bash
# Ring attention's point-to-point bytes against the analytic minimum (docs/benchmarks.md, "Ring
# attention"), from `hp plan` (no run): a causal Llama-family model (4 layers, width 256, 8 heads,
# batch 1, context T) with the sequence split over cp = 2, 4, 8 and strategy.context_parallel: ring,
# summed over the ranks (hp plan --rank r), forward and backward, with causal load balancing (the
# default: rank i holds chunks i and 2n - 1 - i of the sequence) and without it (ring_load_balance:
# false, the block layout). One block is B x T/n x C floats, a chunk half of one.
# Minimum, per layer, causal, one pass (K/V are recomputed backward, not kept), K and V:
#   block layout: rank r needs the blocks before its own: n(n - 1) blocks; the ring carries each
#     block exactly up to its last reader. dK, dV: the shares of the n - 1 later ranks must reach
#     each owner: (n - 1)^2 blocks a tensor accumulated around the ring, n - 1 sent straight.
#   balanced: rank r needs the 2n - 2 - r chunks before its last one but its own: 3/2 n(n - 1)
#     chunks a tensor in all (`forward_min_causal`); a ring must carry chunk j to all n - 1 other
#     ranks and chunk 2n - 1 - j (j >= 1) through the n - 1 hops to rank j - 1: (n - 1)(2n - 1)
#     chunks a tensor (`forward_min_ring`, equal to the causal one for n = 2). dK, dV accumulate
#     around the ring: (n - 1) hops of each block, block 0's as its first chunk.
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
    for cp in ring nolb ulysses; do
        algo=$cp lb=""
        [ "$cp" = nolb ] && algo=ring lb="  ring_load_balance: false"
        cat >"$TMP/$cp$n.yaml" <<YAML
model: {family: llama, vocab: 256, context: $T, layers: $L, heads: 8, kv_heads: 8, width: $C, ffn_width: 512, tied_head: true}
data: {corpus: "$PWD/data/kjv.txt", val_fraction: 0.01}
train: {steps: 1, batch: 1, checkpoint_dir: "$TMP/ck"}
strategy:
  mesh: {device_matrix: [$n], alias_name: [cp]}
  inputs: {tokens: [none, cp], targets: [none, cp]}
  context_parallel: $algo
$lb
YAML
    done
    declare -A fwd=([ring]=0 [nolb]=0) bwd=([ring]=0 [nolb]=0)
    uly=0
    for ((r = 0; r < n; r++)); do
        for cp in ring nolb; do
            line=$("$HP" plan "$TMP/$cp$n.yaml" --rank $r | grep "point to point" || true)
            f=$(echo "$line" | sed -n 's/.*forward \([0-9]*\), backward \([0-9]*\).*/\1/p')
            b=$(echo "$line" | sed -n 's/.*forward \([0-9]*\), backward \([0-9]*\).*/\2/p')
            fwd[$cp]=$((fwd[$cp] + ${f:-0}))
            bwd[$cp]=$((bwd[$cp] + ${b:-0}))
        done
        ufb=$("$HP" plan "$TMP/ulysses$n.yaml" --rank $r | sed -n 's/^  total: .*(forward \([0-9]*\), backward \([0-9]*\),.*/\1 \2/p')
        uly=$((uly + $(echo "$ufb" | awk '{print $1 + $2}')))
    done
    block=$((T / n * C * 4))
    python3 - "$n" "$T" "$L" "$block" "${fwd[ring]}" "${bwd[ring]}" "${fwd[nolb]}" "${bwd[nolb]}" "$uly" <<'PY'
import json, sys
n, T, L, block, fb, bb, fu, bu, uly = map(int, sys.argv[1:])
r = lambda a, b: round(a / b, 3)
# block layout (ring_load_balance: false)
kv = L * n * (n - 1) * block
acc_ring, acc_direct = L * 2 * (n - 1) ** 2 * block, L * 2 * (n - 1) * block
# balanced: chunks are half blocks (T divisible by 2n)
kv_causal = L * 2 * 3 * n * (n - 1) // 2 * block // 2
kv_ring = L * 2 * (n - 1) * (2 * n - 1) * block // 2
acc_bal = L * 2 * ((n - 1) ** 2 * block + (n - 1) * block // 2)
print(json.dumps({"bench": "ring_bytes", "cp": n, "context": T,
                  "balanced": {"forward_bytes": fb, "forward_min_causal": kv_causal,
                               "forward_ratio_causal": r(fb, kv_causal), "forward_min_ring": kv_ring,
                               "forward_ratio_ring": r(fb, kv_ring), "backward_bytes": bb,
                               "backward_min_ring": kv_ring + acc_bal, "backward_ratio_ring": r(bb, kv_ring + acc_bal)},
                  "block_layout": {"forward_bytes": fu, "forward_min": kv, "forward_ratio": r(fu, kv),
                                   "backward_bytes": bu, "backward_min_ring": kv + acc_ring,
                                   "backward_ratio_ring": r(bu, kv + acc_ring), "backward_min_direct": kv + acc_direct,
                                   "backward_ratio_direct": r(bu, kv + acc_direct)},
                  "ulysses_forward_backward_bytes": uly}))
PY
done

#!/usr/bin/env bash
# The cost of `hp train --trace`: paired runs of one config with and without the trace, alternating
# which goes first, each a fresh process. Prints one JSON line per run and a summary line with the
# median step time (steps 3.., from --metrics) of each mode and the ratio.
#
#   bench/trace_overhead.sh CONFIG RANKS STEPS PAIRS [HP]
#
# e.g. OMP_NUM_THREADS=2 bench/trace_overhead.sh examples/kjv.yaml 1 40 6
#      OMP_NUM_THREADS=1 bench/trace_overhead.sh examples/dp2.yaml 2 40 6
# Runs in a temporary directory whose data/ links to the tree's (as tests/run_example.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
config="$(realpath "$1")" ranks="$2" steps="$3" pairs="$4" hp="$(realpath "${5:-$root/build/hp}")"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-trace-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "$root/data" "$work/data"
cd "$work"
run() { # run MODE: one training run, prints its median step time (s) over steps 3..
    local mode="$1" args=(train "$config" --steps "$steps" --overwrite --metrics m.jsonl)
    [[ "$mode" == trace ]] && args+=(--trace t.json)
    if (( ranks > 1 )); then
        mpirun --allow-run-as-root --oversubscribe -n "$ranks" "$hp" "${args[@]}" > /dev/null 2>&1
    else
        "$hp" "${args[@]}" > /dev/null 2>&1
    fi
    python3 -c '
import json, statistics, sys
s = [json.loads(l)["step_s"] for l in open("m.jsonl")][2:]
print("%.6f" % statistics.median(s))'
}
off=() on=()
for ((i = 0; i < pairs; i++)); do
    if (( i % 2 )); then a=trace b=off; else a=off b=trace; fi
    for mode in "$a" "$b"; do
        t="$(run "$mode")"
        echo "{\"pair\": $i, \"mode\": \"$mode\", \"median_step_s\": $t}"
        if [[ "$mode" == trace ]]; then on+=("$t"); else off+=("$t"); fi
    done
done
python3 - "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
ratios = sorted(b / a for a, b in zip(off, on))
print('{"summary": true, "off_median_step_s": %.6f, "trace_median_step_s": %.6f, "off_steps_per_s": %.3f, '
      '"trace_steps_per_s": %.3f, "paired_ratio_median": %.4f, "paired_ratio_min": %.4f, "paired_ratio_max": %.4f}'
      % (statistics.median(off), statistics.median(on), 1 / statistics.median(off), 1 / statistics.median(on),
         statistics.median(ratios), ratios[0], ratios[-1]))
PY

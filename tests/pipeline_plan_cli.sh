#!/usr/bin/env bash
# `hp plan` for a pipeline (HyperMPMD, hp/pipeline_plan.h): split: auto under a group's memory
# budget, the flat-model fallback with its reason, a budget no split meets (an error naming the
# group and its line, exit status 1), the offload section inside the stages; and bench/trace_bubble.py on a hand-made trace whose bubble is
# known.
#   pipeline_plan_cli.sh HP SOURCE_DIR
set -euo pipefail
hp="$1"
src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-plan-pipe.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "pipeline_plan_cli: $*" >&2; exit 1; }

config() { # BUDGET
    cat <<YAML
model: {vocab: 4096, context: 32, layers: 6, heads: 2, width: 32}
train: {steps: 1, batch: 8}
pipeline: {schedule: 1f1b, micro_batches: 4, split: auto}
groups:
  first: {ranks: [0]}
  second:
    ranks: [1]
    memory_budget: $1
YAML
}

config 64MiB > "$work/ok.yaml"
out=$("$hp" plan "$work/ok.yaml" --calibration "$work/none.json") || fail "hp plan failed: $out"
grep -q "machine model: flat .*none.json" <<< "$out" || fail "no flat-model reason: $out"
grep -q "split: auto (cost model, flat)" <<< "$out" || fail "no auto split: $out"
grep -q "rank 1 (group second): .* of its 64.00 MiB budget" <<< "$out" || fail "no budget line: $out"
grep -q "predicted step: [0-9.]* s = schedule" <<< "$out" || fail "no prediction: $out"

config 1MiB > "$work/tight.yaml"
set +e
err=$("$hp" plan "$work/tight.yaml" --calibration "$work/none.json" 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc == 1 ]] || fail "an impossible budget exited $rc: $err"
grep -q "tight.yaml:8: groups.second.memory_budget: 1.00 MiB per rank cannot hold any split" <<< "$err" ||
    fail "the budget error does not name the group and line: $err"

# HyperOffload inside the stages: the plan shows what each stage moves under its rank's budget
# (examples/pp2_offload_disk.yaml: rank 0 keeps two micro-batches in flight, so its stage offloads
# to disk), and a budget no stage can run under is an error (exit status 1) naming the node.
out=$("$hp" plan "$src/examples/pp2_offload_disk.yaml" --calibration "$work/none.json") || fail "hp plan (offload) failed: $out"
grep -q "== offload inside the stages (activations to disk" <<< "$out" || fail "no offload section: $out"
grep -Eq "stage 0 \(rank 0, 2 micro-batches in flight\): one micro-batch's peak [0-9.]+ -> [0-9.]+ MiB, [1-9][0-9.]* MiB offloaded" <<< "$out" ||
    fail "stage 0 offloads nothing: $out"
sed 's/device_budget: .*/device_budget: 64KiB/' "$src/examples/pp2_offload_disk.yaml" > "$work/small.yaml"
grep -q "device_budget: 64KiB" "$work/small.yaml" || fail "the example has no device_budget line to change"
set +e
err=$("$hp" plan "$work/small.yaml" --calibration "$work/none.json" 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "an impossible offload budget exited $rc: $err"
grep -q "stage 0 (rank 0, 2 micro-batches in flight) cannot run under its offload budget: .*cannot hold node" <<< "$err" ||
    fail "the offload error does not name the stage and the node: $err"

# Two ranks, one step after a warm-up step: rank 0 busy 0-10 and 20-30 (F then B of mb 0), rank 1
# busy 10-20; window 0-30 us, busy 30 of 60: bubble 0.5.
cat > "$work/t.json" <<'JSON'
{"traceEvents": [
 {"name": "x", "cat": "compute", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 0, "args": {"step": 1, "stage": 0, "microbatch": 0, "phase": "F"}},
 {"name": "x", "cat": "compute", "ph": "X", "ts": 100, "dur": 4, "pid": 0, "tid": 0, "args": {"step": 2, "stage": 0, "microbatch": 0, "phase": "F"}},
 {"name": "x", "cat": "compute", "ph": "X", "ts": 106, "dur": 4, "pid": 0, "tid": 0, "args": {"step": 2, "stage": 0, "microbatch": 0, "phase": "F"}},
 {"name": "x", "cat": "compute", "ph": "X", "ts": 110, "dur": 10, "pid": 1, "tid": 0, "args": {"step": 2, "stage": 1, "microbatch": 0, "phase": "F"}},
 {"name": "x", "cat": "compute", "ph": "X", "ts": 120, "dur": 10, "pid": 0, "tid": 0, "args": {"step": 2, "stage": 0, "microbatch": 0, "phase": "B"}},
 {"name": "o", "cat": "compute", "ph": "X", "ts": 130, "dur": 50, "pid": 0, "tid": 0, "args": {"step": 2, "phase": "opt"}}
]}
JSON
line=$(python3 "$src/bench/trace_bubble.py" "$work/t.json" --skip 1)
python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["steps"] == 1 and d["ranks"] == 2, d
assert abs(d["bubble"] - 0.5) < 1e-9, d
assert d["rank0_F_ms"] == 0.01 and d["rank1_F_ms"] == 0.01 and d["rank0_B_ms"] == 0.01, d
' "$line" || fail "trace_bubble.py: $line"
echo "pipeline_plan_cli: ok"

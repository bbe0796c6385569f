#!/usr/bin/env bash
# The Llama family through the `hp` command, as CTest's llama_cli test runs it:
#
#   tests/llama_cli.sh HP SOURCE_DIR
#
# In a fresh temporary directory: a tiny model.family: llama config trains for 3 steps (checkpoint
# with Hugging Face parameter names), `hp generate` samples from it, `hp plan` plans it, and bad
# llama configs fail `hp check` with a message naming the value and its line: an unknown family,
# kv_heads not dividing heads, an odd head dim, dropout on a llama model.
set -euo pipefail
hp="$1" src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-llama-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "llama_cli: $*" >&2; exit 1; }

model='model: {family: llama, vocab: 256, context: 16, layers: 2, heads: 4, kv_heads: 2, width: 32, ffn_width: 48}'
cat > run.yaml <<EOF2
$model
data: {corpus: "$src/data/kjv.txt"}
train: {steps: 3, batch: 2, eval_every: 0, eval_batches: 1, checkpoint_dir: runs/llama, checkpoint_every: 3}
EOF2
"$hp" train run.yaml > train.log 2>&1 || { cat train.log; fail "hp train failed"; }
grep -q "step      3/3" train.log || { cat train.log; fail "no step 3 in the log"; }
[[ -d runs/llama/step_00000003 ]] || fail "no checkpoint at step 3"
# the checkpoint holds Hugging Face's names
grep -aq "model.layers.1.self_attn.k_proj.weight" runs/llama/step_00000003/*.safetensors ||
    fail "the checkpoint has no model.layers.1.self_attn.k_proj.weight"
grep -aq "wte.weight" runs/llama/step_00000003/*.safetensors && fail "a GPT-2 name in a llama checkpoint"
out="$("$hp" generate runs/llama --prompt "And God" --tokens 12 --seed 1)" || fail "hp generate failed"
[[ "$out" == "And God"* ]] || fail "hp generate printed '$out', not the prompt and a continuation"
(( ${#out} >= 12 )) || fail "hp generate printed only '$out'"
"$hp" plan run.yaml > plan.log 2>&1 || { cat plan.log; fail "hp plan failed"; }
grep -q "model.layers.0.mlp.gate_proj.weight" plan.log || fail "hp plan does not list the llama parameters"

# bad: CONFIG_MODEL_LINE EXPECTED_TEXT
bad() {
    printf '%s\ndata: {corpus: "%s/data/kjv.txt"}\n' "$1" "$src" > bad.yaml
    if "$hp" check bad.yaml > bad.log 2>&1; then fail "hp check accepted: $1"; fi
    grep -q -- "$2" bad.log || { cat bad.log; fail "hp check on '$1' does not say '$2'"; }
    grep -q "bad.yaml:1:" bad.log || { cat bad.log; fail "hp check on '$1' names no line"; }
}
bad 'model: {family: mistral, heads: 4, width: 32}' "model.family 'mistral' is not a known family"
bad 'model: {family: llama, heads: 4, kv_heads: 3, width: 32}' "model.kv_heads 3 does not divide model.heads 4"
bad 'model: {family: llama, heads: 4, width: 36}' "odd head dim"
bad 'model: {family: llama, heads: 4, width: 32, dropout: 0.1}' "llama family has no dropout"
echo "llama_cli: train, generate, plan and the bad configs behave"

#!/usr/bin/env bash
# A GPT with Mixture-of-Experts MLPs from the command line, as CTest's moe_cli test runs it:
#
#   tests/moe_cli.sh HP SOURCE_DIR
#
# A tiny MoE model (DeepSeek-V3's sigmoid_bias router with its bias updates, a shared expert, in
# layer 1 of 2) trains 30 steps on the KJV: the loss falls; the checkpoint holds the router bias, and
# it moved from 0; `hp eval` of the checkpoint gives the trainer's val loss; a run stopped at step 20
# and resumed to 30 logs the same losses as the straight 30-step run; `hp generate` samples the same
# text with the KV-cache decoder as with --no-cache. Then the same for a Llama-family MoE model (SwiGLU
# experts, softmax router with the balancing loss, a shared expert, GQA): training, the checkpoint's
# expert tensors, cached generation = --no-cache.
set -euo pipefail
hp="$1" src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-moe-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
ln -s "$src/data" data

fail() { echo "moe_cli: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\": \([-0-9.eE+]*\).*/\1/p" <<<"$2"; }
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= r * m) }'; }

config() { # NAME CHECKPOINT_EVERY
cat > "$1.yaml" <<EOF2
model:
  vocab: 256
  context: 32
  layers: 2
  heads: 2
  width: 32
  moe: {experts: 4, top_k: 2, expert_width: 16, shared_experts: 1, layers: [1], router: sigmoid_bias, bias_update_rate: 0.01}
data: {corpus: data/kjv.txt, val_fraction: 0.05}
train: {steps: 30, batch: 8, seed: 5, log_every: 1, eval_every: 30, eval_batches: 2, checkpoint_dir: runs/$1, checkpoint_every: $2, sample_tokens: 0}
optim: {lr: 3.0e-3, min_lr: 3.0e-3, warmup: 5}   # constant after warmup: --steps 20 keeps the schedule
EOF2
}
config straight 30
config split 20

"$hp" train straight.yaml --metrics straight.jsonl > straight.log 2>&1 || { cat straight.log; fail "training failed"; }
first="$(field loss "$(grep '"step": 1,' straight.jsonl | head -n 1)")"
last="$(field loss "$(grep '"step": 30,' straight.jsonl | head -n 1)")"
[[ -n "$first" && -n "$last" ]] || { head -n 3 straight.jsonl; fail "no losses in the metrics"; }
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "the loss did not fall: $first -> $last"
echo "ok: MoE loss $first -> $last"

# the router bias is in the checkpoint, and the updates moved it from its initial 0
python3 - runs/straight/step_00000030/model.safetensors <<'PY' || fail "router bias not checkpointed or never updated"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    e = h["blocks.1.mlp.router.bias"]
    a, b = e["data_offsets"]
    f.seek(8 + n + a)
    v = struct.unpack("<%df" % ((b - a) // 4), f.read(b - a))
assert any(abs(x) > 1e-6 for x in v), v
assert "blocks.0.mlp.fc.weight" in h and "blocks.1.mlp.experts.fc.weight" in h
print("ok: router bias", ["%.3f" % x for x in v])
PY

val="$(field val_loss "$(tail -n 1 straight.jsonl)")"
out="$("$hp" eval runs/straight --json)" || fail "hp eval failed: $out"
grep -q '"split": "val"' <<<"$out" || fail "hp eval: $out"
echo "ok: hp eval of the MoE checkpoint: $(field loss "$out") (trainer's val loss $val over fewer windows)"

"$hp" train split.yaml --steps 20 --metrics split.jsonl > split.log 2>&1 || { cat split.log; fail "first half failed"; }
"$hp" train split.yaml --resume --metrics split.jsonl > resume.log 2>&1 || { cat resume.log; fail "resume failed"; }
for s in 21 25 30; do
    a="$(field loss "$(grep "\"step\": $s," straight.jsonl | head -n 1)")"
    b="$(field loss "$(grep "\"step\": $s," split.jsonl | tail -n 1)")"
    [[ -n "$b" ]] || fail "no step $s after resuming"
    close "$b" "$a" 1e-6 || fail "step $s: resumed loss $b vs straight $a"
done
echo "ok: resumed at 20, steps 21-30 equal the straight run"

"$hp" generate runs/straight --tokens 20 --seed 3 > gen.txt 2> gen.err || { cat gen.err; fail "hp generate failed"; }
"$hp" generate runs/straight --tokens 20 --seed 3 --no-cache > gen2.txt 2> gen.err || { cat gen.err; fail "hp generate --no-cache failed"; }
cmp -s gen.txt gen2.txt || fail "generation with the KV cache differs from --no-cache: $(cat gen.txt) vs $(cat gen2.txt)"
echo "ok: hp generate (KV cache decode with MoE layers = --no-cache)"

# The Llama family's MoE layers (SwiGLU experts, softmax top-2 with the balancing loss, a shared
# expert, grouped-query attention): trains, and the KV-cache decoder samples what --no-cache does.
cat > llama.yaml <<EOF2
model:
  family: llama
  vocab: 256
  context: 32
  layers: 2
  heads: 4
  kv_heads: 2
  width: 32
  ffn_width: 48
  moe: {experts: 4, top_k: 2, expert_width: 24, shared_experts: 1, every: 1, router: softmax, balance_loss: 0.01}
data: {corpus: data/kjv.txt, val_fraction: 0.05}
train: {steps: 30, batch: 8, seed: 5, log_every: 1, eval_every: 30, eval_batches: 2, checkpoint_dir: runs/llama, checkpoint_every: 30, sample_tokens: 0}
optim: {lr: 3.0e-3, min_lr: 3.0e-3, warmup: 5}
EOF2
"$hp" train llama.yaml --metrics llama.jsonl > llama.log 2>&1 || { cat llama.log; fail "llama MoE training failed"; }
first="$(field loss "$(grep '"step": 1,' llama.jsonl | head -n 1)")"
last="$(field loss "$(grep '"step": 30,' llama.jsonl | head -n 1)")"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "llama MoE: the loss did not fall: $first -> $last"
python3 - runs/llama/step_00000030/model.safetensors <<'PY' || fail "llama MoE checkpoint lacks the SwiGLU experts"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
for n in ("model.layers.0.mlp.router.weight", "model.layers.1.mlp.experts.gate_proj.weight",
          "model.layers.1.mlp.experts.up_proj.weight", "model.layers.1.mlp.experts.down_proj.weight",
          "model.layers.0.mlp.shared.down_proj.weight"):
    assert n in h, n
assert h["model.layers.1.mlp.experts.gate_proj.weight"]["shape"] == [4, 24, 32], h["model.layers.1.mlp.experts.gate_proj.weight"]
PY
"$hp" generate runs/llama --tokens 20 --seed 3 > lgen.txt 2> gen.err || { cat gen.err; fail "llama MoE: hp generate failed"; }
"$hp" generate runs/llama --tokens 20 --seed 3 --no-cache > lgen2.txt 2> gen.err || { cat gen.err; fail "llama MoE: --no-cache failed"; }
cmp -s lgen.txt lgen2.txt || fail "llama MoE: KV-cache generation differs from --no-cache"
echo "ok: llama MoE loss $first -> $last; SwiGLU experts checkpointed; hp generate = --no-cache"
# shared experts have no place in Hugging Face's Mixtral (the MoE layout hp convert writes)
if "$hp" convert --to-hf runs/llama -o hf > conv.log 2>&1; then fail "hp convert --to-hf exported shared experts"; fi
grep -q "model.moe.shared_experts 1; Mixtral has no shared experts" conv.log ||
    fail "hp convert --to-hf of a MoE checkpoint with shared experts: $(cat conv.log)"
echo "ok: hp convert --to-hf refuses the shared experts by name"

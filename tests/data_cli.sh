#!/usr/bin/env bash
# The user's path through token shards, as CTest's data_cli test runs it:
#
#   tests/data_cli.sh HP SOURCE_DIR
#
# `hp data prepare` (a text file and a JSONL file, 2 threads) -> `hp data verify` -> `hp train` of a
# tiny model for 5 steps with data.shards -> `hp train --resume` to step 8, whose losses at steps 6-8
# must equal those of an uninterrupted 8-step run -> `hp generate` from the run. Then bad input: a
# shard with a flipped byte and a truncated shard stop `hp data verify` and `hp train` with a message
# naming the file; a JSONL line without "text" stops `hp data prepare` naming file and line.
set -euo pipefail
hp="$1" src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-data-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "data_cli: $*" >&2; exit 1; }

head -c 600000 "$src/data/kjv.txt" > text.txt
printf '{"text": "In the beginning was the Word.\\n"}\n{"text": "And the Word was with God."}\n' > docs.jsonl

"$hp" data prepare text.txt docs.jsonl --tokenizer bytes -o shards --shard-tokens 100000 --threads 2 \
    > prepare.log 2> prepare.err || { cat prepare.log prepare.err; fail "prepare failed"; }
grep -q '^prepared shards: ' prepare.log || { cat prepare.log; fail "prepare printed no summary"; }
grep -q '100.0%' prepare.err || { cat prepare.err; fail "prepare drew no progress bar"; }
[[ -f shards/index.json && -f shards/train_000005.bin && -f shards/val_000000.bin ]] || { ls shards; fail "missing files"; }
"$hp" data verify shards > verify.log || { cat verify.log; fail "verify failed on good shards"; }
grep -q '^ok: ' verify.log || fail "verify printed no ok line"
echo "ok: prepare + verify ($(head -n 1 prepare.log))"

config() { # config NAME: steps 8, warmup 10 (so --steps 5 leaves the learning rates of steps 1-5 alone)
    cat > "$1.yaml" <<EOF
model: {vocab: 256, context: 32, layers: 2, heads: 2, width: 32}
data: {shards: shards}
train: {steps: 8, batch: 4, seed: 7, checkpoint_dir: "runs/$1", checkpoint_every: 0, sample_tokens: 0, eval_every: 4, eval_batches: 2, log_every: 1}
optim: {warmup: 10}
EOF
}
losses() { python3 -c 'import json,sys; print(" ".join("%d:%r" % (d["step"], d["loss"]) for d in map(json.loads, open(sys.argv[1])) if "loss" in d and d["step"] > 5))' "$1"; }

config full
"$hp" train full.yaml --metrics full.jsonl > full.log 2>&1 || { cat full.log; fail "training full failed"; }
config part
"$hp" train part.yaml --steps 5 --metrics part.jsonl > part.log 2>&1 || { cat part.log; fail "training part failed"; }
"$hp" train part.yaml --resume --metrics part.jsonl > resume.log 2>&1 || { cat resume.log; fail "resume failed"; }
grep -q 'data: shards' full.log || { cat full.log; fail "the run does not name its data"; }
a="$(losses full.jsonl)" b="$(losses part.jsonl)"
[[ -n "$a" && "$a" == "$b" ]] || fail "resumed losses '$b' differ from the uninterrupted run's '$a'"
echo "ok: train 5 steps + resume to 8 = 8 steps ($a)"

out="$("$hp" generate runs/part --prompt "And God said" --tokens 16 --seed 3)" || fail "generate failed"
[[ "$out" == "And God said"* ]] || fail "generate printed '$out'"
echo "ok: generate"

# bad input
cp -r shards bad
python3 - bad/train_000001.bin <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[5000] ^= 0xFF
open(p, "wb").write(bytes(b))
EOF
if out="$("$hp" data verify bad 2>&1)"; then fail "verify passed a corrupt shard"; fi
grep -qF "bad/train_000001.bin' is corrupt: its payload's crc32 is 0x" <<<"$out" || { echo "$out"; fail "verify: wrong message"; }
sed 's/data: {shards: shards}/data: {shards: bad}/; s#runs/full#runs/bad#' full.yaml > bad.yaml
if out="$("$hp" train bad.yaml 2>&1)"; then fail "training on a corrupt shard succeeded"; fi
grep -qF "train_000001.bin' is corrupt" <<<"$out" || { echo "$out"; fail "train: wrong message for a corrupt shard"; }
echo "ok: corrupt -> $(grep -F 'corrupt' <<<"$out" | tail -n 1)"
rm -rf bad && cp -r shards bad && truncate -s 150000 bad/train_000003.bin
if out="$("$hp" train bad.yaml 2>&1)"; then fail "training on a truncated shard succeeded"; fi
grep -qF "bad/train_000003.bin' is truncated: 150000 bytes, its header says 1024 + 100000 tokens x 2 bytes = 201024" <<<"$out" \
    || { echo "$out"; fail "train: wrong message for a truncated shard"; }
echo "ok: truncated -> $(grep -F 'truncated' <<<"$out" | tail -n 1)"
printf '{"text": "fine"}\n["not", "an", "object"]\n' > bad.jsonl
if out="$("$hp" data prepare bad.jsonl --tokenizer bytes -o bad2 --quiet 2>&1)"; then fail "prepare accepted bad JSONL"; fi
grep -qF 'bad.jsonl:2: expected a JSON object with a string "text"' <<<"$out" || { echo "$out"; fail "prepare: wrong message"; }
echo "ok: bad JSONL -> $out"
echo "data_cli: all passed"

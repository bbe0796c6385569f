#!/usr/bin/env bash
# The user's path with a BPE tokenizer, end to end, as CTest's bpe_path test runs it:
#
#   tests/bpe_path.sh HP SOURCE_DIR
#
# `hp tokenizer train` (vocab 512 on 300 kB of the KJV) -> `hp data prepare --tokenizer T.json` ->
# `hp train` of a tiny model (model.vocab 512, data.shards) -> `hp generate`, which must decode BPE
# ids to text (more bytes than tokens, the prompt kept) -> `hp eval` of the run's held-out split (the
# shard set's validation split: its token and byte counts from index.json, and the same loss as
# `hp eval --data` on the split's own text) and of another file (bits per byte over the file's
# bytes, not its tokens) -> `hp plot`. Then bad input: a tokenizer of another vocabulary given to
# `hp eval`, and model.vocab smaller than the tokenizer's, each stop with a message naming the value.
set -euo pipefail
hp="$1" src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-bpe-path.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "bpe_path: $*" >&2; exit 1; }
# field NAME JSON: the number after "NAME": in a JSON line
field() { sed -n "s/.*\"$1\": \([-0-9.eE+]*\).*/\1/p" <<<"$2"; }
# close A B RTOL: |A - B| <= RTOL |B|
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= r * m) }'; }

head -c 300000 "$src/data/kjv.txt" > text.txt
tail -c 20000 "$src/data/kjv.txt" > other.txt

"$hp" tokenizer train text.txt --vocab 512 -o T.json > tok.log 2>&1 || { cat tok.log; fail "tokenizer train failed"; }
"$hp" data prepare text.txt --tokenizer T.json -o shards --val-fraction 0.05 --quiet > prep.log 2>&1 ||
    { cat prep.log; fail "data prepare failed"; }
vals="$(python3 -c 'import json; v = json.load(open("shards/index.json"))["val"]; print(v["tokens"], v["bytes"])')"
read -r val_tokens val_bytes <<<"$vals"
(( val_bytes > val_tokens && val_tokens > 100 )) || fail "val split of $val_tokens tokens, $val_bytes bytes"
tail -c "$val_bytes" text.txt > val.txt # the split is the input's last val_bytes bytes
echo "ok: tokenizer + shards (val split: $val_tokens tokens, $val_bytes bytes)"

cat > run.yaml <<EOF
model: {vocab: 512, context: 32, layers: 1, heads: 2, width: 32}
data: {shards: shards}
train: {steps: 6, batch: 4, seed: 5, checkpoint_dir: runs/bpe, checkpoint_every: 0, sample_tokens: 24, sample_prompt: "And God said", eval_every: 3, eval_batches: 2, log_every: 1}
EOF
"$hp" train run.yaml --metrics m.jsonl > train.log 2>&1 || { cat train.log; fail "training failed"; }
[[ -f runs/bpe/tokenizer.json ]] || fail "the run directory does not keep its tokenizer"
cmp -s runs/bpe/tokenizer.json T.json || fail "the run's tokenizer.json differs from T.json"
# val_bpb: the val loss over the bytes of the text of the 8 windows it scores (eval_batches 2 x batch
# 4, T = 32: targets 32w+1 .. 32w+32 of the val split), decoded here by `hp tokenizer decode`
python3 - shards/val_000000.bin > targets.txt <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()[1024:]
ids = struct.unpack("<%dH" % (len(b) // 2), b)
print("\n".join(str(i) for w in range(8) for i in ids[32 * w + 1:32 * w + 33]))
PY
wb=$("$hp" tokenizer decode --tokenizer T.json targets.txt | wc -c)
(( wb > 256 * 3 / 2 )) || fail "the val windows' 256 targets decode to $wb bytes"
last="$(grep '"val_loss"' m.jsonl | tail -n 1)"
vl="$(field val_loss "$last")" vb="$(field val_bpb "$last")"
[[ -n "$vb" ]] || fail "no val_bpb in the metrics: $last"
close "$vb" "$(awk -v l="$vl" -v b="$wb" 'BEGIN { printf "%.9f", l * 256 / (b * log(2)) }')" 1e-5 ||
    fail "val_bpb $vb is not val_loss $vl x 256 targets / ($wb bytes x ln 2)"
lb="$(sed -n 's/^step      6 | val loss [0-9.]* over 8 windows = 256 tokens (.*) | \([0-9.]*\) bits\/byte$/\1/p' train.log)"
[[ -n "$lb" ]] && close "$lb" "$vb" 1e-4 || { cat train.log; fail "the log's val line lacks $vb bits/byte"; }
echo "ok: train 6 steps on BPE shards (val $vl nats/token = $vb bits/byte over $wb bytes)"

out="$("$hp" generate runs/bpe --prompt "And God said" --tokens 40 --seed 3)" || fail "generate failed: $out"
[[ "$out" == "And God said"* ]] || fail "generate printed '$out'"
gen="${out#And God said}"
bytes=$(printf '%s' "$gen" | wc -c)
(( bytes > 40 )) || fail "40 BPE tokens decoded to $bytes bytes: '$gen' (decoded as bytes?)"
echo "ok: generate decodes BPE: 40 tokens -> $bytes bytes"

ev="$("$hp" eval runs/bpe --json)" || fail "eval of the held-out split failed: $ev"
grep -q '"split": "val", "shards": true' <<<"$ev" || fail "not the shard set's val split: $ev"
grep -q '"tokenizer": "bpe"' <<<"$ev" || fail "not evaluated with the run's BPE: $ev"
[[ "$(field tokens "$ev")" == $((val_tokens - 1)) ]] || fail "targets $(field tokens "$ev"), the val split has $val_tokens tokens"
b="$(field bytes "$ev")"
(( b < val_bytes && b > val_bytes - 20 && b > val_tokens )) ||
    fail "bytes $b: not the val split's $val_bytes bytes less its first token's"
loss="$(field loss "$ev")" bpb="$(field bpb "$ev")"
close "$bpb" "$(awk -v l="$loss" -v t=$((val_tokens - 1)) -v b="$b" 'BEGIN { printf "%.9f", l * t / (b * log(2)) }')" 1e-5 ||
    fail "bpb $bpb is not loss x tokens / (bytes x ln 2)"
txt="$("$hp" eval runs/bpe --data val.txt --json)" || fail "eval --data val.txt failed: $txt"
[[ "$(field tokens "$txt")" == "$(field tokens "$ev")" && "$(field bytes "$txt")" == "$b" ]] ||
    fail "the split's text gives other counts: $txt vs $ev"
close "$(field loss "$txt")" "$loss" 1e-9 || fail "the split's text gives loss $(field loss "$txt"), the split $loss"
echo "ok: eval of the shard val split = eval --data of its text (loss $loss, $bpb bits/byte)"

n="$("$hp" tokenizer encode --tokenizer T.json other.txt --count)"
o="$("$hp" eval runs/bpe/step_00000006 --data other.txt --json)" || fail "eval --data other.txt failed: $o"
[[ "$(field tokens "$o")" == $((n - 1)) ]] || fail "targets $(field tokens "$o"), other.txt has $n tokens"
b="$(field bytes "$o")"
(( b <= 20000 && b > 20000 - 20 && b > n )) || fail "bytes $b: not other.txt's 20000 less its first token's"
echo "ok: eval --data other.txt: $n tokens, $b bytes, $(field bpb "$o") bits/byte"

"$hp" plot m.jsonl -o curves.svg > plot.log 2>&1 || { cat plot.log; fail "plot failed"; }
grep -q '<svg' curves.svg && grep -q 'val_loss' curves.svg || fail "curves.svg lacks the svg or its val_loss series"
echo "ok: plot"

# bad input
"$hp" tokenizer train text.txt --vocab 1024 -o big.json > /dev/null 2>&1 || fail "tokenizer train (1024) failed"
if out="$("$hp" eval runs/bpe --tokenizer big.json 2>&1)"; then fail "eval accepted a tokenizer larger than the model"; fi
grep -qF "has a vocabulary of 1024, larger than the model's 512" <<<"$out" || { echo "$out"; fail "eval: wrong message"; }
if out="$("$hp" eval runs/bpe --tokenizer bytes 2>&1)"; then fail "eval read BPE shards with the bytes tokenizer"; fi
grep -qF "shard set 'shards' was tokenized by a bpe tokenizer of 512 ids, not by the bytes tokenizer of 256 ids" <<<"$out" ||
    { echo "$out"; fail "eval --tokenizer bytes: wrong message"; }
sed 's/vocab: 512/vocab: 300/; s#runs/bpe#runs/small#' run.yaml > small.yaml
if out="$("$hp" train small.yaml 2>&1)"; then fail "trained model.vocab 300 on a 512-id tokenizer"; fi
grep -qF "model.vocab must be >= 512" <<<"$out" || { echo "$out"; fail "train: wrong message for a small vocab"; }
echo "ok: bad input named"
echo "bpe_path: all passed"

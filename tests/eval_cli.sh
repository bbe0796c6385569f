#!/usr/bin/env bash
# `hp eval` on a checkpoint `hp train` wrote, as CTest's eval_cli test runs it:
#
#   tests/eval_cli.sh HP SOURCE_DIR [MPIEXEC]     with MPIEXEC also under 2 ranks
#
# A tiny model trains 10 steps on 1000 bytes of the KJV whose held-out split (129 bytes) is exactly
# the 8 windows its evaluation covers, so the training log must say it covers 100% of the split and
# `hp eval` must give the trainer's final val loss; bits per byte = loss / ln 2 (bytes tokenizer);
# 2 ranks give the same loss as 1. Bad input (a missing checkpoint, a missing, empty or too short
# --data file, bad options) exits non-zero naming the path or value.
set -euo pipefail
hp="$1" src="$2" mpiexec="${3:-}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-eval-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "eval_cli: $*" >&2; exit 1; }
# field NAME JSON: the number after "NAME": in a JSON line
field() { sed -n "s/.*\"$1\": \([-0-9.eE+]*\).*/\1/p" <<<"$2"; }
# close A B RTOL: |A - B| <= RTOL |B|
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= r * m) }'; }

head -c 1000 "$src/data/kjv.txt" > tiny.txt
head -c 600 "$src/data/kjv.txt" | tail -c 100 > text.txt
cat > tiny.yaml <<EOF
model: {vocab: 256, context: 16, layers: 1, heads: 2, width: 16}
data: {corpus: tiny.txt, val_fraction: 0.1295}
train: {steps: 10, batch: 4, seed: 3, eval_every: 5, eval_batches: 2, log_every: 5, checkpoint_dir: runs/tiny, sample_tokens: 0}
EOF
"$hp" train tiny.yaml --metrics m.jsonl > train.log 2>&1 || { cat train.log; fail "training failed"; }
grep -q "step     10 | val loss [0-9.]* over 8 windows = 128 tokens (100.0% of the val split)" train.log ||
    { cat train.log; fail "the val loss line does not state its coverage"; }
last="$(tail -n 1 m.jsonl)"
val="$(field val_loss "$last")"
[[ -n "$val" ]] || fail "no val_loss in the last metrics line: $last"
[[ "$(field val_coverage "$last")" == "1.000000" && "$(field val_tokens "$last")" == 128 ]] ||
    fail "the metrics line does not state the coverage: $last"
close "$(field val_bpb "$last")" "$(awk -v l="$val" 'BEGIN { printf "%.9f", l / log(2) }')" 1e-5 ||
    fail "val_bpb is not val_loss / ln 2 for the byte tokenizer: $last"

out="$("$hp" eval runs/tiny --json)" || fail "hp eval --json failed: $out"
[[ "$(wc -l <<<"$out")" == 1 ]] || fail "--json printed more than one line: $out"
loss="$(field loss "$out")" bpb="$(field bpb "$out")"
close "$loss" "$val" 1e-5 || fail "eval loss $loss differs from the trainer's val loss $val"
close "$bpb" "$(awk -v l="$loss" 'BEGIN { printf "%.9f", l / log(2) }')" 1e-5 || fail "bpb $bpb is not loss / ln 2 ($loss)"
[[ "$(field tokens "$out")" == 128 && "$(field bytes "$out")" == 128 && "$(field windows "$out")" == 8 ]] ||
    fail "wrong token, byte or window counts: $out"
grep -q '"split": "val"' <<<"$out" || fail "not the held-out split: $out"
echo "ok: hp eval = trainer val loss ($loss vs $val), bpb $bpb"

text="$("$hp" eval runs/tiny/step_00000010 --data text.txt --batch 3)" || fail "hp eval --data failed: $text"
grep -q "99 targets, 99 bytes, tokenizer bytes | 7 windows of 16" <<<"$text" || { echo "$text"; fail "wrong text summary"; }
grep -q "^loss [0-9.]* nats/token | perplexity [0-9.]* | [0-9.]* bits/byte$" <<<"$text" || { echo "$text"; fail "no loss line"; }
echo "ok: --data: $(tail -n 1 <<<"$text")"

if [[ -n "$mpiexec" ]]; then
    two="$("$mpiexec" --oversubscribe -n 2 "$hp" eval runs/tiny --json 2> mpi.log)" || { cat mpi.log; fail "2 ranks failed"; }
    [[ "$(wc -l <<<"$two")" == 1 ]] || fail "2 ranks printed more than one line: $two"
    close "$(field loss "$two")" "$loss" 1e-9 || fail "2 ranks: loss $(field loss "$two") vs one rank $loss"
    grep -q '"ranks": 2' <<<"$two" || fail "2 ranks: $two"
    echo "ok: 2 ranks give the same loss"
fi

# bad CASE RC NEEDLE ARGS...: hp eval ARGS exits RC and says NEEDLE
bad() {
    local what="$1" want="$2" needle="$3" out rc
    shift 3
    set +e
    out="$("$hp" eval "$@" 2>&1)"
    rc=$?
    set -e
    [[ "$rc" == "$want" ]] || { echo "$out"; fail "$what: exit $rc, want $want"; }
    grep -qF -- "$needle" <<<"$out" || { echo "$out"; fail "$what: does not say '$needle'"; }
    echo "ok: $what -> $out"
}
: > empty.txt
printf 'A' > one.txt
bad "missing checkpoint" 1 "runs/nope" runs/nope
bad "a file as checkpoint" 1 "not a directory" tiny.txt
bad "missing --data" 1 "--data file 'missing.txt': No such file" runs/tiny --data missing.txt
bad "empty --data" 1 "'empty.txt' is empty" runs/tiny --data empty.txt
bad "one-byte --data" 1 "nothing to predict" runs/tiny --data one.txt
bad "--batch 0" 2 "--batch wants an integer" runs/tiny --batch 0
bad "no checkpoint" 2 "usage: hp eval" --json
bad "unknown option" 2 "unknown option '--bogus'" runs/tiny --bogus
echo "eval_cli: all passed"

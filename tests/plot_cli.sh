#!/usr/bin/env bash
# `hp plot` on metrics files, as CTest's plot_cli test runs it:
#
#   tests/plot_cli.sh HP SOURCE_DIR
#
# Draws a real metrics file (`hp train --metrics` of a tiny model, 12 steps) overlaid with a
# hand-written one that has a resumed stretch (steps 4-5 written twice), a skipped step (loss
# null) and no learning rate (nor val_bpb: the trainer's file alone gets the bits-per-byte row). The
# SVG must be well-formed XML (xmllint, Debian's libxml2-utils)
# with an <svg> root, and hold one polyline per run and series present, with the point counts
# the files give (the resumed steps once); labels come from the file names (with the directory
# when two collide). Bad input exits non-zero naming the file (and line). When Chromium is
# installed, scripts/render-svg.sh must render the SVG to a PNG.
set -euo pipefail
hp="$1" src="$2"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-plot-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "plot_cli: $*" >&2; exit 1; }
command -v xmllint > /dev/null || fail "xmllint not found (Debian libxml2-utils; scripts/setup.sh installs it)"

head -c 20000 "$src/data/kjv.txt" > tiny.txt
cat > tiny.yaml <<EOF
model: {vocab: 256, context: 16, layers: 1, heads: 2, width: 16}
data: {corpus: tiny.txt, val_fraction: 0.1}
train: {steps: 12, batch: 4, seed: 3, eval_every: 4, eval_batches: 1, log_every: 0, checkpoint_dir: runs/tiny, sample_tokens: 0}
EOF
mkdir -p x y
"$hp" train tiny.yaml --metrics x/metrics.jsonl > train.log 2>&1 || { cat train.log; fail "training failed"; }
cat > y/metrics.jsonl <<'EOF'
{"step": 1, "loss": 5.5, "tokens_per_s": 1000.0}
{"step": 2, "loss": 5.0, "tokens_per_s": 1100.0, "val_loss": 5.1}

{"step": 3, "loss": null, "tokens_per_s": 1050.0, "skipped": true}
{"step": 4, "loss": 4.5, "tokens_per_s": 1075.0}
{"step": 5, "loss": 4.4, "tokens_per_s": 1080.0}
{"step": 4, "loss": 4.6, "tokens_per_s": 900.0, "val_loss": 4.7}
{"step": 5, "loss": 4.3, "tokens_per_s": 950.0}
{"step": 6, "loss": 4.2, "tokens_per_s": 990.0, "val_loss": 4.25}
EOF
"$hp" plot x/metrics.jsonl y/metrics.jsonl -o curves.svg 2> plot.log || { cat plot.log; fail "hp plot failed"; }
xmllint --noout curves.svg || fail "curves.svg is not well-formed XML"
[[ "$(xmllint --xpath 'local-name(/*)' curves.svg)" == svg ]] || fail "the root element is not <svg>"
# count XPATH: the number of nodes it selects
count() { xmllint --xpath "count($1)" curves.svg; }
poly() { echo "//*[local-name()='polyline'][@data-run='$1'][@data-series='$2']"; }
for s in train_loss val_loss lr tokens_per_s; do
    [[ "$(count "$(poly x/metrics "$s")")" == 1 ]] || fail "no single $s polyline for run x/metrics"
done
for s in train_loss val_loss tokens_per_s; do
    [[ "$(count "$(poly y/metrics "$s")")" == 1 ]] || fail "no single $s polyline for run y/metrics"
done
[[ "$(count "$(poly y/metrics lr)")" == 0 ]] || fail "a learning-rate line for run y/metrics, which has none"
# points: x has 12 steps and 3 evaluations; y's resumed steps 4-5 count once and step 3 has no loss
title() { xmllint --xpath "string($(poly "$1" "$2")/*[local-name()='title'])" curves.svg; }
[[ "$(title x/metrics train_loss)" == "x/metrics: train_loss, 12 points" ]] || fail "x train: $(title x/metrics train_loss)"
[[ "$(title x/metrics val_loss)" == "x/metrics: val_loss, 3 points" ]] || fail "x val: $(title x/metrics val_loss)"
[[ "$(title y/metrics train_loss)" == "y/metrics: train_loss, 5 points" ]] || fail "y train: $(title y/metrics train_loss)"
[[ "$(title y/metrics val_loss)" == "y/metrics: val_loss, 3 points" ]] || fail "y val: $(title y/metrics val_loss)"
[[ "$(title y/metrics tokens_per_s)" == "y/metrics: tokens_per_s, 6 points" ]] || fail "y tok/s: $(title y/metrics tokens_per_s)"
pts="$(xmllint --xpath "string($(poly y/metrics train_loss)/@points)" curves.svg)"
[[ "$(wc -w <<<"$pts")" == 5 ]] || fail "y train_loss has points '$pts'"
# x (the trainer's file) has val_bpb: its bits per byte against step and training time, 3 points each
for s in val_bpb val_bpb_time; do
    [[ "$(title x/metrics $s)" == "x/metrics: $s, 3 points" ]] || fail "x $s: $(title x/metrics $s)"
    [[ "$(count "$(poly y/metrics $s)")" == 0 ]] || fail "a $s line for run y/metrics, which has none"
done
# five panels (three, and the bits-per-byte row) with axis labels and a legend entry per run and line
[[ "$(count "//*[@class='panel']")" == 5 ]] || fail "not 5 panels"
for t in "Loss (cross-entropy, nats/token)" "Learning rate" "Throughput (tokens/s)" step "x/metrics train loss" \
         "y/metrics val loss" "Validation bits per byte" "training time (s, the sum of step_s)"; do
    [[ "$(count "//*[local-name()='text'][.='$t']")" -ge 1 ]] || fail "no text '$t'"
done
echo "ok: curves.svg well-formed, $(count "//*[local-name()='polyline']") polylines"

# one run: the label is the bare file name
cp y/metrics.jsonl run-b.jsonl
"$hp" plot run-b.jsonl -o one.svg 2> /dev/null || fail "hp plot of one file failed"
xmllint --noout one.svg && [[ "$(xmllint --xpath "count(//*[@data-run='run-b'])" one.svg)" == 3 ]] || fail "one.svg"
[[ "$(xmllint --xpath "count(//*[@class='panel'])" one.svg)" == 3 ]] || fail "one.svg: no val_bpb, yet not 3 panels"

# a long run: 100000 steps draw as at most 4 points per pixel column, keeping the extremes
awk 'BEGIN { for (s = 1; s <= 100000; s++) printf "{\"step\": %d, \"loss\": %.4f, \"lr\": 1e-3, \"tokens_per_s\": %d}\n", s, (s == 50000 ? 9.5 : 2 + 1 / s), 1000 + s % 7 }' > long.jsonl
"$hp" plot long.jsonl -o long.svg 2> /dev/null || fail "hp plot of 100000 steps failed"
xmllint --noout long.svg || fail "long.svg is not well-formed"
pts="$(xmllint --xpath "string(//*[local-name()='polyline'][@data-series='train_loss']/@points)" long.svg)"
n="$(wc -w <<<"$pts")"
(( n > 500 && n <= 4 * 1000 )) || fail "100000 steps drawn with $n points (want at most 4 per column)"
# the spike at step 50000 (loss 9.5, the top of the axis) survives the thinning: some point sits
# at the plot area's top margin (5% of the range below its top edge)
top="$(tr ' ' '\n' <<<"$pts" | awk -F, 'NF == 2 { if (min == "" || $2 < min) min = $2 } END { print min }')"
[[ -n "$top" ]] && awk -v t="$top" 'BEGIN { exit !(t < 150) }' || fail "the loss spike was thinned away (highest point y=$top)"
(( $(stat -c %s long.svg) < 400000 )) || fail "long.svg is $(stat -c %s long.svg) bytes"
echo "ok: 100000 steps drawn with $n points, $(stat -c %s long.svg) bytes"

bad() {
    local what="$1" want="$2" needle="$3" out rc
    shift 3
    set +e
    out="$("$hp" plot "$@" 2>&1)"
    rc=$?
    set -e
    [[ "$rc" == "$want" ]] || { echo "$out"; fail "$what: exit $rc, want $want"; }
    grep -qF -- "$needle" <<<"$out" || { echo "$out"; fail "$what: does not say '$needle'"; }
    echo "ok: $what -> $out"
}
: > empty.jsonl
printf '{"step": 1, "loss": 2}\nnot json\n' > broken.jsonl
bad "missing file" 1 "cannot open 'missing.jsonl'" missing.jsonl -o out.svg
bad "empty file" 1 "'empty.jsonl' holds no metrics lines" empty.jsonl -o out.svg
bad "a line that is not JSON" 1 "broken.jsonl:2 is not a metrics line" broken.jsonl -o out.svg
bad "no output" 2 "usage: hp plot" y/metrics.jsonl
bad "unwritable output" 1 "cannot write 'nodir/out.svg'" y/metrics.jsonl -o nodir/out.svg

if command -v chromium > /dev/null 2>&1 || command -v chromium-browser > /dev/null 2>&1; then
    bash "$src/scripts/render-svg.sh" curves.svg curves.png > /dev/null || fail "chromium did not render curves.svg"
    [[ "$(head -c 8 curves.png | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] || fail "curves.png is not a PNG"
    echo "ok: rendered by chromium ($(stat -c %s curves.png) bytes)"
else
    echo "plot_cli: chromium not installed: rendering not checked"
fi
echo "plot_cli: all passed"

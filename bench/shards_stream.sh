#!/usr/bin/env bash
# A corpus of more than 2 GiB of tokens streams with a small resident set (docs/benchmarks.md,
# "Token shards"). Too slow and too big for CI (~1 GB of text, ~2 GiB of shards on disk, minutes):
#
#   bash bench/shards_stream.sh [WORK_DIR] [REPEATS]
#
# Writes REPEATS (default 260) copies of data/kjv.txt (4,152,355 bytes each: 1.08 GB) into
# WORK_DIR/big.txt, prepares it with the byte tokenizer (uint16: 2 bytes per token, so 2.01 GiB of
# tokens) under /usr/bin/time -v, then runs bench_shards on the set under /usr/bin/time -v (opening
# with every crc32 checked, one ordered pass over the training split, 2,000 random batches of
# 64 x 1024). Prints each tool's JSON and the peak RSS /usr/bin/time reports; fails when a peak
# is 200 MiB or more. WORK_DIR (default a fresh directory under /tmp) is removed at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
hp="$root/build/hp" bench="$root/build/bench/bench_shards"
work="${1:-$(mktemp -d "${TMPDIR:-/tmp}/hp-shards-stream.XXXXXX")}" repeats="${2:-260}"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
[[ -x "$hp" && -x "$bench" ]] || { echo "build first: bash scripts/build.sh release" >&2; exit 1; }

: > "$work/big.txt"
for ((i = 0; i < repeats; i++)); do cat "$root/data/kjv.txt" >> "$work/big.txt"; done
echo "text: $(stat -c %s "$work/big.txt") bytes"

peak() { awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$1"; }

/usr/bin/time -v "$hp" data prepare "$work/big.txt" --tokenizer bytes -o "$work/set" --threads 2 --quiet \
    2> "$work/prepare.time"
echo "prepare: peak RSS $(peak "$work/prepare.time") MiB, wall $(awk -F': ' '/Elapsed/ {print $2}' "$work/prepare.time")"
rm -f "$work/big.txt" # the page cache no longer holds it either once it is gone

/usr/bin/time -v "$bench" "$work/set" 2> "$work/bench.time"
echo "bench_shards: peak RSS $(peak "$work/bench.time") MiB, wall $(awk -F': ' '/Elapsed/ {print $2}' "$work/bench.time")"
du -sh "$work/set"
for f in prepare bench; do
    p="$(peak "$work/$f.time")"
    awk -v p="$p" 'BEGIN { exit !(p < 200) }' || { echo "FAIL: $f peak RSS $p MiB >= 200 MiB" >&2; exit 1; }
done
echo "ok: both peaks under 200 MiB"

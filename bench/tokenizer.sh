#!/usr/bin/env bash
# Tokenizer speed against node peers, measured in the same run: bench/bench_tokenizer (one thread
# and all online CPUs) and scripts/tokenizer-ref/bench_peer.js (js-tiktoken, and tiktoken: OpenAI's
# Rust encoder as WebAssembly; both single-threaded), all encoding the KJV with GPT-2's vocabulary.
# Five rounds, the implementations alternating within each round; each run reports the fastest of
# 3 timed encodes after a warm-up. Prints every run, then per implementation the median MB/s of the
# five and its ratio to each peer, as JSON lines.
#
#   bench/tokenizer.sh [BUILD_DIR] [TEXT]        (defaults: build, data/kjv.txt)
#
# Needs node and the peers' packages: (cd scripts/tokenizer-ref && npm install).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
text="${2:-$root/data/kjv.txt}"
bench="$build/bench/bench_tokenizer"
peer="$root/scripts/tokenizer-ref/bench_peer.js"
[[ -x "$bench" ]] || { echo "tokenizer.sh: $bench not built (scripts/build.sh)" >&2; exit 1; }
[[ -d "$root/scripts/tokenizer-ref/node_modules/tiktoken" ]] ||
    { echo "tokenizer.sh: run (cd scripts/tokenizer-ref && npm install) first" >&2; exit 1; }
cpus="$(nproc)"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
cd "$root"
for round in 1 2 3 4 5; do
    "$bench" --text "$text" --threads 1 | tee -a "$out"
    "$bench" --text "$text" --threads "$cpus" | tee -a "$out"
    node "$peer" js-tiktoken "$text" | tee -a "$out"
    node "$peer" tiktoken "$text" | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tokens = {r["tokens"] for r in runs}
if len(tokens) != 1:
    sys.exit(f"tokenizer.sh: the implementations disagree on the token count: {sorted(tokens)}")
med = {}
for r in runs:
    key = r["impl"] if r["impl"] != "hp" else f"hp-{r['threads']}t"
    med.setdefault(key, []).append(r["mb_per_s"])
med = {k: statistics.median(v) for k, v in med.items()}
for k, v in med.items():
    print(json.dumps({"bench": "tokenizer-summary", "impl": k, "median_mb_per_s": v, "tokens": runs[0]["tokens"],
                      "ratio_to_js_tiktoken": round(v / med["js-tiktoken"], 2), "ratio_to_tiktoken_wasm": round(v / med["tiktoken"], 2)}))
PY

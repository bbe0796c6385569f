#!/usr/bin/env bash
# The BPE-vs-bytes experiment of docs/benchmarks.md ("BPE vocab 4,096 against bytes on the KJV"):
#
#   bench/bpe_vs_bytes.sh STEPS [EQUAL_TIME_STEPS]      (from the repository root, after a release build)
#
# data/kjv.txt is cut at the first line end after 95% of its bytes: the first part trains both
# models, the last part (kjv-heldout.txt) is never seen by either and scores both with
# `hp eval RUN --data kjv-heldout.txt` (bits per byte over the same bytes). A byte-level BPE of vocab
# 4,096 is trained on the train part and tokenizes it into shards. Both models have
# examples/kjv.yaml's shape and optimizer (model.vocab 256 or 4096), train STEPS steps each, and the
# BPE model trains once more for EQUAL_TIME_STEPS (chosen so its wall time matches the byte run's).
# The runs train at the same time (they share the machine and its load alike).
# Every run keeps a checkpoint each 100 steps; each is evaluated on the held-out file.
# Everything lands under runs/bvb/ (metrics, logs, checkpoints, evals as JSON lines in eval.jsonl);
# bench/bpe_vs_bytes_table.py prints the tables of docs/benchmarks.md from it.
set -euo pipefail
steps="${1:?usage: bench/bpe_vs_bytes.sh STEPS [EQUAL_TIME_STEPS]}"
eq_steps="${2:-}"
hp="${HP:-./build/hp}"
B=runs/bvb
mkdir -p "$B"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

if [[ ! -f $B/kjv-heldout.txt ]]; then
    python3 - "$B" <<'EOF'
import sys
d = sys.argv[1]
data = open("data/kjv.txt", "rb").read()
cut = data.index(b"\n", int(len(data) * 0.95)) + 1
open(d + "/kjv-train.txt", "wb").write(data[:cut])
open(d + "/kjv-heldout.txt", "wb").write(data[cut:])
EOF
fi
[[ -f $B/bpe4096.json ]] || "$hp" tokenizer train $B/kjv-train.txt --vocab 4096 -o $B/bpe4096.json
[[ -d $B/shards-bpe ]] || "$hp" data prepare $B/kjv-train.txt --tokenizer $B/bpe4096.json -o $B/shards-bpe --threads 2

# config NAME VOCAB DATA_LINE STEPS: examples/kjv.yaml with the run's vocab, data, directory, steps
# (the learning-rate schedule's length), a checkpoint each 100 steps.
config() {
    sed -e "s#vocab: 256#vocab: $2#" -e "s#^  corpus: data/kjv.txt#$3#" -e "s#checkpoint_dir: runs/kjv#checkpoint_dir: $B/$1#" \
        -e "s#steps: 1000#steps: $4#" -e "s#checkpoint_every: 500#checkpoint_every: 100#" examples/kjv.yaml > $B/$1.yaml
    [[ $2 == 256 ]] || sed -i '/val_fraction/d' $B/$1.yaml # the shards hold their own val split
}
config bytes 256 "  corpus: $B/kjv-train.txt" "$steps"
config bpe 4096 "  shards: $B/shards-bpe" "$steps"
[[ -z $eq_steps ]] || config bpe-eq 4096 "  shards: $B/shards-bpe" "$eq_steps"

# train NAME: a fresh run; the load before and after, its wall and CPU time recorded in NAME.log
train() {
    rm -rf "${B:?}/$1" "$B/$1.jsonl"
    echo "== $1: start $(uptime)" > "$B/$1.log"
    local TIMEFORMAT="== $1: wall %R s, cpu %U s user + %S s sys"
    { time "$hp" train $B/$1.yaml --metrics $B/$1.jsonl >> "$B/$1.log" 2>&1; } 2>> "$B/$1.log"
    echo "== $1: end $(uptime)" >> "$B/$1.log"
    grep '^== ' "$B/$1.log"
}
# evals NAME: every checkpoint of the run on the held-out file, one JSON line each
evals() {
    for d in $B/$1/step_*; do
        "$hp" eval "$d" --data $B/kjv-heldout.txt --json | python3 -c \
            'import json,sys; r=json.load(sys.stdin); r["run"]=sys.argv[1]; print(json.dumps(r))' "$1" >> $B/eval.jsonl
    done
}

# the runs at the same time, so they share the machine's load
runs=(bytes bpe)
train bytes &
train bpe &
if [[ -n "$eq_steps" ]]; then
    train bpe-eq &
    runs+=(bpe-eq)
fi
wait
rm -f $B/eval.jsonl
for r in "${runs[@]}"; do evals "$r"; done
"$hp" plot $B/bytes.jsonl $B/bpe.jsonl ${eq_steps:+$B/bpe-eq.jsonl} -o $B/curves.svg
python3 bench/bpe_vs_bytes_table.py $B

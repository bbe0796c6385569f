#!/usr/bin/env bash
# `hp generate` with the KV cache, as CTest's generate_cli test runs it:
#
#   tests/generate_cli.sh HP SOURCE_DIR [MPIEXEC]
#
# In a fresh temporary directory a tiny GPT-2 and a tiny Llama (GQA) train for 3 steps; then for
# each: greedy generation with the cache prints exactly what --no-cache (recomputing the window for
# every token) prints, also past the context (generation in windows); several --prompt and --batch
# give one sequence each, starting with its prompt; sampling with --top-k/--top-p is the same for
# the same seed; --stats reports tokens/s; bad options exit 2 naming the value. With MPIEXEC:
# `--strategy RUN.yaml` on 2 ranks (Megatron tp2, the KV cache split over heads) prints what one
# rank prints, greedy and sampled, for both models; a degree that does not divide kv_heads is
# refused naming the value.
set -euo pipefail
hp="$1" src="$2" mpiexec="${3:-}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-generate-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "generate_cli: $*" >&2; exit 1; }

train() { # train NAME MODEL
    cat > "$1.yaml" <<EOF2
model: $2
data: {corpus: "$src/data/kjv.txt"}
train: {steps: 3, batch: 2, eval_every: 0, eval_batches: 1, checkpoint_dir: runs/$1, checkpoint_every: 3}
EOF2
    "$hp" train "$1.yaml" > "$1.log" 2>&1 || { cat "$1.log"; fail "hp train $1 failed"; }
}
train gpt2 '{vocab: 256, context: 32, layers: 2, heads: 2, width: 32}'
train llama '{family: llama, vocab: 256, context: 32, layers: 2, heads: 4, kv_heads: 2, width: 32, ffn_width: 48}'

for m in gpt2 llama; do
    for n in 20 70; do # within the context, and past it (windows)
        "$hp" generate runs/$m --prompt "And God said" --tokens $n --temp 0 > a.txt || fail "$m: cached generate failed"
        "$hp" generate runs/$m --prompt "And God said" --tokens $n --temp 0 --no-cache > b.txt || fail "$m: --no-cache failed"
        cmp -s a.txt b.txt || fail "$m, $n tokens: cached '$(cat a.txt)' != recomputed '$(cat b.txt)'"
        [[ "$(head -c 12 a.txt)" == "And God said" ]] || fail "$m: printed '$(cat a.txt)'"
        (( $(wc -c < a.txt) == 12 + n + 1 )) || fail "$m: printed $(wc -c < a.txt) bytes, not $((12 + n + 1))"
    done
    out="$("$hp" generate runs/$m --prompt "In the" --prompt "And the earth" --batch 3 --tokens 10 --temp 0.9 \
          --top-k 20 --top-p 0.9 --seed 5)" || fail "$m: batched generate failed"
    again="$("$hp" generate runs/$m --prompt "In the" --prompt "And the earth" --batch 3 --tokens 10 --temp 0.9 \
          --top-k 20 --top-p 0.9 --seed 5 --no-cache)" || fail "$m: batched --no-cache failed"
    [[ "$out" == "$again" ]] || fail "$m: sampled cached '$out' != recomputed '$again'"
    (( $(grep -ac '^=== sequence' <<< "$out") == 3 )) || fail "$m: not 3 sequences in '$out'"
    grep -a -A1 '^=== sequence 0' <<< "$out" | tail -1 | grep -aq '^In the' || fail "$m: sequence 0 is not 'In the...'"
    grep -a -A1 '^=== sequence 1' <<< "$out" | tail -1 | grep -aq '^And the earth' || fail "$m: sequence 1 is wrong"
    grep -a -A1 '^=== sequence 2' <<< "$out" | tail -1 | grep -aq '^In the' || fail "$m: sequence 2 is wrong"
    "$hp" generate runs/$m --tokens 8 --stats > /dev/null 2> stats.log || fail "$m: --stats failed"
    grep -q "tokens/s, KV cache [0-9]* bytes" stats.log || { cat stats.log; fail "$m: no stats line"; }
done

check_usage() { # check_usage TEXT ARGS...: exit 2 and TEXT in the output
    local want="$1"; shift
    set +e; "$hp" "$@" > usage.log 2>&1; local rc=$?; set -e
    (( rc == 2 )) || { cat usage.log >&2; fail "hp $* exited $rc, not 2"; }
    grep -qF -- "$want" usage.log || { cat usage.log >&2; fail "hp $*: no '$want'"; }
}
check_usage "--top-p wants a number" generate runs/gpt2 --top-p 1.5
check_usage "--top-p wants a number" generate runs/gpt2 --top-p 0
check_usage "--batch wants an integer" generate runs/gpt2 --batch 0
check_usage "unknown option '--cache'" generate runs/gpt2 --cache

if [[ -n "$mpiexec" ]]; then
    cat > tp_gpt2.yaml <<'EOF2'
strategy:
  mesh: {device_matrix: [2], alias_name: [tp]}
  params:
    - {match: "blocks.*.attn.[qkv].weight", tensor_map: [tp, none]}
    - {match: "blocks.*.attn.[qkv].bias", tensor_map: [tp]}
    - {match: "blocks.*.mlp.fc.weight", tensor_map: [tp, none]}
    - {match: "blocks.*.mlp.fc.bias", tensor_map: [tp]}
    - {match: "blocks.*.attn.proj.weight", tensor_map: [none, tp]}
    - {match: "blocks.*.mlp.proj.weight", tensor_map: [none, tp]}
EOF2
    cat > tp_llama.yaml <<'EOF2'
strategy:
  mesh: {device_matrix: [2], alias_name: [tp]}
  params:
    - {match: "model.layers.*.self_attn.[qkv]_proj.weight", tensor_map: [tp, none]}
    - {match: "model.layers.*.mlp.[gu][ap]*_proj.weight", tensor_map: [tp, none]}
    - {match: "model.layers.*.self_attn.o_proj.weight", tensor_map: [none, tp]}
    - {match: "model.layers.*.mlp.down_proj.weight", tensor_map: [none, tp]}
EOF2
    for m in gpt2 llama; do
        for args in "--temp 0 --tokens 20" "--temp 0.9 --top-p 0.9 --seed 7 --tokens 12 --batch 3"; do
            # shellcheck disable=SC2086
            "$hp" generate runs/$m --prompt "And God said" $args > one.txt || fail "$m: one rank failed"
            # shellcheck disable=SC2086
            "$mpiexec" --oversubscribe -n 2 "$hp" generate runs/$m --prompt "And God said" $args \
                --strategy tp_$m.yaml --stats > tp.txt 2> tp.log || { cat tp.log; fail "$m: tp2 failed"; }
            cmp -s one.txt tp.txt || fail "$m ($args): tp2 printed '$(cat tp.txt)', one rank '$(cat one.txt)'"
            grep -q "bytes on this rank" tp.log || { cat tp.log; fail "$m: no stats line from rank 0"; }
        done
    done
    # llama with kv_heads 1 (multi-query) cannot split its one kv head over 2 ranks
    cat > mqa.yaml <<EOF2
model: {family: llama, vocab: 256, context: 32, layers: 1, heads: 4, kv_heads: 1, width: 32, ffn_width: 48}
data: {corpus: "$src/data/kjv.txt"}
train: {steps: 1, batch: 2, eval_every: 0, eval_batches: 1, checkpoint_dir: runs/mqa, checkpoint_every: 1}
EOF2
    "$hp" train mqa.yaml > mqa.log 2>&1 || { cat mqa.log; fail "hp train mqa failed"; }
    set +e
    "$mpiexec" --oversubscribe -n 2 "$hp" generate runs/mqa --tokens 4 --strategy tp_llama.yaml > mqa.txt 2>&1
    rc=$?
    set -e
    (( rc != 0 )) || fail "mqa on tp2 did not fail"
    grep -q "does not divide kv_heads 1" mqa.txt || { cat mqa.txt; fail "mqa on tp2: no message naming kv_heads 1"; }
    echo "generate_cli: --strategy tp2 prints what one rank prints (gpt2, llama; greedy, sampled)"
fi
echo "generate_cli: cached == recomputed for gpt2 and llama, batches, sampling, stats and bad options"

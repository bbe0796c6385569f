#!/usr/bin/env bash
# `hp convert` end to end, as CTest's hf_convert_cli test runs it:
#
#   tests/hf_convert_cli.sh HP SOURCE_DIR [MPIEXEC]
#
# The tiny Hugging Face GPT-2 of tests/data/hf/gpt2-tiny is imported into a run directory, which
# `hp ckpt verify`, `hp generate` and `hp train RUN.yaml --resume` (fresh AdamW moments: the
# checkpoint has no optimizer state; with MPIEXEC also on 2 ranks with a data-parallel strategy)
# accept; the fine-tuned run is exported with `hp convert --to-hf`, imported again and exported
# again, and the two exports' model.safetensors are the same bytes; the same for the tiny Llama and
# the tiny Mixtral (tests/data/hf/mixtral-tiny, MoE layers). Bad input exits 1 naming the path or
# value; bad usage exits 2.
set -euo pipefail
hp="$1" src="$2" mpiexec="${3:-}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-hf-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "hf_convert_cli: $*" >&2; exit 1; }

# run NAME CMD...: runs CMD, its output in NAME.log; fails the test when it fails.
run() {
    local name="$1"
    shift
    "$@" > "$name.log" 2>&1 || { cat "$name.log"; fail "'$*' failed"; }
}

# refused NAME RC NEEDLE CMD...: CMD exits with RC and its output holds NEEDLE.
refused() {
    local name="$1" want="$2" needle="$3" rc=0
    shift 3
    "$@" > "$name.log" 2>&1 || rc=$?
    [[ $rc == "$want" ]] || { cat "$name.log"; fail "'$*' exited $rc, expected $want"; }
    grep -qF -- "$needle" "$name.log" || { cat "$name.log"; fail "'$*' does not say '$needle'"; }
    echo "ok: $name -> $(tail -n 1 "$name.log")"
}

run import "$hp" convert --from-hf "$src/tests/data/hf/gpt2-tiny" -o runs/gpt2
grep -q "imported" import.log || fail "no summary line"
for f in run.yaml hf_config.json latest step_00000000/model.safetensors; do
    [[ -f runs/gpt2/$f ]] || fail "runs/gpt2/$f is missing"
done
# the tokenizer beside latest (a build that reads it) or kept aside, saying why
if [[ -f runs/gpt2/hf_tokenizer/tokenizer.json ]]; then
    grep -q "runs use bytes meanwhile" import.log || { cat import.log; fail "the tokenizer was moved aside silently"; }
    [[ ! -f runs/gpt2/tokenizer.json ]] || fail "tokenizer.json both in place and aside"
else
    [[ -f runs/gpt2/tokenizer.json ]] || fail "runs/gpt2/tokenizer.json is missing"
fi
run verify "$hp" ckpt verify runs/gpt2
grep -q "^ok: " verify.log || { cat verify.log; fail "verify printed no ok line"; }

run generate "$hp" generate runs/gpt2 --prompt "And" --tokens 8
[[ "$(head -c 3 generate.log)" == "And" ]] || { cat generate.log; fail "generate did not continue the prompt"; }

# fine-tune 2 steps from the imported checkpoint
sed -i -e "s|corpus: data/kjv.txt|corpus: \"$src/data/kjv.txt\"|" -e 's/steps: 1000/steps: 2/' -e 's/batch: 8/batch: 2/' \
    -e 's/eval_every: 100/eval_every: 0/' -e 's/checkpoint_every: 200/checkpoint_every: 1/' runs/gpt2/run.yaml
run train "$hp" train runs/gpt2/run.yaml --resume
grep -q "holds no optimizer state" train.log || { cat train.log; fail "resume did not say the moments start at zero"; }
[[ -d runs/gpt2/step_00000002 ]] || fail "no step 2 checkpoint after fine-tuning"

# export, import, export: the same bytes
run export1 "$hp" convert --to-hf runs/gpt2 -o hf1
for f in config.json model.safetensors tokenizer.json; do [[ -f hf1/$f ]] || fail "hf1/$f is missing"; done
grep -q '"model_type":[[:space:]]*"gpt2"' hf1/config.json || fail "hf1/config.json has no model_type gpt2"
run import2 "$hp" convert --from-hf hf1 -o runs/back
run export2 "$hp" convert --to-hf runs/back -o hf2
cmp hf1/model.safetensors hf2/model.safetensors || fail "export -> import -> export changed model.safetensors"
echo "ok: export -> import -> export is byte-identical"

if [[ -n "$mpiexec" ]]; then
    run import3 "$hp" convert --from-hf "$src/tests/data/hf/gpt2-tiny" -o runs/dp
    sed -i -e "s|corpus: data/kjv.txt|corpus: \"$src/data/kjv.txt\"|" -e 's/steps: 1000/steps: 1/' -e 's/batch: 8/batch: 2/' \
        -e 's/eval_every: 100/eval_every: 0/' runs/dp/run.yaml
    printf 'strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n  inputs: {tokens: [dp, none], targets: [dp, none]}\n  optimizer: {shard: [dp]}\n' >> runs/dp/run.yaml
    run train_np2 "$mpiexec" --oversubscribe -n 2 "$hp" train runs/dp/run.yaml --resume
    run verify_np2 "$hp" ckpt verify runs/dp
    echo "ok: 2-rank resume from the imported checkpoint"
fi

# the Llama family (refused with the reason by a build whose run config lacks model.family)
rc=0
"$hp" convert --from-hf "$src/tests/data/hf/llama-tiny" -o runs/llama > llama.log 2>&1 || rc=$?
if (( rc != 0 )); then
    grep -qF "llama model (model_type llama)" llama.log || { cat llama.log; fail "llama refusal does not say why"; }
    echo "ok: llama -> $(tail -n 1 llama.log)"
else
    run verify_llama "$hp" ckpt verify runs/llama
    run generate_llama "$hp" generate runs/llama --prompt "And" --tokens 4
    sed -i -e "s|corpus: data/kjv.txt|corpus: \"$src/data/kjv.txt\"|" -e 's/steps: 1000/steps: 2/' -e 's/batch: 8/batch: 2/' \
        -e 's/eval_every: 100/eval_every: 0/' runs/llama/run.yaml
    run train_llama "$hp" train runs/llama/run.yaml --resume
    run export_llama1 "$hp" convert --to-hf runs/llama -o llhf1
    grep -q '"model_type":[[:space:]]*"llama"' llhf1/config.json || fail "llhf1/config.json has no model_type llama"
    run import_llama2 "$hp" convert --from-hf llhf1 -o runs/llama2
    run export_llama2 "$hp" convert --to-hf runs/llama2 -o llhf2
    cmp llhf1/model.safetensors llhf2/model.safetensors || fail "llama export -> import -> export changed the weights"
    echo "ok: llama import, fine-tune, export -> import -> export byte-identical"
fi

# Mixtral: the Llama family with model.moe (one Hugging Face tensor per expert, stacked in ours)
run import_mixtral "$hp" convert --from-hf "$src/tests/data/hf/mixtral-tiny" -o runs/mixtral
grep -qF "4 experts of width 24 (2 per token)" import_mixtral.log || { cat import_mixtral.log; fail "the import does not describe the experts"; }
run verify_mixtral "$hp" ckpt verify runs/mixtral
run generate_mixtral "$hp" generate runs/mixtral --prompt "And" --tokens 4
sed -i -e "s|corpus: data/kjv.txt|corpus: \"$src/data/kjv.txt\"|" -e 's/steps: 1000/steps: 2/' -e 's/batch: 8/batch: 2/' \
    -e 's/eval_every: 100/eval_every: 0/' runs/mixtral/run.yaml
run train_mixtral "$hp" train runs/mixtral/run.yaml --resume
run export_mixtral1 "$hp" convert --to-hf runs/mixtral -o mxhf1
grep -q '"model_type":[[:space:]]*"mixtral"' mxhf1/config.json || fail "mxhf1/config.json has no model_type mixtral"
run import_mixtral2 "$hp" convert --from-hf mxhf1 -o runs/mixtral2
run export_mixtral2 "$hp" convert --to-hf runs/mixtral2 -o mxhf2
cmp mxhf1/model.safetensors mxhf2/model.safetensors || fail "mixtral export -> import -> export changed the weights"
echo "ok: mixtral import, fine-tune, export -> import -> export byte-identical"

refused missing 1 "nowhere/config.json" "$hp" convert --from-hf nowhere -o runs/x
refused notckpt 1 "runs/none" "$hp" convert --to-hf runs/none -o hf3
refused used 1 "already holds checkpoints" "$hp" convert --from-hf "$src/tests/data/hf/gpt2-tiny" -o runs/gpt2
mkdir -p bad && cp "$src/tests/data/hf/gpt2-tiny/"* bad/ && sed -i 's/"n_layer": 2/"n_layer": 3/' bad/config.json
refused badcfg 1 "lacks tensor 'h.2.ln_1.weight'" "$hp" convert --from-hf bad -o runs/bad
refused usage 2 "usage: hp convert" "$hp" convert --from-hf a --to-hf b -o c
refused noout 2 "usage: hp convert" "$hp" convert --from-hf a
echo "hf_convert_cli: all passed"

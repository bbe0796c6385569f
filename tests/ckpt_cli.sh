#!/usr/bin/env bash
# `hp ckpt verify` and `hp ckpt list` on checkpoints that `hp train` wrote, as CTest's ckpt_cli
# tests run it:
#
#   tests/ckpt_cli.sh HP SOURCE_DIR            one rank: the single-device format
#   tests/ckpt_cli.sh HP SOURCE_DIR 2 MPIEXEC  two ranks under MPIEXEC: the sharded format
#
# A tiny model trains for 2 steps (a checkpoint at each) in a fresh temporary directory. `verify`
# must pass on the good checkpoint and, on each damaged copy (bit flips in the length, header and
# data, truncation, edited or incomplete state.json, a missing file, files swapped between ranks),
# exit non-zero naming the file and the tensor or field at fault; `list` must show each step's
# status and which one `latest` names. (NaN and Inf weights with valid checksums: `hp ckpt verify`
# on them is run by test_ckpt_integrity, which can write such files.)
set -euo pipefail
hp="$1" src="$2" ranks="${3:-1}" mpiexec="${4:-mpirun}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-ckpt-cli.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "ckpt_cli: $*" >&2; exit 1; }

# train NAME [EXTRA_YAML]: 2 steps of a tiny model into runs/NAME (on $ranks ranks).
train() {
    local strategy=""
    if (( ranks > 1 )); then
        strategy=$'strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n  inputs: {tokens: [dp, none], targets: [dp, none]}\n  params:\n    - {match: "blocks.*.mlp.fc.weight", tensor_map: [dp, none]}\n  optimizer: {shard: [dp]}'
    fi
    cat > "$1.yaml" <<EOF
model: {vocab: 256, context: 32, layers: 2, heads: 2, width: 32}
data: {corpus: "$src/data/kjv.txt"}
train: {steps: 2, batch: 4, seed: 7, checkpoint_dir: "runs/$1", checkpoint_every: 1, sample_tokens: 0, eval_every: 0}
${2:-}
$strategy
EOF
    if (( ranks > 1 )); then
        "$mpiexec" --oversubscribe -n "$ranks" "$hp" train "$1.yaml" > "$1.log" 2>&1 || { cat "$1.log"; fail "training $1 failed"; }
    else
        "$hp" train "$1.yaml" > "$1.log" 2>&1 || { cat "$1.log"; fail "training $1 failed"; }
    fi
}

# good DIR: verify passes.
good() {
    local out
    out="$("$hp" ckpt verify "$1" 2>&1)" || { echo "$out"; fail "verify failed on the good checkpoint $1"; }
    grep -q '^ok: ' <<<"$out" || { echo "$out"; fail "verify printed no ok line for $1"; }
}

# bad WHAT DIR NEEDLE...: verify exits non-zero and its output holds every needle.
bad() {
    local what="$1" dir="$2" out needle
    shift 2
    if out="$("$hp" ckpt verify "$dir" 2>&1)"; then echo "$out"; fail "verify passed on $what"; fi
    for needle in "$@"; do
        grep -qF -- "$needle" <<<"$out" || { echo "$out"; fail "verify on $what does not say '$needle'"; }
    done
    echo "ok: $what -> $(tail -n 1 <<<"$out")"
}

# copy: bad/ becomes a copy of the good step directory.
copy() { rm -rf bad && cp -r "$step" bad; }

# flip FILE OFFSET: flips bit 3 of the byte at OFFSET (from the end when negative).
flip() {
    local size off byte
    size=$(stat -c %s "$1")
    off=$2
    (( off < 0 )) && off=$(( size + off ))
    byte=$(od -An -tu1 -j "$off" -N1 "$1" | tr -d ' ')
    printf "\\$(printf '%03o' $(( byte ^ 8 )))" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}

# data0 FILE: where a safetensors file's data starts (8 + the little-endian header length).
data0() { echo $(( 8 + $(od -An -tu8 -N8 "$1" | tr -d ' ') )); }

if (( ranks == 1 )); then
    train tiny
    step=runs/tiny/step_00000002
    good runs/tiny
    good "$step"
    out="$("$hp" ckpt list runs/tiny)" || fail "list failed on a good run"
    grep -q 'step_00000001 *ok$' <<<"$out" || { echo "$out"; fail "list: step 1 not ok"; }
    grep -q 'step_00000002 *ok (latest)$' <<<"$out" || { echo "$out"; fail "list: step 2 not ok and latest"; }

    m=bad/model.safetensors o=bad/optim.safetensors
    d=$(data0 "$step/model.safetensors")
    size=$(stat -c %s "$step/model.safetensors")
    copy; flip $m 2;                          bad "a flip in the header length" bad model.safetensors
    copy; flip $m 40;                         bad "a flip in the header" bad model.safetensors "header checksum mismatch"
    copy; flip $m $d;                         bad "a flip at the first data byte" bad model.safetensors "checksum mismatch" "tensor '"
    copy; flip $m $(( d + (size - d) / 2 ));  bad "a flip mid-data" bad model.safetensors "checksum mismatch" "tensor '"
    copy; flip $m -1;                         bad "a flip of the last byte" bad model.safetensors "checksum mismatch" "tensor 'lm_head.weight'"
    copy; flip $o -7;                         bad "a flip in the optimizer state" bad optim.safetensors "checksum mismatch"
    copy; truncate -s 1000 $o;                bad "a truncated file" bad optim.safetensors "invalid for a 1000-byte file"
    copy; truncate -s $(( size - 4 )) $m;     bad "a file cut 4 bytes short" bad model.safetensors "truncated"
    copy; rm $o;                              bad "a missing file" bad "incomplete checkpoint" optim.safetensors
    copy; sed -i 's/"width":\t32/"width":\t48/' bad/state.json
    bad "state.json with another width" bad "model.width 48, but the tensors were saved with model.width 32"
    copy; sed -i 's/"layers":\t2/"layers":\t3/' bad/state.json
    bad "state.json with another layer count" bad "model.layers 3"
    copy; sed -i 's/"heads":\t2/"heads":\t4/' bad/state.json
    bad "state.json with another head count" bad "model.heads 4"
    copy; sed -i 's/"step":\t2/"step":\t1.5/' bad/state.json
    bad "a fractional step" bad "step 1.5 is not a whole number"
    copy; sed -i 's/"step":\t2/"step":\t1/' bad/state.json
    bad "state.json of another step" bad "records step '2', but state.json is at step 1"
    copy; printf '{"format": "hyperparallel-checkpoint", "format_version": 1, "step": 2, "seed": "7"}\n' > bad/state.json
    bad "state.json without a config" bad "has no config"
    copy; rm bad/state.json;                  bad "a missing state.json" bad "incomplete checkpoint" state.json

    # list: a corrupt and an incomplete step; exit 1 once latest names a bad one.
    cp -r runs/tiny runs/mixed
    flip runs/mixed/step_00000001/model.safetensors -1
    out="$("$hp" ckpt list runs/mixed)" || { echo "$out"; fail "list failed although latest is ok"; }
    grep -q 'step_00000001 *corrupt: .*checksum mismatch' <<<"$out" || { echo "$out"; fail "list: step 1 not corrupt"; }
    grep -q 'step_00000002 *ok (latest)$' <<<"$out" || { echo "$out"; fail "list: step 2 not ok and latest"; }
    rm runs/mixed/step_00000002/optim.safetensors
    mkdir runs/mixed/.tmp-step_00000003-999
    if out="$("$hp" ckpt list runs/mixed 2>&1)"; then echo "$out"; fail "list passed with a bad latest"; fi
    grep -q 'step_00000002 *incomplete (latest): .*optim.safetensors' <<<"$out" || { echo "$out"; fail "list: step 2 not incomplete"; }
    grep -q '.tmp-step_00000003-999 *incomplete: an unfinished save' <<<"$out" || { echo "$out"; fail "list: the temp dir"; }
    echo "$out"
else
    train dp2
    step=runs/dp2/step_00000002
    good runs/dp2
    copy; (cd bad && mv optim-r00000.safetensors x && mv optim-r00001.safetensors optim-r00000.safetensors && mv x optim-r00001.safetensors)
    bad "optimizer files swapped between ranks" bad "file 'optim-r00000.safetensors' records rank '1'" "files swapped between ranks"
    copy; rm bad/model-r00001.safetensors
    bad "a missing rank file" bad "incomplete checkpoint" "rank 1's model file" model-r00001.safetensors
    copy; cp runs/dp2/step_00000001/optim-r00001.safetensors bad/
    bad "a rank file from another step" bad "'optim-r00001.safetensors' records step '1', but state.json is at step 2"
    copy; flip bad/optim-r00001.safetensors -1
    bad "a flip in rank 1's optimizer state" bad optim-r00001.safetensors "checksum mismatch"
    out="$("$hp" ckpt list runs/dp2)" || fail "list failed on a good run"
    grep -q 'step_00000002 *ok (latest)$' <<<"$out" || { echo "$out"; fail "list: step 2 not ok and latest"; }
fi
echo "ckpt_cli: all checks passed"

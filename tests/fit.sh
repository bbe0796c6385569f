#!/usr/bin/env bash
# Sizes against the machine (docs/reliability.md; CTest: fit_cli, fit_cli_np2 with MPI):
#
#   tests/fit.sh HP SOURCE_DIR [MPIEXEC]
#
#   1. a model far larger than the machine (width 2^20: about 192 TiB per rank) and a context far
#      longer than it can hold (150000 tokens) stop before step 1, within seconds and without
#      allocating (the address space is capped at 8 GiB), with the estimate and what to change;
#      the same config with --force gets past the check (--dry-run stops right after it);
#   2. with HP_MEMORY_LIMIT (what the process may have) below a run's estimate the run stops before
#      step 1 naming the limit; --force runs it; the same model with offload to the disk tier, or
#      (with MPIEXEC) FSDP over 2 ranks, fits and trains.
# Runs in a fresh temporary directory (data/ links to SOURCE_DIR/data). Exits non-zero on the first
# failure, printing what it saw.
set -euo pipefail
hp="$1" src="$2" mpiexec="${3:-}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-fit.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "$src/data" "$work/data"
cd "$work"
fail() { echo "fit: FAIL: $*" >&2; exit 1; }
expect_in() { # expect_in FILE TEXT...: every TEXT occurs in FILE
    local f="$1"; shift
    for t in "$@"; do grep -qF -- "$t" "$f" || { cat "$f" >&2; fail "'$t' not in the output of $f"; }; done
}
now() { date +%s.%N; }
elapsed_below() { awk -v a="$1" -v b="$(now)" -v s="$2" 'BEGIN { exit !(b - a < s) }'; }
no_step() { ! grep -q "^step" "$1" || { cat "$1" >&2; fail "$1: a step ran"; }; }

# ---------------------------------------------------------------- 1. larger than the machine
cat > wide.yaml <<EOF
model: {context: 16, layers: 1, heads: 1, width: 1048576}
train: {steps: 2, batch: 1, checkpoint_dir: wide}
EOF
cat > long.yaml <<EOF
model: {context: 150000, layers: 4, heads: 4, width: 256}
train: {steps: 2, batch: 8, checkpoint_dir: long}
EOF
# the address-space cap (KiB); none for an AddressSanitizer build, whose shadow memory needs terabytes
cap=8388608
if ldd "$hp" 2>/dev/null | grep -q libasan; then cap=unlimited; fi
for c in wide long; do
    t0="$(now)"
    set +e; (ulimit -v $cap; "$hp" train $c.yaml) > $c.log 2>&1; rc=$?; set -e
    elapsed_below "$t0" 10 || fail "$c: the check took more than 10 s"
    (( rc == 1 )) || { cat $c.log >&2; fail "$c: exit $rc, expected 1"; }
    no_step $c.log
    grep -q "^model:" $c.log && { cat $c.log >&2; fail "$c: the trainer was built"; }
    expect_in $c.log "hp: error: memory check: the run needs about" "of memory per rank (parameters " \
              "more than this process can have" "To fit: " "or hp train --force to run it anyway (out of memory)"
    set +e; (ulimit -v $cap; "$hp" train $c.yaml --force --dry-run) > $c-force.log 2>&1; rc=$?; set -e
    (( rc == 0 )) || { cat $c-force.log >&2; fail "$c --force --dry-run: exit $rc"; }
    expect_in $c-force.log "hp: warning: the run needs about" "(--force: running anyway)" \
              "dry run: stopping before the trainer is built"
done
expect_in wide.log " TiB of memory per rank" "a smaller model.width (now 1048576)"
[[ "$cap" == unlimited ]] || expect_in wide.log "(RLIMIT_AS/RLIMIT_DATA)"
# without the cap (the run above showed the check allocates nothing): the machine's own memory
set +e; "$hp" train wide.yaml > wide-machine.log 2>&1; rc=$?; set -e
(( rc == 1 )) || { cat wide-machine.log >&2; fail "wide without ulimit: exit $rc"; }
grep -qE "more than this process can have: [0-9.]+ [KMGT]iB \((physical memory|cgroup memory limit)" wide-machine.log ||
    { cat wide-machine.log >&2; fail "wide: the limit is not the machine's memory"; }
# the parameters dominate the wide model, the activations the long context: each advice comes first
grep -q "To fit: a strategy that shards parameters" wide.log || { cat wide.log >&2; fail "wide: advice order"; }
expect_in long.log "To fit: a smaller model.context (now 150000) or train.batch (now 8)"

# ---------------------------------------------------------------- 2. a limit, --force, offload, FSDP
model='model: {context: 32, layers: 4, heads: 4, width: 128}'
train='train: {steps: 2, batch: 4, log_every: 1, eval_every: 0, sample_tokens: 0, checkpoint_dir'
printf '%s\n%s: plain}\n' "$model" "$train" > plain.yaml
printf '%s\n%s: off}\noffload: {device_budget: 3MiB, disk_dir: offdisk, policy: {params: disk, grads: disk, optimizer: disk, activations: host}}\n' \
    "$model" "$train" > off.yaml
export HP_MEMORY_LIMIT=16M # plain: about 18.6 MiB; offload: about 11 MiB; FSDP over 2 ranks: about 15 MiB
set +e; "$hp" train plain.yaml > limit.log 2>&1; rc=$?; set -e
(( rc == 1 )) || { cat limit.log >&2; fail "plain under HP_MEMORY_LIMIT: exit $rc"; }
no_step limit.log
expect_in limit.log "more than this process can have: 16.0 MiB (HP_MEMORY_LIMIT)"
"$hp" train plain.yaml --force > forced.log 2>&1 || { cat forced.log >&2; fail "plain --force did not train"; }
expect_in forced.log "hp: warning: the run needs about" "step      2/2"
"$hp" train off.yaml > off.log 2>&1 || { cat off.log >&2; fail "the offloaded run did not train"; }
expect_in off.log "memory: about" "disk tier" "(HP_MEMORY_LIMIT)" "step      2/2"
if [[ -n "$mpiexec" ]]; then
    printf '%s\n%s: fsdp}\nstrategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n  inputs: {tokens: [dp, none], targets: [dp, none]}\n  params:\n    - {match: "*", tensor_map: [dp]}\n' \
        "$model" "$train" > fsdp.yaml
    set +e; timeout 120 "$mpiexec" -x HP_MEMORY_LIMIT --oversubscribe -n 2 "$hp" train fsdp.yaml > fsdp.log 2>&1; rc=$?; set -e
    (( rc == 0 )) || { cat fsdp.log >&2; fail "FSDP over 2 ranks under HP_MEMORY_LIMIT: exit $rc"; }
    expect_in fsdp.log "memory: about" "step      2/2"
    # a 2-rank job that does not fit stops together, the estimate reported once, without an abort
    set +e; HP_MEMORY_LIMIT=8M timeout 120 "$mpiexec" -x HP_MEMORY_LIMIT --oversubscribe -n 2 "$hp" train fsdp.yaml \
        --overwrite > fsdp-small.log 2>&1; rc=$?; set -e
    (( rc != 0 && rc != 124 )) || { cat fsdp-small.log >&2; fail "FSDP under 8M: exit $rc"; }
    [[ "$(grep -c "the run needs about" fsdp-small.log)" == 1 ]] || { cat fsdp-small.log >&2; fail "not reported once"; }
    grep -q "MPI_ABORT\|MPI_Abort" fsdp-small.log && { cat fsdp-small.log >&2; fail "the ranks did not stop together"; }
    no_step fsdp-small.log
fi
echo "fit: all checks passed"

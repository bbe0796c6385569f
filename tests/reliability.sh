#!/usr/bin/env bash
# The reliability promises of docs/reliability.md that need whole `hp` processes (CTest:
# reliability_cli, and reliability_cli_mpi with an MPI launcher):
#
#   tests/reliability.sh HP SOURCE_DIR [MPIEXEC]
#
#   1. one owner per run directory: a second `hp train` on a directory in use stops within a second,
#      naming the holder's pid, and touches none of the first run's checkpoints; after `kill -9` of
#      the first, a new run takes the directory (no stale lock) and removes .tmp-step_* debris;
#      under MPIEXEC the ranks of a second job stop together (no MPI abort);
#   2. output paths checked before step 1: a checkpoint_dir under a regular file, a --metrics path
#      in a missing directory or that is a FIFO, an offload.disk_dir under a file; a full disk for
#      the metrics file (/dev/full) is an error, not silence;
#   3. sizes and paths: a FIFO corpus fails at once (not blocks); CLI integers out of range;
#      an offload budget of 0 bytes; train.threads is what the run uses;
#   4. non-finite steps: lr 1e30 stops at step 2 naming the step, a tensor and the last good
#      checkpoint; train.skip_nonfinite skips them and the weights stay exactly the last good ones.
# Runs in a fresh temporary directory (data/ links to SOURCE_DIR/data). Exits non-zero on the
# first failure, printing what it saw.
set -euo pipefail
hp="$1" src="$2" mpiexec="${3:-}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-reliability.XXXXXX")"
first_pid=""
cleanup() {
    if [[ -n "$first_pid" ]] && kill -0 "$first_pid" 2>/dev/null; then kill -9 "$first_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
ln -s "$src/data" "$work/data"
cd "$work"
fail() { echo "reliability: FAIL: $*" >&2; exit 1; }
expect_in() { # expect_in FILE TEXT...: every TEXT occurs in FILE
    local f="$1"; shift
    for t in "$@"; do grep -qF -- "$t" "$f" || { cat "$f" >&2; fail "'$t' not in the output of $f"; }; done
}
now() { date +%s.%N; }
elapsed_below() { # elapsed_below T0 SECONDS
    awk -v a="$1" -v b="$(now)" -v s="$2" 'BEGIN { exit !(b - a < s) }'
}

tiny() { # tiny NAME DIR [EXTRA_TRAIN_KEYS] [OPTIM_KEYS]: a one-layer model config
    local extra="" optim=""
    if [[ -n "${3:-}" ]]; then extra=", $3"; fi
    if [[ -n "${4:-}" ]]; then optim="optim: {$4}"; fi
    cat > "$1" <<EOF
model: {context: 16, layers: 1, heads: 2, width: 16}
train: {steps: ${STEPS:-4}, batch: 2, log_every: 1, eval_every: 0, sample_tokens: 0, checkpoint_dir: $2,
        checkpoint_every: ${EVERY:-1}$extra}
$optim
EOF
}

# ---------------------------------------------------------------- 1. one owner per run directory
STEPS=100000000 EVERY=200 tiny long.yaml run
"$hp" train long.yaml > first.log 2>&1 &
first_pid=$!
for _ in $(seq 1 600); do [[ -e run/latest ]] || ! kill -0 "$first_pid" 2>/dev/null && break; sleep 0.1; done
[[ -e run/latest ]] || { cat first.log >&2; fail "the first run wrote no checkpoint"; }
kill -0 "$first_pid" || fail "the first run ended early"
for d in run/step_*; do echo "$d $(cat "$d"/* | md5sum)"; done > before.txt
t0="$(now)"
set +e; "$hp" train long.yaml --overwrite > second.log 2>&1; rc=$?; set -e
elapsed_below "$t0" 1.0 || fail "the second run took more than a second to stop"
(( rc != 0 )) || fail "the second run on a directory in use succeeded"
expect_in second.log "is in use by another run" "pid $first_pid" "run/.lock"
grep -q "^step" second.log && fail "the second run computed a step"
while read -r d sum; do
    [[ -d "$d" ]] || fail "the first run's $d is gone"
    [[ "$(cat "$d"/* | md5sum)" == "$sum" ]] || fail "the first run's $d changed"
done < before.txt
kill -0 "$first_pid" || fail "the first run died while the second ran"

# kill -9: the kernel drops the lock; the next run takes the directory and removes debris.
kill -9 "$first_pid"
wait "$first_pid" 2>/dev/null || true
first_pid=""
mkdir -p run/.tmp-step_00999999-12345 && echo partial > run/.tmp-step_00999999-12345/model.safetensors
STEPS=2 EVERY=1 tiny short.yaml run
"$hp" train short.yaml --overwrite > third.log 2>&1 || { cat third.log >&2; fail "a new run after kill -9 did not start"; }
expect_in third.log "removed 1 temporary step directory"
[[ ! -e run/.tmp-step_00999999-12345 ]] || fail ".tmp-step debris was not removed"
[[ "$(cat run/latest)" == "step_00000002" ]] || fail "latest is $(cat run/latest) after the new run"

# ---------------------------------------------------------------- 2. output paths before step 1
echo "I am a file" > afile
tiny under.yaml afile/run
t0="$(now)"
set +e; "$hp" train under.yaml > under.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "a checkpoint_dir under a regular file was accepted"
expect_in under.log "train.checkpoint_dir 'afile/run'" "'afile' is a regular file"
grep -q "^step\|^model:" under.log && fail "the run got past its start with a bad checkpoint_dir"
elapsed_below "$t0" 5.0 || fail "a bad checkpoint_dir took more than 5 s to report"

tiny ok.yaml okrun
set +e; "$hp" train ok.yaml --metrics no/such/dir/m.jsonl > m1.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "--metrics in a missing directory was accepted"
expect_in m1.log "--metrics 'no/such/dir/m.jsonl'" "does not exist"
grep -q "^step" m1.log && fail "a step ran before the --metrics check"
mkfifo fifo
set +e; timeout 20 "$hp" train ok.yaml --metrics fifo > m2.log 2>&1; rc=$?; set -e
(( rc != 0 && rc != 124 )) || fail "--metrics FIFO: exit $rc (124: it blocked)"
expect_in m2.log "--metrics 'fifo' is a FIFO"

cat > off.yaml <<EOF
model: {context: 16, layers: 1, heads: 2, width: 16}
train: {steps: 1, batch: 2, log_every: 1, eval_every: 0, sample_tokens: 0, checkpoint_dir: offrun}
offload: {device_budget: 64KiB, disk_dir: afile/spill, policy: {optimizer: disk}}
EOF
set +e; "$hp" train off.yaml > off.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "an offload.disk_dir under a regular file was accepted"
expect_in off.log "offload.disk_dir 'afile/spill'" "'afile' is a regular file"

# A full disk under the metrics file: an error naming it, not silence.
rm -rf okrun
set +e; "$hp" train ok.yaml --metrics /dev/full > full.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "metrics on /dev/full: exit 0"
expect_in full.log "cannot write metrics file '/dev/full' at step 1" "No space left on device"

# ---------------------------------------------------------------- 3. sizes and paths
cat > fifo.yaml <<EOF
model: {context: 16, layers: 1, heads: 2, width: 16}
data: {corpus: fifo}
train: {steps: 1, batch: 2, checkpoint_dir: fiforun}
EOF
t0="$(now)"
set +e; timeout 20 "$hp" train fifo.yaml > fifo.log 2>&1; rc=$?; set -e
(( rc != 0 && rc != 124 )) || fail "a FIFO corpus: exit $rc (124: it blocked)"
elapsed_below "$t0" 5.0 || fail "a FIFO corpus took more than 5 s to fail"
expect_in fifo.log "corpus 'fifo' is a FIFO"

# Checkpoint paths: a directory, holding regular files (a FIFO in a step directory fails, not blocks).
cp -r run/step_00000002 fifostep
rm fifostep/model.safetensors && mkfifo fifostep/model.safetensors
set +e; timeout 20 "$hp" generate fifostep --tokens 2 > ck1.log 2>&1; rc=$?; set -e
(( rc != 0 && rc != 124 )) || fail "a FIFO in a step directory: exit $rc (124: it blocked)"
expect_in ck1.log "fifostep/model.safetensors' is a FIFO"
set +e; "$hp" generate afile --tokens 2 > ck2.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "a checkpoint path that is a regular file was accepted"
expect_in ck2.log "checkpoint path 'afile' is a regular file, not a directory"

check_usage() { # check_usage TEXT ARGS...: exit 2 and TEXT in the output
    local want="$1"; shift
    set +e; "$hp" "$@" > usage.log 2>&1; local rc=$?; set -e
    (( rc == 2 )) || { cat usage.log >&2; fail "hp $* exited $rc, not 2"; }
    expect_in usage.log "$want"
}
check_usage "--ranks wants an integer in [1, 1073741824], got '4294967296'" plan "$src/examples/kjv.yaml" --ranks 4294967296
check_usage "--ranks wants an integer" plan "$src/examples/kjv.yaml" --ranks 4x
check_usage "--rank wants an integer" plan "$src/examples/kjv.yaml" --rank -1
check_usage "--rank 4 is not a rank of --ranks 4" plan "$src/examples/dp4.yaml" --ranks 4 --rank 4
check_usage "--ranks needs a value" check "$src/examples/kjv.yaml" --ranks
check_usage "--steps wants an integer in [1, 4611686018427387904], got '18446744073709551617'" \
    train ok.yaml --steps 18446744073709551617
check_usage "--steps wants an integer" train ok.yaml --steps 0
check_usage "--seed wants an integer in [0, 18446744073709551615], got '-1'" generate okrun --seed -1
check_usage "--tokens wants an integer in [0, 2147483647], got '4294967296'" generate okrun --tokens 4294967296
check_usage "--temp wants a number" generate okrun --temp nan

cat > zero.yaml <<EOF
offload:
  device_budget: 0B
EOF
set +e; "$hp" check zero.yaml > zero.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "an offload budget of 0 bytes was accepted"
expect_in zero.log "zero.yaml:2:" "offload.device_budget is 0 bytes"

tiny threads.yaml thrun "threads: 1"
OMP_NUM_THREADS=2 "$hp" train threads.yaml > threads.log 2>&1 || { cat threads.log >&2; fail "threads: 1 run failed"; }
expect_in threads.log "| threads 1"

# ---------------------------------------------------------------- 4. non-finite steps
STEPS=6 tiny nan.yaml nanrun "" "lr: 1.0e30, min_lr: 0, warmup: 0, grad_clip: 0"
set +e; "$hp" train nan.yaml > nan.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "a NaN loss (grad_clip 0) ran to the end and exited 0"
expect_in nan.log "step 2 is not finite" "first non-finite tensor: gradient of '" \
    "the last good checkpoint is 'nanrun/step_00000001'"
grep -q "node [0-9]" nan.log && fail "the message names an internal node"
[[ "$(cat nanrun/latest)" == "step_00000001" ]] || fail "latest moved past the last good step"
STEPS=6 tiny nanclip.yaml nanclip "" "lr: 1.0e30, min_lr: 0, warmup: 0, grad_clip: 1.0"
set +e; "$hp" train nanclip.yaml > nanclip.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "a NaN loss (grad_clip 1) exited 0"
expect_in nanclip.log "step 2 is not finite" "first non-finite tensor: " "nanclip/step_00000001"
grep -q "clip_scale" nanclip.log && fail "the message names clip_scale"

# skip_nonfinite: steps 2 and 3 skipped (counted in the metrics), step 4 is the third in a row and stops.
STEPS=6 tiny skip.yaml skiprun "skip_nonfinite: 2" "lr: 1.0e30, min_lr: 0, warmup: 0, grad_clip: 0"
set +e; "$hp" train skip.yaml --metrics skip.jsonl > skip.log 2>&1; rc=$?; set -e
(( rc != 0 )) || fail "skip_nonfinite 2 with every step non-finite exited 0"
expect_in skip.log "step      2 | skipped" "step      3 | skipped" "step 4 is not finite" "3 non-finite steps in a row"
[[ "$(grep -c '"skipped": true' skip.jsonl)" == 2 ]] || { cat skip.jsonl >&2; fail "metrics do not count 2 skipped steps"; }
expect_in skip.jsonl '"skipped_steps": 2'
# The skipped steps' checkpoints hold exactly the weights and moments of the last good step: the
# tensor bytes after each safetensors header (the header's metadata names the step) are equal.
tensor_bytes() { local n; n=$(od -An -t u8 -N8 "$1" | tr -d ' '); tail -c +$((9 + n)) "$1" | md5sum; }
for f in model.safetensors optim.safetensors; do
    for s in 2 3; do
        [[ "$(tensor_bytes "skiprun/step_00000001/$f")" == "$(tensor_bytes "skiprun/step_0000000$s/$f")" ]] ||
            fail "the tensors of $f of skipped step $s differ from step 1's"
    done
done

# ---------------------------------------------------------------- under mpirun: a second job stops together
if [[ -n "$mpiexec" ]]; then
    cat > dp2.yaml <<EOF
model: {context: 16, layers: 1, heads: 2, width: 16}
train: {steps: 100000000, batch: 4, log_every: 0, eval_every: 0, sample_tokens: 0, checkpoint_dir: run,
        checkpoint_every: 200}
strategy:
  mesh: {device_matrix: [2], alias_name: [dp]}
  inputs: {tokens: [dp, none], targets: [dp, none]}
EOF
    "$hp" train long.yaml --overwrite > first.log 2>&1 &   # a one-rank run holds directory run/
    first_pid=$!
    for _ in $(seq 1 600); do grep -q "^step" first.log || ! kill -0 "$first_pid" 2>/dev/null && break; sleep 0.1; done
    kill -0 "$first_pid" || { cat first.log >&2; fail "mpirun: the one-rank run holding the directory ended"; }
    set +e; timeout 120 "$mpiexec" --oversubscribe -n 2 "$hp" train dp2.yaml --overwrite > mpi.log 2>&1; rc=$?; set -e
    (( rc != 0 && rc != 124 )) || { cat mpi.log >&2; fail "mpirun: a second job on a directory in use exited $rc"; }
    expect_in mpi.log "is in use by another run" "pid $first_pid"
    grep -q "MPI_ABORT\|MPI_Abort" mpi.log && { cat mpi.log >&2; fail "mpirun: the ranks did not stop together"; }
    kill -9 "$first_pid"; wait "$first_pid" 2>/dev/null || true; first_pid=""
    # a non-finite step under dp: every rank sees it, all stop together, rank 0 reports it once
    cat > nandp2.yaml <<EOF
model: {context: 16, layers: 1, heads: 2, width: 16}
train: {steps: 6, batch: 4, log_every: 1, eval_every: 0, sample_tokens: 0, checkpoint_dir: nandp2}
optim: {lr: 1.0e30, min_lr: 0, warmup: 0, grad_clip: 0}
strategy:
  mesh: {device_matrix: [2], alias_name: [dp]}
  inputs: {tokens: [dp, none], targets: [dp, none]}
EOF
    set +e; timeout 120 "$mpiexec" --oversubscribe -n 2 "$hp" train nandp2.yaml > mpinan.log 2>&1; rc=$?; set -e
    (( rc != 0 && rc != 124 )) || { cat mpinan.log >&2; fail "mpirun: a NaN run exited $rc"; }
    expect_in mpinan.log "[rank 0] hp: error: training step: step 2 is not finite" "gradient of '"
    [[ "$(grep -c "is not finite" mpinan.log)" == 1 ]] || { cat mpinan.log >&2; fail "mpirun: not reported once"; }
    grep -q "MPI_ABORT\|MPI_Abort" mpinan.log && { cat mpinan.log >&2; fail "mpirun: the NaN stop aborted"; }
fi
echo "reliability: all checks passed"

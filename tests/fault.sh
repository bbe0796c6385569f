#!/usr/bin/env bash
# A rank of a group that dies or fails ends the job fast, with its name (docs/reliability.md,
# Faults; CTest: fault_cli_np3):
#
#   tests/fault.sh HP SOURCE_DIR MPIEXEC
#
# `hp train` of a 3-rank pipeline (stage0 on rank 0, stage1 on ranks 1 and 2 as data-parallel
# replicas) with train.comm_timeout: 120 under MPIEXEC, checkpointing every 5 steps:
#   1. once a checkpoint is written, world rank 0 (the only rank of group stage0) is killed (SIGKILL);
#   2. the same with world rank 2 (rank 1 of group stage1);
#   3. rank 0 fails on its own (--metrics /dev/full: it cannot write step 1's line).
# Then the groups of issue 15, a rank of each group killed once the job is training:
#   4. `hp train` of the multimodal model as concurrent sub-models (encoder groups image_light on
#      rank 0 and image_heavy on rank 1, the decoder's group text on rank 2);
#   5. `hp rl` with the learner on ranks 0-1 (FSDP) and the actor on rank 2 (disjoint).
# Each time the whole job must end within 10 s (well before the timeout: no rank waits for it), exit
# non-zero, leave no process behind, and a surviving rank must say which rank of which group is gone
# or failed (with the failed rank's own message in case 3); in cases 1 and 2 the run's latest
# checkpoint still loads (`hp generate RUN`).
set -euo pipefail
hp="$1" src="$2" mpiexec="$3"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-fault.XXXXXX")"
job=""
cleanup() {
    # mpirun ends its ranks when it is terminated
    if [[ -n "$job" ]] && kill -0 "$job" 2>/dev/null; then kill -TERM "$job" 2>/dev/null || true; sleep 2; fi
    if [[ -n "$job" ]] && kill -0 "$job" 2>/dev/null; then kill -9 "$job" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
ln -s "$src/data" "$work/data"
cd "$work"
fail() { echo "fault: FAIL: $*" >&2; exit 1; }
now() { date +%s.%N; }

cat > pp.yaml <<EOF
model: {vocab: 256, context: 16, layers: 2, heads: 2, width: 16, tied_head: false}
data: {corpus: data/kjv.txt, val_fraction: 0.05}
train: {steps: 100000000, batch: 4, seed: 1, log_every: 1, eval_every: 0, sample_tokens: 0, checkpoint_dir: run,
        checkpoint_every: 5, comm_timeout: 120}
pipeline: {schedule: 1f1b, micro_batches: 2}
groups:
  stage0: {kind: stage, ranks: [0], module: [embedding, blocks.0]}
  stage1: {kind: stage, ranks: [1, 2], module: [blocks.1, head], mesh: {device_matrix: [2], alias_name: [dp]}}
EOF

cat > mm.yaml <<EOF
model:
  family: multimodal
  layers: 1
  heads: 2
  width: 16
  multimodal: {patch_a: 7, layers_a: 1, width_a: 16, patch_b: 4, layers_b: 1, width_b: 16, train_images: 512,
               test_images: 10}
train: {steps: 100000000, batch: 8, seed: 1, log_every: 1, checkpoint_dir: run, comm_timeout: 120}
pipeline: {micro_batches: 2}
groups:
  image_light: {kind: encoder, ranks: [0]}
  image_heavy: {kind: encoder, ranks: [1]}
  text: {kind: fusion, ranks: [2]}
EOF

cat > rl.yaml <<EOF
model: {vocab: 256, context: 12, layers: 1, heads: 2, width: 16}
train: {seed: 2, comm_timeout: 120}
groups:
  learner:
    kind: learner
    ranks: [0, 1]
    mesh: {device_matrix: [2], alias_name: [fsdp]}
    strategy:
      inputs: {tokens: [fsdp, none], targets: [fsdp, none]}
      params: [{match: "*", tensor_map: [fsdp]}]
  actor: {kind: actor, ranks: [2]}
rl: {task: reverse, digits: [3, 3], prompts: 4, group_size: 4, steps: 100000000, sft_steps: 2, sft_batch: 8,
     off_policy: 1, eval_prompts: 8}
EOF

# start LOG [EXTRA ARGS]: the job in the background, $job its mpirun; $what: the command and its
# config
what="train $work/pp.yaml"
start() {
    local log="$1"
    shift
    rm -rf run
    # shellcheck disable=SC2086
    "$mpiexec" --oversubscribe -n 3 "$hp" $what "$@" > "$log" 2>&1 &
    job=$!
}

# finish LOG T0: waits for the job to end within 10 s of T0, checks its exit status and that no
# process is left
finish() {
    local log="$1" t0="$2" t1 rc
    for _ in $(seq 1 150); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then cat "$log" >&2; fail "$log: the job still runs 15 s after the fault"; fi
    t1="$(now)"
    set +e; wait "$job"; rc=$?; set -e
    job=""
    echo "fault: $log: the job ended $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s after the fault (exit $rc)"
    awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 10) }' || { cat "$log" >&2; fail "$log: the job took 10 s or more to end"; }
    (( rc != 0 )) || { cat "$log" >&2; fail "$log: the job exited 0"; }
    sleep 0.5
    if pgrep -f "$what" > /dev/null; then fail "$log: a rank outlived the job"; fi
}

expect_in() {
    local log="$1"
    shift
    for t in "$@"; do grep -qF -- "$t" "$log" || { cat "$log" >&2; fail "$log: '$t' not in the job's output"; }; done
}

# kill_case LOG WORLD_RANK LABEL [READY]: kills world rank WORLD_RANK once a line of the job's
# output matches READY (default: a checkpoint written, which must then still load)
kill_case() {
    local log="$1" victim="$2" label="$3" ready="${4:-checkpoint run/step}" pid="" t0
    start "$log"
    for _ in $(seq 1 600); do grep -q "$ready" "$log" || ! kill -0 "$job" 2>/dev/null && break; sleep 0.1; done
    grep -q "$ready" "$log" || { cat "$log" >&2; fail "$log: no line '$ready' from the job"; }
    for p in $(pgrep -f "$what"); do
        r="$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')"
        if [[ "$r" == "$victim" ]]; then pid="$p"; fi
    done
    [[ -n "$pid" ]] || fail "$log: cannot find world rank $victim's process"
    kill -9 "$pid"
    t0="$(now)"
    finish "$log" "$t0"
    expect_in "$log" "world rank $victim ($label) is gone: its process $pid on host" "(it exited or was killed)" \
        "hp: a rank of the job failed or is gone: ending the job"
    # the last checkpoint is whole: it loads and generates
    if [[ "$ready" == "checkpoint run/step" ]]; then
        "$hp" generate run --tokens 4 > gen.log 2>&1 || { cat gen.log >&2; fail "$log: the latest checkpoint does not load"; }
    fi
}

kill_case kill_stage0.log 0 "rank 0 of group 'stage0'"
kill_case kill_stage1.log 2 "rank 1 of group 'stage1'"

# 3. rank 0 fails: the others stop with its message
start fail.log --metrics /dev/full
t0="$(now)"
for _ in $(seq 1 600); do grep -q "cannot write metrics" fail.log || ! kill -0 "$job" 2>/dev/null && break; sleep 0.1; done
t0="$(now)"
finish fail.log "$t0"
expect_in fail.log "[rank 0] hp: error: cannot write metrics file '/dev/full' at step 1" \
    "world rank 0 (rank 0 of group 'stage0') failed: cannot write metrics file '/dev/full' at step 1: No space left on device"

# 4. the multimodal groups (nothing is saved before the end of training, so no checkpoint check)
what="train $work/mm.yaml"
kill_case kill_mm0.log 0 "rank 0 of group 'image_light'" "^step 3/"
kill_case kill_mm1.log 1 "rank 0 of group 'image_heavy'" "^step 3/"
kill_case kill_mm2.log 2 "rank 0 of group 'text'" "^step 3/"

# 5. RL: a learner rank and the actor
what="rl $work/rl.yaml"
kill_case kill_rl_learner.log 1 "rank 1 of group 'learner'" "^step  *3 "
kill_case kill_rl_actor.log 2 "rank 0 of group 'actor'" "^step  *3 "
echo "fault: all checks passed"

#!/usr/bin/env bash
# `hp train` with post-validated pipeline steps (pipeline.post_validate: true; hp_trainer_step_post)
# under mpirun -n 2, ZB-V over two stages: the metrics file has every step once and in order with
# the synchronous run's loss, gradient norm and validation losses (evaluation and checkpoints after
# steps 3 and 6 settle the step first); a clip every norm exceeds marks every step "redone" and
# still gives the synchronous numbers; a resume from the post-validated run's step-3 checkpoint
# continues with the same losses; `hp plan` says what post_validate changes.
#   pipeline_post_cli.sh HP SOURCE_DIR MPIEXEC
set -euo pipefail
hp="$1" src="$2" mpiexec="$3"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-pp-post.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "$src/data" "$work/data"
cd "$work"
fail() { echo "pipeline_post_cli: $*" >&2; exit 1; }

config() { # POST CLIP DIR
    cat <<YAML
model: {vocab: 256, context: 32, layers: 4, heads: 4, width: 32}
data: {corpus: data/kjv.txt, val_fraction: 0.05}
train: {steps: 6, batch: 8, seed: 2, log_every: 1, eval_every: 3, eval_batches: 2, checkpoint_dir: $3,
        checkpoint_every: 3, sample_tokens: 0}
optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 2, weight_decay: 0.1, grad_clip: $2}
pipeline: {schedule: zb-v, micro_batches: 4, split: auto, post_validate: $1}
groups:
  first: {ranks: [0]}
  second: {ranks: [1]}
YAML
}

train() { # NAME [ARGS...]
    local name="$1"
    shift
    "$mpiexec" --oversubscribe -n 2 "$hp" train "$name.yaml" --metrics "$name.jsonl" "$@" > "$name.log" 2>&1 ||
        { cat "$name.log" >&2; fail "hp train $name.yaml failed"; }
}

# the fields that must match, one line per step: step loss lr grad_norm val_loss
fields() {
    python3 -c '
import json, sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    print(m["step"], m["loss"], m["lr"], m["grad_norm"], m.get("val_loss"), m.get("redone", False))' "$1"
}

config false 100.0 sync > sync.yaml
config true 100.0 post > post.yaml
config false 1.0e-3 sync_clip > sync_clip.yaml
config true 1.0e-3 post_clip > post_clip.yaml
for name in sync post sync_clip post_clip; do train "$name" --overwrite; done
"$hp" plan post.yaml --calibration none.json | grep -q "post_validate: consecutive steps overlap" ||
    fail "hp plan does not tell what post_validate changes"

[[ "$(fields post.jsonl | cut -d' ' -f1 | tr '\n' ' ')" == "1 2 3 4 5 6 " ]] ||
    fail "post-validated steps reported as: $(fields post.jsonl | cut -d' ' -f1 | tr '\n' ' ')"
diff <(fields sync.jsonl) <(fields post.jsonl) || fail "post-validated metrics differ from the synchronous run's"
grep -q "val_loss" <(sed -n 3p post.jsonl) || fail "no validation loss after step 3"
[[ -d post/step_00000003 && -d post/step_00000006 ]] || fail "no checkpoints at steps 3 and 6: $(ls post)"
! grep -q "redone" post.jsonl || fail "a step was redone under a clip of 100"

# every step redone: the flag differs, the numbers do not
diff <(fields sync_clip.jsonl | cut -d' ' -f1-5) <(fields post_clip.jsonl | cut -d' ' -f1-5) ||
    fail "post-validated metrics under the clip differ from the synchronous run's"
[[ $(grep -c '"redone": true' post_clip.jsonl) == 6 ]] || fail "not every step was redone under a clip of 1e-3"
grep -q "post-validation: the check failed (the clip scales)" post_clip.log || fail "no redone line in the log"

# resume the post-validated run at step 3 (a copy of its checkpoint): steps 4-6 as before
mkdir resumed
cp -r post/step_00000003 resumed/
echo step_00000003 > resumed/latest
config true 100.0 resumed > resumed.yaml
train resumed --resume
diff <(fields post.jsonl | sed -n 4,6p) <(fields resumed.jsonl) || fail "the resumed post-validated run differs"
echo "pipeline_post_cli: post-validated hp train steps are the synchronous ones"

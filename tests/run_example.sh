#!/usr/bin/env bash
# Runs one examples/*.yaml for 2 steps, as CTest's example_* tests do:
#
#   tests/run_example.sh HP SOURCE_DIR CONFIG RANKS [MPIEXEC]
#
# The run happens in a fresh temporary directory whose data/ links to SOURCE_DIR/data, so the
# config is used exactly as written (corpus data/kjv.txt) while its checkpoint_dir (runs/NAME)
# lands in the temporary directory: runs never collide and nothing is left in the tree. With
# RANKS > 1 it runs under MPIEXEC (mpirun) with that many ranks. Fails when `hp train` fails or
# writes no checkpoint.
# A HyperMPMD config (a top-level `groups:` section) is also checked with `hp check --ranks RANKS`.
# An RL config (a top-level `rl:` section) runs `hp rl --steps 2 --verify-sync` instead.
set -euo pipefail
hp="$1" src="$2" config="$3" ranks="$4" mpiexec="${5:-mpirun}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-example.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "$src/data" "$work/data"
cd "$work"
train() {
    if (( ranks > 1 )); then
        "$mpiexec" --oversubscribe -n "$ranks" "$hp" train "$config" --steps 2
    else
        "$hp" train "$config" --steps 2
    fi
}
if grep -q '^groups:' "$config"; then
    "$hp" check "$config" --ranks "$ranks"
fi
if grep -q '^rl:' "$config"; then # a GRPO job (hp rl): 2 steps, no checkpoint
    if (( ranks > 1 )); then
        "$mpiexec" --oversubscribe -n "$ranks" "$hp" rl "$config" --steps 2 --verify-sync
    else
        "$hp" rl "$config" --steps 2 --verify-sync
    fi
    exit 0
fi
train
if ! compgen -G "runs/*/*" > /dev/null; then
    echo "run_example: $config wrote no checkpoint under runs/" >&2
    exit 1
fi

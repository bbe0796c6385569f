#!/usr/bin/env bash
# Predicted against measured step time on this machine, for the single-rank run and for DP, TP and
# FSDP over 2 and 4 ranks (docs/benchmarks.md, "Cost model"). For each configuration,
# bench_costmodel calibrates in the same processes (hp/calibrate.h), predicts the step as `hp plan`
# does and trains; --pairs times, one JSON line per pair and one with the median ratio.
#
#   bench/costmodel.sh [BUILD_DIR] [PAIRS] [STEPS]
#
# The 2-rank configurations are examples/{dp4,tp4,fsdp4}.yaml with their mesh [4] made [2]. Ranks
# take the thread count mpirun gives them unless OMP_NUM_THREADS is set (on 2 cores: 1 thread each
# with 2 ranks, bound to a core; 2 each with 4 ranks, oversubscribed). With HP_BENCH_QUIET=1 each
# configuration, and each pair in it, waits (up to 5 minutes) until the machine is quiet: a machine
# shared with other work changes the speed of both sides of the ratio. HP_BENCH_ONLY="kjv tp2" runs
# a subset; the names ending in t1 are the 4-rank runs with OMP_NUM_THREADS=1. OMP_WAIT_POLICY
# defaults to PASSIVE, as in the other benchmarks here.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
pairs="${2:-3}"
steps="${3:-20}"
bench="$build/bench/bench_costmodel"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-costmodel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "${HP_DATA_DIR:-$root/data}" "$work/data" # the corpus (data/kjv.txt)
for c in dp tp fsdp; do
    sed -e 's/device_matrix: \[4\]/device_matrix: [2]/' "$root/examples/${c}4.yaml" > "$work/${c}2.yaml"
done
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" # the setting this shared machine's benchmarks use

idle() { # idle fraction of all CPUs over 3 seconds
    local a b
    read -r _ u n s i w x y z _ < /proc/stat; a=$((u + n + s + i + w + x + y + z)); b=$((i + w))
    sleep 3
    read -r _ u n s i w x y z _ < /proc/stat
    echo $(( 100 * (i + w - b) / (u + n + s + i + w + x + y + z - a) ))
}
quiet() {
    [[ "${HP_BENCH_QUIET:-0}" == 1 ]] || return 0
    for _ in $(seq 100); do (( $(idle) >= 90 )) && return 0; done
    return 0
}

run() { # RANKS CONFIG NAME [THREADS]
    quiet
    local env=()
    [[ -n "${4:-}" ]] && env=(env OMP_NUM_THREADS="$4")
    if (( $1 == 1 )); then
        "${env[@]}" "$bench" "$2" --calibrate --calibration "$work/cal.json" --pairs "$pairs" --steps "$steps" \
            --name "$3" $waitq
    else
        "${env[@]}" mpirun --oversubscribe -n "$1" "$bench" "$2" --calibrate --calibration "$work/cal.json" \
            --pairs "$pairs" --steps "$steps" --name "$3" $waitq
    fi
}

waitq=""
[[ "${HP_BENCH_QUIET:-0}" == 1 ]] && waitq="--wait-quiet 300"
only="${HP_BENCH_ONLY:-}" # a space-separated subset of the names below
want() { [[ -z "$only" || " $only " == *" $1 "* ]]; }
want kjv && run 1 "$root/examples/kjv.yaml" kjv
want dp2 && run 2 dp2.yaml dp2
want tp2 && run 2 tp2.yaml tp2
want fsdp2 && run 2 fsdp2.yaml fsdp2
want dp4 && run 4 "$root/examples/dp4.yaml" dp4
want tp4 && run 4 "$root/examples/tp4.yaml" tp4
want fsdp4 && run 4 "$root/examples/fsdp4.yaml" fsdp4
# 4 ranks on 2 cores with one thread each (the sensible setting there; the default gives each 2)
want dp4t1 && run 4 "$root/examples/dp4.yaml" dp4t1 1
want tp4t1 && run 4 "$root/examples/tp4.yaml" tp4t1 1
want fsdp4t1 && run 4 "$root/examples/fsdp4.yaml" fsdp4t1 1
exit 0

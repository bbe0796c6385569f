#!/usr/bin/env bash
# Paired, alternating before/after benchmark (docs/benchmarks.md): bench_train config A (3 pairs)
# and B (2 pairs), then `mpirun -n 2 bench_shard --steps 3` (3 pairs). BASE holds the "before"
# build's bench/ directory, NEW the "after" one; run from the repository root (bench_train reads
# data/). Prints "## CONFIG before|after ROUND" then each run's JSON lines.
#   BASE=/tmp/base/build/bench NEW=build/bench bash scripts/bench-ab.sh > ab.log
set -u
BASE=${BASE:-/tmp/base/build/bench}
NEW=${NEW:-build/bench}
export OMP_WAIT_POLICY=PASSIVE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for i in 1 2 3; do
  for v in base new; do
    d=$BASE; [ $v = new ] && d=$NEW
    echo "## A $v $i"; OMP_NUM_THREADS=2 $d/bench_train --config A --steps 20 2>&1 | tail -2
  done
done
for i in 1 2; do
  for v in base new; do
    d=$BASE; [ $v = new ] && d=$NEW
    echo "## B $v $i"; OMP_NUM_THREADS=2 $d/bench_train --config B --warmup 1 --steps 3 2>&1 | tail -2
  done
done
for i in 1 2 3; do
  for v in base new; do
    d=$BASE; [ $v = new ] && d=$NEW
    echo "## S $v $i"; OMP_NUM_THREADS=1 mpirun -n 2 $d/bench_shard --steps 3 2>&1 | grep '^{'
  done
done

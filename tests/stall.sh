#!/usr/bin/env bash
# A stalled rank ends the job with its cause (docs/reliability.md, Stalls; CTest: stall_cli_np2):
#
#   tests/stall.sh HP SOURCE_DIR MPIEXEC
#
# `hp train` of a 2-rank data-parallel run with train.comm_timeout: 3 under MPIEXEC; once it is
# stepping, rank 1 is stopped (SIGSTOP) and never continued. The job must end by itself within the
# timeout + a few seconds (the test allows 12 s), exit non-zero, and rank 0's message must name the
# operation (an all-reduce with its bytes), the group and rank 1 as the rank that did not arrive;
# the stopped process must be gone too (the job was aborted). While rank 0 waited, its CPU time
# must be a small fraction of the wall time (read from /proc before the abort).
set -euo pipefail
hp="$1" src="$2" mpiexec="$3"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-stall.XXXXXX")"
job=""
stopped=""
cleanup() {
    if [[ -n "$stopped" ]]; then kill -9 "$stopped" 2>/dev/null || true; fi
    if [[ -n "$job" ]] && kill -0 "$job" 2>/dev/null; then kill -9 "$job" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
ln -s "$src/data" "$work/data"
cd "$work"
fail() { echo "stall: FAIL: $*" >&2; exit 1; }
now() { date +%s.%N; }
# CPU seconds (user + system) of process $1 so far, from /proc/PID/stat
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

cat > dp2.yaml <<EOF
model: {context: 16, layers: 1, heads: 2, width: 16}
train: {steps: 100000000, batch: 4, log_every: 1, eval_every: 0, sample_tokens: 0, checkpoint_dir: run,
        checkpoint_every: 100000000, comm_timeout: 3}
strategy:
  mesh: {device_matrix: [2], alias_name: [dp]}
  inputs: {tokens: [dp, none], targets: [dp, none]}
EOF
"$mpiexec" --oversubscribe -n 2 "$hp" train dp2.yaml > job.log 2>&1 &
job=$!
for _ in $(seq 1 600); do grep -q "^step" job.log || ! kill -0 "$job" 2>/dev/null && break; sleep 0.1; done
grep -q "^step" job.log || { cat job.log >&2; fail "the job did not start stepping"; }
# the ranks: hp processes whose environment says their world rank
rank0="" rank1=""
for p in $(pgrep -f "train dp2.yaml"); do
    r="$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')"
    if [[ "$r" == 0 ]]; then rank0="$p"; elif [[ "$r" == 1 ]]; then rank1="$p"; fi
done
[[ -n "$rank0" && -n "$rank1" ]] || fail "cannot find the two ranks' processes (rank 0 '$rank0', rank 1 '$rank1')"
kill -STOP "$rank1"
stopped="$rank1"
t0="$(now)"
sleep 2.5 # rank 0 is waiting now: its CPU over the next second, before the 3 s timeout fires
c0="$(cpu_of "$rank0")"; w0="$(now)"
sleep 1
c1="$(cpu_of "$rank0" 2>/dev/null || echo "")"; w1="$(now)"
[[ -n "$c1" ]] || fail "rank 0 ended within 3.5 s of the stop, before the 3 s timeout could have passed"
for _ in $(seq 1 120); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
t1="$(now)"
if kill -0 "$job" 2>/dev/null; then cat job.log >&2; fail "the job still runs 15 s after rank 1 stopped"; fi
set +e; wait "$job"; rc=$?; set -e
job=""
echo "stall: the job ended $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s after rank 1 stopped" \
     "(exit $rc); rank 0 used $(awk -v c="$c0" -v d="$c1" -v a="$w0" -v b="$w1" 'BEGIN { printf "%.1f%%", 100 * (d - c) / (b - a) }')" \
     "of a core while it waited"
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 12) }' || { cat job.log >&2; fail "the job took more than 12 s to end"; }
(( rc != 0 )) || { cat job.log >&2; fail "the job exited 0"; }
awk -v c="$c0" -v d="$c1" -v a="$w0" -v b="$w1" 'BEGIN { exit !((d - c) < 0.25 * (b - a)) }' ||
    fail "rank 0 used $c0 -> $c1 CPU seconds in $(awk -v a="$w0" -v b="$w1" 'BEGIN { print b - a }') s of waiting"
for t in "[rank 0] hp: error: training step:" "all-reduce of " "bytes (collective #" "timeout of 3 s" \
         "group of 2 ranks (world ranks 0-1), this is rank 0 (world rank 0)" "did not arrive: rank 1 (world rank 1)" \
         "a rank stalled for longer than train.comm_timeout (3 s): ending the job"; do
    grep -qF -- "$t" job.log || { cat job.log >&2; fail "'$t' not in the job's output"; }
done
sleep 1
state="$(ps -o stat= -p "$rank1" 2>/dev/null || true)" # gone, or a zombie nobody reaped: dead either way
if [[ -n "$state" && "$state" != Z* ]]; then fail "the stopped rank 1 (pid $rank1) outlived the job (state $state)"; fi
stopped=""
echo "stall: all checks passed"

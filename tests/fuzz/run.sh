#!/usr/bin/env bash
# Fuzzes one harness for a while from its seed corpus and committed regressions, with the
# sanitizers of the fuzzing build (tests/fuzz/README.md).
#
#   tests/fuzz/run.sh FUZZ_BINARY NAME SECONDS WORK_DIR [LIBFUZZER_ARG...]
#
# New interesting inputs go to WORK_DIR/corpus/NAME (kept between runs, never into the repository),
# a crashing input to WORK_DIR/artifacts/NAME/, the full log to WORK_DIR/NAME.log. Prints the
# number of executions; exits non-zero when the harness found a crash, leak, timeout or UB.
set -uo pipefail

if (( $# < 4 )); then
    echo "usage: tests/fuzz/run.sh FUZZ_BINARY NAME SECONDS WORK_DIR [LIBFUZZER_ARG...]" >&2
    exit 2
fi
bin="$1" name="$2" secs="$3" work="$4"
shift 4
src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$work/corpus/$name" "$work/artifacts/$name"
dirs=("$work/corpus/$name" "$src/corpus/$name")
[[ -d "$src/regressions/$name" ]] && dirs+=("$src/regressions/$name")
extra=()
[[ -f "$src/dict/$name.dict" ]] && extra+=("-dict=$src/dict/$name.dict")
log="$work/$name.log"

# -timeout: an input running longer than 10 s is a hang; -rss_limit_mb bounds a run's memory (and
# any single allocation, as -malloc_limit_mb defaults to it).
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$name/" "${extra[@]}" "$@" "${dirs[@]}" > "$log" 2>&1
rc=$?

execs="$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}' | tail -n 1)"
rate="$(grep -E '^stat::average_exec_per_sec:' "$log" | awk '{print $2}' | tail -n 1)"
corpus="$(find "$work/corpus/$name" -type f | wc -l)"
if (( rc != 0 )); then
    echo "fuzz $name: FAILED (exit $rc) after ${execs:-?} executions; log $log"
    grep -E -A40 'ERROR: |runtime error: |fuzz invariant failed|==[0-9]+==' "$log" | head -n 80
    grep -E '^artifact_prefix|Test unit written to' "$log"
    echo "fuzz $name: reproduce with: $bin <crash file>; once fixed, commit the file under" \
         "tests/fuzz/regressions/$name/ (tests/fuzz/README.md)"
    exit "$rc"
fi
echo "fuzz $name: ok, ${execs:-?} executions in ${secs}s (${rate:-?}/s), work corpus $corpus inputs; log $log"

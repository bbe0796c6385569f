#!/usr/bin/env bash
# The trace tests (CTest test_trace_*): trains an examples/*.yaml for 2 steps with --trace, checks
# the written trace (tests/tools/trace_check.c: well-formed events, one track per rank and stream,
# spans nested or disjoint per track, step and F/B/opt compute spans, and the given kinds of span on
# every rank), draws it with `hp trace-view` and checks the SVG.
#
#   tests/run_trace.sh HP TRACE_CHECK SOURCE_DIR CONFIG RANKS MPIEXEC [--cat CAT]...
#
# Runs in a fresh temporary directory whose data/ links to SOURCE_DIR/data (as run_example.sh).
set -euo pipefail
hp="$1" check="$2" src="$3" config="$4" ranks="$5" mpiexec="$6"
shift 6
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-trace.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ln -s "$src/data" "$work/data"
cd "$work"
if (( ranks > 1 )); then
    "$mpiexec" --oversubscribe -n "$ranks" "$hp" train "$config" --steps 2 --trace trace.json
else
    "$hp" train "$config" --steps 2 --trace trace.json
fi
"$hp" trace-view trace.json -o timeline.svg
"$hp" trace-view trace.json -o step2.svg --step 2 --width 1200
"$check" trace.json --ranks "$ranks" "$@" --svg timeline.svg
"$check" trace.json --ranks "$ranks" --svg step2.svg
# bad input: a file that is not a trace, and a step the trace does not have
echo '{"a": 1}' > bad.json
if "$hp" trace-view bad.json -o bad.svg 2> err.txt; then echo "trace-view accepted bad.json" >&2; exit 1; fi
grep -q "no traceEvents" err.txt
if "$hp" trace-view trace.json -o none.svg --step 99 2> err.txt; then echo "trace-view drew step 99" >&2; exit 1; fi
grep -q "no span of step 99" err.txt

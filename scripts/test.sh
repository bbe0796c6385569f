#!/usr/bin/env bash
# The test command: sets up the machine (dependencies + data), then builds and runs the whole
# CTest suite (unit tests and mpirun tests) twice:
#   1. release build (build/), `ctest --output-on-failure`; then the installed library
#      (scripts/test-install.sh: `cmake --install` into a temporary prefix, examples/c built
#      against it through pkg-config and run on 1 rank and under mpirun with 2);
#   2. sanitizer build (build-sanitize/: ASan + UBSan, leak checking on), same ctest, except tests
#      labelled `slow` (ctest -LE slow; set HP_TEST_SANITIZE_SLOW=1 to run them too);
#   3. fuzzing build (build-fuzz/: clang-14, libFuzzer, ASan + UBSan; tests/fuzz/README.md): each
#      harness replays its regressions and seed corpus, then fuzzes for HP_TEST_FUZZ_SECONDS seconds
#      (default 5). Without clang-14 this step fails (scripts/setup.sh installs it); it is not skipped.
# Prints one summary line at the end and exits non-zero if any step failed.
#
#   scripts/test.sh [all|release|sanitize|fuzz]     (default: all)
#
# Tests run in parallel with -j$(nproc) (override with HP_TEST_JOBS); mpirun tests reserve the
# processors they need through their CTest PROCESSORS property.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
what="${1:-all}"
case "$what" in
    all|release|sanitize|fuzz) ;;
    *) echo "usage: scripts/test.sh [all|release|sanitize|fuzz]" >&2; exit 2 ;;
esac
jobs="${HP_TEST_JOBS:-$(nproc)}"
start=$SECONDS
summary=()
failed=0

# run NAME CMD...: runs one step and records "NAME ok (Ns)" or "NAME FAILED (Ns)" in the
# summary, followed by the step's `note` (ctest's pass count).
run() {
    local name="$1" t0=$SECONDS rc=0 result=ok
    shift
    echo "==> test.sh: $name"
    note=""
    "$@" || rc=$?
    (( rc == 0 )) || { result=FAILED; failed=1; }
    summary+=("$name $result ($((SECONDS - t0))s)${note:+: $note}")
    return "$rc"
}

# ctest_in DIR LOG [CTEST_ARG...]: runs the tests of the build in DIR, output also to DIR/LOG;
# sets `note` to ctest's pass count.
ctest_in() {
    local dir="$1" log="$1/$2" rc=0
    shift 2
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@" 2>&1 \
        | tee "$log" || rc=$?
    note="$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1)"
    return "$rc"
}

sanitize_ctest() {
    local label_args=(-LE slow) mpi='_np[0-9]+$' rc=0 unit_note
    [[ "${HP_TEST_SANITIZE_SLOW:-0}" == 1 ]] && label_args=()
    local asan="detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1"
    export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    # Single-process tests first. Then the mpirun tests (named <test>_np<ranks>), with
    # fast_unwind_on_malloc=0: Open MPI's plugins keep no frame pointers, and only the full
    # allocation stack reaches the libmpi frame that tests/lsan.supp matches to suppress Open MPI's
    # own leaks. It makes malloc several times slower, so the unit tests run without it.
    ASAN_OPTIONS="$asan" ctest_in build-sanitize ctest-unit.log --no-tests=error -E "$mpi" \
        "${label_args[@]}" || rc=$?
    unit_note="$note"
    ASAN_OPTIONS="$asan:fast_unwind_on_malloc=0" \
        ctest_in build-sanitize ctest-mpi.log -R "$mpi" "${label_args[@]}" || rc=$?
    note="unit: $unit_note; mpi: $note"
    unset LSAN_OPTIONS UBSAN_OPTIONS
    return "$rc"
}

if ! run setup bash scripts/setup.sh; then
    echo "test.sh: FAIL: setup failed after $((SECONDS - start))s" >&2
    exit 1
fi
# The fuzz tests: regressions first, then the short runs (one at a time: each is timed).
fuzz_ctest() {
    local rc=0 regress_note
    ctest_in build-fuzz ctest-regressions.log --no-tests=error -R '_regressions$' || rc=$?
    regress_note="$note"
    ctest_in build-fuzz ctest-run.log --no-tests=error -R '_run$' -j 1 || rc=$?
    grep -hE '^fuzz [a-z]+: ' build-fuzz/Testing/Temporary/LastTest.log 2>/dev/null  # executions per harness
    note="regressions: $regress_note; runs of ${HP_TEST_FUZZ_SECONDS:-5}s: $note"
    return "$rc"
}

if [[ "$what" == all || "$what" == release ]]; then
    run "release build" bash scripts/build.sh release && run "release ctest" ctest_in build ctest.log --no-tests=error
    [[ -d build ]] && run "install + examples/c" bash scripts/test-install.sh build
fi
if [[ "$what" == all || "$what" == sanitize ]]; then
    run "sanitize build" bash scripts/build.sh sanitize && run "sanitize ctest" sanitize_ctest
fi
if [[ "$what" == all || "$what" == fuzz ]]; then
    run "fuzz build" bash scripts/build.sh fuzz "-DHP_FUZZ_SECONDS=${HP_TEST_FUZZ_SECONDS:-5}" &&
        run "fuzz ctest" fuzz_ctest
fi

echo
echo "==> test.sh summary"
for s in "${summary[@]}"; do echo "    $s"; done
elapsed="$((SECONDS - start))"
if (( failed )); then
    echo "test.sh: FAIL in $((elapsed / 60))m$((elapsed % 60))s"
    exit 1
fi
echo "test.sh: PASS in $((elapsed / 60))m$((elapsed % 60))s"

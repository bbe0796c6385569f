#!/usr/bin/env bash
# The longer fuzzing run: builds build-fuzz/ (scripts/build.sh fuzz: clang-14, libFuzzer, ASan +
# UBSan) and fuzzes each harness of tests/fuzz in turn for SECONDS (default 300), from its seed
# corpus, its committed regressions and the corpus earlier runs grew in build-fuzz/fuzz/corpus/.
# Prints the executions per harness; a crash, leak, hang (> 10 s per input) or UB stops that
# harness, keeps the input in build-fuzz/fuzz/artifacts/NAME/ and makes the script fail
# (tests/fuzz/README.md says how to turn it into a regression test).
#
#   scripts/fuzz.sh [SECONDS] [NAME...]        NAME: config safetensors state manifest (default: all)
#
# Extra libFuzzer flags can be given in HP_FUZZ_ARGS (e.g. HP_FUZZ_ARGS="-jobs=2 -workers=2").
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-300}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || (( secs < 1 )); then
    echo "usage: scripts/fuzz.sh [SECONDS] [config|safetensors|state|manifest ...]" >&2
    exit 2
fi
(( $# > 0 )) && shift
names=("$@")
(( ${#names[@]} )) || names=(config safetensors state manifest)

log="$(mktemp)"
bash "$root/scripts/build.sh" fuzz > "$log" 2>&1 || {
    tail -n 30 "$log" >&2
    echo "fuzz.sh: the fuzz build failed (full log: $log)" >&2
    exit 1
}
rm -f "$log"

failed=0
results=()
read -r -a extra <<< "${HP_FUZZ_ARGS:-}"
for name in "${names[@]}"; do
    bin="$root/build-fuzz/tests/fuzz/fuzz_$name"
    if [[ ! -x "$bin" ]]; then
        echo "fuzz.sh: no harness '$name' (known: config safetensors state manifest)" >&2
        exit 2
    fi
    echo "==> fuzz.sh: $name for ${secs}s"
    line="$(bash "$root/tests/fuzz/run.sh" "$bin" "$name" "$secs" "$root/build-fuzz/fuzz" "${extra[@]}")" || failed=1
    echo "$line"
    results+=("$(head -n 1 <<< "$line")")
done
echo
echo "==> fuzz.sh summary"
for r in "${results[@]}"; do echo "    $r"; done
(( failed )) && { echo "fuzz.sh: FAIL"; exit 1; }
echo "fuzz.sh: PASS"

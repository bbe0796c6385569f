#!/usr/bin/env bash
# Configures and builds hyperparallel.
#
#   scripts/build.sh [release|sanitize|fuzz] [CMAKE_ARG...]
#
#   release   (default) into build/: -DCMAKE_BUILD_TYPE=Release (with -march=native).
#   sanitize  into build-sanitize/: Debug with ASan + UBSan (-DHP_SANITIZE=ON), no -march=native.
#   fuzz      into build-fuzz/: the libFuzzer harnesses of tests/fuzz only (-DHP_FUZZ=ON), library
#             and harnesses compiled by clang-14 (-O1 -g) with ASan + UBSan, without MPI. Fails
#             when clang-14 is missing (scripts/setup.sh installs it).
#
# Extra arguments go to the CMake configure step (e.g. -DHP_MPI=OFF). Builds with -j$(nproc).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-release}"
if (( $# > 0 )); then shift; fi

case "$mode" in
    release)  dir="$root/build"
              args=(-DCMAKE_BUILD_TYPE=Release) ;;
    sanitize) dir="$root/build-sanitize"
              args=(-DCMAKE_BUILD_TYPE=Debug -DHP_SANITIZE=ON -DHP_NATIVE=OFF) ;;
    fuzz)     dir="$root/build-fuzz"
              cc="${HP_FUZZ_CC:-clang-14}"
              if ! command -v "$cc" > /dev/null 2>&1; then
                  echo "build.sh: fuzz: $cc not found; the fuzz harnesses need clang with libFuzzer" \
                       "(scripts/setup.sh installs clang-14 and libclang-rt-14-dev)" >&2
                  exit 1
              fi
              args=(-DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O1 -g"
                    -DHP_FUZZ=ON -DHP_MPI=OFF -DHP_NATIVE=OFF) ;;
    *)        echo "usage: scripts/build.sh [release|sanitize|fuzz] [CMAKE_ARG...]" >&2
              exit 2 ;;
esac

cmake -S "$root" -B "$dir" "${args[@]}" "$@"
cmake --build "$dir" -j "$(nproc)"

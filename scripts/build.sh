#!/usr/bin/env bash
# Configures and builds hyperparallel.
#
#   scripts/build.sh [release|sanitize] [CMAKE_ARG...]
#
#   release   (default) into build/: -DCMAKE_BUILD_TYPE=Release (with -march=native).
#   sanitize  into build-sanitize/: Debug with ASan + UBSan (-DHP_SANITIZE=ON), no -march=native.
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
    *)        echo "usage: scripts/build.sh [release|sanitize] [CMAKE_ARG...]" >&2
              exit 2 ;;
esac

cmake -S "$root" -B "$dir" "${args[@]}" "$@"
cmake --build "$dir" -j "$(nproc)"

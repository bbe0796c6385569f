#!/usr/bin/env bash
# Prepares a fresh Debian (bookworm) machine for hyperparallel: installs every build and test
# dependency from Debian packages, then fetches the training corpus (scripts/get-data.sh makes
# data/kjv.txt).
#
#   scripts/setup.sh [EXTRA_PACKAGE...]
#
# Extra package names are installed along with the base set (scripts/setup-bench.sh passes
# python3-torch this way). Assumes only gcc, cmake and git are present; installs cmake too when it
# is missing. Idempotent and fast when everything is present: apt is not touched when dpkg already
# lists every package as installed. Runs apt as root, through sudo when not root.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
    build-essential pkg-config            # compiler toolchain, make, pkg-config for CMake
    libopenblas0-openmp libopenblas-openmp-dev   # BLAS for the CPU backend (OpenMP threading)
    libopenmpi-dev openmpi-bin            # the MPI communicator and mpirun for multi-rank tests
    libyaml-dev libcjson-dev zlib1g-dev liburing-dev   # configs, JSON, compression, disk tier
    libcmocka-dev                         # unit-test framework
    libxml2-utils                         # xmllint: tests parse the SVGs of hp plot back
    clang-14 libclang-rt-14-dev libomp-14-dev    # the fuzz build (tests/fuzz): clang, libFuzzer, OpenMP
    bible-kjv                             # the default training corpus (scripts/get-data.sh)
    dataset-fashion-mnist                 # Fashion-MNIST (IDX) for the multimodal model (hp/multimodal.h)
    "$@"
)
command -v cmake > /dev/null 2>&1 || packages+=(cmake)

missing=()
for p in "${packages[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
        missing+=("$p")
    fi
done

if (( ${#missing[@]} == 0 )); then
    echo "setup: all ${#packages[@]} packages already installed"
else
    echo "setup: installing ${missing[*]}"
    if [[ "$(id -u)" == 0 ]]; then
        as_root=()
    elif command -v sudo > /dev/null 2>&1; then
        as_root=(sudo)
    else
        echo "setup: not root and no sudo; install these Debian packages: ${missing[*]}" >&2
        exit 1
    fi
    apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0)
    "${apt[@]}" update > /dev/null
    "${apt[@]}" install "${missing[@]}" > /dev/null
    echo "setup: installed ${#missing[@]} packages"
fi

bash "$root/scripts/get-data.sh"

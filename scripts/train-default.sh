#!/usr/bin/env bash
# The main job: set up the machine (dependencies + data/kjv.txt), build the release binary and
# train the default GPT on the King James Bible with examples/kjv.yaml. Extra arguments go to
# `hp train`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/build.sh release
exec ./build/hp train examples/kjv.yaml "$@"

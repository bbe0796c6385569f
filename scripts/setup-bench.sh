#!/usr/bin/env bash
# Everything scripts/setup.sh installs, plus Debian's PyTorch (python3-torch) for the PyTorch side
# of the benchmarks (bench/torch_gpt.py, run with /usr/bin/python3). Not needed to build or test.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/setup.sh" python3-torch

#!/usr/bin/env bash
# Create .venv at the repository root and install nemo-train (editable) with its test extras, at the versions
# locked in constraints.txt.
# torch/torchvision are pinned as a pair that imports on CPU-only machines (see pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.nemo-train-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # the locked versions (constraints.txt, refreshed by `make lock`)
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev]"
  touch "$stamp"
fi
.venv/bin/python -c "import torch, torchvision, lightning; print(f'nemo-train env ready: torch {torch.__version__}, torchvision {torchvision.__version__}, lightning {lightning.__version__}')"

# Quick start: `make demo` (set up + run every capability once), `make test` (set up + the checks CI runs).
.PHONY: setup demo test lint bench

VENV := .venv/bin

setup:
	bash scripts/setup.sh

demo: setup
	$(VENV)/nemo-train demo

# lint: ruff (lint + format) and the import contract (pyproject.toml, [tool.importlinter])
lint: setup
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/lint-imports --no-logo

test: lint
	$(VENV)/python -m pytest -q

bench: setup
	$(VENV)/python scripts/bench_lightning_overhead.py

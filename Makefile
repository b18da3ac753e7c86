# Quick start: `make demo` (set up + run the main job), `make test` (set up + run the tests).
.PHONY: setup demo test bench

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/nemo-train demo

test: setup
	.venv/bin/python -m pytest -q

bench: setup
	.venv/bin/python scripts/bench_lightning_overhead.py

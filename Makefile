# Quick start: `make demo` (set up + run every capability once), `make test` (set up + the checks CI runs).
.PHONY: setup demo test test-fast test-reseeded lint bench lock

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

# every test (what CI runs); the slowest tests are listed at the end
test: lint
	$(VENV)/python -m pytest -q

# the edit-test loop: everything but slow (multi-process, multi-epoch) and fault-injection tests
test-fast: setup
	$(VENV)/python -m pytest -q -m "not slow and not fault"

# every test with the test session's models trained under another seed: no test may rely on one training outcome
test-reseeded: setup
	NEMO_TEST_SEED=$${NEMO_TEST_SEED:-1} $(VENV)/python -m pytest -q

bench: setup
	$(VENV)/python scripts/bench_lightning_overhead.py

# refresh constraints.txt: resolve pyproject.toml in a fresh environment and freeze it (then run `make test`)
lock:
	rm -rf /tmp/nemo-train-lock && python3 -m venv /tmp/nemo-train-lock
	/tmp/nemo-train-lock/bin/python -m pip install --quiet -e ".[dev]"
	{ head -2 constraints.txt; /tmp/nemo-train-lock/bin/python -m pip freeze --exclude-editable | grep -v '^nemo-train'; } > constraints.new
	mv constraints.new constraints.txt

# Two commands on a fresh machine (Python 3.11 + pip): `make demo` and `make test`.
# Each creates .venv in the checkout, installs torch on its own first (pinned, so that no other package's
# range pulls a newer CUDA build), then vitkit (for `make test`, with its test extras), then runs.
PYTHON ?= python3
TORCH ?= torch==2.13.0
# Where pip looks for torch: its own configured index by default. PyPI's Linux torch wheel is the CUDA build;
# on a machine whose pip sees only PyPI, TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU build.
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast test-cputime lint bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.torch: | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)")
	touch $@

$(VENV)/.base: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.base
	$(BIN)/pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/.base
	$(BIN)/vitkit demo --overwrite

# pytest with bytecode written even where the environment turns it off (PYTHONDONTWRITEBYTECODE=1, as some
# containers set): without it every worker compiles and assertion-rewrites every test module at collection, and every
# CLI process a test starts compiles vitkit, on every run (a worker's collection ~9.5 -> ~6.4 CPU s from the second run
# on: benchmarks/results/suite_durations.md, session 24); the .pyc files go to __pycache__, which .gitignore leaves out.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

# Every test, one pytest-xdist worker per core (each with one torch thread: tests/conftest.py), tests handed out one by
# one to whichever worker is free (faster than a file per worker: benchmarks/results/suite_durations.md).
test: $(VENV)/.test
	$(BIN)/ruff check vitkit tests benchmarks
	$(PYTEST) -q -n auto

# The inner loop: the same, without the end-to-end runs marked slow (`make test` runs those too).
test-fast: $(VENV)/.test
	$(PYTEST) -q -n auto -m "not slow"

# The suite as `make test` runs it, with each test's CPU seconds recorded (benchmarks/suite_cputime.py: one JSON line
# per test phase and worker in $(CPUTIME_OUT)), then the totals, per-file sums and costliest tests.
CPUTIME_OUT ?= .cputime
test-cputime: $(VENV)/.test
	rm -rf $(CPUTIME_OUT)
	CPUTIME_OUT=$(CPUTIME_OUT) PYTHONPATH=benchmarks $(PYTEST) -q -n auto -p suite_cputime
	$(BIN)/python benchmarks/suite_cputime.py $(CPUTIME_OUT)

bench: $(VENV)/.test
	$(BIN)/vitkit bench

# the docs site into site/, strict (a broken link or reference fails); the test extra includes the docs extra
docs: $(VENV)/.test
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) runs site .pytest_cache .cputime

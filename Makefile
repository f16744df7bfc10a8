# Two commands on a fresh machine (Python 3.11 + pip): `make demo` and `make test`.
# Each creates .venv in the checkout, installs torch on its own first (a CPU build, pinned so an
# unpinned torch cannot pull GBs of CUDA packages), then vitkit with its extras, then runs.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.torch: | $(BIN)/python
	$(BIN)/pip install -q "$(TORCH)"
	touch $@

$(VENV)/.base: pyproject.toml $(VENV)/.torch
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.base
	$(BIN)/pip install -q -e ".[test]"
	touch $@

demo: $(VENV)/.base
	$(BIN)/vitkit demo --overwrite

test: $(VENV)/.test
	$(BIN)/ruff check vitkit tests benchmarks
	$(BIN)/python -m pytest -q

bench: $(VENV)/.test
	$(BIN)/vitkit bench

clean:
	rm -rf $(VENV) runs .pytest_cache

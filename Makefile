# Two entry points: `make demo` (set up, then run the demo) and `make test` (set up, then test).
# Both create a virtual environment in .venv and install the project with its test extras.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench setup clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: setup
	$(BIN)/reranker demo

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/bench_rank.py

clean:
	rm -rf $(VENV) reranker-demo

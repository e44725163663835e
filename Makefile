# Two entry points: `make demo` (set up, then run the demo) and `make test` (set up, then test).
# `make test` runs the test files in parallel, one process per core (pytest-xdist).
# Both create a virtual environment in .venv and install the project with its test extras;
# `make test` also builds the documentation site (mkdocs.yml, docs/) in strict mode, and
# installs Debian's chromium and chromium-driver for the dashboard's browser
# tests when they are missing (as root, with apt-get; elsewhere those tests are skipped), and
# Debian's postgresql for the event store tests, which start a throwaway cluster of it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast test-all bench setup browser postgres clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: setup
	$(BIN)/reranker demo

test: setup browser postgres
	$(BIN)/ruff check .
	$(BIN)/mkdocs build --strict --quiet --site-dir $$(mktemp -d)
	$(BIN)/python -m pytest -n auto --dist loadfile

# The inner loop: the tests that start no server, process or database (about a minute).
test-fast: setup
	$(BIN)/python -m pytest -n auto -m "not slow and not integration"

# Also the long scenarios (marked slow): the A/A false-positive rates, the published PDGD
# and DBGD numbers, an attacker against honest users, a click two minutes after its search.
test-all: setup browser postgres
	$(BIN)/ruff check .
	$(BIN)/mkdocs build --strict --quiet --site-dir $$(mktemp -d)
	$(BIN)/python -m pytest -n auto --dist loadfile -m "slow or not slow"

browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium and chromium-driver for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else \
	    echo "chromium or chromedriver missing: the browser tests will be skipped"; \
	  fi; \
	fi

postgres:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing postgresql for the event store tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq postgresql >/dev/null; \
	  else \
	    echo "postgresql (initdb) missing: the PostgreSQL event store tests will be skipped"; \
	  fi; \
	fi

bench: setup
	$(BIN)/python benchmarks/bench_rank.py

clean:
	rm -rf $(VENV) reranker-demo

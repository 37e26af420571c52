# memlab: `make reproduce` runs every experiment (quick profile) and writes out/report.md;
# `make test` runs the fast tests. Both create .venv (python3 -m venv) and install the package if needed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist: two workers ran the suite about 1.5-2x faster on the 2-core machine (XLA compiles are
# mostly single-threaded); override with make test PYTEST_ARGS= to run in one process.
PYTEST_ARGS ?= -n 2

.PHONY: install reproduce test test-slow bench

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

reproduce: $(STAMP)
	set -e; names="$$($(BIN)/memlab list --names)"; \
	for name in $$names; do $(BIN)/memlab run "$$name" --profile quick; done
	$(BIN)/memlab report out

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

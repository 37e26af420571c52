# memlab: `make reproduce` runs every experiment (quick profile) and writes out/report.md;
# `make test` checks the code with ruff and runs the fast tests; `make bench` times memlab beside its peer libraries
# (BENCH="belief s6" picks benchmarks). Both create .venv (python3 -m venv) and install
# the package if needed (with the test tools and the Ray extra: the executor tests start local Ray clusters).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist: two workers ran the suite about 1.5-2x faster on the 2-core machine (XLA compiles are
# mostly single-threaded); override with make test PYTEST_ARGS= to run in one process. --dist worksteal was no
# faster (fresh clone, idle 2-core machine: 1822 s against load scheduling's 1711 s; the tail is the long tests).
PYTEST_ARGS ?= -n 2
# experiments run side by side by `make reproduce` (each its own process); default: every core
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: install reproduce test test-slow bench lint docs docs-quick-runs paper-claims

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e ".[test,ray]"
	touch $(STAMP)

reproduce: $(STAMP)
	$(BIN)/memlab reproduce --profile quick --jobs $(JOBS) --out out

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

# --durations: the CI log names the slowest tests, so the 15-minute budget is judged on CI's own machine
test: lint
	$(BIN)/python -m pytest -q --durations=20 $(PYTEST_ARGS)

# the claims of the committed paper-scale runs as package data (src/memlab/paper_claims.json), so `memlab report`
# from a wheel shows the paper-scale verdicts: rerun after committing a run to paper-results/ (a test fails until then)
paper-claims: $(STAMP)
	$(BIN)/python -m memlab.paper_claims paper-results

# the quick runs the docs show for experiments without a paper-scale run (docs/quick-runs/), copied from the out/
# of `make reproduce`; rerun both after changing such an experiment's quick profile (a test fails until then)
docs-quick-runs: $(STAMP)
	$(BIN)/python tools/docs_quick_runs.py out

# the documentation site, built from docs/ and the docstrings into site/ (mkdocs --strict: broken links fail)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# the peer libraries memlab is timed against (dynamax, mambapy + torch CPU, filterpy): the optional `bench` extra
BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,ray,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/run.py $(BENCH)

# Two commands for a newcomer: `make demo` and `make test`. Both create .venv and install first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO   := demo_output

.PHONY: setup demo test lint typecheck warm unit golden mutate mutate-check lab bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[dev,spark]'
	@touch $(STAMP)

setup: $(STAMP)

## demo: install, then run the whole investigation on the bundled sample incident
demo: $(STAMP)
	$(BIN)/forensics investigate $(DEMO)/case.duckdb \
	    --gateway sample_data/gateway --engine sample_data/engine \
	    --engine-tz Asia/Singapore --out $(DEMO) --replace
	@echo
	@echo "Outputs are in $(DEMO)/: open $(DEMO)/impact_report.html in a browser (works offline); CSVs, notification list and packets beside it. Notebooks: make lab"

## test: install, then lint, type-check and run every test (notebooks included)
# The scanners' kernels are compiled (once per machine; a clean clone has none cached) beside the
# lint and type checks, so the two test workers do not each compile them while the tests wait.
test: $(STAMP)
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck warm
	@$(MAKE) --no-print-directory unit

lint: $(STAMP)
	$(BIN)/ruff check forensics tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

## warm: compile the log scanners' kernels now (numba's on-disk cache), not in the first ingest
warm: $(STAMP)
	$(BIN)/forensics warm

# Both cores (pytest-xdist): whole files go to a worker (--dist loadfile), so a module's fixtures
# and the one Spark session are built once; the ingested sample is built once and shared by the
# workers (tests/conftest.py build_once). PYTEST_JOBS=0 runs serially.
PYTEST_JOBS ?= 2
unit: $(STAMP)
	$(BIN)/python -m pytest -q -n $(PYTEST_JOBS) --dist loadfile

## golden: rewrite tests/golden/* from the current code (review the diff; explain it in the commit)
golden: $(STAMP)
	$(BIN)/python -m pytest -q -m golden --update-golden tests

## mutate: the mutation run over the judgement (slow; not part of make test); see docs/testing.md
mutate: $(STAMP)
	$(BIN)/python tests/mutation/mutate.py --jobs 2

## mutate-check: every mutant of tests/mutation/mutants.toml still finds its target (fast)
mutate-check: $(STAMP)
	$(BIN)/python tests/mutation/mutate.py --check

## lab: JupyterLab on notebooks/ with the project's environment
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

## bench: the benchmark suite (slow; not part of make test)
bench: $(STAMP)
	$(BIN)/python -m benchmarks --runs 3 --profile --snapshot --out benchmarks/RESULTS.md
	$(BIN)/python -m benchmarks.bench_spark --requests 100000 --master 'local[2]' --out benchmarks/SPARK_RESULTS.md

clean:
	rm -rf $(VENV) $(DEMO) dist build .pytest_cache .mypy_cache .ruff_cache

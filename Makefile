# Two commands on a fresh machine: `make chaos` (the main job) and `make test`.
# Both create .venv and install the project into it on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCENARIO ?= scenarios/pod-kill.yaml
RESULTS ?= results
ARGS ?=
REPRO_RUNS ?= 3
PYTEST_ARGS ?=

.PHONY: chaos reproduce test lint unit integration quality venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## Run a scenario (default: the article's pod-kill experiment, embedded runtime) and print the report.
chaos: $(STAMP)
	$(BIN)/mcp-chaos run $(SCENARIO) --results $(RESULTS) $(ARGS)

## The article's experiment against naive, keyed and atomic, one table beside the article's figures.
## Three runs per variant by default: keyed's expected count is ~1 per run, too few to judge alone.
reproduce: $(STAMP)
	$(BIN)/mcp-chaos reproduce --scenario $(SCENARIO) --results $(RESULTS) --runs $(REPRO_RUNS) --quiet $(ARGS)

## Lint, type-check, then every test (unit, integration with real processes, quality).
test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: $(STAMP)
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

quality: $(STAMP)
	$(BIN)/pytest tests/quality $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache *.egg-info

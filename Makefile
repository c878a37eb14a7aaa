# Two commands on a fresh machine: `make chaos` (the main job) and `make test`; `make check` is
# the loop while editing (under a minute). All create .venv and install the project on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SCENARIO ?= scenarios/pod-kill.yaml
IMAGE ?=
BASE ?= mcp-chaos-base:bookworm
RESULTS ?= results
ARGS ?=
REPRO_RUNS ?= 1
PYTEST_ARGS ?=
# Test workers (pytest-xdist): 3 by default on the 2 cores CI runs on. Most of a test's time is
# spent waiting on real processes (their start, a restart after a kill), so a third worker pays: the
# crash-point and contract tests took 207 s with 2 workers and 172 s with 3 (2026-12-03).
JOBS ?= 3
# The unit tests are CPU-bound: `make check` keeps to the cores.
CHECK_JOBS ?= 2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
XDIST := -n $(JOBS) --dist loadgroup

.PHONY: chaos reproduce nightly matrix check test lint unit integration quality conformance bench image node servers venv docs schema clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q harness >/dev/null  # as pip does for what it installs (see bench/common.py)
	touch $(STAMP)

venv: $(STAMP)

## Run a scenario (default: the article's pod-kill experiment, embedded runtime) and print the report.
## IMAGE=<image> runs the scenario's target from that Docker image instead (host network, port in $$PORT).
chaos: $(STAMP)
	$(BIN)/mcp-chaos run $(SCENARIO) --results $(RESULTS) \
		$(if $(IMAGE),--set target.image=$(IMAGE) --set target.command=null) $(ARGS)

## The article's experiment against naive, keyed and atomic, one table beside the article's figures.
## One run per variant, as in the article; REPRO_RUNS=3 pools three (keyed expects ~1 duplicate a run).
reproduce: $(STAMP)
	$(BIN)/mcp-chaos reproduce --scenario $(SCENARIO) --results $(RESULTS) --runs $(REPRO_RUNS) --quiet $(ARGS)

## What the nightly CI job runs (.github/workflows/nightly.yml), here as there: the reproduction, then the
## stream-fault scenarios twice: the atomic design must show no finding, the broken one (a canary) must
## show duplicates, or the harness is what broke. Run directories, JUnit files and the trend file (one row
## per run, kept between nights) go to $(NIGHTLY).
NIGHTLY ?= results/nightly
nightly: $(STAMP)
	mkdir -p $(NIGHTLY)
	$(BIN)/mcp-chaos reproduce --results $(NIGHTLY) --quiet
	set -e; for s in sever-streams stall-race cancel-mid-stream; do \
		$(BIN)/mcp-chaos run scenarios/$$s.yaml --results $(NIGHTLY) --quiet \
			--set target.env.INVOICES_MODE=atomic --set gate.expect=[] --fail-on duplicate,lost,inconclusive \
			--junit $(NIGHTLY)/$$s-atomic.xml --trend $(NIGHTLY)/trend.csv --trend-as $$s-atomic; \
		$(BIN)/mcp-chaos run scenarios/$$s.yaml --results $(NIGHTLY) --quiet \
			--expect duplicate --junit $(NIGHTLY)/$$s-canary.xml --trend $(NIGHTLY)/trend.csv --trend-as $$s-canary; \
	done
	$(BIN)/mcp-chaos trend $(NIGHTLY)/trend.csv -o $(NIGHTLY)/trend.html || echo "trend: a rate moved beyond its interval (see trend.html)"

## The loop while editing, under a minute: lint and type-check, then the unit tests in parallel.
check: lint
	HYPOTHESIS_PROFILE=check $(BIN)/pytest tests/unit -q -n $(CHECK_JOBS) $(PYTEST_ARGS)

## Lint, type-check, then every test (unit, integration with real processes, quality) in parallel;
## tests that share the Docker engine or the machine's state run one at a time (tests/conftest.py).
test: lint
	$(BIN)/pytest $(XDIST) --durations=25 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo
	$(BIN)/deptry . --no-ansi

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(XDIST) $(PYTEST_ARGS)

integration: $(STAMP)
	$(BIN)/pytest tests/integration $(XDIST) --durations=25 $(PYTEST_ARGS)

quality: $(STAMP)
	$(BIN)/pytest tests/quality $(XDIST) --durations=25 $(PYTEST_ARGS)

## The official MCP conformance suite's client scenarios against the harness's client (mcp-chaos
## conformance-client): the suite and Node 22 are npm packages pinned by tests/conformance/package-lock.json,
## installed there on first use (needs npm). Fails on a failure not in tests/conformance/expected-failures*.yml.
conformance: $(STAMP)
	$(BIN)/python -m tests.conformance.suite

## The crash points' whole self-check: every PostgreSQL client x protocol era x reply form (45
## explorations); `make test` runs a covering set of 15 (tests/quality/test_crash_matrix.py says which).
## Needs the PostgreSQL server (installed from Debian/Ubuntu if missing) and Node for node-postgres.
matrix: $(STAMP)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null \
		|| ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq postgresql >/dev/null)
	MCP_CHAOS_FULL_MATRIX=1 $(BIN)/pytest tests/quality/test_crash_matrix.py $(XDIST) $(PYTEST_ARGS)

## Benchmarks: harness vs wrk and the SDK client, audit at 1M intents, restarts, reproduce wall time.
## Prints PASS/FAIL per goal and rewrites BENCHMARKS.md. Needs wrk (installed from Debian if missing).
bench: $(STAMP)
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk >/dev/null)
	$(BIN)/python -m bench $(BENCH)

## The reference targets' images, built offline: BASE=python:3.12-slim where a registry is reachable;
## the default base image is made from Debian packages (targets/images/base-image.sh).
image: $(STAMP)
	targets/images/build.sh $(BASE)

## The TypeScript reference target's packages (targets/invoices-ts, from its lockfile; Node 18+).
node: targets/invoices-ts/node_modules/.package-lock.json

targets/invoices-ts/node_modules/.package-lock.json: targets/invoices-ts/package-lock.json
	cd targets/invoices-ts && npm ci --no-audit --no-fund --ignore-scripts

## MCP servers published by others, pinned by tests/servers/package-lock.json (Node 18+), for the
## tests of what the harness says about servers it did not write. The tests install them on first
## use too (tests/conftest.py); this target is for trying them by hand.
servers: tests/servers/node_modules/.package-lock.json

tests/servers/node_modules/.package-lock.json: tests/servers/package-lock.json
	cd tests/servers && npm ci --no-audit --no-fund --ignore-scripts

## The documentation site (MkDocs Material) into site/, warnings as errors; its reference pages are
## generated from the code at every build (docs/hooks/reference.py). `make test` builds it too.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## The JSON Schemas of the scenario (harness/scenario/scenario.schema.json, from its model) and of a
## history line (harness/history.schema.json, from harness/events.py); a unit test fails while a
## committed file is stale.
schema: $(STAMP)
	$(BIN)/python -m harness.scenario.schema
	$(BIN)/python -m harness.history_schema

clean:
	rm -rf site $(VENV) .mypy_cache .pytest_cache .ruff_cache .import_linter_cache *.egg-info

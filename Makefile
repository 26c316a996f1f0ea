# gpufleet.gpu_operator — every target sets up what it needs and is safe to re-run.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The main venv (lint, sanity, unit, integration, demo) runs the newest supported ansible-core (requirements/dev.txt),
# which needs Python >= 3.12: python3.13 or python3.12 on PATH, else pyenv's installed versions.
PYTHON ?= $(shell for p in python3.13 python3.12 $$HOME/.pyenv/versions/3.1[23]*/bin/python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { command -v "$$p"; break; }; done)
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
GPUFLEET_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpufleet
export GPUFLEET_CACHE
COLLECTION_LINK := .collections/ansible_collections/gpufleet/gpu_operator
# awx/configure.yml's collection. The ansible package bundles it up to 12.x (awx.awx 24.6.1); the main venv's ansible
# 14 does not, and Galaxy is not reachable here, so it is taken from the ansible 12.3.0 wheel on PyPI, cached by version.
AWX_COLLECTION := .collections/ansible_collections/awx/awx
AWX_COLLECTION_WHEEL := ansible==12.3.0
SETUP_STAMP := $(VENV)/.setup-$(shell cat requirements/*.txt | sha256sum | cut -c1-16)

# Parts of the tree add their own targets and hook into these lists (mk/<part>.mk).
INTEGRATION_DEPS :=
TEST_EXTRA :=
# Single-shot: a flaky test is a defect to find (docs/testing.md); add --reruns 2 here only when hunting one locally.
INTEGRATION_PYTEST_ARGS ?=
# pytest-xdist processes for the integration tests, each with its own testbed cluster; a test file stays on one
# process (--dist loadfile: its module fixtures are shared). 0 runs them in the make process's pytest alone.
INTEGRATION_WORKERS ?= 2
-include mk/*.mk

.PHONY: help setup lint sanity unit integration test demo demo-down build clean

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup: $(SETUP_STAMP) $(COLLECTION_LINK) $(AWX_COLLECTION) ## venv with pinned tools, checkout linked as gpufleet.gpu_operator

$(SETUP_STAMP): requirements/runtime.txt requirements/dev.txt requirements/unit.txt requirements/constraints.txt
	@test -n "$(PYTHON)" || { echo "the main venv needs Python >= 3.12: none found (python3.13, python3.12, ~/.pyenv/versions/3.12*)" >&2; exit 1; }
	@echo "[setup] creating $(VENV) with $(PYTHON) and pinned requirements"
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null || rm -rf $(VENV)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements/dev.txt -c requirements/constraints.txt
	@rm -f $(VENV)/.setup-*; touch $@

$(AWX_COLLECTION): | $(SETUP_STAMP)
	@cache="$(GPUFLEET_CACHE)/awx-collection/$(subst ==,-,$(AWX_COLLECTION_WHEEL))"; \
	if [ ! -f "$$cache/MANIFEST.json" ]; then \
	  echo "[setup] awx.awx from the $(AWX_COLLECTION_WHEEL) wheel into $$cache"; \
	  tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  $(BIN)/python -m pip download -q --no-deps -d "$$tmp" "$(AWX_COLLECTION_WHEEL)"; \
	  $(BIN)/python -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith("ansible_collections/awx/awx/")]' "$$tmp"/*.whl "$$tmp/x"; \
	  rm -rf "$$cache"; mkdir -p "$$(dirname "$$cache")"; mv "$$tmp/x/ansible_collections/awx/awx" "$$cache"; \
	fi; \
	mkdir -p $(dir $(AWX_COLLECTION)); rm -rf $(AWX_COLLECTION); cp -r "$$cache" $(AWX_COLLECTION)

$(COLLECTION_LINK):
	@mkdir -p $(dir $@)
	ln -sfn ../../.. $@

lint: setup ## ruff (ruff.toml) and ansible-lint (production profile)
	$(BIN)/ruff check .
	$(BIN)/ansible-lint --profile production

sanity: setup ## ansible-test sanity on a copy at ansible_collections/gpufleet/gpu_operator
	tests/sanity/run.sh

unit: setup ## unit tests of the pure logic
	$(BIN)/python -m pytest tests/unit -q

integration: setup $(INTEGRATION_DEPS) ## integration tests against the testbed and the simulators
	$(BIN)/python -m pytest tests/integration -q $(if $(filter-out 0,$(INTEGRATION_WORKERS)),-n $(INTEGRATION_WORKERS) --dist loadfile) $(INTEGRATION_PYTEST_ARGS)

build: setup ## ansible-galaxy collection build
	mkdir -p build && $(BIN)/ansible-galaxy collection build --force --output-path build .

test: setup lint sanity unit ansible-versions build integration $(TEST_EXTRA) ## everything CI runs

clean: ## remove local build outputs (caches outside the repo stay)
	rm -rf build tests/output .pytest_cache

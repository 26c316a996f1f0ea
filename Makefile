# gpufleet.gpu_operator — every target sets up what it needs and is safe to re-run.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
GPUFLEET_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpufleet
export GPUFLEET_CACHE
COLLECTION_LINK := .collections/ansible_collections/gpufleet/gpu_operator
SETUP_STAMP := $(VENV)/.setup-$(shell cat requirements/*.txt | sha256sum | cut -c1-16)

# Parts of the tree add their own targets and hook into these lists (mk/<part>.mk).
INTEGRATION_DEPS :=
TEST_EXTRA :=
# Single-shot: a flaky test is a defect to find (docs/testing.md); add --reruns 2 here only when hunting one locally.
INTEGRATION_PYTEST_ARGS ?=
-include mk/*.mk

.PHONY: help setup lint sanity unit integration test demo demo-down build clean

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

setup: $(SETUP_STAMP) $(COLLECTION_LINK) ## venv with pinned tools, checkout linked as gpufleet.gpu_operator

$(SETUP_STAMP): requirements/runtime.txt requirements/dev.txt requirements/unit.txt requirements/constraints.txt
	@echo "[setup] creating $(VENV) with $(PYTHON) and pinned requirements"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements/dev.txt -c requirements/constraints.txt
	@rm -f $(VENV)/.setup-*; touch $@

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
	$(BIN)/python -m pytest tests/integration -q $(INTEGRATION_PYTEST_ARGS)

build: setup ## ansible-galaxy collection build
	mkdir -p build && $(BIN)/ansible-galaxy collection build --force --output-path build .

test: setup lint sanity unit ansible-versions build integration $(TEST_EXTRA) ## everything CI runs

clean: ## remove local build outputs (caches outside the repo stay)
	rm -rf build tests/output .pytest_cache

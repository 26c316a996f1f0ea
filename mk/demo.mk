# Demo: the sandbox (testbed cluster, simulated GPU nodes, agents, smoke runtime, workloads) and the
# playbooks run as a user runs them. The cluster stays up until `make demo-down`.
SANDBOX := $(BIN)/python -m tests.testbed.sandbox.sandbox
DEMO_TESTBED_BIN = $(shell tests/testbed/build.sh path)
# helm and kubectl of the testbed on PATH; helm's cache and config inside .sandbox, not in $HOME.
DEMO_ENV = PATH="$(DEMO_TESTBED_BIN):$$PATH" KUBECONFIG=$(CURDIR)/.testbed/kubeconfig \
	HELM_CACHE_HOME=$(CURDIR)/.sandbox/helm/cache HELM_CONFIG_HOME=$(CURDIR)/.sandbox/helm/config \
	HELM_DATA_HOME=$(CURDIR)/.sandbox/helm/data
DEMO_PLAYBOOK = $(DEMO_ENV) $(BIN)/ansible-playbook -i inventories/sandbox
MIG_RECONFIGURE_PLAYBOOK = $(firstword $(wildcard mig-reconfigure.yml playbooks/mig-reconfigure.yml))

.PHONY: sandbox-up sandbox-down

sandbox-up: setup testbed-up ## testbed cluster + simulated GPU nodes, agents, smoke runtime and workloads
	$(SANDBOX) up

sandbox-down: setup ## stop the sandbox's agents and smoke runtime (the cluster: make testbed-down)
	$(SANDBOX) down

demo: sandbox-up ## sandbox, then site.yml, mig-reconfigure.yml profile=all-balanced, validation table
	$(DEMO_PLAYBOOK) site.yml
ifneq ($(MIG_RECONFIGURE_PLAYBOOK),)
	$(DEMO_PLAYBOOK) $(MIG_RECONFIGURE_PLAYBOOK) -e profile=all-balanced
else
	@echo "[demo] mig-reconfigure.yml is not there yet: skipping the all-balanced rollout"
endif
	$(DEMO_PLAYBOOK) site.yml --tags validate
	@echo "[demo] cluster left running: export KUBECONFIG=$(CURDIR)/.testbed/kubeconfig; stop it with make demo-down"

demo-down: setup ## stop the sandbox and the testbed cluster (no process left)
	-$(SANDBOX) down
	$(MAKE) --no-print-directory testbed-down

# Demo: the sandbox (testbed cluster, NVIDIA's GPU Operator controller, simulated GPU nodes, agents, smoke runtime, workloads) and the
# playbooks run as a user runs them. The cluster stays up until `make demo-down`.
# TESTBED_DIR (mk/testbed.mk) and SANDBOX_DIR move the cluster and the simulated hosts, e.g. for a second sandbox.
SANDBOX_DIR ?= $(CURDIR)/.sandbox
DEMO_TESTBED_BIN = $(shell tests/testbed/build.sh path)
# The sandbox script and inventories/sandbox read the same two directories from these variables;
# helm and kubectl of the testbed on PATH; helm's cache and config inside the sandbox dir, not in $HOME.
DEMO_ENV = GPUFLEET_TESTBED_DIR=$(TESTBED_DIR) GPUFLEET_SANDBOX_DIR=$(SANDBOX_DIR) \
	PATH="$(DEMO_TESTBED_BIN):$$PATH" KUBECONFIG=$(TESTBED_DIR)/kubeconfig \
	HELM_CACHE_HOME=$(SANDBOX_DIR)/helm/cache HELM_CONFIG_HOME=$(SANDBOX_DIR)/helm/config \
	HELM_DATA_HOME=$(SANDBOX_DIR)/helm/data
SANDBOX = $(DEMO_ENV) $(BIN)/python -m tests.testbed.sandbox.sandbox
DEMO_PLAYBOOK = $(DEMO_ENV) $(BIN)/ansible-playbook -i inventories/sandbox
# The nodes the demo's rollout changes: the others keep whole GPUs for the sandbox's whole-GPU workloads.
DEMO_MIG_NODES ?= sandbox-h100-a,sandbox-h100-b
MIG_RECONFIGURE_PLAYBOOK = $(firstword $(wildcard mig-reconfigure.yml playbooks/mig-reconfigure.yml))

.PHONY: sandbox-up sandbox-down

sandbox-up: setup testbed-up testbed-operator-build ## testbed cluster + simulated GPU nodes, NVIDIA's GPU Operator controller, agents, smoke runtime and workloads
	$(SANDBOX) up

sandbox-down: setup ## stop the sandbox's agents and smoke runtime (the cluster: make testbed-down)
	$(SANDBOX) down

demo: sandbox-up ## sandbox, site.yml, mig-reconfigure.yml all-balanced (refused on every node, then on the H100s), validation table
	$(DEMO_PLAYBOOK) site.yml
ifneq ($(MIG_RECONFIGURE_PLAYBOOK),)
	@echo "[demo] all-balanced on every GPU node would leave the whole-GPU pods nowhere to run: refused before any change"
	@if $(DEMO_PLAYBOOK) $(MIG_RECONFIGURE_PLAYBOOK) -e profile=all-balanced; then \
		echo "[demo] expected the rollout to be refused (pods would be stranded)"; exit 1; fi
	@echo "[demo] all-balanced on the two H100 nodes only: the A100 and H200 nodes keep whole GPUs for the whole-GPU pods"
	$(DEMO_PLAYBOOK) $(MIG_RECONFIGURE_PLAYBOOK) -e profile=all-balanced -e nodes=$(DEMO_MIG_NODES)
	$(DEMO_ENV) kubectl wait --for=condition=Ready pod --all -n sandbox-workloads --timeout=180s
else
	@echo "[demo] mig-reconfigure.yml is not there yet: skipping the all-balanced rollout"
endif
	$(DEMO_PLAYBOOK) site.yml --tags validate
	@echo "[demo] cluster left running: export KUBECONFIG=$(TESTBED_DIR)/kubeconfig; stop it with make demo-down"

demo-down: setup ## stop the sandbox and the testbed cluster (no process left)
	-$(SANDBOX) down
	$(MAKE) --no-print-directory testbed-down

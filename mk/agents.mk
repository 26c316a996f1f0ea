# Simulated GPU Operator operand agents (tests/testbed/agents); NVIDIA's real controller and chart: mk/testbed.mk.
AGENTS_PIDFILE ?= $(CURDIR)/.testbed/agents.pid
AGENTS_HOSTS_DIR ?= $(CURDIR)/.testbed/hosts
AGENTS_KUBECONFIG ?= $(CURDIR)/.testbed/kubeconfig
AGENTS_CLI = $(BIN)/python -m tests.testbed.agents

.PHONY: agents-start agents-stop agents-status agents-test

agents-start: setup gpusim-build testbed-nvidia-build ## start the simulated GPU Operator agents against .testbed/kubeconfig (pidfile .testbed/agents.pid)
	$(AGENTS_CLI) start --kubeconfig $(AGENTS_KUBECONFIG) --hosts-dir $(AGENTS_HOSTS_DIR) \
	  --nvml-lib-dir "$$(tests/testbed/gpusim/build.sh)" --gfd-binary "$$(tests/testbed/build-nvidia.sh bin gpu-feature-discovery)" --pidfile $(AGENTS_PIDFILE)

agents-stop: setup ## stop the agents started by agents-start
	$(AGENTS_CLI) stop --pidfile $(AGENTS_PIDFILE)

agents-status: setup ## is the agents process running
	$(AGENTS_CLI) status --pidfile $(AGENTS_PIDFILE)

agents-test: setup gpusim-build testbed-build testbed-operator-build testbed-nvidia-build ## agent logic + protocol tests on a fresh testbed cluster
	$(BIN)/python -m pytest tests/integration/agents -q

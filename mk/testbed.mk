# Testbed: real Kubernetes control plane + kwok nodes built from Go modules (docs/testbed.md).
TESTBED_NAME ?= gpufleet
TESTBED_DIR ?= $(CURDIR)/.testbed
TESTBED_CLUSTER = $(BIN)/python -m tests.testbed.cluster --name $(TESTBED_NAME) --dir $(TESTBED_DIR)

.PHONY: testbed-build testbed-operator-build testbed-nvidia-build testbed-up testbed-down testbed-status testbed-env

testbed-build: ## build or reuse the cached testbed binaries (k8s, etcd, kwok, helm; cold ~10 min on 2 cores)
	tests/testbed/build.sh all

testbed-operator-build: ## build or reuse NVIDIA's GPU Operator controllers and extract their charts and assets: v26.7.0 (the production pin) offline from ../shared/nvidia/src, v25.3.4 from its Go module
	tests/testbed/build-operator.sh all

testbed-nvidia-build: gpusim-build ## build or reuse, offline from ../shared/nvidia/src, NVIDIA's mig-parted v0.15.0 (nvidia-mig-manager, nvidia-mig-parted) and k8s-device-plugin v0.20.0 (nvidia-device-plugin, config-manager, gpu-feature-discovery, config checker); cgo, so after gpusim-build's gcc
	tests/testbed/build-nvidia.sh all

testbed-up: setup testbed-build ## start a kwokctl cluster on 127.0.0.1; kubeconfig in .testbed/kubeconfig
	$(TESTBED_CLUSTER) up

testbed-down: setup ## stop the testbed cluster (and the real GPU Operator controller) and check no process is left
	$(TESTBED_CLUSTER) down

testbed-status: setup ## health of each testbed component (exit 1 if one is unhealthy)
	$(TESTBED_CLUSTER) status

testbed-env: setup ## print exports (KUBECONFIG, PATH with the testbed binaries) for a shell: eval $$(make -s testbed-env)
	@$(TESTBED_CLUSTER) env

INTEGRATION_DEPS += testbed-build testbed-operator-build testbed-nvidia-build

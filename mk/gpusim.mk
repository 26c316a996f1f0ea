# Simulated NVML (tests/testbed/gpusim): libnvidia-ml.so.1 built from C into $(GPUFLEET_CACHE)/gpusim/<hash>/.
.PHONY: gpusim-build gpusim-test

gpusim-build: ## build the simulated NVML library (needs gcc; installed with apt-get when missing)
	@command -v $${CC:-gcc} >/dev/null || { echo "[gpusim] installing gcc"; \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -qq && \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -qq gcc libc6-dev >/dev/null; }
	tests/testbed/gpusim/build.sh

gpusim-test: setup gpusim-build ## simulated NVML fidelity and pynvml-level tests only (no cluster needed)
	$(BIN)/python -m pytest tests/integration/gpusim -q

INTEGRATION_DEPS += gpusim-build

# Fleet MIG reconfiguration (gpu_drain, node_mig_config, mig_rollout, mig-reconfigure.yml).
BENCH_RECONFIGURE_ARGS ?= --nodes 50 --max-unavailable 10 --apply-seconds 30 --naive-nodes 4 --memory-nodes 200 --memory-max-unavailable 20

.PHONY: bench bench-reconfigure reconfigure-test

bench: bench-reconfigure ## benchmarks (not tests): figures for the docs

bench-reconfigure: setup testbed-build gpusim-build ## rollout vs critical-path bound, API requests/node, memory, naive ratio
	mkdir -p build && $(BIN)/python tests/benchmarks/bench_reconfigure.py $(BENCH_RECONFIGURE_ARGS) --out build/bench-reconfigure.json

reconfigure-test: setup testbed-build gpusim-build ## unit + integration tests of the reconfiguration only
	$(BIN)/python -m pytest tests/unit/plugins/module_utils/reconfigure tests/integration/reconfigure -q

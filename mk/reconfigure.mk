# Fleet MIG reconfiguration (gpu_drain, node_mig_config, mig_rollout, mig-reconfigure.yml).
# Benchmarks, not tests (no assertion on time; `make test` runs neither): figures for docs/reconfigure.md.
# bench-quick: a few minutes on a fresh machine. bench: 1000 nodes plus the fair peer comparison at 200 (~1 h on 2 cores).
BENCH_QUICK_ARGS ?= --nodes 50 --max-unavailable 10 --apply-seconds 30
BENCH_RECONFIGURE_ARGS ?= --nodes 1000 --max-unavailable 50 --apply-seconds 30 --fair-nodes 200 --fair-max-unavailable 20 --naive-nodes 4

.PHONY: bench bench-quick bench-reconfigure reconfigure-test

bench: bench-reconfigure ## benchmarks (not tests): figures for the docs

bench-reconfigure: setup testbed-build gpusim-build report-deps ## 1000 nodes: plan, rollout vs bound, API requests/node, RSS, report, inventory, validate (host read and dcgm), agents' lag; fair peer comparison at 200
	mkdir -p build && $(BIN)/python tests/benchmarks/bench_reconfigure.py $(BENCH_RECONFIGURE_ARGS) --out build/bench-reconfigure.json --md build/bench-reconfigure.md

bench-quick: setup testbed-build gpusim-build report-deps ## the same figures over 50 nodes (a few minutes)
	mkdir -p build && $(BIN)/python tests/benchmarks/bench_reconfigure.py $(BENCH_QUICK_ARGS) --out build/bench-quick.json --md build/bench-quick.md

reconfigure-test: setup testbed-build gpusim-build ## unit + integration tests of the reconfiguration only
	$(BIN)/python -m pytest tests/unit/plugins/module_utils/reconfigure tests/integration/reconfigure -q

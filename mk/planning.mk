# MIG planning / NVML part (gpu_info, mig_plan, mig_apply). Included by the main Makefile.
.PHONY: bench-gpu-info

bench-gpu-info: setup ## time gpu_info's NVML read against bare pynvml on a simulated 8x H200 host
	@lib=$$(tests/testbed/gpusim/build.sh); state=$$(mktemp -d)/host.state; \
	$(BIN)/python -m tests.testbed.gpusim.simhost create --state $$state --model "NVIDIA H200" --count 8 >/dev/null; \
	LD_LIBRARY_PATH=$$lib GPUFLEET_SIM_NVML_STATE=$$state $(BIN)/python tests/benchmarks/bench_gpu_info.py --repeat 20; \
	rm -rf $$(dirname $$state)

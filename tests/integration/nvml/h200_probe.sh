#!/usr/bin/env bash
# Read-only probe of a real NVIDIA GPU host (run once on the lent H200 through the device tool).
# Never enables/disables MIG, creates instances, resets or changes any GPU setting.
# Writes into $OUT: nvidia-smi-q.txt, nvidia-smi-mig-lgip.txt, nvidia-smi-mig-lgipp.txt, probe.json,
# probe.log, gpu_info_direct.json, bench_gpu_info.json.
set -uo pipefail
OUT=${OUT:-/tmp/h200-probe}; mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/../../.." && pwd); cd "$root" || exit 1
mkdir -p .collections/ansible_collections/gpufleet
ln -sfn ../../.. .collections/ansible_collections/gpufleet/gpu_operator
export ANSIBLE_CONFIG=$root/ansible.cfg PYTHONUNBUFFERED=1
nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1
nvidia-smi mig -lgip >"$OUT/nvidia-smi-mig-lgip.txt" 2>&1
nvidia-smi mig -lgipp >"$OUT/nvidia-smi-mig-lgipp.txt" 2>&1
python3 -c 'import sys, ansible, pynvml; print(sys.version.split()[0], ansible.__file__, pynvml.__file__)'
# The module code run directly, as AnsiballZ would run it, so a result comes back even without ansible.
echo '{"ANSIBLE_MODULE_ARGS": {}}' >/tmp/gpu_info_args.json
PYTHONPATH=$root/.collections:${PYTHONPATH:-} python3 plugins/modules/gpu_info.py /tmp/gpu_info_args.json \
  >"$OUT/gpu_info_direct.json" 2>&1; echo "gpu_info direct rc=$?"
ansible-playbook -i localhost, tests/integration/nvml/h200_probe.yml >"$OUT/probe.log" 2>&1; echo "probe playbook rc=$?"
tail -n 4 "$OUT/probe.log"
python3 tests/benchmarks/bench_gpu_info.py --repeat 20 --module >"$OUT/bench_gpu_info.json" 2>&1; echo "bench rc=$?"
cat "$OUT/bench_gpu_info.json"
head -c 600 "$OUT/nvidia-smi-mig-lgipp.txt"

#!/usr/bin/env bash
# The GPU suite (tests/gpu) on a machine with an NVIDIA GPU and a CUDA vLLM, one part at a time:
#   bash scripts/gpu_suite.sh smollm2|rehearsal|experiments|multi|all [PYTEST ARGS...]
# Each part writes into $OUT (or test-artifacts/): report-PART.md (what each test printed, written as
# it goes), pytest-PART.log, and gpu-suite-PART.tar.gz (the recordings: logs, /metrics, NVML samples,
# planner comparisons, experiment results; sanitize them with scripts/sanitize_recording.py before
# they become fixtures). $GPU_SUITE_SECONDS (default 560) stops the part with Ctrl-C's signal, so its
# servers are stopped and what it recorded is packed. CI has no GPU: there the suite skips, with its reason.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
shift || true
out=${OUT:-test-artifacts}
work=$(mktemp -d)/gpu-suite-$part
mkdir -p "$out" "$work"
case "$part" in
  smollm2) tests=tests/gpu/test_gpu_1_smollm2.py ;;
  rehearsal) tests=tests/gpu/test_gpu_2_rehearsal.py ;;
  experiments) tests=tests/gpu/test_gpu_3_experiments.py ;;
  multi) tests=tests/gpu/test_gpu_4_multi_gpu.py ;;
  all) tests=tests/gpu ;;
  *) echo "usage: gpu_suite.sh smollm2|rehearsal|experiments|multi|all [PYTEST ARGS...]" >&2; exit 2 ;;
esac
# NVLink multicast stays off in every server the suite starts: the workbench carries these to them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 WORKBENCH_GPU_REPORT=$work WORKBENCH_GPU_REPORT_FILE=$out/report-$part.md
started=$(date +%s)
timeout -s INT -k 30 "${GPU_SUITE_SECONDS:-560}" ${PYTHON:-python3} -m pytest -p no:cacheprovider -m gpu -v -rA \
  $tests "$@" 2>&1 | tee "$out/pytest-$part.log"
rc=${PIPESTATUS[0]}
echo "gpu suite part $part: exit $rc in $(( $(date +%s) - started )) s" | tee -a "$out/pytest-$part.log"
tar -czf "$out/gpu-suite-$part.tar.gz" -C "$work" .
exit "$rc"

#!/usr/bin/env bash
# gpu-check.sh: the prepared GPU acceptance run of the CUDA path (issue 46):
# correctness against the CPU, speed against torch.compile, memory against
# `llmc plan`, in one command that finishes in under 8 minutes.
#
#   bash scripts/gpu-check.sh --prepare [--build build] [--prepared build-gpu] [--short]
#       here (LLVM, MLIR, the CUDA toolkit's NVRTC, no GPU): builds nothing,
#       takes the binaries from --build, writes the artifacts, inputs, CPU
#       references, plans, exported binaries and the NVRTC kernel cache into
#       build-gpu/ (ignored by git; under the 64 MiB a GPU call carries)
#   bash scripts/gpu-check.sh --dry-run [--prepared build-gpu]
#       here, without a GPU: every binary and input there, the CUDA
#       programs compiled by NVRTC, the plan of checks with their budgets
#   bash scripts/gpu-check.sh RESULTS_DIR [--prepared build-gpu] [--only a,b]
#       on the GPU machine: every check with a hard timeout, never stopping
#       at a failure; writes RESULTS_DIR/gpu-results.json, gpu-results.md
#       and gpu-check.log
#
# Before the GPU call, here (minutes: bench/README.md has the time):
#   cmake --build build --target llmc llmc-cuda-run llmc-cpu-reference \
#     bench-sparse-cuda bench-attention-cuda
#   bash scripts/gpu-check.sh --prepare && bash scripts/gpu-check.sh --dry-run
# The lead's device call (the `run` tool), first thing when a GPU is lent:
#   run(command='bash scripts/gpu-check.sh "$OUT"', carry=["build-gpu"],
#       timeout_s=540)
# then copy $OUT's gpu-results.md into bench/README.md's GPU section.
# Details: docs/cuda.md, "The acceptance run".
set -u
here=$(cd "$(dirname "$0")" && pwd)
python=${LLMC_GPU_CHECK_PYTHON:-python3}
if [ "${1:-}" = "--prepare" ]; then
  shift
  exec "$python" "$here/gpu_check_prepare.py" "$@"
fi
exec "$python" "$here/gpu_check.py" "$@"

#!/usr/bin/env bash
# Installs every system package llmc builds and tests with; safe to run again.
# The CUDA 13 toolkit is optional and not installed here: CMake enables the
# CUDA parts when it finds one (nvcc, NVRTC, cuBLASLt, NCCL).
set -euo pipefail

packages=(
  cmake ninja-build ccache g++ python3    # build
  llvm-22-dev libmlir-22-dev mlir-22-tools # LLVM/MLIR 22, mlir-tblgen
  llvm-22-tools                            # lit, FileCheck, not
  libgtest-dev libgmock-dev                # unit tests
  libopenblas-dev libblis-pthread-dev      # CPU BLAS peers: bench/sgemm-peers
  libdnnl-dev                              # oneDNN, the third peer
  flatbuffers-compiler libflatbuffers-dev  # the artifact format
  openmpi-bin libopenmpi-dev               # MPI collectives (runtime/Comm),
                                           # mpirun for multi-rank runs/tests
  clang-22 libclang-rt-22-dev              # libFuzzer + ASan/UBSan: scripts/fuzz.sh
  libboost1.81-dev nlohmann-json3-dev      # the inference server (runtime/Serve):
                                           # Beast/Asio and JSON, header-only
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null |
      grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages are installed"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); fi
echo "setup: installing ${missing[*]}"
"${sudo[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q "${missing[@]}"
echo "setup: done"

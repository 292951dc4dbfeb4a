#!/usr/bin/env bash
# Configures (CMake + Ninja, against LLVM/MLIR 22) and builds llmc into build/.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${LLMC_BUILD_DIR:-build}
echo "build: configuring $build/"
cmake -G Ninja -B "$build" -S . -DCMAKE_BUILD_TYPE=Release | grep -E "llmc:|Error|error" || true
echo "build: compiling (binaries land in $build/bin)"
start=$SECONDS
cmake --build "$build"
echo "build: done in $((SECONDS - start)) s"

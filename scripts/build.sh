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

# Put llmc on PATH: `cmake --install` into /usr/local (bin/llmc,
# bin/llmc-opt, share/llmc/hardware.yaml) when this user may write there;
# otherwise say how.
prefix=${LLMC_INSTALL_PREFIX:-/usr/local}
if [[ -w $prefix/bin || ( ! -e $prefix/bin && -w $prefix ) ]]; then
  cmake --install "$build" --prefix "$prefix" > /dev/null
  echo "build: installed llmc and llmc-opt into $prefix/bin ($(command -v llmc || echo "add $prefix/bin to PATH"))"
else
  echo "build: llmc is $build/bin/llmc; to put it on PATH:" \
    "cmake --install $build --prefix ~/.local (then ~/.local/bin on PATH)"
fi

#!/usr/bin/env bash
# Installs, builds and runs the main job on the bundled default: emit the
# tiny GPT of examples/tiny.yaml as llmc IR, compile (verify) it, and print
# its IR summary and parameter count; then the same summary for GPT-2 124M.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh
build=${LLMC_BUILD_DIR:-build}
mkdir -p "$build/demo"
llmc=$build/bin/llmc
echo
echo "demo: \$ llmc emit-model examples/tiny.yaml -o $build/demo/tiny.mlir"
"$llmc" emit-model examples/tiny.yaml -o "$build/demo/tiny.mlir"
echo "demo: \$ llmc compile $build/demo/tiny.mlir"
"$llmc" compile "$build/demo/tiny.mlir"
echo "demo: \$ llmc info $build/demo/tiny.mlir"
"$llmc" info "$build/demo/tiny.mlir"
echo
echo "demo: \$ llmc info gpt2 --summary"
"$llmc" info gpt2 --summary

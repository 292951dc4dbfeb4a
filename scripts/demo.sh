#!/usr/bin/env bash
# Installs, builds and runs the main job on the bundled default: the tiny GPT
# of examples/tiny.yaml is emitted as llmc IR, compiled to an artifact
# (fusion, kernels, memory plan), run once on the CPU (loss, measured memory
# against the plan) and sampled from. Training arrives with `llmc run`; until
# then the weights are the seeded GPT-2 initialization and the text is noise.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh
build=${LLMC_BUILD_DIR:-build}
mkdir -p "$build/demo"
llmc=$build/bin/llmc
run() {
  echo
  echo "demo: \$ llmc$(printf ' %q' "$@")"
  "$llmc" "$@"
}
run emit-model examples/tiny.yaml --batch 4 --seq-len 64 -o "$build/demo/tiny.mlir"
run info "$build/demo/tiny.mlir" --summary
run compile "$build/demo/tiny.mlir" -o "$build/demo/tiny.llmc"
run inspect "$build/demo/tiny.llmc" --run
run generate "$build/demo/tiny.llmc" --prompt "Once upon a time" --max-tokens 64 --top-k 40 --seed 1

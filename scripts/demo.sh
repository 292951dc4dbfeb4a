#!/usr/bin/env bash
# Installs, builds and runs the main job on the bundled default: `llmc run`
# trains the tiny GPT of examples/tiny.yaml on the bundled corpus
# (examples/train-tiny.yaml: byte-level, AdamW, cosine schedule) for a few
# hundred steps on the CPU. It prints the loss falling step by step, a text
# sample at each evaluation, and leaves runs/train-tiny/ behind: metrics.jsonl,
# loss.svg (open it in a browser) and checkpoints/. Safe to run again: each
# run starts afresh.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh
build=${LLMC_BUILD_DIR:-build}
llmc=$build/bin/llmc
out=${LLMC_DEMO_OUT:-runs/train-tiny}
rm -rf "$out"
run() {
  echo
  echo "demo: \$ llmc$(printf ' %q' "$@")"
  "$llmc" "$@"
}
start=$SECONDS
run run examples/train-tiny.yaml --out "$out"
echo
echo "demo: trained in $((SECONDS - start)) s; the loss curve is $out/loss.svg," \
  "the metrics $out/metrics.jsonl, the checkpoints $out/checkpoints/"

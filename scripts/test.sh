#!/usr/bin/env bash
# Installs, builds and runs every test: lit + FileCheck and the GoogleTest
# unit tests, through `ninja check-llmc`.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/build.sh
build=${LLMC_BUILD_DIR:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "test: running lit and unit tests"
status=0
cmake --build "$build" --target check-llmc 2>&1 | tee "$log" || status=$?
passed=$(sed -nE 's/^ *Passed *: *([0-9]+).*/\1/p' "$log" | tail -1)
failed=$(sed -nE 's/^ *Failed *: *([0-9]+).*/\1/p' "$log" | tail -1)
echo "${passed:-0} passed, ${failed:-0} failed"
if [[ $status -ne 0 || -z $passed ]]; then
  echo "test: FAILED" >&2
  exit 1
fi

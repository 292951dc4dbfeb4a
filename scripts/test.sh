#!/usr/bin/env bash
# Installs, builds and runs every test: lit + FileCheck and the GoogleTest
# unit tests, through `ninja check-llmc`; with clang-22 installed that
# includes a deterministic short run of every libFuzzer target (test/fuzz,
# built sanitized into build/fuzz/ by check-llmc).
#   scripts/test.sh              build/ and its tests (what CI runs)
#   scripts/test.sh --sanitize   the same tests against build-asan/: all of
#                                llmc built with clang-22 under ASan + UBSan
#                                (-DLLMC_SANITIZE=ON); a sanitizer report
#                                aborts the test. Not run by CI: on 2 cores
#                                8-12 min to build cold and 12 to test
#                                (docs/reliability.md).
#   scripts/test.sh --sanitize-subset
#                                what CI runs after the plain suite: in
#                                build-asan/, only llmc, llmc-opt, the export
#                                runtime and the loaders' unit tests, and the
#                                lit tests of hostile input, the loaders,
#                                export and serve (the fuzz targets' corpora
#                                already run sanitized in the plain suite).
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
subset=0
for arg in "$@"; do
  case $arg in
    --sanitize) sanitize=1 ;;
    --sanitize-subset) sanitize=1; subset=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# The sanitized subset: unit tests of the loaders (artifacts, weights,
# checkpoints) and the lit tests that feed llmc hostile or foreign input
# and run exported binaries and their server.
subset_targets=(llmc llmc-opt llmc-export-runtime ArtifactTests WeightsTests
  CheckpointTests)
subset_lit='tools/(hostile|hostile-input|nesting|artifact-errors|config-errors|config-errors-text|config-sizes|compile-errors|run-errors|tokenizer|export-cpu|export-errors|serve|serve-hostile|soak-server)\.test|(ArtifactTests|WeightsTests|CheckpointTests)'

# The sanitized build directory ($build): clang-22, ASan + UBSan.
configure_sanitized() {
  cmake -G Ninja -B "$build" -S . -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_C_COMPILER=clang-22 \
    -DLLMC_SANITIZE=ON -DLLMC_FUZZ_TESTS=OFF | grep -E "llmc:|Error|error" || true
}

bash scripts/setup.sh
if (( subset )); then
  build=${LLMC_ASAN_BUILD_DIR:-build-asan}
  echo "test: configuring $build/ (clang-22, ASan + UBSan), the CI subset"
  configure_sanitized
  start=$SECONDS
  cmake --build "$build" --target "${subset_targets[@]}"
  echo "test: built the subset in $build/ in $((SECONDS - start)) s"
  start=$SECONDS
  status=0
  /usr/lib/llvm-22/bin/lit -sv "$build/test" "$build/test/unit" \
    --filter "$subset_lit" || status=$?
  echo "test: sanitized subset ran in $((SECONDS - start)) s"
  if ((status != 0)); then
    echo "test: FAILED (sanitized subset)" >&2
    exit 1
  fi
  exit 0
fi
if (( sanitize )); then
  build=${LLMC_ASAN_BUILD_DIR:-build-asan}
  echo "test: configuring $build/ (clang-22, ASan + UBSan)"
  configure_sanitized
  start=$SECONDS
  # Everything check-llmc runs, built before the clock of the tests starts.
  cmake --build "$build" --target llmc-test-deps
  echo "test: built $build/ in $((SECONDS - start)) s"
else
  bash scripts/build.sh
  build=${LLMC_BUILD_DIR:-build}
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "test: running lit and unit tests"
start=$SECONDS
status=0
cmake --build "$build" --target check-llmc 2>&1 | tee "$log" || status=$?
passed=$(sed -nE 's/^ *Passed *: *([0-9]+).*/\1/p' "$log" | tail -1)
failed=$(sed -nE 's/^ *Failed *: *([0-9]+).*/\1/p' "$log" | tail -1)
echo "${passed:-0} passed, ${failed:-0} failed in $((SECONDS - start)) s"
if [[ $status -ne 0 || -z $passed ]]; then
  echo "test: FAILED" >&2
  exit 1
fi

#!/usr/bin/env bash
# Fuzzes llmc's readers of user input (test/fuzz): configures and builds
# build-fuzz/ (clang-22, ASan + UBSan + libFuzzer, only the readers'
# libraries, against Debian's uninstrumented LLVM/MLIR) if needed, then runs
# each target, or TARGET, for SECONDS (default 60; --short: 5). Targets:
# safetensors llmc-checkpoint checkpoint token-shard text-data bpe-files
# artifact mlir-module model-yaml train-yaml. New inputs that reach new code
# go to build-fuzz/corpus/TARGET (the committed seeds in
# test/fuzz/corpus/TARGET are only read); a crashing input is kept as
# build-fuzz/crashes/TARGET-* and the script exits 1. The test suite runs
# every target for a fixed number of inputs (test/fuzz/TARGET.test); this
# is the long run.
#   scripts/fuzz.sh                      every target, 60 s each
#   scripts/fuzz.sh --short              every target, 5 s each
#   scripts/fuzz.sh mlir-module 600      one target for ten minutes
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(safetensors llmc-checkpoint checkpoint token-shard text-data
         bpe-files artifact mlir-module model-yaml train-yaml)
seconds=60
selected=()
for arg in "$@"; do
  case $arg in
    --short) seconds=5 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *[!0-9]*)
      if [[ ! " ${targets[*]} " == *" $arg "* ]]; then
        echo "fuzz: unknown target '$arg' (targets: ${targets[*]})" >&2
        exit 2
      fi
      selected+=("$arg") ;;
    *) seconds=$arg ;;
  esac
done
(( ${#selected[@]} )) || selected=("${targets[@]}")

build=${LLMC_FUZZ_BUILD_DIR:-build-fuzz}
cxx=${LLMC_FUZZ_CXX:-clang++-22}
if ! command -v "$cxx" > /dev/null; then
  echo "fuzz: $cxx not found; run scripts/setup.sh (clang-22, libclang-rt-22-dev)" >&2
  exit 2
fi
if [[ ! -f $build/build.ninja ]]; then
  echo "fuzz: configuring $build/ (LLMC_FUZZ=ON, $cxx)"
  cmake -G Ninja -B "$build" -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="${cxx/clang++/clang}" \
    -DLLMC_FUZZ=ON > /dev/null
fi
start=$SECONDS
cmake --build "$build" > "$build/fuzz-build.log" 2>&1 ||
  { cat "$build/fuzz-build.log"; exit 2; }
echo "fuzz: built $build/ in $((SECONDS - start)) s; ${seconds} s per target"

mkdir -p "$build/crashes"
status=0
printf '%-16s %10s %8s %6s %6s %7s  %s\n' target runs exec/s cov ft corpus result
for target in "${selected[@]}"; do
  corpus=$build/corpus/$target
  log=$build/fuzz-$target.log
  mkdir -p "$corpus"
  # -timeout: an input that takes over 10 s is a hang; -rss_limit_mb: one
  # that needs 2 GiB is a finding too (the readers size nothing from a
  # header without checking it against the file).
  # safetensors writes each file it reads back through writeFileAtomically,
  # and LLVM keeps a node per file it was to remove on a signal
  # (sys::RemoveFileOnSignal): every run then looks like a possible leak
  # that libFuzzer re-runs under LeakSanitizer, 10x slower.
  extra=()
  [[ $target == safetensors ]] && extra=(-detect_leaks=0)
  rc=0
  "$build/bin/fuzz-$target" "$corpus" "test/fuzz/corpus/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 "${extra[@]}" \
    -artifact_prefix="$build/crashes/$target-" -print_final_stats=1 \
    > "$log" 2>&1 || rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -1)
  execs=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | tail -1)
  field() { sed -nE "s|.* $1: *([0-9a-zA-Z/]+).*|\1|p" <<< "$done_line"; }
  if (( rc == 0 )); then
    result=ok
  else
    status=1
    crash=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -1)
    result="FAILED (exit $rc): ${crash:-see $log}"
  fi
  printf '%-16s %10s %8s %6s %6s %7s  %s\n' "$target" "${runs:-?}" \
    "${execs:-?}" "$(field cov)" "$(field ft)" "$(field corp)" "$result"
  if (( rc != 0 )); then
    grep -E 'ERROR:|SUMMARY:|runtime error:|^fuzz:' "$log" | head -5 | sed 's/^/    /'
  fi
done
exit $status

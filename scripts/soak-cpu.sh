#!/usr/bin/env bash
# CPU load soak: llmc's speed next to busy processes, and an oversubscribed
# mpirun. Prints, for the tiny model (examples/tiny.yaml, exported with
# llmc export), its batch-1 decode tokens/s quiet and next to --hogs busy
# processes, and for `llmc run examples/train-tiny.yaml` the wall time
# quiet and next to them, each with the slowdown (contended / quiet, the
# median of --reps pairs, each pair run back to back so that a machine
# whose load drifts meets both alike); then `mpirun -np 2` of train-tiny
# with --threads 2 per rank on the machine's cores (more threads than
# cores, next to the hogs too) and checks that it finishes.
#
# Usage: scripts/soak-cpu.sh [--short] [--hogs N] [--reps N] [--threads N]
#                            [--max-slowdown X] [--dir DIR]
#   --short           a few seconds of each: decode 200 tokens, 12 steps,
#                     one pair (the lit test's mode: test/tools/soak-cpu-short.test)
#   --hogs N          busy processes beside llmc (default: one per CPU)
#   --reps N          quiet/contended pairs per measure (default 5; --short 1)
#   --threads N       llmc's threads (default: one per CPU)
#   --max-slowdown X  exit 1 if a median slowdown exceeds X (default: only
#                     print it; the issue's target is 2.5)
#   --dir DIR         where the runs go (default: a temporary directory,
#                     removed at the end)
# $LLMC is the binary (default: build/bin/llmc, else llmc on PATH); llmc
# export needs the export runtime beside it (../lib, the build tree's).
# A hog is a shell loop that never sleeps or makes a system call: the
# neighbour that hurts a thread pool most (a worker it preempts keeps its
# core for a whole time slice).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

short=0 hogs="" reps="" threads="" max="" dir="" keep=0
while (($#)); do
  case $1 in
    --short) short=1 ;;
    --hogs) hogs=$2; shift ;;
    --reps) reps=$2; shift ;;
    --threads) threads=$2; shift ;;
    --max-slowdown) max=$2; shift ;;
    --dir) dir=$2; keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak-cpu: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
cpus=$(nproc)
hogs=${hogs:-$cpus} threads=${threads:-$cpus}
if ((short)); then reps=${reps:-1} tokens=200 steps=12 mpisteps=6
else reps=${reps:-5} tokens=2000 steps=60 mpisteps=30; fi
for n in "$hogs" "$reps" "$threads"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "soak-cpu: expected a count, got '$n'" >&2; exit 2; }
done
llmc=$root/build/bin/llmc
[[ -x $llmc ]] || llmc=$(command -v llmc || true)
llmc=${LLMC:-$llmc}
[[ -x $llmc ]] || { echo "soak-cpu: no llmc binary ('$llmc'); build first or set LLMC" >&2; exit 2; }
if [[ -z $dir ]]; then dir=$(mktemp -d "${TMPDIR:-/tmp}/llmc-soak-cpu.XXXXXX"); fi
mkdir -p "$dir"
export LLMC_CACHE_DIR=${LLMC_CACHE_DIR:-$dir/cache}

source "$root/scripts/busy-neighbours.sh"
cleanup() {
  hog_stop
  ((keep)) || rm -rf "$dir"
}
trap cleanup EXIT

seconds() { date +%s.%N; }

echo "soak-cpu: $cpus CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), llmc --threads $threads, $hogs busy processes beside it, $reps quiet/contended pairs; in $dir"

"$llmc" compile "$root/examples/tiny.yaml" -o "$dir/tiny.llmc" > "$dir/compile.log" 2>&1 ||
  { cat "$dir/compile.log"; exit 1; }
"$llmc" export "$dir/tiny.llmc" -o "$dir/tiny" > "$dir/export.log" 2>&1 ||
  { cat "$dir/export.log"; exit 1; }

decode() {
  "$dir/tiny" --bench --max-tokens "$tokens" --threads "$threads" > "$dir/decode.log" 2>&1 ||
    { cat "$dir/decode.log" >&2; return 1; }
  sed -n 's/^decode: .*, \([0-9.]*\) tokens\/s.*/\1/p' "$dir/decode.log"
}
train() {
  local start out=$dir/run
  rm -rf "$out"
  start=$(seconds)
  "$llmc" run "$root/examples/train-tiny.yaml" --max-steps "$steps" \
    --threads "$threads" --eval-interval 0 --checkpoint-interval 0 \
    --sample-tokens 0 --out "$out" > "$dir/train.log" 2>&1 ||
    { cat "$dir/train.log" >&2; return 1; }
  echo "$(seconds) - $start" | bc -l
}

# measure NAME UNIT HIGHER_IS_BETTER FUNCTION: the pairs, then the medians
# and the slowdown; fails past --max-slowdown.
failed=0
measure() {
  local name=$1 unit=$2 higher=$3 fn=$4 quiet=() busy=() q c r
  for ((r = 1; r <= reps; r++)); do
    q=$($fn)
    hog_start
    c=$($fn)
    hog_stop
    quiet+=("$q") busy+=("$c")
    printf 'soak-cpu: %s pair %d: quiet %.1f %s, contended %.1f %s\n' "$name" "$r" "$q" "$unit" "$c" "$unit"
  done
  q=$(printf '%s\n' "${quiet[@]}" | median)
  c=$(printf '%s\n' "${busy[@]}" | median)
  local slowdown
  if ((higher)); then slowdown=$(echo "$q / $c" | bc -l); else slowdown=$(echo "$c / $q" | bc -l); fi
  printf 'soak-cpu: %s: quiet %.1f %s, contended %.1f %s (medians): slowdown %.2fx\n' \
    "$name" "$q" "$unit" "$c" "$unit" "$slowdown"
  if [[ -n $max ]] && (($(echo "$slowdown > $max" | bc -l))); then
    echo "soak-cpu: FAILED: $name slowed down ${slowdown}x next to $hogs busy processes (--max-slowdown $max)" >&2
    failed=1
  fi
}

# Warm-up, not measured: the kernel cache and the sgemm peak's record (a
# first run on a machine measures the peak at start-up) are filled here.
decode > /dev/null
train > /dev/null

measure "decode (batch 1, $tokens tokens)" tokens/s 1 decode
measure "training ($steps steps of train-tiny)" s 0 train

# Two ranks with --threads 2 each on the machine's cores (oversubscribed),
# next to the hogs: it has to finish.
mpirun_sh=$root/scripts/mpirun.sh
if command -v mpirun > /dev/null; then
  hog_start
  start=$(seconds)
  if ! timeout 600 bash "$mpirun_sh" -np 2 "$llmc" run "$root/examples/train-tiny.yaml" \
      --max-steps "$mpisteps" --threads 2 --eval-interval 0 --checkpoint-interval 0 \
      --sample-tokens 0 --out "$dir/mpi" > "$dir/mpi.log" 2>&1; then
    hog_stop
    tail -20 "$dir/mpi.log" >&2
    echo "soak-cpu: FAILED: mpirun -np 2 x 2 threads did not finish" >&2
    exit 1
  fi
  hog_stop
  grep -q "^done: $mpisteps steps" "$dir/mpi.log" || { tail -20 "$dir/mpi.log" >&2; echo "soak-cpu: FAILED: mpirun run did not report $mpisteps steps" >&2; exit 1; }
  printf 'soak-cpu: mpirun -np 2 x --threads 2 on %d CPUs next to %d busy processes: %d steps finished in %.1f s\n' \
    "$cpus" "$hogs" "$mpisteps" "$(echo "$(seconds) - $start" | bc -l)"
else
  echo "soak-cpu: mpirun not found (scripts/setup.sh installs openmpi-bin): the oversubscribed run is skipped"
fi
exit $failed

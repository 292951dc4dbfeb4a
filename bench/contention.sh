#!/usr/bin/env bash
# bench-contention: llmc and PyTorch quiet and next to busy processes
# (bench/README.md): the tiny model's batch-1 decode, train-tiny's steps,
# and a two-rank data-parallel run with 2 threads a rank on the machine's
# cores (oversubscribed), each quiet and next to --hogs busy processes,
# with the slowdown.
#
#   bash bench/contention.sh [--short] [--build DIR] [--work DIR]
#                            [--repeats N] [--hogs N] [--no-torch]
#
# Each measure is --repeats (default 3) pairs run back to back (quiet, then
# contended, so that a machine whose load drifts meets both alike); the
# table has the medians. Same threads (one per CPU; 2 a rank for the
# two-rank runs), same busy neighbours (one shell loop per CPU that never
# sleeps nor makes a system call) for both:
# - decode: llmc's exported binary of examples/tiny.yaml (--bench, 2000
#   tokens) and bench/peers_contention.py decode (the same model in plain
#   torch operations, a key/value cache; 400 tokens) in tokens/s;
# - training: `llmc run examples/train-tiny.yaml --max-steps 60`, its
#   milliseconds a step (metrics.jsonl's elapsed_s) and the whole command's
#   wall time (the figure a user waits for: start-up and the sgemm peak's
#   re-measure included), and peers_contention.py train (the same step, 10
#   times) in milliseconds a step;
# - data parallel: scripts/mpirun.sh -np 2 llmc run ... --threads 2 (30
#   steps) and peers_contention.py ddp (torch.distributed gloo, 2 processes
#   x 2 threads, 6 steps), milliseconds a step.
# PyTorch is the one of $LLMC_TORCH_PYTHON, else of the virtual environment
# scripts/setup-peers.sh makes ($HOME/.cache/llmc/torch, PyTorch 2.x from
# PyPI), else of python3; its rows are skipped with a note where none
# imports, or with --no-torch. OMP_* and the rest of the environment are
# passed on as they are.
# --short: one pair, 200 tokens, 6 steps (seconds; a smoke test).
set -euo pipefail

bench_repeats=3
hogs="" notorch=0
args=()
while (($#)); do
  case $1 in
    --hogs) hogs=$2; shift ;;
    --no-torch) notorch=1 ;;
    *) args+=("$1") ;;
  esac
  shift
done
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_parse bench-contention "${args[@]+"${args[@]}"}"
llmc=$build/bin/llmc
[[ -x $llmc ]] || { echo "bench-contention: $llmc not built (ninja -C build llmc llmc-export-runtime; --build DIR)" >&2; exit 1; }
bench_workdir bench-contention
export LLMC_CACHE_DIR=${LLMC_CACHE_DIR:-$work/cache}
cpus=$(nproc)
hogs=${hogs:-$cpus}
# PyTorch runs fewer tokens and steps (its rates are compared): next to
# busy processes its OpenMP threads make it far slower.
if ((short)); then repeats=1 tokens=200 steps=6 dpsteps=4 ttokens=100 tsteps=3 tdpsteps=2
else tokens=2000 steps=60 dpsteps=30 ttokens=400 tsteps=10 tdpsteps=6; fi

torch_python=""
((notorch)) || for candidate in "${LLMC_TORCH_PYTHON:-}" "$HOME/.cache/llmc/torch/bin/python" "$(command -v python3 || true)"; do
  if [[ -n $candidate && -x $candidate ]] && "$candidate" -c 'import torch' 2>/dev/null; then
    torch_python=$candidate
    break
  fi
done
python=$(command -v python3)
bench_machine_facts

source "$src/scripts/busy-neighbours.sh"
trap 'hog_stop; ((keep)) || rm -rf "$work"' EXIT
now() { date +%s.%N; }

"$llmc" compile "$src/examples/tiny.yaml" -o "$work/tiny.llmc" > /dev/null
"$llmc" export "$work/tiny.llmc" -o "$work/tiny" > /dev/null

# Each measure prints one number on stdout.
llmc_decode() {
  "$work/tiny" --bench --max-tokens "$tokens" --threads "$cpus" |
    sed -n 's/^decode: .*, \([0-9.]*\) tokens\/s.*/\1/p'
}
llmc_train_run() { # $1: what to print: steps or wall
  local start wall
  rm -rf "$work/run"
  start=$(now)
  "$llmc" run "$src/examples/train-tiny.yaml" --max-steps "$steps" --threads "$cpus" \
    --eval-interval 0 --checkpoint-interval 0 --sample-tokens 0 --out "$work/run" > "$work/run.log" 2>&1 ||
    { cat "$work/run.log" >&2; return 1; }
  wall=$(echo "$(now) - $start" | bc -l)
  echo "$wall $(step_ms "$work/run/metrics.jsonl" "$steps")" > "$work/train.txt"
}
# milliseconds a step: the steps' time of metrics.jsonl over the steps
step_ms() { # $1: metrics.jsonl, $2: steps
  echo "1000 * $(grep '"elapsed_s"' "$1" | tail -1 | sed 's/.*"elapsed_s":\([0-9.e+-]*\).*/\1/') / $2" | bc -l
}
llmc_dp() {
  rm -rf "$work/dp"
  bash "$src/scripts/mpirun.sh" -np 2 "$llmc" run "$src/examples/train-tiny.yaml" \
    --max-steps "$dpsteps" --threads 2 --eval-interval 0 --checkpoint-interval 0 \
    --sample-tokens 0 --out "$work/dp" > "$work/dp.log" 2>&1 || { tail "$work/dp.log" >&2; return 1; }
  step_ms "$work/dp/metrics.jsonl" "$dpsteps"
}
torch_decode() { "$torch_python" "$src/bench/peers_contention.py" decode --tokens "$ttokens" --threads "$cpus" | sed -n 's/.*= \([0-9.]*\) tokens\/s/\1/p'; }
torch_ms() { # mode, steps, extra arguments
  local seconds
  seconds=$("$torch_python" "$src/bench/peers_contention.py" "$1" --steps "$2" "${@:3}" | sed -n 's/.* in \([0-9.]*\) s$/\1/p')
  echo "1000 * $seconds / $2" | bc -l
}
torch_train() { torch_ms train "$tsteps" --threads "$cpus"; }
torch_dp() { torch_ms ddp "$tdpsteps" --threads 2 --ranks 2; }

# pairs LABEL UNIT HIGHER FN: --repeats quiet/contended pairs; one table row.
pairs() {
  local label=$1 unit=$2 higher=$3 fn=$4 quiet=() busy=() q c r slowdown
  for ((r = 0; r < repeats; r++)); do
    q=$($fn)
    hog_start
    c=$($fn)
    hog_stop
    quiet+=("$q") busy+=("$c")
  done
  q=$(printf '%s\n' "${quiet[@]}" | median)
  c=$(printf '%s\n' "${busy[@]}" | median)
  if ((higher)); then slowdown=$(echo "$q / $c" | bc -l); else slowdown=$(echo "$c / $q" | bc -l); fi
  printf '%-46s %12.2f %12.2f %9.2fx   (%s; pairs: %s / %s)\n' "$label" "$q" "$c" "$slowdown" "$unit" \
    "$(printf '%.4g ' "${quiet[@]}")" "$(printf '%.4g ' "${busy[@]}")"
}

# llmc's wall and steps times come from one run: a pair of runs gives both.
train_pairs() {
  local quiet_wall=() busy_wall=() quiet_steps=() busy_steps=() r w s
  for ((r = 0; r < repeats; r++)); do
    llmc_train_run; read -r w s < "$work/train.txt"; quiet_wall+=("$w") quiet_steps+=("$s")
    hog_start
    llmc_train_run; read -r w s < "$work/train.txt"; busy_wall+=("$w") busy_steps+=("$s")
    hog_stop
  done
  for kind in steps wall; do
    local -n qs=quiet_$kind bs=busy_$kind
    local q c label="llmc train-tiny step ($steps steps)" unit="ms a step"
    [[ $kind == wall ]] && label="llmc run train-tiny --max-steps $steps (wall)" unit=s
    q=$(printf '%s\n' "${qs[@]}" | median)
    c=$(printf '%s\n' "${bs[@]}" | median)
    printf '%-46s %12.2f %12.2f %9.2fx   (%s; pairs: %s / %s)\n' \
      "$label" "$q" "$c" "$(echo "$c / $q" | bc -l)" "$unit" \
      "$(printf '%.4g ' "${qs[@]}")" "$(printf '%.4g ' "${bs[@]}")"
  done
}

echo "bench-contention$( ((short)) && echo ' (--short)')"
"$python" -c "import sys; sys.path.insert(0, '$src/bench'); import common; common.print_machine('$work', $cpus, '${OPENBLAS_CORETYPE:-unset}')"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); threads: $cpus (2 a rank for the two-rank runs); busy neighbours: $hogs; $repeats pairs, medians"
if [[ -n $torch_python ]]; then
  echo "peer: torch $("$torch_python" -c 'import torch; print(torch.__version__)') ($torch_python)"
else
  echo "peer: PyTorch $( ((notorch)) && echo 'not run (--no-torch)' || echo 'not found (bash scripts/setup-peers.sh)'): its rows are skipped"
fi
llmc_decode > /dev/null # warm-up: caches, the sgemm peak's record
llmc_train_run
printf '%-46s %12s %12s %10s\n' "" quiet contended slowdown
pairs "llmc decode, batch 1 ($tokens tokens)" tokens/s 1 llmc_decode
[[ -n $torch_python ]] && pairs "torch decode, batch 1 ($ttokens tokens)" tokens/s 1 torch_decode
train_pairs
[[ -n $torch_python ]] && pairs "torch train-tiny step ($tsteps steps)" "ms a step" 0 torch_train
if command -v mpirun > /dev/null; then
  pairs "llmc mpirun -np 2 x 2 threads ($dpsteps steps)" "ms a step" 0 llmc_dp
else
  echo "mpirun not found (scripts/setup.sh): the two-rank rows are skipped"
fi
[[ -n $torch_python ]] && pairs "torch ddp 2 ranks x 2 threads ($tdpsteps steps)" "ms a step" 0 torch_dp
exit 0

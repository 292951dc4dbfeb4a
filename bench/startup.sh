#!/usr/bin/env bash
# bench-startup: how long `llmc run` takes to reach its first step, cold (an
# empty kernel cache: every kernel JIT-compiled, the sgemm peak measured) and
# warm (every kernel and the sgemm peak record in the cache), phase by phase
# (bench/README.md).
#
#   bash bench/startup.sh [--short] [--build DIR] [--work DIR] [--repeats N]
#
# Trains GPT-2 124M (preset gpt2), fp32, micro-batch 4 x 64 tokens, byte
# tokenizer on examples/corpus, with `llmc run --timings`: each run prints
# the wall, user and system seconds of every start-up phase and is stopped
# once it reaches its first step. Cold runs get a fresh LLMC_CACHE_DIR each;
# warm runs share one that a first, unreported run fills. --repeats runs
# each (default 3); every column is the minimum over them (the machine may
# be shared: the CPU seconds move less than the wall).
# --short: the tiny model (examples/tiny.yaml), one repeat; seconds
# (test/bench/bench-startup.test checks the lines).
set -euo pipefail

bench_repeats=3
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_parse bench-startup "$@"
llmc=$build/bin/llmc
if [[ ! -x $llmc ]]; then
  echo "bench-startup: $llmc not built (ninja -C build llmc; --build DIR)" >&2
  exit 2
fi
if ((short)); then
  model=$src/examples/tiny.yaml
  repeats=1
else
  model=gpt2
fi
bench_workdir bench-startup

cat >"$work/run.yaml" <<EOF
model: $model
micro_batch_size: 4
seq_len: 64
max_steps: 1
data:
  train: [$src/examples/corpus/corpus.txt]
  tokenizer: byte
eval_steps: 0
sample_tokens: 0
progress: lines
precision: fp32
EOF

# One run into log $2 with cache directory $1, stopped (SIGKILL: nothing of
# it is kept) once the timings table is out; fails if it never came.
run_once() {
  local cache=$1 log=$2
  rm -rf "$work/out"
  : >"$log"
  LLMC_CACHE_DIR=$cache "$llmc" run "$work/run.yaml" --timings \
    --out "$work/out" >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '^  to the first step' "$log"; then
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null || true
  if ! grep -q '^  to the first step' "$log"; then
    echo "bench-startup: llmc run did not reach its first step:" >&2
    cat "$log" >&2
    exit 1
  fi
}

load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
for ((i = 0; i < repeats; ++i)); do
  rm -rf "$work/cold-cache"
  run_once "$work/cold-cache" "$work/cold-$i.log"
done
run_once "$work/warm-cache" "$work/warm-fill.log"
for ((i = 0; i < repeats; ++i)); do
  run_once "$work/warm-cache" "$work/warm-$i.log"
done

echo "bench-startup: llmc run to its first step$( ((short)) && echo ' (--short)')"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
echo "cpu: ${cpu:-unknown}, $(nproc) logical CPUs; load average $load before the runs"
grep -m1 '^llmc run: model ' "$work/warm-0.log" |
  sed 's/^llmc run: model \([^:]*\): \([0-9]*\) parameters.*/model: \1 (\2 parameters), fp32, B=4, T=64/'

python3 - "$work" "$repeats" <<'EOF'
import re, sys
work, repeats = sys.argv[1], int(sys.argv[2])

def table(path):
    """The --timings rows: name -> (wall, user, system); None for '-'."""
    rows, inside = {}, False
    for line in open(path):
        if line.startswith("llmc run: start-up timings"):
            inside = True
            continue
        if not inside or not line.startswith("  ") or line.split()[0] == "phase":
            continue
        m = re.match(r"  (.+?)\s+([0-9.]+)\s+([0-9.]+|-)\s+([0-9.]+|-)\s*$", line)
        if not m:
            continue
        # Cold and warm name the kernels phase by where they came from.
        name = re.sub(r": (JIT|kernel cache), buffers$", ": kernels, buffers", m[1])
        rows[name] = tuple(None if v == "-" else float(v) for v in m.groups()[1:])
    return rows

def best(kind):
    runs = [table(f"{work}/{kind}-{i}.log") for i in range(repeats)]
    names = list(runs[0])
    out = {}
    for name in names:
        cols = []
        for c in range(3):
            values = [r[name][c] for r in runs if name in r and r[name][c] is not None]
            cols.append(min(values) if values else None)
        out[name] = cols
    return names, out

cold_names, cold = best("cold")
warm_names, warm = best("warm")
names = cold_names + [n for n in warm_names if n not in cold_names]
total = "to the first step"
names = [n for n in names if n != total] + [total]
print(f"seconds, best of {repeats} run{'s' if repeats > 1 else ''} per column "
      "(CPU: user and system over all threads)")
print(f"{'phase':<44} {'cold wall':>9} {'user':>7} {'sys':>7} {'warm wall':>9} {'user':>7} {'sys':>7}")
def cell(v, w):
    return f"{'-':>{w}}" if v is None else f"{v:>{w}.3f}"
for name in names:
    c = cold.get(name, [None] * 3)
    w = warm.get(name, [None] * 3)
    print(f"{name:<44} {cell(c[0], 9)} {cell(c[1], 7)} {cell(c[2], 7)} "
          f"{cell(w[0], 9)} {cell(w[1], 7)} {cell(w[2], 7)}")
EOF
# What the cold runs compiled, from their own lines.
grep -E '^llmc run: .* kernels JIT-compiled' "$work/cold-0.log" |
  sed 's/^llmc run: */cold: /'

#!/usr/bin/env bash
# bench-dp: data-parallel training on one machine's cores (bench/README.md).
#
#   bash bench/dp.sh [--short] [--build DIR] [--work DIR]
#
# Trains GPT-2 124M with `llmc run` on the bundled corpus as (a) one process
# on every core, (b) two ranks under mpirun (DDP, zero 0), (c) ZeRO-1,
# (d) ZeRO-2 and (e) ZeRO-3 (where the build has it: `llmc compile --zero 3`
# succeeds) on the same global batch, and prints:
#   - the step time of each (median of the measured steps after warm-up
#     steps, from OUT/metrics.jsonl's elapsed_s) and its speedup over (a),
#     and of two independent processes at once with half the batch each
#     (data parallelism without communication, a control);
#   - the collectives of each data-parallel run (llmc run's last line: count,
#     MiB and the time rank 0 stood waiting for them per step), the time the
#     same collectives would take alone (each one's bytes, from `llmc compile
#     --compile-to=kernels`, at bench-allreduce's measured bandwidth for the
#     closest size) and the overlapped fraction 1 - waited / alone;
#   - memory per rank: persistent tensors and the grad step's arena;
#   - the MPI all-reduce bandwidth (bench-allreduce) next to the interconnect
#     bandwidths `llmc plan` assumes (its hardware data file);
#   - the CPU, the ISA the JIT kernels target, the BLAS core and Open MPI.
# Full mode: seq_len 256, global batch 4 in micro-batches of 1 (two per rank),
# 2 warm-up and 4 measured steps; about 5 minutes on 2 cores.
# --short: the tiny GPT (examples/train-tiny.yaml), 3 steps, bench-allreduce
# --short; well under a minute (test/bench/bench-dp.test checks the lines).
#
# OPENBLAS_CORETYPE and the rest of the environment are passed on as they
# are. Timings on a shared machine move by tens of percent between runs.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_parse bench-dp "$@"

if [[ ! -d $build ]]; then
  echo "bench-dp: build directory '$build' not found (--build DIR)" >&2
  exit 1
fi
build=$(cd "$build" && pwd)
llmc=$build/bin/llmc
allreduce=$build/bin/bench-allreduce
mpirun=(bash "$src/scripts/mpirun.sh")
for tool in "$llmc" "$allreduce"; do
  if [[ ! -x $tool ]]; then
    echo "bench-dp: $tool not found (build it: ninja -C $build llmc bench-allreduce)" >&2
    exit 1
  fi
done
bench_require_mpi bench-dp

bench_workdir bench-dp

cores=$(nproc)
dp=2
threads_dp=$((cores / dp > 0 ? cores / dp : 1))

# The training run: the bundled corpus through examples/train-tiny.yaml, its
# model replaced in the full mode. No evaluation, no samples; a checkpoint
# only at the end (its time is reported apart).
config=$src/examples/train-tiny.yaml
if ((short)); then
  model=$src/examples/tiny.yaml
  seq=64 micro=8 global=32 warm=1 measured=2
  allreduce_flags=(--short)
else
  model=gpt2
  seq=256 micro=1 global=4 warm=2 measured=4
  allreduce_flags=()
fi
steps=$((warm + measured))
common=(--model "$model" --seq-len "$seq" --micro-batch-size "$micro"
        --global-batch-size "$global" --max-steps "$steps" --log-interval 1
        --eval-steps 0 --sample-tokens 0 --checkpoint-interval 0
        --keep-checkpoints 1 --warmup-steps 0)

fail() {
  echo "bench-dp: $1 failed; the end of its output ($2):" >&2
  tail -n 30 "$2" >&2
  exit 1
}

# run NAME ZERO|- : one training run; ZERO "-" is one process on all cores.
run() {
  local name=$1 zero=$2 out=$work/$1
  rm -rf "$out"
  if [[ $zero == - ]]; then
    "$llmc" run "$config" "${common[@]}" --threads "$cores" --out "$out" \
      >"$work/$name.log" 2>&1 || fail "llmc run ($name)" "$work/$name.log"
  else
    "${mpirun[@]}" -np "$dp" "$llmc" run "$config" "${common[@]}" --dp "$dp" \
      --zero "$zero" --threads "$threads_dp" --out "$out" \
      >"$work/$name.log" 2>&1 || fail "mpirun llmc run ($name)" "$work/$name.log"
  fi
  rm -rf "$out/checkpoints" # GPT-2's are 1.5 GB each
}

# run_pair NAME: DP without communication, a control: two independent
# processes at once, each with half the global batch and half the cores.
run_pair() {
  local name=$1 half=$((global / dp)) i pids=()
  for ((i = 0; i < dp; ++i)); do
    rm -rf "$work/$name$i"
    "$llmc" run "$config" "${common[@]}" --global-batch-size "$half" \
      --threads "$threads_dp" --out "$work/$name$i" >"$work/$name$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < dp; ++i)); do
    wait "${pids[i]}" || fail "llmc run ($name$i)" "$work/$name$i.log"
    rm -rf "$work/$name$i/checkpoints"
  done
}

# The collectives of the sharded steps, one line per collective: kind bytes.
collectives() {
  local zero=$1 function=$2
  local raw=$work/compile-z$zero-$function.txt
  "$llmc" compile "$model" --function "$function" --dp "$dp" --zero "$zero" \
    --batch "$micro" --seq-len "$seq" --compile-to=kernels >"$raw" 2>&1 ||
    fail "llmc compile --dp $dp --zero $zero --function $function" "$raw"
  sed -n 's/^ *[0-9]*: start \([a-z_]*\) .* bytes \([0-9]*\) .*/\1 \2/p' "$raw" \
    >"$work/coll-z$zero-$function.txt"
  # "per rank (dp 2, zero 0): parameters N B, ...; @grad_step arena N B ..."
  grep -m1 '^per rank' "$raw" >"$work/mem-z$zero-$function.txt" || true
  rm -f "$raw"
}

# Machine facts first: they do not depend on the runs.
bench_machine_facts
"$llmc" plan --list-gpus 2>/dev/null | head -n1 | sed 's/:$//' >"$work/hardware-path.txt" || true

# MPI all-reduce bandwidth: llmc's default path (the ring from 256 KiB) and
# Open MPI's alone, which also serves reduce-scatters and all-gathers.
"${mpirun[@]}" -np "$dp" "$allreduce" "${allreduce_flags[@]}" \
  >"$work/allreduce.txt" 2>&1 || fail bench-allreduce "$work/allreduce.txt"
LLMC_COMM_RING_BYTES=-1 "${mpirun[@]}" -np "$dp" "$allreduce" "${allreduce_flags[@]}" \
  >"$work/allreduce-ompi.txt" 2>&1 || fail "bench-allreduce (Open MPI only)" "$work/allreduce-ompi.txt"

# ZeRO-3 where this build has it.
zeros=(0 1 2)
if "$llmc" compile "$model" --function grad_step --dp "$dp" --zero 3 \
  --batch "$micro" --seq-len "$seq" --compile-to=kernels >/dev/null 2>&1; then
  zeros+=(3)
fi
for zero in "${zeros[@]}"; do
  collectives "$zero" grad_step
  collectives "$zero" update_step
done
# One process's training step, for its arena.
"$llmc" compile "$model" --function grad_step --batch "$micro" --seq-len "$seq" \
  --compile-to=kernels >"$work/compile-single.txt" 2>&1 ||
  fail "llmc compile --function grad_step" "$work/compile-single.txt"
grep -m1 '^program @grad_step' "$work/compile-single.txt" >"$work/mem-single.txt" || true
rm -f "$work/compile-single.txt"

run a - # (a) one process, every core
run_pair p # (p) two processes, no communication
run b 0 # (b) DDP
run c 1 # (c) ZeRO-1
run d 2 # (d) ZeRO-2
if ((${#zeros[@]} > 3)); then
  run e 3 # (e) ZeRO-3
fi

PYTHONPATH=$src/bench "$python" - "$work" "$short" "$model" "$seq" "$micro" "$global" "$warm" \
  "$cores" "$dp" "$threads_dp" "${OPENBLAS_CORETYPE-unset}" <<'EOF'
import math, re, sys
import common

work, short, model, seq, micro, glob, warm, cores, dp, tdp, coretype = sys.argv[1:]
seq, micro, glob, warm, cores, dp, tdp = map(int, (seq, micro, glob, warm, cores, dp, tdp))

def read(name, default=""):
    return common.read(work, name, default)

# --- machine ---
print("bench-dp: data-parallel llmc run on the CPU" + (" (--short)" if short == "1" else ""))
common.print_machine(work, cores, coretype)

# --- bench-allreduce ---
def allreduce_table(name):
    rows, mpi = [], None
    for line in read(name).splitlines():
        if line.startswith("mpi:"):
            mpi = line[4:].strip()
        parts = line.split()
        if len(parts) == 6 and all(re.fullmatch(r"[0-9.]+", p) for p in parts):
            rows.append((int(parts[0]), float(parts[3]) * 1e-6, float(parts[4]), float(parts[5])))
    return rows, mpi

ring, mpi = allreduce_table("allreduce.txt")
ompi, _ = allreduce_table("allreduce-ompi.txt")
print(f"mpi: {mpi or 'unknown'}, {dp} ranks on this machine (scripts/mpirun.sh: shared memory)")

def closest(rows, nbytes):
    return min(rows, key=lambda r: abs(math.log(r[0]) - math.log(max(nbytes, 1))))

def alone(kind, nbytes):
    """Seconds one collective of nbytes (its input: an all-gather's is the
    rank's block, 1/dp of its output) takes by itself at the measured
    bandwidth of the closest size: all-reduces on llmc's default path,
    reduce-scatters and all-gathers (Open MPI's) as half an Open MPI
    all-reduce of the full tensor (a ring's reduce-scatter or all-gather is
    half its all-reduce)."""
    # A size whose bandwidth printed as 0.00 GB/s (a few bytes: the norm's
    # all-reduce) costs its latency, not bandwidth: counted as 0 here.
    if kind == "all_reduce":
        bw = closest(ring, nbytes)[2]
        return nbytes / (bw * 1e9) if bw > 0 else 0.0
    full = nbytes * dp if kind == "all_gather" else nbytes
    bw = closest(ompi, full)[2]
    return 0.5 * full / (bw * 1e9) if bw > 0 else 0.0

def coll(zero, function):
    out = []
    for line in read(f"coll-z{zero}-{function}.txt").splitlines():
        kind, nbytes = line.split()
        out.append((kind, int(nbytes)))
    return out

# --- training runs ---
def run(name):
    r = common.training_run(work, name, warm)
    m = re.search(r"data parallel: ([0-9.]+) collectives and ([0-9.]+) MiB per step and rank; "
                  r"waited ([0-9.]+) ms per step", r["log"])
    if m:
        r["coll"], r["mib"], r["waited"] = float(m.group(1)), float(m.group(2)), float(m.group(3)) * 1e-3
    return r

runs = {k: run(k) for k in "abcde"}
zero3 = bool(read("coll-z3-grad_step.txt") or read("e.log"))
dps = [("b", 0), ("c", 1), ("d", 2)] + ([("e", 3)] if zero3 else [])
# The pair: each process's global batch is half; a global batch takes as
# long as the slower of the two.
pair = [run(f"p{i}") for i in range(dp)]
if all("step" in r for r in pair):
    slow = max(pair, key=lambda r: r["step"])
    runs["p"] = dict(slow, tokens=sum(r["tokens"] for r in pair))
else:
    runs["p"] = {}
a = runs["a"]
common.print_model_line(a, model, glob, seq, micro, warm)

labels = {
    "a": ("(a) 1 process", f"1 x {cores}"),
    "p": (f"({dp} runs, no comm)", f"{dp} x {tdp}"),
    "b": (f"(b) dp={dp} DDP (zero 0)", f"{dp} x {tdp}"),
    "c": (f"(c) dp={dp} ZeRO-1", f"{dp} x {tdp}"),
    "d": (f"(d) dp={dp} ZeRO-2", f"{dp} x {tdp}"),
    "e": (f"(e) dp={dp} ZeRO-3", f"{dp} x {tdp}"),
}
print()
print("step time (median of the measured steps; min-max):")
print(f"  {'config':<24} {'procs x threads':>15} {'step ms':>9} {'min-max ms':>13} {'tokens/s':>9} {'vs (a)':>7} {'final ckpt s':>12}")
for k in "apbcd" + ("e" if zero3 else ""):
    r, (label, layout) = runs[k], labels[k]
    cells = common.step_cells(r, a, 6)
    if cells is None:
        print(f"  {label:<24} {layout:>15} {'no metrics':>9}")
        continue
    ckpt = f"{r['checkpoint']:.1f}" if "checkpoint" in r else "?"
    print(f"  {label:<24} {layout:>15} {cells} {ckpt:>12}")
if not zero3:
    print(f"  {labels['e'][0]:<24} {labels['e'][1]:>15} {'not implemented':>23}")
print(f"  ({dp} runs, no comm): {dp} independent llmc runs at once, 1/{dp} of the global batch each,")
print("  no MPI (the slower one's step): what the cores give data parallelism without communication")

# --- communication and overlap ---
print()
print("communication per step, rank 0 (llmc run's last line: the gradient steps' collectives):")
print(f"  {'config':<24} {'collectives':>11} {'MiB':>8} {'alone ms':>9} {'waited ms':>10} {'overlapped':>10}")
for k, zero in dps:
    r, label = runs[k], labels[k][0]
    if "coll" not in r:
        print(f"  {label:<24} no 'data parallel:' line")
        continue
    grad = coll(zero, "grad_step")
    # @grad_step's collectives, as many times per step as the run counted
    # (ZeRO-2 reduce-scatters every micro-batch, DDP and ZeRO-1 the last).
    scale = r["coll"] / len(grad) if grad else 0
    t_alone = scale * sum(alone(kind, n) for kind, n in grad)
    over = min(max(1 - r["waited"] / t_alone, 0.0), 1.0) if t_alone > 0 else float("nan")
    r["alone"] = t_alone
    print(f"  {label:<24} {r['coll']:>11.1f} {r['mib']:>8.2f} {t_alone * 1e3:>9.2f} "
          f"{r['waited'] * 1e3:>10.2f} {over * 100:>9.0f}%")
for k, zero in dps[1:]:
    upd = coll(zero, "update_step")
    if upd:
        mib = sum(n for _, n in upd) / 2**20
        t = sum(alone(kind, n) for kind, n in upd)
        kinds = sorted({kind for kind, _ in upd})
        print(f"  {labels[k][0]}: update step, not in the count above: {len(upd)} "
              f"collective{'s' if len(upd) != 1 else ''} ({', '.join(kinds)}), {mib:.2f} MiB, "
              f"alone {t * 1e3:.2f} ms")
print("  MiB: the collectives' inputs (an all-gather's is the rank's block);")
print("  alone: each collective's bytes (llmc compile --compile-to=kernels) at bench-allreduce's")
print("  algbw for the closest size; all-reduces on llmc's default path, reduce-scatters and")
print("  all-gathers as half an Open MPI all-reduce; waited: rank 0 blocked in wait() (includes")
print("  the warm-up steps and time spent on a slower rank); overlapped = 1 - waited / alone")

# --- memory ---
print()
print("memory per rank, MiB (llmc compile: persistent f32 tensors, the grad step's planned arena):")
print(f"  {'config':<24} {'params':>8} {'master':>8} {'grads':>8} {'optimizer':>9} {'arena':>8} {'total':>8}")
MiB = 2**20
single = re.search(r"arena ([0-9]+) bytes", read("mem-single.txt"))
if single and "params" in a:
    n = a["params"] * 4  # fp32 AdamW: parameters, gradients, m and v
    cols = [n, 0, n, 2 * n, int(single.group(1))]
    print(f"  {labels['a'][0]:<24} " + " ".join(f"{c / MiB:>{w}.1f}" for c, w in zip(cols, (8, 8, 8, 9, 8)))
          + f" {sum(cols) / MiB:>8.1f}")
for k, zero in dps:
    m = re.search(r"parameters ([0-9]+) B, master partition ([0-9]+) B, gradients ([0-9]+) B, "
                  r"optimizer state ([0-9]+) B, other ([0-9]+) B; @grad_step arena ([0-9]+) B",
                  read(f"mem-z{zero}-grad_step.txt"))
    if m:
        p, master, g, opt, other, arena = map(int, m.groups())
        cols = [p, master, g + other, opt, arena]
        print(f"  {labels[k][0]:<24} " + " ".join(f"{c / MiB:>{w}.1f}" for c, w in zip(cols, (8, 8, 8, 9, 8)))
              + f" {sum(cols) / MiB:>8.1f}")

# --- bandwidth: measured vs what llmc plan assumes ---
print()
def peak(rows):
    best = max(rows, key=lambda r: r[3])
    return best, rows[-1]
if ring:
    (pb, _, _, pbus), (lb, _, _, lbus) = peak(ring)
    print(f"all-reduce bandwidth, measured (bench-allreduce, {dp} ranks, busbw): llmc default "
          f"peak {pbus:.2f} GB/s at {pb / 2**20:g} MiB, {lbus:.2f} GB/s at {lb / 2**20:g} MiB")
if ompi:
    (pb, _, _, pbus), (lb, _, _, lbus) = peak(ompi)
    print(f"  Open MPI only: peak {pbus:.2f} GB/s at {pb / 2**20:g} MiB, "
          f"{lbus:.2f} GB/s at {lb / 2**20:g} MiB")
hw = read("hardware-path.txt")
gpus, current = [], None
try:
    with open(hw) as f:
        for line in f:
            line = line.split("#", 1)[0].rstrip()
            if re.fullmatch(r"[A-Za-z0-9_.-]+:", line):
                current = {"name": line[:-1]}
                gpus.append(current)
            elif current is not None:
                m = re.fullmatch(r"\s+(nvlink_gbps|ib_gbps):\s*([0-9.]+)", line)
                if m:
                    current[m.group(1)] = float(m.group(2))
except OSError:
    pass
gpus = [g for g in gpus if "nvlink_gbps" in g]
if gpus:
    print(f"llmc plan assumes ({hw}; ring collectives at nvlink_gbps / 2 within a node,")
    print("  ib_gbps between nodes; no entry for CPUs or shared memory), GB/s:")
    for g in gpus:
        print(f"  {g['name']:<10} intra-node {g['nvlink_gbps'] / 2:>6.1f}  inter-node {g.get('ib_gbps', 0):>6.2f}")
else:
    print("llmc plan assumes: hardware data file not found")
EOF

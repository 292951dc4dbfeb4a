#!/usr/bin/env bash
# bench-data: the training data path at scale (bench/README.md, issue 39).
#
#   bash bench/data.sh [--short] [--build DIR] [--work DIR]
#
# Writes a generated dataset of llm.c token shards (random byte ids stored
# as uint16, so that the byte tokenizer covers them: the loader's cost
# depends on the bytes per token, not on the ids), then measures:
#   - writing it (MB/s: the disk this machine gives, for scale);
#   - bench-data-loader on it with the page cache as the writing left it:
#     the tokens/s one rank's loader hands out (T = 1024, B = 16), alone and
#     as rank 0 of 4 data-parallel ranks (reading one micro-batch in 4 and
#     skipping the rest); the goal is >= 2M tokens/s per rank; in full
#     mode again with the page cache dropped (as root), every window then
#     coming from the disk;
#   - `llmc run` of the tiny GPT (examples/tiny.yaml at seq_len 256, fp32,
#     micro-batch 8 x 256) for 20 steps on all the shards,
#     after a first run has filled the kernel cache: the seconds to the first
#     step and to open the data (--timings), and the peak resident memory
#     less the model's planned bytes (--report memory), which holds the
#     loader, the libraries and the process's other overheads; the goal is
#     under 200 MB, flat in the dataset's size.
# Full mode: 8 shards of 2^28 tokens (2.1 billion tokens, 4.3 GB); needs
# 4.5 GB free in the work directory; a few minutes, mostly writing.
# --short: 8 shards of 2^20 tokens, 2 steps, one second per loader figure
# (test/bench/bench-data.test checks the lines).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_parse bench-data "$@"
llmc=$build/bin/llmc
loader=$build/bin/bench-data-loader
for binary in "$llmc" "$loader"; do
  if [[ ! -x $binary ]]; then
    echo "bench-data: $binary not built (ninja -C build llmc bench-data-loader; --build DIR)" >&2
    exit 2
  fi
done
if ((short)); then
  shard_tokens=$((1 << 20)) steps=2 seconds=1
else
  shard_tokens=$((1 << 28)) steps=20 seconds=3
fi
shards=8
bench_workdir bench-data
# A kept --work directory may hold an earlier run's data and outputs.
rm -rf "$work/data" "$work/fill" "$work/out"

echo "bench-data: $shards llm.c shards of $shard_tokens tokens$( ((short)) && echo ' (--short)')"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
echo "cpu: ${cpu:-unknown}, $(nproc) logical CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"

start=$(date +%s.%N)
python3 - "$work/data" "$shards" "$shard_tokens" <<'EOF'
import os, struct, sys
out, shards, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out, exist_ok=True)
chunk = 1 << 24  # tokens a write
tokens = bytearray(2 * chunk)  # little-endian uint16: a random low byte, 0
for s in range(shards):
    path = f"{out}/train_{s:02d}.bin"
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, count) + bytes(256 * 4 - 12))
        left = count
        while left:
            n = min(chunk, left)
            tokens[0:2 * n:2] = os.urandom(n)
            f.write(memoryview(tokens)[:2 * n])
            left -= n
    os.replace(path + ".tmp", path)
EOF
sync
end=$(date +%s.%N)
bytes=$(cat "$work"/data/train_*.bin | wc -c)
python3 -c "import sys; b, s = int(sys.argv[1]), float(sys.argv[2]); print(f'written: {b / 1e9:.2f} GB in {s:.1f} s, {b / 1e6 / s:.0f} MB/s (random bytes generated on the way)')" \
  "$bytes" "$(echo "$end - $start" | bc)"

echo "--- loader (bench-data-loader, page cache warm from the writing)"
"$loader" "$work/data/train_*.bin" --seq-len 1024 --batch 16 --ranks 4 --vocab 256 \
  --seconds "$seconds" | sed 1d

# Cold: every window from the disk, where the page cache may be dropped
# (root; full mode only, as it empties the whole machine's cache).
if ((!short)) && sync && { echo 1 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
  echo "--- loader, page cache dropped (every window read from the disk)"
  "$loader" "$work/data/train_*.bin" --seq-len 1024 --batch 16 --ranks 4 --vocab 256 \
    --seconds "$seconds" | sed 1,2d
else
  echo "--- loader, page cache dropped: skipped ($( ((short)) && echo '--short' || echo 'not root'))"
fi

echo "--- llmc run: the tiny GPT at T = 256, $steps steps"
cat >"$work/run.yaml" <<EOF
model: {n_layer: 2, n_head: 4, n_embd: 64, seq_len: 256, vocab_size: 256}
global_batch_size: 8
micro_batch_size: 8
seq_len: 256
max_steps: $steps
data:
  train: "$work/data/train_*.bin"
  val_fraction: 0.001
  tokenizer: byte
eval_steps: 0
sample_tokens: 0
checkpoint_interval: 0
progress: lines
precision: fp32
EOF
export LLMC_CACHE_DIR=$work/cache
"$llmc" run "$work/run.yaml" --max-steps 1 --out "$work/fill" >"$work/fill.log" 2>&1 ||
  { cat "$work/fill.log" >&2; exit 1; }
"$llmc" run "$work/run.yaml" --out "$work/out" --timings --report memory \
  >"$work/run.log" 2>&1 || { cat "$work/run.log" >&2; exit 1; }
grep -E '^llmc run: [0-9]+ steps|^  source|^  (data  |to the first step)|^memory: peak|^    data loader|^    other mapped files|^done:' "$work/run.log" || true
python3 - "$work/run.log" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"memory: peak resident ([0-9.]+) MiB.*?planned ([0-9.]+) MiB", text)
if not m:
    sys.exit("bench-data: no memory line in the run's output")
peak, planned = float(m[1]), float(m[2])
print(f"resident beyond the model's plan: {peak - planned:.1f} MiB "
      f"(peak {peak:.1f} MiB - planned {planned:.1f} MiB; goal < 200 MB)")
EOF

#!/usr/bin/env bash
# bench-export: exported inference binaries (llmc export) against the
# memory-bandwidth limit and PyTorch (bench/README.md).
#
#   bash bench/export.sh [--short] [--build DIR] [--work DIR] [--repeats N]
#
# Exports GPT-2 124M (--max-context 256) at batch 1 and batch 8, in f32,
# bf16 and fp16, and with the blocks' matmul weights pruned to 2:4 (f32:
# the binary packs them for its 2:4 kernels); runs each binary's
# --bench (a 64-token prompt, 64 new tokens) --repeats times (default 3)
# and prints per binary the best prefill and decode tokens/s (all B
# sequences counted), the decode step time, the limit of a decode step that
# reads every weight once at the read bandwidth measured in the same run
# (bench-bandwidth: B x bandwidth / weight bytes tokens/s; for 2:4, the
# bytes decode reads: the packed weights instead of the dense ones) and the
# fraction of it reached, start-up time, peak RSS and the file size. The
# 2:4 weights are llmc's seeded initialization pruned by a one-step
# `llmc run` with `sparsity: {prune_at_step: 0}` and lr 0. Then PyTorch
# (Debian's python3-torch, /usr/bin/python3) generating with a KV cache on
# the same weights (bench/torch_generate.py), where it is installed
# (skipped with a note otherwise; the weights then are llmc's seeded
# initialization). Printed too: the CPU, the BLAS core, the instruction-set
# features the exported kernels were compiled for.
# About 8 minutes on 2 cores.
# --short: the tiny model (examples/tiny.yaml) at batch 1 and 2, one
# repeat, no PyTorch, a smaller bandwidth read; seconds
# (test/bench/bench-export.test checks the lines).
#
# OPENBLAS_CORETYPE and the rest of the environment are passed on as they
# are. Timings on a shared machine move by tens of percent between runs.
set -euo pipefail

bench_repeats=3
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_parse bench-export "$@"
if [[ ! -x $build/bin/llmc || ! -x $build/bin/bench-bandwidth ]]; then
  echo "bench-export: $build/bin/llmc or bench-bandwidth not built" \
       "(ninja -C build llmc bench-bandwidth; --build DIR)" >&2
  exit 1
fi
llmc=$build/bin/llmc
bench_workdir bench-export
export LLMC_CACHE_DIR=${LLMC_CACHE_DIR:-$work/cache}

if ((short)); then
  model=tiny batches=(1 2) context=64 prompt_tokens=16 new_tokens=16
  repeats=1 mib=64
  "$llmc" compile "$src/examples/tiny.yaml" -o "$work/model.llmc" > /dev/null
else
  model="gpt2 124M" batches=(1 8) context=256 prompt_tokens=64 new_tokens=64
  mib=1024
  "$llmc" emit-model gpt2 --batch 1 --seq-len 64 -o "$work/model.mlir"
  "$llmc" compile "$work/model.mlir" -o "$work/model.llmc" > /dev/null
fi

echo "bench-export$( ((short)) && echo ' (--short)')"
"$build/bin/bench-bandwidth" --mib "$mib" | tee "$work/bandwidth.txt"
bandwidth=$(sed -n 's/^read bandwidth: \([0-9.]*\) GB\/s$/\1/p' "$work/bandwidth.txt")

# The same weights for llmc and PyTorch where PyTorch is here.
torch=0
weights=()
if ((!short)) && /usr/bin/python3 -c 'import torch, numpy' 2> /dev/null; then
  torch=1
  /usr/bin/python3 "$src/bench/torch_generate.py" make-weights \
    "$work/weights.safetensors" > /dev/null
  weights=(--weights "$work/weights.safetensors")
  echo "weights: random GPT-2 weights in Hugging Face names (torch_generate.py make-weights)"
else
  echo "weights: llmc's seeded initialization$( ((short)) || echo '; PyTorch not installed: its rows are skipped (apt-get install python3-torch)')"
fi

# The 2:4 weights: the seeded initialization pruned (SGD at lr 0: the
# weights are the pruned ones; no optimizer state in the checkpoint).
cat > "$work/prune.yaml" <<EOF
model: $( ((short)) && echo "$src/examples/tiny.yaml" || echo gpt2 )
optimizer: {name: sgd, lr: 0, weight_decay: 0}
global_batch_size: 1
micro_batch_size: 1
seq_len: 64
max_steps: 1
data: {train: [$src/examples/corpus/corpus.txt]}
sparsity: {pattern: "2:4", prune_at_step: 0}
checkpoint_interval: 1
EOF
"$llmc" run "$work/prune.yaml" --out "$work/prune" > "$work/prune.log" 2>&1 ||
  { cat "$work/prune.log" >&2; exit 1; }
pruned=$work/prune/checkpoints/step-000001.ckpt
echo "2:4 weights: $("$llmc" sparsity check "$pruned" | tail -1)"

# A prompt of exactly prompt_tokens byte tokens.
prompt=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' {1..8} |
         head -c "$prompt_tokens")

rows=()
for precision in f32 bf16 fp16 2:4; do
  for batch in "${batches[@]}"; do
    name=$work/model-${precision/:/of}-b$batch
    flags=(--batch "$batch" --max-context "$context")
    from=("${weights[@]}")
    case $precision in
      bf16 | fp16) flags+=(--precision "$precision") ;;
      2:4) from=(--weights "$pruned") ;;
    esac
    if ! "$llmc" export "$work/model.llmc" "${from[@]}" "${flags[@]}" \
         -o "$name" 2> "$name.export.err"; then
      if grep -q "not implemented" "$name.export.err"; then
        echo "$precision: skipped ($(grep -o 'error: .*' "$name.export.err" | head -1))"
        continue 2
      fi
      cat "$name.export.err" >&2
      exit 1
    fi
    if [[ -z ${features:-} ]]; then
      features=$("$name" --info | sed -n 's/^ *cpu features: *//Ip' | head -1)
      cpu_target=$("$name" --info | sed -n "s/^kernels: .*compiled ahead of time for \\([^)]*\\)).*/\\1/p")
      echo "exported kernels: compiled for ${cpu_target:-?} (${features:-?})"
    fi
    weight_bytes=$("$name" --info | sed -n 's/^weights: .*, \([0-9]*\) bytes,.*/\1/p' | head -1)
    for ((r = 0; r < repeats; ++r)); do
      "$name" --bench --prompt "$prompt" --max-tokens "$new_tokens" \
        --temperature 0 >> "$name.bench"
    done
    size=$(stat -c %s "$name")
    rows+=("$(awk -v p="$precision" -v b="$batch" -v bw="$bandwidth" \
                  -v wb="$weight_bytes" -v size="$size" '
      /^start-up:/ { s = $2 + 0; if (start == "" || s < start) start = s }
      /^prefill:/ { for (i = 1; i <= NF; ++i) if ($(i+1) == "tokens/s") t = $i
                    if (t + 0 > prefill) prefill = t + 0 }
      /^decode:/  { for (i = 1; i <= NF; ++i) if ($(i+1) == "tokens/s") t = $i
                    if (t + 0 > decode) decode = t + 0 }
      /^peak RSS:/ { if ($3 + 0 > rss) rss = $3 + 0 }
      # "@decode: 2:4 kernels (...): ... (X of Y MiB) ...": decode reads the
      # packed X MiB instead of the dense Y.
      /^@decode: 2:4 kernels/ {
        if (match($0, /\(([0-9.]+) of ([0-9.]+) MiB\)/)) {
          split(substr($0, RSTART + 1, RLENGTH - 2), m, " ")
          packed = m[1] * 1048576; dense = m[3] * 1048576
        }
      }
      END {
        limit = 0
        read = wb - dense + packed
        if (read > 0) limit = b * bw * 1e9 / read
        fraction = 0
        if (limit > 0) fraction = 100 * decode / limit
        printf "%-5s %5d %10.1f %10.1f %9.2f %10.1f %8.0f%% %8.3f %8.0f %8.1f\n",
               p, b, prefill, decode, 1000 * b / decode, limit, fraction,
               start, rss, size / 1e6
      }' "$name.bench")")
  done
done

echo "$model, context $context, prompt $prompt_tokens tokens, $new_tokens new tokens, best of $repeats:"
printf '%-5s %5s %10s %10s %9s %10s %9s %8s %8s %8s\n' prec batch \
  "prefill/s" "decode/s" "ms/step" "limit/s" "of limit" "start s" "RSS MiB" "file MB"
printf '%s\n' "${rows[@]}"
echo "limit: B x read bandwidth / weight bytes (every weight read once a decode step; 2:4: the packed blocks instead of the dense; the KV cache and activations not counted)"

if ((torch)); then
  for batch in "${batches[@]}"; do
    /usr/bin/python3 "$src/bench/torch_generate.py" run \
      "$work/weights.safetensors" --batch "$batch" \
      --prompt-tokens "$prompt_tokens" --new-tokens "$new_tokens" \
      --repeats "$repeats" --threads "$(nproc)"
  done
fi

#!/usr/bin/env bash
# bench-data-prepare: `llmc data prepare`'s throughput in MB/s of text
# against the tokenizer alone, on this machine's cores (bench/README.md).
#
#   bash bench/data-prepare.sh [--short] [--build DIR] [--work DIR] [--repeats N]
#
# Makes a text corpus (examples/corpus/corpus.txt repeated, 64 MB) and a
# GPT-2-style BPE of 4096 tokens learned from its first 400 KB
# (`llmc tokenizer train`), then measures, in --repeats rounds (default 5;
# each round runs every case once, and each case's best run counts: the
# machine may be shared):
#   tokenizer alone: `llmc tokenizer encode`'s own encode time (one thread,
#     the whole text in memory, no file written): the single-core ceiling;
#   prepare, N threads: `llmc data prepare`, the file as one document
#     (--input text: the same tokens as the tokenizer alone, cut into pieces
#     that encode in parallel) and every line a document (--input lines),
#     with 1 thread and one per core; the seconds its total line reports
#     (from the start of the run, after the process has loaded, to the last
#     shard committed: reading, encoding, writing uint16 shards of 10M
#     tokens).
# Also the byte tokenizer (no BPE: the pipeline's own overhead).
# The last column is prepare's MB/s over the tokenizer alone's.
# --short: 4 MB, a BPE of 512 tokens from 100 KB, one repeat
# (test/bench/bench-data-prepare.test checks the lines).
set -euo pipefail

bench_repeats=5
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_parse bench-data-prepare "$@"
llmc=$build/bin/llmc
if [[ ! -x $llmc ]]; then
  echo "bench-data-prepare: $llmc not built (ninja -C build llmc; --build DIR)" >&2
  exit 2
fi
if ((short)); then
  megabytes=4 vocab=512 sample=100000 repeats=1
else
  megabytes=64 vocab=4096 sample=400000
fi
bench_workdir bench-data-prepare

corpus=$work/corpus.txt
: >"$corpus"
while (($(stat -c %s "$corpus") < megabytes * 1000000)); do
  cat "$src/examples/corpus/corpus.txt" >>"$corpus"
done
truncate -s $((megabytes * 1000000)) "$corpus"
head -c "$sample" "$corpus" >"$work/sample.txt"
"$llmc" tokenizer train --vocab-size "$vocab" -o "$work/bpe" "$work/sample.txt" >/dev/null

# prepare_seconds ARGS...: the seconds of one llmc data prepare run as its
# total line reports them (the run, not the process start).
prepare_seconds() {
  rm -rf "$work/out"
  "$llmc" data prepare "$corpus" -o "$work/out" --shard-tokens 10M --quiet "$@" \
    >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
  sed -n 's/^total: .* MB of input in \([0-9.]*\) s .*/\1/p' "$work/last.log"
}
# encode_seconds TOKENIZER: the encode seconds `llmc tokenizer encode`
# reports (the text already in memory, one thread).
encode_seconds() {
  "$llmc" tokenizer encode --tokenizer "$1" "$corpus" -o "$work/alone.bin" |
    sed -n 's/^encoded .*(\([0-9.]*\) s)$/\1/p'
}
declare -A best
# keep KEY SECONDS: the least seconds seen for KEY.
keep() {
  if [[ -z ${best[$1]:-} ]] || (($(echo "$2 < ${best[$1]}" | bc -l))); then
    best[$1]=$2
  fi
}

cores=$(nproc)
load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
echo "bench-data-prepare: llmc data prepare against the tokenizer alone$( ((short)) && echo ' (--short)')"
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
isa=$(for f in avx2 avx512f; do [[ " $flags " == *" $f "* ]] && echo -n "$f yes, " || echo -n "$f no, "; done)
echo "cpu: ${cpu:-unknown}, $cores logical CPUs (${isa%, }); load average $load before the runs"
echo "text: $megabytes MB ($(wc -l <"$corpus") lines), best of $repeats run$( ((repeats > 1)) && echo s)"
printf '%-30s %8s %8s %9s\n' "tokenizer, what" threads "MB/s" "vs alone"
# The runs of one round follow each other closely, so that a change in the
# machine's load moves the tokenizer alone and prepare alike.
for ((round = 0; round < repeats; ++round)); do
  for tok in "$work/bpe" byte; do
    keep "$tok alone" "$(encode_seconds "$tok")"
    for input in text lines; do
      for threads in 1 "$cores"; do
        keep "$tok $input $threads" "$(prepare_seconds --tokenizer "$tok" \
          --input $input --threads "$threads")"
      done
    done
  done
done
for tok in "$work/bpe" byte; do
  if [[ $tok == byte ]]; then name="byte"; else name="bpe $vocab"; fi
  alone_rate=$(echo "$megabytes / ${best[$tok alone]}" | bc -l)
  printf '%-30s %8d %8.1f %9s\n' "$name, tokenizer alone" 1 "$alone_rate" "1.00x"
  for input in text lines; do
    for threads in 1 "$cores"; do
      rate=$(echo "$megabytes / ${best[$tok $input $threads]}" | bc -l)
      printf '%-30s %8d %8.1f %8.2fx\n' "$name, prepare --input $input" \
        "$threads" "$rate" "$(echo "$rate / $alone_rate" | bc -l)"
    done
  done
done
grep '^total:' "$work/last.log" | sed 's/^/last prepare: /'

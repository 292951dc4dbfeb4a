#!/usr/bin/env bash
# Soak test of crash recovery: trains examples/train-tiny.yaml with
# `llmc run`, kills it with SIGKILL at random moments, resumes it each time
# (--resume) until it finishes, and checks that the final checkpoint is
# byte-identical to an uninterrupted run's and that no temporary file and
# no damaged checkpoint is left behind.
#
# Usage: scripts/soak.sh [--short] [--seed N] [--dir DIR] [KILLS]
#   KILLS      how many SIGKILLs (default 20; --short: 5)
#   --short    a run of 120 steps instead of 400 (well under a minute)
#   --seed N   the seed of the kill times (default: random; printed, so a
#              failure can be replayed with it; the times are wall-clock, so
#              a replay kills at the same delays, not at the same steps)
#   --dir DIR  where the runs go (default: a temporary directory, removed
#              when the soak passes)
# $LLMC is the binary (default: build/bin/llmc, else llmc on PATH).
#
# A third of the kills come after a random delay (0 to 1.5 s after the
# start, --short 0 to 0.5 s, so some land in start-up and five of them
# cannot outrun a short run on a fast, idle machine); a third wait for the progress line of a
# step that ends in a checkpoint (one every 2 steps) and kill 0 to 5 ms
# later, around the checkpoint's write; a third kill as soon as the
# temporary file of a checkpoint write appears, inside the write. A kill
# that caught a write leaves its temporary file, which the next run
# removes; the soak counts those.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

kills=20 steps=400 maxDelayMs=1500 seed="" dir="" keep=0
while (($#)); do
  case $1 in
    --short) kills=5 steps=120 maxDelayMs=500 ;;
    --seed) seed=$2; shift ;;
    --dir) dir=$2; keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) kills=$1 ;;
    *) echo "soak: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
llmc=$root/build/bin/llmc
[[ -x $llmc ]] || llmc=$(command -v llmc || true)
llmc=${LLMC:-$llmc}
[[ -x $llmc ]] || { echo "soak: no llmc binary ('$llmc'); build first or set LLMC" >&2; exit 2; }
seed=${seed:-$(( $(date +%s%N) % 1000000 ))}
RANDOM=$seed
if [[ -z $dir ]]; then dir=$(mktemp -d "${TMPDIR:-/tmp}/llmc-soak.XXXXXX"); fi
mkdir -p "$dir"
rm -rf "$dir/straight" "$dir/killed" "$dir"/*.log

args=("$root/examples/train-tiny.yaml" --max-steps "$steps" --decay-steps "$steps"
      --checkpoint-interval 2 --keep-checkpoints 2 --log-interval 1
      --eval-interval 0 --threads 2)
final=$(printf 'step-%06d.ckpt' "$steps")
echo "soak: seed $seed; $kills SIGKILLs of llmc run (train-tiny, $steps steps, a checkpoint every 2); in $dir"

fail() {
  echo "soak: FAILED: $*" >&2
  echo "soak: replay with: scripts/soak.sh --seed $seed $( ((steps == 120)) && echo --short) $kills (runs kept in $dir)" >&2
  exit 1
}

# Lists the checkpoint temporaries in the run's directory: `found`, all
# of their names; `fresh`, those not in $before. Builtins only, setting
# arrays rather than printing: the busy wait below calls it without a
# subshell's fork per poll.
listTemporaries() {
  local f
  found=() fresh=()
  shopt -s nullglob
  for f in "$out"/checkpoints/*.tmp-*; do
    found+=("${f##*/}")
    [[ $before == *" ${f##*/} "* ]] || fresh+=("${f##*/}")
  done
  shopt -u nullglob
}

start=$(date +%s.%N)
"$llmc" run "${args[@]}" --out "$dir/straight" > "$dir/straight.log" 2>&1 ||
  fail "the uninterrupted run failed (see $dir/straight.log)"
straightTime=$(echo "$(date +%s.%N) - $start" | bc)

out=$dir/killed
rm -rf "$out"
n=0 resumes=0 caught=0 removed=0 at=()
soakStart=$(date +%s.%N)
while true; do
  flags=()
  [[ -n $(ls "$out/checkpoints"/step-*.ckpt 2> /dev/null) ]] && flags=(--resume)
  ((${#flags[@]})) && resumes=$((resumes + 1))
  log=$dir/run-$n.log
  : > "$log"
  # The temporary files an earlier kill left (this run removes them).
  listTemporaries
  before=" ${found[*]} "
  "$llmc" run "${args[@]}" --out "$out" "${flags[@]}" > "$log" 2>&1 &
  pid=$!
  if ((n < kills)); then
    kind=$((RANDOM % 3))
    if ((kind == 2)); then
      # As soon as a checkpoint's temporary file exists: a busy wait that
      # forks nothing (listTemporaries and kill), so the kill lands
      # mid-write.
      how="as a checkpoint's temporary file appeared"
      while kill -0 "$pid" 2> /dev/null; do
        listTemporaries
        ((${#fresh[@]})) && break
      done
    elif ((kind == 1)); then
      ms=$((RANDOM % maxDelayMs))
      how="after $ms ms"
      sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    else
      # The progress line of an odd step (0-based): a checkpoint follows.
      skip=$((RANDOM % 3)) delay=$((RANDOM % 6))
      how="$delay ms after the progress line of checkpoint step #$((skip + 1))"
      # A busy wait of builtins (mapfile, a regex), like the one above: a
      # grep on `tail -f` saw the lines late here (tail polls where it
      # cannot use inotify), and the tiny model trains some 90 steps a
      # second, so a few late kills outran the whole run.
      while kill -0 "$pid" 2> /dev/null; do
        mapfile -t lines < "$log"
        seen=0
        for line in "${lines[@]}"; do
          [[ $line =~ ^step\ +[0-9]*[13579]/ ]] && seen=$((seen + 1))
        done
        ((seen > skip)) && break
      done
      sleep "$(printf '0.%03d' "$delay")"
    fi
    if kill -9 "$pid" 2> /dev/null; then
      wait "$pid" 2> /dev/null || true
      n=$((n + 1))
      last=$(grep -oE '^step +[0-9]+/' "$log" | tail -1 | tr -dc 0-9 || true)
      listTemporaries
      tmp=${#fresh[@]}
      ((tmp > 0)) && caught=$((caught + 1))
      mark=""
      ((tmp > 0)) && mark=", mid-write: $tmp temporary file left"
      at+=("${last:-start-up}")
      echo "soak: kill $n/$kills $how: after step ${last:-(none; in start-up)}$mark"
      continue
    fi
    # It finished before the kill: the soak is too short for KILLS.
    wait "$pid" || fail "run $n exited with status $? (see $log)"
    fail "the run finished after $n kills; use fewer KILLS"
  fi
  wait "$pid" || fail "the last run exited with status $? (see $log)"
  break
done
soakTime=$(echo "$(date +%s.%N) - $soakStart" | bc)
removed=$(cat "$dir"/run-*.log | { grep -oE 'removed [0-9]+ files? of an interrupted' || true; } |
  awk '{s += $2} END {print s + 0}')

# The checks.
[[ -f $out/checkpoints/$final ]] || fail "no final checkpoint $out/checkpoints/$final"
cmp -s "$dir/straight/checkpoints/$final" "$out/checkpoints/$final" ||
  fail "the final checkpoint differs from the uninterrupted run's ($out/checkpoints/$final)"
left=$(find "$out" -name '*.tmp-*' -o -name '*.damaged')
[[ -z $left ]] || fail "files left behind: $left"
! grep -q 'warning' "$dir"/run-*.log || fail "a run warned (damaged checkpoint?): $(grep -h warning "$dir"/run-*.log | head -3)"

echo "soak: $n kills survived (after steps: ${at[*]}), $resumes resumes; $caught kills left a checkpoint half-written, $removed temporary file(s) removed at the next start"
printf 'soak: final checkpoint %s byte-identical to the uninterrupted run'"'"'s; no temporary or damaged file left\n' "$final"
printf 'soak: time %.1f s (uninterrupted run %.1f s)\n' "$soakTime" "$straightTime"
((keep)) || rm -rf "$dir"

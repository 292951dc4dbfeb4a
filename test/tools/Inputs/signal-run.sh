#!/usr/bin/env bash
# Usage: signal-run.sh LOG SIGNALS -- COMMAND...
# Starts COMMAND in the background with its output in LOG, waits until it
# has printed a training step (its stop handlers are installed by then),
# sends it each of SIGNALS (comma-separated, e.g. TERM or INT,INT; 0.1 s
# apart) and prints its exit status.
set -u
log=$1 signals=$2
shift 3
"$@" > "$log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q '^step ' "$log" && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.05
done
IFS=, read -ra list <<< "$signals"
for signal in "${list[@]}"; do
  kill -"$signal" "$pid"
  sleep 0.1 # two pending signals of one kind would be delivered as one
done
wait "$pid"
echo "exit status $?"

# Busy neighbours for the contention measurements (sourced by
# scripts/soak-cpu.sh and bench/contention.sh): hog_start starts $hogs
# shell loops that never sleep nor make a system call (the neighbour that
# hurts a thread pool most: a worker it preempts keeps its core for a whole
# time slice), hog_stop ends them; median prints the median of the numbers
# on stdin.

pids=()
hog_start() {
  for ((i = 0; i < hogs; i++)); do
    bash -c 'while :; do :; done' &
    pids+=($!)
  done
  sleep 0.2 # the hogs are running before the measure starts
}
hog_stop() {
  if ((${#pids[@]})); then
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true # killed: 143
  fi
  pids=()
  return 0
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

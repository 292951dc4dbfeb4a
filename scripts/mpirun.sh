#!/usr/bin/env bash
# Runs Open MPI's mpirun with the settings llmc's machines need, passing
# every argument through:
#   scripts/mpirun.sh -np 2 build/bin/llmc run ...
#
# - As root (containers), Open MPI refuses to start without
#   OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM.
# - --oversubscribe: more ranks than cores (the tests run 4 ranks on 2);
#   Open MPI then also makes idle ranks yield the CPU.
# - --bind-to none: by default Open MPI pins each of 2 ranks to one core,
#   and llmc's thread pool and communication thread would share it.
# - One machine (no --host, --hostfile or a Slurm allocation): shared
#   memory only (btl self,vader), no TCP sockets on the machine's network
#   interfaces; MPI starts faster and nothing leaves the machine.
# - LLMC_* variables (LLMC_COMM_TIMEOUT_S, ...) are exported to every rank
#   (-x), as they would not reach ranks on other machines otherwise.
set -euo pipefail

if ! command -v mpirun >/dev/null; then
  echo "mpirun.sh: mpirun not found; run scripts/setup.sh (openmpi-bin)" >&2
  exit 127
fi

if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

flags=(--oversubscribe --bind-to none)
single_machine=1
for arg in "$@"; do
  case $arg in
    --host | --host=* | -H | --hostfile | --hostfile=* | -hostfile | \
    --machinefile | -machinefile | --default-hostfile)
      single_machine=0 ;;
  esac
done
if [[ -n ${SLURM_JOB_ID:-} ]]; then single_machine=0; fi
if ((single_machine)) && [[ -z ${OMPI_MCA_btl:-} ]]; then
  flags+=(--mca btl self,vader)
fi
while IFS= read -r name; do
  flags+=(-x "$name")
done < <(compgen -e | grep '^LLMC_' || true)

exec mpirun "${flags[@]}" "$@"

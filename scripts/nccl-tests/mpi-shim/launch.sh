#!/usr/bin/env bash
# Starts N copies of a command as the ranks of one job of mpi_shim.c (nccl-tests' MPI build
# without MPI), waits for all, and exits with the first failure's status. Each rank gets
# OXCCL_MPI_RANK, OXCCL_MPI_SIZE and OXCCL_MPI_JOB; a command that needs per-rank settings can
# read OXCCL_MPI_RANK (e.g. through `sh -c`). The job id is this script's pid unless
# OXCCL_MPI_JOB is set.
#
# Usage: launch.sh N -- COMMAND [ARGS...]
set -u
n=${1:?usage: launch.sh N -- COMMAND [ARGS...]}
shift
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || { echo "launch.sh: no command" >&2; exit 2; }
job=${OXCCL_MPI_JOB:-$$}
pids=()
for ((r = 0; r < n; r++)); do
  OXCCL_MPI_RANK=$r OXCCL_MPI_SIZE=$n OXCCL_MPI_JOB=$job "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || { s=$?; [ "$rc" = 0 ] && rc=$s; }
done
# A job whose ranks died leaves its segment behind.
rm -f "/dev/shm/oxccl-mpi-$job"
exit "$rc"

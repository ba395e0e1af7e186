#!/usr/bin/env bash
# Runs a program on N MPI ranks with a time bound: mpi_run.sh MPIEXEC N TIMEOUT_S PROGRAM [ARGS...]
set -euo pipefail
mpiexec=$1 np=$2 timeout_s=$3
shift 3
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
exec timeout -k 5 "$timeout_s" "$mpiexec" -n "$np" "$@"

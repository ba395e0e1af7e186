#!/usr/bin/env bash
# Start-up benchmark: time from launch until every rank has finished MPI_Init, for
# `hvxrun -np 4` against plain `mpiexec -n 4` of the same minimal MPI program (rank_probe --ready),
# in this one script. The two alternate, and which goes first alternates too, so load from other
# work on the machine falls on both alike. Prints both medians, their ratio, and the median of the
# per-pair ratios (each pair ran back to back, so it is the figure least moved by changing load).
# Target: <= 1.2.
#   startup_bench.sh HVXRUN PROBE MPIEXEC [RUNS]
set -euo pipefail
HVXRUN=$(readlink -f "$1"); PROBE=$(readlink -f "$2"); MPIEXEC=$(readlink -f "$3"); RUNS=${4:-15}

# Prints milliseconds from launch to the last rank's "ready <ns>" line.
measure() {
    local t0 last
    t0=$(date +%s%N)
    last=$(timeout -k 5 60 "$@" </dev/null 2>/dev/null | sed -n 's/.*ready \([0-9]*\)$/\1/p' |
        sort -n | tail -1)
    [[ -n $last ]] || { echo "startup_bench: no ready lines from: $*" >&2; exit 1; }
    echo $(((last - t0) / 1000000))
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

plain_cmd=("$MPIEXEC" -n 4 "$PROBE" --ready)
hvx_cmd=("$HVXRUN" --mpiexec "$MPIEXEC" --timeout 60 -np 4 -- "$PROBE" --ready)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
plain=() hvx=()
for ((i = 0; i < RUNS; i++)); do
    if ((i % 2 == 0)); then
        plain+=("$(measure "${plain_cmd[@]}")")
        hvx+=("$(measure "${hvx_cmd[@]}")")
    else
        hvx+=("$(measure "${hvx_cmd[@]}")")
        plain+=("$(measure "${plain_cmd[@]}")")
    fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
p=$(printf '%s\n' "${plain[@]}" | median)
h=$(printf '%s\n' "${hvx[@]}" | median)
echo "mpiexec -n 4: median ${p} ms (runs: ${plain[*]})"
echo "hvxrun -np 4: median ${h} ms (runs: ${hvx[*]})"
awk -v h="$h" -v p="$p" 'BEGIN { printf "ratio of medians hvxrun/mpiexec: %.2f (target <= 1.20)\n", h / p }'
pair=$(for ((i = 0; i < RUNS; i++)); do awk -v h="${hvx[i]}" -v p="${plain[i]}" 'BEGIN { printf "%.4f\n", h / p }'; done |
    median)
printf 'median of per-pair ratios: %.2f\n' "$pair"

#!/usr/bin/env bash
# Multi-host jobs whose hosts reach each other over TCP, as on a real cluster: namespace hosts with
# their own boot ids (HVX_SEPARATE_BOOT_ID=1), so UCX cannot use shared memory between them. With
# MPICH 4.0.2 a plain MPI_Finalize deadlocks here in most multi-host runs; every job must still end
# within 5 s of its work with each rank's own status and no PMI or UCX error. A slow job's log says
# when it was launched and ended, beside the ranks' own log times.
#   tcp_test.sh HVXRUN HVX_INFO SHUTDOWN_PROBE RANK_PROBE MPIEXEC NETNS_HOSTS
# HVX_TCP_RUNS (default 20) is how many consecutive hvx_info jobs run on 2x2 and on 3x2.
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
INFO=$(readlink -f "$2")
SPROBE=$(readlink -f "$3")
PROBE=$(readlink -f "$4")
MPIEXEC=$(readlink -f "$5")
NETNS=$(readlink -f "$6")
RUNS=${HVX_TCP_RUNS:-20}
export HVX_NETNS_PREFIX=hvxc HVX_SEPARATE_BOOT_ID=1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

hosts_up 3
a=$("$NETNS" exec hvxc1 cat /proc/sys/kernel/random/boot_id)
b=$("$NETNS" exec hvxc2 cat /proc/sys/kernel/random/boot_id)
[[ -n $a && $a != "$b" ]]; check "hosts have their own boot ids ($a, $b)" $?

# Lines hydra, PMI or UCX print when an ending goes wrong.
noise='PMI|UCX|assert|BAD TERMINATION|did not finish|HVX_SHUTDOWN_TIMEOUT_S'

# ---- consecutive hvx_info --check jobs: each rc 0, every rank passes, nothing else said, and the
# job over within 5 s of its last rank's start. Starting (hydra, the remote shells, MPI_Init over
# TCP) is bounded by hvxrun's --start-timeout 20 and reported apart: what this checks is the ending.
for layout in "4 hvxc1:2,hvxc2:2" "6 hvxc1:2,hvxc2:2,hvxc3:2"; do
    read -r np hosts <<<"$layout"
    clean=0 worst_start=0 worst_end=0
    for ((i = 1; i <= RUNS; i++)); do
        launch -np "$np" -H "$hosts" -- "$INFO" --check
        started=$(init_ms)
        ending=$((elapsed_ms - started))
        ((started > worst_start)) && worst_start=$started
        ((ending > worst_end)) && worst_end=$ending
        if [[ $rc == 0 && $started -ge 0 && $ending -lt 5000 &&
            $(count_lines "$out" '"check":"pass"') == "$np" ]] && ! grep -qE "$noise" <<<"$err"; then
            clean=$((clean + 1))
        else
            echo "run $i on $hosts: rc=$rc, ${elapsed_ms} ms, the last rank started after ${started} ms"
            show
        fi
    done
    [[ $clean == "$RUNS" ]]
    check "$hosts: $clean of $RUNS hvx_info jobs ended rc 0 within 5 s of starting (slowest start\
 ${worst_start} ms, slowest work and ending ${worst_end} ms)" $?
done

# ---- the data really crosses the network: 4 MiB per rank in the probe's allreduce
rx0=$("$NETNS" exec hvxc2 cat /sys/class/net/eth0/statistics/rx_bytes)
launch -np 4 -H hvxc1:2,hvxc2:2 -- "$SPROBE"
rx1=$("$NETNS" exec hvxc2 cat /sys/class/net/eth0/statistics/rx_bytes)
[[ $rc == 0 && $(count_lines "$out" 'rank [0-3] sum ok') == 4 ]]
check "explicit hvx::Shutdown: rc 0 and 4 sums (rc=$rc, ${elapsed_ms} ms)" $?
check "ended within 5 s (${elapsed_ms} ms)" $((elapsed_ms >= 5000))
check "over TCP: $((rx1 - rx0)) bytes reached hvxc2's eth0 (>= 4 MiB)" $(((rx1 - rx0) < 4194304))
! grep -qE "$noise" <<<"$err"; check "no PMI or UCX errors" $?
[[ $rc == 0 ]] || show

# ---- no Shutdown call: hvx shuts down at exit
launch -np 4 -H hvxc1:2,hvxc2:2 -- "$SPROBE" --at-exit
[[ $rc == 0 && $(count_lines "$out" 'rank [0-3] sum ok') == 4 && $elapsed_ms -lt 5000 ]]
check "exit-time shutdown: rc 0 within 5 s (rc=$rc, ${elapsed_ms} ms)" $?
! grep -qE "$noise" <<<"$err"; check "no PMI or UCX errors" $?
[[ $rc == 0 ]] || show

# ---- each rank keeps its own status: rank 3 exits 3 after a clean shutdown
launch -np 4 -H hvxc1:2,hvxc2:2 -- "$SPROBE" --code-rank 3 --code 3
check "rank 3's exit 3 after shutdown is the job's (rc=$rc, ${elapsed_ms} ms)" $((rc != 3))
grep -qF "hvxrun: rank 3 on host hvxc2 (local rank 1) exited with status 3" <<<"$err"
check "summary names rank 3 and its status" $?
[[ $rc == 3 ]] || show

# ---- failures still stop the job with the failing rank's status
launch -np 4 -H hvxc1:2,hvxc2:2 -- "$SPROBE" --fail-rank 2 --code 3
check "hvx rank 2 exiting 3 mid-job: rc 3 (rc=$rc, ${elapsed_ms} ms)" $((rc != 3))
check "stopped within 15 s (${elapsed_ms} ms)" $((elapsed_ms > 15000))
grep -qF "hvxrun: rank 2 on host hvxc2 (local rank 0) exited with status 3; it was the first of 4 ranks to fail" <<<"$err"
check "summary names rank 2, its host and status" $?
[[ $rc == 3 ]] || show

launch -np 4 -H hvxc1:2,hvxc2:2 -- "$PROBE" --exit-rank 3 --code 3
check "MPI rank 3 exiting 3: rc 3 (rc=$rc, ${elapsed_ms} ms)" $((rc != 3))
check "stopped within 15 s (${elapsed_ms} ms)" $((elapsed_ms > 15000))
[[ $rc == 3 ]] || show

no_processes_left hvxc1 hvxc2 hvxc3
echo "failures: $failures"
[[ $failures == 0 ]]

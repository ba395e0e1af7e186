#!/usr/bin/env bash
# hvxrun binds each rank to CPUs of its own, end to end: every rank of a job that fits the host's
# CPUs reads its block from /proc/self/status, the blocks are disjoint and cover the CPUs hvxrun
# may use; --bind-to none and a job with more ranks than CPUs leave every rank on all of them; a
# bad HVX_BIND_TO fails the rank, naming it.
#   cpu_binding_e2e_test.sh HVXRUN MPIEXEC
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
mine=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
ncpus=$(nproc)
echo "this test may use CPUs $mine ($ncpus)"
probe='echo "cpus=$(awk "/^Cpus_allowed_list/ {print \$2}" /proc/self/status) local=$HVX_LOCAL_RANK"'

# np = the CPUs: one each, in order, together all of them.
timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" -np "$ncpus" -- sh -c "$probe" >"$T/bound" 2>&1
check "a job of $ncpus ranks runs (rc=$?)" $?
cat "$T/bound"
got=$(sed -nE 's/^\[[0-9]+\] cpus=([^ ]+) local=([0-9]+)/\2 \1/p' "$T/bound" | sort -n | awk '{print $2}' | paste -sd,)
want=$(python3 -c "
import sys
cpus = []
for part in sys.argv[1].split(','):
    a, _, b = part.partition('-')
    cpus += list(range(int(a), int(b or a) + 1))
print(','.join(str(c) for c in cpus))" "$mine")
[[ $got == "$want" ]]; check "each rank has one CPU of its own, in order ($got, want $want)" $?

# --bind-to none: every rank on all of them.
timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" --bind-to none -np "$ncpus" -- sh -c "$probe" >"$T/none" 2>&1
check "a job with --bind-to none runs (rc=$?)" $?
n=$(grep -c "cpus=$mine " "$T/none")
[[ $n == "$ncpus" ]]; check "--bind-to none: every rank may use $mine ($n of $ncpus)" $?

# More ranks than CPUs: nobody is bound.
over=$((ncpus * 2))
timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" -np "$over" -- sh -c "$probe" >"$T/over" 2>&1
check "a job of $over ranks runs (rc=$?)" $?
n=$(grep -c "cpus=$mine " "$T/over")
[[ $n == "$over" ]]; check "more ranks than CPUs: every rank may use $mine ($n of $over)" $?

# A bad value reaches the wrapper through -x: the rank fails, naming it.
timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" -x HVX_BIND_TO=socket -np 1 -- true >"$T/bad" 2>&1
rc=$?
[[ $rc != 0 ]]; check "HVX_BIND_TO=socket fails the job (rc=$rc)" $?
grep -q "HVX_BIND_TO='socket' is not core or none" "$T/bad"; check "the message names the variable" $?
[[ $failures == 0 ]] || cat "$T/bad"

finish

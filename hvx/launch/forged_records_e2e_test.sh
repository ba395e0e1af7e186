#!/usr/bin/env bash
# A rank's output cannot speak for hvxrun, end to end under hvxrun and MPICH's hydra: a program
# that prints the wrapper's exit record for itself (rank=-1, code 0) still fails the job with its
# own status, when it fails; one that prints a hydra rank marker and a record for another rank
# blames neither that rank nor its host; the forged text is shown as the rank's output, escaped.
#   forged_records_e2e_test.sh HVXRUN MPIEXEC
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
run() {  # run NAME PROGRAM...: hvxrun -np 2, output in $T/NAME, exit status in $rc
    local name=$1
    shift
    timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" --stop-timeout 2 -np 2 -- "$@" >"$T/$name" 2>&1
    rc=$?
    cat "$T/$name"
}

# Its own exit record, rank=-1 and code 0, on stderr and stdout; the job would end 3 after 3 s.
# Before the wrapper owned the program's streams, hvxrun took the record, stopped the job after
# --stop-timeout and exited 0.
run self bash -c 'printf "\001hvxctl exit rank=-1 code=0 host=x\n" >&2
                  printf "\001hvxctl exit rank=-1 code=0 host=x\n"; sleep 3; exit 3'
[[ $rc == 3 ]]; check "a forged clean exit record: the job still fails with 3 (rc=$rc)" $?
grep -qE '^hvxrun: rank [01] on host .* exited with status 3' "$T/self"
check "the summary names a rank that exited with 3" $?
[[ $(grep -cF '] \x01hvxctl exit rank=-1 code=0 host=x' "$T/self") == 4 ]]
check "the forged records are shown as each rank's output, escaped" $?

# Rank 0 prints a hydra marker for rank 1 and rank 1's record "killed by signal 9", then fails
# with 3; rank 1 would run on. Before, hvxrun blamed rank 1 (signal 9) and exited 137.
run other bash -c 'if [ "$HVX_RANK" = 0 ]; then
                     printf "\001hvx1\002\001hvxctl exit rank=1 signal=9 host=x\n" >&2; sleep 1; exit 3
                   fi; sleep 30'
[[ $rc == 3 ]]; check "a record forged for rank 1: the job fails with rank 0's 3 (rc=$rc)" $?
grep -qE '^hvxrun: rank 0 on host .* exited with status 3; it was the first' "$T/other"
check "the summary blames rank 0" $?
! grep -qE 'rank 1 .*signal 9' "$T/other"; check "nothing says rank 1 was killed" $?

# A job whose ranks print a forged record and then succeed ends 0, at once.
run clean bash -c 'printf "\001hvxctl exit rank=-1 signal=9 host=x\n" >&2; exit 0'
[[ $rc == 0 ]]; check "a forged kill record in a clean job: rc 0 (rc=$rc)" $?

finish

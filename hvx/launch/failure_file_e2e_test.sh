#!/usr/bin/env bash
# hvxrun --failure-file: a failing job leaves hvxrun's summary there (the rank, its host, its status
# and its last stderr lines; SageMaker shows /opt/ml/output/failure as the job's reason), at most
# 1 KiB of it; a job that succeeds, or ends preempted (75), writes none; a job that cannot start
# leaves the reason it could not.
#   failure_file_e2e_test.sh HVXRUN MPIEXEC
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
file=$T/failure
run() {  # run PROGRAM...: hvxrun -np 2 with --failure-file, exit status in $rc
    rm -f "$file"
    timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" --failure-file "$file" -np 2 -- "$@" >"$T/out" 2>&1
    rc=$?
}

run bash -c 'if [ "$HVX_RANK" = 1 ]; then echo "cannot open shard 7" >&2; exit 3; fi; sleep 30'
cat "$T/out"
[[ $rc == 3 ]]; check "the failing job exits 3 (rc=$rc)" $?
cat "$file"
head -n 1 "$file" | grep -qE '^rank 1 on host .* exited with status 3; it was the first of 2 ranks'
check "the failure file starts with the summary naming rank 1 and its status" $?
grep -qF "cannot open shard 7" "$file"; check "and holds the rank's last stderr line" $?

run bash -c 'head -c 3000 /dev/zero | tr "\0" x >&2; echo >&2; exit 4'
[[ $rc == 4 && $(stat -c %s "$file") -le 1025 ]]
check "a long summary is cut to 1 KiB (rc=$rc, $(stat -c %s "$file" 2>/dev/null) bytes)" $?

run true
[[ $rc == 0 && ! -e $file ]]; check "a job that succeeds writes none (rc=$rc)" $?
run bash -c 'exit 75'
[[ $rc == 75 && ! -e $file ]]; check "a job that ends preempted (75) writes none (rc=$rc)" $?

rm -f "$file"
timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" --failure-file "$file" -np 2 --hostfile "$T/no-such-file" \
    -- true >"$T/out" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -qF "$T/no-such-file" "$file"
check "a job that cannot start leaves why (rc=$rc): $(cat "$file" 2>/dev/null)" $?

finish

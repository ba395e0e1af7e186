#!/usr/bin/env bash
# `hvxrun -x VAR` passes VAR's value to every rank without putting it on any command line: while
# the job runs, no process's arguments hold the value, as another user reads them (`ps` as
# nobody, where this test runs as root; /proc/PID/cmdline is world-readable either way), and a
# value given as `-x VAR=VALUE` is on hvxrun's own command line only, not mpiexec's or a rank's;
# every rank has both; --dry-run shows the variables' names, not their values.
#   env_secret_e2e_test.sh HVXRUN MPIEXEC
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
# Every process's arguments, read as another user where this one is root.
all_args() {
    if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
        setpriv --reuid=65534 --regid=65534 --clear-groups ps -eo args
    else
        ps -eo args
    fi
}

secret="s3cr3t-$$-$RANDOM"
flag=$T/ranks-started
rm -f "$flag".*
# Each rank writes its flag, then waits for the test to have looked.
HVX_TEST_SECRET=$secret timeout -k 5 60 "$HVXRUN" --mpiexec "$MPIEXEC" -x HVX_TEST_SECRET \
    -x "HVX_TEST_GIVEN=given-$$" -np 2 -- sh -c \
    'echo "rank $HVX_RANK has $HVX_TEST_SECRET and $HVX_TEST_GIVEN"; touch "'"$flag"'.$HVX_RANK"
     for i in $(seq 100); do [ -e "'"$flag"'.done" ] && exit 0; sleep 0.1; done; exit 1' \
    >"$T/out" 2>&1 &
job=$!
for i in $(seq 200); do [[ -e $flag.0 && -e $flag.1 ]] && break; sleep 0.1; done
[[ -e $flag.0 && -e $flag.1 ]]; check "both ranks started" $?
args=$(all_args)
grep -qF -- "--hvx-rank-wrapper" <<<"$args"; check "the job's processes are listed" $?
! grep -qF "$secret" <<<"$args"; check "no process's arguments hold the value" $?
! grep -v "$(basename "$HVXRUN") " <<<"$args" | grep -qF "given-$$"
check "a value given on hvxrun's command line is on no other's" $?
touch "$flag.done"
wait $job
rc=$?
cat "$T/out"
[[ $rc == 0 ]]; check "the job ends 0 (rc=$rc)" $?
[[ $(grep -cE "^\[[01]\] rank [01] has $secret and given-$$\$" "$T/out") == 2 ]]
check "every rank has both values (-x VAR and -x VAR=VALUE)" $?

dry=$(HVX_TEST_SECRET=$secret "$HVXRUN" --dry-run --mpiexec "$MPIEXEC" -x HVX_TEST_SECRET -np 2 -- true 2>&1)
echo "$dry"
! grep -qF "$secret" <<<"$dry"; check "--dry-run does not print the value" $?
grep -qE "^hvxrun: environment \(values not shown\): .*HVX_TEST_SECRET" <<<"$dry"
check "--dry-run names the variable" $?

finish

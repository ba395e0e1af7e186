#!/usr/bin/env bash
# hvx::Init's launcher checks end to end with the real hvx_info binary, no root needed:
# - started alone (no hvxrun, no mpiexec) in a fabricated two-host SageMaker-style environment,
#   it fails and prints the hvxrun command that starts the intended job;
# - started by plain mpiexec with a wrong HVX_LOCAL_SIZE, it fails naming the variable, the value
#   the launcher set and the value the transport reports.
#   init_checks_test.sh HVX_INFO MPIEXEC
set -uo pipefail
INFO=$(readlink -f "$1")
MPIEXEC=$(readlink -f "$2")
TMP=${TEST_TMPDIR:-$(mktemp -d)}
# MPICH leaks in MPI_Finalize; an ASan build must not report that (others ignore the variable).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
failures=0
check() {  # check NAME STATUS (0 = ok)
    if [[ $2 == 0 ]]; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}
# Only the variables named here, so nothing from the test's own environment (a PMI_* or SLURM_*
# of an outer launcher) decides the outcome.
clean_env=(env -i PATH=/usr/bin:/bin HOME="$TMP" ASAN_OPTIONS="$ASAN_OPTIONS"
           ${UCX_MEM_EVENTS+UCX_MEM_EVENTS="$UCX_MEM_EVENTS"})

# ---- singleton in a SageMaker-style cluster of 2 hosts x 8 GPUs
cat >"$TMP/resourceconfig.json" <<'JSON'
{"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"}
JSON
timeout -k 5 60 "${clean_env[@]}" SM_HOSTS='["algo-1","algo-2"]' SM_CURRENT_HOST=algo-1 \
    SM_NUM_GPUS=8 SM_NUM_CPUS=8 SM_RESOURCE_CONFIG="$(cat "$TMP/resourceconfig.json")" \
    "$INFO" --check >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
check "singleton under SM_HOSTS fails (rc=$rc)" $((rc == 0 || rc == 124 || rc == 137))
grep -qF "hvxrun -np 16 -H algo-1:8,algo-2:8 -- $INFO --check" "$TMP/err"
check "message gives the hvxrun command: $(grep -o 'hvxrun -np.*' "$TMP/err")" $?
grep -qF 'SM_HOSTS=["algo-1","algo-2"]' "$TMP/err"; check "message names the evidence (SM_HOSTS)" $?
[[ ! -s $TMP/out ]]; check "no topology line printed" $?
[[ $failures == 0 ]] || { echo "--- stderr"; cat "$TMP/err"; }

# ---- the same program started alone on purpose is allowed
timeout -k 5 60 "${clean_env[@]}" SM_HOSTS='["algo-1","algo-2"]' SM_CURRENT_HOST=algo-1 \
    SM_NUM_GPUS=8 HVX_ALLOW_SINGLETON=1 "$INFO" >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
check "HVX_ALLOW_SINGLETON=1 runs alone (rc=$rc)" $rc
grep -qF '"size":1' "$TMP/out"; check "and reports size 1" $?

# ---- plain mpiexec with a wrong HVX_LOCAL_SIZE: both values named
timeout -k 5 60 "${clean_env[@]}" "$MPIEXEC" -n 2 -genv HVX_LOCAL_SIZE 3 "$INFO" \
    >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
check "wrong HVX_LOCAL_SIZE fails (rc=$rc)" $((rc == 0 || rc == 124 || rc == 137))
n=$(grep -c "the launcher set HVX_LOCAL_SIZE=3 but the transport reports 2 (rank [01] of 2 on host " "$TMP/err")
[[ $n == 2 ]]; check "both ranks name HVX_LOCAL_SIZE, 3 and 2 ($n lines)" $?
[[ ! -s $TMP/out ]]; check "no topology line printed" $?
[[ $failures == 0 ]] || { echo "--- stderr"; cat "$TMP/err"; }

# ---- and with the values a correct launcher sets, the same start succeeds
timeout -k 5 60 "${clean_env[@]}" "$MPIEXEC" -n 2 -genv HVX_LOCAL_SIZE 2 -genv HVX_SIZE 2 "$INFO" \
    >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
check "matching HVX_LOCAL_SIZE/HVX_SIZE pass (rc=$rc)" $rc
[[ $(grep -c '"local_size":2' "$TMP/out") == 2 ]]; check "two ranks report local_size 2" $?

echo "failures: $failures"
[[ $failures == 0 ]]

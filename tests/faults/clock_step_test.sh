#!/usr/bin/env bash
# One rank's wall clock stepped by an hour mid-job (NTP, an operator), through libfaketime on that
# rank only, its monotonic clock left alone as a step leaves it. hvx measures waits and deadlines
# on the monotonic clock (hvx/common/clock.h):
#   - an hour forward: the job goes on and ends cleanly under a 4 s collective timeout;
#   - an hour back, then its peer frozen (SIGSTOP): the rank still gives up within the collective
#     timeout. Measured on the wall clock, its wait was an hour longer: the job ran on until
#     hvxrun's --timeout.
#   clock_step_test.sh HVXRUN FAULT_PROBE MPIEXEC
# Prints SKIPPED where libfaketime (Debian's faketime) is not installed.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
PROBE=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
T=${TEST_TMPDIR:-$(mktemp -d)}
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
[[ -f $FAKETIME_LIB ]] || { echo "SKIPPED: libfaketime is not installed (Debian's faketime)"; exit 0; }
source "$(dirname "${BASH_SOURCE[0]}")/../multihost/lib.sh"  # check and $failures
TIMEOUT_S=4

# start SECONDS: the probe on 2 ranks for SECONDS of steps, rank 1's wall clock offset read from
# $T/clock (re-read every second). Waits until both ranks are in their steps.
start() {
    echo "+0" >"$T/clock"
    t0=$(date +%s%N)
    timeout -k 5 120 "$HVXRUN" --mpiexec "$MPIEXEC" --timeout 60 --stop-timeout 5 \
        -x CLOCK_FILE="$T/clock" -x FAKETIME_LIB="$FAKETIME_LIB" -x HVX_COLLECTIVE_TIMEOUT_S=$TIMEOUT_S \
        -x HVX_SHUTDOWN_TIMEOUT_S=$TIMEOUT_S -np 2 -- /bin/sh -c \
        'if [ "$HVX_RANK" = 1 ]; then
             export LD_PRELOAD=$FAKETIME_LIB FAKETIME_TIMESTAMP_FILE=$CLOCK_FILE \
                 FAKETIME_CACHE_DURATION=1 FAKETIME_DONT_FAKE_MONOTONIC=1
         fi
         exec "$0" --seconds "$1"' "$PROBE" "$1" >"$T/out" 2>"$T/err" &
    pid=$!
    for _ in $(seq 300); do
        [[ $(grep -c "hvx initialized" "$T/err") == 2 ]] && break
        sleep 0.1
    done
    sleep 0.5
}
since_ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

# ---- an hour forward, 2 s into 8 s of steps (twice the timeout after the step)
start 8
echo "+1h" >"$T/clock"
wait "$pid"
rc=$?
[[ $rc == 0 ]]; check "rank 1's clock an hour ahead: the job ends cleanly (rc $rc)" $?
wall=$(sed -nE 's/^\[1\] rank 1 done, wall clock ([0-9]+)$/\1/p' "$T/out")
[[ -n $wall ]] && ((wall > $(date +%s) + 3000))
check "rank 1's wall clock was an hour ahead (${wall:-no line} vs $(date +%s))" $?
((failures == 0)) || tail -n 20 "$T/err"

# ---- an hour back, then rank 0 frozen: rank 1 must give up within the timeout
start 60
echo "-1h" >"$T/clock"
sleep 1.5  # rank 1 has read the new offset
rank0=""
for p in $(pgrep -f "$PROBE --seconds"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "HVX_RANK=0" && rank0=$p
done
[[ -n $rank0 ]]; check "found rank 0 ($rank0)" $?
kill -STOP "$rank0"
frozen=$(date +%s%N)
wait "$pid"
rc=$?
kill -CONT "$rank0" 2>/dev/null
ms=$(since_ms "$frozen")
[[ $rc != 0 ]] && ((ms <= (TIMEOUT_S + 10) * 1000))
check "rank 1's clock an hour behind, rank 0 frozen: the job ended in $ms ms (bound $((TIMEOUT_S + 10)) s), rc $rc" $?
grep -q "\[1\].*DEADLINE_EXCEEDED" "$T/err"
check "rank 1 says its collective timed out" $?
((failures == 0)) || tail -n 20 "$T/err"
((failures == 0)) && echo PASSED
exit $((failures != 0))

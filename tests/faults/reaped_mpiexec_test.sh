#!/usr/bin/env bash
# hvxrun never signals mpiexec's pid once it has reaped mpiexec: a record read while draining the
# pipes (a rank's failure, after mpiexec has ended) used to make it send SIGINT to that pid, which
# may belong to another process by then. In a pid namespace of its own, a stand-in mpiexec
# (exit_then_record_mpiexec.sh) exits at once; after hvxrun has reaped it, a decoy outside hvxrun's
# descendants is given its pid, and then rank 0's error record arrives. The decoy must get no
# signal.
#   reaped_mpiexec_test.sh HVXRUN FAKE_MPIEXEC
# Needs root (a pid namespace, and ns_last_pid to hand the pid on); prints SKIPPED without it.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
FAKE=$(readlink -f "$2")
T=${TEST_TMPDIR:-$(mktemp -d)}
[[ $(id -u) == 0 ]] || { echo "SKIPPED: needs root for a pid namespace (uid $(id -u))"; exit 0; }
unshare --pid --fork --mount-proc true 2>/dev/null ||
    { echo "SKIPPED: cannot create a pid namespace here"; exit 0; }
source "$(dirname "${BASH_SOURCE[0]}")/../multihost/lib.sh"  # check and $failures

for run in 1 2 3; do
    rm -f "$T"/decoy*
    # A shell is the namespace's first process. It starts hvxrun, and the decoy when the stand-in
    # asks (ns_last_pid one below the pid it wants; nothing forks between), so that the decoy
    # does not descend from hvxrun; the namespace, and the decoy, end with the shell, after the
    # decoy has had time to write what it got.
    DECOY=$T/decoy timeout -k 5 60 unshare --pid --fork --mount-proc /bin/sh -c '
        "$0" --mpiexec "$1" --timeout 30 -x DECOY -np 1 -- /bin/true & hv=$!
        for i in $(seq 200); do [ -s "$DECOY.want" ] && break; sleep 0.05; done
        echo $(($(cat "$DECOY.want") - 1)) >/proc/sys/kernel/ns_last_pid
        python3 -c "
import os, signal, sys, time
def got(sig, frame):
    with open(sys.argv[1], \"w\") as f:
        f.write(\"signal %d\\n\" % sig)
    sys.exit(0)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
    signal.signal(s, got)
with open(sys.argv[1] + \".pid.tmp\", \"w\") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + \".pid.tmp\", sys.argv[1] + \".pid\")
time.sleep(5)
" "$DECOY" &
        wait $hv; rc=$?; sleep 0.5; exit $rc' "$HVXRUN" "$FAKE" >"$T/out" 2>"$T/err"
    rc=$?
    pid=$(cat "$T/decoy.mpiexec" 2>/dev/null)
    [[ -n $pid && $(cat "$T/decoy.pid" 2>/dev/null) == "$pid" ]]
    check "run $run: the decoy took mpiexec's pid $pid after hvxrun reaped it" $?
    got=$(cat "$T/decoy" 2>/dev/null)
    [[ ! -e $T/decoy ]]; check "run $run: the decoy got no signal${got:+ (it got $got)}" $?
    [[ $rc == 3 ]] && grep -qF "hvxrun: rank 0 on host" "$T/err"
    check "run $run: hvxrun reports rank 0's record (rc $rc)" $?
    ((failures == 0)) || { cat "$T/err"; break; }
done
((failures == 0)) && echo PASSED
exit $((failures != 0))

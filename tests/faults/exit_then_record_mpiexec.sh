#!/bin/sh
# Stands in for mpiexec: exits at once, leaving behind (in a session of its own, so that nothing
# keeps this pid in use as a process group) a process that holds hvxrun's pipes, waits until
# hvxrun has reaped this script, gives this script's pid to a decoy, and then writes rank 0's
# error record, which makes hvxrun stop the job. Writes its pid to $DECOY.mpiexec, the decoy's to
# $DECOY.pid, and the decoy writes the signal it gets to $DECOY. For reaped_mpiexec_test.sh.
export ME=$$
echo "$ME" >"$DECOY.mpiexec"
setsid sh -c '
    for i in $(seq 100); do [ -e /proc/$ME ] || break; sleep 0.05; done
    echo $((ME - 1)) >/proc/sys/kernel/ns_last_pid
    python3 -c "
import os, signal, sys, time
def got(sig, frame):
    with open(sys.argv[1], \"w\") as f:
        f.write(\"signal %d\n\" % sig)
    sys.exit(0)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
    signal.signal(s, got)
open(sys.argv[1] + \".pid\", \"w\").write(str(os.getpid()))
time.sleep(5)
" "$DECOY" &
    for i in $(seq 100); do [ -s "$DECOY.pid" ] && break; sleep 0.05; done
    printf "\001hvx0\002\001hvxctl error rank=0 host=localhost code=3 msg=stop the job\n" >&2
    sleep 1
' &
exit 0

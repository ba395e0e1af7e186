#!/bin/sh
# Stands in for mpiexec: exits at once, leaving behind (in a session of its own) a process that
# holds hvxrun's pipes. That process waits until hvxrun has reaped this script, asks the pid
# namespace's first process for a decoy with this script's pid (it writes the pid to
# $DECOY.want; the decoy must not descend from hvxrun, which ends what the job leaves behind),
# waits for the decoy, and then writes rank 0's error record, which makes hvxrun stop the job.
# Writes its pid to $DECOY.mpiexec. For reaped_mpiexec_test.sh.
export ME=$$
echo "$ME" >"$DECOY.mpiexec"
setsid sh -c '
    for i in $(seq 100); do [ -e /proc/$ME ] || break; sleep 0.05; done
    echo "$ME" >"$DECOY.want.tmp" && mv "$DECOY.want.tmp" "$DECOY.want"
    # No process may start until the decoy has the pid: wait with builtins only.
    n=0
    while [ ! -s "$DECOY.pid" ] && [ $n -lt 2000000 ]; do n=$((n + 1)); done
    printf "\001hvx0\002\001hvxctl error rank=0 host=localhost code=3 msg=stop the job\n" >&2
    sleep 1
' &
exit 0

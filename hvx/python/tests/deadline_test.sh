#!/usr/bin/env bash
# deadlines_check.py on 2 ranks with a 3 s collective timeout and a 1 s stall check: every test
# passes, and rank 0's stall inspector warned from the Python job, naming the missing rank (-s:
# the engine logs to stderr, which pytest would otherwise capture). Then hvxrun is stopped by
# SIGTERM and by SIGKILL while a rank waits in a barrier: no process of the job may outlive it.
#   deadline_test.sh HVXRUN PYTHON
set -uo pipefail
HVXRUN=$(readlink -f "$1"); PYTHON=$(readlink -f "$2")
ROOT=$PWD
export PYTHONPATH="$ROOT/hvx/python" HVX_COLLECTIVE_TIMEOUT_S=3 HVX_STALL_CHECK_TIME_S=1
cd "${TEST_TMPDIR:-$(mktemp -d)}" || exit 1
"$HVXRUN" -np 2 -- "$PYTHON" -m pytest -q -s -p no:cacheprovider \
    --rootdir "$ROOT/hvx/python/tests" "$ROOT/hvx/python/tests/deadlines_check.py" >out.txt 2>&1
rc=$?
cat out.txt
[[ $rc == 0 ]] || { echo "FAIL: the job exited $rc"; exit 1; }
grep -q 'Some tensors were submitted by only some ranks' out.txt && grep -q '  1: \[barrier\]' out.txt \
    || { echo "FAIL: no stall warning naming rank 1 and the barrier it skipped"; exit 1; }
echo "ok: every wait ended within the timeout, and the stall inspector warned"

# A rank stuck in its own Python code (a data loader that never returns): hvxrun's verdict names
# it, the op the other rank submitted (with its Python line) and where the stuck rank is, from the
# Python frames and the main thread's native ones that its wrapper asked for while the job hung.
cat >stuck.py <<'PY'
import torch
import hvx.torch as hvd


def read_batch(n):
    total = 0
    while True:  # a data loader that never returns
        total += n


hvd.init()
hvd.allreduce(torch.ones(1), name="warmup")
if hvd.rank() == 1:
    read_batch(1)
hvd.allreduce(torch.ones(1), name="step.1")
PY
HVX_COLLECTIVE_TIMEOUT_S=4 "$HVXRUN" -np 2 --output-dir stuck -- "$PYTHON" stuck.py >stuck.txt 2>&1
rc=$?
grep -E "^hvxrun: verdict: rank 1 \(host [^,]+, local rank 1\) did not submit allreduce 'step\.1' \(set 0, seq 2, from \S*stuck\.py:15\) .*in its own code" stuck.txt &&
    grep -q '^hvxrun:   rank 1 Python stack (most recent call first):$' stuck.txt &&
    grep -E "^hvxrun:   rank 1   File \".*/stuck\.py\", line [78] in read_batch$" stuck.txt &&
    grep -E "^hvxrun:   rank 1   File \".*/stuck\.py\", line 14 in <module>$" stuck.txt &&
    grep -A1 -E '^hvxrun:   rank 1 native stack of its thread [0-9]+ \S+ \(main\):$' stuck.txt |
    grep -qE '^hvxrun:   rank 1   #0 0x[0-9a-f]+ '
found=$?
[[ $rc != 0 && $found == 0 ]] || { cat stuck.txt; echo "FAIL: rc $rc; no verdict with rank 1's Python frames"; exit 1; }
echo "ok: the verdict shows where rank 1's Python code was stuck"

# hvxrun stopped while rank 1 waits in a barrier that rank 0 (asleep) never enters: by SIGTERM
# (the job ends on the checkpoint request it forwards, which this program does not handle), and
# killed outright (SIGKILL runs no handler), nothing of the job may be left running. The job
# stays silent meanwhile (no stall warning, no timeout): a write to the dead launcher's pipe would
# end it by SIGPIPE and hide a job that outlives a quiet launcher.
export HVX_COLLECTIVE_TIMEOUT_S=600 HVX_STALL_CHECK_TIME_S=600
for sig in TERM KILL; do
    marker="hvx-orphan-check-$sig-$$"
    "$HVXRUN" -np 2 -- "$PYTHON" -c '
import sys, time
import hvx.torch as hvd
hvd.init()
print("waiting", flush=True)
time.sleep(600) if hvd.rank() == 0 else hvd.barrier()
' "$marker" >"orphan-$sig.txt" 2>&1 &
    launcher=$!
    for _ in $(seq 100); do
        [[ $(grep -c waiting "orphan-$sig.txt") == 2 ]] && break
        sleep 0.2
    done
    [[ $(grep -c waiting "orphan-$sig.txt") == 2 ]] \
        || { cat "orphan-$sig.txt"; echo "FAIL: the ranks did not start"; exit 1; }
    sleep 0.5  # rank 1 is in the barrier's native wait
    kill -s "$sig" "$launcher"
    killed_at=$(date +%s%N)
    wait "$launcher"
    took_ms=$((($(date +%s%N) - killed_at) / 1000000))
    # SIGTERM is a preemption notice: hvxrun asks the ranks to checkpoint and end (SIGUSR1), and a
    # program that does not handle the request ends on it, well within --preempt-grace (30 s).
    if [[ $sig == TERM ]] && ((took_ms > 10000)); then
        cat "orphan-$sig.txt"
        echo "FAIL: hvxrun took $took_ms ms to end after SIGTERM: the ranks did not end on SIGUSR1"
        exit 1
    fi
    left=""
    for _ in $(seq 50); do
        left=$(pgrep -f "$marker")
        [[ -z $left ]] && break
        sleep 0.2
    done
    if [[ -n $left ]]; then
        ps -o pid,ppid,args -p "$(tr '\n' ',' <<<"$left" | sed 's/,$//')"
        kill -KILL $left 2>/dev/null
        echo "FAIL: after SIG$sig to hvxrun, processes of the job outlived it 10 s"
        exit 1
    fi
    echo "ok: SIG$sig to hvxrun while a rank waited left nothing running"
done

#!/usr/bin/env bash
# A preemption notice: SIGTERM to the trainer's launcher mid-epoch. hvxrun forwards it as a
# checkpoint request; both ranks stop after the same step, rank 0 saves that step's checkpoint,
# every rank exits 0 and hvxrun exits 75 (run again to resume). Running the same command again
# resumes there, and the losses and learning rates of both runs are those of an uninterrupted run,
# step by step. A second signal stops at once.
#   preempt_test.sh TRAIN MAKE_IDX LIB HVXRUN MPIEXEC
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); source "$3"
HVXRUN=$(readlink -f "$4"); MPIEXEC=$(readlink -f "$5")
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" cnn 480 40 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }
common=(--config="$T/tiny.pbtxt" --override='launch { num_processes: "2" }')

timeout -k 5 200 "$TRAIN" "${common[@]}" --override="checkpoint { dir: \"$T/ck_full\" }" >"$T/full.out" 2>"$T/full.err"
check "the uninterrupted run exits 0 (rc=$?)" $?

# start NAME CKPT_DIR: the trainer in the background; its pid in $pid. --foreground: a signal to
# `timeout` reaches the trainer once (without it, timeout sends it to the trainer and then to its
# whole process group, the trainer again: a second notice, which stops the job at once when the
# first was handled in between).
start() {
    timeout --foreground -k 5 200 "$TRAIN" "${common[@]}" --override="checkpoint { dir: \"$2\" }" >"$T/$1.out" 2>"$T/$1.err" &
    pid=$!
}
# signal_at STEP SIGNALS...: once rank 0 logged that step of epoch 1, sends each signal in turn.
signal_at() {
    local step=$1
    shift
    for _ in $(seq 1 600); do
        grep -qE "^\[0\] epoch 1/2 step $step/" "$T/$name.out" 2>/dev/null && break
        sleep 0.05
    done
    for s in "$@"; do kill -"$s" "$pid"; done
}

name=preempted
start "$name" "$T/ck"
signal_at 8 TERM
wait "$pid"
rc=$?
[[ $rc == 75 ]]; check "SIGTERM mid-epoch: the job exits 75 (rc=$rc)" $?
at=$(sed -nE 's/.*preempted at step ([0-9]+); checkpoint .*/\1/p' "$T/$name.err" | head -n 1)
[[ -n $at && $at -ge 8 && $at -lt 24 ]] && [[ -f $T/ck/ckpt-$at.pt ]] &&
    grep -qF "preempted at step $at; checkpoint $T/ck/ckpt-$at.pt" "$T/$name.err"
check "both ranks stopped at step ${at:-?} of epoch 1, whose checkpoint is there" $?
grep -qF 'hvxrun: preempted: every rank ended cleanly after the checkpoint request (signal 15); exit status 75' "$T/$name.err"
check "hvxrun says it was preempted and how to resume" $?
[[ $(losses "$T/$name.out" | wc -l) == "$at" ]]; check "the preempted run logged ${at:-?} steps" $?

timeout -k 5 200 "$TRAIN" "${common[@]}" --override="checkpoint { dir: \"$T/ck\" }" >"$T/resumed.out" 2>"$T/resumed.err"
rc=$?
[[ $rc == 0 ]] && grep -qF "resuming from $T/ck/ckpt-$at.pt" "$T/resumed.out" "$T/resumed.err"
check "the same command resumes from ckpt-$at.pt and finishes (rc=$rc)" $?
if diff <(losses "$T/full.out") <(losses "$T/$name.out" "$T/resumed.out") >"$T/diff.txt"; then
    check "losses and learning rates equal the uninterrupted run's, step by step" 0
else
    check "losses and learning rates equal the uninterrupted run's, step by step" 1
    head -n 5 "$T/diff.txt"
fi

# checkpoint.every_seconds: a checkpoint at the first step boundary after the interval (a tiny one
# here: after every step), none mid-epoch without it.
timeout -k 5 200 "$TRAIN" "${common[@]}" --override="checkpoint { dir: \"$T/ck_time\" every_seconds: 0.000001 keep: 100 }" \
    --max_steps=5 >"$T/time.out" 2>"$T/time.err"
rc=$?
[[ $rc == 0 && $(ls "$T/ck_time" | grep -cE '^ckpt-[1-5]\.pt$') == 5 ]]
check "every_seconds: a checkpoint after each of 5 steps (rc=$rc: $(ls "$T/ck_time" | tr '\n' ' '))" $?
[[ $(ls "$T/ck" | grep -cE '^ckpt-') -le 4 ]]
check "without every_seconds or every_steps, no checkpoint mid-epoch but the preemption's" $?

# A program that ignores the request: a second signal, or the grace period, stops it. (hvxrun
# is signalled itself: `timeout` would forward only the first signal.)
ignoring=(/bin/sh -c 'trap "" USR1; sleep 30')
"$HVXRUN" --timeout 60 --mpiexec "$MPIEXEC" -np 2 -- "${ignoring[@]}" >"$T/twice.out" 2>"$T/twice.err" &
pid=$!
for _ in $(seq 1 100); do grep -q . "$T/twice.err" 2>/dev/null || sleep 0.05; done
sleep 1
kill -TERM "$pid"
for _ in $(seq 1 100); do grep -qF 'asked the ranks to checkpoint' "$T/twice.err" && break; sleep 0.05; done
t0=$(date +%s%N)
kill -TERM "$pid"
wait "$pid"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $rc == 143 && $ms -lt 12000 ]] && grep -qF 'hvxrun: stopped the job on signal 15' "$T/twice.err"
check "a second SIGTERM stops a job that ignores the request (rc=$rc, ${ms} ms)" $?
[[ $rc == 143 ]] || cat "$T/twice.err"

t0=$(date +%s%N)
"$HVXRUN" --timeout 60 --mpiexec "$MPIEXEC" --preempt-grace 1 -np 2 -- "${ignoring[@]}" >"$T/grace.out" 2>"$T/grace.err" &
pid=$!
sleep 1.5
kill -TERM "$pid"
wait "$pid"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $rc == 143 && $ms -lt 14000 ]]
check "--preempt-grace 1: the job is stopped a second after the notice (rc=$rc, ${ms} ms in all)" $?

echo "failures: $failures"
[[ $failures == 0 ]]

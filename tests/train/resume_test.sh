#!/usr/bin/env bash
# Resume equivalence on CPU: a run stopped after 17 of 24 steps (mid-epoch) and resumed from its
# checkpoint prints exactly the per-step losses and learning rates of an uninterrupted run, and the
# same evaluation at the end (each rank's BatchNorm statistics survive the checkpoint).
# Two processes (self-launched), the CNN (BatchNorm, dropout), SGD with momentum, cosine schedule;
# then the same with four processes, whose float sums depend on the reduction order.
# Then: re-running the finished config says the run is complete and trains nothing; --fresh
# moves the old checkpoints aside and starts over from step 1.
#   resume_test.sh TRAIN MAKE_IDX LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); source "$3"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" cnn 240 40 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }
common=(--config="$T/tiny.pbtxt" --override='launch { num_processes: "2" } optimizer { schedule: COSINE warmup_epochs: 0.5 lr_scaling: BY_WORLD_SIZE }')

run() {  # run NAME ARGS...
    local name=$1; shift
    timeout -k 5 200 "$TRAIN" "${common[@]}" "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    check "$name exits 0 (rc=$rc)" $rc
    [[ $rc == 0 ]] || tail -n 20 "$T/$name.out" "$T/$name.err"
}

run full --override="checkpoint { dir: \"$T/ck_full\" }"
run first --override="checkpoint { dir: \"$T/ck_resume\" }" --max_steps=17
ls "$T/ck_resume" | grep -qx 'ckpt-17.pt'; check "the stopped run left ckpt-17.pt" $?
run second --override="checkpoint { dir: \"$T/ck_resume\" }"
grep -q "resuming from $T/ck_resume/ckpt-17.pt (epoch 2, step 17)" "$T/second.err" "$T/second.out"
check "the second run resumed from step 17" $?

[[ $(losses "$T/full.out" | wc -l) == 24 ]]; check "uninterrupted run logged 24 steps" $?
[[ $(losses "$T/first.out" | wc -l) == 17 && $(losses "$T/second.out" | wc -l) == 7 ]]
check "stopped run logged 17 steps, resumed run 7" $?
if diff <(losses "$T/full.out") <(losses "$T/first.out" "$T/second.out"); then
    check "losses and learning rates identical step by step" 0
else
    check "losses and learning rates identical step by step" 1
fi
evals() { sed -nE 's/.*(epoch 2\/2 eval accuracy [0-9.]+ loss [0-9.]+ on [0-9]+ samples).*/\1/p' "$@"; }
[[ -n $(evals "$T/full.out" "$T/full.err") ]]; check "uninterrupted run evaluated epoch 2" $?
if [[ -n $(evals "$T/full.out" "$T/full.err") ]] &&
    diff <(evals "$T/full.out" "$T/full.err") <(evals "$T/second.out" "$T/second.err"); then
    check "resumed run evaluates exactly like the uninterrupted one" 0
else
    check "resumed run evaluates exactly like the uninterrupted one" 1
fi
ls "$T/ck_resume" | grep -qx 'ckpt-24.pt'; check "final checkpoint written" $?
[[ $(ls "$T/ck_resume" | grep -c '^ckpt-.*\.pt$') -le 3 ]]; check "at most keep=3 checkpoints kept" $?

# The finished run again: one clear line, exit 0, no training.
run again --override="checkpoint { dir: \"$T/ck_resume\" }"
grep -q "the run in $T/ck_resume is already complete (2 of 2 epochs done, 24 steps); nothing to train. To start fresh, pass --fresh" "$T/again.out"
check "re-running a finished run says it is complete and how to start fresh" $?
[[ $(losses "$T/again.out" | wc -l) == 0 ]]; check "the finished run trained nothing" $?

# --fresh: the old checkpoints move aside, training starts at step 1 and matches the first run.
run fresh --override="checkpoint { dir: \"$T/ck_resume\" }" --fresh --max_steps=3
grep -q "moved the previous checkpoints to $T/ck_resume/replaced-" "$T/fresh.out" "$T/fresh.err"
check "--fresh reports where the old checkpoints went" $?
ls "$T"/ck_resume/replaced-*/ckpt-24.pt >/dev/null 2>&1; check "the finished run's checkpoint was kept aside" $?
[[ -f $T/ck_resume/ckpt-3.pt && ! -f $T/ck_resume/ckpt-24.pt ]]; check "the fresh run checkpointed at step 3" $?
# Stopped inside its first epoch, the run still reports the throughput of the steps it ran.
grep -qE '^\[0\] done: 3 steps in [0-9.]+ s, [1-9][0-9]* samples/s$' "$T/fresh.out"
check "a run stopped in its first epoch reports its throughput" $?
diff <(losses "$T/full.out" | head -3) <(losses "$T/fresh.out") >/dev/null
check "the fresh run's 3 steps equal the uninterrupted run's first 3" $?

# Four processes: with more than two ranks a float sum's rounding depends on the order of the
# additions, and the engine keeps one order per element whatever it fuses (before, each run of
# these 12 steps printed different losses). Stopped after 7 steps and resumed, the losses are
# the uninterrupted run's.
four='launch { num_processes: "4" }'
run full4 --override="$four checkpoint { dir: \"$T/ck_full4\" }"
run first4 --override="$four checkpoint { dir: \"$T/ck_resume4\" }" --max_steps=7
run second4 --override="$four checkpoint { dir: \"$T/ck_resume4\" }"
[[ $(losses "$T/full4.out" | wc -l) == 12 && $(losses "$T/first4.out" | wc -l) == 7 &&
    $(losses "$T/second4.out" | wc -l) == 5 ]]
check "4 processes: 12 steps uninterrupted, 7 + 5 resumed" $?
diff <(losses "$T/full4.out") <(losses "$T/first4.out" "$T/second4.out")
check "4 processes: losses and learning rates identical step by step" $?

echo "failures: $failures"
[[ $failures == 0 ]]

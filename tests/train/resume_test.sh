#!/usr/bin/env bash
# Resume equivalence on CPU: a run stopped after 17 of 24 steps (mid-epoch) and resumed from its
# checkpoint prints exactly the per-step losses and learning rates of an uninterrupted run.
# Two processes (self-launched), the CNN (BatchNorm, dropout), SGD with momentum, cosine schedule.
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
losses() { sed -nE 's/^\[0\] (epoch [0-9]+\/[0-9]+ step [0-9]+\/[0-9]+ loss [0-9.e-]+ lr [0-9.e-]+).*/\1/p' "$@"; }

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
ls "$T/ck_resume" | grep -qx 'ckpt-24.pt'; check "final checkpoint written" $?
[[ $(ls "$T/ck_resume" | grep -c '^ckpt-.*\.pt$') -le 3 ]]; check "at most keep=3 checkpoints kept" $?

echo "failures: $failures"
[[ $failures == 0 ]]

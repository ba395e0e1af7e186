#!/usr/bin/env bash
# Resuming at another world size or batch size: a run stopped in the middle of its first epoch
# and resumed with 2 -> 4 processes, 4 -> 2 processes, and batch 64 -> 32 trains each position of
# the epoch's permutation not yet seen exactly once (under DROP the remainder of the new global
# batch left out, as every epoch leaves it out; under PAD all of it, the last step short), says
# how many samples remain, and from there prints
# the step counters and learning rates of an uninterrupted run at the new size, whose second
# epoch it also trains sample for sample.
#   resize_resume_test.sh TRAIN MAKE_IDX EPOCH_AUDIT LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); EPOCH_AUDIT=$(readlink -f "$3"); source "$4"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
N=320
tiny_config "$T" mlp $N 40 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }
# The rates depend on the world size and on the steps per epoch.
schedule='optimizer { schedule: COSINE lr_scaling: BY_WORLD_SIZE }'

run() {  # run NAME OVERRIDE [ARGS...]: the trainer, sample log in $T/NAME.log
    local name=$1 override=$2; shift 2
    timeout -k 5 200 "$TRAIN" --config="$T/tiny.pbtxt" --override="$schedule $override" \
        --sample_log="$T/$name.log" "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    check "$name exits 0 (rc=$rc)" $rc
    [[ $rc == 0 ]] || tail -n 20 "$T/$name.out" "$T/$name.err"
}
# Rank 0's progress lines without the loss: epoch, step counter, learning rate.
steps() { sed -nE 's/^\[0\] epoch ([0-9]+\/[0-9]+) step ([0-9]+\/[0-9]+) loss [^ ]+ (lr [^ ]+) .*/epoch \1 step \2 \3/p' "$1"; }

# resize NAME OLD NEW NEW_NP REF STOP CONSUMED FIRST END DONE LINE
#   OLD, NEW: overrides of the stopped and the resumed run; REF: an uninterrupted run at NEW (with
#   NEW_NP processes) that trained every position of both epochs; STOP: steps before the stop;
#   CONSUMED: the samples of epoch 1 they trained; FIRST: the new size's step counter before
#   the resumed run's first step; END: the positions epoch 1 trains in all; DONE: global steps at
#   the end; LINE: what the resumed run says about the rest of the epoch.
resize() {
    local name=$1 old=$2 new=$3 new_np=$4 ref=$5 stop=$6 consumed=$7 first=$8 end=$9 done=${10} line=${11}
    local old_np=${old#*num_processes: \"}; old_np=${old_np%%\"*}
    run "$name-stopped" "$old checkpoint { dir: \"$T/ck_$name\" }" --max_steps="$stop"
    ls "$T/ck_$name" | grep -qx "ckpt-$stop.pt"; check "$name: the stopped run left ckpt-$stop.pt" $?
    run "$name-resumed" "$new checkpoint { dir: \"$T/ck_$name\" }"
    grep -q "resuming from $T/ck_$name/ckpt-$stop.pt (epoch 1, step $stop)" "$T/$name-resumed.err"
    check "$name: resumed from step $stop" $?
    grep -qF "$line" "$T/$name-resumed.err"; check "$name: says: $line" $?
    "$EPOCH_AUDIT" $N 0 "$T/$ref.log" "$new_np" "$end" "$T/$name-stopped.log:$old_np:0" \
        "$T/$name-resumed.log:$new_np:$consumed"
    check "$name: epoch 1 over both runs: positions 0..$((end - 1)) of its permutation once each" $?
    diff <(steps "$T/$ref.out" | tail -n +$((first + 1))) <(steps "$T/$name-resumed.out")
    check "$name: from step $((first + 1)) on, step counters and learning rates of the uninterrupted run" $?
    local r same=0
    for ((r = 0; r < new_np; r++)); do
        cmp -s "$T/$ref.log/rank$r-epoch1.txt" "$T/$name-resumed.log/rank$r-epoch1.txt" || same=1
    done
    check "$name: epoch 2 trains the uninterrupted run's samples on every rank" $same
    grep -qE "^\[0\] done: $done steps " "$T/$name-resumed.out"; check "$name: $done global steps in all" $?
}

two='launch { num_processes: "2" }'
four='launch { num_processes: "4" }'
run ref4 "$four"                                   # 8 steps of 40 per epoch
run ref2 "$two"                                    # 16 steps of 20
run ref2b32 "$two data { batch_size: 32 }"         # 5 steps of 64

# 2 -> 4: 100 of 320 samples seen; 220 remain, 5 steps of 40 take 200 (from step 4/8), the
# last 20 of the permutation are less than one global batch and are left out.
resize grow "$two" "$four" 4 ref4 5 100 3 300 18 \
    "epoch 1 resumes at step 4/8: 220 of its 320 samples remain; 5 steps of 4 ranks x batch 10 train 200 of them, the last 20 (less than one global batch) are left out (data.remainder: DROP)"
# The same under PAD: 220 remain, 55 per rank, 6 steps from step 3/8 of which the last trains 5
# rows per rank; nothing is left out. (320 fill 4 x 10 evenly, so ref4 is also PAD's run.)
pad='data { remainder: PAD }'
resize grow_pad "$two $pad" "$four $pad" 4 ref4 5 100 2 320 19 \
    "epoch 1 resumes at step 3/8: 220 of its 320 samples remain; 6 steps of 4 ranks x batch 10 train all of them"
# 4 -> 2: 120 seen; 200 remain, 10 steps of 20 from step 7/16.
resize shrink "$four" "$two" 2 ref2 3 120 6 320 29 \
    "epoch 1 resumes at step 7/16: 200 of its 320 samples remain; 10 steps of 2 ranks x batch 10 train all of them"
# Batch 64 -> 32 on 2 processes: 128 seen; 192 remain, 3 steps of 64 from step 3/5.
resize batch "$two data { batch_size: 64 }" "$two data { batch_size: 32 }" 2 ref2b32 1 128 2 320 9 \
    "epoch 1 resumes at step 3/5: 192 of its 320 samples remain; 3 steps of 2 ranks x batch 32 train all of them"
grep -q "world size or batch size changed since the checkpoint: 2 ranks x batch 64, now 2 ranks x batch 32" \
    "$T/batch-resumed.err"
check "batch: says what changed" $?

echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# data/imagenet.pbtxt, then data/imagenet_fast.pbtxt, end to end on a tiny ImageNet-layout dataset made here from synthetic JPEGs
# (4 classes, labels 1..4 as in the standard conversion): ResNet-50 at 224x224 as configured (the
# fast config at 64x64), with only sizes overridden (2 processes x batch 2, 3 steps, one evaluation). Checks the scaled and
# warmed-up learning rate of the config, the evaluation count, the checkpoint, the message for
# data that is not where the config says, and the one for labels outside the model's classes.
#   imagenet_test.sh TRAIN MAKE_TINY_IMAGENET LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE=$(readlink -f "$2"); source "$3"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

timeout 60 "$MAKE" "$T/in" 4 6 2 || { echo "FAIL: could not write the dataset"; exit 1; }
ls "$T/in"

data="data { train_files: \"$T/in/train-*\" eval_files: \"$T/in/validation-*\" batch_size: 2 eval_batch_size: 4 reader_threads: 1 decode_threads: 1 }"
small="epochs: 1 logging { max_steps_per_epoch: 3 log_every_steps: 1 } device: \"cpu\" threads: 1"

# Data not where the config says: a message naming the field, the pattern and the expected layout.
timeout -k 5 60 "$TRAIN" --config=imagenet.pbtxt --override="$small launch { num_processes: \"1\" }" \
    --override="data { train_files: \"$T/nowhere/train-*\" } checkpoint { dir: \"$T/ck0\" } summaries_dir: \"\"" \
    >"$T/missing.out" 2>&1
rc=$?
[[ $rc != 0 ]]; check "missing data fails (rc=$rc)" $?
grep -q "data.train_files: file pattern '$T/nowhere/train-\*' matches no record files (directory $T/nowhere/ does not exist); ImageNet is expected as TFRecord shards in the standard layout" "$T/missing.out"
check "missing data: the message names the field, the pattern and the layout" $?

# Labels outside the model's classes (offset 0 leaves 1..4; 4 classes means 0..3).
timeout -k 5 120 "$TRAIN" --config=imagenet.pbtxt --override="$small $data launch { num_processes: \"1\" }" \
    --override="data { label_offset: 0 } model { num_classes: 4 } checkpoint { dir: \"$T/ck1\" } summaries_dir: \"\"" \
    >"$T/labels.out" 2>&1
rc=$?
[[ $rc != 0 ]]; check "a label outside num_classes fails (rc=$rc)" $?
grep -qE "sample [0-9]+ has label 4, which with data.label_offset 0 is 4, outside \[0, 4\) of model.num_classes" "$T/labels.out"
check "the label message names the sample, the label and the offset" $?

# The run itself: 2 ranks, ResNet-50 224x224, config's optimizer, 3 steps, evaluation, checkpoint.
start=$(date +%s)
timeout -k 5 400 "$TRAIN" --config=imagenet.pbtxt --override="$small $data launch { num_processes: \"2\" }" \
    --override="checkpoint { dir: \"$T/ck\" } summaries_dir: \"$T/summaries\"" >"$T/run.out" 2>&1
rc=$?
echo "imagenet run: rc=$rc in $(($(date +%s) - start)) s"
check "imagenet.pbtxt trains on the tiny dataset (rc=$rc)" $rc
[[ $rc == 0 ]] || tail -n 30 "$T/run.out"
steps=$(grep -cE '^\[0\] epoch 1/1 step [1-3]/3 loss [0-9.e+-]+ lr ' "$T/run.out")
[[ $steps == 3 ]]; check "rank 0 logged 3 steps (got $steps)" $?
grep -qE 'step [0-9]+/3 loss (nan|inf)' "$T/run.out"; [[ $? != 0 ]]; check "losses are finite" $?
# lr 0.1 per 256 of global batch (2 x 2 = 4) = 0.0015625, warmup 5 epochs (15 steps) from half of it.
grep -qE '^\[0\] epoch 1/1 step 1/3 loss [0-9.e+-]+ lr 0.000833333 ' "$T/run.out"
check "step 1 lr is the config's scaled, warmed-up rate 0.000833333" $?
grep -qE 'epoch 1/1 eval accuracy [0-9.]+ loss [0-9.]+ on 8 samples' "$T/run.out"
check "evaluation counted each of the 8 validation images once" $?
grep -q "training resnet50 (25557032 parameters) on 24 samples, 8 for evaluation; 2 ranks x batch 2" "$T/run.out"
check "ResNet-50 with 1000 classes on 24 training samples" $?
[[ -f $T/ck/ckpt-3/index.json ]]; check "checkpoint ckpt-3/ written, a shard per rank" $?
ls "$T"/summaries/*/ | grep -q 'events.out.tfevents'; check "TensorBoard events written in the run's folder" $?

# data/imagenet_fast.pbtxt the same way: LAMB, label smoothing, EMA, bfloat16, channels_last; and
# GPU JPEG decoding asked for, which on the CPU falls back, each rank saying why. At 64x64 (the run
# above covers 224): this CPU emulates bfloat16, which at 224 made this run 85 of the test's 140 s.
# No checkpoint: the run above checks it.
timeout -k 5 400 "$TRAIN" --config=imagenet_fast.pbtxt --override="$small $data launch { num_processes: \"2\" }" \
    --override="checkpoint { dir: \"\" } summaries_dir: \"$T/summaries_fast\" data { gpu_jpeg_decode: true image_size: 64 }" \
    >"$T/fast.out" 2>&1
rc=$?
check "imagenet_fast.pbtxt trains on the tiny dataset (rc=$rc)" $rc
[[ $rc == 0 ]] || tail -n 30 "$T/fast.out"
grep -q 'mixed precision: autocast to bfloat16 on cpu' "$T/fast.out" &&
    grep -qE 'channels_last: [0-9]+ 4-D weights and the 4-D inputs in NHWC' "$T/fast.out"
check "bfloat16 autocast and channels_last are on" $?
steps=$(grep -cE '^\[0\] epoch 1/1 step [1-3]/3 loss [0-9.e+-]+ lr .* grad_norm [0-9.e+-]+' "$T/fast.out")
[[ $steps == 3 ]]; check "3 steps with finite losses and the clipped gradient norm logged (got $steps)" $?
grep -qE 'epoch 1/1 eval accuracy [0-9.]+ loss [0-9.]+ on 8 samples, top5 [0-9.]+, moving average' "$T/fast.out"
check "evaluated with the moving average of the weights, with top-5" $?
fast_report=("$T"/summaries_fast/*/report.html)
[[ ${#fast_report[@]} == 1 && -s ${fast_report[0]} ]]; check "the run's report.html is written in its folder" $?
for r in 0 1; do
    for what in training evaluation; do
        grep -qE "^\[$r\] .*data.gpu_jpeg_decode: $what JPEGs decode on the CPU: this rank trains on the CPU" "$T/fast.out"
        check "rank $r says its $what JPEGs decode on the CPU, and why" $?
    done
done

echo "failures: $failures"
[[ $failures == 0 ]]

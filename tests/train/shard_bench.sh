#!/usr/bin/env bash
# Memory and speed of optimizer.shard: ResNet-50 (64x64 crops, batch 2 per rank, Adam) for a few
# steps at 1, 2 and 4 processes with NONE, STATE and GRADIENTS, all in one run. Prints, per
# setting: the optimizer state each rank holds (the trainer's end-of-run line), the peak resident
# memory of the largest rank, the throughput and its ratio to NONE at the same size, and the bytes
# each rank sends per step by the ring algorithms' counts (parameters P bytes: allreduce
# 2P(W-1)/W; STATE adds the parameters' allgather, P(W-1)/W; GRADIENTS replaces the allreduce by
# a reduce-scatter, P(W-1)/W).
#   bazel run //tests/train:shard_bench [-- STEPS (default 16)]
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE=$(readlink -f "$2"); STEPS=${3:-16}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$MAKE" "$T/in" 4 64 2 >/dev/null || { echo "could not write the dataset"; exit 1; }
data="data { train_files: \"$T/in/train-*\" eval_files: \"$T/in/validation-*\" batch_size: 2 eval_batch_size: 2 image_size: 64 reader_threads: 1 decode_threads: 1 }"
common="epochs: 1 logging { max_steps_per_epoch: $STEPS log_every_steps: 100 max_eval_batches: 1 } device: \"cpu\" threads: 1 checkpoint { dir: \"\" } summaries_dir: \"\" optimizer { kind: ADAM lr: 0.001 lr_scaling: NONE warmup_epochs: 0 schedule: CONSTANT }"
printf '%-4s %-10s %12s %14s %10s %8s %16s\n' ranks shard "state MiB" "peak RSS MiB" "samples/s" "vs NONE" "sent MiB/step"
for np in 1 2 4; do
    base=""
    for shard in NONE STATE GRADIENTS; do
        out="$T/$np-$shard.log"
        if ! timeout 900 "$TRAIN" --config=imagenet.pbtxt --override="$common $data model { num_classes: 4 } launch { num_processes: \"$np\" } optimizer { shard: $shard }" >"$out" 2>&1; then
            echo "$np ranks $shard failed:"; tail -n 20 "$out"; exit 1
        fi
        state=$(sed -nE 's/^\[0\].*optimizer state ([0-9.]+) MiB.*/\1/p' "$out" | head -1)
        rss=$(sed -nE 's/.*optimizer state .* peak resident memory ([0-9.]+) MiB.*/\1/p' "$out" | sort -n | tail -1)
        # The epoch's training time (its steps, not start-up or evaluation).
        epoch_s=$(sed -nE 's/.*eval accuracy .*\(([0-9.]+) s\/epoch.*/\1/p' "$out" | head -1)
        steps=$(sed -nE 's/.*done: ([0-9]+) steps in.*/\1/p' "$out" | head -1)
        sps=$(python3 -c "print(f'{$steps * 2 * $np / $epoch_s:.2f}')")
        params=$(sed -nE 's/.*training resnet50 \(([0-9]+) parameters\).*/\1/p' "$out" | head -1)
        [[ -z $base ]] && base=$sps
        sent=$(python3 -c "
p, w, s = 4 * $params / 2**20, $np, '$shard'
f = {'NONE': 2, 'STATE': 3, 'GRADIENTS': 2}[s] * (w - 1) / w
print(f'{p * f:.1f}')")
        printf '%-4s %-10s %12s %14s %10s %8s %16s\n' "$np" "$shard" "$state" "$rss" "$sps" \
            "$(python3 -c "print(f'{$sps / $base:.2f}')")" "$sent"
    done
done

#!/usr/bin/env bash
# Trains data/fashion_mnist.pbtxt with 1, 2 and 4 processes on this machine and prints, per run,
# the final test accuracy and the wall time. Each run starts fresh (own checkpoint dir).
#   hvx/train/measure_accuracy.sh [NP...]        (default: 1 2 4)
# Run from the repository root after `bazel build //tools:train`; TRAIN=path overrides the binary.
set -uo pipefail
TRAIN=${TRAIN:-bazel-bin/tools/train/train}
OUT=${OUT:-/tmp/hvx-accuracy}
mkdir -p "$OUT"
for np in "${@:-1 2 4}"; do
    for n in $np; do
        run="$OUT/np$n"
        rm -rf "$run"
        start=$(date +%s)
        "$TRAIN" --config=data/fashion_mnist.pbtxt \
            --override="launch { num_processes: \"$n\" } checkpoint { dir: \"$run/ckpt\" } summaries_dir: \"$run/summaries\"" \
            >"$run.log" 2>&1
        rc=$?
        wall=$(($(date +%s) - start))
        acc=$(sed -nE 's/.*done: .* eval accuracy ([0-9.]+) on ([0-9]+) samples.*/\1 (\2 samples)/p' "$run.log" | tail -1)
        echo "np=$n rc=$rc accuracy=${acc:-?} wall=${wall}s log=$run.log"
    done
done

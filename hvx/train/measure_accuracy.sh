#!/usr/bin/env bash
# Trains a config (default data/fashion_mnist.pbtxt) with 1, 2 and 4 processes on this machine and
# prints, per process count, the final test accuracy and the wall time: one line per run as it
# ends, then a Markdown table for BENCHMARKS.md. Each run starts fresh in its own
# checkpoint and summaries directories under $OUT.
#   hvx/train/measure_accuracy.sh [--override=TEXT]... [NP...]      (default NPs: 1 2 4)
#   hvx/train/measure_accuracy.sh --override='epochs: 1 logging { max_steps_per_epoch: 20 max_eval_batches: 2 }' 1 2
# Every --override goes to every run (after the script's own). Run from the repository root after
# `bazel build //tools:train`; TRAIN=path overrides the binary, CONFIG=path the config, OUT=dir
# the output (default /tmp/hvx-accuracy). Exit status: the number of failed runs.
set -uo pipefail
TRAIN=${TRAIN:-bazel-bin/tools/train/train}
CONFIG=${CONFIG:-data/fashion_mnist.pbtxt}
OUT=${OUT:-/tmp/hvx-accuracy}
overrides=()
nps=()
for arg in "$@"; do
    case $arg in
        --override=*) overrides+=("$arg") ;;
        *[!0-9]* | "") echo "measure_accuracy.sh: not a process count or --override=: $arg" >&2; exit 2 ;;
        *) nps+=("$arg") ;;
    esac
done
((${#nps[@]})) || nps=(1 2 4)
[[ -x $TRAIN ]] || { echo "measure_accuracy.sh: no trainer at $TRAIN (bazel build //tools:train, or set TRAIN)" >&2; exit 2; }
mkdir -p "$OUT"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), config $CONFIG ${overrides[*]}"
rows=()
failed=0
for n in "${nps[@]}"; do
    run="$OUT/np$n"
    rm -rf "$run" "$run.log"
    start=$(date +%s.%N)
    "$TRAIN" --config="$CONFIG" \
        --override="launch { num_processes: \"$n\" } checkpoint { dir: \"$run/ckpt\" } summaries_dir: \"$run/summaries\"" \
        "${overrides[@]}" >"$run.log" 2>&1
    rc=$?
    wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')
    wall_text=$(printf '%dm%02ds' $((wall / 60)) $((wall % 60)))
    # "done: 7496 steps in 700.1 s, eval accuracy 0.9150 on 10000 samples, 712 samples/s"
    done_line=$(grep -E 'done: [0-9]+ steps' "$run.log" | tail -1)
    acc=$(sed -nE 's/.*eval accuracy ([0-9.]+) on ([0-9]+) samples.*/\1/p' <<<"$done_line")
    samples=$(sed -nE 's/.*eval accuracy ([0-9.]+) on ([0-9]+) samples.*/\2/p' <<<"$done_line")
    steps=$(sed -nE 's/.*done: ([0-9]+) steps.*/\1/p' <<<"$done_line")
    pct=$([[ -n $acc ]] && awk -v a="$acc" 'BEGIN { printf "%.2f%%", 100 * a }' || echo "?")
    [[ $rc == 0 && -n $acc ]] || failed=$((failed + 1))
    echo "np=$n rc=$rc accuracy=$pct eval_samples=${samples:-?} steps=${steps:-?} wall=${wall}s log=$run.log"
    rows+=("| $n | $pct | ${samples:-?} | $wall_text | ${steps:-?} | $rc |")
done
echo
echo "| processes | test accuracy | eval samples | wall time | steps (per rank) | exit |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $failed

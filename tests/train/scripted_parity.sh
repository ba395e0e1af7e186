#!/usr/bin/env bash
# A TorchScript MLP-Mixer made in Python trains on Fashion-MNIST through format: EXAMPLE in the
# trainer, and the same network with the same recipe trains in plain PyTorch; prints both final
# test accuracies (target: within 1 point). A measurement, not a test (minutes per run):
#   bazel build //tools:train && tests/train/scripted_parity.sh [EPOCHS] [PROCESSES]
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${1:-5}; NP=${2:-1}; BATCH=128; LR=0.002; WD=0.05; LS=0.1
IDX=${IDX:-/usr/share/datasets/fashion-mnist}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
PY=/usr/bin/python3
export PYTHONPATH=$PWD/tests/train:$PWD/hvx/python
$PY tests/train/scripted_parity.py script "$OUT/mixer.pt"
start=$(date +%s)
bazel-bin/tools/train/train --config=fashion_mnist.pbtxt \
    --override="model { name: \"\" torchscript: \"$OUT/mixer.pt\" } epochs: $EPOCHS launch { num_processes: \"$NP\" }" \
    --override="data { batch_size: $((BATCH / NP)) format: EXAMPLE example { label_key: \"image/class/label\" input { key: \"image/raw\" kind: BYTES shape: [1, 28, 28] divide_by: 255 mean: 0.2860 stddev: 0.3530 } } }" \
    --override="optimizer { kind: ADAMW lr: $LR momentum: 0 weight_decay: $WD no_decay_on_bias_and_norm: true schedule: COSINE lr_scaling: NONE warmup_epochs: 0 } label_smoothing: $LS" \
    --override="checkpoint { dir: \"$OUT/ck\" } summaries_dir: \"$OUT/summaries\" logging { log_every_steps: 200 }" \
    >"$OUT/trainer.log" 2>&1
trainer_s=$(($(date +%s) - start))
start=$(date +%s)
$PY tests/train/scripted_parity.py train "$IDX" "$EPOCHS" "$BATCH" "$LR" "$WD" "$LS" 1 >"$OUT/python.log" 2>&1
python_s=$(($(date +%s) - start))
trainer=$(grep -oE 'done: .*eval accuracy [0-9.]+' "$OUT/trainer.log" | grep -oE '[0-9.]+$')
python=$(tail -n 1 "$OUT/python.log" | grep -oE '[0-9.]+$')
echo "trainer ($NP process(es), TorchScript, format EXAMPLE): eval accuracy $trainer in ${trainer_s}s"
echo "PyTorch (same network and recipe):                    eval accuracy $python in ${python_s}s"
python3 -c "print('difference %.2f points' % (100 * (float('$trainer') - float('$python'))))"
echo "logs: $OUT"

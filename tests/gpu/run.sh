#!/usr/bin/env bash
# The GPU check, run as is on a machine with NVIDIA GPUs, CUDA and NCCL under /usr/local/cuda (or
# HVX_CUDA_PATH): builds with --config=cuda, runs the GPU tests, measures allreduce bus bandwidth per
# size (nccl-tests convention), and trains on CUDA for a few steps. Each phase is time-bounded; the
# whole script stays under 5 minutes on one warm machine. Exit status: the first failing phase's.
#
#   tests/gpu/run.sh            # from the repository root
#   BAZEL="bazel --output_base=/tmp/ob" tests/gpu/run.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."

BAZEL=${BAZEL:-bazel}
MPIEXEC=${MPIEXEC:-mpiexec}
OUT=${OUT:-/tmp/hvx-gpu}
mkdir -p "$OUT"
status=0
phase() {  # phase NAME SECONDS command...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: rc=$rc in $((SECONDS - start))s"
  [[ $rc -ne 0 && $status -eq 0 ]] && status=$rc
  return 0
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "GPUs: ${gpus:-0}"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv 2>/dev/null || true
[[ "${gpus:-0}" -ge 1 ]] || echo "no GPU visible: the GPU tests will report SKIPPED"

phase build 150 $BAZEL build --config=cuda //hvx/nccl/... //tests/...
phase gpu_tests 60 $BAZEL test --config=cuda --test_output=all //hvx/nccl/... //tests/deps:cuda_nccl_link_test

bench=$($BAZEL info --config=cuda bazel-bin 2>/dev/null)/hvx/nccl/nccl_allreduce_bench
np=$(( gpus > 0 ? gpus : 1 ))
phase bench 45 "$MPIEXEC" -n "$np" "$bench" --max_bytes=$((256 << 20)) --iters=20

# The trainer on CUDA for a few steps. Without Debian's fashion-mnist package, a small generated
# stand-in in the same IDX format is used.
if $BAZEL query //tools:train >/dev/null 2>&1; then
  overrides=(--override='device: "cuda" epochs: 1 logging { max_steps_per_epoch: 20 log_every_steps: 5 max_eval_batches: 2 }')
  if [[ ! -d /usr/share/datasets/fashion-mnist ]]; then
    python3 tests/train/make_tiny_idx.py "$OUT/idx" 2048 512
    overrides+=(--override="data { train_files: \"$OUT/shards/train-*\" eval_files: \"$OUT/shards/test-*\" fashion_mnist_source { idx_dir: \"$OUT/idx\" output_dir: \"$OUT/shards\" } }")
  fi
  # Its own checkpoints and summaries under $OUT, started fresh: a finished earlier run would
  # otherwise make the trainer report "already complete" and train nothing.
  overrides+=(--override="checkpoint { dir: \"$OUT/checkpoints\" } summaries_dir: \"$OUT/summaries\"")
  status_before_train=$status
  phase train 90 $BAZEL run --config=cuda //tools:train -- --config=fashion_mnist.pbtxt --fresh "${overrides[@]}"
  if grep -q "this LibTorch has no CUDA support" "$OUT/train.log"; then
    # Debian's libtorch is CPU-only: the trainer needs HVX_TORCH_PATH=<a CUDA LibTorch> to use a GPU.
    echo "=== train: SKIPPED (LibTorch without CUDA; set HVX_TORCH_PATH to a CUDA LibTorch)"
    status=$status_before_train
  fi
else
  echo "=== train: SKIPPED (no //tools:train in this tree)"
fi

echo "=== logs in $OUT; status $status"
exit "$status"

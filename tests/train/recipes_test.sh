#!/usr/bin/env bash
# The training recipes do what they say, end to end on 2 ranks (each check fails if its recipe
# silently did nothing):
# - backward_passes_per_step: micro-batches give the MLP the same steps as whole batches (the
#   summed gradient is the batch mean, one step per batch), and change the CNN's (BatchNorm and
#   dropout see the micro-batches);
# - clip_grad_norm: each step of plain SGD at lr 1 moves the weights by exactly the bound, while
#   the logged norm before clipping is far above it;
# - label_smoothing: the logged training loss is the smoothed loss PyTorch computes for that step's
#   samples, not the plain one;
# - ema_decay: the exported weights are the average, not the live weights, and reproduce the
#   trainer's eval accuracy, loss and top-5 in PyTorch; a run stopped and resumed evaluates
#   exactly like the uninterrupted one;
# - precision: BF16 autocasts on the CPU (learns, with its own losses); FP16 there is refused;
# - LAMB and AdamW with no_decay_on_bias_and_norm learn the tiny set.
#   recipes_test.sh TRAIN MAKE_IDX CHECK LIB PYTHON
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); CHECK=$(readlink -f "$3"); source "$4"
PYTHON=$(readlink -f "$5")
export PYTHONPATH="$PWD/hvx/python:$(dirname "$CHECK")"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" mlp 400 60 10 1 || { echo "FAIL: could not write the dataset"; exit 1; }
two='launch { num_processes: "2" }'
run() {  # run NAME ARGS...: the trainer on 2 ranks, output in $T/NAME.{out,err}
    local name=$1; shift
    timeout -k 5 300 "$TRAIN" --config="$T/tiny.pbtxt" --override="$two" "$@" \
        >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    check "$name exits 0 (rc=$rc)" $rc
    [[ $rc == 0 ]] || tail -n 20 "$T/$name.err"
}
loss_values() { losses "$1" | sed -E 's/.* loss ([0-9.e-]+) .*/\1/'; }
# same_numbers A B TOL: the same count of numbers, each pair within TOL relative.
same_numbers() {
    python3 -c "
import sys
a, b = [list(map(float, open(f).read().split())) for f in sys.argv[1:3]]
tol = float(sys.argv[3])
bad = [(x, y) for x, y in zip(a, b) if abs(x - y) > tol * max(abs(x), abs(y), 1e-12)]
print('%d and %d numbers, %d apart' % (len(a), len(b), len(bad)), bad[:3])
sys.exit(not (len(a) == len(b) and len(a) > 0 and not bad))" "$@"
}

# Gradient accumulation.
for model in mlp cnn; do
    m="model { name: \"$model\" }"
    run "$model-k1" --override="$m"
    run "$model-k3" --override="$m optimizer { backward_passes_per_step: 3 }"
    loss_values "$T/$model-k1.out" >"$T/$model-k1.loss"; loss_values "$T/$model-k3.out" >"$T/$model-k3.loss"
done
same_numbers "$T/mlp-k1.loss" "$T/mlp-k3.loss" 1e-4
check "MLP: 3 micro-batches per step train like whole batches" $?
[[ $(wc -l <"$T/cnn-k1.loss") == 20 ]] && ! same_numbers "$T/cnn-k1.loss" "$T/cnn-k3.loss" 1e-4 >/dev/null
check "CNN: 3 micro-batches per step differ from whole batches (BatchNorm and dropout see them)" $?

# Clipping: SGD at lr 1 without momentum moves the weights by the clipped gradient.
run clip --max_steps=3 --override='optimizer { lr: 1 momentum: 0 clip_grad_norm: 0.001 }' \
    --override="checkpoint { dir: \"$T/clip\" every_steps: 1 keep: 10 }"
for s in 1 2; do
    run "clip-export$s" --override="checkpoint { dir: \"$T/clip\" }" \
        --export_from="$T/clip/ckpt-$s.pt" --export="$T/clip$s.pt"
done
step=$("$PYTHON" "$CHECK" step_norm "$T/clip1.pt" "$T/clip2.pt")
norm=$(grep -m1 -oE 'step 2/20 .* grad_norm [0-9.e+-]+' "$T/clip.out" | grep -oE '[0-9.e+-]+$')
echo "step 2: gradient norm ${norm:-?} before clipping, the weights moved by ${step:-?}"
python3 -c "import sys; s, n = float('${step:-nan}'), float('${norm:-nan}'); sys.exit(not (abs(s - 1e-3) < 1e-6 and n > 0.1))"
check "a clipped step moves the weights by the bound (0.001), the logged norm is far above it" $?

# Label smoothing: step 4's logged loss is PyTorch's smoothed loss at ckpt-3's weights on the 10
# samples rank 0 trained in step 4.
run smooth --max_steps=4 --sample_log="$T/smooth-log" \
    --override='label_smoothing: 0.3 optimizer { kind: ADAMW lr: 0.001 weight_decay: 0.05 no_decay_on_bias_and_norm: true }' \
    --override="checkpoint { dir: \"$T/smooth\" every_steps: 1 keep: 10 }"
run smooth-export --override="checkpoint { dir: \"$T/smooth\" }" --export_from="$T/smooth/ckpt-3.pt" \
    --export="$T/smooth3.pt"
rank0=$("$PYTHON" "$CHECK" loss "$T/smooth3.pt" "$T/idx" mlp "$T/smooth-log/rank0-epoch0.txt" 30 10 0.3)
rank1=$("$PYTHON" "$CHECK" loss "$T/smooth3.pt" "$T/idx" mlp "$T/smooth-log/rank1-epoch0.txt" 30 10 0.3)
logged=$(grep -oE 'step 4/20 loss [0-9.e-]+' "$T/smooth.out" | grep -oE '[0-9.e-]+$')
echo "step 4: logged ${logged:-?}; PyTorch smoothed and plain, rank 0: $rank0, rank 1: $rank1"
python3 -c "
import sys
r0, r1 = [list(map(float, r.split())) for r in sys.argv[1:3]]
logged = float(sys.argv[3])
smoothed, plain = (r0[0] + r1[0]) / 2, (r0[1] + r1[1]) / 2
sys.exit(not (abs(smoothed - logged) < 1e-4 * logged and abs(plain - logged) > 1e-2))" \
    "$rank0" "$rank1" "${logged:-nan}"
check "the training loss is the label-smoothed loss of the step's samples" $?

# EMA, with top-5, through export and resume.
ema='model { name: "cnn" } epochs: 2 ema_decay: 0.9 optimizer { lr: 0.0005 momentum: 0.5 }'
run ema --override="$ema" --override="checkpoint { dir: \"$T/ema\" }" --export="$T/ema.pt"
run live --override="$ema ema_decay: 0" --override="checkpoint { dir: \"$T/ema\" }" \
    --export_from="$T/ema/ckpt-40.pt" --export="$T/live.pt"
"$PYTHON" "$CHECK" differ "$T/ema.pt" "$T/live.pt"; check "the moving average differs from the live weights" $?
line=$(grep -oE 'epoch 2/2 eval accuracy [0-9.]+ loss [0-9.]+ on [0-9]+ samples, top5 [0-9.]+, moving average' "$T/ema.out" "$T/ema.err" | head -n 1)
py=$("$PYTHON" "$(dirname "$CHECK")/export_check.py" "$T/ema.pt" "$T/idx" cnn)
py_live=$("$PYTHON" "$(dirname "$CHECK")/export_check.py" "$T/live.pt" "$T/idx" cnn)
echo "trainer: ${line:-?}"; echo "PyTorch, average: $py"; echo "PyTorch, live: $py_live"
python3 -c "
import re, sys
t = re.search(r'accuracy ([0-9.]+) loss ([0-9.]+) on [0-9]+ samples, top5 ([0-9.]+)', sys.argv[1])
p = re.search(r'accuracy ([0-9.]+) loss ([0-9.]+) top5 ([0-9.]+)', sys.argv[2])
l = re.search(r'loss ([0-9.]+)', sys.argv[3])
t, p = [float(x) for x in t.groups()], [float(x) for x in p.groups()]
sys.exit(not (t[0] == p[0] and abs(t[1] - p[1]) < 1e-4 and t[2] == p[2] and abs(float(l.group(1)) - t[1]) > 1e-4))" \
    "${line:-x}" "${py:-x}" "${py_live:-x}"
check "evaluation uses the average: PyTorch on it reproduces accuracy, loss and top-5, the live weights do not" $?
run ema-stop --override="$ema" --override="checkpoint { dir: \"$T/ema2\" }" --max_steps=30
run ema-resume --override="$ema" --override="checkpoint { dir: \"$T/ema2\" }"
final() { grep -hoE 'epoch 2/2 eval accuracy .* samples, top5 [0-9.]+' "$@"; }
[[ -n $(final "$T/ema.out" "$T/ema.err") && $(final "$T/ema.out" "$T/ema.err") == $(final "$T/ema-resume.out" "$T/ema-resume.err") ]]
check "stopped at step 30 and resumed, the run evaluates exactly as the uninterrupted one" $?

# Mixed precision on the CPU: bfloat16 autocast trains, and differently from float32; float16 needs
# CUDA and says so.
run bf16 --override='model { name: "cnn" } epochs: 2 precision: BF16'
grep -q 'mixed precision: autocast to bfloat16 on cpu' "$T/bf16.err" "$T/bf16.out"; check "BF16 says it autocasts" $?
run fp32 --override='model { name: "cnn" } epochs: 2'
acc=$(grep -oE 'done: .*eval accuracy [0-9.]+' "$T/bf16.out" | grep -oE '[0-9.]+$')
loss_values "$T/bf16.out" >"$T/bf16.loss"; loss_values "$T/fp32.out" >"$T/fp32.loss"
python3 -c "import sys; sys.exit(not float('${acc:-0}') >= 0.9)" && ! same_numbers "$T/bf16.loss" "$T/fp32.loss" 1e-3 >/dev/null
check "BF16 learns (${acc:-?}) with losses of its own (not float32's)" $?
timeout 60 "$TRAIN" --config="$T/tiny.pbtxt" --override='precision: FP16 device: "cpu"' >"$T/fp16.out" 2>&1
[[ $? != 0 ]] && grep -q "precision: FP16 autocast needs CUDA; training runs on the CPU, where BF16 is the mixed precision" "$T/fp16.out"
check "FP16 on the CPU is refused, naming BF16" $?

# LAMB and AdamW learn.
for kind in LAMB ADAMW; do
    run "$kind" --override="model { name: \"cnn\" } epochs: 2 optimizer { kind: $kind lr: 0.01 weight_decay: 0.01 no_decay_on_bias_and_norm: true }"
    acc=$(grep -oE 'done: .*eval accuracy [0-9.]+' "$T/$kind.out" | grep -oE '[0-9.]+$')
    echo "$kind: eval accuracy ${acc:-?}"
    python3 -c "import sys; sys.exit(not float('${acc:-0}') >= 0.9)"; check "$kind reaches 90% on the tiny set" $?
done
echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# model { torchscript: ... }: modules scripted and traced in Python at test time train on 2 ranks
# like built-in models; the exported state dict and scripted module reproduce the trainer's eval
# accuracy in PyTorch; BatchNorm buffers train and an unused parameter stays as it was; a stopped
# and resumed run evaluates exactly like an uninterrupted one; modules that do not fit the
# configured inputs fail at start saying what was expected and found.
#   torchscript_test.sh TRAIN MAKE_IDX MAKE_SCRIPTED EXPORT_CHECK LIB PYTHON
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); MAKE_SCRIPTED=$(readlink -f "$3")
CHECK=$(readlink -f "$4"); source "$5"; PYTHON=$(readlink -f "$6")
export PYTHONPATH="$PWD/hvx/python"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" unused 400 60 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }
sed -i '/^model /d' "$T/tiny.pbtxt"
"$PYTHON" "$MAKE_SCRIPTED" "$T/m" || { echo "FAIL: could not script the modules"; exit 1; }
run() {  # run NAME MODULE ARGS...: 2 ranks, output in $T/NAME.{out,err}
    local name=$1 module=$2; shift 2
    timeout -k 5 300 "$TRAIN" --config="$T/tiny.pbtxt" \
        --override="launch { num_processes: \"2\" } model { torchscript: \"$T/m/$module.pt\" }" \
        "$@" >"$T/$name.out" 2>"$T/$name.err"
}
final() { grep -hoE 'epoch 2/2 eval accuracy [0-9.]+ loss [0-9.]+ on [0-9]+ samples' "$@" | head -n 1; }
accuracy_of() { sed -nE 's/^accuracy ([0-9.]+) .*/\1/p' <<<"$1"; }

run bn bn_net --override="checkpoint { dir: \"$T/bn\" }" --export="$T/bn.pt"
check "the scripted BatchNorm net trains (rc=$?)" $?
grep -q 'training the TorchScript model .*/bn_net.pt ([0-9]* parameters)' "$T/bn.out" "$T/bn.err"
check "the log names the TorchScript model" $?
trainer=$(final "$T/bn.out" "$T/bn.err" | grep -oE 'accuracy [0-9.]+' | grep -oE '[0-9.]+')
from_dict=$("$PYTHON" "$CHECK" "$T/bn.pt" "$T/idx" "$T/m/bn_net.pt")
from_script=$("$PYTHON" "$CHECK" - "$T/idx" "$T/bn.scripted.pt")
echo "trainer ${trainer:-?}; state dict into the Python module: $from_dict; exported module: $from_script"
[[ -n $trainer && $(accuracy_of "$from_dict") == "$trainer" && $(accuracy_of "$from_script") == "$trainer" ]]
check "the exported state dict and scripted module reproduce the eval accuracy" $?
tloss=$(final "$T/bn.out" "$T/bn.err" | grep -oE 'loss [0-9.]+' | grep -oE '[0-9.]+')
ploss=$(sed -nE 's/.* loss ([0-9.]+) .*/\1/p' <<<"$from_script")
python3 -c "import sys; sys.exit(not abs(float('${tloss:-nan}') - float('${ploss:-nan}')) <= 2e-6)"
check "and its eval loss (trainer ${tloss:-?}, exported module ${ploss:-?})" $?
python3 -c "import sys; sys.exit(not float('${trainer:-0}') >= 0.9)"; check "and it learned (>= 0.9)" $?
"$PYTHON" -c "
import sys, torch
state = torch.load(sys.argv[1])
m = state['features.1.running_mean']
sys.exit(not (m.abs().sum() > 0 and int(state['features.1.num_batches_tracked']) > 0))" "$T/bn.pt"
check "BatchNorm running statistics trained (features.1.running_mean moved from 0)" $?

run bn-stop bn_net --override="checkpoint { dir: \"$T/bn2\" }" --max_steps=30
check "stopped at step 30 (rc=$?)" $?
run bn-resume bn_net --override="checkpoint { dir: \"$T/bn2\" }"
check "resumed (rc=$?)" $?
[[ -n $(final "$T/bn.out" "$T/bn.err") && $(final "$T/bn.out" "$T/bn.err") == $(final "$T/bn-resume.out" "$T/bn-resume.err") ]]
check "stopped and resumed, the run evaluates exactly as the uninterrupted one" $?

run mixer mixer --export="$T/mixer.pt"
check "the traced MLP-Mixer with an unused head trains on 2 ranks without waiting for its gradient (rc=$?)" $?
"$PYTHON" -c "
import sys, torch
trained, initial = torch.load(sys.argv[1]), torch.jit.load(sys.argv[2]).state_dict()
same = all(torch.equal(trained[k], initial[k]) for k in ('aux_head.weight', 'aux_head.bias'))
moved = not torch.equal(trained['head.weight'], initial['head.weight'])
sys.exit(not (same and moved))" "$T/mixer.pt" "$T/m/mixer.pt"
check "the unused parameter is as it was, the used ones trained" $?

run two two_inputs
rc=$?
[[ $rc != 0 ]] && grep -q 'expected forward(self, x: Tensor) -> Tensor, found forward(__torch__.TwoInputs self, Tensor x, Tensor mask) -> Tensor' "$T/two.err" "$T/two.out"
check "a forward with two inputs is refused with both signatures (rc=$rc)" $?
! grep -qE ' step [0-9]+/' "$T/two.out"; check "at start, before any step" $?
grep -h 'forward' "$T/two.err" | head -n 2
run seven seven_classes
rc=$?
[[ $rc != 0 ]] && grep -q 'on a batch of shape \[2, 1, 28, 28\] it should return logits of shape \[2, 10\] (model.num_classes), but it returned logits of shape \[2, 7\]' "$T/seven.err" "$T/seven.out"
check "7 logits where the config says 10 are refused with both shapes (rc=$rc)" $?
echo "failures: $failures"
[[ $failures == 0 ]]

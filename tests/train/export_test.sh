#!/usr/bin/env bash
# --export: the trainer's final weights, and those of a checkpoint (--export_from), load in
# PyTorch (torch.load, load_state_dict into the same CNN defined in Python) and reproduce the
# trainer's evaluation accuracy; a run already complete exports the same weights again.
#   export_test.sh TRAIN MAKE_IDX EXPORT_CHECK LIB PYTHON
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); CHECK=$(readlink -f "$3"); source "$4"
PYTHON=$(readlink -f "$5")
export PYTHONPATH="$PWD/hvx/python"  # hvx.models, from //hvx/python:torch
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" cnn 400 60 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }
run() {  # run NAME ARGS...
    local name=$1; shift
    timeout -k 5 300 "$TRAIN" --config="$T/tiny.pbtxt" \
        --override="checkpoint { dir: \"$T/ck\" keep: 10 }" "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    check "$name exits 0 (rc=$rc)" $rc
    [[ $rc == 0 ]] || tail -n 20 "$T/$name.err"
}
accuracy_of() { sed -nE 's/^accuracy ([0-9.]+) .*/\1/p' <<<"$1"; }

run train --export="$T/final.pt"
grep -qF "exported the weights to $T/final.pt" "$T/train.out"; check "rank 0 says where it exported" $?
trainer=$(grep -oE 'done: .*eval accuracy [0-9.]+' "$T/train.out" | grep -oE '[0-9.]+$')
python_final=$("$PYTHON" "$CHECK" "$T/final.pt" "$T/idx" 2>&1)
echo "trainer: ${trainer:-?}; PyTorch on the exported weights: $python_final"
[[ -n $trainer && $(accuracy_of "$python_final") == "$trainer" ]]
check "PyTorch reproduces the final eval accuracy" $?

# The checkpoint after epoch 1 (40 steps of 10), exported without training.
first=$(grep -oE 'epoch 1/2 eval accuracy [0-9.]+' "$T/train.err" "$T/train.out" | head -n 1 | grep -oE '[0-9.]+$')
run from_ckpt --export_from="$T/ck/ckpt-40.pt" --export="$T/epoch1.pt"
python_first=$("$PYTHON" "$CHECK" "$T/epoch1.pt" "$T/idx" 2>&1)
echo "epoch 1: trainer ${first:-?}; PyTorch on ckpt-40's export: $python_first"
[[ -n $first && $(accuracy_of "$python_first") == "$first" ]]
check "an exported checkpoint reproduces its epoch's eval accuracy" $?
first_loss=$(grep -oE 'epoch 1/2 eval accuracy [0-9.]+ loss [0-9.]+' "$T/train.err" "$T/train.out" | head -n 1 | grep -oE '[0-9.]+$')
py_loss=$(sed -nE 's/.* loss ([0-9.]+) .*/\1/p' <<<"$python_first")
python3 -c "import sys; sys.exit(abs(float('${first_loss:-nan}') - float('${py_loss:-nan}')) > 1e-4)"
check "and its eval loss (trainer ${first_loss:-?}, PyTorch ${py_loss:-?})" $?
! grep -qE ' step [0-9]+/' "$T/from_ckpt.out"; check "--export_from trains nothing" $?

run again --export="$T/again.pt"
grep -q "already complete" "$T/again.out"; check "the rerun finds the run complete" $?
"$PYTHON" -c "
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
sys.exit(not (a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)))" "$T/final.pt" "$T/again.pt"
check "a run already complete exports the same weights" $?

timeout 60 "$TRAIN" --config="$T/tiny.pbtxt" --export_from="$T/ck/ckpt-40.pt" >"$T/bad.out" 2>&1
[[ $? != 0 ]] && grep -q -- "--export_from needs --export=PATH" "$T/bad.out"
check "--export_from without --export is refused" $?
echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# format: EXAMPLE. The FASHION_MNIST preset written out as a feature spec trains exactly as the
# preset does; inputs stored as float_list, int64_list, float32 bytes and channels-last RGB bytes
# all train; records that do not match the spec and specs that do not fit the model fail, naming
# the file, the record's offset, the key, and what was expected and found.
#   example_format_test.sh TRAIN MAKE_IDX MAKE_RECORDS LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); MAKE_RECORDS=$(readlink -f "$3")
source "$4"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" mlp 400 60 10 1 || { echo "FAIL: could not write the dataset"; exit 1; }
"$MAKE_RECORDS" "$T/idx/train-images-idx3-ubyte.gz" "$T/idx/train-labels-idx1-ubyte.gz" "$T/f" train 2 &&
    "$MAKE_RECORDS" "$T/idx/t10k-images-idx3-ubyte.gz" "$T/idx/t10k-labels-idx1-ubyte.gz" "$T/f" test 1
check "feature records written" $?
run() {  # run NAME ARGS...: 2 ranks
    local name=$1; shift
    timeout -k 5 300 "$TRAIN" --config="$T/tiny.pbtxt" --override='launch { num_processes: "2" }' \
        "$@" >"$T/$name.out" 2>"$T/$name.err"
}
accuracy() { grep -oE 'done: .*eval accuracy [0-9.]+' "$T/$1.out" | grep -oE '[0-9.]+$'; }

run preset; check "FASHION_MNIST trains (rc=$?)" $?
run spelled --override='data { format: EXAMPLE example { label_key: "image/class/label" input {
    key: "image/raw" kind: BYTES shape: [1, 28, 28] divide_by: 255 mean: 0.2860 stddev: 0.3530 } } }'
check "the same as an EXAMPLE spec trains (rc=$?)" $?
[[ -n $(losses "$T/preset.out") && $(losses "$T/preset.out") == $(losses "$T/spelled.out") ]]
check "FASHION_MNIST is a preset of EXAMPLE: every step's loss is the same" $?

feature_data="train_files: \"$T/f/train-*\" eval_files: \"$T/f/test-*\" format: EXAMPLE"
for spec in 'key: "pixels_f" kind: FLOAT_LIST shape: [1, 28, 28]' \
            'key: "pixels_i" kind: INT64_LIST shape: [1, 28, 28] divide_by: 255' \
            'key: "pixels_f32" kind: BYTES bytes_type: FLOAT32 shape: [784]'; do
    name=$(sed -E 's/key: "([a-z0-9_]+)".*/\1/' <<<"$spec")
    run "$name" --override="data { $feature_data example { input { $spec } } }"
    rc=$?
    acc=$(accuracy "$name")
    python3 -c "import sys; sys.exit(not float('${acc:-0}') >= 0.9)"
    check "$name trains to ${acc:-?} (rc=$rc)" $?
done
run rgb --override="data { $feature_data example { input {
    key: \"pixels_rgb\" kind: BYTES shape: [3, 28, 28] channels_last_stored: true mean: [0.5, 0.5, 0.5] stddev: 0.5 divide_by: 255 } } }"
rc=$?
[[ $rc != 0 ]] && grep -q 'mlp does not fit the configured inputs: on a batch of shape \[2, 3, 28, 28\] it should return logits of shape \[2, 10\] (model.num_classes), but it raised: ' "$T/rgb.err"
check "3-channel inputs for the 1-channel MLP are refused at start, with the shapes (rc=$rc)" $?
! grep -qE ' step [0-9]+/' "$T/rgb.out"; check "before any step" $?

run short --override="data { $feature_data example { input { key: \"pixels_rgb\" kind: BYTES shape: [1, 28, 28] } } }"
rc=$?
[[ $rc != 0 ]] && grep -qE "$T/f/train-0000[01]-of-00002:[0-9]+ \(sample [0-9]+\): feature 'pixels_rgb' has 2352 bytes, expected 784 \(784 uint8 values\) for the input shape \[1, 28, 28\]" "$T/short.err"
check "a record whose bytes do not fill the shape names file, offset, key and both sizes (rc=$rc)" $?
grep -m1 "pixels_rgb' has" "$T/short.err"
run kind --override="data { $feature_data example { input { key: \"pixels_f\" kind: INT64_LIST shape: [1, 28, 28] } } }"
rc=$?
[[ $rc != 0 ]] && grep -qE "$T/f/train-0000[01]-of-00002:[0-9]+ \(sample [0-9]+\): feature 'pixels_f' is float_list, expected int64_list" "$T/kind.err"
check "a feature of another type names file, offset, key and both types (rc=$rc)" $?
run nokey --override="data { format: EXAMPLE example { input { kind: FLOAT_LIST shape: [784] } } }"
rc=$?
[[ $rc != 0 ]] && grep -q "data.example.input.key: name the Example feature that is the model's input" "$T/nokey.err"
check "a spec without a key is refused naming the field (rc=$rc)" $?
echo "failures: $failures"
[[ $failures == 0 ]]

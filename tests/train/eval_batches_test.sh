#!/usr/bin/env bash
# logging { max_eval_batches: N } stops every rank's evaluation after N batches without reading
# further: with the last evaluation record corrupted, 2 processes evaluating 1 batch of 16 each
# (samples 0..31 of 40) finish and count 32 samples; evaluating everything fails on that record.
#   eval_batches_test.sh TRAIN MAKE_IDX LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); source "$3"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" mlp 80 40 10 1 || { echo "FAIL: could not write the dataset"; exit 1; }
common=(--config="$T/tiny.pbtxt" --override='launch { num_processes: "2" } logging { max_steps_per_epoch: 2 }')

timeout -k 5 200 "$TRAIN" "${common[@]}" >"$T/intact.out" 2>"$T/intact.err"
rc=$?
check "the intact dataset evaluates (rc=$rc)" $rc
grep -qE 'epoch 1/1 eval accuracy [0-9.]+ loss [0-9.]+ on 40 samples' "$T/intact.err"; check "all 40 evaluated" $?

shopt -s nullglob
test_shards=("$T"/shards/test-*[0-9])
[[ ${#test_shards[@]} == 1 ]]; check "one evaluation shard (${test_shards[*]})" $?
# The last byte is the data CRC of the last record, sample 39.
python3 - "${test_shards[0]}" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-1, 2)
    last = f.read(1)
    f.seek(-1, 2)
    f.write(bytes([last[0] ^ 0x5a]))
EOF

timeout -k 5 200 "$TRAIN" "${common[@]}" --override='logging { max_eval_batches: 1 }' >"$T/limited.out" \
    2>"$T/limited.err"
rc=$?
check "1 eval batch per rank never reads the corrupt record (rc=$rc)" $rc
[[ $rc == 0 ]] || tail -n 20 "$T/limited.out" "$T/limited.err"
grep -qE 'epoch 1/1 eval accuracy [0-9.]+ loss [0-9.]+ on 32 samples' "$T/limited.err"
check "2 ranks x 1 batch of 16 = 32 samples evaluated" $?

timeout -k 5 200 "$TRAIN" "${common[@]}" >"$T/whole.out" 2>"$T/whole.err"
rc=$?
[[ $rc != 0 ]]; check "the whole evaluation set fails (rc=$rc)" $?
grep -q "reading sample 39" "$T/whole.out" "$T/whole.err"; check "... on sample 39" $?

echo "failures: $failures"
[[ $failures == 0 ]]

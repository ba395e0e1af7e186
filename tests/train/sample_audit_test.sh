#!/usr/bin/env bash
# Sample audit: the trainer started with 2 processes (it launches itself through hvxrun) and
# with 4 processes under an explicit hvxrun; each rank logs the sample ids it trained on, and
# for every epoch the ranks' sets must be disjoint, complete and equal in size.
#   sample_audit_test.sh TRAIN HVXRUN MPIEXEC MAKE_IDX LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); HVXRUN=$(readlink -f "$2"); MPIEXEC=$(readlink -f "$3")
MAKE_IDX=$(readlink -f "$4"); source "$5"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
N=240
tiny_config "$T" mlp $N 40 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }

timeout -k 5 200 "$TRAIN" --config="$T/tiny.pbtxt" --override='launch { num_processes: "2" }' \
    --sample_log="$T/log2" >"$T/out2" 2>"$T/err2"
rc=$?
check "2 processes (self-launched) exit 0 (rc=$rc)" $rc
[[ $rc == 0 ]] || { tail -n 30 "$T/out2" "$T/err2"; }
grep -q "train: starting 2 processes with hvxrun" "$T/err2"; check "the trainer launched itself" $?
audit "$T/log2" 2 2 $N; check "audit, 2 processes" $?
grep -qE '^\[0\] epoch 2/2 step 12/12 loss [0-9.e-]+ lr ' "$T/out2"; check "rank 0 progress line, 12 steps per epoch" $?
grep -qE '^\[0\] done: 24 steps .* eval accuracy [0-9.]+ on 40 samples' "$T/out2"
check "evaluation counted all 40 samples once" $?
[[ $(grep -c 'step [0-9]*/12 loss' "$T/out2") == 24 ]]; check "only rank 0 prints progress" $?

timeout -k 5 200 "$HVXRUN" --mpiexec "$MPIEXEC" -np 4 -- "$TRAIN" --config="$T/tiny.pbtxt" \
    --sample_log="$T/log4" >"$T/out4" 2>"$T/err4"
rc=$?
check "4 processes under hvxrun exit 0 (rc=$rc)" $rc
[[ $rc == 0 ]] || { tail -n 30 "$T/out4" "$T/err4"; }
audit "$T/log4" 4 2 $N; check "audit, 4 processes" $?
grep -qE '^\[0\] done: 12 steps .* on 40 samples' "$T/out4"; check "4 processes: 6 steps per epoch, 40 eval samples" $?

echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# The checkpoint directory's disk fills up (a small tmpfs): the run fails with an error naming the
# checkpoint and the file system's reason, leaves no partial file, keeps the previous checkpoint
# whole, and that checkpoint resumes the run to exactly the uninterrupted run's losses. Two
# processes (self-launched). Needs root to mount the tmpfs; without it prints SKIPPED and passes.
#   disk_full_test.sh TRAIN MAKE_IDX LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); source "$3"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" mlp 240 40 10 1 || { echo "FAIL: could not write the dataset"; exit 1; }

small=$T/small
mkdir -p "$small"
if ! mount -t tmpfs -o size=4m tmpfs "$small" 2>"$T/mount.err"; then
    echo "SKIPPED: cannot mount a tmpfs ($(cat "$T/mount.err")); needs root"
    exit 0
fi
trap 'umount "$small" 2>/dev/null' EXIT

run() {  # run NAME DIR ARGS...: rc in $rc
    local name=$1 dir=$2; shift 2
    timeout -k 5 200 "$TRAIN" --config="$T/tiny.pbtxt" \
        --override="launch { num_processes: \"2\" } checkpoint { dir: \"$dir\" every_steps: 2 keep: 10 }" \
        "$@" >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
}

# First one file written by rank 0 (checkpoint.format SINGLE_FILE).
single='checkpoint { format: SINGLE_FILE }'
run full "$T/ck_full" --override="$single"
check "uninterrupted run exits 0 (rc=$rc)" $rc
[[ $(losses "$T/full.out" | wc -l) == 12 ]]; check "it logged 12 steps" $?
size=$(stat -c %s "$T/ck_full/ckpt-2.pt") || { echo "FAIL: the uninterrupted run has no ckpt-2.pt"; exit 1; }

# Room for one checkpoint and a half: ckpt-2 fits, ckpt-4 does not.
umount "$small" && mount -t tmpfs -o size=$(((size * 3 / 2 + 4095) / 4096 * 4))k tmpfs "$small" ||
    { echo "FAIL: remounting the small tmpfs"; exit 1; }
run filled "$small" --override="$single"
[[ $rc != 0 ]]; check "the run whose disk filled fails (rc=$rc)" $?
grep -qE "writing checkpoint $small/ckpt-4\.pt\.tmp\.[0-9]+\.[0-9a-f]{16}: No space left on device" "$T/filled.out" "$T/filled.err"
check "the error names the checkpoint and ENOSPC" $?
grep -qE "^\[1\] .*rank 0 \(host [^)]+\): writing checkpoint $small/ckpt-4\.pt\.tmp\.[0-9]+\.[0-9a-f]{16}: No space left on device" "$T/filled.out" "$T/filled.err"
check "rank 1 fails with rank 0's reason" $?
[[ $rc != 0 ]] || tail -n 20 "$T/filled.out" "$T/filled.err"
left=$(ls "$small" | grep -vx hvx-job.lock)  # the job's claim on the directory stays
[[ $left == ckpt-2.pt ]]; check "only the previous checkpoint is left (${left//$'\n'/ })" $?

# With room again, the run resumes from it and ends as the uninterrupted run did.
mkdir -p "$T/ck_resumed" && cp "$small/ckpt-2.pt" "$T/ck_resumed/"
run resumed "$T/ck_resumed" --override="$single"
check "the resumed run exits 0 (rc=$rc)" $rc
grep -q "resuming from $T/ck_resumed/ckpt-2.pt" "$T/resumed.out" "$T/resumed.err"
check "it resumed from ckpt-2.pt" $?
diff <(losses "$T/full.out" | tail -n 10) <(losses "$T/resumed.out") >/dev/null
check "steps 3-12 have the uninterrupted run's losses and learning rates" $?

# The same with the default (checkpoint.format AUTO: both ranks see the directory, so sharded
# checkpoints written in the background): the rank whose shard does not fit is named with the file
# and ENOSPC on every rank, its checkpoint leaves nothing behind, and the one before resumes
# exactly.
sharded='checkpoint { format: AUTO }'
run dfull "$T/dck_full" --override="$sharded"
check "uninterrupted sharded run exits 0 (rc=$rc)" $rc
grep -q "checkpoint.format AUTO: SHARDED (every rank sees the files rank 0 writes in $T/dck_full" "$T/dfull.err"
check "AUTO chose SHARDED, saying so" $?
size=$(du -sb "$T/dck_full/ckpt-2" | cut -f1)
umount "$small" && mount -t tmpfs -o size=$(((size * 3 / 2 + 4095) / 4096 * 4))k tmpfs "$small" ||
    { echo "FAIL: remounting the small tmpfs"; exit 1; }
run dfilled "$small" --override="$sharded"
[[ $rc != 0 ]]; check "the sharded run whose disk filled fails (rc=$rc)" $?
grep -qE "^\[[01]\] .*rank [01] \(host [^)]+\): writing checkpoint shard $small/ckpt-4/[0-9a-f]+-shard-[01]-of-2\.safetensors: No space left on device" "$T/dfilled.out" "$T/dfilled.err" ||
    grep -qE "writing checkpoint shard $small/ckpt-4/[0-9a-f]+-shard-[01]-of-2\.safetensors: No space left on device" "$T/dfilled.err"
check "the error names the shard file and ENOSPC" $?
[[ $rc != 0 ]] || tail -n 20 "$T/dfilled.out" "$T/dfilled.err"
left=$(ls "$small" | grep -vx hvx-job.lock)  # the job's claim on the directory stays
[[ $left == ckpt-2 && -f $small/ckpt-2/index.json ]]
check "only the previous checkpoint is left (${left//$'\n'/ })" $?
mkdir -p "$T/dck_resumed" && cp -r "$small/ckpt-2" "$T/dck_resumed/"
run dresumed "$T/dck_resumed" --override="$sharded"
check "the resumed sharded run exits 0 (rc=$rc)" $rc
grep -q "resuming from $T/dck_resumed/ckpt-2 " "$T/dresumed.out" "$T/dresumed.err"
check "it resumed from ckpt-2/" $?
diff <(losses "$T/dfull.out" | tail -n 10) <(losses "$T/dresumed.out") >/dev/null
check "steps 3-12 have the uninterrupted sharded run's losses" $?

echo "failures: $failures"
[[ $failures == 0 ]]

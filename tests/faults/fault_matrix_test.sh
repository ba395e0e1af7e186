#!/usr/bin/env bash
# The fault matrix: under hvxrun on 2 namespace hosts x 2 ranks, one rank (3, on the second host;
# rank 0 for the checkpoint) fails in each way at each phase of a job, through hvx's failpoints
# (HVX_FAILPOINT, hvx/common/failpoint.h). Each case must end within its bound (15 s after the
# fault; a frozen rank: the collective or shutdown timeout, 6 s here, plus 15 s), with a non-zero
# exit and hvxrun's summary naming a rank and its host, and leave no process on any host; a rank
# frozen at a communicator split, too, and one frozen while the others call hvx::Shutdown after
# their failed collective (shutdown_after: bounded by the collective timeout alone). A checkpoint
# write cut short leaves the last complete checkpoint, and resuming from it repeats the
# uninterrupted run's losses; so does a rank that dies or freezes writing its shard of a sharded
# checkpoint in the background. Then settings that differ between ranks fail every rank within 5 s.
# Prints the matrix as a table (phase x fault: seconds to stop, exit code) and hvxrun's verdict
# line of each case; where a rank froze in a collective, the verdict must name it and the tensor.
#   fault_matrix_test.sh HVXRUN FAULT_PROBE TRAIN MPIEXEC NETNS_HOSTS MAKE_IDX TRAIN_LIB
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
PROBE=$(readlink -f "$2")
TRAIN=$(readlink -f "$3")
MPIEXEC=$(readlink -f "$4")
NETNS=$(readlink -f "$5")
MAKE_IDX=$(readlink -f "$6")
export HVX_NETNS_PREFIX=hvxq
source "$(dirname "${BASH_SOURCE[0]}")/../multihost/lib.sh"
source "$7"
T=${TEST_TMPDIR:-$(mktemp -d)}
TIMEOUT_S=6

hosts_up 2
verdicts=()
knobs=(-x HVX_COLLECTIVE_TIMEOUT_S=$TIMEOUT_S -x HVX_SHUTDOWN_TIMEOUT_S=$TIMEOUT_S -x HVX_ALLOW_FAILPOINTS=1)
table=()

# fault PHASE ACTION RANK BOUND_S PROGRAM...: one case of the matrix.
fault() {
    local phase=$1 action=$2 rank=$3 bound=$4
    shift 4
    launch -np 4 -H hvxq1:2,hvxq2:2 --stop-timeout 5 "${knobs[@]}" -x "HVX_FAILPOINT=$phase:$rank:$action" -- "$@"
    local s
    s=$(awk "BEGIN { printf \"%.1f\", $elapsed_ms / 1000 }")
    table+=("$(printf '| %-14s | %-9s | %5s s | %3s |' "${label:-$phase}" "$action" "$s" "$rc")")
    local verdict
    verdict=$(grep -m1 '^hvxrun: verdict: ' <<<"$err")
    verdicts+=("${label:-$phase} x $action: ${verdict:-(none)}")
    # A hang (a rank frozen in a collective or before it): the verdict names that rank, its host
    # and the tensor the others waited for.
    if [[ $action == stop && ($phase == negotiation || $phase == allreduce) && -z ${label:-} ]]; then
        grep -qE "^hvxrun: verdict: rank $rank \(host hvxq2, local rank 1\) (held up|did not submit) allreduce '(big|small)' .*stopped \(SIGSTOP" <<<"$verdict"
        check "$phase x $action: the verdict names rank $rank on hvxq2 and the tensor it held up" $?
    fi
    local ok=0
    [[ $rc != 0 ]] || ok=1
    ((elapsed_ms <= bound * 1000)) || ok=1
    grep -qE "^hvxrun: (rank [0-9]+ on host hvxq[12]|last stderr lines of rank [0-9]+ \(host hvxq[12]\))" <<<"$err" || ok=1
    [[ $action != mpi_abort || $rc == 3 ]] || ok=1
    check "$phase x $action: rc $rc after ${s} s (bound ${bound} s), summary names a rank and host" $ok
    [[ $ok == 0 ]] || show
    no_processes_left hvxq1 hvxq2
}

for phase in before_init init negotiation allreduce shutdown; do
    for action in exit kill abort mpi_abort stop; do
        [[ $phase == before_init && $action == mpi_abort ]] && continue  # MPI is not running yet
        bound=15
        [[ $action == stop ]] && bound=$((TIMEOUT_S + 15))
        fault "$phase" "$action" 3 "$bound" "$PROBE" --steps 5
    done
done

# A rank frozen at a communicator split (hvx/mpi SplitWithin): before the ranks meet for the first
# one (Init's host gather: the others' barrier gives up), and inside MPI_Comm_split itself at the
# third (the shared-memory plane's, set up at the first allreduce: MPI has no nonblocking split, and
# the others' watchdog ends them with 124). Either way the others' output names the split.
for phase_action in split:stop in_split:stop:3; do
    fault "${phase_action%%:*}" "${phase_action#*:}" 3 $((TIMEOUT_S + 15)) "$PROBE" --steps 5
    grep -qF "MPI_Comm_split" <<<"$err"; check "${phase_action%%:*}: the output names MPI_Comm_split" $?
done

# A rank frozen at a step while the others, their collective failed, call hvx::Shutdown (as a
# Python script's `finally: hvd.shutdown()` does): they end within the collective timeout plus
# 10 s, not after HVX_SHUTDOWN_TIMEOUT_S (120 s here) in a barrier the frozen rank never reaches.
saved_knobs=("${knobs[@]}")
knobs=(-x HVX_COLLECTIVE_TIMEOUT_S=$TIMEOUT_S -x HVX_SHUTDOWN_TIMEOUT_S=120 -x HVX_ALLOW_FAILPOINTS=1)
label="shutdown_after" fault negotiation stop 3 $((TIMEOUT_S + 10)) "$PROBE" --steps 5 --shutdown-after-failure
grep -qE "^\[[0-2]\] rank [0-2]: Shutdown after the failure took [0-9.]+ s: .*hvx had stopped" <<<"$err"
check "shutdown after a failure: a surviving rank's Shutdown returned the failure at once" $?
knobs=("${saved_knobs[@]}")

# ---- the trainer's checkpoint write (checkpoint.format SINGLE_FILE): rank 0 fails after its second
# checkpoint file is written but before it is renamed into place; the directory keeps ckpt-2.pt,
# and a resume repeats the uninterrupted run's losses from step 3 on.
N=240
tiny_shards "$T" mlp $N 40 10 2
train() {  # train CHECKPOINT_DIR HVXRUN_ARGS...
    local dir=$1
    shift
    launch -np 4 -H hvxq1:2,hvxq2:2 --stop-timeout 5 "${knobs[@]}" "$@" -- "$TRAIN" --config="$T/tiny.pbtxt" \
        --override="checkpoint { dir: \"$dir\" every_steps: 2 format: SINGLE_FILE }"
}
train "$T/ck_full"
check "uninterrupted trainer run exits 0 (rc=$rc)" $rc
echo "$out" >"$T/full.out"
[[ $(losses "$T/full.out" | wc -l) == 12 ]]; check "it logged 12 steps" $?
for action in exit kill abort stop; do
    dir=$T/ck_$action
    bound=15
    [[ $action == stop ]] && bound=$((TIMEOUT_S + 15))
    fault checkpoint "$action:2" 0 "$bound" "$TRAIN" --config="$T/tiny.pbtxt" \
        --override="checkpoint { dir: \"$dir\" every_steps: 2 format: SINGLE_FILE }"
    [[ -f $dir/ckpt-2.pt && ! -e $dir/ckpt-4.pt ]]
    check "checkpoint x $action: the last complete checkpoint, ckpt-2.pt, is there, no ckpt-4.pt ($(ls "$dir" | tr '\n' ' '))" $?
    train "$dir"
    check "checkpoint x $action: the resumed run exits 0 (rc=$rc)" $rc
    grep -q "resuming from $dir/ckpt-2.pt" <<<"$out$err"; check "checkpoint x $action: it resumed from ckpt-2.pt" $?
    echo "$out" >"$T/resumed.out"
    diff <(losses "$T/full.out" | tail -n +3) <(losses "$T/resumed.out") >/dev/null
    check "checkpoint x $action: the resumed losses repeat the uninterrupted run's, steps 3-12" $?
done

# ---- sharded checkpoints written in the background (checkpoint.format SHARDED): rank 3, on the
# second host, dies or freezes while its shard of the second checkpoint is being written; ckpt-4/
# never gets its index, and a resume from ckpt-2/ repeats the uninterrupted run's losses.
for action in kill stop; do
    dir=$T/dck_$action
    bound=15
    [[ $action == stop ]] && bound=$((TIMEOUT_S + 15))
    label="ckpt_shard" fault checkpoint_shard "$action:2" 3 "$bound" "$TRAIN" --config="$T/tiny.pbtxt" \
        --override="checkpoint { dir: \"$dir\" every_steps: 2 format: SHARDED }"
    [[ -f $dir/ckpt-2/index.json && ! -e $dir/ckpt-4/index.json ]]
    check "checkpoint_shard x $action: ckpt-2/ has its index, ckpt-4/ none ($(ls "$dir" | tr '\n' ' '))" $?
    launch -np 4 -H hvxq1:2,hvxq2:2 --stop-timeout 5 "${knobs[@]}" -- "$TRAIN" --config="$T/tiny.pbtxt" \
        --override="checkpoint { dir: \"$dir\" every_steps: 2 format: SHARDED }"
    check "checkpoint_shard x $action: the resumed run exits 0 (rc=$rc)" $rc
    grep -q "resuming from $dir/ckpt-2 " <<<"$out$err"; check "checkpoint_shard x $action: it resumed from ckpt-2/" $?
    echo "$out" >"$T/resumed.out"
    diff <(losses "$T/full.out" | tail -n +3) <(losses "$T/resumed.out") >/dev/null
    check "checkpoint_shard x $action: the resumed losses repeat the uninterrupted run's, steps 3-12" $?
done

# ---- settings that differ between ranks: every rank fails, naming the setting, within 5 s
mismatch() {  # mismatch NAME EXPECTED_TEXT PROGRAM...
    local name=$1 want=$2
    shift 2
    launch -np 4 -H hvxq1:2,hvxq2:2 "${knobs[@]}" -- "$@"
    local s
    s=$(awk "BEGIN { printf \"%.1f\", $elapsed_ms / 1000 }")
    table+=("$(printf '| %-14s | %-9s | %5s s | %3s |' "mismatch" "$name" "$s" "$rc")")
    # Every rank fails (agreement_test, collectives_test); here the job stops at the first, and
    # the other hosts' lines may be cut off with it.
    local named
    named=$(grep -E '^\[[0-3]\] ' <<<"$err" | grep -cF -- "$want")
    [[ $rc != 0 && $elapsed_ms -le 5000 && $named -ge 1 ]]
    check "mismatch of $name: rc $rc after ${s} s, $named rank(s) name it" $?
    [[ $rc != 0 && $named -ge 1 ]] || show
}
on_rank2() {  # on_rank2 'VAR=value ...' PROGRAM...: runs PROGRAM with those settings on rank 2 only
    local setting=$1
    shift
    printf '%s\n' /bin/sh -c "if [ \"\$HVX_RANK\" = 2 ]; then export $setting; fi; exec \"\$@\"" sh "$@"
}
# Six settings differ at once: the error names each of them (agreement.cc compares them all).
knobs_of_rank2=(HVX_FUSION_THRESHOLD=64MiB HVX_CACHE_CAPACITY=7 HVX_FIXED_REDUCTION_ORDER=0
    HVX_HIERARCHICAL_ALLREDUCE=1 HVX_NCCL_HALF_IN_FLOAT32=1 HVX_COLLECTIVE_TIMEOUT_S=9)
mapfile -t cmd < <(on_rank2 "${knobs_of_rank2[*]}" "$PROBE" --steps 1)
mismatch "six knobs" "HVX_FUSION_THRESHOLD: " "${cmd[@]}"
for knob in "${knobs_of_rank2[@]}"; do
    grep -E '^\[[0-3]\] ' <<<"$err" | grep -qF -- "${knob%%=*}: "
    check "mismatch of six knobs: the error names ${knob%%=*}" $?
done
# The trainer: rank 2 trains on other files (another dataset size), or with another config.
mapfile -t cmd < <(printf '%s\n' /bin/sh -c \
    "if [ \"\$HVX_RANK\" = 2 ]; then exec \"\$0\" --config=\"\$1\" --override='data { train_files: \"$T/shards/test-*\" }'; fi; exec \"\$0\" --config=\"\$1\"" \
    "$TRAIN" "$T/tiny.pbtxt")
mismatch "dataset" "training samples: " "${cmd[@]}"
mapfile -t cmd < <(printf '%s\n' /bin/sh -c \
    "if [ \"\$HVX_RANK\" = 2 ]; then exec \"\$0\" --config=\"\$1\" --override='optimizer { lr: 0.07 }'; fi; exec \"\$0\" --config=\"\$1\"" \
    "$TRAIN" "$T/tiny.pbtxt")
mismatch "config" "training config (hash of the effective config): " "${cmd[@]}"

echo
echo "| phase          | fault     | to stop | rc  |"
echo "|----------------|-----------|---------|-----|"
printf '%s\n' "${table[@]}"
echo
echo "hvxrun's verdict in each case:"
printf '%s\n' "${verdicts[@]}"
echo "failures: $failures"
[[ $failures == 0 ]]

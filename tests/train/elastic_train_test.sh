#!/usr/bin/env bash
# An elastic training job on 3 namespace hosts x 2 ranks (hvxrun --max-restarts 2): every rank on
# the third host is killed mid-epoch (SIGKILL to its training processes); hvxrun excludes the host and restarts on 4 ranks, which
# resume from the newest checkpoint. The sample logs of both attempts show every training sample
# once in every epoch, the interrupted one included (the failed attempt's steps after its
# checkpoint do not count: the restart trains them again), and the restarted job's losses and
# final evaluation equal those of an uninterrupted 4-rank run on one host resumed from the same
# checkpoint (the CPU plane folds in rank order, so host layout does not change the bits).
#   elastic_train_test.sh TRAIN MAKE_IDX EPOCH_AUDIT TRAIN_LIB HVXRUN MPIEXEC NETNS_HOSTS
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); AUDIT=$(readlink -f "$3")
source "$4"
HVXRUN=$(readlink -f "$5"); MPIEXEC=$(readlink -f "$6"); NETNS=$(readlink -f "$7")
export HVX_NETNS_PREFIX=hvxr
source "$(dirname "$NETNS")/lib.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}
N=480

tiny_config "$T" cnn $N 40 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }
# The permutation of each epoch, from an uninterrupted 2-process run on this host.
timeout -k 5 200 "$TRAIN" --config="$T/tiny.pbtxt" --override='launch { num_processes: "2" }' \
    --sample_log="$T/ref" >"$T/ref.out" 2>"$T/ref.err"
check "the reference run exits 0 (rc=$?)" $?

hosts_up 3
launch_bg -H hvxr1:2,hvxr2:2,hvxr3:2 --max-restarts 2 -- "$TRAIN" --config="$T/tiny.pbtxt" \
    --override="checkpoint { dir: \"$T/ck\" every_steps: 2 keep: 100 }" --sample_log="$T/samples"
# 8 steps per epoch on 6 ranks: kill the third host's ranks once rank 0 is at step 5.
for _ in $(seq 1 1200); do
    grep -qE '^\[0\] epoch 1/2 step 5/8 ' "$HVX_NETNS_STATE/out" 2>/dev/null && break
    sleep 0.05
done
victims=""
for p in $(ip netns pids hvxr3); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == train ]] && victims+="$p "
done
kill -KILL $victims 2>/dev/null
# How long recovery takes: to hvxrun's restart line, to the new ranks' Init, to their first step.
t_kill=$(date +%s%N) t_restart="" t_init="" t_step=""
while kill -0 "$pid" 2>/dev/null && [[ -z $t_step ]]; do
    now=$(date +%s%N)
    [[ -z $t_restart ]] && grep -q 'hvxrun: restart 1 of 2' "$HVX_NETNS_STATE/err" && t_restart=$now
    [[ -z $t_init && -n $t_restart ]] && grep -q 'hvx initialized: rank 0/4' "$HVX_NETNS_STATE/err" && t_init=$now
    [[ -z $t_step ]] && grep -qE ' step [0-9]+/12 ' "$HVX_NETNS_STATE/out" && t_step=$now
    sleep 0.02
done
ms() { [[ -n $1 ]] && echo $((($1 - $2) / 1000000)) || echo "?"; }
echo "recovery: restart line $(ms "$t_restart" "$t_kill") ms after the kill, Init of the 4 ranks" \
    "$(ms "$t_init" "$t_kill") ms, their first step $(ms "$t_step" "$t_kill") ms"
finish
[[ $rc == 0 ]]; check "the job finished after losing hvxr3 (rc=$rc; killed: $victims)" $?
[[ $rc == 0 ]] || tail -n 30 "$HVX_NETNS_STATE/err"
grep -qE 'hvxrun: restart 1 of 2: rank [45] on host hvxr3 was killed by signal 9 .*; excluded hvxr3 \(1 failure\); new plan: np 4 on hvxr1:2,hvxr2:2$' "$HVX_NETNS_STATE/err"
st=$?
check "one restart line: the killed rank, hvxr3 excluded, 4 ranks on 2 hosts" $st
[[ $st == 0 ]] || grep "^hvxrun:" "$HVX_NETNS_STATE/err"

# The hosts share $T/ck, so checkpoint.format AUTO writes directories, each rank its shard, in the
# background: the newest one committed when the host died is step 4's, or step 2's while step 4's
# was still being written.
resume=$(grep -oE 'resuming from [^ ]*/ckpt-[0-9]+ \(epoch [0-9]+, step [0-9]+\)' "$HVX_NETNS_STATE/out" "$HVX_NETNS_STATE/err" | head -n 1)
S=$(sed -nE 's/.*ckpt-([0-9]+) .*/\1/p' <<<"$resume")
[[ -n $S && $S -ge 2 && $S -lt 8 ]]; check "the restart resumed mid-epoch 1 from ckpt-${S:-?} ($resume)" $?
S=${S:-0}
stop=$((S * 60))  # positions of epoch 0 the first attempt committed: S steps x 6 ranks x 10

python3 "$AUDIT" $N 0 "$T/ref" 2 $N "$T/samples/attempt0:6:0:$stop" "$T/samples/attempt1:4:$stop" >"$T/audit0.txt"
check "epoch 1: every sample once, over both attempts (positions < $stop from the first)" $?
head -n 5 "$T/audit0.txt"
python3 "$AUDIT" $N 1 "$T/ref" 2 $N "$T/samples/attempt1:4:0" >"$T/audit1.txt"
check "epoch 2: every sample once, on the 4 ranks" $?
head -n 5 "$T/audit1.txt"

# The same checkpoint, resumed by an uninterrupted 4-rank run on this host.
mkdir -p "$T/ck4" && cp -r "$T/ck/ckpt-$S" "$T/ck4/"
check "ckpt-$S/ copied for the 4-rank run" $?
timeout -k 5 200 "$TRAIN" --config="$T/tiny.pbtxt" --override='launch { num_processes: "4" }' \
    --override="checkpoint { dir: \"$T/ck4\" every_steps: 2 }" >"$T/four.out" 2>"$T/four.err"
check "the 4-rank run from ckpt-$S/ exits 0 (rc=$?)" $?
# The 4-rank attempt's steps are those of 12 per epoch (the first attempt's were of 8).
four_rank_losses() { losses "$1" | grep -E ' step [0-9]+/12 '; }
if diff <(four_rank_losses "$T/four.out") <(four_rank_losses "$HVX_NETNS_STATE/out") >"$T/diff.txt" &&
    [[ -s $T/diff.txt || $(four_rank_losses "$T/four.out" | wc -l) -gt 0 ]]; then
    check "the restarted attempt's losses equal the 4-rank run's, step by step" 0
else
    check "the restarted attempt's losses equal the 4-rank run's, step by step" 1
    head -n 6 "$T/diff.txt"
fi
acc_job=$(grep -oE 'done: .*eval accuracy [0-9.]+' "$HVX_NETNS_STATE/out" | tail -n 1 | grep -oE '[0-9.]+$')
acc_four=$(grep -oE 'done: .*eval accuracy [0-9.]+' "$T/four.out" | tail -n 1 | grep -oE '[0-9.]+$')
[[ -n $acc_job && $acc_job == "$acc_four" ]]
check "final eval accuracy equal: elastic $acc_job, uninterrupted 4 ranks $acc_four" $?

# ---- Growth: the discovery script lists a third host while the job runs on two; hvxrun asks the
# ranks to checkpoint, and the job restarts on 6 ranks from that step. What is left of the epoch
# rarely fills whole 6-rank batches; under data.remainder PAD the resumed epoch's shares are
# padded to equal size and its last step is short, so every sample is still trained once.
printf 'hvxr1:2\nhvxr2:2\n' >"$T/grow_hosts"
printf '#!/bin/sh\ncat %s\n' "$T/grow_hosts" >"$T/discover.sh" && chmod +x "$T/discover.sh"
launch_bg --host-discovery-script "$T/discover.sh" --discovery-interval 0.2 -- "$TRAIN" \
    --config="$T/tiny.pbtxt" --override="data { remainder: PAD } checkpoint { dir: \"$T/ckg\" keep: 100 }" \
    --sample_log="$T/gsamples"
for _ in $(seq 1 1200); do
    grep -qE '^\[0\] epoch 1/2 step 2/12 ' "$HVX_NETNS_STATE/out" 2>/dev/null && break
    sleep 0.05
done
printf 'hvxr1:2\nhvxr2:2\nhvxr3:2\n' >"$T/grow_hosts"
finish
grep -qE 'hvxrun: restart to grow: the discovery script listed more slots \(np 6 on hvxr1:2,hvxr2:2,hvxr3:2\); new plan: np 6 on hvxr1:2,hvxr2:2,hvxr3:2$' "$HVX_NETNS_STATE/err"
check "growth: hvxrun restarted the job on 6 ranks when the third host appeared (rc=$rc)" $?
G=$(sed -nE 's/.*preempted at step ([0-9]+); checkpoint .*/\1/p' "$HVX_NETNS_STATE/err" | head -n 1)
[[ $rc == 0 && -n $G ]] && grep -qF "resuming from $T/ckg/ckpt-$G (epoch" "$HVX_NETNS_STATE/err"
check "the 4 ranks checkpointed at step ${G:-?} and the 6 resumed there" $?
[[ $rc == 0 ]] || tail -n 20 "$HVX_NETNS_STATE/err"
G=${G:-0}
# The 6 ranks start in epoch E at position P (12 steps of 4 x 10 per epoch before).
E=$((G / 12)) P=$(((G % 12) * 40))
for e in 0 1; do
    end=$N pad=""
    if ((e < E)); then
        runs=("$T/gsamples/attempt0:4:0")
    elif ((e == E && P > 0)); then
        runs=("$T/gsamples/attempt0:4:0:$P" "$T/gsamples/attempt1:6:$P")
        end=$((P + 6 * ((N - P + 5) / 6)))  # the 6 ranks' padded shares of what is left
        pad=", those from $N on padding"
        grep -qE "resumes at step [0-9]+/8: $((N - P)) of its $N samples remain; [0-9]+ steps? of 6 ranks x batch 10 train all of them" "$HVX_NETNS_STATE/err"
        check "growth: the 6 ranks say they train all $((N - P)) samples left of epoch $((e + 1))" $?
    else
        runs=("$T/gsamples/attempt1:6:0")
    fi
    python3 "$AUDIT" $N $e "$T/ref" 2 $end "${runs[@]}" >"$T/gaudit$e.txt"
    check "growth, epoch $((e + 1)): positions 0..$((end - 1)) once each$pad (${runs[*]##*/})" $?
    head -n 5 "$T/gaudit$e.txt"
done

no_processes_left hvxr1 hvxr2 hvxr3
echo "failures: $failures"
[[ $failures == 0 ]]

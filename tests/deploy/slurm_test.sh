#!/usr/bin/env bash
# A real SLURM cluster on two network-namespace hosts: slurmctld on the first, one slurmd per host
# (Debian's slurm-wlm and munge, started and stopped here), then
#   - examples/deploy/slurm/train.sbatch through sbatch: one hvxrun starts every rank through srun;
#     with select/cons_tres and task/affinity, as most clusters run, each rank has every CPU of
#     its node (a step of one task per node would have one);
#   - a job that reaches its time limit: the recipe's --signal=B:USR1 notice, sent by slurmctld
#     itself (a 1-minute limit here, the notice 30 s before it), has the trainer's ranks checkpoint
#     and end with 75, the job requeues itself, the second run resumes there and finishes, and
#     every sample of every epoch is trained once across the runs;
#   - hvxrun inside salloc;
#   - `srun PROGRAM` (one process per task, no MPI world): hvx::Init refuses with the command.
#   slurm_test.sh HVXRUN HVX_INFO MPIEXEC NETNS_HOSTS SBATCH_SCRIPT TRAIN MAKE_IDX TRAIN_LIB
# Needs root and slurm-wlm; without either it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
INFO=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
SBATCH_SCRIPT=$(readlink -f "$5")
TRAIN=$(readlink -f "$6")
MAKE_IDX=$(readlink -f "$7")
export HVX_NETNS_PREFIX=hvxl
source "$(dirname "$NETNS")/lib.sh"
source "$8"  # tiny_config, audit
for p in slurmctld slurmd sbatch salloc srun munged; do
    command -v "$p" >/dev/null || skip "$p is not installed (Debian: slurm-wlm, munge)"
done
# Short: munge's socket path must fit in 108 bytes, which a test's TEST_TMPDIR does not.
T=$(mktemp -d /tmp/hvx-slurm.XXXXXX)
mkdir -p "$T/state" "$T/spool"

hosts_up 2
addr() { awk -v h="$1" '$2 == h {print $1}' "$HVX_NETNS_STATE/hosts"; }

# munge: one daemon; the hosts share its socket (a file) and its key.
dd if=/dev/urandom of="$T/munge.key" bs=1024 count=1 2>/dev/null && chmod 600 "$T/munge.key"
munged --force --key-file="$T/munge.key" --socket="$T/munge.sock" --pid-file="$T/munged.pid" \
    --log-file="$T/munged.log" --seed-file="$T/munged.seed" || { echo "FAIL: munged did not start"; exit 1; }
trap 'kill $(cat "$T/munged.pid" 2>/dev/null) 2>/dev/null; "$NETNS" down; rm -rf "$T"' EXIT

cat >"$T/slurm.conf" <<CONF
ClusterName=hvxtest
SlurmctldHost=hvxl1($(addr hvxl1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job waits this long before it starts again (120 s by default); forcing
# an earlier start instead has the node refuse it ("Job credential revoked").
AuthInfo=socket=$T/munge.sock,cred_expire=10
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.%n.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
InactiveLimit=0
KillWait=5
# debug2 logs each of slurmctld's time-limit checks (every 30 s), which the time-limit case times.
SlurmctldDebug=debug2
NodeName=hvxl1 NodeAddr=$(addr hvxl1) CPUs=2 State=UNKNOWN
NodeName=hvxl2 NodeAddr=$(addr hvxl2) CPUs=2 State=UNKNOWN
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' >"$T/cgroup.conf"
export SLURM_CONF=$T/slurm.conf
# slurmd initializes its cgroup plugin even with task/none and proctrack/linuxproc; a namespace
# host's fresh /sys has no cgroup hierarchies, so mount the v1 ones it reads.
cat >"$T/slurmd.sh" <<'SH'
#!/bin/sh
mount -t tmpfs tmpfs /sys/fs/cgroup || exit 1
for c in freezer cpuset memory devices cpu,cpuacct; do
    mkdir -p "/sys/fs/cgroup/$c" && mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c" 2>/dev/null
done
exec slurmd "$@"
SH
chmod +x "$T/slurmd.sh"

"$NETNS" exec hvxl1 env SLURM_CONF="$SLURM_CONF" slurmctld -f "$SLURM_CONF" -i >"$T/ctld.start" 2>&1
for h in hvxl1 hvxl2; do
    "$NETNS" exec "$h" env SLURM_CONF="$SLURM_CONF" "$T/slurmd.sh" -f "$SLURM_CONF" -N "$h" >"$T/$h.start" 2>&1
done
idle=0
for _ in $(seq 1 50); do
    idle=$("$NETNS" exec hvxl1 env SLURM_CONF="$SLURM_CONF" sinfo -h -t idle -o '%D' 2>/dev/null | head -n 1)
    [[ ${idle:-0} == 2 ]] && break
    sleep 0.2
done
[[ ${idle:-0} == 2 ]]; check "the cluster is up: 2 idle nodes" $?
if [[ ${idle:-0} != 2 ]]; then tail -n 5 "$T"/*.log "$T"/*.start; exit 1; fi

on1() { timeout -k 5 90 "$NETNS" exec hvxl1 env SLURM_CONF="$SLURM_CONF" PATH="$(dirname "$HVXRUN"):/usr/bin:/bin" "$@"; }
job_field() { on1 scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# ---- the recipe as it is, one task per node: each rank has its node's 2 CPUs
printf '#!/bin/sh\necho "cpus $(nproc)"\n' >"$T/cpus.sh" && chmod +x "$T/cpus.sh"
on1 HVX_COMMAND="$T/cpus.sh" HVXRUN_ARGS="--mpiexec $MPIEXEC --timeout 60" \
    sbatch --wait --gpus-per-node=0 --output="$T/cpus.out" "$SBATCH_SCRIPT" >"$T/cpus.err" 2>&1
rc=$?
[[ $rc == 0 && $(grep -cE '^\[[01]\] cpus 2$' "$T/cpus.out") == 2 ]]
check "train.sbatch: 2 ranks, one per node, each with its node's 2 CPUs (rc=$rc)" $?
[[ $rc == 0 ]] || cat "$T/cpus.err" "$T/cpus.out"
# Without --exclusive (overridden here) the step of one task per node gets one CPU: what the
# recipe's --exclusive is for.
on1 HVX_COMMAND="$T/cpus.sh" HVXRUN_ARGS="--mpiexec $MPIEXEC --timeout 60" \
    sbatch --wait --oversubscribe --gpus-per-node=0 --output="$T/cpus1.out" "$SBATCH_SCRIPT" >"$T/cpus1.err" 2>&1
[[ $(grep -cE '^\[[01]\] cpus 1$' "$T/cpus1.out") == 2 ]]
check "without --exclusive each rank would have 1 CPU" $?

# ---- the recipe through sbatch, 2 ranks per node (no GPUs here: hvxrun takes the tasks per node)
on1 HVX_COMMAND="$INFO --check" HVXRUN_ARGS="--mpiexec $MPIEXEC --timeout 60" \
    sbatch --wait --ntasks-per-node=2 --gpus-per-node=0 --output="$T/sbatch.out" "$SBATCH_SCRIPT" >"$T/sbatch.err" 2>&1
rc=$?
passes=$(grep -c '"check":"pass"' "$T/sbatch.out" 2>/dev/null)
[[ $rc == 0 && $passes == 4 ]] && grep -q '"host":"hvxl2"' "$T/sbatch.out"
check "train.sbatch: 4 ranks on both nodes, every check passed (rc=$rc, $passes passes)" $?
[[ $rc == 0 ]] || cat "$T/sbatch.err" "$T/sbatch.out"

# ---- the time limit: slurmctld's notice, checkpoint, 75, requeue, resume, done
# slurmctld checks time limits every 30 s and sends the --signal notice at the first check that
# finds the job's end within the notice's lead + 30 s: with a 1-minute limit and a 30 s lead, at
# the first check after the job starts. Submitted 18 s after a check, the job hears at about 12 s.
N=2880 EPOCHS=4 STEPS=288  # 4 ranks x batch 10: 72 steps an epoch
tiny_config "$T" cnn $N 40 10 $EPOCHS || { echo "FAIL: could not write the dataset"; exit 1; }
sed -i "s|^logging .*|logging { log_every_steps: 1 }\ncheckpoint { dir: \"$T/ck\" keep: 100 }|" "$T/tiny.pbtxt"
timeout -k 5 120 "$TRAIN" --config="$T/tiny.pbtxt" --override='epochs: 1 logging { max_steps_per_epoch: 1 }' \
    --override="checkpoint { dir: \"$T/prep-ck\" }" >"$T/prep.out" 2>&1 ||
    { echo "FAIL: preparing shards"; tail -n 20 "$T/prep.out"; exit 1; }
checks() { grep -c 'Testing job time limits' "$T/slurmctld.log"; }
seen=$(checks)
for _ in $(seq 1 350); do (($(checks) > seen)) && break; sleep 0.1; done
sleep 18
id=$(on1 HVX_COMMAND="$TRAIN --config=$T/tiny.pbtxt --sample_log=$T/log" \
    HVXRUN_ARGS="--mpiexec $MPIEXEC --timeout 300" \
    sbatch --parsable --time=1 --signal=B:USR1@30 --ntasks-per-node=2 --gpus-per-node=0 \
    --output="$T/requeue.out" "$SBATCH_SCRIPT")
states= raised=
for _ in $(seq 1 1200); do
    state=$(job_field "$id" JobState)
    [[ $state == "${states##* }" ]] || states+=" $state"
    # The requeued run gets time enough to finish (it would be told again 30 s in otherwise).
    if [[ -z $raised && $state == PENDING && $states == *RUNNING* ]]; then
        on1 scontrol update JobId="$id" TimeLimit=10 && raised=1
    fi
    [[ $state == COMPLETED || $state == FAILED || $state == TIMEOUT ]] && break
    sleep 0.2
done
G=$(sed -nE 's/.*preempted at step ([0-9]+); checkpoint .*/\1/p' "$T/requeue.out" | head -n 1)
# The two nodes share $T/ck: checkpoint.format AUTO writes directories, a shard per rank.
[[ -n $G ]] && ((G >= 1 && G < STEPS)) && [[ -f $T/ck/ckpt-$G/index.json ]] &&
    grep -q '^hvxrun: preempted: every rank ended cleanly after the checkpoint request (signal 15)' "$T/requeue.out" &&
    grep -q "^train.sbatch: hvxrun checkpointed and ended with 75; requeueing job $id" "$T/requeue.out"
check "time limit: slurmctld's notice had the ranks checkpoint at step ${G:-?} of $STEPS and the job requeued itself" $?
restarts=$(job_field "$id" Restarts)
[[ $state == COMPLETED && $restarts == 1 ]] &&
    grep -q "resuming from $T/ck/ckpt-$G (epoch" "$T/requeue.out" && grep -qE "^\[0\] done: $STEPS steps" "$T/requeue.out"
check "time limit: the requeued run resumed there and finished (states:$states; restarts $restarts)" $?
audit "$T/log" 4 $EPOCHS $N; check "time limit: every sample of every epoch trained once across the two runs" $?
((failures == 0)) || { tail -n 40 "$T/requeue.out"; on1 scontrol show job "$id"; grep -v debug2 "$T/slurmctld.log" | tail -n 30; }

# ---- hvxrun inside salloc: the allocation's nodes, ranks started through srun
on1 salloc -N 2 --ntasks-per-node=2 "$HVXRUN" --verbose --mpiexec "$MPIEXEC" --timeout 60 -- "$INFO" --check >"$T/salloc.out" 2>&1
rc=$?
[[ $rc == 0 && $(grep -c '"check":"pass"' "$T/salloc.out") == 4 ]] &&
    grep -qE 'plan from SLURM allocation' "$T/salloc.out" && grep -qE -- '-launcher slurm' "$T/salloc.out"
check "salloc + hvxrun: the allocation's 4 slots, ranks started by srun (rc=$rc)" $?
[[ $rc == 0 ]] || tail -n 20 "$T/salloc.out"

# ---- srun PROGRAM: each task alone; Init refuses with the command that fixes it
on1 srun -N 2 --ntasks-per-node=2 "$INFO" >"$T/srun.out" 2>&1
rc=$?
[[ $rc != 0 ]] && grep -qF 'SLURM_NTASKS=4' "$T/srun.out" && grep -qF 'hvxrun -np 4 -H hvxl1:2,hvxl2:2 --' "$T/srun.out"
check "srun PROGRAM: every task refuses (rc=$rc) with the hvxrun command" $?

echo "failures: $failures"
[[ $failures == 0 ]]

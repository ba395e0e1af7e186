#!/usr/bin/env bash
# A real SLURM cluster on two network-namespace hosts: slurmctld on the first, one slurmd per host
# (Debian's slurm-wlm and munge, started and stopped here), then
#   - examples/deploy/slurm/train.sbatch through sbatch: one hvxrun starts every rank through srun;
#   - hvxrun inside salloc;
#   - `srun PROGRAM` (one process per task, no MPI world): hvx::Init refuses with the command.
#   slurm_test.sh HVXRUN HVX_INFO MPIEXEC NETNS_HOSTS SBATCH_SCRIPT
# Needs root and slurm-wlm; without either it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
INFO=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
SBATCH_SCRIPT=$(readlink -f "$5")
export HVX_NETNS_PREFIX=hvxl
source "$(dirname "$NETNS")/lib.sh"
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
AuthInfo=socket=$T/munge.sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.%n.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
InactiveLimit=0
KillWait=5
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

# ---- the recipe through sbatch, 2 ranks per node (no GPUs here: hvxrun takes the tasks per node)
on1 HVX_COMMAND="$INFO --check" HVXRUN_ARGS="--mpiexec $MPIEXEC --timeout 60" \
    sbatch --wait --ntasks-per-node=2 --gpus-per-node=0 --output="$T/sbatch.out" "$SBATCH_SCRIPT" >"$T/sbatch.err" 2>&1
rc=$?
passes=$(grep -c '"check":"pass"' "$T/sbatch.out" 2>/dev/null)
[[ $rc == 0 && $passes == 4 ]] && grep -q '"host":"hvxl2"' "$T/sbatch.out"
check "train.sbatch: 4 ranks on both nodes, every check passed (rc=$rc, $passes passes)" $?
[[ $rc == 0 ]] || cat "$T/sbatch.err" "$T/sbatch.out"

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

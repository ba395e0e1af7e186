#!/usr/bin/env bash
# The deployment recipes of examples/deploy on network-namespace hosts, with the environment each
# system gives its containers:
#   SageMaker: the same entry point on both hosts (SM_HOSTS / SM_CURRENT_HOST / SM_NUM_GPUS, then
#     the resource config JSON); the leader starts every rank, the follower ends with the job.
#   Kubeflow MPIJob (MPICH): the launcher pod's HYDRA_HOST_FILE (worker DNS names with slots) and
#     K_MPI_JOB_ROLE=launcher, a launcher command naming no hosts; a worker pod refusing to launch.
#   PyTorchJob pod: a program started once per pod is told to use an MPIJob.
#   deploy_test.sh HVXRUN HVX_INFO MPIEXEC NETNS_HOSTS ENTRY_POINT
# (The MPIJob manifest itself runs in mpijob_test.sh, on the image.)
# Needs root for the hosts; where namespaces cannot be created it prints SKIPPED and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
INFO=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
ENTRY=$(readlink -f "$5")
export HVX_NETNS_PREFIX=hvxd
source "$(dirname "$(readlink -f "$NETNS")")/lib.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}

# ---- PyTorchJob pod (no hosts needed): Init refuses and says what to run instead
out=$(env -i PATH=/usr/bin:/bin WORLD_SIZE=2 RANK=1 MASTER_ADDR=job-master-0 timeout 60 "$INFO" 2>&1)
rc=$?
[[ $rc != 0 ]] && grep -qF 'in one of WORLD_SIZE=2 pods that a per-pod launcher (a Kubeflow PyTorchJob) started (RANK=1)' <<<"$out" &&
    grep -qF 'examples/deploy/kubernetes/mpijob.yaml' <<<"$out"
check "a PyTorchJob pod's program fails (rc=$rc) naming the MPIJob recipe" $?
[[ $rc != 0 ]] || echo "$out"

hosts_up 3

# on HOST ENV... -- CMD...: runs CMD on a namespace host with env ENV..., output in $T/HOST.{out,err}
on() {
    local host=$1
    shift
    local vars=()
    while [[ $1 != -- ]]; do vars+=("$1"); shift; done
    shift
    timeout -k 5 90 "$NETNS" exec "$host" env "${vars[@]}" "$@" >"$T/$host.out" 2>"$T/$host.err" </dev/null
}
kit=(HVXRUN="$HVXRUN" HVX_SSHD=none HVXRUN_ARGS="--mpiexec $MPIEXEC --launcher-exec $HVX_NETNS_STATE/fakessh --timeout 60 --start-timeout 20")

# ---- SageMaker, twice: the SM_* variables, then the resource config JSON
sm_env=(SM_HOSTS='["hvxd1","hvxd2"]' SM_NUM_GPUS=2)
for form in variables json; do
    for h in hvxd1 hvxd2; do
        if [[ $form == variables ]]; then
            vars=("${sm_env[@]}" SM_CURRENT_HOST=$h)
        else
            vars=(SM_RESOURCE_CONFIG="{\"current_host\":\"$h\",\"hosts\":[\"hvxd1\",\"hvxd2\"]}" SM_NUM_GPUS=2)
        fi
        ( on "$h" "${kit[@]}" "${vars[@]}" -- "$ENTRY" -- "$INFO" --check; echo $? >"$T/$h.rc" ) &
    done
    wait
    lead_rc=$(cat "$T/hvxd1.rc") follow_rc=$(cat "$T/hvxd2.rc")
    passes=$(grep -c '"check":"pass"' "$T/hvxd1.out")
    [[ $lead_rc == 0 && $passes == 4 ]]
    check "SageMaker ($form): the leader ran 4 ranks, every check passed (rc=$lead_rc, $passes passes)" $?
    grep -qE '"host":"hvxd2".*"local_rank":1|"local_rank":1.*"host":"hvxd2"' "$T/hvxd1.out"
    check "SageMaker ($form): 2 ranks per host, the second host's too" $?
    [[ $follow_rc == 0 ]] && grep -qF 'this host is not the leader' "$T/hvxd2.err"
    check "SageMaker ($form): the follower waited for its ranks and ended with the job (rc=$follow_rc)" $?
    [[ $lead_rc == 0 && $follow_rc == 0 ]] || cat "$T"/hvxd1.err "$T"/hvxd2.err
done

# ---- SageMaker with --max-restarts: the follower stays while the leader restarts the job
restart_kit=(HVXRUN="$HVXRUN" HVX_SSHD=none HVXRUN_ARGS="--mpiexec $MPIEXEC --launcher-exec $HVX_NETNS_STATE/fakessh --timeout 60 --start-timeout 5 --max-restarts 1 --host-failure-limit 2")
probe='if [ "$(hostname)" = hvxd2 ] && [ "$HVX_RESTART_COUNT" = 0 ]; then sleep 1; exit 7; fi; sleep 1; echo "ran on $(hostname) in attempt $HVX_RESTART_COUNT"'
for h in hvxd1 hvxd2; do
    ( on "$h" "${restart_kit[@]}" "${sm_env[@]}" SM_CURRENT_HOST=$h -- "$ENTRY" -- /bin/sh -c "$probe"
      echo $? >"$T/$h.rc"; date +%s%N >"$T/$h.end" ) &
done
wait
lead_rc=$(cat "$T/hvxd1.rc") follow_rc=$(cat "$T/hvxd2.rc")
[[ $lead_rc == 0 ]] && grep -qF 'hvxrun: restart 1 of 1: rank' "$T/hvxd1.err" &&
    [[ $(grep -c 'in attempt 1' "$T/hvxd1.out") == 4 ]]
check "SageMaker + --max-restarts: the leader restarted and 4 ranks ran the second attempt (rc=$lead_rc)" $?
[[ $follow_rc == 0 ]] && grep -qF 'hvxd1 restarted the job; this host runs ranks again' "$T/hvxd2.err" &&
    (($(cat "$T/hvxd2.end") >= $(cat "$T/hvxd1.end") - 1000000000))
check "SageMaker + --max-restarts: the follower waited through the restart and ended with the job (rc=$follow_rc)" $?
[[ $lead_rc == 0 && $follow_rc == 0 ]] || cat "$T"/hvxd1.err "$T"/hvxd2.err

# ---- Kubeflow MPIJob: the launcher pod on hvxd1, two worker pods. These hosts have names in
# /etc/hosts and no DNS server, and the workers are up: no --host-wait (mpijob_test waits, through
# a DNS server, for the launcher's own name and the workers' sshd).
printf 'hvxd2:2\nhvxd3:2\n' >"$T/hostfile"
on hvxd1 "${kit[@]}" HYDRA_HOST_FILE="$T/hostfile" K_MPI_JOB_ROLE=launcher -- \
    "$HVXRUN" --verbose --mpiexec "$MPIEXEC" --launcher-exec "$HVX_NETNS_STATE/fakessh" --timeout 60 \
    --host-wait 0 -- "$INFO" --check
rc=$?
[[ $rc == 0 && $(grep -c '"check":"pass"' "$T/hvxd1.out") == 4 ]] &&
    ! grep -q '"host":"hvxd1"' "$T/hvxd1.out" && grep -q '"host":"hvxd3"' "$T/hvxd1.out"
check "MPIJob launcher: 4 ranks on the hostfile's workers, none on the launcher (rc=$rc)" $?
grep -qF 'Kubeflow MPI Operator launcher (HYDRA_HOST_FILE=' "$T/hvxd1.err" "$T/hvxd1.out"
check "MPIJob launcher: hvxrun names where its hosts came from" $?
[[ $rc == 0 ]] || cat "$T/hvxd1.err"

on hvxd2 K_MPI_JOB_ROLE=worker -- "$HVXRUN" --mpiexec "$MPIEXEC" -- "$INFO"
rc=$?
[[ $rc != 0 ]] && grep -qF 'worker pod of a Kubeflow MPIJob' "$T/hvxd2.err"
check "MPIJob worker: hvxrun refuses (rc=$rc) and says the launcher starts the ranks" $?

no_processes_left hvxd1 hvxd2 hvxd3
echo "failures: $failures"
[[ $failures == 0 ]]

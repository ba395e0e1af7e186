#!/usr/bin/env bash
# The SageMaker image as SageMaker runs it: built from the recipe (examples/deploy/sagemaker:
# Dockerfile, stage.sh) by build_image.sh with Debian's podman and runc, on a debian:12 base made
# from Debian's packages; then two containers algo-1 and algo-2 on a network of their own (the
# names in /etc/hosts, hostnames that are not those names), each `podman run IMAGE train` with its
# own /opt/ml (resourceconfig, hyperparameters, inputdataconfig, the "training" channel), the
# second started 5 s after the first (1 s from the second job on). The entry point is PID 1;
# nothing tells hvxrun the slots or where mpiexec is: it counts GPUs (none: one rank per instance)
# and finds MPICH's on PATH.
#   1. a job stopped at step 8 of 12 (max_steps, as a reclaimed spot instance): both containers
#      exit 0, ckpt-8.pt lands in algo-1's /opt/ml/checkpoints, and the leader's sshd, started by
#      the entry point before hvxrun, is not ended with the job's leftovers.
#   2. the same job started again in new containers resumes from it and finishes: the weights in
#      algo-1's /opt/ml/model, every sample of both epochs trained once across the two runs.
#   3. `podman stop` of both containers in the middle of a long job (SIGTERM to PID 1, as
#      StopTrainingJob does): each exits 75 within the grace, after the leader's checkpoint.
#   4. a job whose ranks fail: both containers exit non-zero, algo-1's /opt/ml/output/failure
#      (SageMaker's failure reason) names the rank and the cause.
#   container_test.sh HVXRUN HVXRUN_RANK TRAIN BUILD_IMAGE CONFIG MAKE_IDX TRAIN_LIB CONTAINERS_CONF
# Needs root, podman and runc; where one is missing, or the programs were built against a LibTorch
# the image does not have (HVX_TORCH_PYTHON), it prints SKIPPED and passes.
set -uo pipefail
for i in 1 2 3 4 5 6 7 8; do [[ -e ${!i} ]] || { echo "FAIL: argument $i (${!i}) does not exist"; exit 1; }; done
HVXRUN=$(readlink -f "$1") RANK=$(readlink -f "$2") TRAIN=$(readlink -f "$3") BUILD_IMAGE=$(readlink -f "$4")
CONFIGS=$(dirname "$(readlink -f "$5")") MAKE_IDX=$(readlink -f "$6")
export CONTAINERS_CONF
CONTAINERS_CONF=$(readlink -f "$8")
source "$7"  # tiny_shards, audit, check
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
source "$(dirname "$(readlink -f "$0")")/podman_lib.sh"
source "$(dirname "$(readlink -f "$0")")/sagemaker_lib.sh"
podman_ready

# ---- the image, from the recipe
N=240
tiny_shards "$T" mlp $N 40 10 2
mkdir -p "$T/configs"
cp "$CONFIGS"/*.pbtxt "$T/tiny.pbtxt" "$T/configs/"  # a config of the user's, built into the image
image=localhost/hvx-sagemaker:container-test
build_image "$BUILD_IMAGE" "$image" "$T/configs"

# ---- each instance's /opt/ml, as SageMaker writes it
sagemaker_ml "$T" algo-1 algo-2
mkdir -p "$T/log"

# A network of the job's own, with fixed addresses for the names in /etc/hosts.
subnet=10.89.231
podman_network hvx-container-test $subnet
containers_gone() { podman_containers_gone; }

jobs_run=0
# start HOST: `podman run IMAGE train` as SageMaker starts it on HOST, in the background; its
# output in $T/HOST.out/err, its exit status in $T/HOST.rc when it ends.
start() {
    local h=$1 n=${1#algo-}
    rm -f "$T/$h.rc"
    (
        podman run --name "hvxct-$h" --hostname "ip-10-0-0-$n" --network "$podman_net" --ip "$subnet.1$n" \
            --add-host "algo-1:$subnet.11" --add-host "algo-2:$subnet.12" \
            -v "$T/$h/ml:/opt/ml" -v "$T/log:/log" \
            -e TRAINING_JOB_NAME="$job_name" \
            -e TRAINING_JOB_ARN="arn:aws:sagemaker:us-east-1:000000000000:training-job/$job_name" \
            -e HVXRUN_ARGS="--timeout 300" \
            "$image" train >"$T/$h.out" 2>"$T/$h.err" </dev/null
        echo $? >"$T/$h.rc.tmp" && mv "$T/$h.rc.tmp" "$T/$h.rc"
    ) &
}
# job: both containers, algo-2's $follower_delay s after algo-1's (5 s for the first job, where the
# leader must wait for algo-2; 1 s after it); waits for both; their statuses in $rc1, $rc2.
follower_delay=5
job() {
    jobs_run=$((jobs_run + 1)) job_name=hvx-container-test-$jobs_run
    start algo-1
    sleep "$follower_delay"
    follower_delay=1
    start algo-2
    wait
    rc1=$(cat "$T/algo-1.rc") rc2=$(cat "$T/algo-2.rc")
    containers_gone
}
show() { for h in algo-1 algo-2; do echo "--- $h stdout"; tail -n 20 "$T/$h.out"; echo "--- $h stderr"; tail -n 40 "$T/$h.err"; done; }

# ---- 1. bring-your-own-container, stopped at step 8 of 12
hyperparameters '{"config": "tiny.pbtxt", "sample_log": "/log", "max_steps": "8"}'
job
[[ $rc1 == 0 && $rc2 == 0 ]]; check "BYOC: both containers exit 0 (algo-1 $rc1, algo-2 $rc2)" $?
grep -q '^\[0\] .*hvx initialized: rank 0/2, local rank 0/1, cross rank 0/2, host ip-10-0-0-1,' "$T/algo-1.err" &&
    grep -q '^\[1\] .*hvx initialized: rank 1/2, local rank 0/1, cross rank 1/2, host ip-10-0-0-2,' "$T/algo-1.err"
check "BYOC: 2 ranks, one per instance (no GPU), found without --slots-per-host" $?
[[ -f $T/algo-1/ml/checkpoints/ckpt-8.pt ]]; check "BYOC: the step-8 checkpoint is in algo-1's /opt/ml/checkpoints" $?
! grep -q 'ended [0-9]* process(es)' "$T/algo-1.err"
check "BYOC: the leader's sshd is not ended as a leftover of the job" $?
grep -qF 'hvxrun: the leader algo-1 reports that the job ended with status 0' "$T/algo-2.err"
check "BYOC: algo-2 exited with the status the leader sent" $?
((failures == 0)) || show

# ---- 2. the same job in new containers: resumes and finishes
before=$failures
hyperparameters '{"config": "tiny.pbtxt", "sample_log": "/log"}'
job
[[ $rc1 == 0 && $rc2 == 0 ]]; check "resumed: both containers exit 0 (algo-1 $rc1, algo-2 $rc2)" $?
grep -q "resuming from /opt/ml/checkpoints/ckpt-8.pt" "$T/algo-1.out" "$T/algo-1.err"
check "resumed: from /opt/ml/checkpoints at step 8" $?
grep -qE '^\[0\] done: 24 steps' "$T/algo-1.out"; check "resumed: and finished at step 24" $?
[[ -s $T/algo-1/ml/model/model.pt ]]; check "resumed: the weights are in algo-1's /opt/ml/model" $?
audit "$T/log" 2 2 $N; check "every sample of both epochs trained once across the two runs" $?
((failures == before)) || show

# ---- 3. podman stop in the middle of a long job
before=$failures
rm -rf "$T"/algo-*/ml/checkpoints/*
hyperparameters '{"config": "tiny.pbtxt", "override": "epochs: 100000"}'
jobs_run=$((jobs_run + 1)) job_name=hvx-container-test-$jobs_run
start algo-1
sleep "$follower_delay"
start algo-2
for ((i = 0; i < 120; i++)); do
    grep -qE '^\[0\] epoch [0-9]+/100000 step' "$T/algo-1.out" 2>/dev/null && break
    sleep 0.5
done
grep -qE '^\[0\] epoch [0-9]+/100000 step' "$T/algo-1.out"; check "stop: the long job trains" $?
t0=$(date +%s)
podman stop -t 60 hvxct-algo-1 hvxct-algo-2 >/dev/null 2>&1
wait
took=$(($(date +%s) - t0))
rc1=$(cat "$T/algo-1.rc") rc2=$(cat "$T/algo-2.rc")
containers_gone
[[ $rc1 == 75 && $rc2 == 75 ]] && ((took < 60))
check "stop: both containers exit 75 within the grace (algo-1 $rc1, algo-2 $rc2, $took s)" $?
# Rank 0 says at which step it stopped; that step's checkpoint is the one the stop wrote.
stopped_at=$(sed -nE 's/^\[0\] preempted: ([0-9]+) steps .*/\1/p' "$T/algo-1.out")
[[ -n $stopped_at && -f $T/algo-1/ml/checkpoints/ckpt-$stopped_at.pt ]]
check "stop: the leader checkpointed step ${stopped_at:-?} into /opt/ml/checkpoints ($(ls "$T/algo-1/ml/checkpoints/" | tr '\n' ' '))" $?
((failures == before)) || show

# ---- 4. ranks that fail
before=$failures
hyperparameters '{"config": "tiny.pbtxt", "no_such_flag": "1"}'
job
[[ $rc1 != 0 && $rc2 == "$rc1" ]]; check "failing ranks: both containers exit with their status (algo-1 $rc1, algo-2 $rc2)" $?
grep -qE "^rank [0-9]+ on host algo-[12] .*exited with status $rc1" "$T/algo-1/ml/output/failure" &&
    grep -qF "no_such_flag" "$T/algo-1/ml/output/failure"
check "failing ranks: algo-1's /opt/ml/output/failure names the rank and why: $(head -c 300 "$T/algo-1/ml/output/failure" 2>/dev/null)" $?
((failures == before)) || show

echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# The SageMaker recipe (examples/deploy/sagemaker) against what SageMaker really gives a container:
# two namespace hosts named algo-1 and algo-2, each a "container" with its own /opt/ml (private
# mounts: input/config/resourceconfig.json, hyperparameters.json, inputdataconfig.json, the
# "training" channel, model/, checkpoints/, output/), the image's files (stage.sh: /opt/hvx, and
# setup_ssh.sh's /etc/ssh), a hostname of its own that is not its SageMaker name (as in a real
# container), separate boot ids (TCP between the hosts) and no ssh until the entry point starts
# the real sshd. The same container command starts on both, the second 6 s after the first (1 s
# from the second job on).
#   1. bring-your-own-container: `entry_point.py train` with the hyperparameters in
#      hyperparameters.json; max_steps stops the job at step 8 of 12, as if the spot instance were
#      reclaimed there. The leader waits for algo-2's sshd (--host-wait), both exit 0, the
#      checkpoint lands in algo-1's /opt/ml/checkpoints.
#   2. the restarted job through the SageMaker PyTorch toolkit's runner, as AWS's PyTorch images
#      start it (PyPI's sagemaker-training and sagemaker-pytorch-training, tools/sagemaker_venv;
#      SAGEMAKER_TRAINING_MODULE names the PyTorch toolkit): its `train` reads the same files,
#      copies the entry point from sagemaker_submit_directory and runs it on both hosts with the
#      hyperparameters as arguments, one of them holding spaces, quotes and braces, and with
#      another MPI's mpiexec first on PATH (as Open MPI's is in those images) and no --mpiexec:
#      hvxrun finds MPICH's and says so. The job resumes from /opt/ml/checkpoints and finishes; the
#      weights land in algo-1's /opt/ml/model; every sample of both epochs is trained once across
#      the two runs (the sample audit); the toolkit reports success on both hosts.
#   3. the toolkit's MPI mode (sagemaker_mpi_enabled) is refused, saying what to change.
#   4. a job whose ranks fail (a hyperparameter the trainer does not know): both containers exit
#      with the ranks' status, the follower told it by the leader.
#   5. a third instance that never comes up: the leader gives up after --host-wait, and the
#      follower exits with the leader's status at once, not after its own --host-wait.
#   sagemaker_test.sh HVXRUN HVXRUN_RANK TRAIN MPIEXEC NETNS_HOSTS STAGE CONFIG MAKE_IDX TRAIN_LIB SAGEMAKER_VENV
# Needs root and sshd; where either is missing it prints SKIPPED and passes.
set -uo pipefail
for i in 1 2 3 4 5 6 7 8 9 10; do [[ -e ${!i} ]] || { echo "FAIL: argument $i (${!i}) does not exist"; exit 1; }; done
HVXRUN=$(readlink -f "$1") RANK=$(readlink -f "$2") TRAIN=$(readlink -f "$3") MPIEXEC=$(readlink -f "$4")
NETNS=$(readlink -f "$5") STAGE=$(readlink -f "$6") CONFIGS=$(dirname "$(readlink -f "$7")")
MAKE_IDX=$(readlink -f "$8") SM_VENV=$(readlink -f "${10}")
export HVX_NETNS_PREFIX=algo- HVX_SEPARATE_BOOT_ID=1
source "$(dirname "$NETNS")/lib.sh"
source "$9"  # tiny_shards, audit
source "$(dirname "$(readlink -f "$0")")/sagemaker_lib.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}

hosts_up 2
[[ -x /usr/sbin/sshd ]] || skip "sshd is not installed (Debian's openssh-server)"
toolkit=$("$SM_VENV" bin) || { echo "FAIL: the SageMaker training toolkit is not installed (tools/setup)"; exit 1; }

# ---- the image, as the Dockerfile makes it
HVXRUN=$HVXRUN HVXRUN_RANK=$RANK HVX_TRAIN=$TRAIN HVX_CONFIGS=$CONFIGS "$STAGE" "$T/image" >/dev/null &&
    "$T/image/opt/hvx/sagemaker/setup_ssh.sh" "$T/image" || { echo "FAIL: staging the image"; exit 1; }
N=240
tiny_shards "$T" mlp $N 40 10 2
cp "$T/tiny.pbtxt" "$T/image/opt/hvx/configs/"  # a config of the user's, built into the image

# ---- each host's /opt/ml, as SageMaker writes it
sagemaker_ml "$T" algo-1 algo-2

kit_args="--mpiexec $MPIEXEC --slots-per-host 2 --timeout 150 --start-timeout 30"
# Another MPI's mpiexec, as Open MPI's in AWS's images: it answers --version as Open MPI's does
# and fails the job if it is ever run.
mkdir -p "$T/openmpi/bin"
printf '#!/bin/sh\nif [ "$1" = --version ]; then echo "mpiexec (OpenRTE) 4.1.5"; exit 0; fi\necho "Open MPI mpiexec ran" >&2; exit 99\n' \
    >"$T/openmpi/bin/mpiexec"
chmod 755 "$T/openmpi/bin/mpiexec"
path=/opt/hvx/bin:/usr/local/bin:/usr/bin:/bin extra_env=()
# container HOST CMD...: CMD on HOST as SageMaker starts a container there; output in $T/HOST.out/err.
container() {
    local h=$1 args=$kit_args
    shift
    [[ $h == algo-1 && -n $leader_args ]] && args+=" $leader_args"
    timeout -k 5 180 "$NETNS" exec "$h" /bin/sh -c '
        mount -t tmpfs tmpfs /opt && mkdir -p /opt/ml /opt/hvx && mount --bind "$1/ml" /opt/ml &&
            mount --bind "$2/opt/hvx" /opt/hvx && mount --bind "$2/etc/ssh" /etc/ssh &&
            if [ -d /root/.ssh ]; then mount -t tmpfs tmpfs /root/.ssh; fi && hostname "$3" || exit 125
        shift 3
        exec "$@"' container "$T/$h" "$T/image" "ip-10-0-0-${h#algo-}" \
        env -i PATH="$path" "${extra_env[@]}" HOME=/root TRAINING_JOB_NAME="$job_name" \
        TRAINING_JOB_ARN="arn:aws:sagemaker:us-east-1:000000000000:training-job/$job_name" \
        HVXRUN_ARGS="$args" "$@" >"$T/$h.out" 2>"$T/$h.err" </dev/null
}
# SageMaker job names are unique (a restarted spot job keeps its name, on new containers with a
# /tmp of their own); these containers share one /tmp, so each job here has a name of its own.
jobs_run=0 leader_args=""
# job CMD...: CMD in both containers, algo-2's $follower_delay s after algo-1's (6 s for the first
# job, whose checks are about the leader waiting for algo-2; 1 s after it); their statuses in $rc1,
# $rc2.
follower_delay=6
job() {
    jobs_run=$((jobs_run + 1)) job_name=hvx-test-$jobs_run
    (container algo-1 "$@"; echo $? >"$T/algo-1.rc") &
    sleep "$follower_delay"
    follower_delay=1
    (container algo-2 "$@"; echo $? >"$T/algo-2.rc") &
    wait
    rc1=$(cat "$T/algo-1.rc") rc2=$(cat "$T/algo-2.rc")
}
# The containers end with their jobs: nothing of theirs (sshd) may outlive them.
end_containers() {
    local h p
    for h in algo-1 algo-2; do
        for p in $(ip netns pids "$h" 2>/dev/null); do kill "$p" 2>/dev/null; done
    done
    sleep 0.5
}
show_hosts() { for h in algo-1 algo-2; do echo "--- $h stdout"; tail -n 20 "$T/$h.out"; echo "--- $h stderr"; tail -n 40 "$T/$h.err"; done; }

# ---- 1. bring-your-own-container, stopped at step 8 of 12
hyperparameters "{\"config\": \"tiny.pbtxt\", \"sample_log\": \"$T/log\", \"max_steps\": \"8\"}"
job /opt/hvx/sagemaker/entry_point.py train
end_containers
[[ $rc1 == 0 && $rc2 == 0 ]]; check "BYOC: both containers exit 0 (algo-1 $rc1, algo-2 $rc2)" $?
grep -qF 'hvxrun: the leader algo-1 reports that the job ended with status 0' "$T/algo-2.err"
check "BYOC: algo-2 exited with the status the leader sent" $?
grep -q '^hvxrun: waiting up to 1800 s (--host-wait) for hosts to answer the remote shell: .*algo-2 (' "$T/algo-1.err"
check "BYOC: the leader waited for algo-2's sshd" $?
grep -qE '^hvxrun: host algo-2 answered after [0-9]+ s$' "$T/algo-1.err"; check "BYOC: and said when it answered" $?
grep -qF 'this host is not the leader' "$T/algo-2.err"; check "BYOC: algo-2 followed the leader" $?
# The ranks name their host by its own hostname, the container's, not its name in the job.
grep -q '^\[0\] .*hvx initialized: rank 0/4, local rank 0/2, cross rank 0/2, host ip-10-0-0-1,' "$T/algo-1.err" &&
    grep -q '^\[3\] .*hvx initialized: rank 3/4, local rank 1/2, cross rank 1/2, host ip-10-0-0-2,' "$T/algo-1.err"
check "BYOC: 4 ranks, 2 per host, rank 0 on algo-1" $?
[[ -f $T/algo-1/ml/checkpoints/ckpt-8.pt ]]; check "BYOC: the step-8 checkpoint is in algo-1's /opt/ml/checkpoints" $?
((failures == 0)) || show_hosts

# ---- 2. the restarted job, through the SageMaker training toolkit's runner
before=$failures
# The override holds spaces, quotes and braces, JSON-encoded as a Framework estimator stores it.
override='logging { log_every_steps: 1 } checkpoint { dir: "/opt/ml/checkpoints" }'
# A Framework estimator stores every value JSON-encoded (the log level as it is).
hyperparameters "$(python3 -c 'import json, sys
hps = {"config": "tiny.pbtxt", "sample_log": sys.argv[1], "override": sys.argv[2],
       "sagemaker_program": "entry_point.py", "sagemaker_submit_directory": "/opt/hvx/sagemaker",
       "sagemaker_region": "us-east-1"}
hps = {k: json.dumps(v) for k, v in hps.items()}
hps["sagemaker_container_log_level"] = "20"
print(json.dumps(hps))' "$T/log" "$override")"
rm -f "$T/algo-1/ml/model/model.pt"
saved_args=$kit_args
kit_args=${kit_args/--mpiexec $MPIEXEC /}
path=$T/openmpi/bin:/opt/hvx/bin:/usr/local/bin:/usr/bin:/bin
extra_env=(SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main)
job "$toolkit/train"
end_containers
kit_args=$saved_args path=/opt/hvx/bin:/usr/local/bin:/usr/bin:/bin extra_env=()
python3 -c 'import json, sys; print(json.loads(json.loads(open(sys.argv[1]).read())["override"]))' \
    "$T/algo-1/ml/input/config/hyperparameters.json" | grep -qxF 'logging { log_every_steps: 1 } checkpoint { dir: "/opt/ml/checkpoints" }'
check "toolkit: the job's override holds spaces, quotes and braces" $?
grep -qE "hvxrun: running MPICH's /.*mpiexec.*; the mpiexec first on PATH, $T/openmpi/bin/mpiexec, is not MPICH's" "$T/algo-1.out" "$T/algo-1.err"
check "toolkit: hvxrun ran MPICH's mpiexec, not the Open MPI one first on PATH, and said so" $?
! grep -qF "Open MPI mpiexec ran" "$T/algo-1.out" "$T/algo-1.err"; check "toolkit: the other MPI's mpiexec never ran" $?
[[ $rc1 == 0 && $rc2 == 0 ]]; check "toolkit: both containers exit 0 (algo-1 $rc1, algo-2 $rc2)" $?
grep -qE 'entry_point\.py.*--config.*tiny\.pbtxt' "$T/algo-1.out" "$T/algo-1.err"
check "toolkit: its runner started the entry point with the hyperparameters as arguments" $?
grep -q "resuming from .*/opt/ml/checkpoints/ckpt-8.pt" "$T/algo-1.out" "$T/algo-1.err"
check "toolkit: the job resumed from /opt/ml/checkpoints at step 8" $?
grep -qE '^\[0\] done: 12 steps' "$T/algo-1.out"; check "toolkit: and finished at step 12" $?
[[ -s $T/algo-1/ml/model/model.pt ]]; check "toolkit: the weights are in algo-1's /opt/ml/model" $?
[[ -f $T/algo-1/ml/output/success && -f $T/algo-2/ml/output/success ]]
check "toolkit: it reported success on both hosts" $?
audit "$T/log" 4 2 $N; check "every sample of both epochs trained once across the two runs" $?
((failures == before)) || show_hosts

# ---- 3. SageMaker's MPI mode: refused, saying what to change
hyperparameters '{"config": "tiny.pbtxt", "sagemaker_mpi_enabled": "true"}'
job_name=hvx-test-mpi
container algo-1 /opt/hvx/sagemaker/entry_point.py train
rc=$?
end_containers
[[ $rc != 0 ]] && grep -qF "Remove \`distribution\` from the estimator" "$T/algo-1.err"
check "MPI mode: refused (rc $rc), naming the fix" $?
grep -qF 'hvx initialized' "$T/algo-1.err" && { check "MPI mode: no rank started" 1; }

# ---- 4. ranks that fail: every container exits with their status
before=$failures
hyperparameters '{"config": "tiny.pbtxt", "no_such_flag": "1"}'
job /opt/hvx/sagemaker/entry_point.py train
end_containers
[[ $rc1 != 0 && $rc2 == "$rc1" ]]; check "failing ranks: both containers exit with their status (algo-1 $rc1, algo-2 $rc2)" $?
grep -qF "hvxrun: the leader algo-1 reports that the job ended with status $rc1" "$T/algo-2.err"
check "failing ranks: the leader sent algo-2 that status" $?
# SageMaker shows /opt/ml/output/failure as the job's reason: the rank, its host and its message.
grep -qE "^rank [0-9]+ on host algo-[12] .*exited with status $rc1" "$T/algo-1/ml/output/failure" &&
    grep -qF "no_such_flag" "$T/algo-1/ml/output/failure"
check "failing ranks: algo-1's /opt/ml/output/failure names the rank and why: $(head -c 300 "$T/algo-1/ml/output/failure" 2>/dev/null)" $?
[[ -s $T/algo-2/ml/output/failure ]]; check "failing ranks: algo-2 leaves a reason too" $?
((failures == before)) || show_hosts

# ---- 5. an instance that never comes up
before=$failures
for h in algo-1 algo-2; do sed -i 's/"hosts": \["algo-1", "algo-2"\]/"hosts": ["algo-1", "algo-2", "algo-3"]/' "$T/$h/ml/input/config/resourceconfig.json"; done
hyperparameters '{"config": "tiny.pbtxt"}'
leader_args="--host-wait 8"  # the follower keeps the 30 min default
start=$(date +%s)
job /opt/hvx/sagemaker/entry_point.py train
took=$(($(date +%s) - start))
end_containers
grep -q '^hvxrun: .*algo-3' "$T/algo-1.err" && [[ $rc1 != 0 && $rc2 == "$rc1" ]] && ((took < 40))
check "algo-3 never up: the leader gave up, algo-2 exited with its status in $took s (algo-1 $rc1, algo-2 $rc2)" $?
((failures == before)) || show_hosts

echo "failures: $failures"
[[ $failures == 0 ]]

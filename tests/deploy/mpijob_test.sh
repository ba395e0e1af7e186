#!/usr/bin/env bash
# The Kubernetes recipe (examples/deploy/kubernetes/mpijob.yaml) on the image it names, as the
# Kubeflow MPI Operator runs it: the manifest read with a YAML parser (mpijob_manifest.py), its
# worker command run in 2 worker containers with the operator's Secret at /root/.ssh (a key pair
# made for this run, files 0600) and the manifest's volumes, its readiness port waited for, then
# its launcher command run in a launcher container with the operator's hostfile
# (HYDRA_HOST_FILE=/etc/mpi/hostfile, "<job>-worker-<i>.<job>.<ns>.svc:<slots>") and
# K_MPI_JOB_ROLE=launcher, started before the workers' sshd listens and before its own name is in
# DNS. The workers' names are in /etc/hosts; the launcher's own name is served by a DNS server
# (dnsmasq, as the cluster's DNS publishes a pod's name once it is Ready) that learns it only
# after the launcher has started.
# Only the config and the data folder of the launcher command are the test's (a tiny MLP job
# instead of ResNet-50 on ImageNet), and one slot per worker (no GPUs); the program, hvxrun, the
# checkpoint folder and everything else are the manifest's. Then:
#   1. the job trains on both workers and the launcher exits 0; the checkpoint lands in the
#      manifest's /checkpoints/hvx-train; a second run of the launcher resumes from it;
#   2. the workers' sshd accepts the Secret's key and refuses the key baked into the image.
#   mpijob_test.sh HVXRUN HVXRUN_RANK TRAIN BUILD_IMAGE CONFIG MAKE_IDX TRAIN_LIB CONTAINERS_CONF MPIJOB_YAML MANIFEST_PY
# Needs root, podman, runc and dnsmasq; where one is missing it prints SKIPPED and passes.
set -uo pipefail
for i in 1 2 3 4 5 6 7 8 9 10; do [[ -e ${!i} ]] || { echo "FAIL: argument $i (${!i}) does not exist"; exit 1; }; done
HVXRUN=$(readlink -f "$1") RANK=$(readlink -f "$2") TRAIN=$(readlink -f "$3") BUILD_IMAGE=$(readlink -f "$4")
CONFIGS=$(dirname "$(readlink -f "$5")") MAKE_IDX=$(readlink -f "$6") MPIJOB=$(readlink -f "$9")
MANIFEST_PY=$(readlink -f "${10}")
export CONTAINERS_CONF
CONTAINERS_CONF=$(readlink -f "$8")
source "$7"  # tiny_shards, check
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
source "$(dirname "$(readlink -f "$0")")/podman_lib.sh"
podman_ready
command -v dnsmasq >/dev/null || podman_skip "dnsmasq is not installed (tools/setup installs Debian's dnsmasq-base)"

# ---- the manifest, parsed
manifest=$(python3 "$MANIFEST_PY" "$MPIJOB") || { echo "FAIL: reading $MPIJOB: $manifest"; exit 1; }
eval "$manifest"
[[ $MPI == MPICH ]]; check "mpijob.yaml: mpiImplementation MPICH (hydra's hostfile), got $MPI" $?
[[ $LAUNCHER_POLICY == WaitForWorkersReady && -n $READY_PORT ]]
check "mpijob.yaml: the launcher is created once the workers are Ready (port ${READY_PORT:-none} answers)" $?
[[ ${LAUNCHER_CMD[0]} == hvxrun && ${LAUNCHER_CMD[1]} == -- ]]
check "mpijob.yaml: the launcher runs hvxrun naming no hosts: ${LAUNCHER_CMD[*]}" $?
config_arg=-1 data_arg=-1 checkpoint_dir=""
for i in "${!LAUNCHER_CMD[@]}"; do
    case ${LAUNCHER_CMD[$i]} in
        --config=*) config_arg=$i ;;
        --data_dir=*) data_arg=$i ;;
        --override=*checkpoint*) checkpoint_dir=$(sed -nE 's/.*dir: "([^"]+)".*/\1/p' <<<"${LAUNCHER_CMD[$i]}") ;;
    esac
done
((config_arg > 0 && data_arg > 0)) && [[ -n $checkpoint_dir ]]
check "mpijob.yaml: the launcher names a config, a data folder and a checkpoint folder ($checkpoint_dir)" $?
data_mount="" checkpoint_mount=""
for m in "${WORKER_MOUNTS[@]}"; do
    case $m in
        data:*) data_mount=${m#data:} data_mount=${data_mount%:ro} ;;
        checkpoints:*) checkpoint_mount=${m#checkpoints:} ;;
    esac
done
[[ -n $data_mount && ${LAUNCHER_CMD[$data_arg]#--data_dir=} == "$data_mount"/* &&
    $checkpoint_dir == "$checkpoint_mount"/* ]]
check "mpijob.yaml: the workers mount the data ($data_mount) and the checkpoints ($checkpoint_mount) the launcher names" $?
((failures == 0)) || exit 1

# ---- the image the manifest names, from the recipe
N=240
tiny_shards "$T" mlp $N 40 10 2
mkdir -p "$T/configs"
cp "$CONFIGS"/*.pbtxt "$T/tiny.pbtxt" "$T/configs/"  # found by name in /opt/hvx/configs
image=localhost/hvx-sagemaker:mpijob-test
build_image "$BUILD_IMAGE" "$image" "$T/configs"

# ---- the operator's objects: the Secret, the hostfile, the volumes
job=hvx-train ns=default
mkdir -p "$T/secret" "$T/etc-mpi" "$T/volumes/data/tiny" "$T/volumes/checkpoints" "$T/volumes/dshm"
ssh-keygen -q -t rsa -b 3072 -N '' -C "$job" -f "$T/secret/id_rsa"
cp "$T/secret/id_rsa.pub" "$T/secret/authorized_keys"
chmod 600 "$T/secret/"*
cp "$T"/shards/* "$T/volumes/data/tiny/"
subnet=10.89.232
# The cluster's DNS: dnsmasq on the network's gateway in place of podman's own (--disable-dns),
# authoritative for cluster.local, reading the names it serves from $T/dns (read again when a file
# appears there). The pods search their job's domain, as a Kubernetes pod with a subdomain does.
podman_network hvx-mpijob-test $subnet --disable-dns
domain=$job.$ns.svc.cluster.local
mkdir -p "$T/dns"
dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-dynamic --listen-address=$subnet.1 \
    --local=/cluster.local/ --domain-needed --hostsdir="$T/dns" --log-queries --log-facility="$T/dnsmasq.log" \
    --pid-file= --user=root 2>"$T/dnsmasq.err" &
dnsmasq_pid=$!
trap 'kill $dnsmasq_pid 2>/dev/null; podman_cleanup' EXIT
hosts=(--add-host "$job-launcher.$job.$ns.svc:$subnet.10" --add-host "$job-launcher:$subnet.10")
: >"$T/etc-mpi/hostfile"
for ((w = 0; w < WORKERS; w++)); do
    hosts+=(--add-host "$job-worker-$w.$job.$ns.svc:$subnet.2$w")
    echo "$job-worker-$w.$job.$ns.svc:1" >>"$T/etc-mpi/hostfile"
done
# A pod's volumes: the workers' (the launcher gets the same here), and the Secret.
pod_mounts=()
for m in "${WORKER_MOUNTS[@]}"; do
    IFS=: read -r name path ro <<<"$m"
    [[ $name == dshm ]] && continue  # --shm-size stands for the memory emptyDir
    pod_mounts+=(-v "$T/volumes/$name:$path${ro:+:$ro}")
done
pod_mounts+=(-v "$T/secret:/root/.ssh:ro")

# ---- the launcher, as the manifest's launcher command (the test's config and data folder)
cmd=("${LAUNCHER_CMD[@]}")
cmd[config_arg]=--config=tiny.pbtxt
cmd[data_arg]=--data_dir=$data_mount/tiny
launcher() {  # launcher NAME: runs the launcher pod to its end; output in $T/NAME.{out,err}, status in $rc
    podman run --name "hvxct-$1" --hostname "$job-launcher" --network "$podman_net" --ip "$subnet.10" \
        --dns "$subnet.1" --dns-search "$domain" "${hosts[@]}" "${pod_mounts[@]}" -v "$T/etc-mpi:/etc/mpi:ro" \
        -e K_MPI_JOB_ROLE=launcher -e HYDRA_HOST_FILE=/etc/mpi/hostfile \
        -e HYDRA_LAUNCH_EXTRA_ARGS="-o ConnectionAttempts=10" \
        --entrypoint "${cmd[0]}" "$image" "${cmd[@]:1}" >"$T/$1.out" 2>"$T/$1.err" </dev/null
    rc=$?
    echo "$rc" >"$T/$1.rc"
    podman rm -f "hvxct-$1" >/dev/null 2>&1
}
show() { echo "--- $1 stdout"; tail -n 20 "$T/$1.out"; echo "--- $1 stderr"; tail -n 40 "$T/$1.err"; }
# The first launcher starts before any worker's sshd listens (a worker rescheduled, or an image
# still being pulled): hvxrun waits for them (--host-wait) instead of failing.
launcher launch1 &
launcher_pid=$!
# said PATTERN: waits up to 60 s, while the first launcher runs, for a line of its stderr.
said() {
    local i
    for ((i = 0; i < 600; i++)); do
        grep -qE "$1" "$T/launch1.err" 2>/dev/null && return 0
        kill -0 $launcher_pid 2>/dev/null || break
        sleep 0.1
    done
    grep -qE "$1" "$T/launch1.err"
}
# The launcher's own name enters DNS once hvxrun has said it waits for it (the pod turned Ready).
said '^hvxrun: waiting up to [0-9]+ s \(--host-wait\) for hosts to resolve in DNS: '"$job-launcher"' \(not in DNS: Unknown host\)'
check "the launcher waits for its own name in DNS, saying so" $?
echo "$subnet.10 $job-launcher.$domain" >"$T/dns/launcher"
# Then it waits for the workers, which start once it says so.
worker_wait='^hvxrun: waiting up to [0-9]+ s \(--host-wait\) for hosts to answer the remote shell'
said "$worker_wait"
grep -qE "^hvxrun: host $job-launcher answered after [0-9]+ s" "$T/launch1.err"
check "it goes on once the name resolves" $?
# Otherwise the launcher would wait out its --host-wait: end it and fail here.
((failures == 0)) || {
    tail -n 5 "$T/launch1.err" "$T/dnsmasq.log" "$T/dnsmasq.err"
    podman rm -f -t 0 hvxct-launch1 >/dev/null 2>&1
    exit 1
}

# ---- the workers, as the manifest's worker command
for ((w = 0; w < WORKERS; w++)); do
    podman run -d --name "hvxct-worker-$w" --hostname "$job-worker-$w" --network "$podman_net" \
        --ip "$subnet.2$w" "${hosts[@]}" "${pod_mounts[@]}" --shm-size 256m -e K_MPI_JOB_ROLE=worker \
        --entrypoint "${WORKER_CMD[0]}" "$image" "${WORKER_CMD[@]:1}" >/dev/null ||
        { echo "FAIL: starting worker $w"; exit 1; }
done
ready=0
for ((i = 0; i < 60 && ready < WORKERS; i++)); do
    ready=0
    for ((w = 0; w < WORKERS; w++)); do
        timeout 1 bash -c ">/dev/tcp/$subnet.2$w/$READY_PORT" 2>/dev/null && ready=$((ready + 1))
    done
    ((ready == WORKERS)) || sleep 0.5
done
[[ $ready == "$WORKERS" ]]; check "the workers are Ready: their port $READY_PORT answers ($ready of $WORKERS)" $?
((failures == 0)) || { for ((w = 0; w < WORKERS; w++)); do podman logs "hvxct-worker-$w" 2>&1 | tail -5; done; exit 1; }

wait "$launcher_pid"
rc=$(cat "$T/launch1.rc")
check "the launcher, started before the workers, exits 0 (rc $rc)" $rc
grep -qE "$worker_wait" "$T/launch1.err"
check "it waited for the workers' sshd, saying so" $?
grep -q "^\[0\] .*hvx initialized: rank 0/2, local rank 0/1, cross rank 0/2, host $job-worker-0," "$T/launch1.err" &&
    grep -q "^\[1\] .*hvx initialized: rank 1/2, local rank 0/1, cross rank 1/2, host $job-worker-1," "$T/launch1.err"
check "one rank on each worker, started by the launcher over ssh" $?
# Both workers mount one volume, so checkpoint.format AUTO has each write its shard of a directory.
compgen -G "$T/volumes/checkpoints/${checkpoint_dir#"$checkpoint_mount"/}/ckpt-*/index.json" >/dev/null &&
    grep -q "checkpoint.format AUTO: SHARDED" "$T/launch1.err"
check "the checkpoint is in the manifest's $checkpoint_dir, a shard from each worker" $?
((failures == 0)) || show launch1
launcher launch2
[[ $rc == 0 ]] && grep -qE "the run in $checkpoint_dir is already complete|resuming from $checkpoint_dir/ckpt-" "$T/launch2.out" "$T/launch2.err"
check "the launcher started again continues from $checkpoint_dir (rc $rc)" $?
((rc == 0)) || show launch2

# ---- ssh: the job's key from the Secret, never the image's
probe() {  # probe KEY_ARGS...: ssh from a pod of the job to worker 0 with only the given key
    podman run --rm --network "$podman_net" "${hosts[@]}" -v "$T/secret:/secret:ro" --entrypoint ssh "$image" \
        -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o IdentitiesOnly=yes -o IdentityAgent=none -o ConnectTimeout=10 "$@" \
        "root@$job-worker-0.$job.$ns.svc" true </dev/null >/dev/null 2>&1
}
probe -i /secret/id_rsa; check "a worker accepts the Secret's key" $?
probe -i /etc/ssh/hvx_job_key; rc=$?
[[ $rc == 255 ]]; check "a worker refuses the key baked into the image (ssh rc $rc)" $?

echo "failures: $failures"
[[ $failures == 0 ]]

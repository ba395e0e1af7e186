#!/usr/bin/env bash
# Several "hosts" on one machine for launcher tests: each host is a network namespace with its
# own address and, when entered, its own UTS hostname and /etc/hosts.
#
#   netns_hosts.sh up N        hosts hvxtN1..: netns with eth0 = 10.78.0.I/24 on a bridge that
#                               lives in its own "switch" namespace; the root namespace is untouched
#   netns_hosts.sh exec H CMD  run CMD on host H (name, user@name or IP)
#   netns_hosts.sh fakessh [ssh options] H CMD...
#                               ssh stand-in for --launcher-exec: runs "CMD..." with sh on host H
#                               in a fresh login-like environment, as sshd would
#   netns_hosts.sh sshd        start a real sshd (openssh-server) on every host, listening on its
#                               address, and make $STATE/ssh, an ssh client for them (its key, no
#                               host key checks, BatchMode): --launcher-exec "$STATE/ssh" reaches
#                               the hosts over their network, so cutting a host's link cuts its
#                               sessions too, as on a real cluster
#   netns_hosts.sh cut H       take host H's switch port down (its link is cut, nothing is told)
#   netns_hosts.sh pod H NAME  start "pod" NAME on host H, as Kubernetes runs a hostNetwork pod:
#                               H's network and host name, its own /dev/shm (a tmpfs), pid and IPC
#                               namespaces; NAME resolves to H's address, and exec/fakessh NAME
#                               run commands inside it
#   netns_hosts.sh down        kill what runs in those namespaces (by PID) and delete them
# `up` makes $STATE/fakessh, a link to this script that behaves as `fakessh`.
# HVX_SEPARATE_BOOT_ID=1 gives each host its own /proc/sys/kernel/random/boot_id. UCX decides from
# the boot id whether two processes share a machine: with one id (the default) it moves data between
# these hosts through shared memory; with separate ids over TCP on eth0, as between real hosts.
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), iproute2 and util-linux.
set -euo pipefail
STATE=${HVX_NETNS_STATE:-/tmp/hvx-netns-test}
NET=${HVX_NETNS_NET:-10.78.0}
NSP=${HVX_NETNS_PREFIX:-hvxt}
SELF=$(readlink -f "${BASH_SOURCE[0]}")

die() { echo "netns_hosts: $*" >&2; exit 1; }
count() { cat "$STATE/count" 2>/dev/null || echo 0; }

ns_of() {
    local h=${1#*@} i
    for ((i = 1; i <= $(count); i++)); do
        if [[ $h == "${NSP}$i" || $h == "$NET.$i" ]]; then echo "${NSP}$i"; return 0; fi
    done
    return 1
}

up() {
    local n=$1 i
    mkdir -p "$STATE"
    echo "$n" >"$STATE/count"
    ln -sf "$SELF" "$STATE/fakessh"
    for ((i = 1; i <= n; i++)); do cat /proc/sys/kernel/random/uuid >"$STATE/boot_id.${NSP}$i"; done
    { echo "127.0.0.1 localhost"; for ((i = 1; i <= n; i++)); do echo "$NET.$i ${NSP}$i"; done; } \
        >"$STATE/hosts"
    trap 'down >/dev/null 2>&1' EXIT
    ip netns add "${NSP}sw"
    ip -n "${NSP}sw" link add br0 type bridge
    ip -n "${NSP}sw" link set br0 up
    for ((i = 1; i <= n; i++)); do
        ip netns add "${NSP}$i"
        ip -n "${NSP}$i" link set lo up
        ip -n "${NSP}$i" link add eth0 type veth peer name "p$i" netns "${NSP}sw"
        ip -n "${NSP}$i" addr add "$NET.$i/24" dev eth0
        ip -n "${NSP}$i" link set eth0 up
        ip -n "${NSP}sw" link set "p$i" master br0
        ip -n "${NSP}sw" link set "p$i" up
    done
    # Reachability without ping: a TCP connect to a closed port that is refused got an answer.
    for ((i = 2; i <= n; i++)); do
        local t ok=0
        for t in $(seq 20); do
            local answer
            answer=$(ip netns exec "${NSP}1" timeout 2 bash -c ": </dev/tcp/$NET.$i/9" 2>&1 || true)
            if [[ $answer == *refused* ]]; then ok=1; break; fi
            sleep 0.2
        done
        [[ $ok == 1 ]] || die "${NSP}1 cannot reach $NET.$i"
    done
    trap - EXIT
}

down() {
    local ns pids
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NSP}([0-9]+|sw)$" || true); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        if [[ -n $pids ]]; then
            kill -TERM $pids 2>/dev/null || true
            sleep 0.3
            pids=$(ip netns pids "$ns" 2>/dev/null || true)
            [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$STATE"
}

sshd_up() {
    [[ -x /usr/sbin/sshd ]] || die "sshd is not installed (Debian's openssh-server)"
    local i ns
    mkdir -p /run/sshd  # sshd's privilege separation directory; the package makes it at boot
    rm -f "$STATE"/ssh_host_key* "$STATE"/id_ed25519*
    ssh-keygen -q -t ed25519 -N '' -f "$STATE/ssh_host_key"
    ssh-keygen -q -t ed25519 -N '' -f "$STATE/id_ed25519"
    cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
    printf 'Host *\n    IdentityFile %s\n    UserKnownHostsFile /dev/null\n    StrictHostKeyChecking no\n    BatchMode yes\n    ConnectTimeout 5\n    LogLevel ERROR\n' \
        "$STATE/id_ed25519" >"$STATE/ssh_config"
    printf '#!/bin/sh\nexec ssh -F "%s" "$@"\n' "$STATE/ssh_config" >"$STATE/ssh"
    chmod +x "$STATE/ssh"
    for ((i = 1; i <= $(count); i++)); do
        ns=${NSP}$i
        printf '%s\n' "ListenAddress $NET.$i:22" "HostKey $STATE/ssh_host_key" \
            "AuthorizedKeysFile $STATE/authorized_keys" "PidFile $STATE/sshd.$ns.pid" \
            "PermitRootLogin prohibit-password" "PasswordAuthentication no" \
            "KbdInteractiveAuthentication no" "UsePAM no" "StrictModes no" "LogLevel ERROR" \
            >"$STATE/sshd_config.$ns"
        (run_on "$ns" /usr/sbin/sshd -f "$STATE/sshd_config.$ns" -E "$STATE/sshd.$ns.log") ||
            die "sshd did not start on $ns: $(cat "$STATE/sshd.$ns.log" 2>/dev/null)"
    done
    for ((i = 1; i <= $(count); i++)); do
        local t ok=0
        for t in $(seq 50); do
            if [[ $( (run_on "${NSP}1" "$STATE/ssh" "${NSP}$i" hostname) 2>/dev/null) == "${NSP}$i" ]]; then
                ok=1
                break
            fi
            sleep 0.1
        done
        [[ $ok == 1 ]] || die "sshd on ${NSP}$i does not answer: $(cat "$STATE/sshd.${NSP}$i.log" 2>/dev/null)"
    done
}

pod_up() {
    local ns name=$2 addr started i
    ns=$(ns_of "$1") || die "unknown host '$1'"
    [[ $name =~ ^[a-z][a-z0-9-]*$ && ! -e $STATE/pod.$name.pid ]] || die "bad or taken pod name '$name'"
    addr=$(awk -v h="$ns" '$2 == h {print $1}' "$STATE/hosts")
    echo "$addr $name" >>"$STATE/hosts" # in place: the hosts' bind mounts see it
    # unshare --fork: the shell is pid 1 of the pod's namespace; --kill-child ends it with unshare.
    ip netns exec "$ns" unshare --uts --ipc --mount --pid --fork --kill-child -- /bin/sh -c \
        'hostname "$1" && mount --bind "$2" /etc/hosts && mount -t proc proc /proc &&
         mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm || exit 125
         if [ "$3" = 1 ]; then mount --bind "$4" /proc/sys/kernel/random/boot_id || exit 125; fi
         : >"$5"; exec sleep infinity' \
        hvx-pod "$ns" "$STATE/hosts" "${HVX_SEPARATE_BOOT_ID:-0}" "$STATE/boot_id.$ns" \
        "$STATE/pod.$name.ready" </dev/null >/dev/null 2>"$STATE/pod.$name.log" &
    started=$!
    for i in $(seq 100); do
        [[ -e $STATE/pod.$name.ready ]] && break
        kill -0 "$started" 2>/dev/null || break
        sleep 0.05
    done
    [[ -e $STATE/pod.$name.ready ]] || die "pod $name did not start: $(cat "$STATE/pod.$name.log")"
    local init
    init=$(cat "/proc/$started/task/$started/children" 2>/dev/null) && [[ $init =~ ^[0-9]+\ ?$ ]] ||
        die "pod $name has no init (unshare $started)"
    echo "${init% }" >"$STATE/pod.$name.pid"
}

run_on() {
    local ns
    if [[ -f $STATE/pod.${1#*@}.pid ]]; then
        local init
        init=$(cat "$STATE/pod.${1#*@}.pid")
        shift
        # -p forks: the command is in the pod's pid namespace, and ends (SIGKILL) if nsenter does,
        # as a remote command ends with its ssh session.
        exec nsenter -t "$init" -n -u -i -m -p -- setpriv --pdeathsig KILL -- "$@"
    fi
    ns=$(ns_of "$1") || die "unknown host '$1'"
    shift
    # `ip netns exec` gives a private mount namespace, so the bind mount stays inside it.
    exec ip netns exec "$ns" unshare --uts -- /bin/sh -c \
        'hostname "$1" && mount --bind "$2" /etc/hosts || exit 125
         if [ "$3" = 1 ]; then mount --bind "$4" /proc/sys/kernel/random/boot_id || exit 125; fi
         shift 4; exec "$@"' \
        hvx-host "$ns" "$STATE/hosts" "${HVX_SEPARATE_BOOT_ID:-0}" "$STATE/boot_id.$ns" "$@"
}

fakessh() {
    while [[ $# -gt 0 && $1 == -* ]]; do
        case $1 in -o | -p | -l | -i | -F) shift 2 ;; *) shift ;; esac
    done
    local host=$1
    shift
    run_on "$host" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/sh \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HVX_NETNS_STATE="$STATE" HVX_NETNS_NET="$NET" HVX_NETNS_PREFIX="$NSP" \
        HVX_SEPARATE_BOOT_ID="${HVX_SEPARATE_BOOT_ID:-0}" /bin/sh -c "$*"
}

if [[ $(basename "$0") == fakessh ]]; then fakessh "$@"; fi
cmd=${1:-}
shift || true
case $cmd in
    up) up "${1:-2}" ;;
    down) down ;;
    exec) run_on "$@" ;;
    fakessh) fakessh "$@" ;;
    sshd) sshd_up ;;
    cut) ip -n "${NSP}sw" link set "p${1#"$NSP"}" down ;;
    pod) pod_up "$@" ;;
    *) sed -n '2,26p' "$SELF"; exit 2 ;;
esac

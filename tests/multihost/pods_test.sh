#!/usr/bin/env bash
# Two "pods" on one namespace host, as Kubernetes runs two hostNetwork pods on one node: one
# network and one host name, but each pod with its own /dev/shm, pid and IPC namespaces
# (netns_hosts.sh pod). They are two hosts to hvx: local ranks and the shared-memory plane per pod,
# host names hvxu1 and hvxu1#2, and the CPU allreduce gives the bits of one pod x 4 ranks.
# Grouped by host name alone, the four ranks were one host whose shared-memory plane could not map
# the other pod's regions.
#   pods_test.sh HVXRUN HVX_INFO PLANE_PROBE MPIEXEC NETNS_HOSTS
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
INFO=$(readlink -f "$2")
PROBE=$(readlink -f "$3")
MPIEXEC=$(readlink -f "$4")
NETNS=$(readlink -f "$5")
export HVX_NETNS_PREFIX=hvxu
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v nsenter >/dev/null || skip "nsenter (util-linux) is not installed"

hosts_up 1
"$NETNS" pod hvxu1 pod-a && "$NETNS" pod hvxu1 pod-b || { echo "FAIL: could not start the pods"; exit 1; }

# What makes them pods of one node: the same host name and boot id, their own /dev/shm and pids.
seen() { "$NETNS" exec "$1" /bin/sh -c 'echo "$(hostname) $(cat /proc/sys/kernel/random/boot_id) $(stat -c %d /dev/shm) $(readlink /proc/self/ns/pid)"'; }
a=($(seen pod-a)) b=($(seen pod-b))
[[ ${a[0]} == hvxu1 && ${b[0]} == hvxu1 && ${a[1]} == "${b[1]}" && -n ${a[2]} && ${a[2]} != "${b[2]}" &&
    ${a[3]} != "${b[3]}" ]]
check "the pods share the host name and boot id, not /dev/shm (${a[2]}, ${b[2]}) or pids (${a[3]}, ${b[3]})" $?

# The launcher's remote shell starts each pod's ranks inside that pod (not forked on the host whose
# address the pod names share).
launch -np 2 -H pod-a:1,pod-b:1 -- /bin/sh -c 'echo "in $(stat -c %d /dev/shm) $(readlink /proc/self/ns/pid)"'
[[ $rc == 0 ]] && grep -qxF "[0] in ${a[2]} ${a[3]}" <<<"$out" && grep -qxF "[1] in ${b[2]} ${b[3]}" <<<"$out"
check "each pod's rank runs in that pod's /dev/shm and pid namespace" $?
[[ $rc == 0 ]] || show

digests() { grep -oE 'rank [0-9]+ digest [0-9a-f]+' <<<"$out" | awk '{print $4}' | sort -u; }

launch -np 4 -H pod-a:4 -x HVX_CPU_PLANE=shm -- "$PROBE"
one=$(digests)
[[ $rc == 0 && $(count_lines "$out" 'digest') == 4 && $(wc -l <<<"$one") == 1 ]]
check "1 pod x 4, shm: rc 0, every rank the same digest ($one)" $?
[[ $rc == 0 ]] || show

launch -np 4 -H pod-a:2,pod-b:2 -- "$INFO" --check
check "2 pods x 2: hvx_info --check exits 0 (rc=$rc)" $((rc != 0))
for r in 0 1 2 3; do
    host=hvxu1
    ((r >= 2)) && host='hvxu1#2'
    want="^\\[$r\\] \\{\"rank\":$r,\"size\":4,\"local_rank\":$((r % 2)),\"local_size\":2,\"cross_rank\":$((r / 2)),\"cross_size\":2,\"homogeneous\":true,\"host\":\"$host\",\"pid\":[0-9]+,\"visible_gpus\":[0-9]+,\"check\":\"pass\"\\}$"
    grep -qE "$want" <<<"$out"
    check "rank $r: local rank $((r % 2)) of 2 in its pod, host $host" $?
done
[[ $rc == 0 ]] || show

launch -np 4 -H pod-a:2,pod-b:2 -x HVX_CPU_PLANE=shm -x HVX_LOG_LEVEL=debug -- "$PROBE"
two=$(digests)
[[ $rc == 0 && $(count_lines "$out" 'digest') == 4 && "$two" == "$one" ]]
check "2 pods x 2, shm: the same bits as 1 pod x 4 ($two)" $?
[[ $rc == 0 ]] || show
grep -qE '^\[0\] .*CPU allreduce through shared memory: 2 host\(s\) x 2 rank\(s\)' <<<"$err"
check "the shared-memory plane spans each pod only: 2 hosts x 2 ranks" $?

for p in pod-a pod-b; do
    left=$("$NETNS" exec "$p" /bin/sh -c 'ls /dev/shm | grep -c "^hvx\."')
    [[ $left == 0 ]]; check "nothing left in $p's /dev/shm ($left hvx entries)" $?
done
echo "failures: $failures"
[[ $failures == 0 ]]

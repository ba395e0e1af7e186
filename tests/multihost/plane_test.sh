#!/usr/bin/env bash
# The shared-memory CPU plane across namespace hosts: 2 hosts x 2 ranks give the same bits as
# 1 host x 4 (each element is folded in global rank order on either layout), the time between
# hosts is reported, and a rank killed mid-allreduce or while creating its region ends the job with
# nothing left in /dev/shm.
#   plane_test.sh HVXRUN PLANE_PROBE MPIEXEC NETNS_HOSTS
# With HVX_SEPARATE_BOOT_ID=1 the hosts have their own boot ids and MPI connects them over TCP.
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
PROBE=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
export HVX_NETNS_PREFIX=hvxp
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

hosts_up 2
shm_left() { ls /dev/shm 2>/dev/null | grep -cE '^hvx\.'; }
before=$(shm_left)

digests() { grep -oE 'rank [0-9]+ digest [0-9a-f]+' <<<"$out" | awk '{print $4}' | sort -u; }

launch -np 4 -H hvxp1:4 -x HVX_CPU_PLANE=shm -x HVX_LOG_LEVEL=debug -- "$PROBE"
one=$(digests)
[[ $rc == 0 && $(count_lines "$out" 'digest') == 4 && $(wc -l <<<"$one") == 1 ]]
check "1 host x 4, shm: rc 0, every rank the same digest ($one)" $?
[[ $rc == 0 ]] || show

launch -np 4 -H hvxp1:2,hvxp2:2 -x HVX_CPU_PLANE=shm -x HVX_LOG_LEVEL=debug -- "$PROBE"
two=$(digests)
[[ $rc == 0 && $(count_lines "$out" 'digest') == 4 && "$two" == "$one" ]]
check "2 hosts x 2, shm: the same bits as 1 host x 4 ($two)" $?
[[ $rc == 0 ]] || show
grep -E 'CPU allreduce through shared memory: [0-9]+ calls' <<<"$err" | sed 's/^/    /'
count_lines "$err" 'of which [0-9.]+ ms between hosts' | grep -q '^4$'
check "every rank reports its time between hosts" $?

launch -np 4 -H hvxp1:2,hvxp2:2 -x HVX_LOG_LEVEL=debug -- "$PROBE"
[[ $rc == 0 && "$(digests)" == "$one" ]] && grep -q 'through shared memory' <<<"$err"
check "2 hosts x 2, HVX_CPU_PLANE unset: auto takes shared memory" $?
[[ $rc == 0 ]] || show

launch -np 4 -H hvxp1:2,hvxp2:2 -x HVX_CPU_PLANE=mpi -- "$PROBE"
[[ $rc == 0 && $(count_lines "$out" 'digest') == 4 && $(digests | wc -l) == 1 ]]
check "2 hosts x 2, mpi plane: rc 0, every rank the same digest" $?
[[ $rc == 0 ]] || show

# A rank killed between publishing and folding: its peers on the host see it gone, the job stops.
launch -np 4 -H hvxp1:2,hvxp2:2 -x HVX_CPU_PLANE=shm -x HVX_ALLOW_FAILPOINTS=1 -x HVX_FAILPOINT=allreduce:3:kill -- "$PROBE"
[[ $rc != 0 && $elapsed_ms -lt 15000 ]]
check "rank 3 killed mid-allreduce: the job fails (rc=$rc) within 15 s (${elapsed_ms} ms)" $?
grep -qF "hvx failpoint allreduce: rank 3 kill" <<<"$err"; check "the failpoint fired" $?
[[ $rc != 0 ]] || show
sleep 1
left=$(shm_left)
[[ $left == "$before" ]]; check "nothing left in /dev/shm ($left hvx entries, $before before)" $?

# A rank killed inside the plane's set-up, its region created under its name but not yet mapped by
# its peer (the name is only unlinked once both have): the rank wrapper removes what it left.
launch -np 4 -H hvxp1:2,hvxp2:2 -x HVX_CPU_PLANE=shm -x HVX_ALLOW_FAILPOINTS=1 -x HVX_FAILPOINT=shm_create:3:kill -- "$PROBE"
[[ $rc != 0 ]] && grep -qF "hvx failpoint shm_create: rank 3 kill" <<<"$err"
check "rank 3 killed creating its region: the job fails (rc=$rc)" $?
[[ $rc != 0 ]] || show
sleep 1
left=$(shm_left)
[[ $left == "$before" ]]; check "nothing left in /dev/shm after it ($left hvx entries, $before before)" $?

no_processes_left hvxp1 hvxp2
echo "failures: $failures"
[[ $failures == 0 ]]

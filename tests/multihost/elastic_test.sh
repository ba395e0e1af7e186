#!/usr/bin/env bash
# Elastic jobs (hvxrun --max-restarts) on 3 namespace hosts x 2 slots: a host whose rank fails is
# excluded and the job restarts on the others with the same HVX_RUN_ID and the next
# HVX_RESTART_COUNT; --min-np refuses a plan that is too small; --host-failure-limit lets a host
# fail that many times first; a job that keeps failing gives up after --max-restarts; a discovery
# script read at the restart grows the job.
#   elastic_test.sh HVXRUN MPIEXEC NETNS_HOSTS
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
MPIEXEC=$(readlink -f "$2")
NETNS=$(readlink -f "$3")
export HVX_NETNS_PREFIX=hvxe
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}

hosts_up 3
# The program: on FAIL_HOST it exits 7 while HVX_RESTART_COUNT < FAIL_UNTIL; every rank that runs
# prints one line. It fails after a second, as a job does once started: a rank failing within
# its first moments can leave hydra proxies behind on other hosts (see hvx/launch/README.md).
probe='h=$(hostname)
if [ "$h" = "$FAIL_HOST" ] && [ "$HVX_RESTART_COUNT" -lt "$FAIL_UNTIL" ]; then sleep 1; echo "failing on $h" >&2; exit 7; fi
sleep 1.5; echo "rank=$HVX_RANK size=$HVX_SIZE host=$h restart=$HVX_RESTART_COUNT run=$HVX_RUN_ID"'
job() {  # job FAIL_HOST FAIL_UNTIL HVXRUN_FLAGS...
    local host=$1 until=$2
    shift 2
    launch -x FAIL_HOST="$host" -x FAIL_UNTIL="$until" "$@" -- /bin/sh -c "$probe"
}
lines_of() { grep -cE "restart=$1 " <<<"$out"; }

# ---- a failing host is excluded; the job finishes on the others
job hvxe3 1 -H hvxe1:2,hvxe2:2,hvxe3:2 --max-restarts 2
[[ $rc == 0 ]]; check "--max-restarts 2, host hvxe3 failing once: the job ends rc 0 (rc=$rc)" $?
grep -qE 'hvxrun: restart 1 of 2: rank [45] on host hvxe3 exited with status 7; excluded hvxe3 \(1 failure\); new plan: np 4 on hvxe1:2,hvxe2:2$' <<<"$err"
check "one restart line: attempt, cause, excluded host, new plan" $?
[[ $(lines_of 1) == 4 ]] && ! grep -q 'restart=1 run=.*host=hvxe3\|host=hvxe3 restart=1' <<<"$out"
check "the restarted job ran 4 ranks, none on hvxe3" $?
[[ $(grep -oE 'run=[0-9a-f]+' <<<"$out" | sort -u | wc -l) == 1 && $(grep -cE 'size=4 ' <<<"$out") == 4 ]]
check "every rank of both attempts saw one HVX_RUN_ID; the restart has HVX_SIZE 4" $?
[[ $rc == 0 ]] || show

# ---- --min-np: too few slots left
job hvxe3 1 -H hvxe1:2,hvxe2:2,hvxe3:2 --max-restarts 2 --min-np 5
[[ $rc == 7 ]] && grep -qF 'hvxrun: cannot restart: only 4 usable slots on hvxe1:2,hvxe2:2, fewer than --min-np 5; excluded: hvxe3 (rank' <<<"$err"
check "--min-np 5: no restart on 4 slots, the failure's status (rc=$rc), the excluded host named" $?

# ---- --host-failure-limit 2: hvxe3 fails twice before it is excluded
job hvxe3 2 -H hvxe1:2,hvxe2:2,hvxe3:2 --max-restarts 3 --host-failure-limit 2
[[ $rc == 0 ]] && grep -qE 'restart 1 of 3: .*excluded none; new plan: np 6 on hvxe1:2,hvxe2:2,hvxe3:2$' <<<"$err" &&
    grep -qE 'restart 2 of 3: .*excluded hvxe3 \(2 failures\); new plan: np 4 on hvxe1:2,hvxe2:2$' <<<"$err"
check "--host-failure-limit 2: kept after one failure, excluded after two, then done (rc=$rc)" $?
[[ $rc == 0 ]] || show

# ---- a host that keeps failing: give up after --max-restarts
job hvxe2 9 -H hvxe1:2,hvxe2:2,hvxe3:2 --max-restarts 1 --host-failure-limit 9
[[ $rc == 7 ]] && grep -qE 'hvxrun: giving up after 1 restart \(--max-restarts 1\): rank [23] on host hvxe2 exited with status 7' <<<"$err"
check "a host that keeps failing: hvxrun gives up after 1 restart with its status (rc=$rc)" $?

# ---- discovery: the script lists 2 hosts at the start and 3 at the restart
printf '#!/bin/sh\nn=$(cat %s/calls 2>/dev/null || echo 0); echo $((n + 1)) > %s/calls\necho hvxe1:2; echo hvxe2:2\n[ "$n" -ge 1 ] && echo hvxe3:2\nexit 0\n' "$T" "$T" >"$T/discover.sh"
chmod +x "$T/discover.sh"
rm -f "$T/calls"
job hvxe1 1 --host-discovery-script "$T/discover.sh" --max-restarts 1 --host-failure-limit 9
[[ $rc == 0 && $(lines_of 1) == 6 ]] && grep -qE 'new plan: np 6 on hvxe1:2,hvxe2:2,hvxe3:2$' <<<"$err"
check "discovery: 4 ranks at the start, 6 after the restart on the host that appeared (rc=$rc)" $?
[[ $rc == 0 ]] || show

# ---- a host that dies: every process on hvxe3 ends at once and the host is gone (its namespace
# deleted, so the remote shell cannot reach it). hydra ends the whole job without any rank's exit
# status; hvxrun finds the host that does not answer, excludes it and restarts on the others.
launch_bg -H hvxe1:2,hvxe2:2,hvxe3:2 --max-restarts 1 -- \
    /bin/sh -c 'sleep 3; echo "rank=$HVX_RANK size=$HVX_SIZE host=$(hostname) restart=$HVX_RESTART_COUNT "'
sleep 1.5
kill -KILL $(ip netns pids hvxe3) 2>/dev/null
ip netns del hvxe3
finish
[[ $rc == 0 && $(lines_of 1) == 4 ]] &&
    grep -qE 'hvxrun: restart 1 of 1: mpiexec ended before the ranks reported their exit; host hvxe3 does not answer; excluded hvxe3 \(1 failure\); new plan: np 4 on hvxe1:2,hvxe2:2$' <<<"$err"
check "a host that died: found by the remote shell, excluded, the job done on 4 ranks (rc=$rc, ${elapsed_ms} ms)" $?
[[ $rc == 0 ]] || show

no_processes_left hvxe1 hvxe2
echo "failures: $failures"
[[ $failures == 0 ]]

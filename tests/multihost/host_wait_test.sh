#!/usr/bin/env bash
# --host-wait against a real sshd, as when SageMaker or an MPIJob starts the hosts minutes apart:
# host 2's sshd is down when hvxrun starts on host 1 and comes up a few seconds later, then host 2's
# name does not resolve for a few seconds. With --host-wait 30 hvxrun says it is waiting, says when
# host 2 answered, and the job runs (rc 0, both ranks); with --host-wait 2 and host 2 never up it
# fails after the bound, naming the host and ssh's reason, and starts no rank. Without --host-wait
# the same job fails without waiting for the host (the default for -H: the hosts are taken to be
# up), at --start-timeout.
#   host_wait_test.sh HVXRUN HVX_INFO MPIEXEC NETNS_HOSTS
# Needs root and sshd (openssh-server); where either is missing it prints SKIPPED and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
INFO=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
export HVX_NETNS_PREFIX=hvxw
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

hosts_up 2
[[ -x /usr/sbin/sshd ]] || skip "sshd is not installed (Debian's openssh-server)"
"$NETNS" sshd || { echo "FAIL: could not start sshd on the hosts"; exit 1; }
launcher_exec=$HVX_NETNS_STATE/ssh

sshd_down() {
    local pidfile=$HVX_NETNS_STATE/sshd.hvxw2.pid p i
    p=$(cat "$pidfile")
    kill "$p"
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    ! kill -0 "$p" 2>/dev/null
}
sshd_start() {
    "$NETNS" exec hvxw2 /usr/sbin/sshd -f "$HVX_NETNS_STATE/sshd_config.hvxw2" \
        -E "$HVX_NETNS_STATE/sshd.hvxw2.log"
}
ranks_ok() { [[ $(grep -cE '^\[[01]\] \{"rank":[01],"size":2,.*"check":"pass"\}$' <<<"$out") == 2 ]]; }

# ---- host 2 comes up 4 s after the launch
sshd_down; check "sshd on hvxw2 stopped" $?
launch_bg -np 2 -H hvxw1:1,hvxw2:1 --host-wait 30 -- "$INFO" --check
sleep 4
sshd_start; check "sshd on hvxw2 started again" $?
finish
((rc == 0)); check "the job ran once hvxw2 answered (rc $rc)" $?
ranks_ok; check "both ranks passed hvx_info --check" $?
grep -q "^hvxrun: waiting up to 30 s (--host-wait) for hosts to answer the remote shell: hvxw2 (" <<<"$err"
check "hvxrun said which host it waits for" $?
grep -qE "^hvxrun: host hvxw2 answered after [0-9]+ s$" <<<"$err"
check "hvxrun said when hvxw2 answered" $?
((elapsed_ms >= 4000)); check "the job waited for hvxw2 (${elapsed_ms} ms)" $?
((failures == 0)) || show

# ---- host 2's name does not resolve for 4 s (an MPIJob's worker pod not created yet); every host
# sees the hosts file through a bind mount, so it is rewritten in place
hosts=$HVX_NETNS_STATE/hosts
cp "$hosts" "$hosts.full"
grep -v ' hvxw2$' "$hosts.full" >"$hosts.short"
cat "$hosts.short" >"$hosts"
launch_bg -np 2 -H hvxw1:1,hvxw2:1 --host-wait 30 -- "$INFO" --check
sleep 4
cat "$hosts.full" >"$hosts"
finish
((rc == 0)); check "the job ran once hvxw2's name resolved (rc $rc)" $?
ranks_ok; check "both ranks passed hvx_info --check" $?
grep -q "^hvxrun: waiting up to 30 s (--host-wait) for hosts to answer the remote shell: hvxw2 (.*Could not resolve hostname hvxw2" <<<"$err"
check "hvxrun said it waits for hvxw2's name to resolve" $?
grep -qE "^hvxrun: host hvxw2 answered after [0-9]+ s$" <<<"$err"; check "and when it answered" $?
((failures == 0)) || show

# ---- host 2 never comes up: a bounded failure naming it
sshd_down; check "sshd on hvxw2 stopped" $?
launch -np 2 -H hvxw1:1,hvxw2:1 --host-wait 2 -- "$INFO" --check
((rc != 0)); check "the job failed (rc $rc)" $?
grep -qE "1 of 1 hosts did not answer the remote shell within 2 s \(--host-wait\): hvxw2 \(.*(refused|Connection)" <<<"$err"
check "the error names hvxw2 and ssh's reason" $?
((elapsed_ms >= 2000 && elapsed_ms < 15000)); check "it failed after the bound and within 15 s (${elapsed_ms} ms)" $?
! grep -q "hvx initialized" <<<"$err"; check "no rank started" $?
((failures == 0)) || show

# ---- the -H default: no wait for the host. Hydra does not end when its ssh to a host fails, so the
# job ends at --start-timeout (5 s here), naming the host and ssh's reason.
launch -np 2 -H hvxw1:1,hvxw2:1 --start-timeout 5 -- "$INFO" --check
((rc != 0)); check "without --host-wait the job fails (rc $rc, ${elapsed_ms} ms)" $?
! grep -q "waiting up to" <<<"$err"; check "and did not wait" $?
grep -qE "^hvxrun: ranks did not start within 5 s \(--start-timeout\) on host.*hvxw2" <<<"$err" &&
    grep -q "hvxw2 port 22: Connection refused" <<<"$err"
check "the error names hvxw2 and ssh's reason" $?
((failures == 0)) || show

((failures == 0)) && echo PASSED
exit $((failures != 0))

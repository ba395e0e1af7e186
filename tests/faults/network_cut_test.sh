#!/usr/bin/env bash
# A host's network cut mid-job, as on a real cluster: 2 namespace hosts x 2 ranks with their own
# boot ids (MPI between them over TCP) and a real sshd on each (hvxrun's remote shell is ssh over
# their network), and host 2's switch port taken down while the ranks are in their allreduces.
# Nothing tells anyone: the job must end within the collective timeout plus 10 s with a non-zero
# exit and a summary naming a rank and its host; nothing of the job may be left on host 1 (hvxrun
# ends the ssh client that would wait on the dead connection); the ranks on the cut-off host,
# which nobody can reach, must end by themselves within the timeout plus 15 s. Only the sshd
# session that carried the cut connection stays (sshd's, until TCP gives up). Then the trainer,
# with the default shutdown timeout (30 s), host 2's link cut at a training step: the job ends
# within the collective timeout plus 10 s as well (a rank whose step failed exits at once; before,
# every rank then waited the whole shutdown timeout in the PMI barrier). Prints the rows in the
# fault matrix's columns.
#   network_cut_test.sh HVXRUN FAULT_PROBE MPIEXEC NETNS_HOSTS TRAIN MAKE_IDX TRAIN_LIB
# Needs root and sshd (openssh-server); where either is missing it prints SKIPPED and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
PROBE=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
TRAIN=$(readlink -f "$5")
MAKE_IDX=$(readlink -f "$6")
source "$7"
export HVX_NETNS_PREFIX=hvxk HVX_SEPARATE_BOOT_ID=1
source "$(dirname "${BASH_SOURCE[0]}")/../multihost/lib.sh"
TIMEOUT_S=8

hosts_up 2
[[ -x /usr/sbin/sshd ]] || skip "sshd is not installed (Debian's openssh-server)"
"$NETNS" sshd || { echo "FAIL: could not start sshd on the hosts"; exit 1; }
launcher_exec=$HVX_NETNS_STATE/ssh

# The processes of the job on HOST: everything in its namespace but its sshd's.
job_processes() {
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null | tr '\n' ',' | sed 's/,$//')
    [[ -n $pids ]] && ps -o pid=,comm=,args= -p "$pids" 2>/dev/null | awk '$2 != "sshd"'
}

launch_bg -np 4 -H hvxk1:2,hvxk2:2 --stop-timeout 5 -x HVX_COLLECTIVE_TIMEOUT_S=$TIMEOUT_S \
    -x HVX_SHUTDOWN_TIMEOUT_S=$TIMEOUT_S -- "$PROBE" --steps 1000000
for i in $(seq 300); do
    [[ $(grep -c "hvx initialized" "$HVX_NETNS_STATE/err" 2>/dev/null) == 4 ]] && break
    sleep 0.1
done
sleep 2  # into the steps: each is a 16 MiB allreduce over TCP
cut_ns=$(date +%s%N)
"$NETNS" cut hvxk2
since_cut() { echo $((($(date +%s%N) - cut_ns) / 1000000)); }
host2_ended=""
while true; do
    if [[ -z $host2_ended && -z $(job_processes hvxk2) ]]; then host2_ended=$(since_cut); fi
    if ! kill -0 "$pid" 2>/dev/null && [[ -n $host2_ended ]]; then break; fi
    (($(since_cut) > (TIMEOUT_S + 30) * 1000)) && break
    sleep 0.1
done
finish
stop_ms=$(since_cut)
s=$(awk "BEGIN { printf \"%.1f\", $stop_ms / 1000 }")
check "the job ended $s s after the cut (bound $((TIMEOUT_S + 10)) s), rc $rc" \
    $((rc == 0 || stop_ms > (TIMEOUT_S + 10) * 1000))
grep -qE "^hvxrun: (rank [0-9]+ on host hvxk[12]|last stderr lines of rank [0-9]+ \(host hvxk[12]\))" <<<"$err"
check "the summary names a rank and its host" $?
grep -qE "DEADLINE_EXCEEDED.*HVX_COLLECTIVE_TIMEOUT_S" <<<"$err"
check "the ranks say which collective timed out" $?
sleep 0.5
left=$(job_processes hvxk1)
[[ -z $left ]]; check "nothing of the job left on hvxk1 ($left)" $?
[[ -n $host2_ended ]] && ((host2_ended <= (TIMEOUT_S + 15) * 1000))
check "the cut-off host's processes ended by themselves ${host2_ended:-never} ms after the cut (bound $((TIMEOUT_S + 15)) s): $(job_processes hvxk2)" $?
((failures == 0)) || show
row_allreduce=$(printf '| %-11s | %-9s | %5s s | %3s |' allreduce net_cut "$s" "$rc")

# ---- the trainer: host 2's link cut at a training step, HVX_SHUTDOWN_TIMEOUT_S left at 30 s.
ip -n "${HVX_NETNS_PREFIX}sw" link set p2 up
T=${TEST_TMPDIR:-$(mktemp -d)}
tiny_shards "$T" cnn 480 40 10 100
launch_bg -np 4 -H hvxk1:2,hvxk2:2 --stop-timeout 5 -x HVX_COLLECTIVE_TIMEOUT_S=$TIMEOUT_S -- \
    "$TRAIN" --config="$T/tiny.pbtxt"
for i in $(seq 600); do
    grep -qE '^\[0\] epoch 1/100 step 5/' "$HVX_NETNS_STATE/out" 2>/dev/null && break
    sleep 0.1
done
grep -qE '^\[0\] epoch 1/100 step 5/' "$HVX_NETNS_STATE/out"; check "the trainer reached step 5" $?
cut_ns=$(date +%s%N)
"$NETNS" cut hvxk2
while kill -0 "$pid" 2>/dev/null && (($(since_cut) < (TIMEOUT_S + 45) * 1000)); do sleep 0.1; done
finish
stop_ms=$(since_cut)
s=$(awk "BEGIN { printf \"%.1f\", $stop_ms / 1000 }")
check "the training job ended $s s after the cut (bound $((TIMEOUT_S + 10)) s), rc $rc" \
    $((rc == 0 || stop_ms > (TIMEOUT_S + 10) * 1000))
grep -qE "^hvxrun: (rank [0-9]+ on host hvxk[12]|last stderr lines of rank [0-9]+ \(host hvxk[12]\))" <<<"$err"
check "the training job's summary names a rank and its host" $?
((failures == 0)) || show

echo
echo "| phase       | fault     | to stop | rc  |"
echo "|-------------|-----------|---------|-----|"
echo "$row_allreduce"
printf '| %-11s | %-9s | %5s s | %3s |\n' train_step net_cut "$s" "$rc"
echo
((failures == 0)) && echo PASSED
exit $((failures != 0))

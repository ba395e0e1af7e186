#!/usr/bin/env bash
# Multi-host launch through hvxrun on hosts made of network namespaces (netns_hosts.sh), with a
# --launcher-exec remote shell: placement, HVX_* variables, hostnames, an allreduce, output
# prefixes, failure propagation (exit 3, SIGKILL) and an unreachable host.
#   multihost_test.sh HVXRUN PROGRAM MPIEXEC NETNS_HOSTS [PROGRAM_ARGS_FOR_CHECK...]
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
PROBE=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
export HVX_NETNS_STATE=${TEST_TMPDIR:-/tmp}/hvx-netns-$$
export HVX_NETNS_PREFIX=hvxt
failures=0

skip() { echo "SKIPPED: $*"; exit 0; }
[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
if ! ip netns add hvxtprobe$$ 2>/tmp/hvx-netns-err.$$; then
    reason=$(cat /tmp/hvx-netns-err.$$); rm -f /tmp/hvx-netns-err.$$
    skip "cannot create a network namespace: $reason"
fi
ip netns del hvxtprobe$$; rm -f /tmp/hvx-netns-err.$$
ip netns list | grep -qE '^hvxt[0-9]' && "$NETNS" down
trap '"$NETNS" down' EXIT
"$NETNS" up 3 || { echo "FAIL: could not build the namespace hosts"; exit 1; }

check() {  # check NAME CONDITION-RESULT
    if [[ $2 == 0 ]]; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}

# Runs hvxrun on host hvxt1; stdout, stderr and rc land in $out, $err, $rc.
launch() {
    local t0=$(date +%s%N)
    timeout -k 5 90 "$NETNS" exec hvxt1 "$HVXRUN" --mpiexec "$MPIEXEC" \
        --launcher-exec "$HVX_NETNS_STATE/fakessh" --timeout 60 --start-timeout 20 "$@" \
        >"$HVX_NETNS_STATE/out" 2>"$HVX_NETNS_STATE/err" </dev/null
    rc=$?
    elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
    out=$(cat "$HVX_NETNS_STATE/out")
    err=$(cat "$HVX_NETNS_STATE/err")
}

has_line() { grep -qxF -- "$2" <<<"$1"; }

# ---- 2 hosts x 2 ranks
launch -np 4 -H hvxt1:2,hvxt2:2 -- "$PROBE"
check "2x2 exits 0 (rc=$rc)" $((rc != 0))
for r in 0 1 2 3; do
    h=hvxt$((r / 2 + 1)); l=$((r % 2))
    line="[$r] probe rank=$r size=4 local=$l/2 hvx=$r,4,$l,2,$((r / 2)),2,$h host=$h sum=OK"
    has_line "$out" "$line"; check "2x2 line: $line" $?
done
[[ $rc == 0 ]] || { echo "--- stdout"; echo "$out"; echo "--- stderr"; echo "$err"; }

# ---- uneven 3 + 1, full tags
launch -np 4 -H hvxt1:3,hvxt2:1 --tag-output full -- "$PROBE"
check "3+1 exits 0 (rc=$rc)" $((rc != 0))
want=("0 hvxt1:0] probe rank=0 size=4 local=0/3 hvx=0,4,0,3,0,2,hvxt1 host=hvxt1"
      "1 hvxt1:1] probe rank=1 size=4 local=1/3 hvx=1,4,1,3,0,1,hvxt1 host=hvxt1"
      "2 hvxt1:2] probe rank=2 size=4 local=2/3 hvx=2,4,2,3,0,1,hvxt1 host=hvxt1"
      "3 hvxt2:0] probe rank=3 size=4 local=0/1 hvx=3,4,0,1,1,2,hvxt2 host=hvxt2")
for w in "${want[@]}"; do
    has_line "$out" "[$w sum=OK"; check "3+1 line: [$w sum=OK" $?
done
[[ $rc == 0 ]] || { echo "--- stdout"; echo "$out"; echo "--- stderr"; echo "$err"; }

# ---- one rank (on the remote host) exits 3 while the others wait in an allreduce
launch -np 4 -H hvxt1:2,hvxt2:2 -- "$PROBE" --exit-rank 3 --code 3
check "exit 3 propagates as rc 3 (rc=$rc, ${elapsed_ms} ms)" $((rc != 3))
check "stopped within 15 s (${elapsed_ms} ms)" $((elapsed_ms > 15000))
grep -qF "hvxrun: rank 3 on host hvxt2 (local rank 1) exited with status 3; it was the first of 4 ranks to fail" <<<"$err"
check "summary names rank 3, host, status" $?
grep -qF "hvxrun:   rank 3 exiting with 3 on purpose" <<<"$err"; check "summary shows last stderr line" $?
grep -qxF "[3] rank 3 exiting with 3 on purpose" <<<"$err"; check "stderr line tagged on stderr" $?
[[ $rc == 3 ]] || { echo "--- stderr"; echo "$err"; }

# ---- one rank is killed with SIGKILL
launch -np 4 -H hvxt1:2,hvxt2:2 -- "$PROBE" --kill-rank 1
check "SIGKILL propagates as rc 137 (rc=$rc, ${elapsed_ms} ms)" $((rc != 137))
grep -qF "hvxrun: rank 1 on host hvxt1 (local rank 1) was killed by signal 9" <<<"$err"
check "summary names the signal" $?
[[ $rc == 137 ]] || { echo "--- stderr"; echo "$err"; }

# ---- a host that cannot be reached fails within the start timeout, by name
launch -np 2 -H hvxt1:1,nosuchhost:1 --start-timeout 5 -- "$PROBE"
check "unreachable host fails with rc 1 (rc=$rc, ${elapsed_ms} ms)" $((rc != 1))
check "within start timeout + stop bound (${elapsed_ms} ms)" $((elapsed_ms > 25000))
grep -qF "on host nosuchhost (ranks 1)" <<<"$err"; check "message names the host" $?
[[ $rc == 1 ]] || { echo "--- stderr"; echo "$err"; }

if ip netns pids hvxt2 2>/dev/null | grep -q .; then
    echo "FAIL: processes left on hvxt2: $(ip netns pids hvxt2 | tr '\n' ' ')"
    failures=$((failures + 1))
fi
echo "failures: $failures"
[[ $failures == 0 ]]

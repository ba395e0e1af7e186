#!/usr/bin/env bash
# Sample audit across hosts: 4 trainer ranks on 2 hosts made of network namespaces
# (tests/multihost/netns_hosts.sh), launched by hvxrun with a --launcher-exec remote shell.
# With HVX_SEPARATE_BOOT_ID=1 (the _tcp target) the hosts have their own boot ids and UCX connects
# them over TCP, as on a real cluster: the job must still end rc 0 with its last checkpoint
# complete and no PMI or UCX error (MPICH 4.0.2's finalize deadlock, hvx/mpi/README.md).
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
#   multihost_audit_test.sh TRAIN HVXRUN MPIEXEC NETNS_HOSTS MAKE_IDX LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); HVXRUN=$(readlink -f "$2"); MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4"); MAKE_IDX=$(readlink -f "$5"); source "$6"
export HVX_NETNS_STATE=${TEST_TMPDIR:-/tmp}/hvx-netns-$$
export HVX_NETNS_PREFIX=hvxr
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

skip() { echo "SKIPPED: $*"; exit 0; }
[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
if ! ip netns add hvxrprobe$$ 2>"$T/netns-err"; then
    skip "cannot create a network namespace: $(cat "$T/netns-err")"
fi
ip netns del hvxrprobe$$
ip netns list | grep -qE '^hvxr[0-9]' && "$NETNS" down
trap '"$NETNS" down' EXIT
"$NETNS" up 2 || { echo "FAIL: could not build the namespace hosts"; exit 1; }

N=240
# The shards are made before the launch: both hosts share this file system.
tiny_shards "$T" mlp $N 40 10 2

timeout -k 5 200 "$NETNS" exec hvxr1 "$HVXRUN" --mpiexec "$MPIEXEC" \
    --launcher-exec "$HVX_NETNS_STATE/fakessh" --timeout 150 --start-timeout 30 \
    -np 4 -H hvxr1:2,hvxr2:2 -- "$TRAIN" --config="$T/tiny.pbtxt" --sample_log="$T/log" \
    --override="checkpoint { dir: \"$T/ck\" }" >"$T/out" 2>"$T/err" </dev/null
rc=$?
check "2 hosts x 2 ranks exit 0 (rc=$rc, HVX_SEPARATE_BOOT_ID=${HVX_SEPARATE_BOOT_ID:-0})" $rc
! grep -qE 'PMI|UCX|BAD TERMINATION|HVX_SHUTDOWN_TIMEOUT_S' "$T/err"; check "no PMI or UCX errors" $?
[[ $rc == 0 ]] || { tail -n 30 "$T/out" "$T/err"; }
grep -q "hvx initialized: rank 0/4, local rank 0/2, cross rank 0/2" "$T/out" "$T/err"
check "rank 0 sees 2 hosts" $?
audit "$T/log" 4 2 $N; check "audit across hosts" $?
grep -qE '^\[0\] done: 12 steps .* on 40 samples' "$T/out"; check "6 steps per epoch, 40 eval samples" $?
# The hosts share $T/ck: checkpoint.format AUTO has every rank write its shard of a directory.
[[ -f $T/ck/ckpt-12/index.json ]] && grep -q "checkpoint.format AUTO: SHARDED (every rank sees" "$T/err"
check "the last checkpoint, ckpt-12/, was written, a shard per rank" $?
# Reading it back: the run is complete, so the trainer says so and trains nothing.
timeout -k 5 120 "$TRAIN" --config="$T/tiny.pbtxt" --override="checkpoint { dir: \"$T/ck\" }" \
    >"$T/again.out" 2>&1
grep -q "the run in $T/ck is already complete (2 of 2 epochs done, 12 steps)" "$T/again.out"
check "the checkpoint reads back as the complete run" $?

echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# Sharded checkpoints into a checkpoint.dir that the hosts do not share: 2 hosts x 2 trainer ranks,
# each host's ranks in a pod (tests/multihost/netns_hosts.sh: its own mount namespace), host 2's
# with a tmpfs of its own mounted over the checkpoint directory, as a node's local disk is. The
# save fails on every rank with rank 0's message naming host 2's rank, its file and the fix, no
# index is written (no half checkpoint is ever taken for one), and the job ends non-zero within
# its timeout. The same job with the default format (AUTO) finds that host 2 does not see rank 0's
# files, says so, and writes single files (rank 0 writes): it trains and leaves its checkpoint.
# Needs root and nsenter; where namespaces cannot be created it prints SKIPPED.
#   unshared_dir_test.sh TRAIN HVXRUN MPIEXEC NETNS_HOSTS MAKE_IDX LIB
set -uo pipefail
TRAIN=$(readlink -f "$1"); HVXRUN=$(readlink -f "$2"); MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4"); MAKE_IDX=$(readlink -f "$5"); source "$6"
export HVX_NETNS_STATE=${TEST_TMPDIR:-/tmp}/hvx-netns-$$
export HVX_NETNS_PREFIX=hvxs
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

skip() { echo "SKIPPED: $*"; exit 0; }
[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
command -v nsenter >/dev/null || skip "nsenter (util-linux) is not installed"
if ! ip netns add hvxsprobe$$ 2>"$T/netns-err"; then
    skip "cannot create a network namespace: $(cat "$T/netns-err")"
fi
ip netns del hvxsprobe$$
ip netns list | grep -qE '^hvxs[0-9]' && "$NETNS" down
trap '"$NETNS" down' EXIT
"$NETNS" up 2 || { echo "FAIL: could not build the namespace hosts"; exit 1; }

tiny_shards "$T" cnn 240 40 10 1
mkdir -p "$T/ck" "$T/ck1"
"$NETNS" pod hvxs1 node-a && "$NETNS" pod hvxs2 node-b || { echo "FAIL: could not start the pods"; exit 1; }
for dir in ck ck1; do
    "$NETNS" exec node-b mount -t tmpfs -o size=256m tmpfs "$T/$dir" ||
        { echo "FAIL: could not mount host 2's own $T/$dir"; exit 1; }
done
"$NETNS" exec node-b touch "$T/ck/only-on-host-2"
[[ ! -e $T/ck/only-on-host-2 ]]; check "host 2's checkpoint directory is its own" $?

job() {  # job NAME OVERRIDE: the trainer on 2 pods x 2 ranks, launched from host 1
    local start=$SECONDS
    timeout -k 5 200 "$NETNS" exec hvxs1 "$HVXRUN" --mpiexec "$MPIEXEC" \
        --launcher-exec "$HVX_NETNS_STATE/fakessh" --timeout 150 --start-timeout 30 \
        -np 4 -H node-a:2,node-b:2 -- "$TRAIN" --config="$T/tiny.pbtxt" --override="$2" \
        >"$T/$1.out" 2>"$T/$1.err" </dev/null
    rc=$?
    seconds=$((SECONDS - start))
}

job sharded "checkpoint { dir: \"$T/ck\" format: SHARDED } logging { max_steps_per_epoch: 3 }"
[[ $rc != 0 && $rc != 124 && $rc != 137 ]]
check "the sharded save into unshared directories fails the job (rc=$rc, ${seconds} s)" $?
grep -qE "rank [23] on host hvxs2 wrote $T/ck/ckpt-[0-9]+/[^ ]+ \([0-9]+ bytes\), which rank 0 on host hvxs1 does not see: checkpoint.dir must be one file system that every host mounts for checkpoint.format SHARDED; without one, use SINGLE_FILE" "$T/sharded.out" "$T/sharded.err"
check "rank 0's message names host 2's rank and file, and the fix" $?
for r in 1 2 3; do
    grep -qE "^\[$r\].*(does not see|rank 0 \(host)" "$T/sharded.out" "$T/sharded.err"
    check "rank $r reports the failed save too" $?
done
[[ -z $(find "$T/ck" -name index.json) ]]; check "no index was written on host 1" $?
[[ -z $("$NETNS" exec node-b find "$T/ck" -name index.json) ]]; check "no index was written on host 2" $?
[[ $rc == 0 || $failures == 0 ]] || tail -n 20 "$T/sharded.out" "$T/sharded.err"

job single "checkpoint { dir: \"$T/ck1\" } logging { max_steps_per_epoch: 3 }"
check "the default format (AUTO) trains on the same hosts (rc=$rc)" $rc
grep -q "checkpoint.format AUTO: SINGLE_FILE (rank 2 on host hvxs2 does not see the files rank 0 writes in $T/ck1" "$T/single.err"
check "AUTO chose one file, naming the first rank that does not see rank 0's files" $?
[[ -f $T/ck1/ckpt-3.pt ]]; check "rank 0 wrote ckpt-3.pt" $?
[[ -z $(ls "$T/ck1" | grep hvx-probe) ]]; check "the probe file is gone" $?
[[ $rc == 0 ]] || tail -n 20 "$T/single.out" "$T/single.err"
echo "failures: $failures"
[[ $failures == 0 ]]

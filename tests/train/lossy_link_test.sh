#!/usr/bin/env bash
# A slow, lossy link: the trainer on 2 namespace hosts x 2 ranks with their own boot ids (MPI and
# hydra's proxy connection between them over TCP), and host 2's link shaped both ways to 20 Mbit/s
# (tc tbf, queueing up to 400 ms) with 1% of its packets dropped each way (nftables). TCP
# retransmits what is lost: the job must end 0 and its training be bit-identical to the same 4
# ranks on one host (the CPU plane folds in rank order wherever the ranks are), its exported
# weights byte for byte. It prints how long the job took over the clean link and over the lossy
# one. The drop and shaping counters must show that packets were dropped and
# queued. (tc netem, which would add a fixed delay, is not in this kernel; the queue adds delay
# whenever the link is busy.)
#   lossy_link_test.sh TRAIN MAKE_IDX TRAIN_LIB HVXRUN MPIEXEC NETNS_HOSTS
# Needs root and nft (Debian's nftables); where either is missing it prints SKIPPED and passes.
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2")
source "$3"
HVXRUN=$(readlink -f "$4"); MPIEXEC=$(readlink -f "$5"); NETNS=$(readlink -f "$6")
export HVX_NETNS_PREFIX=hvxy HVX_SEPARATE_BOOT_ID=1
source "$(dirname "$NETNS")/lib.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}

hosts_up 2
command -v nft >/dev/null || skip "nft is not installed (Debian's nftables)"
N=240
tiny_config "$T" cnn $N 40 10 1 || { echo "FAIL: could not write the dataset"; exit 1; }
# One host, 4 ranks: the reference (it also writes the shards both hosts then read).
timeout -k 5 200 "$TRAIN" --config="$T/tiny.pbtxt" --override='launch { num_processes: "4" }' \
    --export="$T/one_host.pt" >"$T/ref.out" 2>"$T/ref.err"
check "the 4 ranks on one host exit 0 (rc=$?)" $?

# The same job on the hosts before the link is spoiled: how long it takes over a clean link.
launch_bg -np 4 -H hvxy1:2,hvxy2:2 -- "$TRAIN" --config="$T/tiny.pbtxt" --export="$T/clean.pt"
finish
clean_ms=$elapsed_ms
[[ $rc == 0 ]]; check "over the clean link the job ends 0 (rc=$rc, $clean_ms ms)" $?

# Host 2's link, both ways: its eth0 out, and its switch port out (towards it).
for where in "hvxy2 eth0" "hvxysw p2"; do
    read -r ns dev <<<"$where"
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate 20mbit burst 32kbit latency 400ms ||
        { echo "FAIL: tc tbf on $ns $dev"; exit 1; }
done
ip netns exec hvxy2 nft -f - <<'NFT' || { echo "FAIL: the nftables rules"; exit 1; }
table inet lossy {
    chain in { type filter hook input priority 0; numgen random mod 100 < 1 counter drop; }
    chain out { type filter hook output priority 0; numgen random mod 100 < 1 counter drop; }
}
NFT

launch_bg -np 4 -H hvxy1:2,hvxy2:2 -- "$TRAIN" --config="$T/tiny.pbtxt" --export="$T/lossy.pt"
finish
[[ $rc == 0 ]]; check "over the lossy link the job ends 0 (rc=$rc, $elapsed_ms ms against $clean_ms ms)" $?
[[ $rc == 0 ]] || tail -n 30 "$HVX_NETNS_STATE/err"
grep -q 'hvx initialized: rank 0/4, local rank 0/2, cross rank 0/2' "$HVX_NETNS_STATE/err"
check "rank 0 sees 2 hosts" $?
ref=$(losses "$T/ref.out") got=$(losses "$HVX_NETNS_STATE/out")
[[ -n $ref && $ref == "$got" ]]; check "every step's loss equals the one-host run's ($(wc -l <<<"$ref") steps)" $?
[[ -n $ref && $ref == "$got" ]] || diff <(echo "$ref") <(echo "$got") | head -n 10
cmp -s "$T/one_host.pt" "$T/lossy.pt"; check "the exported weights are byte for byte the one-host run's" $?
dropped=$(ip netns exec hvxy2 nft list table inet lossy | sed -nE 's/.*counter packets ([0-9]+).*/\1/p' |
    awk '{s += $1} END {print s + 0}')
((dropped > 0)); check "nftables dropped $dropped packets of host 2's" $?
queued=$(ip netns exec hvxysw tc -s qdisc show dev p2 | sed -nE 's/.*overlimits ([0-9]+).*/\1/p' | head -n 1)
((${queued:-0} > 0)); check "the shaper held back packets to host 2 (${queued:-0} over its rate)" $?

echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# Multi-host launch through hvxrun on hosts made of network namespaces (netns_hosts.sh), with a
# --launcher-exec remote shell. `hvx_info --check` on -H h1:2,h2:2 and the uneven h1:3,h2:1:
# every rank's rank, local and cross rank/size, host, homogeneous flag and collective check, the
# output prefixes and streams; the HVX_* plan every rank gets; failure propagation (exit 3,
# SIGKILL and MPI_Abort (five runs) after MPI_Init while the others wait in an allreduce, exit 3 while the
# others are in hvx::Init) with the summary and exit code; an unreachable host.
#   multihost_test.sh HVXRUN HVX_INFO RANK_PROBE MPIEXEC NETNS_HOSTS
# First, without root: hvxrun starts the hvxrun_rank beside it, and a lone hvxrun is its own wrapper.
# The rest needs root; where namespaces cannot be created it prints SKIPPED with the reason and
# passes (when the checks without root passed).
set -uo pipefail
HVXRUN=$(readlink -f "$1")
INFO=$(readlink -f "$2")
PROBE=$(readlink -f "$3")
MPIEXEC=$(readlink -f "$4")
NETNS=$(readlink -f "$5")
export HVX_NETNS_PREFIX=hvxt
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- without root: which per-rank wrapper hvxrun starts. hvxrun_rank beside hvxrun; a copy of
# hvxrun alone falls back to running itself as the wrapper, and still tags and reports exits.
"$HVXRUN" --dry-run -np 2 -- /bin/true | grep -qF "$(dirname "$HVXRUN")/hvxrun_rank --hvx-rank-wrapper --plan "
check "hvxrun starts the hvxrun_rank beside it" $?
alone=${TEST_TMPDIR:-/tmp}/hvxrun-alone-$$
mkdir -p "$alone" && cp "$HVXRUN" "$alone/hvxrun"
"$alone/hvxrun" --dry-run -np 2 -- /bin/true | grep -qF "$alone/hvxrun --hvx-rank-wrapper --plan "
check "a lone hvxrun is its own wrapper" $?
# Rank 1 fails only once rank 0 has printed, so the job stop cannot cut rank 0's line off.
flag=$alone/rank0-printed
got=$(FLAG=$flag timeout -k 5 60 "$alone/hvxrun" --mpiexec "$MPIEXEC" --timeout 30 -x FLAG -np 2 -- /bin/sh -c \
  'echo "hi $HVX_RANK"; if [ "$HVX_RANK" = 0 ]; then touch "$FLAG"; exit 0; fi
   for i in $(seq 200); do [ -e "$FLAG" ] && break; sleep 0.1; done; exit 1' 2>&1)
rc=$?
[[ $rc == 1 && $(grep -c '^\[[01]\] hi [01]$' <<<"$got") == 2 ]] && grep -qF "hvxrun: rank 1 on host" <<<"$got"
check "a lone hvxrun runs, tags and reports rank 1's exit 1 (rc=$rc)" $?
rm -rf "$alone"

hosts_up 3

# expect_info PREFIX RANK LOCAL_RANK LOCAL_SIZE CROSS_RANK CROSS_SIZE HOMOGENEOUS HOST
# Exactly one stdout line is that rank's hvx_info JSON behind PREFIX, with the check passed, and
# its Init log line is on stderr behind the same prefix only (hvx adds no second rank tag).
expect_info() {
    local prefix=$1 r=$2 l=$3 ls=$4 cr=$5 cs=$6 homo=$7 host=$8 p
    p=$(sed 's/[][\.*^$]/\\&/g' <<<"$prefix")
    local json="\\{\"rank\":$r,\"size\":4,\"local_rank\":$l,\"local_size\":$ls,\"cross_rank\":$cr,\"cross_size\":$cs,\"homogeneous\":$homo,\"host\":\"$host\",\"pid\":[0-9]+,\"visible_gpus\":[0-9]+,\"check\":\"pass\"\\}"
    [[ $(count_lines "$out" "^$p $json\$") == 1 ]]
    check "$prefix rank $r: local $l/$ls cross $cr/$cs homogeneous $homo host $host check pass" $?
    [[ $(count_lines "$err" "^$p I[0-9]{4} [0-9:.]+ engine\\.cc:[0-9]+\\] hvx initialized: rank $r/4, local rank $l/$ls, cross rank $cr/$cs, host $host,") == 1 ]]
    check "$prefix rank $r: Init log line tagged once, on stderr" $?
}

# ---- the HVX_* plan every rank gets (a plain program: `env`)
launch -np 4 -H hvxt1:2,hvxt2:2 -- /usr/bin/env
check "env on 2x2 exits 0 (rc=$rc)" $((rc != 0))
for r in 0 1 2 3; do
    h=hvxt$((r / 2 + 1)) l=$((r % 2)) c=$((r / 2))
    got=$(grep -E "^\[$r\] HVX_(RANK|SIZE|LOCAL_RANK|LOCAL_SIZE|CROSS_RANK|CROSS_SIZE|HOSTNAME|TAGGED_OUTPUT)=" <<<"$out" |
        sed "s/^\[$r\] //" | sort | tr '\n' ' ')
    want="HVX_CROSS_RANK=$c HVX_CROSS_SIZE=2 HVX_HOSTNAME=$h HVX_LOCAL_RANK=$l HVX_LOCAL_SIZE=2 HVX_RANK=$r HVX_SIZE=4 HVX_TAGGED_OUTPUT=1 "
    [[ $got == "$want" ]]; check "rank $r environment: $got" $?
done
[[ $rc == 0 ]] || show

# ---- hvx_info --check on 2 hosts x 2 ranks
launch -np 4 -H hvxt1:2,hvxt2:2 -- "$INFO" --check
check "2x2 hvx_info --check exits 0 (rc=$rc)" $((rc != 0))
for r in 0 1 2 3; do
    expect_info "[$r]" $r $((r % 2)) 2 $((r / 2)) 2 true hvxt$((r / 2 + 1))
done
[[ $(count_lines "$out" '.') == 4 ]]; check "2x2: stdout has only the 4 JSON lines" $?
[[ $(count_lines "$err" '^\[[0-3]\] \{') == 0 ]]; check "2x2: no JSON on stderr" $?
[[ $rc == 0 ]] || show

# ---- uneven 3 + 1, full tags: local ranks 1 and 2 exist on one host only
launch -np 4 -H hvxt1:3,hvxt2:1 --tag-output full -- "$INFO" --check
check "3+1 hvx_info --check exits 0 (rc=$rc)" $((rc != 0))
expect_info "[0 hvxt1:0]" 0 0 3 0 2 false hvxt1
expect_info "[1 hvxt1:1]" 1 1 3 0 1 false hvxt1
expect_info "[2 hvxt1:2]" 2 2 3 0 1 false hvxt1
expect_info "[3 hvxt2:0]" 3 0 1 1 2 false hvxt2
[[ $(count_lines "$out" '.') == 4 ]]; check "3+1: stdout has only the 4 JSON lines" $?
[[ $rc == 0 ]] || show

# ---- one rank (on the remote host) exits 3 after MPI_Init while the others wait in an allreduce
launch -np 4 -H hvxt1:2,hvxt2:2 -- "$PROBE" --exit-rank 3 --code 3
check "exit 3 propagates as rc 3 (rc=$rc, ${elapsed_ms} ms)" $((rc != 3))
check "stopped within 15 s (${elapsed_ms} ms)" $((elapsed_ms > 15000))
grep -qF "hvxrun: rank 3 on host hvxt2 (local rank 1) exited with status 3; it was the first of 4 ranks to fail, the others were stopped" <<<"$err"
check "summary names rank 3, its host, local rank and status" $?
grep -qxF "hvxrun:   rank 3 exiting with 3 on purpose" <<<"$err"; check "summary shows its last stderr line" $?
grep -qxF "[3] rank 3 exiting with 3 on purpose" <<<"$err"; check "the rank's stderr line is tagged, on stderr" $?
# stdout may carry mpiexec's own untagged report of the failure; no rank may print its sum.
! grep -q "sum=" <<<"$out"; check "no rank got past the allreduce" $?
[[ $rc == 3 ]] || show

# ---- one rank is killed with SIGKILL
launch -np 4 -H hvxt1:2,hvxt2:2 -- "$PROBE" --kill-rank 1
check "SIGKILL propagates as rc 137 (rc=$rc, ${elapsed_ms} ms)" $((rc != 137))
check "stopped within 15 s (${elapsed_ms} ms)" $((elapsed_ms > 15000))
grep -qF "hvxrun: rank 1 on host hvxt1 (local rank 1) was killed by signal 9 (Killed); it was the first of 4 ranks to fail" <<<"$err"
check "summary names rank 1, its host and the signal" $?
grep -qxF "hvxrun:   rank 1 killing itself" <<<"$err"; check "summary shows its last stderr line" $?
[[ $rc == 137 ]] || show

# ---- one rank calls MPI_Abort: hydra would end the job at once, ahead of the rank's last output
# (3 runs in 25 before the wrapper relayed PMI). The wrapper holds the abort until hvxrun has its
# record, so every run's summary names the rank, its host and the abort, and repeats its last
# line; five runs. The abort's code is the job's.
for run in 1 2 3 4 5; do
    launch -np 4 -H hvxt1:2,hvxt2:2 -- "$PROBE" --abort-rank 2 --code 5
    check "run $run: MPI_Abort(5) propagates as rc 5 (rc=$rc, ${elapsed_ms} ms)" $((rc != 5))
    check "run $run: stopped within 15 s (${elapsed_ms} ms)" $((elapsed_ms > 15000))
    grep -qF "hvxrun: rank 2 on host hvxt2 (local rank 0) ended the job through MPI_Abort or a fatal MPI error (PMI abort, exit code 5); it was the first of 4 ranks to fail" <<<"$err"
    check "run $run: summary names rank 2, its host and the abort" $?
    grep -qxF "hvxrun:   rank 2 calls MPI_Abort(5)" <<<"$err"; check "run $run: summary repeats the rank's line before the abort" $?
    [[ $rc == 5 ]] || show
done

# ---- hvx_info job where rank 2 exits 3 before Init: the others wait in hvx::Init
launch -np 4 -H hvxt1:2,hvxt2:2 -- /bin/sh -c \
    'if [ "$HVX_RANK" = 2 ]; then echo "rank 2 gives up before Init" >&2; exit 3; fi; exec "$0" --check' "$INFO"
check "exit 3 during Init propagates as rc 3 (rc=$rc, ${elapsed_ms} ms)" $((rc != 3))
check "stopped within 15 s (${elapsed_ms} ms)" $((elapsed_ms > 15000))
grep -qF "hvxrun: rank 2 on host hvxt2 (local rank 0) exited with status 3; it was the first of 4 ranks to fail" <<<"$err"
check "summary names rank 2 and its host" $?
grep -qxF "hvxrun:   rank 2 gives up before Init" <<<"$err"; check "summary shows its last stderr line" $?
[[ $rc == 3 ]] || show

# ---- a host that cannot be reached fails within the start timeout, by name
launch -np 2 -H hvxt1:1,nosuchhost:1 --start-timeout 5 -- "$INFO" --check
check "unreachable host fails with rc 1 (rc=$rc, ${elapsed_ms} ms)" $((rc != 1))
check "within start timeout + stop bound (${elapsed_ms} ms)" $((elapsed_ms > 25000))
grep -qF "ranks did not start within 5 s (--start-timeout) on host nosuchhost (ranks 1)" <<<"$err"
check "message names the host and its ranks" $?
[[ $rc == 1 ]] || show

no_processes_left hvxt1 hvxt2
echo "failures: $failures"
[[ $failures == 0 ]]

#!/usr/bin/env bash
# hvxrun's verdict on a hang, from every rank's flight recorder: under hvxrun on 2 namespace hosts
# x 2 ranks, rank 3 (the second host's local rank 1) goes wrong in each way a program does, and the
# line hvxrun prints after "verdict: " must name rank 3, its host and the collective the others
# waited for, and say what rank 3 did instead: skipped it (went on to the next step's), ran it
# under another name, sat in its own code, skipped one in a process set, froze (SIGSTOP) inside the
# data plane or before negotiation, died inside the data plane, sent another shape. Each verdict
# line is printed; in the own-code case the stacks show rank 3's main thread in main(). A rank
# whose steps are 20% slower is named as the straggler by every rank and in rank 0's warning. The merged record must be JSON naming every rank, and the trace a Chrome JSON
# trace. Ctrl-C on hvxrun while a job hangs prints the verdict too. With HVX_SEPARATE_BOOT_ID=1 (the
# _tcp target) the hosts talk over TCP, and the Ctrl-C case, which runs on this host, is left out.
#   verdict_test.sh HVXRUN FAULT_PROBE MPIEXEC NETNS_HOSTS
# Needs root; where namespaces cannot be created it prints SKIPPED with the reason and passes.
set -uo pipefail
HVXRUN=$(readlink -f "$1")
PROBE=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
NETNS=$(readlink -f "$4")
export HVX_NETNS_PREFIX=hvxv
source "$(dirname "${BASH_SOURCE[0]}")/../multihost/lib.sh"
T=${TEST_TMPDIR:-$(mktemp -d)}
TIMEOUT_S=4

hosts_up 2
lines=()

# verdict CASE PATTERN HVXRUN_ARGS... -- PROGRAM...: runs the job; its verdict line must match
# the extended regular expression PATTERN. In a hang every rank's ring reaches hvxrun before the
# timeout ends the job; where a rank fails at once ($all_ranks=0) hydra's stop may cut off the
# others', and the record must hold at least the failing rank's.
verdict() {
    local name=$1 pattern=$2
    shift 2
    rm -rf "$T/$name"
    launch -np 4 -H hvxv1:2,hvxv2:2 --stop-timeout 5 --output-dir "$T/$name" \
        -x HVX_COLLECTIVE_TIMEOUT_S=$TIMEOUT_S -x HVX_SHUTDOWN_TIMEOUT_S=$TIMEOUT_S "$@"
    local line
    line=$(grep -m1 '^hvxrun: verdict: ' <<<"$err")
    lines+=("$name: ${line#hvxrun: verdict: }")
    [[ $rc != 0 ]] && grep -qE "$pattern" <<<"$line"
    check "$name: rc $rc, the verdict names rank 3 and what it did" $?
    [[ $rc != 0 && -n $line ]] || show
    python3 - "$T/$name" "${all_ranks:-1}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/flight.json"))
assert d["format"] == "hvx-flight" and d["verdict"], d.get("verdict")
dumped = sorted(r["rank"] for r in d["ranks"] if r["dumped"])
assert dumped == [0, 1, 2, 3] if sys.argv[2] == "1" else dumped, dumped
# (A rank frozen before its first op reached the ring sends an empty one.)
assert any(r["events"] for r in d["ranks"]), "no rank's ops"
t = json.load(open(sys.argv[1] + "/flight.trace.json"))
assert any(e["ph"] == "X" for e in t["traceEvents"])
PY
    check "$name: flight.json holds every rank's ops and flight.trace.json is a trace" $?
}

who='rank 3 \(host hvxv2, local rank 1\)'
probe=("$PROBE" --steps 6 --step-names)
verdict skip "^hvxrun: verdict: $who did not submit allreduce 'small\.2' .*went on without it and waits in allreduce 'big\.3'" \
    -- "${probe[@]}" --fault skip:3:2
verdict rename "^hvxrun: verdict: $who did not submit allreduce 'small\.2' .*at the same position it submitted allreduce 'small_renamed\.2'.*another name" \
    -- "${probe[@]}" --fault rename:3:2
verdict own_code "^hvxrun: verdict: $who did not submit allreduce 'big\.2' .*in its own code since its last, allreduce 'small\.1'" \
    -- "${probe[@]}" --fault own_code:3:2
# Under it, rank 3's main thread where it sleeps in main(); in flight.json every rank's threads'
# stacks, asked for while the job hung.
grep -qE '^hvxrun:   rank 3 native stack of its thread [0-9]+ fault_probe \(main\):$' <<<"$err" &&
    grep -qE '^hvxrun:   rank 3   #[0-9]+ 0x[0-9a-f]+ main$' <<<"$err" &&
    python3 - "$T/own_code/flight.json" <<'PY'
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
for r in ranks:
    assert r["stack_taken"] == "idle", (r["rank"], r["stack_taken"])
    assert any(line.endswith(" (main)") for line in r["stack"]), (r["rank"], r["stack"])
    assert any("hvx::Engine::ThreadMain" in line for line in r["stack"]), (r["rank"], r["stack"])
PY
check "own_code: the verdict shows rank 3's main thread in main(), flight.json every rank's threads" $?
verdict process_set "^hvxrun: verdict: $who did not submit allreduce 'set\.2' \(set 1, .*that ranks 1,2 waited" \
    -- "${probe[@]}" --fault set:3:2
failpoints=(-x HVX_ALLOW_FAILPOINTS=1)
verdict frozen_data_plane "^hvxrun: verdict: $who held up allreduce 'big' .*stopped \(SIGSTOP.*inside the data plane" \
    "${failpoints[@]}" -x HVX_FAILPOINT=allreduce:3:stop -- "$PROBE" --steps 3
# (Frozen in a cycle before its first op reached the ring, it "did not submit" it.)
verdict frozen_negotiation "^hvxrun: verdict: $who (held up|did not submit) allreduce '(big|small)' .*stopped \(SIGSTOP" \
    "${failpoints[@]}" -x HVX_FAILPOINT=negotiation:3:stop -- "$PROBE" --steps 3
all_ranks=0 verdict died "^hvxrun: verdict: $who held up allreduce 'big' .*killed by signal 9" \
    "${failpoints[@]}" -x HVX_FAILPOINT=allreduce:3:kill -- "$PROBE" --steps 3
all_ranks=0 verdict mismatch "^hvxrun: verdict: allreduce 'small\.2' .*mismatched ALLREDUCE shapes: rank 0 sent \[64\], rank 3 sent \[32\]" \
    -- "${probe[@]}" --fault mismatch:3:2

# On demand: Ctrl-C on hvxrun (here on this host, 4 ranks; --preempt-grace 0: a signal stops the
# job instead of asking the ranks to checkpoint) while rank 3 sits in its own code and the others
# wait, before the collective timeout (8 s) ends the job. Not on the namespace hosts, so the same
# in both targets: the _tcp one leaves it out.
if [[ ${HVX_SEPARATE_BOOT_ID:-} != 1 ]]; then
rm -rf "$T/ctrl_c"
"$HVXRUN" --mpiexec "$MPIEXEC" -np 4 --preempt-grace 0 --output-dir "$T/ctrl_c" -x HVX_COLLECTIVE_TIMEOUT_S=8 \
    -- "${probe[@]}" --fault own_code:3:2 >"$T/ctrl_c.out" 2>"$T/ctrl_c.err" </dev/null &
hvxrun_pid=$!
sleep 7
kill -INT "$hvxrun_pid"
wait "$hvxrun_pid"
rc=$?
line=$(grep -m1 '^hvxrun: verdict: ' "$T/ctrl_c.err")
lines+=("ctrl_c: ${line#hvxrun: verdict: }")
[[ $rc == 130 ]] && grep -qE "^hvxrun: verdict: rank 3 \(host [^,]+, local rank 3\) did not submit allreduce '(big|small)\.2' .*in its own code" <<<"$line"
check "Ctrl-C on a hung job: rc $rc, the verdict names rank 3 in its own code" $?
[[ $rc == 130 && -n $line ]] || cat "$T/ctrl_c.err"
fi

# A slow rank is named, not hung: rank 3's steps take 20% longer (36 ms of work against 30);
# within 50 steps every rank's Stragglers() names it and rank 0 logs one warning line saying by
# how much, with its host and local rank; the job ends well.
launch -np 4 -H hvxv1:2,hvxv2:2 -- "$PROBE" --steps 60 --step-ms 30 --big-floats 16384 \
    --fault slow:3:0
named=$(grep -cE '^\[[0-3]\] rank [0-3]: straggler named rank 3 at step ([0-9]|[1-4][0-9])$' <<<"$out")
warning=$(grep -E '^\[0\] .*straggler: rank 3 \(host hvxv2, local rank 1\) is late: it submitted its collectives [0-9.]+ ms after the median' <<<"$err")
lines+=("straggler: ${warning#*straggler: }")
[[ $rc == 0 && $named == 4 && -n $warning ]] && ! grep -qE 'straggler: rank [0-2] ' <<<"$err"
check "a rank 20% slower: rc $rc, named by $named of 4 ranks within 50 steps, rank 0 warns" $?
[[ $rc == 0 && $named == 4 && -n $warning ]] || show

# A job that ends well leaves no verdict and no record behind.
launch -np 4 -H hvxv1:2,hvxv2:2 -- "${probe[@]}"
[[ $rc == 0 ]] && ! grep -q "verdict" <<<"$err"
check "a clean run: rc $rc, no verdict" $?

echo
printf '%s\n' "${lines[@]}"
echo "failures: $failures"
[[ $failures == 0 ]]

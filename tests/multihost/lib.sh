# Helpers for the multi-host tests, sourced after setting HVXRUN, MPIEXEC and NETNS (the paths of
# hvxrun, mpiexec and netns_hosts.sh) and exporting HVX_NETNS_PREFIX.
export HVX_NETNS_STATE=${TEST_TMPDIR:-/tmp}/hvx-netns-$$
failures=0

check() {  # check NAME STATUS (0 = ok)
    if [[ $2 == 0 ]]; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}

skip() { echo "SKIPPED: $* (checks without root: $failures failures)"; exit $((failures != 0)); }

# hosts_up N: N namespace hosts ${HVX_NETNS_PREFIX}1.., torn down at exit; skips without root.
hosts_up() {
    [[ $(id -u) == 0 ]] || skip "needs root to create network namespaces (uid $(id -u))"
    command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
    local reason
    if ! reason=$(ip netns add "${HVX_NETNS_PREFIX}probe$$" 2>&1); then
        skip "cannot create a network namespace: $reason"
    fi
    ip netns del "${HVX_NETNS_PREFIX}probe$$"
    ip netns list | grep -qE "^${HVX_NETNS_PREFIX}[0-9]" && "$NETNS" down
    trap '"$NETNS" down' EXIT
    "$NETNS" up "$1" || { echo "FAIL: could not build the namespace hosts"; exit 1; }
}

# The remote shell starts ranks in a clean login environment: forward what a sanitizer build needs
# (MPICH leaks in MPI_Finalize; ASAN_OPTIONS is ignored by builds without ASan).
extra=(-x "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
if [[ -n ${UCX_MEM_EVENTS+x} ]]; then extra+=(-x "UCX_MEM_EVENTS=$UCX_MEM_EVENTS"); fi

utc_time() { date -u -d "@$(($1 / 1000000000)).$(printf %09d $(($1 % 1000000000)))" +%T.%6N; }

# init_ms: milliseconds from the last job's launch to its last rank's "hvx initialized" log line
# (the hosts share one clock; log lines carry local time), or -1 when no rank logged one. Splits a
# job's time into starting (hydra, the remote shell, MPI_Init) and working plus ending.
init_ms() {
    local last year
    last=$(grep -oE '^\[[0-9]+\] I[0-9]{4} [0-9:.]+ engine\.cc:[0-9]+\] hvx initialized' <<<"$err" |
        awk '{print $2 substr($3, 1, 15)}' | sort | tail -1)
    [[ -n $last ]] || { echo -1; return; }
    year=$(date -d "@$((launch_t0 / 1000000000))" +%Y)
    last=$(date -d "$year-${last:1:2}-${last:3:2} ${last:5}" +%s%N) || { echo -1; return; }
    echo $(((last - launch_t0) / 1000000))
}

# show: the last job's output, with when it started and ended (UTC, as the ranks' log lines), so a
# slow job's log says whether the time went before the ranks started, between them, or at exit.
show() {
    echo "--- launched $(utc_time "$launch_t0"), ended $(utc_time "$launch_t1")"
    echo "--- stdout"; echo "$out"; echo "--- stderr"; echo "$err"
}

# Runs hvxrun on host ${HVX_NETNS_PREFIX}1, its remote shell $launcher_exec (default: the fakessh;
# "$HVX_NETNS_STATE/ssh" after `netns_hosts.sh sshd`); stdout, stderr, rc and elapsed_ms land in
# $out, $err, $rc and $elapsed_ms. hvxrun bounds the job (--timeout) and `timeout` bounds hvxrun.
launch() {
    launch_bg "$@"
    finish
}

# launch_bg ARGS...: the same in the background, for a test that acts while the job runs: its pid
# in $pid, its output growing in $HVX_NETNS_STATE/out and err. `finish` waits for it and sets what
# launch sets.
launch_bg() {
    launch_t0=$(date +%s%N)
    timeout -k 5 90 "$NETNS" exec "${HVX_NETNS_PREFIX}1" "$HVXRUN" --mpiexec "$MPIEXEC" \
        --launcher-exec "${launcher_exec:-$HVX_NETNS_STATE/fakessh}" --timeout 60 --start-timeout 20 "${extra[@]}" "$@" \
        >"$HVX_NETNS_STATE/out" 2>"$HVX_NETNS_STATE/err" </dev/null &
    pid=$!
}

finish() {
    wait "$pid"
    rc=$?
    launch_t1=$(date +%s%N)
    elapsed_ms=$(((launch_t1 - launch_t0) / 1000000))
    out=$(cat "$HVX_NETNS_STATE/out")
    err=$(cat "$HVX_NETNS_STATE/err")
}

count_lines() { grep -cE -- "$2" <<<"$1"; }

# no_processes_left HOST...: nothing runs in those namespaces any more, allowing 2.5 s for what a
# stopped job is still ending (a rank wrapper's shared-memory sweeper outlives it by milliseconds).
no_processes_left() {
    local h left i
    for h in "$@"; do
        for ((i = 0; i < 50; i++)); do
            left=$(ip netns pids "$h" 2>/dev/null | tr '\n' ' ')
            [[ -z $left ]] && break
            sleep 0.05
        done
        [[ -n $left ]] && ps -o pid,ppid,etimes,args -p "${left// /,}" 2>/dev/null | sed 's/^/    /'
        [[ -z $left ]]; check "no processes left on $h ($left)" $?
    done
}

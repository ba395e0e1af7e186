#!/usr/bin/env bash
# A host whose /dev/shm is Docker's default 64 MiB (SageMaker has no setting for it) holds less
# than the shared-memory plane's regions for 4 ranks (16 MiB each, plus MPICH's own): with the
# default HVX_CPU_PLANE=auto the job falls back to MPI and rank 0 says why, with the sizes to fix
# it; with HVX_CPU_PLANE=shm every rank fails saying so. A private mount namespace (root) gives
# the job its own small /dev/shm; without root the test prints SKIPPED and passes.
#   small_devshm_test.sh HVXRUN FAULT_PROBE MPIEXEC
set -uo pipefail
HVXRUN=$(readlink -f "$1")
PROBE=$(readlink -f "$2")
MPIEXEC=$(readlink -f "$3")
T=${TEST_TMPDIR:-$(mktemp -d)}
if [[ $(id -u) != 0 ]] || ! unshare -m true 2>/dev/null; then
    echo "SKIPPED: needs root to mount a small /dev/shm in a mount namespace"
    exit 0
fi
failures=0
check() {  # check NAME STATUS (0 = ok)
    if [[ $2 == 0 ]]; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}
run() {  # run PLANE: 4 ranks with a 64 MiB /dev/shm, output in $T/out, exit status in $rc
    timeout -k 5 60 unshare -m sh -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"' sh \
        "$HVXRUN" --mpiexec "$MPIEXEC" -x HVX_CPU_PLANE="$1" -np 4 -- "$PROBE" --steps 3 \
        >"$T/out" 2>&1
    rc=$?
    cat "$T/out"
}
sizes='/dev/shm has 64 MiB, [0-9]+ MiB of it free, and each of the 4 ranks of this host needs 16 MiB'

run auto
[[ $rc == 0 && $(grep -c 'rank [0-3] done' "$T/out") == 4 ]]
check "HVX_CPU_PLANE=auto: the job falls back to MPI and ends 0 (rc=$rc)" $?
grep -qE "^\[0\] W.*CPU allreduce over MPI: .*$sizes" "$T/out"
check "rank 0 says why, with /dev/shm's size and what the ranks need" $?

run shm
[[ $rc != 0 ]]; check "HVX_CPU_PLANE=shm: the job fails (rc=$rc)" $?
grep -qE "HVX_CPU_PLANE=shm: .*$sizes" "$T/out"; check "naming /dev/shm's size" $?

echo "failures: $failures"
[[ $failures == 0 ]]

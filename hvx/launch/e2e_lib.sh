# Sourced by the hvxrun end-to-end tests here (`*_e2e_test.sh HVXRUN MPIEXEC`): absolute paths of
# hvxrun and MPICH's mpiexec in HVXRUN and MPIEXEC, a scratch folder in T, and check/finish.
HVXRUN=$(readlink -f "$1")
MPIEXEC=$(readlink -f "$2")
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

check() {  # check NAME STATUS (0 = ok)
    if [[ $2 == 0 ]]; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}

finish() {  # the test's exit status
    echo "failures: $failures"
    [[ $failures == 0 ]]
}

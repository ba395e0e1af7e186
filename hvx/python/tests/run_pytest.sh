#!/usr/bin/env bash
# Runs the hvx.torch pytest suite on NP ranks of one hvxrun job, each rank running every test.
#   run_pytest.sh HVXRUN PYTHON NP [PYTEST ARGS...]
set -uo pipefail
HVXRUN=$(readlink -f "$1"); PYTHON=$(readlink -f "$2"); NP=$3; shift 3
ROOT=$PWD  # the runfiles tree: hvx/python holds the package, hvx/_C.so included
export PYTHONPATH="$ROOT/hvx/python"
# A failing rank ends the job at once; a rank left waiting for a peer gives up after this long.
export HVX_COLLECTIVE_TIMEOUT_S=60
cd "${TEST_TMPDIR:-$(mktemp -d)}" || exit 1
exec "$HVXRUN" -np "$NP" -- "$PYTHON" -m pytest -q -p no:cacheprovider "$@" "$ROOT/hvx/python/tests"

#!/usr/bin/env bash
# Runs one pytest module of the trainer's tests (trainer_harness.py beside it).
#   run_pytest.sh PYTHON TEST_FILE [NAME=PATH ...]: each NAME is exported as PATH made absolute.
set -uo pipefail
PYTHON=$(readlink -f "$1"); TEST=$PWD/$2; shift 2
for a in "$@"; do export "${a%%=*}=$(readlink -f "${a#*=}")"; done
# hvx.models (//hvx/python:torch) where a test has it, and the helpers beside the test.
export PYTHONPATH="$PWD/hvx/python:$(dirname "$TEST")${PYTHONPATH:+:$PYTHONPATH}"
T=${TEST_TMPDIR:-$(mktemp -d)}
cd "$T" || exit 1
log=$T/pytest.log
"$PYTHON" -m pytest -q -p no:cacheprovider --basetemp="$T/pytest" -o console_output_style=classic -rA "$TEST" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# A module that skips every test (pytest.importorskip of a package this Python lacks) is a skip,
# said in the line tools/test_summary counts, not a pass or a failure.
if tail -n 1 "$log" | grep -qE '^=* *[0-9]+ skipped in ' ; then
    echo "SKIPPED: $(grep -m1 -E '^SKIPPED \[' "$log" | sed -E 's/^SKIPPED \[[0-9]+\] [^ ]+: //')"
    exit 0
fi
exit "$rc"

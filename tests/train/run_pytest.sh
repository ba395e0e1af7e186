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
exec "$PYTHON" -m pytest -q -p no:cacheprovider --basetemp="$T/pytest" -o console_output_style=classic -rA "$TEST"
